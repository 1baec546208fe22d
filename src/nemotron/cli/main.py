"""The ``nemotron`` command line.

Every stage command is generated from the registry (:mod:`nemotron.config.registry`); they all take the
same options and go through one function, :func:`nemotron.cli.pipeline.run_stage`. This module imports
only click and the registry, so ``nemotron --help`` stays fast; everything else is imported when a
command runs.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from nemotron import __version__
from nemotron.config.registry import STAGES, Stage, recipes
from nemotron.errors import NemotronError, UsageError

_GROUP_HELP = {"data": "Data stages.", "prep": "Data preparation: raw text, chat data and RL prompts into training formats."}
_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


def _one_config(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> str | None:
    """``-c`` once: configs are layered inside YAML files (``defaults:``, docs/configs.md), not on the command line,
    so a second ``-c`` is refused instead of silently replacing the first."""
    if len(value) > 1:
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


def _stage_params(stage: Stage) -> list[click.Parameter]:
    estimate = has_estimate(stage)
    return [
        click.Option(["-c", "--config"], metavar="NAME|PATH", multiple=True, callback=_one_config,
                     help="Config of the stage (default, tiny, local, ...) or a YAML file; default: default."),
        click.Option(["--run", "run_profile"], metavar="PROFILE",
                     help="Run attached on this env.toml profile: stream logs, exit with the job's result."),
        click.Option(["--batch", "batch_profile"], metavar="PROFILE",
                     help="Submit detached on this env.toml profile and print the job id."),
        click.Option(["--dry-run"], is_flag=True,
                     help="Compile, validate and show the config, resources and exact job; submit nothing. "
                          "Its verdict comes first, then the details."),
        click.Option(["-q", "--quiet"], is_flag=True,
                     help="With --dry-run: print the verdict alone (and the errors); the exit code is the same."),
        click.Option(["--env-file"], metavar="PATH",
                     help="env.toml to read profiles from (default: $NEMOTRON_ENV_FILE, ./env.toml upward, "
                          "~/.config/nemotron/env.toml)."),
        click.Option(["--debug"], is_flag=True, help="Show tracebacks."),
        click.Option(["--latest"], is_flag=True,
                     help="Make this run's output the latest for its consumers even when it is written outside the "
                          "default output folders (a scratch output_dir=); without it such an output is taken only "
                          "when pinned by version."),
        click.Option(["--json"], is_flag=True,
                     help=f"With --dry-run{' or estimate' if estimate else ''}: one JSON document on stdout "
                          "(docs/schema/)."),
        click.Argument(["overrides"], nargs=-1,
                       metavar=f"{'[estimate] ' if estimate else ''}[key=value | +key=value | ~key]..."),
    ]


def _stage_command(stage: Stage) -> click.Command:
    def callback(**kwargs: Any) -> int:
        from nemotron.cli.pipeline import StageRequest, run_stage

        compare = kwargs.pop("compare", None)
        if compare:  # eval --compare A B: a table of the deltas of two eval.json, nothing runs
            from nemotron.runtime.evaluate import CompareError
            from nemotron.runtime.evaluate import compare as compare_results

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

    help_text = (
        f"{stage.summary}\n\nConsumes: {', '.join(stage.consumes) or 'raw inputs'}. "
        f"Produces: {', '.join(stage.produces)}. Launch: {stage.launch}.\n\n"
        "Overrides set config keys: key=value (must exist), +key=value (add), ~key (delete), "
        "list[0]=value; profile.KEY=VALUE overrides a profile key for this command."
        + ("\n\nThe word estimate (after the options) prints the run's step time, GPU-hours, jobs and checkpoint "
           "bytes instead of running it (docs/estimate.md)." if has_estimate(stage) else "")
    )
    params = _stage_params(stage)
    if stage.family.compare:
        params.insert(-1, click.Option(["--compare"], nargs=2, metavar="A B",
                                       help="Print the deltas of two eval results (eval.json, its folder, or "
                                            "eval-results[:vN]); runs nothing."))
    return click.Command(stage.command[-1], params=params, callback=callback, help=help_text,
                         short_help=stage.summary, context_settings=_CONTEXT, no_args_is_help=False)


class _Interrupted(Exception):
    """A Ctrl-C inside a command, carried past click (which would print a blank line and drop the detail)
    to :func:`main`, which prints the one ``interrupted`` line."""


class _OrderedGroup(click.Group):
    """Lists sub-commands in pipeline order (registry order), not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted(str(exc)) from None


