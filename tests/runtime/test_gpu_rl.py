"""bench/gpu_rl.py (the cluster RLVR route on one GPU: NeMo RL's GRPO with Megatron generation), the parts that run
without a GPU: the one-GPU config through our compiler and dry-run rules, the MTP override, the parsing of NeMo RL's
per-step log lines, and the summary of what a run left. NeMo RL's own checks of the same config:
tests/contract/test_nemo_rl.py (variants ``rlvr-tiny-1gpu`` and ``mopd-tiny-1gpu``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nemotron import validation
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.profiles.profile import from_table

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import gpu_rl  # noqa: E402

#: the lent machine: one node of one H100
H100X1 = from_table("h100x1", {"executor": "slurm", "gpus_per_node": 1, "gpu_arch": "hopper", "gpu_memory": 80.0})


def _validate(overrides: list[str]):
    stage = get_stage("rlvr")
    c = compile_config(stage, "tiny", overrides, check_paths=False)
    validation.prepare(stage, c.config, c.user_keys, H100X1)
    return c.config, [p for p in validation.validate(stage, c.config, H100X1) if p.severity == "error"
                      and p.rule != "input-exists"]  # the paths are made on the GPU machine


def test_the_one_gpu_config_validates_with_megatron_generation_and_no_vllm_rules(tmp_path):
    """The dry-run's rules on one H100: no error. Megatron generation runs on the training layout, so tiny's 8-GPU
    vLLM engine settings (vllm_cfg TP 8, EP 8, still in the config) are not checked; the same config with the vLLM
    backend is refused on them."""
    args = gpu_rl.rl_overrides(tmp_path / "base", tmp_path / "data", tmp_path / "ckpt", 0)
    cfg, errors = _validate(args)
    assert errors == [], [p.render() for p in errors]
    assert cfg["policy"]["generation"]["backend"] == "megatron"
    assert cfg["policy"]["generation"]["vllm_cfg"]["tensor_parallel_size"] == 8  # tiny's, unread by megatron
    assert cfg["cluster"]["num_nodes"] == cfg["cluster"]["gpus_per_node"] == 1
    assert "mtp_num_layers" not in cfg["policy"]["megatron_cfg"]  # the fresh base has no MTP block
    assert cfg["data"]["train"]["data_path"] == str(tmp_path / "data" / "train.jsonl")
    _, vllm = _validate([*args, "policy.generation.backend=vllm"])
    assert {p.key for p in vllm} >= {"policy.generation.vllm_cfg.tensor_parallel_size"}, [p.render() for p in vllm]


def _validate_mopd(overrides: list[str]):
    """``mopd -c tiny`` compiled with ``overrides`` (the teacher and the policy: one path) and validated on one H100."""
    stage = get_stage("mopd")
    args = ["policy.model_name=/ckpt/small", "_teachers.general=/ckpt/small", "data.train.data_path=/d/train.jsonl",
            "data.validation.data_path=/d/validation.jsonl", *overrides]
    c = compile_config(stage, "tiny", args, check_paths=False)
    validation.prepare(stage, c.config, c.user_keys, H100X1)
    return c.config, [p for p in validation.validate(stage, c.config, H100X1) if p.severity == "error"
                      and p.rule != "input-exists"]  # the paths are made on the GPU machine


def test_the_one_gpu_mopd_config_validates_on_two_ray_nodes_and_not_on_one():
    """ONE_GPU_MOPD: no dry-run error on one H100 (two Ray nodes of one GPU: the student's, the teacher's), with the
    Megatron generation server NeMo Gym needs; the same config on one Ray node is refused by the node rule (NeMo RL
    reserves whole nodes for its OPD teachers), and without ``grpo.max_val_samples=null`` by the Gym entry's rule."""
    cfg, errors = _validate_mopd([*gpu_rl.ONE_GPU_MOPD, *gpu_rl.mtp_overrides(0)])
    assert errors == [], [p.render() for p in errors]
    assert cfg["cluster"] == {"num_nodes": 2, "gpus_per_node": 1, "segment_size": None}
    gen = cfg["policy"]["generation"]
    assert gen["backend"] == "megatron" and gen["colocated"]["enabled"] is True
    assert gen["mcore_generation_config"]["expose_http_server"] is True
    teacher = cfg["on_policy_distillation"]["non_colocated_teachers"]["default_teacher_cfg"]
    assert (teacher["num_nodes"], teacher["gpus_per_node"], teacher["expert_model_parallel_size"]) == (1, 1, 1)
    assert cfg["grpo"]["max_val_samples"] is None and cfg["env"]["should_use_nemo_gym"] is True
    _, one_node = _validate_mopd([*gpu_rl.ONE_GPU_MOPD, *gpu_rl.mtp_overrides(0), "run.env.nodes=1"])
    assert {p.rule for p in one_node} == {"rl-node-total"}, [p.render() for p in one_node]
    _, max_val = _validate_mopd([*gpu_rl.ONE_GPU_MOPD, *gpu_rl.mtp_overrides(0), "grpo.max_val_samples=8"])
    assert [p.key for p in max_val] == ["grpo.max_val_samples"], [p.render() for p in max_val]


