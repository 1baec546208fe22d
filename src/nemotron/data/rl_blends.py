"""A released RL blend repository → one NeMo Gym train/validation JSONL pair and one artifact per stage file.

``nemotron ultra3 data prep rl -c ultra-blends`` (``backend: blends``) reads NVIDIA's released Ultra RL data,
``nvidia/Nemotron-RL-Ultra-Training-Blends``: one JSONL file per RL stage at the top of the repository
(``rlvr1.jsonl``, ``rlvr2.jsonl``, ``ifbench.jsonl``, ``rlhf.jsonl``, ``reasoning.jsonl``, ``swe.jsonl``,
``mopd.jsonl``), each line a NeMo Gym row (``responses_create_params`` with its ``input`` messages, ``agent_ref``
naming the Gym agent that scores it, plus task fields). ``blends.source`` is that repository as
``hf://nvidia/Nemotron-RL-Ultra-Training-Blends`` or a local folder in the same layout (a download of it).

**Placeholder rows.** Rows whose prompt comes from a third-party dataset that NVIDIA may not redistribute are
released masked: they carry ``_hf_placeholder`` = ``{"row": <0-based row of the source dataset>,
"question_template": ...}`` and name the source in their ``dataset`` field (for example a name ending in
``dapo17k`` for ``BytedTsinghua-SIA/DAPO-Math-17k``, ``skywork`` for ``Skywork/Skywork-OR1-RL-Data``). As the
blends' ``fill_placeholders.py`` that NeMo RL's guides run, restoration takes the source row's question
(``question_field``, DAPO/Skywork: ``prompt.0.content``) and answer (``answer_field``:
``reward_model.ground_truth``), applies the template — a mapping ``{"prefix", "suffix"}`` wraps the question
(DAPO), a string has ``{question}`` replaced (Skywork), none keeps it as is — and writes ``question``,
``expected_answer`` and ``responses_create_params.input[0].content``; ``_hf_placeholder`` is dropped.
``blends.placeholders`` maps each source (``match``: a case-insensitive part of the row's ``dataset``) to its
``path``: an ``hf://org/name`` id (with ``split``) or a local file, folder or glob. A row that cannot be restored
(no source matches its ``dataset``, a row number past the source's end, no question there) is never written
silently wrong or dropped unnoticed: with ``policies.unrestored: fail`` (default) the run stops with
``<file>:<line>`` and the source; with ``skip`` it is left out, counted and named in the manifest and summary.

**Control-token text**: ``policies.control_token_text`` (``skip`` | ``keep`` | ``fail``) is applied to every
written row, restored placeholders included, by the default backend's function
(:func:`nemotron.data.rl.control_token_policy`) over :func:`row_texts`; a stage's manifest counts ``skipped``
(``control_token_text``) and kept ``control_token_text`` as the default backend's datasets do.

**Held-out rows**: the last ``split.validation_rows`` (100, as NVIDIA's guide) rows of each restored stage file
go to its ``validation.jsonl``, the rest to ``train.jsonl`` (never more than half of a file's rows).

**Output** (a version folder as the other data stages, :func:`nemotron.data.outputs.select_version`)::

    <version>/data/<stage>/train.jsonl, validation.jsonl   NeMo Gym rows, written atomically
    <version>/data/<stage>/manifest.json                    that stage's rows, sources, SHA-256s
    <version>/manifest.json                                 written last

and one artifact per stage, ``rl-blend-<stage>`` (:func:`artifact_names`; planned by
:func:`nemotron.data.outputs.rl_blend_files`), fields ``path`` (the stage folder),
``train_path``, ``validation_path``, ``data_version``; NeMo RL reads the files with
``dataset_name: NemoGymDataset`` and ``processor: nemo_gym_data_processor`` (the Ultra teacher configs take
``${art:rl-blend-rlhf,train_path}`` and so on). NeMo RL names the task ``<stage>-train`` from the path.

The dry-run and the run share :func:`problems`: the repository's stage files present (a local folder) and every
row's schema (JSON object, ``responses_create_params.input`` messages, ``agent_ref.name``; a placeholder's
``row`` and a configured source for its ``dataset``), and each local placeholder source present.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.data import outputs, rl
from nemotron.data.prep import Problems
from nemotron.errors import ConfigError, RuntimeFailure

STAGE = "data-prep-rl"
ULTRA_STAGES = outputs.RL_BLEND_STAGES
PLACEHOLDER = "_hf_placeholder"
ARTIFACT_PREFIX = outputs.RL_BLEND_ARTIFACT
TRAIN, VALID = outputs.RL_TRAIN, outputs.RL_VALID
#: ``control_token_text`` is the default backend's policy, applied by the same function
#: (:func:`nemotron.data.rl.control_token_policy`) with the same choices and default (``skip``).
_POLICIES = {"unrestored": ("fail", "skip"), "bad_record": ("fail", "skip"),
             "control_token_text": rl.POLICIES["control_token_text"]}


def artifact_names(stages: tuple[str, ...] | list[str]) -> list[str]:
    """``["rl-blend-rlvr1", ...]``: the artifact each stage file becomes."""
    return [ARTIFACT_PREFIX + s for s in stages]


@dataclass(frozen=True)
class Source:
    """One placeholder source (``blends.placeholders.<name>``)."""

    name: str
    match: str
    path: str
    split: str | None = None
    subset: str | None = None
    question_field: str = "prompt.0.content"
    answer_field: str = "reward_model.ground_truth"


@dataclass
class Settings:
    """The ``backend: blends`` config, checked (:func:`settings`)."""

    output_dir: str
    force: bool
    source: str
    stages: tuple[str, ...]
    validation_rows: int
    sources: tuple[Source, ...]
    cache_dir: str
    sample: int | None = None
    policies: dict[str, str] = field(default_factory=lambda: {k: v[0] for k, v in _POLICIES.items()})


def _get(cfg: dict[str, Any], dotted: str, default: Any = None) -> Any:
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


def settings(cfg: dict[str, Any]) -> Settings:
    """The checked settings of a ``backend: blends`` config.

    Raises:
        ConfigError: naming the key and the valid values (``blends.source`` unset, an unknown stage name, a
            placeholder source without ``path``/``match``, a bad policy).
    """
    source = _get(cfg, "blends.source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"blends.source={source!r}: backend blends needs the RL blend repository",
                          "hf://nvidia/Nemotron-RL-Ultra-Training-Blends, or a local folder holding its <stage>.jsonl files")
    stages = _get(cfg, "blends.stages") or list(ULTRA_STAGES)
    if not isinstance(stages, (list, tuple)) or not all(isinstance(x, str) and x for x in stages):
        raise ConfigError(f"blends.stages={stages!r} must be a list of stage file names",
                          f"a subset of {', '.join(ULTRA_STAGES)}")
    if len(set(stages)) != len(stages):
        raise ConfigError(f"blends.stages={list(stages)!r} names a stage twice", "name each stage file once")
    rows = _get(cfg, "split.validation_rows", 100)
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ConfigError(f"split.validation_rows={rows!r} must be a whole number >= 0", "100 (NVIDIA's guide)")
    sources = []
    for name, spec in (_get(cfg, "blends.placeholders") or {}).items():
        key = f"blends.placeholders.{name}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{key} must be a mapping (match, path, split, question_field, answer_field)")
        unknown = sorted(set(spec) - {"match", "path", "split", "subset", "question_field", "answer_field"})
        if unknown:
            raise ConfigError(f"{key}: unknown key(s) {', '.join(unknown)}",
                              "valid: match, path, split, subset, question_field, answer_field")
        for k in ("match", "path"):
            if not isinstance(spec.get(k), str) or not spec[k].strip():
                raise ConfigError(f"{key}.{k}={spec.get(k)!r} must be a non-empty string",
                                  "match: part of the placeholder rows' `dataset`; path: hf://org/name or a local file/folder")
        sources.append(Source(name, spec["match"].lower(), os.path.expanduser(spec["path"]), spec.get("split"),
                              spec.get("subset"), spec.get("question_field") or "prompt.0.content",
                              spec.get("answer_field") or "reward_model.ground_truth"))
    policies = {}
    for k, valid in _POLICIES.items():
        v = _get(cfg, f"policies.{k}", valid[0])
        if v not in valid:
            raise ConfigError(f"policies.{k}={v!r} is not allowed; valid: {', '.join(valid)}")
        policies[k] = v
    sample = _get(cfg, "sample")
    if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 1):
        raise ConfigError(f"sample={sample!r} must be a whole number >= 1 or null")
    out = _get(cfg, "output_dir")
    if not isinstance(out, str) or not out:
        raise ConfigError(f"output_dir={out!r} must be a non-empty string")
    return Settings(output_dir=os.path.expanduser(out), force=bool(_get(cfg, "force", False)),
                    source=source.strip(), stages=tuple(stages), validation_rows=rows, sources=tuple(sources),
                    cache_dir=os.path.expanduser(str(_get(cfg, "remote.cache_dir") or "~/.cache/nemotron/hf-datasets")),
                    sample=sample, policies=policies)


# --------------------------------------------------------------------------------------------------
# where the stage files are


def _remote_repo(source: str) -> str | None:
    return source[len("hf://"):].strip("/") if source.startswith("hf://") else None


def stage_file(s: Settings, stage: str) -> str:
    """The stage file's location: ``<source>/<stage>.jsonl`` (local), or its ``hf://datasets/...`` URL."""
    repo = _remote_repo(s.source)
    if repo is not None:
        return f"hf://datasets/{repo}/{stage}.jsonl"
    return str(Path(s.source) / f"{stage}.jsonl")


