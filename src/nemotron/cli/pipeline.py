"""The one command path every stage goes through.

::

    parse argv → compile config (layers + provenance) → validate (all problems at once)
              → plan job (pure) → --dry-run: render | else: run here or submit → track artifacts

:func:`run_stage` is that flow, kept in one function. Heavy frameworks (NeMo-Run, Ray, torch) are
imported only by :mod:`nemotron.launch.submit` and the stages' runtime entry scripts.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

from nemotron import report, validation
from nemotron.cli import dryrun
from nemotron.config import artifacts
from nemotron.config.compile import compile_config, config_artifacts, missing_input_paths, profile_overrides
from nemotron.config.paths import config_names
from nemotron.config.registry import STAGES, Stage, get_stage
from nemotron.config.tree import get, leaves
from nemotron.errors import ConfigError, NemotronError, Problem, RuntimeFailure, UsageError, ValidationError, plural
from nemotron.launch import backends, jobs, submit
from nemotron.launch.plan import plan_job, planned_outputs
from nemotron.profiles import load as profiles
from nemotron.profiles import show
from nemotron.profiles.load import load_profile
from nemotron.profiles.profile import ExecutorProfile, storage_site
from nemotron.profiles.schema import SlurmSettings, queues_dependent_jobs
from nemotron.profiles.sections import tracking_provenance
from nemotron.validation.cluster import check as cluster_checks
from nemotron.validation.refusal import also_refused, missing_inputs, unresolved_refusal


@dataclass(frozen=True)
class StageRequest:
    """One invocation of a stage command, as parsed from the command line.

    ``mode`` is ``"here"`` (no profile: run on this machine), ``"run"`` (attached) or ``"batch"``
    (detached); ``profile`` the env.toml profile for ``run``/``batch``.
    """

    stage: Stage
    config: str | None
    overrides: tuple[str, ...]
    mode: str
    profile: str | None
    dry_run: bool
    env_file: str | None
    argv: tuple[str, ...] = field(default_factory=tuple)
    json: bool = False  # --json: one JSON document on stdout (nemotron.cli.jsonout)
    estimate: bool = False  # the word `estimate` after the options: nemotron.cli.estimate
    latest: bool = False  # --latest: its output is the latest even outside the default output folders (promoted)
    quiet: bool = False  # --quiet (with --dry-run): the verdict and the errors only

    @classmethod
    def from_cli(cls, stage: Stage, kw: dict[str, Any]) -> StageRequest:
        """Build from the command's keyword arguments (Typer's parsed options).

        Raises:
            UsageError: ``--run`` and ``--batch`` together; ``--quiet`` without ``--dry-run`` or with ``--json``.
        """
        run, batch = kw.get("run_profile"), kw.get("batch_profile")
        if run and batch:
            raise UsageError("--run and --batch are mutually exclusive", "--run waits for the job; --batch submits and returns")
        mode = "run" if run else "batch" if batch else "here"
        check_quiet(kw)
        overrides = tuple(kw.get("overrides") or ())
        estimate = "estimate" in overrides  # a word, not an override (those have `=` or start with + or ~)
        return cls(stage=stage, config=kw.get("config"), overrides=tuple(o for o in overrides if o != "estimate"),
                   mode=mode, profile=run or batch, dry_run=bool(kw.get("dry_run")), env_file=kw.get("env_file"),
                   argv=tuple(sys.argv), json=bool(kw.get("json")), estimate=estimate, latest=bool(kw.get("latest")),
                   quiet=bool(kw.get("quiet")))


def check_quiet(kw: dict[str, Any]) -> None:
    """``--quiet`` shortens the dry-run report to its verdict (and errors).

    Raises:
        UsageError: ``--quiet`` without ``--dry-run`` (a run's output is the job's), or with ``--json`` (one document
            either way).
    """
    if not kw.get("quiet"):
        return
    if not kw.get("dry_run"):
        raise UsageError("--quiet is for --dry-run: it prints the dry run's verdict alone",
                         "add --dry-run, or leave --quiet out")
    if kw.get("json"):
        raise UsageError("--quiet and --json together: --json prints one document either way", "leave --quiet out")


@dataclass
class Prepared:
    """A stage compiled, validated and planned: everything but running it."""

    req: StageRequest
    compiled: Any
    profile: ExecutorProfile | None
    plan: Any
    problems: list[Problem]
    notes: list[str]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


def prepare_stage(req: StageRequest, experiment_id: str | None = None) -> Prepared:
    """Steps 1-3 of the flow: compile (layers + provenance), validate (all problems), plan (pure).

    Raises:
        ConfigError / UsageError: config or command-line mistakes (exit 2).
    """

    artifacts.home()  # a NEMOTRON_HOME that is a file: said first, not through the artifact it breaks
    # 1. compile: layers, overrides, interpolation (with the profile's storage roots), provenance
    profile = load_profile(req.profile, req.env_file, profile_overrides(list(req.overrides)))
    # inputs are checked for existence here unless the job's nodes are reached over ssh: then this machine
    # cannot see their storage, and validation.cluster checks that each path lies on storage they declare
    remote = profile is not None and profile.settings.over_ssh
    # "latest" of an ${art:...} input: among the records this run can read (its machine or cluster, its default
    # output folders: nemotron.config.artifacts.Scope)
    scope = consumer_scope(profile)
    env = {**profile.storage_env(), **profile.tracking_env} if profile is not None else None
    with artifacts.scoped(scope):
        # input paths that do not exist are problems of the report below (rule input-exists), not one bare error
        compiled = compile_config(req.stage, req.config, list(req.overrides), check_paths=False, env=env)
    compiled.artifact_scope, compiled.compile_env = scope, env
    validation.refuse_deleted_required(req.stage, compiled.config, list(req.overrides))  # ~train.global_batch_size
    compiled.launch_args = launch_args(req)
    if req.profile:
        # a pipe takes the profile only where its scheduler queues dependent jobs (run_pipe refuses it otherwise)
        compiled.pipe_args = compiled.launch_args if profile is None or queues_dependent_jobs(profile.executor) else ""
    if profile is not None:  # a default the [wandb] section filled in is labelled as env.toml's, not default.yaml's

        compiled.provenance.update(tracking_provenance(compiled, profile.tracking_env, profile.source))
    # 2. validate: the stage's own preparation (e.g. an <N>layer slice picks a one-node layout), then all rules
    before = dict(leaves(compiled.config))
    notes = validation.prepare(req.stage, compiled.config, compiled.user_keys, profile)
    for key, value in leaves(compiled.config):
        if key not in before or before[key] != value:
            compiled.provenance[key] = "prepared by validation (see notes)"
    problems: list[Problem] = compiled.warnings() + validation.validate(req.stage, compiled.config, profile)
    if not remote:  # every *_path input this machine sees (the validation's own rule covers the wired keys)
        said = {p.key for p in problems if p.rule == "input-exists"}
        problems += [Problem(key=key, value=value, rule="input-exists",
                             message=f"input path does not exist here (set by {layer}): the job would not find it",
                             valid="an existing file or folder, or ${art:NAME,FIELD} for an upstream stage's output")
                     for key, value, layer in missing_input_paths(compiled) if key not in said]
    # a rule that read a key's unresolved ${...} text (train.train_iters='${oc.env:NOPE_X}': "must be a positive
    # number") says nothing true: the key's own warning says why it is unresolved, and the run refuses it anyway
    problems = [p for p in problems if p.rule == "unresolved" or p.key not in compiled.unresolved
                or not (isinstance(p.value, str) and "${" in p.value)]
    # what this shell lacks to start the job (a secret, an ssh key file): the run refuses it before anything is
    # queued, and so does its dry run (it never calls valid what the run refuses); an estimate, which says what a
    # run would cost rather than whether it starts, only warns
    wandb_project = get(compiled.config, "logger.wandb_project")
    lenient = req.estimate and not req.dry_run
    for key, value, message, valid in ([*profile.launch_problems(), *profile.tracking_problems(wandb_project)]
                                       if profile is not None else []):
        problems.append(Problem(key=f"profile.{profile.name}.{key}", value=value, rule="profile",
                                message=message + ("; the run will refuse to start" if lenient else ""),
                                valid=valid, severity="warning" if lenient else "error"))
    # 3. plan: pure
    plan = plan_job(compiled, profile, experiment_id)
    # what a run on this machine (no profile, or a local one) would be refused for here: its GPUs, its Python.
    # Errors for the dry run too: it must not call valid what the run refuses (one set of refusals)
    problems += validation.this_machine(req.stage, compiled.config, plan)
    cluster_checks(compiled, profile, plan, problems, notes)  # the profile's nodes, tasks and storage (cluster.py)
    if req.stage.family.estimate:
        from nemotron.cli.costs import checkpoint_check

        problems += checkpoint_check(req.stage, compiled, profile, plan)  # one checkpoint must fit (estimate.py)
    if not req.dry_run and backends.backend(plan.executor).runs_here:
        # a data prep run here prints the datasets it leaves out itself, in the same words: once is enough
        problems = [p for p in problems if p.rule != "data-left-out"]
    return Prepared(req, compiled, profile, plan, problems, notes)


def launch_args(req: StageRequest) -> str:
    """The command's ``--run``/``--batch`` and ``--env-file`` options (`` --run NAME``, shell-quoted; ``""`` without a
    profile), for hints that name a command."""
    import shlex

    if not req.profile:
        return ""
    return (f" --{'batch' if req.mode == 'batch' else 'run'} {shlex.quote(req.profile)}"
            + (f" --env-file {shlex.quote(req.env_file)}" if req.env_file else ""))


def consumer_scope(profile: ExecutorProfile | None) -> artifacts.Scope:
    """The artifact scope of a stage run on ``profile`` (None: this machine): the profile's executor and host (an ssh
    profile's login host, a Ray profile's address), its storage variables over this shell's environment."""
    import os

    executor, host = storage_site(profile)
    env = {**os.environ, **(profile.storage_env() if profile is not None else {})}
    return artifacts.Scope.of(executor, host, env)


