"""The run's own refusal of a config whose artifact references are not resolved: one check for run and dry-run."""

from __future__ import annotations

from typing import Any

from nemotron.config.artifacts import cycle_base, producer_command, producer_stage
from nemotron.config.compile import _resolve_config_ref
from nemotron.errors import ConfigError, plural


def unresolved_refusal(compiled: Any) -> ConfigError | None:
    """The refusal of a run whose config still holds unresolved values (an artifact no run has made yet, an unset
    environment variable), or None. A run raises it (:func:`nemotron.cli.pipeline._check_startable`), and so does a
    dry run after its report (exit 2: the dry run never calls valid what the run refuses), its verdict saying why
    (:func:`nemotron.cli.dryrun.verdict`). Every unresolved key is named: one, on the message's line; several, one
    line each after it (:attr:`Unresolved.lines`). The hint names the command that makes the first missing artifact
    (:func:`nemotron.config.artifacts.producer_command`) and the ``pipe`` that chains it; when more than one run is
    missing (several inputs, or inputs of the producer itself), the one ``pipe`` that makes them all, in pipeline
    order (:func:`missing_chain`), so the suggested command does not refuse at its second stage."""
    import re


    if not compiled.unresolved:
        return None
    key, why = next(iter(compiled.unresolved.items()))
    stage = compiled.stage
    head = f"{stage.title} with {plural(len(compiled.unresolved), 'unresolved value')}"
    lines = [f"{k}: {w}" for k, w in compiled.unresolved.items()]
    hint = "set the key explicitly (key=value), or export the variable it reads"
    m = re.search(_ARTIFACT, str(why))
    own_file = "/" in compiled.config_name or compiled.config_name.endswith((".yaml", ".yml"))
    # a -c FILE takes any config's run as its input: the producers are named with the shipped config it builds on
    # (its `defaults:` chain: tiny.yaml, else default.yaml, the paper-scale run), said as such
    config = shipped_base(compiled) if own_file else compiled.config_name
    if config and cycle_base(config):  # a cycle config (local-cycle2): its inputs are made by runs of the base config
        config = cycle_base(config)
    if str(why).startswith("no artifact "):  # a misspelt name: no run makes it, making it first is no way out
        return Unresolved(head, lines, f"correct the artifact name in {key} (the closest one is named above, if any), "
                                       f"or set {key} explicitly")
    if m and " has no version " in str(why):  # ${art:NAME:9,...} where versions 1-2 exist
        return Unresolved(head, lines, f"pin a version that exists (${{art:{m.group(1)}:N,...}}) or drop ':N' for the "
                                       f"latest; or set {key} explicitly")
    if m:
        hint = "set the key explicitly (key=value)"  # no variable is read: saying "export" would mislead
    command = producer_command(m.group(1), config) if m else None
    producer = producer_stage(m.group(1)) if m else None
    # the producer goes where this job goes: made here, a cluster job could not read it
    launch = getattr(compiled, "launch_args", "")
    command = command + launch if command else None
    if command and config and producer is not None and not _takes_config(producer, config):
        # the producer ships no config of that name (pretrain -c long_context reads data prep's output): naming
        # `-c <config>` for it would be a command that fails
        return Unresolved(head, lines,
                          f"set {key} explicitly: {producer.title} has no config named {config}, so no run of it "
                          f"makes this artifact for -c {config} (run it with a config of yours and give its output "
                          "here)")
    if command and own_file:  # the file is this stage's: the pipe makes the inputs, then this command runs
        makers = missing_chain(compiled, config) if producer is not None else []
        chain = (f"; or make them all: nemotron {stage.recipe} pipe {' '.join(makers)} -c {config}{launch}, then "
                 "run this command again") if len(makers) > 1 else ""
        import shlex

        own = shlex.quote(compiled.config_name)
        return Unresolved(head, lines, f"make it first: {command}{chain} (-c {own} builds on "
                                       f"{stage.name}'s {config}.yaml{PAPER_SCALE if config == 'default' else ''}; "
                                       f"any config's run is its input); or set {key} explicitly")
    if command:
        makers = missing_chain(compiled, config) if producer is not None else []
        chain = ""
        # a pipe goes where this job goes, where it can: pipe refuses --run/--batch on a profile that queues no
        # dependent jobs (a local one), so the chain is offered here, without the profile, and says so
        pipe_launch = getattr(compiled, "pipe_args", launch)
        option = launch.partition(" --env-file ")[0].strip()
        here = (f" here, without {option} (pipe queues a chain on a Slurm profile only)" if launch and not pipe_launch
                else "")
        if producer is not None and len(makers) <= 1:
            chain = (f"; or chain both{here}: nemotron {stage.recipe} pipe {producer.name} {stage.name}"
                     + (f" -c {config}" if config else "") + pipe_launch)
        elif makers:  # several inputs missing, or the producer's own: one pipe makes them all, in pipeline order
            chain = (f"; or chain every run it needs{here}: nemotron {stage.recipe} pipe "
                     f"{' '.join([*makers, stage.name])}" + (f" -c {config}" if config else "") + pipe_launch)
        hint = f"make it first: {command}{chain}; or set {key} explicitly"
    return Unresolved(head, lines, hint)