def _local_stage_file(s: Settings, stage: str) -> str:
    """The stage file on this machine (fetched into ``remote.cache_dir`` once for an ``hf://`` source).

    Raises:
        RuntimeFailure: the hub cannot be reached or the download failed.
    """
    where = stage_file(s, stage)
    if not where.startswith("hf://"):
        return where
    from nemotron.data import hub
    from nemotron.data.sources import fetch_remote

    reason = hub.probe()
    if reason is not None:
        raise RuntimeFailure(hub.unreachable(s.source, reason), hub.hint())
    return fetch_remote(where, s.cache_dir)


# --------------------------------------------------------------------------------------------------
# rows


def _dig(obj: Any, dotted: str) -> Any:
    """The value at ``prompt.0.content`` (a number indexes a list), or None."""
    cur = obj
    for part in dotted.split("."):
        if isinstance(cur, list) and part.lstrip("-").isdigit():
            i = int(part)
            cur = cur[i] if -len(cur) <= i < len(cur) else None
        elif isinstance(cur, dict):
            cur = cur.get(part)
        else:
            return None
        if cur is None:
            return None
    return cur


def source_for(row: dict[str, Any], sources: tuple[Source, ...]) -> Source | None:
    """The configured source of a placeholder row: the first whose ``match`` is part of its ``dataset``."""
    name = str(row.get("dataset") or "").lower()
    return next((src for src in sources if src.match in name), None)


