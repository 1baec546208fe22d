"""Pretraining samples from our Megatron ``.bin/.idx`` shards, through ``blend.json``.

Semantics follow Megatron-Core's ``GPTDataset`` + ``BlendedDataset`` (megatron/core/datasets/, 0.16):

* **one dataset per prefix**: its documents (the ``.idx`` sequences) are shuffled once per epoch with a
  seeded permutation and concatenated; window ``j`` is tokens ``[j·L, j·L + L + 1)`` of that stream
  (``L = seq_length``; consecutive windows share one token — ``add_extra_token_to_sequence``), and may
  span documents (data prep ends each document with EOS, as Megatron expects). As many epochs as the
  sample count needs are built (a small dataset is repeated, never down-sampled); the windows are then
  shuffled, one epoch's worth at a time, so that the order never depends on the total (:class:`GPTSamples`:
  a resumed run with more iterations or another batch size continues the same stream);
* **blend**: the weights are normalised and sample ``i`` of the blend is taken from the dataset whose
  count lags its share the most (``argmax(w_d·(i+1) − n_d)``, Megatron-Core's ``build_blending_indices``),
  so every prefix of the blended stream follows the weights;
* the ``valid`` split feeds the held-out loss: a fixed set of its first samples.

Reading: :func:`nemotron.data.indexed.read_index` for the index, ``numpy.memmap`` for the tokens (the
test suite checks both against Megatron-Core's ``IndexedDataset``). Token ids come back as int64.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nemotron.data.blend import BlendFileError, read_blend_pairs
from nemotron.data.indexed import read_index


class DataError(ValueError):
    """Unusable training data; ``str()`` names the file and what is wrong."""


@dataclass(frozen=True)
class BlendEntry:
    weight: float
    prefix: Path


def read_blend(path: str | os.PathLike[str]) -> dict[str, list[BlendEntry]]:
    """Parse a Megatron-Bridge ``per_split_data_args_path`` file: ``{"train": [w1, "prefix1", ...], ...}``.

    Relative prefixes are taken from the blend file's folder when they do not resolve from the
    working directory. Every prefix must have its ``.bin`` and ``.idx``.

    Raises:
        DataError: unreadable JSON, a malformed split list, a weight ≤ 0, a missing shard, no ``train``.
    """
    path = Path(path)
    try:
        splits = read_blend_pairs(path)
    except BlendFileError as exc:
        raise DataError(f"{path}: {exc}") from None
    out: dict[str, list[BlendEntry]] = {}
    for split, pairs in splits.items():
        for _, prefix in pairs:
            for suffix in (".bin", ".idx"):
                if not Path(str(prefix) + suffix).is_file():
                    raise DataError(f"{path}: split {split!r}: {prefix}{suffix} does not exist")
        if pairs:
            out[split] = [BlendEntry(w, prefix) for w, prefix in pairs]
    if "train" not in out:
        raise DataError(f"{path}: no 'train' split")
    return out


class Shard:
    """One ``.bin/.idx`` pair, memory-mapped. ``doc(i)`` is document ``i``'s ids (int64, 1-D)."""

    def __init__(self, prefix: str | os.PathLike[str]) -> None:
        self.prefix = Path(prefix)
        try:
            index = read_index(self.prefix)
        except ValueError as exc:
            raise DataError(str(exc)) from None
        self.dtype = np.dtype(index["dtype"]).newbyteorder("<")
        self.lengths = np.asarray(index["lengths"], dtype=np.int64)
        self.pointers = np.asarray(index["pointers"], dtype=np.int64)
        bin_path = Path(str(self.prefix) + ".bin")
        size = bin_path.stat().st_size
        expected = int(self.lengths.sum()) * self.dtype.itemsize
        if size != expected:
            raise DataError(f"{bin_path}: {size} bytes, the index describes {expected}")
        self._bin = np.memmap(bin_path, dtype=self.dtype, mode="r") if size else np.zeros(0, self.dtype)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())

    def doc(self, i: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Tokens ``[start, stop)`` of document ``i`` (int64)."""
        first = int(self.pointers[i]) // self.dtype.itemsize
        n = int(self.lengths[i])
        stop = n if stop is None else min(stop, n)
        return np.asarray(self._bin[first + start:first + stop], dtype=np.int64)


class GPTSamples:
    """``num_samples`` samples of ``seq_length + 1`` tokens from one shard (see the module docstring).

    The order does not depend on ``num_samples``: sample ``i`` is the same for every total that includes it, so a
    run extended from 10 to 20 iterations (or resumed at another batch size, by consumed-sample count) continues
    the stream it started, without repeating or skipping a sample. What makes that so:

    * the documents of epoch ``e`` are permuted with a generator seeded by ``(seed, e, 0)``;
    * the sample windows are shuffled in blocks of ``per_block`` consecutive windows (one epoch's worth:
      ``max(1, tokens // seq_length)``), block ``b`` permuted with a generator seeded by ``(seed, b, 1)``.

    (Megatron-Core shuffles all ``num_samples`` windows at once, so its order changes with the total; this is the
    one place we differ from it on purpose.) ``shuffle=False``: windows in stream order, documents in file order.

    Memory: one int64 per document per epoch built (document order and cumulative offsets) and one per sample.
    """

    def __init__(self, shard: Shard, seq_length: int, num_samples: int, seed: int, shuffle: bool = True) -> None:
        if len(shard) == 0 or shard.tokens < 2:
            raise DataError(f"{shard.prefix}: no tokens")
        self.shard, self.seq_length, self.num_samples = shard, seq_length, num_samples
        self.seed, self.shuffle = seed % 2**32, shuffle
        self.per_block = max(1, shard.tokens // seq_length)
        if shuffle:
            blocks = max(1, math.ceil(num_samples / self.per_block))
            self.sample_order = np.concatenate(
                [b * self.per_block + np.random.RandomState([self.seed, b, 1]).permutation(self.per_block)
                 for b in range(blocks)])[:num_samples].astype(np.int64)
        else:
            self.sample_order = np.arange(num_samples, dtype=np.int64)
        top = int(self.sample_order.max()) if num_samples else 0  # the last window any sample reads
        need = (top + 1) * seq_length + 1
        epochs = max(1, math.ceil(need / shard.tokens))
        order = [np.random.RandomState([self.seed, e, 0]).permutation(len(shard)) if shuffle
                 else np.arange(len(shard)) for e in range(epochs)]
        self.doc_order = np.concatenate(order).astype(np.int64)
        self.doc_ends = np.cumsum(shard.lengths[self.doc_order])
        self.epochs = epochs

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> np.ndarray:
        """Sample ``i``: int64 array of ``seq_length + 1`` token ids."""
        j = int(self.sample_order[i])
        pos = j * self.seq_length
        end = pos + self.seq_length + 1
        k = int(np.searchsorted(self.doc_ends, pos, side="right"))
        pieces = []
        while pos < end:
            doc_start = int(self.doc_ends[k - 1]) if k else 0
            doc = int(self.doc_order[k])
            pieces.append(self.shard.doc(doc, pos - doc_start, end - doc_start))
            pos = doc_start + int(self.shard.lengths[doc])
            k += 1
        return np.concatenate(pieces)


def blending_indices(weights: list[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(dataset_index, dataset_sample_index)``, each int64 of length ``size``: Megatron-Core's greedy
    blend (``helpers.cpp build_blending_indices``): sample ``i`` comes from the dataset with the largest
    ``w_d·(i+1) − n_d`` (normalised weights ``w``; ``n_d`` samples taken so far; ties → lowest index)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    counts = np.zeros(len(w), dtype=np.int64)
    ds = np.empty(size, dtype=np.int64)
    ds_sample = np.empty(size, dtype=np.int64)
    for i in range(size):
        d = int(np.argmax(w * (i + 1) - counts))
        ds[i], ds_sample[i] = d, counts[d]
        counts[d] += 1
    return ds, ds_sample


class BlendedSamples:
    """The samples of one split of a blend, in the order the trainer consumes them.

    ``ds[i]`` → ``{"input_ids": int64[L], "shift_labels": int64[L], "labels": int64[L]}``: tokens
    ``[0, L)`` of the sample as input and ``[1, L + 1)`` as the target of each position (Megatron's
    ``tokens``/``labels``; ``labels`` repeats ``shift_labels`` only so the trainer sees a label column).
    """

    def __init__(self, entries: list[BlendEntry], seq_length: int, num_samples: int, seed: int,
                 shuffle: bool = True) -> None:
        self.seq_length, self.num_samples = seq_length, num_samples
        self.entries = entries
        self.ds_index, self.ds_sample = blending_indices([e.weight for e in entries], num_samples)
        counts = np.bincount(self.ds_index, minlength=len(entries))
        self.datasets = [GPTSamples(Shard(e.prefix), seq_length, max(1, int(c)), seed + 7919 * d, shuffle)
                         for d, (e, c) in enumerate(zip(entries, counts, strict=True))]

    def __len__(self) -> int:
        return self.num_samples

    def sample(self, i: int) -> np.ndarray:
        """Sample ``i`` of the blend: int64 array of ``seq_length + 1`` ids."""
        return self.datasets[int(self.ds_index[i])][int(self.ds_sample[i])]

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample ``i`` as the trainer's item; ``sample_index`` (int64 scalar) is ``i``, the sample's position in
        the stream (what the batch log records)."""
        import torch

        s = torch.from_numpy(self.sample(i))
        return {"input_ids": s[:-1], "labels": s[1:], "shift_labels": s[1:],
                "sample_index": torch.tensor(i, dtype=torch.int64)}

    def summary(self) -> list[dict[str, Any]]:
        """Per prefix: weight share, samples drawn, tokens on disk, epochs built."""
        counts = np.bincount(self.ds_index, minlength=len(self.entries))
        total = sum(e.weight for e in self.entries)
        return [{"prefix": str(e.prefix), "weight": e.weight / total, "samples": int(c), "tokens": d.shard.tokens,
                 "epochs": d.epochs} for e, c, d in zip(self.entries, counts, self.datasets, strict=True)]


def max_token_id(entries: list[BlendEntry]) -> int:
    """The largest token id in the listed shards (to check against the model's vocabulary)."""
    top = -1
    for e in entries:
        shard = Shard(e.prefix)
        if shard.tokens:
            top = max(top, int(np.asarray(shard._bin).max()))
    return top


__all__ = [
    "BlendEntry",
    "BlendedSamples",
    "DataError",
    "GPTSamples",
    "Shard",
    "blending_indices",
    "max_token_id",
    "read_blend",
]
