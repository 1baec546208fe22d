""":class:`nemotron.runtime.megatron.exit_signal.ExitSignal` with real signals sent to this process: a signal during
set-up is remembered (not fatal) and raised again once the training loop's handler is entered; each handler is entered
once.

The handler here has the one behaviour ExitSignal relies on: like Megatron-Bridge's ``DistributedSignalHandler``, it
hooks its signal in ``__enter__`` and records it. The real handler inside Megatron-Bridge's training state is
exercised by ``tests/contract/test_megatron_bridge.py`` (the contract interpreter)."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest

from nemotron.runtime.megatron.exit_signal import ExitSignal

SIG = signal.SIGUSR2


class _Handler:
    def __init__(self) -> None:
        self.entered = 0
        self.received: list[int] = []

    def __enter__(self) -> _Handler:
        self.entered += 1
        signal.signal(SIG, lambda signum, frame: self.received.append(signum))
        return self


@pytest.fixture
def restore_signal():
    before = signal.getsignal(SIG)
    yield
    signal.signal(SIG, before)


def _state(handler: _Handler, enabled: bool = True) -> SimpleNamespace:
    return SimpleNamespace(cfg=SimpleNamespace(train=SimpleNamespace(exit_signal_handler=enabled)),
                           signal_handler=handler)


def test_signal_during_set_up_is_raised_again_once_the_handler_is_entered(restore_signal, capsys) -> None:
    exit_signal = ExitSignal(SIG)
    exit_signal.install_early()
    os.kill(os.getpid(), SIG)  # during set-up: remembered, the process goes on
    assert exit_signal.pending
    assert f"received signal {int(SIG)} during set-up" in capsys.readouterr().out
    calls = []
    step = exit_signal.wrap(lambda state, data, model, plan=False: calls.append((data, model, plan)) or "loss")
    first = _state(_Handler())
    assert step(first, "data", "model") == "loss" and calls == [("data", "model", False)]
    assert first.signal_handler.entered == 1 and first.signal_handler.received == [SIG]  # raised again, caught
    assert not exit_signal.pending
    step(first, "data", "model", True)
    assert first.signal_handler.entered == 1 and calls[-1] == ("data", "model", True)  # entered once per handler
    second = _state(_Handler())  # a newly set config builds a new handler: it is entered too
    step(second, "data", "model")
    assert second.signal_handler.entered == 1 and second.signal_handler.received == []


def test_nothing_is_entered_when_the_config_turns_the_handler_off(restore_signal) -> None:
    exit_signal = ExitSignal(SIG)
    off = _state(_Handler(), enabled=False)
    exit_signal.wrap(lambda *a: None)(off, None, None)
    assert off.signal_handler.entered == 0 and exit_signal.entered is None
