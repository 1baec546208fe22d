"""Compile a stage's config in tests exactly as the CLI does (no stand-in compiler)."""

from __future__ import annotations

import json
from typing import Any


def compile_stage(stage: str, name: str = "tiny", **overrides: Any) -> dict[str, Any]:
    """The resolved config `run.py` receives for `nemotron ... -c NAME key=value ...`. A nested key is
    written with double underscores (``pack__pack_size=...``); a mapping value sets each of its keys."""
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage

    args: list[str] = []

    def add(key: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                add(f"{key}.{k}", v)
        else:
            args.append(f"{key}={json.dumps(value)}")  # JSON is a YAML flow value

    for key, value in overrides.items():
        add(key.replace("__", "."), value)
    return compile_config(get_stage(stage), name, args).config


def config_valid(code: int, out: str) -> bool:
    """A dry run that found no problem: exit 0, or exit 2 with the verdict that the config is valid but the run would
    refuse to start (an input no run has made yet: a fresh NEMOTRON_HOME has no artifacts; the dry run refuses what
    the run refuses, so it exits 2 too). ``out``: the dry run's stdout (its verdict comes first)."""
    import re

    refused = re.search(r"^dry run: .*(the|its) config(s are| is) valid .*but the run would refuse to start", out, re.M)
    first = out.splitlines()[0] if out else ""
    return code == 0 or (code == 2 and refused is not None and re.match(r"dry run: (.*: )?\d+ errors?, ", first) is None)
