"""Blends: the input list of datasets with weights, and the Megatron ``blend.json`` we write.

Input blend (JSON; the file ``blend_path`` names)::

    {
      "name": "ultra3-phase1",                    # optional
      "description": "...", "source": "...",      # optional, free text
      "datasets": [
        {"name": "wikitext",                       # unique; [A-Za-z0-9._-]
         "path": "data/*.jsonl",                  # file, folder, glob, or hf://org/name
         "weight": 1.0,                            # > 0; relative (Megatron normalises)
         "category": "wiki",                       # optional, default = name
         "text_field": "text",                     # pretrain only: default "text" (dotted path allowed)
         "fields": {"text": "chosen"},             # sft only: record form's field -> the record's field
         "sample_by": "document",                  # pretrain only, plain text: document | line | paragraph
         "format": null,                           # optional: jsonl, jsonl.gz, json, parquet, text
         "subset": null, "split": "train",         # optional, for hf:// datasets
         "exclude": ["tests/*"],                   # optional glob patterns
         "optional": false,                        # optional: a path that matches nothing is skipped
         "note": "..."}                            # optional, free text
      ],
      "missing": [{"category": "code", "weight": 14.0, "reason": "..."}]   # optional
    }

Each stage reads its own set of dataset keys (:data:`STAGE_DATASET_KEYS`); a key another stage reads is refused
by name, with the stage's list, at ``--dry-run`` and by the run alike (never silently ignored).

``{name}`` placeholders in ``path`` are replaced from the stage config's ``path_vars``. Relative
paths are taken from the directory the stage runs in, like command-line paths.

The output ``blend.json`` is the Megatron-Bridge ``per_split_data_args_path`` file:
``{"train": [w1, "prefix1", ...], "valid": [...], "test": [...]}`` — weights, then path prefixes
without suffix. Weights live only there: Megatron normalises them and samples by them, so data prep
writes every document once and never down-samples by weight.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.data.files import LineDict, atomic_write_json, load_json_lines_known
from nemotron.errors import ConfigError, RuntimeFailure

#: Dataset keys every data stage reads (``note`` is free text).
_COMMON_KEYS = ("name", "path", "weight", "format", "subset", "split", "exclude", "optional", "note")
#: The dataset keys each data stage reads: pretraining reads one text field per record (``text_field``) and names
#: categories in its summary; SFT reads whole chat records (``fields`` maps a form's field to the record's);
#: RL reads prompt records whole.
STAGE_DATASET_KEYS: dict[str, tuple[str, ...]] = {
    "data-prep-pretrain": (*_COMMON_KEYS, "category", "text_field", "sample_by"),
    "data-prep-sft": (*_COMMON_KEYS, "fields"),
    "data-prep-rl": _COMMON_KEYS,
}
_DATASET_KEYS = tuple(dict.fromkeys(k for keys in STAGE_DATASET_KEYS.values() for k in keys))
#: What to write instead of a key the stage does not read.
_KEY_TIPS = {
    ("data-prep-sft", "text_field"): "chat records are read whole; a transcript or chat list kept in another field "
                                     "is read with \"fields\": {\"text\": \"FIELD\"} (or {\"messages\": \"FIELD\"})",
}
_TOP_KEYS = ("name", "description", "source", "datasets", "missing")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VAR_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of a blend (see the module docstring for the fields)."""

    name: str
    path: str
    weight: float
    category: str
    text_field: str = "text"
    format: str | None = None
    subset: str | None = None
    split: str | None = None
    exclude: tuple[str, ...] = ()
    optional: bool = False
    line: int = 0
    fields: tuple[tuple[str, str], ...] = ()
    sample_by: str = "document"


@dataclass
class Blend:
    """A parsed input blend. ``dropped`` lists datasets removed by the ``bad_weight: skip`` policy
    as ``(name, message)``; ``missing`` the categories without open data."""

    path: str
    name: str
    datasets: list[DatasetSpec]
    missing: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    description: str = ""
    #: Warnings about the blend as written (one line each, ``<file>:<line>: ...``): a file listed under two names.
    warnings: list[str] = field(default_factory=list)


