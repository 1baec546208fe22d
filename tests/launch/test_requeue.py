"""The requeue decision of a training job (issue #13, item 5), without a cluster: the marker a stage writes when
it saved and stopped on a signal, the Megatron-Bridge entry's reading of how far its run got, and the lines
of the batch script that decide on the host (run end to end on the local Slurm cluster by
tests/launch/test_resume_slurm.py).

Megatron-Bridge's ``pretrain`` cannot load here (Python 3.12, Transformer Engine, GPUs): the callable given to
``train_exit_code`` stands in for it and ends as its training loop does after the exit signal's save
(``training/train.py``: ``checkpoint_and_decide_exit`` saves, the loop breaks, ``sys.exit(exit_code)`` with 0),
writing Megatron's real tracker file ``latest_checkpointed_iteration.txt`` into a checkpoint folder first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from config_support import config_valid
from nemotron.runtime.dispatch import REQUEUE_MARKER_ENV, mark_stopped
from nemotron.runtime.megatron import megatron_bridge as mb

ROOT = Path(__file__).resolve().parents[2]


def _megatron_bridge_stand_in(ckpt: Path, saved: int):
    """What Megatron-Bridge's ``pretrain`` leaves and how it ends after the exit-signal save (module docstring)."""

    def train() -> None:
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / f"iter_{saved:07d}").mkdir(exist_ok=True)
        (ckpt / "latest_checkpointed_iteration.txt").write_text(str(saved))
        sys.exit(0)

    return train


def test_megatron_bridge_early_save_is_75_and_writes_the_marker(tmp_path, capsys):
    """pretrain ends with SystemExit(0) after a save at iteration 12 of 20: the entry returns 75 (not 0, not the
    SystemExit), says so, and global rank 0 writes the marker the batch script requeues on."""
    marker = tmp_path / "run" / "requeue.marker"
    marker.parent.mkdir()
    env = {REQUEUE_MARKER_ENV: str(marker), "RANK": "0"}
    code = mb.train_exit_code(_megatron_bridge_stand_in(tmp_path / "ckpt", 12), "pretrain", tmp_path / "ckpt", 20,
                              env)
    assert code == 75
    assert "ultra3 pretrain: saved at iteration 12 of 20 and stopped; the next job of this run resumes there" in \
        capsys.readouterr().out
    assert marker.read_text() == "ultra3 pretrain: saved at iteration 12 of 20 and stopped\n"


def test_megatron_bridge_other_ranks_finished_runs_and_failures(tmp_path):
    marker = tmp_path / "requeue.marker"
    other_rank = {REQUEUE_MARKER_ENV: str(marker), "RANK": "3"}
    stopped = _megatron_bridge_stand_in(tmp_path / "a", 12)
    assert mb.train_exit_code(stopped, "sft", tmp_path / "a", 20, other_rank) == 75
    assert not marker.exists()  # one writer: global rank 0
    rank0 = {REQUEUE_MARKER_ENV: str(marker), "RANK": "0"}
    assert mb.train_exit_code(_megatron_bridge_stand_in(tmp_path / "b", 20), "sft", tmp_path / "b", 20, rank0) == 0
    assert not marker.exists()  # the run is complete: nothing to requeue
    assert mb.train_exit_code(lambda: None, "sft", tmp_path / "never-saved", 20, rank0) == 1  # returned, saved nothing

    def failed() -> None:
        sys.exit(3)  # a code of Megatron-Bridge's own (its rerun state machine) goes through unchanged

    with pytest.raises(SystemExit) as exc:
        mb.train_exit_code(failed, "sft", tmp_path / "b", 20, rank0)
    assert exc.value.code == 3 and not marker.exists()