def print_inputs(compiled: Any) -> None:
    """The first lines of a run and a dry run: each artifact the config takes, its version, path, where and when it
    was made (:func:`nemotron.config.compile.input_lines`), on stderr (stdout stays the report a dry run prints)."""
    from nemotron.config.compile import input_lines

    for line in input_lines(compiled):
        print(line, file=sys.stderr, flush=True)


def run_stage(req: StageRequest) -> int:
    """The whole flow for one stage: prepare, then render (``--dry-run``), run here, or submit.
    Returns the exit code.

    Raises:
        ConfigError / UsageError: config or command-line mistakes (exit 2).
        ValidationError: every validation error at once (exit 2), after printing them.
        RuntimeFailure: the job could not be started or submitted (exit 1).
    """

    if req.json:  # --dry-run --json and `estimate` go to cli/estimate.py (from cli/main.py)
        raise UsageError("--json is for --dry-run and `estimate` of a stage command",
                         f"e.g. nemotron {req.stage.recipe} {' '.join(req.stage.command)} --dry-run --json")
    p = prepare_stage(req)
    if not (req.dry_run and req.quiet):  # --quiet: the verdict alone
        print_inputs(p.compiled)
    # 4a. dry run: show everything, submit nothing
    if req.dry_run:
        dryrun.dry_run(req, p.compiled, p.profile, p.plan, p.problems, p.notes, quiet=req.quiet)
        _check_startable(p, reported=True)  # what the run refuses, the dry run refuses too (exit 2)
        return 0
    _check_startable(p)
    # 4b. run here, or submit
    return backends.start(req, p.compiled, p.profile, p.plan)


