"""The dry run never calls valid what the run refuses: the cases where it used to (a config whose inputs no run has
made yet, a secret this shell lacks, a backend the entry does not have, a direction the local convert refuses), each
named with a did-you-mean where the value set is known; and `list` / `--help` mark the configs a rule refuses.

The real CLI (``nemotron.cli.main``) on the shipped configs; a fresh NEMOTRON_HOME (no artifact made yet).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import re
from pathlib import Path

import pytest

from test_cli import _isolated_home, run_cli  # noqa: F401 - the autouse fixture isolates NEMOTRON_HOME here too

FIXTURE_ENV = str(Path(__file__).resolve().parents[1] / "fixtures" / "env.toml")
ON_SAMPLE = ("--batch", "sample", "--env-file", FIXTURE_ENV)
#: mopd -c local's inputs, in the order the config names them (a fresh home has none of them)
MOPD_LOCAL_UNRESOLVED = ("policy.model_name", "policy.tokenizer.name", "data.train.data_path",
                         "data.validation.data_path", "_teachers.general", "_teachers.reasoning")


# ------------------------------------------------------------------- 1. inputs not made yet: dry run and run, exit 2
def test_dry_run_of_a_stage_whose_inputs_are_missing_exits_2_as_the_run_does(capsys, tmp_path):
    code, out, err = run_cli(capsys, "ultra3", "mopd", "-c", "local", "--dry-run", "--quiet")
    assert code == 2, out + err
    lines = out.splitlines()
    assert lines[0].startswith("dry run: the config is valid (") and \
        "but the run would refuse to start: ultra3 mopd with 6 unresolved values (each on a line below); make it " \
        "first: nemotron ultra3 pretrain -c local;" in lines[0], lines[0]
    # every unresolved value named, one line each (not only the first)
    assert [ln.split(":")[0].strip() for ln in lines[1:7]] == list(MOPD_LOCAL_UNRESOLVED), out
    assert all(ln.startswith("  ") and "does not exist yet" in ln for ln in lines[1:7]), out
    assert err.splitlines()[0] == ("error: the run would refuse to start ultra3 mopd with 6 unresolved values: the "
                                   "report above names each"), err
    # the run refuses the same, naming each value on a line of its own
    code, _, err = run_cli(capsys, "ultra3", "mopd", "-c", "local")
    assert code == 2
    lines = err.splitlines()
    at = lines.index("error: refusing to start ultra3 mopd with 6 unresolved values:")
    assert [ln.split(":")[0].strip() for ln in lines[at + 1:at + 7]] == list(MOPD_LOCAL_UNRESOLVED), err
    assert lines[at + 7].startswith("hint: make it first: nemotron ultra3 pretrain -c local"), err
    assert not (tmp_path / "home" / "runs").exists()  # nothing started


def test_the_hint_chains_every_run_a_stage_needs_and_that_pipe_is_valid(capsys):
    """mopd-warmup -c local on a fresh home misses rl-data, sft-checkpoint and rl-checkpoint, and those runs miss
    their own inputs: the hint's pipe makes them all in pipeline order (the one-producer pipe `data-prep-rl
    mopd-warmup` it used to suggest refused at its second stage), and that pipe's dry run is valid."""
    code, out, _ = run_cli(capsys, "ultra3", "mopd-warmup", "-c", "local", "--dry-run", "--quiet")
    assert code == 2
    want = ("data-prep-pretrain", "data-prep-sft", "data-prep-rl", "pretrain", "sft", "rlvr", "mopd-warmup")
    assert f"or chain every run it needs: nemotron ultra3 pipe {' '.join(want)} -c local; or set " in out, out
    assert "chain both" not in out
    code, out, err = run_cli(capsys, "ultra3", "pipe", *want, "-c", "local", "--dry-run", "--quiet")
    assert code == 0, out + err
    # one missing input that its producer can make on its own: still the two-stage pipe
    code, out, _ = run_cli(capsys, "ultra3", "pretrain", "-c", "local", "--dry-run", "--quiet")
    assert "or chain both: nemotron ultra3 pipe data-prep-pretrain pretrain -c local;" in out, out


def test_one_unresolved_value_stays_on_the_verdicts_line(capsys):
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", "--quiet")
    assert code == 2, err
    assert out.splitlines() == [
        "dry run: the config is valid (1 warning), but the run would refuse to start: ultra3 convert with 1 unresolved "
        "value: convert.source: artifact sft-checkpoint does not exist yet by a local or tiny run; make it first: "
        "nemotron ultra3 sft -c local; or chain every run it needs: nemotron ultra3 pipe data-prep-pretrain "
        "data-prep-sft pretrain sft convert -c local; or set convert.source explicitly; nothing was submitted"]


def test_pipe_refused_at_a_local_only_stage_says_to_run_it_after_the_pipe(capsys):
    """mtp-boost runs only with -c local; in a -c tiny pipe the stage's verdict says what a pipe user can do (drop
    it, run it after with -c local), not only the rule's "valid: local (-c local ...)"; a lone `mtp-boost -c tiny`
    keeps the plain verdict (its user can change -c)."""
    code, out, _ = run_cli(capsys, "ultra3", "pipe", "rlvr", "mopd-warmup", "mopd", "mopd", "mtp-boost", "-c", "tiny",
                           *ON_SAMPLE, "--dry-run", "--quiet")
    assert code == 2
    line = next(ln for ln in out.splitlines() if ln.startswith("dry run: stage 5/5 (ultra3 mtp-boost)"))
    assert ("the run would refuse to start; mtp-boost runs only with -c local (one machine), which this pipe's one -c "
            "for every stage cannot give it: drop mtp-boost from this pipe and run `nemotron ultra3 mtp-boost -c "
            "local` after it") in line, line
    code, out, _ = run_cli(capsys, "ultra3", "mtp-boost", "-c", "tiny", *ON_SAMPLE, "--dry-run", "--quiet")
    assert code == 2 and "drop mtp-boost" not in out


