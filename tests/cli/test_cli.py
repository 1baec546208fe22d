"""The command line: options, overrides, config layering, errors and exit codes.

These run the real CLI (``nemotron.cli.main``) on the configs shipped in ``stages/``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nemotron.config import artifacts
from nemotron.cli.main import main
from nemotron.config.compile import compile_config, parse_override
from nemotron.errors import ConfigError, UsageError
from nemotron.config.registry import STAGES, get_stage
from config_support import config_valid  # noqa: F401 - also imported from here by the other CLI tests

ROOT = Path(__file__).resolve().parents[2]
#: A cluster profile (tests/fixtures/env.toml, never submitted to): without a profile ``-c tiny`` (8 GPUs, the NeMo
#: container) runs on this machine and is refused here, the dry run too (validation.this_machine).
ON_CLUSTER = ("--batch", "sample", "--env-file", str(ROOT / "tests" / "fixtures" / "env.toml"))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NEMOTRON_ENV_FILE", raising=False)
    monkeypatch.chdir(tmp_path)


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


# ---------------------------------------------------------------------------------------------- #
def test_help_lists_every_stage(capsys):
    code, out, _ = run_cli(capsys, "ultra3", "--help")
    assert code == 0
    for word in ("data", "pretrain", "sft", "convert", "rlvr", "mopd", "quantize", "pipe", "list"):
        assert re.search(rf"^\s+{word}\s", out, re.M), word
    code, out, _ = run_cli(capsys, "ultra3", "data", "prep", "--help")
    assert code == 0 and all(w in out for w in ("pretrain", "sft", "rl"))


def test_unknown_option_suggests(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dryrun")
    assert code == 2
    assert "no such option --dryrun" in err and "did you mean --dry-run" in err
    assert "Traceback" not in err


def test_config_typo_suggests_even_a_letter_swap(capsys):
    """``-c tyni`` (two letters swapped, which difflib scores 0.5) gets a did-you-mean as stage and key typos do."""
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tyni", "--dry-run", "-q")
    assert code == 2
    assert "error: ultra3 pretrain has no config 'tyni'" in err and "hint: did you mean 'tiny'?" in err


def test_mapping_type_mismatch_is_one_short_line(capsys):
    """``model=3``: the error names the mapping's size and first keys, not the whole mapping."""
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "-q", "model=3")
    assert code == 2
    line = err.splitlines()[0]
    assert re.fullmatch(r"error: override 'model=3': 'model' expects mapping \(now \d+ keys: \w+, \w+, \w+, \.\.\.\), "
                        r"got int", line), line


def test_missing_choice_option_lists_choices_without_tabs(capsys, tmp_path):
    code, _, err = run_cli(capsys, "ultra3", "data", "import", str(tmp_path))
    assert code == 2
    assert "\t" not in err
    assert "error: missing option '--as'. Choose from: pretrain-data, sft-data, rl-data" in err, err


def test_run_and_batch_exclusive(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "--run", "a", "--batch", "b", "--dry-run")
    assert code == 2 and "mutually exclusive" in err


def test_override_typo_is_rejected_with_suggestion():
    stage = get_stage("pretrain")
    with pytest.raises(ConfigError) as exc:
        compile_config(stage, "tiny", ["run.env.node=2"])
    assert "unknown key 'run.env.node'" in exc.value.message
    assert "did you mean 'run.env.nodes'" in (exc.value.hint or "")


def test_override_typo_exit_code(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "run.env.nodez=2")
    assert code == 2
    assert "unknown key 'run.env.nodez'" in err and "run.env.nodes" in err


def test_add_delete_and_list_element_overrides():
    stage = get_stage("pretrain")
    c = compile_config(stage, "tiny", ["+extra.values=[1, 2, 3]", "extra.values[1]=5", "~run.env.cpus", "run.env.nodes=3"])
    assert c.config["extra"]["values"] == [1, 5, 3]
    assert "cpus" not in c.config["run"]["env"]
    assert c.config["run"]["env"]["nodes"] == 3
    assert c.provenance["run.env.nodes"] == "override"
    assert c.provenance["extra.values"] == "override"
    # dotted index spelling works too
    c2 = compile_config(stage, "tiny", ["+extra.values=[1, 2]", "extra.values.0=9"])
    assert c2.config["extra"]["values"] == [9, 2]


