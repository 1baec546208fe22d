"""The `local` runtime of pretrain and SFT (src/nemotron/runtime): data semantics against the real
consumers' rules, the loss and document isolation on the real transformers NemotronH, and short real
training runs — a held-out loss that drops, SFT from that checkpoint, kill and resume.

Sizes are kept small for 2 CPU cores: in-process runs use the catalogue's `small` blocks with a
512-entry vocabulary (`local_runtime_support.small_spec`); the CLI runs use the real `small` model.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from local_runtime_support import (
    ROOT,
    compile_local,
    fast_overrides,
    pack,
    small_spec,
    write_packed_parquet,
    write_pretrain_data,
    write_sft_data,
)
from nemotron.config.tree import get
from nemotron.runtime.common import settings as S
from nemotron.runtime.megatron.pretrain_data import (
    BlendedSamples,
    DataError,
    GPTSamples,
    Shard,
    blending_indices,
    read_blend,
)
from nemotron.runtime.megatron.sft_data import PackCollator, read_packed, unpack

PY = sys.executable


# ------------------------------------------------------------------------------------ settings / schedule
@pytest.mark.parametrize("style,wsd_style", [("cosine", None), ("linear", None), ("constant", None),
                                             ("inverse-square-root", None), ("WSD", "linear"), ("WSD", "cosine"),
                                             ("WSD", "exponential"), ("WSD", "minus_sqrt")])
def test_schedule_matches_megatron_core(style, wsd_style):
    """Our LR schedule is Megatron-Core's OptimizerParamScheduler, step for step (megatron-core 0.16)."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    opt = type("Opt", (), {"param_groups": [{"lr": 0.0, "weight_decay": 0.0}]})()  # the scheduler only touches these
    ref = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=3e-3, min_lr=3e-5, lr_warmup_steps=7,
                                  lr_decay_steps=60, lr_decay_style=style, start_wd=0.0, end_wd=0.0,
                                  wd_incr_steps=60, wd_incr_style="constant", wsd_decay_steps=20,
                                  lr_wsd_decay_style=wsd_style)
    ours = S.Schedule(max_lr=3e-3, min_lr=3e-5, warmup=7, decay_iters=60, style=style, wsd_decay_iters=20,
                      wsd_style=wsd_style or "linear")
    for step in range(70):
        assert ours.lr(step) == pytest.approx(ref.get_lr(opt.param_groups[0]), rel=1e-12, abs=1e-15), step
        ref.step(1)


def test_settings_errors_name_the_key(tmp_path):
    blend = tmp_path / "blend.json"
    blend.write_text("{}")
    cfg = compile_local("pretrain", fast_overrides(tmp_path / "c", **{"data.per_split_data_args_path": str(blend)}))
    s = S.read(cfg, "pretrain")
    assert (s.grad_accum, s.seq_length, s.keep_checkpoints) == (2, 64, S.DEFAULT_KEEP)
    with pytest.raises(S.SettingsError, match=r"train\.global_batch_size=5"):
        S.read({**cfg, "train": {**cfg["train"], "global_batch_size": 5}}, "pretrain")
    with pytest.raises(S.SettingsError, match="mixed_precision='bf16_with_nvfp4_mixed'"):
        S.read({**cfg, "mixed_precision": "bf16_with_nvfp4_mixed"}, "pretrain")
    with pytest.raises(S.SettingsError, match=r"model\.mtp_num_layers=2"):
        S.read({**cfg, "model": {**cfg["model"], "mtp_num_layers": 2}}, "pretrain")
    assert S.thread_count(1) == 1 and S.thread_count(None) >= 1


