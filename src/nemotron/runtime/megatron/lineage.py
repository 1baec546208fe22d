"""What a training run started on (``<checkpoint.save>/lineage.json``) and the checks a resumed run makes
against it, before anything heavy is imported.

A run that resumes a checkpoint trains on its inputs from then on, so two changes are refused (exit 2,
one line with a hint) instead of being taken silently:

* the inputs differ from those recorded in ``lineage.json`` (:func:`inputs`: the blend, the packed SFT
  data, the pretrained checkpoint) — e.g. ``${art:pretrain-data,blend_path}`` now resolves to a newer
  data version. ``+run.allow_new_inputs=true`` (:data:`ALLOW_KEY`) lets the run go on; each change is then
  appended to ``lineage.json``'s ``changes`` (step, key, old and new value) and ``inputs`` is updated;
* ``train.train_iters`` below the step already saved (the run would stop at once and present the saved
  step as its final model). Used by the local runtime and the Megatron-Bridge pre-start.

Another ``train.train_iters`` or ``train.global_batch_size`` than the saved run's is taken, with one warning line
(:func:`resume_warning`).

``lineage.json`` (written by :mod:`nemotron.runtime.megatron.trainer` when a run starts from step 0)::

    {"stage", "model", "data", "pretrained_checkpoint", "experiment_id", "transformers", "torch",
     "inputs": {config key: absolute path or null}, "changes": [{"step", "key", "from", "to", "time",
     "experiment_id"}]}

No heavy import (stdlib and the project's light modules).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from nemotron.runtime.common.settings import LocalSettings, SettingsError, config_path, get, training_data

LINEAGE = "lineage.json"
#: The key that lets a resumed run take inputs other than those its checkpoint was trained on.
ALLOW_KEY = "run.allow_new_inputs"


class ResumeConflict(SettingsError):
    """A resumed run would silently change what its checkpoint means (exit 2: a config problem)."""


def inputs(s: LocalSettings) -> dict[str, str | None]:
    """The inputs of the run that resuming must not change silently: ``{config key: absolute path or
    None}`` — pretrain: ``data.per_split_data_args_path`` and each ``data.mix_with[i].blend``; SFT:
    ``dataset.dataset_root`` and the packed train file when set; both: ``checkpoint.pretrained_checkpoint``."""
    def text(value: Any) -> str | None:
        p = config_path(value) if value not in (None, "") else None
        return str(p) if p is not None else None

    out: dict[str, str | None] = {}
    if s.data.blend:
        out["data.per_split_data_args_path"] = text(get(s.raw, "data.per_split_data_args_path"))
        for i, item in enumerate(get(s.raw, "data.mix_with") or []):
            out[f"data.mix_with[{i}].blend"] = text(item.get("blend") if isinstance(item, dict) else None)
    else:
        out["dataset.dataset_root"] = text(s.dataset_root)
        if s.train_data_path is not None:
            out["dataset.packed_sequence_specs.packed_train_data_path"] = text(s.train_data_path)
    out["checkpoint.pretrained_checkpoint"] = text(s.pretrained_checkpoint)
    return out


def read(folder: Path) -> dict[str, Any] | None:
    """``folder/lineage.json``, or None when there is none or it is unreadable."""
    try:
        data = json.loads((Path(folder) / LINEAGE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recorded_inputs(lineage: dict[str, Any], stage: str) -> dict[str, str | None]:
    """The inputs ``lineage`` records; for a ``lineage.json`` written before ``inputs`` existed, the
    pretrain blend (its ``data``, unless that is the mix the run wrote) and a pretrained checkpoint it names."""
    if isinstance(lineage.get("inputs"), dict):
        return dict(lineage["inputs"])
    out: dict[str, str | None] = {}
    if training_data(stage).blend and lineage.get("data") and Path(str(lineage["data"])).name != "mixed_blend.json":
        out["data.per_split_data_args_path"] = str(lineage["data"])
    if lineage.get("pretrained_checkpoint"):
        out["checkpoint.pretrained_checkpoint"] = str(lineage["pretrained_checkpoint"])
    return out


def saved_step(folder: Path | None) -> int | None:
    """The newest step with a complete ``checkpoint-<step>`` in ``folder`` (the local runtime's layout), or
    None when there is none."""
    from nemotron.runtime.common.model import checkpoints

    found = checkpoints(Path(folder)) if folder is not None else []
    return found[-1][0] if found else None


def train_iters_problem(train_iters: Any, saved_step: int | None, folder: Any) -> str | None:
    """The one-line refusal when ``train_iters`` (``train.train_iters``) is below ``saved_step``, the newest
    step saved in the checkpoint folder ``folder``; None when the run may go on."""
    if saved_step is None or train_iters is None or int(train_iters) >= saved_step:
        return None
    return (f"train.train_iters={train_iters} is below step {saved_step}, already saved in {folder}: the run would "
            f"stop at once and present step {saved_step} as its final model; set train.train_iters={saved_step} "
            "or more to go on with this run, or checkpoint.save=<a new folder> for a new run")


#: The keys of the run's length a resume compares with the saved run's config: another value is taken (the
#: learning-rate schedule and the samples still to train follow it), but said in one warning line.
RESUME_KEYS = ("train.train_iters", "train.global_batch_size")


def resume_warning(saved: dict[str, Any], now: dict[str, Any], step: int | None, where: Any) -> str | None:
    """The one-line warning of a run that resumes ``step`` from ``where`` (a checkpoint folder) with another
    ``train.train_iters`` or ``train.global_batch_size`` (:data:`RESUME_KEYS`) than the run that saved it, or None.
    ``saved`` and ``now``: ``{dotted key: value}``, read from the checkpoint's saved config (the local runtime's
    ``nemotron_checkpoint.json``, Megatron-Bridge's ``iter_<N>/run_config.yaml``) and from this run's config; a key
    either does not hold (an older checkpoint) is not compared."""
    changed = [(k, saved[k], now[k]) for k in RESUME_KEYS
               if saved.get(k) is not None and now.get(k) is not None and str(saved[k]) != str(now[k])]
    if not changed:
        return None
    was = ", ".join(f"{k}={old}" for k, old, _ in changed)
    new = ", ".join(f"{k}={value}" for k, _, value in changed)
    return (f"warning: resuming step {step} from {where}, saved by a run with {was}; this run has {new}: the "
            "learning-rate schedule and the samples left to train follow the new value (set the saved one to go on "
            "as before, or checkpoint.save=<a new folder> for a new run)")


def check_resume(s: LocalSettings, saved_step: int | None) -> list[dict[str, Any]]:
    """Check a run that resumes ``saved_step`` from ``s.load_dir`` (None: nothing to resume, no check).

    Returns the changed inputs that :data:`ALLOW_KEY` allows (``{"key", "from", "to"}`` each; empty when
    nothing changed).

    Raises:
        ResumeConflict: ``train.train_iters`` is below ``saved_step``, or an input differs from the one in
            ``lineage.json`` and :data:`ALLOW_KEY` is not true (one line naming the key, both values, the
            folder and the ways out).
    """
    if saved_step is None or s.load_dir is None:
        return []
    problem = train_iters_problem(s.train_iters, saved_step, s.load_dir)
    if problem:
        raise ResumeConflict(problem)
    lineage = read(s.load_dir)
    if lineage is None:
        return []
    now = inputs(s)
    changes = [{"key": k, "from": old, "to": now.get(k)}
               for k, old in recorded_inputs(lineage, s.stage).items() if old != now.get(k)]
    if changes and get(s.raw, ALLOW_KEY) is not True:
        c = changes[0]
        more = f" (and {len(changes) - 1} more input(s))" if len(changes) > 1 else ""
        raise ResumeConflict(
            f"{c['key']}={c['to']}: the checkpoint at step {saved_step} in {s.load_dir} was trained on {c['from']}"
            f"{more} (its {LINEAGE}); set {c['key']} back to that, or checkpoint.save=<a new folder> to start a "
            f"new run on it, or +{ALLOW_KEY}=true to resume on the new input (recorded in {LINEAGE})")
    return changes


def record_changes(folder: Path, changes: list[dict[str, Any]], step: int, now: dict[str, str | None]) -> None:
    """Append ``changes`` (from :func:`check_resume`) at ``step`` to ``folder/lineage.json``'s ``changes``
    and make ``now`` (:func:`inputs` of this run) its ``inputs`` (written atomically)."""
    lineage = read(folder) or {}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for c in changes:
        lineage.setdefault("changes", []).append({**c, "step": step, "time": stamp,
                                                  "experiment_id": os.environ.get("NEMOTRON_EXPERIMENT_ID")})
    lineage["inputs"] = now
    write(folder, lineage)


def write(folder: Path, lineage: dict[str, Any]) -> None:
    """Write ``folder/lineage.json`` atomically."""
    from nemotron.data.files import atomic_write_json

    atomic_write_json(Path(folder) / LINEAGE, lineage)


__all__ = ["ALLOW_KEY", "LINEAGE", "ResumeConflict", "check_resume", "inputs", "read", "record_changes",
           "recorded_inputs", "saved_step", "train_iters_problem", "write"]
