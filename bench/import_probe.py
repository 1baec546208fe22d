"""Name every module an import path lacks, in one pass (a script for the GPU machine's kit; never a CI test).

    python bench/import_probe.py [--where MOD,MOD] TARGET [TARGET ...]

Each TARGET is a module name, or a ``.py`` file run as a script (``runpy``, ``__name__`` = ``"probe"``). For each
module found missing while importing a target, an empty module of that name is put in ``sys.modules`` and the import
is tried again (up to 60 times): nothing of the stand-in runs, it only lets the listing go on, so one pass names
every missing package. Other import errors are printed with a short traceback. ``--where``: print the version and
location each of these modules was loaded from. Exit code 1 when a module was missing, else 0.
"""

from __future__ import annotations

import argparse
import importlib
import runpy
import sys
import traceback
import types


def probe(targets: list[str]) -> list[tuple[str, str]]:
    """Import each target; returns ``(target, missing module)`` pairs in the order they were found."""
    missing: list[tuple[str, str]] = []
    for t in targets:
        for _ in range(60):
            try:
                if t.endswith(".py"):
                    runpy.run_path(t, run_name="probe")
                else:
                    importlib.import_module(t)
                print(f"[gpu-stack] import {t}: ok")
                break
            except ModuleNotFoundError as exc:
                name = exc.name or str(exc)
                missing.append((t, name))
                sys.modules[name] = types.ModuleType(name)
            except Exception as exc:
                print(f"[gpu-stack] import {t}: {type(exc).__name__}: {exc}")
                traceback.print_exc(limit=4)
                break
    return missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--where", default="", help="comma list of modules whose version and location to print")
    ap.add_argument("targets", nargs="+")
    args = ap.parse_args()
    missing = probe(args.targets)
    for mod in filter(None, args.where.split(",")):
        m = sys.modules.get(mod)
        print(f"[gpu-stack] {mod}: {getattr(m, '__version__', '?')} from "
              f"{getattr(m, '__file__', None) or list(getattr(m, '__path__', []))}")
    for t, name in missing:
        print(f"[gpu-stack] missing for {t}: {name}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
