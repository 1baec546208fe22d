"""The runtime entry every stage's ``run.py`` goes through: ``python run.py --config train.yaml``.

The CLI (a run here) and a cluster job both run a stage's script with the compiled, fully resolved
config. :func:`run` reads it, picks the stage's backend (the config's ``backend`` key), checks the
environment before anything heavy — the framework the backend needs must be importable, otherwise one
line says which container it runs in — and calls the backend's runtime ``main(cfg)``. Exit codes:
0 done, 2 config or input problem, 1 runtime failure (or a runtime this version does not have),
130 interrupted; a runtime may return others (75: saved and stopped on a signal, run again to resume; in a
Slurm job of a resumable stage the entry then writes the requeue marker, :func:`mark_stopped`, and the job's
batch script requeues the job or ends it with 75). Tracebacks only with ``--debug``.

A stage's ``run.py`` declares ``BACKENDS`` (each value of the config's ``backend`` key and its
:class:`Backend`) and ``DEFAULT`` (the backend of a config that names none), then calls :func:`run`. The CLI
reads the same table (:func:`stage_backends`) to refuse a backend without a runtime before anything runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any

from nemotron.config.images import image_table
from nemotron.config.paths import folder_key, stages_dir
from nemotron.config.tree import leaves
from nemotron.errors import (
    EXIT_INTERRUPTED,
    INTERRUPT_REPORTED_BY_PARENT,
    RESUMABLE,
    ConfigError,
    NemotronError,
    stop_signal,
)


@dataclass(frozen=True)
class Backend:
    """One way to run a stage.

    Attributes:
        runtime: ``"module:function"`` called with the config dict, returning the exit code; None when
            this version has no runtime for the backend yet (the entry then says so and exits 1).
        requires: a module that must be importable first (the cluster framework, e.g. ``megatron.bridge``).
        image: the ``stages/images.toml`` key of the container that provides it (for the message).
        per_stage: the runtime serves several stages (``megatron_bridge:main``, ``entry:train``): it is called as
            ``function(cfg, stage)`` with the registry name of the stage the entry runs (its title looked up with
            :func:`nemotron.config.registry.get_stage`), and reads what it needs from that stage's row. A new stage
            of such a runtime then needs only its row, its configs and a ``run.py`` naming the function.
    """

    runtime: str | None = None
    requires: str | None = None
    image: str | None = None
    per_stage: bool = False


#: Display names of the ``stages/images.toml`` keys, for messages.
CONTAINERS = {"nemo": "NeMo", "nemo-rl": "NeMo RL", "data": "data prep"}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _image_uri(key: str) -> str:
    try:

        return str(image_table()[key]["image"])
    except Exception:  # the message stays useful without the table
        return key


def interrupted(title: str) -> int:
    """Report a Ctrl-C in a stage's runtime and return :data:`EXIT_INTERRUPTED` (130).

    Prints ``<title>: interrupted`` on stderr, except when the CLI started this process and reports
    the interrupt itself (:data:`INTERRUPT_REPORTED_BY_PARENT` is ``"1"``), so a Ctrl-C on a run here
    shows one line, not one per process. Every runtime's ``except KeyboardInterrupt`` goes through here.
    """
    import os

    if os.environ.get(INTERRUPT_REPORTED_BY_PARENT) != "1":
        print(f"{title}: interrupted", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def _call(spec: str, cfg: dict[str, Any], stage: str | None = None) -> int:
    """``spec`` (``"module:function"``) called with ``cfg`` (and ``stage``, the registry name, when given)."""
    module, _, function = spec.partition(":")
    fn = getattr(importlib.import_module(module), function or "main")
    return int((fn(cfg) if stage is None else fn(cfg, stage)) or 0)


def registry_name(title: str) -> str:
    """The registry name of the stage an entry script runs, from its title (``"ultra3 data prep sft"`` ->
    ``"data-prep-sft"``).

    Raises:
        ConfigError: the title names no registry stage (the message lists them).
    """
    from nemotron.config.registry import get_stage

    try:
        return get_stage(title).name
    except KeyError as exc:
        raise ConfigError(f"{title}: {exc.args[0]}", "run.py's run(TITLE, ...) names its stage as it is typed "
                          "after nemotron (nemotron.config.registry)") from None


#: Set by a Slurm submission of a resumable stage (:func:`nemotron.launch.submit.job_env_vars`): the file the stage writes
#: when it saved and stopped on a signal. The job's batch script reads it after the step and decides there, on
#: the host, whether to requeue the job (``scontrol requeue``; the container has no Slurm client) and with which
#: code to end (:func:`nemotron.launch.submit.after_step_lines`).
REQUEUE_MARKER_ENV = "NEMOTRON_REQUEUE_MARKER"


def _interrupt_note() -> str | None:
    """The line a stage stopped by a signal left in ``$NEMOTRON_RUN_DIR/interrupted.txt``
    (:data:`nemotron.errors.INTERRUPT_NOTE`: what it kept), or None."""
    import os
    from pathlib import Path

    from nemotron.errors import INTERRUPT_NOTE

    folder = os.environ.get("NEMOTRON_RUN_DIR")
    try:
        return (Path(folder) / INTERRUPT_NOTE).read_text(encoding="utf-8").strip() or None if folder else None
    except (OSError, UnicodeDecodeError):
        return None


def mark_stopped(stage: str, detail: str = "saved and stopped on a signal", env: dict[str, str] | None = None) -> bool:
    """Write the requeue marker (the file named by :data:`REQUEUE_MARKER_ENV`) after the runtime saved and stopped
    on a signal (exit 75): one line, ``<stage>: <detail>``, which the batch script prints before it requeues the
    job (``run.requeue``) or ends it with code 75 (``run.chain``). Only global rank 0 writes it (``RANK``, else
    ``SLURM_PROCID``); a marker already there (the runtime wrote its own, with the saved iteration) is kept. Outside
    such a job (a run here, a local profile) nothing is written. Returns whether the marker is there afterwards; a
    file system error is one line on stderr (the job then ends with the step's own code and is not requeued)."""
    import os

    env = os.environ if env is None else env
    path = env.get(REQUEUE_MARKER_ENV)
    if not path or (env.get("RANK") or env.get("SLURM_PROCID") or "0") != "0":
        return False
    if os.path.exists(path):
        return True
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"{stage}: {detail}\n")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"{stage}: cannot write the requeue marker {path} ({exc.strerror or exc}); the job is not requeued: "
              "submit the same command again to resume", file=sys.stderr, flush=True)
        return False
    return True


