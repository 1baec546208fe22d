"""The RLVR and MOPD stages on NeMo RL: configs layered on NeMo RL's recipes, node arithmetic of the published
shapes, the teacher panel and routing, environments, the NeMo RL key list and rules, the cluster runtime's checks,
translation and output checkpoint.

NeMo RL (with vLLM and Megatron-Bridge) runs only inside NVIDIA's container on GPUs, so its GRPO entry is never
run here: tests/contract/test_nemo_rl.py runs NeMo RL's own code (pinned archive, CPU) on what these tests show
our runtime hands it. Everything else is real: the project's config compiler, validation, artifact store and entry
script, NeMo RL's key list and recipes generated from its real source (stored in src/nemotron/keylists), and,
with NEMOTRON_TEST_SLURM=1, a submission to the local Slurm cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import time
from pathlib import Path

import pytest
import yaml

from nemotron import validation
from nemotron.config import keys
from nemotron.config.registry import get_stage
from nemotron.layout.views import node_shape
from nemotron.profiles.profile import from_table
from nemotron.runtime.rl import nemo_rl
from nemotron.validation import checks

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "stages" / "ultra3"


def prof(gpus: int, arch: str, mem: float, name: str):
    return from_table(name, {"executor": "slurm", "gpus_per_node": gpus, "gpu_arch": arch, "gpu_memory": mem})  # a real profile


H200 = prof(8, "hopper", 141.0, "h200")
B200 = prof(8, "blackwell", 180.0, "b200")
GB200 = prof(4, "blackwell", 186.0, "gb200")


def compiled(stage: str, config: str = "default", overrides: dict | None = None):
    """The config as the CLI compiles it (``key=value`` overrides as JSON flow values), upstream artifacts
    that do not exist left as ``${art:...}`` text."""
    from nemotron.config.compile import compile_config

    args = [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()]
    return compile_config(get_stage(stage), config, args, check_paths=False)


def checked(stage: str, config: str = "default", overrides: dict | None = None, profile=B200):
    c = compiled(stage, config, overrides)
    notes = validation.prepare(get_stage(stage), c.config, c.user_keys, profile)
    problems = validation.validate(get_stage(stage), c.config, profile)
    return c.config, notes, problems


def errors(problems):
    """The errors, less rule input-exists: this file's teacher and model paths (``/ckpt/general``, ``/g``) stand for
    cluster paths this machine does not hold, and the real profiles above see this machine's files (a Slurm profile's
    default local tunnel), so every one would be refused; input-exists is tested in tests/cli/test_cli_refusals.py."""
    return [p for p in problems if p.severity == "error" and p.rule != "input-exists"]


# ------------------------------------------------------------------------------------------ configs
def test_rlvr_ships_phase2_and_one_config_per_teacher_slot():
    from nemotron.config.paths import config_names

    names = set(config_names(get_stage("rlvr")))
    assert {"default", "tiny", "local", "phase2"} <= names
    slots = {n.removeprefix("teacher-") for n in names if n.startswith("teacher-")}
    assert slots == set(validation.rules.TEACHER_SLOTS) - {"general"}  # general = the Student RLVR output itself
    assert "full-panel" in config_names(get_stage("mopd"))


def test_phase2_resumes_phase1_at_65k_context():
    """student_rlvr2.yaml: same run (checkpoint dir, layout, nodes), 65,536-token context, vLLM utilization 0.80."""
    p1, p2 = compiled("rlvr").config, compiled("rlvr", "phase2").config
    assert p2["checkpointing"]["checkpoint_dir"] == p1["checkpointing"]["checkpoint_dir"]
    assert p2["policy"]["model_name"] == p1["policy"]["model_name"]
    assert p2["policy"]["megatron_cfg"] == p1["policy"]["megatron_cfg"] and p2["run"] == p1["run"]
    assert p2["policy"]["max_total_sequence_length"] == 65536 == p2["policy"]["generation"]["vllm_cfg"]["max_model_len"]
    assert p2["policy"]["generation"]["vllm_cfg"]["gpu_memory_utilization"] == 0.80
    assert p2["grpo"]["max_num_steps"] > p1["grpo"]["max_num_steps"]
    assert p2["output_artifact"] == p1["output_artifact"] == "rl-checkpoint"


@pytest.mark.parametrize("config", ["default", "tiny", "local", "phase2", "teacher-rlhf", "teacher-ifbench",
                                    "teacher-reasoning", "teacher-swe"])
def test_every_rlvr_config_validates_on_b200(config):
    """Every rlvr config validates (``local`` included: its backend runs TRL on this machine)."""
    _, _, problems = checked("rlvr", config)
    assert [p.rule for p in errors(problems)] == [], [p.render() for p in errors(problems)]


def test_teacher_configs_record_teacher_artifacts_and_start_from_the_student():
    from nemotron.launch.plan import planned_outputs

    for slot in ("rlhf", "ifbench", "reasoning", "swe"):
        c = compiled("rlvr", f"teacher-{slot}")
        out = planned_outputs(c)
        assert list(out) == [f"teacher-{slot}"]
        assert out[f"teacher-{slot}"]["path"].endswith(f"ultra3-teacher-{slot}/hf/latest")  # the HF form (finish)
        assert out[f"teacher-{slot}"]["checkpoint_dir"].endswith(f"ultra3-teacher-{slot}")
        assert c.config["policy"]["model_name"] == "${art:rl-checkpoint,path}"  # the Student RLVR output
    assert list(planned_outputs(compiled("rlvr"))) == ["rl-checkpoint"]


def test_teacher_artifact_reaches_the_mopd_panel(tmp_path, monkeypatch):
    """A teacher run records `teacher-reasoning` (config teacher-reasoning); `mopd` (config default) takes it,
    and a teacher config takes the Student RLVR output of the default run."""
    from nemotron.config import artifacts

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path))
    (tmp_path / "student").mkdir()
    (tmp_path / "teacher").mkdir()
    artifacts.record("rl-checkpoint", {"path": str(tmp_path / "student"), "config": "default"})
    artifacts.record("teacher-reasoning", {"path": str(tmp_path / "teacher"), "config": "teacher-reasoning"})
    c = compiled("mopd", "default", {"_teachers.reasoning": "${art:teacher-reasoning,path}"})
    assert c.config["_teachers"]["reasoning"] == str(tmp_path / "teacher")
    assert c.config["_teachers"]["general"] == str(tmp_path / "student")
    t = compiled("rlvr", "teacher-reasoning")
    assert t.config["policy"]["model_name"] == str(tmp_path / "student")
    assert artifacts.lookup("rl-checkpoint", config="tiny") is None  # tiny never takes the paper-scale run


# ------------------------------------------------------------------------------------------ node arithmetic
# id -> (stage, config, overrides, profile, (train, generation, gym, teacher nodes, total))
SHAPES = {
    # student_rlvr1.yaml: 64 train + 172 vLLM + 20 Gym GB200 nodes of 4 = 256 (ultra_launch.sh defaults)
    "rlvr-phase1-256xgb200": ("rlvr", "default", {
        "run.env.nodes": 256, "run.env.gpus_per_node": 4, "cluster.num_nodes": 236, "cluster.segment_size": 16,
        "policy.generation.colocated.resources.num_nodes": 172, "env.nemo_gym.num_gpu_nodes": 20}, GB200,
        (64, 172, 20, 0, 256)),
    "rlvr-phase1-118x8": ("rlvr", "default", {}, B200, (32, 86, 0, 0, 118)),
    # student_rlvr2.yaml: the same 256-node shape
    "rlvr-phase2-118x8": ("rlvr", "phase2", {}, B200, (32, 86, 0, 0, 118)),
    "rlvr-phase2-256xgb200": ("rlvr", "phase2", {
        "run.env.nodes": 256, "run.env.gpus_per_node": 4, "cluster.num_nodes": 236, "cluster.segment_size": 16,
        "policy.generation.colocated.resources.num_nodes": 172, "env.nemo_gym.num_gpu_nodes": 20}, GB200,
        (64, 172, 20, 0, 256)),
    # rlhf/ifbench_teacher.yaml: 32 + 28 + 20 GB200 nodes = 80; on 8-GPU nodes 16 + 14 + 10
    "teacher-rlhf-40x8": ("rlvr", "teacher-rlhf", {}, B200, (16, 14, 10, 0, 40)),
    "teacher-ifbench-40x8": ("rlvr", "teacher-ifbench", {}, B200, (16, 14, 10, 0, 40)),
    "teacher-rlhf-80xgb200": ("rlvr", "teacher-rlhf", {
        "run.env.nodes": 80, "run.env.gpus_per_node": 4, "cluster.num_nodes": 60, "cluster.segment_size": 16,
        "policy.generation.colocated.resources.num_nodes": 28, "env.nemo_gym.num_gpu_nodes": 20}, GB200,
        (32, 28, 20, 0, 80)),
    # reasoning_teacher.yaml: 64 + 54 + 10 GB200 nodes = 128 (our math data: no Gym judges)
    "teacher-reasoning-59x8": ("rlvr", "teacher-reasoning", {}, B200, (32, 27, 0, 0, 59)),
    # swe_teacher.yaml: 64 + 64 + 0 GB200 nodes = 128
    "teacher-swe-64x8": ("rlvr", "teacher-swe", {}, B200, (32, 32, 0, 0, 64)),
    "teacher-swe-128xgb200": ("rlvr", "teacher-swe", {
        "run.env.nodes": 128, "run.env.gpus_per_node": 4, "cluster.num_nodes": 128, "cluster.segment_size": 16,
        "policy.generation.colocated.resources.num_nodes": 64}, GB200, (64, 64, 0, 0, 128)),
    # mopd.yaml: 64 train + 142 vLLM + 10 Gym + 5 distinct teachers x 4 GB200 nodes = 236, not a multiple of the
    # 16-node segment (test_validation.py checks that the dry-run says so); on 8-GPU nodes:
    "mopd-105x8-general-only": ("mopd", "default", {}, B200, (32, 71, 0, 2, 105)),
    "mopd-113x8-full-panel": ("mopd", "full-panel", {}, B200, (32, 71, 0, 10, 113)),
    "mopd-tiny-3x8": ("mopd", "tiny", {}, H200, (1, 1, 0, 1, 3)),
    "rlvr-tiny-1x8": ("rlvr", "tiny", {}, H200, (1, 0, 0, 0, 1)),
}


@pytest.mark.parametrize("case", list(SHAPES))
def test_published_stage_shapes_node_arithmetic(case):
    stage, config, overrides, profile, (train, gen, gym, teachers, total) = SHAPES[case]
    if stage == "mopd" and "full-panel" in config:  # the teacher artifacts do not exist here: give paths
        overrides = {**overrides, **{f"_teachers.{s}": f"/ckpt/{s}" for s in ("rlhf", "ifbench", "reasoning", "swe")}}
    cfg, _, problems = checked(stage, config, overrides, profile)
    assert not [p for p in errors(problems) if p.rule in ("rl-node-total", "segment-multiple", "world-layout")], \
        [p.render() for p in errors(problems)]
    _, plan = checks.rl_layout(cfg, node_shape(cfg, profile))
    got = (plan.train_nodes, plan.gen_nodes, plan.gym_nodes, plan.teacher_nodes, plan.total)
    assert got == (train, gen, gym, teachers, total)
    table = {r[0]: r[1] for r in next(t for t in validation.describe(get_stage(stage), cfg, profile)
                                       if t[0] == "node arithmetic")[2]}
    assert table["total = run.env.nodes"] == f"{total} (asked: {total})"


def test_the_profile_must_ask_for_the_computed_nodes():
    _, _, problems = checked("mopd", "full-panel", {**{f"_teachers.{s}": f"/ckpt/{s}" for s in
                                                       ("rlhf", "ifbench", "reasoning", "swe")}, "run.env.nodes": 105})
    bad = errors(problems)
    assert [p.key for p in bad] == ["cluster.num_nodes"]
    assert "105 - 71 - 10 = 24 nodes" in bad[0].render() and "valid: cluster.num_nodes in 113," in bad[0].render()
    _, _, problems = checked("mopd", "full-panel", {**{f"_teachers.{s}": f"/ckpt/{s}" for s in
                                                       ("rlhf", "ifbench", "reasoning", "swe")}, "run.env.nodes": 123,
                                                    "cluster.num_nodes": 113})
    bad = [p for p in errors(problems) if p.rule == "rl-node-total"]
    assert bad and bad[0].key == "run.env.nodes" and "113" in bad[0].render()


# ------------------------------------------------------------------------------------------ panel and routing
def test_routing_fallback_and_default_alias():
    """Unset slots fall back to general (said once); the routing table becomes NeMo RL's agent -> checkpoint
    map, unmapped agents go to the default alias = the default slot's checkpoint."""
    cfg, notes, problems = checked("mopd", "default", {"_teachers.general": "/ckpt/general",
                                                      "_teachers.reasoning": "/ckpt/reasoning",
                                                      "run.env.nodes": 107})  # 32 + 71 + 2 teachers x 2
    assert not errors(problems)
    fallback = [n for n in notes if "fall back to the general teacher" in n]
    assert len(fallback) == 1 and "rlhf, ifbench, swe" in fallback[0]
    assert sum("any other task goes to the 'general' teacher" in n for n in notes) == 1
    out = nemo_rl.translate(cfg)
    opd = out["on_policy_distillation"]
    tmap = opd["teacher_model_by_agent_name"]
    assert tmap["math"] == "/ckpt/reasoning" == tmap["math_with_judge_simple_agent"]
    assert tmap["genrm_simple_agent"] == "/ckpt/general"  # rlhf slot unset: general
    assert opd["default_teacher_alias"] == nemo_rl.DEFAULT_TEACHER_ALIAS and tmap[nemo_rl.DEFAULT_TEACHER_ALIAS] == "/ckpt/general"
    # two distinct checkpoints are routed to: two teachers of 2 nodes
    _, plan = checks.rl_layout(cfg, node_shape(cfg, B200))
    assert plan.unique_teachers == 2 and plan.teacher_nodes == 4


