"""Running a planned job: directly on this machine, or (through :mod:`nemotron.launch.submit`) on a cluster.

A run here writes the job's folder ``$NEMOTRON_HOME/runs/<experiment id>/`` with ``train.yaml`` (the
resolved config the entry script reads) and ``job.yaml`` (provenance: command line, config layers,
git commit, profile, image; secrets redacted), then runs the stage's entry script as a child process
with its output streamed, and exits with its exit code.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nemotron.config import artifacts, yamlio
from nemotron.config.artifacts import home
from nemotron.config.compile import write_yaml
from nemotron.config.paths import repo_root
from nemotron.errors import INTERRUPT_NOTE, INTERRUPT_REPORTED_BY_PARENT, RESUMABLE, ConfigError, RuntimeFailure
from nemotron.launch.plan import recorded_outputs
from nemotron.launch.records import SHELL_EXIT, SHELL_LOG
from nemotron.profiles.schema import redact_text

if TYPE_CHECKING:
    from nemotron.profiles.profile import ExecutorProfile
from nemotron.runtime.common.prestart import visible_gpus


def run_dir(plan: Any) -> Path:
    """Folder of a run on this machine: ``$NEMOTRON_HOME/runs/<experiment id>``."""
    return home() / "runs" / plan.experiment_id


#: Folders of the checkout (from its root) that the job's code snapshot ships (:func:`nemotron.launch.submit.code_snapshot`).
SHIPPED = ("src/nemotron", "stages")


def git_state(root: Path | None = None, shipped: tuple[str, ...] = SHIPPED) -> dict[str, Any] | None:
    """The checkout's state for ``job.yaml``: ``{"commit": SHA[-dirty], "changed": [...], "untracked": [...]}``,
    or None outside a git checkout (an installed package) or without git.

    ``changed``: tracked files with changes, staged or not (paths from the checkout's root); ``untracked``:
    files git does not track inside the folders the code snapshot ships (``shipped``), which the job runs
    although no commit has them. ``-dirty`` is added when either list is not empty. ``root`` defaults to
    the checkout this package runs from."""
    root = repo_root() if root is None else Path(root)
    if root is None or not (root / ".git").exists():
        return None

    def git(*args: str) -> str | None:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        return done.stdout if done.returncode == 0 else None

    try:
        sha = git("rev-parse", "HEAD")
        if sha is None:
            return None
        status = git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".") or ""
    except (OSError, subprocess.TimeoutExpired):
        return None
    changed, untracked = [], []
    entries = status.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":  # a rename or copy: the next entry is its source
            i += 1
        if code == "??":
            if any(path == d or path.startswith(d.rstrip("/") + "/") for d in shipped):
                untracked.append(path)
        elif code != "!!":
            changed.append(path)
    dirty = bool(changed or untracked)
    return {"commit": sha.strip() + ("-dirty" if dirty else ""), "changed": sorted(changed),
            "untracked": sorted(untracked)}


def git_commit() -> str | None:
    """The checkout's commit, with ``-dirty`` when a tracked file changed or the code snapshot ships an
    untracked file (:func:`git_state`); None outside a checkout."""
    state = git_state()
    return state["commit"] if state else None


def provenance(req: Any, compiled: Any, profile: ExecutorProfile | None, plan: Any) -> dict[str, Any]:
    """The content of ``job.yaml``: everything needed to know what ran and why (secrets redacted)."""
    argv = list(req.argv) if req.argv else []
    record = {
        "experiment_id": plan.experiment_id,
        "stage": plan.stage.name,
        "recipe": plan.stage.recipe,
        "command_line": shlex.join(["nemotron", *argv[1:]]) if argv else None,
        "config": compiled.config_name,
        "layers": compiled.layers,
        "overrides": compiled.overrides,
        "config_hash": compiled.config_hash(),
        **_git_fields(),
        "profile": plan.profile,
        "profile_values": profile.redacted() if profile is not None else None,
        "executor": plan.executor,
        "image": plan.image,
        "nodes": plan.nodes,
        "gpus_per_node": plan.gpus_per_node,
        "world_size": plan.world_size,
        "launch": plan.launch,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if profile is not None:

        text = redact_text(yamlio.dumps(record), profile.secret_values().values())
        return yamlio.loads(text)
    return record


def _git_fields() -> dict[str, Any]:
    """``git_commit`` (SHA, ``-dirty`` when it applies) and, when dirty, ``git_changed`` and ``git_untracked``
    (the files that differ from that commit in what the job runs) for ``job.yaml``."""
    state = git_state()
    if state is None:
        return {"git_commit": None}
    out: dict[str, Any] = {"git_commit": state["commit"]}
    if state["changed"] or state["untracked"]:
        out.update(git_changed=state["changed"], git_untracked=state["untracked"])
    return out


def _job_env(profile: ExecutorProfile | None, for_display: bool = False) -> dict[str, str]:
    env: dict[str, str] = {}
    if profile is None:
        return env
    env.update(profile.public_env_vars())
    secrets = profile.secret_values()
    for k in secrets:
        env[k] = "***" if for_display else secrets[k]
    return env


def check_gpus(plan: Any, backend: str | None = None) -> None:
    """Refuse to start a multi-GPU torchrun stage on this machine when it shows fewer GPUs than the plan needs.
    ``backend``: the config's ``backend``; a ``local`` one is not told to run with ``-c local`` again.

    Raises:
        ConfigError: fewer visible GPUs (:func:`visible_gpus`) than ``plan.gpus_per_node``.
    """
    if plan.launch == "torchrun" and plan.gpus_per_node > 1:
        visible = visible_gpus()
        if visible < plan.gpus_per_node:
            hint = ("the local backend uses at most one GPU: set run.env.gpus_per_node=1" if backend == "local"
                    else "submit it to a cluster: --run PROFILE (see --dry-run), or run it here with -c local")
            raise ConfigError(
                f"{plan.stage.title} -c {plan.config_name} needs {plan.gpus_per_node} GPUs per node; this machine has "
                f"{visible} visible", hint)


def stop_child(proc: subprocess.Popen, grace_s: float = 30.0) -> int:
    """After a Ctrl-C that reached ``proc`` too (same process group): let it clean up and exit, and
    return its exit code (128 + N when killed by signal N).

    Waits ``grace_s`` seconds (the stage shuts its Ray workers down and removes its temporary files),
    then sends SIGTERM and, 10 s later, SIGKILL; another Ctrl-C while waiting sends SIGTERM at once.
    The child never outlives this call.
    """
    for timeout, then in ((grace_s, signal.SIGTERM), (10.0, signal.SIGKILL)):
        try:
            code = proc.wait(timeout=timeout)
            return 128 - code if code < 0 else code
        except (subprocess.TimeoutExpired, KeyboardInterrupt):  # too slow, or Ctrl-C again: the next step now
            if proc.poll() is None:
                proc.send_signal(then)
    code = proc.wait()
    return 128 - code if code < 0 else code


def session_processes(sid: int) -> list[int]:
    """Live processes (zombies excluded) of session ``sid``, read from ``/proc`` (Linux); empty elsewhere."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] not in ("Z", "X") and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


def reap_session(sid: int, grace_s: float = 3.0) -> list[int]:
    """Stop what a stage run here left behind in its session ``sid`` (the stage's pid: :func:`run_here` starts
    it in a session of its own). A stage normally stops its helpers itself; after a Ctrl-C that came while
    Ray was starting, Ray's dashboard and runtime-env agents outlive the stage (observed with Ray 2.60) and
    ignore SIGTERM. SIGTERM, then SIGKILL after ``grace_s`` seconds; returns the pids that were left."""
    left = session_processes(sid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline and session_processes(sid):
            time.sleep(0.1)
        if not session_processes(sid):
            break
    return left


def _die_with_parent(parent: int) -> Any:
    """A ``preexec_fn`` that makes the stage die with this command (Linux ``PR_SET_PDEATHSIG``, SIGKILL).

    The stage runs in a session of its own (see :func:`run_here`), so a kill of this command's process
    group (``kill -9 -PGID``, a closed terminal's SIGHUP after the command is gone) no longer reaches it;
    without this it would train on unobserved. SIGKILL, as the group kill it stands for: the stage resumes
    from its last checkpoint, and Ray's own processes share the driver's fate. None off Linux."""
    if not sys.platform.startswith("linux"):
        return None

    def setup() -> None:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # this command died before the line above took effect
            os._exit(137)

    return setup


def stopped_line(title: str, folder: str | Path, saved: str, where: str | None = None) -> str:
    """The line for a stage stopped by a signal (exit 75): what it says it kept, from its run folder's
    ``interrupted.txt`` (:data:`nemotron.errors.INTERRUPT_NOTE`, written by the data prep driver: ``ultra3 data prep
    pretrain was interrupted before any shard was finished; ... starts from the beginning``), else ``<title> <saved>:
    run the same command again to resume`` (``saved its state``: a training stage's checkpoint). ``where`` is the
    parenthesis at the end (default ``run folder: <folder>``)."""
    where = where or f"run folder: {folder}"
    try:
        note = (Path(folder) / INTERRUPT_NOTE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        note = ""
    if note:
        return f"{title} was {note} ({where})"
    return f"{title} {saved}; run the same command again to resume ({where})"


def write_shell_exit(folder: Path, code: int | None) -> None:
    """Leave the stage's exit code in ``folder``/:data:`SHELL_EXIT` (nothing when the folder cannot be written)."""
    import json

    with contextlib.suppress(OSError):
        (folder / SHELL_EXIT).write_text(json.dumps({"exit_code": code, "ended": time.time()}) + "\n", encoding="utf-8")


class _Tee:
    """Copies a child's stdout and stderr to this process's (as they come) and, both together, to a log file.

    A stream of ours that is a terminal is given to the child as a pseudo-terminal of the same size, so the
    stage still sees a terminal (live progress lines); any other stream as a pipe. The log keeps ``\n`` line ends.
    Writing the log is best effort: a full disk never stops the run or its output.
    """

    def __init__(self, path: Path) -> None:
        import threading

        self.path = path
        self.lock = threading.Lock()
        try:
            self.log: Any = open(path, "wb")
        except OSError:
            self.log = None
        self.pairs: list[tuple[int, int, int]] = []  # (our read end, the child's end, our stream's fd)
        self.threads: list[Any] = []

    def child_fd(self, stream: Any) -> int | None:
        """The fd the child writes to instead of ``stream`` (``None``: a stream without a file descriptor, which the
        child inherits as before; its output then misses the log)."""
        try:
            stream.flush()
            out_fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            return None
        if os.isatty(out_fd):
            import fcntl
            import termios

            ours, theirs = os.openpty()
            with contextlib.suppress(OSError):
                fcntl.ioctl(theirs, termios.TIOCSWINSZ, fcntl.ioctl(out_fd, termios.TIOCGWINSZ, b"\0" * 8))
                attrs = termios.tcgetattr(theirs)
                attrs[1] &= ~termios.ONLCR  # bytes pass as written: our own terminal turns \n into \r\n once
                termios.tcsetattr(theirs, termios.TCSANOW, attrs)
        else:
            ours, theirs = os.pipe()
        self.pairs.append((ours, theirs, out_fd))
        return theirs

    def start(self) -> None:
        """Close the child's ends here and start copying."""
        import threading

        for ours, theirs, out_fd in self.pairs:
            os.close(theirs)
            t = threading.Thread(target=self._copy, args=(ours, out_fd), daemon=True)
            t.start()
            self.threads.append(t)

    def _copy(self, ours: int, out_fd: int) -> None:
        while True:
            try:
                chunk = os.read(ours, 65536)
            except OSError:  # a pseudo-terminal whose child side is closed: EIO
                break
            if not chunk:
                break
            with contextlib.suppress(OSError):
                os.write(out_fd, chunk)
            if self.log is not None:
                with self.lock, contextlib.suppress(OSError, ValueError):
                    if self.log is not None:
                        self.log.write(chunk.replace(b"\r\n", b"\n"))
                        self.log.flush()
        with contextlib.suppress(OSError):
            os.close(ours)

    def close(self, wait_s: float = 5.0) -> None:
        """Wait (at most ``wait_s`` seconds in all) for the copies to reach the end of the child's output."""
        deadline = time.monotonic() + wait_s
        for t in self.threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        if not self.threads:
            for ours, theirs, _ in self.pairs:
                for fd in (ours, theirs):
                    with contextlib.suppress(OSError):
                        os.close(fd)
        with self.lock:
            if self.log is not None:
                with contextlib.suppress(OSError):
                    self.log.close()
                self.log = None


def run_here(req: Any, compiled: Any, profile: ExecutorProfile | None, plan: Any) -> int:
    """Run the entry script as a child process on this machine, streaming its output.

    The child runs in a session of its own; a Ctrl-C here is passed on to its process group, the child is
    given :func:`stop_child`'s grace period, whatever it leaves in its session is stopped
    (:func:`reap_session`, also after a normal end) and ``KeyboardInterrupt`` is raised again for the CLI's
    one ``interrupted`` line (exit 130).

    Returns the child's exit code (128 + N when killed by signal N).

    Raises:
        RuntimeFailure: the entry script is missing or cannot be started.
    """

    if not plan.entry.is_file():
        raise RuntimeFailure(f"entry script of {plan.stage.title} is missing: {plan.entry}", "reinstall the package")
    check_gpus(plan, (compiled.config or {}).get("backend"))
    folder = run_dir(plan)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeFailure(f"cannot create the run folder {folder}: {exc.strerror or exc}",
                             "check $NEMOTRON_HOME (default ~/.nemotron): it must be a writable folder") from None
    config_path = write_yaml(compiled, folder / "train.yaml")
    (folder / "job.yaml").write_text(yamlio.dumps(provenance(req, compiled, profile, plan)), encoding="utf-8")
    env = dict(os.environ)
    env.update(_job_env(profile))
    env["NEMOTRON_EXPERIMENT_ID"] = plan.experiment_id
    env["NEMOTRON_RUN_DIR"] = str(folder)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[INTERRUPT_REPORTED_BY_PARENT] = "1"  # on Ctrl-C the CLI prints the one line, not the child too
    cmd = plan.command(config_path)
    tee = _Tee(folder / SHELL_LOG)
    try:
        # its own session: everything the stage starts (Ray's GCS, raylet, agents and workers, torchrun's
        # ranks) stays in it, so whatever outlives the stage can be found and stopped (reap_session)
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_die_with_parent(os.getpid()),
                                stdout=tee.child_fd(sys.stdout), stderr=tee.child_fd(sys.stderr))
    except OSError as exc:
        tee.close()
        raise RuntimeFailure(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    tee.start()
    try:
        return _wait_here(proc, plan, folder, compiled, profile, req, tee)
    finally:
        tee.close()
        code = proc.poll()
        write_shell_exit(folder, 128 - code if code is not None and code < 0 else code)


def _wait_here(proc: subprocess.Popen, plan: Any, folder: Path, compiled: Any, profile: Any, req: Any,
               tee: _Tee) -> int:
    """:func:`run_here` after the start: wait for the stage, pass signals on, report and record its outputs (the
    stage's own output is all copied, ``tee`` closed, before a line of ours)."""

    def forward(signum: int, _frame: Any) -> None:  # `kill`/`timeout` on the CLI stop the stage too
        proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # Ctrl-C reached this process group: pass it on to the stage's, as a terminal would
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        code = stop_child(proc)
        reap_session(proc.pid)
        tee.close()
        if code == RESUMABLE:
            raise KeyboardInterrupt(stopped_line(plan.stage.title, folder, "saved its state")) from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    reap_session(proc.pid)
    tee.close()
    if code < 0:
        code = 128 - code
    if code == RESUMABLE:
        print(stopped_line(plan.stage.title, folder, "saved its state and stopped on a signal"), file=sys.stderr)
        return code
    if code != 0:
        if code != 2:  # 2: the stage already said what is wrong with its config or input
            print(f"{plan.stage.title} failed with exit code {code} (run folder: {folder})", file=sys.stderr)
        return code

    report = folder / artifacts.OUTPUTS_FILE
    outputs = artifacts.merge_outputs(recorded_outputs(compiled, profile, getattr(req, "latest", False)), report.read_text() if report.is_file() else None)
    for name, fields in outputs.items():
        config = artifacts.recorded_config(plan.stage.name, plan.config_name)
        art = artifacts.record(name, {**fields, "stage": plan.stage.name, "config": config,
                                      "experiment_id": plan.experiment_id, "job_id": "local",
                                      "config_hash": compiled.config_hash()})
        print(f"[nemotron] artifact {name} v{art['version']}: {art['path']}", file=sys.stderr)
    return code
