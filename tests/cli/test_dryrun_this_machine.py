"""Issue 15: a dry run never calls valid what the run then refuses, and says where its numbers come from.

* A run here (no profile, or a ``local`` profile) of the cluster stack (``-c tiny``) is refused for this machine's
  GPUs and for its Python without the stage's framework: the dry run lists the same errors (rules ``gpus-here``,
  ``framework-here``; one function, :func:`nemotron.validation.this_machine`, called for both).
* The unresolved input that makes a run refuse to start is said on the dry run's last line, with the command that
  makes it.
* An artifact record whose folder was deleted names the artifact, its version, its record and what to do.
* The memory table says where the GPU memory comes from; plurals are right for one.

Everything runs the real CLI on the shipped configs; ``CUDA_VISIBLE_DEVICES`` (the variable the runtimes read)
sets how many GPUs this machine shows.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from nemotron.config import artifacts
from nemotron import validation
from nemotron.cli.main import main
from test_cli import config_valid
from nemotron.config.compile import compile_config
from nemotron.errors import plural
from nemotron.cli.pipeline import StageRequest, prepare_stage
from nemotron.config.registry import get_stage

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_ENV = str(ROOT / "tests" / "fixtures" / "env.toml")
HAS_BRIDGE = importlib.util.find_spec("megatron") is not None and importlib.util.find_spec("megatron.bridge") is not None


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NEMOTRON_ENV_FILE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine shows no GPU
    monkeypatch.chdir(tmp_path)


def unwrap(text: str) -> str:
    """``text`` with each long message (``error:``, ``warning:``, ``hint:``, ``note:``, ``dry run:``) that
    :func:`nemotron.report.readable` broke into indented lines joined back into one line."""
    lines: list[str] = []
    for line in text.splitlines():
        if lines and line.startswith("    ") and lines[-1].startswith(("error:", "warning:", "hint:", "note:", "dry run:")):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, unwrap(cap.out), unwrap(cap.err)


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if line.startswith("error: ") and not line.endswith("found before anything was queued")]


# ------------------------------------------------------------------------------------ 1. GPUs and framework
def test_tiny_without_a_profile_is_refused_by_the_dry_run_as_by_the_run(capsys, tmp_path):
    code, out, _ = cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run")
    assert code == 2
    dry = errors(out)
    assert ("error: without a profile the run starts here: ultra3 pretrain -c tiny needs 8 GPUs per node; this "
            "machine has 0 visible (run.env.gpus_per_node; CUDA_VISIBLE_DEVICES=); valid: --run PROFILE with a Slurm "
            "profile, or -c local (this machine)") in dry, out[-3000:]
    assert "dry run: valid" not in out
    code, _, err = cli(capsys, "ultra3", "pretrain", "-c", "tiny")  # the run: the same lines, nothing started
    assert code == 2
    assert errors(err) == dry
    assert not (tmp_path / "home" / "runs").exists()
    assert "Traceback" not in err


@pytest.mark.skipif(HAS_BRIDGE, reason="Megatron-Bridge is importable here: the framework rule has nothing to say")
def test_tiny_on_the_local_profile_is_refused_for_its_framework_and_gpus(capsys, tmp_path):
    """The issue's `pretrain -c tiny --run local --dry-run`: the 4-layer slice on the example's one-GPU local profile,
    in this Python (no NeMo container)."""
    shutil.copy(ROOT / "env.toml.example", tmp_path / "env.toml")
    code, out, _ = cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--run", "local", "--dry-run")
    assert code == 2
    lines = errors(out)
    assert ("error: backend='megatron-bridge': profile local runs it here, in this Python: this stage runs inside the "
            "NeMo container (image nvcr.io/nvidia/nemo:26.04.01); megatron.bridge is not importable here; valid: "
            "--run PROFILE with a Slurm profile (its container), or -c local (backend local)") in lines, out[-3000:]
    assert any("ultra3 pretrain -c tiny needs 1 GPU per node; this machine has 0 visible" in line for line in lines), lines
    # no "fits" next to an estimate that nothing checked: the memory row says why
    assert re.search(r"^GPU memory\s+unknown \(profile local declares no GPU memory", out, re.M), out
    assert re.search(r"^verdict\s+243 GB per GPU, not checked: no GPU memory declared", out, re.M), out
    assert "a 4-layer slice runs on one node (1 GPU)" in out


def test_the_local_backend_here_has_no_machine_refusal(capsys):
    code, out, _ = cli(capsys, "ultra3", "pretrain", "-c", "local", "--dry-run")
    assert config_valid(code, out), out[-2000:]  # its data is not made yet: the run's refusal, exit 2
    assert "gpus-here" not in out and "runs it here" not in out


@pytest.mark.parametrize(("stage_name", "absent", "named"), [
    ("pretrain", {"torch"}, "torch is not importable here"),
    ("sft", {"torch", "transformers"}, "torch, transformers are not importable here"),
    ("rlvr", {"trl"}, "trl is not importable here"),
    ("quantize", {"modelopt"}, "modelopt.torch.quantization is not importable here"),
])
def test_the_local_backend_without_its_modules_is_refused_by_the_dry_run(stage_name, absent, named):
    """``-c local`` on a base install (``scripts/main.sh`` and ``uv run`` install no torch): the run's entry refuses
    it (``the local backend needs torch and transformers>=5.2``, exit 1) and the dry-run said valid. Now the dry-run
    refuses it too (rule ``local-modules``), from the entry's own module table, with how to install them."""
    from nemotron.runtime.megatron.entry import LOCAL_NEEDS

    stage = get_stage(stage_name)
    p = prepare_stage(StageRequest(stage=stage, config="local", overrides=(), mode="here", profile=None,
                                   dry_run=True, env_file=None))
    assert validation.this_machine(stage, p.compiled.config, p.plan, importable=lambda m: True, gpus=0) == []
    [found] = validation.this_machine(stage, p.compiled.config, p.plan, importable=lambda m: m not in absent, gpus=0)
    assert found.rule == "local-modules" and found.severity == "error"
    assert f"the local backend needs {LOCAL_NEEDS[stage_name][1]}" in found.message and named in found.message
    assert "NEMOTRON_EXTRAS=local bash scripts/setup.sh" in found.valid


