"""Pretraining data prep: a blend of raw-text datasets → Megatron ``.bin/.idx`` shards + ``blend.json``.

Flow (:func:`prepare`)::

    load blend ─► choose output version ─► resolve tokenizer ─► plan shards (pure, from the inputs)
       ─► resume check (plan key, receipts) ─► Ray: one task per unfinished shard (streamed progress)
       ─► blend.json (weights split over shards by tokens) ─► manifest.json (last) ─► summary tables

Guarantees:

* **Deterministic.** The plan — which records go to which shard — is computed from the input files
  and the config alone. A shard's bytes depend only on its records and the tokenizer, so 1 or N
  workers, any timing, and resumed runs all give byte-identical ``.bin``/``.idx`` files.
* **Resumable.** Each shard is written to temporary files renamed into place, then a receipt is
  written. A rerun skips shards whose receipt matches; at most the shards that were in flight (one
  per worker) are redone.
* **Never down-sampled by weight.** Every record of every dataset is written once (``sample=N`` caps
  rows for smoke runs); the weights go only into ``blend.json``.

Held-out rule (``split``): in each dataset's record order (files sorted by path, records in file
order), the first ``split.valid_docs`` records form the validation split, the next
``split.test_docs`` the test split, and the rest the training split.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.data import driver, outputs
from nemotron.data.blend import Blend, DatasetSpec, prefix_weights, write_megatron_blend
from nemotron.data.files import atomic_write_json, remove_tmp_files, sha256_file, stable_hash
from nemotron.data.indexed import IndexedWriter, choose_dtype
from nemotron.data.progress import fmt_counts
from nemotron.data.sources import (
    Piece,
    check_parquet_field,
    detect_format,
    text_format,
    expand,
    fetch_remote,
    file_size_estimate,
    is_remote,
    iter_records,
    reading,
    resolve_remote,
    scan_rows,
    split_file,
)
from nemotron.errors import ConfigError, RuntimeFailure

STAGE = "data-prep-pretrain"
#: Record problems and what each policy may say about them.
POLICIES: dict[str, tuple[str, ...]] = {
    "empty_document": ("skip", "fail"),
    "missing_field": ("skip", "fail"),
    "invalid_utf8": ("skip", "fail"),
    "malformed_json": ("skip", "fail"),
    "too_long": ("truncate", "skip", "fail"),
    "empty_glob": ("fail", "skip"),
    "bad_weight": ("fail", "skip"),
}
_REASON_POLICY = {"empty": "empty_document", "missing_field": "missing_field", "wrong_type": "missing_field",
                  "not_object": "missing_field",
                  "invalid_utf8": "invalid_utf8",
                  "malformed_json": "malformed_json", "too_long": "too_long"}
SPLITS = ("train", "valid", "test")
_CALIBRATION_BYTES = 1 << 18  # text tokenized per dataset to estimate bytes per token (256 KiB)


# --------------------------------------------------------------------------------------------------
# settings


@dataclass
class Settings(driver.StageSettings):
    """The stage config, checked. Field names follow the YAML keys (``tokenizer_name`` = ``tokenizer.name``)."""

    STAGE = STAGE  # the blend's dataset keys this stage reads: nemotron.data.blend.STAGE_DATASET_KEYS

    INPUT_KEYS = (("blend_path", "blend_path"), ("tokenizer.name", "tokenizer_name"))
    THREADED_TASKS = True  # a shard task's tokenizer batch-encodes on a thread pool of its CPUs

    add_bos: bool = False
    add_eos: bool = True
    min_doc_chars: int | None = None
    max_doc_tokens: int | None = None
    tokenizer_name: str = ""
    tokenizer_revision: str | None = None
    tokenizer_bos_token: str | None = None
    tokenizer_eos_token: str | None = None
    tokenizer_split_special_tokens: bool = True
    tokenizer_cache_dir: str = "~/.cache/nemotron/tokenizers"
    dtype: str = "auto"
    target_tokens: int = 2_000_000_000
    max_per_dataset: int = 256
    batch_bytes: int = 1 << 20
    valid_docs: int = 1000
    test_docs: int = 1000
    on_bad: dict[str, str] = field(default_factory=lambda: {k: v[0] for k, v in POLICIES.items()})
    max_examples: int = 5
    remote_cache_dir: str = "~/.cache/nemotron/hf-data"
    planned_tokens: float | None = None

    @classmethod
    def reader(cls, cfg: dict[str, Any]) -> driver.Reader:
        """This stage's config reader over ``cfg`` (it knows the stage's keys)."""
        return driver.Reader(cfg, _KNOWN_TOP, _KNOWN_SECTIONS)

    def read_own(self, c: driver.Reader) -> None:
        """Read this stage's own keys (see :meth:`nemotron.data.driver.StageSettings.from_config`)."""
        self.add_bos = c.bool("add_bos", False)
        self.add_eos = c.bool("add_eos", True)
        self.min_doc_chars = c.int("min_doc_chars", None, minimum=0)
        self.max_doc_tokens = c.int("max_doc_tokens", None, minimum=2)
        self.tokenizer_name = c.str("tokenizer.name")
        self.tokenizer_revision = c.str("tokenizer.revision", None)
        self.tokenizer_bos_token = c.str("tokenizer.bos_token", None)
        self.tokenizer_eos_token = c.str("tokenizer.eos_token", None)
        self.tokenizer_split_special_tokens = c.bool("tokenizer.split_special_tokens", True)
        self.tokenizer_cache_dir = c.str("tokenizer.cache_dir", self.tokenizer_cache_dir)
        self.dtype = c.choice("output.dtype", ("auto", "uint16", "int32"), "auto")
        self.target_tokens = c.int("shards.target_tokens", self.target_tokens, minimum=1)
        self.max_per_dataset = c.int("shards.max_per_dataset", self.max_per_dataset, minimum=1)
        self.batch_bytes = c.int("shards.batch_bytes", self.batch_bytes, minimum=1)
        self.valid_docs = c.int("split.valid_docs", self.valid_docs, minimum=1)
        self.test_docs = c.int("split.test_docs", self.test_docs, minimum=1)
        self.on_bad = {k: c.choice(f"on_bad.{k}", v, v[0]) for k, v in POLICIES.items()}
        self.max_examples = c.int("on_bad.max_examples", self.max_examples, minimum=0)
        self.planned_tokens = c.float("summary.planned_tokens", None, minimum=0)

    def check(self) -> None:
        """Refuse a ``sample`` that the held-out split would use up (the first records of each dataset).

        Raises:
            ConfigError: ``sample`` is at most ``split.valid_docs + split.test_docs``.
        """
        held_out = self.valid_docs + self.test_docs
        if self.sample is not None and self.sample <= held_out:
            raise ConfigError(f"sample={self.sample} leaves no training records: the first split.valid_docs={self.valid_docs} "
                              f"+ split.test_docs={self.test_docs} records of each dataset are held out",
                              f"more than {held_out}, or lower split.valid_docs / split.test_docs")


