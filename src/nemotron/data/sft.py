"""SFT data prep: chat datasets → Nemotron 3 chat format → assistant-only loss masks → packed Parquet.

Flow (:func:`prepare`)::

    load blend ─► choose output version ─► tokenizer (+ chat tokens) ─► plan shards (pure, from the inputs)
      ─► Ray: tokenize each shard (normalise, render, mask, truncate; receipts)      [stage 1]
      ─► passes per dataset from the blend weights ─► windows of the sequence stream
      ─► Ray: pack each window into one Parquet part (receipts)                      [stage 2]
      ─► parts joined, row group by row group, into one file per split (receipt)
      ─► Megatron-Bridge packing metadata ─► manifest.json (last) ─► summary tables

Guarantees (as for pretraining data prep):

* **Deterministic.** Shards and windows are defined by the inputs and the config alone; a shard's
  sequences depend only on its records, a window's packs only on its sequences; the held-out split
  and fractional passes are seeded hashes of (dataset, file, record position). 1 or N workers,
  resumed or not: byte-identical Parquet.
* **Resumable.** Every shard and part is written to temporary files renamed into place, then a receipt
  records its key and sizes; a rerun redoes only what has no matching receipt.
* **Nothing silently lost.** Every record that yields no sample is counted under a reason with
  ``file:line`` examples, or fails the run, by policy; truncated and dropped tokens are counted.

Output (``OUTPUT_DIR``, a version folder)::

    manifest.json                       written last; pack_size, pad_to_multiple, tokenizer, counts, fill ...
    plan.json                           shards and windows
    tokenizer/tokenizer.json            the tokenizer used (chat tokens included) + tokenizer_config.json
    data/training_<P>.idx.parquet       Megatron-Bridge packed Parquet (the loader's default file name)
    data/validation_<P>.idx.parquet     the held-out packs, same form
    data/<P>_metadata.jsonl             Megatron-Bridge packing metadata (JSON list: training, validation)
    data/sequences/<dataset>/NNNNN.*    tokenized sequences (tokens .bin/.idx, learned-token flags .mask, split .meta.npy,
                                        one content key per conversation .keys.npy: the duplicates count)
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.data import driver, outputs
from nemotron.data.blend import Blend
from nemotron.data.chat import CHAT_SCHEMAS, CHAT_TOKENS, REQUIRED_TOKENS
from nemotron.data.files import atomic_open, atomic_write_json, remove_tmp_files, sha256_file, stable_hash
from nemotron.data.prep import Problems, passes_from_weights, plan_datasets, unit_hash, unit_hash_one
from nemotron.errors import ConfigError, RuntimeFailure

STAGE = "data-prep-sft"
SPLITS = ("train", "valid")
SPLIT_FILES = outputs.SFT_SPLIT_FILES
#: Policies and the values each accepts (first = default).
POLICIES: dict[str, tuple[str, ...]] = {
    "bad_record": ("skip", "fail"),
    "unknown_role": ("skip", "fail"),
    "empty_content": ("skip", "fail"),
    "consecutive_same_role": ("merge", "skip", "fail"),
    "no_assistant_turn": ("skip", "fail"),
    "control_token_text": ("text", "skip", "fail"),
    "too_long": ("truncate_turns", "drop", "fail"),
    "template_mismatch": ("fail", "skip"),
    "empty_glob": ("fail", "skip"),
}
_RECORD_PROBLEMS = {"malformed_json": "bad_record", "invalid_utf8": "bad_record", "not_an_object": "bad_record"}

_SECTIONS = {
    "tokenizer": ("name", "revision", "add_special_tokens", "cache_dir"),
    "chat": ("template", "reasoning", "history_reasoning"),
    "policies": (*POLICIES, "max_examples"),
    "pack": ("pack_size", "pad_to_multiple", "algorithm", "window", "seed", "row_group_size", "compression"),
    "shards": ("target_bytes",),
    "split": ("validation_fraction", "seed"),
    "workers": ("count", "cpus_per_task", "engine", "in_process_max_bytes"),
    "remote": ("cache_dir",),
    "summary": ("progress_interval_s",),
}
_TOP = ("blend_path", "output_dir", "path_vars", "sample", "force", "mixing")


@dataclass
class Settings(driver.StageSettings):
    """The stage config, checked (field names follow the YAML keys; ``pack_size`` = ``pack.pack_size``)."""

    STAGE = STAGE  # the blend's dataset keys this stage reads: nemotron.data.blend.STAGE_DATASET_KEYS
    #: A plain-text file (``*.txt``, ``format: text``) is one record ``{"text": <the file>}``: one transcript per file.
    TEXT_RECORDS = True

    INPUT_KEYS = (("blend_path", "blend_path"), ("tokenizer.name", "tokenizer_name"), ("chat.template", "template"))
    #: A JSON array file larger than 1.5 x ``shards.target_bytes`` is cut into element ranges (several
    #: tasks), as a JSONL file is cut at line starts; the held-out split is keyed by element index, not by shard.
    SPLIT_JSON_ARRAYS = True

    mixing: str = "weighted"
    tokenizer_name: str = ""
    tokenizer_revision: str | None = None
    add_special_tokens: list[str] = field(default_factory=list)
    tokenizer_cache_dir: str = "~/.cache/nemotron/tokenizers"
    template: str = ""
    reasoning: str = "auto"
    history_reasoning: str = "split"
    policies: dict[str, str] = field(default_factory=lambda: {k: v[0] for k, v in POLICIES.items()})
    max_examples: int = 5
    pack_size: int = 4096
    pad_to_multiple: int = 1
    algorithm: str = "best_fit_decreasing"
    window: int = 100_000
    seed: int = 1234
    row_group_size: int = 64
    compression: str = "zstd"
    target_bytes: int = 256 << 20
    validation_fraction: float = 0.01
    split_seed: int = 1234

    @classmethod
    def reader(cls, cfg: dict[str, Any]) -> driver.Reader:
        """This stage's config reader over ``cfg`` (it knows the stage's keys)."""
        return driver.Reader(cfg, _TOP, _SECTIONS)

    def read_own(self, c: driver.Reader) -> None:
        """Read this stage's own keys (see :meth:`nemotron.data.driver.StageSettings.from_config`)."""
        self.mixing = c.choice("mixing", ("weighted", "natural"), "weighted")
        self.tokenizer_name = c.str("tokenizer.name")
        self.tokenizer_revision = c.str("tokenizer.revision", None)
        extra = c.get("tokenizer.add_special_tokens", []) or []
        if not isinstance(extra, list) or not all(isinstance(t, str) and t for t in extra):
            raise ConfigError(f"tokenizer.add_special_tokens={extra!r} must be a list of token strings")
        self.add_special_tokens = list(extra)
        self.tokenizer_cache_dir = c.str("tokenizer.cache_dir", self.tokenizer_cache_dir)
        self.template = c.str("chat.template")
        self.reasoning = c.choice("chat.reasoning", ("auto", "off"), "auto")
        self.history_reasoning = c.choice("chat.history_reasoning", ("split", "keep"), "split")
        self.policies = {k: c.choice(f"policies.{k}", v, v[0]) for k, v in POLICIES.items()}
        self.max_examples = c.int("policies.max_examples", 5, minimum=0)
        self.pack_size = c.int("pack.pack_size", self.pack_size, minimum=16)
        self.pad_to_multiple = c.int("pack.pad_to_multiple", 1, minimum=1)
        if self.pack_size % self.pad_to_multiple:
            raise ConfigError(f"pack.pack_size={self.pack_size} is not a multiple of pack.pad_to_multiple={self.pad_to_multiple}")
        self.algorithm = c.choice("pack.algorithm", ("best_fit_decreasing", "first_fit"), "best_fit_decreasing")
        self.window = c.int("pack.window", self.window, minimum=1)
        self.seed = c.int("pack.seed", self.seed)
        self.row_group_size = c.int("pack.row_group_size", self.row_group_size, minimum=1)
        self.compression = c.choice("pack.compression", ("zstd", "snappy", "gzip", "none"), "zstd")
        self.target_bytes = c.int("shards.target_bytes", self.target_bytes, minimum=1)
        self.validation_fraction = c.float("split.validation_fraction", self.validation_fraction, minimum=0)
        if self.validation_fraction >= 1:
            raise ConfigError(f"split.validation_fraction={self.validation_fraction} must be below 1")
        self.split_seed = c.int("split.seed", self.split_seed)


