"""Resume and requeue on the real local Slurm cluster, with the `local` runtime standing in for
Megatron-Bridge (the cluster runtime cannot run here: no NVIDIA container, no GPUs).

The requeue decision is the batch script's, on the host: the stage only writes the requeue marker when it
saved and stopped (the job step runs no Slurm command; inside a container there is none), and the batch
script reads it after the step, runs `scontrol requeue` itself and ends with exit code 75. The step runs
under torchrun, as a GPU stage's does, so its own exit code is torchrun's (1), not the stage's 75.

Each test submits `nemotron ultra3 pretrain -c local --batch` to the one-node cluster (jobs on the host's
Python, through NeMo-Run's torchrun launcher as a GPU stage is), sends the job the signal Slurm sends
`run.signal_before_s` before its time limit (`scancel --signal=TERM`: the same delivery, to every process of
the job's steps, without waiting out a real time limit), and checks that the next job of the run resumes
from the step the signalled one saved. The model is the real catalogue `small` NemotronH on a few steps of
32-token samples from our own .bin/.idx blend.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from config_support import config_valid
from local_runtime_support import write_pretrain_data
from test_submit_slurm import cli, env_file  # noqa: F401  (fixtures: the CI profile and the CLI runner)

pytest.importorskip("nemo_run", reason="submission needs NeMo-Run (a base dependency: reinstall nemotron-cli)")
pytest.importorskip("transformers", reason="the local runtime needs transformers (pip install 'nemotron-cli[local]')")

ITERS = 6


def _overrides(tmp_path: Path, ckpt: Path) -> list[str]:
    blend = write_pretrain_data(tmp_path / "data", docs=60, valid_docs=10)
    return [f"data.per_split_data_args_path={blend}", f"checkpoint.save={ckpt}", "model.seq_length=32",
            f"train.train_iters={ITERS}", "train.global_batch_size=2", "train.micro_batch_size=2",
            "validation.eval_iters=0", "checkpoint.save_interval=2", "+checkpoint.most_recent_k=1",
            "logger.log_interval=1", "scheduler.lr_warmup_iters=1", f"scheduler.lr_decay_iters={ITERS}",
            "run.env.cpus=2"]


@pytest.fixture
def submitted(slurm):
    """Job ids the test submitted; any still queued or running at the end are cancelled."""
    ids: list[str] = []
    yield ids
    for job in ids:
        if slurm.state(job) not in ("COMPLETED", "FAILED", "CANCELLED"):
            slurm.run("scancel", job, check=False)


def _saved_steps(folder: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").is_file())


def _wait(predicate, timeout: float, what: str, slurm=None, job: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    state = slurm.state(job) if slurm and job else "?"
    pytest.fail(f"timed out after {timeout}s waiting for {what} (job {job}: {state})")


def _logs(root: Path, job: str) -> dict[int, str]:
    """The task log of each start of the job: NeMo-Run names them ``log-..._<job>_<restart count>.out``."""
    out = {}
    for p in root.rglob(f"log-*_{job}_*.out"):
        out[int(p.stem.rsplit("_", 1)[1])] = p.read_text(errors="replace")
    return out


def _batch_log(root: Path, job: str) -> str:
    """The batch script's own output (``sbatch_<job name>_<job id>.out``; every start of the job appends to it)."""
    return "".join(p.read_text(errors="replace") for p in root.rglob(f"sbatch_*_{job}.out"))


def _logged_steps(ckpt: Path) -> list[int]:
    lines = (ckpt / "metrics.jsonl").read_text().splitlines() if (ckpt / "metrics.jsonl").exists() else []
    return [json.loads(x)["step"] for x in lines if "loss" in json.loads(x)]


@pytest.mark.slow
def test_signalled_job_saves_requeues_itself_and_resumes(cli, env_file, slurm, submitted, tmp_path):  # noqa: F811
    """The warning signal reaches the training process, which saves at the end of its step, writes the requeue
    marker and exits 75; the batch script, after the step, requeues the job (`scontrol requeue`: same job id,
    restart count 1); the second start resumes from the saved step and finishes. Slurm holds a requeued job for
    the lifetime of its job credential before it may start again (`AuthInfo=cred_expire`, 120 s by default; the
    test cluster sets 10 s). Starting it earlier (`scontrol update StartTime=now`) makes slurmd refuse the launch
    ("Job credential revoked") and the job FAILED, so the test waits out the hold as an operator must."""
    ckpt = tmp_path / "ckpt"
    proc = cli("ultra3", "pretrain", "-c", "local", "--batch", "ci", "--env-file", str(env_file),
               *_overrides(tmp_path, ckpt))
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = proc.stdout.strip().splitlines()[-1]
    submitted.append(job)
    jobs_root = tmp_path / "job root with spaces"
    script = "".join(p.read_text() for p in jobs_root.rglob("*_sbatch.sh"))
    assert "#SBATCH --signal=TERM@60" in script and "NEMOTRON_SLURM_REQUEUE=1" in script
    assert "torchrun" in script and "trap 'nemotron_after_step" in script
    _wait(lambda: _saved_steps(ckpt), 240, "the first checkpoint", slurm, job)
    slurm.run("scancel", "--signal=TERM", job)

    def requeued() -> bool:
        return "Restarts=1" in slurm.run("scontrol", "show", "job", job, check=False).stdout

    _wait(requeued, 120, "the job to requeue itself", slurm, job)
    stopped_at = _saved_steps(ckpt)[-1]
    assert 2 <= stopped_at < ITERS
    assert slurm.wait(job, timeout=300) == "COMPLETED", (_logs(jobs_root, job), _batch_log(jobs_root, job)[-3000:])
    logs = _logs(jobs_root, job)
    assert set(logs) == {0, 1}, sorted(logs)
    assert "SIGTERM received" in logs[0] and f"stopped by SIGTERM at step {stopped_at}/{ITERS}" in logs[0]
    assert "requeue" not in logs[0]  # the step asked nothing of Slurm
    batch = _batch_log(jobs_root, job)
    assert "[nemotron] ultra3 pretrain: saved and stopped on a signal" in batch
    assert f"[nemotron] requeued Slurm job {job} (restart 1); it resumes from the saved checkpoint" in batch
    assert f"resuming from {ckpt / f'checkpoint-{stopped_at}'} (step {stopped_at})" in logs[1]
    steps = _logged_steps(ckpt)
    second = steps[steps.index(stopped_at + 1):]  # what the second start trained: from the saved step on
    assert second == list(range(stopped_at + 1, ITERS + 1)), steps
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(ITERS)
    assert (ckpt / "model.safetensors").is_file()