_KNOWN_SECTIONS = {
    "tokenizer": ("name", "revision", "bos_token", "eos_token", "split_special_tokens", "cache_dir"),
    "output": ("dtype",),
    "shards": ("target_tokens", "max_per_dataset", "batch_bytes"),
    "split": ("valid_docs", "test_docs"),
    "on_bad": (*POLICIES, "max_examples"),
    "workers": ("count", "cpus_per_task", "engine", "in_process_max_bytes"),
    "remote": ("cache_dir",),
    "summary": ("planned_tokens", "progress_interval_s"),
}
_KNOWN_TOP = ("blend_path", "output_dir", "path_vars", "sample", "force", "add_bos", "add_eos", "min_doc_chars",
              "max_doc_tokens")


# --------------------------------------------------------------------------------------------------
# planning (pure: reads the inputs, writes nothing)


@dataclass
class DatasetPlan:
    spec: DatasetSpec
    files: list[str]
    input_bytes: int
    bytes_per_token: float
    shards: list[dict[str, Any]] = field(default_factory=list)


def text_documents_problem(blend_path: str, spec: DatasetSpec, fmt: str, n_files: int, s: Settings) -> ConfigError | None:
    """The refusal of a plain-text dataset too small for the held-out split, or ``None``.

    The rule for plain text (``format: text``, or a file that is not JSONL/JSON/Parquet): **one file is one
    document** — its whole text, never split at lines or blank lines (a source file or a book stays whole) —
    unless the dataset's ``sample_by`` is ``line`` or ``paragraph`` (``fmt`` is then ``text-line`` /
    ``text-paragraph``, :func:`nemotron.data.sources.text_format`). The first ``split.valid_docs +
    split.test_docs`` documents of each dataset are held out, so a text dataset of whole files needs more files
    than that (``sample`` counts files too). A single ``.txt`` file is one document: it is refused here, before
    any work, in the run and the dry-run alike, with what to do instead (``sample_by``). A ``sample_by`` on files
    that are not plain text is refused too (it would be ignored).
    """
    if spec.sample_by != "document" and fmt not in ("text", "text-line", "text-paragraph"):
        return ConfigError(f"{blend_path}:{spec.line}: datasets ({spec.name}): sample_by={spec.sample_by!r} cuts plain "
                           f"text into documents, but the dataset's files are {fmt}",
                           "remove sample_by (records are read one per line/row/element), or set format: text")
    if fmt != "text":
        return None
    held = s.valid_docs + s.test_docs
    n = min(n_files, s.sample) if s.sample else n_files
    if n > held:
        return None
    return ConfigError(
        f"{blend_path}:{spec.line}: datasets ({spec.name}): plain text is one document per file, so its "
        f"{driver.count(n, 'files')} {'is one document' if n == 1 else f'are {n} documents'}, and the first "
        f"split.valid_docs={s.valid_docs} + split.test_docs={s.test_docs} documents are held out: none is left "
        "to train on",
        "cut it into documents with the dataset's \"sample_by\": \"paragraph\" (blank-line separated) or \"line\", "
        f"or give the dataset more than {held} text files")


