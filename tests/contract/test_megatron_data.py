"""Contract: the files data prep writes, read by the code that consumes them on the cluster, at the pinned refs
(Megatron-Bridge 4588417, Megatron-LM c8288b6), on real `data prep pretrain -c tiny` and `data prep sft -c tiny`
outputs (small samples of the real tiny inputs, ../shared/data included).

The training side is what our entry hands over: the compiled `pretrain -c tiny` / `sft -c tiny` configs translated
by :func:`nemotron.runtime.megatron.megatron_bridge.translate`, with the data tokenizer read from the output's manifest
by the entry's own helpers (:func:`nemotron.data.outputs.data_manifest`,
:func:`nemotron.data.outputs.megatron_tokenizer`). In one contract subprocess, as Megatron-Bridge's ``setup`` does it:

* **Tokenizer.** The translated ``tokenizer`` section set on the recipe base's ``TokenizerConfig``
  (``recipes.common._pretrain_common`` / ``_sft_common``), built by Megatron-Bridge's ``build_tokenizer``; it must
  load, name the EOS/BOS ids data prep used, have the data's vocabulary size, and encode real text to our ids:
  every WikiText-2 / Tiny Shakespeare record (../shared/data) to its document in our ``.bin`` (plus EOS), and every
  rendered chat-sample / ShareGPT / Alpaca conversation of the SFT run to its sequence in our ``.bin``.
* **Megatron-Core ``IndexedDataset``** (c8288b6) reads every shard: documents, tokens and dtype as the manifest says.
* **Megatron-Core's GPT dataset builder** over our blend: the translated ``dataset`` fields set on the recipe base's
  ``GPTDatasetConfig`` (``blend_per_split`` from our blend.json), ``finalize()``, then Megatron-Bridge's
  ``get_dataset_provider`` -> ``BlendedMegatronDatasetBuilder(GPTDataset, ...).build()`` with the sample counts of
  ``get_train_valid_test_num_samples``. Asserted: train/valid/test built, one ``GPTDataset`` per prefix, the blend
  weights give each dataset its share of the samples, and every sample read is made of our documents.
  torch.distributed is not initialised: the builder builds every dataset locally in that case (upstream's own
  branch for it; no flag needed).
* **Megatron-Bridge ``GPTSFTPackedParquetDataset`` + ``collate_fn``**, reached through ``get_dataset_provider`` ->
  ``FinetuningDatasetBuilder`` on the translated ``FinetuningDatasetConfig`` (our ``PackedSequenceSpecs``), on our
  packed Parquet: the learned labels of every sub-sequence are exactly the tokens our ``.mask`` files flag (the
  assistant turns), each learned run follows the assistant generation prompt and ends with ``<|im_end|>``,
  ``cu_seqlens`` are our ``seq_start_id`` boundaries (labels never cross them), the total learned tokens equal the
  manifest's; and with ``pad_cu_seqlens`` on, upstream reads our packing-metadata JSON and pads every row's
  ``cu_seqlens`` to one shape.

Megatron-Core's C++ dataset helpers (``megatron/core/datasets/helpers.cpp``, needed by the GPT/blended index
builders) are compiled once per machine with the flags of upstream's ``Makefile`` into
``${TMPDIR}/nemotron-upstream/megatron-helpers-<hash>/`` (the unpacked sources are left untouched) and loaded as
``megatron.core.datasets.helpers_cpp``. Nothing else is stood in for beyond boot.py's Transformer Engine stand-in.

Where the proof stops: no GPU, so no model consumes these batches (THD attention kernels, context-parallel splits of
``cu_seqlens_unpadded`` with ``pad_seq_to_mult`` > 1, the data loader's distributed samplers); the pinned Python is
3.11 here (3.12 in the container).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from upstream import Upstream

REPO = Path(__file__).resolve().parents[2]
SAMPLE_PRETRAIN = 60   # rows per dataset: 10 valid + 10 test + 40 train
SAMPLE_SFT = 300       # records per dataset
#: documents our IndexedWriter writes in each on-disk dtype (uint16 below a 65,500-id vocabulary, else int32)
WRITER_CASES = {"uint16": [[1, 2, 3], [65_000], list(range(100, 1100)), [7, 7]],
                "int32": [[1, 2, 3], [131_071], list(range(60_000, 70_000)), [7, 7]]}
VOCABS = [50_257, 65_499, 65_500, 65_536, 131_072]

pytestmark = pytest.mark.timeout(900)


# --------------------------------------------------------------------------------------------------
# Megatron-Core's C++ dataset helpers, built beside the unpacked sources


def megatron_helpers(up: Upstream) -> Path:
    """``helpers_cpp<EXT_SUFFIX>`` compiled from the pinned ``megatron/core/datasets/helpers.cpp`` with its
    Makefile's flags (``-O3 -Wall -shared -std=c++17 -fPIC``, pybind11's includes) for the contract interpreter;
    cached by the hash of the source, the suffix and the includes (atomic: complete or absent)."""
    src = up.megatron_lm / "megatron" / "core" / "datasets" / "helpers.cpp"
    py = str(up.python)
    suffix = subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                                     text=True).strip()
    includes = subprocess.check_output([py, "-m", "pybind11", "--includes"], text=True).split()
    key = hashlib.sha256(src.read_bytes() + suffix.encode() + " ".join(includes).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "nemotron-upstream" / f"megatron-helpers-{key}"
    so = cache / f"helpers_cpp{suffix}"
    if not so.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f".build-{os.getpid()}{suffix}"
        subprocess.run(["c++", "-O3", "-Wall", "-shared", "-std=c++17", "-fPIC", *includes, str(src), "-o", str(tmp)],
                       check=True, capture_output=True, timeout=600)
        os.replace(tmp, so)
    return so


# --------------------------------------------------------------------------------------------------
# our side: real data prep runs, the configs translated as the entry translates them


def _pretrain_texts(shared: Path, valid: int, test: int, sample: int) -> dict[str, dict[str, list[str]]]:
    """The records of the shared-data datasets of the tiny blend, split by the held-out rule (empty ones skipped),
    read here independently of the pipeline."""
    from data_prep_pretrain_support import read_records

    files = {"wikitext2": (shared / "pretrain" / "wikitext2-valid.jsonl", "jsonl", "text"),
             "tinyshakespeare": (shared / "pretrain" / "tinyshakespeare.parquet", "parquet", "content")}
    out: dict[str, dict[str, list[str]]] = {}
    for name, (path, fmt, field) in files.items():  # as blends/tiny.json names them
        records = read_records(str(path), fmt, field)[:sample]
        split: dict[str, list[str]] = {"valid": [], "test": [], "train": []}
        for i, text in enumerate(records):
            if text is None or not text.strip():
                continue
            split["valid" if i < valid else "test" if i < valid + test else "train"].append(text)
        out[name] = split
    return out


def _sft_texts(cfg_sft: dict) -> dict[str, list[str]]:
    """Every conversation of every record of each tiny SFT dataset file, rendered with our template and the tiny
    config's chat settings (one text per training sample): the text a consumer's tokenizer would be given."""
    from nemotron.data import chat
    from nemotron.data.blend import load_blend
    from nemotron.data.sft import Settings
    from nemotron.data.sources import expand

    s = Settings.from_config(cfg_sft)
    template = chat.load_template(s.template)
    policy = chat.ChatPolicy(consecutive_same_role=s.policies["consecutive_same_role"], reasoning=s.reasoning)
    out: dict[str, list[str]] = {}
    for ds in load_blend(s.blend_path, path_vars=s.path_vars).datasets:
        schema = ds.format if ds.format in ("messages", "sharegpt", "alpaca") else None
        texts: list[str] = []
        for f in expand(ds.path, exclude=ds.exclude):
            raw = Path(f).read_text(encoding="utf-8")
            data = json.loads(raw) if f.endswith(".json") else [json.loads(x) for x in raw.splitlines() if x.strip()]
            for obj in data:
                try:
                    msgs, tools = chat.normalise(obj, schema, policy)
                    texts += [chat.segment(template, smp, tools).text
                              for smp in chat.training_samples(msgs, s.history_reasoning)]
                except chat.RecordProblem:
                    continue
        out[ds.name] = texts
    return out


@pytest.fixture(scope="module")
def prepared(ray_instance, tok_cache, shared_data, tmp_path_factory):
    """Real tiny data prep runs (pretrain, SFT) and the training configs translated onto them."""
    import sysconfig

    from config_support import compile_stage
    from nemotron.data import pretrain as dp_pretrain
    from nemotron.data import sft as dp_sft
    from nemotron.data.outputs import data_manifest, megatron_tokenizer
    from nemotron.runtime.megatron import megatron_bridge as mb
    from nemotron.runtime.megatron.pretrain_data import read_blend

    root = tmp_path_factory.mktemp("megatron-data")
    cfg_pre = compile_stage("data-prep-pretrain", "tiny", output_dir=str(root / "pretrain"), tokenizer__cache_dir=tok_cache,
                            sample=SAMPLE_PRETRAIN, shards={"target_tokens": 40_000},
                            path_vars={"stdlib": sysconfig.get_paths()["stdlib"], "shared_data": str(shared_data)})
    m_pre = dp_pretrain.prepare(dp_pretrain.Settings.from_config(cfg_pre), quiet=True)
    cfg_sft = compile_stage("data-prep-sft", "tiny", output_dir=str(root / "sft"), tokenizer__cache_dir=tok_cache,
                            sample=SAMPLE_SFT, path_vars={"shared_data": str(shared_data)})
    m_sft = dp_sft.prepare(dp_sft.Settings.from_config(cfg_sft), quiet=True)

    blend_json = root / "pretrain" / "blend.json"
    ckpt = root / "ckpt"
    train_pre = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(blend_json),
                              checkpoint__save=str(ckpt / "pretrain"))
    loader = m_sft["loader"]
    sft_keys = {"dataset__dataset_root": str(root / "sft"), "checkpoint__pretrained_checkpoint": str(ckpt / "pretrain"),
                "checkpoint__save": str(ckpt / "sft"),
                "dataset__packed_sequence_specs__packed_train_data_path": loader["packed_train_data_path"],
                "dataset__packed_sequence_specs__packed_val_data_path": loader["packed_val_data_path"],
                "dataset__packed_sequence_specs__packed_metadata_path": loader["packed_metadata_path"]}
    train_sft = compile_stage("sft", "tiny", **sft_keys)
    train_sft_padded = compile_stage("sft", "tiny", **sft_keys, dataset__packed_sequence_specs__pad_cu_seqlens=True,
                                     **{"+dataset__dataset_kwargs__pad_to_max_length": True})

    def bridge(cfg: dict, stage: str, source: str, blend=None) -> mb.BridgeConfig:
        manifest, where = data_manifest(source)  # as the entry's main() reads it
        return mb.translate(cfg, stage, blend=blend, data_tokenizer=megatron_tokenizer(manifest, where))

    bc_pre = bridge(train_pre, "pretrain", str(blend_json), blend=read_blend(blend_json))
    bc_sft = bridge(train_sft, "sft", loader["packed_train_data_path"])
    bc_sft_padded = bridge(train_sft_padded, "sft", loader["packed_train_data_path"])
    return {"root": root, "m_pre": m_pre, "m_sft": m_sft, "bc_pre": bc_pre, "bc_sft": bc_sft,
            "bc_sft_padded": bc_sft_padded, "cfg_pre": cfg_pre, "cfg_sft": cfg_sft, "shared": shared_data}


# --------------------------------------------------------------------------------------------------
# the upstream side: one subprocess for every check of this module

SCRIPT = r'''
import importlib.util, json, sys
from pathlib import Path
from upstream import read_payload, write_result

p = read_payload()
spec = importlib.util.spec_from_file_location("megatron.core.datasets.helpers_cpp", p["helpers_so"])
helpers_cpp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helpers_cpp)
sys.modules[spec.name] = helpers_cpp

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDataset
from megatron.bridge.data.datasets.packed_sequence import PackedSequenceSpecs
from megatron.bridge.data.loaders import get_train_valid_test_num_samples
from megatron.bridge.data.utils import get_dataset_provider
from megatron.bridge.recipes.common import _pretrain_common, _sft_common
from megatron.bridge.training.config import FinetuningDatasetConfig
from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer

out = {}


def container_for(stage, bc):
    """The recipe base with our translated tokenizer/train/validation/dataset values set as our entry's _apply sets them."""
    c = _pretrain_common() if stage == "pretrain" else _sft_common()
    for section in ("tokenizer", "train", "validation"):
        for key, value in (bc["sections"].get(section) or {}).items():
            setattr(getattr(c, section), key, value)
    if stage == "pretrain":
        for key, value in bc["dataset"].items():
            if key == "blend_per_split":
                value = [None if b is None else (list(b[0]), list(b[1])) for b in value]
            setattr(c.dataset, key, value)
    else:
        fields = dict(bc["dataset"])
        fields["packed_sequence_specs"] = PackedSequenceSpecs(**fields["packed_sequence_specs"])
        c.dataset = FinetuningDatasetConfig(**fields)
    return c


