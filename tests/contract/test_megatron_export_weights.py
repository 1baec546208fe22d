"""``convert`` (megatron_to_hf) weight pass on the CPU: Megatron-Bridge 4588417's real export of a shrunk ``small``
NemotronH with MTP, through a real ``torch_dist`` checkpoint (Megatron-LM c8288b6).

What runs, upstream's code throughout (in the contract interpreter, in a fresh process: see the stand-ins):

1. the ``sft`` translation of bench/gpu_megatron.py's one-GPU SFT of ``small`` (our ``translate`` / ``_recipe`` /
   ``_apply``), with the catalogue's ``small`` HF config shrunk to a few MB (:data:`TINY`: hidden 64, 4 experts,
   vocabulary 512; the same 10 layers ``MEM*EMEM*E`` and MTP block ``*E`` at depth 2), finalized by
   ``runtime_config_update`` as ``finetune()`` does before its first save; its ``to_yaml`` is the checkpoint's
   ``run_config.yaml`` (what ``save_checkpoint`` writes in training), taken before any stand-in is set;
2. Megatron-Bridge's ``temporary_distributed_context("gloo")`` (the single-process gloo group and
   ``initialize_model_parallel`` of its own CPU ``export_ckpt``), then the provider's
   ``provide_distributed_model(use_cpu_initialization=True)``;
3. ``save_megatron_model``: a ``torch_dist`` checkpoint through Megatron-Bridge's ``save_checkpoint``;
4. the export as our ``_convert`` does it: ``export_bridge(bc, ckpt)`` (``AutoBridge.from_auto_config`` of the saved
   ``run_config.yaml``), ``bridge.load_megatron_model(ckpt, mp_overrides=...)`` (every tensor comes back bit for bit),
   ``bridge.save_hf_pretrained(model, out)``: once as upstream is (it stops on the first MTP weight, as on the GPU)
   and once inside ``mtp_export_mappings`` (ours: every weight written);
5. the export read back: the safetensors against the Megatron parameters (values and element counts), and
   transformers' own NemotronH (``AutoModelForCausalLM.from_pretrained``: no missing, unexpected or mismatched key)
   with a forward of the self-check's fixed batch.
6. and ``_convert`` itself (:data:`JOB`), as the job runs it with ``convert.device=cpu`` (Megatron-Bridge's own CPU
   ``export_ckpt``), on a checkpoint made the same way with ``small``'s real vocabulary: exit 0, the weights, the
   tokenizer the checkpoint names, the v4 config rewrite, and the export's self-check passing (logits not compared:
   ``export_ckpt`` keeps no model).

Stand-ins, each only for code with no CPU build:

* Transformer Engine: boot.py's (tests/contract/boot.py), plus three things the TE spec needs it for:
  :func:`local_hybrid_spec` (Megatron-Core's hybrid spec with its own local layers in place of TE's;
  ``mamba_provider.get_default_mamba_stack_spec`` returns it, so the provider ``load_megatron_model`` instantiates
  from ``run_config.yaml`` builds it too); ``HybridStack``'s final norm, which Megatron-Core builds with ``TENorm``
  whatever the spec says (``WrappedTorchNorm`` instead: same arguments, one ``weight``); and :data:`LOCAL_ONLY`.
  Local layers have other parameter names than TE's fused ones; upstream's NemotronH mappings cover them in the
  decoder but not in the MTP block, so :data:`LOCAL_MTP` adds those three beside upstream's registry.
* ``mamba_ssm`` (CUDA/Triton kernels; not installable here): ``MambaMixer`` takes its gated RMSNorm class from
  ``mamba_ssm.ops.triton.layernorm_gated.RMSNorm`` and, without the package, makes it a ``MagicMock`` (its weight
  would be no parameter and vanish from the export). The stand-in is a ``torch.nn.Module`` with that class's
  constructor and its one ``weight`` (mamba-ssm 2.x); its forward and the scan kernels raise.
* CUDA calls of a CPU build of torch ("Torch not compiled with CUDA enabled"): ``torch.cuda.current_device``
  returns ``"cpu"`` (``MambaMixer.__init__`` allocates ``A_log``, ``D``, ``dt_bias`` and the norm there
  unconditionally), ``torch.cuda.get_rng_state`` an empty state (``save_checkpoint`` collects it), and
  ``torch.cuda.synchronize`` does nothing (the ``torch_dist`` writer waits on pending CUDA copies); Megatron-Core's
  inference RNG tracker (``fork()`` a no-op) in place of its CUDA one, so the CPU generator draws the weights.

Where the proof stops: the Megatron forward reaches the first Mamba mixer's fused scan (CUDA/Triton only), so no
logits are compared with :func:`nemotron.runtime.megatron.export_check.compare_logits` (the HF side runs); latent
MoE projections (TE only) and TE's fused parameter names are not exported here: the TE-spec names map through
upstream's own mappings, which tests/contract/test_megatron_bridge_convert.py checks without a model.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upstream as upstream_mod  # noqa: E402
from test_megatron_bridge import BUILD  # noqa: E402
from test_megatron_bridge_convert import _cases  # noqa: E402

pytestmark = pytest.mark.timeout(600)

#: The catalogue's `small` HF config shrunk (tests/runtime/test_export_check.py's sizes), its 10-layer pattern and
#: MTP block kept. No latent MoE projections (``small`` has them): Megatron-Core builds them only with Transformer
#: Engine ("TransformerEngine is required for MoE latent projections."), so their export is not proven here.
TINY = dict(vocab_size=512, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=1, n_routed_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32, intermediate_size=32,
            moe_shared_expert_intermediate_size=32, moe_latent_size=None)

#: Set off on the provider for the local (non-TE) layers: the fused/TE kernels' switches they refuse
#: (``WrappedTorchNorm`` asserts ``not persist_layer_norm``), grouped GEMM (TEGroupedMLP), and the alltoall token
#: dispatcher, whose constructor makes a ``torch.cuda.Stream`` (``allgather``: what Megatron-Bridge's own single-rank
#: ``load_megatron_model`` falls back to; the dispatcher holds no weights).
LOCAL_ONLY = {"persist_layer_norm": False, "moe_grouped_gemm": False, "moe_token_dispatcher_type": "allgather"}

#: HF name -> the Megatron parameter it is exported from (Megatron-Bridge's NemotronH mappings; the MTP block's inner
#: layers are flattened: HF ``mtp.layers.<block * depth + inner>``).
PAIRS = {
    "backbone.embeddings.weight": "embedding.word_embeddings.weight",
    "lm_head.weight": "output_layer.weight",
    "backbone.layers.0.mixer.A_log": "decoder.layers.0.mixer.A_log",
    "backbone.layers.1.mixer.experts.3.down_proj.weight":
        "decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight",
    "mtp.layers.1.norm.weight": "mtp.layers.0.mtp_model_layer.layers.1.pre_mlp_layernorm.weight",
    "mtp.layers.1.mixer.shared_experts.up_proj.weight":
        "mtp.layers.0.mtp_model_layer.layers.1.mlp.shared_experts.linear_fc1.weight",
    "mtp.layers.0.mixer.o_proj.weight": "mtp.layers.0.mtp_model_layer.layers.0.self_attention.linear_proj.weight",
}

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
# Megatron-Bridge's save_checkpoint collects the CUDA generator state for the checkpoint's rng entry (written even
# with save_rng off); a CPU build of torch has no CUDA generator: an empty state stands in
torch.cuda.get_rng_state = lambda *a, **k: torch.empty(0, dtype=torch.uint8)
# the torch_dist writer waits for pending CUDA copies before writing; on a CPU there are none
torch.cuda.synchronize = lambda *a, **k: None
'''

PRELUDE = STANDINS + BUILD + r'''

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


#: The MTP block's parameter names that only the local spec has, and the HF names the NemotronH bridge gives their
#: TE-spec counterparts (mixer.in_proj/linear_qkv ``layer_norm_weight`` -> ``norm.weight``; TEGroupedMLP
#: ``experts.linear_fc*.weight<i>`` -> ``experts.<i>.*_proj``). Upstream maps these local names for the main decoder
#: (``decoder.layers.*.input_layernorm.weight``, ``...local_experts.*.linear_fc*``) but not inside the MTP block: a
#: gap of the local-spec stand-in only (the job builds the TE spec), so they are added beside upstream's registry,
#: at the depth the registry itself is built with (none when the bridge maps no MTP weights).
LOCAL_MTP = {
    "mtp.layers.*.mtp_model_layer.layers.*.input_layernorm.weight": "mtp.layers.*.norm.weight",
    "mtp.layers.*.mtp_model_layer.layers.*.mlp.experts.local_experts.*.linear_fc1.weight":
        "mtp.layers.*.mixer.experts.*.up_proj.weight",
    "mtp.layers.*.mtp_model_layer.layers.*.mlp.experts.local_experts.*.linear_fc2.weight":
        "mtp.layers.*.mixer.experts.*.down_proj.weight",
}


def add_local_mtp_mappings():
    from megatron.bridge.models.conversion.mapping_registry import MegatronMappingRegistry
    from megatron.bridge.models.nemotronh import nemotron_h_bridge as nhb

    upstream_registry = nhb.NemotronHBridge.mapping_registry

    def mapping_registry(self):
        reg = upstream_registry(self)
        depth = int(getattr(self, "_mtp_layers_per_block", None) or 0)
        if depth <= 0:
            return reg
        return MegatronMappingRegistry(*reg.mappings, *(nhb._MTPFlatteningMapping(
            megatron_param=m, hf_param=h, mtp_layers_per_block=depth) for m, h in LOCAL_MTP.items()))

    nhb.NemotronHBridge.mapping_registry = mapping_registry


'''

SCRIPT = PRELUDE + r'''
# the guard: the torch_dist writer starts a 'spawn' multiprocessing manager, which re-imports this script
if __name__ == "__main__":
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
        work.mkdir(parents=True, exist_ok=True)
        container.to_yaml(str(work / "run_config.yaml"))   # what training's save_checkpoint writes, before any stand-in
        # the stand-in for the TE spec (see local_hybrid_spec), for this provider and for the one load_megatron_model
        # instantiates from run_config.yaml (whose mamba_stack_spec names get_default_mamba_stack_spec)
        import megatron.bridge.models.mamba.mamba_provider as mamba_provider
        mamba_provider.get_default_mamba_stack_spec = lambda config: local_hybrid_spec()
        prov.mamba_stack_spec = mamba_provider.get_default_mamba_stack_spec
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
            (it / "run_config.yaml").write_text((work / "run_config.yaml").read_text())   # training's, as saved
            saved = yaml.safe_load((it / "run_config.yaml").read_text())
            res["saved_pattern"] = saved["model"].get("hybrid_layer_pattern")
            del model
            stop = "export_bridge"
            bc = mb.translate(p["convert"], "convert")
            bc = dataclasses.replace(bc, hf_config={**bc.hf_config, **p["tiny"]})
            bridge = mb.export_bridge(bc, str(ckpt), work / "ref")
            stop = "load_megatron_model"
            loaded = bridge.load_megatron_model(str(ckpt), wrap_with_ddp=False,
                                                mp_overrides={**p["local_only"], "pipeline_dtype": torch.bfloat16,
                                                              "params_dtype": torch.bfloat16})
            got = {k: v for k, v in loaded[0].state_dict().items() if isinstance(v, torch.Tensor)
                   and not k.endswith("_extra_state")}
            res["reload_equal"] = (sorted(trained) == sorted(got)
                                   and all(torch.equal(trained[k], got[k]) for k in trained))
            res["reload_keys"] = [len(trained), len(got)]
            add_local_mtp_mappings()
            mbr = bridge._model_bridge   # which Megatron parameters the mapping registry maps, at our MTP depth
            mbr._mtp_layers_per_block = mb.mtp_block_depth(bridge.hf_pretrained)
            reg = mbr.mapping_registry()
            res["unmapped"] = [n for n, _ in loaded[0].named_parameters()
                               if reg.megatron_to_hf_lookup(n.removeprefix("module.")) is None]
            mbr._mtp_layers_per_block = None
            stop = "save_hf_pretrained (upstream)"
            try:
                bridge.save_hf_pretrained(loaded, str(work / "hf-upstream"))
                res["upstream_export"] = "ok"
            except Exception as exc:
                res["upstream_export"] = f"{type(exc).__name__}: {exc}"[:800]
            res["upstream_files"] = sorted(f.name for f in (work / "hf-upstream").glob("*"))
            stop = "save_hf_pretrained (ours)"
            with mb.mtp_export_mappings():
                bridge.save_hf_pretrained(loaded, str(work / "hf"))
            res["files"] = sorted(f.name for f in (work / "hf").glob("*"))
            megatron_sd = {k: v.float() for k, v in got.items()}
            stop = "Megatron forward"
            # the self-check's Megatron forward on its fixed batch: where it stops on a CPU
            from nemotron.runtime.megatron import export_check
            ids = export_check.fixed_batch(p["tiny"]["vocab_size"])
            try:   # export_check.megatron_logits's calls, on the CPU (it moves the batch to the CUDA device)
                from megatron.bridge.utils.common_utils import disable_mtp_for_inference
                disable_mtp_for_inference(loaded[0])
                loaded[0].eval()
                pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
                with torch.no_grad():
                    ref = loaded[0](input_ids=ids, position_ids=pos, attention_mask=None)
                res["megatron_forward"] = {"shape": list(ref.shape)}
            except Exception as exc:
                res["megatron_forward"] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
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
                keys = ("missing_keys", "unexpected_keys", "mismatched_keys")
                res.setdefault("loading_info", {})[who] = {k: sorted(map(str, v)) for k, v in info.items() if k in keys}
                if who == "hf":
                    hsd = hf.state_dict()
                    res["hf_state"] = {k: list(v.shape) for k, v in hsd.items()}
                    res["hf_config"] = hf.config.to_dict()
            except Exception as exc:
                res.setdefault("loading_info", {})[who] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
        hl = export_check.hf_logits(str(work / "hf"), ids)   # the self-check's HF side, on the export
        res["hf_logits"] = {"shape": list(hl.shape), "finite": bool(torch.isfinite(hl).all())}
        # values: exported tensors against the Megatron parameters they come from (the loaded checkpoint's)
        meg = {k.removeprefix("module."): v for k, v in megatron_sd.items()}
        ours = {}
        for f in (work / "hf").glob("*.safetensors"):
            ours.update(load_file(str(f)))
        res["numel"] = {"megatron": sum(v.numel() for k, v in meg.items()),
                        "exported": sum(v.numel() for v in ours.values())}
        res["values"] = {h: (torch.equal(ours[h].float(), meg[m].to(ours[h].dtype).float()) if h in ours and m in meg
                             else f"absent: {h in ours} {m in meg}") for h, m in p["pairs"].items()}
        stop = None
    except Exception as exc:
        res["error"] = f"{stop}: {type(exc).__name__}: {exc}"[:1500]
        res["traceback"] = traceback.format_exc()[-4000:]
    res["stop"] = stop
    write_result(res)
'''


#: ``_convert`` itself (``convert.device=cpu``: Megatron-Bridge's ``export_ckpt``, its own CPU path), on a checkpoint
#: made as in :data:`SCRIPT`, with ``small``'s real vocabulary (the tokenizer the checkpoint names has 131072 entries,
#: which the self-check requires to fit). The checkpoint's ``run_config.yaml`` carries :data:`LOCAL_ONLY`:
#: ``export_ckpt`` gives ``load_megatron_model`` no overrides, and the local layers refuse the saved TE switches.
JOB = PRELUDE + r"""
if __name__ == "__main__":
    p = read_payload()
    res = {}
    work = Path(p["work"])
    work.mkdir(parents=True, exist_ok=True)
    try:
        bc_sft = mb.translate(p["sft"]["cfg"], "sft")
        bc_sft = dataclasses.replace(bc_sft, hf_config={**bc_sft.hf_config, **p["tiny"]})
        hf_path = mb.hf_source(bc_sft, work / "hf-config")
        container = mb._recipe(bc_sft, hf_path)
        mb._apply(container, bc_sft, hf_path)
        from megatron.bridge.training.config import runtime_config_update
        os.environ["WORLD_SIZE"] = "1"
        for key, value in {**p["te_only"], **p["local_only"]}.items():
            setattr(container.model, key, value)
        runtime_config_update(container)
        container.to_yaml(str(work / "run_config.yaml"))
        import megatron.bridge.models.mamba.mamba_provider as mamba_provider
        import megatron.core.models.hybrid.hybrid_block as hybrid_block
        from megatron.core.transformer.torch_norm import WrappedTorchNorm
        mamba_provider.get_default_mamba_stack_spec = lambda config: local_hybrid_spec()
        hybrid_block.TENorm = WrappedTorchNorm
        add_local_mtp_mappings()
        prov = container.model
        prov.mamba_stack_spec = mamba_provider.get_default_mamba_stack_spec
        from megatron.bridge.training.model_load_save import save_megatron_model, temporary_distributed_context
        from megatron.core.tensor_parallel.random import initialize_rng_tracker
        ckpt = Path(p["ckpt"])
        with temporary_distributed_context(backend="gloo"):
            initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
            torch.manual_seed(0)
            save_megatron_model(prov.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True),
                                str(ckpt))
        it = max(d for d in ckpt.iterdir() if d.name.startswith("iter_"))
        (it / "run_config.yaml").write_text((work / "run_config.yaml").read_text())
        bc = mb.translate(p["convert"], "convert")
        bc = dataclasses.replace(bc, hf_config={**bc.hf_config, **p["tiny"]})
        bc.convert["device"] = "cpu"
        import contextlib, io
        log = io.StringIO()
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            res["rc"] = mb._convert(bc)
        res["log"] = log.getvalue()[-3000:]
        out = Path(bc.convert["output_dir"])
        res["files"] = sorted(f.name for f in out.iterdir())
        check = out / "selfcheck.json"
        res["selfcheck"] = json.loads(check.read_text()) if check.is_file() else None
        res["config"] = json.loads((out / "config.json").read_text())
    except Exception as exc:
        import traceback
        res["error"] = f"{type(exc).__name__}: {exc}"[:1500]
        res["traceback"] = traceback.format_exc()[-4000:]
    write_result(res)
