"""NeMo RL's own OPD routing and advantage (NVIDIA-NeMo/RL main 7ea279a) on the rows our ``mopd`` job hands it.

NeMo RL computes teacher log-probs only for rollouts that carry NeMo Gym's ``agent_ref``
(``nemo_rl/algorithms/async_utils/trajectory_collector.py`` ``_enqueue_rollout_group``), and the OPD advantage
raises ``OPD requires teacher_logprobs`` without them (``nemo_rl/algorithms/advantage_estimator.py``). This test
takes the compiled ``mopd -c tiny`` config, the data rows the job writes for it
(``nemotron.runtime.rl.nemo_rl.gym_data``, from real GSM8K problems of ../shared/data/rl in data prep rl's JSONL form)
and the translated config, and runs in the contract interpreter, with NeMo RL's own code:

1. the job's dataset class and data processor, by the names the config gives (``load_response_dataset``,
   ``PROCESSOR_REGISTRY``), and ``rl_collate_fn``: the batch the rollout starts from;
2. the rollout's ``agent_ref`` as NeMo RL builds it: for NeMo Gym from each row (``extra_env_info``, as
   ``run_async_nemo_gym_rollout`` does); the native rollout keeps the input batch's keys
   (``_run_multi_turn_rollout_async``), so it has ``agent_ref`` only if the collated batch has;
3. ``AsyncTrajectoryCollector._compute_teacher_logprobs`` (its own routing: ``resolve_reference_aliases`` with
   the job's ``teacher_model_by_agent_name`` / ``default_teacher_alias``), the collector made without its Ray
   ``__init__``; each teacher worker group is a tiny seeded torch model (embedding + linear over the real
   131,072-entry tokenizer's ids) keyed by its checkpoint path — the one stand-in: a teacher is a GPU model;
4. ``OPDAdvantageEstimator.compute_advantage`` with those teacher log-probs and a student's.

Where the proof stops: NeMo Gym itself (the ``math_with_judge`` server that scores the rows) is not in the archive;
no Ray, vLLM or GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.data import rl as rl_data
from nemotron.runtime.rl import nemo_rl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_nemo_rl import H200, _tokenizer  # noqa: E402

from nemotron import validation  # noqa: E402

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "rl" / "gsm8k-train.jsonl"

SCRIPT = r'''
import collections, json, threading, types
import torch
from upstream import read_payload, write_result
from transformers import PreTrainedTokenizerFast
from nemo_rl.data.datasets.response_datasets import load_response_dataset
from nemo_rl.data.processors import PROCESSOR_REGISTRY
from nemo_rl.data.interfaces import TaskDataSpec
from nemo_rl.data.collate_fn import rl_collate_fn
from nemo_rl.algorithms.advantage_estimator import OPDAdvantageEstimator
from nemo_rl.algorithms.async_utils.trajectory_collector import AsyncTrajectoryCollector

p = read_payload()
master = p["master"]
tok = PreTrainedTokenizerFast(tokenizer_file=p["tokenizer"] + "/tokenizer.json", pad_token="<pad>")
tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
data = master["data"]
conf = {**data["default"], **data["train"]}
ds = load_response_dataset({k: v for k, v in conf.items() if k not in ("processor", "env_name")})
rows = list(ds.dataset)[: p["n"]]
proc = PROCESSOR_REGISTRY[data["default"]["processor"]]
spec = TaskDataSpec(task_name=data["default"].get("env_name"))
datums = [proc(dict(r), spec, tok, 4096, i) for i, r in enumerate(rows)]
batch = rl_collate_fn(datums)
gym = bool(master["env"].get("should_use_nemo_gym"))
if gym:
    agent_refs = [json.loads(r) if isinstance(r, str) else r for r in batch["extra_env_info"]]
    agent_refs = [r["agent_ref"] for r in agent_refs]
else:
    agent_refs = batch["agent_ref"] if "agent_ref" in batch else None

texts = [r["question"] if gym else r["messages"][0]["content"] for r in
         ([json.loads(x) for x in open(data["train"]["data_path"])][: p["n"]] if gym else
          [json.loads(x) for x in open(data["train"]["data_path"])][: p["n"]])]
enc = [tok(t)["input_ids"][:64] for t in texts]
lengths = torch.tensor([len(e) for e in enc])
ids = torch.full((len(enc), int(lengths.max())), tok.pad_token_id)
for i, e in enumerate(enc):
    ids[i, : len(e)] = torch.tensor(e)

class TinyModel:
    """Next-token log-probs of a seeded embedding + linear model over the tokenizer's ids (a GPU model's stand-in)."""
    def __init__(self, name):
        self.name, self.rows = name, 0
        g = torch.Generator().manual_seed(sum(map(ord, name)))
        self.emb = torch.randn(len(tok), 8, generator=g) * 0.5
        self.out = torch.randn(8, 64, generator=g)
        self.sharding_annotations = types.SimpleNamespace(get_axis_size=lambda axis: 1)
    def logprobs(self, input_ids):
        h = self.emb[input_ids]                        # [B, S, 8]
        logits = torch.cat([h @ self.out, h @ self.out.flip(1)], -1)  # [B, S, 128]: ids hashed to 128 classes
        lp = torch.log_softmax(logits, -1)
        nxt = (input_ids[:, 1:] % 128).unsqueeze(-1)
        out = torch.zeros(input_ids.shape, dtype=torch.float32)
        out[:, 1:] = lp[:, :-1].gather(-1, nxt).squeeze(-1)
        return out
    def get_logprobs(self, data):
        self.rows += data["input_ids"].shape[0]
        return {"reference_logprobs": self.logprobs(data["input_ids"])}

opd_cfg = master.get("on_policy_distillation") or {}
tmap = opd_cfg.get("teacher_model_by_agent_name") or {}
teachers = {path: TinyModel(path) for path in set(tmap.values())}
cls = AsyncTrajectoryCollector.__ray_metadata__.modified_class
col = object.__new__(cls)
col.on_policy_distillation_cfg = opd_cfg
col.alias_to_group_alias = {}
col.teacher_worker_groups = {alias: teachers[path] for alias, path in tmap.items()}
col._teacher_locks = collections.defaultdict(threading.Lock)
col._has_distillation_teachers = bool(col.teacher_worker_groups)

res = {"gym": gym, "agent_refs": agent_refs, "batch_keys": sorted(batch.keys())}
# the collector's condition, as _enqueue_rollout_group states it, on the final batch (which keeps the input keys)
final = dict(batch)
if gym:
    final["agent_ref"] = agent_refs
res["routed"] = bool(col._has_distillation_teachers and "agent_ref" in final)
teacher_lp = None
if res["routed"]:
    teacher_lp, _ = col._compute_teacher_logprobs(ids, final["agent_ref"], input_lengths=lengths)
    res["teacher_rows"] = {t.name: t.rows for t in teachers.values()}
student = TinyModel("student").logprobs(ids)
mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).float()
mask[:, 0] = 0
est = OPDAdvantageEstimator({}, {})
try:
    adv = est.compute_advantage(torch.arange(len(enc)), torch.zeros(len(enc)), mask,
                                teacher_logprobs=teacher_lp, prev_logprobs=student)
    expect = {name: ((t.logprobs(ids) - student) * mask) for name, t in teachers.items()}
    res["advantage"] = {"finite": bool(torch.isfinite(adv).all()), "nonzero": int((adv != 0).sum()),
                        "equals_teacher": [name for name, e in expect.items() if torch.allclose(adv, e)]}
except ValueError as exc:
    res["advantage_error"] = str(exc)
write_result(res)
'''


def _gsm8k_rows(folder: Path, n: int) -> Path:
    """``n`` GSM8K problems in data prep rl's JSONL form (``messages``: problem, answer), by our extractor."""
    out = folder / "train.jsonl"
    with GSM8K.open(encoding="utf-8") as f, out.open("w", encoding="utf-8") as w:
        for line in list(f)[:n]:
            problem, answer, _ = rl_data.extract(json.loads(line), "gsm8k")
            w.write(json.dumps({"messages": [{"role": "user", "content": problem},
                                             {"role": "assistant", "content": answer}], "task": "math"}) + "\n")
    return out


