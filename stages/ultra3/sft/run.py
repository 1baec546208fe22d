"""Runtime entry of `nemotron ultra3 sft`: ``python run.py --config train.yaml``.

The backends of `ultra3 pretrain` (see its run.py), fine-tuning on the packed Parquet of `data prep sft`
with the loss on the assistant tokens only: ``backend: local`` here (:func:`nemotron.runtime.megatron.entry.train`),
``backend: megatron-bridge`` inside the NeMo container (:func:`nemotron.runtime.megatron.megatron_bridge.main`),
each with its checks first and exit 75 when saved and stopped on a signal.
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "local": Backend("nemotron.runtime.megatron.entry:train", per_stage=True),
    "megatron-bridge": Backend("nemotron.runtime.megatron.megatron_bridge:main", per_stage=True),
}
DEFAULT = "megatron-bridge"

if __name__ == "__main__":
    sys.exit(run("ultra3 sft", BACKENDS, default=DEFAULT))
