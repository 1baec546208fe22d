"""``ultra3 mopd-warmup`` (:mod:`nemotron.runtime.rl.warmup`, :mod:`nemotron.runtime.rl.warmup_local`): the settings and
their refusals, the cluster job's SFT config, the dry run's rules, and a whole local run on the real ``small``
NemotronH with real GSM8K prompts (teachers generate, the student is fine-tuned on their answers, its reverse KL to
the teachers is measured before and after, the result recorded as ``mopd-warmup-checkpoint``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl_support import checkpoint, compile_stage, rl_jsonl, tokenizer_folder, write_yaml

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
PANEL = ["_teachers.general=/ckpt/sft", "_teachers.reasoning=/ckpt/rlvr", "policy.model_name=/ckpt/student",
         "warmup.prompts_path=/data/train.jsonl", "warmup.held_out_path=/data/validation.jsonl"]


def test_settings_route_each_task_to_the_mopd_panel():
    from nemotron.runtime.rl import warmup
    from nemotron.runtime.rl.nemo_rl import DEFAULT_TEACHER_ALIAS

    s = warmup.read(compile_stage("mopd-warmup", PANEL, check_paths=False))
    assert s.backend == "local" and s.output_artifact == "mopd-warmup-checkpoint"
    assert s.teachers["math"] == Path("/ckpt/rlvr") and s.teachers[DEFAULT_TEACHER_ALIAS] == Path("/ckpt/sft")
    groups = warmup.generation_groups(s, ["math", None, "chat", "math"])
    assert groups == {"/ckpt/rlvr": [0, 3], "/ckpt/sft": [1, 2]}


@pytest.mark.parametrize("override, message", [
    ("sft.max_num_steps=null", r"^sft.max_num_steps=None: NeMo RL's SFTConfig.max_num_steps is a whole number"),
    ("sft.val_at_end=null", r"^sft.val_at_end=None: NeMo RL's SFTConfig.val_at_end is true/false"),
    ("policy.train_micro_batch_size=3", r"^policy.train_global_batch_size=4: must be a multiple of "
                                        r"policy.train_micro_batch_size=3"),
    ("warmup.max_new_tokens=600", r"^warmup.max_new_tokens=600: must be below policy.max_total_sequence_length=512"),
    ("warmup.temperature=-1", r"^warmup.temperature=-1.0: must be >= 0"),
    ("~warmup.prompts_path", r"^warmup.prompts_path is not set"),
])
def test_settings_refuse_in_one_line_naming_the_key(override, message):
    from nemotron.runtime.common.settings import SettingsError
    from nemotron.runtime.rl import warmup

    cfg = compile_stage("mopd-warmup", [*PANEL, override], check_paths=False)
    with pytest.raises(SettingsError, match=message):
        warmup.read(cfg)


def test_dry_run_rules_refuse_what_the_run_refuses():
    from nemotron import validation
    from nemotron.config.registry import get_stage

    stage = get_stage("mopd-warmup")
    ok = compile_stage("mopd-warmup", PANEL, check_paths=False)
    assert [p for p in validation.validate(stage, ok, None) if p.severity == "error" and p.rule != "local-modules"] == []
    for extra, rule, key in ((["sft.seed=null"], "nemo-rl-sft", "sft.seed"),
                             (["_teachers.general=null"], "mopd-general-teacher", "_teachers.general"),
                             # a count below 1: rule positive-count names it, the reader's restatement is left out
                             (["warmup.num_prompts=0"], "positive-count", "warmup.num_prompts")):
        cfg = compile_stage("mopd-warmup", [*PANEL, *extra], check_paths=False)
        errs = [p for p in validation.validate(stage, cfg, None) if p.severity == "error" and p.rule != "local-modules"]
        assert [(p.rule, p.key) for p in errs] == [(rule, key)], [p.render() for p in errs]


def test_cluster_job_inherits_nemo_rl_sft_and_drops_our_keys():
    from nemotron.runtime.rl import warmup

    cfg = compile_stage("mopd-warmup", ["policy.model_name=/ckpt/student", "warmup.prompts_path=/d/t.jsonl",
                                        "warmup.held_out_path=/d/v.jsonl"], config="default", check_paths=False)
    job = warmup.sft_config(cfg, "/run/warmup-data/train.jsonl", "/opt/nemo-rl")
    assert job["defaults"] == "/opt/nemo-rl/examples/configs/sft.yaml"
    assert not set(warmup.OWN_KEYS) & set(job)
    assert job["data"]["train"] == {"dataset_name": "ResponseDataset", "data_path": "/run/warmup-data/train.jsonl",
                                    "input_key": "input", "output_key": "output"}
    assert job["policy"]["model_name"] == "/ckpt/student" and job["sft"]["max_num_steps"] == 8
    assert cfg["cluster"]["num_nodes"] == cfg["run"]["env"]["nodes"]


def test_sft_steps_count_as_nemo_rl_does():
    from nemotron.runtime.rl.warmup_local import sft_steps

    assert sft_steps(16, 4, 8, 2) == 8      # 4 full batches per epoch x 2 epochs, capped at 8
    assert sft_steps(18, 4, 100, 1) == 4    # the partial batch is dropped
    assert sft_steps(3, 4, 8, 2) == 0


@pytest.fixture(scope="module")
def warm_inputs(module_tmp, shared_data):
    root = module_tmp("warmup")
    tok = tokenizer_folder(root / "tokenizer")
    train, valid = rl_jsonl(root / "data", shared_data, train=16, valid=4)
    return {"student": checkpoint(root / "student", tok, seed=3), "sft": checkpoint(root / "sft", tok, seed=7),
            "rlvr": checkpoint(root / "rlvr", tok, seed=8), "train": train, "valid": valid, "root": root}


@pytest.mark.slow
def test_local_run_generates_fine_tunes_and_moves_the_student_towards_the_teachers(warm_inputs, tmp_path):
    inp = warm_inputs
    ckdir = tmp_path / "warmup"
    cfg = compile_stage("mopd-warmup", [
        f"policy.model_name={inp['student']}", f"_teachers.general={inp['sft']}", f"_teachers.reasoning={inp['rlvr']}",
        f"warmup.prompts_path={inp['train']}", f"warmup.held_out_path={inp['valid']}",
        f"checkpointing.checkpoint_dir={ckdir}", "warmup.num_prompts=8", "warmup.max_new_tokens=16",
        "warmup.kl_prompts=2", "warmup.kl_new_tokens=8", "sft.max_num_steps=6", "sft.max_num_epochs=3",
        "policy.train_global_batch_size=4", "policy.train_micro_batch_size=2", "run.env.cpus=2"])
    (tmp_path / "run").mkdir()
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1",
           "NEMOTRON_RUN_DIR": str(tmp_path / "run")}
    proc = subprocess.run([PY, str(ROOT / "stages/ultra3/mopd_warmup/run.py"), "--config",
                           str(write_yaml(tmp_path / "train.yaml", cfg))], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((ckdir / "summary.json").read_text())
    pairs = [json.loads(x) for x in (ckdir / "warmup-data" / "train.jsonl").read_text().splitlines()]
    # every GSM8K prompt (task math) went to the reasoning teacher, which wrote one response each
    assert len(pairs) == 8 and {p["teacher"] for p in pairs} == {"math"} and all(p["output"] for p in pairs)
    assert summary["steps"] == 6 and summary["examples"] == 8
    assert summary["loss_last"] < summary["loss_first"]
    # the point of warmup: the student's reverse KL to its teacher on held-out prompts goes down
    assert summary["kl_after"] < summary["kl_before"], summary
    assert set(summary["kl_before_by_teacher"]) == {"math"}
    out = ckdir / "hf" / "step_6"
    assert (out / "config.json").is_file() and (ckdir / "hf" / "latest").resolve() == out.resolve()
    recorded = json.loads((tmp_path / "run" / "outputs.json").read_text())  # what the run records
    assert recorded["mopd-warmup-checkpoint"]["path"] == str(out)
    from nemotron.runtime.stage_metrics import collect

    metrics = collect("mopd-warmup", cfg)
    assert metrics["kl_before"] == summary["kl_before"] and metrics["kl_after"] == summary["kl_after"]
    assert "reverse KL to the teachers" in proc.stdout


def test_local_run_names_a_missing_teacher_in_one_line(warm_inputs, tmp_path):
    inp = warm_inputs
    cfg = compile_stage("mopd-warmup", [
        f"policy.model_name={inp['student']}", f"_teachers.general={inp['sft']}",
        f"_teachers.reasoning={tmp_path / 'absent'}", f"warmup.prompts_path={inp['train']}",
        f"warmup.held_out_path={inp['valid']}", f"checkpointing.checkpoint_dir={tmp_path / 'w'}"], check_paths=False)
    proc = subprocess.run([PY, str(ROOT / "stages/ultra3/mopd_warmup/run.py"), "--config",
                           str(write_yaml(tmp_path / "train.yaml", cfg))], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"ultra3 mopd-warmup: _teachers (route math)={tmp_path / 'absent'}: no such file or folder"]


def test_cluster_job_reads_prompts_and_tasks_without_the_local_readers(tmp_path):
    from nemotron.runtime.rl.warmup import read_problems, read_tasks

    path = tmp_path / "train.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], '
                    '"task": "math"}\n\n{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": []}\n')
    assert read_problems(path, 2) == ["2+2?", "hi"] and read_tasks(path)[:2] == ["math", None]
    with pytest.raises(ValueError, match=rf"^{path}:4: not an RL line"):
        read_problems(path, 5)
