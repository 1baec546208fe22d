"""The long part of ``nemotron ultra3 STAGE --help``, read from the stage's own files when the help is shown.

Sections, in order (:func:`stage_sections`):

* **Configs**: the ``-c`` names of the stage's folder (``stages/<recipe>/<stage>/*.yaml``), each with the first
  sentence of its header comment.
* **Config keys**: every key of the stage's ``default.yaml`` (the keys any config or ``key=value`` may set; a
  key absent from it is unknown: docs/configs.md) and the schema keys every stage has (``run.env.*``), grouped by
  top-level section, each with its type, its default (``REQUIRED`` where the default is an input nothing in the
  config supplies: an artifact ``${art:...}`` or an environment variable without a default) and its whole
  description, wrapped: the key's own comment in ``default.yaml`` (the one after its value, else the block just above
  it). A key whose default is ``null`` takes its type from the stage's other configs (``int|null``).
* **Artifact inputs**: the keys set from the artifact store, and the two ways to override them (a path, or a
  pinned version ``${art:NAME:N,FIELD}``).
* **Profiles**: the profiles of the env.toml a command would find (``$NEMOTRON_ENV_FILE``, ``./env.toml``
  upward, ``~/.config/nemotron/env.toml``), read without validating them.
* **Examples**.

Values longer than their column are cut with ``...``; no key name and no description is ever cut (a description
wraps onto the lines below). Nothing here imports the
frameworks; YAML and the config compiler's schema are imported when a stage's help is asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemotron.config.registry import STAGES, Stage

#: ``${art:NAME[:VERSION],FIELD}`` in a config value.
ART_RE = re.compile(r"\$\{art:([^,}:]+)(?::([^,}]+))?,([^}]+)\}")
#: ``${oc.env:VAR}`` without a default: the run needs the variable set.
ENV_RE = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class KeyDoc:
    """One config key as the help lists it: ``key`` dotted (``model.seq_length``), ``type`` (``int``, ``str``,
    ``int|null``, ...), ``default`` as written in YAML flow form (``REQUIRED`` for an input nothing supplies: its
    description then starts with the artifact or the variable), ``description`` its comment (may be empty)."""

    key: str
    type: str
    default: str
    description: str


# abbreviations whose period does not end a sentence ("start from weights (e.g. phase 2 from phase 1)")
_ABBREVIATIONS = ("e.g", "i.e", "etc", "vs", "cf", "approx", "resp")


def _first_sentence(text: str) -> str:
    """``text`` up to the first period that ends a sentence (a period after a letter, digit, bracket or quote,
    followed by a space or the end), whitespace collapsed; a period of an abbreviation (:data:`_ABBREVIATIONS`:
    ``e.g.``, ``i.e.``, ``etc.``, ``vs.``, ...) does not end one. No such period: the whole text."""
    text = " ".join(text.split())
    for m in re.finditer(r"(?<=[a-z0-9)\]`'])\.(\s|$)", text):
        word = re.search(r"[\w.]*$", text[: m.start()]).group(0).lower()
        if word not in _ABBREVIATIONS:
            return text[: m.start() + 1]
    return text


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 0)].rstrip() + "..."


def _wrap(text: str, width: int, indent: int) -> str:
    """``text`` broken at spaces into lines of at most ``width`` characters (a longer word stands alone), each line
    after the first indented by ``indent`` spaces, joined by newlines: a description is shown whole, never cut (a
    word longer than a line, a long path, is broken across lines)."""
    import textwrap

    lines = textwrap.wrap(text, max(width, 12), break_on_hyphens=False) or [""]
    return ("\n" + " " * indent).join(lines)


def _type(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "map"}.get(type(value), "null")


def _flow(value: Any) -> str:
    from nemotron.config.yamlio import flow

    return flow(value)


def _comment_after(line: str, column: int) -> str:
    """The comment on ``line`` after ``column`` (the end of the value), or ''."""
    m = re.match(r"\s*#\s?(.*)$", line[column:])
    return m.group(1).strip() if m else ""


def _comment_above(lines: list[str], index: int, column: int = 0) -> str:
    """The comment paragraph just above line ``index`` whose ``#`` stands at the key's ``column`` (no blank line
    between; a bare ``#`` line ends a paragraph, so a file's header comment that runs into its first key is not
    that key's; a comment indented further continues the previous key's own comment), joined."""
    block: list[str] = []
    i = index - 1
    while i >= 0 and lines[i].strip().startswith("#") and len(lines[i]) - len(lines[i].lstrip()) == column:
        text = lines[i].strip().lstrip("#").strip()
        if not text and block:
            break
        block.insert(0, text)
        i -= 1
    while i >= 0 and lines[i].strip().startswith("#"):
        i -= 1
    if i < 0:  # the comment runs up to the file's first line: the file's header, not this key's comment
        return ""
    return " ".join(b for b in block if b)


def file_keys(path: Path) -> list[tuple[str, Any, str]]:
    """``[(dotted key, value, description), ...]`` for every leaf of the YAML file ``path`` (a leaf: a scalar, a
    list, or an empty mapping), in file order, each with its whole comment (:func:`_comment_after`, else
    :func:`_comment_above`), whitespace collapsed: its later sentences often hold the allowed values
    (``text: encoded as plain text ... | skip | fail``).

    Raises:
        ConfigError: the file cannot be read or parsed (:func:`nemotron.config.yamlio.loads`).
    """
    import yaml

    from nemotron.config.yamlio import compose, loads

    text = path.read_text(encoding="utf-8")
    data = loads(text, str(path))
    lines = text.splitlines()
    out: list[tuple[str, Any, str]] = []

    def walk(node: Any, value: Any, prefix: tuple[str, ...]) -> None:
        for key_node, value_node in node.value:
            name = str(key_node.value)
            if name == "defaults" and not prefix:
                continue
            sub = value.get(name) if isinstance(value, dict) else None
            if isinstance(value_node, yaml.MappingNode) and value_node.value:  # a section (block or flow)
                walk(value_node, sub, (*prefix, name))
                continue
            row = key_node.start_mark.line
            after = (_comment_after(lines[row], value_node.end_mark.column)
                     if value_node.end_mark.line == row and row < len(lines) else "")
            about = after or _comment_above(lines, row, key_node.start_mark.column)
            out.append((".".join((*prefix, name)), sub, " ".join(about.split())))

    root = compose(text)
    if isinstance(root, yaml.MappingNode):
        walk(root, data if isinstance(data, dict) else {}, ())
    return out


def _stage_dir(stage: Stage) -> Path:
    from nemotron.config.paths import stages_dir

    return stages_dir() / stage.config_dir


def config_rows(stage: Stage) -> list[tuple[str, str]]:
    """``[(config name, its description), ...]``: the description is the first sentence of the file's header
    comment, without its ``name:`` / ``nemotron <recipe> <stage> —`` lead; ``default`` prefers the sentence
    that says what `default` is."""
    from nemotron.config.paths import config_names

    rows = []
    folder = _stage_dir(stage)
    for name in config_names(stage):
        try:
            head = []
            for line in (folder / f"{name}.yaml").read_text(encoding="utf-8").splitlines():
                if not line.startswith("#"):
                    break
                head.append(line.lstrip("#").strip())
        except OSError:
            head = []
        text = " ".join(h for h in head if h)
        said = re.search(r"`default` is (.*)", text) if name == "default" else None
        text = said.group(1) if said else re.sub(rf"^(?:{re.escape(name)}:|nemotron \S+ [^—]*—)\s*", "", text)
        rows.append((name, _first_sentence(text)))
    return rows


def key_docs(stage: Stage, null_types: bool = True) -> list[KeyDoc]:
    """Every key of ``stage``'s ``default.yaml`` and the schema keys every stage has (``run.env.*``,
    :data:`nemotron.config.compile.SCHEMA_DEFAULTS`), as :class:`KeyDoc`, in file order (schema keys where their
    section is, else first). ``null_types``: a null default's type is read from the stage's other configs (every
    file of its folder parsed; the completion, which answers while a shell waits, leaves it out)."""
    from nemotron.config.compile import SCHEMA_DEFAULTS
    from nemotron.config.tree import leaves

    folder = _stage_dir(stage)
    rows = file_keys(folder / "default.yaml")
    known = {k for k, _, _ in rows}
    schema_about = {"run.env.nodes": "nodes the stage asks for; follows from its parallel layout",
                    "run.env.gpus_per_node": "GPUs per node; null = the profile's node shape",
                    "run.env.cpus": "CPUs for a local Ray / process pool; null = all of this machine's"}
    extra = [(k, v, schema_about.get(k, "")) for k, v in leaves(SCHEMA_DEFAULTS) if k not in known]
    at = next((i for i, (k, _, _) in enumerate(rows) if k.startswith("run.")), 0)
    rows[at:at] = extra
    other: dict[str, set[str]] = {}  # types a null default takes in the other configs
    for path in sorted(folder.glob("*.yaml")) if null_types else ():
        if path.name != "default.yaml":
            try:
                for key, value, _ in file_keys(path):
                    if value is not None:
                        other.setdefault(key, set()).add(_type(value))
            except Exception:  # a broken sibling config does not break the help; its own command reports it
                continue
    docs = []
    for key, value, about in rows:
        kind = _type(value)
        if value is None:
            kind = "|".join([*sorted(other.get(key, ())), "null"]) if other.get(key) else "any"
        default = _flow(value)
        if isinstance(value, str) and (ART_RE.search(value) or ENV_RE.search(value)):
            art, env = ART_RE.search(value), ENV_RE.search(value)
            default = "REQUIRED"
            need = f"artifact {art.group(1)}, see Artifact inputs" if art else \
                f"export {env.group(1)}"  # type: ignore[union-attr]
            about = f"{need}; {about}" if about else need
        docs.append(KeyDoc(key, kind, default, about))
    return docs


def artifact_rows(stage: Stage) -> list[tuple[str, str, str | None, str]]:
    """``[(key, artifact, version or None, field), ...]``: the keys of ``default.yaml`` set from the artifact store."""
    rows = []
    for key, value, _ in file_keys(_stage_dir(stage) / "default.yaml"):
        for m in ART_RE.finditer(value) if isinstance(value, str) else ():
            rows.append((key, m.group(1), m.group(2), m.group(3)))
    return rows


def profile_rows(env_file: str | None = None) -> tuple[str, list[tuple[str, str]]]:
    """``(where, [(profile, executor), ...])``: the env.toml a command would find and its profiles; ``where`` says
    why there are none (no file found, or the error of ``$NEMOTRON_ENV_FILE``)."""
    from nemotron.errors import ConfigError
    from nemotron.profiles.discover import find_env_file, profile_names

    try:
        path = find_env_file(env_file)
    except ConfigError as exc:
        return exc.message, []
    if path is None:
        return "no env.toml found (cp env.toml.example env.toml; docs/profiles.md)", []
    return str(path), profile_names(path)


def examples(stage: Stage, docs: list[KeyDoc], profiles: list[tuple[str, str]],
             refused: dict[str, str] | None = None) -> list[str]:
    """Command lines for ``stage``: on this machine, a dry run on a cluster profile, a key override, and the
    stage's own words (``estimate``, ``--compare``). A config in ``refused`` (:func:`refused_configs`) is offered in
    none of them."""
    from nemotron.config.paths import config_names

    cmd = f"nemotron {stage.title}"
    names = [n for n in config_names(stage) if n not in (refused or {})]
    cluster = next((n for n, ex in profiles if ex in ("slurm", "ray")), "PROFILE")
    here = "local" if "local" in names else "tiny"
    out = [f"{cmd} -c {here}{'' if stage.gpu and here == 'local' else ' --dry-run'}" if here in names
           else f"{cmd} --dry-run",
           *([f"{cmd} -c tiny --run {cluster} --dry-run"] if "tiny" in names else
             [f"{cmd} --run {cluster} --dry-run"] if "default" in names else [])]
    # a length of the run (steps, iterations): a value any config takes (a parallel size from default.yaml would
    # be refused by -c local's one-process layout)
    sample = next((d for d in docs if d.type == "int" and d.key.rsplit(".", 1)[-1].endswith(("iters", "steps"))), None)
    if sample:
        out.append(f"{cmd} -c {here} {sample.key}={sample.default} --dry-run")
    if stage.family.estimate and "tiny" in names:
        out.append(f"{cmd} -c tiny estimate --batch {cluster}")
    if stage.family.compare:
        out.append(f"{cmd} --compare eval-results:v1 eval-results:v2")
    following = [s for s in STAGES if s.recipe == stage.recipe and set(s.consumes) & set(stage.produces)]
    if following:
        out.append(f"nemotron {stage.recipe} pipe {stage.name} {following[0].name} -c {here} --dry-run")
    return out


def _table(rows: list[tuple[str, ...]], width: int, indent: int = 2, cap: int = 36, alone: bool = True) -> list[str]:
    """Rows as aligned columns, one string per row; the last column takes what is left of ``width`` and wraps
    onto lines of its own below (indented to its column; the string holds newlines), never cut. The first column (a name) is never cut: it is as wide as the longest name, up to ``cap``
    characters (so that the description keeps its room); a longer name is a line of its own, the rest of its row
    on the next line (the string holds a newline), so every row keeps the columns aligned; with ``alone`` False
    it pushes its row instead (one line per row, for a listing read by grep)."""
    if not rows:
        return []
    ncol = len(rows[0])
    widths = [min(max(len(r[i]) for r in rows), cap if i == 0 else 22) for i in range(ncol - 1)]
    out = []
    for row in rows:
        cells, used = [], indent
        for i in range(ncol - 1):
            text = row[i] if i == 0 else _cut(row[i], widths[i])
            cells.append(text.ljust(widths[i]))
            used += (widths[i] if alone else max(len(text), widths[i])) + 2
        last = _wrap(row[-1], max(width - used, 12), used)
        if alone and len(row[0]) > widths[0]:  # too long for its column: alone, the row below it
            rest = (" " * (indent + widths[0] + 2) + "  ".join([*cells[1:], last])).rstrip()
            out.append(" " * indent + row[0] + ("\n" + rest if rest.strip() else ""))
        else:
            out.append((" " * indent + "  ".join([*cells, last])).rstrip())
    return out


#: the help's width (click's formatter: the terminal's columns less 2) from which a key's row holds its description
WIDE = 98


def key_lines(docs: list[KeyDoc], width: int) -> list[str]:
    """The key table, a blank line between top-level sections. At ``width`` >= :data:`WIDE` (a terminal of 100
    columns or more) one line per key (key, type, default, description); narrower, the description goes on a line
    of its own below its key. A description is whole, wrapped (:func:`_wrap`)."""
    rows = [(d.key, d.type, d.default, d.description) for d in docs]
    wide = width >= WIDE
    lines = _table(rows if wide else [r[:3] for r in rows], width)
    out: list[str] = []
    for i, (line, d) in enumerate(zip(lines, docs)):
        before = docs[i - 1].key if i else ""
        if i and d.key.split(".", 1)[0] != before.split(".", 1)[0] and ("." in d.key or "." in before):
            out.append("")
        out.append(line)
        if not wide and d.description:
            out.append("      " + _wrap(d.description, width - 6, 6))
    return out


def recipe_lines(stage: Stage, listed: set[str]) -> list[str]:
    """For a NeMo RL stage: how many keys the NeMo RL recipe its ``nemo_rl.base`` names adds below
    ``default.yaml`` (:func:`nemotron.config.nemo_rl_base.base_layer`; the keys not listed above, nor under a key
    listed above) and the command
    that lists them (``nemotron RECIPE keys STAGE [PREFIX]``: :mod:`nemotron.cli.keys`). A recipe that cannot be
    read is said on the line, not raised."""
    from nemotron.config.nemo_rl_base import base_layer
    from nemotron.config.tree import leaves
    from nemotron.config.yamlio import load_file
    from nemotron.errors import NemotronError

    command = f"nemotron {stage.recipe} keys {stage.name} [PREFIX] [-c NAME]"
    try:
        base = base_layer(load_file(_stage_dir(stage) / "default.yaml"))
    except (NemotronError, KeyError) as exc:
        return [f"  (the NeMo RL recipe nemo_rl.base names cannot be read: {getattr(exc, 'message', exc)})"]
    if base is None:
        return []
    label, data = base
    # a recipe key under one default.yaml sets whole (``teacher_model_by_agent_name: null``) is gone from the tree
    extra = [k for k, _ in leaves(data)
             if not any(".".join(k.split(".")[:i]) in listed for i in range(1, k.count(".") + 2))]
    return [f"  and {len(extra)} keys of the NeMo RL recipe nemo_rl.base names ({label}, the layer below "
            f"default.yaml);", f"  every key with its type, value and layer: {command}"]


def stage_sections(stage: Stage, width: int = 100) -> list[str]:
    """The help sections of ``stage`` as lines of at most ``width`` characters (a key name longer than its
    column may push a row past it). A file that cannot be read is one line in its section, not a failure of
    ``--help``."""
    import textwrap

    from nemotron.errors import NemotronError

    out: list[str] = []
    rel = f"stages/{stage.config_dir}/"
    out += ["", f"Configs (-c NAME, files of {rel}; or -c PATH to a YAML file):"]
    refused = refused_configs(stage)
    out += _table([(f"{n}*" if n in refused else n, about) for n, about in config_rows(stage)], width)
    for reason in dict.fromkeys(refused.values()):  # as `nemotron RECIPE list` marks them
        names = ", ".join(n for n, r in refused.items() if r == reason)
        out += textwrap.wrap(f"* {names}: refused by the dry run and a run in this version (exit 2): {reason}",
                             width=width, initial_indent="  ", subsequent_indent="    ", break_long_words=False)
    try:
        docs = key_docs(stage)
    except NemotronError as exc:
        docs = []
        out += ["", f"Config keys: {rel}default.yaml cannot be read: {exc.message}"]
    if docs:
        out += ["", f"Config keys ({rel}default.yaml; every key a config or key=value may set, {len(docs)}):"]
        out += key_lines(docs, width)
        if stage.family.nemo_rl:
            out += recipe_lines(stage, {d.key for d in docs})
    arts = artifact_rows(stage) if docs else []
    if arts:
        out += ["", "Artifact inputs (the latest version recorded where the run runs;",
                "  KEY=PATH takes a path instead, 'KEY=${art:NAME:N,FIELD}' pins version N, for every key NAME feeds):"]
        out += [f"  {key} = ${{art:{name}{':' + version if version else ''},{field}}}"
                for key, name, version, field in arts]
    where, profiles = profile_rows()
    out += ["", f"Profiles (--run / --batch PROFILE; {where}):"]
    out += _table([(n, ex) for n, ex in profiles], width) if profiles else ["  none"]
    out += ["", "Examples:"] + [f"  {line}" for line in examples(stage, docs, profiles, refused)]
    return out


def refused_configs(stage: Stage) -> dict[str, str]:
    """``{config name: why}`` for each config of ``stage`` that the dry run and the run refuse whatever the profile
    (:func:`nemotron.validation.config_refusal`, the check ``nemotron RECIPE list`` marks with ``*``); a config that
    cannot be read is left to its own compile error."""
    from nemotron import validation
    from nemotron.config.paths import config_names
    from nemotron.errors import NemotronError

    out = {}
    for name in config_names(stage):
        try:
            reason = validation.config_refusal(stage, name)
        except NemotronError:
            continue
        if reason is not None:
            out[name] = reason
    return out


__all__ = ["KeyDoc", "artifact_rows", "config_rows", "examples", "file_keys", "key_docs", "key_lines", "profile_rows",
           "recipe_lines", "stage_sections"]
