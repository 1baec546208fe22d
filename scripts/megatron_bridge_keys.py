"""Generate the Megatron-Bridge key list: every field of ``ConfigContainer``'s sections, as data.

    python scripts/megatron_bridge_keys.py --bridge megatron_bridge-0.5.0-py3-none-any.whl \\
        --core megatron_core-0.18.0-cp312-...whl [--out src/nemotron/keylists/megatron-bridge-0.5.0.json]

Inputs are the released wheels (``pip download megatron-bridge==V megatron-core==V --no-deps
--python-version 3.12 --only-binary=:all: [--platform manylinux_2_28_x86_64]``) or source checkouts
(folders holding ``megatron/``). Nothing is imported: the sources are parsed with ``ast``. For each
``ConfigContainer`` field (``megatron/bridge/training/config.py``) the script resolves the annotated
class(es) through the modules' imports (aliases, package ``__init__`` re-exports), collects their
dataclass fields including inherited ones, and recurses into fields whose type is itself a config
class (``dataset.packed_sequence_specs``). A union (``model: GPTModelProvider | MambaModelProvider |
...``) contributes the fields of every member; for ``model`` the NemotronH/Mamba/hybrid providers that
AutoBridge returns for NemotronH are added as well.

Output (JSON): ``{"framework", "version", "megatron_core", "source", "sections": {NAME: {"types": [...],
"fields": {FIELD: {"type": "...", ["fields": {...}] ["mapping": true]}}}}}``; ``mapping`` marks a field
whose type is a dict (any sub-key is allowed); ``"mixed_precision_recipes": [...]`` the preset names
Megatron-Bridge registers in ``training/mixed_precision.py``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import re
import sys
import zipfile
from pathlib import Path

#: Extra model providers whose fields ``model.*`` may use (AutoBridge builds one of these for NemotronH).
MODEL_EXTRA = re.compile(r"^(NemotronH|NemotronNano|Mamba|Hybrid)\w*(Provider|ModelConfig)$")
CONTAINER = ("megatron.bridge.training.config", "ConfigContainer")


class Sources:
    """Python sources by module name, from wheels or folders; classes and imports parsed on demand."""

    def __init__(self, inputs: list[Path], packages: tuple[str, ...] = ("megatron/",)) -> None:
        self.files: dict[str, str] = {}
        for src in inputs:
            if src.is_dir():
                for path in src.rglob("*.py"):
                    rel = path.relative_to(src).as_posix()
                    if rel.startswith(packages):
                        self.files[self._module(rel)] = path.read_text(encoding="utf-8", errors="replace")
            else:
                with zipfile.ZipFile(src) as z:
                    for name in z.namelist():
                        if name.endswith(".py") and name.startswith(packages):
                            self.files[self._module(name)] = z.read(name).decode("utf-8", errors="replace")
        self._parsed: dict[str, ast.Module] = {}

    @staticmethod
    def _module(rel: str) -> str:
        mod = rel[:-3].replace("/", ".")
        return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod

    def tree(self, module: str) -> ast.Module | None:
        if module not in self.files:
            return None
        if module not in self._parsed:
            try:
                self._parsed[module] = ast.parse(self.files[module])
            except SyntaxError:
                self._parsed[module] = ast.Module(body=[], type_ignores=[])
        return self._parsed[module]

    def resolve(self, module: str, name: str, seen: frozenset = frozenset()) -> tuple[str, ast.ClassDef] | None:
        """The class ``name`` as seen from ``module`` (defined there or imported, followed through re-exports)."""
        key = (module, name)
        if key in seen:
            return None
        seen = seen | {key}
        tree = self.tree(module)
        if tree is None:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module is not None or node.level):
                base = self._absolute(module, node)
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        found = self.resolve(base, alias.name, seen)
                        if found is None and f"{base}.{alias.name}" in self.files:
                            continue
                        if found is not None:
                            return found
        return None

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        is_pkg = any(k.startswith(module + ".") for k in self.files) or module not in self.files
        parts = module.split(".")
        base = parts if is_pkg else parts[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join(base + ([node.module] if node.module else []))

    def all_classes(self) -> list[tuple[str, ast.ClassDef]]:
        out = []
        for module in self.files:
            tree = self.tree(module)
            for node in (tree.body if tree else []):
                if isinstance(node, ast.ClassDef):
                    out.append((module, node))
        return out


def _annotation_names(ann: ast.expr) -> list[str]:
    """Class names mentioned in an annotation (``Optional[Union[A, str]]`` → ``["A"]``), leaving builtins."""
    out = []
    for node in ast.walk(ann):
        if isinstance(node, ast.Name) and node.id[:1].isupper() and node.id not in (
                "Optional", "Union", "Literal", "Any", "List", "Dict", "Tuple", "Callable", "ClassVar", "Type", "Set"):
            out.append(node.id)
        elif isinstance(node, ast.Attribute) and node.attr[:1].isupper():
            out.append(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # string annotations
            with contextlib.suppress(SyntaxError):
                out += _annotation_names(ast.parse(node.value, mode="eval").body)
    return out


def _is_mapping(ann: ast.expr) -> bool:
    text = ast.unparse(ann)
    return bool(re.search(r"\b(dict|Dict|Mapping|MutableMapping)\b", text))


class Collector:
    """Fields of config classes (dataclasses by default; ``is_config`` decides which annotated classes to
    expand), recursing ``max_depth`` levels into fields whose type is itself a config class."""

    def __init__(self, src: Sources, is_config=None, max_depth: int = 3) -> None:
        self.src = src
        self.cache: dict[tuple[str, str], dict] = {}
        self.is_config = is_config or _looks_like_config
        self.max_depth = max_depth

    def fields(self, module: str, cls: ast.ClassDef, depth: int = 0) -> dict:
        key = (module, cls.name)
        if key in self.cache:
            return self.cache[key]
        self.cache[key] = {}  # cycle guard
        out: dict = {}
        for base in cls.bases:
            for name in _annotation_names(base):
                found = self.src.resolve(module, name)
                if found is not None:
                    out.update(self.fields(*found, depth=depth))
        for st in cls.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                ann = ast.unparse(st.annotation)
                if "ClassVar" in ann or "InitVar" in ann:
                    continue
                entry: dict = {"type": ann}
                if _is_mapping(st.annotation):
                    entry["mapping"] = True
                elif depth < self.max_depth:
                    nested: dict = {}
                    for name in _annotation_names(st.annotation):
                        found = self.src.resolve(module, name)
                        if found is not None and self.is_config(found[1]):
                            nested.update(self.fields(*found, depth=depth + 1))
                    if nested:
                        entry["fields"] = nested
                out[st.target.id] = entry
        self.cache[key] = out
        return out


def _looks_like_config(cls: ast.ClassDef) -> bool:
    decos = " ".join(ast.unparse(d) for d in cls.decorator_list)
    return "dataclass" in decos or any("Config" in ast.unparse(b) or "Spec" in ast.unparse(b) for b in cls.bases) \
        or cls.name.endswith(("Config", "Specs", "Spec"))


def _version(sources: Sources, inputs: list[Path], package: str) -> str | None:
    for src in inputs:
        m = re.match(rf"{package}-([0-9][^-]*)-", src.name)
        if m:
            return m.group(1)
    module = f"megatron.{package.split('_')[1]}.package_info"
    text = sources.files.get(module, "")
    parts = dict(re.findall(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE)\s*=\s*['\"]?([^'\"\n]*)", text, re.M))
    if parts:
        return f"{parts.get('MAJOR')}.{parts.get('MINOR')}.{parts.get('PATCH')}{parts.get('PRE_RELEASE', '')}"
    return None


#: Where Megatron-Bridge registers its mixed-precision presets (``@register`` functions; the name with
#: ``_`` and, since 0.2, with ``-``), which ``get_mixed_precision_config(name)`` looks up.
MIXED_PRECISION_MODULE = "megatron.bridge.training.mixed_precision"


def mixed_precision_recipes(src: Sources) -> list[str]:
    """The preset names ``mixed_precision: NAME`` may take (both spellings), sorted."""
    tree = src.tree(MIXED_PRECISION_MODULE)
    names: set[str] = set()
    for node in tree.body if tree is not None else []:
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Name) and d.id == "register" for d in node.decorator_list):
            names |= {node.name, node.name.replace("_", "-")}
    return sorted(names)


def generate(bridge: Path, core: Path) -> dict:
    src = Sources([bridge, core])
    found = src.resolve(*CONTAINER)
    if found is None:
        raise SystemExit(f"{bridge}: no ConfigContainer in {CONTAINER[0]}")
    module, container = found
    col = Collector(src)
    sections: dict = {}
    for st in container.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        name = st.target.id
        types = []
        merged: dict = {}
        candidates = [(n, src.resolve(module, n)) for n in _annotation_names(st.annotation)]
        if name == "model":
            candidates += [(c.name, (m, c)) for m, c in src.all_classes() if MODEL_EXTRA.match(c.name)]
        for type_name, res in candidates:
            if res is None or type_name in types:
                continue
            types.append(type_name)
            for field, entry in col.fields(*res).items():
                merged.setdefault(field, entry)
        sections[name] = {"annotation": ast.unparse(st.annotation), "types": types,
                          "fields": dict(sorted(merged.items()))}
    return {
        "framework": "megatron-bridge",
        "version": _version(src, [bridge], "megatron_bridge"),
        "megatron_core": _version(src, [core], "megatron_core"),
        "source": f"{bridge.name} + {core.name}, ConfigContainer in {CONTAINER[0]}, read with ast",
        "generated_by": "scripts/megatron_bridge_keys.py",
        "sections": sections,
        "mixed_precision_recipes": mixed_precision_recipes(src),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bridge", type=Path, required=True, help="megatron-bridge wheel or source folder")
    p.add_argument("--core", type=Path, required=True, help="megatron-core wheel or source folder (same pin)")
    p.add_argument("--out", type=Path, default=None, help="output JSON (default: src/nemotron/keylists/)")
    a = p.parse_args(argv)
    data = generate(a.bridge, a.core)
    out = a.out or Path(__file__).resolve().parents[1] / "src" / "nemotron" / "keylists" / \
        f"megatron-bridge-{data['version']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    n = sum(len(s["fields"]) for s in data["sections"].values())
    print(f"{out}: Megatron-Bridge {data['version']} (megatron-core {data['megatron_core']}): "
          f"{len(data['sections'])} sections, {n} fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
