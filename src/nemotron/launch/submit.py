"""Slurm submission through NeMo-Run. This module is the only one that imports ``nemo_run`` (2-4 s);
the CLI imports it only to render a Slurm job script or to submit.

Layout on the cluster, under the profile's ``job_dir`` (``ROOT``)::

    ROOT/runs/<experiment id>/            ours: train.yaml, job.yaml, secrets.env (0600), code/
    ROOT/experiments/<job name>/<id>/     NeMo-Run's: the sbatch script, its logs, its metadata

``code/`` is a snapshot of the ``nemotron`` package with its stage definitions, put on ``PYTHONPATH``
of the job, so the job runs exactly the code that was submitted. The sbatch script shown by
``--dry-run`` is rendered by NeMo-Run itself (its experiment dry run) from the same executor and task
that submission uses. Ray stages (launch ``ray``) go through NeMo-Run's Ray-on-Slurm request with our
template :data:`RAY_TEMPLATE`: the job starts a Ray cluster over its nodes and runs the stage on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shlex
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from nemotron.config import artifacts, yamlio
from nemotron.config.artifacts import home
from nemotron.config.paths import stages_dir
from nemotron.errors import ConfigError, NemotronError, RuntimeFailure
from nemotron.launch import execute, records
from nemotron.launch.nemo_run import _import_nemo_run
from nemotron.launch.plan import recorded_outputs
from nemotron.profiles.profile import ExecutorProfile, Profile
from nemotron.profiles.schema import DEFAULT_TIME, SlurmSettings, shell_safe_root
from nemotron.runtime.dispatch import REQUEUE_MARKER_ENV
from nemotron.validation.cluster import _under, warning_signal_problem


def job_root(profile: ExecutorProfile) -> str:
    """The profile's ``job_dir``: where job folders live, visible from login and compute nodes."""
    return str(profile.settings.job_dir)


def safe_root(profile: ExecutorProfile) -> str:
    """The job root as NeMo-Run gets it. NeMo-Run puts paths into shell commands unquoted, so a
    ``job_dir`` with spaces or other shell characters is reached through a symlink without them, made
    beside its nearest safe ancestor on the same file system: ``<ancestor>/.nemotron-jobs-<hash>``
    (:func:`nemotron.profiles.load.shell_safe_root`)."""

    return shell_safe_root(job_root(profile))


def remote_run_dir(profile: ExecutorProfile, plan: Any) -> str:
    """``ROOT/runs/<experiment id>``: train.yaml, job.yaml, secrets.env and the code snapshot."""
    return f"{safe_root(profile)}/runs/{plan.experiment_id}"


def task_name(plan: Any) -> str:
    """The NeMo-Run task name; the Slurm job is named ``<recipe>-<task name>``."""
    return plan.job_name.removeprefix(f"{plan.stage.recipe}-")


def _uses_container(plan: Any) -> bool:
    return plan.image is not None


def _python(profile: ExecutorProfile, plan: Any) -> str:
    configured = profile.settings.python_command
    if configured:
        return configured
    if _uses_container(plan) or profile.settings.over_ssh:
        return "python"
    return sys.executable  # host Python on a cluster that shares this machine's file system


def _tunnel(run: Any, profile: Profile[SlurmSettings], job_dir: str) -> Any:
    s = profile.settings
    if s.over_ssh:
        return run.SSHTunnel(host=s.host, user=s.user, job_dir=job_dir, port=s.port, identity=s.identity)
    return run.LocalTunnel(job_dir=job_dir)


