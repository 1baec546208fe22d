"""The ``--dry-run`` report."""

from __future__ import annotations

from typing import Any

from nemotron import validation
from nemotron.config import yamlio
from nemotron.config.compile import annotated_yaml
from nemotron.errors import NemotronError, Problem, plural
from nemotron.launch import backends
from nemotron.profiles.profile import ExecutorProfile
from nemotron.profiles.schema import redact_text
from nemotron.report import heading, out, problem_line, readable, table
from nemotron.validation.refusal import also_refused, unresolved_refusal


#: Rules that refuse every backend but ``local`` for a stage (:func:`nemotron.layout.rules.mtp_boost_framework`): in a
#: ``pipe`` (one ``-c`` for all stages) the verdict says to run that stage on its own with ``-c local`` instead.
LOCAL_ONLY_RULES = frozenset({"mtp-boost-framework"})


def dry_run(req: Any, compiled: Any, profile: ExecutorProfile | None, plan: Any, found: list[Problem], notes: list[str],
            part: str | None = None, quiet: bool = False) -> None:
    """The ``--dry-run`` report: (1) the compiled config with the layer that set each value and the
    profile values used, (2) the resource plan, validation tables and notes, (3) the exact job — the
    sbatch script rendered by NeMo-Run for a Slurm profile, the command line otherwise — then every
    problem found. ``part`` (a pipe's ``stage 1/2``): the closing verdict is said of that stage only, not of the
    command (the pipe says its own after the last stage).

    The verdict (:func:`verdict`) comes first, before the details, and again last when the config is valid;
    ``quiet``: the verdict and the errors only."""

    line = verdict(req, compiled, found, part)
    out(readable(line), plain=True)  # first: the verdict (the `[nemotron] input` lines came before it, on stderr)
    if quiet:  # the verdict alone, and the errors it counts
        for p in found:
            if p.severity == "error":
                out(problem_line(p), plain=True)
        return
    secrets = profile.secret_values().values() if profile is not None else ()
    where = f"profile {plan.profile} ({plan.executor})" if plan.profile else "this machine (no profile)"
    heading(f"{req.stage.title} · config {compiled.config_name} · {where}")
    out(f"layers (lowest first): {' < '.join(compiled.layers)}", plain=True)
    out(annotated_yaml(compiled), plain=True)
    if profile is not None:
        heading(f"profile {profile.name}: values this job uses")
        used = _profile_values(profile)
        overridden = profile.overridden
        rows = [[k, v, "override" if k in overridden else " -> ".join(profile.chain)]
                for k, v in used.items()]
        table(None, ["key", "value", "set by"], rows)
    heading("resources")
    table(None, ["nodes", "GPUs/node", "world size", "launch", "executor", "image"],
          [[plan.nodes, plan.gpus_per_node, plan.world_size, plan.launch, plan.executor, plan.image or "none (host Python)"]])
    for title, header, rows in validation.describe(req.stage, compiled.config, profile):
        table(title, header, rows)
    if req.stage.family.estimate and not any(p.severity == "error" for p in found):
        from nemotron.cli.costs import estimate_section

        rows = estimate_section(req.stage, compiled, profile, plan)
        if rows:
            table("estimate (nemotron ... estimate; docs/estimate.md)", ["what", "value", "how"], rows)
    for note in notes:
        out(f"note: {note}", plain=True)
    heading("job")

    try:
        text = backends.render(req, compiled, profile, plan)
    except NemotronError as exc:  # a problem validation listed below (e.g. a warning signal past the time limit)
        if not any(p.severity == "error" for p in found):
            raise
        text = f"# not rendered: {exc.message}"
    if secrets:

        text = redact_text(text, secrets)
    out(text, plain=True)
    if found:
        heading("problems")
        for p in sorted(found, key=lambda p: p.severity != "warning"):
            out(problem_line(p), plain=True)
    if not any(p.severity == "error" for p in found):  # last as well: what a terminal shows after a long report
        out(readable(line), plain=True)  # (errors: the run's own `error: N errors found` line ends it, on stderr)


def verdict(req: Any, compiled: Any, found: list[Problem], part: str | None = None) -> str:
    """The dry run's verdict, one line (before :func:`nemotron.report.readable` breaks it): ``dry run: valid (N
    warnings); nothing was submitted``; valid but refused by the run's own check
    (:func:`nemotron.validation.refusal.unresolved_refusal`: ``..., but the run would refuse to start: WHY; HINT``,
    and with several unresolved keys one line more for each, ``  key: why``);
    or ``dry run: N errors, M warnings: the run would refuse to start; nothing was submitted`` (the errors refuse the
    run, the warnings do not), with the unresolved values too where there are some
    (:func:`nemotron.validation.refusal.also_refused`: ``...; it would also refuse HEAD: KEY: WHY; HINT``). ``part`` (a
    pipe's ``stage 1/2``): said of that stage only; a stage refused by a rule of :data:`LOCAL_ONLY_RULES` gets the
    way out a pipe user can take (drop it from the pipe, run it after with ``-c local``)."""
    n_err = sum(p.severity == "error" for p in found)
    warnings = plural(len(found) - n_err, "warning")
    refusal = unresolved_refusal(compiled)
    if n_err:
        what = f"{part} ({req.stage.title}): " if part else ""
        local_only = part and compiled.config_name != "local" and any(
            p.severity == "error" and p.rule in LOCAL_ONLY_RULES for p in found)
        way = (f"; {req.stage.name} runs only with -c local (one machine), which this pipe's one -c for every stage "
               f"cannot give it: drop {req.stage.name} from this pipe and run `nemotron {req.stage.recipe} "
               f"{' '.join(req.stage.command)} -c local` after it, on a machine that can read what the pipe made"
               ) if local_only else ""
        also = f"; {also_refused(refusal, 'each on a line below')}" if refusal is not None else ""  # all at once
        below = "".join(f"\n  {line}" for line in refusal.lines) if refusal is not None and len(refusal.lines) > 1 \
            else ""
        return (f"dry run: {what}{plural(n_err, 'error')}, {warnings}: the run would refuse to start{way}{also}; "
                "nothing was submitted" + below)
    if refusal is not None:  # the run's own refusal (nemotron.cli.pipeline._check_startable), said as such
        what = f"{part} ({req.stage.title}): its config is valid" if part else "the config is valid"
        one = len(refusal.lines) == 1
        why = f"{refusal.head}: {refusal.lines[0]}" if one else f"{refusal.head} (each on a line below)"
        return (f"dry run: {what} ({warnings}), but the run would refuse to start: {why}; {refusal.hint}; "
                "nothing was submitted" + ("" if one else "".join(f"\n  {line}" for line in refusal.lines)))
    if part:
        return f"dry run: {part} ({req.stage.title}) is valid ({warnings})"
    return f"dry run: valid ({warnings}); nothing was submitted"


_PROFILE_KEYS = ("executor", "account", "partition", "run_partition", "batch_partition", "qos", "reservation", "time",
                 "exclusive", "gpus_per_node", "gpu", "gpu_arch", "gpu_memory", "host_memory", "cpus_per_node", "mem",
                 "container",
                 "mounts", "tunnel", "host", "user", "job_dir", "address")


def _profile_values(profile: ExecutorProfile) -> dict[str, str]:

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
