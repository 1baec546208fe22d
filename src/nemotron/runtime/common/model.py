"""Build or load the catalogue's NemotronH with Hugging Face transformers (5.x has ``NemotronH``).

The architecture comes from :func:`nemotron.config.catalogue.hf_config` (v4 form with
``hybrid_override_pattern``, which transformers 5.x still reads). transformers does not build the MTP
block, so a local run trains the main decoder only. A checkpoint folder is accepted in three forms:
a Hugging Face model folder (``config.json`` + ``model.safetensors``), a run's ``checkpoint.save``
folder (its top-level export, else its newest ``checkpoint-<step>``), or a ``checkpoint-<step>``
folder itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nemotron.config.catalogue import ModelSpec, hf_config
from nemotron.data.files import sha256_file

#: HF config fields that must agree between the catalogue entry and a checkpoint we load.
ARCH_FIELDS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "n_routed_experts",
               "num_experts_per_tok", "moe_intermediate_size", "moe_shared_expert_intermediate_size",
               "moe_latent_size", "vocab_size")
_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


class ModelError(ValueError):
    """A checkpoint that cannot be loaded as the configured model; ``str()`` says which field differs."""


def transformers_config(spec: ModelSpec) -> Any:
    """``transformers.NemotronHConfig`` for ``spec`` (MTP left out: transformers does not build it)."""
    from transformers import NemotronHConfig

    d = hf_config(spec)
    d["num_nextn_predict_layers"] = 0
    d.pop("mtp_hybrid_override_pattern", None)
    d["use_cache"] = False
    return NemotronHConfig(**d)


def build(spec: ModelSpec, seed: int) -> Any:
    """A freshly initialised ``NemotronHForCausalLM`` for ``spec`` (FP32; weights seeded by ``seed``)."""
    import torch
    from transformers import NemotronHForCausalLM

    torch.manual_seed(seed)
    return NemotronHForCausalLM(transformers_config(spec))


#: The newest completed save of a run folder, written after the checkpoint and its record (as Megatron writes it).
MARKER = "latest_checkpointed_iteration.txt"
#: What a save wrote, in ``checkpoint-<step>/``: each file's size and SHA-256, and the sample stream's position.
RECORD = "nemotron_checkpoint.json"


def marker_step(folder: Path) -> int | None:
    """The step in ``folder/latest_checkpointed_iteration.txt``, or None when it is absent or unreadable."""
    try:
        text = (Path(folder) / MARKER).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _all_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    out = []
    if folder.is_dir():
        for p in folder.iterdir():
            m = _CKPT_RE.match(p.name)
            if m and p.is_dir() and (p / "trainer_state.json").is_file() and _has_weights(p):
                out.append((int(m.group(1)), p))
    return sorted(out)


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of the ``checkpoint-<step>`` folders in ``folder`` holding a complete model, sorted by
    step. A folder newer than the step ``latest_checkpointed_iteration.txt`` names is left out: its save did not
    finish (the marker is written last)."""
    top = marker_step(folder)
    return [(step, p) for step, p in _all_checkpoints(folder) if top is None or step <= top]



