"""A ``local`` profile's job: the package of a Slurm job, run on this machine by NeMo-Run's LocalExecutor.

Layout under the profile's ``job_dir`` (``ROOT``, default ``$NEMOTRON_HOME/jobs``), the same as a
Slurm job's (:mod:`nemotron.launch.submit`)::

    ROOT/runs/<experiment id>/        train.yaml, job.yaml, secrets.env (0600), code/,
                                      local-job.json (state), supervisor.log
    ROOT/experiments/<job name>/<experiment id>/<task>/nemo_run/<app id>/<task>/0/
                                      NeMo-Run's stdout.log, stderr.log, combined.log, SUCCESS

What NeMo-Run 0.11.1 does with a ``LocalExecutor`` (read from ``nemo_run/run/experiment.py`` and
``nemo_run/run/torchx_backend/schedulers/local.py``, over torchx's ``LocalScheduler``), and what
that asks of us:

- the job is a child process of the Python process that runs the experiment (``subprocess.Popen``
  with ``start_new_session=True``), its stdout and stderr written to files, not to a terminal;
- ``Experiment.run(detach=True)`` is refused for it ("Cannot detach from this experiment"), and
  closing the experiment's runner kills the job (SIGTERM to its process group, SIGKILL 10 s later);
- its state is known only to that process (the copy NeMo-Run keeps in
  ``$NEMORUN_HOME/.local_jobs.json`` is refreshed by nobody else), and only that process can cancel it;
- the final state is only SUCCEEDED or FAILED; the exit code is in the app's ``SUCCESS`` file.

So every local job gets a **supervisor**, ``python -m nemotron.launch.local_job RUN_DIR``, started in its
own session: it runs the NeMo-Run experiment for the job's whole life, keeps ``local-job.json``
up to date (state in Slurm's words, exit code, app id, log files) and cancels the job through
NeMo-Run on SIGTERM. The CLI (attached or detached), ``status``, ``logs`` and ``cancel`` read that
file and signal that process (:mod:`nemotron.launch.jobs`). Secrets reach the job through the
supervisor's environment, read from ``secrets.env``: never through NeMo-Run's files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from nemotron.launch.nemo_run import _import_nemo_run

#: The supervisor's state file in the run folder.
STATE_FILE = "local-job.json"
#: Seconds the CLI waits for the supervisor to start the job (it imports NeMo-Run: 2-4 s measured here).
START_TIMEOUT_S = 120.0
#: Seconds a cancelled job gets between our SIGTERM and NeMo-Run's own cancel (which sends SIGTERM
#: again and SIGKILL 10 s later, torchx's fixed wait): time for a training stage to save its
#: checkpoint and exit 75. Slurm's own default (KillWait) is 30 s; a second cancel skips the wait.
GRACE_S = 60.0


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def read_state(run_dir: str | Path) -> dict[str, Any]:
    """The supervisor's ``local-job.json`` in ``run_dir`` (``{}`` when absent or unreadable).

    Keys: ``state`` (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED), ``exit_code`` (int or None;
    128 + N for a job killed by signal N), ``app_id``, ``stdout``/``stderr`` (log paths),
    ``supervisor_pid``, ``error`` (why the supervisor could not start the job), and the job spec.
    """
    try:
        return json.loads((Path(run_dir) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def supervisor_alive(state: dict[str, Any]) -> bool:
    """Whether the supervisor named in ``state`` still runs (its pid is alive, not a zombie, and its
    command line names this run folder: a re-used pid is not ours)."""
    pid = state.get("supervisor_pid")
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return b"nemotron.launch.local_job" in cmdline and state.get("run_dir", "").encode() in cmdline


def status(run_dir: str | Path) -> tuple[str, int | None]:
    """``(state, exit code)`` of the local job in ``run_dir``. A supervisor that died without a final
    state (killed with SIGKILL, machine rebooted) makes the job FAILED with no exit code."""
    state = read_state(run_dir)
    st = state.get("state", "UNKNOWN")
    if st in ("PENDING", "RUNNING") and not supervisor_alive(state):
        state = read_state(run_dir)  # it may have written its final state just now
        st = state.get("state", "UNKNOWN")
        if st in ("PENDING", "RUNNING"):
            return "FAILED", None
    return st, state.get("exit_code")


def cancel(run_dir: str | Path) -> bool:
    """Ask the supervisor to cancel the job (SIGTERM to it): it sends SIGTERM to the job's process
    group, and after :data:`GRACE_S` (at once when asked a second time) cancels it through NeMo-Run,
    which sends SIGKILL 10 s later. Returns False when no supervisor runs any more."""
    state = read_state(run_dir)
    if not supervisor_alive(state):
        return False
    try:
        os.kill(int(state["supervisor_pid"]), signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def _job_pids(supervisor: int) -> list[int]:
    """Children of the supervisor: the processes NeMo-Run started, each the leader of its own session."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == supervisor and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def read_secrets(path: Path) -> dict[str, str]:
    """``NAME=<shell-quoted value>`` lines of a ``secrets.env`` written by :func:`nemotron.launch.submit.stage_files`."""
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    # the whole file at once: a quoted value may hold a newline
    for word in shlex.split(path.read_text(encoding="utf-8")):
        if "=" in word:
            name, _, value = word.partition("=")
            out[name] = value
    return out


