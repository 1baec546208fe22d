"""One rule for numbers on the command line, every key alike: the config's YAML 1.2 reads ``2048``, ``0x800``,
``0o4000`` and ``1e3`` (for an int key: 1000) as numbers; ``2_048``, ``0b101`` and ``0X800``, numbers to Python and to
YAML 1.1 but not to YAML 1.2, are refused with one line naming the key and the value, never kept as the string ``"2_048"``
(which an int key refused as "got str" and a key whose default is null passed on to the job)."""

from __future__ import annotations

import pytest

from nemotron.config.compile import compile_config, parse_override
from nemotron.config.registry import get_stage
from nemotron.errors import ConfigError


@pytest.mark.parametrize("value, expected", [("2048", 2048), ("0x800", 2048), ("0o4000", 2048), ("1e3", 1000)])
def test_yaml_1_2_int_forms_are_ints(value, expected):
    c = compile_config(get_stage("data-prep-sft"), "tiny", [f"pack.pack_size={value}"], check_paths=False)
    got = c.config["pack"]["pack_size"]
    assert got == expected and type(got) is int


@pytest.mark.parametrize("stage, key", [("data-prep-sft", "pack.pack_size"),   # an int key (tiny: 4096)
                                        ("rlvr", "cluster.segment_size")])      # a key whose default is null
@pytest.mark.parametrize("value", ["2_048", "0b100000000000", "0X800"])
def test_python_only_numbers_are_refused_naming_key_and_value(stage, key, value):
    with pytest.raises(ConfigError) as exc:
        compile_config(get_stage(stage), "tiny", [f"{key}={value}"], check_paths=False)
    assert exc.value.message == (f"override '{key}={value}': '{value}' is not a number in YAML 1.2 (the config's "
                                 "syntax: no '_' digit separators, no 0b, lower-case 0x/0o prefixes)")
    assert exc.value.hint.startswith("write 2048 (or 0x800); numbers are written 2048, 0x800 (hex), 0o4000 (octal)")


def test_quoted_text_stays_text():
    assert parse_override('run.name="2_048"').value == "2_048"  # the shell's '"2_048"'
