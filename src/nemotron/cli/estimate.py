"""``nemotron ultra3 STAGE -c NAME estimate`` and the JSON form of ``--dry-run``.

Both start from :func:`nemotron.cli.pipeline.prepare_stage` (the same compile, validation and plan as the run), so
the estimate describes exactly the job the run would submit. The arithmetic is :mod:`nemotron.layout.estimate`.

Exit codes: 0; 2 when validation finds errors or when one checkpoint cannot fit the free space of the checkpoint
root (the run is refused for the same reason: :func:`checkpoint_problem` is one of the run's checks); 2 for a stage
the estimate does not model (data prep, RL, convert, quantize).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nemotron.config.catalogue import CatalogueError
from nemotron.config.catalogue import get as get_model
from nemotron.config.compile import config_backend
from nemotron.config.tree import as_int, get, unresolved
from nemotron.errors import Problem, UsageError, ValidationError
from nemotron.layout import estimate as est
from nemotron.layout.views import megatron_view, node_shape

#: The config keys the estimate reads beyond the layout (``+estimate.mfu=0.3``).
MFU_KEY = "estimate.mfu"
KEEP_KEY = "checkpoint.most_recent_k"


def _free_space(path_value: Any) -> tuple[int | None, str | None]:
    """Free bytes of the nearest existing folder of ``path_value`` (statvfs), or (None, None) when unreadable."""
    if not isinstance(path_value, str) or not path_value or unresolved(path_value):
        return None, None
    p = Path(os.path.expanduser(path_value)).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    if p == p.parent:  # nothing of the path but / exists here: it is on storage this machine does not mount
        return None, None
    try:
        st = os.statvfs(p)
    except OSError:
        return None, None
    return st.f_bavail * st.f_frsize, str(p)


def run_estimate(stage: Any, compiled: Any, profile: Any, plan: Any) -> est.RunEstimate:
    """The estimate of a prepared Megatron training stage (pretrain, SFT; Megatron-Bridge or ``-c local``).

    Raises:
        UsageError: a stage whose run the estimate does not model, or a model name not in the catalogue.
    """
    if stage.kind != "megatron":
        raise UsageError(f"estimate models the training stages (pretrain, sft), not {stage.title} ({stage.kind})",
                         "e.g. nemotron ultra3 pretrain -c tiny estimate")
    cfg = compiled.config
    try:
        spec = get_model(get(cfg, "model.name"))
    except CatalogueError as exc:
        raise UsageError(f"model.name: {exc}") from None
    view = megatron_view(cfg)
    shape = node_shape(cfg, profile)
    gpus = max(1, plan.nodes * max(1, plan.gpus_per_node))
    local = config_backend(stage, compiled.config_name) == "local" or get(cfg, "backend") == "local"
    mfu_raw = get(cfg, MFU_KEY, est.DEFAULT_MFU)
    try:
        mfu = float(mfu_raw)
    except (TypeError, ValueError):
        raise UsageError(f"{MFU_KEY}={mfu_raw!r}: not a number", "e.g. +estimate.mfu=0.35") from None
    gpu = getattr(profile, "gpu", None) if profile is not None else None
    walltime = getattr(profile, "time_seconds", None) if profile is not None else None
    margin = as_int(get(cfg, "run.signal_before_s")) or 0
    bf16_layers = 0
    if get(cfg, "model.first_last_layers_bf16"):
        bf16_layers = (as_int(get(cfg, "model.num_layers_at_start_in_bf16")) or 0) + (
            as_int(get(cfg, "model.num_layers_at_end_in_bf16")) or 0)
    free, where = _free_space(get(cfg, "checkpoint.save"))
    if profile is not None and getattr(profile, "tunnel", "local") == "ssh":
        free, where = None, None  # the checkpoint root is on the cluster, not readable from here
    try:
        result = est.estimate_run(
            spec, gpus=gpus, nodes=plan.nodes, gpu=gpu, precision=view.precision, seq_length=int(view.seq),
            global_batch_size=int(view.gbs), steps=int(get(cfg, "train.train_iters") or 0), mfu=mfu,
            full_recompute=view.recompute_granularity == "full", bf16_layers=bf16_layers,
            mtp_depths=view.mtp_depths, tp=int(view.tp) if isinstance(view.tp, int) else 1,
            walltime_seconds=walltime, save_margin_seconds=margin,
            save_interval=as_int(get(cfg, "checkpoint.save_interval")),
            most_recent_k=as_int(get(cfg, KEEP_KEY)) or (2 if local else None),
            ckpt_format="hf-local" if local else "megatron", free_bytes=free, free_path=where)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"estimate: {exc}") from None
    result.ckpt_path = get(cfg, "checkpoint.save")
    if shape.memory_source and profile is None:
        result.notes.append(f"node {shape.memory_source}")
    if local and not gpu:
        result.notes.append("a -c local run on a CPU is far below any GPU peak: see docs/estimate.md for the "
                            "measured CPU step time")
    return result


def checkpoint_problem(result: est.RunEstimate) -> Problem | None:
    """The run's refusal when one checkpoint cannot fit the free space of ``checkpoint.save``'s file system."""
    if result.fits is False:
        return Problem(key="checkpoint.save", value=result.ckpt_path, rule="checkpoint-space",
                       message=(f"one checkpoint is {result.ckpt_bytes / 1e9:,.2f} GB and {result.free_path} has "
                                f"{result.free_bytes / 1e9:,.2f} GB free: the first save would fail"),
                       valid="a checkpoint root with room for at least one checkpoint (checkpoint.save=PATH)")
    return None


def checkpoint_check(stage: Any, compiled: Any, profile: Any, plan: Any) -> list[Problem]:
    """The run's (and the dry run's) check that one checkpoint fits the free space of the checkpoint root; empty
    when it fits, when the space cannot be read, or when the estimate does not model the config."""
    try:
        result = run_estimate(stage, compiled, profile, plan)
    except UsageError:
        return []
    problem = checkpoint_problem(result)
    return [] if problem is None else [problem]


def estimate_section(stage: Any, compiled: Any, profile: Any, plan: Any) -> list[list[str]] | None:
    """Rows of the dry run's estimate table, or None for a stage the estimate does not model."""
    try:
        return run_estimate(stage, compiled, profile, plan).rows()
    except UsageError:
        return None


