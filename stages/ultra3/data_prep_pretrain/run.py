"""Runtime entry of `nemotron ultra3 data prep pretrain`: ``python run.py --config train.yaml``.

All logic lives in :mod:`nemotron.data.pretrain`; :mod:`nemotron.runtime.dispatch` reads the config and maps
errors to exit codes.
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "ray": Backend("nemotron.data.pretrain:main"),
}
DEFAULT = "ray"

if __name__ == "__main__":
    sys.exit(run("ultra3 data prep pretrain", BACKENDS, default=DEFAULT))
