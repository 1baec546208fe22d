"""What a finished stage measured, read back from the files its runtime wrote, for ``pipe``'s final table and its
gates (stdlib only: the CLI imports it).

Per stage: the reader its registry row names (:attr:`nemotron.config.registry.Stage.metrics`, :data:`READERS`) on
its file in the row's output folder (:attr:`nemotron.config.registry.Stage.output_folder`, filled from the compiled
config):

=================  =====================================================  ==========================================
stage              file                                                   metrics
=================  =====================================================  ==========================================
pretrain, sft      ``<checkpoint.save>/summary.json`` (local trainer)       ``train_loss``, ``eval_loss``, ``tokens_per_s``
rlvr               ``<checkpointing.checkpoint_dir>/summary.json``          ``reward``, ``reward_mean``, ``val_accuracy``
mopd-warmup        ``<checkpointing.checkpoint_dir>/summary.json`` (local)  ``kl_before``, ``kl_after`` (the student's
                                                                          reverse KL to its teachers), ``loss``
mopd               ``<checkpointing.checkpoint_dir>/summary.json``          ``kl`` (per-token reverse KL), ``val_accuracy``
mtp-boost          ``<mtp_boost.output_dir>/summary.json`` (local)        ``acceptance_length_before``,
                                                                          ``acceptance_length_after``, ``draft_length``,
                                                                          ``kl`` (forward KL x T², last step)
quantize           ``<export.output_dir>/summary.json`` (local)            ``ppl_bf16``, ``ppl_quantized``, ``kl_per_token``,
                                                                          ``top1_agreement``
eval               ``<eval.output_dir>/eval.json``                        ``<label>.perplexity``, ``<label>.gsm8k_accuracy``
data stages        ``<output_dir>/.../manifest.json``                      none (the table says "-")
=================  =====================================================  ==========================================

Gates (``pipe --gates FILE``): ``{stage: {metric: {max: X} | {min: X} | {max_drop: Y}}}``; ``max_drop`` compares
with the same metric of the nearest earlier stage of the chain that reported it (a drop larger than ``Y`` fails).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GATE_OPS = ("max", "min", "max_drop")


def _get(cfg: dict, key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _put(out: dict[str, float], name: str, value: Any) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out[name] = float(value)


def _trainer(s: dict[str, Any], out: dict[str, float]) -> None:
    _put(out, "train_loss", s.get("train_loss_last"))
    _put(out, "eval_loss", s.get("eval_loss_last"))
    _put(out, "tokens_per_s", s.get("tokens_per_s"))


def _rl(s: dict[str, Any], out: dict[str, float]) -> None:
    # GRPO with a reward (rlvr) writes reward_*, on-policy distillation (mopd) kl_*: each is read when written
    _put(out, "reward", s.get("reward_last"))
    _put(out, "reward_mean", s.get("reward_mean"))
    _put(out, "kl", s.get("kl_last"))
    _put(out, "kl_first", s.get("kl_first"))
    _put(out, "val_accuracy", s.get("val_accuracy_last"))
    _put(out, "generated_tokens_per_s", s.get("generated_tokens_per_s"))


def _warmup(s: dict[str, Any], out: dict[str, float]) -> None:
    # the student's reverse KL to its routed teachers on held-out prompts, before and after the warmup's SFT
    _put(out, "kl_before", s.get("kl_before"))
    _put(out, "kl_after", s.get("kl_after"))
    _put(out, "loss", s.get("loss_last"))


def _mtp_boost(s: dict[str, Any], out: dict[str, float]) -> None:
    for when in ("before", "after"):
        rec = s.get(when) if isinstance(s.get(when), dict) else {}
        _put(out, f"acceptance_length_{when}", rec.get("acceptance_length"))
    _put(out, "draft_length", s.get("draft_length"))
    _put(out, "kl", s.get("kl_last"))


def _quantize(s: dict[str, Any], out: dict[str, float]) -> None:
    held = s.get("held_out") if isinstance(s.get("held_out"), dict) else {}
    for k in ("ppl_bf16", "ppl_quantized", "kl_per_token", "top1_agreement"):
        _put(out, k, held.get(k))
    wb = s.get("weight_bytes") if isinstance(s.get("weight_bytes"), dict) else {}
    _put(out, "weight_reduction", wb.get("reduction"))


def _eval(s: dict[str, Any], out: dict[str, float]) -> None:
    for label, rec in (s.get("checkpoints") or {}).items():
        for k, v in (rec.get("metrics") or {}).items() if isinstance(rec, dict) else ():
            if k in ("perplexity", "gsm8k_accuracy"):
                _put(out, f"{label}.{k}", v)


#: The readers a registry row names (:attr:`nemotron.config.registry.Stage.metrics`, one of
#: :data:`nemotron.config.registry.METRICS_READERS`): ``(file in the stage's output folder, reader)``.
READERS: dict[str, tuple[str, Any]] = {
    "trainer": ("summary.json", _trainer),
    "rl": ("summary.json", _rl),
    "mopd-warmup": ("summary.json", _warmup),
    "mtp-boost": ("summary.json", _mtp_boost),
    "quantize": ("summary.json", _quantize),
    "eval": ("eval.json", _eval),
}


def output_folder(stage: Any, cfg: dict) -> Path | None:
    """The folder a run of ``stage`` (a registry row) with config ``cfg`` writes into: the row's
    :attr:`~nemotron.config.registry.Stage.output_folder` template filled from ``cfg``; None when the row has none
    or ``cfg`` lacks a key it names."""
    import re

    template = stage.output_folder
    if not template:
        return None
    values = {m: _get(cfg, m) for m in re.findall(r"\{([^{}]+)\}", template)}
    if any(v is None for v in values.values()):
        return None
    return Path(re.sub(r"\{([^{}]+)\}", lambda m: str(values[m.group(1)]), template))


def collect(stage: str, cfg: dict) -> dict[str, float]:
    """The metrics of a finished ``stage`` run with config ``cfg`` (empty when it wrote none we read): the reader
    its registry row names (:data:`READERS`), on that reader's file in the row's output folder.

    Raises:
        KeyError: ``stage`` is not a registry stage (:func:`nemotron.config.registry.get_stage`).
    """
    from nemotron.config.registry import get_stage

    row = get_stage(stage)
    out: dict[str, float] = {}
    folder = output_folder(row, cfg)
    if not row.metrics or folder is None:
        return out
    name, reader = READERS[row.metrics]
    reader(_read(folder / name) or {}, out)
    return out


def describe(metrics: dict[str, float]) -> str:
    """``"eval_loss 9.306, tokens_per_s 51"``: the metrics for one table cell."""
    if not metrics:
        return "-"
    return ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())


class GateError(ValueError):
    """A gates file that cannot be used; ``str()`` names the file and key."""


def read_gates(path: Path, stages: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """The gates of ``path`` (YAML), checked: every stage is in the chain, every rule is ``max``/``min``/``max_drop``
    with a number.

    Raises:
        GateError: naming the file, the key and the valid values.
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise GateError(f"--gates {path}: cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise GateError(f"--gates {path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise GateError(f"--gates {path}: expected a mapping stage -> metric -> {{max|min|max_drop: number}}")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for stage, rules in data.items():
        if stage not in stages:
            raise GateError(f"--gates {path}: {stage}: not a stage of this chain ({', '.join(stages)})")
        if not isinstance(rules, dict):
            raise GateError(f"--gates {path}: {stage}: expected metric -> {{max|min|max_drop: number}}")
        for metric, rule in rules.items():
            if not isinstance(rule, dict) or not rule:
                raise GateError(f"--gates {path}: {stage}.{metric}: expected {{max|min|max_drop: number}}")
            for op, value in rule.items():
                if op not in GATE_OPS:
                    raise GateError(f"--gates {path}: {stage}.{metric}.{op}: not a gate (valid: {', '.join(GATE_OPS)})")
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise GateError(f"--gates {path}: {stage}.{metric}.{op}={value!r}: expected a number")
            out.setdefault(str(stage), {})[str(metric)] = {k: float(v) for k, v in rule.items()}
    return out


def check_gates(stage: str, metrics: dict[str, float], gates: dict[str, dict[str, float]],
                earlier: list[dict[str, float]]) -> list[str]:
    """One line per failed gate of ``stage`` (empty: all passed): ``gate <stage>.<metric> <op> <threshold>: value
    <v>``. A gate on a metric the stage did not report fails too (it cannot be checked). ``earlier``: the metrics of
    the stages before it, in chain order (for ``max_drop``)."""
    failed = []
    for metric, rule in gates.items():
        value = metrics.get(metric)
        for op, thr in rule.items():
            name = f"gate {stage}.{metric} {op} {thr:g}"
            if value is None:
                failed.append(f"{name}: {stage} reported no {metric} (it reported: {', '.join(metrics) or 'nothing'})")
            elif op == "max" and not value <= thr:
                failed.append(f"{name}: value {value:.6g} is above {thr:g}")
            elif op == "min" and not value >= thr:
                failed.append(f"{name}: value {value:.6g} is below {thr:g}")
            elif op == "max_drop":
                before = next((m[metric] for m in reversed(earlier) if metric in m), None)
                if before is None:
                    failed.append(f"{name}: no earlier stage of the chain reported {metric} to compare with")
                elif before - value > thr:
                    failed.append(f"{name}: value {value:.6g} is {before - value:.6g} below the earlier "
                                  f"{before:.6g} (more than {thr:g})")
    return failed


__all__ = ["GATE_OPS", "READERS", "GateError", "check_gates", "collect", "describe", "output_folder", "read_gates"]
