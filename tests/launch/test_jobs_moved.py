"""`status` and `logs` of a job whose folders were moved: one line naming the missing path, exit 1.

Before: `status` printed UNKNOWN and `logs` "has written no log yet", both with exit 0. The first test runs a
real job (data prep rl, `-c tiny`, on a `local` profile through NeMo-Run's LocalExecutor), then moves its
folders; the second asks Slurm's commands (through the `local` tunnel, as for a Slurm profile on this machine)
about a job whose record names folders that are gone.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from submit_support import nemotron_runner


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    out = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "NEMOTRON_DATA_DIR": str(tmp_path / "data"),
           "COLUMNS": "200"}
    out.pop("NEMOTRON_ENV_FILE", None)
    return out


def _one_line_error(proc, *needles: str) -> None:
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    assert "UNKNOWN" not in proc.stdout + proc.stderr and "no log yet" not in proc.stderr


def test_local_job_moved_status_and_logs_name_the_missing_folder(env, tmp_path):
    pytest.importorskip("nemo_run", reason="the local executor is NeMo-Run's")
    root = tmp_path / "job root"
    env_file = tmp_path / "env.toml"
    env_file.write_text(f'[here]\nexecutor = "local"\ngpus_per_node = 0\njob_dir = "{root}"\n', encoding="utf-8")
    cli = nemotron_runner(env, tmp_path)
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "here", "--env-file", str(env_file),
               f"output_dir={tmp_path / 'rl out'}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rec = json.loads(next((tmp_path / "home" / "submissions").glob("*.json")).read_text())
    follow = cli("ultra3", "logs", rec["job_id"], "-f")  # waits for the end
    assert follow.returncode == 0, follow.stderr[-2000:]
    ok = cli("ultra3", "status", rec["job_id"])
    assert ok.returncode == 0 and "COMPLETED" in ok.stdout, ok.stdout + ok.stderr
    assert cli("ultra3", "logs", rec["job_id"]).stdout.strip()

    # the log folder (NeMo-Run's experiment folder) moved away: logs says which path is gone
    shutil.move(root / "experiments", tmp_path / "experiments-moved")
    _one_line_error(cli("ultra3", "logs", rec["job_id"]), rec["job_id"], f"log folder {rec['log_dir']} does not exist")
    _one_line_error(cli("ultra3", "status", rec["job_id"]), f"log folder {rec['log_dir']} does not exist")
    shutil.move(tmp_path / "experiments-moved", root / "experiments")
    assert cli("ultra3", "status", rec["job_id"]).returncode == 0

    # the whole job root moved: the run folder (which holds the job's state) is named
    shutil.move(root, tmp_path / "moved root")
    for command in ("status", "logs"):
        _one_line_error(cli("ultra3", command, rec["job_id"]), f"run folder {rec['run_dir']} does not exist",
                        "moved or deleted")
    # only the state file gone (the folder is there): named too, never UNKNOWN
    shutil.move(tmp_path / "moved root", root)
    os.remove(os.path.join(rec["run_dir"], "local-job.json"))
    _one_line_error(cli("ultra3", "status", rec["job_id"]), "local-job.json does not exist")


def test_slurm_job_with_moved_folders_status_and_logs_exit_1(env, tmp_path):
    """A Slurm record (tunnel `local`: Slurm's commands run on this machine) whose run and log folders are gone.
    Without a Slurm here, sacct/squeue know nothing and the folders are what is reported; with one, the job id
    is unknown to it as well; with Slurm's commands installed but unable to answer, the folders are still what
    ``status`` names (the more specific answer), and ``logs`` of a job whose folders are there says Slurm cannot
    be asked."""
    home = tmp_path / "home" / "submissions"
    home.mkdir(parents=True)
    run_dir, log_dir = tmp_path / "gone" / "runs" / "exp-1", tmp_path / "gone" / "experiments" / "exp-1"
    rec = {"experiment_id": "ultra3-pretrain-moved-1", "job_id": "987654321", "stage": "pretrain",
           "title": "ultra3 pretrain", "profile": "cluster", "env_file": str(tmp_path / "env.toml"),
           "run_dir": str(run_dir), "log_dir": str(log_dir), "job_name": "ultra3-pretrain", "tunnel": "local",
           "submitted": 1.0}
    (home / "ultra3-pretrain-moved-1.json").write_text(json.dumps(rec), encoding="utf-8")
    cli = nemotron_runner(env, tmp_path)
    _one_line_error(cli("ultra3", "status", "987654321"), f"run folder {run_dir} does not exist",
                    f"log folder {log_dir} does not exist")
    _one_line_error(cli("ultra3", "logs"), f"log folder {log_dir} does not exist")
    # the folders there, no log yet: that is what logs says then (exit 0)
    log_dir.mkdir(parents=True)
    run_dir.mkdir(parents=True)
    proc = cli("ultra3", "logs", "987654321")
    if _slurm_broken_here(env):  # Slurm's commands installed but pointing nowhere: that is the answer, in one line
        _one_line_error(proc, "cannot ask Slurm about job 987654321")
    else:
        assert proc.returncode == 0 and "no log yet" in proc.stderr, proc.stderr


def _slurm_broken_here(env: dict[str, str]) -> bool:
    """Whether this machine has ``sacct`` but it cannot answer (no ``SLURM_CONF``, no controller): a third case
    beside "no Slurm here" and "a running Slurm here" (the CI's)."""
    import subprocess

    if shutil.which("sacct", path=env.get("PATH")) is None:
        return False
    return subprocess.run(["sacct", "-n", "-j", "1"], env=env, capture_output=True, timeout=60).returncode != 0


def test_status_lines_never_wrap_an_id(tmp_path):
    """`status` prints name: value lines (nemotron.launch.jobs.status_lines): a long id stays on one line whatever the
    terminal width, so it can be copied."""
    from nemotron.launch import jobs

    rec = jobs.JobRecord(experiment_id="ultra3-data-prep-pretrain-tiny-20261202-054908-c0c5f7", job_id="ultra3-"
                         "data-prep-pretrain-q8x1kz7c9d", stage="data_prep_pretrain", title="ultra3 data prep pretrain",
                         profile="here", env_file="env.toml", run_dir=str(tmp_path / "runs" / "x"),
                         log_dir=str(tmp_path / "experiments" / "x"), job_name="ultra3-data-prep-pretrain")
    lines = jobs.status_lines(rec, "COMPLETED", "0")
    assert lines[0].split() == ["job:", rec.job_id] and lines[1].split() == ["experiment:", rec.experiment_id]
    assert any(ln.endswith(str(tmp_path / "runs" / "x")) for ln in lines)
