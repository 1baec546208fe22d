"""The pictures in ``assets/`` are what ``scripts/draw_assets.py`` draws from the catalogue and the registry now.

A changed layer pattern, slice or stage row fails :func:`test_committed_pictures_are_current` until the script is
run again (the record ``assets/pictures.json`` holds the data each PNG was drawn from and the PNG's sha256).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"


def _script():
    spec = importlib.util.spec_from_file_location("draw_assets", REPO_ROOT / "scripts" / "draw_assets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_pictures_are_current() -> None:
    draw = _script()
    assert draw.check() == []
    record = json.loads((REPO_ROOT / "assets" / "pictures.json").read_text())
    assert set(record) == {"ultra3-layer-pattern.png", "ultra3-stage-graph.png"}
    models = {m["name"]: m for m in record["ultra3-layer-pattern.png"]["data"]["models"]}
    # what the picture must show: Ultra's 108 layers (Table 1 counts) and the published slice's source layers
    assert models["ultra"]["counts"] == {"M": 48, "E": 48, "*": 12, "-": 0}
    assert models["ultra4layer"]["slice_layers"] == [0, 1, 7, 8]
    stages = [s["name"] for s in record["ultra3-stage-graph.png"]["data"]["stages"]]
    assert stages[0] == "data-prep-pretrain" and "quantize" in stages


def test_check_names_drift_and_a_replaced_png(tmp_path: Path) -> None:
    """The check can fail: a record whose data no longer matches the code, and a PNG that is not the recorded one."""
    draw = _script()
    for name in ("pictures.json", "ultra3-layer-pattern.png", "ultra3-stage-graph.png"):
        shutil.copy(REPO_ROOT / "assets" / name, tmp_path / name)
    record = json.loads((tmp_path / "pictures.json").read_text())
    record["ultra3-layer-pattern.png"]["data"]["models"][0]["pattern"] += "M"  # as if the catalogue moved
    (tmp_path / "pictures.json").write_text(json.dumps(record))
    (tmp_path / "ultra3-stage-graph.png").write_bytes(b"\x89PNG not this one")
    problems = draw.check(tmp_path / "pictures.json")
    assert len(problems) == 2
    assert "ultra3-layer-pattern.png differs from the catalogue/registry" in problems[0]
    assert "ultra3-stage-graph.png: not the PNG recorded" in problems[1]
    (tmp_path / "pictures.json").write_text("{")
    assert "cannot be read" in draw.check(tmp_path / "pictures.json")[0]


def test_graph_layout_puts_each_consumer_after_its_producer() -> None:
    draw = _script()
    data = draw.graph_data()
    pos = draw._graph_layout(data["stages"])
    for stage in data["stages"]:
        x = pos[("stage", stage["name"])][0]
        assert all(pos[("artifact", a)][0] < x for a in stage["consumes"]), stage["name"]
        assert all(pos[("artifact", a)][0] == x + 1 for a in stage["produces"]), stage["name"]


def test_drawing_gives_png_from_the_data() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("matplotlib (the plots extra) is required under CI=true", pytrace=False)
        pytest.skip("matplotlib is not installed (pip install 'nemotron-cli[plots]')")
    draw = _script()
    for name, data in draw.drawn_data().items():
        png = draw.DRAW[name](data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n", name
        assert png == draw.DRAW[name](data), f"{name}: the same data must give the same bytes"