def _piece_from_scan(path: str, fmt: str, scan, i: int, j: int, est_total: int, rows_total: int) -> Piece:
    k = len(scan.starts)
    if fmt == "jsonl":
        start = scan.starts[i]
        stop = scan.starts[j] if j < k else scan.end
        return Piece(path, fmt, start, stop, scan.lines[i], stop - start)
    if fmt == "text":
        return Piece(path, fmt, 0, None, 1, est_total)
    est = int(est_total * (j - i) / max(rows_total, 1))
    return Piece(path, fmt, i, j, scan.lines[i] if fmt == "jsonl.gz" else 1, est)


def _local(file: str, s: Settings) -> str:
    return fetch_remote(file, os.path.expanduser(s.remote_cache_dir)) if file.startswith("hf://") else file


def _dataset_files(spec: DatasetSpec, s: Settings, blend_path: str) -> tuple[list[tuple[str, int]], str]:
    """``[(file, size)]`` of a dataset and its format."""
    if is_remote(spec.path):
        files = resolve_remote(spec.path, spec.subset, spec.split)
        fmt = text_format(detect_format(files[0][0], spec.format), spec.sample_by)
        return files, fmt
    paths = expand(spec.path, exclude=list(spec.exclude), fmt=spec.format)
    fmt = text_format(detect_format(paths[0] if paths else spec.path, spec.format), spec.sample_by)
    return [(p, os.path.getsize(p)) for p in paths], fmt


def plan_dataset(spec: DatasetSpec, files: list[tuple[str, int]], fmt: str, s: Settings, tok, data_dir: Path) -> DatasetPlan:
    """Cut one dataset into shards: ``valid`` and ``test`` (the head records), then ``train`` shards of
    about ``shards.target_tokens`` tokens (at most ``shards.max_per_dataset``).

    Raises:
        ConfigError: a Parquet file without the dataset's ``text_field`` column.
        RuntimeFailure: an input file cannot be read (``<file>: cannot read (...)``).
    """
    v_end = s.valid_docs
    t_end = s.valid_docs + s.test_docs
    cap = s.sample
    segments = [(0, v_end, "valid"), (v_end, t_end, "test"), (t_end, cap if cap is not None else math.inf, "train")]
    held: dict[str, list[Piece]] = {"valid": [], "test": [], "train": []}
    rest: list[tuple[str, int, int]] = []  # (file, start, line) whose tail still needs size-splitting
    row0 = 0
    for file, size in files:
        if cap is not None and row0 >= cap:
            break
        if fmt == "parquet":
            with reading(file):
                check_parquet_field(_local(file, s), spec.text_field)
        if row0 < t_end or cap is not None:
            local = _local(file, s)
            limit = (cap if cap is not None else t_end) - row0
            with reading(file):
                scan = scan_rows(local, fmt, limit)
                est_total = file_size_estimate(local, fmt, spec.text_field) if fmt != "jsonl" else size
            k = len(scan.starts)
            rows_total = k if scan.complete else max(k, 1)
            if fmt == "parquet":
                import pyarrow.parquet as pq

                with reading(file):
                    rows_total = pq.ParquetFile(local).metadata.num_rows
            for a, b, split in segments:
                lo, hi = max(a, row0), min(b, row0 + k)
                if lo < hi:
                    held[split].append(_piece_from_scan(file, fmt, scan, lo - row0, hi - row0, est_total, rows_total))
            if not scan.complete and cap is None and fmt != "text":
                rest.append((file, scan.end, scan.end_line))
            row0 += k
        else:
            rest.append((file, 0, 1))

    bpt = _bytes_per_token(held["valid"] + held["test"] + held["train"], spec.text_field, tok, s)
    target_bytes = max(int(s.target_tokens * bpt), 1)
    train = list(held["train"])
    for file, start, line in rest:
        if is_remote(file):
            train.append(Piece(file, fmt, start, None, line, dict(files)[file] * 3))
        else:
            with reading(file):
                train.extend(split_file(file, fmt, target_bytes, start=start, line=line, text_field=spec.text_field))

    groups = _pack(train, target_bytes)
    while len(groups) > s.max_per_dataset:
        target_bytes *= 2
        groups = _pack(train, target_bytes)
    plan = DatasetPlan(spec, [f for f, _ in files], sum(sz for _, sz in files), bpt)
    for split, pieces_groups in (("valid", [held["valid"]]), ("test", [held["test"]]), ("train", groups)):
        for idx, pieces in enumerate(pg for pg in pieces_groups if pg):
            prefix = data_dir / spec.name / f"{split}_{idx:05d}"
            plan.shards.append({
                "id": f"{spec.name}/{split}_{idx:05d}", "dataset": spec.name, "split": split,
                "prefix": str(prefix), "text_field": spec.text_field,
                "pieces": [p.to_dict() for p in pieces], "est_bytes": sum(p.est_bytes for p in pieces),
            })
    return plan


