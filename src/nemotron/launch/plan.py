"""Job planning: from a compiled config and a profile to what would run. Pure — no I/O, no imports
of heavy frameworks — so ``--dry-run`` and submission share it."""

from __future__ import annotations

import importlib
import re
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nemotron.config.compile import Compiled
from nemotron.config.images import image_table
from nemotron.config.paths import stages_dir
from nemotron.config.registry import Stage
from nemotron.config.tree import get
from nemotron.errors import ConfigError

if TYPE_CHECKING:  # annotations only: pydantic is loaded with a profile, not with this module
    from nemotron.profiles.profile import ExecutorProfile

#: GPUs per node assumed for a GPU stage when no profile says otherwise (an 8-GPU HGX/DGX node).
DEFAULT_GPUS_PER_NODE = 8


def safe_name(text: str) -> str:
    """A job or path name safe for Slurm and file systems: ``[A-Za-z0-9._-]`` only, no leading dot."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "job"


#: The most characters of a config's name that go into a derived name (experiment id, Slurm job name). Those names
#: become file and folder names (the run folder, NeMo-Run's ``sbatch_<job name>_<id>.out``), which Linux file
#: systems limit to 255 bytes each (NAME_MAX); a longer name is cut and a hash of the whole name appended.
CONFIG_LABEL_MAX = 40


def config_label(config_name: str) -> str:
    """The ``-c`` value as it appears in derived names: its file stem, :func:`safe_name`-d, at most
    :data:`CONFIG_LABEL_MAX` characters (a longer one: its first 31 characters, ``-`` and 8 hex digits of the
    SHA-1 of the whole stem, so two long names that share a beginning stay distinct)."""
    import hashlib

    stem = Path(config_name).stem
    label = safe_name(stem)
    if len(label) <= CONFIG_LABEL_MAX:
        return label
    return f"{label[:CONFIG_LABEL_MAX - 9].rstrip('-.')}-{hashlib.sha1(stem.encode()).hexdigest()[:8]}"


def new_experiment_id(stage: Stage, config_name: str) -> str:
    """``ultra3-pretrain-tiny-20261130-051230-3f9a1c`` — unique even for two submissions of the same
    stage in the same second (48 random bits). The config's part is :func:`config_label` (bounded length)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return safe_name(f"{stage.recipe}-{stage.name}-{config_label(config_name)}-{stamp}-{secrets.token_hex(3)}")


@dataclass(frozen=True)
class JobPlan:
    """What would run.

    Attributes:
        stage: the stage.
        config_name: the ``-c`` value.
        profile: profile name, or None to run directly on this machine.
        executor: ``"direct"`` (no profile), ``"local"``, ``"slurm"`` or ``"ray"``.
        nodes: nodes requested (``run.env.nodes``).
        gpus_per_node: GPUs per node (config, else profile, else 8 for a GPU stage; 0 for a :func:`cpu_only` stage).
        world_size: processes of the job: nodes × GPUs per node for ``torchrun`` stages (one process
            per GPU, after NeMo-Run's torchrun rewrite of the task counts), else ``nodes``.
        launch: ``torchrun``, ``ray`` or ``python`` (the stage's, but ``python`` for a :func:`cpu_only` torchrun stage).
        image: container image URI, or the squashfs file the profile maps it to; None without containers.
        image_key: key in ``stages/images.toml``.
        entry: absolute path of the stage's runtime entry script on this machine.
        experiment_id: unique id of this submission.
        job_name: Slurm job name (sanitised).
        requeue: ``run.requeue`` of a resumable (training) stage: a job that saved on the warning signal
            requeues itself.
        signal_before_s: ``run.signal_before_s``: seconds before the time limit at which Slurm sends SIGTERM
            (``sbatch --signal=TERM@N``); None = no warning signal.
        chain: ``run.chain``: continuation jobs submitted behind this one (``--dependency=singleton``).
    """

    stage: Stage
    config_name: str
    profile: str | None
    executor: str
    nodes: int
    gpus_per_node: int
    world_size: int
    launch: str
    image: str | None
    image_key: str
    entry: Path
    experiment_id: str
    job_name: str
    requeue: bool = False
    signal_before_s: int | None = None
    chain: int = 0

    def command(self, config_path: str | Path, python: str | None = None) -> list[str]:
        """The command line that runs the stage on one node with ``config_path`` as its train.yaml."""
        py = python or sys.executable
        entry = str(self.entry)
        if self.launch == "torchrun" and self.gpus_per_node > 1:
            return [py, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(self.gpus_per_node),
                    entry, "--config", str(config_path)]
        return [py, entry, "--config", str(config_path)]


def cpu_only(stage: Stage, cfg: dict[str, Any]) -> bool:
    """Whether the stage, with its compiled config ``cfg``, uses no GPU: a stage the registry marks ``gpu=False``
    (the data prep stages, which run on Ray on CPUs), or a conversion with ``convert.device: cpu`` (one process
    holding the model in host RAM: Megatron-Bridge's ``AutoBridge.import_ckpt`` / ``export_ckpt``). Such a job
    asks Slurm for no GPU (a GPU request holds idle GPUs, and a CPU partition refuses it)."""
    if not stage.gpu:
        return True
    key = stage.family.cpu_key  # convert.device
    return bool(key) and str(get(cfg, key) or "").lower() == "cpu"


