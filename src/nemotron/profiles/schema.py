"""The typed schema of a profile (one pydantic model per executor) and the value helpers it needs (secrets, Slurm times)."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import typing
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nemotron.config.paths import stages_dir

from nemotron.profiles.discover import ENV_FILE_NAME, ENV_FILE_VAR, SECTIONS  # noqa: F401 (defined there: stdlib only)


GPU_ARCHS = ("ampere", "hopper", "blackwell")


#: GPU model -> (architecture, default memory in GB). An explicit ``gpu_memory`` wins (e.g. A100 40 GB).
GPU_MODELS: dict[str, tuple[str, float]] = {
    "A100": ("ampere", 80.0), "H100": ("hopper", 80.0), "H200": ("hopper", 141.0),
    "B200": ("blackwell", 180.0), "GB200": ("blackwell", 186.0),
    "B300": ("blackwell", 288.0), "GB300": ("blackwell", 288.0),
}


#: The most GPUs a Slurm node can offer as ``gres/gpu``: 8 GPUs split into 7 MIG instances each (56; the
#: largest whole-GPU node, NVIDIA's DGX-2 / HGX-2, has 16). ``gpus_per_node`` above it is a typo, not a node.
MAX_GPUS_PER_NODE = 64


#: Slurm adds a time limit's fields up in a C ``int`` of seconds (``time_str2secs`` in Slurm's
#: ``src/common/parse_time.c``): a longer limit wraps around instead of being refused.
MAX_SLURM_TIME_S = 2**31 - 1


DEFAULT_JOB_DIR = "$NEMOTRON_HOME/jobs (default ~/.nemotron/jobs)"


#: Profile storage keys and the environment variables they become, in the job and while a config is
#: compiled for the profile (stage configs read them as ``${oc.env:NEMOTRON_CKPT_ROOT,...}``).
STORAGE_ENV = {"data_root": "NEMOTRON_DATA_DIR", "checkpoint_root": "NEMOTRON_CKPT_ROOT",
               "index_cache_dir": "NEMOTRON_INDEX_CACHE", "hf_home": "HF_HOME"}


REDACTED = "***"


SLURM_TIME_FORMS = ("minutes (30), MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 04:00:00, 1-00:00:00), "
                    "or 0 / UNLIMITED for no limit")


DOCS = "docs/profiles.md"


_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_.-])(?:token|secret|password|passwd|credentials?)(?:$|[_.-])|api[_-]?key|private[_-]?key"
)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


#: Variables every job sets for itself (nemotron.launch.submit.job_env_vars, the requeue marker of
#: nemotron.runtime.dispatch): a profile's value could not reach the job, so ``env_vars`` refuses them by name.
JOB_SET_VARS = ("NEMOTRON_EXPERIMENT_ID", "NEMOTRON_RUN_DIR", "NEMOTRON_SLURM_REQUEUE", "NEMOTRON_REQUEUE_MARKER",
                "NEMOTRON_RAY_SRUN_MPI")


#: Variables a Slurm job script sets itself (the Ray template: its cluster and log folders, the address of the
#: job's own Ray cluster), refused by name in a Slurm profile's ``env_vars``.
SLURM_JOB_SET_VARS = ("CLUSTER_DIR", "LOG_DIR", "RAY_ADDRESS")


_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


_MOUNT = re.compile(r"[^:\s]+:/[^:\s]*(?::[A-Za-z+,]+)?")


_ADDRESS = re.compile(r"(?:ray|https?)://[^\s/:]+(?::\d{1,5})?/?")


_MEM = re.compile(r"\d+[KMGTkmgt]?")


_DEFAULT, _OVERRIDE, _DERIVED = "default", "override", "derived from gpu"


def is_secret_name(name: str) -> bool:
    """True when a variable name looks like it holds a credential.

    Matches a whole ``_``/``-``/``.``-separated word ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``,
    ``CREDENTIAL(S)``, or ``API_KEY`` / ``PRIVATE_KEY`` anywhere (case-insensitive): ``HF_TOKEN`` and
    ``WANDB_API_KEY`` are secret, ``TOKENIZERS_PARALLELISM`` and ``MAX_TOKENS`` are not.
    """
    return bool(_SECRET_NAME.search(name))


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret value (length >= 4) in ``text`` with ``"***"``.

    Longer values are replaced first, so a secret containing another one is hidden whole. Shorter
    values are skipped: replacing ``"1"`` everywhere would garble the text and hide nothing.
    """
    for value in sorted({s for s in secrets if isinstance(s, str) and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def parse_slurm_time(text: str | int) -> int | None:
    """Seconds in a Slurm time limit, as ``sbatch --time`` reads it; ``None`` for no limit.

    Accepted (Slurm's documented forms, ``man sbatch`` ``--time``; checked against ``sbatch --test-only``
    of Slurm 22.05): minutes as an integer (``30``, also a TOML/YAML int) or the strings ``MM``,
    ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``. Like Slurm, a field may exceed its
    clock range (``90:00`` = 90 minutes, ``1-36`` = 60 hours). ``0`` (any all-zero form), ``-1``,
    ``INFINITE`` and ``UNLIMITED`` (any case) mean no time limit (``None``); the partition's
    ``MaxTime`` still applies. Slurm's resolution is one minute (it rounds seconds up); the seconds
    are kept here because the warning signal (``run.signal_before_s``) is given in seconds. A field past
    its clock range is accepted as sbatch accepts it (``25:99`` = 26 min 39 s, run as 27 minutes).

    Raises:
        ValueError: anything else (``4h``, ``1.5``, ``-5``, ``1-``, a bool), or a limit longer than
            :data:`MAX_SLURM_TIME_S` (Slurm would wrap it around); the message lists the accepted forms.
    """
    bad = ValueError(f"{text!r} is not a Slurm time limit; use {SLURM_TIME_FORMS}")
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise bad
    if isinstance(text, int):
        text = str(text)
    if text == "-1" or text.upper() in ("INFINITE", "UNLIMITED"):
        return None
    m = _TIME.fullmatch(text)
    if not m:
        raise bad
    days, *rest = m.groups()
    nums = [int(x) for x in rest if x is not None]
    if days is not None:  # D-HH[:MM[:SS]]
        h, mi, sec = ([*nums, 0, 0])[:3]
        total = ((int(days) * 24 + h) * 60 + mi) * 60 + sec
    elif len(nums) == 1:  # MM
        total = nums[0] * 60
    elif len(nums) == 2:  # MM:SS
        total = nums[0] * 60 + nums[1]
    else:  # HH:MM:SS
        total = (nums[0] * 60 + nums[1]) * 60 + nums[2]
    if total > MAX_SLURM_TIME_S:
        raise ValueError(f"{text!r} is {total // 86400} days, longer than Slurm can hold "
                         f"({MAX_SLURM_TIME_S // 86400} days); use UNLIMITED for no limit")
    return total or None


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class SecretSpec(_Strict):
    """Where one secret comes from: an inline ``value`` or the submitting shell's variable ``env``."""

    value: str | None = None
    env: str | None = None

    def __repr_args__(self):  # never show an inline value
        yield "value", None if self.value is None else REDACTED
        yield "env", self.env


class _Common(_Strict):
    """What every executor's profile has. The class attributes and methods say what the executor is, so that code
    outside its backend (:mod:`nemotron.launch.backends`) asks them, never the executor's name nor a key another
    executor's model has (:attr:`on_this_machine`, :meth:`storage_host`, :meth:`uses_container`, :attr:`over_ssh`,
    :attr:`queues_dependent_jobs`). Each executor's model is one subclass with ``executor: Literal["<name>"]``;
    :data:`ProfileSettings` is their union and :data:`_MODELS` finds a model by its name."""

    #: The job runs on this machine and inherits this shell's environment (its files are this machine's).
    on_this_machine: ClassVar[bool] = False
    #: Jobs of a ``pipe --run/--batch`` can be queued at once, each waiting for the one before (Slurm dependencies).
    queues_dependent_jobs: ClassVar[bool] = False

    executor: str
    env_vars: dict[str, str] = {}
    secrets: dict[str, SecretSpec] = {}
    job_dir: str | None = None
    gpus_per_node: int | None = Field(None, ge=0, le=MAX_GPUS_PER_NODE)
    gpu: str | None = None
    gpu_arch: Literal["ampere", "hopper", "blackwell"] | None = None
    gpu_memory: float | None = Field(None, gt=0)
    host_memory: float | None = Field(None, gt=0)  # GB (10^9 bytes) of RAM on each node: host_memory_bytes
    # shared storage and caches (visible from login and compute nodes); see STORAGE_ENV
    data_root: str | None = None
    checkpoint_root: str | None = None
    index_cache_dir: str | None = None
    hf_home: str | None = None
    hf_offline: bool = False

    def storage_host(self) -> str | None:
        """Where the profile's jobs keep their files, for artifact scopes; None: on this machine's file system."""
        return None

    def storage(self) -> dict[str, str | None]:
        """The shared-storage keys (those of :data:`STORAGE_ENV`, in its order) and their values (None: unset)."""
        return {"data_root": self.data_root, "checkpoint_root": self.checkpoint_root,
                "index_cache_dir": self.index_cache_dir, "hf_home": self.hf_home}

    def uses_container(self) -> bool:
        """Whether the profile's jobs run in the stage's container image (never on this machine nor on a Ray
        cluster, which runs its own image)."""
        return False

    def image_for(self, key: str, default: str) -> str | None:
        """The container image the profile's jobs of a stage with image ``key`` (a ``stages/images.toml`` name) run
        in, ``default`` being that table's; None when its jobs run in no container of ours (:meth:`uses_container`)."""
        return None

    @property
    def over_ssh(self) -> bool:
        """True when the job's files are reached over SSH (a Slurm profile with ``tunnel = "ssh"``): paths in the
        config are the cluster's, not this machine's."""
        return False

    @property
    def python_command(self) -> str | None:
        """The Python the profile names for its jobs (``python`` of a Slurm or Ray profile); None: the executor's
        default."""
        return None

    def hidden_values(self) -> dict[str, str]:
        """Secret values, name -> value: secret-named ``env_vars``, inline secrets, and those read from
        ``os.environ`` now (an unset variable is left out)."""
        out = {k: v for k, v in self.env_vars.items() if is_secret_name(k)}
        for key, spec in self.secrets.items():
            value = spec.value if spec.value is not None else os.environ.get(spec.env or "")
            if value is not None:
                out[key] = value
        return out

    def __repr_args__(self):  # secret-named env vars stay hidden, whatever their length
        for key, value in super().__repr_args__():
            if key == "env_vars":
                value = {k: REDACTED if is_secret_name(k) else v for k, v in value.items()}
            yield key, value

    def __repr__(self) -> str:  # and a secret value copied into any other key is scrubbed
        return redact_text(super().__repr__(), self.hidden_values().values())

    def __str__(self) -> str:
        return redact_text(super().__str__(), self.hidden_values().values())

    @field_validator("env_vars", "secrets")
    @classmethod
    def _env_names(cls, value: dict) -> dict:
        bad = [k for k in value if not _ENV_NAME.fullmatch(k)]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))}: not a valid environment variable name")
        _refuse_job_set(value, JOB_SET_VARS, "every job sets it itself")
        path = value.get("PATH")
        if isinstance(path, str) and "$PATH" in path.split(":")[:-1]:
            raise ValueError(f"PATH = {path!r}: $PATH may only be its last entry (the job's folders come first: "
                             "'/opt/tools/bin:$PATH'), or leave $PATH out to replace it")
        return value

    @field_validator("gpu")
    @classmethod
    def _gpu_model(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.upper() not in GPU_MODELS:
            raise ValueError(f"unknown GPU model {value!r}; known: {', '.join(GPU_MODELS)} (or set gpu_arch and gpu_memory)")
        return value.upper()


class LocalSettings(_Common):
    """``executor = "local"``: this machine; optional node shape, env_vars, secrets, job_dir."""

    on_this_machine: ClassVar[bool] = True
    executor: Literal["local"]

    def where(self) -> str:
        """Where the profile's jobs run, in words (the ``profiles`` table)."""
        return "this machine"


class RaySettings(_Common):
    """``executor = "ray"``: an existing Ray cluster at ``address`` (``ray://host:10001``, ``http://host:8265``)."""

    executor: Literal["ray"]
    address: str
    python: str = "python"  # the Python the job runs with on the cluster's nodes

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        if value is None or not _ADDRESS.fullmatch(value):
            raise ValueError(f"{value!r} is not a Ray address; use ray://HOST:10001 or http://HOST:8265")
        return value

    def where(self) -> str:
        return self.address

    def storage_host(self) -> str | None:
        """The cluster's ``address``: its jobs keep their files on its nodes."""
        return self.address

    @property
    def python_command(self) -> str | None:
        return self.python


class SlurmSettings(_Common):
    """``executor = "slurm"``: sbatch/srun through NeMo-Run, from this machine or over SSH."""

    queues_dependent_jobs: ClassVar[bool] = True
    executor: Literal["slurm"]
    python: str | None = None  # the job's Python: default "python" in a container, this Python without one
    account: str | None = None
    partition: str | None = None
    run_partition: str | None = None
    batch_partition: str | None = None
    qos: str | None = None
    reservation: str | None = None
    time: str | None = None
    exclusive: bool | None = None
    cpus_per_node: int | None = Field(None, ge=1)
    mem: Any = None
    images: dict[str, str] = {}
    image_cache: str | None = None  # folder for images built by `nemotron kit slurm build`
    container: bool = True
    # srun's --mpi for the steps of a Ray stage's job (`ray start`, the driver): Ray needs no MPI, and "none" works
    # on every cluster; NeMo-Run's Ray template would ask for pmix, which a cluster without it refuses after queueing
    ray_srun_mpi: str = Field("none", pattern=r"^[A-Za-z0-9_]+$")
    mounts: list[str] = []
    setup: list[str] = []
    tunnel: Literal["local", "ssh"] = "local"
    # the seed profile's keys, one meaning each (the stage owns its node count and its launch; docs/profiles.md):
    nodes: int | None = Field(None, ge=1)  # the most nodes a stage on this profile may use
    ntasks_per_node: int | None = Field(None, ge=1)  # processes per node the stage's launch must start
    host: str | None = None
    user: str | None = None
    identity: str | None = None
    port: int | None = Field(None, ge=1, le=65535)

    def where(self) -> str:
        where = self.partition or "-"
        return f"{where} via ssh {self.host}" if self.tunnel == "ssh" else where

    def storage_host(self) -> str | None:
        """The login ``host`` (None through a local tunnel: the cluster shares this machine's file system)."""
        return self.host

    def uses_container(self) -> bool:
        """True unless ``container = false``."""
        return self.container

    def image_for(self, key: str, default: str) -> str | None:
        """``images.<key>`` when the profile names one (a local ``.sqsh``, another tag), else ``default``; None with
        ``container = false``."""
        return self.images.get(key, default) if self.container else None

    @property
    def over_ssh(self) -> bool:
        return self.tunnel == "ssh"

    @property
    def python_command(self) -> str | None:
        return self.python

    @property
    def time_seconds(self) -> int | None:
        """The time limit in seconds (``None`` when unset or unlimited: ``0``, ``UNLIMITED``)."""
        return parse_slurm_time(self.time) if self.time else None

    def partition_for(self, mode: str) -> str | None:
        """Partition for ``--run`` (``run_partition``) or ``--batch`` (``batch_partition``), else ``partition``."""
        own = {"run": self.run_partition, "batch": self.batch_partition}.get(mode)
        return own or self.partition

    @field_validator("env_vars")
    @classmethod
    def _slurm_env_names(cls, value: dict) -> dict:
        _refuse_job_set(value, SLURM_JOB_SET_VARS, "the Slurm job script sets it itself (its Ray cluster's)")
        return value

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, value: Any) -> str | None:
        """Any form ``sbatch --time`` takes (:func:`parse_slurm_time`); an integer is minutes, kept as its text."""
        if value is not None:
            parse_slurm_time(value)
            value = str(value)
        return value

    @field_validator("mem")
    @classmethod
    def _mem(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"expected a size string like '512G' or an integer in MB, got {value!r}")
        if (isinstance(value, int) and value < 0) or (isinstance(value, str) and not _MEM.fullmatch(value)):
            raise ValueError(f"{value!r} is not a Slurm memory size; use e.g. '512G', '500000M' or 0 (all of it)")
        return value

    @field_validator("data_root", "checkpoint_root", "index_cache_dir", "hf_home", "image_cache")
    @classmethod
    def _node_path(cls, value: str | None, info: Any) -> str | None:
        """A node-side folder (:func:`node_path_problem`); ``image_cache`` also becomes part of an unquoted
        ``--container-image``, so it must have no shell characters at all."""
        if value is not None:
            problem = node_path_problem(value)
            unsafe = _unsafe_chars(value.replace(":", "")) if info.field_name == "image_cache" else ""
            if problem:
                raise ValueError(f"{value!r}: {problem}")
            if unsafe:
                raise ValueError(f"{value!r}: contains {unsafe}; its images reach the job's srun line as "
                                 "--container-image, which NeMo-Run writes unquoted; use a path without them "
                                 "(e.g. a symlink)")
        return value

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for mount in value:
            src = mount.split(":", 1)[0]
            if ":" in mount and not src.startswith(("/", "~", "$")):
                raise ValueError(f"{mount!r}: its source {src!r} is a relative path (the container runtime on the node "
                                 "would not find it); give the absolute path on the node, e.g. '/lustre:/lustre'")
            unsafe = _unsafe_chars(mount.replace(":", ""))
            if unsafe:
                raise ValueError(f"{mount!r}: contains {unsafe}; NeMo-Run writes container mounts into the job's srun "
                                 "line unquoted (and pyxis splits them at commas), so the job would not start; mount a "
                                 "folder whose path has none, e.g. a parent folder or a symlink to it")
            if not _MOUNT.fullmatch(mount):
                raise ValueError(f"{mount!r}: a mount is 'SRC:/DST' or 'SRC:/DST:FLAGS' (e.g. '/lustre:/lustre:ro'), "
                                 "DST an absolute path")
        return value

    @field_validator("images")
    @classmethod
    def _images(cls, value: dict[str, str]) -> dict[str, str]:
        known = _image_names()
        for name, path in value.items():
            if known and name not in known:
                raise ValueError(f"unknown image {name!r}{_suggest(name, known)}; known images: {', '.join(known)}")
            if not path.strip():
                raise ValueError(f"image {name!r} has an empty path")
            unsafe = _unsafe_chars(path)
            if unsafe:
                raise ValueError(f"image {name!r} = {path!r}: contains {unsafe}; NeMo-Run writes --container-image "
                                 "into the job's srun line unquoted; use a path without them (e.g. a symlink)")
        return value


