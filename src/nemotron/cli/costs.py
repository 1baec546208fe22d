"""What a training run costs before it is queued: the estimate of a prepared stage (:mod:`nemotron.layout.estimate`
on the compiled config, the profile and the plan) and the run's check that one checkpoint fits the free space of the
checkpoint root. Used by the ``estimate`` command, the dry run's estimate table and the run's own checks
(:func:`nemotron.cli.pipeline.prepare_stage`): one computation for all three.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nemotron.config.catalogue import CatalogueError
from nemotron.config.catalogue import get as get_model
from nemotron.config.compile import config_backend
from nemotron.config.tree import as_int, get, unresolved
from nemotron.errors import Problem, UsageError
from nemotron.layout import estimate as est
from nemotron.layout.rules import iterations_of
from nemotron.layout.views import megatron_view, node_shape

if TYPE_CHECKING:
    from nemotron.profiles.profile import ExecutorProfile

#: The config keys the estimate reads beyond the layout (``+estimate.mfu=0.3``).
MFU_KEY = "estimate.mfu"
KEEP_KEY = "checkpoint.most_recent_k"


def _free_space(path_value: Any) -> tuple[int | None, str | None]:
    """Free bytes of the nearest existing folder of ``path_value`` (statvfs), or (None, None) when unreadable."""
    if not isinstance(path_value, str) or not path_value or unresolved(path_value):
        return None, None
    p = Path(os.path.expanduser(path_value)).absolute()

    def exists(path: Path) -> bool:
        try:
            return path.exists()
        except OSError:  # a name too long for the file system (validation's rule output-folder says so)
            return False

    while not exists(p) and p != p.parent:
        p = p.parent
    if p == p.parent:  # nothing of the path but / exists here: it is on storage this machine does not mount
        return None, None
    try:
        st = os.statvfs(p)
    except OSError:
        return None, None
    return st.f_bavail * st.f_frsize, str(p)


def cluster_path(profile: ExecutorProfile | None) -> str | None:
    """Why the checkpoint root's free space is not measured on this machine, or None when it is: a profile whose
    jobs run elsewhere (Slurm, through a local or an ssh tunnel; Ray) keeps its checkpoints on its nodes' storage, and
    a folder that happens to exist at the same path here (one a failed submission made, say) is this machine's disk,
    not that mount. Measured for a run on this machine (no profile, a ``local`` profile)."""
    if profile is None or profile.settings.on_this_machine:
        return None
    return f"cluster path (profile {profile.name} runs its jobs on other machines)"


def _cpu_peak() -> tuple[float, str, str] | None:
    """This machine's FP32 ``torch.mm`` rate (TFLOP/s, best of 3 of 1024 x 1024), or None without torch or with a
    visible GPU (the local runtime then trains on it)."""
    try:
        import time

        import torch
    except ImportError:
        return None
    if torch.cuda.is_available():
        return None
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    best = 0.0
    for _ in range(3):
        t = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * 1024**3 / max(time.perf_counter() - t, 1e-9))
    return best / 1e12, "fp32", "CPU"


def run_estimate(stage: Any, compiled: Any, profile: ExecutorProfile | None, plan: Any, measure_cpu: bool = False) -> est.RunEstimate:
    """The estimate of a prepared Megatron training stage (pretrain, SFT; Megatron-Bridge or ``-c local``).

    Raises:
        UsageError: a stage whose run the estimate does not model, or a model name not in the catalogue.
    """
    if not stage.family.estimate:
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
    gpu = profile.settings.gpu if profile is not None else None
    walltime = profile.time_seconds if profile is not None else None
    margin = as_int(get(cfg, "run.signal_before_s")) or 0
    bf16_layers = 0
    if get(cfg, "model.first_last_layers_bf16"):
        bf16_layers = (as_int(get(cfg, "model.num_layers_at_start_in_bf16")) or 0) + (
            as_int(get(cfg, "model.num_layers_at_end_in_bf16")) or 0)
    peak = None
    if local and not gpu and not os.environ.get("CUDA_VISIBLE_DEVICES") and measure_cpu:
        # a -c local run on this machine's CPU: its FP32 rate, not a datasheet GPU's (the `estimate` command only:
        # the dry run and the run's checks do not import torch)
        peak = _cpu_peak()
    # MTP boosting trains the MTP head on a frozen backbone (the config says so: mtp_boost.freeze_backbone); the local
    # runtime's head runs mtp_boost.num_steps steps whatever model.mtp_num_layers says (0: transformers builds none)
    frozen = bool(get(cfg, "mtp_boost.freeze_backbone"))
    depths = view.mtp_depths
    if frozen and local:
        depths = as_int(get(cfg, "mtp_boost.num_steps"))
    free, where = _free_space(get(cfg, "checkpoint.save"))
    unchecked = cluster_path(profile)
    if unchecked:  # a folder at the same path here is not the storage of the machines the job runs on
        free, where = None, None
    try:
        result = est.estimate_run(
            spec, gpus=gpus, nodes=plan.nodes, gpu=gpu, precision=view.precision, seq_length=int(view.seq),
            global_batch_size=int(view.gbs), steps=iterations_of(get(cfg, "train.train_iters"), get(cfg, "train.train_samples"),
                                                                  view.gbs) or 0, mfu=mfu,
            full_recompute=view.recompute_granularity == "full", bf16_layers=bf16_layers,
            mtp_depths=depths, tp=int(view.tp) if isinstance(view.tp, int) else 1, frozen_backbone=frozen,
            walltime_seconds=walltime, save_margin_seconds=margin,
            save_interval=as_int(get(cfg, "checkpoint.save_interval")),
            most_recent_k=as_int(get(cfg, KEEP_KEY)) or (2 if local else None),
            ckpt_format="hf-local" if local else "megatron", free_bytes=free, free_path=where, peak=peak)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"estimate: {exc}") from None
    result.ckpt_path = get(cfg, "checkpoint.save")
    result.free_unchecked = unchecked
    if shape.memory_source and profile is None and peak is None:
        result.notes.append(f"node {shape.memory_source}")
    if local and peak is None and not gpu:
        result.notes.append("a -c local run on a CPU is far below this GPU peak: `estimate` measures this CPU instead")
    if frozen and local:
        result.notes.append("not counted: the backbone's greedy continuations of the training prompts "
                            "(data.continuation_tokens) and the acceptance measurement before and after training")
    if peak is not None:
        result.notes.append("a -c local run on this CPU: its FP32 torch.mm rate measured now stands for the peak "
                            "(bench/estimate_calibration.py measured an MFU of about 0.33 against it)")
    return result


def explicit_root(compiled: Any, profile: ExecutorProfile | None) -> bool:
    """Whether the checkpoint root was chosen by the user: ``checkpoint.save=...`` on the command line, the profile's
    ``checkpoint_root`` set in env.toml, or ``$NEMOTRON_CKPT_ROOT`` set in this shell without a profile. Otherwise it
    is a default (``./checkpoints``, or ``<job_dir>/checkpoints`` of a profile that names no storage)."""
    from nemotron.config.compile import OVERRIDE

    if compiled.provenance.get("checkpoint.save") == OVERRIDE:
        return True
    if profile is not None:
        return profile.provenance.get("checkpoint_root", "default") not in ("default", None) \
            and profile.settings.checkpoint_root is not None
    return bool(os.environ.get("NEMOTRON_CKPT_ROOT"))


def checkpoint_problem(result: est.RunEstimate, explicit: bool = True) -> Problem | None:
    """The check that one checkpoint fits the free space of ``checkpoint.save``'s file system: an error (the run is
    refused, and the dry run says so) for a checkpoint root the user chose; a warning for a default root, which
    names the key that chooses one (a first dry run on a fresh machine is not refused for a default it never set)."""
    if result.fits is False:
        return Problem(key="checkpoint.save", value=result.ckpt_path, rule="checkpoint-space",
                       message=(f"one checkpoint is {est._size(result.ckpt_bytes)} and {result.free_path} has "
                                f"{est._size(result.free_bytes)} free: the first save would fail"
                                + ("" if explicit else " (a default checkpoint root: set one with the profile's "
                                   "checkpoint_root or checkpoint.save=PATH; the run is refused once you do)")),
                       valid="a checkpoint root with room for at least one checkpoint (checkpoint.save=PATH)",
                       severity="error" if explicit else "warning")
    return None


def checkpoint_check(stage: Any, compiled: Any, profile: ExecutorProfile | None, plan: Any) -> list[Problem]:
    """The run's (and the dry run's) check that one checkpoint fits the free space of the checkpoint root; empty
    when it fits, when the space cannot be read, or when the estimate does not model the config."""
    try:
        result = run_estimate(stage, compiled, profile, plan)
    except UsageError:
        return []
    problem = checkpoint_problem(result, explicit_root(compiled, profile))
    return [] if problem is None else [problem]


def estimate_section(stage: Any, compiled: Any, profile: ExecutorProfile | None, plan: Any) -> list[list[str]] | None:
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


__all__ = ["MFU_KEY", "checkpoint_check", "checkpoint_problem", "estimate_document", "estimate_section", "run_estimate"]
