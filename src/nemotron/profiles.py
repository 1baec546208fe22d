"""Execution profiles from ``env.toml``: discovery, inheritance, typed validation, secrets, display.

A profile describes *where* a stage runs (cluster logistics and node shape); it never changes *what*
runs. Each top-level table of ``env.toml`` is a profile, except the settings sections ``[wandb]`` and
``[artifacts]``. A profile may ``extends = "parent"``: tables are merged key by key (child wins), any
other value (lists included) is replaced whole. Every problem is a :class:`~nemotron.errors.ConfigError`
naming the file, the profile and the key. Importing this module pulls in only the standard library,
pydantic and yaml; rich is imported inside the display functions.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nemotron.errors import ConfigError

ENV_FILE_VAR = "NEMOTRON_ENV_FILE"
ENV_FILE_NAME = "env.toml"
SECTIONS = ("wandb", "artifacts")
EXECUTORS = ("slurm", "local", "ray")
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
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_MOUNT = re.compile(r"[^:\s]+:/[^:\s]*(?::[A-Za-z+,]+)?")
_ADDRESS = re.compile(r"(?:ray|https?)://[^\s/:]+(?::\d{1,5})?/?")
_MEM = re.compile(r"\d+[KMGTkmgt]?")
_DEFAULT, _OVERRIDE, _DERIVED = "default", "override", "derived from gpu"


# --------------------------------------------------------------------------- secrets helpers
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


# --------------------------------------------------------------------------- typed schema
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
    executor: str
    env_vars: dict[str, str] = {}
    secrets: dict[str, SecretSpec] = {}
    job_dir: str | None = None
    gpus_per_node: int | None = Field(None, ge=0, le=MAX_GPUS_PER_NODE)
    gpu: str | None = None
    gpu_arch: Literal["ampere", "hopper", "blackwell"] | None = None
    gpu_memory: float | None = Field(None, gt=0)
    # shared storage and caches (visible from login and compute nodes); see STORAGE_ENV
    data_root: str | None = None
    checkpoint_root: str | None = None
    index_cache_dir: str | None = None
    hf_home: str | None = None
    hf_offline: bool = False

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

    executor: Literal["local"]


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


class SlurmSettings(_Common):
    """``executor = "slurm"``: sbatch/srun through NeMo-Run, from this machine or over SSH."""

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

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for mount in value:
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


_MODELS: dict[str, type[_Common]] = {"slurm": SlurmSettings, "local": LocalSettings, "ray": RaySettings}
_ALL_FIELDS = {k for m in _MODELS.values() for k in m.model_fields}
_ORDER = ("executor", "account", "partition", "run_partition", "batch_partition", "qos", "reservation", "time",
          "exclusive", "address", "tunnel", "host", "user", "identity", "port", "job_dir", "nodes", "ntasks_per_node",
          "gpus_per_node", "gpu",
          "gpu_arch", "gpu_memory", "cpus_per_node", "mem", "container", "images", "mounts", "setup", "env_vars")
_PARSED = {"nodes", "ntasks_per_node", "gpus_per_node", "gpu_memory", "cpus_per_node", "exclusive", "container", "port", "mem", "hf_offline",
           "mounts", "setup", "images", "env_vars"}


_SHELL_SAFE = re.compile(r"[A-Za-z0-9._/+@%=-]+")


def _unsafe_chars(text: str) -> str:
    """The characters of ``text`` a shell line or a pyxis mount list would split or expand, described
    (``"a space, ','"``); empty when there is none."""
    found = sorted({c for c in text if not re.fullmatch(r"[A-Za-z0-9._/+@%=:-]", c)})
    return ", ".join("a space" if c == " " else "a newline" if c == "\n" else repr(c) for c in found)


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
        parent = parent.rsplit("/", 1)[0]
    digest = hashlib.sha1(root.encode()).hexdigest()[:10]
    return f"{parent.rstrip('/')}/.nemotron-jobs-{digest}"


def _image_names() -> list[str]:
    """Image keys from ``stages/images.toml``; empty (no check) when the table cannot be read."""
    try:
        from nemotron.paths import stages_dir

        return list(tomllib.loads((stages_dir() / "images.toml").read_text(encoding="utf-8")))
    except Exception:  # an image-name check is a courtesy; a broken install is reported elsewhere
        return []


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --------------------------------------------------------------------------- discovery and loading
def find_env_file(explicit: str | Path | None = None, cwd: Path | None = None) -> Path | None:
    """Locate env.toml: ``explicit`` (``--env-file``), else ``$NEMOTRON_ENV_FILE``, else the nearest
    ``env.toml`` from ``cwd`` (default: the current directory) upward, else
    ``$XDG_CONFIG_HOME/nemotron/env.toml`` (``$HOME/.config/...`` when unset), else ``None``.

    Raises:
        ConfigError: ``explicit`` or ``$NEMOTRON_ENV_FILE`` names a file that does not exist, or a folder.
    """
    for given, what in ((explicit, "--env-file"), (os.environ.get(ENV_FILE_VAR), f"${ENV_FILE_VAR}")):
        if given is not None and str(given) != "":
            path = Path(given).expanduser()
            if path.is_dir():
                raise ConfigError(f"{what} {given}: is a folder, not a file",
                                  f"point {what} at the env.toml file itself, e.g. {Path(given) / ENV_FILE_NAME}")
            if not path.is_file():
                raise ConfigError(f"{what} {given}: no such file",
                                  f"point {what} at an existing env.toml (start from env.toml.example)")
            return path
    start = Path(cwd or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / ENV_FILE_NAME).is_file():
            return folder / ENV_FILE_NAME
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    user_file = Path(config_home) / "nemotron" / ENV_FILE_NAME
    return user_file if user_file.is_file() else None


#: Keys of the ``[wandb]`` settings section and the environment variables the training stages' configs read
#: them from while compiling (``logger.wandb_project: ${oc.env:NEMOTRON_WANDB_PROJECT,null}``).
WANDB_ENV = {"project": "NEMOTRON_WANDB_PROJECT", "entity": "NEMOTRON_WANDB_ENTITY"}


def tracking_env(sections: dict[str, Any], source: Path | str = "env.toml") -> dict[str, str]:
    """The ``[wandb]`` section of an env.toml as the variables :data:`WANDB_ENV` names (empty without one).
    A config's own ``logger.wandb_project=...`` still wins: the stage configs only fall back to these.

    Raises:
        ConfigError: an unknown key (with a did-you-mean) or a value that is not a string.
    """
    section = sections.get("wandb") or {}
    out: dict[str, str] = {}
    for key, value in section.items():
        if key not in WANDB_ENV:
            raise ConfigError(f"{source}: [wandb] {key}: unknown key{_suggest(key, WANDB_ENV)}",
                              f"valid: {', '.join(WANDB_ENV)} (the API key is a profile secret: WANDB_API_KEY)")
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{source}: [wandb] {key} = {value!r}: expected a non-empty string")
        out[WANDB_ENV[key]] = value
    return out


def tracking_provenance(compiled: Any, profile: Any) -> dict[str, str]:
    """Provenance labels for the ``logger.wandb_*`` keys whose value came from the ``[wandb]`` section of
    the profile's env.toml (``profile.tracking_env``, :func:`tracking_env`) rather than from a layer of the
    config: dotted key -> ``"<env file name> [wandb] <key>"``. A key a config file or override set is
    left out, as is every key when the profile has no ``[wandb]`` section."""
    from nemotron.validation.views import get

    env = getattr(profile, "tracking_env", None) or {}
    out: dict[str, str] = {}
    for key, var in WANDB_ENV.items():
        leaf = f"logger.wandb_{key}"
        if var in env and compiled.provenance.get(leaf) in ("schema", "default.yaml") \
                and get(compiled.config, leaf) == env[var]:
            out[leaf] = f"{Path(profile.source).name} [wandb] {key}"
    return out


#: Keys of the ``[artifacts]`` settings section.
ARTIFACTS_KEYS = ("root",)


def artifacts_root(sections: dict[str, Any], source: Path | str = "env.toml") -> Path | None:
    """The folder ``[artifacts] root`` names (``~`` expanded; a relative path is taken from the env.toml's
    folder), or ``None`` without one: where :mod:`nemotron.artifacts` keeps its records.

    Raises:
        ConfigError: an unknown key (with a did-you-mean) or a value that is not a non-empty string.
    """
    section = sections.get("artifacts") or {}
    for key, value in section.items():
        if key not in ARTIFACTS_KEYS:
            raise ConfigError(f"{source}: [artifacts] {key}: unknown key{_suggest(key, ARTIFACTS_KEYS)}",
                              f"valid: {', '.join(ARTIFACTS_KEYS)} (the folder where artifact records are kept)")
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{source}: [artifacts] {key} = {value!r}: expected a non-empty string (a folder)")
    if "root" not in section:
        return None
    root = Path(os.path.expanduser(section["root"]))
    return root if root.is_absolute() else Path(source).resolve().parent / root


def check_artifacts_root(loaded: Profiles) -> Path | None:
    """The ``[artifacts] root`` of ``loaded`` (see :func:`artifacts_root`), checked for use on this machine,
    where every stage command keeps its records: it must be a folder, or a new folder inside an existing
    one. Records are never allowed to create a chain of folders from the top of the file system (a
    copied example's ``/lustre/...`` on a laptop). ``None`` without a root.

    Raises:
        ConfigError: the root is a file, or neither it nor its parent folder exists (file:line, the value).
    """
    root = artifacts_root(loaded.sections, loaded.source)
    if root is None or root.is_dir():
        return root
    line = _line_of(loaded._text, "artifacts", "root")
    where = f"{loaded.source}:{line}: [artifacts] root = {loaded.sections['artifacts']['root']!r}"
    if root.exists():
        raise ConfigError(f"{where}: {root} is a file, not a folder", "point root at a folder for artifact records")
    if not root.parent.is_dir():
        raise ConfigError(f"{where}: its parent folder {root.parent} does not exist on this machine "
                          "(records are kept here; only the last folder is created)",
                          f"create {root.parent} first, or comment out root to keep records in "
                          "$NEMOTRON_HOME/artifacts")
    return root


def load_profiles(path: Path) -> Profiles:
    """Parse an env.toml into :class:`Profiles` (profiles are validated lazily, on :meth:`Profiles.get`;
    the settings sections ``[wandb]`` and ``[artifacts]`` at once, as strictly as profiles).

    Raises:
        ConfigError: unreadable file, TOML syntax error (with its line), a top-level key that is
            not a table, or an unknown key or bad value in a settings section.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}", "check the --env-file path and its permissions") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\s*\(at line (\d+), column \d+\)", str(exc))
        where = f"{path}:{m.group(1)}" if m else str(path)
        msg = str(exc).replace(m.group(0), "") if m else str(exc)
        raise ConfigError(f"{where}: invalid TOML: {msg}", "fix the syntax at that line (TOML: key = \"value\", [table])") from None
    for name, value in data.items():
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: top-level key {name!r} is not a table",
                              f"each profile is a [table]; move {name} = ... under one")
    sections = {n: v for n, v in data.items() if n in SECTIONS}
    tracking_env(sections, path)
    artifacts_root(sections, path)
    return Profiles(path, {n: v for n, v in data.items() if n not in SECTIONS}, sections, text)


