"""Which documents Megatron-Core's blended GPT dataset puts in one global batch.

The training split of a ``blend.json`` is read by Megatron-Core (c8288b6, ``megatron/core/datasets/``) through
``BlendedMegatronDatasetBuilder(GPTDataset, sizes, ...)`` with ``blend_per_split``; this module computes the same
indices with numpy, from the same inputs, so that ``nemotron ultra3 data inspect blend.json --step N`` can list what
the trainer reads at step N without Megatron-Core installed. ``tests/contract/test_megatron_batch.py`` runs the
pinned Megatron-Core on the same files and asserts the token ids (as int64 bytes), the dataset and the document ids
of every sample are identical.

The algorithm (facts read from the pinned source; the code is ours):

* **sizes.** ``train_samples = train_iters x global_batch_size`` (Megatron-Bridge ``get_train_valid_test_num_samples``,
  or ``train.train_samples`` when set). The weights are normalised (float64). With more than one prefix, dataset
  ``d`` is asked for ``ceil(ceil(train_samples x w_d) x (1 + surplus))`` samples (``mid_level_dataset_surplus``,
  default 0.005) and the blend has ``sum_d ceil(train_samples x w_d)`` samples; one prefix: that prefix's
  ``GPTDataset`` alone, asked for ``train_samples``.
* **GPTDataset** over all documents of the prefix (``blend_per_split``: the split is the whole file):
  ``tokens_per_epoch`` = its token count; epochs ``E`` = the least with ``E x tokens >= samples x S + 1``; with
  ``E > 1`` the final epoch is shuffled apart when it supplies fewer than ``int(0.8 x per_epoch)`` samples. One
  ``numpy.random.RandomState(random_seed)`` then shuffles the document order (each epoch's block of documents, the
  last separately when set apart), and later the sample order (``arange(num_samples)``, ``uint32``; the last epoch's
  samples separately when set apart). Sample ``k`` starts at token ``k x S`` of the concatenated documents and is
  ``S + 1`` tokens long (``add_extra_token_to_sequence``); ``num_samples = (E x tokens - 1) // S``.
* **blend**: the weights normalised once more (``BlendedDataset`` does it again), sample ``i`` goes to the dataset ``argmax_d (w_d x max(i, 1) - n_d)`` (first on ties), as its
  ``n_d``-th sample (``build_blending_indices``).
* **the batch**: Megatron-Bridge's pretraining sampler hands out consecutive samples, so training step ``N``
  (1-based, as Megatron logs ``iteration N``) reads blend samples ``[(N-1) x B, N x B)`` (no batch-size ramp-up).

Units: token ids (int64 as Megatron returns them), counts, document indices into the ``.idx`` sequences.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.data.indexed import read_index

#: Megatron-Core ``BlendedMegatronDatasetConfig.mid_level_dataset_surplus`` default (c8288b6).
SURPLUS = 0.005
#: Megatron-Bridge's recipe base (``recipes/common.py``) sets ``GPTDatasetConfig(random_seed=1234)``.
DEFAULT_SEED = 1234
#: ``GPTDataset``: a final epoch that supplies fewer than this share of an epoch's samples is shuffled apart.
FINAL_EPOCH_THRESHOLD = 0.80


class BatchError(ValueError):
    """Inputs that Megatron-Core would refuse too (e.g. a blend that oversamples a dataset); ``str()`` says which."""


class Prefix:
    """One ``.bin/.idx`` pair: its sequence lengths (int32, as Megatron's ``sequence_lengths``) and its tokens."""

    def __init__(self, prefix: str | os.PathLike[str]) -> None:
        import numpy as np

        self.prefix = str(prefix)
        index = read_index(self.prefix)
        self.lengths = np.asarray(index["lengths"], dtype=np.int32)
        self.pointers = np.asarray(index["pointers"], dtype=np.int64)
        self.dtype = np.dtype(index["dtype"]).newbyteorder("<")
        size = Path(self.prefix + ".bin").stat().st_size
        self._bin = np.memmap(self.prefix + ".bin", dtype=self.dtype, mode="r") if size else np.zeros(0, self.dtype)

    def get(self, doc: int, offset: int = 0, length: int | None = None) -> Any:
        """Tokens ``[offset, offset + length)`` of document ``doc`` (int64), as ``IndexedDataset.get``."""
        import numpy as np

        first = int(self.pointers[doc]) // self.dtype.itemsize
        n = int(self.lengths[doc]) - offset if length is None else length
        return np.asarray(self._bin[first + offset:first + offset + n], dtype=np.int64)


@dataclass
class GPTIndices:
    """One prefix's ``GPTDataset`` indices: ``document_index`` (int32), ``sample_starts`` (global token offset of
    each sample start in the document stream, num_samples + 1 entries), ``shuffle_index``."""

    prefix: Prefix
    num_samples_requested: int
    epochs: int
    separate_final_epoch: bool
    document_index: Any
    cum: Any  # int64, cumulative document lengths along document_index (len + 1)
    shuffle_index: Any
    seq_length: int

    def __len__(self) -> int:
        return len(self.shuffle_index)

    def sample(self, idx: int) -> tuple[Any, list[int], list[tuple[int, int, int]]]:
        """(tokens: int64 array of S+1 ids, document ids, parts as (document, offset, length))."""
        import numpy as np

        k = int(self.shuffle_index[idx])
        start, stop = k * self.seq_length, k * self.seq_length + self.seq_length  # stop: the last token's position
        i = int(np.searchsorted(self.cum, start, side="right")) - 1
        j = int(np.searchsorted(self.cum, stop, side="right")) - 1
        parts, docs, texts = [], [], []
        for n in range(i, j + 1):
            doc = int(self.document_index[n])
            a = start - int(self.cum[n]) if n == i else 0
            b = stop - int(self.cum[n]) + 1 if n == j else int(self.cum[n + 1] - self.cum[n])
            parts.append((doc, a, b - a))
            docs.append(doc)
            texts.append(self.prefix.get(doc, a, b - a))
        return np.concatenate(texts).astype(np.int64), docs, parts


def gpt_indices(prefix: Prefix, num_samples: int, seq_length: int, seed: int) -> GPTIndices:
    """The ``GPTDataset`` indices of ``prefix`` for ``num_samples`` samples of ``seq_length`` (see module doc).

    Raises:
        BatchError: a prefix without tokens.
    """
    import numpy as np

    tokens = int(prefix.lengths.astype(np.int64).sum())
    if tokens <= 1:
        raise BatchError(f"{prefix.prefix}: {tokens} tokens; Megatron-Core needs more than one")
    epochs, have = 1, tokens
    while have < num_samples * seq_length + 1:
        epochs, have = epochs + 1, have + tokens
    separate = False
    without_last = 0
    if epochs > 1:
        without_last = ((epochs - 1) * tokens - 1) // seq_length
        per_epoch = (tokens - 1) // seq_length
        separate = (num_samples - without_last) < int(FINAL_EPOCH_THRESHOLD * per_epoch)
    rng = np.random.RandomState(seed)
    docs = np.arange(len(prefix.lengths), dtype=np.int32)

    def doc_block(n_epochs: int) -> Any:
        block = np.tile(docs, n_epochs).astype(np.int32)
        rng.shuffle(block)
        return block

    document_index = (np.concatenate([doc_block(epochs - 1), doc_block(1)]) if separate and epochs > 1
                      else doc_block(epochs))
    total = (epochs * tokens - 1) // seq_length
    dtype = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64

    def order(a: int, b: int) -> Any:
        block = np.arange(a, b, dtype=dtype)
        rng.shuffle(block)
        return block

    shuffle = np.concatenate([order(0, without_last), order(without_last, total)]) if separate else order(0, total)
    cum = np.zeros(len(document_index) + 1, dtype=np.int64)
    np.cumsum(prefix.lengths[document_index], out=cum[1:])
    return GPTIndices(prefix, num_samples, epochs, separate, document_index, cum, shuffle, seq_length)


def blending_indices(weights: list[float], size: int) -> tuple[Any, Any]:
    """``(dataset_index int16, dataset_sample_index int64)`` of ``size`` blend samples (``build_blending_indices``)."""
    import numpy as np

    w = np.asarray(weights, dtype=np.float64)
    counts = np.zeros(len(w), dtype=np.int64)
    ds_index = np.zeros(size, dtype=np.int16)
    ds_sample = np.zeros(size, dtype=np.int64)
    for i in range(size):
        err = w * max(float(i), 1.0) - counts
        d = int(np.argmax(err))  # first maximum, as the strict ">" of the C++ loop
        ds_index[i], ds_sample[i] = d, counts[d]
        counts[d] += 1
    return ds_index, ds_sample


def normalize(weights: list[float]) -> list[float]:
    """Megatron-Core ``datasets.utils.normalize``: float64 division by the sum."""
    import numpy as np

    w = np.asarray(weights, dtype=np.float64)
    return (w / w.sum()).tolist()


@dataclass
class BlendedTrain:
    """The training split as Megatron-Core builds it from ``blend_per_split[0]``."""

    prefixes: list[str]
    weights: list[float]  # normalised
    train_samples: int
    seq_length: int
    seed: int
    datasets: list[GPTIndices]
    dataset_index: Any = None  # None: one prefix, no blending
    dataset_sample_index: Any = None
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.dataset_index) if self.dataset_index is not None else len(self.datasets[0])

    def sample(self, i: int) -> dict[str, Any]:
        """Blend sample ``i``: ``dataset_id``, ``prefix``, ``tokens`` (int64, S + 1), ``documents``, ``parts``."""
        if self.dataset_index is None:
            d, s = 0, i
        else:
            d, s = int(self.dataset_index[i]), int(self.dataset_sample_index[i])
        tokens, docs, parts = self.datasets[d].sample(s)
        return {"index": i, "dataset_id": d, "dataset_sample": s, "prefix": self.prefixes[d], "tokens": tokens,
                "documents": docs, "parts": parts}


