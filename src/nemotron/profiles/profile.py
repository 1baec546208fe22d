"""One resolved, validated profile (:class:`Profile`) and how it is built from merged env.toml tables."""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import ValidationError

from nemotron.config.artifacts import home
from nemotron.errors import ConfigError
from nemotron.profiles.schema import (
    _DEFAULT,
    _DERIVED,
    _ENV_NAME,
    _MODELS,
    _ORDER,
    _OVERRIDE,
    _PARSED,
    DOCS,
    EXECUTORS,
    GPU_MODELS,
    REDACTED,
    STORAGE_ENV,
    ProfileSettings,
    SlurmSettings,
    _Common,
    _executor_name,
    _suggest,
    is_secret_name,
    parse_slurm_time,
    redact_text,
    shell_safe_root,
)
from nemotron.profiles.sections import wandb_key_problem


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
    ssh = settings.over_ssh
    if isinstance(settings, SlurmSettings):
        problems += _setup_syntax(settings.setup)
        given = {"host": settings.host, "user": settings.user, "identity": settings.identity, "port": settings.port}
        for key, value in given.items():
            if not ssh and value is not None:
                problems.append((key, "set but tunnel is 'local'; set tunnel = \"ssh\" or remove it"))
        for key, value in (("host", settings.host), ("user", settings.user), ("job_dir", settings.job_dir)):
            if ssh and value is None:
                problems.append((key, "required when tunnel = \"ssh\""))
        if ssh and settings.port is None:
            updates["port"], prov["port"] = 22, _DEFAULT
        if settings.identity and settings.identity.startswith("~"):
            updates["identity"] = os.path.expanduser(settings.identity)
    if not ssh:  # a local path: expand ~ against this machine's $HOME
        if settings.job_dir:
            updates["job_dir"] = os.path.expanduser(settings.job_dir)
        else:

            updates["job_dir"] = str(home() / "jobs")
        prov.setdefault("job_dir", _DEFAULT)
    if isinstance(settings, SlurmSettings) and (settings.container or ssh):
        # nodes that do not run on this machine's file system as it is: storage defaults on the job root, which
        # they see (docs/profiles.md); through its shell-safe name, which is mounted into the container
        root = shell_safe_root(str(updates.get("job_dir") or settings.job_dir))
        storage = settings.storage()
        for key, sub in (("data_root", "data"), ("checkpoint_root", "checkpoints")):
            if storage[key] is None:
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
        note = ""
        if isinstance(value, str) and prov.get(key) != _OVERRIDE:
            if kind == "list_type":  # mounts = "/lustre:/lustre": a list of one string, in brackets
                note = f" (a list of strings: write {key} = [{json.dumps(value)}])"
            elif kind in ("int_type", "bool_type", "float_type"):  # gpus_per_node = "8"
                note = " (a string: write it without quotes)"
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
        value: Any = merged
        for part in _base_key(key).split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if owner == _OVERRIDE and value == "":  # profile.gpu= : the empty text, not "unset"
            hint = (f"profile.{key}=null unsets it for this command (profile.{key}= sets the empty text); or {hint}")
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


S = TypeVar("S", bound=_Common)
T = TypeVar("T", bound=_Common)


