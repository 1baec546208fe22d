"""The eval stage's vLLM serving layout against the GPUs it runs on (issue 30, item 7): the shipped default must fit
H100 and H200 nodes, a layout that cannot fit is refused by the dry run with the key and a layout that fits, and
NeMo RL's own start-up asserts on the vLLM layout are refused before the job is queued."""

from __future__ import annotations

import pytest

from nemotron.config import catalogue
from nemotron.layout import memory
import json

from nemotron import validation
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.profiles.profile import from_table


def _prof(gpus: int, arch: str, mem: float, name: str):
    return from_table(name, {"executor": "slurm", "gpus_per_node": gpus, "gpu_arch": arch, "gpu_memory": mem})  # a real profile


H100, H200, GB200 = _prof(8, "hopper", 80.0, "h100"), _prof(8, "hopper", 141.0, "h200"), _prof(4, "blackwell", 186.0, "gb200")


def check(folder: str, config: str = "default", overrides: dict | None = None, profile=None):
    """The shipped ``-c config`` compiled as the CLI compiles it, then prepare + validate; (problems, notes, cfg)."""
    stage = get_stage(folder)
    compiled = compile_config(stage, config, [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()],
                              check_paths=False)
    cfg = compiled.config
    notes = validation.prepare(stage, cfg, compiled.user_keys, profile)
    return validation.validate(stage, cfg, profile), notes, None, cfg


def errors(problems):
    return [p for p in problems if p.severity == "error"]


@pytest.mark.parametrize("profile", [None, H100, H200, GB200], ids=["no-profile", "h100", "h200", "gb200"])
def test_shipped_eval_default_fits_the_gpus(profile):
    """The default serves the 561 B model at TP8 PP4 EP8: 35 GB of BF16 weights per GPU (was TP8 PP1 EP8 on one
    node: 140 GB, above 0.9 x 141 GB). On 4-GPU nodes the 8-GPU node shape is refused (rule node-shape, as for every
    GPU stage); with the node shape set to the profile's, the same 32 GPUs validate."""
    over = {"run.env.gpus_per_node": 4, "run.env.nodes": 8} if profile is GB200 else {}
    if over:
        assert [p.rule for p in errors(check("eval", "default", profile=profile)[0])] == ["node-shape"]
    problems, _, _, cfg = check("eval", "default", over, profile=profile)
    assert [p.render() for p in errors(problems)] == []
    vc = cfg["generation"]["vllm_cfg"]
    w = memory.inference_weights_gb(catalogue.get("ultra"), vc["tensor_parallel_size"], vc["expert_parallel_size"],
                                    vc["pipeline_parallel_size"])
    assert w == pytest.approx(35.0, abs=0.1)


@pytest.mark.parametrize("profile,budget", [(None, 127), (H100, 72), (H200, 127)], ids=["no-profile", "h100", "h200"])
def test_one_node_bf16_serving_is_refused_with_a_layout_that_fits(profile, budget):
    """The old default (one 8-GPU node, TP8 PP1 EP8) is an error naming the key, the weights per GPU, the budget and
    a layout that fits (PP with the async engine, nodes to match)."""
    over = {"generation.vllm_cfg.pipeline_parallel_size": 1, "generation.vllm_cfg.async_engine": False,
            "run.env.nodes": 1}
    problems, _, _, _ = check("eval", "default", over, profile=profile)
    bad = [p for p in errors(problems) if p.rule == "serving-memory"]
    assert len(bad) == 1, [p.render() for p in problems]
    text = bad[0].render()
    assert bad[0].key == "generation.vllm_cfg.pipeline_parallel_size"
    assert "140 GB of BF16 weights per GPU" in text and f"= {budget} GB" in text
    pp = 2 if profile is not H100 else 3  # H100: 108 layers / 3 = 36 a stage, 47 GB of weights per GPU
    assert f"pipeline_parallel_size={pp} generation.vllm_cfg.async_engine=true run.env.nodes={pp}" in text


def test_eval_vllm_layout_asserts_of_nemo_rl_are_refused():
    """NeMo RL's vLLM generation asserts PP > 1 only with the async engine, and world % (TP x PP) == 0."""
    problems, _, _, _ = check("eval", "default", {"generation.vllm_cfg.async_engine": False}, profile=H200)
    assert [p.key for p in errors(problems) if p.rule == "engine-layout"] == ["generation.vllm_cfg.async_engine"]
    problems, _, _, _ = check("eval", "default", {"run.env.nodes": 3}, profile=H200)
    assert "cluster.num_nodes" in [p.key for p in errors(problems) if p.rule == "engine-layout"]


