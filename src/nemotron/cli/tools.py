"""The commands that look at things rather than run them: ``data inspect PATH`` and ``why [JOB]``.

Kept out of :mod:`nemotron.cli.main` so that the command tree there stays the registry's; each command imports its
module when it runs (``nemotron --help`` stays fast).
"""

from __future__ import annotations

from typing import Any

import click


def add_recipe_tools(group: click.Group, recipe: str, context: dict[str, Any]) -> None:
    """Add ``data inspect`` (under the recipe's ``data`` group) and ``why`` to ``group``."""
    data = group.commands.get("data")
    if isinstance(data, click.Group):
        @data.command("inspect", context_settings=context)
        @click.argument("path", metavar="PATH")
        @click.option("-n", "--count", type=click.IntRange(min=1), default=3, show_default=True,
                      help="Packs, documents or records to show.")
        @click.option("--step", type=click.IntRange(min=1), help="Pretrain blend: list the documents of global batch STEP (1-based, as "
                                               "Megatron logs iterations).")
        @click.option("--global-batch-size", type=click.IntRange(min=1), help="With --step: train.global_batch_size.")
        @click.option("--seq-length", type=click.IntRange(min=1), help="With --step: model.seq_length.")
        @click.option("--train-iters", type=click.IntRange(min=1),
                      help="With --step: train.train_iters of the run (Megatron's sample order depends on the total).")
        @click.option("--train-samples", type=click.IntRange(min=1), help="With --step: train.train_samples instead of --train-iters.")
        @click.option("--seed", type=int, default=1234, show_default=True,
                      help="With --step: dataset.random_seed (Megatron-Bridge's recipe: 1234).")
        @click.option("--split", default=None, help="Packed SFT / RL: which file of a folder (train, validation).")
        @click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout "
                                                              "(docs/schema/data-inspect.schema.json).")
        @click.option("--debug", is_flag=True, help="Show tracebacks.")
        def inspect(**kw: Any) -> int:
            """See training data as the trainer sees it: packed SFT Parquet (learned and masked tokens, document
            boundaries, fill), a pretrain blend.json or .bin/.idx (documents, tokens, shares; --step: the documents
            of one global batch, as Megatron-Core's blended GPT dataset builds it), RL JSONL (prompts, answers,
            the answer check on the reference answers)."""
            from nemotron.cli.inspect import inspect_command

            return inspect_command(kw)

    @group.command("why", context_settings=context)
    @click.argument("ident", required=False, metavar="[JOB]")
    @click.option("--log", "logs", multiple=True, metavar="FILE",
                  help="Classify this log file instead of a submitted job's (repeatable).")
    @click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout (docs/schema/why.schema.json).")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    def why(ident: str | None, logs: tuple[str, ...], as_json: bool, debug: bool) -> int:
        """How a finished job ended and what to do about it: out of GPU memory, NCCL timeout, walltime, preemption,
        Ray OOM-kill, missing secret, image or mount missing, a Python exception (its first frame in our code)..."""
        from nemotron.cli.inspect import why_command

        return why_command(ident, list(logs), as_json)


__all__ = ["add_recipe_tools"]