def test_pipe_without_stage_names_leaves_out_what_its_config_cannot_run_and_quiet_is_quiet(capsys):
    """`pipe -c tiny` (no names: every stage) on a cluster profile used to include mtp-boost, which every -c but local
    refuses, so it could never pass: the stage is left out, said in one note (which, why, how to run it), and the
    chain of the other 11 is valid; quantize takes mopd's checkpoint. `-q` prints the verdicts alone: no
    `[nemotron] input ... (planned: ...)` line per input. With -c local mtp-boost stays in the chain."""
    code, out, err = run_cli(capsys, "ultra3", "pipe", "-c", "tiny", *ON_SAMPLE, "--dry-run", "-q")
    assert code == 0, out + err
    assert out.splitlines()[0] == "dry run: the chain of 11 stages is valid; nothing was submitted", out
    assert "mtp-boost" not in out and "quantize" in out
    notes = [ln for ln in err.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1 and notes[0].startswith(
        "note: pipe with no stage names runs every stage its -c can run: left out mtp-boost (-c tiny: "
        "backend=megatron-bridge: refused by rule mtp-boost-framework)"), err
    assert notes[0].endswith("run it on one machine after the pipe: nemotron ultra3 mtp-boost -c local"), notes
    assert "[nemotron] input" not in err, err
    # without -q the inputs are listed as before
    code, _, err = run_cli(capsys, "ultra3", "pipe", "mopd", "quantize", "-c", "tiny", *ON_SAMPLE, "--dry-run")
    assert "[nemotron] input mopd-checkpoint (planned: an earlier stage of this pipe writes it)" in err, err
    # -c local: mtp-boost runs, nothing is left out
    from nemotron.cli.pipeline import _pipe_chain, _runnable_default

    chain = _pipe_chain("ultra3", [], "local")
    assert _runnable_default("ultra3", chain) == chain and "mtp-boost" in [s.name for s, _ in chain]
    assert "note:" not in capsys.readouterr().err


@pytest.mark.parametrize("argv, missing, runs", [
    (("pretrain", "sft", "-c", "long_context"), "ultra3 sft has no config 'long_context'",
     "nemotron ultra3 pretrain -c long_context --batch sample --env-file {env}, then nemotron ultra3 sft -c CONFIG "
     "--batch sample --env-file {env}"),
    (("data-prep-rl", "rlvr", "-c", "teacher-swe"), "ultra3 data prep rl has no config 'teacher-swe'",
     "nemotron ultra3 data prep rl -c CONFIG --batch sample --env-file {env}, then nemotron ultra3 rlvr -c teacher-swe "
     "--batch sample --env-file {env}"),
])
def test_pipe_stage_without_the_pipes_config_names_it_once_and_says_to_run_stages_one_by_one(capsys, argv, missing,
                                                                                             runs):
    """The stage used to be named twice ("ultra3 sft: ultra3 sft has no config ...") with no word that the pipe's one
    -c is every stage's (there is no per-stage -c)."""
    code, out, err = run_cli(capsys, "ultra3", "pipe", *argv, *ON_SAMPLE, "--dry-run", "-q")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"error: {missing}: pipe's one -c applies to every stage it runs", err
    assert lines[1].startswith("hint: ") and lines[1].endswith(
        "a pipe has no per-stage -c: run stages that need different configs one by one, in this order: "
        + runs.format(env=FIXTURE_ENV)), err


@pytest.mark.parametrize("defaults, base, scale", [("", "default", ", the paper-scale run"),
                                                    ("defaults: tiny\n", "tiny", "")])
def test_a_config_files_hint_names_the_config_it_builds_on(capsys, tmp_path, defaults, base, scale):
    """`rlvr -c "dir with space/my rl.yaml"`: the hint named the producers without -c (the paper-scale chain, never
    said) and "artifact hf-checkpoint does not exist yet" (of which config?). A -c FILE takes any config's run as its
    input: the hint names the shipped config the file builds on (its `defaults:`), says so, quotes the file, and the
    pipe it suggests makes the inputs, then this command runs again."""
    folder = tmp_path / "dir with space"
    folder.mkdir()
    own = folder / "my rl.yaml"
    own.write_text(f"{defaults}grpo:\n  seed: 7\n", encoding="utf-8")
    code, out, _ = run_cli(capsys, "ultra3", "rlvr", "-c", str(own), *ON_SAMPLE, "--dry-run", "-q")
    assert code == 2
    first = out.splitlines()[0]
    launch = f"--batch sample --env-file {FIXTURE_ENV}"
    assert f"make it first: nemotron ultra3 convert -c {base} {launch}; or make them all: nemotron ultra3 pipe " \
           f"data-prep-pretrain data-prep-sft data-prep-rl pretrain sft convert -c {base} {launch}, then run this " \
           f"command again (-c '{own}' builds on rlvr's {base}.yaml{scale}; any config's run is its input)" in first, \
        first
    assert "  policy.model_name: artifact hf-checkpoint does not exist yet by a run of any config (the input of a " \
           "-c FILE)" in out.splitlines(), out


def test_missing_input_paths_are_problems_of_the_report_not_a_bare_error(capsys, tmp_path):
    """rlvr -c tiny with data paths that do not exist (under a cluster path this machine sees) was one bare
    "error: input path does not exist: ..." before any report, unlike every other refusal: now the dry run's verdict
    counts them and each is a problem line naming its key (rule input-exists), exit 2; the run refuses the same."""
    gone = tmp_path / "lustre" / "nope"
    paths = (f"data.train.data_path={gone}/train.jsonl", f"data.validation.data_path={gone}/val.jsonl")
    code, out, err = run_cli(capsys, "ultra3", "rlvr", "-c", "tiny", *ON_SAMPLE, "--dry-run", "-q", *paths)
    assert code == 2
    assert re.fullmatch(r"dry run: \d+ errors?, \d+ warnings?: the run would refuse to start; .*nothing was submitted",
                        out.splitlines()[0]), out
    assert "input path does not exist:" not in err, err
    for key in ("data.train.data_path", "data.validation.data_path"):  # the report's problem lines
        assert f"error: {key}='{gone}/" in out and "no such file or folder" in out, out
    # a *_path key no config wires to an artifact: the compiler's own check, now a problem line of the report too
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "local", "--dry-run", "-q",
                             "data.per_split_data_args_path=nope/blend.json")
    assert code == 2 and out.splitlines()[0].startswith("dry run: 1 error, 0 warnings: the run would refuse"), out
    assert out.splitlines()[1] == (
        "error: data.per_split_data_args_path='nope/blend.json': input path does not exist here (set by override): "
        "the job would not find it; valid: an existing file or folder, or ${art:NAME,FIELD} for an upstream "
        "stage's output"), out
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "local", "data.per_split_data_args_path=nope/blend.json")
    assert code == 2 and "error: data.per_split_data_args_path='nope/blend.json': input path does not exist" in err


