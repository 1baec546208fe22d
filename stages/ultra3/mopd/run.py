"""Runtime entry of `nemotron ultra3 mopd`: ``python run.py --config train.yaml``.

Runs as `ultra3 rlvr` does (see its run.py: inside the nemo-rl container on the Ray head of the job, the
checks first), with GRPO distilling on-policy from the teacher panel
(:func:`nemotron.runtime.rl.nemo_rl.mopd_main`). The ``local`` backend arrives with the RL local runtime:
until then this entry says so in one line and exits 1.
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "nemo-rl": Backend(runtime="nemotron.runtime.rl.nemo_rl:mopd_main", image="nemo-rl"),
    "local": Backend("nemotron.runtime.rl.rl_entry:mopd"),
}
DEFAULT = "nemo-rl"

if __name__ == "__main__":
    sys.exit(run("ultra3 mopd", BACKENDS, default=DEFAULT))
