"""Job records: what every submission leaves in ``$NEMOTRON_HOME/submissions/<experiment id>.json``, and what all
executors share about a submitted job (its folders, its secrets blanked out of log text, the stage's own messages
in a log). What a job's executor does with it (state, logs, cancel, outputs) is its backend's
(:mod:`nemotron.launch.backends`); :mod:`nemotron.launch.jobs` is the entry point for a caller that holds a record.
"""

from __future__ import annotations

import contextlib

import json
import os
import re
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron.config.artifacts import home
from nemotron.errors import ConfigError, RuntimeFailure
from nemotron.profiles.load import load_profiles
from nemotron.profiles.schema import redact_text

#: ``JobRecord.tunnel`` of a job of a ``local`` profile, run by NeMo-Run's local executor under a
#: supervisor process on this machine (:mod:`nemotron.launch.local_job`); its job id is NeMo-Run's app id.
LOCAL_EXECUTOR = "local-executor"

#: The executor of a record written before records kept it, by its ``tunnel`` (any other tunnel: ``slurm``).
_OLD_TUNNELS = {"ray": "ray", LOCAL_EXECUTOR: "local"}

#: Slurm states after which a job never runs again (sacct's names; ``CANCELLED by N`` is cut to CANCELLED).
#: Every backend reports a job's state in these words.
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE", "REVOKED", "SPECIAL_EXIT"}

#: How long following a job (:meth:`nemotron.launch.backends.base.Backend.follow`) waits through its scheduler
#: not answering, or not knowing the submission, before it says so.
FOLLOW_PATIENCE_S = 120.0


@dataclass
class JobRecord:
    """What we know about one submission (all strings; paths are on the cluster).

    ``executor`` names the backend that owns the job (:func:`nemotron.launch.backends.backend_for`): the
    submitting plan's ``plan.executor`` (``slurm``, ``ray``, ``local``). ``tunnel`` is how a Slurm job's
    commands are reached (``local``: here, ``ssh``: over ssh); records written before ``executor`` existed
    told the executor by ``tunnel`` alone (``ray``, :data:`LOCAL_EXECUTOR`, else Slurm), and are read so.
    """

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
    executor: str | None = None  # the backend that owns the job; None in a record written before it was kept

    def __post_init__(self) -> None:
        if self.executor is None:  # an older record: told by its tunnel, as before executors were recorded
            self.executor = _OLD_TUNNELS.get(self.tunnel, "slurm")


def _folder() -> Path:
    return home() / "submissions"


def record_path(rec: JobRecord) -> Path:
    """Where ``rec`` is kept."""
    return _folder() / f"{rec.experiment_id}.json"


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
    if ident is not None and not any(ident in (r.experiment_id, r.job_id) for r in records):
        _refuse_run_here(ident)
    if not records:
        raise ConfigError((f"no job {ident!r}: " if ident else "") + "no job has been submitted from this machine yet "
                          f"(records: {folder}); runs without --run/--batch are not jobs: their messages are printed "
                          "where they run", "submit one with --batch PROFILE or --run PROFILE; a saved log of any run: "
                          "nemotron ultra3 why --log FILE")
    if ident is None:
        return records[-1]
    for rec in reversed(records):
        if ident in (rec.experiment_id, rec.job_id):
            return rec
    recent = ", ".join(f"{r.job_id} ({r.experiment_id})" for r in records[-3:])
    raise ConfigError(f"no submitted job {ident!r}", f"recent: {recent}")


def newer_shell_run(rec: JobRecord) -> str | None:
    """The experiment id of the newest run in this shell (a run folder ``$NEMOTRON_HOME/runs/<id>`` with
    ``job.yaml`` and no submission record) when it started after ``rec`` was submitted, else None: ``why``/``status``
    without an id then say that the job they show is not the last thing run here."""
    folder = _newest_shell_run(rec.submitted or 0, {r.experiment_id for r in records_all()})
    return folder.name if folder else None


