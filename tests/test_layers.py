"""The package's import graph: no circles, and every arrow points down the flow argv → compile → validate →
plan → run/submit (docs/architecture.md).

Every ``import`` / ``from ... import`` of every module under ``src/nemotron`` counts, wherever it stands (module
level, inside a function, under ``if TYPE_CHECKING``): an import hidden in a function is still an arrow. The
graph is read from the source with :mod:`ast`, nothing is imported.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "nemotron"

#: The folders (and top-level modules) of ``nemotron``, lowest first. A module may import its own folder and any
#: folder listed before it. ``errors`` and ``report`` (the error types, exit codes and terminal primitives) sit
#: below everything; ``console`` is the console entry point.
LAYERS = ("errors", "report", "config", "profiles", "layout", "data", "runtime", "validation", "launch", "cli",
          "console", "__main__")

#: Deliberate arrows from a lower layer to a higher one: (importer, imported). At most two may ever be listed.
UPWARD_ALLOWED: frozenset[tuple[str, str]] = frozenset()


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["nemotron", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _targets(mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod.split(".")[: len(mod.split(".")) - (node.level - (1 if is_pkg else 0))]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        # `from pkg import module` imports the module; `from module import name` the module
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix for a in node.names]
    out = []
    for name in names:
        while name not in mods and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in mods and name != mod:
            out.append(name)
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: {internal modules it imports}}`` over every import statement of every module."""
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[mod].update(_targets(mod, path.name == "__init__.py", node, mods))
        graph.setdefault(mod, set())
    return dict(graph)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int:
    """The rank of ``module``'s folder in :data:`LAYERS` (``nemotron`` itself, the package root, is -1)."""
    parts = module.split(".")
    return -1 if len(parts) == 1 else LAYERS.index(parts[1])


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets if layer(b) > layer(a)}


#: ``runtime/``'s own order (docs/architecture.md): the top modules (the dispatcher every ``run.py`` calls, and what a
#: finished stage measured) and ``runtime/common/`` (what several families share) sit below the family packages, one
#: per registry kind (``megatron`` also runs ``convert``). A family may import common and the top, never the reverse.
RUNTIME_TOP = ("nemotron.runtime", "nemotron.runtime.dispatch", "nemotron.runtime.stage_metrics")
RUNTIME_SHARED = "nemotron.runtime.common"


def runtime_family(module: str) -> str | None:
    """The family package of a ``nemotron.runtime`` module (``megatron`` of ``nemotron.runtime.megatron.trainer``);
    None for the top modules and ``common``, and for modules outside ``runtime``."""
    parts = module.split(".")
    if parts[:2] != ["nemotron", "runtime"] or module in RUNTIME_TOP or parts[2] == "common":
        return None
    return parts[2]


def runtime_upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Arrows from ``runtime``'s top modules or ``runtime.common`` into a family package."""
    low = {m for m in graph if m in RUNTIME_TOP or m.startswith(RUNTIME_SHARED)}
    return {(a, b) for a in low for b in graph[a] if runtime_family(b)}


def runtime_loose(modules: list[str]) -> list[str]:
    """Modules at the top of ``runtime/`` besides :data:`RUNTIME_TOP`: a runtime belongs to its family's package."""
    return sorted(m for m in modules if m.startswith("nemotron.runtime.") and m.count(".") == 2
                  and m not in RUNTIME_TOP and not (PACKAGE / "runtime" / m.split(".")[2]).is_dir())


def test_graph_is_read():
    graph = import_graph()
    # a few arrows that must be seen, one of them inside a function body
    assert "nemotron.config.compile" in graph["nemotron.cli.pipeline"]
    assert "nemotron.runtime.megatron.megatron_bridge" in graph["nemotron.validation.checks"]  # imported inside functions
    assert sum(map(len, graph.values())) > 300


def test_every_folder_has_a_layer():
    unplaced = sorted({m.split(".")[1] for m in import_graph() if "." in m} - set(LAYERS))
    assert not unplaced, f"folders/modules of nemotron without a place in LAYERS: {unplaced}"


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_arrows_point_down():
    assert len(UPWARD_ALLOWED) <= 2
    wrong = sorted(upward(import_graph()) - UPWARD_ALLOWED)
    assert not wrong, "imports from a lower layer to a higher one:\n" + "\n".join(f"{a} -> {b}" for a, b in wrong)


def test_runtime_is_grouped_by_family():
    """A new runtime module goes into its family's package (or ``common/``), not loose at the top of ``runtime/``;
    the top modules and ``common/`` import no family."""
    graph = import_graph()
    loose = runtime_loose(list(graph))
    assert not loose, (f"modules at the top of runtime/: {loose}; put each into its kind's package "
                       "(runtime/megatron/, rl/, quantization/, eval/) or runtime/common/ (docs/architecture.md)")
    assert {runtime_family(m) for m in graph} - {None} == {"megatron", "rl", "quantization", "eval"}
    wrong = sorted(runtime_upward(graph))
    assert not wrong, "runtime's top or common/ imports a family:\n" + "\n".join(f"{a} -> {b}" for a, b in wrong)


def test_checks_can_fail():
    """The checks above on a graph made to break them."""
    graph = {"nemotron.config.a": {"nemotron.config.b"}, "nemotron.config.b": {"nemotron.config.a"},
             "nemotron.data.x": {"nemotron.cli.main"}, "nemotron.cli.main": set()}
    assert circles(graph) == [["nemotron.config.a", "nemotron.config.b"]]
    assert upward(graph) == {("nemotron.data.x", "nemotron.cli.main")}
    graph = {"nemotron.runtime.common.model": {"nemotron.runtime.megatron.trainer"},
             "nemotron.runtime.dispatch": {"nemotron.runtime.rl.rl_data", "nemotron.runtime.common.settings"},
             "nemotron.runtime.megatron.trainer": {"nemotron.runtime.common.model", "nemotron.runtime.rl.rl_data"}}
    assert runtime_upward(graph) == {("nemotron.runtime.common.model", "nemotron.runtime.megatron.trainer"),
                                     ("nemotron.runtime.dispatch", "nemotron.runtime.rl.rl_data")}
    assert runtime_loose(["nemotron.runtime.dispatch", "nemotron.runtime.new_stage", "nemotron.runtime.rl",
                          "nemotron.runtime.rl.warmup"]) == ["nemotron.runtime.new_stage"]
