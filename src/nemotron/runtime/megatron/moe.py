"""Aux-loss-free load balancing for transformers' NemotronH: the expert-bias update Megatron-Core applies.

With ``moe_router_enable_expert_bias`` (sigmoid routing with expert bias: Ultra, and our ``small``),
Megatron-Core picks the top-k experts by ``sigmoid score + expert_bias`` and, after every optimizer
step, moves each expert's bias by ``moe_router_bias_update_rate`` towards balance:
``bias += rate * sign(mean(tokens_per_expert) - tokens_per_expert)``, with the token counts summed over
the whole global batch (megatron/core/transformer/moe/moe_utils.py ``get_updated_expert_bias``; the
default rate is 1e-3). transformers' ``NemotronHTopkRouter`` uses the bias
(``e_score_correction_bias``) but never updates it, so without this a local run routes with a frozen
bias. :class:`ExpertBiasUpdater` counts the experts each router picks in training-mode forwards
(evaluation does not count; every routed token counts, padding included) and applies the update.
"""

from __future__ import annotations

from typing import Any

import torch

#: Megatron-Core's default ``moe_router_bias_update_rate``.
DEFAULT_RATE = 1e-3


class ExpertBiasUpdater:
    """Forward hooks on every ``NemotronHTopkRouter`` of ``model``; :meth:`step` applies the update."""

    def __init__(self, model: torch.nn.Module, rate: float = DEFAULT_RATE) -> None:
        self.rate = rate
        self.routers: list[torch.nn.Module] = [m for m in model.modules()
                                               if type(m).__name__ == "NemotronHTopkRouter"
                                               and hasattr(m, "e_score_correction_bias")]
        self.counts: dict[int, torch.Tensor] = {}
        self._handles = [r.register_forward_hook(self._hook) for r in self.routers]

    def _hook(self, module: torch.nn.Module, _inputs: Any, output: Any) -> None:
        if not module.training or not torch.is_grad_enabled():
            return
        indices = output[2]  # (router_logits, topk_weights, topk_indices)
        n = module.e_score_correction_bias.numel()
        c = torch.bincount(indices.reshape(-1), minlength=n).to(torch.float32)
        key = id(module)
        self.counts[key] = self.counts[key] + c if key in self.counts else c

    @torch.no_grad()
    def step(self) -> int:
        """Apply the update to every router that routed tokens since the last step; returns how many."""
        done = 0
        for r in self.routers:
            c = self.counts.pop(id(r), None)
            if c is None:
                continue
            bias = r.e_score_correction_bias
            bias.add_(torch.sign(c.mean() - c).to(bias.device, bias.dtype), alpha=self.rate)
            done += 1
        return done

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


__all__ = ["DEFAULT_RATE", "ExpertBiasUpdater"]
