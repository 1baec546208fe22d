"""The YAML loader: libyaml's parser (when PyYAML has it) and the pure-Python one give the same values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nemotron.config import yamlio
from nemotron.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _every_yaml() -> list[Path]:
    return sorted(p for d in ("stages", "tests/golden", "tests/fixtures") for p in (ROOT / d).rglob("*.y*ml"))


def test_both_parsers_give_the_same_values_on_every_shipped_yaml():
    if not hasattr(yaml, "CSafeLoader"):
        pytest.skip("this PyYAML has no libyaml: only the pure-Python parser runs")
    files = _every_yaml()
    assert len(files) > 40
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert yaml.load(text, Loader=yamlio._FastLoader) == yaml.load(text, Loader=yamlio._Loader), path


@pytest.mark.parametrize("text, value", [
    ("t: 04:00:00", {"t": "04:00:00"}), ("a: on", {"a": "on"}), ("a: no", {"a": "no"}), ("a: 1e-5", {"a": 1e-5}),
    ("a: 010", {"a": 10}), ("a: ~", {"a": None}), ("a: .inf", {"a": float("inf")}), ("a: 0x1F", {"a": "0x1F"}),
    ("a: 1_000", {"a": "1_000"}), ("a: TRUE", {"a": True}),
])
def test_yaml_1_2_scalars(text, value):
    assert yamlio.loads(text) == value


def test_a_syntax_error_names_the_line_and_column():
    with pytest.raises(ConfigError, match=r"^f\.yaml:2:4: invalid YAML: mapping values are not allowed here$"):
        yamlio.loads("a: 1\n  b: 2\n", "f.yaml")
