"""Profiles shown: the ``profiles`` table and one profile as YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nemotron.errors import ConfigError
from nemotron.profiles.load import Profiles
from nemotron.profiles.profile import Profile, _owner
from nemotron.profiles.schema import _DEFAULT


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
        where = p.settings.where()
        gpus = "-" if p.gpus_per_node is None else f"{p.gpus_per_node} × {p.settings.gpu or p.gpu_arch or 'GPU'}"
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




def profiles_document(profiles: Profiles, name: str | None = None) -> dict[str, Any]:
    """``profiles --json``: every profile's row (``valid`` false with the error for one that does not validate), or
    with ``name`` that profile fully resolved and redacted, with who set each key (``provenance``).

    Raises:
        ConfigError: ``name`` is not a profile, or it does not validate.
    """
    if name is not None:
        p = profiles.get(name)
        data = p.redacted()
        flat = [k for k, v in data.items() if not isinstance(v, dict)] + [f"{k}.{sk}" for k, v in data.items()
                                                                        if isinstance(v, dict) for sk in v]
        return {"source": str(profiles.source), "name": p.name, "chain": list(p.chain), "executor": p.executor,
                "profile": data, "provenance": {k: _owner(p.provenance, k, _DEFAULT) for k in flat}}
    rows = []
    for n in profiles.names():
        try:
            p = profiles.get(n)
        except ConfigError as exc:
            rows.append({"name": n, "valid": False, "error": exc.message})
            continue
        keys = p.settings.model_dump()  # this executor's keys only: another executor's read as null in the row
        rows.append({"name": n, "valid": True, "executor": p.executor, "extends": list(p.chain[1:]),
                     "partition": keys.get("partition"), "address": keys.get("address"),
                     "tunnel": keys.get("tunnel"), "host": keys.get("host"),
                     "gpus_per_node": p.gpus_per_node, "gpu": p.settings.gpu,
                     "gpu_memory_gb": p.gpu_memory,
                     "host_memory_gb": p.settings.host_memory, "source": str(p.source)})
    return {"source": str(profiles.source), "profiles": rows, "sections": list(profiles.sections)}
