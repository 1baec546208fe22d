"""The ``local`` backend of ``ultra3 rlvr`` (GRPO) and ``ultra3 mopd`` (on-policy distillation): one process,
the catalogue's NemotronH in Hugging Face transformers, CPU or one GPU.

The algorithms are TRL's (``trl==1.16``): ``GRPOTrainer`` for RLVR, ``DistillationTrainer`` (on-policy,
``beta=1``: the per-token reverse KL of the student's distribution to the teacher's, on the student's own
samples) for MOPD. Both are transformers ``Trainer`` subclasses, so checkpoints, resume and the signal stop are
those of the local pretrain/SFT runtime (:mod:`nemotron.runtime.megatron.trainer`: ``checkpoint-<step>`` folders with
their record, ``latest_checkpointed_iteration.txt`` written last, SIGTERM/SIGUSR1/SIGINT → save → exit 75; a
rerun resumes at that step, and TRL's seeded ``RepeatSampler`` with the Trainer's batch skipping gives the same
prompts in the same order: ``rollouts.jsonl`` records the prompts of every step).

What we add, and why TRL cannot do it:

* **NeMo RL's advantage** (:func:`grpo_advantages`): TRL's baseline is the group mean including the sample
  itself; NeMo RL's default (``grpo.use_leave_one_out_baseline: true``, the recipes' value) is the mean of the
  *other* generations of the prompt, with their unbiased standard deviation, then the clamp
  ``grpo.advantage_clip_low/high``. TRL has no hook for it, so the GRPO trainer recomputes the advantages from
  the same rewards right after TRL scores them (``_generate_and_score_completions``).
* **Teacher routing** for MOPD: TRL's distillation has one teacher; ours routes each prompt by its task
  (``task`` of our RL JSONL) through NeMo RL's ``teacher_model_by_agent_name`` / ``default_teacher_alias``, built
  by the cluster runtime's own :func:`nemotron.runtime.rl.nemo_rl.teacher_map`, falling back to the general
  teacher, and computes TRL's loss per teacher group of each micro-batch.
* the maths reward (:mod:`nemotron.runtime.rl.rewards`), validation accuracy every ``grpo.val_period`` steps,
  the Hugging Face export ``<checkpoint_dir>/hf/step_N`` + ``hf/latest`` as the cluster runtime writes it
  (:func:`nemotron.runtime.rl.nemo_rl.hf_output`), ``summary.json``, ``metrics.jsonl``.

Key mapping (NeMo RL → TRL): ``grpo.num_generations_per_prompt`` → ``num_generations``;
``policy.train_micro_batch_size`` → ``per_device_train_batch_size``, ``train_global_batch_size / micro`` →
``gradient_accumulation_steps`` (one optimizer step per generation batch); ``loss_fn.ratio_clip_min/max`` →
``epsilon`` / ``epsilon_high``; ``loss_fn.reference_policy_kl_penalty`` → ``beta`` (TRL's per-token KL is the k3
estimator, ``reference_policy_kl_type: k3``; ``use_on_policy_kl_approximation`` → ``use_bias_correction_kl``,
the importance-weighted k3); ``loss_fn.token_level_loss: true`` → ``loss_type="dapo"`` (sum over the batch's
tokens / their count), false → ``"grpo"`` (per-sequence mean); ``policy.generation.*`` → ``temperature``,
``top_p``, ``top_k``, ``max_completion_length``; ``policy.megatron_cfg.optimizer.*`` → AdamW; the LR is constant
after ``lr_warmup_iters`` linear warmup from 0 (Megatron's warmup starts at ``lr_warmup_init``).
Not reproduced: importance-sampling correction between a separate generation engine and the policy (one
model generates and trains here, so the ratio is 1 at the first iteration), dynamic sampling, reward shaping,
keeping the top-k checkpoints by a validation metric (``checkpointing.keep_top_k`` keeps the newest k here).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

from nemotron.runtime.common.curves import write_curves_or_say
from nemotron.runtime.common.settings import EXIT_REQUEUE, thread_count
from nemotron.runtime.megatron.lineage import input_versions
from nemotron.runtime.rl.rl_settings import RLSettings, route
from nemotron.runtime.rl.warmup import read_tasks  # the panel's routing key of each RL line, one reader

NEEDS = ("torch", "transformers", "trl", "datasets", "math_verify")
#: Written in each checkpoint's record: the prompt order this version gives (TRL's RepeatSampler seeded by grpo.seed).
PROMPT_ORDER = "trl-repeat-sampler-v1"


def _say(msg: str) -> None:
    print(f"[local] {msg}", flush=True)


def grpo_advantages(rewards: Sequence[float], group_size: int, leave_one_out: bool = True, normalize: bool = True,
                    clip: tuple[float | None, float | None] = (None, None), eps: float = 1e-6) -> list[float]:
    """NeMo RL's GRPO advantages of a batch whose consecutive ``group_size`` rewards belong to one prompt.

    Per prompt (nemo_rl/algorithms/utils.py ``calculate_baseline_and_std_per_prompt`` and
    advantage_estimator.py ``GRPOAdvantageEstimator`` @ 7ea279a): baseline ``b_i`` = mean of the group's rewards
    (without ``r_i`` when ``leave_one_out``); ``s_i`` = the unbiased standard deviation of that same set
    (0 when it has one element); advantage ``r_i - b_i``, divided by ``s_i + eps`` where ``s_i > 0`` when
    ``normalize``; then clamped to ``clip`` (``grpo.advantage_clip_low/high``).

    Args:
        rewards: length ``n × group_size`` (floats).
        group_size: generations per prompt, at least 1.

    Raises:
        ValueError: ``len(rewards)`` not a multiple of ``group_size``.
    """
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    out: list[float] = []
    for g in range(0, len(rewards), group_size):
        group = [float(r) for r in rewards[g:g + group_size]]
        for i, r in enumerate(group):
            others = group[:i] + group[i + 1:] if leave_one_out else group
            if not others:  # a group of one with leave-one-out: no baseline (NeMo RL sets it to the reward)
                out.append(0.0)
                continue
            n = len(others)
            mean = sum(others) / n
            var = (sum(x * x for x in others) / n - mean * mean) * (n / (n - 1)) if n > 1 else 0.0
            std = math.sqrt(var) if var > 0 else 0.0
            a = r - mean
            if normalize and std > 0:
                a = a / (std + eps)
            lo, hi = clip
            if lo is not None:
                a = max(a, lo)
            if hi is not None:
                a = min(a, hi)
            out.append(a)
    return out


# ----------------------------------------------------------------------------------------------------------------
# shared: data, model, callbacks, export


def _rows_dataset(s: RLSettings, tokenizer: Any) -> tuple[Any, list[Any], int]:
    """``(datasets.Dataset of rendered prompts, validation rows, prompts dropped as too long)``."""
    from datasets import Dataset

    from nemotron.runtime.rl.rl_data import prompt_template, read_rows, render

    prompt, system = prompt_template(s.prompt_file, s.system_prompt_file)
    rows = read_rows(s.train_path)
    tasks = read_tasks(s.train_path)
    records, dropped = [], 0
    limit = s.max_total_length - s.max_new_tokens
    for row, task in zip(rows, tasks):
        text = render(tokenizer, row, prompt, system)
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) > limit:
            dropped += 1
            continue
        rec = {"prompt": text, "answer": row.answer, "source": row.source, "task": task}
        if s.objective == "distillation":
            rec["teacher"] = route(task, s.teachers, s.default_teacher or "")
        records.append(rec)
    if not records:
        from nemotron.runtime.rl.rl_data import RLDataError

        raise RLDataError(f"data.train.data_path={s.train_path}: every prompt is longer than "
                          f"policy.max_total_sequence_length - policy.generation.max_new_tokens = {limit} tokens")
    val = read_rows(s.val_path, s.max_val_samples) if s.val_path is not None and s.max_val_samples else []
    return Dataset.from_list(records), val, dropped


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def export_hf(trainer: Any, tokenizer: Any, s: RLSettings, step: int) -> Path:
    """The final policy in Hugging Face form at ``<checkpoint_dir>/hf/step_<step>`` (weights, config, tokenizer),
    ``hf/latest`` pointing at it, and ``outputs.json`` naming it as ``output_artifact`` — the form
    :func:`nemotron.runtime.rl.nemo_rl.finish` gives the cluster run's result."""
    import shutil

    from nemotron.config import artifacts
    from nemotron.runtime.rl.nemo_rl import hf_output

    out = hf_output(s.checkpoint_dir, step)
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    trainer.save_model(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    latest = hf_output(s.checkpoint_dir)
    link = latest.with_name(f".{latest.name}.tmp")
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(out.name)
    os.replace(link, latest)
    artifacts.write_outputs({s.output_artifact: {"path": str(out), "step": step, "checkpoint_dir": str(s.checkpoint_dir),
                                                 "source": str(s.checkpoint_dir / f"checkpoint-{step}")}})
    return out


class _Log:
    """``metrics.jsonl`` (one record per logged step, appended across resumes) and one line per step."""

    KEYS = (("loss", "loss", ".4f"), ("reward", "reward", ".3f"), ("kl", "kl", ".4g"),
            ("val:accuracy", "val accuracy", ".3f"), ("grad_norm", "grad norm", ".3g"),
            ("completions/mean_length", "completion tokens", ".1f"))

    def __init__(self, s: RLSettings) -> None:
        self.s = s
        self.path = s.checkpoint_dir / "metrics.jsonl"
        self.records: list[dict] = []

    def write(self, step: int, logs: dict) -> None:
        rec = {"step": step, "time": time.time(), **{k: float(v) for k, v in logs.items()
                                                     if isinstance(v, (int, float)) and not isinstance(v, bool)}}
        self.records.append(rec)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
        parts = [f"step {step}/{self.s.max_steps}"] + [f"{label} {rec[k]:{fmt}}" for k, label, fmt in self.KEYS
                                                       if k in rec]
        kls = [f"{k[3:]} {rec[k]:.4g}" for k in sorted(rec) if k.startswith("kl/")]
        if kls:
            parts.append("KL by teacher: " + ", ".join(kls))
        if len(parts) > 1:
            _say(" | ".join(parts))

    def history(self) -> list[dict]:
        """Every record of the run: those before a resume (from the file) and this segment's."""
        out = []
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return list(self.records)
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("step"), (int, float)):
                out.append(rec)
        return out


