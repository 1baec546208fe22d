"""The seed's post-training chain on this machine, from SFT to MTP boosting, as one command (issue 33): ``pipe
data-prep-sft sft data-prep-rl rlvr mopd-warmup mopd mopd mtp-boost -c local`` (the real CLI in a subprocess, the
real ``small`` NemotronH, the real data of ``data prep sft/rl -c tiny``). The data prep stages are in the chain
because the pipe's first-use rule asks for them (``sft`` and ``rlvr`` refuse to start without ``sft-data`` /
``rl-data``). The base is a freshly initialised ``small`` checkpoint registered with ``model import --as
pretrain-checkpoint -c local`` (a local pretrain run is tested in ``test_runtime_local.py``).

The settings are this test's (the ``local`` configs users run are untouched): 1,024-token SFT packs and 2 SFT steps,
1 RLVR step, 2 warmup SFT steps, 2 steps per MOPD cycle, 2 MTP head steps, a few tokens each; the test took 4 min
48 s on the 2-core machine at load 2.4-3.3 (286 CPU-seconds), 12 min 10 s at load 10-13. It checks that every stage ran, the final table's reverse KL of
the warmup and of each MOPD cycle and the MTP acceptance length before/after (numbers), and the lineage: each
stage's artifact is what the next one loaded (its run's resolved config, and what the runtime wrote it loaded)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rl_support import checkpoint, tokenizer_folder

ROOT = Path(__file__).resolve().parents[2]

#: The test's sizes (docstring): each key a `STAGE:key=value` the pipe passes to that stage (`mopd:` to both cycles).
SMALL = ["data-prep-sft:pack.pack_size=1024", "sft:model.seq_length=1024", "sft:train.train_iters=2",
         "sft:scheduler.lr_decay_iters=2", "sft:validation.eval_interval=2", "sft:checkpoint.save_interval=2",
         "rlvr:grpo.max_num_steps=1", "rlvr:checkpointing.save_period=1", "rlvr:grpo.num_generations_per_prompt=2",
         "rlvr:policy.train_global_batch_size=4", "rlvr:policy.generation_batch_size=4",
         "rlvr:policy.generation.max_new_tokens=8", "rlvr:grpo.val_at_end=false",
         "mopd-warmup:warmup.num_prompts=8", "mopd-warmup:warmup.max_new_tokens=8", "mopd-warmup:warmup.kl_prompts=2",
         "mopd-warmup:warmup.kl_new_tokens=6", "mopd-warmup:sft.max_num_steps=2",
         "mopd:grpo.max_num_steps=2", "mopd:checkpointing.save_period=2", "mopd:policy.generation.max_new_tokens=8",
         "mopd:grpo.val_at_end=false", "mtp-boost:train.train_iters=2", "mtp-boost:data.train_prompts=4",
         "mtp-boost:data.continuation_tokens=8", "mtp-boost:mtp_boost.new_tokens=6"]
NUM = r"[0-9][0-9.e+-]*"


def _run_config(home: Path, run: str) -> dict:
    """The resolved config a stage ran with: ``<home>/runs/<run>-<stamp>/train.yaml`` (the one run of that name)."""
    found = sorted((home / "runs").glob(f"{run}-2*/train.yaml"))
    assert len(found) == 1, (run, found)
    return yaml.safe_load(found[0].read_text())


def _same(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


@pytest.mark.slow
@pytest.mark.timeout(1500)  # about 6 minutes alone; a CI worker shares 2 cores with another (docs/testing.md)
def test_local_chain_from_sft_through_two_mopd_cycles_to_mtp_boost(tmp_path):
    home, ckpts = tmp_path / "home", tmp_path / "ckpts"
    env = {**os.environ, "NEMOTRON_HOME": str(home), "NEMOTRON_CKPT_ROOT": str(ckpts),
           "NEMOTRON_DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1", "NEMOTRON_WRAP": "0",
           "PYTHONPATH": str(ROOT / "src")}
    base = checkpoint(ckpts / "given" / "base", tokenizer_folder(ckpts / "given" / "tokenizer"), 3)
    cli = [sys.executable, "-m", "nemotron", "ultra3"]
    imp = subprocess.run([*cli, "model", "import", str(base), "--as", "pretrain-checkpoint", "-c", "local"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert imp.returncode == 0, imp.stdout + imp.stderr
    cmd = [*cli, "pipe", "data-prep-sft", "sft", "data-prep-rl", "rlvr", "mopd-warmup", "mopd", "mopd", "mtp-boost",
           "-c", "local", *SMALL]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    check_chain(out, home, ckpts, base)


def check_chain(out: str, home: Path, ckpts: Path, base: Path) -> None:
    """The pipe's output ``out``, its records under ``home`` and its checkpoints under ``ckpts``, from ``base``."""
    from nemotron.config import artifacts

    # the final table: every stage exit 0; the warmup's and each cycle's reverse KL, the acceptance length before/after
    table = out[out.rindex("pipe: every stage"):]
    for row in (r"1\s+ultra3 data prep sft\s+local\s+0\s", rf"2\s+ultra3 sft\s+local\s+0\s+\d+\s+train_loss {NUM}",
                r"3\s+ultra3 data prep rl\s+local\s+0\s", rf"4\s+ultra3 rlvr\s+local\s+0\s+\d+\s+reward {NUM}",
                rf"5\s+ultra3 mopd-warmup\s+local\s+0\s+\d+\s+kl_before {NUM}, kl_after {NUM}",
                rf"6\s+ultra3 mopd\s+local\s+0\s+\d+\s+kl {NUM}, kl_first {NUM}",
                rf"7\s+ultra3 mopd\s+local-cycle2\s+0\s+\d+\s+kl {NUM}, kl_first {NUM}",
                rf"8\s+ultra3 mtp-boost\s+local\s+0\s+\d+\s+acceptance_length_before {NUM}, acceptance_length_after "
                rf"{NUM}"):
        assert re.search(rf"^{row}", table, re.M), (row, table)

    # the records: one version each, two of mopd-checkpoint (one per cycle, each in its own folder)
    artifacts.set_root(home / "artifacts")
    try:
        rec = {name: artifacts._read(name, 1) for name in ("pretrain-checkpoint", "sft-data", "sft-checkpoint",
                                                           "rl-data", "rl-checkpoint", "mopd-warmup-checkpoint",
                                                           "mopd-checkpoint", "mtp-checkpoint")}
        cycle2 = artifacts._read("mopd-checkpoint", 2)
    finally:
        artifacts.set_root(None)
    assert rec["pretrain-checkpoint"]["stage"] == "import" and _same(rec["pretrain-checkpoint"]["path"], base)
    assert [rec["mopd-checkpoint"]["config"], cycle2["config"]] == ["local", "local-cycle2"]
    assert rec["mopd-checkpoint"]["path"].startswith(str(ckpts / "ultra3-mopd-local" / "hf"))
    assert cycle2["path"].startswith(str(ckpts / "ultra3-mopd-local-cycle2" / "hf"))

    # lineage: each stage loaded the artifact the stage before recorded (its resolved config, and what it wrote)
    sft, rl = rec["sft-checkpoint"]["path"], rec["rl-checkpoint"]["path"]
    warm, mopd1, mopd2 = rec["mopd-warmup-checkpoint"]["path"], rec["mopd-checkpoint"]["path"], cycle2["path"]
    lin = {d: json.loads((ckpts / d / "lineage.json").read_text())
           for d in ("ultra3-sft-local", "ultra3-rlvr-local", "ultra3-mopd-local", "ultra3-mopd-local-cycle2")}
    assert _same(lin["ultra3-sft-local"]["pretrained_checkpoint"], base)
    assert lin["ultra3-sft-local"]["inputs"]["dataset.dataset_root"] == rec["sft-data"]["path"]
    assert _same(lin["ultra3-rlvr-local"]["policy"], sft)
    assert _same(lin["ultra3-rlvr-local"]["data"], rec["rl-data"]["train_path"])
    warm_cfg = _run_config(home, "ultra3-mopd-warmup-local")  # the local warmup's student is the base (local.yaml)
    assert _same(warm_cfg["policy"]["model_name"], base)
    assert _same(warm_cfg["_teachers"]["reasoning"], rl) and _same(warm_cfg["_teachers"]["general"], sft)
    warm_summary = json.loads((ckpts / "ultra3-mopd-warmup-local" / "summary.json").read_text())
    assert _same(warm_summary["teachers"]["math"], rl) and warm_summary["output"] == warm
    assert _same(lin["ultra3-mopd-local"]["policy"], warm) and _same(lin["ultra3-mopd-local"]["teachers"]["math"], rl)
    assert _same(lin["ultra3-mopd-local-cycle2"]["policy"], mopd1)  # cycle 2 starts from cycle 1 ...
    assert _same(lin["ultra3-mopd-local-cycle2"]["teachers"]["nemotron_default_teacher"], mopd1)  # ... its teacher
    mtp = json.loads((Path(rec["mtp-checkpoint"]["path"]) / "summary.json").read_text())
    assert _same(mtp["source"], mopd2) and mtp["speculative_equals_greedy"] is True