def _check_startable(p: Prepared, reported: bool = False) -> None:
    """The run's refusals before it starts, shared by the run and the dry run: every validation error
    (:class:`ValidationError`; its hint names the unresolved values too, :func:`also_refused`), else the unresolved
    values (:func:`unresolved_refusal`). ``reported``: the problems
    were printed already (by the dry-run report).

    Raises:
        ValidationError / ConfigError: exit 2, before anything starts or is queued.
    """
    if not reported:
        report.problems(p.problems)
    refusal = unresolved_refusal(p.compiled)
    if p.errors:  # the unresolved values said too (with the command that makes them), not once the errors are fixed
        exc = ValidationError(problems=p.problems)
        if refusal is not None:
            exc.hint = f"{exc.hint}; {also_refused(refusal)}"
        raise exc
    if refusal is not None and reported:  # the dry run's verdict named each value: one line here, for the exit
        raise ConfigError(f"the run would refuse to start {refusal.head}: the report above names each", refusal.hint)
    if refusal is not None:
        raise refusal


def list_stages(recipe: str, as_json: bool = False) -> int:
    """Print the stages of ``recipe`` with their configs, inputs and outputs: one row per group of configs
    that consume and produce the same artifacts (:func:`nemotron.config.compile.config_artifacts`), so a config
    that differs from the stage's default (``quantize -c local``, ``rlvr -c teacher-*``) shows its own."""

    rows = []
    records = []
    refused: dict[str, list[str]] = {}  # why (one line) -> the `STAGE -c NAME` it refuses, for the footnote
    for s in STAGES:
        if s.recipe != recipe:
            continue
        groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
        why: dict[str, str] = {}
        for name in config_names(s):
            # the dry run's and the run's own refusal of this config whatever the profile (validation.config_refusal)
            reason = validation.config_refusal(s, name)
            if reason is not None:
                why[name] = reason
                refused.setdefault(reason, []).append(f"{' '.join(s.command)} -c {name}")
            groups.setdefault(config_artifacts(s, name), []).append(f"{name}*" if reason else name)
        for i, ((consumes, produces), names) in enumerate(groups.items()):
            records.append({"stage": s.name, "command": " ".join(s.command), "title": s.title,
                            "configs": [n.rstrip("*") for n in names],
                            "unavailable": [n.rstrip("*") for n in names if n.endswith("*")],
                            "refused": {n.rstrip("*"): why[n.rstrip("*")] for n in names if n.endswith("*")},
                            "consumes": list(consumes), "produces": list(produces), "launch": s.launch,
                            "gpu": bool(s.gpu)})
            rows.append([s.title.removeprefix(recipe + " ") if i == 0 else "", ", ".join(names),
                         ", ".join(consumes) or "-", ", ".join(produces), s.launch, "yes" if s.gpu else "no"])
    if as_json:
        from nemotron.cli import jsonout

        jsonout.emit("list", {"recipe": recipe, "stages": records})
        return 0
    report.table(f"nemotron {recipe} stages", ["stage", "configs", "consumes", "produces", "launch", "GPU"], rows)
    if refused:
        report.out("* refused by the dry run and a run in this version (exit 2), whatever the profile:", plain=True)
        for reason, which in refused.items():
            report.out(report.readable(f"  {', '.join(which)}: {reason}"), plain=True)
    return 0


def show_profiles(name: str | None, env_file: str | None, as_json: bool = False) -> int:
    """``nemotron profiles [NAME]``: the table of profiles, or one resolved profile (secrets redacted).

    Raises:
        ConfigError: no env.toml, an invalid file or an unknown profile.
    """

    path = profiles.find_env_file(env_file)
    if path is None:
        raise ConfigError("no env.toml found", "copy env.toml.example to ./env.toml, or pass --env-file PATH")
    loaded = profiles.load_profiles(path)
    if as_json:
        from nemotron.cli import jsonout

        jsonout.emit("profiles", show.profiles_document(loaded, name))
        return 0
    if name is None:
        report.out(show.profiles_table(loaded, env_file=env_file))
    else:
        report.out(show.profile_yaml(loaded.get(name)), plain=True)
    return 0


def note_newer_shell_run(rec: Any) -> None:
    """For ``status``/``why`` without an id: a note on stderr when a run in this shell started after ``rec``, the
    last submitted job (:func:`nemotron.launch.records.newer_shell_run`), which those commands do not cover."""
    later = jobs.newer_shell_run(rec)
    if later:
        report.err(f"note: the latest run here, {later}, ran in the shell (not a submitted job; its messages were "
                   f"printed there); this is the last submitted job, {rec.job_id} ({rec.experiment_id})")


