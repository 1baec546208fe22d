"""What a new user meets first with env.toml, profiles and --dry-run: the example file works here as copied,
a profile that cannot start is refused before anything is queued (exit 2, the dry run as the run), every
profile key of the wrong shape is one line naming file, profile and key, and config/pipe mistakes are
refused instead of silently changed.

The real CLI (in process), the real env.toml.example and the stages' real configs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nemotron.errors import ConfigError
from nemotron.profiles.schema import _MODELS, MAX_GPUS_PER_NODE, parse_slurm_time
from nemotron.profiles.load import load_profiles
# the autouse fixture isolates NEMOTRON_HOME here too
from test_cli import ON_CLUSTER, _isolated_home, config_valid, run_cli  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
UNSET = "NEMOTRON_TEST_NEVER_SET_SECRET"


def _env(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "env.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


# ------------------------------------------------------------------ 1. the example, as the README says to copy it
def test_example_env_toml_works_here_as_copied(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    shutil.copy(REPO / "env.toml.example", tmp_path / "env.toml")
    code, _, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run")
    assert code == 0, err
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "local", "--dry-run")
    assert code == 0, err
    assert "secret" not in err and "dry run: valid" in out + err
    assert not Path("/lustre/my-project").exists()


def test_example_env_toml_runs_local_pretraining_as_copied_without_a_wandb_key(capsys, tmp_path, monkeypatch):
    """The example's [wandb] section applies to every profile, [local] too: as copied it leaves W&B off."""
    for var in ("WANDB_API_KEY", "WANDB_MODE", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    shutil.copy(REPO / "env.toml.example", tmp_path / "env.toml")
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "local", "--batch", "local", "--dry-run")
    assert config_valid(code, out), err  # valid; its data is not made yet (the run's refusal, exit 2)
    assert "wandb_project: null" in out and "WANDB_API_KEY" not in out + err, out + err


def test_readme_cluster_dry_run_names_the_secrets_and_the_missing_data_at_once(capsys, tmp_path, monkeypatch):
    """The README's `cp env.toml.example env.toml` then `pretrain -c tiny --dry-run --run cluster` with the profile's
    secrets unset: exit 2 with every refusal at once, the two secrets AND the unmade pretrain-data with the command
    that makes it (not only once the secrets are exported); the run without --dry-run says the same."""
    for var in ("WANDB_API_KEY", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    shutil.copy(REPO / "env.toml.example", tmp_path / "env.toml")
    make = "make it first: nemotron ultra3 data prep pretrain -c tiny --run cluster"
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "--run", "cluster")
    assert code == 2, err
    verdict = out.splitlines()[0]
    assert verdict.startswith("dry run: 2 errors, "), verdict
    assert "data.per_split_data_args_path: artifact pretrain-data does not exist yet" in verdict and make in verdict
    for var in ("WANDB_API_KEY", "HF_TOKEN"):
        assert any(x.startswith(f"error: profile.cluster.secrets='{var}'") for x in out.splitlines()), out
    assert make in err.splitlines()[-1], err  # the closing hint too
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster")
    assert code == 2 and len(_error_lines(err)) == 3 and make in err.splitlines()[-1], err


def test_wandb_project_without_a_key_is_refused_by_the_dry_run_as_by_the_run(capsys, tmp_path, monkeypatch):
    """A [wandb] project on a profile whose job gets no WANDB_API_KEY (and WANDB_MODE is not offline): the
    dry run refuses it with the line the run refuses with (exit 2, nothing queued), as for a missing secret."""
    for var in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    wandb = '\n[wandb]\nproject = "nemotron-ultra3"\n'
    _env(tmp_path, '[box]\nexecutor = "local"\ngpus_per_node = 0\n' + wandb)
    line = ("profile.box.secrets='WANDB_API_KEY': logger.wandb_project='nemotron-ultra3': WANDB_API_KEY is not set "
            "in the job's environment")
    args = ("ultra3", "pretrain", "-c", "local", "--batch", "box")
    code, out, err = run_cli(capsys, *args, "--dry-run")
    assert code == 2, err
    assert any(x.startswith(f"error: {line}") for x in out.splitlines()), out + err
    assert not any(x.startswith(f"warning: {line}") for x in out.splitlines()), out + err
    code, out, err = run_cli(capsys, *args)
    assert code == 2, err
    assert any(x.startswith(f"error: {line}") for x in _error_lines(err)), err
    assert not (tmp_path / "home" / "jobs").exists()  # nothing was queued or written
    for profile in ('[box]\nexecutor = "local"\ngpus_per_node = 0\nenv_vars = { WANDB_MODE = "offline" }\n',
                    '[box]\nexecutor = "local"\ngpus_per_node = 0\nsecrets = { WANDB_API_KEY = "k-e-y-1234" }\n'):
        _env(tmp_path, profile + wandb)
        code, out, err = run_cli(capsys, *args, "--dry-run")
        assert config_valid(code, out) and "WANDB_API_KEY is not set" not in out + err, out + err


