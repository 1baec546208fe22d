"""Config compilation: layers, overrides, interpolation and provenance.

Layers, lowest to highest:

1. ``schema`` — :data:`SCHEMA_DEFAULTS`, the keys every stage has (its resource request, ``run.env``);
   for a NeMo RL stage, the NeMo RL recipe its config names (``nemo_rl.base``, layer ``nemo-rl:<file>``) above it;
2. the stage's ``default.yaml`` — every other key the stage knows (a key absent from it is unknown);
3. the ``-c NAME|PATH`` config and the configs it inherits through ``defaults:`` (parents first);
4. command-line overrides: ``key=value`` (key must exist), ``+key=value`` (add a key),
   ``~key`` (delete), ``key[0]=value`` / ``key.0=value`` (a list element).

Overrides of the form ``profile.KEY=VALUE`` are not config: they override a key of the env.toml
profile for this command (the profile owns cluster logistics and the node shape) and are returned
separately.

After merging, ``${...}`` interpolations are resolved with OmegaConf: references to other keys,
``${oc.env:VAR[,default]}``, ``${art:NAME[:VERSION],FIELD}`` (an artifact record),
``${stages:REL}`` (a file under ``stages/``), ``${pkgdata:PACKAGE,REL}`` (a file inside an installed
package, found without importing it) and ``${stdlib:}`` (the standard library folder). An
environment variable or artifact that does not exist yet leaves the value unresolved with a
warning: ``--dry-run`` still succeeds, submission refuses.

Every leaf remembers the layer that set it (:attr:`Compiled.provenance`), which ``--dry-run`` shows.
"""

from __future__ import annotations

import contextvars
import copy
import difflib
import hashlib
import importlib.util
import json
import math
import os
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from nemotron.config import artifacts, yamlio
from nemotron.config.nemo_rl_base import BASE_KEY, base_layer
from nemotron.config.paths import OUTPUT_FOLDER_KEYS, config_names, repo_root, stages_dir
from nemotron.config.registry import Stage
from nemotron.config.tree import _leaves, dotted, leaves
from nemotron.errors import ConfigError, Problem, UsageError, closest, plural

#: Keys every stage has, below its default.yaml. ``run.env`` is the stage's resource request;
#: everything else about the cluster belongs to the env.toml profile.
SCHEMA_DEFAULTS: dict[str, Any] = {
    "run": {
        "env": {
            "nodes": 1,  # nodes the stage asks for; follows from its parallel layout
            "gpus_per_node": None,  # null = the profile's node shape
            "cpus": None,  # CPUs for a local Ray / process pool; null = all of this machine's
        },
    },
}

#: Label of each layer as shown by ``--dry-run``.
SCHEMA, OVERRIDE = "schema", "override"

_SEGMENT = r"[A-Za-z_][A-Za-z0-9_\-]*"
_KEY_RE = re.compile(rf"^{_SEGMENT}(?:\.(?:{_SEGMENT}|\d+)|\[\d+\])*$")


# --------------------------------------------------------------------------------------------- #
# overrides
# --------------------------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Override:
    """One parsed command-line override. ``op`` is ``set``, ``add`` or ``delete``; ``path`` the
    segments (``str`` for mapping keys, ``int`` for list indices); ``text`` the original argument."""

    op: str
    path: tuple[str | int, ...]
    value: Any
    text: str

    @property
    def key(self) -> str:
        return dotted(self.path)


def _split_key(key: str) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    for piece in re.findall(rf"{_SEGMENT}|\[\d+\]|\d+", key):
        parts.append(int(piece.strip("[]")) if piece[0] in "[0123456789" else piece)
    return tuple(parts)


def parse_override(text: str) -> Override:
    """Parse ``key=value``, ``+key=value``, ``~key`` (or ``~key=anything``).

    Raises:
        UsageError: for a malformed argument (says which forms are accepted).
        ConfigError: a value the YAML 1.2 reader refuses (:func:`nemotron.config.yamlio.parse_scalar`): among them a
            plain value only Python reads as a number (``2_048``, ``0b101``, ``0X800``), named with the key.
    """
    op = "set"
    body = text
    if body.startswith("+"):
        op, body = "add", body[1:]
    elif body.startswith("~"):
        op, body = "delete", body[1:]
    key, eq, raw = body.partition("=")
    key = key.strip()
    if not _KEY_RE.match(key) or (op != "delete" and not eq):
        raise UsageError(
            f"cannot read the argument {text!r}",
            "overrides look like key=value, +new.key=value, ~key or list.key[0]=value; options start with --",
        )
    try:
        value = None if op == "delete" else yamlio.parse_scalar(raw)
    except yamlio.NotANumber as exc:  # 2_048, 0b101, 0X800: a number in Python, none in YAML 1.2
        raise ConfigError(f"override {text!r}: {exc.message}", exc.hint) from None
    return Override(op=op, path=_split_key(key), value=value, text=text)


# --------------------------------------------------------------------------------------------- #
# config files and inheritance
# --------------------------------------------------------------------------------------------- #


def _raw_tree(stage: Stage, config: str | None) -> dict[str, Any]:
    """``stage -c config``'s chain merged over ``default.yaml``, nothing resolved nor checked (shapes are checked
    when it compiles)."""
    tree: dict[str, Any] = {}
    default_data = _read_config(stages_dir() / stage.config_dir / "default.yaml")
    default_data.pop("defaults", None)
    for data in [default_data, *(f.data for f in _chain(stage, config or "default"))]:
        _merge(tree, data, "", {}, [], strict=False, where="", root=tree)
    return tree


def config_backend(stage: Stage, config: str | None = None) -> str | None:
    """The ``backend`` key of ``stage -c config`` as written in its files (None: the stage's default backend).

    Raises:
        ConfigError: an unknown config, an unreadable file, an inheritance cycle.
    """
    value = _raw_tree(stage, config).get("backend")
    return str(value) if isinstance(value, str) and value else None


def config_raw(stage: Stage, config: str | None = None) -> dict[str, Any]:
    """``stage -c config`` as written in its files, merged over ``default.yaml``: nothing resolved nor checked
    (``nemotron RECIPE list`` and ``--help`` read a config's backend and rule-bound keys from it).

    Raises:
        ConfigError: an unknown config, an unreadable file, an inheritance cycle.
    """
    return _raw_tree(stage, config)


