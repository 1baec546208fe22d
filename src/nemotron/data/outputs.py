"""Output folders of the data stages: versions, receipts, manifests and ``consumed_by`` records.

Layout of one prepared output (a *version folder*)::

    <version>/plan.json          the work plan (shards and their input pieces), written before any work
    <version>/data/...           the stage's files, each shard with a ``<shard>.receipt.json``
    <version>/tokenizer/         the tokenizer the data was made with
    <version>/blend.json         (pretraining) the Megatron-Bridge per-split blend
    <version>/manifest.json      written last: ``"complete": true`` means the folder is finished
    <version>/consumed_by/*.json one record per training run that used this folder

Versions: the first version is ``output_dir`` itself; ``force=true`` rebuilds the latest version in
place unless a training run has consumed it, in which case the rebuild goes to a new folder
``output_dir/v<N+1>`` and the consumed data stays untouched (the checkpoint's lineage keeps pointing
at the exact files it was trained on).

One writer at a time: a run holds ``output_dir/.nemotron-writer.lock`` (:func:`writer_lock`) while it
writes any version; a second run on the same ``output_dir`` stops at once with the first one's pid.

``consumed_by`` record: a training stage that reads a version folder calls :func:`record_consumer`
before it starts. That writes ``<version>/consumed_by/<run_id>.json`` (atomically, one file per run,
so concurrent runs never race on a shared file) holding at least
``{"stage": ..., "run_id": ..., "artifact": ..., "time": ISO-8601 UTC}``. A version with any such
record is never overwritten.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nemotron.data.files import atomic_write_json
from nemotron.errors import ConfigError, RuntimeFailure

MANIFEST = "manifest.json"
PLAN = "plan.json"
CONSUMED_DIR = "consumed_by"
RECEIPT_SUFFIX = ".receipt.json"
#: The lock file a run holds in ``output_dir`` while it writes there (:func:`writer_lock`); never deleted.
LOCK = ".nemotron-writer.lock"
#: Names inside a version folder that a rebuild may touch: the files among them, and inside the folders
#: ``data/`` and ``tokenizer/`` only the files the stage wrote (:func:`stage_files`); nothing else is removed.
#: The Megatron-Bridge blend a pretraining data version holds (:func:`pretrain_files`).
BLEND = "blend.json"
OWNED_NAMES = (MANIFEST, PLAN, BLEND, "data", "tokenizer")
#: The files a data stage writes in a version's ``tokenizer/`` folder (SFT adds the config with its chat template).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@contextlib.contextmanager
def writer_lock(output_dir: str | Path) -> Iterator[Path]:
    """Hold ``output_dir`` for one writing run: an exclusive, non-blocking ``fcntl.flock`` on
    ``output_dir/.nemotron-writer.lock`` (the folder and its parents are created), which records the
    holder's pid (and on a second line its ``NEMOTRON_EXPERIMENT_ID`` when set). Also held by the local
    training runtime on its checkpoint folder (:func:`nemotron.runtime.megatron.entry.run_config`). The lock covers
    every version folder under ``output_dir``; the operating system drops it when the process ends, killed
    or not, so a stale lock file never blocks. Yields the lock file.

    ``flock`` is exact between processes of one machine; on a network file system it holds between
    machines only where the file system implements it (NFSv4 and Lustre with ``flock`` mounts do).

    Raises:
        RuntimeFailure: another process holds the lock (exit 1, nothing written):
            ``another run (pid N[, experiment ID]) is writing OUTPUT_DIR``.
    """
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, _, eid = os.pread(fd, 512, 0).decode(errors="replace").strip().partition("\n")
            holder = f"pid {pid.strip() or '?'}" + (f", experiment {eid.strip()}" if eid.strip() else "")
            raise RuntimeFailure(f"another run ({holder}) is writing {root}",
                                 "wait for it to finish, or give this run another output_dir") from None
        os.ftruncate(fd, 0)
        eid = os.environ.get("NEMOTRON_EXPERIMENT_ID", "").strip()
        os.pwrite(fd, f"{os.getpid()}\n{eid}\n".encode() if eid else f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


def consumers(version_dir: str | Path) -> list[dict[str, Any]]:
    """The ``consumed_by`` records of a version folder (sorted by file name); empty when unused."""
    out = []
    folder = Path(version_dir) / CONSUMED_DIR
    if folder.is_dir():
        for f in sorted(folder.glob("*.json")):
            try:
                out.append(json.loads(f.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                out.append({"run_id": f.stem, "unreadable": True})
    return out


def record_consumer(version_dir: str | Path, *, stage: str, run_id: str, artifact: str | None = None,
                    **extra: Any) -> Path:
    """Record that a training run consumed ``version_dir`` (see the module docstring); returns the record path."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id) or "run"
    record = {"stage": stage, "run_id": run_id, "artifact": artifact,
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
    path = Path(version_dir) / CONSUMED_DIR / f"{safe}.json"
    atomic_write_json(path, record)
    return path


def versions(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Existing versions of ``output_dir``: ``[(1, output_dir), (2, output_dir/v2), ...]``.

    ``output_dir`` counts as version 1 when it holds a plan or a manifest.
    """
    root = Path(output_dir)
    found: list[tuple[int, Path]] = []
    if (root / PLAN).exists() or (root / MANIFEST).exists():
        found.append((1, root))
    if root.is_dir():
        for child in root.iterdir():
            m = re.fullmatch(r"v(\d+)", child.name)
            if m and child.is_dir() and int(m.group(1)) >= 2:
                found.append((int(m.group(1)), child))
    return sorted(found)


def select_version(output_dir: str | Path, force: bool) -> tuple[int, Path, str]:
    """Choose the version folder a run writes: ``(version, folder, why)``.

    * no previous output: version 1 = ``output_dir``;
    * without ``force``: the latest version (resumed, or reported up to date by the caller);
    * with ``force``: the latest version, emptied of our files, unless it was consumed — then a new
      ``v<N+1>`` folder.
    """
    root = Path(output_dir)
    found = versions(root)
    if not found:
        return 1, root, "new"
    n, latest = found[-1]
    if not force:
        return n, latest, "existing"
    used = consumers(latest)
    if used:
        who = ", ".join(str(u.get("run_id")) for u in used[:3])
        return n + 1, root / f"v{n + 1}", f"v{n} was consumed by {who}; writing a new version"
    return n, latest, "rebuild"


# ------------------------------------------------------------------------------------ the files a version holds
# One function per data stage names the files it writes into a version folder. The writers write there and the
# planner (nemotron.launch.plan.planned_outputs, through the stage's registry row) wires the next stage of a
# ``pipe`` to the same names, in the version folder the run will write (select_version): one source of truth.
#: The RL data files of a version (nemotron.data.rl writes them).
RL_TRAIN, RL_VALID = "train.jsonl", "validation.jsonl"
#: Megatron-Bridge's names of the packed SFT splits: ``<name>_<pack_size>.idx.parquet`` under ``data/``.
SFT_SPLIT_FILES = {"train": "training", "valid": "validation"}


def sft_split_file(vdir: str | Path, pack_size: int, split: str) -> Path:
    """The packed Parquet file of ``split`` (``"train"`` / ``"valid"``) in version folder ``vdir``."""
    return Path(vdir) / "data" / f"{SFT_SPLIT_FILES[split]}_{pack_size}.idx.parquet"


def sft_metadata_file(vdir: str | Path, pack_size: int) -> Path:
    """Megatron-Bridge's packing metadata beside the splits."""
    return Path(vdir) / "data" / f"{pack_size}_metadata.jsonl"


def _planned_version(cfg: dict[str, Any]) -> Path:
    """The version folder a run of ``cfg`` (its ``output_dir`` and ``force``) will write: :func:`select_version`."""
    return select_version(cfg["output_dir"], bool(cfg.get("force")))[1]


def pretrain_files(cfg: dict[str, Any]) -> dict[str, str]:
    """The artifact fields of a pretraining data run of ``cfg``: ``{"path": version folder, "blend_path": its
    blend.json}``."""
    vdir = _planned_version(cfg)
    return {"path": str(vdir), "blend_path": str(vdir / BLEND)}


def sft_files(cfg: dict[str, Any]) -> dict[str, Any]:
    """The artifact fields of an SFT data run of ``cfg`` (``pack.pack_size`` tokens a pack)."""
    vdir = _planned_version(cfg)
    pack = cfg["pack"]["pack_size"]
    return {"path": str(vdir), "pack_size": str(pack), "train_path": str(sft_split_file(vdir, pack, "train")),
            "valid_path": str(sft_split_file(vdir, pack, "valid")), "metadata_path": str(sft_metadata_file(vdir, pack))}


def rl_files(cfg: dict[str, Any]) -> dict[str, Any]:
    """The artifact fields of an RL data run of ``cfg``; with ``backend: blends`` (a released RL blend repository)
    one artifact per stage file instead, ``{"rl-blend-<stage>": fields}`` (:func:`nemotron.data.rl_blends.planned_files`)."""
    if cfg.get("backend") == "blends":
        return rl_blend_files(cfg)
    vdir = _planned_version(cfg)
    return {"path": str(vdir), "train_path": str(vdir / RL_TRAIN), "validation_path": str(vdir / RL_VALID)}


#: The stage files of nvidia/Nemotron-RL-Ultra-Training-Blends (its dataset card; NeMo RL's Ultra guide), the default
#: ``blends.stages`` of ``data prep rl`` with ``backend: blends`` (nemotron.data.rl_blends writes them).
RL_BLEND_STAGES = ("rlvr1", "rlvr2", "ifbench", "rlhf", "reasoning", "swe", "mopd")
#: The artifact each stage file of a released RL blend becomes: ``rl-blend-<stage>``.
RL_BLEND_ARTIFACT = "rl-blend-"


def rl_blend_folder(vdir: str | Path, stage: str) -> Path:
    """Where a released RL blend's stage file goes in a version: ``<version>/data/<stage>`` (train/validation JSONL)."""
    return Path(vdir) / "data" / stage


def rl_blend_files(cfg: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The artifacts a ``backend: blends`` run of ``cfg`` records, before it runs (``pipe`` wires later stages to
    them): ``{"rl-blend-<stage>": {"path", "train_path", "validation_path"}}`` per stage file, in the version folder
    :func:`select_version` picks."""
    vdir = _planned_version(cfg)
    stages = (cfg.get("blends") or {}).get("stages") or list(RL_BLEND_STAGES)
    return {RL_BLEND_ARTIFACT + st: {"path": str(rl_blend_folder(vdir, st)),
                                     "train_path": str(rl_blend_folder(vdir, st) / RL_TRAIN),
                                     "validation_path": str(rl_blend_folder(vdir, st) / RL_VALID)} for st in stages}


def stage_files(folder: str | Path) -> set[Path]:
    """The files under ``folder/data`` and ``folder/tokenizer`` that a data stage wrote: those its
    ``plan.json`` or ``manifest.json`` name (any path inside ``data/``, with the files ``<name>.<suffix>``
    beside it: a shard prefix names its ``.bin``, ``.idx``, receipt...), those a receipt under ``data/``
    lists (and the receipt), leftover temporary files, and :data:`TOKENIZER_FILES` in ``tokenizer/``. A file the
    stage did not write (a user's own file dropped in ``data/``) is never among them.
    """
    from nemotron.data.files import TMP_MARK

    folder = Path(folder)
    data = folder / "data"
    found: set[Path] = set()
    found.update(folder / "tokenizer" / name for name in TOKENIZER_FILES)
    if not data.is_dir():
        return found
    root = os.path.realpath(data) + os.sep

    def named(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                named(v)
        elif isinstance(value, list):
            for v in value:
                named(v)
        elif isinstance(value, str) and os.path.realpath(value).startswith(root):
            p = Path(value)
            found.add(p)
            if p.parent.is_dir():
                found.update(p.parent.glob(glob.escape(p.name) + ".*"))

    for doc in (PLAN, MANIFEST):
        with contextlib.suppress(OSError, ValueError):
            named(json.loads((folder / doc).read_text(encoding="utf-8")))
    for dirpath, _dirs, names in os.walk(data):
        for name in names:
            path = Path(dirpath) / name
            if TMP_MARK in name:
                found.add(path)
            elif name.endswith(RECEIPT_SUFFIX):
                found.add(path)
                try:
                    listed = json.loads(path.read_text(encoding="utf-8")).get("files") or {}
                except (OSError, ValueError, AttributeError):
                    listed = {}
                found.update(Path(dirpath) / n for n in listed if isinstance(n, str) and "/" not in n)
    return {p for p in found if p.is_file()}


#: Folders of the operating system that no data prep output may be or be inside (with the file system root itself).
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin", "/sys", "/usr")
#: Folders that may hold an output below them but are never one themselves.
SYSTEM_FOLDERS = ("/", "/home", "/opt", "/root", "/srv", "/tmp", "/var", "/mnt", "/media", "/run")


def output_dir_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be a data prep ``output_dir`` (the run writes ``data/``, ``tokenizer/``, ``manifest.json``
    and ``plan.json`` into it): the file system root, a folder of the operating system or inside one
    (:data:`SYSTEM_TREES`: ``/etc``, ``/usr`` ...), a top-level shared folder itself (:data:`SYSTEM_FOLDERS`:
    ``/tmp``, ``/home`` ...) or the user's home folder itself; ``None`` for any other path."""
    real = os.path.realpath(os.path.expanduser(str(path)))
    home = os.path.realpath(os.path.expanduser("~"))
    if real in SYSTEM_FOLDERS or real == home:
        return f"{real} is {'the file system root' if real == '/' else 'a shared top-level or home folder'}, not a folder of its own"
    for tree in SYSTEM_TREES:
        if real == tree or real.startswith(tree + "/"):
            return (f"{real} is a folder of the operating system" if real == tree else
                    f"{real} is inside {tree}, a folder of the operating system")
    return None


def foreign_files(folder: str | Path, names: tuple[str, ...] = ()) -> list[str]:
    """The files under ``folder`` (relative, sorted) that no data stage run wrote: everything but the lock
    file, version folders ``v<N>``, the top-level owned names (:data:`OWNED_NAMES` files and the stage's
    ``names``) and :func:`stage_files`. Empty for a missing folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    ours = stage_files(folder)
    out = []
    for dirpath, dirs, files in os.walk(folder):
        here = Path(dirpath)
        if here == folder:
            dirs[:] = [d for d in dirs if not (re.fullmatch(r"v(\d+)", d) and int(d[1:]) >= 2)]
        for name in files:
            path = here / name
            rel = path.relative_to(folder)
            if len(rel.parts) == 1 and (name == LOCK or name in (*OWNED_NAMES, *names)):
                continue
            if path not in ours:
                out.append(str(rel))
    return sorted(out)


def clear_version(folder: str | Path, names: tuple[str, ...] = ()) -> None:
    """Delete the files a data stage wrote in ``folder``, never anything else: the top-level files of
    :data:`OWNED_NAMES` and of the stage's own ``names`` (such as RL's ``train.jsonl``), the files of
    :func:`stage_files` inside ``data/`` and ``tokenizer/``, then the folders those leave empty. A
    foreign file (one the stage does not write) stays, with its folder.

    Raises:
        ConfigError: the folder has ``consumed_by`` records (consumed output is never deleted).
    """
    folder = Path(folder)
    if consumers(folder):
        raise ConfigError(f"{folder} was consumed by a training run; refusing to delete it")
    ours = stage_files(folder)  # read before plan.json and manifest.json go
    for path in ours:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    for name in (*OWNED_NAMES, *names):
        p = folder / name
        if p.is_file() or p.is_symlink():
            p.unlink()
        elif p.is_dir():
            for dirpath, _dirs, _files in sorted(os.walk(p), key=lambda t: -len(t[0])):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)  # only an empty folder goes


def written_path(path: str | Path, output_dir: str | Path, names: tuple[str, ...] = ()) -> str | None:
    """What ``path`` is among the paths a data stage writes, replaces or deletes under ``output_dir``,
    or ``None`` when it is none of them (symbolic links resolved).

    Those paths: the lock file :data:`LOCK` in ``output_dir``; every version folder ``output_dir/v<N>``
    (N >= 2) and, in ``output_dir`` and in each version folder, the names of :data:`OWNED_NAMES` plus
    the stage's own ``names`` (files, or folders with everything they hold). Returns the owned name
    relative to ``output_dir`` (``"blend.json"``, ``"v2/data/"``, ``"v3/"``), for messages.
    """
    root = Path(os.path.realpath(output_dir))
    try:
        rel = Path(os.path.realpath(path)).relative_to(root).parts
    except ValueError:
        return None
    if rel == (LOCK,):
        return LOCK
    head = ""
    m = re.fullmatch(r"v(\d+)", rel[0]) if rel else None
    if m and int(m.group(1)) >= 2:
        head, rel = f"{rel[0]}/", rel[1:]
        if not rel:
            return head
    if rel and rel[0] in (*OWNED_NAMES, *names):
        return head + rel[0] + ("/" if len(rel) > 1 else "")
    return None


def receipt_path(prefix: str | Path) -> Path:
    """Where the receipt of the shard at ``prefix`` lives."""
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + RECEIPT_SUFFIX)


def read_receipt(prefix: str | Path, key: str) -> dict[str, Any] | None:
    """The receipt of a finished shard, or ``None`` when the shard must be (re)built.

    A receipt counts only when its ``key`` equals ``key`` (the shard's inputs and settings are the
    same) and every file it lists exists with the recorded size.
    """
    path = receipt_path(prefix)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if rec.get("key") != key:
        return None
    for name, size in (rec.get("files") or {}).items():
        f = Path(prefix).parent / name
        if not f.is_file() or f.stat().st_size != size:
            return None
    return rec


def damaged_files(folder: str | Path, manifest: dict[str, Any] | None = None) -> list[str]:
    """The files of a finished version ``folder`` that differ from what was recorded when they were written, one
    line each (``data/web/train_00002.bin: 1,000 bytes, its receipt records 8,461,340``; ``...: missing``), sorted:
    every file a receipt under ``folder/data`` lists (the receipt's byte count), and every ``{"path", "bytes"}``
    entry of the manifest's ``files`` (data prep rl's ``train.jsonl`` / ``validation.jsonl``). Empty when intact.

    Sizes only, as :func:`read_receipt` checks a shard on resume: a same-size change of content is not seen here
    (``data inspect`` and the consumers' checks read the contents).
    """
    folder = Path(folder)
    out: list[str] = []

    def check(path: Path, size: Any, what: str) -> None:
        rel = os.path.relpath(path, folder)
        if not path.is_file():
            out.append(f"{rel}: missing ({what} records {size:,} bytes)" if isinstance(size, int) else f"{rel}: missing")
        elif isinstance(size, int) and path.stat().st_size != size:
            out.append(f"{rel}: {path.stat().st_size:,} bytes, {what} records {size:,}")

    data = folder / "data"
    if data.is_dir():
        for dirpath, _dirs, names in os.walk(data):
            for name in names:
                if not name.endswith(RECEIPT_SUFFIX):
                    continue
                try:
                    listed = json.loads((Path(dirpath) / name).read_text(encoding="utf-8")).get("files") or {}
                except (OSError, ValueError, AttributeError):
                    continue
                for n, size in listed.items() if isinstance(listed, dict) else ():
                    if isinstance(n, str) and "/" not in n:
                        check(Path(dirpath) / n, size, "its receipt")
    files = (manifest or {}).get("files")
    for entry in files.values() if isinstance(files, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) and isinstance(entry.get("bytes"), int):
            check(Path(entry["path"]), entry["bytes"], "the manifest")
    return sorted(set(out))


def write_receipt(prefix: str | Path, receipt: dict[str, Any]) -> None:
    """Write a shard's receipt atomically (after its data files are in place)."""
    atomic_write_json(receipt_path(prefix), receipt)


# --------------------------------------------------------------------------------------------------
# what a training stage reads from an output's manifest


def data_manifest(path: str | os.PathLike[str] | None) -> tuple[dict[str, Any] | None, str]:
    """The manifest of the data prep output that holds ``path``, and the manifest's path; ``(None, "")``
    when there is none (``path`` empty, absent, or outside a data prep output).

    ``path`` is what a training stage is given: a version folder, pretraining's ``blend.json`` (beside the
    manifest) or an SFT packed Parquet / metadata file (in ``<version>/data/``, one level below it). The
    folder of ``path`` and its parent are searched for :data:`MANIFEST`; a manifest that is not a JSON object
    is skipped.
    """
    if not path or "${" in str(path):
        return None, ""
    p = Path(os.path.expanduser(str(path)))
    if not p.exists():
        return None, ""
    start = p if p.is_dir() else p.parent
    for folder in (start, start.parent):
        f = folder / MANIFEST
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data, str(f)
    return None, ""


def megatron_tokenizer(manifest: dict[str, Any] | None, where: str = "") -> dict[str, Any] | None:
    """The Megatron-Bridge ``TokenizerConfig`` fields (``tokenizer_type``, ``tokenizer_model``) that load the
    tokenizer a data prep output was made with: its manifest's ``tokenizer.megatron`` record (written by
    :func:`nemotron.data.tokenizer.write_folder`: the output's own ``tokenizer/`` folder, which
    ``HuggingFaceTokenizer`` loads and which encodes to the ids in the data), a relative folder taken from the
    manifest's (``where``) folder, returned absolute. ``None`` without a manifest.

    Raises:
        ConfigError: the manifest (``where``) has no such record (an output of an older data prep, whose
            ``tokenizer.name`` may be a file Megatron cannot load, such as a Tekken vocabulary), or the
            folder it names is gone.
    """
    if not manifest:
        return None
    tok = manifest.get("tokenizer") if isinstance(manifest.get("tokenizer"), dict) else {}
    record = tok.get("megatron")
    name = tok.get("name")
    if not isinstance(record, dict) or not record.get("tokenizer_type") or not record.get("tokenizer_model"):
        raise ConfigError(f"{where or 'manifest.json'}: tokenizer.megatron is missing (data prepared by an older data "
                          f"prep; its tokenizer.name={name!r} may be a file Megatron's tokenizers cannot load)",
                          "re-run the data prep stage with force=true, or set tokenizer.tokenizer_model")
    model = Path(str(record["tokenizer_model"]))
    if not model.is_absolute() and where:  # data prep writes it relative to the manifest's folder (a copy's own)
        model = Path(where).parent / model
    if not (model / "tokenizer.json").is_file():
        raise ConfigError(f"{where or 'manifest.json'}: tokenizer.megatron.tokenizer_model={str(model)!r} holds no "
                          "tokenizer.json",
                          "re-run the data prep stage with force=true, or set tokenizer.tokenizer_model")
    return {"tokenizer_type": str(record["tokenizer_type"]), "tokenizer_model": str(model)}
