"""The quantize job's Megatron model (``backend: megatron-bridge`` of ``nemotron ultra3 quantize``) built on the CPU
by upstream's real code: Megatron-Bridge 4588417's ``AutoBridge.from_hf_pretrained`` of an HF folder of the shrunk
``small`` NemotronH with MTP, then the job's own
:func:`~nemotron.runtime.quantization.quantize_cluster.calibration_provider` and
:func:`~nemotron.runtime.quantization.quantize_cluster.calibration_model` (what ``run`` calls), on Megatron-LM
c8288b6's Model Optimizer layers, then Model Optimizer 0.47 itself.

What runs (in the contract interpreter, a fresh process: see the stand-ins):

1. the HF source: the ``small`` HF config shrunk as tests/contract/test_megatron_export_weights.py's ``TINY``
   (layers ``MEM*EMEM*E``, MTP block ``*E``), its main weights drawn by transformers' own NemotronH
   (``from_config`` + ``save_pretrained``), the MTP block's (transformers has no MTP module) drawn at the shapes of
   the main layers of the same kind plus ``eh_proj`` / ``enorm`` / ``hnorm`` / ``final_layernorm``, written as one
   BF16 ``model.safetensors`` with a Nemotron-H export's names;
2. ``calibration_provider(AutoBridge.from_hf_pretrained(source), plan)``, ``plan`` being ``cluster_plan`` of
   ``quantize -c tiny`` for one GPU (source: that folder), inside Megatron-Bridge's
   ``temporary_distributed_context("gloo")``;
3. upstream's ``modelopt_mamba_stack_spec`` in its place: ``provide_distributed_model`` stops with the GPU's
   assertion ("MTP pattern specified but mtp_block_spec is None");
4. our spec with upstream's NemotronH mappings alone: the HF load stops on the MTP block's local parameter names
   (``...layers.0.input_layernorm.weight``, the ``SequentialMLP`` experts), which upstream maps only outside the MTP
   block ("No mapping found", then ``'NoneType' object has no attribute 'megatron_module'``) — found by this test;
5. ``calibration_model`` (our spec and :func:`~nemotron.runtime.quantization.quantize_cluster.modelopt_mtp_mappings`):
   the model builds with the HF weights loaded by the bridge's own pre-wrap hook; every one-to-one mapped Megatron
   parameter (all but the three fused QKV) is compared with the HF file, bit for bit;
6. the switches of the second and third GPU runs (``moe_shared_expert_overlap`` off, ``attention_backend`` fused)
   read back from the built model's config, and Megatron-Core's own check of the first (``MoELayer.preprocess``,
   "...requires the NVLS inference dispatcher" for latent MoE with the overlap on) called on a built MoE layer;
7. Model Optimizer 0.47's ``mtq.quantize`` with the ``ultra`` recipe's ``quant_cfg`` and calibration off
   (``algorithm: None``): the quantizers it inserts and which the recipe enables; then the recipe's own calibration
   algorithm (``mtq.calibrate``, MSE, no forward loop: weights only), which stops on a CPU: its NVFP4 static-block
   fake quantization is a Triton kernel ("static_blockwise_fp4_fake_quant requires triton");
8. ``mtq.quantize`` of a fresh model with the recipe less its NVFP4 entries (its FP8 part: Mamba projections and
   shared experts), MSE algorithm kept, no forward loop: it runs on the CPU, and a fake-quantized weight is compared
   with torch's own E4M3 round trip.

Stand-ins, each only for code with no CPU build:

* Transformer Engine (boot.py's, tests/contract/boot.py) and, for Model Optimizer's spec: ``Norm``
  (``megatron.core.post_training.modelopt.layers``) makes TE's ``te.pytorch.RMSNorm`` with TE's
  ``_get_extra_te_kwargs``: :data:`TE_RMSNORM` is a torch RMSNorm of the same constructor and one ``weight`` and the
  kwargs are TE's ``use_cpu_initialization`` branch (``Norm`` itself, with its state-dict hooks, runs); the spec's
  ``TEDotProductAttention`` (``local_core_attention=False``) is Megatron-Core's local ``DotProductAttention``;
  ``HybridStack``'s final norm (``TENorm`` whatever the spec says) is ``WrappedTorchNorm``; and the switches of TE
  kernels that Megatron-Core refuses without TE (:data:`TE_ONLY`, the export test's ``LOCAL_ONLY``), set on the
  bridge's provider before ``calibration_provider`` finalizes it.
* ``mamba_ssm`` and the CUDA calls of a CPU build of torch: the export test's ``STANDINS``
  (tests/contract/test_megatron_export_weights.py).

Where the proof stops: no forward pass (the Mamba mixer's fused scan is CUDA/Triton only), so no calibration, no
``megatron_generate`` and no export; latent MoE projections are TE-only in Megatron-Core ("TransformerEngine is
required for MoE latent projections"), so the NVLS check runs on a MoE layer of this model with ``moe_latent_size``
set on a copy of its config, not on a built latent layer; cuDNN's fused attention is TE's and is not built (only
the config value is checked), and so the recipe's ``*[kv]_bmm_quantizer`` (Model Optimizer puts them on TE's
attention) are not inserted here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upstream as upstream_mod  # noqa: E402
from test_megatron_bridge_convert import _cases  # noqa: E402
from test_megatron_export_weights import LOCAL_ONLY, STANDINS, TINY  # noqa: E402
from test_megatron_bridge import BUILD  # noqa: E402

pytestmark = pytest.mark.timeout(600)

#: Switches of Transformer Engine kernels that Megatron-Core's config check refuses without TE ("apply_rope_fusion is
#: not available. Please install TE >= 1.4."), set off on the bridge's provider before ``calibration_provider``
#: finalizes it, beside the export test's :data:`LOCAL_ONLY`.
TE_ONLY = {"apply_rope_fusion": False}

#: Stand-in for Transformer Engine's ``te.pytorch.RMSNorm``, which Model Optimizer's ``Norm`` builds: the same
#: constructor (hidden_size, eps, sequence_parallel, zero_centered_gamma, params_dtype/device), one ``weight``.
TE_RMSNORM = r'''
class _TERMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-5, sequence_parallel=False, zero_centered_gamma=False,
                 params_dtype=None, device=None, **_):
        super().__init__()
        self.eps, self.zero_centered_gamma = eps, zero_centered_gamma
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=params_dtype or torch.float32,
                                                    device="cpu" if device in (None, "cuda") else device))

    def forward(self, x):
        w = self.weight + 1 if self.zero_centered_gamma else self.weight
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, self.eps)
'''

SCRIPT = STANDINS + BUILD + TE_RMSNORM + r'''
import copy, dataclasses, logging, traceback, types
import torch
from upstream import read_payload, write_result


def hf_source(p, work):
    """The shrunk small model as an HF folder (config.json + one BF16 model.safetensors, Nemotron-H names)."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM
    bc = mb.translate(p["sft"]["cfg"], "sft")
    bc = dataclasses.replace(bc, hf_config={**bc.hf_config, **p["tiny"]})
    folder = Path(mb.hf_source(bc, work / "hf"))
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)))
    hf.save_pretrained(str(work / "transformers"))   # its checkpoint names (backbone.*, one tensor per expert)
    from safetensors.torch import load_file
    # transformers writes backbone.embedding.weight, Megatron-Bridge's NemotronH mapping (and our exports) say
    # backbone.embeddings.weight (transformers loads either)
    sd = {k.replace("backbone.embedding.", "backbone.embeddings."): v.to(torch.bfloat16).contiguous()
          for k, v in load_file(str(work / "transformers" / "model.safetensors")).items()}
    cfg = bc.hf_config
    main, block = cfg["hybrid_override_pattern"], cfg["mtp_hybrid_override_pattern"]
    h = cfg["hidden_size"]
    g = torch.Generator().manual_seed(1)
    rand = lambda shape: (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)  # noqa: E731
    for outer in range(cfg["num_nextn_predict_layers"]):
        for inner, kind in enumerate(block):   # an MTP layer has the tensors of a main layer of its kind
            src = f"backbone.layers.{main.index(kind)}."
            flat = f"mtp.layers.{outer * len(block) + inner}."
            for k, v in list(sd.items()):
                if k.startswith(src):
                    sd[flat + k[len(src):]] = rand(v.shape)
        first, last = f"mtp.layers.{outer * len(block)}.", f"mtp.layers.{outer * len(block) + len(block) - 1}."
        sd[first + "eh_proj.weight"] = rand((h, 2 * h))
        sd[first + "enorm.weight"] = 1 + rand((h,))
        sd[first + "hnorm.weight"] = 1 + rand((h,))
        sd[last + "final_layernorm.weight"] = 1 + rand((h,))
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return str(folder), sd


