"""Every state lookup is tied to this submission, on the real local Slurm cluster.

Slurm job ids restart when a controller's state is reset, while the accounting database keeps the old jobs: sacct
then answers for an id with a job that ended before ours was submitted. The cluster here is shared, so its
controller is not reset by a test; the same situation is made by a job record that names the id of a job that
really ran on it and ended before the record's submission (as a reset controller hands out an old id again). Also:
Slurm that cannot be asked (no ``SLURM_CONF``) is said, with how to point at it, never a silent ``UNKNOWN``; and a
cancelled job whose log shows a save and exit 75 on the way out is a cancel.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from nemotron.cli.main import main
from nemotron.errors import RuntimeFailure
from nemotron.launch import jobs, why


def _record(tmp_path: Path, job_id: str, name: str, submitted: float, folder: str = "job") -> jobs.JobRecord:
    logs = tmp_path / folder
    logs.mkdir(exist_ok=True)
    rec = jobs.JobRecord(experiment_id=f"ultra3-{folder}-{job_id}-{int(submitted)}", job_id=job_id, stage="pretrain",
                         title="ultra3 pretrain", profile="local-slurm", env_file="", run_dir=str(logs),
                         log_dir=str(logs), job_name=name, submitted=submitted)
    jobs.save(rec)
    return rec


@pytest.fixture
def old_job(slurm, tmp_path, monkeypatch):
    """A job that ran and COMPLETED on the cluster, and ended: the "older job with the same id"."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    logs = tmp_path / "old"
    logs.mkdir()
    t0 = time.time()
    job = slurm.sbatch("-J", "ultra3-pretrain-tiny", "-o", str(logs / "log-old_%j_0.out"), "--wrap", "echo old job")
    assert slurm.wait(job, timeout=120) == "COMPLETED"
    deadline = time.time() + 30  # until accounting holds its name (its first record says "allocation")
    while time.time() < deadline and slurm.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "JobName").stdout.strip() \
            != "ultra3-pretrain-tiny":
        time.sleep(0.5)
    time.sleep(1.5)  # whole seconds in Slurm's Submit time: the next submission is later by at least one
    return job, t0


def test_a_reused_job_id_never_reports_the_older_jobs_state(old_job, tmp_path, capsys):
    job, t0 = old_job
    mine = _record(tmp_path, job, "ultra3-pretrain-tiny", time.time() + 10)
    st, code = jobs.state(mine)
    assert st == "UNKNOWN" and code == "", (st, code)  # not the old job's COMPLETED
    assert not jobs.started(mine)
    assert main(["ultra3", "status", mine.experiment_id]) == 0
    out = capsys.readouterr().out
    assert "state:      UNKNOWN" in out and f"holds no job {job} named ultra3-pretrain-tiny" in out, out
    got = why.explain_job(mine.experiment_id)
    assert got["cause"] == "unknown" and "holds no job" in got["evidence"], got
    # another job name with the same id and time: not this submission either
    other = _record(tmp_path, job, "ultra3-sft-tiny", t0, folder="other")
    assert jobs.state(other)[0] == "UNKNOWN"
    # a submission made from another folder (Slurm's WorkDir) with the same id, name and time: not this one either
    elsewhere = _record(tmp_path, job, "ultra3-pretrain-tiny", t0, folder="elsewhere")
    elsewhere.work_dir = str(tmp_path / "another folder")
    assert jobs.state(elsewhere)[0] == "UNKNOWN"
    # the real submission (its name, submitted when it was, from this folder) is still found
    real = _record(tmp_path, job, "ultra3-pretrain-tiny", t0, folder="real")
    real.work_dir = os.getcwd()
    assert jobs.state(real) == ("COMPLETED", "0:0") and jobs.started(real)


def test_an_attached_run_does_not_end_on_the_older_jobs_state(old_job, tmp_path, monkeypatch):
    """`--run` printed `job N: COMPLETED` seconds after submitting: following the new submission never takes the
    old job's terminal state; Slurm never knowing it ends the wait with the reason, not with exit 0."""
    job, _ = old_job
    mine = _record(tmp_path, job, "ultra3-pretrain-tiny", time.time() + 10)
    mine.outputs = {"pretrain-checkpoint": {"path": str(tmp_path / "never-written")}}
    jobs.save(mine)
    monkeypatch.setattr(jobs, "FOLLOW_PATIENCE_S", 2.0, raising=False)
    with pytest.raises(RuntimeFailure, match=f"holds no job {job} named"):
        jobs.follow(mine, poll_s=0.2, stream=sys.stderr)
    assert not (Path(jobs.artifacts.store()) / "pretrain-checkpoint").exists()


