"""Shell completion's answers: stages and commands (Typer lists a group's sub-commands itself), ``-c`` names,
profile names, config keys for ``key=value`` overrides and, after ``key=``, the values of a key whose set is known
(:func:`values`); in ``pipe``, ``STAGE:`` / ``STAGE#K:`` for its stages, then their keys and values; for
``keys STAGE [PREFIX]``, the stage, its configs and its merged tree's keys.

Typer asks these through the ``autocompletion=`` of the options and arguments of :mod:`nemotron.cli.main` while a
shell completes a word (``nemotron --install-completion`` installs the hook; ``_NEMOTRON_COMPLETE`` is the protocol's
variable). Each answer is ``[(value, help), ...]``; Typer keeps those that start with the word typed. They read the
same files the commands read (the stage's folder, its ``default.yaml``, the env.toml a command would find), never
fail (a shell completing a word must not print a traceback: a file that cannot be read gives no answer), and import
nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
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
    executor; for bash a space or another character the shell reads is escaped (``my\\ cluster``)."""
    from nemotron.cli.stagehelp import profile_rows

    try:
        _, rows = profile_rows(ctx.params.get("env_file"))
    except Exception:
        return []
    import os
    import re

    # bash inserts an answer as typed: a name it would split or expand ("my cluster", a quoted TOML table name) is
    # offered with those characters escaped (my\ cluster: one word that still starts with what was typed); zsh and
    # fish quote what they insert themselves
    bash = os.environ.get("_NEMOTRON_COMPLETE", "").split("_")[-1] == "bash"
    return [(re.sub(r"([^\w@%+=:,./-])", r"\\\1", name) if bash else name, f"{executor} profile")
            for name, executor in rows if name.startswith(incomplete)]


def _keys(stage: Stage) -> list[tuple[str, str]]:
    """``[(key, help), ...]``: the keys of the stage's ``default.yaml`` (type = default: comment), then, for a NeMo
    RL stage, the keys of the recipe its ``nemo_rl.base`` names that are not set (nor set whole above them) there,
    as ``nemotron RECIPE keys STAGE`` lists them (``grpo.seed``: ``int = 42 (NeMo RL recipe)``)."""
    from nemotron.cli.stagehelp import key_docs
    from nemotron.config.yamlio import flow

    try:
        out = [(d.key, f"{d.type} = {d.default}" + (f": {d.description}" if d.description else ""))
               for d in key_docs(stage, null_types=False)]
    except Exception:
        return []
    listed = {k for k, _ in out}
    try:
        recipe = _recipe_leaves(stage)
    except Exception:
        recipe = {}
    for key, value in recipe.items():
        parts = key.split(".")
        if not any(".".join(parts[:i]) in listed for i in range(1, len(parts) + 1)):
            out.append((key, f"{type(value).__name__ if value is not None else 'null'} = {flow(value)} "
                             "(NeMo RL recipe)"))
    return out


def _model_names() -> list[tuple[str, str]]:
    from nemotron.config.catalogue import BASE_MODELS, PUBLISHED_SLICES

    return [*((n, f"catalogue model ({len(m.pattern)} layers)") for n, m in BASE_MODELS.items()),
            *((n, f"published {len(layers)}-layer slice") for n, layers in PUBLISHED_SLICES.items())]


def _nemo_rl_recipes() -> list[tuple[str, str]]:
    from nemotron.config.nemo_rl_base import keylist

    return [(n, "NeMo RL recipe at the pinned commit") for n in keylist().get("recipes") or {}]


def _bridge_precisions() -> list[tuple[str, str]]:
    from nemotron.config.images import keylist_version
    from nemotron.config.keys import load_keylist

    version = keylist_version("nemo", "megatron_bridge") or ""
    names = load_keylist(version).get("mixed_precision_recipes") or []
    plain = [n for n in names if "-" not in n] or names  # each preset has a - and a _ spelling: offer one
    return [(n, f"Megatron-Bridge {version} preset") for n in plain]


