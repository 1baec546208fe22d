"""Runtime entry of `nemotron ultra3 pretrain`: ``python run.py --config train.yaml``.

``backend: local`` trains the catalogue's small NemotronH here (:mod:`nemotron.runtime`; exit 75 =
saved and stopped on a signal, run again to resume). ``backend: megatron-bridge`` runs inside the NeMo
container (:mod:`nemotron.runtime.megatron.megatron_bridge`): it checks the container, the GPUs and the inputs before
anything heavy, then runs Megatron-Bridge's training (exit 75 = saved and stopped on SIGTERM; a job submitted
with ``run.requeue`` then requeues itself).
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "local": Backend("nemotron.runtime.megatron.entry:train", per_stage=True),
    "megatron-bridge": Backend("nemotron.runtime.megatron.megatron_bridge:main", per_stage=True),
}
DEFAULT = "megatron-bridge"

if __name__ == "__main__":
    sys.exit(run("ultra3 pretrain", BACKENDS, default=DEFAULT))
