"""Runtime entry of `nemotron ultra3 quantize`: ``python run.py --config train.yaml``.

``backend: local`` quantizes a small NemotronH here with nvidia-modelopt (:mod:`nemotron.runtime.quantization.quantize`:
calibrate on real text, apply the recipe, export a Hugging Face checkpoint, compare with the BF16 model).
``backend: megatron-bridge`` runs under torchrun inside the NeMo container
(:mod:`nemotron.runtime.quantization.quantize_cluster`; it checks its inputs, GPUs and frameworks first).
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "megatron-bridge": Backend("nemotron.runtime.quantization.quantize_cluster:main", requires="megatron.bridge", image="nemo"),
    "local": Backend("nemotron.runtime.quantization.quantize:main"),
}
DEFAULT = "megatron-bridge"

if __name__ == "__main__":
    sys.exit(run("ultra3 quantize", BACKENDS, default=DEFAULT))