#: Any executor's profile model: the union a profile's table parses into (one member per executor). A new executor's
#: model is added here, and only here: :data:`_MODELS` and :data:`EXECUTORS` are read from it.
ProfileSettings = SlurmSettings | LocalSettings | RaySettings


def _executor_name(model: type[_Common]) -> str:
    """The name in ``executor: Literal["<name>"]`` of an executor's model."""
    return typing.get_args(model.model_fields["executor"].annotation)[0]


#: Executor name -> its profile model, in the order of :data:`ProfileSettings`.
_MODELS: dict[str, type[_Common]] = {_executor_name(m): m for m in typing.get_args(ProfileSettings)}


#: The executors a profile may name (``executor = "..."``).
EXECUTORS = tuple(_MODELS)


def _model(executor: str | None) -> type[_Common] | None:
    """The profile model of ``executor`` (a profile's or a plan's executor name); None for ``direct`` (no profile)
    and None itself."""
    return _MODELS.get(executor) if executor not in (None, "", "direct") else None


def on_this_machine(executor: str | None) -> bool:
    """Whether a job of ``executor`` (a plan's ``executor``, a profile's; None or ``direct``: no profile) runs on
    this machine, in this shell's environment, with this machine's files and GPUs."""
    if executor in (None, "", "direct"):
        return True
    model = _MODELS.get(executor)
    return model is not None and model.on_this_machine


