"""``backend: megatron-bridge`` of ``nemotron ultra3 quantize``: Model Optimizer PTQ of the Megatron-Core
model under torchrun, inside the NeMo container.

Where it stands: ``quantize -c tiny`` ran on one H100 (2026-12-06, docs/gpu_run.md) three times, each stopping at
a new place, each fixed here: Model Optimizer's spec without an MTP block, on the SFT export (:func:`modelopt_stack_spec`
adds a local one; not rerun with MTP on a GPU), then, on a fresh ``small`` without MTP (the model built, its 201
weights loaded, Model Optimizer inserted 489 quantizers), calibration's ``megatron_generate`` on shared-expert overlap with latent MoE (turned off), then
calibration's attention: Transformer Engine found no backend under the Mamba provider's default ``flash`` (now
``fused``). That last fix has NOT run on a GPU yet, so calibration, the save, the generation and the export have
not either. On the CPU (tests/contract/test_quantize_model.py, upstream's code at our pins): the provider as
:func:`calibration_provider` builds it, the model as :func:`calibration_model` builds it from an HF folder (every
weight, MTP included, equal to the file's), the three fixes, and Model Optimizer's quantizer insertion. That test
also found that Megatron-Bridge 4588417's NemotronH mappings lack the local names of the MTP block's inner layers,
so its HF load stops there (:func:`modelopt_mtp_mappings` adds them) — although the GPU run reported every weight
loaded: the next GPU run should show which holds (the added mappings change nothing where upstream has them).
The checks before the job and the config translation it uses
(:func:`nemotron.runtime.quantization.quant_config.cluster_plan`) are tested in tests/runtime/test_quantize.py.

Order: :func:`precheck` first — the config translates (layout fills the world, recipe exists, source
set), the torchrun world and this node's GPUs match ``run.env``, the frameworks import, megatron-bridge /
megatron-core are the ``[nemo]`` pins and nvidia-modelopt is 0.47 or later (the recipes' format; the
``nemo`` image installs 0.47.0 over the Megatron-Bridge branch's 0.44.0rc5), the checkpoint to quantize
exists — every problem one line, exit 1, before anything heavy (the checks it shares with the
Megatron-Bridge entry are :mod:`nemotron.runtime.common.prestart`). Then :func:`run`, following Megatron-Bridge's
published PTQ example (examples/quantization/quantize.py): ``AutoBridge.from_hf_pretrained`` → provider
with the calibration layout (``model.*``), Model Optimizer's Mamba layer spec, ``moe_permute_fusion`` off
(:func:`calibration_provider`) → the model with the HF weights (:func:`calibration_model`) → ``mtq.quantize``
with the recipe's config, calibrating on ``quantization.calib_size`` texts (``megatron_generate(osl=1)`` per text,
as the example does) → the quantized Megatron checkpoint in
``quantization.output_dir`` → a short fake-quantized generation (logged) → ``export_mcore_gpt_to_hf``
(dtype and the model's FP32 ``moe_router_dtype`` passed, :func:`export_options`, as Megatron-Bridge's
examples/quantization/export.py does) into ``export.output_dir``, then the 0.47 layer-name repair. This
version exports from the calibration layout; the ``export.*`` layout (Model Optimizer's launcher re-loads
at PP12 for it) is validated and shown by ``--dry-run`` but not applied, and the dry-run says so. The
in-job generation is always the fake-quantized one; ``generate.kernels: nvfp4`` (real NVFP4 GEMMs through
vLLM on Blackwell, the launcher's task_2) is not run by this job: it prints the command.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nemotron.runtime.common import prestart
from nemotron.runtime.quantization.quant_config import QuantConfigError, cluster_plan, repair_export

TITLE = "ultra3 quantize"


#: The recipes are written in Model Optimizer 0.47's list form of ``quant_cfg`` (``quantizer_name`` entries);
#: Megatron-Bridge's Ultra branch pins nvidia-modelopt 0.44.0rc5, which predates it: the ``nemo`` image
#: (stages/docker/nemo.Dockerfile, stages/images.toml ``[nemo].frameworks.modelopt``) installs 0.47.0 over it.
MIN_MODELOPT = (0, 47)

#: What the job imports, and why (the NeMo container, ``stages/images.toml`` ``[nemo]``).
MODULES = {"megatron.bridge": "AutoBridge and the Nemotron-H providers",
           "modelopt.torch.quantization": "nvidia-modelopt"}


def precheck(cfg: dict[str, Any], *, importable: Any = None, gpus: int | None = None,
             installed: dict[str, str | None] | None = None, env: dict[str, str] | None = None) -> list[str]:
    """Every reason the quantize job cannot start here, one line each (empty: ready), before any framework
    is loaded. The checks shared with the Megatron-Bridge entry come from :mod:`nemotron.runtime.common.prestart`:
    torchrun's world against ``run.env.nodes`` x ``run.env.gpus_per_node`` and the visible GPUs, the
    modules importable, megatron-bridge / megatron-core the ``[nemo]`` pins
    (:func:`nemotron.runtime.megatron.megatron_bridge.pinned_framework_problems`: warnings, not refusals, under
    ``NEMOTRON_SKIP_FRAMEWORK_CHECK=1``); this stage's own: the config translates
    for the world (:func:`nemotron.runtime.quantization.quant_config.cluster_plan`), nvidia-modelopt is
    :data:`MIN_MODELOPT` or later, a local ``quantization.source`` exists.

    ``importable(module)``, ``gpus`` (GPUs visible on this node), ``installed`` (``{framework: version}``,
    keys of :data:`nemotron.runtime.megatron.megatron_bridge.FRAMEWORKS` and ``modelopt``) and ``env`` default to
    the real ones; tests pass their own.
    """
    from nemotron.runtime.common.settings import get
    from nemotron.runtime.megatron import megatron_bridge as mb

    env = os.environ if env is None else env
    if not str(env.get("WORLD_SIZE", "")).isdigit():
        return ["WORLD_SIZE is not set: the megatron-bridge backend runs under torchrun "
                "(submit it with a profile: --run PROFILE)"]
    problems = prestart.gpu_problems(get(cfg, "run.env.nodes", 1), get(cfg, "run.env.gpus_per_node"), env, gpus)
    try:
        source = cluster_plan(cfg, int(env["WORLD_SIZE"]))["source"]
    except QuantConfigError as exc:
        problems.append(str(exc))
    else:
        if source.startswith(("/", "./", "~")) and not Path(os.path.expanduser(source)).exists():
            problems.append(f"quantization.source={source!r}: no such folder on this node")
    container = prestart.missing_modules(MODULES, "nemo", "NeMo", importable)  # said last: a log's tail shows it
    if not container:
        if installed is None:
            installed = prestart.installed_versions({**mb.FRAMEWORKS, "modelopt": "nvidia-modelopt"})
        container = mb.pinned_framework_problems({k: installed.get(k) for k in mb.FRAMEWORKS}, env, TITLE)
        too_old = prestart.minimum_version_problem(
            "nvidia-modelopt", installed.get("modelopt"), MIN_MODELOPT,
            "the recipes use the quant_cfg list form of 0.47 (stages/ultra3/quantize/recipes)")
        container += [too_old] if too_old else []
    return problems + container


def main(cfg: dict[str, Any]) -> int:
    """Entry (``stages/ultra3/quantize/run.py``, ``backend: megatron-bridge``); returns the exit code."""
    problems = precheck(cfg)
    if problems:
        return prestart.refuse(TITLE, problems)
    return run(cluster_plan(cfg, int(os.environ["WORLD_SIZE"])))


def run(plan: dict[str, Any]) -> int:  # pragma: no cover - needs GPUs and the NeMo container
    """Calibrate, save, generate, export (see the module docstring: on a GPU it has reached calibration's
    attention, fixed and not yet rerun)."""
    import modelopt.torch.quantization as mtq
    import torch
    from megatron.bridge import AutoBridge
    from megatron.core.utils import unwrap_model
    from modelopt.torch.export import export_mcore_gpt_to_hf
    from modelopt.torch.utils.plugins.megatron_generate import megatron_generate

    bridge = AutoBridge.from_hf_pretrained(plan["source"])
    provider = calibration_provider(bridge, plan)
    provider.initialize_model_parallel(seed=0)
    model = calibration_model(provider)
    inner = unwrap_model(model)[0]
    rank0 = torch.distributed.get_rank() == 0
    tok = bridge.hf_pretrained.tokenizer
    texts = calibration_texts(plan)

    def forward_loop(m: Any) -> None:
        m.eval()
        for text in texts:
            ids = tok(text, return_tensors="pt").input_ids[:, : plan["seq_length"]].cuda()
            megatron_generate(m, ids, osl=1)

    mtq.quantize(inner, plan["modelopt_config"], forward_loop)
    if plan["megatron_output_dir"]:
        bridge.save_megatron_model(model, plan["megatron_output_dir"])
    gen = plan["generate"]
    if gen["enabled"]:  # the sanity check runs with simulated quantization on any GPU, whatever generate.kernels
        for prompt in gen["prompts"]:
            ids = tok(prompt, return_tensors="pt").input_ids.cuda()
            out = megatron_generate(inner, ids, osl=gen["max_new_tokens"], enable_kv_cache=False)
            if rank0:
                print(f"[quantize] generate {prompt!r}: {tok.batch_decode(out)}", flush=True)
    export_mcore_gpt_to_hf(inner, plan["source"], **export_options(plan, inner))
    if rank0:
        repaired = repair_export(plan["export_dir"])
        print(f"[quantize] exported {plan['export_dir']} (recipe {plan['recipe']}; layer names repaired: {repaired})",
              flush=True)
        if gen["enabled"] and gen["kernels"] == "nvfp4":
            print(f"[quantize] generation with real NVFP4 GEMMs is not part of this job (it needs Blackwell GPUs and "
                  f"vLLM); serve the export there: vllm serve {plan['export_dir']} --quantization modelopt_fp4 "
                  f"--tensor-parallel-size {gen.get('tensor_parallel_size') or 1}", flush=True)
        from nemotron.config.artifacts import write_outputs

        write_outputs({"quantized-checkpoint": {"path": plan["export_dir"], "recipe": plan["recipe"]}})
    return 0


def calibration_provider(bridge: Any, plan: dict[str, Any]) -> Any:
    """The Megatron-Bridge provider :func:`run` calibrates, finalized, weights to be loaded from the HF source.

    ``bridge``: ``AutoBridge.from_hf_pretrained(plan["source"])``; ``plan``: :func:`cluster_plan`'s (its
    ``calibration_layout``, ``model.*`` parallel sizes, is set on the provider). Returns the
    ``MambaModelProvider`` after ``finalize()`` (which raises ``ValueError`` / ``AssertionError`` from Megatron-Core's
    config checks); the caller initializes model parallelism and builds the model with :func:`calibration_model`.
    Besides the layout: BF16 pipeline dtype and MoE permute fusion off (as Megatron-Bridge's PTQ example), the Model
    Optimizer spec with a local MTP block (:func:`modelopt_stack_spec`), and three switches each found by a GPU run
    (docs/gpu_run.md; said below). Tested on the CPU by tests/contract/test_quantize_model.py.
    """
    import torch
    from megatron.core.transformer.enums import AttnBackend

    provider = bridge.to_megatron_provider(load_weights=True)
    lay = plan["calibration_layout"]
    for key, value in lay.items():
        setattr(provider, key, value)
    provider.pipeline_dtype = torch.bfloat16
    provider.moe_permute_fusion = False
    # calibration only runs forward passes, so the fused weight-gradient accumulation (APEX's
    # fused_weight_gradient_mlp_cuda) is never used; Model Optimizer's spec builds Megatron-Core's own
    # ColumnParallelLinear, which refuses the fusion where APEX is absent (found on the first GPU run, docs/gpu_run.md)
    provider.gradient_accumulation_fusion = False
    # Megatron-Core's inference path (megatron_generate) refuses shared-expert overlap with MoE latent projections
    # unless the NVLS dispatcher is used (second GPU run); the overlap only hides communication, so it is turned off
    provider.moe_shared_expert_overlap = False
    # the Mamba provider defaults to AttnBackend.flash, which needs the flash-attn package (TE then turns its fused
    # and unfused backends off: "No dot product attention backend is available", third GPU run); the training
    # recipe trains with cuDNN's fused attention, so calibration runs with the same
    provider.attention_backend = AttnBackend.fused
    provider.mamba_stack_spec = modelopt_stack_spec
    provider.finalize()
    return provider


def calibration_model(provider: Any, **kwargs: Any) -> list[Any]:
    """The Megatron model of :func:`calibration_provider`'s ``provider`` with the HF weights loaded: Megatron-Bridge's
    ``provide_distributed_model(wrap_with_ddp=False, **kwargs)`` (the weights load in its pre-wrap hook) inside
    :func:`modelopt_mtp_mappings`. Model parallelism must be initialized. Returns the list of model chunks (one per
    virtual pipeline stage). ``kwargs``: e.g. ``use_cpu_initialization=True`` (the CPU contract test)."""
    with modelopt_mtp_mappings():
        return provider.provide_distributed_model(wrap_with_ddp=False, **kwargs)


def modelopt_stack_spec(config: Any) -> Any:
    """Model Optimizer's Mamba stack spec (Megatron-Bridge's ``modelopt_mamba_stack_spec``: Megatron-Core's local
    layers, where Model Optimizer can insert its quantizers) with a multi-token-prediction block of the same local
    kind when the model has one.

    ``config``: the Megatron-Bridge provider (``mtp_num_layers`` > 0 means MTP). Returns a ``ModuleSpec`` of
    ``HybridStack``. Why: Megatron-Core's local hybrid spec (``post_training/modelopt/hybrid/model_specs.py``)
    has no ``mtp_block_spec``, and ``HybridModel`` asserts one whenever the layer pattern has an MTP part
    ("MTP pattern specified but mtp_block_spec is None", the first GPU run of ``quantize -c tiny``, 2026-12-06:
    the tiny model and Ultra both carry MTP). The block mirrors Megatron-Core's TE one
    (``hybrid_layer_specs._hybrid_mtp_block_spec``: two input norms, the ``eh_proj`` projection, a final norm;
    its inner layers come from the stack's own layer specs) with ``Norm`` and ``ColumnParallelLinear`` in place
    of the TE classes, so the MTP weights load, are calibrated like the rest and reach the export.
    """
    import dataclasses

    from megatron.bridge.models.mamba.mamba_provider import modelopt_mamba_stack_spec
    from megatron.core.post_training.modelopt.layers import Norm
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from megatron.core.transformer.multi_token_prediction import (
        MultiTokenPredictionBlock,
        MultiTokenPredictionBlockSubmodules,
        MultiTokenPredictionLayer,
        MultiTokenPredictionLayerSubmodules,
    )
    from megatron.core.transformer.spec_utils import ModuleSpec

    spec = modelopt_mamba_stack_spec(config)
    if not getattr(config, "mtp_num_layers", None) or spec.submodules.mtp_block_spec is not None:
        return spec
    layer = ModuleSpec(module=MultiTokenPredictionLayer,
                       submodules=MultiTokenPredictionLayerSubmodules(
                           enorm=Norm, hnorm=Norm, eh_proj=ColumnParallelLinear, mtp_model_layer=None,
                           layer_norm=Norm))
    mtp = ModuleSpec(module=MultiTokenPredictionBlock,
                     submodules=MultiTokenPredictionBlockSubmodules(layer_specs=[layer]))
    return dataclasses.replace(spec, submodules=dataclasses.replace(spec.submodules, mtp_block_spec=mtp))


#: The MTP block's parameter names under Model Optimizer's local spec that Megatron-Bridge 4588417's NemotronH
#: mapping registry lacks, and the flattened HF names of their counterparts (``mtp.layers.<block * depth + inner>``):
#: upstream maps these local names in the main decoder (``decoder.layers.*.input_layernorm.weight``,
#: ``...mlp.experts.local_experts.*.linear_fc*.weight``) but inside the MTP block only the TE spec's fused names
#: (``self_attention.linear_qkv.layer_norm_weight``, TEGroupedMLP's ``experts.linear_fc*.weight<i>``).
MODELOPT_MTP_MAPPINGS = {
    "mtp.layers.*.mtp_model_layer.layers.*.input_layernorm.weight": "mtp.layers.*.norm.weight",
    "mtp.layers.*.mtp_model_layer.layers.*.mlp.experts.local_experts.*.linear_fc1.weight":
        "mtp.layers.*.mixer.experts.*.up_proj.weight",
    "mtp.layers.*.mtp_model_layer.layers.*.mlp.experts.local_experts.*.linear_fc2.weight":
        "mtp.layers.*.mixer.experts.*.down_proj.weight",
}


@contextlib.contextmanager
def modelopt_mtp_mappings() -> Iterator[None]:
    """Inside the block, Megatron-Bridge's NemotronH bridge also maps :data:`MODELOPT_MTP_MAPPINGS`, so the HF weights
    load into the MTP block that :func:`modelopt_stack_spec` builds.

    Why: the block's inner layers are the stack's own local layers (a separate ``input_layernorm`` of the attention
    layer, ``SequentialMLP`` experts), whose names upstream maps only outside the MTP block. Without them
    ``build_conversion_tasks`` warns "No mapping found for megatron_param: mtp.layers.0.mtp_model_layer.layers.0.
    input_layernorm.weight", leaves that task ``None``, and ``load_weights_hf_to_megatron`` stops on it with
    ``AttributeError: 'NoneType' object has no attribute 'megatron_module'`` (tests/contract/test_quantize_model.py,
    upstream's code on the CPU). The added mappings are upstream's own ``_MTPFlatteningMapping`` at the depth the
    registry is built with; everything else is upstream's registry."""
    from megatron.bridge.models.conversion.mapping_registry import MegatronMappingRegistry
    from megatron.bridge.models.nemotronh import nemotron_h_bridge as nhb

    upstream = nhb.NemotronHBridge.__dict__["mapping_registry"]

    def mapping_registry(self: Any) -> Any:
        reg = upstream(self)
        depth = int(getattr(self, "_mtp_layers_per_block", None) or 0)
        if depth <= 0:
            return reg
        return MegatronMappingRegistry(*reg.mappings, *(nhb._MTPFlatteningMapping(
            megatron_param=m, hf_param=h, mtp_layers_per_block=depth) for m, h in MODELOPT_MTP_MAPPINGS.items()))

    nhb.NemotronHBridge.mapping_registry = mapping_registry
    try:
        yield
    finally:
        nhb.NemotronHBridge.mapping_registry = upstream


def export_options(plan: dict[str, Any], model: Any) -> dict[str, Any]:
    """Keyword arguments of Model Optimizer's ``export_mcore_gpt_to_hf`` (``modelopt.torch.export``) after
    ``model`` (the unwrapped, quantized Megatron-Core model) and the HF source: the export dtype
    (``export.dtype``, a ``torch`` dtype), ``export.output_dir``, and the model config's ``moe_router_dtype``,
    as Megatron-Bridge's own ``examples/quantization/export.py`` passes it. The Nemotron-H bridge sets it to
    ``"fp32"`` (``models/nemotronh/nemotron_h_bridge.py``): without it Model Optimizer writes the MoE router in
    the export dtype (BF16), losing the FP32 router the model was trained and quantized with."""
    import torch

    return {"dtype": getattr(torch, plan["export_dtype"]), "export_dir": plan["export_dir"],
            "moe_router_dtype": getattr(getattr(model, "config", None), "moe_router_dtype", None)}


def calibration_texts(plan: dict[str, Any], text_field: str = "text") -> list[str]:
    """The first ``calib_size`` texts of ``quantization.calib_dataset`` (a JSONL / JSON / Parquet / text
    file, folder or glob), read with the data prep readers (:mod:`nemotron.data.sources`), records
    without the text field skipped. Without a dataset the job stops: the cluster has no hub access by
    default, so Model Optimizer's default (a hub dataset) is not fetched implicitly."""
    from nemotron.data.sources import Piece, detect_format, expand, iter_records

    src = plan.get("calib_dataset")
    if not src:
        raise QuantConfigError("quantization.calib_dataset is not set: give calibration text (a JSONL/Parquet "
                               "file, folder or glob)")
    texts: list[str] = []
    for path in expand(str(src)):
        for _, text, _, _ in iter_records(Piece(path, detect_format(path)), text_field):
            if text:
                texts.append(text)
            if len(texts) >= plan["calib_size"]:
                return texts
    if not texts:
        raise QuantConfigError(f"quantization.calib_dataset={src!r}: no record with a {text_field!r} field")
    return texts


__all__ = ["MODELOPT_MTP_MAPPINGS", "calibration_model", "calibration_provider", "calibration_texts", "export_options",
           "main", "modelopt_mtp_mappings", "modelopt_stack_spec", "precheck", "run"]
