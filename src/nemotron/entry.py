"""The runtime entry every stage's ``run.py`` goes through: ``python run.py --config train.yaml``.

The CLI (a run here) and a cluster job both run a stage's script with the compiled, fully resolved
config. :func:`run` reads it, picks the stage's backend (the config's ``backend`` key), checks the
environment before anything heavy — the framework the backend needs must be importable, otherwise one
line says which container it runs in — and calls the backend's runtime ``main(cfg)``. Exit codes:
0 done, 2 config or input problem, 1 runtime failure (or a runtime this version does not have),
130 interrupted; a runtime may return others (75: saved and stopped on a signal, run again to resume).
Tracebacks only with ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Backend:
    """One way to run a stage.

    Attributes:
        runtime: ``"module:function"`` called with the config dict, returning the exit code; None when
            this version has no runtime for the backend yet (the entry then says so and exits 1).
        requires: a module that must be importable first (the cluster framework, e.g. ``megatron.bridge``).
        image: the ``stages/images.toml`` key of the container that provides it (for the message).
    """

    runtime: str | None = None
    requires: str | None = None
    image: str | None = None


_CONTAINERS = {"nemo": "NeMo", "nemo-rl": "NeMo RL", "data": "data prep"}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _image_uri(key: str) -> str:
    try:
        from nemotron.plan import image_table

        return str(image_table()[key]["image"])
    except Exception:  # the message stays useful without the table
        return key


def _call(spec: str, cfg: dict[str, Any]) -> int:
    module, _, function = spec.partition(":")
    return int(getattr(importlib.import_module(module), function or "main")(cfg) or 0)


def requeue_on_slurm(stage: str, env: dict[str, str] | None = None) -> bool:
    """Requeue this Slurm job after its runtime saved and stopped on a signal (exit 75), so that it starts
    again and resumes from the saved step. Only in a job submitted with ``run.requeue`` (the submission
    sets ``NEMOTRON_SLURM_REQUEUE=1``), and only from global rank 0 (``RANK``, else ``SLURM_PROCID``).
    Slurm ends the allocation on ``scontrol requeue`` and holds the job about two minutes before it may
    start again; its restart count (``SLURM_RESTART_COUNT``) goes up by one and the job id stays.
    Returns whether the requeue was asked for and accepted."""
    import os
    import subprocess

    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if env.get("NEMOTRON_SLURM_REQUEUE") != "1" or not job:
        return False
    if (env.get("RANK") or env.get("SLURM_PROCID") or "0") != "0":
        return False
    try:
        out = subprocess.run(["scontrol", "requeue", job], check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"{stage}: could not requeue Slurm job {job} ({exc}); submit the same command again to resume",
              file=sys.stderr, flush=True)
        return False
    if out.returncode != 0:
        print(f"{stage}: scontrol requeue {job} failed: {(out.stderr or out.stdout).strip()}; submit the same command "
              "again to resume", file=sys.stderr, flush=True)
        return False
    restarts = int(env.get("SLURM_RESTART_COUNT") or 0)
    print(f"{stage}: requeued Slurm job {job} (restart {restarts + 1}); it resumes from the saved checkpoint",
          flush=True)
    return True


def run(stage: str, backends: dict[str, Backend], default: str, argv: list[str] | None = None) -> int:
    """Run ``stage`` (``"ultra3 pretrain"``) with the backend its config names; returns the exit code."""
    parser = argparse.ArgumentParser(description=f"nemotron {stage}: runtime entry")
    parser.add_argument("--config", required=True, help="compiled stage config (train.yaml)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)

    import yaml

    from nemotron.errors import NemotronError

    try:
        with open(args.config, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh) or {}
        name = str(cfg.get("backend") or default)
        backend = backends.get(name)
        if backend is None:
            print(f"error: {stage}: backend {name!r} is not one of {', '.join(backends)}", file=sys.stderr)
            return 2
        if backend.requires and not _importable(backend.requires):
            container = _CONTAINERS.get(backend.image or "", backend.image)
            where = f"the {container} container (image {_image_uri(backend.image)})" if backend.image else "an environment"
            print(f"{stage}: this stage runs inside {where}; {backend.requires} is not importable here", file=sys.stderr)
            return 1
        if backend.runtime is None:
            print(f"{stage}: the {name} runtime of this stage is not available yet in this version", file=sys.stderr)
            return 1
        code = _call(backend.runtime, cfg)
        from nemotron.execute import RESUMABLE

        if code == RESUMABLE:
            requeue_on_slurm(stage)
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if args.debug:
            raise
        print(f"error: cannot read config {args.config}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{args.config}:{mark.line + 1}" if mark else args.config
        print(f"error: {where}: not valid YAML ({getattr(exc, 'problem', None) or exc})", file=sys.stderr)
        return 2
    except NemotronError as exc:
        if args.debug:
            raise
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
