"""Shell completion's answers: stages and commands (Typer lists a group's sub-commands itself), ``-c`` names,
profile names and config keys for ``key=value`` overrides.

Typer asks these through the ``autocompletion=`` of the options and arguments of :mod:`nemotron.cli.main` while a
shell completes a word (``nemotron --install-completion`` installs the hook; ``_NEMOTRON_COMPLETE`` is the protocol's
variable). Each answer is ``[(value, help), ...]``; Typer keeps those that start with the word typed. They read the
same files the commands read (the stage's folder, its ``default.yaml``, the env.toml a command would find), never
fail (a shell completing a word must not print a traceback: a file that cannot be read gives no answer), and import
nothing heavy.
"""

from __future__ import annotations

from typing import Any

from nemotron.config.registry import STAGES, Stage


def _stage(ctx: Any) -> Stage | None:
    """The stage of the command being completed (:class:`nemotron.cli.main.StageCommand` carries it)."""
    return getattr(ctx.command, "stage", None)


def _recipe(ctx: Any) -> str:
    """The recipe group the completed command sits in (``ultra3``): the first word after ``nemotron``."""
    while ctx.parent is not None and ctx.parent.parent is not None:
        ctx = ctx.parent
    return ctx.info_name or "ultra3"


def configs(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """``-c`` names: the stage's configs with their header's first sentence; for ``pipe``, every name some stage
    of the recipe has."""
    from nemotron.cli.stagehelp import config_rows

    stage = _stage(ctx)
    stages = [stage] if stage else [s for s in STAGES if s.recipe == _recipe(ctx)]
    out: dict[str, str] = {}
    for s in stages:
        try:
            for name, about in config_rows(s):
                out.setdefault(name, about if stage else f"config of {s.name}, ...")
        except Exception:  # a shell completing must not fail
            continue
    return [(n, h) for n, h in out.items() if n.startswith(incomplete)]


def profiles(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """Profile names of the env.toml the command would read (its ``--env-file`` when already typed), with their
    executor."""
    from nemotron.cli.stagehelp import profile_rows

    try:
        _, rows = profile_rows(ctx.params.get("env_file"))
    except Exception:
        return []
    return [(name, f"{executor} profile") for name, executor in rows if name.startswith(incomplete)]


def _keys(stage: Stage) -> list[tuple[str, str]]:
    from nemotron.cli.stagehelp import key_docs

    try:
        return [(d.key, f"{d.type} = {d.default}" + (f": {d.description}" if d.description else ""))
                for d in key_docs(stage, null_types=False)]
    except Exception:
        return []


def override_words(stage: Stage, incomplete: str) -> list[tuple[str, str]]:
    """Completions of one override word of ``stage``: ``KEY=`` for the keys of its default config (``~KEY`` after
    ``~``), the word ``estimate`` where the stage has it; nothing once the word has its ``=`` (a value)."""
    if "=" in incomplete:
        return []
    lead = "~" if incomplete.startswith("~") else "+" if incomplete.startswith("+") else ""
    out = [(f"{lead}{key}{'' if lead == '~' else '='}", about) for key, about in _keys(stage)]
    if not lead and stage.family.estimate:
        out.insert(0, ("estimate", "print the run's step time, GPU-hours, jobs and checkpoint bytes"))
    return [(v, h) for v, h in out if v.startswith(incomplete)]


def overrides(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """The override words of the stage being completed (:func:`override_words`)."""
    stage = _stage(ctx)
    return override_words(stage, incomplete) if stage else []


def pipe_words(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """``pipe`` words: stage names (``pretrain``, ``data-prep-sft``), and after ``STAGE:`` that stage's override
    words (``pretrain:train.global_batch_size=``)."""
    recipe = _recipe(ctx)
    if ":" in incomplete:
        name, _, word = incomplete.partition(":")
        stage = next((s for s in STAGES if s.recipe == recipe and s.name == name), None)
        return [(f"{name}:{v}", h) for v, h in override_words(stage, word)] if stage else []
    return [(s.name, s.summary) for s in STAGES if s.recipe == recipe and s.name.startswith(incomplete)]


def recipe_stages(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """Stage names of the recipe the completed command sits in (``nemotron ultra3 keys STAGE``)."""
    recipe = _recipe(ctx)
    return [(s.name, s.summary) for s in STAGES if s.recipe == recipe and s.name.startswith(incomplete)]


def _keys_stage(ctx: Any) -> tuple[Stage | None, str | None]:
    """``(STAGE, -c NAME)`` of a ``keys`` line being completed: from the parsed parameters, else the first word
    click's resilient parse left in ``ctx.args`` (it does so while an option waits for its value: ``keys rlvr -c
    <TAB>``)."""
    name = ctx.params.get("stage") or next((a for a in ctx.args if not a.startswith("-")), None)
    config = (ctx.params.get("config") or [None])[0]
    return next((s for s in STAGES if s.recipe == _recipe(ctx) and s.name == name), None), config


def keys_config(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """``keys STAGE -c``: the configs of the STAGE already typed."""
    from nemotron.cli.stagehelp import config_rows

    stage, _ = _keys_stage(ctx)
    try:
        return [(n, h) for n, h in config_rows(stage) if n.startswith(incomplete)] if stage else []
    except Exception:
        return []


def keys_prefix(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """``keys STAGE PREFIX``: the sections and keys of STAGE's merged tree (the NeMo RL recipe included) one
    level below what is typed (``policy.`` gives ``policy.megatron_cfg.``, ``policy.model_name``, ...)."""
    from nemotron.cli.keys import key_rows

    stage, config = _keys_stage(ctx)
    if stage is None:
        return []
    try:
        _, rows = key_rows(stage, config)
    except Exception:
        return []
    out: dict[str, str] = {}
    for r in rows:
        if r.key.startswith(incomplete):
            rest = r.key[len(incomplete):]
            cut = rest.find(".", 1 if rest.startswith(".") else 0)
            word = r.key if cut < 0 else r.key[:len(incomplete) + cut + 1]
            out.setdefault(word, f"{r.type} = {r.value} ({r.source})" if word == r.key else "section")
    return list(out.items())


def stage_names(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """Stage names of the recipe (``kit slurm build --stage``)."""
    recipe = ctx.params.get("recipe") or "ultra3"
    return [(s.name, s.summary) for s in STAGES if s.recipe == recipe and s.name.startswith(incomplete)]


__all__ = ["configs", "keys_config", "keys_prefix", "override_words", "overrides", "pipe_words", "profiles",
           "recipe_stages", "stage_names"]
