"""Support for the local RL and eval tests (no tests here): a real 131,072-entry tokenizer folder (mistral-common's
Tekken vocabulary through our data-prep tokenizer code), small NemotronH checkpoints in Hugging Face form, RL JSONL
in the form `data prep rl` writes from real GSM8K problems, and compiled (and prepared) rlvr/mopd/eval configs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from quantize_support import tekken_json


def tokenizer_folder(folder: Path) -> Path:
    """``folder`` with ``tokenizer.json`` + ``tokenizer_config.json`` (no chat template: prompts are plain text)."""
    from nemotron.data import tokenizer as tk

    info = tk.resolve(tekken_json(), cache_dir=folder.parent / "tokenizer-cache")
    tk.write_folder(folder, info)
    return folder


def checkpoint(folder: Path, tokenizer: Path, seed: int) -> Path:
    """The catalogue's ``small`` NemotronH, freshly initialised with ``seed``, FP32, with the tokenizer files."""
    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod

    modelmod.build(catalogue.get("small"), seed).save_pretrained(str(folder))
    for f in tokenizer.iterdir():
        shutil.copy2(f, folder / f.name)
    return folder


def rl_jsonl(folder: Path, shared_data: Path, train: int = 24, valid: int = 4) -> tuple[Path, Path]:
    """``train.jsonl`` / ``validation.jsonl`` of real GSM8K problems in our RL line form (nemotron.data.rl)."""
    from nemotron.data.rl import extract

    folder.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(x) for x in (shared_data / "rl" / "gsm8k-train.jsonl").open(encoding="utf-8")]
    out = []
    for name, part in (("train.jsonl", rows[:train]), ("validation.jsonl", rows[train:train + valid])):
        with open(folder / name, "w", encoding="utf-8") as fh:
            for i, obj in enumerate(part):
                problem, answer, _ = extract(obj, "gsm8k")
                fh.write(json.dumps({"messages": [{"role": "user", "content": problem},
                                                  {"role": "assistant", "content": answer}],
                                     "task": "math", "dataset": "gsm8k", "source": f"gsm8k-train.jsonl:{i + 1}"}) + "\n")
        out.append(folder / name)
    return out[0], out[1]


def compile_stage(stage: str, overrides: list[str], config: str = "local", check_paths: bool = True) -> dict[str, Any]:
    """``nemotron ultra3 STAGE -c CONFIG overrides...`` compiled and prepared (unset teacher slots filled)."""
    from nemotron import validation
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage

    st = get_stage(stage)
    compiled = compile_config(st, config, overrides, check_paths=check_paths)
    validation.prepare(st, compiled.config, compiled.user_keys, None)
    return compiled.config


def write_yaml(path: Path, cfg: dict[str, Any]) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path
