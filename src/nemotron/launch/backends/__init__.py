"""One backend per executor, each in its own file of this package, each owning its job's whole life: render,
submit or run a planned job, then, from the job's record, its state, logs, cancel and outputs
(:class:`nemotron.launch.backends.base.Backend`). The backend is chosen once: from a plan by ``plan.executor``
(:func:`backend`), from a job record by ``JobRecord.executor`` (:func:`backend_for`); callers then call it.

A new executor: its file here (a ``Backend`` subclass naming its ``executor`` and its profile model ``settings``),
its profile model in :mod:`nemotron.profiles.schema`, its section in ``docs/profiles.md``. Nothing here lists the
backends: :data:`BACKENDS` imports every module of this package the first time it is read, and each subclass
registers itself when its module is imported (:meth:`Backend.__init_subclass__`). Importing this package imports
none of them (``nemotron --help`` stays free of them, bench/cli_startup.py).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from nemotron.errors import ConfigError
from nemotron.launch import records
from nemotron.launch.backends.base import REGISTERED, Backend, Job
from nemotron.launch.records import JobRecord
from nemotron.profiles.profile import ExecutorProfile


def discover(paths: list[str] | None = None) -> dict[str, Backend]:
    """Every backend of this package, by executor name: each module found on ``paths`` (default: the package's
    ``__path__``) is imported as ``nemotron.launch.backends.<module>``, which registers the :class:`Backend`
    subclasses it defines (:data:`nemotron.launch.backends.base.REGISTERED`); one instance of each.

    Raises:
        ImportError: a module of the package cannot be imported (its own error, not hidden).
        TypeError: two backends claim one executor name.
    """
    for found in pkgutil.iter_modules(list(__path__) if paths is None else paths):
        if not found.name.startswith("_"):
            importlib.import_module(f"{__name__}.{found.name}")
    return {name: cls() for name, cls in REGISTERED.items()}


class _Backends(Mapping[str, Backend]):
    """:data:`BACKENDS`: a read-only mapping executor name -> backend, filled by :func:`discover` when first read."""

    def __init__(self) -> None:
        self._found: dict[str, Backend] | None = None

    def _all(self) -> dict[str, Backend]:
        if self._found is None or set(self._found) != set(REGISTERED):  # a module imported since: take it in
            self._found = discover()
        return self._found

    def __getitem__(self, name: str) -> Backend:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"BACKENDS({', '.join(self._all())})"


#: Every executor's backend, by its name (``plan.executor``, ``JobRecord.executor``): the package's modules,
#: discovered on first use (:func:`discover`).
BACKENDS: Mapping[str, Backend] = _Backends()


def backend(executor: str) -> Backend:
    """The backend of ``executor`` (a planned job's ``plan.executor``, a profile's ``executor``)."""
    return BACKENDS[executor]


def backend_for(rec: JobRecord) -> Backend:
    """The backend that owns a submitted job: the one its record names (``JobRecord.executor``; a record written
    before it was kept names it by its tunnel, :class:`nemotron.launch.records.JobRecord`).

    Raises:
        ConfigError: the record names an executor this version does not know (written by a newer one).
    """
    found = BACKENDS.get(rec.executor or "")
    if found is None or found.runs_here:
        raise ConfigError(f"{records.record_path(rec)}: executor {rec.executor!r} is not one this version of "
                          f"nemotron knows ({', '.join(sorted(b for b in BACKENDS if not BACKENDS[b].runs_here))})",
                          "follow the job with the nemotron version that submitted it")
    return found


def render(req: Any, compiled: Any, profile: ExecutorProfile | None, plan: Any) -> str:
    """The exact job that would run, as text: NeMo-Run's sbatch script for a Slurm profile, the
    command line otherwise."""
    return backend(plan.executor).render(Job(req, compiled, profile, plan))


def start(req: Any, compiled: Any, profile: ExecutorProfile | None, plan: Any) -> int:
    """Run or submit the job; returns the exit code (the job's own for an attached run).

    Raises:
        RuntimeFailure: the job could not be started or submitted.
    """
    job, chosen = Job(req, compiled, profile, plan), backend(plan.executor)
    if chosen.runs_here:
        return chosen.run(job)
    chain: list[str] = []  # a Slurm job and its run.chain continuation jobs, first to last
    job_id, where = chosen.submit(job, chain)
    rec = records.load(plan.experiment_id)
    recipe = plan.stage.recipe
    print(f"submitted {plan.stage.title}: {where}, experiment {plan.experiment_id}", file=sys.stderr)
    if req.mode == "batch":
        print(job_id)
        print(f"  follow:  nemotron {recipe} logs {job_id} -f\n  status:  nemotron {recipe} status {job_id}\n"
              f"  cancel:  nemotron {recipe} cancel {job_id}", file=sys.stderr)
        return 0
    return chosen.attach(rec, owner=True, chain=[records.load(i) for i in chain[1:]])


def attach(rec: JobRecord, owner: bool = False, chain: Any = ()) -> int:
    """Follow a submitted job until it ends (:meth:`nemotron.launch.backends.base.Backend.attach` of its backend)."""
    return backend_for(rec).attach(rec, owner=owner, chain=chain)


__all__ = ["BACKENDS", "Backend", "Job", "attach", "backend", "backend_for", "discover", "render", "start"]
