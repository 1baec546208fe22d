"""Memory and layout verdicts the dry run gives every stage alike (new-user pass 7): mopd-warmup's policy memory is
refused as rlvr's and mopd's is (rule memory-fit), mopd-warmup and eval get the node-shape check of the other GPU
stages, and a profile of 0 GPUs a node gets one line, not a node shape of 0 to set. Real shipped configs, compiled
as the CLI compiles them, through the validation API the CLI calls."""

from __future__ import annotations

import json

import pytest

from nemotron import validation
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.profiles.profile import from_table


def _prof(gpus: int, arch: str, mem: float, name: str):
    return from_table(name, {"executor": "slurm", "gpus_per_node": gpus, "gpu_arch": arch, "gpu_memory": mem})


H100, H200, GB200 = _prof(8, "hopper", 80.0, "h100"), _prof(8, "hopper", 141.0, "h200"), _prof(4, "blackwell", 186.0, "gb200")


def check(stage_name: str, config: str = "default", overrides: dict | None = None, profile=None):
    """prepare + validate + describe of the shipped ``-c config``; (problems, tables)."""
    stage = get_stage(stage_name)
    compiled = compile_config(stage, config, [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()],
                              check_paths=False)
    cfg = compiled.config
    validation.prepare(stage, cfg, compiled.user_keys, profile)
    return validation.validate(stage, cfg, profile), validation.describe(stage, cfg, profile)


def errors(problems):
    return [p for p in problems if p.severity == "error"]


def test_mopd_warmup_memory_over_the_margin_is_an_error_with_a_layout_that_fits():
    problems, tables = check("mopd-warmup", "default", profile=H100)
    mem = [p for p in errors(problems) if p.rule == "memory-fit"]
    assert len(mem) == 1, [p.render() for p in problems]
    p = mem[0]
    assert p.key == "policy.megatron_cfg.pipeline_model_parallel_size" and p.value == 1
    assert "does NOT fit" in p.message and "(policy training)" in p.message
    assert "policy.megatron_cfg.pipeline_model_parallel_size=2" in p.valid
    verdicts = [r[1] for t, _, rows in tables if "memory" in t for r in rows if r[0] == "verdict"]
    assert verdicts and "does NOT fit" in verdicts[0]


@pytest.mark.parametrize("config", ["default", "tiny"])
def test_mopd_warmup_shipped_configs_pass_the_memory_rules_on_h200(config):
    problems, _ = check("mopd-warmup", config, profile=H200)
    assert not [p for p in problems if p.rule in ("memory", "memory-fit", "node-shape")], \
        [p.render() for p in problems]


@pytest.mark.parametrize("stage_name,config,nodes", [("mopd-warmup", "tiny", 1), ("mopd-warmup", "default", 32),
                                                     ("eval", "tiny", 1), ("eval", "default", 4)])
def test_an_8_gpu_layout_on_4_gpu_nodes_is_refused(stage_name, config, nodes):
    problems, _ = check(stage_name, config, profile=GB200)
    shape = [p for p in errors(problems) if p.rule == "node-shape"]
    assert len(shape) == 1, [p.render() for p in problems]
    assert shape[0].key == "run.env.gpus_per_node" and shape[0].value == 8
    assert f"laid out for {nodes} node" in shape[0].message and "gb200 has 4 GPUs per node" in shape[0].message


def test_eval_on_4_gpu_nodes_with_the_shape_set_is_not_refused_for_it():
    problems, _ = check("eval", "default", {"run.env.gpus_per_node": 4, "run.env.nodes": 8}, profile=GB200)
    assert not [p for p in problems if p.rule == "node-shape"], [p.render() for p in problems]


