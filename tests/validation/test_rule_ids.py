"""Every rule id a Problem carries has one home: ``nemotron.layout.rules.RULES`` (a pure rule, or a
``declare(...)`` for a check that lives with its reader), and from there a row in docs/validation.md
(tests/validation/test_validation.py::test_docs_list_every_rule).

The scan reads the source of ``src/nemotron`` with :mod:`ast` (no imports of the scanned modules): the rule
id of every ``Problem(...)``, ``_err(...)``/``_warn(...)`` (keyword ``rule=``/``rid=`` or the 5th positional
argument) and of every call to a function of the package whose parameter is named ``rule`` or ``rid``
(e.g. ``validation/data.py``'s ``_problem(exc, "data-settings")``), plus string constants assigned to a
variable named ``rid`` or ``rule`` (``rid, out = "nemo-rl-opd-routing", []``).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from nemotron.layout import rules

SRC = Path(__file__).resolve().parents[2] / "src" / "nemotron"
ID_NAMES = ("rule", "rid")


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _rule_params(trees: dict[Path, ast.Module]) -> dict[str, int]:
    """Functions of the package with a parameter named ``rule``/``rid``: name -> its position."""
    out: dict[str, int] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.posonlyargs + node.args.args]
                for i, arg in enumerate(names):
                    if arg in ID_NAMES:
                        out[node.name] = i
    out.update({"Problem": 4, "_err": 4, "_warn": 4})  # Problem(key, value, message, valid, rule, severity)
    return out


def _const(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def rule_ids_in_source(root: Path = SRC) -> dict[str, list[str]]:
    """Rule id -> ``file:line`` places that raise it (ids written as string constants)."""
    trees = {f: ast.parse(f.read_text(), str(f)) for f in sorted(root.rglob("*.py"))}
    params = _rule_params(trees)
    found: dict[str, list[str]] = {}
    for f, tree in trees.items():
        where = f"{f.relative_to(root.parent)}"
        for node in ast.walk(tree):
            rid = None
            if isinstance(node, ast.Call) and _name(node.func) in params:
                pos = params[_name(node.func)]
                kw = [k.value for k in node.keywords if k.arg in ID_NAMES]
                arg = kw[0] if kw else (node.args[pos] if len(node.args) > pos else None)
                rid = _const(arg)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id in ID_NAMES:
                        rid = _const(node.value)
                    elif (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                          and len(target.elts) == len(node.value.elts)):
                        for t, v in zip(target.elts, node.value.elts):
                            if isinstance(t, ast.Name) and t.id in ID_NAMES and _const(v):
                                found.setdefault(_const(v), []).append(f"{where}:{node.lineno}")
            if rid:  # "" is no rule id (a Problem without one)
                found.setdefault(rid, []).append(f"{where}:{node.lineno}")
    return found


@functools.cache
def _package_ids() -> dict[str, list[str]]:
    return rule_ids_in_source()


def test_every_rule_id_in_source_is_declared():
    found = _package_ids()
    assert len(found) >= 80, sorted(found)  # the scan sees the ids (87 when written); a broken scan finds none
    missing = {rid: places for rid, places in found.items() if rid not in rules.RULES}
    assert not missing, ("rule ids raised but not declared in nemotron/layout/rules.py (add a declare(...) with "
                         f"title and source, and a row in docs/validation.md): {missing}")


def test_every_declared_rule_is_raised_somewhere():
    found = _package_ids()
    unused = [rid for rid in rules.RULES if rid not in found]
    assert not unused, f"declared in nemotron/layout/rules.py but raised nowhere: {unused}"


def test_scan_catches_an_undeclared_id(tmp_path):
    """The scan is what fails: an inline id in each form it reads is found."""
    pkg = tmp_path / "nemotron"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "def _problem(exc, rule):\n    return exc\n"
        "def f():\n"
        "    a = Problem(key='k', value=1, message='m', rule='new-kw')\n"
        "    b = Problem('k', 1, 'm', None, 'new-positional')\n"
        "    c = _problem(None, 'new-helper')\n"
        "    rid, out = 'new-variable', []\n"
        "    d = Problem('k', 1, 'm', rule='')\n")
    found = rule_ids_in_source(pkg)
    assert set(found) == {"new-kw", "new-positional", "new-helper", "new-variable"}
    assert found["new-kw"] == ["nemotron/m.py:4"]


@pytest.mark.parametrize("rid", sorted(rules.RULES))
def test_declared_rule_has_title_source_and_home(rid):
    info = rules.RULES[rid]
    assert info.title and info.source and info.holds_for, rid
    assert info.func is not None or info.where.startswith("nemotron."), rid


def test_declare_refuses_a_second_home():
    with pytest.raises(ValueError, match="declared twice"):
        rules.declare("tp-model", "t", "s", "h", "nemotron.validation")
