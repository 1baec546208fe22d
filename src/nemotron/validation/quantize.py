"""Launch checks of the quantize stage beyond its layouts (those are in :mod:`nemotron.validation.checks`):
the recipe exists and is well formed, and the inputs exist — the checkpoint to quantize and, for the
``local`` backend, the calibration blend — using the runtime's own readers
(:mod:`nemotron.runtime.quantization.quant_config`, stdlib + yaml).

A checkpoint path of the ``megatron-bridge`` backend lives on the cluster: it is checked by rule ``input-exists``
(:mod:`nemotron.validation.inputs`, every stage's inputs) when this machine sees the cluster's files (no profile, a
``local`` executor, or a Slurm profile with ``tunnel = "local"``); through an SSH tunnel it cannot be, and the job's
own check (before loading anything) says so.
Values the compiler could not resolve yet (``${art:...}``) are left to its warning and to the refusal at
submission; values an earlier stage of a ``pipe`` will write (:func:`nemotron.config.artifacts.is_planned`:
``quantize -c local`` after ``sft`` and ``data prep pretrain``) are not required to exist yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nemotron.config.artifacts import is_planned
from nemotron.config.tree import get, unresolved
from nemotron.errors import Problem

if TYPE_CHECKING:
    from nemotron.profiles.profile import ExecutorProfile


def validate_quantize(cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Problems (errors) with the recipe and the inputs of a quantize config."""
    from nemotron.runtime.quantization.quant_config import (
        QuantConfigError,
        check_inputs,
        load_recipe,
        read_settings,
    )

    out: list[Problem] = []
    recipe = get(cfg, "quantization.recipe", "ultra")
    try:
        load_recipe(str(recipe))
    except QuantConfigError as exc:
        out.append(Problem("quantization.recipe", recipe, str(exc).removeprefix(f"quantization.recipe={recipe!r}: "),
                           rule="quantize-recipe"))
    local = str(get(cfg, "backend", "") or "").lower() == "local"
    source = get(cfg, "quantization.source")
    if not local:  # its checkpoint: rule input-exists, every stage's inputs (nemotron.validation.inputs)
        return out
    if any(unresolved(get(cfg, k)) for k in ("quantization.source", "quantization.calib_dataset", "export.output_dir")):
        return out
    try:
        settings = read_settings(cfg)
    except QuantConfigError as exc:
        return [*out, Problem("", None, str(exc), rule="quantize-settings")]
    for key, value, message in check_inputs(settings):
        if not is_planned(value):
            out.append(Problem(key, value, message, rule="quantize-inputs"))
    return out


__all__ = ["validate_quantize"]
