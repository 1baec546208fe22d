"""Submission over SSH: NeMo-Run's SSHTunnel to a private sshd on localhost, in front of the real local
Slurm cluster (tests/ssh_support.py says how the sshd is set up without touching the system's).

The submitting command runs without ``SLURM_CONF``: Slurm is reachable only through the SSH login
(whose sessions get ``SLURM_CONF`` from the test sshd's ``SetEnv``, as a login node has its Slurm
configured), so a job that completes went through the tunnel: files by SFTP, NeMo-Run's experiment
folder by rsync over ssh, sbatch/sacct/scancel and the logs over ssh.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from submit_support import nemotron_runner, write_slurm_profile

pytest.importorskip("nemo_run", reason="submission needs NeMo-Run (a base dependency: reinstall nemotron-cli)")

SECRET = "s3cret-over-ssh-9031"


@pytest.fixture
def env_file(slurm, sshd, tmp_path) -> Path:
    """Profile `login`: the local cluster behind the test sshd (NeMo-Run's SSHTunnel)."""
    return write_slurm_profile(
        tmp_path / "env.toml", name="login", account=slurm.account, partition=slurm.partition,
        gpus_per_node=slurm.gpus_per_node, job_dir=tmp_path / "cluster jobs",
        extra=f'tunnel = "ssh"\nhost = "127.0.0.1"\nuser = "{sshd.user}"\nport = {sshd.port}\n'
              f'identity = "{sshd.identity}"\npython = "{sys.executable}"\n'
              f'secrets = {{ NEMOTRON_TEST_SECRET = "{SECRET}" }}')


@pytest.fixture
def cli(sshd, tmp_path):
    """The CLI without SLURM_CONF: Slurm is reachable only through the SSH login."""
    return nemotron_runner({**sshd.env, "NEMOTRON_HOME": str(tmp_path / "home")}, tmp_path,
                           drop=("SLURM_CONF", "NEMOTRON_ENV_FILE"))


def test_run_over_ssh_completes(cli, env_file, tmp_path, sshd):
    out_dir = tmp_path / "cluster jobs" / "rl out"  # on the cluster's storage (job_dir): a cluster job writes only there
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "login", "--env-file", str(env_file),
               f"output_dir={out_dir}", 'profile.setup=["echo secret-length=${#NEMOTRON_TEST_SECRET}"]')
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + sshd.log()[-1500:]
    assert "Slurm job" in proc.stderr and "COMPLETED" in proc.stderr
    assert "train.jsonl" in proc.stdout  # the job's log, read over ssh while it ran
    assert (out_dir / "train.jsonl").is_file()
    assert "artifact rl-data v1" in proc.stderr
    runs = list((tmp_path / "cluster jobs" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "train.yaml").is_file() and (runs[0] / "code" / "nemotron").is_dir()
    assert oct((runs[0] / "secrets.env").stat().st_mode & 0o777) == "0o600"
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "cluster jobs").rglob("*.out"))
    assert f"secret-length={len(SECRET)}" in logs  # the secret reached the job ...
    leaks = [p for p in (tmp_path / "cluster jobs").rglob("*")
             if p.is_file() and p.name != "secrets.env" and SECRET in p.read_text(errors="replace")]
    assert not leaks and SECRET not in proc.stdout + proc.stderr  # ... and nothing else
    assert "Accepted publickey" in sshd.log()  # it came through our sshd
    # NeMo-Run's experiment folder was written on this side first, then rsynced to the cluster's job root
    assert list((tmp_path / "home" / "ssh-staging" / "experiments").rglob("*_sbatch.sh"))
    assert list((tmp_path / "cluster jobs" / "experiments").rglob("*_sbatch.sh"))


def test_batch_status_logs_cancel_over_ssh(cli, env_file, slurm):
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "login", "--env-file", str(env_file),
               'profile.setup=["echo sleeping-now", "sleep 120"]')
    assert proc.returncode == 0, proc.stderr[-2000:]
    job_id = proc.stdout.strip().splitlines()[-1]
    assert job_id.isdigit()
    try:
        deadline = time.time() + 60
        while slurm.state(job_id) != "RUNNING" and time.time() < deadline:
            time.sleep(0.5)
        status = cli("ultra3", "status", job_id)
        assert status.returncode == 0 and "RUNNING" in status.stdout, status.stdout + status.stderr
        deadline = time.time() + 30
        logs = cli("ultra3", "logs", job_id)
        while "sleeping-now" not in logs.stdout and time.time() < deadline:
            time.sleep(1)
            logs = cli("ultra3", "logs", job_id)
        assert "sleeping-now" in logs.stdout, logs.stderr
        cancel = cli("ultra3", "cancel", job_id)
        assert cancel.returncode == 0, cancel.stderr
        assert slurm.wait(job_id, timeout=60) == "CANCELLED"
    finally:
        slurm.run("scancel", job_id, check=False)
    status = cli("ultra3", "status", job_id)
    assert "CANCELLED" in status.stdout


def test_refused_login_is_one_clear_line(sshd, env_file, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    env = {**sshd.env, "NEMOTRON_HOME": str(tmp_path / "home")}
    env.pop("SLURM_CONF", None)
    proc = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch",
                           "login", "--env-file", str(env_file), f"profile.identity={other}"], check=False, env=env,
                          cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          start_new_session=True)  # no terminal: Paramiko's password prompt cannot wait for one
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"cannot log in to {sshd.user}@127.0.0.1 (port {sshd.port}) over SSH" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_refused_job_over_ssh_leaves_no_folder(cli, env_file, tmp_path, sshd):
    """sbatch on the login node refuses the job (no such partition): the run folder that SFTP wrote there and
    NeMo-Run's experiment folder (local staging copy and, if it was copied, the cluster's) are removed
    through the same login; the job root itself stays."""
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "login", "--env-file", str(env_file),
               "profile.partition=no-such-partition")
    assert proc.returncode == 1, proc.stderr[-2000:]
    # the warnings of the dry-run's checks, if any, come first
    lines = [x for x in proc.stderr.strip().splitlines() if not x.startswith("warning: ")]
    assert len(lines) == 2 and lines[0].startswith("error: submission of ultra3 data prep rl failed: "), lines
    root = tmp_path / "cluster jobs"
    assert root.is_dir() and (root / "runs").is_dir()  # written there, then emptied
    assert not [p for p in root.rglob("*") if p.is_file()] and not list((root / "runs").iterdir())
    assert not list((root / "experiments").glob("*/*"))
    assert not list((tmp_path / "home" / "ssh-staging" / "experiments").glob("*/*"))
    assert "Accepted publickey" in sshd.log()
