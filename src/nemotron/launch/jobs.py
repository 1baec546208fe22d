"""Submitted jobs, for a caller that holds a record: status, logs, cancel, outputs and following a job.

Every submission writes ``$NEMOTRON_HOME/submissions/<experiment id>.json`` (:mod:`nemotron.launch.records`).
``status``, ``logs`` and ``cancel`` accept an experiment id, a job id, or nothing (the most recent submission).
What each answer means for the job's executor is its backend's (:mod:`nemotron.launch.backends`): every function
here looks the backend up once from the record (:func:`nemotron.launch.backends.backend_for`) and asks it.
"""

from __future__ import annotations

from typing import Any

from nemotron.config import artifacts  # noqa: F401  (kept importable as jobs.artifacts)
from nemotron.launch.backends import backend_for
from nemotron.launch.records import (FOLLOW_PATIENCE_S, LOCAL_EXECUTOR, TERMINAL, JobFilesMissing,  # noqa: F401
                                     JobRecord, SchedulerUnreachable, load, newer_shell_run, ray_client, records_all,
                                     redactor, save,
                                     stage_messages, status_lines)


def state(rec: JobRecord) -> tuple[str, str]:
    """``(state, exit code)`` of the job in Slurm's words (:meth:`nemotron.launch.backends.base.Backend.state`).

    Raises:
        JobFilesMissing: the job's folders are gone. SchedulerUnreachable: Slurm could not be asked.
        RuntimeFailure: the Ray cluster cannot be asked.
    """
    return backend_for(rec).state(rec)


def unknown_reason(rec: JobRecord) -> str | None:
    """Why the job's state is ``UNKNOWN`` (one line), when its scheduler can say; None otherwise."""
    return backend_for(rec).unknown_reason(rec)


def started(rec: JobRecord) -> bool:
    """Whether the job ever got its nodes (a Slurm job cancelled while pending did not)."""
    return backend_for(rec).started(rec)


def log_files(rec: JobRecord) -> list[str]:
    """The job's log files, the task's output first (:meth:`nemotron.launch.backends.base.Backend.log_files`).

    Raises:
        JobFilesMissing: the job's folders are gone; the message names the path.
    """
    return backend_for(rec).log_files(rec)


def read_log(rec: JobRecord, path: str, offset: int = 0) -> str:
    """Text of log ``path`` from byte ``offset`` on (empty when absent)."""
    return backend_for(rec).read_log(rec, path, offset)


def follow(rec: JobRecord, *, poll_s: float = 1.0, stream: Any = None) -> tuple[str, str]:
    """Stream the job's task log until it ends; ``(state, exit code)``. Waits through a scheduler that cannot be
    asked, or does not know the submission, for :data:`FOLLOW_PATIENCE_S` seconds
    (:meth:`nemotron.launch.backends.base.Backend.follow`)."""
    return backend_for(rec).follow(rec, poll_s=poll_s, stream=stream, patience_s=FOLLOW_PATIENCE_S)


def failure_messages(rec: JobRecord, n: int = 10) -> list[str]:
    """The stage's own messages in the job's logs, redacted (:func:`stage_messages`)."""
    return backend_for(rec).failure_messages(rec, n)


def tail_lines(rec: JobRecord, n: int = 20) -> list[str]:
    """The last ``n`` lines of the job's logs, redacted."""
    return backend_for(rec).tail_lines(rec, n)


def cancel(rec: JobRecord) -> None:
    """Stop the job (``scancel``; ``stop_job`` on a Ray cluster; a ``local`` job's supervisor).

    Raises:
        RuntimeFailure: the scheduler refused (its message kept).
    """
    backend_for(rec).cancel(rec)


def ended_at(rec: JobRecord) -> float | None:
    """When the job ended (seconds since the epoch); None when not known (a Ray job, a job not ended)."""
    return backend_for(rec).ended_at(rec)


def record_outputs(rec: JobRecord) -> list[dict]:
    """Record the job's artifacts once it COMPLETED, when what they name is there
    (:meth:`nemotron.launch.backends.base.Backend.record_outputs`).

    Raises:
        RuntimeFailure: an output is absent or unfinished; nothing of this job is recorded.
    """
    return backend_for(rec).record_outputs(rec)
