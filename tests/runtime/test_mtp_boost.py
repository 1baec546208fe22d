"""``ultra3 mtp-boost``: the local runtime (:mod:`nemotron.runtime.megatron.mtp_local`) on the real ``small`` NemotronH,
a real 131,072-entry tokenizer and real GSM8K prompts; the dry-run's refusal of the cluster route; and the
``pipe ... mopd mtp-boost quantize`` wiring, through the real CLI on the shipped configs."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from rl_support import checkpoint, compile_stage, rl_jsonl, tokenizer_folder

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="module")
def inputs(module_tmp):
    if not (SHARED / "rl" / "gsm8k-train.jsonl").is_file():
        pytest.skip(f"{SHARED} is absent (the real GSM8K prompts)")
    root = module_tmp("mtp")
    tok = tokenizer_folder(root / "tokenizer")
    train, held_out = rl_jsonl(root / "rl", SHARED, train=4, valid=2)
    return {"root": root, "tok": tok, "ckpt": checkpoint(root / "mopd", tok, seed=11), "train": train,
            "held_out": held_out}


def _local_cfg(inputs, out: Path, **over) -> dict:
    o = {"mtp_boost.source": inputs["ckpt"], "mtp_boost.output_dir": out, "data.train_path": inputs["train"],
         "data.held_out_path": inputs["held_out"], "train.train_iters": 2, "train.global_batch_size": 2,
         "data.train_prompts": 2, "data.held_out_prompts": 1, "data.max_prompt_tokens": 24,
         "data.continuation_tokens": 8, "mtp_boost.new_tokens": 6, "mtp_boost.num_steps": 2,
         "mtp_boost.draft_length": 2, **over}
    return compile_stage("mtp-boost", [f"{k}={v}" for k, v in o.items()])


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.slow  # a whole local run: model, training, two speculative decodes (about 2 CPU-minutes)
def test_local_run_trains_the_head_only_and_reports_acceptance_before_and_after(inputs, tmp_path):
    import torch

    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod
    from nemotron.runtime.megatron import mtp_local
    from nemotron.runtime.stage_metrics import collect

    out = tmp_path / "mtp"
    cfg = _local_cfg(inputs, out)
    s = mtp_local.read(cfg)
    assert (s.num_steps, s.temperature, s.draft_length) == (2, 2.0, 2)
    assert mtp_local.run(s) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["speculative_equals_greedy"] is True
    for when in ("before", "after"):
        rec = summary[when]
        assert 1.0 <= rec["acceptance_length"] <= s.draft_length + 1, rec
        assert rec["tokens"] == s.new_tokens * s.held_out_prompts
        assert rec["accepted_per_draft"] == pytest.approx(rec["acceptance_length"] - 1)
    assert summary["head_start"].startswith("fresh")
    # the backbone is the source's, byte for byte; the head is its own file
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert _sha(out / name) == _sha(inputs["ckpt"] / name), name
    # the head moved from its fresh start; the output loads as the backbone (what quantize -c local reads)
    spec = catalogue.get("small")
    fresh = mtp_local.build_head(mtp_local.head_shape(spec), s.seed)
    trained, origin = mtp_local.load_head(out, mtp_local.head_shape(spec), 0)
    assert origin.endswith(mtp_local.HEAD_FILE)
    assert any(not torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), trained.state_dict().values()))
    modelmod.load(spec, out)
    metrics = collect("mtp-boost", cfg)
    assert metrics["acceptance_length_before"] == summary["before"]["acceptance_length"]
    assert metrics["acceptance_length_after"] == summary["after"]["acceptance_length"]
    assert metrics["draft_length"] == 2 and metrics["kl"] == summary["kl_last"]


def test_drafting_computes_what_training_computed_at_that_position(inputs):
    """Step k >= 2 reads the drafts of step k-1: the rollout over a whole sequence (training) and the draft from a
    prefix (inference) give the same tokens at the prefix's last position, so training sees inference's inputs."""
    import torch

    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod
    from nemotron.runtime.megatron import mtp_local

    spec = catalogue.get("small")
    model = modelmod.load(spec, inputs["ckpt"]).eval()
    head = mtp_local.build_head(mtp_local.head_shape(spec), 3).eval()
    torch.manual_seed(0)
    seq = torch.randint(0, 1000, (1, 20))
    hidden, _ = mtp_local.backbone_forward(model, seq)
    with torch.no_grad():
        steps = mtp_local.rollout(model, head, hidden, seq[:, 1:], 3)
    for m in (5, 12):
        prefix = seq[:, :m]
        h_prefix, _ = mtp_local.backbone_forward(model, prefix)
        drafted = mtp_local.draft(model, head, h_prefix, prefix, int(seq[0, m]), 3)
        assert drafted == [int(step[0, m - 1].argmax()) for step in steps]
    # and step 2's input at a position is step 1's argmax there, not the gold token
    assert not torch.equal(steps[0].argmax(-1)[:, :-1], seq[:, 2:])


def test_kl_is_the_temperature_scaled_forward_kl_to_the_backbone():
    import torch
    import torch.nn.functional as F

    from nemotron.runtime.megatron.mtp_local import kl_loss

    torch.manual_seed(1)
    teacher = torch.randn(1, 6, 11)
    steps = [torch.randn(1, 5, 11), torch.randn(1, 5, 11)]
    total, parts = kl_loss(steps, teacher, 2.0)
    want = []
    for k, q in enumerate(steps, 1):
        n = 6 - k
        p = F.log_softmax(teacher[0, k:k + n] / 2.0, -1)
        want.append(4.0 * F.kl_div(F.log_softmax(q[0, :n] / 2.0, -1), p, log_target=True, reduction="batchmean"))
    assert parts == pytest.approx([float(w) for w in want], rel=1e-5)
    assert float(total) == pytest.approx(sum(float(w) for w in want) / 2, rel=1e-5)


def test_a_speculative_output_unlike_greedy_decoding_is_an_error(inputs):
    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod
    from nemotron.runtime.megatron import mtp_local
    from nemotron.runtime.rl.rl_data import load_tokenizer

    spec = catalogue.get("small")
    model = modelmod.load(spec, inputs["ckpt"]).eval()
    other = modelmod.build(spec, seed=99).eval()   # another backbone: its greedy output differs
    head = mtp_local.build_head(mtp_local.head_shape(spec), 0)
    prompts = mtp_local._prompt_ids(load_tokenizer(inputs["tok"]), inputs["held_out"], 1, 16, "cpu")
    with pytest.raises(mtp_local.MTPError, match=r"held-out prompt 1: speculative decoding \(draft length 2\) gave "
                                                 r"token \d+ at position \d+, the backbone's greedy decoding gives"):
        mtp_local.acceptance(model, head, prompts, 2, 6, "check", reference=other)


def test_cluster_route_is_validated_then_refused_by_dry_run_and_run(capsys, tmp_path):
    from nemotron.cli.main import main
    from nemotron.runtime.megatron.mtp_cluster import main as refuse_cluster

    for config in ("default", "tiny"):
        code = main(["ultra3", "mtp-boost", "-c", config, "--dry-run"])
        text = "".join(capsys.readouterr())
        assert code == 2, text[-2000:]
        assert re.search(r"error: backend='megatron-bridge': MTP boosting cannot run on megatron-bridge at the "
                         r"pinned versions: no KL-to-backbone MTP objective: process_mtp_loss", text), text[-3000:]
    cfg = compile_stage("mtp-boost", [], config="default", check_paths=False)
    assert cfg["model"]["mtp_num_layers"] == 7 and cfg["mtp_boost"]["temperature"] == 2.0   # the report's N, T
    assert refuse_cluster(cfg) == 2
    assert "MTP boosting cannot run on megatron-bridge" in capsys.readouterr().err
    # the job's own entry (what torchrun would start in the container) refuses the same way, before loading anything
    import subprocess
    import sys

    from rl_support import write_yaml

    path = write_yaml(tmp_path / "train.yaml", cfg)
    proc = subprocess.run([sys.executable, str(ROOT / "stages" / "ultra3" / "mtp_boost" / "run.py"), "--config",
                           str(path)], capture_output=True, text=True, env={**__import__("os").environ,
                                                                           "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 2 and "error: ultra3 mtp-boost: backend=megatron-bridge: MTP boosting cannot run on " \
        "megatron-bridge at the pinned versions" in proc.stderr, proc.stderr


@pytest.mark.parametrize("override, key", [("mtp_boost.objective=cross-entropy", "mtp_boost.objective"),
                                           ("mtp_boost.freeze_backbone=false", "mtp_boost.freeze_backbone"),
                                           ("mtp_boost.temperature=0", "mtp_boost.temperature")])
def test_local_dry_run_refuses_what_the_run_refuses(capsys, tmp_path, override, key):
    from nemotron.cli.main import main

    (tmp_path / "ckpt").mkdir()
    for name in ("t.jsonl", "v.jsonl"):
        (tmp_path / name).write_text("")
    code = main(["ultra3", "mtp-boost", "-c", "local", override, f"mtp_boost.source={tmp_path / 'ckpt'}",
                 f"data.train_path={tmp_path / 't.jsonl'}", f"data.held_out_path={tmp_path / 'v.jsonl'}",
                 f"mtp_boost.output_dir={tmp_path / 'out'}", "--dry-run"])
    text = "".join(capsys.readouterr())
    assert code == 2 and re.search(rf"error: {re.escape(key)}=", text), text[-2000:]


def test_pipe_quantize_after_mtp_boost_takes_its_checkpoint(capsys):
    from nemotron.cli.main import main

    env = str(ROOT / "tests" / "fixtures" / "env.toml")
    code = main(["ultra3", "pipe", "mopd", "mtp-boost", "quantize", "-c", "tiny", "--dry-run", "--batch", "sample",
                 "--env-file", env])
    out = capsys.readouterr().out
    quantize = out[out.index("[3/3] ultra3 quantize"):]
    source = re.search(r"^\s+source: (\S+)\s.*\(planned", quantize, re.M)
    assert source and source.group(1).endswith("ultra3-mtp-boost-tiny"), quantize[:3000]
    mtp = out[out.index("[2/3] ultra3 mtp-boost"):out.index("[3/3] ultra3 quantize")]
    assert re.search(r"^\s+source: \S+ultra3-mopd-tiny/hf/latest\s", mtp, re.M), mtp[:3000]
    assert code == 2  # the chain is refused at mtp-boost's cluster route (rule mtp-boost-framework)


def test_pinned_model_optimizer_has_no_speculative_mtp_recipe():
    """The other route the refusal names: Model Optimizer's ``speculative_mtp_boost`` lives in
    ``modelopt.torch.speculative.mtp``, which the pinned nvidia-modelopt (the quantize stage's) does not ship."""
    import importlib.metadata
    import importlib.util

    pytest.importorskip("modelopt.torch.speculative", reason="nvidia-modelopt is not installed (the local extra)")
    assert importlib.metadata.version("nvidia-modelopt").startswith("0.47")
    assert importlib.util.find_spec("modelopt.torch.speculative.mtp") is None