def test_serving_state_counts_attention_kv_and_mamba_state():
    """One 4,096-token request of Ultra at TP8: 12 attention layers x 2 x 1 KV group (2 groups < TP 8: replicated)
    x 128 x 2 bytes per token, plus 48 Mamba layers' FP32 state."""
    spec = catalogue.get("ultra")
    kv = 12 * 2 * 1 * 128 * 2 * 4096
    d_inner = spec.mamba_num_heads * spec.mamba_head_dim
    mamba = 48 * (d_inner * spec.mamba_state_dim / 8
                  + (d_inner + 2 * spec.mamba_num_groups * spec.mamba_state_dim) / 8 * (spec.mamba_conv_kernel - 1)) * 4
    assert memory.serving_state_gb(spec, 8, 1, 4096) == pytest.approx((kv + mamba) / 1e9)


# ------------------------------------------------------------------ NeMo RL's generation engines (rlvr, mopd)
def _fix(valid: str) -> dict:
    """The ``key=value`` overrides a serving-memory hint names (before its parenthesised layout note)."""
    head = valid.split(" (")[0]
    return {k: int(v) if v.isdigit() else v for k, v in (t.split("=", 1) for t in head.split() if "=" in t)}


def _gen(problems):
    return [p for p in problems if p.rule == "serving-memory"]


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
@pytest.mark.parametrize("profile,budget,pp", [(H200, 120, 2), (H100, 68, 3)], ids=["h200", "h100"])
def test_rl_generation_engines_that_cannot_hold_their_weights_are_refused(stage, profile, budget, pp, tmp_path):
    """The shipped rlvr/mopd defaults generate with TP8 EP8 vLLM engines: 140 GB of BF16 weights per GPU, over
    0.85 x the GPU memory of an H100 or H200 profile. An error (was a `memory` warning) naming the weights, the
    budget and the smallest PP that fits, with the generation nodes that make the engines divide; the named fix
    clears it and every engine-layout assert NeMo RL's vLLM generation makes (PP > 1 with the async engine). On H100
    the policy training (100 GB of 80 GB) is refused too (rule memory-fit), and its own fix clears it.
    The teacher is a real folder: the fake profiles see this machine's files (rule input-exists)."""
    over = {"_teachers.general": str(tmp_path)} if stage == "mopd" else {}
    problems, _, _, _ = check(stage, "default", over, profile=profile)
    bad = _gen(problems)
    assert [(p.severity, p.key) for p in bad] == [("error", "policy.generation.vllm_cfg.pipeline_parallel_size")], \
        [p.render() for p in problems]
    text = bad[0].render()
    assert "140 GB of BF16 weights per GPU" in text and f"= {budget} GB: vLLM cannot start" in text
    fix = _fix(bad[0].valid)
    assert fix["policy.generation.vllm_cfg.pipeline_parallel_size"] == pp, bad[0].valid
    # the fix, with the GB200 dispatcher replaced (rule gb200-tuned): the dry-run accepts the job
    fixed, _, _, cfg = check(stage, "default", {**over, **fix, "policy.megatron_cfg.moe_token_dispatcher_type": "alltoall"},
                             profile=profile)
    if profile is H100:  # the training's memory-fit error names its own fix: PP2 (rlvr: on the same GPUs)
        [fit] = errors(fixed)
        assert fit.rule == "memory-fit" and fit.valid.startswith(
            "policy.megatron_cfg.pipeline_model_parallel_size=2 "), fit.render()
        fix["policy.megatron_cfg.pipeline_model_parallel_size"] = 2
        fixed, _, _, cfg = check(stage, "default", {**over, **fix,
                                                    "policy.megatron_cfg.moe_token_dispatcher_type": "alltoall"},
                                 profile=profile)
        if stage == "mopd":  # TP8 x CP32 fills its 256 training GPUs: PP2 needs twice the nodes, which it names
            assert [(p.rule, p.key) for p in errors(fixed)] == [("world-layout", "cluster.num_nodes")] and \
                errors(fixed)[0].valid, [p.render() for p in errors(fixed)]
            return
    assert errors(fixed) == [], [p.render() for p in errors(fixed)]
    vc = cfg["policy"]["generation"]["vllm_cfg"]
    assert vc["async_engine"] is True and vc["expert_parallel_size"] == vc["tensor_parallel_size"] == 8
    gen_gpus = cfg["policy"]["generation"]["colocated"]["resources"]["num_nodes"] * 8
    assert gen_gpus % (8 * pp) == 0  # NeMo RL: the generation world is a multiple of TP x PP


