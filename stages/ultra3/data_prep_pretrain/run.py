"""Runtime entry of `nemotron ultra3 data prep pretrain`: python run.py --config train.yaml

The CLI (local run) and the Slurm job both run this script with the compiled, fully resolved stage
config. All logic lives in nemotron.data.pretrain; this file only loads the YAML and maps errors to
exit codes: 0 done, 2 config/input problem, 1 runtime failure, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Tokenize a pretraining blend into Megatron .bin/.idx shards.")
    parser.add_argument("--config", required=True, help="compiled stage config (YAML)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)

    import yaml

    from nemotron.errors import NemotronError

    try:
        with open(args.config, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh) or {}
        from nemotron.data.pretrain import main as run

        return run(cfg)
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


if __name__ == "__main__":
    sys.exit(main())