def test_mopd_tiny_rows_reach_their_teacher_and_opd_takes_a_step(upstream, tmp_path):
    if not GSM8K.is_file():
        pytest.skip(f"{GSM8K} is absent (../shared/data)")
    tok = _tokenizer(tmp_path / "tok")
    rows = _gsm8k_rows(tmp_path, 6)
    c = compile_config(get_stage("mopd"), "tiny", [
        f"policy.model_name={tok}", f"data.train.data_path={rows}", f"data.validation.data_path={rows}",
        "_teachers.general=/ckpt/student", "_teachers.reasoning=/ckpt/reasoning"], check_paths=False)
    validation.prepare(get_stage("mopd"), c.config, c.user_keys, H200)
    # what launch() does before it writes nemo_rl_config.yaml: the rows in the form the job hands NeMo RL
    data_views = nemo_rl.gym_data(c.config, tmp_path / "gym-data") if hasattr(nemo_rl, "gym_data") else {}
    master = nemo_rl.translate(c.config, None, data_views) if data_views else nemo_rl.translate(c.config)
    out = upstream.run(SCRIPT, {"master": master, "tokenizer": str(tok), "n": 6}, timeout=600)
    assert "advantage_error" not in out, out.get("advantage_error")
    assert out["routed"], f"no rollout carries agent_ref; batch keys {out['batch_keys']}"
    assert {r["name"] for r in out["agent_refs"]} == {"math_with_judge_simple_agent"}
    # math_with_judge_simple_agent -> the reasoning slot (teacher_routing.by_agent) -> /ckpt/reasoning
    assert out["teacher_rows"] == {"/ckpt/reasoning": 6, "/ckpt/student": 0}
    assert out["advantage"]["finite"] and out["advantage"]["nonzero"] > 0
    assert out["advantage"]["equals_teacher"] == ["/ckpt/reasoning"]


