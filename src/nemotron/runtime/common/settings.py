"""The compiled ``train.yaml`` of a ``local`` pretrain/SFT run, read into one record; and Megatron-Core's
learning-rate schedule as a pure function.

Stdlib only: the entry script reads and checks the settings before it imports anything heavy.

Keys read (Megatron-Bridge ``ConfigContainer`` names, as in ``stages/ultra3/{pretrain,sft}/default.yaml``):
``model.name``, ``model.seq_length``, ``train.{train_iters, global_batch_size, micro_batch_size}``,
``validation.{eval_interval, eval_iters}``, ``optimizer.{lr, min_lr, weight_decay, adam_beta1, adam_beta2,
adam_eps, clip_grad}``, ``scheduler.{lr_decay_style, lr_warmup_iters, lr_decay_iters, lr_wsd_decay_style,
lr_wsd_decay_iters}``, ``checkpoint.{save, load, save_interval, pretrained_checkpoint, most_recent_k}``,
``logger.{log_interval, tensorboard_dir, wandb_project, wandb_entity, wandb_exp_name}``, ``rng.seed``,
``mixed_precision``, ``run.env.cpus``, ``model.moe_router_bias_update_rate`` (optional, ``+key``); pretrain: ``data.per_split_data_args_path``; SFT:
``dataset.{dataset_root, packed_sequence_specs.*, dataset_kwargs.answer_only_loss}``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.config.registry import TrainingData, get_stage
from nemotron.layout import rules

#: ``mixed_precision`` values the local runtime understands → autocast dtype (None = FP32 on the CPU,
#: BF16 on a GPU). Megatron-Bridge preset names; FP8/NVFP4 presets need Transformer Engine.
LOCAL_PRECISIONS = {None: None, "auto": None, "fp32": "fp32", "32": "fp32", "bf16_mixed": "bf16", "bf16": "bf16",
                    "fp16_mixed": "fp16", "fp16": "fp16"}
#: Checkpoints kept in ``checkpoint.save`` when ``checkpoint.most_recent_k`` is not set (each one of the
#: small model holds 0.9 GB: FP32 weights + two Adam moments).
DEFAULT_KEEP = 2
#: Exit code of a run that saved and stopped on a signal before ``train_iters`` (run it again to go on).
EXIT_REQUEUE = 75


class SettingsError(ValueError):
    """A config value the local runtime cannot use; ``str()`` names the key, the value and the fix."""


def get(cfg: dict, key: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for ``key="a.b"``; ``default`` when any part is missing or None."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return default if node is None else node


def shown(value: Any) -> str:
    """``value`` as the config writes it, for a message: ``null``, ``true``/``false``, a quoted string, else as is
    (Python's ``None`` or ``True`` is no word of the YAML the user wrote)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _int(cfg: dict, key: str, default: Any = None, minimum: int | None = None) -> int:
    value = get(cfg, key, default)
    if isinstance(value, bool):
        raise SettingsError(f"{key}={shown(value)}: expected an integer")
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        raise SettingsError(f"{key}={shown(value)}: expected an integer") from None
    if isinstance(value, float) and (value != out or abs(value) > 2 ** 53):  # 2**53: floats beyond are no exact ints
        raise SettingsError(f"{key}={shown(value)}: expected an integer")
    if minimum is not None and out < minimum:
        raise SettingsError(f"{key}={out}: must be at least {minimum}")
    return out


def _float(cfg: dict, key: str, default: Any = None) -> float:
    value = get(cfg, key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{key}={shown(value)}: expected a number") from None


@dataclass(frozen=True)
class Schedule:
    """Megatron-Core ``OptimizerParamScheduler`` settings (iteration-based, initial LR 0)."""

    max_lr: float
    min_lr: float
    warmup: int
    decay_iters: int
    style: str = "cosine"
    wsd_decay_iters: int = 0
    wsd_style: str = "linear"

    def lr(self, step: int) -> float:
        """The learning rate after ``step`` scheduler steps (the LR of optimizer step ``step + 1``).

        Same arithmetic as Megatron-Core 0.16 ``OptimizerParamScheduler.get_lr`` with ``init_lr=0``:
        linear warmup 0 → max over ``warmup`` steps; then ``constant``, ``linear``, ``cosine``,
        ``inverse-square-root`` or ``WSD`` (stable until ``decay_iters - wsd_decay_iters``, then
        ``linear | cosine | exponential | minus_sqrt`` down to ``min_lr``); ``min_lr`` after ``decay_iters``.
        """
        if self.warmup > 0 and step <= self.warmup:
            return self.max_lr * step / self.warmup
        if self.style == "constant":
            return self.max_lr
        if step > self.decay_iters:
            return self.min_lr
        if self.style == "inverse-square-root":
            return max(self.min_lr, self.max_lr * max(self.warmup, 1) ** 0.5 / max(step, 1) ** 0.5)
        ratio = (step - self.warmup) / (self.decay_iters - self.warmup)
        if self.style == "linear":
            coeff = 1.0 - ratio
        elif self.style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        else:  # WSD
            start = self.decay_iters - self.wsd_decay_iters
            if step <= start:
                coeff = 1.0
            else:
                r = (step - start) / self.wsd_decay_iters
                coeff = {"linear": 1.0 - r, "cosine": 0.5 * (math.cos(math.pi * r) + 1.0),
                         "exponential": 2.0 * 0.5 ** r - 1.0, "minus_sqrt": 1.0 - math.sqrt(r)}[self.wsd_style]
        return self.min_lr + coeff * (self.max_lr - self.min_lr)


@dataclass(frozen=True)
class LocalSettings:
    """What a ``local`` pretrain/SFT run needs, read from the compiled config (units in the names).

    ``global_batch_size`` and ``micro_batch_size`` count samples of ``seq_length + 1`` tokens
    (pretrain) or packs of ``seq_length`` tokens (SFT), as in Megatron; with one process the
    gradient is accumulated over ``global_batch_size / micro_batch_size`` micro-batches.
    """

    stage: str
    model_name: str
    seq_length: int
    train_iters: int
    global_batch_size: int
    micro_batch_size: int
    eval_interval: int
    eval_iters: int
    schedule: Schedule
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_eps: float
    clip_grad: float
    save_dir: Path
    load_dir: Path | None
    save_interval: int
    keep_checkpoints: int
    pretrained_checkpoint: Path | None
    log_interval: int
    tensorboard_dir: Path | None
    wandb_project: str | None
    wandb_entity: str | None
    wandb_exp_name: str | None
    seed: int
    cpus: int | None
    precision: str | None  # None (FP32 on CPU, BF16 on GPU) | "fp32" | "bf16" | "fp16"
    expert_bias_rate: float = 1e-3  # model.moe_router_bias_update_rate (Megatron-Core default 1e-3)
    # pretrain
    blend_path: Path | None = None
    # sft
    dataset_root: Path | None = None
    train_data_path: Path | None = None
    valid_data_path: Path | None = None
    pack_size: int | None = None
    answer_only_loss: bool = True
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per optimizer step (one process: DP = 1)."""
        return self.global_batch_size // self.micro_batch_size

    @property
    def data(self) -> TrainingData:
        """The training data of its stage's registry row (:func:`training_data`): a blend (pretrain) or packed
        Parquet (SFT), and the artifact the run records itself as a consumer of."""
        return training_data(self.stage)


def training_data(stage: str) -> TrainingData:
    """The training data the local trainer reads for ``stage``: its registry row's
    :attr:`~nemotron.config.registry.Stage.training_data`.

    Raises:
        SettingsError: ``stage`` is not a registry stage, or one that trains on no training data (the local trainer
            trains the rows that set ``trains_on``: ``pretrain``, ``sft``).
    """
    try:
        row = get_stage(stage)
    except KeyError as exc:
        raise SettingsError(str(exc.args[0])) from None
    if row.training_data is None:
        from nemotron.config.registry import STAGES

        raise SettingsError(f"stage {stage!r}: the local trainer trains the stages that read training data "
                            f"({', '.join(s.name for s in STAGES if s.training_data is not None)})")
    return row.training_data


def config_path(value: Any, key: str | None = None, error: type[SettingsError] = SettingsError) -> Path | None:
    """A config path, ``~`` expanded and absolute; None when unset.

    Raises:
        SettingsError (or ``error``): a value still holding ``${...}`` (an artifact or variable unresolved
            when the config compiled), named by ``key`` when given.
    """
    if value in (None, ""):
        return None
    text = str(value)
    if "${" in text:
        what = f"{key}={text!r}: unresolved" if key else f"unresolved value {text!r}"
        raise error(f"{what}; run the upstream stage first (or `pipe`), or set the key")
    return Path(os.path.expanduser(text)).absolute()


def read(cfg: dict, stage: str, *, unresolved_ok: bool = False) -> LocalSettings:
    """Read and check the settings of a ``local`` run of ``stage`` (a row that trains on training data:
    ``"pretrain"`` reads a blend, ``"sft"`` packed Parquet; :func:`training_data`).

    ``unresolved_ok``: a path still holding ``${...}`` (an artifact not produced yet) is kept as it is
    instead of refused, so ``--dry-run`` (:mod:`nemotron.validation.checks`) runs every other check of
    this reader before the upstream stage has run.

    Raises:
        SettingsError: a missing or impossible value (every message names the key).
    """
    def path(value: Any, key: str) -> Path | None:
        if unresolved_ok and value not in (None, "") and "${" in str(value):
            return Path(str(value))
        return config_path(value, key)

    data = training_data(stage)
    train_iters = _int(cfg, "train.train_iters", minimum=1)
    gbs = _int(cfg, "train.global_batch_size", minimum=1)
    mbs = _int(cfg, "train.micro_batch_size", minimum=1)
    if gbs % mbs:
        raise SettingsError(f"train.global_batch_size={gbs}: must be a multiple of train.micro_batch_size={mbs} "
                            "(one process, so the gradient is accumulated over global / micro batches)")
    style = str(get(cfg, "scheduler.lr_decay_style", "cosine"))
    wsd_style = str(get(cfg, "scheduler.lr_wsd_decay_style", "linear"))
    warmup = _int(cfg, "scheduler.lr_warmup_iters", 0, minimum=0)
    decay = _int(cfg, "scheduler.lr_decay_iters", train_iters, minimum=1)
    # unset: the whole decay, as Megatron-Bridge's ConfigContainer sets it (training/config.py, 0.5.0)
    wsd = _int(cfg, "scheduler.lr_wsd_decay_iters", decay, minimum=0)
    lr, min_lr = _float(cfg, "optimizer.lr"), _float(cfg, "optimizer.min_lr", 0.0)
    # the launch rules --dry-run applies (nemotron.layout.rules), applied again here
    for problem in (rules.lr_warmup(train_iters, warmup, decay) + rules.lr_decay_style(style, wsd_style, wsd, decay)
                    + rules.lr_range(lr, min_lr)):
        if problem.severity == "error":
            raise SettingsError(problem.render())
    mp = get(cfg, "mixed_precision")
    key = mp if mp is None else str(mp)
    if key not in LOCAL_PRECISIONS:
        raise SettingsError(f"mixed_precision={mp!r}: the local runtime (no Transformer Engine) supports "
                            "null (FP32 on the CPU, BF16 on a GPU), fp32, bf16_mixed, fp16_mixed")
    cpus = get(cfg, "run.env.cpus")
    save = path(get(cfg, "checkpoint.save"), "checkpoint.save")
    if save is None:
        raise SettingsError("checkpoint.save is not set: the run needs a stable checkpoint folder")
    pretrained = path(get(cfg, "checkpoint.pretrained_checkpoint"), "checkpoint.pretrained_checkpoint")
    tb = get(cfg, "logger.tensorboard_dir")
    common: dict[str, Any] = dict(
        stage=stage,
        model_name=str(get(cfg, "model.name", "small")),
        seq_length=_int(cfg, "model.seq_length", minimum=2),
        train_iters=train_iters, global_batch_size=gbs, micro_batch_size=mbs,
        eval_interval=_int(cfg, "validation.eval_interval", 0, minimum=0),
        eval_iters=_int(cfg, "validation.eval_iters", 0, minimum=0),
        schedule=Schedule(max_lr=lr, min_lr=min_lr, warmup=warmup, decay_iters=decay, style=style,
                          wsd_decay_iters=wsd, wsd_style=wsd_style),
        weight_decay=_float(cfg, "optimizer.weight_decay", 0.0),
        adam_beta1=_float(cfg, "optimizer.adam_beta1", 0.9),
        adam_beta2=_float(cfg, "optimizer.adam_beta2", 0.999),
        adam_eps=_float(cfg, "optimizer.adam_eps", 1e-8),
        clip_grad=_float(cfg, "optimizer.clip_grad", 1.0),  # Megatron-Core default clip_grad = 1.0
        save_dir=save,
        load_dir=path(get(cfg, "checkpoint.load"), "checkpoint.load") or save,
        save_interval=_int(cfg, "checkpoint.save_interval", train_iters, minimum=1),
        keep_checkpoints=_int(cfg, "checkpoint.most_recent_k", DEFAULT_KEEP, minimum=1),
        pretrained_checkpoint=pretrained,
        log_interval=_int(cfg, "logger.log_interval", 1, minimum=1),
        tensorboard_dir=path(tb, "logger.tensorboard_dir") if tb else None,
        wandb_project=get(cfg, "logger.wandb_project"),
        wandb_entity=get(cfg, "logger.wandb_entity"),
        wandb_exp_name=get(cfg, "logger.wandb_exp_name"),
        seed=_int(cfg, "rng.seed", 1234),
        cpus=None if cpus is None else _int(cfg, "run.env.cpus", minimum=1),
        precision=LOCAL_PRECISIONS[key],
        expert_bias_rate=_float(cfg, "model.moe_router_bias_update_rate", 1e-3),
        raw=cfg,
    )
    if get(cfg, "model.mtp_num_layers", 0):
        raise SettingsError(f"model.mtp_num_layers={get(cfg, 'model.mtp_num_layers')}: transformers' NemotronH "
                            "does not build the MTP block; set 0 for a local run")
    if data.blend:
        blend = path(get(cfg, "data.per_split_data_args_path"), "data.per_split_data_args_path")
        if blend is None:
            raise SettingsError("data.per_split_data_args_path is not set: point it at the blend.json of "
                                "`data prep pretrain` (or use `pipe`)")
        return LocalSettings(**common, blend_path=blend)
    specs = "dataset.packed_sequence_specs"
    pack = _int(cfg, f"{specs}.packed_sequence_size", common["seq_length"], minimum=2)
    if pack != common["seq_length"]:
        raise SettingsError(f"{specs}.packed_sequence_size={pack}: must equal model.seq_length="
                            f"{common['seq_length']} (the pack size the data was packed at)")
    return LocalSettings(
        **common,
        dataset_root=path(get(cfg, "dataset.dataset_root"), "dataset.dataset_root"),
        train_data_path=path(get(cfg, f"{specs}.packed_train_data_path"), f"{specs}.packed_train_data_path"),
        valid_data_path=path(get(cfg, f"{specs}.packed_val_data_path"), f"{specs}.packed_val_data_path"),
        pack_size=pack,
        answer_only_loss=bool(get(cfg, "dataset.dataset_kwargs.answer_only_loss", True)),
    )


def thread_count(cpus: int | None) -> int:
    """Threads for torch on this machine: ``run.env.cpus`` when set (capped at the CPUs this process
    may use), else all of them."""
    try:
        avail = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        avail = os.cpu_count() or 1
    return max(1, min(cpus, avail) if cpus else avail)


__all__ = [
    "DEFAULT_KEEP",
    "EXIT_REQUEUE",
    "LOCAL_PRECISIONS",
    "LocalSettings",
    "Schedule",
    "SettingsError",
    "config_path",
    "get",
    "read",
    "thread_count",
]
