"""Runtime entry of `nemotron ultra3 rlvr`: ``python run.py --config train.yaml``.

The cluster backend (``backend: nemo-rl``) runs inside the nemo-rl container on the Ray head of the job:
nemotron.runtime.rl.nemo_rl checks the container and inputs (NeMo RL and the generation backend importable, checkpoint paths,
GPUs on the node; one line each, exit 1), translates the config and runs NeMo RL's GRPO entry. The
``local`` backend arrives with the RL local runtime: until then this entry says so in one line and exits 1.
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "nemo-rl": Backend(runtime="nemotron.runtime.rl.nemo_rl:rlvr_main", image="nemo-rl"),
    "local": Backend("nemotron.runtime.rl.rl_entry:rlvr"),
}
DEFAULT = "nemo-rl"

if __name__ == "__main__":
    sys.exit(run("ultra3 rlvr", BACKENDS, default=DEFAULT))
