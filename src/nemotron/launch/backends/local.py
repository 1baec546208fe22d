"""The ``local`` executor: a ``local`` profile's job, rendered and started on this machine by NeMo-Run's
LocalExecutor under a supervisor process (:mod:`nemotron.launch.local_job`), whose state file (``local-job.json``
in the run folder) is the job's state; its logs are NeMo-Run's (torchx's) files of the task, stdout then stderr.
Following it behaves like a run here: the result is the stage's own exit code."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nemotron.config import artifacts
from nemotron.errors import RESUMABLE, RuntimeFailure
from nemotron.launch import execute, local_job, records, submit
from nemotron.launch.backends.base import _ABSENT_TAG, _UNFINISHED_TAG, Backend, Job, output_check, shell
from nemotron.launch.local_job import START_TIMEOUT_S, STATE_FILE, _write, cancel, read_state
from nemotron.launch.nemo_run import _import_nemo_run
from nemotron.launch.plan import recorded_outputs
from nemotron.launch.records import JobRecord, job_folders, missing_error
from nemotron.profiles.profile import Profile
from nemotron.profiles.schema import LocalSettings


def _host_python_env(profile: Profile[LocalSettings], plan: Any) -> dict[str, str]:
    """The local job's plain environment (:func:`nemotron.launch.submit.job_env_vars`) with ``PATH`` resolved:
    the host Python's folder, then this process's ``PATH`` (the submitting shell's), so the job finds
    the system's commands (``bash``, ``git``, ``nvidia-smi``) after the venv's."""

    env = submit.job_env_vars(profile, plan)
    if env.get("PATH", "").endswith("$PATH"):  # nothing expands a literal $PATH here: put the real one
        rest = os.environ.get("PATH", "")
        env["PATH"] = env["PATH"].removesuffix("$PATH").rstrip(":") + (f":{rest}" if rest else "")
    return env


def _shell_assignment(name: str, value: str) -> str:
    """``NAME=value`` as a shell word; a value ending in ``$PATH`` keeps that reference expandable."""
    if name == "PATH" and value.endswith("$PATH"):
        head = value.removesuffix("$PATH")
        return f"{name}={shlex.quote(head) if head else ''}\"$PATH\""
    return f"{name}={shlex.quote(value)}"


def render(profile: Profile[LocalSettings], plan: Any) -> str:
    """What ``--dry-run`` shows for a ``local`` profile: the job folder, where NeMo-Run writes the
    logs, and the command its local executor starts (environment first, as a shell line that can be
    pasted: ``PATH`` is the venv's folder then ``"$PATH"``; secrets as ``***``)."""

    task = submit.task_spec(plan, profile)
    env = {**submit.job_env_vars(profile, plan), **dict.fromkeys(profile.secret_values(), "***")}
    prefix = " ".join(_shell_assignment(k, v) for k, v in env.items())
    cmd = [task["entrypoint"], task["path"], *task["args"]]
    if plan.launch == "torchrun" and plan.gpus_per_node > 1:
        cmd = ["torchrun", "--nnodes", "1", "--nproc-per-node", str(plan.gpus_per_node), *cmd[1:]]
    root = submit.safe_root(profile)
    return (f"# NeMo-Run LocalExecutor on this machine, run by a supervisor process (python -m nemotron.launch.local_job)\n"
            f"# job folder: {submit.remote_run_dir(profile, plan)} (train.yaml, job.yaml, secrets.env, code/)\n"
            f"# logs: {root}/experiments/{plan.job_name}/{plan.experiment_id}/{submit.task_name(plan)}/nemo_run/"
            f"<app id>/\n{prefix} {shlex.join(cmd)}")


def submit_local(req: Any, compiled: Any, profile: Profile[LocalSettings], plan: Any) -> str:
    """Package the job as for Slurm (train.yaml, job.yaml, secrets.env 0600, code snapshot under the
    profile's ``job_dir``), start its supervisor, wait until NeMo-Run has launched it, record it
    (:mod:`nemotron.launch.records`); returns the job id (NeMo-Run's app id, ``<task>-<random>``).

    Raises:
        ConfigError: a GPU stage asks for more GPUs than this machine shows.
        RuntimeFailure: a declared secret is unset, the files cannot be written, or the job did not start.
    """

    submit.require_secrets(profile)
    execute.check_gpus(plan, (compiled.config or {}).get("backend"))
    root = submit.safe_root(profile)
    rdir = Path(submit.remote_run_dir(profile, plan))
    run = _import_nemo_run()
    try:
        submit.stage_files(run.LocalTunnel(job_dir=root), req, compiled, profile, plan)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write the job folder {rdir}: {exc.strerror or exc}",
                             f"check the profile's job_dir ({submit.job_root(profile)}): it must be writable") from None
    torchrun = plan.launch == "torchrun" and plan.gpus_per_node > 1
    spec = {
        "state": "PENDING", "exit_code": None, "run_dir": str(rdir), "root": root,
        "experiment_id": plan.experiment_id, "job_name": plan.job_name, "task_name": submit.task_name(plan),
        "task": submit.task_spec(plan, profile), "env_vars": _host_python_env(profile, plan),
        "launcher": "torchrun" if torchrun else None, "ntasks_per_node": plan.gpus_per_node if torchrun else 1,
    }
    _write(rdir / STATE_FILE, spec)
    with open(rdir / "supervisor.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "nemotron.launch.local_job", str(rdir)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True, cwd=os.getcwd())
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            state = read_state(rdir)
            if state.get("app_id") or state.get("state") not in (None, "PENDING") or proc.poll() is not None:
                break
            time.sleep(0.1)
    except KeyboardInterrupt:  # Ctrl-C before the job started: it must not start behind the user's back
        cancel(rdir)
        raise
    state = read_state(rdir)
    if not state.get("app_id"):
        if proc.poll() is None:
            cancel(rdir)
        why = state.get("error") or f"the supervisor exited with code {proc.poll()}"
        raise RuntimeFailure(f"{plan.stage.title}: NeMo-Run's local executor did not start the job: {why}",
                             f"see {rdir / 'supervisor.log'}")
    records.save(records.JobRecord(
        experiment_id=plan.experiment_id, job_id=state["app_id"], stage=plan.stage.name, title=plan.stage.title,
        profile=profile.name, env_file=str(profile.source), run_dir=str(rdir), log_dir=state["log_dir"],
        job_name=plan.job_name, tunnel=records.LOCAL_EXECUTOR, outputs=recorded_outputs(compiled, profile, getattr(req, "latest", False)),
        config_hash=compiled.config_hash(), config=Path(plan.config_name).stem, executor=plan.executor,
    ))
    return state["app_id"]


def _missing(rec: JobRecord, logs_only: bool = False) -> list[str]:
    """The job's folders that are missing on this machine; the run folder counts as missing when its
    ``local-job.json`` is gone (the job's state lives there)."""

    missing = [path for _, path in job_folders(rec, logs_only) if not os.path.isdir(path)]
    state_file = os.path.join(rec.run_dir, local_job.STATE_FILE)
    if not missing and not os.path.isfile(state_file):
        missing.append(state_file)
    return missing


#: Seconds ``cancel`` waits for a local job's end: the supervisor's grace period, NeMo-Run's 10 s before its
#: SIGKILL, and 20 s for the supervisor to see it (it polls NeMo-Run every 0.5 s).
CANCEL_WAIT_S = local_job.GRACE_S + 30.0


class LocalJob(Backend):
    """A ``local`` profile: NeMo-Run's LocalExecutor on this machine, under a supervisor (:func:`submit_local`)."""

    executor, runs_here, scheduler = "local", False, "local executor"
    settings = LocalSettings

    def render(self, job: Job) -> str:
        return render(job.profile_as(LocalSettings), job.plan)

    def submit(self, job: Job, chain: list[str]) -> tuple[str, str]:
        job_id = submit_local(job.req, job.compiled, job.profile_as(LocalSettings), job.plan)
        return job_id, f"local job {job_id} (NeMo-Run local executor)"

    def state(self, rec: JobRecord) -> tuple[str, str]:
        """The supervisor's record of the job (:func:`nemotron.launch.local_job.status`).

        Raises:
            JobFilesMissing: the run folder, its ``local-job.json`` or the log folder is gone.
        """
        missing = _missing(rec)
        if missing:
            raise missing_error(rec, missing)
        st, code = local_job.status(rec.run_dir)
        return st, "" if code is None else str(code)

    def log_files(self, rec: JobRecord) -> list[str]:
        """NeMo-Run's (torchx's) files of the task: stdout, then stderr (those written so far).

        Raises:
            JobFilesMissing: the log folder, the run folder or its ``local-job.json`` is gone.
        """
        missing = _missing(rec)
        if missing:
            raise missing_error(rec, missing)
        state = local_job.read_state(rec.run_dir)  # files inside the (present) log folder: absent = not written yet
        return [p for p in (state.get("stdout"), state.get("stderr")) if p and os.path.isfile(p)]

    def read_log(self, rec: JobRecord, path: str, offset: int = 0) -> str:
        try:  # a file on this machine
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def read_log_tail(self, rec: JobRecord, path: str, limit: int) -> str:
        """The last ``limit`` bytes of a log on this machine, read from its end (:func:`nemotron.launch.records.read_tail`)."""
        try:
            return records.read_tail(path, limit)
        except OSError:
            return ""

    def last_line(self, rec: JobRecord, limit: int = 8192) -> str:
        """The job's last non-empty line of output (its stderr log, else its stdout log; ``""`` when it said
        nothing): after a Ctrl-C the attached command relays it, since it stopped following the logs."""
        state = local_job.read_state(rec.run_dir)
        for key in ("stderr", "stdout"):
            path = state.get(key)
            if not path:
                continue
            lines = [ln.strip() for ln in self.read_log_tail(rec, path, limit).splitlines() if ln.strip()]
            if lines:
                return lines[-1]
        return ""

    def stream_for(self, path: str, stream: Any) -> Any:
        return sys.stderr if path.endswith("/stderr.log") else stream

    def cancel(self, rec: JobRecord) -> None:
        """Stop the job through its supervisor (:func:`nemotron.launch.local_job.cancel`), then wait for its end
        (the supervisor's final state), so that ``status`` right after says ``CANCELLED``, not ``RUNNING``: the job
        gets :data:`~nemotron.launch.local_job.GRACE_S` seconds to save and stop, then NeMo-Run kills it (10 s
        later), so the wait is at most :data:`CANCEL_WAIT_S`. A Ctrl-C ends the wait only (the cancel holds). Says
        on stderr that it waits and, when the state is still not final, that the job is still stopping.

        Raises:
            RuntimeFailure: no supervisor process any more.
        """
        if not local_job.cancel(rec.run_dir):
            raise RuntimeFailure(f"local job {rec.job_id} has no supervisor process any more; nothing to cancel")
        print(f"cancelling local job {rec.job_id}: waiting for it to stop (a training stage saves first; Ctrl-C "
              "stops waiting, not the cancel) ...", file=sys.stderr, flush=True)
        deadline = time.monotonic() + CANCEL_WAIT_S
        try:
            while time.monotonic() < deadline:
                if local_job.status(rec.run_dir)[0] in records.TERMINAL:
                    return
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        print(f"local job {rec.job_id} is still stopping: nemotron ultra3 status {rec.job_id} says when it ended",
              file=sys.stderr)

    def ended_at(self, rec: JobRecord) -> float | None:
        """The supervisor's record of when the job ended."""
        ended = local_job.read_state(rec.run_dir).get("ended")
        return float(ended) if isinstance(ended, (int, float)) else None

    def outputs_written(self, rec: JobRecord) -> str:
        path = shlex.quote(rec.run_dir + "/" + artifacts.OUTPUTS_FILE)
        return shell(rec, ["bash", "-c", f"cat {path} 2>/dev/null"]).stdout

    def missing_outputs(self, rec: JobRecord, outputs: dict[str, dict], data: bool) -> tuple[list[str], list[str]]:
        said = shell(rec, ["bash", "-c", output_check(outputs, data)]).stdout.splitlines()
        return ([ln[len(_ABSENT_TAG):] for ln in said if ln.startswith(_ABSENT_TAG)],
                [ln[len(_UNFINISHED_TAG):] for ln in said if ln.startswith(_UNFINISHED_TAG)])

    def attach(self, rec: JobRecord, owner: bool = False, chain: Any = ()) -> int:
        """Follow the job like a run here: the result is the stage's own exit code (75: stopped resumably). For the
        command that started it (``owner``) Ctrl-C stops the job and returns 130, and SIGTERM (``kill``,
        ``timeout``) is passed on to the job. ``logs -f`` (not the owner) only stops following on Ctrl-C."""

        def forward(_signum: int, _frame: Any) -> None:  # `kill`/`timeout` on the CLI stop the stage too
            local_job.cancel(rec.run_dir)

        previous = signal.signal(signal.SIGTERM, forward) if owner else None
        try:
            try:
                st, code = self.follow(rec, poll_s=0.2)
            except KeyboardInterrupt:
                if not owner:
                    print(f"\nstopped following; local job {rec.job_id} keeps running", file=sys.stderr)
                    return 130
                print(f"\nstopping local job {rec.job_id} (Ctrl-C again: stop it at once) ...", file=sys.stderr)
                local_job.cancel(rec.run_dir)
                deadline = time.monotonic() + local_job.GRACE_S + 30  # then NeMo-Run's SIGKILL, 10 s after its SIGTERM
                while time.monotonic() < deadline:
                    try:
                        if self.state(rec)[0] in records.TERMINAL:
                            break
                        time.sleep(0.2)
                    except KeyboardInterrupt:
                        local_job.cancel(rec.run_dir)
                last = self.last_line(rec)
                if last:  # what the job itself said as it stopped (what it kept, how to resume)
                    print(last, file=sys.stderr)
                return 130
        finally:
            if owner:
                signal.signal(signal.SIGTERM, previous)
        exit_code = int(code) if str(code).lstrip("-").isdigit() else 1
        folder = f"run folder: {rec.run_dir}; logs: {rec.log_dir}"
        if st == "COMPLETED":
            for art in self.record_outputs(rec):
                print(f"[nemotron] artifact {art['name']} v{art['version']}: {art['path']}", file=sys.stderr)
            return 0
        if exit_code == RESUMABLE:
            print(execute.stopped_line(rec.title, rec.run_dir, "saved its state and stopped on a signal", folder),
                  file=sys.stderr)
            return exit_code
        if exit_code == 0:  # cancelled before it failed or finished, or its supervisor died
            exit_code = 1
        if exit_code != 2:  # 2: the stage already said what is wrong with its config or input
            print(f"{rec.title} ended {st} with exit code {code if code not in (None, '') else '?'} ({folder})",
                  file=sys.stderr)
        return exit_code
