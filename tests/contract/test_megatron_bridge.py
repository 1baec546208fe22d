"""Contract: every shipped Megatron-Bridge config of pretrain and SFT, as the job hands it to Megatron-Bridge
(branch ``nemotron_3_ultra`` at 4588417, with Megatron-LM c8288b6), checked by Megatron-Bridge's own code.

The configs are compiled by the project's config compiler and prepared and validated as ``--dry-run`` does it
(:func:`nemotron.validation.prepare` / :func:`nemotron.validation.validate`, no profile: an 8-GPU node), with the
artifact placeholders (``${art:...}``) replaced by real-shaped inputs: a blend.json over real ``.bin/.idx`` shards,
packed Parquet files, existing checkpoint folders. ``-c local`` is not here: it runs the transformers backend
(``nemotron.runtime.megatron.trainer``), not Megatron.

In one contract subprocess, per config, the job's own code paths run on the real upstream objects:

* :func:`nemotron.runtime.megatron.megatron_bridge.translate`, then
  :func:`~nemotron.runtime.megatron.megatron_bridge.hf_source`, ``_recipe`` and ``_apply`` — the calls ``main`` makes:
  the real recipe builder (``recipes/nemotronh/ nemotron_3_ultra.py``) with ``hf_path`` and ``seq_length``, AutoBridge's
  real HF-config conversion into a ``MambaModelProvider``, our values set on the real ``ConfigContainer``, the real
  ``FinetuningDatasetConfig`` / ``PackedSequenceSpecs`` / mixed-precision preset; then our MoE routing check on the
  provider.
* ``runtime_config_update`` — the first thing ``pretrain()`` does (``finetune()`` checks for a starting checkpoint,
  then calls ``pretrain()``): the mixed-precision preset applied to the model, optimizer and DDP configs, the
  data-parallel size, the comm-overlap setup, then ``ConfigContainer.validate()``. With ``WORLD_SIZE`` = nodes x
  GPUs per node, the environment torchrun gives the job, Megatron-Bridge reads the world size from it when
  torch.distributed is not initialised (``megatron.core._rank_utils.safe_get_world_size``), so all of this runs on
  the CPU: every sub-config's ``finalize()`` (Megatron-Core's deferred ``__post_init__`` checks of the model,
  optimizer, DDP, dataset), batch divisibility, the scheduler steps, the checkpoint checks, the precision
  consistency of model and optimizer, the packed-sequence and context-parallel rules, the sequence lengths.

Inputs that are not the job's: the full model's HF ``config.json`` is our catalogue's Ultra entry written to a
local folder (``recipe.hf_model_id`` = that folder, the form offline clusters use; the hub is not reachable here,
and HF_HUB_OFFLINE=1 proves the slice configs never need it: their ``recipe.hf_model_id`` stays the hub id).
Transformer-Engine-only switches are turned off, and only they: ``model.moe_permute_fusion`` (the recipe's True),
whose check in ``TransformerConfig.__post_init__`` asks for TE's fused permutation kernels (TE >= 2.1), absent on a
CPU; and for the NVFP4 configs (``pretrain -c default``, ``-c long_context``: ``bf16_with_nvfp4_mixed``), after
``MixedPrecisionConfig.finalize()`` refused them for the TE version alone (``fp4 requires Transformer Engine >=
2.7.0.dev0``; asserted), the preset's ``fp4`` / ``fp4_param_gather``, so that the rest runs — Megatron-Core's FP4
checks on the model (``fp4_param`` with ``fp4``, FP4 with FP8) then do not run for them. Every other field is the
job's. Besides boot.py's TE stand-in nothing is stood in for.

Where the proof stops: no process group, no model (``provide()``: the Mamba/TE layers need CUDA), no training
step; TE-version checks (with real TE only); the GPU-architecture check of the flex dispatcher
(``validate_flex_dispatcher_backend``) is skipped by upstream itself (``moe_token_dispatcher_type`` is alltoall).
Megatron-Core's own ``TransformerConfig`` checks are also run alone in ``test_megatron_core.py``.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from gpu_megatron import ONE_GPU, ONE_GPU_SFT  # noqa: E402  (the configs of the one-GPU runs, checked here in CI)

pytestmark = pytest.mark.timeout(900)

#: Every shipped Megatron-Bridge config of the training stages (``-c local`` is the transformers backend).
SHIPPED = [("pretrain", "default"), ("pretrain", "tiny"), ("pretrain", "long_context"), ("sft", "default"),
           ("sft", "tiny")]
#: Variants for the parity tests: (stage, config, overrides).
VARIANTS = {
    "sft-tiny-mbs2": ("sft", "tiny", ["train.micro_batch_size=2"]),          # packed SFT, micro batch 2
    "pretrain-tiny-tp2": ("pretrain", "tiny", ["model.tensor_model_parallel_size=2"]),   # the slice kept at TP 2
    "pretrain-tiny-1gpu": ("pretrain", "tiny", list(ONE_GPU)),   # bench/gpu_megatron.py's one-GPU run
    "sft-tiny-1gpu": ("sft", "tiny", list(ONE_GPU_SFT)),         # ... and its --stage sft run
}
#: Fields set off before validate() because their check needs Transformer Engine itself (see the docstring).
TE_ONLY = {"moe_permute_fusion": False}
#: The NVFP4 preset's FP4 switches, set off only after ``MixedPrecisionConfig.finalize()`` refused them for the TE
#: version alone (``fp4 requires Transformer Engine >= 2.7.0.dev0``), to run the rest of the checks.
TE_ONLY_FP4 = {"fp4": None, "fp4_param_gather": False}


def keylist_path() -> Path:
    from nemotron.config.images import keylist_version

    return REPO / "src" / "nemotron" / "keylists" / f"megatron-bridge-{keylist_version('nemo', 'megatron_bridge')}.json"


def inputs(root: Path) -> dict[str, str]:
    """Real-shaped stand-ins for the artifacts the configs name: blend.json files over real shards, packed Parquet
    and its metadata, checkpoint folders, and a local HF folder holding the catalogue's Ultra ``config.json``."""
    from local_runtime_support import pack, write_packed_parquet, write_pretrain_data
    from nemotron.config import catalogue

    out = {"blend": str(write_pretrain_data(root / "data")), "phase2": str(write_pretrain_data(root / "phase2"))}
    sft = root / "sft"
    out["train"] = str(write_packed_parquet(sft / "training.idx.parquet", [pack([([1, 2], [3, 4])])]))
    out["valid"] = str(write_packed_parquet(sft / "validation.idx.parquet", [pack([([1, 2], [3, 4])])]))
    (sft / "metadata.json").write_text("[]")
    out["sft"], out["meta"] = str(sft), str(sft / "metadata.json")
    for name in ("pretrained", "ultra-hf"):
        (root / name).mkdir(parents=True, exist_ok=True)
    out["pretrained"] = str(root / "pretrained")
    (root / "ultra-hf" / "config.json").write_text(json.dumps(catalogue.hf_config(catalogue.get("ultra"))))
    out["ultra_hf"] = str(root / "ultra-hf")
    return out


