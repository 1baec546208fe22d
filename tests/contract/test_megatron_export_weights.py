"""``convert`` (megatron_to_hf) weight pass on the CPU: Megatron-Bridge 4588417's real export of a shrunk ``small``
NemotronH with MTP, through a real ``torch_dist`` checkpoint (Megatron-LM c8288b6).

What runs (all upstream code, in the contract interpreter, in a fresh process: see the stand-ins below):

1. the ``sft`` translation of bench/gpu_megatron.py's one-GPU SFT of ``small`` (our ``translate`` / ``_recipe`` /
   ``_apply``), with the catalogue's ``small`` HF config shrunk to a few MB (:data:`TINY`: hidden 64, 4 experts,
   vocabulary 512; the same 10 layers ``MEM*EMEM*E`` and MTP block ``*E`` at depth 2), finalized by
   ``runtime_config_update`` as ``finetune()`` does before its first save;
2. Megatron-Bridge's ``temporary_distributed_context("gloo")`` (the single-process gloo group and
   ``initialize_model_parallel`` that its own CPU ``export_ckpt`` uses), the provider's
   ``provide_distributed_model(use_cpu_initialization=True)``: Megatron-Core's local (non-TE) layers, as
   the provider picks them where Transformer Engine is absent;
3. ``save_megatron_model`` (a ``torch_dist`` checkpoint through Megatron-Bridge's ``save_checkpoint``), its
   ``run_config.yaml`` replaced by the training container's ``to_yaml`` (what ``save_checkpoint`` writes in training);
4. the export as our ``_convert`` does it: ``export_bridge(bc, ckpt)`` (``AutoBridge.from_auto_config``),
   ``bridge.load_megatron_model(ckpt)``, ``bridge.save_hf_pretrained(model, out)`` — once without
   ``mtp_export_mappings`` (upstream as it is) and once inside it (ours);
5. the export reloaded by transformers' own NemotronH (``AutoModelForCausalLM.from_pretrained``).

Stand-ins (only for code with no CPU build), in the script itself:

* ``mamba_ssm`` (CUDA/Triton kernels; not installable here): Megatron-Core's ``MambaMixer`` takes its gated
  RMSNorm class from ``mamba_ssm.ops.triton.layernorm_gated.RMSNorm`` and, without the package, makes it a
  ``MagicMock`` (its weight then is no parameter and would vanish from the export). The stand-in is a
  ``torch.nn.Module`` with that class's constructor and one ``weight`` parameter (mamba-ssm 2.x); its forward
  and the scan kernels raise.
* ``torch.cuda.current_device`` returns ``"cpu"``: ``MambaMixer.__init__`` allocates ``A_log``, ``D``,
  ``dt_bias`` and the norm on ``torch.cuda.current_device()`` unconditionally, which the CPU build of torch
  refuses ("Torch not compiled with CUDA enabled").
* Transformer Engine: boot.py's (tests/contract/boot.py).

Where the proof stops: no Megatron forward (the Mamba mixer's scan is ``mamba_chunk_scan_combined``, CUDA/Triton
only), so no logits are compared with :func:`nemotron.runtime.megatron.export_check.compare_logits`; instead every
exported tensor is compared with the Megatron parameter it was converted from.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upstream as upstream_mod  # noqa: E402
from test_megatron_bridge import BUILD  # noqa: E402
from test_megatron_bridge_convert import _cases  # noqa: E402

pytestmark = pytest.mark.timeout(600)

#: The catalogue's `small` HF config shrunk (tests/runtime/test_export_check.py's sizes), its 10-layer pattern and
#: MTP block kept.
TINY = dict(vocab_size=512, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=1, n_routed_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32, intermediate_size=32,
            moe_shared_expert_intermediate_size=32, moe_latent_size=None)

#: Set off on the provider for the local (non-TE) layers: the fused/TE kernels' switches they refuse
#: (``WrappedTorchNorm`` asserts ``not persist_layer_norm``), grouped GEMM (TEGroupedMLP), and the alltoall token
#: dispatcher, whose constructor makes a ``torch.cuda.Stream`` (``allgather``: what Megatron-Bridge's own single-rank
#: ``load_megatron_model`` falls back to; the dispatcher holds no weights).
LOCAL_ONLY = {"persist_layer_norm": False, "moe_grouped_gemm": False, "moe_token_dispatcher_type": "allgather"}

STANDINS = r'''
import sys, types, torch

def _refuse(name):
    def f(*a, **k):
        raise RuntimeError(f"{name}: mamba_ssm stand-in (CUDA/Triton only); this path needs the real one")
    return f

class _GatedRMSNorm(torch.nn.Module):
    """mamba_ssm.ops.triton.layernorm_gated.RMSNorm's constructor and parameter; the forward raises."""
    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, device=None, dtype=None):
        super().__init__()
        self.eps, self.group_size, self.norm_before_gate = eps, group_size, norm_before_gate
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
    forward = _refuse("RMSNorm.forward")