def cpu_stand_ins():
    """The TE stand-ins of the module docstring (Model Optimizer's Norm, its spec's TEDotProductAttention,
    HybridStack's final TENorm)."""
    import megatron.core.models.hybrid.hybrid_block as hybrid_block
    import megatron.core.post_training.modelopt.hybrid.model_specs as model_specs
    import megatron.core.post_training.modelopt.layers as modelopt_layers
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    modelopt_layers.HAVE_TE = True
    modelopt_layers.te = types.SimpleNamespace(pytorch=types.SimpleNamespace(RMSNorm=_TERMSNorm))
    # TE's own helper (transformer_engine.py _get_extra_te_kwargs), at its use_cpu_initialization branch
    modelopt_layers._get_extra_te_kwargs = lambda config: {"params_dtype": config.params_dtype, "device": "cpu"}
    model_specs.TEDotProductAttention = DotProductAttention
    hybrid_block.TENorm = WrappedTorchNorm


def build(provider):
    from megatron.core.tensor_parallel.random import initialize_rng_tracker
    initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    torch.manual_seed(0)
    return provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)


class _PastTheCheck(Exception):
    pass


class _Warnings(logging.Handler):
    """The bridge's load warnings ("No mapping found for megatron_param", "Can't find ... in hf_keys")."""
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage()[:300])