def compile_shipped(stage: str, name: str, root: Path, files: dict[str, str],
                    extra: list[str] | None = None) -> dict[str, Any]:
    """``nemotron ultra3 <stage> -c <name> [extra] --dry-run`` without a profile, its artifacts given as
    ``files``: ``{"cfg": the prepared config the job gets, "errors": the dry-run's errors (rule, key, line),
    "world": nodes x GPUs per node, "notes": the preparation's notes}``."""
    from nemotron.config import catalogue
    from nemotron import validation
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage
    from nemotron.layout.views import node_shape

    over = [f"checkpoint.save={root / f'ckpt-{stage}-{name}'}"]
    if stage == "pretrain":
        over.append(f"data.per_split_data_args_path={files['blend']}")
        if name == "long_context":
            over += [f"data.mix_with=[{{blend: {files['phase2']}, share: 0.54}}]",
                     f"checkpoint.pretrained_checkpoint={files['pretrained']}"]
    else:
        specs = "dataset.packed_sequence_specs"
        over += [f"dataset.dataset_root={files['sft']}", f"{specs}.packed_train_data_path={files['train']}",
                 f"{specs}.packed_val_data_path={files['valid']}", f"{specs}.packed_metadata_path={files['meta']}",
                 f"checkpoint.pretrained_checkpoint={files['pretrained']}"]
    st = get_stage(stage)
    compiled = compile_config(st, name, [*over, *(extra or [])])
    if not catalogue.get(compiled.config["model"]["name"]).is_slice:  # the full model: its HF config, local
        compiled = compile_config(st, name, [*over, f"recipe.hf_model_id={files['ultra_hf']}", *(extra or [])])
    cfg = compiled.config
    notes = validation.prepare(st, cfg, compiled.user_keys, None)
    problems = validation.validate(st, cfg, None)
    errors = [(p.rule, p.key, f"{p.key}={p.value!r}: {p.message}") for p in problems if p.severity == "error"]
    env = cfg["run"]["env"]
    world = int(env["nodes"]) * node_shape(cfg, None).gpus_per_node
    return {"cfg": cfg, "errors": errors, "world": world, "notes": notes}