def queues_dependent_jobs(executor: str | None) -> bool:
    """Whether ``executor`` can queue a ``pipe``'s jobs at once, each waiting for the one before (Slurm's
    ``--dependency``)."""
    model = _model(executor)
    return model is not None and model.queues_dependent_jobs


_ORDER = ("executor", "account", "partition", "run_partition", "batch_partition", "qos", "reservation", "time",
          "exclusive", "address", "tunnel", "host", "user", "identity", "port", "job_dir", "nodes", "ntasks_per_node",
          "gpus_per_node", "gpu",
          "gpu_arch", "gpu_memory", "host_memory", "cpus_per_node", "mem", "container", "ray_srun_mpi", "images", "mounts", "setup",
          "env_vars")


_PARSED = {"nodes", "ntasks_per_node", "gpus_per_node", "gpu_memory", "host_memory", "cpus_per_node", "exclusive", "container", "port", "mem", "hf_offline",
           "mounts", "setup", "images", "env_vars"}


_SHELL_SAFE = re.compile(r"[A-Za-z0-9._/+@%=-]+")


def _refuse_job_set(env_vars: dict, names: Iterable[str], why: str) -> None:
    """Raise ``ValueError`` naming the first variable of ``env_vars`` in ``names``, which the job sets itself."""
    taken = [k for k in env_vars if k in names]
    if taken:
        raise ValueError(f"{taken[0]}: cannot be set in a profile: {why}, so the profile's value would never reach "
                         "the job; remove it")