def test_add_existing_key_and_delete_missing_key_fail():
    stage = get_stage("pretrain")
    with pytest.raises(ConfigError, match="already exists"):
        compile_config(stage, "tiny", ["+run.env.nodes=2"])
    with pytest.raises(ConfigError, match=r"unknown key 'run\.env\.nope'"):
        compile_config(stage, "tiny", ["~run.env.nope"])
    with pytest.raises(ConfigError, match=r"index 7 out of range \('extra' has 1 item: no index 7\)") as caught:
        compile_config(stage, "tiny", ["+extra=[1]", "extra[7]=2"])
    assert caught.value.hint == "set the whole list: extra=[...] (an index replaces an element that exists)"
    # an index into a null list (tiny's model.recompute_modules) or a scalar: not an "unknown key" with a did-you-mean
    with pytest.raises(ConfigError, match=r"index 7 out of range \('model.recompute_modules' is null, not a list"):
        compile_config(stage, "tiny", ["model.recompute_modules[7]=x"])
    with pytest.raises(ConfigError, match=r"'model.name' is a str, not a list: no index 7"):
        compile_config(stage, "tiny", ["model.name[7]=x"])


def test_override_type_mismatch():
    with pytest.raises(ConfigError, match="expects int"):
        compile_config(get_stage("pretrain"), "tiny", ["run.env.nodes=many"])


def test_integral_float_for_an_int_key_compiles_to_int(tmp_path):
    """``1e3`` (a YAML float) for an int key is the int 1000 in the compiled config, from an override and from a config
    file alike; 16.5 stays refused."""
    c = compile_config(get_stage("pretrain"), "tiny", ["train.train_iters=1e3"])
    assert c.config["train"]["train_iters"] == 1000 and type(c.config["train"]["train_iters"]) is int
    f = tmp_path / "f.yaml"
    f.write_text("defaults: tiny\ntrain:\n  train_iters: 2.0e3\n")
    c = compile_config(get_stage("pretrain"), str(f), [])
    assert c.config["train"]["train_iters"] == 2000 and type(c.config["train"]["train_iters"]) is int
    with pytest.raises(ConfigError, match="expects int"):
        compile_config(get_stage("pretrain"), "tiny", ["train.train_iters=16.5"])


def test_a_float_beyond_exact_integers_is_refused_for_an_int_key(tmp_path):
    """``train.train_iters=1e30`` compiled to 1000000000000000019884624838656 (the float's binary value, not the
    number written): a float for an int key beyond 2**53 is refused, from an override and a config file, saying
    why; 2**53 itself (exact) still compiles to the int."""
    stage = get_stage("pretrain")
    with pytest.raises(ConfigError, match=r"got float: beyond 2\*\*53, a float is no exact integer \(it reads as "
                                          r"1000000000000000019884624838656\)") as exc:
        compile_config(stage, "tiny", ["train.train_iters=1e30"])
    assert exc.value.message.startswith("override 'train.train_iters=1e30': 'train.train_iters' expects int"), exc.value
    with pytest.raises(ConfigError, match=r"got float: not a finite number"):
        compile_config(stage, "tiny", ["train.train_iters=.inf"])
    f = tmp_path / "f.yaml"
    f.write_text("defaults: tiny\ntrain:\n  train_iters: 1.0e+30\n")
    with pytest.raises(ConfigError, match=r"'train.train_iters' expects int, got float 1\.0e\+30: beyond 2\*\*53"):
        compile_config(stage, str(f), [])
    c = compile_config(stage, "tiny", ["train.train_iters=9007199254740992.0"])
    assert c.config["train"]["train_iters"] == 2 ** 53 and type(c.config["train"]["train_iters"]) is int


def test_a_null_int_setting_is_named_null_not_none():
    """The runtime's integer check said ``train.train_iters=None`` (Python's word) for a YAML ``null``."""
    from nemotron.runtime.common.settings import SettingsError, _int

    with pytest.raises(SettingsError, match=r"^train\.train_iters=null: expected an integer$"):
        _int({"train": {"train_iters": None}}, "train.train_iters")
    with pytest.raises(SettingsError, match=r"^train\.train_iters=true: expected an integer$"):
        _int({"train": {"train_iters": True}}, "train.train_iters")
    with pytest.raises(SettingsError, match=r"^train\.train_iters=1e\+30: expected an integer$"):
        _int({"train": {"train_iters": 1e30}}, "train.train_iters")
    assert _int({"train": {"train_iters": 2048.0}}, "train.train_iters") == 2048


def test_malformed_override():
    with pytest.raises(UsageError):
        parse_override("just-a-word")
    with pytest.raises(UsageError):
        parse_override("a..b=1")
    assert parse_override("run.time=04:00:00").value == "04:00:00"  # a Slurm time stays a string
    assert parse_override("x=1e-4").value == pytest.approx(1e-4)


@pytest.mark.parametrize("spelling", [["-c", "tiny"], ["--config", "tiny"], ["--config=tiny"], ["-ctiny"]])
def test_config_option_spellings(capsys, spelling):
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", *spelling, "--dry-run")
    assert code == 0, err
    assert "config tiny" in out