def resolve_profile(name: str, env_file: str | Path | None = None,
                    overrides: Mapping[str, Any] | None = None, cwd: Path | None = None) -> Profile:
    """Find env.toml (see :func:`find_env_file`), load it and return profile ``name`` with ``overrides``.

    Raises:
        ConfigError: no env.toml anywhere, or any error of :func:`load_profiles` / :meth:`Profiles.get`.
    """
    path = find_env_file(env_file, cwd)
    if path is None:
        raise ConfigError(f"profile {name!r} requested but no env.toml was found",
                          "copy env.toml.example to ./env.toml or ~/.config/nemotron/env.toml, or pass --env-file")
    profile = load_profiles(path).get(name)
    return profile.with_overrides(overrides) if overrides else profile


class Profiles:
    """All profiles of one env.toml. ``source`` is its path; ``sections`` the non-profile tables."""

    def __init__(self, source: Path, raw: dict[str, dict], sections: dict[str, dict], text: str = "") -> None:
        self.source, self.sections, self._raw, self._text = source, sections, raw, text
        self._cache: dict[str, Profile] = {}

    def __repr__(self) -> str:
        return f"Profiles(source={str(self.source)!r}, names={self.names()!r})"

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def names(self) -> list[str]:
        """Profile names in file order (sections excluded)."""
        return list(self._raw)

    def get(self, name: str) -> Profile:
        """The resolved, validated profile ``name``.

        Raises:
            ConfigError: a settings section (``wandb``, ``artifacts``), an unknown name (with a
                did-you-mean and the list of profiles), a broken ``extends`` chain, or invalid keys.
        """
        if name in self._cache:
            return self._cache[name]
        listing = f"profiles in {self.source.name}: {', '.join(self._raw) or '(none)'}"
        if name in self.sections:
            raise ConfigError(f"{self.source}: [{name}] is a settings section, not a profile; it cannot be run on", listing)
        if name not in self._raw:
            raise ConfigError(f"{self.source}: no profile {name!r}{_suggest(name, self._raw)}", listing)
        chain = self._chain(name)
        merged: dict[str, Any] = {}
        prov: dict[str, str] = {}
        for owner in reversed(chain):
            layer = {k: v for k, v in self._raw[owner].items() if k != "extends"}
            if "secrets" in layer:
                layer["secrets"] = _normalize_secrets(layer["secrets"])
            _merge(merged, copy.deepcopy(layer), prov, owner, ())
        self._cache[name] = _build(name, chain, self.source, merged, prov, frozenset(), self._text)
        return self._cache[name]

    def errors(self) -> dict[str, ConfigError]:
        """Every profile that does not validate, with its error (for ``nemotron profiles`` checks)."""
        out = {}
        for name in self._raw:
            try:
                self.get(name)
            except ConfigError as exc:
                out[name] = exc
        return out

    def _chain(self, name: str) -> list[str]:
        chain = [name]
        while (parent := self._raw[chain[-1]].get("extends")) is not None:
            where = f"{self.source}: profile {chain[-1]!r}: extends"
            if not isinstance(parent, str):
                raise ConfigError(f"{where}: expected a profile name (a string), got {parent!r}", "write extends = \"NAME\"")
            if parent in chain:
                raise ConfigError(f"{where}: cycle {' -> '.join([*chain, parent])}",
                                  "remove one extends so the chain ends at a profile without extends")
            if parent not in self._raw:
                what = "a settings section, not a profile" if parent in self.sections else "not defined"
                raise ConfigError(f"{where} = {parent!r}, which is {what} (chain: {' -> '.join([*chain, parent])})",
                                  f"profiles in {self.source.name}: {', '.join(self._raw)}{_suggest(parent, self._raw)}")
            chain.append(parent)
        return chain