def _callbacks(s: RLSettings, log: _Log, stopper: Any, val_rows: list[Any], tokenizer: Any) -> list[Any]:
    from transformers import TrainerCallback

    from nemotron.runtime.rl.rl_data import accuracy, prompt_template

    prompt, system = prompt_template(s.prompt_file, s.system_prompt_file)

    class Metrics(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> Any:
            logs = dict(logs or {})
            if "train_runtime" in logs:
                return control
            log.write(state.global_step, logs)
            return control

    class Validate(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> Any:
            step = state.global_step
            due = (s.val_period and step % s.val_period == 0) or (s.val_at_end and step >= state.max_steps)
            if val_rows and due and stopper.signal is None:
                t0 = time.perf_counter()
                acc, _ = accuracy(model, tokenizer, val_rows, prompt, system, s.max_new_tokens, s.val_temperature,
                                  batch_size=s.val_batch_size, seed=s.seed)
                log.write(step, {"val:accuracy": acc, "val:samples": len(val_rows),
                                 "val:seconds": time.perf_counter() - t0})
            return control

    return [stopper.callback(TrainerCallback), Metrics(), Validate()]


def _record(s: RLSettings) -> Any:
    """The checkpoint record writer (:func:`nemotron.runtime.common.model.write_record`), run after each save."""
    from nemotron.runtime.common.model import write_record

    def on_saved(checkpoint: Path, step: int) -> None:
        if checkpoint.is_dir():
            write_record(checkpoint, {"step": step, "stage": s.stage, "seed": s.seed, "order": PROMPT_ORDER,
                                      "prompts_consumed": step * s.num_prompts,
                                      "num_prompts_per_step": s.num_prompts,
                                      "num_generations_per_prompt": s.num_generations})

    return on_saved


def _resume_conflict(s: RLSettings, checkpoint: Path) -> str | None:
    """A one-line refusal when ``checkpoint`` was trained with another seed or prompts per step (its prompt
    stream is another one), else None."""
    from nemotron.runtime.common.model import read_record

    rec = read_record(checkpoint) or {}
    for key, name, now in (("seed", "grpo.seed", s.seed), ("num_prompts_per_step", "grpo.num_prompts_per_step",
                                                            s.num_prompts),
                           ("num_generations_per_prompt", "grpo.num_generations_per_prompt", s.num_generations)):
        if rec.get(key) is not None and rec[key] != now:
            return (f"{name}={now}: {checkpoint} was trained with {name}={rec[key]}, whose prompt stream this run "
                    f"cannot continue; set {name}={rec[key]}, or checkpointing.checkpoint_dir=<a new folder>")
    return None


def _common_args(s: RLSettings, device: str) -> dict[str, Any]:
    return dict(
        output_dir=str(s.checkpoint_dir), max_steps=s.max_steps,
        per_device_train_batch_size=s.micro_batch_size, gradient_accumulation_steps=s.grad_accum,
        learning_rate=s.lr, weight_decay=s.weight_decay, adam_beta1=s.adam_beta1, adam_beta2=s.adam_beta2,
        adam_epsilon=s.adam_eps, max_grad_norm=s.max_grad_norm, lr_scheduler_type="constant_with_warmup",
        warmup_steps=s.warmup, logging_steps=1, save_strategy="steps", save_steps=s.save_period,
        save_total_limit=s.keep, seed=s.seed, data_seed=s.seed, bf16=device == "cuda", fp16=False,
        use_cpu=device == "cpu", report_to=[], disable_tqdm=True, gradient_checkpointing=False,
        dataloader_num_workers=0, remove_unused_columns=False, shuffle_dataset=s.shuffle,
        max_completion_length=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k or 0,
        generation_kwargs={"use_cache": True},
    )


# ----------------------------------------------------------------------------------------------------------------
# the run


def run(s: RLSettings, spec: Any = None) -> int:
    """Train ``s`` (GRPO for ``rlvr``, routed on-policy distillation for ``mopd``); returns the exit code (0 done,
    75 saved and stopped on a signal, 2 a refused resume).

    Raises:
        RLDataError, ModelError, SettingsError: unusable inputs (the entry prints them as one line).
    """
    import torch

    torch.set_num_threads(thread_count(s.cpus))
    import transformers

    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod
    from nemotron.runtime.megatron.trainer import _SignalStop, _write_latest, record_consumption
    from nemotron.runtime.rl.nemo_rl import hf_output
    from nemotron.runtime.rl.rl_data import find_tokenizer, load_tokenizer

    spec = spec or catalogue.get(s.model_name)
    device = _device()
    transformers.set_seed(s.seed)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    s.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    picked = modelmod.resumable(s.checkpoint_dir, say=_say)
    step0, resume = picked if picked else (0, None)
    if resume is not None:
        conflict = _resume_conflict(s, resume)
        if conflict:
            import sys

            print(f"ultra3 {s.stage}: {conflict}", file=sys.stderr, flush=True)
            return 2
        if step0 >= s.max_steps and (hf_output(s.checkpoint_dir, step0) / "config.json").is_file():
            from nemotron.runtime.megatron.lineage import finished_run_problem

            problem = finished_run_problem(s.checkpoint_dir, s.raw, save_key="checkpointing.checkpoint_dir")
            if problem:
                import sys

                print(f"ultra3 {s.stage}: {problem}", file=sys.stderr, flush=True)
                return 2
            _say(f"{s.stage}: already complete: {resume} is at grpo.max_num_steps={s.max_steps}; final model in "
                 f"{hf_output(s.checkpoint_dir, step0)}")
            return 0
    policy = modelmod.resolve_weights(s.policy_path)
    tok_dir = find_tokenizer(policy, s.tokenizer_path)
    tokenizer = load_tokenizer(tok_dir)
    model = modelmod.load(spec, s.policy_path)
    train, val_rows, dropped = _rows_dataset(s, tokenizer)
    params = sum(p.numel() for p in model.parameters())
    start = f"resuming from {resume} (step {step0})" if resume else f"starting from {policy}"
    _say(f"{s.stage}: model {spec.name} ({params / 1e6:.1f} M parameters) on {device}, {torch.get_num_threads()} "
         f"thread(s); {start}; tokenizer {tok_dir}")
    _say(f"prompts: {len(train)} from {s.train_path}" + (f" ({dropped} longer than the prompt budget left out)"
                                                          if dropped else "")
         + f"; {s.num_prompts} a step x {s.num_generations} generation(s) of up to {s.max_new_tokens} tokens; "
         f"validation: {validation_phrase(len(val_rows), s.val_period, s.val_at_end)}")
    rec = record_consumption(s.train_path, s.stage, s.checkpoint_dir, "rl-data")
    if rec is not None:
        _say(f"recorded this run as a consumer of {rec.parent.parent}")
    if resume is None or not (s.checkpoint_dir / "lineage.json").exists():
        _write_json(s.checkpoint_dir / "lineage.json", {
            "stage": s.stage, "model": spec.name, "data": str(s.train_path), "policy": str(policy),
            "tokenizer": str(tok_dir), "teachers": {k: str(v) for k, v in s.teachers.items()},
            "input_versions": input_versions({"policy.model_name": s.policy_path, "data.train.data_path": s.train_path,
                                              **{f"_teachers.{k}": v for k, v in s.teachers.items()}}),
            "experiment_id": os.environ.get("NEMOTRON_EXPERIMENT_ID"), "transformers": transformers.__version__,
            "torch": torch.__version__})
    log = _Log(s)
    stopper = _SignalStop(_record(s))
    callbacks = _callbacks(s, log, stopper, val_rows, tokenizer)
    rollouts = s.checkpoint_dir / "rollouts.jsonl"
    if s.objective == "reward":
        trainer = _grpo_trainer(s, model, tokenizer, train, callbacks, device, rollouts)
    else:
        trainer = _mopd_trainer(s, spec, model, tokenizer, train, callbacks, device, rollouts)
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for cb in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cb)
    # TRL writes a hub model card into the checkpoint folder at every save ("a fine-tuned version of [None]" for a
    # local base): the run writes its own README.md at the end instead (model_card)
    trainer.create_model_card = lambda *args, **kwargs: None
    stopper.install()
    t0 = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    finally:
        stopper.uninstall()
    seconds = time.perf_counter() - t0
    step = trainer.state.global_step
    _write_latest(s.checkpoint_dir)
    write_curves_or_say(log.path, f"{s.stage} (local)", _say)
    if stopper.signal is not None and step < s.max_steps:
        _say(f"stopped by {stopper.signal} at step {step}/{s.max_steps}; checkpoint saved in {s.checkpoint_dir}. "
             "Run the same command again to resume.")
        return EXIT_REQUEUE
    out = export_hf(trainer, tokenizer, s, step)
    summary = _summary(s, log, step, step0, seconds, rollouts)
    _write_json(s.checkpoint_dir / "summary.json", summary)
    (s.checkpoint_dir / "README.md").write_text(model_card(s, policy, out, summary), encoding="utf-8")
    from nemotron.runtime.megatron.lineage import write_run_config

    write_run_config(s.checkpoint_dir, s.raw)  # what a rerun is compared with (lineage.finished_run_problem)
    resumed = f" (resumed at step {step0})" if step0 else ""
    metric = (f"reward {summary['reward_first']:.3f} -> {summary['reward_last']:.3f}" if s.objective == "reward"
              else f"reverse KL {summary['kl_first']:.4g} -> {summary['kl_last']:.4g}")
    acc = summary.get("val_accuracy_last")
    _say(f"done: {step} steps{resumed} in {seconds:.0f} s; {metric}"
         + (f"; validation accuracy {acc:.3f}" if acc is not None else "") + f"; final model in {out} (Hugging Face form)")
    if s.objective == "reward":
        hist = log.history()
        zero = zero_reward_line([float(r["reward"]) for r in hist if isinstance(r.get("reward"), (int, float))],
                                [float(r["grad_norm"]) for r in hist if isinstance(r.get("grad_norm"), (int, float))])
        if zero:
            _say(zero)
    return 0


def model_card(s: RLSettings, policy: Path, out: Path, summary: dict[str, Any]) -> str:
    """The ``README.md`` of a local RL run's checkpoint folder (Markdown): what the run was (stage, objective,
    steps), the model it started from (``policy``: a local folder), its data and teachers, and where the result is
    (``out``: ``hf/step_N``), with the metrics of ``summary`` (:func:`_summary`)."""
    what = "GRPO with the maths reward" if s.objective == "reward" else "on-policy distillation (reverse KL)"
    lines = [f"# {s.checkpoint_dir.name}", "",
             f"`nemotron ultra3 {s.stage} -c local`: {what}, {summary.get('steps')} step(s), on this machine.", "",
             f"- started from: `{policy}`", f"- prompts: `{s.train_path}`"]
    lines += [f"- teacher `{name}`: `{path}`" for name, path in s.teachers.items()]
    lines += [f"- result (Hugging Face form): `{out}` (`hf/latest` points at it); training state: `checkpoint-<step>`",
              "- run record: `summary.json`, `metrics.jsonl`, `lineage.json`, `rollouts.jsonl` in this folder"]
    if s.objective == "reward" and summary.get("reward_first") is not None:
        lines.append(f"- mean reward: {summary['reward_first']:.3f} (first step) -> {summary['reward_last']:.3f} "
                     "(last)")
    elif summary.get("kl_first") is not None:
        lines.append(f"- reverse KL: {summary['kl_first']:.4g} (first step) -> {summary['kl_last']:.4g} (last)")
    return "\n".join(lines) + "\n"


def validation_phrase(prompts: int, val_period: int, val_at_end: bool) -> str:
    """How often the run validates, for its start line: ``"8 prompts every 2 steps and at the end"``, ``"8 prompts at
    the end only"`` (``grpo.val_period`` 0 with ``grpo.val_at_end``), ``"none (grpo.val_period 0, grpo.val_at_end
    false)"``."""
    if val_period:
        return f"{prompts} prompts every {val_period} steps" + (" and at the end" if val_at_end else "")
    if val_at_end:
        return f"{prompts} prompts at the end only (grpo.val_period 0)"
    return "none (grpo.val_period 0, grpo.val_at_end false)"


def zero_reward_line(rewards: list[float], grad_norms: list[float]) -> str | None:
    """The line a GRPO run says when every logged mean reward (``rewards``, in [0, 1]: NeMo RL's math check) was 0:
    every group's advantage is then 0, so with every logged gradient norm 0 (or none logged) the policy did not
    change and the checkpoint equals its start. None when some reward was not 0 or nothing was logged."""
    if not rewards or any(r != 0 for r in rewards):
        return None
    if any(g != 0 for g in grad_norms):
        return ("all rewards were 0: no reward signal (every advantage 0); the update came from the other loss terms "
                "only")
    return ("all rewards were 0: the policy did not change (every advantage 0, gradient norm 0): the checkpoint "
            "equals its start; more steps, generations or a larger model give the reward something to tell apart")


def _summary(s: RLSettings, log: _Log, step: int, step0: int, seconds: float, rollouts: Path) -> dict[str, Any]:
    hist = log.history()

    def series(key: str) -> list[float]:
        return [float(r[key]) for r in hist if isinstance(r.get(key), (int, float))]

    # MOPD's loss is the per-token reverse KL to the routed teacher (TRL's distillation with beta=1)
    rewards, accs, losses = series("reward"), series("val:accuracy"), series("loss")
    gen_tokens = 0
    try:
        for line in rollouts.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("step", -1) >= step0:
                gen_tokens += int(rec.get("completion_tokens", 0))
    except (OSError, ValueError):
        pass
    out: dict[str, Any] = {
        "stage": s.stage, "steps": step, "steps_this_run": step - step0, "resumed_at_step": step0 or None,
        "seconds_this_run": seconds, "generated_tokens_this_run": gen_tokens,
        "generated_tokens_per_s": gen_tokens / seconds if seconds > 0 else 0.0,
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
        "val_accuracy_first": accs[0] if accs else None, "val_accuracy_last": accs[-1] if accs else None,
    }
    if s.objective == "reward":
        out.update(reward_first=rewards[0] if rewards else None, reward_last=rewards[-1] if rewards else None,
                   reward_mean=sum(rewards) / len(rewards) if rewards else None)
    else:
        out.update(kl_first=losses[0] if losses else None, kl_last=losses[-1] if losses else None)
    return out


# ----------------------------------------------------------------------------------------------------------------
# GRPO (rlvr)


def _reward_func(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """TRL reward function: NeMo RL's math check of each completion against its ``answer`` column."""
    from nemotron.runtime.rl.rewards import math_reward

    texts = [c if isinstance(c, str) else (c[-1]["content"] if c else "") for c in completions]
    return [math_reward(t, a) for t, a in zip(texts, answer)]


_reward_func.__name__ = "math"


def _grpo_trainer(s: RLSettings, model: Any, tokenizer: Any, train: Any, callbacks: list[Any], device: str,
                  rollouts: Path) -> Any:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        **_common_args(s, device),
        num_generations=s.num_generations, generation_batch_size=s.global_batch_size,
        num_iterations=1, epsilon=s.ratio_clip_min, epsilon_high=s.ratio_clip_max,
        beta=s.kl_penalty, use_bias_correction_kl=bool(s.kl_penalty and s.on_policy_kl),
        loss_type="dapo" if s.token_level_loss else "grpo", scale_rewards="group", mask_truncated_completions=False,
    )

    class NemoRLGRPO(GRPOTrainer):
        """TRL's GRPO with NeMo RL's leave-one-out advantage (:func:`grpo_advantages`) and a rollout record."""

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._nemotron_batch = (out[:, 0].detach().cpu().tolist(), [x["source"] for x in inputs],
                                    [len(c) for c in completion_ids_list])
            return out

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            out = super()._generate_and_score_completions(inputs)
            if not self.model.training:
                return out
            rewards, sources, lengths = self._nemotron_batch
            adv = grpo_advantages(rewards, self.num_generations, s.leave_one_out, s.normalize_rewards,
                                  s.advantage_clip)
            out["advantages"] = torch.tensor(adv, dtype=out["advantages"].dtype, device=out["advantages"].device)
            with open(rollouts, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"step": self.state.global_step, "prompts": sources[::self.num_generations],
                                     "rewards": rewards, "advantages": adv,
                                     "completion_tokens": sum(lengths)}) + "\n")
            return out

    return NemoRLGRPO(model=model, reward_funcs=_reward_func, args=args, train_dataset=train,
                      processing_class=tokenizer, callbacks=callbacks)