def test_overrides_before_and_after_options(capsys):
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "run.env.cpus=3", "-c", "tiny", "--dry-run")
    assert code == 0, err
    assert re.search(r"cpus: 3\s+# override", out)
    code, out2, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run", "run.env.cpus=3")
    assert code == 0, err
    assert re.search(r"cpus: 3\s+# override", out2)


def test_unknown_config_name_suggests(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiyn", "--dry-run")
    assert code == 2 and "no config 'tiyn'" in err and "did you mean 'tiny'" in err


# ---------------------------------------------------------------------------------------------- #
# config files: inheritance, cycles, unknown keys
def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_config_file_inherits_shipped_config(tmp_path):
    a = _write(tmp_path / "mine.yaml", "defaults: tiny\nrun:\n  env:\n    cpus: 2\n")
    c = compile_config(get_stage("pretrain"), str(a), [])
    tiny = compile_config(get_stage("pretrain"), "tiny", [])
    assert c.config["run"]["env"]["cpus"] == 2
    assert c.layers == ["schema", "default.yaml", "tiny.yaml", str(a.resolve())]
    assert c.config["run"]["env"]["nodes"] == tiny.config["run"]["env"]["nodes"]


def test_config_cycle_is_reported(tmp_path):
    _write(tmp_path / "a.yaml", "defaults: b.yaml\n")
    _write(tmp_path / "b.yaml", "defaults: a.yaml\n")
    with pytest.raises(ConfigError) as exc:
        compile_config(get_stage("pretrain"), str(tmp_path / "a.yaml"), [])
    assert "cycle" in exc.value.message and "a.yaml -> " in exc.value.message


def test_config_missing_parent(tmp_path):
    a = _write(tmp_path / "a.yaml", "defaults: nothere\n")
    with pytest.raises(ConfigError, match="no config 'nothere'"):
        compile_config(get_stage("pretrain"), str(a), [])


def test_config_file_unknown_keys_all_listed(tmp_path):
    a = _write(tmp_path / "a.yaml", "run:\n  env:\n    nodez: 2\n    cpu: 4\n")
    with pytest.raises(ConfigError) as exc:
        compile_config(get_stage("pretrain"), str(a), [])
    assert "run.env.nodez" in exc.value.message and "run.env.cpu" in exc.value.message
    assert "did you mean 'run.env.nodes'" in exc.value.message


def test_invalid_yaml_names_file_and_line(tmp_path):
    a = _write(tmp_path / "bad.yaml", "run:\n  env:\n    nodes: [1\n")
    with pytest.raises(ConfigError) as exc:
        compile_config(get_stage("pretrain"), str(a), [])
    assert str(a) in exc.value.message and re.search(r"bad\.yaml:\d+:\d+", exc.value.message)


def test_missing_explicit_input_path(tmp_path):
    with pytest.raises(ConfigError, match="input path does not exist"):
        compile_config(get_stage("pretrain"), "tiny", [f"+data_path={tmp_path / 'nope.json'}"])


# ---------------------------------------------------------------------------------------------- #
# interpolation: env vars and artifacts
def test_unresolved_artifact_warns_and_dry_run_refuses_as_the_run(capsys):
    stage = get_stage("pretrain")
    c = compile_config(stage, "tiny", ["data.per_split_data_args_path=${art:never-made,blend_path}"])
    assert "data.per_split_data_args_path" in c.unresolved
    assert [w.rule for w in c.warnings()] == ["unresolved"] * len(c.unresolved)
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", *ON_CLUSTER,
                             "data.per_split_data_args_path=${art:never-made,blend_path}")
    assert code == 2, err  # the run would refuse to start: so does the dry run
    assert "unresolved" in out and "never-made" in out
    assert out.startswith("dry run: the config is valid") and "but the run would refuse to start" in out.splitlines()[0]


def test_unresolved_value_blocks_a_real_run(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", *ON_CLUSTER,
                           "data.per_split_data_args_path=${oc.env:NEMOTRON_TEST_UNSET_VAR}")
    assert code == 2
    assert "refusing to start" in err and "NEMOTRON_TEST_UNSET_VAR" in err


def test_unset_variable_of_an_int_key_says_it_is_not_set(capsys, monkeypatch):
    """``train.train_iters=${oc.env:VAR}`` with VAR unset: the report says VAR is not set, not that the ``${...}``
    text is not a positive number (a rule read the unresolved text)."""
    monkeypatch.delenv("NEMOTRON_TEST_NOPE_X", raising=False)
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", *ON_CLUSTER,
                             "train.train_iters=${oc.env:NEMOTRON_TEST_NOPE_X}")
    assert code == 2, err
    assert "train.train_iters: environment variable NEMOTRON_TEST_NOPE_X is not set" in out
    assert "positive number" not in out + err


