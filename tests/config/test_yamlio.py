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
    ("a: 010", {"a": 10}), ("a: ~", {"a": None}), ("a: .inf", {"a": float("inf")}), ("a: 0x1F", {"a": 31}),
    ("a: 0o17", {"a": 15}), ("a: -0x10", {"a": -16}), ("a: '1_000'", {"a": "1_000"}), ("a: TRUE", {"a": True}),
    ("a: v1_000", {"a": "v1_000"}), ("a: 1.2.3", {"a": "1.2.3"}),
])
def test_yaml_1_2_scalars(text, value):
    assert yamlio.loads(text) == value


@pytest.mark.parametrize("text, meant", [("1_000", "1000 (or 0x3e8)"), ("0b101", "5 (or 0x5)"),
                                         ("0X800", "2048 (or 0x800)"), ("1_000.5", "1000.5"), ("[1, 2_048]", "2048 (or 0x800)")])
def test_a_number_only_python_reads_is_refused_never_a_silent_string(text, meant):
    """YAML 1.2 has no '_' separators, 0b or upper-case prefixes: PyYAML's YAML 1.1 (the job side) or Python would
    read these as numbers, so the value is refused with the one it probably means, in a file (line:column) and on
    the command line (the override names its key: tests/config/test_int_forms.py), never kept as a string."""
    with pytest.raises(yamlio.NotANumber) as exc:
        yamlio.loads(f"a: {text}", "f.yaml")
    assert exc.value.message.startswith("f.yaml:1:") and "is not a number in YAML 1.2" in exc.value.message
    assert exc.value.hint.startswith(f"write {meant}; numbers are written 2048, 0x800 (hex), 0o4000 (octal) or 1e3")


def test_strings_that_would_read_back_as_numbers_are_quoted():
    for text in ("0x800", "0o17", "2_048", "0b101", "04:00:00"):
        out = yamlio.dumps({"a": text})
        assert yamlio.loads(out) == {"a": text} and yaml.safe_load(out) == {"a": text}, out


def test_a_syntax_error_names_the_line_and_column():
    with pytest.raises(ConfigError, match=r"^f\.yaml:2:4: invalid YAML: mapping values are not allowed here$"):
        yamlio.loads("a: 1\n  b: 2\n", "f.yaml")
