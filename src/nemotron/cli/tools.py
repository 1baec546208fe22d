"""The commands that look at things rather than run them: ``data inspect PATH`` and ``why [JOB]``.

Kept out of :mod:`nemotron.cli.main` so that the command tree there stays the registry's; each command imports its
module when it runs (``nemotron --help`` stays fast).
"""


from typing import Annotated, Any, Optional

import typer

def _positive(value: Optional[int]) -> Optional[int]:
    """A count or size of 1 or more (``-n 0`` showed the default 3, ``-n -1`` nothing, exit 0)."""
    if value is not None and value < 1:
        raise typer.BadParameter(f"{value} is not in the range x>=1 (1 or more)")
    return value


Count = Annotated[int, typer.Option("-n", "--count", metavar="N", callback=_positive,
                                    help="Packs, documents or records to show (1 or more).")]


def add_recipe_tools(tree: Any, context: dict[str, Any]) -> None:
    """Add ``data inspect`` (under the recipe's ``data`` group) and ``why`` to ``tree`` (a
    :class:`nemotron.cli.main.Tree`: ``group(name, help)`` and ``command(name)``, Typer's ``app.command``)."""
    if "data" in tree.groups:
        @tree.groups["data"].command("inspect")
        def inspect(
            path: Annotated[str, typer.Argument(metavar="PATH", show_default=False)],
            count: Count = 3,
            step: Annotated[Optional[int], typer.Option(
                "--step", metavar="N", callback=_positive,
                help="Pretrain blend: list the documents of global batch STEP (1-based, as Megatron logs "
                     "iterations).")] = None,
            global_batch_size: Annotated[Optional[int], typer.Option(
                "--global-batch-size", metavar="N", callback=_positive,
                help="With --step: train.global_batch_size.")] = None,
            seq_length: Annotated[Optional[int], typer.Option(
                "--seq-length", metavar="N", callback=_positive, help="With --step: model.seq_length.")] = None,
            train_iters: Annotated[Optional[int], typer.Option(
                "--train-iters", metavar="N", callback=_positive,
                help="With --step: train.train_iters of the run (Megatron's sample order depends on the "
                     "total).")] = None,
            train_samples: Annotated[Optional[int], typer.Option(
                "--train-samples", metavar="N", callback=_positive,
                help="With --step: train.train_samples instead of --train-iters.")] = None,
            seed: Annotated[int, typer.Option(
                "--seed", metavar="N",
                help="With --step: dataset.random_seed (Megatron-Bridge's recipe: 1234).")] = 1234,
            split: Annotated[Optional[str], typer.Option(
                "--split", metavar="NAME", help="Packed SFT / RL: which file of a folder (train, validation).")] = None,
            as_json: Annotated[bool, typer.Option(
                "--json", help="One JSON document on stdout (docs/schema/data-inspect.schema.json).")] = False,
            debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
        ) -> int:
            """See training data as the trainer sees it: packed SFT Parquet (learned and masked tokens, document
            boundaries, fill), a pretrain blend.json or .bin/.idx (documents, tokens, shares; --step: the documents
            of one global batch, as Megatron-Core's blended GPT dataset builds it), RL JSONL (prompts, answers,
            the answer check on the reference answers)."""
            from nemotron.cli.inspect import inspect_command

            return inspect_command({"path": path, "count": count, "step": step,
                                    "global_batch_size": global_batch_size, "seq_length": seq_length,
                                    "train_iters": train_iters, "train_samples": train_samples, "seed": seed,
                                    "split": split, "as_json": as_json, "debug": debug})

    @tree.command("why")
    def why(
        ident: Annotated[Optional[str], typer.Argument(metavar="[JOB]", show_default=False)] = None,
        logs: Annotated[Optional[list[str]], typer.Option(
            "--log", metavar="FILE", help="Classify this log file instead of a submitted job's (repeatable).")] = None,
        as_json: Annotated[bool, typer.Option(
            "--json", help="One JSON document on stdout (docs/schema/why.schema.json).")] = False,
        debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    ) -> int:
        """How a finished job ended and what to do about it: out of GPU memory, NCCL timeout, walltime, preemption,
        Ray OOM-kill, missing secret, image or mount missing, a Python exception (its first frame in our code)..."""
        from nemotron.cli.inspect import why_command

        return why_command(ident, list(logs or ()), as_json)


__all__ = ["add_recipe_tools"]
