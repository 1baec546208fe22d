"""The local Slurm test cluster behaves like the real thing where our submissions depend on it:
GPU requests, accounting states and dependency handling. Each test submits real jobs."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest


def test_gpu_job_completes_and_sees_all_gpus(slurm, tmp_path: Path) -> None:
    out = tmp_path / "gpu.out"
    job = slurm.sbatch(
        f"--gpus-per-node={slurm.gpus_per_node}", "-o", str(out),
        "--wrap", 'echo "batch=$CUDA_VISIBLE_DEVICES"; srun bash -c \'echo "step=$CUDA_VISIBLE_DEVICES"\'',
    )
    assert slurm.wait(job) == "COMPLETED", out.read_text() if out.exists() else "no output"
    lines = dict(line.split("=", 1) for line in out.read_text().split())
    expected = [str(i) for i in range(slurm.gpus_per_node)]
    assert lines["batch"].split(",") == expected
    assert lines["step"].split(",") == expected  # an srun step (what NeMo-Run launches) sees them too
    tres = slurm.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "AllocTRES").stdout
    assert f"gres/gpu={slurm.gpus_per_node}" in tres


def test_sacct_reports_failed_with_exit_code(slurm, tmp_path: Path) -> None:
    job = slurm.sbatch("-o", str(tmp_path / "fail.out"), "--wrap", "exit 3")
    assert slurm.wait(job) == "FAILED"
    exit_code = slurm.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "ExitCode").stdout.strip()
    assert exit_code == "3:0"


def test_afterok_dependent_of_failed_job_is_cancelled(slurm, tmp_path: Path) -> None:
    parent = slurm.sbatch("-o", str(tmp_path / "parent.out"), "--wrap", "exit 3")
    marker = tmp_path / "child-ran"
    child = slurm.sbatch(
        "--kill-on-invalid-dep=yes", f"--dependency=afterok:{parent}",
        "-o", str(tmp_path / "child.out"), "--wrap", f"touch {marker}",
    )
    assert slurm.wait(parent) == "FAILED"
    assert slurm.wait(child, timeout=60) == "CANCELLED"
    assert not marker.exists()


def test_afterok_dependent_without_kill_flag_pends_forever(slurm, tmp_path: Path) -> None:
    """The trap that makes --kill-on-invalid-dep=yes necessary: without it the child never leaves the queue."""
    parent = slurm.sbatch("-o", str(tmp_path / "parent.out"), "--wrap", "exit 3")
    child = slurm.sbatch(f"--dependency=afterok:{parent}", "-o", str(tmp_path / "child.out"), "--wrap", "true")
    try:
        assert slurm.wait(parent) == "FAILED"
        reason = ""
        for _ in range(40):
            reason = slurm.run("squeue", "-h", "-j", child, "-o", "%T %r").stdout.strip()
            if reason == "PENDING DependencyNeverSatisfied":
                break
            time.sleep(0.25)
        assert reason == "PENDING DependencyNeverSatisfied"
    finally:
        slurm.run("scancel", child, check=False)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ("--gpus-per-node=9", "Requested node configuration is not available"),
        ("--nodes=2", "Node count specification invalid"),
    ],
    ids=["9-gpus", "2-nodes"],
)
def test_impossible_requests_are_refused_at_submission(slurm, request_: str, message: str) -> None:
    """Refused up front (EnforcePartLimits=ALL) rather than pending forever."""
    with pytest.raises(subprocess.CalledProcessError) as err:
        slurm.sbatch(request_, "--wrap", "true")
    assert message in err.value.stderr


def test_unknown_account_is_refused(slurm) -> None:
    """Accounts are enforced as on a real cluster, so a wrong profile account fails at submission."""
    with pytest.raises(subprocess.CalledProcessError) as err:
        slurm.run("sbatch", "--parsable", "-p", slurm.partition, "-A", "no-such-account", "--wrap", "true")
    assert "Invalid account" in err.value.stderr


def test_shared_data_is_found(shared_data: Path) -> None:
    assert (shared_data / "README.md").is_file()
