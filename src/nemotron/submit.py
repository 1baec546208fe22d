"""NeMo-Run executors built from env.toml profiles. This module is the only one that imports
``nemo_run`` (2-4 s); the CLI imports it only to render a Slurm job script or to submit.

The sbatch script shown by ``--dry-run`` is rendered by NeMo-Run itself (its experiment dry run),
not by a renderer of ours that could drift from what is submitted.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
import tempfile
from typing import Any

from nemotron.errors import RuntimeFailure


def _import_nemo_run() -> Any:
    try:
        import nemo_run as run
    except ImportError as exc:
        raise RuntimeFailure(f"NeMo-Run is not importable ({exc})",
                             "install the submission extra: pip install 'nemotron-cli[run]'") from None
    return run


def job_root(profile: Any) -> str:
    """Where job folders live for ``profile`` (visible from login and compute nodes).

    Default ``$NEMOTRON_HOME/jobs`` for local tunnels; an SSH profile must set ``job_dir``.
    """
    job_dir = getattr(profile, "job_dir", None)
    if job_dir:
        return str(job_dir)
    from nemotron.artifacts import home

    return str(home() / "jobs")


def _tunnel(run: Any, profile: Any, job_dir: str) -> Any:
    kind = getattr(profile, "tunnel", None) or "local"
    if kind == "ssh":
        return run.SSHTunnel(host=profile.host, user=getattr(profile, "user", None) or os.environ.get("USER", ""),
                             job_dir=job_dir, identity=getattr(profile, "identity", None))
    return run.LocalTunnel(job_dir=job_dir)


def secrets_file(plan: Any, profile: Any) -> str:
    """Path (on the cluster) of the 0600 file holding the job's secrets; sourced inside the job so
    their values never appear in the sbatch script, job files or logs."""
    return f"{job_root(profile)}/{plan.experiment_id}.secrets.env"


def slurm_executor(plan: Any, profile: Any, mode: str, job_dir: str) -> Any:
    """A ``nemo_run.SlurmExecutor`` for ``plan`` on ``profile``.

    ``mode``: ``"run"`` (uses ``run_partition`` when set) or ``"batch"`` (``batch_partition``).
    Torchrun stages use NeMo-Run's torchrun launcher, which rewrites the task counts to one task per
    node with torchrun spawning one process per GPU.
    """
    run = _import_nemo_run()
    partition = profile.partition_for(mode) if mode in ("run", "batch") else profile.partition
    env_vars = dict(profile.public_env_vars())
    secret_names = sorted(profile.secret_values())
    setup = list(getattr(profile, "setup", None) or [])
    if secret_names:
        path = secrets_file(plan, profile)
        setup.append(f"set -a; . {shlex.quote(path)}; set +a  # secrets: {', '.join(secret_names)}")
    additional: dict[str, Any] = {}
    if getattr(profile, "reservation", None):
        additional["reservation"] = profile.reservation
    kwargs: dict[str, Any] = dict(
        account=getattr(profile, "account", None),
        partition=partition,
        qos=getattr(profile, "qos", None),
        time=getattr(profile, "time", None) or "01:00:00",
        nodes=plan.nodes,
        ntasks_per_node=plan.gpus_per_node if plan.launch == "torchrun" and plan.gpus_per_node else 1,
        gpus_per_node=plan.gpus_per_node or None,
        exclusive=getattr(profile, "exclusive", None),
        mem=getattr(profile, "mem", None),
        container_image=plan.image,
        container_mounts=list(getattr(profile, "mounts", None) or []),
        env_vars=env_vars,
        setup_lines="\n".join(setup) or None,
        additional_parameters=additional or None,
        tunnel=_tunnel(run, profile, job_dir),
        packager=run.Packager(),
    )
    if isinstance(kwargs["mem"], int):
        kwargs["mem"] = f"{kwargs['mem']}M"
    # NeMo-Run names the job <prefix><task name>; its default prefix derives from the account
    kwargs["job_name_prefix"] = f"{plan.stage.recipe}-"
    executor = run.SlurmExecutor(**{k: v for k, v in kwargs.items() if v is not None})
    if plan.launch == "torchrun":
        executor.launcher = "torchrun"
    return executor


def task_name(plan: Any) -> str:
    """The NeMo-Run task name; the Slurm job is named ``<recipe>-<task name>``."""
    return plan.job_name.removeprefix(f"{plan.stage.recipe}-")


def _task(run: Any, plan: Any, config_path: str) -> Any:
    return run.Script(path=str(plan.entry), args=["--config", config_path], entrypoint="python")


@contextlib.contextmanager
def _quiet_stdio(sink: io.StringIO) -> Any:
    """NeMo-Run prints progress and runs local shell commands through invoke, which reads standard
    input; give it an empty stdin and collect its chatter instead of showing it."""
    saved = sys.stdin
    sys.stdin = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        sys.stdin = saved


def render_sbatch(req: Any, compiled: Any, profile: Any, plan: Any) -> str:
    """The sbatch command and script NeMo-Run would submit for this job. Writes nothing outside a
    temporary directory (NeMo-Run's experiment folder goes there and is deleted).

    Raises:
        RuntimeFailure: NeMo-Run is missing or fails to render.
    """
    run = _import_nemo_run()
    job_dir = job_root(profile)
    config_path = f"{job_dir}/{plan.experiment_id}/train.yaml"
    sink = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="nemotron-dryrun-") as tmp, _quiet_stdio(sink):
        try:
            executor = slurm_executor(plan, profile, req.mode, job_dir)
            with run.Experiment(plan.job_name, id=plan.experiment_id, executor=executor, log_level="ERROR",
                                base_dir=tmp) as exp:
                exp.add(_task(run, plan, config_path), name=task_name(plan))
                exp.dryrun(log=False, delete_exp_dir=True)
                info = exp.jobs[0]._dryrun_info
        except RuntimeFailure:
            raise
        except Exception as exc:  # NeMo-Run raises plain exceptions; keep the message
            raise RuntimeFailure(f"NeMo-Run could not render the Slurm job: {type(exc).__name__}: {exc}") from exc
    return str(info)


def submit(req: Any, compiled: Any, profile: Any, plan: Any) -> int:
    """Submit to a cluster. Submission (``--run``/``--batch`` on Slurm and Ray profiles) is built in
    the execution issue; until then this says so plainly.

    Raises:
        RuntimeFailure: always, for now.
    """
    raise RuntimeFailure(
        f"submitting to a {plan.executor} profile is not available in this version",
        f"use --dry-run to see the job NeMo-Run would submit, or run here without a profile: nemotron {req.stage.title} -c {plan.config_name}",
    )


__all__ = ["render_sbatch", "slurm_executor", "submit", "job_root", "secrets_file"]
