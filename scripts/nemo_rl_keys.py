"""Generate the NeMo RL key list: every key NeMo RL's GRPO / on-policy-distillation config knows, as data.

    git clone https://github.com/NVIDIA-NeMo/RL nemo-rl && git -C nemo-rl checkout 7ea279a
    python scripts/nemo_rl_keys.py --source nemo-rl [--out src/nemotron/keylists/nemo-rl-main-7ea279a.json]

NeMo RL is not on PyPI: the input is a source checkout (the folder holding ``nemo_rl/`` and
``examples/``) at the commit ``stages/images.toml`` pins for the ``nemo-rl`` image. Nothing is
imported: the sources are parsed with ``ast`` by the same machinery as the Megatron-Bridge key list
(``scripts/megatron_bridge_keys.py``: imports followed through re-exports, inherited fields,
recursion into fields whose type is a config class). NeMo RL's config classes are ``TypedDict``s and
pydantic ``BaseModel``s, most of them with ``extra="allow"`` — which is exactly why an unknown key
would pass silently there and why we check it before a job is queued.

The key list is the union of

* the fields of ``MasterConfig`` (``nemo_rl/algorithms/grpo.py``: the config ``run_grpo*.py`` and the
  Ultra launcher's ``run_grpo_nemo_gym.py`` build), each section's classes and their nested config
  classes; ``policy.generation`` also takes the fields of every generation backend's config class
  (``VllmConfig``, ``SGLangConfig``, ... extend ``GenerationConfig``);
* the keys the example configs at that commit set (``examples/configs/grpo_*.yaml`` and
  ``examples/nemo_gym/nemotron-3-ultra/*.yaml``): NeMo RL reads some keys
  with ``.get`` that no class declares.

It also records, from the same checkout:

* ``required``: which keys ``MasterConfig`` requires (``classes``: every config class reachable from it,
  by ``module.Class``, with the fields it ``required`` — a ``TypedDict`` field not marked ``NotRequired``
  (or ``Required`` in a ``total=False`` one), a pydantic/dataclass field without a default —, its
  ``literals`` (``enabled: Literal[True]``: what tells union members apart, e.g. ``MegatronConfig`` from
  ``MegatronConfigDisabled``) and, per field, the config classes it may hold); :func:`nemotron.config.keys.missing_keys`
  walks a config against it;
* ``recipes``: the Ultra recipes ``examples/nemo_gym/nemotron-3-ultra/*.yaml`` as NeMo RL's own loader
  (``nemo_rl.utils.config.load_config``, ``defaults:`` inheritance included) composes them, interpolations
  left as written (``OmegaConf.to_container(resolve=False)``): the base a stage config names with
  ``nemo_rl.base`` (this needs ``omegaconf`` and ``hydra-core``: run the script with the contract
  interpreter, ``.venv-upstream/bin/python``);
* ``metrics``: the ``checkpointing.metric_name`` prefixes GRPO's checkpoint step asserts (the
  ``full_metric_name.startswith(...)`` strings) and the metric names ``validate()`` always reports (the
  keys of its ``val_metrics`` dict; ``grouped``: those it adds only with ``val_num_generations_per_prompt
  > 1``) and the train step's fixed ones;
* ``entry_reads``: per GRPO entry script, the config keys its ``main()`` reads with ``[...]`` outside any
  test (``config.policy["draft"]["enabled"]`` in ``examples/run_grpo.py``): a missing one is a
  ``KeyError`` before training.

Output (JSON, the shape :mod:`nemotron.config.keys` reads): ``{"framework": "nemo-rl", "version", "commit",
"root": "MasterConfig", "source", "sections": {NAME: {"types": [...], "fields": {FIELD: {"type": ...,
["fields": {...}], ["mapping": true]}}}}, "required", "recipes", "metrics", "entry_reads"}``; ``mapping``
marks a dict-typed field (any sub-key).

    .venv-upstream/bin/python scripts/nemo_rl_keys.py --source /tmp/nemotron-upstream/nemo-rl-7ea279a/RL \
        --commit 7ea279a<...40 hex>
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from megatron_bridge_keys import Collector, Sources, _annotation_names, _is_mapping

ROOT = ("nemo_rl.algorithms.grpo", "MasterConfig")
#: Base class of the generation backends' config classes (``policy.generation.*``).
GENERATION_BASE = "GenerationConfig"
EXAMPLE_YAMLS = ("examples/configs/grpo_*.yaml",
                 "examples/nemo_gym/nemotron-3-ultra/*.yaml")
#: The recipes a stage config may name as its ``nemo_rl.base`` (resolved with NeMo RL's own loader).
RECIPE_YAMLS = "examples/nemo_gym/nemotron-3-ultra/*.yaml"
#: The GRPO entry scripts our runtime starts (``nemotron.runtime.rl.nemo_rl.entry_script``).
ENTRY_SCRIPTS = ("examples/run_grpo.py", "examples/nemo_gym/run_grpo_nemo_gym.py")
#: GRPO's module: its ``validate()`` and training loops (the checkpoint step's metric rule).
GRPO_MODULE = "nemo_rl/algorithms/grpo.py"


def _is_config_class(cls: ast.ClassDef) -> bool:
    """TypedDicts, pydantic models and dataclasses whose name says config (not enums, not workers)."""
    bases = " ".join(ast.unparse(b) for b in cls.bases)
    decos = " ".join(ast.unparse(d) for d in cls.decorator_list)
    return ("TypedDict" in bases or "BaseModel" in bases or "dataclass" in decos
            or cls.name.endswith(("Config", "Options", "Kwargs")))


def _merge(into: dict, add: dict) -> None:
    for name, entry in add.items():
        have = into.setdefault(name, dict(entry))
        if have is entry or have == entry:
            continue
        if "fields" in entry and not have.get("mapping"):
            _merge(have.setdefault("fields", {}), entry["fields"])


def _yaml_fields(node: dict, source: str) -> dict:
    out: dict = {}
    for key, value in node.items():
        if key == "defaults" or not isinstance(key, str):
            continue
        entry: dict = {"type": f"(set in {source})"}
        if isinstance(value, dict) and value:
            entry["fields"] = _yaml_fields(value, source)
        out[key] = entry
    return out


# ------------------------------------------------------------------------------------ required keys
_WRAPPERS = ("NotRequired", "Required", "Annotated", "ReadOnly")


def _outer(ann: ast.expr) -> tuple[str | None, ast.expr]:
    """``NotRequired[X]`` → ("NotRequired", X); anything else → (None, ann)."""
    if isinstance(ann, ast.Subscript):
        head = ann.value.id if isinstance(ann.value, ast.Name) else (
            ann.value.attr if isinstance(ann.value, ast.Attribute) else None)
        if head in _WRAPPERS:
            inner = ann.slice.elts[0] if head == "Annotated" and isinstance(ann.slice, ast.Tuple) else ann.slice
            return head, inner
    return None, ann


def _literal(ann: ast.expr) -> tuple[bool, object]:
    """``Literal[True]`` (one value) → (True, True); else (False, None)."""
    if isinstance(ann, ast.Subscript):
        head = ann.value.id if isinstance(ann.value, ast.Name) else getattr(ann.value, "attr", None)
        if head == "Literal" and isinstance(ann.slice, ast.Constant):
            return True, ann.slice.value
    return False, None


class Requirements:
    """Which fields each config class requires, following inheritance and field types (``ast``, nothing
    imported). ``classes`` maps ``module.Class`` to ``{"kind", "literals", "required", "fields"}`` where
    ``fields`` maps every declared field to the config classes (``module.Class``) its annotation names."""

    def __init__(self, src: Sources) -> None:
        self.src = src
        self.classes: dict[str, dict] = {}

    def kind(self, module: str, cls: ast.ClassDef, seen: frozenset = frozenset()) -> str | None:
        """``typeddict``, ``pydantic``, ``dataclass`` or None (not a config class)."""
        if any("dataclass" in ast.unparse(d) for d in cls.decorator_list):
            return "dataclass"
        for base in cls.bases:
            text = ast.unparse(base)
            if text.split(".")[-1] == "TypedDict":
                return "typeddict"
            if text.split(".")[-1] == "BaseModel":
                return "pydantic"
            for name in _annotation_names(base):
                found = self.src.resolve(module, name)
                if found is not None and (found[0], found[1].name) not in seen:
                    k = self.kind(*found, seen=seen | {(module, cls.name)})
                    if k:
                        return k
        return None

    def visit(self, module: str, cls: ast.ClassDef) -> str | None:
        """The key of ``cls`` in :attr:`classes` (added with everything it reaches), or None."""
        kind = self.kind(module, cls)
        if kind is None:
            return None
        key = f"{module}.{cls.name}"
        if key in self.classes:
            return key
        entry: dict = {"kind": kind, "literals": {}, "required": [], "fields": {}}
        self.classes[key] = entry  # cycle guard
        required: set[str] = set()
        for base in cls.bases:
            for name in _annotation_names(base):
                found = self.src.resolve(module, name)
                bkey = self.visit(*found) if found is not None else None
                if bkey is not None:
                    b = self.classes[bkey]
                    required |= set(b["required"])
                    entry["literals"].update(b["literals"])
                    entry["fields"].update(b["fields"])
        total = not any(k.arg == "total" and isinstance(k.value, ast.Constant) and k.value.value is False
                        for k in cls.keywords)
        for st in cls.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            name = st.target.id
            text = ast.unparse(st.annotation)
            if "ClassVar" in text or "InitVar" in text or name == "model_config":
                continue
            wrapper, inner = _outer(st.annotation)
            if kind == "typeddict":
                req = wrapper == "Required" or (total and wrapper != "NotRequired")
            else:
                req = st.value is None
            required.discard(name)
            if req:
                required.add(name)
            is_lit, value = _literal(inner)
            if is_lit:
                entry["literals"][name] = value
            else:
                entry["literals"].pop(name, None)
            targets = []
            for tname in _annotation_names(inner):
                found = self.src.resolve(module, tname)
                tkey = self.visit(*found) if found is not None else None
                if tkey is not None and tkey not in targets:
                    targets.append(tkey)
            entry["fields"][name] = targets
        entry["required"] = sorted(required)
        entry["fields"] = dict(sorted(entry["fields"].items()))
        return key


def requirements(src: Sources, module: str, root: ast.ClassDef) -> dict:
    req = Requirements(src)
    key = req.visit(module, root)
    return {"root": key, "classes": dict(sorted(req.classes.items()))}


# ------------------------------------------------------------------------------------ recipes
def recipes(source: Path) -> dict:
    """``{relative path: config}`` of every Ultra recipe, composed by NeMo RL's own ``load_config`` (its
    ``defaults:`` chain followed), interpolations kept as written. Empty when the checkout has none.

    Raises:
        SystemExit: NeMo RL's loader cannot be imported (omegaconf / hydra-core missing).
    """
    paths = sorted(source.glob(RECIPE_YAMLS))
    if not paths:
        return {}
    sys.path.insert(0, str(source))
    try:
        from nemo_rl.utils.config import load_config
        from omegaconf import OmegaConf
    except ImportError as exc:
        raise SystemExit(f"cannot import NeMo RL's config loader from {source} ({exc}); run this script with "
                         "the contract interpreter: .venv-upstream/bin/python scripts/nemo_rl_keys.py ...") from None
    finally:
        sys.path.remove(str(source))
    return {p.relative_to(source).as_posix(): OmegaConf.to_container(load_config(p), resolve=False) for p in paths}


# ------------------------------------------------------------------------------------ metrics
def _dict_keys(node: ast.AST) -> list[str]:
    return [k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant) and isinstance(k.value, str)]


def metrics(source: Path) -> dict:
    """The checkpoint metric rule of GRPO (``nemo_rl/algorithms/grpo.py``): ``prefixes`` (the strings the
    checkpoint step's ``full_metric_name.startswith(...)`` asserts), ``val`` (the keys of the dict
    ``validate()`` builds as ``val_metrics``), ``val_grouped`` (keys it adds by ``val_metrics["x"] = ...``:
    ``pass_k``, reported when ``val_num_generations_per_prompt > 1``), ``train`` (the keys of the train
    step's ``metrics = {...}`` literal; more are added at run time). Empty when the file is absent."""
    path = source / GRPO_MODULE
    if not path.is_file():
        return {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict = {"source": GRPO_MODULE, "prefixes": [], "val": [], "val_grouped": [], "train": []}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "full_metric_name"):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and arg.value not in out["prefixes"]:
                        out["prefixes"].append(arg.value)
            if fn.name == "validate" and isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id == "val_metrics" and isinstance(node.value, ast.Dict):
                        out["val"] += [k for k in _dict_keys(node.value) if k not in out["val"]]
                    if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "val_metrics"
                            and isinstance(t.slice, ast.Constant)):
                        out["val_grouped"].append(t.slice.value)
            if fn.name == "grpo_train" and isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                if any(isinstance(t, ast.Name) and t.id == "metrics" for t in node.targets):
                    keys = _dict_keys(node.value)
                    if "loss" in keys:
                        out["train"] += [k for k in keys if k not in out["train"]]
    out["prefixes"].sort()
    return out


