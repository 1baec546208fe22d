"""What the benchmarks share: timing one command, and the env.toml of the local Slurm cluster (through
tests/submit_support.py, which the Slurm tests use too)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from submit_support import NO_CLUSTER, cluster_from_env, write_slurm_profile


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, subprocess.CompletedProcess]:
    """Run ``argv`` (output captured, no stdin); returns (wall seconds, the finished process)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, check=False, env=env, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0, proc


def slurm_profile(folder: str, time_limit: str) -> tuple[Path, dict] | None:
    """``(env.toml, cluster)``: profile ``ci`` of the local Slurm cluster written in ``folder`` (jobs under
    ``folder/jobs``, ``time_limit`` as its Slurm time), or None, after saying why on stderr, when the
    environment has no cluster."""
    cluster = cluster_from_env()
    if cluster is None:
        print(NO_CLUSTER, file=sys.stderr)
        return None
    path = write_slurm_profile(Path(folder) / "env.toml", account=str(cluster["account"]),
                               partition=str(cluster["partition"]), job_dir=f"{folder}/jobs", time=time_limit)
    return path, cluster
