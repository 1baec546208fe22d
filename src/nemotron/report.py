"""Terminal output: the ``--dry-run`` report, tables and problem lists (rich, imported lazily).

Output goes to standard output without colour when it is not a terminal, at a fixed width of 120
columns, so it can be diffed and kept as golden files.
"""

from __future__ import annotations

from typing import Any

from nemotron.errors import NemotronError, Problem


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


def dry_run(req: Any, compiled: Any, profile: Any, plan: Any, found: list[Problem], notes: list[str]) -> None:
    """The ``--dry-run`` report: (1) the compiled config with the layer that set each value and the
    profile values used, (2) the resource plan, validation tables and notes, (3) the exact job — the
    sbatch script rendered by NeMo-Run for a Slurm profile, the command line otherwise — then every
    problem found."""
    from nemotron import validation
    from nemotron.config import annotated_yaml

    secrets = profile.secret_values().values() if profile is not None else ()
    where = f"profile {plan.profile} ({plan.executor})" if plan.profile else "this machine (no profile)"
    heading(f"{req.stage.title} · config {compiled.config_name} · {where}")
    out(f"layers (lowest first): {' < '.join(compiled.layers)}", plain=True)
    out(annotated_yaml(compiled), plain=True)
    if profile is not None:
        heading(f"profile {profile.name}: values this job uses")
        used = _profile_values(profile)
        overridden = getattr(profile, "overridden", set())
        rows = [[k, v, "override" if k in overridden else " -> ".join(getattr(profile, "chain", [profile.name]))]
                for k, v in used.items()]
        table(None, ["key", "value", "set by"], rows)
    heading("resources")
    table(None, ["nodes", "GPUs/node", "world size", "launch", "executor", "image"],
          [[plan.nodes, plan.gpus_per_node, plan.world_size, plan.launch, plan.executor, plan.image or "none (host Python)"]])
    for title, header, rows in validation.describe(req.stage, compiled.config, profile):
        table(title, header, rows)
    for note in notes:
        out(f"note: {note}", plain=True)
    heading("job")
    from nemotron import execute

    try:
        text = execute.render(req, compiled, profile, plan)
    except NemotronError as exc:  # a problem validation listed below (e.g. a warning signal past the time limit)
        if not any(p.severity == "error" for p in found):
            raise
        text = f"# not rendered: {exc.message}"
    if secrets:
        from nemotron.profiles import redact_text

        text = redact_text(text, secrets)
    out(text, plain=True)
    if found:
        heading("problems")
        for p in sorted(found, key=lambda p: p.severity != "warning"):
            out(f"{p.severity}: {p.render()}", plain=True)
    n_err = sum(p.severity == "error" for p in found)
    if not n_err:
        from nemotron.errors import plural
        from nemotron.pipeline import unresolved_refusal

        refusal = unresolved_refusal(compiled)
        if refusal is not None:  # the run's own refusal (nemotron.pipeline._check_startable), said as such
            out(f"dry run: the config is valid ({plural(len(found), 'warning')}), but the run would refuse to start: "
                f"{refusal.message.removeprefix('refusing to start ')}; {refusal.hint}; nothing was submitted",
                plain=True)
        else:
            out(f"dry run: valid ({plural(len(found), 'warning')}); nothing was submitted", plain=True)


_PROFILE_KEYS = ("executor", "account", "partition", "run_partition", "batch_partition", "qos", "reservation", "time",
                 "exclusive", "gpus_per_node", "gpu", "gpu_arch", "gpu_memory", "cpus_per_node", "mem", "container",
                 "mounts", "tunnel", "host", "user", "job_dir", "address")


def _profile_values(profile: Any) -> dict[str, str]:
    from nemotron import yamlio

    data = profile.redacted()
    flat: dict[str, Any] = {}
    for k in _PROFILE_KEYS:
        v = data.get(k)
        if isinstance(v, dict):
            for sk, sv in v.items():
                if sv not in (None, [], {}):
                    flat[f"{k}.{sk}"] = sv
        elif v not in (None, [], {}):
            flat[k] = v
    return {k: v if isinstance(v, str) else yamlio.flow(v) for k, v in flat.items()}
