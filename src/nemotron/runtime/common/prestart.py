"""Checks a cluster runtime makes before it loads a framework, shared by every backend that runs in a
container under torchrun or Ray (:mod:`~nemotron.runtime.megatron.megatron_bridge`,
:mod:`~nemotron.runtime.quantization.quantize_cluster`, :mod:`~nemotron.runtime.rl.nemo_rl`).

Each check returns problems as lines (``[]`` or ``None``: fine) so that a runtime can print all of them,
one per line, before anything heavy is imported. The numbers they compare come from the config
(``run.env.nodes``, ``run.env.gpus_per_node``), torchrun's environment (``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, torch.distributed's launcher contract), the visible devices, and the framework
pins of ``stages/images.toml`` (``[<image>].frameworks`` versions, ``[<image>].commits`` git commits).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def visible_gpus() -> int:
    """GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set (``-1`` and empty entries not counted),
    else the ``/dev/nvidiaN`` device files (no CUDA import: this runs before any framework is loaded)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
    return len(list(Path("/dev").glob("nvidia[0-9]*")))


def pinned_versions(image: str, keys: tuple[str, ...]) -> dict[str, str]:
    """The framework versions ``stages/images.toml`` ``[image].frameworks`` pins for ``keys``
    (e.g. ``megatron_bridge``, ``megatron_core``); keys it does not list are left out."""
    from nemotron.config.images import image_table

    fw = image_table().get(image, {}).get("frameworks", {})
    return {k: str(fw[k]) for k in keys if k in fw}