for _name in ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton", "mamba_ssm.ops.triton.layernorm_gated",
              "mamba_ssm.ops.triton.ssd_combined"):
    sys.modules[_name] = types.ModuleType(_name)
sys.modules["mamba_ssm"].__version__ = "2.2.4"
sys.modules["mamba_ssm.ops.triton.layernorm_gated"].RMSNorm = _GatedRMSNorm
for _fn in ("mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined"):
    setattr(sys.modules["mamba_ssm.ops.triton.ssd_combined"], _fn, _refuse(_fn))
assert "megatron.core.ssm.mamba_mixer" not in sys.modules, "the stand-in must precede Megatron-Core's import"
torch.cuda.current_device = lambda: "cpu"
'''

SCRIPT = STANDINS + BUILD + r'''

def local_hybrid_spec():
    """Megatron-Core c8288b6's hybrid stack spec (models/hybrid/hybrid_layer_specs.py ``hybrid_stack_spec``: Mamba,
    attention, MoE layers and the MTP block) with its Transformer Engine modules replaced by Megatron-Core's own local
    ones: ``WrappedTorchNorm`` for TENorm and the norm fused into TELayerNormColumnParallelLinear (as a separate
    ``norm`` / ``input_layernorm``, the layout of Megatron-Core's ``_get_hybrid_stack_local_spec``),
    ``ColumnParallelLinear`` / ``RowParallelLinear``, ``DotProductAttention``, and the non-grouped local MoE experts
    (``SequentialMLP``). A stand-in for the TE spec, which cannot be built without TE; its parameter names are the
    local ones that the NemotronH bridge maps as well."""
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.models.hybrid.hybrid_block import HybridStack, HybridStackSubmodules
    from megatron.core.ssm.mamba_layer import MambaLayer, MambaLayerSubmodules
    from megatron.core.ssm.mamba_mixer import MambaMixer, MambaMixerSubmodules
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.multi_token_prediction import (
        MultiTokenPredictionBlock, MultiTokenPredictionBlockSubmodules, MultiTokenPredictionLayer,
        MultiTokenPredictionLayerSubmodules)
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_layer import (MoETransformerLayer, TransformerLayer,
                                                             TransformerLayerSubmodules)
    mtp = ModuleSpec(module=MultiTokenPredictionBlock, submodules=MultiTokenPredictionBlockSubmodules(layer_specs=[
        ModuleSpec(module=MultiTokenPredictionLayer, submodules=MultiTokenPredictionLayerSubmodules(
            enorm=WrappedTorchNorm, hnorm=WrappedTorchNorm, eh_proj=ColumnParallelLinear, mtp_model_layer=None,
            layer_norm=WrappedTorchNorm))]))
    return ModuleSpec(module=HybridStack, submodules=HybridStackSubmodules(
        mamba_layer=ModuleSpec(module=MambaLayer, submodules=MambaLayerSubmodules(
            norm=WrappedTorchNorm,
            mixer=ModuleSpec(module=MambaMixer, submodules=MambaMixerSubmodules(
                in_proj=ColumnParallelLinear, out_proj=RowParallelLinear)),
            mamba_bda=get_bias_dropout_add)),
        attention_layer=ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules(
            input_layernorm=WrappedTorchNorm,
            self_attention=ModuleSpec(module=SelfAttention, params={"attn_mask_type": AttnMaskType.causal},
                                      submodules=SelfAttentionSubmodules(
                                          linear_qkv=ColumnParallelLinear, core_attention=DotProductAttention,
                                          linear_proj=RowParallelLinear)),
            self_attn_bda=get_bias_dropout_add)),
        moe_layer=ModuleSpec(module=MoETransformerLayer, submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=WrappedTorchNorm,
            mlp=get_moe_module_spec(use_te=False, num_experts=8, moe_grouped_gemm=False),
            mlp_bda=get_bias_dropout_add)),
        mtp_block_spec=mtp))