class BlendProblems(ConfigError):
    """Every problem of one blend file, found in one pass; ``problems`` holds one message per problem
    (each ``<file>:<line>: datasets[i] (<name>): <problem>``), ``message`` all of them."""

    def __init__(self, problems: list[str], hint: str | None = None, hints: list[str] | None = None) -> None:
        self.problems = list(problems)
        #: one hint per problem (the ways out that apply to it); ``hint`` covers them all
        self.hints = list(hints) if hints is not None and len(hints) == len(self.problems) else [hint or ""] * len(self.problems)
        text = problems[0] if len(problems) == 1 else f"{len(problems)} problems: " + "; ".join(problems)
        super().__init__(text, hint)


def _check_keys(obj: dict[str, Any], valid: tuple[str, ...], where: str) -> list[str]:
    """The unknown keys of ``obj`` (outside ``valid``; keys starting with ``_`` are comments and pass), one
    message each: ``<where>: unknown key 'k'; did you mean 'name'?`` (or the valid keys when none is close)."""
    out = []
    for key in obj:
        if key not in valid and not key.startswith("_"):
            close = difflib.get_close_matches(key, valid, n=1)
            out.append(f"{where}: unknown key {key!r}"
                       + (f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(valid)}"))
    return out


def _weight_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"weight={value!r} is not a number"
    if math.isnan(value) or math.isinf(value):
        return f"weight={value!r} is not a finite number"
    if value <= 0:
        return f"weight={value!r} must be greater than 0"
    return None


def load_blend(path: str | os.PathLike[str], *, path_vars: dict[str, Any] | None = None,
               bad_weight: str = "fail", check: Callable[[DatasetSpec], str | None] | None = None,
               stage: str | None = None, policy_section: str = "on_bad") -> Blend:
    """Parse and check an input blend.

    Args:
        path: the blend JSON file.
        path_vars: values for ``{name}`` placeholders in dataset paths.
        bad_weight: ``"fail"`` (raise) or ``"skip"`` (drop the dataset, recorded in ``Blend.dropped``)
            for a weight that is zero, negative or not a number.
        check: a further check of each dataset that passed the others (the stage's: its path matches
            files); returns the problem's message (naming the blend line) or None.
        stage: the data stage reading the blend (a key of :data:`STAGE_DATASET_KEYS`): a dataset key it
            does not read is a problem (``key 'text_field' is not read by data-prep-sft ...``); ``None``
            accepts every stage's keys.
        policy_section: the stage's config section holding its ``empty_glob`` (and, for ``on_bad``, its
            ``bad_weight``) policy, named in the hint: ``on_bad`` (data prep pretrain) or ``policies`` (the
            record stages, which have no ``bad_weight`` key).

    Raises:
        ConfigError: unreadable or invalid JSON, no ``datasets`` list, or no dataset left.
        BlendProblems: every other problem of the file at once (unknown or missing keys, duplicate
            names, unknown placeholders, a bad weight under ``"fail"``, a ``check`` problem), each
            ``<file>:<line>: datasets[i] (<name>): <problem>``; or, alone, weights whose sum is not a finite
            float (each one finite, e.g. two of 1e308). A path named twice is no problem but a line of
            ``Blend.warnings``.
    """
    p = Path(path)
    data = load_json_lines_known(p)
    if not isinstance(data, dict):
        raise ConfigError(f"{p}:1: a blend must be a JSON object with a 'datasets' list")
    problems = _check_keys(data, _TOP_KEYS, f"{p}:{getattr(data, 'line', 1)}")
    items = data.get("datasets")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{p}: 'datasets' must be a non-empty list")
    variables = {k: str(v) for k, v in (path_vars or {}).items() if v is not None}
    out: list[DatasetSpec] = []
    dropped: list[tuple[str, str]] = []
    seen: set[str] = set()
    kind_of: dict[str, str] = {}  # problem message -> what it is about, for its hint: placeholder, weight, match
    for i, d in enumerate(items):
        line = getattr(d, "line", 0)
        where = f"{p}:{line}: datasets[{i}]"
        if not isinstance(d, LineDict):
            problems.append(f"{where}: must be an object")
            continue
        name = d.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            problems += [*_check_keys(d, _DATASET_KEYS, where),
                         f"{where}: name={name!r} must be letters, digits, '.', '_' or '-'"]
            continue
        where = f"{where} ({name})"
        own = STAGE_DATASET_KEYS.get(stage or "", _DATASET_KEYS)
        found = _check_keys({k: v for k, v in d.items() if k not in _DATASET_KEYS or k in own}, own, where)
        for key in d:
            if key in _DATASET_KEYS and key not in own:
                readers = " and ".join(st for st, keys in STAGE_DATASET_KEYS.items() if key in keys)
                tip = _KEY_TIPS.get((stage or "", key))
                found.append(f"{where}: key {key!r} is not read by {stage} (it is a {readers} key); {stage} reads "
                             f"{', '.join(own)}" + (f"; {tip}" if tip else ""))
        if name in seen:
            found.append(f"{where}: duplicate dataset name")
        seen.add(name)
        raw_path = d.get("path")
        resolved = ""
        if not isinstance(raw_path, str) or not raw_path:
            found.append(f"{where}: 'path' is required (file, folder, glob or hf://org/name)")
        else:
            unknown = [v for v in _VAR_RE.findall(raw_path) if v not in variables]
            for v in unknown:
                found.append(f"{where}: path placeholder {{{v}}} is not in path_vars (known: "
                             f"{', '.join(sorted(variables)) or 'none'})")
                kind_of[found[-1]] = "placeholder"
            resolved = _VAR_RE.sub(lambda m: variables.get(m.group(1), m.group(0)), raw_path)
        problem = _weight_problem(d.get("weight"))
        if problem and bad_weight == "skip":
            dropped.append((name, f"{where}: {problem}; dataset skipped (on_bad.bad_weight=skip)"))
        elif problem:
            found.append(f"{where}: {problem}")
            kind_of[found[-1]] = "weight"
        exclude = d.get("exclude") or []
        if not isinstance(exclude, list) or not all(isinstance(x, str) for x in exclude):
            found.append(f"{where}: 'exclude' must be a list of glob patterns")
        text_field = d.get("text_field", "text")
        if not isinstance(text_field, str) or not text_field:
            found.append(f"{where}: text_field={text_field!r} must be a field name")
        fields = d.get("fields") or {}
        if not isinstance(fields, dict) or not all(isinstance(k, str) and k and isinstance(v, str) and v
                                                   for k, v in fields.items()):
            found.append(f"{where}: fields={fields!r} must map a record form's field name to the record's field "
                         "name, e.g. {\"text\": \"chosen\"}")
        sample_by = d.get("sample_by", "document")
        if sample_by not in ("document", "line", "paragraph"):
            found.append(f"{where}: sample_by={sample_by!r} must be document (one file, one document), line or "
                         "paragraph (plain text cut at lines, or at blank lines)")
        if found or problem:
            problems += found
            continue
        spec = DatasetSpec(
            name=name, path=resolved, weight=float(d["weight"]), category=str(d.get("category") or name),
            text_field=text_field, format=d.get("format"), subset=d.get("subset"), split=d.get("split"),
            exclude=tuple(exclude), optional=bool(d.get("optional", False)), line=line,
            fields=tuple(sorted(fields.items())), sample_by=sample_by,
        )
        trouble = check(spec) if check is not None else None
        if trouble:
            problems.append(trouble)
            kind_of[trouble] = "match"
            continue
        out.append(spec)
    if problems:
        raise BlendProblems(problems, _problems_hint({kind_of.get(m, "") for m in problems}, policy_section),
                            [_problems_hint({kind_of.get(m, "")}, policy_section) for m in problems])
    if not out:
        raise ConfigError(f"{p}: no dataset left after dropping those with bad weights")
    total = sum(d.weight for d in out)
    if not math.isfinite(total):  # each weight finite, their sum not: Megatron's normalisation would give NaN
        raise BlendProblems([f"{p}: the weights of datasets {', '.join(d.name for d in out)} sum to {total} (more "
                             f"than the largest float, {_MAX_FLOAT:.4g})"],
                            "weights are relative: scale them all down by the same factor (e.g. 1e308 -> 1)")
    missing = data.get("missing") or []
    if not isinstance(missing, list):
        raise ConfigError(f"{p}: 'missing' must be a list of {{category, weight, reason}}")
    for j, m in enumerate(missing):
        if not isinstance(m, dict) or "category" not in m or _weight_problem(m.get("weight")):
            raise ConfigError(f"{p}:{getattr(m, 'line', 0)}: missing[{j}] needs a category and a weight > 0")
    return Blend(path=str(p), name=str(data.get("name") or p.stem), datasets=out,
                 missing=[dict(m) for m in missing], dropped=dropped, description=str(data.get("description") or ""),
                 warnings=_same_path_warnings(p, items, out))


def _problems_hint(kinds: set[str], policy_section: str) -> str:
    """The hint of a blend's problems: ``fix each line named``, then only the ways out that apply to the kinds of
    problem found (``placeholder``: an unknown ``{name}`` in a path; ``weight``: a bad weight, which
    ``on_bad.bad_weight=skip`` can leave out where the stage has it; ``match``: a path that matches nothing, which
    ``optional: true`` or ``<section>.empty_glob=skip`` leaves out)."""
    parts = ["fix each line named"]
    if "placeholder" in kinds:
        parts.append("give each placeholder named a value (path_vars.NAME=VALUE) or write the path out")
    if "weight" in kinds and policy_section == "on_bad":
        parts.append("on_bad.bad_weight=skip leaves a dataset with a bad weight out")
    if "match" in kinds:
        parts.append(f"optional: true (on the dataset) or {policy_section}.empty_glob=skip leaves a dataset whose "
                     "path matches nothing out")
    return "; ".join(parts)


#: The largest finite float (IEEE 754 double), the bound a blend's summed weights must stay under.
_MAX_FLOAT = 1.7976931348623157e308


def _same_path_warnings(p: Path, items: list[Any], out: list[DatasetSpec]) -> list[str]:
    """One warning for each dataset of ``out`` whose path (``~`` expanded, made absolute; a remote ``scheme://``
    path as written) an earlier dataset already names: its files would be read, and weighted, twice."""
    index = {it.get("name"): k for k, it in enumerate(items) if isinstance(it, dict)}
    first: dict[str, DatasetSpec] = {}
    warnings = []
    for d in out:
        key = d.path if "://" in d.path else os.path.normpath(os.path.abspath(os.path.expanduser(d.path)))
        if key in first:
            o = first[key]
            warnings.append(f"{p}:{d.line}: datasets[{index[d.name]}] ({d.name}): path {d.path!r} is also "
                            f"datasets[{index[o.name]}] ({o.name}); its documents are read twice, under both names "
                            f"(weights {d.weight:g} + {o.weight:g}); list it once with the summed weight, unless "
                            "that is meant")
        else:
            first[key] = d
    return warnings


def prefix_weights(dataset_weight: float, shard_tokens: list[int]) -> list[float]:
    """Per-prefix weights that give a dataset its share: ``weight × tokens_i / Σ tokens``.

    Megatron samples each prefix with probability proportional to its weight, so splitting a
    dataset's weight in proportion to its shards' tokens keeps the dataset's share exactly
    ``weight / Σ weights`` and samples its shards uniformly per token.
    """
    total = sum(shard_tokens)
    # t / total first: a weight near the largest float times a token count would overflow to inf
    return [dataset_weight * (t / total) for t in shard_tokens] if total else [0.0 for _ in shard_tokens]


def write_megatron_blend(path: str | os.PathLike[str], splits: dict[str, list[tuple[float, str]]]) -> dict[str, list[Any]]:
    """Check and write the Megatron ``blend.json``; returns what was written.

    A prefix inside the blend file's folder is written relative to that folder (``data/wiki/train_00000``), so
    that the output folder can be copied or moved (to a cluster's storage) and still names its own shards:
    :func:`read_blend_pairs` resolves it from the file's folder. A prefix elsewhere is written absolute.

    Args:
        splits: ``{"train"|"valid"|"test": [(weight, prefix), ...]}``, prefixes absolute or relative to the working
            directory.

    Raises:
        RuntimeFailure: a split is missing or empty, a weight is not > 0, or a prefix's ``.bin``/``.idx``
            is missing or empty.
    """
    out: dict[str, list[Any]] = {}
    base = Path(path).parent.absolute()
    for split in ("train", "valid", "test"):
        entries = splits.get(split) or []
        if not entries:
            raise RuntimeFailure(f"blend.json: the {split!r} split would be empty (no documents reached it)",
                                 "raise split.valid_docs/test_docs or check the skipped-record counts above")
        flat: list[Any] = []
        for weight, prefix in entries:
            if not (weight > 0) or not math.isfinite(weight):  # never an Infinity (not JSON) in blend.json
                raise RuntimeFailure(f"blend.json: {split} prefix {prefix} has weight {weight}")
            for suffix in (".bin", ".idx"):
                f = Path(prefix + suffix)
                if not f.is_file() or f.stat().st_size == 0:
                    raise RuntimeFailure(f"blend.json: {split} prefix {prefix}: {f.name} is missing or empty")
            flat.extend([weight, relative_prefix(prefix, base)])
        out[split] = flat
    atomic_write_json(path, out)
    return out


def relative_prefix(prefix: str | os.PathLike[str], base: Path) -> str:
    """``prefix`` relative to folder ``base`` (``/`` separated) when it lies inside it, else absolute."""
    full = Path(os.path.abspath(prefix))
    try:
        return full.relative_to(base).as_posix()
    except ValueError:
        return str(full)


def prefixes_outside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> list[Path]:
    """The prefixes of blend file ``path`` (as :func:`read_blend_pairs` resolves them) that lie outside ``folder``:
    shards a copy of a data prep output would read from the original's folder (an output written before blend.json
    held relative prefixes names them absolute).

    Raises:
        BlendFileError: as :func:`read_blend_pairs`.
    """
    root = Path(os.path.realpath(folder))
    out = []
    for pairs in read_blend_pairs(path).values():
        for _w, prefix in pairs:
            full = Path(os.path.realpath(prefix))
            if full != root and root not in full.parents:
                out.append(Path(prefix))
    return out


def parse_mix(mix_with: list[Any] | None, key: str = "data.mix_with") -> tuple[float, list[tuple[float, Path, str]]]:
    """Check ``data.mix_with`` (see :func:`mix_blend_files`) without reading files: ``(share left for the main
    blend, [(share, blend file, key), ...])``.

    Raises:
        ConfigError: a malformed entry, a share outside (0, 1), or shares summing to 1 or more.
    """
    entries = []
    for i, item in enumerate(mix_with or []):
        where = f"{key}[{i}]"
        if not isinstance(item, dict) or set(item) - {"blend", "share"} or "blend" not in item or "share" not in item:
            raise ConfigError(f"{where}={item!r}: expected {{blend: FILE, share: NUMBER}}")
        share = item["share"]
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
            raise ConfigError(f"{where}.share={share!r}: a share of the training tokens, between 0 and 1")
        entries.append((float(share), Path(os.path.expanduser(str(item["blend"]))), f"{where}.blend"))
    rest = 1.0 - sum(s for s, _, _ in entries)
    if entries and rest <= 0:
        raise ConfigError(f"{key}: the shares add up to {1 - rest:g}; they must leave a share for "
                          "data.per_split_data_args_path (sum below 1)")
    return rest, entries


#: The splits of a Megatron-Bridge ``per_split_data_args_path`` file (Megatron-Core ``blend_per_split``:
#: train, valid, test).
BLEND_SPLITS = ("train", "valid", "test")


class BlendFileError(ValueError):
    """A blend.json that cannot be read as ``{"train": [weight, prefix, ...], ...}``; ``str()`` says what is
    wrong, without the file name (the caller adds it, with the config key that named the file)."""


def read_blend_pairs(path: str | os.PathLike[str]) -> dict[str, list[tuple[float, Path]]]:
    """The splits of a Megatron blend.json ``{"train": [w1, "prefix1", ...], "valid": [...], ...}`` as
    ``(weight, prefix)`` pairs, weights as floats. A relative prefix is taken from the file's folder (data prep
    writes its own shards so: :func:`write_megatron_blend`), or from the working directory when ``<prefix>.idx``
    exists only there (a hand-written blend). A null split is left out; an empty one kept
    (empty). Shards are not opened (see :func:`nemotron.runtime.megatron.pretrain_data.read_blend`).

    Raises:
        BlendFileError: unreadable, not JSON, not a mapping, a split not in :data:`BLEND_SPLITS`, a split
            that is not a list of weight, prefix pairs, a weight that is not a number > 0.
    """
    import json

    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BlendFileError(f"cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise BlendFileError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BlendFileError("not a blend.json: expected {\"train\": [weight, prefix, ...], \"valid\": [...], ...}")
    out: dict[str, list[tuple[float, Path]]] = {}
    for split, items in data.items():
        if split not in BLEND_SPLITS:
            raise BlendFileError(f"unknown split {split!r}; valid: {', '.join(BLEND_SPLITS)}")
        if items is None:
            continue
        if not isinstance(items, list) or len(items) % 2:
            raise BlendFileError(f"split {split!r} must list weight, prefix pairs")
        pairs = []
        for w, p in zip(items[0::2], items[1::2], strict=True):
            if not isinstance(w, (int, float)) or isinstance(w, bool) or not w > 0:
                raise BlendFileError(f"split {split!r}: weight {w!r} of {p!r} must be a number > 0")
            prefix = Path(str(p))
            if not prefix.is_absolute():
                beside = path.parent / prefix
                if Path(str(beside) + ".idx").exists() or not Path(str(prefix) + ".idx").exists():
                    prefix = beside
            bad = prefix_problem(prefix)
            if bad:
                raise BlendFileError(f"split {split!r}: {bad}")
            pairs.append((float(w), prefix))
        out[split] = pairs
    return out


def prefix_problem(prefix: Path) -> str | None:
    """Why ``prefix`` is not a Megatron path prefix (the path of ``<prefix>.bin``/``<prefix>.idx`` without the
    suffix, which Megatron-Core appends itself), with the prefix to write instead; ``None`` when it is one (or
    when ``<prefix>.idx`` exists: a prefix may itself end in ``.bin``).

    Refused: a path ending in ``.bin`` or ``.idx`` (Megatron would open ``X.bin.bin``), and a folder (the
    prefixes are the shard files inside it, or a blend.json there lists them)."""
    if Path(str(prefix) + ".idx").exists():
        return None
    if prefix.suffix in (".bin", ".idx"):
        bare = prefix.with_suffix("")
        return (f"{str(prefix)!r} names the {prefix.suffix} file, not a prefix (Megatron appends .bin and .idx "
                f"itself and would open {prefix.name}{'.bin'}); write {str(bare)!r}")
    if prefix.is_dir():
        found = sorted(str(p)[:-4] for p in prefix.rglob("*.idx"))
        hint = ("; the prefixes in it are " + ", ".join(repr(f) for f in found[:3])
                + (f" and {len(found) - 3} more" if len(found) > 3 else "")) if found else "; it holds no .idx file"
        if (prefix / "blend.json").is_file():
            hint += f"; or point the config at {str(prefix / 'blend.json')!r}, which lists them"
        return f"{str(prefix)!r} is a folder, not a prefix (a prefix is a shard's path without .bin/.idx){hint}"
    return None


def mix_blend_files(primary: str | os.PathLike[str], mix_with: list[Any] | None,
                    key: str = "data.mix_with") -> dict[str, list[Any]]:
    """Mix Megatron ``blend.json`` files at fixed shares of the training tokens (``pretrain -c long_context``:
    the user's long-context data 46 %, the phase-2 blend 54 %).

    ``mix_with`` = ``[{"blend": FILE, "share": s}, ...]`` (0 < s, Σ s < 1); ``primary`` gets ``1 - Σ s``.
    Inside each file the weights keep their proportions: each file's weights are divided by their sum and
    multiplied by the file's share, per split, so Megatron (which normalises over the whole list) samples
    each file at its share. A split missing from a file contributes nothing to that split (the others'
    shares are then renormalised by Megatron). Files are read by :func:`read_blend_pairs` (relative
    prefixes from their file's folder). Returns the mixed blend in the same form (absolute prefixes).

    Raises:
        ConfigError: a malformed entry, a share outside (0, 1) or summing to 1 or more, an unreadable or
            malformed file.
    """
    rest, entries = parse_mix(mix_with, key)
    out: dict[str, list[Any]] = {}
    for share, path, where in [(rest, Path(primary), "data.per_split_data_args_path"), *entries]:
        try:
            splits = read_blend_pairs(path)
        except BlendFileError as exc:
            raise ConfigError(f"{where}={path}: {exc}") from None
        for split, pairs in splits.items():
            total = sum(w for w, _ in pairs)
            for w, prefix in pairs:
                out.setdefault(split, []).extend([share * w / total, str(prefix.absolute())])
    return out


def training_blend(cfg: dict[str, Any], out_dir: str | os.PathLike[str]) -> Path | None:
    """The blend.json a pretrain run trains on: ``data.per_split_data_args_path`` itself, or — with
    ``data.mix_with`` — the mix (:func:`mix_blend_files`) written to ``<out_dir>/mixed_blend.json``
    (atomically; the checkpoint folder, so the run's lineage keeps it). None when the key is unset."""
    data = cfg.get("data") or {}
    primary = data.get("per_split_data_args_path")
    if not primary:
        return None
    if not data.get("mix_with"):
        return Path(os.path.expanduser(str(primary)))
    mixed = mix_blend_files(os.path.expanduser(str(primary)), data["mix_with"])
    path = Path(out_dir) / "mixed_blend.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, mixed)
    return path