def _quantize_recipes() -> list[tuple[str, str]]:
    """The shipped quantization recipes (``stages/ultra3/quantize/recipes/*.yaml``): the names validation takes
    (:func:`nemotron.runtime.quantization.quant_config.load_recipe`; a path to a recipe .yaml too)."""
    from nemotron.runtime.quantization.quant_config import recipe_names

    return [(n, "quantization recipe (stages/ultra3/quantize/recipes)") for n in recipe_names()]


def _rules_set(name: str, about: str) -> Callable[[], list[tuple[str, str]]]:
    def values() -> list[tuple[str, str]]:
        from nemotron.layout import rules

        return [(v, about) for v in getattr(rules, name)]

    return values


#: Keys whose values form a known set: a key (dotted; ``*`` one segment) → the set, ``[(value, help), ...]``, read
#: where validation reads it (the model catalogue, NeMo RL's and Megatron-Bridge's key lists, the rules' tuples),
#: so that a value the completion offers is a name validation knows (whether it suits the config, e.g. a
#: Megatron-Bridge preset under ``-c local``, is still the dry run's to say).
VALUE_SETS: dict[str, Callable[[], list[tuple[str, str]]]] = {
    "model.name": _model_names,
    "nemo_rl.base": _nemo_rl_recipes,
    "mixed_precision": _bridge_precisions,
    "quantization.recipe": _quantize_recipes,
    "scheduler.lr_decay_style": _rules_set("DECAY_STYLES", "Megatron-Core decay style"),
    "scheduler.lr_wsd_decay_style": _rules_set("WSD_STYLES", "Megatron-Core WSD annealing style"),
    "environments.*.kind": _rules_set("ENV_KINDS", "environment kind"),
    "teacher_routing.default_slot": _rules_set("TEACHER_SLOTS", "teacher slot"),
    "teacher_routing.by_agent.*": _rules_set("TEACHER_SLOTS", "teacher slot"),
}


def _value_set(key: str) -> tuple[str, Callable[[], list[tuple[str, str]]]] | None:
    """``(pattern, values)`` of :data:`VALUE_SETS` that ``key`` matches, or None."""
    parts = key.split(".")
    for pattern, values in VALUE_SETS.items():
        want = pattern.split(".")
        if len(want) == len(parts) and all(w in ("*", p) for w, p in zip(want, parts)):
            return pattern, values
    return None


def _recipe_leaves(stage: Stage) -> dict[str, Any]:
    """The keys of the NeMo RL recipe ``stage``'s ``default.yaml`` names (``nemo_rl.base``), dotted → value."""
    from nemotron.cli.stagehelp import _stage_dir
    from nemotron.config.nemo_rl_base import base_layer
    from nemotron.config.tree import leaves
    from nemotron.config.yamlio import load_file

    base = base_layer(load_file(_stage_dir(stage) / "default.yaml")) if stage.family.nemo_rl else None
    return dict(leaves(base[1])) if base else {}


def values(stage: Stage, key: str, incomplete: str = "") -> list[tuple[str, str]]:
    """Values of ``stage``'s ``key`` worth offering after ``key=``, ``[(value, help), ...]`` starting with
    ``incomplete``: for a data prep stage, the set its runtime validates the key against (:func:`_choice_sets`:
    ``chat.reasoning``: ``auto``, ``off``); else a known set (:data:`VALUE_SETS`); else ``true``/``false`` for a bool key (one of
    ``default.yaml`` or of the NeMo RL recipe below it); else, for a string key, the values the stage's own config
    files give it (``backend``: ``megatron-bridge``, ``local``), interpolations and paths left out. Nothing for a
    key with no such set (a number, a path) or an unknown key; never raises (a shell is waiting)."""
    from nemotron.cli.stagehelp import _stage_dir, file_keys

    try:
        docs = {d.key: d for d in _key_docs(stage)}
        doc = docs.get(key)
        known = _value_set(key)
        checked = _choice_sets(stage).get(key) if doc is not None and stage.family.prepares_data else None
        if checked:  # the set a data prep runtime validates the key against: exactly the accepted values
            out = [(v, f"default {doc.default}" if v == doc.default else "valid") for v in checked]
        elif known is not None:  # a key the stage has (a * segment: under a section it has)
            pattern, make = known
            parent = key.rsplit(".", 1)[0] + "."
            present = doc is not None or ("*" in pattern and any(k.startswith(parent) for k in docs))
            out = make() if present else []
        else:
            if doc is None:  # a key of the NeMo RL recipe below default.yaml: its value gives the type
                recipe = _recipe_leaves(stage)
                if isinstance(recipe.get(key), bool):
                    return [(v, f"recipe's {str(recipe[key]).lower()}") for v in ("true", "false")
                            if v.startswith(incomplete)]
                return []
            if doc.type == "bool":
                out = [("true", f"default {doc.default}"), ("false", f"default {doc.default}")]
            elif doc.type in ("str", "any") or doc.type.startswith("str|"):
                seen: dict[str, list[str]] = {}
                for path in sorted(_stage_dir(stage).glob("*.yaml")):
                    for k, v, _ in file_keys(path):
                        if k == key and isinstance(v, str) and v and "${" not in v and "/" not in v and " " not in v:
                            seen.setdefault(v, []).append(path.name)
                out = [(v, "in " + ", ".join(files)) for v, files in seen.items()]
            else:
                out = []
    except Exception:  # a shell completing must not fail
        return []
    return [(v, h) for v, h in out if v.startswith(incomplete)]


