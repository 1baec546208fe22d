"""The runtime entry shared by the data stages' ``run.py`` scripts: ``python run.py --config train.yaml``.

The CLI (local run) and the Slurm job both run a stage's script with the compiled, fully resolved
stage config. :func:`run` loads the YAML, calls the stage's ``main(cfg)`` and maps errors to exit
codes: 0 done, 2 config/input problem, 1 runtime failure, 130 interrupted. Tracebacks only with
``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import sys


def run(module: str, description: str, argv: list[str] | None = None) -> int:
    """Run ``<module>.main(cfg)`` on the config file named by ``--config``; returns the exit code."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", required=True, help="compiled stage config (YAML)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)

    import yaml

    from nemotron.errors import NemotronError

    try:
        with open(args.config, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh) or {}
        return importlib.import_module(module).main(cfg)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if args.debug:
            raise
        print(f"error: cannot read config {args.config}: {exc.strerror}", file=sys.stderr)
        return 2
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{args.config}:{mark.line + 1}" if mark else args.config
        print(f"error: {where}: not valid YAML ({getattr(exc, 'problem', None) or exc})", file=sys.stderr)
        return 2
    except NemotronError as exc:
        if args.debug:
            raise
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
