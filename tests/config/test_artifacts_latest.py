"""Artifacts and resumed runs through the real CLI: a data prep rerun that finds its output up to date adds
no artifact version (that version is the latest again); every real run says which artifact version and path
it takes each input from; a resumed pretrain run refuses data other than its checkpoint's, and a
train.train_iters below the saved step (local runtime and the Megatron-Bridge pre-start)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from local_runtime_support import write_pretrain_data
from nemotron.runtime.megatron import megatron_bridge as mb
from submit_support import nemotron_runner

#: A pretrain run of a few seconds with the real `small` model on the CPU.
FAST = ("model.seq_length=32", "train.global_batch_size=2", "train.micro_batch_size=2", "validation.eval_iters=0",
        "checkpoint.save_interval=2", "scheduler.lr_warmup_iters=0", "run.env.cpus=2")


@pytest.fixture
def cli(tmp_path):
    # the data folders a and "scratch b" lie in the data root: both are default-location outputs, so the latest
    # of them is taken (an output outside the roots would be a scratch one: tests/config/test_artifact_scope.py)
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "NEMOTRON_CKPT_ROOT": str(tmp_path / "ckpt"),
           "NEMOTRON_DATA_DIR": str(tmp_path)}
    return nemotron_runner(env, tmp_path)


@pytest.mark.slow
def test_up_to_date_rerun_is_latest_again_and_runs_name_their_artifacts(cli, tmp_path):
    store = tmp_path / "home" / "artifacts" / "pretrain-data"
    ckpt = tmp_path / "ckpt" / "ultra3-pretrain-local"
    a, b = tmp_path / "a", tmp_path / "scratch b"

    def prep(out: Path, config: str = "tiny"):
        proc = cli("ultra3", "data", "prep", "pretrain", "-c", config, "sample=300", f"output_dir={out}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout + proc.stderr

    def pretrain(*args: str):
        proc = cli("ultra3", "pretrain", "-c", "local", *FAST, *args)
        return proc.returncode, proc.stdout, proc.stderr

    assert "artifact pretrain-data v1" in prep(a)
    code, out, err = pretrain("train.train_iters=2")
    assert code == 0, err[-2000:]
    assert err.startswith(f"[nemotron] input pretrain-data v1: {a} (made on here:"), err[:500]
    assert err.splitlines()[0].endswith(" -> data.per_split_data_args_path"), err[:500]
    # lineage.json names the version it took, not only the folder (which a later run may overwrite)
    assert json.loads((ckpt / "lineage.json").read_text())["input_versions"] == {
        "data.per_split_data_args_path": "pretrain-data v1", "checkpoint.pretrained_checkpoint": None}
    assert "artifact pretrain-data v2" in prep(b)  # another output: the latest now
    code, out, err = pretrain("train.train_iters=4")
    assert code == 2, out[-2000:] + err[-2000:]
    # refused by validation, before anything is started, with the runtime's own line (rule local-refusal)
    refusal = [line for line in err.splitlines() if line.startswith("error: data.")]
    assert refusal == [f"error: data.per_split_data_args_path={b / 'blend.json'}: the checkpoint at step 2 "
                       f"in {ckpt} was trained on {a / 'blend.json'} (its lineage.json); set "
                       "data.per_split_data_args_path back to that, or checkpoint.save=<a new folder> to start a new "
                       "run on it, or +run.allow_new_inputs=true to resume on the new input (recorded in lineage.json)"]
    assert "step 3" not in out  # nothing trained
    # the rerun of a finds it up to date: no version 3, version 1 is the latest again
    again = prep(a)
    assert "up to date" in again and "artifact pretrain-data v1:" in again
    assert sorted(p.name for p in store.glob("v*.json")) == ["v1.json", "v2.json"]
    # -c local of data prep runs its tiny config: up to date too, the same version (not a v3 that says "local")
    again = prep(a, "local")
    assert "up to date" in again and "artifact pretrain-data v1:" in again, again[-2000:]
    assert sorted(p.name for p in store.glob("v*.json")) == ["v1.json", "v2.json"]
    code, out, err = pretrain("train.train_iters=1")
    assert code == 2, out[-2000:] + err[-2000:]
    assert f"error: train.train_iters=1 is below step 2, already saved in {ckpt}" in err
    assert json.loads((ckpt / "summary.json").read_text())["steps"] == 2  # the finished run is untouched


def test_megatron_bridge_prestart_warns_when_a_resume_changes_the_runs_length(tmp_path, capsys):
    """The saved iteration's ``run_config.yaml`` (Megatron-Bridge writes one into each ``iter_<N>`` folder) against
    this run's ``train.train_iters`` / ``train.global_batch_size``: taken, with one warning line; none when equal."""
    from config_support import compile_stage
    from nemotron.runtime.common import prestart

    blend = write_pretrain_data(tmp_path / "data", docs=20, valid_docs=5)
    save = tmp_path / "ckpt"
    cfg = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(blend), run__env__gpus_per_node=8,
                        checkpoint__save=str(save), checkpoint__load=str(save), train__train_iters=40)
    ok = {"importable": lambda m: True, "gpus": 8, "installed": prestart.pinned_versions("nemo", tuple(mb.FRAMEWORKS)),
          "env": {"WORLD_SIZE": "8"}}
    (save / "iter_0000010").mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text("10\n")
    gbs = cfg["train"]["global_batch_size"]
    (save / "iter_0000010" / "run_config.yaml").write_text(
        f"train:\n  train_iters: 20\n  global_batch_size: {gbs}\n  micro_batch_size: 1\nmodel:\n  seq_length: 4096\n")
    assert mb.precheck(cfg, "pretrain", **ok) == []  # not refused: the run goes on
    out = capsys.readouterr().out.splitlines()
    assert out == [f"ultra3 pretrain: warning: resuming step 10 from {save / 'iter_0000010'}, saved by a run with "
                   "train.train_iters=20; this run has train.train_iters=40: the learning-rate schedule and the "
                   "samples left to train follow the new value (set the saved one to go on as before, or "
                   "checkpoint.save=<a new folder> for a new run)"], out
    (save / "iter_0000010" / "run_config.yaml").write_text(
        f"train:\n  train_iters: 40\n  global_batch_size: {gbs * 2}\n")
    assert mb.precheck(cfg, "pretrain", **ok) == []
    out = capsys.readouterr().out
    assert f"train.global_batch_size={gbs * 2}; this run has train.global_batch_size={gbs}:" in out, out
    assert "train_iters" not in out.split("saved by")[1].split(":")[0], out  # the unchanged key is not named
    (save / "iter_0000010" / "run_config.yaml").write_text(f"train:\n  train_iters: 40\n  global_batch_size: {gbs}\n")
    assert mb.precheck(cfg, "pretrain", **ok) == [] and "warning" not in capsys.readouterr().out  # same length