def _choice_sets(stage: Stage) -> dict[str, tuple[str, ...]]:
    """The value sets a data prep stage's runtime checks its keys against, read on its default config
    (:func:`nemotron.validation.data.choice_sets`); ``{}`` when it does not compile."""
    from nemotron.config.compile import compile_config
    from nemotron.validation.data import choice_sets

    try:
        cfg = compile_config(stage, None, [], check_paths=False).config
    except Exception:  # a shell completing must not fail
        return {}
    return choice_sets(stage, cfg)


def _key_docs(stage: Stage) -> list[Any]:
    from nemotron.cli.stagehelp import key_docs

    return key_docs(stage, null_types=False)


def override_words(stage: Stage, incomplete: str) -> list[tuple[str, str]]:
    """Completions of one override word of ``stage``: ``KEY=`` for the keys of its default config (``~KEY`` after
    ``~``), the word ``estimate`` where the stage has it; after ``KEY=``, ``KEY=VALUE`` for the values of
    :func:`values` (``+KEY=`` too)."""
    if "=" in incomplete:
        head, _, typed = incomplete.partition("=")
        key = head.lstrip("+")
        if head.startswith("~") or not key:
            return []
        return [(f"{head}={v}", h) for v, h in values(stage, key, typed)]
    lead = "~" if incomplete.startswith("~") else "+" if incomplete.startswith("+") else ""
    out = [(f"{lead}{key}{'' if lead == '~' else '='}", about) for key, about in _keys(stage)]
    if not lead and stage.family.estimate:
        out.insert(0, ("estimate", "print the run's step time, GPU-hours, jobs and checkpoint bytes"))
    return [(v, h) for v, h in out if v.startswith(incomplete)]


_BREAKS = (":", "=")


def _bash_words(words: list[str], incomplete: str) -> tuple[list[str], str, int]:
    """bash splits a word at ``:`` and ``=`` (its ``COMP_WORDBREAKS``) before asking: ``pretrain:model.name=u``
    arrives as ``pretrain``, ``:``, ``model.name``, ``=``, ``u`` with ``u`` the word being completed, and what the
    answer holds replaces ``u`` alone (``model.name=<TAB>``: see :func:`glue_bash_break`). Returns ``(earlier words
    re-joined, the whole word being completed, where the part bash replaces starts in it)``; other shells (and a
    bash whose ``COMP_WORDBREAKS`` lacks them) send whole words: ``(words, incomplete, 0)``."""
    import os

    if os.environ.get("_NEMOTRON_COMPLETE", "").split("_")[-1] != "bash":
        return list(words), incomplete, 0
    joined: list[str] = []
    for w in words:  # the earlier words: a break token glues its neighbours
        if joined and (w in _BREAKS or joined[-1].endswith(_BREAKS)):
            joined[-1] += w
        else:
            joined.append(w)
    if joined and joined[-1].endswith(_BREAKS):
        whole = joined.pop() + incomplete
        return joined, whole, len(whole) - len(incomplete)
    return joined, incomplete, 0