def write_record(checkpoint: Path, extra: dict[str, Any]) -> Path:
    """Write ``checkpoint/nemotron_checkpoint.json``: ``{"files": {name: {"bytes", "sha256"}}, **extra}`` for
    every file of the checkpoint (atomically: a temp file, then a rename). Returns its path."""
    import json
    import os

    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(Path(checkpoint).iterdir()) if p.is_file() and p.name != RECORD
             and not p.name.startswith(".")}
    path = Path(checkpoint) / RECORD
    tmp = path.with_name(f".{RECORD}.tmp")
    tmp.write_text(json.dumps({"files": files, **extra}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_record(checkpoint: Path) -> dict[str, Any] | None:
    """``checkpoint/nemotron_checkpoint.json`` (None: absent or unreadable, e.g. a save of an older version)."""
    import json

    try:
        data = json.loads((Path(checkpoint) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def damage(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None when it checks out.

    With its record (:func:`write_record`): every recorded file present with its size and SHA-256. Without one
    (saved by an older version): each ``*.safetensors`` header parses and describes exactly the file's bytes, each
    ``*.pt``/``*.pth`` (zip archives) passes its CRC check, and ``trainer_state.json`` parses.
    """
    import json
    import zipfile

    checkpoint = Path(checkpoint)
    record = read_record(checkpoint)
    if record is not None and isinstance(record.get("files"), dict):
        for name, want in sorted(record["files"].items()):
            p = checkpoint / name
            if not p.is_file():
                return f"{name} is missing"
            size = p.stat().st_size
            if size != want.get("bytes"):
                return f"{name} has {size:,} bytes, the save wrote {want.get('bytes'):,}"
            if sha256_file(p) != want.get("sha256"):
                return f"{name} differs from what the save wrote (SHA-256)"
        return None
    try:
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"trainer_state.json is unreadable ({exc})"
    for p in sorted(checkpoint.glob("*.safetensors")):
        problem = safetensors_problem(p)
        if problem:
            return problem.replace(str(p), p.name, 1)
    for p in sorted([*checkpoint.glob("*.pt"), *checkpoint.glob("*.pth")]):
        try:
            with zipfile.ZipFile(p) as zf:
                bad = zf.testzip()
        except (OSError, zipfile.BadZipFile) as exc:
            return f"{p.name}: not a readable archive ({exc})"
        if bad is not None:
            return f"{p.name}: member {bad} fails its CRC check"
    return None


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file, or None: the 8-byte little-endian header length, the JSON
    header, and the data offsets, whose end must be the file's size in bytes (a truncated copy ends earlier).
    One line naming ``path``. The check of :func:`damage`, ``model import`` (:func:`check_hf_folder`) and the local
    convert's source."""
    import json
    import struct

    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{path}: {size} bytes, too short for a safetensors header"
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                return f"{path}: header length {n} runs past the file's {size} bytes (truncated, or not safetensors)"
            header = json.loads(fh.read(n))
    except OSError as exc:
        return f"{path}: cannot read ({exc.strerror or exc})"
    except ValueError:
        return f"{path}: the safetensors header is not valid JSON"
    if not isinstance(header, dict):
        return f"{path}: the safetensors header is not a JSON object"
    ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
            and isinstance(v.get("data_offsets"), list) and len(v["data_offsets"]) == 2]
    if size != 8 + n + max(ends, default=0):
        return (f"{path}: {size} bytes, but its header describes {8 + n + max(ends, default=0)} (a truncated or "
                "partial copy?)")
    return None


#: The tokenizer files a Hugging Face folder carries (either one).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        ConfigError: the file cannot be read, is not JSON, or holds no JSON object (the message names the file).
    """
    import json

    from nemotron.errors import ConfigError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})", "a readable file") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})", "the file as the checkpoint's producer wrote it") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object", "the file as the checkpoint's producer wrote it")
    return data


def tokenizer_size(folder: Path) -> int | None:
    """The number of token ids of ``folder/tokenizer.json`` (one more than the largest id of its ``model.vocab``
    and ``added_tokens``), or None when there is no ``tokenizer.json`` (a SentencePiece ``tokenizer.model``).

    Raises:
        ConfigError: ``tokenizer.json`` is not valid JSON or has no vocabulary.
    """
    from nemotron.errors import ConfigError

    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    data = json_object(path)
    vocab = (data.get("model") or {}).get("vocab") if isinstance(data.get("model"), dict) else None
    ids = list(vocab.values()) if isinstance(vocab, dict) else []
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        ids = [len(vocab) - 1] if vocab else []
    ids += [t.get("id") for t in data.get("added_tokens") or [] if isinstance(t, dict)]
    ids = [i for i in ids if isinstance(i, int)]
    if not ids:
        raise ConfigError(f"{path}: no model.vocab or added_tokens (not a tokenizers file?)",
                          "the tokenizer files saved with the model")
    return max(ids) + 1


def not_a_file(path: Path) -> str | None:
    """What ``path`` is when something of that name exists but is no readable regular file: ``"a directory"``, ``"a
    link that loops (-> TARGET)"``, ``"a broken link (-> TARGET)"``, ``"not a regular file (a FIFO, socket or
    device)"``; ``None`` when it is a file (through links) or when nothing of that name exists. Never raises."""
    import errno
    import os
    import stat

    if not os.path.lexists(path):
        return None
    target = ""
    if path.is_symlink():
        try:
            target = f" (-> {os.readlink(path)})"
        except OSError:
            target = ""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"a link that loops{target}"
        if exc.errno == errno.ENOENT:
            return f"a broken link{target}"
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISDIR(st.st_mode):
        return f"a directory{' through a link' + target if target else ''}"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, socket or device)"
    return None


def check_hf_folder(path: Path, tokenizer: Path | None = None) -> dict[str, Any]:
    """Check a Hugging Face checkpoint folder as ``model import`` records it and the local convert writes it:
    ``config.json`` a JSON object with a positive ``vocab_size``; its weights (``model.safetensors``, or
    ``model.safetensors.index.json`` whose ``weight_map`` names shards that all exist), each shard passing
    :func:`safetensors_problem`; a tokenizer (:data:`TOKENIZER_FILES`) in ``tokenizer`` (default ``path``) whose ids
    fit ``vocab_size``. Reads headers and JSON only.

    Returns:
        ``form`` ("hf"), ``model_type``, ``vocab_size``, ``shards`` (the number of weight files).

    Raises:
        ConfigError: the first missing or bad file, by name, with a hint.
    """
    from nemotron.errors import ConfigError

    cfg = json_object(path / "config.json")
    vocab = cfg.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise ConfigError(f"{path / 'config.json'}: vocab_size={vocab!r} is not a positive integer",
                          "the config.json saved with the model")
    index = path / "model.safetensors.index.json"
    for entry, hint in ((index, "the index file saved with the shards (or no entry of that name, for one "
                                "model.safetensors)"),
                        (path / "model.safetensors", "the weights file saved with the model (copy it, not a link to "
                                                     "itself)")):
        what = not_a_file(entry)
        if what is not None:
            raise ConfigError(f"{entry} is {what}, not a file", hint)
    if index.is_file():
        weight_map = json_object(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ConfigError(f"{index}: no weight_map", "the index saved with the shards")
        shards = sorted(set(map(str, weight_map.values())))
        missing = [s for s in shards if not (path / s).is_file()]
        for name in missing:
            what = not_a_file(path / name)
            if what is not None:
                raise ConfigError(f"{path / name} is {what}, not a file", "copy the shard the index names (a file)")
        if missing:
            more = f" (and {len(missing) - 1} more of {len(shards)})" if len(missing) > 1 else ""
            raise ConfigError(f"{path / missing[0]}: shard named by {index.name} does not exist{more}",
                              "copy every shard the index names")
    elif (path / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    else:
        others = sorted(p.name for p in path.glob("*.safetensors") if p.is_file())
        raise ConfigError(f"{path}: no model.safetensors and no model.safetensors.index.json"
                          + (f" (found {', '.join(others[:3])} without their index)" if others else ""),
                          "a Hugging Face folder saved with save_pretrained (safetensors weights)")
    for shard in shards:
        problem = safetensors_problem(path / shard)
        if problem:
            raise ConfigError(problem, "copy the shard again, or save the model with save_pretrained")
    tok = path if tokenizer is None else tokenizer
    if not any((tok / f).is_file() for f in TOKENIZER_FILES):
        raise ConfigError(f"{tok}: no tokenizer ({' or '.join(TOKENIZER_FILES)})",
                          "copy the tokenizer files released with the model into the folder")
    ids = tokenizer_size(tok)
    if ids is not None and ids > vocab:
        raise ConfigError(f"{tok / 'tokenizer.json'}: {ids:,} token ids, more than config.json's vocab_size={vocab:,} "
                          "(token ids would overflow the embedding)", "the tokenizer released with these weights")
    return {"form": "hf", "model_type": cfg.get("model_type"), "vocab_size": vocab, "shards": len(shards)}


def set_aside(checkpoint: Path, why: str) -> Path:
    """Rename ``checkpoint-<step>`` to ``<why>-checkpoint-<step>`` (then ``-2``, ``-3`` ... when taken): out of
    every checkpoint listing (ours and transformers', which would otherwise rotate it away), never deleted."""
    checkpoint = Path(checkpoint)
    target = checkpoint.with_name(f"{why}-{checkpoint.name}")
    n = 2
    while target.exists():
        target = checkpoint.with_name(f"{why}-{checkpoint.name}-{n}")
        n += 1
    checkpoint.rename(target)
    return target


def resumable(folder: Path, say: Any = print) -> tuple[int, Path] | None:
    """The checkpoint a run in ``folder`` resumes from: the newest complete one that
    ``latest_checkpointed_iteration.txt`` covers and that passes :func:`damage`. Each one passed over is set
    aside (:func:`set_aside`: ``incomplete-`` when newer than the marker, ``damaged-`` when its files do not
    check out) and ``say`` gets one warning line for it. None: nothing to resume.

    Raises:
        ModelError: there were checkpoints, and every one is damaged (all set aside; the message names them).
    """
    folder = Path(folder)
    top = marker_step(folder)
    for step, path in reversed(_all_checkpoints(folder)):
        if top is not None and step > top:
            moved = set_aside(path, "incomplete")
            say(f"warning: {path.name} is newer than step {top} in {folder / MARKER}: its save did not finish; "
                f"set aside as {moved.name}")
    tried = []
    for step, path in reversed(checkpoints(folder)):
        problem = damage(path)
        if problem is None:
            if tried:
                say(f"warning: resuming from {path.name}, the newest checkpoint that checks out")
            return step, path
        moved = set_aside(path, "damaged")
        tried.append(f"{path.name} ({problem})")
        say(f"warning: {path.name} is damaged: {problem}; set aside as {moved.name}")
    if tried:
        raise ModelError(f"{folder}: no checkpoint to resume from checks out: {'; '.join(tried)}; each was set "
                         "aside as damaged-checkpoint-<step> (kept); use checkpoint.save=<a new folder> to start a "
                         "new run, or restore a good copy as checkpoint-<step>")
    return None


def _has_weights(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (
        any(folder.glob("model*.safetensors")) or (folder / "pytorch_model.bin").is_file())


def resolve_weights(path: Path) -> Path:
    """The folder holding the weights to start from (see the module docstring).

    Raises:
        ModelError: nothing loadable at ``path``.
    """
    if _has_weights(path):
        return path
    found = checkpoints(path)
    if found:
        return found[-1][1]
    raise ModelError(f"{path}: no Hugging Face model here (config.json + model.safetensors) and no "
                     "checkpoint-<step> folder")


def check_compatible(spec: ModelSpec, folder: Path) -> None:
    """Raise :class:`ModelError` when the checkpoint's ``config.json`` disagrees with ``spec``."""
    import json

    try:
        got = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}/config.json: unreadable: {exc}") from None
    want = hf_config(spec)
    diffs = [f"{k}: checkpoint {got.get(k)!r}, model {want.get(k)!r}" for k in ARCH_FIELDS
             if k in want and got.get(k) != want[k]]
    pattern = got.get("hybrid_override_pattern")
    if pattern is None and isinstance(got.get("layers_block_type"), list):
        from nemotron.runtime.common.convert import pattern_from_block_types

        pattern = pattern_from_block_types(got["layers_block_type"])
    if pattern != want["hybrid_override_pattern"]:
        diffs.append(f"layer pattern: checkpoint {pattern!r}, model {want['hybrid_override_pattern']!r}")
    if diffs:
        raise ModelError(f"{folder} is not a checkpoint of model {spec.name}: " + "; ".join(diffs))


def check_checkpoint(spec: ModelSpec, path: Path) -> Path:
    """The weights folder at ``path`` (:func:`resolve_weights`), checked against ``spec``
    (:func:`check_compatible`): what every local stage's load refuses, and what ``--dry-run`` asks before it
    (rule ``local-checkpoint``, :func:`nemotron.validation.inputs.local_checkpoints`). Reads ``config.json`` only.

    Raises:
        ModelError: nothing loadable at ``path``, or a ``config.json`` of another model (which field differs).
    """
    folder = resolve_weights(Path(path))
    check_compatible(spec, folder)
    return folder


def load(spec: ModelSpec, path: Path) -> Any:
    """``NemotronHForCausalLM`` with the weights at ``path`` (checked against ``spec`` first:
    :func:`check_checkpoint`), in FP32."""
    import torch
    from transformers import NemotronHForCausalLM

    folder = check_checkpoint(spec, path)
    return NemotronHForCausalLM.from_pretrained(folder, dtype=torch.float32)


__all__ = ["MARKER", "RECORD", "TOKENIZER_FILES", "ModelError", "build", "check_checkpoint", "check_compatible", "check_hf_folder", "checkpoints", "damage", "load", "marker_step",
           "read_record", "resolve_weights", "safetensors_problem", "tokenizer_size", "resumable", "set_aside", "transformers_config", "write_record"]
