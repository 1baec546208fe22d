"""Contract: the seed's single-node smoke test layout (``pretrain -c tiny``: the 4-layer Ultra slice on one node of
8 GPUs, TP1 and every rank given to expert parallelism, EP8) launched as the job launches it — ``torchrun
--nproc-per-node 8`` — on the CPU, through Megatron-Bridge's own start-up, as far as a machine without a GPU goes.

Each of the 8 ranks runs the job's code path of ``nemotron.runtime.megatron.megatron_bridge.main`` up to ``pretrain()``
(:func:`~nemotron.runtime.megatron.megatron_bridge.translate`, the recipe, our values, the routing check), then what
``pretrain()`` runs first: ``runtime_config_update`` (at the real world size, 8, from torchrun) and Megatron-Bridge's
``initialize_megatron`` (``training/initialize.py``: the micro-batch calculator, ``torch.distributed`` and
Megatron-Core's ``parallel_state.initialize_model_parallel`` with the config's TP/PP/CP/EP/ETP, the random seeds),
which on a CPU stops at its first CUDA call, right after those (the MoE auxiliary-loss scale, a one-element tensor
put on the GPU; asserted, so a change upstream shows).
Then Megatron-Core's own expert placement: ``BaseMoELayer.__init__`` (``transformer/moe/moe_layer.py``) on the
provider's config and the process groups that start-up built, which says how many experts each rank holds and
which. The rank facts are gathered over the real gloo process group.

Two things differ from the job, and only they: ``dist.distributed_backend`` is ``gloo`` (NCCL needs GPUs), and
``initialize_megatron`` gets ``allow_no_cuda=True`` (its own switch for this). Besides boot.py's Transformer
Engine stand-in nothing is stood in for. Where this stops: before the model is built (``provide()`` allocates the
Mamba, attention and grouped-expert layers on the GPU with Transformer Engine), so no all-to-all token dispatch,
no step, no memory figure: that is the 8-GPU run of docs/gpu_run.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_megatron_bridge import BUILD, TE_ONLY, compile_shipped, inputs  # noqa: E402

pytestmark = pytest.mark.timeout(900)

WORKER = BUILD + r'''
import torch
from megatron.bridge.training.initialize import initialize_megatron
from megatron.bridge.training.config import runtime_config_update
from megatron.core import parallel_state
from megatron.core.transformer.moe.moe_layer import BaseMoELayer
from nemotron.config import catalogue
from nemotron.runtime.megatron.routing import require_routing

case = json.loads(Path(os.environ["CONTRACT_CASE"]).read_text())
rank = int(os.environ["RANK"])
case["work"] = str(Path(case["work"]) / f"rank{rank}")
bc, hf_path, container = build(case)
require_routing(container.model, catalogue.get(bc.model_name))
for key, value in case["te_only"].items():
    setattr(container.model, key, value)
runtime_config_update(container)
container.dist.distributed_backend = "gloo"  # the one change to the job's config: NCCL needs GPUs
import traceback
from megatron.core.process_groups_config import ProcessGroupCollection

try:  # on a CPU it stops at its first CUDA call, after the process groups and the seeds (asserted by the test)
    initialize_megatron(cfg=container, allow_no_cuda=True)
    stopped = None
except AssertionError as exc:  # torch.cuda's "Torch not compiled with CUDA enabled"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/megatron/" in f.filename]
    stopped = {"message": str(exc), "at": f"{Path(frames[-1].filename).name}:{frames[-1].name}",
               "line": frames[-1].line}
pgs = ProcessGroupCollection.use_mpu_process_groups()  # what initialize_megatron returns on this path


class ExpertPlacement(BaseMoELayer):
    """Megatron-Core's own expert placement (``BaseMoELayer.__init__``), without building the experts."""

    def forward(self, hidden_states):
        raise NotImplementedError


moe = ExpertPlacement(container.model, layer_number=1, pg_collection=pgs)
m = container.model
facts = {
    "rank": rank, "world": torch.distributed.get_world_size(), "backend": torch.distributed.get_backend(),
    "tp": [parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_tensor_model_parallel_world_size()],
    "pp": parallel_state.get_pipeline_model_parallel_world_size(),
    "cp": parallel_state.get_context_parallel_world_size(),
    "ep": [parallel_state.get_expert_model_parallel_rank(), parallel_state.get_expert_model_parallel_world_size()],
    "ep_group": torch.distributed.get_process_group_ranks(pgs.ep),
    "dp": parallel_state.get_data_parallel_world_size(),
    "expert_dp": parallel_state.get_expert_data_parallel_world_size(),
    "num_local_experts": moe.num_local_experts,
    "local_experts": [moe.local_expert_indices[0], moe.local_expert_indices[-1]],
    "num_moe_experts": m.num_moe_experts, "sequence_parallel": m.sequence_parallel,
    "num_layers": m.num_layers, "hybrid_layer_pattern": m.hybrid_layer_pattern,
    "data_parallel_size": container.data_parallel_size,
    "stopped": stopped, "decentralized_pg": container.dist.use_decentralized_pg,
    "micro_batches": container.train.global_batch_size // (container.train.micro_batch_size * container.data_parallel_size),
}
gathered = [None] * torch.distributed.get_world_size()
torch.distributed.all_gather_object(gathered, facts)
if rank == 0:
    Path(os.environ["CONTRACT_OUT"]).write_text(json.dumps(gathered))