# --------------------------------------------------------------------------------------------- upstream side
BUILD = r'''
import json, os
from pathlib import Path
from nemotron.data.blend import training_blend
from nemotron.runtime.megatron import megatron_bridge as mb
from nemotron.runtime.megatron.pretrain_data import read_blend


def build(case):
    """What main() does up to pretrain()/finetune(): translate, the slice's config folder, recipe, our values."""
    cfg, stage = case["cfg"], case["stage"]
    blend = read_blend(training_blend(cfg, cfg["checkpoint"]["save"])) if stage == "pretrain" else None
    bc = mb.translate(cfg, stage, blend=blend)
    hf_path = mb.hf_source(bc, Path(case["work"]) / "hf-config")
    container = mb._recipe(bc, hf_path)
    mb._apply(container, bc, hf_path)
    return bc, hf_path, container


def provider_facts(m):
    keys = ("num_layers", "hybrid_layer_pattern", "mtp_hybrid_override_pattern", "mtp_num_layers",
            "mtp_use_repeated_layer", "tensor_model_parallel_size", "pipeline_model_parallel_size",
            "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
            "seq_length", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels", "num_moe_experts",
            "moe_router_topk", "moe_ffn_hidden_size", "moe_latent_size", "moe_shared_expert_intermediate_size",
            "mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups", "vocab_size",
            "recompute_granularity", "mtp_loss_scaling_factor", "use_mamba_mem_eff_path")
    return {"type": type(m).__name__, **{k: getattr(m, k, None) for k in keys}}
'''