def _normalize_secrets(value: Any) -> Any:
    """``["A"]`` -> ``{"A": {"env": "A"}}``; ``{"A": "v"}`` -> ``{"A": {"value": "v"}}``; tables stay."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {v: {"env": v} for v in value}
    if isinstance(value, dict):
        return {k: {"value": v} if isinstance(v, str) else v for k, v in value.items()}
    return value  # wrong shape: the schema reports it


def _merge(into: dict, layer: dict, prov: dict[str, str], owner: str, path: tuple[str, ...]) -> None:
    """Deep-merge ``layer`` into ``into`` (tables key by key, anything else replaced), noting the owner."""
    for key, value in layer.items():
        here = (*path, key)
        dotted = ".".join(here)
        if isinstance(value, dict) and not (here[0] == "secrets" and len(here) == 2):  # a secret is one value
            if not isinstance(into.get(key), dict):
                into[key] = {}
                _forget(prov, dotted)
                prov[dotted] = owner
            _merge(into[key], value, prov, owner, here)
        else:
            into[key] = value
            _forget(prov, dotted)
            prov[dotted] = owner


def _owner(prov: dict[str, str], key: str, fallback: str) -> str:
    """Who set ``key``: its own entry, else one of its leaves (a table), else its nearest table."""
    if key in prov:
        return prov[key]
    leaf = next((v for k, v in prov.items() if k.startswith(key + ".")), None)
    parents = [key.rsplit(".", n)[0] for n in range(1, key.count(".") + 1)]
    return leaf or next((prov[p] for p in parents if p in prov), fallback)


def _forget(prov: dict[str, str], dotted: str) -> None:
    for key in [k for k in prov if k == dotted or k.startswith(dotted + ".")]:
        del prov[key]


# --------------------------------------------------------------------------- validation
def _build(name: str, chain: list[str], source: Path, merged: dict, prov: dict[str, str],
           overridden: frozenset[str], text: str) -> Profile:
    """Validate ``merged`` against its executor's schema; collect every problem into one ConfigError."""
    problems: list[tuple[str, str]] = []
    executor = merged.get("executor")
    model = _MODELS.get(executor) if isinstance(executor, str) else None
    if model is None:
        if executor is None:
            problems.append(("executor", f"missing; set executor = one of {', '.join(map(repr, EXECUTORS))}"))
        else:
            problems.append(("executor", f"unknown executor {executor!r}{_suggest(str(executor), EXECUTORS)}; "
                                         f"valid: {', '.join(EXECUTORS)}"))
        raise _error(source, name, problems, prov, merged, text)
    try:
        settings = model.model_validate(merged)
    except ValidationError as exc:
        problems = [_translate(e, executor, prov) for e in exc.errors(include_url=False)]
        raise _error(source, name, problems, prov, merged, text) from None
    prov = dict(prov)
    updates: dict[str, Any] = {}
    if settings.gpu:
        arch, memory = GPU_MODELS[settings.gpu]
        if settings.gpu_arch and settings.gpu_arch != arch:
            problems.append(("gpu_arch", f"{settings.gpu_arch!r} disagrees with gpu = {settings.gpu!r}, which is {arch}"))
        updates["gpu_arch"] = arch
        prov.setdefault("gpu_arch", _DERIVED)
        if settings.gpu_memory is None:
            updates["gpu_memory"], prov["gpu_memory"] = memory, _DERIVED
    for key, spec in settings.secrets.items():
        if (spec.value is None) == (spec.env is None):
            problems.append((f"secrets.{key}", "give exactly one of an inline value or { env = \"VAR\" }"))
        elif spec.env is not None and not _ENV_NAME.fullmatch(spec.env):
            problems.append((f"secrets.{key}.env", f"{spec.env!r} is not a valid environment variable name"))
        if key in settings.env_vars:
            problems.append((f"env_vars.{key}", "also declared in secrets; keep it in one place"))
    problems += _copied_secrets(settings)
    problems += _setup_syntax(getattr(settings, "setup", None) or [])
    ssh = isinstance(settings, SlurmSettings) and settings.tunnel == "ssh"
    if isinstance(settings, SlurmSettings):
        for key in ("host", "user", "identity", "port"):
            if not ssh and getattr(settings, key) is not None:
                problems.append((key, "set but tunnel is 'local'; set tunnel = \"ssh\" or remove it"))
        for key in ("host", "user", "job_dir") if ssh else ():
            if getattr(settings, key) is None:
                problems.append((key, "required when tunnel = \"ssh\""))
        if ssh and settings.port is None:
            updates["port"], prov["port"] = 22, _DEFAULT
        if settings.identity and settings.identity.startswith("~"):
            updates["identity"] = os.path.expanduser(settings.identity)
    if not ssh:  # a local path: expand ~ against this machine's $HOME
        if settings.job_dir:
            updates["job_dir"] = os.path.expanduser(settings.job_dir)
        else:
            from nemotron.artifacts import home

            updates["job_dir"] = str(home() / "jobs")
        prov.setdefault("job_dir", _DEFAULT)
    if isinstance(settings, SlurmSettings) and (settings.container or ssh):
        # nodes that do not run on this machine's file system as it is: storage defaults on the job root, which
        # they see (docs/profiles.md); through its shell-safe name, which is mounted into the container
        root = shell_safe_root(str(updates.get("job_dir") or settings.job_dir))
        for key, sub in (("data_root", "data"), ("checkpoint_root", "checkpoints")):
            if getattr(settings, key) is None:
                updates[key] = f"{root}/{sub}"
                prov.setdefault(key, _DEFAULT)
    if problems:
        raise _error(source, name, problems, prov, merged, text)
    return Profile(name, list(chain), source, settings.model_copy(update=updates), prov, merged, overridden, text)


