"""The seed's chain after RLVR on this machine, as one command: ``pipe data-prep-rl mopd-warmup mopd mopd mtp-boost
-c local`` (the real CLI in a subprocess, the real ``small`` NemotronH, the real GSM8K sample of ``data prep rl -c
tiny``). The pretrain, SFT and RLVR checkpoints are freshly initialised ``small`` models recorded as artifacts (a
local pretrain/SFT/RLVR run is tested elsewhere and takes minutes each). It checks that each stage ran, that the two
MOPD cycles are two versions of ``mopd-checkpoint`` in their own folders, that the second started from the first,
and that the final table shows the warmup's reverse KL before/after and each cycle's reverse KL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rl_support import checkpoint, tokenizer_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_local_chain_warmup_two_mopd_cycles_and_mtp_boost(tmp_path):
    from nemotron.config import artifacts

    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "NEMOTRON_CKPT_ROOT": str(tmp_path / "ckpts"),
           "NEMOTRON_DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1", "NEMOTRON_WRAP": "0",
           "PYTHONPATH": str(ROOT / "src")}
    tok = tokenizer_folder(tmp_path / "ckpts" / "given" / "tokenizer")
    given = {name: checkpoint(tmp_path / "ckpts" / "given" / folder, tok, seed)
             for name, folder, seed in (("pretrain-checkpoint", "pretrain", 3), ("sft-checkpoint", "sft", 7),
                                        ("rl-checkpoint", "rlvr", 8))}
    record = ("import os\nfrom nemotron.config import artifacts\n"
              f"for name, path in {({k: str(v) for k, v in given.items()})!r}.items():\n"
              "    artifacts.record(name, {'path': path, 'config': 'local', 'stage': 'test',"
              " **artifacts.scope_fields(None, None, os.environ, path)})\n")
    subprocess.run([sys.executable, "-c", record], env=env, check=True, cwd=tmp_path)
    cmd = [sys.executable, "-m", "nemotron", "ultra3", "pipe", "data-prep-rl", "mopd-warmup", "mopd", "mopd",
           "mtp-boost", "-c", "local",
           "mopd-warmup:warmup.num_prompts=8", "mopd-warmup:warmup.max_new_tokens=8", "mopd-warmup:warmup.kl_prompts=2",
           "mopd-warmup:warmup.kl_new_tokens=6", "mopd-warmup:sft.max_num_steps=2",
           "mopd:grpo.max_num_steps=2", "mopd:checkpointing.save_period=2", "mopd:policy.generation.max_new_tokens=8",
           "mopd:grpo.val_at_end=false", "mtp-boost:train.train_iters=2", "mtp-boost:data.train_prompts=4",
           "mtp-boost:data.continuation_tokens=8", "mtp-boost:mtp_boost.new_tokens=6"]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    table = out[out.rindex("pipe: every stage"):]
    for row in (r"1\s+ultra3 data prep rl\s+local\s+0", r"2\s+ultra3 mopd-warmup\s+local\s+0\s+\d+\s+kl_before [0-9.]+, kl_after",
                r"3\s+ultra3 mopd\s+local\s+0\s+\d+\s+kl [0-9.]+", r"4\s+ultra3 mopd\s+local-cycle2\s+0\s+\d+\s+kl [0-9.]+",
                r"5\s+ultra3 mtp-boost\s+local\s+0\s+\d+\s+acceptance_length_before"):
        assert re.search(rf"^{row}", table, re.M), (row, table)  # each cycle's reverse KL is in the final table
    # two MOPD cycles: two versions of mopd-checkpoint, each in its own folder; cycle 2 started from cycle 1
    artifacts.set_root(Path(env["NEMOTRON_HOME"]) / "artifacts")
    try:
        recs = [artifacts._read("mopd-checkpoint", v) for v in (1, 2)]
    finally:
        artifacts.set_root(None)
    assert [r["config"] for r in recs] == ["local", "local-cycle2"], recs
    c1, c2 = tmp_path / "ckpts" / "ultra3-mopd-local", tmp_path / "ckpts" / "ultra3-mopd-local-cycle2"
    assert recs[0]["path"].startswith(str(c1)) and recs[1]["path"].startswith(str(c2))
    lineage = json.loads((c2 / "lineage.json").read_text())
    assert lineage["policy"].startswith(str(c1 / "hf")), lineage
    first = json.loads((c1 / "lineage.json").read_text())
    assert first["policy"].startswith(str(tmp_path / "ckpts" / "ultra3-mopd-warmup-local" / "hf")), first
