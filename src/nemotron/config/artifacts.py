"""Artifact records: what a stage produced, so that later stages can consume it by name.

A record is a small JSON file ``<store>/<name>/v<N>.json`` with at least ``name``, ``version``,
``path`` and ``created`` (seconds since the epoch), plus whatever fields the producing stage adds
(``blend_path``, ``tokenizer``, ``config_hash``, ``job_id`` ...). The store is env.toml's
``[artifacts] root`` when set, else ``$NEMOTRON_HOME/artifacts`` (default ``~/.nemotron/artifacts``).
Configs refer to records with ``${art:NAME,FIELD}`` (latest version) or ``${art:NAME:VERSION,FIELD}``.
"Latest" is the version recorded last; a run that reproduces an already recorded output (an "up to date"
data prep rerun) adds no version but makes that one the latest again (:func:`record`). Every run that
takes an input from a record says so first, in one line each (:func:`input_line`); "latest" is scoped to what the
consumer can read (:class:`Scope`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import re
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nemotron.config.paths import config_names, stages_dir
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


def versions(name: str) -> list[int]:
    """The versions of artifact ``name`` in the store, ascending (empty: none recorded)."""
    return _versions(name)


def known_names() -> list[str]:
    """Every artifact name a reference may give: those the registry's stages produce, the configs that name their own
    product (``teacher-reasoning``), those planned by a ``pipe`` and those recorded in the store; sorted."""
    names = {n for stage in STAGES for n in stage.produces} | set(planned())
    names |= {c for stage in STAGES for c in config_names(stage) if producer_command(c) is not None}
    if store().is_dir():
        names |= {f.name for f in store().iterdir() if f.is_dir()}
    return sorted(names)


def is_known(name: str) -> bool:
    """Whether a reference to artifact ``name`` can ever resolve: a stage makes it (:func:`producer_command`), a
    ``pipe`` plans it, a run recorded it, or it is a released RL blend (:data:`ANY_CONSUMER_PREFIXES`)."""
    return (name.startswith(ANY_CONSUMER_PREFIXES) or name in planned() or bool(_versions(name))
            or producer_command(name) is not None)


def span(numbers: list[int]) -> str:
    """``1-3`` for consecutive numbers, else ``1, 3, 4``."""
    if numbers and numbers == list(range(numbers[0], numbers[-1] + 1)) and len(numbers) > 1:
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(str(n) for n in numbers)


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


_CYCLE = re.compile(r"^(?:(?P<base>.+)-)?cycle(?P<k>[0-9]+)$")


def cycle_config(config: str | None, k: int) -> str:
    """The config of the ``k``-th occurrence (k >= 2) of a stage in a ``pipe`` run with ``-c config``: ``<config>-cycle<k>``
    (``cycle<k>`` for ``default``): ``pipe ... mopd mopd ... -c local`` runs ``mopd -c local`` then ``mopd -c
    local-cycle2`` (its own checkpoint folder and teacher panel)."""
    return f"cycle{k}" if config in (None, "default") else f"{config}-cycle{k}"


def cycle_base(config: str) -> str | None:
    """The config a cycle config repeats (``local-cycle2`` -> ``local``, ``cycle2`` -> ``default``), else None."""
    m = _CYCLE.match(config)
    return None if m is None else (m.group("base") or "default")


class _Accepted(frozenset):
    """A set of config names that also holds the cycle configs of each (``local`` holds ``local-cycle2``)."""

    def __contains__(self, item: object) -> bool:
        if frozenset.__contains__(self, item):
            return True
        base = cycle_base(item) if isinstance(item, str) else None
        return base is not None and frozenset.__contains__(self, base)


def accepted_configs(config: str) -> frozenset[str]:
    """Producer configs a consumer running ``-c config`` takes artifacts from: the same name; for
    ``local`` also ``tiny`` (the data prep stages' tiny sample is their local config); for the
    paper-scale variants of a stage (``phase2``, ``teacher-<slot>``) also ``default``; a cycle config
    (``local-cycle2``, :func:`cycle_config`) those of the config it repeats. Each accepted name also accepts its
    cycle configs (``mtp-boost -c local`` takes the ``mopd-checkpoint`` a ``mopd -c local-cycle2`` run made)."""
    base = cycle_base(config)
    if base is not None:
        return _Accepted({config, *accepted_configs(base)})
    if config == "local":
        return _Accepted({config, "tiny"})
    if config == "phase2" or config.startswith("teacher-"):
        return _Accepted({config, "default"})
    return _Accepted({config})


#: Artifacts that one producer config makes and every consumer takes, whatever its ``-c``: the stage files of a
#: released RL blend (``data prep rl -c ultra-blends`` records ``rl-blend-<stage>``; the teacher configs read them).
ANY_CONSUMER_PREFIXES = ("rl-blend-",)


def recorded_config(stage: str, config: str | None) -> str | None:
    """The ``config`` field of a record that ``stage`` (its registry name) made with ``-c config`` (a name, or a
    file path: its stem): a data prep stage's ``local`` is its ``tiny`` config (the config compiler reads
    ``tiny.yaml`` for it), so a rerun of up-to-date data with ``-c local`` finds the version ``-c tiny`` recorded
    (same manifest, same fields: :func:`record` reuses it) instead of adding one that says ``local``."""
    if config is None:
        return None
    stem = Path(config).stem
    maker = next((s for s in STAGES if s.name == stage), None)
    if stem == "local" and maker is not None and maker.family.prepares_data \
            and not (stages_dir() / maker.config_dir / "local.yaml").is_file():
        return "tiny"
    return stem


def version_of(path: Any) -> str | None:
    """``"<artifact> v<N>"`` of the record whose ``path`` (or any ``*_path`` field: ``blend_path``, ``train_path``,
    ...) is ``path`` (symlinks resolved), the one recorded last when several are (a folder a rerun wrote again in
    place: the version that rerun recorded); None when no record names it or there is no store. What a run writes
    beside the folders it took (``lineage.json``'s ``input_versions``), so a folder overwritten later still says which
    version it was."""
    if path in (None, ""):
        return None
    try:
        root = store()
        want = str(Path(str(path)).resolve())
        files = list(root.glob("*/v*.json"))
    except Exception:  # noqa: BLE001 - no store: the versions are simply not known
        return None
    found: tuple[float, int, str] | None = None
    for rec_path in files:
        try:
            rec = json.loads(rec_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict):
            continue
        for k, v in rec.items():
            if (k == "path" or k.endswith("_path")) and isinstance(v, str) and v and str(Path(v).resolve()) == want:
                cand = (float(rec.get("latest_at") or rec.get("created") or 0), int(rec.get("version") or 0),
                        f"{rec.get('name')} v{rec.get('version')}")
                found = cand if found is None or cand[:2] > found[:2] else found
    return found[2] if found else None


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
    """``rec`` when what it records is still there; a record of a run on this machine (``job_id`` ``local``, or a
    ``site`` ``here:...``: a local profile's job too)
    whose ``path`` is gone is an error naming the artifact, its version and record, and what to do: rerun the
    producer (its command) or pin a version whose folder exists. The store is shared by every checkout and
    working folder that uses the same ``$NEMOTRON_HOME``, so a record can outlive the folder it points at. A
    cluster job's record is left to the job (its path is on the cluster's storage).

    Raises:
        ConfigError: the recorded folder of a local record does not exist.
    """
    here = str(rec.get("job_id", "")) == "local" or str(rec.get("site", "")).startswith("here:")
    if not here or _present(rec):
        return rec
    name, version = str(rec.get("name", "?")), rec.get("version")
    where = store() / name / f"v{version}.json"
    present = [str(r.get("version")) for r in _newest_first(name) if r.get("version") != version and _present(r)
               and (str(r.get("job_id", "")) == "local" or str(r.get("site", "")).startswith("here:"))]
    command = producer_command(name, rec.get("config"))
    fix = f"rerun its producer: {command} (it records the output again)" if command else "rerun the stage that made it"
    pin = (f"or pin a version whose folder exists: ${{art:{name}:{present[0]},FIELD}} (present: "
           f"{', '.join('v' + v for v in present)})" if present else "no other version of it has its folder")
    raise ConfigError(f"artifact {name} v{version}: its folder {rec['path']} no longer exists (record {where})",
                      f"{fix}; {pin}")


# --------------------------------------------------------------------------------------------- scope
#: The environment variables the shipped configs' default output folders are built on, with their defaults
#: (``${oc.env:NEMOTRON_DATA_DIR,'./output'}``, ``${oc.env:NEMOTRON_CKPT_ROOT,'./checkpoints'}``).
DEFAULT_ROOTS = (("NEMOTRON_DATA_DIR", "./output"), ("NEMOTRON_CKPT_ROOT", "./checkpoints"))


def site(executor: str | None, host: str | None = None) -> str:
    """Where a run's files live, as records name it: ``here:<hostname>`` for a run on this machine (``executor``
    None: no profile, a ``local`` profile), else ``<executor>:<host>``: ``slurm:<login host>`` for a Slurm job
    (``host``: an ssh profile's; this machine's for a local tunnel), ``ray:<address>`` for a job on a Ray cluster
    (``host``: :func:`nemotron.profiles.schema.storage_host` names it)."""
    import socket

    if executor is None:
        return f"here:{socket.gethostname()}"
    return f"{executor}:{host or socket.gethostname()}"


def default_roots(env: Mapping[str, str]) -> tuple[str, ...]:
    """The folders default outputs go to for a run with environment ``env`` (a profile's storage variables over
    ``os.environ``): ``NEMOTRON_DATA_DIR`` / ``NEMOTRON_CKPT_ROOT``, else ``./output`` / ``./checkpoints`` of the
    working folder (absolute, as a compiled config makes every ``./`` path:
    :func:`nemotron.config.compile.compile_config`)."""
    return tuple(os.path.abspath(os.path.expanduser(env.get(var) or default)) for var, default in DEFAULT_ROOTS)


def in_roots(path: Any, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``roots`` or inside one."""
    if not isinstance(path, str) or not path:
        return False
    p = os.path.abspath(os.path.expanduser(path))
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)