def _pack(pieces: list[Piece], target_bytes: int) -> list[list[Piece]]:
    groups: list[list[Piece]] = []
    cur: list[Piece] = []
    cur_bytes = 0
    for p in pieces:
        if cur and cur_bytes + p.est_bytes > target_bytes:
            groups.append(cur)
            cur, cur_bytes = [], 0
        cur.append(p)
        cur_bytes += p.est_bytes
    if cur:
        groups.append(cur)
    return groups


def _bytes_per_token(pieces: list[Piece], field_name: str, tok, s: Settings) -> float:
    """Input bytes per token, measured on up to 256 KiB of the dataset's first records (default 4.0)."""
    texts: list[str] = []
    size = 0
    for piece in pieces:
        local = Piece(_local(piece.file, s), piece.fmt, piece.start, piece.stop, piece.line, piece.est_bytes)
        for _pos, text, problem, _detail in iter_records(local, field_name):
            if problem is None and text and text.strip():
                texts.append(text)
                size += len(text.encode("utf-8", "replace"))
                if size >= _CALIBRATION_BYTES:
                    break
        if size >= _CALIBRATION_BYTES:
            break
    if not texts:
        return 4.0
    tokens = sum(len(e.ids) for e in tok.encode_batch_fast(texts, add_special_tokens=False))
    return min(max(size / max(tokens, 1), 1.0), 16.0)


# --------------------------------------------------------------------------------------------------
# the shard task (runs in a Ray worker)


