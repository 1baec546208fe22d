"""Rule ``train-length`` against Megatron-Bridge's own ``TrainingConfig.finalize`` (branch ``nemotron_3_ultra`` at
4588417): the config the rule refuses (``train_iters`` and ``train_samples`` both null, or both set) is refused by
upstream, and the iterations our rule and the job's exit code count for ``train_iters=null`` with
``train_samples`` (:func:`nemotron.layout.rules.iterations_of`) are the ones upstream computes. Nothing is stood in
for besides boot.py's."""

from __future__ import annotations

SCRIPT = r'''
from upstream import read_payload, write_result
from megatron.bridge.training.config import TrainingConfig
from nemotron.layout import rules

out = {}
for name, (iters, samples, gbs) in read_payload().items():
    ours = [p.message for p in rules.train_length(iters, samples, gbs)]
    t = TrainingConfig(train_iters=iters, train_samples=samples, global_batch_size=gbs, micro_batch_size=1)
    try:
        t.finalize()
        theirs = None
    except AssertionError as exc:
        theirs = str(exc)
    out[name] = {"ours": ours, "theirs": theirs, "iters": t.train_iters,
                 "counted": rules.iterations_of(iters, samples, gbs)}
write_result(out)
'''

CASES = {"iters": (20, None, 16), "samples": (None, 1000, 16), "neither": (None, None, 16), "both": (20, 1000, 16)}


def test_train_length_is_megatron_bridges(upstream):
    out = upstream.run(SCRIPT, CASES)
    for name in ("iters", "samples"):  # accepted by both; the same iterations
        assert out[name]["ours"] == [] and out[name]["theirs"] is None, out[name]
        assert out[name]["iters"] == out[name]["counted"], out[name]
    assert out["samples"]["iters"] == 1000 // 16
    assert out["neither"]["theirs"] == "Either train_iters or train_samples must be provided" and out["neither"]["ours"]
    assert out["both"]["theirs"] == "Cannot specify both train_iters and train_samples" and out["both"]["ours"]
