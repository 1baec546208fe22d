"""The MoE-routing check the Megatron-Bridge entry runs after AutoBridge builds the model provider.

A silently unscaled routed output is a known drift in the NemotronH family: Megatron-Core multiplies the
routed experts' output by ``moe_router_topk_scaling_factor`` only when it is set (``None`` means 1.0), so
a provider that lost ``routed_scaling_factor`` on the way from the HF config trains a different model
without an error. :func:`check_routing` compares the provider with the catalogue entry and lists every
field that did not arrive; :func:`require_routing` raises with all of them at once.

Provider field names are Megatron-Core ``TransformerConfig``'s, filled by Megatron-Bridge's
``MegatronModelBridge.CONFIG_MAPPING`` (``num_experts_per_tok → moe_router_topk``, ``n_group →
moe_router_num_groups``, ``topk_group → moe_router_group_topk``, ``routed_scaling_factor →
moe_router_topk_scaling_factor``, ``n_routed_experts → num_moe_experts``, ``moe_intermediate_size →
moe_ffn_hidden_size``) and ``NemotronHBridge.provider_bridge`` (sigmoid score function, expert bias,
``moe_latent_size``) — megatron/bridge/models/conversion/model_bridge.py and models/nemotronh/
nemotron_h_bridge.py. Pure and stdlib only: it reads attributes of any object (a provider, a dataclass,
a ``SimpleNamespace``), so it is tested without Megatron.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nemotron.config.catalogue import ModelSpec

_MISSING = object()


@dataclass(frozen=True)
class RoutingField:
    """One provider field: its name, what the catalogue expects, and why it matters."""

    name: str
    expected: Any
    meaning: str
    none_means: Any = _MISSING  # the value Megatron-Core uses when the field is None


def expected_fields(spec: ModelSpec) -> list[RoutingField]:
    """The routing fields a provider for ``spec`` must carry (Ultra: scaling 5.0, top-22 of 512,
    sigmoid with expert bias, latent 2048, one expert group)."""
    return [
        RoutingField("moe_router_topk_scaling_factor", spec.moe_routed_scaling_factor,
                     "routed experts' output scale (HF routed_scaling_factor)", none_means=1.0),
        RoutingField("moe_router_topk", spec.moe_topk, "experts per token (HF num_experts_per_tok)"),
        RoutingField("num_moe_experts", spec.num_experts, "routed experts (HF n_routed_experts)"),
        RoutingField("moe_router_score_function", spec.moe_router_score_function, "router score function"),
        RoutingField("moe_router_enable_expert_bias", spec.moe_router_enable_expert_bias,
                     "expert bias in routing (aux-loss-free balancing; HF e_score_correction_bias)", none_means=False),
        RoutingField("moe_latent_size", spec.moe_latent_size, "latent size of the routed experts (LatentMoE)"),
        RoutingField("moe_ffn_hidden_size", spec.moe_ffn_hidden_size, "expert FFN size (HF moe_intermediate_size)"),
        RoutingField("moe_router_num_groups", spec.moe_n_group, "expert groups (HF n_group)", none_means=1),
        RoutingField("moe_router_group_topk", spec.moe_topk_group, "groups chosen per token (HF topk_group)",
                     none_means=1),
    ]


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want or (isinstance(got, bool) and isinstance(want, bool) and got == want)
    if isinstance(want, float) or isinstance(got, float):
        try:
            return math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-9)
        except (TypeError, ValueError):
            return False
    if isinstance(want, str) and isinstance(got, str):
        return got.strip().lower() == want.strip().lower()
    return got == want


def check_routing(provider: Any, spec: ModelSpec) -> list[str]:
    """One sentence per routing field of ``provider`` that differs from ``spec`` (empty: all arrived).

    A field that is absent, or None where Megatron-Core would then use a different value (an unset scaling
    factor means 1.0), is reported as well. Models without MoE layers have nothing to check.
    """
    if not spec.is_moe:
        return []
    problems = []
    for f in expected_fields(spec):
        got = getattr(provider, f.name, _MISSING)
        if got is _MISSING:
            problems.append(f"{f.name} is missing from the provider; expected {f.expected!r} ({f.meaning})")
            continue
        effective = f.none_means if got is None and f.none_means is not _MISSING else got
        if not _same(effective, f.expected):
            shown = f"None (Megatron-Core then uses {f.none_means!r})" if got is None and f.none_means is not _MISSING \
                else repr(got)
            problems.append(f"{f.name}={shown}; expected {f.expected!r} for {spec.name} ({f.meaning})")
    return problems


class RoutingError(RuntimeError):
    """MoE routing settings did not arrive intact; ``str()`` lists every field."""


def require_routing(provider: Any, spec: ModelSpec) -> None:
    """Raise :class:`RoutingError` listing every routing field that differs (see :func:`check_routing`)."""
    problems = check_routing(provider, spec)
    if problems:
        raise RoutingError(f"the model provider's MoE routing does not match {spec.name} ({len(problems)} "
                           "field(s)); stopping before training: " + "; ".join(problems))


__all__ = ["RoutingError", "RoutingField", "check_routing", "expected_fields", "require_routing"]
