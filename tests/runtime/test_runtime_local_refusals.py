"""What the local training runtime refuses, ``--dry-run`` refuses too, with the same lines; one training run
per checkpoint folder; the local backend's one-GPU limit; a path of the wrong kind; the summary of a resumed
run spans the whole run. Real runs of the `small` blocks on the CPU (512-entry vocabulary in-process, the
real `small` model through the entry script), the real CLI for ``--dry-run``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from local_runtime_support import ROOT, compile_local, fast_overrides, small_spec, write_pretrain_data, write_sft_data
from nemotron import validation
from nemotron.cli.main import main as cli_main
from nemotron.config.registry import get_stage
from nemotron.profiles.profile import from_table
from nemotron.runtime.common import settings as S
from nemotron.runtime.megatron.entry import run_config


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NEMOTRON_CKPT_ROOT", str(tmp_path / "ckpt"))
    monkeypatch.delenv("NEMOTRON_ENV_FILE", raising=False)
    return tmp_path


def _refusals(stage: str, cfg: dict, profile=None) -> list[str]:
    return [p.render() for p in validation.validate(get_stage(stage), cfg, profile)
            if p.severity == "error" and p.rule == "local-refusal"]


def _dry_run(capsys, *args: str) -> tuple[int, str]:
    code = cli_main(["ultra3", *args, "--dry-run"])
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def test_dry_run_refuses_what_a_resumed_run_refuses(home, capsys):
    """After a real run saved step 4: a train.train_iters below it and another blend are refused by the
    run (exit 2) and by --dry-run (exit 2), with the same line; a Slurm profile's folder is not read here."""
    from nemotron.runtime.megatron.trainer import run

    tmp = home
    old, new = write_pretrain_data(tmp / "a", docs=60), write_pretrain_data(tmp / "b", docs=60)
    ckpt = tmp / "pt"
    overrides = dict(seq=32, **{"validation.eval_iters": 0, "checkpoint.save_interval": 2,
                                "scheduler.lr_warmup_iters": 0, "scheduler.lr_decay_iters": 4})

    def cfg(blend: Path, iters: int) -> dict:
        return compile_local("pretrain", fast_overrides(ckpt, iters=iters, **{
            "data.per_split_data_args_path": str(blend), **overrides}))

    assert _refusals("pretrain", cfg(old, 2)) == []  # nothing saved yet
    assert run(S.read(cfg(old, 4), "pretrain"), spec=small_spec()) == 0
    capsys.readouterr()
    for blend, iters, start in ((old, 2, "train.train_iters=2 is below step 4"),
                                (new, 6, f"data.per_split_data_args_path={new}: the checkpoint at step 4")):
        assert run_config("pretrain", cfg(blend, iters)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"ultra3 pretrain: {start}"), err
        line = err[0].removeprefix("ultra3 pretrain: ")
        assert _refusals("pretrain", cfg(blend, iters)) == [line]
        slurm = from_table("c", {"executor": "slurm", "gpus_per_node": 8, "gpu_arch": "hopper", "gpu_memory": 141.0})
        assert _refusals("pretrain", cfg(blend, iters), slurm) == []
    # the CLI's --dry-run, as the user typed it
    code, out = _dry_run(capsys, "pretrain", "-c", "local", f"data.per_split_data_args_path={old}",
                         f"checkpoint.save={ckpt}", "train.train_iters=3", "model.seq_length=32",
                         "scheduler.lr_decay_iters=3", "scheduler.lr_warmup_iters=0")
    assert code == 2 and "train.train_iters=3 is below step 4, already saved in" in out, out[-2000:]
    code, out = _dry_run(capsys, "pretrain", "-c", "local", f"data.per_split_data_args_path={old}",
                         f"checkpoint.save={ckpt}", "train.train_iters=6", "model.seq_length=32",
                         "scheduler.lr_decay_iters=6", "scheduler.lr_warmup_iters=0")
    assert code == 0, out[-2000:]


def test_a_second_run_on_a_held_checkpoint_folder_is_refused(home, capsys):
    """A real run (the entry script, as the job runs it) holds its checkpoint folder; a second run on the same
    folder stops at once (exit 1) with one line naming the folder, the first run's pid and experiment id."""
    tmp = home
    blend = write_pretrain_data(tmp / "data", docs=60, valid_docs=10)
    ckpt = tmp / "ck6"
    cfg = compile_local("pretrain", fast_overrides(ckpt, seq=32, iters=200, **{
        "data.per_split_data_args_path": str(blend), "validation.eval_iters": 0, "checkpoint.save_interval": 200,
        "run.env.cpus": 1}))
    train_yaml = tmp / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    env = {**os.environ, "NEMOTRON_EXPERIMENT_ID": "first-run-1", "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen([sys.executable, str(ROOT / "stages/ultra3/pretrain/run.py"), "--config", str(train_yaml)],
                             env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lock = ckpt / ".nemotron-writer.lock"
    try:
        deadline = time.monotonic() + 120
        while not (lock.is_file() and lock.read_text().strip()) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, first.stdout.read()[-2000:] if first.stdout else ""
        assert run_config("pretrain", cfg) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ultra3 pretrain: checkpoint.save: another run (pid {first.pid}, experiment first-run-1) is "
                       f"writing {ckpt}; wait for it to finish, or set checkpoint.save=<another folder>"]
    finally:
        first.kill()
        first.wait()