def job_env_vars(profile: ExecutorProfile, plan: Any) -> dict[str, str]:
    """The job's plain environment (written into the job script, so never a secret): the profile's
    public variables, ``PYTHONPATH`` (the code snapshot, then the profile's ``PYTHONPATH``),
    ``NEMOTRON_EXPERIMENT_ID``, ``NEMOTRON_RUN_DIR``, and for a host Python its folder first on ``PATH`` (then the
    profile's ``PATH``, else ``$PATH``). Every profile variable reaches the job: the names the job sets itself are
    refused when the profile loads (:data:`nemotron.profiles.schema.JOB_SET_VARS`)."""
    rdir = remote_run_dir(profile, plan)
    own = dict(profile.public_env_vars())
    env_vars = dict(own)
    env_vars.update({"PYTHONPATH": f"{rdir}/code" + (f":{own['PYTHONPATH']}" if own.get("PYTHONPATH") else ""),
                     "NEMOTRON_EXPERIMENT_ID": plan.experiment_id, "NEMOTRON_RUN_DIR": rdir})
    if getattr(plan, "requeue", False):  # the batch script requeues a job that saved on the warning signal
        env_vars["NEMOTRON_SLURM_REQUEUE"] = "1"
    if resumable(plan):  # the stage says here that it saved and stopped; the batch script reads it after the step

        env_vars[REQUEUE_MARKER_ENV] = f"{rdir}/{REQUEUE_MARKER}"
    if getattr(plan, "signal_before_s", None) and plan.launch == "torchrun":
        # torchrun forwards the warning's SIGTERM to its workers and kills them after this many seconds
        # (default 30 s; the variable is read by torch 2.13's launcher, older ones ignore it): give them the
        # whole warning period to save
        # (a profile's own value wins)
        env_vars.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(plan.signal_before_s))
    if plan.launch == "ray" and isinstance(profile.settings, SlurmSettings):  # read by RAY_TEMPLATE's srun lines
        env_vars[RAY_SRUN_MPI_ENV] = profile.settings.ray_srun_mpi
    python = _python(profile, plan)
    if os.path.isabs(python):  # host Python: its console scripts (torchrun, ray) come first on PATH
        env_vars["PATH"] = f"{os.path.dirname(python)}:{own.get('PATH') or '$PATH'}"
    return env_vars


#: The variable of a Ray stage's Slurm job that holds the profile's ``ray_srun_mpi``: the ``--mpi`` of every srun
#: of :data:`RAY_TEMPLATE` (``ray start`` on the head and the workers, the readiness probe, the driver).
RAY_SRUN_MPI_ENV = "NEMOTRON_RAY_SRUN_MPI"


#: The file in the job's run folder (``ROOT/runs/<experiment id>/``, shared by every start of a requeued job) that
#: the stage writes when it saved and stopped on a signal (:func:`nemotron.runtime.dispatch.mark_stopped`).
REQUEUE_MARKER = "requeue.marker"


def resumable(plan: Any) -> bool:
    """Whether ``plan`` is a Slurm job of a stage that stops where it can resume (a training stage: it has
    ``run.requeue``, ``run.chain`` or ``run.signal_before_s``): its batch script then makes the requeue decision
    after the step (:func:`after_step_lines`)."""
    return getattr(plan, "executor", None) == "slurm" and bool(
        getattr(plan, "requeue", False) or getattr(plan, "chain", 0) or getattr(plan, "signal_before_s", None))


def after_step_lines(plan: Any, rdir: str) -> list[str]:
    """Lines of the batch script's setup for a :func:`resumable` plan: the requeue decision, made on the host
    after the job step, where Slurm's client is (the stage's container has none; and under torchrun the step
    ends with torchrun's code, 1, not the stage's 75).

    Before the step: the marker of an earlier start of the job is removed. After it, when the stage wrote the
    marker (saved and stopped on a signal): its line is printed; with ``run.requeue`` the script runs
    ``scontrol requeue $SLURM_JOB_ID`` (same job id, restart count + 1); and the job ends with exit code 75
    (saved and stopped), whatever the step's code. Without a marker the job ends with the step's code. A step
    that did not end (the script itself was cancelled or hit the time limit) decides nothing. In NeMo-Run's
    Slurm template (its ``slurm.sh.j2``) the decision runs from an EXIT trap, reading the step's code from the
    template's ``exitcode`` variable; the Ray template (:data:`RAY_TEMPLATE`) calls it when the driver ended.
    """
    marker = shlex.quote(f"{rdir}/{REQUEUE_MARKER}")
    return [
        "# nemotron: the requeue decision is made here, on the host, after the job step (docs/megatron_bridge.md)",
        f"rm -f {marker}",
        "nemotron_after_step() {  # $1: the step's exit code; empty when the step did not end",
        f'  [[ -n "${{1:-}}" && -f {marker} ]] || return 0',
        f'  echo "[nemotron] $(cat {marker} 2>/dev/null)"',
        '  if [[ "${NEMOTRON_SLURM_REQUEUE:-0}" == 1 ]]; then',
        '    if scontrol requeue "$SLURM_JOB_ID"; then',
        '      echo "[nemotron] requeued Slurm job $SLURM_JOB_ID (restart $((${SLURM_RESTART_COUNT:-0} + 1))); '
        'it resumes from the saved checkpoint"',
        "    else",
        '      echo "[nemotron] scontrol requeue $SLURM_JOB_ID failed; submit the same command again to resume" >&2',
        "    fi",
        "  else",
        '    echo "[nemotron] run.requeue is off: the job ends with exit code 75; the next job of the run (a run.chain '
        'continuation, or the same command again) resumes from the save"',
        "  fi",
        "  exit 75",
        "}",
        *([] if plan.launch == "ray" else ["trap 'nemotron_after_step \"${exitcode:-}\"' EXIT"]),
    ]


