"""``backend: local`` of ``ultra3 convert``: a Hugging Face checkpoint's config rewritten to the v4 form on this machine."""

from __future__ import annotations

from nemotron.runtime.common.convert import ConfigFormError, convert_checkpoint_config


def local_main(cfg: dict) -> int:
    """``backend: local`` of ``ultra3 convert``: ``convert.direction: hf_v5_to_v4`` on a Hugging Face
    checkpoint folder (config.json rewritten to the v4 form, weights copied). Returns the exit code."""
    import sys
    from pathlib import Path

    from nemotron.runtime.common.model import ModelError, resolve_weights

    stage = "ultra3 convert"
    conv = cfg.get("convert") or {}
    direction = conv.get("direction")
    if direction != "hf_v5_to_v4":
        print(f"{stage}: convert.direction={direction!r}: the local backend only rewrites HF configs "
              "(hf_v5_to_v4); Megatron <-> HF conversion runs in the NeMo container", file=sys.stderr)
        return 1
    source, output = conv.get("source"), conv.get("output_dir")
    if not source or not output or "${" in str(source):
        print(f"{stage}: convert.source={source!r} / convert.output_dir={output!r}: both must be set", file=sys.stderr)
        return 1
    try:
        folder = resolve_weights(Path(source).expanduser().absolute())
        out = convert_checkpoint_config(folder, Path(output).expanduser().absolute(), "v4")
    except (ConfigFormError, ModelError, OSError) as exc:
        print(f"{stage}: {exc}", file=sys.stderr)
        return 1
    print(f"{stage}: {folder} -> {out} (config.json in the v4 form; weights copied)")
    return 0
