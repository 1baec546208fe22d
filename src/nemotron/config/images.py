"""``stages/images.toml``, the image table, read in one place: image key -> {image, frameworks, commits, used_by}."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from typing import Any

from nemotron.config.paths import stages_dir
from nemotron.errors import ConfigError


@lru_cache(maxsize=1)
def image_table() -> dict[str, dict[str, Any]]:
    """``stages/images.toml``: image key → {image, frameworks, used_by}.

    Raises:
        ConfigError: when the file is not valid TOML (names file and line).
    """
    path = stages_dir() / "images.toml"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def framework_version(image_key: str, framework: str) -> str | None:
    """The version ``stages/images.toml`` pins for ``framework`` in image ``image_key``."""
    entry = image_table().get(image_key) or {}
    value = (entry.get("frameworks") or {}).get(framework)
    return str(value) if value is not None else None


def keylist_version(image_key: str, framework: str) -> str | None:
    """The name of the stored key list (``keylists/<framework>-<name>.json``) for what ``stages/images.toml``
    pins: the version, followed by the short commit of ``[image_key].commits`` when one is pinned and the
    version does not already end in it (``[nemo]``: Megatron-Bridge ``0.5.0`` at ``4588417...`` →
    ``0.5.0-4588417``, the branch commit the key list was generated from; ``[nemo-rl]``: ``main-7ea279a``)."""
    version = framework_version(image_key, framework)
    commit = str(((image_table().get(image_key) or {}).get("commits") or {}).get(framework) or "")[:7]
    if version is None or not commit or version.endswith(commit):
        return version
    return f"{version}-{commit}"
