"""NeMo RL's own code (RL @ 7ea279a) on what the cluster eval job hands it
(:func:`nemotron.runtime.rl.nemo_rl.eval_config` and :func:`~nemotron.runtime.rl.nemo_rl.eval_data`):
``nemo_rl.evals.eval.MasterConfig`` (pydantic) accepts the config of ``eval -c default`` and ``-c tiny``, and
``load_eval_dataset`` (its ``LocalMathDataset`` path, Hugging Face ``datasets`` reading the JSON lines) reads the
converted held-out split: every problem and expected answer of our RL JSONL comes back in order.

Where the proof stops: no Ray cluster, no vLLM, no GPU: ``setup()`` and ``run_env_eval`` of examples/run_eval.py do not
run here, and the job itself has not run on a GPU in this version.
"""

from __future__ import annotations

import json

SCRIPT = r'''
from upstream import read_payload, write_result
from nemo_rl.evals.eval import MasterConfig
from nemo_rl.data.datasets.eval_datasets import load_eval_dataset

p = read_payload()
out = {}
for name, cfg in p["configs"].items():
    MasterConfig(**cfg)
    out[name] = "ok"
ds = load_eval_dataset(p["configs"]["tiny"]["data"])
rows = [ds.rekeyed_ds[i] for i in range(len(ds.rekeyed_ds))]
write_result({"configs": out, "rows": [[r["problem"], r["expected_answer"]] for r in rows]})
'''


def test_nemo_rl_evaluator_accepts_the_eval_job(upstream, shared_data, tmp_path):
    from nemotron.runtime.rl.nemo_rl import eval_config, eval_data
    from rl_support import compile_stage, rl_jsonl

    _, valid = rl_jsonl(tmp_path / "rl", shared_data, train=2, valid=5)
    flat = tmp_path / "gsm8k_eval.jsonl"
    assert eval_data(valid, flat) == 5
    configs = {}
    for name in ("default", "tiny"):
        cfg = compile_stage("eval", [f"eval.gsm8k.data={valid}", f"generation.model_name={tmp_path}",
                                     f"eval.output_dir={tmp_path / name}"], config=name, check_paths=False)
        configs[name] = eval_config(cfg, str(flat))
        assert "checkpoints" not in configs[name]["eval"] and configs[name]["data"]["file_format"] == "json"
    got = upstream.run(SCRIPT, {"configs": configs})
    assert got["configs"] == {"default": "ok", "tiny": "ok"}
    want = [[json.loads(x)["messages"][0]["content"], json.loads(x)["messages"][1]["content"]]
            for x in valid.read_text().splitlines()]
    assert got["rows"] == want
