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
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nemotron.config import artifacts
from nemotron.config.yamlio import read_utf8
from nemotron.errors import ConfigError
from nemotron.profiles.profile import ExecutorProfile, Profile, _build, _line_of, _merge, _normalize_secrets
from nemotron.profiles.discover import find_env_file
from nemotron.profiles.schema import _MODELS, SECTIONS, _suggest
from nemotron.profiles.sections import artifacts_root, tracking_env

# --------------------------------------------------------------------------- secrets helpers


# --------------------------------------------------------------------------- typed schema


# --------------------------------------------------------------------------- discovery and loading
def load_profiles(path: Path) -> Profiles:
    """Parse an env.toml into :class:`Profiles` (profiles are validated lazily, on :meth:`Profiles.get`;
    the settings sections ``[wandb]`` and ``[artifacts]`` at once, as strictly as profiles).

    Raises:
        ConfigError: unreadable file, not UTF-8 (file:line and the byte), a table name ``--run`` could never name
            (empty, blank or starting with ``-``; file:line), TOML syntax error (with its line), a top-level key that is
            not a table, or an unknown key or bad value in a settings section.
    """
    path = Path(path)
    text = read_utf8(path, "check the --env-file path and its permissions",
                     "TOML files are UTF-8: save env.toml as UTF-8 (iconv -f LATIN1 -t UTF-8)")
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
    for name in data:
        if not name.strip() or name.startswith("-"):  # a table --run/--batch could never name
            header = re.compile(r"\s*\[\s*[\"']?" + re.escape(name) + r"[\"']?\s*[\].]")
            line = next((i + 1 for i, ln in enumerate(text.splitlines()) if header.match(ln)), None)
            why = "is empty" if not name.strip() else "starts with '-' (read as an option)"
            raise ConfigError(f"{path}{f':{line}' if line else ''}: profile name {name!r} {why}: --run/--batch could "
                              "never name it", "rename the table, e.g. [local] or [cluster]")
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
        nested = self._nested(name.split(".", 1)[0])
        if name not in self._raw and name in nested or name in self._raw and nested and "executor" not in self._raw[name]:
            dotted = name if name in nested else nested[0]
            top = dotted.split(".", 1)[0]
            raise ConfigError(f"{self.source}: [{dotted}] is not a profile named {dotted!r}: in TOML a dot in a table "
                              f"name nests tables, so it is a table inside profile {top!r} (which has no executor)",
                              f'quote the name to keep the dot: ["{dotted}"] (then --run {dotted}), or name it '
                              f"without a dot")
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

    def _nested(self, top: str) -> list[str]:
        """The dotted names ``[top.sub]`` (``[my.cluster]``) that TOML read as tables nested in the table ``top``:
        its sub-tables that are no profile key (``env_vars``, ``secrets`` hold tables and are not counted), with the
        ones nested deeper; ``[]`` for a profile without them or a name not in the file."""
        fields = {f for m in _MODELS.values() for f in m.model_fields}

        def walk(prefix: str, table: dict) -> list[str]:
            out = []
            for key, value in table.items():
                if isinstance(value, dict) and key not in fields:
                    out.append(f"{prefix}.{key}")
                    out += walk(f"{prefix}.{key}", value)
            return out

        raw = self._raw.get(top)
        return walk(top, raw) if isinstance(raw, dict) else []

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


# --------------------------------------------------------------------------- validation


# --------------------------------------------------------------------------- the profile


# --------------------------------------------------------------------------- display


def load_profile(name: str | None, env_file: str | None, overrides: dict[str, Any]) -> ExecutorProfile | None:
    """The env.toml profile ``name`` with ``profile.KEY=VALUE`` overrides applied (None without a name).

    Raises:
        ConfigError: no env.toml found, unknown profile, invalid profile, profile overrides given
            without a profile, or an ``[artifacts] root`` that cannot be made on this machine.
    """

    if name is None and overrides:
        keys = ", ".join(f"profile.{k}" for k in overrides)
        raise ConfigError(f"{keys} given, but no profile is used", "add --run PROFILE or --batch PROFILE")
    path = find_env_file(env_file)
    use_env_file(path)  # [artifacts] root holds for runs here too
    loaded = load_profiles(path) if path is not None else None
    if loaded is not None:
        check_artifacts_root(loaded)
    if name is None:
        return None
    if loaded is None:
        raise ConfigError(f"profile {name!r} requested but no env.toml was found",
                          "copy env.toml.example to ./env.toml, or pass --env-file PATH (or set NEMOTRON_ENV_FILE)")
    profile = loaded.get(name)
    profile = profile.with_overrides(overrides) if overrides else profile
    profile.tracking_env = tracking_env(loaded.sections, path)  # [wandb]: the configs' W&B fallback
    return profile


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


def use_env_file(path: str | Path | None) -> None:
    """Keep records where env.toml ``path`` says (its ``[artifacts] root``), or in the default store when
    ``path`` is None or has no such section. Called for every stage command (with the env.toml it
    found: ``--env-file``, ``$NEMOTRON_ENV_FILE`` or discovery) and, when a batch job's outputs are
    recorded later, with the env.toml the job was submitted from.

    Raises:
        ConfigError: the env.toml cannot be read or its settings sections are invalid.
    """
    if path is None:
        artifacts.set_root(None)
        return
    loaded = load_profiles(Path(path))
    artifacts.set_root(artifacts_root(loaded.sections, loaded.source))