def _group(name: str, help_text: str) -> click.Group:
    return _OrderedGroup(name, help=help_text, context_settings=_CONTEXT, no_args_is_help=True)


def _recipe_group(recipe: str) -> click.Group:
    group = _group(recipe, f"Nemotron 3 Ultra pipeline stages ({recipe}).")
    for stage in (s for s in STAGES if s.recipe == recipe):
        parent = group
        for word in stage.command[:-1]:
            sub = parent.commands.get(word)
            if sub is None:
                sub = _group(word, _GROUP_HELP.get(word, f"{word} stages."))
                parent.add_command(sub)
            parent = sub  # type: ignore[assignment]
        parent.add_command(_stage_command(stage))

    @group.command("list", context_settings=_CONTEXT)
    @click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout (docs/schema/list.schema.json).")
    def list_stages(as_json: bool) -> int:
        """List the stages, their configs and what each consumes and produces."""
        from nemotron.cli.pipeline import list_stages as show

        return show(recipe, as_json)

    @group.command("status", context_settings=_CONTEXT)
    @click.argument("ident", required=False, metavar="[ID]")
    @click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout (docs/schema/status.schema.json).")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    def status(ident: str | None, as_json: bool, debug: bool) -> int:
        """State of a submitted job (experiment id or Slurm job id; default: the most recent)."""
        from nemotron.cli.pipeline import job_status

        return job_status(ident, as_json)

    @group.command("jobs", context_settings=_CONTEXT)
    @click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout (docs/schema/jobs.schema.json).")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    def jobs_list(as_json: bool, debug: bool) -> int:
        """List the jobs submitted from this machine, newest first: id, stage, config, profile, state, run folder."""
        from nemotron.cli.pipeline import job_list

        return job_list(recipe, as_json)

    from nemotron.cli.tools import add_recipe_tools

    add_recipe_tools(group, recipe, _CONTEXT)
    from nemotron.cli.imports import add_import_commands

    add_import_commands(group, _CONTEXT, _group)

    @group.command("logs", context_settings=_CONTEXT)
    @click.argument("ident", required=False, metavar="[ID]")
    @click.option("-f", "--follow", is_flag=True, help="Keep streaming until the job ends.")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    def logs(ident: str | None, follow: bool, debug: bool) -> int:
        """Logs of a submitted job (default: the most recent)."""
        from nemotron.cli.pipeline import job_logs

        return job_logs(ident, follow)

    @group.command("cancel", context_settings=_CONTEXT)
    @click.argument("ident", metavar="ID")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    def cancel(ident: str, debug: bool) -> int:
        """Cancel a submitted job (experiment id or Slurm job id)."""
        from nemotron.cli.pipeline import job_cancel

        return job_cancel(ident)

    @group.command("pipe", context_settings=_CONTEXT)
    @click.argument("stages", nargs=-1, metavar="[STAGE...] [STAGE:key=value...]")
    @click.option("-c", "--config", metavar="NAME", multiple=True, callback=_one_config,
                  help="Config name used for every stage (default: default).")
    @click.option("--run", "run_profile", metavar="PROFILE",
                  help="Run the chain attached on this profile.")
    @click.option("--batch", "batch_profile", metavar="PROFILE",
                  help="Submit the chain detached on this profile.")
    @click.option("--dry-run", is_flag=True, help="Show the whole chain; submit nothing. The chain's verdict comes "
                  "first, then each stage's report.")
    @click.option("-q", "--quiet", is_flag=True, help="With --dry-run: the verdicts alone (and the errors).")
    @click.option("--env-file", metavar="PATH", help="env.toml to read profiles from.")
    @click.option("--gates", metavar="PATH",
                  help="YAML of per-stage gates ({stage: {metric: {max|min|max_drop: X}}}): a failed one stops the "
                       "chain run here.")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    def pipe(**kwargs: Any) -> int:
        """Run several stages in order, each consuming the artifacts of the one before.

        STAGE names: data-prep-pretrain, pretrain, sft, ... (all stages when none given).
        Per-stage overrides: STAGE:key=value, e.g. pretrain:train.global_batch_size=8.
        """
        from nemotron.cli.pipeline import run_pipe

        check_profile_names(kwargs)
        return run_pipe(recipe, kwargs)

    return group