def _executor(run: Any, plan: Any, profile: Profile[SlurmSettings], mode: str, root: str) -> Any:
    """A ``nemo_run.SlurmExecutor`` for ``plan`` on ``profile``, its experiment folders under ``root``.

    ``mode``: ``"run"`` (uses ``run_partition`` when set) or ``"batch"`` (``batch_partition``).
    Torchrun stages use NeMo-Run's torchrun launcher, which rewrites the task counts to one task per
    node with torchrun spawning one process per GPU.
    """
    rdir = remote_run_dir(profile, plan)
    env_vars = job_env_vars(profile, plan)
    setup = []
    secret_names = sorted(profile.secret_values())
    if secret_names:  # first, so that the profile's own setup lines can use them too
        # the batch script runs under `set -evx`: tracing off while sourcing, or the values reach the log
        setup.append(f"{{ set +vx; }} 2>/dev/null; set -a; . {shlex.quote(rdir + '/secrets.env')}; set +a; set -vx"
                     f"  # secrets: {', '.join(secret_names)}")
    s = profile.settings
    own = list(s.setup)
    if secret_names and own:  # a line may expand a secret ($HF_TOKEN): `set -x` would print its value
        own = ["{ set +x; } 2>/dev/null  # profile setup runs untraced: its lines may expand secrets", *own, "set -x"]
    setup.extend(own)
    if resumable(plan):
        setup.extend(after_step_lines(plan, rdir))
    additional: dict[str, Any] = {}
    if s.reservation:
        additional["reservation"] = s.reservation
    mounts = container_mounts(profile) if _uses_container(plan) else []
    script_env, exports = script_env_vars(env_vars, substituted=plan.launch != "ray")
    if exports:  # names NeMo-Run would upper-case: exported here, as written
        setup.insert(0, "\n".join(exports))
    mem = s.mem
    kwargs: dict[str, Any] = dict(
        partition=s.partition_for(mode),
        qos=s.qos,
        time=s.time or DEFAULT_TIME,
        signal=_warning_signal(plan, profile),
        nodes=plan.nodes,
        ntasks_per_node=plan.gpus_per_node if plan.launch == "torchrun" and plan.gpus_per_node else 1,
        gpus_per_node=plan.gpus_per_node or None,
        exclusive=s.exclusive,
        mem=f"{mem}M" if isinstance(mem, int) else mem,
        container_image=plan.image,
        # NeMo-Run joins the mounts with commas into the srun line unquoted: each is quoted here, so that a
        # storage root with a space, `$` or a backquote reaches pyxis as written (the joined words are one
        # shell word; ':' and ',' in a path are refused by the profile, node_path_problem)
        container_mounts=[shlex.quote(m) for m in mounts],
        env_vars=script_env,
        setup_lines="\n".join(setup) or None,
        additional_parameters=additional or None,
        tunnel=_tunnel(run, profile, f"{root}/experiments/{plan.job_name}"),
        packager=run.Packager(),
        # NeMo-Run names the job <prefix><task name>; its default prefix derives from the account
        job_name_prefix=f"{plan.stage.recipe}-",
    )
    # account is optional (the cluster's default account then applies) but a required argument of NeMo-Run's
    # executor: None renders no --account
    # a switch that is off is no flag at all: NeMo-Run renders False as `#SBATCH --exclusive=False`, which sbatch
    # refuses ("Invalid --exclusive specification"); True renders the bare flag
    executor = run.SlurmExecutor(account=s.account,
                                 **{k: v for k, v in kwargs.items() if v is not None and v is not False})
    if plan.launch == "torchrun":
        executor.launcher = "torchrun"
    elif plan.launch == "ray":
        # NeMo-Run joins the template's file name to its own template folder: an absolute path wins
        executor.ray_template = str(RAY_TEMPLATE)
        # logs in the task's folder, as for every other job (NeMo-Run's default, the Ray cluster folder's
        # logs/, does not exist yet when Slurm opens the batch script's output file)
        executor.job_details.folder = f"{root}/experiments/{plan.job_name}/{plan.experiment_id}/{task_name(plan)}"
    return executor


def container_mounts(profile: Profile[SlurmSettings]) -> list[str]:
    """The container mounts of a job on ``profile``: its ``mounts``, the job root (through its shell-safe
    name, :func:`safe_root`, when ``job_dir`` has shell characters: NeMo-Run writes mounts into the srun line
    unquoted), then each storage root (``data_root``, ``checkpoint_root``, ``index_cache_dir``, ``hf_home``)
    that no earlier mount covers, at the same path."""

    mounts = list(profile.settings.mounts)
    safe = safe_root(profile)  # the job root itself when it has no shell characters
    mounts.append(f"{safe}:{safe}")
    for value in profile.settings.storage().values():
        if value and not any(_under(str(value), m.split(":", 1)[0]) for m in mounts):
            mounts.append(f"{value}:{value}")
    return mounts


