"""Packing SFT sequences into fixed-size rows for Megatron-Bridge's packed-sequence loader.

**What the loader does with a row** (Megatron-Bridge ``GPTSFTPackedDataset`` / its packed-Parquet
subclass): for each sub-sequence ``[s, e)`` given by ``seq_start_id`` it feeds ``input_ids[s:e-1]``,
predicts ``input_ids[s+1:e]`` and, with answer-only loss, weights the loss with ``loss_mask[s:e-1]``.
So the stored mask is **label-aligned**: ``loss_mask[t] = 1`` means "the token at ``t + 1`` is one the
model must learn"; inside each sub-sequence it is the learned-token flag shifted left by one, with 0
at the sub-sequence's last position (:func:`label_aligned`). The loader's own packing path does the
same shift (``loss_mask[1:] + [False]``).

**Sizes.** A sub-sequence of ``n`` tokens is fed as ``n - 1`` tokens. With context parallelism every
fed length must be a multiple of ``2 x CP`` (``x TP`` with sequence parallelism): the sequence is padded
(pad token = the tokenizer's EOS, which the loader recognises as padding; mask 0) to
:func:`padded_length` = the smallest ``L >= n`` with ``(L - 1) % multiple == 0``. A pack holds
sub-sequences whose *stored* lengths sum to at most ``pack_size``. Megatron-Bridge's own packer sizes
bins by the fed length instead (rows may then exceed ``pack_size`` by one token per sub-sequence); we
keep rows within ``pack_size`` so that a consumer feeding whole rows (our local runtime) fits too,
at a cost of one token per sub-sequence of capacity. What Megatron-Bridge feeds (``L - 1`` per
sub-sequence, :func:`fed_length`) then always fits, and its packing metadata is computed from fed
lengths as Megatron-Bridge does.

**Algorithm.** :func:`best_fit_decreasing`: sort a window of sequences by size (largest first, ties in
input order), put each into the open bin with the least room that still fits it, else open a bin.
"Least room that fits" is a query on the set of open bins keyed by free space; that set is a two-level
bitset over free-space values (a summary of non-empty 2,048-value blocks, then the block), so each
placement costs O(capacity / 2,048 / 64 + 1) word operations — O(n log n) overall with the sort,
against first-fit's O(n x bins) scan (:func:`first_fit`, the reference). Windows are packed
one after another (:func:`pack_stream`): memory is bounded by the window; the sequences of bins left
below :data:`CARRY_BELOW` full at the end of a window are carried into the next one, so the window
costs almost no fill (the benchmark measures it against packing everything at once). Deterministic: no randomness in packing; the seeded part is only the
order packs are written in (:func:`shuffled`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

_BLOCK_BITS = 11  # 2,048 free-space values per block
_BLOCK_MASK = (1 << _BLOCK_BITS) - 1


def fed_length(n: int, multiple: int = 1) -> int:
    """Tokens the loader feeds for a sub-sequence of ``n`` tokens padded for ``multiple`` (its bin size)."""
    return -(-(n - 1) // multiple) * multiple


def padded_length(n: int, multiple: int = 1) -> int:
    """Stored length of a sub-sequence of ``n`` tokens: the smallest ``L >= n`` with ``(L - 1) % multiple == 0``."""
    return fed_length(n, multiple) + 1


def label_aligned(learned: Any) -> Any:
    """The stored loss mask of one sub-sequence from its per-token learned flags (numpy array in, out)."""
    import numpy as np

    out = np.zeros(len(learned), dtype=np.uint8)
    if len(learned) > 1:
        out[:-1] = learned[1:]
    return out


class _FreeSpace:
    """Open bins keyed by free space: add, remove, and "smallest free space >= s" in a few word ops."""

    def __init__(self, capacity: int) -> None:
        self.blocks = [0] * ((capacity >> _BLOCK_BITS) + 1)
        self.summary = 0
        self.bins: dict[int, list[int]] = {}

    def add(self, free: int, b: int) -> None:
        stack = self.bins.get(free)
        if stack:
            stack.append(b)
            return
        self.bins[free] = [b]
        k = free >> _BLOCK_BITS
        if not self.blocks[k]:
            self.summary |= 1 << k
        self.blocks[k] |= 1 << (free & _BLOCK_MASK)

    def take(self, need: int) -> tuple[int, int]:
        """Remove and return ``(free, bin)`` with the smallest free space ``>= need``; ``(-1, -1)`` if none."""
        k = need >> _BLOCK_BITS
        m = self.blocks[k] >> (need & _BLOCK_MASK)
        if m:
            free = need + (m & -m).bit_length() - 1
        else:
            m = self.summary >> (k + 1)
            if not m:
                return -1, -1
            k = k + (m & -m).bit_length()
            m = self.blocks[k]
            free = (k << _BLOCK_BITS) + (m & -m).bit_length() - 1
        stack = self.bins[free]
        b = stack.pop()
        if not stack:
            del self.bins[free]
            k = free >> _BLOCK_BITS
            self.blocks[k] &= ~(1 << (free & _BLOCK_MASK))
            if not self.blocks[k]:
                self.summary &= ~(1 << k)
        return free, b


def best_fit_decreasing(sizes: Any, capacity: int) -> list[list[int]]:
    """Pack item ``sizes`` (each ``1 <= size <= capacity``) into bins of ``capacity``.

    Returns bins as lists of item indices, in the order the bins were opened; inside a bin, items in
    the order they were placed (largest first).
    """
    import numpy as np

    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) and (sizes.min() < 1 or sizes.max() > capacity):
        raise ValueError(f"item sizes must be within 1..{capacity}")
    order = np.argsort(-sizes, kind="stable").tolist()
    size_list = sizes.tolist()
    space = _FreeSpace(capacity)
    bins: list[list[int]] = []
    for i in order:
        s = size_list[i]
        free, b = space.take(s)
        if b < 0:
            b = len(bins)
            bins.append([i])
            free = capacity
        else:
            bins[b].append(i)
        if free - s > 0:
            space.add(free - s, b)
    return bins


def first_fit(sizes: Any, capacity: int) -> list[list[int]]:
    """Reference: plain first-fit in input order, scanning every open bin for each item (O(n x bins))."""
    import numpy as np

    free = np.zeros(max(len(sizes), 1), dtype=np.int64)
    n_bins = 0
    bins: list[list[int]] = []
    for i, s in enumerate(np.asarray(sizes, dtype=np.int64).tolist()):
        fits = np.flatnonzero(free[:n_bins] >= s)
        if len(fits):
            b = int(fits[0])
        else:
            b = n_bins
            n_bins += 1
            free[b] = capacity
            bins.append([])
        free[b] -= s
        bins[b].append(i)
    return bins


ALGORITHMS = {"best_fit_decreasing": best_fit_decreasing, "first_fit": first_fit}


def shuffled(n: int, seed: int, key: int) -> list[int]:
    """A permutation of ``range(n)`` fixed by ``(seed, key)`` (the order packs are written in)."""
    import numpy as np

    return np.random.default_rng([seed, key]).permutation(n).tolist()


@dataclass
class PackStats:
    """Running statistics of packed bins (what Megatron-Bridge's packing metadata records, and fill)."""

    capacity: int
    packs: int = 0
    sequences: int = 0
    stored_tokens: int = 0           # sum of row lengths (padding included)
    fed_tokens: int = 0              # tokens the loader feeds (one less per sequence)
    max_sequence: int = 0            # largest fed length of one sequence ("dataset_max_seqlen")
    max_per_pack: int = 0            # most sequences in one pack ("max_samples_per_bin")
    min_pack: int | None = None      # smallest pack content ("min_packed_seqlen")
    histogram: dict[int, int] = field(default_factory=dict)

    def add_bin(self, item_sizes: list[int], fed_sizes: list[int] | None = None) -> None:
        """Count one pack: its items' stored sizes (fill) and fed sizes (Megatron-Bridge's metadata;
        default: the stored sizes)."""
        fed = item_sizes if fed_sizes is None else fed_sizes
        self.packs += 1
        self.sequences += len(item_sizes)
        self.stored_tokens += sum(item_sizes)
        self.fed_tokens += sum(fed)
        self.max_sequence = max(self.max_sequence, max(fed))
        self.max_per_pack = max(self.max_per_pack, len(item_sizes))
        self.min_pack = sum(fed) if self.min_pack is None else min(self.min_pack, sum(fed))

    def merge(self, other: dict[str, Any]) -> None:
        self.packs += other["packs"]
        self.sequences += other["sequences"]
        self.fed_tokens += other["fed_tokens"]
        self.stored_tokens += other["stored_tokens"]
        self.max_sequence = max(self.max_sequence, other["max_sequence"])
        self.max_per_pack = max(self.max_per_pack, other["max_per_pack"])
        if other.get("min_pack") is not None:
            self.min_pack = other["min_pack"] if self.min_pack is None else min(self.min_pack, other["min_pack"])

    @property
    def fill(self) -> float:
        """Share of the packs' capacity holding tokens (padding for the pad multiple counts as filled)."""
        return self.stored_tokens / (self.packs * self.capacity) if self.packs else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"packs": self.packs, "sequences": self.sequences, "stored_tokens": self.stored_tokens,
                "fed_tokens": self.fed_tokens,
                "max_sequence": self.max_sequence, "max_per_pack": self.max_per_pack, "min_pack": self.min_pack,
                "fill": round(self.fill, 6)}

    def bridge_metadata(self) -> dict[str, Any]:
        """One entry of Megatron-Bridge's packing-metadata JSON list (its field names)."""
        return {
            "dataset_max_seqlen": self.max_sequence,
            "max_samples_per_bin": self.max_per_pack,
            "packing_factor": round(self.sequences / self.packs, 2) if self.packs else 0.0,
            "packing_efficiency": round(100 * self.fed_tokens / (self.packs * self.capacity), 2) if self.packs else 0.0,
            "pack_size": self.capacity,
            "min_packed_seqlen": self.min_pack or 0,
        }


