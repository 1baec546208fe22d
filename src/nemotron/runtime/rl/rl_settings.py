"""The compiled ``train.yaml`` of a ``local`` rlvr/mopd run, read into one record (stdlib only: the entry reads and
checks it before anything heavy is imported).

Keys are NeMo RL's, as the stages' configs carry them (``stages/ultra3/{rlvr,mopd}/local.yaml`` over the recipe
``student_rlvr1.yaml`` / ``mopd.yaml``): ``grpo.{num_prompts_per_step, num_generations_per_prompt, max_num_steps,
val_period, val_at_end, max_val_samples, val_batch_size, normalize_rewards, use_leave_one_out_baseline,
advantage_clip_low, advantage_clip_high, seed}``, ``loss_fn.{ratio_clip_min, ratio_clip_max, ratio_clip_c,
reference_policy_kl_penalty, reference_policy_kl_type, use_on_policy_kl_approximation, token_level_loss}``,
``policy.{model_name, tokenizer.name, train_global_batch_size, train_micro_batch_size, max_total_sequence_length,
max_grad_norm, generation.{max_new_tokens, temperature, top_p, top_k, val_temperature}}``,
``policy.megatron_cfg.optimizer.{lr, weight_decay, adam_beta1, adam_beta2, adam_eps}``,
``policy.megatron_cfg.scheduler.lr_warmup_iters``, ``checkpointing.{checkpoint_dir, save_period, keep_top_k}``,
``data.{shuffle, train.data_path, validation.data_path, default.prompt_file, default.system_prompt_file}``,
``env.math.math_verify_impl``; ours: ``model.name``, ``run.env.cpus``, ``output_artifact``; MOPD: the panel
``_teachers`` and ``teacher_routing`` (turned into NeMo RL's ``teacher_model_by_agent_name`` /
``default_teacher_alias`` by :func:`nemotron.runtime.rl.nemo_rl.teacher_map`, the cluster runtime's own function).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.runtime.common.settings import SettingsError, _float, _int, config_path, get
from nemotron.runtime.rl.panel import panel, route  # MOPD's panel, shared with mopd-warmup

_panel = panel


@dataclass(frozen=True)
class RLSettings:
    """One local RL run. Counts are steps/prompts/tokens; paths absolute."""

    stage: str                       # the registry name ("rlvr", "mopd")
    objective: str                   # the row's rl_objective: "reward" (GRPO) | "distillation" (on-policy)
    model_name: str
    policy_path: Path
    tokenizer_path: Path | None
    train_path: Path
    val_path: Path | None
    checkpoint_dir: Path
    save_period: int
    keep: int
    num_prompts: int
    num_generations: int
    max_steps: int
    val_period: int
    val_at_end: bool
    max_val_samples: int
    val_batch_size: int
    normalize_rewards: bool
    leave_one_out: bool
    advantage_clip: tuple[float | None, float | None]
    ratio_clip_min: float
    ratio_clip_max: float
    kl_penalty: float
    kl_type: str
    on_policy_kl: bool
    token_level_loss: bool
    lr: float
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_eps: float
    warmup: int
    max_grad_norm: float
    global_batch_size: int
    micro_batch_size: int
    max_new_tokens: int
    max_total_length: int
    temperature: float
    top_p: float
    top_k: int | None
    val_temperature: float
    seed: int
    shuffle: bool
    prompt_file: Path | None
    system_prompt_file: Path | None
    cpus: int | None
    output_artifact: str
    teachers: dict[str, Path] = field(default_factory=dict)   # alias (agent) -> checkpoint (MOPD)
    default_teacher: str | None = None                         # the alias of the fallback (general) teacher
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def grad_accum(self) -> int:
        return self.global_batch_size // self.micro_batch_size


def _path(cfg: dict, key: str, unresolved_ok: bool) -> Path | None:
    value = get(cfg, key)
    if unresolved_ok and value not in (None, "") and "${" in str(value):
        return Path(str(value))
    return config_path(value, key)


def read(cfg: dict, stage: str, *, unresolved_ok: bool = False) -> RLSettings:
    """Read and check the settings of a local ``stage`` run: a stage whose registry row has an ``rl_objective``
    (``rlvr``: a reward; ``mopd``: a distillation).

    Raises:
        SettingsError: a missing or impossible value (each message names the key and the valid values).
    """
    from nemotron.runtime.rl.rewards import check_impl

    from nemotron.config.registry import STAGES

    row = next((r for r in STAGES if r.name == stage), None)
    objective = row.rl_objective if row is not None else ""
    if not objective:
        runs = ", ".join(repr(r.name) for r in STAGES if r.rl_objective)
        raise SettingsError(f"stage {stage!r}: the local RL runtime runs the stages with an RL objective ({runs})")
    distills = objective == "distillation"
    prompts = _int(cfg, "grpo.num_prompts_per_step", minimum=1)
    gens = _int(cfg, "grpo.num_generations_per_prompt", 1, minimum=1)
    if not distills and gens < 2:
        raise SettingsError(f"grpo.num_generations_per_prompt={gens}: GRPO's group baseline needs at least 2 "
                            "generations per prompt")
    gbs = _int(cfg, "policy.train_global_batch_size", minimum=1)
    mbs = _int(cfg, "policy.train_micro_batch_size", minimum=1)
    if gbs != prompts * gens:
        raise SettingsError(f"policy.train_global_batch_size={gbs}: must equal grpo.num_prompts_per_step x "
                            f"grpo.num_generations_per_prompt = {prompts} x {gens} = {prompts * gens} (one optimizer "
                            "step per generation batch, as NeMo RL's GRPO)")
    if gbs % mbs:
        raise SettingsError(f"policy.train_global_batch_size={gbs}: must be a multiple of "
                            f"policy.train_micro_batch_size={mbs}")
    if distills and gens != 1:
        raise SettingsError(f"grpo.num_generations_per_prompt={gens}: on-policy distillation here samples one "
                            "completion per prompt (the MOPD recipe's value); set grpo.num_generations_per_prompt=1")
    kl_type = str(get(cfg, "loss_fn.reference_policy_kl_type", "k3"))
    kl = _float(cfg, "loss_fn.reference_policy_kl_penalty", 0.0)
    if kl and kl_type != "k3":
        raise SettingsError(f"loss_fn.reference_policy_kl_type={kl_type!r}: the local runtime (TRL's GRPO) has the "
                            "low-variance k3 estimator only; set loss_fn.reference_policy_kl_type=k3")
    if get(cfg, "loss_fn.ratio_clip_c") is not None:
        raise SettingsError(f"loss_fn.ratio_clip_c={get(cfg, 'loss_fn.ratio_clip_c')}: dual-clip PPO is not in the "
                            "local runtime (TRL's GRPO); set loss_fn.ratio_clip_c=null")
    problem = check_impl(get(cfg, "env.math.math_verify_impl"))
    if problem:
        raise SettingsError(problem)
    ckdir = _path(cfg, "checkpointing.checkpoint_dir", unresolved_ok)
    if ckdir is None:
        raise SettingsError("checkpointing.checkpoint_dir is not set: the run needs a stable checkpoint folder")
    policy = _path(cfg, "policy.model_name", unresolved_ok)
    if policy is None:
        raise SettingsError("policy.model_name is not set: point it at the checkpoint to start from (or use `pipe`)")
    train = _path(cfg, "data.train.data_path", unresolved_ok)
    if train is None:
        raise SettingsError("data.train.data_path is not set: point it at train.jsonl of `data prep rl`")
    from nemotron.runtime.rl.val_split import empty_validation

    empty = empty_validation(cfg)
    if empty is not None:
        raise SettingsError(empty)
    tok = get(cfg, "policy.tokenizer.name")
    top_k = get(cfg, "policy.generation.top_k")
    opt = "policy.megatron_cfg.optimizer"
    teachers: dict[str, Path] = {}
    default_teacher = None
    if distills:
        teachers, default_teacher = _panel(cfg, unresolved_ok)
    cpus = get(cfg, "run.env.cpus")
    max_new = _int(cfg, "policy.generation.max_new_tokens", minimum=1)
    total = _int(cfg, "policy.max_total_sequence_length", minimum=2)
    if max_new >= total:
        raise SettingsError(f"policy.generation.max_new_tokens={max_new}: must be below "
                            f"policy.max_total_sequence_length={total} (the prompt needs room)")
    return RLSettings(
        stage=stage,
        objective=objective,
        model_name=str(get(cfg, "model.name", "small")),
        policy_path=policy,
        tokenizer_path=_path(cfg, "policy.tokenizer.name", unresolved_ok) if tok else None,
        train_path=train,
        val_path=_path(cfg, "data.validation.data_path", unresolved_ok),
        checkpoint_dir=ckdir,
        save_period=_int(cfg, "checkpointing.save_period", 10, minimum=1),
        keep=_int(cfg, "checkpointing.keep_top_k", 2, minimum=1),
        num_prompts=prompts, num_generations=gens,
        max_steps=_int(cfg, "grpo.max_num_steps", minimum=1),
        val_period=_int(cfg, "grpo.val_period", 0, minimum=0),
        val_at_end=bool(get(cfg, "grpo.val_at_end", False)),
        max_val_samples=_int(cfg, "grpo.max_val_samples", 0, minimum=0),
        val_batch_size=_int(cfg, "grpo.val_batch_size", 8, minimum=1),
        normalize_rewards=bool(get(cfg, "grpo.normalize_rewards", True)),
        leave_one_out=bool(get(cfg, "grpo.use_leave_one_out_baseline", True)),
        advantage_clip=(_opt_float(cfg, "grpo.advantage_clip_low"), _opt_float(cfg, "grpo.advantage_clip_high")),
        ratio_clip_min=_float(cfg, "loss_fn.ratio_clip_min", 0.2),
        ratio_clip_max=_float(cfg, "loss_fn.ratio_clip_max", 0.2),
        kl_penalty=kl, kl_type=kl_type,
        on_policy_kl=bool(get(cfg, "loss_fn.use_on_policy_kl_approximation", False)),
        token_level_loss=bool(get(cfg, "loss_fn.token_level_loss", True)),
        lr=_float(cfg, f"{opt}.lr", 1e-6),
        weight_decay=_float(cfg, f"{opt}.weight_decay", 0.0),
        adam_beta1=_float(cfg, f"{opt}.adam_beta1", 0.9),
        adam_beta2=_float(cfg, f"{opt}.adam_beta2", 0.999),
        adam_eps=_float(cfg, f"{opt}.adam_eps", 1e-8),
        warmup=_int(cfg, "policy.megatron_cfg.scheduler.lr_warmup_iters", 0, minimum=0),
        max_grad_norm=_float(cfg, "policy.max_grad_norm", 1.0),
        global_batch_size=gbs, micro_batch_size=mbs,
        max_new_tokens=max_new, max_total_length=total,
        temperature=_float(cfg, "policy.generation.temperature", 1.0),
        top_p=_float(cfg, "policy.generation.top_p", 1.0),
        top_k=None if top_k is None else _int(cfg, "policy.generation.top_k", minimum=1),
        val_temperature=_float(cfg, "policy.generation.val_temperature", 0.0),
        seed=_int(cfg, "grpo.seed", 42),
        shuffle=bool(get(cfg, "data.shuffle", True)),
        prompt_file=_path(cfg, "data.default.prompt_file", unresolved_ok),
        system_prompt_file=_path(cfg, "data.default.system_prompt_file", unresolved_ok),
        cpus=None if cpus is None else _int(cfg, "run.env.cpus", minimum=1),
        output_artifact=str(get(cfg, "output_artifact", row.produces[0])),
        teachers=teachers, default_teacher=default_teacher, raw=cfg,
    )


def _opt_float(cfg: dict, key: str) -> float | None:
    return None if get(cfg, key) is None else _float(cfg, key)


__all__ = ["RLSettings", "panel", "read", "route"]