def shell_word(name: str, value: str) -> str:
    """``value`` as the right-hand side of ``export NAME=...`` in a job script, read back by bash as exactly
    ``value`` (:func:`shlex.quote`); the one exception, a ``PATH`` ending in ``$PATH`` (a host Python's folder
    first, :func:`job_env_vars`), keeps that reference expandable."""
    if name == "PATH" and value.endswith("$PATH"):
        head = value.removesuffix("$PATH")
        return (shlex.quote(head) if head else "") + '"$PATH"'
    return shlex.quote(value)


def script_env_vars(env_vars: dict[str, str], substituted: bool = True) -> tuple[dict[str, str], list[str]]:
    """The job's environment as NeMo-Run's Slurm executor gets it, and the ``export`` lines we write ourselves.

    NeMo-Run writes each variable as ``export {NAME.upper()}={value}``, unquoted, and (for a non-Ray job,
    ``substituted``) runs every value through torchx's ``Template.safe_substitute`` first (``$$`` becomes
    ``$``, ``${app_id}`` its id). So each value is quoted (:func:`shell_word`) and, when substituted, its
    ``$`` doubled; a name that is not all upper case (``http_proxy``) is not given to NeMo-Run, which would
    upper-case it, but returned as an ``export`` line of its own, for the batch script's setup.
    Returns ``(env_vars for NeMo-Run, export lines)``."""
    given, exports = {}, []
    for name, value in env_vars.items():
        word = shell_word(name, value)
        if name != name.upper():
            exports.append(f"export {name}={word}")
        else:
            given[name] = word.replace("$", "$$") if substituted else word
    return given, exports


def task_spec(plan: Any, profile: ExecutorProfile) -> dict[str, Any]:
    """The keyword arguments of the job's ``nemo_run.Script``: the stage's entry script inside the
    code snapshot, ``--config ROOT/runs/<id>/train.yaml``, and the Python that runs it."""
    rdir = remote_run_dir(profile, plan)
    entry = f"{rdir}/code/nemotron/_stages/{plan.stage.entry}"
    # under torchrun the entrypoint must be plain "python": torchrun then starts the script with its own
    # interpreter (any other entrypoint makes NeMo-Run pass --no-python and exec the script itself)
    python = "python" if plan.launch == "torchrun" else _python(profile, plan)
    return {"path": entry, "args": ["--config", f"{rdir}/train.yaml"], "entrypoint": python}


def _warning_signal(plan: Any, profile: Profile[SlurmSettings]) -> str | None:
    """``TERM@N`` for ``sbatch --signal`` when the stage asks for a warning ``N = run.signal_before_s``
    seconds before the time limit (SIGTERM: what Megatron-Bridge's exit-signal handler and our local
    runtime save and stop on; Slurm signals every process of the job's steps, not the batch shell).
    A Ray stage gets ``B:TERM@N`` instead: the signal goes to the batch script alone, which passes it to
    the driver step only (:data:`RAY_TEMPLATE`), so the Ray head and workers stay up while the driver
    saves and exits.

    Raises:
        ConfigError: the warning would come at or before the job's start (N >= the time limit).
    """
    seconds = getattr(plan, "signal_before_s", None)
    if not seconds:
        return None
    problem = warning_signal_problem(seconds, profile)
    if problem is not None:
        raise ConfigError(problem.render().split("; valid: ")[0], problem.valid)
    return f"{'B:' if plan.launch == 'ray' else ''}TERM@{seconds}"


#: The sbatch template of Ray stages (``launch: ray``), rendered by NeMo-Run's Ray-on-Slurm request: a
#: Ray cluster over the allocation (head on the first node, one worker per other node), then the
#: stage's entry script on the head with ``RAY_ADDRESS`` set. Host Python, or the stage's container
#: through the pyxis flags NeMo-Run renders (docs/execution.md).
RAY_TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "ray_slurm.sub.j2"

def _task(run: Any, plan: Any, profile: ExecutorProfile) -> Any:
    if plan.launch == "ray":  # NeMo-Run renders the job with its Ray-on-Slurm request and RAY_TEMPLATE
        from nemo_run.config import USE_WITH_RAY_CLUSTER_KEY

        return run.Script(**task_spec(plan, profile), metadata={USE_WITH_RAY_CLUSTER_KEY: True})
    return run.Script(**task_spec(plan, profile))


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


