"""Resuming the `local` runtime continues the same sample stream, and a damaged newest checkpoint is set aside.

Real training runs (transformers' Trainer on the catalogue's `small` NemotronH with a 512-entry vocabulary, our
.bin/.idx blend and packed Parquet), with ``NEMOTRON_BATCH_LOG`` recording the samples each step trained on.

Before: the sample order depended on ``train_iters × global_batch_size``, so extending a run from 10 to 20
iterations re-shuffled the stream (about 18 of the 40 samples after the resume were repeats), and a new
``global_batch_size`` moved the resume point; a newest checkpoint with damaged contents crashed every restart
with a raw SafetensorError although ``latest_checkpointed_iteration.txt`` named an older step.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from local_runtime_support import compile_local, fast_overrides, small_spec, write_pretrain_data, write_sft_data

pytest.importorskip("transformers", reason="the local runtime needs transformers (the `local` extra)")

from nemotron.runtime.common import settings as S  # noqa: E402
from nemotron.runtime.common.model import MARKER, damage  # noqa: E402
from nemotron.runtime.megatron.batch_log import sample_ids  # noqa: E402
from nemotron.runtime.megatron.pretrain_data import BlendedSamples, read_blend  # noqa: E402


def _pretrain(tmp_path: Path, blend: Path, ckpt: Path, iters: int, gbs: int = 4, save_interval: int = 5,
              **extra) -> int:
    from nemotron.runtime.megatron.trainer import run

    cfg = compile_local("pretrain", fast_overrides(ckpt, seq=32, iters=iters, **{
        "data.per_split_data_args_path": str(blend), "train.global_batch_size": gbs, "train.micro_batch_size": 2,
        "validation.eval_iters": 0, "checkpoint.save_interval": save_interval, "scheduler.lr_decay_iters": 40,
        **extra}))
    return run(S.read(cfg, "pretrain"), spec=small_spec())


def _log(path: Path) -> tuple[list[int], list[str]]:
    """(stream positions, sample ids) of every micro-batch trained, in order."""
    index, ids = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec["kind"] == "batch":
            index += rec["index"]
            ids += rec["samples"]
    return index, ids


def _expected_pretrain(blend: Path, n: int, seq: int = 32, seed: int = 1234) -> list[str]:
    """The ids of the first ``n`` samples of the stream, built for a much longer run (the order must not depend
    on the total)."""
    ds = BlendedSamples(read_blend(blend)["train"], seq, 5 * n, seed)
    return sample_ids(np.stack([ds.sample(i)[:-1] for i in range(n)]))


@pytest.mark.slow
def test_extend_then_resume_continues_the_stream(tmp_path, monkeypatch, capsys):
    """10 iterations, then the same folder with train.train_iters=20: samples 0..79 once each, in stream order."""
    blend = write_pretrain_data(tmp_path / "data", docs=40, valid_docs=5)
    log = tmp_path / "batches.jsonl"
    monkeypatch.setenv("NEMOTRON_BATCH_LOG", str(log))
    ckpt = tmp_path / "ckpt"
    assert _pretrain(tmp_path, blend, ckpt, iters=10) == 0
    assert _pretrain(tmp_path, blend, ckpt, iters=20) == 0
    out = capsys.readouterr().out
    assert "continuing the sample stream at sample 40" in out
    index, ids = _log(log)
    assert index == list(range(80))  # none repeated, none skipped
    assert ids == _expected_pretrain(blend, 80)
    record = json.loads((ckpt / "checkpoint-20" / "nemotron_checkpoint.json").read_text())
    assert record["consumed_samples"] == 80 and record["files"]["model.safetensors"]["bytes"] > 0


def test_new_global_batch_size_continues_by_consumed_samples(tmp_path, monkeypatch, capsys):
    """6 steps of 4 samples (24), then train.global_batch_size=2 to step 10: samples 24..31 follow, as Megatron's
    consumed-samples rule has it (transformers alone would resume at 6 × 2 = 12 and repeat 12 samples)."""
    blend = write_pretrain_data(tmp_path / "data", docs=40, valid_docs=5)
    log = tmp_path / "batches.jsonl"
    monkeypatch.setenv("NEMOTRON_BATCH_LOG", str(log))
    ckpt = tmp_path / "ckpt"
    assert _pretrain(tmp_path, blend, ckpt, iters=6, save_interval=3) == 0
    assert _pretrain(tmp_path, blend, ckpt, iters=10, gbs=2, save_interval=2) == 0
    out = capsys.readouterr().out
    assert "train.global_batch_size 4 -> 2: continued by consumed samples" in out
    # the saved run's length (its nemotron_checkpoint.json) against this run's: one warning line
    warning = [ln for ln in out.splitlines() if "warning: resuming step 6" in ln]
    assert len(warning) == 1 and (f"warning: resuming step 6 from {ckpt / 'checkpoint-6'}, saved by a run with "
                                  "train.train_iters=6, train.global_batch_size=4; this run has train.train_iters=10, "
                                  "train.global_batch_size=2: ") in warning[0], out
    index, ids = _log(log)
    assert index == list(range(32))
    assert ids == _expected_pretrain(blend, 32)


def test_sft_extend_continues_the_pack_stream(tmp_path, monkeypatch):
    """SFT on packed Parquet: 3 steps, then 6 (and at another batch size): every draw of the pack stream once."""
    from nemotron.runtime.megatron.sft_data import PackDataset, read_packed
    from nemotron.runtime.megatron.trainer import run

    sft = write_sft_data(tmp_path / "sft", pack_size=128, packs=10, valid_packs=2)
    log = tmp_path / "batches.jsonl"
    monkeypatch.setenv("NEMOTRON_BATCH_LOG", str(log))
    ckpt = tmp_path / "ckpt"

    def sft_run(iters: int, gbs: int) -> int:
        cfg = compile_local("sft", fast_overrides(ckpt, seq=128, iters=iters, **{
            "dataset.dataset_root": str(sft), "train.global_batch_size": gbs, "train.micro_batch_size": 2,
            "dataset.packed_sequence_specs.packed_train_data_path": str(sft / "training_128.idx.parquet"),
            "dataset.packed_sequence_specs.packed_val_data_path": str(sft / "validation_128.idx.parquet"),
            "validation.eval_iters": 0, "checkpoint.save_interval": 3, "scheduler.lr_decay_iters": 20,
            "checkpoint.pretrained_checkpoint": None}))
        return run(S.read(cfg, "sft"), spec=small_spec())

    assert sft_run(3, 4) == 0  # 12 draws of 10 packs: the second epoch has begun
    assert sft_run(7, 2) == 0  # 4 more steps of 2
    index, ids = _log(log)
    assert index == list(range(20))
    rows = read_packed(sft / "training_128.idx.parquet", 128)
    order = PackDataset(rows, 100, 5678)  # rng.seed of the SFT stage; built for a longer run: the same draws
    assert ids == [sample_ids(rows.row(order[i])[0])[0] for i in range(20)]


def test_damaged_newest_checkpoint_is_set_aside_and_an_older_one_resumed(tmp_path, capsys):
    """checkpoint-10 newer than the marker (an unfinished save), and a checkpoint the marker names with damaged
    contents: each is renamed (never deleted) with a warning, and the run resumes the last good save."""
    blend = write_pretrain_data(tmp_path / "data", docs=40, valid_docs=5)
    ckpt = tmp_path / "ckpt"
    assert _pretrain(tmp_path, blend, ckpt, iters=10, save_interval=5, **{"+checkpoint.most_recent_k": 3}) == 0
    assert sorted(p.name for p in ckpt.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-5"]

    # 1. the marker names step 5; checkpoint-10 has every file, its weights cut short (the save was killed)
    weights = ckpt / "checkpoint-10" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (ckpt / MARKER).write_text("5\n")
    capsys.readouterr()
    assert _pretrain(tmp_path, blend, ckpt, iters=12, save_interval=5) == 0
    out = capsys.readouterr().out
    assert "checkpoint-10 is newer than step 5" in out and "set aside as incomplete-checkpoint-10" in out
    assert "resuming from" in out and "checkpoint-5 (step 5" in out
    assert (ckpt / "incomplete-checkpoint-10" / "model.safetensors").is_file()  # kept
    assert (ckpt / MARKER).read_text().strip() == "12"

    # 2. the marker names step 12, whose weights were then damaged in place (same size, other bytes)
    weights = ckpt / "checkpoint-12" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert "differs from what the save wrote" in damage(ckpt / "checkpoint-12")
    capsys.readouterr()
    assert _pretrain(tmp_path, blend, ckpt, iters=14, save_interval=5) == 0
    out = capsys.readouterr().out
    assert "warning: checkpoint-12 is damaged: model.safetensors differs from what the save wrote" in out
    assert "set aside as damaged-checkpoint-12" in out
    assert (ckpt / "damaged-checkpoint-12").is_dir() and (ckpt / MARKER).read_text().strip() == "14"


def test_checkpoint_without_record_is_checked_by_its_layout(tmp_path):
    """A checkpoint saved before records existed: a truncated safetensors file is found by its header."""
    blend = write_pretrain_data(tmp_path / "data", docs=40, valid_docs=5)
    ckpt = tmp_path / "ckpt"
    assert _pretrain(tmp_path, blend, ckpt, iters=2, save_interval=2) == 0
    step = ckpt / "checkpoint-2"
    (step / "nemotron_checkpoint.json").unlink()
    assert damage(step) is None
    weights = step / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    found = damage(step)  # the header check model import and the local convert share
    assert found.startswith("model.safetensors: ") and "header describes" in found and "truncated" in found, found
    (step / "optimizer.pt").write_bytes((step / "optimizer.pt").read_bytes()[:-10])
    weights.write_bytes(b"")
    assert "model.safetensors" in damage(step)
