"""Artifact records: what a stage produced, so that later stages can consume it by name.

A record is a small JSON file ``<store>/<name>/v<N>.json`` with at least ``name``, ``version``,
``path`` and ``created`` (seconds since the epoch), plus whatever fields the producing stage adds
(``blend_path``, ``tokenizer``, ``config_hash``, ``job_id`` ...). The store is env.toml's
``[artifacts] root`` when set, else ``$NEMOTRON_HOME/artifacts`` (default ``~/.nemotron/artifacts``).
Configs refer to records with ``${art:NAME,FIELD}`` (latest version) or ``${art:NAME:VERSION,FIELD}``.
"Latest" is the version recorded last; a run that reproduces an already recorded output (an "up to date"
data prep rerun) adds no version but makes that one the latest again (:func:`record`). Every run that
takes an input from a record says so in one line (:func:`used_line`).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nemotron.config.paths import config_names
from nemotron.config.registry import STAGES
from nemotron.errors import ConfigError


def home() -> Path:
    """``$NEMOTRON_HOME`` or ``~/.nemotron``: job records, artifact records, caches (created when first written).

    Raises:
        ConfigError: the path exists and is not a folder (every record under it would fail to be written).
    """
    path = Path(os.environ.get("NEMOTRON_HOME") or Path.home() / ".nemotron").expanduser()
    if path.exists() and not path.is_dir():
        name = "NEMOTRON_HOME" if os.environ.get("NEMOTRON_HOME") else "the default home ~/.nemotron"
        raise ConfigError(f"{name}={path}: is a file, not a folder",
                          "point NEMOTRON_HOME at a folder (it is created when missing), or unset it (~/.nemotron)")
    return path


#: ``[artifacts] root`` of the env.toml this command reads (:func:`nemotron.profiles.load.use_env_file`); None: the default store.
_ROOT: Path | None = None


def set_root(root: Path | None) -> None:
    """Keep this command's records under ``root`` (an env.toml's ``[artifacts] root``), or in the default store
    when None (:func:`nemotron.profiles.load.use_env_file` reads the env.toml and calls this)."""
    global _ROOT
    _ROOT = root


def store() -> Path:
    """The artifact store folder (may not exist yet): ``[artifacts] root`` of the env.toml the command
    reads (:func:`nemotron.profiles.load.use_env_file`), else ``$NEMOTRON_HOME/artifacts`` (default ``~/.nemotron/artifacts``)."""
    return _ROOT if _ROOT is not None else home() / "artifacts"


def _versions(name: str) -> list[int]:
    folder = store() / name
    if not folder.is_dir():
        return []
    out = []
    for f in folder.glob("v*.json"):
        stem = f.stem[1:]
        if stem.isdigit():
            out.append(int(stem))
    return sorted(out)


#: Artifacts that earlier stages of a ``pipe`` will produce: name → fields (planned paths), set only inside
#: :func:`planning`. Looked up before the store, so a chain is wired to where its upstream stage will write, not
#: to an older run.
_PLANNED: contextvars.ContextVar[Mapping[str, dict[str, Any]]] = contextvars.ContextVar("planned", default={})


@contextlib.contextmanager
def planning(planned: Mapping[str, dict[str, Any]]) -> Iterator[None]:
    """Within the ``with``: the artifacts in ``planned`` (what the stages before this one in a ``pipe`` will write)
    are found by :func:`lookup` before the store, and their fields count as :func:`is_planned`."""
    token = _PLANNED.set(planned)
    try:
        yield
    finally:
        _PLANNED.reset(token)


def planned() -> Mapping[str, dict[str, Any]]:
    """The planned artifacts in effect (empty outside :func:`planning`)."""
    return _PLANNED.get()


def is_planned(value: Any) -> bool:
    """Whether ``value`` is a field of a planned artifact (:func:`planning`): a path an earlier stage of the ``pipe``
    will write, which a later stage's checks must not require to exist yet."""
    return isinstance(value, str) and any(value == str(v) for rec in planned().values() for v in rec.values())


def _read(name: str, v: int) -> dict[str, Any] | None:
    path = store() / name / f"v{v}.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: artifact record is not valid JSON: {exc.msg}") from None


def accepted_configs(config: str) -> set[str]:
    """Producer configs a consumer running ``-c config`` takes artifacts from: the same name; for
    ``local`` also ``tiny`` (the data prep stages' tiny sample is their local config); for the
    paper-scale variants of a stage (``phase2``, ``teacher-<slot>``) also ``default``."""
    if config == "local":
        return {config, "tiny"}
    if config == "phase2" or config.startswith("teacher-"):
        return {config, "default"}
    return {config}


