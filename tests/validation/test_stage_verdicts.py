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
