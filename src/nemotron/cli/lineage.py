"""``nemotron RECIPE artifacts``: what the artifact store holds, and what each version was made from and used by.

Read-only; everything shown is what the runs recorded, nothing is inferred beyond matching recorded paths and ids:

* the records ``<store>/<kind>/v<N>.json`` (:mod:`nemotron.config.artifacts`): kind, version, path, config, stage,
  job id, experiment id (the run id), when, ``site``;
* the ``consumed_by/<run id>.json`` records of a data version folder (:func:`nemotron.data.outputs.consumers`),
  written by every training run that reads the folder (``{"stage", "run_id", "artifact", "time", "checkpoint"}``):
  a consumer whose ``run_id`` is the experiment id of a record (or whose ``checkpoint`` is its path) made that
  record from this version; one that matches no record is a run that recorded no artifact (it was stopped, failed,
  or is still running) and is listed as a run;
* the ``lineage.json`` a local training run writes into its checkpoint folder (the inputs it started on: blend,
  packed data, pretrained checkpoint, policy, teachers): each absolute path in it that is, or lies inside, another
  record's ``path`` / ``checkpoint_dir`` / ``*_path`` names that record (the deepest such folder; of several
  versions with the same folder, the one recorded last before the consumer) as an input.

A record with neither (a cluster job's checkpoint whose folder is not on this machine, an import) has no recorded
inputs, and the command says so instead of guessing. "Latest" is the version recorded last (``latest_at``, else
``created``), as for ``${art:KIND,FIELD}`` without a version; a version that a run in this working folder would
leave out of its inputs (another machine's, another working folder's or checkout's, a scratch output: the reason
the dry run gives, :meth:`nemotron.config.artifacts.Scope.why_not`) is marked so.

Three forms (``--json``: one document, ``docs/schema/artifacts.schema.json``):

* ``artifacts``: one row per kind and config: the latest version, how many, when and by what it was made, its path;
* ``artifacts KIND [-c CONFIG]``: every version of KIND (those a run with ``-c CONFIG`` takes: its own config's and
  those it accepts, :func:`nemotron.config.artifacts.accepted_configs`): path, whether it exists on this machine,
  what made it, its inputs and its consumers;
* ``artifacts KIND:vN``: that version alone, as above;
* ``artifacts KIND[:vN] --lineage``: the chain upstream of one version (default: the latest), each input and its
  inputs, down to the data.

Errors (exit 2, one line and a hint): a kind no stage makes and no run recorded, a version not recorded, a ``-c``
that names no config, ``--lineage`` without a kind, a record that is not valid JSON.
"""

from __future__ import annotations

import calendar
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron import report
from nemotron.config import artifacts
from nemotron.errors import ConfigError, UsageError

#: The file of a local training run's checkpoint folder naming what it started on
#: (:data:`nemotron.runtime.megatron.lineage.LINEAGE`, written by the local trainers and RL runtimes).
LINEAGE_FILE = "lineage.json"
#: Keys of ``lineage.json`` that are not inputs (versions, ids, the model's name, the record of changes).
_NOT_INPUTS = frozenset({"stage", "model", "experiment_id", "transformers", "torch", "trl", "changes", "time"})


