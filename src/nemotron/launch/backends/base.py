"""The protocol every executor backend keeps, and what all of them share.

A backend owns a job's whole life: before it exists (:meth:`Backend.render`, then :meth:`Backend.submit` or
:meth:`Backend.run`) and after, from its record (:class:`nemotron.launch.records.JobRecord`): its state, its log
files, cancelling it, when it ended, and recording its outputs. Following a job (:meth:`Backend.follow`,
:meth:`Backend.attach`), the stage's messages of a failed job and recording its artifacts are written once, here,
on top of those answers; a backend overrides only what its executor does differently.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from nemotron.config import artifacts
from nemotron.errors import RESUMABLE, RuntimeFailure
from nemotron.launch import records
from nemotron.launch.records import JobRecord, SchedulerUnreachable
from nemotron.profiles.load import use_env_file
from nemotron.profiles.profile import ExecutorProfile, Profile
from nemotron.profiles.schema import _Common

S = TypeVar("S", bound=_Common)


@dataclass(frozen=True)
class Job:
    """A planned job: what the command asked (``req``), the compiled config, the profile (None: this machine) and
    the plan. The four travel together from planning to the backend."""

    req: Any
    compiled: Any
    profile: ExecutorProfile | None
    plan: Any

    def profile_as(self, kind: type[S]) -> Profile[S]:
        """The job's profile typed as executor model ``kind``'s (a backend asks for its own:
        ``job.profile_as(SlurmSettings).settings.partition``).

        Raises:
            RuntimeFailure: the job has no profile. ConfigError: its profile is another executor's (a job handed to
                the wrong backend; :meth:`nemotron.profiles.profile.Profile.narrow`).
        """
        if self.profile is None:
            raise RuntimeFailure(f"{getattr(self.plan, 'executor', '?')} job without a profile",
                                 "pass --run PROFILE or --batch PROFILE")
        return self.profile.narrow(kind)


#: Every :class:`Backend` subclass that names an ``executor``, by that name, in the order they were defined: filled
#: by :meth:`Backend.__init_subclass__` when the class's module is imported (:mod:`nemotron.launch.backends` imports
#: every module of its package on first use), so a new executor's file is the only edit that registers it.
REGISTERED: dict[str, type[Backend]] = {}


#: Slurm states in which a job of a ``run.chain`` ends without failing the chain when a next job continues:
#: the next one resumes from the last save (the resumable exit 75 is told by its exit code, not its state).
_CONTINUES = {"COMPLETED", "PREEMPTED", "TIMEOUT", "NODE_FAIL"}

#: What :meth:`Backend.output_check` prints for an output path that is not there / a data output not finished.
_ABSENT_TAG, _UNFINISHED_TAG = "nemotron-absent:", "nemotron-unfinished:"


def shell(rec: JobRecord, argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``argv`` (a command about the job: here, or ``ssh`` to where it runs), text out, 60 s at most.

    Raises:
        RuntimeFailure: the command could not be started or took longer.
    """
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeFailure(f"cannot ask Slurm about job {rec.job_id}: {exc}") from None


def path_fields(fields: dict) -> list[str]:
    """The paths an artifact's fields name (``path`` and every ``*_path``): each must exist for it to be recorded."""
    return [str(v) for k, v in fields.items() if (k == "path" or k.endswith("_path")) and isinstance(v, str) and v]


def output_check(outputs: dict[str, dict], data: bool) -> str:
    """A shell line printing :data:`_ABSENT_TAG` + path for each output path that does not exist and, for a data
    stage (``data``), :data:`_UNFINISHED_TAG` + folder for an output folder whose ``manifest.json`` (written last)
    does not say ``"complete": true``."""
    parts = []
    for fields in outputs.values():
        for path in path_fields(fields):
            parts.append(f"test -e {shlex.quote(path)} || echo {shlex.quote(_ABSENT_TAG + path)}")
        folder = fields.get("path")
        if data and isinstance(folder, str) and folder:
            manifest = shlex.quote(f"{folder}/{artifacts.MANIFEST}")
            parts.append(f"grep -Eq '\"complete\": *true' {manifest} 2>/dev/null || "
                         f"echo {shlex.quote(_UNFINISHED_TAG + folder)}")
    return "; ".join(parts) or "true"