def test_resume_warning_names_only_the_changed_keys_and_skips_unknown_ones():
    from nemotron.runtime.megatron.lineage import resume_warning

    now = {"train.train_iters": 20, "train.global_batch_size": 8}
    assert resume_warning({"train.train_iters": 20, "train.global_batch_size": 8}, now, 5, "c") is None
    assert resume_warning({"train.train_iters": None, "train.global_batch_size": None}, now, 5, "c") is None  # older
    line = resume_warning({"train.train_iters": 10, "train.global_batch_size": 8}, now, 5, "c")
    assert line.startswith("warning: resuming step 5 from c, saved by a run with train.train_iters=10; this run has "
                           "train.train_iters=20: ") and "\n" not in line


def test_megatron_bridge_prestart_refuses_train_iters_below_the_saved_iteration(tmp_path):
    from config_support import compile_stage
    from nemotron.runtime.common import prestart

    blend = write_pretrain_data(tmp_path / "data", docs=20, valid_docs=5)
    save = tmp_path / "ckpt"
    cfg = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(blend), run__env__gpus_per_node=8,
                        checkpoint__save=str(save), checkpoint__load=str(save), train__train_iters=20)
    ok = {"importable": lambda m: True, "gpus": 8, "installed": prestart.pinned_versions("nemo", tuple(mb.FRAMEWORKS)), "env": {"WORLD_SIZE": "8"}}
    save.mkdir()
    (save / "latest_checkpointed_iteration.txt").write_text("20\n")
    assert mb.precheck(cfg, "pretrain", **ok) == []  # at the saved iteration: a finished run, nothing refused
    (save / "latest_checkpointed_iteration.txt").write_text("29\n")
    assert mb.precheck(cfg, "pretrain", **ok) == [
        f"train.train_iters=20 is below step 29, already saved in {save}: the run would stop at once and present "
        "step 29 as its final model; set train.train_iters=29 or more to go on with this run, or "
        "checkpoint.save=<a new folder> for a new run"]
