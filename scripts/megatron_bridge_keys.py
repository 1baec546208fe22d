"""Generate the Megatron-Bridge key list: every field of ``ConfigContainer``'s sections, as data.

    python scripts/megatron_bridge_keys.py \\
        --bridge ../shared/upstream/megatron-bridge-nemotron_3_ultra-4588417.tgz \\
        --core ../shared/upstream/megatron-lm-c8288b6.tgz
    # -> src/nemotron/keylists/megatron-bridge-0.5.0-4588417.json

Inputs are the sources at the pinned refs, in any of three forms: the ``git archive`` files the contract
tests read (``../shared/upstream``, ``*.tgz``: one source of truth for the key list and the contract tests),
released wheels, or source folders holding ``megatron/`` (e.g. a checkout's ``src/``). Nothing is imported: the sources are parsed
with ``ast``. For each ``ConfigContainer`` field (``megatron/bridge/training/config.py``) the script resolves
the annotated class(es) through the modules' imports (aliases, package ``__init__`` re-exports), collects
their dataclass fields including inherited ones, and recurses into fields whose type is itself a config
class (``dataset.packed_sequence_specs``). A union (``model: GPTModelProvider | MambaModelProvider |
...``) contributes the fields of every member; for ``model`` the NemotronH/Mamba/hybrid providers that
AutoBridge returns for NemotronH are added as well.

The key list is named by the pin of ``stages/images.toml`` ``[nemo]``: the package version and the short
commit (``--commit``, else read from an archive name ``...-<commit>.tgz``), e.g. ``0.5.0-4588417``.

Output (JSON): ``{"framework", "version", "package_version", "commit", "megatron_core", "source",
"sections": {NAME: {"types": [...], "required": {TYPE: [FIELD, ...]}, "fields": {FIELD: {"type": "...",
["fields": {...}] ["mapping": true] ["required": true]}}}}}``; ``mapping`` marks a field whose type is a dict
(any sub-key is allowed); ``required`` a dataclass field without a default (constructing the class without it
raises ``TypeError``), per class in the section's ``required``; ``"mixed_precision_recipes": [...]`` the
preset names Megatron-Bridge registers in ``training/mixed_precision.py``, ``"mixed_precision_presets"``
each preset's literal field values (the ``cfg.X = ...`` assignments, followed through the presets it starts
from) over ``"mixed_precision_defaults"`` (``MixedPrecisionConfig``'s literal defaults); ``"recipes"`` the
builders ``megatron.bridge.recipes.nemotronh`` exports with their keyword parameters (``hf_path``, ...).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path

#: Extra model providers whose fields ``model.*`` may use (AutoBridge builds one of these for NemotronH).
MODEL_EXTRA = re.compile(r"^(NemotronH|NemotronNano|Mamba|Hybrid)\w*(Provider|ModelConfig)$")
CONTAINER = ("megatron.bridge.training.config", "ConfigContainer")


class Sources:
    """Python sources by module name, from wheels or folders; classes and imports parsed on demand."""

    def __init__(self, inputs: list[Path], packages: tuple[str, ...] = ("megatron/",)) -> None:
        self.files: dict[str, str] = {}
        self.packages = packages
        for src in inputs:
            if src.is_dir():
                for path in src.rglob("*.py"):
                    rel = path.relative_to(src).as_posix()
                    if rel.startswith(packages):
                        self.files[self._module(rel)] = path.read_text(encoding="utf-8", errors="replace")
            elif src.name.endswith((".tgz", ".tar.gz", ".tar")):
                with tarfile.open(src) as tar:
                    for member in tar.getmembers():
                        rel = self._package_path(member.name) if member.isfile() and member.name.endswith(".py") else None
                        handle = tar.extractfile(member) if rel else None
                        if handle is not None:
                            self.files[self._module(rel)] = handle.read().decode("utf-8", errors="replace")
            else:
                with zipfile.ZipFile(src) as z:
                    for name in z.namelist():
                        rel = self._package_path(name) if name.endswith(".py") else None
                        if rel:
                            self.files[self._module(rel)] = z.read(name).decode("utf-8", errors="replace")
        self._parsed: dict[str, ast.Module] = {}

    def _package_path(self, rel: str) -> str | None:
        """A wheel's or an archive's member path from the package folder on (``megatron/...``): as it is, or
        under a ``git archive``'s top folder and its ``src/`` (``Megatron-Bridge/src/megatron/...``); None for a
        file outside the packages."""
        parts = rel.split("/")
        for cand in (rel, "/".join(parts[1:]), "/".join(parts[2:]) if parts[1:2] == ["src"] else ""):
            if cand and cand.startswith(self.packages):
                return cand
        return None

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
                if _no_default(st):
                    entry["required"] = True
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


def _no_default(st: ast.AnnAssign) -> bool:
    """A dataclass field without a default: no value, or ``field(...)`` without ``default``/``default_factory``."""
    if st.value is None:
        return True
    call = st.value
    return (isinstance(call, ast.Call) and ast.unparse(call.func).split(".")[-1] == "field"
            and not any(k.arg in ("default", "default_factory") for k in call.keywords))


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


def _preset_functions(src: Sources) -> dict[str, ast.FunctionDef]:
    tree = src.tree(MIXED_PRECISION_MODULE)
    return {node.name: node for node in (tree.body if tree is not None else [])
            if isinstance(node, ast.FunctionDef)
            and any(isinstance(d, ast.Name) and d.id == "register" for d in node.decorator_list)}


def mixed_precision_recipes(src: Sources) -> list[str]:
    """The preset names ``mixed_precision: NAME`` may take (both spellings), sorted."""
    names: set[str] = set()
    for name in _preset_functions(src):
        names |= {name, name.replace("_", "-")}
    return sorted(names)


def _literal(node: ast.expr) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return False, None


def mixed_precision_defaults(src: Sources) -> dict[str, object]:
    """``MixedPrecisionConfig``'s fields whose default is a literal (``fp8_recipe: "tensorwise"``, ...)."""
    found = src.resolve(MIXED_PRECISION_MODULE, "MixedPrecisionConfig")
    out: dict[str, object] = {}
    for st in found[1].body if found else []:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
            ok, value = _literal(st.value)
            if ok:
                out[st.target.id] = value
    return out