"""


def _payload(tmp_path: Path) -> dict:
    case = _cases(tmp_path, one_gpu=True)
    return {**case, "tiny": TINY, "local_only": LOCAL_ONLY, "pairs": PAIRS}   # ckpt: the convert config's source



@pytest.fixture(scope="module")
def export(upstream, module_tmp):
    tmp = module_tmp("cpuexport")
    mp = pytest.MonkeyPatch()
    mp.setattr(upstream_mod, "_FORK", False)   # a fresh interpreter: the mamba_ssm stand-in precedes Megatron-Core
    try:
        return upstream.run(SCRIPT, _payload(tmp), timeout=540)
    finally:
        mp.undo()


def test_the_shrunk_small_model_goes_through_a_real_torch_dist_checkpoint(export):
    assert "error" not in export, export.get("traceback")
    prov = export["provider"]
    assert (prov["hidden_size"], prov["num_layers"], prov["mtp_num_layers"], prov["num_moe_experts"]) == (64, 10, 2, 4)
    # finalize()'s unified pattern, in the checkpoint as training saves it
    assert prov["hybrid_layer_pattern"] == export["saved_pattern"] == "MEM*EMEM*E/*E/*E"
    # load_megatron_model of the torch_dist checkpoint gives back every tensor the built model held, bit for bit
    assert export["reload_equal"] is True and export["reload_keys"][0] == export["reload_keys"][1] > 100
    mtp = [n for n in (k.removeprefix("module.") for k in export["megatron_params"]) if n.startswith("mtp.")]
    assert any(".mtp_model_layer.layers.1.mlp.experts." in n for n in mtp) and any(".eh_proj." in n for n in mtp)


def test_upstreams_export_of_the_mtp_checkpoint_stops_on_the_first_mtp_weight(export):
    """Without :func:`~nemotron.runtime.megatron.megatron_bridge.mtp_export_mappings`: the config-only bridge maps no
    MTP weight and ``stream_weights_megatron_to_hf`` stops as it did on the GPU (docs/gpu_run.md); no weights
    written."""
    assert "'NoneType' object has no attribute 'param_weight'" in export["upstream_export"], export["upstream_export"]
    assert export["upstream_files"] == ["config.json"]
    assert "model.safetensors" in export["loading_info"]["hf-upstream"]["error"]


def test_our_export_writes_every_main_and_mtp_weight_and_transformers_loads_it(export):
    assert "error" not in export, export.get("traceback")
    assert export["unmapped"] == []   # every Megatron parameter has a mapping at our MTP depth
    info = export["loading_info"]["hf"]
    assert info == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": []}, info
    exported, hf_state = export["exported"]["hf"], export["hf_state"]
    # transformers (v5) renames checkpoint keys as it loads (backbone.* -> model.*) and stacks the experts into one
    # tensor per layer; its NemotronH has no MTP module and ignores the mtp.* keys (they are not "unexpected"), so
    # the model it built holds exactly the exported main weights, and the MTP weights are checked in the file
    numel = lambda shapes: sum(math.prod(v) for v in shapes)  # noqa: E731
    main = [v for k, v in exported.items() if not k.startswith("mtp.")]
    assert not any(k.startswith("mtp.") for k in hf_state)
    assert numel(main) == numel(hf_state.values())
    mtp = sorted({".".join(k.split(".")[:3]) for k in exported if k.startswith("mtp.layers.")})
    assert mtp == ["mtp.layers.0", "mtp.layers.1"]   # the MTP block *E flattened: attention, then MoE
    assert any(k.startswith("mtp.layers.1.mixer.experts.3.") for k in exported)
    assert sum(1 for k in exported if k.startswith("backbone.layers.")) > 0
    cfg = export["hf_config"]
    assert cfg["num_nextn_predict_layers"] == 2 and cfg["hidden_size"] == 64
    # nothing dropped, nothing duplicated: as many numbers exported as the Megatron model holds
    assert export["numel"]["exported"] == export["numel"]["megatron"], export["numel"]
    assert export["values"] == {h: True for h in PAIRS}, export["values"]



def test_where_the_logits_comparison_stops_on_a_cpu(export):
    """The self-check's HF side runs on the export (transformers' NemotronH has a torch path); the Megatron side
    (the same calls as ``export_check.megatron_logits``) reaches the first Mamba mixer's fused scan, which exists only
    as CUDA/Triton kernels (``mamba_ssm``): no logits to compare with ``export_check.compare_logits`` here."""
    assert export["hf_logits"] == {"shape": [2, 64, 512], "finite": True}
    assert "mamba_split_conv1d_scan_combined: mamba_ssm stand-in" in export["megatron_forward"]["error"]


@pytest.fixture(scope="module")
def job(upstream, module_tmp):
    tmp = module_tmp("cpuconvert")
    mp = pytest.MonkeyPatch()
    mp.setattr(upstream_mod, "_FORK", False)
    try:
        from nemotron.config import catalogue

        payload = _payload(tmp)
        payload["tiny"] = {**TINY, "vocab_size": catalogue.get("small").vocab_size}
        return upstream.run(JOB, payload, timeout=540)
    finally:
        mp.undo()


def test_the_convert_job_exports_on_the_cpu_and_its_self_check_passes(job):
    """``_convert`` with ``convert.device=cpu`` (Megatron-Bridge's ``export_ckpt``) on the MTP checkpoint: exit 0, the
    weights, the tokenizer the checkpoint names, the v4 config, and the self-check (config against the checkpoint's
    ``run_config.yaml``, the tokenizer; logits not compared: ``export_ckpt`` keeps no model in memory)."""
    assert "error" not in job, (job.get("traceback"), job.get("log"))
    assert job["rc"] == 0, job.get("log")
    assert "model.safetensors" in job["files"] and "tokenizer.json" in job["files"] and "selfcheck.json" in job["files"]
    assert job["config"]["hybrid_override_pattern"] == "MEM*EMEM*E" and job["config"]["num_nextn_predict_layers"] == 2
    check = job["selfcheck"]
    assert check["config"]["passed"] and check["tokenizer"]["passed"], check
    assert check["logits"]["ran"] is False and "export_ckpt" in check["logits"]["reason"]
    assert "self-check passed" in job["log"] and "megatron_to_hf:" in job["log"]