def build_shard(shard: dict[str, Any], opts: dict[str, Any]):
    """Tokenize one shard's records into ``<prefix>.bin/.idx`` and write its receipt.

    A generator (a Ray streaming task): yields ``("progress", {"chars", "tokens", "docs"})`` about every
    ``opts["report_s"]`` seconds, then ``("done", receipt)``.

    Raises:
        RuntimeFailure: a record problem whose policy is ``fail`` (message ``<file>:<line>: ...``), or
            an unreadable input file.
    """
    import numpy as np

    from nemotron.data import tokenizer as tk

    # The tokenizer's Rust thread pool gets exactly this task's CPUs (read when the pool first starts in
    # this worker process). Parallelism stays on even for one thread: measured with tokenizers 0.23,
    # encode_batch_fast on a one-thread pool is ~1.6x faster than with parallelism switched off.
    os.environ["RAYON_NUM_THREADS"] = str(opts["cpus_per_task"])
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    t0 = time.monotonic()
    tok = tk.document_tokenizer(tk.load(opts["tokenizer_json"], opts["split_special_tokens"],
                                        sha256=opts.get("tokenizer_sha256")), opts["split_special_tokens"])
    bos, eos = opts["bos_id"], opts["eos_id"]
    n_extra = (bos is not None) + (eos is not None)
    max_tokens = opts["max_doc_tokens"]
    min_chars = opts["min_doc_chars"] or 0
    policies = opts["on_bad"]
    max_examples = opts["max_examples"]
    field_name = shard["text_field"]
    prefix = Path(shard["prefix"])
    writer = IndexedWriter(prefix, opts["dtype"])
    skipped: Counter[str] = Counter()
    examples: list[str] = []
    truncated = 0
    chars_done = 0
    batch: list[str] = []
    where: list[str] = []
    batch_chars = 0
    reported = t0

    def problem(reason: str, at: str, detail: str) -> None:
        policy = policies[_REASON_POLICY[reason]] if reason in _REASON_POLICY else "skip"
        message = f"{at}: {reason}: {detail}"
        if policy == "fail":
            raise RuntimeFailure(message, f"set on_bad.{_REASON_POLICY[reason]}=skip to skip and count such records")
        skipped[reason] += 1
        if len(examples) < max_examples:
            examples.append(message)

    # Encoding overlaps the Python work: a batch is handed to the tokenizer on a helper thread (its Rust
    # code releases the GIL) while this thread writes the previous batch's ids and reads the next batch.
    encoder = ThreadPoolExecutor(max_workers=1)
    # (future of the encodings or None, the batch's record positions, the read problems met while reading it)
    in_flight: list[tuple[Any, list[str], list[tuple[str, str, str]]]] = []
    read_problems: list[tuple[str, str, str]] = []  # of the batch being read: reported, in order, before its own

    def write(encs: list[Any], at: list[str], met: list[tuple[str, str, str]]) -> None:
        nonlocal truncated
        for args in met:  # the order of problems (and so of the kept examples) is the records' order
            problem(*args)
        buf: list[int] = []
        lens: list[int] = []
        extend, append = buf.extend, buf.append
        for i, enc in enumerate(encs):
            ids = enc.ids
            if not ids and n_extra == 0:
                problem("empty", at[i], "no tokens")
                continue
            if max_tokens is not None and len(ids) + n_extra > max_tokens:
                if policies["too_long"] == "truncate":
                    ids = ids[: max_tokens - n_extra]
                    truncated += 1
                else:
                    problem("too_long", at[i], f"{len(ids) + n_extra} tokens > max_doc_tokens={max_tokens}")
                    continue
            if bos is not None:
                append(bos)
            extend(ids)
            if eos is not None:
                append(eos)
            lens.append(len(ids) + n_extra)
        if lens:
            writer.add_flat(np.array(buf, dtype=np.int64), np.array(lens, dtype=np.int64))

    def drain(keep: int) -> None:
        while len(in_flight) > keep:
            future, at, met = in_flight.pop(0)
            write(future.result() if future is not None else [], at, met)

    def flush() -> None:
        if not batch and not read_problems:
            return
        future = encoder.submit(tok.encode_batch_fast, list(batch), add_special_tokens=False) if batch else None
        in_flight.append((future, list(where), list(read_problems)))
        batch.clear()
        where.clear()
        read_problems.clear()
        drain(1)

    try:
        for label, piece in driver.shard_pieces(shard, opts["remote_cache_dir"]):
            row_style = piece.fmt == "parquet"
            for pos, text, reason, detail in iter_records(piece, field_name):
                at = f"{label}: row {pos}" if row_style else f"{label}:{pos}"
                if reason is not None:
                    read_problems.append((reason, at, detail or ""))
                    continue
                chars_done += len(text)
                if not text.strip():
                    read_problems.append(("empty", at, "empty or whitespace-only document"))
                    continue
                if len(text) < min_chars:
                    skipped["short"] += 1
                    continue
                batch.append(text)
                where.append(at)
                batch_chars += len(text)
                if batch_chars >= opts["batch_bytes"]:
                    flush()
                    batch_chars = 0
                    now = time.monotonic()
                    if now - reported >= opts["report_s"]:
                        reported = now
                        yield "progress", {"chars": chars_done, "tokens": writer.tokens, "docs": writer.documents}
        flush()
        drain(0)
        bin_path, idx_path = writer.finish()
    except BaseException:
        writer.abort()
        raise
    finally:
        encoder.shutdown(wait=True, cancel_futures=True)
    receipt = {
        "key": shard["key"], "id": shard["id"], "dataset": shard["dataset"], "split": shard["split"],
        "documents": writer.documents, "tokens": writer.tokens, "skipped": dict(sorted(skipped.items())),
        "truncated": truncated, "chars": chars_done, "examples": examples,
        "files": {bin_path.name: bin_path.stat().st_size, idx_path.name: idx_path.stat().st_size},
        "bin_sha256": writer.sha256, "idx_sha256": sha256_file(idx_path),
        "seconds": round(time.monotonic() - t0, 3), "worker_pid": os.getpid(),
    }
    outputs.write_receipt(prefix, receipt)
    yield "done", receipt


# --------------------------------------------------------------------------------------------------
# the pipeline


def main(cfg: dict[str, Any]) -> int:
    """Entry point of ``run.py``: prepare the data the compiled config describes; returns the exit code (0).

    Raises:
        ConfigError: a config, blend or input problem found before any work (exit 2).
        RuntimeFailure: a failure while working (exit 1); finished shards keep their receipts, so a
            rerun resumes.
    """
    return driver.stage_main(cfg, Settings, prepare, lambda m: {"pretrain-data": {
        "path": m["path"], "blend_path": m["blend_json"], "data_version": m["version"],
        "tokenizer_sha256": m["tokenizer"].get("vocab_sha256")}})


def prepare(s: Settings, *, live_progress: bool | None = None, quiet: bool = False) -> dict[str, Any]:
    """Run the pipeline; returns the manifest (also written to ``<version>/manifest.json``).

    Args:
        s: checked settings (:meth:`Settings.from_config`).
        live_progress: force the live progress bar on/off (default: on when stdout is a terminal).
        quiet: print nothing (tests, benchmarks).

    Raises:
        ConfigError: see :func:`main`.
        RuntimeFailure: see :func:`main`.
    """
    # Ray starts while the driver resolves the tokenizer and plans (both only read inputs).
    return driver.drive(s, _plan_all, _execute, live_progress=live_progress, quiet=quiet, load=_load_blend)


def _load_blend(s: Settings, say) -> Blend:
    blend = driver.stage_blend(s)
    for _name, message in blend.dropped:
        say(f"warning: {message}")
    return blend


