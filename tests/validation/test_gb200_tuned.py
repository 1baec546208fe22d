"""Settings the Ultra RL recipes tuned for GB200 NVL72 (issue 30, item 8): on a Hopper profile, HybridEP's multi-node
NVLink defaults (NeMo RL's setup.py: USE_MNNVL=int(EP > 4), ranks per NVLink domain min(EP, 64)) are refused with
the keys that fix it; HybridEP and vLLM's flashinfer_cutlass MoE backend, whose hardware the pinned sources do not
state, are warnings; Blackwell profiles get none of these."""

from __future__ import annotations

import json

import pytest

from nemotron import validation
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.profiles.profile import from_table


def _prof(gpus: int, arch: str, mem: float, name: str):
    return from_table(name, {"executor": "slurm", "gpus_per_node": gpus, "gpu_arch": arch, "gpu_memory": mem})  # a real profile


H200, GB200 = _prof(8, "hopper", 141.0, "h200"), _prof(4, "blackwell", 186.0, "gb200")


def _problems(stage_name: str, profile, overrides: dict | None = None):
    stage = get_stage(stage_name)
    compiled = compile_config(stage, "default", [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()],
                              check_paths=False)
    validation.prepare(stage, compiled.config, compiled.user_keys, profile)
    return [p for p in validation.validate(stage, compiled.config, profile) if p.rule == "gb200-tuned"]


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_hopper_profile_refuses_the_multinode_nvlink_hybridep(stage):
    found = _problems(stage, H200)
    errors = [p for p in found if p.severity == "error"]
    assert [p.key for p in errors] == ["policy.megatron_cfg.moe_flex_dispatcher_backend"]
    assert "USE_MNNVL=1" in errors[0].message and "moe_token_dispatcher_type=alltoall" in errors[0].valid
    warned = [p.key for p in found if p.severity == "warning"]
    assert warned == ["policy.generation.vllm_kwargs.moe_backend"]


def test_hopper_with_the_node_as_nvlink_domain_is_a_warning_and_alltoall_is_clean():
    found = _problems("rlvr", H200, {"+policy.megatron_cfg.hybridep_use_mnnvl": False,
                                     "+policy.megatron_cfg.hybridep_num_ranks_per_nvlink_domain": 8})
    assert {p.severity for p in found} == {"warning"}
    assert "policy.megatron_cfg.moe_flex_dispatcher_backend" in [p.key for p in found]
    found = _problems("rlvr", H200, {"policy.megatron_cfg.moe_token_dispatcher_type": "alltoall",
                                     "policy.generation.vllm_kwargs.moe_backend": "triton"})
    assert found == []


def test_blackwell_profile_keeps_the_recipe_unremarked():
    assert _problems("rlvr", GB200) == []


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_a_profile_without_a_gpu_is_told_the_check_did_not_run(stage):
    """A Slurm profile that declares neither gpu nor gpu_arch: the GB200 settings cannot be checked against its GPUs;
    one warning names both kept settings and the profile key that enables the check (was: silence)."""
    bare = from_table("bare", {"executor": "slurm", "gpus_per_node": 8})  # a real profile, no GPU declared
    found = _problems(stage, bare)
    assert [(p.severity, p.key) for p in found] == [("warning", "profile.bare.gpu")], [p.render() for p in found]
    assert "declares no GPU" in found[0].message and "not checked" in found[0].message
    assert "moe_flex_dispatcher_backend=hybridep" in found[0].message
    assert "moe_backend=flashinfer_cutlass" in found[0].message
    assert 'gpu = "H100"' in found[0].valid
    # the same profile with the GB200 settings replaced by Hopper-safe ones: nothing to say
    assert _problems(stage, bare, {"policy.megatron_cfg.moe_token_dispatcher_type": "alltoall",
                                   "policy.generation.vllm_kwargs.moe_backend": "triton"}) == []
    # declaring the GPU turns the check on (its error for the multi-node NVLink HybridEP)
    declared = from_table("bare", {"executor": "slurm", "gpus_per_node": 8, "gpu": "H100"})
    assert "error" in {p.severity for p in _problems(stage, declared)}


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_no_profile_and_a_profile_without_a_gpu_agree_that_nothing_was_checked_against_real_gpus(stage):
    """Both unknown-GPU cases warn, name the GB200-tuned keys and say the check did not run against real GPUs: without
    a profile Hopper is assumed (each finding is a warning that says so), with a profile that declares no GPU one
    warning names both settings."""
    none = _problems(stage, None)
    assert {p.severity for p in none} == {"warning"}, [p.render() for p in none]
    assert [p.key for p in none] == ["policy.megatron_cfg.moe_flex_dispatcher_backend",
                                     "policy.generation.vllm_kwargs.moe_backend"]
    assert all("assumed: no profile, so hopper GPUs; not checked against real ones" in p.message for p in none)
    [bare] = _problems(stage, from_table("bare", {"executor": "slurm", "gpus_per_node": 8}))
    assert bare.severity == "warning" and "not checked" in bare.message
    assert all(k.split(".")[-1] in bare.message for k in (p.key for p in none))   # the same keys named
    # a declared Hopper profile: checked, no "assumed" (and the multi-node HybridEP is an error there)
    assert not any("assumed" in p.message for p in _problems(stage, H200))
