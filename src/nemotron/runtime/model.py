"""Build or load the catalogue's NemotronH with Hugging Face transformers (5.x has ``NemotronH``).

The architecture comes from :func:`nemotron.catalogue.hf_config` (v4 form with
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

from nemotron.catalogue import ModelSpec, hf_config

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


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of the ``checkpoint-<step>`` folders in ``folder`` holding a complete model,
    sorted by step."""
    out = []
    if folder.is_dir():
        for p in folder.iterdir():
            m = _CKPT_RE.match(p.name)
            if m and p.is_dir() and (p / "trainer_state.json").is_file() and _has_weights(p):
                out.append((int(m.group(1)), p))
    return sorted(out)


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
        from nemotron.runtime.convert import pattern_from_block_types

        pattern = pattern_from_block_types(got["layers_block_type"])
    if pattern != want["hybrid_override_pattern"]:
        diffs.append(f"layer pattern: checkpoint {pattern!r}, model {want['hybrid_override_pattern']!r}")
    if diffs:
        raise ModelError(f"{folder} is not a checkpoint of model {spec.name}: " + "; ".join(diffs))


def load(spec: ModelSpec, path: Path) -> Any:
    """``NemotronHForCausalLM`` with the weights at ``path`` (checked against ``spec`` first), in FP32."""
    import torch
    from transformers import NemotronHForCausalLM

    folder = resolve_weights(path)
    check_compatible(spec, folder)
    return NemotronHForCausalLM.from_pretrained(folder, dtype=torch.float32)


__all__ = ["ModelError", "build", "check_compatible", "checkpoints", "load", "resolve_weights", "transformers_config"]
