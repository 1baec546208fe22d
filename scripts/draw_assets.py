#!/usr/bin/env python
"""Draw the pictures in ``assets/`` from the model catalogue and the stage registry.

    python scripts/draw_assets.py            # redraw assets/*.png and assets/pictures.json
    python scripts/draw_assets.py --check    # exit 1 (naming what moved) when the catalogue or registry no
                                             # longer matches what the committed pictures were drawn from

Two pictures, each drawn from data only (nothing typed by hand, so they cannot drift from the code):

``assets/ultra3-layer-pattern.png``
    Nemotron 3 Ultra's hybrid layer pattern (:data:`nemotron.config.catalogue.ULTRA`: 108 layers, one cell per
    layer: Mamba-2, LatentMoE, attention; then its MTP block per depth), the published 4-layer slice
    (``ultra4layer``, the ``tiny`` configs' model) with the source layers it keeps marked on the full pattern,
    and the ``small`` model of the ``local`` configs.
``assets/ultra3-stage-graph.png``
    The stage graph of :data:`nemotron.config.registry.STAGES`: each stage and the artifacts it consumes and
    produces (the registry's ``consumes``/``produces`` of each stage's ``default`` config).

``assets/pictures.json`` holds the data each picture was drawn from and the sha256 of the PNG written from it;
``tests/test_assets.py`` recomputes the data from the code and compares (so a changed pattern or stage row fails
the test until this script is run again), and checks each PNG's hash. Needs matplotlib (the ``plots`` extra:
``pip install 'nemotron-cli[plots]'``) to draw; ``--check`` does not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"
RECORD = ASSETS / "pictures.json"
PATTERN_PNG = "ultra3-layer-pattern.png"
GRAPH_PNG = "ultra3-stage-graph.png"

# one colour per layer symbol (Megatron-Core hybrid_layer_allocation.Symbols: M, E, *, -)
COLOURS = {"M": "#76b900", "E": "#1f77b4", "*": "#d62728", "-": "#7f7f7f"}


def _catalogue():
    sys.path.insert(0, str(ROOT / "src"))
    from nemotron.config import catalogue

    return catalogue


def pattern_data() -> dict:
    """What the layer picture shows: per model, its name, main pattern (one symbol per layer), MTP pattern and
    depths, layer counts per symbol, and for a slice the source layers it keeps."""
    cat = _catalogue()
    models = [cat.get("ultra"), *(cat.get(name) for name in cat.PUBLISHED_SLICES), cat.get("small")]
    out = []
    for spec in models:
        out.append({
            "name": spec.name, "pattern": spec.pattern, "mtp_pattern": spec.mtp_pattern,
            "mtp_depths": spec.mtp_depths, "counts": spec.counts(),
            "slice_of": spec.slice_of, "slice_layers": list(spec.slice_layers),
        })
    return {"symbols": dict(cat.SYMBOL_NAMES), "models": out}


def graph_data() -> dict:
    """What the stage graph shows: each stage's name, command, kind, consumed and produced artifacts, in the
    registry's order (``pipe``'s order)."""
    sys.path.insert(0, str(ROOT / "src"))
    from nemotron.config.registry import STAGES

    return {"stages": [{"name": s.name, "command": " ".join(s.command), "kind": s.kind,
                        "consumes": list(s.consumes), "produces": list(s.produces)} for s in STAGES]}


def drawn_data() -> dict:
    """``{png file name: data}`` for every picture."""
    return {PATTERN_PNG: pattern_data(), GRAPH_PNG: graph_data()}


def _figure_bytes(fig) -> bytes:
    import io

    buf = io.BytesIO()
    # no timestamps or software versions in the file: the same data gives the same bytes with one matplotlib
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None}, bbox_inches="tight")
    return buf.getvalue()


def draw_pattern(data: dict) -> bytes:
    """The layer-pattern PNG (bytes) for :func:`pattern_data`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    models = data["models"]
    symbols = data["symbols"]
    width = max(len(m["pattern"]) + 2 + len(m["mtp_pattern"]) * max(1, m["mtp_depths"]) for m in models)
    gap = 1.35  # rows apart, in cell heights: room for each row's label above it
    fig, ax = plt.subplots(figsize=(14, 1.1 * len(models) + 1.2))
    for row, m in enumerate(models):
        y = (len(models) - 1 - row) * gap
        for i, sym in enumerate(m["pattern"]):
            ax.add_patch(Rectangle((i, y), 0.92, 0.7, color=COLOURS[sym]))
        x = len(m["pattern"]) + 1
        for depth in range(m["mtp_depths"]):
            for sym in m["mtp_pattern"]:
                ax.add_patch(Rectangle((x, y), 0.92, 0.7, color=COLOURS[sym], alpha=0.55, hatch="//"))
                x += 1
            x += 0.3
        c = m["counts"]
        what = ", ".join(f"{c[s]} {symbols[s]}" for s in symbols if c.get(s))
        label = f"{m['name']}: {len(m['pattern'])} layers ({what})"
        if m["mtp_depths"]:
            label += f" + MTP {m['mtp_pattern']} x{m['mtp_depths']}"
        if m["slice_of"]:
            label += f"; source layers {', '.join(map(str, m['slice_layers']))} of {m['slice_of']}"
            base = next((b for b in models if b["name"] == m["slice_of"]), None)
            if base is not None:
                by = (len(models) - 1 - models.index(base)) * gap
                for i in m["slice_layers"]:
                    ax.add_patch(Rectangle((i - 0.04, by - 0.06), 1.0, 0.82, fill=False, lw=1.6, ec="black"))
        ax.text(0, y + 0.78, label, fontsize=9, va="bottom")
    handles = [Patch(color=COLOURS[s], label=f"{s}  {symbols[s]}") for s in symbols
               if any(s in m["pattern"] + m["mtp_pattern"] for m in models)]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="MTP block (per depth)"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=len(handles), frameon=False,
              fontsize=9)
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(-0.2, (len(models) - 1) * gap + 1.2)
    ax.axis("off")
    ax.set_title("Hybrid layer patterns (nemotron.config.catalogue); boxed: the layers a slice keeps", fontsize=11)
    out = _figure_bytes(fig)
    plt.close(fig)
    return out


