"""``why [JOB]``: how a finished job ended, from its logs and its state, with a one-line fix hint.

Inputs: the job's log files (the task's output, then the batch script's: :func:`nemotron.launch.jobs.log_files`), its
final state and exit code (``sacct``, or a ``local`` profile's supervisor record: :func:`nemotron.launch.jobs.state`),
and our run record (:class:`nemotron.launch.jobs.JobRecord`). ``--log FILE`` classifies files alone.

How a cause is chosen: the scheduler's own verdicts first (walltime, preemption, node failure, the cgroup's
out-of-memory killer), since a job killed from outside leaves the last word to Slurm; then a cancellation (state
``CANCELLED``: whatever the log shows on the way out, a saved checkpoint and exit 75 included, is listed as
``also``, never the cause); then the
first of the log patterns below in the order of :data:`CAUSES`, which lists root causes before their consequences
(an out-of-memory rank makes the other ranks' collectives time out: the OOM is named, the NCCL timeout listed as
``also``); a Python traceback last, named by its exception and the first frame in our code (``src/nemotron`` or
``stages/``; for code that is not ours, the first frame outside the interpreter's and ``site-packages``).

The patterns were written against real logs: the fixtures in ``tests/fixtures/why/`` (excerpts of public bug
reports, each naming its source) and the local Slurm cluster's own failed jobs (``tests/launch/test_why.py``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemotron.launch import records


@dataclass(frozen=True)
class Cause:
    """One way a job ends: ``id`` (stable, for ``--json``), ``title``, ``patterns`` (regular expressions searched
    line by line, case-sensitive), ``hint`` (one line: what to do)."""

    id: str
    title: str
    patterns: tuple[str, ...]
    hint: str


#: Root causes before their consequences (module docstring).
CAUSES: tuple[Cause, ...] = (
    Cause("walltime", "hit the walltime (Slurm's time limit)",
          (r"CANCELLED AT \S+ DUE TO TIME LIMIT", r"DUE TO TIME LIMIT"),
          "the job resumes from its last checkpoint: submit it again (run.chain queues the continuation jobs), or "
          "raise the profile's time; `estimate` says how many jobs the run needs"),
    Cause("preempted", "preempted by a higher-priority job (requeued if the job allows it)",
          (r"DUE TO PREEMPTION", r"\bPREEMPTED\b", r"job \S+ requeued", r"[Rr]equeue(d)? due to preemption"),
          "nothing is lost past the last checkpoint: with run.requeue the job continues by itself; else submit "
          "it again, or use a partition/QOS that is not preemptible"),
    Cause("node-failure", "a node failed under the job",
          (r"DUE TO NODE FAILURE", r"\bNODE_FAIL\b", r"error: Node failure on \S+"),
          "submit it again (it resumes from the last checkpoint); report the node to the cluster admins and "
          "exclude it (profile.exclude / sbatch --exclude)"),
    Cause("host-oom", "killed by the node's out-of-memory handler (host RAM, not GPU memory)",
          (r"Detected \d+ oom[-_]kill event", r"task \d+: Out Of Memory", r"\bOUT_OF_MEMORY\b",
           r"oom-kill event\(s\)"),
          "give the job more host memory (profile mem = \"0\" for the whole node), or fewer data loader workers "
          "(dataset.num_workers) / CPU-offloaded state"),
    Cause("mount-missing", "a container mount source does not exist or is not readable on the node",
          (r"enroot-mount: failed to mount", r"pyxis: .*mount.*(No such file|Permission denied)"),
          "every profile.mounts source must exist on the compute nodes (not only the login node) and be readable "
          "by the job's user"),
    Cause("image-missing", "the container image could not be imported or started",
          (r"pyxis: failed to import docker image", r"returned error code: 40[13] Unauthorized",
           r"enroot-switchroot: failed to execute",
           r"a container with name \S+ does not exist", r"Could not find image"),
          "check the profile's images table (a .sqsh path must start with / or ./) and the registry credentials "
          "(~/.config/enroot/.credentials); `nemotron kit slurm build PROFILE --stage STAGE` builds the image"),
    Cause("missing-secret", "a credential the job needs is not set",
          (r"api_key not configured", r"wandb\.errors\.\S*UsageError", r"GatedRepoError", r"Cannot access gated repo",
           r"You are trying to access a gated repo", r"secret \S+ is not set", r"Invalid user token",
           r"RAY_AUTH_TOKEN"),
          "declare it in the profile's [secrets] (the variable set in the submitting shell: WANDB_API_KEY, HF_TOKEN) "
          "or turn the feature off (logger.wandb_project=null); `nemotron profiles NAME` shows what is unset"),
    Cause("port-in-use", "the rendezvous port was already taken on the node",
          (r"Address already in use", r"EADDRINUSE", r"errno: 98"),
          "another job or a leftover process holds the port: use exclusive nodes (profile exclusive = true) or let "
          "torchrun pick a port (rdzv_endpoint host:0)"),
    Cause("cuda-oom", "out of GPU memory",
          (r"CUDA out of memory", r"torch\.(cuda\.)?OutOfMemoryError", r"CUBLAS_STATUS_ALLOC_FAILED"),
          "the layout does not fit: check the dry run's memory table; raise TP/PP/EP or recompute "
          "(model.recompute_granularity), lower train.micro_batch_size, or offload the optimizer"),
    Cause("cuda-fault", "a CUDA fault (illegal memory access, ECC or Xid error): a kernel bug or a bad GPU",
          (r"an illegal memory access was encountered", r"uncorrectable ECC error", r"\bXid\b", r"CUDA error: unspecified launch failure",
           r"device-side assert triggered"),
          "rerun once with CUDA_LAUNCH_BLOCKING=1 to find the kernel; if it recurs on one node only, report the "
          "node's GPU (nvidia-smi -q) and exclude it"),
    Cause("disk-full", "the file system ran out of space (or quota)",
          (r"No space left on device", r"Errno 28", r"Disk quota exceeded", r"Errno 122", r"StorageFull"),
          "`estimate` prints the checkpoint bytes against the free space: free room, keep fewer checkpoints "
          "(checkpoint.most_recent_k) or move checkpoint.save"),
    Cause("ray-oom-kill", "Ray's memory monitor killed a worker (host RAM)",
          (r"ray\.exceptions\.OutOfMemoryError", r"Task was killed due to the node running low on memory",
           r"Workers \(tasks / actors\) killed due to memory pressure"),
          "fewer concurrent Ray tasks per node (data prep workers; NeMo RL's colocated generation), or more host "
          "memory; RAY_memory_usage_threshold only moves the line"),
    Cause("nccl-error", "an NCCL communication error (network, driver or a peer gone)",
          (r"NCCL error", r"ncclSystemError", r"ncclInternalError", r"ncclRemoteError", r"DistBackendError"),
          "rerun with NCCL_DEBUG=INFO; check NCCL_SOCKET_IFNAME / the IB interfaces the profile sets, and whether "
          "another rank died first (its log names the first error)"),
    Cause("nccl-timeout", "a collective timed out (a rank stopped or hung)",
          (r"Watchdog caught collective operation timeout", r"WorkNCCL\(.*\) ran for \d+ milliseconds before timing out",
           r"ProcessGroupNCCL.*[Tt]imeout"),
          "look for the rank that failed first (OOM, exception) in the other ranks' logs; a slow first step "
          "(checkpoint load, data index build) needs dist.distributed_timeout_minutes raised"),
    Cause("ray-actor-died", "a Ray actor or worker died",
          (r"RayActorError", r"The actor died unexpectedly", r"WorkerCrashedError", r"ActorDiedError"),
          "the actor's own log (ray logs worker-*) holds the cause; often host OOM or a CUDA error in that worker"),
    Cause("interrupted", "interrupted by a signal (Ctrl-C's SIGINT, or SIGTERM); what it finished is saved",
          # the lines our runtimes and CLI print on the way out (nemotron.runtime.megatron.trainer,
          # nemotron.runtime.rl.rl_local, nemotron.runtime.dispatch, nemotron.data.driver, nemotron.launch.execute)
          (r"stopped by SIG[A-Z]+\b.*[Rr]un the same command again to resume",
           r"^interrupted: .*run the same command again to resume",
           r": interrupted; .*run the same command again to resume",
           r"(?:stopped by SIG[A-Z]+|interrupted) before any shard was finished"),
          "run the same command again: it resumes from what was saved (the checkpoint, or the finished shards)"),
    Cause("resumable-stop", "stopped on a signal after saving: resumable (exit 75)",
          (r"stopped, run the same command again to resume", r"exit(ed)? (code )?75\b"),
          "run the same command again: it resumes from the checkpoint it saved"),
    Cause("stage-error", "the stage refused or failed with its own message",
          (r"^error: ",),
          "the hint line under it says what to do"),
    Cause("module-missing", "a Python module the stage imports is missing in the job's environment",
          (r"ModuleNotFoundError: No module named", r"ImportError: "),
          "the stage's image lacks it: use the image stages/images.toml names (nemotron kit slurm build), or "
          "install it in the profile's setup commands"),
    Cause("python-exception", "a Python exception in the stage", (r"^Traceback \(most recent call last\):",),
          "read the exception and the frame named; rerun with --debug for the whole traceback"),
)
_BY_ID = {c.id: c for c in CAUSES}
#: Causes read off the scheduler's state when the log says nothing (sacct ``State``).
_STATE_CAUSE = {"TIMEOUT": "walltime", "DEADLINE": "walltime", "PREEMPTED": "preempted", "NODE_FAIL": "node-failure",
                "OUT_OF_MEMORY": "host-oom", "BOOT_FAIL": "node-failure"}
#: The scheduler's verdicts, which win over what the log shows (the job was killed from outside).
_SCHEDULER = ("walltime", "preempted", "node-failure", "host-oom")

_RANK = re.compile(r"^(?:\[(?:default|rank)\d+\]:|\d+: |\(\S+ pid=\d+\) )")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning))(?::\s*(.*))?$")


#: The longest stretch of one line the patterns are searched in: a longer line (a progress bar written without
#: newlines, a dumped tensor or JSON blob) is searched in its first and last ``SEARCH_CHARS // 2`` characters, so
#: that ``why`` takes time linear in the log's size. Every message a cause is named by starts a line or sits near
#: its end; the evidence shown is cut to :data:`EVIDENCE_CHARS` anyway.
SEARCH_CHARS = 16_384
#: The most characters of a line shown as evidence (a longer one ends in ``...``).
EVIDENCE_CHARS = 400
#: How much of each log's end ``why`` reads (:data:`nemotron.launch.records.TAIL_BYTES`).
TAIL_BYTES = records.TAIL_BYTES
tail_text, read_tail = records.tail_text, records.read_tail


def _lines(text: str) -> list[str]:
    return [_RANK.sub("", ln.rstrip("\r"), count=1) for ln in text.splitlines()]


def _searched(line: str) -> str:
    """The part of ``line`` the patterns are searched in (:data:`SEARCH_CHARS`)."""
    if len(line) <= SEARCH_CHARS:
        return line
    half = SEARCH_CHARS // 2
    return line[:half] + "\n" + line[-half:]


def _unprintable(ch: str) -> bool:
    return ch == "\ufffd" or (not ch.isprintable() and ch != "\t")


def _shown(line: str, limit: int = EVIDENCE_CHARS) -> str:
    """``line`` as evidence: stripped, cut to ``limit`` characters (default :data:`EVIDENCE_CHARS`; a stage's hint
    line gets four times that), control characters and undecodable bytes (U+FFFD, from reading the log with
    ``errors="replace"``) shown as ``?``; a line that is mostly such bytes (a binary file given as a log) is
    described instead of printed."""
    s = line.strip()
    cut = s[:limit]
    bad = sum(1 for ch in cut if _unprintable(ch))
    if cut and bad * 4 > len(cut):
        return (f"(not text: {bad} of the first {len(cut)} characters of the line are undecodable bytes or control "
                f"characters; is this a log file?)")
    cut = "".join("?" if _unprintable(ch) else ch for ch in cut)
    return cut + ("..." if len(s) > limit else "")


def _ours(path: str) -> bool:
    return "/nemotron/" in path.replace("\\", "/") or "/stages/" in path.replace("\\", "/")


def _foreign(path: str) -> bool:
    p = path.replace("\\", "/")
    return "site-packages" in p or "dist-packages" in p or "/lib/python3" in p or p.startswith("<")


def traceback_summary(lines: list[str]) -> dict[str, Any] | None:
    """The last traceback: ``exception`` (its last line), ``frame`` (the first frame in our code, else the first
    outside the interpreter's and site-packages, as ``path:line in function``), ``frames`` (how many)."""
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    block = lines[starts[-1] + 1:]
    frames, exception = [], None
    for ln in block:
        m = _FRAME.match(ln)
        if m:
            frames.append((m.group(1), int(m.group(2)), m.group(3)))
            continue
        if frames and not ln.startswith((" ", "\t")) and ln.strip():
            e = _EXC.match(ln.strip())
            if e:
                exception = ln.strip()
                break
            if not ln.startswith(("The above exception", "During handling")):
                exception = ln.strip()
                break
    if not frames:
        return None
    ours = [f for f in frames if _ours(f[0])]
    pick = ours[0] if ours else next((f for f in frames if not _foreign(f[0])), frames[-1])
    return {"exception": _shown(exception) if exception else exception,
            "frame": f"{pick[0]}:{pick[1]} in {pick[2]}", "frame_is_ours": bool(ours),
            "frames": len(frames)}


def classify(text: str, state: str | None = None, exit_code: str | None = None,
             scheduler_name: str = "Slurm") -> dict[str, Any]:
    """The cause of a job's end from its log ``text`` and scheduler ``state`` (sacct's words) and ``exit_code``;
    ``scheduler_name`` is whose state it is, in the evidence (``Slurm``, ``Ray``, NeMo-Run's ``local executor``).

    Returns: ``cause`` (a :data:`CAUSES` id, ``completed``, ``cancelled`` or ``unknown``), ``title``, ``evidence`` (the
    line that shows it), ``hint``, ``frame`` (a traceback's first frame in our code, if any), ``exception``,
    ``also`` (other causes seen, each with its evidence), ``state``, ``exit_code``.
    """
    lines = _lines(text)
    searched = [_searched(ln) for ln in lines]
    found: dict[str, str] = {}
    where: dict[str, int] = {}  # the line each cause was found on
    for cause in CAUSES:
        rx = [re.compile(p) for p in cause.patterns]
        for n, ln in enumerate(searched):
            if any(r.search(ln) for r in rx):
                found[cause.id] = _shown(lines[n])
                where[cause.id] = n
                break
    st = (state or "").split()[0].upper() if state else ""
    if st in _STATE_CAUSE and _STATE_CAUSE[st] not in found:
        found[_STATE_CAUSE[st]] = f"{scheduler_name} state {st}" + (f" (exit code {exit_code})" if exit_code else "")
    cancelled = st.startswith("CANCELLED")
    if exit_code and exit_code.split(":")[0] == "75" and "resumable-stop" not in found and not cancelled:
        found["resumable-stop"] = f"exit code {exit_code}"
    tb = traceback_summary(lines)
    order = [c.id for c in CAUSES]
    scheduler = [c for c in _SCHEDULER if c in found]
    if scheduler:
        chosen = scheduler[0]
    elif cancelled:  # a cancel is a cancel: what the log shows (a save on the way out, exit 75) is listed as also
        chosen = "cancelled"
    elif found:
        chosen = min(found, key=order.index)
        if chosen == "stage-error" and "python-exception" in found and tb and not tb["frame_is_ours"]:
            chosen = "python-exception"
    elif st == "COMPLETED":
        chosen = "completed"
    else:
        chosen = "unknown"
    base = {"state": st or None, "exit_code": exit_code or None,
            "exception": tb["exception"] if tb else None, "frame": tb["frame"] if tb else None}
    also = [{"cause": k, "title": _BY_ID[k].title, "evidence": v} for k, v in found.items() if k != chosen]
    if chosen in _BY_ID:
        c = _BY_ID[chosen]
        evidence = found[chosen]
        hint = c.hint
        if chosen == "stage-error":  # our own runtime's message: its hint line is the fix, else one by its kind
            i = where[chosen]
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            hint = (_shown(nxt.removeprefix("hint: "), 4 * EVIDENCE_CHARS) if nxt.startswith("hint: ")
                    else _stage_error_fix(lines[i].strip()))
        if chosen in ("python-exception", "module-missing") and tb and tb["exception"]:
            evidence = tb["exception"]
        return {"cause": chosen, "title": c.title, "evidence": evidence, "hint": hint, "also": also, **base}
    if chosen == "completed":
        return {"cause": "completed", "title": "the job completed", "evidence": f"{scheduler_name} state {st}", "hint": None,
                "also": also, **base}
    if chosen == "cancelled":
        return {"cause": "cancelled", "title": "cancelled (scancel, or a failed dependency)",
                "evidence": f"{scheduler_name} state {state}", "hint": "submit it again if that was not meant", "also": also, **base}
    tail = next((_shown(ln) for ln in reversed(lines) if ln.strip()), None)
    return {"cause": "unknown", "title": "none of the known causes", "evidence": tail,
            "hint": "read the log's end: nemotron ultra3 logs JOB", "also": also, **base}


#: Fixes for a stage's ``error:`` line that has no ``hint:`` line under it, by what the message says (the first
#: match wins): a library's error passed through (``cannot read (ArrowInvalid: ...)``), or an older stage's message.
_STAGE_ERROR_FIXES: tuple[tuple[str, str], ...] = (
    (r"cannot read \((?:ArrowInvalid|ArrowTypeError|OSError: Could not open Parquet)|not a readable Parquet file|"
     r"not a gzip file",
     "the file is not the format its name says (not Parquet, or cut short): check the dataset's path and format in "
     "the blend"),
    (r"not UTF-8", "the file is not UTF-8 text: convert it (iconv -f LATIN1 -t UTF-8) or fix the path"),
    (r"cannot read|does not exist|[Nn]o such file|[Pp]ermission denied",
     "the path named is missing or unreadable from where the job ran: check it (and the profile's mounts)"),
    (r"empty|contributes nothing|no (?:rows|records|documents)",
     "the dataset named has no usable records: check its path, split and field names (`nemotron ultra3 data inspect "
     "FILE`)"),
)


def _stage_error_fix(line: str) -> str:
    """A fix for a stage's ``error:`` ``line`` that came without a ``hint:`` line: the ``; valid: ...`` the line
    holds (a check's refusal before any work), else by what it says (:data:`_STAGE_ERROR_FIXES`; otherwise: fix what
    the line names and run again)."""
    head, sep, valid = _searched(line).partition("; valid: ")
    if sep and valid.strip():
        return _shown(valid, 4 * EVIDENCE_CHARS)
    for pattern, fix in _STAGE_ERROR_FIXES:
        if re.search(pattern, _searched(line)):
            return fix
    return ("the error line names what is wrong (a file, key or value): fix that and run the same command again; "
            "the lines before it in the log (nemotron ultra3 logs JOB) show what the stage was doing")


def explain_files(paths: list[str]) -> dict[str, Any]:
    """:func:`classify` of log files given on the command line (no job record, no scheduler state): the last
    :data:`TAIL_BYTES` of each (:func:`read_tail`).

    Raises:
        ConfigError: a file that cannot be read.
    """
    from nemotron.errors import ConfigError

    texts = []
    for p in paths:
        try:
            texts.append(records.read_tail(p, TAIL_BYTES))  # its last TAIL_BYTES: bounded memory on a multi-GB log
        except OSError as exc:
            raise ConfigError(f"{p}: cannot read ({exc.strerror})",
                              "give a job's log file (nemotron ultra3 logs JOB names them), or a job id without --log") from None
    got = classify("\n".join(texts))
    blank = [p for p, text in zip(paths, texts) if not text.strip()]
    if got["cause"] == "unknown" and blank and len(blank) == len(paths):  # nothing to classify: say so
        sizes = {p: _size(p) for p in blank}
        said = "; ".join(f"{p}: " + ("empty (0 bytes)" if not n else f"only blank lines ({n:,} bytes)")
                         for p, n in sizes.items())
        got.update(title="the log is empty" if len(paths) == 1 else "the logs are empty", evidence=said,
                   hint="nothing was written to it: give the log the job wrote (nemotron ultra3 logs JOB names it), "
                        "or save a run's output as it runs (2>&1 | tee run.log)")
    return {"job": None, "experiment": None, "stage": None, "sources": list(paths), **got}


def _size(path: str) -> int:
    """The size of ``path`` in bytes (0 when it cannot be read)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _for_this_run(hint: str | None, command: str) -> str | None:
    """``hint`` with the placeholder ``nemotron ultra3 logs JOB`` of :func:`classify` made ``command``: the run's own
    log (``logs ID``; ``tail`` of its output.log for a run in this shell, which ``logs`` refuses)."""
    return hint.replace("nemotron ultra3 logs JOB", command) if hint else hint


def still_running(last: str | None, follow: str, later: str, state: str) -> dict[str, Any]:
    """The verdict on a run that has not ended and whose log shows no known cause (yet): cause ``running``, its last
    line as the evidence (its progress so far, e.g. ``[local] step 1/100 ...``), and how to follow it, ``follow`` (a
    command), and ask again when it ended, ``later``. ``state`` says how it is known to be running."""
    return {"cause": "running", "title": f"{state}: nothing to explain yet",
            "evidence": f"its last line so far: {last}" if last else "no output yet",
            "hint": f"follow it: {follow}; once it has ended: {later}"}


def explain_shell_run(folder: Path) -> dict[str, Any]:
    """:func:`classify` of a run in this shell (no profile): the end of the output its run folder keeps
    (:data:`nemotron.launch.records.SHELL_LOG`) and its exit code (:data:`~nemotron.launch.records.SHELL_EXIT`).
    The state is ``COMPLETED`` for exit 0, ``STOPPED`` for 75 (a resumable stop) and 130 (Ctrl-C), ``FAILED``
    otherwise, ``RUNNING`` while no exit code is kept.

    Raises:
        ConfigError: the folder keeps no output (a run of a version before it did, or its run folder was not
            writable): the hint says how to save a log.
    """
    import json

    from nemotron.errors import ConfigError

    log = folder / records.SHELL_LOG
    try:
        text = records.read_tail(str(log), TAIL_BYTES)
    except OSError:
        raise ConfigError(f"the run in this shell {folder.name} kept no output in its run folder ({log} is missing)",
                          "rerun it (this version keeps the output), or save its output (2>&1 | tee run.log) and give "
                          "nemotron ultra3 why --log run.log") from None
    try:
        code = json.loads((folder / records.SHELL_EXIT).read_text(encoding="utf-8")).get("exit_code")
    except (OSError, ValueError, AttributeError):
        code = None
    state = ("RUNNING" if code is None else "COMPLETED" if code == 0 else "STOPPED" if code in (75, 130)
             else "FAILED")
    out = classify(text, state, None if code is None else str(code), "this shell's run")
    # `logs` refuses a run in this shell: its log is the run folder's output.log, read where it is
    tail = f"tail -n 50 {shlex.quote(str(log))}"
    out["hint"] = _for_this_run(out["hint"], tail)
    if code is None and out["cause"] == "unknown":
        out.update(still_running(out["evidence"], f"tail -f {shlex.quote(str(log))}", f"nemotron ultra3 why {folder.name}",
                                 "no exit code kept yet: still running (or its command was killed without one)"))
    stage = None
    with contextlib.suppress(OSError, ValueError):
        from nemotron.config import yamlio

        spec = yamlio.loads((folder / "job.yaml").read_text(encoding="utf-8"))
        stage = spec.get("stage") if isinstance(spec, dict) else None
    return {"job": folder.name, "experiment": folder.name, "stage": stage, "sources": [str(log)], **out}


def explain_job(ident: str | None) -> dict[str, Any]:
    """:func:`classify` of a submitted job: its logs (the last :data:`TAIL_BYTES` of each, read where they are:
    ``read_log_tail`` of its backend), its Slurm (or local supervisor) state and our record.

    Raises:
        ConfigError: no such job; SchedulerUnreachable (a RuntimeFailure): Slurm cannot be asked (no
        ``SLURM_CONF``, daemons down): the message says how to point at it; never a silent ``UNKNOWN``.
    """
    from pathlib import Path

    from nemotron.errors import ConfigError
    from nemotron.launch import jobs
    from nemotron.launch.backends import backend_for

    shell = records.shell_run_folder(ident) if ident else records.latest_shell_run()
    if shell is not None:  # a run in this shell: from the output its run folder keeps
        return explain_shell_run(shell)
    try:
        rec = jobs.load(ident)
    except ConfigError as exc:
        if ident and ("/" in ident or Path(ident).is_file()):  # a log file given where a job id goes
            raise ConfigError(exc.message, f"to read a log file: nemotron ultra3 why --log {ident}") from None
        raise
    owner = backend_for(rec)
    st, code = owner.state(rec)
    redact = jobs.redactor(rec)
    files = []
    texts = []
    try:
        files = owner.log_files(rec)
        texts = [redact(owner.read_log_tail(rec, f, TAIL_BYTES)) for f in files]  # bounded: the logs' ends
    except jobs.JobFilesMissing:
        files = []
    out = classify("\n".join(texts), st, code, owner.scheduler)
    reason = owner.unknown_reason(rec) if st == "UNKNOWN" else None
    if reason:
        out.update(title=f"{owner.scheduler} holds no record of this submission", evidence=reason,
                   hint=f"the log, if any, is in {rec.log_dir}: nemotron ultra3 why --log FILE classifies it")
    elif st not in jobs.TERMINAL and st != "UNKNOWN":
        out["title"] = f"the job has not ended ({st}); so far: " + out["title"]
        if out["cause"] == "unknown":
            out.update(still_running(out["evidence"], f"nemotron ultra3 logs {rec.job_id} -f",
                                     f"nemotron ultra3 why {rec.job_id}", f"the job has not ended ({st})"))
    out["hint"] = _for_this_run(out["hint"], f"nemotron ultra3 logs {rec.job_id}")
    return {"job": rec.job_id, "experiment": rec.experiment_id, "stage": rec.title, "sources": files, **out}


__all__ = ["CAUSES", "Cause", "classify", "explain_files", "explain_job", "explain_shell_run", "still_running",
           "traceback_summary"]