def plan_job(compiled: Compiled, profile: ExecutorProfile | None, experiment_id: str | None = None) -> JobPlan:
    """Plan the job for ``compiled`` on ``profile`` (None = directly on this machine). A :func:`cpu_only` stage
    gets no GPUs whatever the profile's node shape (or the config's ``run.env.gpus_per_node``, which describes
    its GPU layout), and a ``torchrun`` stage among them one process (launch ``python``).

    Raises:
        ConfigError: when the stage's image key is not in ``stages/images.toml``.
    """
    stage = compiled.stage
    run = compiled.config.get("run", {})
    env = run.get("env", {})
    nodes = int(env.get("nodes") or 1)
    gpn = env.get("gpus_per_node")
    if gpn is None and profile is not None:
        gpn = profile.gpus_per_node
    if gpn is None:
        gpn = DEFAULT_GPUS_PER_NODE if stage.gpu else 0
    launch = stage.launch
    if cpu_only(stage, compiled.config):
        gpn = 0
        launch = "python" if launch == "torchrun" else launch
    gpn = int(gpn)
    table = image_table()
    if stage.image not in table:
        raise ConfigError(f"stage {stage.name}: image {stage.image!r} is not in stages/images.toml",
                          f"images: {', '.join(table)}")
    image = profile.settings.image_for(stage.image, table[stage.image]["image"]) if profile is not None else None
    world = nodes * gpn if launch == "torchrun" and gpn else nodes
    eid = experiment_id or new_experiment_id(stage, compiled.config_name)
    return JobPlan(
        stage=stage, config_name=compiled.config_name, profile=profile.name if profile is not None else None,
        executor=profile.executor if profile is not None else "direct", nodes=nodes, gpus_per_node=gpn, world_size=world,
        launch=launch, image=image, image_key=stage.image, entry=(stages_dir() / stage.entry).resolve(),
        experiment_id=eid, job_name=safe_name(f"{stage.recipe}-{stage.name}-{config_label(compiled.config_name)}"),
        requeue=bool(run.get("requeue", False)), signal_before_s=_positive(run, "signal_before_s"),
        chain=_positive(run, "chain") or 0,
    )


def _positive(run: dict[str, Any], key: str) -> int | None:
    """``run.<key>`` as a whole number >= 0 (None when unset or 0). A value that is not one is planned as None:
    validation reports it with every other problem (``run-keys``), and nothing is submitted while it stands."""
    value = run.get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value or None


def planned_outputs(compiled: Compiled) -> dict[str, dict[str, Any]]:
    """The artifact(s) the stage will produce, with the fields its registry entry declares, filled
    from its compiled config: ``{"pretrain-data": {"path": "/abs/out", "blend_path": "/abs/out/blend.json"}}``.
    A config that sets ``output_artifact`` names its artifact itself (``rlvr -c teacher-reasoning``
    records ``teacher-reasoning``, which the MOPD panel takes). A writer's path function may return several
    artifacts, ``{name: fields}`` (``data prep rl -c ultra-blends``: ``rl-blend-<stage>`` per stage file).

    A template ``"{key?}"`` (the whole field) is optional: the field is left out when ``key`` is unset.

    Raises:
        ConfigError: when a template names a key the config does not have.
    """
    fields: dict[str, Any] = {}
    if compiled.stage.output_files:  # the writer's own path function (a data stage's version folder)
        module, func = compiled.stage.output_files.split(":")
        written = getattr(importlib.import_module(module), func)(compiled.config)
        if written and all(isinstance(v, dict) for v in written.values()):
            return {name: dict(v) for name, v in written.items()}  # several artifacts, each its own fields
        fields.update(written)
    for name, template in compiled.stage.outputs:
        optional = re.fullmatch(r"\{([^{}]+)\?\}", template)
        if optional:  # "{key?}": the field is left out when the config leaves the key unset
            if compiled.get(optional.group(1)) not in (None, ""):
                fields[name] = str(compiled.get(optional.group(1)))
            continue

        def value(m: re.Match, name: str = name) -> str:
            v = compiled.get(m.group(1))
            if v is None:
                raise ConfigError(f"stage {compiled.stage.name}: its output field {name!r} needs '{m.group(1)}', "
                                  "which the config does not set")
            return str(v)

        fields[name] = re.sub(r"\{([^{}]+)\}", value, template)
    named = compiled.get("output_artifact")
    names = (str(named),) if isinstance(named, str) and named else compiled.stage.produces
    return {artifact: dict(fields) for artifact in names}


def recorded_outputs(compiled: Compiled, profile: ExecutorProfile | None, promoted: bool = False) -> dict[str, dict[str, Any]]:
    """:func:`planned_outputs` with the fields that scope each record (:func:`nemotron.config.artifacts.scope_fields`:
    ``site`` where the job runs, ``scratch`` when its path lies outside the default output folders of the job's
    environment; ``promoted``: ``--latest`` asked it to be the latest all the same): what a run, a Slurm job, a Ray
    job and a local job record when they end."""
    import os

    from nemotron.config import artifacts

    from nemotron.profiles.profile import storage_site

    executor, host = storage_site(profile)
    env = {**os.environ, **(profile.storage_env() if profile is not None else {})}
    return {name: {**fields, **artifacts.scope_fields(executor, host, env, fields.get("path"), promoted)}
            for name, fields in planned_outputs(compiled).items()}
