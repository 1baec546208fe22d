"""A ``local`` profile's job: rendered and started on this machine by NeMo-Run's LocalExecutor under a supervisor
(:mod:`nemotron.launch.local_job`)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nemotron.errors import RuntimeFailure
from nemotron.launch import execute, jobs, submit
from nemotron.launch.local_job import START_TIMEOUT_S, STATE_FILE, _write, cancel, read_state
from nemotron.launch.nemo_run import _import_nemo_run
from nemotron.launch.plan import recorded_outputs


def _host_python_env(profile: Any, plan: Any) -> dict[str, str]:
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


def render(profile: Any, plan: Any) -> str:
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


def submit_local(req: Any, compiled: Any, profile: Any, plan: Any) -> str:
    """Package the job as for Slurm (train.yaml, job.yaml, secrets.env 0600, code snapshot under the
    profile's ``job_dir``), start its supervisor, wait until NeMo-Run has launched it, record it
    (:mod:`nemotron.launch.jobs`); returns the job id (NeMo-Run's app id, ``<task>-<random>``).

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
    jobs.save(jobs.JobRecord(
        experiment_id=plan.experiment_id, job_id=state["app_id"], stage=plan.stage.name, title=plan.stage.title,
        profile=profile.name, env_file=str(profile.source), run_dir=str(rdir), log_dir=state["log_dir"],
        job_name=plan.job_name, tunnel=jobs.LOCAL_EXECUTOR, outputs=recorded_outputs(compiled, profile, getattr(req, "latest", False)),
        config_hash=compiled.config_hash(), config=Path(plan.config_name).stem,
    ))
    return state["app_id"]