def job_status(ident: str | None, as_json: bool = False) -> int:
    """``status [ID]``: the job's Slurm state and where its files are; for ``UNKNOWN`` the reason
    (the job's backend's ``unknown_reason``).

    Raises:
        ConfigError: no such job. SchedulerUnreachable (a RuntimeFailure, exit 1): Slurm could not be asked.
    """

    rec = jobs.load(ident)
    if ident is None:
        note_newer_shell_run(rec)
    owner = backends.backend_for(rec)
    st, code = owner.state(rec)
    reason = owner.unknown_reason(rec) if st == "UNKNOWN" else None
    if st == "COMPLETED":
        try:
            owner.record_outputs(rec)
        except RuntimeFailure as exc:  # the state is still reported; the missing output is said, not recorded
            report.err(f"warning: {exc.message}")
    if as_json:
        from nemotron.cli import jsonout

        jsonout.emit("status", {"job": rec.job_id, "experiment": rec.experiment_id, "stage": rec.stage,
                                "title": rec.title, "profile": rec.profile, "config": rec.config, "state": st,
                                "exit_code": code or None, "terminal": st in jobs.TERMINAL,
                                "run_folder": rec.run_dir, "logs": rec.log_dir, "submitted": rec.submitted,
                                "tunnel": rec.tunnel, "reason": reason})
        return 0
    report.out("\n".join(jobs.status_lines(rec, st, code, reason)), plain=True)
    return 0


def job_list(recipe: str, as_json: bool = False) -> int:
    """``nemotron RECIPE jobs``: every job submitted from this machine for ``recipe`` (the records of
    :mod:`nemotron.launch.jobs`), newest first: id, stage, config, profile, state, submitted (local time), run folder.
    A state the scheduler cannot give (Slurm unreachable, the job's folders gone) is ``UNKNOWN``, its reason in the
    JSON document and on stderr, one line per job; the other jobs are still listed. No record: an empty list (exit 0).
    """
    import time

    names = {s.name for s in STAGES if s.recipe == recipe}
    rows, records = [], []
    for rec in reversed(jobs.records_all()):
        if rec.stage not in names:
            continue
        reason = None
        try:
            st, code = backends.backend_for(rec).state(rec)
        except (RuntimeFailure, ConfigError) as exc:  # one job's state unknown: said, the others still listed
            st, code, reason = "UNKNOWN", "", exc.message
            report.err(f"warning: job {rec.job_id} ({rec.experiment_id}): state unknown: {exc.message}")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.submitted)) if rec.submitted else "-"
        records.append({"job": rec.job_id, "experiment": rec.experiment_id, "stage": rec.stage, "title": rec.title,
                        "config": rec.config, "profile": rec.profile, "state": st, "exit_code": code or None,
                        "submitted": rec.submitted, "run_folder": rec.run_dir, "reason": reason})
        rows.append([rec.job_id, rec.stage, rec.config or "-", rec.profile, st + (f" ({code})" if code else ""), when,
                     rec.run_dir])
    if as_json:
        from nemotron.cli import jsonout

        jsonout.emit("jobs", {"recipe": recipe, "jobs": records})
        return 0
    if not rows:
        report.out(f"no {recipe} job has been submitted from this machine yet (submit one with --batch PROFILE)",
                   plain=True)
        return 0
    # the id, stage, state and time never wrap (the id is copied into status/logs/cancel); a run folder too long for
    # the width is cut at its start (`status ID` and --json give it whole)
    report.table(f"nemotron {recipe} jobs (newest first)",
                 ["id", "stage", "config", "profile", "state", "submitted", "run folder"], rows, whole=(0, 1, 4, 5),
                 clip_left=6)
    return 0


def job_logs(ident: str | None, follow: bool) -> int:
    """``logs [ID] [-f]``: print the job's log; with ``-f`` stream it until the job ends (exit code as
    for an attached run)."""

    rec = jobs.load(ident)
    owner = backends.backend_for(rec)
    if follow:
        return owner.attach(rec)
    files = owner.log_files(rec)
    if not files:
        st, _ = owner.state(rec)
        print(f"job {rec.job_id} ({st}) has written no log yet", file=sys.stderr)
        return 0
    redact = jobs.redactor(rec, keep_colour=sys.stdout.isatty())
    for path in files:
        sys.stdout.write(redact(owner.read_log(rec, path)))
    return 0


def job_cancel(ident: str) -> int:
    """``cancel ID``: cancel the job; one that has already ended (a terminal state) is said so on stderr and left
    as it is, exit 0 (what was asked holds: the job does not run).

    Raises:
        ConfigError: no such job. RuntimeFailure: the scheduler could not be asked, or refused the cancel.
    """

    rec = jobs.load(ident)
    owner = backends.backend_for(rec)
    st, _ = owner.state(rec)
    if st in jobs.TERMINAL:
        print(f"job {rec.job_id} ({rec.experiment_id}) had already ended ({st}); nothing to cancel", file=sys.stderr)
        return 0
    owner.cancel(rec)
    try:  # a backend whose cancel waits for the end (local) has the final state by now
        st, code = owner.state(rec)
    except NemotronError:
        st, code = "", None
    ended = f": {st}" + (f" (exit code {code})" if code not in (None, "") else "") if st in jobs.TERMINAL else ""
    print(f"cancelled job {rec.job_id} ({rec.experiment_id}){ended}", file=sys.stderr)
    return 0