def _plan_all(s: Settings, blend: Blend, vdir: Path) -> tuple[Any, ...]:
    from nemotron.data import tokenizer as tk

    info = tk.resolve(s.tokenizer_name, cache_dir=os.path.expanduser(s.tokenizer_cache_dir),
                      revision=s.tokenizer_revision, bos_token=s.tokenizer_bos_token, eos_token=s.tokenizer_eos_token,
                      split_special_tokens=s.tokenizer_split_special_tokens)
    if s.add_bos and info.bos_id is None:
        raise ConfigError(f"add_bos=true but tokenizer {s.tokenizer_name} declares no BOS token; set tokenizer.bos_token")
    if s.add_eos and info.eos_id is None:
        raise ConfigError(f"add_eos=true but tokenizer {s.tokenizer_name} declares no EOS token; set tokenizer.eos_token")
    dtype = choose_dtype(info.vocab_size, s.dtype)
    tok = tk.load(info)

    # plan
    data_dir = vdir / "data"
    plans: list[DatasetPlan] = []
    not_found: list[str] = []
    for spec in blend.datasets:
        files, fmt = _dataset_files(spec, s, blend.path)
        if not files:
            not_found.append(driver.unmatched(blend, spec, s.on_bad["empty_glob"], "on_bad"))
            continue
        problem = text_documents_problem(blend.path, spec, fmt, len(files), s)
        if problem is not None:
            raise problem
        plans.append(plan_dataset(spec, files, fmt, s, tok, data_dir))
    driver.require_datasets(blend, plans)

    opts = {
        "tokenizer_json": str(vdir / "tokenizer" / "tokenizer.json"), "split_special_tokens": info.split_special_tokens,
        "bos_id": info.bos_id if s.add_bos else None, "eos_id": info.eos_id if s.add_eos else None,
        "dtype": dtype, "max_doc_tokens": s.max_doc_tokens, "min_doc_chars": s.min_doc_chars,
        "on_bad": dict(s.on_bad), "max_examples": s.max_examples, "batch_bytes": s.batch_bytes,
        "cpus_per_task": s.cpus_per_task, "remote_cache_dir": os.path.expanduser(s.remote_cache_dir),
        "report_s": 1.0, "tokenizer_sha256": info.file_sha256,
    }
    output_settings = {k: opts[k] for k in ("split_special_tokens", "bos_id", "eos_id", "dtype", "max_doc_tokens",
                                            "min_doc_chars", "on_bad")}
    output_settings["tokenizer"] = info.file_sha256
    shards: list[dict[str, Any]] = []
    for dp in plans:
        for sh in dp.shards:
            sh["key"] = stable_hash({"pieces": sh["pieces"], "text_field": sh["text_field"], **output_settings})
            shards.append(sh)
    inputs = driver.input_stamps(f for dp in plans for f in dp.files)
    plan_key = stable_hash({"shards": [sh["key"] for sh in shards], "ids": [sh["id"] for sh in shards],
                            "inputs": inputs, "settings": output_settings, "root": str(vdir)})
    plan_doc = {"stage": STAGE, "plan_key": plan_key, "shards": shards}
    return info, dtype, plans, not_found, opts, shards, plan_key, plan_doc


def _execute(run: driver.Run, blend: Blend, planned: tuple[Any, ...]) -> dict[str, Any]:
    info, dtype, plans, not_found, opts, shards, plan_key, plan_doc = planned
    vdir = run.vdir
    plan_doc = {**plan_doc, "basis": driver.plan_basis(run.s, shards)}
    done = driver.reuse_or_reset(run, plan_key, not_found, _print_summary, basis=plan_doc["basis"])
    if done is not None:
        return done
    from nemotron.data import tokenizer as tk

    tk.write_folder(vdir / "tokenizer", info)
    atomic_write_json(vdir / outputs.PLAN, plan_doc)

    receipts, todo = driver.split_done(shards)
    if receipts:
        run.say(f"resuming {vdir}: {len(receipts)} of {driver.count(len(shards), 'shards')} already done")

    run_info: dict[str, Any] = {}
    t_work = time.monotonic()
    try:
        if todo:
            with driver.ray_workers(run) as (workers, ray_info):
                driver.stream(run, build_shard, todo, opts, workers, receipts, title="pretrain data",
                              verb="tokenizing", noun="shards", units=lambda sh: max(sh["est_bytes"], 1),
                              detail=driver.engine_detail(ray_info), progress_key="chars")
            run_info.update(ray_info)
    finally:  # also on Ctrl-C or a failure: only finished shards (renamed into place) stay
        remove_tmp_files(vdir / "data")
    run_info["work_seconds"] = round(time.monotonic() - t_work, 3)
    run_info.update(driver.account(shards, todo, receipts, "shards", "tokens", lambda r: r["tokens"]))

    return _finish(run, blend, plans, shards, receipts, info, dtype, plan_key, not_found, run_info)