def test_pipe_dry_run_refused_at_a_stage_exits_2(capsys):
    code, out, err = run_cli(capsys, "ultra3", "pipe", "mopd", "quantize", "-c", "local", "--dry-run", "--quiet")
    assert code == 2, err
    assert out.splitlines()[0].startswith("dry run: the chain's configs are valid, but the run would refuse to start "
                                          "at stage 1/2 (ultra3 mopd)"), out
    assert "error: the run would refuse to start ultra3 mopd with 6 unresolved values" in err, err


def test_dry_run_json_of_a_refused_run_exits_2_with_the_refusal_in_the_document(capsys):
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", "--json")
    assert code == 2, err
    doc = json.loads(out)
    assert doc["valid"] is True and doc["refusal"].startswith("refusing to start ultra3 convert with 1 unresolved "
                                                              "value: convert.source: artifact sft-checkpoint")
    assert "error: the run would refuse to start ultra3 convert with 1 unresolved value" in err


def test_a_data_stage_with_no_inputs_still_exits_0(capsys):
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run", "--quiet")
    assert code == 0, out + err
    assert out.startswith("dry run: valid"), out


# ---------------------------------------------------------------- 2. a backend the entry does not have, did-you-mean
def test_unknown_backend_is_refused_by_the_dry_run_with_a_did_you_mean(capsys):
    """The job's entry refuses a backend it does not have (runtime.dispatch.run); on a cluster profile the dry run
    used to pass it."""
    code, out, _ = run_cli(capsys, "ultra3", "convert", "-c", "tiny", "backend=megatronbridge", "convert.source=/x",
                           "--dry-run", "--quiet", *ON_SAMPLE)
    assert code == 2
    assert ("error: backend='megatronbridge': not a backend of ultra3 convert (its job would stop at start); did you "
            "mean 'megatron-bridge'?; valid: local, megatron-bridge") in out.splitlines(), out