#: A bin filled below this share at the end of a window is not written: its sequences are carried into
#: the next window (or, in the data prep pipeline, into a final window of carried sequences), so only the
#: stream's very last bins can be part-full. Ours: 0.99.
CARRY_BELOW = 0.99


def split_full(bins: list[list[int]], sizes: Any, capacity: int,
               carry_below: float = CARRY_BELOW) -> tuple[list[list[int]], list[int]]:
    """Bins filled to at least ``carry_below`` of ``capacity``, and the items of the other bins (in bin order)."""
    full, carried = [], []
    for b in bins:
        if sum(sizes[i] for i in b) >= carry_below * capacity:
            full.append(b)
        else:
            carried.extend(b)
    return full, carried


def pack_stream(sizes: Iterable[int], capacity: int, window: int, algorithm: str = "best_fit_decreasing",
                carry_below: float = CARRY_BELOW) -> Iterator[list[list[int]]]:
    """Pack a stream of sizes window by window, carrying the items of under-filled bins into the next
    window; yields each window's bins (indices into the whole stream). Memory: one window plus the carry."""
    import numpy as np

    fn = ALGORITHMS[algorithm]
    carry_ids: list[int] = []
    carry_sizes: list[int] = []
    buf_ids: list[int] = []
    buf_sizes: list[int] = []

    def run(final: bool) -> list[list[int]]:
        nonlocal carry_ids, carry_sizes
        ids, sz = carry_ids + buf_ids, carry_sizes + buf_sizes
        bins = fn(np.asarray(sz, dtype=np.int64), capacity)
        if final:
            full, rest = bins, []
        else:
            full, rest = split_full(bins, sz, capacity, carry_below)
        carry_ids, carry_sizes = [ids[i] for i in rest], [sz[i] for i in rest]
        return [[ids[i] for i in b] for b in full]

    for pos, s in enumerate(sizes):
        buf_ids.append(pos)
        buf_sizes.append(int(s))
        if len(buf_ids) == window:
            yield run(final=False)
            buf_ids, buf_sizes = [], []
    if buf_ids or carry_ids:
        yield run(final=True)
