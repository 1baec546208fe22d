"""Contract: Megatron-Core's own checks (Megatron-LM c8288b6, the submodule of Megatron-Bridge 4588417) on the
model and optimizer of every shipped Megatron-Bridge config of pretrain and SFT, and Megatron-LM's argument check
for optimizer CPU offload.

The configs are the ones ``test_megatron_bridge.py`` compiles (compiled, prepared and validated as ``--dry-run``
does it, artifacts replaced by real-shaped inputs; ``-c local`` is the transformers backend, not Megatron). In one
contract subprocess, per config:

* **``TransformerConfig.__post_init__``** — the job's translation built into the real recipe's model provider
  (``_recipe`` / ``_apply``), the mixed-precision preset applied as ``runtime_config_update`` applies it
  (``MixedPrecisionConfig.finalize()`` + ``setup(model, optimizer, ddp)``), then the provider's ``finalize()``:
  Megatron-Bridge's ``MambaModelProvider.finalize`` builds the unified hybrid pattern and runs Megatron-Core's
  deferred ``TransformerConfig.__post_init__`` (with ``ModelParallelConfig.__post_init__``): heads and KV groups
  against TP, sequence parallel against TP, pipeline dtype, MoE, MTP, recompute, precision checks. That it ran to
  its end is shown by the fields it derives (``init_method``, unset before). Megatron-Core's
  ``OptimizerConfig.__post_init__`` and ``DistributedDataParallelConfig.__post_init__`` run on our values too
  (through the deferred ``finalize()``, or re-run as ``ConfigContainer.validate()`` re-runs it).
* **Parity with our layout rules** on a broken variant: TP=3 for the slice — our dry-run refuses it (rule
  ``tp-model``) and so does ``TransformerConfig.__post_init__`` (64 attention heads not a multiple of 3).
* **Optimizer CPU offload** (issue 13, defect 10a): Megatron-LM's ``megatron/training/arguments.py``
  ``validate_args`` — the assert that offload needs ``use_precision_aware_optimizer`` (and FP8 parameter gather
  only with delayed scaling) — on an argument namespace from its own ``parse_args`` (a small model: the rule reads
  none of the model's sizes) carrying each config's optimizer and precision values as the job ends up with them
  (the translated container after the preset's ``setup``). Megatron-Bridge itself does not call ``validate_args``;
  the assert guards the hybrid CPU/GPU optimizer Megatron-Core builds for offload, which reuses the
  precision-aware optimizer's code path. Every shipped config is accepted by it and by our dry-run; a config
  without the precision-aware optimizer, or with an FP8 preset that gathers FP8 parameters with a non-delayed
  recipe, is refused by both (our rule ``optimizer-offload``).

Transformer-Engine-only switches turned off, as in ``test_megatron_bridge.py`` (their checks need TE itself):
``moe_permute_fusion``, and the NVFP4 preset's ``fp4`` / ``fp4_param_gather`` after ``MixedPrecisionConfig.finalize``
refused them for the TE version alone. Where the proof stops: checks that need the installed TE version or a GPU,
the model itself (``provide()``), the MoE layer's training-time sequence-parallel check (``MoELayer.forward``).
"""

from __future__ import annotations

from typing import Any

import pytest

from test_megatron_bridge import BUILD, SHIPPED, TE_ONLY, TE_ONLY_FP4, compile_shipped, inputs

pytestmark = pytest.mark.timeout(900)

VARIANTS = {
    "pretrain-tiny-tp3": ("pretrain", "tiny", ["model.tensor_model_parallel_size=3"]),
    "pretrain-tiny-no-precision-aware": ("pretrain", "tiny", ["optimizer.use_precision_aware_optimizer=false"]),
    "pretrain-tiny-mxfp8": ("pretrain", "tiny", ["mixed_precision=bf16_with_mxfp8_mixed"]),
}