# ------------------------------------------------------------------------------------ pretraining data
def test_reader_agrees_with_megatron_indexed_dataset(tmp_path):
    """Our memory-mapped reader returns what Megatron-Core's IndexedDataset reads from the same files."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    blend = read_blend(write_pretrain_data(tmp_path, weights=(1.0,), docs=40, valid_docs=5))
    prefix = str(blend["train"][0].prefix)
    ours, ref = Shard(prefix), IndexedDataset(prefix, mmap=True)
    assert len(ours) == len(ref) == 40
    for i in range(len(ref)):
        np.testing.assert_array_equal(ours.doc(i), np.asarray(ref[i], dtype=np.int64))
    np.testing.assert_array_equal(ours.doc(3, 2, 7), np.asarray(ref.get(3, offset=2, length=5), dtype=np.int64))


def test_gpt_samples_cut_the_shuffled_document_stream(tmp_path):
    """Samples are consecutive L+1-token windows (sharing one token) of the documents in epoch order."""
    blend = read_blend(write_pretrain_data(tmp_path, weights=(1.0,), docs=30, valid_docs=5))
    shard = Shard(blend["train"][0].prefix)
    L, n = 16, 2 * shard.tokens // 16 + 3  # a little over two epochs: repeated, never cut short
    ds = GPTSamples(shard, L, n, seed=3, shuffle=False)
    assert ds.epochs == 3 == -(-(n * L + 1) // shard.tokens)
    stream = np.concatenate([shard.doc(int(d)) for d in ds.doc_order])
    for i in range(n):
        np.testing.assert_array_equal(ds[i], stream[i * L:i * L + L + 1])
    shuffled = GPTSamples(shard, L, n, seed=3)
    first_epoch = shuffled.doc_order[:len(shard)].tolist()
    assert sorted(first_epoch) == list(range(len(shard))) and first_epoch != list(range(len(shard)))
    # windows shuffled one epoch's worth at a time: every full block is a permutation of its windows ...
    B = shuffled.per_block
    full = (n // B) * B
    assert B == shard.tokens // L and sorted(shuffled.sample_order[:full].tolist()) == list(range(full))
    assert len(set(shuffled.sample_order.tolist())) == n
    # ... and the order does not depend on the total: a longer run starts with the same samples
    longer = GPTSamples(shard, L, 3 * n, seed=3)
    for i in range(n):
        np.testing.assert_array_equal(longer[i], shuffled[i])


def test_blend_follows_the_weights_at_every_prefix():
    ds, ds_sample = blending_indices([1.0, 3.0, 0.5], 900)
    for n in (9, 90, 900):
        counts = np.bincount(ds[:n], minlength=3)
        np.testing.assert_allclose(counts / n, np.array([1.0, 3.0, 0.5]) / 4.5, atol=1.5 / n)
    for d in range(3):  # each dataset's samples are taken in order 0, 1, 2, ...
        assert ds_sample[ds == d].tolist() == list(range(int((ds == d).sum())))


def test_blended_samples_and_blend_errors(tmp_path):
    path = write_pretrain_data(tmp_path, weights=(1.0, 3.0), docs=30, valid_docs=5)
    blend = read_blend(path)
    ds = BlendedSamples(blend["train"], 32, 40, seed=1)
    assert [r["samples"] for r in ds.summary()] == [10, 30]
    item = ds[0]
    assert item["input_ids"].shape == (32,) and item["shift_labels"].shape == (32,)
    np.testing.assert_array_equal(item["input_ids"][1:].numpy(), item["shift_labels"][:-1].numpy())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train": [1.0, str(tmp_path / "missing")]}))
    with pytest.raises(DataError, match=r"missing\.bin does not exist"):
        read_blend(bad)
    bad.write_text(json.dumps({"train": [0, str(tmp_path / "train_0")]}))
    with pytest.raises(DataError, match="must be a number > 0"):
        read_blend(bad)


# ------------------------------------------------------------------------------------ packed SFT data
def _megatron_bridge_reference(ids, mask, starts, answer_only_loss=True):
    """Megatron-Bridge GPTSFTPackedDataset (packing/gpt_sft.py collate_fn/_build_loss_mask): for each
    sub-sequence [s, e): tokens ids[s:e-1], labels ids[s+1:e], loss mask loss_mask[s:e-1] (all ones
    without answer-only loss)."""
    bounds = [*list(starts), len(ids)]
    out = []
    for s, e in itertools.pairwise(bounds):
        m = list(mask[s:e - 1]) if answer_only_loss else [1] * (e - 1 - s)
        out.append((list(ids[s:e - 1]), list(ids[s + 1:e]), m))
    return out


@pytest.mark.parametrize("answer_only_loss", [True, False])
def test_unpack_makes_megatron_bridge_predictions(answer_only_loss):
    """Each row predicts exactly what Megatron-Bridge's packed loader trains on: the same inputs, the
    same targets, the same (label-aligned) mask; the row's last position predicts nothing."""
    rng = np.random.default_rng(0)
    convs = [(rng.integers(100, 140, rng.integers(2, 9)).tolist(), rng.integers(100, 140, rng.integers(1, 9)).tolist())
             for _ in range(6)]
    p = pack(convs, pad_to=70)
    ids, mask, starts = (np.array(p[k]) for k in ("input_ids", "loss_mask", "seq_start_id"))
    rows = unpack(ids, mask, starts, answer_only_loss)
    ref = _megatron_bridge_reference(ids, mask, starts, answer_only_loss)
    assert len(rows) == len(ref)
    for (x, y), (tokens, labels, m) in zip(rows, ref, strict=True):
        assert x[:-1].tolist() == tokens
        assert y[-1] == -100
        assert y[:-1].tolist() == [lab if keep else -100 for lab, keep in zip(labels, m, strict=True)]
    # label-aligned: the targets in the loss are exactly the answer tokens (with answer-only loss)
    if answer_only_loss:
        targets = [t for _, y in rows for t in y.tolist() if t != -100]
        assert targets == [t for _, a in convs for t in a]