def row_problem(row: Any, sources: tuple[Source, ...]) -> str | None:
    """What is wrong with one stage-file row (None: a usable NeMo Gym row or a restorable placeholder).

    A row must be a JSON object with ``agent_ref.name`` (the Gym agent that scores it) and either
    ``responses_create_params.input`` (a non-empty message list or text) or ``_hf_placeholder`` with a whole
    ``row`` >= 0 and a ``dataset`` some ``blends.placeholders`` entry matches.
    """
    if not isinstance(row, dict):
        return f"not a JSON object ({type(row).__name__})"
    agent = row.get("agent_ref")
    if not isinstance(agent, dict) or not isinstance(agent.get("name"), str) or not agent["name"]:
        return "no agent_ref.name (the NeMo Gym agent that scores the row)"
    ph = row.get(PLACEHOLDER)
    if ph is not None:
        r = ph.get("row") if isinstance(ph, dict) else None
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            return f"{PLACEHOLDER}.row={r!r} must be a whole number >= 0 (the source dataset's row)"
        if source_for(row, sources) is None:
            known = ", ".join(f"{x.name} (match {x.match!r})" for x in sources) or "none configured"
            return (f"placeholder row of dataset {row.get('dataset')!r}: no blends.placeholders source matches it "
                    f"(known: {known})")
        return None
    params = row.get("responses_create_params")
    inp = params.get("input") if isinstance(params, dict) else None
    if not ((isinstance(inp, list) and inp) or (isinstance(inp, str) and inp)):
        return "no responses_create_params.input (the prompt messages NeMo Gym sends)"
    return None