# ------------------------------------------------------------------------------------ entry reads
_MASTER_SECTIONS = ("policy", "loss_fn", "env", "data", "grpo", "logger", "cluster", "checkpointing")


def _chain(node: ast.AST) -> list[str] | None:
    """``config.policy["draft"]["enabled"]`` → ["policy", "draft", "enabled"]; else None."""
    keys: list[str] = []
    while isinstance(node, ast.Subscript):
        if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            return None
        keys.insert(0, node.slice.value)
        node = node.value
    if (keys and isinstance(node, ast.Attribute) and node.attr in _MASTER_SECTIONS
            and isinstance(node.value, ast.Name) and node.value.id == "config"):
        return [node.attr, *keys]
    return None


def entry_reads(source: Path) -> dict:
    """Per entry script (:data:`ENTRY_SCRIPTS`), the keys its ``main()`` reads as ``config.<section>[...]``
    in statements that run unconditionally (not inside an ``if``/loop/``try`` handler, not in a boolean test
    such as ``"draft" in config.policy and ...``), the longest chain only, assignment targets excluded."""
    out: dict = {}
    for rel in ENTRY_SCRIPTS:
        path = source / rel
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
        found: list[str] = []

        def scan(stmts: list[ast.stmt]) -> None:
            for st in stmts:
                if isinstance(st, (ast.If, ast.For, ast.While, ast.AsyncFor, ast.Match, ast.FunctionDef)):
                    continue
                if isinstance(st, (ast.With, ast.AsyncWith)):
                    scan(st.body)
                    continue
                if isinstance(st, ast.Try):
                    scan(st.body)
                    continue
                stores = {id(t) for t in ast.walk(st) if isinstance(getattr(t, "ctx", None), ast.Store)}
                guarded = {id(n) for b in ast.walk(st) if isinstance(b, (ast.BoolOp, ast.IfExp))
                           for n in ast.walk(b)}
                inner = {id(n.value) for n in ast.walk(st) if isinstance(n, ast.Subscript)}
                for node in ast.walk(st):
                    if id(node) in stores or id(node) in guarded or id(node) in inner:
                        continue
                    chain = _chain(node)
                    if chain and len(chain) > 1 and ".".join(chain) not in found:
                        found.append(".".join(chain))

        if main is not None:
            scan(main.body)
        out[rel] = found
    return out


