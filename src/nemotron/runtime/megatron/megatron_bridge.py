"""The cluster runtime of ``ultra3 pretrain``, ``ultra3 sft`` and ``ultra3 convert``: our compiled config →
Megatron-Bridge, inside the NeMo container (``stages/images.toml`` ``nemo``).

What the entry scripts (``stages/ultra3/{pretrain,sft,convert}/run.py``, through :mod:`nemotron.runtime.dispatch`) call
with ``backend: megatron-bridge``, on every rank that torchrun starts:

1. :func:`precheck` — before any heavy import, one line per problem: Megatron-Bridge importable; the
   installed megatron-bridge / megatron-core versions, and their git commits where pip recorded one, are the
   ones the configs and the key list were checked against (``stages/images.toml`` ``[nemo].frameworks`` and
   ``[nemo].commits``, ``keylists/megatron-bridge-<version>-<commit>.json``);
   the GPUs this node shows equal ``run.env.gpus_per_node`` and torchrun's ``WORLD_SIZE`` equals
   nodes x GPUs per node; the inputs exist and are of the right kind (pretrain: ``blend.json`` and every
   ``.bin/.idx`` it lists; SFT: the packed Parquet files and their metadata, and the starting checkpoint;
   convert: the source checkpoint).
2. :func:`translate` — pure: the compiled config → what Megatron-Bridge's ``ConfigContainer`` gets
   (:class:`BridgeConfig`): our own keys dropped (:data:`nemotron.config.keys.OWN_KEYS`), every other key passed
   through under its Megatron-Bridge name (``train.*``, ``model.*``, ``optimizer.*``, ``scheduler.*`` —
   WSD included —, ``ddp.*``, ``checkpoint.*``, ``logger.*``, ``rng.*``, ``dist.*``, ``validation.*``,
   ``tokenizer.*``); pretrain's ``blend.json`` turned into ``dataset.blend_per_split`` (the form
   Megatron-Bridge's own ``per_split_data_args_path`` reader makes, ``data/loaders.py``
   ``get_blend_and_blend_per_split``); SFT's dataset as a ``FinetuningDatasetConfig`` on our packed Parquet
   with ``PackedSequenceSpecs`` at the pack size (= ``model.seq_length``) and ``answer_only_loss`` on
   (the loader ignores our stored loss mask otherwise); the mixed-precision preset with the NVFP4
   BF16-layer settings; the exit-signal handler on (SIGTERM, the warning Slurm sends
   ``run.signal_before_s`` before the time limit: save and stop); ``checkpoint.load = checkpoint.save``
   (a stable folder per run name: every job of a run resumes from the last save); W&B identity from
   :mod:`nemotron.runtime.megatron.tracking`.
3. :func:`main` — heavy: the Ultra config from the recipe ``recipe.name`` (``megatron.bridge.recipes``),
   built with ``hf_path`` = ``recipe.hf_model_id`` (a repo id or a local folder), or for an ``<N>layer``
   slice a folder holding the slice's ``config.json`` from our catalogue (:func:`hf_source`), from which
   AutoBridge builds the model provider; our values applied on top (:func:`_recipe`, :func:`_apply`); the MoE routing check on the provider (:func:`nemotron.runtime.megatron.routing.require_routing`); the
   data folder marked as consumed; Megatron-Bridge's ``pretrain`` / ``finetune`` with ``gpt_step.forward_step``,
   wrapped so that Megatron-Bridge's exit-signal handler is entered (:mod:`nemotron.runtime.megatron.exit_signal`).
   Exit 0 when the last saved iteration reached ``train.train_iters``, 75 when the run saved and stopped
   earlier (the exit-signal handler, after which Megatron-Bridge ends with ``sys.exit(0)``: :func:`train_exit_code`
   reads the saved iteration and writes the requeue marker, from which the job's batch script requeues or
   continues the job), 1 on a failure.
   Convert: ``AutoBridge.import_ckpt`` (HF → Megatron) or ``AutoBridge.export_ckpt`` (Megatron → HF; the
   HF ``config.json`` then rewritten to the v4 form NeMo RL reads, :mod:`nemotron.runtime.common.convert`; the
   tokenizer the model was trained with saved beside the weights, :func:`export_tokenizer_source`; then the
   export's self-check, :mod:`nemotron.runtime.megatron.export_check`: its config shape against the checkpoint's, its
   tokenizer, and on a single-rank GPU export its reload in transformers and its logits against the exported Megatron model's on a
   fixed batch, recorded in ``selfcheck.json`` beside it; exit 1 when it fails).

APIs as in Megatron-Bridge branch ``nemotron_3_ultra`` at 4588417 (package 0.5.0; ``recipes/nemotronh/
nemotron_3_ultra.py`` ``nemotron_3_ultra_pretrain_config(hf_path=, seq_length=)``, ``training/pretrain.py``
``pretrain(config, forward_step_func)``,
``training/finetune.py`` ``finetune``, ``training/gpt_step.py`` ``forward_step``,
``training/mixed_precision.py`` ``get_mixed_precision_config``, ``models/conversion/auto_bridge.py``
``AutoBridge.from_hf_pretrained / to_megatron_provider / import_ckpt / export_ckpt``,
``data/datasets/packed_sequence.py`` ``PackedSequenceSpecs``, ``training/config.py``
``FinetuningDatasetConfig``). Steps 1 and 2 are tested here (tests/runtime/test_runtime_megatron_bridge.py). Of
step 3, :func:`_recipe` and :func:`_apply` run with the real upstream sources on a CPU in the contract tests
(tests/contract/test_megatron_bridge.py: the recipe builders, the provider AutoBridge makes, the routing
check, ``ConfigContainer.validate()`` at the job's world size; tests/contract/test_megatron_core.py:
Megatron-Core's ``TransformerConfig.__post_init__`` through the provider's ``finalize()``). ``pretrain`` /
``finetune`` need Transformer Engine and GPUs inside NVIDIA's container: not run by this project.

Stdlib only at import time (step 1 reads ``blend.json`` with :mod:`nemotron.runtime.megatron.pretrain_data`, numpy).
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.config.keys import OWN_KEYS
from nemotron.config.registry import Stage, TrainingData, get_stage
from nemotron.errors import did_you_mean
from nemotron.runtime.common import prestart
from nemotron.runtime.common.settings import EXIT_REQUEUE, get

#: ConfigContainer sections our configs pass through field by field (dataset and mixed_precision are built).
PASS_THROUGH = ("model", "train", "validation", "optimizer", "scheduler", "ddp", "checkpoint", "logger", "rng",
                "dist", "tokenizer", "comm_overlap", "profiling", "ft", "straggler", "rerun_state_machine")
#: Mixed-precision fields that keep layers in BF16 around NVFP4/FP8 GEMMs (Megatron-Bridge MixedPrecisionConfig;
#: NVIDIA-NeMo/Nemotron ultra3 train.py sets them for NVFP4 pretraining).
BF16_LAYER_KEYS = ("first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")
#: Our pack-spec keys (dataset.packed_sequence_specs.*) = PackedSequenceSpecs fields (Megatron-Bridge 4588417).
PACK_KEYS = ("packed_sequence_size", "packed_train_data_path", "packed_val_data_path", "packed_metadata_path",
             "pad_seq_to_mult", "pad_cu_seqlens", "tokenizer_model_name")


@dataclass(frozen=True)
class BridgeConfig:
    """What the Megatron-Bridge run gets, built from the compiled config by :func:`translate`.

    Attributes:
        stage: the registry stage's name (``pretrain``, ``sft``, ``convert``, or any row :func:`row` accepts).
        recipe: Megatron-Bridge recipe function (``recipe.name``) the ``ConfigContainer`` starts from; None
            for convert.
        hf_model_id: ``recipe.hf_model_id``: the HF repo id or local folder of the model (its ``config.json``
            for the full model; the tokenizer fallback).
        model_name: our catalogue entry (the routing check's expectations).
        sections: ConfigContainer section → {field: value}, set on the recipe's objects in order.
        dataset_kind: ``gpt`` (pretrain: ``GPTDatasetConfig``) or ``finetuning`` (SFT: ``FinetuningDatasetConfig``).
        dataset: the dataset fields; for SFT ``packed_sequence_specs`` is a dict of ``PackedSequenceSpecs`` fields.
        mixed_precision: preset name (``bf16_mixed``, ``bf16_with_nvfp4_mixed``, ...) or None (keep the recipe's).
        mixed_precision_overrides: MixedPrecisionConfig fields set after the preset (the BF16 layers of NVFP4).
        env: environment for the run (W&B identity; never a secret).
        train_iters: ``train.train_iters`` (the exit code compares the last saved iteration with it).
        checkpoint_dir: ``checkpoint.save``.
        convert: convert's settings (direction, source, output_dir, hf_config_form, device) or None.
        hf_config: for an ``<N>layer`` slice, the HF ``config.json`` (a dict) of the slice, from our catalogue
            (:func:`nemotron.config.catalogue.hf_config`: the layer count, hybrid pattern and MTP block the memory
            estimate describes): the job writes it to a folder (:func:`hf_source`) and builds the recipe with
            ``hf_path`` = that folder, so AutoBridge makes the slice's provider. None for a full model: the recipe
            reads ``recipe.hf_model_id``'s own ``config.json``.
        trust_remote_code: ``recipe.trust_remote_code``: passed to AutoBridge only when true, as Megatron-Bridge's
            ``examples/conversion/convert_checkpoints.py`` passes ``--trust-remote-code``.
        seq_length: ``model.seq_length`` (the recipe builder's ``seq_length``).
    """

    stage: str
    recipe: str | None
    hf_model_id: str
    model_name: str
    sections: dict[str, dict[str, Any]]
    dataset_kind: str | None = None
    dataset: dict[str, Any] = field(default_factory=dict)
    mixed_precision: str | None = None
    mixed_precision_overrides: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    train_iters: int | None = None
    checkpoint_dir: str | None = None
    convert: dict[str, Any] | None = None
    hf_config: dict[str, Any] | None = None
    trust_remote_code: bool = False
    seq_length: int | None = None
    data: TrainingData | None = None


#: The classes the job constructs itself from a section of our config (not the recipe's object set field by field),
#: per dataset kind (:attr:`BridgeConfig.dataset_kind`): their required fields (no default) must be in the config
#: (:func:`nemotron.config.keys.missing_keys`).
CONSTRUCTED = {"finetuning": {"dataset": "FinetuningDatasetConfig"}}


class TranslateError(ValueError):
    """The compiled config cannot be given to Megatron-Bridge as it is; ``str()`` names the key."""


def row(stage: str) -> Stage:
    """The registry row of ``stage`` when this runtime runs it: a conversion (its family ``converts``) or a training
    stage that reads training data (:attr:`nemotron.config.registry.Stage.training_data`: a blend of ``.bin/.idx``
    or packed Parquet).

    Raises:
        TranslateError: ``stage`` is not a registry stage, or one this runtime does not run (named, with the ones
            it does).
    """
    try:
        found = get_stage(stage)
    except KeyError as exc:
        raise TranslateError(str(exc.args[0])) from None
    if not found.bridge:
        from nemotron.config.registry import STAGES

        runs = ", ".join(s.name for s in STAGES if s.bridge)
        raise TranslateError(f"stage {stage!r}: the Megatron-Bridge runtime runs the stages that train on "
                             f"pretrain-data or sft-data and the conversions ({runs})")
    return found


# ------------------------------------------------------------------------------------ pure translation
def blend_per_split(blend: dict[str, list[Any]]) -> list[tuple[list[str], list[float]] | None]:
    """Megatron-Core's ``blend_per_split`` (train, valid, test) from
    :func:`nemotron.runtime.megatron.pretrain_data.read_blend`'s entries: ``[([prefix, ...], [weight, ...]) | None] *
    3``; a split missing from blend.json is None (Megatron then builds no dataset for it). Weights are passed as
    written: Megatron normalises them."""
    out: list[tuple[list[str], list[float]] | None] = []
    for split in ("train", "valid", "test"):
        entries = blend.get(split) or []
        out.append(([str(e.prefix) for e in entries], [float(e.weight) for e in entries]) if entries else None)
    return out


def _strip_own(cfg: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``cfg`` without our own keys (:data:`nemotron.config.keys.OWN_KEYS`)."""
    out = copy.deepcopy(cfg)
    for key in OWN_KEYS:
        parts = key.split(".")
        node: Any = out
        for p in parts[:-1]:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return out


def translate(cfg: dict[str, Any], stage: str, blend: dict[str, list[Any]] | None = None,
              data_tokenizer: dict[str, Any] | str | None = None, data_version: str | None = None) -> BridgeConfig:
    """The Megatron-Bridge form of the compiled ``cfg`` of ``stage`` (see the module docstring, step 2).

    ``blend``: pretrain's parsed blend.json (:func:`nemotron.runtime.megatron.pretrain_data.read_blend`);
    ``data_tokenizer``: the tokenizer the data was prepared with, used when ``tokenizer.tokenizer_model`` is
    null: the ``TokenizerConfig`` fields of its manifest (:func:`nemotron.data.outputs.megatron_tokenizer`), or a
    tokenizer path; ``data_version``: the data folder's version (W&B run name).

    Raises:
        TranslateError: a value Megatron-Bridge cannot take as it is (the message names the key).
    """
    from nemotron.runtime.megatron.tracking import data_label, wandb_identity

    the_row = row(stage)
    own = _strip_own(cfg)
    hf_model_id = get(cfg, "recipe.hf_model_id")
    if not hf_model_id:
        raise TranslateError("recipe.hf_model_id is not set: AutoBridge builds the model provider from that HF config "
                             "(a Hugging Face repo id, or a local folder holding its config.json)")
    model_name = str(get(cfg, "model.name", "ultra"))
    trust = get(cfg, "recipe.trust_remote_code", False)
    if not isinstance(trust, bool):
        raise TranslateError(f"recipe.trust_remote_code={trust!r}: must be true or false")
    if the_row.family.converts:
        conv = dict(cfg.get("convert") or {})
        direction = conv.get("direction")
        if direction not in ("hf_to_megatron", "megatron_to_hf"):
            maybe = did_you_mean(direction, ("hf_to_megatron", "megatron_to_hf"))
            raise TranslateError(f"convert.direction={direction!r}: " + (f"{maybe} " if maybe else "")
                                 + "the Megatron-Bridge backend converts hf_to_megatron or megatron_to_hf "
                                 "(hf_v5_to_v4 is the local backend's)")
        device = conv.get("device", "gpu")
        if device not in ("gpu", "cpu"):
            maybe = did_you_mean(device, ("gpu", "cpu"))
            raise TranslateError(f"convert.device={device!r}: " + (f"{maybe} " if maybe else "")
                                 + "valid: gpu (torchrun at the config's layout) or cpu (one process; host RAM holds "
                                 "the model)")
        dtype = conv.get("dtype") or "bfloat16"
        if dtype not in CONVERT_DTYPES:
            maybe = did_you_mean(dtype, CONVERT_DTYPES)
            raise TranslateError(f"convert.dtype={dtype!r}: " + (f"{maybe} " if maybe else "")
                                 + "the dtype AutoBridge loads and writes the weights in; valid: "
                                 + ", ".join(CONVERT_DTYPES))
        for key in ("source", "output_dir"):
            value = conv.get(key)
            if not value or "${" in str(value):
                raise TranslateError(f"convert.{key}={value!r}: must be set (a checkpoint folder)")
        model = {k: v for k, v in (own.get("model") or {}).items() if k.endswith("_parallel_size")}
        # the export's tokenizer when the checkpoint's own is not on this node (export_tokenizer_source)
        conv["tokenizer_fallback"] = get(cfg, "tokenizer.tokenizer_model") or None
        from nemotron.config import catalogue as _catalogue

        try:
            cspec = _catalogue.get(model_name)
        except _catalogue.CatalogueError as exc:
            raise TranslateError(f"model.name={model_name!r}: {exc}") from None
        # a slice (or a catalogue model of our own) exports with its own HF config, never recipe.hf_model_id's
        # (the full Ultra: 108 layers over the slice's weights, and a hub download): export_bridge
        slice_hf = _catalogue.hf_config(cspec) if cspec.is_slice or cspec.hf_model_id is None else None
        return BridgeConfig(stage=stage, recipe=None, hf_model_id=str(hf_model_id), model_name=model_name,
                            sections={"model": model}, convert=conv, trust_remote_code=trust, hf_config=slice_hf)

    sections: dict[str, dict[str, Any]] = {}
    for name in PASS_THROUGH:
        value = own.get(name)
        if isinstance(value, dict) and value:
            sections[name] = copy.deepcopy(value)
    model = sections.setdefault("model", {})
    train = sections.setdefault("train", {})
    ckpt = sections.setdefault("checkpoint", {})
    logger = sections.setdefault("logger", {})
    tok = sections.setdefault("tokenizer", {})
    # the exit-signal handler: SIGTERM (Slurm's warning before the time limit, preemption, scancel) saves a
    # checkpoint at the end of the iteration and leaves the training loop (Megatron-Bridge train.py
    # checkpoint_and_decide_exit)
    train["exit_signal_handler"] = True
    save = ckpt.get("save")
    if not save or "${" in str(save):
        raise TranslateError(f"checkpoint.save={save!r}: a run needs a stable checkpoint folder")
    ckpt["load"] = ckpt.get("load") or save
    if tok.get("tokenizer_model") is None:  # the data's tokenizer: TokenizerConfig fields (type and folder)
        tok.update(data_tokenizer if isinstance(data_tokenizer, dict) else
                   {"tokenizer_model": data_tokenizer or str(hf_model_id)})
    seq = get(cfg, "model.seq_length")
    if seq is None:
        raise TranslateError("model.seq_length is not set")
    from nemotron.config import catalogue

    try:
        spec = catalogue.get(model_name)
    except catalogue.CatalogueError as exc:
        raise TranslateError(f"model.name={model_name!r}: {exc}") from None
    # the MTP block the memory estimate counts (nemotron.layout.memory: model.mtp_num_layers, else the
    # catalogue's depth; one shared set of weights when the catalogue says so) is the one the provider gets
    if model.get("mtp_num_layers") is None:
        model["mtp_num_layers"] = spec.mtp_depths
    if spec.mtp_depths and model.get("mtp_use_repeated_layer") is None:
        model["mtp_use_repeated_layer"] = spec.mtp_shared_weights
    # a slice, or a catalogue model of our own (`small`), has no HF repo: its config.json comes from the catalogue
    # (the model the estimate describes), never from recipe.hf_model_id, which would build the full Ultra
    hf_config = catalogue.hf_config(spec) if spec.is_slice or spec.hf_model_id is None else None

    mp = cfg.get("mixed_precision")
    overrides = {k: model.pop(k) for k in BF16_LAYER_KEYS if k in model}
    for k in BF16_LAYER_KEYS:
        if k in (cfg.get("model") or {}):
            overrides[k] = cfg["model"][k]
    if not overrides.get("first_last_layers_bf16"):
        overrides = {}

    dataset: dict[str, Any] = {}
    ds = own.get("dataset") or {}
    data = the_row.training_data
    assert data is not None  # row(): a stage that is no conversion trains on its training data
    if data.blend:
        if blend is None:
            raise TranslateError("data.per_split_data_args_path: the blend.json was not read")
        kind = "gpt"
        dataset = {k: v for k, v in ds.items() if k not in ("packed_sequence_specs", "dataset_kwargs", "dataset_root")}
        dataset.update(seq_length=seq, blend=None, blend_per_split=blend_per_split(blend), split=None)
    else:
        kind = "finetuning"
        kwargs = dict(ds.get("dataset_kwargs") or {})
        if kwargs.get("answer_only_loss") is False:
            raise TranslateError("dataset.dataset_kwargs.answer_only_loss=false: Megatron-Bridge's packed-Parquet "
                                 "loader then ignores our stored loss mask and trains on prompts too; set it true")
        kwargs["answer_only_loss"] = True
        specs = dict(ds.get("packed_sequence_specs") or {})
        unknown = sorted(set(specs) - set(PACK_KEYS))
        if unknown:
            raise TranslateError(f"dataset.packed_sequence_specs.{unknown[0]}: not a PackedSequenceSpecs field "
                                 f"(valid: {', '.join(PACK_KEYS)})")
        size = specs.get("packed_sequence_size", seq)
        if size != seq:
            raise TranslateError(f"dataset.packed_sequence_specs.packed_sequence_size={size}: must equal "
                                 f"model.seq_length={seq} (one pack is one training sequence)")
        specs["packed_sequence_size"] = seq
        for key in ("packed_train_data_path", "packed_val_data_path", "packed_metadata_path"):
            if specs.get(key) is not None and "${" in str(specs[key]):
                raise TranslateError(f"dataset.packed_sequence_specs.{key}={specs[key]!r}: unresolved; run data prep "
                                     "sft first (or use `pipe`)")
        dataset = {k: v for k, v in ds.items() if k not in ("packed_sequence_specs", "dataset_kwargs")}
        dataset.update(seq_length=seq, packed_sequence_specs=specs, dataset_kwargs=kwargs)
        if not get(cfg, "checkpoint.pretrained_checkpoint"):
            raise TranslateError("checkpoint.pretrained_checkpoint is not set: SFT starts from the pretrained "
                                 "checkpoint (pretrain's output)")
    artifact = data.artifact

    env: dict[str, str] = {}
    ident = wandb_identity(checkpoint_dir=save, project=logger.get("wandb_project"),
                           entity=logger.get("wandb_entity"), exp_name=logger.get("wandb_exp_name"), stage=stage,
                           data=data_label(data_version, artifact) if data_version else None,
                           save_dir=logger.get("wandb_save_dir"))
    if ident is not None:
        logger["wandb_exp_name"] = ident.name
        logger["wandb_save_dir"] = str(ident.save_dir)
        env = ident.env()
    return BridgeConfig(stage=stage, recipe=get(cfg, "recipe.name"), hf_model_id=str(hf_model_id),
                        model_name=model_name, sections=sections, dataset_kind=kind, dataset=dataset,
                        mixed_precision=str(mp) if mp else None, mixed_precision_overrides=overrides, env=env,
                        train_iters=_iterations(cfg), checkpoint_dir=str(save), hf_config=hf_config,
                        trust_remote_code=trust, seq_length=seq, data=data)


def _iterations(cfg: dict[str, Any]) -> Any:
    """The iterations the run trains for: ``train.train_iters``, or with it null ``train.train_samples //
    train.global_batch_size`` as Megatron-Bridge's ``TrainingConfig.finalize`` computes it (rule ``train-length``)."""
    from nemotron.layout.rules import iterations_of

    iters = get(cfg, "train.train_iters")
    return iters if iters is not None else iterations_of(None, get(cfg, "train.train_samples"),
                                                         get(cfg, "train.global_batch_size"))


# ------------------------------------------------------------------------------------ checks (no heavy import)
#: The frameworks the configs and the key list were checked against (``stages/images.toml`` ``[nemo].frameworks``)
#: and their distributions.
FRAMEWORKS = {"megatron_bridge": "megatron-bridge", "megatron_core": "megatron-core"}


def framework_problems(installed: dict[str, str | None] | None = None,
                       commits: dict[str, str | None] | None = None) -> list[str]:
    """One line per framework of :data:`FRAMEWORKS` whose installed version (``installed``, default the real
    ones) is not the ``[nemo]`` pin (:func:`nemotron.runtime.common.prestart.version_problems`), or which was installed
    from another git commit than ``[nemo].commits`` records (``commits``, default the real ones: the commit pip
    records for a git install, :func:`nemotron.runtime.common.prestart.installed_commits`). Megatron-Core's commit is
    the one that tells the Ultra branch's pin (``c8288b6``) from the base image's own build of the same version
    ``0.18.0``; a package that records no commit is checked by its version alone."""
    installed = prestart.installed_versions(FRAMEWORKS) if installed is None else installed
    commits = prestart.installed_commits(FRAMEWORKS) if commits is None else commits
    fix = "run in that image, or regenerate the key list for it (scripts/megatron_bridge_keys.py) and update the pin"
    checked = "the configs and the key list"
    return (prestart.version_problems(installed, prestart.pinned_versions("nemo", tuple(FRAMEWORKS)), "nemo", checked,
                                      fix)
            + prestart.commit_problems(commits, prestart.pinned_commits("nemo", tuple(FRAMEWORKS)), "nemo", checked,
                                       "run in the image stages/docker/nemo.Dockerfile builds"))


#: ``convert.dtype`` values the convert runtime maps to a torch dtype (:func:`_convert`'s ``torch_dtype`` /
#: ``params_dtype`` for AutoBridge); another value is refused by :func:`translate` (the dry run and the job).
CONVERT_DTYPES = ("bfloat16", "float16", "float32")


def _exists(key: str, value: Any, problems: list[str], kind: str = "file") -> Path | None:
    """``value`` as a path when :func:`nemotron.runtime.common.prestart.path_problem` finds none; else the problem
    is appended to ``problems`` and None returned."""
    problem = prestart.path_problem(key, value, kind)
    if problem:
        problems.append(problem)
        return None
    return Path(os.path.expanduser(str(value)))


#: Set to ``1`` to run with other framework versions than the ``[nemo]`` pins (a development stack, the one-GPU
#: bench ``bench/gpu_megatron.py``): the version and commit mismatches are printed as warnings instead of refusing.
#: Megatron-Bridge must still import; every other check stays.
SKIP_FRAMEWORK_CHECK = "NEMOTRON_SKIP_FRAMEWORK_CHECK"


def pinned_framework_problems(installed: dict[str, str | None] | None, env: Any, title: str) -> list[str]:
    """:func:`framework_problems` (megatron-bridge / megatron-core against the ``[nemo]`` pins), except under
    ``NEMOTRON_SKIP_FRAMEWORK_CHECK=1`` in ``env``: then each mismatch is printed as a ``<title>: warning`` line
    and none is returned (a development stack outside the image, on purpose: said, not refused)."""
    problems = framework_problems(installed)
    if problems and env.get(SKIP_FRAMEWORK_CHECK) == "1":
        for line in problems:
            print(f"{title}: warning ({SKIP_FRAMEWORK_CHECK}=1): {line}", flush=True)
        return []
    return problems


def precheck(cfg: dict[str, Any], stage: str, *, importable: Any = None, gpus: int | None = None,
             installed: dict[str, str | None] | None = None, env: dict[str, str] | None = None) -> list[str]:
    """Every reason the Megatron-Bridge run of ``stage`` cannot start here, one line each (empty: ready).

    ``importable(module)``, ``gpus`` (GPUs visible on this node), ``installed`` (``{framework: version}``)
    and ``env`` default to the real ones; tests pass their own.

    Raises:
        TranslateError: ``stage`` is not one this runtime runs (:func:`row`).
    """
    the_row = row(stage)
    data = the_row.training_data
    env = os.environ if env is None else env
    problems: list[str] = []
    # said last: the line a job log's tail shows
    container = prestart.missing_modules({"megatron.bridge": ""}, "nemo", "NeMo", importable)
    if not container:
        container = pinned_framework_problems(installed, env, f"ultra3 {stage}")
    cpu_key = the_row.family.cpu_key
    if not (cpu_key and get(cfg, cpu_key) == "cpu"):
        problems += prestart.gpu_problems(get(cfg, "run.env.nodes", 1), get(cfg, "run.env.gpus_per_node"), env, gpus)
    if data is not None and data.blend:
        blend = _exists("data.per_split_data_args_path", get(cfg, "data.per_split_data_args_path"), problems)
        if blend is not None:
            from nemotron.runtime.megatron.pretrain_data import DataError, read_blend

            try:
                read_blend(blend)
            except DataError as exc:
                problems.append(f"data.per_split_data_args_path: {exc}")
            for i, item in enumerate(get(cfg, "data.mix_with") or []):
                extra = _exists(f"data.mix_with[{i}].blend", item.get("blend") if isinstance(item, dict) else None,
                                problems)
                if extra is not None:
                    try:
                        read_blend(extra)
                    except DataError as exc:
                        problems.append(f"data.mix_with[{i}].blend: {exc}")
            if get(cfg, "data.mix_with"):
                from nemotron.data.blend import mix_blend_files
                from nemotron.errors import ConfigError

                try:
                    mix_blend_files(blend, get(cfg, "data.mix_with"))
                except ConfigError as exc:
                    problems.append(exc.message)
    elif data is not None:  # packed Parquet
        specs = "dataset.packed_sequence_specs"
        for key in ("packed_train_data_path", "packed_val_data_path", "packed_metadata_path"):
            value = get(cfg, f"{specs}.{key}")
            if value is None and key != "packed_train_data_path":
                continue
            p = _exists(f"{specs}.{key}", value, problems)
            if p is not None and key != "packed_metadata_path" and p.suffix != ".parquet":
                problems.append(f"{specs}.{key}={p}: not a Parquet file (data prep sft writes *.idx.parquet)")
        _exists("checkpoint.pretrained_checkpoint", get(cfg, "checkpoint.pretrained_checkpoint"), problems, "folder")
    else:
        direction = get(cfg, "convert.direction")
        src = _exists("convert.source", get(cfg, "convert.source"), problems, "folder")
        if src is not None and direction == "hf_to_megatron" and not (src / "config.json").is_file():
            problems.append(f"convert.source={src}: not a Hugging Face checkpoint (no config.json)")
        if src is not None and direction == "megatron_to_hf" and (src / "config.json").is_file() \
                and not any(src.glob("iter_*")) and not (src / "latest_checkpointed_iteration.txt").is_file():
            problems.append(f"convert.source={src}: a Hugging Face checkpoint, not a Megatron one "
                            "(convert.direction=megatron_to_hf)")
    if data is not None:  # a training run: W&B, its checkpoint folder and where it resumes
        from nemotron.profiles.sections import wandb_key_problem

        problem = wandb_key_problem(get(cfg, "logger.wandb_project"), dict(env))
        if problem:
            problems.append(problem)
        save = get(cfg, "checkpoint.save")
        if save and Path(str(save)).exists() and not Path(str(save)).is_dir():
            problems.append(f"checkpoint.save={save}: exists and is not a folder")
        from nemotron.runtime.megatron.lineage import RESUME_KEYS, resume_warning, train_iters_problem

        load = get(cfg, "checkpoint.load") or save  # the folder the run resumes from
        saved = last_saved_iteration(load) if load else None
        problem = train_iters_problem(get(cfg, "train.train_iters"), saved, load)
        if problem:
            problems.append(problem)
        elif saved is not None:  # resuming: another length than the saved run's is taken, and said
            warning = resume_warning(saved_run_config(load, saved), {k: get(cfg, k) for k in RESUME_KEYS}, saved,
                                     Path(str(load)) / f"iter_{saved:07d}")
            if warning:
                print(f"ultra3 {stage}: {warning}", flush=True)
    return problems + container


# ------------------------------------------------------------------------------------ the run (needs the container)
def last_saved_iteration(checkpoint_dir: str | os.PathLike[str]) -> int | None:
    """The iteration in ``<checkpoint_dir>/latest_checkpointed_iteration.txt`` (Megatron's tracker file), or None."""
    try:
        text = (Path(checkpoint_dir) / "latest_checkpointed_iteration.txt").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def saved_run_config(checkpoint_dir: str | os.PathLike[str], iteration: int) -> dict[str, Any]:
    """``{"train.train_iters", "train.global_batch_size"}`` of the run that saved ``iteration``: read from the
    ``run_config.yaml`` Megatron-Bridge writes into each checkpoint (``<checkpoint_dir>/iter_<N:07d>/``;
    Megatron-Bridge 4588417 training/utils/checkpoint_utils.py ``CONFIG_FILE``, ``get_checkpoint_name``). A file
    that is absent or unreadable gives None for both (nothing to compare)."""
    import yaml

    path = Path(checkpoint_dir) / f"iter_{iteration:07d}" / "run_config.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        data = None
    train = data.get("train") if isinstance(data, dict) else None
    train = train if isinstance(train, dict) else {}
    return {"train.train_iters": train.get("train_iters"), "train.global_batch_size": train.get("global_batch_size")}


def exit_code(checkpoint_dir: str | os.PathLike[str], train_iters: int | None) -> int:
    """0 when the last save reached ``train_iters``; ``EXIT_REQUEUE`` (75) when the run saved and stopped
    earlier (the exit-signal handler); 1 when nothing was saved."""
    it = last_saved_iteration(checkpoint_dir)
    if it is None:
        return 1
    return 0 if train_iters is None or it >= train_iters else EXIT_REQUEUE


def train_exit_code(train: Any, stage: str, checkpoint_dir: str | os.PathLike[str] | None, train_iters: int | None,
                    env: dict[str, str] | None = None) -> int:
    """Run ``train()`` (Megatron-Bridge's ``pretrain`` / ``finetune`` on the container) and return the run's exit
    code from what it saved (:func:`exit_code`), not from how it ended.

    Megatron-Bridge's training loop (``training/train.py``, ``checkpoint_and_decide_exit``) saves on the exit
    signal (SIGTERM: Slurm's warning ``run.signal_before_s`` before the time limit), leaves the loop and ends
    the process with ``sys.exit(exit_code)``, 0 unless its rerun state machine set another: a run stopped early
    looks like a finished one. So a ``SystemExit`` of 0 (or None) is taken as an ordinary return, any other is
    let through; then an early save (the last saved iteration below ``train_iters``) is 75: said in the job
    log and written to the requeue marker (:func:`nemotron.runtime.dispatch.mark_stopped`, global rank 0), from which the
    job's batch script requeues the job (``run.requeue``) or ends it with 75 (``run.chain``).
    """
    try:
        train()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    code = exit_code(checkpoint_dir, train_iters) if checkpoint_dir else 1
    if code == EXIT_REQUEUE:
        detail = f"saved at iteration {last_saved_iteration(checkpoint_dir)} of {train_iters} and stopped"
        _say(stage, f"{detail}; the next job of this run resumes there")
        from nemotron.runtime.dispatch import mark_stopped

        mark_stopped(f"ultra3 {stage}", detail, env)
    return code


def hf_source(bc: BridgeConfig, folder: str | os.PathLike[str] | None = None) -> str:
    """What the recipe builder gets as ``hf_path``: ``recipe.hf_model_id`` (a Hugging Face repo id, or a local
    folder holding its ``config.json``: offline clusters give a folder), or, for an ``<N>layer`` slice
    (``bc.hf_config`` set), ``folder`` (default: a new temporary folder of this process) after writing the
    slice's ``config.json`` there. Nothing is downloaded for a slice: only the configuration is read
    (``load_weights=False``), so the slice builds offline."""
    if bc.hf_config is None:
        return bc.hf_model_id
    import json
    import tempfile

    out = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix=f"nemotron-{bc.model_name}-hf-"))
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".config.json.tmp"
    tmp.write_text(json.dumps(bc.hf_config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out / "config.json")
    return str(out)


def recipe_kwargs(bc: BridgeConfig, params: Any, hf_path: str) -> dict[str, Any]:
    """Keyword arguments for the recipe builder ``recipe.name`` whose keyword parameters are ``params`` (the real
    signature in the job; the key list's ``recipes`` in the dry-run): ``hf_path`` (required: without it the recipe
    builds its provider from its own HF id, not ours or the slice), ``seq_length``, and ``trust_remote_code``
    only when true.

    Raises:
        TranslateError: the builder takes no ``hf_path``, or ``recipe.trust_remote_code`` is true and the builder
            takes no ``trust_remote_code`` (the Ultra recipes load ``hf_path`` with transformers' own NemotronH).
    """
    params = set(params)
    if "hf_path" not in params:
        raise TranslateError(f"recipe.name={bc.recipe}: this recipe takes no hf_path, so neither recipe.hf_model_id "
                             "nor an <N>layer slice would reach its model provider; use one that does "
                             "(megatron.bridge.recipes.nemotronh.nemotron_3_ultra_*)")
    kwargs: dict[str, Any] = {"hf_path": hf_path}
    if "seq_length" in params and bc.seq_length is not None:
        kwargs["seq_length"] = bc.seq_length
    if bc.trust_remote_code:
        if "trust_remote_code" not in params:
            raise TranslateError(f"recipe.trust_remote_code=true: recipe {bc.recipe} takes no trust_remote_code (it "
                                 "loads hf_path's config.json with transformers' own classes); set it false")
        kwargs["trust_remote_code"] = True
    return kwargs


def _recipe(bc: BridgeConfig, hf_path: str | None = None) -> Any:
    """The ``ConfigContainer`` of the recipe ``recipe.name`` (looked up in ``megatron.bridge.recipes.nemotronh``,
    then ``megatron.bridge.recipes``), built with ``hf_path`` (:func:`hf_source`; the slice's folder for an
    ``<N>layer`` model) and ``seq_length``; a name neither has: Megatron-Bridge's common pretrain/SFT defaults
    with no model (:func:`_apply` builds it from ``hf_path``). Needs Megatron-Bridge (run on a CPU by
    ``tests/contract/test_megatron_bridge.py``).

    Raises:
        TranslateError: see :func:`recipe_kwargs`.
    """
    import importlib

    hf_path = hf_source(bc) if hf_path is None else hf_path
    for module in ("megatron.bridge.recipes.nemotronh", "megatron.bridge.recipes"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        if bc.recipe and hasattr(mod, bc.recipe):
            import inspect

            builder = getattr(mod, bc.recipe)
            return builder(**recipe_kwargs(bc, inspect.signature(builder).parameters, hf_path))
    import megatron.bridge.recipes.common as common

    defaults = bc.data.bridge_defaults if bc.data is not None else "_sft_common"
    print(f"ultra3 {bc.stage}: recipe.name={bc.recipe!r} is not in this Megatron-Bridge's recipes; starting from its "
          f"common defaults ({defaults})", flush=True)
    container = getattr(common, defaults)()
    container.model = None  # built from hf_path by AutoBridge (_apply)
    return container


def _apply(container: Any, bc: BridgeConfig, hf_path: str | None = None) -> None:
    """Our values on the recipe's ``ConfigContainer`` (module docstring, step 2): the sections field by field, the
    dataset, the mixed-precision preset. A container without a model gets AutoBridge's provider for ``hf_path``
    (``trust_remote_code`` passed only when true, as ``examples/conversion/convert_checkpoints.py`` does)."""
    if getattr(container, "model", None) is None:
        from megatron.bridge import AutoBridge

        extra = {"trust_remote_code": True} if bc.trust_remote_code else {}
        container.model = AutoBridge.from_hf_pretrained(hf_source(bc) if hf_path is None else hf_path,
                                                        **extra).to_megatron_provider(load_weights=False)
    for section, values in bc.sections.items():
        target = getattr(container, section, None)
        if target is None:
            raise TranslateError(f"{section}: this Megatron-Bridge's ConfigContainer has no such section")
        for key, value in values.items():
            setattr(target, key, value)
    if bc.dataset_kind == "gpt":
        for key, value in bc.dataset.items():
            setattr(container.dataset, key, value)
    else:
        from megatron.bridge.data.datasets.packed_sequence import PackedSequenceSpecs
        from megatron.bridge.training.config import FinetuningDatasetConfig

        fields = dict(bc.dataset)
        fields["packed_sequence_specs"] = PackedSequenceSpecs(**fields["packed_sequence_specs"])
        container.dataset = FinetuningDatasetConfig(**fields)
    if bc.mixed_precision:
        from megatron.bridge.training.mixed_precision import get_mixed_precision_config

        mp = get_mixed_precision_config(bc.mixed_precision)
        for key, value in bc.mixed_precision_overrides.items():
            setattr(mp, key, value)
        container.mixed_precision = mp


def _say(stage: str, msg: str) -> None:
    print(f"ultra3 {stage}: {msg}", flush=True)


def main(cfg: dict[str, Any], stage: str) -> int:  # pragma: no cover - needs Megatron-Bridge and GPUs
    """Run ``stage`` (a registry name: a stage with training data, or a conversion; :func:`row`) with
    Megatron-Bridge; returns the exit code (module docstring, step 3). The entry scripts name it with
    ``Backend("nemotron.runtime.megatron.megatron_bridge:main", per_stage=True)``."""
    try:
        the_row = row(stage)
    except TranslateError as exc:
        return prestart.refuse(f"ultra3 {stage}", [str(exc)])
    data = the_row.training_data
    problems = precheck(cfg, stage)
    if problems:
        return prestart.refuse(f"ultra3 {stage}", problems)
    blend, tokenizer, version = None, None, None
    sources: list[Any] = []
    if data is not None and data.blend:
        from nemotron.data.blend import training_blend
        from nemotron.runtime.megatron.pretrain_data import read_blend

        sources = [get(cfg, "data.per_split_data_args_path"), *(m["blend"] for m in get(cfg, "data.mix_with") or [])]
        blend = read_blend(training_blend(cfg, get(cfg, "checkpoint.save")))  # the mix: mixed_blend.json there
    elif data is not None:  # packed Parquet
        sources = [get(cfg, "dataset.packed_sequence_specs.packed_train_data_path")]
    if sources:  # the same on every rank: read, never written here
        from nemotron.data.outputs import data_manifest, megatron_tokenizer
        from nemotron.errors import ConfigError

        manifest, where = data_manifest(sources[0])  # beside blend.json; one level above the packed Parquet
        try:  # the TokenizerConfig fields that load the data's own tokenizer (only when none is configured)
            tokenizer = megatron_tokenizer(manifest, where) if get(cfg, "tokenizer.tokenizer_model") is None else None
        except ConfigError as exc:
            return prestart.refuse(f"ultra3 {stage}", [f"{exc.message}; {exc.hint}"])
        version = str(Path(where).parent) if where else None
    try:
        bc = translate(cfg, stage, blend=blend, data_tokenizer=tokenizer, data_version=version)
    except TranslateError as exc:
        return prestart.refuse(f"ultra3 {stage}", [str(exc)])
    if data is None:  # row(): a conversion
        return _convert(bc, get(cfg, "dist.distributed_timeout_minutes"))
    os.environ.update(bc.env)
    from nemotron.config import catalogue
    from nemotron.runtime.megatron.routing import RoutingError, require_routing

    try:
        hf_path = hf_source(bc)  # a slice: its config.json, from the catalogue, in a folder of this process
        container = _recipe(bc, hf_path)
        _apply(container, bc, hf_path)
        require_routing(container.model, catalogue.get(bc.model_name))
    except (TranslateError, RoutingError) as exc:
        return prestart.refuse(f"ultra3 {stage}", [str(exc)])
    _say(stage, f"MoE routing of the provider matches {bc.model_name}")
    if (os.environ.get("RANK") or "0") == "0":  # every data folder read becomes immutable to data prep
        from nemotron.runtime.megatron.trainer import record_consumption

        for source in sources:
            record_consumption(Path(str(source)), stage, Path(str(bc.checkpoint_dir)), data.artifact)
    from megatron.bridge.training.gpt_step import forward_step

    from nemotron.runtime.megatron import batch_log

    step = batch_log.recording(forward_step, os.environ.get(batch_log.ENV))  # the step itself unless asked
    if container.train.exit_signal_handler:  # upstream builds its handler but never enters it: exit_signal.py
        from nemotron.runtime.megatron.exit_signal import ExitSignal

        exit_signal = ExitSignal(container.train.exit_signal)
        exit_signal.install_early()
        step = exit_signal.wrap(step)
    import importlib

    module, _, function = data.bridge_train.partition(":")  # Megatron-Bridge's pretrain or finetune
    train = getattr(importlib.import_module(module), function)
    return train_exit_code(lambda: train(container, step), stage, bc.checkpoint_dir, bc.train_iters)


#: Minutes a collective of the GPU conversion may wait when ``dist.distributed_timeout_minutes`` is unset: torch's
#: own default for NCCL process groups (``kProcessGroupNCCLDefaultTimeout``, 10 minutes; every config of ours sets
#: the key: ``stages/ultra3/convert/default.yaml`` 30, from Megatron-Bridge's Ultra README conversion example).
DEFAULT_TIMEOUT_MINUTES = 10


def process_group_options(timeout_minutes: Any) -> dict[str, Any]:
    """Keyword arguments of ``torch.distributed.init_process_group`` for the GPU conversion: NCCL, and the
    config's ``dist.distributed_timeout_minutes`` as its ``timeout`` (a ``datetime.timedelta``; unset:
    :data:`DEFAULT_TIMEOUT_MINUTES`), as Megatron-Bridge's ``examples/conversion/convert_checkpoints_multi_gpu.py``
    passes its ``--distributed-timeout-minutes``. Loading a 1.1 TB checkpoint keeps ranks waiting on each other
    for longer than torch's default allows.

    Raises:
        TranslateError: the value is not a positive number of minutes.
    """
    import datetime

    minutes = DEFAULT_TIMEOUT_MINUTES if timeout_minutes is None else timeout_minutes
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0:
        raise TranslateError(f"dist.distributed_timeout_minutes={timeout_minutes!r}: must be a positive number of "
                             "minutes")
    return {"backend": "nccl", "timeout": datetime.timedelta(minutes=minutes)}


def export_bridge(bc: BridgeConfig, source: str | os.PathLike[str], folder: str | os.PathLike[str] | None = None) -> Any:
    """The AutoBridge a ``megatron_to_hf`` export saves through: ``AutoBridge.from_auto_config(source, reference)``,
    as Megatron-Bridge's ``examples/conversion/convert_checkpoints.py`` exports — the HF config synthesized from the
    checkpoint's own ``run_config.yaml`` (layer count, hybrid pattern, MTP block of what was trained) and conformed
    to the reference config. The reference is :func:`hf_source`: for an ``<N>layer`` slice the slice's
    ``config.json`` written to ``folder`` (nothing downloaded), else ``recipe.hf_model_id``. The exported
    ``config.json`` is ``bridge.hf_pretrained.to_dict()`` (``save_hf_pretrained``, config-only bridge).

    A checkpoint trained with MTP saves the unified pattern that ``MambaModelProvider.finalize()`` builds
    (``MAIN/MTP/MTP``, e.g. ``MEM*EMEM*E/*E/*E``), and Megatron-Bridge 4588417's NemotronH
    ``megatron_to_hf_config`` refuses its ``/`` (``Unknown layer type characters in hybrid_override_pattern``):
    found by the first GPU export (docs/gpu_run.md). So ``from_auto_config`` reads :func:`export_run_config`'s
    view of the file — the main pattern, and the MTP block as ``mtp_hybrid_override_pattern`` — in a temporary
    folder; the weights are still loaded from ``source`` itself, with the pattern it was trained with.

    The file read is :func:`export_run_config_file`'s (the newest iteration's: the weights the export converts).

    Raises:
        FileNotFoundError: ``source`` has no ``run_config.yaml`` (at its top or in its newest ``iter_*``).
    """
    import tempfile

    from megatron.bridge import AutoBridge

    view = export_run_config(source)
    reference = hf_source(bc, folder)
    if view is None:  # nothing to rewrite: upstream reads the newest iteration's file itself (and names a missing one)
        rc = export_run_config_file(source)
        return AutoBridge.from_auto_config(str(rc.parent if rc else source), reference,
                                           trust_remote_code=bc.trust_remote_code)
    import yaml

    with tempfile.TemporaryDirectory(prefix="nemotron-export-config-") as tmp:
        (Path(tmp) / "run_config.yaml").write_text(yaml.safe_dump(view, sort_keys=False), encoding="utf-8")
        return AutoBridge.from_auto_config(tmp, reference, trust_remote_code=bc.trust_remote_code)


def mtp_block_depth(hf_pretrained: Any) -> int:
    """Layers in one MTP block of the HF model an export writes (``len(mtp_hybrid_override_pattern)``), 0 without MTP
    (``num_nextn_predict_layers`` 0). ``hf_pretrained`` is what AutoBridge holds: a ``PreTrainedCausalLM`` (its
    ``.config``) or, for a config-only bridge (:func:`export_bridge`), the ``PretrainedConfig`` itself; transformers'
    NemotronH config gives the pattern as a property of its ``mtp_layers_block_type``."""
    cfg = getattr(hf_pretrained, "config", None) or hf_pretrained
    depth = getattr(cfg, "num_nextn_predict_layers", None)
    if depth is not None and int(depth) == 0:
        return 0
    pattern = getattr(cfg, "mtp_hybrid_override_pattern", None)
    return len(pattern) if isinstance(pattern, str) else 0


@contextlib.contextmanager
def mtp_export_mappings() -> Iterator[None]:
    """Inside the block, Megatron-Bridge's NemotronH bridge maps the MTP weights of a config-only export.

    ``NemotronHBridge.build_conversion_tasks`` (4588417) takes the MTP block depth from
    ``hf_pretrained.config.mtp_hybrid_override_pattern``; a config-only bridge (``from_auto_config``, the export path
    of upstream's own ``convert_checkpoints.py``) holds the config itself, which has no ``.config``, so the depth is 0,
    the MTP mappings are skipped ("mtp_layers_per_block is not set (or 0)"), and the export stops in
    ``stream_weights_megatron_to_hf`` on the first MTP parameter (``'NoneType' object has no attribute
    'param_weight'``: found by the first GPU export of an MTP checkpoint, docs/gpu_run.md). Here the depth comes from
    :func:`mtp_block_depth`, which reads either form; everything else is the parent class's own method."""
    from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge
    from megatron.bridge.models.nemotronh.nemotron_h_bridge import NemotronHBridge

    upstream = NemotronHBridge.__dict__.get("build_conversion_tasks")

    def build_conversion_tasks(self: Any, hf_pretrained: Any, megatron_model: Any) -> Any:
        self._mtp_layers_per_block = mtp_block_depth(hf_pretrained)
        return MegatronModelBridge.build_conversion_tasks(self, hf_pretrained, megatron_model)

    NemotronHBridge.build_conversion_tasks = build_conversion_tasks
    try:
        yield
    finally:
        if upstream is None:
            del NemotronHBridge.build_conversion_tasks
        else:
            NemotronHBridge.build_conversion_tasks = upstream


def export_iteration(source: str | os.PathLike[str]) -> Path:
    """The folder whose weights a ``megatron_to_hf`` export of the checkpoint folder ``source`` converts: its
    ``iter_<N>`` folder of the highest iteration number N, as ``AutoBridge.load_megatron_model`` picks it
    (Megatron-Bridge 4588417 ``models/conversion/auto_bridge.py``), else ``source`` itself (an iteration folder, or a
    save without ``iter_*`` folders)."""
    root = Path(source)
    iters = [d for d in root.glob("iter_*") if d.is_dir() and d.name[5:].isdigit()]
    return max(iters, key=lambda d: int(d.name[5:])) if iters else root


def export_run_config_file(source: str | os.PathLike[str]) -> Path | None:
    """The ``run_config.yaml`` every reader of a ``megatron_to_hf`` export takes for the checkpoint folder
    ``source`` (the model config the export's bridge is built from, the saved pipeline layout, the trained-with
    tokenizer): the one of :func:`export_iteration`, the iteration whose weights the export converts; else
    ``source/run_config.yaml`` (a save whose newest ``iter_*`` has none); None when neither exists.
    ``AutoBridge.from_auto_config`` itself would take ``source/run_config.yaml`` before any ``iter_*``'s
    (Megatron-Bridge 4588417), so :func:`export_bridge` hands it this file's folder."""
    root = Path(source)
    for rc in (export_iteration(root) / "run_config.yaml", root / "run_config.yaml"):
        if rc.is_file():
            return rc
    return None


def read_export_run_config(source: str | os.PathLike[str]) -> tuple[Path, Any] | None:
    """``(path, parsed YAML)`` of :func:`export_run_config_file` of ``source`` (the parsed value as the file holds
    it: a mapping for a Megatron-Bridge save), or None when there is no such file.

    Raises:
        TranslateError: the file is not readable YAML (named, one line).
    """
    import yaml

    rc = export_run_config_file(source)
    if rc is None:
        return None
    try:
        return rc, yaml.safe_load(rc.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TranslateError(f"{rc}: not a readable run_config.yaml ({type(exc).__name__}: {exc})".splitlines()[0]) \
            from None


def export_run_config(source: str | os.PathLike[str]) -> dict | None:
    """The parsed :func:`export_run_config_file` of ``source`` with its MTP block split off the hybrid pattern, or None
    when there is nothing to split (no file, or no MTP separator ``/`` in ``model.hybrid_layer_pattern`` /
    ``hybrid_override_pattern``). In the view, the pattern key holds the main decoder's pattern (the part before
    the first ``/``, pipeline separators ``|`` kept: upstream strips them) and ``model.mtp_hybrid_override_pattern``
    the MTP block (the saved value when set, else the first block after ``/``); every other key is unchanged.

    Raises:
        TranslateError: the file is not readable YAML, or the pattern's MTP blocks differ from each other or from
            the saved ``mtp_hybrid_override_pattern`` (a pattern this export would misread).
    """
    found = read_export_run_config(source)
    if found is None:
        return None
    rc, data = found
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        return None  # no model section: upstream reads the file itself and names what it lacks
    key = "hybrid_layer_pattern" if model.get("hybrid_layer_pattern") else "hybrid_override_pattern"
    pattern = model.get(key)
    if not isinstance(pattern, str) or "/" not in pattern:
        return None
    main, *blocks = pattern.split("/")
    blocks = [b.replace("|", "") for b in blocks if b.replace("|", "")]
    saved = model.get("mtp_hybrid_override_pattern")
    if len(set(blocks + ([saved] if saved else []))) > 1:
        raise TranslateError(f"{rc}: model.{key}={pattern!r} with mtp_hybrid_override_pattern={saved!r}: the MTP "
                             "blocks differ, and a NemotronH export has one shared MTP block pattern")
    model[key] = main
    if blocks or saved:
        model["mtp_hybrid_override_pattern"] = saved or blocks[0]
    data["model"] = model
    return data


def export_tokenizer_source(source: str | os.PathLike[str], fallback: str | None) -> tuple[str, str]:
    """Where the tokenizer of a ``megatron_to_hf`` export comes from, and why: ``(name_or_folder, origin)``.

    ``save_hf_pretrained`` of a config-only bridge (:func:`export_bridge`) writes the config and the weights but no
    tokenizer, and every consumer of the export loads one from the export folder itself (NeMo RL's
    ``policy.tokenizer.name`` defaults to ``policy.model_name``; Megatron-Bridge's quantization example reads
    ``bridge.hf_pretrained.tokenizer``; the eval stage's ``tokenizer: null``). First choice: the tokenizer the model
    was trained with, ``tokenizer.tokenizer_model`` of the checkpoint's ``run_config.yaml``
    (:func:`export_run_config_file`) when it is a folder that exists on this node; else ``fallback`` (the convert
    config's ``tokenizer.tokenizer_model``: a local folder or a hub id).

    Raises:
        TranslateError: neither is usable (the trained-with folder is absent here and no fallback is set, or the
            fallback is a local path that does not exist); the ``run_config.yaml`` is not readable YAML.
    """
    trained = None
    rc = export_run_config_file(source)
    found = read_export_run_config(source)
    if found is not None:
        tok = found[1].get("tokenizer") if isinstance(found[1], dict) else None
        trained = tok.get("tokenizer_model") if isinstance(tok, dict) else None
    if isinstance(trained, str) and trained and Path(trained).is_dir():
        return trained, f"the tokenizer the checkpoint was trained with ({rc})"
    why = (f"the checkpoint's tokenizer {trained!r} ({rc}) is not a folder on this node" if trained
           else f"the checkpoint names no tokenizer ({rc or 'no run_config.yaml'})")
    if not fallback:
        raise TranslateError(f"convert: no tokenizer for the export: {why}, and tokenizer.tokenizer_model is not set "
                             "(set it to the tokenizer folder the model was trained with)")
    if str(fallback).startswith(("/", "./", "../", "~")) and not Path(os.path.expanduser(str(fallback))).is_dir():
        raise TranslateError(f"convert: no tokenizer for the export: {why}, and tokenizer.tokenizer_model="
                             f"{fallback!r} is not a folder on this node")
    return str(fallback), f"tokenizer.tokenizer_model of the convert config ({why})"


def load_export_tokenizer(source: str | os.PathLike[str], fallback: str | None, trust_remote_code: bool = False
                          ) -> tuple[Any, str, str]:
    """``(tokenizer, name_or_folder, origin)``: the :func:`export_tokenizer_source` tokenizer, loaded with
    ``transformers.AutoTokenizer`` (before any weight moves, so that a tokenizer that does not load stops the job
    early). Raises :class:`TranslateError` naming the tokenizer when it does not load."""
    from transformers import AutoTokenizer

    name, origin = export_tokenizer_source(source, fallback)
    try:
        tok = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except Exception as exc:  # OSError (absent, offline hub), ValueError (unknown class): one line, named
        raise TranslateError(f"convert: the export's tokenizer {name!r} ({origin}) does not load: "
                             f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    return tok, name, origin


def saved_pipeline_layout(source: str | os.PathLike[str]) -> list | None:
    """``model.pipeline_model_parallel_layout`` of the checkpoint's ``run_config.yaml`` when it is a list, else None:
    what Megatron-Bridge's ``examples/conversion/convert_checkpoints_multi_gpu.py`` gives the provider before a PP > 1
    export (the stages the checkpoint was saved with; the default split would not match its shards). The file is the
    one the export's bridge reads (:func:`export_run_config_file`: the newest ``iter_*``'s, whose weights the export
    converts, else the folder's own), so that the layout and the model config come from the same save.
    (Upstream's example takes the first match of the folder and an unordered ``iter_*`` glob.)"""
    found = read_export_run_config(source)
    if found is None:
        return None
    data = found[1]
    layout = ((data.get("model") or {}) if isinstance(data, dict) else {}).get("pipeline_model_parallel_layout")
    return layout if isinstance(layout, list) else None


def export_pipeline_layout(source: str | os.PathLike[str], pp: int) -> list | None:
    """The :func:`saved_pipeline_layout` a PP ``pp`` > 1 export gives the provider before ``finalize()``, or None
    (no saved layout, or ``pp`` <= 1: one stage holds every layer and no layout is set).

    Megatron-Core (``PipelineParallelLayerLayout``, c8288b6) reads a layout of S stages at PP ``pp`` as
    VPP = S / ``pp`` chunks, stage ``vpp x pp + rank`` on rank ``rank``: a layout saved at another PP is either
    refused there with an assertion (``pp`` does not divide S) or, worse, taken as a different split (a PP-4 layout
    at PP 2 becomes VPP 2), so the export's ranks would build other layers than the ones whose shards they load.

    Raises:
        TranslateError: the layout was saved for another PP than ``pp`` (the saved
            ``model.pipeline_model_parallel_size`` of the same file differs, or, without it, ``pp`` does not divide
            its stage count): one line naming both sizes, the file, and the fix.
    """
    if pp <= 1:
        return None
    layout = saved_pipeline_layout(source)
    if layout is None:
        return None
    rc, data = read_export_run_config(source)  # type: ignore[misc]  (a layout implies the file)
    saved_pp = (data.get("model") or {}).get("pipeline_model_parallel_size")
    saved_pp = saved_pp if isinstance(saved_pp, int) and not isinstance(saved_pp, bool) and saved_pp > 0 else None
    stages = len(layout)
    if saved_pp is not None and saved_pp != pp:
        made_for = f"model.pipeline_model_parallel_size={saved_pp}"
    elif saved_pp is None and stages % pp:
        made_for = f"a PP that divides its {stages} stages"
    else:
        return layout
    raise TranslateError(
        f"convert: {rc}: model.pipeline_model_parallel_layout ({stages} stages) was saved for {made_for}, but this "
        f"export runs at model.pipeline_model_parallel_size={pp}: its ranks would build other layers than the saved "
        f"shards hold; valid: model.pipeline_model_parallel_size={saved_pp or 'a divisor of ' + str(stages)} "
        "(the checkpoint's own)")


def _convert(bc: BridgeConfig, timeout_minutes: Any = None) -> int:  # pragma: no cover - needs Megatron-Bridge
    """HF <-> Megatron with AutoBridge. ``convert.device: cpu``: one process (the submission plans one task and
    no GPUs; under a hand-made multi-process launch only global rank 0 converts), ``AutoBridge.import_ckpt`` /
    ``export_ckpt``. ``gpu``: the process group with ``dist.distributed_timeout_minutes``
    (:func:`process_group_options`), then every torchrun rank builds the provider at the config's TP/PP/EP/ETP,
    then ``provide_distributed_model`` + ``save_megatron_model`` (import) or ``load_megatron_model`` +
    ``save_hf_pretrained`` (export) — the calls of Megatron-Bridge 0.5.0's
    ``examples/conversion/convert_checkpoints_multi_gpu.py``. After a ``megatron_to_hf`` export, rank 0 runs
    :func:`nemotron.runtime.megatron.export_check.run` (with the loaded Megatron model when the export ran in one
    process on a GPU); a failed self-check returns 1."""
    conv = bc.convert or {}
    src, out = str(conv["source"]), str(conv["output_dir"])
    direction = conv["direction"]
    rank0 = (os.environ.get("RANK") or "0") == "0"
    if conv.get("device") == "cpu" and not rank0:  # one conversion writes the output folder, not one per process
        return 0
    saved_layout = None
    try:
        pg_options = None if conv.get("device") == "cpu" else process_group_options(timeout_minutes)
        tokenizer = None
        if direction == "megatron_to_hf":
            export_run_config(src)  # an MTP pattern the export would misread is refused before any process group
            if pg_options is not None:  # a layout saved at another PP is refused before finalize() (and any group)
                saved_layout = export_pipeline_layout(
                    src, int(bc.sections["model"].get("pipeline_model_parallel_size") or 1))
            if rank0:  # the export's tokenizer, loaded before the weights: one that does not load stops here
                tokenizer, tok_name, tok_origin = load_export_tokenizer(src, conv.get("tokenizer_fallback"),
                                                                        bc.trust_remote_code)
    except TranslateError as exc:
        return prestart.refuse(f"ultra3 {bc.stage}", [str(exc)])
    import torch
    from megatron.bridge import AutoBridge

    dtype = {name: getattr(torch, name) for name in CONVERT_DTYPES}[str(conv.get("dtype") or "bfloat16")]
    exported = None  # the Megatron model of a single-rank GPU export: the self-check's reference
    no_model = None  # why the self-check compares no logits
    if pg_options is None:
        if direction == "hf_to_megatron":
            AutoBridge.import_ckpt(src, out, torch_dtype=dtype)
        else:
            with mtp_export_mappings():
                export_bridge(bc, src).export_ckpt(src, out)
            no_model = ("convert.device=cpu: AutoBridge.export_ckpt keeps no Megatron model in memory to run the "
                        "batch through")
    else:
        if not torch.distributed.is_initialized():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            torch.distributed.init_process_group(**pg_options)
        layout = {k: int(v) for k, v in bc.sections["model"].items() if k in (
            "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
            "expert_tensor_parallel_size")}
        bridge = (AutoBridge.from_hf_pretrained(src, torch_dtype=dtype) if direction == "hf_to_megatron"
                  else export_bridge(bc, src))
        provider = bridge.to_megatron_provider(load_weights=direction == "hf_to_megatron")
        for key, value in {**layout, "pipeline_dtype": dtype, "params_dtype": dtype}.items():
            setattr(provider, key, value)
        if saved_layout is not None:  # megatron_to_hf at PP > 1, the checkpoint's own PP (export_pipeline_layout)
            provider.pipeline_model_parallel_layout = saved_layout
        provider.finalize()
        provider.initialize_model_parallel(seed=0)
        if direction == "hf_to_megatron":
            model = provider.provide_distributed_model(wrap_with_ddp=False)
            bridge.save_megatron_model(model, out, hf_tokenizer_path=src)
        else:
            model = bridge.load_megatron_model(src, mp_overrides={**layout, "pipeline_dtype": dtype,
                                                                  "params_dtype": dtype}, wrap_with_ddp=False)
            with mtp_export_mappings():
                bridge.save_hf_pretrained(model, out)
            world = int(os.environ.get("WORLD_SIZE") or torch.distributed.get_world_size())
            if world == 1:
                exported = model
            else:
                no_model = (f"{world} ranks: each holds a shard of the Megatron model; the self-check's Megatron "
                            "forward runs on a single-rank export")
        torch.distributed.barrier()
    if direction == "megatron_to_hf" and rank0 and tokenizer is not None:
        tokenizer.save_pretrained(out)  # the weights' tokenizer beside them: what every consumer loads
        _say(bc.stage, f"tokenizer {tok_name} -> {out} ({tok_origin})")
    if direction == "megatron_to_hf" and conv.get("hf_config_form", "v4") == "v4" and rank0:
        rewrite_config_v4(out)
    if rank0:
        _say(bc.stage, f"{direction}: {src} -> {out}")
    if direction == "megatron_to_hf" and rank0:
        from nemotron.runtime.megatron import export_check

        try:  # the export reloads in transformers and gives the Megatron model's logits: selfcheck.json beside it
            export_check.run(out, src, megatron_model=exported, no_megatron_reason=no_model,
                             catalogue_config=bc.hf_config, trust_remote_code=bc.trust_remote_code,
                             say=lambda line: _say(bc.stage, line))
        except export_check.SelfCheckError:
            return 1  # the verdict line, with both numbers and thresholds, is in the log
    return 0


def rewrite_config_v4(folder: str | os.PathLike[str]) -> bool:
    """Rewrite ``<folder>/config.json`` in place to the v4 NemotronH form (``hybrid_override_pattern``) that
    NeMo RL reads, when it is in the transformers-v5 form; the weights are not touched. Returns whether
    it changed. Raises :class:`nemotron.runtime.common.convert.ConfigFormError` for an unreadable config."""
    import json

    from nemotron.runtime.common.convert import ConfigFormError, config_form, v5_to_v4

    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigFormError(f"{path}: cannot read: {exc}") from None
    if config_form(config) == "v4":
        return False
    tmp = path.with_name(".config.json.tmp")
    tmp.write_text(json.dumps(v5_to_v4(config), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return True


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use stages/ultra3/{pretrain,sft,convert}/run.py --config train.yaml")
