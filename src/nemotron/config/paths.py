"""Where the project's data files live, for a source checkout and for an installed wheel."""

from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from nemotron.config.registry import Stage
from nemotron.config.tree import leaves
from nemotron.errors import RuntimeFailure


@lru_cache(maxsize=1)
def stages_dir() -> Path:
    """The ``stages/`` folder: stage configs, blends, runtime entry scripts and the image table.

    An installed wheel carries it as ``nemotron/_stages``; a source checkout (editable install or
    ``PYTHONPATH=src``) has it at the repository root.

    Raises:
        RuntimeFailure: when neither exists (a broken install).
    """
    here = Path(__file__).resolve().parents[1]  # the nemotron package
    for candidate in (here / "_stages", here.parent.parent / "stages"):
        if (candidate / "images.toml").is_file():
            return candidate
    raise RuntimeFailure(
        f"cannot find the stages/ folder next to {here}",
        "reinstall the package: pip install nemotron-cli (or pip install -e . in a checkout)",
    )


def repo_root() -> Path | None:
    """The source checkout's root when running from one, else ``None``."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "stages").is_dir() else None


#: Config keys that name a folder a stage creates and writes its outputs into (the stage configs under
#: stages/ultra3: data prep ``output_dir``, Megatron-Bridge ``checkpoint.save``, NeMo RL
#: ``checkpointing.checkpoint_dir``, convert/quantize/export ``*.output_dir``).
OUTPUT_FOLDER_KEYS = ("output_dir", "checkpoint.save", "checkpointing.checkpoint_dir", "convert.output_dir",
                      "quantization.output_dir", "export.output_dir", "eval.output_dir", "eval.save_path")


def cannot_create_folder(path: str | os.PathLike) -> str | None:
    """Why folder ``path`` cannot be created and written on this machine, or ``None`` when it can.

    The folder itself when it exists, else its nearest existing parent, must be a folder in which a
    new entry can be made: this is tried for real (an empty probe folder is made and removed at once),
    because permission bits do not tell for root, read-only mounts or pseudo file systems. The reason
    is the operating system's (``"Read-only file system"``, ``"Permission denied"``) or names the
    parent that is a file.
    """
    target = Path(os.path.expanduser(str(path))).absolute()
    existing = next((p for p in (target, *target.parents) if p.exists()), None)
    if existing is None:  # not even the root exists (cannot happen on a sane system)
        return "no existing parent folder"
    if not existing.is_dir():
        return "it is a file, not a folder" if existing == target else f"{existing} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".nemotron-write-check-", dir=existing))
    except OSError as exc:
        return exc.strerror or str(exc) if existing == target else f"{exc.strerror or exc} in {existing}"
    return None


def folder_key(cfg: Any, path: str | os.PathLike | None) -> str | None:
    """The config key whose folder ``path`` is, lies in or lies above (``output_dir`` for a failed
    ``mkdir`` of ``output_dir`` or a file inside it), preferring :data:`OUTPUT_FOLDER_KEYS`;
    ``None`` when no string value of ``cfg`` matches."""
    if not path or not isinstance(cfg, dict):
        return None

    target = os.path.abspath(os.path.expanduser(str(path)))
    found = []
    for key, value in leaves(cfg):
        if not isinstance(value, str) or not value.strip() or "${" in value:
            continue
        folder = os.path.abspath(os.path.expanduser(value))
        if folder != os.sep and (target == folder or target.startswith(folder + os.sep)
                                 or folder.startswith(target + os.sep)):
            found.append((key not in OUTPUT_FOLDER_KEYS, -len(folder), key))
    return min(found)[2] if found else None


def config_names(stage: Stage) -> list[str]:
    """Names of the configs a stage ships (``default``, ``tiny``, ``local``, ...), sorted with
    ``default`` first."""
    folder = stages_dir() / stage.config_dir
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    return sorted(names, key=lambda n: (n != "default", n != "tiny", n != "local", n))
