"""Pieces shared by the record-based data stages (SFT chat data, RL prompts).

Both read a blend of datasets the way pretraining does (:mod:`nemotron.data.blend`,
:mod:`nemotron.data.sources`), but handle whole records instead of one text field. Here:

* :func:`record_format` / :func:`plan_dataset` / :func:`plan_datasets` — a dataset's files cut into
  work shards (a file is never split in a way that repeats or loses a record; ``sample`` caps records
  per dataset);
* :class:`Problems` — per-reason counts, kept ``file:line`` examples and the skip/fail policies;
* :func:`unit_hash` — seeded per-record numbers in [0, 1) that do not depend on worker count or order;
* :func:`passes_from_weights` — how many passes over each dataset realise the blend weights.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nemotron.data import driver
from nemotron.data.blend import Blend, DatasetSpec
from nemotron.data.pretrain import _dataset_files, _local, _pack
from nemotron.data.sources import FORMATS, Piece, is_remote, reading, scan_rows, split_file, split_json_array
from nemotron.errors import ConfigError, RuntimeFailure


def record_format(spec: DatasetSpec, schemas: tuple[str, ...]) -> tuple[str | None, str | None]:
    """Split a dataset's ``format`` into ``(file_format, record_schema)``.

    A record stage accepts either a file format (:data:`~nemotron.data.sources.FORMATS`) or one of its
    record ``schemas`` there; the other part is then detected (file format from the name, schema per record).

    Raises:
        ConfigError: ``format`` is neither (the message names the blend line).
    """
    f = spec.format
    if f is None or f in FORMATS:
        return f, None
    if f in schemas:
        return None, f
    raise ConfigError(f"dataset {spec.name} (blend line {spec.line}): format={f!r} is neither a file format "
                      f"({', '.join(FORMATS)}) nor a record form ({', '.join(schemas)})")


def plain_text_problem(spec: DatasetSpec, fmt: str, first_file: str, s: Any) -> ConfigError | None:
    """The refusal of a plain-text dataset by a record stage that reads no plain text (``s.TEXT_RECORDS`` false:
    data prep rl), or ``None``; the run (:func:`plan_dataset`) and the dry-run (``validation.data``) call it."""
    if fmt != "text" or getattr(s, "TEXT_RECORDS", False):
        return None
    return ConfigError(f"dataset {spec.name} (blend line {spec.line}): {first_file} is plain text, and this stage "
                       "reads records (JSONL, JSON array or Parquet)",
                       "write one JSON object per line (JSONL), or set the dataset's format if the file is one "
                       "of those under another name")


@dataclass
class DatasetShards:
    """A dataset's inputs cut into work shards (lists of pieces), with its files in sorted order."""

    spec: DatasetSpec
    schema: str | None
    fmt: str
    files: list[str]
    input_bytes: int
    shards: list[list[Piece]] = field(default_factory=list)


def plan_dataset(spec: DatasetSpec, s: Any, schemas: tuple[str, ...], target_bytes: int,
                 sample: int | None) -> DatasetShards | None:
    """Cut one dataset into shards of about ``target_bytes`` input bytes; ``None`` when it has no file.

    ``s`` is the stage's settings (``remote_cache_dir`` is read for ``hf://`` files). With ``sample``,
    only the first ``sample`` records of the dataset (files in sorted order) are planned.

    Raises:
        ConfigError: a bad ``format``, or a plain-text file where the stage reads records only (``s.TEXT_RECORDS``
            false: a plain-text file is then no record; SFT reads one as one transcript record).
        RuntimeFailure: an input file cannot be read (``<file>: cannot read (...)``).
    """
    file_fmt, schema = record_format(spec, schemas)
    files, fmt = _dataset_files(dataclasses.replace(spec, format=file_fmt), s, "")
    if not files:
        return None
    refused = plain_text_problem(spec, fmt, files[0][0], s)
    if refused is not None:
        raise refused
    pieces: list[Piece] = []
    left = sample
    for file, size in files:
        if left is not None and left <= 0:
            break
        if left is not None:
            local = _local(file, s)
            with reading(file):
                scan = scan_rows(local, fmt, left)
            k = len(scan.starts)
            if k == 0:
                continue
            if fmt == "jsonl":
                stop = None if scan.complete else scan.end
                pieces.append(Piece(file, fmt, 0, stop, 1, (stop if stop is not None else size)))
            else:
                pieces.append(Piece(file, fmt, 0, None if scan.complete else k, 1, size))
            left -= k
        elif fmt == "json" and not is_remote(file) and getattr(s, "SPLIT_JSON_ARRAYS", False):
            with reading(file):
                pieces.extend(split_json_array(file, target_bytes))
        elif is_remote(file) or fmt not in ("jsonl", "parquet"):
            pieces.append(Piece(file, fmt, 0, None, 1, size))
        else:
            with reading(file):
                pieces.extend(split_file(file, fmt, target_bytes))
    out = DatasetShards(spec, schema, fmt, [f for f, _ in files], sum(sz for _, sz in files))
    out.shards = _pack(pieces, target_bytes) if pieces else []
    return out