def test_read_packed_rejects_broken_rows(tmp_path):
    good = pack([([100, 101], [102, 103]), ([104], [105, 106])])
    write_packed_parquet(tmp_path / "ok.parquet", [good])
    rows = read_packed(tmp_path / "ok.parquet", pack_size=16)
    assert len(rows) == 1 and rows.tokens == 7 and rows.loss_tokens() == 4
    with pytest.raises(DataError, match="more than the pack size 4"):
        read_packed(tmp_path / "ok.parquet", pack_size=4)
    bad = dict(good, seq_start_id=[0, 9])
    write_packed_parquet(tmp_path / "bad.parquet", [bad])
    with pytest.raises(DataError, match="row 0: seq_start_id"):
        read_packed(tmp_path / "bad.parquet")
    write_packed_parquet(tmp_path / "len.parquet", [dict(good, loss_mask=good["loss_mask"][:-1])])
    with pytest.raises(DataError, match="loss_mask and input_ids differ"):
        read_packed(tmp_path / "len.parquet")


def test_finds_the_packed_files_data_prep_writes(tmp_path):
    """`data prep sft` writes <root>/data/training_<P>.idx.parquet (part files and newer versions sit
    deeper): the shallowest match wins, two at the same depth are an error, an explicit path wins."""
    from nemotron.runtime.megatron.sft_data import find_packed_file

    p = pack([([100], [101, 102])])
    top = write_packed_parquet(tmp_path / "data" / "training_64.idx.parquet", [p])
    write_packed_parquet(tmp_path / "v2" / "data" / "training_64.idx.parquet", [p])
    write_packed_parquet(tmp_path / "data" / "packs" / "training-part-0.parquet", [p])
    assert find_packed_file(tmp_path, None, "training", 64) == top
    assert find_packed_file(tmp_path, None, "validation", 64) is None
    explicit = tmp_path / "v2" / "data" / "training_64.idx.parquet"
    assert find_packed_file(tmp_path, explicit, "training", 64) == explicit
    write_packed_parquet(tmp_path / "other" / "training_64.idx.parquet", [p])
    with pytest.raises(DataError, match="several packed training files"):
        find_packed_file(tmp_path, None, "training", 64)


# ------------------------------------------------------------------------------------ the real model
@pytest.fixture(scope="module")
def tiny_model():
    import torch

    from nemotron.runtime.common.model import build

    torch.set_num_threads(2)
    model = build(small_spec(), seed=0)
    model.eval()
    return model


