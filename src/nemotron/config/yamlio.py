"""YAML with YAML 1.2 scalars, and a renderer that annotates each value with its source.

PyYAML resolves scalars by YAML 1.1 rules, where ``04:00:00`` is the integer 14400 (base 60) and
``on``/``no`` are booleans. A Slurm time or a country code must stay a string, so this loader
resolves only the YAML 1.2 core schema: ``true``/``false``, ``null``/``~``, decimal integers,
floats (``1e-5`` included), everything else a string.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from nemotron.errors import ConfigError


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalar resolution (the pure-Python parser: its messages are the ones
    :func:`loads` reports)."""


#: The same loader on libyaml's parser when PyYAML was built with it (``yaml.CSafeLoader``): about ten times faster
#: on our configs (``nemotron ultra3 list`` parses 124 files). Resolution and construction are the Python classes'
#: own, so both loaders give the same values; a document libyaml refuses is parsed again by :class:`_Loader` for the
#: error message.
_FastLoader = type("_FastLoader", (getattr(yaml, "CSafeLoader", yaml.SafeLoader),), {})


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    return int(loader.construct_scalar(node))


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    return float(loader.construct_scalar(node).replace(".inf", "inf").replace(".Inf", "inf").replace(".nan", "nan"))


for _cls in (_Loader, _FastLoader):
    _cls.yaml_implicit_resolvers = {}
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    _cls.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
    _cls.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."),
    )
    _cls.add_constructor("tag:yaml.org,2002:int", _construct_int)
    _cls.add_constructor("tag:yaml.org,2002:float", _construct_float)


def loads(text: str, source: str = "<string>") -> Any:
    """Parse YAML text (YAML 1.2 scalars).

    Raises:
        ConfigError: naming ``source`` and the line and column of the syntax error.
    """
    try:
        return yaml.load(text, Loader=_FastLoader)  # SafeLoader subclasses, so yaml.load is safe here
    except yaml.YAMLError:
        pass
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {problem}", "check the indentation and quoting at that line") from None


def compose(text: str) -> Any:
    """The node tree of a YAML document that :func:`loads` accepted (keys' lines: ``node.start_mark.line``)."""
    try:
        return yaml.compose(text, Loader=_FastLoader)
    except yaml.YAMLError:
        return yaml.compose(text, Loader=_Loader)


def load_file(path: Path) -> Any:
    """Read and parse a YAML file (see :func:`loads`).

    Raises:
        ConfigError: when the file cannot be read, is not UTF-8 (``<file>:<line>: not UTF-8 text (byte 0xff at byte
            offset N)``) or cannot be parsed.
    """
    return loads(read_utf8(path), str(path))


def read_utf8(path: str | Path, read_hint: str | None = None,
              decode_hint: str = "save the file as UTF-8 (iconv -f LATIN1 -t UTF-8), or give the right file") -> str:
    """The text of ``path``, decoded as UTF-8.

    Raises:
        ConfigError: ``<path>: cannot read: ...`` (with ``read_hint``), or ``<path>:<line>: not UTF-8 text (byte 0xNN
            at byte offset N)`` (with ``decode_hint``)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}", read_hint) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {raw[exc.start]:#04x} at byte offset {exc.start})",
                          decode_hint) from None


def parse_scalar(text: str) -> Any:
    """Parse one command-line value as a YAML 1.2 flow value: ``8``, ``1e-4``, ``true``, ``null``,
    ``[1, 2]``, ``{a: 1}``, ``04:00:00`` (a string). An empty value is the empty string.

    Raises:
        ConfigError: when a flow list or mapping is malformed, or the text holds bytes that were not UTF-8.
    """
    if text == "":
        return ""
    if any("\udc80" <= ch <= "\udcff" for ch in text):  # bytes of argv that were not UTF-8 (PEP 383)
        import os

        raise ConfigError(f"value '{os.fsencode(text).decode('utf-8', 'backslashreplace')}': not UTF-8",
                          "give the value in UTF-8")
    return loads(text, f"value {text!r}")


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # quote strings that a YAML 1.1 reader would turn into something else (04:00:00, on, no)
    style = None
    if re.fullmatch(r"[-+]?[0-9][0-9_:.]*|on|off|yes|no|On|Off|Yes|No|ON|OFF|YES|NO|y|n", data):
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def dumps(data: Any) -> str:
    """Serialise to block-style YAML, keys in insertion order, strings quoted where YAML 1.1 readers
    would misread them."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)


def flow(value: Any) -> str:
    """One value as a single-line YAML flow scalar/collection (for annotated listings)."""
    text = yaml.dump(value, Dumper=_Dumper, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    return text.removesuffix("...").strip()
