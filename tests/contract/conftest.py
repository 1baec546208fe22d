"""The ``upstream`` fixture: the pinned upstream sources and the contract interpreter (see ``upstream.py``).

Absent sources or an absent ``.venv-upstream`` skip these tests with the reason, except under ``CI=true``,
where they fail: CI must run every contract.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from upstream import SHARED_UPSTREAM, VENV_PYTHON, Upstream, sources  # noqa: E402



def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (required under CI=true)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def upstream() -> Upstream:
    if not SHARED_UPSTREAM.is_dir():
        unavailable(f"{SHARED_UPSTREAM} is absent (the pinned upstream source archives)")
    if not VENV_PYTHON.is_file():
        unavailable(f"{VENV_PYTHON} is absent: run `bash scripts/setup_upstream.sh` (scripts/test.sh does)")
    try:
        roots = sources()
    except FileNotFoundError as exc:
        unavailable(str(exc))
    return Upstream(roots)
