"""Terminal output: the ``--dry-run`` report, tables and problem lists (rich, imported lazily).

Output goes to standard output without colour when it is not a terminal, at a fixed width of 120
columns, so it can be diffed and kept as golden files.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from nemotron.errors import Problem


def console(stderr: bool = False) -> Any:
    """A rich console on the current stdout (or stderr); made per call so that redirected streams
    are honoured."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    # not a terminal: 120 columns, unless COLUMNS says otherwise (as nemotron.data.progress.console)
    return Console(file=stream, width=None if tty or "COLUMNS" in os.environ else 120, no_color=not tty, highlight=False,
                   soft_wrap=not tty, emoji=False)


def out(renderable: Any, plain: bool = False) -> None:
    """Print a rich renderable or a plain string (``plain``: no markup interpretation)."""
    console().print(renderable, markup=not plain, highlight=False)


def err(text: str) -> None:
    """One line on stderr, no markup."""
    console(True).print(text, markup=False, highlight=False)


def heading(text: str) -> None:
    """A section heading; ``text`` is shown as written (no markup: a ``[inspect]`` or ``[[7 9]]`` stays)."""
    from rich.rule import Rule
    from rich.text import Text

    console().print(Rule(Text(text), align="left", characters="─"))


def table(title: str | None, header: list[str], rows: list[list[Any]], whole: tuple[int, ...] = (),
          clip_left: int | None = None) -> None:
    """A simple table. The columns numbered in ``whole`` (0-based) are never wrapped, whatever the width (a job id
    or a state that is copied into the next command); column ``clip_left``, when given (a path), is cut at its start
    to the room the other columns leave (``...`` + its end, at least 10 characters); other columns fold. A width
    too narrow for the ``whole`` columns gives one ``header: value`` line per cell instead (nothing dropped). Title,
    header and cells are shown as written, never read as rich markup: a hint such as ``pip install
    'nemotron-cli[inspect]'`` or a path with ``[...]`` in it keeps its brackets. (A caller that wants markup builds its
    own rich table, as :mod:`nemotron.profiles.show` does.)"""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    widths = [max([len(str(h)), *(len(str(r[i])) for r in rows)]) for i, h in enumerate(header)]
    width = console().width
    needed = sum(widths[i] for i in whole) + 8 * (len(header) - len(whole)) + 3 * (len(header) - 1)
    if whole and rows and needed > width:
        # too narrow for the whole columns and a few characters of each other one (rich would drop columns):
        # one ``header: value`` line per cell, a blank line between rows
        if title:
            out(title, plain=True)
        pad = max(len(str(h)) for h in header) + 1
        out("\n\n".join("\n".join(f"{str(h) + ':':<{pad}} {c}" for h, c in zip(header, r)) for r in rows), plain=True)
        return
    if clip_left is not None and rows:
        room = max(10, width - sum(w for i, w in enumerate(widths) if i != clip_left) - 3 * (len(header) - 1))
        rows = [[("..." + str(c)[-(room - 3):] if i == clip_left and len(str(c)) > room else c)
                 for i, c in enumerate(r)] for r in rows]
    t = Table(title=None if title is None else Text(title), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              show_header=any(str(h).strip() for h in header))
    for i, h in enumerate(header):
        if i in whole:
            widest = max([len(str(h)), *(len(str(r[i])) for r in rows)])
            t.add_column(Text(str(h)), no_wrap=True, min_width=widest)
        else:
            t.add_column(Text(str(h)), overflow="fold")
    for r in rows:
        t.add_row(*[Text(str(c)) for c in r])
    console().print(t)


#: A message line longer than this many characters is broken at its clauses (:func:`readable`); a shorter one stays
#: whole, so that it can be searched for as one line (the report's fixed width is 120 columns; a terminal wraps a line
#: of up to two of its widths readably by itself).
LINE_LIMIT = 200


def wrapping() -> bool:
    """Whether :func:`readable` breaks long lines: for a person at a terminal (standard output and standard error
    both terminals), not for logs, pipes and scripts, which keep one message per line to search it whole.
    ``NEMOTRON_WRAP=1`` / ``0`` decides instead."""
    forced = os.environ.get("NEMOTRON_WRAP")
    if forced in ("0", "1"):
        return forced == "1"
    return sys.stdout.isatty() and sys.stderr.isatty()


def readable(text: str, limit: int = LINE_LIMIT) -> str:
    """``text`` (one message line; several: each one alone) as lines a terminal shows whole: unchanged when it is at
    most ``limit``
    characters, or when nobody reads it at a terminal (:func:`wrapping`); else broken after each ``"; "`` (a clause: the message, ``valid: ...``, a hint, each alternative),
    every line after the first indented by 4 spaces, and a clause still longer than ``limit`` wrapped at spaces
    (never inside a word, so a key, value, path or command stays whole and searchable). Nothing is dropped: joining
    the lines with single spaces gives back ``text`` but for the breaks.

    Returns: str, lines joined with ``\n``.
    """
    import textwrap

    if "\n" in text:  # a message of several lines (one unresolved key each): each line made readable
        return "\n".join(readable(line, limit) for line in text.split("\n"))
    if len(text) <= limit or not wrapping():
        return text
    clauses = text.split("; ")
    lines: list[str] = []
    for i, clause in enumerate(clauses):
        piece = clause + (";" if i < len(clauses) - 1 else "")
        indent = "" if i == 0 else "    "
        lines += textwrap.wrap(piece, width=120, initial_indent=indent, subsequent_indent="    ",
                               break_long_words=False, break_on_hyphens=False) or [indent]
    return "\n".join(lines)


def problem_line(p: Problem) -> str:
    """``severity: key=value: message; valid: ...`` made :func:`readable`, as the run and the dry run print it."""
    return readable(f"{p.severity}: {p.render()}")


def problems(items: list[Problem]) -> None:
    """Warnings then errors, each :func:`problem_line` (a long one broken at its clauses), on stderr."""
    for p in sorted(items, key=lambda p: p.severity != "warning"):
        err(problem_line(p))