def _graph_layout(stages: list[dict]) -> dict[tuple[str, str], tuple[float, float]]:
    """Column and row of every node (``("stage", name)`` or ``("artifact", kind)``): a node's column is one more
    than the largest column of the nodes it comes from (longest path), rows in registry order within a column."""
    col: dict[tuple[str, str], int] = {}
    producer = {a: s["name"] for s in stages for a in s["produces"]}
    # stages come in pipe order, so a producer is placed before its consumers
    for s in stages:
        before = [col[("artifact", a)] for a in s["consumes"] if ("artifact", a) in col]
        col[("stage", s["name"])] = (max(before) + 1) if before else 0
        for a in s["produces"]:
            col[("artifact", a)] = col[("stage", s["name"])] + 1
    for s in stages:  # an artifact no stage produces sits just before its first consumer
        for a in s["consumes"]:
            if a not in producer:
                col.setdefault(("artifact", a), col[("stage", s["name"])] - 1)
    rows: dict[int, int] = {}
    pos = {}
    for node, c in col.items():
        pos[node] = (float(c), float(-rows.get(c, 0)))
        rows[c] = rows.get(c, 0) + 1
    return pos


def draw_graph(data: dict) -> bytes:
    """The stage-graph PNG (bytes) for :func:`graph_data`: stages as boxes, artifacts as rounded labels, arrows
    from a stage to what it produces and from an artifact to each stage that consumes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    stages = data["stages"]
    pos = _graph_layout(stages)
    xs = [x for x, _ in pos.values()]
    ys = [y for _, y in pos.values()]
    fig, ax = plt.subplots(figsize=(1.75 * (max(xs) + 1), 1.0 * (max(-y for y in ys) + 1) + 1.2))
    sx, sy = 1.0, 1.0
    boxes = {}
    for (what, name), (x, y) in pos.items():
        if what == "stage":
            stage = next(s for s in stages if s["name"] == name)
            text = f"{stage['command']}\n({stage['kind']})"
            style = dict(boxstyle="square,pad=0.4", fc="#76b900", ec="black")
            weight = "bold"
        else:
            text = name
            style = dict(boxstyle="round,pad=0.3", fc="#eeeeee", ec="#555555")
            weight = "normal"
        boxes[(what, name)] = ax.text(x * sx, y * sy, text, ha="center", va="center", fontsize=8, bbox=style,
                                      fontweight=weight, zorder=3)
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.axis("off")
    fig.canvas.draw()  # the boxes' outlines are known once drawn: each arrow runs from outline to outline
    to_data = ax.transData.inverted()

    def centre(node: tuple[str, str]) -> tuple[float, float]:
        box = boxes[node].get_bbox_patch().get_window_extent()
        return (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2

    def edge(node: tuple[str, str], toward: tuple[float, float]) -> tuple[float, float]:
        """Where the line from ``node``'s centre toward a point (display units) leaves its box, in data units."""
        cx, cy = centre(node)
        box = boxes[node].get_bbox_patch().get_window_extent()
        dx, dy = toward[0] - cx, toward[1] - cy
        t = min(box.width / 2 / abs(dx) if dx else float("inf"), box.height / 2 / abs(dy) if dy else float("inf"))
        return tuple(to_data.transform((cx + t * dx, cy + t * dy)))

    def connect(src: tuple[str, str], dst: tuple[str, str]) -> None:
        ax.add_patch(FancyArrowPatch(edge(src, centre(dst)), edge(dst, centre(src)), arrowstyle="-|>", mutation_scale=12, lw=1.0,
                                     color="#333333", shrinkA=1, shrinkB=1, zorder=4))

    for s in stages:
        for a in s["produces"]:
            connect(("stage", s["name"]), ("artifact", a))
        for a in s["consumes"]:
            connect(("artifact", a), ("stage", s["name"]))
    ax.set_title("ultra3 stages (green) and the artifacts they consume and produce (nemotron.config.registry)",
                 fontsize=10)
    out = _figure_bytes(fig)
    plt.close(fig)
    return out