def _setup_syntax(lines: list[str]) -> list[tuple[str, str]]:
    """Problems for ``setup`` lines that bash cannot parse (``bash -n``: syntax only, nothing runs): the lines go
    verbatim into the job script, where one unbalanced quote breaks the whole script at submission. All lines are
    checked in one ``bash -n``; only when that fails is each line checked alone, to name it. Without bash on this
    machine nothing is checked."""
    import re
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if not bash or not lines:
        return []

    def parse(text: str) -> str | None:
        done = subprocess.run([bash, "-n", "-c", text], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode == 0:
            return None
        return re.sub(r"^.*?line \d+: ", "", (done.stderr.strip().splitlines() or ["a syntax error"])[0])

    if parse("\n".join(lines)) is None:
        return []
    out: list[tuple[str, str]] = []
    for i, line in enumerate(lines):
        why = parse(line)
        if why is not None:
            out.append((f"setup[{i}]", f"is not a bash command line ({why}); it is written verbatim into the job "
                                       "script: balance its quotes and brackets"))
    return out


def _copied_secrets(settings: _Common) -> list[tuple[str, str]]:
    """Problems for every non-secret value (``setup[0]``, ``mounts[1]``, ``env_vars.X``, ``partition``...)
    that contains a secret's literal value (inline, read from the environment now, or a secret-named
    ``env_vars`` entry; values shorter than 4 characters are not searched, as in :func:`redact_text`).

    Such a value would be written verbatim into the job script, NeMo-Run's executor file and the job's
    log; the job gets the secret in its environment, so the line should name the variable instead.
    """
    secrets = sorted(((name, value) for name, value in settings.hidden_values().items() if len(value) >= 4),
                     key=lambda item: len(item[1]), reverse=True)
    if not secrets:
        return []
    found: list[tuple[str, str]] = []

    def walk(value: Any, key: str) -> None:
        if isinstance(value, str):
            hit = next((name for name, secret in secrets if secret in value), None)
            if hit is not None:
                found.append((key, f"contains the value of secret {hit}; write ${hit} instead "
                                   f"(secrets reach the job's environment)"))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(item, f"{key}[{i}]")
        elif isinstance(value, dict):
            for name, item in value.items():
                walk(str(name), f"{key} (a key)")
                walk(item, f"{key}.{name}")

    for field in type(settings).model_fields:
        if field == "secrets":
            continue
        value = getattr(settings, field)
        if field == "env_vars":
            value = {k: v for k, v in value.items() if not is_secret_name(k)}
        walk(value, field)
    return found


_TYPES = {"int_type": "an integer", "bool_type": "true or false", "string_type": "a string",
          "float_type": "a number", "list_type": "a list", "dict_type": "a table", "model_type": "a table"}


def _is_secret_path(key: str) -> bool:
    parts = key.split(".")
    return parts[0] == "secrets" or (parts[0] == "env_vars" and len(parts) > 1 and is_secret_name(parts[1]))


def _translate(err: dict, executor: str, prov: dict[str, str]) -> tuple[str, str]:
    """One pydantic error as ``(dotted key, message in our words)``; secret values are never shown."""
    key = ".".join(str(p) for p in err["loc"] if p != "[key]")
    kind, value = err["type"], err.get("input")
    shown = REDACTED if _is_secret_path(key) else repr(value)
    if kind == "extra_forbidden":
        if "." in key:
            return key, "unknown key"
        owners = [e for e, m in _MODELS.items() if key in m.model_fields]
        if owners:
            return key, f"not a key of {executor} profiles (it belongs to {' and '.join(owners)} profiles)"
        fields = [f for f in _MODELS[executor].model_fields if f != "executor"] + ["extends"]
        return key, f"unknown key{_suggest(key, fields)}"
    if kind == "missing":
        return key, f"required for {executor} profiles"
    if kind in _TYPES:
        if key == "secrets":
            return key, 'expected a list of variable names or a table { NAME = "value" }'
        if key.startswith("secrets."):
            return key, 'expected an inline string or { env = "VAR" }'
        note = " (a string: write it without quotes)" if isinstance(value, str) and prov.get(key) != _OVERRIDE else ""
        return key, f"expected {_TYPES[kind]}, got {shown}{note}"
    if kind == "literal_error":
        return key, f"{shown} is not one of {err['ctx']['expected']}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<="}[kind]
        limit = next(iter(err["ctx"].values()))
        why = " (the most GPUs a Slurm node offers: 8 GPUs x 7 MIG instances)" if kind == "less_than_equal" \
            and key == "gpus_per_node" else ""
        return key, f"{shown} must be {op} {limit}{why}"
    if kind == "value_error":
        return key, str(err["ctx"]["error"])
    return key, err["msg"][:1].lower() + err["msg"][1:]