def restore(row: dict[str, Any], src: Source, source_row: Any) -> dict[str, Any]:
    """The placeholder ``row`` filled from ``source_row`` (the source dataset's record at ``_hf_placeholder.row``).

    Raises:
        ValueError: the source row has no question (or answer) at the configured field.
    """
    question = _dig(source_row, src.question_field)
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"source row has no question at {src.question_field}")
    answer = _dig(source_row, src.answer_field)
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError(f"source row has no answer at {src.answer_field}")
    template = row[PLACEHOLDER].get("question_template")
    if isinstance(template, dict):
        text = f"{template.get('prefix') or ''}{question}{template.get('suffix') or ''}"
    elif isinstance(template, str) and "{question}" in template:
        text = template.replace("{question}", question)
    else:
        text = question
    out = {k: v for k, v in row.items() if k != PLACEHOLDER}
    out["question"] = text
    out["expected_answer"] = answer
    params = dict(out.get("responses_create_params") or {})
    messages = [dict(m) for m in params.get("input") or [] if isinstance(m, dict)]
    users = [i for i, m in enumerate(messages) if m.get("role", "user") == "user"]
    if users:
        messages[users[0]]["content"] = text
    else:
        messages.insert(0, {"role": "user", "content": text})
    params["input"] = messages
    out["responses_create_params"] = params
    return out


def row_texts(row: dict[str, Any]) -> list[str]:
    """The texts of a (restored) NeMo Gym row that reach the policy's tokenizer or stand for its answer, which
    ``policies.control_token_text`` looks through: every ``responses_create_params.input`` message's content (a
    string, or the ``text`` of each content part), ``responses_create_params.instructions``, ``question`` and
    ``expected_answer``."""
    params = row.get("responses_create_params")
    params = params if isinstance(params, dict) else {}
    inp = params.get("input")
    texts: list[Any] = [inp] if isinstance(inp, str) else []
    for m in inp if isinstance(inp, list) else []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            texts.extend(part.get("text") for part in content if isinstance(part, dict))
        else:
            texts.append(content)
    texts += [params.get("instructions"), row.get("question"), row.get("expected_answer")]
    return [t for t in texts if isinstance(t, str)]


