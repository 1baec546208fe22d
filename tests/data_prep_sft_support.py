"""Support for the data-prep-sft/rl tests and bench/packing.py (no tests here).

Configs are compiled by the project's own config compiler, exactly as
`nemotron ultra3 data prep sft|rl -c NAME key=value ...` does.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from config_support import compile_stage

ROOT = Path(__file__).resolve().parent.parent
SFT_DIR = ROOT / "stages" / "ultra3" / "data_prep_sft"
RL_DIR = ROOT / "stages" / "ultra3" / "data_prep_rl"
TEMPLATE = SFT_DIR / "nemotron3_chat.jinja"
FIXTURES = ROOT / "tests" / "fixtures" / "chat"
SHARED_DATA = ROOT.parent / "shared" / "data"
TEKKEN = "mistral_common/data/tekken_240911.json"


def chat_tokenizer(cache_dir: str):
    """The tiny config's tokenizer (Tekken + chat tokens) as ``(tokenizers.Tokenizer, ChatTokenizer)``."""
    from nemotron.data import sft
    from nemotron.data import tokenizer as tk

    cfg = compile_stage("data-prep-sft", "tiny", tokenizer__cache_dir=cache_dir, output_dir="/nonexistent/out")
    ct = sft.resolve_tokenizer(sft.Settings.from_config(cfg))
    return tk.load(ct.info), ct


def fixture_cases() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(conversations.json, rendered.json cases)`` of tests/fixtures/chat."""
    spec = json.loads((FIXTURES / "conversations.json").read_text(encoding="utf-8"))
    rendered = json.loads((FIXTURES / "rendered.json").read_text(encoding="utf-8"))
    return spec, rendered["cases"]


def read_packs(path: str | Path) -> list[dict[str, list[int]]]:
    """Every row of a packed Parquet file as plain lists."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def loader_view(row: dict[str, list[int]]) -> list[tuple[list[int], list[int], list[int]]]:
    """What Megatron-Bridge's packed loader feeds for one row (answer-only loss): per sub-sequence
    ``[s, e)``, the input tokens ``input_ids[s:e-1]``, the labels ``input_ids[s+1:e]`` and the loss
    weights ``loss_mask[s:e-1]`` (GPTSFTPackedDataset.collate_fn / _build_loss_mask)."""
    ids, mask, starts = row["input_ids"], row["loss_mask"], row["seq_start_id"]
    bounds = [*starts, len(ids)]
    return [(ids[s:e - 1], ids[s + 1:e], mask[s:e - 1]) for s, e in itertools.pairwise(bounds)]