# ----------------------------------------------------------------------------------------------------------------
# MOPD


def _mopd_trainer(s: RLSettings, spec: Any, model: Any, tokenizer: Any, train: Any, callbacks: list[Any],
                  device: str, rollouts: Path) -> Any:
    import torch
    from trl import DistillationConfig, DistillationTrainer

    from nemotron.runtime.common import model as modelmod

    assert s.default_teacher is not None
    by_path: dict[str, Any] = {}
    aliases = sorted(s.teachers)
    teachers: dict[str, Any] = {}
    for alias in aliases:
        key = str(modelmod.resolve_weights(s.teachers[alias]).resolve())
        if key not in by_path:  # slots sharing a checkpoint share one teacher (deduplicate_shared_teacher_checkpoints)
            t = modelmod.load(spec, s.teachers[alias]).to(device).eval()
            for p in t.parameters():
                p.requires_grad_(False)
            by_path[key] = t
        teachers[alias] = by_path[key]
    used = sorted(set(train["teacher"]))
    _say(f"teachers: {len(by_path)} checkpoint(s) for {len(aliases)} route(s); the prompts go to "
         + ", ".join(f"{a} ({modelmod.resolve_weights(s.teachers[a])})" for a in used)
         + f"; fallback {s.default_teacher}")
    index = {a: i for i, a in enumerate(aliases)}
    args = DistillationConfig(**_common_args(s, device), beta=1.0)

    class RoutedDistillation(DistillationTrainer):
        """TRL's on-policy distillation, each sample scored by the teacher its prompt is routed to."""

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            out = super()._generate_and_score_completions(inputs)
            n = out["completion_ids"].shape[0]
            if n != len(inputs):  # one completion per prompt (num_generations_per_prompt: 1)
                raise RuntimeError(f"{n} completions for {len(inputs)} prompts")
            out["teacher_index"] = torch.tensor([index[x["teacher"]] for x in inputs], device=out["completion_ids"].device)
            if self.model.training:
                with open(rollouts, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": self.state.global_step, "prompts": [x["source"] for x in inputs],
                                         "teachers": [x["teacher"] for x in inputs],
                                         "completion_tokens": int(out["completion_mask"].sum())}) + "\n")
            return out

        def _compute_loss(self, unwrapped_student: Any, inputs: Any, num_items_in_batch: Any) -> Any:
            which = inputs["teacher_index"]
            total = ent = valid = None
            for t in sorted(set(which.tolist())):
                sel = which == t
                sub = {k: (v[sel] if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == which.shape[0] else v)
                       for k, v in inputs.items() if k != "teacher_index"}
                self.teacher_model = teachers[aliases[t]]
                loss, e, nv = super()._compute_loss(unwrapped_student, sub, num_items_in_batch)
                if nv.item() > 0 and num_items_in_batch is not None:
                    self._metrics["train"][f"kl/{aliases[t]}"].append(
                        float(loss.detach() * num_items_in_batch / nv))
                total = loss if total is None else total + loss
                ent = e if ent is None else ent + e
                valid = nv if valid is None else valid + nv
            return total, ent, valid

    return RoutedDistillation(model=model, teacher_model=teachers[s.default_teacher], args=args, train_dataset=train,
                              processing_class=tokenizer, callbacks=callbacks)


__all__ = ["NEEDS", "PROMPT_ORDER", "export_hf", "grpo_advantages", "run"]