def test_routing_to_an_unknown_slot_is_an_error():
    _, _, problems = checked("mopd", "default", {"_teachers.general": "/g", "teacher_routing.by_agent.math": "maths"})
    bad = [p for p in errors(problems) if p.key == "teacher_routing.by_agent.math"]
    assert bad and "general" in bad[0].render()


def test_default_slot_goes_to_that_teacher():
    cfg, notes, problems = checked("mopd", "default", {"_teachers.general": "/g", "_teachers.swe": "/s",
                                                      "teacher_routing.default_slot": "swe", "run.env.nodes": 107})
    assert not errors(problems)
    assert nemo_rl.teacher_map(cfg)[0][nemo_rl.DEFAULT_TEACHER_ALIAS] == "/s"
    assert any("any other task goes to the 'swe' teacher" in n for n in notes)


# ------------------------------------------------------------------------------------------ environments
ENV_CASES = {
    "math-off": ({"environments.math.enabled": False}, "data.default.env_name", "off"),
    "judge-without-endpoint": ({"environments.genrm.enabled": True, "env.should_use_nemo_gym": True},
                               "environments.genrm.endpoint", "neither an endpoint nor a model"),
    "gym-env-but-gym-off": ({"environments.instruction_following.enabled": True}, "env.should_use_nemo_gym",
                            "silently unused"),
    "gym-on-nothing-enabled": ({"env.should_use_nemo_gym": True}, "env.should_use_nemo_gym", "no NeMo Gym environment"),
    "judge-served-without-gym-nodes": ({"environments.genrm.enabled": True, "env.should_use_nemo_gym": True,
                                        "environments.genrm.model": "/ckpt/genrm"}, "env.nemo_gym.num_gpu_nodes",
                                       "no GPU nodes"),
    "judge-endpoint-not-a-url": ({"environments.genrm.enabled": True, "env.should_use_nemo_gym": True,
                                  "environments.genrm.endpoint": "genrm:8000"}, "environments.genrm.endpoint", "base URL"),
    "sandbox-without-image": ({"environments.swe.enabled": True, "env.should_use_nemo_gym": True},
                              "environments.swe.image", "no container images"),
    "unknown-kind": ({"environments.genrm.kind": "llm"}, "environments.genrm.kind", "not an environment kind"),
    "builtin-that-nemo-rl-lacks": ({"environments.genrm.kind": "builtin", "environments.genrm.enabled": True},
                                   "environments.genrm.kind", "no built-in environment"),
}


@pytest.mark.parametrize("case", list(ENV_CASES))
def test_environment_problems_are_named(case):
    overrides, key, words = ENV_CASES[case]
    _, _, problems = checked("rlvr", "default", overrides)
    bad = [p for p in errors(problems) if p.rule == "rl-environments"]
    assert [p.key for p in bad] == [key], [p.render() for p in bad]
    assert words in bad[0].render()


