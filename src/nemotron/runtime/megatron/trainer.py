"""The ``local`` training loop: transformers' ``Trainer`` on the catalogue's NemotronH, one process.

What it does, in order:

1. threads (``run.env.cpus``), device (one CUDA GPU when visible, else the CPU), precision;
2. data: pretrain → :class:`~nemotron.runtime.megatron.pretrain_data.BlendedSamples` over ``blend.json``
   (``train_iters × global_batch_size`` samples, Megatron's count; the ``valid`` split for the held-out
   loss); SFT → packed Parquet (:mod:`~nemotron.runtime.megatron.sft_data`), one row per sub-sequence unless the
   CUDA Mamba kernels can keep packs apart; token ids are checked against the model's vocabulary, and
   the data folder gets a ``consumed_by`` record (it becomes immutable to data prep);
3. the model: resumed from the newest ``checkpoint-<step>`` in ``checkpoint.load`` (= ``checkpoint.save``,
   a stable folder per run name) that ``latest_checkpointed_iteration.txt`` covers and whose files match their
   record (:func:`nemotron.runtime.common.model.resumable`: others are renamed ``incomplete-``/``damaged-``, never
   deleted, with a warning), continuing the sample stream at the consumed-sample count it recorded
   (:class:`SampleStream`: another ``train_iters`` or ``global_batch_size`` neither repeats nor skips a
   sample); else ``checkpoint.pretrained_checkpoint`` (SFT starts
   from pretrain's output); else freshly initialised;
4. ``Trainer`` with the token-level loss of :mod:`~nemotron.runtime.megatron.loss`, AdamW (β, ε, weight decay from the config; fused on CPU and GPU), gradient clipping,
   Megatron-Core's LR schedule (:class:`~nemotron.runtime.common.settings.Schedule`, exactly), gradient
   accumulation ``global / micro`` batches, token-weighted loss across micro-batches, sequential
   sampling of our already shuffled samples; evaluation every ``eval_interval`` steps on
   ``eval_iters × global_batch_size`` held-out samples (and once at the start of a fresh run);
   a checkpoint every ``save_interval`` steps and at the last step, the newest ``most_recent_k`` kept;
   with sigmoid routing and expert bias, Megatron-Core's bias update after every step
   (:mod:`~nemotron.runtime.megatron.moe`);
5. SIGTERM / SIGUSR1 / SIGINT: finish the current step, save a checkpoint, exit 75 (``EXIT_REQUEUE``) —
   not 0, so no artifact is recorded for an unfinished run; running again resumes from that step;
6. at the end: the final model in Hugging Face form at the top of ``checkpoint.save`` (what
   ``from_pretrained(checkpoint.save)`` and the next stage load), ``summary.json`` (the whole run's first and
   last losses, also across resumes, and the step it resumed at; this segment's tokens, tokens/s, peak GPU
   memory), ``metrics.jsonl`` (every logged step; appended across resumes).

Checkpoint folder layout (``checkpoint.save``)::

    checkpoint-<step>/   model.safetensors, config.json, optimizer.pt, scheduler.pt, rng_state.pth,
                         trainer_state.json  (transformers' resumable checkpoint), nemotron_checkpoint.json
                         (each file's size and SHA-256, consumed samples: written after the save)
    config.json, model.safetensors, generation_config.json   the final model (after a complete run)
    run_config.json   the settings of the run that finished (a rerun with other settings is refused:
                      nemotron.runtime.megatron.lineage.finished_run_problem)
    latest_checkpointed_iteration.txt   the newest completed save (as Megatron writes it; written last)
    metrics.jsonl, metrics.png, summary.json, lineage.json   (metrics.png: the curves, nemotron.runtime.common.curves;
                                                 lineage.json: what the run started on, and each input
                                                 a resume was allowed to change: nemotron.runtime.megatron.lineage)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from nemotron.runtime.common.curves import write_curves_or_say
from nemotron.runtime.common.settings import EXIT_REQUEUE, LocalSettings, thread_count

STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")

#: What this loop needs beyond the base install (the ``local`` extra). Importing this module checks that they
#: are installed (``find_spec``: nothing is loaded), so that the entry's ``run_heavy`` reports a missing one as
#: one line naming the extra, not as a traceback from inside :func:`run`.
NEEDS = ("torch", "transformers")


def _check_installed(modules: tuple[str, ...] = NEEDS) -> None:
    """Raise ``ModuleNotFoundError`` (``name`` set) for the first of ``modules`` that is not installed."""
    import importlib.util

    for name in modules:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


_check_installed()


def _say(msg: str) -> None:
    print(f"[local] {msg}", flush=True)


def device_and_precision(settings: LocalSettings) -> tuple[str, str]:
    """``(device type, precision)``: CUDA when visible, else CPU; ``None`` precision → BF16 on a GPU that
    supports it, FP32 on the CPU."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    precision = settings.precision
    if precision is None:
        precision = "bf16" if device == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    if precision == "fp16" and device == "cpu":
        precision = "fp32"
    return device, precision


