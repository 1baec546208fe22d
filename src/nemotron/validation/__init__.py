"""Launch validation: every layout rule and a per-GPU memory estimate, before anything is queued.

The CLI calls exactly three functions, in this order, on the compiled config (plain dicts):

* :func:`prepare` — the stage's own adjustments, with a note for each (an ``<N>layer`` slice picks a
  one-node layout; unset MOPD teacher slots fall back to the general teacher);
* :func:`validate` — every problem at once, each in the user's terms (key, value, why, valid values);
* :func:`describe` — the tables ``--dry-run`` shows (pipeline stages, parallel layout, memory,
  RL node arithmetic);

and, once the job is planned, :func:`this_machine` — the refusals of a run on this machine (no profile, or a
``local`` one) that depend on the machine: its GPUs and whether its Python has the stage's framework. The
dry run and the run both get every one of them through :func:`nemotron.cli.pipeline.prepare_stage`.

Stdlib only (plus :mod:`nemotron.config.catalogue` and :mod:`nemotron.errors`): importing this package costs
nothing at start-up. The rules live in :mod:`nemotron.layout.rules` (one pure function each, with
its source and the Megatron-Core versions it holds for), the estimate in
:mod:`nemotron.layout.memory`. ``profile`` is None (no profile: an 8-GPU H200 node, 141 GB,
Hopper, assumed) or a :class:`nemotron.profiles.profile.Profile` of any executor (its settings are one member of
:data:`nemotron.profiles.schema.ProfileSettings`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from nemotron.config import catalogue, keys
from nemotron.config.images import framework_version, keylist_version
from nemotron.config.paths import OUTPUT_FOLDER_KEYS, cannot_create_folder, config_names
from nemotron.config.registry import Stage
from nemotron.config.tree import as_int, get, put
from nemotron.errors import ConfigError, Problem, plural
from nemotron.layout import rules
from nemotron.layout.views import EXPORT_KEYS, layout_keys, node_shape
from nemotron.validation import checks
from nemotron.validation.cluster import warning_signal_problem

if TYPE_CHECKING:  # annotations only: pydantic is loaded with a profile, not with this package
    from nemotron.profiles.profile import ExecutorProfile

Table = tuple[str, list[str], list[list[str]]]

#: Keys an ``<N>layer`` slice sets (value: ``"ep"`` means all GPUs of the node).
_SLICE = {"tp": 1, "pp": 1, "cp": 1, "etp": 1, "ep": "ep", "sp": False, "first": None, "last": None}


def _slice_layout(stage: Stage) -> dict[str, Any]:
    keys = layout_keys(stage.family.layout)
    out = {keys[k]: v for k, v in _SLICE.items()}
    if stage.family.quantizes:  # the export layout too
        out.update({EXPORT_KEYS[k]: _SLICE[k] for k in EXPORT_KEYS})
    return out


def prepare(stage: Stage, cfg: dict, user_keys: set[str], profile: ExecutorProfile | None) -> list[str]:
    """Adjust ``cfg`` in place before validation; return one note per change for ``--dry-run``.

    * ``model.name`` ending in ``<N>layer``: the slice fits one node, so the layout becomes TP=1,
      PP=1, CP=1, ETP=1, EP = all GPUs of the node (else the largest divisor of both the expert count and the
      GPUs per node),
      sequence parallel off (on when a TP you kept is above 1 on an MoE model, which Megatron-Core requires),
      ``run.env.nodes`` = 1 — except keys in ``user_keys`` (set by ``-c`` or an override), which are kept and
      named in the note.
    * MOPD: unset teacher slots (``_teachers.<slot>`` null) are filled with the general teacher.
    * NeMo RL stages: a null ``cluster.gpus_per_node`` takes the node shape.
    * ``backend: local`` convert: a null ``convert.output_dir`` (``-c local``) is named after ``convert.source``:
      ``<checkpoint root>/<its folder name>-hf`` (:func:`nemotron.runtime.megatron.convert_local.output_name`).
    """
    notes: list[str] = []
    family = stage.family
    if family.prepares_data:
        return notes
    shape = node_shape(cfg, profile)
    name = get(cfg, "model.name")
    n = catalogue.slice_size(name) if isinstance(name, str) else None
    if n and checks.backend(cfg) != checks.LOCAL and shape.gpus_per_node >= 1:
        try:
            spec = catalogue.get(name)
        except catalogue.CatalogueError:
            spec = None
        if spec is not None:
            gpn = shape.gpus_per_node
            # EP must divide the experts and (ETP = 1) the GPUs of the node: the largest common divisor
            ep = max(d for d in rules.divisors(spec.num_experts) if gpn % d == 0) if spec.num_experts else 1
            changed, kept = [], []
            layout = _slice_layout(stage)
            if not family.nemo_rl:  # NeMo RL counts its nodes in cluster.num_nodes
                layout["run.env.nodes"] = 1
            for key, value in layout.items():
                value = ep if value == "ep" else value
                if key == layout_keys(family.layout)["sp"]:
                    # with a TP you kept above 1 an MoE model needs sequence parallel (rule moe-tp-needs-sp): the
                    # preparation must not write a value that validation then refuses
                    tp = as_int(get(cfg, layout_keys(family.layout)["tp"])) or 1
                    value = bool(tp > 1 and spec.is_moe)
                if key in user_keys:
                    if get(cfg, key) != value:
                        kept.append(f"{key}={get(cfg, key)!r}")
                    continue
                if get(cfg, key, object()) != value:
                    put(cfg, key, value)
                    short = key.removeprefix("model.").removeprefix("policy.megatron_cfg.")
                    changed.append(f"{short}={value}")
            if changed:
                why = "" if ep == gpn else f" (largest divisor of both {spec.num_experts} experts and {plural(gpn, 'GPU')})"
                msg = (f"model.name={name}: a {n}-layer slice runs on one node ({plural(gpn, 'GPU')}); layout set to "
                       f"{', '.join(changed)}{why}")
                if kept:
                    msg += f"; kept your {', '.join(kept)}"
                notes.append(msg)
    if family.optimizer and stage.bridge and checks.backend(cfg) == "megatron-bridge" and \
            get(cfg, "train.train_iters") is None:
        samples, gbs = get(cfg, "train.train_samples"), get(cfg, "train.global_batch_size")
        iters = rules.iterations_of(None, samples, gbs)
        if iters:  # what replaces the null (else rule train-length refuses it)
            notes.append(f"train.train_iters=null: Megatron-Bridge trains for train.train_samples // "
                         f"train.global_batch_size = {samples:,} // {gbs:,} = {iters:,} iterations")
    if family.nemo_rl:
        if get(cfg, "cluster.gpus_per_node") is None and shape.gpus_per_node and "cluster" in cfg:
            put(cfg, "cluster.gpus_per_node", shape.gpus_per_node)
            notes.append(f"cluster.gpus_per_node=null: set to the node shape, {shape.gpus_per_node}")
        teachers = get(cfg, "_teachers")
        if get(cfg, "on_policy_distillation.enabled", False) and isinstance(teachers, dict):
            general = teachers.get("general")
            if general not in (None, ""):
                _panel, fell = rules.resolve_teachers(teachers)
                for slot in fell:
                    teachers[slot] = general
                if fell:
                    notes.append(f"teacher slots {', '.join(fell)} are not set: they fall back to the general teacher "
                                 f"({general})")
            default_slot = get(cfg, "teacher_routing.default_slot") or "general"
            routed = get(cfg, "teacher_routing.by_agent") or {}
            if isinstance(routed, dict) and len(routed) > 4:  # a long table: count per slot
                per: dict[str, int] = {}
                for slot in routed.values():
                    per[str(slot)] = per.get(str(slot), 0) + 1
                listed = (f"{len(routed)} tasks mapped (" + ", ".join(f"{k} {v}" for k, v in sorted(per.items()))
                          + "; teacher_routing.by_agent)")
            else:
                listed = ", ".join(f"{a}->{s}" for a, s in routed.items()) if isinstance(routed, dict) else ""
            notes.append(f"teacher routing: {listed + '; ' if listed else ''}any other task goes to the "
                         f"'{default_slot}' teacher")
    if family.converts and checks.backend(cfg) == checks.LOCAL and get(cfg, "convert.output_dir") is None:
        source = get(cfg, "convert.source")
        if isinstance(source, str) and source and "${" not in source:  # unresolved: the run refuses it anyway
            from nemotron.runtime.megatron.convert_local import output_name

            # the checkpoint root as the configs' ${oc.env:NEMOTRON_CKPT_ROOT,'./checkpoints'} reads it
            env = profile.storage_env() if profile is not None else {}
            root = env.get("NEMOTRON_CKPT_ROOT") or os.environ.get("NEMOTRON_CKPT_ROOT") or "./checkpoints"
            root = root if root.startswith(("/", "~")) else os.path.abspath(root)  # as the compiler makes ./ paths
            put(cfg, "convert.output_dir", f"{root}/{output_name(source)}")
            notes.append(f"convert.output_dir=null: {get(cfg, 'convert.output_dir')} (named after convert.source)")
    if family.quantizes and checks.backend(cfg) != checks.LOCAL:
        notes.append("export.*: this version exports from the calibration layout (model.*); the export layout "
                     "is validated, not applied")
        if get(cfg, "generate.enabled", False):
            kernels = get(cfg, "generate.kernels")
            notes.append("generate: the job generates with simulated quantization"
                         + ("; real NVFP4 GEMMs (generate.kernels=nvfp4) are a separate vLLM step on Blackwell: "
                            "the job prints the command" if kernels == "nvfp4" else ""))
    return notes


#: The layout keys every rule reads (their view stands 1 in for a missing one): required, never deleted.
_REQUIRED_LAYOUT = ("tp", "pp", "ep", "etp", "cp", "seq", "gbs", "mbs")


def refuse_deleted_required(stage: Stage, cfg: dict, overrides: list[str]) -> None:
    """Refuse a ``~KEY`` override that deleted a layout key of the stage (parallel sizes, sequence length, batch
    sizes: :data:`_REQUIRED_LAYOUT`): the rules would read a stand-in 1 for it and report a value nobody set
    (``train.global_batch_size=1: ...``). Other keys may be deleted (a framework then takes its own default).

    Raises:
        ConfigError: ``KEY is required (deleted by ~KEY)`` for the first such key.
    """
    if not stage.family.layout:
        return
    required = {layout_keys(stage.family.layout)[k] for k in _REQUIRED_LAYOUT}
    missing = object()
    for text in overrides:
        body = text.strip()
        if not body.startswith("~"):
            continue
        key = body[1:].partition("=")[0].strip()
        if key in required and get(cfg, key, missing) is missing:
            raise ConfigError(f"{key} is required (deleted by {body})",
                              f"drop {body}, or set it: {key}=VALUE (nemotron {stage.recipe} keys {stage.name} {key})")


def validate(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Every problem of ``cfg`` for ``stage`` on ``profile`` (errors and warnings), all at once.

    Data stages run on CPUs through Ray and have no layout: their configs and inputs are checked by
    their runtimes' own parsers, called here (:mod:`nemotron.validation.data`).
    """
    too_long = _long_names(cfg)
    if too_long:  # the checks below would ask the file system about these paths: it refuses them (ENAMETOOLONG)
        return _dedupe(_missing_runtime(stage, cfg) + too_long)
    from nemotron.validation.inputs import local_checkpoints, missing_inputs

    missing = (_missing_runtime(stage, cfg) + _output_folders(cfg, profile) + missing_inputs(stage, cfg, profile)
               + local_checkpoints(cfg, profile))
    counts = _count_keys(cfg)
    problems: list[Problem] = []
    for name in stage.checks:  # the stage's registry row lists its check sets, in order
        problems += CHECK_SETS[name](stage, cfg, profile)
    if counts:  # a rule computing with a bad count (grpo-batch's prompts x generations) or a reader's refusal of it
        bad = {p.key for p in counts}  # restates it: the count's own line says it once, naming the key
        problems = [p for p in problems if not any(k == p.key or k in p.render() for k in bad)]
    return _dedupe(missing + counts + problems + _run_keys(cfg, profile))