class Profile(Generic[S]):
    """One resolved, validated profile: its executor's typed settings plus where they came from.

    Attributes:
        name: the profile's table name. chain: names from this profile to its root (``extends``).
        source: the env.toml it came from. settings: the validated pydantic model of its executor, one member of
            :data:`nemotron.profiles.schema.ProfileSettings` (:class:`SlurmSettings`, :class:`LocalSettings` or
            :class:`RaySettings`); a key is read from it (``profile.settings.partition``) after narrowing to the
            executor that has it (:meth:`narrow`, ``isinstance(profile.settings, SlurmSettings)``), so a key of
            another executor is a type error, not a silent ``None``.
        provenance: dotted key -> the profile that set it, ``"default"``, ``"override"`` or
            ``"derived from gpu"``. overridden: keys set by :meth:`with_overrides`.
        tracking_env: the ``[wandb]`` section of its env.toml as environment variables (the configs' W&B
            fallback; set by :func:`nemotron.profiles.load.load_profile`, empty otherwise).

    ``gpu_memory`` is in GB; ``time_seconds`` in seconds.
    """

    def __init__(self, name: str, chain: list[str], source: Path, settings: S, provenance: dict[str, str],
                 raw: dict, overridden: frozenset[str] = frozenset(), text: str = "") -> None:
        self.name, self.chain, self.source = name, chain, source
        self.settings: S = settings
        self.provenance, self.overridden = provenance, set(overridden)
        self.tracking_env: dict[str, str] = {}
        self._raw, self._text = raw, text

    def __repr__(self) -> str:
        return f"Profile(name={self.name!r}, executor={self.executor!r}, chain={self.chain!r}, source={str(self.source)!r})"

    def narrow(self, kind: type[T]) -> Profile[T]:
        """This profile typed as one executor's (``profile.narrow(SlurmSettings).settings.partition``).

        Raises:
            ConfigError: the profile is of another executor (a backend handed a profile it does not run).
        """
        if not isinstance(self.settings, kind):
            want = _executor_name(kind)
            raise ConfigError(f"{self.source}: profile {self.name!r} is a {self.executor} profile, not a {want} one",
                              f"use a profile with executor = \"{want}\" (nemotron profiles lists them)")
        return self  # type: ignore[return-value]  (narrowed by the isinstance above)

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
        """The Slurm time limit in seconds (``None`` when unset or unlimited, and for other executors)."""
        return self.settings.time_seconds if isinstance(self.settings, SlurmSettings) else None

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
        identity = self.settings.identity if isinstance(self.settings, SlurmSettings) else None
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


        here = self.settings.on_this_machine  # the job inherits this shell's environment
        if here and importlib.util.find_spec("wandb") is None:
            return []
        env = dict(os.environ) if here else {}
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
        values = self.settings.storage()
        out = {var: str(values[key]) for key, var in STORAGE_ENV.items() if values[key]}
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
        new = _build(self.name, self.chain, self.source, raw, prov, frozenset(self.overridden | set(overrides)),
                     self._text)
        new.tracking_env = dict(self.tracking_env)  # the same env.toml's [wandb] section
        return new


def storage_host(profile: Profile | None) -> str | None:
    """Where the jobs of ``profile`` (None: this machine) keep their files, for artifact scopes: a Ray profile's
    ``address``, a Slurm profile's login ``host`` (None through a local tunnel); None for this machine
    (:meth:`nemotron.profiles.schema._Common.storage_host`)."""
    return profile.settings.storage_host() if profile is not None else None


def storage_site(profile: Profile | None) -> tuple[str | None, str | None]:
    """``(executor, host)`` for an artifact's site (:func:`nemotron.config.artifacts.site`): ``(None, None)`` for a
    job on this machine (no profile, a ``local`` one), else the profile's executor and :func:`storage_host`."""
    if profile is None or profile.settings.on_this_machine:
        return None, None
    return profile.executor, storage_host(profile)


def uses_container(profile: Profile | None) -> bool:
    """Whether the jobs of ``profile`` run in the stage's container image: a Slurm profile's unless
    ``container = false``; never on this machine (no profile, ``local``) nor on a Ray cluster (its own image)."""
    return profile is not None and profile.settings.uses_container()


def runs_here(profile: Profile | None) -> bool:
    """Whether a job of ``profile`` (None: no profile) runs on this machine, with its files and environment."""
    return profile is None or profile.settings.on_this_machine


#: A profile of any executor (the type a caller that serves every executor takes).
ExecutorProfile = Profile[ProfileSettings]


def from_table(name: str, table: Mapping[str, Any], source: Path | str = "env.toml") -> ExecutorProfile:
    """One profile made from ``table`` as an env.toml ``[name]`` table holds it (without ``extends``), validated,
    defaulted and derived exactly as :func:`nemotron.profiles.load.load_profiles` does for a file's table
    (``from_table("c", {"executor": "slurm", "gpus_per_node": 8, "gpu": "H200"})``).

    Raises:
        ConfigError: an unknown executor, key or value, as for a file (naming ``source`` and ``name``).
    """
    merged: dict = {}
    prov: dict[str, str] = {}
    _merge(merged, copy.deepcopy(dict(table)), prov, name, ())
    return _build(name, [name], Path(source), merged, prov, frozenset(), "")