SCRIPT = BUILD + r'''
import dataclasses, importlib, inspect, traceback
from upstream import read_payload, write_result
from nemotron.config import catalogue
from nemotron.runtime.megatron.routing import check_routing
from megatron.bridge.training.config import runtime_config_update

payload = read_payload()
out = {}
containers = {}
for cid, case in payload["cases"].items():
    rec = out[cid] = {}
    try:
        bc, hf_path, c = build(case)
    except Exception as exc:
        rec["build_error"] = f"{type(exc).__name__}: {exc}"[:3000]
        rec["build_trace"] = traceback.format_exc()[-3000:]
        continue
    containers[cid] = c
    m = c.model
    rec["hf_path"] = hf_path
    rec["hf_config_written"] = (Path(hf_path) / "config.json").is_file()
    rec["provider"] = provider_facts(m)
    rec["routing"] = check_routing(m, catalogue.get(bc.model_name))
    rec["dataset_type"] = type(c.dataset).__name__
    rec["packed"] = (dataclasses.asdict(c.dataset.packed_sequence_specs)
                     if getattr(c.dataset, "packed_sequence_specs", None) is not None else None)
    rec["micro_batch_size"] = c.train.micro_batch_size
    os.environ["WORLD_SIZE"] = str(case["world"])
    for key, value in payload["te_only"].items():
        setattr(m, key, value)
    try:
        if case["stage"] == "sft":  # finetune()'s own check before it calls pretrain()
            assert c.checkpoint.pretrained_checkpoint is not None or c.checkpoint.load is not None
        try:  # what pretrain() runs first: mixed precision, DP size, comm overlap, validate()
            runtime_config_update(c)
        except ValueError as exc:  # an NVFP4 preset: MixedPrecisionConfig.finalize() asks for TE >= 2.7 first
            if "requires Transformer Engine" not in str(exc) or not getattr(c.mixed_precision, "fp4", None):
                raise
            rec["te_stop"] = str(exc)
            for key, value in payload["te_only_fp4"].items():
                setattr(c.mixed_precision, key, value)
            runtime_config_update(c)
        rec["validate"] = {"ok": True, "data_parallel_size": c.data_parallel_size,
                           "after": provider_facts(c.model), "optimizer_bf16": c.optimizer.bf16,
                           "model_bf16": c.model.bf16}
    except Exception as exc:
        rec["validate"] = {"ok": False, "error": type(exc).__name__, "message": str(exc)[:3000]}

# the key list against the classes and functions it was generated from
kl = json.loads(Path(payload["keylist"]).read_text())
keylist = {"missing_fields": {}, "required": {}, "presets": {}, "recipes": {}}
for cid, c in containers.items():
    for f in dataclasses.fields(c):
        obj = getattr(c, f.name, None)
        if obj is None or not dataclasses.is_dataclass(obj) or f.name not in kl["sections"]:
            continue
        names = {g.name for g in dataclasses.fields(obj)}
        missing = sorted(names - set(kl["sections"][f.name]["fields"]))
        if missing:
            keylist["missing_fields"][f"{cid}:{f.name}:{type(obj).__name__}"] = missing
from megatron.bridge.training.config import FinetuningDatasetConfig
keylist["required"]["FinetuningDatasetConfig"] = sorted(
    f.name for f in dataclasses.fields(FinetuningDatasetConfig)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
from megatron.bridge.training.mixed_precision import get_mixed_precision_config
for name, values in kl["mixed_precision_presets"].items():
    real = get_mixed_precision_config(name)
    # the literal values the preset sets (an expression such as torch.half is stored as its source only), and
    # the two fields rule optimizer-offload reads through the defaults
    want = {k: v for k, v in values.items() if not isinstance(v, dict)}
    for k in ("fp8_recipe", "fp8_param_gather"):
        want.setdefault(k, kl["mixed_precision_defaults"][k])
    diff = {k: [v, getattr(real, k, "<absent>")] for k, v in want.items() if getattr(real, k, "<absent>") != v}
    if diff:
        keylist["presets"][name] = diff
mod = importlib.import_module("megatron.bridge.recipes.nemotronh")
real_recipes = {n: list(inspect.signature(getattr(mod, n)).parameters) for n in mod.__all__}
keylist["recipes"] = {"stored": {n: r["params"] for n, r in kl["recipes"].items()}, "real": real_recipes}
out["_keylist"] = keylist
write_result(out)
'''


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Every shipped config and each parity variant, compiled, prepared and validated by our dry-run."""
    root = tmp_path_factory.mktemp("mb-contract")
    files = inputs(root)
    out = {f"{stage}-{name}": compile_shipped(stage, name, root, files) for stage, name in SHIPPED}
    for cid, (stage, name, extra) in VARIANTS.items():
        out[cid] = compile_shipped(stage, name, root / cid, files, extra)
    for cid, case in out.items():
        case["stage"] = cid.split("-")[0]
        case["work"] = str(root / "work" / cid)
    return out


@pytest.fixture(scope="module")
def results(upstream, shipped) -> dict[str, Any]:
    cases = {cid: {k: case[k] for k in ("cfg", "stage", "world", "work")} for cid, case in shipped.items()}
    return upstream.run(SCRIPT, {"cases": cases, "te_only": TE_ONLY, "te_only_fp4": TE_ONLY_FP4,
                                 "keylist": str(keylist_path())}, timeout=900)


def _built(results: dict, cid: str) -> dict:
    rec = results[cid]
    assert "build_error" not in rec, rec.get("build_trace") or rec["build_error"]
    return rec


def _ids(pairs):
    return [f"{s}-{n}" for s, n in pairs]


# --------------------------------------------------------------------------------------------- the provider
@pytest.mark.parametrize("cid", _ids(SHIPPED))
def test_recipe_builds_the_model_the_dry_run_describes(results, shipped, cid):
    """The real recipe builder with our translation yields the provider of the catalogue entry the dry-run's
    memory estimate describes: layers, hybrid pattern, MTP block and depth, dimensions, and our layout."""
    from nemotron.config import catalogue
    from nemotron.layout.views import megatron_view

    rec = _built(results, cid)
    cfg = shipped[cid]["cfg"]
    spec = catalogue.get(cfg["model"]["name"])
    p = rec["provider"]
    assert p["type"] == "MambaModelProvider"
    assert p["num_layers"] == spec.num_layers and p["hybrid_layer_pattern"] == spec.pattern
    assert p["mtp_hybrid_override_pattern"] == spec.mtp_pattern
    estimate_depth = megatron_view(cfg).mtp_depths
    assert p["mtp_num_layers"] == (spec.mtp_depths if estimate_depth is None else estimate_depth)
    assert p["mtp_use_repeated_layer"] is spec.mtp_shared_weights   # one set of MTP weights, as the estimate counts
    assert (p["hidden_size"], p["num_attention_heads"], p["num_query_groups"], p["kv_channels"]) == \
        (spec.hidden_size, spec.num_attention_heads, spec.num_query_groups, spec.head_dim)
    assert (p["num_moe_experts"], p["moe_router_topk"], p["moe_ffn_hidden_size"], p["moe_latent_size"]) == \
        (spec.num_experts, spec.moe_topk, spec.moe_ffn_hidden_size, spec.moe_latent_size)
    assert (p["mamba_num_heads"], p["mamba_head_dim"], p["mamba_state_dim"], p["mamba_num_groups"]) == \
        (spec.mamba_num_heads, spec.mamba_head_dim, spec.mamba_state_dim, spec.mamba_num_groups)
    assert p["vocab_size"] == spec.vocab_size
    model = cfg["model"]
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel", "seq_length",
                "recompute_granularity", "mtp_loss_scaling_factor"):
        assert p[key] == model[key], key
    assert rec["routing"] == []  # nemotron.runtime.megatron.routing: routed scaling 5.0, top-22 of 512, sigmoid + bias, ...


@pytest.mark.parametrize("stage", ["pretrain", "sft"])
def test_tiny_builds_the_4_layer_slice_offline(results, shipped, stage):
    """Issue 13, defect 2: ``model.name: ultra4layer`` reaches the provider as the 4-layer slice (``ME*E`` + the
    ``*E`` MTP block), built from the slice's config.json that the job writes (HF_HUB_OFFLINE: no hub), and after
    validate() the unified pattern Megatron-Core builds is the slice's with two MTP depths; the full configs keep
    all 108 layers."""
    rec = _built(results, f"{stage}-tiny")
    assert shipped[f"{stage}-tiny"]["cfg"]["recipe"]["hf_model_id"].startswith("nvidia/")  # the hub id: unused
    assert rec["hf_config_written"] and rec["hf_path"].endswith("hf-config")
    assert (rec["provider"]["num_layers"], rec["provider"]["hybrid_layer_pattern"]) == (4, "ME*E")
    assert rec["validate"]["ok"], rec["validate"]
    assert rec["validate"]["after"]["hybrid_layer_pattern"] == "ME*E/*E/*E"
    assert rec["validate"]["after"]["num_layers"] == 4 and rec["validate"]["after"]["mtp_num_layers"] == 2
    full = _built(results, f"{stage}-default")
    assert full["provider"]["num_layers"] == 108 and full["validate"]["after"]["num_layers"] == 108


@pytest.mark.parametrize("cid", ["pretrain-default", "pretrain-long_context"])
def test_nvfp4_configs_stop_only_at_the_transformer_engine_version(results, cid):
    """Where the proof stops for NVFP4 pretraining: Megatron-Bridge's own first refusal on a CPU is the TE version
    its NVFP4 recipe needs; the same config with the FP4 GEMMs off passes everything else (the test above)."""
    rec = _built(results, cid)
    assert rec["te_stop"] == "fp4 requires Transformer Engine >= 2.7.0.dev0 for NVFP4BlockScaling support."
    assert rec["validate"]["ok"], rec["validate"]


@pytest.mark.parametrize("cid", ["pretrain-default", "pretrain-long_context", "sft-default"])
def test_hf_model_id_is_the_recipe_hf_path(results, shipped, cid):
    """Issue 13, defect 9: ``recipe.hf_model_id`` is what the recipe builds its provider from; a local folder works
    (the hub is unreachable here, so the provider exists only because the recipe read that folder)."""
    rec = _built(results, cid)
    assert rec["hf_path"] == shipped[cid]["cfg"]["recipe"]["hf_model_id"]
    assert Path(rec["hf_path"]).is_dir() and rec["provider"]["num_layers"] == 108


# --------------------------------------------------------------------------------------------- ConfigContainer
@pytest.mark.parametrize("cid", _ids(SHIPPED))
def test_dry_run_and_config_container_validate_accept_every_shipped_config(results, shipped, cid):
    """Parity on what we ship: our dry-run finds no error, and Megatron-Bridge's ``ConfigContainer.validate()`` at
    the job's world size accepts the same config, with the data-parallel size our layout table shows."""
    assert shipped[cid]["errors"] == []
    rec = _built(results, cid)
    assert rec["validate"]["ok"], rec["validate"]
    model = shipped[cid]["cfg"]["model"]
    tp, pp, cp = (model[k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                     "context_parallel_size"))
    assert rec["validate"]["data_parallel_size"] == shipped[cid]["world"] // (tp * pp * cp)