def test_judge_with_endpoint_is_wired_into_nemo_gym():
    cfg, _, problems = checked("rlvr", "default", {
        "environments.genrm.enabled": True, "environments.genrm.endpoint": "http://genrm:8000/v1",
        "environments.instruction_following.enabled": True, "env.should_use_nemo_gym": True,
        "grpo.max_val_samples": None})  # the Gym entry validates on the whole set
    assert not errors(problems)
    gym = nemo_rl.translate(cfg)["env"]["nemo_gym"]
    assert gym["config_paths"] == [nemo_rl.GYM_POLICY_MODEL,
                                   "resources_servers/genrm_compare/configs/genrm_compare.yaml",
                                   "resources_servers/instruction_following/configs/instruction_following.yaml"]
    assert gym["genrm_model"]["responses_api_models"]["genrm_model"]["base_url"] == "http://genrm:8000/v1"


def test_sandbox_image_reaches_its_key():
    cfg, _, problems = checked("rlvr", "teacher-swe", {"environments.swe.image": "/sif"})
    assert not errors(problems)
    out = nemo_rl.translate(cfg)
    assert out["sif_dir"] == "/sif"
    assert "responses_api_agents/swe_agents/configs/swebench_openhands_training.yaml" in out["env"]["nemo_gym"]["config_paths"]


# ------------------------------------------------------------------------------------------ NeMo RL key list
def _pinned_nemo_rl() -> str:
    return tomllib.loads((STAGES.parent / "images.toml").read_text())["nemo-rl"]["frameworks"]["nemo_rl"]


