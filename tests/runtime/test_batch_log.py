"""The per-micro-batch record of the megatron-bridge backend (``NEMOTRON_BATCH_LOG``): what a forward step with
Megatron-Bridge's signature drew, its reported loss, and the reader that compares two runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from nemotron.runtime.megatron import batch_log  # noqa: E402


def _forward(state, data_iterator, model, return_schedule_plan=False):
    """Megatron-Bridge's forward_step contract: draw one batch, return (output, loss_fn); the loss function returns
    (loss, num_tokens, {"lm loss": [sum, count]})."""
    batch = next(data_iterator)
    out = batch["tokens"].float().sum(dim=1)

    def loss_fn(output):
        n = torch.tensor(float(batch["tokens"].numel()))
        return output.sum(), n, {"lm loss": torch.stack([output.sum(), n])}

    return out, loss_fn


def _batches(seed: int, n: int):
    g = torch.Generator().manual_seed(seed)
    return [{"tokens": torch.randint(0, 1000, (2, 8), generator=g)} for _ in range(n)]


def test_recording_keeps_the_signature_and_records_samples_and_loss(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    log = tmp_path / "b.jsonl"
    step = batch_log.recording(_forward, log)
    state = SimpleNamespace(train_state=SimpleNamespace(step=0))
    data = iter(_batches(0, 4))
    for s in (0, 1):
        state.train_state.step = s
        for _ in range(2):  # two micro-batches per step
            output, loss_fn = step(state, data, None)
            loss_fn(output)
    rec = batch_log.read(log)
    want = [batch_log.sample_ids(b["tokens"]) for b in _batches(0, 4)]
    assert rec["samples"] == {0: want[0] + want[1], 1: want[2] + want[3]}
    assert set(rec["loss"]) == {0, 1}
    b = _batches(0, 4)
    assert rec["loss"][0] == pytest.approx(sum(float(x["tokens"].float().sum()) / 16 for x in b[:2]) / 2)


def test_a_repeated_step_keeps_the_later_record_and_other_ranks_write_nothing(tmp_path, monkeypatch):
    log = tmp_path / "b.jsonl"
    monkeypatch.setenv("RANK", "1")
    assert batch_log.recording(_forward, log) is _forward
    monkeypatch.setenv("RANK", "0")
    state = SimpleNamespace(train_state=SimpleNamespace(step=3))
    first, second = _batches(1, 1), _batches(2, 1)
    batch_log.recording(_forward, log)(state, iter(first), None)       # a run that stopped during step 3
    batch_log.recording(_forward, log)(state, iter(second), None)      # the resumed run redoes step 3
    assert batch_log.read(log)["samples"][3] == batch_log.sample_ids(second[0]["tokens"])
    assert batch_log.recording(_forward, None) is _forward