def _newest_shell_run(since: float, submitted: set[str]) -> Path | None:
    """The newest run folder under ``$NEMOTRON_HOME/runs`` with ``job.yaml`` (by its mtime, after ``since``, epoch
    seconds) whose name is not a submitted experiment id, or ``None``."""
    newest: tuple[float, Path] | None = None
    with contextlib.suppress(OSError):
        for folder in (home() / "runs").iterdir():
            spec = folder / "job.yaml"
            if folder.name in submitted or not spec.is_file():
                continue
            when = spec.stat().st_mtime
            if when > since and (newest is None or when > newest[0]):
                newest = (when, folder)
    return newest[1] if newest else None


#: The file in a run-here run folder (``$NEMOTRON_HOME/runs/<experiment id>``) that keeps the stage's output as
#: printed (stdout and stderr in order of arrival, a terminal's ``\r\n`` made ``\n``): ``why RUN_ID`` reads it.
SHELL_LOG = "output.log"
#: The file in a run-here run folder with the stage's end: ``{"exit_code": int | null, "ended": epoch seconds}``
#: (``null``: the command was stopped before the stage ended).
SHELL_EXIT = "exit.json"


def shell_run_folder(ident: str) -> Path | None:
    """The run folder of a run in this shell that ``ident`` names (its experiment id or its path: a folder with
    ``job.yaml`` and no submission record), or ``None``."""
    name = Path(ident.rstrip("/")).name
    if any(name == r.experiment_id for r in records_all()):
        return None
    for folder in (home() / "runs" / name, Path(ident)):
        with contextlib.suppress(OSError):
            if (folder / "job.yaml").is_file():
                return folder
    return None


def latest_shell_run() -> Path | None:
    """The run folder of the newest run in this shell when it started after the last submitted job (or nothing was
    submitted), else ``None``: what ``why`` without an id explains."""
    records = records_all()
    since = records[-1].submitted or 0 if records else 0
    return _newest_shell_run(since, {r.experiment_id for r in records})


def _refuse_run_here(ident: str) -> None:
    """Refuse the id (or path) of the run folder of a run in this shell (:func:`nemotron.launch.execute.run_dir`,
    ``$NEMOTRON_HOME/runs/<experiment id>``, holding ``job.yaml`` but no submission record): such a run is no job
    that ``why``/``status``/``logs``/``cancel`` can ask about; its messages were printed where it ran.

    Raises:
        ConfigError: ``ident`` names such a run folder.
    """
    name = Path(ident.rstrip("/")).name
    for folder in (home() / "runs" / name, Path(ident)):
        with contextlib.suppress(OSError):
            if (folder / "job.yaml").is_file():
                break
    else:
        return
    raise ConfigError(f"{name!r} is a run in this shell on this machine, not a submitted job: status, logs and "
                      "cancel know the jobs a profile's scheduler ran (--batch PROFILE, or --run on a Slurm or Ray "
                      "profile)",
                      f"its messages were printed where it ran and kept in its run folder ({folder}: "
                      f"{SHELL_LOG}, {SHELL_EXIT}, train.yaml, job.yaml); `nemotron ultra3 why {name}` explains "
                      "how it ended")


class SchedulerUnreachable(RuntimeFailure):
    """Slurm could not be asked about a job (``sacct``/``squeue`` failed: no ``SLURM_CONF``, no controller or
    accounting daemon reachable, ssh refused)."""


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


def profile_secrets(rec: JobRecord) -> dict[str, str]:
    try:

        return load_profiles(Path(rec.env_file)).get(rec.profile).secret_values()
    except Exception:  # the profile may have changed or gone since the submission
        return {}


#: What the folder check of :func:`folder_check` prints for a folder that is not there.
_MISSING_TAG = "nemotron-missing-folder:"


class JobFilesMissing(RuntimeFailure):
    """The folders a job record names are gone (moved or deleted): status and logs cannot be told."""


def job_folders(rec: JobRecord, logs_only: bool = False) -> list[tuple[str, str]]:
    """``(what, path)`` of the folders the record names: the run folder (train.yaml, job.yaml; a ``local``
    profile's ``local-job.json``) and the log folder."""
    out = [] if logs_only else [("run folder", rec.run_dir)]
    if rec.log_dir and rec.log_dir != rec.run_dir:
        out.append(("log folder", rec.log_dir))
    return out


