"""NemotronH config forms: transformers v5 (``layers_block_type``) ↔ v4 (``hybrid_override_pattern``).

transformers 5.x writes a NemotronH ``config.json`` with ``layers_block_type`` (one name per layer:
``linear_attention`` = Mamba-2, ``moe``, ``full_attention``, ``mlp``; releases before 5.3 wrote
``mamba`` / ``attention``) and ``mtp_layers_block_type``, and derives ``num_hidden_layers`` from it.
The v4 form — the released checkpoints' remote-code config, and what NeMo RL's runtime (and vLLM's
NemotronH) read — is one character per layer in ``hybrid_override_pattern`` (``M``, ``E``, ``*``,
``-``; Megatron-Core's hybrid symbols), ``mtp_hybrid_override_pattern`` and an explicit
``num_hidden_layers``. Source: transformers 5.24 ``configuration_nemotron_h.py`` (``_pattern_to_list`` /
``_list_to_pattern``, ``remap_legacy_layer_types``).

Stdlib only; every function is pure (dicts in, new dicts out).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from nemotron.config.catalogue import HF_BLOCK_SYMBOLS

#: v5 block type → v4 pattern symbol (legacy v5 names included): the catalogue's table.
BLOCK_TO_SYMBOL = HF_BLOCK_SYMBOLS
SYMBOL_TO_BLOCK = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


class ConfigFormError(ValueError):
    """A config that is neither form, or whose fields disagree; ``str()`` names the field."""


def pattern_from_block_types(types: list[str], field: str = "layers_block_type") -> str:
    """``["linear_attention", "moe", "full_attention"]`` → ``"ME*"``.

    Raises:
        ConfigFormError: not a list of strings, or an unknown block type.
    """
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ConfigFormError(f"{field} must be a list of block type names, got {types!r}")
    unknown = sorted({t for t in types if t not in BLOCK_TO_SYMBOL})
    if unknown:
        raise ConfigFormError(f"{field}: unknown block type(s) {', '.join(unknown)}; valid: "
                              f"{', '.join(sorted(BLOCK_TO_SYMBOL))}")
    return "".join(BLOCK_TO_SYMBOL[t] for t in types)


def block_types_from_pattern(pattern: str, field: str = "hybrid_override_pattern") -> list[str]:
    """``"ME*"`` → ``["linear_attention", "moe", "full_attention"]``.

    Raises:
        ConfigFormError: a character outside ``M E * -``.
    """
    if not isinstance(pattern, str):
        raise ConfigFormError(f"{field} must be a string, got {pattern!r}")
    bad = sorted({c for c in pattern if c not in SYMBOL_TO_BLOCK})
    if bad:
        raise ConfigFormError(f"{field}={pattern!r}: unknown symbol(s) {' '.join(bad)}; valid: M E * -")
    return [SYMBOL_TO_BLOCK[c] for c in pattern]


def config_form(config: dict[str, Any]) -> str:
    """``"v5"`` (``layers_block_type``), ``"v4"`` (``hybrid_override_pattern``) or ``"both"``.

    Raises:
        ConfigFormError: not a NemotronH config, or neither field present.
    """
    if config.get("model_type") not in (None, "nemotron_h"):
        raise ConfigFormError(f"model_type={config.get('model_type')!r}: not a NemotronH config (nemotron_h)")
    v5, v4 = "layers_block_type" in config, "hybrid_override_pattern" in config
    if v5 and v4:
        return "both"
    if v5:
        return "v5"
    if v4:
        return "v4"
    raise ConfigFormError("neither layers_block_type (v5) nor hybrid_override_pattern (v4) is set")


def v5_to_v4(config: dict[str, Any]) -> dict[str, Any]:
    """The v4 form of a NemotronH config (a new dict; ``config`` is not changed).

    ``layers_block_type`` → ``hybrid_override_pattern`` + ``num_hidden_layers``;
    ``mtp_layers_block_type`` → ``mtp_hybrid_override_pattern``. Every other field is kept. A config
    already in v4 form comes back as a copy; one carrying both forms must agree (then the v5 fields go).

    Raises:
        ConfigFormError: an unknown block type, or both forms present and disagreeing.
    """
    form = config_form(config)
    out = copy.deepcopy(config)
    if form == "v4":
        if "num_hidden_layers" not in out:
            out["num_hidden_layers"] = len(out["hybrid_override_pattern"])
        return out
    pattern = pattern_from_block_types(out.pop("layers_block_type"))
    if form == "both" and out["hybrid_override_pattern"] != pattern:
        raise ConfigFormError(f"hybrid_override_pattern={out['hybrid_override_pattern']!r} disagrees with "
                              f"layers_block_type ({pattern!r})")
    n = out.get("num_hidden_layers")
    if n is not None and n != len(pattern):
        raise ConfigFormError(f"num_hidden_layers={n} disagrees with layers_block_type ({len(pattern)} layers)")
    out["hybrid_override_pattern"] = pattern
    out["num_hidden_layers"] = len(pattern)
    if "mtp_layers_block_type" in out:
        mtp = out.pop("mtp_layers_block_type")
        if mtp is not None:
            out["mtp_hybrid_override_pattern"] = pattern_from_block_types(mtp, "mtp_layers_block_type")
    return out


def v4_to_v5(config: dict[str, Any]) -> dict[str, Any]:
    """The v5 form (inverse of :func:`v5_to_v4`): ``hybrid_override_pattern`` → ``layers_block_type``
    (``num_hidden_layers`` dropped: v5 derives it), ``mtp_hybrid_override_pattern`` → ``mtp_layers_block_type``."""
    form = config_form(config)
    out = copy.deepcopy(config)
    if form == "v5":
        return out
    v4 = v5_to_v4(out) if form == "both" else out
    out = {k: v for k, v in v4.items() if k not in ("hybrid_override_pattern", "num_hidden_layers",
                                                      "mtp_hybrid_override_pattern")}
    out["layers_block_type"] = block_types_from_pattern(v4["hybrid_override_pattern"])
    if "mtp_hybrid_override_pattern" in v4:
        out["mtp_layers_block_type"] = block_types_from_pattern(v4["mtp_hybrid_override_pattern"],
                                                                "mtp_hybrid_override_pattern")
    return out


def convert_checkpoint_config(source: str | os.PathLike[str], output_dir: str | os.PathLike[str],
                              form: str = "v4") -> Path:
    """Write ``output_dir`` = the HF checkpoint ``source`` with its ``config.json`` in ``form``; every other
    file is copied (not linked: a later run of the source stage rewrites its files in place, and a hard
    link would carry that change into this output). The new ``config.json`` is written atomically.
    Returns the output folder.

    Raises:
        ConfigFormError: ``source`` has no readable ``config.json``, or an unknown ``form``.
    """
    import shutil

    src, dst = Path(source), Path(output_dir)
    try:
        config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigFormError(f"{src}/config.json: cannot read: {exc}") from None
    if form not in ("v4", "v5"):
        raise ConfigFormError(f"form {form!r}: valid: v4, v5")
    new = v5_to_v4(config) if form == "v4" else v4_to_v5(config)
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.name == "config.json" or not f.is_file():
            continue
        target = dst / f.name
        tmp = dst / f".{f.name}.tmp"
        shutil.copy2(f, tmp)
        os.replace(tmp, target)
    tmp = dst / ".config.json.tmp"
    tmp.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, dst / "config.json")
    return dst


__all__ = [
    "BLOCK_TO_SYMBOL",
    "SYMBOL_TO_BLOCK",
    "ConfigFormError",
    "block_types_from_pattern",
    "config_form",
    "convert_checkpoint_config",
    "pattern_from_block_types",
    "v4_to_v5",
    "v5_to_v4",
]