def _base_key(key: str) -> str:
    """``setup[0]`` -> ``setup``, ``env_vars (a key)`` -> ``env_vars``: the dotted key provenance knows."""
    return re.split(r"[\[ ]", key, maxsplit=1)[0]


def _error(source: Path, name: str, problems: list[tuple[str, str]], prov: dict[str, str],
           merged: dict, text: str) -> ConfigError:
    """One line naming file (and line when there is one problem), profile and key(s), plus a hint."""
    secrets, env_vars = merged.get("secrets"), merged.get("env_vars")  # either may be of the wrong type here
    hidden = [s.get("value") for s in secrets.values() if isinstance(s, dict)] if isinstance(secrets, dict) else []
    hidden += [v for k, v in env_vars.items() if isinstance(v, str) and is_secret_name(str(k))] \
        if isinstance(env_vars, dict) else []

    def origin(key: str) -> str:
        owner = _owner(prov, _base_key(key), name)
        if owner == _OVERRIDE:
            return " (command-line override)"
        return f" (set in [{owner}])" if owner not in (name, _DEFAULT, _DERIVED) else ""

    where = str(source)
    if len(problems) == 1:
        key, msg = problems[0]
        owner = _owner(prov, _base_key(key), name)
        table = name if owner in (_DEFAULT, _DERIVED) else owner
        line = None if owner == _OVERRIDE else _line_of(text, table, _base_key(key).split(".")[0])
        where += f":{line}" if line else ""
        message = f"{where}: profile {name!r}: {key}: {msg}{origin(key)}"
        hint = f"fix {key} (keys and types: {DOCS})"
    else:
        body = "; ".join(f"{k}: {m}{origin(k)}" for k, m in problems)
        message = f"{where}: profile {name!r}: {len(problems)} problems: {body}"
        hint = f"fix these keys in [{name}] or the profile it extends (keys and types: {DOCS})"
    return ConfigError(redact_text(message, hidden), hint)