class Backend:
    """What one executor does with a job, from planning to its outputs. ``executor`` is the name that a plan
    (``plan.executor``) and a job record (``JobRecord.executor``) carry: ``direct``, ``slurm``, ``ray``, ``local``.

    A new executor is one subclass in its own file of this package, with its profile model in
    :mod:`nemotron.profiles.schema`: defining the class registers it (:data:`REGISTERED`), and
    :data:`nemotron.launch.backends.BACKENDS` finds it by importing the package's modules; nothing else is listed.
    """

    executor: str = ""
    #: The profile model this executor's profiles parse into (``SlurmSettings``...; None: runs without a profile).
    settings: ClassVar[type[_Common] | None] = None
    #: True when the job runs in this process's child and :meth:`run` returns its exit code; else :meth:`submit`.
    #: A backend has only the one of the two that its ``runs_here`` names (the dispatcher reads the flag).
    runs_here: bool = False
    #: Who is asked about the job's state, in words (``why`` names it: "the Slurm state", ...).
    scheduler: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a subclass that names its ``executor`` in :data:`REGISTERED`.

        Raises:
            TypeError: another class already registered that executor name (two files claim one executor).
        """
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("executor")
        if not name:
            return  # an abstract helper class: nothing to register
        taken = REGISTERED.get(name)
        if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"backend {cls.__module__}.{cls.__qualname__}: executor {name!r} is already the backend "
                            f"{taken.__module__}.{taken.__qualname__}; give the new one its own executor name")
        REGISTERED[name] = cls

    def _not_offered(self, what: str) -> RuntimeFailure:
        """The error for a question this executor has no answer to (``here`` keeps no records; the queueing
        backends run nothing in this process): one line naming the executor, never a bare traceback."""
        return RuntimeFailure(f"the {self.executor or type(self).__name__} executor does not {what}",
                              "see docs/execution.md for what each executor does")

    # -- before the job exists ---------------------------------------------------------------------------------

    def render(self, job: Job) -> str:
        """The exact job that would run, as text (the ``--dry-run`` job section)."""
        raise self._not_offered("render a job")

    def submit(self, job: Job, chain: list[str]) -> tuple[str, str]:
        """Queue the job and write its record: ``(job id, where in words)``; ``chain`` receives every job id queued
        (``run.chain``).

        Raises:
            RuntimeFailure: the job could not be submitted.
        """
        raise self._not_offered("queue jobs (it runs them in this process)")

    def run(self, job: Job) -> int:
        """Run the job here, attached; its exit code."""
        raise self._not_offered("run jobs in this process (it queues them)")

    # -- a submitted job, from its record ----------------------------------------------------------------------

    def state(self, rec: JobRecord) -> tuple[str, str]:
        """``(state, exit code)`` of the job, the state in Slurm's words (:data:`nemotron.launch.records.TERMINAL`
        for the ended ones), the exit code as text (empty: not known)."""
        raise self._not_offered("keep job records to ask a state of")

    def unknown_reason(self, rec: JobRecord) -> str | None:
        """Why the state is ``UNKNOWN`` (one line), when the scheduler can say; None: nothing to add."""
        return None

    def started(self, rec: JobRecord) -> bool:
        """Whether the job ever got its nodes (a job cancelled while queued did not)."""
        return True

    def log_files(self, rec: JobRecord) -> list[str]:
        """The job's log files, the task's own output first. Empty: none written yet.

        Raises:
            JobFilesMissing: the job's folders are gone; the message names the path.
        """
        raise self._not_offered("keep job records with logs")

    def read_log(self, rec: JobRecord, path: str, offset: int = 0) -> str:
        """Text of log ``path`` from byte ``offset`` on (empty when absent)."""
        raise self._not_offered("keep job records with logs")

    def read_log_tail(self, rec: JobRecord, path: str, limit: int) -> str:
        """The last ``limit`` bytes of log ``path``, from its first whole line (the whole log when smaller; empty
        when absent): what ``why`` reads, in bounded memory. Here: :meth:`read_log` cut to its end (a backend that
        can read only the end overrides it)."""
        raw = self.read_log(rec, path).encode("utf-8", errors="replace")
        return records.tail_text(raw[-limit:], len(raw) > limit)

    def cancel(self, rec: JobRecord) -> None:
        """Stop the job.

        Raises:
            RuntimeFailure: the scheduler refused (its message kept).
        """
        raise self._not_offered("keep job records to cancel")

    def ended_at(self, rec: JobRecord) -> float | None:
        """When the job ended (seconds since the epoch); None when not known."""
        return None

    def outputs_written(self, rec: JobRecord) -> str | None:
        """The text of the ``outputs.json`` the job wrote in its run folder (:data:`artifacts.OUTPUTS_FILE`); ``""``:
        none; None: not readable from here, so the outputs are taken as planned and not checked."""
        return None

    def missing_outputs(self, rec: JobRecord, outputs: dict[str, dict], data: bool) -> tuple[list[str], list[str]]:
        """``(absent paths, unfinished data folders)`` of ``outputs`` where the job ran (:func:`output_check`)."""
        return [], []

    def follows(self, rec: JobRecord, path: str) -> bool:
        """Whether :meth:`follow` streams log file ``path`` (the task's output, not a launcher's trace)."""
        return True

    def stream_for(self, path: str, stream: Any) -> Any:
        """Where :meth:`follow` writes the text of log ``path``: ``stream`` unless the log is an error stream."""
        return stream

    # -- shared: following, failure summaries, recording outputs -----------------------------------------------

    def follow(self, rec: JobRecord, *, poll_s: float = 1.0, stream: Any = None,
               patience_s: float | None = None) -> tuple[str, str]:
        """Stream the job's task log until its scheduler reports a terminal state of this submission; returns
        ``(state, exit code)``. ``patience_s``: :data:`nemotron.launch.records.FOLLOW_PATIENCE_S` unless given.

        Raises:
            SchedulerUnreachable: the scheduler could not be asked for ``patience_s`` seconds in a row.
            RuntimeFailure: the scheduler held no record of this submission for that long (:meth:`unknown_reason`).
        """
        patience = records.FOLLOW_PATIENCE_S if patience_s is None else patience_s
        stream = stream or sys.stdout
        redact = records.redactor(rec, keep_colour=stream.isatty())
        offsets: dict[str, int] = {}
        st, code = "PENDING", ""
        last_state = None
        failing_since = unknown_since = None
        while True:
            try:
                st, code = self.state(rec)
            except SchedulerUnreachable:  # a controller restarting: wait a while, then say so
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > patience:
                    raise
                time.sleep(poll_s)
                continue
            failing_since = None
            # no record of this submission at all (its id reused by a reset controller): never waits forever
            unknown_since = (unknown_since or time.monotonic()) if st == "UNKNOWN" else None
            if unknown_since is not None and time.monotonic() - unknown_since > patience:
                raise RuntimeFailure(f"job {rec.job_id}: {self.unknown_reason(rec)}",
                                     f"its logs, if any: {rec.log_dir}; `nemotron {rec.job_name.split('-', 1)[0]} why "
                                     f"{rec.experiment_id}` once Slurm knows it")
            if st != last_state:
                print(f"[nemotron] job {rec.job_id}: {st}", file=sys.stderr, flush=True)
                last_state = st
            for path in [p for p in self.log_files(rec) if self.follows(rec, p)]:
                chunk = self.read_log(rec, path, offsets.get(path, 0))
                if chunk:
                    offsets[path] = offsets.get(path, 0) + len(chunk.encode())
                    out = self.stream_for(path, stream)
                    out.write(redact(chunk))
                    out.flush()
            if st in records.TERMINAL:
                return st, code
            time.sleep(poll_s)

    def failure_messages(self, rec: JobRecord, n: int = 10) -> list[str]:
        """:func:`nemotron.launch.records.stage_messages` of the job's logs (task log, then the batch script's),
        redacted."""
        redact = records.redactor(rec)
        for path in self.log_files(rec):
            found = records.stage_messages(redact(self.read_log(rec, path)), rec.title, n)
            if found:
                return found
        return []

    def tail_lines(self, rec: JobRecord, n: int = 20) -> list[str]:
        """The last ``n`` lines of the job's logs (task log first, then the batch script's), redacted."""
        redact = records.redactor(rec)
        for path in self.log_files(rec):  # the task's own output first; the batch script's trace when it has none
            lines = redact(self.read_log_tail(rec, path, records.TAIL_BYTES)).splitlines()
            if any(ln.strip() for ln in lines):
                return lines[-n:]
        return []

    def record_outputs(self, rec: JobRecord) -> list[dict]:
        """Record the job's artifacts in the store (once), after its scheduler reported COMPLETED, stamped with the
        time the job ended (:meth:`ended_at`; not the time a command looked), and only when what it names is
        there: every path of every artifact exists, and a data stage's output folder holds its ``manifest.json``
        saying ``"complete": true`` (checked where the job ran: here, or over ssh; :meth:`missing_outputs`). A
        backend that cannot read the job's storage (:meth:`outputs_written` None: a Ray cluster's) records the
        planned outputs unchecked.

        Returns: the records written (each as :func:`nemotron.config.artifacts.record` returns it).

        Raises:
            RuntimeFailure: an output is absent or unfinished: nothing of this job is recorded; the message names
                the artifact and the path.
        """
        if rec.recorded or not rec.outputs:
            return []

        from nemotron.config.registry import STAGES

        # where the submitting command kept its records: the [artifacts] root of the env.toml it read
        use_env_file(rec.env_file if rec.env_file and os.path.isfile(rec.env_file) else None)

        actual = self.outputs_written(rec)
        outputs = artifacts.merge_outputs(rec.outputs, actual)
        if actual is not None:
            data = any(s.name == rec.stage and s.family.prepares_data for s in STAGES)
            absent, unfinished = self.missing_outputs(rec, outputs, data)
            if absent or unfinished:
                names = {p: n for n, fields in outputs.items() for p in path_fields(fields)}
                what = "; ".join([*(f"{names.get(p, 'output')}: {p} does not exist" for p in absent),
                                  *(f"{names.get(p, 'output')}: {p} has no complete {artifacts.MANIFEST}"
                                    for p in unfinished)])
                raise RuntimeFailure(f"job {rec.job_id} ({rec.experiment_id}) ended COMPLETED but its output is not "
                                     f"there: {what}; not recorded as an artifact",
                                     f"read its log (nemotron {rec.job_name.split('-', 1)[0]} logs {rec.job_id}); "
                                     "run the stage again to make it")
        at = self.ended_at(rec)
        config = artifacts.recorded_config(rec.stage, rec.config)
        out = [artifacts.record(name, {**fields, "stage": rec.stage, "config": config,
                                       "experiment_id": rec.experiment_id, "job_id": rec.job_id,
                                       "config_hash": rec.config_hash}, at=at)
               for name, fields in outputs.items()]
        rec.recorded = True
        records.save(rec)
        return out

    def attach(self, rec: JobRecord, owner: bool = False, chain: Any = ()) -> int:
        """Stream an attached job's log until it ends; 0 only when the scheduler says COMPLETED, else 1 with the
        final state and the last log lines. Ctrl-C detaches (the job keeps running) and returns 130.

        ``chain``: the ``run.chain`` continuation jobs of ``rec`` (records, first to last). They are followed
        in turn, each log streamed, with a line when it moves on (``job N ended ...; continuing with job M
        (run.chain 1/2)``); a job that ended in a failure (not one of :data:`_CONTINUES` nor exit 75) gets its
        failure summary there. The result is the chain's: that of the last job that ran (one cancelled before
        it started is skipped), so 0 only when it ended COMPLETED; its artifacts are recorded then.
        ``owner``: this command started the job (a backend whose jobs run on this machine stops it on Ctrl-C).
        """
        recs = [rec, *chain]
        last = None  # (record, state, exit code) of the last job that ran
        reported = set()  # jobs whose failure summary was shown on the way
        for i, current in enumerate(recs):
            try:
                st, code = self.follow(current)
            except KeyboardInterrupt:
                left = [r.job_id for r in recs[i:]]
                what = f"job {left[0]} keeps running; stop it" if len(left) == 1 else \
                    f"jobs {', '.join(left)} (run.chain) keep running; stop them"
                recipe = current.job_name.split("-", 1)[0]
                print(f"\ndetached: {what} with: {'; '.join(f'nemotron {recipe} cancel {j}' for j in left)}",
                      file=sys.stderr)
                return 130
            if st != "CANCELLED" or last is None or self.started(current):
                last = (current, st, code)
            else:
                print(f"[nemotron] job {current.job_id} was cancelled before it started", file=sys.stderr)
            if i + 1 < len(recs):
                if last[0] is current and st not in _CONTINUES and str(code).split(":")[0] != str(RESUMABLE):
                    self._report_failure(current, st, code)
                    reported.add(current.job_id)
                print(f"[nemotron] job {current.job_id} ended {st} (exit code {code or '?'}); continuing with job "
                      f"{recs[i + 1].job_id} (run.chain {i + 1}/{len(recs) - 1})", file=sys.stderr)
        rec, st, code = last
        if st == "COMPLETED":
            for art in self.record_outputs(rec):
                print(f"[nemotron] artifact {art['name']} v{art['version']}: {art['path']}", file=sys.stderr)
            return 0
        if rec.job_id in reported:
            print(f"[nemotron] run.chain ended with job {rec.job_id}: {st} (exit code {code or '?'})",
                  file=sys.stderr)
        else:
            self._report_failure(rec, st, code)
        return 1

    def _report_failure(self, rec: JobRecord, st: str, code: str) -> None:
        """The summary of a job that did not complete: its state and exit code, what the stage said
        (:meth:`failure_messages`) and the last log lines, on stderr."""

        said = self.failure_messages(rec)  # the cause, before the launcher's summary that ends the log
        if said:
            print(f"[nemotron] job {rec.job_id} ended {st} (exit code {code or '?'}); {rec.title} said:",
                  file=sys.stderr)
            for line in said:
                print(f"  {line}", file=sys.stderr)
            print("[nemotron] last log lines:", file=sys.stderr)
        else:
            print(f"[nemotron] job {rec.job_id} ended {st} (exit code {code or '?'}); last log lines:",
                  file=sys.stderr)
        for line in self.tail_lines(rec):
            print(f"  {line}", file=sys.stderr)
