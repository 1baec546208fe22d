"""Launch checks of the data prep stages: what their runtimes would reject, found before anything runs.

Each data stage's runtime parses its config into ``Settings`` and its blend file before any work;
here the same parsers run at ``--dry-run`` (they import nothing heavy), plus the checks of the inputs
on this machine: every non-optional local dataset path matches files, a local tokenizer file exists
(a folder holds one), ``output_dir`` is not a file, and no input is a file the run would write or
delete (:func:`nemotron.data.driver.check_inputs`). One piece of logic each: the runtimes' own
parsers and checks, called again.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from nemotron.errors import ConfigError, Problem

_RUNTIMES = {"data-prep-pretrain": "nemotron.data.pretrain", "data-prep-sft": "nemotron.data.sft",
             "data-prep-rl": "nemotron.data.rl"}


def _problem(exc: ConfigError, rule: str) -> Problem:
    return Problem(key="", value=None, message=exc.message, valid=exc.hint, rule=rule)


def token_dtype_fits(tokenizer: str, requested: str) -> list[Problem]:
    """Rule ``data-dtype``: an explicit ``output.dtype`` holds every token id of the tokenizer (uint16: fewer
    than 65,536 ids; Ultra's 131,072 need int32). The runtime's own choice (:func:`nemotron.data.indexed.choose_dtype`)
    on the vocabulary size read from the tokenizer file (:func:`nemotron.data.tokenizer.vocab_size_hint`);
    a hub id is checked by the run itself."""
    from nemotron.data.indexed import choose_dtype
    from nemotron.data.tokenizer import vocab_size_hint

    vocab = vocab_size_hint(tokenizer)
    if vocab is None:
        return []
    try:
        choose_dtype(vocab, requested)
    except ConfigError as exc:
        return [Problem("output.dtype", requested, exc.message.removeprefix(f"output.dtype={requested!r} ").split("; valid: ")[0] +
                        f" (tokenizer {tokenizer})", "auto or int32", rule="data-dtype")]
    return []


def validate_data(stage: Any, cfg: dict) -> list[Problem]:
    """Problems of a data prep config (errors), each the runtime's own message."""
    module = _RUNTIMES.get(getattr(stage, "name", ""))
    if module is None:
        return []
    settings_cls = getattr(importlib.import_module(module), "Settings", None)
    if settings_cls is None:
        return []
    try:
        s = settings_cls.from_config(cfg)
    except ConfigError as exc:
        return [_problem(exc, "data-settings")]
    problems: list[Problem] = []
    out = getattr(s, "output_dir", None)
    if out and Path(out).exists() and not Path(out).is_dir():
        problems.append(Problem("output_dir", out, "is a file, not a folder", "a folder path (it is created)",
                                rule="data-output"))
    tokenizer = getattr(s, "tokenizer_name", None) or ""
    if tokenizer.startswith(("/", "./", "../", "~")) and not Path(os.path.expanduser(tokenizer)).exists():
        problems.append(Problem("tokenizer.name", tokenizer, "no such file or folder",
                                "a tokenizer.json, a folder with one, or a Hugging Face model id", rule="data-tokenizer"))
    if tokenizer:
        from nemotron.data.tokenizer import check_folder

        try:
            check_folder(tokenizer)
        except ConfigError as exc:
            problems.append(_problem(exc, "data-tokenizer"))
    if getattr(s, "dtype", "auto") != "auto" and tokenizer:
        problems += token_dtype_fits(tokenizer, s.dtype)
    blend_path = getattr(s, "blend_path", None)
    if not blend_path:
        return problems
    from nemotron.data.driver import check_inputs, stage_blend
    from nemotron.data.sources import FORMATS, expand, is_remote

    try:
        blend = stage_blend(s)
    except ConfigError as exc:  # a blend's problems come all at once (BlendProblems), one Problem each
        return [*problems, *(_problem(ConfigError(m, exc.hint), "data-blend")
                             for m in getattr(exc, "problems", None) or [exc.message])]
    problems += [_problem(exc, "data-inputs") for exc in check_inputs(s, blend)]
    for ds in blend.datasets:
        if ds.optional or is_remote(ds.path):
            continue
        try:
            found = expand(ds.path, exclude=list(ds.exclude), fmt=ds.format if ds.format in FORMATS else None)
        except ConfigError as exc:
            problems.append(_problem(exc, "data-inputs"))
            continue
        if not found:
            problems.append(Problem(f"{blend_path}:{ds.line} datasets ({ds.name})", ds.path, "matches no file",
                                    "an existing file, folder or glob; or mark the dataset optional", rule="data-inputs"))
    return problems
