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

A rerun of a *finished* run (its final model saved, nothing left to train) trains nothing and would let the job
record the final model as an artifact of the new settings; so its settings are compared with those of the run that
finished (``<checkpoint.save>/run_config.json``, :func:`write_run_config`) and any difference is refused (exit 2,
one line naming the keys and the folder: :func:`finished_run_problem`). An unchanged rerun goes on (nothing to do).

``lineage.json`` (written by :mod:`nemotron.runtime.megatron.trainer` when a run starts from step 0)::

    {"stage", "model", "data", "pretrained_checkpoint", "experiment_id", "transformers", "torch",
     "inputs": {config key: absolute path or null}, "input_versions": {config key: "<artifact> v<N>" or null},
     "changes": [{"step", "key", "from", "to", "time", "experiment_id"}]}

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
#: The settings of the run that saved the final model (written when a run finishes; :func:`write_run_config`).
RUN_CONFIG = "run_config.json"
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


def input_versions(paths: dict[str, Any]) -> dict[str, str | None]:
    """``{config key: "<artifact> v<N>" or None}`` for the input folders/files ``paths`` (:func:`inputs`): the artifact
    version each was recorded as (:func:`nemotron.config.artifacts.version_of`), None for a path no record names (set
    by hand) or an unset key. ``lineage.json``'s ``input_versions``: a folder that a later run overwrites in place
    (``checkpoints/ultra3-pretrain-local``) still says which version this run took."""
    from nemotron.config.artifacts import version_of

    return {key: version_of(value) if value else None for key, value in paths.items()}


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


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: leaf value}`` of a nested config (lists as ``key[i]``); an empty dict or list is a leaf."""
    if isinstance(config, dict) and config:
        out: dict[str, Any] = {}
        for k, v in config.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(config, list) and config:
        out = {}
        for i, v in enumerate(config):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: config}


def write_run_config(folder: Path, config: dict[str, Any]) -> None:
    """Write ``folder/run_config.json`` (:data:`RUN_CONFIG`): ``{"config": the run's resolved config}``, the
    settings of the run that saved the final model in ``folder`` (written atomically, when the run finishes)."""
    from nemotron.data.files import atomic_write_json

    atomic_write_json(Path(folder) / RUN_CONFIG, {"config": config})


def finished_run_problem(folder: Path, config: dict[str, Any], fallback: dict[str, Any] | None = None,
                         save_key: str = "checkpoint.save", ignore: tuple[str, ...] = ()) -> str | None:
    """The one-line refusal of a rerun, with ``config`` (its resolved config), of the finished run whose final model
    is in ``folder``, when a setting differs from that run's (``folder/run_config.json``); None when none differs.

    A checkpoint saved before ``run_config.json`` existed is compared on ``fallback`` (``{dotted key: value}`` its
    checkpoint record holds, e.g. ``train.train_iters``); a key either side lacks is then not compared. Values are
    compared as JSON text (``2e1`` and ``20`` differ: the job would record the artifact under another config).
    ``save_key``: the key that names the output folder, for the hint; it and ``ignore`` (keys that name where the
    checkpoint is read from) are not compared: the folder is the one compared (a moved or copied folder is the same run;
    a saved path under the folder's old place, e.g. a log folder, is read as under ``folder``).
    """
    skip = {save_key, *ignore}
    now = {k: v for k, v in flatten(config).items() if k not in skip}
    saved_file = read_json(Path(folder) / RUN_CONFIG)
    if isinstance(saved_file, dict) and isinstance(saved_file.get("config"), dict):
        flat = flatten(saved_file["config"])
        was = flat.get(save_key)  # paths under the folder where it was saved (logs...) read as under it now
        moved = (lambda v: v.replace(was, str(folder)) if isinstance(v, str) else v) if isinstance(was, str) and \
            was != str(folder) else (lambda v: v)
        saved = {k: moved(v) for k, v in flat.items() if k not in skip}
        keys = sorted(set(saved) | set(now))
    else:
        saved = dict(fallback or {})
        keys = sorted(k for k in saved if saved[k] is not None and now.get(k) is not None)

    def text(value: Any) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    changed = [k for k in keys if text(saved.get(k)) != text(now.get(k))]
    if not changed:
        return None
    shown = ", ".join(f"{k}={text(now.get(k)) if k in now else '(unset)'} (was "
                      f"{text(saved.get(k)) if k in saved else 'unset'})" for k in changed[:4])
    more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
    return (f"{shown}{more}: the run whose final model is in {folder} finished with other settings, so this run "
            f"would train nothing and present that model as made by these settings; set them back to rerun it "
            f"unchanged, or {save_key}=<a new folder> for a new run")


def finished_problem(s: LocalSettings, step: int | None) -> str | None:
    """:func:`finished_run_problem` for a local pretrain/SFT run ``s`` whose checkpoint folder holds a finished run
    (a final ``model.safetensors`` and ``step``, its newest saved step, at ``train.train_iters`` or more); None
    when the run is not finished there (it trains: the resume checks apply) or its settings are unchanged. A
    checkpoint without ``run_config.json`` is compared on its record's ``train.train_iters`` and
    ``train.global_batch_size``."""
    from nemotron.runtime.common.model import read_record

    if (step is None or s.load_dir is None or s.train_iters is None or step < int(s.train_iters)
            or not (s.save_dir / "model.safetensors").is_file()):
        return None
    rec = read_record(Path(s.load_dir) / f"checkpoint-{step}") or {}
    return finished_run_problem(s.save_dir, s.raw, {"train.train_iters": rec.get("train_iters"),
                                                    "train.global_batch_size": rec.get("global_batch_size")},
                                ignore=("checkpoint.load",))


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is absent or unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write(folder: Path, lineage: dict[str, Any]) -> None:
    """Write ``folder/lineage.json`` atomically."""
    from nemotron.data.files import atomic_write_json

    atomic_write_json(Path(folder) / LINEAGE, lineage)


__all__ = ["ALLOW_KEY", "LINEAGE", "RUN_CONFIG", "ResumeConflict", "check_resume", "finished_problem",
           "finished_run_problem", "flatten",
           "inputs", "read", "read_json", "record_changes", "recorded_inputs", "saved_step", "train_iters_problem",
           "write", "write_run_config"]