# ------------------------------------------------------------- 3. convert.direction: the local one, did-you-mean
def test_local_convert_direction_is_refused_by_the_dry_run_as_by_its_runtime(capsys, tmp_path):
    from nemotron.runtime.megatron.convert_local import local_main

    code, out, _ = run_cli(capsys, "ultra3", "convert", "-c", "local", "convert.direction=megatron2hf", "--dry-run",
                           "--quiet")
    assert code == 2
    line = ("error: convert.direction='megatron2hf': did you mean 'megatron_to_hf'? the local backend only rewrites HF "
            "configs (hf_v5_to_v4); Megatron <-> HF conversion (hf_to_megatron, megatron_to_hf) runs in the NeMo "
            "container (-c tiny or default on a Slurm profile)")
    assert line in out.splitlines(), out
    # the runtime's own refusal: the same words, exit 2 (a config problem), before it reads anything
    assert local_main({"convert": {"direction": "megatron2hf", "source": str(tmp_path), "output_dir": "o"}}) == 2
    assert capsys.readouterr().err.strip() == "ultra3 convert: " + line.removeprefix("error: ")
    code, out, _ = run_cli(capsys, "ultra3", "convert", "-c", "local", "convert.direction=hf_v5_to_v5", "--dry-run",
                           "--quiet")
    assert code == 2 and "did you mean 'hf_v5_to_v4'?" in out


def test_local_convert_of_a_config_without_a_hybrid_pattern_is_refused_by_the_dry_run_as_by_its_runtime(capsys,
                                                                                                      tmp_path):
    """An imported NemotronH checkpoint whose config.json has neither ``layers_block_type`` nor
    ``hybrid_override_pattern``: ``convert -c local --dry-run`` said valid and the run stopped with exit 1 on a line
    that named no file. Now one check (``convert_local.source_refusal``) serves both: exit 2, naming config.json
    and the record it came from; the untouched checkpoint passes the same check."""
    from rl_support import checkpoint, tokenizer_folder

    from nemotron.runtime.megatron.convert_local import local_main, source_refusal

    model = checkpoint(tmp_path / "model", tokenizer_folder(tmp_path / "tok"), seed=1)
    assert source_refusal({"source": str(model)}) is None
    config = json.loads((model / "config.json").read_text())
    for key in ("layers_block_type", "mtp_layers_block_type", "hybrid_override_pattern"):
        config.pop(key, None)
    (model / "config.json").write_text(json.dumps(config))
    code, out, err = run_cli(capsys, "ultra3", "model", "import", str(model), "--as", "sft-checkpoint", "-c", "local")
    assert code == 0, err
    words = (f"{model / 'config.json'} (sft-checkpoint v1, imported): neither layers_block_type (v5) nor "
             "hybrid_override_pattern (v4) is set; the local convert rewrites a NemotronH config.json")
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", "--quiet")
    assert code == 2 and f"error: convert.source={str(model)!r}: {words}" in out, (out, err)
    conv = {"direction": "hf_v5_to_v4", "source": str(model), "output_dir": str(tmp_path / "out")}
    assert local_main({"convert": conv}) == 2
    assert capsys.readouterr().err.startswith(f"ultra3 convert: {words}")
    assert not (tmp_path / "out").exists()


