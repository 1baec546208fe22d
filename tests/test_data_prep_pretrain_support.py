"""Support for the data-prep-pretrain tests and benchmark (no tests here): resolve a stage config by hand, the way the config compiler does.

Layers: default.yaml, then the named config (through its `defaults:`), then overrides; dicts merge,
lists replace. Resolvers: ${stages:REL}, ${pkgdata:PACKAGE,REL}, ${stdlib:} and OmegaConf's ${oc.env:...}.
"""

from __future__ import annotations

import importlib.util
import sysconfig
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
STAGE_DIR = ROOT / "stages" / "ultra3" / "data_prep_pretrain"
SHARED_DATA = ROOT.parent / "shared" / "data"


def _reg(name: str, fn: Any) -> None:
    register = getattr(OmegaConf, "register_resolver", None) or OmegaConf.register_new_resolver
    register(name, fn)


def _register() -> None:
    if OmegaConf.has_resolver("stages"):
        return
    _reg("stages", lambda rel: str(ROOT / "stages" / rel))

    def pkgdata(package: str, rel: str) -> str:
        spec = importlib.util.find_spec(package)
        assert spec and spec.submodule_search_locations, package
        return str(Path(list(spec.submodule_search_locations)[0]) / rel)

    _reg("pkgdata", pkgdata)
    _reg("stdlib", lambda: sysconfig.get_paths()["stdlib"])


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _layer(name: str) -> dict[str, Any]:
    data = yaml.safe_load((STAGE_DIR / f"{name}.yaml").read_text()) or {}
    parents = data.pop("defaults", None)
    base: dict[str, Any] = {}
    for parent in [parents] if isinstance(parents, str) else (parents or []):
        base = _merge(base, _layer(parent))
    return _merge(base, data)


def load_config(name: str = "tiny", **overrides: Any) -> dict[str, Any]:
    """The resolved config dict `run.py` would receive for `-c NAME key=value ...`."""
    _register()
    cfg = _merge({"run": {"env": {"nodes": 1, "gpus_per_node": None, "cpus": None}}}, _layer("default"))
    if name != "default":
        cfg = _merge(cfg, _layer(name))
    for key, value in overrides.items():
        cur = cfg
        parts = key.split("__")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    return OmegaConf.to_container(OmegaConf.create(cfg), resolve=True)


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
