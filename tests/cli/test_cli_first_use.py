"""What a new user met on a first try, each held to the right value: `pipe` lists the problems it refuses for,
`quantize` in a chain takes the checkpoint the chain will write, a backend without a runtime is refused up front,
the `<N>layer` slice layout on any node size, every problem in one pass, the one-machine run without a
profile, and the command line's own rough edges (did-you-mean, pipe overrides, empty profile, one ``-c``).

These run the real CLI (``nemotron.cli.main``) on the shipped configs and a real env.toml; nothing is faked
(a refused run starts nothing, which the tests check on disk).
"""

from __future__ import annotations

import re

import pytest

from nemotron import validation
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
# the autouse fixture isolates NEMOTRON_HOME here too
from test_cli import _isolated_home, config_valid, run_cli  # noqa: F401

FIXTURE_ENV = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "env.toml")
#: the cluster stack (-c tiny) checked for a Slurm profile: without one the run starts on this machine, which
#: needs its GPUs and framework (rule gpus-here / framework-here, tests/cli/test_dryrun_this_machine.py)
ON_SAMPLE = ("--batch", "sample", "--env-file", FIXTURE_ENV)

SHORT_PROFILE = """\
[short]
executor = "slurm"
account = "acct"
partition = "batch"
time = "00:05:00"
gpus_per_node = 8
gpu_arch = "hopper"
gpu_memory = 141
"""



# ------------------------------------------------------------------------------ 1. pipe lists its problems
def test_pipe_without_dry_run_prints_the_problems_it_refuses_for(capsys, tmp_path):
    code, _, err = run_cli(capsys, "ultra3", "pipe", "pretrain", "sft", "-c", "tiny",
                           "pretrain:train.global_batch_size=-16", *ON_SAMPLE)
    assert code == 2, err
    lines = err.splitlines()
    at = lines.index("ultra3 pretrain (tiny):")
    assert "error: train.global_batch_size=-16: must be a positive integer; valid: 1, 2, 3, ..." in lines[at:], err
    assert lines[-2:] == ["error: 1 error found before anything was queued",
                          "hint: fix the keys listed above (or override them: key=value) and run again with --dry-run"]
    assert not (tmp_path / "home" / "runs").exists()  # nothing started


# ------------------------------------------------------------------------ 2. quantize in a chain
def test_pipe_quantize_after_mopd_takes_the_planned_checkpoint(capsys):
    """The cluster backend's ``quantization.source`` is the MOPD checkpoint the chain will write: accepted in the
    chain, while the same missing folder given alone is refused."""
    code, out, err = run_cli(capsys, "ultra3", "pipe", "mopd", "quantize", "-c", "tiny", "--dry-run", *ON_SAMPLE)
    assert config_valid(code, out), err[-2000:]  # mopd's own inputs are not made yet (exit 2, said so)
    quantize = out[out.index("[2/2] ultra3 quantize"):]
    source = re.search(r"^\s+source: (\S+)\s.*\(planned", quantize, re.M)
    assert source and source.group(1).endswith("ultra3-mopd-tiny/hf/latest"), quantize[:3000]  # its HF form
    code, out, err = run_cli(capsys, "ultra3", "quantize", "-c", "tiny", f"quantization.source={source.group(1)}",
                             "--dry-run")
    assert code == 2 and f"error: quantization.source='{source.group(1)}': no such file or folder (the checkpoint to " \
        "quantize)" in out + err


def test_pipe_mopd_quantize_without_dry_run_stops_at_mopds_missing_inputs(capsys, tmp_path):
    code, _, err = run_cli(capsys, "ultra3", "pipe", "mopd", "quantize", "-c", "tiny", *ON_SAMPLE)
    assert code == 2
    # the student is the warmup's output, else RLVR's (${art:mopd-warmup-checkpoint|rl-checkpoint,path})
    lines = err.splitlines()
    at = lines.index("error: refusing to start ultra3 mopd with 5 unresolved values:")
    assert "  policy.model_name: artifact mopd-warmup-checkpoint|rl-checkpoint does not exist yet: none of " \
           "mopd-warmup-checkpoint, rl-checkpoint by a tiny run" in lines[at + 1:at + 6], err
    assert "quantization.source" not in err
    assert not (tmp_path / "home" / "runs").exists()