#: Artifacts that one producer config makes and every consumer takes, whatever its ``-c``: the stage files of a
#: released RL blend (``data prep rl -c ultra-blends`` records ``rl-blend-<stage>``; the teacher configs read them).
ANY_CONSUMER_PREFIXES = ("rl-blend-",)


def producer_stage(name: str) -> Any:
    """The registry's stage that produces artifact ``name``, or None."""
    return next((stage for stage in STAGES if name in stage.produces), None)


def producer_command(name: str, config: str | None = None) -> str | None:
    """The command that (re)makes artifact ``name``: ``nemotron ultra3 data prep pretrain -c tiny``. The stage is
    the registry's producer of ``name``, else a stage shipping a config named ``name`` (``rlvr -c
    teacher-reasoning`` records ``teacher-reasoning``); ``config`` is the producer's config (the consumer's
    ``-c`` when None is recorded). None when no stage makes it."""

    stage = producer_stage(name)
    if stage is not None:
        return f"nemotron {stage.recipe} {' '.join(stage.command)}" + (f" -c {config}" if config else "")
    for stage in STAGES:
        if name in config_names(stage):
            return f"nemotron {stage.recipe} {' '.join(stage.command)} -c {name}"
    return None


def _present(rec: dict[str, Any]) -> bool:
    path = rec.get("path")
    return not isinstance(path, str) or not path or Path(path).expanduser().exists()