# ------------------------------------------------------------------------------------------------ the store
@dataclass
class Version:
    """One record of the store: ``rec`` is its JSON; ``inputs`` / ``consumers`` are filled by :func:`load`."""

    kind: str
    version: int
    rec: dict[str, Any]
    file: Path
    #: ``(Version, via)``: what it was made from; ``via`` ``consumed_by`` or ``lineage.json``
    inputs: list[tuple[Version, str]] = field(default_factory=list)
    #: ``(Version, via)`` made from it, and ``consumed_by`` records of runs that recorded no artifact
    consumers: list[tuple[Version, str]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.kind} v{self.version}"

    @property
    def config(self) -> str | None:
        c = self.rec.get("config")
        return str(c) if c is not None else None

    @property
    def when(self) -> float:
        """When it was recorded the latest (seconds since the epoch): ``latest_at``, else ``created``."""
        value = self.rec.get("latest_at") or self.rec.get("created") or 0
        return float(value) if isinstance(value, (int, float)) else 0.0

    @property
    def created(self) -> float:
        value = self.rec.get("created") or 0
        return float(value) if isinstance(value, (int, float)) else 0.0

    def folders(self) -> list[str]:
        """The real paths of its folder fields: ``path``, ``checkpoint_dir`` and each ``*_path``."""
        out = []
        for k, v in self.rec.items():
            if (k in ("path", "checkpoint_dir") or k.endswith("_path")) and isinstance(v, str) and v:
                out.append(_real(v))
        return list(dict.fromkeys(out))

    def exists(self) -> bool:
        path = self.rec.get("path")
        return isinstance(path, str) and bool(path) and Path(path).expanduser().exists()


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _read(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file}:{exc.lineno}: artifact record is not valid JSON: {exc.msg}",
                          "move the file away (the record is lost) or restore it from a backup") from None
    except OSError as exc:
        raise ConfigError(f"{file}: artifact record cannot be read: {exc.strerror or exc}",
                          "check the file's permissions") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: artifact record is not a JSON object",
                          "move the file away (the record is lost) or restore it from a backup")
    return data


def _iso(text: Any) -> float | None:
    """``2026-12-06T08:21:29Z`` (a ``consumed_by`` record's time, UTC) in seconds since the epoch, else None."""
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def load() -> dict[str, list[Version]]:
    """Every record of the store (:func:`nemotron.config.artifacts.store`), kind -> versions ascending, with their
    inputs and consumers linked (module docstring).

    Raises:
        ConfigError: a record that is not valid JSON or not an object (names the file).
    """
    root = artifacts.store()
    kinds: dict[str, list[Version]] = {}
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            found = [Version(folder.name, v, _read(folder / f"v{v}.json"), folder / f"v{v}.json")
                     for v in artifacts.versions(folder.name)]
            if found:
                kinds[folder.name] = found
    everything = [v for vs in kinds.values() for v in vs]
    _link_consumers(everything)
    _link_lineage(everything)
    return kinds


def _link(src: Version, dst: Version, via: str) -> None:
    """Record that ``dst`` was made from ``src`` (once per pair; a second source adds to ``via``)."""
    for i, (v, how) in enumerate(dst.inputs):
        if v is src:
            if via not in how.split(", "):
                dst.inputs[i] = (v, f"{how}, {via}")
                src.consumers = [(c, f"{h}, {via}") if c is dst else (c, h) for c, h in src.consumers]
            return
    dst.inputs.append((src, via))
    src.consumers.append((dst, via))


def _at_time(candidates: list[Version], at: float | None) -> Version:
    """Of several versions recorded for one folder, the one that was there at ``at``: the last recorded at or
    before it (a consumed version is never rewritten in place), else the first."""
    ordered = sorted(candidates, key=lambda v: (v.created, v.version))
    if at is not None:
        before = [v for v in ordered if v.created <= at + 1]  # +1: the stamps are whole seconds on one side
        if before:
            return before[-1]
    return ordered[0]


def _link_consumers(everything: list[Version]) -> None:
    """Each data version folder's ``consumed_by`` records: a record made by that run (its experiment id, or its
    path the run's checkpoint), else a run that recorded no artifact."""
    from nemotron.data.outputs import consumers

    by_folder: dict[str, list[Version]] = {}
    for v in everything:
        path = v.rec.get("path")
        if isinstance(path, str) and path:
            by_folder.setdefault(_real(path), []).append(v)
    for folder, versions in by_folder.items():
        if not os.path.isdir(folder):
            continue
        for c in consumers(folder):
            at = _iso(c.get("time"))
            src = _at_time(versions, at)
            run_id, ckpt = c.get("run_id"), c.get("checkpoint")
            made = [v for v in everything if v is not src and run_id and v.rec.get("experiment_id") == run_id]
            if not made and isinstance(ckpt, str) and ckpt:
                # a record without the run's experiment id: the first one of its checkpoint folder recorded after
                # the run started (the record of an earlier run of that folder is not this run's)
                later = sorted((v for v in everything if v is not src and _real(ckpt) in v.folders()
                                and (at is None or v.created >= at - 1)), key=lambda v: (v.created, v.version))
                made = later[:1]
            for dst in made:
                _link(src, dst, "consumed_by")
            if not made:
                src.runs.append(c)