if __name__ == "__main__":
    p = read_payload()
    res = {}
    warned = _Warnings()
    logging.getLogger("megatron.bridge").addHandler(warned)
    work = Path(p["work"])
    work.mkdir(parents=True, exist_ok=True)
    stop = None
    try:
        stop = "hf source"
        source, hf_sd = hf_source(p, work)
        res["hf_keys"] = len(hf_sd)
        cpu_stand_ins()
        from megatron.bridge import AutoBridge
        from megatron.bridge.models.mamba.mamba_provider import modelopt_mamba_stack_spec
        from megatron.bridge.training.model_load_save import temporary_distributed_context
        from megatron.core.transformer.enums import AttnBackend
        from nemotron.runtime.quantization import quantize_cluster as qc
        from nemotron.runtime.quantization.quant_config import cluster_plan
        plan = cluster_plan(p["quantize_cfg"], 1)   # here: the recipe's block_sizes keys are ints (-1), as in the job
        assert plan["source"] == source, (plan["source"], source)
        with temporary_distributed_context(backend="gloo"):
            stop = "calibration_provider"
            bridge = AutoBridge.from_hf_pretrained(source)
            to_megatron_provider = bridge.to_megatron_provider

            def local_provider(*args, **kwargs):   # the TE-only switches off before calibration_provider's finalize()
                prov = to_megatron_provider(*args, **kwargs)
                for key, value in p["local_only"].items():
                    setattr(prov, key, value)
                return prov

            bridge.to_megatron_provider = local_provider
            provider = qc.calibration_provider(bridge, plan)
            res["provider"] = {"spec": f"{provider.mamba_stack_spec.__module__}.{provider.mamba_stack_spec.__name__}",
                               "pattern": provider.hybrid_layer_pattern, "mtp_num_layers": provider.mtp_num_layers,
                               "moe_shared_expert_overlap": provider.moe_shared_expert_overlap,
                               "attention_backend": str(provider.attention_backend),
                               "pipeline_dtype": str(provider.pipeline_dtype)}
            stop = "upstream spec"
            upstream_provider = copy.copy(provider)
            upstream_provider.mamba_stack_spec = modelopt_mamba_stack_spec
            try:
                build(upstream_provider)
                res["upstream_spec"] = "built"
            except BaseException as exc:
                res["upstream_spec"] = f"{type(exc).__name__}: {exc}"[:800]
            stop = "our spec, upstream's mappings"
            try:
                build(copy.copy(provider))
                res["upstream_mappings"] = "built"
            except BaseException as exc:
                res["upstream_mappings"] = f"{type(exc).__name__}: {exc}"[:800]
            res["upstream_mappings_warnings"] = [w for w in warned.lines if "No mapping found" in w]
            stop = "our spec"
            from megatron.core.tensor_parallel.random import initialize_rng_tracker
            initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
            torch.manual_seed(0)
            model = qc.calibration_model(provider, use_cpu_initialization=True)   # the job's own call
            inner = model[0]
            while hasattr(inner, "module"):
                inner = inner.module
            params = dict(inner.named_parameters())
            res["types"] = {n: f"{type(m).__module__}.{type(m).__name__}" for n, m in inner.named_modules()
                            if n.startswith("mtp.layers.0.") and n.count(".") <= 3}
            cfg = inner.config
            res["config"] = {"moe_shared_expert_overlap": cfg.moe_shared_expert_overlap,
                             "attention_backend": str(cfg.attention_backend),
                             "fused": str(AttnBackend.fused)}
            stop = "weights"
            mbr = bridge._model_bridge   # a new NemotronHBridge: the MTP depth as build_conversion_tasks sets it
            mbr._mtp_layers_per_block = qc_depth = mb.mtp_block_depth(bridge.hf_pretrained)
            with qc.modelopt_mtp_mappings():
                reg = mbr.mapping_registry()
            equal, differ, unmapped, other = [], [], [], []
            for name, t in params.items():
                m = reg.megatron_to_hf_lookup(name)
                if m is None:
                    unmapped.append(name)
                elif isinstance(m.hf_param, str) and m.hf_param in hf_sd:
                    (equal if torch.equal(t.detach().to(torch.bfloat16), hf_sd[m.hf_param]) else differ).append(
                        [name, m.hf_param])
                else:
                    other.append(name)
            res["weights"] = {"equal": equal, "differ": differ, "unmapped": unmapped, "other": other,
                              "mtp_depth": qc_depth, "params": len(params)}
            stop = "NVLS check"
            moe = next(mod for n, mod in inner.named_modules() if type(mod).__name__ == "MoELayer")
            hs = torch.zeros(4, 1, cfg.hidden_size, dtype=torch.bfloat16)
            probs = torch.zeros(4, cfg.num_moe_experts)
            routing_map = torch.zeros(4, cfg.num_moe_experts, dtype=torch.bool)

            def nvls_check(overlap):
                layer = copy.copy(moe)
                layer.config = copy.copy(moe.config)
                layer.config.moe_latent_size = 16       # what Ultra has (TE-only layers: not built on a CPU)
                layer.config.moe_shared_expert_overlap = overlap
                layer.shared_expert_overlap = overlap
                def past(x):   # the next step of preprocess after the check: the latent projection
                    raise _PastTheCheck("past the check")

                layer.fc1_latent_proj = past
                try:
                    layer.preprocess(hs, probs, routing_map)
                    return "returned"
                except _PastTheCheck as exc:
                    return str(exc)
                except BaseException as exc:
                    return f"{type(exc).__name__}: {exc}"[:400]

            moe.eval()
            res["shared_expert_overlap_attr"] = moe.shared_expert_overlap
            res["nvls"] = {"ours": nvls_check(provider.moe_shared_expert_overlap), "overlap_on": nvls_check(True)}
            stop = "mtq.quantize"
            import modelopt
            import modelopt.torch.quantization as mtq
            res["modelopt"] = modelopt.__version__
            # the recipe's quantizers without calibration (algorithm None): what Model Optimizer inserts in this model
            mtq.quantize(inner, {**plan["modelopt_config"], "algorithm": None}, None)
            quantizers = {n: bool(mod.is_enabled) for n, mod in inner.named_modules()
                          if type(mod).__name__ == "TensorQuantizer"}
            res["quantizers"] = quantizers
            res["quantized_types"] = sorted({type(mod).__name__ for n, mod in inner.named_modules()
                                             if any(q.startswith(n + ".") and q.count(".") == n.count(".") + 1
                                                    for q in quantizers)})
            try:   # then the recipe's own calibration algorithm, as mtq.quantize runs it, with no forward loop
                mtq.calibrate(inner, plan["modelopt_config"]["algorithm"], None)
                res["recipe_calibration"] = "ran"
            except BaseException as exc:
                res["recipe_calibration"] = f"{type(exc).__name__}: {exc}"[:400]
            stop = "mtq.quantize (the recipe's FP8 part)"
            # the recipe without its NVFP4 entries (num_bits (2, 1): Triton only), its MSE algorithm kept, on a fresh
            # model: the calibration of the weights runs on a CPU (no forward loop)
            recipe = plan["modelopt_config"]
            fp8_only = {**recipe, "quant_cfg": [e for e in recipe["quant_cfg"]
                                                if list((e.get("cfg") or {}).get("num_bits", [])) != [2, 1]]}
            initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
            torch.manual_seed(0)
            fresh = qc.calibration_model(provider, use_cpu_initialization=True)[0]
            mtq.quantize(fresh, fp8_only, None)
            lin = fresh.decoder.layers[1].mlp.shared_experts.linear_fc1
            w, wq = lin.weight.detach().float(), lin.weight_quantizer
            amax = float(wq.amax)
            out = wq(lin.weight.detach()).float()
            e4m3 = (w * (448.0 / amax)).to(torch.float8_e4m3fn).float() * (amax / 448.0)   # E4M3's largest: 448
            res["fp8"] = {"enabled": sorted(n for n, mod in fresh.named_modules()
                                            if type(mod).__name__ == "TensorQuantizer" and mod.is_enabled),
                          "amax": amax, "weight_absmax": float(w.abs().max()),
                          "changed": float((out - w).abs().max()), "vs_e4m3": float((out - e4m3).abs().max())}
        stop = None
    except BaseException as exc:
        res["error"] = f"{stop}: {type(exc).__name__}: {exc}"[:1500]
        res["traceback"] = traceback.format_exc()[-4000:]
    res["stop"] = stop
    res["warnings"] = warned.lines
    write_result(res)