def test_a_machine_with_the_gpus_and_the_framework_passes():
    """The same function, told of a machine with 8 GPUs and Megatron-Bridge, finds nothing; with 16 GPUs it finds
    what the runtime would (it starts one process per GPU of the plan and checks the count)."""
    stage = get_stage("pretrain")
    p = prepare_stage(StageRequest(stage=stage, config="tiny", overrides=(), mode="here", profile=None,
                                   dry_run=True, env_file=None))
    assert validation.this_machine(stage, p.compiled.config, p.plan, importable=lambda m: True, gpus=8) == []
    found = validation.this_machine(stage, p.compiled.config, p.plan, importable=lambda m: True, gpus=16)
    assert [q.rule for q in found] == ["gpus-here"] and "this node shows 16 GPU(s)" in found[0].message


def test_a_cluster_profile_is_not_checked_against_this_machine(capsys):
    code, out, _ = cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "--batch", "sample",
                       "--env-file", FIXTURE_ENV)
    assert "runs it here" not in out and "run starts here" not in out
    # the memory number says where it comes from: the profile's GPU model
    assert re.search(r'^GPU memory\s+80 GB \(profile sample, gpu = "H100"\)', out, re.M), out


def test_without_a_profile_the_memory_is_said_to_be_assumed(capsys):
    _, out, _ = cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run")
    assert re.search(r"^GPU memory\s+141 GB \(assumed: no profile, so an H200 node \(141 GB a GPU\)\)", out, re.M), out
    assert "GPU memory (profile)" not in out
    assert re.search(r"^world\s+8 GPUs \(1 node x 8\)", out, re.M), out


# ------------------------------------------------------------------------ 2. the unresolved input, said
def test_dry_run_says_the_run_would_refuse_an_unresolved_artifact(capsys):
    code, out, _ = cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "--batch", "sample",
                       "--env-file", FIXTURE_ENV)
    last = out.rstrip().splitlines()[-1]
    assert code == 2, out[-2000:]  # the dry run refuses what the run refuses
    assert last.startswith("dry run: the config is valid (1 warning), but the run would refuse to start: ultra3 "
                           "pretrain with 1 unresolved value: data.per_split_data_args_path: artifact pretrain-data "
                           "does not exist yet by a tiny run; make it first: nemotron ultra3 data prep pretrain -c "
                           f"tiny --batch sample --env-file {FIXTURE_ENV}; or chain both: nemotron ultra3 pipe "
                           f"data-prep-pretrain pretrain -c tiny --batch sample --env-file {FIXTURE_ENV}"), last