def test_entry_writes_the_marker_only_in_a_job_that_asks_and_only_on_rank_zero(tmp_path, capsys):
    marker = tmp_path / "requeue.marker"
    assert mark_stopped("ultra3 pretrain", env={}) is False  # a run here: no marker asked for
    assert mark_stopped("ultra3 pretrain", env={REQUEUE_MARKER_ENV: str(marker), "RANK": "1"}) is False
    assert mark_stopped("ultra3 pretrain", env={REQUEUE_MARKER_ENV: str(marker), "SLURM_PROCID": "2"}) is False
    assert not marker.exists()
    assert mark_stopped("ultra3 pretrain", "saved at iteration 4 of 6 and stopped",
                        {REQUEUE_MARKER_ENV: str(marker), "SLURM_PROCID": "0"}) is True
    assert mark_stopped("ultra3 pretrain", env={REQUEUE_MARKER_ENV: str(marker)}) is True  # kept, not overwritten
    assert marker.read_text() == "ultra3 pretrain: saved at iteration 4 of 6 and stopped\n"
    missing = tmp_path / "no such folder" / "requeue.marker"
    assert mark_stopped("ultra3 pretrain", env={REQUEUE_MARKER_ENV: str(missing)}) is False
    assert capsys.readouterr().err.startswith(f"ultra3 pretrain: cannot write the requeue marker {missing} (")
    assert capsys.readouterr().out == ""


def test_entry_of_a_stage_that_returns_75_writes_the_marker(tmp_path):
    """The real entry (`nemotron.runtime.dispatch.run`, as a stage's run.py calls it) of a runtime that saved and stopped
    (exit 75) writes the marker itself and runs no Slurm command in the step."""
    marker = tmp_path / "requeue.marker"
    (tmp_path / "stopper.py").write_text("def main(cfg):\n    return 75\n")
    (tmp_path / "train.yaml").write_text("backend: stopper\n")
    code = ("import sys; from nemotron.runtime.dispatch import Backend, run; "
            "sys.exit(run('ultra3 pretrain', {'stopper': Backend('stopper:main')}, 'stopper', sys.argv[1:]))")
    env = {"PATH": "/nonexistent", "PYTHONPATH": f"{tmp_path}:{ROOT / 'src'}", REQUEUE_MARKER_ENV: str(marker),
           "SLURM_JOB_ID": "7", "NEMOTRON_SLURM_REQUEUE": "1"}  # no scontrol reachable: none is needed here
    proc = subprocess.run([sys.executable, "-c", code, "--config", str(tmp_path / "train.yaml")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 75, proc.stderr
    assert marker.read_text() == "ultra3 pretrain: saved and stopped on a signal\n"
    assert "requeue" not in proc.stdout + proc.stderr


def test_dry_run_shows_the_host_side_decision_of_a_training_job(tmp_path, monkeypatch, capsys):
    """The rendered sbatch script of a training stage removes a stale marker before the step and decides after it
    (trap on exit, `scontrol requeue` in the batch script itself); a stage without run keys gets none of it."""
    pytest.importorskip("nemo_run", reason="the sbatch script is rendered by NeMo-Run")
    from nemotron.cli.main import main

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    env = ROOT / "tests" / "fixtures" / "env.toml"
    code = main(["ultra3", "sft", "-c", "tiny", "--dry-run", "--batch", "sample", "--env-file", str(env)])
    out = capsys.readouterr().out
    assert config_valid(code, out), out[-2000:]  # 2: inputs not made yet
    script = out[out.index("#!/bin/bash"):]
    marker = next(ln.split("=", 1)[1] for ln in script.splitlines() if ln.startswith("export NEMOTRON_REQUEUE_MARKER="))
    assert marker.startswith("/shared/jobs/runs/") and marker.endswith("/requeue.marker")
    setup, after = script.index(f"rm -f {marker}"), script.index("# Command 1")
    assert setup < script.index("trap 'nemotron_after_step \"${exitcode:-}\"' EXIT") < after
    assert '    if scontrol requeue "$SLURM_JOB_ID"; then' in script
    code = main(["ultra3", "convert", "-c", "tiny", "--dry-run", "--batch", "sample", "--env-file", str(env)])
    out = capsys.readouterr().out
    assert config_valid(code, out), out[-2000:]  # 2: inputs not made yet
    assert "nemotron_after_step" not in out and "NEMOTRON_REQUEUE_MARKER" not in out
