"""Terminal output: the ``--dry-run`` report, tables and problem lists (rich, imported lazily).

Output goes to standard output without colour when it is not a terminal, at a fixed width of 120
columns, so it can be diffed and kept as golden files.
"""

from __future__ import annotations

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
    """A section heading."""
    from rich.rule import Rule

    console().print(Rule(text, align="left", characters="─"))


def table(title: str | None, header: list[str], rows: list[list[Any]]) -> None:
    """A simple table."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              show_header=any(str(h).strip() for h in header))
    for h in header:
        t.add_column(h, overflow="fold")
    for r in rows:
        t.add_row(*[str(c) for c in r])
    console().print(t)


def problems(items: list[Problem]) -> None:
    """Warnings then errors, one line each, on stderr."""
    for p in sorted(items, key=lambda p: p.severity != "warning"):
        err(f"{p.severity}: {p.render()}")


