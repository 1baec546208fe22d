"""YAML with YAML 1.2 scalars, and a renderer that annotates each value with its source.

PyYAML resolves scalars by YAML 1.1 rules, where ``04:00:00`` is the integer 14400 (base 60) and
``on``/``no`` are booleans. A Slurm time or a country code must stay a string, so this loader
resolves only the YAML 1.2 core schema: ``true``/``false``, ``null``/``~``, integers (decimal, ``0x`` hex, ``0o``
octal), floats (``1e-5`` included), everything else a string. A plain scalar that Python reads as a number but
YAML 1.2 does not (``2_048``, ``0b101``, ``0X800``) is refused (:class:`NotANumber`), never taken as the string: where
an int is expected it would be one, and where the text is meant, quoting says so (``'"2_048"'``).
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


#: The number forms of the config's YAML 1.2 (the core schema), named by every message about an int.
INT_FORMS = "2048, 0x800 (hex), 0o4000 (octal) or 1e3"

#: Plain scalars Python's ``int(text, 0)`` / ``float(text)`` read as numbers that the YAML 1.2 core schema does not:
#: digit separators (``2_048``, ``1_000.5``), ``0b`` binary, upper-case ``0X``/``0O`` prefixes. (YAML 1.1 readers,
#: PyYAML's default among them, take several of them as ints.) Tried after the int and float resolvers.
_PYTHON_NUMBER = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9_]+)?|0[bBoOxX][0-9a-fA-F_]+)$")


class NotANumber(ConfigError):
    """A plain value that looks like a number in Python but is none in YAML 1.2 (``2_048``, ``0b101``, ``0X800``).

    Attributes:
        text: the value as written.
    """

    def __init__(self, where: str, text: str) -> None:
        self.text = text
        message, hint = number_refusal(text)
        super().__init__(f"{where}: {message}" if where else message, hint)


def number_refusal(text: str) -> tuple[str, str]:
    """``(message, hint)`` refusing ``text``, a plain value that only Python reads as a number: the message names
    the value, the hint the YAML 1.2 value it probably means and the accepted forms (:data:`INT_FORMS`)."""
    try:
        n: Any = int(text, 0)
        meant = f"{n}" + (f" (or {n:#x})" if n >= 0 else "")
    except ValueError:
        try:
            meant = repr(float(text))
        except ValueError:
            meant = None
    return (f"{text!r} is not a number in YAML 1.2 (the config's syntax: no '_' digit separators, no 0b, "
            "lower-case 0x/0o prefixes)",
            (f"write {meant}; " if meant else "") + f"numbers are written {INT_FORMS}; "
            f"for the text, quote it: '\"{text}\"'")


class _NumberNotYaml(yaml.constructor.ConstructorError):
    def __init__(self, node: yaml.ScalarNode) -> None:
        super().__init__(None, None, f"{node.value!r} is not a YAML 1.2 number", node.start_mark)
        self.text = node.value


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    return int(text, 0) if re.match(r"[-+]?0[xo]", text) else int(text)


def _refuse_python_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    raise _NumberNotYaml(node)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    return float(loader.construct_scalar(node).replace(".inf", "inf").replace(".Inf", "inf").replace(".nan", "nan"))


for _cls in (_Loader, _FastLoader):
    _cls.yaml_implicit_resolvers = {}
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    _cls.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
    _cls.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|[-+]?0x[0-9a-fA-F]+|[-+]?0o[0-7]+)$"),
                               list("-+0123456789"))
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."),
    )
    _cls.add_implicit_resolver("tag:nemotron:python-number", _PYTHON_NUMBER, list("-+0123456789"))
    _cls.add_constructor("tag:yaml.org,2002:int", _construct_int)
    _cls.add_constructor("tag:yaml.org,2002:float", _construct_float)
    _cls.add_constructor("tag:nemotron:python-number", _refuse_python_number)


def loads(text: str, source: str = "<string>") -> Any:
    """Parse YAML text (YAML 1.2 scalars).

    Raises:
        ConfigError: naming ``source`` and the line and column of the syntax error; :class:`NotANumber` for a plain
            value only Python reads as a number (``2_048``).
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
        if isinstance(exc, _NumberNotYaml):
            raise NotANumber(where, exc.text) from None
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
        ConfigError: when a flow list or mapping is malformed, or the text holds bytes that were not UTF-8;
            :class:`NotANumber` (no place in its message) for ``2_048``, ``0b101``, ``0X800``.
    """
    if text == "":
        return ""
    if any("\udc80" <= ch <= "\udcff" for ch in text):  # bytes of argv that were not UTF-8 (PEP 383)
        import os

        raise ConfigError(f"value '{os.fsencode(text).decode('utf-8', 'backslashreplace')}': not UTF-8",
                          "give the value in UTF-8")
    try:
        return loads(text, f"value {text!r}")
    except NotANumber as exc:
        raise NotANumber("", exc.text) from None


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # quote strings that a YAML 1.1 reader would turn into something else (04:00:00, on, no), or that our YAML 1.2
    # loader reads as a number or refuses (0o17, 0x800, 0b101)
    style = None
    if re.fullmatch(r"[-+]?(?:[0-9][0-9_:.]*|0[xXoObB][0-9a-fA-F_]+)|on|off|yes|no|On|Off|Yes|No|ON|OFF|YES|NO|y|n", data):
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
