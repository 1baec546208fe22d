"""The training loss of the local runtime: token-level cross-entropy over the positions that have a target.

Same value as transformers' ``ForCausalLMLoss`` with ``shift_labels`` and ``num_items_in_batch`` (a sum
over the counted positions divided by the number counted in the whole accumulated global batch — Megatron's
per-token loss over a global batch), computed so that memory follows the counted tokens, not the padded
batch: the decoder runs on each group of rows, and the output layer (hidden → 131,072 logits, FP32) is
applied only to the positions whose label is not -100. With SFT's answer-only mask that skips prompts
and padding; with one row per sub-sequence it keeps a long-tailed pack from materialising
rows × longest × vocabulary logits. Above ``CHUNK_TOKENS`` counted positions the output layer and the
cross-entropy run chunk by chunk under activation checkpointing, so at most one chunk's logits (and
their FP32 copy and gradient) are alive. Measured on an H200 (bench/train_tiny.py, the small model,
8 × 4,096 tokens, BF16): peak 62.8 GB with whole-batch logits, 24.2 GB chunked (the launcher's
estimate: 20.8 GB + 5 GB allowance), for 0.215 instead of 0.173 s a step (the output layer's forward
runs twice). Batches at or below ``CHUNK_TOKENS`` (every CPU config here) are not chunked.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

MODEL_KEYS = ("input_ids", "attention_mask", "position_ids", "seq_idx")
#: Counted positions above which the output layer + loss run in checkpointed chunks of this many tokens.
CHUNK_TOKENS = 8192


def _ce_sum(lm_head: Any, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(lm_head(hidden).float(), target, reduction="sum")


def groups_of(inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """The forward groups of a batch: ``inputs["groups"]`` (SFT collator) or the batch itself (pretraining)."""
    return list(inputs["groups"]) if "groups" in inputs else [inputs]


def selected_token_loss(model: Any, inputs: dict[str, Any], num_items: Any = None,
                        autocast_dtype: torch.dtype | None = None, chunk_tokens: int = CHUNK_TOKENS) -> torch.Tensor:
    """Sum of cross-entropies at positions with ``shift_labels != -100``, divided by ``num_items`` (the
    count over the accumulated global batch; default: this batch's count).

    Args:
        model: a ``NemotronHForCausalLM`` (``.model`` the decoder, ``.lm_head`` the output layer).
        inputs: ``{"groups": [g, ...]}`` or one group ``g``; ``g`` holds ``input_ids`` int64 [R, T],
            ``shift_labels`` int64 [R, T] (the target of each position, -100 = none) and optionally
            ``attention_mask`` [R, T], ``position_ids`` int64 [R, T], ``seq_idx`` int32 [R, T].
        num_items: int or 0-d tensor, the number of counted positions the loss is normalised by.
        autocast_dtype: BF16/FP16 autocast for the decoder and output layer; None = as is.
        chunk_tokens: above this many counted positions in a group, the output layer and the loss run in
            chunks of this size, each recomputed in the backward pass (same value and gradient).

    Returns:
        A 0-d FP32 tensor (the mean loss per counted token, in nats).
    """
    total = None
    count = 0
    device_type = next(model.parameters()).device.type
    for g in groups_of(inputs):
        labels = g["shift_labels"]
        sel = labels != -100
        n = int(sel.sum())
        if n == 0:
            continue
        count += n
        kwargs = {k: g[k] for k in MODEL_KEYS if k in g and g[k] is not None}
        with torch.autocast(device_type=device_type, dtype=autocast_dtype or torch.float32,
                            enabled=autocast_dtype is not None):
            hidden = model.model(**kwargs, use_cache=False).last_hidden_state[sel]
            target = labels[sel]
            if n <= chunk_tokens:
                part = _ce_sum(model.lm_head, hidden, target)
            else:
                from torch.utils.checkpoint import checkpoint

                part = sum(checkpoint(_ce_sum, model.lm_head, hidden[i:i + chunk_tokens], target[i:i + chunk_tokens],
                                      use_reentrant=False) for i in range(0, n, chunk_tokens))
        total = part if total is None else total + part
    if total is None:  # nothing counted: a zero that still has a graph to the weights
        return sum(p.sum() * 0.0 for p in model.parameters() if p.requires_grad)
    denom = num_items if num_items is not None else count
    if isinstance(denom, torch.Tensor):
        denom = denom.to(total.device)
    return total / denom


__all__ = ["MODEL_KEYS", "groups_of", "selected_token_loss"]
