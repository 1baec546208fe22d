"""The maths reward of the local RL stages and of ``eval``: NeMo RL's math environment answer check.

NeMo RL 7ea279a, ``nemo_rl/environments/math_environment.py`` (``HFVerifyWorker.verify`` with
``env.math.math_verify_impl: hf_math_verify``, what our rlvr configs set), scores one response so:

* the ground truth ``g`` (``messages[1].content`` of our RL JSONL: GSM8K's text after ``####``, e.g.
  ``"1,450,000"``) is wrapped as ``\\boxed{g}`` and parsed with Math-Verify's LaTeX extraction;
* the response is parsed with Math-Verify's expression extraction and its LaTeX extraction (so
  ``"$18"``, ``"3.50"``, ``"1450000"`` and ``\\boxed{1,450,000}`` all parse);
* the score is Math-Verify's ``math_metric`` result as a float (1.0 equal, 0.0 not), and 0.0 whenever the
  parser or verifier raises (its timeout included).

We call the same library (``math-verify``, the one NeMo RL depends on) with the same extraction targets;
``tests/contract/test_rewards.py`` runs NeMo RL's own ``HFVerifyWorker.verify`` from the pinned archive on
the same responses and asserts the same scores. What is not reproduced: NeMo RL runs the check in Ray
actors (``env.math.num_workers``); here it runs in the training process.
"""

from __future__ import annotations

import contextlib
import io
import logging
from functools import lru_cache
from typing import Any

#: The implementation NeMo RL's math environment defaults to and our configs name (``env.math.math_verify_impl``).
MATH_VERIFY_IMPL = "hf_math_verify"


@lru_cache(maxsize=1)
def _metric() -> Any:
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    return math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                       pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))


def math_reward(response: str, ground_truth: str) -> float:
    """1.0 when ``response`` states ``ground_truth`` (Math-Verify's equivalence), else 0.0.

    Args:
        response: the generated text (any length; the last parsable answer Math-Verify finds counts).
        ground_truth: the expected answer as our RL JSONL stores it (``"1,450,000"``, ``"18"``, ``"3.5"``).

    Never raises: a parser error or timeout scores 0.0, as in NeMo RL.
    """
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            score, _ = _metric()(["\\boxed{" + ground_truth + "}"], [response])
        return float(score)
    except BaseException as exc:  # noqa: BLE001 - Math-Verify's TimeoutException derives from BaseException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return 0.0


def math_rewards(responses: list[str], ground_truths: list[str]) -> list[float]:
    """:func:`math_reward` of each pair (lists of equal length; raises ``ValueError`` otherwise)."""
    if len(responses) != len(ground_truths):
        raise ValueError(f"{len(responses)} responses for {len(ground_truths)} ground truths")
    return [math_reward(r, g) for r, g in zip(responses, ground_truths)]


def check_impl(value: Any) -> str | None:
    """A one-line problem when ``env.math.math_verify_impl`` is not the check this runtime has, else None."""
    if value in (None, MATH_VERIFY_IMPL):
        return None
    return (f"env.math.math_verify_impl={value!r}: the local runtime has NeMo RL's {MATH_VERIFY_IMPL!r} check only "
            f"(set env.math.math_verify_impl={MATH_VERIFY_IMPL})")


__all__ = ["MATH_VERIFY_IMPL", "check_impl", "math_reward", "math_rewards"]