#: What a config that builds on ``default.yaml`` is: said where a hint names ``-c default`` for a ``-c FILE``.
PAPER_SCALE = ", the paper-scale run"


def shipped_base(compiled: Any) -> str:
    """The shipped config a ``-c FILE`` builds on: the last shipped config of its ``defaults:`` chain (its layer
    label ``tiny.yaml``: a file of the stage's folder), else ``default``."""
    shipped = [label for label in compiled.layers if label.endswith(".yaml") and "/" not in label
               and label != "default.yaml" and not label.startswith("nemo-rl:")]
    return shipped[-1].removesuffix(".yaml") if shipped else "default"


_ARTIFACT = r"artifact (?:[^\s:,|]+\|)*([^\s:,|]+)"  # A|B: B, the input the stage falls back to


def missing_inputs(compiled: Any) -> list[str]:
    """What ``compiled`` lacks to start, in key order, each once: the artifact an unresolved value names
    (``rl-data``), else the key itself (an unset environment variable's). ``[]`` when nothing is unresolved."""
    import re

    out: list[str] = []
    for key, why in compiled.unresolved.items():
        m = re.search(_ARTIFACT, str(why))
        name = m.group(1) if m else key
        if name not in out:
            out.append(name)
    return out


def missing_chain(compiled: Any, config: str | None) -> list[str]:
    """The stages (registry names, in pipeline order: the registry's) whose runs make every artifact ``compiled``
    is missing (its unresolved ``artifact NAME`` values), and, in turn, the artifacts those runs would miss: each
    producer is compiled with ``-c config`` and its own unresolved artifacts followed. A producer that has no such
    config, fails to compile, or is the stage itself ends the walk there. Each producer is compiled in the
    consumer's artifact scope and storage environment (``compiled.artifact_scope``, ``compiled.compile_env``): for
    ``--run PROFILE`` the records this machine holds are not the cluster's, so their runs belong in the chain.
    ``[]`` when no artifact is missing."""
    import re

    from nemotron.config import artifacts
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import STAGES

    def wanted(c: Any) -> list[str]:
        return [m.group(1) for why in c.unresolved.values() if (m := re.search(_ARTIFACT, str(why)))]

    found: dict[str, Any] = {}
    todo = wanted(compiled)
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        producer = producer_stage(name)
        if producer is None or producer.name == compiled.stage.name or producer.name in found:
            continue
        found[producer.name] = producer
        if not config or not _takes_config(producer, config):
            continue
        try:
            # compiled where the consumer was (its profile's artifact scope and storage variables): a record made
            # on this machine is no input of a cluster run, so its producer's run is needed there too
            with artifacts.scoped(getattr(compiled, "artifact_scope", None)):
                made = compile_config(producer, config, [], check_paths=False,
                                      env=getattr(compiled, "compile_env", None))
            todo += wanted(made)
        except ConfigError:
            continue
    order = {s.name: i for i, s in enumerate(STAGES)}
    return sorted(found, key=lambda n: order.get(n, len(order)))


class Unresolved(ConfigError):
    """The run's refusal of unresolved values (exit 2). ``head``: ``STAGE with N unresolved values``; ``lines``: one
    ``key: why`` per unresolved key. ``message``: ``refusing to start HEAD: KEY: WHY`` for one key, else ``refusing
    to start HEAD:`` and each key on a line of its own, indented by two spaces."""

    def __init__(self, head: str, lines: list[str], hint: str) -> None:
        self.head, self.lines = head, lines
        body = f" {lines[0]}" if len(lines) == 1 else "".join(f"\n  {line}" for line in lines)
        super().__init__(f"refusing to start {head}:{body}", hint)


def also_refused(refusal: Unresolved, where: str = "each named by a warning above") -> str:
    """``refusal`` said beside validation errors, one line: ``it would also refuse HEAD: KEY: WHY; HINT`` for one
    unresolved key, ``it would also refuse HEAD (WHERE); HINT`` for several (the dry run lists them below its
    verdict, the run's report names each as a warning), so that a run refused for its errors also names the inputs
    it lacks and how to make them (the make-it-first hint), instead of saying so only once the errors are fixed."""
    why = f": {refusal.lines[0]}" if len(refusal.lines) == 1 else f" ({where})"
    return f"it would also refuse {refusal.head}{why}; {refusal.hint}"


def _takes_config(stage: Any, config: str) -> bool:
    """Whether ``-c config`` names a config of ``stage`` (``local`` of a data prep stage is its ``tiny``)."""

    try:
        _resolve_config_ref(stage, config, None)
    except ConfigError:
        return False
    return True
