"""Where the project's data files live, for a source checkout and for an installed wheel."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from nemotron.errors import RuntimeFailure


@lru_cache(maxsize=1)
def stages_dir() -> Path:
    """The ``stages/`` folder: stage configs, blends, runtime entry scripts and the image table.

    An installed wheel carries it as ``nemotron/_stages``; a source checkout (editable install or
    ``PYTHONPATH=src``) has it at the repository root.

    Raises:
        RuntimeFailure: when neither exists (a broken install).
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "_stages", here.parent.parent / "stages"):
        if (candidate / "images.toml").is_file():
            return candidate
    raise RuntimeFailure(
        f"cannot find the stages/ folder next to {here}",
        "reinstall the package: pip install nemotron-cli (or pip install -e . in a checkout)",
    )


def repo_root() -> Path | None:
    """The source checkout's root when running from one, else ``None``."""
    root = Path(__file__).resolve().parent.parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "stages").is_dir() else None
