"""Rule ``input-exists``: every stage's input paths exist, wherever this machine sees the job's files.

One rule for every stage's inputs (a cluster-backend stage; ``backend: local`` stages are read by their runtimes'
own readers, rules ``local-settings`` / ``local-convert`` / ``quantize-inputs``): the keys a stage's shipped configs
wire to an artifact (``${art:NAME,FIELD}``: ``convert.source``, ``quantization.source``, ``policy.model_name``,
``eval.gsm8k.data``, ``data.train.data_path``, ``_teachers.*``, ...) plus :data:`INPUT_KEYS`. A path set there
(absolute, or ``~``/``./``-relative: a Hugging Face repo id ``org/name`` is not a path) must exist when this machine
sees the job's files (:func:`same_files`: no profile, a ``local`` one, or a Slurm one whose ``tunnel`` is
``local``, the login node: the job's nodes see what this machine sees). Through an SSH tunnel it cannot be checked
here; the job's own check says so. Values the compiler could not resolve yet (``${art:...}``) are left to its warning
and to the refusal at submission; values an earlier stage of a ``pipe`` will write
(:func:`nemotron.config.artifacts.is_planned`) need not exist yet.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nemotron.config.artifacts import is_planned
from nemotron.config.tree import get, leaves, unresolved
from nemotron.errors import Problem

if TYPE_CHECKING:
    from nemotron.config.registry import Stage
    from nemotron.profiles.profile import ExecutorProfile

#: Input keys no shipped config wires to an artifact (``key -> what it is``); the artifact-wired keys are found in the
#: stage's configs (:func:`input_keys`).
INPUT_KEYS: dict[str, str] = {
    "generation.model_name": "the model to evaluate",
}

#: What a key's input is and what to set instead, where a stage's own words are better than the generic ones.
WORDS: dict[str, tuple[str, str]] = {
    "quantization.source": ("the checkpoint to quantize",
                            "an existing Hugging Face checkpoint folder, or ${art:mopd-checkpoint,path}"),
    "convert.source": ("the checkpoint to convert",
                       "an existing checkpoint folder (Hugging Face for hf_to_megatron, Megatron for megatron_to_hf), "
                       "or ${art:sft-checkpoint,path}"),
}


def same_files(profile: ExecutorProfile | None) -> bool:
    """Whether this machine sees the job's files: no profile, or one whose files are not reached over SSH (a local
    one, a Ray cluster's address is checked by its own rule, a Slurm one through a local tunnel)."""
    return profile is None or not profile.settings.over_ssh


_WIRED: dict[str, dict[str, str]] = {}


def _wired(stage: Stage) -> dict[str, str]:
    """``key -> artifact reference`` of every key one of ``stage``'s shipped configs wires to an artifact (read once
    per stage)."""
    if stage.name in _WIRED:
        return _WIRED[stage.name]
    from nemotron.config.compile import _raw_tree
    from nemotron.config.paths import config_names
    from nemotron.errors import ConfigError

    out: dict[str, str] = {}
    for name in config_names(stage):
        try:
            tree = _raw_tree(stage, name)
        except (ConfigError, OSError, ValueError):  # a broken chain is the compiler's to report
            continue
        for key, value in leaves(tree):
            if isinstance(value, str) and "${art:" in value:
                out.setdefault(key, value)
    _WIRED[stage.name] = out
    return out


def input_keys(stage: Stage) -> dict[str, tuple[str, str]]:
    """The input path keys of ``stage`` -> ``(what it is, what to set instead)``: the keys its configs wire to an
    artifact (named by the reference, e.g. ``${art:sft-checkpoint,path}``), :data:`INPUT_KEYS`, in
    :data:`WORDS`' words where it has some."""
    out = {key: (f"an input of {stage.name}, which its configs read from {ref}",
                 f"an existing path on the cluster's storage, or {ref}") for key, ref in _wired(stage).items()}
    out.update({key: (what, "an existing path on the cluster's storage") for key, what in INPUT_KEYS.items()})
    return {key: WORDS.get(key, words) for key, words in out.items()}


def _path_like(value: str) -> bool:
    return value.startswith(("/", "~", "./", "../"))


