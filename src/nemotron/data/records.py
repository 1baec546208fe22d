"""Whole records (JSON objects) of an input piece, with the position to name in messages.

:func:`nemotron.data.sources.iter_records` yields one text field per record (what pretraining needs);
chat and RL data need the whole object (``messages``, ``conversations``, ``reward_model`` ...). This
module reads the same :class:`~nemotron.data.sources.Piece` ranges — the same formats, the same record
boundaries, so a plan made with :mod:`nemotron.data.sources` means the same records here — and yields
each record as a Python object.

Each record comes as ``(position, ordinal, obj, problem, detail)``:

* ``position`` — what a message names: the 1-based line (JSONL, JSONL.gz, JSON array) or the 0-based
  row (Parquet); :func:`where` formats it.
* ``ordinal`` — a number unique within the file, stable whatever the piece boundaries: the line for
  JSONL/JSONL.gz, the element index for a JSON array, the row for Parquet. Seeded per-record decisions
  (held-out split, fractional passes) hash it.
* ``obj`` — the parsed record, or ``None`` with ``problem`` (``malformed_json``, ``invalid_utf8``,
  ``not_an_object``) and a short ``detail``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

from nemotron.data.sources import Piece
from nemotron.errors import RuntimeFailure

Record = tuple[int, int, Any, "str | None", "str | None"]
_BLOCK = 1 << 24


def where(file: str, fmt: str, position: int) -> str:
    """``file:line`` (``file: row N`` for Parquet), the prefix of every record message."""
    return f"{file}: row {position}" if fmt == "parquet" else f"{file}:{position}"


def iter_objects(piece: Piece) -> Iterator[Record]:
    """Every record of ``piece`` in file order (see the module docstring).

    Raises:
        RuntimeFailure: the file cannot be opened or read.
    """
    try:
        if piece.fmt == "jsonl":
            yield from _jsonl(piece)
        elif piece.fmt == "jsonl.gz":
            yield from _jsonl_gz(piece)
        elif piece.fmt == "json":
            yield from _json_array(piece)
        elif piece.fmt == "parquet":
            yield from _parquet(piece)
        else:
            raise RuntimeFailure(f"{piece.file}: format {piece.fmt!r} holds no records (JSONL, JSON or Parquet expected)")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise RuntimeFailure(f"{piece.file}: cannot read ({type(exc).__name__}: {exc})") from None


def _parse(raw: bytes, lineno: int) -> Record:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return lineno, lineno, None, "invalid_utf8", f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return lineno, lineno, None, "malformed_json", f"{exc.msg} (column {exc.colno})"
    if not isinstance(obj, dict):
        return lineno, lineno, None, "not_an_object", f"a record must be a JSON object, not {type(obj).__name__}"
    return lineno, lineno, obj, None, None


def _jsonl(piece: Piece) -> Iterator[Record]:
    lineno = piece.line
    with open(piece.file, "rb") as fh:
        fh.seek(piece.start)
        remaining = None if piece.stop is None else piece.stop - piece.start
        carry = b""
        while remaining is None or remaining > 0:
            block = fh.read(_BLOCK if remaining is None else min(_BLOCK, remaining))
            if not block:
                break
            if remaining is not None:
                remaining -= len(block)
            lines = (carry + block).split(b"\n")
            carry = lines.pop()
            for raw in lines:
                if raw.strip():
                    yield _parse(raw, lineno)
                lineno += 1
        if carry.strip():
            yield _parse(carry, lineno)


def _jsonl_gz(piece: Piece) -> Iterator[Record]:
    k = 0
    with gzip.open(piece.file, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            if piece.stop is not None and k >= piece.stop:
                return
            if k >= piece.start:
                yield _parse(raw.rstrip(b"\n"), lineno)
            k += 1


def _json_array(piece: Piece) -> Iterator[Record]:
    raw = open(piece.file, "rb").read()  # noqa: SIM115 - read at once; a JSON array cannot be streamed by position
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = 1 + raw.count(b"\n", 0, exc.start)
        yield line, 0, None, "invalid_utf8", f"byte 0x{raw[exc.start]:02x} is not UTF-8; the whole file is skipped"
        return
    dec = json.JSONDecoder()
    n = len(text)

    def skip(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    i = skip(0)
    if i >= n or text[i] != "[":
        yield text.count("\n", 0, i) + 1, 0, None, "malformed_json", "a .json file must hold one array of records"
        return
    i = skip(i + 1)
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
            if isinstance(obj, dict):
                yield line, k, obj, None, None
            else:
                yield line, k, None, "not_an_object", f"a record must be a JSON object, not {type(obj).__name__}"
        k += 1
        i = skip(end)
        if i < n and text[i] == ",":
            i = skip(i + 1)
            continue
        if i < n and text[i] == "]":
            return
        line += text.count("\n", last, i)
        yield line, k, None, "malformed_json", "expected ',' or ']' between records; rest of the file skipped"
        return


def _parquet(piece: Piece) -> Iterator[Record]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(piece.file)
    md = pf.metadata
    stop = md.num_rows if piece.stop is None else min(piece.stop, md.num_rows)
    row = 0
    for g in range(md.num_row_groups):
        lo, hi = row, row + md.row_group(g).num_rows
        row = hi
        if hi <= piece.start or lo >= stop:
            continue
        rows = pf.read_row_group(g).to_pylist()
        for j in range(max(piece.start, lo) - lo, min(stop, hi) - lo):
            yield lo + j, lo + j, rows[j], None, None
