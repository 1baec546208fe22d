"""The normalisation of golden ``--dry-run`` outputs, shared by the golden tests (tests/cli/test_dryrun_golden.py,
tests/config/test_long_context.py)."""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository


def normalise(text: str, home: Path) -> str:
    """Replace what changes between runs and machines: experiment ids, paths, random ports/ids."""
    text = re.sub(r"ultra3-[a-z0-9_-]+-\d{8}-\d{6}-[0-9a-f]{6}", "<EXPERIMENT_ID>", text)
    text = text.replace(str(home), "<NEMOTRON_HOME>").replace(str(home.parent), "<CWD>")
    text = text.replace(str(home.parent.parent), "<CWD>/..")
    text = text.replace(str(ROOT.parent.resolve() / "shared"), "<ROOT>/../shared")
    text = text.replace(str(ROOT), "<ROOT>").replace(sys.executable, "<PYTHON>")
    text = re.sub(r"\S*/site-packages/", "<SITE_PACKAGES>/", text)
    text = text.replace(sysconfig.get_paths()["stdlib"], "<STDLIB>")
    text = re.sub(r"--rdzv-id \d+", "--rdzv-id <N>", text)
    text = re.sub(r"/tmp/nemotron-dryrun-[^/\s]+", "<TMP>", text)
    return text