@pytest.mark.parametrize("stage_name", ["rlvr", "mopd-warmup", "eval", "sft"])
def test_a_profile_of_0_gpus_a_node_gets_one_line(stage_name):
    problems, _ = check(stage_name, "tiny", profile=_prof(0, "hopper", 80.0, "zero"))
    lines = [p.render() for p in errors(problems) if p.key == "run.env.gpus_per_node"]
    assert len(lines) == 1, lines
    assert "declares 0 GPUs per node" in lines[0] and "valid: 0," not in lines[0]


# ------------------------------------------------------------------ quantize: every refusal at once, PTQ advice only
def test_quantize_on_h100_lists_the_memory_and_export_errors_beside_the_nvfp4_one():
    """quantize -c default on H100 said only the NVFP4 error; the calibration memory (178 %) came once that was fixed,
    and the export layout's 98 GB of BF16 weights per 80 GB GPU was a warning with no key to set."""
    problems, _ = check("quantize", "default", profile=H100)
    by_rule = {}
    for p in errors(problems):
        by_rule.setdefault(p.rule, []).append(p)
    assert {"nvfp4-blackwell", "memory-fit"} <= set(by_rule), [p.render() for p in problems]
    [nvfp4] = by_rule["nvfp4-blackwell"]
    assert nvfp4.valid.startswith("generate.kernels=fake_quant"), nvfp4.valid
    calib = [p for p in by_rule["memory-fit"] if p.key == "model.pipeline_model_parallel_size"]
    export = [p for p in by_rule["memory-fit"] if p.key == "export.pipeline_model_parallel_size"]
    assert len(calib) == 1 and len(export) == 1, [p.render() for p in by_rule["memory-fit"]]
    for p in calib + export:  # a forward-only job: no training advice
        assert "recompute" not in p.valid and "offload" not in p.valid, p.valid
    assert "model.pipeline_model_parallel_size=2" in calib[0].valid, calib[0].valid
    assert "98 GB of BF16 weights" in export[0].message, export[0].message
    assert export[0].valid.startswith("export.expert_model_parallel_size=2 with run.env.nodes=3 (24 GPUs)"), export[0].valid


def test_the_export_fix_fits_by_the_same_estimate():
    """Following the export error's own fix (with the calibration's, which needs 32 GPUs) leaves no export error."""
    over = {"model.pipeline_model_parallel_size": 2, "run.env.nodes": 4, "export.expert_model_parallel_size": 2,
            "generate.kernels": "fake_quant"}
    problems, _ = check("quantize", "default", over, profile=H100)
    assert not errors(problems) or all(p.rule == "input-exists" for p in errors(problems)), \
        [p.render() for p in errors(problems)]


def test_quantize_on_b200_keeps_its_export_layout():
    problems, _ = check("quantize", "default", profile=_prof(8, "blackwell", 180.0, "b200"))
    assert not [p for p in problems if p.rule in ("memory", "memory-fit")], [p.render() for p in problems]


# ------------------------------------------------------------------ within the margin: the table and the verdict agree
@pytest.mark.parametrize("stage_name,over,profile,key,fix", [
    ("pretrain", {"mixed_precision": "bf16_mixed"}, H100, "model.pipeline_model_parallel_size", "model."),
    ("quantize", {"generate.kernels": "fake_quant"}, H200, "model.pipeline_model_parallel_size",
     "model.pipeline_model_parallel_size=2"),
])
def test_a_borderline_estimate_is_called_so_with_a_concrete_fix(stage_name, over, profile, key, fix):
    problems, tables = check(stage_name, "default", over, profile=profile)
    verdicts = [r[1] for t, _, rows in tables if t.startswith("memory") for r in rows if r[0] == "verdict"]
    assert verdicts and verdicts[0].startswith("borderline: ") and "within the estimate's 15% margin" in verdicts[0]
    [warn] = [p for p in problems if p.rule == "memory"]
    assert warn.severity == "warning" and warn.key == key and "borderline" in warn.message
    assert "does NOT fit" not in warn.message and warn.valid.startswith(fix) and "=" in warn.valid.split(";")[0]
    assert not [p for p in errors(problems) if p.rule in ("memory", "memory-fit")]