def stage_backends(stage: Any) -> tuple[dict[str, Backend], str]:
    """``(BACKENDS, DEFAULT)`` of a registry stage, read from its entry script (``stages/<recipe>/<stage>/run.py``,
    which imports nothing heavy): the one table the job's entry runs with, so the CLI can refuse a backend
    this version has no runtime for before anything runs.

    Raises:
        ConfigError: the entry script is missing or does not define ``BACKENDS`` and ``DEFAULT``.
    """

    path = stages_dir() / stage.entry
    spec = importlib.util.spec_from_file_location(f"_nemotron_entry_{stage.recipe}_{stage.name.replace('-', '_')}",
                                                  path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ConfigError(f"stage {stage.name}: entry script {path} is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    backends, default = getattr(module, "BACKENDS", None), getattr(module, "DEFAULT", None)
    if not isinstance(backends, dict) or not isinstance(default, str):
        raise ConfigError(f"stage {stage.name}: {path} does not define BACKENDS and DEFAULT")
    return backends, default


def missing_runtime(stage: Any, backend: str | None) -> tuple[str, list[str]] | None:
    """``(backend, backends that have a runtime)`` when ``backend`` (None or ``""``: the stage's default) is one
    this version has no runtime for (:attr:`Backend.runtime` None), else None. An unknown backend is left to the
    config's own validation."""
    backends, default = stage_backends(stage)
    name = (backend or default).lower()
    entry = backends.get(name)
    if entry is None or entry.runtime is not None:
        return None
    return name, [n for n, b in backends.items() if b.runtime is not None]


def _os_error(stage: str, cfg: Any, exc: OSError) -> int:
    """One line for a file-system error of a runtime: the config key whose folder it concerns (exit 2:
    the value is the problem, e.g. ``output_dir=/sys/out: cannot create (Operation not permitted)``),
    else the path alone (exit 1)."""
    import os


    path = exc.filename
    reason = exc.strerror or str(exc)
    key = folder_key(cfg, path)
    if key is not None:

        value = dict(leaves(cfg))[key]
        verb = "cannot write" if os.path.isdir(os.path.expanduser(str(value))) else "cannot create"
        where = "" if os.path.abspath(os.path.expanduser(str(value))) == os.path.abspath(str(path)) else f": {path}"
        print(f"error: {stage}: {key}={value}: {verb} ({reason}){where}", file=sys.stderr)
        print(f"hint: set {key} to a folder you can write (its parent must exist as a writable folder)",
              file=sys.stderr)
        return 2
    print(f"error: {stage}: {path or 'file system'}: {reason}", file=sys.stderr)
    return 1


def run(stage: str, backends: dict[str, Backend], default: str, argv: list[str] | None = None) -> int:
    """Run ``stage`` (``"ultra3 pretrain"``) with the backend its config names; returns the exit code."""
    parser = argparse.ArgumentParser(description=f"nemotron {stage}: runtime entry")
    parser.add_argument("--config", required=True, help="compiled stage config (train.yaml)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)

    import yaml


    cfg: Any = None
    try:
        with open(args.config, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh) or {}
        name = str(cfg.get("backend") or default)
        backend = backends.get(name)
        if backend is None:
            print(f"error: {stage}: backend {name!r} is not one of {', '.join(backends)}", file=sys.stderr)
            return 2
        if backend.requires and not _importable(backend.requires):
            container = CONTAINERS.get(backend.image or "", backend.image)
            where = f"the {container} container (image {_image_uri(backend.image)})" if backend.image else "an environment"
            print(f"{stage}: this stage runs inside {where}; {backend.requires} is not importable here", file=sys.stderr)
            return 1
        if backend.runtime is None:
            print(f"{stage}: the {name} runtime of this stage is not available yet in this version", file=sys.stderr)
            return 1
        code = _call(backend.runtime, cfg, registry_name(stage) if backend.per_stage else None)
        if code == 0:  # a submitted job records its artifacts when it ends (config.artifacts.record_at_end)
            from nemotron.config.artifacts import record_at_end

            try:
                record_at_end()
            except (OSError, ValueError, KeyError) as exc:  # said; the submitting side records it when it looks
                print(f"[nemotron] artifacts not recorded at job end ({type(exc).__name__}: {exc}); `status` or the "
                      "attached run records them", file=sys.stderr, flush=True)
        if code == RESUMABLE:
            mark_stopped(stage)
        return code
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", None) or stop_signal()
        if signum is None:
            return interrupted(stage)
        import signal as _signal


        name = _signal.Signals(signum).name
        kept = _interrupt_note()  # what the stage says it kept (data prep: its finished shards, or none)
        detail = (kept.replace("interrupted", f"stopped by {name}", 1) if kept else
                  f"stopped by {name}; what was finished is kept, run the same command again to resume")
        print(f"{stage}: {detail}", file=sys.stderr, flush=True)
        mark_stopped(stage, detail if kept else f"stopped by {name}; what was finished is kept")
        return RESUMABLE
    except OSError as exc:
        if args.debug:
            raise
        if cfg is None:  # the config itself could not be read
            print(f"error: cannot read config {args.config}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        return _os_error(stage, cfg, exc)
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
