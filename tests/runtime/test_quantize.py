"""The quantize stage without Model Optimizer: recipes as data, the recipe choice, module kinds, the 0.47
export-name repair, the cluster backend's config translation and pre-checks, and the CLI refusing a
missing checkpoint at --dry-run and at submission. (NVFP4 deployment on a Hopper profile and both
published calibration layouts are covered in test_validation.py: `nvfp4-generation-on-hopper`,
`modelopt-ptq-tp1-pp1-ep16-b200`, `nemotron-guide-ptq-tp8-pp9-ep8-h100`; the NVFP4 case again below
through the CLI.)

The cluster backend itself (Megatron-Bridge + Model Optimizer under torchrun) cannot run here: no GPUs,
no NeMo container. Its pre-checks take the environment as arguments and are tested with stand-in values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nemotron.runtime.quantization import quant_config as qc
from quantize_support import compile_quantize

ROOT = Path(__file__).resolve().parents[2]


def test_both_recipes_load_name_their_source_and_cover_both_layouts():
    assert qc.recipe_names() == ["super-max-calib", "ultra"]
    ultra, sup = qc.load_recipe("ultra"), qc.load_recipe("super-max-calib")
    assert "NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16/ptq/nvfp4-4o6.yaml" in ultra.source
    assert "NVIDIA-Nemotron-3-Super-120B-A12B-BF16/ptq/nvfp4-max-calib.yaml" in sup.source
    assert ultra.algorithm == {"method": "mse", "fp8_scale_sweep": False, "start_multiplier": 1.0,
                               "stop_multiplier": 1.5, "step_size": 0.5}
    assert sup.algorithm == {"method": "max"}
    for r in (ultra, sup):
        names = [e["quantizer_name"] for e in r.quant_cfg]
        assert names[0] == "*" and r.quant_cfg[0]["enable"] is False  # deny-all first
        for hf, mc in (("*mixer.experts.*weight_quantizer", "*mlp.experts*weight_quantizer"),
                       ("*mixer.shared_experts.*input_quantizer", "*mlp.shared_experts*input_quantizer")):
            assert hf in names and mc in names  # Hugging Face and Megatron-Core names
        assert qc.expected_map(r)["routed_experts"] == {"weights": "nvfp4", "inputs": "nvfp4"}
        assert qc.expected_map(r)["attention_proj"] == {"weights": "bf16", "inputs": "bf16"}
    w = next(e for e in ultra.quant_cfg if e["quantizer_name"] == "*mixer.experts.*weight_quantizer")["cfg"]
    assert w["block_sizes"]["four_over_six"] is True and w["block_sizes"]["type"] == "static"
    w = next(e for e in sup.quant_cfg if e["quantizer_name"] == "*mixer.experts.*weight_quantizer")["cfg"]
    assert w["block_sizes"]["type"] == "dynamic" and "four_over_six" not in w["block_sizes"]


def test_recipe_rejects_a_pattern_that_would_enable_output_quantizers(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: x\nexpect: {}\nalgorithm: {method: max}\n"
                   "quant_cfg:\n  - {quantizer_name: '*mixer.experts*_quantizer', enable: true}\n")
    with pytest.raises(qc.QuantConfigError, match="output quantizers"):
        qc.load_recipe(str(bad))
    with pytest.raises(qc.QuantConfigError, match="no such recipe; did you mean 'ultra'\\?; valid: super-max-calib, ultra"):
        qc.load_recipe("ultraa")
    with pytest.raises(qc.QuantConfigError, match="no such recipe; valid: super-max-calib, ultra"):
        qc.load_recipe("zzz")  # nothing close: no guess


def test_recipe_choice_default_and_override(tmp_path):
    base = [f"quantization.source={tmp_path}", f"quantization.calib_dataset={tmp_path}/blend.json"]
    assert qc.read_settings(compile_quantize(base)).recipe == "ultra"
    s = qc.read_settings(compile_quantize([*base, "quantization.recipe=super-max-calib"]))
    assert s.recipe == "super-max-calib" and qc.load_recipe(s.recipe).algorithm["method"] == "max"
    plan = qc.cluster_plan(compile_quantize(["quantization.source=/ckpt", "quantization.recipe=super-max-calib"],
                                            "default"), 16)
    assert plan["recipe"] == "super-max-calib" and plan["modelopt_config"]["algorithm"] == {"method": "max"}


@pytest.mark.parametrize("name,kind", [
    ("model.layers.1.mixer.experts.up_proj_weight_quantizers.3", "routed_experts"),
    ("backbone.layers.1.mixer.experts.7.down_proj.weight", "routed_experts"),
    ("decoder.layers.4.mlp.experts.local_experts.0.linear_fc1", "routed_experts"),
    ("decoder.layers.4.mlp.experts.linear_fc2.weight_quantizer", "routed_experts"),
    ("backbone.layers.1.mixer.shared_experts.up_proj.weight", "shared_experts"),
    ("decoder.layers.4.mlp.shared_experts.linear_fc1", "shared_experts"),
    ("model.layers.0.mixer.in_proj", "mamba_in_out_proj"),
    ("decoder.layers.0.mixer.out_proj.weight", "mamba_in_out_proj"),
    ("model.layers.3.mixer.k_bmm_quantizer", "kv_cache"),
    ("backbone.layers.3.mixer.v_proj.v_scale", "kv_cache"),
    ("model.layers.3.mixer.q_proj", "attention_proj"),
    ("decoder.layers.3.self_attention.linear_qkv", "attention_proj"),
    ("model.layers.1.mixer.fc1_latent_proj", "latent_proj"),
    ("model.layers.1.mixer.gate.weight", "router"),
    ("decoder.layers.4.mlp.router.weight", "router"),
    ("model.layers.0.mixer.conv1d", "mamba_conv1d"),
    ("mtp.layers.0.mtp_model_layer.mlp.experts.linear_fc1", "mtp"),
    ("backbone.embeddings.weight", "embeddings"),
    ("lm_head.weight", "output_head"),
    ("output_layer.weight", "output_head"),
    ("model.layers.0.norm.weight", "other"),
])
def test_module_kinds_of_both_layouts(name, kind):
    assert qc.module_kind(name) == kind


def test_repair_cuts_the_0_47_placeholder_from_every_layer_name(tmp_path):
    # the shape nvidia-modelopt 0.47 writes (seen in a real export on this machine)
    bad = "backbone.layers.0.mixer.in_proj.\x00backbone.pt_name_sentinel"
    hf_quant = {"producer": {"name": "modelopt", "version": "0.47.0"},
                "quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8",
                                 "quantized_layers": {bad: {"quant_algo": "FP8"},
                                                      "backbone.layers.1.mixer.experts.\x00backbone.pt_name_sentinel":
                                                          {"quant_algo": "NVFP4", "group_size": 16}}}}
    config = {"model_type": "nemotron_h", "quantization_config": {
        "config_groups": {"group_0": {"targets": [bad]}}, "quantized_layers": {bad: {"quant_algo": "FP8"}}}}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert qc.repair_export(tmp_path) == {"hf_quant_config.json": 2, "config.json": 2}
    layers = qc.quantized_layers(tmp_path)
    assert set(layers) == {"backbone.layers.0.mixer.in_proj", "backbone.layers.1.mixer.experts"}
    cfg = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert cfg["config_groups"]["group_0"]["targets"] == ["backbone.layers.0.mixer.in_proj"]
    before = (tmp_path / "config.json").read_text()
    assert qc.repair_export(tmp_path) == {"hf_quant_config.json": 0, "config.json": 0}  # idempotent
    assert (tmp_path / "config.json").read_text() == before


def test_cluster_plan_translates_both_published_layouts():
    mo = qc.cluster_plan(compile_quantize(["quantization.source=/ckpt"], "default"), 16)
    assert mo["calibration_layout"] == {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                                        "expert_model_parallel_size": 16, "expert_tensor_parallel_size": 1,
                                        "context_parallel_size": 1}
    assert mo["export_layout"]["pipeline_model_parallel_size"] == 12 and mo["data_parallel_size"] == 16
    assert mo["export_dtype"] == "bfloat16" and mo["recipe"] == "ultra"
    assert mo["modelopt_config"]["quant_cfg"][0] == {"quantizer_name": "*", "enable": False}
    guide = compile_quantize(["quantization.source=/ckpt", "run.env.nodes=9", "model.tensor_model_parallel_size=8",
                              "model.pipeline_model_parallel_size=9", "model.expert_model_parallel_size=8",
                              "train.global_batch_size=8"], "default")
    g = qc.cluster_plan(guide, 72)
    assert g["data_parallel_size"] == 1 and g["calibration_layout"]["tensor_model_parallel_size"] == 8
    with pytest.raises(qc.QuantConfigError, match="does not divide the 12 GPUs"):
        qc.cluster_plan(guide, 12)
    with pytest.raises(qc.QuantConfigError, match=r"quantization\.source"):
        qc.cluster_plan(compile_quantize([], "default"), 16)


def test_cluster_precheck_stops_before_anything_heavy():
    """The megatron-bridge entry's checks (nothing of Megatron-Bridge or Model Optimizer is imported: the
    importable modules, GPUs and installed versions are passed in, as on a node of the NeMo container)."""
    from nemotron.runtime.common.prestart import pinned_versions
    from nemotron.runtime.megatron.megatron_bridge import framework_problems
    from nemotron.runtime.quantization.quantize_cluster import precheck

    cfg = compile_quantize(["quantization.source=/definitely/not/here"], "default")  # 2 nodes x 8 GPUs
    pins = pinned_versions("nemo", ("megatron_bridge", "megatron_core"))
    assert framework_problems(pins) == []
    ok = {"importable": lambda m: True, "gpus": 8, "installed": {**pins, "modelopt": "0.47.0"},
          "env": {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}}
    assert precheck(cfg, **{**ok, "env": {}}) == ["WORLD_SIZE is not set: the megatron-bridge backend runs under "
                                                  "torchrun (submit it with a profile: --run PROFILE)"]
    assert precheck(cfg, **{**ok, "gpus": 4})[0] == ("run.env.gpus_per_node=8: this node shows 4 GPU(s) "
                                                    "(CUDA_VISIBLE_DEVICES=unset)")
    assert "torchrun started 8 processes; run.env.nodes x gpus_per_node = 2 x 8 = 16" in precheck(
        cfg, **{**ok, "env": {"WORLD_SIZE": "8"}})[0]
    lines = precheck(cfg, **{**ok, "importable": lambda m: m != "megatron.bridge"})
    assert lines[-1].startswith("this stage runs inside the NeMo container")  # last: what a log's tail shows
    assert "megatron.bridge is not importable here (AutoBridge" in lines[-1]
    old = precheck(cfg, **{**ok, "installed": {**pins, "modelopt": "0.44.0rc5"}})  # the Ultra branch's own pin
    assert old[-1].startswith("nvidia-modelopt 0.44.0rc5 is installed; the recipes use the quant_cfg list form")
    newer_mb = precheck(cfg, **{**ok, "installed": {**pins, "megatron_bridge": "0.6.0", "modelopt": "0.47.0"}})
    assert newer_mb[-1].startswith("megatron-bridge 0.6.0 is installed; the configs and the key list were checked")
    # a development stack on purpose (the one-GPU bench): the pins' mismatch is a warning, as in the training entry;
    # the Model Optimizer minimum still refuses
    dev = {**ok["env"], "NEMOTRON_SKIP_FRAMEWORK_CHECK": "1"}
    assert precheck(cfg, **{**ok, "env": dev, "installed": {**pins, "megatron_bridge": "0.6.0", "modelopt": "0.47.0"}}
                    ) == ["quantization.source='/definitely/not/here': no such folder on this node"]
    assert precheck(cfg, **{**ok, "env": dev, "installed": {**pins, "modelopt": "0.44.0rc5"}})[-1].startswith(
        "nvidia-modelopt 0.44.0rc5 is installed")
    assert precheck(cfg, **ok) == ["quantization.source='/definitely/not/here': no such folder on this node"]
    good = compile_quantize([f"quantization.source={ROOT}"], "default")
    assert precheck(good, **ok) == []
    assert precheck(good, **{**ok, "installed": {**pins, "modelopt": "0.47.1rc2"}}) == []


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEMOTRON_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "quantize", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_missing_checkpoint_flagged_by_dry_run_and_refused_at_submission(tmp_path):
    missing = tmp_path / "no-such-checkpoint"
    for args in (["-c", "local", f"quantization.calib_dataset={tmp_path}/blend.json"],
                 ["-c", "tiny", "--batch", "sample", "--env-file", str(ROOT / "tests/fixtures/env.toml")]):
        dry = _cli(*args, f"quantization.source={missing}", "--dry-run", home=tmp_path)
        assert dry.returncode == 2, dry.stderr
        line = next((ln for ln in dry.stdout.splitlines() if ln.startswith(f"error: quantization.source='{missing}'")),
                    "")
        assert "no such" in line and "(the checkpoint to quantize)" in line, dry.stdout  # local reader, input-exists
        real = _cli(*args, f"quantization.source={missing}", home=tmp_path)
        assert real.returncode == 2, real.stderr
        assert "found before anything was queued" in real.stderr
        assert "Traceback" not in real.stderr
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())


def test_nvfp4_deployment_flagged_on_a_hopper_profile(tmp_path):
    args = ["-c", "default", "quantization.source=/ckpt", "--dry-run", "--batch", "sample", "--env-file",
            str(ROOT / "tests/fixtures/env.toml")]
    hopper = _cli(*args, home=tmp_path)
    assert hopper.returncode == 2
    assert "generate.kernels='nvfp4'" in hopper.stdout and "blackwell" in hopper.stdout.lower()
    fake = _cli(*args, "generate.kernels=fake_quant", home=tmp_path)
    assert "generate.kernels" not in fake.stdout.split("problems")[-1]


def test_cluster_export_keeps_the_fp32_moe_router(tmp_path):
    """The cluster export passes the model config's `moe_router_dtype` to Model Optimizer's export, as
    Megatron-Bridge's examples/quantization/export.py does (the Nemotron-H bridge sets "fp32"; without it the
    router is written in the export dtype). The model here is a real Megatron-Core module with a real
    TransformerConfig (megatron-core 0.16 on CPU: the NeMo container's 0.18 cannot load here), and the options
    bind to the real signature of nvidia-modelopt 0.47's `export_mcore_gpt_to_hf`."""
    import inspect

    import torch

    pytest.importorskip("megatron.core", reason="needs megatron-core (the [test] extra)")
    pytest.importorskip("modelopt", reason="needs nvidia-modelopt (the [local] extra)")
    from megatron.core.transformer.module import MegatronModule
    from megatron.core.transformer.transformer_config import TransformerConfig
    from modelopt.torch.export import export_mcore_gpt_to_hf

    from nemotron.runtime.quantization.quantize_cluster import export_options

    config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, num_moe_experts=2,
                               moe_router_topk=2, moe_ffn_hidden_size=8, moe_router_dtype="fp32")
    plan = {"export_dtype": "bfloat16", "export_dir": str(tmp_path / "export")}
    options = export_options(plan, MegatronModule(config))
    assert options == {"dtype": torch.bfloat16, "export_dir": str(tmp_path / "export"), "moe_router_dtype": "fp32"}
    inspect.signature(export_mcore_gpt_to_hf).bind(MegatronModule(config), "/hf/source", **options)

