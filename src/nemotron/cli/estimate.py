"""``nemotron ultra3 STAGE -c NAME estimate`` and the JSON form of ``--dry-run``.

Both start from :func:`nemotron.cli.pipeline.prepare_stage` (the same compile, validation and plan as the run), so
the estimate describes exactly the job the run would submit. The arithmetic is :mod:`nemotron.layout.estimate`.

Exit codes: 0; 2 when validation finds errors (``--dry-run --json``: or the run would refuse to start, its
``refusal``), or when one checkpoint cannot fit the free space of the checkpoint
root (the run is refused for the same reason: :func:`checkpoint_problem` is one of the run's checks); 2 for a stage
the estimate does not model (data prep, RL, convert, quantize).
"""

from __future__ import annotations

from typing import Any

from nemotron.cli.costs import checkpoint_check, checkpoint_problem, estimate_document, run_estimate
from nemotron.errors import UsageError, ValidationError


def dry_run_document(p: Any) -> dict[str, Any]:
    """``--dry-run --json``: what the text report shows, as data."""
    from nemotron import validation
    from nemotron.cli import jsonout
    from nemotron.cli.dryrun import _profile_values
    from nemotron.errors import NemotronError
    from nemotron.launch import backends
    from nemotron.profiles.schema import redact_text
    from nemotron.validation.refusal import unresolved_refusal

    req, compiled, profile, plan = p.req, p.compiled, p.profile, p.plan
    secrets = list(profile.secret_values().values()) if profile is not None else []
    try:
        job = backends.render(req, compiled, profile, plan)
    except NemotronError as exc:
        if not p.errors:
            raise
        job = f"# not rendered: {exc.message}"
    if secrets:
        job = redact_text(job, secrets)
    refusal = unresolved_refusal(compiled) if not p.errors else None
    estimate = None
    if req.stage.family.estimate and not p.errors:
        try:
            estimate = estimate_document(run_estimate(req.stage, compiled, profile, plan), req, compiled, plan)
        except UsageError as exc:
            estimate = {"unavailable": exc.message}
    config = compiled.config
    if secrets:
        import json

        config = json.loads(redact_text(json.dumps(jsonout.plain(config)), secrets))
    return {
        "stage": req.stage.name, "title": req.stage.title, "config": compiled.config_name,
        "profile": plan.profile, "executor": plan.executor, "layers": list(compiled.layers),
        "resolved": config, "provenance": dict(compiled.provenance),
        "profile_values": _profile_values(profile) if profile is not None else {},
        "resources": {"nodes": plan.nodes, "gpus_per_node": plan.gpus_per_node, "world_size": plan.world_size,
                      "launch": plan.launch, "executor": plan.executor, "image": plan.image},
        "tables": [jsonout.table(t, h, r) for t, h, r in validation.describe(req.stage, compiled.config, profile)],
        "notes": list(p.notes), "job": job, "estimate": estimate,
        "problems": [jsonout.problem(q) for q in p.problems],
        "valid": not p.errors, "refusal": None if refusal is None else f"{refusal.message}; {refusal.hint}",
    }


def run_report(req: Any) -> int:
    """``STAGE [-c NAME] estimate [--json]`` and ``STAGE --dry-run --json``. Returns the exit code.

    Raises:
        ValidationError: validation errors, or a checkpoint that cannot fit (exit 2) — after printing the report.
    """
    from nemotron import report
    from nemotron.cli import jsonout
    from nemotron.cli.pipeline import prepare_stage

    # `--run P estimate` / `--batch P estimate` estimate the run on P; nothing is submitted
    with jsonout.quiet_stdout() if req.json else _nothing():
        p = prepare_stage(req)
        if req.dry_run and not req.estimate:
            doc = dry_run_document(p)
            jsonout.emit("dry-run", doc)
            from nemotron.cli.pipeline import _check_startable

            _check_startable(p, reported=True)  # the run's refusals, exit 2 (the document's "refusal" says why)
            return 0
        # the estimate is printed whatever validation found (it says what the run would cost); the exit code is
        # still the run's: 2 when the run would be refused, for a checkpoint that cannot fit among the rest
        report.problems(p.problems)
        result = run_estimate(req.stage, p.compiled, p.profile, p.plan, measure_cpu=True)
        if req.json:
            doc = estimate_document(result, req, p.compiled, p.plan)
            doc["problems"] = [jsonout.problem(q) for q in p.problems]
            jsonout.emit("estimate", doc)
        else:
            report.heading(f"{req.stage.title} · config {p.compiled.config_name} · estimate")
            report.table(None, ["what", "value", "how"], result.rows())
        if p.errors:  # the checkpoint-space refusal is one of them (pipeline.prepare_stage)
            raise ValidationError(problems=p.problems, found="found: the run would be refused")
    return 0


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


__all__ = ["checkpoint_check", "checkpoint_problem", "dry_run_document", "run_estimate", "run_report"]