def build_train(pairs: list[tuple[float, str]], train_samples: int, seq_length: int, seed: int = DEFAULT_SEED,
                surplus: float = SURPLUS) -> BlendedTrain:
    """The blended training split of ``pairs`` (``(weight, prefix)``, blend.json order).

    Raises:
        BatchError: no prefix, a sample count below 1, a blend that asks a dataset for more samples than it has
            (Megatron-Core raises ``IndexError`` for the same).
    """
    if not pairs:
        raise BatchError("the blend has no train prefixes")
    if train_samples < 1 or seq_length < 2:
        raise BatchError(f"train samples {train_samples} and sequence length {seq_length} must be >= 1 and >= 2")
    prefixes = [str(p) for _, p in pairs]
    if len(pairs) == 1:
        ds = gpt_indices(Prefix(prefixes[0]), train_samples, seq_length, seed)
        return BlendedTrain(prefixes, [1.0], train_samples, seq_length, seed, [ds])
    weights = normalize([float(w) for w, _ in pairs])
    target = [math.ceil(math.ceil(train_samples * w) * 1.0) for w in weights]
    buffer = [math.ceil(math.ceil(train_samples * w) * (1 + surplus)) for w in weights]
    datasets = [gpt_indices(Prefix(p), n, seq_length, seed) for p, n in zip(prefixes, buffer, strict=True)]
    size = sum(target)
    # BlendedDataset normalises the (already normalised) weights once more when it is given a size
    ds_index, ds_sample = blending_indices(normalize(weights), size)
    import numpy as np

    got = np.bincount(ds_index.astype(np.int64), minlength=len(datasets))
    for d, n in enumerate(got):
        if n > len(datasets[d]):
            raise BatchError(f"the train blend asks {prefixes[d]} for {int(n)} samples, more than its "
                             f"{len(datasets[d])} (Megatron-Core refuses it too: raise mid_level_dataset_surplus)")
    return BlendedTrain(prefixes, weights, train_samples, seq_length, seed, datasets, ds_index, ds_sample)


def global_batch(train: BlendedTrain, step: int, global_batch_size: int) -> list[dict[str, Any]]:
    """The samples of training step ``step`` (1-based): blend samples ``[(step-1) x B, step x B)``.

    Raises:
        BatchError: a step outside the run (below 1, or past the samples built).
    """
    first = (step - 1) * global_batch_size
    if step < 1 or first + global_batch_size > len(train):
        last = len(train) // max(1, global_batch_size)
        raise BatchError(f"--step {step}: the run has steps 1..{last} at global batch size {global_batch_size}")
    return [train.sample(i) for i in range(first, first + global_batch_size)]


__all__ = ["DEFAULT_SEED", "SURPLUS", "BatchError", "BlendedTrain", "GPTIndices", "Prefix", "blending_indices",
           "build_train", "global_batch", "gpt_indices", "normalize"]
