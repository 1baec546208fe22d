"""An attached run with ``run.chain`` on the real local Slurm cluster: the command follows every job of the
chain in turn and exits with the chain's result. The stage is `pretrain -c local` (the `local` runtime, the
real catalogue `small` NemotronH on a few 32-token steps on the CPU), as in tests/launch/test_resume_slurm.py.
"""

from __future__ import annotations

import re

import pytest

from test_resume_slurm import ITERS, _overrides, submitted  # noqa: F401  (fixture: cancels what is left)
from test_submit_slurm import cli, env_file  # noqa: F401  (fixtures: the CI profile and the CLI runner)

pytest.importorskip("nemo_run", reason="submission needs NeMo-Run (a base dependency: reinstall nemotron-cli)")
pytest.importorskip("transformers", reason="the local runtime needs transformers (pip install 'nemotron-cli[local]')")


def _chain_ids(stderr: str) -> tuple[str, str]:
    first = re.search(r"submitted ultra3 pretrain: Slurm job (\d+)", stderr)
    rest = re.search(r"continuation jobs \(run.chain=1, --dependency=singleton\): (\d+)", stderr)
    assert first and rest, stderr[-2000:]
    return first.group(1), rest.group(1)


@pytest.mark.slow
def test_attached_chain_follows_each_job_to_completion(cli, env_file, slurm, submitted, tmp_path):  # noqa: F811
    """`--run ... run.chain=1`: the first job trains to the end (COMPLETED), the continuation job finds the run
    complete and ends at once (COMPLETED); both logs are streamed, with the line that moves on, and exit 0."""
    ckpt = tmp_path / "ckpt"
    proc = cli("ultra3", "pretrain", "-c", "local", "--run", "ci", "--env-file", str(env_file), "run.chain=1",
               *_overrides(tmp_path, ckpt), timeout=600)
    first, second = _chain_ids(proc.stderr)
    submitted.extend([first, second])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert slurm.state(first) == "COMPLETED" and slurm.state(second) == "COMPLETED"
    moved = f"[nemotron] job {first} ended COMPLETED (exit code 0:0); continuing with job {second} (run.chain 1/1)"
    assert moved in proc.stderr.splitlines(), proc.stderr[-2000:]
    assert proc.stderr.index(f"[nemotron] job {second}: ") > proc.stderr.index(moved)  # followed after the first
    assert f"done: {ITERS} steps" in proc.stdout  # the first job's training log ...
    assert f"already complete: {ckpt}" in proc.stdout  # ... then the second's
    assert "artifact " in proc.stderr and (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(ITERS)


def test_attached_chain_whose_jobs_fail_exits_1_naming_them(cli, env_file, slurm, submitted, tmp_path):  # noqa: F811
    """The first job fails (its setup line exits 3 before the stage starts): the command shows that failure,
    goes on with the continuation job (singleton: it starts whatever the first's end), which fails the same
    way and ends the chain: exit 1, the failed jobs named."""
    proc = cli("ultra3", "pretrain", "-c", "local", "--run", "ci", "--env-file", str(env_file), "run.chain=1",
               'profile.setup=["echo failing-on-purpose", "exit 3"]', *_overrides(tmp_path, tmp_path / "ckpt"))
    first, second = _chain_ids(proc.stderr)
    submitted.extend([first, second])
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert f"[nemotron] job {first} ended FAILED (exit code 3:0); last log lines:" in lines, proc.stderr[-2000:]
    assert (f"[nemotron] job {first} ended FAILED (exit code 3:0); continuing with job {second} "
            f"(run.chain 1/1)") in lines
    assert lines.index(f"[nemotron] job {second} ended FAILED (exit code 3:0); last log lines:") > \
        lines.index(f"[nemotron] job {first} ended FAILED (exit code 3:0); last log lines:")
    assert "artifact " not in proc.stderr


def test_attached_chain_failure_whose_successor_was_cancelled_names_it(cli, env_file, slurm, submitted,  # noqa: F811
                                                                       tmp_path):
    """The first job cancels the continuation job while it is pending, then fails: the continuation never
    started and is skipped, so the chain ends with the first job's failure: exit 1, that job named."""
    cancel_next = ("until squeue -h -t PENDING -n $SLURM_JOB_NAME -o %i | grep -q .; do sleep 1; done; "
                   "scancel --state=PENDING --name=$SLURM_JOB_NAME")
    proc = cli("ultra3", "pretrain", "-c", "local", "--run", "ci", "--env-file", str(env_file), "run.chain=1",
               f'profile.setup=["{cancel_next}", "exit 3"]', *_overrides(tmp_path, tmp_path / "ckpt"))
    first, second = _chain_ids(proc.stderr)
    submitted.extend([first, second])
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert f"[nemotron] job {second} was cancelled before it started" in lines, proc.stderr[-2000:]
    assert lines[-1] == f"[nemotron] run.chain ended with job {first}: FAILED (exit code 3:0)", lines[-3:]
    assert lines.count(f"[nemotron] job {first} ended FAILED (exit code 3:0); last log lines:") == 1