'''


def _quantize_cfg(source: str) -> dict:
    """``nemotron ultra3 quantize -c tiny`` for one GPU, compiled and prepared by the project's own code (the script
    translates it with ``cluster_plan`` at world size 1, as the job's entry does)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from quantize_support import compile_quantize

    return compile_quantize([f"quantization.source={source}", "run.env.gpus_per_node=1"], "tiny")


@pytest.fixture(scope="module")
def built(upstream, module_tmp):
    tmp = module_tmp("quantize-model")
    mp = pytest.MonkeyPatch()
    mp.setattr(upstream_mod, "_FORK", False)   # a fresh interpreter: the mamba_ssm stand-in precedes Megatron-Core
    try:
        case = _cases(tmp, one_gpu=True)
        payload = {"sft": case["sft"], "work": str(tmp / "work"), "tiny": TINY, "local_only": {**LOCAL_ONLY, **TE_ONLY},
                   "quantize_cfg": _quantize_cfg(str(tmp / "work" / "hf"))}
        return upstream.run(SCRIPT, payload, timeout=540)
    finally:
        mp.undo()


def test_upstreams_modelopt_spec_stops_on_an_mtp_model_with_the_gpus_assertion(built):
    """Megatron-Bridge's ``modelopt_mamba_stack_spec`` (Megatron-Core's local hybrid spec) has no MTP block; the
    provider (finalized by ``calibration_provider``, its pattern with the MTP part) asserts one, as on the GPU."""
    assert "error" not in built, built.get("traceback")
    assert built["provider"]["pattern"] == "MEM*EMEM*E/*E" and built["provider"]["mtp_num_layers"] == 1
    assert built["upstream_spec"].startswith("AssertionError: MTP pattern specified but mtp_block_spec is None")


def test_the_job_builds_modelopts_spec_with_a_local_mtp_block(built):
    """``calibration_provider`` sets our ``modelopt_stack_spec``; the built MTP layer's projection is Megatron-Core's
    own ``ColumnParallelLinear`` (where Model Optimizer inserts quantizers), not a TE layer, and its norms are Model
    Optimizer's ``Norm`` (here making the TE RMSNorm stand-in)."""
    assert "error" not in built, built.get("traceback")
    assert built["provider"]["spec"] == "nemotron.runtime.quantization.quantize_cluster.modelopt_stack_spec"
    types = built["types"]
    assert types["mtp.layers.0.eh_proj"] == "megatron.core.tensor_parallel.layers.ColumnParallelLinear"
    assert types["mtp.layers.0.enorm"] == types["mtp.layers.0.hnorm"] == types["mtp.layers.0.final_layernorm"] == (
        "__main__._TERMSNorm")
    assert types["mtp.layers.0.mtp_model_layer"] == "megatron.core.models.hybrid.hybrid_block.HybridStack"


def test_upstreams_mappings_stop_the_load_on_the_local_mtp_names(built):
    """Without :func:`~nemotron.runtime.quantization.quantize_cluster.modelopt_mtp_mappings` the NemotronH bridge has
    no mapping for the MTP block's local parameters, and its HF load stops on the first unmapped task."""
    assert built["upstream_mappings"] == "AttributeError: 'NoneType' object has no attribute 'megatron_module'"
    unmapped = {w.rsplit(": ", 1)[1] for w in built["upstream_mappings_warnings"]}
    assert "mtp.layers.0.mtp_model_layer.layers.0.input_layernorm.weight" in unmapped
    assert "mtp.layers.0.mtp_model_layer.layers.1.mlp.experts.local_experts.3.linear_fc2.weight" in unmapped
    assert all(n.startswith("mtp.") for n in unmapped) and len(unmapped) == 1 + 2 * TINY["n_routed_experts"]


def test_every_weight_main_and_mtp_is_loaded_from_the_hf_file(built):
    """Every Megatron parameter has a mapping (with ours), and each one-to-one mapped parameter equals its HF tensor
    (BF16, bit for bit): the MTP block's eh_proj, norms, attention and experts included. The fused QKV (one Megatron
    tensor from three HF ones) is not compared here."""
    assert "error" not in built, built.get("traceback")
    w = built["weights"]
    assert w["unmapped"] == [] and w["differ"] == [] and w["mtp_depth"] == 2
    assert sorted(w["other"]) == ["decoder.layers.3.self_attention.linear_qkv.weight",
                                  "decoder.layers.8.self_attention.linear_qkv.weight",
                                  "mtp.layers.0.mtp_model_layer.layers.0.self_attention.linear_qkv.weight"]
    assert len(w["equal"]) + len(w["other"]) == w["params"]
    equal = dict(w["equal"])
    assert equal["mtp.layers.0.eh_proj.weight"] == "mtp.layers.0.eh_proj.weight"
    assert equal["mtp.layers.0.final_layernorm.weight"] == "mtp.layers.1.final_layernorm.weight"
    assert equal["mtp.layers.0.mtp_model_layer.layers.0.input_layernorm.weight"] == "mtp.layers.0.norm.weight"
    assert equal["mtp.layers.0.mtp_model_layer.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"] == (
        "mtp.layers.1.mixer.experts.3.up_proj.weight")
    assert sum(1 for n in equal if n.startswith("mtp.")) == 18


def test_calibration_runs_without_shared_expert_overlap_and_with_fused_attention(built):
    """The switches of the second and third GPU runs, on the built model's config; and Megatron-Core's own check
    (``MoELayer.preprocess``) with latent MoE: the overlap on raises the GPU's assertion, ours gets past it."""
    assert "error" not in built, built.get("traceback")
    assert built["config"]["moe_shared_expert_overlap"] is False and built["shared_expert_overlap_attr"] is False
    assert built["config"]["attention_backend"] == built["config"]["fused"] == "AttnBackend.fused"
    assert built["nvls"]["overlap_on"].startswith("AssertionError: Shared expert overlap with MoE latent projections "
                                                  "requires the NVLS inference dispatcher")
    assert built["nvls"]["ours"] == "past the check"


def test_model_optimizer_inserts_the_recipes_quantizers_and_stops_at_calibration_on_a_cpu(built):
    """Model Optimizer 0.47's ``mtq.quantize`` with the ``ultra`` recipe's ``quant_cfg`` (calibration off): the
    quantized module types are Megatron-Core's local ones, the recipe's patterns enable the Mamba projections' and the
    experts' quantizers, and every MTP quantizer stays off (the recipe's ``*mtp*``). The recipe's MSE calibration
    itself fake-quantizes NVFP4 blocks with a Triton kernel (no CPU path)."""
    assert "error" not in built, built.get("traceback")
    assert built["modelopt"] == "0.47.0"
    assert built["quantized_types"] == ["QuantColumnParallelLinear", "QuantConv1d", "QuantRowParallelLinear"]
    q = built["quantizers"]
    on = {n for n, e in q.items() if e}
    assert "decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.weight_quantizer" in on
    assert "decoder.layers.1.mlp.shared_experts.linear_fc2.input_quantizer" in on
    assert "decoder.layers.0.mixer.in_proj.weight_quantizer" in on
    mtp = [n for n in q if n.startswith("mtp.")]
    assert "mtp.layers.0.eh_proj.weight_quantizer" in mtp and not any(q[n] for n in mtp)
    assert not any(".output_quantizer" in n for n in on)
    assert not any("bmm_quantizer" in n for n in q)   # Model Optimizer puts them on TE's attention (not built here)
    assert "requires triton" in built["recipe_calibration"], built["recipe_calibration"]


def test_the_recipes_fp8_part_calibrates_and_fake_quantizes_on_a_cpu(built):
    """The ``ultra`` recipe without its NVFP4 entries (the experts'), its MSE algorithm kept, through ``mtq.quantize``
    on a fresh model with no forward loop (weights only): the FP8 quantizers of the Mamba projections and shared
    experts are on (and nothing else), the MSE search picks an amax among the recipe's multipliers of the weight's
    absolute maximum (``start_multiplier`` 1.0 to ``stop_multiplier`` 1.5 by ``step_size`` 0.5), and the fake-quantized
    weight is exactly torch's own E4M3 round trip at that scale (448: E4M3's largest finite value)."""
    assert "error" not in built, built.get("traceback")
    fp8 = built["fp8"]
    kinds = {n.split(".", 3)[3] for n in fp8["enabled"]}
    assert kinds == {f"{m}.{q}_quantizer" for m in ("mixer.in_proj", "mixer.out_proj", "mlp.shared_experts.linear_fc1",
                                                     "mlp.shared_experts.linear_fc2") for q in ("input", "weight")}
    assert all(n.startswith("decoder.") for n in fp8["enabled"])
    assert any(abs(fp8["amax"] - m * fp8["weight_absmax"]) < 1e-6 for m in (1.0, 1.5)), fp8
    assert fp8["changed"] > 0 and fp8["vs_e4m3"] == 0.0, fp8
