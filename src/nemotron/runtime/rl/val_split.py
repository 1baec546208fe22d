"""The RL stages' refusal of an empty validation split while the run validates (rlvr, mopd).

Standard library only: the NeMo RL job's precheck imports it, and its image holds none of the local runtime's
modules (math_verify, transformers).
"""

from __future__ import annotations

from pathlib import Path

from nemotron.runtime.common.settings import get


def empty_validation(cfg: dict) -> str | None:
    """The refusal of an empty validation split that the run would validate on, or None.

    ``cfg``: the stage's config (our keys; NeMo RL's names). Validation is used when ``grpo.val_period`` > 0 or
    ``grpo.val_at_start`` / ``grpo.val_at_end`` is true (GRPO's own condition, nemo_rl/algorithms/grpo.py); then a
    ``data.validation.data_path`` on this machine with no non-blank line is refused: the local runtime would stop on
    :func:`nemotron.runtime.rl.rl_data.read_rows` ("no rows") after loading the model, NeMo RL on an empty
    dataset, and a ``val:`` checkpoint metric (``checkpointing.metric_name``) would have nothing to rank by. ``data prep rl`` writes such a file when
    it holds no row out (:func:`nemotron.data.rl.held_out_note`). A path unset, still a ``${...}`` reference or not
    on this machine is None here (other checks name it). The one check of the dry run (rule ``local-settings``
    through :func:`nemotron.runtime.rl.rl_settings.read`, and rule ``rl-validation`` for the cluster backend) and
    of the runs (:func:`nemotron.runtime.rl.rl_settings.read`, :func:`nemotron.runtime.rl.nemo_rl.precheck`).

    Returns:
        one line naming the file and the keys that use validation, with what to do.
    """
    period = get(cfg, "grpo.val_period", 0)
    using = ([f"grpo.val_period={period}"] if isinstance(period, (int, float)) and period > 0 else []) + \
        [f"grpo.{k}=true" for k in ("val_at_start", "val_at_end") if get(cfg, f"grpo.{k}") is True]
    value = get(cfg, "data.validation.data_path")
    if not using or not isinstance(value, str) or not value or "${" in value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            if any(line.strip() for line in fh):
                return None
    except OSError:
        return None
    metric = get(cfg, "checkpointing.metric_name")
    if isinstance(metric, str) and metric.startswith("val:") and get(cfg, "checkpointing.enabled", True) is not False:
        using.append(f"checkpointing.metric_name={metric!r}")
    return (f"data.validation.data_path={path}: no rows (an empty validation split), but the run validates on it "
            f"({', '.join(using)}); point it at a validation.jsonl with rows (data prep rl with more distinct records), "
            "or turn validation off: grpo.val_period=0 grpo.val_at_start=false grpo.val_at_end=false "
            "checkpointing.metric_name=null")


__all__ = ["empty_validation"]