# --------------------------------------------------------------------------- 3. a deleted artifact folder
def _record(tmp_path: Path, version_dir: str) -> dict:
    out = tmp_path / "output" / version_dir
    out.mkdir(parents=True)
    (out / "blend.json").write_text(json.dumps({"train": [1.0, str(out / "shard_0")]}))
    return artifacts.record("pretrain-data", {"path": str(out), "blend_path": str(out / "blend.json"),
                                              "stage": "data-prep-pretrain", "config": "tiny", "job_id": "local"})


def test_an_artifact_whose_folder_was_deleted_is_named_with_what_to_do(capsys, tmp_path):
    rec = _record(tmp_path, "v1")
    shutil.rmtree(rec["path"])
    for extra in (("--dry-run",), ()):  # dry run and run: the same compile, the same line
        code, out, err = cli(capsys, "ultra3", "pretrain", "-c", "tiny", *extra)
        assert code == 2
        store = tmp_path / "home" / "artifacts" / "pretrain-data" / "v1.json"
        assert err.splitlines() == [
            f"error: 'data.per_split_data_args_path' (tiny.yaml): artifact pretrain-data v1: its folder {rec['path']} "
            f"no longer exists (record {store})",
            "hint: rerun its producer: nemotron ultra3 data prep pretrain -c tiny (it records the output again); "
            "no other version of it has its folder"], err
        assert "${art:NAME,FIELD}" not in err


def test_a_deleted_latest_version_points_at_the_one_still_there(capsys, tmp_path):
    _record(tmp_path, "v1")
    newer = _record(tmp_path, "v2")
    shutil.rmtree(newer["path"])
    code, _, err = cli(capsys, "ultra3", "pretrain", "-c", "tiny", "--dry-run")
    assert code == 2
    assert "artifact pretrain-data v2: its folder" in err
    assert "or pin a version whose folder exists: ${art:pretrain-data:1,FIELD} (present: v1)" in err
    # pinned, it compiles from v1
    c = compile_config(get_stage("pretrain"), "tiny", ["data.per_split_data_args_path=${art:pretrain-data:1,blend_path}"])
    assert c.config["data"]["per_split_data_args_path"].endswith("v1/blend.json")


def test_a_cluster_record_is_left_to_the_job(tmp_path):
    """A record of a Slurm job points at the cluster's storage, which this machine may not see."""
    rec = {"name": "pretrain-data", "version": 3, "path": "/lustre/nowhere/v3", "job_id": "12345"}
    assert artifacts.check_present(rec) is rec


# ------------------------------------------------------------------------------------------- 4. plurals
@pytest.mark.parametrize("n, word, text", [(1, "node", "1 node"), (2, "node", "2 nodes"), (0, "GPU", "0 GPUs"),
                                           (1, "shard", "1 shard")])
def test_plural(n, word, text):
    assert plural(n, word) == text


def test_one_problem_and_one_warning_are_singular(capsys):
    code, out, err = cli(capsys, "ultra3", "rlvr", "-c", "local", "--dry-run", "grpo.num_prompts_per_step=3")
    assert code == 2 and err.splitlines()[0] == "error: 1 error found before anything was queued"
    assert "(s)" not in out.splitlines()[-1]


def test_a_nemotron_home_that_is_a_file_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """``NEMOTRON_HOME`` naming a file: the dry-run blamed a missing artifact and said valid, and the run failed
    with exit 1 (``cannot create the run folder``). Both now stop first with one line naming the variable."""
    home = tmp_path / "home-file"
    home.write_text("")
    monkeypatch.setenv("NEMOTRON_HOME", str(home))
    for args in (("--dry-run",), ()):
        code, out, err = cli(capsys, "ultra3", "pretrain", "-c", "local", *args)
        assert code == 2, out + err
        assert f"NEMOTRON_HOME={home}: is a file, not a folder" in err and "Traceback" not in err, err