def _unsafe_chars(text: str) -> str:
    """The characters of ``text`` a shell line or a pyxis mount list would split or expand, described
    (``"a space, ','"``); empty when there is none."""
    found = sorted({c for c in text if not re.fullmatch(r"[A-Za-z0-9._/+@%=:-]", c)})
    return ", ".join("a space" if c == " " else "a newline" if c == "\n" else repr(c) for c in found)


def node_path_problem(path: str) -> str | None:
    """Why ``path`` (a Slurm profile's node-side folder: ``data_root``, ``checkpoint_root``, ``index_cache_dir``,
    ``hf_home``, ``image_cache``) cannot be given to a job, or None. Each becomes a container mount
    ``PATH:PATH`` of the job's srun line and an ``export`` of its script, both shell-quoted
    (:func:`nemotron.launch.submit.container_mounts`, :func:`nemotron.launch.submit.shell_word`), so spaces,
    ``$`` and backquotes reach the job as written; refused: a relative path (read from the job's working folder),
    a leading ``~`` or ``$VAR`` (quoted, never expanded), ``:`` and ``,`` (pyxis reads a mount as
    ``SRC:DST[:FLAGS]`` and splits the mount list at commas) and control characters (a newline ends the line)."""
    if path.startswith("~"):
        return ("starts with '~', which the job never expands (the job script quotes every path, and a container "
                "mount takes no '~'): give the absolute path the nodes see, e.g. '/home/me/data'")
    if path.startswith("$"):
        return ("starts with a shell variable, which the job never expands (the job script quotes every path): "
                "give the absolute path the nodes see, e.g. '/lustre/my-project/data'")
    if not path.startswith("/"):
        return ("a relative path; the job would read it from its own working folder on the node (inside its "
                "container), not from shared storage: give the absolute path the nodes see, e.g. "
                "'/lustre/my-project/checkpoints'")
    bad = sorted({c for c in path if c in ":," or ord(c) < 32 or ord(c) == 127})
    if bad:
        names = ", ".join(dict.fromkeys("a newline" if c == "\n" else "a control character" if c not in ":,"
                                        else repr(c) for c in bad))
        return (f"contains {names}; the folder is mounted into the job's container as 'PATH:PATH', and pyxis "
                "reads a mount as SRC:DST[:FLAGS] and splits the mount list at commas (a control character "
                "breaks the job script's line), so it cannot be mounted: use a path without them (e.g. a symlink)")
    return None


