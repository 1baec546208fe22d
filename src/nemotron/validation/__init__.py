"""Launch validation: every layout rule and a per-GPU memory estimate, before anything is queued.

The CLI calls exactly three functions, in this order, on the compiled config (plain dicts):

* :func:`prepare` — the stage's own adjustments, with a note for each (an ``<N>layer`` slice picks a
  one-node layout; unset MOPD teacher slots fall back to the general teacher);
* :func:`validate` — every problem at once, each in the user's terms (key, value, why, valid values);
* :func:`describe` — the tables ``--dry-run`` shows (pipeline stages, parallel layout, memory,
  RL node arithmetic).

Stdlib only (plus :mod:`nemotron.catalogue` and :mod:`nemotron.errors`): importing this package costs
nothing at start-up. The rules live in :mod:`nemotron.validation.rules` (one pure function each, with
its source and the Megatron-Core versions it holds for), the estimate in
:mod:`nemotron.validation.memory`. ``profile`` is None (no profile: an 8-GPU H200 node, 141 GB,
Hopper, assumed) or an object with ``name``, ``executor``, ``gpus_per_node``, ``gpu_arch`` and
``gpu_memory`` (GB) attributes.
"""

from __future__ import annotations

from typing import Any

from nemotron import catalogue
from nemotron.errors import Problem
from nemotron.validation import checks, rules
from nemotron.validation.views import as_int, get, node_shape, put

Table = tuple[str, list[str], list[list[str]]]

#: Keys an ``<N>layer`` slice sets (value: ``"ep"`` means all GPUs of the node).
_MB_SLICE = {
    "model.tensor_model_parallel_size": 1, "model.pipeline_model_parallel_size": 1,
    "model.context_parallel_size": 1, "model.expert_tensor_parallel_size": 1,
    "model.expert_model_parallel_size": "ep", "model.sequence_parallel": False,
    "model.num_layers_in_first_pipeline_stage": None, "model.num_layers_in_last_pipeline_stage": None,
}
_QUANT_SLICE = {
    "export.tensor_model_parallel_size": 1, "export.pipeline_model_parallel_size": 1,
    "export.expert_model_parallel_size": "ep", "export.expert_tensor_parallel_size": 1,
}
_RL_SLICE = {k.replace("model.", "policy.megatron_cfg."): v for k, v in _MB_SLICE.items()}


def _slice_layout(stage: Any) -> dict[str, Any]:
    kind = getattr(stage, "kind", "")
    if kind == "rl":
        return dict(_RL_SLICE)
    out = dict(_MB_SLICE)
    if kind == "quantize":
        out.update(_QUANT_SLICE)
    return out


def prepare(stage: Any, cfg: dict, user_keys: set[str], profile: Any) -> list[str]:
    """Adjust ``cfg`` in place before validation; return one note per change for ``--dry-run``.

    * ``model.name`` ending in ``<N>layer``: the slice fits one node, so the layout becomes TP=1,
      PP=1, CP=1, ETP=1, EP = all GPUs of the node (the largest divisor of the expert count that fits),
      sequence parallel off, ``run.env.nodes`` = 1 — except keys in ``user_keys`` (set by ``-c`` or an
      override), which are kept and named in the note.
    * MOPD: unset teacher slots (``_teachers.<slot>`` null) are filled with the general teacher.
    * NeMo RL stages: a null ``cluster.gpus_per_node`` takes the node shape.
    """
    notes: list[str] = []
    if getattr(stage, "kind", "") == "data":
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
            ep = max(d for d in rules.divisors(spec.num_experts) if d <= gpn) if spec.num_experts else 1
            changed, kept = [], []
            layout = _slice_layout(stage)
            if getattr(stage, "kind", "") != "rl":
                layout["run.env.nodes"] = 1
            for key, value in layout.items():
                value = ep if value == "ep" else value
                if key in user_keys:
                    if get(cfg, key) != value:
                        kept.append(f"{key}={get(cfg, key)!r}")
                    continue
                if get(cfg, key, object()) != value:
                    put(cfg, key, value)
                    short = key.removeprefix("model.").removeprefix("policy.megatron_cfg.")
                    changed.append(f"{short}={value}")
            if changed:
                why = "" if ep == gpn else f" (largest divisor of {spec.num_experts} experts <= {gpn})"
                msg = (f"model.name={name}: a {n}-layer slice fits one node of {gpn} GPUs; layout set to "
                       f"{', '.join(changed)}{why}")
                if kept:
                    msg += f"; kept your {', '.join(kept)}"
                notes.append(msg)
    if getattr(stage, "kind", "") == "rl":
        if get(cfg, "cluster.gpus_per_node") is None and shape.gpus_per_node and "cluster" in cfg:
            put(cfg, "cluster.gpus_per_node", shape.gpus_per_node)
            notes.append(f"cluster.gpus_per_node=null: set to the node shape, {shape.gpus_per_node}")
        teachers = get(cfg, "_teachers")
        if get(cfg, "on_policy_distillation.enabled", False) and isinstance(teachers, dict):
            general = teachers.get("general")
            if general not in (None, ""):
                panel, fell = rules.resolve_teachers(teachers)
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
    if getattr(stage, "kind", "") == "quantize" and checks.backend(cfg) != checks.LOCAL:
        notes.append("export.*: this version exports from the calibration layout (model.*); the export layout "
                     "is validated, not applied")
        if get(cfg, "generate.enabled", False):
            kernels = get(cfg, "generate.kernels")
            notes.append("generate: the job generates with simulated quantization"
                         + ("; real NVFP4 GEMMs (generate.kernels=nvfp4) are a separate vLLM step on Blackwell: "
                            "the job prints the command" if kernels == "nvfp4" else ""))
    return notes