def main(cfg: dict[str, Any]) -> int:
    """Entry point of ``run.py``: prepare the data the compiled config describes; returns 0.

    Raises:
        ConfigError: a config, blend or input problem found before any work (exit 2).
        RuntimeFailure: a failure while working (exit 1); finished shards keep their receipts.
    """
    return driver.stage_main(cfg, Settings, prepare, lambda m: {"sft-data": {
        "path": m["path"], "data_version": m["version"], "pack_size": m["pack_size"],
        "pad_to_multiple": m["pad_to_multiple"], "train_path": m["loader"]["packed_train_data_path"],
        "valid_path": m["loader"]["packed_val_data_path"], "metadata_path": m["loader"]["packed_metadata_path"],
        "tokenizer_sha256": m["tokenizer"].get("vocab_sha256")}})


# --------------------------------------------------------------------------------------------------
# tokenizer


@dataclass
class ChatTokenizer:
    info: Any                      # TokenizerInfo of the tokenizer.json the workers load
    added: dict[str, int]          # chat tokens added to the source vocabulary (token -> id)
    source: dict[str, Any]         # the source tokenizer (name, vocab hash) before tokens were added


def missing_chat_tokens(s: Settings, missing: list[str]) -> ConfigError:
    """The refusal of a tokenizer without the chat tokens ``missing`` that ``tokenizer.add_special_tokens`` does not
    add (the run's, :func:`resolve_tokenizer`, and the dry run's, from the tokenizer file's JSON)."""
    return ConfigError(f"tokenizer.name={s.tokenizer_name}: the vocabulary has no {', '.join(missing)} token "
                       "(the Nemotron 3 chat format needs them as single tokens)",
                       f"list them under tokenizer.add_special_tokens (for example {list(CHAT_TOKENS)})")


def chat_token_problem(s: Settings) -> ConfigError | None:
    """:func:`missing_chat_tokens` for a local tokenizer file, read without building it
    (:func:`nemotron.data.tokenizer.declared_tokens`; ``--dry-run``); ``None`` when it has them or cannot be read
    here (a hub id: the run checks)."""
    from nemotron.data.tokenizer import declared_tokens

    tokens = declared_tokens(s.tokenizer_name)
    if tokens is None:
        return None
    missing = [t for t in REQUIRED_TOKENS if t not in tokens and t not in s.add_special_tokens]
    return missing_chat_tokens(s, missing) if missing else None


def resolve_tokenizer(s: Settings) -> ChatTokenizer:
    """The configured tokenizer with the chat tokens the template needs (added when listed and missing).

    Raises:
        ConfigError: the tokenizer lacks a chat token that ``tokenizer.add_special_tokens`` does not list.
    """
    from nemotron.data import tokenizer as tk
    from nemotron.data.chat import add_chat_tokens

    cache = Path(os.path.expanduser(s.tokenizer_cache_dir))
    base = tk.resolve(s.tokenizer_name, cache_dir=cache, revision=s.tokenizer_revision, split_special_tokens=False)
    base_tok = tk.load(base)
    missing = [t for t in REQUIRED_TOKENS if base_tok.token_to_id(t) is None and t not in s.add_special_tokens]
    if missing:
        raise missing_chat_tokens(s, missing)
    key = stable_hash({"source": base.file_sha256, "tokens": s.add_special_tokens})
    path, added = add_chat_tokens(base.json_path, s.add_special_tokens, cache / f"chat-{key}")
    source = {"name": base.name, "vocab_size": base.vocab_size, "vocab_sha256": base.vocab_sha256}
    if path is None:
        return ChatTokenizer(base, {}, source)
    info = tk.resolve(str(path), cache_dir=cache, bos_token=base.bos_token, eos_token=base.eos_token,
                      split_special_tokens=False)
    return ChatTokenizer(info, added, source)


# --------------------------------------------------------------------------------------------------
# stage 1: tokenize a shard (runs in a Ray worker)


#: Per shard, one 64-bit content key per conversation (:func:`conversation_key`, uint64, in record order).
KEYS_SUFFIX = ".keys.npy"


