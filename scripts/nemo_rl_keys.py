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

Output (JSON, the shape :mod:`nemotron.keys` reads): ``{"framework": "nemo-rl", "version", "commit",
"root": "MasterConfig", "source", "sections": {NAME: {"types": [...], "fields": {FIELD: {"type": ...,
["fields": {...}], ["mapping": true]}}}}}``; ``mapping`` marks a dict-typed field (any sub-key).
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
        sec["fields"] = _sorted(sec["fields"])
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
    }


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
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    n = sum(len(s["fields"]) for s in data["sections"].values())
    print(f"{out}: NeMo RL {data['version']}: {len(data['sections'])} sections, {n} top-level fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