def build_cli() -> click.Group:
    """The root command group. Commands are built from the registry; a stage whose command cannot be
    built raises here instead of silently disappearing from the tree."""
    root = _group("nemotron", "Train Nemotron 3 Ultra: data prep, pretrain, SFT, RL, distillation and "
                  "quantization as one staged pipeline on Slurm (NeMo-Run).")

    def show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(f"nemotron {__version__}")
            ctx.exit(0)

    root.params.append(click.Option(["--version"], is_flag=True, expose_value=False, is_eager=True,
                                    callback=show_version, help="Show the version and exit."))
    for recipe in recipes():
        root.add_command(_recipe_group(recipe))

    kit = _group("kit", "Tools around the pipeline.")
    slurm = _group("slurm", "Slurm tools.")
    kit.add_command(slurm)
    root.add_command(kit)

    @slurm.command("build", context_settings=_CONTEXT)
    @click.argument("profile", required=False)
    @click.option("--recipe", default="ultra3", show_default=True, help="Recipe of the stage.")
    @click.option("--stage", "stage_name", help="Stage whose image to build (e.g. pretrain, data-prep-sft); "
                  "default: every image the recipe's stages use.")
    @click.option("--dry-run", is_flag=True, help="Show the build job; submit nothing.")
    @click.option("--env-file", metavar="PATH", help="env.toml to read profiles from.")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    def build(profile: str | None, recipe: str, stage_name: str | None, dry_run: bool, env_file: str | None,
              debug: bool) -> int:
        """Build stage container images on a compute node (podman + enroot) into the profile's image_cache
        (default: its job_dir/images). PROFILE defaults to the env.toml's only Slurm profile."""
        from nemotron.launch.kit import slurm_build

        return slurm_build(profile, recipe, stage_name, env_file, dry_run)

    @root.command("profiles", context_settings=_CONTEXT)
    @click.argument("name", required=False)
    @click.option("--env-file", metavar="PATH", help="env.toml to read (default: discovery order).")
    @click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout (docs/schema/profiles.schema.json).")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    def profiles(name: str | None, env_file: str | None, as_json: bool, debug: bool) -> int:
        """List env.toml profiles, or show one fully resolved (secrets redacted)."""
        from nemotron.cli.pipeline import show_profiles

        return show_profiles(name, env_file, as_json)

    return root


def _fail(message: str, hint: str | None, code: int) -> int:
    from nemotron.report import readable  # a long message is broken at its clauses, nothing dropped

    click.echo(readable(f"error: {message}"), err=True)
    if hint:
        click.echo(readable(f"hint: {hint}"), err=True)
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nemotron`` console script. Returns the process exit code:
    0 success, 2 usage/config/validation error, 1 runtime/submission failure, 130 Ctrl-C."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("NEMOTRON_DEBUG") == "1"
    try:
        cli = build_cli()
        rv = cli.main(args=args, prog_name="nemotron", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except click.exceptions.NoArgsIsHelpError as exc:  # a bare group: its help, not an error
        click.echo(exc.ctx.get_help() if exc.ctx else "")
        return 0
    except click.exceptions.NoSuchOption as exc:
        hint = f"did you mean {exc.possibilities[0]}?" if exc.possibilities else None
        cmd = exc.ctx.command_path if exc.ctx else "nemotron"
        return _fail(f"no such option {exc.option_name} for '{cmd}'",
                     (hint + " " if hint else "") + f"see: {cmd} --help", 2)
    except click.exceptions.UsageError as exc:
        cmd = exc.ctx.command_path if exc.ctx else "nemotron"
        msg = exc.format_message().replace("\n", " ")
        return _fail(msg[0].lower() + msg[1:] if msg else "usage error", f"see: {cmd} --help", 2)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (_Interrupted, click.exceptions.Abort, KeyboardInterrupt) as exc:  # Ctrl-C: one line (children stay quiet)
        detail = str(exc) if isinstance(exc, _Interrupted) else ""
        start = "\n" if sys.stderr.isatty() else ""  # end the terminal's ^C echo first
        click.echo(f"{start}interrupted: {detail}" if detail else f"{start}interrupted", err=True)
        return 130
    except NemotronError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        return _fail(exc.message, exc.hint, exc.exit_code)
    except Exception as exc:  # an unexpected failure: one line, the traceback with --debug
        if debug:
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc}", "run again with --debug for the traceback", 1)


__all__ = ["UsageError", "build_cli", "main"]
