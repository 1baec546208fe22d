"""Content hashes of data prep outputs, for the before/after tests of tests/data (no tests here).

Each hash covers what a consumer reads, independent of how the work was cut into tasks:

* pretraining: the SHA-256 of every ``.bin`` and ``.idx`` file, by path relative to the output folder;
* SFT: per dataset, the SHA-256 of its tokenized sequences (int32 ids) and of their learned-token flags
  (uint8), each concatenated in shard order, and per packed split, the SHA-256 of the ``input_ids``,
  ``loss_mask`` and ``seq_start_id`` columns (their values, not the Parquet bytes, which carry the
  writer's version).

Also runnable: ``python tests/data/output_hashes.py pretrain|sft OUT`` runs the stage on the inputs the
tests use and prints the hashes as JSON (how the expected values in the tests were recorded).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config_support import compile_stage  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
WIKI = SHARED_DATA / "pretrain" / "wikitext2-valid.jsonl"
SHAKESPEARE = SHARED_DATA / "pretrain" / "tinyshakespeare.parquet"
SFT_FILES = (SHARED_DATA / "sft" / "fastchat-dummy-conversation.json", SHARED_DATA / "sft" / "gpteacher-codegen-instruct.json")


def pretrain_config(out: Path, tok_cache: str, **overrides: Any) -> dict[str, Any]:
    """The `tiny` pretraining config on WikiText-2 (JSONL) and Tiny Shakespeare (Parquet) alone, in
    shards of 60,000 tokens (several per dataset), written to ``out``."""
    blend = out.parent / f"{out.name}-blend.json"
    blend.parent.mkdir(parents=True, exist_ok=True)
    blend.write_text(json.dumps({"datasets": [
        {"name": "wiki", "path": str(WIKI), "weight": 1.0, "category": "web"},
        {"name": "shakespeare", "path": str(SHAKESPEARE), "weight": 1.0, "category": "books", "text_field": "content"},
    ]}))
    overrides["shards"] = {"target_tokens": 60_000, **overrides.get("shards", {})}
    return compile_stage("data-prep-pretrain", "tiny", blend_path=str(blend), output_dir=str(out),
                         tokenizer__cache_dir=tok_cache, **overrides)


def sft_config(out: Path, tok_cache: str, **overrides: Any) -> dict[str, Any]:
    """The `tiny` SFT config (its own chat sample plus the shared FastChat and GPTeacher files), written to ``out``."""
    return compile_stage("data-prep-sft", "tiny", output_dir=str(out), tokenizer__cache_dir=tok_cache,
                         path_vars={"shared_data": str(SHARED_DATA)}, **overrides)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pretrain_hashes(out: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every ``.bin``/``.idx`` under ``out``."""
    return {str(p.relative_to(out)): _sha(p.read_bytes()) for p in sorted(out.rglob("*"))
            if p.is_file() and p.suffix in (".bin", ".idx")}


def sft_hashes(out: Path, manifest: dict[str, Any]) -> dict[str, str]:
    """Hashes of the SFT output at ``out`` (see the module docstring); ``manifest`` is its manifest."""
    import numpy as np
    import pyarrow.parquet as pq

    from nemotron.data.indexed import read_index

    hashes: dict[str, str] = {}
    for d in manifest["datasets"]:
        folder = out / "data" / "sequences" / d["name"]
        ids, masks, lengths = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
        for idx in sorted(folder.glob("*.idx")):
            prefix = str(idx)[:-4]
            ids.update(Path(prefix + ".bin").read_bytes())
            masks.update(Path(prefix + ".mask").read_bytes())
            lengths.update(np.asarray(read_index(prefix)["lengths"], dtype="<i4").tobytes())
        hashes[f"{d['name']}/ids"] = ids.hexdigest()
        hashes[f"{d['name']}/mask"] = masks.hexdigest()
        hashes[f"{d['name']}/lengths"] = lengths.hexdigest()
    for split, path in (("train", manifest["loader"]["packed_train_data_path"]),
                        ("valid", manifest["loader"]["packed_val_data_path"])):
        if path is None:
            continue
        table = pq.read_table(path)
        for col in ("input_ids", "loss_mask", "seq_start_id"):
            arr = table.column(col).combine_chunks()
            values = np.asarray(arr.flatten()).tobytes()
            offsets = np.asarray(arr.offsets, dtype="<i8").tobytes()
            hashes[f"{split}/{col}"] = _sha(offsets + values)
    return hashes


def main() -> None:
    import tempfile

    stage, out = sys.argv[1], Path(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="tok-") as tok_cache:
        if stage == "pretrain":
            from nemotron.data.pretrain import Settings, prepare

            prepare(Settings.from_config(pretrain_config(out, tok_cache)), quiet=True)
            print(json.dumps(pretrain_hashes(out), indent=1, sort_keys=True))
        else:
            from nemotron.data.sft import Settings, prepare

            m = prepare(Settings.from_config(sft_config(out, tok_cache)), quiet=True)
            print(json.dumps(sft_hashes(out, m), indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
