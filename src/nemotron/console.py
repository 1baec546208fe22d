"""The ``nemotron`` console script.

It loads the command line (:mod:`nemotron.cli.main`) inside a guard, so that Ctrl-C while Python is still
importing it (the first ~50 ms) ends the same way as Ctrl-C later: the line ``interrupted`` and exit
code 130, no traceback. Only ``sys`` is imported before the guard.
"""

import sys


def main() -> int:
    """Run the command line on ``sys.argv``; returns the exit code (see :func:`nemotron.cli.main`)."""
    try:
        from nemotron.cli.main import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
