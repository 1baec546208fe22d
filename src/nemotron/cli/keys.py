"""``nemotron RECIPE keys STAGE [PREFIX] [-c NAME]``: every key of a stage's merged config tree, one line each.

A stage's ``--help`` lists the keys of its ``default.yaml``; a NeMo RL stage's config also holds every key of the
NeMo RL recipe its ``nemo_rl.base`` names (the layer below ``default.yaml``, :mod:`nemotron.config.nemo_rl_base`),
hundreds of them, which the help only counts. This command lists the whole tree the config compiler builds
(:func:`nemotron.config.compile.compile_config`: the schema, the base recipe, ``default.yaml``, the ``-c`` chain):
per key its type, its value (interpolations resolved where they can be, else as written: ``${art:...}``) and the
layer that set it (``recipe``: NeMo RL's ``student_rlvr1.yaml``, ``default.yaml``, the ``-c`` file, ``schema``),
with the key's comment where ``default.yaml`` has one. Nothing is validated and no framework is imported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from nemotron.config.registry import STAGES, Stage, get_stage
from nemotron.errors import ConfigError, UsageError


@dataclass(frozen=True)
class KeyRow:
    """One key of the merged tree: ``key`` dotted (``policy.megatron_cfg.optimizer.lr``), ``type`` (``int``,
    ``float``, ``str``, ``bool``, ``list``, ``map`` for an empty mapping, ``null``), ``value`` in YAML flow form,
    ``source`` the layer that set it (``schema``, ``recipe``: the NeMo RL recipe ``nemo_rl.base`` names,
    ``default.yaml``, a ``-c`` file's label, e.g. ``tiny.yaml``), ``description`` the key's comment in
    ``default.yaml`` (may be empty)."""

    key: str
    type: str
    value: str
    source: str
    description: str


def find_stage(recipe: str, name: str) -> Stage:
    """The stage ``name`` of ``recipe`` (its registry name: ``rlvr``, ``data-prep-sft``; the command words
    ``data prep sft`` joined by ``-`` are the same name).

    Raises:
        UsageError: no such stage (the message has a did-you-mean and the hint lists the stages).
    """
    stages = [s for s in STAGES if s.recipe == recipe]
    for s in stages:
        if name in (s.name, "-".join(s.command), " ".join(s.command)):
            return s
    import difflib

    close = difflib.get_close_matches(name, [s.name for s in stages], n=1)
    raise UsageError(f"keys {name!r}: not a stage of {recipe}" + (f" (did you mean '{close[0]}'?)" if close else ""),
                     f"stages: {', '.join(s.name for s in stages)}")


def stage_words(recipe: str, words: list[str]) -> tuple[str, str | None]:
    """``(stage, prefix)`` of the words after ``keys``: the stage's name (``data-prep-pretrain``) or its command words
    as typed for the stage itself (``data prep pretrain``), then at most one PREFIX.

    Raises:
        UsageError: a first word that starts the commands of stages but names none (``keys data``, ``keys data prep
            pretrian``: those stages' names are said, ``data-prep-pretrain`` ...); an unknown stage
            (:func:`find_stage`); more than one word after the stage.
    """
    stages = [s for s in STAGES if s.recipe == recipe]
    for k in range(len(words), 1, -1):  # the longest run of command words that names a stage
        typed = " ".join(words[:k])
        stage = next((s for s in stages if typed == " ".join(s.command)), None)
        if stage is not None:
            words = [stage.name, *words[k:]]
            break
    if find_stage_or_none(recipe, words[0]) is None:
        named = [s.name for s in stages if len(s.command) > 1 and s.command[0] == words[0]]
        if named:
            raise UsageError(f"keys {' '.join(words)!r}: not a stage of {recipe}; the stages whose command starts "
                             f"with {words[0]!r} are named {', '.join(named)} here",
                             f"the name, or the command's words in full: nemotron {recipe} keys {named[0]}, or "
                             f"nemotron {recipe} keys {' '.join(get_stage(named[0]).command)}")
        find_stage(recipe, words[0])  # raises: not a stage, with a did-you-mean
    if len(words) > 2:
        raise UsageError(f"keys {' '.join(words)!r}: one PREFIX after the stage, got {len(words) - 1} words",
                         f"e.g. nemotron {recipe} keys {words[0]} {words[1]}")
    return words[0], (words[1] if len(words) > 1 else None)


def find_stage_or_none(recipe: str, name: str) -> Stage | None:
    """:func:`find_stage`, or None for a name that is no stage of ``recipe``."""
    try:
        return find_stage(recipe, name)
    except UsageError:
        return None


def _source(prov: dict[str, str], key: str, base_label: str | None) -> str:
    """The layer that set ``key`` (its own provenance, else its nearest parent's)."""
    label = prov.get(key)
    probe = key
    while label is None and "." in probe:
        probe = probe.rsplit(".", 1)[0]
        label = prov.get(probe)
    label = label or "?"
    return "recipe" if base_label is not None and label == base_label else label


def _layer_about(stage: Stage, layers: list[str], prov: dict[str, str]) -> dict[str, str]:
    """The description of each key a ``-c`` file sets (``local.yaml``), from that file: its own comment, and the
    artifact its own ``${art:...}`` value takes (``default.yaml``'s comment may say another one: ``mopd-warmup -c
    local`` takes the pretrain checkpoint where ``default.yaml`` takes the RLVR result). Keys the file sets without a
    comment or an artifact keep ``default.yaml``'s description."""
    from nemotron.cli.stagehelp import ART_RE, _stage_dir, file_keys

    out: dict[str, str] = {}
    folder = _stage_dir(stage)
    for label in layers:
        path = folder / label
        if not label.endswith(".yaml") or label == "default.yaml" or not path.is_file():
            continue
        for key, value, comment in file_keys(path):
            if prov.get(key) != label:
                continue
            art = ART_RE.search(value) if isinstance(value, str) else None
            need = f"artifact {art.group(1)}, see Artifact inputs" if art else ""
            text = "; ".join(t for t in (need, comment) if t)
            if text:
                out[key] = f"{label}: {text}"
    return out


def key_rows(stage: Stage, config: str | None = None, prefix: str | None = None) -> tuple[list[str], list[KeyRow]]:
    """``(layers, rows)``: the layers of ``stage -c config`` lowest first (``["schema", "nemo-rl:mopd.yaml",
    "default.yaml", "tiny.yaml"]``) and one :class:`KeyRow` per leaf of the merged tree (a leaf: a scalar, a list,
    an empty mapping), in tree order; with ``prefix``, only the keys that start with it.

    Raises:
        ConfigError: an unknown config name or file, a config that sets keys its stage does not have, an unknown
            ``nemo_rl.base`` recipe (:func:`nemotron.config.compile.compile_config`); ``prefix`` matches no key
            (the hint names the closest key and the top-level sections).
    """
    from nemotron.cli.stagehelp import _flow, _type, key_docs
    from nemotron.config.compile import compile_config
    from nemotron.config.tree import leaves

    compiled = compile_config(stage, config, [], check_paths=False)
    layers = list(compiled.layers)
    base_label = next((label for label in layers if label.startswith("nemo-rl:")), None)
    about = {d.key: d.description for d in key_docs(stage, null_types=False)}
    about.update(_layer_about(stage, layers, compiled.provenance))
    rows = [KeyRow(key, _type(value), _flow(value), _source(compiled.provenance, key, base_label), about.get(key, ""))
            for key, value in leaves(compiled.config)]
    if prefix:
        chosen = [r for r in rows if r.key.startswith(prefix)]
        if not chosen:
            import difflib

            close = difflib.get_close_matches(prefix, [r.key for r in rows], n=1, cutoff=0.5)
            sections = sorted({r.key.split(".", 1)[0].split("[", 1)[0] for r in rows})
            raise ConfigError(f"no key of {stage.name} ({' < '.join(layers)}) starts with {prefix!r}",
                              (f"did you mean '{close[0]}'? " if close else "") + f"sections: {', '.join(sections)}")
        rows = chosen
    return layers, rows


def show_keys(recipe: str, stage_name: str, config: str | None, prefix: str | None, as_json: bool) -> int:
    """Print the keys of :func:`key_rows` (a header naming the layers, then ``KEY TYPE SOURCE VALUE  # DESCRIPTION``,
    the last column wrapped to the terminal's width, never cut; ``as_json``: one JSON document,
    ``docs/schema/keys.schema.json``: stage, config, prefix, layers, ``keys: [{key, type, value, source,
    description}]``). Returns 0.

    Raises:
        UsageError: an unknown stage (:func:`find_stage`).
        ConfigError: see :func:`key_rows`.
    """
    import shutil

    import typer

    from nemotron.cli.stagehelp import _table

    stage = find_stage(recipe, stage_name)
    layers, rows = key_rows(stage, config, prefix)
    if as_json:
        from nemotron.cli.jsonout import emit

        emit("keys", {"stage": stage.name, "config": config or "default", "prefix": prefix, "layers": layers,
                      "keys": [asdict(r) for r in rows]})
        return 0
    width = shutil.get_terminal_size((100, 24)).columns
    named = {label: f"{label} (NeMo RL recipe)" for label in layers if label.startswith("nemo-rl:")}
    what = f"{len(rows)} keys" + (f" starting with {prefix!r}" if prefix else "")
    typer.echo(f"{stage.title} -c {config or 'default'}: {what}; layers, lowest first: "
               f"{' < '.join(named.get(label, label) for label in layers)}")
    table = [(r.key, r.type, r.source, r.value + (f"  # {r.description}" if r.description else "")) for r in rows]
    for line in _table(table, width, cap=48, alone=False):  # a key's line starts with it (grep); a long comment wraps
        typer.echo(line)
    return 0


__all__ = ["KeyRow", "find_stage", "find_stage_or_none", "key_rows", "show_keys", "stage_words"]
