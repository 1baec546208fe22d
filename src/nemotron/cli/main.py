"""The ``nemotron`` command line, built on Typer.

Every stage command is generated from the registry (:mod:`nemotron.config.registry`); they all take the
same options and go through one function, :func:`nemotron.cli.pipeline.run_stage`. The tree is built with
Typer's own API: ``typer.Typer`` and ``app.command`` over functions whose signatures carry ``typer.Option`` /
``typer.Argument`` in ``Annotated`` (a stage's signature is made from its registry row), ``typer.main.get_command``,
and ``cls=`` subclasses of Typer's ``TyperGroup`` / ``TyperCommand``: :class:`LazyGroup` builds a sub-command when
the command line reaches it (Typer builds a whole tree up front, ~40 commands: too slow for ``--help``), in the
registry's order; :class:`StageCommand` ends a stage's help with the sections read from its files. Typer's help
is the plain formatter (``rich_markup_mode=None``: rich is not imported for ``--help``). This module imports only
Typer and the registry, so ``nemotron --help`` stays fast (``bench/cli_startup.py``); a stage's help sections
(:mod:`nemotron.cli.stagehelp`) and the shell completion (:mod:`nemotron.cli.complete`) are imported when they are
shown or asked for, and everything else when a command runs.
"""


import inspect
import errno
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from nemotron import __version__
from nemotron.config.registry import STAGES, Stage, recipes
from nemotron.errors import NemotronError, UsageError

_GROUP_HELP = {"data": "Data stages.", "prep": "Data preparation: raw text, chat data and RL prompts into training formats."}
_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 200}
_KW = inspect.Parameter.KEYWORD_ONLY


def one_config(value: list[str] | None) -> str | None:
    """``-c`` once: configs are layered inside YAML files (``defaults:``, docs/configs.md), not on the command line,
    so a second ``-c`` is refused instead of silently replacing the first.

    Raises:
        UsageError: ``-c`` given more than once (the message lists the values).
    """
    if value and len(value) > 1:
        raise UsageError(f"-c given {len(value)} times ({', '.join(value)}); a command takes one config",
                         "layer configs in a YAML file with `defaults: [NAME, ...]` and pass it with -c PATH "
                         "(docs/configs.md), or set keys with key=value")
    return value[0] if value else None


def check_profile_names(kwargs: dict[str, Any]) -> None:
    """``--run``/``--batch`` PROFILE: a name, never empty (an empty one would silently run on this machine).
    Checked once every option is parsed, so that the hint's command carries the ``--env-file`` given.

    Raises:
        UsageError: an empty name, or one that starts with ``-`` (an option taken as the name).
    """
    from nemotron.profiles.show import env_file_option

    for option in ("run", "batch"):
        value = kwargs.get(f"{option}_profile")
        if value is not None and (not value.strip() or value.startswith("-")):
            raise UsageError(f"--{option} needs a profile name, got {value!r}",
                             f"list them with: nemotron profiles{env_file_option(kwargs.get('env_file'))} "
                             "(leave the option out to run on this machine)")


def has_estimate(stage: Stage) -> bool:
    """Whether ``stage`` takes the word ``estimate``: the stages whose family :func:`nemotron.cli.costs.run_estimate`
    models (:attr:`nemotron.config.registry.Family.estimate`: the Megatron training stages)."""
    return stage.family.estimate