def _lineage_paths(data: Any, key: str = "") -> list[str]:
    """The absolute paths among the values of a ``lineage.json`` (keys of :data:`_NOT_INPUTS` left out)."""
    if isinstance(data, dict):
        return [p for k, v in data.items() if k not in _NOT_INPUTS for p in _lineage_paths(v, k)]
    if isinstance(data, list):
        return [p for v in data for p in _lineage_paths(v, key)]
    return [data] if isinstance(data, str) and data.startswith("/") else []


def _link_lineage(everything: list[Version]) -> None:
    """Each record's ``lineage.json`` (in its ``checkpoint_dir`` or ``path``): its input paths, as records."""
    for dst in everything:
        own = dst.folders()
        for folder in own:
            file = Path(folder) / LINEAGE_FILE
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            for raw in _lineage_paths(data):
                path = _real(raw)
                best: list[Version] = []
                depth = -1
                for v in everything:
                    if v is dst or any(f in own for f in v.folders()):  # itself, or another run of its own folder
                        continue
                    for f in v.folders():
                        if _inside(path, f) and len(f) >= depth:
                            best, depth = ([*best, v] if len(f) == depth else [v]), len(f)
                if best:
                    _link(_at_time(best, dst.created), dst, "lineage.json")
            break


# ------------------------------------------------------------------------------------------------ words
def made_by(v: Version) -> str:
    """``2026-12-06 08:21, pretrain -c local, run ultra3-pretrain-local-...`` (what the record says)."""
    rec = v.rec
    parts = [time.strftime("%Y-%m-%d %H:%M", time.localtime(v.created)) if v.created else "when not recorded"]
    if rec.get("stage"):
        parts.append(f"{rec['stage']}" + (f" -c {rec['config']}" if rec.get("config") else ""))
    job = str(rec.get("job_id") or "")
    if job and job != "local":
        parts.append(f"job {job}")
    if rec.get("experiment_id"):
        parts.append(f"run {rec['experiment_id']}")
    return ", ".join(parts)


def _when_by(v: Version) -> str:
    """``2026-12-06 08:21 pretrain`` (the table's "made" column; the config has its own column)."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(v.created)) if v.created else "?"
    return f"{when} {v.rec.get('stage') or '?'}"


def _run_or_job(v: Version) -> str:
    """The run (experiment) id, and a scheduler's job id when there is one (a run here records job ``local``)."""
    job = str(v.rec.get("job_id") or "")
    run = str(v.rec.get("experiment_id") or "")
    if job and job != "local":
        return f"job {job}" + (f" ({run})" if run else "")
    return run or "-"


def _shown_path(path: Any) -> str:
    """``path`` relative to the working folder when inside it (``./output/...``: what its runs write), else as
    recorded."""
    if not isinstance(path, str) or not path:
        return "-"
    here = os.getcwd()
    real = os.path.abspath(path)
    return "./" + os.path.relpath(real, here) if _inside(real, here) and real != here else path


def left_out(v: Version, scope: artifacts.Scope) -> str | None:
    """Why a run in this working folder would not take ``v`` as its latest input (the dry run's words), or None."""
    return scope.why_not(v.rec)


