"""Which samples each training step saw: a per-micro-batch record, for checking that a resumed run continues
the same sample stream (``NEMOTRON_BATCH_LOG=<file.jsonl>`` on the ``megatron-bridge`` backend).

A sample is identified by the SHA-256 of its token ids (the ``tokens`` row of the batch Megatron-Bridge's
``get_batch`` draws from the data iterator), so two runs agree on a step exactly when they fed the same samples in
the same order; nothing about the dataset's internal indices is assumed. Each line of the file is one JSON object:

* ``{"kind": "batch", "step": S, "micro_batch": M, "samples": [sha256[:16], ...], "t": seconds}`` for each
  micro-batch the forward step drew (``S`` = Megatron-Bridge's ``train_state.step`` before the step's update: 0 for the
  first step of a fresh run, the saved iteration for the first step after a resume);
* ``{"kind": "loss", "step": S, "lm_loss": float}`` per micro-batch, the token-mean language-model loss the loss
  function reported;
* ``{"kind": "memory", "step": S, "max_allocated_gib": float, "max_reserved_gib": float}`` once per step, the CUDA
  caching allocator's peaks since the process started (GiB = 2**30 bytes).

It costs a device-to-host copy of each micro-batch's tokens and one loss ``.item()`` per micro-batch: a diagnostic
switch, off by default. Only rank 0 writes (a data-parallel group would otherwise write the same step N times
with different samples).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable

#: The environment variable that turns the record on: the file (JSON lines, appended to).
ENV = "NEMOTRON_BATCH_LOG"


def sample_ids(tokens: Any) -> list[str]:
    """The id of each row of ``tokens`` (a ``[micro_batch, seq]`` integer tensor or nested list): the first 16 hex
    digits of the SHA-256 of its int64 little-endian bytes."""
    import numpy as np

    if hasattr(tokens, "detach"):
        tokens = tokens.detach().to("cpu").numpy()
    rows = np.asarray(tokens, dtype="<i8")
    if rows.ndim == 1:
        rows = rows[None, :]
    return [hashlib.sha256(row.tobytes()).hexdigest()[:16] for row in rows]


class BatchLog:
    """Appends the records of the module docstring to ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._t0 = time.monotonic()
        self._last_memory_step: int | None = None
        self._micro = (None, 0)

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")

    def batch(self, step: int, tokens: Any) -> None:
        last, n = self._micro
        n = n + 1 if last == step else 0
        self._micro = (step, n)
        self.write({"kind": "batch", "step": step, "micro_batch": n, "samples": sample_ids(tokens),
                    "t": round(time.monotonic() - self._t0, 4)})

    def memory(self, step: int) -> None:
        if self._last_memory_step == step:
            return
        self._last_memory_step = step
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is always there with Megatron
            return
        if not torch.cuda.is_available():
            return
        gib = 2 ** 30
        self.write({"kind": "memory", "step": step, "max_allocated_gib": round(torch.cuda.max_memory_allocated() / gib, 3),
                    "max_reserved_gib": round(torch.cuda.max_memory_reserved() / gib, 3)})


class _Recording:
    """The data iterator, recording the ``tokens`` of each batch it hands out."""

    def __init__(self, inner: Iterable, log: BatchLog, step: int) -> None:
        self._inner, self._log, self._step = inner, log, step

    def __iter__(self) -> "_Recording":
        return self

    def __next__(self) -> Any:
        batch = next(self._inner)
        if isinstance(batch, dict) and batch.get("tokens") is not None:
            self._log.batch(self._step, batch["tokens"])
        return batch

    def __getattr__(self, name: str) -> Any:  # e.g. RerunDataIterator's own methods
        return getattr(self._inner, name)


def _rank() -> int:
    return int(os.environ.get("RANK") or 0)


def recording(forward_step: Callable, path: str | os.PathLike[str] | None) -> Callable:
    """``forward_step`` (Megatron-Bridge's ``(state, data_iterator, model, return_schedule_plan=False)``), or, when
    ``path`` is set and this is rank 0, the same step recording each batch, its loss and the memory peaks to
    ``path``. The wrapper keeps that signature: Megatron-Bridge inspects it to decide what to pass."""
    if not path or _rank() != 0:
        return forward_step
    log = BatchLog(path)

    def step(state, data_iterator, model, return_schedule_plan: bool = False):
        n = int(state.train_state.step)
        log.memory(n)
        it = _Recording(data_iterator, log, n) if data_iterator is not None else None
        output, loss_fn = forward_step(state, it, model, return_schedule_plan)

        def loss(*args, **kwargs):
            result = loss_fn(*args, **kwargs)
            reported = result[2] if isinstance(result, tuple) and len(result) > 2 else None
            value = reported.get("lm loss") if isinstance(reported, dict) else None
            if value is not None:
                # Megatron reports [sum of token losses, number of tokens] for "lm loss"
                v = value.detach().float().cpu().flatten().tolist() if hasattr(value, "detach") else [float(value)]
                log.write({"kind": "loss", "step": n, "lm_loss": v[0] / v[1] if len(v) == 2 and v[1] else v[0]})
            return result

        return output, loss

    return step


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The record of one or more runs appended to ``path``: ``{"samples": {step: [ids in micro-batch order]},
    "loss": {step: mean lm loss}, "max_allocated_gib": float | None, "max_reserved_gib": float | None,
    "times": {step: seconds of the first micro-batch}}``. A step recorded twice (a resumed run repeating a step
    the first run drew but did not save) keeps the later record."""
    samples: dict[int, list[str]] = {}
    losses: dict[int, list[float]] = {}
    times: dict[int, float] = {}
    alloc = reserved = None
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        step = int(rec["step"])
        if rec["kind"] == "batch":
            if rec["micro_batch"] == 0:
                samples[step] = []
                losses.pop(step, None)
                times[step] = rec["t"]
            samples.setdefault(step, []).extend(rec["samples"])
        elif rec["kind"] == "loss":
            losses.setdefault(step, []).append(rec["lm_loss"])
        elif rec["kind"] == "memory":
            alloc = max(alloc or 0.0, rec["max_allocated_gib"])
            reserved = max(reserved or 0.0, rec["max_reserved_gib"])
    return {"samples": samples, "loss": {s: sum(v) / len(v) for s, v in losses.items() if v},
            "max_allocated_gib": alloc, "max_reserved_gib": reserved, "times": times}
