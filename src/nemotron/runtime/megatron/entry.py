"""Entry of the ``local`` backend, called by ``stages/ultra3/{pretrain,sft}/run.py``.

Checks what it can before importing torch/transformers — the config is readable and usable, the data
and the starting checkpoint exist and are of the right kind — and says each failure in one line
(``ultra3 pretrain: ...``) with exit code 1. Threads are set from ``run.env.cpus`` before torch loads.
An input path of the wrong kind (a folder given for a blend.json, a file for a checkpoint folder), and a
resumed run whose inputs or ``train.train_iters`` contradict its checkpoint
(:mod:`nemotron.runtime.megatron.lineage`), are refused with exit code 2 (:func:`refusals`, which ``--dry-run``
runs too). One run trains into a checkpoint folder at a time: the run holds
``checkpoint.save/.nemotron-writer.lock`` (:func:`nemotron.data.outputs.writer_lock`, data prep's lock);
a second run on the same folder stops at once (exit 1) naming the holder. Exit codes: 0 done; 1 unusable
inputs, a held folder or a failure; 2 such a refusal; 75 saved and stopped on a signal (run again to
resume); 130 interrupted before training started.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nemotron.runtime.common.settings import LocalSettings, SettingsError, read, thread_count


def load_config(path: Path) -> dict[str, Any]:
    """The compiled ``train.yaml``.

    Raises:
        SettingsError: unreadable or not a mapping.
    """
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"cannot read the config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of config keys")
    return data


class Refusal(SettingsError):
    """A config the run refuses before it starts (exit 2, like
    :class:`~nemotron.runtime.megatron.lineage.ResumeConflict`): a path of the wrong kind, a resume that would change
    what its checkpoint means."""


def _unresolved(p: Path | None) -> bool:
    return p is None or "${" in str(p)


def kind_problems(s: LocalSettings) -> list[str]:
    """One line per input path that exists but is of the wrong kind: a folder where a file is expected
    (``data.per_split_data_args_path``, the packed SFT files) or a file where a folder is expected
    (``dataset.dataset_root``, ``checkpoint.pretrained_checkpoint``). Paths still holding ``${...}`` or
    absent are skipped (:func:`precheck` says "no such ...")."""
    files = {"data.per_split_data_args_path": (s.blend_path, "a blend.json (the file `data prep pretrain` writes)"),
             "dataset.packed_sequence_specs.packed_train_data_path": (s.train_data_path, "a packed Parquet file"),
             "dataset.packed_sequence_specs.packed_val_data_path": (s.valid_data_path, "a packed Parquet file")}
    folders = {"dataset.dataset_root": (s.dataset_root, "the output folder of `data prep sft`"),
               "checkpoint.pretrained_checkpoint": (s.pretrained_checkpoint, "a checkpoint folder")}
    out = []
    for key, (p, what) in files.items():
        if not _unresolved(p) and p.is_dir():
            out.append(f"{key}={p}: is a folder, not {what.split(' (')[0]}; point it at {what}")
    for key, (p, what) in folders.items():
        if not _unresolved(p) and p.exists() and not p.is_dir():
            out.append(f"{key}={p}: is a file, not a folder; point it at {what}")
    return out


def refusals(s: LocalSettings) -> list[str]:
    """Every line the run refuses ``s`` with before it starts (exit 2): :func:`kind_problems`, then the
    resume checks of :func:`nemotron.runtime.megatron.lineage.check_resume` against the checkpoint already in
    ``checkpoint.load`` (read on this machine), else the rerun check of a finished run
    (:func:`nemotron.runtime.megatron.lineage.finished_problem`: other settings than the run that finished). ``--dry-run`` calls this too
    (:func:`nemotron.validation.checks.local_refusals`), so both say the same lines. A resume check that
    cannot be made yet (an input still holding ``${...}``) is skipped."""
    from nemotron.runtime.megatron.lineage import ResumeConflict, check_resume, finished_problem, saved_step

    out = kind_problems(s)
    if _unresolved(s.load_dir):
        return out
    try:
        step = saved_step(s.load_dir)
        check_resume(s, step)
        finished = finished_problem(s, step)  # a finished run rerun with other settings
        if finished:
            out.append(finished)
    except ResumeConflict as exc:
        out.append(str(exc))
    except SettingsError:  # an unresolved input: the run itself refuses it when it reads its settings
        pass
    return out


def precheck(s: LocalSettings) -> None:
    """Inputs exist and are of the right kind (no heavy import).

    Raises:
        SettingsError: with the key and the path.
    """
    if s.data.blend:
        assert s.blend_path is not None
        if not s.blend_path.is_file():
            raise SettingsError(f"data.per_split_data_args_path={s.blend_path}: no such file (the blend.json of "
                                "`data prep pretrain`)")
    else:
        if s.dataset_root is None and s.train_data_path is None:
            raise SettingsError("dataset.dataset_root is not set: point it at the output of `data prep sft`")
        if s.dataset_root is not None and not s.dataset_root.exists():
            raise SettingsError(f"dataset.dataset_root={s.dataset_root}: no such folder (the output of "
                                "`data prep sft`)")
    if s.pretrained_checkpoint is not None and not s.pretrained_checkpoint.exists():
        raise SettingsError(f"checkpoint.pretrained_checkpoint={s.pretrained_checkpoint}: no such folder")
    if s.save_dir.exists() and not s.save_dir.is_dir():
        raise SettingsError(f"checkpoint.save={s.save_dir}: exists and is not a folder")
    from nemotron.profiles.sections import wandb_key_problem

    problem = wandb_key_problem(s.wandb_project, dict(os.environ))
    if problem and importlib.util.find_spec("wandb") is not None:  # without wandb the run says W&B is off
        raise SettingsError(problem)


def _limit_threads(cpus: int | None) -> None:
    n = str(thread_count(cpus))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = n
    # one process uses one GPU: a visible second one would make the Trainer wrap the model in DataParallel
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or "," in visible:
        os.environ["CUDA_VISIBLE_DEVICES"] = (visible or "0").split(",")[0]


def main(stage: str, config_path: Path, title: str | None = None) -> int:
    """Run the local ``stage`` (a registry name with training data: ``"pretrain"`` / ``"sft"``) from the compiled
    ``config_path``; returns the exit code (see the module docstring)."""
    try:
        cfg = load_config(config_path)
    except SettingsError as exc:
        print(f"{title or f'ultra3 {stage}'}: {exc}", file=sys.stderr)
        return 1
    return run_config(stage, cfg, title)


def train(cfg: dict[str, Any], stage: str) -> int:
    """``backend: local`` of a stage that trains on training data (its registry row's ``trains_on``: ``ultra3
    pretrain``, ``ultra3 sft``), called by :func:`nemotron.runtime.dispatch.run` with the stage's registry name
    (``Backend(..., per_stage=True)``)."""
    return run_config(stage, cfg)


def run_config(stage: str, cfg: dict[str, Any], title: str | None = None) -> int:
    """Run the local ``stage`` on the compiled config ``cfg``; returns the exit code (module docstring):
    settings, :func:`refusals` (exit 2), :func:`precheck` (exit 1), then, holding ``checkpoint.save``
    (:func:`nemotron.data.outputs.writer_lock`; held by another run: one line, exit 1), the training."""
    title = title or f"ultra3 {stage}"
    import contextlib

    from nemotron.data.outputs import writer_lock
    from nemotron.errors import RuntimeFailure

    try:
        settings = read(cfg, stage)
        for line in refusals(settings):  # the first; before a mix is written into the folder
            raise Refusal(line)
        precheck(settings)
    except SettingsError as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, Refusal) else 1
    with contextlib.ExitStack() as held:
        try:  # one training run per checkpoint folder (the lock of data prep's output folders)
            held.enter_context(writer_lock(settings.save_dir))
        except RuntimeFailure as exc:
            print(f"{title}: checkpoint.save: {exc.message}; wait for it to finish, or set checkpoint.save=<another "
                  "folder>", file=sys.stderr)
            return 1
        except OSError as exc:  # a file system without flock: the run goes on, unguarded, and says so
            print(f"[local] cannot lock {settings.save_dir} ({exc.strerror or exc}): a second run on this folder "
                  "would not be stopped", flush=True)
        return _run_locked(stage, cfg, settings, title)


def _run_locked(stage: str, cfg: dict[str, Any], settings: LocalSettings, title: str) -> int:
    """:func:`run_config` once it holds the checkpoint folder: the mix of blends, then the trainer."""
    try:
        if settings.data.blend and (cfg.get("data") or {}).get("mix_with"):  # a mix of blends (-c long_context)
            from dataclasses import replace

            from nemotron.data.blend import training_blend
            from nemotron.errors import ConfigError

            try:
                settings = replace(settings, blend_path=training_blend(cfg, settings.save_dir))
            except ConfigError as exc:
                raise SettingsError(exc.message) from None
    except SettingsError as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 1

    def train() -> int:
        from nemotron.runtime.megatron.trainer import run

        return run(settings)

    return run_heavy(title, settings.cpus, *local_needs(stage), train)


#: What each ``backend: local`` runtime imports before it works (``modules``) and how its one-line refusal names the
#: install (``needs``), by stage: the entries pass it to :func:`run_heavy`, and the dry-run's rule ``local-modules``
#: (:func:`nemotron.validation.this_machine`) checks the same modules, so it refuses what the run would.
LOCAL_NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "pretrain": (("torch", "transformers", "nemotron.runtime.megatron.trainer"), "torch and transformers>=5.2"),
    "sft": (("torch", "transformers", "nemotron.runtime.megatron.trainer"), "torch and transformers>=5.2"),
    "rlvr": (("torch", "transformers", "trl", "datasets", "math_verify"),
             "torch, transformers>=5.2, trl, datasets and math-verify"),
    "mopd": (("torch", "transformers", "trl", "datasets", "math_verify"),
             "torch, transformers>=5.2, trl, datasets and math-verify"),
    "quantize": (("modelopt.torch.quantization", "torch", "transformers"),
                 "torch, transformers>=5.2 and nvidia-modelopt 0.47"),
    "eval": (("torch", "transformers", "math_verify"), "torch, transformers>=5.2 and math-verify"),
    "mtp-boost": (("torch", "transformers", "safetensors"), "torch, transformers>=5.2 and safetensors"),
    "mopd-warmup": (("torch", "transformers"), "torch and transformers>=5.2"),
}


def local_needs(stage: str) -> tuple[tuple[str, ...], str]:
    """``(modules, needs)`` of the ``backend: local`` runtime of ``stage`` (a registry name): its
    :data:`LOCAL_NEEDS` entry; a stage without one that trains on training data (its row's ``trains_on``) runs the
    local trainer and needs what ``pretrain`` needs; else ``((), "")`` (a runtime that imports nothing heavy).

    Raises:
        KeyError: ``stage`` is not a registry stage.
    """
    from nemotron.config.registry import get_stage

    if stage in LOCAL_NEEDS:
        return LOCAL_NEEDS[stage]
    return LOCAL_NEEDS["pretrain"] if get_stage(stage).training_data is not None else ((), "")


#: How the local extra is installed, in the refusals.
LOCAL_INSTALL = "pip install 'nemotron-cli[local]'; in a checkout: NEMOTRON_EXTRAS=local bash scripts/setup.sh"


def run_heavy(title: str, cpus: int | None, modules: tuple[str, ...], needs: str, work: Callable[[], int],
              errors: tuple[type[Exception], ...] = ()) -> int:
    """The heavy half of a ``local`` backend's entry, after its light checks passed: threads from
    ``run.env.cpus`` (:func:`_limit_threads`, before torch loads), then ``modules`` imported (an
    ImportError: one line saying the backend needs ``needs``, exit 1), then ``work()``'s exit code. A
    :class:`~nemotron.runtime.megatron.pretrain_data.DataError`, :class:`~nemotron.runtime.common.model.ModelError`,
    :class:`~nemotron.runtime.common.settings.SettingsError` or one of ``errors`` is one line ``<title>: ...``,
    exit 1; Ctrl-C is :func:`nemotron.runtime.dispatch.interrupted` (130)."""
    _limit_threads(cpus)
    try:
        for module in modules:
            importlib.import_module(module)
        from nemotron.runtime.common.model import ModelError
        from nemotron.runtime.megatron.pretrain_data import DataError
    except ImportError as exc:
        print(f"{title}: the local backend needs {needs} ({LOCAL_INSTALL}): {exc}", file=sys.stderr)
        return 1
    try:
        return work()
    except (DataError, ModelError, SettingsError, *errors) as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        from nemotron.runtime.dispatch import interrupted

        return interrupted(title)


__all__ = ["Refusal", "kind_problems", "load_config", "local_needs", "main", "precheck", "refusals", "run_config",
           "run_heavy", "train"]
