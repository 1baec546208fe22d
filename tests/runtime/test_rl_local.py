"""The local RL stages (:mod:`nemotron.runtime.rl.rl_local`) on the real ``small`` NemotronH and real GSM8K prompts: the
teacher routing of MOPD, and the resume of both stages after SIGTERM (save, exit 75, rerun at the same step with the
same prompts in the same order as an uninterrupted run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_support import checkpoint, compile_stage, rl_jsonl, tokenizer_folder, write_yaml

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def test_teacher_routing_follows_the_panel_and_falls_back_to_general():
    from nemotron.runtime.common.settings import SettingsError
    from nemotron.runtime.rl import rl_settings
    from nemotron.runtime.rl.nemo_rl import DEFAULT_TEACHER_ALIAS

    cfg = compile_stage("mopd", ["_teachers.general=/ckpt/sft", "_teachers.reasoning=/ckpt/rlvr",
                                 "policy.model_name=/ckpt/sft", "data.train.data_path=/d/train.jsonl",
                                 "data.validation.data_path=/d/validation.jsonl"], check_paths=False)
    s = rl_settings.read(cfg, "mopd")
    assert s.default_teacher == DEFAULT_TEACHER_ALIAS
    route = lambda task: s.teachers[rl_settings.route(task, s.teachers, s.default_teacher)]  # noqa: E731
    assert route("math") == Path("/ckpt/rlvr")                          # teacher_routing.by_agent.math: reasoning
    assert route("math_with_judge_simple_agent") == Path("/ckpt/rlvr")
    assert route("genrm_simple_agent") == Path("/ckpt/sft")             # rlhf: unset, falls back to general
    assert route("a_task_nobody_routes") == Path("/ckpt/sft")           # not in the table: default_teacher_alias
    assert route(None) == Path("/ckpt/sft")
    # the default slot moves the fallback
    cfg2 = compile_stage("mopd", ["_teachers.general=/ckpt/sft", "_teachers.reasoning=/ckpt/rlvr",
                                  "teacher_routing.default_slot=reasoning", "policy.model_name=/ckpt/sft",
                                  "data.train.data_path=/d/t.jsonl", "data.validation.data_path=/d/v.jsonl"],
                         check_paths=False)
    s2 = rl_settings.read(cfg2, "mopd")
    assert s2.teachers[rl_settings.route("unknown", s2.teachers, s2.default_teacher)] == Path("/ckpt/rlvr")
    # a route to a slot that is not in the panel is refused, naming the key (the cluster runtime's own check)
    bad = dict(cfg)
    bad["teacher_routing"] = {"default_slot": "general", "by_agent": {"math": "maths_teacher"}}
    with pytest.raises(SettingsError, match="teacher_routing.by_agent.math='maths_teacher': not a teacher slot"):
        rl_settings.read(bad, "mopd")
    nogeneral = dict(cfg)
    nogeneral["_teachers"] = {"general": None, "reasoning": "/ckpt/rlvr"}
    with pytest.raises(SettingsError, match="_teachers.general is not set"):
        rl_settings.read(nogeneral, "mopd")


def test_settings_errors_name_the_key():
    from nemotron.runtime.common.settings import SettingsError
    from nemotron.runtime.rl import rl_settings

    base = ["policy.model_name=/m", "data.train.data_path=/t.jsonl", "data.validation.data_path=/v.jsonl"]
    with pytest.raises(SettingsError, match=r"policy.train_global_batch_size=8: must equal grpo.num_prompts_per_step"):
        rl_settings.read(compile_stage("rlvr", [*base, "grpo.num_prompts_per_step=3"], check_paths=False), "rlvr")
    with pytest.raises(SettingsError, match="grpo.num_generations_per_prompt=1: GRPO's group baseline"):
        rl_settings.read(compile_stage("rlvr", [*base, "grpo.num_generations_per_prompt=1",
                                                "policy.train_global_batch_size=2", "policy.train_micro_batch_size=2"],
                                               check_paths=False),
                         "rlvr")
    with pytest.raises(SettingsError, match="env.math.math_verify_impl='dapo_math_verify'"):
        rl_settings.read(compile_stage("rlvr", [*base, "env.math.math_verify_impl=dapo_math_verify"], check_paths=False), "rlvr")
    with pytest.raises(SettingsError, match="loss_fn.ratio_clip_c=3"):
        rl_settings.read(compile_stage("rlvr", [*base, "loss_fn.ratio_clip_c=3"], check_paths=False), "rlvr")


def test_start_line_says_when_it_validates_and_the_end_says_all_rewards_were_0(tmp_path):
    """The start line's validation part follows grpo.val_period / grpo.val_at_end (val_period 0 used to read "every -
    steps"); a GRPO run whose every logged reward was 0 says the policy did not change; the folder's README.md is
    ours (TRL's card read "a fine-tuned version of [None]"), naming the local model it started from."""
    from nemotron.runtime.rl import rl_local, rl_settings

    assert rl_local.validation_phrase(8, 0, True) == "8 prompts at the end only (grpo.val_period 0)"
    assert rl_local.validation_phrase(8, 0, False) == "none (grpo.val_period 0, grpo.val_at_end false)"
    assert rl_local.validation_phrase(8, 2, True) == "8 prompts every 2 steps and at the end"
    assert rl_local.validation_phrase(8, 2, False) == "8 prompts every 2 steps"
    assert rl_local.zero_reward_line([0.0, 0.0], [0.0, 0.0]).startswith(
        "all rewards were 0: the policy did not change")
    assert rl_local.zero_reward_line([0.0], []).startswith("all rewards were 0: the policy did not change")
    assert rl_local.zero_reward_line([0.0], [0.3]).startswith("all rewards were 0: no reward signal")
    assert rl_local.zero_reward_line([0.0, 0.25], [0.1, 0.2]) is None and rl_local.zero_reward_line([], []) is None
    sft = tmp_path / "sft"
    cfg = compile_stage("rlvr", [f"policy.model_name={sft}", f"data.train.data_path={tmp_path / 't.jsonl'}",
                                 f"data.validation.data_path={tmp_path / 'v.jsonl'}",
                                 f"checkpointing.checkpoint_dir={tmp_path / 'ck'}"], check_paths=False)
    s = rl_settings.read(cfg, "rlvr")
    card = rl_local.model_card(s, sft, tmp_path / "ck" / "hf" / "step_1",
                               {"steps": 1, "reward_first": 0.0, "reward_last": 0.0})
    assert card.startswith("# ck\n") and f"- started from: `{sft}`" in card and "None" not in card, card
    assert f"`{tmp_path / 'ck' / 'hf' / 'step_1'}`" in card and "mean reward: 0.000 (first step) -> 0.000" in card


def test_entry_names_a_missing_input_in_one_line(tmp_path, capsys):
    """The local entry's precheck (before any heavy import): a missing checkpoint or JSONL is one line, exit 1."""
    from nemotron.runtime.rl import rl_entry

    model = tmp_path / "sft"
    train = tmp_path / "train.jsonl"
    base = [f"data.train.data_path={train}", f"data.validation.data_path={train}",
            f"checkpointing.checkpoint_dir={tmp_path / 'out'}"]
    cfg = compile_stage("rlvr", [f"policy.model_name={model}", *base], check_paths=False)
    assert rl_entry.rlvr(cfg) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ultra3 rlvr: policy.model_name={model}: no such file or folder (the checkpoint to start from)"]
    model.mkdir()
    assert rl_entry.rlvr(cfg) == 1
    assert capsys.readouterr().err.strip() == (f"ultra3 rlvr: data.train.data_path={train}: no such file or folder "
                                               "(train.jsonl of `data prep rl`)")
    assert not (tmp_path / "out").exists()


def test_rl_lines_that_cannot_be_read_are_named_by_file_and_line(tmp_path):
    from nemotron.runtime.rl.rl_data import RLDataError, read_rows

    good = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps({"messages": [{"content": "no answer"}]}) + "\n")
    with pytest.raises(RLDataError, match=rf"^{path}:3: not an RL line \(expected messages\[0\].content"):
        read_rows(path)
    rows = read_rows(path, limit=1)
    assert [(r.problem, r.answer, r.source) for r in rows] == [("2+2?", "4", "train.jsonl:1")]
    path.write_text("\n")
    with pytest.raises(RLDataError, match=rf"^{path}: no rows$"):
        read_rows(path)
    with pytest.raises(RLDataError, match=rf"^{tmp_path / 'absent.jsonl'}: cannot read"):
        read_rows(tmp_path / "absent.jsonl")