def test_mtp_depth_of_the_policy_sets_or_removes_mtp_num_layers(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nemotron_h", "num_nextn_predict_layers": 2}))
    assert gpu_rl.mtp_depth(tmp_path) == 2
    assert gpu_rl.mtp_overrides(2) == ["policy.megatron_cfg.mtp_num_layers=2"]
    assert gpu_rl.mtp_depth(tmp_path / "absent") == 0
    assert gpu_rl.mtp_overrides(0) == ["~policy.megatron_cfg.mtp_num_layers"]


#: NeMo RL's GRPO step output as nemo_rl/algorithms/grpo.py 7ea279a prints it (banner ``'=' * 25 Step N/M``, then the
#: "Training Results" block with bullet lines), two steps
LOG = """
========================= Step 1/4 =========================
▶ Generating responses for batch of size 8...

📊 Training Results:
  • Loss: 0.0123
  • Draft Loss: 0.5000
  • Avg Reward: 0.2500
  • Mean Generation Length: 187.5000

========================= Step 2/4 =========================
📊 Training Results:
  • Loss: -0.0040
  • Avg Reward: 0.3750
  • Mean Generation Length: 160.2500
"""


def test_parse_steps_reads_nemo_rls_per_step_lines():
    steps = gpu_rl.parse_steps(LOG)
    assert steps == [{"step": 1, "of": 4, "loss": 0.0123, "reward": 0.25, "mean_generation_length": 187.5},
                     {"step": 2, "of": 4, "loss": -0.004, "reward": 0.375, "mean_generation_length": 160.25}]
    assert gpu_rl.parse_steps("no steps here\n  • Loss: 1.0") == []


def test_summary_names_the_saved_steps_and_the_hf_conversion(tmp_path):
    ckpt = tmp_path / "ckpt"
    for n in (2, 4):
        (ckpt / f"step_{n}").mkdir(parents=True)
    (ckpt / "tmp_step_6").mkdir()  # a save in progress does not count
    hf = ckpt / "hf" / "step_4"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"model_type": "nemotron_h", "num_hidden_layers": 12}))
    (ckpt / "hf" / "latest").symlink_to("step_4")
    s = gpu_rl.summarize(ckpt, LOG, 0, 12.34)
    assert s["rc"] == 0 and s["wall_s"] == 12.3 and s["saved_steps"] == [2, 4]
    assert s["hf"]["latest"] == "step_4" and s["hf"]["config_json"] and s["hf"]["config"]["num_hidden_layers"] == 12
    assert s["reward"] == [0.25, 0.375] and s["loss"] == [0.0123, -0.004]
    empty = gpu_rl.summarize(tmp_path / "none", "", 1, 1.0)
    assert empty["saved_steps"] == [] and empty["hf"] == {"latest": None, "config_json": False, "files": []}


def test_the_import_probe_names_every_missing_module_in_one_pass(tmp_path):
    """bench/import_probe.py (gpu_stack.sh probe / probe-rl): a target that imports two absent packages, one after
    the other, is reported with both, and the exit code says something was missing."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "needs_two.py").write_text("import absent_pkg_one\nimport absent_pkg_two\n")
    probe = Path(__file__).resolve().parents[2] / "bench" / "import_probe.py"
    proc = subprocess.run([sys.executable, str(probe), "--where", "json", "json", str(tmp_path / "needs_two.py")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "[gpu-stack] import json: ok" in lines
    assert [x for x in lines if x.startswith("[gpu-stack] missing for")] == [
        f"[gpu-stack] missing for {tmp_path / 'needs_two.py'}: absent_pkg_one",
        f"[gpu-stack] missing for {tmp_path / 'needs_two.py'}: absent_pkg_two"]
    assert any(x.startswith("[gpu-stack] json: ") for x in lines)
