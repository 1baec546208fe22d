"""Import census of the container images: every third-party module a stage's container backend imports is
installed by its image, the Dockerfile's own pip lines or the base image (``stages/images.toml`` ``base_packages``).

No image can be built here, so the census is static, from the same pip lines the build runs:

* the modules: every ``import`` (module level and inside functions, and ``importlib.import_module("...")`` of a
  constant) of the files reached from the stage's ``run.py`` and its backends' ``"module:function"`` runtimes,
  following nemotron's own modules; plus the packages a stage config reads data from (``${pkgdata:PACKAGE,...}``).
  An import inside ``try`` whose ``except ImportError`` handler falls back (no ``raise``) is optional and left out;
  one whose handler raises is a requirement with a nicer message, and counts.
* the distributions: each ``pip install`` requirement of ``stages/docker/<image>.Dockerfile`` (its ``ARG``
  defaults substituted) and each ``base_packages`` entry, with their requirements (and extras) as this machine's
  installed metadata gives them.
* a module maps to the distributions that install it on this machine (``importlib.metadata``), or, where none is
  installed here, to the distribution of the same name.

The ``local`` backends run in the host's Python with the ``local`` extra, not in an image: not counted here.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import shlex
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from nemotron.config.paths import stages_dir
from nemotron.config.registry import STAGES
from nemotron.runtime.dispatch import stage_backends

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
DOCKER = ROOT / "stages" / "docker"
#: pip options that take a value (the next word is not a requirement).
_PIP_VALUE_OPTIONS = {"-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
                      "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--config-settings", "-C",
                      "--global-option", "--no-binary", "--only-binary", "--platform", "--python-version"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ------------------------------------------------------------------------------------------ the Dockerfile
def dockerfile_requirements(path: Path) -> list[str]:
    """The requirement strings of every ``pip install`` of a Dockerfile, ``${ARG}``s replaced by their defaults.

    Raises:
        AssertionError: a ``${VAR}`` without an ``ARG VAR=default``, or a requirement file (``-r``) the census
        cannot read."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    reqs: list[str] = []
    for line in re.findall(r"^RUN\s+(.*)$", text, re.M):
        if not re.search(r"\bpip\b.*\binstall\b", line):
            continue
        commands: list[list[str]] = [[]]
        for word in shlex.split(line):
            if word in ("&&", ";", "||"):
                commands.append([])
            else:
                commands[-1].append(word)
        for words in commands:
            if "pip" not in words or "install" not in words:
                continue
            words = words[words.index("install") + 1:]
            skip = False
            for word in words:
                if skip:
                    skip = False
                    continue
                if word in ("-r", "--requirement"):
                    raise AssertionError(f"{path.name}: pip install -r: the census reads requirement strings only")
                if word.startswith("-"):
                    skip = word in _PIP_VALUE_OPTIONS
                    continue

                def sub(m: re.Match) -> str:
                    assert m.group(1) in args, f"{path.name}: ${{{m.group(1)}}} has no ARG default"
                    return args[m.group(1)]

                reqs.append(re.sub(r"\$\{?(\w+)\}?", sub, word))
    return reqs


@cache
def _installed() -> dict[str, md.Distribution]:
    return {_norm(d.metadata["Name"]): d for d in md.distributions() if d.metadata["Name"]}


