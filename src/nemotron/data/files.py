"""File helpers shared by the data stages: atomic writes, hashing, JSON that remembers line numbers.

Atomic write rule used everywhere in data prep: write to a uniquely named temporary file in the
target's folder (``<name>.tmp-<pid>-<random>``), flush and ``fsync`` it, then ``os.replace`` it onto
the target. A reader therefore sees either the old file or the complete new one, never a torn one,
and two writers of the same file (a resumed run racing a leftover worker of a killed one) cannot
corrupt each other: each renames its own complete temporary file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from nemotron.errors import ConfigError

TMP_MARK = ".tmp-"


def tmp_name(path: Path) -> Path:
    """A unique temporary sibling of ``path`` (same folder, so the final rename is atomic)."""
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file for writing that replaces ``path`` only when the block succeeds.

    On an exception the temporary file is removed and ``path`` is untouched.
    ``mode`` is ``"wb"`` or ``"w"`` (text, UTF-8).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(target)
    kwargs = {"encoding": "utf-8"} if "b" not in mode else {}
    fh = open(tmp, mode, **kwargs)  # noqa: SIM115 - closed below
    try:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        os.replace(tmp, target)
    except BaseException:
        fh.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + rename)."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON (stable bytes for equal objects), atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode())


def remove_tmp_files(folder: str | os.PathLike[str]) -> int:
    """Delete leftover temporary files (``*.tmp-*``) under ``folder``; returns how many were removed."""
    removed = 0
    root = Path(folder)
    if not root.is_dir():
        return 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if TMP_MARK in name:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(dirpath, name))
                    removed += 1
    return removed


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file's bytes, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def stable_hash(obj: Any, length: int = 16) -> str:
    """Short hex SHA-256 of ``obj`` serialised as canonical JSON (sorted keys); equal objects, equal hash."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:length]


class LineDict(dict):
    """A ``dict`` parsed from JSON that remembers the 1-based line its ``{`` was on (``.line``)."""

    line: int = 0


def load_json_lines_known(path: str | os.PathLike[str]) -> Any:
    """Parse a JSON file; every object comes back as a :class:`LineDict` carrying its line number.

    Meant for small hand-written files (blends, configs) whose errors must name a line: it uses the
    pure-Python JSON scanner, which is slow for large files.

    A UTF-8 byte order mark at the start is skipped.

    Raises:
        ConfigError: the file is missing or cannot be read (a folder, no permission), not UTF-8, or not
            valid JSON (message names file:line:column).
    """
    import json.decoder
    import json.scanner

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"{p}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start})") from None

    decoder = json.JSONDecoder(object_pairs_hook=LineDict)

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        s, end = s_and_end
        obj, new_end = json.decoder.JSONObject(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo)
        if isinstance(obj, LineDict):
            obj.line = s.count("\n", 0, end) + 1
        return obj, new_end

    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        return decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