def no_inputs(v: Version) -> str:
    """What to say of a version with no recorded input."""
    stage = artifacts.producer_stage(v.kind)
    if v.rec.get("stage") == "import":
        return "imported (model/data import): what it was made from is not recorded"
    if stage is not None and stage.family.prepares_data:
        return "made by data prep from its raw sources (no artifact input)"
    if not v.exists():
        return "none recorded here (its folder is not on this machine: no lineage.json to read)"
    return "none recorded (no consumed_by record names its run, no lineage.json in its folder)"


def run_line(c: dict[str, Any]) -> str:
    """A ``consumed_by`` record that no artifact record matches."""
    bits = [f"run {c.get('run_id')}"]
    if c.get("stage"):
        bits.append(str(c["stage"]))
    if c.get("checkpoint"):
        bits.append(f"checkpoint {c['checkpoint']}")
    if c.get("time"):
        bits.append(str(c["time"]))
    return f"{bits[0]} ({', '.join(bits[1:])}; no artifact recorded from it)" if len(bits) > 1 else \
        f"{bits[0]} (no artifact recorded from it)"


# ------------------------------------------------------------------------------------------------ JSON
def version_doc(v: Version, scope: artifacts.Scope, latest: bool) -> dict[str, Any]:
    rec = v.rec
    return {"kind": v.kind, "version": v.version, "config": v.config, "path": rec.get("path"),
            "exists": v.exists(), "latest": latest, "site": rec.get("site"), "stage": rec.get("stage"),
            "job_id": None if rec.get("job_id") is None else str(rec.get("job_id")),
            "run_id": rec.get("experiment_id"), "created": rec.get("created"), "latest_at": rec.get("latest_at"),
            "record": str(v.file), "left_out": left_out(v, scope),
            "inputs": [{"kind": i.kind, "version": i.version, "via": via} for i, via in v.inputs],
            "consumers": [{"kind": c.kind, "version": c.version, "via": via} for c, via in v.consumers],
            "runs": [{"run_id": c.get("run_id"), "stage": c.get("stage"), "checkpoint": c.get("checkpoint"),
                      "time": c.get("time")} for c in v.runs]}


def lineage_doc(v: Version, via: str | None, seen: frozenset[int] = frozenset()) -> dict[str, Any]:
    doc = {"kind": v.kind, "version": v.version, "config": v.config, "path": v.rec.get("path"),
           "exists": v.exists(), "stage": v.rec.get("stage"), "run_id": v.rec.get("experiment_id"),
           "job_id": None if v.rec.get("job_id") is None else str(v.rec.get("job_id")),
           "created": v.rec.get("created"), "via": via, "inputs": []}
    if id(v) in seen:  # a loop in the records (never written so by a run): shown once, not followed
        return doc
    doc["inputs"] = [lineage_doc(i, how, seen | {id(v)}) for i, how in v.inputs]
    return doc


# ------------------------------------------------------------------------------------------------ the command
def _newest(versions: list[Version]) -> Version:
    return max(versions, key=lambda v: (v.when, v.version))


def unrecorded_runs(kind: str, store: dict[str, list[Version]]) -> list[tuple[Version, dict[str, Any]]]:
    """``(data version, consumed_by record)`` of each run of the stage that makes ``kind`` (the registry's producer)
    that read a recorded data version and recorded no artifact (stopped, failed or still running): the checkpoint
    folder a stopped ``pretrain`` left and the data version it trained on."""
    stage = artifacts.producer_stage(kind)
    if stage is None:
        return []
    return [(v, r) for versions in store.values() for v in versions for r in v.runs if r.get("stage") == stage.name]


def _run_doc(run: dict[str, Any], read: Version) -> dict[str, Any]:
    return {"run_id": run.get("run_id"), "stage": run.get("stage"), "checkpoint": run.get("checkpoint"),
            "time": run.get("time"), "read": {"kind": read.kind, "version": read.version}}


