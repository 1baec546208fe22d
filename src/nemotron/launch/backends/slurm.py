"""The ``slurm`` executor: a Slurm profile's job, from its sbatch script to its outputs.

Rendered and submitted by NeMo-Run through the profile's tunnel (:mod:`nemotron.launch.submit`, which also builds
container images for ``kit``). Afterwards Slurm is asked through its own commands (``sacct``, ``squeue``,
``scancel``), run here for a ``local`` tunnel and over ``ssh`` for an ``ssh`` one. The final state comes from
``sacct``: an attached run exits 0 only when Slurm says COMPLETED. Every lookup is tied to this submission
(:func:`_this_submission`), so an older job that had the same id is never taken for it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time

from nemotron.config import artifacts
from nemotron.errors import RuntimeFailure
from nemotron.launch import records, submit
from nemotron.launch.backends.base import _ABSENT_TAG, _UNFINISHED_TAG, Backend, Job, output_check, shell
from nemotron.launch.records import (JobRecord, SchedulerUnreachable, folder_check, missing_error, split_missing)
from nemotron.profiles.schema import SlurmSettings

#: The task log of a Ray stage's Slurm job (its driver's output), in the job's log folder next to
#: ``ray-head.log`` and the batch script's ``sbatch_*`` log (see ``submit.RAY_TEMPLATE``).
RAY_DRIVER_LOG = "ray-job.log"

#: How far before our record of a submission (``JobRecord.submitted``: taken before sbatch ran) Slurm's own
#: ``Submit`` time of the job may lie and still be this submission: Slurm keeps whole seconds; a cluster reached over
#: ssh keeps its own clock (NTP keeps clocks within a second; a minute is allowed).
SUBMIT_SLACK_S = {"ssh": 60.0}
_DEFAULT_SLACK_S = 5.0

#: The job name that Slurm's accounting (22.05, seen on the local test cluster) holds for a job in its first
#: second or so, before the job's own name arrives: the submit time alone ties such a row to the submission.
_PLACEHOLDER_NAME = "allocation"


def _over_ssh(rec: JobRecord) -> bool:
    """Whether the job's Slurm commands go over ``ssh`` (the profile's ``tunnel = "ssh"``), not run here."""
    return rec.tunnel == "ssh"


def _remote(rec: JobRecord, command: str) -> subprocess.CompletedProcess:
    """Run a shell ``command`` where the job's Slurm commands run: here, or on the login host over ssh."""
    if _over_ssh(rec):
        target = f"{rec.user}@{rec.host}" if rec.user else str(rec.host)
        argv = ["ssh", "-o", "BatchMode=yes", *(["-p", str(rec.port)] if rec.port else []),
                *(["-i", rec.identity] if rec.identity else []), target, command]
    else:
        argv = ["bash", "-c", command]
    return shell(rec, argv)


def _slurm_hint(rec: JobRecord) -> str:
    if _over_ssh(rec):
        return (f"check that `ssh {rec.user + '@' if rec.user else ''}{rec.host} sacct` works from this machine "
                "(BatchMode: a key, no password prompt)")
    return ("point the Slurm commands at the cluster: export SLURM_CONF=/path/to/slurm.conf (or run on a login node "
            "where `sacct` works); sacct also needs the accounting daemon (slurmdbd)")


def _ask(rec: JobRecord, command: str, what: str) -> subprocess.CompletedProcess:
    """Run a Slurm command about the job; a failure that is not "no such job" is :class:`SchedulerUnreachable`."""
    out = _remote(rec, command)
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        said = next((ln.strip() for ln in reversed(out.stderr.splitlines()) if ln.strip()),
                    f"exit status {out.returncode}")
        raise SchedulerUnreachable(f"cannot ask Slurm about job {rec.job_id}: {what} failed: {said}", _slurm_hint(rec))
    return out