def _exit_code(log_dir: Path) -> int | None:
    """The job's exit code from the ``SUCCESS`` file torchx writes when it closes the app (128 + N
    for a process killed by signal N)."""
    try:
        info = json.loads((log_dir / "SUCCESS").read_text(encoding="utf-8"))
        code = next(iter(info["roles"].values()))[0]["exitcode"]
    except (OSError, ValueError, KeyError, IndexError, StopIteration):
        return None
    if code is None:
        return None
    return 128 - code if code < 0 else code


def supervise(run_dir: Path) -> int:
    """The supervisor's work (see the module docstring); returns 0, or 1 when the job could not start."""
    path = run_dir / STATE_FILE
    spec = read_state(run_dir)
    stop = {"asked": 0}

    def on_signal(_signum: int, _frame: Any) -> None:
        stop["asked"] += 1

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    spec["supervisor_pid"] = os.getpid()
    _write(path, spec)
    try:
        os.environ.update(read_secrets(run_dir / "secrets.env"))
        os.environ["NEMORUN_HOME"] = spec["root"]  # NeMo-Run's own files (.local_jobs.json) stay in the job root

        run = _import_nemo_run()
        executor = run.LocalExecutor(ntasks_per_node=spec["ntasks_per_node"], env_vars=spec["env_vars"])
        if spec.get("launcher"):
            executor.launcher = spec["launcher"]
        task = spec["task_name"]
        with run.Experiment(spec["job_name"], id=spec["experiment_id"], executor=executor, base_dir=spec["root"],
                            log_level="ERROR") as exp:
            exp.add(run.Script(**spec["task"]), name=task)
            if stop["asked"]:
                spec.update(state="CANCELLED", ended=time.time())
                _write(path, spec)
                return 0
            # the task's PATH is the job's whole PATH (local-job.json); torchx appends the working folder, then
            # this process's PATH, which would repeat it: unset here while NeMo-Run starts the task
            saved_path = os.environ.pop("PATH", None) if "PATH" in spec["env_vars"] else None
            try:
                exp.run(detach=False)
            finally:
                if saved_path is not None:
                    os.environ["PATH"] = saved_path
            signal.signal(signal.SIGTERM, on_signal)  # torchx's scheduler installed its own handlers
            signal.signal(signal.SIGINT, on_signal)
            job = exp.jobs[0]
            session, _, app_id = job.handle.partition("://")[2].partition("/")
            log_dir = Path(job.executor.job_dir) / session / app_id
            outs = sorted(log_dir.glob("*/0/stdout.log"))
            spec.update(state="RUNNING", app_id=app_id, log_dir=str(log_dir), started=time.time(),
                        stdout=str(outs[0]) if outs else None,
                        stderr=str(outs[0].with_name("stderr.log")) if outs else None)
            _write(path, spec)
            cancelled, handled, hard_at = False, 0, None
            while True:
                if stop["asked"] > handled:  # first: SIGTERM to the job, which may save; again: NeMo-Run's cancel
                    handled, cancelled = stop["asked"], True
                    if hard_at is None:
                        for pid in _job_pids(os.getpid()):
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(pid, signal.SIGTERM)
                        hard_at = time.monotonic() + GRACE_S
                    else:
                        hard_at = 0.0
                if hard_at is not None and time.monotonic() >= hard_at:
                    exp.cancel(task)
                    hard_at = float("inf")
                st = str(exp.status(return_dict=True)[task]["status"]).rsplit(".", 1)[-1]
                if st in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    break
                time.sleep(0.5)
        code = _exit_code(log_dir)
        final = "CANCELLED" if cancelled else "COMPLETED" if code == 0 and st == "SUCCEEDED" else "FAILED"
        spec.update(state=final, exit_code=code, ended=time.time())
        _write(path, spec)
        return 0
    except BaseException as exc:  # say why in the state file and the log (the job is stopped on the way out)
        # torchx turns SIGTERM into SignalException while it holds its own handlers (inside exp.run)
        stopped = stop["asked"] or type(exc).__name__ == "SignalException"
        spec.update(state="CANCELLED" if stopped else "FAILED", error=f"{type(exc).__name__}: {exc}", ended=time.time())
        _write(path, spec)
        raise


def main(argv: list[str] | None = None) -> int:
    """``python -m nemotron.launch.local_job RUN_DIR``: the supervisor of one local job."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not (Path(args[0]) / STATE_FILE).is_file():
        print(f"usage: python -m nemotron.launch.local_job RUN_DIR (a folder with {STATE_FILE})", file=sys.stderr)
        return 2
    return supervise(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