# ------------------------------------------------------------- 3. every backend has a runtime
@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_rl_local_dry_run_has_a_runtime_and_reads_the_settings(capsys, stage):
    """rlvr/mopd -c local run here (nemotron.runtime.rl.rl_local): the dry run has no runtime refusal, and it refuses
    what the local RL settings reader refuses, in its words."""
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "local", "--dry-run")
    assert "has no local runtime" not in out + err
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "local", "--dry-run", "grpo.num_prompts_per_step=3")
    assert code == 2
    assert "must equal grpo.num_prompts_per_step x grpo.num_generations_per_prompt" in out, out[-2000:]
    assert err.splitlines()[0] == "error: 1 error found before anything was queued"


def test_list_marks_no_config_without_a_runtime(capsys):
    code, out, _ = run_cli(capsys, "ultra3", "list")
    assert code == 0
    # the one mark: mtp-boost's cluster configs, refused by a rule (tests/cli/test_cli_ux.py), not for a runtime
    assert re.findall(r"(\w[\w-]*)\*", out) == ["default", "tiny"], out
    assert re.search(r"^\s+local\s+sft-checkpoint, rl-data\s+rl-checkpoint\s", out, re.M), out  # rlvr -c local
    assert re.search(r"^eval\s+default\s+rl-data, mopd-checkpoint\s+eval-results\s", out, re.M), out
    assert "no runtime for its backend" not in out


def test_pipe_local_dry_run_plans_the_whole_chain(capsys, tmp_path):
    """``pipe -c local --dry-run``: every stage, rlvr, mopd and eval included, wired to the outputs before it."""
    code, out, err = run_cli(capsys, "ultra3", "pipe", "-c", "local", "--dry-run")
    assert code == 0, err[-2000:]
    assert "has no local runtime" not in out + err
    chain = out[out.index("the chain"):]
    for title in ("ultra3 rlvr", "ultra3 mopd", "ultra3 quantize", "ultra3 eval"):
        assert title in chain
    assert not (tmp_path / "home" / "artifacts").exists()


def test_every_backend_has_a_runtime():
    """The rule reads the entry scripts' own tables: every backend of every stage has a runtime in this version."""
    from nemotron.runtime.dispatch import missing_runtime, stage_backends
    from nemotron.config.registry import STAGES

    missing = {(s.name, b) for s in STAGES for b in stage_backends(s)[0] if missing_runtime(s, b)}
    assert missing == set()
    assert missing_runtime(get_stage("rlvr"), None) is None  # the default backend (nemo-rl) has one


# -------------------------------------------------------------------------- 4. the slice layout, any node
@pytest.mark.parametrize("gpn, ep", [(8, 8), (6, 2), (4, 4), (3, 1), (1, 1)])
def test_slice_layout_takes_an_ep_that_divides_experts_and_gpus(gpn, ep):
    stage = get_stage("pretrain")
    c = compile_config(stage, "tiny", [f"run.env.gpus_per_node={gpn}"])
    notes = validation.prepare(stage, c.config, c.user_keys, None)
    assert c.config["model"]["expert_model_parallel_size"] == ep, notes
    rules = {p.rule for p in validation.validate(stage, c.config, None) if p.severity == "error"}
    assert "expert-world" not in rules and "world-layout" not in rules, rules
    if ep != gpn:
        assert f"(largest divisor of both 512 experts and {gpn} GPUs)" in notes[0]