def _read_gates(path: str | None, stages: list[str]) -> dict[str, Any]:
    """``pipe --gates FILE`` (:func:`nemotron.runtime.stage_metrics.read_gates`); {} without the option.

    Raises:
        ConfigError: an unreadable or malformed gates file (exit 2), before anything runs.
    """
    if not path:
        return {}
    from nemotron.runtime.stage_metrics import GateError, read_gates

    try:
        return read_gates(path, stages)
    except GateError as exc:
        raise ConfigError(str(exc), "gates: {stage: {metric: {max: X} | {min: X} | {max_drop: Y}}} "
                                    "(docs/execution.md, Gates)") from None


def _run_here(prepared: list[Prepared], gates: dict[str, Any]) -> int:
    """The stages one after the other on this machine, each timed; after each, its metrics
    (:func:`nemotron.runtime.stage_metrics.collect`) and its gates: a failed gate stops the chain (exit 1) naming
    the gate, the value and the threshold. At the end (or at the stop) one table of every stage's metrics."""
    import time

    from nemotron.runtime.stage_metrics import check_gates, collect, describe

    rows: list[list[Any]] = []
    seen: list[dict[str, float]] = []
    t_all = time.perf_counter()

    def table(note: str) -> None:
        report.table(f"pipe: {note} ({time.perf_counter() - t_all:.0f} s in all)",
                     ["#", "stage", "config", "exit", "seconds", "metrics"], rows)

    for i, p in enumerate(prepared, 1):
        # a header per stage, as its dry run prints: where one stage's output ends and the next one's starts
        report.heading(f"[{i}/{len(prepared)}] {p.req.stage.title} · config {p.compiled.config_name}")
        t0 = time.perf_counter()
        code = backends.start(p.req, p.compiled, p.profile, p.plan)
        metrics = collect(p.req.stage.name, p.compiled.config) if code == 0 else {}
        rows.append([i, p.req.stage.title, p.compiled.config_name, code, f"{time.perf_counter() - t0:.0f}",
                     describe(metrics)])
        if code != 0:
            table("stopped")
            report.err(f"pipe stopped: {p.req.stage.title} exited {code}")
            return code
        failed = check_gates(p.req.stage.name, metrics, gates.get(p.req.stage.name, {}), seen)
        seen.append(metrics)
        if failed:
            table("stopped by a gate")
            for line in failed:
                report.err(f"pipe stopped: {line}")
            return 1
    table("every stage")
    return 0


def _pipe_chain(recipe: str, names: list[str], config: str | None) -> list[tuple[Stage, str | None]]:
    """The stages of a pipe in the order they run, each with its config: ``names`` as given (all stages of the recipe
    without any), each with ``config``, but the ``k``-th occurrence of a stage named again (``pipe ... mopd mopd``)
    with that stage's cycle config :func:`nemotron.config.artifacts.cycle_config` (``local-cycle2`` for ``-c local``,
    ``cycle2`` for ``default``): a stage runs again only as a new cycle, with its own checkpoint folder and inputs.

    Raises:
        UsageError: a stage named again that has no such cycle config, or a stage named before one whose output it
            consumes (what each consumes and produces is read from its config, as ``nemotron RECIPE list`` shows it).
    """

    if not names:
        return [(s, config) for s in STAGES if s.recipe == recipe]
    in_order = " ".join(s.name for s in STAGES if s.name in names)
    chain: list[tuple[Stage, str | None]] = []
    for i, n in enumerate(names):
        k = names[:i + 1].count(n)
        stage = get_stage(n)
        if k == 1:
            chain.append((stage, config))
            continue
        cyc = artifacts.cycle_config(config, k)
        base = re.fullmatch(r"(?:(.+)-)?cycle(\d+)", config or "")
        if cyc not in config_names(stage) and base:  # -c cycle2 is itself a later cycle: the chain starts from its base
            first = base.group(1) or "default"
            raise UsageError(f"pipe: -c {config} is itself cycle {base.group(2)} of {n}'s -c {first}; a stage named "
                             f"again runs its next cycle, so -c {config} would need -c {cyc}",
                             f"start the chain from the first cycle's config: pipe {' '.join(names)} -c {first}")
        if cyc not in config_names(stage):
            raise UsageError(f"pipe: stage {n} is named {k} times; its occurrence {k} would run -c {cyc}, which {n} "
                             "does not have (a stage runs again only as a new cycle, with its own config)",
                             f"name each stage once: pipe {in_order}; or add stages/{stage.config_dir}/{cyc}.yaml "
                             f"(defaults: {config or 'default'}; its own checkpoint folder and inputs)")
        chain.append((stage, cyc))
    flows = []
    for s, cfg in chain:
        try:
            flows.append(config_artifacts(s, cfg))
        except ConfigError:  # an unknown config: the stage's own compile reports it, naming the stage
            flows.append((s.consumes, s.produces))
    for i, (s, _) in enumerate(chain):
        for j in range(i + 1, len(chain)):
            later = chain[j][0]
            made = [a for a in flows[j][1] if a in flows[i][0]]
            if made and later.name != s.name:  # a later cycle of the same stage makes a new version: no order issue
                raise UsageError(f"pipe: {s.name} is named before {later.name}, which produces its input {made[0]}; "
                                 "stages run in the order named",
                                 f"name them in pipeline order: pipe {in_order}")
    return chain