def record_consumption(data_path: Path, stage: str, checkpoint_dir: Path, artifact: str) -> Path | None:
    """Mark the data version folder holding ``data_path`` (the nearest folder up with a ``manifest.json``) as
    consumed by the run of ``stage`` that saves to ``checkpoint_dir``, so data prep never rewrites it in
    place. Returns the record (``<version>/consumed_by/<run id>.json``), or None when the data has no
    manifest (hand-made data). Used by the local and the Megatron-Bridge runtimes."""
    from nemotron.data.outputs import MANIFEST, record_consumer

    data_path = Path(data_path)
    folder = data_path if data_path.is_dir() else data_path.parent
    for cand in (folder, *folder.parents[:3]):
        if (cand / MANIFEST).is_file():
            run_id = os.environ.get("NEMOTRON_EXPERIMENT_ID") or f"local-{Path(checkpoint_dir).name}"
            return record_consumer(cand, stage=stage, run_id=run_id, artifact=artifact, checkpoint=str(checkpoint_dir))
    return None


def _data_sources(s: LocalSettings, source: Path) -> list[Path]:
    """The data a run reads: ``source``, or for a pretrain run on a mix (``data.mix_with``) every blend.json
    of the mix (each one's data folder becomes immutable to data prep)."""
    from nemotron.runtime.common.settings import get

    mix = get(s.raw, "data.mix_with") if s.data.blend else None
    if not mix:
        return [source]
    primary = get(s.raw, "data.per_split_data_args_path")
    return [Path(str(p)).expanduser() for p in [primary, *(m.get("blend") for m in mix if isinstance(m, dict))] if p]


class _Data:
    def __init__(self, train: Any, eval: Any, collator: Any, tokens_per_sample: int | None, describe: list[str],
                 source: Path) -> None:
        self.train, self.eval, self.collator = train, eval, collator
        self.tokens_per_sample, self.describe, self.source = tokens_per_sample, describe, source


def pretrain_data(s: LocalSettings, vocab_size: int, num_samples: int | None = None) -> _Data:
    """The blend's samples: ``num_samples`` of the train split (default ``train_iters × global_batch_size``; a
    resumed run asks for the samples it has consumed plus those it will), the held-out set, the description."""
    from nemotron.runtime.megatron.pretrain_data import BlendedSamples, DataError, max_token_id, read_blend

    assert s.blend_path is not None
    blend = read_blend(s.blend_path)
    top = max_token_id(blend["train"] + blend.get("valid", []))
    if top >= vocab_size:
        raise DataError(f"{s.blend_path}: token id {top} does not fit the model's vocabulary of {vocab_size:,} "
                        f"(model {s.model_name}); prepare the data with the model's tokenizer")
    train = BlendedSamples(blend["train"], s.seq_length, num_samples or s.train_iters * s.global_batch_size, s.seed)
    evals = None
    if s.eval_iters and s.eval_interval and "valid" in blend:
        evals = BlendedSamples(blend["valid"], s.seq_length, s.eval_iters * s.global_batch_size, s.seed + 1,
                               shuffle=False)
    lines = [f"blend {s.blend_path}: {len(blend['train'])} train prefix(es)"
             + (f", {len(blend['valid'])} valid" if "valid" in blend else ", no valid split (no held-out loss)")]
    for row in train.summary():
        lines.append(f"  {row['weight']:6.1%}  {row['samples']:>7} samples  {row['tokens']:>11,} tokens  "
                     f"{row['epochs']} epoch(s)  {row['prefix']}")
    return _Data(train, evals, None, s.seq_length, lines, s.blend_path)


