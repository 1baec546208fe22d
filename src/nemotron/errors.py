"""Errors as values: every failure the user can cause or meet is one of these.

The CLI has a single handler (:func:`nemotron.cli.main`) that prints ``error: <message>`` and,
when present, ``hint: <hint>``, then exits with :attr:`NemotronError.exit_code`:

* 2 — usage, config and validation problems (nothing was submitted or written);
* 1 — runtime and submission failures;
* 130 — interrupted with Ctrl-C (handled by the CLI, not a class here).

A traceback is printed only with ``--debug``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` in the number it takes: ``plural(1, "node")`` is ``"1 node"``, ``plural(2, "node")``
    ``"2 nodes"``; ``many`` for an irregular plural (``plural(2, "process", "processes")``)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def closest(value: str, choices: Any) -> str | None:
    """The one of ``choices`` (strings) closest to ``value``: difflib's ``get_close_matches`` (cutoff 0.6), else one
    that differs from ``value`` by two swapped letters (``tyni`` for ``tiny``: difflib scores it 0.5); None when none is close."""
    import difflib

    names = [str(c) for c in choices]
    close = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
    if close:
        return close[0]
    for name in names:
        diff = [i for i, (a, b) in enumerate(zip(value, name)) if a != b] if len(name) == len(value) else []
        if len(diff) == 2 and value[diff[0]] == name[diff[1]] and value[diff[1]] == name[diff[0]]:
            return name
    return None


def did_you_mean(value: Any, choices: Any) -> str:
    """``"did you mean 'x'?"`` for the one of ``choices`` (strings) closest to ``value`` (:func:`closest`), or ``""``
    when none is close, ``value`` is not a string, or ``value`` is one of ``choices`` (a valid value refused for
    another reason: the message says why; "did you mean 'x'?" for the ``x`` typed would say nothing)."""
    if not isinstance(value, str):
        return ""
    close = closest(value, choices)
    return f"did you mean {close!r}?" if close and close != value else ""


class NemotronError(Exception):
    """Base class. ``message`` is one line; ``hint`` says what to do about it."""

    exit_code: int = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class UsageError(NemotronError):
    """Bad command line: unknown option, conflicting flags, malformed override."""

    exit_code = 2


class ConfigError(NemotronError):
    """A config file, override or env.toml profile is wrong (names the file, line or key)."""

    exit_code = 2


class RuntimeFailure(NemotronError):
    """Something failed while running or submitting (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class Problem:
    """One finding of validation, in the user's terms.

    ``key`` is the dotted config key (or ``profile.<name>.<key>``), ``value`` its value, ``message``
    why it is wrong, ``valid`` the valid values or range (free text), ``rule`` a short id of the rule
    that found it, and ``severity`` either ``"error"`` (blocks submission, exit 2) or ``"warning"``.
    """

    key: str
    value: Any
    message: str
    valid: str | None = None
    rule: str = ""
    severity: str = "error"

    def render(self) -> str:
        if self.key:
            shown = "null" if self.value is None else repr(self.value)
            text = f"{self.key}={shown}: {self.message}"
        else:
            text = self.message
        if self.valid:
            text += f"; valid: {self.valid}"
        return text


@dataclass
class ValidationError(NemotronError):
    """Validation found one or more errors; all of them are listed, not just the first."""

    problems: list[Problem] = field(default_factory=list)
    exit_code: int = 2
    #: what the count is said of: the run and the dry run refuse "before anything was queued"; the estimate, which
    #: queues nothing, says that the run would be refused
    found: str = "found before anything was queued"

    def __post_init__(self) -> None:
        errors = [p for p in self.problems if p.severity == "error"]
        NemotronError.__init__(
            self,
            f"{plural(len(errors), 'error')} {self.found}",  # errors only: a warning refuses nothing
            "fix the keys listed above (or override them: key=value) and run again with --dry-run",
        )



class StopRequested(KeyboardInterrupt):
    """SIGTERM reached a runtime that can resume (data prep: finished shards keep their receipts).

    A ``KeyboardInterrupt``: Ray's blocking calls in the driver pass an interrupt raised by a signal
    handler on unchanged (another exception type raised there comes out as a ``SystemError``), and every
    cleanup path that handles Ctrl-C handles this too. The entry (:func:`nemotron.runtime.dispatch.run`) turns it into
    exit 75, "stopped, run the same command again to resume" (the code the training runtimes use, and the
    one a Slurm job requeues on); :func:`stop_signal` tells it apart when Ray re-raises a plain interrupt.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


_STOP_SIGNAL: list[int] = []


def request_stop(signum: int, _frame: Any = None) -> None:
    """Signal handler: remember ``signum`` and raise :class:`StopRequested`."""
    _STOP_SIGNAL.append(signum)
    raise StopRequested(signum)


def stop_signal() -> int | None:
    """The signal :func:`request_stop` handled in this process, if any."""
    return _STOP_SIGNAL[0] if _STOP_SIGNAL else None


#: Environment variable naming a point where a stage holds still, for tests of an interrupt at that exact moment:
#: ``POINT=MARKER`` (e.g. ``ray-started=/tmp/held``). At ``POINT`` the stage writes the file ``MARKER`` and waits
#: (at most :data:`HOLD_MAX_S` seconds) for a signal, so a test signals it at that moment instead of racing the
#: machine's load with sleeps. Points: ``planning`` (data prep, after its first line, before reading any input),
#: ``ray-started`` (data prep, right after Ray started, while Ray's own crash handler would still hold SIGTERM) and
#: ``publishing`` (data prep, every shard finished, before its ``manifest.json`` is written).
HOLD_ENV = "NEMOTRON_TEST_HOLD"
#: Seconds :func:`hold_point` waits at most.
HOLD_MAX_S = 120.0


def hold_point(point: str) -> None:
    """Hold at ``point`` when :data:`HOLD_ENV` names it: write its marker file, then sleep until a signal handler
    raises (or :data:`HOLD_MAX_S` seconds pass). Does nothing otherwise."""
    import os
    import time

    name, _, marker = os.environ.get(HOLD_ENV, "").partition("=")
    if name != point or not marker:
        return
    with open(marker, "w", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + HOLD_MAX_S
    while time.monotonic() < deadline:
        time.sleep(0.05)


#: Set by the CLI for a stage it runs as its child (same process group, so both get the Ctrl-C): the CLI
#: then prints the one ``interrupted`` line, the child stays quiet.
INTERRUPT_REPORTED_BY_PARENT = "NEMOTRON_INTERRUPT_REPORTED_BY_PARENT"


#: File in the run folder (``$NEMOTRON_RUN_DIR``) where a stage stopped by a signal says in one line what it kept
#: (``interrupted before any shard was finished; ...``); the CLI's ``interrupted:`` line uses it, else says that the
#: stage saved its state.
INTERRUPT_NOTE = "interrupted.txt"


#: Exit code of a run stopped by Ctrl-C (128 + SIGINT, the shell's convention).
EXIT_INTERRUPTED = 130


#: Exit code of a stage that saved a checkpoint and stopped on a signal (SIGTERM, SIGUSR1 before the
#: Slurm time limit): not a failure, the next run resumes (the BSD EX_TEMPFAIL value).
RESUMABLE = 75
