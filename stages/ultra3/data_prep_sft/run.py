"""Runtime entry of `nemotron ultra3 data prep sft`: ``python run.py --config train.yaml``.

All logic lives in :mod:`nemotron.data.sft`; :mod:`nemotron.runtime.dispatch` reads the config and maps errors
to exit codes.
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "ray": Backend("nemotron.data.sft:main"),
}
DEFAULT = "ray"

if __name__ == "__main__":
    sys.exit(run("ultra3 data prep sft", BACKENDS, default=DEFAULT))