def test_native_math_rows_never_reach_a_teacher_and_opd_raises(upstream, tmp_path):
    """The refuted-by-running half of the defect: the previous MOPD config (native math path) as NeMo RL runs it,
    and our dry-run's ``nemo-rl-opd-routing`` rule refusing the same config."""
    if not GSM8K.is_file():
        pytest.skip(f"{GSM8K} is absent (../shared/data)")
    tok = _tokenizer(tmp_path / "tok")
    rows = _gsm8k_rows(tmp_path, 4)
    native = ["env.should_use_nemo_gym=false", "environments.math.kind=builtin", "data.default.env_name=math",
              "data.default.processor=math_hf_data_processor", "data.default.dataset_name=ResponseDataset",
              "data.train.dataset_name=ResponseDataset", "data.validation.dataset_name=ResponseDataset"]
    c = compile_config(get_stage("mopd"), "tiny", [
        f"policy.model_name={tok}", f"data.train.data_path={rows}", f"data.validation.data_path={rows}",
        "_teachers.general=/ckpt/student", *native], check_paths=False)
    validation.prepare(get_stage("mopd"), c.config, c.user_keys, H200)
    master = nemo_rl.translate(c.config)
    out = upstream.run(SCRIPT, {"master": master, "tokenizer": str(tok), "n": 4}, timeout=600)
    assert out["agent_refs"] is None and "agent_ref" not in out["batch_keys"]
    assert not out["routed"]
    assert out["advantage_error"] == "OPD requires teacher_logprobs"
    problems = validation.validate(get_stage("mopd"), c.config, H200)
    assert [p.key for p in problems if p.rule == "nemo-rl-opd-routing"] == ["env.should_use_nemo_gym"]