def _runnable_default(recipe: str, chain: list[tuple[Stage, str | None]]) -> list[tuple[Stage, str | None]]:
    """The chain of a ``pipe`` given no stage names, less the stages its one ``-c`` cannot run whatever the profile
    (:func:`nemotron.validation.config_refusal`: ``mtp-boost -c tiny`` and ``-c default``, rule
    ``mtp-boost-framework``), each left out with one ``note:`` line on stderr: the stage, why, and how to run it
    (with ``-c local`` where that config of it is not refused). A config a stage does not have is kept: its own
    compile says so. The stages after one left out take what it stands in for from the stage that makes it
    (``quantize`` takes ``mopd``'s checkpoint for ``mtp-boost``'s)."""
    kept = []
    for stage, config in chain:
        try:
            reason = validation.config_refusal(stage, config or "default")
        except ConfigError:
            reason = None
        if reason is None:
            kept.append((stage, config))
            continue
        command = f"nemotron {recipe} {' '.join(stage.command)}"
        local = "local" in config_names(stage) and validation.config_refusal(stage, "local") is None
        how = (f"run it on one machine after the pipe: {command} -c local" if local
               else f"no config of it runs in this version ({command} --help)")
        taken = f"; the stages after it take {', '.join(stage.stands_in_for)} from the stage that makes it" \
            if stage.stands_in_for else ""
        report.err(f"note: pipe with no stage names runs every stage its -c can run: left out {stage.name} "
                   f"(-c {config or 'default'}: {reason.partition('; valid: ')[0]}){taken}; {how}")
    return kept


def _one_config_hint(chain: list[tuple[Stage, str | None]], stage: Stage, config: str | None, hint: str | None,
                     req: StageRequest) -> str:
    """The hint for a stage of a pipe that has no config ``config`` (the pipe's one ``-c``): its configs (the
    compile's own hint, with its did-you-mean), and that stages needing different configs run one by one, each with
    its own ``-c``, in the chain's order (``CONFIG`` for those that lack ``config``)."""
    runs = []
    for each, _ in chain:
        given = config if config in config_names(each) or not config else "CONFIG"
        runs.append(f"nemotron {each.recipe} {' '.join(each.command)} -c {given}{launch_args(req)}")
    return (f"{stage.title}: {hint}; a pipe has no per-stage -c: run stages that need different configs one by one, "
            "in this order: " + ", then ".join(runs))


def _override_hint(recipe: str, names: list[str], arg: str, config: str | None) -> str:
    """The hint for a pipe override given without its stage: ``STAGE:arg`` for the stages (those named so far, else
    every stage of the recipe) whose ``-c config`` has the key (``+key`` adds one: any named stage takes it), or
    that no such stage has it."""

    key = arg.lstrip("~+").partition("=")[0].strip()
    named = [get_stage(n) for n in names] or [s for s in STAGES if s.recipe == recipe]
    if arg.startswith("+"):
        return f"e.g. {named[0].name}:{arg} (docs/execution.md, Pipelines)"
    if key.startswith("profile."):  # a key of the profile, not of a config: any stage takes it for its own job
        return (f"e.g. {' or '.join(f'{s.name}:{arg}' for s in named[:2])}: the profile of that stage's job "
                "(docs/execution.md, Pipelines)")
    having = []
    for stage in named:
        try:
            cfg = compile_config(stage, config, [], check_paths=False).config
        except Exception:
            continue
        flat = {k for k, _ in leaves(cfg)}
        if key in flat or any(k.startswith(key + ".") or k.startswith(key + "[") for k in flat):
            having.append(stage.name)
    if having:
        return f"e.g. {' or '.join(f'{n}:{arg}' for n in having[:3])} (docs/execution.md, Pipelines)"
    where = "the stages named" if names else f"any {recipe} stage"
    return f"no config of {where} has the key {key!r}: check its spelling (docs/execution.md, Pipelines)"


def _chain_verdict(prepared: list[Prepared]) -> str:
    """A pipe dry run's verdict, one line: the stages with errors and their count, and the first stage the run
    would refuse to start for unresolved inputs (its own check, :func:`_check_startable`) with the artifacts (or
    keys) it lacks; else valid, or that first refused stage; nothing was submitted."""
    bad = [(i, p) for i, p in enumerate(prepared, 1) if p.errors]
    refused = next((i for i, p in enumerate(prepared, 1) if unresolved_refusal(p.compiled) is not None), None)
    if bad:
        where = ", ".join(f"{i}/{len(prepared)} ({p.req.stage.title}): {len(p.errors)}" for i, p in bad)
        count = plural(sum(len(p.errors) for _, p in bad), "error")
        also = ""
        if refused is not None:  # the errors are not the whole story: an earlier (or the same) stage lacks inputs
            lacks = missing_inputs(prepared[refused - 1].compiled)
            also = (f", and stage {refused}/{len(prepared)} ({prepared[refused - 1].req.stage.title}) would refuse "
                    f"to start too: no {', '.join(lacks)} (see that stage's verdict)")
        return (f"dry run: {count} found in the chain's stages ({where}){also}: "
                "the run would refuse to start; nothing was submitted")
    if refused is None:
        return f"dry run: the chain of {len(prepared)} stages is valid; nothing was submitted"
    return (f"dry run: the chain's configs are valid, but the run would refuse to start at stage "
            f"{refused}/{len(prepared)} ({prepared[refused - 1].req.stage.title}): see that stage's verdict; "
            "nothing was submitted")


