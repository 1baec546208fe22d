"""A run's curves as a picture: ``metrics.png`` beside its ``metrics.jsonl``.

The local runtimes (the trainer of ``pretrain``/``sft -c local``, :mod:`nemotron.runtime.megatron.trainer`; the TRL
stages ``rlvr``/``mopd -c local``, :mod:`nemotron.runtime.rl.rl_local`) append one JSON record per logged step to
``metrics.jsonl`` (``{"step": int, "time": float, "<metric>": float, ...}``) and call :func:`write_curves` when they
stop (at the end, and on a signal before exit 75). It draws one panel per metric of :data:`CURVES` the file holds,
the value against the optimizer step. matplotlib (the ``plots`` extra) draws it; without it nothing is drawn and the
run says so in one line (the metrics stay in ``metrics.jsonl``).
"""

from __future__ import annotations

import json
from pathlib import Path

#: The metrics drawn, in panel order: (key in metrics.jsonl, panel title). Training loss and held-out loss share a
#: panel (the trainer's ``loss`` and ``eval_loss``); the RL stages' ``loss`` is GRPO's loss or MOPD's reverse KL.
CURVES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("loss", "eval_loss"), "loss (training, held-out)"),
    (("reward",), "reward (mean per rollout)"),
    (("kl",), "KL to the reference"),
    (("val:accuracy",), "validation accuracy"),
    (("learning_rate",), "learning rate"),
    (("grad_norm",), "gradient norm"),
)


def read_metrics(path: Path) -> list[dict]:
    """The records of the run's ``metrics.jsonl``, one per step, in step order.

    The file is appended across resumes, so a step may be logged twice (the steps between the last checkpoint and
    a stop are run again): per step the record logged last wins, merged key by key with the earlier ones (the
    trainer logs the training and held-out loss of one step in two records). A fresh start in the same folder (a
    step lower than the one before it, down to 0 or 1) begins the run anew: records before it are dropped. Lines
    that are not JSON objects with an integer ``step`` (a line cut by a kill) are skipped.
    """
    records: list[dict] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("step"), int) and not isinstance(rec["step"], bool):
            records.append(rec)
    start = 0
    for i in range(1, len(records)):
        if records[i]["step"] <= 1 < records[i - 1]["step"]:
            start = i
    by_step: dict[int, dict] = {}
    for rec in records[start:]:
        by_step.setdefault(rec["step"], {}).update(rec)
    return [by_step[k] for k in sorted(by_step)]


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of the records that hold a number (not a bool) under ``key``."""
    steps, values = [], []
    for rec in records:
        v = rec.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            steps.append(rec["step"])
            values.append(float(v))
    return steps, values


def _pyplot():
    """matplotlib's pyplot on the Agg backend (no display: a job on a node, a test), or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # optional: the plots extra
        return None
    return plt


def write_curves(metrics: Path, title: str = "") -> Path | None:
    """Draw ``metrics`` (a ``metrics.jsonl``) into ``metrics.png`` beside it and return that path.

    Returns None, drawing nothing, when the file holds none of the metrics of :data:`CURVES`.

    Raises:
        ImportError: matplotlib is not installed (the caller says so and goes on: the picture is an extra).
    """
    records = read_metrics(metrics)
    panels = [(keys, name) for keys, name in CURVES if any(series(records, k)[0] for k in keys)]
    if not panels:
        return None
    plt = _pyplot()
    if plt is None:
        raise ImportError("matplotlib is not installed (pip install 'nemotron-cli[plots]')")

    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (keys, name) in zip(axes.flat, panels):
        for key in keys:
            steps, values = series(records, key)
            if steps:
                ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3, label=key)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    out = metrics.with_suffix(".png")
    tmp = out.with_name(out.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    tmp.replace(out)  # a reader never sees half a picture
    return out


def write_curves_or_say(metrics: Path, title: str, say) -> Path | None:
    """:func:`write_curves`, saying in one line (through ``say``) where the picture went, or why there is none."""
    try:
        out = write_curves(metrics, title)
    except ImportError:
        say(f"matplotlib is not installed (pip install 'nemotron-cli[plots]'): no {metrics.with_suffix('.png').name}; "
            f"the metrics are in {metrics}")
        return None
    except (OSError, ValueError) as exc:  # a picture must not fail a finished run
        say(f"could not draw {metrics.with_suffix('.png')}: {exc}")
        return None
    if out is not None:
        say(f"curves: {out}")
    return out