def _line_of(text: str, table: str, key: str) -> int | None:
    """Best-effort line number of ``key`` inside ``[table]`` (or of the table header)."""
    lines = text.splitlines()
    name = r"[\"']?" + re.escape(table) + r"[\"']?"
    sub = re.compile(r"\s*\[\s*" + name + r"\s*\.\s*[\"']?" + re.escape(key) + r"[\"']?\s*\]")
    if (hit := next((i for i, ln in enumerate(lines) if sub.match(ln)), None)) is not None:
        return hit + 1  # the key is a [table.key] sub-table
    header = re.compile(r"\s*\[\s*" + name + r"\s*\]")
    start = next((i for i, ln in enumerate(lines) if header.match(ln)), None)
    if start is None:
        return None
    assign = re.compile(r"\s*[\"']?" + re.escape(key) + r"[\"']?\s*[=.]")
    for i in range(start + 1, len(lines)):
        if re.match(r"\s*\[", lines[i]):
            break
        if assign.match(lines[i]):
            return i + 1
    return start + 1


# --------------------------------------------------------------------------- the profile
class Profile:
    """One resolved, validated profile.

    Attributes:
        name: the profile's table name. chain: names from this profile to its root (``extends``).
        source: the env.toml it came from. settings: the validated pydantic model
            (:class:`SlurmSettings`, :class:`LocalSettings` or :class:`RaySettings`).
        provenance: dotted key -> the profile that set it, ``"default"``, ``"override"`` or
            ``"derived from gpu"``. overridden: keys set by :meth:`with_overrides`.

    Every schema key is readable as an attribute (``profile.partition``, ``profile.time``); keys of
    another executor read as ``None``. ``gpu_memory`` is in GB; ``time_seconds`` in seconds.
    """

    def __init__(self, name: str, chain: list[str], source: Path, settings: _Common, provenance: dict[str, str],
                 raw: dict, overridden: frozenset[str] = frozenset(), text: str = "") -> None:
        self.name, self.chain, self.source, self.settings = name, chain, source, settings
        self.provenance, self.overridden = provenance, set(overridden)
        self._raw, self._text = raw, text

    def __getattr__(self, key: str) -> Any:
        settings = self.__dict__.get("settings")
        if settings is not None and key in type(settings).model_fields:
            return getattr(settings, key)
        if key in _ALL_FIELDS:
            return None
        raise AttributeError(key)

    def __repr__(self) -> str:
        return f"Profile(name={self.name!r}, executor={self.executor!r}, chain={self.chain!r}, source={str(self.source)!r})"

    @property
    def executor(self) -> str:
        """``"slurm"``, ``"local"`` or ``"ray"``."""
        return self.settings.executor

    @property
    def gpus_per_node(self) -> int | None:
        return self.settings.gpus_per_node

    @property
    def gpu_arch(self) -> str | None:
        """``"ampere"``, ``"hopper"``, ``"blackwell"`` or ``None`` (explicit or derived from ``gpu``)."""
        return self.settings.gpu_arch

    @property
    def gpu_memory(self) -> float | None:
        """GB per GPU (explicit, or the default of the ``gpu`` model)."""
        return self.settings.gpu_memory

    @property
    def time_seconds(self) -> int | None:
        """The Slurm time limit in seconds (``None`` when unset or unlimited: ``0``, ``UNLIMITED``)."""
        return parse_slurm_time(self.settings.time) if getattr(self.settings, "time", None) else None

    def partition_for(self, mode: Literal["run", "batch"]) -> str | None:
        """Partition for ``--run`` (``run_partition``) or ``--batch`` (``batch_partition``), else ``partition``."""
        return getattr(self.settings, f"{mode}_partition", None) or getattr(self.settings, "partition", None)

    def secret_values(self) -> dict[str, str]:
        """Resolved secrets, name -> value: inline values, declared names present in ``os.environ``,
        and ``env_vars`` entries whose name looks secret (:func:`is_secret_name`). Never print these."""
        return self.settings.hidden_values()

    def missing_secrets(self) -> list[str]:
        """Environment variables that declared secrets read from but that are not set now."""
        return [s.env for s in self.settings.secrets.values() if s.env is not None and s.env not in os.environ]

    def launch_problems(self) -> list[tuple[str, Any, str, str]]:
        """What stops a job being started on this profile from this shell now, as
        ``(key, value, message, what is valid)``: each declared secret whose variable is not set, and an
        ssh ``identity`` key file that does not exist here. Empty when nothing does. Checked when a
        stage command (dry run included) uses the profile, not when the file loads."""
        out: list[tuple[str, Any, str, str]] = [
            ("secrets", name, "declared secret is not set in this shell", f"export {name}=... (or remove it from secrets)")
            for name in self.missing_secrets()]
        identity = getattr(self.settings, "identity", None)
        if identity and not Path(identity).is_file():
            out.append(("identity", identity, "no such private key file on this machine",
                        "the path of an existing SSH key file, or leave identity out to use your ssh config"))
        return out

    def tracking_problems(self, project: str | None) -> list[tuple[str, Any, str, str]]:
        """What stops W&B logging in without asking in a job on this profile, in the form of
        :meth:`launch_problems`: ``project`` (the compiled ``logger.wandb_project``) is set, no
        ``WANDB_API_KEY`` reaches the job and ``WANDB_MODE`` is not ``offline`` there. The job's
        environment is the profile's ``env_vars`` and declared secrets (an unset one is reported by
        :meth:`launch_problems` instead), over this shell's environment for a ``local`` profile, whose
        job inherits it. Empty when W&B is off or can log in, and for a ``local`` profile whose Python
        has no wandb (its runtime then runs with W&B off)."""
        import importlib.util

        from nemotron.runtime.tracking import wandb_key_problem

        if self.executor == "local" and importlib.util.find_spec("wandb") is None:
            return []
        env = dict(os.environ) if self.executor == "local" else {}
        env.update({**self.settings.env_vars, **dict.fromkeys(self.settings.secrets, "declared")})
        problem = wandb_key_problem(project, env)
        if problem is None:
            return []
        return [("secrets", "WANDB_API_KEY", problem,
                 "secrets = [\"WANDB_API_KEY\"] in the profile, env_vars WANDB_MODE = \"offline\", "
                 "or logger.wandb_project=null")]

    def storage_env(self) -> dict[str, str]:
        """The profile's shared-storage keys as the environment variables stage configs and runtimes
        read (:data:`STORAGE_ENV`); ``hf_offline = true`` also sets the Hugging Face offline switches."""
        out = {var: str(getattr(self.settings, key)) for key, var in STORAGE_ENV.items()
               if getattr(self.settings, key, None)}
        if self.settings.hf_offline:
            out.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
        return out

    def public_env_vars(self) -> dict[str, str]:
        """The job's environment that is safe to write into a job script: the storage variables
        (:meth:`storage_env`), then ``env_vars`` minus the secret-named ones."""
        return {**self.storage_env(), **{k: v for k, v in self.settings.env_vars.items() if not is_secret_name(k)}}

    def redacted(self) -> dict[str, Any]:
        """The full resolved profile as plain data (unset keys left out), every secret shown as ``"***"``.

        A declared secret whose variable is not set shows as ``"<unset $VAR>"``.
        """
        dumped = self.settings.model_dump(exclude_none=True)
        data = {k: dumped[k] for k in sorted(dumped, key=lambda k: _ORDER.index(k) if k in _ORDER else len(_ORDER))}
        data["env_vars"] = {k: REDACTED if is_secret_name(k) else v for k, v in data["env_vars"].items()}
        data["secrets"] = {k: REDACTED if s.value is not None or s.env in os.environ else f"<unset ${s.env}>"
                           for k, s in self.settings.secrets.items()}
        hidden = list(self.secret_values().values())

        def scrub(value: Any) -> Any:
            if isinstance(value, str):
                return redact_text(value, hidden)
            if isinstance(value, list):
                return [scrub(v) for v in value]
            if isinstance(value, dict):
                return {k: scrub(v) for k, v in value.items()}
            return value

        return scrub(data)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Profile:
        """A new profile with command-line overrides ``{"time": "01:00:00", "images.nemo": "/x.sqsh"}``.

        Keys may be dotted into tables. A string value for a non-string key (``gpus_per_node``,
        ``exclusive``, ``mounts``...) is parsed as YAML (``"4"`` -> 4, ``"false"`` -> False); the result is
        re-validated strictly. ``executor``, ``extends`` and ``secrets`` cannot be overridden.

        Raises:
            ConfigError: a forbidden or unknown key, an unparsable value, or a value of the wrong type.
        """
        raw, prov = copy.deepcopy(self._raw), dict(self.provenance)
        for key, value in overrides.items():
            parts = key.split(".")
            if parts[0] in ("executor", "extends", "secrets") or not all(parts):
                raise ConfigError(f"{self.source}: profile {self.name!r}: override profile.{key}: cannot be set from "
                                  f"the command line", "edit env.toml (secrets never go on a command line)")
            if isinstance(value, str) and len(parts) == 1 and parts[0] in _PARSED:
                try:
                    value = yaml.safe_load(value) if value.strip() else value
                except yaml.YAMLError:
                    raise ConfigError(f"{self.source}: profile {self.name!r}: override profile.{key}={value}: "
                                      f"not a valid value", f"quote it as YAML, e.g. profile.{key}=[a, b]") from None
                if parts[0] in ("mounts", "setup") and isinstance(value, str):
                    value = [value]
            node = raw
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[parts[-1]] = value
            _forget(prov, key)
            prov[key] = _OVERRIDE
        for derived in [k for k, v in prov.items() if v in (_DEFAULT, _DERIVED)]:
            del prov[derived]  # recomputed from the new values
        return _build(self.name, self.chain, self.source, raw, prov,
                      frozenset(self.overridden | set(overrides)), self._text)