def _finish(run: driver.Run, blend: Blend, plans: list[DatasetPlan], shards: list[dict[str, Any]],
            receipts: dict[str, dict[str, Any]], info, dtype: str, plan_key: str, not_found: list[str],
            run_info: dict[str, Any]) -> dict[str, Any]:
    from nemotron.data import tokenizer as tk

    s, vdir = run.s, run.vdir
    by_ds: dict[str, list[dict[str, Any]]] = {}
    for sh in shards:
        by_ds.setdefault(sh["dataset"], []).append(sh)
    weights_total = sum(dp.spec.weight for dp in plans)
    missing_total = sum(float(m["weight"]) for m in blend.missing)
    splits: dict[str, list[tuple[float, str]]] = {k: [] for k in SPLITS}
    datasets = []
    for dp in plans:
        name = dp.spec.name
        recs = [(sh, receipts[sh["id"]]) for sh in by_ds.get(name, [])]
        tokens = {k: sum(r["tokens"] for sh, r in recs if sh["split"] == k) for k in SPLITS}
        docs = {k: sum(r["documents"] for sh, r in recs if sh["split"] == k) for k in SPLITS}
        skipped, examples = driver.problems_of((r for _sh, r in recs), s.max_examples)
        if tokens["train"] == 0:
            message, hint = _no_train_tokens(s, dp, docs, skipped)
            if examples:  # the records it names, not a promise of them (the summary is never printed)
                hint += "; first skipped: " + " | ".join(e if len(e) <= 400 else e[:397] + "..." for e in examples[:3])
            raise RuntimeFailure(message, hint)
        for split in SPLITS:
            good = [(sh, r) for sh, r in recs if sh["split"] == split and r["tokens"] > 0]
            for w, (sh, _r) in zip(prefix_weights(dp.spec.weight, [r["tokens"] for _sh, r in good]), good, strict=True):
                splits[split].append((w, sh["prefix"]))
        share = dp.spec.weight / weights_total
        datasets.append({
            "name": name, "category": dp.spec.category, "weight": dp.spec.weight, "share": share,
            "nominal_share": dp.spec.weight / (weights_total + missing_total),
            "epochs": (s.planned_tokens * share / tokens["train"]) if s.planned_tokens else None,
            "files": len(dp.files), "input_bytes": dp.input_bytes, "bytes_per_token_estimate": round(dp.bytes_per_token, 4),
            "documents": docs, "tokens": tokens, "skipped": dict(sorted(skipped.items())),
            "truncated": sum(r["truncated"] for _sh, r in recs),
            "shards": {k: sum(1 for sh, _r in recs if sh["split"] == k) for k in SPLITS},
            "seconds": round(sum(r["seconds"] for _sh, r in recs), 3),
            "examples": examples,
        })
    blend_out = write_megatron_blend(vdir / outputs.BLEND, splits)
    total_tokens = {k: sum(d["tokens"][k] for d in datasets) for k in SPLITS}
    tok_info = info.to_dict()
    tok_info["json_path"] = "tokenizer/tokenizer.json"
    # read by the training stages: keep the name; relative to the version folder (a copied output names its own)
    tok_info["megatron"] = tk.megatron_fields(vdir / "tokenizer", base=vdir)
    manifest = {
        **driver.manifest_head(run, STAGE, "pretrain-data", "megatron-indexed-dataset", plan_key),
        "blend": driver.blend_record(blend, not_found, missing_categories=blend.missing,
                                     dropped=[m for _n, m in blend.dropped]),
        "blend_json": str(vdir / outputs.BLEND),
        "tokenizer": tok_info, "dtype": dtype,
        "settings": {"add_bos": s.add_bos, "add_eos": s.add_eos, "min_doc_chars": s.min_doc_chars,
                     "max_doc_tokens": s.max_doc_tokens, "sample": s.sample, "valid_docs": s.valid_docs,
                     "test_docs": s.test_docs, "target_tokens": s.target_tokens,
                     "max_per_dataset": s.max_per_dataset, "on_bad": s.on_bad, "planned_tokens": s.planned_tokens},
        "datasets": datasets,
        "totals": {"tokens": total_tokens, "shards": len(shards),
                   "prefixes": {k: len(v) // 2 for k, v in blend_out.items()}},
        "shards": [{"id": sh["id"], "dataset": sh["dataset"], "split": sh["split"], "prefix": sh["prefix"],
                    "documents": receipts[sh["id"]]["documents"], "tokens": receipts[sh["id"]]["tokens"],
                    "bin_sha256": receipts[sh["id"]]["bin_sha256"]} for sh in shards],
        "run": {**run_info, "seconds": round(time.monotonic() - run.t_start, 3)},
    }
    return driver.publish(run, manifest, _print_summary)


def _no_train_tokens(s: Settings, dp: DatasetPlan, docs: dict[str, int], skipped: Counter[str]) -> tuple[str, str]:
    """The message and hint of a dataset that wrote no training token: what its records became, and the
    key to change for the reason that took them all."""
    name = dp.spec.name
    message = (f"dataset {name} produced no training tokens: {driver.count(sum(skipped.values()), 'records')} skipped"
               f"{' (' + fmt_counts(skipped) + ')' if skipped else ''}, {docs['valid']:,} held out for validation "
               f"and {docs['test']:,} for test")
    top = max(skipped, key=lambda k: skipped[k]) if skipped else None
    if top == "too_long":
        hint = (f"max_doc_tokens={s.max_doc_tokens} is below every document's length: raise it, or set "
                "on_bad.too_long=truncate")
    elif top == "short":
        hint = f"min_doc_chars={s.min_doc_chars} is above every document's length: lower it"
    elif top == "missing_field":
        hint = f"no record has the field {dp.spec.text_field!r}: set the dataset's text_field in the blend"
    elif top == "not_object":
        hint = ("the records are not JSON objects (each line a list, a string or null): give one object per line "
                f"with the text in {dp.spec.text_field!r}")
    elif top == "wrong_type":
        hint = (f"the field {dp.spec.text_field!r} holds no text (numbers, lists or objects): point the dataset's "
                "text_field at a string field, or convert that column to text")
    elif top is not None:
        hint = f"every training record was skipped as {top}: check the dataset's path and format"
    else:
        n = docs["valid"] + docs["test"]
        hint = (f"the dataset has {driver.count(n, 'records')}, all held out by split.valid_docs={s.valid_docs} + "
                f"split.test_docs={s.test_docs}: "
                + (f"lower them below {n} together" + (" or raise sample" if s.sample else "") if n > 2
                   else "give it more records (each split needs at least one)"))
    return message, hint


def _print_summary(m: dict[str, Any]) -> None:
    from nemotron.data.progress import human, print_table

    rows = []
    for d in m["datasets"]:
        tok_all = sum(d["tokens"].values())
        rows.append([
            d["name"], f"{sum(d['documents'].values()):,}", fmt_counts(d["skipped"]) or "-",
            f"{d['truncated']:,}" if d["truncated"] else "-", human(tok_all),
            f"{d['shards']['train']}+{d['shards']['valid']}+{d['shards']['test']}", f"{d['seconds']:.1f}",
            human(tok_all / d["seconds"]) if d["seconds"] else "-", f"{100 * d['share']:.2f}%",
            f"{d['epochs']:.3g}" if d.get("epochs") is not None else "-",
        ])
    tt = sum(m["totals"]["tokens"].values())
    footer = ["total", f"{sum(sum(d['documents'].values()) for d in m['datasets']):,}",
              f"{sum(sum(d['skipped'].values()) for d in m['datasets']):,}",
              f"{sum(d['truncated'] for d in m['datasets']):,}", human(tt), str(m["totals"]["shards"]),
              "", "", "100%", ""]
    print_table(f"pretrain data: {m['path']}",
                ["dataset", "documents", "skipped (reason)", "truncated", "tokens", "shards t+v+t", "seconds",
                 "tokens/s", "share", "epochs"], rows, footer=footer)
    cats: dict[str, dict[str, float]] = {}
    for d in m["datasets"]:
        c = cats.setdefault(d["category"], {"tokens": 0, "share": 0.0, "nominal": 0.0})
        c["tokens"] += d["tokens"]["train"]
        c["share"] += d["share"]
        c["nominal"] += d["nominal_share"]
    planned = m["settings"].get("planned_tokens")
    crow = []
    for name, c in sorted(cats.items(), key=lambda kv: -kv[1]["share"]):
        epochs = planned * c["share"] / c["tokens"] if planned and c["tokens"] else None
        crow.append([name, human(c["tokens"]), f"{100 * c['nominal']:.2f}%", f"{100 * c['share']:.2f}%",
                     human(planned * c["share"]) if planned else "-", f"{epochs:.3g}" if epochs else "-"])
    miss_total = sum(float(x["weight"]) for x in m["blend"]["missing_categories"])
    all_w = sum(d["weight"] for d in m["datasets"]) + miss_total
    for x in m["blend"]["missing_categories"]:
        crow.append([f"{x['category']} (no open data)", "0", f"{100 * float(x['weight']) / all_w:.2f}%", "0%", "-", "-"])
    print_table("by category (nominal = blend weights incl. missing; effective = what Megatron samples)",
                ["category", "train tokens", "nominal", "effective", "planned tokens", "epochs"], crow)
    con = driver.print_examples(m, "on_bad.max_examples")
    con.print(driver.work_line(m["run"], [("shards", "built")], "tokens", "tok/s"))
    con.print(f"blend.json: {m['blend_json']}  ({m['totals']['prefixes']['train']} train, "
              f"{m['totals']['prefixes']['valid']} valid, {m['totals']['prefixes']['test']} test prefixes; "
              f"dtype {m['dtype']}; tokenizer {m['tokenizer']['name']} vocab {m['tokenizer']['vocab_size']:,} "
              f"sha256 {m['tokenizer']['vocab_sha256'][:12]})")
