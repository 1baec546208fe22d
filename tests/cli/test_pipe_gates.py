"""``pipe --gates``: the gates file is checked before anything runs (the dry run too), a failed gate stops the chain
naming the gate, the value and the threshold, and without gates nothing changes; the final table of the chain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nemotron.runtime.stage_metrics import GateError, check_gates, collect, read_gates

PY = sys.executable


def test_gate_rules():
    m = {"eval_loss": 9.3, "val_accuracy": 0.25}
    assert check_gates("pretrain", m, {"eval_loss": {"max": 9.5}}, []) == []
    assert check_gates("pretrain", m, {"eval_loss": {"max": 9.0}}, []) == [
        "gate pretrain.eval_loss max 9: value 9.3 is above 9"]
    assert check_gates("mopd", m, {"val_accuracy": {"min": 0.5}}, []) == [
        "gate mopd.val_accuracy min 0.5: value 0.25 is below 0.5"]
    # max_drop: against the nearest earlier stage that reported the metric
    earlier = [{"val_accuracy": 0.5}, {"reward": 0.0}]
    assert check_gates("mopd", m, {"val_accuracy": {"max_drop": 0.3}}, earlier) == []
    assert check_gates("mopd", m, {"val_accuracy": {"max_drop": 0.1}}, earlier) == [
        "gate mopd.val_accuracy max_drop 0.1: value 0.25 is 0.25 below the earlier 0.5 (more than 0.1)"]
    assert "no earlier stage" in check_gates("mopd", m, {"val_accuracy": {"max_drop": 0.1}}, [])[0]
    # a gate on a metric the stage did not report cannot pass
    assert check_gates("pretrain", m, {"kl": {"max": 1}}, [])[0].startswith(
        "gate pretrain.kl max 1: pretrain reported no kl (it reported: eval_loss, val_accuracy)")


def test_gates_file_errors_name_the_key(tmp_path):
    p = tmp_path / "gates.yaml"
    for text, msg in (("pretrain: {eval_loss: {below: 3}}", "pretrain.eval_loss.below: not a gate"),
                      ("sft: {eval_loss: {max: 3}}", "sft: not a stage of this chain"),
                      ("pretrain: {eval_loss: {max: low}}", "pretrain.eval_loss.max='low': expected a number"),
                      ("- 1", "expected a mapping")):
        p.write_text(text)
        with pytest.raises(GateError, match=msg):
            read_gates(p, ["data-prep-pretrain", "pretrain"])
    p.write_text("pretrain: {eval_loss: {max: 3}}\n")
    assert read_gates(p, ["pretrain"]) == {"pretrain": {"eval_loss": {"max": 3.0}}}


def test_collect_reads_what_the_runtimes_write(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"eval_loss_last": 9.5, "train_loss_last": 9.9,
                                                       "tokens_per_s": 100.0, "reward_last": 0.25,
                                                       "val_accuracy_last": 0.125, "kl_last": 0.02}))
    assert collect("pretrain", {"checkpoint": {"save": str(tmp_path)}}) == {
        "train_loss": 9.9, "eval_loss": 9.5, "tokens_per_s": 100.0}
    assert collect("rlvr", {"checkpointing": {"checkpoint_dir": str(tmp_path)}})["reward"] == 0.25
    assert collect("mopd", {"checkpointing": {"checkpoint_dir": str(tmp_path)}})["kl"] == 0.02
    (tmp_path / "eval.json").write_text(json.dumps({"checkpoints": {"bf16": {"metrics": {"perplexity": 7.0,
                                                                                         "gsm8k_accuracy": 0.0}}}}))
    assert collect("eval", {"eval": {"output_dir": str(tmp_path)}}) == {"bf16.perplexity": 7.0,
                                                                       "bf16.gsm8k_accuracy": 0.0}
    assert collect("data-prep-rl", {}) == {}


@pytest.mark.slow
def test_failed_gate_stops_the_chain(tmp_path, shared_data):
    """A real chain here: data prep, pretrain (2 steps), then data prep rl. The pretrain gate cannot hold (held-out
    loss below 0.01 after 2 steps), so the chain stops after pretrain with exit 1, names gate, value and threshold,
    prints the table, and data prep rl never runs."""
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "NEMOTRON_CKPT_ROOT": str(tmp_path / "ckpt"),
           "NEMOTRON_DATA_DIR": str(tmp_path / "data"), "NEMOTRON_SHARED_DATA": str(shared_data), "PYTHONUNBUFFERED": "1"}
    env.pop("NEMOTRON_ENV_FILE", None)
    gates = tmp_path / "gates.yaml"
    gates.write_text("pretrain:\n  eval_loss: {max: 0.01}\n")
    base = [PY, "-m", "nemotron", "ultra3", "pipe", "data-prep-pretrain", "pretrain", "data-prep-rl", "-c", "local"]
    overrides = ["pretrain:train.train_iters=2", "pretrain:scheduler.lr_decay_iters=2",
                 "pretrain:scheduler.lr_warmup_iters=0", "pretrain:model.seq_length=32",
                 "pretrain:train.global_batch_size=2", "pretrain:train.micro_batch_size=2",
                 "pretrain:validation.eval_interval=2", "pretrain:validation.eval_iters=1",
                 "pretrain:checkpoint.save_interval=2", "pretrain:run.env.cpus=2"]
    args = [*base, "--gates", str(gates), *overrides]
    # the dry run reads the gates file too: a bad one is refused before anything runs
    bad = tmp_path / "bad.yaml"
    bad.write_text("pretrain:\n  eval_loss: {under: 1}\n")
    dry = subprocess.run([*base, "--gates", str(bad), "--dry-run", *overrides], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert dry.returncode == 2, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert "pretrain.eval_loss.under: not a gate (valid: max, min, max_drop)" in dry.stderr
    proc = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "pipe stopped: gate pretrain.eval_loss max 0.01: value " in proc.stderr
    assert "is above 0.01" in proc.stderr
    assert "pipe: stopped by a gate" in proc.stdout and "eval_loss" in proc.stdout
    assert not (tmp_path / "data" / "ultra3" / "rl-data").exists()  # the stage after the gate never ran
    assert (tmp_path / "ckpt" / "ultra3-pretrain-local" / "summary.json").is_file()
