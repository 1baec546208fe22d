"""One backend per executor, each in its own file of this package, each owning its job's whole life: render,
submit or run a planned job, then, from the job's record, its state, logs, cancel and outputs
(:class:`nemotron.launch.backends.base.Backend`). The backend is chosen once: from a plan by ``plan.executor``
(:func:`backend`), from a job record by ``JobRecord.executor`` (:func:`backend_for`); callers then call it.

A new executor: its file here (a ``Backend`` subclass), its row in :data:`BACKENDS`, its profile model in
:mod:`nemotron.profiles.schema`, its section in ``docs/profiles.md``.
"""

from __future__ import annotations

import sys
from typing import Any

from nemotron.errors import ConfigError
from nemotron.launch import records
from nemotron.launch.backends.base import Backend, Job
from nemotron.launch.backends.here import Here
from nemotron.launch.backends.local import LocalJob
from nemotron.launch.backends.ray import Ray
from nemotron.launch.backends.slurm import Slurm
from nemotron.launch.records import JobRecord

#: Every executor's backend, by its name (``plan.executor``, ``JobRecord.executor``).
BACKENDS: dict[str, Backend] = {b.executor: b for b in (Here(), Slurm(), Ray(), LocalJob())}


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


def render(req: Any, compiled: Any, profile: Any, plan: Any) -> str:
    """The exact job that would run, as text: NeMo-Run's sbatch script for a Slurm profile, the
    command line otherwise."""
    return backend(plan.executor).render(Job(req, compiled, profile, plan))


def start(req: Any, compiled: Any, profile: Any, plan: Any) -> int:
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


__all__ = ["BACKENDS", "Backend", "Job", "attach", "backend", "backend_for", "render", "start"]
