"""Runtime entry of `nemotron ultra3 mopd-warmup`: ``python run.py --config train.yaml``.

``backend: nemo-rl`` (:func:`nemotron.runtime.rl.warmup.cluster_main`, inside the nemo-rl container): the teachers
answer the RL prompts with vLLM, NeMo RL's SFT entry trains the student on the answers, NeMo RL's converter writes the
Hugging Face form. ``backend: local`` (:func:`nemotron.runtime.rl.warmup_local.local_main`): the same on this machine
with transformers, plus the student's reverse KL to the teachers before and after.
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "nemo-rl": Backend(runtime="nemotron.runtime.rl.warmup:cluster_main", image="nemo-rl"),
    "local": Backend("nemotron.runtime.rl.warmup_local:local_main"),
}
DEFAULT = "nemo-rl"

if __name__ == "__main__":
    sys.exit(run("ultra3 mopd-warmup", BACKENDS, default=DEFAULT))