def test_a_nemo_rl_key_list_is_stored_for_the_pinned_commit():
    version = _pinned_nemo_rl()
    kl = keys.load_keylist(version, "nemo-rl")
    assert kl["version"] == version and kl["commit"].startswith(version.removeprefix("main-"))
    assert len(kl["commit"]) == 40 and kl["root"] == "MasterConfig"
    s = kl["sections"]
    assert "ratio_clip_max" in s["loss_fn"]["fields"]
    assert "expert_model_parallel_size" in s["policy"]["fields"]["megatron_cfg"]["fields"]
    assert "tensor_parallel_size" in s["policy"]["fields"]["generation"]["fields"]["vllm_cfg"]["fields"]
    assert "teacher_model_by_agent_name" in s["on_policy_distillation"]["fields"]
    assert s["env"].get("mapping")  # MasterConfig.env: dict[str, Any]
    with pytest.raises(KeyError, match="stored: main-"):
        keys.load_keylist("main-0000000", "nemo-rl")


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_every_rl_config_key_is_ours_or_nemo_rls(stage):
    kl = keys.load_keylist(_pinned_nemo_rl(), "nemo-rl")
    for path in sorted((STAGES / stage).glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        data.pop("defaults", None)  # the config's parents (our layering: mopd -c local-cycle2 over local)
        problems = keys.unknown_keys(data, kl, keys.NEMO_RL_OWN_KEYS)
        assert not problems, f"{path.name}: " + "; ".join(map(keys.describe, problems))


def test_unknown_nemo_rl_key_is_rejected_at_dry_run_with_a_did_you_mean(capsys):
    from nemotron.cli.main import main

    code = main(["ultra3", "rlvr", "-c", "tiny", "--dry-run", "+policy.megatron_cfg.tensor_model_paralel_size=8",
                 "+grpo.num_prompt_per_step=3"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2
    assert "did you mean 'policy.megatron_cfg.tensor_model_parallel_size'?" in text
    assert "did you mean 'grpo.num_prompts_per_step'?" in text


def test_key_list_generator_reads_typeddicts_models_and_example_yamls(tmp_path):
    """scripts/nemo_rl_keys.py on a small source tree shaped like NeMo RL's (the stored list was made from
    the real checkout at the pinned commit; this checks the reading rules)."""
    import importlib.util

    pkg = tmp_path / "nemo_rl"
    (pkg / "algorithms").mkdir(parents=True)
    (pkg / "models").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "algorithms" / "__init__.py").write_text("")
    (pkg / "models" / "__init__.py").write_text(
        "from typing import TypedDict, NotRequired\n"
        "class GenerationConfig(TypedDict):\n    backend: str\n    max_new_tokens: int\n"
        "class VllmSpecificArgs(TypedDict):\n    tensor_parallel_size: int\n"
        "class VllmConfig(GenerationConfig):\n    vllm_cfg: VllmSpecificArgs\n"
        "class PolicyConfig(TypedDict):\n    model_name: str\n    generation: NotRequired[GenerationConfig]\n")
    (pkg / "algorithms" / "grpo.py").write_text(
        "from typing import Any\nfrom pydantic import BaseModel\nfrom nemo_rl.models import PolicyConfig\n"
        "class GRPOConfig(BaseModel, extra='allow'):\n    num_prompts_per_step: int = 32\n"
        "class MasterConfig(BaseModel):\n    policy: PolicyConfig\n    grpo: GRPOConfig\n    env: dict[str, Any]\n")
    ex = tmp_path / "examples" / "configs"
    ex.mkdir(parents=True)
    (ex / "grpo_x.yaml").write_text("defaults: base.yaml\ngrpo:\n  use_best_at_k: false\nsif_dir: /x\n")
    spec = importlib.util.spec_from_file_location("nrlkeys", ROOT / "scripts" / "nemo_rl_keys.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = mod.generate(tmp_path, "a" * 40)
    s = data["sections"]
    assert data["version"] == "main-aaaaaaa" and data["commit"] == "a" * 40
    assert set(s["grpo"]["fields"]) == {"num_prompts_per_step", "use_best_at_k"}  # class + example YAML
    gen = s["policy"]["fields"]["generation"]["fields"]
    assert set(gen) == {"backend", "max_new_tokens", "vllm_cfg"}  # VllmConfig extends GenerationConfig
    assert set(gen["vllm_cfg"]["fields"]) == {"tensor_parallel_size"}
    assert s["env"]["mapping"] is True and "sif_dir" in s and "defaults" not in s
    req = data["required"]["classes"]
    assert data["required"]["root"] == "nemo_rl.algorithms.grpo.MasterConfig"
    assert req["nemo_rl.algorithms.grpo.MasterConfig"]["required"] == ["env", "grpo", "policy"]
    assert req["nemo_rl.models.PolicyConfig"]["required"] == ["model_name"]  # generation: NotRequired
    assert req["nemo_rl.models.PolicyConfig"]["fields"]["generation"] == ["nemo_rl.models.GenerationConfig"]
    assert req["nemo_rl.algorithms.grpo.GRPOConfig"]["required"] == []  # a default: not required
    assert req["nemo_rl.models.GenerationConfig"]["required"] == ["backend", "max_new_tokens"]
    assert data["recipes"] == {} and data["entry_reads"] == {} and data["metrics"]["val"] == []
    missing = keys.missing_required_keys({"policy": {"generation": {"backend": "x"}}, "env": {}}, data)
    assert [p.key for p in missing] == ["grpo", "policy.model_name", "policy.generation.max_new_tokens"]
    problems = keys.unknown_keys({"grpo": {"num_prompt_per_step": 1}, "env": {"anything": {"x": 1}}}, data)
    assert [(p.key, p.suggestion) for p in problems] == [("grpo.num_prompt_per_step", "grpo.num_prompts_per_step")]
    assert "NeMo RL main-aaaaaaa" in problems[0].message


# ------------------------------------------------------------------------------------------ the base recipe
BASES = {("rlvr", "default"): "student_rlvr1.yaml", ("rlvr", "tiny"): "student_rlvr1.yaml",
         ("rlvr", "phase2"): "student_rlvr2.yaml", ("rlvr", "teacher-reasoning"): "reasoning_teacher.yaml",
         ("rlvr", "teacher-rlhf"): "rlhf_teacher.yaml", ("rlvr", "teacher-ifbench"): "ifbench_teacher.yaml",
         ("rlvr", "teacher-swe"): "swe_teacher.yaml", ("mopd", "default"): "mopd.yaml", ("mopd", "tiny"): "mopd.yaml",
         ("mopd", "full-panel"): "mopd.yaml"}


@pytest.mark.parametrize(("stage", "config"), list(BASES), ids=[f"{s}-{c}" for s, c in BASES])
def test_configs_are_layered_on_nemo_rls_recipe(stage, config):
    """The lowest layer is NeMo RL's own recipe (stored with the key list); the keys we do not set keep its values
    and say so in the provenance; `env` is ours (nemo_rl.replace)."""
    c = compiled(stage, config)
    label = f"nemo-rl:{BASES[(stage, config)]}"
    assert c.layers[:3] == ["schema", label, "default.yaml"]
    recipe = nemo_rl.keylist()["recipes"][f"examples/nemo_gym/nemotron-3-ultra/{BASES[(stage, config)]}"]
    assert c.provenance["policy.megatron_cfg.pipeline_dtype"] == label
    assert c.config["policy"]["megatron_cfg"]["optimizer"]["clip_grad"] == recipe["policy"]["max_grad_norm"]
    assert c.config["policy"]["dynamic_batching"]["enabled"] is False  # a required key we never wrote
    assert c.provenance["env.should_use_nemo_gym"] != label  # env is ours
    assert "nemo_rl" not in nemo_rl.translate(c.config)


def test_phase2_takes_its_context_from_student_rlvr2():
    c = compiled("rlvr", "phase2")
    assert c.provenance["policy.max_total_sequence_length"] == "nemo-rl:student_rlvr2.yaml"
    assert c.config["policy"]["sequence_packing"]["train_mb_tokens"] == 65536  # the recipe's ${mul:...}, resolved


def test_an_unknown_base_recipe_is_an_error_with_a_did_you_mean():
    from nemotron.errors import ConfigError

    with pytest.raises(ConfigError, match="not a NeMo RL recipe") as exc:
        compiled("rlvr", "default", {"nemo_rl.base": "examples/nemo_gym/nemotron-3-ultra/student_rlvr3.yaml"})
    assert "student_rlvr1.yaml" in (exc.value.hint or "")


def test_tilde_required_key_is_a_dry_run_error(capsys):
    """`~policy.dynamic_batching` deletes a key of the recipe layer; NeMo RL's MasterConfig requires it (the
    contract test shows it refuses), and so does the dry-run: exit 2, rule nemo-rl-required."""
    from nemotron.cli.main import main

    code = main(["ultra3", "rlvr", "-c", "tiny", "--dry-run", "~policy.dynamic_batching"])
    text = capsys.readouterr()
    assert code == 2
    assert "policy.dynamic_batching: required by PolicyConfig (NeMo RL main-7ea279a)" in text.out + text.err


METRICS = {  # metric_name -> (rule severity or None, a piece of the message), on rlvr -c default (no Gym)
    "val:accuracy": (None, ""),
    "val:pass_k": (None, ""),  # the recipe validates 2 generations per prompt
    "val_reward": ("error", "the old form: now 'val:reward'"),
    "val:acurracy": ("error", "'Metric acurracy not found in val metrics'"),
    "val:total_reward/mean": ("error", "NeMo RL's validation reports accuracy, avg_length, pass_k"),
    "train:loss": (None, ""),
    "train:token_mult_prob_error": ("warning", "added at run time"),
}


@pytest.mark.parametrize("value", list(METRICS))
def test_checkpoint_metric_name_rule(value):
    _, _, problems = checked("rlvr", "default", {"checkpointing.metric_name": value})
    found = [p for p in problems if p.rule == "nemo-rl-metric"]
    severity, text = METRICS[value]
    if severity is None:
        assert not found, [p.render() for p in found]
    else:
        assert [p.severity for p in found] == [severity] and text in found[0].render(), [p.render() for p in found]


def test_a_gym_metric_name_is_a_warning_with_gym():
    _, _, problems = checked("rlvr", "teacher-rlhf", {"checkpointing.metric_name": "val:total_reward/mean"})
    assert [p.severity for p in problems if p.rule == "nemo-rl-metric"] == ["warning"]


# ------------------------------------------------------------------------------------------ the output checkpoint
def _nemo_rl_steps(ckdir: Path, steps: list[int]) -> None:
    """The folders NeMo RL's CheckpointManager and policy save leave (tests/contract/test_nemo_rl.py makes them
    with the real CheckpointManager): step_N/{training_info.json, config.yaml, policy/weights/iter_0000000,
    policy/tokenizer}, plus a save in progress (tmp_step_M)."""
    for n in steps:
        step = ckdir / f"step_{n}"
        (step / "policy" / "weights" / "iter_0000000").mkdir(parents=True)
        (step / "policy" / "tokenizer").mkdir(parents=True)
        (step / "policy" / "tokenizer" / "tokenizer.json").write_text("{}")
        (step / "training_info.json").write_text("{}")
        (step / "config.yaml").write_text("policy: {model_name: /x, tokenizer: {name: /x}}\n")
    (ckdir / f"tmp_step_{max(steps) + 1}").mkdir()


def test_finish_converts_the_newest_step_and_records_the_hf_folder(tmp_path, monkeypatch):
    """After NeMo RL exits 0: NeMo RL's converter (here: a stand-in for its run, which needs Megatron-Bridge and
    the step's weights) writes step_N's Hugging Face form to hf/step_N; the tokenizer NeMo RL saved with the step
    is copied in, hf/latest points at it, and outputs.json records it as the run's artifact; a resubmitted job
    that finds the folder converted does not convert again."""
    monkeypatch.setenv("NEMOTRON_RUN_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    ck = tmp_path / "ckpt"
    _nemo_rl_steps(ck, [2, 10, 9])
    cfg, _, _ = checked("rlvr", "tiny", {"checkpointing.checkpoint_dir": str(ck)})
    calls = []

    def converter(cmd, cwd):
        calls.append(cmd)
        out = Path(cmd[cmd.index("--hf-ckpt-path") + 1])
        out.mkdir(parents=True)
        (out / "config.json").write_text(json.dumps({"model_type": "nemotron_h"}))
        (out / "model.safetensors").write_bytes(b"w")
        return 0

    root = tmp_path / "RL"
    assert nemo_rl.finish(cfg, "ultra3 rlvr", root, run=converter) == 0
    assert len(calls) == 1 and calls[0][1] == str(root / "examples" / "converters" / "convert_megatron_to_hf.py")
    assert calls[0][calls[0].index("--megatron-ckpt-path") + 1] == str(ck / "step_10" / "policy" / "weights" / "iter_0000000")
    hf = ck / "hf" / "step_10"
    assert (hf / "config.json").is_file() and (hf / "tokenizer.json").is_file()
    assert (ck / "hf" / "latest").resolve() == hf.resolve()
    outputs = json.loads((tmp_path / "run" / "outputs.json").read_text())
    assert outputs == {"rl-checkpoint": {"path": str(hf), "step": 10, "checkpoint_dir": str(ck),
                                         "source": str(ck / "step_10")}}
    assert nemo_rl.finish(cfg, "ultra3 rlvr", root, run=converter) == 0 and len(calls) == 1  # already converted


def test_finish_after_a_deadline_stop_records_nothing_and_exits_75(tmp_path, monkeypatch, capsys):
    """NeMo RL saves and exits 0 at checkpointing.checkpoint_must_save_by: a newest step below grpo.max_num_steps is
    a resumable stop (75, requeue marker written, nothing converted or recorded); the job that resumes and reaches
    max_num_steps records; a resumed job that adds no step records the step it has (the data ran out)."""
    monkeypatch.setenv("NEMOTRON_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("NEMOTRON_REQUEUE_MARKER", str(tmp_path / "requeue.marker"))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    (tmp_path / "run").mkdir()
    ck = tmp_path / "ckpt"
    _nemo_rl_steps(ck, [5])
    cfg, _, _ = checked("rlvr", "tiny", {"checkpointing.checkpoint_dir": str(ck), "grpo.max_num_steps": 10,
                                         "checkpointing.checkpoint_must_save_by": "00:03:30:00"})
    calls = []

    def converter(cmd, cwd):
        calls.append(cmd)
        out = Path(cmd[cmd.index("--hf-ckpt-path") + 1])
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return 0

    assert nemo_rl.finish(cfg, "ultra3 rlvr", tmp_path, run=converter) == 75
    assert calls == [] and not (tmp_path / "run" / "outputs.json").exists() and not (ck / "hf" / "latest").exists()
    assert "saved step 5 of grpo.max_num_steps=10" in (tmp_path / "requeue.marker").read_text()
    assert "next job of this run resumes from step_5" in capsys.readouterr().out
    # the next job resumes and reaches max_num_steps
    _nemo_rl_steps(ck, [10])
    assert nemo_rl.finish(cfg, "ultra3 rlvr", tmp_path, run=converter) == 0
    assert json.loads((tmp_path / "run" / "outputs.json").read_text())["rl-checkpoint"]["step"] == 10
    # a resumed job that saved no later step: the step it has is the result
    ck2 = tmp_path / "ckpt2"
    _nemo_rl_steps(ck2, [4])
    cfg2 = {**cfg, "checkpointing": {**cfg["checkpointing"], "checkpoint_dir": str(ck2)}}
    assert nemo_rl.finish(cfg2, "ultra3 rlvr", tmp_path, run=converter) == 75
    assert nemo_rl.finish(cfg2, "ultra3 rlvr", tmp_path, run=converter) == 0
    # without a deadline, NeMo RL's own ends below max_num_steps (epochs) are recorded as before
    ck3 = tmp_path / "ckpt3"
    _nemo_rl_steps(ck3, [3])
    cfg3 = {**cfg, "checkpointing": {**cfg["checkpointing"], "checkpoint_dir": str(ck3),
                                     "checkpoint_must_save_by": None}}
    assert nemo_rl.finish(cfg3, "ultra3 rlvr", tmp_path, run=converter) == 0


#: A stand-in for NeMo RL's entry (a real child process: the entry itself needs Ray and GPUs): it prints what
#: grpo_train prints at the stop given as argv[1] (the lines tests/contract/test_nemo_rl_stops.py renders with NeMo
#: RL's own code), with a progress bar's carriage returns around it, and exits 0.
_ENTRY = r"""
import sys
print("Saving checkpoint for step 5...", flush=True)
sys.stdout.write("step 5/10 \r step 6/10 \r\n")
line = {"validation": "Validation accuracy reached the early-stop threshold (0.9100 >= 0.9); stopping training",
        "timeout": "Timeout has been reached, stopping training early"}.get(sys.argv[1])
if line:
    print(line, flush=True)
print("done", flush=True)
"""


@pytest.mark.parametrize("which,reason", [("validation", nemo_rl.VALIDATION_STOP), ("timeout", nemo_rl.DEADLINE),
                                          ("epochs", None)])
def test_run_entry_passes_the_output_through_and_reads_how_nemo_rl_stopped(tmp_path, which, reason):
    import io

    script = tmp_path / "entry.py"
    script.write_text(_ENTRY)
    out = io.BytesIO()
    code, seen = nemo_rl.run_entry([sys.executable, str(script), which], str(tmp_path), out=out)
    assert (code, seen) == (0, reason)
    direct = subprocess.run([sys.executable, str(script), which], capture_output=True, cwd=str(tmp_path))
    assert out.getvalue() == direct.stdout  # byte for byte, carriage returns included
    failing = tmp_path / "fail.py"
    failing.write_text("import sys; print('boom'); sys.exit(3)")
    assert nemo_rl.run_entry([sys.executable, str(failing)], str(tmp_path), out=io.BytesIO()) == (3, None)


#: A stand-in for NeMo RL's entry whose Megatron generation engine dies (a real child process): it logs Megatron-Core's
#: engine-death line on standard error, as Ray forwards a worker's log (the line tests/contract/test_nemo_rl_stops.py
#: renders with Megatron-Core's own decorator), then waits as NeMo RL did on one H100 (2026-12-06), or exits 1.
_DYING_ENTRY = r"""
import sys, time
print("Generating responses for batch of size 8...", flush=True)
print("(MegatronPolicyWorker[rank=0] pid=4080) ERROR:megatron.core.utils:utils.py:2960: Exception in async function "
      "run_engine_with_coordinator: No module named 'flash_attn'", file=sys.stderr, flush=True)
if sys.argv[1] == "hang":
    time.sleep(600)
sys.exit(1)
"""


@pytest.mark.parametrize("behaviour", ["hang", "exit"])
def test_run_entry_stops_a_run_that_waits_on_a_dead_inference_engine(tmp_path, behaviour, capsys):
    """NeMo RL's Megatron generation waits forever on an engine that died (no FlashAttention, on one H100): the
    entry is stopped ``grace`` seconds after the line, with exit 1 and one line naming the cause; an entry that ends
    by itself within the grace keeps its own exit code. Standard error is passed through as it is."""
    import io

    script = tmp_path / "entry.py"
    script.write_text(_DYING_ENTRY)
    out, err = io.BytesIO(), io.BytesIO()
    t0 = time.monotonic()
    code, seen = nemo_rl.run_entry([sys.executable, str(script), behaviour], str(tmp_path), out=out, err=err,
                                   grace=1.0)
    took = time.monotonic() - t0
    assert (code, seen) == (nemo_rl.ENGINE_DEATH_EXIT if behaviour == "hang" else 1, None)
    assert b"Exception in async function run_engine_with_coordinator" in err.getvalue()
    assert out.getvalue().startswith(b"Generating responses")
    said = capsys.readouterr().out
    if behaviour == "hang":
        assert took < 60  # not the entry's 600 s
        assert "Megatron-Core's inference engine died (No module named 'flash_attn')" in said
    else:
        assert "inference engine died" not in said


def test_engine_death_reads_only_megatron_cores_engine_loop_line():
    line = ("(MegatronPolicyWorker[rank=0] pid=4080) ERROR:megatron.core.utils:utils.py:2960: Exception in async "
            "function run_engine_with_coordinator: No module named 'flash_attn'\n")
    assert nemo_rl.engine_death(line) == "No module named 'flash_attn'"
    assert nemo_rl.engine_death("Exception in async function run_engine: CUDA out of memory") == "CUDA out of memory"
    # another coroutine's error is not the engine loop's death; an ordinary line is nothing
    assert nemo_rl.engine_death("Exception in async function _notify_cond_for_new_request: x") is None
    assert nemo_rl.engine_death("step 1/4") is None


def test_a_validation_metric_stop_below_max_num_steps_is_recorded_not_requeued(tmp_path, monkeypatch, capsys):
    """With checkpointing.checkpoint_must_save_by and grpo.stop_at_validation_metric both set, NeMo RL's early stop
    at step 5 of 10 exits 0 and leaves step_5 like a deadline stop does; the line it prints tells them apart: the
    early stop is recorded (exit 0), the deadline stop requeued (75), and an unread output keeps the deadline
    reading (75)."""
    monkeypatch.setenv("NEMOTRON_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("NEMOTRON_REQUEUE_MARKER", str(tmp_path / "requeue.marker"))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    (tmp_path / "run").mkdir()

    def converter(cmd, cwd):
        out = Path(cmd[cmd.index("--hf-ckpt-path") + 1])
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return 0

    script = tmp_path / "entry.py"
    script.write_text(_ENTRY)
    import io

    results = {}
    for which in ("validation", "timeout", None):
        ck = tmp_path / f"ckpt-{which}"
        _nemo_rl_steps(ck, [5])
        cfg, _, _ = checked("rlvr", "tiny", {"checkpointing.checkpoint_dir": str(ck), "grpo.max_num_steps": 10,
                                             "checkpointing.checkpoint_must_save_by": "00:03:30:00",
                                             "grpo.stop_at_validation_metric": "accuracy",
                                             "grpo.stop_at_validation_threshold": 0.9})
        stopped = None
        if which:
            code, stopped = nemo_rl.run_entry([sys.executable, str(script), which], str(tmp_path), out=io.BytesIO())
            assert code == 0
        results[which] = (nemo_rl.finish(cfg, "ultra3 rlvr", tmp_path, run=converter, stopped=stopped),
                          (ck / "hf" / "latest").exists())
    assert results == {"validation": (0, True), "timeout": (75, False), None: (75, False)}
    said = capsys.readouterr().out
    assert "NeMo RL stopped at step 5 of grpo.max_num_steps=10 because grpo.stop_at_validation_metric=accuracy" in said
    assert json.loads((tmp_path / "run" / "outputs.json").read_text())["rl-checkpoint"]["step"] == 5


def test_a_run_without_checkpoints_is_refused_at_dry_run():
    _, _, problems = checked("rlvr", "tiny", {"checkpointing.enabled": False})
    assert [p.rule for p in errors(problems)] == ["rl-output"]


def test_finish_without_a_step_or_with_a_failed_converter_exits_non_zero(tmp_path, capsys):
    cfg, _, _ = checked("rlvr", "tiny", {"checkpointing.checkpoint_dir": str(tmp_path / "none")})
    assert nemo_rl.finish(cfg, "ultra3 rlvr", tmp_path, run=lambda c, w: 0) == 1
    assert "without a step_N checkpoint" in capsys.readouterr().err
    _nemo_rl_steps(tmp_path / "ck", [3])
    cfg, _, _ = checked("rlvr", "tiny", {"checkpointing.checkpoint_dir": str(tmp_path / "ck")})
    assert nemo_rl.finish(cfg, "ultra3 rlvr", tmp_path, run=lambda c, w: 3) == 3
    assert not (tmp_path / "ck" / "hf" / "step_3").exists()


def test_the_recorded_hf_checkpoint_feeds_the_next_stage(tmp_path, monkeypatch):
    """rlvr's record (planned hf/latest, updated from outputs.json to hf/step_N) is what mopd's student and general
    teacher resolve to, and the run's checks accept it: a folder with a config.json."""
    from nemotron.config import artifacts
    from nemotron.launch.plan import planned_outputs

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    ck = tmp_path / "ckpt"
    planned = planned_outputs(compiled("rlvr", "default", {"checkpointing.checkpoint_dir": str(ck)}))
    assert planned["rl-checkpoint"]["path"] == str(ck / "hf" / "latest")
    hf = ck / "hf" / "step_128"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"model_type": "nemotron_h", "hybrid_override_pattern": "ME*E"}))
    actual = json.dumps({"rl-checkpoint": {"path": str(hf), "step": 128}})
    for name, fields in artifacts.merge_outputs(planned, actual).items():
        artifacts.record(name, {**fields, "config": "default"})
    cfg, _, problems = checked("mopd", "default", {"data.train.data_path": str(tmp_path / "t.jsonl"),
                                                  "data.validation.data_path": str(tmp_path / "v.jsonl")})
    assert cfg["policy"]["model_name"] == str(hf) == cfg["_teachers"]["general"]
    row = json.dumps({"messages": [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "2"}]})
    (tmp_path / "t.jsonl").write_text(row + "\n")
    (tmp_path / "v.jsonl").write_text(row + "\n")  # an empty one is refused while the run validates (rl-validation)
    lines = nemo_rl.precheck(cfg, importable=lambda m: True, gpus=8)
    assert not [line for line in lines if "checkpoint" in line or "config.json" in line], lines


# ------------------------------------------------------------------------------------------ the runtime
def test_translate_drops_our_keys_and_keeps_nemo_rls():
    cfg, _, _ = checked("rlvr", "default")
    out = nemo_rl.translate(cfg)
    assert not set(keys.NEMO_RL_OWN_KEYS) & set(out)
    for section in ("policy", "grpo", "loss_fn", "cluster", "checkpointing", "data", "env", "logger"):
        assert out[section] == cfg[section]
    assert "on_policy_distillation" not in out  # GRPO alone
    kl = keys.load_keylist(_pinned_nemo_rl(), "nemo-rl")
    assert keys.unknown_keys(out, kl, ()) == []  # what NeMo RL receives is all its own keys


def _checkpoint(folder: Path, form: str) -> Path:
    """A Hugging Face checkpoint folder holding a NemotronH config.json (v5 or v4 form) and a weight file."""
    folder.mkdir(parents=True)
    config = {"model_type": "nemotron_h", "hidden_size": 64}
    if form == "v5":
        config["layers_block_type"] = ["linear_attention", "moe", "full_attention", "moe"]
        config["mtp_layers_block_type"] = ["full_attention", "moe"]
    else:
        config.update(hybrid_override_pattern="ME*E", num_hidden_layers=4)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def test_v5_checkpoints_get_v4_views_and_the_config_points_at_them(tmp_path):
    student = _checkpoint(tmp_path / "student", "v5")
    teacher = _checkpoint(tmp_path / "teacher", "v4")
    cfg, _, _ = checked("mopd", "default", {"_teachers.general": str(student), "_teachers.reasoning": str(teacher),
                                           "policy.model_name": str(student)})
    views = nemo_rl.v4_views(cfg, tmp_path / "views")
    assert list(views) == [str(student)]  # the v4 teacher is read as is
    view = Path(views[str(student)])
    v4 = json.loads((view / "config.json").read_text())
    assert v4["hybrid_override_pattern"] == "ME*E" and v4["num_hidden_layers"] == 4
    assert v4["mtp_hybrid_override_pattern"] == "*E" and "layers_block_type" not in v4
    assert (view / "model.safetensors").is_symlink() and (view / "model.safetensors").read_bytes() == b"weights"
    assert "layers_block_type" in json.loads((student / "config.json").read_text())  # the source is untouched
    out = nemo_rl.translate(cfg, views)
    assert out["policy"]["model_name"] == str(view) == out["policy"]["tokenizer"]["name"]
    tmap = out["on_policy_distillation"]["teacher_model_by_agent_name"]
    assert tmap["math"] == str(teacher) and tmap[nemo_rl.DEFAULT_TEACHER_ALIAS] == str(view)


def test_precheck_says_each_problem_in_one_line(tmp_path):
    cfg, _, _ = checked("rlvr", "tiny", {"policy.model_name": str(tmp_path / "missing")})
    lines = nemo_rl.precheck(cfg, importable=lambda m: False, gpus=4, host_memory=lambda: (10**12, "a 1 TB node"))
    assert len(lines) == 4 and all("\n" not in line for line in lines)
    assert lines[0].startswith("NeMo RL not available: nemo_rl is not importable here")
    assert lines[1].startswith("NeMo RL not available: vllm is not importable here")
    assert lines[2] == f"policy.model_name={tmp_path / 'missing'}: no such checkpoint folder on this node"
    assert lines[3].startswith("cluster.gpus_per_node=8: this node shows 4 GPU(s)")
    ckpt = _checkpoint(tmp_path / "ckpt", "v4")
    cfg, _, _ = checked("rlvr", "tiny", {"policy.model_name": str(ckpt)})
    assert nemo_rl.precheck(cfg, importable=lambda m: True, gpus=8, host_memory=lambda: (10**12, "a 1 TB node")) == []
    # the 4-layer slice's export holds 35.8 B x 2 bytes = 72 GB: a 64 GB node is refused before NeMo RL trains
    [line] = nemo_rl.precheck(cfg, importable=lambda m: True, gpus=8, host_memory=lambda: (64 * 10**9, "a 64 GB node"))
    assert "= 72 GB of host RAM" in line and "more than the 64 GB of a 64 GB node" in line


def test_precheck_requires_the_generation_backend_the_config_names(tmp_path):
    """vLLM is required only when NeMo RL generates with it: ``policy.generation.backend: megatron`` (NeMo RL's
    Megatron generation, the one-GPU run of bench/gpu_rl.py) needs Megatron-Bridge instead, sglang needs SGLang."""
    ckpt = _checkpoint(tmp_path / "ckpt", "v4")
    ram = lambda: (10**12, "a 1 TB node")  # noqa: E731
    absent = {"vllm", "sglang"}
    have = lambda m: m not in absent  # noqa: E731
    by_backend = {}
    for backend in ("vllm", "megatron", "sglang"):
        cfg, _, _ = checked("rlvr", "tiny", {"policy.model_name": str(ckpt), "policy.generation.backend": backend})
        by_backend[backend] = nemo_rl.precheck(cfg, importable=have, gpus=8, host_memory=ram)
    assert by_backend["megatron"] == []
    assert [line.split(";")[0] for line in by_backend["vllm"]] == ["NeMo RL not available: vllm is not importable here"]
    assert [line.split(";")[0] for line in by_backend["sglang"]] == ["NeMo RL not available: sglang is not importable here"]
    cfg, _, _ = checked("rlvr", "tiny", {"policy.model_name": str(ckpt), "policy.generation.backend": "megatron"})
    [line] = nemo_rl.precheck(cfg, importable=lambda m: m != "megatron.bridge", gpus=8, host_memory=ram)
    assert line.startswith("NeMo RL not available: megatron.bridge is not importable here")
    assert nemo_rl.generation_modules({"policy": {"generation": {}}}) == ("vllm",)  # NeMo RL's default backend


#: A FlashAttention 2 that Megatron-Core's dynamic batching accepts (NeMo RL's mcore extra pins 2.8.1), no FA4.
FA_OK = {"flash-attn": "2.8.1", "flash-attn-4": None}


def test_megatron_generation_requires_flashinfer_and_a_flash_attention(tmp_path):
    """``policy.generation.backend: megatron`` runs Megatron-Core's dynamic engine, which needs ``flashinfer``
    (fused RoPE for a 16-bit policy) and FlashAttention 2 >= 2.7.3, FA3 or FA4 (the two stops of the
    2026-12-06 GPU run): each missing one is one line with its fix; vLLM and SGLang runs are not asked for either."""
    ckpt = _checkpoint(tmp_path / "ckpt", "v4")
    ram = lambda: (10**12, "a 1 TB node")  # noqa: E731
    cfg, _, _ = checked("rlvr", "tiny", {"policy.model_name": str(ckpt), "policy.generation.backend": "megatron"})
    assert cfg["policy"]["precision"] == "bfloat16"
    no_fa3 = lambda m: m.split(".")[0] not in ("flash_attn_3", "flashattn_hopper")  # noqa: E731

    def run(importable=no_fa3, installed=FA_OK, c=cfg):
        return nemo_rl.precheck(c, importable=importable, gpus=8, host_memory=ram, installed=installed)

    assert run() == []
    [line] = run(importable=lambda m: no_fa3(m) and m != "flashinfer")
    assert line.startswith("policy.generation.backend=megatron with policy.precision=bfloat16: flashinfer is not "
                           "importable here")
    assert "fused RoPE" in line and "install flashinfer-python" in line and "0.6.8.post1" in line
    assert "\n" not in line
    fp16 = {**cfg, "policy": {**cfg["policy"], "precision": "float16"}}
    assert len(run(importable=lambda m: m != "flashinfer", c=fp16)) == 1
    # float32: no fused RoPE; NeMo RL's Megatron-Core (14346b6) then samples with torch when flashinfer is absent
    fp32 = {**cfg, "policy": {**cfg["policy"], "precision": "float32"}}
    assert run(importable=lambda m: m != "flashinfer", c=fp32) == []
    # FlashAttention: FA2 below 2.7.3 is refused naming its version; none at all names what was looked for
    [line] = run(installed={"flash-attn": "2.7.2", "flash-attn-4": None})
    assert line.startswith("policy.generation.backend=megatron: Megatron-Core's dynamic batching")
    assert "flash-attn 2.7.2 is installed, below 2.7.3" in line and "install flash-attn>=2.7.3" in line
    [line] = run(installed={"flash-attn": None, "flash-attn-4": None})
    assert "none is installed here (neither flash-attn nor flash-attn-4, nor flash_attn_3 / flashattn_hopper)" in line
    # FA4: a beta at or past the minimum is enough, an older one is refused by name; FA3 is enough alone
    assert run(installed={"flash-attn": None, "flash-attn-4": nemo_rl.FA4_MIN_VERSION}) == []
    assert run(installed={"flash-attn": None, "flash-attn-4": "4.0.0b36"}) == []
    [line] = run(installed={"flash-attn": None, "flash-attn-4": "4.0.0b5"})
    assert f"flash-attn-4 4.0.0b5 is installed, below {nemo_rl.FA4_MIN_VERSION}" in line
    assert run(importable=lambda m: m != "flashattn_hopper.flash_attn_interface",
               installed={"flash-attn": "2.6.3", "flash-attn-4": None}) == []  # flash_attn_3 present
    assert run(importable=lambda m: m != "flash_attn_3.flash_attn_interface",
               installed={"flash-attn": None, "flash-attn-4": None}) == []  # flashattn_hopper present
    # 2.7.3 itself passes (Megatron-Core's is_fa_min_version compares with >=); a version that does not parse fails
    assert run(installed={"flash-attn": "2.7.3", "flash-attn-4": None}) == []
    assert len(run(installed={"flash-attn": "two", "flash-attn-4": None})) == 1
    # both missing: two lines; vLLM and SGLang are not asked for either (their own engines)
    assert len(run(importable=lambda m: no_fa3(m) and m != "flashinfer", installed={})) == 2
    for backend in ("vllm", "sglang"):
        other, _, _ = checked("rlvr", "tiny", {"policy.model_name": str(ckpt), "policy.generation.backend": backend})
        assert run(importable=lambda m: no_fa3(m) and m != "flashinfer", installed={}, c=other) == []


def test_megatron_generation_reads_installed_versions_without_importing(tmp_path, monkeypatch):
    """Without ``installed`` the precheck reads the FlashAttention versions from the distributions' metadata
    (importlib.metadata): a real ``flash-attn`` 2.5.0 dist-info folder on ``sys.path`` is refused by its
    version, without any ``flash_attn`` module to import."""
    import sys

    site = tmp_path / "site"
    dist = site / "flash_attn-2.5.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.5.0\n")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    cfg = {"policy": {"generation": {"backend": "megatron"}, "precision": "bfloat16"}}
    [line] = nemo_rl.megatron_generation_problems(cfg, importable=lambda m: m == "flashinfer")
    assert "flash-attn 2.5.0 is installed, below 2.7.3" in line
    assert "flash_attn" not in sys.modules


def nemotron_src() -> str:
    """The folder this test imports ``nemotron`` from, so that a child Python runs the same source."""
    import nemotron

    return str(Path(nemotron.__file__).resolve().parents[1])


def test_entry_script_fails_with_one_clear_line_here(tmp_path):
    """The real stage entry (stages/ultra3/rlvr/run.py) on this machine, which has no NeMo RL: exit 1, the
    'NeMo RL not available' line, no traceback."""
    ckpt = _checkpoint(tmp_path / "ckpt", "v5")
    cfg, _, _ = checked("rlvr", "tiny", {"policy.model_name": str(ckpt)})
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, str(STAGES / "rlvr" / "run.py"), "--config", str(path)],
                          capture_output=True, text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin",
                                                                           "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
                                                                           # the source under test, as imported here
                                                                           "PYTHONPATH": nemotron_src()})
    assert proc.returncode == 1
    # and, on a machine with less RAM than the slice's export holds (72 GB), the rl-export-host-memory line
    memory = [f"ultra3 rlvr: {line}" for line in nemo_rl.export_memory_problems(cfg)]
    assert proc.stderr.splitlines() == [
        ("ultra3 rlvr: NeMo RL not available: nemo_rl is not importable here; this stage runs inside the NeMo RL "
         "container (image nemo-rl:main-ultra)"),
        ("ultra3 rlvr: NeMo RL not available: vllm is not importable here; this stage runs inside the NeMo RL "
         "container (image nemo-rl:main-ultra)")] + memory
    assert "Traceback" not in proc.stdout + proc.stderr


