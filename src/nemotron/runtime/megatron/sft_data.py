"""SFT samples from Megatron-Bridge packed Parquet (DESIGN.md §4), for transformers' NemotronH.

Format (Megatron-Bridge ``GPTSFTPackedParquetDataset``, megatron/bridge/data/packing/parquet.py and
gpt_sft.py): one row per pack; ``input_ids`` list<int32>, ``loss_mask`` list<uint8|int8> (same length),
``seq_start_id`` list<int32> (0 first, strictly increasing, each < the row length). Sub-sequence ``k``
spans ``[s_k, s_{k+1})`` (the last one ends at the row length). Megatron-Bridge feeds tokens
``input_ids[s:e-1]``, labels ``input_ids[s+1:e]`` and — with ``answer_only_loss`` — the mask
``loss_mask[s:e-1]``: the stored mask is *label-aligned* (``loss_mask[j]`` says whether the prediction
made at position ``j``, of token ``j+1``, counts). Without ``answer_only_loss`` every prediction inside a
sub-sequence counts.

We give the model ``input_ids[s:e]`` and ``shift_labels[j] = input_ids[s+j+1]`` where the prediction
counts, else -100 (always -100 at ``e-1``, which predicts nothing in Megatron either): the same
predictions and targets, and transformers' causal-LM loss uses ``shift_labels`` as given.

Two layouts of a micro-batch of packs:

``rows`` (the default, and the only correct one without the CUDA kernels): every sub-sequence is its own
    row, right-padded to the longest in the micro-batch (``attention_mask`` 0 and label -100 on padding).
    transformers' NemotronH isolates attention with restarting ``position_ids`` but its Mamba layers
    carry their state across documents unless ``seq_idx`` reaches the ``mamba_ssm`` / ``causal_conv1d``
    kernels (the PyTorch fallback refuses ``seq_idx``), so separate rows are what keeps one document from
    leaking into the next. Cost: padding up to the longest sub-sequence of the micro-batch.
``packed`` (CUDA with ``mamba_ssm`` and ``causal_conv1d``): one row per pack; ``position_ids`` restart at
    every ``seq_start_id`` (block-diagonal attention) and ``seq_idx`` (int32, the sub-sequence number of
    each token) resets the Mamba convolution and scan at the real boundaries.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nemotron.runtime.megatron.pretrain_data import DataError

REQUIRED_COLUMNS = ("input_ids", "loss_mask", "seq_start_id")
IGNORE = -100


def find_packed_file(root: Path | None, explicit: Path | None, split: str, pack_size: int) -> Path | None:
    """The packed Parquet file of ``split`` (``"training"`` / ``"validation"``).

    Order: ``explicit`` (``dataset.packed_sequence_specs.packed_{train,val}_data_path``); then Megatron-Bridge's
    default name ``<split>_<pack_size>.idx.parquet`` in ``root`` or below it (``data prep sft`` writes
    ``<root>/data/``); then ``<split>*.parquet``. The shallowest match wins; two at the same depth are an
    error. None when nothing matches.

    Raises:
        DataError: ``explicit`` missing, or several candidates (named).
    """
    if explicit is not None:
        if not explicit.is_file():
            raise DataError(f"{explicit}: packed {split} data not found")
        return explicit
    if root is None:
        return None
    if root.is_file():
        return root if split == "training" else None
    name = f"{split}_{pack_size}.idx.parquet"
    for pattern in (f"**/{name}", f"**/{split}*.parquet"):
        found = sorted((p for p in root.glob(pattern) if p.is_file()), key=lambda p: (len(p.relative_to(root).parts), p))
        if not found:
            continue
        # the shallowest match wins (a newer data version nested in the folder, or part files, sit deeper)
        top = [p for p in found if len(p.relative_to(root).parts) == len(found[0].relative_to(root).parts)]
        if len(top) == 1:
            return top[0]
        raise DataError(f"{root}: several packed {split} files ({', '.join(str(p) for p in top[:4])}); set "
                        f"dataset.packed_sequence_specs.packed_{'train' if split == 'training' else 'val'}_data_path")
    return None


@dataclass
class PackedRows:
    """All packs of one Parquet file, as flat numpy arrays (row ``r`` = ``ids[offsets[r]:offsets[r+1]]``).

    ``ids`` int64, ``mask`` uint8, ``starts`` list of int64 arrays (each row's ``seq_start_id``).
    """

    path: Path
    ids: np.ndarray
    mask: np.ndarray
    offsets: np.ndarray
    starts: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.starts)

    def row(self, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b = int(self.offsets[r]), int(self.offsets[r + 1])
        return self.ids[a:b], self.mask[a:b], self.starts[r]

    @property
    def tokens(self) -> int:
        return len(self.ids)

    def loss_tokens(self) -> int:
        return int(self.mask.sum())


def _flat(column: Any) -> tuple[np.ndarray, np.ndarray]:
    arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    values = np.asarray(arr.values.to_numpy(zero_copy_only=False))
    base = offsets[0]
    return values[base:offsets[-1]], offsets - base


def read_packed(path: str | os.PathLike[str], pack_size: int | None = None) -> PackedRows:
    """Read and check a packed Parquet file.

    Raises:
        DataError: unreadable file, missing column, or a row that breaks the format (row number and rule).
    """
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        table = pq.read_table(path, columns=list(REQUIRED_COLUMNS))
    except (OSError, ValueError, KeyError) as exc:
        names = None
        with contextlib.suppress(Exception):  # reported below
            names = pq.read_schema(path).names
        missing = [c for c in REQUIRED_COLUMNS if names is not None and c not in names]
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)}; packed SFT Parquet needs "
                            f"{', '.join(REQUIRED_COLUMNS)}") from None
        raise DataError(f"{path}: cannot read packed Parquet: {exc}") from None
    ids, offsets = _flat(table.column("input_ids"))
    mask, moffsets = _flat(table.column("loss_mask"))
    starts_flat, soffsets = _flat(table.column("seq_start_id"))
    if not np.array_equal(offsets, moffsets):
        bad = int(np.nonzero(np.diff(offsets) != np.diff(moffsets))[0][0])
        raise DataError(f"{path}: row {bad}: loss_mask and input_ids differ in length")
    starts = []
    for r in range(len(offsets) - 1):
        n = int(offsets[r + 1] - offsets[r])
        s = np.asarray(starts_flat[soffsets[r]:soffsets[r + 1]], dtype=np.int64)
        if n == 0:
            raise DataError(f"{path}: row {r} is empty")
        if len(s) == 0 or s[0] != 0 or np.any(np.diff(s) <= 0) or s[-1] >= n:
            raise DataError(f"{path}: row {r}: seq_start_id must start at 0, increase strictly and stay below the "
                            f"row length {n}; got {s[:8].tolist()}{'...' if len(s) > 8 else ''}")
        if pack_size is not None and n > pack_size:
            raise DataError(f"{path}: row {r} holds {n} tokens, more than the pack size {pack_size} (model.seq_length)")
        starts.append(s)
    if len(mask) and (int(mask.max()) > 1 or int(mask.min()) < 0):
        raise DataError(f"{path}: loss_mask values must be 0 or 1")
    return PackedRows(path, ids.astype(np.int64), mask.astype(np.uint8), offsets, starts)


def unpack(ids: np.ndarray, mask: np.ndarray, starts: np.ndarray, answer_only_loss: bool = True
           ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Split one pack into ``(input_ids, shift_labels)`` per sub-sequence (int64 arrays of equal length).

    ``shift_labels[j]`` is the target of position ``j``: ``ids[s+j+1]`` where ``mask[s+j]`` is 1 (every
    position but the last when ``answer_only_loss`` is off), else -100. Sub-sequences of one token
    predict nothing and are dropped.
    """
    bounds = [*list(starts.tolist()), len(ids)]
    out = []
    for a, b in itertools.pairwise(bounds):
        if b - a < 2:
            continue
        seg = ids[a:b]
        lab = np.full(b - a, IGNORE, dtype=np.int64)
        keep = mask[a:b - 1].astype(bool) if answer_only_loss else np.ones(b - a - 1, dtype=bool)
        lab[:-1] = np.where(keep, seg[1:], IGNORE)
        out.append((seg.astype(np.int64), lab))
    return out


def packed_layout(ids: np.ndarray, mask: np.ndarray, starts: np.ndarray, answer_only_loss: bool = True
                  ) -> dict[str, np.ndarray]:
    """One pack as one row with real boundaries: ``input_ids``, ``shift_labels`` (int64), ``position_ids``
    (int64, restarting at every start) and ``seq_idx`` (int32, the sub-sequence number of each token)."""
    n = len(ids)
    bounds = np.append(starts, n)
    lengths = np.diff(bounds)
    seq_idx = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    position_ids = np.arange(n, dtype=np.int64) - np.repeat(bounds[:-1], lengths)
    lab = np.full(n, IGNORE, dtype=np.int64)
    keep = mask[:-1].astype(bool) if answer_only_loss else np.ones(n - 1, dtype=bool)
    last = np.zeros(n, dtype=bool)
    last[bounds[1:] - 1] = True  # the last token of each sub-sequence predicts nothing
    keep &= ~last[:-1]
    lab[:-1] = np.where(keep, ids[1:], IGNORE)
    return {"input_ids": ids.astype(np.int64), "shift_labels": lab, "position_ids": position_ids, "seq_idx": seq_idx}


def kernels_available() -> bool:
    """Whether the CUDA Mamba kernels that honour ``seq_idx`` are importable (``mamba_ssm``, ``causal_conv1d``)."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in ("mamba_ssm", "causal_conv1d"))
    except (ImportError, ValueError):
        return False


def choose_layout(device_type: str, requested: str | None = None) -> str:
    """``"packed"`` on CUDA with the Mamba kernels, else ``"rows"``; ``requested`` forces one (``packed``
    without the kernels raises, since it would leak state across documents).

    Raises:
        DataError: ``packed`` requested where the kernels or CUDA are missing; an unknown layout.
    """
    if requested in (None, "auto"):
        return "packed" if device_type == "cuda" and kernels_available() else "rows"
    if requested == "rows":
        return "rows"
    if requested == "packed":
        if device_type != "cuda" or not kernels_available():
            raise DataError("the packed SFT layout needs CUDA with mamba_ssm and causal_conv1d (transformers' "
                            "PyTorch Mamba path cannot reset its state at sub-sequence boundaries); use rows")
        return "packed"
    raise DataError(f"SFT layout {requested!r}: valid: auto, rows, packed")


class PackRow(int):
    """A pack's row index as :class:`PackDataset` hands it to the collator, carrying ``stream_index``: the
    position of this draw in the sample stream (what the batch log records)."""

    stream_index: int

    def __new__(cls, row: int, stream_index: int) -> "PackRow":
        obj = super().__new__(cls, row)
        obj.stream_index = stream_index
        return obj


class PackDataset:
    """``num_samples`` packs drawn from ``rows`` epoch after epoch (each epoch a permutation seeded by
    ``(seed, epoch)``, as Megatron-Bridge's SFT sample mapping repeats a small set); item ``i`` = the pack's row
    index (a :class:`PackRow`). The order does not depend on ``num_samples``: a longer run (or one resumed at
    another batch size, by consumed-sample count) continues the same stream."""

    def __init__(self, rows: PackedRows, num_samples: int, seed: int, shuffle: bool = True) -> None:
        if len(rows) == 0:
            raise DataError(f"{rows.path}: no packs")
        self.rows = rows
        epochs = max(1, -(-num_samples // len(rows)))
        order = [np.random.RandomState([seed % 2**32, e]).permutation(len(rows)) if shuffle
                 else np.arange(len(rows)) for e in range(epochs)]
        self.order = np.concatenate(order)[:num_samples]
        self.epochs = epochs

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> int:
        return PackRow(int(self.order[i]), i)


class PackCollator:
    """Turn a list of pack indices into the model's batch (torch tensors), in layout ``rows`` or ``packed``.

    Returns ``{"groups": [g, ...], "shift_labels": flat, "labels": flat}``: each group ``g`` is one forward
    pass; ``flat`` (int64, 1-D) holds every group's targets, for counting the tokens in the loss.

    ``rows``: the micro-batch's sub-sequences, longest first, in groups of at most ``budget`` padded tokens
    (rows × the group's longest row; default: the pack size × packs in the micro-batch); ``g`` holds
    ``input_ids``, ``attention_mask`` and ``shift_labels``, int64 [R, T], right-padded with ``pad_id``.
    Grouping by length keeps padding near zero without ever sharing a row between documents.
    ``packed``: one group; ``input_ids``, ``position_ids``, ``shift_labels`` int64 [P, N] and ``seq_idx``
    int32 [P, N] (P packs right-padded to the longest, N; padding gets its own sub-sequence number).
    """

    def __init__(self, rows: PackedRows, layout: str = "rows", answer_only_loss: bool = True, pad_id: int = 0,
                 budget: int | None = None) -> None:
        self.rows, self.layout, self.answer_only_loss, self.pad_id = rows, layout, answer_only_loss, pad_id
        self.budget = budget

    def __call__(self, batch: list[int]) -> dict[str, Any]:
        out = self._collate(batch)
        if all(isinstance(r, PackRow) for r in batch):  # the training stream: each pack's position in it
            import torch

            out["sample_index"] = torch.tensor([r.stream_index for r in batch], dtype=torch.int64)
        return out

    def _collate(self, batch: list[int]) -> dict[str, Any]:
        import torch

        if self.layout == "packed":
            items = [packed_layout(*self.rows.row(r), self.answer_only_loss) for r in batch]
            width = max(len(it["input_ids"]) for it in items)
            out = {k: np.full((len(items), width), self.pad_id if k == "input_ids" else IGNORE if k == "shift_labels"
                              else 0, dtype=np.int32 if k == "seq_idx" else np.int64) for k in items[0]}
            for i, it in enumerate(items):
                n = len(it["input_ids"])
                for k, v in it.items():
                    out[k][i, :n] = v
                if n < width:  # padding: its own sub-sequence, positions from 0, no loss
                    out["seq_idx"][i, n:] = it["seq_idx"][-1] + 1
                    out["position_ids"][i, n:] = np.arange(width - n)
            group = {k: torch.from_numpy(v) for k, v in out.items()}
            flat = group["shift_labels"].reshape(-1)
            return {"groups": [group], "shift_labels": flat, "labels": flat}
        segs = [s for r in batch for s in unpack(*self.rows.row(r), self.answer_only_loss)]
        segs.sort(key=lambda s: -len(s[0]))  # stable: equal lengths keep the pack order
        budget = self.budget or max(int(self.rows.offsets[r + 1] - self.rows.offsets[r]) for r in batch) * len(batch)
        chunks: list[list[tuple[np.ndarray, np.ndarray]]] = []
        for seg in segs:
            if chunks and (len(chunks[-1]) + 1) * len(chunks[-1][0][0]) <= budget:
                chunks[-1].append(seg)
            else:
                chunks.append([seg])
        groups = []
        for chunk in chunks:
            width = len(chunk[0][0])
            ids = np.full((len(chunk), width), self.pad_id, dtype=np.int64)
            labels = np.full((len(chunk), width), IGNORE, dtype=np.int64)
            att = np.zeros((len(chunk), width), dtype=np.int64)
            for i, (x, y) in enumerate(chunk):
                ids[i, :len(x)], labels[i, :len(y)], att[i, :len(x)] = x, y, 1
            groups.append({"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(att),
                           "shift_labels": torch.from_numpy(labels)})
        flat = torch.cat([g["shift_labels"].reshape(-1) for g in groups]) if groups else torch.zeros(0, dtype=torch.long)
        return {"groups": groups, "shift_labels": flat, "labels": flat}


__all__ = [
    "IGNORE",
    "PackCollator",
    "PackDataset",
    "PackRow",
    "PackedRows",
    "choose_layout",
    "find_packed_file",
    "kernels_available",
    "packed_layout",
    "read_packed",
    "unpack",
]