def _say_unrecorded(kind: str, pending: list[tuple[Version, dict[str, Any]]]) -> None:
    if not pending:
        return
    report.out(f"runs that made no {kind} record (stopped, failed or still running), and the data each read:",
               plain=True)
    for v, r in pending:
        report.out(f"    run {r.get('run_id')} ({r.get('stage')}, {r.get('time')}): checkpoint folder "
                   f"{r.get('checkpoint') or '?'} trained on {v.key} ({v.rec.get('path')})", plain=True)


def _latest_per_config(versions: list[Version]) -> set[int]:
    """``id()`` of the latest version of each config among ``versions`` (what ``${art:KIND,FIELD}`` of a run with
    that config reads, before its scope)."""
    by_config: dict[str | None, list[Version]] = {}
    for v in versions:
        by_config.setdefault(v.config, []).append(v)
    return {id(_newest(group)) for group in by_config.values()}


def _takes(config: str, v: Version) -> bool:
    """Whether a run with ``-c config`` takes ``v`` (as :func:`nemotron.config.artifacts.lookup` matches)."""
    return (v.rec.get("config") in artifacts.accepted_configs(config) or v.rec.get("config") == v.kind
            or v.kind.startswith(artifacts.ANY_CONSUMER_PREFIXES))


def _check_config(config: str) -> None:
    """Refuse a ``-c`` that no stage ships (nor a cycle of one)."""
    from nemotron.config.paths import config_names
    from nemotron.config.registry import STAGES

    names = sorted({c for s in STAGES for c in config_names(s)} | {"local", "tiny", "default"})
    if config in names or artifacts.cycle_base(config) in names:
        return
    import difflib

    close = difflib.get_close_matches(config, names, n=1)
    raise UsageError(f"-c {config}: no stage has a config of that name",
                     (f"did you mean '{close[0]}'? " if close else "") + f"configs: {', '.join(names)}")


def makers_of_kinds() -> list[str]:
    """The kinds a stage records: the registry's ``produces``, and each config that names its own product
    (``output_artifact: teacher-reasoning`` in ``rlvr/teacher-reasoning.yaml``); sorted."""
    import re

    from nemotron.config.paths import stages_dir
    from nemotron.config.registry import STAGES

    names = {n for s in STAGES for n in s.produces}
    for s in STAGES:
        for file in (stages_dir() / s.config_dir).glob("*.yaml"):
            m = re.search(r"^output_artifact:\s*([A-Za-z0-9_.-]+)", file.read_text(encoding="utf-8"), re.M)
            if m and m.group(1) == file.stem:
                names.add(file.stem)
    return sorted(names)


def _empty_line(recipe: str) -> str:
    return (f"nothing has been recorded in the artifact store {artifacts.store()} yet: a run records its outputs "
            f"when it ends; start with the README's main job, bash scripts/main.sh (nemotron {recipe} data prep "
            f"pretrain -c tiny), then e.g. nemotron {recipe} pretrain -c local")