def sft_data(s: LocalSettings, vocab_size: int, device: str, num_samples: int | None = None) -> _Data:
    """The packed SFT data: ``num_samples`` packs drawn (default ``train_iters × global_batch_size``), the
    held-out packs, the collators, the description."""
    from nemotron.runtime.common.settings import get
    from nemotron.runtime.megatron.pretrain_data import DataError
    from nemotron.runtime.megatron.sft_data import (
        PackCollator,
        PackDataset,
        choose_layout,
        find_packed_file,
        read_packed,
    )

    assert s.pack_size is not None
    train_path = find_packed_file(s.dataset_root, s.train_data_path, "training", s.pack_size)
    if train_path is None:
        raise DataError(f"{s.dataset_root}: no packed training file (training_{s.pack_size}.idx.parquet); is "
                        f"model.seq_length={s.seq_length} the pack size the data was packed at?")
    valid_path = find_packed_file(s.dataset_root, s.valid_data_path, "validation", s.pack_size)
    layout = choose_layout(device, get(s.raw, "dataset.local_layout"))
    train_rows = read_packed(train_path, s.pack_size)
    valid_rows = read_packed(valid_path, s.pack_size) if valid_path is not None else None
    for rows in (train_rows, valid_rows):
        if rows is not None and len(rows.ids) and int(rows.ids.max()) >= vocab_size:
            raise DataError(f"{rows.path}: token id {int(rows.ids.max())} does not fit the model's vocabulary "
                            f"of {vocab_size:,}")
    train = PackDataset(train_rows, num_samples or s.train_iters * s.global_batch_size, s.seed)
    evals = None
    if valid_rows is not None and s.eval_iters and s.eval_interval:
        evals = PackDataset(valid_rows, s.eval_iters * s.global_batch_size, s.seed + 1, shuffle=False)
    collate = PackCollator(train_rows, layout, s.answer_only_loss)
    eval_collate = PackCollator(valid_rows, layout, s.answer_only_loss) if valid_rows is not None else None
    lines = [f"packed SFT data {train_path}: {len(train_rows)} packs, {train_rows.tokens:,} tokens, "
             f"{train_rows.loss_tokens():,} in the loss; {train.epochs} epoch(s) for "
             f"{len(train)} packs",
             f"layout: {layout} ({'one row per sub-sequence, padding masked' if layout == 'rows' else 'real boundaries via seq_idx'})",
             f"validation: {valid_path} ({len(valid_rows)} packs)" if valid_rows is not None
             else "validation: none found (no held-out loss)"]
    data = _Data(train, evals, collate, None, lines, train_path)
    data.eval_collator = eval_collate  # type: ignore[attr-defined]
    return data