def render_sbatch(req: Any, compiled: Any, profile: Profile[SlurmSettings], plan: Any) -> str:
    """The sbatch command and script NeMo-Run would submit for this job.

    NeMo-Run's experiment folder goes to a temporary directory, deleted afterwards; the paths in the
    text are then those of the real submission (the temporary root replaced by the profile's
    ``job_dir``), so the script shown is the script submitted.

    Raises:
        RuntimeFailure: NeMo-Run is missing or fails to render.
    """
    run = _import_nemo_run()
    sink = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="nemotron-dryrun-") as tmp, _quiet_stdio(sink):
        try:
            executor = _executor(run, plan, profile, req.mode, tmp)
            with run.Experiment(plan.job_name, id=plan.experiment_id, executor=executor, log_level="ERROR",
                                base_dir=tmp) as exp:
                exp.add(_task(run, plan, profile), name=task_name(plan))
                exp.dryrun(log=False, delete_exp_dir=True)
                info = exp.jobs[0]._dryrun_info
        except NemotronError:
            raise
        except Exception as exc:  # NeMo-Run raises plain exceptions; keep the message
            raise RuntimeFailure(f"NeMo-Run could not render the Slurm job: {type(exc).__name__}: {exc}") from exc
        text = str(info)
    return text.replace(tmp, safe_root(profile))


def code_snapshot(dest: Path) -> Path:
    """Write ``dest`` (a .tar.gz) holding the ``nemotron`` package with its stage definitions as
    ``nemotron/_stages`` — what the job puts on its ``PYTHONPATH``."""

    pkg = Path(__file__).resolve().parents[1]  # the nemotron package

    def skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = info.name.rsplit("/", 1)[-1]
        return None if name == "__pycache__" or name.endswith((".pyc", ".pyo")) else info

    with tarfile.open(dest, "w:gz") as tar:
        tar.add(pkg, arcname="nemotron", filter=lambda i: None if i.name.startswith("nemotron/_stages") else skip(i))
        tar.add(stages_dir(), arcname="nemotron/_stages", filter=skip)
    return dest


def upload(tunnel: Any, profile: ExecutorProfile, rdir: str, files: dict[str, str], code_dir: str = "code") -> None:
    """Create the run folder ``rdir`` on the cluster and put ``files`` (name → text, mode 0600) and the
    code snapshot (extracted into ``rdir/code_dir``) there, through the tunnel (a copy for a local
    tunnel, SFTP for SSH). A job root with shell characters gets its safe symlink first."""
    tunnel.connect()
    root, link = job_root(profile), safe_root(profile)
    if link != root:
        tunnel.run(f"mkdir -p {shlex.quote(root)} && ln -sfn {shlex.quote(root)} {shlex.quote(link)}", hide=True)
    code = f"{rdir}/{code_dir}"
    tunnel.run(f"mkdir -p {shlex.quote(code)} && chmod 700 {shlex.quote(rdir)}", hide=True)
    for sub in {str(Path(name).parent) for name in files} - {"."}:
        tunnel.run(f"mkdir -p {shlex.quote(rdir + '/' + sub)}", hide=True)
    with tempfile.TemporaryDirectory(prefix="nemotron-submit-") as tmp:
        for name, text in files.items():
            local = Path(tmp) / name.replace("/", "__")
            local.write_text(text, encoding="utf-8")
            os.chmod(local, 0o600)
            tunnel.put(str(local), f"{rdir}/{name}")
            tunnel.run(f"chmod 600 {shlex.quote(rdir + '/' + name)}", hide=True)
        code_snapshot(Path(tmp) / "code.tar.gz")
        tunnel.put(str(Path(tmp) / "code.tar.gz"), f"{rdir}/code.tar.gz")
    tunnel.run(f"tar -xzf {shlex.quote(rdir + '/code.tar.gz')} -C {shlex.quote(code)} "
               f"&& rm -f {shlex.quote(rdir + '/code.tar.gz')}", hide=True)


def stage_files(tunnel: Any, req: Any, compiled: Any, profile: ExecutorProfile, plan: Any) -> None:
    """train.yaml, job.yaml, secrets.env and the code snapshot into the job's run folder, through
    ``tunnel`` (a NeMo-Run tunnel: local copy or SSH)."""

    files = {"train.yaml": yamlio.dumps(compiled.config),
             "job.yaml": yamlio.dumps(execute.provenance(req, compiled, profile, plan))}
    if not profile.settings.over_ssh:  # the job runs where this machine's store is: it records at end
        files[artifacts.RECORD_FILE] = json.dumps({
            "store": str(artifacts.store()), "data": plan.stage.family.prepares_data,
            "outputs": recorded_outputs(compiled, profile, getattr(req, "latest", False)),
            "fields": {"stage": plan.stage.name, "config": artifacts.recorded_config(plan.stage.name, plan.config_name),
                       "experiment_id": plan.experiment_id, "config_hash": compiled.config_hash()}},
            indent=2, sort_keys=True, default=str)
    secrets = profile.secret_values()
    if secrets:
        files["secrets.env"] = "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(secrets.items()))
    upload(tunnel, profile, remote_run_dir(profile, plan), files)