# ------------------------------------------------------------------------------------------- completion hooks
# Typer calls these with (ctx, args, incomplete) while a shell completes a word; each imports its module then, so
# building the tree costs nothing for them.
def _complete_config(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from nemotron.cli.complete import configs

    return configs(ctx, incomplete)


def _complete_profile(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from nemotron.cli.complete import profiles

    return profiles(ctx, incomplete)


def _complete_overrides(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from nemotron.cli.complete import overrides

    return overrides(ctx, incomplete)


def _complete_pipe_stages(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from nemotron.cli.complete import pipe_words

    return pipe_words(ctx, incomplete)


def _complete_stage_name(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from nemotron.cli.complete import stage_names

    return stage_names(ctx, incomplete)


def _complete_keys_stage(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from nemotron.cli.complete import recipe_stages

    return recipe_stages(ctx, incomplete)


def _complete_keys_prefix(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from nemotron.cli.complete import keys_prefix

    return keys_prefix(ctx, incomplete)


def _complete_keys_config(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from nemotron.cli.complete import keys_config

    return keys_config(ctx, incomplete)


# ------------------------------------------------------------------------------------------------ tree pieces
class _Interrupted(Exception):
    """A Ctrl-C inside a command, carried past Typer (which would turn it into a silent exit 130) to
    :func:`main`, which prints the one ``interrupted`` line."""


class BoolHelp:
    """Typer 0.29's ``--help`` option has no default (None when not given), and Typer coerces every non-bool value
    through a pydantic ``TypeAdapter``: importing pydantic and building one on every command line (~0.1-0.2 s,
    ``bench/cli_startup.py``) only to learn that ``--help`` was not given. Its default here is ``False``, a bool,
    which Typer passes through as it is."""

    def get_help_option(self, ctx: typer.Context) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None and option.default is None:
            option.default = False
        return option


class Command(BoolHelp, TyperCommand):
    """A leaf command (Typer's ``TyperCommand``) with :class:`BoolHelp`."""


class LazyGroup(BoolHelp, TyperGroup):
    """A Typer group whose sub-commands are built when first asked for (:meth:`get_command`), and listed in the
    order they were declared (registry order: pipeline order; Typer itself lists commands before sub-groups).

    ``entries`` maps each name to ``(help, whole, build)``: the help listing shows ``help`` (whole, or its first
    sentence cut to the width) without building anything, so ``nemotron --help`` builds three commands, not the ~40
    of the tree (``bench/cli_startup.py``).
    """

    entries: dict[str, tuple[str, bool, Callable[[], Any]]] = {}

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return [*self.entries, *(n for n in self.commands if n not in self.entries)]

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:  # type: ignore[override]
        if cmd_name not in self.commands and cmd_name in self.entries:
            self.commands[cmd_name] = self.entries[cmd_name][2]()
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: typer.Context, formatter: Any) -> None:  # type: ignore[override]
        names = self.list_commands(ctx)
        if names:
            limit = formatter.width - 6 - max(map(len, names))
            rows = []
            for n in names:
                text, whole = self.entries[n][:2] if n in self.entries else (self.commands[n].help or "", False)
                rows.append((n, " ".join(text.split()) if whole else short_help(text, limit)))
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted(str(exc)) from None


def short_help(text: str, limit: int = 45) -> str:
    """The first sentence of ``text`` (its first paragraph when that ends the sentence), cut at a word to
    ``limit`` characters with ``...``, as a help listing shows it."""
    para = " ".join(text.strip().split("\n\n", 1)[0].split())
    first = para.split(". ", 1)[0].rstrip(".")
    if len(first) <= limit:
        return first + ("." if para.endswith(".") or ". " in para else "")
    return first[: max(limit - 3, 1)].rsplit(" ", 1)[0].rstrip(",;:") + "..."


class StageCommand(BoolHelp, TyperCommand):
    """A stage's command: its help ends with the sections read from its files (:mod:`nemotron.cli.stagehelp`):
    configs, every config key with type, default and description, artifact inputs, profiles and examples."""

    stage: Stage

    def format_epilog(self, ctx: typer.Context, formatter: Any) -> None:  # type: ignore[override]
        from nemotron.cli.stagehelp import stage_sections

        for line in stage_sections(self.stage, formatter.width):
            formatter.write(f"{line}\n" if line else "\n")


def _show_help_if_bare(ctx: typer.Context) -> None:
    """A group called without a sub-command prints its help (exit 0), as ``--help`` would."""
    if ctx.invoked_subcommand is None and not ctx.resilient_parsing:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def _leaf(name: str, func: Callable[..., Any], kw: dict[str, Any]) -> Any:
    """One command, built by Typer from ``func``'s signature (``app.command`` on an app of its own)."""
    app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)
    app.command(name, context_settings=_CONTEXT, **{"cls": Command, **kw})(func)
    return typer.main.get_command(app)


class Tree:
    """A command group as declared: its help, callback and entries (sub-groups and commands, in order).
    :meth:`build` makes the Typer group; each entry is built by Typer when the command line reaches it."""

    def __init__(self, name: str, help_text: str, callback: Callable[..., Any] = _show_help_if_bare) -> None:
        self.name, self.help, self.callback = name, help_text, callback
        self.fill: Callable[[Tree], None] | None = None
        self.entries: dict[str, tuple[str, bool, Callable[[], Any]]] = {}
        self.groups: dict[str, Tree] = {}

    def group(self, name: str, help_text: str, fill: Callable[["Tree"], None] | None = None) -> "Tree":
        """The sub-group ``name``, declared on first use. ``fill(group)`` declares its entries when it is built
        (a recipe's ~25 commands are not even declared for ``nemotron --help``)."""
        if name not in self.groups:
            self.groups[name] = Tree(name, help_text)
            self.entries[name] = (help_text, False, self.groups[name].build)
        if fill is not None:
            self.groups[name].fill = fill
        return self.groups[name]

    def command(self, name: str, short: str | None = None, **kw: Any) -> Callable[[Callable[..., Any]], Any]:
        """Declare command ``name`` (``app.command(name, **kw)`` on the decorated function, when it is built)."""
        def declare(func: Callable[..., Any]) -> Callable[..., Any]:
            self.lazy(name, short or kw.get("help") or func.__doc__ or "", lambda: func, whole=short is not None, **kw)
            return func

        return declare

    def lazy(self, name: str, short: str, make: Callable[[], Callable[..., Any]], whole: bool = False,
             **kw: Any) -> None:
        """Declare command ``name`` whose function ``make()`` returns when the command is built; ``short`` is its
        line in the group's listing (``whole``: shown whole, else its first sentence)."""
        self.entries[name] = (short, whole, lambda: _leaf(name, make(), kw))

    def build(self) -> TyperGroup:
        """The group, as Typer builds it (``typer.main.get_command`` of a ``typer.Typer`` with this group's
        callback; ``cls`` is a :class:`LazyGroup` over this group's entries)."""
        if self.fill is not None:
            fill, self.fill = self.fill, None
            fill(self)
        cls = type("LazyGroup", (LazyGroup,), {"entries": self.entries})
        app = typer.Typer(name=self.name, help=self.help, cls=cls,
                          context_settings=_CONTEXT, rich_markup_mode=None, add_completion=False,
                          pretty_exceptions_enable=False, invoke_without_command=True, callback=self.callback)
        return typer.main.get_command(app)  # type: ignore[return-value]


def _opt(name: str, annotation: Any, default: Any, *decls: str, **kw: Any) -> inspect.Parameter:
    return inspect.Parameter(name, _KW, default=default, annotation=Annotated[annotation, typer.Option(*decls, **kw)])


def _stage_parameters(stage: Stage) -> list[inspect.Parameter]:
    """The stage command's parameters, as a signature Typer reads (``typer.Option`` / ``typer.Argument``)."""
    estimate = has_estimate(stage)
    params = [
        _opt("config", Optional[list[str]], None, "-c", "--config", metavar="NAME|PATH",
             autocompletion=_complete_config,
             help="Config of the stage (default, tiny, local, ...; listed below) or a YAML file; default: default."),
        _opt("run_profile", Optional[str], None, "--run", metavar="PROFILE", autocompletion=_complete_profile,
             help="Run attached on this env.toml profile: stream logs, exit with the job's result."),
        _opt("batch_profile", Optional[str], None, "--batch", metavar="PROFILE", autocompletion=_complete_profile,
             help="Submit detached on this env.toml profile and print the job id."),
        _opt("dry_run", bool, False, "--dry-run",
             help="Compile, validate and show the config, resources and exact job; submit nothing. "
                  "Its verdict comes first, then the details."),
        _opt("quiet", bool, False, "-q", "--quiet",
             help="With --dry-run: print the verdict alone (and the errors); the exit code is the same."),
        _opt("env_file", Optional[str], None, "--env-file", metavar="PATH",
             help="env.toml to read profiles from (default: $NEMOTRON_ENV_FILE, ./env.toml upward, "
                  "~/.config/nemotron/env.toml)."),
        _opt("debug", bool, False, "--debug", help="Show tracebacks."),
        _opt("latest", bool, False, "--latest",
             help="Make this run's output the latest for its consumers even when it is written outside the "
                  "default output folders (a scratch output_dir=); without it such an output is taken only "
                  "when pinned by version."),
        _opt("json", bool, False, "--json",
             help=f"With --dry-run{' or estimate' if estimate else ''}: one JSON document on stdout (docs/schema/)."),
    ]
    if stage.family.compare:
        params.append(_opt("compare", Optional[tuple[str, str]], None, "--compare", metavar="A B",
                           help="Print the deltas of two eval results (eval.json, its folder, or eval-results[:vN]); "
                                "runs nothing."))
    what = "Overrides: key=value (must exist), +key=value (add), ~key (delete); every key is listed below" + (
        "; the word estimate first prints the run's cost instead of running it" if estimate else "") + "."
    params.append(inspect.Parameter("overrides", _KW, default=None, annotation=Annotated[
        Optional[list[str]], typer.Argument(metavar="estimate|KEY=VALUE" if estimate else "KEY=VALUE",
                                            show_default=False, autocompletion=_complete_overrides, help=what)]))
    return params


def _stage_callback(stage: Stage) -> Callable[..., int]:
    def callback(**kwargs: Any) -> int:
        from nemotron.cli.pipeline import StageRequest, run_stage

        kwargs["config"] = one_config(kwargs.get("config"))
        compare = kwargs.pop("compare", None)
        if compare:  # eval --compare A B: a table of the deltas of two eval.json, nothing runs
            from nemotron.runtime.eval.evaluate import CompareError
            from nemotron.runtime.eval.evaluate import compare as compare_results

            try:
                return compare_results(*compare)
            except CompareError as exc:
                raise UsageError(str(exc), "A and B: eval.json files, their folders, or eval-results[:vN] "
                                           "(append #LABEL for one checkpoint)") from None
        check_profile_names(kwargs)
        if not has_estimate(stage) and "estimate" in (kwargs.get("overrides") or ()):
            offered = ", ".join(" ".join(s.command) for s in STAGES if s.recipe == stage.recipe and has_estimate(s))
            raise UsageError(f"{stage.title} has no estimate: the word estimate is for the Megatron training stages "
                             f"({offered})", f"e.g. nemotron {stage.recipe} {offered.split(', ')[0]} -c tiny estimate; "
                             f"or see this stage's plan with: nemotron {stage.recipe} {' '.join(stage.command)} "
                             "--dry-run")
        req = StageRequest.from_cli(stage, kwargs)
        if req.estimate or (req.json and req.dry_run):  # the estimate report, the dry run as JSON
            from nemotron.cli.estimate import run_report

            return run_report(req)
        return run_stage(req)

    signature = inspect.Signature(_stage_parameters(stage), return_annotation=int)
    callback.__signature__ = signature  # type: ignore[attr-defined]
    callback.__name__ = stage.name.replace("-", "_")
    return callback


def _add_stage(parent: Tree, stage: Stage) -> None:
    help_text = (
        f"{stage.summary}\n\nConsumes: {', '.join(stage.consumes) or 'raw inputs'}. "
        f"Produces: {', '.join(stage.produces)}. Launch: {stage.launch}.\n\n"
        "Overrides set config keys: key=value (must exist), +key=value (add), ~key (delete), "
        "list[0]=value; profile.KEY=VALUE overrides a profile key for this command."
        + ("\n\nThe word estimate (after the options) prints the run's step time, GPU-hours, jobs and checkpoint "
           "bytes instead of running it (docs/estimate.md)." if has_estimate(stage) else "")
    )
    cls = type("StageCommand", (StageCommand,), {"stage": stage})
    parent.lazy(stage.command[-1], stage.summary, lambda: _stage_callback(stage), whole=True, cls=cls,
                help=help_text, short_help=stage.summary)


# ------------------------------------------------------------------------------------------------- the tree
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout (docs/schema/).")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks.")]
EnvFileOpt = Annotated[Optional[str], typer.Option("--env-file", metavar="PATH",
                                                   help="env.toml to read profiles from.")]
IdentArg = Annotated[Optional[str], typer.Argument(metavar="[ID]", show_default=False)]


def _recipe_tree(tree: Tree, recipe: str) -> None:
    """Declare the commands of ``recipe``'s group: its stages (from the registry), then the job and data tools."""
    for stage in (s for s in STAGES if s.recipe == recipe):
        parent = tree
        for word in stage.command[:-1]:
            parent = parent.group(word, _GROUP_HELP.get(word, f"{word} stages."))
        _add_stage(parent, stage)

    @tree.command("list")
    def list_stages(as_json: JsonOpt = False) -> int:
        """List the stages, their configs and what each consumes and produces (--json: docs/schema/list.schema.json)."""
        from nemotron.cli.pipeline import list_stages as show

        return show(recipe, as_json)

    @tree.command("keys")
    def keys(
        stage: Annotated[str, typer.Argument(metavar="STAGE", show_default=False,
                                             autocompletion=_complete_keys_stage)],
        prefix: Annotated[Optional[list[str]], typer.Argument(metavar="[PREFIX]", show_default=False,
                                                              autocompletion=_complete_keys_prefix)] = None,
        config: Annotated[Optional[list[str]], typer.Option(
            "-c", "--config", metavar="NAME|PATH", autocompletion=_complete_keys_config,
            help="Config of the stage (default: default) or a YAML file.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout "
                                                             "(docs/schema/keys.schema.json).")] = False,
        debug: DebugOpt = False,
    ) -> int:
        """Every key of a stage's config, NeMo RL recipe included: type, value and the layer that set it.

        The merged tree of STAGE -c NAME: the NeMo RL recipe nemo_rl.base names (rlvr, mopd: hundreds of keys
        the stage's --help only counts), default.yaml and the -c file; PREFIX keeps the keys that start with
        it, e.g. nemotron ultra3 keys rlvr policy.megatron_cfg.optimizer. STAGE is the stage's name
        (data-prep-pretrain) or its command words (data prep pretrain).
        """
        from nemotron.cli.keys import show_keys, stage_words

        name, start = stage_words(recipe, [stage, *(prefix or [])])  # `keys data prep pretrain [PREFIX]` too
        return show_keys(recipe, name, one_config(config), start, as_json)

    @tree.command("status")
    def status(ident: IdentArg = None, as_json: JsonOpt = False, debug: DebugOpt = False) -> int:
        """State of a submitted job (experiment id or Slurm job id; default: the most recent)."""
        from nemotron.cli.pipeline import job_status

        return job_status(ident, as_json)

    @tree.command("jobs")
    def jobs_list(as_json: JsonOpt = False, debug: DebugOpt = False) -> int:
        """List the jobs submitted from this machine, newest first: id, stage, config, profile, state, run folder."""
        from nemotron.cli.pipeline import job_list

        return job_list(recipe, as_json)

    @tree.command("artifacts")
    def artifacts_list(
        target: Annotated[Optional[str], typer.Argument(
            metavar="KIND[:vN]", show_default=False,
            help="An artifact kind (pretrain-data, pretrain-checkpoint, ...), or one version of it (KIND:vN).")] = None,
        config: Annotated[Optional[list[str]], typer.Option(
            "-c", "--config", metavar="NAME",
            help="With KIND: the versions a run with -c NAME takes (local takes tiny's data too).")] = None,
        lineage: Annotated[bool, typer.Option(
            "--lineage", help="With KIND[:vN]: the chain upstream of that version (default: the latest), each "
                              "input and its inputs, down to the data.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout "
                                                             "(docs/schema/artifacts.schema.json).")] = False,
        env_file: Annotated[Optional[str], typer.Option(
            "--env-file", metavar="PATH", help="env.toml whose [artifacts] root holds the records.")] = None,
        debug: DebugOpt = False,
    ) -> int:
        """What the runs recorded: versions, what made them, inputs, consumers, lineage.

        Without KIND: one row per kind and config (latest version, count, made when/by what, path). With KIND:
        every version (path, exists here, made by, inputs, consumers). KIND[:vN] --lineage: the chain upstream.
        """
        from nemotron.cli.lineage import show

        return show(recipe, target, one_config(config), lineage, as_json, env_file)

    from nemotron.cli.tools import add_recipe_tools

    add_recipe_tools(tree, _CONTEXT)
    from nemotron.cli.imports import add_import_commands

    add_import_commands(tree)

    @tree.command("logs")
    def logs(ident: IdentArg = None,
             follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep streaming until the job ends.")] = False,
             debug: DebugOpt = False) -> int:
        """Logs of a submitted job (default: the most recent)."""
        from nemotron.cli.pipeline import job_logs

        return job_logs(ident, follow)

    @tree.command("cancel")
    def cancel(ident: Annotated[str, typer.Argument(metavar="ID", show_default=False)], debug: DebugOpt = False) -> int:
        """Cancel a submitted job (experiment id or Slurm job id)."""
        from nemotron.cli.pipeline import job_cancel

        return job_cancel(ident)

    @tree.command("pipe")
    def pipe(
        stages: Annotated[Optional[list[str]], typer.Argument(
            metavar="[STAGE...] [STAGE[#K]:key=value...]", show_default=False,
            autocompletion=_complete_pipe_stages)] = None,
        config: Annotated[Optional[list[str]], typer.Option(
            "-c", "--config", metavar="NAME", help="Config name used for every stage (default: default).")] = None,
        run_profile: Annotated[Optional[str], typer.Option(
            "--run", metavar="PROFILE", autocompletion=_complete_profile,
            help="Run the chain attached on this profile.")] = None,
        batch_profile: Annotated[Optional[str], typer.Option(
            "--batch", metavar="PROFILE", autocompletion=_complete_profile,
            help="Submit the chain detached on this profile.")] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the whole chain; submit nothing. The chain's "
                                              "verdict comes first, then each stage's report.")] = False,
        quiet: Annotated[bool, typer.Option("-q", "--quiet", help="With --dry-run: the verdicts alone (and the "
                                            "errors).")] = False,
        env_file: EnvFileOpt = None,
        gates: Annotated[Optional[str], typer.Option(
            "--gates", metavar="PATH", help="YAML of per-stage gates ({stage: {metric: {max|min|max_drop: X}}}): a "
                                            "failed one stops the chain run here.")] = None,
        debug: DebugOpt = False,
    ) -> int:
        """Run several stages in order, each consuming the artifacts of the one before.

        STAGE names: data-prep-pretrain, pretrain, sft, ... (all stages when none given, but those the -c cannot run:
        a note names each); a stage named again runs its next cycle (pipe mopd mopd: -c cycle2 for the second).
        Per-stage overrides: STAGE:key=value sets every run of STAGE (all its cycles), e.g.
        pretrain:train.global_batch_size=8; STAGE#K:key=value sets its K-th run only, e.g. mopd#2:grpo.seed=7.
        """
        from nemotron.cli.pipeline import run_pipe

        kwargs = {"stages": stages, "config": one_config(config), "run_profile": run_profile,
                  "batch_profile": batch_profile, "dry_run": dry_run, "quiet": quiet, "env_file": env_file,
                  "gates": gates, "debug": debug}
        check_profile_names(kwargs)
        return run_pipe(recipe, kwargs)


def _show_version(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        typer.echo(f"nemotron {__version__}")
        raise typer.Exit(0)


def _install_completion(ctx: typer.Context, param: typer.CallbackParam, value: bool) -> Any:
    if value and not ctx.resilient_parsing:
        from typer.completion import install_callback

        return install_callback(ctx, param, value)  # writes the script for the shell it detects, exits 0
    return value


def _show_completion(ctx: typer.Context, param: typer.CallbackParam, value: bool) -> Any:
    if value and not ctx.resilient_parsing:
        from typer.completion import show_callback

        return show_callback(ctx, param, value)  # prints the script for the shell it detects, exits 0
    return value


def _root_callback(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", is_eager=True, expose_value=False, callback=_show_version,
                                          help="Show the version and exit.")] = False,
    install_completion: Annotated[bool, typer.Option(
        "--install-completion", expose_value=False, callback=_install_completion,
        help="Install completion for the current shell (bash, zsh, fish, PowerShell): stages, -c names, profiles, "
             "config keys.")] = False,
    show_completion: Annotated[bool, typer.Option(
        "--show-completion", expose_value=False, callback=_show_completion,
        help="Show completion for the current shell, to copy it or customize the installation.")] = False,
) -> None:
    # Typer's own --install-completion/--show-completion (add_completion=True) default to None, and Typer coerces a
    # non-bool value through pydantic, imported and built for every command then (~0.1-0.2 s); these are the same
    # options as bool flags, calling Typer's own callbacks.
    _show_help_if_bare(ctx)


def build_tree() -> Tree:
    """The root group as declared: the recipe groups from the registry, ``kit`` and ``profiles``; with
    ``--install-completion`` / ``--show-completion`` (Typer's; :mod:`nemotron.cli.complete` answers the shell)."""
    root = Tree("nemotron", "Train Nemotron 3 Ultra: data prep, pretrain, SFT, RL, distillation and quantization as "
                "one staged pipeline on Slurm (NeMo-Run).", callback=_root_callback)
    for recipe in recipes():
        root.group(recipe, f"Nemotron 3 Ultra pipeline stages ({recipe}).",
                   fill=lambda tree, recipe=recipe: _recipe_tree(tree, recipe))

    slurm = root.group("kit", "Tools around the pipeline.").group("slurm", "Slurm tools.")

    @slurm.command("build")
    def build(
        profile: Annotated[Optional[str], typer.Argument(show_default=False, autocompletion=_complete_profile)] = None,
        recipe: Annotated[str, typer.Option("--recipe", help="Recipe of the stage.")] = "ultra3",
        stage_name: Annotated[Optional[str], typer.Option(
            "--stage", autocompletion=_complete_stage_name,
            help="Stage whose image to build (e.g. pretrain, data-prep-sft); default: every image the recipe's "
                 "stages use.")] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the build job; submit nothing.")] = False,
        env_file: EnvFileOpt = None,
        debug: DebugOpt = False,
    ) -> int:
        """Build stage container images on a compute node (podman + enroot) into the profile's image_cache
        (default: its job_dir/images). PROFILE defaults to the env.toml's only Slurm profile."""
        from nemotron.launch.kit import slurm_build

        return slurm_build(profile, recipe, stage_name, env_file, dry_run)

    @root.command("profiles")
    def profiles(
        name: Annotated[Optional[str], typer.Argument(show_default=False, autocompletion=_complete_profile)] = None,
        env_file: Annotated[Optional[str], typer.Option(
            "--env-file", metavar="PATH", help="env.toml to read (default: discovery order).")] = None,
        as_json: Annotated[bool, typer.Option(
            "--json", help="One JSON document on stdout (docs/schema/profiles.schema.json).")] = False,
        debug: DebugOpt = False,
    ) -> int:
        """List env.toml profiles, or show one fully resolved (secrets redacted)."""
        from nemotron.cli.pipeline import show_profiles

        return show_profiles(name, env_file, as_json)

    return root


def build_cli() -> TyperGroup:
    """The root command as Typer builds it (:meth:`Tree.build`); sub-commands are built as they are reached."""
    return build_tree().build()


def _fail(message: str, hint: str | None, code: int) -> int:
    from nemotron.report import readable  # a long message is broken at its clauses, nothing dropped

    typer.echo(readable(f"error: {message}"), err=True)
    if hint:
        typer.echo(readable(f"hint: {hint}"), err=True)
    return code


def undecodable_argument(arg: str) -> str | None:
    """Why the command-line word ``arg`` is not UTF-8 (``not UTF-8 (byte 0xff at byte offset 13)``), None when it is.

    Python hands bytes of ``argv`` that are not UTF-8 over as lone surrogates (``U+DC80``-``U+DCFF``, PEP 383); such
    a word cannot be written to a YAML config, a JSON record or the terminal, whether it is a ``KEY=VALUE`` override,
    a ``-c`` path or an option's value.
    """
    if not any("\udc80" <= ch <= "\udcff" for ch in arg):
        return None
    raw = os.fsencode(arg)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {raw[exc.start]:#04x} at byte offset {exc.start})"
    return "not UTF-8"


def _refuse_undecodable(args: list[str]) -> None:
    """Refuse a command line with a word that is not UTF-8 (:func:`undecodable_argument`), naming the word with its
    bytes escaped (``\\xff``) and, for an override, its key.

    Raises:
        UsageError: the first such word (exit 2).
    """
    for arg in args:
        why = undecodable_argument(arg)
        if why is None:
            continue
        shown = os.fsencode(arg).decode("utf-8", "backslashreplace")
        key, eq, _ = arg.partition("=")
        if eq and not arg.startswith("-"):
            raise UsageError(f"override '{shown}': {why}",
                             f"give {os.fsencode(key).decode('utf-8', 'backslashreplace')}'s value in UTF-8 (a folder "
                             "with a Latin-1 name: rename it, e.g. convmv -f latin1 -t utf8, or link to it from a "
                             "UTF-8 name)")
        raise UsageError(f"argument '{shown}': {why}",
                         "give paths and names in UTF-8 (a file with a Latin-1 name: rename it, e.g. convmv -f latin1 "
                         "-t utf8, or link to it from a UTF-8 name)")


def _usage_error(exc: typer.TyperException) -> int:
    """A usage error Typer found while parsing (its ``ctx`` names the command): one line and a hint."""
    ctx = getattr(exc, "ctx", None)
    cmd = ctx.command_path if ctx is not None else "nemotron"
    option = getattr(exc, "option_name", None)
    if option is not None and hasattr(exc, "possibilities"):  # an unknown option
        close = list(getattr(exc, "possibilities", None) or ())
        hint = f"did you mean {close[0]}? " if close else ""
        return _fail(f"no such option {option} for '{cmd}'", f"{hint}see: {cmd} --help", 2)
    import re

    # Click lists a Choice's values one per line, each after a tab ("Choose from:\n\tpretrain-data,\n\t..."): one line
    msg = re.sub(r"\s+", " ", exc.format_message()).strip()
    hint = f"see: {cmd} --help"

    unknown = re.fullmatch(r"No such command '([^']*)'\.", msg)
    group = ctx.command if ctx is not None else None
    if unknown and group is not None and hasattr(group, "list_commands"):  # a mistyped stage or command word
        import difflib

        close = difflib.get_close_matches(unknown.group(1), group.list_commands(ctx), n=1, cutoff=0.6)
        if close:
            hint = f"did you mean '{close[0]}'? {hint}"
    return _fail(msg[0].lower() + msg[1:] if msg else "usage error", hint, 2)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nemotron`` console script. Returns the process exit code:
    0 success, 2 usage/config/validation error, 1 runtime/submission failure, 130 Ctrl-C.
    A shell asking for completions (``_NEMOTRON_COMPLETE`` set) gets them and the process exits 0 there."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("NEMOTRON_DEBUG") == "1"
    try:
        if os.environ.get("_NEMOTRON_COMPLETE"):  # a shell asks for completions: Typer's protocol (bash, zsh, ...)
            from typer.completion import completion_init

            from nemotron.cli.complete import glue_bash_break

            glue_bash_break()  # bash's `KEY=<TAB>` / `STAGE:<TAB>`: the answers go after the = or :
            completion_init()
        _refuse_undecodable(args)
        cli = build_cli()
        rv = cli.main(args=args, prog_name="nemotron", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except typer.Exit as exc:
        return exc.exit_code
    except (_Interrupted, typer.Abort, KeyboardInterrupt) as exc:  # Ctrl-C: one line (children stay quiet)
        detail = str(exc) if isinstance(exc, _Interrupted) else ""
        start = "\n" if sys.stderr.isatty() else ""  # end the terminal's ^C echo first
        typer.echo(f"{start}interrupted: {detail}" if detail else f"{start}interrupted", err=True)
        return 130
    except NemotronError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        return _fail(exc.message, exc.hint, exc.exit_code)
    except typer.TyperException as exc:  # Typer's parse errors (its ClickException and UsageError derive from it)
        if getattr(exc, "exit_code", 2) == 2 or getattr(exc, "ctx", None) is not None:
            return _usage_error(exc)
        return _fail(exc.format_message(), None, getattr(exc, "exit_code", 1))
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG or debug:
            return _internal(exc, debug)
        # a path given on the command line (-c FILE, --env-file, model import, data inspect ...) whose name the
        # file system refuses: the whole kind, wherever the path is first used (a config key's own path is refused
        # earlier, by key: rule path-name-length)
        path = str(exc.filename or "")
        shown = path if len(path) <= 60 else f"{path[:40]}...{path[-12:]}"
        return _fail(f"{shown}: a file or folder name in this path is longer than the file system takes (at most "
                     "255 bytes per name)", "give a path whose every name is at most 255 bytes", 2)
    except Exception as exc:  # an unexpected failure: one line, the traceback with --debug
        return _internal(exc, debug)


def _internal(exc: BaseException, debug: bool) -> int:
    """An unexpected failure: one line (exit 1), the traceback with ``--debug``."""
    if debug:
        raise exc
    return _fail(f"internal error: {type(exc).__name__}: {exc}", "run again with --debug for the traceback", 1)


__all__ = ["UsageError", "build_tree", "build_cli", "main"]