def scope_fields(executor: str | None, host: str | None, env: Mapping[str, str], path: Any,
                 promoted: bool = False) -> dict[str, Any]:
    """The fields a producer adds to its record: ``site`` (:func:`site`), ``scratch`` (its ``path`` lies outside
    the default output folders of its own run: :func:`default_roots`; such an output is never "latest" unless
    pinned by version or ``promoted``) and ``promoted`` when asked."""
    scratch = not in_roots(path, default_roots(env))
    return {"site": site(executor, host), "scratch": scratch, **({"promoted": True} if promoted else {})}


@dataclasses.dataclass(frozen=True)
class Scope:
    """What a consumer can read: its ``site`` (:func:`site`) and the default output folders of its working folder
    and environment (``roots``: :func:`default_roots`)."""

    site: str
    roots: tuple[str, ...] = ()

    @classmethod
    def of(cls, executor: str | None, host: str | None, env: Mapping[str, str]) -> Scope:
        """The scope of a consumer run by ``executor`` (None: on this machine) on ``host`` with environment ``env``."""
        return cls(site(executor, host), default_roots(env))

    def why_not(self, rec: Mapping[str, Any]) -> str | None:
        """None when the "latest" of a consumer in this scope may be ``rec``; else why not, in words. A record
        without ``site`` (written before records carried one) is judged by its folder alone: in scope only inside
        this run's output folders (another checkout's ``./output`` on the same machine is not this run's input)."""
        where = rec.get("site")
        if where is None:
            if in_roots(rec.get("path"), self.roots):
                return None
            return (f"{rec.get('path')} is an older record's output (made before records said where), outside this "
                    f"run's output folders ({', '.join(self.roots)})")
        if where != self.site:
            return f"made on {where}, not readable by this run ({self.site})"
        if rec.get("promoted"):
            return None
        if not in_roots(rec.get("path"), self.roots):
            what = "a scratch output" if rec.get("scratch") else "another working folder's output"
            return f"{rec.get('path')} is {what}, outside this run's output folders ({', '.join(self.roots)})"
        return None


