"""Which NeMo RL converter an RLVR/MOPD run's Hugging Face export uses (issue 30 finding 5).

:func:`nemotron.layout.hf_export.choose` on the real catalogue models (``small``, the 4-layer slice ``ultra4layer`` of
the ``tiny`` configs, ``ultra``) and the GPU memory of the profile's GPU models (``nemotron.profiles.schema.GPU_MODELS``:
H100 80 GB, H200 141 GB, B200 180 GB, GB200 186 GB, 8 GPUs a node except GB200's 4); the dry run's line and rule
rl-export-host-memory, which follow the same choice (:func:`nemotron.layout.hf_export.plan_of`). The runtime's side
(the command ``finish`` runs, the job-start check) is in tests/runtime/test_rl.py; the converter's argument contract in
tests/contract/test_nemo_rl_gpu_converter.py.
"""

from __future__ import annotations

import json

import pytest

from nemotron import validation
from nemotron.config import catalogue
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.layout import hf_export, memory, rules
from nemotron.profiles.profile import from_table
from nemotron.layout.views import node_shape
from nemotron.profiles.schema import GPU_MODELS
from nemotron.runtime.rl import nemo_rl
from nemotron.validation import checks

NODES = {"H100": 8, "H200": 8, "B200": 8, "GB200": 4}


def node(gpu: str) -> tuple[int, float]:
    return NODES[gpu], GPU_MODELS[gpu][1]


def plan(model: str, gpu: str, sp: bool = False) -> hf_export.ExportPlan:
    gpus, mem = node(gpu)
    return hf_export.choose(catalogue.get(model), True, gpus, mem, sp, f'gpu = "{gpu}"')


def by_formula(model: str, tp: int, ep: int) -> float:
    """GB a GPU at PP 1, independently of :func:`hf_export.per_gpu_gb`: every parameter once, dense / TP and experts
    / EP (:func:`nemotron.layout.memory.inference_weights_gb`), plus the 5 GB inference allowance."""
    return memory.inference_weights_gb(catalogue.get(model), tp, ep, 1) + memory.OVERHEAD_GB


# ------------------------------------------------------------------------------------------ the choice
@pytest.mark.parametrize("gpu", sorted(NODES))
@pytest.mark.parametrize("model", ["small", "ultra4layer"])
def test_small_models_take_every_gpu_of_the_node_with_experts_split(model, gpu):
    gpus, mem = node(gpu)
    p = plan(model, gpu)
    assert p.on_gpu and (p.nproc, p.tp, p.pp, p.ep, p.etp) == (gpus, 1, 1, gpus, 1), p
    assert p.per_gpu_gb == pytest.approx(by_formula(model, 1, gpus)) and p.per_gpu_gb <= mem
    assert p.line().startswith(f"NeMo RL's GPU converter (convert_megatron_to_hf_gpu.py) on {gpus} of {gpus} GPUs, "
                               f"TP1 PP1 EP{gpus} ETP1: {p.per_gpu_gb:.0f} GB a GPU")


def test_tiny_numbers():
    """The 4-layer slice (35.8 B parameters, 71.6 GB in BF16): 8 x H100 hold 15.2 GB of weights each."""
    p = plan("ultra4layer", "H100")
    assert round(p.per_gpu_gb - memory.OVERHEAD_GB, 1) == 15.2 and f"{p.per_gpu_gb:.0f}" == "20"


@pytest.mark.parametrize("gpu", ["H100", "H200", "GB200"])
def test_ultra_takes_the_cpu_converter_where_the_node_cannot_hold_it(gpu):
    gpus, mem = node(gpu)
    for sp in (False, True):
        p = plan("ultra", gpu, sp)
        assert p.converter == hf_export.CPU and not p.on_gpu and p.nproc == 0, p
        assert p.per_gpu_gb > mem  # the best valid layout's need, said in the line
        line = p.line()
        assert line.startswith("NeMo RL's CPU converter (convert_megatron_to_hf.py): ultra's 1,121 GB of BF16 weights "
                               f"do not fit {gpus} x {mem:.0f} GB GPUs"), line
        assert f"needs {p.per_gpu_gb:.0f} GB a GPU" in line
    # 8 x H200: even the best layout needs more than a GPU has (TP1 PP4 EP2 without sequence parallel)
    assert "the best layout, TP1 PP4 EP2 on 8, needs 166 GB a GPU" in plan("ultra", "H200").line()


def test_ultra_fits_eight_b200_and_the_layout_follows_sequence_parallel():
    """8 x 180 GB: without sequence parallel PP2 EP4 (176 GB on the most loaded stage: the last, with the output
    layer and the MTP block); with it (the Ultra RL recipe's TP 8 + sequence parallel) TP2 EP8, 173 GB."""
    p = plan("ultra", "B200")
    assert p.on_gpu and (p.nproc, p.tp, p.pp, p.ep) == (8, 1, 2, 4) and f"{p.per_gpu_gb:.0f}" == "176"
    sp = plan("ultra", "B200", sp=True)
    assert sp.on_gpu and (sp.nproc, sp.tp, sp.pp, sp.ep) == (8, 2, 1, 8)
    assert f"{sp.per_gpu_gb:.0f}" == "173"
    # above dense / 2 + experts / 8 (171 GB): norms, routers and the Mamba parts that TP does not split stay whole
    assert by_formula("ultra", 2, 8) < sp.per_gpu_gb < by_formula("ultra", 2, 8) + 2
    # PP1 EP8 comes first in the order but does not fit: 205 GB
    assert hf_export.per_gpu_gb(catalogue.get("ultra"), 1, 1, 8) == pytest.approx(by_formula("ultra", 1, 8))
    assert by_formula("ultra", 1, 8) > 180