# --------------------------------------------------------------------------- display
def env_file_option(env_file: str | Path | None) -> str:
    """`` --env-file PATH`` (shell-quoted) for a command shown in a hint, when the user gave ``--env-file``;
    empty otherwise (the command then finds the same env.toml by discovery)."""
    import shlex

    return f" --env-file {shlex.quote(str(env_file))}" if env_file not in (None, "") else ""


def profiles_table(profiles: Profiles, env_file: str | Path | None = None):
    """A ``rich.table.Table``: name, executor, extends chain, partition or address, GPUs/node x GPU, file.

    A profile that does not validate is listed as ``invalid`` with the command that shows why
    (``nemotron profiles NAME``, with ``--env-file`` when ``env_file``, the one the user gave, is set).
    """
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"profiles in {profiles.source}", title_justify="left")
    for column in ("profile", "executor", "extends", "partition / address", "GPUs per node", "source"):
        table.add_column(column)
    for name in profiles.names():
        try:
            p = profiles.get(name)
        except ConfigError:
            table.add_row(escape(name), "[red]invalid[/red]", "", escape(f"see: nemotron profiles {name}{env_file_option(env_file)}"), "",
                          escape(str(profiles.source)))
            continue
        where = p.address if p.executor == "ray" else p.partition or ("this machine" if p.executor == "local" else "-")
        if p.executor == "slurm" and p.tunnel == "ssh":
            where = f"{where} via ssh {p.host}"
        gpus = "-" if p.gpus_per_node is None else f"{p.gpus_per_node} × {p.gpu or p.gpu_arch or 'GPU'}"
        table.add_row(*map(escape, (name, p.executor, " -> ".join(p.chain[1:]) or "-", where, gpus, str(p.source))))
    if profiles.sections:
        table.caption = f"settings sections (not profiles): {', '.join(profiles.sections)}"
    return table


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def profile_yaml(profile: Profile) -> str:
    """The resolved, redacted profile as YAML; a trailing comment names who set each key (a profile of
    the chain, ``default``, ``override`` or ``derived from gpu``)."""
    data = profile.redacted()
    prov = profile.provenance

    def who(key: str) -> str:
        owner = _owner(prov, key, _DEFAULT)
        spec = profile.settings.secrets.get(key.split(".", 1)[1]) if key.startswith("secrets.") else None
        return f"  # {owner}" + (f", from ${spec.env}" if spec is not None and spec.env else "")

    lines = [f"# profile {profile.name} ({' -> '.join(profile.chain)}) from {profile.source}",
             "# secret values are shown as ***; each comment names who set the key"]
    for key, value in data.items():
        if isinstance(value, dict) and value:
            lines.append(f"{key}:")
            lines += [f"  {_scalar(k)}: {_scalar(v)}{who(f'{key}.{k}')}" for k, v in value.items()]
        elif isinstance(value, list) and value:
            lines.append(f"{key}:{who(key)}")
            lines += [f"  - {_scalar(v)}" for v in value]
        else:
            lines.append(f"{key}: {_scalar(value)}{who(key)}")
    return "\n".join(lines) + "\n"