def folder_check(rec: JobRecord, logs_only: bool = False) -> str:
    """A shell line that prints :data:`_MISSING_TAG` + the path for each of the job's folders that is missing
    (appended to the command already sent to the cluster, so the check costs no extra round trip)."""
    return "; ".join(f"test -d {shlex.quote(path)} || echo {shlex.quote(_MISSING_TAG + path)}"
                     for _, path in job_folders(rec, logs_only))


def missing_error(rec: JobRecord, missing: list[str], known: str = "", host: str | None = None) -> JobFilesMissing:
    """The error for the job's ``missing`` paths; ``known``: what the scheduler still says (``, Slurm state X``);
    ``host``: where the paths were looked for, when not this machine."""
    names = dict((path, what) for what, path in job_folders(rec))
    where = "; ".join(f"its {names.get(p, 'folder')} {p} does not exist" for p in missing)
    where_host = f" on {host}" if host else ""
    return JobFilesMissing(
        f"job {rec.job_id} ({rec.experiment_id}){known}: {where}{where_host} (moved or deleted?)",
        f"move it back to that path to read the job's state and logs; the record is {record_path(rec)}")


def split_missing(stdout: str) -> tuple[list[str], list[str]]:
    """``(other lines, missing folders)`` of a command's output that ended with :func:`folder_check`."""
    lines, missing = [], []
    for ln in stdout.splitlines():
        (missing.append(ln[len(_MISSING_TAG):]) if ln.startswith(_MISSING_TAG) else lines.append(ln))
    return lines, missing


def status_lines(rec: JobRecord, st: str, code: str, reason: str | None = None) -> list[str]:
    """What ``status`` prints: ``name: value`` lines, one per field, so that no terminal width ever wraps a job
    id, an experiment id or a path in the middle (they are copied into ``logs``/``cancel`` and shells); ``reason``
    (why the state is what it is, e.g. :func:`unknown_reason`) follows the state when given."""
    fields = [("job", rec.job_id), ("experiment", rec.experiment_id), ("stage", rec.title), ("profile", rec.profile),
              ("state", st), *([("reason", reason)] if reason else []), ("exit code", code or "-"),
              ("run folder", rec.run_dir), ("logs", rec.log_dir)]
    width = max(len(k) for k, _ in fields) + 1
    return [f"{k + ':':<{width}} {v}" for k, v in fields]


#: Terminal escape sequences (CSI: colours, cursor moves; OSC: titles, links) that Ray's log prefixes,
#: progress bars and colour-forcing tools write into job logs.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def redactor(rec: JobRecord, keep_colour: bool = False):
    """A function that blanks the profile's secret values out of log text and, unless ``keep_colour``
    (output to a terminal), removes terminal escape sequences, so a log piped to a file or shown in a
    summary is plain text."""

    secrets = list(profile_secrets(rec).values())

    def clean(text: str) -> str:
        text = text if keep_colour else _ESCAPES.sub("", text)
        return redact_text(text, secrets) if secrets else text

    return clean


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


#: How much of each log's end ``why`` reads, in bytes (8 MiB): a job's end (the scheduler's verdict, the error, the
#: last traceback) is in its last lines, so memory and time stay bounded on a multi-GB log (about 2 s of patterns
#: at the 500k-line, 34 MB log's 4 MB/s on two shared cores). A log up to this size is read whole: the same result.
TAIL_BYTES = 8 << 20


def tail_text(raw: bytes, cut: bool) -> str:
    """``raw`` (a log's last bytes) as text (undecodable bytes as U+FFFD); with ``cut`` (they start inside the file)
    the first, partial line is dropped (unless it is the only one: a single long line is kept)."""
    if cut:
        nl = raw.find(b"\n")
        if 0 <= nl < len(raw) - 1:
            raw = raw[nl + 1:]
    return raw.decode("utf-8", errors="replace")


def read_tail(path: str | Path, limit: int | None = None) -> str:
    """The last ``limit`` bytes (default :data:`TAIL_BYTES`) of the file ``path``, from its first whole line
    (:func:`tail_text`): the whole file when it is smaller.

    Raises:
        OSError: the file cannot be read.
    """
    limit = TAIL_BYTES if limit is None else limit
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        start = max(0, size - limit)
        fh.seek(start)
        return tail_text(fh.read(limit), start > 0)
