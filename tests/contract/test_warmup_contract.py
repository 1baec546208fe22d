"""NeMo RL's own code (RL @ 7ea279a) on what the ``mopd-warmup`` cluster job hands its SFT entry
(:func:`nemotron.runtime.rl.warmup.sft_config`): for ``-c default`` and ``-c tiny`` (prepared as the dry run prepares
them), the job YAML goes through what ``examples/run_sft.py`` does with a config before Ray starts — NeMo RL's
``register_omegaconf_resolvers`` and ``load_config`` (the ``defaults:`` inheritance of the archive's
``examples/configs/sft.yaml``), ``OmegaConf.to_container(resolve=True)``, ``nemo_rl.algorithms.sft.MasterConfig``
(pydantic) — and the generated pairs (``ResponseDataset``, ``input`` / ``output``) are read by NeMo RL's own
``load_response_dataset``. Bad configs: NeMo RL refuses each one at ``MasterConfig`` and our dry run refuses it too,
with rule ``nemo-rl-sft``.

Where the proof stops: no Ray, no vLLM (the teachers' generation pass), no Megatron model, no GPU: ``setup()`` and
``sft_train`` do not run here, and the job has not run on a GPU in this version.
"""

from __future__ import annotations

import json

import pytest

SCRIPT = r'''
import tempfile
from pathlib import Path

import yaml
from omegaconf import OmegaConf
from upstream import read_payload, write_result

import nemo_rl
from nemo_rl.algorithms.sft import MasterConfig
from nemo_rl.data.datasets import load_response_dataset
from nemo_rl.utils.config import load_config, register_omegaconf_resolvers
from nemotron.runtime.rl.warmup import sft_config

register_omegaconf_resolvers()
root = Path(nemo_rl.__file__).resolve().parent.parent
p = read_payload()
out = {}
for name, cfg in p["configs"].items():
    job = Path(tempfile.mkdtemp()) / "nemo_rl_sft.yaml"
    job.write_text(yaml.safe_dump(sft_config(cfg, p["pairs"], root), sort_keys=False))
    try:
        config = OmegaConf.to_container(load_config(str(job)), resolve=True)
        mc = MasterConfig(**config)
        out[name] = {"ok": True, "steps": mc.sft.max_num_steps, "model": mc.policy["model_name"],
                     "megatron": mc.policy["megatron_cfg"]["enabled"], "train": mc.data["train"]}
    except Exception as exc:
        out[name] = {"ok": False, "error": type(exc).__name__ + ": " + str(exc)[:300]}
ds = load_response_dataset({"dataset_name": "ResponseDataset", "data_path": p["pairs"], "input_key": "input",
                            "output_key": "output"})
first = ds.dataset[0]
write_result({"configs": out, "rows": len(ds.dataset), "first": first})
'''

#: (id, config, overrides): bad configs NeMo RL's MasterConfig refuses, and our dry run's rule nemo-rl-sft too.
BAD = [("seed-null", "tiny", ["sft.seed=null"]), ("steps-null", "default", ["sft.max_num_steps=null"])]


def _prepared(name: str, overrides: list[str], tmp_path) -> dict:
    from rl_support import compile_stage

    return compile_stage("mopd-warmup", [f"policy.model_name={tmp_path}/student", f"warmup.prompts_path={tmp_path}/t",
                                         f"warmup.held_out_path={tmp_path}/v", *overrides], config=name,
                         check_paths=False)


def test_nemo_rl_sft_entry_accepts_the_warmup_job_and_refuses_what_the_dry_run_refuses(upstream, tmp_path):
    from nemotron import validation
    from nemotron.config.registry import get_stage

    pairs = tmp_path / "train.jsonl"
    pairs.write_text("".join(json.dumps({"input": f"What is {i}+{i}?", "output": f"{2 * i}", "task": "math",
                                         "teacher": "math"}) + "\n" for i in range(3)))
    configs = {name: _prepared(name, [], tmp_path) for name in ("default", "tiny")}
    configs.update({case: _prepared(name, ov, tmp_path) for case, name, ov in BAD})
    got = upstream.run(SCRIPT, {"configs": configs, "pairs": str(pairs)})
    for name in ("default", "tiny"):
        rec = got["configs"][name]
        assert rec["ok"], rec
        assert rec["model"] == f"{tmp_path}/student" and rec["megatron"] is True
        assert rec["steps"] == configs[name]["sft"]["max_num_steps"]
        assert rec["train"]["data_path"] == str(pairs) and rec["train"]["dataset_name"] == "ResponseDataset"
    assert got["rows"] == 3
    assert "What is 0+0?" in json.dumps(got["first"]) and got["first"]["task_name"]
    stage = get_stage("mopd-warmup")
    for case, _, _ in BAD:
        assert not got["configs"][case]["ok"] and "ValidationError" in got["configs"][case]["error"], got["configs"][case]
        ours = [p.rule for p in validation.validate(stage, configs[case], None) if p.severity == "error"]
        assert "nemo-rl-sft" in ours, ours
    # and what NeMo RL accepts, our rules accept
    for name in ("default", "tiny"):
        ours = [p for p in validation.validate(stage, configs[name], None) if p.rule == "nemo-rl-sft"]
        assert ours == [], [p.render() for p in ours]


@pytest.mark.parametrize("name", ["default", "tiny"])
def test_cluster_nodes_agree(name, tmp_path):
    cfg = _prepared(name, [], tmp_path)
    assert cfg["cluster"]["num_nodes"] == cfg["run"]["env"]["nodes"]
