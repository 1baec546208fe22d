"""Contract: NeMo RL's GPU converter accepts the command line our RL runtime builds for it (NeMo RL main 7ea279a).

After RLVR/MOPD, :func:`nemotron.runtime.rl.nemo_rl.finish` converts the newest step with NeMo RL's
``examples/converters/convert_megatron_to_hf_gpu.py`` under torchrun when the node's GPUs hold the BF16 weights
(:func:`nemotron.layout.hf_export.choose`, issue 30 finding 5). That converter needs GPUs (NCCL model-parallel state,
Megatron-Bridge's ``load_megatron_model`` / ``save_hf_pretrained``) and has not run on a GPU in this project; what is
proven here, in the contract interpreter on the pinned sources, is its argument contract:

* torch's own launcher parser (``torch.distributed.run.get_args_parser``, the ``torchrun`` command) reads our launcher
  flags and hands the converter path and its flags through unchanged;
* the converter's own ``parse_args`` (the module loaded with ``runpy``, Megatron-Bridge and Megatron-Core imported as
  the converter imports them; only Transformer Engine is stood in for, tests/contract/boot.py) accepts every flag we
  pass, with the values we chose;
* its ``main`` reads ``policy.megatron_cfg.sequence_parallel`` from the step's config.yaml, and Megatron-Core's
  ``ModelParallelConfig`` refuses sequence parallelism at TP 1: the reason the layout takes TP > 1 when the run
  trains with sequence parallelism.
"""

from __future__ import annotations

import pytest

SCRIPT = r'''
import ast, json, os, runpy, sys, tempfile
from pathlib import Path

from nemotron.config import catalogue
from nemotron.layout import hf_export
from nemotron.runtime.rl import nemo_rl as ours

P = json.loads(sys.stdin.read())
ROOT = Path(P["root"])
work = Path(tempfile.mkdtemp(prefix="gpuconv-"))
step = work / "step_10"
(step / "policy" / "weights" / "iter_0000010").mkdir(parents=True)
(step / "config.yaml").write_text("policy: {model_name: /x, megatron_cfg: {sequence_parallel: true}}\n")
out = {}
for name, (model, gpus, memory, sp) in P["cases"].items():
    plan = hf_export.choose(catalogue.get(model), True, gpus, memory, sp, "contract")
    cfg = {"policy": {"megatron_cfg": {"enabled": True}}}
    cmd = ours.converter_command(cfg, step, work / "hf" / "step_10", ROOT, plan)
    from torch.distributed.run import get_args_parser
    launcher = get_args_parser().parse_args(cmd[3:])  # what `torchrun ARGS` parses (cmd: python -m torch.distributed.run)
    conv = dict(launcher=[launcher.standalone, launcher.nnodes, launcher.nproc_per_node],
                script=launcher.training_script, script_args=launcher.training_script_args)
    saved = sys.argv
    sys.argv = [launcher.training_script, *launcher.training_script_args]
    try:
        module = runpy.run_path(launcher.training_script, run_name="converter")
        conv["parsed_by"] = "the converter module's parse_args"
        conv["args"] = vars(module["parse_args"]())
    finally:
        sys.argv = saved
    conv["plan"] = [plan.nproc, plan.tp, plan.pp, plan.ep, plan.etp]
    out[name] = conv

# what the converter's main() reads from the step's config.yaml
tree = ast.parse(Path(ROOT / hf_export.GPU_CONVERTER).read_text())
main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
out["main_reads"] = [n.value for n in ast.walk(main) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
from megatron.core.model_parallel_config import ModelParallelConfig
try:
    ModelParallelConfig(sequence_parallel=True, tensor_model_parallel_size=1)
    out["sp_tp1"] = "accepted"
except ValueError as exc:
    out["sp_tp1"] = str(exc)
ModelParallelConfig(sequence_parallel=True, tensor_model_parallel_size=2)  # what our TP2 layout gives it
with open(os.environ["CONTRACT_RESULT"], "w") as fh:
    json.dump(out, fh)
'''

#: (catalogue model, GPUs of the node, GB of one, sequence parallel): the 4-layer slice on an 8 x H100 node, and
#: Ultra with its recipe's sequence parallelism on 8 x B200 (TP2 PP1 EP8) and without it (TP1 PP2 EP4).
CASES = {"tiny-h100": ("ultra4layer", 8, 80.0, False), "ultra-b200-sp": ("ultra", 8, 180.0, True),
         "ultra-b200": ("ultra", 8, 180.0, False)}


@pytest.fixture(scope="module")
def contract(upstream):
    return upstream.run(SCRIPT, {"root": str(upstream.nemo_rl), "cases": CASES})


@pytest.mark.parametrize("case", sorted(CASES))
def test_torchrun_and_the_gpu_converter_accept_our_command(contract, case):
    got = contract[case]
    nproc, tp, pp, ep, etp = got["plan"]
    assert got["launcher"] == [True, "1", str(nproc)]  # --standalone --nnodes 1 --nproc-per-node N
    assert got["script"].endswith("examples/converters/convert_megatron_to_hf_gpu.py")
    assert got["parsed_by"] == "the converter module's parse_args"
    args = got["args"]
    assert args["config"].endswith("step_10/config.yaml") and args["hf_ckpt_path"].endswith("hf/step_10")
    assert args["megatron_ckpt_path"].endswith("step_10/policy/weights/iter_0000010")
    assert [args["tp"], args["pp"], args["ep"], args["etp"]] == [tp, pp, ep, etp]
    assert set(args) == {"config", "megatron_ckpt_path", "hf_ckpt_path", "tp", "pp", "ep", "etp"}


def test_the_layouts_are_the_chosen_ones(contract):
    assert contract["tiny-h100"]["plan"] == [8, 1, 1, 8, 1]
    assert contract["ultra-b200-sp"]["plan"] == [8, 2, 1, 8, 1]
    assert contract["ultra-b200"]["plan"] == [8, 1, 2, 4, 1]


def test_sequence_parallel_needs_tp_above_one_in_the_converter(contract):
    assert "sequence_parallel" in contract["main_reads"] and "megatron_cfg" in contract["main_reads"]
    assert contract["sp_tp1"] == "Cannot use sequence parallelism without tensor parallelism"
