"""Contract: why ``mtp-boost``'s cluster route is refused, shown by the pinned upstream code itself (Megatron-Core
c8288b6 under Megatron-Bridge 4588417), on the MTP keys of the compiled ``mtp-boost`` configs.

Our dry-run validates ``mtp-boost -c default`` / ``-c tiny`` with the Megatron-Bridge rules and then refuses it
(rule ``mtp-boost-framework``, :data:`nemotron.layout.rules.MTP_BOOST_MISSING`). In one contract subprocess:

* **The keys are Megatron's**: ``model.mtp_num_layers`` (N = 7 for ``default``) and ``model.mtp_use_repeated_layer``
  are fields of Megatron-Core's ``TransformerConfig`` and of Megatron-Bridge's ``MambaModelProvider`` (what the job
  would build) — the config is not refused for a typo.
* **The objective is cross-entropy on the gold labels**: Megatron-Core's own ``process_mtp_loss`` runs on CPU tensors
  with the compiled N; the loss function it calls receives, for depth k, the gold labels rolled by k, and the logits
  of that depth — never a backbone's logits (its signature has no parameter for them). A KL to the backbone cannot
  be expressed through it.
* **No backbone freeze**: no field of ``MambaModelProvider`` (nor of ``TransformerConfig``) freezes parameters
  (``freeze_language_model`` is a field of vision-language providers only), and no MTP field names a
  distillation/KL objective.

Where the proof stops: the model itself (``provide()`` needs GPUs and Transformer Engine); Model Optimizer's
``speculative_mtp_boost`` recipe is absent from the pinned nvidia-modelopt 0.47
(``tests/runtime/test_mtp_boost.py`` checks the installed package).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(900)

SCRIPT = r'''
import dataclasses, inspect
import torch
from types import SimpleNamespace
from upstream import read_payload, write_result
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer import multi_token_prediction as mtp
from megatron.bridge.models.mamba.mamba_provider import MambaModelProvider

payload = read_payload()
out = {"configs": {}}
tc_fields = {f.name for f in dataclasses.fields(TransformerConfig)}
mp_fields = {f.name for f in dataclasses.fields(MambaModelProvider)}
out["mtp_fields"] = sorted(f for f in tc_fields if f.startswith("mtp"))
out["freeze_fields"] = sorted(f for f in mp_fields | tc_fields if "freeze" in f)
out["loss_params"] = list(inspect.signature(mtp.process_mtp_loss).parameters)
for name, model in payload.items():
    rec = {"unknown": sorted(k for k in model if k not in mp_fields)}
    n, B, H, V = model["mtp_num_layers"], 2, 4, 9
    S = n + 5  # longer than the rollout: every depth has gold labels left
    torch.manual_seed(0)
    hidden = torch.randn((1 + n) * S, B, H)
    weight = torch.randn(V, H)
    labels = torch.randint(0, V, (B, S))
    calls = []
    def output_layer(h, weight=None, runtime_gather_output=None):
        return h @ weight.t(), None
    def lm_loss(lab, logits):
        calls.append((lab.clone(), logits.detach().clone()))
        return torch.nn.functional.cross_entropy(logits.permute(1, 2, 0), lab, reduction="none")
    cfg = SimpleNamespace(mtp_num_layers=n, mtp_loss_scaling_factor=model["mtp_loss_scaling_factor"],
                          calculate_per_token_loss=False)
    mtp.process_mtp_loss(hidden, labels, None, output_layer, weight, None, False, lm_loss, cfg)
    chunks = torch.chunk(hidden, 1 + n, dim=0)
    rec["depths"] = len(calls)
    rec["labels_are_gold_rolled"] = all(
        torch.equal(lab[:, :S - k], labels[:, k:]) for k, (lab, _) in enumerate(calls, 1))
    rec["logits_are_the_depths_own"] = all(
        torch.allclose(lg, chunks[k] @ weight.t()) for k, (_, lg) in enumerate(calls, 1))
    out["configs"][name] = rec
write_result(out)
'''


def test_pinned_megatron_core_trains_mtp_with_cross_entropy_on_gold_labels_and_cannot_freeze(upstream):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rl_support import compile_stage

    models = {}
    for name in ("default", "tiny"):
        cfg = compile_stage("mtp-boost", [], config=name, check_paths=False)
        models[name] = {k: cfg["model"][k] for k in ("mtp_num_layers", "mtp_use_repeated_layer",
                                                     "mtp_loss_scaling_factor")}
    assert models["default"]["mtp_num_layers"] == 7  # the report's N
    res = upstream.run(SCRIPT, models)
    for name, rec in res["configs"].items():
        assert rec["unknown"] == [], (name, rec)                       # Megatron's own MTP keys
        assert rec["depths"] == models[name]["mtp_num_layers"], rec
        assert rec["labels_are_gold_rolled"] and rec["logits_are_the_depths_own"], rec   # CE on gold, per depth
    assert not any(p in res["loss_params"] for p in ("teacher_logits", "target_logits", "backbone_logits")), res
    assert res["freeze_fields"] == [], res["freeze_fields"]
    assert not [f for f in res["mtp_fields"] if any(w in f for w in ("kl", "distill", "teacher"))], res["mtp_fields"]
    # and our dry-run's refusal says exactly this
    from nemotron.layout.rules import MTP_BOOST_MISSING

    assert "process_mtp_loss" in MTP_BOOST_MISSING and "gold" in MTP_BOOST_MISSING
