"""Support for the local-runtime tests and benchmark (no tests here): small data in our real formats
(Megatron ``.bin/.idx`` + ``blend.json``; Megatron-Bridge packed Parquet) and stage configs compiled by
the project's own compiler, exactly as ``nemotron ultra3 pretrain|sft -c local key=value`` does.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

#: A small "language": ids BASE..BASE+V-1, each followed by one of 3 fixed successors, then EOS.
BASE, V, EOS = 100, 48, 2


def small_spec(vocab: int = 512) -> Any:
    """The catalogue's ``small`` NemotronH with a smaller vocabulary (same blocks; fast on 2 cores)."""
    from nemotron.config import catalogue

    return replace(catalogue.get("small"), vocab_size=vocab)


def markov_docs(n: int, seed: int, min_len: int = 20, max_len: int = 160) -> list[list[int]]:
    """``n`` documents of a fixed bigram language (learnable: held-out loss drops fast), each ending in EOS."""
    table = np.random.default_rng(1234).integers(0, V, size=(V, 3))
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        x = [int(rng.integers(V))]
        for _ in range(int(rng.integers(min_len, max_len)) - 1):
            x.append(int(table[x[-1], rng.integers(3)]))
        docs.append([BASE + t for t in x] + [EOS])
    return docs


def write_pretrain_data(folder: Path, weights: tuple[float, ...] = (1.0, 3.0), docs: int = 200,
                        valid_docs: int = 30) -> Path:
    """Shards ``train_<k>`` (one per weight) and ``valid_0`` in int32 (as the 131,072-id data prep writes),
    and ``blend.json`` in Megatron-Bridge's per-split form; returns the blend path."""
    from nemotron.data.indexed import IndexedWriter

    folder.mkdir(parents=True, exist_ok=True)
    blend: dict[str, list[Any]] = {"train": [], "valid": []}
    for k, w in enumerate(weights):
        writer = IndexedWriter(folder / f"train_{k}", "int32")
        writer.add(markov_docs(docs, seed=10 + k))
        writer.finish()
        blend["train"] += [w, str(folder / f"train_{k}")]
    writer = IndexedWriter(folder / "valid_0", "int32")
    writer.add(markov_docs(valid_docs, seed=99))
    writer.finish()
    blend["valid"] += [1.0, str(folder / "valid_0")]
    path = folder / "blend.json"
    path.write_text(json.dumps(blend), encoding="utf-8")
    return path


def pack(convs: list[tuple[list[int], list[int]]], pad_to: int | None = None) -> dict[str, list[int]]:
    """One pack in Megatron-Bridge's Parquet form from ``(prompt ids, answer ids)`` conversations.

    ``loss_mask`` is label-aligned (DESIGN.md §4): ``loss_mask[j] = 1`` when token ``j + 1`` of the same
    sub-sequence is an answer token; 0 at each sub-sequence's last position. ``pad_to`` pads the last
    sub-sequence with EOS tokens that are not in the loss.
    """
    ids: list[int] = []
    mask: list[int] = []
    starts: list[int] = []
    for prompt, answer in convs:
        starts.append(len(ids))
        seq = prompt + answer
        is_answer = [0] * len(prompt) + [1] * len(answer)
        ids += seq
        mask += [*is_answer[1:], 0]
    if pad_to is not None and len(ids) < pad_to:
        extra = pad_to - len(ids)
        ids += [EOS] * extra
        mask += [0] * extra
    return {"input_ids": ids, "loss_mask": mask, "seq_start_id": starts}


def write_packed_parquet(path: Path, packs: list[dict[str, list[int]]]) -> Path:
    """Write packs with the column types DESIGN.md §4 names (int32 / uint8 / int32 lists)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "input_ids": pa.array([p["input_ids"] for p in packs], type=pa.list_(pa.int32())),
        "loss_mask": pa.array([p["loss_mask"] for p in packs], type=pa.list_(pa.uint8())),
        "seq_start_id": pa.array([p["seq_start_id"] for p in packs], type=pa.list_(pa.int32())),
    })
    pq.write_table(table, path)
    return path


def qa_conversations(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """``n`` (prompt, answer) pairs in the bigram language: the answer continues the prompt's chain."""
    docs = markov_docs(n, seed=seed, min_len=12, max_len=60)
    out = []
    for d in docs:
        cut = max(2, len(d) // 2)
        out.append((d[:cut], d[cut:]))
    return out


def write_sft_data(folder: Path, pack_size: int, packs: int = 24, valid_packs: int = 4, seed: int = 5) -> Path:
    """``training_<pack>.idx.parquet`` and ``validation_<pack>.idx.parquet`` (Megatron-Bridge's default names)
    with greedy packs of bigram Q/A conversations; returns the folder."""
    def make(n_packs: int, s: int) -> list[dict[str, list[int]]]:
        convs = qa_conversations(n_packs * 8, seed=s)
        out, cur, used = [], [], 0
        for prompt, answer in convs:
            n = len(prompt) + len(answer)
            if n > pack_size:
                continue
            if used + n > pack_size:
                out.append(pack(cur))
                cur, used = [], 0
            cur.append((prompt, answer))
            used += n
            if len(out) == n_packs:
                break
        return out[:n_packs]

    write_packed_parquet(folder / f"training_{pack_size}.idx.parquet", make(packs, seed))
    write_packed_parquet(folder / f"validation_{pack_size}.idx.parquet", make(valid_packs, seed + 1))
    return folder


def compile_local(stage: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The resolved config ``run.py`` receives for ``nemotron ultra3 STAGE -c local key=value ...``."""
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage

    args = [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    return compile_config(get_stage(stage), "local", args).config


def fast_overrides(ckpt: Path, seq: int = 64, iters: int = 30, **extra: Any) -> dict[str, Any]:
    """Overrides for a short CPU run: ``iters`` steps of 4 x ``seq`` tokens, eval every 10 steps."""
    out = {
        "model.seq_length": seq, "train.train_iters": iters, "train.global_batch_size": 4,
        "train.micro_batch_size": 2, "validation.eval_interval": 10, "validation.eval_iters": 2,
        "checkpoint.save": str(ckpt), "checkpoint.save_interval": 10, "logger.log_interval": 5,
        "scheduler.lr_warmup_iters": 3, "scheduler.lr_decay_iters": iters,
    }
    out.update(extra)
    return out
