"""Whole records (JSON objects) of an input piece, with the position to name in messages.

:func:`nemotron.data.sources.iter_records` yields one text field per record (what pretraining needs);
chat and RL data need the whole object (``messages``, ``conversations``, ``reward_model`` ...). This
module reads the same :class:`~nemotron.data.sources.Piece` ranges with the same record boundaries (the
readers of :mod:`nemotron.data.sources`: :func:`~nemotron.data.sources.json_lines`,
:func:`~nemotron.data.sources.json_array_items`, :func:`~nemotron.data.sources.parquet_groups`), so a
plan made there means the same records here, and yields each record as a Python object.

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

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nemotron.data.sources import (
    Piece,
    decode_json_line,
    json_array_items,
    json_lines,
    parquet_groups,
    reading,
    strip_bom,
)
from nemotron.errors import RuntimeFailure

Record = tuple[int, int, Any, "str | None", "str | None"]


def where(file: str, fmt: str, position: int) -> str:
    """``file:line`` (``file: row N`` for Parquet), the prefix of every record message."""
    return f"{file}: row {position}" if fmt == "parquet" else f"{file}:{position}"


def iter_objects(piece: Piece) -> Iterator[Record]:
    """Every record of ``piece`` in file order (see the module docstring).

    Raises:
        RuntimeFailure: the file cannot be opened or read (see :func:`nemotron.data.sources.reading`).
    """
    with reading(piece.file):
        if piece.fmt in ("jsonl", "jsonl.gz"):
            for lineno, raw in json_lines(piece):
                yield _parse(raw, lineno)
        elif piece.fmt == "json":
            yield from _json_array(piece)
        elif piece.fmt == "parquet":
            yield from _parquet(piece)
        elif piece.fmt == "text":
            yield from _text_file(piece)
        else:
            raise RuntimeFailure(f"{piece.file}: format {piece.fmt!r} holds no records (JSONL, JSON, Parquet or plain text expected)")


def _text_file(piece: Piece) -> Iterator[Record]:
    """A plain-text file as one record ``{"text": <its whole text>}`` at line 1 (ordinal 0): one document per
    file, as pretraining reads plain text (SFT reads it as a speaker-prefixed transcript)."""
    raw = strip_bom(Path(piece.file).read_bytes())
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = 1 + raw.count(b"\n", 0, exc.start)
        yield line, 0, None, "invalid_utf8", f"byte 0x{raw[exc.start]:02x} is not UTF-8; the whole file is skipped"
        return
    yield 1, 0, {"text": text}, None, None


def _object(position: int, ordinal: int, obj: Any) -> Record:
    if not isinstance(obj, dict):
        return position, ordinal, None, "not_an_object", f"a record must be a JSON object, not {type(obj).__name__}"
    return position, ordinal, obj, None, None


def _parse(raw: bytes, lineno: int) -> Record:
    obj, problem, detail = decode_json_line(raw)
    if problem is not None:
        return lineno, lineno, None, problem, detail
    return _object(lineno, lineno, obj)


def _json_array(piece: Piece) -> Iterator[Record]:
    raw = strip_bom(Path(piece.file).read_bytes())  # at once: a JSON array cannot be streamed by position
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = 1 + raw.count(b"\n", 0, exc.start)
        yield line, 0, None, "invalid_utf8", f"byte 0x{raw[exc.start]:02x} is not UTF-8; the whole file is skipped"
        return
    for line, k, obj, problem, detail in json_array_items(text, piece):
        yield (line, k, None, problem, detail) if problem is not None else _object(line, k, obj)


def _parquet(piece: Piece) -> Iterator[Record]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(piece.file)
    for group, lo, offsets in parquet_groups(pf.metadata, piece):
        rows = pf.read_row_group(group).to_pylist()
        for j in offsets:
            yield lo + j, lo + j, rows[j], None, None