def covered(requirements: list[str]) -> set[str]:
    """Normalized names of ``requirements`` and everything they require (with their extras), as far as this machine's
    installed metadata tells; a distribution not installed here counts by its own name only."""
    seen: set[str] = set()
    todo = [(Requirement(r), ()) for r in requirements]
    while todo:
        req, _ = todo.pop()
        name = _norm(req.name)
        extras = set(req.extras)
        key = name + "[" + ",".join(sorted(extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        seen.add(name)
        dist = _installed().get(name)
        for line in (dist.requires or []) if dist is not None else []:
            sub = Requirement(line)
            if sub.marker is not None:
                envs = [{"extra": e} for e in extras] or [{"extra": ""}]
                if not any(sub.marker.evaluate(env) for env in envs):
                    continue
            todo.append((sub, ()))
    return {n for n in seen if "[" not in n}


# ------------------------------------------------------------------------------------------ the imports
def _module_file(name: str) -> Path | None:
    base = SRC / Path(*name.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def _falls_back(handler: ast.ExceptHandler) -> bool:
    """An ``except`` of ImportError/ModuleNotFoundError that does not raise: the import is optional."""
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {getattr(k, "id", None) or getattr(k, "attr", None) for k in kinds if k is not None}
    return bool(names & {"ImportError", "ModuleNotFoundError"}) and \
        not any(isinstance(n, ast.Raise) for n in ast.walk(handler))


def file_imports(path: Path, package: str) -> list[tuple[str, bool, int]]:
    """``(module, optional, line)`` of every import in ``path`` (``package``: for relative imports). ``from a import
    b`` gives ``a`` and ``a.b`` (b may be a submodule)."""
    out: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, optional: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Try):
                guarded = optional or any(_falls_back(h) for h in child.handlers)
                for b in child.body:
                    visit_one(b, guarded)
                for part in [*child.handlers, *child.orelse, *child.finalbody]:
                    visit_one(part, optional)
            else:
                visit_one(child, optional)

    def visit_one(child: ast.AST, optional: bool) -> None:
        if isinstance(child, ast.Import):
            out.extend((a.name, optional, child.lineno) for a in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                parts = package.split(".")
                base = parts[: len(parts) - child.level + 1]
                mod = ".".join(base + ([child.module] if child.module else []))
            else:
                mod = child.module or ""
            out.append((mod, optional, child.lineno))
            out.extend((f"{mod}.{a.name}", optional, child.lineno) for a in child.names)
        elif isinstance(child, ast.Call) and getattr(child.func, "attr", getattr(child.func, "id", "")) == \
                "import_module" and child.args and isinstance(child.args[0], ast.Constant) and \
                isinstance(child.args[0].value, str):
            out.append((child.args[0].value, optional, child.lineno))
        visit(child, optional)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return out


def third_party_imports(entry: Path, modules: list[str]) -> dict[str, str]:
    """Top-level third-party module -> ``file:line`` of its first import, over every file reached from ``entry``
    (a stage's run.py) and ``modules`` through nemotron's own imports. Stdlib and optional imports left out."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    todo = list(modules)
    files: list[tuple[Path, str]] = [(entry, "")]
    while files or todo:
        if todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            parts = name.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the parent packages run first
            path = _module_file(name)
            if path is not None:
                files.append((path, name if path.name == "__init__.py" else name.rpartition(".")[0]))
            continue
        path, package = files.pop()
        for name, optional, line in file_imports(path, package):
            top = name.split(".")[0]
            if top == "nemotron":
                todo.append(name)
            elif top and not optional and top not in sys.stdlib_module_names and top != "__future__":
                found.setdefault(top, f"{path.relative_to(ROOT)}:{line}")
    return found


def config_packages(stage) -> dict[str, str]:
    """Packages a stage's shipped configs read data files from (``${pkgdata:PACKAGE,...}``) -> ``file:line``."""
    out: dict[str, str] = {}
    for path in sorted((stages_dir() / stage.config_dir).glob("*.yaml")):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(r"\$\{pkgdata:\s*([\w.]+)", line):
                out.setdefault(m.group(1).split(".")[0], f"{path.relative_to(ROOT)}:{no}")
    return out


@cache
def _module_dists() -> dict[str, list[str]]:
    return {m: [_norm(d) for d in ds] for m, ds in md.packages_distributions().items()}


def uncovered(image: str) -> list[str]:
    """One line per third-party module a container backend of a stage in ``image`` imports that neither the
    Dockerfile's pip lines nor the base image's ``base_packages`` install."""
    table = tomllib.loads((ROOT / "stages" / "images.toml").read_text(encoding="utf-8"))
    pip_lines = dockerfile_requirements(DOCKER / f"{image}.Dockerfile")
    have = covered(pip_lines + list(table[image].get("base_packages", [])))
    missing = []
    for stage in STAGES:
        backends, _ = stage_backends(stage)
        for name, backend in backends.items():
            if name == "local" or (backend.image or stage.image) != image or not backend.runtime:
                continue
            mods = third_party_imports(stages_dir() / stage.entry, [backend.runtime.split(":")[0]])
            if not backend.image or backend.image == stage.image:
                mods.update({k: v for k, v in config_packages(stage).items() if k not in mods})
            if backend.requires:
                mods.setdefault(backend.requires.split(".")[0], f"{stage.entry} (Backend.requires)")
            for module, where in sorted(mods.items()):
                dists = _module_dists().get(module) or [_norm(module)]
                if not set(dists) & have:
                    missing.append(f"{image}: stage {stage.name} ({name}) imports {module} ({where}); "
                                   f"its distribution {'/'.join(dists)} is in neither {image}.Dockerfile's pip lines "
                                   f"nor images.toml [{image}] base_packages")
    return sorted(set(missing))


# ------------------------------------------------------------------------------------------ the tests
IMAGES = sorted(p.name.removesuffix(".Dockerfile") for p in DOCKER.glob("*.Dockerfile"))


def test_every_image_has_its_dockerfile_and_stages():
    table = tomllib.loads((ROOT / "stages" / "images.toml").read_text(encoding="utf-8"))
    assert IMAGES == sorted(table), (IMAGES, sorted(table))
    used = {stage.image for stage in STAGES}
    assert used <= set(IMAGES), used - set(IMAGES)


@pytest.mark.parametrize("image", IMAGES)
def test_image_installs_every_module_its_stages_import(image):
    assert not uncovered(image), "\n".join(uncovered(image))


def test_census_reads_the_pip_lines_and_the_imports():
    """The census's own parts on known inputs: the data image's pip lines (ARG-free), the NeMo image's
    (``${MEGATRON_CORE_COMMIT}`` substituted, options skipped), and the data prep imports it must find."""
    data = dockerfile_requirements(DOCKER / "data.Dockerfile")
    assert "tokenizers>=0.20" in data and "mistral-common>=1.5" in data and not any(r.startswith("-") for r in data)
    nemo = dockerfile_requirements(DOCKER / "nemo.Dockerfile")
    assert "nvidia-modelopt==0.47.0" in nemo and any(r.startswith("megatron-core @ git+") and "c8288b6c" in r
                                                     for r in nemo)
    sft = third_party_imports(ROOT / "stages/ultra3/data_prep_sft/run.py", ["nemotron.data.sft"])
    assert {"ray", "pyarrow", "tokenizers", "jinja2", "datasets", "huggingface_hub", "yaml"} <= sft.keys(), sft
    assert "torch" not in sft and "nemo_run" not in sft, sft


def test_census_fails_on_a_dockerfile_without_the_hub_packages(tmp_path, monkeypatch):
    """The data image as it was (no datasets, huggingface_hub, jinja2): the census names each module, the stage and
    the file:line of the import."""
    old = (DOCKER / "data.Dockerfile").read_text(encoding="utf-8")
    stripped = re.sub(r'\s"(datasets|huggingface-hub|jinja2|transformers)[^"]*"', "", old)
    assert stripped != old
    (tmp_path / "data.Dockerfile").write_text(stripped, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "DOCKER", tmp_path)
    lines = uncovered("data")
    said = " ".join(lines)
    assert "stage data-prep-sft (ray) imports jinja2 (src/nemotron/data/chat.py:" in said, lines
    assert "imports datasets (src/nemotron/data/sources.py:" in said, lines
