"""The one tree helper: dotted keys over nested mappings (read, test, set, list leaves)."""

from __future__ import annotations

from typing import Any


def dotted(path: tuple[str | int, ...] | list[str | int]) -> str:
    """``("a", "b", 0)`` → ``"a.b[0]"``."""
    out = ""
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else seg)
    return out


def _leaves(tree: Any, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    if isinstance(tree, dict) and tree:
        out = []
        for k, v in tree.items():
            out.extend(_leaves(v, (*prefix, k)))
        return out
    return [(prefix, tree)]


def leaves(tree: Any) -> list[tuple[str, Any]]:
    """``[(dotted key, value), ...]`` for every leaf of ``tree`` (lists are leaves)."""
    return [(dotted(p), v) for p, v in _leaves(tree) if p]


_MISSING = object()


def get(cfg: dict, key: str, default: Any = None) -> Any:
    """Value at dotted ``key`` (``a.b.c``) or ``default`` when any segment is missing."""
    node: Any = cfg
    for seg in key.split("."):
        if isinstance(node, dict) and seg in node:
            node = node[seg]
        else:
            return default
    return node


def has(cfg: dict, key: str) -> bool:
    return get(cfg, key, _MISSING) is not _MISSING


def put(cfg: dict, key: str, value: Any) -> None:
    """Set dotted ``key`` (creating mappings on the way)."""
    node = cfg
    parts = key.split(".")
    for seg in parts[:-1]:
        node = node.setdefault(seg, {})
    node[parts[-1]] = value


def as_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def unresolved(value: Any) -> bool:
    """A ``${...}`` text the compiler could not resolve yet."""
    return isinstance(value, str) and "${" in value
