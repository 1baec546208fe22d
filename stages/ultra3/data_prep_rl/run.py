"""Runtime entry of `nemotron ultra3 data prep rl`: ``python run.py --config train.yaml``.

All logic lives in :mod:`nemotron.data.rl`; :mod:`nemotron.runtime.dispatch` reads the config and maps errors
to exit codes.
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "ray": Backend("nemotron.data.rl:main"),
    # a released RL blend repository (nvidia/Nemotron-RL-Ultra-Training-Blends): -c ultra-blends
    "blends": Backend("nemotron.data.rl_blends:main"),
}
DEFAULT = "ray"

if __name__ == "__main__":
    sys.exit(run("ultra3 data prep rl", BACKENDS, default=DEFAULT))