def generate(source: Path, commit: str) -> dict:
    src = Sources([source], packages=("nemo_rl/",))
    found = src.resolve(*ROOT)
    if found is None:
        raise SystemExit(f"{source}: no {ROOT[1]} in {ROOT[0]} (is this a NeMo RL checkout?)")
    module, root = found
    col = Collector(src, is_config=_is_config_class, max_depth=6)
    extra_generation = [(m, c) for m, c in src.all_classes()
                        if any(GENERATION_BASE in _annotation_names(b) for b in c.bases)]
    sections: dict = {}
    for st in root.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        name = st.target.id
        types: list[str] = []
        merged: dict = {}
        mapping = _is_mapping(st.annotation) and not any(
            src.resolve(module, n) for n in _annotation_names(st.annotation))
        for type_name in _annotation_names(st.annotation):
            res = src.resolve(module, type_name)
            if res is None or type_name in types:
                continue
            types.append(type_name)
            _merge(merged, col.fields(*res))
        if name == "policy" and "generation" in merged:
            gen = merged["generation"].setdefault("fields", {})
            for m, c in extra_generation:
                _merge(gen, col.fields(m, c))
        sections[name] = {"annotation": ast.unparse(st.annotation), "types": types, "fields": merged}
        if mapping:
            sections[name]["mapping"] = True
    yamls = []
    for pattern in EXAMPLE_YAMLS:
        for path in sorted(source.glob(pattern)):
            rel = path.relative_to(source).as_posix()
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if not isinstance(data, dict):
                continue
            yamls.append(rel)
            for head, value in data.items():
                if head == "defaults" or not isinstance(head, str):
                    continue
                sec = sections.setdefault(head, {"annotation": f"(set in {rel})", "types": [], "fields": {}})
                if isinstance(value, dict) and not sec.get("mapping"):
                    _merge(sec["fields"], _yaml_fields(value, rel))
    for sec in sections.values():
        sec["fields"] = _sorted(_without_required(sec["fields"]))
    return {
        "framework": "nemo-rl",
        "label": "NeMo RL",
        "version": f"main-{commit[:7]}",
        "commit": commit,
        "root": ROOT[1],
        "source": f"github.com/NVIDIA-NeMo/RL at {commit}: {ROOT[1]} in {ROOT[0]} and its config classes, "
                  f"read with ast, plus the keys of {len(yamls)} example configs",
        "example_configs": yamls,
        "generated_by": "scripts/nemo_rl_keys.py",
        "sections": dict(sorted(sections.items())),
        "required": requirements(src, module, root),
        "recipes": recipes(source),
        "metrics": metrics(source),
        "entry_reads": entry_reads(source),
    }