def validate(stage: Any, cfg: dict, profile: Any) -> list[Problem]:
    """Every problem of ``cfg`` for ``stage`` on ``profile`` (errors and warnings), all at once.

    Data stages run on CPUs through Ray and have no layout: their configs and inputs are checked by
    their runtimes' own parsers, called here (:mod:`nemotron.validation.data`).
    """
    kind = getattr(stage, "kind", "")
    if kind == "data":
        from nemotron.validation.data import validate_data

        return validate_data(stage, cfg)
    if kind == "rl":
        problems = checks.validate_rl(stage, cfg, profile)
    else:
        problems = checks.validate_megatron(stage, cfg, profile)
    if getattr(stage, "name", "") in ("pretrain", "sft", "convert"):
        problems += _passthrough_keys(cfg)
    elif kind == "rl" and checks.backend(cfg) != checks.LOCAL:
        problems += _passthrough_keys(cfg, "nemo-rl")
    if getattr(stage, "name", "") == "pretrain":
        problems += _blend_mix(cfg)
    if kind == "quantize":
        from nemotron.validation.quantize import validate_quantize

        problems += validate_quantize(cfg, profile)
    return _dedupe(problems)


def _blend_mix(cfg: dict) -> list[Problem]:
    """pretrain's ``data.mix_with`` (``-c long_context``): valid shares, and — once the main blend is resolved —
    every blend file readable; the runtimes' own function (:func:`nemotron.data.blend.mix_blend_files`)."""
    data = cfg.get("data") or {}
    if not data.get("mix_with"):
        return []
    from pathlib import Path

    from nemotron.data.blend import mix_blend_files, parse_mix
    from nemotron.errors import ConfigError

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
    ConfigContainer (scripts/megatron_bridge_keys.py, from the released wheels) or NeMo RL's
    MasterConfig (scripts/nemo_rl_keys.py, from a source checkout at the pinned commit)."""
    from nemotron import keys
    from nemotron.validation.views import framework_version

    if framework == "nemo-rl":
        version, own, rid, label = framework_version("nemo-rl", "nemo_rl"), keys.NEMO_RL_OWN_KEYS, "nemo-rl-keys", "NeMo RL"
    else:
        version, own, rid, label = framework_version("nemo", "megatron_bridge"), keys.OWN_KEYS, "mb-keys", "Megatron-Bridge"
    try:
        keylist = keys.load_keylist(version or "", framework)
    except KeyError as exc:
        return [Problem(key="", value=None, message=str(exc.args[0]), rule=rid, severity="warning")]
    from nemotron.config import _resolve_path, _split_key

    out = []
    for p in keys.unknown_keys(cfg, keylist, own):
        message = p.message.removeprefix(f"{p.key}: ")
        if version and version not in message:
            message += f" ({label} {version})"
        out.append(Problem(key=p.key, value=_resolve_path(cfg, _split_key(p.key)), rule=rid, message=message,
                           valid=f"did you mean '{p.suggestion}'?" if p.suggestion else ", ".join(p.valid)))
    return out


def describe(stage: Any, cfg: dict, profile: Any) -> list[Table]:
    """Tables for ``--dry-run``: ``(title, header, rows)`` — per-pipeline-stage Mamba/MoE/attention
    counts and MTP placement, the parallel layout (world, DP, EDP, minimum GPUs), the per-GPU memory
    estimate against the GPU memory, and for NeMo RL stages the node arithmetic, the generation
    engines and the teacher panel."""
    kind = getattr(stage, "kind", "")
    if kind == "data":
        return []
    try:
        if kind == "rl":
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


__all__ = ["Problem", "as_int", "describe", "prepare", "rules", "validate"]