@pytest.fixture(scope="module")
def rl_inputs(module_tmp, shared_data):
    root = module_tmp("rl")
    tok = tokenizer_folder(root / "tokenizer")
    sft = checkpoint(root / "sft", tok, seed=7)
    other = checkpoint(root / "teacher", tok, seed=8)
    train, valid = rl_jsonl(root / "data", shared_data)
    return {"tok": tok, "sft": sft, "teacher": other, "train": train, "valid": valid}


def _overrides(stage: str, inp: dict, ckdir: Path) -> list[str]:
    out = [f"policy.model_name={inp['sft']}", f"data.train.data_path={inp['train']}",
           f"data.validation.data_path={inp['valid']}", f"checkpointing.checkpoint_dir={ckdir}",
           "checkpointing.save_period=3", "checkpointing.keep_top_k=3", "grpo.max_num_steps=3", "grpo.val_period=0",
           "grpo.val_at_end=false", "policy.generation.max_new_tokens=6", "run.env.cpus=2"]
    if stage == "rlvr":
        out += ["grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2", "policy.train_global_batch_size=4",
                "policy.train_micro_batch_size=2"]
    else:
        out += ["grpo.num_prompts_per_step=2", "policy.train_global_batch_size=2", "policy.train_micro_batch_size=2",
                f"_teachers.general={inp['sft']}", f"_teachers.reasoning={inp['teacher']}"]
    return out