def _stage_files(executor: Any, req: Any, compiled: Any, profile: ExecutorProfile, plan: Any) -> None:
    stage_files(executor.tunnel, req, compiled, profile, plan)


def require_secrets(profile: ExecutorProfile) -> None:
    """Refuse to start a job whose profile declares a secret this shell does not set. The CLI reports it
    earlier, as a validation error (:meth:`nemotron.profiles.load.Profile.launch_problems`); this guards the
    submission functions when called directly.

    Raises:
        RuntimeFailure: a declared secret's variable is not set.
    """
    missing = profile.missing_secrets()
    if missing:
        raise RuntimeFailure(f"profile {profile.name}: secret(s) {', '.join(missing)} not set in this shell",
                             f"export {missing[0]}=... before starting the job (secrets are read from the environment)")


def sbatch(plan: Any, profile: Profile[SlurmSettings], mode: str, stage_files: Any, make_task: Any,
           dependencies: list[str] | None = None, singleton: bool = False) -> str:
    """Submit one NeMo-Run task to Slurm; returns the Slurm job id.

    ``stage_files(executor)`` puts the job's files in place first; ``make_task()`` returns the NeMo-Run
    task. ``dependencies``: job ids to wait for (``afterok``, cancelled if one fails). ``singleton``:
    start only after every earlier job of the same name and user has ended (``--dependency=singleton``;
    a continuation job of ``run.chain``).

    Raises:
        RuntimeFailure: NeMo-Run errors or sbatch refusing the job (its message kept).
    """
    run = _import_nemo_run()
    root = safe_root(profile)
    sink = io.StringIO()
    executor = exp = None
    fresh = _not_yet_made(profile)
    try:
        with _quiet_stdio(sink):
            executor = _executor(run, plan, profile, mode, root)
            if dependencies or singleton:
                extra = dict(executor.additional_parameters or {})
                extra["dependency"] = ",".join(([f"afterok:{':'.join(dependencies)}"] if dependencies else [])
                                               + (["singleton"] if singleton else []))
                if dependencies:
                    extra["kill_on_invalid_dep"] = "yes"
                executor.additional_parameters = extra
            stage_files(executor)
            # NeMo-Run writes the experiment folder here first; over SSH it then rsyncs it to the cluster's
            # ROOT/experiments, so its local copy must live on this machine, not at the cluster's path

            base = str(home() / "ssh-staging") if profile.settings.over_ssh else root
            with run.Experiment(plan.job_name, id=plan.experiment_id, executor=executor, log_level="ERROR",
                                base_dir=base) as exp:
                exp.add(make_task(), name=task_name(plan))
                exp.run(detach=True)
                handle = exp.jobs[0].handle
    except (Exception, SystemExit) as exc:  # SystemExit: NeMo-Run's SSHTunnel when no login method works
        _remove_unaccepted(executor, exp, profile, plan, sink)
        if not (exp is not None and exp.jobs and _job_id(exp.jobs[0].handle)):
            _remove_made(fresh)
        err = _submission_error(exc, plan, profile)
        if err is exc:
            raise
        raise err from (None if isinstance(exc, SystemExit) else exc)
    job_id = _job_id(handle)
    if job_id is None:  # Slurm may have taken it: its folders stay
        raise RuntimeFailure(f"NeMo-Run returned no Slurm job id for {plan.stage.title} (handle {handle!r})")
    return job_id


def _not_yet_made(profile: ExecutorProfile) -> list[Path]:
    """What a submission through a local tunnel would be the first to make on this machine: the topmost folder of
    the profile's ``job_dir`` that does not exist yet (``/lustre`` for a ``job_dir`` of ``/lustre/my-project/jobs``
    copied to a laptop) and the job root's safe symlink (:func:`safe_root`) when it is not there yet. Over SSH the
    folders are the cluster's: empty."""
    if profile.settings.over_ssh:
        return []
    made: list[Path] = []
    link = Path(safe_root(profile))
    if str(link) != job_root(profile) and not os.path.lexists(link):
        made.append(link)
    top, p = None, Path(job_root(profile))
    while not os.path.lexists(p):
        top = p
        if p.parent == p:
            break
        p = p.parent
    return made + ([top] if top is not None else [])