def config_artifacts(stage: Stage, config: str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(consumes, produces)`` of ``stage -c config`` (None: ``default``), read from its files, nothing
    resolved: consumes are the artifact names its ``${art:NAME[:VERSION],FIELD}`` values take, in key
    order, once the config chain is merged over ``default.yaml`` (a config that re-points a key drops the
    default's reference: ``quantize -c local`` takes ``sft-checkpoint`` and ``pretrain-data``, not
    ``mopd-checkpoint``); produces are its ``output_artifact`` when set, else the registry's ``produces``
    (as :func:`nemotron.launch.plan.planned_outputs` records them).

    Raises:
        ConfigError: an unknown config, an unreadable file, an inheritance cycle.
    """
    tree = _raw_tree(stage, config)
    consumes: list[str] = []
    for _, value in leaves(tree):
        for ref in re.findall(r"\$\{art:([^,}]+)", value) if isinstance(value, str) else ():
            for alt in ref.split("|"):  # NAME|OTHER: either feeds the stage
                name = artifacts.parse_ref(alt.strip())[0]
                if name not in consumes:
                    consumes.append(name)
    named = tree.get("output_artifact")
    produces = (named,) if isinstance(named, str) and named else stage.produces
    return tuple(consumes), produces


def _base_layer(stage: Stage, config: str | None, overrides: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``(label, data)`` of the framework recipe ``stage -c config`` is layered on, or None: for NeMo RL stages
    the recipe its ``nemo_rl.base`` names (:func:`nemotron.config.nemo_rl_base.base_layer`; a ``nemo_rl.*``
    override counts). It sits below ``default.yaml``: the stage's files and the overrides may set any key it
    has.

    Raises:
        ConfigError: an unknown recipe; an unreadable config file.
    """
    if not stage.family.nemo_rl:
        return None

    given = {ov.path[1]: ov.value for ov in (parse_override(o) for o in overrides)
             if len(ov.path) == 2 and ov.path[0] == BASE_KEY and ov.op in ("set", "add")}
    return base_layer(_raw_tree(stage, config), given)


def _resolve_config_ref(stage: Stage, ref: str, relative_to: Path | None) -> Path:
    folder = stages_dir() / stage.config_dir
    looks_like_path = "/" in ref or ref.endswith((".yaml", ".yml"))
    if looks_like_path:
        candidates = [Path(ref).expanduser()]
        if relative_to is not None and not Path(ref).is_absolute():
            candidates.insert(0, relative_to / ref)
        for c in candidates:
            if c.is_file():
                return c.resolve()
        if any(c.is_dir() for c in candidates):
            raise ConfigError(f"config file {ref}: is a folder, not a YAML file",
                              f"pass the YAML file itself, or a config name: {', '.join(config_names(stage))}")
        raise ConfigError(f"config file {ref} does not exist", f"configs of {stage.title}: {', '.join(config_names(stage))}")
    candidate = folder / f"{ref}.yaml"
    if candidate.is_file():
        return candidate
    if ref == "local" and stage.family.prepares_data and (folder / "tiny.yaml").is_file():
        return folder / "tiny.yaml"  # data prep's tiny sample runs anywhere: it is also its local
    if relative_to is not None and (relative_to / f"{ref}.yaml").is_file():
        return (relative_to / f"{ref}.yaml").resolve()
    names = config_names(stage)
    close = closest(ref, names)
    hint = f"did you mean '{close}'? " if close else ""
    raise ConfigError(f"{stage.title} has no config {ref!r}", f"{hint}configs: {', '.join(names)}; or pass a path to a YAML file")


@dataclass
class _File:
    path: Path
    label: str
    data: dict[str, Any]


def _read_config(path: Path) -> dict[str, Any]:
    data = yamlio.load_file(path)
    _refuse_duplicate_keys(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys, not {type(data).__name__}")
    return data


def _refuse_duplicate_keys(path: Path) -> dict[tuple, int]:
    """A config file that sets one key twice in the same mapping is refused: YAML loaders keep the last
    value silently, so the first one (perhaps the one the user edited) would be lost without a word.
    Call after the file parsed (syntax errors are :func:`nemotron.config.yamlio.loads`'s to report).

    Returns:
        The 1-based line of every key of the file by its path (``("train", "train_iters") -> 12``), for
        messages that name a key's line.

    Raises:
        ConfigError: ``file:line: duplicate key 'a.b'`` for the second occurrence (and the first one's line).
    """
    import yaml

    lines: dict[tuple, int] = {}

    def walk(node: Any, prefix: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                if name is not None and name != "<<":
                    line = key.start_mark.line + 1
                    if name in seen:
                        raise ConfigError(f"{path}:{line}: duplicate key '{dotted((*prefix, name))}' "
                                          f"(first set at line {seen[name]}); YAML would silently keep the last",
                                          "keep one of the two lines")
                    seen[name] = line
                    lines[(*prefix, name)] = line
                walk(value, (*prefix, name if name is not None else "?"))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*prefix, i))

    walk(yamlio.compose(Path(path).read_text(encoding="utf-8")), ())
    return lines


def _chain(stage: Stage, ref: str) -> list[_File]:
    """Config files for ``-c ref``, parents first; ``default.yaml`` itself excluded."""
    default_path = (stages_dir() / stage.config_dir / "default.yaml").resolve()
    out: list[_File] = []
    seen: list[str] = []

    def visit(r: str, rel: Path | None, trail: list[str]) -> None:
        path = _resolve_config_ref(stage, r, rel).resolve()
        if path == default_path:
            return
        label = path.name if path.parent == default_path.parent else str(path)
        if label in trail:
            raise ConfigError(
                f"config inheritance cycle: {' -> '.join([*trail, label])}",
                "remove one of the 'defaults:' entries so the chain ends at default",
            )
        if label in seen:
            return
        data = _read_config(path)
        parents = data.pop("defaults", None)
        if parents is None:
            parents = []
        elif isinstance(parents, str):
            parents = [parents]
        elif not (isinstance(parents, list) and all(isinstance(p, str) for p in parents)):
            raise ConfigError(f"{path}: 'defaults' must be a config name or a list of names, got {parents!r}")
        for parent in parents:
            visit(parent, path.parent, [*trail, label])
        seen.append(label)
        out.append(_File(path=path, label=label, data=data))

    visit(ref, None, [])
    return out


# --------------------------------------------------------------------------------------------- #
# merging with provenance
# --------------------------------------------------------------------------------------------- #


def _type_name(v: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "mapping"}.get(type(v), type(v).__name__)


def _compatible(old: Any, new: Any) -> bool:
    if old is None or new is None:
        return True
    if (isinstance(new, str) and "${" in new) or (isinstance(old, str) and "${" in old):
        return True
    if isinstance(old, bool) or isinstance(new, bool):
        return isinstance(old, bool) and isinstance(new, bool)
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return not (isinstance(old, int) and isinstance(new, float) and _inexact(new) is not None)
    return type(old) is type(new)


#: The largest magnitude below which every integer is a float exactly (IEEE 754 binary64: a 53-bit significand).
_EXACT_FLOAT_INT = 2 ** 53


def _inexact(value: float) -> str | None:
    """Why the float ``value`` (``1e3``, ``2048.0``, ``1e30``) is no exact integer for an int key, or None when it
    is one: a fraction (``1.5``), not finite (``.inf``), or beyond 2**53 (``1e30``), where the float is the nearest
    binary value, not the number written (``1e30`` reads as 1000000000000000019884624838656)."""
    if not math.isfinite(value):
        return "not a finite number"
    if not value.is_integer():
        return "not a whole number"
    if abs(value) > _EXACT_FLOAT_INT:
        return (f"beyond 2**53, a float is no exact integer (it reads as {int(value)}); write the integer in "
                "digits if that many is meant")
    return None


def _short(value: Any, width: int = 60) -> str:
    """``value`` in flow YAML for a one-line message, at most about ``width`` characters: a longer mapping is
    ``a mapping of N keys (k1, k2, k3, ...)``, a longer list ``a list of N items``, other text is cut with ``...``."""
    text = yamlio.flow(value)
    if len(text) <= width:
        return text
    if isinstance(value, dict):
        return f"{plural(len(value), 'key')}: {', '.join(map(str, list(value)[:3]))}, ..."
    if isinstance(value, list):
        return f"a list of {plural(len(value), 'item')}"
    return text[: width - 3] + "..."


def _as_declared(old: Any, new: Any) -> Any:
    """``new`` in the type of the value it replaces where that is an int and ``new`` an integral float: ``1e3`` (a
    YAML float) for an int key is the int 1000, never 1000.0 in the compiled config (a non-integral float is refused
    by :func:`_compatible`). Anything else is returned as is."""
    if isinstance(old, int) and not isinstance(old, bool) and isinstance(new, float) and new.is_integer():
        return int(new)
    return new


def _suggest(key: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if not close:
        last = key.rsplit(".", 1)[-1]
        close = [c for c in candidates if c.rsplit(".", 1)[-1] == last][:1]
    return f"did you mean '{close[0]}'?" if close else ""


def _known_keys(tree: dict) -> list[str]:
    keys = []

    def walk(node: Any, prefix: tuple) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                keys.append(dotted((*prefix, k)))
                walk(v, (*prefix, k))

    walk(tree, ())
    return keys


def _merge(base: dict, over: dict, label: str, prov: dict[str, str], errors: list[str], *, strict: bool,
           where: str, root: dict, prefix: tuple = (), open_paths: frozenset = frozenset(),
           lines: dict[tuple, int] | None = None) -> None:
    for key, value in over.items():
        path = (*prefix, key)
        name = dotted(path)
        if key not in base:
            if strict and tuple(prefix) not in open_paths:
                hint = _suggest(name, _known_keys(root))
                at = f"{where}:{lines[path]}" if lines and path in lines else where
                errors.append(f"{at}: unknown key '{name}'" + (f" ({hint})" if hint else ""))
                continue
            base[key] = copy.deepcopy(value)
            for lp, _ in _leaves(value, path):
                prov[dotted(lp)] = label
            continue
        old = base[key]
        if isinstance(old, dict) and isinstance(value, dict):
            _merge(old, value, label, prov, errors, strict=strict, where=where, root=root, prefix=path,
                   open_paths=open_paths, lines=lines)
            continue
        if not _compatible(old, value) or (isinstance(old, dict) and old and value is not None):
            why = (f": {_inexact(value)}" if isinstance(old, int) and not isinstance(old, bool)
                   and isinstance(value, float) else "")
            errors.append(f"{where}: '{name}' expects {_type_name(old)}, got {_type_name(value)} {yamlio.flow(value)}"
                          f"{why}")
            continue
        for stale in [k for k in prov if k == name or k.startswith((name + ".", name + "["))]:
            del prov[stale]
        base[key] = copy.deepcopy(_as_declared(old, value))
        for lp, _ in _leaves(value, path):
            prov[dotted(lp)] = label


def _open_mappings(tree: Any, prefix: tuple = ()) -> frozenset:
    """Paths of the empty mappings of default.yaml: free-form maps (``path_vars: {}``) whose keys are
    the user's to choose."""
    out: set[tuple] = set()
    if isinstance(tree, dict):
        if not tree and prefix:
            out.add(prefix)
        for k, v in tree.items():
            out |= _open_mappings(v, (*prefix, k))
    return frozenset(out)


def _sections(tree: Any, prefix: tuple = ()) -> frozenset:
    """Paths of the non-empty mappings of the schema and ``default.yaml``: the sections a stage is made of
    (``train``, ``run.env``), which ``~key`` may not delete (free-form maps are empty there: their entries
    may be deleted)."""
    out: set[tuple] = set()
    if isinstance(tree, dict) and tree:
        if prefix:
            out.add(prefix)
        for k, v in tree.items():
            out |= _sections(v, (*prefix, k))
    return frozenset(out)


def _apply_override(tree: dict, ov: Override, prov: dict[str, str], open_paths: frozenset = frozenset(),
                    sections: frozenset = frozenset()) -> None:
    if ov.op == "set" and tuple(ov.path[:-1]) in open_paths:
        ov = Override(op="add" if _child(_resolve_path(tree, ov.path[:-1]), ov.path[-1]) is _MISSING else "set",
                      path=ov.path, value=ov.value, text=ov.text)
    node: Any = tree
    for i, seg in enumerate(ov.path[:-1]):
        nxt = _child(node, seg)
        if nxt is _MISSING:
            if ov.op == "add" and isinstance(node, dict):
                node[seg] = {}
                nxt = node[seg]
            else:
                _unknown(tree, ov, ov.path[: i + 1])
        node = nxt
    last = ov.path[-1]
    exists = _child(node, last) is not _MISSING
    name = ov.key
    if ov.op == "add":
        if exists:
            raise ConfigError(f"override {ov.text!r}: '{name}' already exists", f"drop the '+': {name}={ov.text.partition('=')[2]}")
        if not isinstance(node, dict):
            raise ConfigError(f"override {ov.text!r}: '{dotted(ov.path[:-1])}' is not a mapping")
        node[last] = ov.value
    elif ov.op == "delete":
        if not exists:
            _unknown(tree, ov, ov.path)
        if tuple(ov.path) in sections:
            raise ConfigError(f"override {ov.text!r}: '{name}' is a section of the stage and cannot be deleted "
                              "(its keys would fall back to values you never set)",
                              f"set its keys instead ({name}.KEY=VALUE), or delete one key (~{name}.KEY)")
        if isinstance(node, list):
            node.pop(last)  # type: ignore[arg-type]
        else:
            del node[last]
    else:
        if not exists:
            _unknown(tree, ov, ov.path)
        old = node[last]
        if tuple(ov.path) in sections and ov.value == {}:  # every key of the section gone, as with ~SECTION
            raise ConfigError(f"override {ov.text!r}: '{name}' is a section of the stage and cannot be emptied "
                              "(its keys would fall back to values you never set)",
                              f"set its keys instead ({name}.KEY=VALUE), or delete one key (~{name}.KEY)")
        if not _compatible(old, ov.value) or (isinstance(old, dict) and old and ov.value is not None and not isinstance(ov.value, dict)):
            why = (f": {_inexact(ov.value)}" if isinstance(old, int) and not isinstance(old, bool)
                   and isinstance(ov.value, float) else "")
            raise ConfigError(
                f"override {ov.text!r}: '{name}' expects {_type_name(old)} (now {_short(old)}), got "
                f"{_type_name(ov.value)}{why}",
                f"give a value of type {_type_name(old)}"
                + (" (quote it for a string: key='\"...\"')" if isinstance(old, str) else "")
                + (f" ({yamlio.INT_FORMS})" if isinstance(old, int) and not isinstance(old, bool) else ""),
            )
        node[last] = _as_declared(old, ov.value)  # a mapping value replaces the mapping: its keys are the user's explicit choice
    if any(isinstance(seg, int) for seg in ov.path):  # lists are leaves: the whole list is now an override
        first = next(i for i, seg in enumerate(ov.path) if isinstance(seg, int))
        prov[dotted(ov.path[:first])] = OVERRIDE
        return
    for stale in [k for k in prov if k == name or k.startswith((name + ".", name + "["))]:
        del prov[stale]
    if ov.op != "delete":
        for lp, _ in _leaves(ov.value, tuple(ov.path)):
            prov[dotted(lp)] = OVERRIDE


_MISSING = object()


def _child(node: Any, seg: str | int) -> Any:
    if isinstance(node, dict):
        if isinstance(seg, int) and seg not in node and str(seg) in node:
            seg = str(seg)
        return node.get(seg, _MISSING)
    if isinstance(node, list) and isinstance(seg, int):
        return node[seg] if -len(node) <= seg < len(node) else _MISSING
    return _MISSING


def _unknown(tree: dict, ov: Override, upto: tuple) -> None:
    name = dotted(upto)
    parent = _resolve_path(tree, upto[:-1])
    whole = dotted(upto[:-1])
    if isinstance(parent, list):
        raise ConfigError(f"override {ov.text!r}: index {upto[-1]} out of range ('{whole}' has "
                          f"{plural(len(parent), 'item')}: no index {upto[-1]})",
                          f"set the whole list: {whole}=[...] (an index replaces an element that exists)")
    if isinstance(upto[-1], int) and upto[:-1] and not isinstance(parent, dict):  # model.recompute_modules: null
        if parent is None:
            raise ConfigError(f"override {ov.text!r}: index {upto[-1]} out of range ('{whole}' is null, not a list: "
                              f"no index {upto[-1]})", f"set the whole list: {whole}=[...]")
        raise ConfigError(f"override {ov.text!r}: '{whole}' is a {_type_name(parent)}, not a list: no index {upto[-1]}",
                          f"set it whole: {whole}=VALUE")
    hint = _suggest(name, _known_keys(tree))
    raise ConfigError(
        f"override {ov.text!r}: unknown key '{name}'",
        (hint + " " if hint else "") + "use +key=value to add a key that the stage does not define",
    )


def _resolve_path(tree: Any, path: tuple) -> Any:
    node = tree
    for seg in path:
        node = _child(node, seg)
        if node is _MISSING:
            return None
    return node


# --------------------------------------------------------------------------------------------- #
# interpolation
# --------------------------------------------------------------------------------------------- #
class Unresolved(Exception):
    """An interpolation whose input does not exist yet (env var, artifact)."""


_RESOLVERS_READY = False

@dataclass
class _Resolution:
    """What the resolvers of one :func:`compile_config` read and record: ``env`` shadows ``os.environ`` for
    ``${oc.env:...}`` (a profile's job environment), ``config`` is the config name artifacts are looked up for
    (None: a config file given by path), ``used`` records ``{ref: "name vN" | "name (planned)"}`` of every
    ``${art:...}`` resolved."""

    env: dict[str, str] = field(default_factory=dict)
    config: str | None = None
    used: dict[str, str] = field(default_factory=dict)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # ref -> the record (or planned fields) taken
    pins: dict[str, int] = field(default_factory=dict)  # artifact name -> the version a key pins (:func:`_pins`)


def _pins(tree: dict[str, Any]) -> dict[str, int]:
    """``{artifact: version}`` of the ``${art:NAME:N,FIELD}`` pins in ``tree``'s values. Every other
    ``${art:NAME,...}`` of the same artifact follows the pin (:func:`compile_config`): the keys one artifact feeds
    (sft-data's ``dataset_root`` and its packed Parquet and metadata files) come from one version, never mixed.

    Raises:
        ConfigError: two keys pin the same artifact to different versions (both keys named).
    """
    from nemotron.config.tree import leaves

    seen: dict[str, tuple[int, str]] = {}
    for key, value in leaves(tree):
        if not isinstance(value, str):
            continue
        for ref in re.findall(r"\$\{art:([^,}]+)", value):
            if "|" in ref:
                continue
            name, version = artifacts.parse_ref(ref.strip())
            if version is None:
                continue
            if name in seen and seen[name][0] != version:
                raise ConfigError(f"{key}: pins {name} v{version} but {seen[name][1]} pins v{seen[name][0]}: one run "
                                  f"would read two versions of {name}",
                                  f"pin one version; the other keys {name} feeds follow a pin of any of them")
            seen.setdefault(name, (version, key))
    return {name: v for name, (v, _key) in seen.items()}


#: The resolution in progress (OmegaConf's resolvers are registered once, process-wide; they read this).
_RESOLUTION: contextvars.ContextVar[_Resolution] = contextvars.ContextVar("resolution")


def _register_resolvers() -> None:
    global _RESOLVERS_READY
    if _RESOLVERS_READY:
        return
    from omegaconf import OmegaConf

    def env(name: str, default: Any = _MISSING) -> Any:
        overlay = _RESOLUTION.get().env
        if name in overlay:
            return overlay[name]
        if name in os.environ:
            return os.environ[name]
        if default is _MISSING:
            raise Unresolved(f"environment variable {name} is not set")
        return default

    def art(ref: str, fieldname: str = "path") -> Any:
        config = _RESOLUTION.get().config
        alternatives = [r.strip() for r in str(ref).split("|")]
        if len(alternatives) > 1:  # NAME|OTHER: the first planned, else the one recorded last (lookup_any)
            got = artifacts.lookup_any(alternatives, config)
            name, version = (got[0], None) if got else artifacts.parse_ref(alternatives[-1])
            rec = got[1] if got else None
        else:
            name, version = artifacts.parse_ref(str(ref))
            if version is None:  # another key pins this artifact: every key it feeds reads that version
                version = _RESOLUTION.get().pins.get(name)
            rec = artifacts.lookup(name, version, config)
        if rec is None and len(alternatives) > 1:
            raise Unresolved(f"artifact {ref} does not exist yet: none of {', '.join(alternatives)}"
                             + (f" by a {' or '.join(sorted(artifacts.accepted_configs(config)))} run" if config else ""))
        if rec is None and not artifacts.is_known(name):  # a typo: no stage makes it, no run recorded it
            close = difflib.get_close_matches(name, artifacts.known_names(), n=1, cutoff=0.6)
            raise Unresolved(f"no artifact {name}" + (f" (did you mean {close[0]}?)" if close else "")
                             + ": no stage makes it and no run recorded it")
        if rec is None and version is not None and artifacts.versions(name):
            have = artifacts.versions(name)
            raise Unresolved(f"artifact {name} has no version {version}: "
                             f"{'version' if len(have) == 1 else 'versions'} {artifacts.span(have)} exist"
                             + ("s" if len(have) == 1 else ""))
        if rec is None:
            made_by = ""
            if version is None:  # a -c FILE (no config name) takes any config's run
                made_by = (f" by a {' or '.join(sorted(artifacts.accepted_configs(config)))} run" if config
                           else " by a run of any config (the input of a -c FILE)")
            if name.startswith(artifacts.ANY_CONSUMER_PREFIXES):  # a released RL blend's stage file
                made_by = "; nemotron ultra3 data prep rl -c ultra-blends records it"
            left = artifacts.skipped(name, config) if version is None else []
            raise Unresolved(f"artifact {ref} does not exist yet{made_by}" + (
                f" that this run can read (left out: {'; '.join(left[:3])}; pin one with ${{art:{name}:N,...}})"
                if left else ""))
        _RESOLUTION.get().used[str(ref)] = (f"{name} (planned)" if rec.get("version") is None
                                            else f"{name} v{rec['version']}")
        _RESOLUTION.get().records[str(ref)] = {"name": name, **rec}
        if fieldname not in rec:
            raise ConfigError(f"artifact {ref} has no field {fieldname!r}", f"fields: {', '.join(sorted(rec))}")
        return rec[fieldname]

    def stages(rel: str = "") -> str:
        return str(stages_dir() / rel)

    def pkgdata(package: str, rel: str = "") -> str:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"${{pkgdata:{package},{rel}}}: Python package {package!r} is not installed",
                              f"pip install {package.replace('_', '-')}")
        return str(Path(next(iter(spec.submodule_search_locations))) / rel)

    def stdlib() -> str:
        return sysconfig.get_paths()["stdlib"]

    def project(rel: str = "") -> str:
        # the source checkout's folder (the one holding pyproject.toml and stages/), so that a default such as
        # ../shared/data names the same files from any working directory; an installed wheel has no checkout:
        # there REL stays relative, taken from the working directory as any relative path is
        root = repo_root()
        return str(root / rel) if root is not None else rel

    # NeMo RL's recipes (a NeMo RL stage's base layer) compute with these (nemo_rl/utils/config.py
    # register_omegaconf_resolvers: ${mul:a,b} and friends)
    arith = (("add", lambda a, b: a + b), ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b),
             ("max", lambda a, b: max(a, b)))
    # OmegaConf 2.4's register_resolver takes replace/use_cache/annotation_validation; 2.3's register_resolver is
    # the deprecated 2.0 API (name, resolver) and register_new_resolver the one to call there
    import inspect  # here, not at module level: the CLI's start-up imports this module

    register = getattr(OmegaConf, "register_resolver", None)
    if register is not None and "annotation_validation" not in inspect.signature(register).parameters:
        register = None
    for rname, fn in (("oc.env", env), ("art", art), ("stages", stages), ("pkgdata", pkgdata), ("stdlib", stdlib),
                      ("project", project), *arith):
        if register is not None:
            register(rname, fn, replace=True, use_cache=False, annotation_validation="off")
        else:  # OmegaConf 2.3
            OmegaConf.register_new_resolver(rname, fn, replace=True, use_cache=False)
    _RESOLVERS_READY = True