def test_local_convert_of_a_missing_source_is_refused_by_the_dry_run_as_by_its_runtime(capsys, tmp_path):
    """``convert -c local --dry-run convert.source=<no such path>`` said valid (exit 0) and the run then stopped with
    exit 1; an existing empty folder was refused already. Now the missing path takes the same check
    (``convert_local.source_refusal``): exit 2 naming convert.source, in the dry run and in the runtime, before
    anything is written."""
    from nemotron.runtime.megatron.convert_local import local_main

    missing = tmp_path / "nonexistent"
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", "--quiet",
                             f"convert.source={missing}")
    words = f"{missing}: no such folder (the checkpoint to convert); set convert.source to a Hugging Face checkpoint"
    assert code == 2 and f"error: convert.source={str(missing)!r}: {words}" in out, (out, err)
    conv = {"direction": "hf_v5_to_v4", "source": str(missing), "output_dir": str(tmp_path / "out")}
    assert local_main({"convert": conv}) == 2
    assert capsys.readouterr().err.startswith(f"ultra3 convert: convert.source: {words}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_an_empty_validation_split_is_refused_while_the_run_validates(capsys, tmp_path, stage):
    """``data prep rl`` of too few distinct rows writes an empty validation.jsonl; ``rlvr -c local --dry-run`` took
    it as valid although the run validates on it (``grpo.val_at_end: true``, ``checkpointing.metric_name:
    val:accuracy``). Now the dry run of the local and the cluster backend refuses it naming the file and the keys
    (one check, ``val_split.empty_validation``, which the local reader and the NeMo RL job's precheck call too);
    with validation turned off, or one row in the file, it is not refused."""
    from nemotron.runtime.rl.nemo_rl import precheck
    from nemotron.runtime.rl.val_split import empty_validation

    row = json.dumps({"messages": [{"role": "user", "content": "What is 2 + 2?"},
                                   {"role": "assistant", "content": "4"}]})
    (tmp_path / "train.jsonl").write_text(row + "\n")
    valid = tmp_path / "validation.jsonl"
    valid.write_text("")
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    data = [f"policy.model_name={policy}", f"data.train.data_path={tmp_path / 'train.jsonl'}",
            f"data.validation.data_path={valid}"]
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "local", "--dry-run", "--quiet", *data)
    words = f"{valid}: no rows (an empty validation split), but the run validates on it (grpo.val_at_end=true"
    assert code == 2 and words in out, (out, err)
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "tiny", "--dry-run", "--quiet", *data)
    line = next((x for x in out.splitlines() if "no rows (an empty validation split)" in x), "")
    assert code == 2 and line.startswith(f"error: data.validation.data_path={str(valid)!r}: ") and \
        "grpo.val_period=5" in line and "checkpointing.metric_name='val:accuracy'" in line, out
    off = ["grpo.val_period=0", "grpo.val_at_end=false", "checkpointing.metric_name=null"]
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "local", "--dry-run", "--quiet", *data, *off)
    assert "no rows (an empty validation split)" not in out + err, out
    # the runs: the cluster job's precheck says the same line (the local run's reader is the dry run's above)
    cfg = {"grpo": {"val_period": 0, "val_at_end": True}, "data": {"validation": {"data_path": str(valid)}},
           "checkpointing": {"metric_name": "val:accuracy"}}
    assert empty_validation(cfg).startswith(f"data.validation.data_path={valid}: no rows")
    assert empty_validation(cfg) in precheck(cfg, importable=lambda m: True, gpus=0, checkout=None,
                                             host_memory=lambda: (None, "here"))
    valid.write_text(row + "\n")
    assert empty_validation(cfg) is None


@pytest.mark.parametrize(("key", "value", "close"), [("direction", "megatron2hf", "megatron_to_hf"),
                                                      ("device", "gpus", "gpu"), ("dtype", "bfloat", "bfloat16")])
def test_cluster_convert_values_say_did_you_mean(capsys, key, value, close):
    code, out, _ = run_cli(capsys, "ultra3", "convert", "-c", "tiny", f"convert.{key}={value}", "--dry-run", "--quiet",
                           *ON_SAMPLE)
    assert code == 2
    assert any(ln.startswith(f"error: convert.{key}='{value}': did you mean '{close}'?") for ln in out.splitlines()), out


@pytest.mark.parametrize("value", ["banana", "float8"])
def test_cluster_convert_dtype_outside_the_runtimes_table_is_refused(capsys, value):
    """``convert.dtype=banana`` (or ``float8``) was "valid" in the dry run; the job's ``{...}[dtype]`` lookup then
    stopped with a KeyError. Now the translation the dry run and the job share refuses it naming the valid values
    (the runtime's own table, ``megatron_bridge.CONVERT_DTYPES``)."""
    from nemotron.runtime.megatron.megatron_bridge import CONVERT_DTYPES

    code, out, _ = run_cli(capsys, "ultra3", "convert", "-c", "tiny", f"convert.dtype={value}", "--dry-run", "--quiet",
                           *ON_SAMPLE)
    assert CONVERT_DTYPES == ("bfloat16", "float16", "float32")
    assert code == 2
    assert any(ln.startswith(f"error: convert.dtype='{value}': ") and ln.endswith("valid: bfloat16, float16, float32")
               for ln in out.splitlines()), out
    code, out, _ = run_cli(capsys, "ultra3", "convert", "-c", "tiny", "convert.dtype=float32", "--dry-run", "--quiet",
                           *ON_SAMPLE)
    assert "convert.dtype" not in out, out


def test_a_value_far_from_every_choice_gets_no_guess():
    from nemotron.errors import did_you_mean

    assert did_you_mean("megatron2hf", ("hf_to_megatron", "megatron_to_hf")) == "did you mean 'megatron_to_hf'?"
    assert did_you_mean("zzz", ("hf_to_megatron", "megatron_to_hf")) == ""
    assert did_you_mean(3, ("gpu", "cpu")) == ""