def _rows_for(tmp_path: Path, name: str, packs):
    write_packed_parquet(tmp_path / f"{name}.parquet", packs)
    return read_packed(tmp_path / f"{name}.parquet")


def test_no_document_leaks_into_another(tmp_path, tiny_model):
    """In the `rows` layout a sub-sequence's logits do not depend on what was packed before it (nor on
    the padding). Control: the same pack as one row with restarting position ids does leak — through
    the Mamba state, as the issue warns — so the check is sensitive."""
    import torch

    a, a2, b = ([100, 101, 102, 103, 104, 105, 106, 107, 108, 109], [110, 111]), \
        ([130, 131, 132, 133, 134, 135, 136, 137, 138, 139], [120, 121]), ([140, 141, 142], [143, 144])
    rows = _rows_for(tmp_path, "leak", [pack([a, b]), pack([a2, b]), pack([b])])
    coll = PackCollator(rows, "rows", budget=10**6)  # one forward group: B is padded to A's length
    n_b = 5
    with torch.no_grad():
        outs = []
        for r in (0, 1, 2):
            (group,) = coll([r])["groups"]
            logits = tiny_model(input_ids=group["input_ids"], attention_mask=group["attention_mask"]).logits
            outs.append(logits[-1, :n_b])
        torch.testing.assert_close(outs[0], outs[2], atol=1e-5, rtol=1e-5)  # after A == alone (and padded)
        torch.testing.assert_close(outs[1], outs[2], atol=1e-5, rtol=1e-5)  # after A' == alone
        # control: one packed row, attention isolated by position ids, Mamba state not
        for r, prev in ((0, a), (1, a2)):
            ids, _, _starts = rows.row(r)
            pos = torch.tensor([list(range(len(prev[0]) + len(prev[1]))) + list(range(n_b))])
            packed = tiny_model(input_ids=torch.from_numpy(ids)[None], position_ids=pos).logits[0, -n_b:]
            assert (packed - outs[2]).abs().max() > 1e-3


def test_masked_tokens_do_not_contribute_to_the_loss(tmp_path, tiny_model):
    """The loss the trainer optimises is the mean cross-entropy over the label-aligned mask's 1s only:
    it equals a hand computation over those positions and transformers' own causal-LM loss on the same
    rows, whose gradient is zero at every other position."""
    import torch

    from nemotron.runtime.megatron.loss import selected_token_loss

    convs = [([100, 101, 102, 103], [104, 105, 106]), ([110, 111], [112, 113, 114, 115]), ([120, 121, 122], [123])]
    p = pack(convs, pad_to=24)
    rows = _rows_for(tmp_path, "mask", [p])
    batch = PackCollator(rows, "rows", budget=10**6)([0])
    (group,) = batch["groups"]
    keep = group["shift_labels"] != -100
    assert int(keep.sum()) == int((batch["shift_labels"] != -100).sum()) == sum(len(a) for _, a in convs)
    with torch.no_grad():
        ours = selected_token_loss(tiny_model, batch)
        half = selected_token_loss(tiny_model, batch, num_items=2 * int(keep.sum()))
        logits = tiny_model(input_ids=group["input_ids"], attention_mask=group["attention_mask"]).logits
        theirs = tiny_model(**group, labels=group["shift_labels"]).loss
    logp = torch.log_softmax(logits.float(), -1)
    ids, mask, starts = rows.row(0)
    sub = {len(ids[s:e]): (s, e) for s, e in zip(starts.tolist(), [*list(starts[1:].tolist()), len(ids)], strict=True)}
    expected, count = 0.0, 0
    for r in range(group["input_ids"].shape[0]):
        s, e = sub[int(group["attention_mask"][r].sum())]
        for j in range(e - s - 1):
            if mask[s + j]:
                expected -= float(logp[r, j, ids[s + j + 1]])
                count += 1
    assert float(ours) == pytest.approx(expected / count, rel=1e-5)
    assert float(theirs) == pytest.approx(float(ours), rel=1e-5)
    assert float(half) == pytest.approx(float(ours) / 2, rel=1e-6)
    leaf = logits.detach().requires_grad_(True)
    loss = tiny_model.loss_function(leaf, group["shift_labels"], tiny_model.config.vocab_size,
                                    shift_labels=group["shift_labels"])
    loss.backward()
    assert float(leaf.grad[~keep].abs().max()) == 0.0
    assert float(leaf.grad[keep].abs().max()) > 0.0


