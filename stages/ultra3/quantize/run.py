"""Runtime entry of `nemotron ultra3 quantize`: ``python run.py --config train.yaml``.

The cluster backend (``backend: megatron-bridge``) runs inside the nemo container and checks that
megatron.bridge is importable before anything heavy; its runtime and the ``local`` backend arrive with
the quantization issue: until then this entry says so in one line and exits 1.
"""

import sys

from nemotron.entry import Backend, run

if __name__ == "__main__":
    sys.exit(run("ultra3 quantize", {"megatron-bridge": Backend(requires="megatron.bridge", image="nemo"), "local": Backend()},
                 default="megatron-bridge"))