def show(recipe: str, target: str | None, config: str | None, lineage: bool, as_json: bool,
         env_file: str | None = None) -> int:
    """``nemotron RECIPE artifacts [KIND[:vN]] [-c CONFIG] [--lineage] [--json]`` (module docstring). Returns the
    exit code: 0, or 2 for an unknown kind or version (raised).

    Raises:
        UsageError: ``--lineage`` without a kind, ``KIND:vN`` with ``-c``, an unknown ``-c``.
        ConfigError: an unknown kind or version (one line naming the known ones), a bad record or env.toml.
    """
    from nemotron.profiles.load import load_profile

    load_profile(None, env_file, {})  # the store a stage command uses: env.toml's [artifacts] root, else the default
    if lineage and target is None:
        raise UsageError("--lineage needs an artifact: KIND or KIND:vN",
                         f"e.g. nemotron {recipe} artifacts pretrain-checkpoint --lineage (nemotron {recipe} "
                         "artifacts lists the kinds)")
    kind, version = artifacts.parse_ref(target) if target else (None, None)
    if version is not None and config is not None:
        raise UsageError(f"{target} names one version; -c {config} picks among versions",
                         f"give {kind}:v{version} or {kind} -c {config}, not both")
    if config is not None:
        _check_config(config)
    store = load()
    scope = artifacts.Scope.of(None, None, os.environ)
    if kind is None:
        return _summary(recipe, store, scope, as_json)
    if kind not in store:
        makers = [n for n in makers_of_kinds() if n not in store]
        if kind not in makers and not kind.startswith(artifacts.ANY_CONSUMER_PREFIXES):
            import difflib

            close = difflib.get_close_matches(kind, [*store, *makers], n=1)
            raise ConfigError(f"no artifact kind {kind!r}: recorded: {', '.join(store) or 'none'}; made by a stage: "
                              f"{', '.join(makers)}",
                              (f"did you mean {close[0]!r}? " if close else "") + f"nemotron {recipe} artifacts "
                              "lists what is recorded")
        command = artifacts.producer_command(kind, config)
        pending = unrecorded_runs(kind, store)
        if as_json:
            from nemotron.cli import jsonout

            jsonout.emit("artifacts", {"store": str(artifacts.store()), "kind": kind, "config": config,
                                       "versions": [], "unrecorded_runs": [_run_doc(r, v) for v, r in pending]})
            return 0
        report.out(f"no version of {kind} has been recorded in {artifacts.store()} yet"
                   + (f"; it is made by: {command}" if command else ""), plain=True)
        _say_unrecorded(kind, pending)
        return 0
    versions = store[kind]
    if version is not None:
        picked = [v for v in versions if v.version == version]
        if not picked:
            raise ConfigError(f"{kind} has no v{version}: recorded: "
                              f"{', '.join(f'v{v.version}' for v in versions)}",
                              f"nemotron {recipe} artifacts {kind} lists them")
        chosen = picked
    else:
        chosen = [v for v in versions if config is None or _takes(config, v)]
    newest = _latest_per_config(versions)
    if lineage:
        if not chosen:
            raise ConfigError(f"no version of {kind} for -c {config}: recorded for "
                              f"{', '.join(sorted({v.config or '-' for v in versions}))}",
                              f"nemotron {recipe} artifacts {kind} lists them")
        return _lineage(_newest(chosen), as_json)
    return _versions(recipe, kind, config, chosen, versions, newest, scope, as_json, unrecorded_runs(kind, store))


def _summary(recipe: str, store: dict[str, list[Version]], scope: artifacts.Scope, as_json: bool) -> int:
    rows, docs, notes = [], [], []
    for kind, versions in store.items():
        by_config: dict[str | None, list[Version]] = {}
        for v in versions:
            by_config.setdefault(v.config, []).append(v)
        for config, group in by_config.items():
            latest = _newest(group)
            why = left_out(latest, scope)
            docs.append({"kind": kind, "config": config, "latest": latest.version,
                         "versions": [v.version for v in group], "created": latest.rec.get("created"),
                         "latest_at": latest.rec.get("latest_at"), "stage": latest.rec.get("stage"),
                         "job_id": None if latest.rec.get("job_id") is None else str(latest.rec["job_id"]),
                         "run_id": latest.rec.get("experiment_id"), "site": latest.rec.get("site"),
                         "path": latest.rec.get("path"), "exists": latest.exists(), "left_out": why})
            mark = "*" if why else ""
            rows.append([kind, config or "-", f"v{latest.version}{mark}",
                         f"{len(group)} (v{artifacts.span([v.version for v in group])})", _when_by(latest),
                         _run_or_job(latest), _shown_path(latest.rec.get("path"))])
            if why:
                notes.append(f"* {kind} v{latest.version}: {why}")
    if as_json:
        from nemotron.cli import jsonout

        jsonout.emit("artifacts", {"store": str(artifacts.store()), "artifacts": docs})
        return 0
    if not rows:
        report.out(_empty_line(recipe), plain=True)
        return 0
    report.table(f"nemotron {recipe} artifacts (store {artifacts.store()}; latest = recorded last)",
                 ["kind", "config", "latest", "versions", "made", "run / job", "path"], rows, whole=(0, 1, 2, 5, 6))
    if notes:
        report.out("* left out of the inputs of a run in this working folder, as its dry run says:", plain=True)
        for line in notes:
            report.out(f"  {line}", plain=True)
    report.out(f"each version, its inputs and consumers: nemotron {recipe} artifacts KIND; the chain upstream: "
               f"nemotron {recipe} artifacts KIND[:vN] --lineage", plain=True)
    return 0