@pytest.mark.parametrize("cid", ["sft-default", "sft-tiny"])
def test_sft_gets_our_packed_parquet_specs(results, shipped, cid):
    """The SFT dataset is a real ``FinetuningDatasetConfig`` on our packed Parquet at the pack size."""
    rec = _built(results, cid)
    specs = shipped[cid]["cfg"]["dataset"]["packed_sequence_specs"]
    assert rec["dataset_type"] == "FinetuningDatasetConfig"
    assert rec["packed"]["packed_sequence_size"] == shipped[cid]["cfg"]["model"]["seq_length"]
    for key in ("packed_train_data_path", "packed_val_data_path", "packed_metadata_path", "pad_seq_to_mult"):
        assert rec["packed"][key] == specs[key], key


def test_packed_sft_micro_batch_parity(results, shipped):
    """Issue 13, defect 11a: packed SFT with ``train.micro_batch_size=2`` — Megatron-Bridge's validate() refuses it
    (ValueError "Micro batch size should be 1 when training with packed sequence") and so does our dry-run
    (rule ``packed-micro-batch``, naming the key and the equivalent layout)."""
    rec = _built(results, "sft-tiny-mbs2")
    assert rec["micro_batch_size"] == 2
    assert rec["validate"]["ok"] is False and rec["validate"]["error"] == "ValueError"
    assert "Micro batch size should be 1 when training with packed sequence" in rec["validate"]["message"]
    rules = {(rule, key) for rule, key, _ in shipped["sft-tiny-mbs2"]["errors"]}
    assert ("packed-micro-batch", "train.micro_batch_size") in rules