def mixed_precision_presets(src: Sources) -> dict[str, dict[str, object]]:
    """Per preset (underscore name), the field values it sets: ``MixedPrecisionConfig(k=v, ...)`` keywords, and
    ``cfg.k = v`` after ``cfg = other_preset()`` (followed through ``other_preset``); a value that is not a literal
    (``torch.bfloat16``) as ``{"expr": "<source>"}``. A field the preset does not set keeps its default
    (``mixed_precision_defaults``), except the pairs ``MixedPrecisionConfig.__setattr__`` keeps in sync
    (``fp8_param`` / ``fp8_param_gather``, ``fp4_param`` / ``fp4_param_gather``)."""
    funcs = _preset_functions(src)
    done: dict[str, dict[str, object]] = {}

    def values(name: str, seen: frozenset = frozenset()) -> dict[str, object]:
        if name in done or name in seen or name not in funcs:
            return dict(done.get(name, {}))
        out: dict[str, object] = {}
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in funcs and node.func.id != name:
                    out = {**values(node.func.id, seen | {name}), **out}
                elif node.func.id == "MixedPrecisionConfig":
                    for kw in node.keywords:
                        ok, value = _literal(kw.value)
                        if kw.arg:
                            out[kw.arg] = value if ok else {"expr": ast.unparse(kw.value)}
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
                ok, value = _literal(node.value)
                out[node.targets[0].attr] = value if ok else {"expr": ast.unparse(node.value)}
        done[name] = out
        return dict(out)

    return {name: values(name) for name in sorted(funcs)}