def test_chunked_output_layer_gives_the_same_loss_and_gradient(tmp_path):
    """Above `chunk_tokens` counted positions the output layer runs in checkpointed chunks (memory of one
    chunk's logits): the loss and every gradient are those of the whole-batch computation."""
    import torch

    from nemotron.runtime.common.model import build
    from nemotron.runtime.megatron.loss import selected_token_loss

    model = build(small_spec(), seed=0)
    rows = _rows_for(tmp_path, "chunk", [pack([([100, 101, 102], [103, 104, 105, 106]), ([110], [111, 112])])])
    batch = PackCollator(rows, "rows")([0])
    grads = []
    for chunk in (10**6, 2):
        model.zero_grad()
        loss = selected_token_loss(model, batch, chunk_tokens=chunk)
        loss.backward()
        grads.append((float(loss), model.lm_head.weight.grad.clone(), model.model.embeddings.weight.grad.clone()))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-6)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-3, atol=2e-6)
    torch.testing.assert_close(grads[0][2], grads[1][2], rtol=1e-3, atol=2e-6)


def test_expert_bias_moves_towards_balance():
    """Megatron-Core's aux-loss-free update: after a training step each router's bias moves by the rate
    towards the under-used experts (sign of mean load minus load); evaluation forwards do not count."""
    import torch

    from nemotron.runtime.common.model import build
    from nemotron.runtime.megatron.moe import ExpertBiasUpdater

    model = build(small_spec(), seed=0)
    upd = ExpertBiasUpdater(model, rate=1e-3)
    assert len(upd.routers) == 4  # the four MoE layers of MEM*EMEM*E
    x = torch.randint(100, 148, (2, 16))
    model.eval()
    with torch.no_grad():
        model(input_ids=x)
    assert upd.step() == 0  # eval does not count
    model.train()
    loads = {}

    def grab(module, _inp, out):
        loads[id(module)] = torch.bincount(out[2].reshape(-1), minlength=16).float()

    hooks = [r.register_forward_hook(grab) for r in upd.routers]
    model(input_ids=x).logits.sum().backward()
    for h in hooks:
        h.remove()
    assert upd.step() == 4
    for r in upd.routers:
        c = loads[id(r)]
        expected = 1e-3 * torch.sign(c.mean() - c)
        torch.testing.assert_close(r.e_score_correction_bias, expected)
        assert (r.e_score_correction_bias > 0).any() and (r.e_score_correction_bias < 0).any()
    upd.remove()


def test_rows_are_grouped_by_length_within_the_budget(tmp_path):
    """A micro-batch's sub-sequences are run longest first in forward groups of at most `budget` padded
    tokens; every sub-sequence appears exactly once."""
    rng = np.random.default_rng(1)
    convs = [(list(range(100, 100 + n)), [150, 151]) for n in rng.integers(1, 40, 30).tolist()]
    packs = [pack(convs[:15]), pack(convs[15:])]
    rows = _rows_for(tmp_path, "group", packs)
    batch = PackCollator(rows, "rows", budget=128)([0, 1])
    seen = []
    for g in batch["groups"]:
        r, t = g["input_ids"].shape
        assert r * t <= 128 or r == 1
        seen += [tuple(x[m.bool()].tolist()) for x, m in zip(g["input_ids"], g["attention_mask"], strict=True)]
    expected = [tuple(p + a) for p, a in convs]
    assert sorted(seen) == sorted(expected)
    padded = sum(g["input_ids"].numel() for g in batch["groups"])
    assert padded < 1.3 * sum(len(x) for x in expected)


