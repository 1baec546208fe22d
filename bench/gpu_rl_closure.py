"""The import closure of NeMo RL's GRPO entry on the Megatron-generation path, by distribution (a helper of
``bench/gpu_rl_pack.sh``; never a CI test).

    PYTHONPATH=<NeMo RL>:<Megatron-Bridge src>:<Megatron-LM>:src:tests/contract \\
        .venv-upstream/bin/python tests/contract/boot.py bench/gpu_rl_closure.py [OUT.json]

Imports, for real, what ``examples/run_grpo.py`` imports at its top and what its workers import when Ray builds
them on this path (:data:`TARGETS`: the Megatron policy worker, the Megatron generation worker, the math
environment, the logger, the converter our ``finish()`` runs). A module that is missing is recorded and replaced by
an empty module so that one pass names every one (for this listing only: nothing of it runs). Then every module
loaded from outside the upstream sources is mapped to its distribution (``importlib.metadata``), and the function-
level imports of the loaded NeMo RL modules (``ast``: what a worker imports lazily) are listed by top-level name
with whether they resolved. Prints one JSON object (also written to OUT.json): ``distributions`` (name -> version),
``missing`` (module -> the target that needed it), ``lazy_unresolved`` (top-level names of lazy imports that do not
resolve here, with the NeMo RL files that have them).

Run in the contract interpreter (Python 3.11, CPU torch; tests/contract/boot.py stands in for Transformer Engine
only): the closure is a property of the sources, not of the interpreter's minor version.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as md
import importlib.util
import json
import runpy
import sys
import traceback
import types
from pathlib import Path

TARGETS = [
    "nemo_rl.algorithms.grpo",
    "nemo_rl.algorithms.utils",
    "nemo_rl.data.utils",
    "nemo_rl.distributed.virtual_cluster",
    "nemo_rl.models.generation",
    "nemo_rl.utils.config",
    "nemo_rl.utils.logger",
    "nemo_rl.models.policy.lm_policy",
    "nemo_rl.models.policy.workers.megatron_policy_worker",
    "nemo_rl.models.generation.megatron.megatron_generation",
    "nemo_rl.models.generation.megatron.megatron_worker",
    "nemo_rl.environments.math_environment",
    "nemo_rl.utils.checkpoint",
    "nemo_rl.algorithms.loss",
]
#: scripts run as modules (their ``__main__`` block is not entered)
SCRIPTS = ["examples/run_grpo.py", "examples/converters/convert_megatron_to_hf.py"]


def main() -> int:
    root = Path(importlib.util.find_spec("nemo_rl").origin).resolve().parent.parent
    before = set(sys.modules)
    missing: dict[str, str] = {}
    errors: dict[str, str] = {}

    def attempt(label, fn):
        for _ in range(80):
            try:
                fn()
                return
            except ModuleNotFoundError as exc:
                name = exc.name or str(exc)
                if name in sys.modules and not isinstance(sys.modules[name], types.ModuleType):
                    break
                missing.setdefault(name, label)
                sys.modules[name] = types.ModuleType(name)
                sys.modules[name].__path__ = []  # a package, so that its submodules are "missing" in turn
            except Exception as exc:  # noqa: BLE001 - recorded, the listing goes on
                errors[label] = f"{type(exc).__name__}: {exc}"[:400] + "\n" + traceback.format_exc(limit=3)[-600:]
                return

    for t in TARGETS:
        attempt(t, lambda t=t: importlib.import_module(t))
    for s in SCRIPTS:
        attempt(s, lambda s=s: runpy.run_path(str(root / s), run_name="closure"))

    top = {m.split(".")[0] for m in set(sys.modules) - before if sys.modules.get(m) is not None}
    top |= {m.split(".")[0] for m in set(sys.modules) if m in before}  # already loaded by boot (torch, ...)
    by_top = md.packages_distributions()
    upstream_roots = ("nemo_rl", "megatron", "nemotron", "examples")
    dists: dict[str, str] = {}
    unowned: list[str] = []
    for name in sorted(top):
        if name in upstream_roots or name in sys.stdlib_module_names or name.startswith("_") or name in missing:
            continue
        owners = by_top.get(name)
        if not owners:
            unowned.append(name)
            continue
        for d in owners:
            try:
                dists[d] = md.version(d)
            except md.PackageNotFoundError:
                pass
    # lazy (function-level) imports of the loaded NeMo RL modules
    lazy: dict[str, set[str]] = {}
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not name.startswith("nemo_rl") or not f or not f.endswith(".py"):
            continue
        tree = ast.parse(Path(f).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                t = n.split(".")[0]
                if t in sys.stdlib_module_names or t in upstream_roots:
                    continue
                try:
                    ok = importlib.util.find_spec(t) is not None
                except (ImportError, ValueError):
                    ok = False
                if not ok or t in missing:
                    lazy.setdefault(t, set()).add(str(Path(f).resolve().relative_to(root)))
    out = {"distributions": dict(sorted(dists.items())), "missing": missing, "errors": errors,
           "unowned_top_level": unowned, "lazy_unresolved": {k: sorted(v) for k, v in sorted(lazy.items())}}
    text = json.dumps(out, indent=1)
    print(text)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
