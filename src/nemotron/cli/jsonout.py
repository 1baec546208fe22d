"""``--json``: one JSON document on stdout, nothing else there.

Every command that takes ``--json`` builds a plain dict and hands it to :func:`emit`; while the dict is being built,
:func:`quiet_stdout` sends anything the command would print to stdout (tables, notes) to stderr instead, so stdout
holds exactly one JSON document. Each document names its schema in ``"schema"``: the file
``docs/schema/<name>.schema.json`` (JSON Schema draft 2020-12) that ``tests/cli/test_json_schemas.py`` validates
every output against. Errors stay one ``error:`` line on stderr with the usual exit codes (0, 1, 2, 130).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

#: The schema names (``docs/schema/<name>.schema.json``) and the commands that print them.
SCHEMAS = {
    "list": "nemotron RECIPE list --json",
    "profiles": "nemotron profiles [NAME] --json",
    "status": "nemotron RECIPE status [ID] --json",
    "jobs": "nemotron RECIPE jobs --json",
    "dry-run": "nemotron RECIPE STAGE --dry-run --json",
    "estimate": "nemotron RECIPE STAGE estimate --json",
    "data-inspect": "nemotron RECIPE data inspect PATH --json",
    "why": "nemotron RECIPE why [JOB] --json",
    "keys": "nemotron RECIPE keys STAGE [PREFIX] --json",
    "artifacts": "nemotron RECIPE artifacts [KIND[:vN]] [-c NAME] [--lineage] --json",
}
#: ``"schema"`` value of every document: ``nemotron/<name>/v1``.
VERSION = 1


def schema_id(name: str) -> str:
    return f"nemotron/{name}/v{VERSION}"


def plain(value: Any) -> Any:
    """``value`` as JSON types: tuples to lists, paths and other objects to strings, numpy scalars to numbers."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [plain(v) for v in items]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return plain(value.item())
    return str(value)


def document(name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"schema": schema_id(name), **plain(body)}


def emit(name: str, body: dict[str, Any], stream: Any = None) -> None:
    """Print ``body`` as the one JSON document of schema ``name`` on stdout (``stream``)."""
    if name not in SCHEMAS:
        raise KeyError(f"no schema {name!r}")
    out = stream if stream is not None else (_REAL_STDOUT[-1] if _REAL_STDOUT else sys.stdout)
    out.write(json.dumps(document(name, body), indent=2, ensure_ascii=False) + "\n")
    out.flush()


_REAL_STDOUT: list[Any] | None = None


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Within the block, what goes to ``sys.stdout`` goes to stderr; :func:`emit` still writes to the real stdout."""
    global _REAL_STDOUT
    saved = _REAL_STDOUT
    _REAL_STDOUT = [*(saved or []), sys.stdout]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _REAL_STDOUT = saved


def problem(p: Any) -> dict[str, Any]:
    """A :class:`nemotron.errors.Problem` as a dict (``text`` is the one-line rendering the terminal shows)."""
    return {"severity": p.severity, "key": p.key, "value": plain(p.value), "message": p.message, "valid": p.valid,
            "rule": p.rule, "text": p.render()}


def table(title: str | None, header: list[str], rows: list[list[Any]]) -> dict[str, Any]:
    return {"title": title, "header": [str(h) for h in header], "rows": [[str(c) for c in r] for r in rows]}


__all__ = ["SCHEMAS", "document", "emit", "plain", "problem", "quiet_stdout", "schema_id", "table"]
