"""Make Megatron-Bridge's exit-signal handler actually catch the signal.

``train.exit_signal_handler=True`` asks Megatron-Bridge's training loop to save and stop when the process gets
``train.exit_signal`` (SIGTERM by default: Slurm's warning ``run.signal_before_s`` before the time limit,
preemption, ``scancel``). At the pinned ref (branch ``nemotron_3_ultra`` at 4588417) the loop polls
``GlobalState.signal_handler.signals_received()`` after every iteration (``training/train.py``,
``checkpoint_and_decide_exit``), and ``GlobalState`` builds that ``DistributedSignalHandler`` whenever its config is
set (``training/state.py``, ``_set_signal_handler``). But nothing in ``pretrain()`` or ``finetune()`` enters it: the
handler only installs its ``signal.signal`` hook in ``__enter__`` (``training/utils/sig_utils.py``), so the flag
never goes up and SIGTERM ends the process with the default action (measured on one H200: exit -15 and no save,
``docs/gpu_run.md``).

:class:`ExitSignal` closes the gap from our side, with upstream's own handler:

1. :meth:`ExitSignal.install_early`, before ``pretrain()`` / ``finetune()``: a hook that only remembers that the
   signal came while the model, the optimizer and the data are being set up (minutes on a cluster).
2. :meth:`ExitSignal.wrap` wraps the forward step. On every call it makes sure the handler that the loop will poll,
   ``state.signal_handler`` (the state is passed to the step), has been entered. A newly set config builds a new
   handler, so identity is checked, not a flag. If the signal came during set-up, it is raised again once the
   handler is in place, so the handler's own hook sets its flag and the loop saves after the first iteration.

Nothing here reads or sets a private attribute of Megatron-Bridge.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any


class ExitSignal:
    """The exit signal of one training process (``sig``: a ``signal.Signals``, e.g. ``signal.SIGTERM``).

    Attributes:
        pending: the signal arrived before a handler of Megatron-Bridge was entered (during set-up).
        entered: the ``DistributedSignalHandler`` entered last, or None.
    """

    def __init__(self, sig: int = signal.SIGTERM) -> None:
        self.sig = signal.Signals(sig)
        self.pending = False
        self.entered: Any = None

    def install_early(self) -> None:
        """Hook ``sig`` so that an early signal is remembered, not fatal (main thread only, as ``signal.signal``)."""
        signal.signal(self.sig, self._early)

    def _early(self, signum: int, frame: Any) -> None:
        self.pending = True
        print(f"received signal {signum} during set-up: the run saves after its first iteration", flush=True)

    def enter(self, state: Any) -> None:
        """Enter ``state.signal_handler`` (Megatron-Bridge's ``GlobalState``) unless it is the one entered last;
        then raise a signal that came during set-up again. Nothing when ``state.cfg.train.exit_signal_handler``
        is false."""
        if not state.cfg.train.exit_signal_handler:
            return
        handler = state.signal_handler
        if handler is self.entered:
            return
        handler.__enter__()
        self.entered = handler
        if self.pending:
            self.pending = False
            signal.raise_signal(self.sig)

    def wrap(self, forward_step: Callable) -> Callable:
        """``forward_step`` with :meth:`enter` before each call. The wrapper keeps Megatron-Bridge's signature
        ``(state, data_iterator, model, return_schedule_plan=False)``: its first parameter is named ``state``,
        which is how ``maybe_inject_state`` (``training/utils/train_utils.py``) decides to pass the state."""

        def step(state, data_iterator, model, return_schedule_plan: bool = False):
            self.enter(state)
            return forward_step(state, data_iterator, model, return_schedule_plan)

        return step