def test_a_local_profile_whose_job_dir_cannot_be_created_is_refused_up_front(tmp_path, capsys):
    """A ``local`` profile's ``job_dir`` under a file: the dry-run said valid and the run failed with ``internal
    error: UnexpectedExit`` (NeMo-Run's mkdir). Rule ``output-folder`` now names the profile key, in both."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = tmp_path / "env.toml"
    env.write_text(f'[c]\nexecutor = "local"\ngpus_per_node = 0\njob_dir = "{blocker}/jobs"\n', encoding="utf-8")
    for args in (("--dry-run",), ()):
        code, out, err = cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "c", "--env-file", str(env),
                             *args)
        assert code == 2, out + err
        assert f"profile.c.job_dir='{blocker}/jobs': cannot create" in out + err, out + err
        assert "internal error" not in out + err


# ------------------------------------- 2b. the chain a profile's run needs: this machine's records are not its inputs
def _local_data_records(tmp_path: Path) -> None:
    """Records of pretrain-data, sft-data and rl-data made on this machine (a local data prep of each)."""
    for name, stage in (("pretrain-data", "data-prep-pretrain"), ("sft-data", "data-prep-sft"),
                        ("rl-data", "data-prep-rl")):
        out = tmp_path / "output" / name / "v1"
        out.mkdir(parents=True)
        (out / "blend.json").write_text(json.dumps({"train": [1.0, str(out / "shard_0")]}))
        artifacts.record(name, {"path": str(out), "blend_path": str(out / "blend.json"), "stage": stage,
                                "config": "tiny", "job_id": "local"})


@pytest.mark.parametrize("stage, chain", [
    ("convert", "data-prep-pretrain data-prep-sft pretrain sft convert"),
    ("rlvr", "data-prep-pretrain data-prep-sft data-prep-rl pretrain sft convert rlvr"),
    ("quantize", "data-prep-pretrain data-prep-sft data-prep-rl pretrain sft convert rlvr mopd quantize"),
])
def test_the_chain_for_a_profile_counts_this_machines_records_as_missing(capsys, tmp_path, stage, chain):
    """With data prep records made on this machine, `STAGE -c tiny --batch sample` (a cluster profile, which cannot
    read them) used to suggest a chain without the data prep stages (`pipe sft convert`, `pipe rlvr mopd
    quantize`), whose dry run was refused again at its first stage: the suggested chain is the whole one, and its
    dry run gets past the missing-artifact refusal."""
    _local_data_records(tmp_path)
    code, out, _ = cli(capsys, "ultra3", stage, "-c", "tiny", "--batch", "sample", "--env-file", FIXTURE_ENV,
                       "--dry-run", "--quiet")
    assert code == 2, out
    launch = f" -c tiny --batch sample --env-file {FIXTURE_ENV}"
    assert f"; or chain every run it needs: nemotron ultra3 pipe {chain}{launch}; or set " in out, out
    code, out, err = cli(capsys, "ultra3", "pipe", *chain.split(), "-c", "tiny", "--batch", "sample",
                         "--env-file", FIXTURE_ENV, "--dry-run", "--quiet")
    assert "refuse to start" not in out + err and "unresolved" not in out + err, (out + err)[-3000:]
    assert code == 0, (out + err)[-3000:]


def test_a_pipe_headline_with_errors_names_the_first_stage_that_lacks_inputs_too(capsys):
    """`pipe rlvr mopd-warmup mopd mopd mtp-boost -c tiny` on a profile: mtp-boost's error (only -c local) was the
    headline's whole story, though stages 1-4 would refuse to start for inputs no run has made; the headline names
    the first of them and what it lacks."""
    code, out, _ = cli(capsys, "ultra3", "pipe", "rlvr", "mopd-warmup", "mopd", "mopd", "mtp-boost", "-c", "tiny",
                       "--batch", "sample", "--env-file", FIXTURE_ENV, "--dry-run", "--quiet")
    assert code == 2, out[-3000:]
    assert out.splitlines()[0] == (
        "dry run: 1 error found in the chain's stages (5/5 (ultra3 mtp-boost): 1), and stage 1/5 (ultra3 rlvr) "
        "would refuse to start too: no hf-checkpoint, rl-data (see that stage's verdict): the run would refuse to "
        "start; nothing was submitted"), out[:2000]