def plan_datasets(blend: Blend, s: Any, schemas: tuple[str, ...]) -> tuple[list[DatasetShards], list[str]]:
    """Every dataset of the blend cut into shards (:func:`plan_dataset`), in blend order, and the notes
    for the datasets left out (optional, or ``policies.empty_glob=skip``, with no input file).

    ``s`` is the stage's settings (``target_bytes``, ``sample``, ``policies``, ``remote_cache_dir``).

    Raises:
        ConfigError: a dataset without a file is neither optional nor skipped by policy, no dataset has
            a file, or :func:`plan_dataset` refuses one (each message names the blend line).
    """
    datasets, not_found = [], []
    for spec in blend.datasets:
        ds = plan_dataset(spec, s, schemas, s.target_bytes, s.sample)
        if ds is None or not ds.shards:
            not_found.append(driver.unmatched(blend, spec, s.policies["empty_glob"], "policies"))
            continue
        datasets.append(ds)
    driver.require_datasets(blend, datasets)
    return datasets, not_found


class Problems:
    """Counts of record problems by reason, up to ``max_examples`` messages, and the fail policies.

    Args:
        policies: ``{reason: "skip" | "fail" | ...}``; a reason without an entry is skipped.
        max_examples: messages kept for the summary.
        hint_key: config section named in a failure's hint (``policies``).
    """

    def __init__(self, policies: dict[str, str], max_examples: int, hint_key: str = "policies") -> None:
        self.policies = policies
        self.max_examples = max_examples
        self.hint_key = hint_key
        self.counts: Counter[str] = Counter()
        self.examples: list[str] = []

    def report(self, reason: str, at: str, detail: str, policy_key: str | None = None) -> None:
        """Count one problem at ``at`` (``file:line``), or raise when its policy is ``fail``.

        Raises:
            RuntimeFailure: the policy for ``policy_key`` (default ``reason``) is ``fail``.
        """
        key = policy_key or reason
        message = f"{at}: {reason}: {detail}"
        if self.policies.get(key) == "fail":
            raise RuntimeFailure(message, f"set {self.hint_key}.{key}=skip to skip and count such records")
        self.counts[reason] += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(message)


@functools.lru_cache(maxsize=4096)
def _salt(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "little")


_M64 = (1 << 64) - 1


def unit_hash_one(seed: int, key: str, ordinal: int) -> float:
    """``unit_hash(seed, key, [ordinal])[0]`` for one ordinal, in plain integer arithmetic (the same
    splitmix64 steps, wrapped to 64 bits; the same float): for per-record decisions, without numpy's
    per-call cost."""
    x = (ordinal & _M64) ^ _salt(seed, key)
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    x = x ^ (x >> 31)
    return float(x >> 11) / float(1 << 53)


def unit_hash(seed: int, key: str, ordinals: Any) -> Any:
    """Numbers in [0, 1), one per ordinal, fixed by ``(seed, key, ordinal)`` (numpy array in and out)."""
    import numpy as np

    salt = _salt(seed, key)
    x = np.asarray(ordinals, dtype=np.uint64) ^ np.uint64(salt)
    with np.errstate(over="ignore"):  # splitmix64 finaliser: wrapping arithmetic is intended
        x = (x + np.uint64(0x9E3779B97F4A7C15))
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def passes_from_weights(weights: list[float], sizes: list[float]) -> list[float]:
    """Passes over each dataset so that their shares of the output follow ``weights``, dropping nothing.

    Dataset ``i`` gets ``(w_i / w_b) x (size_b / size_i)`` passes, where ``b`` is the dataset with the
    most size per weight: that one is used exactly once and every other dataset at least once (a
    share above its natural size repeats it). Datasets of size 0 get 0 passes.
    """
    ratios = [(sz / w if w > 0 else 0.0) for w, sz in zip(weights, sizes, strict=True)]
    if not ratios or max(ratios) <= 0:
        return [0.0 for _ in weights]
    b = max(range(len(ratios)), key=lambda i: (ratios[i], -i))
    return [(w / weights[b]) * (sizes[b] / sz) if sz > 0 else 0.0 for w, sz in zip(weights, sizes, strict=True)]


def cpu_count() -> int:
    """CPUs of this machine (the default size of a local Ray)."""
    return os.cpu_count() or 1