def test_artifacts_root_without_its_parent_is_refused_before_anything_is_made(capsys, tmp_path):
    root = tmp_path / "no" / "such" / "store"
    _env(tmp_path, f'[here]\nexecutor = "local"\n\n[artifacts]\nroot = "{root}"\n')
    for extra in ((), ("--batch", "here")):
        code, _, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run", *extra)
        assert code == 2, err
        assert _error_lines(err) == [f"error: {tmp_path / 'env.toml'}:5: [artifacts] root = '{root}': its parent "
                                     f"folder {root.parent} does not exist on this machine (records are kept here; "
                                     "only the last folder is created)"]
    assert not (tmp_path / "no").exists()
    _env(tmp_path, f'[artifacts]\nroot = "{tmp_path / "store"}"\n')  # a new folder in an existing one is fine
    code, _, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run")
    assert code == 0, err


# ------------------------------------------------------------------ 2. a profile that cannot start: exit 2, dry run too
def test_missing_secret_is_refused_before_anything_is_queued_and_by_the_dry_run(capsys, tmp_path, monkeypatch):
    """The run refuses (exit 2, nothing queued); the dry run, which never calls valid what the run refuses, refuses
    it with the same line (exit 2)."""
    monkeypatch.delenv(UNSET, raising=False)
    _env(tmp_path, f'[box]\nexecutor = "local"\nsecrets = ["{UNSET}"]\n')
    line = (f"profile.box.secrets='{UNSET}': declared secret is not set in this shell")
    valid = f"valid: export {UNSET}=... (or remove it from secrets)"
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "box", "--dry-run")
    assert code == 2, err
    assert f"error: {line}; {valid}" in out.splitlines() and "dry run: valid" not in out, out + err
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "box")
    assert code == 2, err
    assert f"error: {line}; {valid}" in (out + err).splitlines(), out + err
    assert not (tmp_path / "home" / "jobs").exists()  # nothing was queued or written
    monkeypatch.setenv(UNSET, "value-of-the-secret")
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "box", "--dry-run")
    assert code == 0 and "declared secret" not in out + err, out + err


def test_missing_ssh_identity_file_is_refused_by_the_dry_run_as_by_the_run(capsys, tmp_path):
    key = tmp_path / "no_such_key"
    _env(tmp_path, f'[c]\nexecutor = "slurm"\ntunnel = "ssh"\nhost = "login"\nuser = "me"\njob_dir = "/jobs"\naccount = "a"\n'
                   f'identity = "{key}"\ncontainer = false\n')
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "c", "--dry-run")
    assert code == 2, err
    assert f"error: profile.c.identity='{key}': no such private key file on this machine;" in out + err
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "c")
    assert code == 2, err
    assert f"error: profile.c.identity='{key}': no such private key file on this machine;" in out + err
    key.write_text("a key\n")
    code, out, err = run_cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "c", "--dry-run")
    assert "no such private key file" not in out + err, out + err


def test_pipe_dry_run_refuses_a_profile_the_run_refuses(capsys, tmp_path):
    _env(tmp_path, '[box]\nexecutor = "local"\n')
    for dry in (["--dry-run"], []):
        code, out, err = run_cli(capsys, "ultra3", "pipe", "data-prep-pretrain", "pretrain", "-c", "tiny",
                                 "--run", "box", *dry)
        assert code == 2, err
        assert _error_lines(err) == ["error: pipe --run needs a slurm profile (got local)"], err
        assert "dry run" not in out  # refused before any stage was shown


# ------------------------------------------------------------------ 3. every profile key of the wrong shape
WRONG = {"a string": '"x"', "a list": '["x"]', "a table": '{ a = "b" }', "an integer": "5", "a bool": "true",
         "a float": "1.5"}
BASE = {"slurm": 'executor = "slurm"\ntunnel = "ssh"\nhost = "h"\nuser = "u"\njob_dir = "/j"\n',
        "local": 'executor = "local"\n', "ray": 'executor = "ray"\naddress = "ray://h:10001"\n'}


@pytest.mark.parametrize("executor, key", [(e, k) for e, m in _MODELS.items() for k in [*m.model_fields, "extends"]
                                           if k != "executor"])
