"""Which NeMo RL converter turns an RLVR/MOPD step into Hugging Face form: on the node's GPUs, or on its CPU.

After training, :func:`nemotron.runtime.rl.nemo_rl.finish` converts the newest ``step_N`` with one of NeMo RL's own
converters (``examples/converters/`` of its checkout, 7ea279a):

* ``convert_megatron_to_hf_gpu.py`` (:data:`GPU_CONVERTER`): ``torchrun --nproc-per-node N`` on the Ray head's
  GPUs, ``--tp/--pp/--ep/--etp``; it initialises Megatron's model parallel state with that layout, loads the
  Megatron checkpoint with Megatron-Bridge's ``load_megatron_model`` and writes it with ``save_hf_pretrained``.
  Each GPU holds its share of the BF16 weights.
* ``convert_megatron_to_hf.py`` (:data:`CPU_CONVERTER`): one process holds the whole model in host RAM
  (parameters x 2 bytes: 1,121 GB for Ultra; rule ``rl-export-host-memory``), which takes hours for Ultra.

:func:`choose` picks the GPU converter when the policy is Megatron (``policy.megatron_cfg.enabled``; the DTensor
path has only ``convert_dcp_to_hf.py``) and a layout of the node's GPUs holds the weights; else the CPU converter,
with one line saying why. The dry run (:func:`nemotron.validation.checks.rl_export_rules`, the ``describe_rl``
table) and the job (:func:`nemotron.runtime.rl.nemo_rl.export_plan`) both call :func:`plan_of`, so they make the same
decision from their own view of the node: the profile's ``gpus_per_node`` / ``gpu`` for the dry run, ``torch.cuda``
on the Ray head for the job. Rule ``rl-export-host-memory`` applies only when the CPU converter is chosen.

**Per-GPU memory of a layout** (TP ``T``, PP ``P``, EP ``E``, ETP 1 on ``N`` = P x lcm(T, E) GPUs): the BF16 weights of
the most loaded pipeline stage, ``max over stages of (dense_stage / T + experts_stage / E) x 2 bytes`` — what
:func:`nemotron.layout.memory.stage_param_counts` gives for an inference layout (``TrainSetup(inference=True)``:
2 bytes/param, no gradients or optimizer; the first stage also holds the word embedding, the last the output layer
and the MTP block) — plus :data:`nemotron.layout.memory.OVERHEAD_GB` (5 GB, the allowance the memory estimate gives
every inference layout: CUDA context, workspaces, fragmentation). Dense weights are replicated over the
data-parallel ranks and experts are split E ways: Megatron-Core builds the expert groups inside the
data-parallel x tensor-parallel ranks of each stage (``parallel_state.initialize_model_parallel``: ETP x EP x EDP =
TP x DP), which is why ``E`` must divide ``N / P`` (and the model's expert count), and TP must divide the Mamba
groups, Mamba heads and attention heads (rule ``tp-model``). PP must split the layers evenly (rule ``pp-layers``:
the converter has no first/last-stage flags). Units: GB = 10^9 bytes, the unit of a profile's ``gpu_memory``.

**The layout**: the most GPUs of the node that a valid layout uses (``N`` from the node's count down), the fewest
pipeline stages first, EP = the largest divisor of ``N / P`` that divides the expert count; the first that fits.
TP is 1 unless the run trains with ``policy.megatron_cfg.sequence_parallel`` true: the converter reads that key from
the step's ``config.yaml`` and Megatron-Core refuses sequence parallelism at TP 1 (``ModelParallelConfig.__post_init__``:
"Cannot use sequence parallelism without tensor parallelism", Megatron-LM c8288b6), so the smallest TP above 1 that
the model allows is used.

**Not proven here**: NeMo RL's GPU converter has not run on a GPU in this project; the proof stops at its argument
contract (tests/contract/test_nemo_rl_gpu_converter.py runs its own ``parse_args`` on our command line), and
whether Megatron-Bridge 8c46dc4 (NeMo RL's pin) builds the loaded model in the requested layout is not checked (at
4588417, ``load_megatron_model`` without ``mp_overrides`` resets the loaded config's parallel sizes to 1). The job
reads the GPU memory from ``torch.cuda`` (an H100 shows 85 GB, the profile's table says 80), so near the limit the
job may choose otherwise than the dry run; its line says what it chose. Pure arithmetic on the catalogue and the
memory estimate; no framework is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import gcd
from typing import Any

from nemotron.config import catalogue
from nemotron.config.catalogue import ModelSpec
from nemotron.config.tree import as_int, get
from nemotron.layout.memory import GB, OVERHEAD_GB, TrainSetup, stage_param_counts
from nemotron.layout.rules import EXPORT_BYTES_PER_PARAM, common_divisors, divisors

#: NeMo RL's converters, relative to its checkout (7ea279a).
GPU_CONVERTER = "examples/converters/convert_megatron_to_hf_gpu.py"
CPU_CONVERTER = "examples/converters/convert_megatron_to_hf.py"
DCP_CONVERTER = "examples/converters/convert_dcp_to_hf.py"
GPU, CPU = "gpu", "cpu"


@dataclass(frozen=True)
class ExportPlan:
    """The converter a run's Hugging Face export uses and why.

    ``converter``: :data:`GPU` or :data:`CPU`; ``nproc`` the processes (GPUs) torchrun starts, ``tp``/``pp``/``ep``/
    ``etp`` the layout (GPU only, else 0); ``per_gpu_gb`` the weights + allowance on the most loaded GPU of that
    layout, or with the CPU converter of the best valid layout (None: no layout, or the model's size is unknown);
    ``gpus`` / ``gpu_memory_gb`` the node's GPUs and the memory of one (GB), ``source`` where those come from;
    ``reason`` a sentence (why the CPU converter, or the layout's arithmetic)."""

    converter: str
    reason: str
    nproc: int = 0
    tp: int = 0
    pp: int = 0
    ep: int = 0
    etp: int = 0
    per_gpu_gb: float | None = None
    gpus: int | None = None
    gpu_memory_gb: float | None = None
    source: str = ""

    @property
    def on_gpu(self) -> bool:
        return self.converter == GPU

    def layout(self) -> str:
        return f"TP{self.tp} PP{self.pp} EP{self.ep} ETP{self.etp}"

    def line(self) -> str:
        """One line for the dry run's report and the job's log."""
        if self.on_gpu:
            return (f"NeMo RL's GPU converter ({GPU_CONVERTER.rsplit('/', 1)[-1]}) on {self.nproc} of {self.gpus} GPUs, "
                    f"{self.layout()}: {self.reason}")
        return f"NeMo RL's CPU converter ({CPU_CONVERTER.rsplit('/', 1)[-1]}): {self.reason}"


def per_gpu_gb(spec: ModelSpec, tp: int, pp: int, ep: int) -> float:
    """GB on the most loaded GPU of the layout TP ``tp``, PP ``pp``, EP ``ep``, ETP 1: the stage's BF16 weights
    (:func:`nemotron.layout.memory.stage_param_counts`, inference) + :data:`~nemotron.layout.memory.OVERHEAD_GB`."""
    setup = TrainSetup(tp=tp, pp=pp, ep=ep, etp=1, inference=True)
    weights = max(dense + expert for dense, expert, _, _ in stage_param_counts(spec, setup))
    return weights * EXPORT_BYTES_PER_PARAM / GB + OVERHEAD_GB


def tp_choices(spec: ModelSpec, sequence_parallel: bool) -> list[int]:
    """The TPs the converter may use, smallest first: ``[1]``, or with sequence parallel on the TPs above 1 that
    divide the Mamba groups and heads and the attention heads (rule ``tp-model``) and suit the KV groups
    (a divisor or a multiple: rule ``tp-kv-groups``, Megatron-Core >= 0.16 as in the nemo-rl image)."""
    if not sequence_parallel:
        return [1]
    mamba = [spec.mamba_num_groups, spec.mamba_num_heads] if "M" in spec.pattern + spec.mtp_pattern else []
    g = spec.num_query_groups
    return [t for t in common_divisors(*mamba, spec.num_attention_heads)
            if t > 1 and (g % t == 0 or t % g == 0)]


def layouts(spec: ModelSpec, gpus: int, sequence_parallel: bool = False) -> list[tuple[int, int, int, int]]:
    """Every layout ``(nproc, tp, pp, ep)`` the converter can run on ``gpus`` GPUs, in the order :func:`choose` tries
    them: ``nproc`` from ``gpus`` down, then PP up (divisors of the layer count), TP up; EP the largest divisor of
    ``nproc / PP`` that divides the expert count (1 without experts), with ``nproc = PP x lcm(TP, EP)`` exactly."""
    out = []
    experts = spec.num_experts if spec.is_moe else 1
    for n in range(gpus, 0, -1):
        for pp in divisors(spec.num_layers):
            if n % pp:
                continue
            for tp in tp_choices(spec, sequence_parallel):
                side = n // pp  # TP x DP of a stage: the ranks the experts are split over
                if side % tp:
                    continue
                ep = gcd(side, experts)
                if pp * tp * ep // gcd(tp, ep) != n:  # nproc = PP x lcm(TP, EP): no idle data-parallel copies
                    continue
                out.append((n, tp, pp, ep))
    return out


def choose(spec: ModelSpec | None, megatron: bool, gpus: int | None, gpu_memory_gb: float | None,
           sequence_parallel: bool = False, source: str = "") -> ExportPlan:
    """The converter for a policy ``spec`` (None: not in the catalogue) on a node of ``gpus`` GPUs of
    ``gpu_memory_gb`` GB each (None: unknown); ``megatron``: ``policy.megatron_cfg.enabled``. The GPU converter with
    the first layout of :func:`layouts` whose :func:`per_gpu_gb` is at most ``gpu_memory_gb``, else the CPU converter
    with the reason (the DTensor path, no GPUs, unknown memory or model size, or the weights against the memory of the
    best layout). Raises nothing."""
    def cpu(reason: str, best: float | None = None) -> ExportPlan:
        return ExportPlan(CPU, reason, per_gpu_gb=best, gpus=gpus, gpu_memory_gb=gpu_memory_gb, source=source)

    if not megatron:
        return cpu("policy.megatron_cfg.enabled is false: NeMo RL's DTensor checkpoints have only its CPU converter "
                   f"({DCP_CONVERTER.rsplit('/', 1)[-1]})")
    if spec is None:
        return cpu("the model is not in the catalogue, so its size on the GPUs is unknown")
    if gpus is None:
        return cpu(f"the node's GPUs are unknown ({source or 'not read'})")
    if gpus < 1:
        return cpu(f"no GPUs on the node ({source or 'none declared'})")
    if not gpu_memory_gb:
        return cpu(f"the GPU memory is unknown ({source or 'not declared'})")
    total = catalogue.param_count(spec)["total"] * EXPORT_BYTES_PER_PARAM / GB
    best: tuple[float, tuple[int, int, int, int]] | None = None
    for n, tp, pp, ep in layouts(spec, gpus, sequence_parallel):
        need = per_gpu_gb(spec, tp, pp, ep)
        if need <= gpu_memory_gb:
            return ExportPlan(GPU, f"{need:.0f} GB a GPU (the most loaded stage's BF16 weights + {OVERHEAD_GB:.0f} GB "
                                   f"allowance) of {gpu_memory_gb:.0f} GB ({source})", nproc=n, tp=tp, pp=pp, ep=ep,
                              etp=1, per_gpu_gb=need, gpus=gpus, gpu_memory_gb=gpu_memory_gb, source=source)
        if best is None or need < best[0]:
            best = (need, (n, tp, pp, ep))
    if best is None:
        why = "sequence parallel needs TP > 1, which " if sequence_parallel else ""
        return cpu(f"no converter layout of {spec.name} fits {gpus} GPUs ({why}the layer count {spec.num_layers}, the "
                   f"{spec.num_experts} experts and the heads allow none)")
    need, (n, tp, pp, ep) = best
    return cpu(f"{spec.name}'s {total:,.0f} GB of BF16 weights do not fit {gpus} x {gpu_memory_gb:.0f} GB GPUs "
               f"({source}): the best layout, TP{tp} PP{pp} EP{ep} on {n}, needs {need:.0f} GB a GPU (the most loaded "
               f"stage's weights + {OVERHEAD_GB:.0f} GB allowance)", best=need)


def plan_of(cfg: dict, node: Callable[[], tuple[int | None, float | None, str]]) -> ExportPlan | None:
    """:func:`choose` for a compiled RLVR/MOPD config: the policy from ``model.name`` (the catalogue), the backend
    from ``policy.megatron_cfg.enabled`` and sequence parallel from ``policy.megatron_cfg.sequence_parallel``; the
    node from ``node() -> (GPUs, GB of one, where those come from)``, called only when the choice depends on it (a
    Megatron policy of the catalogue). None when the run exports nothing (``checkpointing.enabled`` false or no
    ``checkpointing.checkpoint_dir``)."""
    if get(cfg, "checkpointing.enabled", True) is False or not get(cfg, "checkpointing.checkpoint_dir"):
        return None
    spec: ModelSpec | None = None
    name: Any = get(cfg, "model.name")
    if isinstance(name, str):
        try:
            spec = catalogue.get(name)
        except catalogue.CatalogueError:
            spec = None
    megatron = bool(get(cfg, "policy.megatron_cfg.enabled", False))
    sp = get(cfg, "policy.megatron_cfg.sequence_parallel", False) is True
    gpus, memory_gb, source = node() if megatron and spec is not None else (None, None, "")
    return choose(spec, megatron, as_int(gpus), memory_gb, sp, source)


__all__ = ["CPU", "CPU_CONVERTER", "DCP_CONVERTER", "GPU", "GPU_CONVERTER", "ExportPlan", "choose", "layouts",
           "per_gpu_gb", "plan_of", "tp_choices"]