def conversation_key(msgs: list[Any], tools: Any) -> int:
    """A 64-bit key (BLAKE2b) of one normalised conversation, its messages and tools: two records with the same
    content (whatever their ids, file or dataset) have the same key; what :func:`duplicates` counts."""
    import hashlib
    import json

    text = json.dumps([msgs, tools], sort_keys=True, ensure_ascii=False, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def duplicates(shards: list[dict[str, Any]]) -> dict[str, int | None]:
    """Per dataset, how many conversations repeat an earlier one (same :func:`conversation_key`), counted over the
    shards in plan order, across datasets, as data prep rl counts its ``duplicates`` (the later copy is the
    duplicate); ``None`` for a dataset with a shard that has no keys file (made by an older version). Reported,
    not dropped: each copy is trained on."""
    import numpy as np

    seen: set[int] = set()
    out: dict[str, int | None] = {}
    for sh in shards:
        name = sh["dataset"]
        path = Path(sh["prefix"] + KEYS_SUFFIX)
        if not path.is_file():
            out[name] = None
            continue
        n = 0
        for k in np.load(path).tolist():
            if k in seen:
                n += 1
            else:
                seen.add(k)
        if out.get(name, 0) is not None:
            out[name] = out.get(name, 0) + n
    return out


def tokenize_shard(shard: dict[str, Any], opts: dict[str, Any]):
    """Normalise, render, mask and tokenize one shard's records into ``<prefix>.bin/.idx/.mask/.meta.npy``.

    A generator (a Ray streaming task): yields ``("progress", {"units", "tokens", "docs"})`` now and
    then, and ``("done", receipt)`` last.

    Raises:
        RuntimeFailure: a record problem whose policy is ``fail`` (message ``<file>:<line>: ...``).
    """
    import numpy as np

    from nemotron.data import chat
    from nemotron.data import tokenizer as tk
    from nemotron.data.files import tmp_name
    from nemotron.data.indexed import IndexedWriter
    from nemotron.data.records import iter_objects, where

    os.environ["RAYON_NUM_THREADS"] = str(opts["cpus_per_task"])
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    t0 = time.monotonic()
    tok = tk.load(opts["tokenizer_json"], False, sha256=opts.get("tokenizer_sha256"))
    template = chat.load_template(opts["template"])
    policy = chat.ChatPolicy(consecutive_same_role=opts["policies"]["consecutive_same_role"],
                             reasoning=opts["reasoning"])
    control = chat.ControlText(tk.added_tokens(tok))
    control_policy = opts["policies"].get("control_token_text", "text")
    problems = Problems(opts["policies"], opts["max_examples"])
    pack_size = opts["pack_size"]
    # a sequence of n tokens is stored padded to ceil((n - 1) / mult) * mult + 1 tokens; pack_size is a
    # multiple of mult, so that fits a pack exactly when n <= pack_size - mult + 1
    max_tokens = pack_size - opts["pad_to_multiple"] + 1
    prefix = Path(shard["prefix"])
    writer = IndexedWriter(prefix, "int32")
    mask_path = prefix.with_name(prefix.name + ".mask")
    mask_tmp = tmp_name(mask_path)
    mask_fh = open(mask_tmp, "wb")  # noqa: SIM115 - closed below
    splits: list[int] = []
    counts: Counter[str] = Counter()
    tokens = dict.fromkeys(SPLITS, 0)
    learned = dict.fromkeys(SPLITS, 0)
    pending: list[tuple[list[Any], int, str]] = []
    conv_keys: list[int] = []  # one content key per conversation, in order (duplicates are counted by the driver)
    shortest_dropped: list[int] = []  # the token count of the shortest sample dropped as too long (0 or 1 item)
    units = 0.0
    reported = t0

    def flush() -> None:
        segs = [g for group, _split, _at in pending for g in group]
        toks = chat.tokenize_samples(tok, segs, control)
        # the batch's samples go to the files in one write each (ids, lengths, learned flags)
        out_ids: list[int] = []
        out_lens: list[int] = []
        out_mask: list[int] = []
        k = 0
        for group, split, at in pending:
            for _ in group:
                t = toks[k]
                k += 1
                n = len(t.ids)
                if n > max_tokens:
                    if opts["policies"]["too_long"] == "fail":
                        raise RuntimeFailure(f"{at}: too_long: {n} tokens do not fit pack_size={pack_size}",
                                             "set policies.too_long=truncate_turns or drop")
                    first = t.learned.index(1) if 1 in t.learned else n
                    cut = max((e for e in t.turn_ends if first < e <= max_tokens), default=0)
                    if opts["policies"]["too_long"] == "drop" or cut == 0:
                        problems.report("too_long", at, f"{n} tokens do not fit pack_size={pack_size}; sample dropped",
                                        policy_key="too_long")
                        counts["dropped_tokens"] += n
                        shortest_dropped[:] = [min([n, *shortest_dropped])]
                        continue
                    counts["truncated"] += 1
                    counts["truncated_tokens"] += n - cut
                    t.ids, t.learned = t.ids[:cut], t.learned[:cut]
                    n = cut
                out_ids.extend(t.ids)
                out_lens.append(n)
                out_mask.extend(t.learned)
                splits.append(split)
                name = SPLITS[split]
                tokens[name] += n
                learned[name] += sum(t.learned)
                counts["samples"] += 1
        if out_lens:
            writer.add_flat(np.array(out_ids, dtype=np.int64), np.array(out_lens, dtype=np.int64))
            mask_fh.write(np.array(out_mask, dtype=np.uint8).tobytes())
        pending.clear()

    try:
        for label, piece in driver.shard_pieces(shard, opts["remote_cache_dir"]):
            file_index = shard["file_index"][label]
            done_here = 0.0
            for pos, ordinal, obj, problem, detail in iter_objects(piece):
                at = where(label, piece.fmt, pos)
                counts["records"] += 1
                if problem is not None:
                    problems.report(problem, at, detail or "", policy_key=_RECORD_PROBLEMS.get(problem, "bad_record"))
                    continue
                try:
                    msgs, tools = chat.normalise(chat.map_fields(obj, shard.get("fields")), shard["schema"], policy)
                    msgs, tools, hidden = chat.check_control_text(control, msgs, tools, control_policy)
                    counts["control_text"] += hidden
                    samples = chat.training_samples(msgs, opts["history_reasoning"])
                    segs = [chat.segment(template, smp, tools) for smp in samples]
                except chat.RecordProblem as exc:
                    problems.report(exc.reason, at, exc.detail)
                    continue
                counts["conversations"] += 1
                conv_keys.append(conversation_key(msgs, tools))
                key = f"{shard['dataset']}/{file_index}"
                split = 1 if unit_hash_one(opts["split_seed"], key, ordinal) < opts["validation_fraction"] else 0
                pending.append((segs, split, at))
                done_here += sum(len(g.text) for g in segs)
                if len(pending) >= 256:
                    flush()
                    now = time.monotonic()
                    if now - reported >= opts["report_s"]:
                        reported = now
                        yield "progress", {"units": units + min(done_here, piece.est_bytes),
                                           "tokens": writer.tokens, "docs": counts["conversations"]}
            units += max(piece.est_bytes, 1)
        flush()
        mask_fh.flush()
        os.fsync(mask_fh.fileno())
        mask_fh.close()
        bin_path, idx_path = writer.finish()
        meta_path = prefix.with_name(prefix.name + ".meta.npy")
        with atomic_open(meta_path, "wb") as fh:
            np.save(fh, np.asarray(splits, dtype=np.uint8))
        keys_path = prefix.with_name(prefix.name + KEYS_SUFFIX)
        with atomic_open(keys_path, "wb") as fh:
            np.save(fh, np.asarray(conv_keys, dtype=np.uint64))
        os.replace(mask_tmp, mask_path)
    except BaseException:
        writer.abort()
        mask_fh.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(mask_tmp)
        raise
    receipt = {
        "key": shard["key"], "id": shard["id"], "dataset": shard["dataset"],
        "records": counts["records"], "conversations": counts["conversations"], "samples": counts["samples"],
        "sequences": {"train": splits.count(0), "valid": splits.count(1)}, "tokens": tokens, "learned": learned,
        "skipped": dict(sorted(problems.counts.items())), "examples": problems.examples,
        "truncated": counts["truncated"], "truncated_tokens": counts["truncated_tokens"],
        "control_text": counts["control_text"],
        "dropped_tokens": counts["dropped_tokens"], "shortest_dropped": shortest_dropped[0] if shortest_dropped else None,
        "files": {p.name: p.stat().st_size for p in (bin_path, idx_path, mask_path, meta_path, keys_path)},
        "bin_sha256": writer.sha256, "seconds": round(time.monotonic() - t0, 3), "worker_pid": os.getpid(),
    }
    outputs.write_receipt(prefix, receipt)
    yield "done", receipt


# --------------------------------------------------------------------------------------------------
# stage 2: pack a window of the sequence stream into one Parquet part (runs in a Ray worker)


def _selected(meta: Any, split: int, fraction: float, seed: int, key: str) -> Any:
    """Indices of a shard's sequences of ``split`` taken by one pass (all, or a seeded ``fraction``)."""
    import numpy as np

    idx = np.flatnonzero(meta == split)
    if fraction < 1.0:
        idx = idx[unit_hash(seed, key, idx) < fraction]
    return idx


def pack_window(window: dict[str, Any], opts: dict[str, Any]):
    """Pack one window's sequences and write them as one Parquet part; yields ``("done", receipt)``.

    Each row: ``input_ids`` list<int32>, ``loss_mask`` list<uint8> (label-aligned per sub-sequence,
    0 on padding), ``seq_start_id`` list<int32> (start of each sub-sequence).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nemotron.data.files import tmp_name
    from nemotron.data.indexed import read_index
    from nemotron.data.packing import ALGORITHMS, PackStats, label_aligned, padded_length, shuffled, split_full

    t0 = time.monotonic()
    mult, cap, pad_id = opts["pad_to_multiple"], opts["pack_size"], opts["pad_id"]
    split = SPLITS.index(window["split"])
    sources: dict[str, dict[str, Any]] = {}

    def source(prefix: str) -> dict[str, Any]:
        if prefix not in sources:
            index = read_index(prefix)
            sources[prefix] = {"lengths": index["lengths"], "tokens": np.memmap(prefix + ".bin", dtype="<i4", mode="r"),
                               "mask": np.memmap(prefix + ".mask", dtype=np.uint8, mode="r"),
                               "offsets": np.concatenate([[0], np.cumsum(index["lengths"], dtype=np.int64)])}
        return sources[prefix]

    refs: list[tuple[str, int]] = []          # (shard prefix, sequence index)
    if "refs" in window:                      # a final window of sequences carried from other windows
        refs = [(prefix, int(i)) for prefix, i in window["refs"]]
    for seg in window.get("segments", []):
        meta = np.load(seg["prefix"] + ".meta.npy")
        chosen = _selected(meta, split, seg["fraction"], opts["seed"], f"{seg['shard']}/pass{seg['pass']}")
        refs.extend((seg["prefix"], int(i)) for i in chosen[seg["start"]:seg["stop"]])
    lengths = [int(source(p)["lengths"][i]) for p, i in refs]
    costs = [padded_length(x, mult) for x in lengths]
    bins = ALGORITHMS[opts["algorithm"]](np.asarray(costs, dtype=np.int64), cap) if refs else []
    carry: list[list[Any]] = []
    if not window["final"]:
        bins, rest = split_full(bins, costs, cap)
        carry = [[refs[i][0], refs[i][1]] for i in rest]
        keep = sorted({i for b in bins for i in b})
        lengths_kept = sum(lengths[i] for i in keep)
    else:
        lengths_kept = sum(lengths)
    order = shuffled(len(bins), opts["seed"], window["number"])
    stats = PackStats(cap)
    out = Path(window["path"])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(out)
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.uint8())),
                        ("seq_start_id", pa.list_(pa.int32()))])
    compression = None if opts["compression"] == "none" else opts["compression"]
    learned_tokens = 0
    try:
        with pq.ParquetWriter(tmp, schema, compression=compression) as pw:
            rows: dict[str, list[Any]] = {"ids": [], "mask": [], "starts": []}

            def write_group() -> None:
                if not rows["ids"]:
                    return
                offs = np.concatenate([[0], np.cumsum([len(x) for x in rows["ids"]])]).astype(np.int32)
                soffs = np.concatenate([[0], np.cumsum([len(x) for x in rows["starts"]])]).astype(np.int32)
                table = pa.Table.from_arrays([
                    pa.ListArray.from_arrays(pa.array(offs), pa.array(np.concatenate(rows["ids"]), pa.int32())),
                    pa.ListArray.from_arrays(pa.array(offs), pa.array(np.concatenate(rows["mask"]), pa.uint8())),
                    pa.ListArray.from_arrays(pa.array(soffs), pa.array(np.concatenate(rows["starts"]), pa.int32())),
                ], schema=schema)
                pw.write_table(table, row_group_size=len(rows["ids"]))
                for v in rows.values():
                    v.clear()

            for b in order:
                items = bins[b]
                stats.add_bin([costs[i] for i in items], [costs[i] - 1 for i in items])
                parts_ids, parts_mask, starts, pos = [], [], [], 0
                for i in items:
                    prefix, j = refs[i]
                    src = source(prefix)
                    lo, hi = int(src["offsets"][j]), int(src["offsets"][j + 1])
                    ids = np.asarray(src["tokens"][lo:hi], dtype=np.int32)
                    learned = np.asarray(src["mask"][lo:hi], dtype=np.uint8)
                    learned_tokens += int(learned.sum())
                    full = padded_length(hi - lo, mult)
                    if full > len(ids):
                        ids = np.concatenate([ids, np.full(full - len(ids), pad_id, dtype=np.int32)])
                        learned = np.concatenate([learned, np.zeros(full - len(learned), dtype=np.uint8)])
                    parts_ids.append(ids)
                    parts_mask.append(label_aligned(learned))
                    starts.append(pos)
                    pos += full
                rows["ids"].append(np.concatenate(parts_ids))
                rows["mask"].append(np.concatenate(parts_mask))
                rows["starts"].append(np.asarray(starts, dtype=np.int32))
                if len(rows["ids"]) >= opts["row_group_size"]:
                    write_group()
            write_group()
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    receipt = {"key": window["key"], "id": window["id"], "split": window["split"], "stats": stats.to_dict(),
               "tokens": int(lengths_kept), "learned_tokens": learned_tokens, "rows": stats.packs, "carry": carry,
               "files": {out.name: out.stat().st_size}, "sha256": sha256_file(out),
               "seconds": round(time.monotonic() - t0, 3)}
    outputs.write_receipt(window["receipt_prefix"], receipt)
    yield "done", receipt


# --------------------------------------------------------------------------------------------------
# the pipeline


def prepare(s: Settings, *, live_progress: bool | None = None, quiet: bool = False) -> dict[str, Any]:
    """Run the pipeline; returns the manifest (also written to ``<version>/manifest.json``).

    Raises:
        ConfigError: a config, blend or input problem found before any work.
        RuntimeFailure: a failure while working (rerun to resume).
    """
    # Ray starts while the driver resolves the tokenizer and plans (both only read inputs).
    return driver.drive(s, _plan, _execute, live_progress=live_progress, quiet=quiet)


@dataclass
class _Plan:
    tok: ChatTokenizer
    datasets: list[Any]
    shards: list[dict[str, Any]]
    not_found: list[str]
    opts: dict[str, Any]
    key: str
    template_sha256: str


def _plan(s: Settings, blend: Blend, vdir: Path) -> _Plan:
    from nemotron.data.chat import load_template

    load_template(s.template)  # a syntax error is a config error, found before any work
    tok = resolve_tokenizer(s)
    if s.pad_to_multiple > 1 and tok.info.eos_id is None:
        raise ConfigError(f"pack.pad_to_multiple={s.pad_to_multiple} pads with the EOS token, but tokenizer "
                          f"{s.tokenizer_name} declares none")
    datasets, not_found = plan_datasets(blend, s, CHAT_SCHEMAS)
    shards = []
    for ds in datasets:
        spec = ds.spec
        file_index = {f: i for i, f in enumerate(ds.files)}
        for k, pieces in enumerate(ds.shards):
            shards.append({
                "id": f"{spec.name}/{k:05d}", "dataset": spec.name, "schema": ds.schema, "fields": dict(spec.fields),
                "prefix": str(vdir / "data" / "sequences" / spec.name / f"{k:05d}"),
                "pieces": [p.to_dict() for p in pieces], "est_bytes": sum(p.est_bytes for p in pieces),
                "file_index": {p.file: file_index[p.file] for p in pieces},
            })
    template_sha = sha256_file(s.template)
    opts = {
        "tokenizer_json": str(vdir / "tokenizer" / "tokenizer.json"), "template": s.template,
        "reasoning": s.reasoning, "history_reasoning": s.history_reasoning, "policies": dict(s.policies),
        "max_examples": s.max_examples, "pack_size": s.pack_size, "pad_to_multiple": s.pad_to_multiple,
        "split_seed": s.split_seed, "validation_fraction": s.validation_fraction,
        "cpus_per_task": s.cpus_per_task, "remote_cache_dir": os.path.expanduser(s.remote_cache_dir), "report_s": 1.0,
        "algorithm": s.algorithm, "seed": s.seed, "row_group_size": s.row_group_size, "compression": s.compression,
        "pad_id": tok.info.eos_id if tok.info.eos_id is not None else 0, "tokenizer_sha256": tok.info.file_sha256,
    }
    shaping = {k: opts[k] for k in ("reasoning", "history_reasoning", "policies", "pack_size", "pad_to_multiple",
                                    "split_seed", "validation_fraction")}
    shaping.update(tokenizer=tok.info.file_sha256, template=template_sha)
    for sh in shards:
        sh["key"] = stable_hash({"pieces": sh["pieces"], "schema": sh["schema"], **shaping,
                                 **({"fields": sh["fields"]} if sh["fields"] else {})})
    inputs = driver.input_stamps(f for ds in datasets for f in ds.files)
    packing = {k: opts[k] for k in ("algorithm", "seed", "row_group_size", "compression", "pad_id")} | {"window": s.window}
    key = stable_hash({"shards": [sh["key"] for sh in shards], "inputs": inputs, "packing": packing,
                       "weights": [ds.spec.weight for ds in datasets], "mixing": s.mixing, "root": str(vdir)})
    return _Plan(tok, datasets, shards, not_found, opts, key, template_sha)


def _execute(run: driver.Run, blend: Blend, plan: _Plan) -> dict[str, Any]:
    s, vdir = run.s, run.vdir
    basis = driver.plan_basis(s, plan.shards)
    done = driver.reuse_or_reset(run, plan.key, plan.not_found, _print_summary, basis=basis)
    if done is not None:
        return done
    _write_tokenizer(vdir / "tokenizer", plan.tok, s.template)
    atomic_write_json(vdir / outputs.PLAN, {"stage": STAGE, "plan_key": plan.key, "shards": plan.shards, "basis": basis})

    run_info: dict[str, Any] = {}
    built: list[dict[str, Any]] = []  # the shards and windows this run made (the rest were reused)
    with contextlib.ExitStack() as stack:
        # runs last, after Ray has shut down, also on Ctrl-C or a failure: only finished files stay
        stack.callback(remove_tmp_files, vdir / "data")
        workers, ray_info = stack.enter_context(driver.ray_workers(run))
        run_info.update(ray_info)
        t1 = time.monotonic()
        receipts = _run_stage(
            run, "sft sequences", tokenize_shard, plan.shards, plan.opts, workers,
            units=lambda sh: max(sh["est_bytes"], 1), verb="tokenizing", noun="shards", built=built)
        run_info["tokenize_seconds"] = round(time.monotonic() - t1, 3)
        _require_contributions(s, plan, receipts)
        passes = _passes(plan, receipts, s.mixing)
        windows = _windows(s, vdir, plan, receipts, passes)
        atomic_write_json(vdir / outputs.PLAN, {"stage": STAGE, "plan_key": plan.key, "shards": plan.shards,
                                                "windows": windows, "basis": basis})
        t2 = time.monotonic()
        parts: dict[str, dict[str, Any]] = {}
        for split in SPLITS:  # a split already joined keeps its windows' receipts in the joined file's receipt
            joined = outputs.read_receipt(split_path(vdir, s, split), _join_key(windows, split))
            if joined is not None:
                parts.update(joined["windows"])
        parts.update(_run_stage(
            run, "sft packs", pack_window, [w for w in windows if w["id"] not in parts], plan.opts, workers,
            units=lambda w: max(w["sequences"], 1), verb="packing", noun="windows", built=built))
        tails = _tail_windows(s, vdir, plan, windows, parts)
        parts.update(_run_stage(
            run, "sft packs (carried)", pack_window, [w for w in tails if w["id"] not in parts], plan.opts, workers,
            units=lambda w: max(w["sequences"], 1), verb="packing", noun="final windows", built=built))
        for split in SPLITS:
            _join_parts(vdir, s, split, windows, tails, parts, run.say, run.quiet)
        windows = windows + tails
        run_info["pack_seconds"] = round(time.monotonic() - t2, 3)
        run_info["work_seconds"] = round(run_info["tokenize_seconds"] + run_info["pack_seconds"], 3)
        run_info.update(driver.account(plan.shards, built, receipts, "shards", "tokens",
                                       lambda r: sum(r["tokens"].values())))
        run_info.update(driver.account(windows, built, parts, "windows", "packed_tokens", lambda r: r["tokens"]))
    return _finish(run, blend, plan, receipts, passes, windows, parts, run_info)


def _run_stage(run: driver.Run, title: str, fn: Any, items: list[dict[str, Any]], opts: dict[str, Any], workers: int,
               *, units: Any, verb: str, noun: str, built: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Run ``fn`` as Ray streaming tasks for the items without a matching receipt; returns every receipt.
    The items it runs are appended to ``built``."""
    receipts, todo = driver.split_done(items, run.say, noun)
    built.extend(todo)
    if todo:
        driver.stream(run, fn, todo, opts, workers, receipts, title=title, verb=verb, noun=noun, units=units)
    return receipts


def _require_contributions(s: Settings, plan: _Plan, receipts: dict[str, dict[str, Any]]) -> None:
    """Refuse a dataset of the blend that gave no sequence at all (every record rejected, or none read), under
    either mixing: its blend weight would silently become a 0 % share.

    Raises:
        RuntimeFailure: naming the dataset, its records read, the top rejection reasons with their counts, and
            (in the hint) the first rejected records as ``file:line: reason: detail``.
    """
    for ds in plan.datasets:
        recs = [r for r in receipts.values() if r["dataset"] == ds.spec.name]
        if sum(r["sequences"]["train"] + r["sequences"]["valid"] for r in recs):
            continue
        message, hint = driver.no_contribution(ds.spec.name, f"weight {ds.spec.weight:g}", recs, "records",
                                               "policies.max_examples", s.max_examples)
        raise RuntimeFailure(message, _pack_size_hint(s, recs) or hint)


def _passes(plan: _Plan, receipts: dict[str, dict[str, Any]], mixing: str) -> dict[str, float]:
    """Passes over each dataset's training sequences: 1 each (``natural``), or what realises the blend
    weights as shares of the training tokens (``weighted``, see prep.passes_from_weights)."""
    if mixing == "natural":
        return {ds.spec.name: 1.0 for ds in plan.datasets}
    sizes = []
    for ds in plan.datasets:
        sizes.append(sum(r["tokens"]["train"] for r in receipts.values() if r["dataset"] == ds.spec.name))
    passes = passes_from_weights([ds.spec.weight for ds in plan.datasets], sizes)
    return {ds.spec.name: p for ds, p in zip(plan.datasets, passes, strict=True)}


def _windows(s: Settings, vdir: Path, plan: _Plan, receipts: dict[str, dict[str, Any]],
             passes: dict[str, float]) -> list[dict[str, Any]]:
    """Cut each split's sequence stream into windows of ``pack.window`` sequences.

    Training stream: pass 0 over every dataset (blend order, shards in order, sequences in order),
    then pass 1 over the datasets with more than one pass, and so on; a fractional last pass takes a
    seeded share of the sequences. The validation stream is one pass over every dataset.
    """
    import numpy as np

    windows: list[dict[str, Any]] = []
    for split in SPLITS:
        segs = []
        rounds = max((math.ceil(passes[ds.spec.name] - 1e-9) for ds in plan.datasets), default=0) if split == "train" else 1
        for p in range(rounds):
            for ds in plan.datasets:
                frac = 1.0 if split == "valid" else min(1.0, passes[ds.spec.name] - p)
                if frac <= 1e-9:
                    continue
                for sh in plan.shards:
                    if sh["dataset"] != ds.spec.name:
                        continue
                    meta = np.load(sh["prefix"] + ".meta.npy")
                    n = len(_selected(meta, SPLITS.index(split), frac, s.seed, f"{sh['id']}/pass{p}"))
                    if n:
                        segs.append({"shard": sh["id"], "prefix": sh["prefix"], "pass": p, "fraction": frac, "count": n,
                                     "key": receipts[sh["id"]]["key"]})
        total = sum(g["count"] for g in segs)
        folder = vdir / "data" / "packs" / split
        for w, lo in enumerate(range(0, total, s.window)):
            hi = min(lo + s.window, total)
            parts, pos = [], 0
            for g in segs:
                a, b = max(lo, pos), min(hi, pos + g["count"])
                if a < b:
                    parts.append({"shard": g["shard"], "prefix": g["prefix"], "pass": g["pass"], "fraction": g["fraction"],
                                  "start": a - pos, "stop": b - pos, "key": g["key"]})
                pos += g["count"]
            name = f"part-{w:05d}"
            win = {"id": f"{split}/{name}", "split": split, "number": w, "segments": parts, "sequences": hi - lo,
                   "final": False,
                   "path": str(folder / f"{name}.parquet"), "receipt_prefix": str(folder / name)}
            win["key"] = stable_hash({"segments": parts, "split": split, "number": w,
                                      **{k: plan.opts[k] for k in ("algorithm", "seed", "row_group_size", "compression",
                                                                   "pad_id", "pack_size", "pad_to_multiple")}})
            windows.append(win)
    return windows


def split_path(vdir: Path, s: Settings, split: str) -> Path:
    """The packed Parquet file of ``split`` (Megatron-Bridge's default name)."""
    return outputs.sft_split_file(vdir, s.pack_size, split)


def _join_key(windows: list[dict[str, Any]], split: str) -> str:
    return stable_hash([w["key"] for w in windows if w["split"] == split])


def _join_parts(vdir: Path, s: Settings, split: str, windows: list[dict[str, Any]], tails: list[dict[str, Any]],
                parts: dict[str, dict[str, Any]], say: Any, quiet: bool) -> None:
    """Join a split's Parquet parts, in window order, into its one file (row groups copied as they are).

    The joined file gets a receipt keyed by the parts' keys; the parts are removed once it is in place.
    """
    import pyarrow.parquet as pq

    from nemotron.data.files import tmp_name

    target = split_path(vdir, s, split)
    key = _join_key(windows, split)
    windows = [w for w in windows + tails if w["split"] == split]
    if not windows or outputs.read_receipt(target, key) is not None:
        return
    tmp = tmp_name(target)
    t0 = time.monotonic()
    try:
        writer = None
        for w in windows:
            pf = pq.ParquetFile(w["path"])
            if writer is None:
                writer = pq.ParquetWriter(tmp, pf.schema_arrow,
                                          compression=None if s.compression == "none" else s.compression)
            for g in range(pf.metadata.num_row_groups):
                table = pf.read_row_group(g)
                writer.write_table(table, row_group_size=table.num_rows)
        if writer is not None:
            writer.close()
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    outputs.write_receipt(target, {"key": key, "files": {target.name: target.stat().st_size},
                                   "sha256": sha256_file(target), "windows": {w["id"]: parts[w["id"]] for w in windows},
                                   "seconds": round(time.monotonic() - t0, 3)})
    shutil.rmtree(Path(windows[0]["path"]).parent, ignore_errors=True)
    if not quiet:
        say(f"{target.name}: {len(windows)} parts joined in {time.monotonic() - t0:.1f}s")


def _tail_windows(s: Settings, vdir: Path, plan: _Plan, windows: list[dict[str, Any]],
                  parts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Final windows of the sequences each split's windows carried (from under-filled bins), in window order."""
    tails = []
    for split in SPLITS:
        refs = [r for w in windows if w["split"] == split for r in parts[w["id"]]["carry"]]
        folder = vdir / "data" / "packs" / split
        for k, lo in enumerate(range(0, len(refs), s.window)):
            chunk = refs[lo:lo + s.window]
            name = f"tail-{k:05d}"
            win = {"id": f"{split}/{name}", "split": split, "number": 1_000_000 + k, "refs": chunk, "final": True,
                   "sequences": len(chunk), "path": str(folder / f"{name}.parquet"), "receipt_prefix": str(folder / name)}
            win["key"] = stable_hash({"refs": chunk, "split": split, "number": win["number"],
                                      **{x: plan.opts[x] for x in ("algorithm", "seed", "row_group_size", "compression",
                                                                   "pad_id", "pack_size", "pad_to_multiple")}})
            tails.append(win)
    return tails


def _write_tokenizer(folder: Path, tok: ChatTokenizer, template: str) -> None:
    """The tokenizer the data was made with as a folder transformers and Megatron load, its
    tokenizer_config.json carrying the chat template (:func:`nemotron.data.tokenizer.write_folder`)."""
    from nemotron.data import tokenizer as tk

    tk.write_folder(folder, tok.info, chat_template=Path(template).read_text(encoding="utf-8"))


def _finish(run: driver.Run, blend: Blend, plan: _Plan, receipts: dict[str, dict[str, Any]], passes: dict[str, float],
            windows: list[dict[str, Any]], parts: dict[str, dict[str, Any]], run_info: dict[str, Any]) -> dict[str, Any]:
    from nemotron.data import tokenizer as tk
    from nemotron.data.packing import PackStats

    s, vdir = run.s, run.vdir

    stats = {k: PackStats(s.pack_size) for k in SPLITS}
    split_tokens = {k: {"tokens": 0, "learned": 0, "files": 0} for k in SPLITS}
    for w in windows:
        rec = parts[w["id"]]
        stats[w["split"]].merge(rec["stats"])
        st = split_tokens[w["split"]]
        st["tokens"] += rec["tokens"]
        st["learned"] += rec["learned_tokens"]
        st["files"] += 1
    if stats["train"].packs == 0:
        raise RuntimeFailure(*_no_training(s, list(receipts.values())))
    datasets = []
    dups = duplicates(plan.shards)
    train_total = sum(r["tokens"]["train"] for r in receipts.values()) or 1
    effective = {ds.spec.name: passes[ds.spec.name] * sum(r["tokens"]["train"] for r in receipts.values()
                                                          if r["dataset"] == ds.spec.name) for ds in plan.datasets}
    eff_total = sum(effective.values()) or 1
    for ds in plan.datasets:
        recs = [r for r in receipts.values() if r["dataset"] == ds.spec.name]
        skipped, examples = driver.problems_of(recs, s.max_examples)
        datasets.append({
            "name": ds.spec.name, "weight": ds.spec.weight, "schema": ds.schema or "auto", "files": len(ds.files),
            "input_bytes": ds.input_bytes, "records": sum(r["records"] for r in recs),
            "conversations": sum(r["conversations"] for r in recs), "samples": sum(r["samples"] for r in recs),
            "duplicates": dups.get(ds.spec.name, 0),
            "sequences": {k: sum(r["sequences"][k] for r in recs) for k in SPLITS},
            "tokens": {k: sum(r["tokens"][k] for r in recs) for k in SPLITS},
            "learned_tokens": {k: sum(r["learned"][k] for r in recs) for k in SPLITS},
            "skipped": dict(sorted(skipped.items())), "truncated": sum(r["truncated"] for r in recs),
            "truncated_tokens": sum(r["truncated_tokens"] for r in recs),
            "dropped_tokens": sum(r["dropped_tokens"] for r in recs),
            "control_token_text": sum(r.get("control_text", 0) for r in recs),
            "passes": round(passes[ds.spec.name], 6), "natural_share": sum(r["tokens"]["train"] for r in recs) / train_total,
            "effective_share": effective[ds.spec.name] / eff_total,
            "seconds": round(sum(r["seconds"] for r in recs), 3),
            "examples": examples,
        })
    kept = sum(sum(d["tokens"].values()) for d in datasets)
    lost = sum(d["truncated_tokens"] + d["dropped_tokens"] for d in datasets)
    data = vdir / "data"
    meta_path = outputs.sft_metadata_file(vdir, s.pack_size)
    bridge_meta = [stats["train"].bridge_metadata()] + ([stats["valid"].bridge_metadata()] if stats["valid"].packs else [])
    atomic_write_json(meta_path, bridge_meta)
    paths = {k: str(split_path(vdir, s, k)) if stats[k].packs else None for k in SPLITS}
    tok_info = plan.tok.info.to_dict()
    tok_info["json_path"] = "tokenizer/tokenizer.json"
    tok_info["name"] = s.tokenizer_name
    tok_info["added_special_tokens"] = plan.tok.added
    tok_info["source"] = plan.tok.source
    # read by the training stages: keep the name; relative to the version folder (a copied output names its own)
    tok_info["megatron"] = tk.megatron_fields(vdir / "tokenizer", base=vdir)
    seconds = round(time.monotonic() - run.t_start, 3)
    packing = {}
    for k in SPLITS:
        st = stats[k].to_dict()
        cap = stats[k].packs * s.pack_size
        st.update(tokens=split_tokens[k]["tokens"], learned_tokens=split_tokens[k]["learned"],
                  trained_fraction=round(split_tokens[k]["learned"] / cap, 6) if cap else 0.0,
                  learned_fraction_of_tokens=round(split_tokens[k]["learned"] / split_tokens[k]["tokens"], 6)
                  if split_tokens[k]["tokens"] else 0.0,
                  windows=split_tokens[k]["files"], path=paths[k],
                  bytes=split_path(vdir, s, k).stat().st_size if paths[k] else 0)
        packing[k] = st
    manifest = {
        **driver.manifest_head(run, STAGE, "sft-data", "megatron-bridge-packed-parquet", plan.key, config_hash=plan.key),
        # read by validation (rules sft-pack-size, sft-pad, data-tokenizer): keep these names
        "pack_size": s.pack_size, "pad_to_multiple": s.pad_to_multiple, "tokenizer": tok_info,
        "pad_id": plan.opts["pad_id"],
        "loader": {  # Megatron-Bridge: dataset.packed_sequence_specs.* and dataset_kwargs
            "packed_sequence_size": s.pack_size, "pad_seq_to_mult": s.pad_to_multiple,
            "packed_train_data_path": paths["train"], "packed_val_data_path": paths["valid"],
            "packed_metadata_path": str(meta_path), "answer_only_loss": True,
            "loss_mask": "label-aligned: loss_mask[t] weights the prediction of input_ids[t + 1]",
        },
        "chat": {"template": s.template, "template_sha256": plan.template_sha256, "reasoning": s.reasoning,
                 "history_reasoning": s.history_reasoning},
        "blend": driver.blend_record(blend, plan.not_found),
        "settings": {"sample": s.sample, "mixing": s.mixing, "policies": s.policies, "algorithm": s.algorithm, "window": s.window,
                     "seed": s.seed, "validation_fraction": s.validation_fraction, "split_seed": s.split_seed,
                     "row_group_size": s.row_group_size, "compression": s.compression, "target_bytes": s.target_bytes},
        "datasets": datasets,
        "packing": packing,
        "totals": {"records": sum(d["records"] for d in datasets), "samples": sum(d["samples"] for d in datasets),
                   "tokens": kept, "lost_tokens": lost, "lost_fraction": round(lost / (kept + lost), 6) if kept + lost else 0.0,
                   "truncated": sum(d["truncated"] for d in datasets),
                   "skipped": sum(sum(d["skipped"].values()) for d in datasets),
                   "duplicates": sum(d["duplicates"] or 0 for d in datasets)},
        "run": {**run_info, "seconds": seconds,
                "tokens_per_second": round(run_info["tokens_built"] / run_info["work_seconds"], 1)
                if run_info["work_seconds"] else None},
        "bridge_metadata": bridge_meta,
    }
    return driver.publish(run, manifest, _print_summary)


def _no_training(s: Settings, recs: list[dict[str, Any]]) -> tuple[str, str]:
    """The message and hint when no training sequence is left: the records' skip counts by reason, the
    sequences held out, and the key to change for what took them all."""
    from nemotron.data.progress import fmt_counts

    skipped = driver.problems_of(recs, 0)[0]
    valid = sum(r["sequences"]["valid"] for r in recs)
    message = (f"no training sequence was produced ({driver.count(sum(r['records'] for r in recs), 'records')} read; skipped: "
               f"{fmt_counts(skipped) or 'none'}; {driver.count(valid, 'sequences')} held out for validation)")
    top = max(skipped, key=lambda k: skipped[k]) if skipped else None
    pack_hint = _pack_size_hint(s, recs)
    if pack_hint:
        hint = pack_hint
    elif valid:
        hint = f"split.validation_fraction={s.validation_fraction} held out every sequence: lower it"
    elif top is not None:
        hint = (f"every sample was skipped, most as {top}: check the datasets' paths, format and "
                f"policies.* (policies.max_examples lists examples)")
    else:
        hint = "the inputs hold no records: check the dataset paths (and sample)"
    return message, hint


def _pack_size_hint(s: Settings, recs: list[dict[str, Any]]) -> str | None:
    """The hint when most of the receipts' skipped samples were ``too_long`` for the pack (the records are fine,
    ``pack.pack_size`` is the key to change), or ``None``."""
    skipped = driver.problems_of(recs, 0)[0]
    shortest = min((r["shortest_dropped"] for r in recs if r.get("shortest_dropped")), default=None)
    if not skipped or max(skipped, key=lambda k: skipped[k]) != "too_long" or shortest is None:
        return None
    need = math.ceil((shortest + s.pad_to_multiple - 1) / s.pad_to_multiple) * s.pad_to_multiple
    return (f"pack.pack_size={s.pack_size} is smaller than every sample (the shortest dropped one has "
            f"{shortest:,} tokens): set pack.pack_size to at least {max(need, 16)}")


def _no_validation_warning(m: dict[str, Any]) -> str | None:
    """The summary's warning when the validation split is empty (why: the fraction is 0, or too few
    sequences for it); ``None`` when there is a validation file."""
    if m["loader"]["packed_val_data_path"] is not None:
        return None
    frac = m["settings"]["validation_fraction"]
    if not frac:
        why = "split.validation_fraction=0"
    else:
        n = sum(d["sequences"]["train"] + d["sequences"]["valid"] for d in m["datasets"])
        why = (f"none of the {n:,} sequences fell in the held-out share split.validation_fraction={frac} "
               f"(about {n * frac:.2g} expected): too few records for the fraction")
    return f"warning: no validation set ({why}); the sft stage gets packed_val_data_path: null and runs no validation"


def control_text_notes(m: dict[str, Any]) -> list[str]:
    """One note per dataset of the manifest ``m`` whose records held control-token strings in message text,
    kept and encoded as text (``policies.control_token_text: text``): ``note: dataset NAME: N records hold
    control-token text (</s>, <|im_end|>, ...) in messages; encoded as plain text ...``."""
    return [f"note: dataset {d['name']}: {d['control_token_text']:,} record(s) hold control-token text (such as "
            "</s> or <|im_end|>) in their messages; encoded as plain text, never as the control token "
            "(policies.control_token_text=skip leaves them out)"
            for d in m["datasets"] if d.get("control_token_text")]


def duplicates_note(m: dict[str, Any]) -> str | None:
    """The summary's ``note:`` line when conversations repeat (``duplicates`` of the manifest's datasets), else
    ``None``."""
    by = [(d["name"], d.get("duplicates") or 0) for d in m["datasets"]]
    total = sum(n for _, n in by)
    if not total:
        return None
    where = ", ".join(f"{name} {n:,}" for name, n in by if n)
    return (f"note: {total:,} conversation(s) repeat an earlier one (the same messages and tools; {where}): kept, "
            "each copy is trained on (data prep rl drops its duplicates, dedupe: true); remove them from the input "
            "to train each once")


def _print_summary(m: dict[str, Any]) -> None:
    from nemotron.data.progress import fmt_counts, human, print_table

    rows = []
    for d in m["datasets"]:
        tok = sum(d["tokens"].values())
        dup = d.get("duplicates")
        rows.append([d["name"], f"{d['records']:,}", f"{d['samples']:,}", fmt_counts(d["skipped"]) or "-",
                     "?" if dup is None else f"{dup:,}", f"{d['truncated']:,}" if d["truncated"] else "-", human(d["truncated_tokens"] + d["dropped_tokens"]),
                     human(tok), f"{100 * sum(d['learned_tokens'].values()) / tok:.1f}%" if tok else "-",
                     f"{d['passes']:.3g}", f"{100 * d['effective_share']:.1f}%"])
    t = m["totals"]
    footer = ["total", f"{t['records']:,}", f"{t['samples']:,}", f"{t['skipped']:,}", f"{t.get('duplicates', 0):,}",
              f"{t['truncated']:,}", human(t["lost_tokens"]), human(t["tokens"]), "", "", "100%"]
    print_table(f"sft data: {m['path']}", ["dataset", "records", "samples", "skipped (reason)", "duplicates",
                                           "truncated", "tokens lost", "tokens", "learned", "passes", "share"], rows,
                footer=footer)
    prow = []
    for k in SPLITS:
        p = m["packing"][k]
        if not p["packs"]:
            continue
        prow.append([SPLIT_FILES[k], f"{p['packs']:,}", f"{p['sequences']:,}", human(p["tokens"]),
                     f"{100 * p['fill']:.2f}%", f"{100 * p['trained_fraction']:.1f}%", str(p["max_per_pack"]),
                     human(p["bytes"], "B")])
    print_table(f"packs of {m['pack_size']:,} tokens (pad multiple {m['pad_to_multiple']}; "
                f"lost to truncation/drops: {100 * t['lost_fraction']:.2f}% of tokens)",
                ["split", "packs", "sequences", "tokens", "fill", "trained tokens", "max seq/pack", "file size"], prow)
    added = m["tokenizer"].get("added_special_tokens") or {}
    con = driver.print_examples(m, "policies.max_examples")
    con.print(driver.work_line(m["run"], [("shards", "tokenized"), ("windows", "packed")], "tokens", "tok/s"))
    warning = _no_validation_warning(m)
    if warning:
        con.print(warning)
    for line in control_text_notes(m):
        con.print(line)
    note = duplicates_note(m)
    if note:
        con.print(note)
    con.print(f"train: {m['loader']['packed_train_data_path']}  tokenizer {m['tokenizer']['name']} "
              f"(vocab {m['tokenizer']['vocab_size']:,}, sha256 {m['tokenizer']['vocab_sha256'][:12]}"
              + (f"; added {', '.join(f'{k}={v}' for k, v in added.items())}" if added else "") + ")")