def _this_submission(rec: JobRecord, rows: list[list[str]]) -> list[str] | None:
    """The row (``[name, submit epoch, work dir, ...]``) of this submission among Slurm's rows for the job id: its
    job name is the record's, its work dir the record's (when both are known), and it was submitted at or after the
    record's submission (less :data:`SUBMIT_SLACK_S`), so an older job that had the same id (ids restart when a
    controller's state is reset, while the accounting database keeps the old jobs) is never taken for it. The latest
    such row (a requeued job has several)."""
    slack = SUBMIT_SLACK_S["ssh"] if _over_ssh(rec) else _DEFAULT_SLACK_S
    mine = []
    for row in rows:
        if len(row) < 4 or (rec.job_name and row[0] not in (rec.job_name, _PLACEHOLDER_NAME)):
            continue
        if rec.work_dir and row[2].strip() and os.path.normpath(row[2].strip()) != os.path.normpath(rec.work_dir):
            continue
        try:
            submitted = float(row[1])
        except ValueError:
            continue
        if not rec.submitted or submitted >= rec.submitted - slack:
            mine.append((submitted, row))
    return max(mine, key=lambda m: m[0])[1] if mine else None


def _host(rec: JobRecord) -> str | None:
    """The host the job's folders are on, when not this machine (an ssh tunnel's login host)."""
    return rec.host if _over_ssh(rec) and rec.host else None


