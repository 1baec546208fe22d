"""Submitted jobs: records, status, logs, cancel, and following an attached run.

Every submission writes ``$NEMOTRON_HOME/submissions/<experiment id>.json``. ``status``, ``logs`` and
``cancel`` accept an experiment id, a Slurm job id, or nothing (the most recent submission). Slurm is
asked through its own commands (``sacct``, ``squeue``, ``scancel``), run here for a local tunnel and
over ``ssh`` for an SSH profile. The final state comes from ``sacct``: an attached run exits 0 only
when Slurm says COMPLETED.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron.config import artifacts
from nemotron.config.artifacts import home
from nemotron.errors import ConfigError, RuntimeFailure
from nemotron.launch import local_job
from nemotron.profiles.load import load_profiles, use_env_file
from nemotron.profiles.schema import redact_text

#: ``JobRecord.tunnel`` of a job of a ``local`` profile, run by NeMo-Run's local executor under a
#: supervisor process on this machine (:mod:`nemotron.launch.local_job`); its job id is NeMo-Run's app id.
LOCAL_EXECUTOR = "local-executor"

#: The task log of a Ray stage's Slurm job (its driver's output), in the job's log folder next to
#: ``ray-head.log`` and the batch script's ``sbatch_*`` log (see ``submit.RAY_TEMPLATE``).
RAY_DRIVER_LOG = "ray-job.log"

#: Slurm states after which a job never runs again (sacct's names; ``CANCELLED by N`` is cut to CANCELLED).
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE", "REVOKED", "SPECIAL_EXIT"}


@dataclass
class JobRecord:
    """What we know about one submission (all strings; paths are on the cluster)."""

    experiment_id: str
    job_id: str
    stage: str
    title: str
    profile: str
    env_file: str
    run_dir: str
    log_dir: str
    job_name: str
    tunnel: str = "local"
    host: str | None = None
    user: str | None = None
    submitted: float = 0.0
    outputs: dict | None = None  # artifact name -> fields, recorded in the store once the job COMPLETED
    config_hash: str | None = None
    recorded: bool = False
    config: str | None = None  # the -c name the job ran with (artifacts are matched by it)
    port: int | None = None  # SSH port of an ssh-tunnel profile
    identity: str | None = None  # SSH private key of an ssh-tunnel profile
    work_dir: str | None = None  # the folder sbatch ran in (Slurm's WorkDir; a local tunnel's), None: not known


def _folder() -> Path:
    return home() / "submissions"


def save(rec: JobRecord) -> Path:
    """Write the record atomically; returns its path."""
    rec.submitted = rec.submitted or time.time()
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{rec.experiment_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(rec), indent=2), encoding="utf-8")
    os.replace(tmp, path)
    return path


def records_all() -> list[JobRecord]:
    """Every submission record on this machine (``$NEMOTRON_HOME/submissions/*.json``), oldest first (by
    ``submitted``, seconds since the epoch). An unreadable record is said on stderr (its file, what to do) and left
    out, never silently skipped."""
    folder = _folder()
    records = []
    for f in folder.glob("*.json") if folder.is_dir() else []:
        try:
            records.append(JobRecord(**json.loads(f.read_text(encoding="utf-8"))))
        except (OSError, json.JSONDecodeError, TypeError) as exc:  # said, never silently skipped
            import sys

            print(f"warning: {f}: unreadable submission record ({type(exc).__name__}); left out (delete it, or "
                  "restore it from a backup)", file=sys.stderr)
            continue
    records.sort(key=lambda r: r.submitted)
    return records


def load(ident: str | None) -> JobRecord:
    """The record for an experiment id or Slurm job id, or the most recent one.

    Raises:
        ConfigError: nothing submitted yet, or no submission with that id.
    """
    folder = _folder()
    records = records_all()
    if not records:
        raise ConfigError((f"no job {ident!r}: " if ident else "") + "no job has been submitted from this machine yet "
                          f"(records: {folder})", "submit one with --batch PROFILE or --run PROFILE")
    if ident is None:
        return records[-1]
    for rec in reversed(records):
        if ident in (rec.experiment_id, rec.job_id):
            return rec
    recent = ", ".join(f"{r.job_id} ({r.experiment_id})" for r in records[-3:])
    raise ConfigError(f"no submitted job {ident!r}", f"recent: {recent}")


def _remote(rec: JobRecord, command: str) -> subprocess.CompletedProcess:
    if rec.tunnel == "ssh":
        target = f"{rec.user}@{rec.host}" if rec.user else str(rec.host)
        argv = ["ssh", "-o", "BatchMode=yes", *(["-p", str(rec.port)] if rec.port else []),
                *(["-i", rec.identity] if rec.identity else []), target, command]
    else:
        argv = ["bash", "-c", command]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeFailure(f"cannot ask Slurm about job {rec.job_id}: {exc}") from None


#: Ray job states in Slurm's words, so that every caller speaks one vocabulary.
_RAY_STATES = {"PENDING": "PENDING", "RUNNING": "RUNNING", "SUCCEEDED": "COMPLETED", "FAILED": "FAILED",
               "STOPPED": "CANCELLED"}


def ray_client(address: str, secrets: dict[str, str] | None = None):
    """A Ray ``JobSubmissionClient`` for ``address``. Ray (2.5x+) clusters started with ``ray start``
    use token authentication: the token comes from the profile's secret ``RAY_AUTH_TOKEN``, else from
    ``$RAY_AUTH_TOKEN`` / ``$RAY_AUTH_TOKEN_PATH`` / ``~/.ray/auth_token``, as Ray's own CLI finds it.

    Raises:
        RuntimeFailure: Ray missing or the cluster unreachable.
    """
    token = (secrets or {}).get("RAY_AUTH_TOKEN")  # set before Ray is imported: it reads them at import
    if token:
        os.environ["RAY_AUTH_TOKEN"] = token
    token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if token or os.environ.get("RAY_AUTH_TOKEN") or token_file.is_file():
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise RuntimeFailure(f"Ray is not importable ({exc})",
                             "Ray is part of nemotron-cli's base install: reinstall it (pip install nemotron-cli, "
                             "or uv sync in a checkout)") from None
    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # connection refused, wrong address, authentication
        raise RuntimeFailure(f"cannot reach the Ray cluster at {address}: {type(exc).__name__}: "
                             f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from None


def _profile_secrets(rec: JobRecord) -> dict[str, str]:
    try:

        return load_profiles(Path(rec.env_file)).get(rec.profile).secret_values()
    except Exception:  # the profile may have changed or gone since the submission
        return {}


def _ray_client(rec: JobRecord):
    return ray_client(str(rec.host), _profile_secrets(rec))


#: What the folder check of :func:`_folder_check` prints for a folder that is not there.
_MISSING_TAG = "nemotron-missing-folder:"


class JobFilesMissing(RuntimeFailure):
    """The folders a job record names are gone (moved or deleted): status and logs cannot be told."""


def _job_folders(rec: JobRecord, logs_only: bool = False) -> list[tuple[str, str]]:
    """``(what, path)`` of the folders the record names: the run folder (train.yaml, job.yaml; a ``local``
    profile's ``local-job.json``) and the log folder."""
    out = [] if logs_only else [("run folder", rec.run_dir)]
    if rec.log_dir and rec.log_dir != rec.run_dir:
        out.append(("log folder", rec.log_dir))
    return out


def _folder_check(rec: JobRecord, logs_only: bool = False) -> str:
    """A shell line that prints :data:`_MISSING_TAG` + the path for each of the job's folders that is missing
    (appended to the command already sent to the cluster, so the check costs no extra round trip)."""
    return "; ".join(f"test -d {shlex.quote(path)} || echo {shlex.quote(_MISSING_TAG + path)}"
                     for _, path in _job_folders(rec, logs_only))


def _missing_error(rec: JobRecord, missing: list[str], known: str = "") -> JobFilesMissing:
    names = dict((path, what) for what, path in _job_folders(rec))
    where = "; ".join(f"its {names.get(p, 'folder')} {p} does not exist" for p in missing)
    where_host = f" on {rec.host}" if rec.tunnel == "ssh" and rec.host else ""
    return JobFilesMissing(
        f"job {rec.job_id} ({rec.experiment_id}){known}: {where}{where_host} (moved or deleted?)",
        f"move it back to that path to read the job's state and logs; the record is "
        f"{_folder() / (rec.experiment_id + '.json')}")


def _split_missing(stdout: str) -> tuple[list[str], list[str]]:
    """``(other lines, missing folders)`` of a command's output that ended with :func:`_folder_check`."""
    lines, missing = [], []
    for ln in stdout.splitlines():
        (missing.append(ln[len(_MISSING_TAG):]) if ln.startswith(_MISSING_TAG) else lines.append(ln))
    return lines, missing


def _local_missing(rec: JobRecord, logs_only: bool = False) -> list[str]:
    """The job's folders that are missing on this machine (a ``local`` profile's job); the run folder counts as
    missing when its ``local-job.json`` is gone (the job's state lives there)."""

    missing = [path for _, path in _job_folders(rec, logs_only) if not os.path.isdir(path)]
    state_file = os.path.join(rec.run_dir, local_job.STATE_FILE)
    if not missing and not os.path.isfile(state_file):
        missing.append(state_file)
    return missing


#: How far before our record of a submission (``JobRecord.submitted``: taken before sbatch ran) Slurm's own
#: ``Submit`` time of the job may lie and still be this submission: Slurm keeps whole seconds; a cluster reached over
#: ssh keeps its own clock (NTP keeps clocks within a second; a minute is allowed).
SUBMIT_SLACK_S = {"ssh": 60.0}
_DEFAULT_SLACK_S = 5.0


class SchedulerUnreachable(RuntimeFailure):
    """Slurm could not be asked about a job (``sacct``/``squeue`` failed: no ``SLURM_CONF``, no controller or
    accounting daemon reachable, ssh refused)."""


def _slurm_hint(rec: JobRecord) -> str:
    if rec.tunnel == "ssh":
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


#: The job name that Slurm's accounting (22.05, seen on the local test cluster) holds for a job in its first
#: second or so, before the job's own name arrives: the submit time alone ties such a row to the submission.
_PLACEHOLDER_NAME = "allocation"


def _this_submission(rec: JobRecord, rows: list[list[str]]) -> list[str] | None:
    """The row (``[name, submit epoch, work dir, ...]``) of this submission among Slurm's rows for the job id: its
    job name is the record's, its work dir the record's (when both are known), and it was submitted at or after the
    record's submission (less :data:`SUBMIT_SLACK_S`), so an older job that had the same id (ids restart when a
    controller's state is reset, while the accounting database keeps the old jobs) is never taken for it. The latest
    such row (a requeued job has several)."""
    slack = SUBMIT_SLACK_S.get(rec.tunnel, _DEFAULT_SLACK_S)
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


def unknown_reason(rec: JobRecord) -> str:
    """Why a Slurm job's state is ``UNKNOWN``: neither ``sacct`` nor ``squeue`` holds a job of that id with this
    submission's name and time (one line, for ``status`` and ``why``)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.submitted)) if rec.submitted else "?"
    return (f"Slurm (sacct and squeue) holds no job {rec.job_id} named {rec.job_name} submitted at or after {when}: "
            "its record was purged, or the controller's state was reset and the id now names another job")


def state(rec: JobRecord) -> tuple[str, str]:
    """``(state, exit code)`` of this submission's allocation from sacct (``PENDING``/``RUNNING`` from squeue
    while sacct has no record yet, which happens for a second or so after sbatch returns); ``UNKNOWN`` when neither
    holds it (:func:`unknown_reason`). Every lookup is tied to this submission (:func:`_this_submission`: the job
    name, the work dir and the submit time), so a terminal state of an older job with the same id is never taken. For a job
    on a Ray cluster, the Ray job status in the same words (SUCCEEDED is COMPLETED, STOPPED CANCELLED).

    Raises:
        JobFilesMissing: the job's run folder or log folder (or a ``local`` profile's ``local-job.json``) is
            gone: the message names the path and the state Slurm reports, if any.
        SchedulerUnreachable: sacct or squeue failed (no ``SLURM_CONF``, daemons down, ssh refused): says how to
            point at the cluster.
        RuntimeFailure: the Ray cluster cannot be asked.
    """
    if rec.tunnel == "ray":
        status = str(_ray_client(rec).get_job_status(rec.job_id)).rsplit(".", 1)[-1]
        return _RAY_STATES.get(status, status), ""
    if rec.tunnel == LOCAL_EXECUTOR:

        missing = _local_missing(rec)
        if missing:
            raise _missing_error(rec, missing)
        st, code = local_job.status(rec.run_dir)
        return st, "" if code is None else str(code)
    job = shlex.quote(rec.job_id)
    # -D: every job that had this id (sacct otherwise shows only the most recent one); epoch submit times
    # (the folder check rides on the same round trip; the exit status stays sacct's)
    out = _ask(rec, f"SLURM_TIME_FORMAT=%s sacct -n -X -P -D -j {job} -o JobName,Submit,WorkDir,State,ExitCode; "
                    f"rc=$?; {_folder_check(rec) or 'true'}; exit $rc", "sacct")
    lines, missing = _split_missing(out.stdout)
    row = _this_submission(rec, [ln.split("|") for ln in lines if ln.strip()])
    if row is not None and len(row) >= 5:
        st, code = row[3].split()[0] if row[3].strip() else "UNKNOWN", row[4]
    else:
        q = _ask(rec, f"SLURM_TIME_FORMAT=%s squeue -h -j {job} -o '%j|%V|%Z|%T'", "squeue")
        qrow = _this_submission(rec, [ln.split("|") for ln in q.stdout.splitlines() if ln.strip()])
        st, code = (qrow[3].strip() if qrow is not None and len(qrow) >= 4 else "UNKNOWN"), ""
    if missing:
        known = f", Slurm state {st}" + (f" (exit code {code})" if code else "") if st != "UNKNOWN" else ""
        raise _missing_error(rec, missing, known)
    return st, code


def status_lines(rec: JobRecord, st: str, code: str, reason: str | None = None) -> list[str]:
    """What ``status`` prints: ``name: value`` lines, one per field, so that no terminal width ever wraps a job
    id, an experiment id or a path in the middle (they are copied into ``logs``/``cancel`` and shells); ``reason``
    (why the state is what it is, e.g. :func:`unknown_reason`) follows the state when given."""
    fields = [("job", rec.job_id), ("experiment", rec.experiment_id), ("stage", rec.title), ("profile", rec.profile),
              ("state", st), *([("reason", reason)] if reason else []), ("exit code", code or "-"),
              ("run folder", rec.run_dir), ("logs", rec.log_dir)]
    width = max(len(k) for k, _ in fields) + 1
    return [f"{k + ':':<{width}} {v}" for k, v in fields]


def started(rec: JobRecord) -> bool:
    """Whether a Slurm job ever got nodes (sacct's ``AllocNodes`` above 0; a job cancelled while pending has
    0, and a ``Start`` time all the same). Jobs on a Ray cluster or a ``local`` profile: True."""
    if rec.tunnel in ("ray", LOCAL_EXECUTOR):
        return True
    out = _ask(rec, f"SLURM_TIME_FORMAT=%s sacct -n -X -P -D -j {shlex.quote(rec.job_id)} -o JobName,Submit,WorkDir,AllocNodes",
               "sacct")
    row = _this_submission(rec, [ln.split("|") for ln in out.stdout.splitlines() if ln.strip()])
    nodes = row[3].strip() if row is not None else "0"
    return not nodes.isdigit() or int(nodes) > 0


def log_files(rec: JobRecord) -> list[str]:
    """The job's log files on the cluster: the task's output (``log-*``; a Ray stage's driver output
    ``ray-job.log``) then the batch script's (``sbatch_*``). A job on an existing Ray cluster has one
    log, kept by the Ray cluster (named ``log-ray``). Empty: the job has written none yet.

    Raises:
        JobFilesMissing: the log folder (a ``local`` profile's job: also its run folder or ``local-job.json``)
            is gone; the message names the path.
    """
    if rec.tunnel == "ray":
        return ["log-ray"]
    if rec.tunnel == LOCAL_EXECUTOR:  # NeMo-Run's (torchx's) files of the task: stdout, then stderr

        missing = _local_missing(rec)
        if missing:
            raise _missing_error(rec, missing)
        state = local_job.read_state(rec.run_dir)  # files inside the (present) log folder: absent = not written yet
        return [p for p in (state.get("stdout"), state.get("stderr")) if p and os.path.isfile(p)]
    d = shlex.quote(rec.log_dir)
    out = _remote(rec, f"ls -1 {d}/log-*_{rec.job_id}_*.out {d}/{RAY_DRIVER_LOG} {d}/sbatch_*_{rec.job_id}.out "
                       f"2>/dev/null; {_folder_check(rec, logs_only=True)}")
    lines, missing = _split_missing(out.stdout)
    if missing:
        raise _missing_error(rec, missing)
    return [ln for ln in lines if ln.strip()]


def read_log(rec: JobRecord, path: str, offset: int = 0) -> str:
    """Text of ``path`` from byte ``offset`` on (empty when absent)."""
    if rec.tunnel == "ray":
        return _ray_client(rec).get_job_logs(rec.job_id).encode()[offset:].decode(errors="replace")
    if rec.tunnel == LOCAL_EXECUTOR:  # a file on this machine
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""
    out = _remote(rec, f"tail -c +{offset + 1} {shlex.quote(path)} 2>/dev/null")
    return out.stdout


#: Terminal escape sequences (CSI: colours, cursor moves; OSC: titles, links) that Ray's log prefixes,
#: progress bars and colour-forcing tools write into job logs.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def redactor(rec: JobRecord, keep_colour: bool = False):
    """A function that blanks the profile's secret values out of log text and, unless ``keep_colour``
    (output to a terminal), removes terminal escape sequences, so a log piped to a file or shown in a
    summary is plain text."""

    secrets = list(_profile_secrets(rec).values())

    def clean(text: str) -> str:
        text = text if keep_colour else _ESCAPES.sub("", text)
        return redact_text(text, secrets) if secrets else text

    return clean


#: How long :func:`follow` waits through Slurm not answering, or not knowing the submission, before it says so.
FOLLOW_PATIENCE_S = 120.0


def follow(rec: JobRecord, *, poll_s: float = 1.0, stream=None) -> tuple[str, str]:
    """Stream the job's task log until Slurm reports a terminal state of this submission; returns
    ``(state, exit code)``.

    Raises:
        SchedulerUnreachable: Slurm could not be asked for :data:`FOLLOW_PATIENCE_S` seconds in a row.
        RuntimeFailure: Slurm held no record of this submission for that long (:func:`unknown_reason`).
    """
    stream = stream or sys.stdout
    redact = redactor(rec, keep_colour=stream.isatty())
    offsets: dict[str, int] = {}
    st, code = "PENDING", ""
    last_state = None
    failing_since = unknown_since = None
    while True:
        try:
            st, code = state(rec)
        except SchedulerUnreachable:  # a controller restarting: wait a while, then say so
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > FOLLOW_PATIENCE_S:
                raise
            time.sleep(poll_s)
            continue
        failing_since = None
        # no record of this submission at all (its id reused by a reset controller): never waits forever
        unknown_since = (unknown_since or time.monotonic()) if st == "UNKNOWN" else None
        if unknown_since is not None and time.monotonic() - unknown_since > FOLLOW_PATIENCE_S:
            raise RuntimeFailure(f"job {rec.job_id}: {unknown_reason(rec)}",
                                 f"its logs, if any: {rec.log_dir}; `nemotron {rec.job_name.split('-', 1)[0]} why "
                                 f"{rec.experiment_id}` once Slurm knows it")
        if st != last_state:
            print(f"[nemotron] job {rec.job_id}: {st}", file=sys.stderr, flush=True)
            last_state = st
        for path in [p for p in log_files(rec) if p.rsplit("/", 1)[-1].startswith("log-")
                     or p.rsplit("/", 1)[-1] == RAY_DRIVER_LOG or rec.tunnel == LOCAL_EXECUTOR]:
            chunk = read_log(rec, path, offsets.get(path, 0))
            if chunk:
                offsets[path] = offsets.get(path, 0) + len(chunk.encode())
                out = sys.stderr if path.endswith("/stderr.log") and rec.tunnel == LOCAL_EXECUTOR else stream
                out.write(redact(chunk))
                out.flush()
        if st in TERMINAL:
            return st, code
        time.sleep(poll_s)


#: What a launcher puts before each line of a rank: torchrun's ``--tee`` prefix ``[default3]:`` (or
#: ``[rank3]:``), ``srun --label``'s ``3: ``.
_RANK_PREFIX = re.compile(r"^(?:\[(?:default|rank)\d+\]:|\d+: )")


def stage_messages(text: str, title: str, n: int = 10) -> list[str]:
    """The stage's own messages in a job log: the lines that :func:`nemotron.runtime.dispatch.run` and the runtimes
    print (``error: ...``, ``hint: ...``, ``<title>: ...``, e.g. ``ultra3 pretrain: ... megatron.bridge is
    not importable here``), the rank prefix removed, each once (the first ``n`` distinct), with
    ``(N ranks)`` when several ranks printed it. A launcher's own report (torchrun's failure summary)
    is not one of them."""
    counts: dict[str, int] = {}
    for raw in text.splitlines():
        line = _RANK_PREFIX.sub("", raw, count=1).rstrip()
        if line.startswith(("error: ", "hint: ", f"{title}: ")):
            counts[line] = counts.get(line, 0) + 1
    return [f"{line} ({count} ranks)" if count > 1 else line for line, count in list(counts.items())[:n]]


def failure_messages(rec: JobRecord, n: int = 10) -> list[str]:
    """:func:`stage_messages` of the job's logs (task log, then the batch script's), redacted."""
    redact = redactor(rec)
    for path in log_files(rec):
        found = stage_messages(redact(read_log(rec, path)), rec.title, n)
        if found:
            return found
    return []


def tail_lines(rec: JobRecord, n: int = 20) -> list[str]:
    """The last ``n`` lines of the job's logs (task log first, then the batch script's), redacted."""
    redact = redactor(rec)
    for path in log_files(rec):  # the task's own output first; the batch script's trace when it has none
        lines = redact(read_log(rec, path)).splitlines()
        if any(ln.strip() for ln in lines):
            return lines[-n:]
    return []


def cancel(rec: JobRecord) -> None:
    """``scancel`` the job (``stop_job`` on a Ray cluster; the cluster itself is never touched).

    Raises:
        RuntimeFailure: scancel refused (its message kept).
    """
    if rec.tunnel == "ray":
        _ray_client(rec).stop_job(rec.job_id)
        return
    if rec.tunnel == LOCAL_EXECUTOR:

        if not local_job.cancel(rec.run_dir):
            raise RuntimeFailure(f"local job {rec.job_id} has no supervisor process any more; nothing to cancel")
        return
    out = _remote(rec, f"scancel {shlex.quote(rec.job_id)}")
    if out.returncode != 0:
        raise RuntimeFailure(f"scancel {rec.job_id} failed: {out.stderr.strip() or out.stdout.strip()}")


#: What :func:`_output_check` prints for an output path that is not there / a data output not finished.
_ABSENT_TAG, _UNFINISHED_TAG = "nemotron-absent:", "nemotron-unfinished:"


def _path_fields(fields: dict) -> list[str]:
    """The paths an artifact's fields name (``path`` and every ``*_path``): each must exist for it to be recorded."""
    return [str(v) for k, v in fields.items() if (k == "path" or k.endswith("_path")) and isinstance(v, str) and v]


def _output_check(outputs: dict[str, dict], data: bool) -> str:
    """A shell line printing :data:`_ABSENT_TAG` + path for each output path that does not exist and, for a data
    stage (``data``), :data:`_UNFINISHED_TAG` + folder for an output folder whose ``manifest.json`` (written last)
    does not say ``"complete": true``."""
    parts = []
    for fields in outputs.values():
        for path in _path_fields(fields):
            parts.append(f"test -e {shlex.quote(path)} || echo {shlex.quote(_ABSENT_TAG + path)}")
        folder = fields.get("path")
        if data and isinstance(folder, str) and folder:
            manifest = shlex.quote(f"{folder}/{artifacts.MANIFEST}")
            parts.append(f"grep -Eq '\"complete\": *true' {manifest} 2>/dev/null || "
                         f"echo {shlex.quote(_UNFINISHED_TAG + folder)}")
    return "; ".join(parts) or "true"


def ended_at(rec: JobRecord) -> float | None:
    """When this submission ended (seconds since the epoch): sacct's ``End`` of its row (:func:`_this_submission`),
    a ``local`` profile's supervisor record; None when not known (a Ray job, a job not ended)."""
    if rec.tunnel == "ray":
        return None
    if rec.tunnel == LOCAL_EXECUTOR:
        ended = local_job.read_state(rec.run_dir).get("ended")
        return float(ended) if isinstance(ended, (int, float)) else None
    out = _remote(rec, f"SLURM_TIME_FORMAT=%s sacct -n -X -P -D -j {shlex.quote(rec.job_id)} -o JobName,Submit,WorkDir,End")
    row = _this_submission(rec, [ln.split("|") for ln in out.stdout.splitlines() if ln.strip()])
    try:
        return float(row[3]) if row is not None else None
    except ValueError:  # "Unknown": not ended
        return None


def record_outputs(rec: JobRecord) -> list[dict]:
    """Record the job's artifacts in the store (once), after its scheduler reported COMPLETED, stamped with the
    time the job ended (:func:`ended_at`; not the time a command looked), and only when what it names is there:
    every path of every artifact exists, and a data stage's output folder holds its ``manifest.json`` saying
    ``"complete": true`` (checked where the job ran: here, or over ssh). A job on a Ray cluster is not checked
    (its storage is the Ray cluster's).

    Returns: the records written (each as :func:`nemotron.config.artifacts.record` returns it).

    Raises:
        RuntimeFailure: an output is absent or unfinished: nothing of this job is recorded; the message names the
            artifact and the path.
    """
    if rec.recorded or not rec.outputs:
        return []

    from nemotron.config.registry import STAGES

    # where the submitting command kept its records: the [artifacts] root of the env.toml it read
    use_env_file(rec.env_file if rec.env_file and os.path.isfile(rec.env_file) else None)

    actual = None if rec.tunnel == "ray" else _remote(rec, f"cat {shlex.quote(rec.run_dir + '/' + artifacts.OUTPUTS_FILE)} "
                                                           "2>/dev/null").stdout
    outputs = artifacts.merge_outputs(rec.outputs, actual)
    if rec.tunnel != "ray":
        data = any(s.name == rec.stage and s.family.prepares_data for s in STAGES)
        said = _remote(rec, _output_check(outputs, data)).stdout.splitlines()
        absent = [ln[len(_ABSENT_TAG):] for ln in said if ln.startswith(_ABSENT_TAG)]
        unfinished = [ln[len(_UNFINISHED_TAG):] for ln in said if ln.startswith(_UNFINISHED_TAG)]
        if absent or unfinished:
            names = {p: n for n, fields in outputs.items() for p in _path_fields(fields)}
            what = "; ".join([*(f"{names.get(p, 'output')}: {p} does not exist" for p in absent),
                              *(f"{names.get(p, 'output')}: {p} has no complete {artifacts.MANIFEST}"
                                for p in unfinished)])
            raise RuntimeFailure(f"job {rec.job_id} ({rec.experiment_id}) ended COMPLETED but its output is not "
                                 f"there: {what}; not recorded as an artifact",
                                 f"read its log (nemotron {rec.job_name.split('-', 1)[0]} logs {rec.job_id}); "
                                 "run the stage again to make it")
    at = ended_at(rec)
    out = [artifacts.record(name, {**fields, "stage": rec.stage, "config": rec.config,
                                   "experiment_id": rec.experiment_id, "job_id": rec.job_id,
                                   "config_hash": rec.config_hash}, at=at)
           for name, fields in outputs.items()]
    rec.recorded = True
    save(rec)
    return out
