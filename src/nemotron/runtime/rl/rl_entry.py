"""Entry of the ``local`` backend of ``ultra3 rlvr`` and ``ultra3 mopd`` (called by their ``run.py`` through
:func:`nemotron.runtime.dispatch.run`).

Light checks first (the settings, :mod:`nemotron.runtime.rl.rl_settings`; the inputs exist), then, holding
``checkpointing.checkpoint_dir/.nemotron-writer.lock`` as the local pretrain/SFT runs hold theirs, the heavy run
(:func:`nemotron.runtime.rl.rl_local.run`). Exit codes: 0 done; 1 unusable inputs, a held folder or a failure; 2 a
refused resume; 75 saved and stopped on a signal (run again to resume); 130 interrupted.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from nemotron.runtime.common.settings import SettingsError


def precheck(s: Any) -> None:
    """The inputs exist (no heavy import).

    Raises:
        SettingsError: naming the key and the path.
    """
    checks = [("policy.model_name", s.policy_path, "the checkpoint to start from"),
              ("data.train.data_path", s.train_path, "train.jsonl of `data prep rl`")]
    if s.val_path is not None:
        checks.append(("data.validation.data_path", s.val_path, "validation.jsonl of `data prep rl`"))
    checks += [(f"_teachers (route {a})", p, "a teacher checkpoint") for a, p in s.teachers.items()]
    for key, path, what in checks:
        if not Path(path).exists():
            raise SettingsError(f"{key}={path}: no such file or folder ({what})")
    if s.checkpoint_dir.exists() and not s.checkpoint_dir.is_dir():
        raise SettingsError(f"checkpointing.checkpoint_dir={s.checkpoint_dir}: exists and is not a folder")


def run_config(stage: str, cfg: dict[str, Any]) -> int:
    """Run the local ``stage`` (``"rlvr"`` / ``"mopd"``) on the compiled config; returns the exit code."""
    from nemotron.runtime.megatron.entry import LOCAL_NEEDS, run_heavy
    from nemotron.runtime.rl import rl_settings

    title = f"ultra3 {stage}"
    try:
        s = rl_settings.read(cfg, stage)
        precheck(s)
    except SettingsError as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 1
    with contextlib.ExitStack() as held:
        if not lock_checkpoint_dir(held, title, s.checkpoint_dir):
            return 1

        def work() -> int:
            from nemotron.runtime.rl.rl_local import run

            return run(s)

        from nemotron.runtime.rl.rl_data import RLDataError

        return run_heavy(title, s.cpus, *LOCAL_NEEDS[stage], work, errors=(RLDataError,))


def lock_checkpoint_dir(held: Any, title: str, folder: Any) -> bool:
    """Take the writer lock of the run's ``checkpointing.checkpoint_dir`` ``folder`` into ``held`` (a
    ``contextlib.ExitStack``), as every local RL entry does. False (after one line on stderr) when another run holds
    it; a file system that cannot lock is said on stdout and the run goes on unguarded (True)."""
    from nemotron.data.outputs import writer_lock
    from nemotron.errors import RuntimeFailure

    try:
        held.enter_context(writer_lock(folder))
    except RuntimeFailure as exc:
        print(f"{title}: checkpointing.checkpoint_dir: {exc.message}; wait for it to finish, or set "
              "checkpointing.checkpoint_dir=<another folder>", file=sys.stderr)
        return False
    except OSError as exc:
        print(f"[local] cannot lock {folder} ({exc.strerror or exc}): a second run on this folder would not be "
              "stopped", flush=True)
    return True


def rlvr(cfg: dict[str, Any]) -> int:
    """``backend: local`` of ``ultra3 rlvr``."""
    return run_config("rlvr", cfg)


def mopd(cfg: dict[str, Any]) -> int:
    """``backend: local`` of ``ultra3 mopd``."""
    return run_config("mopd", cfg)


__all__ = ["mopd", "precheck", "rlvr", "run_config"]
