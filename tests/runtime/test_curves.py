"""``metrics.png`` from a run's ``metrics.jsonl`` (:mod:`nemotron.runtime.common.curves`): which records count, what is
drawn, and the one line a run prints without matplotlib. The trainer's real run writing it is
``tests/runtime/test_runtime_local_refusals.py::test_resumed_run_summary_spans_the_whole_run``."""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import pytest

from nemotron.runtime.common.curves import read_metrics, series, write_curves, write_curves_or_say

IN_CI = os.environ.get("CI", "").lower() == "true"


def _write(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_records_of_a_resumed_and_restarted_run(tmp_path: Path) -> None:
    metrics = _write(tmp_path / "metrics.jsonl", [
        {"step": 0, "eval_loss": 9.0}, {"step": 1, "loss": 8.0}, {"step": 2, "loss": 7.0},  # an earlier run ...
        {"step": 0, "eval_loss": 5.0}, {"step": 1, "loss": 4.0}, {"step": 2, "loss": 3.5},  # ... then a fresh start
        {"step": 2, "eval_loss": 3.9}, {"step": 3, "loss": 3.0},
        '{"step": 4, "loss": 2.',  # cut by a kill
        {"step": 3, "loss": 2.9}, {"step": True, "loss": 1.0}, [1, 2],  # resumed at 2: step 3 again; not records
    ])
    records = read_metrics(metrics)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert series(records, "loss") == ([1, 2, 3], [4.0, 3.5, 2.9])  # the last logged value of a step wins
    assert series(records, "eval_loss") == ([0, 2], [5.0, 3.9])  # merged with the step's other record
    assert read_metrics(tmp_path / "absent.jsonl") == []


def test_png_beside_the_metrics_and_none_without_a_curve(tmp_path: Path) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("matplotlib (the plots extra) is required under CI=true", pytrace=False)
        pytest.skip("matplotlib is not installed (pip install 'nemotron-cli[plots]')")
    rl = _write(tmp_path / "metrics.jsonl", [{"step": s, "reward": 0.1 * s, "kl": 0.01, "val:accuracy": 0.5}
                                               for s in range(1, 5)])
    out = write_curves(rl, "rlvr (local)")
    assert out == tmp_path / "metrics.png" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / "other").mkdir()
    other = _write(tmp_path / "other" / "metrics.jsonl", [{"step": 1, "time": 1.0, "tokens_per_s": 5.0}])
    assert write_curves(other) is None and not (tmp_path / "other" / "metrics.png").exists()


def test_without_matplotlib_the_run_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = _write(tmp_path / "metrics.jsonl", [{"step": 1, "loss": 2.0}])
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    said: list[str] = []
    assert write_curves_or_say(metrics, "pretrain (local)", said.append) is None
    assert said == [f"matplotlib is not installed (pip install 'nemotron-cli[plots]'): no metrics.png; the metrics "
                    f"are in {metrics}"]
    assert not (tmp_path / "metrics.png").exists()