def test_nvfp4_training_precision_on_hopper_names_the_value_to_use():
    problems, _ = check("pretrain", "default", profile=H200)
    [p] = [p for p in errors(problems) if p.rule == "nvfp4-blackwell"]
    assert p.key == "mixed_precision" and p.valid.startswith("mixed_precision=bf16_mixed"), p.valid


# ------------------------------------------------------------------ no plausible layout: say which GPU memory it needs
def test_sft_default_on_h100_is_told_the_gpu_memory_it_needs_not_pp_108():
    """sft -c default on H100 (123 GB of 80, full recompute already on) was offered PP 108 (one layer a stage) on
    18x the GPUs (55,296). An offered layout keeps >= 3 layers a stage and <= 2x the GPUs; past that the fix is
    the GPU memory the layout needs, and a GPU model that has it."""
    from nemotron.validation.checks import MAX_WORLD_FACTOR, MIN_LAYERS_PER_STAGE

    problems, _ = check("sft", "default", profile=H100)
    [p] = [p for p in errors(problems) if p.rule == "memory-fit"]
    assert "=108" not in p.valid and "18x" not in p.valid, p.valid
    assert p.valid.startswith("GPUs of >= 123 GB, as this layout stands: H200 (141 GB) does"), p.valid
    assert MIN_LAYERS_PER_STAGE >= 2 and MAX_WORLD_FACTOR == 2
    problems, _ = check("sft", "default", profile=H200)  # the GPU it names: the memory rules pass
    assert not [p for p in problems if p.rule in ("memory", "memory-fit")], [p.render() for p in problems]


def test_a_fix_within_the_bounds_is_still_offered():
    """mopd-warmup on H100: PP 2 (54 layers a stage) with 2x the GPUs is within the bounds and fits."""
    problems, _ = check("mopd-warmup", "default", profile=H100)
    [p] = [p for p in errors(problems) if p.rule == "memory-fit"]
    assert "policy.megatron_cfg.pipeline_model_parallel_size=2 with 2x the GPUs" in p.valid, p.valid


# ------------------------------------------------------------------ eval's engine: keys and values that fit
def test_eval_engine_too_small_for_any_pp_names_a_wider_engine_that_fits():
    """eval at TP1 PP1 EP1 on H100 (1121 GB a GPU) was told 'more GPU memory, or a smaller model' (no GPU has
    1.1 TB): no PP fits at TP1, so the fix is a wider engine (TP, PP, EP = TP) and the nodes it needs; following it
    validates."""
    vc = "generation.vllm_cfg"
    over = {f"{vc}.pipeline_parallel_size": 1, f"{vc}.tensor_parallel_size": 1, f"{vc}.expert_parallel_size": 1}
    problems, _ = check("eval", "default", over, profile=H100)
    [p] = [p for p in errors(problems) if p.rule == "serving-memory"]
    assert "more GPU memory" not in p.valid and f"{vc}.tensor_parallel_size=" in p.valid, p.valid
    words = dict(w.split("=", 1) for w in p.valid.split(" (")[0].split())
    assert set(words) >= {f"{vc}.tensor_parallel_size", f"{vc}.pipeline_parallel_size", f"{vc}.expert_parallel_size",
                          "run.env.nodes"}, words
    fixed = {**over, **{k: int(v) if v.isdigit() else v == "true" for k, v in words.items()}}
    problems, _ = check("eval", "default", fixed, profile=H100)
    assert errors(problems) == [], [p.render() for p in errors(problems)]


def test_mopd_warmup_names_a_bad_model_name():
    problems, _ = check("mopd-warmup", "default", {"model.name": "ultra9"}, profile=H200)
    assert [p.key for p in errors(problems) if p.rule == "model-name"] == ["model.name"], [p.render() for p in problems]