def run_pipe(recipe: str, kw: dict[str, Any]) -> int:
    """``nemotron RECIPE pipe [STAGES...]``: each stage in order, each consuming the one before.

    Stages run in the order named (all stages of the recipe, in registry order, when none is named). A stage named
    again runs as a new cycle with its cycle config (``pipe rlvr mopd-warmup mopd mopd -c local``: the second ``mopd``
    runs ``-c local-cycle2``, wired to the first one's output: :func:`_pipe_chain`); ``STAGE:key=value`` overrides
    every run of STAGE (a ``note:`` line on stderr says so when STAGE runs more than once), ``STAGE#K:key=value`` its
    K-th (``STAGE:K:key=value`` is refused, naming that form). A stage named again without a cycle config, or named
    before
    a stage that produces what it consumes (``pipe sft pretrain``), is refused rather than deduplicated or reordered.

    Raises:
        UsageError: unknown stage names, a stage named twice or out of order, overrides for a stage not in
            the chain, ``--run``/``--batch`` on a profile that is not a Slurm one (dry run included).
        ConfigError / ValidationError: a stage's config or profile problems, named by the stage.
    """

    names: list[str] = []
    per_stage: dict[str, list[str]] = {}
    per_cycle: dict[tuple[str, int], list[str]] = {}  # STAGE#K:key=value: the K-th occurrence of STAGE only
    for arg in kw.get("stages") or ():
        head, sep, rest = arg.partition(":")
        if sep and ("=" in rest or rest.startswith(("~", "+"))):
            head, hash_, nth = head.partition("#")
            if hash_ and not (nth.isdigit() and int(nth) >= 1):
                raise UsageError(f"{arg!r}: {head}#{nth}: the occurrence is a number from 1 (STAGE#2:key=value: the "
                                 "second run of STAGE in the chain)")
            try:
                name = get_stage(head).name
            except KeyError as exc:
                raise UsageError(f"{arg!r}: {exc.args[0]}") from None
            nth_run = re.match(r"#?(\d+):(.*)", rest)
            if nth_run and not hash_:  # mopd:2:key=value: the K-th run is named with #, not a second colon
                raise UsageError(f"{arg!r}: the K-th run of a stage is written STAGE#K:key=value, not "
                                 "STAGE:K:key=value",
                                 f"{head}#{nth_run.group(1)}:{nth_run.group(2)} (the run {nth_run.group(1)} of {name} "
                                 f"in the chain); {head}:{nth_run.group(2)} sets every run of {name}")
            if hash_:
                per_cycle.setdefault((name, int(nth)), []).append(rest)
            else:
                per_stage.setdefault(name, []).append(rest)
            continue
        if not sep and ("=" in arg or arg.startswith(("~", "+"))):
            raise UsageError(f"{arg!r}: a pipe override names the stage it is for: STAGE:{arg}",
                             _override_hint(recipe, names, arg, kw.get("config")))
        try:
            names.append(get_stage(arg).name)
        except KeyError as exc:
            raise UsageError(str(exc.args[0]), "per-stage overrides are written STAGE:key=value") from None
    chain = _pipe_chain(recipe, names, kw.get("config"))
    if not names:  # every stage: but not those its -c cannot run (mtp-boost -c tiny), each said on one line
        chain = _runnable_default(recipe, chain)
    unknown = set(per_stage) - {s.name for s, _ in chain}
    if unknown:
        order = {s.name: i for i, s in enumerate(STAGES)}
        named = [s.name for s, _ in chain]
        for u in sorted(unknown, key=order.__getitem__):  # each where the pipeline order puts it
            at = next((i for i, n in enumerate(named) if order[n] > order[u]), len(named))
            named.insert(at, u)
        raise UsageError(f"overrides for stages not in the chain: {', '.join(sorted(unknown))}",
                         f"STAGE:key=value sets a key of a stage the pipe runs; name the stage too: "
                         f"nemotron {recipe} pipe {' '.join(named)} {sorted(unknown)[0]}:KEY=VALUE ...")
    runs = [(s.name, [t.name for t, _ in chain[:i + 1]].count(s.name)) for i, (s, _) in enumerate(chain)]
    for name, given in per_stage.items():  # STAGE:key=value on a stage the chain runs more than once: said, once
        times = sum(n == name for n, _ in runs)
        if times > 1:
            report.err(f"note: {', '.join(f'{name}:{o}' for o in given)} applies to every run of {name} in the chain "
                       f"(runs 1 to {times}); {name}#K:key=value sets the K-th run only")
    absent = sorted(set(per_cycle) - set(runs))
    if absent:
        raise UsageError(f"overrides for runs not in the chain: {', '.join(f'{n}#{k}' for n, k in absent)}",
                         "STAGE#K names the K-th time STAGE is named in the pipe")
    run, batch = kw.get("run_profile"), kw.get("batch_profile")
    if run and batch:
        raise UsageError("--run and --batch are mutually exclusive")
    mode = "run" if run else "batch" if batch else "here"
    check_quiet(kw)
    gates = _read_gates(kw.get("gates"), [s.name for s, _ in chain])  # the dry run refuses a bad gates file too
    if gates and mode != "here":
        raise UsageError("pipe --gates: gates are checked between stages run here; a Slurm chain (afterok) has no "
                         "step between its jobs to check them", "run the chain here, or leave --gates out")

    # prepare every stage first, each wired to the planned outputs of the ones before it
    prepared: list[Prepared] = []
    invalid = 0
    planned: dict[str, dict[str, Any]] = {}  # what the stages so far will write: the next ones are wired to it
    for i, (stage, stage_config) in enumerate(chain, 1):
        with artifacts.planning(planned):
            overrides = (*per_stage.get(stage.name, ()), *per_cycle.get(runs[i - 1], ()))
            req = StageRequest(stage=stage, config=stage_config, overrides=overrides,
                               mode=mode, profile=run or batch, dry_run=bool(kw.get("dry_run")),
                               env_file=kw.get("env_file"), argv=tuple(sys.argv), quiet=bool(kw.get("quiet")))
            try:
                p = prepare_stage(req)
            except (ConfigError, UsageError) as exc:  # name the stage (once): a pipe compiles several configs
                message = exc.message if exc.message.startswith(f"{stage.title} ") else f"{stage.title}: {exc.message}"
                if exc.message.startswith(f"{stage.title} has no config "):  # the pipe's one -c is every stage's
                    raise type(exc)(f"{message}: pipe's one -c applies to every stage it runs",
                                    _one_config_hint(chain, stage, stage_config, exc.hint, req)) from None
                raise type(exc)(message, exc.hint) from None
            if i == 1 and mode != "here" and not queues_dependent_jobs(p.plan.executor):  # before anything is shown or queued
                raise UsageError(f"pipe --{mode} needs a slurm profile (got {p.plan.executor})",
                                 "run the chain here without a profile, or use a slurm profile")
            invalid += bool(p.errors)
            prepared.append(p)
        made = planned_outputs(p.compiled)
        planned.update(made)
        for name in stage.stands_in_for:  # the stages after it take its output for that artifact (registry.py)
            planned[name] = dict(next(iter(made.values())))
    if kw.get("dry_run"):
        quiet = bool(kw.get("quiet"))
        verdict = _chain_verdict(prepared)
        report.out(report.readable(verdict), plain=True)  # first the chain's verdict, then each stage's report
        n = len(prepared)
        for i, p in enumerate(prepared, 1):
            if not quiet:  # --quiet: the verdicts alone, not the input lines
                print_inputs(p.compiled)
                report.heading(f"[{i}/{n}] {p.req.stage.title}")
            dryrun.dry_run(p.req, p.compiled, p.profile, p.plan, p.problems, p.notes, part=f"stage {i}/{n}",
                           quiet=quiet)
        if not quiet:
            how = "afterok; a failure cancels the rest" if mode != "here" else "when it succeeded"
            report.table("the chain", ["#", "stage", "config", "executor", "nodes x GPUs", "starts", "problems"],
                         [[i, p.req.stage.title, p.compiled.config_name, p.plan.executor,
                           f"{p.plan.nodes} x {p.plan.gpus_per_node}",
                           "first" if i == 1 else f"after #{i - 1} ({how})",
                           len(p.errors) or "-"] for i, p in enumerate(prepared, 1)])
    if invalid:
        if not kw.get("dry_run"):  # the dry run printed them already; here they are the only report
            for p in prepared:
                if p.problems:
                    report.err(f"{p.req.stage.title} ({p.compiled.config_name}):")
                    report.problems(p.problems)
        raise ValidationError(problems=[q for p in prepared for q in p.problems])
    if kw.get("dry_run"):
        if not kw.get("quiet"):  # last as well: what a terminal shows after a long report
            report.out(report.readable(verdict), plain=True)
        for p in prepared:  # the first stage the run would refuse to start: the dry run refuses it too (exit 2)
            _check_startable(p, reported=True)
        return 0
    for p in prepared:
        print_inputs(p.compiled)
        _check_startable(p)
    if mode == "here":  # one after the other on this machine; stop at the first failure or failed gate
        return _run_here(prepared, gates)

    queued: list[str] = []  # every job accepted so far: a failed submission names them and how to cancel them
    chains: list[list[str]] = []  # per stage: its job, then its run.chain continuation jobs
    with submit.reporting_queued(queued, recipe):
        for p in prepared:  # afterok chain: a failed stage cancels the rest (--kill-on-invalid-dep=yes)
            first = len(queued)
            # after the job that ends the stage before: its last continuation job with run.chain
            # (queues_dependent_jobs held for the first stage's executor: each stage's profile is that Slurm one)
            profile = backends.Job(p.req, p.compiled, p.profile, p.plan).profile_as(SlurmSettings)
            submit.submit(p.req, p.compiled, profile, p.plan, dependencies=chains[-1][-1:] if chains else None,
                          chain_ids=queued)
            chains.append(queued[first:])
            print(f"submitted {p.req.stage.title}: Slurm job {chains[-1][0]}"
                  + (f" (after {chains[-2][-1]})" if len(chains) > 1 else ""), file=sys.stderr)
    if mode == "batch":
        print("\n".join(chain[0] for chain in chains))
        return 0
    for i, chain in enumerate(chains, 1):
        p = prepared[i - 1]
        report.heading(f"[{i}/{len(chains)}] {p.req.stage.title} · config {p.compiled.config_name} · Slurm job {chain[0]}")
        code = backends.attach(jobs.load(chain[0]), chain=[jobs.load(job_id) for job_id in chain[1:]])
        if code != 0:
            return code
    return 0


__all__ = ["StageRequest", "list_stages", "load_profile", "run_pipe", "run_stage", "show_profiles", "unresolved_refusal"]