def estimate_document(result: est.RunEstimate, req: Any, compiled: Any, plan: Any) -> dict[str, Any]:
    from dataclasses import asdict

    body = asdict(result)
    body.update(stage=req.stage.name, config=compiled.config_name, profile=plan.profile, executor=plan.executor,
                verdict=result.verdict(), mfu_key=MFU_KEY)
    return body


def dry_run_document(p: Any) -> dict[str, Any]:
    """``--dry-run --json``: what the text report shows, as data."""
    from nemotron import validation
    from nemotron.cli import jsonout
    from nemotron.cli.dryrun import _profile_values
    from nemotron.errors import NemotronError
    from nemotron.launch import backends
    from nemotron.profiles.schema import redact_text
    from nemotron.validation.refusal import unresolved_refusal

    req, compiled, profile, plan = p.req, p.compiled, p.profile, p.plan
    secrets = list(profile.secret_values().values()) if profile is not None else []
    try:
        job = backends.render(req, compiled, profile, plan)
    except NemotronError as exc:
        if not p.errors:
            raise
        job = f"# not rendered: {exc.message}"
    if secrets:
        job = redact_text(job, secrets)
    refusal = unresolved_refusal(compiled) if not p.errors else None
    estimate = None
    if req.stage.kind == "megatron" and not p.errors:
        try:
            estimate = estimate_document(run_estimate(req.stage, compiled, profile, plan), req, compiled, plan)
        except UsageError as exc:
            estimate = {"unavailable": exc.message}
    config = compiled.config
    if secrets:
        import json

        config = json.loads(redact_text(json.dumps(jsonout.plain(config)), secrets))
    return {
        "stage": req.stage.name, "title": req.stage.title, "config": compiled.config_name,
        "profile": plan.profile, "executor": plan.executor, "layers": list(compiled.layers),
        "resolved": config, "provenance": dict(compiled.provenance),
        "profile_values": _profile_values(profile) if profile is not None else {},
        "resources": {"nodes": plan.nodes, "gpus_per_node": plan.gpus_per_node, "world_size": plan.world_size,
                      "launch": plan.launch, "executor": plan.executor, "image": plan.image},
        "tables": [jsonout.table(t, h, r) for t, h, r in validation.describe(req.stage, compiled.config, profile)],
        "notes": list(p.notes), "job": job, "estimate": estimate,
        "problems": [jsonout.problem(q) for q in p.problems],
        "valid": not p.errors, "refusal": None if refusal is None else f"{refusal.message}; {refusal.hint}",
    }


def run_report(req: Any) -> int:
    """``STAGE [-c NAME] estimate [--json]`` and ``STAGE --dry-run --json``. Returns the exit code.

    Raises:
        ValidationError: validation errors, or a checkpoint that cannot fit (exit 2) — after printing the report.
    """
    from nemotron import report
    from nemotron.cli import jsonout
    from nemotron.cli.pipeline import prepare_stage

    if req.estimate and req.mode != "here" and not req.dry_run:
        pass  # `--run P estimate` estimates the run on P; nothing is submitted
    with jsonout.quiet_stdout() if req.json else _nothing():
        p = prepare_stage(req)
        if req.dry_run and not req.estimate:
            doc = dry_run_document(p)
            jsonout.emit("dry-run", doc)
            if p.errors:
                raise ValidationError(problems=p.problems)
            return 0
        # the estimate is printed whatever validation found (it says what the run would cost); the exit code is
        # still the run's: 2 when the run would be refused, for a checkpoint that cannot fit among the rest
        report.problems(p.problems)
        result = run_estimate(req.stage, p.compiled, p.profile, p.plan)
        if req.json:
            doc = estimate_document(result, req, p.compiled, p.plan)
            doc["problems"] = [jsonout.problem(q) for q in p.problems]
            jsonout.emit("estimate", doc)
        else:
            report.heading(f"{req.stage.title} · config {p.compiled.config_name} · estimate")
            report.table(None, ["what", "value", "how"], result.rows())
        if p.errors:  # the checkpoint-space refusal is one of them (pipeline.prepare_stage)
            raise ValidationError(problems=p.problems)
    return 0


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


__all__ = ["checkpoint_problem", "dry_run_document", "run_estimate", "run_report"]