def test_three_gpu_tiny_dry_run_is_valid_when_dp_divides_the_batch(capsys, tmp_path):
    env = tmp_path / "env.toml"
    env.write_text(SHORT_PROFILE.replace("gpus_per_node = 8", "gpus_per_node = 3").replace('"00:05:00"', '"01:00:00"'))
    code, out, _ = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "train.global_batch_size=15", "--dry-run",
                           "--run", "short", "--env-file", str(env))
    # the layout itself is accepted (DP 3 divides 15; EP 1: 512 experts do not split over 3 GPUs), but all 512
    # experts on each GPU are 245 GB of 141: rule memory-fit refuses it, and it is the only error
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "does NOT fit" in errors[0] and "calibration margin" in errors[0], out[-2000:]
    assert "expert_model_parallel_size=1" in out


# ----------------------------------------------------------------------- 5. every problem in one pass
def test_short_profile_lists_the_signal_and_the_nvfp4_problem_together(capsys, tmp_path):
    env = tmp_path / "env.toml"
    env.write_text(SHORT_PROFILE)
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "default", "--dry-run", "--run", "short",
                             "--env-file", str(env))
    assert code == 2
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert [e.split("=")[0] for e in errors] == ["error: mixed_precision", "error: run.signal_before_s"], errors
    assert ("error: run.signal_before_s=900: the warning signal must come before the job's time limit (00:05:00 = "
            "300 s, profile short key time); valid: set run.signal_before_s below 300 or give the profile a longer "
            "time") in errors
    assert "# not rendered: run.signal_before_s=900" in out
    assert err.splitlines()[0] == "error: 2 errors found before anything was queued"


def test_a_bad_run_key_is_one_of_the_problems_not_the_only_one(capsys, tmp_path):
    env = tmp_path / "env.toml"
    env.write_text(SHORT_PROFILE)
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", "default", "--dry-run", "--run", "short",
                             "--env-file", str(env), "run.signal_before_s=-5")
    assert code == 2
    assert "error: run.signal_before_s=-5: expected a whole number >= 0; valid: 0, 1, 2, ... (0: none)" in out
    assert err.splitlines()[0] == "error: 2 errors found before anything was queued"


def test_submission_still_refuses_a_signal_past_the_limit():
    """The rule is the submission's own check (one function): planning a job on the short profile refuses it."""
    from types import SimpleNamespace

    from nemotron.errors import ConfigError
    from nemotron.launch.submit import _warning_signal
    from nemotron.profiles.profile import from_table
    from nemotron.profiles.schema import SlurmSettings
    from nemotron.validation.cluster import warning_signal_problem

    profile = from_table("short", {"executor": "slurm", "time": "00:05:00"}).narrow(SlurmSettings)
    plan = SimpleNamespace(signal_before_s=300, launch="torchrun")
    with pytest.raises(ConfigError, match=r"run.signal_before_s=300: the warning signal must come before"):
        _warning_signal(plan, profile)
    assert warning_signal_problem(299, profile) is None
    assert _warning_signal(SimpleNamespace(signal_before_s=299, launch="ray"), profile) == "B:TERM@299"


# -------------------------------------------------------------------- 6. several nodes, no profile
def test_nodes_without_a_profile_is_said_to_be_one_machine(capsys):
    """The warning says the layout is one machine's; the cluster runtime's own world-size check then refuses it (an
    error, as the run would: rule gpus-here)."""
    code, out, _ = run_cli(capsys, "ultra3", "pretrain", "-c", "tiny", "run.env.nodes=2", "--dry-run")
    assert code == 2
    assert ("warning: run.env.nodes=2: without a profile the job runs on this one machine (one node); the layout is "
            "checked for 2 nodes as configured; valid: --run/--batch with a Slurm profile for several nodes, or "
            "run.env.nodes=1") in out.splitlines()
    assert any(line.startswith("error: without a profile the run starts here: ")
               and "torchrun started 8 processes; run.env.nodes x gpus_per_node = 2 x 8 = 16" in line
               for line in out.splitlines()), out[-3000:]
    assert "--nnodes 1" in out