def _iter_rows(path: str):
    """``(line, obj or None, problem)`` of a JSONL file (1-based lines; blank lines skipped)."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                yield lineno, json.loads(raw), None
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                yield lineno, None, f"malformed JSON ({exc.__class__.__name__}: {exc})"


# --------------------------------------------------------------------------------------------------
# the checks the dry-run and the run share


def needed_sources(s: Settings) -> set[str] | None:
    """The names of the ``blends.placeholders`` sources some placeholder row of the stage files needs (the source
    :func:`source_for` picks for it), or ``None`` when that cannot be known before the run: an ``hf://``
    ``blends.source`` (its stage files are fetched by the run) or a stage file missing or unreadable here.

    The run reads a source only for the rows that need it (:class:`_SourceRows` loads on first use), so a source
    outside this set is never fetched nor read. Reads each local stage file once; only the lines that hold
    ``_hf_placeholder`` are parsed. ``sample`` is ignored (a superset of what a sampled run reads).
    """
    if _remote_repo(s.source) is not None:
        return None
    needed: set[str] = set()
    key = PLACEHOLDER.encode()
    for stage in s.stages:
        try:
            with open(stage_file(s, stage), "rb") as fh:
                for raw in fh:
                    if key not in raw:
                        continue
                    try:
                        obj = json.loads(raw)
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        continue
                    if isinstance(obj, dict) and obj.get(PLACEHOLDER) is not None:
                        src = source_for(obj, s.sources)
                        if src is not None:
                            needed.add(src.name)
        except OSError:
            return None
    return needed


def unused_sources(s: Settings) -> list[Source]:
    """The configured placeholder sources that no row of the (local) stage files needs (:func:`needed_sources`),
    in config order; ``[]`` when that cannot be known before the run."""
    needed = needed_sources(s)
    return [] if needed is None else [src for src in s.sources if src.name not in needed]


def problems(s: Settings, unused: list[Source] | None = None) -> list[ConfigError]:
    """Everything the run would refuse before it writes: a missing stage file of a local ``blends.source``, a
    row of a bad schema (``<file>:<line>`` and what is wrong, the first 5 of each file and a count), a local
    placeholder source that matches no file and that some row needs (``unused``: the sources no row needs, as
    :func:`unused_sources` gives them; ``None``: computed here). An ``hf://`` source is read by the run only (the
    dry-run's hub probe, rule ``data-hub``, covers reaching it)."""
    from nemotron.data.sources import expand, is_remote

    out: list[ConfigError] = []
    if _remote_repo(s.source) is None:
        if not Path(s.source).is_dir():
            return [ConfigError(f"blends.source={s.source}: no such folder",
                                "a local copy of the blend repository (its <stage>.jsonl files at the top), or "
                                "hf://nvidia/Nemotron-RL-Ultra-Training-Blends")]
        for stage in s.stages:
            path = stage_file(s, stage)
            if not Path(path).is_file():
                present = sorted(p.stem for p in Path(s.source).glob("*.jsonl"))
                out.append(ConfigError(f"blends.source: stage file {path} is missing (stage {stage!r} of blends.stages)",
                                       f"stage files present: {', '.join(present) or 'none'}; drop the stage from "
                                       "blends.stages or download the repository whole"))
                continue
            out += file_problems(path, s)
    skip = {src.name for src in (unused_sources(s) if unused is None else unused)}
    for src in s.sources:
        if src.name not in skip and not is_remote(src.path) and not expand(src.path):
            out.append(ConfigError(f"blends.placeholders.{src.name}.path={src.path}: matches no file",
                                   "the source dataset as hf://org/name, or a local file, folder or glob of it"))
    return out


def file_problems(path: str, s: Settings, limit: int = 5) -> list[ConfigError]:
    """Schema problems of one stage file (:func:`row_problem`); with ``policies.bad_record: skip`` none (the run
    skips and counts them). The first ``limit`` are named, then how many more."""
    if s.policies["bad_record"] == "skip":
        return []
    bad: list[str] = []
    n = 0
    for lineno, obj, problem in _iter_rows(path):
        problem = problem or row_problem(obj, s.sources)
        if problem is not None:
            n += 1
            if len(bad) < limit:
                bad.append(f"{path}:{lineno}: {problem}")
    if not n:
        return []
    more = f" (and {n - limit} more rows)" if n > limit else ""
    return [ConfigError("; ".join(bad) + more,
                        "fix the rows, add the blends.placeholders source they name, or set policies.bad_record=skip "
                        "to leave them out (counted)")]


# --------------------------------------------------------------------------------------------------
# placeholder sources