# ------------------------------------------------------------------ 4. list and --help mark what a rule refuses
def test_list_and_help_mark_the_configs_a_rule_refuses_as_the_dry_run_does(capsys):
    code, out, _ = run_cli(capsys, "ultra3", "list")
    assert code == 0
    row = next(ln for ln in out.splitlines() if ln.startswith("mtp-boost"))
    assert re.match(r"mtp-boost\s+default\*, tiny\*\s", row), row
    assert ("  mtp-boost -c default, mtp-boost -c tiny: backend=megatron-bridge: refused by rule mtp-boost-framework; "
            "valid: local") in out, out
    code, out, _ = run_cli(capsys, "ultra3", "list", "--json")
    doc = json.loads(out)
    mtp = [r for r in doc["stages"] if r["stage"] == "mtp-boost"]
    refused = {k: v for r in mtp for k, v in r["refused"].items()}
    assert sorted(refused) == ["default", "tiny"] and all("mtp-boost-framework" in v for v in refused.values())
    assert all(r["refused"] == {} for r in doc["stages"] if r["stage"] != "mtp-boost")
    # the dry run of each marked config is refused by that rule; the unmarked one is not
    for name in ("default", "tiny"):
        code, out, _ = run_cli(capsys, "ultra3", "mtp-boost", "-c", name, "--dry-run", "--quiet", *ON_SAMPLE)
        assert code == 2 and "MTP boosting cannot run on megatron-bridge" in out, out
    code, out, _ = run_cli(capsys, "ultra3", "mtp-boost", "-c", "local", "--dry-run", "--quiet")
    assert "mtp-boost-framework" not in out and "MTP boosting cannot run" not in out, out
    # --help: the same marks, and no example offers a refused config
    code, out, _ = run_cli(capsys, "ultra3", "mtp-boost", "--help")
    assert code == 0
    configs = out[out.index("Configs (-c NAME"):out.index("Config keys")]
    assert re.search(r"^\s+default\*\s", configs, re.M) and re.search(r"^\s+tiny\*\s", configs, re.M), configs
    assert re.search(r"^\s+local\s", configs, re.M), configs
    assert "* default, tiny: refused by the dry run and a run in this version (exit 2):" in configs, configs
    examples = out[out.index("Examples:"):]
    assert "-c local" in examples and "-c tiny" not in examples and "--run PROFILE --dry-run" not in examples, examples


@pytest.mark.parametrize(("argv", "line"), [
    (("pretrain", "-c", "local", "scheduler.lr_decay_style=cosinus"),
     "error: scheduler.lr_decay_style='cosinus': not a learning-rate decay style of Megatron-Core; did you mean "
     "'cosine'?; valid: "),
    (("quantize", "-c", "local", "quantization.recipe=ultr"),
     "error: quantization.recipe='ultr': no such recipe; did you mean 'ultra'?; valid: "),
    (("mtp-boost", "-c", "local", "mtp_boost.objective=forward_kl"),
     "error: mtp_boost.objective='forward_kl': did you mean 'forward-kl'? MTP boosting trains"),
    (("pretrain", "-c", "local", "model.name=ultar"), "error: model.name='ultar': unknown model 'ultar' (did you mean "
                                                      "'ultra'?)"),
])
def test_other_values_of_a_known_set_say_did_you_mean(capsys, argv, line):
    code, out, _ = run_cli(capsys, "ultra3", *argv, "--dry-run", "--quiet")
    assert code == 2
    assert any(ln.startswith(line) for ln in out.splitlines()), out


# ------------------------------------------------------------------------------------------ bytes that are not UTF-8
def test_a_config_or_env_file_that_is_not_utf8_is_one_line_with_file_line_and_byte(capsys, tmp_path):
    cfg = tmp_path / "cfg dir" / "nonutf.yaml"
    cfg.parent.mkdir()
    cfg.write_bytes(b"output_dir: /tmp/x\n# caf\xe9\n")
    code, _, err = run_cli(capsys, "ultra3", "data", "prep", "sft", "-c", str(cfg), "--dry-run")
    assert code == 2 and f"error: {cfg}:2: not UTF-8 text (byte 0xe9 at byte offset 24)" in err, err
    assert "hint: save the file as UTF-8" in err and "internal error" not in err, err
    env = tmp_path / "env.toml"
    env.write_bytes(b'[a]\nexecutor = "local"\n# \xff\n')
    code, _, err = run_cli(capsys, "ultra3", "data", "prep", "sft", "-c", "tiny", "--env-file", str(env), "--run", "a",
                           "--dry-run")
    assert code == 2 and f"error: {env}:3: not UTF-8 text (byte 0xff" in err and "permissions" not in err, err