def test_rl_generation_memory_without_a_profile_is_a_warning_that_says_the_gpu_was_assumed():
    problems, _, _, _ = check("rlvr", "default", profile=None)
    bad = _gen(problems)
    assert [p.severity for p in bad] == ["warning"], [p.render() for p in problems]
    assert "assumed: no profile" in bad[0].message and "H200" in bad[0].message
    # the same layout on a profile that declares a GPU with room for it: nothing (B200, 180 GB: 153 GB budget)
    b200 = _prof(8, "blackwell", 180.0, "b200")
    assert _gen(check("rlvr", "default", profile=b200)[0]) == []


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_rl_generation_memory_on_a_profile_without_a_gpu_is_said_not_checked(stage):
    """A Slurm profile that declares no GPU memory (no gpu, no gpu_memory): the engine's weights per GPU are named
    and the check is said not to have run, as the training's memory estimate says it (was: silence)."""
    bare = from_table("bare", {"executor": "slurm", "gpus_per_node": 8})  # a real profile, no GPU declared
    [warn] = _gen(check(stage, "default", profile=bare)[0])
    assert warn.severity == "warning" and warn.key == "policy.generation.vllm_cfg.pipeline_parallel_size"
    assert "a generation engine at TP8 PP1 EP8 holds 140 GB of BF16 weights per GPU, not checked: profile bare " \
           "declares no GPU memory" in warn.message
    assert 'gpu = "H100"' in warn.valid


def test_rl_generation_whose_weights_fit_but_not_the_estimated_state_is_a_warning():
    """rlvr -c phase2 (the recipe's gpu_memory_utilization 0.8, 65,536-token context) on a B200 profile: 140 GB of
    weights fit 0.8 x 180 = 144 GB, the state and the 5 GB allowance (estimates) do not: a warning that says so."""
    b200 = _prof(8, "blackwell", 180.0, "b200")
    bad = _gen(check("rlvr", "phase2", profile=b200)[0])
    assert [p.severity for p in bad] == ["warning"], [p.render() for p in bad]
    assert "the weights alone fit" in bad[0].message and "vLLM may not start" in bad[0].message


def test_rl_sglang_engines_are_checked_against_mem_fraction_static():
    """SGLang 8-GPU TP8 EP8 engines: 140 GB against mem_fraction_static 0.7 x 141 GB; the fix is SGLang's pp_size
    with the engine's GPUs (NeMo RL asserts tp_size = num_gpus_per_engine / pp_size)."""
    over = {"policy.generation.backend": "sglang", "grpo.async_grpo.enabled": False,
            "policy.megatron_cfg.moe_token_dispatcher_type": "alltoall"}
    problems, _, _, _ = check("rlvr", "default", over, profile=H200)
    bad = _gen(problems)
    assert [(p.severity, p.key) for p in bad] == [("error", "policy.generation.sglang_cfg.pp_size")], \
        [p.render() for p in problems]
    assert "mem_fraction_static 0.7 x 141 GB = 99 GB: SGLang cannot start" in bad[0].message
    fix = _fix(bad[0].valid)
    assert fix == {"policy.generation.sglang_cfg.pp_size": 2,
                   "policy.generation.sglang_cfg.sglang_server_config.num_gpus_per_engine": 16}, bad[0].valid
    fixed, _, _, _ = check("rlvr", "default", {**over, **fix}, profile=H200)
    assert errors(fixed) == [], [p.render() for p in errors(fixed)]


def test_rl_vllm_pipeline_parallel_needs_the_async_engine():
    """NeMo RL's vllm_generation.py asserts async_engine when pipeline_parallel_size > 1 (as for eval)."""
    over = {"policy.generation.vllm_cfg.pipeline_parallel_size": 2, "policy.generation.vllm_cfg.async_engine": False,
            "grpo.async_grpo.enabled": False}
    problems, _, _, _ = check("rlvr", "default", over, profile=H200)
    assert "policy.generation.vllm_cfg.async_engine" in [p.key for p in errors(problems) if p.rule == "engine-layout"]