def test_every_profile_key_of_the_wrong_type_is_one_clear_error(tmp_path, executor, key):
    refused = 0
    for kind, value in WRONG.items():
        lines = [ln for ln in BASE[executor].splitlines() if ln.split(" = ")[0] != key]
        path = _env(tmp_path, "[p]\n" + "\n".join(lines) + f"\n{key} = {value}\n")
        try:
            load_profiles(path).get("p")
        except ConfigError as exc:  # anything else (AttributeError, TypeError...) fails the test
            refused += 1
            assert str(path) in exc.message and "profile 'p'" in exc.message, (kind, exc.message)
            assert key in exc.message and "\n" not in exc.message, (kind, exc.message)
    assert refused >= len(WRONG) - 2, f"{key} accepted {len(WRONG) - refused} of the wrong shapes"


def test_secrets_as_a_string_exits_2_naming_file_profile_and_key(capsys, tmp_path):
    path = _env(tmp_path, '[c]\nexecutor = "local"\nsecrets = "HF_TOKEN"\n')
    for args in (["profiles", "c"], ["ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "c", "--dry-run"]):
        code, _, err = run_cli(capsys, *args)
        assert code == 2, err
        assert _error_lines(err) == [f"error: {path}:3: profile 'c': secrets: expected a list of variable names or "
                                     "a table { NAME = \"value\" }"], err


# ------------------------------------------------------------------ 4. bounds of node shape and time limit
def test_gpus_per_node_is_bounded(tmp_path):
    ok = load_profiles(_env(tmp_path, f'[c]\nexecutor = "local"\ngpus_per_node = {MAX_GPUS_PER_NODE}\n')).get("c")
    assert ok.gpus_per_node == MAX_GPUS_PER_NODE
    with pytest.raises(ConfigError, match=r":3: profile 'c': gpus_per_node: 100000000000 must be <= 64 \(the most"):
        load_profiles(_env(tmp_path, '[c]\nexecutor = "local"\ngpus_per_node = 100000000000\n')).get("c")


def test_time_takes_what_sbatch_takes_and_no_more_than_slurm_holds(tmp_path):
    # `sbatch --test-only --time=25:99` accepts it (Slurm 22.05): MM:SS with 99 seconds = 26 min 39 s
    assert parse_slurm_time("25:99") == 25 * 60 + 99
    assert parse_slurm_time(str(2**31 // 60 - 1)) == (2**31 // 60 - 1) * 60
    for huge in ("100000000000", 100000000000, "25000-00:00:00"):
        with pytest.raises(ValueError, match="longer than Slurm can hold"):
            parse_slurm_time(huge)
    with pytest.raises(ConfigError, match=r"profile 'c': time: .*longer than Slurm can hold"):
        load_profiles(_env(tmp_path, '[c]\nexecutor = "slurm"\ntime = "100000000000"\n')).get("c")


# ------------------------------------------------------------------ 5. files given on the command line
def test_env_file_and_config_that_are_folders_say_so(capsys, tmp_path):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--env-file", str(tmp_path), "--dry-run")
    assert code == 2 and _error_lines(err) == [f"error: --env-file {tmp_path}: is a folder, not a file"], err
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", str(tmp_path), "--dry-run")
    assert code == 2 and _error_lines(err) == [f"error: config file {tmp_path}: is a folder, not a YAML file"], err


def test_duplicate_key_in_a_config_file_is_refused(capsys, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("defaults: tiny\ntrain:\n  global_batch_size: 8\n  global_batch_size: 16\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", str(path), "--dry-run")
    assert code == 2, err
    assert _error_lines(err) == [f"error: {path}:4: duplicate key 'train.global_batch_size' (first set at line 3); "
                                 "YAML would silently keep the last"], err


def test_deleting_a_section_is_refused_naming_it(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "~train", "--dry-run")
    assert code == 2, err
    assert _error_lines(err) == ["error: override '~train': 'train' is a section of the stage and cannot be "
                                 "deleted (its keys would fall back to values you never set)"], err
    assert "global_batch_size" not in err
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "~run.env.cpus", "--dry-run", *ON_CLUSTER)
    assert config_valid(code, out), err  # one key still may be deleted


@pytest.mark.parametrize("stage,key", [("pretrain", "train.global_batch_size"), ("pretrain", "model.tensor_model_parallel_size"),
                                       ("rlvr", "policy.train_global_batch_size")])
def test_deleting_a_required_layout_key_is_refused_naming_it(capsys, stage, key):
    """``~train.global_batch_size`` is refused as required: the layout rules read a stand-in 1 for a missing key
    and reported ``train.global_batch_size=1`` (a value nobody set)."""
    code, _, err = run_cli(capsys, "ultra3", stage, "-c", "tiny", f"~{key}", "--dry-run", *ON_CLUSTER)
    assert code == 2, err
    assert _error_lines(err) == [f"error: {key} is required (deleted by ~{key})"], err
    assert f"{key}=1" not in err


# ------------------------------------------------------------------ 6. pipe: the stage named, no silent changes
def test_pipe_override_typo_names_its_stage(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pipe", "data-prep-pretrain", "pretrain", "-c", "tiny",
                           "pretrain:train.sampl=5", "--dry-run")
    assert code == 2, err
    assert _error_lines(err) == ["error: ultra3 pretrain: override 'train.sampl=5': unknown key 'train.sampl'"], err


@pytest.mark.parametrize("stages, line", [
    (["sft", "pretrain"], "error: pipe: sft is named before pretrain, which produces its input pretrain-checkpoint; "
                          "stages run in the order named"),
    (["pretrain", "pretrain"], "error: pipe: stage pretrain is named 2 times; its occurrence 2 would run -c "
                               "tiny-cycle2, which pretrain does not have (a stage runs again only as a new cycle, "
                               "with its own config)"),
])
def test_pipe_refuses_reordering_and_duplicates(capsys, stages, line):
    code, out, err = run_cli(capsys, "ultra3", "pipe", *stages, "-c", "tiny", "--dry-run")
    assert code == 2, err
    assert _error_lines(err) == [line] and "dry run" not in out, err


def test_pipe_runs_a_valid_order_as_named(capsys):
    """The README's chain names data-prep-sft after pretrain: a valid order (each stage after its inputs)."""
    code, out, err = run_cli(capsys, "ultra3", "pipe", "data-prep-pretrain", "pretrain", "data-prep-sft", "sft",
                             "-c", "local", "--dry-run")
    assert code == 0, err[-3000:]
    heads = [line for line in out.splitlines() if line.lstrip().startswith("[") and "/4] ultra3" in line]
    assert [h.split("] ")[1].split(" ─")[0].strip() for h in heads] == [
        "ultra3 data prep pretrain", "ultra3 pretrain", "ultra3 data prep sft", "ultra3 sft"], heads


@pytest.mark.parametrize("stage", ["pretrain", "sft", "convert"])
def test_training_stage_help_names_both_backends(capsys, stage):
    """`-c local` runs without Megatron-Bridge: the help names both backends, not Megatron-Bridge alone."""
    code, out, err = run_cli(capsys, "ultra3", stage, "--help")
    assert code == 0, err
    summary = " ".join(out.split("Options:")[0].split()).replace("- ", "-")  # click wraps at hyphens
    assert "Megatron-Bridge" in summary and "-c local on this machine" in summary, summary


def test_docs_say_an_early_ctrl_c_prints_interrupted_not_a_traceback():
    """The console script guards the import (src/nemotron/console.py): docs/execution.md says so."""
    text = " ".join((REPO / "docs" / "execution.md").read_text(encoding="utf-8").split())
    assert "Python's own traceback" not in text
    assert "while Python is still importing the command, ends it the same way: the line `interrupted`" in text


def test_null_or_an_emptied_section_the_nemo_rl_job_needs_is_refused(capsys, monkeypatch):
    """``grpo.num_prompts_per_step=null`` (NeMo RL reads an int there) and ``grpo={}`` (every key of the section gone,
    as ``~grpo``) are refused by the dry run, naming the key, instead of a job that fails on its nodes."""
    monkeypatch.setenv("WANDB_API_KEY", "x")
    monkeypatch.setenv("HF_TOKEN", "y")
    code, out, err = run_cli(capsys, "ultra3", "rlvr", "-c", "tiny", "grpo.num_prompts_per_step=null", "--dry-run", *ON_CLUSTER)
    assert code == 2 and out.startswith("dry run: 1 error,"), out + err
    assert ("error: grpo.num_prompts_per_step=null: null, but NeMo RL declares it int (not optional) and reads it as "
            "one: the job would be queued and fail on its nodes") in out + err, out + err
    code, _, err = run_cli(capsys, "ultra3", "rlvr", "-c", "tiny", "grpo={}", "--dry-run", *ON_CLUSTER)
    assert code == 2 and _error_lines(err) == ["error: override 'grpo={}': 'grpo' is a section of the stage and cannot "
                                               "be emptied (its keys would fall back to values you never set)"], err


def test_null_read_by_an_interpolation_is_named(capsys, monkeypatch):
    """``policy.max_total_sequence_length=null`` breaks ``${mul:...}`` of train_mb_tokens: the error names the null key
    first (not only the arithmetic's TypeError with an interpolation-syntax hint)."""
    monkeypatch.setenv("WANDB_API_KEY", "x")
    monkeypatch.setenv("HF_TOKEN", "y")
    code, out, err = run_cli(capsys, "ultra3", "rlvr", "-c", "tiny", "policy.max_total_sequence_length=null", "--dry-run",
                             *ON_CLUSTER)
    assert code == 2, out + err
    lines = _error_lines(err)
    assert lines and lines[0].startswith("error: policy.max_total_sequence_length=null: "
                                         "'policy.dynamic_batching.train_mb_tokens' = "), err
    assert "hint: set policy.max_total_sequence_length=VALUE (a number)" in err, err
