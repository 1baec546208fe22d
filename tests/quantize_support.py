"""Support for the quantize tests and benchmark (no tests here): real text tokenized with a real
131,072-entry tokenizer into our Megatron ``.bin/.idx`` + ``blend.json`` form (what ``data prep
pretrain`` writes, with its manifest's tokenizer record), a small NemotronH checkpoint in Hugging Face
form, and compiled quantize configs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def tekken_json() -> str:
    """mistral-common's Tekken vocabulary file (131,072 ids; shipped in the PyPI package)."""
    import mistral_common

    return str(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json")


def real_text_blend(folder: Path, shared_data: Path, docs: int = 40) -> Path:
    """``folder/blend.json`` with a ``train`` split (Tiny Shakespeare speeches, WikiText-2 articles) and
    a ``test`` split (other WikiText-2 articles), tokenized with the Tekken vocabulary through the project's
    tokenizer code, each document ending in EOS; a ``manifest.json`` records the tokenizer as data prep does.
    Returns the blend path."""
    import pyarrow.parquet as pq

    from nemotron.data import tokenizer as tk
    from nemotron.data.indexed import IndexedWriter

    folder.mkdir(parents=True, exist_ok=True)
    info = tk.resolve(tekken_json(), cache_dir=folder / "tokenizer-cache")
    tok = tk.load(info)
    wiki = [json.loads(line)["text"] for line in (shared_data / "pretrain" / "wikitext2-valid.jsonl").open()]
    speeches = pq.read_table(shared_data / "pretrain" / "tinyshakespeare.parquet").column("content").to_pylist()
    splits = {"train": speeches[:docs] + wiki[: docs // 4], "test": wiki[-docs // 4:]}
    blend: dict[str, list[Any]] = {}
    for split, texts in splits.items():
        writer = IndexedWriter(folder / f"{split}_0", "int32")
        writer.add(tk.encode_documents(tok, texts, None, info.eos_id))
        writer.finish()
        blend[split] = [1.0, str(folder / f"{split}_0")]
    (folder / "blend.json").write_text(json.dumps(blend), encoding="utf-8")
    (folder / "manifest.json").write_text(json.dumps({"tokenizer": info.to_dict()}), encoding="utf-8")
    return folder / "blend.json"


def small_checkpoint(folder: Path, seed: int = 7) -> Path:
    """The catalogue's ``small`` NemotronH (freshly initialised, seeded) saved in Hugging Face form, BF16."""
    import torch

    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod

    m = modelmod.build(catalogue.get("small"), seed).to(torch.bfloat16)
    m.save_pretrained(str(folder))
    return folder


def compile_quantize(overrides: list[str], config: str = "local") -> dict[str, Any]:
    """``nemotron ultra3 quantize -c CONFIG overrides...`` compiled and prepared by the project's own code."""
    from nemotron import validation
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage

    stage = get_stage("quantize")
    compiled = compile_config(stage, config, overrides)
    validation.prepare(stage, compiled.config, compiled.user_keys, None)
    return compiled.config
