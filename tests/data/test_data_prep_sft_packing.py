"""Packing: sizes with the context-parallel pad rule, best-fit decreasing against first-fit, the
label-aligned mask, and the metadata Megatron-Bridge reads."""

from __future__ import annotations

import numpy as np
import pytest

from nemotron.data import packing


def test_padded_and_fed_lengths():
    # the loader feeds n - 1 tokens of a sub-sequence of n; padding makes that a multiple of 2 x CP (x TP)
    assert [packing.fed_length(n, 1) for n in (2, 5, 4097)] == [1, 4, 4096]
    assert [packing.padded_length(n, 8) for n in (2, 9, 10, 17)] == [9, 9, 17, 17]
    for n in range(2, 200):
        for m in (1, 2, 4, 16, 32):
            L = packing.padded_length(n, m)
            assert n <= L and (L - 1) % m == 0 and L - m < n  # smallest such length


def test_label_aligned_mask():
    # learned flags per token -> stored mask: shifted left by one, 0 at the last position
    learned = np.array([0, 0, 1, 1, 1, 0], dtype=np.uint8)
    assert packing.label_aligned(learned).tolist() == [0, 1, 1, 1, 0, 0]
    assert packing.label_aligned(np.array([1], dtype=np.uint8)).tolist() == [0]


def _check(bins, sizes, cap):
    seen = sorted(i for b in bins for i in b)
    assert seen == list(range(len(sizes))), "every item exactly once"
    assert all(sum(sizes[i] for i in b) <= cap for b in bins)


@pytest.mark.parametrize("cap", [4096, 294_912])
def test_best_fit_decreasing_is_valid_deterministic_and_full(cap):
    rng = np.random.default_rng(7)
    sizes = np.clip(rng.lognormal(5.6, 1.1, 20_000).astype(int), 1, cap)
    bins = packing.best_fit_decreasing(sizes, cap)
    _check(bins, sizes.tolist(), cap)
    assert bins == packing.best_fit_decreasing(sizes.copy(), cap)
    lower = -(-int(sizes.sum()) // cap)
    assert len(bins) <= lower + 1  # within one bin of the volume bound on this data


def test_best_fit_picks_the_tightest_bin():
    # items 6, 5, 4 open three bins of 10 (4 left, 5 left, 6 left); 4 goes to the bin with exactly 4 left
    bins = packing.best_fit_decreasing([6, 5, 4, 4], 10)
    assert bins == [[0, 2], [1, 3]] or bins == [[0, 3], [1, 2]]
    assert packing.best_fit_decreasing([10, 10], 10) == [[0], [1]]
    with pytest.raises(ValueError):
        packing.best_fit_decreasing([11], 10)


def test_first_fit_reference():
    sizes = [5, 7, 3, 5, 2]
    bins = packing.first_fit(sizes, 10)
    _check(bins, sizes, 10)
    assert bins == [[0, 2, 4], [1], [3]]


def test_windows_cover_the_stream_once():
    sizes = list(range(1, 251))
    out = [b for window in packing.pack_stream(sizes, 300, 100) for b in window]
    _check(out, sizes, 300)


def test_stats_give_megatron_bridge_metadata():
    st = packing.PackStats(100)
    st.add_bin([50, 30])
    st.add_bin([90])
    meta = st.bridge_metadata()
    assert meta == {"dataset_max_seqlen": 90, "max_samples_per_bin": 2, "packing_factor": 1.5,
                    "packing_efficiency": 85.0, "pack_size": 100, "min_packed_seqlen": 80}
    other = packing.PackStats(100)
    other.merge(st.to_dict())
    assert other.bridge_metadata() == meta
    assert packing.shuffled(10, 1, 2) == packing.shuffled(10, 1, 2) != packing.shuffled(10, 1, 3)
