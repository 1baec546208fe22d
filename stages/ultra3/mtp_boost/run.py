"""Runtime entry of `nemotron ultra3 mtp-boost`: ``python run.py --config train.yaml``.

``backend: local`` trains the MTP head of a frozen backbone on this machine and measures its acceptance length
(:mod:`nemotron.runtime.megatron.mtp_local`). ``backend: megatron-bridge`` (:mod:`nemotron.runtime.megatron.mtp_cluster`) refuses, with the dry-run's own rule
(``mtp-boost-framework``): the pinned Megatron-Core trains MTP with cross-entropy on the gold tokens and cannot
freeze the backbone (docs/mtp_boost.md).
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "megatron-bridge": Backend("nemotron.runtime.megatron.mtp_cluster:main"),
    "local": Backend("nemotron.runtime.megatron.mtp_local:main"),
}
DEFAULT = "megatron-bridge"

if __name__ == "__main__":
    sys.exit(run("ultra3 mtp-boost", BACKENDS, default=DEFAULT))