def _count_keys(cfg: dict) -> list[Problem]:
    """Rule ``positive-count`` on every :data:`~nemotron.layout.rules.COUNT_KEYS` key ``cfg`` sets (not null, not a
    ``${...}`` reference), whatever the stage and backend."""
    from nemotron.config.tree import unresolved

    values = {}
    for key in rules.COUNT_KEYS:
        value = get(cfg, key)
        if value is not None and not unresolved(value):
            values[key] = value
    return rules.positive_counts(values)


def _data_checks(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    from nemotron.validation.data import validate_data  # the data stages' own parsers (light, but only when asked)

    return validate_data(stage, cfg, profile)


def _nemo_rl_checks(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    if checks.backend(cfg) == checks.LOCAL:
        return []
    return (_passthrough_keys(cfg, "nemo-rl") + _nemo_rl_rules(cfg) + checks.gb200_tuned_rules(cfg, node_shape(cfg, profile))
            + checks.rl_export_rules(cfg, profile))


def _training_data_checks(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    from nemotron.validation.data import training_data_problems

    return training_data_problems(stage.name, cfg)


def _quantize_checks(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    from nemotron.validation.quantize import validate_quantize

    return validate_quantize(cfg, profile)


def _eval_checks(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """The eval stage: ``backend: local`` is read by its runtime's own reader
    (:func:`nemotron.runtime.eval.evaluate.read`, stdlib only); the cluster backend by the translation its job runs
    (:func:`nemotron.runtime.rl.nemo_rl.eval_config`), the node shape against the profile
    (:func:`checks.resource_rules`) and the serving engine (:func:`checks.eval_serving_rules`)."""
    from nemotron.runtime.common.settings import SettingsError

    if checks.backend(cfg) == checks.LOCAL:
        from nemotron.runtime.eval.evaluate import read

        try:
            read(cfg, unresolved_ok=True)
        except SettingsError as exc:
            return [Problem(key="", value=None, message=str(exc), rule="local-settings")]
        return []
    from nemotron.runtime.rl.nemo_rl import eval_config

    try:
        eval_config(cfg)
    except ConfigError as exc:
        return [Problem(key="", value=None, message=exc.message, valid=exc.hint, rule="rl-translate")]
    shape = node_shape(cfg, profile)
    nodes = as_int(get(cfg, "run.env.nodes")) or 1
    # the node shape against the profile, as every GPU stage gets it (rule node-shape; gpu-stage on 0 GPUs a node)
    out = checks.resource_rules(stage, cfg, shape, nodes * (shape.config_gpus_per_node or shape.gpus_per_node))
    model, bad = checks.model_of(cfg)
    if model is None:
        return out + bad
    if any(p.severity == "error" for p in out):  # the engine rules would compute with the wrong node shape
        return out
    return out + checks.eval_serving_rules(model, cfg, shape)


#: The check sets a stage's registry row names (:attr:`nemotron.config.registry.Stage.checks`), each
#: ``(stage, cfg, profile) -> [Problem]``.
def _mtp_boost_checks(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Rule ``mtp-boost-framework`` (the job's runtime refuses with the same function), then the local runtime's
    own reader of its settings (:func:`nemotron.runtime.megatron.mtp_local.read`: stdlib only) on ``backend: local``."""
    out = _mtp_boost_refusal(cfg)
    if not out and checks.backend(cfg) == checks.LOCAL:
        from nemotron.runtime.common.settings import SettingsError
        from nemotron.runtime.megatron.mtp_local import read

        try:
            read(cfg, unresolved_ok=True)
        except SettingsError as exc:
            key = str(exc).partition("=")[0].partition(" ")[0]
            out.append(Problem(key=key, value=get(cfg, key), message=str(exc), rule="local-settings"))
    return out


def _mtp_boost_refusal(cfg: dict) -> list[Problem]:
    """The part of :func:`_mtp_boost_checks` that holds for a config whatever the profile (rule
    ``mtp-boost-framework``): what :func:`config_refusal` reports for ``list`` and ``--help``."""
    from nemotron.layout.rules import mtp_boost_framework

    return mtp_boost_framework(checks.backend(cfg), get(cfg, "mtp_boost.objective"),
                               get(cfg, "mtp_boost.freeze_backbone"))


def _warmup_checks(stage: Any, cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """``mopd-warmup``: the MOPD panel rule (``mopd-general-teacher``, as mopd's dry run applies it), what NeMo RL's
    SFT ``MasterConfig`` refuses in the keys we set (:func:`nemotron.runtime.rl.warmup.sft_problems`, rule
    ``nemo-rl-sft``; the contract test runs NeMo RL's own on the same configs), then the stage's settings reader
    (:func:`nemotron.runtime.rl.warmup.read`: stdlib only), and on the cluster the node count against the profile,
    the node shape, the policy's training layout and its memory (:func:`checks.warmup_cluster_rules`)."""
    from nemotron.runtime.common.settings import SettingsError
    from nemotron.runtime.rl.warmup import read, sft_problems

    out = [Problem(key=k, value=v, message=why, rule="nemo-rl-sft") for k, v, why in sft_problems(cfg)]
    teachers = cfg.get("_teachers") if isinstance(cfg.get("_teachers"), dict) else {}
    if teachers.get("general") in (None, ""):
        out.append(Problem(key="_teachers.general", value=teachers.get("general"), rule="mopd-general-teacher",
                           message="the panel needs a general teacher (every unset slot and every unrouted task "
                                   "falls back to it)"))
    if not out:
        try:
            read(cfg, unresolved_ok=True)
        except SettingsError as exc:
            key = str(exc).partition("=")[0].partition(" ")[0]
            out.append(Problem(key=key, value=get(cfg, key), message=str(exc), rule="local-settings"))
    if checks.backend(cfg) != checks.LOCAL:
        nodes, cluster = get(cfg, "run.env.nodes"), get(cfg, "cluster.num_nodes")
        if cluster is not None and nodes is not None and cluster != nodes:
            out.append(Problem(key="cluster.num_nodes", value=cluster, rule="nemo-rl-sft",
                               message=f"NeMo RL's SFT places the policy on cluster.num_nodes; the job asks Slurm "
                                       f"for run.env.nodes={nodes}", valid=str(nodes)))
        out += checks.warmup_cluster_rules(stage, cfg, profile)
    return out


CHECK_SETS: dict[str, Any] = {
    "data": _data_checks,
    "layout": checks.validate_training,
    "megatron-keys": lambda stage, cfg, profile: _passthrough_keys(cfg),
    "nemo-rl": _nemo_rl_checks,
    "blend-mix": lambda stage, cfg, profile: _blend_mix(cfg),
    "training-data": _training_data_checks,
    "quantize": _quantize_checks,
    "eval": _eval_checks,
    "mtp-boost": _mtp_boost_checks,
    "mopd-warmup": _warmup_checks,
}


#: Of the check sets, the rules that refuse a config by what its files say, whatever the profile or the command
#: line (``cfg -> [Problem]``): :func:`config_refusal` asks them for ``list`` and ``--help``.
CONFIG_REFUSALS: dict[str, Any] = {
    "mtp-boost": _mtp_boost_refusal,
}


def config_refusal(stage: Stage, config: str) -> str | None:
    """Why the dry run and the run refuse ``stage -c config`` whatever the profile (exit 2), one line, or None: its
    backend has no runtime in this version (rule ``runtime-available``,
    :func:`nemotron.runtime.dispatch.missing_runtime`), or a rule of its check sets refuses what its files say
    (:data:`CONFIG_REFUSALS`: ``mtp-boost -c default`` and ``-c tiny``, rule ``mtp-boost-framework``). Read from the
    config's files (:func:`nemotron.config.compile.config_raw`), with the dry run's own functions; ``nemotron RECIPE
    list`` and the stage's ``--help`` mark such a config with it.

    Raises:
        ConfigError: an unknown config, an unreadable file.
    """
    from nemotron.config.compile import config_raw
    from nemotron.runtime.dispatch import missing_runtime

    raw = config_raw(stage, config)
    backend = raw.get("backend") if isinstance(raw.get("backend"), str) else None
    missing = missing_runtime(stage, backend)
    if missing is not None:
        return f"no {missing[0]} runtime in this version (rule runtime-available)"
    for name in stage.checks:
        found = CONFIG_REFUSALS.get(name, lambda cfg: [])(raw)
        if found:
            p = found[0]
            return f"{p.key}={p.value}: refused by rule {p.rule}; valid: {p.valid}"
    return None


#: The module a cluster backend's runtime imports first, per ``stages/images.toml`` image key: the runtimes
#: (:mod:`nemotron.runtime.megatron.megatron_bridge`, :mod:`nemotron.runtime.rl.nemo_rl`) refuse to start without it.
FRAMEWORK_MODULES = {"nemo": "megatron.bridge", "nemo-rl": "nemo_rl"}


def this_machine(stage: Stage, cfg: dict, plan: Any, importable: Any = None, gpus: int | None = None) -> list[Problem]:
    """The refusals of a run on this machine (``plan.executor`` ``direct``: no profile, or ``local``), as errors, so
    that a dry run never calls valid what the run then refuses. Empty for a cluster profile (its nodes are checked
    when the job starts there) and for the data stages (CPU, local Ray).

    * rule ``gpus-here``: the GPUs this machine shows (:func:`nemotron.runtime.common.prestart.visible_gpus`, or
      ``gpus``) against the plan's GPUs per node. A cluster backend (anything but ``backend: local``) runs one process
      per GPU and its runtime refuses any other count (:func:`nemotron.runtime.common.prestart.gpu_problems`, the
      function called here); the ``local`` backend needs at least as many as a multi-GPU plan asks for.
    * rule ``local-modules``: ``backend: local`` runs in this Python: the modules its entry imports first
      (:data:`nemotron.runtime.megatron.entry.LOCAL_NEEDS`: torch, transformers, and per stage TRL, Math-Verify or Model
      Optimizer) must be importable here.
    * rule ``framework-here``: a cluster backend runs in a container (``stages/images.toml``); on this machine
      the job runs this Python, so the framework its runtime imports first (:data:`FRAMEWORK_MODULES`) must be
      importable here (:func:`nemotron.runtime.common.prestart.missing_modules`, the runtimes' own check).

    ``importable(module)`` and ``gpus`` default to the real ones (tests of other machines pass their own).
    """
    if not checks.on_this_machine(getattr(plan, "executor", None)) or stage.family.prepares_data:
        return []
    from nemotron.runtime.common import prestart

    out: list[Problem] = []
    local = checks.backend(cfg) == checks.LOCAL
    gpn = int(getattr(plan, "gpus_per_node", 0) or 0)
    have = prestart.visible_gpus() if gpus is None else gpus
    where = "without a profile the run starts here" if plan.profile is None else \
        f"profile {plan.profile} runs it here"
    cluster = "--run PROFILE with a Slurm profile"
    here = _local_config(stage)
    title = getattr(stage, "title", getattr(stage, "name", "stage"))
    if local:
        from nemotron.runtime.dispatch import _importable
        from nemotron.runtime.megatron.entry import LOCAL_INSTALL, local_needs

        modules, needs = local_needs(stage.name)
        check = importable or _importable
        absent = [m for m in modules if not m.startswith("nemotron.") and not check(m.split(".")[0])]
        if absent:  # the entry's own refusal (runtime.megatron.entry.run_heavy), before anything starts
            out.append(Problem("backend", "local", rule="local-modules",
                               message=f"{where}, in this Python: the local backend needs {needs}; "
                                       f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not importable here",
                               valid=LOCAL_INSTALL))
        # a config value above 1 is already refused by the local backend's own rule (local-layout, whatever this
        # machine has: checks.validate_local): one refusal, said once. What is left here is a plan that takes more
        # GPUs from the profile's node shape (run.env.gpus_per_node null or deleted)
        own = as_int(get(cfg, "run.env.gpus_per_node"))
        if plan.launch == "torchrun" and gpn > 1 and have < gpn and not (own is not None and own > 1):
            out.append(Problem("run.env.gpus_per_node", gpn, rule="gpus-here",
                               message=f"{where}: {title} -c {plan.config_name} needs {plural(gpn, 'GPU')} per node; "
                                       f"this machine has {have} visible, and the local backend uses at most one",
                               valid="run.env.gpus_per_node=1"))
    elif gpn > 0:
        nodes = as_int(get(cfg, "run.env.nodes")) or 1
        import os

        env = {"LOCAL_WORLD_SIZE": str(gpn), **({"WORLD_SIZE": str(gpn)} if plan.launch == "torchrun" else {}),
               **{k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in os.environ}}
        keys = ("cluster.num_nodes", "cluster.gpus_per_node") if stage.family.nemo_rl else \
            ("run.env.nodes", "run.env.gpus_per_node")
        for line in prestart.gpu_problems(nodes if plan.launch == "torchrun" else 1, gpn, env, have, *keys):
            if have < gpn and f"shows {have} GPU" in line:  # said as the run's own check says it (execute.check_gpus)
                line = (f"{title} -c {plan.config_name} needs {plural(gpn, 'GPU')} per node; this machine has "
                        f"{have} visible ({keys[1]}; CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')})")
            out.append(Problem("", None, rule="gpus-here", message=f"{where}: {line}",
                               valid=cluster + (f", or {here} (this machine)" if here else "")))
        module = FRAMEWORK_MODULES.get(str(getattr(plan, "image_key", "")))
        if module:
            missing = prestart.missing_modules({module: ""}, plan.image_key, _CONTAINER_LABEL.get(plan.image_key, ""),
                                               importable)
            if missing:
                out.append(Problem("backend", checks.backend(cfg) or None, rule="framework-here",
                                   message=f"{where}, in this Python: {missing[0]}",
                                   valid=f"{cluster} (its container)" + (f", or {here} (backend local)" if here else "")))
    return out


_CONTAINER_LABEL = {"nemo": "NeMo", "nemo-rl": "NeMo RL"}


def _local_config(stage: Stage) -> str | None:
    """``"-c local"`` when the stage ships a ``local`` config whose backend has a runtime in this version."""
    from nemotron.config.compile import config_backend
    from nemotron.runtime.dispatch import missing_runtime

    try:
        if "local" in config_names(stage) and missing_runtime(stage, config_backend(stage, "local")) is None:
            return "-c local"
    except Exception:  # noqa: BLE001 - a hint only; the stage's own checks report a broken config
        return None
    return None


def _run_keys(cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """``run.signal_before_s`` and ``run.chain`` (the training stages' submission keys, read by
    :func:`nemotron.launch.plan.plan_job`): whole numbers >= 0, and on a Slurm profile a warning signal that comes
    before the job's time limit (:func:`nemotron.validation.cluster.warning_signal_problem`, the check submission makes).
    ``run.env.nodes`` > 1 with no profile or a ``local`` profile: a warning that the run is one machine
    (:meth:`nemotron.launch.plan.JobPlan.command` and the local executor start ``torchrun --nnodes 1``)."""
    run = cfg.get("run") if isinstance(cfg.get("run"), dict) else {}
    out = []
    for key in ("signal_before_s", "chain"):
        value = run.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            out.append(Problem(f"run.{key}", value, "expected a whole number >= 0", "0, 1, 2, ... (0: none)",
                               rule="run-keys"))
    if not out and profile is not None:
        from nemotron.profiles.schema import SlurmSettings  # loaded with the profile already

        if isinstance(profile.settings, SlurmSettings):
            problem = warning_signal_problem(run.get("signal_before_s"), profile.narrow(SlurmSettings))
            out += [problem] if problem is not None else []
    nodes = as_int((run.get("env") or {}).get("nodes") if isinstance(run.get("env"), dict) else None)
    here = profile is None or profile.settings.on_this_machine
    if here and nodes is not None and nodes > 1 and checks.backend(cfg) != checks.LOCAL:
        # (the local backend refuses several nodes: checks.validate_local)
        # like a GPU architecture no profile declares: checked as configured, said plainly (a warning)
        where = "without a profile" if profile is None else f"on the local profile {profile.name}"
        out.append(Problem("run.env.nodes", nodes, rule="one-machine", severity="warning",
                           message=f"{where} the job runs on this one machine (one node); the layout is checked "
                                   f"for {nodes} nodes as configured",
                           valid="--run/--batch with a Slurm profile for several nodes, or run.env.nodes=1"))
    return out


#: The longest file or folder name Linux file systems take, in bytes (``NAME_MAX`` of ``<linux/limits.h>``; ext4,
#: XFS and Lustre alike).
NAME_MAX = 255


def _long_names(cfg: dict) -> list[Problem]:
    """Rule ``path-name-length``: no string value of the config has a ``/``-separated part longer than
    :data:`NAME_MAX` bytes (UTF-8). Such a path can be neither made nor read: the operating system refuses it
    (``ENAMETOOLONG``) here and on the cluster, so the run would stop at its first use of it. Every key is checked
    (inputs and outputs alike); values still holding an interpolation are left to their resolution."""
    from nemotron.config.tree import leaves

    out = []
    for key, value in leaves(cfg):
        if not isinstance(value, str) or "${" in value or "/" not in value:
            continue
        longest = max(value.split("/"), key=lambda part: len(part.encode()))
        size = len(longest.encode())
        if size > NAME_MAX:
            shown = value if len(value) <= 60 else f"{value[:40]}...{value[-12:]}"
            out.append(Problem(key, shown, f"has a name of {size} bytes ({longest[:16]}...): file systems take at "
                                           f"most {NAME_MAX} bytes per file or folder name",
                               f"a path whose every name is at most {NAME_MAX} bytes", rule="path-name-length"))
    return out


def _output_folders(cfg: dict, profile: ExecutorProfile | None) -> list[Problem]:
    """Rule ``output-folder``: for a run on this machine (no profile, or a ``local`` one), every output
    folder the config names (:data:`nemotron.config.paths.OUTPUT_FOLDER_KEYS`) exists as a writable folder or
    can be created (:func:`nemotron.config.paths.cannot_create_folder`: its nearest existing parent is a
    writable folder). Cluster profiles are not checked: their paths live on the cluster's file system (a name
    longer than the file systems take is :func:`_long_names`' rule, everywhere)."""
    out: list[Problem] = []
    if profile is not None and not profile.settings.on_this_machine:
        return out

    for key in OUTPUT_FOLDER_KEYS:
        value = get(cfg, key)
        if not isinstance(value, str) or not value.strip() or "${" in value:
            continue
        reason = cannot_create_folder(value)
        if reason is not None:
            message = "is a file, not a folder" if reason.startswith("it is a file") else f"cannot create ({reason})"
            out.append(Problem(key, value, message, "a folder you can write (it is created when missing)",
                               rule="output-folder"))
    job_dir = profile.settings.job_dir if profile is not None else None
    if isinstance(job_dir, str) and job_dir.strip():  # a local profile's job folder: experiments, logs, records
        reason = cannot_create_folder(os.path.expanduser(job_dir))
        if reason is not None:
            message = "is a file, not a folder" if reason.startswith("it is a file") else f"cannot create ({reason})"
            out.append(Problem(f"profile.{profile.name}.job_dir", job_dir, message,
                               "a folder you can write (it is created when missing)", rule="output-folder"))
    return out


def _missing_runtime(stage: Stage, cfg: dict) -> list[Problem]:
    """An error when the config's ``backend`` is one the stage's entry script has no runtime for in this version
    (:func:`nemotron.runtime.dispatch.missing_runtime`: ``rlvr``/``mopd -c local``): its job would only say so and exit 1,
    after the stages before it in a ``pipe`` had run."""
    if not getattr(stage, "entry", None):
        return []
    from nemotron.runtime.dispatch import CONTAINERS, missing_runtime, stage_backends

    backends, default = stage_backends(stage)
    name = str(get(cfg, "backend") or default)  # as the entry reads it (runtime.dispatch.run)
    if name not in backends:  # the entry's own refusal ("backend X is not one of ..."), before anything runs
        from nemotron.errors import did_you_mean

        maybe = did_you_mean(name, backends)
        return [Problem(key="backend", value=get(cfg, "backend"), rule="runtime-available",
                        message=f"not a backend of {stage.title} (its job would stop at start)"
                                + (f"; {maybe}" if maybe else ""), valid=", ".join(backends))]
    found = missing_runtime(stage, checks.backend(cfg) or None)
    if found is None:
        return []
    name, usable = found
    valid = ", ".join(f"backend={n}" + (f" (the {CONTAINERS.get(str(backends[n].image), backends[n].image)} container "
                                        "on a Slurm profile: e.g. -c tiny --run PROFILE)" if backends[n].image else "")
                      for n in usable) or "none in this version"
    return [Problem(key="backend", value=name, rule="runtime-available",
                    message=f"{stage.title} has no {name} runtime in this version (its job would stop at start, exit 1)",
                    valid=valid)]


def _blend_mix(cfg: dict) -> list[Problem]:
    """pretrain's ``data.mix_with`` (``-c long_context``): valid shares, and — once the main blend is resolved —
    every blend file readable; the runtimes' own function (:func:`nemotron.data.blend.mix_blend_files`)."""
    data = cfg.get("data") or {}
    if not data.get("mix_with"):
        return []
    from pathlib import Path

    from nemotron.data.blend import mix_blend_files, parse_mix

    primary = data.get("per_split_data_args_path")
    try:
        parse_mix(data["mix_with"])
        if isinstance(primary, str) and "${" not in primary and Path(primary).is_file():
            mix_blend_files(primary, data["mix_with"])
    except ConfigError as exc:
        return [Problem(key="", value=None, message=exc.message, rule="blend-mix")]
    return []


def _passthrough_keys(cfg: dict, framework: str = "megatron-bridge") -> list[Problem]:
    """Keys passed through to the framework must exist in its config at the version pinned to the
    stage's container (stages/images.toml; key lists in nemotron/keylists): Megatron-Bridge's
    ConfigContainer (scripts/megatron_bridge_keys.py, from the same source archives the contract tests run)
    or NeMo RL's MasterConfig (scripts/nemo_rl_keys.py, from a source checkout at the pinned commit). Required
    fields of the classes the Megatron-Bridge job constructs itself are checked on its translation
    (:func:`nemotron.validation.checks.bridge_translation`)."""

    if framework == "nemo-rl":
        version, own, rid, label = keylist_version("nemo-rl", "nemo_rl"), keys.NEMO_RL_OWN_KEYS, "nemo-rl-keys", "NeMo RL"
    else:
        version, own, rid, label = keylist_version("nemo", "megatron_bridge"), keys.OWN_KEYS, "mb-keys", "Megatron-Bridge"
    try:
        keylist = keys.load_keylist(version or "", framework)
    except KeyError as exc:
        return [Problem(key="", value=None, message=str(exc.args[0]), rule=rid, severity="warning")]
    from nemotron.config.compile import _resolve_path, _split_key

    out = []
    for p in keys.unknown_keys(cfg, keylist, own):
        message = p.message.removeprefix(f"{p.key}: ")
        if version and version not in message:
            message += f" ({label} {version})"
        out.append(Problem(key=p.key, value=_resolve_path(cfg, _split_key(p.key)), rule=rid, message=message,
                           valid=f"did you mean '{p.suggestion}'?" if p.suggestion else ", ".join(p.valid)))
    return out


def _nemo_rl_rules(cfg: dict) -> list[Problem]:
    """NeMo RL's own refusals of the config its entry receives (required keys, the entry's reads, the checkpoint
    metric, rollout-path settings): :func:`nemotron.validation.nemo_rl.validate_nemo_rl`, against the key list
    of the pinned commit (a missing key list is ``_passthrough_keys``'s warning)."""
    from nemotron.validation.nemo_rl import validate_nemo_rl

    try:
        keylist = keys.load_keylist(framework_version("nemo-rl", "nemo_rl") or "", "nemo-rl")
    except KeyError:
        return []
    return validate_nemo_rl(cfg, keylist)


def describe(stage: Stage, cfg: dict, profile: ExecutorProfile | None) -> list[Table]:
    """Tables for ``--dry-run``: ``(title, header, rows)`` — per-pipeline-stage Mamba/MoE/attention
    counts and MTP placement, the parallel layout (world, DP, EDP, minimum GPUs), the per-GPU memory
    estimate against the GPU memory, and for NeMo RL stages the node arithmetic, the generation
    engines and the teacher panel."""
    if stage.family.prepares_data:
        return []
    try:
        if stage.family.nemo_rl:
            return checks.describe_rl(stage, cfg, profile)
        return checks.describe_megatron(stage, cfg, profile)
    except (ArithmeticError, TypeError, ValueError):  # an invalid layout: validate() has said why
        return []


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        sig = (p.key, p.message, p.severity)
        if sig not in seen:
            seen.add(sig)
            out.append(p)
    return out


__all__ = ["FRAMEWORK_MODULES", "Problem", "as_int", "describe", "prepare", "rules", "this_machine", "validate"]