def test_artifact_reference_typo_and_missing_version_say_so(capsys, tmp_path):
    """A misspelt artifact name gets a did-you-mean (pinned or not), a version that does not exist names those that
    do; neither hint says to export a variable or to make the artifact first."""
    for part in ("a", "b"):
        (tmp_path / part).mkdir()
        artifacts.record("pretrain-data", {"path": str(tmp_path / part), "blend_path": str(tmp_path / part / "b.json"),
                                           "config": "tiny"})
    assert artifacts.versions("pretrain-data") == [1, 2]
    cases = [("${art:pretrain-dta:1,blend_path}", "no artifact pretrain-dta (did you mean pretrain-data?)",
              "correct the artifact name"),
             ("${art:pretrain-data:9,blend_path}", "artifact pretrain-data has no version 9: versions 1-2 exist",
              "pin a version that exists"),
             ("${art:x}", "no artifact x: no stage makes it", "correct the artifact name")]
    for ref, line, hint in cases:
        code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", *ON_CLUSTER,
                                 f"data.per_split_data_args_path={ref}")
        assert code == 2, err
        assert f"data.per_split_data_args_path: {line}" in out, out
        assert f"hint: {hint}" in err and "export the variable" not in err and "make it first" not in err, err
    assert artifacts.span([1, 2, 3]) == "1-3" and artifacts.span([1, 3]) == "1, 3" and artifacts.span([2]) == "2"


def test_artifact_reference_resolves(tmp_path):
    artifacts.record("my-data", {"path": str(tmp_path), "blend_path": str(tmp_path / "blend.json"), "config": "tiny"})
    artifacts.record("my-data", {"path": str(tmp_path), "blend_path": str(tmp_path / "v2.json"), "config": "tiny"})
    artifacts.record("my-data", {"path": str(tmp_path), "blend_path": str(tmp_path / "big.json"), "config": "default"})
    c = compile_config(get_stage("pretrain"), "tiny", ["+a=${art:my-data,blend_path}"])
    # the latest made by the same config name, not the latest of all
    assert c.config["a"].endswith("v2.json") and c.artifact_keys["a"] == "my-data v2"
    # an explicit version wins, and the other keys of the same artifact follow it: one run never mixes versions
    c = compile_config(get_stage("pretrain"), "tiny", ["+a=${art:my-data,blend_path}", "+b=${art:my-data:1,blend_path}"])
    assert c.config["a"].endswith("blend.json") and c.config["b"].endswith("blend.json")
    assert c.artifact_keys["a"] == c.artifact_keys["b"] == "my-data v1"
    with pytest.raises(ConfigError, match=r"\+?b: pins my-data v2 but \+?a pins v1: one run would read two versions"):
        compile_config(get_stage("pretrain"), "tiny", ["+a=${art:my-data:1,blend_path}", "+b=${art:my-data:2,blend_path}"])
    d = compile_config(get_stage("pretrain"), "default", ["+a=${art:my-data,blend_path}"])
    assert d.config["a"].endswith("big.json")
    local = compile_config(get_stage("pretrain"), "local", ["+a=${art:my-data,blend_path}"])
    assert local.config["a"].endswith("v2.json")  # data prep's tiny sample is also its local
    with pytest.raises(ConfigError, match="no field 'nope'"):
        compile_config(get_stage("pretrain"), "tiny", ["+a=${art:my-data,nope}"])


def test_pinning_one_key_of_an_artifact_pins_every_key_it_feeds(tmp_path, capsys):
    """``sft -c tiny 'dataset.dataset_root=${art:sft-data:1,path}'`` took dataset_root from v1 and the packed
    Parquet and metadata files from the latest (v2): one run, two data versions, no warning. Now every key sft-data
    feeds reads the pinned version, and the dry run's input lines say so."""
    from local_runtime_support import write_sft_data

    for v in (1, 2):
        d = tmp_path / f"v{v}"
        write_sft_data(d / "data", 64, packs=4, valid_packs=1, seed=v)
        (d / "data" / "64_metadata.jsonl").write_text(json.dumps({"max_samples_per_bin": 8}) + "\n")
        artifacts.record("sft-data", {"path": str(d), "pack_size": "64", "config": "tiny",
                                      "train_path": str(d / "data" / "training_64.idx.parquet"),
                                      "valid_path": str(d / "data" / "validation_64.idx.parquet"),
                                      "metadata_path": str(d / "data" / "64_metadata.jsonl")})
    c = compile_config(get_stage("sft"), "tiny", ["dataset.dataset_root=${art:sft-data:1,path}"])
    specs = c.config["dataset"]["packed_sequence_specs"]
    assert c.config["dataset"]["dataset_root"] == str(tmp_path / "v1")
    for key in ("packed_train_data_path", "packed_val_data_path", "packed_metadata_path"):
        assert specs[key].startswith(str(tmp_path / "v1" / "data")), (key, specs[key])
    assert set(v for k, v in c.artifact_keys.items() if k.startswith("dataset.")) == {"sft-data v1"}
    code, out, err = run_cli(capsys, "ultra3", "sft", "-c", "tiny", "--dry-run",
                             "dataset.dataset_root=${art:sft-data:1,path}")
    assert "input sft-data v2" not in out + err and "input sft-data v1" in out + err, out + err