@pytest.mark.slow
def test_chain_continuation_resumes_a_signalled_run(cli, env_file, slurm, submitted, tmp_path):  # noqa: F811
    """`run.chain=1` without requeue: the first job saves on the signal and ends with exit code 75 (FAILED; the
    batch script's code from the marker, where torchrun's own is 1); the continuation job, held by
    `--dependency=singleton` until then, resumes from the saved step and completes the run."""
    ckpt = tmp_path / "ckpt"
    proc = cli("ultra3", "pretrain", "-c", "local", "--batch", "ci", "--env-file", str(env_file),
               "run.chain=1", "run.requeue=false", *_overrides(tmp_path, ckpt))
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = proc.stdout.strip().splitlines()[-1]
    m = re.search(r"continuation jobs \(run.chain=1, --dependency=singleton\): (\d+)", proc.stderr)
    assert m, proc.stderr[-2000:]
    second = m.group(1)
    submitted.extend([first, second])
    show = slurm.run("scontrol", "show", "job", second).stdout
    assert "Dependency=singleton" in show and "JobName=ultra3-pretrain-local" in show
    _wait(lambda: _saved_steps(ckpt), 240, "the first checkpoint", slurm, first)
    assert slurm.state(second) == "PENDING"  # singleton: not while the first runs
    slurm.run("scancel", "--signal=TERM", first)
    assert slurm.wait(first, timeout=120) == "FAILED"
    exit_code = slurm.run("sacct", "-n", "-X", "-P", "-j", first, "-o", "ExitCode").stdout.strip()
    assert exit_code == "75:0", exit_code
    stopped_at = _saved_steps(ckpt)[-1]
    assert slurm.wait(second, timeout=300) == "COMPLETED", exit_code
    jobs_root = tmp_path / "job root with spaces"
    first_log = _logs(jobs_root, first)[0]
    assert f"stopped by SIGTERM at step {stopped_at}/{ITERS}" in first_log and "requeued" not in first_log
    batch = _batch_log(jobs_root, first)
    assert "[nemotron] run.requeue is off: the job ends with exit code 75" in batch
    assert f"requeued Slurm job {first}" not in batch
    assert f"resuming from {ckpt / f'checkpoint-{stopped_at}'} (step {stopped_at})" in _logs(jobs_root, second)[0]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(ITERS)


def test_warning_signal_must_come_before_the_time_limit(tmp_path, monkeypatch, capsys):
    """No cluster needed: the dry-run refuses a warning at or past the profile's time, as one of its problems
    (listed with any others, the job not rendered)."""
    from nemotron.cli.main import main

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    env = Path(__file__).resolve().parents[1] / "fixtures" / "env.toml"  # profile `sample`: time = 02:00:00
    code = main(["ultra3", "pretrain", "-c", "tiny", "run.signal_before_s=7200", "run.chain=2", "--dry-run",
                 "--batch", "sample", "--env-file", str(env)])
    cap = capsys.readouterr()
    assert code == 2
    assert ("error: run.signal_before_s=7200: the warning signal must come before the job's time limit (02:00:00 = "
            "7200 s, profile sample key time); valid: set run.signal_before_s below 7200 or give the profile a longer "
            "time") in cap.out.splitlines()
    assert cap.err.splitlines()[0] == "error: 1 error found before anything was queued"
    code = main(["ultra3", "pretrain", "-c", "tiny", "run.signal_before_s=0", "run.requeue=false", "--dry-run",
                 "--batch", "sample", "--env-file", str(env)])
    out = capsys.readouterr().out
    assert config_valid(code, out) and "--signal" not in out and "NEMOTRON_SLURM_REQUEUE" not in out
    assert "nemotron_after_step" not in out  # no run key left: no requeue decision in the script