#: The recipe package the Megatron-Bridge entry looks a ``recipe.name`` up in first
#: (:func:`nemotron.runtime.megatron.megatron_bridge._recipe`).
RECIPE_PACKAGE = "megatron.bridge.recipes.nemotronh"


def recipes(src: Sources) -> dict[str, dict[str, object]]:
    """The recipe builders ``RECIPE_PACKAGE`` exports (names imported in its ``__init__``, resolved to their
    functions): ``{name: {"module": ..., "params": [keyword, ...]}}`` (positional-or-keyword and keyword-only
    parameters, in order)."""
    tree = src.tree(RECIPE_PACKAGE)
    out: dict[str, dict[str, object]] = {}
    for node in tree.body if tree is not None else []:
        if not isinstance(node, ast.ImportFrom):
            continue
        module = src._absolute(RECIPE_PACKAGE, node)
        mod_tree = src.tree(module)
        defs = {f.name: f for f in (mod_tree.body if mod_tree is not None else []) if isinstance(f, ast.FunctionDef)}
        for alias in node.names:
            func = defs.get(alias.name)
            if func is not None:
                a = func.args
                out[alias.asname or alias.name] = {
                    "module": module, "params": [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]]}
    return dict(sorted(out.items()))


#: An archive or folder name that ends in a commit (``megatron-bridge-nemotron_3_ultra-4588417.tgz``).
_COMMIT_RE = re.compile(r"-([0-9a-f]{7,40})(?:\.tgz|\.tar\.gz|\.tar)?$")


def _commit(path: Path) -> str | None:
    m = _COMMIT_RE.search(path.name)
    return m.group(1)[:7] if m else None


def generate(bridge: Path, core: Path, commit: str | None = None) -> dict:
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
        required: dict[str, list[str]] = {}
        merged: dict = {}
        candidates = [(n, src.resolve(module, n)) for n in _annotation_names(st.annotation)]
        if name == "model":
            candidates += [(c.name, (m, c)) for m, c in src.all_classes() if MODEL_EXTRA.match(c.name)]
        for type_name, res in candidates:
            if res is None or type_name in types:
                continue
            types.append(type_name)
            fields = col.fields(*res)
            required[type_name] = sorted(f for f, e in fields.items() if e.get("required"))
            for field, entry in fields.items():
                # a section merges several classes: whether a field is required is said per class (``required``)
                merged.setdefault(field, {k: v for k, v in entry.items() if k != "required"})
        sections[name] = {"annotation": ast.unparse(st.annotation), "types": types,
                          "required": {t: r for t, r in required.items() if r},
                          "fields": dict(sorted(merged.items()))}
    package = _version(src, [bridge], "megatron_bridge")
    commit = (commit or _commit(bridge) or "")[:7] or None
    return {
        "framework": "megatron-bridge",
        "version": f"{package}-{commit}" if commit and package else (package or commit),
        "package_version": package,
        "commit": commit,
        "megatron_core": _version(src, [core], "megatron_core"),
        "megatron_core_commit": _commit(core),
        "source": f"{bridge.name} + {core.name}, ConfigContainer in {CONTAINER[0]}, read with ast",
        "generated_by": "scripts/megatron_bridge_keys.py",
        "sections": sections,
        "mixed_precision_recipes": mixed_precision_recipes(src),
        "mixed_precision_defaults": mixed_precision_defaults(src),
        "mixed_precision_presets": mixed_precision_presets(src),
        "recipes": recipes(src),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bridge", type=Path, required=True,
                   help="Megatron-Bridge sources: a git-archive .tgz, a wheel or a source folder")
    p.add_argument("--core", type=Path, required=True, help="Megatron-Core (Megatron-LM) sources of the same pin")
    p.add_argument("--commit", default=None,
                   help="Megatron-Bridge's commit (default: from an archive name ending in -<commit>.tgz)")
    p.add_argument("--out", type=Path, default=None, help="output JSON (default: src/nemotron/keylists/)")
    a = p.parse_args(argv)
    data = generate(a.bridge, a.core, a.commit)
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
