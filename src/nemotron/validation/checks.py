"""Which rules apply to which stage, and the dry-run tables.

:func:`validate_stage` and :func:`describe_stage` dispatch on the stage kind (``megatron``,
``convert``, ``quantize``, ``rl``, ``data``) and the config's ``backend`` (the cluster framework, or
``local``). Everything is pure except :func:`nemotron.layout.views.read_manifest`, which reads
a data artifact's small JSON manifest when it exists on this machine.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nemotron.config import catalogue
from nemotron.config.catalogue import ModelSpec
from nemotron.config.images import framework_version, keylist_version
from nemotron.config.registry import Stage
from nemotron.config.tree import as_int, get, has, unresolved
from nemotron.errors import Problem, plural
from nemotron.layout import memory, rules
from nemotron.layout.estimate import MTP_LEFT_OUT
from nemotron.layout.views import (
    EXPORT_KEYS,
    NodeShape,
    TrainView,
    host_memory,
    layout_keys,
    manifest_field,
    megatron_view,
    node_shape,
    read_manifest,
    rl_export_size,
    rl_view,
)

if TYPE_CHECKING:  # annotations only: pydantic is loaded with a profile, not with this module
    from nemotron.profiles.profile import ExecutorProfile

LOCAL = "local"


def backend(cfg: dict) -> str:
    return str(get(cfg, "backend", "") or "").lower()


def model_of(cfg: dict) -> tuple[ModelSpec | None, list[Problem]]:
    name = get(cfg, "model.name")
    if name is None:
        return None, []
    if not isinstance(name, str):
        return None, [Problem(key="model.name", value=name, message="must be a model name",
                              valid=", ".join(catalogue.names()), rule="model-name")]
    try:
        return catalogue.get(name), []
    except catalogue.CatalogueError as exc:
        return None, [Problem(key="model.name", value=name, message=str(exc).split("; valid:")[0],
                              valid=", ".join(catalogue.names()), rule="model-name")]


def mcore_version(stage: Stage) -> str | None:
    return framework_version(getattr(stage, "image", ""), "megatron_core")


# ------------------------------------------------------------------------------------ shared rules
def training_rules(model: ModelSpec, v: TrainView, mcore: str | None, *, world_check: bool = True,
                   batch_check: bool = True, nodes: int = 1, gpn: int = 8, training: bool = True,
                   extra_nodes: int = 0, world_what: str | None = None) -> list[Problem]:
    """Rules 1-7 on one Megatron layout.

    ``training=False``: a forward-only job (conversion, calibration), where Megatron-Core's
    training-only MoE/sequence-parallel check does not apply. Rules that depend on a dimension that is
    itself invalid (world size with a TP that does not divide the model, ...) are skipped, so every
    message is a cause, not a consequence. ``extra_nodes``: nodes of the job that are not this
    layout's (NeMo RL generation and teachers), for the valid node counts.
    """
    out = rules.positive_ints(v.ints())
    if not v.ok:
        return out
    k = v.keys
    dims = rules.tp_divides_model(model, v.tp, k["tp"])
    if not dims:
        dims += rules.tp_vs_kv_groups(model, v.tp, mcore, k["tp"])
    if training:
        out += rules.moe_tp_needs_sp(model, v.tp, v.sp, k["sp"])
    out += rules.sp_with_tp1(v.tp, v.sp, k["sp"])
    experts = rules.ep_divides_experts(model, v.ep, k["ep"]) + rules.etp_divides_ffn(model, v.etp, k["etp"])
    pipeline = rules.pp_splits_layers(model, v.pp, v.first, v.last, k["pp"], k.get("first", ""), k.get("last", ""))
    out += dims + experts + pipeline
    if dims or experts or pipeline:
        return out  # world, batch and sequence rules would only restate these
    world_problems: list[Problem] = []
    if world_check:
        world_problems += rules.world_divides(v.world, v.tp, v.pp, v.cp, v.ep, v.etp, v.world_key, nodes, gpn,
                                              world_what or v.world_what, extra_nodes=extra_nodes)
        if not world_problems:
            world_problems += rules.expert_fills_world(model, v.world, v.pp, v.ep, v.etp, k["ep"])
    out += world_problems
    if batch_check and not world_problems:
        out += rules.batch_divisible(v.gbs, v.mbs, v.world // (v.tp * v.pp * v.cp), k["gbs"])
    out += rules.cp_seq_divisible(v.seq, v.tp, v.cp, v.sp, k["seq"])
    return out


def setup_of(v: TrainView, inference: bool = False) -> memory.TrainSetup:
    return memory.TrainSetup(
        tp=v.tp, pp=v.pp, cp=v.cp, ep=v.ep, etp=v.etp, sp=v.sp, world=v.world, seq_length=v.seq or 4096,
        micro_batch=v.mbs, global_batch=v.gbs, first_stage_layers=v.first, last_stage_layers=v.last,
        recompute_granularity=v.recompute_granularity, recompute_method=v.recompute_method,
        recompute_num_layers=v.recompute_num_layers, recompute_modules=v.recompute_modules,
        distributed_optimizer=v.distributed_optimizer, grad_fp32=v.grad_fp32,
        optimizer_offload_fraction=v.offload_fraction, precision=v.precision, mtp_depths=v.mtp_depths,
        inference=inference, logits_bytes=v.logits_bytes,
    )


def memory_problem(est: memory.Estimate, key: str, value: Any, what: str = "", model: ModelSpec | None = None,
                   setup: memory.TrainSetup | None = None, keys: dict[str, str] | None = None) -> list[Problem]:
    """Rules ``memory`` and ``memory-fit`` on the peak stage's estimate against the GPU memory.

    Above the GPU memory by more than :data:`nemotron.layout.memory.CALIBRATION_MARGIN` (15 %, the estimate's
    calibration against measured peaks): an error, ``memory-fit``, naming ``key`` (the layout's PP size) and a fix
    that fits by the same estimate (:func:`memory_fix`: a larger PP, full recompute) when ``model``, ``setup`` and
    ``keys`` (the layout's :attr:`TrainView.keys`) are given. Above it by at most the margin, or against a GPU
    assumed for want of a profile (:attr:`Estimate.memory_source` ``assumed: ...``): a warning, ``memory``. Not checkable because no GPU memory is declared: a warning, ``memory``, saying where it would come
    from."""
    if est.fits is None:
        return [Problem(key=key, value=value, rule="memory", severity="warning",
                        message=f"memory estimate{what}: {est.peak.total_gb:.0f} GB per GPU, not checked: "
                                f"{est.memory_source or 'no GPU memory declared'}",
                        valid="declare the GPU in the profile: gpu = \"H100\" (or gpu_memory = GB)")]
    if est.fits is False:
        inference = bool(setup and setup.inference) or est.label != "training"
        # a forward-only job (calibration, conversion) keeps no gradients, optimizer state or saved activations
        generic = ("more PP/EP/TP, or GPUs with more memory" if inference else
                   "more PP/EP/TP, recompute, optimizer CPU offload, or GPUs with more memory")
        assert est.gpu_memory_gb  # fits is False only against a declared memory
        assumed = est.memory_source.startswith("assumed")  # no profile: the GPU is a guess, the verdict too
        fix = memory_fix(model, setup, keys, est.gpu_memory_gb) if model and setup and keys else None
        fix = fix or larger_gpu(est.peak.total_gb)
        valid = f"{fix}; or {generic}" if fix else generic
        if est.peak.total_gb > est.gpu_memory_gb * (1 + memory.CALIBRATION_MARGIN) and not assumed:
            return [Problem(key=key, value=value, rule="memory-fit",
                            message=f"memory estimate{what}: {est.verdict()}; more than the estimate's "
                                    f"{memory.CALIBRATION_MARGIN:.0%} calibration margin over the GPU memory: the job "
                                    "would run out of memory — see the memory table in --dry-run",
                            valid=valid)]
        why = (f", the GPU is {est.memory_source}; on a profile declaring it this would be refused"
               if assumed and est.peak.total_gb > est.gpu_memory_gb * (1 + memory.CALIBRATION_MARGIN) else
               "; the job may run out of memory")  # borderline: the verdict names the margin
        return [Problem(key=key, value=value, message=f"memory estimate{what}: {est.verdict()}{why} — see the "
                                                      "memory table in --dry-run", valid=valid,
                        rule="memory", severity="warning")]
    return []


#: The fewest layers a pipeline stage of an offered fix holds: below it the fix is not a layout anyone would run
#: (``sft -c default`` on H100 was offered PP 108, one layer a stage, on 55,296 GPUs).
MIN_LAYERS_PER_STAGE = 3
#: The most GPUs an offered fix may ask for, as a multiple of the config's own.
MAX_WORLD_FACTOR = 2


def larger_gpu(peak_gb: float) -> str | None:
    """The GPU memory a layout of ``peak_gb`` GB per GPU (the estimate's peak) needs, with the smallest GPU models
    of :data:`nemotron.profiles.schema.GPU_MODELS` that hold it, as words for a fix; None when none does."""
    from nemotron.profiles.schema import GPU_MODELS  # loaded only for a layout that does not fit

    fits = sorted((gb, name) for name, (_, gb) in GPU_MODELS.items() if gb >= peak_gb)
    if not fits:
        return None
    names = [name for gb, name in fits if gb == fits[0][0]]
    return (f"GPUs of >= {math.ceil(peak_gb)} GB, as this layout stands: {' or '.join(names)} "
            f"({fits[0][0]:.0f} GB) does (gpu = \"{names[0]}\" in the profile)")


def memory_fix(model: ModelSpec, setup: memory.TrainSetup, keys: dict[str, str], gpu_memory_gb: float) -> str | None:
    """The first change of the layout ``setup`` (keys ``keys``, a :class:`TrainView`'s) that the same estimate
    fits in ``gpu_memory_gb`` per GPU, as ``key=value`` words, or None: full activation recompute (when not on),
    then the smallest PP multiple that splits the layers evenly (on the same GPUs, else with as many more GPUs, DP
    unchanged), keeping :data:`MIN_LAYERS_PER_STAGE` layers a stage and at most :data:`MAX_WORLD_FACTOR` x the GPUs."""
    from dataclasses import replace

    pp_key = keys["pp"]
    prefix = pp_key.rsplit(".", 1)[0]
    if setup.recompute_granularity != "full" and not setup.inference:
        full = replace(setup, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
        est = memory.estimate(model, full, gpu_memory_gb)
        if est.fits:
            words = (f"{prefix}.activation_checkpointing=true" if prefix.startswith("policy.") else
                     f"{prefix}.recompute_granularity=full {prefix}.recompute_method=uniform "
                     f"{prefix}.recompute_num_layers=1")
            return f"{words} (full activation recompute: estimate {est.peak.total_gb:.0f} GB per GPU)"
    for k in range(2, model.num_layers // max(setup.pp, 1) + 1):
        pp = setup.pp * k
        if model.num_layers < pp * MIN_LAYERS_PER_STAGE:
            break
        if model.num_layers % pp:
            continue
        same = replace(setup, pp=pp, first_stage_layers=None, last_stage_layers=None)
        dp = setup.world // (setup.tp * pp * setup.cp) if setup.world % (setup.tp * pp * setup.cp) == 0 else 0
        if dp and setup.world % (pp * setup.ep * setup.etp) == 0 and setup.global_batch % (setup.micro_batch * dp) == 0:
            est = memory.estimate(model, same, gpu_memory_gb)
            if est.fits:
                return (f"{pp_key}={pp} on the same {setup.world} GPUs (DP {dp}; estimate {est.peak.total_gb:.0f} GB "
                        "per GPU)")
        if k > MAX_WORLD_FACTOR:
            continue
        wider = replace(same, world=setup.world * k)
        est = memory.estimate(model, wider, gpu_memory_gb)
        if est.fits:
            return (f"{pp_key}={pp} with {k}x the GPUs of this layout (world {wider.world}, DP unchanged; estimate "
                    f"{est.peak.total_gb:.0f} GB per GPU)")
    return None


def resource_rules(stage: Stage, cfg: dict, shape: NodeShape, world_needed: int | None) -> list[Problem]:
    """Rule 12: node shape owned by the profile; GPU stages need GPUs."""
    out: list[Problem] = []
    raw_nodes, raw_gpn = get(cfg, "run.env.nodes"), get(cfg, "run.env.gpus_per_node")
    if raw_nodes is None and has(cfg, "run.env.nodes"):  # the plan would take 1 node without a word
        out.append(Problem("run.env.nodes", None, "null is no node count: the job would silently get 1 node (the "
                           "profile's nodes is a cap, not a default)", "1, 2, 3, ...", rule="positive-int"))
    if raw_nodes is not None and not unresolved(raw_nodes) and (as_int(raw_nodes) or 0) < 1:
        out.append(Problem("run.env.nodes", raw_nodes, "must be a positive number of nodes", "1, 2, 3, ...",
                           rule="positive-int"))
    if raw_gpn is not None and not unresolved(raw_gpn) and (as_int(raw_gpn) is None or as_int(raw_gpn) < 0):
        out.append(Problem("run.env.gpus_per_node", raw_gpn, "must be a number of GPUs, or null for the profile's",
                           "null, 1, 2, 4, 8, ...", rule="positive-int"))
    nodes = as_int(get(cfg, "run.env.nodes")) or 1
    if _cpu_conversion(stage, cfg):  # no GPU asked for (nemotron.launch.plan.cpu_only): any node shape will do
        return out
    no_gpus = getattr(stage, "gpu", False) and shape.has_profile and not shape.profile_gpus_per_node
    if not no_gpus:  # a GPU stage on a profile of 0 GPUs a node: rule gpu-stage's line says it, not a node shape of 0
        out += rules.node_shape(shape.config_gpus_per_node, shape.profile_gpus_per_node, shape.profile_name, nodes,
                                world_needed)
    if no_gpus:
        out += rules.gpu_stage_needs_gpus(getattr(stage, "title", getattr(stage, "name", "stage")),
                                          shape.profile_gpus_per_node, shape.profile_name)
    return out


def _cpu_conversion(stage: Stage, cfg: dict) -> bool:
    """A conversion with ``convert.device: cpu``: one process on one node, no GPU."""
    key = stage.family.cpu_key
    return bool(key) and str(get(cfg, key, "gpu")).lower() == "cpu"


# ------------------------------------------------------------------------------------ Megatron stages
def megatron_layout(cfg: dict, shape: NodeShape) -> TrainView:
    v = megatron_view(cfg)
    v.nodes = as_int(get(cfg, "run.env.nodes")) or 1
    v.world = v.nodes * shape.gpus_per_node
    return v


def validate_training(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Every problem of a GPU stage's config (Megatron training, convert, quantize, RL) on ``profile``.

    The model's problems come first; ``backend: local`` then gets :func:`validate_local`, a cluster
    backend the RL rules (stage kind ``rl``: :func:`_rl_cluster`) or the Megatron ones
    (:func:`_megatron_cluster`), which add to that list.
    """
    shape = node_shape(cfg, profile)
    out: list[Problem] = []
    model, probs = model_of(cfg)
    out += probs
    if backend(cfg) == LOCAL:
        return out + validate_local(stage, cfg, model) + local_refusals(stage, cfg, profile)
    cluster = _rl_cluster if stage.family.nemo_rl else _megatron_cluster
    out = cluster(stage, cfg, shape, model, out)
    if _cpu_conversion(stage, cfg) and model is not None:
        out += convert_cpu_rules(model, cfg, profile)
    return out


def convert_cpu_rules(model: ModelSpec, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Rule convert-cpu-host-memory on a cluster conversion with ``convert.device: cpu``: the host memory of a node of
    ``profile`` (:func:`nemotron.layout.views.host_memory`, as rule rl-export-host-memory reads it) against the
    model's parameters (MTP counted unless ``model.mtp_num_layers`` is 0) x the bytes of ``convert.dtype``. Nothing
    for ``convert.direction: hf_v5_to_v4`` (it rewrites a config; the weights are not loaded)."""
    if get(cfg, "convert.direction") == "hf_v5_to_v4":
        return []
    params = catalogue.param_count(model, include_mtp=get(cfg, "model.mtp_num_layers") != 0)["total"]
    dtype = str(get(cfg, "convert.dtype", "bfloat16"))
    need_gb = -(-params * rules.CONVERT_DTYPE_BYTES.get(dtype.lower(), 2) // 10**9)
    mem = host_memory(profile)
    if mem.bytes is None:
        fix = (f"set host_memory = <the RAM of a node, GB> in the profile (or a Slurm mem size) so the dry run checks "
               f"it; the node needs at least {need_gb} GB, else convert on GPUs (convert.device=gpu)")
    elif mem.key.endswith(".mem"):
        need_gib = -(-need_gb * 10**9 // 2**30)  # Slurm's G is 2^30 bytes
        fix = (f"profile.mem={need_gib}G or more on nodes that have that RAM, or convert on GPUs "
               "(convert.device=gpu)")
    else:
        fix = f"nodes with at least {need_gb} GB of RAM, or convert on GPUs (convert.device=gpu)"
    return rules.convert_cpu_host_memory(params, dtype, mem.bytes, mem.key, mem.value, mem.source, fix)


def _megatron_cluster(stage: Stage, cfg: dict, shape: NodeShape, model: ModelSpec | None,
                      out: list[Problem]) -> list[Problem]:
    """:func:`validate_training` for a Megatron backend: adds to ``out`` (the problems so far) and returns it."""
    v = megatron_layout(cfg, shape)
    planned_world = v.nodes * (shape.config_gpus_per_node or shape.gpus_per_node)
    out += resource_rules(stage, cfg, shape, planned_world)
    family = stage.family
    if _cpu_conversion(stage, cfg):
        nodes = as_int(get(cfg, "run.env.nodes")) or 1
        if nodes != 1:
            out.append(Problem("run.env.nodes", nodes, "a CPU conversion runs on one node", "1", "convert-cpu"))
        return out
    if model is None or (shape.has_profile and not shape.gpus_per_node):
        return out
    inference = family.inference
    out += training_rules(model, v, mcore_version(stage), batch_check=family.batch, nodes=v.nodes,
                          gpn=shape.gpus_per_node, training=not inference)
    layout_ok = not any(p.severity == "error" for p in out)  # the estimate computes with this layout (and no other key)
    # rule 11: NVFP4 precision
    if family.optimizer:
        out += rules.nvfp4_needs_blackwell(v.precision == "nvfp4", shape.gpu_arch, shape.declared_arch,
                                           "mixed_precision", get(cfg, "mixed_precision"), "NVFP4 training precision",
                                           shape.profile_name, off="mixed_precision=bf16_mixed")
    if family.quantizes:
        out += quantize_rules(model, cfg, v, shape)
    if family.optimizer:
        out += optimizer_rules(cfg, *bridge_precisions()) + offload_rules(cfg)
    if stage.bridge and backend(cfg) == "megatron-bridge":
        if family.optimizer:
            out += rules.train_length(get(cfg, "train.train_iters"), get(cfg, "train.train_samples"),
                                      get(cfg, "train.global_batch_size"))
        out += bridge_translation(stage.name, cfg)
    data = stage.training_data
    if data is not None and not data.blend:  # packed Parquet
        out += sft_data_rules(cfg, v, hybrid="M" in model.pattern)
    if data is not None:
        out += data_tokenizer_rules(stage, cfg, model)
    if v.ok and layout_ok:  # listed beside the other errors (NVFP4, data, ...): every refusal at once
        est = memory.estimate(model, setup_of(v, inference=inference), shape.gpu_memory_gb,
                              label="inference" if inference else "training")
        est.memory_source = shape.memory_source
        out += memory_problem(est, v.keys["pp"], v.pp, model=model, setup=setup_of(v, inference=inference), keys=v.keys)
    return out


def bridge_precisions() -> tuple[list[str], str]:
    """The ``mixed_precision`` preset names of the Megatron-Bridge version pinned for the ``nemo`` image (its
    key list), and that version's label; no names (no check) when no key list is stored for it."""
    from nemotron.config import keys

    version = keylist_version("nemo", "megatron_bridge") or ""
    try:
        names = keys.load_keylist(version).get("mixed_precision_recipes") or []
    except KeyError:  # the pass-through key check already reports the missing key list
        names = []
    return list(names), f"Megatron-Bridge {version}"


def bridge_preset(name: Any) -> dict[str, Any] | None:
    """The literal fields the Megatron-Bridge mixed-precision preset ``name`` sets (``fp8_recipe``,
    ``fp8_param_gather``, ...) over ``MixedPrecisionConfig``'s defaults, from the pinned key list
    (``scripts/megatron_bridge_keys.py`` reads ``training/mixed_precision.py``); None: no preset named (the
    recipe's own precision) or not in the key list (rule ``mixed-precision`` says so)."""
    from nemotron.config import keys

    if not isinstance(name, str) or not name:
        return None
    try:
        kl = keys.load_keylist(keylist_version("nemo", "megatron_bridge") or "")
    except KeyError:
        return None
    preset = (kl.get("mixed_precision_presets") or {}).get(name.replace("-", "_"))
    return None if preset is None else {**(kl.get("mixed_precision_defaults") or {}), **preset}


def offload_rules(cfg: dict) -> list[Problem]:
    """Rule ``optimizer-offload`` on a Megatron-Bridge training config: optimizer CPU offload and the
    precision-aware optimizer, with the FP8 parameter gather of its ``mixed_precision`` preset."""
    preset = bridge_preset(get(cfg, "mixed_precision")) or {}
    return rules.optimizer_offload(get(cfg, "optimizer.optimizer_cpu_offload"),
                                   get(cfg, "optimizer.use_precision_aware_optimizer"), get(cfg, "optimizer.optimizer"),
                                   get(cfg, "optimizer.use_distributed_optimizer"), preset.get("fp8_param_gather"),
                                   preset.get("fp8_recipe"), get(cfg, "mixed_precision"))


def optimizer_rules(cfg: dict, precisions: list[str], where: str) -> list[Problem]:
    """The learning-rate schedule (Megatron-Core's ``OptimizerParamScheduler``) and the ``mixed_precision``
    preset of a training config, with the rules the local runtime applies again when it reads its settings
    (:func:`nemotron.runtime.common.settings.read`). Keys left unset take the framework's defaults and are skipped."""
    out: list[Problem] = []
    if get(cfg, "optimizer.lr") is not None:
        out += rules.lr_range(get(cfg, "optimizer.lr"), get(cfg, "optimizer.min_lr"))
    train, decay = get(cfg, "train.train_iters"), get(cfg, "scheduler.lr_decay_iters")
    if train is None:  # Megatron-Bridge: the iterations train.train_samples gives (rule train-length)
        train = rules.iterations_of(None, get(cfg, "train.train_samples"), get(cfg, "train.global_batch_size"))
        train = train if train is not None and train >= 1 else None  # else rule train-length says why
    if train is not None:
        warmup = rules.lr_warmup(train, get(cfg, "scheduler.lr_warmup_iters"), decay)
        out += warmup
        if not any(p.severity == "error" for p in warmup):
            out += rules.lr_decay_style(get(cfg, "scheduler.lr_decay_style"), get(cfg, "scheduler.lr_wsd_decay_style"),
                                        get(cfg, "scheduler.lr_wsd_decay_iters"), as_int(decay) or as_int(train) or 1)
    return out + rules.mixed_precision_name(get(cfg, "mixed_precision"), precisions, where)


def bridge_translation(stage_name: str, cfg: dict) -> list[Problem]:
    """Rule ``bridge-translate``: the config translates into Megatron-Bridge's form as the job will translate it
    (:func:`nemotron.runtime.megatron.megatron_bridge.translate`, pure; the first refusal), e.g. ``recipe.hf_model_id``
    unset, ``dataset.dataset_kwargs.answer_only_loss=false``, an unknown ``convert.direction``; and the classes the
    job builds from that translation (:data:`nemotron.runtime.megatron.megatron_bridge.CONSTRUCTED`: SFT's
    ``FinetuningDatasetConfig``) get every field they require (:func:`nemotron.config.keys.missing_keys`). The blend.json
    is read by the job (here: an empty blend); a value still waiting for an artifact is the dry-run's warning."""
    from nemotron.config import keys
    from nemotron.config.registry import get_stage
    from nemotron.runtime.megatron.megatron_bridge import CONSTRUCTED, TranslateError, recipe_kwargs, translate

    data = get_stage(stage_name).training_data
    try:
        bc = translate(cfg, stage_name, blend={} if data is not None and data.blend else None)
    except TranslateError as exc:
        message = str(exc)
        if "${" in message or "unresolved" in message:
            return []
        return [Problem(key="", value=None, message=message, rule="bridge-translate")]
    # the classes the job constructs from the translation itself (not the recipe's objects): every field they
    # require (a dataclass field without a default), as the pinned key list records
    try:
        kl = keys.load_keylist(keylist_version("nemo", "megatron_bridge") or "")
    except KeyError:  # the pass-through key check reports the missing key list
        return []
    out = [Problem(key=p.key, value=None, message=p.message.removeprefix(f"{p.key}: "), rule="bridge-translate",
                   valid="a value (the job's translation does not set it)")
           for p in keys.missing_keys({"dataset": bc.dataset}, kl, CONSTRUCTED.get(bc.dataset_kind or "", {}))]
    if data is None:  # a conversion builds no recipe
        return out
    # the recipe builder by its signature, as the job calls it (the key list records the pinned recipes')
    recipe = (kl.get("recipes") or {}).get(str(bc.recipe))
    if recipe is None:
        out.append(Problem(key="recipe.name", value=bc.recipe, rule="bridge-translate", severity="warning",
                           message=f"not a recipe of megatron.bridge.recipes.nemotronh (Megatron-Bridge "
                                   f"{kl.get('version')}): the job looks in megatron.bridge.recipes, else starts from "
                                   "the common defaults with a provider built from recipe.hf_model_id",
                           valid=", ".join(n for n in kl.get("recipes") or {} if "ultra" in n)))
        return out
    try:
        recipe_kwargs(bc, recipe.get("params") or [], "hf_path")
    except TranslateError as exc:  # "recipe.<key>=<value>: why"
        head, _, why = str(exc).partition(": ")
        key = head.split("=")[0]
        valid = "false" if key == "recipe.trust_remote_code" else ", ".join(
            n for n, r in (kl.get("recipes") or {}).items() if "hf_path" in (r.get("params") or []))
        out.append(Problem(key=key, value=get(cfg, key), message=why, valid=valid, rule="bridge-translate"))
    return out


def rl_translation(cfg: dict) -> list[Problem]:
    """Rule ``rl-translate``: the config translates into NeMo RL's ``MasterConfig`` as the job will translate it
    (:func:`nemotron.runtime.rl.nemo_rl.translate`, pure; its first refusal), e.g. a ``teacher_routing`` slot
    that is not in the teacher panel."""
    from nemotron.errors import ConfigError
    from nemotron.runtime.rl.nemo_rl import translate

    try:
        translate(cfg)
    except ConfigError as exc:
        return [Problem(key="", value=None, message=exc.message, valid=exc.hint, rule="rl-translate")]
    return []


def local_settings(stage_name: str, cfg: dict) -> list[Problem]:
    """Rule ``local-settings``: the local trainer's own settings reader (:func:`nemotron.runtime.common.settings.read`,
    stdlib only) accepts the config; its first refusal. Paths of artifacts not produced yet are left to the
    dry-run's warnings."""
    from nemotron.runtime.common.settings import SettingsError, read

    try:
        read(cfg, stage_name, unresolved_ok=True)
    except SettingsError as exc:
        return [Problem(key="", value=None, message=str(exc), rule="local-settings")]
    return []


def local_panel_rules(cfg: dict) -> list[Problem]:
    """The MOPD panel rules the cluster validation applies (rule ``mopd-general-teacher``: a general teacher, every
    ``teacher_routing.by_agent`` slot in the panel), for the local backend, which has no node arithmetic."""
    teachers = get(cfg, "_teachers") or {}
    teachers = teachers if isinstance(teachers, dict) else {}
    out = rules.mopd_general_teacher(teachers)
    panel, _ = rules.resolve_teachers(teachers)
    routing = get(cfg, "teacher_routing.by_agent") or {}
    for agent, slot in (routing.items() if isinstance(routing, dict) else ()):
        if not isinstance(slot, str) or slot not in panel:
            out.append(Problem(f"teacher_routing.by_agent.{agent}", slot, "not a teacher slot", ", ".join(panel),
                               rule="mopd-general-teacher"))
    return out


def local_rl_settings(stage_name: str, cfg: dict) -> list[Problem]:
    """Rule ``local-settings`` of the local RL stages: :func:`nemotron.runtime.rl.rl_settings.read` (stdlib only; the
    run reads its settings with it) accepts the config, including the teacher panel and its routing; its first
    refusal."""
    from nemotron.runtime.common.settings import SettingsError
    from nemotron.runtime.rl.rl_settings import read

    try:
        read(cfg, stage_name, unresolved_ok=True)
    except SettingsError as exc:
        return [Problem(key="", value=None, message=str(exc), rule="local-settings")]
    return []


def local_refusals(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Rule ``local-refusal``: what the local trainer refuses before it starts, with its own lines
    (:func:`nemotron.runtime.megatron.entry.refusals`: an input path of the wrong kind; a resume whose inputs or
    ``train.train_iters`` contradict the checkpoint already in the folder). Only for a run on this machine
    (no profile, or a ``local`` one): on a cluster profile the folders live on the cluster's file system."""
    if stage.training_data is None:  # the local trainer trains the stages that read training data
        return []
    if profile is not None and not profile.settings.on_this_machine:
        return []
    from nemotron.runtime.common.settings import SettingsError, read
    from nemotron.runtime.megatron.entry import refusals

    try:
        settings = read(cfg, stage.name, unresolved_ok=True)
    except SettingsError:  # rule local-settings reports it
        return []
    return [Problem(key="", value=None, message=line, rule="local-refusal") for line in refusals(settings)]


def validate_local(stage: Stage, cfg: dict, model: ModelSpec | None) -> list[Problem]:
    """``backend: local`` runs one process on this machine (HF transformers / Model Optimizer)."""
    out: list[Problem] = []
    if stage.training_data is not None:  # the local trainer (nemotron.runtime.megatron.trainer)
        from nemotron.runtime.common.settings import LOCAL_PRECISIONS

        out += optimizer_rules(cfg, [k for k in LOCAL_PRECISIONS if k is not None],
                               "the local runtime (no Transformer Engine: FP8/NVFP4 presets need a cluster backend)")
        if not out:  # the reader applies the rules above again: its first refusal would repeat them
            out += local_settings(stage.name, cfg)
    if stage.family.converts:  # the local convert's one direction (its runtime's own refusal)
        from nemotron.runtime.megatron.convert_local import direction_refusal, source_refusal

        direction = get(cfg, "convert.direction")
        refusal = direction_refusal(direction)
        if refusal is not None:
            out.append(Problem("convert.direction", direction, refusal.split(": ", 1)[1], rule="local-convert"))
        elif (refusal := source_refusal(get(cfg, "convert") or {})) is not None:  # the run's own check, called again
            out.append(Problem("convert.source", get(cfg, "convert.source"), refusal.removeprefix("convert.source: "),
                               rule="local-convert"))
        from nemotron.runtime.megatron.convert_local import option_problems

        out += option_problems(get(cfg, "convert") or {})  # keys the local convert does not act on
    if stage.family.nemo_rl:  # rlvr, mopd: the cluster's panel rules, then the local RL runtime's reader
        panel = local_panel_rules(cfg) if get(cfg, "on_policy_distillation.enabled", False) else []
        out += panel or local_rl_settings(stage.name, cfg)
    keys = tuple(layout_keys("megatron")[k] for k in ("tp", "pp", "ep", "cp", "etp")) + \
        tuple(layout_keys("rl")[k] for k in ("tp", "pp", "ep", "cp"))
    for key in keys:
        val = get(cfg, key)
        if val is not None and as_int(val) != 1:
            out.append(Problem(key=key, value=val, message="the local backend runs one process without Megatron: "
                                                           "parallel sizes must be 1", valid="1", rule="local-layout"))
    nodes = as_int(get(cfg, "run.env.nodes")) or 1
    if nodes != 1:
        out.append(Problem("run.env.nodes", nodes, "the local backend runs one process on one machine and uses at "
                                                   "most one GPU", "1", rule="local-layout"))
    gpn = as_int(get(cfg, "run.env.gpus_per_node"))
    if gpn is not None and gpn > 1:
        out.append(Problem("run.env.gpus_per_node", gpn, "the local backend runs one process and uses at most one "
                                                         "GPU (the CPU when none is visible)",
                           "1 (or a cluster backend, e.g. -c tiny --run PROFILE, for several GPUs)",
                           rule="local-layout"))
    if model is not None and model.name == "ultra":
        out.append(Problem("model.name", model.name, "the full Ultra model (1.1 TB in BF16) cannot run on one machine",
                           "small (or ultra<N>layer with a cluster backend)", rule="local-layout"))
    return out


def sft_data_rules(cfg: dict, v: TrainView, hybrid: bool = True) -> list[Problem]:
    """Rules 7 (packing vs layout) and 13 (pack size vs sequence length) for SFT, the warning for packed data
    without a validation split, and packed data on Mamba's unfused path (``hybrid``: the model has Mamba layers)."""
    specs = "dataset.packed_sequence_specs"
    out: list[Problem] = rules.sft_validation_data(get(cfg, f"{specs}.packed_train_data_path"),
                                                   get(cfg, f"{specs}.packed_val_data_path"),
                                                   f"{specs}.packed_val_data_path")
    # the job always packs (nemotron.runtime.megatron.megatron_bridge.translate: packed_sequence_size =
    # model.seq_length)
    pack = as_int(get(cfg, f"{specs}.packed_sequence_size")) or as_int(get(cfg, "model.seq_length"))
    out += rules.packed_micro_batch(pack, get(cfg, "train.micro_batch_size"), get(cfg, "train.global_batch_size"))
    out += rules.packed_mamba_path(pack, get(cfg, "model.use_mamba_mem_eff_path"), hybrid)
    if not v.ok:
        return out
    required = rules.pack_pad_multiple(v.tp, v.cp, v.sp)
    spec_mult = as_int(get(cfg, "dataset.packed_sequence_specs.pad_seq_to_mult"))
    if spec_mult is not None and required > 1:
        out += rules.sft_pad_matches(spec_mult, required, "dataset.packed_sequence_specs.pad_seq_to_mult", spec_mult,
                                     "the config")
    manifest, where = read_manifest(get(cfg, "dataset.dataset_root"))
    data_mult = as_int(manifest_field(manifest, "pad_to_multiple", "packing.pad_to_multiple", "pad_seq_to_mult"))
    if manifest is not None:
        out += rules.sft_pad_matches(data_mult, required, "dataset.dataset_root", get(cfg, "dataset.dataset_root"), where)
    data_pack = as_int(manifest_field(manifest, "pack_size", "packing.pack_size", "packed_sequence_size"))
    out += rules.sft_pack_size(v.seq, as_int(get(cfg, "dataset.packed_sequence_specs.packed_sequence_size")),
                               data_pack, v.keys["seq"], "dataset.packed_sequence_specs.packed_sequence_size",
                               where or "the data artifact")
    return out


def data_tokenizer_rules(stage: Stage, cfg: dict, model: ModelSpec) -> list[Problem]:
    """Rule 13: the data artifact's tokenizer is the model's."""
    path_key = stage.training_data.path_key
    manifest, where = read_manifest(get(cfg, path_key))
    tok = manifest_field(manifest, "tokenizer")
    if not isinstance(tok, dict):
        return []
    out = rules.data_tokenizer_matches(tok, get(cfg, "tokenizer.tokenizer_model"), model.vocab_size,
                                       get(cfg, "tokenizer.vocab_sha256"), "tokenizer.tokenizer_model", where)
    if get(cfg, "backend") == "megatron-bridge" and get(cfg, "tokenizer.tokenizer_model") is None:
        from nemotron.data.outputs import (
            megatron_tokenizer,  # what the run loads (megatron_bridge.main): the same check
        )
        from nemotron.errors import ConfigError

        try:
            megatron_tokenizer(manifest, where)
        except ConfigError as exc:
            out.append(Problem("tokenizer.tokenizer_model", None, exc.message, exc.hint or "", rule="data-tokenizer"))
    return out


def quantize_rules(model: ModelSpec, cfg: dict, v: TrainView, shape: NodeShape) -> list[Problem]:
    """Export layout (a second layout inside the same allocation) and NVFP4 GEMMs vs hardware."""
    out: list[Problem] = []
    ek = EXPORT_KEYS
    ev = {k: as_int(get(cfg, key, 1)) for k, key in ek.items()}
    bad = rules.positive_ints({ek[k]: (val if val is not None else get(cfg, ek[k])) for k, val in ev.items()})
    out += bad
    if not bad:
        out += rules.tp_divides_model(model, ev["tp"], ek["tp"])
        out += rules.pp_splits_layers(model, ev["pp"], None, None, ek["pp"])
        out += rules.ep_divides_experts(model, ev["ep"], ek["ep"])
        need = ev["pp"] * max(ev["tp"], ev["ep"] * ev["etp"])
        if need > v.world:
            out.append(Problem(ek["pp"], ev["pp"], f"the export layout needs PP x max(TP, EP x ETP) = {plural(need, 'GPU')}, more "
                                                   f"than the job's {v.world}", f"a layout within {plural(v.world, 'GPU')}",
                               rule="world-layout"))
        elif shape.gpu_memory_gb and not any(p.severity == "error" for p in out):
            w = memory.inference_weights_gb(model, ev["tp"], ev["ep"] * ev["etp"], ev["pp"]) + memory.OVERHEAD_GB
            if w > shape.gpu_memory_gb:
                out.append(Problem(ek["pp"], ev["pp"], f"memory estimate: the export layout (TP{ev['tp']} PP{ev['pp']} "
                                                       f"EP{ev['ep']} ETP{ev['etp']}) holds {w:.0f} GB of BF16 weights "
                                                       f"per GPU (with the {memory.OVERHEAD_GB:.0f} GB allowance), more "
                                                       f"than the {shape.gpu_memory_gb:.0f} GB GPUs: the export would "
                                                       "run out of memory",
                                   export_fix(model, ev, v.world, shape), rule="memory-fit"))
    kernels = str(get(cfg, "generate.kernels", "") or "").lower()
    enabled = bool(get(cfg, "generate.enabled", False))
    recipe_fp4 = "fp4" in str(get(cfg, "quantization.recipe", "")).lower() or str(get(cfg, "quantization.recipe", "")) in (
        "ultra", "super-max-calib")
    out += rules.nvfp4_needs_blackwell(enabled and recipe_fp4 and kernels == "nvfp4", shape.gpu_arch,
                                       shape.declared_arch, "generate.kernels", get(cfg, "generate.kernels"),
                                       "a generation with real NVFP4 GEMMs", shape.profile_name,
                                       off="generate.kernels=fake_quant")
    # the serving layout of the generation check (vLLM --tensor-parallel-size): a TP the model cannot be split by
    gen_key = "generate.tensor_parallel_size"
    gen_tp = get(cfg, gen_key)
    if enabled and gen_tp is not None:
        bad = rules.positive_ints({gen_key: gen_tp})
        out += bad
        if not bad:
            out += rules.tp_divides_model(model, gen_tp, gen_key)
            if recipe_fp4:
                out += rules.nvfp4_tp_blocks(model, gen_tp, gen_key)
    return out


def export_fix(model: ModelSpec, ev: dict[str, int], world: int, shape: NodeShape) -> str:
    """The export layout (``ev``: the export ``tp``, ``pp``, ``ep``, ``etp`` of :data:`EXPORT_KEYS`) that holds the
    BF16 weights plus :data:`nemotron.layout.memory.OVERHEAD_GB` in ``shape.gpu_memory_gb`` per GPU, as ``key=value``
    words: PP a divisor of the layers and EP of the experts (TP and ETP kept), on the fewest nodes (the export runs
    in the job's allocation of ``world`` GPUs: more nodes are named as ``run.env.nodes``), then the fewest keys
    changed, then the fewest GB; else GPUs with more memory."""
    gpn = max(shape.gpus_per_node, 1)
    best = None
    for pp in rules.divisors(model.num_layers):
        for ep in (rules.divisors(model.num_experts) if model.is_moe else [1]):
            gpus = pp * max(ev["tp"], ep * ev["etp"])
            gb = memory.inference_weights_gb(model, ev["tp"], ep * ev["etp"], pp) + memory.OVERHEAD_GB
            if gb > shape.gpu_memory_gb:
                continue
            nodes = max(-(-gpus // gpn), -(-world // gpn))
            rank = (nodes, (pp != ev["pp"]) + (ep != ev["ep"]), gb)
            if best is None or rank < best[0]:
                best = (rank, pp, ep, gpus, gb)
    if best is None:
        return "GPUs with more memory (the profile's gpu)"
    (nodes, _, gb), pp, ep, gpus, _ = best
    words = [f"{EXPORT_KEYS[k]}={n}" for k, n in (("pp", pp), ("ep", ep)) if n != ev[k]]
    need = f"; the export uses {gpus}" if gpus != nodes * gpn else ""
    more = f" with run.env.nodes={nodes} ({nodes * gpn} GPUs{need})" if nodes * gpn > world else ""
    return f"{' '.join(words)}{more} (TP{ev['tp']} PP{pp} EP{ep}: {gb:.0f} GB per GPU); or GPUs with more memory"


# ------------------------------------------------------------------------------------ NeMo RL stages
class RLPlan:
    """Node arithmetic of a NeMo RL stage (rule 10) and its generation layout (rule 8)."""

    def __init__(self, cfg: dict, shape: NodeShape) -> None:
        self.cfg = cfg
        self.gpn = as_int(get(cfg, "cluster.gpus_per_node")) or shape.gpus_per_node
        self.run_nodes = as_int(get(cfg, "run.env.nodes")) or 1
        self.cluster_nodes = as_int(get(cfg, "cluster.num_nodes")) or self.run_nodes
        self.colocated = bool(get(cfg, "policy.generation.colocated.enabled", True))
        self.gen_nodes = 0 if self.colocated else (as_int(get(cfg, "policy.generation.colocated.resources.num_nodes")) or 0)
        self.gen_gpn = as_int(get(cfg, "policy.generation.colocated.resources.gpus_per_node")) or self.gpn
        self.gym_nodes = as_int(get(cfg, "env.nemo_gym.num_gpu_nodes")) or 0
        self.opd = bool(get(cfg, "on_policy_distillation.enabled", False))
        self.non_colocated_teachers = self.opd and bool(get(cfg, "on_policy_distillation.non_colocated_teachers.enabled", False))
        teachers = get(cfg, "_teachers") or {}
        self.panel, self.fallback = rules.resolve_teachers(teachers if isinstance(teachers, dict) else {})
        tc = "on_policy_distillation.non_colocated_teachers.default_teacher_cfg"
        self.tkey = tc
        self.t_nodes = as_int(get(cfg, f"{tc}.num_nodes")) or 1
        self.t_gpn = as_int(get(cfg, f"{tc}.gpus_per_node")) or self.gpn
        self.unique_teachers = self._unique() if self.opd else 0
        self.teacher_nodes = self.unique_teachers * self.t_nodes if self.non_colocated_teachers else 0
        self.train_nodes = self.cluster_nodes - self.teacher_nodes - (0 if self.colocated else self.gen_nodes)
        self.total = self.cluster_nodes + self.gym_nodes

    def used_slots(self) -> list[str]:
        routing = get(self.cfg, "teacher_routing.by_agent") or {}
        default = get(self.cfg, "teacher_routing.default_slot") or "general"
        slots = {default, *(v for v in routing.values() if isinstance(v, str))} if isinstance(routing, dict) else {default}
        return sorted(s for s in slots if s in self.panel)

    def _unique(self) -> int:
        slots = self.used_slots() or ["general"]
        values = [self.panel.get(s) for s in slots]
        if get(self.cfg, "on_policy_distillation.deduplicate_shared_teacher_checkpoints", True):
            return len({str(v) for v in values if v not in (None, "")}) or 1
        return len(slots)

    @property
    def gen_gpus(self) -> int:
        return (self.cluster_nodes - self.teacher_nodes) * self.gpn if self.colocated else self.gen_nodes * self.gen_gpn

    def engine(self) -> dict[str, Any]:
        """GPUs per engine, DP-attention size and attention TP, with the keys that set them."""
        gen = "policy.generation"
        if str(get(self.cfg, f"{gen}.backend", "vllm")).lower() == "sglang":
            sg = f"{gen}.sglang_cfg"
            per = as_int(get(self.cfg, f"{sg}.sglang_server_config.num_gpus_per_engine")) or as_int(get(self.cfg, f"{sg}.tp_size")) or 1
            # NeMo RL's SGLang worker never passes enable_dp_attention (rule sglang-dp-attention): the engine's
            # attention TP is tp_size, whatever dp_size says
            dp = 1
            tp_size = as_int(get(self.cfg, f"{sg}.tp_size")) or per
            ep_size = as_int(get(self.cfg, f"{sg}.ep_size")) or 1
            # SGLang shards each expert's FFN over TP when ep_size is 1 (its default MoE), as vLLM does
            return {"backend": "sglang", "per": per, "dp": dp, "attn_tp": tp_size if per % tp_size == 0 else 0,
                    "ep": ep_size, "tp": tp_size, "pp": as_int(get(self.cfg, f"{sg}.pp_size")) or 1,
                    "expert_shard": max(ep_size, tp_size),
                    "keys": {"engine": f"{sg}.sglang_server_config.num_gpus_per_engine", "dp": f"{sg}.dp_size",
                             "total": f"{sg}.sglang_server_config.num_gpus"},
                    "values": {"engine": get(self.cfg, f"{sg}.sglang_server_config.num_gpus_per_engine"),
                               "dp": get(self.cfg, f"{sg}.dp_size")},
                    "mem": get(self.cfg, f"{sg}.mem_fraction_static")}
        if str(get(self.cfg, f"{gen}.backend", "vllm")).lower() == "megatron":
            # NeMo RL's Megatron generation (nemo_rl/models/generation/megatron) runs the policy's own Megatron model:
            # an engine is one model-parallel group of the training layout (megatron/config.py
            # dedicated_inference_megatron_cfg: the same layout unless mcore_generation_config changes it), already
            # checked by the training rules; vllm_cfg and sglang_cfg are not read
            mc = "policy.megatron_cfg"
            tp = as_int(get(self.cfg, f"{mc}.tensor_model_parallel_size")) or 1
            pp = as_int(get(self.cfg, f"{mc}.pipeline_model_parallel_size")) or 1
            ep = as_int(get(self.cfg, f"{mc}.expert_model_parallel_size")) or 1
            return {"backend": "megatron", "per": tp * pp, "dp": 1, "attn_tp": tp, "ep": ep, "tp": tp, "pp": pp,
                    "expert_shard": max(ep, tp),
                    "keys": {"engine": f"{mc}.tensor_model_parallel_size", "dp": f"{mc}.expert_model_parallel_size",
                             "total": ""},
                    "values": {"engine": get(self.cfg, f"{mc}.tensor_model_parallel_size"),
                               "dp": get(self.cfg, f"{mc}.expert_model_parallel_size")},
                    "mem": None}
        vc = f"{gen}.vllm_cfg"
        tp = as_int(get(self.cfg, f"{vc}.tensor_parallel_size")) or 1
        pp = as_int(get(self.cfg, f"{vc}.pipeline_parallel_size")) or 1
        ep = as_int(get(self.cfg, f"{vc}.expert_parallel_size")) or 1
        dp = ep // tp if ep > tp and ep % tp == 0 else 1
        # Expert weights split over EP ranks with expert parallel on; with it off (EP=1) vLLM shards each
        # expert's FFN over TP instead (vLLM FusedMoE), so an engine holds experts / max(EP, TP) per GPU.
        return {"backend": "vllm", "per": tp * pp * dp, "dp": dp, "attn_tp": tp, "ep": ep, "tp": tp, "pp": pp,
                "expert_shard": max(ep, tp),
                "keys": {"engine": f"{vc}.tensor_parallel_size", "dp": f"{vc}.expert_parallel_size", "total": ""},
                "values": {"engine": get(self.cfg, f"{vc}.tensor_parallel_size"), "dp": get(self.cfg, f"{vc}.expert_parallel_size")},
                "mem": get(self.cfg, f"{vc}.gpu_memory_utilization")}


def rl_layout(cfg: dict, shape: NodeShape) -> tuple[TrainView, RLPlan]:
    plan = RLPlan(cfg, shape)
    v = rl_view(cfg)
    v.nodes = plan.cluster_nodes
    v.world = max(plan.train_nodes, 0) * plan.gpn
    return v, plan


def _rl_cluster(stage: Stage, cfg: dict, shape: NodeShape, model: ModelSpec | None,
                out: list[Problem]) -> list[Problem]:
    """:func:`validate_training` for the NeMo RL backend: adds to ``out`` (the problems so far) and returns it."""
    v, plan = rl_layout(cfg, shape)
    out += resource_rules(stage, cfg, shape, plan.total * (shape.config_gpus_per_node or shape.gpus_per_node))
    cgpn = as_int(get(cfg, "cluster.gpus_per_node"))
    if cgpn is not None and shape.gpus_per_node and cgpn != shape.gpus_per_node:
        out.append(Problem("cluster.gpus_per_node", cgpn, f"NeMo RL's cluster.gpus_per_node must match the node shape "
                                                         f"({shape.gpus_per_node})", "${run.env.gpus_per_node}",
                           rule="node-shape"))
    out += rl_translation(cfg)
    if model is None or (shape.has_profile and not shape.gpus_per_node):
        return out
    # rule 10: MOPD panel and node arithmetic
    if plan.opd:
        teachers = get(cfg, "_teachers") or {}
        out += rules.mopd_general_teacher(teachers if isinstance(teachers, dict) else {})
        if plan.non_colocated_teachers:
            tc = plan.tkey
            tv = {k: as_int(get(cfg, f"{tc}.{k}", 1)) or 1 for k in (
                "tensor_model_parallel_size", "context_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size")}
            out += rules.tp_divides_model(model, tv["tensor_model_parallel_size"], f"{tc}.tensor_model_parallel_size")
            out += rules.tp_vs_kv_groups(model, tv["tensor_model_parallel_size"], mcore_version(stage), f"{tc}.tensor_model_parallel_size")
            out += rules.ep_divides_experts(model, tv["expert_model_parallel_size"], f"{tc}.expert_model_parallel_size")
            out += rules.teacher_layout(model, tv["tensor_model_parallel_size"], tv["context_parallel_size"],
                                        tv["pipeline_model_parallel_size"], tv["expert_model_parallel_size"], plan.t_nodes,
                                        plan.t_gpn, plan.gpn, tc)
        routing = get(cfg, "teacher_routing.by_agent") or {}
        if isinstance(routing, dict):
            for agent, slot in routing.items():
                if not isinstance(slot, str) or slot not in plan.panel:
                    out.append(Problem(f"teacher_routing.by_agent.{agent}", slot, "not a teacher slot",
                                       ", ".join(plan.panel), rule="mopd-general-teacher"))
    envs = get(cfg, "environments")
    if isinstance(envs, dict):
        names = {k: get(cfg, k) for k in ("data.default.env_name", "data.train.env_name", "data.validation.env_name")
                 if get(cfg, k) is not None}
        out += rules.rl_environments(envs, names, bool(get(cfg, "env.should_use_nemo_gym", False)), plan.gym_nodes)
    out += rules.rl_node_total(plan.run_nodes, plan.cluster_nodes, plan.gen_nodes, plan.gym_nodes, plan.teacher_nodes,
                               plan.colocated)
    segment = as_int(get(cfg, "cluster.segment_size")) or (16 if plan.gpn == 4 else 0)
    out += rules.segment_multiple(plan.total, segment, "run.env.nodes", "cluster.segment_size",
                                  get(cfg, "cluster.segment_size"))
    # rules 1-7 on the training layout
    if plan.train_nodes >= 1:
        others = plan.teacher_nodes + (0 if plan.colocated else plan.gen_nodes)
        what = (f"training gets cluster.num_nodes - generation - teachers = {plan.cluster_nodes} - "
                f"{0 if plan.colocated else plan.gen_nodes} - {plan.teacher_nodes} = {plural(plan.train_nodes, 'node')} x "
                f"{plural(plan.gpn, 'GPU')}") if others else "cluster.num_nodes x GPUs per node"
        out += training_rules(model, v, mcore_version(stage), nodes=plan.cluster_nodes, gpn=plan.gpn,
                              extra_nodes=others, world_what=what)
    # rule 8: generation engines, checked apart from training
    engine_from = len(out)
    eng = plan.engine()
    if eng["backend"] == "megatron":
        pass  # the training layout is the engine: rules 1-7 above checked it
    elif eng["backend"] == "vllm":
        if eng["ep"] > 1 and eng["ep"] % eng["tp"]:
            out.append(Problem(eng["keys"]["dp"], eng["ep"], f"vLLM's EP = DP x TP: expert_parallel_size must be a "
                                                             f"multiple of tensor_parallel_size ({eng['tp']})",
                               f"multiples of {eng['tp']}", rule="engine-layout"))
        elif eng["ep"] > eng["tp"] and get(cfg, "policy.generation.vllm_cfg.async_engine", False):
            out.append(Problem("policy.generation.vllm_cfg.async_engine", True, "EP > TP runs DP inside vLLM, which "
                                                                               "NeMo RL does not support with the async "
                                                                               "engine (NVIDIA-NeMo/RL issue 1101)",
                               f"false, or expert_parallel_size = tensor_parallel_size = {eng['tp']}", rule="engine-layout"))
        if eng["pp"] > 1 and not get(cfg, "policy.generation.vllm_cfg.async_engine", False):
            out.append(Problem("policy.generation.vllm_cfg.async_engine", get(cfg, "policy.generation.vllm_cfg.async_engine"),
                               "NeMo RL runs vLLM with pipeline_parallel_size > 1 only with the async engine",
                               f"policy.generation.vllm_cfg.async_engine=true (with expert_parallel_size = "
                               f"tensor_parallel_size = {eng['tp']})", rule="engine-layout"))
        out += rules.tp_divides_model(model, eng["tp"], "policy.generation.vllm_cfg.tensor_parallel_size")
    else:
        tp_size = as_int(get(cfg, "policy.generation.sglang_cfg.tp_size")) or eng["per"]
        pp_size = as_int(get(cfg, "policy.generation.sglang_cfg.pp_size")) or 1
        if tp_size * pp_size != eng["per"]:
            out.append(Problem("policy.generation.sglang_cfg.tp_size", tp_size, f"SGLang needs tp_size = "
                                                                               f"num_gpus_per_engine / pp_size = {eng['per']} / {pp_size}",
                               str(eng["per"] // max(pp_size, 1)), rule="engine-layout"))
        out += rules.sglang_dp_attention(get(cfg, "policy.generation.sglang_cfg.enable_dp_attention", False),
                                         as_int(get(cfg, "policy.generation.sglang_cfg.dp_size")) or 1, tp_size,
                                         eng["per"], "policy.generation.sglang_cfg")
        out += rules.tp_divides_model(model, tp_size, "policy.generation.sglang_cfg.tp_size")
        if eng["ep"] > 1:
            out += rules.ep_divides_experts(model, eng["ep"], "policy.generation.sglang_cfg.ep_size")
        declared = as_int(get(cfg, "policy.generation.sglang_cfg.sglang_server_config.num_gpus"))
        if declared is not None and declared != plan.gen_gpus:
            out.append(Problem("policy.generation.sglang_cfg.sglang_server_config.num_gpus", declared,
                               f"the generation side has {plural(plan.gen_gpus, 'GPU')}", str(plan.gen_gpus), rule="engine-layout"))
    if eng["backend"] != "megatron":  # its memory is the training model's (the estimate below)
        out += rules.engine_layout(model, plan.gen_gpus, eng["per"], eng["dp"], eng["attn_tp"], eng["keys"],
                                   eng["values"])
        if not any(p.severity == "error" for p in out[engine_from:]):  # memory of an engine that can be built
            out += engine_memory(model, cfg, eng, plan, shape)
    # rule 9: GRPO batch
    prompts, gens = as_int(get(cfg, "grpo.num_prompts_per_step")), as_int(get(cfg, "grpo.num_generations_per_prompt"))
    if prompts and gens and prompts >= 1 and gens >= 1 and isinstance(v.gbs, int) and v.gbs > 0:  # else positive-count
        step = v.mbs * max(1, v.world // (v.tp * v.pp * v.cp)) if v.ok and v.world else 1
        out += rules.grpo_batch(prompts, gens, v.gbs, v.keys["gbs"], step)
    div = as_int(get(cfg, "policy.make_sequence_length_divisible_by"))
    if div is not None and v.ok:
        need = rules.cp_multiple(v.tp, v.cp, v.sp)
        if need > 1 and div % need:
            out.append(Problem("policy.make_sequence_length_divisible_by", div, f"sequences are padded to this multiple; "
                                                                                f"the layout needs a multiple of {need} "
                                                                                "(2 x CP x TP)", str(need), rule="cp-seq"))
    # the training layout's memory, whatever the generation engine's rules said (its GPUs are not the training's)
    if v.ok and plan.train_nodes >= 1 and not any(p.severity == "error" for p in out[:engine_from]):
        est = memory.estimate(model, setup_of(v), shape.gpu_memory_gb, memory_source=shape.memory_source)
        out += memory_problem(est, v.keys["pp"], v.pp, " (policy training)", model=model, setup=setup_of(v),
                              keys=v.keys)
    return out


def warmup_cluster_rules(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """The cluster rules of ``mopd-warmup`` (NeMo RL's SFT: a policy training layout, no generation engine): the
    node shape against the profile (:func:`resource_rules`, as every GPU stage gets), rules 1-7 on the policy's
    training layout (``policy.megatron_cfg.*`` on ``cluster.num_nodes`` x GPUs per node) and rules ``memory`` /
    ``memory-fit`` on its estimate, with the fix rlvr and mopd name (:func:`memory_problem`)."""
    shape = node_shape(cfg, profile)
    model, bad = model_of(cfg)  # rule model-name: this stage has no "layout" check set to say it
    v, plan = rl_layout(cfg, shape)
    out = bad + resource_rules(stage, cfg, shape, plan.total * (shape.config_gpus_per_node or shape.gpus_per_node))
    if model is None or (shape.has_profile and not shape.gpus_per_node) or any(p.severity == "error" for p in out):
        return out
    if plan.train_nodes >= 1:
        out += training_rules(model, v, mcore_version(stage), nodes=plan.cluster_nodes, gpn=plan.gpn)
    if v.ok and plan.train_nodes >= 1 and not any(p.severity == "error" for p in out):
        est = memory.estimate(model, setup_of(v), shape.gpu_memory_gb, memory_source=shape.memory_source)
        out += memory_problem(est, v.keys["pp"], v.pp, " (policy training)", model=model, setup=setup_of(v),
                              keys=v.keys)
    return out


def engine_memory(model: ModelSpec, cfg: dict, eng: dict[str, Any], plan: RLPlan, shape: NodeShape) -> list[Problem]:
    """Rule ``serving-memory`` on a NeMo RL generation engine (:meth:`RLPlan.engine`: vLLM or SGLang), the check
    the eval stage's engine gets (:func:`serving_fit`): BF16 weights per GPU at the engine's attention TP, expert
    shard and PP, one request's KV and Mamba state (``vllm_cfg.max_model_len`` / ``sglang_cfg.context_length``, else
    ``policy.max_total_sequence_length``) and the allowance, against ``gpu_memory_utilization`` (vLLM) or
    ``mem_fraction_static`` (SGLang) x the GPU memory. An **error** when a profile declares the GPU memory
    (``gpu`` or ``gpu_memory``) and the weights alone exceed that budget: the engine cannot start. A **warning**
    when only the state and the allowance (an estimate) tip it over, and without a profile, where the H200 is
    assumed (the message says which). A profile that declares no GPU memory: a **warning** naming the weights per GPU
    and that they were not checked (as the training's memory estimate says). The hint names the smallest PP that fits
    (:func:`_fits_pp`) with what NeMo RL's vLLM asserts need beside it (``async_engine``, EP = TP) and, when the
    generation GPUs do not divide into the larger engines, the generation nodes (and ``run.env.nodes``) that do."""
    if not eng["per"] or eng["attn_tp"] < 1:
        return []
    tp, pp, ep = eng["attn_tp"], eng.get("pp", 1), eng["ep"]
    shard = eng.get("expert_shard", max(ep, 1))
    vllm = eng["backend"] == "vllm"
    pre = "policy.generation.vllm_cfg" if vllm else "policy.generation.sglang_cfg"
    if not shape.gpu_memory_gb:
        if not shape.has_profile:
            return []
        return [Problem(f"{pre}.pipeline_parallel_size" if vllm else f"{pre}.pp_size", pp,
                        f"a generation engine at TP{tp} PP{pp} EP{ep} holds "
                        f"{memory.inference_weights_gb(model, tp, shard, pp):.0f} GB of BF16 weights per GPU, not "
                        f"checked: {shape.memory_source}", 'declare the GPU in the profile: gpu = "H100" (or '
                        "gpu_memory = GB)", rule="serving-memory", severity="warning")]
    try:
        frac = float(eng["mem"]) if eng["mem"] is not None else 0.9
    except (TypeError, ValueError):
        return []
    max_len = as_int(get(cfg, f"{pre}.max_model_len" if vllm else f"{pre}.context_length")) \
        or as_int(get(cfg, "policy.max_total_sequence_length")) or 4096
    # the fix: PP > 1 needs vLLM's async engine, which NeMo RL runs only with EP = TP (vllm_generation.py asserts)
    fix_shard = tp if vllm and ep > tp else shard
    fit = _fits_pp(model, tp, fix_shard, max_len, frac, shape.gpu_memory_gb)
    if fit is None:
        valid = "GPUs with more memory (the profile's gpu), or a smaller model"
    else:
        per = tp * fit
        if vllm:
            keys = [f"{pre}.pipeline_parallel_size={fit}"]
            keys += [] if get(cfg, f"{pre}.async_engine", False) else [f"{pre}.async_engine=true"]
            keys += [f"{pre}.expert_parallel_size={tp}"] if ep > tp else []
        else:
            keys = [f"{pre}.pp_size={fit}", f"{pre}.sglang_server_config.num_gpus_per_engine={per}"]
        if plan.gen_gpus % per and not plan.colocated:
            step = per // math.gcd(per, max(plan.gen_gpn, 1))
            nodes = -(-plan.gen_nodes // step) * step
            keys += [f"policy.generation.colocated.resources.num_nodes={nodes}",
                     f"run.env.nodes={plan.run_nodes + nodes - plan.gen_nodes}"]
        elif plan.gen_gpus % per:
            keys += [f"(the {plan.gen_gpus} generation GPUs must be a multiple of {per})"]
        valid = (f"{' '.join(keys)} ({per}-GPU engines, TP{tp} PP{fit} EP{tp if vllm and ep > tp else ep}: "
                 f"{memory.inference_weights_gb(model, tp, fix_shard, fit):.0f} GB per GPU)")
    weights_fit = memory.inference_weights_gb(model, tp, shard, pp) <= frac * shape.gpu_memory_gb
    if not shape.has_profile:
        severity, note = "warning", shape.memory_source
    elif weights_fit:
        severity, note = "warning", (f"the weights alone fit; the state and the {memory.OVERHEAD_GB:.0f} GB allowance "
                                     "are estimates")
    else:
        severity, note = "error", ""
    return serving_fit(model, tp, shard, pp, max_len, frac, shape.gpu_memory_gb,
                       f"a generation engine at TP{tp} PP{pp} EP{ep}",
                       f"{pre}.pipeline_parallel_size" if vllm else f"{pre}.pp_size", pp, valid,
                       severity=severity, engine="vLLM" if vllm else "SGLang",
                       utilization_key="gpu_memory_utilization" if vllm else "mem_fraction_static", note=note)


def serving_fit(model: ModelSpec, tp: int, ep: int, pp: int, max_len: int, utilization: float, gpu_memory_gb: float,
                layout: str, key: str, value: Any, valid: str, **how: Any) -> list[Problem]:
    """Rule ``serving-memory`` (:func:`nemotron.layout.rules.serving_memory`) on one serving engine, the one check of
    the eval stage's engine and of NeMo RL's generation engines: BF16 weights per GPU
    (:func:`nemotron.layout.memory.inference_weights_gb` at TP ``tp``, expert shard ``ep``, PP ``pp``), one
    ``max_len``-token request's KV and Mamba state (:func:`nemotron.layout.memory.serving_state_gb`) and the
    :data:`nemotron.layout.memory.OVERHEAD_GB` allowance, in GB per GPU, against ``utilization`` x
    ``gpu_memory_gb`` (GB). ``how``: the rule's ``severity``, ``engine``, ``utilization_key``, ``note``."""
    return rules.serving_memory(memory.inference_weights_gb(model, tp, ep, pp), memory.serving_state_gb(model, tp, pp, max_len),
                                memory.OVERHEAD_GB, gpu_memory_gb, utilization, layout, key, value, valid, **how)


def _fits_wider_tp(model: ModelSpec, tp: int, max_len: int, frac: float, gpu_gb: float, gpn: int) -> tuple[int, int] | None:
    """The serving engine ``(TP, PP)`` with EP = TP on the fewest nodes of ``gpn`` GPUs (:func:`_engine_nodes`),
    then the fewest GPUs, whose TP is larger than ``tp``, within one node, dividing the model (rule tp-model), and
    fits by :func:`_fits_pp`; None when none does."""
    best = None
    for wtp in (d for d in rules.divisors(max(gpn, 1)) if d > tp):
        if rules.tp_divides_model(model, wtp, "tp"):
            continue
        pp = _fits_pp(model, wtp, wtp, max_len, frac, gpu_gb)
        if pp is None:
            continue
        rank = (_engine_nodes(wtp * pp, gpn), wtp * pp)
        if best is None or rank < best[0]:
            best = (rank, (wtp, pp))
    return None if best is None else best[1]


def _engine_nodes(engine_gpus: int, gpn: int) -> int:
    """The fewest nodes of ``gpn`` GPUs whose GPUs are a multiple of an engine's ``engine_gpus`` (NeMo RL's
    evaluator asserts it: rule engine-layout)."""
    gpn = max(gpn, 1)
    return engine_gpus * gpn // math.gcd(engine_gpus, gpn) // gpn


def _fits_pp(model: ModelSpec, tp: int, ep: int, max_len: int, frac: float, gpu_gb: float) -> int | None:
    """The smallest PP (a divisor of the layers, up to 16) at which a TP ``tp`` EP ``ep`` engine fits, or None."""
    for pp in (d for d in rules.divisors(model.num_layers) if d <= 16):
        need = memory.inference_weights_gb(model, tp, ep, pp) + memory.serving_state_gb(model, tp, pp, max_len) \
            + memory.OVERHEAD_GB
        if need <= frac * gpu_gb:
            return pp
    return None


def gb200_tuned_rules(cfg: dict, shape: NodeShape) -> list[Problem]:
    """Rule gb200-tuned on a NeMo RL stage's policy (``policy.megatron_cfg``, ``policy.generation.vllm_kwargs``)."""
    pre, gen = "policy.megatron_cfg", "policy.generation.vllm_kwargs"
    gpn = as_int(get(cfg, "cluster.gpus_per_node")) or shape.gpus_per_node
    return rules.gb200_tuned(shape.gpu_arch, gpn, as_int(get(cfg, f"{pre}.expert_model_parallel_size")) or 1,
                             get(cfg, f"{pre}.moe_token_dispatcher_type"), get(cfg, f"{pre}.moe_flex_dispatcher_backend"),
                             get(cfg, f"{pre}.hybridep_use_mnnvl"), as_int(get(cfg, f"{pre}.hybridep_num_ranks_per_nvlink_domain")),
                             get(cfg, f"{gen}.moe_backend") if str(get(cfg, "policy.generation.backend", "vllm")) == "vllm" else None,
                             pre, gen, declared=shape.declared_arch, profile_name=shape.profile_name)


def eval_serving_rules(model: ModelSpec, cfg: dict, shape: NodeShape) -> list[Problem]:
    """The vLLM engine of the eval stage's cluster backend (NeMo RL's evaluator), checked as NeMo RL and vLLM check it
    at start-up: GPUs of the Ray cluster (``cluster.num_nodes`` x ``cluster.gpus_per_node``) divisible by TP x PP,
    EP a multiple of TP, PP > 1 only with ``async_engine`` and EP != TP only without it
    (nemo_rl/models/generation/vllm/vllm_generation.py asserts all four), TP dividing the model (rule tp-model),
    and the memory (rule serving-memory, an error: vLLM cannot start), against the profile's GPU memory."""
    vc = "generation.vllm_cfg"
    tp = as_int(get(cfg, f"{vc}.tensor_parallel_size")) or 1
    pp = as_int(get(cfg, f"{vc}.pipeline_parallel_size")) or 1
    ep = as_int(get(cfg, f"{vc}.expert_parallel_size")) or 1
    async_engine = bool(get(cfg, f"{vc}.async_engine", False))
    gpn = as_int(get(cfg, "cluster.gpus_per_node")) or shape.gpus_per_node
    nodes = as_int(get(cfg, "cluster.num_nodes")) or as_int(get(cfg, "run.env.nodes")) or 1
    out: list[Problem] = []
    if (tp * pp) < 1 or (nodes * gpn) % (tp * pp):
        out.append(Problem("cluster.num_nodes", nodes, f"the evaluator's {nodes} x {gpn} GPUs must be a multiple of "
                                                       f"the engine's TP x PP = {tp} x {pp}",
                           f"cluster.num_nodes (run.env.nodes) = a multiple of {max(1, tp * pp // max(gpn, 1))}",
                           rule="engine-layout"))
    if ep > 1 and ep % tp:
        out.append(Problem(f"{vc}.expert_parallel_size", ep, f"vLLM's EP = DP x TP: a multiple of "
                                                             f"tensor_parallel_size ({tp})", f"multiples of {tp}",
                           rule="engine-layout"))
    elif ep > 1 and ep != tp and async_engine:
        out.append(Problem(f"{vc}.async_engine", True, "EP != TP runs DP inside vLLM, which NeMo RL does not support "
                                                      "with the async engine (NVIDIA-NeMo/RL issue 1101)",
                           f"false, or expert_parallel_size = tensor_parallel_size = {tp}", rule="engine-layout"))
    if pp > 1 and not async_engine:
        out.append(Problem(f"{vc}.async_engine", async_engine, "NeMo RL runs vLLM with pipeline_parallel_size > 1 only "
                                                              "with the async engine",
                           f"{vc}.async_engine=true (with expert_parallel_size = tensor_parallel_size)",
                           rule="engine-layout"))
    out += rules.tp_divides_model(model, tp, f"{vc}.tensor_parallel_size")
    if out or not shape.gpu_memory_gb:
        return out
    try:
        frac = float(get(cfg, f"{vc}.gpu_memory_utilization", 0.9))
    except (TypeError, ValueError):
        return out
    max_len = as_int(get(cfg, f"{vc}.max_model_len")) or 4096
    fit = _fits_pp(model, tp, ep, max_len, frac, shape.gpu_memory_gb)
    wider = None if fit is not None else _fits_wider_tp(model, tp, max_len, frac, shape.gpu_memory_gb, gpn)
    if wider is not None:  # no PP fits at this TP: a wider engine (EP = TP, as PP > 1 needs) that does
        wtp, wpp = wider
        need_nodes = _engine_nodes(wtp * wpp, gpn)
        async_words = f" {vc}.async_engine=true" if wpp > 1 and not async_engine else ""
        valid = (f"{vc}.tensor_parallel_size={wtp} {vc}.pipeline_parallel_size={wpp} {vc}.expert_parallel_size={wtp}"
                 f"{async_words} run.env.nodes={need_nodes} (TP{wtp} PP{wpp} EP{wtp}: "
                 f"{memory.inference_weights_gb(model, wtp, wtp, wpp):.0f} GB per GPU)")
    elif fit is None:
        valid = "more GPU memory (the profile's gpu), or a smaller model"
    else:
        need_nodes = -(-tp * fit // max(gpn, 1))
        valid = (f"{vc}.pipeline_parallel_size={fit} {vc}.async_engine=true{' ' + vc + '.expert_parallel_size=' + str(tp) if ep != tp else ''}"
                 f" run.env.nodes={need_nodes} (TP{tp} PP{fit} EP{tp if ep != tp else ep}: "
                 f"{memory.inference_weights_gb(model, tp, tp if ep != tp else ep, fit):.0f} GB per GPU)")
    out += serving_fit(model, tp, ep, pp, max_len, frac, shape.gpu_memory_gb, f"the eval engine at TP{tp} PP{pp} EP{ep}",
                       f"{vc}.pipeline_parallel_size", pp, valid)
    return out


# ------------------------------------------------------------------------------------ describe
def pipeline_table(model: ModelSpec, pp: int, first: int | None, last: int | None, mtp_depths: int | None,
                   title: str) -> tuple[str, list[str], list[list[str]]]:
    rows = []
    depths = model.mtp_depths if mtp_depths is None else mtp_depths
    ranges = rules.stage_layers(model.num_layers, pp, first, last)
    for i, (a, b) in enumerate(ranges):
        c = model.counts(model.pattern[a:b])
        mtp = f"{model.mtp_pattern} x{depths}" if (i == len(ranges) - 1 and depths) else ""
        extra = []
        if i == 0:
            extra.append("embedding")
        if i == len(ranges) - 1:
            extra.append("output")
        rows.append([str(i), f"{a}-{b - 1}", str(b - a), str(c["M"]), str(c["E"]), str(c["*"]), mtp or "-",
                     ", ".join(extra) or "-"])
    return (title, ["PP stage", "layers", "count", "Mamba-2", "MoE", "attention", "MTP", "also"], rows)


def layout_rows(model: ModelSpec, v: TrainView, mcore: str | None, gpn: int, training: bool = True) -> list[list[str]]:
    need = v.tp * v.pp * v.cp
    dp = v.world // need if need and v.world % need == 0 else None
    ex = v.pp * v.ep * v.etp
    edp = v.world // ex if ex and v.world % ex == 0 else None
    rows = [
        ["world", f"{plural(v.world, 'GPU')} ({plural(v.world // gpn, 'node')} x {gpn})" if gpn else str(v.world)],
        ["TP / PP / CP", f"{v.tp} / {v.pp} / {v.cp}" + (" (sequence parallel)" if v.sp and v.tp > 1 else "")],
        ["EP / ETP", f"{v.ep} / {v.etp}" + (f" ({model.num_experts // v.ep} experts per rank)" if model.is_moe and model.num_experts % v.ep == 0 else "")],
        ["DP = world / (TP x PP x CP)", str(dp) if dp else "not an integer"],
        ["EDP = world / (PP x EP x ETP)", str(edp) if edp else "not an integer"],
        ["minimum GPUs = PP x max(TP x CP, EP x ETP)", str(v.pp * max(v.tp * v.cp, v.ep * v.etp))],
        ["KV groups at this TP", rules.kv_note(model, v.tp, mcore)],
    ]
    if training and dp and isinstance(v.gbs, int) and isinstance(v.mbs, int) and v.mbs:
        rows.append(["micro-batches per step = GBS / (MBS x DP)",
                     f"{v.gbs} / ({v.mbs} x {dp}) = {v.gbs / (v.mbs * dp):g}"])
    if training and isinstance(v.seq, int):
        rows.append(["tokens per step", f"{v.gbs * v.seq:,}" if isinstance(v.gbs, int) else "-"])
    return rows


def memory_table(est: memory.Estimate, title: str) -> tuple[str, list[str], list[list[str]]]:
    return (title, ["term", "per GPU"], est.rows())


def describe_megatron(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[tuple[str, list[str], list[list[str]]]]:
    model, _ = model_of(cfg)
    if model is None:
        return []
    tables = []
    if backend(cfg) == LOCAL:
        pc = catalogue.param_count(model, include_mtp=False)  # the local backend builds no MTP block
        left_out = f"; {MTP_LEFT_OUT}" if model.mtp_depths else ""
        rows = [["model", model.describe()],
                ["parameters", f"{pc['total'] / 1e6:.1f} M ({pc['embedding'] / 1e6:.1f} M embedding{left_out})"],
                ["runs", "one process on this machine (CPU, or one GPU when visible)"]]
        return [("local run", ["", "value"], rows)]
    if _cpu_conversion(stage, cfg):
        return [("conversion", ["", "value"], [["device", "CPU (one process on one node; the host RAM holds the model)"],
                                          ["model", model.describe()]])]
    shape = node_shape(cfg, profile)
    v = megatron_layout(cfg, shape)
    if not v.ok or not shape.gpus_per_node:
        return []
    family = stage.family
    if model.num_layers % v.pp == 0 or v.first is not None or v.last is not None:
        tables.append(pipeline_table(model, v.pp, v.first, v.last, v.mtp_depths, f"pipeline stages of {model.name}"))
    tables.append(("parallel layout", ["", "value"], layout_rows(model, v, mcore_version(stage), shape.gpus_per_node,
                                                          training=family.batch)))
    if family.quantizes:
        ek = {k: as_int(get(cfg, f"export.{k}", 1)) or 1 for k in (
            "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size")}
        tables.append(("export layout", ["", "value"], [
            ["TP / PP / EP", f"{ek['tensor_model_parallel_size']} / {ek['pipeline_model_parallel_size']} / {ek['expert_model_parallel_size']}"],
            ["weights per GPU (BF16)", f"{memory.inference_weights_gb(model, ek['tensor_model_parallel_size'], ek['expert_model_parallel_size'], ek['pipeline_model_parallel_size']):.0f} GB"]]))
    if model.num_layers % v.pp == 0 or v.first is not None or v.last is not None:
        inference = family.inference
        est = memory.estimate(model, setup_of(v, inference=inference), shape.gpu_memory_gb,
                              label="inference" if inference else "training", memory_source=shape.memory_source)
        tables.append(memory_table(est, "memory per GPU (estimate)" + family.memory_note))
    return tables


def describe_rl(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[tuple[str, list[str], list[list[str]]]]:
    model, _ = model_of(cfg)
    if model is None:
        return []
    if backend(cfg) == LOCAL:
        return [("local run", ["", "value"], [["model", model.describe()], ["runs", "one process on this machine"]])]
    shape = node_shape(cfg, profile)
    v, plan = rl_layout(cfg, shape)
    tables = []
    rows = [["training", f"{plural(plan.train_nodes, 'node')} ({plural(plan.train_nodes * plan.gpn, 'GPU')})" +
             (" (generation colocated)" if plan.colocated else "")],
            ["generation", "colocated with training" if plan.colocated else f"{plural(plan.gen_nodes, 'node')} ({plural(plan.gen_gpus, 'GPU')})"],
            ["NeMo Gym", plural(plan.gym_nodes, "node")]]
    if plan.opd:
        rows.append(["teachers", f"{plan.unique_teachers} unique x {plural(plan.t_nodes, 'node')} = {plural(plan.teacher_nodes, 'node')}"
                     + ("" if plan.non_colocated_teachers else " (colocated)")])
    rows.append(["cluster.num_nodes (NeMo RL)", str(plan.cluster_nodes)])
    rows.append(["total = run.env.nodes", f"{plan.total} (asked: {plan.run_nodes})"])
    tables.append(("node arithmetic", ["role", "nodes"], rows))
    eng = plan.engine()
    erow = [["backend", eng["backend"]], ["GPUs per engine", str(eng["per"])], ["DP-attention", str(eng["dp"])],
            ["attention TP", str(eng["attn_tp"])], ["engines", f"{plan.gen_gpus // eng['per'] if eng['per'] else '?'}"]]
    if eng["per"]:
        w = memory.inference_weights_gb(model, eng["attn_tp"] or 1, eng.get("expert_shard", max(eng["ep"], 1)),
                                        eng.get("pp", 1))
        budget = f" of {float(eng['mem']) * shape.gpu_memory_gb:.0f} GB budget" if eng["mem"] and shape.gpu_memory_gb else ""
        erow.append(["weights per GPU (BF16)", f"{w:.0f} GB{budget}"])
    tables.append(("generation engines", ["", "value"], erow))
    envs = get(cfg, "environments")
    if isinstance(envs, dict) and envs:
        env_rows = []
        for name, e in envs.items():
            if not isinstance(e, dict):
                continue
            on = bool(e.get("enabled", False))
            kind = str(e.get("kind"))
            where = ("NeMo RL built-in (CPU)" if kind == "builtin" else
                     f"endpoint {e.get('endpoint')}" if e.get("endpoint") else
                     f"served in Gym: {e.get('model')}" if e.get("model") else
                     f"images {e.get('image')}" if e.get("image") else "NeMo Gym (CPU)" if kind != "judge" else "-")
            env_rows.append([name, kind, "on" if on else "off", where if on else "-"])
        tables.append(("environments", ["name", "kind", "state", "runs on"], env_rows))
    if plan.opd:
        general = plan.panel.get("general")
        used = set(plan.used_slots())
        trows = []
        for slot, path in plan.panel.items():
            note = "falls back to general" if slot != "general" and (slot in plan.fallback or path == general) else ""
            routed = "yes" if slot in used else "-"
            trows.append([slot, str(path), note or "-", routed])
        tables.append(("teacher panel", ["slot", "checkpoint", "fallback", "receives tasks"], trows))
        if plan.non_colocated_teachers:
            tc = plan.tkey
            tv = {k: as_int(get(cfg, f"{tc}.{k}", 1)) or 1 for k in (
                "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
                "context_parallel_size")}
            w = memory.inference_weights_gb(model, tv["tensor_model_parallel_size"], tv["expert_model_parallel_size"],
                                            tv["pipeline_model_parallel_size"])
            tables.append(("teacher layout", ["", "value"], [
                ["TP / CP / PP / EP", " / ".join(str(tv[k]) for k in ("tensor_model_parallel_size", "context_parallel_size",
                                                                     "pipeline_model_parallel_size", "expert_model_parallel_size"))],
                ["GPUs per teacher", f"{plural(plan.t_nodes, 'node')} x {plan.t_gpn} = {plan.t_nodes * plan.t_gpn}"],
                ["weights per GPU (BF16, inference)", f"{w:.0f} GB" + (f" of {shape.gpu_memory_gb:.0f} GB" if shape.gpu_memory_gb else "")],
            ]))
    if v.ok and plan.train_nodes >= 1 and (model.num_layers % v.pp == 0 or v.first is not None):
        tables.append(pipeline_table(model, v.pp, v.first, v.last, v.mtp_depths,
                                     f"policy pipeline stages of {model.name}"))
        tables.append(("policy training layout", ["", "value"], layout_rows(model, v, mcore_version(stage), plan.gpn)))
        est = memory.estimate(model, setup_of(v), shape.gpu_memory_gb, memory_source=shape.memory_source)
        tables.append(memory_table(est, "policy training memory per GPU (estimate)"))
    return tables



def on_this_machine(executor: str | None) -> bool:
    """Whether a job of ``executor`` (a plan's or a profile's; None or ``direct``: no profile) runs on this machine:
    :func:`nemotron.profiles.schema.on_this_machine`, imported when asked, so that ``import nemotron.validation``
    stays free of pydantic."""
    from nemotron.profiles.schema import on_this_machine as ask

    return ask(executor)


__all__ = ["RLPlan", "backend", "describe_megatron", "describe_rl", "model_of", "validate_training"]


def rl_export_rules(cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Rule rl-export-host-memory on a NeMo RL stage: the host memory of a node of ``profile``
    (:func:`nemotron.layout.views.host_memory`: Slurm ``mem`` when a concrete size, else ``host_memory``) against
    what the Hugging Face export after training holds (:func:`nemotron.layout.views.rl_export_size` x 2 bytes).
    The run checks the Ray head's real memory at job start with the same rule (:func:`nemotron.runtime.rl.nemo_rl.precheck`).
    A policy whose parameters cannot be counted (:func:`nemotron.layout.views.rl_export_size`: a model outside the
    catalogue whose ``policy.model_name`` has no readable NemotronH ``config.json`` here) is a warning that the check did
    not run, on ``policy.model_name``."""
    size = rl_export_size(cfg)
    if size is None:
        return []
    if size.params is None:
        return rules.rl_export_host_memory(None, None, "policy.model_name", get(cfg, "policy.model_name"), "",
                                           "a catalogue model.name, or policy.model_name = the Hugging Face folder "
                                           "(its NemotronH config.json) where this machine sees it",
                                           counted=size.source)
    params = size.params
    need_gb = -(-params * rules.EXPORT_BYTES_PER_PARAM // 10**9)
    mem = host_memory(profile)
    if mem.bytes is None:
        fix = (f"set host_memory = <the RAM of a node, GB> in the profile (or a Slurm mem size) so the dry-run checks "
               f"it; the Ray head's node needs at least {need_gb} GB")
    elif mem.key.endswith(".mem"):
        need_gib = -(-params * rules.EXPORT_BYTES_PER_PARAM // 2**30)  # Slurm's G is 2^30 bytes
        fix = (f"profile.mem={need_gib}G or more on nodes that have that RAM, or mem = 0 and host_memory = their RAM "
               "in GB")
    else:
        fix = f"nodes with at least {need_gb} GB of RAM (a partition of them), and host_memory = their RAM in GB"
    return rules.rl_export_host_memory(params, mem.bytes, mem.key, mem.value, mem.source, fix,
                                       counted="" if size.source.startswith("catalogue ") else size.source)
