"""The per-GPU memory estimate's logits term follows the cross entropy Megatron-Core runs (issue 30, memory
calibration): Transformer Engine's fused cross entropy keeps the BF16 logits of each head (2 bytes an element),
the native fusion and the unfused path an FP32 tensor (4). The terms the caching allocator does not count are
listed apart, NCCL's only when the world is above one GPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from nemotron.config import catalogue
from nemotron.config.catalogue import padded_vocab
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.layout import memory
from nemotron.layout.views import megatron_view
from nemotron.validation.checks import setup_of

ROOT = Path(__file__).resolve().parents[2]
ONE_GPU = ["model.name=small", "model.seq_length=1024", "run.env.gpus_per_node=1", "model.tensor_model_parallel_size=1",
           "model.pipeline_model_parallel_size=1", "model.expert_model_parallel_size=1", "model.sequence_parallel=false",
           "train.global_batch_size=16", "train.micro_batch_size=4"]


def _estimate(extra: list[str]) -> memory.StageMemory:
    cfg = compile_config(get_stage("pretrain"), "tiny", ONE_GPU + extra, check_paths=False).config
    v = megatron_view(cfg)
    v.world = 1
    return memory.estimate(catalogue.get("small"), setup_of(v), 141.0).peak


def test_fused_te_cross_entropy_keeps_bf16_logits_per_head():
    """pretrain's config (Megatron-Bridge's Ultra recipe: cross_entropy_fusion_impl te) counts 2 bytes an element for
    the main head and each MTP depth; the native fusion counts 4."""
    spec = catalogue.get("small")
    te = _estimate([])
    heads = 1 + 2  # pretrain's model.mtp_num_layers: 2
    assert te.logits_gb * 1e9 == pytest.approx(heads * 1024 * 4 * padded_vocab(spec, 1) * 2)
    native = _estimate(["+model.cross_entropy_fusion_impl=native"])
    assert native.logits_gb == pytest.approx(2 * te.logits_gb)


def test_outside_terms_nccl_only_above_one_gpu():
    one = memory.estimate(catalogue.get("small"), memory.TrainSetup(world=1), 80.0).peak
    eight = memory.estimate(catalogue.get("small"), memory.TrainSetup(world=8, ep=8), 80.0).peak
    assert [n for n, _ in one.outside if "NCCL" in n] == []
    assert [g for n, g in eight.outside if "NCCL" in n] == [memory.NCCL_GB]
    assert one.total_gb == pytest.approx(one.allocated_gb * memory.FRAGMENTATION + memory.CONTEXT_GB)


def test_calibration_reproduces_the_documented_figures():
    """bench/estimate_calibration.py --memory: the first version's 13.2 GB for the measured run, and the logits term
    halved by the fused cross entropy (3.2 GB instead of 6.4)."""
    spec = importlib.util.spec_from_file_location("estimate_calibration", ROOT / "bench" / "estimate_calibration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m = mod.memory_comparison()
    assert round(m["before"]["total_gb"], 1) == 13.2
    assert m["after"]["logits_gb"] == pytest.approx(m["before"]["logits_gb"] / 2)
    rec = json.loads((ROOT / "bench" / "results" / "gpu_run_h200.json").read_text())
    assert m["measured"]["max_allocated_gb"] == pytest.approx(rec["peak_allocated_gib"] * 2**30 / 1e9)