DRAW = {PATTERN_PNG: draw_pattern, GRAPH_PNG: draw_graph}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(record_path: Path = RECORD) -> list[str]:
    """What differs between the committed record and the code now: one line per picture whose data moved, whose
    PNG is missing, or whose PNG is not the one recorded. Empty when the pictures are current."""
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{record_path}: cannot be read ({exc}); run `python scripts/draw_assets.py`"]
    problems = []
    for name, data in drawn_data().items():
        entry = record.get(name)
        png = record_path.parent / name
        if not isinstance(entry, dict) or entry.get("data") != data:
            problems.append(f"{record_path.name}: the data of {name} differs from the catalogue/registry now")
        elif not png.is_file():
            problems.append(f"{png}: missing")
        elif sha256(png.read_bytes()) != entry.get("sha256"):
            problems.append(f"{png}: not the PNG recorded in {record_path.name} (sha256 differs)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare the committed pictures with the code; draw nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for line in problems:
            print(f"draw_assets: {line}; run `python scripts/draw_assets.py`", file=sys.stderr)
        return 1 if problems else 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("draw_assets: matplotlib is not installed: pip install 'nemotron-cli[plots]'", file=sys.stderr)
        return 2
    ASSETS.mkdir(exist_ok=True)
    record = {}
    for name, data in drawn_data().items():
        png = DRAW[name](data)
        (ASSETS / name).write_bytes(png)
        record[name] = {"sha256": sha256(png), "data": data}
        print(f"wrote {(ASSETS / name).relative_to(ROOT)} ({len(png):,} bytes)")
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
