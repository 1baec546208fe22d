"""The settings sections of env.toml (``[wandb]``, ``[artifacts]``): what they hold and the checks on them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nemotron.config.tree import get
from nemotron.errors import ConfigError
from nemotron.profiles.schema import _suggest


def wandb_key_problem(project: str | None, env: dict[str, str]) -> str | None:
    """One line when W&B is on (``project``) but cannot log in without asking: no ``WANDB_API_KEY`` in the
    environment and ``WANDB_MODE`` is not ``offline`` / ``disabled``; else None. The key's value is never
    looked at beyond being non-empty."""
    if not project or env.get("WANDB_MODE") in ("offline", "disabled", "dryrun") or env.get("WANDB_API_KEY"):
        return None
    return (f"logger.wandb_project={project!r}: WANDB_API_KEY is not set in the job's environment; declare it as a "
            "profile secret (secrets = [\"WANDB_API_KEY\"] in env.toml), or set WANDB_MODE=offline")


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


def tracking_provenance(compiled: Any, env: Mapping[str, str], source: Path | str) -> dict[str, str]:
    """Provenance labels for the ``logger.wandb_*`` keys whose value came from the ``[wandb]`` section of
    the env.toml ``source`` (``env``: that section as variables, a profile's ``tracking_env``,
    :func:`tracking_env`) rather than from a layer of the config: dotted key -> ``"<env file name> [wandb] <key>"``.
    A key a config file or override set is left out, as is every key when there is no ``[wandb]`` section."""

    out: dict[str, str] = {}
    for key, var in WANDB_ENV.items():
        leaf = f"logger.wandb_{key}"
        if var in env and compiled.provenance.get(leaf) in ("schema", "default.yaml") \
                and get(compiled.config, leaf) == env[var]:
            out[leaf] = f"{Path(source).name} [wandb] {key}"
    return out


#: Keys of the ``[artifacts]`` settings section.
ARTIFACTS_KEYS = ("root",)


def artifacts_root(sections: dict[str, Any], source: Path | str = "env.toml") -> Path | None:
    """The folder ``[artifacts] root`` names (``~`` expanded; a relative path is taken from the env.toml's
    folder), or ``None`` without one: where :mod:`nemotron.config.artifacts` keeps its records.

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


