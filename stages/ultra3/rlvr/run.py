"""Runtime entry of `nemotron ultra3 rlvr`: ``python run.py --config train.yaml``.

The cluster backend (``backend: nemo-rl``) runs inside the nemo-rl container and checks that
nemo_rl is importable before anything heavy; its runtime and the ``local`` backend arrive with
the RL runtime issue: until then this entry says so in one line and exits 1.
"""

import sys

from nemotron.entry import Backend, run

if __name__ == "__main__":
    sys.exit(run("ultra3 rlvr", {"nemo-rl": Backend(requires="nemo_rl", image="nemo-rl"), "local": Backend()},
                 default="nemo-rl"))