import dataclasses, traceback
import yaml
import torch
from upstream import read_payload, write_result

p = read_payload()
res = {}
work = Path(p["work"])
stop = None
try:
    stop = "translate"
    case = p["sft"]
    bc_sft = mb.translate(case["cfg"], "sft")
    bc_sft = dataclasses.replace(bc_sft, hf_config={**bc_sft.hf_config, **p["tiny"]})
    hf_path = mb.hf_source(bc_sft, work / "hf-config")
    container = mb._recipe(bc_sft, hf_path)
    mb._apply(container, bc_sft, hf_path)
    from megatron.bridge.training.config import runtime_config_update
    os.environ["WORLD_SIZE"] = "1"
    for key, value in p["te_only"].items():
        setattr(container.model, key, value)
    runtime_config_update(container)
    prov = container.model
    prov.mamba_stack_spec = local_hybrid_spec()   # stand-in for the TE spec (see local_hybrid_spec)
    # HybridStack builds its final norm with Transformer Engine's TENorm whatever the spec says (hybrid_block.py
    # imports it by name); without TE that raises ImportError. The stand-in: Megatron-Core's own WrappedTorchNorm,
    # which takes the same (config, hidden_size, eps) and holds the same single `weight` (decoder.final_norm.weight)
    import megatron.core.models.hybrid.hybrid_block as hybrid_block
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    hybrid_block.TENorm = WrappedTorchNorm
    for key, value in p["local_only"].items():   # switches of the TE/fused kernels the local layers refuse
        setattr(prov, key, value)
    res["provider"] = {k: getattr(prov, k, None) for k in ("hidden_size", "num_layers", "hybrid_layer_pattern",
                                                            "mtp_num_layers", "num_moe_experts", "vocab_size")}
    from megatron.bridge.training.model_load_save import save_megatron_model, temporary_distributed_context
    ckpt = Path(p["ckpt"])
    with temporary_distributed_context(backend="gloo"):
        stop = "provide_distributed_model"
        # the CUDA RNG tracker keeps CUDA generator states, which a CPU build of torch has not; Megatron-Core's own
        # inference tracker (fork() a no-op) lets the CPU generator draw the initial weights
        from megatron.core.tensor_parallel.random import initialize_rng_tracker
        initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
        torch.manual_seed(0)
        model = prov.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)
        trained = {k: v.detach().clone() for k, v in model[0].state_dict().items() if isinstance(v, torch.Tensor)
                   and not k.endswith("_extra_state")}
        res["megatron_params"] = {k: list(v.shape) for k, v in model[0].named_parameters()}
        stop = "save_megatron_model"
        save_megatron_model(model, str(ckpt))
        iters = sorted(d.name for d in ckpt.iterdir() if d.name.startswith("iter_"))
        res["saved_iters"] = iters
        it = ckpt / iters[-1]
        res["saved_by_save_megatron_model"] = yaml.safe_load((it / "run_config.yaml").read_text())["model"].get(
            "hybrid_layer_pattern")
        container.to_yaml(str(it / "run_config.yaml"))   # what training's save_checkpoint writes
        res["saved_pattern"] = yaml.safe_load((it / "run_config.yaml").read_text())["model"].get("hybrid_layer_pattern")
        del model
        stop = "export_bridge"
        bc = mb.translate(p["convert"], "convert")
        bc = dataclasses.replace(bc, hf_config={**bc.hf_config, **p["tiny"]})
        bridge = mb.export_bridge(bc, str(ckpt), work / "ref")
        stop = "load_megatron_model"
        loaded = bridge.load_megatron_model(str(ckpt), wrap_with_ddp=False)
        got = {k: v for k, v in loaded[0].state_dict().items() if isinstance(v, torch.Tensor)
               and not k.endswith("_extra_state")}
        res["reload_equal"] = sorted(trained) == sorted(got) and all(torch.equal(trained[k], got[k]) for k in trained)
        res["reload_keys"] = [len(trained), len(got)]
        stop = "save_hf_pretrained (upstream)"
        try:
            bridge.save_hf_pretrained(loaded, str(work / "hf-upstream"))
            res["upstream_export"] = "ok"
        except Exception as exc:
            res["upstream_export"] = f"{type(exc).__name__}: {exc}"[:800]
        res["upstream_files"] = sorted(f.name for f in (work / "hf-upstream").glob("*")) if (work / "hf-upstream").is_dir() else []
        stop = "save_hf_pretrained (ours)"
        with mb.mtp_export_mappings():
            bridge.save_hf_pretrained(loaded, str(work / "hf"))
        res["files"] = sorted(f.name for f in (work / "hf").glob("*"))
        megatron_sd = {k: v.float() for k, v in got.items()}
    stop = "transformers reload"
    from transformers import AutoModelForCausalLM
    from safetensors.torch import load_file
    for who in ("hf", "hf-upstream"):
        folder = work / who
        if not (folder / "config.json").is_file():
            continue
        st = {}
        for f in folder.glob("*.safetensors"):
            st.update(load_file(str(f)))
        res.setdefault("exported", {})[who] = {k: list(v.shape) for k, v in st.items()}
        try:
            hf, info = AutoModelForCausalLM.from_pretrained(str(folder), output_loading_info=True,
                                                            torch_dtype=torch.float32)
            res.setdefault("loading_info", {})[who] = {k: sorted(map(str, v)) for k, v in info.items()
                                                       if k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
            if who == "hf":
                hsd = hf.state_dict()
                res["hf_state"] = {k: list(v.shape) for k, v in hsd.items()}
                res["same_as_file"] = all(torch.equal(hsd[k].float(), st[k].float()) for k in st if k in hsd)
                res["hf_config"] = hf.config.to_dict()
        except Exception as exc:
            res.setdefault("loading_info", {})[who] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
    # value check: one MTP and one main weight, exported vs the Megatron parameter (bf16 cast both sides)
    stop = None
except Exception as exc:
    res["error"] = f"{stop}: {type(exc).__name__}: {exc}"[:1500]
    res["traceback"] = traceback.format_exc()[-4000:]
res["stop"] = stop
write_result(res)
'''


def _payload(tmp_path: Path) -> dict:
    case = _cases(tmp_path, one_gpu=True)
    return {**case, "tiny": TINY, "local_only": LOCAL_ONLY, "ckpt": str(tmp_path / "megatron-ckpt")}


@pytest.fixture(scope="module")
def export(upstream, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpuexport")
    mp = pytest.MonkeyPatch()
    mp.setattr(upstream_mod, "_FORK", False)   # a fresh interpreter: the mamba_ssm stand-in precedes Megatron-Core
    try:
        return upstream.run(SCRIPT, _payload(tmp), timeout=540)
    finally:
        mp.undo()


def test_probe(export):
    import json
    print(json.dumps({k: v for k, v in export.items() if k not in ("megatron_params", "hf_state", "exported")}, indent=1, default=str)[:20000])
    assert "error" not in export, export.get("traceback")