def glue_bash_break() -> None:
    """Called before Typer answers a shell: when bash completes right after a ``:`` or ``=`` (``rlvr:<TAB>``,
    ``model.name=<TAB>``), the word it sends is the break itself, and what it inserts goes after it. Typer keeps
    only answers that start with the word sent, so none would fit: glue the break to the word before it in
    ``COMP_WORDS`` and complete an empty word (click does the same for ``=``, and drops it). An option's ``=``
    (``--env-file=``) is left to click."""
    import os

    if os.environ.get("_NEMOTRON_COMPLETE", "").split("_")[-1] != "bash":
        return
    words = os.environ.get("COMP_WORDS", "").split("\n")
    try:
        at = int(os.environ.get("COMP_CWORD", ""))
    except ValueError:
        return
    if 1 <= at < len(words) and words[at] in _BREAKS and not words[at - 1].startswith("-"):
        words[at - 1] += words[at]
        words[at] = ""
        os.environ["COMP_WORDS"] = "\n".join(words)


def _answer(words: list[str], incomplete: str, complete: Callable[[list[str], str], list[tuple[str, str]]]
            ) -> list[tuple[str, str]]:
    """``complete(earlier words, whole word)``'s answers, cut to the part of the word the shell replaces."""
    earlier, whole, cut = _bash_words(words, incomplete)
    return [(v[cut:], h) for v, h in complete(earlier, whole) if v.startswith(whole)]


def overrides(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """The override words of the stage being completed (:func:`override_words`)."""
    stage = _stage(ctx)
    if stage is None:
        return []
    return _answer(list(ctx.params.get("overrides") or ()), incomplete, lambda _, word: override_words(stage, word))


def _pipe_stages(words: list[str], recipe: str) -> list[str]:
    """The stages named among ``words`` (a ``pipe`` line's words so far), in order, as registry names (a stage
    named twice: twice); override words and unknown names left out."""
    from nemotron.config.registry import get_stage

    out = []
    for word in words:
        if ":" in word or "=" in word or word.startswith(("~", "+")):
            continue
        try:
            stage = get_stage(word)
        except KeyError:
            continue
        if stage.recipe == recipe:
            out.append(stage.name)
    return out


def pipe_words(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """``pipe`` words: stage names (``pretrain``, ``data-prep-sft``); once stages are named, also ``STAGE:`` for
    each of them and ``STAGE#K:`` for the K-th run of a stage named more than once; after ``STAGE:`` /
    ``STAGE#K:``, that stage's override words (``pretrain:train.global_batch_size=``) and values
    (``pretrain:model.name=ultra``, :func:`override_words`). With no stage named the pipe runs them all: any
    stage of the recipe takes ``STAGE:``; with stages named, only those (an override for another is refused)."""
    recipe = _recipe(ctx)
    return _answer(list(ctx.params.get("stages") or ()), incomplete,
                   lambda words, word: _pipe_words(recipe, _pipe_stages(words, recipe), word))


def _pipe_words(recipe: str, named: list[str], incomplete: str) -> list[tuple[str, str]]:
    ours = [s for s in STAGES if s.recipe == recipe]
    if ":" in incomplete:
        head, _, word = incomplete.partition(":")
        name, hash_, nth = head.partition("#")
        stage = next((s for s in ours if s.name == name and (not named or name in named)), None)
        if stage is None or (hash_ and not (nth.isdigit() and 1 <= int(nth) <= max(named.count(name), 1))):
            return []
        return [(f"{head}:{v}", h) for v, h in override_words(stage, word) if v != "estimate"]
    out = [(s.name, s.summary) for s in ours]
    for name in dict.fromkeys(named):
        out.append((f"{name}:", f"set a key of every {name} run: {name}:KEY=VALUE"))
        if named.count(name) > 1:
            out += [(f"{name}#{k}:", f"set a key of run {k} of {name} only") for k in range(1, named.count(name) + 1)]
    return [(w, h) for w, h in out if w.startswith(incomplete)]


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


__all__ = ["VALUE_SETS", "configs", "glue_bash_break", "keys_config", "keys_prefix", "override_words", "overrides",
           "pipe_words", "profiles", "recipe_stages", "stage_names", "values"]