def test_slice_kept_at_tp2_gets_sequence_parallel_and_is_accepted(results, shipped):
    """``pretrain -c tiny model.tensor_model_parallel_size=2``: the slice preparation writes sequence parallel on
    (MoE with TP > 1 needs it) instead of a value validation then refuses; our dry-run and Megatron-Bridge's
    validate() both accept the result."""
    case = shipped["pretrain-tiny-tp2"]
    assert case["errors"] == [] and case["cfg"]["model"]["sequence_parallel"] is True
    rec = _built(results, "pretrain-tiny-tp2")
    assert rec["provider"]["tensor_model_parallel_size"] == 2 and rec["provider"]["sequence_parallel"] is True
    assert rec["validate"]["ok"], rec["validate"]
    assert rec["validate"]["data_parallel_size"] == 4


# --------------------------------------------------------------------------------------------- key list
def test_keylist_is_generated_from_the_pinned_sources():
    """The stored key list is the one ``scripts/megatron_bridge_keys.py`` makes from the archives these tests run
    (../shared/upstream): named by the ``[nemo]`` pin (version and commit), and identical when regenerated."""
    import importlib.util

    from upstream import ARCHIVES, SHARED_UPSTREAM

    pins = tomllib.loads((REPO / "stages" / "images.toml").read_text())["nemo"]
    stored = json.loads(keylist_path().read_text())
    assert stored["commit"] == pins["commits"]["megatron_bridge"][:7]
    assert stored["package_version"] == pins["frameworks"]["megatron_bridge"]
    assert stored["megatron_core"] == pins["frameworks"]["megatron_core"]
    assert stored["megatron_core_commit"] == pins["commits"]["megatron_core"][:7]
    bridge, core = (SHARED_UPSTREAM / name for name in ARCHIVES if name.startswith("megatron-"))
    spec = importlib.util.spec_from_file_location("mbkeys", REPO / "scripts" / "megatron_bridge_keys.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mbkeys"] = mod
    spec.loader.exec_module(mod)
    assert mod.generate(bridge, core) == stored, "regenerate: python scripts/megatron_bridge_keys.py --bridge ... --core ..."