@pytest.mark.parametrize("word,shown", [
    (b"output_dir=/tmp/out/\xff", "override 'output_dir=/tmp/out/\\xff': not UTF-8 (byte 0xff at byte offset 20)"),
    (b"pack.algorithm=\xff", "override 'pack.algorithm=\\xff': not UTF-8 (byte 0xff at byte offset 15)"),
    (b"chat.template=/t/caf\xe9.jinja", "override 'chat.template=/t/caf\\xe9.jinja'"),
])
def test_an_override_that_is_not_utf8_is_refused_naming_it(capsys, word, shown):
    """Python hands argv bytes that are not UTF-8 over as lone surrogates (PEP 383): any override, any key."""
    code, _, err = run_cli(capsys, "ultra3", "data", "prep", "sft", "-c", "tiny", os.fsdecode(word), "--dry-run")
    assert code == 2 and f"error: {shown}" in err and "hint: give " in err and "internal error" not in err, err


def test_a_path_argument_that_is_not_utf8_is_refused_from_a_real_command_line(tmp_path):
    """The real process: the bytes come from argv, not from a test's string."""
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "nemotron.console", "ultra3", "data", "prep", "sft", "-c",
                           b"/tmp/\xff.yaml", "--dry-run"], capture_output=True, env=env, timeout=120)
    err = proc.stderr.decode("utf-8")
    assert proc.returncode == 2, err
    assert "error: argument '/tmp/\\xff.yaml': not UTF-8 (byte 0xff at byte offset 5)" in err, err


@pytest.mark.parametrize("args", [
    ("ultra3", "rlvr", "-c", "tiny", "--dry-run", "policy.megatron_cfg.optimizer.lrr=1"),
    ("ultra3", "pipe", "rlvr", "mopd-warmup", "mopd", "mopd", "-c", "tiny-cycle2", "--dry-run"),
])
def test_a_refusal_is_written_once_when_stderr_is_a_real_file(tmp_path, args):
    """A saved log (stderr a regular file: not a terminal, not a pipe) holds the error and its hint once each, both
    with stdout elsewhere and with stdout into the same file (``>log 2>&1``). A new user reported error, hint, error."""
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")}
    for same in (False, True):
        log = tmp_path / f"log-{same}.txt"
        with open(log, "wb") as fh:
            proc = subprocess.run([sys.executable, "-m", "nemotron.console", *args], stdout=fh if same else
                                  subprocess.DEVNULL, stderr=fh, env=env, timeout=300, cwd=tmp_path)
        text = log.read_text()
        assert proc.returncode == 2, text
        lines = text.splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        hints = [line for line in lines if line.startswith("hint: ")]
        assert len(errors) == 1 and len(hints) == 1, text
        assert lines.index(errors[0]) < lines.index(hints[0]), text


# ------------------------------------------------------------------ counts < 1: the key the user set, named first
@pytest.mark.parametrize(("args", "key", "value"), [
    (("rlvr", "-c", "tiny", *ON_SAMPLE), "grpo.num_prompts_per_step", 0),
    (("rlvr", "-c", "tiny", *ON_SAMPLE), "grpo.num_generations_per_prompt", -1),
    (("mopd", "-c", "tiny", *ON_SAMPLE), "grpo.max_num_steps", 0),
    (("quantize", "-c", "local"), "quantization.calib_size", 0),
    (("quantize", "-c", "local"), "quantization.calib_size", -5),
    (("eval", "-c", "local"), "eval.gsm8k.samples", 0),
    (("mtp-boost", "-c", "local"), "mtp_boost.draft_length", 0),
])
def test_a_count_below_one_is_refused_naming_the_key_the_user_set(capsys, args, key, value):
    """``grpo.num_prompts_per_step=0`` and ``quantization.calib_size=0/-5`` were "valid" in the dry run (the local
    readers that refuse them were not reached while an input was unresolved); ``num_generations_per_prompt=-1`` gave
    "a divisor of -8" on policy.train_global_batch_size. Now rule ``positive-count`` (one table, COUNT_KEYS, every
    stage) names the key, and no rule computing with the bad count (grpo-batch) restates it."""
    stage, *rest = args
    code, out, err = run_cli(capsys, "ultra3", stage, *rest, f"{key}={value}", "--dry-run", "--quiet")
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ") and "found before" not in ln]
    assert code == 2, (out, err)
    assert f"error: {key}={value}: must be a whole number >= 1 (" in out and out.count(f"{key}=") == 1, out
    assert not any("divisor" in ln or "train_global_batch_size" in ln for ln in errors), errors
    # the shipped value passes the same rule
    code, out, _ = run_cli(capsys, "ultra3", stage, *rest, "--dry-run", "--quiet")
    assert "positive" not in out and f"error: {key}=" not in out, out