def test_status_and_why_say_that_slurm_cannot_be_asked(old_job, tmp_path, monkeypatch, capsys):
    job, t0 = old_job
    rec = _record(tmp_path, job, "ultra3-pretrain-tiny", t0)
    monkeypatch.delenv("SLURM_CONF")
    for command in ("status", "why"):
        assert main(["ultra3", command, rec.experiment_id]) == 1, command
        err = capsys.readouterr().err
        assert f"error: cannot ask Slurm about job {job}: sacct failed:" in err, err
        assert "hint: " in err and "SLURM_CONF" in err, err


def test_a_cancelled_job_that_saved_on_the_way_out_is_a_cancel(slurm, tmp_path, monkeypatch):
    """A stage stopped by a signal saves, says so and exits 75; when that signal was `cancel` the job is CANCELLED,
    and `why` says cancelled (the save is listed as also), not "resumable-stop"."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    logs = tmp_path / "cancel"
    logs.mkdir()
    script = ("trap 'echo saved checkpoint at step 3; echo stopped, run the same command again to resume; "
              "echo exit code 75; exit 75' TERM; echo training; while true; do sleep 0.2; done")
    t0 = time.time()
    job = slurm.sbatch("-J", "ultra3-pretrain-tiny", "-o", str(logs / "log-cancel_%j_0.out"), "--wrap", script)
    rec = _record(tmp_path, job, "ultra3-pretrain-tiny", t0, folder="cancel")
    deadline = time.time() + 60
    while jobs.state(rec)[0] != "RUNNING" and time.time() < deadline:
        time.sleep(0.3)
    time.sleep(1)
    assert main(["ultra3", "cancel", job]) == 0
    assert slurm.wait(job, timeout=60) == "CANCELLED"
    deadline = time.time() + 10
    while "exit code 75" not in "".join(p.read_text() for p in logs.glob("log-*")) and time.time() < deadline:
        time.sleep(0.3)
    got = why.explain_job(job)
    assert got["state"] == "CANCELLED" and got["cause"] == "cancelled", got
    assert "resumable-stop" in [a["cause"] for a in got["also"]], got


def test_cancelled_state_beats_an_exit_75_line():
    log = "step 3\nstopped, run the same command again to resume\nexit code 75\n"
    assert why.classify(log, "CANCELLED by 0", "0:15")["cause"] == "cancelled"
    assert why.classify(log, "CANCELLED", "75:0")["cause"] == "cancelled"
    assert why.classify(log, "FAILED", "75:0")["cause"] == "resumable-stop"  # not cancelled: the stop it was
    assert why.classify("DUE TO TIME LIMIT", "CANCELLED", "0:15")["cause"] == "walltime"


def test_a_completed_jobs_artifact_needs_its_output_and_carries_its_end_time(old_job, tmp_path, monkeypatch):
    """An artifact is recorded only when the output it names is there (checked where the job ran), stamped with
    the time the job ended (sacct's End), not the time a command looked."""
    job, t0 = old_job
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    rec = _record(tmp_path, job, "ultra3-pretrain-tiny", t0, folder="outputs")
    rec.outputs = {"pretrain-checkpoint": {"path": str(tmp_path / "never-written")}}
    jobs.save(rec)
    with pytest.raises(RuntimeFailure, match=r"ended COMPLETED but its output is not there: pretrain-checkpoint: "
                                             r".*never-written does not exist; not recorded"):
        jobs.record_outputs(rec)
    assert not (tmp_path / "home" / "artifacts" / "pretrain-checkpoint").exists()
    # `status` still reports the state, and says the output is missing
    assert main(["ultra3", "status", rec.experiment_id]) == 0

    (tmp_path / "ckpt").mkdir()
    rec.outputs = {"pretrain-checkpoint": {"path": str(tmp_path / "ckpt")}}
    jobs.save(rec)
    time.sleep(1.5)
    [art] = jobs.record_outputs(rec)
    end = jobs.ended_at(rec)
    assert end is not None and art["created"] == end and end < time.time() - 1, (art, end)