# ------------------------------------------------------------------------------------------ real Slurm
def _slurm_ray_launch_ready() -> bool:
    """Whether this tree can submit Ray stages to Slurm yet (another change brings NeMo-Run's Ray-on-Slurm
    launch; until then the plan renders 'NOT SUBMITTABLE YET')."""
    text = (ROOT / "src" / "nemotron" / "launch" / "submit.py").read_text()
    return "NOT SUBMITTABLE YET" not in text


@pytest.mark.xfail(not _slurm_ray_launch_ready(), strict=False,
                   reason="waits on the Ray-on-Slurm launch through NeMo-Run (submit.py renders Ray stages "
                          "'NOT SUBMITTABLE YET' until it lands)")
def test_rlvr_submitted_to_slurm_reaches_the_entry_and_fails_clearly(slurm, tmp_path):
    """`nemotron ultra3 rlvr -c tiny --run ci` against the real local Slurm (8 GPUs declared, no
    containers): the job starts the Ray cluster, the entry script runs and stops at its checks with
    'NeMo RL not available'; the command exits non-zero."""
    pytest.importorskip("nemo_run")
    from submit_support import nemotron_runner, write_slurm_profile

    jobs = tmp_path / "jobs"
    env_file = write_slurm_profile(tmp_path / "env.toml", account=slurm.account, partition=slurm.partition,
                                   gpus_per_node=slurm.gpus_per_node, job_dir=jobs,
                                   extra=f'image_cache = "{tmp_path / "images"}"')
    ckpt = _checkpoint(tmp_path / "ckpt", "v5")
    data = tmp_path / "rl"
    data.mkdir()
    for name in ("train.jsonl", "validation.jsonl"):
        (data / name).write_text('{"messages": [{"role": "user", "content": "1+1?"}], "answer": "2"}\n')
    cli = nemotron_runner({**slurm.env, "NEMOTRON_HOME": str(tmp_path / "home")}, tmp_path)
    proc = cli("ultra3", "rlvr", "-c", "tiny", "--run", "ci", "--env-file", str(env_file), f"policy.model_name={ckpt}",
               f"data.train.data_path={data / 'train.jsonl'}", f"data.validation.data_path={data / 'validation.jsonl'}",
               timeout=400)
    text = proc.stdout + proc.stderr
    for log in jobs.rglob("*.log"):
        text += log.read_text(errors="replace")
    for log in jobs.rglob("*.out"):
        text += log.read_text(errors="replace")
    assert proc.returncode == 1, text[-3000:]
    assert "ended FAILED (exit code 1" in proc.stderr, text[-3000:]
    assert "NeMo RL not available: nemo_rl is not importable here" in proc.stderr, text[-3000:]
    assert "NeMo RL not available: vllm is not importable here" in proc.stderr
    # the other checks held inside the job: the checkpoint was seen and Slurm gave the node's 8 GPUs
    assert "policy.model_name=" not in text and "cluster.gpus_per_node" not in text
    assert "Traceback" not in text