# ------------------------------------------------------------------------------------ training runs
def test_pretrain_loss_drops_then_sft_starts_from_its_checkpoint(tmp_path):
    """A short pretrain run on our .bin/.idx blend lowers the held-out loss by more than 2 nats (10 steps: 6.31 ->
    2.20 measured; 20 steps reach 1.55 but double the time); SFT on packed Parquet then starts from that
    checkpoint (its held-out loss at step 0 is already far below a fresh model's) and writes its own Hugging Face
    checkpoint."""
    from transformers import NemotronHForCausalLM

    from nemotron.runtime.megatron.trainer import run

    spec = small_spec()
    blend = write_pretrain_data(tmp_path / "data")
    cfg = compile_local("pretrain", fast_overrides(tmp_path / "pt", iters=10, **{
        "data.per_split_data_args_path": str(blend), "optimizer.lr": 3e-3, "optimizer.min_lr": 3e-4}))
    assert run(S.read(cfg, "pretrain"), spec=spec) == 0
    summary = json.loads((tmp_path / "pt" / "summary.json").read_text())
    assert summary["steps"] == 10
    assert summary["eval_loss_first"] - summary["eval_loss_last"] > 2.0, summary["eval_losses"]
    assert (tmp_path / "pt" / "latest_checkpointed_iteration.txt").read_text().strip() == "10"
    NemotronHForCausalLM.from_pretrained(tmp_path / "pt")  # the final model loads as a plain HF model

    sft = write_sft_data(tmp_path / "sft", pack_size=256)
    cfg = compile_local("sft", fast_overrides(tmp_path / "sft-ckpt", seq=256, iters=4, **{
        "dataset.dataset_root": str(sft), "checkpoint.pretrained_checkpoint": str(tmp_path / "pt"),
        "dataset.packed_sequence_specs.packed_train_data_path": str(sft / "training_256.idx.parquet"),
        "dataset.packed_sequence_specs.packed_val_data_path": str(sft / "validation_256.idx.parquet"),
        "validation.eval_interval": 4, "checkpoint.save_interval": 4}))
    assert run(S.read(cfg, "sft"), spec=spec) == 0
    sft_summary = json.loads((tmp_path / "sft-ckpt" / "summary.json").read_text())
    assert sft_summary["eval_loss_first"] < summary["eval_loss_first"] - 2.0  # not a fresh model
    assert sft_summary["eval_loss_last"] <= sft_summary["eval_loss_first"] + 0.05
    lineage = json.loads((tmp_path / "sft-ckpt" / "lineage.json").read_text())
    assert lineage["pretrained_checkpoint"] == str(tmp_path / "pt")
    assert (tmp_path / "sft-ckpt" / "model.safetensors").is_file()


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "NEMOTRON_CKPT_ROOT": str(tmp_path / "ckpt"),
           "PYTHONUNBUFFERED": "1"}
    env.pop("NEMOTRON_ENV_FILE", None)
    return env


