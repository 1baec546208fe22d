"""The maths reward (NeMo RL's math-environment check, :mod:`nemotron.runtime.rl.rewards`) on real GSM8K answers, and
NeMo RL's GRPO advantage (:func:`nemotron.runtime.rl.rl_local.grpo_advantages`) against groups computed by hand.

The same responses go through NeMo RL's own ``HFVerifyWorker.verify`` in tests/contract/test_rl_reward_contract.py.
"""

from __future__ import annotations

import json
import math

import pytest

from nemotron.runtime.rl.rewards import check_impl, math_reward, math_rewards
from nemotron.runtime.rl.rl_local import grpo_advantages


def _gsm8k(shared_data, split: str) -> list[dict]:
    return [json.loads(line) for line in (shared_data / "rl" / f"gsm8k-{split}.jsonl").open(encoding="utf-8")]


def _gold(row: dict) -> str:  # what `data prep rl` writes as the ground truth (the text after the last ####)
    return row["answer"].rsplit("####", 1)[1].strip()


def _find(rows: list[dict], gold: str, words: str) -> dict:
    hits = [r for r in rows if _gold(r) == gold and words in r["question"]]
    assert len(hits) == 1, (gold, words, len(hits))
    return hits[0]


def test_real_gsm8k_answers_in_the_forms_models_write(shared_data):
    test = _gsm8k(shared_data, "test")
    ducks = _find(test, "18", "Janet")                     # "... How much in dollars does she make every day"
    cancer = _find(test, "1,450,000", "cancer cells")      # a gold answer with thousands separators
    spend = _find(test, "13", "$3.50")                     # the solution's money amounts carry cents
    g = _gold(cancer)
    assert g == "1,450,000"
    cases = [
        (ducks, "She sells 9 eggs at $2 each, so she makes $18 every day.", 1.0),
        (ducks, "Answer: \\boxed{18}", 1.0),
        (ducks, "\\boxed{\\$18}", 1.0),
        (ducks, "She makes $17.", 0.0),
        (cancer, "In total the program raised 1,450,000 dollars.", 1.0),
        (cancer, "The answer is 1450000", 1.0),
        (cancer, "So the total is \\boxed{1,450,000}", 1.0),
        (cancer, "The answer is 1,450", 0.0),
        (spend, "She has $13.00 left.", 1.0),
        (spend, "She has 3.50 left.", 0.0),
        (spend, "", 0.0),
    ]
    for row, response, want in cases:
        assert math_reward(response, _gold(row)) == want, (response, _gold(row))
    # decimals: "3.50" and "3.5" are one number; "35" is not
    assert math_reward("It costs 3.50", "3.5") == 1.0
    assert math_reward("It costs $3.50.", "3.50") == 1.0
    assert math_reward("It costs 35", "3.5") == 0.0


def test_reference_solutions_score_their_own_answer_and_not_the_next_ones(shared_data):
    """GSM8K's own worked solutions (ending in ``#### <answer>``) as responses: Math-Verify finds the answer in
    all but the listed ones, and never matches the next problem's (different) answer."""
    rows = _gsm8k(shared_data, "test")[:300]
    own = math_rewards([r["answer"] for r in rows], [_gold(r) for r in rows])
    missed = [i for i, x in enumerate(own) if x != 1.0]
    # 226 ends "33.333...%, which rounds down to 33%  #### 33", 258 "$<<4+2=6.00>>6.00 #### 6": the check reads
    # another number there (NeMo RL's check scores them 0 too: the contract test runs its code on them)
    assert missed == [226, 258]
    others = [(r["answer"], _gold(rows[(i + 1) % len(rows)])) for i, r in enumerate(rows)
              if _gold(rows[(i + 1) % len(rows)]) != _gold(r)]
    assert sum(math_reward(resp, gold) for resp, gold in others) == 0.0


def test_reward_never_raises_and_lists_must_match():
    assert math_reward("\\frac{", "3") == 0.0
    assert math_reward("x" * 5000, "1,450,000") == 0.0
    with pytest.raises(ValueError):
        math_rewards(["1"], ["1", "2"])
    assert check_impl("hf_math_verify") is None and check_impl(None) is None
    assert "env.math.math_verify_impl='dapo_math_verify'" in check_impl("dapo_math_verify")


def test_advantage_matches_a_group_computed_by_hand():
    # one prompt, 4 generations, rewards 1, 0, 0, 1; leave-one-out baseline and std of the other three:
    #   i=0: others (0,0,1): mean 1/3, unbiased std sqrt(1/3) = 0.57735 -> (1 - 1/3) / 0.57735 = 1.1547
    #   i=1: others (1,0,1): mean 2/3, std 0.57735                      -> (0 - 2/3) / 0.57735 = -1.1547
    adv = grpo_advantages([1, 0, 0, 1], 4)
    s = math.sqrt(1 / 3)
    want = [(1 - 1 / 3) / (s + 1e-6), (0 - 2 / 3) / (s + 1e-6), (0 - 2 / 3) / (s + 1e-6), (1 - 1 / 3) / (s + 1e-6)]
    assert adv == pytest.approx(want, rel=1e-9)
    assert adv[0] == pytest.approx(1.1547, abs=1e-4)
    # without leave-one-out: mean 0.5 and the unbiased std of all four, sqrt(1/3)
    d = 0.5 / (s + 1e-6)
    assert grpo_advantages([1, 0, 0, 1], 4, leave_one_out=False) == pytest.approx([d, -d, -d, d])
    # not normalised: plain differences; all-equal groups give 0 (no signal, no division by a zero std)
    assert grpo_advantages([1, 0, 0, 1], 4, normalize=False) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # groups are independent: the second prompt's all-zero group adds nothing to the first one's
    assert grpo_advantages([1, 1, 0, 0, 0, 0], 3) == pytest.approx(grpo_advantages([1, 1, 0], 3) + [0, 0, 0])
    assert grpo_advantages([0.0, 0.0, 0.0, 0.0], 2) == [0.0] * 4
    # two generations with leave-one-out: one "other" sample, no std: the raw difference
    assert grpo_advantages([1, 0], 2) == [1.0, -1.0]
    # the clamp of grpo.advantage_clip_low/high
    # rewards 1, 0 x 7: i=0 sees seven zeros (std 0): 1 - 0 = 1; i=1 sees (1, 0 x 6): mean 1/7, std sqrt(1/7)
    raw = grpo_advantages([1, 0, 0, 0, 0, 0, 0, 0], 8)
    assert raw[:2] == pytest.approx([1.0, -(1 / 7) / (math.sqrt(1 / 7) + 1e-6)])
    assert grpo_advantages([1, 0, 0, 0, 0, 0, 0, 0], 8, clip=(-0.2, 0.5))[:2] == [0.5, -0.2]
    with pytest.raises(ValueError):
        grpo_advantages([1, 0, 1], 2)