def test_local_backend_refuses_more_than_one_gpu(home, capsys, monkeypatch):
    """run.env.gpus_per_node=2 / run.env.nodes=2 with -c local: --dry-run refuses (one line naming the key);
    the run's own GPU check does not tell a local config to use -c local."""
    from nemotron.errors import ConfigError
    from nemotron.launch.execute import check_gpus

    for key in ("run.env.gpus_per_node", "run.env.nodes"):
        code, out = _dry_run(capsys, "pretrain", "-c", "local", f"{key}=2")
        lines = [x for x in out.splitlines() if f"{key}=2" in x]
        assert code == 2 and len(lines) == 1 and "the local backend" in lines[0] and "at most one GPU" in lines[0], out
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    plan = SimpleNamespace(launch="torchrun", gpus_per_node=2, config_name="local",
                           stage=SimpleNamespace(title="ultra3 pretrain"))
    with pytest.raises(ConfigError) as info:
        check_gpus(plan, "local")
    assert "-c local" not in (info.value.hint or "") and "at most one GPU" in (info.value.hint or "")
    with pytest.raises(ConfigError) as info:
        check_gpus(plan, "megatron-bridge")
    assert "-c local" in (info.value.hint or "")


def test_paths_of_the_wrong_kind_are_refused_by_run_and_dry_run(home, capsys):
    """A folder where a blend.json or a packed file is expected, a file where a folder is expected: exit 2 from
    the run and --dry-run, each with the same line."""
    tmp = home
    folder = tmp / "k9"
    folder.mkdir()
    a_file = tmp / "weights.bin"
    a_file.write_text("x")
    cfg = compile_local("pretrain", fast_overrides(tmp / "c1", **{"data.per_split_data_args_path": str(folder)}))
    assert run_config("pretrain", cfg) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"ultra3 pretrain: data.per_split_data_args_path={folder}: is a folder, not a blend.json"), err
    assert _refusals("pretrain", cfg) == [err[0].removeprefix("ultra3 pretrain: ")]

    sft = write_sft_data(tmp / "sft", pack_size=64)
    good = {"checkpoint.pretrained_checkpoint": str(folder), "dataset.dataset_root": str(sft),
            "dataset.packed_sequence_specs.packed_train_data_path": str(sft / "training_64.idx.parquet"),
            "dataset.packed_sequence_specs.packed_val_data_path": str(sft / "validation_64.idx.parquet")}
    cases = [
        ({"dataset.dataset_root": str(a_file)}, f"dataset.dataset_root={a_file}: is a file, not a folder"),
        ({"dataset.dataset_root": str(sft), "checkpoint.pretrained_checkpoint": str(a_file)},
         f"checkpoint.pretrained_checkpoint={a_file}: is a file, not a folder"),
        ({"dataset.dataset_root": str(sft), "dataset.packed_sequence_specs.packed_train_data_path": str(folder)},
         f"dataset.packed_sequence_specs.packed_train_data_path={folder}: is a folder, not a packed Parquet file"),
    ]
    for extra, start in cases:
        cfg = compile_local("sft", fast_overrides(tmp / "c2", **{**good, **extra}))
        assert run_config("sft", cfg) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"ultra3 sft: {start}"), err
        assert _refusals("sft", cfg) == [err[0].removeprefix("ultra3 sft: ")]
    code, out = _dry_run(capsys, "pretrain", "-c", "local", f"data.per_split_data_args_path={folder}")
    assert code == 2 and "is a folder, not a blend.json" in out, out[-2000:]


def test_resumed_run_summary_spans_the_whole_run(home, capsys):
    """A run resumed at step 2 reports the whole run: summary.json's first losses are those of step 0/1 in
    metrics.jsonl, and the last line says where it resumed."""
    from nemotron.runtime.megatron.trainer import run

    tmp = home
    blend = write_pretrain_data(tmp / "data", docs=60, valid_docs=10)
    ckpt = tmp / "pt"

    def cfg(iters: int) -> dict:
        return compile_local("pretrain", fast_overrides(ckpt, seq=32, iters=iters, **{
            "data.per_split_data_args_path": str(blend), "validation.eval_interval": 2, "validation.eval_iters": 1,
            "checkpoint.save_interval": 2, "logger.log_interval": 1, "scheduler.lr_warmup_iters": 0,
            "scheduler.lr_decay_iters": 4, "optimizer.lr": 3e-3}))

    assert run(S.read(cfg(2), "pretrain"), spec=small_spec()) == 0
    capsys.readouterr()
    assert run(S.read(cfg(4), "pretrain"), spec=small_spec()) == 0
    out = capsys.readouterr().out
    records = [json.loads(x) for x in (ckpt / "metrics.jsonl").read_text().splitlines()]
    first_eval = next(r["eval_loss"] for r in records if "eval_loss" in r)
    first_train = next(r["loss"] for r in records if "loss" in r)
    assert next(r["step"] for r in records if "eval_loss" in r) == 0
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["steps_this_run"] == 2 and summary["resumed_at_step"] == 2
    assert summary["eval_loss_first"] == pytest.approx(first_eval)
    assert summary["train_loss_first"] == pytest.approx(first_train)
    assert [s for s, _ in summary["eval_losses"]] == [0, 2, 4]
    assert f"done: 4 steps (resumed at step 2); final model in {ckpt}" in out
    assert f"held-out loss {first_eval:.3f} -> {summary['eval_loss_last']:.3f}" in out
    # the curves of the whole run, beside metrics.jsonl: each step once, though steps were logged by both segments
    png = ckpt / "metrics.png"
    assert f"curves: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from nemotron.runtime.common.curves import read_metrics, series

    assert [r["step"] for r in read_metrics(ckpt / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    assert series(read_metrics(ckpt / "metrics.jsonl"), "eval_loss") == ([0, 2, 4], [v for _, v in summary["eval_losses"]])