def test_per_gpu_weights_are_the_most_loaded_pipeline_stage():
    """With PP the last stage also holds the output layer and the MTP block: the need is that stage's, more than an
    even split of the same weights over the stages."""
    spec = catalogue.get("ultra")
    stages = [d + e for d, e, _, _ in memory.stage_param_counts(spec, memory.TrainSetup(pp=2, ep=4, inference=True))]
    at_pp2 = hf_export.per_gpu_gb(spec, 1, 2, 4) - memory.OVERHEAD_GB
    assert at_pp2 == pytest.approx(stages[1] * 2 / 1e9) and stages[1] > stages[0]
    assert at_pp2 > sum(stages) / 2 * 2 / 1e9 + 1  # > 1 GB above the even split


def test_every_layout_is_one_megatron_builds():
    for model in ("small", "ultra4layer", "ultra"):
        spec = catalogue.get(model)
        for sp in (False, True):
            tps = hf_export.tp_choices(spec, sp)
            assert (tps == [1]) != sp and all(t > 1 for t in tps) == sp
            for t in tps:  # rules tp-model and tp-kv-groups accept it
                assert rules.tp_divides_model(spec, t, "k") == [] and rules.tp_vs_kv_groups(spec, t, "0.20.0", "k") == []
            for n, tp, pp, ep in hf_export.layouts(spec, 8, sp):
                assert 1 <= n <= 8 and tp in tps
                assert rules.pp_splits_layers(spec, pp, None, None, "k") == []
                assert rules.ep_divides_experts(spec, ep, "k") == []
                assert rules.expert_fills_world(spec, n, pp, ep, 1, "k") == []
                assert n % (tp * pp) == 0  # world = TP x PP x DP


def test_the_cpu_converter_and_why_when_the_gpus_cannot_decide():
    tiny = catalogue.get("ultra4layer")
    assert "policy.megatron_cfg.enabled is false" in hf_export.choose(tiny, False, 8, 80.0).reason
    assert "not in the catalogue" in hf_export.choose(None, True, 8, 80.0).reason
    assert hf_export.choose(tiny, True, 0, 80.0, source="no GPU visible").reason == "no GPUs on the node (no GPU visible)"
    assert hf_export.choose(tiny, True, None, None, source="torch.cuda could not be read").reason == \
        "the node's GPUs are unknown (torch.cuda could not be read)"
    unknown = hf_export.choose(tiny, True, 8, None, source="profile x declares none")
    assert unknown.reason == "the GPU memory is unknown (profile x declares none)"
    # one 75 GB GPU cannot hold the slice's 72 GB + the 5 GB allowance
    one = hf_export.choose(tiny, True, 1, 75.0, source="s")
    assert not one.on_gpu and "TP1 PP1 EP1 on 1, needs 77 GB a GPU" in one.reason


# ------------------------------------------------------------------------------------------ the dry run
def _profile(gpu: str):
    return from_table(gpu.lower(), {"executor": "slurm", "gpus_per_node": NODES[gpu], "gpu": gpu})


def _validate(stage: str, config: str, profile, overrides: dict | None = None):
    c = compile_config(get_stage(stage), config, [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()],
                       check_paths=False)
    validation.prepare(get_stage(stage), c.config, c.user_keys, profile)
    return c.config, validation.validate(get_stage(stage), c.config, profile)


def _export_rows(stage, cfg, profile):
    tables = checks.describe_rl(get_stage(stage), cfg, profile)
    return [rows for title, _, rows in tables if title == "Hugging Face export after training"]


@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_dry_run_says_which_converter_and_applies_the_host_rule_only_to_the_cpu_one(stage):
    h200, b200 = _profile("H200"), _profile("B200")
    cfg, found = _validate(stage, "default", h200)
    [[[what, line]]] = _export_rows(stage, cfg, h200)
    assert what == "converter" and line.startswith("NeMo RL's CPU converter") and '(profile h200, gpu = "H200")' in line
    assert [p.severity for p in found if p.rule == "rl-export-host-memory"] == ["warning"]  # memory unknown
    cfg, found = _validate(stage, "default", b200)
    [[[_, line]]] = _export_rows(stage, cfg, b200)
    assert line.startswith("NeMo RL's GPU converter (convert_megatron_to_hf_gpu.py) on 8 of 8 GPUs, TP2 PP1 EP8 ETP1")
    assert [p for p in found if p.rule == "rl-export-host-memory"] == []
    # the job's choice is the same function: on a node that shows the profile's GPUs it is the same plan
    source = node_shape(cfg, b200).memory_source
    assert nemo_rl.export_plan(cfg, lambda: (8, 180.0, source)) == checks.export_plan(cfg, b200)


def test_dry_run_of_tiny_exports_on_the_gpus_and_nothing_without_checkpoints():
    h100 = _profile("H100")
    cfg, found = _validate("rlvr", "tiny", h100)
    [[[_, line]]] = _export_rows("rlvr", cfg, h100)
    assert "on 8 of 8 GPUs, TP1 PP1 EP8 ETP1: 20 GB a GPU" in line and "of 80 GB (profile h100" in line
    assert [p for p in found if p.rule == "rl-export-host-memory"] == []
    cfg, _ = _validate("rlvr", "tiny", h100, {"checkpointing.enabled": False})
    assert checks.export_plan(cfg, h100) is None and _export_rows("rlvr", cfg, h100) == []
