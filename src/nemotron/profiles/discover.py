"""Where env.toml is and which profiles it names, read cheaply: the standard library only (no pydantic), so that a
stage's ``--help`` and the shell completion can list profiles fast. Loading and validating a profile is
:mod:`nemotron.profiles.load`'s.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from nemotron.errors import ConfigError

#: Environment variable naming the env.toml to use (after ``--env-file``).
ENV_FILE_VAR = "NEMOTRON_ENV_FILE"
#: The file name looked for from the working folder upward and in ``$XDG_CONFIG_HOME/nemotron/``.
ENV_FILE_NAME = "env.toml"
#: Top-level tables of env.toml that are settings, not profiles.
SECTIONS = ("wandb", "artifacts")


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


def profile_names(path: Path) -> list[tuple[str, str]]:
    """``[(name, executor), ...]`` of the profiles of env.toml ``path``, in file order, read without validating them
    (the executor through ``extends``; ``?`` where neither the profile nor a parent says). An unreadable file or a
    TOML syntax error gives ``[]``: the callers (help, completion) list what they can; commands that use a profile
    report the error (:func:`nemotron.profiles.load.load_profiles`)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    tables = {n: v for n, v in data.items() if isinstance(v, dict) and n not in SECTIONS}

    def executor(name: str, seen: tuple[str, ...] = ()) -> str:
        table = tables.get(name, {})
        if isinstance(table.get("executor"), str):
            return table["executor"]
        parent = table.get("extends")
        return executor(parent, (*seen, name)) if isinstance(parent, str) and parent not in seen else "?"

    return [(name, executor(name)) for name in tables]