#: The scope of the consumer being compiled (:func:`scoped`); None: every record (no consumer in particular).
_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("scope", default=None)


@contextlib.contextmanager
def scoped(scope: Scope | None) -> Iterator[None]:
    """Within the ``with``: :func:`lookup` picks "latest" among the records ``scope`` can read."""
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def skipped(name: str, config: str | None = None) -> list[str]:
    """``vN: why`` of each record of ``name`` (of a config ``config`` accepts) that the scope in effect left out
    of "latest" (for the message of an input not found)."""
    scope = _SCOPE.get()
    if scope is None:
        return []
    out = []
    for rec in _newest_first(name):
        if config is not None and rec.get("config") not in accepted_configs(config) and rec.get("config") != name:
            continue
        why = scope.why_not(rec)
        if why:
            out.append(f"v{rec.get('version')}: {why}")
    return out


def lookup(name: str, version: int | None = None, config: str | None = None) -> dict[str, Any] | None:
    """The record of artifact ``name``, or None.

    ``version`` picks one version. Otherwise the latest version (the one recorded last: a rerun that
    found an older version's output up to date makes that version the latest again) produced by a config that ``config``
    accepts (:func:`accepted_configs`) — so ``pretrain -c default`` never trains on the ``tiny``
    sample that happened to run last —, or the latest of all when ``config`` is None (a config file
    given by path), or one named after the config that made it. A planned artifact (:func:`planning`)
    wins when no version is asked for.

    Within :func:`scoped` (every stage command: :func:`nemotron.cli.pipeline.prepare_stage`), "latest" is
    taken only among the records the consumer can read (:meth:`Scope.why_not`): made where it runs (this machine,
    or the profile's cluster), inside its own default output folders (a run here: its working folder's
    ``./output``/``./checkpoints`` or ``NEMOTRON_DATA_DIR``/``NEMOTRON_CKPT_ROOT``), not a scratch output unless
    that run was promoted. A version asked for by number is taken wherever it was made.

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
    scope = _SCOPE.get()
    for rec in _newest_first(name):
        # An artifact named after the config that made it (``teacher-reasoning`` by ``-c teacher-reasoning``)
        # is that config's only product: every consumer takes it.
        if rec is not None and (config is None or rec.get("config") in accepted_configs(config)
                                or rec.get("config") == name or name.startswith(ANY_CONSUMER_PREFIXES)) \
                and (scope is None or scope.why_not(rec) is None):
            return check_present(rec)
    return None


def lookup_any(refs: list[str], config: str | None = None) -> tuple[str, dict[str, Any]] | None:
    """``(name, record)`` for a reference with alternatives (``${art:mopd-warmup-checkpoint|rl-checkpoint,path}``):
    within a ``pipe`` (:func:`planning`) the first alternative that a stage before will produce; else, of the
    alternatives that exist (:func:`lookup` each), the one recorded last — so ``mopd`` starts from the warmup of
    the RLVR checkpoint when that warmup ran after it, and from the RLVR checkpoint when that is newer. None when
    none exists.

    Raises:
        ConfigError: as :func:`lookup`, for a malformed version or record.
    """
    parsed = [parse_ref(r) for r in refs]
    for name, version in parsed:
        if version is None and name in planned():
            return name, planned()[name]
    found = [(name, rec) for name, version in parsed if (rec := lookup(name, version, config)) is not None]
    if not found:
        return None
    return max(found, key=lambda x: (x[1].get("latest_at") or x[1].get("created") or 0))


def _newest_first(name: str) -> list[dict[str, Any]]:
    """The records of ``name``, the one recorded last first (``latest_at``, else ``created``; then the
    version number)."""
    recs = [rec for v in _versions(name) if (rec := _read(name, v)) is not None]
    return sorted(recs, key=lambda r: (r.get("latest_at") or r.get("created") or 0, r.get("version") or 0),
                  reverse=True)


#: Record fields that are bookkeeping of one run, not what it produced.
VOLATILE = frozenset({"name", "version", "created", "latest_at", "experiment_id", "job_id", "imported_at"})
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


def record(name: str, fields: dict[str, Any], at: float | None = None) -> dict[str, Any]:
    """Record what a run produced as artifact ``name`` (atomically) and return the record.

    ``fields`` must contain ``path``. When ``path`` holds a data prep ``manifest.json``, its SHA-256 is
    added as ``manifest_sha256``. A run whose output is one already recorded (same fields apart from
    :data:`VOLATILE` ones; for data, the same manifest: a rerun that found its output up to date) adds no
    version: that version is stamped ``latest_at`` = now, so it is the latest again, and returned.
    Otherwise a new version, one more than the highest recorded. ``at``: when the run made it (seconds since the
    epoch; a cluster job's end time), else now: the ``created`` / ``latest_at`` stamp that orders "latest".

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
    now = time.time() if at is None else at
    for old in _newest_first(name):
        if _same_output(old, fields):
            old = {**old, "latest_at": now}
            _write_record(folder, old)
            return old
    version = ((_versions(name) or [0])[-1]) + 1
    rec = {**fields, "name": name, "version": version, "created": now}
    _write_record(folder, rec)
    return rec


def input_line(rec: Mapping[str, Any], keys: list[str]) -> str:
    """The line a run and a dry run print first for each artifact its config takes (``rec``: the record resolved,
    or a planned artifact of a ``pipe``), with the config ``keys`` set from it:
    ``[nemotron] input pretrain-data v3: /data/v3 (made here:host by data_prep_pretrain -c tiny, job local,
    2026-12-05 13:55:12) -> data.per_split_data_args_path``."""
    name = rec.get("name") or "?"
    if rec.get("version") is None:
        return f"[nemotron] input {name} (planned: an earlier stage of this pipe writes it): {rec.get('path')}" + (
            f" -> {', '.join(keys)}" if keys else "")
    made = rec.get("latest_at") or rec.get("created")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(made)) if isinstance(made, (int, float)) else "?"
    by = f" by {rec['stage']}" + (f" -c {rec['config']}" if rec.get("config") else "") if rec.get("stage") else ""
    job = f", job {rec['job_id']}" if rec.get("job_id") else ""
    where = rec.get("site") or "an unrecorded place"
    return (f"[nemotron] input {name} v{rec['version']}: {rec.get('path')} (made on {where}{by}{job}, {when})"
            + (f" -> {', '.join(keys)}" if keys else ""))


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


