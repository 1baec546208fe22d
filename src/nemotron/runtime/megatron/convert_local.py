"""``backend: local`` of ``ultra3 convert``: a Hugging Face checkpoint's config rewritten to the v4 form on this machine."""

from __future__ import annotations

from nemotron.errors import did_you_mean
from nemotron.runtime.common.convert import ConfigFormError, convert_checkpoint_config


#: The one direction the local backend converts (a Hugging Face config rewritten to the v4 form).
LOCAL_DIRECTION = "hf_v5_to_v4"


def direction_refusal(direction: object) -> str | None:
    """The local backend's refusal of ``convert.direction`` (one line, a did-you-mean for a near miss of
    :data:`LOCAL_DIRECTION`), or None. Said by :func:`local_main` and, before anything runs, by the dry run
    (:func:`nemotron.validation.checks.validate_local`, rule ``local-convert``)."""
    if direction == LOCAL_DIRECTION:
        return None
    maybe = did_you_mean(direction, (LOCAL_DIRECTION, "hf_to_megatron", "megatron_to_hf"))
    return (f"convert.direction={direction!r}: " + (f"{maybe} " if maybe else "")
            + f"the local backend only rewrites HF configs ({LOCAL_DIRECTION}); Megatron <-> HF conversion "
            "(hf_to_megatron, megatron_to_hf) runs in the NeMo container (-c tiny or default on a Slurm profile)")


def local_main(cfg: dict) -> int:
    """``backend: local`` of ``ultra3 convert``: ``convert.direction: hf_v5_to_v4`` on a Hugging Face
    checkpoint folder (config.json rewritten to the v4 form, weights copied). Returns the exit code."""
    import sys
    from pathlib import Path

    from nemotron.runtime.common.model import ModelError, resolve_weights

    stage = "ultra3 convert"
    conv = cfg.get("convert") or {}
    refusal = direction_refusal(conv.get("direction"))
    if refusal is not None:  # the dry run refuses it too (exit 2): a config problem
        print(f"{stage}: {refusal}", file=sys.stderr)
        return 2
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
