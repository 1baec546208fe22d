"""NeMo RL's own code (RL @ 7ea279a) on what the local RL runtime computes: the maths reward and the GRPO advantage.

1. ``nemo_rl/environments/math_environment.py``: the class behind the Ray actor ``HFVerifyWorker`` (taken from the
   actor wrapper, no Ray cluster), its ``verify(responses, ground_truths, math_verify_impl="hf_math_verify")`` on
   real GSM8K ground truths with the response forms of tests/runtime/test_rl_reward.py and GSM8K's own worked
   solutions: the scores equal :func:`nemotron.runtime.rl.rewards.math_rewards`'s one for one.
2. ``nemo_rl/algorithms/advantage_estimator.py`` ``GRPOAdvantageEstimator.compute_advantage`` (leave-one-out and
   plain baselines, normalised or not) on batches of several prompts: equal to
   :func:`nemotron.runtime.rl.rl_local.grpo_advantages` before the clamp (NeMo RL clamps later, in grpo.py).

Where the proof stops: no Ray actors (``env.math.num_workers`` workers), no end-of-sequence masking of the
reward (``global_post_process_and_metrics``, metrics only).
"""

from __future__ import annotations

import json

SCRIPT = r'''
import torch
from upstream import read_payload, write_result
from nemo_rl.environments import math_environment as me
from nemo_rl.algorithms.advantage_estimator import GRPOAdvantageEstimator

p = read_payload()
actor = me.HFVerifyWorker
cls = getattr(actor, "__ray_metadata__").modified_class
worker = cls()
scores = worker.verify(p["responses"], p["golds"], math_verify_impl="hf_math_verify")
adv = {}
for name, (loo, norm) in {"loo_norm": (True, True), "loo": (True, False), "plain_norm": (False, True)}.items():
    est = GRPOAdvantageEstimator(type("C", (), {"use_leave_one_out_baseline": loo, "normalize_rewards": norm})(), None)
    r = torch.tensor(p["rewards"], dtype=torch.float32)
    ids = torch.tensor(p["prompt_ids"]).unsqueeze(-1)
    adv[name] = est.compute_advantage(ids, r, torch.ones(len(r), 1)).squeeze(-1).tolist()
write_result({"scores": scores, "adv": adv})
'''


def test_nemo_rl_scores_and_advantages_equal_ours(upstream, shared_data):
    from nemotron.runtime.rl.rewards import math_rewards
    from nemotron.runtime.rl.rl_local import grpo_advantages

    rows = [json.loads(line) for line in (shared_data / "rl" / "gsm8k-test.jsonl").open(encoding="utf-8")][:120]
    golds = [r["answer"].rsplit("####", 1)[1].strip() for r in rows]
    responses, gts = [], []
    for r, g in zip(rows, golds):
        responses += [r["answer"], f"The answer is {g}.", f"\\boxed{{{g}}}", f"${g}", f"{g}.00", "I do not know"]
        gts += [g] * 6
    responses += ["It costs 3.50", "It costs 35", "The total is 1450000"]
    gts += ["3.5", "3.5", "1,450,000"]
    rewards = [1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0.5, 0, 1, 0]
    prompt_ids = [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    out = upstream.run(SCRIPT, {"responses": responses, "golds": gts, "rewards": rewards, "prompt_ids": prompt_ids})
    ours = math_rewards(responses, gts)
    assert out["scores"] == ours
    assert sum(ours) > len(ours) / 2 and 0 in ours  # both outcomes are exercised
    for name, (loo, norm) in {"loo_norm": (True, True), "loo": (True, False), "plain_norm": (False, True)}.items():
        mine = grpo_advantages(rewards, 4, leave_one_out=loo, normalize=norm)
        assert len(out["adv"][name]) == len(mine)
        for a, b in zip(out["adv"][name], mine):
            assert abs(a - b) < 1e-5, (name, out["adv"][name], mine)