class Slurm(Backend):
    """A Slurm profile: NeMo-Run's sbatch script, submitted through its tunnel (:mod:`nemotron.launch.submit`)."""

    executor, runs_here, scheduler = "slurm", False, "Slurm"
    settings = SlurmSettings

    def render(self, job: Job) -> str:
        return submit.render_sbatch(job.req, job.compiled, job.profile_as(SlurmSettings), job.plan)

    def submit(self, job: Job, chain: list[str]) -> tuple[str, str]:
        with submit.reporting_queued(chain, job.plan.stage.recipe):
            job_id = submit.submit(job.req, job.compiled, job.profile_as(SlurmSettings), job.plan, chain_ids=chain)
        return job_id, f"Slurm job {job_id}"

    def unknown_reason(self, rec: JobRecord) -> str:
        """Why a Slurm job's state is ``UNKNOWN``: neither ``sacct`` nor ``squeue`` holds a job of that id with this
        submission's name and time (one line, for ``status`` and ``why``)."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.submitted)) if rec.submitted else "?"
        return (f"Slurm (sacct and squeue) holds no job {rec.job_id} named {rec.job_name} submitted at or after "
                f"{when}: its record was purged, or the controller's state was reset and the id now names another job")

    def state(self, rec: JobRecord) -> tuple[str, str]:
        """``(state, exit code)`` of this submission's allocation from sacct (``PENDING``/``RUNNING`` from squeue
        while sacct has no record yet, which happens for a second or so after sbatch returns); ``UNKNOWN`` when
        neither holds it (:meth:`unknown_reason`). Every lookup is tied to this submission (:func:`_this_submission`:
        the job name, the work dir and the submit time), so a terminal state of an older job with the same id is
        never taken.

        Raises:
            JobFilesMissing: the job's run folder or log folder is gone: the message names the path and the state
                Slurm reports, if any.
            SchedulerUnreachable: sacct or squeue failed (no ``SLURM_CONF``, daemons down, ssh refused): says how
                to point at the cluster.
        """
        job = shlex.quote(rec.job_id)
        # -D: every job that had this id (sacct otherwise shows only the most recent one); epoch submit times
        # (the folder check rides on the same round trip; the exit status stays sacct's)
        command = (f"SLURM_TIME_FORMAT=%s sacct -n -X -P -D -j {job} -o JobName,Submit,WorkDir,State,ExitCode; "
                   f"rc=$?; {folder_check(rec) or 'true'}; exit $rc")
        try:
            out = _ask(rec, command, "sacct")
        except SchedulerUnreachable as exc:
            # the job's folders gone is the more specific answer (and true whatever Slurm would say): name them,
            # with why Slurm could not be asked
            _, gone = split_missing(_remote(rec, command).stdout)
            if gone:
                raise missing_error(rec, gone, f" (and {exc.message})", host=_host(rec)) from None
            raise
        lines, missing = split_missing(out.stdout)
        row = _this_submission(rec, [ln.split("|") for ln in lines if ln.strip()])
        if row is not None and len(row) >= 5:
            st, code = row[3].split()[0] if row[3].strip() else "UNKNOWN", row[4]
        else:
            q = _ask(rec, f"SLURM_TIME_FORMAT=%s squeue -h -j {job} -o '%j|%V|%Z|%T'", "squeue")
            qrow = _this_submission(rec, [ln.split("|") for ln in q.stdout.splitlines() if ln.strip()])
            st, code = (qrow[3].strip() if qrow is not None and len(qrow) >= 4 else "UNKNOWN"), ""
        if missing:
            known = f", Slurm state {st}" + (f" (exit code {code})" if code else "") if st != "UNKNOWN" else ""
            raise missing_error(rec, missing, known, host=_host(rec))
        return st, code

    def started(self, rec: JobRecord) -> bool:
        """Whether the job ever got nodes (sacct's ``AllocNodes`` above 0; a job cancelled while pending has 0, and
        a ``Start`` time all the same)."""
        out = _ask(rec, f"SLURM_TIME_FORMAT=%s sacct -n -X -P -D -j {shlex.quote(rec.job_id)} "
                        "-o JobName,Submit,WorkDir,AllocNodes", "sacct")
        row = _this_submission(rec, [ln.split("|") for ln in out.stdout.splitlines() if ln.strip()])
        nodes = row[3].strip() if row is not None else "0"
        return not nodes.isdigit() or int(nodes) > 0

    def log_files(self, rec: JobRecord) -> list[str]:
        """The task's output (``log-*``; a Ray stage's driver output ``ray-job.log``) then the batch script's
        (``sbatch_*``), on the cluster.

        Raises:
            JobFilesMissing: the log folder is gone; the message names the path.
        """
        d = shlex.quote(rec.log_dir)
        out = _remote(rec, f"ls -1 {d}/log-*_{rec.job_id}_*.out {d}/{RAY_DRIVER_LOG} {d}/sbatch_*_{rec.job_id}.out "
                           f"2>/dev/null; {folder_check(rec, logs_only=True)}")
        lines, missing = split_missing(out.stdout)
        if missing:
            raise missing_error(rec, missing, host=_host(rec))
        return [ln for ln in lines if ln.strip()]

    def follows(self, rec: JobRecord, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name.startswith("log-") or name == RAY_DRIVER_LOG

    def read_log(self, rec: JobRecord, path: str, offset: int = 0) -> str:
        return _remote(rec, f"tail -c +{offset + 1} {shlex.quote(path)} 2>/dev/null").stdout

    def read_log_tail(self, rec: JobRecord, path: str, limit: int) -> str:
        """The log's last ``limit`` bytes, cut where it is (``tail -c``): only they cross ssh."""
        text = _remote(rec, f"tail -c {int(limit)} {shlex.quote(path)} 2>/dev/null").stdout
        raw = text.encode("utf-8", errors="surrogateescape")
        return records.tail_text(raw, len(raw) >= limit)

    def cancel(self, rec: JobRecord) -> None:
        """``scancel`` the job.

        Raises:
            RuntimeFailure: scancel refused (its message kept).
        """
        out = _remote(rec, f"scancel {shlex.quote(rec.job_id)}")
        if out.returncode != 0:
            raise RuntimeFailure(f"scancel {rec.job_id} failed: {out.stderr.strip() or out.stdout.strip()}")

    def ended_at(self, rec: JobRecord) -> float | None:
        """sacct's ``End`` of this submission's row (:func:`_this_submission`); None when not ended."""
        out = _remote(rec, f"SLURM_TIME_FORMAT=%s sacct -n -X -P -D -j {shlex.quote(rec.job_id)} "
                           "-o JobName,Submit,WorkDir,End")
        row = _this_submission(rec, [ln.split("|") for ln in out.stdout.splitlines() if ln.strip()])
        try:
            return float(row[3]) if row is not None else None
        except ValueError:  # "Unknown": not ended
            return None

    def outputs_written(self, rec: JobRecord) -> str:
        return _remote(rec, f"cat {shlex.quote(rec.run_dir + '/' + artifacts.OUTPUTS_FILE)} 2>/dev/null").stdout

    def missing_outputs(self, rec: JobRecord, outputs: dict[str, dict], data: bool) -> tuple[list[str], list[str]]:
        said = _remote(rec, output_check(outputs, data)).stdout.splitlines()
        return ([ln[len(_ABSENT_TAG):] for ln in said if ln.startswith(_ABSENT_TAG)],
                [ln[len(_UNFINISHED_TAG):] for ln in said if ln.startswith(_UNFINISHED_TAG)])