def _without_required(fields: dict) -> dict:
    """The field entries without the shared collector's per-field ``required`` mark: it reads a field without a
    default as required, which is a dataclass's rule; a ``TypedDict`` field is optional when ``NotRequired``
    (and pydantic's rule is the dataclass one). NeMo RL's requirements are said once, per class, in
    ``required`` (:class:`Requirements`)."""
    out = {}
    for name, entry in fields.items():
        entry = {k: v for k, v in entry.items() if k != "required"}
        if "fields" in entry:
            entry["fields"] = _without_required(entry["fields"])
        out[name] = entry
    return out


def _sorted(fields: dict) -> dict:
    out = {}
    for k in sorted(fields):
        entry = dict(fields[k])
        if "fields" in entry:
            entry["fields"] = _sorted(entry["fields"])
        out[k] = entry
    return out


def _commit_of(source: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit(f"{source}: not a git checkout; pass --commit") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", type=Path, required=True, help="NeMo RL source checkout (holds nemo_rl/ and examples/)")
    p.add_argument("--commit", default=None, help="the checkout's commit (default: git rev-parse HEAD there)")
    p.add_argument("--out", type=Path, default=None, help="output JSON (default: src/nemotron/keylists/)")
    a = p.parse_args(argv)
    commit = a.commit or _commit_of(a.source)
    data = generate(a.source, commit)
    out = a.out or Path(__file__).resolve().parents[1] / "src" / "nemotron" / "keylists" / \
        f"nemo-rl-{data['version']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # not sort_keys: the recipes keep their files' key order (the order the compiled config shows)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    n = sum(len(s["fields"]) for s in data["sections"].values())
    print(f"{out}: NeMo RL {data['version']}: {len(data['sections'])} sections, {n} top-level fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