def test_the_count_table_names_keys_the_stages_read():
    """Every COUNT_KEYS key is read by a stage's runtime or set by a shipped config (a typo would check nothing)."""
    from nemotron.layout.rules import COUNT_KEYS, positive_counts

    repo = Path(__file__).resolve().parents[2]
    text = "\n".join(p.read_text() for p in (repo / "src" / "nemotron" / "runtime").rglob("*.py"))
    shipped = "\n".join(p.read_text() for p in (repo / "stages").rglob("*.yaml"))
    for key in COUNT_KEYS:
        leaf = key.rsplit(".", 1)[1]
        assert f'"{key}"' in text or f"{leaf}:" in shipped, key
    assert positive_counts({"grpo.max_num_steps": 1}) == []
    assert [p.rule for p in positive_counts({"grpo.max_num_steps": True, "quantization.calib_size": "8"})] == \
        ["positive-count", "positive-count"]


# ------------------------------------------------------------------ every stage's input paths: one rule, input-exists
@pytest.mark.parametrize(("stage", "key"), [("convert", "convert.source"), ("quantize", "quantization.source"),
                                            ("eval", "eval.gsm8k.data"), ("eval", "generation.model_name"),
                                            ("rlvr", "policy.model_name"), ("mopd", "_teachers.general"),
                                            ("sft", "checkpoint.pretrained_checkpoint")])
def test_a_missing_input_path_is_refused_alike_by_every_stage_where_this_machine_sees_the_jobs_files(capsys, tmp_path,
                                                                                                    stage, key):
    """On a Slurm profile with a local tunnel (the login node sees the cluster's storage) quantize refused a missing
    quantization.source while convert and eval called theirs valid. Now one rule (``input-exists``,
    ``validation.inputs.missing_inputs``) checks every stage's input keys (those its configs wire to an artifact,
    plus generation.model_name); the existing folder passes, and over an SSH tunnel nothing is claimed."""
    missing = tmp_path / "nosuch"
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "tiny", f"{key}={missing}", "--dry-run", "--quiet",
                             *ON_SAMPLE)
    line = f"error: {key}={str(missing)!r}: no such file or folder ("
    assert code == 2 and line in out, (out, err)
    assert "this machine sees the job's files, so the job would not find it either" in out
    missing.mkdir()
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "tiny", f"{key}={missing}", "--dry-run", "--quiet",
                             *ON_SAMPLE)
    assert "no such file or folder" not in out, out


def test_input_exists_is_not_claimed_over_ssh_nor_for_a_hub_id(tmp_path):
    from nemotron.config.registry import get_stage
    from nemotron.validation.inputs import input_keys, missing_input, missing_inputs

    class Over:  # a profile's settings as missing_inputs reads them: only over_ssh
        class settings:  # noqa: N801
            over_ssh = True

    rlvr = get_stage("rlvr")
    assert "policy.model_name" in input_keys(rlvr) and "data.train.data_path" in input_keys(rlvr)
    cfg = {"policy": {"model_name": str(tmp_path / "nosuch")}}
    assert [p.key for p in missing_inputs(rlvr, cfg, None)] == ["policy.model_name"]
    assert missing_inputs(rlvr, cfg, Over()) == []
    assert missing_input("policy.model_name", "nvidia/NVIDIA-Nemotron-3-Ultra") is None
    assert missing_input("policy.model_name", "${art:rl-checkpoint,path}") is None


# ------------------------------------------------------------------ NVFP4 on a profile that declares no GPU
def test_nvfp4_warning_on_a_profile_without_a_gpu_says_to_declare_it_there(capsys, tmp_path):
    """``quantize -c default --run YOUR-CLUSTER`` (the seed's profile, no gpu): the NVFP4 warning said to pass
    --run/--batch PROFILE, which the user had done. Now it names the profile and the key to set in it (as the memory
    warning of the same run does), and ``profile.gpu=B200`` clears it."""
    env = tmp_path / "env.toml"
    env.write_text('[nogpu]\nexecutor = "slurm"\naccount = "a"\npartition = "batch"\ngpus_per_node = 8\n'
                   'job_dir = "/shared/jobs"\n')
    args = ("ultra3", "quantize", "-c", "default", "--batch", "nogpu", "--env-file", str(env), "--dry-run")
    code, out, err = run_cli(capsys, *args)
    line = next((ln for ln in out.splitlines() if ln.startswith("warning: generate.kernels='nvfp4'")), "")
    assert "profile nogpu declares no GPU (gpu / gpu_arch), so this is not checked" in line, out
    assert line.endswith('valid: set gpu = "B200" (or gpu_arch = "blackwell"; GB200, B300, GB300) in [nogpu] of '
                         'env.toml, or profile.gpu=B200 for one command') and "--run/--batch" not in line, line
    code, out, err = run_cli(capsys, *args, "profile.gpu=B200")
    assert "generate.kernels='nvfp4'" not in out, out
    # without any profile the old advice stands: pass one
    code, out, err = run_cli(capsys, "ultra3", "quantize", "-c", "default", "--dry-run")
    assert "no profile declares the GPU architecture, so this is checked when you pass --run/--batch PROFILE" in out