def test_env_interpolation(monkeypatch):
    monkeypatch.setenv("NEMOTRON_TEST_DIR", "/data/x")
    c = compile_config(get_stage("pretrain"), "tiny", ["+a=${oc.env:NEMOTRON_TEST_DIR}/y", "+b=${oc.env:NEMOTRON_NOPE_X,fallback}"])
    assert c.config["a"] == "/data/x/y" and c.config["b"] == "fallback"


@pytest.mark.parametrize("override", ["checkpoint.save=${", "data.per_split_data_args_path=${art:pretrain-data:1,blend_path",
                                      "+extra=[a, '${oc.env:X']"])
def test_malformed_interpolation_is_refused_naming_key_and_value(capsys, override):
    """A ``${...}`` that does not parse (no closing brace) is a usage error naming the key, its value and the layer
    that set it, with the interpolation forms as hint: before, OmegaConf refused the whole tree (internal error)."""
    key, _, value = override.lstrip("+").partition("=")
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "local", "--dry-run", "-q", override)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"error: '{key}") and "(override): malformed interpolation" in lines[0], err
    assert lines[1].startswith("hint: interpolations: ${other.key}") and "internal error" not in err


def test_malformed_interpolation_in_a_config_file_names_the_file(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: tiny\ncheckpoint:\n  save: ${oops\n")
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", str(bad), "--dry-run", "-q")
    assert code == 2, err
    assert f"error: 'checkpoint.save' = '${{oops' ({bad}): malformed interpolation" in err


def test_profile_override_without_profile_is_an_error(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "profile.time=01:00:00")
    assert code == 2 and "no profile is used" in err


# ---------------------------------------------------------------------------------------------- #
def test_every_stage_ships_default_and_tiny():
    from nemotron.config.paths import config_names

    for stage in STAGES:
        names = config_names(stage)
        assert "default" in names and "tiny" in names, (stage.name, names)


def test_list_shows_configs_and_artifacts(capsys):
    code, out, _ = run_cli(capsys, "ultra3", "list")
    assert code == 0
    assert "pretrain-data" in out and "tiny" in out and "quantized-checkpoint" in out
    # a config that takes other artifacts than its stage's default gets its own row (cells wrap onto
    # continuation lines)
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("quantize "))
    assert re.match(r"quantize\s+default, tiny\s+mopd-checkpoint\s+quantized-checkpoint\s", lines[first]), out
    last = next(i for i, line in enumerate(lines) if line.startswith("eval "))  # the stage after quantize
    local = " ".join(lines[first + 1:last]).split()
    assert local[0] == "local", out  # the MOPD output, else (a short chain) the SFT model
    assert {"pretrain-data,", "mopd-checkpoint,", "sft-checkpoint", "quantized-checkpoint"} <= set(local), out
    # the SWE teacher takes its NeMo Gym prompts from the released blend (data prep rl -c ultra-blends)
    assert re.search(r"^\s+teacher-swe\s+rl-checkpoint, rl-blend-swe\s+teacher-swe\s", out, re.M), out


def test_each_config_declares_what_it_consumes():
    """What a config consumes is read from its ``${art:...}`` values after its chain is merged; the
    registry's record of a stage is its default config's (so the two cannot drift apart)."""
    from nemotron.config.compile import config_artifacts
    from nemotron.config.paths import config_names

    for stage in STAGES:
        consumes, produces = config_artifacts(stage, "default")
        assert set(consumes) == set(stage.consumes) and produces == stage.produces, stage.name
        for name in config_names(stage):
            consumes, produces = config_artifacts(stage, name)
            compiled = compile_config(stage, name, [], check_paths=False)
            assert {alt for v in _strings(compiled.config) for ref in re.findall(r"\$\{art:([^}]+)", v)
                    for alt in ref.split(",")[0].split("|")} \
                <= set(consumes), (stage.name, name)  # every reference still unresolved is among them (A|B: both)
    quantize = get_stage("quantize")
    assert config_artifacts(quantize, "local") == (("pretrain-data", "mopd-checkpoint", "sft-checkpoint"),
                                                   ("quantized-checkpoint",))
    assert config_artifacts(quantize, "tiny")[0] == ("mopd-checkpoint",)
    assert config_artifacts(get_stage("rlvr"), "teacher-reasoning")[1] == ("teacher-reasoning",)


def _strings(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _strings(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _strings(v)
    elif isinstance(tree, str):
        yield tree


def test_pipe_wires_quantize_local_to_the_planned_sft_checkpoint_and_data(capsys, tmp_path, monkeypatch):
    """`quantize -c local` consumes the local SFT checkpoint and the pretraining data: in a pipe after the
    stages that write them, its inputs are the planned outputs and need not exist yet."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "ultra3", "pipe", "data-prep-pretrain", "data-prep-sft", "pretrain", "sft",
                             "quantize", "-c", "local", "--dry-run")
    assert code == 0, err[-2000:]
    quantize = out[out.index("[5/5] ultra3 quantize"):]
    source = re.search(r"^\s+source: (\S+)\s.*\(planned", quantize, re.M)
    calib = re.search(r"^\s+calib_dataset: (\S+)\s.*\(planned", quantize, re.M)
    assert source and calib, quantize[:3000]
    sft_save = re.search(r"^\s+save: (\S+)", out[out.index("[4/5] ultra3 sft"):out.index("[5/5]")], re.M)
    assert sft_save and source.group(1) == sft_save.group(1)
    assert calib.group(1).endswith("/blend.json") and not Path(calib.group(1)).exists()


def test_pipe_wires_the_next_stage_to_the_newest_data_version(capsys, tmp_path, monkeypatch):
    """Once ``output_dir/v2`` exists (a consumed v1 was rebuilt), a data prep run writes (and resumes) there: the
    stage after it in a ``pipe`` is wired to v2's files, the names the writer itself uses
    (nemotron.data.outputs), not to v1's."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny"  # -c local of data prep is its tiny
    for version in (out_dir, out_dir / "v2"):
        version.mkdir(parents=True, exist_ok=True)
        (version / "manifest.json").write_text("{}")
    code, out, err = run_cli(capsys, "ultra3", "pipe", "data-prep-pretrain", "pretrain", "-c", "local", "--dry-run")
    assert code == 0, err[-2000:]
    pretrain = out[out.index("[2/2] ultra3 pretrain"):]
    blend = re.search(r"^\s+per_split_data_args_path: (\S+)\s.*\(planned", pretrain, re.M)
    assert blend, pretrain[:3000]
    assert blend.group(1) == str(out_dir / "v2" / "blend.json")


def test_planned_outputs_follow_the_version_the_writer_picks(tmp_path):
    """One source of truth: the planned SFT files are the writer's own (sft.split_path) in the version folder
    select_version picks: v1 while unconsumed, v2 after a consumed v1 is forced to rebuild."""
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage
    from nemotron.data import outputs, sft
    from nemotron.launch.plan import planned_outputs

    out_dir = tmp_path / "sft-data"

    def planned(force: bool) -> dict:
        compiled = compile_config(get_stage("data-prep-sft"), "tiny", [f"output_dir={out_dir}", f"force={force}"],
                                  check_paths=False)
        return planned_outputs(compiled)["sft-data"]

    first = planned(False)
    assert first["path"] == str(out_dir)
    out_dir.mkdir()
    (out_dir / "manifest.json").write_text("{}")
    outputs.record_consumer(out_dir, stage="sft", run_id="r1")
    assert planned(False)["path"] == str(out_dir)  # resumed / up to date: the latest version
    second = planned(True)  # consumed and forced: a new version
    assert second["path"] == str(out_dir / "v2")
    settings = type("S", (), {"pack_size": int(second["pack_size"])})()
    assert second["train_path"] == str(sft.split_path(out_dir / "v2", settings, "train"))
    assert second["valid_path"] == str(sft.split_path(out_dir / "v2", settings, "valid"))


def test_pipe_dry_run_shows_the_chain(capsys):
    code, out, err = run_cli(capsys, "ultra3", "pipe", "data-prep-pretrain", "pretrain", "-c", "tiny", "--dry-run",
                             *ON_CLUSTER)
    assert code == 0, err
    assert "[1/2] ultra3 data prep pretrain" in out and "[2/2] ultra3 pretrain" in out


def test_pipe_rejects_unknown_stage(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pipe", "pretrian", "--dry-run")
    assert code == 2 and "no stage 'pretrian'" in err


# ---------------------------------------------------------------------------------------------- #
HEAVY = ("nemo_run", "ray", "torch", "transformers", "megatron", "nemo_rl", "pyarrow", "tokenizers", "numpy")


# A training stage's dry run on this machine (no profile: nothing of NeMo-Run is rendered). `-c tiny` without a
# profile is refused here (8 GPUs, the NeMo container); `-c local` is the config this machine runs.
@pytest.mark.parametrize("argv", [["--help"], ["ultra3", "pretrain", "-c", "local", "--dry-run"],
                                  ["ultra3", "data", "prep", "pretrain", "-c", "tiny", "--dry-run"]])
def test_import_boundary(argv, tmp_path):
    code = (
        "import sys\n"
        "from nemotron.cli.main import main\n"
        f"rc = main({argv!r})\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "print('HEAVY=' + ','.join(heavy))\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert config_valid(proc.returncode, proc.stdout), proc.stderr  # pretrain -c local: its data is not made yet
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY=", proc.stdout[-500:]


def test_readme_commands_resolve():
    """Every `nemotron ...` line of the README names a real command with valid options (Typer parses it)."""
    import shlex

    import typer
    from typer.core import TyperGroup

    from nemotron.cli.main import build_cli

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [m.group(1) for m in re.finditer(r"^\s*(?:\$ )?(nemotron(?: [^\n#`]*)?)", text, re.M)]
    assert lines, "the README shows no nemotron command"
    cli = build_cli()
    resolved = 0
    for line in lines:
        words = shlex.split(line)[1:]
        cmd = cli
        ctx = typer.Context(cli, info_name="nemotron")
        while isinstance(cmd, TyperGroup) and words and not words[0].startswith("-"):
            sub = cmd.get_command(ctx, words[0])
            assert sub is not None, f"README: {line!r}: no command {words[0]!r}"
            cmd, words = sub, words[1:]
        resolved += not isinstance(cmd, TyperGroup)
        try:
            cmd.make_context(cmd.name, list(words), resilient_parsing=False).close()
        except typer.Exit:
            pass
        except typer.TyperException as exc:  # pragma: no cover - the assertion message is the point
            raise AssertionError(f"README: {line!r}: {exc.format_message()}") from None
    assert resolved > 10, resolved  # the walk reached commands, not only groups


def test_readme_usage_lines_exit_0_on_a_fresh_set_up(capsys, tmp_path, monkeypatch):
    """The README's Usage block, as written, in a fresh folder after its own `cp env.toml.example env.toml` and with
    the `[cluster]` profile's secrets exported (as the README says; without them the dry run refuses as the run
    does): every line that runs no job (a dry run, `list`, `profiles`) finds no problem on a machine without GPUs
    (exit 0, or exit 2 with the verdict that the config is valid but its input is not made yet: the README says so);
    the two that run a job here name what they need (base install, or the `local` extra)."""
    import shlex
    import shutil

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Usage", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.strip().startswith(("nemotron ", "cp "))]
    notes = {ln.split("#", 1)[0].strip(): ln.split("#", 1)[1] if "#" in ln else "" for ln in block.splitlines()}
    assert lines[0] == "nemotron ultra3 list"
    monkeypatch.chdir(tmp_path)
    for secret in ("WANDB_API_KEY", "HF_TOKEN"):
        monkeypatch.setenv(secret, "exported-value")
    ran = 0
    for line in lines:
        words = shlex.split(line)
        if words[0] == "cp":
            shutil.copy(ROOT / words[1], tmp_path / words[2])
            continue
        if "--dry-run" not in words and words[1:] not in (["ultra3", "list"], ["profiles"]):
            assert "base install" in notes[line] or "`local` extra" in notes[line], f"README: {line!r} names no need"
            continue
        code, out, err = run_cli(capsys, *words[1:])
        assert config_valid(code, out), f"README: {line!r} exited {code}: {err[-1500:]}"
        ran += 1
    assert ran >= 6


def test_debug_shows_traceback_only_when_asked(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiyn", "--dry-run")
    assert code == 2 and "Traceback" not in err
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiyn", "--dry-run", "--debug")
    assert code == 2 and "Traceback" in err


def test_artifact_versions():
    # the artifact store writes valid JSON records with increasing versions; an identical rerun adds none
    rec = artifacts.record("x", {"path": "/tmp", "experiment_id": "a"})
    again = artifacts.record("x", {"path": "/tmp", "experiment_id": "b"})
    assert again["version"] == rec["version"] == 1
    rec2 = artifacts.record("x", {"path": "/tmp/other"})
    assert rec2["version"] == 2
    assert json.loads((artifacts.store() / "x" / "v2.json").read_text())["path"] == "/tmp/other"


def test_bare_group_prints_its_help(capsys):
    code, out, _ = run_cli(capsys, "ultra3")
    assert code == 0 and "Commands:" in out and "pretrain" in out


def test_list_element_override_is_labelled_override(capsys):
    c = compile_config(get_stage("pretrain"), "tiny", ["+extra=[1, 2]", "extra[0]=5"])
    assert c.provenance["extra"] == "override"
    from nemotron.config.compile import annotated_yaml

    assert re.search(r"extra: \[5, 2\]\s+# override", annotated_yaml(c))


def test_gpu_stage_refuses_to_start_without_gpus(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", f"data.per_split_data_args_path={tmp_path}")
    assert code == 2 and "needs 8 GPUs per node; this machine has 0 visible" in err and "--run PROFILE" in err


def test_data_prep_dry_run_checks_what_the_runtime_checks(capsys, tmp_path):
    blend = tmp_path / "blend.json"
    blend.write_text('{"datasets": [{"name": "x", "path": "/nope/*.jsonl", "weight": 1, "category": "web"}]}')
    code, out, _ = run_cli(capsys, "ultra3", "data", "prep", "pretrain", "-c", "tiny", "--dry-run",
                           f"blend_path={blend}", "sample=-5")
    assert code == 2 and "sample=-5 must be at least 1" in out
    code, out, _ = run_cli(capsys, "ultra3", "data", "prep", "pretrain", "-c", "tiny", "--dry-run", f"blend_path={blend}")
    assert code == 2 and "matches no file" in out and "/nope/*.jsonl" in out




@pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])
def test_every_shipped_config_compiles_and_validates(stage):
    """Every config a stage ships compiles (layers, interpolation) and passes validation without a
    profile; unresolved upstream artifacts are warnings only."""
    from nemotron import validation
    from nemotron.config.paths import config_names

    for name in config_names(stage):
        compiled = compile_config(stage, name, [])
        validation.prepare(stage, compiled.config, compiled.user_keys, None)
        found = [p for p in validation.validate(stage, compiled.config, None) if p.severity == "error"]
        # mtp-boost's cluster route is refused at the pinned versions, by one rule and nothing else (docs/mtp_boost.md)
        refused = ["mtp-boost-framework"] if stage.name == "mtp-boost" and name != "local" else []
        assert [p.rule for p in found] == refused, f"{stage.name} -c {name}: {[p.render() for p in found]}"
        assert all(w.severity == "warning" for w in compiled.warnings())


def test_passthrough_key_typo_rejected_at_dry_run(capsys):
    code, out, _ = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "+train.train_itres=5")
    assert code == 2
    assert "train.train_itres=5" in out and "did you mean 'train.train_iters'" in out


def test_an_empty_config_name_is_refused_not_taken_as_default(capsys):
    """``-c ""`` (e.g. an unset shell variable) is an error naming the configs, never a silent ``default``."""
    assert main(["ultra3", "pretrain", "-c", "", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error: -c '': an empty config name" in err and "hint: give one of default, tiny, local" in err, err


def test_a_pipe_dry_run_never_calls_a_chain_valid_that_the_run_refuses(capsys, tmp_path, monkeypatch):
    """``pipe sft convert``: nothing in the chain makes sft's data, so the run refuses stage 1; the chain's last
    line says so, and the dry run exits 2, as the run does (and as a single stage's dry run does for an unresolved
    input)."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    env_file = Path(__file__).resolve().parents[1] / "fixtures" / "env.toml"
    assert main(["ultra3", "pipe", "sft", "convert", "-c", "tiny", "--batch", "sample", "--env-file", str(env_file),
                 "--dry-run"]) == 2
    cap = capsys.readouterr()
    assert "error: the run would refuse to start ultra3 sft with 5 unresolved values" in cap.err, cap.err
    last = cap.out.strip().splitlines()[-1]
    assert last == ("dry run: the chain's configs are valid, but the run would refuse to start at stage 1/2 "
                    "(ultra3 sft): see that stage's verdict; nothing was submitted"), last


def test_a_mistyped_command_word_gets_the_closest_one(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrian")
    assert code == 2 and "error: no such command 'pretrian'." in err
    assert "hint: did you mean 'pretrain'? see: nemotron ultra3 --help" in err
    code, _, err = run_cli(capsys, "ultra3", "data", "prep", "sfft")
    assert code == 2 and "hint: did you mean 'sft'? see: nemotron ultra3 data prep --help" in err
    code, _, err = run_cli(capsys, "ultra3", "zzz")
    assert code == 2 and "did you mean" not in err