# ------------------------------------------------------------------------------------------ golden NeMo RL configs
GOLDEN_NEMO_RL = [("rlvr", "default"), ("rlvr", "phase2"), ("rlvr", "tiny"), ("rlvr", "teacher-reasoning"),
                  ("rlvr", "teacher-rlhf"), ("rlvr", "teacher-swe"), ("mopd", "default"), ("mopd", "tiny"),
                  ("mopd", "full-panel")]


@pytest.mark.parametrize(("stage", "config"), GOLDEN_NEMO_RL, ids=[f"{s}-{c}" for s, c in GOLDEN_NEMO_RL])
def test_golden_nemo_rl_config(stage, config, monkeypatch):
    """What NeMo RL's GRPO entry receives for each shipped config (translated, after validation's
    preparation), against tests/golden/nemo-rl/; regenerate with NEMOTRON_REGEN_GOLDEN=1 and read the diff."""
    import os

    monkeypatch.setenv("NEMOTRON_CKPT_ROOT", "/ckpt")
    monkeypatch.setenv("NEMOTRON_GENRM_MODEL", "/ckpt/genrm")
    monkeypatch.setenv("NEMOTRON_SWE_SIF_DIR", "/sif")
    overrides = {"policy.model_name": "/ckpt/student"}
    if config in ("default", "phase2", "tiny", "teacher-reasoning"):
        overrides.update({"data.train.data_path": "/data/rl/train.jsonl",
                          "data.validation.data_path": "/data/rl/validation.jsonl"})
    if config in ("teacher-rlhf", "teacher-swe"):  # NeMo Gym rows: the artifact rl-blend-<slot> (data prep rl -c ultra-blends)
        slot = config.removeprefix("teacher-")
        overrides.update({"data.train.data_path": f"/data/{slot}/train.jsonl",
                          "data.validation.data_path": f"/data/{slot}/validation.jsonl"})
    if stage == "mopd":
        overrides.update({"_teachers.general": "/ckpt/student", "data.train.data_path": "/data/rl/train.jsonl",
                          "data.validation.data_path": "/data/rl/validation.jsonl"})
        if config == "full-panel":
            overrides.update({f"_teachers.{s}": f"/ckpt/teacher-{s}" for s in ("rlhf", "ifbench", "reasoning", "swe")})
    c = compiled(stage, config, overrides)
    assert not c.unresolved, c.unresolved
    validation.prepare(get_stage(stage), c.config, c.user_keys, B200 if config != "tiny" else H200)
    text = yaml.safe_dump(nemo_rl.translate(c.config), sort_keys=False, width=120)
    path = ROOT / "tests" / "golden" / "nemo-rl" / f"{stage}-{config}.yaml"
    if os.environ.get("NEMOTRON_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path.name}; run with NEMOTRON_REGEN_GOLDEN=1 to create it"
    assert text == path.read_text(encoding="utf-8"), f"the NeMo RL config of {stage} -c {config} changed; diff it " \
                                                     f"against {path} (regenerate if intended)"


# ------------------------------------------------------------------------------------------ MOPD rows for NeMo Gym
GSM8K = ROOT.parent / "shared" / "data" / "rl" / "gsm8k-train.jsonl"


def _compiled(stage: str, config: str, overrides: list[str]) -> dict:
    from nemotron.config.compile import compile_config

    return compile_config(get_stage(stage), config, overrides, check_paths=False).config


def test_gym_rows_turn_data_prep_rl_records_into_nemo_gym_rows_with_agent_ref(tmp_path):
    """Real GSM8K problems, in data prep rl's form, become NeMo Gym rows whose agent_ref names the verifier's agent;
    the mopd job points NeMo RL's data paths at them."""
    if not GSM8K.is_file():
        pytest.skip(f"{GSM8K} is absent (../shared/data)")
    from nemotron.data import rl as rl_data

    src = tmp_path / "train.jsonl"
    with GSM8K.open(encoding="utf-8") as f, src.open("w", encoding="utf-8") as w:
        for line in list(f)[:5]:
            problem, answer, _ = rl_data.extract(json.loads(line), "gsm8k")
            w.write(json.dumps({"messages": [{"role": "user", "content": problem},
                                             {"role": "assistant", "content": answer}]}) + "\n")
    cfg = _compiled("mopd", "tiny", [f"data.train.data_path={src}", f"data.validation.data_path={src}"])
    assert nemo_rl.gym_agent(cfg) == "math_with_judge_simple_agent"
    views = nemo_rl.gym_data(cfg, tmp_path / "gym")
    assert views == {str(src): str(tmp_path / "gym" / "train.jsonl")}
    rows = [json.loads(x) for x in (tmp_path / "gym" / "train.jsonl").read_text().splitlines()]
    first = json.loads(GSM8K.read_text().splitlines()[0])
    assert len(rows) == 5
    assert rows[0]["agent_ref"] == {"type": "responses_api_agents", "name": "math_with_judge_simple_agent"}
    assert rows[0]["responses_create_params"]["input"] == [{"role": "user", "content": first["question"]}]
    assert rows[0]["expected_answer"] == first["answer"].split("####")[-1].strip()
    master = nemo_rl.translate(cfg, None, views)
    assert master["data"]["train"]["data_path"] == str(tmp_path / "gym" / "train.jsonl")
    assert master["env"]["nemo_gym"]["config_paths"] == [
        nemo_rl.GYM_POLICY_MODEL, "resources_servers/math_with_judge/configs/math_with_judge.yaml"]
    # the routing the runtime writes sends those rows to the reasoning slot's checkpoint
    tmap, _ = nemo_rl.teacher_map({**cfg, "_teachers": {**cfg["_teachers"], "reasoning": "/ckpt/r"}})
    assert tmap["math_with_judge_simple_agent"] == "/ckpt/r"


def test_gym_rows_name_the_file_and_line_of_a_bad_record_and_leave_nothing(tmp_path):
    src = tmp_path / "train.jsonl"
    src.write_text('{"messages": [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}]}\n'
                   '{"question": "no messages"}\n')
    with pytest.raises(nemo_rl.ConfigError, match=rf"{src}:2: not a data prep rl record"):
        nemo_rl.gym_rows(src, tmp_path / "out" / "train.jsonl", "math_with_judge_simple_agent")
    assert not list((tmp_path / "out").iterdir())
    with pytest.raises(nemo_rl.ConfigError, match="RL data file not found"):
        nemo_rl.gym_rows(tmp_path / "absent.jsonl", tmp_path / "out" / "x.jsonl", "a")


@pytest.mark.parametrize("config", ["default", "tiny", "full-panel"])
def test_shipped_mopd_routes_opd_through_nemo_gym_rows(config):
    """Rule nemo-rl-opd-routing holds for every shipped MOPD config, and refuses the native math path."""
    from nemotron.validation.nemo_rl import opd_routing

    cfg = _compiled("mopd", config, ["data.train.data_path=/d/t.jsonl", "data.validation.data_path=/d/v.jsonl",
                                     "_teachers.general=/ckpt/s"])
    assert opd_routing(nemo_rl.translate(cfg)) == []
    native = nemo_rl.translate(cfg)
    native["env"]["should_use_nemo_gym"] = False
    assert [p.key for p in opd_routing(native)] == ["env.should_use_nemo_gym"]
    native["env"]["should_use_nemo_gym"] = True
    native["data"]["default"]["processor"] = "math_hf_data_processor"
    assert [p.key for p in opd_routing(native)] == ["data.default.processor"]
    native["on_policy_distillation"]["enabled"] = False
    assert "on_policy_distillation.enabled" in [p.key for p in opd_routing(native)]


@pytest.mark.parametrize("stage,config", [("rlvr", "tiny"), ("rlvr", "default"), ("mopd", "tiny")])
def test_null_for_a_key_nemo_rl_reads_as_a_number_is_refused(stage, config):
    """Rule nemo-rl-null: null where NeMo RL declares a plain int (grpo.num_prompts_per_step sizes every step,
    cluster.num_nodes the Ray cluster) is named; every shipped config has none; an Optional key may stay null."""
    from nemotron.validation.nemo_rl import null_values

    from nemotron.validation import framework_version

    kl = keys.load_keylist(framework_version("nemo-rl", "nemo_rl") or "", "nemo-rl")
    extra = ["data.train.data_path=/d/t.jsonl", "data.validation.data_path=/d/v.jsonl"] + (
        ["_teachers.general=/ckpt/s"] if stage == "mopd" else [])
    cfg = _compiled(stage, config, extra)
    master = nemo_rl.translate(cfg)
    assert null_values(master, kl) == []
    master["grpo"]["num_prompts_per_step"] = None
    master["cluster"]["num_nodes"] = None
    master["loss_fn"]["ratio_clip_c"] = None  # Optional[float]: null is NeMo RL's "off"
    found = null_values(master, kl)
    assert sorted(p.key for p in found) == ["cluster.num_nodes", "grpo.num_prompts_per_step"]
    assert all(p.rule == "nemo-rl-null" and "NeMo RL declares it int" in p.message for p in found)