def test_one_node_without_a_profile_has_no_such_warning(capsys):
    code, out, _ = run_cli(capsys, "ultra3", "pretrain", "-c", "local", "--dry-run")
    assert config_valid(code, out) and "one machine" not in out


# ------------------------------------------------------------------------------- 7. command-line edges
def test_pipe_unknown_stage_suggests_the_close_one(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pipe", "pretrian", "--dry-run")
    assert code == 2
    assert err.startswith("error: no stage 'pretrian' (did you mean 'pretrain'?); stages: "), err


def test_pipe_override_without_a_stage_says_how_to_write_it(capsys):
    code, _, err = run_cli(capsys, "ultra3", "pipe", "pretrain", "sft", "train.global_batch_size=16", "--dry-run")
    assert code == 2
    assert err.splitlines() == [
        "error: 'train.global_batch_size=16': a pipe override names the stage it is for: "
        "STAGE:train.global_batch_size=16",
        "hint: e.g. pretrain:train.global_batch_size=16 or sft:train.global_batch_size=16 (docs/execution.md, "
        "Pipelines)"]


@pytest.mark.parametrize("argv, hint", [
    (["data-prep-pretrain", "pretrain", "-c", "tiny", "train.train_iters=5"],
     "hint: e.g. pretrain:train.train_iters=5 (docs/execution.md, Pipelines)"),
    (["data-prep-pretrain", "pretrain", "-c", "tiny", "output_dir=/x"],
     "hint: e.g. data-prep-pretrain:output_dir=/x (docs/execution.md, Pipelines)"),
    (["data-prep-pretrain", "pretrain", "-c", "tiny", "train.train_itrs=5"],
     "hint: no config of the stages named has the key 'train.train_itrs': check its spelling (docs/execution.md, "
     "Pipelines)"),
])
def test_pipe_override_hint_names_a_stage_that_has_the_key(capsys, argv, hint):
    """Issue 15: the hint named data-prep-pretrain for a key only pretrain has."""
    code, _, err = run_cli(capsys, "ultra3", "pipe", *argv, "--dry-run")
    assert code == 2
    assert err.splitlines()[1] == hint, err


@pytest.mark.parametrize("argv", [["pretrain", "-c", "tiny", "--run", ""], ["pretrain", "-c", "tiny", "--batch", " "],
                                  ["pipe", "-c", "tiny", "--run", ""]])
def test_empty_profile_name_is_an_error(capsys, tmp_path, argv):
    code, _, err = run_cli(capsys, "ultra3", *argv)
    option = argv[argv.index("-c") + 2]
    assert code == 2
    assert err.splitlines()[0] == f"error: {option} needs a profile name, got {argv[-1]!r}", err
    assert not (tmp_path / "home" / "runs").exists()


@pytest.mark.parametrize("command", [["pretrain"], ["pipe"]])
def test_two_configs_are_an_error(capsys, command):
    code, out, err = run_cli(capsys, "ultra3", *command, "-c", "tiny", "-c", "local", "--dry-run")
    assert code == 2 and out == ""
    assert err.splitlines()[0] == "error: -c given 2 times (tiny, local); a command takes one config"


def test_layered_configs_through_a_yaml_file(capsys, tmp_path):
    """What the error's hint says to do instead works: a file with ``defaults: [tiny]`` plus a key."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("defaults: [tiny]\ntrain:\n  global_batch_size: 32\n")
    code, out, err = run_cli(capsys, "ultra3", "pretrain", "-c", str(mine), "--dry-run", *ON_SAMPLE)
    assert config_valid(code, out), err
    assert re.search(r"^\s+global_batch_size: 32\b", out, re.M)
    assert re.search(r"^\s+name: ultra4layer\b", out, re.M)  # from tiny
