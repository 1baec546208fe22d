"""A null run length or node count is refused by the checks the dry run and the run share, or the report says what
replaces it: Megatron-Bridge's ``TrainingConfig.finalize`` asserts "Either train_iters or train_samples must be
provided" (and not both), so ``train.train_iters=null`` with no ``train.train_samples`` would be queued and fail in the
job (rule ``train-length``); with ``+train.train_samples=N`` the dry run notes the iterations it gives and the job's
exit code counts them. ``run.env.nodes=null`` would silently be one node (rule ``positive-int``)."""

from __future__ import annotations

import pytest

from test_validation import H100, check, errors

from nemotron.layout import rules


@pytest.mark.parametrize("folder", ["pretrain", "sft"])
def test_null_train_iters_without_samples_is_refused(folder):
    problems, _, _, _ = check(folder, "tiny", {"train.train_iters": None}, profile=H100)
    found = [p for p in errors(problems) if p.rule == "train-length"]
    assert [p.key for p in found] == ["train.train_iters"], [p.render() for p in errors(problems)]
    assert "TrainingConfig.finalize asserts one of them" in found[0].message
    assert "+train.train_samples=N" in found[0].valid


@pytest.mark.parametrize("folder", ["pretrain", "sft"])
def test_train_samples_replaces_null_train_iters_and_the_report_says_so(folder):
    problems, notes, _, cfg = check(folder, "tiny", {"train.train_iters": None, "+train.train_samples": 1000},
                                    profile=H100)
    assert not [p for p in errors(problems) if p.rule in ("train-length", "lr-warmup")], \
        [p.render() for p in errors(problems)]
    gbs = cfg["train"]["global_batch_size"]
    assert (f"train.train_iters=null: Megatron-Bridge trains for train.train_samples // train.global_batch_size = "
            f"1,000 // {gbs:,} = {1000 // gbs:,} iterations") in notes
    from nemotron.runtime.megatron.megatron_bridge import _iterations

    assert _iterations(cfg) == 1000 // gbs  # the job's exit code compares the last save with these iterations


def test_both_lengths_or_less_than_one_batch_are_refused():
    problems, _, _, _ = check("sft", "tiny", {"+train.train_samples": 1000}, profile=H100)
    assert [p.key for p in errors(problems) if p.rule == "train-length"] == ["train.train_samples"]
    problems, _, _, cfg = check("sft", "tiny", {"train.train_iters": None, "+train.train_samples": 3}, profile=H100)
    found = [p for p in errors(problems) if p.rule in ("train-length", "lr-warmup")]
    assert [(p.rule, p.key) for p in found] == [("train-length", "train.train_samples")]
    assert rules.iterations_of(None, 3, cfg["train"]["global_batch_size"]) == 0


@pytest.mark.parametrize("folder", ["pretrain", "sft", "rlvr"])
def test_null_node_count_is_refused(folder):
    problems, _, _, _ = check(folder, "tiny", {"run.env.nodes": None}, profile=H100)
    found = [p for p in errors(problems) if p.key == "run.env.nodes"]
    assert found and found[0].rule == "positive-int" and "silently get 1 node" in found[0].message, \
        [p.render() for p in errors(problems)]