def shell_safe_root(path: str) -> str:
    """``path`` (a job root) as a shell line and a container mount list can carry it unquoted: itself when it
    has only ``[A-Za-z0-9._/+@%=-]``, else ``<nearest safe ancestor>/.nemotron-jobs-<hash>``, a symlink to it that
    submission makes (NeMo-Run puts paths into shell commands unquoted)."""
    import hashlib

    root = path.rstrip("/") or "/"
    if _SHELL_SAFE.fullmatch(root):
        return root
    parent = root
    while parent not in ("", "/") and not _SHELL_SAFE.fullmatch(parent):
        # a relative path's first component has no parent in the string: the working folder ("")
        parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
    if parent == "" and root.startswith("/"):
        parent = "/"
    digest = hashlib.sha1(root.encode()).hexdigest()[:10]
    return f"{parent.rstrip('/')}/.nemotron-jobs-{digest}" if parent else f".nemotron-jobs-{digest}"


def _image_names() -> list[str]:
    """Image keys from ``stages/images.toml``; empty (no check) when the table cannot be read."""
    try:

        return list(tomllib.loads((stages_dir() / "images.toml").read_text(encoding="utf-8")))
    except Exception:  # an image-name check is a courtesy; a broken install is reported elsewhere
        return []


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: Time limit NeMo-Run's job gets when the profile sets none.
DEFAULT_TIME = "01:00:00"