def installed_versions(dists: Mapping[str, str]) -> dict[str, str | None]:
    """``{key: installed version or None}`` for ``{key: distribution name}`` (importlib.metadata; no import)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for key, dist in dists.items():
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = None
    return out


def pinned_commits(image: str, keys: tuple[str, ...]) -> dict[str, str]:
    """The git commits ``stages/images.toml`` ``[image].commits`` records for ``keys`` (the commits the image's
    Dockerfile installs, e.g. ``megatron_bridge``, ``megatron_core``); keys it does not list are left out."""
    from nemotron.config.images import image_table

    commits = image_table().get(image, {}).get("commits", {})
    return {k: str(commits[k]) for k in keys if k in commits}


def installed_commits(dists: Mapping[str, str], paths: list[str] | None = None) -> dict[str, str | None]:
    """``{key: git commit or None}`` for ``{key: distribution name}``: the commit a distribution was installed
    from, as the installer records it for a VCS install (PEP 610 ``direct_url.json``, ``vcs_info.commit_id``;
    written by ``pip install "NAME @ git+URL@COMMIT"``, as ``stages/docker/nemo.Dockerfile`` installs
    Megatron-Bridge and Megatron-Core). None for a distribution that is absent or records no commit (a wheel, an
    sdist, an editable checkout). ``paths``: where to look instead of ``sys.path``. No import of the package."""
    import json
    from importlib import metadata

    out: dict[str, str | None] = {}
    for key, dist in dists.items():
        if paths is None:
            try:
                found: Any = metadata.distribution(dist)
            except metadata.PackageNotFoundError:
                found = None
        else:
            found = next(iter(metadata.distributions(name=dist, path=paths)), None)
        text = found.read_text("direct_url.json") if found is not None else None
        try:
            commit = (json.loads(text).get("vcs_info") or {}).get("commit_id") if text else None
        except (ValueError, AttributeError):  # not PEP 610 JSON: no commit to compare
            commit = None
        out[key] = str(commit) if commit else None
    return out


def commit_problems(installed: Mapping[str, str | None], pinned: Mapping[str, str], image: str = "nemo",
                    checked: str = "the configs", fix: str = "run in that image") -> list[str]:
    """One line per framework installed from another commit than ``stages/images.toml`` ``[image].commits``
    records (a shorter hash matches the full one it starts). A framework that records no commit
    (:func:`installed_commits` None) is left to the version check (:func:`version_problems`)."""
    out = []
    for key, want in pinned.items():
        have = (installed.get(key) or "").lower()
        if not have or have.startswith(want.lower()) or want.lower().startswith(have):
            continue
        out.append(f"{key.replace('_', '-')} is installed from commit {have[:12]}; {checked} were checked against "
                   f"{want[:12]} (stages/images.toml [{image}].commits): {fix}")
    return out


def same_release(have: str, want: str) -> bool:
    """Whether installed ``have`` is the pinned release ``want``: equal, or a build of it (``0.18.0rc0``,
    ``0.18.0+abc`` for ``0.18.0``; not ``0.18.01``)."""
    return have == want or (have.startswith(want) and not have[len(want):][:1].isdigit())


def version_problems(installed: Mapping[str, str | None], pinned: Mapping[str, str], image: str = "nemo",
                     checked: str = "the configs", fix: str = "run in that image") -> list[str]:
    """One line per framework whose installed version is not the one ``stages/images.toml``
    ``[image].frameworks`` pins (:func:`same_release`); ``checked`` says what was checked against the pin,
    ``fix`` ends the line of a different version."""
    out = []
    for key, want in pinned.items():
        have = installed.get(key)
        dist = key.replace("_", "-")
        if have is None:
            out.append(f"{dist} is not installed here; this stage runs in the {image} container "
                       f"(stages/images.toml [{image}], {dist} {want})")
        elif not same_release(have, want):
            out.append(f"{dist} {have} is installed; {checked} were checked against {want} "
                       f"(stages/images.toml [{image}].frameworks): {fix}")
    return out


def release_tuple(version: str) -> tuple[int, ...]:
    """``"0.47.0rc1"`` → ``(0, 47, 0)``: the leading numeric parts of a version string."""
    nums = []
    for part in version.split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        nums.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(nums)


def minimum_version_problem(dist: str, have: str | None, minimum: tuple[int, ...], why: str) -> str | None:
    """A line when distribution ``dist`` is installed at a release below ``minimum`` (``why`` says what
    needs it); ``None`` when it is new enough or not installed (a missing module is reported by
    :func:`missing_modules`)."""
    if have is None or release_tuple(have)[:len(minimum)] >= minimum:
        return None
    want = ".".join(str(n) for n in minimum)
    return f"{dist} {have} is installed; {why}: install {dist}>={want} in the image"


def missing_modules(modules: Mapping[str, str], image: str, label: str,
                    importable: Callable[[str], bool] | None = None) -> list[str]:
    """One line per module of ``{module: what it provides}`` that is not importable here, naming the
    container the stage runs in (``label``, image of ``stages/images.toml`` ``[image]``)."""
    from nemotron.runtime.dispatch import _image_uri, _importable

    importable = importable or _importable
    return [f"this stage runs inside the {label} container (image {_image_uri(image)}); {module} is not "
            f"importable here{f' ({why})' if why else ''}" for module, why in modules.items() if not importable(module)]


def gpu_problems(cfg_nodes: Any, cfg_gpus_per_node: Any, env: Mapping[str, str], gpus: int | None = None,
                 nodes_key: str = "run.env.nodes", gpus_key: str = "run.env.gpus_per_node") -> list[str]:
    """The node shape against what torchrun started and what this node shows.

    ``cfg_gpus_per_node`` null means the profile's node shape, which torchrun's ``--nproc-per-node``
    carries as ``LOCAL_WORLD_SIZE``. Problems: the visible GPUs (``gpus``, default :func:`visible_gpus`)
    differ from GPUs per node; ``WORLD_SIZE`` differs from nodes x GPUs per node (the layout was
    validated for that world size).
    """
    nodes = cfg_nodes if isinstance(cfg_nodes, int) and cfg_nodes > 0 else 1
    want = cfg_gpus_per_node
    if want is None and str(env.get("LOCAL_WORLD_SIZE", "")).isdigit():
        want = int(env["LOCAL_WORLD_SIZE"])
    if not isinstance(want, int):
        return []
    out = []
    have = visible_gpus() if gpus is None else gpus
    if have != want:
        out.append(f"{gpus_key}={want}: this node shows {have} GPU(s) "
                   f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    world = env.get("WORLD_SIZE")
    if world is not None and world.isdigit() and int(world) != nodes * want:
        out.append(f"torchrun started {world} processes; {nodes_key} x gpus_per_node = {nodes} x {want} = "
                   f"{nodes * want} (the layout was validated for that world size)")
    return out


def path_problem(key: str, value: Any, kind: str = "file") -> str | None:
    """A line when config ``key`` = ``value`` is not an existing ``kind`` (``file`` / ``folder``) on this
    node: unset, still holding an unresolved ``${...}``, or absent; ``None`` when it exists."""
    if value in (None, ""):
        return f"{key} is not set"
    if "${" in str(value):
        return (f"{key}={value!r}: unresolved (an artifact or variable that was not set when the config "
                "compiled); run the upstream stage first, or use `pipe`")
    p = Path(os.path.expanduser(str(value)))
    if not (p.is_file() if kind == "file" else p.is_dir()):
        return f"{key}={value}: no such {kind} on this node"
    return None


#: The cgroup files that cap this process's memory: cgroup v2 ``memory.max`` (``max``: no limit) and cgroup v1
#: ``memory.limit_in_bytes`` (a huge number: no limit), as a Slurm job's cgroup (``--mem``) or a container sets them.
CGROUP_MEMORY_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def host_memory(meminfo: str | Path = "/proc/meminfo",
                cgroup_files: tuple[str | Path, ...] = CGROUP_MEMORY_FILES) -> tuple[int | None, str]:
    """``(bytes, where)``: the RAM a process may use on this node, the smaller of ``MemTotal`` of ``meminfo``
    (kB = 1024 bytes, as the kernel writes it) and the first cgroup limit of ``cgroup_files`` that is a number below
    it; ``where`` says which (``this node (/proc/meminfo MemTotal)`` or ``this node's cgroup limit
    (/sys/fs/cgroup/memory.max; MemTotal 2164 GB)``). ``(None, why)`` when ``meminfo`` cannot be read or has no
    ``MemTotal`` line (and no cgroup limit is set)."""
    total = None
    try:
        for line in Path(meminfo).read_text(encoding="ascii", errors="replace").splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == "MemTotal" and rest.split() and rest.split()[0].isdigit():
                total = int(rest.split()[0]) * 1024
                break
    except OSError:
        pass
    limit, limit_file = None, None
    for f in cgroup_files:
        try:
            text = Path(f).read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            continue
        if text.isdigit() and (total is None or int(text) < total):
            limit, limit_file = int(text), f
        break
    if limit is not None:
        seen = f"; MemTotal {total / 1e9:.0f} GB" if total is not None else ""
        return limit, f"this node's cgroup memory limit ({limit_file}{seen})"
    if total is None:
        return None, f"{meminfo} has no MemTotal line to read"
    return total, f"this node ({meminfo} MemTotal)"


def refuse(title: str, problems: list[str]) -> int:
    """Print each problem as one line of the job log (``<title>: <problem>``, stderr); returns exit code 1."""
    import sys

    for line in problems:
        print(f"{title}: {line}", file=sys.stderr, flush=True)
    return 1


__all__ = ["commit_problems", "gpu_problems", "host_memory", "installed_commits", "installed_versions", "minimum_version_problem",
           "missing_modules", "path_problem", "pinned_commits", "pinned_versions", "refuse", "release_tuple",
           "same_release", "version_problems", "visible_gpus"]