#: The hint of every refused interpolation: the forms a config may use.
_INTERPOLATION_HINT = "interpolations: ${other.key}, ${oc.env:VAR,default}, ${art:NAME,FIELD}"


def _origin(prov: dict[str, str], path: tuple) -> str:
    """The layer that set the value at ``path``: its own provenance, else that of the nearest enclosing key
    recorded (a list element's is its list's); ``?`` when none is."""
    for n in range(len(path), 0, -1):
        if dotted(path[:n]) in prov:
            return prov[dotted(path[:n])]
    return "?"


def _refuse_malformed(tree: dict, prov: dict[str, str]) -> None:
    """Refuse a value whose ``${...}`` does not parse (``${``, a missing closing brace) before OmegaConf sees the
    tree: OmegaConf refuses the whole tree at creation with a bare GrammarParseError that names no layer.

    Raises:
        ConfigError: ``'KEY' = 'VALUE' (LAYER): malformed interpolation: ...`` for the first such value; LAYER is
            ``override`` or the config file that set it.
    """
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar_parser import parse

    def strings(node: Any, path: tuple) -> Iterator[tuple[tuple, str]]:
        if isinstance(node, dict):
            for k, v in node.items():
                yield from strings(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from strings(v, (*path, i))
        elif isinstance(node, str) and "${" in node:
            yield path, node

    for path, value in strings(tree, ()):
        try:
            parse(value)
        except GrammarParseError as exc:
            msg = str(exc).splitlines()[0] if str(exc) else "cannot parse"
            raise ConfigError(f"'{dotted(path)}' = {value!r} ({_origin(prov, path)}): malformed interpolation: "
                              f"{msg}", _INTERPOLATION_HINT + " (each ${ needs its closing })") from None


def _resolve(tree: dict, prov: dict[str, str]) -> tuple[dict, dict[str, str]]:
    """Resolve every interpolation. Returns the resolved tree and ``{key: reason}`` of values left
    unresolved (kept as their ``${...}`` text).

    Raises:
        ConfigError: for an interpolation that is wrong rather than not-yet-available (a reference
            to a key that does not exist, an unknown resolver).
    """
    if not any(isinstance(v, str) and "${" in v for _, v in _leaves(tree)):
        return copy.deepcopy(tree), {}
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _register_resolvers()
    _refuse_malformed(tree, prov)
    conf = OmegaConf.create(tree, flags={"allow_objects": False})
    unresolved: dict[str, str] = {}

    def walk(node: Any, raw: Any, path: tuple) -> Any:
        if isinstance(raw, dict):
            return {k: walk(node, v, (*path, k)) for k, v in raw.items()}
        if isinstance(raw, list):
            return [walk(node, v, (*path, i)) for i, v in enumerate(raw)]
        if not (isinstance(raw, str) and "${" in raw):
            return raw
        container: Any = conf
        for seg in path[:-1]:
            container = container[seg]
        try:
            value = container[path[-1]]
        except OmegaConfBaseException as exc:
            cause = exc.__cause__ or exc.__context__
            while cause is not None and not isinstance(cause, (Unresolved, ConfigError)):
                cause = cause.__cause__ or cause.__context__
            if isinstance(cause, Unresolved):
                unresolved[dotted(path)] = str(cause)
                return raw
            if isinstance(cause, ConfigError):
                raise ConfigError(f"'{dotted(path)}' ({prov.get(dotted(path), '?')}): {cause.message}", cause.hint) from None
            msg = str(exc).splitlines()[0]
            nulls = [ref for ref in dict.fromkeys(re.findall(r"\$\{([A-Za-z_][\w.]*)\}", raw))
                     if _lookup(tree, ref) is None]
            if nulls:  # a key this interpolation reads is null (KEY=null): name it, not the arithmetic's TypeError
                listed = ", ".join(nulls)
                raise ConfigError(f"{listed}=null: '{dotted(path)}' = {raw!r} ({prov.get(dotted(path), '?')}) computes "
                                  f"from it and cannot use null ({msg})",
                                  f"set {nulls[0]}=VALUE (a number), or drop the override to use the config's value") from None
            raise ConfigError(f"'{dotted(path)}' = {raw!r} ({prov.get(dotted(path), '?')}): cannot resolve: {msg}",
                              _INTERPOLATION_HINT) from None
        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
        return value

    return walk(conf, tree, ()), unresolved


def _lookup(tree: Any, dotted_key: str) -> Any:
    """The value at ``dotted_key`` in ``tree``; ``_MISSING`` where a part is absent (``None`` is a null value)."""
    cur = tree
    for part in dotted_key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


# --------------------------------------------------------------------------------------------- #
# compile
# --------------------------------------------------------------------------------------------- #
@dataclass
class Compiled:
    """A stage's compiled config.

    Attributes:
        stage: the registry record.
        config: the resolved config (plain dicts, lists and scalars); unresolved values keep their
            ``${...}`` text.
        provenance: dotted leaf key → layer label (``schema``, ``default.yaml``, ``tiny.yaml``,
            a file path, ``override``, or a note from validation's preparation step).
        layers: labels of the layers applied, lowest first.
        config_name: the ``-c`` argument (``default`` when none).
        unresolved: dotted key → why it is not resolved yet.
        user_keys: keys set by the ``-c`` config chain or by overrides (not by default.yaml).
        profile_overrides: ``profile.KEY=VALUE`` overrides, KEY → value.
        overrides: the override arguments as typed.
        launch_args: the command's ``--run``/``--batch`` and ``--env-file`` options, for hints that name a command.
        pipe_args: ``launch_args`` for a ``pipe`` in a hint (empty where ``pipe`` takes no such profile).
    """

    stage: Stage
    config: dict[str, Any]
    provenance: dict[str, str]
    layers: list[str]
    config_name: str
    unresolved: dict[str, str] = field(default_factory=dict)
    user_keys: set[str] = field(default_factory=set)
    profile_overrides: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    planned_keys: set[str] = field(default_factory=set)
    artifact_keys: dict[str, str] = field(default_factory=dict)
    #: the artifacts the config took, in key order: ``(record, [keys set from it])`` (a planned artifact of a
    #: ``pipe`` has no ``version``); printed first by every run and dry run (:func:`input_lines`)
    inputs: list[tuple[dict[str, Any], list[str]]] = field(default_factory=list)
    #: where the command sends the job, as options to repeat in a hint (`` --run P --env-file F``; empty: here)
    launch_args: str = ""
    #: the same for a ``pipe`` in a hint: ``launch_args`` where the profile queues dependent jobs (Slurm), else empty
    #: (``pipe`` refuses ``--run``/``--batch`` on a local profile: the chain runs here, without one)
    pipe_args: str = ""
    #: the artifact scope and storage environment the config was compiled in (``prepare_stage``: the profile's),
    #: so that a hint compiles the runs that would make a missing input in the same place (None: this machine's)
    artifact_scope: Any = None
    compile_env: dict[str, str] | None = None

    def warnings(self) -> list[Problem]:
        """One warning per unresolved value."""
        return [Problem(key=k, value=_resolve_path(self.config, _split_key(k)), message=f"unresolved: {why}",
                        rule="unresolved", severity="warning") for k, why in sorted(self.unresolved.items())]

    def config_hash(self) -> str:
        """SHA-256 (first 16 hex digits) of the resolved config, key order independent."""
        blob = json.dumps(self.config, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def get(self, key: str, default: Any = None) -> Any:
        """The resolved value at dotted ``key`` (``a.b[0]``), or ``default``."""
        node = _resolve_path(self.config, _split_key(key))
        return default if node is None else node


def profile_overrides(overrides: list[str]) -> dict[str, Any]:
    """The ``profile.KEY=VALUE`` overrides among the command-line overrides, KEY → value.

    Raises:
        UsageError: a malformed override.
    """
    out: dict[str, Any] = {}
    for ov in (parse_override(o) for o in overrides):
        if ov.path[0] == "profile":
            if ov.op != "set" or len(ov.path) < 2 or any(isinstance(p, int) for p in ov.path):
                raise UsageError(f"override {ov.text!r}: profile keys are set as profile.KEY=VALUE",
                                 "profile.KEY=null unsets one for this command" if ov.op != "set" else None)
            value = ov.value
            if value is not None and not isinstance(value, str):
                # the profile's schema types its values, not YAML: account=007 stays "007", time=30 is minutes;
                # Profile.with_overrides parses the text of its non-string keys (gpus_per_node=4 -> 4)
                value = ov.text.partition("=")[2]
            out[".".join(str(p) for p in ov.path[1:])] = value
    return out


def compile_config(stage: Stage, config: str | None, overrides: list[str], *, check_paths: bool = True,
                   env: dict[str, str] | None = None) -> Compiled:
    """Compile a stage's config from its layers and the command-line overrides.

    Args:
        stage: the stage.
        config: ``-c`` value (a config name of the stage or a path to a YAML file); None = ``default``.
        overrides: command-line override arguments (see :func:`parse_override`).
        check_paths: check that explicit ``*_path`` inputs exist.

    Raises:
        UsageError: a malformed override.
        ConfigError: all unknown keys and type mismatches of the config files at once; an unknown
            override key (with a did-you-mean); an inheritance cycle; a missing input path; an
            interpolation that cannot resolve.
    """
    prov: dict[str, str] = {}
    tree: dict[str, Any] = {}
    errors: list[str] = []
    _merge(tree, SCHEMA_DEFAULTS, SCHEMA, prov, errors, strict=False, where=SCHEMA, root=tree)
    layers = [SCHEMA]

    default_path = stages_dir() / stage.config_dir / "default.yaml"
    default_data = _read_config(default_path)
    default_data.pop("defaults", None)
    # the sections ``~key`` may not delete: the schema's and default.yaml's (not a base recipe's)
    sections = _sections(SCHEMA_DEFAULTS) | _sections(default_data)
    base = _base_layer(stage, config, overrides)
    base_open: frozenset = frozenset()
    if base is not None:  # a framework's own recipe, below default.yaml (NeMo RL stages: nemo_rl.base)
        base_label, base_data = base
        _merge(tree, base_data, base_label, prov, errors, strict=False, where=base_label, root=tree)
        layers.append(base_label)
        base_open = _open_mappings(base_data)
    run_section = default_data.pop("run", None)
    _merge(tree, default_data, "default.yaml", prov, errors, strict=False, where=str(default_path), root=tree)
    if run_section is not None:
        # run.env is the schema's (strict: a misspelt resource key is an error); a stage may add its own
        # run keys beside it (the training stages' run.requeue, run.signal_before_s, run.chain)
        if isinstance(run_section, dict):
            own = {k: v for k, v in run_section.items() if k != "env"}
            _merge(tree, {"run": own}, "default.yaml", prov, errors, strict=False, where=str(default_path), root=tree)
            run_section = {k: v for k, v in run_section.items() if k == "env"}
        _merge(tree, {"run": run_section}, "default.yaml", prov, errors, strict=True, where=str(default_path), root=tree)
    layers.append("default.yaml")
    open_paths = _open_mappings(default_data) | base_open

    if config is not None and not config.strip():  # `-c ""` (an unset shell variable): never silently `default`
        raise ConfigError(f"-c {config!r}: an empty config name",
                          f"give one of {', '.join(config_names(stage))} (nemotron {stage.recipe} list) or a YAML file's path")
    name = config or "default"
    for f in _chain(stage, name):
        _merge(tree, f.data, f.label, prov, errors, strict=True, where=str(f.path), root=tree, open_paths=open_paths,
               lines=_refuse_duplicate_keys(f.path))
        layers.append(f.label)
    if errors:
        raise ConfigError(
            "; ".join(errors) if len(errors) <= 3 else f"{len(errors)} problems: " + "; ".join(errors),
            "a config may only set keys its stage defines in default.yaml; use +key=value on the command line to add one",
        )

    parsed = [parse_override(o) for o in overrides]
    for ov in parsed:
        if ov.path[0] != "profile":
            _apply_override(tree, ov, prov, open_paths, sections)
    if parsed:
        layers.append(OVERRIDE)

    known = name in config_names(stage) or (name == "local" and stage.family.prepares_data)
    resolution = _Resolution(env=dict(env or {}), config=name if known else None, pins=_pins(tree))
    token = _RESOLUTION.set(resolution)
    try:
        resolved, unresolved = _resolve(tree, prov)
    finally:
        _RESOLUTION.reset(token)
    used = resolution.used
    artifact_keys = {k: used[ref] for k, v in leaves(tree) if isinstance(v, str)
                     for ref in used if f"${{art:{ref}," in v or f"${{art:{ref}}}" in v}
    inputs: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for k, v in leaves(tree):
        for ref, rec in resolution.records.items():
            if isinstance(v, str) and (f"${{art:{ref}," in v or f"${{art:{ref}}}" in v):
                inputs.setdefault(ref, (rec, []))[1].append(k)
    default_labels = {SCHEMA, "default.yaml"} | ({base[0]} if base is not None else set())
    user_keys = {k for k, label in prov.items() if label not in default_labels}
    compiled = Compiled(stage=stage, config=resolved, provenance=prov, layers=layers, config_name=name,
                        unresolved=unresolved, user_keys=user_keys, profile_overrides=profile_overrides(overrides),
                        artifact_keys=artifact_keys, inputs=list(inputs.values()),
                        overrides=list(overrides))
    compiled.config = _absolute_paths(compiled.config)
    compiled.planned_keys = {k for k, v in leaves(tree) if isinstance(v, str)
                             and any(f"${{art:{n}," in v or f"${{art:{n}}}" in v for n in artifacts.planned())}
    if check_paths:
        _check_input_paths(compiled)
    return compiled


def input_lines(compiled: Compiled) -> list[str]:
    """One line per artifact ``compiled`` takes (:func:`nemotron.config.artifacts.input_line`: artifact, version,
    path, where and when made, the keys set from it); what every run and dry run prints first. A key that a ``-c``
    file wires to another artifact than ``default.yaml`` does (:func:`rewired`) gets a note saying so and where the
    reason is (``keys`` shows that file's comment)."""
    notes = rewired(compiled)
    out = []
    for rec, keys in compiled.inputs:
        line = artifacts.input_line(rec, keys)
        said = [notes[k] for k in keys if k in notes]
        out.append(line + (f" ({'; '.join(said)})" if said else ""))
    return out


def rewired(compiled: Compiled) -> dict[str, str]:
    """``{key: note}`` for each key whose artifact comes from a ``-c`` file and differs from the one
    ``default.yaml`` (the cluster route) takes there: ``"local.yaml takes pretrain-checkpoint for policy.model_name,
    not default.yaml's rl-checkpoint; why: nemotron ultra3 keys mopd-warmup policy.model_name -c local"``. A config
    chain that cannot be read again gives none (the compile before reported it)."""
    try:
        default = _read_config(stages_dir() / compiled.stage.config_dir / "default.yaml")
        chained = _raw_tree(compiled.stage, compiled.config_name)
    except (ConfigError, OSError):
        return {}

    def names(tree: Any, key: str) -> set[str]:
        for part in key.split("."):
            tree = tree.get(part) if isinstance(tree, dict) else None
        refs = re.findall(r"\$\{art:([^,}:]+)", tree) if isinstance(tree, str) else []
        return {n for ref in refs for n in ref.split("|")}

    notes = {}
    for _, keys in compiled.inputs:
        for key in keys:
            label = compiled.provenance.get(key)
            if label in (None, SCHEMA, OVERRIDE, "default.yaml") or not label.endswith(".yaml"):
                continue
            was, now = names(default, key), names(chained, key)
            if was and now and was != now:
                notes[key] = (f"{label} takes {' or '.join(sorted(now))} for {key}, not default.yaml's "
                              f"{' or '.join(sorted(was))}; why: nemotron {compiled.stage.recipe} keys "
                              f"{compiled.stage.name} {key} -c {compiled.config_name}")
    return notes


def _absolute_paths(tree: Any) -> Any:
    """Values starting with ``./`` or ``../`` are paths relative to where the command runs; make them
    absolute so that a job started elsewhere (a Slurm node, another working directory) finds them."""
    if isinstance(tree, dict):
        return {k: _absolute_paths(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_absolute_paths(v) for v in tree]
    if isinstance(tree, str) and (tree.startswith(("./", "../")) or tree in (".", "..")):
        return os.path.normpath(os.path.join(os.getcwd(), tree))
    return tree


def missing_input_paths(compiled: Compiled) -> list[tuple[str, str, str]]:
    """``(key, value, the layer that set it)`` of each ``*_path`` input of ``compiled`` whose path does not exist
    on this machine: not an output folder (:data:`OUTPUT_FOLDER_KEYS`), not unresolved, not one an earlier stage of
    a ``pipe`` writes. The dry run and the run list them as problems of rule ``input-exists``
    (:func:`nemotron.cli.pipeline.prepare_stage`); ``compile_config(check_paths=True)`` raises them."""
    missing = []
    for path, value in _leaves(compiled.config):
        if not path or not isinstance(path[-1], str) or not path[-1].endswith("_path"):
            continue
        if dotted(path) in OUTPUT_FOLDER_KEYS:  # a folder the run writes (NeMo RL's eval.save_path), not an input
            continue
        key = dotted(path)
        if key in compiled.unresolved or key in compiled.planned_keys or not isinstance(value, str) or not value:
            continue
        if not Path(value).expanduser().exists():
            missing.append((key, value, compiled.provenance.get(key, "?")))
    return missing


def _check_input_paths(compiled: Compiled) -> None:
    missing = [f"{key}={value} (set by {layer})" for key, value, layer in missing_input_paths(compiled)]
    if missing:
        raise ConfigError(f"input path does not exist: {'; '.join(missing)}",
                          "point the key at an existing file or folder, or use ${art:NAME,FIELD} for an upstream stage's output")


def write_yaml(compiled: Compiled, path: Path) -> Path:
    """Write the resolved config (``train.yaml``) atomically; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yamlio.dumps(compiled.config), encoding="utf-8")
    os.replace(tmp, path)
    return path


def annotated_yaml(compiled: Compiled) -> str:
    """The resolved config as YAML, each leaf followed by ``# <layer>`` (and ``# unresolved``)."""
    lines: list[str] = []

    def emit(node: Any, path: tuple, indent: int) -> None:
        pad = "  " * indent
        for k, v in node.items():
            p = (*path, k)
            key = dotted(p)
            if isinstance(v, dict) and v:
                lines.append(f"{pad}{k}:")
                emit(v, p, indent + 1)
                continue
            note = compiled.provenance.get(key)
            if note is None and isinstance(v, list):
                notes = {compiled.provenance.get(dotted(lp)) for lp, _ in _leaves(v, p)} - {None}
                note = ", ".join(sorted(notes)) if notes else None
            tag = f"  # {note}" if note else ""
            if key in compiled.unresolved:
                tag += "  (unresolved)"
            elif key in compiled.planned_keys:
                tag += "  (planned: an earlier stage of the pipe writes it)"
            elif key in compiled.artifact_keys:
                tag += f"  (from artifact {compiled.artifact_keys[key]})"
            lines.append(f"{pad}{k}: {yamlio.flow(v)}{tag}")

    emit(compiled.config, (), 0)
    return "\n".join(lines)