def test_keylist_matches_the_real_classes(results):
    """Every field of every real ConfigContainer section object the recipes built is in the key list; the required
    fields of ``FinetuningDatasetConfig``, the mixed-precision presets' values and the recipe builders' parameters
    are the real ones."""
    kl = results["_keylist"]
    stored = json.loads(keylist_path().read_text())
    assert kl["missing_fields"] == {}
    assert kl["required"]["FinetuningDatasetConfig"] == stored["sections"]["dataset"]["required"]["FinetuningDatasetConfig"]
    assert kl["presets"] == {}
    assert kl["recipes"]["stored"] == kl["recipes"]["real"]


def test_the_one_gpu_run_builds_the_small_model_from_the_catalogue(results, shipped):
    """The config of ``bench/gpu_megatron.py`` (``-c tiny`` with ``model.name=small`` on one GPU): the recipe is
    built from the catalogue's own ``config.json`` for ``small`` (no HF repo: never ``recipe.hf_model_id``, which
    would give the full 108-layer Ultra), the provider has every Ultra block type, and ``validate()`` passes at
    world size 1."""
    from nemotron.config import catalogue

    rec = _built(results, "pretrain-tiny-1gpu")
    spec = catalogue.get("small")
    assert shipped["pretrain-tiny-1gpu"]["world"] == 1
    assert rec["hf_config_written"]
    p = rec["provider"]
    assert (p["num_layers"], p["hybrid_layer_pattern"], p["mtp_hybrid_override_pattern"]) == \
        (spec.num_layers, spec.pattern, spec.mtp_pattern)
    assert (p["num_moe_experts"], p["moe_latent_size"], p["moe_shared_expert_intermediate_size"]) == \
        (spec.num_experts, spec.moe_latent_size, spec.moe_shared_expert_intermediate_size)
    assert p["recompute_granularity"] is None and p["sequence_parallel"] is False
    assert p["use_mamba_mem_eff_path"] is False  # the unfused Mamba path: no causal-conv1d CUDA extension there
    assert rec["routing"] == []
    assert rec["validate"]["ok"], rec["validate"]
    assert rec["validate"]["data_parallel_size"] == 1


def test_the_one_gpu_sft_run_is_a_packed_finetune_of_the_same_small_model(results, shipped):
    """The config of ``bench/gpu_megatron.py --stage sft`` (``sft -c tiny`` on one GPU, the ``small`` model): our
    dry-run finds nothing to refuse, Megatron-Bridge's recipe builds the same provider as the one-GPU pretrain run
    (the checkpoint SFT starts from must load into it), and ``validate()`` passes with packed sequences at micro
    batch 1 (it refuses a larger one: ``sft-tiny-mbs2``) and world size 1."""
    from nemotron.config import catalogue

    assert shipped["sft-tiny-1gpu"]["errors"] == []
    assert shipped["sft-tiny-1gpu"]["world"] == 1
    rec, pre = _built(results, "sft-tiny-1gpu"), _built(results, "pretrain-tiny-1gpu")
    spec = catalogue.get("small")
    fields = ("num_layers", "hybrid_layer_pattern", "mtp_hybrid_override_pattern", "hidden_size", "num_moe_experts",
              "moe_latent_size", "moe_shared_expert_intermediate_size", "mtp_num_layers")
    assert {k: rec["provider"][k] for k in fields} == {k: pre["provider"][k] for k in fields}
    assert rec["provider"]["hybrid_layer_pattern"] == spec.pattern
    # packs run only on Mamba's fused path (rule packed-mamba-path; an H100 run stopped at MambaMixer's assert)
    assert rec["provider"]["use_mamba_mem_eff_path"] is True
    assert rec["validate"]["ok"], rec["validate"]
    assert rec["validate"]["data_parallel_size"] == 1