SCRIPT = BUILD + r'''
import os, sys, traceback
from upstream import read_payload, write_result

payload = read_payload()
out = {}


def apply_precision(c, rec):
    """runtime_config_update's first step: the preset finalized and set on the model, optimizer and DDP configs."""
    mp = c.mixed_precision
    if mp is None or isinstance(mp, str):
        return
    try:
        mp.finalize()
    except ValueError as exc:
        if "requires Transformer Engine" not in str(exc) or not getattr(mp, "fp4", None):
            raise
        rec["te_stop"] = str(exc)
        for key, value in payload["te_only_fp4"].items():
            setattr(mp, key, value)
        mp.finalize()
    mp.setup(c.model, c.optimizer, c.ddp)


for cid, case in payload["cases"].items():
    rec = out[cid] = {}
    try:
        bc, hf_path, c = build(case)
        apply_precision(c, rec)
    except Exception as exc:
        rec["build_error"] = f"{type(exc).__name__}: {exc}"[:3000] + "\n" + traceback.format_exc()[-2000:]
        continue
    m = c.model
    for key, value in payload["te_only"].items():
        setattr(m, key, value)
    rec["init_before"] = m.init_method is not None
    try:
        m.finalize()  # MambaModelProvider.finalize -> Megatron-Core TransformerConfig.__post_init__
        rec["transformer"] = {"ok": True, "init_after": callable(m.init_method), "num_layers": m.num_layers,
                              "pattern": m.hybrid_layer_pattern, "sequence_parallel": m.sequence_parallel,
                              "expert_tensor_parallel_size": m.expert_tensor_parallel_size}
    except Exception as exc:
        rec["transformer"] = {"ok": False, "error": type(exc).__name__, "message": str(exc)[:2000]}
    for section in ("optimizer", "ddp"):
        try:
            obj = getattr(c, section)  # Megatron-Core OptimizerConfig / DistributedDataParallelConfig __post_init__:
            (getattr(obj, "finalize", None) or obj.__post_init__)()  # deferred, or re-run as validate() does
            rec[section] = {"ok": True}
        except Exception as exc:
            rec[section] = {"ok": False, "error": type(exc).__name__, "message": str(exc)[:2000]}
    o, p = c.optimizer, c.mixed_precision
    rec["offload_args"] = {
        "optimizer_cpu_offload": bool(o.optimizer_cpu_offload),
        "use_precision_aware_optimizer": bool(o.use_precision_aware_optimizer),
        "optimizer": o.optimizer, "use_distributed_optimizer": bool(o.use_distributed_optimizer),
        "fp8_param_gather": bool(getattr(p, "fp8_param_gather", False)),
        "fp8_recipe": getattr(p, "fp8_recipe", None), "fp8": getattr(p, "fp8", None),
    }

# Megatron-LM's argument check, on its own parse_args() namespace with each config's optimizer/precision values
os.environ["WORLD_SIZE"], os.environ["RANK"] = "8", "0"
from megatron.training.arguments import parse_args, validate_args
for cid, rec in out.items():
    if "offload_args" not in rec:
        continue
    sys.argv = ["pretrain", "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4",
                "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "1",
                "--global-batch-size", "16", "--train-iters", "10", "--lr", "1e-4", "--bf16"]
    args = parse_args()
    for key, value in rec["offload_args"].items():
        setattr(args, key, value)
    try:
        validate_args(args)
        rec["validate_args"] = {"ok": True}
    except AssertionError as exc:
        rec["validate_args"] = {"ok": False, "message": str(exc)[:2000]}
write_result(out)
'''


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("mcore-contract")
    files = inputs(root)
    out = {f"{stage}-{name}": compile_shipped(stage, name, root, files) for stage, name in SHIPPED}
    for cid, (stage, name, extra) in VARIANTS.items():
        out[cid] = compile_shipped(stage, name, root / cid, files, extra)
    for cid, case in out.items():
        case["stage"] = cid.split("-")[0]
        case["work"] = str(root / "work" / cid)
    return out


@pytest.fixture(scope="module")
def results(upstream, shipped) -> dict[str, Any]:
    cases = {cid: {k: case[k] for k in ("cfg", "stage", "world", "work")} for cid, case in shipped.items()}
    return upstream.run(SCRIPT, {"cases": cases, "te_only": TE_ONLY, "te_only_fp4": TE_ONLY_FP4}, timeout=900)


def _rec(results: dict, cid: str) -> dict:
    rec = results[cid]
    assert "build_error" not in rec, rec["build_error"]
    return rec


IDS = [f"{s}-{n}" for s, n in SHIPPED]
OFFLOAD_MARK = "optimizer cpu offload"


@pytest.mark.parametrize("cid", IDS)
def test_transformer_config_post_init_accepts_every_shipped_config(results, shipped, cid):
    """Megatron-Core's ``TransformerConfig.__post_init__`` (through the provider's ``finalize()``) accepts the model
    of every config our dry-run accepts, and ran to its end (it set ``init_method``)."""
    from nemotron.config import catalogue

    assert shipped[cid]["errors"] == []
    rec = _rec(results, cid)
    assert rec["transformer"]["ok"], rec["transformer"]
    assert rec["init_before"] is False and rec["transformer"]["init_after"] is True
    assert rec["transformer"]["num_layers"] == catalogue.get(shipped[cid]["cfg"]["model"]["name"]).num_layers
    model = shipped[cid]["cfg"]["model"]
    assert rec["transformer"]["sequence_parallel"] is bool(model["sequence_parallel"]
                                                           and model["tensor_model_parallel_size"] > 1)
    assert rec["optimizer"]["ok"], rec["optimizer"]
    assert rec["ddp"]["ok"], rec["ddp"]


def test_tp3_is_refused_by_megatron_core_and_by_our_dry_run(results, shipped):
    """Parity on a broken layout: TP=3 for the slice."""
    rec = _rec(results, "pretrain-tiny-tp3")
    assert rec["transformer"]["ok"] is False and rec["transformer"]["error"] == "ValueError"
    assert "must be a multiple of tensor_model_parallel_size (3)" in rec["transformer"]["message"]
    assert ("tp-model", "model.tensor_model_parallel_size") in {(r, k) for r, k, _ in shipped["pretrain-tiny-tp3"]["errors"]}


@pytest.mark.parametrize("cid", IDS)
def test_megatron_lm_accepts_the_optimizer_of_every_shipped_config(results, cid):
    """Issue 13, defect 10a: Megatron-LM's ``validate_args`` accepts each shipped config's optimizer offload and
    precision-aware settings (``tiny`` offloads the optimizer, and now with the precision-aware optimizer)."""
    rec = _rec(results, cid)
    assert rec["validate_args"]["ok"], rec["validate_args"]


@pytest.mark.parametrize("cid", ["pretrain-tiny-no-precision-aware", "pretrain-tiny-mxfp8"])
def test_optimizer_offload_parity(results, shipped, cid):
    """The same rule refused by both: offload without the precision-aware optimizer, and offload with an FP8 preset
    that gathers FP8 parameters with a non-delayed recipe (``bf16_with_mxfp8_mixed``)."""
    rec = _rec(results, cid)
    assert rec["offload_args"]["optimizer_cpu_offload"] is True
    assert rec["validate_args"]["ok"] is False and OFFLOAD_MARK in rec["validate_args"]["message"].lower()
    assert "optimizer-offload" in {rule for rule, _, _ in shipped[cid]["errors"]}