#: File in a submitted job's run folder: what to record when the job ends (:func:`record_at_end`).
RECORD_FILE = "record.json"


def output_problems(outputs: Mapping[str, Mapping[str, Any]], data: bool) -> list[str]:
    """What keeps ``outputs`` (artifact name → fields) from being recorded, on this machine: each ``path`` /
    ``*_path`` that does not exist; for a data stage (``data``) an output folder whose ``manifest.json`` (written
    last) does not say ``"complete": true``. Empty: present and complete."""
    out = []
    for name, fields in outputs.items():
        for key, value in fields.items():
            if (key == "path" or key.endswith("_path")) and isinstance(value, str) and value \
                    and not os.path.exists(value):
                out.append(f"{name}: {value} does not exist")
        folder = fields.get("path")
        if data and isinstance(folder, str) and folder and os.path.isdir(folder):
            try:
                complete = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8")).get("complete") is True
            except (OSError, ValueError, AttributeError):
                complete = False
            if not complete:
                out.append(f"{name}: {folder} has no complete {MANIFEST}")
    return out


def record_at_end(run_dir: str | None = None) -> list[dict[str, Any]]:
    """Called by a submitted job's entry when its stage ended with exit 0: record its artifacts now, when the job
    ends, from ``<run folder>/record.json`` (written at submission where the job can reach the store: a local
    profile's job, a Slurm job through a local tunnel; absent otherwise, and then ``status``/an attached run records
    them, stamped with the job's end time). The planned fields are updated with ``outputs.json``; nothing is recorded
    when :func:`output_problems` finds any (each said on stderr, in the job's log). Returns the records written."""
    import sys

    folder = run_dir or os.environ.get("NEMOTRON_RUN_DIR")
    spec_file = Path(folder) / RECORD_FILE if folder else None
    if spec_file is None or not spec_file.is_file():
        return []
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    report = Path(folder) / OUTPUTS_FILE
    outputs = merge_outputs(spec.get("outputs") or {}, report.read_text(encoding="utf-8") if report.is_file() else None)
    problems = output_problems(outputs, bool(spec.get("data")))
    for line in problems:
        print(f"[nemotron] not recorded as an artifact: {line}", file=sys.stderr, flush=True)
    if problems:
        return []
    set_root(Path(spec["store"]))
    # Slurm's job id; a local profile's job (whose NeMo-Run app id is given after its files are staged): its
    # experiment id
    job_id = os.environ.get("SLURM_JOB_ID") or (spec.get("fields") or {}).get("experiment_id") or "?"
    out = []
    for name, fields in outputs.items():
        try:
            rec = record(name, {**fields, **(spec.get("fields") or {}), "job_id": job_id})
        except OSError as exc:  # the store is not writable from here: the submitting side records it later
            print(f"[nemotron] artifact {name} not recorded at job end: {spec['store']}: {exc.strerror or exc}; "
                  "`status` or the attached run records it", file=sys.stderr, flush=True)
            continue
        print(f"[nemotron] artifact {name} v{rec['version']}: {rec['path']} (recorded at job end)", file=sys.stderr,
              flush=True)
        out.append(rec)
    return out


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