# ------------------------------------------------------------------------------ the exit signal, on the real state
SIGNAL_SCRIPT = BUILD + r'''
import signal
from megatron.bridge.training.state import GlobalState
from megatron.bridge.training.train import checkpoint_and_decide_exit
from upstream import read_payload, write_result
from nemotron.runtime.megatron.exit_signal import ExitSignal

case = read_payload()
os.environ["WORLD_SIZE"] = "1"
bc, hf_path, container = build(case)
container.checkpoint.save = None  # the loop's decision without a save (a save needs the model: CUDA)
container.checkpoint.save_interval = None
out = {"exit_signal_handler": container.train.exit_signal_handler, "exit_signal": int(container.train.exit_signal)}


def decide(state):
    """The training loop's own check after an iteration: True = save and leave the loop."""
    return checkpoint_and_decide_exit(state, [], None, None, 0.0, None, None)


state = GlobalState()
state.cfg = container
state.train_state.step = 1
# what the pinned pretrain() does: the handler exists, nobody enters it; an ignored SIGTERM keeps this process alive
before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.kill(os.getpid(), signal.SIGTERM)
out["upstream_alone"] = {"installed": signal.getsignal(signal.SIGTERM) == signal.SIG_IGN,
                         "received": state.signal_handler.signals_received(), "decide": decide(state)}
signal.signal(signal.SIGTERM, before)

# ours: a SIGTERM during set-up is remembered, then the first forward step enters upstream's handler
sig = ExitSignal(container.train.exit_signal)
sig.install_early()
os.kill(os.getpid(), signal.SIGTERM)
calls = []
step = sig.wrap(lambda st, it, model, plan=False: calls.append((it, model, plan)) or ("output", "loss"))
out["early"] = {"pending": sig.pending, "received_before_step": state.signal_handler.signals_received()}
result = step(state, "iterator", "model")
out["early"].update(result=list(result), calls=[list(c) for c in calls], entered=sig.entered is state.signal_handler,
                    received=state.signal_handler.signals_received(), decide=decide(state))

# a new config builds a new handler: the next step enters that one, and a SIGTERM after it is caught
state.cfg = container
fresh = state.signal_handler
out["later"] = {"new_handler": fresh is not sig.entered, "received_before": fresh.signals_received()}
step(state, "iterator", "model")
os.kill(os.getpid(), signal.SIGTERM)
out["later"].update(entered=sig.entered is fresh, received=fresh.signals_received(), decide=decide(state))
from megatron.bridge.training.utils.train_utils import maybe_inject_state
out["injects_state"] = maybe_inject_state(step, state) is not step
write_result(out)
'''


def test_sigterm_is_caught_by_megatron_bridges_own_handler_once_our_step_enters_it(upstream, shipped):
    """Megatron-Bridge at the pinned ref builds its ``DistributedSignalHandler`` but never enters it, so its training
    loop never sees SIGTERM (on the H200: exit -15, no save). With
    :class:`nemotron.runtime.megatron.exit_signal.ExitSignal` on the one-GPU run's real ``ConfigContainer`` and a real
    ``GlobalState``: a SIGTERM during set-up is kept and raised again once the first forward step has entered upstream's
    handler, upstream's own ``checkpoint_and_decide_exit`` then decides to stop, a handler rebuilt by a new config is
    entered too, and Megatron-Bridge still passes the state to the wrapped step. Where this stops: no save (it needs the
    model, on CUDA) and no process group (``signals_received`` gathers over ranks only when one is initialised)."""
    case = {k: shipped["pretrain-tiny-1gpu"][k] for k in ("cfg", "stage", "work")}
    case["work"] = str(Path(case["work"]) / "signal")
    out = upstream.run(SIGNAL_SCRIPT, case, timeout=600)
    assert out["exit_signal_handler"] is True and out["exit_signal"] == 15
    assert out["upstream_alone"] == {"installed": True, "received": [False], "decide": False}
    early = out["early"]
    assert early["pending"] is True and early["received_before_step"] == [False]
    assert early["result"] == ["output", "loss"] and early["calls"] == [["iterator", "model", False]]
    assert early["entered"] and early["received"] == [True] and early["decide"] is True
    later = out["later"]
    assert later["new_handler"] and later["received_before"] == [False]
    assert later["entered"] and later["received"] == [True] and later["decide"] is True
    assert out["injects_state"] is True
