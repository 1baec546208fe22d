"""Runtime entry of `nemotron ultra3 convert`: ``python run.py --config train.yaml``.

``backend: local`` rewrites a Hugging Face NemotronH checkpoint's config to the v4 form NeMo RL reads
(:func:`nemotron.runtime.megatron.convert_local.local_main`). ``backend: megatron-bridge`` (AutoBridge HF <-> Megatron,
:mod:`nemotron.runtime.megatron.megatron_bridge`) runs inside the NeMo container; it checks the container, the GPUs
and the source checkpoint first.
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "local": Backend("nemotron.runtime.megatron.convert_local:local_main"),
    "megatron-bridge": Backend("nemotron.runtime.megatron.megatron_bridge:main", per_stage=True),
}
DEFAULT = "megatron-bridge"

if __name__ == "__main__":
    sys.exit(run("ultra3 convert", BACKENDS, default=DEFAULT))