def _remove_made(made: list[Path]) -> None:
    """After a submission Slurm did not take: remove what it was the first to make (:func:`_not_yet_made`), so that
    nothing is left outside ``$NEMOTRON_HOME`` (a cluster's ``job_dir`` made on this machine would then be measured
    as the cluster's disk by later dry runs). Only the symlink and empty folders are removed (the job's own folders
    are gone by then: :func:`_remove_unaccepted`); anything else left is named on stderr."""
    for path in made:
        if path.is_symlink():
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        if not path.is_dir():
            continue
        for folder, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        if path.exists():
            print(f"[nemotron] Slurm took no job; {path} was made by this submission and is not empty: "
                  "remove it if nothing else uses it", file=sys.stderr)


#: sbatch's words when it cannot reach a Slurm controller (no slurm.conf or configless source, slurmctld down).
_NO_CONTROLLER = ("_establish_config_source", "failed to fetch config", "Could not establish a configuration source",
                  "Unable to contact slurm controller", "slurm_load_ctl_conf", "Unable to establish controller")


def _submission_error(exc: BaseException, plan: Any, profile: Profile[SlurmSettings]) -> BaseException:
    """The one-line error (with its hint) for what :func:`sbatch`'s submission raised: ours as it is, a failed
    SSH login, or NeMo-Run's exception with the line of its message that names the error (sbatch's own)."""
    if isinstance(exc, NemotronError):
        return exc
    if isinstance(exc, SystemExit):
        return RuntimeFailure(f"submission of {plan.stage.title} failed: cannot log in to {profile.settings.user}@"
                              f"{profile.settings.host} (port {profile.settings.port}) over SSH",
                              "check the profile's host, user, port and identity: `ssh -p PORT -i KEY USER@HOST true` "
                              "must work without a password prompt")
    detail = str(exc).strip().splitlines()
    reason = next((ln for ln in reversed(detail) if "error" in ln.lower()), detail[-1] if detail else "")
    if any(word in str(exc) for word in _NO_CONTROLLER):
        where = f"the login node {profile.settings.host}" if profile.settings.over_ssh else "this machine"
        hint = (f"check Slurm on {profile.settings.host} (`sinfo` there must answer)" if profile.settings.over_ssh
                else "submit from the cluster's login node, or give the profile host and user (as env.toml.example's "
                     "[cluster-ssh]) so that sbatch runs there over SSH")
        return RuntimeFailure(f"submission of {plan.stage.title} failed: sbatch on {where} cannot reach a Slurm "
                              f"controller ({reason.strip()})", hint)
    return RuntimeFailure(f"submission of {plan.stage.title} failed: {type(exc).__name__}: {reason}",
                          "run again with --debug for NeMo-Run's full message")


def _job_id(handle: Any) -> str | None:
    """The Slurm job id at the end of a NeMo-Run job handle (``.../<job id>``), else None."""
    tail = str(handle or "").rstrip("/").rsplit("/", 1)[-1]
    return tail if tail.isdigit() else None


def job_folders(profile: ExecutorProfile, plan: Any) -> list[str]:
    """The folders a submission of ``plan`` writes for its job alone, on the cluster: the run folder
    (:func:`remote_run_dir`) and NeMo-Run's experiment folder ``ROOT/experiments/<job name>/<id>``."""
    return [remote_run_dir(profile, plan), f"{safe_root(profile)}/experiments/{plan.job_name}/{plan.experiment_id}"]


def _remove_unaccepted(executor: Any, exp: Any, profile: Profile[SlurmSettings], plan: Any, sink: io.StringIO) -> None:
    """After a failed :func:`sbatch`: remove the folders written for its job (:func:`job_folders`) unless
    Slurm accepted it (NeMo-Run's job has a Slurm job id), through the executor's tunnel as they were
    written, and over SSH NeMo-Run's local staging copy too. Folders of other jobs, the job root and its
    ``runs``/``experiments`` parents stay. A folder that cannot be removed is named on stderr."""
    import shutil


    if executor is None or (exp is not None and exp.jobs and _job_id(exp.jobs[0].handle)):
        return
    folders = job_folders(profile, plan)
    tunnel = executor.tunnel
    if getattr(getattr(tunnel, "session", None), "is_connected", True):  # no SSH login: nothing written there
        try:
            with _quiet_stdio(sink):
                tunnel.run("rm -rf " + " ".join(shlex.quote(f) for f in folders), hide=True)
        except (Exception, SystemExit) as exc:
            where = f" on {profile.settings.host}" if profile.settings.over_ssh else ""
            print(f"[nemotron] Slurm took no job, but its folders{where} could not be removed "
                  f"({type(exc).__name__}): {' '.join(folders)}", file=sys.stderr)
    if profile.settings.over_ssh:
        shutil.rmtree(home() / "ssh-staging" / "experiments" / plan.job_name / plan.experiment_id, ignore_errors=True)


