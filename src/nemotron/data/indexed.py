"""Megatron indexed dataset writer (``<prefix>.bin`` + ``<prefix>.idx``), streamed and atomic.

Format (read by Megatron-Core's ``megatron.core.datasets.indexed_dataset.IndexedDataset``; all
integers little-endian):

* ``.bin``: the token ids of every sequence, concatenated, in the token dtype.
* ``.idx``: magic ``b"MMIDIDX\\x00\\x00"`` (9 bytes); version, uint64 = 1; dtype code, uint8
  (4 = int32, 8 = uint16; Megatron-Core's ``DType`` enum); sequence count N, uint64; document-index
  count N_doc + 1, uint64; N int32 sequence lengths (tokens); N int64 byte offsets of each sequence
  in ``.bin``; N_doc + 1 int64 document indices (index of each document's first sequence, then N).

Each document is written as one sequence, so the document indices are ``0, 1, ..., N``.

Token dtype: Megatron-Core (``DType.optimal_dtype``) stores ids as uint16 when the vocabulary size
is below 65,500 and as int32 otherwise; :func:`choose_dtype` does the same for ``"auto"``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from pathlib import Path
from typing import Any

from nemotron.data.files import tmp_name
from nemotron.errors import ConfigError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
#: Megatron-Core ``DType`` codes of the token dtypes we write.
DTYPE_CODES = {"uint16": 8, "int32": 4}
#: Megatron-Core's threshold: uint16 below this vocabulary size (``DType.optimal_dtype``).
UINT16_VOCAB_LIMIT = 65_500


def choose_dtype(vocab_size: int, requested: str = "auto") -> str:
    """The token dtype name (``"uint16"`` or ``"int32"``) for a vocabulary of ``vocab_size`` ids.

    ``"auto"`` follows Megatron-Core: uint16 when ``vocab_size < 65,500``, else int32.

    Raises:
        ConfigError: ``requested`` is not auto/uint16/int32, or uint16 is requested for a vocabulary
            whose ids do not fit in 16 bits (more than 65,536 ids: the largest id, vocab_size - 1, exceeds 65,535).
    """
    if requested == "auto":
        return "uint16" if vocab_size < UINT16_VOCAB_LIMIT else "int32"
    if requested not in DTYPE_CODES:
        raise ConfigError(f"output.dtype={requested!r}: unknown token dtype; valid: auto, uint16, int32")
    if requested == "uint16" and vocab_size > 65_536:
        raise ConfigError(
            f"output.dtype='uint16' cannot hold the token ids of a {vocab_size:,}-entry vocabulary "
            "(largest uint16 id is 65,535); valid: auto or int32"
        )
    return requested


class IndexedWriter:
    """Stream documents into ``<prefix>.bin``/``.idx``; nothing appears at the prefix until :meth:`finish`.

    Args:
        prefix: output path without suffix.
        dtype: ``"uint16"`` or ``"int32"`` (see :func:`choose_dtype`).

    Memory: the ``.bin`` bytes go straight to disk; only one int32 length per document is kept.
    """

    def __init__(self, prefix: str | os.PathLike[str], dtype: str) -> None:
        import numpy as np

        self._np = np
        self.prefix = Path(prefix)
        self.dtype = dtype
        self._np_dtype = np.dtype(dtype).newbyteorder("<")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin_path = self.prefix.with_name(self.prefix.name + ".bin")
        self._idx_path = self.prefix.with_name(self.prefix.name + ".idx")
        self._bin_tmp = tmp_name(self._bin_path)
        self._bin = open(self._bin_tmp, "wb")  # noqa: SIM115 - closed in finish/abort
        self._lengths: list[Any] = []
        self._hash = hashlib.sha256()
        self.tokens = 0
        self.documents = 0
        self.sha256 = ""

    def add(self, docs: list[list[int]]) -> None:
        """Append documents, each a list of token ids (one sequence per document)."""
        np = self._np
        if not docs:
            return
        lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        flat = np.fromiter((t for d in docs for t in d), dtype=np.int64, count=int(lengths.sum()))
        self.add_flat(flat, lengths)

    def add_flat(self, tokens: Any, lengths: Any) -> None:
        """Append documents given as one flat id array and their lengths.

        Args:
            tokens: 1-D integer array, the documents' ids concatenated (any integer dtype).
            lengths: 1-D integer array, tokens per document; each > 0, summing to ``len(tokens)``.

        Raises:
            ValueError: an empty document, a length mismatch, or an id outside the token dtype.
        """
        np = self._np
        lengths = np.asarray(lengths)
        if len(lengths) == 0:
            return
        if lengths.min() <= 0 or int(lengths.sum()) != len(tokens):
            raise ValueError("document lengths must be > 0 and sum to the number of tokens")
        if len(tokens) and (tokens.min() < 0 or tokens.max() > np.iinfo(self._np_dtype).max):
            raise ValueError(f"token id out of range for {self.dtype}")
        data = np.ascontiguousarray(tokens, dtype=self._np_dtype).tobytes()
        self._hash.update(data)
        self._bin.write(data)
        self._lengths.append(lengths.astype(np.int32))
        self.tokens += len(tokens)
        self.documents += len(lengths)

    def finish(self) -> tuple[Path, Path]:
        """Write the index, fsync both files and rename them into place; returns (bin, idx) paths."""
        np = self._np
        self._bin.flush()
        os.fsync(self._bin.fileno())
        self._bin.close()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int32)
        n = len(lengths)
        itemsize = self._np_dtype.itemsize
        pointers = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(lengths[:-1].astype(np.int64) * itemsize, out=pointers[1:])
        doc_idx = np.arange(n + 1, dtype=np.int64)
        idx_tmp = tmp_name(self._idx_path)
        with open(idx_tmp, "wb") as fh:
            fh.write(MAGIC)
            fh.write(struct.pack("<Q", VERSION))
            fh.write(struct.pack("<B", DTYPE_CODES[self.dtype]))
            fh.write(struct.pack("<Q", n))
            fh.write(struct.pack("<Q", n + 1))
            fh.write(lengths.astype("<i4").tobytes())
            fh.write(pointers.astype("<i8").tobytes())
            fh.write(doc_idx.astype("<i8").tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(self._bin_tmp, self._bin_path)
        os.replace(idx_tmp, self._idx_path)
        self.sha256 = self._hash.hexdigest()
        return self._bin_path, self._idx_path

    def abort(self) -> None:
        """Close and delete the temporary file (the prefix is left as it was)."""
        try:
            self._bin.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._bin_tmp)


def bin_size_problem(prefix: str | os.PathLike[str]) -> str | None:
    """Whether ``<prefix>.bin`` has the size its ``.idx`` describes, and every index entry lies inside it.

    Two steps: the index's header and its last length and pointer against the ``.bin``'s size (the check of
    Megatron-Core's ``IndexedDataset`` and of our training reader,
    :class:`nemotron.runtime.megatron.pretrain_data.Shard`; a truncated copy is the usual cause); then every
    entry, memory-mapped and vectorized (12 bytes of the index per sequence; the ``.bin`` is not read): each
    length (int32 tokens) and pointer (int64 bytes) is non-negative, each sequence ends inside the ``.bin`` and
    starts where the one before it ends (entry 0 at byte 0: the layout Megatron-Core's writer and
    :class:`IndexedWriter` give). A corrupt length in the middle of the index passes the first step and would
    make a reader take bytes beyond the file (nothing, or another document's tokens).

    Returns:
        None when the index and the ``.bin`` agree; else one line: ``"<prefix>.bin: <size> bytes, the index
        describes <expected>"`` (the training reader's own words), or ``"<prefix>.idx: entry <i>: ..."`` naming
        the first bad entry, or what is wrong with the index file itself.
    """
    import numpy as np

    idx, bin_path = Path(str(prefix) + ".idx"), Path(str(prefix) + ".bin")
    try:
        with open(idx, "rb") as fh:
            head = fh.read(34)
            if len(head) < 34 or head[:9] != MAGIC:
                return f"{idx}: not a Megatron index (bad magic)"
            (code,) = struct.unpack_from("<B", head, 17)
            (n,) = struct.unpack_from("<Q", head, 18)
            itemsize = {"uint16": 2, "int32": 4}.get({v: k for k, v in DTYPE_CODES.items()}.get(code, ""), 0)
            if not itemsize:
                return f"{idx}: dtype code {code} not written by this tool"
            expected = 0
            if n:
                fh.seek(34 + 4 * (n - 1))
                (length,) = struct.unpack("<i", fh.read(4))
                fh.seek(34 + 4 * n + 8 * (n - 1))
                (pointer,) = struct.unpack("<q", fh.read(8))
                expected = pointer + length * itemsize
        size = bin_path.stat().st_size
    except (OSError, struct.error) as exc:
        return f"{idx}: cannot read: {getattr(exc, 'strerror', None) or exc}"
    if size != expected:
        return f"{bin_path}: {size} bytes, the index describes {expected}"
    if not n:
        return None
    try:
        lengths = np.memmap(idx, dtype="<i4", mode="r", offset=34, shape=(n,)).astype(np.int64)
        pointers = np.asarray(np.memmap(idx, dtype="<i8", mode="r", offset=34 + 4 * n, shape=(n,)))
    except (OSError, ValueError) as exc:
        return f"{idx}: cannot read its {n:,} entries: {getattr(exc, 'strerror', None) or exc}"
    ends = pointers + lengths * itemsize
    starts = np.concatenate(([0], ends[:-1]))
    bad = (lengths < 0) | (pointers != starts) | (ends > size)
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    where = (f"entry {i} of {n:,}: {int(lengths[i]):,} tokens at byte {int(pointers[i]):,}")
    if lengths[i] < 0:
        why = "a negative length"
    elif ends[i] > size:
        why = f"end at byte {int(ends[i]):,}, past the end of {bin_path.name} ({size:,} bytes)"
    else:
        why = f"not where entry {i - 1} ends (byte {int(starts[i]):,})" if i else "not at byte 0"
    return f"{idx}: {where}: {why} (a corrupt index)"


def receipt_problem(prefix: str | os.PathLike[str]) -> str | None:
    """Whether ``<prefix>.idx`` still has the SHA-256 that its shard receipt (``<prefix>.receipt.json``, written
    by data prep pretrain: ``idx_sha256``) recorded. Reads the whole index (12 bytes per sequence), never the
    ``.bin``. None when there is no receipt, it records no ``idx_sha256``, or the hashes agree; else one line
    naming both files."""
    import json

    from nemotron.data.files import sha256_file

    idx = Path(str(prefix) + ".idx")
    receipt = Path(str(prefix) + ".receipt.json")
    try:
        recorded = json.loads(receipt.read_text()).get("idx_sha256")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(recorded, str) or not recorded:
        return None
    try:
        actual = sha256_file(idx)
    except OSError as exc:
        return f"{idx}: cannot read: {exc.strerror or exc}"
    if actual != recorded:
        return (f"{idx}: SHA-256 {actual[:12]}... differs from the {recorded[:12]}... that {receipt.name} "
                "recorded (the index changed after data prep wrote it)")
    return None


def read_index(prefix: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``<prefix>.idx`` (our own small reader, for checks and summaries).

    Returns:
        dict with ``dtype`` (name), ``lengths`` (int32 array, N), ``pointers`` (int64, N) and
        ``doc_idx`` (int64, N_doc + 1).

    Raises:
        ValueError: bad magic, version or dtype code.
    """
    import numpy as np

    idx = Path(str(prefix) + ".idx")
    data = idx.read_bytes()
    if data[:9] != MAGIC:
        raise ValueError(f"{idx}: bad magic")
    (version,) = struct.unpack_from("<Q", data, 9)
    (code,) = struct.unpack_from("<B", data, 17)
    n, ndoc = struct.unpack_from("<QQ", data, 18)
    if version != VERSION:
        raise ValueError(f"{idx}: version {version}, expected {VERSION}")
    names = {v: k for k, v in DTYPE_CODES.items()}
    if code not in names:
        raise ValueError(f"{idx}: dtype code {code} not written by this tool")
    off = 34
    lengths = np.frombuffer(data, dtype="<i4", count=n, offset=off)
    pointers = np.frombuffer(data, dtype="<i8", count=n, offset=off + 4 * n)
    doc_idx = np.frombuffer(data, dtype="<i8", count=ndoc, offset=off + 12 * n)
    return {"dtype": names[code], "lengths": lengths, "pointers": pointers, "doc_idx": doc_idx}
