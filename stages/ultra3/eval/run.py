"""Runtime entry of `nemotron ultra3 eval`: ``python run.py --config train.yaml``.

``backend: local`` measures checkpoints here (:mod:`nemotron.runtime.eval.evaluate`: held-out perplexity, GSM8K accuracy
with NeMo RL's math check, a chat sample; ``eval.json``). ``backend: nemo-rl`` runs NeMo RL's evaluator
(``examples/run_eval.py``: vLLM generation, the math environment) inside the nemo-rl container on the Ray head of the
job (:func:`nemotron.runtime.rl.nemo_rl.eval_main`).
"""

import sys

from nemotron.runtime.dispatch import Backend, run

BACKENDS = {
    "nemo-rl": Backend(runtime="nemotron.runtime.rl.nemo_rl:eval_main", image="nemo-rl"),
    "local": Backend("nemotron.runtime.eval.evaluate:main"),
}
DEFAULT = "nemo-rl"

if __name__ == "__main__":
    sys.exit(run("ultra3 eval", BACKENDS, default=DEFAULT))
