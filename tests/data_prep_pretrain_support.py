"""Support for the data-prep-pretrain tests and benchmark (no tests here): configs compiled by the
project's own config compiler, exactly as `nemotron ultra3 data prep pretrain -c NAME key=value` does,
plus process-tree and reading helpers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config_support import compile_stage

ROOT = Path(__file__).resolve().parent.parent
STAGE_DIR = ROOT / "stages" / "ultra3" / "data_prep_pretrain"
SHARED_DATA = ROOT.parent / "shared" / "data"


def load_config(name: str = "tiny", **overrides: Any) -> dict[str, Any]:
    """The resolved config `run.py` receives for `data prep pretrain -c NAME key=value ...`
    (see :func:`config_support.compile_stage`)."""
    return compile_stage("data-prep-pretrain", name, **overrides)


# --------------------------------------------------------------------------------------------------
# helpers shared by the tests and the benchmark


def descendants(pid: int) -> list[int]:
    """Process ids of every descendant of ``pid`` (read from /proc), children first."""
    import os

    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, summed (bytes, from /proc/<pid>/statm)."""
    import os

    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * page
        except OSError:
            pass
    return total


def read_records(path: str, fmt: str, field: str) -> list[str | None]:
    """Every record of a file read independently of the pipeline (None for a bad record)."""
    import json

    if fmt == "text":
        try:
            return [Path(path).read_bytes().decode("utf-8")]
        except UnicodeDecodeError:
            return [None]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return [v if isinstance(v, str) else None for v in pq.read_table(path).column(field).to_pylist()]
    out: list[str | None] = []
    for raw in Path(path).read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            v = json.loads(raw.decode("utf-8")).get(field)
        except (UnicodeDecodeError, ValueError, AttributeError):
            v = None
        out.append(v if isinstance(v, str) else None)
    return out


def megatron_documents(prefixes: list[str]) -> list[list[int]]:
    """Documents of Megatron indexed datasets read with Megatron-Core's own IndexedDataset, in order."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    docs: list[list[int]] = []
    for prefix in prefixes:
        ds = IndexedDataset(prefix)
        di = ds.document_indices
        assert list(di) == list(range(len(ds) + 1)), "one sequence per document"
        docs.extend(ds[i].tolist() for i in range(len(ds)))
    return docs
