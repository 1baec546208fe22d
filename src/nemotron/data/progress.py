"""Progress reporting and summary tables for the data stages.

On a terminal the progress is a live ``rich`` bar. When the output is a pipe or a log file (the CLI
streaming a job, a Slurm log) a live bar would fill the log with carriage returns, so instead one plain
line is printed at most every ``interval_s`` seconds (and at the end).
"""

from __future__ import annotations

import sys
import time
from typing import Any


def human(n: float, unit: str = "") -> str:
    """``1234567`` → ``"1.23M"`` (k/M/G/T, three significant digits)."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}{unit}"
    return f"{n:.3g}{unit}" if isinstance(n, float) and not float(n).is_integer() else f"{int(n)}{unit}"


def fmt_counts(c: dict[str, int]) -> str:
    """``{"empty": 2, "too_long": 0, "bad_json": 1}`` → ``"bad_json 1, empty 2"`` (zeros left out)."""
    return ", ".join(f"{k} {v:,}" for k, v in sorted(c.items()) if v)


def in_batch_job() -> bool:
    """True inside a Slurm batch job: its output goes to a log file even when srun hands the task a
    pseudo-terminal (NeMo-Run's unbuffered srun does), so live bars and colours stay off."""
    import os

    return "SLURM_JOB_ID" in os.environ and "SLURM_PTY_PORT" not in os.environ


def console(stderr: bool = False):
    """A rich console (soft-wrapped, no colour when not a terminal or inside a Slurm batch job). Text is printed as
    written, never read as rich markup: the summaries quote paths and skipped records, whose ``[...]`` (a
    ``[/INST]`` in a record, a hint's ``'nemotron-cli[local]'``) markup would drop or fail on."""
    import os

    from rich.console import Console

    con = Console(stderr=stderr, soft_wrap=True, highlight=False, markup=False,
                  force_terminal=False if in_batch_job() else None, no_color=in_batch_job() or None)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con = Console(stderr=stderr, soft_wrap=True, highlight=False, markup=False, width=160)
    return con


class Progress:
    """Counts work done against a total and shows it.

    Args:
        total: expected units of work (for data prep: estimated input bytes).
        description: label.
        interval_s: seconds between plain progress lines when not on a terminal.
        live: force the live bar on (True) or off (False); default: on when stdout is a terminal.
        item: what ``docs`` counts, as shown (``"docs"``, ``"prompts"``).
        count_tokens: show tokens and tokens/s; False for work that writes no tokens (RL prompts), which
            shows items/s instead.
    """

    def __init__(self, total: float, description: str, interval_s: float = 10.0, live: bool | None = None,
                 item: str = "docs", count_tokens: bool = True) -> None:
        self.total = max(float(total), 1.0)
        self.done = 0.0
        self.tokens = 0
        self.docs = 0
        self.description = description
        self.item = item
        self.count_tokens = count_tokens
        self.interval_s = interval_s
        self.live = (sys.stdout.isatty() and not in_batch_job()) if live is None else live
        self._t0 = time.monotonic()
        self._last = 0.0
        self._printed: tuple[float, int, int] | None = None  # (done, tokens, docs) of the last plain line
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.live:
            from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total, stats="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._refresh(force=True)
            self._bar.__exit__(*exc)
        elif exc[0] is None:
            self._refresh(force=True)

    def advance(self, units: float = 0.0, tokens: int = 0, docs: int = 0) -> None:
        """Add finished work (units towards the total, tokens and documents written)."""
        self.done = min(self.done + units, self.total)
        self.tokens += tokens
        self.docs += docs
        self._refresh()

    def set_done(self, units: float) -> None:
        """Set the finished units directly (never backwards)."""
        self.done = max(self.done, min(units, self.total))
        self._refresh()

    def _stats(self) -> str:
        dt = max(time.monotonic() - self._t0, 1e-9)
        if not self.count_tokens:
            return f"{human(self.docs)} {self.item}  {human(self.docs / dt)} {self.item}/s"
        return f"{human(self.docs)} {self.item}  {human(self.tokens)} tokens  {human(self.tokens / dt)} tok/s"

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, stats=self._stats())
            return
        state = (self.done, self.tokens, self.docs)
        if force and state == self._printed:
            return  # the last line already says this (the final advance printed it): never print it twice
        if force or now - self._last >= self.interval_s:
            self._last = now
            self._printed = state
            pct = 100.0 * self.done / self.total
            print(f"[{self.description}] {pct:5.1f}%  {self._stats()}  {now - self._t0:.0f}s", flush=True)


def print_table(title: str, columns: list[str], rows: list[list[Any]], *, footer: list[Any] | None = None,
                justify_right_from: int = 1, lists: tuple[str, ...] = ("skipped (reason)",)) -> None:
    """Print a table with rich (plain box characters when not on a terminal).

    ``lists``: the columns whose cells are comma lists (``bad_record 1, empty_content 1``). When the table is wider
    than the console, rich would wrap or cut such a cell, and its first line reads as the whole list; each one of
    more than one item then shows its first and ``+N more``, and the lists in full follow the table, one line per
    row (``skipped (reason) of sft_odd: bad_record 1, empty_content 1``), so no item is lost at any width."""
    from rich import box
    from rich.measure import Measurement
    from rich.table import Table

    con = console()

    def build(cells: list[list[str]]) -> Table:
        table = Table(title=title, box=box.SIMPLE_HEAD if con.is_terminal else box.ASCII2,
                      show_footer=footer is not None)
        for i, col in enumerate(columns):
            table.add_column(col, justify="right" if i >= justify_right_from else "left",
                             footer=str(footer[i]) if footer is not None else "")
        for row in cells:
            table.add_row(*row)
        return table

    cells = [[str(c) for c in row] for row in rows]
    table = build(cells)
    at = [i for i, col in enumerate(columns) if col in lists]
    full: list[str] = []
    if at and Measurement.get(con, con.options.update_width(1 << 20), table).maximum > con.width:
        short = []
        for row in cells:
            row = list(row)
            for i in at:
                items = row[i].split(", ")
                if len(items) > 1:
                    full.append(f"{columns[i]} of {row[0]}: {row[i]}")
                    row[i] = f"{items[0]} +{len(items) - 1} more"
            short.append(row)
        table = build(short)
    con.print(table)
    for line in full:
        con.print(line)