torch.distributed.barrier()
torch.distributed.destroy_process_group()
'''

LAUNCH = r'''
import os, subprocess, sys
from pathlib import Path
from upstream import read_payload, write_result

payload = read_payload()
work = Path(payload["work"])
work.mkdir(parents=True, exist_ok=True)
case_file, out = work / "case.json", work / "ranks.json"
case_file.write_text(__import__("json").dumps(payload))
worker = work / "worker.py"
worker.write_text(payload["worker"])
env = {**os.environ, "CONTRACT_CASE": str(case_file), "CONTRACT_OUT": str(out), "OMP_NUM_THREADS": "1"}
proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "8",
                       payload["boot"], str(worker)], env=env, capture_output=True, text=True, timeout=800)
lines = (proc.stdout + "\n" + proc.stderr).strip().splitlines()
first = next((i for i, line in enumerate(lines) if "Traceback" in line), None)  # the first rank's failure
tail = "\n".join((lines[first:first + 40] if first is not None else []) + ["..."] + lines[-20:])
write_result({"returncode": proc.returncode, "tail": tail,
              "ranks": __import__("json").loads(out.read_text()) if out.is_file() else None})
'''


@pytest.fixture(scope="module")
def eight_ranks(upstream, tmp_path_factory):
    """``pretrain -c tiny`` as the dry-run compiles it for one 8-GPU node, started on 8 CPU ranks by torchrun."""
    from upstream import BOOT

    root = tmp_path_factory.mktemp("mb-8rank")
    case = compile_shipped("pretrain", "tiny", root, inputs(root))
    assert case["errors"] == [] and case["world"] == 8, case["errors"]
    payload = {"cfg": case["cfg"], "stage": "pretrain", "work": str(root / "work"), "te_only": TE_ONLY,
               "worker": WORKER, "boot": str(BOOT)}
    result = upstream.run(LAUNCH, payload, timeout=900)
    assert result["returncode"] == 0 and result["ranks"], result["tail"]
    return result["ranks"]


@pytest.mark.slow
def test_tiny_starts_on_8_ranks_with_every_rank_an_expert_rank(eight_ranks):
    """Megatron-Bridge's start-up at world size 8 with tiny's layout: TP1 PP1 CP1, one expert group of all 8 ranks,
    data parallel 8, sequence parallel off; each rank its own EP rank."""
    from nemotron.config import catalogue

    spec = catalogue.get("ultra4layer")
    assert [r["rank"] for r in eight_ranks] == list(range(8))
    for r in eight_ranks:
        assert (r["world"], r["backend"]) == (8, "gloo")
        assert r["tp"] == [0, 1] and r["pp"] == 1 and r["cp"] == 1
        assert r["ep"] == [r["rank"], 8] and r["ep_group"] == list(range(8))
        assert r["dp"] == 8 and r["data_parallel_size"] == 8 and r["expert_dp"] == 1
        assert r["sequence_parallel"] is False
        # the slice's 4 layers, then its MTP depths, each after a "/" (Megatron-Core's hybrid pattern with MTP)
        main, *mtp = r["hybrid_layer_pattern"].split("/")
        assert (r["num_layers"], main, mtp) == (spec.num_layers, spec.pattern, [spec.mtp_pattern] * spec.mtp_depths)


def test_megatron_bridges_start_up_stops_only_at_its_first_cuda_tensor(eight_ranks):
    """How far the CPU gets: ``initialize_megatron`` ran torch.distributed, the parallel state and the seeds, and
    stopped at ``finish_mpu_init``'s ``MoEAuxLossAutoScaler.set_loss_scale(torch.ones(1, device=cuda))``."""
    for r in eight_ranks:
        assert r["decentralized_pg"] is False  # the parallel_state path, whose groups the probe reads
        stopped = r["stopped"]
        assert stopped and stopped["message"] == "Torch not compiled with CUDA enabled", stopped
        assert stopped["at"] == "initialize.py:finish_mpu_init" and "MoEAuxLossAutoScaler" in stopped["line"], stopped


def test_each_rank_holds_64_of_the_512_experts_and_together_all_of_them(eight_ranks):
    """Megatron-Core's own placement: 512 experts over EP=8 is 64 per rank, rank k holding experts 64k..64k+63."""
    held = []
    for r in eight_ranks:
        assert r["num_moe_experts"] == 512 and r["num_local_experts"] == 64
        first, last = r["local_experts"]
        assert (first, last) == (64 * r["rank"], 64 * r["rank"] + 63)
        held += range(first, last + 1)
    assert sorted(held) == list(range(512))