def _versions(recipe: str, kind: str, config: str | None, chosen: list[Version], versions: list[Version],
              newest: set[int], scope: artifacts.Scope, as_json: bool,
              pending: list[tuple[Version, dict[str, Any]]]) -> int:
    if as_json:
        from nemotron.cli import jsonout

        jsonout.emit("artifacts", {"store": str(artifacts.store()), "kind": kind, "config": config,
                                   "versions": [version_doc(v, scope, id(v) in newest) for v in chosen],
                                   "unrecorded_runs": [_run_doc(r, v) for v, r in pending]})
        return 0
    if not chosen:
        report.out(f"no version of {kind} is taken by -c {config}: recorded for "
                   f"{', '.join(sorted({v.config or '-' for v in versions}))}", plain=True)
        return 0
    report.out(f"{kind}: {len(chosen)} version(s)" + (f" taken by -c {config}" if config else "")
               + f" (records in {artifacts.store() / kind})", plain=True)
    for v in reversed(chosen):
        why = left_out(v, scope)
        head = f"v{v.version}" + (f" (latest of -c {v.config})" if id(v) in newest and v.config else
                                  " (latest)" if id(v) in newest else "") + f"  {v.rec.get('path')}  " + (
            "exists here" if v.exists() else "not on this machine")
        report.out(head, plain=True)
        report.out(f"    made: {made_by(v)}" + (f", on {v.rec['site']}" if v.rec.get("site") else ""), plain=True)
        if why:
            report.out(f"    left out of this working folder's inputs: {why}", plain=True)
        inputs = [f"{i.key} ({via})" for i, via in v.inputs]
        report.out(f"    inputs: {'; '.join(inputs) if inputs else no_inputs(v)}", plain=True)
        used = [f"{c.key}" + (f" ({c.rec['stage']} -c {c.config})" if c.rec.get("stage") else "")
                for c, _ in v.consumers] + [run_line(r) for r in v.runs]
        report.out(f"    consumers: {'; '.join(used) if used else 'none recorded'}", plain=True)
    _say_unrecorded(kind, pending)
    report.out(f"the chain upstream of one: nemotron {recipe} artifacts {kind}:vN --lineage", plain=True)
    return 0


def _lineage(v: Version, as_json: bool) -> int:
    if as_json:
        from nemotron.cli import jsonout

        jsonout.emit("artifacts", {"store": str(artifacts.store()), "kind": v.kind, "version": v.version,
                                   "lineage": lineage_doc(v, None)})
        return 0

    def line(x: Version) -> str:
        return f"{x.key}  {x.rec.get('path')}  ({made_by(x)}" + ("" if x.exists() else "; not on this machine") + ")"

    def walk(x: Version, prefix: str, seen: frozenset[int]) -> None:
        if id(x) in seen:
            report.out(f"{prefix}(shown above)", plain=True)
            return
        if not x.inputs:
            report.out(f"{prefix}inputs: {no_inputs(x)}", plain=True)
            return
        for n, (i, via) in enumerate(x.inputs):
            last = n == len(x.inputs) - 1
            report.out(f"{prefix}{'└─ ' if last else '├─ '}{line(i)} [{via}]", plain=True)
            walk(i, prefix + ("   " if last else "│  "), seen | {id(x)})

    report.out(line(v), plain=True)
    walk(v, "", frozenset())
    return 0


__all__ = ["Version", "load", "show"]