def inside(doc, span):
    """span is a contiguous part of doc (token ids)."""
    n = len(span)
    return any(doc[k:k + n] == span for k in range(len(doc) - n + 1) if doc[k] == span[0])


def tokenizer_facts(tok):
    inner = tok._tokenizer
    return {"library": tok.library, "class": type(inner).__name__, "hf_class": type(inner.tokenizer).__name__,
            "eod": tok.eod, "bos": tok.bos, "eos_id": tok.eos_id, "vocab_size": tok.vocab_size}


# ---------------------------------------------------------------- pretrain
pre = p["pretrain"]
c = container_for("pretrain", pre["bc"])
tok = build_tokenizer(c.tokenizer)
facts = {"tokenizer_config": {k: getattr(c.tokenizer, k) for k in ("tokenizer_type", "tokenizer_model")},
         "tokenizer": tokenizer_facts(tok)}

docs_of = {}
shards = []
for sh in pre["shards"]:
    ds = IndexedDataset(sh["prefix"])
    docs = [ds[i].tolist() for i in range(len(ds))]
    docs_of[sh["prefix"]] = docs
    shards.append({"prefix": sh["prefix"], "sequences": len(ds), "documents": len(ds.document_indices) - 1,
                   "document_indices_ok": list(ds.document_indices) == list(range(len(ds) + 1)),
                   "tokens": int(sum(len(d) for d in docs)), "dtype": np.dtype(ds.index.dtype).name})