def missing_input(key: str, value: Any, what: str | None = None, valid: str | None = None) -> Problem | None:
    """The ``input-exists`` error of one input path ``key=value``, or None (not a path, unresolved, planned by an
    earlier stage of the pipe, or there)."""
    if not isinstance(value, str) or not value or unresolved(value) or is_planned(value) or not _path_like(value):
        return None
    if Path(os.path.expanduser(value)).exists():
        return None
    words = WORDS.get(key)
    what = what or (words[0] if words else "an input of this stage")
    valid = valid or (words[1] if words else "an existing path on the cluster's storage, or the artifact reference "
                                             "the config ships")
    return Problem(key, value, f"no such file or folder ({what}); this machine sees the job's files, so the job "
                               "would not find it either", valid, rule="input-exists")


def missing_inputs(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Rule ``input-exists`` on every input path key of ``stage`` that ``cfg`` sets (see the module docstring);
    nothing for a ``backend: local`` stage, a data prep stage, or a profile reached over SSH."""
    if str(get(cfg, "backend", "") or "").lower() == "local" or stage.family.prepares_data or not same_files(profile):
        return []
    out, said = [], set()
    for key, (what, valid) in input_keys(stage).items():
        value = get(cfg, key)
        if value in said:  # a key that falls back to another (mopd's teacher slots to _teachers.general): said once
            continue
        problem = missing_input(key, value, what, valid)
        if problem is not None:
            out.append(problem)
            said.add(value)
    return out


#: The keys whose folder a ``backend: local`` stage loads as a checkpoint of ``model.name``
#: (:func:`nemotron.runtime.common.model.load`): quantize, mtp-boost, the RL stages' student, SFT's start; the
#: entries of these dicts too: eval's checkpoints, the MOPD teacher panel.
CHECKPOINT_KEYS = ("quantization.source", "mtp_boost.source", "policy.model_name", "checkpoint.pretrained_checkpoint")
CHECKPOINT_DICTS = ("eval.checkpoints", "_teachers")


def local_checkpoints(cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Rule ``local-checkpoint``: on a ``backend: local`` run on this machine, each checkpoint folder the run loads
    (:data:`CHECKPOINT_KEYS`, the entries of :data:`CHECKPOINT_DICTS`) is a checkpoint of ``model.name``: the run's
    own check (:func:`nemotron.runtime.common.model.check_checkpoint`, which reads ``config.json`` only), so the dry
    run refuses what the run refuses, naming the key. A path that is not there, unresolved, planned by an earlier
    stage of the pipe, or a quantized export (``hf_quant_config.json``: eval de-quantizes it) is left to the other
    checks; one without any model is left to the stage's own reader (e.g. rule ``quantize-inputs``)."""
    if str(get(cfg, "backend", "") or "").lower() != "local":
        return []
    if profile is not None and not profile.settings.on_this_machine:
        return []
    from nemotron.config.catalogue import CatalogueError
    from nemotron.config.catalogue import get as model_spec
    from nemotron.runtime.common.model import ModelError, check_checkpoint, resolve_weights

    try:
        spec = model_spec(str(get(cfg, "model.name", "small")))
    except CatalogueError:  # rule model-name says it
        return []
    pairs = [(key, get(cfg, key)) for key in CHECKPOINT_KEYS]
    for name in CHECKPOINT_DICTS:
        table = get(cfg, name)
        if isinstance(table, dict):
            pairs += [(f"{name}.{label}", value) for label, value in table.items()]
    out, said = [], set()
    for key, value in pairs:
        if not isinstance(value, str) or not value or unresolved(value) or is_planned(value) or value in said:
            continue
        path = Path(os.path.expanduser(value))
        if not path.exists():
            continue
        try:
            folder = resolve_weights(path)
        except ModelError:
            continue
        if (folder / "hf_quant_config.json").is_file():
            continue
        try:
            check_checkpoint(spec, path)
        except ModelError as exc:
            said.add(value)
            out.append(Problem(key, value, str(exc).replace(f"{folder} is ", "it is ", 1) if folder == path
                               else str(exc), f"a checkpoint of model {spec.name} (config.json with its fields), or "
                                          "model.name=<the checkpoint's model>", rule="local-checkpoint"))
    return out


__all__ = ["CHECKPOINT_DICTS", "CHECKPOINT_KEYS", "INPUT_KEYS", "input_keys", "local_checkpoints", "missing_input",
           "missing_inputs", "same_files"]