def _wait_for(predicate, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"process ended ({proc.returncode}) before {what}:\n{out[-3000:]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def _wait_for_unlocked(folder: Path, timeout: float = 120) -> None:
    """Until no process holds ``folder``'s writer lock (the killed run has fully exited)."""
    import fcntl

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(folder / ".nemotron-writer.lock", "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                time.sleep(0.2)
    pytest.fail(f"{folder} is still locked after {timeout} s")


def _saved_steps(folder: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").is_file())


@pytest.mark.slow
def test_kill_and_resume_continue_from_the_saved_step(tmp_path):
    """The real `small` model through the CLI: killed (SIGKILL) after its first checkpoint, then stopped
    by SIGTERM (saves at the current step, exit 75, no artifact), then run again: each run continues from
    the last saved step and the last one records the checkpoint artifact."""
    env = _env(tmp_path)
    blend = write_pretrain_data(tmp_path / "data", docs=60, valid_docs=10)
    ckpt = tmp_path / "ckpt" / "ultra3-pretrain-local"
    args = [PY, "-m", "nemotron", "ultra3", "pretrain", "-c", "local", f"data.per_split_data_args_path={blend}",
            "model.seq_length=32", "train.train_iters=10", "train.global_batch_size=2", "train.micro_batch_size=2",
            "validation.eval_iters=0", "checkpoint.save_interval=2", "logger.log_interval=1",
            "scheduler.lr_warmup_iters=1", "scheduler.lr_decay_iters=10", "run.env.cpus=2"]
    # 1. hard kill after the first checkpoint
    first = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    try:
        _wait_for(lambda: _saved_steps(ckpt), first, 300, "the first checkpoint")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    _wait_for_unlocked(ckpt)  # the runtime (its own session) dies with the CLI: its lock goes when it has exited
    killed_at = _saved_steps(ckpt)[-1]
    recorded = tmp_path / "home" / "artifacts" / "pretrain-checkpoint"
    assert not recorded.exists()  # an unfinished run is no artifact
    # 2. the entry script directly (as the job runs it), stopped by SIGTERM
    train_yaml = next((tmp_path / "home" / "runs").glob("*/train.yaml"))
    metrics = ckpt / "metrics.jsonl"
    metrics.write_text("")  # only what the next run logs (its handlers are installed once it trains)
    second = subprocess.Popen([PY, str(ROOT / "stages/ultra3/pretrain/run.py"), "--config", str(train_yaml)],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stepped_past() -> bool:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        return any(json.loads(x).get("step", 0) > killed_at and "loss" in json.loads(x) for x in lines)

    _wait_for(stepped_past, second, 300, "a step after resuming")
    second.send_signal(signal.SIGTERM)
    out2, _ = second.communicate(timeout=300)
    assert second.returncode == S.EXIT_REQUEUE, out2[-3000:]
    assert f"resuming from {ckpt / f'checkpoint-{killed_at}'} (step {killed_at})" in out2
    stopped_at = _saved_steps(ckpt)[-1]
    assert killed_at < stopped_at < 8
    # 3. run again through the CLI: continues from the SIGTERM checkpoint and finishes
    metrics.write_text("")
    # ... with a new save interval, which the resumed run uses (not the one stored in the checkpoint)
    third = subprocess.run([*args, "checkpoint.save_interval=3"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
    out3 = third.stdout + third.stderr
    assert third.returncode == 0, out3[-3000:]
    assert f"(step {stopped_at})" in out3
    logged = [json.loads(x)["step"] for x in metrics.read_text().splitlines() if "loss" in json.loads(x)]
    assert logged and min(logged) == stopped_at + 1 and max(logged) == 10
    assert "saved checkpoint-9" in out3 and "saved checkpoint-8" not in out3
    state = json.loads((ckpt / "checkpoint-10" / "trainer_state.json").read_text())
    assert state["global_step"] == 10
    assert "artifact pretrain-checkpoint v1" in out3
    assert json.loads((recorded / "v1.json").read_text())["path"] == str(ckpt)


def test_resume_refuses_other_inputs_and_fewer_iters_unless_allowed(tmp_path, capsys):
    """A checkpoint resumed on another blend, or with train.train_iters below its saved step, is refused by
    the entry (exit 2, one line); +run.allow_new_inputs=true resumes on the new blend and lineage.json
    records the change (the next resume on it is then no change)."""
    from nemotron.runtime.megatron import lineage
    from nemotron.runtime.megatron.entry import run_config
    from nemotron.runtime.megatron.trainer import run

    spec = small_spec()
    old, new = write_pretrain_data(tmp_path / "a", docs=60), write_pretrain_data(tmp_path / "b", docs=60)
    ckpt = tmp_path / "pt"

    def cfg(blend: Path, iters: int, **extra):
        return compile_local("pretrain", fast_overrides(ckpt, seq=32, iters=iters, **{
            "data.per_split_data_args_path": str(blend), "validation.eval_iters": 0, "checkpoint.save_interval": 2,
            "scheduler.lr_warmup_iters": 0, **extra}))

    assert run(S.read(cfg(old, 4), "pretrain"), spec=spec) == 0
    capsys.readouterr()
    assert run_config("pretrain", cfg(old, 2)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ultra3 pretrain: train.train_iters=2 is below step 4, already saved in {ckpt}: the run would "
                   "stop at once and present step 4 as its final model; set train.train_iters=4 or more to go on "
                   "with this run, or checkpoint.save=<a new folder> for a new run"]
    assert run_config("pretrain", cfg(new, 6)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ultra3 pretrain: data.per_split_data_args_path={new}: the "
                                               f"checkpoint at step 4 in {ckpt} was trained on {old}")
    assert "+run.allow_new_inputs=true" in err[0] and "checkpoint.save=<a new folder>" in err[0]
    assert json.loads((ckpt / "lineage.json").read_text())["inputs"]["data.per_split_data_args_path"] == str(old)

    assert run(S.read(cfg(new, 6, **{"+run.allow_new_inputs": True}), "pretrain"), spec=spec) == 0
    out = capsys.readouterr().out
    assert f"run.allow_new_inputs: resuming step 4 on data.per_split_data_args_path={new} (was {old})" in out
    recorded = json.loads((ckpt / "lineage.json").read_text())
    assert [(c["key"], c["from"], c["to"], c["step"]) for c in recorded["changes"]] == [
        ("data.per_split_data_args_path", str(old), str(new), 4)]
    assert recorded["inputs"]["data.per_split_data_args_path"] == str(new)
    assert json.loads((ckpt / "summary.json").read_text())["steps"] == 6
    assert lineage.check_resume(S.read(cfg(new, 8), "pretrain"), 6) == []  # the new blend is the recorded one now


def test_rerun_of_a_finished_run_with_other_settings_is_refused(tmp_path, capsys):
    """A finished run run again with another setting (optimizer.lr here; train.train_iters=2e0 compiles to 2: the
    same setting) trains nothing, so the job would record the old final model as made by the new settings: the entry refuses it (exit
    2, one line naming the key, both values, the folder and the way out). Run again unchanged, it is already
    complete (exit 0, nothing trained)."""
    from nemotron.runtime.megatron.entry import run_config
    from nemotron.runtime.megatron.trainer import run

    spec = small_spec()
    blend = write_pretrain_data(tmp_path / "data", docs=60)
    ckpt = tmp_path / "pt"

    def cfg(**extra):
        return compile_local("pretrain", fast_overrides(ckpt, seq=32, iters=2, **{
            "data.per_split_data_args_path": str(blend), "validation.eval_iters": 0, "checkpoint.save_interval": 2,
            "scheduler.lr_warmup_iters": 0, **extra}))

    assert run(S.read(cfg(), "pretrain"), spec=spec) == 0
    assert json.loads((ckpt / "run_config.json").read_text())["config"]["optimizer"]["lr"] == \
        S.read(cfg(), "pretrain").raw["optimizer"]["lr"]
    weights = (ckpt / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert run_config("pretrain", cfg(**{"optimizer.lr": 0.01})) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ultra3 pretrain: optimizer.lr=0.01 (was "), err
    assert f"the run whose final model is in {ckpt} finished with other settings" in err[0]
    assert "checkpoint.save=<a new folder>" in err[0]
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage

    as_typed = compile_config(get_stage("pretrain"), "local", [
        *(f"{k}={json.dumps(v)}" for k, v in fast_overrides(ckpt, seq=32, iters=2, **{
            "data.per_split_data_args_path": str(blend), "validation.eval_iters": 0, "checkpoint.save_interval": 2,
            "scheduler.lr_warmup_iters": 0}).items()), "train.train_iters=2e0"]).config
    assert get(as_typed, "train.train_iters") == 2  # an integral 2e0 for an int key compiles to the int 2 ...
    assert run_config("pretrain", as_typed) == 0  # ... so it is the same setting: already complete, not refused
    assert "already complete" in capsys.readouterr().out
    assert run(S.read(cfg(), "pretrain"), spec=spec) == 0
    assert f"pretrain: already complete: {ckpt / 'checkpoint-2'}" in capsys.readouterr().out
    assert (ckpt / "model.safetensors").read_bytes() == weights