class _SourceRows:
    """Rows of the placeholder sources, loaded once each, by row number (Parquet: 0-based rows; JSONL: records in
    file order; files sorted)."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.rows: dict[str, list[Any]] = {}
        self.files: dict[str, list[str]] = {}
        #: per source, the row count after each of its files (to name the file a row came from)
        self.ends: dict[str, list[int]] = {}

    def get(self, src: Source) -> list[Any]:
        if src.name not in self.rows:
            files = self._files(src)
            rows: list[Any] = []
            from nemotron.data.records import iter_objects
            from nemotron.data.sources import Piece, detect_format

            for f in files:
                for _pos, _ordinal, obj, problem, detail in iter_objects(Piece(f, detect_format(f))):
                    rows.append(obj if problem is None else None)
                self.ends.setdefault(src.name, []).append(len(rows))
            self.rows[src.name], self.files[src.name] = rows, files
        return self.rows[src.name]

    def where(self, src: Source, r: int) -> str:
        """Row ``r`` of ``src`` (loaded by :meth:`get`) as ``<file> row <k>``: the file that holds it and its
        0-based row there (the source's rows run through its files in sorted order)."""
        start = 0
        for f, end in zip(self.files.get(src.name, []), self.ends.get(src.name, [])):
            if r < end:
                return f"{f} row {r - start}"
            start = end
        return f"{src.path} row {r}"

    def _files(self, src: Source) -> list[str]:
        from nemotron.data.sources import expand, fetch_remote, is_remote, resolve_remote

        if is_remote(src.path):
            return [fetch_remote(url, self.s.cache_dir) for url, _size in resolve_remote(src.path, src.subset, src.split)]
        found = expand(src.path)
        if not found:
            raise ConfigError(f"blends.placeholders.{src.name}.path={src.path}: matches no file",
                              "the source dataset as hf://org/name, or a local file, folder or glob of it")
        return found


# --------------------------------------------------------------------------------------------------
# the run


def main(cfg: dict[str, Any]) -> int:
    """Entry point of ``run.py`` for ``backend: blends``; returns 0.

    Raises:
        ConfigError: a config or input problem found before any work (exit 2).
        RuntimeFailure: a failure while working, among them an unrestorable placeholder row with
            ``policies.unrestored: fail`` (exit 1).
    """
    s = settings(cfg)
    found = problems(s)
    if found:
        if len(found) == 1:
            raise found[0]
        raise ConfigError(f"{len(found)} problems: " + "; ".join(p.message for p in found), found[0].hint)
    with outputs.writer_lock(s.output_dir):
        manifest = prepare(s)
    from nemotron.config.artifacts import write_outputs

    write_outputs(artifacts_of(manifest))
    return 0


def artifacts_of(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{rl-blend-<stage>: fields}`` of a finished run (what :func:`nemotron.config.artifacts.write_outputs`
    records)."""
    return {ARTIFACT_PREFIX + st["stage"]: {"path": st["path"], "data_version": manifest["version"],
                                            "train_path": st["train_path"], "validation_path": st["validation_path"]}
            for st in manifest["stages"]}


def prepare(s: Settings) -> dict[str, Any]:
    """Restore, split and write every stage file; returns the manifest (written last, ``<version>/manifest.json``).

    Raises:
        RuntimeFailure: an unrestorable row (``policies.unrestored: fail``) or a bad row (``policies.bad_record:
            fail``), naming ``<file>:<line>`` and the source; an unreadable file. Files already written stay.
    """
    from nemotron.data.files import atomic_open, atomic_write_json, sha256_file

    t0 = time.monotonic()
    version, vdir, _why = outputs.select_version(s.output_dir, s.force)
    vdir.mkdir(parents=True, exist_ok=True)
    src_rows = _SourceRows(s)
    stages = []
    for stage in s.stages:
        path = _local_stage_file(s, stage)
        shown = stage_file(s, stage)
        kept: list[str] = []
        counts: Counter[str] = Counter()
        left_out: list[str] = []
        # policies.control_token_text, applied as the default backend does; each skipped row is named in left_out
        control = Problems(s.policies, 1 << 62)
        for lineno, obj, problem in _iter_rows(path):
            if s.sample is not None and counts["rows"] >= s.sample:
                break
            counts["rows"] += 1
            at = f"{shown}:{lineno}"
            problem = problem or row_problem(obj, s.sources)
            if problem is not None:
                if s.policies["bad_record"] == "fail":
                    raise RuntimeFailure(f"{at}: {problem}", "fix the row, or set policies.bad_record=skip")
                counts["bad_record"] += 1
                left_out.append(f"{at}: {problem}")
                continue
            if PLACEHOLDER in obj:
                src = source_for(obj, s.sources)
                table = src_rows.get(src)
                r = obj[PLACEHOLDER]["row"]
                why = None
                if r >= len(table):
                    why = f"row {r} is past the end of {src.path} ({len(table):,} rows)"
                elif table[r] is None:
                    why = f"row {r} of {src.path} is not a readable JSON object"
                else:
                    try:
                        obj = restore(obj, src, table[r])
                    except ValueError as exc:
                        why = f"row {r} of {src.path}: {exc}"
                if why is not None:
                    message = f"{at}: placeholder of dataset {obj.get('dataset')!r} (source {src.name}) not restored: {why}"
                    if s.policies["unrestored"] == "fail":
                        raise RuntimeFailure(message, f"check blends.placeholders.{src.name} (path, split, "
                                             "question_field, answer_field), or set policies.unrestored=skip")
                    counts["unrestored"] += 1
                    left_out.append(message)
                    continue
                counts["restored"] += 1
                # a control token in a restored row comes from the source row: name both
                at = f"{at} (restored from source {src.name}: {src_rows.where(src, r)}, 0-based)"
            verdict = rl.control_token_policy(row_texts(obj), control, at)
            if verdict == "skip":
                left_out.append(control.examples.pop())
                continue
            if verdict == "keep":
                counts["control_text"] += 1
            kept.append(json.dumps(obj, ensure_ascii=False) + "\n")
        n_valid = min(s.validation_rows, len(kept) // 2)
        if not kept:
            raise RuntimeFailure(f"{shown}: no usable row ({counts['rows']:,} read; "
                                 f"{counts['bad_record']:,} bad, {counts['unrestored']:,} not restored, "
                                 f"{control.counts['control_token_text']:,} with control-token text)",
                                 "see the rows named above; drop the stage from blends.stages to go on without it")
        folder = outputs.rl_blend_folder(vdir, stage)
        folder.mkdir(parents=True, exist_ok=True)
        split_at = len(kept) - n_valid
        for name, lines in ((TRAIN, kept[:split_at]), (VALID, kept[split_at:])):
            with atomic_open(folder / name, "w") as fh:
                fh.writelines(lines)
        entry = {"stage": stage, "source": shown, "path": str(folder), "train_path": str(folder / TRAIN),
                 "validation_path": str(folder / VALID), "rows": counts["rows"], "train_rows": split_at,
                 "validation_rows": n_valid, "restored": counts["restored"], "unrestored": counts["unrestored"],
                 "bad_records": counts["bad_record"], "skipped": dict(sorted(control.counts.items())),
                 "control_token_text": counts["control_text"], "left_out": left_out,
                 "sha256": {TRAIN: sha256_file(folder / TRAIN), VALID: sha256_file(folder / VALID)}}
        atomic_write_json(folder / outputs.MANIFEST, {"complete": True, "kind": "rl-blend", **entry})
        stages.append(entry)
    manifest = {"complete": True, "stage": STAGE, "kind": "rl-blends", "format": "nemo-gym-jsonl", "version": version,
                "path": str(vdir), "source": s.source,
                "nemo_rl": {"dataset_name": "NemoGymDataset", "processor": "nemo_gym_data_processor",
                            "env_name": "nemo_gym"},
                "placeholders": {src.name: {"match": src.match, "path": src.path, "split": src.split,
                                            "rows": len(src_rows.rows.get(src.name, [])),
                                            "files": src_rows.files.get(src.name, [])} for src in s.sources},
                "settings": {"validation_rows": s.validation_rows, "sample": s.sample, "policies": s.policies},
                "stages": stages, "run": {"seconds": round(time.monotonic() - t0, 3)}}
    atomic_write_json(vdir / outputs.MANIFEST, manifest)
    _print_summary(manifest)
    return manifest


def _print_summary(m: dict[str, Any]) -> None:
    from nemotron.data.progress import fmt_counts, print_table

    rows = [[st["stage"], f"{st['rows']:,}", f"{st['restored']:,}", f"{st['unrestored']:,}", f"{st['bad_records']:,}",
             fmt_counts(st.get("skipped", {})) or "-", f"{st['train_rows']:,}", f"{st['validation_rows']:,}"]
            for st in m["stages"]]
    print_table(f"rl blends: {m['path']} (from {m['source']})",
                ["stage", "rows", "restored", "not restored", "bad", "skipped (reason)", "train", "validation"], rows)
    for st in m["stages"]:
        note = rl.control_token_note(f"stage file {st['stage']}", st.get("control_token_text", 0))
        if note:
            print(note)
        for line in st["left_out"][:5]:
            print(f"  left out: {line}")
        if len(st["left_out"]) > 5:
            print(f"  ... and {len(st['left_out']) - 5} more left out of {st['stage']} (see {st['path']}/manifest.json)")