def check_present(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` when what it records is still there; a record of a run on this machine (``job_id`` ``local``)
    whose ``path`` is gone is an error naming the artifact, its version and record, and what to do: rerun the
    producer (its command) or pin a version whose folder exists. The store is shared by every checkout and
    working folder that uses the same ``$NEMOTRON_HOME``, so a record can outlive the folder it points at. A
    cluster job's record is left to the job (its path is on the cluster's storage).

    Raises:
        ConfigError: the recorded folder of a local record does not exist.
    """
    if str(rec.get("job_id", "")) != "local" or _present(rec):
        return rec
    name, version = str(rec.get("name", "?")), rec.get("version")
    where = store() / name / f"v{version}.json"
    present = [str(r.get("version")) for r in _newest_first(name) if r.get("version") != version and _present(r)
               and str(r.get("job_id", "")) == "local"]
    command = producer_command(name, rec.get("config"))
    fix = f"rerun its producer: {command} (it records the output again)" if command else "rerun the stage that made it"
    pin = (f"or pin a version whose folder exists: ${{art:{name}:{present[0]},FIELD}} (present: "
           f"{', '.join('v' + v for v in present)})" if present else "no other version of it has its folder")
    raise ConfigError(f"artifact {name} v{version}: its folder {rec['path']} no longer exists (record {where})",
                      f"{fix}; {pin}")


def lookup(name: str, version: int | None = None, config: str | None = None) -> dict[str, Any] | None:
    """The record of artifact ``name``, or None.

    ``version`` picks one version. Otherwise the latest version (the one recorded last: a rerun that
    found an older version's output up to date makes that version the latest again) produced by a config that ``config``
    accepts (:func:`accepted_configs`) — so ``pretrain -c default`` never trains on the ``tiny``
    sample that happened to run last —, or the latest of all when ``config`` is None (a config file
    given by path), or one named after the config that made it. A planned artifact (:func:`planning`)
    wins when no version is asked for.

    The record found is checked with :func:`check_present`: a record of this machine whose folder was deleted is
    an error, never silently replaced by an older version.

    Raises:
        ConfigError: when a record exists but is not valid JSON (names the file), or its folder is gone.
    """
    if version is None and name in planned():
        return planned()[name]
    if version is not None:
        rec = _read(name, version)
        return None if rec is None else check_present(rec)
    for rec in _newest_first(name):
        # An artifact named after the config that made it (``teacher-reasoning`` by ``-c teacher-reasoning``)
        # is that config's only product: every consumer takes it.
        if rec is not None and (config is None or rec.get("config") in accepted_configs(config)
                                or rec.get("config") == name or name.startswith(ANY_CONSUMER_PREFIXES)):
            return check_present(rec)
    return None


def _newest_first(name: str) -> list[dict[str, Any]]:
    """The records of ``name``, the one recorded last first (``latest_at``, else ``created``; then the
    version number)."""
    recs = [rec for v in _versions(name) if (rec := _read(name, v)) is not None]
    return sorted(recs, key=lambda r: (r.get("latest_at") or r.get("created") or 0, r.get("version") or 0),
                  reverse=True)


#: Record fields that are bookkeeping of one run, not what it produced.
VOLATILE = frozenset({"name", "version", "created", "latest_at", "experiment_id", "job_id"})
#: The file of a data prep output whose bytes identify the data (:func:`record` compares them).
MANIFEST = "manifest.json"


def _manifest_sha256(path: Any) -> str | None:
    try:
        return hashlib.sha256((Path(str(path)) / MANIFEST).read_bytes()).hexdigest()
    except OSError:
        return None


def _same_output(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether two records describe the same output: equal apart from :data:`VOLATILE` fields; for a data
    prep output (a ``manifest_sha256``) the config hash does not count either — the manifest is the data."""
    volatile = VOLATILE | ({"config_hash"} if new.get("manifest_sha256") else set())
    return {k: v for k, v in old.items() if k not in volatile} == {k: v for k, v in new.items() if k not in volatile}


def _write_record(folder: Path, rec: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(rec, fh, indent=2, sort_keys=True, default=str)
    os.replace(tmp, folder / f"v{rec['version']}.json")


def record(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Record what a run produced as artifact ``name`` (atomically) and return the record.

    ``fields`` must contain ``path``. When ``path`` holds a data prep ``manifest.json``, its SHA-256 is
    added as ``manifest_sha256``. A run whose output is one already recorded (same fields apart from
    :data:`VOLATILE` ones; for data, the same manifest: a rerun that found its output up to date) adds no
    version: that version is stamped ``latest_at`` = now, so it is the latest again, and returned.
    Otherwise a new version, one more than the highest recorded.

    Raises:
        ValueError: ``fields`` has no ``path``.
    """
    if "path" not in fields:
        raise ValueError("an artifact record needs a 'path'")
    folder = store() / name
    folder.mkdir(parents=True, exist_ok=True)
    fields = dict(fields)
    manifest = _manifest_sha256(fields["path"])
    if manifest is not None:
        fields.setdefault("manifest_sha256", manifest)
    now = time.time()
    for old in _newest_first(name):
        if _same_output(old, fields):
            old = {**old, "latest_at": now}
            _write_record(folder, old)
            return old
    version = ((_versions(name) or [0])[-1]) + 1
    rec = {**fields, "name": name, "version": version, "created": now}
    _write_record(folder, rec)
    return rec


def used_line(key: str, artifact: str, value: Any) -> str:
    """The line a run prints for config ``key`` resolved from ``artifact`` (``"pretrain-data v12"``) to
    ``value``: ``[nemotron] data.per_split_data_args_path: artifact pretrain-data v12, /data/v2/blend.json``."""
    return f"[nemotron] {key}: artifact {artifact}, {value}"


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``"pretrain-data"`` → (name, None); ``"pretrain-data:3"`` → (name, 3).

    Raises:
        ConfigError: for a version that is not a positive integer.
    """
    name, _, version = ref.partition(":")
    if not version:
        return name, None
    v = version.lstrip("v")
    if not v.isdigit() or int(v) < 1:
        raise ConfigError(f"artifact reference {ref!r}: version must be a positive integer (e.g. {name}:2)")
    return name, int(v)


#: File in the run folder (``$NEMOTRON_RUN_DIR``) where a stage's runtime says what it actually wrote.
OUTPUTS_FILE = "outputs.json"


def write_outputs(outputs: dict[str, dict[str, Any]]) -> Path | None:
    """Called by a stage's runtime when it finished: ``{artifact name: fields}`` of what it wrote
    (e.g. a new data version folder), into ``$NEMOTRON_RUN_DIR/outputs.json``. These fields win over
    the planned ones when the artifact is recorded. Returns the file, or None outside a run folder."""
    folder = os.environ.get("NEMOTRON_RUN_DIR")
    if not folder:
        return None
    path = Path(folder) / OUTPUTS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(outputs, indent=2, sort_keys=True, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


def merge_outputs(planned: dict[str, dict[str, Any]], actual_json: str | None) -> dict[str, dict[str, Any]]:
    """Planned artifact fields updated with those the runtime reported (``outputs.json`` text)."""
    merged = {name: dict(fields) for name, fields in planned.items()}
    if actual_json:
        try:
            actual = json.loads(actual_json)
        except json.JSONDecodeError:
            actual = {}
        for name, fields in (actual.items() if isinstance(actual, dict) else ()):
            if isinstance(fields, dict):
                merged.setdefault(name, {}).update(fields)
    return merged
