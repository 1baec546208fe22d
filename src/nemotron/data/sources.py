"""Input sources: find files, cut them into work pieces, read records with their file and line.

Formats (detected from the name, or set with ``format``):

========== =================================== ===========================================
format     files                                a record is / its position is
========== =================================== ===========================================
``jsonl``  ``*.jsonl``, ``*.ndjson``            a non-blank line / its 1-based line number
``jsonl.gz`` ``*.jsonl.gz``, ``*.json.gz``      a non-blank line / its line number
``json``   ``*.json`` (one array of objects)   an element / the line where it starts
``parquet`` ``*.parquet``                       a row / its 0-based row number
``text``   anything else (``*.txt``, ``*.py``)  the whole file / line 1
``text-line`` ``text`` with ``sample_by: line``  a non-blank line / its line number
``text-paragraph`` ``sample_by: paragraph``     lines up to a blank line / its first line
========== =================================== ===========================================

``sample_by`` (a pretraining blend key, the term of Hugging Face ``datasets``' text reader) chooses how plain text
is cut into documents: ``document`` (default: one file, one document), ``line`` or ``paragraph``
(:func:`text_format`). The cut formats are record ranges like ``jsonl.gz`` (counted from 0, read from the start).

A **piece** is a contiguous range of records of one file: a byte range of a JSONL file (cut at line
starts, so no record is split or repeated), a row range of a Parquet file (cut at row-group
boundaries), or a record range of a gzip/JSON-array file (never split: their records cannot be
addressed without reading everything before them). Pieces are computed from the files alone, so
the plan — and therefore the output — never depends on how many workers run it.

Hugging Face dataset ids (``hf://org/name`` with ``subset`` and ``split``) are resolved to their data
files with the ``datasets`` package when it is installed and the hub is reachable; each file is
downloaded once by the worker that reads it and then read like a local file.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import gzip
import json
import os
import struct
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemotron.errors import ConfigError, NemotronError, RuntimeFailure

FORMATS = ("jsonl", "jsonl.gz", "json", "parquet", "text")
#: Values of a dataset's ``sample_by`` (first = default) and the reading format each gives plain text.
SAMPLE_BY = {"document": "text", "line": "text-line", "paragraph": "text-paragraph"}


def text_format(fmt: str, sample_by: str = "document") -> str:
    """The reading format of a file of format ``fmt`` under ``sample_by`` (:data:`SAMPLE_BY`): plain text cut
    into lines or paragraphs; every other format unchanged."""
    return SAMPLE_BY.get(sample_by, "text") if fmt == "text" else fmt
#: Record problems a reader reports (the pipeline adds ``empty``, ``short`` and ``too_long``).
READ_PROBLEMS = ("malformed_json", "not_object", "missing_field", "wrong_type", "invalid_utf8")
_SCAN_BLOCK = 1 << 24  # 16 MiB reads when scanning for line starts
#: The UTF-8 byte order mark: every text format may start with it; it is never part of the first record.
BOM = b"\xef\xbb\xbf"


def strip_bom(raw: bytes) -> bytes:
    """``raw`` without a leading UTF-8 byte order mark (it holds no newline: line numbers stay)."""
    return raw[len(BOM):] if raw.startswith(BOM) else raw


@contextlib.contextmanager
def reading(path: str) -> Iterator[None]:
    """Turn an error of reading the input file ``path`` inside the block into one line.

    Any ``OSError`` (missing, a folder, permission, I/O), ``EOFError`` (truncated gzip), ``zlib.error``
    (corrupt gzip data) or ``pyarrow`` error (a Parquet file that is truncated or not Parquet) becomes
    :class:`RuntimeFailure` ``<path>: cannot read (<error type>: <message>)`` (exit 1, with a hint to check
    the file's path and format); a
    :class:`NemotronError` raised in the block passes unchanged. Works around a generator's ``yield``.

    Raises:
        RuntimeFailure: as above.
    """
    try:
        yield
    except NemotronError:
        raise
    except Exception as exc:
        arrow = sys.modules.get("pyarrow.lib")
        if not isinstance(exc, (OSError, EOFError, zlib.error)) and not (
                arrow is not None and isinstance(exc, arrow.ArrowException)):
            raise
        detail = " ".join(str(exc).split()) or "no detail"
        kind = "zlib.error" if isinstance(exc, zlib.error) else type(exc).__name__
        hint = ("check the blend's path and format for this file: it must be what its name says (Parquet, JSONL, "
                "gzip) and whole (a copy cut short or a renamed file cannot be read)")
        raise RuntimeFailure(f"{path}: cannot read ({kind}: {detail})", hint) from None


def detect_format(path: str, explicit: str | None = None) -> str:
    """The format of ``path``: ``explicit`` when given, else from the file name (see module table).

    Raises:
        ConfigError: ``explicit`` is not one of :data:`FORMATS`.
    """
    if explicit:
        if explicit not in FORMATS:
            raise ConfigError(f"format={explicit!r} is not supported; valid: {', '.join(FORMATS)}")
        return explicit
    name = path.lower()
    if name.endswith((".jsonl.gz", ".json.gz", ".ndjson.gz")):
        return "jsonl.gz"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".json"):
        return "json"
    if name.endswith(".parquet"):
        return "parquet"
    return "text"


def is_remote(path: str) -> bool:
    """Whether ``path`` names a Hugging Face dataset (``hf://org/name``)."""
    return path.startswith("hf://")


def expand(pattern: str, *, exclude: list[str] | tuple[str, ...] = (), fmt: str | None = None) -> list[str]:
    """The files ``pattern`` names, sorted: a file, a folder (searched recursively) or a glob (``**`` recurses).

    A folder contributes the files of a known data format (``fmt`` when given, else JSONL, JSONL.gz,
    JSON and Parquet). ``exclude`` holds glob patterns matched against each file's path relative to the
    folder or the glob's fixed prefix (and against its full path). Returns an empty list when nothing
    matches; the caller decides whether that is an error.
    """
    pattern = os.path.expanduser(pattern)
    if os.path.isfile(pattern):
        return [pattern]
    if os.path.isdir(pattern):
        base = pattern
        found = []
        for dirpath, dirs, names in os.walk(pattern):
            dirs.sort()
            for n in names:
                full = os.path.join(dirpath, n)
                if not os.path.isfile(full):  # a broken link, a pipe or a socket is no input file
                    continue
                f = detect_format(full)
                if (fmt and (fmt == f or fmt == "text")) or (not fmt and f != "text"):
                    found.append(full)
    else:
        base = _glob_base(pattern)
        found = [p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)]
    out = []
    for p in found:
        rel = os.path.relpath(p, base)
        if any(fnmatch.fnmatch(rel, x) or fnmatch.fnmatch(p, x) for x in exclude):
            continue
        out.append(p)
    return sorted(out)


def _glob_base(pattern: str) -> str:
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return str(Path(*fixed)) if fixed else "."


# --------------------------------------------------------------------------------------------------
# pieces


@dataclass(frozen=True)
class Piece:
    """A contiguous range of records of one file.

    Attributes:
        file: local path, or an ``hf://`` file URL.
        fmt: one of :data:`FORMATS`.
        start / stop: JSONL — byte offsets (``stop`` None = end of file); Parquet, JSONL.gz, JSON —
            record indices (``stop`` None = to the end); text — 0 / None.
        line: 1-based line number of the first record (JSONL/JSONL.gz; 1 otherwise).
        est_bytes: estimated text bytes in the piece (sizes shards; not exact).
    """

    file: str
    fmt: str
    start: int = 0
    stop: int | None = None
    line: int = 1
    est_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "fmt": self.fmt, "start": self.start, "stop": self.stop, "line": self.line,
                "est_bytes": self.est_bytes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Piece:
        return cls(**d)

    def label(self) -> str:
        rng = "" if (self.start == 0 and self.stop is None) else f"[{self.start}:{'' if self.stop is None else self.stop}]"
        return f"{self.file}{rng}"


def file_size_estimate(path: str, fmt: str, text_field: str = "text") -> int:
    """Estimated text bytes of a whole file: its size, the gzip trailer's uncompressed size, or the
    Parquet text column's uncompressed size."""
    if fmt == "jsonl.gz":
        size = os.path.getsize(path)
        if size < 4:  # no gzip trailer: reading the file reports what is wrong with it
            return size
        with open(path, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            (isize,) = struct.unpack("<I", fh.read(4))
        # ISIZE is the size modulo 2**32; never estimate below the compressed size
        return max(isize, size)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        md = pq.ParquetFile(path).metadata
        return sum(_rg_text_bytes(md.row_group(i), text_field) for i in range(md.num_row_groups))
    return os.path.getsize(path)


def _rg_text_bytes(rg, text_field: str) -> int:
    top = text_field.split(".")[0]
    total = 0
    for j in range(rg.num_columns):
        col = rg.column(j)
        if col.path_in_schema.split(".")[0] == top:
            total += col.total_uncompressed_size
    return total or rg.total_byte_size


#: The first bytes of every gzip file (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"


#: Parquet's magic bytes, at the start and the end of every file (Apache Parquet format: ``PAR1``, data, the
#: footer (Thrift ``FileMetaData``), its length as a 4-byte little-endian integer, ``PAR1``).
PARQUET_MAGIC = b"PAR1"


def parquet_layout(path: str) -> tuple[int, int] | str:
    """``(data bytes, footer bytes)`` of a local Parquet file, read from its first 4 and last 8 bytes only (no pyarrow:
    the dry run stays free of heavy imports), or a string saying why it is not Parquet (no magic bytes at the start,
    none at the end: cut short, a footer length that overruns the file). ``data bytes`` is what lies between the
    leading magic and the footer: 0 for a file without row groups (0 rows)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(4)
        if head != PARQUET_MAGIC:
            return "Parquet magic bytes not found at its start"
        if size < 12:
            return f"cut short: {size} bytes, fewer than Parquet's 12 of magic bytes and footer length"
        fh.seek(size - 8)
        tail = fh.read(8)
    if tail[4:] != PARQUET_MAGIC:
        return "Parquet magic bytes not found at its end (cut short?)"
    footer = int.from_bytes(tail[:4], "little")
    if footer + 12 > size:
        return f"its footer length ({footer} bytes) overruns the file ({size} bytes)"
    return size - 12 - footer, footer


def unreadable(path: str, fmt: str) -> ConfigError | None:
    """What makes the local input ``path`` unreadable as ``fmt``, found before any work from a few bytes: a Parquet
    file whose layout is not Parquet's (:func:`parquet_layout`: not Parquet, or cut short), a ``jsonl.gz`` file
    without gzip's magic bytes. None when it reads, for an empty file (rule ``data-empty``'s) and for JSONL, JSON and
    text (checked record by record, each bad one counted). The message names the file; the same words as the
    runtime's :func:`reading` (which said it only in the work, exit 1)."""
    hint = ("check the blend's path and format for this file: it must be what its name says (Parquet, JSONL, "
            "gzip) and whole (a copy cut short or a renamed file cannot be read)")
    try:
        if os.path.getsize(path) == 0:
            return None
        if fmt == "parquet":
            layout = parquet_layout(path)
            if isinstance(layout, str):
                return ConfigError(f"{path}: not a readable Parquet file ({layout})", hint)
        elif fmt == "jsonl.gz":
            with open(path, "rb") as fh:
                if fh.read(2) != GZIP_MAGIC:
                    return ConfigError(f"{path}: not a gzip file (its first bytes are not gzip's 1f 8b)", hint)
    except OSError as exc:
        return ConfigError(f"{path}: cannot read ({exc.strerror or exc})", hint)
    return None


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """An unsigned LEB128 varint of ``buf`` at ``i``: ``(value, next index)``."""
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _skip(buf: bytes, i: int, ttype: int) -> int:
    """Index after one Thrift compact-protocol value of type ``ttype`` at ``i`` (Apache Thrift compact protocol:
    1/2 bool in the type, 3 byte, 4-6 zigzag varints, 7 double, 8 binary, 9/10 list/set, 11 map, 12 struct)."""
    if ttype in (1, 2):
        return i
    if ttype == 3:
        return i + 1
    if ttype in (4, 5, 6):
        return _varint(buf, i)[1]
    if ttype == 7:
        return i + 8
    if ttype == 8:
        n, i = _varint(buf, i)
        return i + n
    if ttype in (9, 10):
        head = buf[i]
        i += 1
        n, etype = head >> 4, head & 0x0F
        if n == 15:
            n, i = _varint(buf, i)
        for _ in range(n):
            i = i + 1 if etype in (1, 2) else _skip(buf, i, etype)
        return i
    if ttype == 11:
        n, i = _varint(buf, i)
        if n:
            kv = buf[i]
            i += 1
            for _ in range(n):
                i = _skip(buf, _skip(buf, i, kv >> 4), kv & 0x0F)
        return i
    if ttype == 12:
        while True:
            head = buf[i]
            i += 1
            if head == 0:
                return i
            if head >> 4 == 0:
                i = _varint(buf, i)[1]  # a long-form field id
            i = _skip(buf, i, head & 0x0F)
    raise ValueError(f"Thrift compact type {ttype} at byte {i}")


def parquet_num_rows(path: str) -> int | None:
    """``FileMetaData.num_rows`` of a local Parquet file (field 3 of its Thrift compact footer), read without pyarrow
    so that the dry run stays free of heavy imports; None when it is not readable Parquet (:func:`unreadable` says
    why), empty, or its footer does not parse."""
    try:
        layout = parquet_layout(path) if os.path.getsize(path) else None
        if layout is None or isinstance(layout, str):
            return None
        with open(path, "rb") as fh:
            fh.seek(4 + layout[0])
            buf = fh.read(layout[1])
        i, field = 0, 0
        while buf[i] != 0:
            head = buf[i]
            i += 1
            delta, ttype = head >> 4, head & 0x0F
            if delta:
                field += delta
            else:
                raw, i = _varint(buf, i)
                field = (raw >> 1) ^ -(raw & 1)
            if field == 3 and ttype == 6:
                raw, _ = _varint(buf, i)
                return (raw >> 1) ^ -(raw & 1)
            i = _skip(buf, i, ttype)
    except (OSError, IndexError, ValueError):
        return None
    return None


def check_parquet_field(path: str, text_field: str) -> None:
    """Raise ConfigError when a Parquet file has no column ``text_field`` (names the columns it has)."""
    import pyarrow.parquet as pq

    names = pq.ParquetFile(path).schema_arrow.names
    if text_field.split(".")[0] not in names:
        raise ConfigError(f"{path}: no column {text_field!r} (columns: {', '.join(names)}); set the dataset's text_field")


def split_file(path: str, fmt: str, target_bytes: int, *, start: int = 0, line: int = 1,
               text_field: str = "text") -> list[Piece]:
    """Cut the records of ``path`` from ``start`` to its end into pieces of about ``target_bytes``.

    JSONL is cut at line starts (one pass over the bytes to find them and count lines); Parquet at
    row-group boundaries; other formats give one piece.
    """
    if fmt == "jsonl":
        size = os.path.getsize(path)
        if size - start <= target_bytes * 1.5:
            return [Piece(path, fmt, start, None, line, size - start)]
        return _split_jsonl(path, size, start, line, target_bytes)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        md = pq.ParquetFile(path).metadata
        pieces: list[Piece] = []
        row = 0
        cur_start, cur_bytes = start, 0
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            lo, hi = row, row + rg.num_rows
            row = hi
            if hi <= start:
                continue
            frac = (hi - max(lo, start)) / max(rg.num_rows, 1)
            cur_bytes += int(_rg_text_bytes(rg, text_field) * frac)
            if cur_bytes >= target_bytes and hi < md.num_rows:
                pieces.append(Piece(path, fmt, cur_start, hi, 1, cur_bytes))
                cur_start, cur_bytes = hi, 0
        if cur_start < md.num_rows or not pieces:
            pieces.append(Piece(path, fmt, cur_start, None, 1, cur_bytes))
        return pieces
    est = file_size_estimate(path, fmt, text_field)
    return [Piece(path, fmt, start, None, line if fmt == "jsonl.gz" else 1, est)]


def split_json_array(path: str, target_bytes: int) -> list[Piece]:
    """Cut the elements of the JSON array file ``path`` into pieces of about ``target_bytes`` (element index
    ranges; ``est_bytes`` is each range's length in characters).

    One pass of the JSON parser over the file finds the element boundaries. A file of at most 1.5 x
    ``target_bytes``, or one that is not valid UTF-8 or not one well-formed array, is one piece (its reader
    reports the problem, at the same record, as before).
    """
    size = os.path.getsize(path)
    whole = [Piece(path, "json", 0, None, 1, size)]
    if size <= target_bytes * 1.5:
        return whole
    try:
        text = strip_bom(Path(path).read_bytes()).decode("utf-8")
    except UnicodeDecodeError:
        return whole
    dec = json.JSONDecoder()
    n = len(text)
    i = _skip_ws(text, 0)
    if i >= n or text[i] != "[":
        return whole
    i = _skip_ws(text, i + 1)
    bounds: list[tuple[int, int]] = []  # (start, end) character offsets of each element
    while i < n and text[i] != "]":
        try:
            _obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return whole
        bounds.append((i, end))
        i = _skip_ws(text, end)
        if i < n and text[i] == ",":
            i = _skip_ws(text, i + 1)
        elif i >= n or text[i] != "]":
            return whole
    pieces: list[Piece] = []
    first, chars = 0, 0
    for k, (a, b) in enumerate(bounds):
        chars += b - a
        if chars >= target_bytes and k + 1 < len(bounds):
            pieces.append(Piece(path, "json", first, k + 1, 1, chars))
            first, chars = k + 1, 0
    pieces.append(Piece(path, "json", first, None, 1, max(chars, 1)))
    return pieces


def _split_jsonl(path: str, size: int, start: int, line: int, target: int) -> list[Piece]:
    pieces = []
    cur_start, cur_line = start, line
    pos, lineno = start, line
    next_cut = start + target
    with open(path, "rb") as fh:
        fh.seek(start)
        while True:
            block = fh.read(_SCAN_BLOCK)
            if not block:
                break
            base = pos
            # cut at the first line start at or after each target boundary inside this block
            while next_cut < base + len(block):
                nl = block.find(b"\n", max(next_cut - base - 1, 0))
                if nl < 0:
                    break
                cut = base + nl + 1
                cut_line = lineno + block.count(b"\n", 0, nl + 1)
                if cut >= size:
                    next_cut = size + 1
                    break
                pieces.append(Piece(path, "jsonl", cur_start, cut, cur_line, cut - cur_start))
                cur_start, cur_line = cut, cut_line
                next_cut = cut + target
            lineno += block.count(b"\n")
            pos += len(block)
    pieces.append(Piece(path, "jsonl", cur_start, None, cur_line, size - cur_start))
    return pieces


@dataclass
class RowScan:
    """Positions of the first rows of a file (from :func:`scan_rows`).

    ``starts[i]`` is where row ``i`` starts (byte offset for JSONL, record index otherwise) and
    ``lines[i]`` its line; ``end``/``end_line`` the position after the last scanned row. ``complete``
    says whether the file ended before ``limit`` rows were found.
    """

    starts: list[int]
    lines: list[int]
    end: int
    end_line: int
    complete: bool


def scan_rows(path: str, fmt: str, limit: int) -> RowScan:
    """Find where each of the first ``limit`` records of ``path`` starts (reads only as far as needed,
    except for JSON arrays, which are parsed whole)."""
    if fmt == "jsonl":
        starts, lines = [], []
        pos, lineno = 0, 1
        with open(path, "rb") as fh:
            for raw in fh:
                if len(starts) >= limit:
                    return RowScan(starts, lines, pos, lineno, False)
                if (strip_bom(raw) if pos == 0 else raw).strip():
                    starts.append(pos)
                    lines.append(lineno)
                pos += len(raw)
                lineno += 1
        return RowScan(starts, lines, pos, lineno, True)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        n = pq.ParquetFile(path).metadata.num_rows
        k = min(n, limit)
        return RowScan(list(range(k)), [1] * k, k, 1, n <= limit)
    if fmt == "text":
        return RowScan([0], [1], 1, 1, True) if limit >= 1 else RowScan([], [], 0, 1, False)
    # jsonl.gz / json: count records by reading them
    starts, lines = [], []
    k = 0
    for pos, _text, _reason, _detail in iter_records(Piece(path, fmt), "\x00no-field\x00"):
        if k >= limit:
            return RowScan(starts, lines, k, pos, False)
        starts.append(k)
        lines.append(pos)
        k += 1
    return RowScan(starts, lines, k, 0, True)


# --------------------------------------------------------------------------------------------------
# reading


def _get_field(obj: Any, field: str) -> Any:
    if not isinstance(obj, dict):
        return None
    if field in obj:
        return obj[field]
    cur: Any = obj
    for part in field.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


#: JSON type names of the values a record that is not an object can be (``[1, 2]``, ``"text"``, ``null``, ``3``)
_JSON_TYPES = {list: "a list", str: "a string", type(None): "null", bool: "a boolean", int: "a number", float: "a number"}


def _from_obj(obj: Any, field: str, pos: int) -> tuple[int, str | None, str | None, str | None]:
    if not isinstance(obj, dict):  # a JSON line that is [1, 2], "text" or null: no field to look for
        what = _JSON_TYPES.get(type(obj), type(obj).__name__)
        return pos, None, "not_object", f"the record is {what}, not a JSON object with field {field!r}"
    value = _get_field(obj, field)
    if value is None:
        return pos, None, "missing_field", f"no field {field!r}"
    if not isinstance(value, str):
        return pos, None, "wrong_type", f"field {field!r} is {type(value).__name__}, not text"
    return pos, value, None, None


def iter_records(piece: Piece, text_field: str) -> Iterator[tuple[int, str | None, str | None, str | None]]:
    """Yield ``(position, text, problem, detail)`` for each record of ``piece``, in file order.

    ``position`` is the line number (JSONL, JSONL.gz, JSON array) or the row number (Parquet); for a
    good record ``problem`` is None and ``text`` the document; otherwise ``text`` is None, ``problem``
    one of :data:`READ_PROBLEMS` and ``detail`` a short explanation. A malformed JSON array ends the
    file after one ``malformed_json`` record (nothing after the error can be located).

    Every text format may start with a UTF-8 byte order mark (skipped).

    Raises:
        RuntimeFailure: the file cannot be opened or read (:func:`reading`: I/O error, truncated or
            corrupt gzip, a Parquet file that is not one).
    """
    with reading(piece.file):
        if piece.fmt in ("jsonl", "jsonl.gz"):
            for lineno, raw in json_lines(piece):
                yield _parse_line(raw, lineno, text_field)
        elif piece.fmt == "json":
            yield from _iter_json_array(piece, text_field)
        elif piece.fmt == "parquet":
            yield from _iter_parquet(piece, text_field)
        elif piece.fmt in ("text-line", "text-paragraph"):
            yield from _iter_text_cut(piece)
        else:
            raw = strip_bom(Path(piece.file).read_bytes())
            try:
                yield 1, raw.decode("utf-8"), None, None
            except UnicodeDecodeError as exc:
                yield _bad_utf8(raw, exc)


def _iter_text_cut(piece: Piece):
    """The documents of a plain-text piece cut by lines (``text-line``: each non-blank line, its line end
    dropped) or paragraphs (``text-paragraph``: the lines up to a blank one, as written, without the last line
    end), with the line each starts at; ``piece.start``/``stop`` count documents from 0."""
    raw = strip_bom(Path(piece.file).read_bytes())
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield _bad_utf8(raw, exc)
        return
    k = 0
    block: list[str] = []
    first = 0
    lines = text.split("\n")
    for lineno, line in enumerate([*lines, ""], start=1):
        if piece.fmt == "text-line":
            if not line.strip() or lineno > len(lines):
                continue
            doc, at = line.removesuffix("\r"), lineno
        elif line.strip():
            if not block:
                first = lineno
            block.append(line)
            continue
        elif not block:
            continue
        else:
            doc, at = "\n".join(block), first
            block = []
        if piece.stop is not None and k >= piece.stop:
            return
        if k >= piece.start:
            yield at, doc, None, None
        k += 1


def _bad_utf8(raw: bytes, exc: UnicodeDecodeError, first_line: int = 1) -> tuple[int, None, str, str]:
    line = first_line + raw.count(b"\n", 0, exc.start)
    return line, None, "invalid_utf8", f"byte 0x{raw[exc.start]:02x} is not UTF-8"


def _parse_line(raw: bytes, lineno: int, field: str):
    obj, problem, detail = decode_json_line(raw)
    if problem is not None:
        return lineno, None, problem, detail
    return _from_obj(obj, field, lineno)


def _iter_json_array(piece: Piece, field: str):
    raw = strip_bom(Path(piece.file).read_bytes())
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield _bad_utf8(raw, exc)
        return
    for line, _index, obj, problem, detail in json_array_items(text, piece):
        yield (line, None, problem, detail) if problem is not None else _from_obj(obj, field, line)


def _iter_parquet(piece: Piece, field: str):
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(piece.file)
    top = field.split(".")[0]
    if top not in pf.schema_arrow.names:
        n = pf.metadata.num_rows
        stop = n if piece.stop is None else min(piece.stop, n)
        for row in range(piece.start, stop):
            yield row, None, "missing_field", f"no column {field!r}"
        return
    for group, lo, offsets in parquet_groups(pf.metadata, piece):
        table = pf.read_row_group(group, columns=[top])
        values = table.column(0).to_pylist()
        for j in offsets:
            v = values[j]
            if top != field:
                v = _get_field({top: v}, field)
            if v is None:
                yield lo + j, None, "missing_field", f"{field!r} is null"
            elif isinstance(v, bytes):
                try:
                    yield lo + j, v.decode("utf-8"), None, None
                except UnicodeDecodeError as exc:
                    yield lo + j, None, "invalid_utf8", f"byte 0x{v[exc.start]:02x} is not UTF-8"
            elif not isinstance(v, str):
                yield lo + j, None, "wrong_type", f"{field!r} is {type(v).__name__}, not text"
            else:
                yield lo + j, v, None, None


# --------------------------------------------------------------------------------------------------
# record boundaries of each format, shared by iter_records (one text field) and
# nemotron.data.records (whole objects)


def json_lines(piece: Piece) -> Iterator[tuple[int, bytes]]:
    """``(line, raw)`` for each non-blank line of a ``jsonl`` or ``jsonl.gz`` piece, in file order.

    ``line`` is the 1-based line number in the file, ``raw`` the line's bytes without its newline (and
    without a UTF-8 byte order mark at the start of the file). A
    ``jsonl`` piece is a byte range (``piece.start`` to ``piece.stop``, read in 16 MiB blocks, its first
    line numbered ``piece.line``); a ``jsonl.gz`` piece is a range of non-blank lines (``start`` to
    ``stop``, counted from 0).

    Raises:
        OSError, EOFError, zlib.error: the file cannot be opened or read (callers turn these into one
            message with :func:`reading`).
    """
    if piece.fmt == "jsonl.gz":
        k = 0
        with gzip.open(piece.file, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if lineno == 1:
                    raw = strip_bom(raw)
                if not raw.strip():
                    continue
                if piece.stop is not None and k >= piece.stop:
                    return
                if k >= piece.start:
                    yield lineno, raw.rstrip(b"\n")
                k += 1
        return
    lineno = piece.line
    with open(piece.file, "rb") as fh:
        fh.seek(piece.start)
        remaining = None if piece.stop is None else piece.stop - piece.start
        carry = b""
        first = piece.start == 0
        while remaining is None or remaining > 0:
            block = fh.read(_SCAN_BLOCK if remaining is None else min(_SCAN_BLOCK, remaining))
            if not block:
                break
            if remaining is not None:
                remaining -= len(block)
            if first:  # a byte order mark at the very start of the file (a block holds all 3 bytes)
                block, first = strip_bom(block), False
            lines = (carry + block).split(b"\n")
            carry = lines.pop()
            for raw in lines:
                if raw.strip():
                    yield lineno, raw
                lineno += 1
        if carry.strip():
            yield lineno, carry


def decode_json_line(raw: bytes) -> tuple[Any, str | None, str | None]:
    """One JSONL line parsed: ``(value, None, None)``, or ``(None, problem, detail)`` with ``problem``
    ``invalid_utf8`` (the byte and its 1-based column) or ``malformed_json`` (the parser's message and
    column)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, "invalid_utf8", f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8"
    try:
        return json.loads(text), None, None
    except json.JSONDecodeError as exc:
        return None, "malformed_json", f"{exc.msg} (column {exc.colno})"


def json_array_items(text: str, piece: Piece) -> Iterator[tuple[int, int, Any, str | None, str | None]]:
    """Elements ``piece.start`` to ``piece.stop`` (0-based, stop exclusive; None: to the end) of the
    JSON array ``text`` (a whole ``.json`` file), in order.

    Yields ``(line, index, value, None, None)``: the 1-based line where the element starts, its
    0-based index in the array and its parsed value. Where ``text`` is not one array of values, yields
    ``(line, index, None, "malformed_json", detail)`` once and stops (nothing after a syntax error can
    be located).
    """
    dec = json.JSONDecoder()
    n = len(text)
    i = _skip_ws(text, 0)
    if i >= n or text[i] != "[":
        yield text.count("\n", 0, i) + 1, 0, None, "malformed_json", "a .json file must hold one array of records"
        return
    i = _skip_ws(text, i + 1)
    line, last, k = 1, 0, 0
    if i < n and text[i] == "]":
        return
    while True:
        line += text.count("\n", last, i)
        last = i
        try:
            obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            yield exc.lineno, k, None, "malformed_json", f"{exc.msg} (column {exc.colno}); rest of the file skipped"
            return
        if piece.stop is not None and k >= piece.stop:
            return
        if k >= piece.start:
            yield line, k, obj, None, None
        k += 1
        i = _skip_ws(text, end)
        if i < n and text[i] == ",":
            i = _skip_ws(text, i + 1)
            continue
        if i < n and text[i] == "]":
            return
        line += text.count("\n", last, i)
        yield line, k, None, "malformed_json", "expected ',' or ']' between records; rest of the file skipped"
        return


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    return i


def parquet_groups(md: Any, piece: Piece) -> Iterator[tuple[int, int, range]]:
    """The row groups of a Parquet file that hold rows ``piece.start`` to ``piece.stop`` (0-based, stop
    exclusive; None: to the end), ``md`` being the file's ``pyarrow`` metadata.

    Yields ``(group, first_row, offsets)``: the group's index, the file row of its first row, and the
    offsets within the group of the piece's rows (so file row = ``first_row + offset``).
    """
    stop = md.num_rows if piece.stop is None else min(piece.stop, md.num_rows)
    row = 0
    for g in range(md.num_row_groups):
        lo, hi = row, row + md.row_group(g).num_rows
        row = hi
        if hi <= piece.start or lo >= stop:
            continue
        yield g, lo, range(max(piece.start, lo) - lo, min(stop, hi) - lo)


# --------------------------------------------------------------------------------------------------
# Hugging Face datasets (only where the `datasets` package and a hub are available)


def resolve_remote(path: str, subset: str | None, split: str | None) -> list[tuple[str, int]]:
    """Data files of a Hugging Face dataset ``hf://org/name``: ``[(url, size_bytes), ...]``, sorted.

    Raises:
        RuntimeFailure: ``datasets``/``huggingface_hub`` missing, or the hub cannot be reached (said within
            :data:`nemotron.data.hub.PROBE_SECONDS` by :func:`nemotron.data.hub.probe`).
    """
    repo = path[len("hf://"):].strip("/")
    try:
        import datasets  # noqa: F401
        from huggingface_hub import HfFileSystem
    except ImportError:
        raise RuntimeFailure(f"{path}: reading Hugging Face datasets needs the 'datasets' package",
                             "pip install datasets, or download the files and point the blend at them") from None
    from nemotron.data import hub

    reason = hub.probe()  # seconds, where the hub client's own retries take 25-30 s
    if reason is not None:
        raise RuntimeFailure(hub.unreachable(path, reason), hub.hint())
    try:
        import datasets as ds

        builder = ds.load_dataset_builder(repo, subset)
        files = builder.config.data_files or {}
        urls = list(files.get(split or "train", []))
        fs = HfFileSystem()
        out = [(u, int(fs.info(u).get("size") or 0)) for u in sorted(urls)]
    except Exception as exc:  # every hub failure reads the same to the user
        raise RuntimeFailure(f"{path} (subset {subset!r}, split {split!r}): cannot list its files on the hub "
                             f"({type(exc).__name__}: {exc})",
                             "check network access and HF_TOKEN, or download the data and use local paths") from None
    if not out:
        raise RuntimeFailure(f"{path}: subset {subset!r} has no files for split {split!r}")
    return out


def fetch_remote(url: str, cache_dir: str) -> str:
    """Download one ``hf://`` file into ``cache_dir`` (once; atomic) and return its local path."""
    from huggingface_hub import HfFileSystem

    from nemotron.data.files import tmp_name

    rel = url.split("://", 1)[1].replace("@", "_")
    local = Path(cache_dir) / rel
    if local.is_file():
        return str(local)
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(local)
    try:
        HfFileSystem().get_file(url, str(tmp))
        os.replace(tmp, local)
    except Exception as exc:
        Path(tmp).unlink(missing_ok=True)
        raise RuntimeFailure(f"{url}: download failed ({type(exc).__name__}: {exc})") from None
    return str(local)
