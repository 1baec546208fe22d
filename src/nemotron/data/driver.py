"""The skeleton the three data prep pipelines share (pretraining, SFT and RL data).

Every data stage runs the same way around its own work::

    load blend ─► choose output version ─► plan (pure; overlapped with Ray's start-up)
      ─► notes ─► plan-key check against the old plan.json ─► rebuild | "up to date" | go on
      ─► Ray streaming tasks for the items without a matching receipt ─► outputs ─► manifest.json (last)

The pieces of that skeleton live here; what a stage does with its records, its plan, its outputs and
its summary tables stays in its own module (:mod:`nemotron.data.pretrain`, :mod:`nemotron.data.sft`,
:mod:`nemotron.data.rl`). Nothing heavy is imported at module level (``--dry-run`` validation imports
the stage modules): Ray is imported when a run needs it.

A stage's ``Settings`` extends :class:`StageSettings`, the settings every stage has; the driver reads
only those.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import json
import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

from nemotron.data import outputs
from nemotron.data.blend import Blend, DatasetSpec, load_blend
from nemotron.data.files import atomic_write_json, sha256_file
from nemotron.errors import ConfigError, hold_point

P = TypeVar("P")

#: The manifest's pointer to how consumption of a version is recorded.
CONSUMED_BY = f"records are files under {outputs.CONSUMED_DIR}/ (nemotron.data.outputs.record_consumer)"
#: ``workers.engine`` values: ``auto`` (see :func:`choose_engine`), ``ray``, ``in_process``.
ENGINES = ("auto", "ray", "in_process")
#: ``workers.in_process_max_bytes`` default: under ``auto``, local input up to this size (1 GiB) runs in the
#: driver process. Source: on the 2-core development machine a local Ray costs ~6 s to start and stop
#: (issue 19's measurement) while 1 GiB of text takes ~150 s to tokenize on 2 threads, so above it Ray's
#: start-up is under 4 % of the work and its processes scale; below it the start-up would dominate.
IN_PROCESS_MAX_BYTES = 1 << 30

#: The hint of a plan-key mismatch (an output folder holding data of other inputs or settings).
MISMATCH_HINT = ("rerun with force=true to rebuild (a consumed version is kept; a new one is written), "
                 "or choose another output_dir")


# --------------------------------------------------------------------------------------------------
# settings, entry point and driver


def _at_least(key: str, value: Any, minimum: Any) -> Any:
    """``value`` when ``minimum`` is None or ``value >= minimum``.

    Raises:
        ConfigError: ``<key>=<value> must be at least <minimum>``.
    """
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key}={value} must be at least {minimum}")
    return value


#: The choices a :class:`Reader` was asked for within :func:`recorded_choices` (None: not recording).
_CHOICES: contextvars.ContextVar[dict[str, tuple[str, ...]] | None] = contextvars.ContextVar("choices", default=None)


@contextlib.contextmanager
def recorded_choices() -> Iterator[dict[str, tuple[str, ...]]]:
    """Within the ``with``, every :meth:`Reader.choice` records its key and its valid values into the mapping
    yielded (``{"policies.control_token_text": ("text", "skip", "fail"), ...}``): the sets the stage's settings
    validate against, for shell completion (:func:`nemotron.validation.data.choice_sets`)."""
    seen: dict[str, tuple[str, ...]] = {}
    token = _CHOICES.set(seen)
    try:
        yield seen
    finally:
        _CHOICES.reset(token)


class Reader:
    """Typed access to a data stage's compiled config (a nested dict), with errors that name the key.

    Args:
        cfg: the compiled stage config.
        top: the stage's own top-level keys; ``run``, ``defaults`` and the section names are known too.
        sections: section name -> the keys it may hold (``{"tokenizer": ("name", ...), ...}``).

    Raises:
        ConfigError: ``cfg`` is not a mapping; each reading method raises it for a missing, mistyped or
            out-of-range value, naming the key (``shards.target_tokens=0 must be at least 1``).
    """

    def __init__(self, cfg: dict[str, Any], top: tuple[str, ...], sections: dict[str, tuple[str, ...]]) -> None:
        if not isinstance(cfg, dict):
            raise ConfigError("the stage config must be a mapping of keys to values")
        self.cfg = cfg
        self.top = (*top, "run", "defaults", *sections)
        self.sections = sections

    def get(self, key: str, default: Any) -> Any:
        """The value at the dotted ``key`` (``shards.target_tokens``), or ``default`` where it is absent
        and ``default`` is ``None`` (an optional key) or the key is none of the stage's own.

        Raises:
            ConfigError: a key of the stage (its ``top`` keys or a section's) with a non-null ``default`` is
                absent: the compiled config always holds the stage's keys (default.yaml), so it was deleted
                (``~pack.pack_size``) or its section replaced (``pack={}``), and the run would otherwise use
                a value the config report never showed.
        """
        cur: Any = self.cfg
        for part in key.split("."):
            if not isinstance(cur, dict) or part not in cur:
                if default is not None and default is not ... and self._own(key):
                    raise ConfigError(f"{key} is missing (deleted with ~{key}, or its section replaced by a "
                                      "mapping without it): the stage needs a value",
                                      f"set it ({key}=VALUE) instead of deleting it, or drop that override to "
                                      "use the config's value")
                return default
            cur = cur[part]
        return cur

    def _own(self, key: str) -> bool:
        """Whether ``key`` is one the stage declares (a top-level key, or a key of one of its sections)."""
        head, _, rest = key.partition(".")
        if not rest:
            return head in self.top and head not in ("run", "defaults")
        return head in self.sections and rest in self.sections[head]

    def _null(self, key: str, what: str) -> ConfigError:
        """The refusal of ``key=null`` where the stage needs ``what`` (a key with a non-null default)."""
        return ConfigError(f"{key}=null: the stage needs {what} here (null is no value for this key)",
                           f"set {key}=VALUE, or drop the override to use the config's value")

    def str(self, key: str, default: Any = ...) -> Any:
        """A non-empty string (required when no ``default``; ``~`` expanded for ``*_dir``/``*_path`` keys)."""
        v = self.get(key, default)
        if v is ...:
            raise ConfigError(f"{key} is required")
        if v is None and default is None:
            return None
        if not isinstance(v, str) or not v:
            raise ConfigError(f"{key}={v!r} must be a non-empty string")
        return os.path.expanduser(v) if key.endswith(("_dir", "_path")) else v

    def bool(self, key: str, default: bool) -> bool:
        """``true``/``false`` (a YAML boolean or those two words)."""
        v = self.get(key, default)
        if isinstance(v, str) and v.lower() in ("true", "false"):
            return v.lower() == "true"
        if not isinstance(v, bool):
            raise ConfigError(f"{key}={v!r} must be true or false")
        return v

    def int(self, key: str, default: int | None, minimum: int | None = None) -> Any:
        """A whole number (``3.0`` reads as 3) of at least ``minimum``; None when the value is null and the key
        is optional (``default`` None); null for a key with a non-null ``default`` raises ConfigError."""
        v = self.get(key, default)
        if v is None and default is not None:
            raise self._null(key, "a whole number" + (f" of at least {minimum}" if minimum is not None else ""))
        if v is None:
            return None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            from nemotron.config.yamlio import INT_FORMS

            raise ConfigError(f"{key}={v!r} must be a whole number" + (" or null" if default is None else ""),
                              f"numbers are written {INT_FORMS}")
        return _at_least(key, v, minimum)

    def float(self, key: str, default: float | None, minimum: float | None = None) -> Any:
        """A number (not NaN) of at least ``minimum``, as a float; None when the value is null and the key is
        optional (``default`` None); null for a key with a non-null ``default`` raises ConfigError."""
        v = self.get(key, default)
        if v is None and default is not None:
            raise self._null(key, "a number" + (f" of at least {minimum}" if minimum is not None else ""))
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise ConfigError(f"{key}={v!r} must be a number")
        return float(_at_least(key, v, minimum))

    def choice(self, key: str, valid: tuple[str, ...], default: str) -> str:
        """One of ``valid``. Within :func:`recorded_choices`, ``key`` and ``valid`` are recorded, and a value not
        in ``valid`` reads as ``default`` (the reading goes on, so that every set is recorded)."""
        v = self.get(key, default)
        seen = _CHOICES.get()
        if seen is not None:
            seen[key] = tuple(valid)
            return v if v in valid else default
        if v not in valid:
            raise ConfigError(f"{key}={v!r} is not allowed; valid: {', '.join(valid)}")
        return v

    def dict(self, key: str, default: dict[str, Any]) -> dict[str, Any]:
        """A mapping (a copy; ``{}`` when the value is null)."""
        v = self.get(key, None)  # absent or null: no entries (a free-form mapping)
        if v is None:
            return dict(default)
        if not isinstance(v, dict):
            raise ConfigError(f"{key} must be a mapping of names to values")
        return dict(v)

    def check_unknown(self) -> None:
        """Refuse a top-level key or a section key the stage does not know (with a did-you-mean).

        Raises:
            ConfigError: an unknown key, or a section that is not a mapping.
        """
        for key, value in self.cfg.items():
            if key not in self.top:
                close = difflib.get_close_matches(key, self.top, n=1)
                raise ConfigError(f"unknown key {key!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
            if key in self.sections:
                if not isinstance(value, dict):
                    raise ConfigError(f"{key} must be a section (a mapping), not {value!r}")
                for sub in value:
                    if sub not in self.sections[key]:
                        close = difflib.get_close_matches(sub, self.sections[key], n=1)
                        raise ConfigError(f"unknown key {key}.{sub}" + (f"; did you mean {key}.{close[0]}?" if close
                                          else f"; valid: {', '.join(self.sections[key])}"))


@dataclass
class StageSettings:
    """The settings every data stage has, checked; a stage's ``Settings`` adds its own after these.

    YAML keys: ``blend_path``, ``output_dir`` (both made absolute), ``path_vars``, ``sample``, ``force``,
    ``workers.count`` (``workers``), ``workers.cpus_per_task``, ``workers.engine`` (``engine``, see
    :func:`choose_engine`), ``workers.in_process_max_bytes``, ``run.env.cpus`` (``ray_cpus``),
    ``remote.cache_dir`` and ``summary.progress_interval_s``. A stage supplies :meth:`reader` (its typed
    config reader, which knows the stage's keys), :meth:`read_own` (its own keys) and, where keys
    depend on each other, :meth:`check`; :data:`INPUT_KEYS` names its input files besides the blend's
    datasets and :data:`OUTPUT_NAMES` what it writes in a version folder besides
    :data:`nemotron.data.outputs.OWNED_NAMES` (see :func:`check_inputs`).
    """

    #: ``(config key, settings attribute)`` of each input file or folder the stage reads (the blend's
    #: datasets aside); a value that names no local path (a hub id) is not checked.
    INPUT_KEYS: ClassVar[tuple[tuple[str, str], ...]] = (("blend_path", "blend_path"),)
    #: The stage's name (``data-prep-sft``): which blend dataset keys it reads (:data:`nemotron.data.blend.STAGE_DATASET_KEYS`).
    STAGE: ClassVar[str | None] = None
    #: Names a version folder holds that the stage writes and deletes on a rebuild, besides OWNED_NAMES.
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ()
    #: Whether one task uses several workers' CPUs inside one process (pretraining: the tokenizer's Rust
    #: thread pool); where not (SFT, RL: Python work), ``workers.engine=auto`` runs in process only for one worker.
    THREADED_TASKS: ClassVar[bool] = False

    blend_path: str
    output_dir: str
    path_vars: dict[str, Any] = field(default_factory=dict)
    sample: int | None = None
    force: bool = False
    workers: int | None = None
    cpus_per_task: int = 1
    ray_cpus: int | None = None
    engine: str = "auto"
    in_process_max_bytes: int = IN_PROCESS_MAX_BYTES
    remote_cache_dir: str = "~/.cache/nemotron/hf-datasets"
    progress_interval_s: float = 10.0

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Self:
        """Build from the compiled stage config (the dict ``run.py`` loads).

        Order (the first bad key read is the one reported): :meth:`read_head`, the stage's
        :meth:`read_own`, :meth:`read_workers`, then unknown keys are refused, then :meth:`check`.

        Raises:
            ConfigError: a key is unknown (with a did-you-mean), has the wrong type, or is out of range.
        """
        c = cls.reader(cfg)
        s = cls.read_head(c)
        s.read_own(c)
        s.read_workers(c)
        c.check_unknown()
        s.check()
        s.flat = flat_settings(cfg)  # what plan_basis keeps in plan.json, for naming a changed key later
        return s

    @classmethod
    def reader(cls, cfg: dict[str, Any]) -> Reader:
        """The stage's typed config reader over ``cfg``: a :class:`Reader` that knows the stage's keys.

        Raises:
            ConfigError: ``cfg`` is not a mapping.
        """
        raise NotImplementedError(f"{cls.__name__} must define reader()")

    def read_own(self, c: Reader) -> None:
        """Read the stage's own keys with ``c`` (none here); raises ConfigError naming a bad key."""

    def check(self) -> None:
        """Checks across keys, once all are read (none here); raises ConfigError."""

    @classmethod
    def read_head(cls, c: Reader) -> Self:
        """New settings from ``blend_path``, ``output_dir``, ``path_vars``, ``sample`` and ``force``.

        ``c`` is the stage's config reader (:class:`Reader`).

        Raises:
            ConfigError: a key is missing, has the wrong type or is out of range, or ``blend_path`` is a
                folder (the message names the key).
        """
        # absolute: outputs (blend.json, manifests) must name paths that resolve from any working directory
        s = cls(blend_path=os.path.abspath(c.str("blend_path")), output_dir=os.path.abspath(c.str("output_dir")))
        unsafe = outputs.output_dir_problem(s.output_dir)
        if unsafe is not None:
            raise ConfigError(f"output_dir={s.output_dir}: {unsafe}",
                              "a folder for this output (it is created), e.g. ./output/<stage>/<name>")
        if os.path.isdir(s.blend_path):
            raise ConfigError(f"blend_path={s.blend_path}: is a folder, not a blend file",
                              "point blend_path at the blend's JSON file")
        s.path_vars = c.dict("path_vars", {})
        s.sample = c.int("sample", None, minimum=1)
        s.force = c.bool("force", False)
        return s

    def read_workers(self, c: Reader) -> None:
        """Read ``workers.*``, ``run.env.cpus``, ``remote.cache_dir`` and ``summary.progress_interval_s``.

        Raises:
            ConfigError: a key has the wrong type or is out of range (the message names it).
        """
        self.workers = c.int("workers.count", None, minimum=1)
        self.cpus_per_task = c.int("workers.cpus_per_task", 1, minimum=1)
        self.engine = c.choice("workers.engine", ENGINES, "auto")
        self.in_process_max_bytes = c.int("workers.in_process_max_bytes", IN_PROCESS_MAX_BYTES, minimum=0)
        self.ray_cpus = c.int("run.env.cpus", None, minimum=1)
        self.remote_cache_dir = c.str("remote.cache_dir", self.remote_cache_dir)
        self.progress_interval_s = c.float("summary.progress_interval_s", 10.0, minimum=0) or 10.0


def stage_main(cfg: dict[str, Any], settings_cls: Any, prepare: Callable[[Any], dict[str, Any]],
               artifacts: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """A stage's ``main``: check the config, prepare the data under the writer lock, record the outputs.

    Args:
        cfg: the compiled stage config (the dict ``run.py`` loads).
        settings_cls: the stage's ``Settings`` (its ``from_config`` checks ``cfg``).
        prepare: the stage's ``prepare(settings)``; returns the manifest.
        artifacts: the manifest → ``{artifact kind: fields}`` for
            :func:`nemotron.artifacts.write_outputs` (what later stages read).

    Returns:
        The exit code: 0 done; after a Ctrl-C (SIGINT) :func:`interrupted_resumably`'s code.

    Raises:
        ConfigError: a config, blend or input problem found before any work (exit 2), among them an
            input that the run would write or delete (:func:`check_inputs`).
        RuntimeFailure: a failure while working, or another run writing the same folder (exit 1).
        StopRequested: SIGTERM (the entry turns it into exit 75, resumable).
    """
    import signal
    import threading

    from nemotron.errors import StopRequested, request_stop, stop_signal

    s = settings_cls.from_config(cfg)
    _WRITING.pop("vdir", None)  # no version folder chosen yet: an interrupt now has kept nothing (kept_note)
    # SIGTERM (kill, timeout, scancel) at any point of the work, the input checks, planning and Ray's start
    # included, stops it as Ctrl-C does: every file is written whole or not at all (a temporary name, then a
    # rename), so an interrupt anywhere leaves a folder the rerun resumes. The Ray session and the in-process
    # engine set the same handler again where Ray replaced it.
    ours = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, request_stop) if ours else None
    try:
        try:
            blend = stage_blend(s)
            _say_planning(s, blend)  # the first line, before the seconds of reading inputs
            hold_point("planning")  # tests: an interrupt before any work
            for problem in check_inputs(s, blend) + unreadable_inputs(blend):
                raise problem  # before the lock file: an input is never touched; an unreadable one before any work
            with outputs.writer_lock(s.output_dir):  # one writing run per output folder
                manifest = prepare(s)
            _WRITING.setdefault("vdir", Path(manifest["path"]))  # complete: an interrupt from here on kept all of it
            hold_point("output-complete")  # tests: an interrupt after the output is complete, before it is recorded
            from nemotron.config.artifacts import write_outputs

            write_outputs(artifacts(manifest))
        except KeyboardInterrupt as exc:
            write_interrupt_note(kept_note(s))
            if isinstance(exc, StopRequested) or stop_signal() is not None:
                raise  # SIGTERM: the entry's own "stopped by SIGTERM ... resume" line and exit 75
            return interrupted_resumably(s)
    finally:
        if ours:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    return 0


#: The output version folder the stage in this process writes (set by :func:`drive` once it is chosen): what
#: :func:`kept_note` counts after an interrupt.
_WRITING: dict[str, Path] = {}

#: Config sections and keys that say where and how fast a run works, not what it makes: left out of
#: :func:`flat_settings` (a difference there never changes the data, so a refusal never names one); so are
#: cache folders (``*cache_dir``).
_NOT_DATA = ("output_dir", "force", "run", "workers", "backend", "shards")


def flat_settings(cfg: dict[str, Any]) -> dict[str, str]:
    """The stage config as ``{"dotted.key": "value as text"}`` (``chat.reasoning: auto``), without the keys of
    :data:`_NOT_DATA` and private keys (``_...``): what :func:`plan_changes` compares."""
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if not str(k).startswith("_") and "cache_dir" not in str(k) and not (not prefix and k in _NOT_DATA):
                    walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = json.dumps(value, sort_keys=True, default=str) if isinstance(value, (list, dict)) \
                else str(value)

    walk("", cfg)
    return out


def plan_basis(s: Any, shards: list[dict[str, Any]]) -> dict[str, Any]:
    """What a plan was made from, kept in ``plan.json`` as ``"basis"``: ``{"config": flat_settings of the
    stage's config (``s.flat``, set by ``from_config``), "inputs": [[file, size in bytes, mtime in ns], ...]}`` (the files the shards' pieces read,
    :func:`input_stamps`); :func:`plan_changes` names the differences when a rerun's plan key differs."""
    files = sorted({p["file"] for sh in shards for p in sh.get("pieces", ()) if isinstance(p, dict) and p.get("file")})
    return {"config": dict(getattr(s, "flat", None) or {}), "inputs": input_stamps(files)}


def plan_changes(old: dict[str, Any] | None, new: dict[str, Any] | None, limit: int = 4) -> str:
    """The differences between two :func:`plan_basis` records, as one phrase (``chat.reasoning: auto -> off;
    input part0.jsonl changed (size 100 -> 120 bytes)``; at most ``limit`` named, then ``and N more``), or ``""``
    when either is missing or none is found (a change the config and input stamps do not show: the tokenizer
    file's or the chat template's contents)."""
    if not old or not new:
        return ""
    said: list[str] = []
    before, now = old.get("config") or {}, new.get("config") or {}
    for key in sorted(set(before) | set(now)):
        if before.get(key) != now.get(key):
            said.append(f"{key}: {before.get(key, '(unset)')} -> {now.get(key, '(unset)')}")
    stamps_old = {f[0]: f[1:] for f in old.get("inputs") or [] if f}
    stamps_new = {f[0]: f[1:] for f in new.get("inputs") or [] if f}
    for f in sorted(set(stamps_old) | set(stamps_new)):
        name = os.path.basename(f) or f
        if f not in stamps_new:
            said.append(f"input {name} no longer read ({f})")
        elif f not in stamps_old:
            said.append(f"input {name} new ({f})")
        elif stamps_old[f] != stamps_new[f]:
            (size0, _), (size1, _) = stamps_old[f], stamps_new[f]
            what = f"size {size0} -> {size1} bytes" if size0 != size1 else "modified since"
            said.append(f"input {name} changed ({what})")
    if len(said) > limit:
        said = said[:limit] + [f"and {len(said) - limit} more"]
    return "; ".join(said)


def version_state(folder: Path) -> str:
    """A version folder in words: ``finished`` (complete manifest), ``an interrupted run (5 of 22 shards)`` (a
    plan and receipts but no complete manifest), ``an interrupted run (no shard finished)``."""
    manifest = read_json(folder / outputs.MANIFEST)
    if manifest and manifest.get("complete"):
        return "finished"
    plan = read_json(folder / outputs.PLAN) or {}
    total = len(plan.get("shards") or [])
    done = sum(1 for _ in folder.rglob("*" + outputs.RECEIPT_SUFFIX)) if folder.is_dir() else 0
    if not done:
        return "an interrupted run (no shard finished)"
    return f"an interrupted run ({done} of {count(total, 'shards')})" if total else \
        f"an interrupted run ({count(done, 'finished shards')})"


def _say_planning(s: Any, blend: Blend) -> None:
    """The stage's first line (stdout), said before the seconds of checking and planning the inputs:
    ``planning: reading 3 datasets of blend.json into OUTPUT_DIR (input checks, shard plan) ...``."""
    from nemotron.data.progress import console

    console().print(f"planning: reading {count(len(blend.datasets), 'datasets')} of {blend.path} into {s.output_dir} "
                    "(input checks, shard plan) ...")


def kept_note(s: Any) -> str:
    """One line saying what an interrupted run kept: the finished pieces of work (shards, SFT windows: each has its
    receipt, ``*.receipt.json``) in the version folder it was writing, or that none was finished yet, so the next
    run starts from the beginning, or that every shard of its plan was finished (a rerun redoes nothing, it only
    writes the manifest and records the output; a cancel of a resumed run that found them all done had said "run the
    same command again to resume"); before a version folder was chosen (the input checks, the start of planning),
    ``interrupted before any work; nothing kept ...``; after the version folder's ``manifest.json`` (written last)
    says it is complete, ``interrupted after its output was complete (VDIR), before it was recorded ...``: the rerun
    finds it up to date and records it."""
    if "vdir" not in _WRITING:
        return (f"interrupted before any work; nothing kept (output_dir={s.output_dir} untouched), so the next run "
                "starts from the beginning")
    vdir = _WRITING.get("vdir")
    if vdir is not None and version_state(vdir) == "finished":  # its manifest.json, written last, says complete
        return (f"interrupted after its output was complete ({vdir}), before it was recorded as an artifact: run the "
                "same command again to record it (the output is up to date, nothing is redone)")
    done = sum(1 for _ in vdir.rglob("*" + outputs.RECEIPT_SUFFIX)) if vdir is not None and vdir.is_dir() else 0
    if not done:
        return (f"interrupted before any shard was finished; nothing of it is kept in {s.output_dir}, so the next run "
                "starts from the beginning")
    manifest = read_json(vdir / outputs.MANIFEST) or {}
    total = len((read_json(vdir / outputs.PLAN) or {}).get("shards") or [])
    if manifest.get("complete") or (total and done >= total):  # nothing was left: a rerun redoes no shard
        if manifest.get("complete"):
            return (f"interrupted after its output was complete ({vdir}, {count(done, 'shards')}): nothing is left "
                    "to resume; the same command run again only records it")
        return (f"interrupted after every shard was finished ({count(done, 'shards')} with their receipts in {vdir}): "
                "nothing is left to resume; the same command run again redoes no shard, it only writes the output's "
                "last files (manifest.json) from them and records it")
    return (f"interrupted; {count(done, 'finished shards')} (with their receipts) kept in {vdir}: run the same command "
            "again to resume from there")


def write_interrupt_note(note: str) -> None:
    """Leave ``note`` in ``$NEMOTRON_RUN_DIR/interrupted.txt`` (:data:`nemotron.errors.INTERRUPT_NOTE`) for the CLI
    that started this process (nothing when there is no run folder or it cannot be written)."""
    from nemotron.errors import INTERRUPT_NOTE

    folder = os.environ.get("NEMOTRON_RUN_DIR")
    if folder:
        with contextlib.suppress(OSError):
            (Path(folder) / INTERRUPT_NOTE).write_text(note + "\n", encoding="utf-8")


def interrupted_resumably(s: Any) -> int:
    """After a Ctrl-C: say that the finished work is kept and that the same command resumes it.

    Every finished shard (and SFT window) keeps its receipt, so a rerun with the same config redoes only
    what was in flight. When the CLI started this process (:data:`nemotron.entry.INTERRUPT_REPORTED_BY_PARENT`),
    the exit code is the resumable 75 and the CLI prints the one line (``interrupted: ... run the same command
    again to resume``, its own exit 130); run directly (``python run.py --config ...``) this prints
    ``<stage>: interrupted; ... run the same command again to resume`` on stderr and returns 130.
    """
    import sys

    from nemotron.errors import EXIT_INTERRUPTED, INTERRUPT_REPORTED_BY_PARENT, RESUMABLE

    if os.environ.get(INTERRUPT_REPORTED_BY_PARENT) == "1":
        return RESUMABLE
    config = f"python {sys.argv[0]} {' '.join(sys.argv[1:])}".strip() if sys.argv and sys.argv[0] else "the same command"
    print(f"{STAGE_TITLES.get(type(s).__module__, 'data prep')}: {kept_note(s)} ({config})", file=sys.stderr,
          flush=True)
    return EXIT_INTERRUPTED


#: The stage title of each stage module, for messages printed by the driver itself.
STAGE_TITLES = {"nemotron.data.pretrain": "ultra3 data prep pretrain", "nemotron.data.sft": "ultra3 data prep sft",
                "nemotron.data.rl": "ultra3 data prep rl"}


def stage_blend(s: Any) -> Blend:
    """The stage's input blend (:func:`nemotron.data.blend.load_blend` of ``s.blend_path`` with its
    ``path_vars`` and, where the stage has one, its ``on_bad.bad_weight`` policy), checked in one pass
    with the local paths: under the stage's ``empty_glob=fail`` (``on_bad`` or ``policies``), a
    dataset that is not optional and whose path matches no file is one more problem of the blend.

    Raises:
        ConfigError: the blend cannot be read; BlendProblems: every problem of the blend at once (see
            :func:`~nemotron.data.blend.load_blend`).
    """
    from nemotron.data.sources import FORMATS, expand, is_remote

    on_bad = getattr(s, "on_bad", None) or {}
    section = "on_bad" if "empty_glob" in on_bad else "policies"
    policy = (on_bad if section == "on_bad" else getattr(s, "policies", None) or {}).get("empty_glob", "fail")

    def matches_files(spec: DatasetSpec) -> str | None:
        if spec.optional or policy != "fail" or is_remote(spec.path):
            return None
        try:
            found = expand(spec.path, exclude=list(spec.exclude), fmt=spec.format if spec.format in FORMATS else None)
        except ConfigError as exc:
            return exc.message
        return None if found else unmatched_message(s.blend_path, spec)

    return load_blend(s.blend_path, path_vars=s.path_vars, bad_weight=on_bad.get("bad_weight", "fail"),
                      check=matches_files, stage=getattr(s, "STAGE", None), policy_section=section)


def check_inputs(s: Any, blend: Blend) -> list[ConfigError]:
    """Every input the run would write, replace or delete, one ConfigError each (empty: none).

    Inputs: the files and folders of the stage's :data:`StageSettings.INPUT_KEYS` (``blend_path``,
    ``tokenizer.name``, ``chat.template``) and every local file each dataset of ``blend`` names.
    An input collides when it is (or lies in) a path the stage writes under ``output_dir``
    (:func:`nemotron.data.outputs.written_path`: the lock file, a version folder ``v<N>``, or
    ``blend.json``, ``manifest.json``, ``plan.json``, ``data/``, ``tokenizer/`` and the stage's
    :data:`StageSettings.OUTPUT_NAMES` in a version folder), or when a dataset's path is a folder
    holding ``output_dir`` (the stage's outputs would become its inputs). Messages name the key (or
    the blend line), the path and ``output_dir``. Only reads the file system.
    """
    from nemotron.data.sources import FORMATS, expand, is_remote

    names = type(s).OUTPUT_NAMES
    out = s.output_dir
    hint = "move the input out of the output folder, or choose another output_dir"
    problems = []
    for key, attr in type(s).INPUT_KEYS:
        value = getattr(s, attr, None)
        path = os.path.expanduser(value) if isinstance(value, str) and value else None
        what = outputs.written_path(path, out, names) if path and os.path.exists(path) else None
        if what is not None:
            problems.append(ConfigError(f"{key}={value}: the run writes {what} in output_dir={out}, "
                                        "which would overwrite or delete this input", hint))
    for spec in blend.datasets:
        if is_remote(spec.path):
            continue
        where = f"{blend.path}:{spec.line}: datasets ({spec.name})"
        folder = os.path.expanduser(spec.path)
        if os.path.isdir(folder) and (os.path.realpath(out) + os.sep).startswith(os.path.join(os.path.realpath(folder), "")):
            problems.append(ConfigError(f"{where}: path {spec.path!r} is a folder holding output_dir={out}; "
                                        "the run's own outputs would become its inputs",
                                        "choose an output_dir outside the dataset's folder"))
            continue
        fmt = spec.format if spec.format in FORMATS else None  # a record form (sft, rl) is no file format
        for f in expand(spec.path, exclude=list(spec.exclude), fmt=fmt):
            what = outputs.written_path(f, out, names)
            if what is not None:
                problems.append(ConfigError(f"{where}: input {f}: the run writes {what} in output_dir={out}, "
                                            "which would overwrite or delete this input", hint))
                break
    return problems


def unreadable_inputs(blend: Blend) -> list[ConfigError]:
    """Every local input file of ``blend`` that is not what its format says (:func:`nemotron.data.sources.unreadable`:
    a ``.parquet`` that is not Parquet or is cut short, a ``.jsonl.gz`` that is not gzip), one ConfigError each
    naming the blend line, the dataset and the file: refused before any work (exit 2) by the run
    (:func:`stage_main`) and the dry run alike (``nemotron.validation.data``), where it failed in the work (exit 1)
    before. Remote datasets are the run's to fetch; a path that matches nothing is another check's."""
    from nemotron.data.sources import FORMATS, detect_format, expand, is_remote, unreadable

    problems = []
    for spec in blend.datasets:
        if is_remote(spec.path):
            continue
        fmt = spec.format if spec.format in FORMATS else None  # a record form (sft, rl) is no file format
        try:
            files = expand(spec.path, exclude=list(spec.exclude), fmt=fmt)
        except ConfigError:
            continue
        for f in files:
            bad = unreadable(f, detect_format(f, fmt))
            if bad is not None:
                problems.append(ConfigError(f"{blend.path}:{spec.line}: datasets ({spec.name}): {bad.message}",
                                            bad.hint))
    return problems


@dataclass
class Run:
    """One run of a stage: its settings, the output version it writes and how it reports.

    ``why`` is :func:`nemotron.data.outputs.select_version`'s reason (``"rebuild"``: the version is
    cleared first); ``session`` is the Ray session started while planning (``None``: started when
    work needs it, see :func:`ray_workers`); ``say`` prints a console line (nothing when ``quiet``);
    ``t_start`` is the :func:`time.monotonic` time the run began; ``engine`` (``ray`` or ``in_process``) and
    ``engine_reason`` are :func:`choose_engine`'s. With ``reuse_only`` the version is
    only ever reported up to date, never written (an older version checked by :func:`drive`).
    """

    s: Any
    version: int
    vdir: Path
    why: str
    say: Callable[..., Any]
    quiet: bool
    live_progress: bool | None
    t_start: float
    session: dict[str, Any] | None = None
    reuse_only: bool = False
    engine: str = "ray"
    engine_reason: str = ""


class PlanMismatch(ConfigError):
    """A version folder holds data prepared from other inputs or settings (see :func:`reuse_or_reset`)."""


def drive(s: Any, plan: Callable[[Any, Blend, Path], P], execute: Callable[[Run, Blend, P], dict[str, Any]], *,
          live_progress: bool | None, quiet: bool, load: Callable[[Any, Any], Blend] | None = None,
          overlap_ray: bool = True) -> dict[str, Any]:
    """Run a stage: load the blend, choose the output version, plan, then ``execute``; returns its manifest.

    With ``overlap_ray``, a local Ray starts while ``plan(s, blend, vdir)`` runs in a thread (both only
    read inputs, so Ray's seconds of start-up overlap the planning), unless the output looks finished
    (a complete manifest and no ``force``): then only the plan runs, and ``execute`` finds
    ``run.session`` ``None``. Without it the plan runs alone and the stage starts Ray when it has work.
    The session stays up until ``execute`` returns.

    Without ``force``, when the latest version holds data of other inputs or settings
    (:class:`PlanMismatch`), the older complete versions are planned again, newest first: the first
    whose manifest has this plan's key is up to date and its manifest is returned (nothing is
    written); when none matches, the mismatch error names the versions present.

    Args:
        s: the stage's settings.
        plan: ``(s, blend, vdir) -> plan``; pure (reads the inputs, writes nothing).
        execute: ``(run, blend, plan) -> manifest``.
        live_progress: force the live progress bar on/off (``None``: on when stdout is a terminal).
        quiet: print nothing.
        load: ``(s, say) -> blend``; default :func:`nemotron.data.blend.load_blend` of ``s.blend_path``.
        overlap_ray: start Ray while planning (see above).

    Raises:
        ConfigError: from loading the blend or planning (the planning error wins over a Ray start-up error);
            PlanMismatch: no version of ``output_dir`` holds this plan's data and ``force`` is off.
        RuntimeFailure: from ``execute``.
    """
    from nemotron.data.progress import console

    say = (lambda *a: None) if quiet else console().print
    t_start = time.monotonic()
    blend = load(s, say) if load is not None else load_blend(
        s.blend_path, path_vars=s.path_vars, stage=getattr(s, "STAGE", None),
        policy_section="on_bad" if "empty_glob" in (getattr(s, "on_bad", None) or {}) else "policies")
    for message in blend.warnings:  # the dry run lists the same lines (nemotron.validation.data)
        say(f"warning: {message}")
    version, vdir, why = outputs.select_version(s.output_dir, s.force)
    _WRITING["vdir"] = vdir
    run = Run(s, version, vdir, why, say, quiet, live_progress, t_start)
    run.engine, run.engine_reason = choose_engine(s, blend)
    if run.engine == "in_process":  # the tokenizer's thread pool is sized when first used (planning uses it)
        os.environ.setdefault("RAYON_NUM_THREADS", str(in_process_threads(s)))
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    old = read_json(vdir / outputs.MANIFEST)
    with contextlib.ExitStack() as stack:
        # last on the way out, after the Ray session below has stopped: a worker that was still writing when the stage's
        # own clean-up ran (the session started during planning outlives the stage's work) leaves no temporary file
        from nemotron.data.files import remove_tmp_files

        stack.callback(remove_tmp_files, vdir)
        if overlap_ray and run.engine == "ray" and (s.force or not (old and old.get("complete"))):
            from concurrent.futures import ThreadPoolExecutor

            from nemotron.data.raypool import ray_session

            pool = stack.enter_context(ThreadPoolExecutor(max_workers=1))
            future = pool.submit(plan, s, blend, vdir)
            try:
                run.session = stack.enter_context(ray_session(s.ray_cpus))
            finally:
                planned = future.result()
        else:
            planned = plan(s, blend, vdir)
        try:
            return execute(run, blend, planned)
        except PlanMismatch as exc:
            return _older_version(run, blend, plan, execute, exc)


def in_process_workers(s: Any) -> int:
    """The workers of an in-process run: ``workers.count``, else ``run.env.cpus`` (else this machine's
    CPUs) over ``workers.cpus_per_task``, at least 1."""
    return s.workers or max((s.ray_cpus or os.cpu_count() or 1) // s.cpus_per_task, 1)


def in_process_threads(s: Any) -> int:
    """The tokenizer threads of an in-process run: its workers times ``workers.cpus_per_task``."""
    return in_process_workers(s) * s.cpus_per_task


def local_input_bytes(blend: Blend) -> int | None:
    """The bytes of every local file the blend's datasets name (``None`` when one is remote: size unknown)."""
    from nemotron.data.sources import FORMATS, expand, is_remote

    total = 0
    for spec in blend.datasets:
        if is_remote(spec.path):
            return None
        fmt = spec.format if spec.format in FORMATS else None
        with contextlib.suppress(ConfigError, OSError):
            total += sum(os.path.getsize(f) for f in expand(spec.path, exclude=list(spec.exclude), fmt=fmt))
    return total


def choose_engine(s: Any, blend: Blend) -> tuple[str, str]:
    """Where the run's tasks execute: ``("ray" | "in_process", why)``.

    ``workers.engine=ray`` or ``in_process`` is taken as given. ``auto`` (the default) runs the tasks in the
    driver process itself — the same task functions, one after another, the tokenizer's thread pool sized to
    the workers (:func:`in_process_threads`) — when all of these hold: no Ray is initialised in this process
    and ``RAY_ADDRESS`` is unset (a Ray would be started on this machine only for this run), the blend's local
    input is at most ``workers.in_process_max_bytes`` (:data:`IN_PROCESS_MAX_BYTES`), and one process can use
    the workers (the stage's :data:`StageSettings.THREADED_TASKS`, or one worker). Otherwise Ray, which
    scales past one machine. Outputs are the same bytes either way.
    """
    if s.engine != "auto":
        return s.engine, f"workers.engine={s.engine}"
    if os.environ.get("RAY_ADDRESS"):
        return "ray", "RAY_ADDRESS is set"
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return "ray", "Ray is initialised in this process"
    if not type(s).THREADED_TASKS and in_process_workers(s) > 1:
        return "ray", f"{in_process_workers(s)} workers of Python work need processes"
    size = local_input_bytes(blend)
    if size is None:
        return "ray", "remote input (size unknown)"
    if size > s.in_process_max_bytes:
        return "ray", f"input {size / 1e6:,.0f} MB > workers.in_process_max_bytes"
    return "in_process", f"input {size / 1e6:,.1f} MB <= workers.in_process_max_bytes ({s.in_process_max_bytes / 2**20:,.0f} MiB)"


def _older_version(run: Run, blend: Blend, plan: Callable[[Any, Blend, Path], P],
                   execute: Callable[[Run, Blend, P], dict[str, Any]], mismatch: PlanMismatch) -> dict[str, Any]:
    """The manifest of the newest older complete version of ``run.s.output_dir`` that holds this plan's
    data (re-planned for that folder; nothing is written); else ``mismatch``, naming the versions present.

    Raises:
        PlanMismatch: no version matches.
    """
    found = outputs.versions(run.s.output_dir)
    for n, folder in reversed(found):
        old = read_json(folder / outputs.MANIFEST)
        if folder == run.vdir or not (old and old.get("complete")):
            continue
        older = Run(run.s, n, folder, "existing", run.say, run.quiet, run.live_progress, run.t_start,
                    run.session, reuse_only=True, engine=run.engine, engine_reason=run.engine_reason)
        try:
            manifest = execute(older, blend, plan(run.s, blend, folder))
        except PlanMismatch:
            continue
        run.say(f"note: the latest version v{run.version} ({run.vdir}) holds other inputs or settings; "
                f"v{n} matches this run")
        return manifest
    present = ", ".join(f"v{n}" + (f" ({version_state(f)})" if version_state(f) != "finished" else "")
                        + (" (consumed)" if outputs.consumers(f) else "") for n, f in found)
    raise PlanMismatch(f"{mismatch.message}; no version matches this run (versions: {present})", mismatch.hint)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON document at ``path``, or ``None`` when it is missing or unreadable (never raises)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def reuse_or_reset(run: Run, plan_key: str, not_found: Iterable[str],
                   summary: Callable[[dict[str, Any]], None], *, hint: str = MISMATCH_HINT,
                   basis: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Check the version folder against this plan before any work; ``None`` means: go on and build.

    A ``rebuild`` run clears the folder's owned files (:func:`nemotron.data.outputs.clear_version`, with
    the stage's :data:`StageSettings.OUTPUT_NAMES`); a folder whose complete manifest has this
    ``plan_key`` is up to date: the warnings (one per ``not_found`` line: a dataset left out) and its summary are printed
    (unless quiet; its work line reads ``work: none (up to date)``, see :func:`work_line`) and the old
    manifest is returned (nothing is done). Otherwise the warnings are said, the folder is created and
    ``None`` returned; receipts decide what is redone. A complete folder whose files differ from their receipts or
    the manifest (:func:`nemotron.data.outputs.damaged_files`: truncated, deleted) is not up to date: a warning
    names them and the run goes on, redoing what they belong to. A first run (no plan, no manifest) into a folder
    that holds files the stage does not write (:func:`nemotron.data.outputs.foreign_files`) says so in
    one note; those files are never deleted.

    Raises:
        PlanMismatch: the folder's ``plan.json`` has another plan key and ``force`` is off (the message
            names both keys; ``hint`` says what to do), or ``run.reuse_only`` and the folder is not up
            to date with this plan.
        ConfigError: a rebuild would delete consumed output.
    """
    s, vdir = run.s, run.vdir
    old_plan = read_json(vdir / outputs.PLAN)
    old_manifest = read_json(vdir / outputs.MANIFEST)
    if old_plan is not None and old_plan.get("plan_key") != plan_key and not s.force:
        changes = plan_changes(old_plan.get("basis"), basis)
        held = version_state(vdir)
        held = "a finished run" if held == "finished" else held
        raise PlanMismatch(f"output_dir={vdir} holds {held} prepared from other inputs or settings: "
                           + (f"{changes}" if changes else
                              f"plan {old_plan.get('plan_key')}, now {plan_key} (the config and the inputs' sizes "
                              "and times are the same: a tokenizer or template file's contents changed)"), hint)
    current = bool(old_manifest and old_manifest.get("complete") and old_manifest.get("plan_key") == plan_key)
    damaged = outputs.damaged_files(vdir, old_manifest) if current else []
    if damaged and run.reuse_only:  # an older version with a damaged file is no match
        damaged, current = [], False
    if damaged:  # a finished output with a truncated or deleted file is not up to date: its shards are rebuilt
        current = False
        listed = "; ".join(damaged[:3]) + (f"; and {len(damaged) - 3} more" if len(damaged) > 3 else "")
        run.say(f"warning: output_dir={vdir} was finished (plan {plan_key}) but {count(len(damaged), 'files')} "
                f"changed since ({listed}): rebuilding what they belong to")
    if run.reuse_only and not current:
        raise PlanMismatch(f"output_dir={vdir} is not up to date with this plan ({plan_key})", hint)
    for line in not_found:  # a dataset left out (optional, or empty_glob=skip): said as the dry-run says it
        run.say(f"warning: {line}")
    if s.force and run.why != "rebuild" and run.version > 1:
        run.say(f"note: {run.why}: {vdir}")
    foreign = outputs.foreign_files(vdir, type(s).OUTPUT_NAMES) if run.why == "new" else []
    if foreign:
        listed = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        run.say(f"note: output_dir={vdir} already holds {len(foreign)} file(s) this stage does not write "
                f"({listed}); they are left alone (a force=true rebuild deletes only the stage's own files)")
    if run.why == "rebuild":
        outputs.clear_version(vdir, type(s).OUTPUT_NAMES)
    elif current:
        run.say(f"up to date: {vdir} (plan {plan_key}); nothing to do. Rerun with force=true to rebuild.")
        if not run.quiet:  # this run did no work: the summary says so, not the old run's work line
            summary({**old_manifest, "run": {**(old_manifest.get("run") or {}), "up_to_date": True}})
        return old_manifest
    vdir.mkdir(parents=True, exist_ok=True)
    return None


# --------------------------------------------------------------------------------------------------
# planning


def count(n: int, nouns: str) -> str:
    """``n`` with ``nouns`` (a plural: ``"shards"``, ``"final windows"``) in agreement: ``count(1, "shards")``
    is ``"1 shard"``, ``count(3, "shards")`` ``"3 shards"`` (thousands separated)."""
    return f"{n:,} {nouns[:-1] if n == 1 and nouns.endswith('s') else nouns}"


def unmatched(blend: Blend, spec: DatasetSpec, policy: str, section: str) -> str:
    """The note for a dataset whose path matches no file, when the run goes on without it.

    ``policy`` is the stage's ``<section>.empty_glob`` (``skip`` or ``fail``); an ``optional`` dataset
    is always left out.

    Raises:
        ConfigError: the dataset is not optional and the policy is ``fail`` (names the blend line).
    """
    message = unmatched_message(blend.path, spec)
    if spec.optional:
        return optional_missing(blend.path, spec) + relative_note(spec)
    if policy == "skip":
        return f"{message}; dataset skipped ({section}.empty_glob=skip)"
    raise ConfigError(message, f"fix the path, mark the dataset optional, or set {section}.empty_glob=skip")


def unmatched_message(blend_path: str, spec: DatasetSpec) -> str:
    """``<blend>:<line>: datasets (<name>): path '<path>' matches no file``; for a relative path, plus
    where it was looked for (:func:`relative_note`)."""
    return f"{blend_path}:{spec.line}: datasets ({spec.name}): path {spec.path!r} matches no file{relative_note(spec)}"


def optional_missing(blend_path: str, spec: DatasetSpec) -> str:
    """The warning for an ``optional`` dataset whose path matches no file (the run goes on without it):
    ``<blend>:<line>: datasets (<name>): optional dataset left out: path '<path>' matches no file ...``.
    The dry-run shows it as a warning and the run prints it before any work (one text for both)."""
    return (f"{blend_path}:{spec.line}: datasets ({spec.name}): optional dataset left out: path {spec.path!r} "
            "matches no file")


def relative_note(spec: DatasetSpec) -> str:
    """Where a local dataset path that matches nothing was looked for, and where it would match.

    The rule (documented in the data prep docs): a dataset path — after ``{placeholder}`` substitution from
    ``path_vars`` — that is relative is taken from the directory the command runs in, like any path given on
    a command line (config values such as ``path_vars.shared_data: ../shared/data`` are made absolute from
    there when the config is compiled). So the same command run from another folder finds other files. The
    note says `` (relative paths are taken from the working directory, <cwd>)`` for a relative path, and —
    where the path, taken relative to the working directory, does match from the project checkout instead
    (a stage config's ``../shared`` path run from another folder) — that folder and what to do. Empty for a
    remote path, or an absolute one that matches from nowhere else.
    """
    from nemotron.data.sources import expand, is_remote

    path = os.path.expanduser(spec.path)
    if is_remote(path):
        return ""
    cwd = os.getcwd()
    note = "" if os.path.isabs(path) else f" (relative paths are taken from the working directory, {cwd})"
    from nemotron.config.paths import repo_root

    root = repo_root()
    if root is None or os.path.realpath(root) == os.path.realpath(cwd):
        return note
    rel = os.path.relpath(os.path.join(cwd, path), cwd)
    there = os.path.normpath(os.path.join(root, rel))
    with contextlib.suppress(ConfigError, OSError):
        if expand(there, exclude=list(spec.exclude)):
            note += (f"; run from the project folder {root} it matches {there}: run the command there, or give "
                     "that path (or its path_vars value) as an absolute path")
    return note


def require_datasets(blend: Blend, datasets: list[Any]) -> None:
    """Raises ConfigError (naming the blend file) when no dataset of the blend has an input file."""
    if not datasets:
        raise ConfigError(f"{blend.path}: no dataset has any input file")


def input_stamps(files: Iterable[str]) -> list[list[Any]]:
    """``[file, size in bytes, mtime in ns]`` per input file, for a plan key (``None``s for ``hf://`` files)."""
    stamps = []
    for f in files:
        st = os.stat(f) if not f.startswith("hf://") else None
        stamps.append([f, st.st_size if st else None, st.st_mtime_ns if st else None])
    return stamps


def copy_tokenizer(folder: Path, info: Any) -> None:
    """Put the tokenizer file the data is made with at ``folder/tokenizer.json`` (atomic rename).

    ``info`` is a :class:`nemotron.data.tokenizer.TokenizerInfo` (``json_path``, ``file_sha256``); a
    file with the same SHA-256 already there is kept.
    """
    target = folder / "tokenizer.json"
    if not target.is_file() or sha256_file(target) != info.file_sha256:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"tokenizer.json.tmp-{os.getpid()}"
        shutil.copyfile(info.json_path, tmp)
        os.replace(tmp, target)


# --------------------------------------------------------------------------------------------------
# Ray work


def shard_pieces(shard: dict[str, Any], remote_cache_dir: str) -> Iterator[tuple[str, Any]]:
    """A shard's pieces in plan order as ``(label, piece)`` (in a worker).

    ``label`` is the file as planned (what record messages name); ``piece`` is the
    :class:`nemotron.data.sources.Piece` to read, on a local copy for an ``hf://`` file (fetched into
    ``remote_cache_dir`` when its turn comes).

    Raises:
        RuntimeFailure: a remote file cannot be fetched (from :func:`nemotron.data.sources.fetch_remote`).
    """
    from nemotron.data.sources import Piece, fetch_remote, is_remote

    for pd in shard["pieces"]:
        piece = Piece.from_dict(pd)
        label = piece.file
        if is_remote(piece.file):
            piece = Piece(fetch_remote(piece.file, remote_cache_dir), piece.fmt, piece.start, piece.stop,
                          piece.line, piece.est_bytes)
        yield label, piece


def split_done(items: list[dict[str, Any]], say: Callable[..., Any] | None = None,
               noun: str = "shards") -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """``(receipts by item id, items still to run)``: an item counts as done when its receipt matches.

    An item names its receipt by ``receipt_prefix`` (else ``prefix``) and ``key``
    (:func:`nemotron.data.outputs.read_receipt`). With ``say``, a resumed run (some items done, some
    not) is reported as ``resuming: N of M <noun> already done``.
    """
    receipts: dict[str, dict[str, Any]] = {}
    todo = []
    for it in items:
        rec = outputs.read_receipt(it.get("receipt_prefix", it.get("prefix")), it["key"])
        if rec is not None:
            receipts[it["id"]] = rec
        else:
            todo.append(it)
    if say is not None and receipts and todo:
        say(f"resuming: {len(receipts)} of {count(len(items), noun)} already done")
    return receipts, todo


@contextlib.contextmanager
def ray_workers(run: Run) -> Iterator[tuple[int, dict[str, Any]]]:
    """The run's workers: its Ray session (started here, and stopped on exit, when planning did not start
    one), or none at all for an in-process run (``run.engine``, :func:`choose_engine`).

    Yields ``(workers, info)``: ``workers`` = ``workers.count``, else the session's CPUs (in process: this
    machine's, or ``run.env.cpus``) over ``workers.cpus_per_task`` (at least 1); ``info`` = ``{"engine",
    "engine_reason", "workers", "ray" (address, or None in process), "ray_cpus"}`` (in process also
    ``"threads"``) for the manifest's ``run`` record.
    """
    if run.engine == "in_process":
        import signal
        import threading

        from nemotron.errors import request_stop

        workers = in_process_workers(run.s)
        # as a Ray session does: SIGTERM (kill, timeout, scancel) stops the run cleanly, exit 75 (resumable)
        ours = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, request_stop) if ours else None
        try:
            yield workers, {"engine": "in_process", "engine_reason": run.engine_reason, "workers": workers,
                            "threads": workers * run.s.cpus_per_task, "ray": None, "ray_cpus": None}
        finally:
            if ours:
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        return
    with contextlib.ExitStack() as stack:
        session = run.session
        if session is None:
            from nemotron.data.raypool import ray_session

            session = stack.enter_context(ray_session(run.s.ray_cpus))
        workers = run.s.workers or max(session["cpus"] // run.s.cpus_per_task, 1)
        yield workers, {"engine": "ray", "engine_reason": run.engine_reason, "workers": workers,
                        "ray": session["address"], "ray_cpus": session["cpus"]}


def engine_detail(info: dict[str, Any]) -> str:
    """The stream header's note of where tasks run: `` (Ray: local, 2 CPUs)`` or `` (in this process, 2
    tokenizer threads: input 5.2 MB <= workers.in_process_max_bytes (1,024 MiB))``."""
    if info.get("engine") == "in_process":
        return f" (in this process, no Ray, {count(info['threads'], 'threads')}: {info['engine_reason']})"
    return f" (Ray: {info['ray']}, {count(info['ray_cpus'], 'CPUs')})"


def _tokens(rec: dict[str, Any]) -> int:
    tokens = rec.get("tokens", 0)
    return sum(tokens.values()) if isinstance(tokens, dict) else tokens


def _docs(rec: dict[str, Any]) -> int:
    for key in ("documents", "conversations", "rows"):
        if key in rec:
            return rec[key]
    return 0


def stream(run: Run, fn: Callable[..., Any], todo: list[dict[str, Any]], opts: dict[str, Any], workers: int,
           receipts: dict[str, dict[str, Any]], *, title: str, verb: str, noun: str,
           units: Callable[[dict[str, Any]], float], detail: str = "", progress_key: str = "units",
           item: str = "docs", count_tokens: bool = True) -> None:
    """Run ``fn(item, opts)`` as Ray streaming tasks over ``todo``, largest first, with a progress bar.

    ``fn`` yields ``("progress", {progress_key, "tokens", "docs"})`` any number of times and
    ``("done", receipt)`` last; each receipt goes into ``receipts`` under the item's ``id``.
    ``units(item)`` (> 0) is the item's share of the bar; a receipt's tokens are its ``tokens`` (an
    int or a per-split dict) and its documents its ``documents``, ``conversations`` or ``rows``. Prints
    ``<verb> N <noun> on W workers<detail>`` first unless quiet. ``item`` and ``count_tokens`` are the
    bar's (:class:`nemotron.data.progress.Progress`): what documents are called, whether tokens are shown.

    In an in-process run (``run.engine``) the driver runs ``fn`` itself, item after item in the same order,
    with ``opts["cpus_per_task"]`` raised to the run's threads (:func:`in_process_threads`): the same
    messages reach the same callbacks.

    Raises:
        NemotronError: re-raised from a task; RuntimeFailure: a task failed otherwise.
    """
    from nemotron.data.progress import Progress

    if not run.quiet:
        print(f"{verb} {count(len(todo), noun)} on {count(workers, 'workers')}{detail}", flush=True)
    order = sorted(todo, key=lambda it: (-units(it), it["id"]))
    seen: dict[str, dict[str, Any]] = {}
    zero = {progress_key: 0, "tokens": 0, "docs": 0}
    with Progress(sum(units(it) for it in todo), title, interval_s=run.s.progress_interval_s,
                  live=False if run.quiet and run.live_progress is None else run.live_progress, item=item,
                  count_tokens=count_tokens) as bar:
        if run.quiet:
            bar.interval_s = math.inf

        def on_progress(it: dict[str, Any], p: dict[str, Any]) -> None:
            last = seen.get(it["id"], zero)
            seen[it["id"]] = p
            bar.advance(min(p[progress_key], units(it)) - min(last[progress_key], units(it)),
                        tokens=p["tokens"] - last["tokens"], docs=p["docs"] - last["docs"])

        def on_done(it: dict[str, Any], rec: dict[str, Any]) -> None:
            last = seen.pop(it["id"], zero)
            receipts[it["id"]] = rec
            bar.advance(units(it) - min(last[progress_key], units(it)), tokens=_tokens(rec) - last["tokens"],
                        docs=_docs(rec) - last["docs"])

        if run.engine == "in_process":
            run_in_process(fn, order, {**opts, "cpus_per_task": in_process_threads(run.s)}, on_progress, on_done)
            return
        import ray

        from nemotron.data.raypool import run_streaming

        run_streaming(ray.remote(fn), order, args=(opts,), max_in_flight=workers, num_cpus=run.s.cpus_per_task,
                      on_progress=on_progress, on_done=on_done)


def run_in_process(fn: Callable[..., Any], items: list[Any], opts: dict[str, Any],
                   on_progress: Callable[[Any, Any], None], on_done: Callable[[Any, Any], None]) -> None:
    """Run the streaming task ``fn(item, opts)`` for each item in this process, in order, handing its
    ``("progress", p)`` and ``("done", receipt)`` messages to the callbacks (as :func:`nemotron.data.raypool.run_streaming`
    does for Ray tasks).

    Raises:
        NemotronError: from a task, as raised; RuntimeFailure: any other exception of a task (``task for
            <id> failed: <type>: <message>``, as a Ray task's failure reads).
    """
    from nemotron.errors import NemotronError, RuntimeFailure

    for item in items:
        try:
            for kind, payload in fn(item, opts):
                (on_progress if kind == "progress" else on_done)(item, payload)
        except NemotronError:
            raise
        except Exception as exc:
            label = item.get("id", item) if isinstance(item, dict) else item
            text = str(exc).splitlines()[-1] if str(exc) else ""
            raise RuntimeFailure(f"task for {label} failed: {type(exc).__name__}: {text}") from None


# --------------------------------------------------------------------------------------------------
# manifest and summary


def manifest_head(run: Run, stage: str, kind: str, fmt: str, plan_key: str, **extra: Any) -> dict[str, Any]:
    """The fields every manifest starts with, in order: stage, kind, format, ``complete`` (true),
    version, path, plan_key, then ``extra`` (in the order given), then ``created`` (UTC, ISO 8601)."""
    return {"stage": stage, "kind": kind, "format": fmt, "complete": True, "version": run.version,
            "path": str(run.vdir), "plan_key": plan_key, **extra,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def blend_record(blend: Blend, not_found: list[str], **extra: Any) -> dict[str, Any]:
    """The manifest's ``blend`` record: path, name, the file's SHA-256, ``extra``, then ``not_found``."""
    return {"path": blend.path, "name": blend.name, "sha256": sha256_file(blend.path), **extra,
            "not_found": not_found}


def problems_of(receipts: Iterable[dict[str, Any]], max_examples: int) -> tuple[Counter[str], list[str]]:
    """A dataset's skip counts by reason summed over its receipts, and the first ``max_examples``
    kept example messages (receipt order)."""
    receipts = list(receipts)
    skipped: Counter[str] = Counter()
    for r in receipts:
        skipped.update(r["skipped"])
    return skipped, [e for r in receipts for e in r.get("examples", [])][:max_examples]


def publish(run: Run, manifest: dict[str, Any], summary: Callable[[dict[str, Any]], None], *,
            consumed_by: bool = True) -> dict[str, Any]:
    """Write ``manifest.json`` into the version folder (atomically, the run's last file), then print
    ``summary(manifest)`` unless quiet; returns the manifest.

    With ``consumed_by``, the manifest ends with a ``consumed_by`` field saying where consumption
    records go (:data:`CONSUMED_BY`).
    """
    if consumed_by:
        manifest["consumed_by"] = CONSUMED_BY
    hold_point("publishing")  # tests: a stop after every shard was finished, before the manifest
    atomic_write_json(run.vdir / outputs.MANIFEST, manifest)
    if not run.quiet:
        summary(manifest)
    return manifest


def no_contribution(name: str, weight: str, receipts: list[dict[str, Any]], unit: str, max_key: str,
                    max_examples: int, shown: int = 3) -> tuple[str, str]:
    """The message and hint of a dataset that contributes nothing: ``dataset <name> (<weight>) contributes
    nothing: N <unit> read, all rejected (top reasons: no_assistant_turn 40, bad_record 2)``; the hint shows the
    first ``shown`` rejected records that the receipts kept (``file:line: reason: detail``, each cut to one line)
    — or, where none were kept (``max_key`` = 0), says to raise ``max_key`` — and what to do."""
    skipped, examples = problems_of(receipts, max(max_examples, shown))
    read = sum(r.get("records", r.get("documents", 0)) or 0 for r in receipts)
    top = ", ".join(f"{k} {v:,}" for k, v in skipped.most_common(3)) or "none"
    message = (f"dataset {name} ({weight}) contributes nothing: {count(read, unit)} read"
               + (f", all rejected (top reasons: {top})" if skipped else ", no record found"))
    if examples:
        cut = [e if len(e) <= 600 else e[:597] + "..." for e in examples[:shown]]
        hint = ("first rejected: " + " | ".join(cut) + "; fix the records (or the dataset's format in the blend), "
                "or remove the dataset from the blend")
    elif skipped:
        hint = f"{max_key}={max_examples} keeps no examples: set {max_key}=3 to see rejected records; then fix the dataset"
    else:
        hint = "the dataset's files hold no records: check its path and format"
    return message, hint


def print_examples(m: dict[str, Any], max_key: str) -> Any:
    """Print the manifest's kept examples of skipped records (``skipped: <file>:<line>: ...``);
    returns the console, for the summary's last line.

    Where a dataset skipped more records than it kept examples of, a line says how many more and
    where their counts are: ``skipped: ... and 27 more of <dataset> (counts by reason in
    <path>/manifest.json; raise <max_key> (now 5) to list more)``. ``max_key`` is the stage's key of
    the example cap (``on_bad.max_examples``, ``policies.max_examples``).
    """
    from nemotron.data.progress import console

    con = console()
    for d in m["datasets"]:
        examples = d.get("examples", [])
        for e in examples:
            con.print(f"skipped: {e}")
        more = sum(d["skipped"].values()) - len(examples)
        if more > 0:
            now = f" (now {len(examples)})" if examples else ""
            con.print(f"skipped: ... and {more:,} more of {d['name']} (counts by reason in "
                      f"{Path(m['path']) / outputs.MANIFEST}; raise {max_key}{now} to list more)")
    return con


def account(items: list[dict[str, Any]], todo: list[dict[str, Any]], receipts: dict[str, dict[str, Any]],
            noun: str, what: str, measure: Callable[[dict[str, Any]], int]) -> dict[str, int]:
    """The manifest ``run`` counts of what this run built and what it reused from a previous run.

    ``items`` are all the work items, ``todo`` those this run built, ``receipts`` every item's receipt
    by id; ``measure(receipt)`` is an item's amount of ``what`` (tokens, records). Returns
    ``{"<noun>_built", "<noun>_reused", "<what>_built", "<what>_reused"}`` (a ``todo`` item that is
    not in ``items`` is not counted).
    """
    ran = {it["id"] for it in todo}
    built = [receipts[it["id"]] for it in items if it["id"] in ran]
    reused = [receipts[it["id"]] for it in items if it["id"] not in ran]
    return {f"{noun}_built": len(built), f"{noun}_reused": len(reused),
            f"{what}_built": sum(map(measure, built)), f"{what}_reused": sum(map(measure, reused))}


def work_line(r: dict[str, Any], steps: list[tuple[str, str]], what: str, rate: str) -> str:
    """One summary line of what the run recorded in ``r`` (a manifest's ``run``) did itself.

    ``steps`` are ``(noun, verb)`` pairs counted by :func:`account` (``("shards", "built")``); the rate
    is ``r["<what>_built"]`` over ``r["work_seconds"]`` (the seconds of this run's own work, not of the
    reused items). Example: ``work: 2 of 5 shards built: 4.64M tokens in 6.9s (667k tok/s); reused from
    a previous run: 3 shards, 4.39M tokens; 9.8s in all``; an in-process run (``r["engine"]``) adds where it
    ran before the total: ``; in this process, no Ray (2 threads; <engine_reason>)``. A manifest without these counts (written by an
    older version) gives ``run: 9.8s in all``; an ``r`` marked ``"up_to_date"`` (a rerun that found the
    output up to date, :func:`reuse_or_reset`) gives ``work: none (up to date)``.
    """
    from nemotron.data.progress import human

    if r.get("up_to_date"):
        return "work: none (up to date)"
    total = f"{r['seconds']:.1f}s in all"
    if "work_seconds" not in r or f"{what}_built" not in r:
        return f"run: {total}"
    done = " and ".join(f"{r[f'{n}_built']:,} of {count(r[f'{n}_built'] + r[f'{n}_reused'], n)} {verb}"
                        for n, verb in steps)
    secs, amount = r["work_seconds"], r[f"{what}_built"]
    line = f"work: {done}: {human(amount)} {what} in {secs:.1f}s" + (f" ({human(amount / secs)} {rate})" if secs else "")
    reused = [count(r[f"{n}_reused"], n) for n, _verb in steps if r[f"{n}_reused"]]
    if reused:
        line += f"; reused from a previous run: {', '.join(reused)}, {human(r[f'{what}_reused'])} {what}"
    if r.get("engine") == "in_process":  # a Ray run names its cluster in the line before the progress bar
        line += f"; in this process, no Ray ({count(r.get('threads') or 1, 'threads')}; {r.get('engine_reason')})"
    return f"{line}; {total}"