def _run(stage: str, cfg_path: Path, env: dict, stop_after_step: int | None = None) -> tuple[int, str]:
    cmd = [PY, str(ROOT / f"stages/ultra3/{stage}/run.py"), "--config", str(cfg_path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if stop_after_step is not None:
        rollouts = Path(env["_CKDIR"]) / "rollouts.jsonl"
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            lines = rollouts.read_text().splitlines() if rollouts.exists() else []
            if any(json.loads(x)["step"] >= stop_after_step for x in lines):  # generating for that step
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.2)
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def _steps(ckdir: Path) -> dict[int, list[str]]:
    """step -> prompts of the newest rollout recorded for that step (a resumed step is generated again)."""
    out: dict[int, list[str]] = {}
    for line in (ckdir / "rollouts.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[rec["step"]] = rec["prompts"]
    return out


@pytest.fixture(scope="module")
def reference(rl_inputs, module_tmp):
    """``reference(stage)``: the checkpoint folder of one uninterrupted 3-step run of the stage (run once per module:
    the SIGTERM test compares its prompts with it, the seed test resumes from it). Each user copies it first."""
    done: dict[str, Path] = {}

    def get(stage: str) -> Path:
        if stage not in done:
            root = module_tmp(f"reference-{stage}")
            ref_dir = root / "reference"
            env = {**os.environ, "NEMOTRON_HOME": str(root / "home"), "PYTHONUNBUFFERED": "1", "_CKDIR": str(ref_dir)}
            code, out = _run(stage, write_yaml(root / "ref.yaml", compile_stage(stage, _overrides(stage, rl_inputs,
                                                                                                  ref_dir))), env)
            assert code == 0, out[-3000:]
            done[stage] = ref_dir
        return done[stage]
    return get


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
@pytest.mark.slow
def test_sigterm_saves_exits_75_and_the_rerun_resumes_with_the_same_prompts(stage, rl_inputs, reference, tmp_path):
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    ref_dir, run_dir = reference(stage), tmp_path / "stopped"
    run_cfg = write_yaml(tmp_path / "run.yaml", compile_stage(stage, _overrides(stage, rl_inputs, run_dir)))
    assert (ref_dir / "hf" / "latest" / "config.json").is_file()
    assert (ref_dir / "hf" / "step_3" / "tokenizer.json").is_file()
    card = (ref_dir / "README.md").read_text()
    assert card.startswith("# reference\n") and "[None]" not in card and f"`{rl_inputs['sft']}`" in card, card
    # stopped by SIGTERM while step 2 runs: it finishes the step, saves checkpoint-2 (the signal's save: the period
    # saves only at step 3, the last; each save writes 0.9 GB of model and optimizer state), exits 75, exports nothing
    code, out = _run(stage, run_cfg, {**env, "_CKDIR": str(run_dir)}, stop_after_step=1)
    assert code == 75, out[-3000:]
    assert "SIGTERM received" in out and "saved checkpoint-2" in out
    assert not (run_dir / "hf").exists()
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-2"]  # saved because of the signal
    rec = json.loads((run_dir / "checkpoint-2" / "nemotron_checkpoint.json").read_text())
    assert rec["step"] == 2 and rec["prompts_consumed"] == 4
    # the rerun resumes at step 2 and trains step 3 on the prompts the uninterrupted run had at step 3
    code, out = _run(stage, run_cfg, {**env, "_CKDIR": str(run_dir)})
    assert code == 0, out[-3000:]
    assert f"resuming from {run_dir / 'checkpoint-2'} (step 2)" in out
    ref, got = _steps(ref_dir), _steps(run_dir)
    assert sorted(ref) == sorted(got) == [0, 1, 2]
    assert got == ref
    assert len({p for ps in ref.values() for p in ps}) == 6  # 3 steps x 2 distinct prompts, none repeated
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["resumed_at_step"] == 2
    assert f"curves: {run_dir / 'metrics.png'}" in out  # reward (rlvr) or reverse KL (mopd) per step, as a picture
    assert (run_dir / "metrics.png").read_bytes()[:4] == b"\x89PNG"
    if stage == "mopd":
        assert "KL by teacher: math" in out
        assert summary["kl_last"] is not None and summary["kl_last"] > 0  # the teacher is another model


def test_local_mopd_gets_the_cluster_panel_rules():
    """The dry run of mopd -c local applies the cluster's panel rule (mopd-general-teacher): no general teacher, a
    route to a slot not in the panel; the shipped panel passes."""
    from nemotron import validation
    from nemotron.config.registry import get_stage

    stage = get_stage("mopd")
    base = ["policy.model_name=/ckpt/sft", "data.train.data_path=/d/t.jsonl", "data.validation.data_path=/d/v.jsonl"]
    ok = compile_stage("mopd", [*base, "_teachers.general=/ckpt/sft", "_teachers.reasoning=/ckpt/rlvr"], check_paths=False)
    assert [p for p in validation.validate(stage, ok, None) if p.severity == "error"] == []
    for extra, key in ((["_teachers.general=null"], "_teachers.general"),
                       (["_teachers.general=/ckpt/sft", "teacher_routing.by_agent.math=maths"],
                        "teacher_routing.by_agent.math")):
        cfg = compile_stage("mopd", [*base, *extra], check_paths=False)
        errs = [p for p in validation.validate(stage, cfg, None) if p.severity == "error"]
        assert [(p.rule, p.key) for p in errs] == [("mopd-general-teacher", key)], [p.render() for p in errs]


@pytest.mark.slow
def test_resume_with_another_seed_is_refused(rl_inputs, reference, tmp_path):
    """A checkpoint trained with another grpo.seed has another prompt stream: the rerun refuses it (exit 2, one line
    naming the key and both values) and leaves the folder as it was."""
    import shutil

    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    ckdir = tmp_path / "run"
    shutil.copytree(reference("rlvr"), ckdir, symlinks=True)  # 3 steps trained with the default grpo.seed (42)
    before = sorted(p.name for p in ckdir.iterdir())
    again = [*_overrides("rlvr", rl_inputs, ckdir), "grpo.max_num_steps=4", "grpo.seed=43"]
    code, out = _run("rlvr", write_yaml(tmp_path / "b.yaml", compile_stage("rlvr", again)), env)
    assert code == 2, out[-3000:]
    assert (f"ultra3 rlvr: grpo.seed=43: {ckdir / 'checkpoint-3'} was trained with grpo.seed=42, whose prompt stream "
            "this run cannot continue") in out
    assert sorted(p.name for p in ckdir.iterdir()) == before


@pytest.mark.slow
def test_rerun_of_a_finished_run_with_other_settings_is_refused(rl_inputs, reference, tmp_path):
    """A finished rlvr run (copied to another folder: the folder key is not compared) run again with another
    loss_fn.ratio_clip_min trains nothing, so its job would record the old final model as made by the new
    settings: refused (exit 2, one line naming the key, both values and the folder). Unchanged, it is already
    complete (exit 0)."""
    import shutil

    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    ckdir = tmp_path / "run"
    shutil.copytree(reference("rlvr"), ckdir, symlinks=True)
    assert (ckdir / "run_config.json").is_file()
    same = _overrides("rlvr", rl_inputs, ckdir)
    assert compile_stage("rlvr", same)["loss_fn"]["ratio_clip_min"] == 0.2
    code, out = _run("rlvr", write_yaml(tmp_path / "b.yaml", compile_stage("rlvr", [
        *same, "loss_fn.ratio_clip_min=0.3"])), env)
    assert code == 2, out[-3000:]
    assert (f"ultra3 rlvr: loss_fn.ratio_clip_min=0.3 (was 0.2): the run whose final model is in {ckdir} "
            "finished with other settings") in out
    assert "checkpointing.checkpoint_dir=<a new folder>" in out
    code, out = _run("rlvr", write_yaml(tmp_path / "a.yaml", compile_stage("rlvr", same)), env)
    assert code == 0, out[-3000:]
    assert "rlvr: already complete" in out