def run(settings: LocalSettings, spec: Any = None) -> int:
    """Train as ``settings`` says; returns the exit code (0 done, ``EXIT_REQUEUE`` saved and stopped on a
    signal). ``spec`` overrides the catalogue entry named by ``model.name`` (tests use a smaller
    vocabulary).

    Raises:
        DataError, ModelError, SettingsError: unusable inputs (the entry prints them as one line).
    """
    import torch

    torch.set_num_threads(thread_count(settings.cpus))
    import transformers
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod
    from nemotron.runtime.megatron import lineage
    from nemotron.runtime.megatron.loss import selected_token_loss

    s = settings
    spec = spec or catalogue.get(s.model_name)
    device, precision = device_and_precision(s)
    transformers.set_seed(s.seed)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    s.save_dir.mkdir(parents=True, exist_ok=True)
    picked = modelmod.resumable(s.load_dir, say=_say) if s.load_dir else None
    step0, resume = picked if picked else (0, None)
    found = [picked] if picked else []
    changes = lineage.check_resume(s, step0 if picked else None)
    if picked and step0 >= s.train_iters and (s.save_dir / "model.safetensors").is_file():
        # a continuation job (run.chain) or a rerun of a finished run: nothing left to do, unless the settings
        # differ from the finished run's (the job would record its final model as made by the new settings)
        problem = lineage.finished_problem(s, step0)  # the entry's refusals() says it first; kept for direct calls
        if problem:
            raise lineage.ResumeConflict(problem)
        _say(f"{s.stage}: already complete: {resume} is at train.train_iters={s.train_iters}; final model in "
             f"{s.save_dir}")
        return 0
    stream = SampleStream.resumed(s, step0, resume)
    data = (pretrain_data(s, spec.vocab_size, stream.total) if s.data.blend
            else sft_data(s, spec.vocab_size, device, stream.total))
    stream.base = data.train
    if resume is not None:
        model = modelmod.build(spec, s.seed)
        start = f"resuming from {resume} (step {step0})"
        if s.pretrained_checkpoint:
            start += f"; checkpoint.pretrained_checkpoint={s.pretrained_checkpoint} is not used when resuming"
    elif s.pretrained_checkpoint is not None:
        model = modelmod.load(spec, s.pretrained_checkpoint)
        start = f"starting from the weights in {modelmod.resolve_weights(s.pretrained_checkpoint)}"
    else:
        model = modelmod.build(spec, s.seed)
        start = "starting from freshly initialised weights"
    params = sum(p.numel() for p in model.parameters())
    _say(f"{s.stage}: model {spec.name} ({params / 1e6:.1f} M parameters in transformers' NemotronH, MTP not "
         f"built) on {device} ({precision}, {torch.get_num_threads()} thread(s)); {start}")
    if resume is not None:
        _say(stream.describe())
        warning = lineage.resume_warning(saved_run(resume), {"train.train_iters": s.train_iters,
                                                             "train.global_batch_size": s.global_batch_size},
                                         step0, resume)
        if warning:
            _say(warning)
    for line in data.describe:
        _say(line)
    data_version = None
    for source in _data_sources(s, data.source):
        rec = record_consumption(source, s.stage, s.save_dir, s.data.artifact)
        if rec is not None:
            _say(f"recorded this run as a consumer of {rec.parent.parent}")
            data_version = data_version or rec.parent.parent
    if resume is None or not (s.save_dir / lineage.LINEAGE).exists():  # what the run started from, kept on resume
        lineage.write(s.save_dir, {
            "stage": s.stage, "model": spec.name, "data": str(data.source),
            "pretrained_checkpoint": str(s.pretrained_checkpoint) if s.pretrained_checkpoint and resume is None
            else None, "inputs": lineage.inputs(s), "input_versions": lineage.input_versions(lineage.inputs(s)),
            "experiment_id": os.environ.get("NEMOTRON_EXPERIMENT_ID"), "transformers": transformers.__version__,
            "torch": torch.__version__})
    elif changes:  # allowed by run.allow_new_inputs: said, and kept in lineage.json
        for c in changes:
            _say(f"{lineage.ALLOW_KEY}: resuming step {found[-1][0]} on {c['key']}={c['to']} (was {c['from']}); "
                 f"recorded in {s.save_dir / lineage.LINEAGE}")
        lineage.record_changes(s.save_dir, changes, found[-1][0], lineage.inputs(s))

    report_to, run_name = _reporting(s, data_version)
    has_eval = data.eval is not None
    args = TrainingArguments(
        output_dir=str(s.save_dir),
        max_steps=s.train_iters,
        per_device_train_batch_size=s.micro_batch_size,
        per_device_eval_batch_size=s.micro_batch_size,
        gradient_accumulation_steps=s.grad_accum,
        learning_rate=s.schedule.max_lr,
        weight_decay=s.weight_decay,
        adam_beta1=s.adam_beta1,
        adam_beta2=s.adam_beta2,
        adam_epsilon=s.adam_eps,
        max_grad_norm=s.clip_grad,
        optim="adamw_torch_fused",
        logging_steps=s.log_interval,
        logging_first_step=True,
        eval_strategy="steps" if has_eval else "no",
        eval_steps=s.eval_interval if has_eval else None,
        eval_on_start=has_eval and resume is None,
        prediction_loss_only=True,
        save_strategy="steps",
        save_steps=s.save_interval,
        save_total_limit=s.keep_checkpoints,
        seed=s.seed,
        data_seed=s.seed,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=device == "cpu",
        report_to=report_to,
        run_name=run_name,
        dataloader_num_workers=0,
        dataloader_pin_memory=device == "cuda",
        remove_unused_columns=False,
        train_sampling_strategy="sequential",
        disable_tqdm=True,
    )

    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    class _Trainer(Trainer):
        loss_is_scaled_for_ga = True  # the loss is normalised by the tokens of the whole accumulated batch

        def compute_loss(self, model: Any, inputs: dict, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            index = inputs.pop("sample_index", None)
            if index is not None and batch_log is not None and model.training:
                batch_log.write(self.state.global_step, index, inputs)
            loss = selected_token_loss(self.accelerator.unwrap_model(model), inputs, num_items_in_batch, autocast)
            return (loss, {"loss": loss}) if return_outputs else loss

        def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
            if self.lr_scheduler is None:
                opt = optimizer or self.optimizer
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                    opt, lambda step: s.schedule.lr(step) / s.schedule.max_lr if s.schedule.max_lr else 0.0)
                self._created_lr_scheduler = True
            return self.lr_scheduler

        def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
            collator = getattr(data, "eval_collator", None)
            if collator is None:
                return super().get_eval_dataloader(eval_dataset)
            saved = self.data_collator
            self.data_collator = collator
            try:
                return super().get_eval_dataloader(eval_dataset)
            finally:
                self.data_collator = saved

    stopper = _SignalStop(stream.record)
    batch_log = _BatchLog.from_env(stream)
    metrics = _Metrics(s, data, stopper, TrainerCallback)
    callbacks = [stopper.callback(TrainerCallback), metrics.callback]
    if spec.is_moe and spec.moe_router_enable_expert_bias and s.expert_bias_rate > 0:
        from nemotron.runtime.megatron.moe import ExpertBiasUpdater

        updater = ExpertBiasUpdater(model, s.expert_bias_rate)

        class ExpertBias(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
                updater.step()
                return control

        callbacks.insert(0, ExpertBias())
        _say(f"expert bias: updated after every step at rate {s.expert_bias_rate:g} in {len(updater.routers)} "
             "router(s) (Megatron-Core's aux-loss-free balancing)")
    trainer = _Trainer(model=model, args=args, train_dataset=stream, eval_dataset=data.eval,
                       data_collator=data.collator, callbacks=callbacks)
    for cb in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cb)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    stopper.install()
    t0 = time.perf_counter()
    try:
        result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    finally:
        stopper.uninstall()
        _finish_wandb(report_to)
    seconds = time.perf_counter() - t0
    step = trainer.state.global_step
    _write_latest(s.save_dir)
    write_curves_or_say(metrics.path, f"{s.stage} (local)", _say)
    if stopper.signal is not None and step < s.train_iters:
        _say(f"stopped by {stopper.signal} at step {step}/{s.train_iters}; checkpoint saved in {s.save_dir}. "
             "Run the same command again to resume.")
        return EXIT_REQUEUE
    trainer.save_model(str(s.save_dir))
    summary = metrics.summary(step, seconds, result)
    if device == "cuda":
        summary["peak_gpu_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9
    _write_json(s.save_dir / "summary.json", summary)
    lineage.write_run_config(s.save_dir, s.raw)  # what a rerun is compared with (lineage.finished_run_problem)
    resumed = f" (resumed at step {summary['resumed_at_step']})" if summary["resumed_at_step"] else ""
    _say(f"done: {step} steps{resumed}; final model in {s.save_dir} (Hugging Face form); "
         + (f"held-out loss {summary['eval_loss_first']:.3f} -> {summary['eval_loss_last']:.3f}; "
            if summary.get("eval_loss_last") is not None and summary.get("eval_loss_first") is not None else "")
         + f"{summary['tokens_per_s']:.0f} tokens/s")
    return 0


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _write_latest(folder: Path, step: int | None = None) -> None:
    """Name ``step`` (default: the newest ``checkpoint-<step>`` with all its files) in
    ``latest_checkpointed_iteration.txt``, atomically: the completion marker, written after the save."""
    from nemotron.runtime.common.model import MARKER, _all_checkpoints

    if step is None:
        found = _all_checkpoints(folder)
        step = found[-1][0] if found else None
    if step is not None:
        tmp = folder / f".{MARKER}.tmp"
        tmp.write_text(f"{step}\n", encoding="utf-8")
        os.replace(tmp, folder / MARKER)


def _reporting(s: LocalSettings, data_version: Path | None) -> tuple[list[str], str | None]:
    """Trackers for ``report_to`` and the run name: TensorBoard always (``logger.tensorboard_dir``, else
    ``<checkpoint.save>/tb_logs``; needs the ``tensorboard`` package of the ``local`` extra); W&B when
    ``logger.wandb_project`` is set (:mod:`nemotron.runtime.megatron.tracking`: run id stable per checkpoint folder,
    so a resumed or requeued run continues the same W&B run; the API key only from the environment)."""
    import importlib.util

    from nemotron.runtime.megatron.tracking import data_label, wandb_identity

    out = []
    if importlib.util.find_spec("tensorboard") is not None or importlib.util.find_spec("tensorboardX") is not None:
        out.append("tensorboard")
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(s.tensorboard_dir or s.save_dir / "tb_logs")
    else:
        _say("TensorBoard is not installed (pip install 'nemotron-cli[local]'): metrics go to metrics.jsonl only")
    artifact = s.data.artifact
    ident = wandb_identity(checkpoint_dir=s.save_dir, project=s.wandb_project, entity=s.wandb_entity,
                           exp_name=s.wandb_exp_name, stage=s.stage,
                           data=data_label(data_version, artifact) if data_version else None)
    if ident is None:
        return out, s.wandb_exp_name
    if importlib.util.find_spec("wandb") is None:
        _say(f"logger.wandb_project={s.wandb_project!r} but wandb is not installed: W&B is off")
        return out, ident.name
    out.append("wandb")
    ident.save_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(ident.env())
    _say(f"W&B: project {ident.project}, run {ident.name!r} (id {ident.run_id}, resumed by every job of this run)")
    return out, ident.name


def _finish_wandb(report_to: list[str]) -> None:
    """Close the W&B run (flushes it; the next job of the run resumes it by id)."""
    if "wandb" in report_to:
        import wandb

        if wandb.run is not None:
            wandb.finish()


#: The sample order this version writes (recorded in each checkpoint): per-epoch permutations seeded by (seed, epoch),
#: independent of the run's total (:class:`~nemotron.runtime.megatron.pretrain_data.GPTSamples`, ``PackDataset``).
SAMPLE_ORDER = "epochwise-v1"


def saved_run(checkpoint: Path) -> dict[str, Any]:
    """``{"train.train_iters", "train.global_batch_size"}`` of the run that saved ``checkpoint`` (its
    ``nemotron_checkpoint.json``, :meth:`SampleStream.record`; a key an older record lacks is None)."""
    from nemotron.runtime.common.model import read_record

    rec = read_record(checkpoint) or {}
    return {"train.train_iters": rec.get("train_iters"), "train.global_batch_size": rec.get("global_batch_size")}


class SampleStream:
    """The training samples as the Trainer indexes them, continuing the stream by consumed-sample count.

    transformers' Trainer resumes step ``S`` by skipping the first ``S × gradient_accumulation`` micro-batches
    of its (sequential) sampler: ``S × global_batch_size`` indices at *this* run's batch size. Index ``i`` of this
    view is therefore sample ``start + (i − skip)`` of the stream (``skip = S × global_batch_size``, ``start`` the
    samples consumed by step ``S``, from the checkpoint's record), so a resumed run goes on exactly where the
    saved one stopped, whatever ``train.global_batch_size`` and ``train.train_iters`` are now (Megatron's
    consumed-samples rule). Length: ``train_iters × global_batch_size``.
    """

    def __init__(self, s: LocalSettings, step0: int, start: int, saved_gbs: int | None, note: str | None) -> None:
        self.s, self.step0, self.start, self.saved_gbs, self.note = s, step0, start, saved_gbs, note
        self.skip = step0 * s.global_batch_size
        self.total = start + (s.train_iters - step0) * s.global_batch_size
        self.base: Any = None

    @classmethod
    def resumed(cls, s: LocalSettings, step0: int, checkpoint: Path | None) -> "SampleStream":
        """The stream of a run starting at ``step0`` from ``checkpoint`` (None: a fresh run).

        Raises:
            ResumeConflict: the checkpoint was trained on another ``rng.seed`` or ``model.seq_length`` (its
                stream is another one: nothing to continue).
        """
        from nemotron.runtime.common.model import read_record
        from nemotron.runtime.megatron import lineage

        if checkpoint is None:
            return cls(s, 0, 0, None, None)
        rec = read_record(checkpoint) or {}
        for key, name, now in (("seed", "rng.seed", s.seed), ("seq_length", "model.seq_length", s.seq_length)):
            if rec.get(key) is not None and rec[key] != now:
                raise lineage.ResumeConflict(
                    f"{name}={now}: {checkpoint} was trained with {name}={rec[key]}, whose sample stream this run "
                    f"cannot continue; set {name}={rec[key]}, or checkpoint.save=<a new folder> for a new run")
        if isinstance(rec.get("consumed_samples"), int) and rec.get("order") == SAMPLE_ORDER:
            return cls(s, step0, rec["consumed_samples"], rec.get("global_batch_size"), None)
        note = (f"{checkpoint.name} does not record the samples it consumed (saved by an older version): "
                f"assuming step {step0} x train.global_batch_size={s.global_batch_size}")
        return cls(s, step0, step0 * s.global_batch_size, None, note)

    def describe(self) -> str:
        text = f"continuing the sample stream at sample {self.start:,}"
        if self.saved_gbs is not None and self.saved_gbs != self.s.global_batch_size:
            text += (f"; train.global_batch_size {self.saved_gbs} -> {self.s.global_batch_size}: continued by "
                     "consumed samples, as Megatron does")
        if self.note:
            text += f"; warning: {self.note}"
        return text

    def consumed(self, step: int) -> int:
        """Samples consumed once step ``step`` is done."""
        return self.start + (step - self.step0) * self.s.global_batch_size

    def position(self, i: int) -> int:
        """The stream position of the Trainer's index ``i``."""
        return self.start + (i - self.skip) if i >= self.skip else i

    def __len__(self) -> int:
        return self.s.train_iters * self.s.global_batch_size

    def __getitem__(self, i: int) -> Any:
        return self.base[self.position(i)]

    def record(self, checkpoint: Path, step: int) -> None:
        """Write ``checkpoint``'s record (:func:`nemotron.runtime.common.model.write_record`): its files' sizes and
        SHA-256, and where the stream stands."""
        from nemotron.runtime.common.model import write_record

        if checkpoint.is_dir():
            write_record(checkpoint, {"step": step, "consumed_samples": self.consumed(step), "order": SAMPLE_ORDER,
                                      "global_batch_size": self.s.global_batch_size,
                                      "train_iters": self.s.train_iters, "seed": self.s.seed,
                                      "seq_length": self.s.seq_length, "stage": self.s.stage})


class _BatchLog:
    """``NEMOTRON_BATCH_LOG=<file.jsonl>``: the samples each step trained on, one ``batch`` record per micro-batch
    (:mod:`nemotron.runtime.megatron.batch_log`'s format: ``step`` = the step before its update, ``samples`` = SHA-256
    ids of the samples' tokens, plus ``index``: their positions in the sample stream). Off by default."""

    def __init__(self, path: str, stream: SampleStream) -> None:
        from nemotron.runtime.megatron.batch_log import BatchLog

        self.log, self.stream = BatchLog(path), stream

    @classmethod
    def from_env(cls, stream: SampleStream) -> "_BatchLog | None":
        from nemotron.runtime.megatron.batch_log import ENV

        path = os.environ.get(ENV)
        return cls(path, stream) if path else None

    def write(self, step: int, index: Any, inputs: dict) -> None:
        from nemotron.runtime.megatron.batch_log import sample_ids

        positions = [int(i) for i in index.reshape(-1).tolist()]
        if "input_ids" in inputs:  # pretraining: the samples' tokens
            ids = sample_ids(inputs["input_ids"])
        else:  # SFT: the packs' tokens
            rows = self.stream.base.rows
            ids = [sample_ids(rows.row(int(self.stream.base.order[p]))[0])[0] for p in positions]
        last, n = self.log._micro
        n = n + 1 if last == step else 0
        self.log._micro = (step, n)
        self.log.write({"kind": "batch", "step": step, "micro_batch": n, "samples": ids, "index": positions})


class _SignalStop:
    """Turns SIGTERM/SIGUSR1/SIGINT into "save at the end of this step, then stop". ``on_saved(checkpoint, step)``
    runs after each save, before ``latest_checkpointed_iteration.txt`` names it (the marker comes last)."""

    def __init__(self, on_saved: Any = None) -> None:
        self.signal: str | None = None
        self._old: dict[int, Any] = {}
        self.on_saved = on_saved

    def _handle(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signal is None:
            _say(f"{name} received: saving a checkpoint at the end of this step, then stopping")
        self.signal = name

    def install(self) -> None:
        for name in STOP_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                self._old[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def callback(self, base: type) -> Any:
        stopper = self

        class StopAndSave(base):  # type: ignore[misc, valid-type]
            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
                # a resumed state carries the intervals of the run that saved it: use this run's config
                state.compute_steps(args, state.max_steps)
                return control

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
                if state.global_step >= state.max_steps:
                    control.should_save = True  # always a checkpoint at the last step (Megatron does too)
                if stopper.signal is not None:
                    control.should_save = True
                    control.should_training_stop = True
                return control

            def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
                if stopper.on_saved is not None:
                    stopper.on_saved(Path(args.output_dir) / f"checkpoint-{state.global_step}", state.global_step)
                _write_latest(Path(args.output_dir), state.global_step)
                _say(f"saved checkpoint-{state.global_step}")
                return control

        return StopAndSave()


class _Metrics:
    """One line per logged step on stdout, and ``metrics.jsonl`` in the checkpoint folder."""

    def __init__(self, s: LocalSettings, data: _Data, stopper: _SignalStop, base: type) -> None:
        self.s, self.data = s, data
        self.path = s.save_dir / "metrics.jsonl"
        self.t0 = time.perf_counter()
        self.step0: int | None = None
        self.eval_losses: list[tuple[int, float]] = []
        self.train_losses: list[tuple[int, float]] = []
        this = self

        class Log(base):  # type: ignore[misc, valid-type]
            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
                this.t0 = time.perf_counter()
                this.step0 = state.global_step
                return control

            def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> Any:
                this.log(state, logs or {})
                return control

        self.callback = Log()

    def tokens(self, steps: int) -> int:
        per = self.data.tokens_per_sample
        if per is None:  # SFT: the real (unpadded) tokens of the packs
            rows = self.data.train.rows
            per = rows.tokens / max(1, len(rows))
        return int(steps * self.s.global_batch_size * per)

    def log(self, state: Any, logs: dict) -> None:
        step = state.global_step
        rec = {"step": step, "time": time.time(), **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
        done = step - (self.step0 or 0)
        elapsed = time.perf_counter() - self.t0
        if "loss" in logs and done > 0:
            rec["tokens_per_s"] = self.tokens(done) / elapsed if elapsed > 0 else None
        if "loss" in logs:
            self.train_losses.append((step, float(logs["loss"])))
        if "eval_loss" in logs:
            self.eval_losses.append((step, float(logs["eval_loss"])))
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
        parts = [f"step {step}/{self.s.train_iters}"]
        if "loss" in logs:
            parts.append(f"loss {logs['loss']:.4f}")
        if "eval_loss" in logs:
            parts.append(f"held-out loss {logs['eval_loss']:.4f}")
        if "learning_rate" in logs:
            parts.append(f"lr {logs['learning_rate']:.3g}")
        if "grad_norm" in logs:
            parts.append(f"grad norm {float(logs['grad_norm']):.3g}")
        if rec.get("tokens_per_s"):
            parts.append(f"{rec['tokens_per_s']:.0f} tokens/s")
        if len(parts) > 1:
            _say(" | ".join(parts))

    def logged(self) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """``(train losses, held-out losses)`` as ``[(step, loss)]`` of the whole run: for a resumed run the
        entries of ``metrics.jsonl`` logged before the resume (from the last fresh start in the folder, where
        the step goes back to 0 or 1), then this segment's; for a fresh run this segment's."""
        if not self.step0:
            return list(self.train_losses), list(self.eval_losses)
        records = []
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("step"), int):
                records.append(rec)
        start = 0
        for i in range(1, len(records)):
            if records[i]["step"] <= 1 < records[i - 1]["step"] or records[i]["step"] < records[i - 1]["step"] == 1:
                start = i
        before = [r for r in records[start:] if r["step"] <= self.step0]
        train = [(r["step"], float(r["loss"])) for r in before if isinstance(r.get("loss"), (int, float))]
        evals = [(r["step"], float(r["eval_loss"])) for r in before if isinstance(r.get("eval_loss"), (int, float))]
        return train + self.train_losses, evals + self.eval_losses

    def summary(self, step: int, seconds: float, result: Any) -> dict[str, Any]:
        """``summary.json``: the whole run's losses (:meth:`logged`; first and last), ``resumed_at_step``
        (None for a run that started at step 0), and this segment's steps, seconds, tokens and tokens/s."""
        done = step - (self.step0 or 0)
        tokens = self.tokens(done)
        train_losses, eval_losses = self.logged()
        return {
            "stage": self.s.stage, "steps": step, "steps_this_run": done, "seconds_this_run": seconds,
            "resumed_at_step": self.step0 or None,
            "tokens_this_run": tokens, "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "train_loss_first": train_losses[0][1] if train_losses else None,
            "train_loss_last": train_losses[-1][1] if train_losses else None,
            "eval_loss_first": eval_losses[0][1] if eval_losses else None,
            "eval_loss_last": eval_losses[-1][1] if eval_losses else None,
            "eval_losses": eval_losses,
        }


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use stages/ultra3/{pretrain,sft}/run.py --config train.yaml")
