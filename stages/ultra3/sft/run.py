"""Runtime entry of `nemotron ultra3 sft`: ``python run.py --config train.yaml``.

``backend: local`` trains the catalogue's small NemotronH here (:mod:`nemotron.runtime`; exit 75 =
saved and stopped on a signal, run again to resume). ``backend: megatron-bridge`` runs inside the NeMo
container; this entry checks that megatron.bridge is importable before anything heavy.
"""

import sys

from nemotron.entry import Backend, run

if __name__ == "__main__":
    sys.exit(run("ultra3 sft", {"local": Backend("nemotron.runtime.entry:sft"),
                             "megatron-bridge": Backend(requires="megatron.bridge", image="nemo")},
                 default="megatron-bridge"))