facts["shards"] = shards
from megatron.core.datasets.indexed_dataset import DType
facts["writer"] = {c["prefix"]: {"docs": [d.tolist() for d in IndexedDataset(c["prefix"])],
                                 "dtype": np.dtype(IndexedDataset(c["prefix"]).index.dtype).name}
                   for c in pre["writer_cases"]}
facts["optimal_dtype"] = {str(v): DType.optimal_dtype(int(v)).__name__ for v in pre["vocab_cases"]}

eod = tok.eod
compared, mismatched = 0, []
for name, splits in pre["texts"].items():
    for split, texts in splits.items():
        ours = [d for sh in pre["shards"] if sh["dataset"] == name and sh["split"] == split for d in docs_of[sh["prefix"]]]
        theirs = [tok.tokenize(t) + [eod] for t in texts]
        compared += len(theirs)
        if len(ours) != len(theirs):
            mismatched.append(f"{name}/{split}: {len(theirs)} records, {len(ours)} documents in our shards")
            continue
        mismatched += [f"{name}/{split}[{i}]" for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
facts["encode"] = {"compared": compared, "mismatched": mismatched[:20]}

c.dataset.tokenizer = tok
c.dataset.finalize()
nums = get_train_valid_test_num_samples(c)
provider = get_dataset_provider(c.dataset)
built = provider(list(nums), c.dataset)
dataset_of = {sh["prefix"]: sh["dataset"] for sh in pre["shards"]}
splits_out = {}
for split, blended, blend in zip(("train", "valid", "test"), built, c.dataset.blend_per_split):
    if blended is None:
        splits_out[split] = None
        continue
    parts = list(getattr(blended, "datasets", [blended]))
    paths = [d.dataset_path for d in parts]
    if hasattr(blended, "dataset_index"):
        blended[0]  # loads the indices
        counts = np.bincount(np.asarray(blended.dataset_index), minlength=len(parts))
    else:
        counts = np.asarray([len(blended)])
    share = {}
    for path, n in zip(paths, counts):
        share[dataset_of.get(path, path)] = share.get(dataset_of.get(path, path), 0) + int(n)
    # every sample read: split at the EOS ids, the inner pieces are whole documents, the ends a suffix / a prefix
    bad, checked = [], 0
    whole = {path: {tuple(d) for d in docs_of[path]} for path in paths}
    for i in range(min(len(blended), 64)):
        sample = blended[i]
        k = int(sample["dataset_id"]) if "dataset_id" in sample else 0
        path = paths[k]
        text = sample["tokens"].tolist() + [int(sample["labels"][-1])]
        if sample["labels"][:-1].tolist() != sample["tokens"][1:].tolist():
            bad.append(f"{i}: labels are not the tokens shifted by one")
        cut = [j for j, t in enumerate(text) if t == eod]
        pieces = []
        start = 0
        for j in cut:
            pieces.append(text[start:j + 1])
            start = j + 1
        tail = text[start:]
        docs = docs_of[path]
        for n, piece in enumerate(pieces):
            if n == 0:
                ok = any(d[-len(piece):] == piece for d in docs if len(d) >= len(piece))
            else:
                ok = tuple(piece) in whole[path]
            if not ok:
                bad.append(f"{i}: piece {n} ({len(piece)} tokens) is not {'the end of' if n == 0 else ''} a document of {path}")
        if tail and pieces and not any(d[:len(tail)] == tail for d in docs if len(d) >= len(tail)):
            bad.append(f"{i}: its last {len(tail)} tokens are not the start of a document of {path}")
        if tail and not pieces:  # a window inside one document
            needle = np.asarray(tail, dtype=np.int64).tobytes()
            if not any(needle in np.asarray(d, dtype=np.int64).tobytes() and inside(d, tail) for d in docs):
                bad.append(f"{i}: its {len(tail)} tokens are not a span of a document of {path}")
        if float(sample["loss_mask"].sum()) != float(len(sample["loss_mask"])):
            bad.append(f"{i}: loss_mask is not all ones")
        checked += 1
    splits_out[split] = {"paths": paths, "prefixes": list(blend[0]), "weights": list(blend[1]), "samples": len(blended),
                         "share": share, "checked": checked, "bad": bad[:20], "kinds": sorted({type(d).__name__ for d in parts})}
facts["num_samples"] = list(nums)
facts["splits"] = splits_out
out["pretrain"] = facts

# ---------------------------------------------------------------- sft
sft = p["sft"]
c = container_for("sft", sft["bc"])
tok = build_tokenizer(c.tokenizer)
facts = {"tokenizer_config": {k: getattr(c.tokenizer, k) for k in ("tokenizer_type", "tokenizer_model")},
         "tokenizer": tokenizer_facts(tok)}
sequences = {}  # dataset -> list of (ids, learned flags, split)
for prefix in sft["sequence_prefixes"]:
    ds = IndexedDataset(prefix)
    mask = np.fromfile(prefix + ".mask", dtype=np.uint8)
    meta = np.load(prefix + ".meta.npy")
    at = 0
    name = Path(prefix).parent.name
    for i in range(len(ds)):
        ids = ds[i].tolist()
        sequences.setdefault(name, []).append((ids, mask[at:at + len(ids)].tolist(), int(meta[i])))
        at += len(ids)
compared, mismatched = 0, []
for name, texts in sft["texts"].items():
    theirs = {tuple(tok.tokenize(t)) for t in texts}
    ours = [tuple(s[0]) for s in sequences.get(name, [])]
    compared += len(ours)
    missing = [i for i, ids in enumerate(ours) if ids not in theirs]
    if missing:
        mismatched.append(f"{name}: {len(missing)} of our {len(ours)} sequences are no rendered conversation's "
                          f"encoding (first: sequence {missing[0]})")
facts["encode"] = {"compared": compared, "mismatched": mismatched}
intended = {}
for name, seqs in sequences.items():
    for ids, learned, split in seqs:
        intended.setdefault(tuple(ids), learned)

ids = {t: tok._tokenizer.token_to_id(t) for t in ("<|im_start|>", "<|im_end|>")}
prompts = [tok.tokenize("<|im_start|>assistant\n<think>\n"), tok.tokenize("<|im_start|>assistant\n<think></think>")]
eos = tok.eos_id


def check_loader(bc_payload, rows_key):
    c = container_for("sft", bc_payload)
    c.tokenizer = c.tokenizer  # same tokenizer section
    nums = get_train_valid_test_num_samples(c)
    provider = get_dataset_provider(c.dataset)
    train, valid, test = provider(list(nums), c.dataset, tokenizer=tok)
    res = {"classes": [type(d).__name__ if d is not None else None for d in (train, valid, test)]}
    for split, ds in (("train", train), ("valid", valid)):
        if ds is None:
            res[split] = None
            continue
        bad, learned_total, rows, cu_lens, max_seqlen_ok = [], 0, 0, set(), True
        for r in range(ds._num_rows):
            item = ds[r]
            batch = ds.collate_fn([item])
            rows += 1
            tokens = batch["tokens"][0].tolist()
            labels = batch["labels"][0].tolist()
            loss = batch["loss_mask"][0].tolist()
            pos = batch["position_ids"][0].tolist()
            cu = [x for x in batch["cu_seqlens"][0].tolist() if x >= 0]
            cu_lens.add(len(batch["cu_seqlens"][0]))
            bounds = item["seq_boundaries"]
            fed = [0]
            for s, e in zip(bounds[:-1], bounds[1:]):
                fed.append(fed[-1] + e - s - 1)
            if cu[:len(fed)] != fed:
                bad.append(f"row {r}: cu_seqlens {cu[:len(fed)][:6]}... are not our seq_start_id boundaries {fed[:6]}...")
            learned_total += int(sum(loss))
            seqlens = [b - a for a, b in zip(cu[:-1], cu[1:])]
            if int(batch["max_seqlen"].max()) < max(seqlens):
                max_seqlen_ok = False
            for n, (s, e) in enumerate(zip(bounds[:-1], bounds[1:])):
                a, b = fed[n], fed[n + 1]
                if labels[a:b] != item["input_ids"][s + 1:e] or tokens[a:b] != item["input_ids"][s:e - 1]:
                    bad.append(f"row {r} seq {n}: tokens/labels are not this sub-sequence's")
                if pos[a:b] != list(range(b - a)):
                    bad.append(f"row {r} seq {n}: position_ids do not restart at the boundary")
                stored = item["input_ids"][s:e]
                core = list(stored)
                while core and core[-1] == eos and tuple(core) not in intended:
                    core.pop()
                learned = intended.get(tuple(core))
                if learned is None:
                    bad.append(f"row {r} seq {n}: sub-sequence of {len(core)} tokens is none of our sequences")
                    continue
                want = (learned[1:] + [0] * (len(stored) - len(core)))[: b - a]
                if loss[a:b] != want:
                    bad.append(f"row {r} seq {n}: learned labels differ from our .mask ({sum(loss[a:b])} vs {sum(want)})")
                run_start = None
                for j in range(a, b + 1):
                    on = j < b and loss[j] == 1
                    if on and run_start is None:
                        run_start = j
                        context = tokens[a:j + 1]
                        if not any(context[-len(q):] == q for q in prompts):
                            bad.append(f"row {r} seq {n}: a learned run does not follow the assistant generation prompt")
                    if not on and run_start is not None:
                        run = labels[run_start:j]
                        if run[-1] != ids["<|im_end|>"] or ids["<|im_start|>"] in run:
                            bad.append(f"row {r} seq {n}: a learned run does not end with <|im_end|> within one turn")
                        run_start = None
        res[split] = {"rows": rows, "learned": learned_total, "bad": bad[:20], "cu_seqlens_lengths": sorted(cu_lens),
                      "max_seqlen_covers": max_seqlen_ok}
    meta = getattr(train, "pack_metadata", None)
    res["pack_metadata"] = meta
    res["pad_cu_seqlens"] = bool(getattr(train, "pad_cu_seqlens", False))
    return res


facts["loader"] = check_loader(sft["bc"], "rows")
facts["loader_padded"] = check_loader(sft["bc_padded"], "rows")
facts["eos_ids"] = {"tokenizer": eos}
out["sft"] = facts
write_result(out)
'''


def _bc_payload(bc) -> dict:
    return {"sections": {k: bc.sections.get(k) or {} for k in ("tokenizer", "train", "validation")},
            "dataset": json.loads(json.dumps(bc.dataset))}


@pytest.fixture(scope="module")
def facts(upstream, prepared) -> dict:
    m_pre, m_sft = prepared["m_pre"], prepared["m_sft"]
    sft_root = prepared["root"] / "sft" / "data" / "sequences"
    from nemotron.data.indexed import IndexedWriter, choose_dtype

    writer_cases = []
    for dtype, docs in WRITER_CASES.items():
        w = IndexedWriter(prepared["root"] / f"writer-{dtype}", dtype)
        w.add(docs)
        w.finish()
        writer_cases.append({"prefix": str(prepared["root"] / f"writer-{dtype}"), "dtype": dtype, "docs": docs})
    prepared["writer_cases"] = writer_cases
    prepared["choose_dtype"] = {str(v): choose_dtype(v) for v in VOCABS}
    payload = {
        "helpers_so": str(megatron_helpers(upstream)),
        "pretrain": {"bc": _bc_payload(prepared["bc_pre"]),
                     "shards": [{k: sh[k] for k in ("prefix", "dataset", "split")} for sh in m_pre["shards"]],
                     "writer_cases": [{k: c[k] for k in ("prefix", "dtype")} for c in writer_cases], "vocab_cases": VOCABS,
                     "texts": _pretrain_texts(prepared["shared"], m_pre["settings"]["valid_docs"],
                                              m_pre["settings"]["test_docs"], SAMPLE_PRETRAIN)},
        "sft": {"bc": _bc_payload(prepared["bc_sft"]), "bc_padded": _bc_payload(prepared["bc_sft_padded"]),
                "sequence_prefixes": sorted(str(p.with_suffix("")) for p in sft_root.glob("*/*.idx")),
                "texts": _sft_texts(prepared["cfg_sft"])},
    }
    return upstream.run(SCRIPT, payload, timeout=900)


# --------------------------------------------------------------------------------------------------
# tokenizer


@pytest.mark.parametrize("stage", ["pretrain", "sft"])
def test_translated_tokenizer_is_the_manifest_record(prepared, stage):
    """What the entry passes to cfg.tokenizer is exactly the manifest's TokenizerConfig record: the output's own
    tokenizer folder (recorded relative to the output folder, passed resolved), loaded as HuggingFaceTokenizer
    (names unchanged)."""
    m = prepared["m_pre" if stage == "pretrain" else "m_sft"]
    bc = prepared["bc_pre" if stage == "pretrain" else "bc_sft"]
    assert m["tokenizer"]["megatron"] == {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "tokenizer"}
    record = {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": str(Path(m["path"]) / "tokenizer")}
    assert {k: bc.sections["tokenizer"][k] for k in record} == record


@pytest.mark.parametrize("stage", ["pretrain", "sft"])
def test_megatron_bridge_builds_the_data_tokenizer(facts, prepared, stage):
    """Megatron-Bridge's build_tokenizer loads the manifest's tokenizer (today's main recorded the Tekken file,
    which AutoTokenizer refuses) with the EOS/BOS ids and vocabulary size data prep used."""
    m = prepared["m_pre" if stage == "pretrain" else "m_sft"]
    f = facts[stage]
    assert f["tokenizer_config"] == {**m["tokenizer"]["megatron"], "tokenizer_model": str(Path(m["path"]) / "tokenizer")}
    t = f["tokenizer"]
    assert (t["library"], t["class"]) == ("huggingface", "HuggingFaceTokenizer")
    assert (t["eod"], t["eos_id"], t["bos"]) == (m["tokenizer"]["eos_id"], m["tokenizer"]["eos_id"], m["tokenizer"]["bos_id"])
    assert t["vocab_size"] == m["tokenizer"]["vocab_size"] == 131072
    if stage == "sft":  # the packed loader pads with, and masks, the tokenizer's EOS: data prep's pad id
        assert t["eos_id"] == m["pad_id"]


@pytest.mark.parametrize("stage", ["pretrain", "sft"])
def test_upstream_tokenizer_encodes_real_text_to_our_ids(facts, stage):
    """Every shared-data record (pretrain) encodes, with the tokenizer Megatron-Bridge builds, to exactly the ids of
    its document in our .bin (+ EOS); every sequence of our SFT .bin is the encoding of a rendered conversation."""
    enc = facts[stage]["encode"]
    assert enc["compared"] > (100 if stage == "pretrain" else 300)
    assert enc["mismatched"] == []


# --------------------------------------------------------------------------------------------------
# pretraining data: IndexedDataset and the GPT dataset builder


def test_megatron_core_c8288b6_indexed_dataset_reads_every_shard(facts, prepared):
    m = prepared["m_pre"]
    got = {s["prefix"]: s for s in facts["pretrain"]["shards"]}
    assert set(got) == {sh["prefix"] for sh in m["shards"]}
    for sh in m["shards"]:
        g = got[sh["prefix"]]
        assert g["document_indices_ok"], sh["prefix"]
        assert (g["sequences"], g["documents"], g["tokens"]) == (sh["documents"], sh["documents"], sh["tokens"]), sh
        assert g["dtype"] == m["dtype"] == "int32"


def test_megatron_core_c8288b6_reads_what_our_writer_writes_in_each_dtype(facts, prepared):
    """Our IndexedWriter's uint16 and int32 files, read by the pinned IndexedDataset; our dtype rule is its
    DType.optimal_dtype."""
    for case in prepared["writer_cases"]:
        got = facts["pretrain"]["writer"][case["prefix"]]
        assert got == {"docs": case["docs"], "dtype": case["dtype"]}
    assert facts["pretrain"]["optimal_dtype"] == prepared["choose_dtype"]


def test_gpt_dataset_builder_builds_every_split_over_every_prefix(facts, prepared):
    """blend_per_split from our blend.json: train/valid/test each a BlendedDataset of one GPTDataset per prefix."""
    blend = json.loads((prepared["root"] / "pretrain" / "blend.json").read_text())
    for split in ("train", "valid", "test"):
        s = facts["pretrain"]["splits"][split]
        assert s is not None, split
        # blend.json's prefixes are relative to its folder; our reader hands Megatron-Core the resolved paths
        assert s["paths"] == s["prefixes"] == [str(prepared["root"] / "pretrain" / p) for p in blend[split][1::2]]
        assert s["weights"] == blend[split][0::2]
        assert s["kinds"] == ["GPTDataset"] and s["samples"] > 0
    assert facts["pretrain"]["splits"]["train"]["samples"] >= facts["pretrain"]["num_samples"][0] > 0


def test_blend_weights_give_each_dataset_its_share(facts, prepared):
    """Megatron samples each dataset at its blend weight's share (the shard weights split in proportion to tokens
    add up to the dataset's weight), to within one sample per prefix."""
    m = prepared["m_pre"]
    weight = {d["name"]: d["weight"] for d in m["datasets"]}
    total = sum(weight.values())
    for split in ("train", "valid", "test"):
        s = facts["pretrain"]["splits"][split]
        n = s["samples"]
        for name, count in s["share"].items():
            assert abs(count - n * weight[name] / total) <= len(s["paths"]) + 1, (split, name, count, n)


def test_gpt_samples_are_made_of_our_documents(facts):
    for split in ("train", "valid", "test"):
        s = facts["pretrain"]["splits"][split]
        assert s["checked"] > 0 and s["bad"] == [], (split, s["bad"])


# --------------------------------------------------------------------------------------------------
# SFT data: the packed-Parquet loader


@pytest.mark.parametrize("variant", ["loader", "loader_padded"])
def test_packed_parquet_loader_learns_exactly_the_assistant_turns(facts, prepared, variant):
    """GPTSFTPackedParquetDataset + collate_fn on our packs: learned labels = our .mask (assistant turns after the
    generation prompt, ending with <|im_end|>), no label across a sub-sequence boundary, cu_seqlens = our
    seq_start_id, the manifest's learned-token totals."""
    f = facts["sft"][variant]
    m = prepared["m_sft"]
    assert f["classes"][:2] == ["GPTSFTPackedParquetDataset"] * 2
    for split, key in (("train", "train"), ("valid", "valid")):
        s = f[split]
        assert s["rows"] == m["packing"][key]["packs"] and s["bad"] == [], (split, s["bad"])
        assert s["learned"] == m["packing"][key]["learned_tokens"]
        assert s["max_seqlen_covers"]


def test_pad_cu_seqlens_reads_our_packing_metadata(facts, prepared):
    """With pad_cu_seqlens on, upstream reads our metadata JSON and pads every row's cu_seqlens to one shape
    (max_samples_per_bin + 2 entries, + the -1 its collate appends)."""
    f = facts["sft"]["loader_padded"]
    meta = json.loads(Path(prepared["m_sft"]["loader"]["packed_metadata_path"]).read_text())
    assert f["pad_cu_seqlens"] and f["pack_metadata"] == meta
    width = max(p["max_samples_per_bin"] for p in meta) + 3
    assert f["train"]["cu_seqlens_lengths"] == [width] and f["valid"]["cu_seqlens_lengths"] == [width]
    assert facts["sft"]["loader"]["pad_cu_seqlens"] is False