def submit(req: Any, compiled: Any, profile: Profile[SlurmSettings], plan: Any, dependencies: list[str] | None = None,
           chain_ids: list[str] | None = None) -> str:
    """Submit the job to Slurm; returns the Slurm job id. Records the job (see :mod:`nemotron.launch.records`).

    ``dependencies``: Slurm job ids this job must wait for (``afterok``; a failed dependency cancels
    this job: ``--kill-on-invalid-dep=yes``). With ``run.chain = N`` (``plan.chain``), N continuation
    jobs of the same name follow, each with ``--dependency=singleton`` (it starts once every earlier job
    of that name has ended, whatever its state) and its own run folder ``<experiment id>-c<i>``; they
    load from the same checkpoint folder, so each resumes where the one before stopped (a run already
    complete ends at once). ``chain_ids``, when given, receives every job id, first to last, each as soon
    as Slurm accepted it; without it, a failure after the first job was accepted names the jobs left
    queued first (:func:`reporting_queued`). A job that Slurm did not accept leaves no folder behind.

    Raises:
        RuntimeFailure: missing secrets, NeMo-Run errors, or sbatch refusing the job (its message kept).
    """
    require_secrets(profile)
    run = _import_nemo_run()
    root = safe_root(profile)
    ids: list[str] = chain_ids if chain_ids is not None else []
    first = len(ids)
    with contextlib.nullcontext() if chain_ids is not None else reporting_queued(ids, plan.stage.recipe):
        _submit_chain(req, compiled, profile, plan, dependencies, run, root, ids)
    if len(ids) - first > 1:
        print(f"continuation jobs (run.chain={plan.chain}, --dependency=singleton): {', '.join(ids[first + 1:])}",
              file=sys.stderr)
    return ids[first]


def _submit_chain(req: Any, compiled: Any, profile: Profile[SlurmSettings], plan: Any, dependencies: list[str] | None, run: Any,
                  root: str, ids: list[str]) -> None:

    for i in range(1 + plan.chain):
        p = plan if i == 0 else dataclasses.replace(plan, experiment_id=f"{plan.experiment_id}-c{i}")
        # taken before sbatch: Slurm's Submit time of this job is not earlier (the slurm backend's state ties lookups to it)
        submitted = time.time()
        job_id = sbatch(p, profile, req.mode, lambda ex, p=p: _stage_files(ex, req, compiled, profile, p),
                        lambda p=p: _task(run, p, profile), dependencies if i == 0 else None, singleton=i > 0)
        exp_dir = f"{root}/experiments/{p.job_name}/{p.experiment_id}/{task_name(p)}"
        records.save(records.JobRecord(
            experiment_id=p.experiment_id, job_id=job_id, stage=p.stage.name, title=p.stage.title,
            profile=profile.name, env_file=str(profile.source), run_dir=remote_run_dir(profile, p), log_dir=exp_dir,
            job_name=f"{p.stage.recipe}-{task_name(p)}", tunnel=profile.settings.tunnel,
            host=profile.settings.host, user=profile.settings.user,
            port=profile.settings.port, identity=profile.settings.identity,
            outputs=recorded_outputs(compiled, profile, getattr(req, "latest", False)), config_hash=compiled.config_hash(), config=Path(p.config_name).stem,
            submitted=submitted,
            # sbatch runs in this folder through a local tunnel (Slurm's WorkDir); over ssh it is the remote side's
            work_dir=None if profile.settings.over_ssh else os.getcwd(),
            executor=p.executor,
        ))
        ids.append(job_id)


@contextlib.contextmanager
def reporting_queued(ids: list[str], recipe: str) -> Any:
    """Around submissions that append each accepted Slurm job id to ``ids`` (a ``run.chain``, a ``pipe``):
    when the block fails or is interrupted after some were accepted, say on stderr which jobs stay
    queued and how to cancel them, then let the error go on (its own line and hint unchanged)."""
    try:
        yield
    except BaseException:
        if ids:
            print(f"[nemotron] submitted before the failure and still queued: Slurm job(s) {', '.join(ids)}; "
                  f"cancel them with: {'; '.join(f'nemotron {recipe} cancel {i}' for i in ids)}", file=sys.stderr)
        raise
