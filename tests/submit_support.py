"""What the tests and benchmarks that run the real `nemotron` command and submit to the local Slurm cluster
share: an env.toml with one Slurm profile for the cluster (host Python, no containers), and a runner of
the command in a subprocess.

The cluster is the one `scripts/local_slurm.sh` starts; its account, partition and declared GPUs per node
come from the environment that `scripts/local_slurm.sh env` prints (the `slurm` fixture of conftest.py
reads the same variables).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

#: Says how to get the variables :func:`cluster_from_env` reads.
NO_CLUSTER = "no local Slurm cluster in the environment: eval \"$(bash scripts/local_slurm.sh env)\" first"


def cluster_from_env() -> dict[str, str | int] | None:
    """``{"account", "partition", "gpus_per_node"}`` of the local cluster from the environment
    (``NEMOTRON_SLURM_*``, ``SLURM_CONF``), or None when it is not set up."""
    account = os.environ.get("NEMOTRON_SLURM_ACCOUNT")
    partition = os.environ.get("NEMOTRON_SLURM_PARTITION")
    if not (os.environ.get("SLURM_CONF") and account and partition):
        return None
    return {"account": account, "partition": partition,
            "gpus_per_node": int(os.environ.get("NEMOTRON_SLURM_GPUS_PER_NODE", "8"))}


def write_slurm_profile(path: Path, *, account: str, partition: str, job_dir: Path | str, gpus_per_node: int = 8,
                        name: str = "ci", time: str = "00:10:00", extra: str = "") -> Path:
    """Write ``path`` (an env.toml) with the Slurm profile ``[name]`` for the local cluster: no containers
    (jobs run on the host's Python), ``time`` as the Slurm time limit; ``extra`` is appended TOML lines
    (``image_cache``, ``secrets``, ``tunnel``...). Returns ``path``."""
    text = (f'[{name}]\nexecutor = "slurm"\naccount = "{account}"\npartition = "{partition}"\ntime = "{time}"\n'
            f'gpus_per_node = {gpus_per_node}\ncontainer = false\njob_dir = "{job_dir}"\n')
    path.write_text(text + (extra.strip() + "\n" if extra.strip() else ""), encoding="utf-8")
    return path


def nemotron_runner(env: Mapping[str, str], cwd: Path,
                    drop: tuple[str, ...] = ("NEMOTRON_ENV_FILE",)) -> Callable[..., subprocess.CompletedProcess]:
    """``run(*args, timeout=300)``: the `nemotron` command in a subprocess as a user runs it (``env`` without
    the variables in ``drop``, working folder ``cwd``, no stdin), output captured as text."""
    env = {k: v for k, v in env.items() if k not in drop}

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nemotron", *args], check=False, env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    return run
