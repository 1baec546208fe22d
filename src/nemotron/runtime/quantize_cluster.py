"""``backend: megatron-bridge`` of ``nemotron ultra3 quantize``: Model Optimizer PTQ of the Megatron-Core
model under torchrun, inside the NeMo container. NOT RUN ANYWHERE YET (it needs GPUs, Megatron-Bridge
and Transformer Engine); the checks before it and the config translation it uses
(:func:`nemotron.runtime.quant_config.cluster_plan`) are tested here.

Order: :func:`precheck` first — the config translates (layout fills the world, recipe exists, source
set), the torchrun world matches, this node has the GPUs torchrun was told about, the frameworks import,
nvidia-modelopt is 0.47 or later (the recipes' format; the pinned ``nemo`` image has 0.44.0rc5), the
checkpoint to quantize exists — each failure one line, exit 1, before anything heavy. Then
:func:`run`, following Megatron-Bridge's published PTQ example (examples/quantization/quantize.py):
``AutoBridge.from_hf_pretrained`` → provider with the calibration layout (``model.*``), Model Optimizer's
Mamba layer spec, ``moe_permute_fusion`` off → ``mtq.quantize`` with the recipe's config, calibrating on
``quantization.calib_size`` texts (``megatron_generate(osl=1)`` per text, as the example does) → the
quantized Megatron checkpoint in ``quantization.output_dir`` → a short fake-quantized generation
(logged) → ``export_mcore_gpt_to_hf`` (dtype passed) into ``export.output_dir``, then the 0.47 layer-name
repair. This version exports from the calibration layout; the ``export.*`` layout (Model Optimizer's
launcher re-loads at PP12 for it) is validated and shown by ``--dry-run`` but not applied, and the dry-run
says so. The in-job generation is always the fake-quantized one; ``generate.kernels: nvfp4`` (real NVFP4
GEMMs through vLLM on Blackwell, the launcher's task_2) is not run by this job: it prints the command.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from nemotron.runtime.quant_config import QuantConfigError, cluster_plan, repair_export

TITLE = "ultra3 quantize"


#: The recipes are written in Model Optimizer 0.47's list form of ``quant_cfg`` (``quantizer_name`` entries);
#: the ``nemo`` image of stages/images.toml pins nvidia-modelopt 0.44.0rc5, which predates it.
MIN_MODELOPT = (0, 47)


def precheck(cfg: dict[str, Any], env: dict[str, str], gpus_visible: int | None,
             importable: Any = None, modelopt_version: str | None = None) -> dict[str, Any]:
    """Everything the job checks before loading a framework (pure: ``env`` is the environment,
    ``gpus_visible`` the CUDA device count, ``importable(module) -> bool``, ``modelopt_version`` the
    installed nvidia-modelopt). Returns the plan.

    Raises:
        QuantConfigError: one line naming the problem.
    """
    importable = importable or (lambda m: importlib.util.find_spec(m) is not None)
    if "WORLD_SIZE" not in env:
        raise QuantConfigError("WORLD_SIZE is not set: the megatron-bridge backend runs under torchrun "
                               "(submit it with a profile: --run PROFILE)")
    world = int(env["WORLD_SIZE"])
    local = int(env.get("LOCAL_WORLD_SIZE", world))
    plan = cluster_plan(cfg, world)
    if gpus_visible is not None and gpus_visible < local:
        raise QuantConfigError(f"torchrun starts {local} processes on this node but {gpus_visible} GPU(s) are "
                               "visible (CUDA_VISIBLE_DEVICES / the profile's gpus_per_node)")
    for module, why in (("megatron.bridge", "AutoBridge and the Nemotron-H providers"),
                        ("modelopt.torch.quantization", "nvidia-modelopt")):
        if not importable(module):
            raise QuantConfigError(f"{module} is not importable ({why}): run in the NeMo container (stages/images.toml)")
    if modelopt_version is not None:
        nums = tuple(int(p) for p in modelopt_version.split(".")[:2] if p.isdigit())
        if nums < MIN_MODELOPT:
            raise QuantConfigError(f"nvidia-modelopt {modelopt_version} is installed; the recipes use the quant_cfg "
                                   "list form of 0.47 (stages/ultra3/quantize/recipes): install "
                                   "nvidia-modelopt==0.47.* in the image")
    source = plan["source"]
    if source.startswith(("/", "./", "~")) and not Path(os.path.expanduser(source)).exists():
        raise QuantConfigError(f"quantization.source={source!r}: no such folder on this node")
    return plan


def main(cfg: dict[str, Any]) -> int:
    """Entry (``stages/ultra3/quantize/run.py``, ``backend: megatron-bridge``); returns the exit code."""
    try:
        import torch

        gpus = torch.cuda.device_count()
    except ImportError:
        gpus = 0
    from importlib.metadata import PackageNotFoundError, version

    try:
        modelopt_version = version("nvidia-modelopt")
    except PackageNotFoundError:
        modelopt_version = None
    try:
        plan = precheck(cfg, dict(os.environ), gpus, modelopt_version=modelopt_version)
    except QuantConfigError as exc:
        print(f"{TITLE}: {exc}", file=sys.stderr)
        return 1
    return run(plan)


def run(plan: dict[str, Any]) -> int:  # pragma: no cover - needs GPUs and the NeMo container; not run yet
    """Calibrate, save, generate, export (see the module docstring). Not run anywhere yet."""
    import modelopt.torch.quantization as mtq
    import torch
    from megatron.bridge import AutoBridge
    from megatron.bridge.models.mamba.mamba_provider import modelopt_mamba_stack_spec
    from megatron.core.utils import unwrap_model
    from modelopt.torch.export import export_mcore_gpt_to_hf
    from modelopt.torch.utils.plugins.megatron_generate import megatron_generate

    lay = plan["calibration_layout"]
    bridge = AutoBridge.from_hf_pretrained(plan["source"])
    provider = bridge.to_megatron_provider(load_weights=True)
    for key, value in lay.items():
        setattr(provider, key, value)
    provider.pipeline_dtype = torch.bfloat16
    provider.moe_permute_fusion = False
    provider.mamba_stack_spec = modelopt_mamba_stack_spec
    provider.finalize()
    provider.initialize_model_parallel(seed=0)
    model = provider.provide_distributed_model(wrap_with_ddp=False)
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
    export_mcore_gpt_to_hf(inner, plan["source"], dtype=getattr(torch, plan["export_dtype"]),
                           export_dir=plan["export_dir"])
    if rank0:
        repaired = repair_export(plan["export_dir"])
        print(f"[quantize] exported {plan['export_dir']} (recipe {plan['recipe']}; layer names repaired: {repaired})",
              flush=True)
        if gen["enabled"] and gen["kernels"] == "nvfp4":
            print(f"[quantize] generation with real NVFP4 GEMMs is not part of this job (it needs Blackwell GPUs and "
                  f"vLLM); serve the export there: vllm serve {plan['export_dir']} --quantization modelopt_fp4 "
                  f"--tensor-parallel-size {gen.get('tensor_parallel_size') or 1}", flush=True)
        from nemotron.artifacts import write_outputs

        write_outputs({"quantized-checkpoint": {"path": plan["export_dir"], "recipe": plan["recipe"]}})
    return 0


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


__all__ = ["calibration_texts", "main", "precheck", "run"]
