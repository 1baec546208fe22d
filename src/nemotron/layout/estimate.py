"""Before a run is queued: step time from FLOPs, GPU-hours, jobs per walltime, and checkpoint bytes.

A pure function of the model spec and the layout (no framework imported), like :mod:`nemotron.layout.memory`.

**FLOPs per token** (forward; a multiply-add counts 2 FLOPs; h hidden, s sequence length, V padded vocabulary;
the other symbols as in :func:`nemotron.config.catalogue.layer_params`):

* Mamba-2 layer: ``in_proj`` 2h(2d + 2GN + H), causal conv 2(d + 2GN)K, the SSD scan with chunk size Q = 128
  (Megatron-Core ``MambaMixer`` default ``chunk_size``): the chunk-diagonal blocks 2Q(d + GN), the states and
  output 6·d·N (Dao & Gu 2024, "Transformers are SSMs", §6: the SSD algorithm's cost is
  O(T·N·P·H) for the states plus O(T·Q·P·H) for the chunk-diagonal blocks), gated norm 5d, ``out_proj`` 2dh.
* attention layer: q/k/v 2h(q + 2kv), output projection 2qh, scores and weighted values 4·s·q·(1/2) under the
  causal mask (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters", eq. 3,
  halved for causality as Megatron-LM's ``num_floating_point_operations`` does since 2024).
* latent MoE layer: router 2hE, latent down/up projections 2hL + 2Lh, top-k routed experts k·2·(2LF)
  (squared-ReLU, not gated), the shared expert 2·2hS.
* output layer 2hV; each MTP depth: ``eh_proj`` 2·2h·h, its layers, and its own output layer 2hV.
* training = 3 x forward (backward = 2 x forward); full recompute adds one more forward (4 x), selective
  recompute is counted as free. These are the FLOPs the hardware executes; MFU here is executed FLOPs over peak.
* MTP boosting (``frozen_backbone``: a config's ``mtp_boost.freeze_backbone``; docs/mtp_boost.md, the Ultra report's
  MTP boosting trains only the MTP head on a frozen backbone): the whole model's forward (backbone and every MTP
  depth: the KL's targets are the backbone's logits), the backward of the MTP head only (2 x its forward: its
  ``eh_proj`` and layers, per depth; the shared-weight head runs once per depth) and of each depth's frozen output
  layer's input gradient (1 x that layer's forward: no weight gradient); full recompute adds one forward of the
  head. The backbone keeps no activations for backward and gets no gradient.

**Step time** = FLOPs per step / (GPUs x peak dense throughput of the precision x MFU). Peak dense (not sparse)
throughput per GPU in TFLOP/s, from NVIDIA's datasheets (H100/H200 SXM: BF16 989, FP8 1,979; B200: BF16 2,250,
FP8 4,500, FP4 9,000; GB200: 2,500 / 5,000 / 10,000; B300/GB300: 2,500 / 5,000 / 15,000; A100: BF16 312). A precision
the GPU lacks falls back to the best it has (NVFP4 on Hopper runs as FP8 at best: said in a note). NVFP4 training
keeps some layers in BF16 (``first_last_layers_bf16``): their FLOPs are counted at the BF16 rate.

**MFU**: an assumption, shown as the key ``estimate.mfu`` (``+estimate.mfu=0.3`` sets it); the default 0.35 is our
choice, not a measurement of Ultra. ``bench/estimate_calibration.py`` prints the MFU the runs measured here imply
(docs/estimate.md), so the assumption can be judged against them.

**Checkpoint bytes** per save: Megatron's distributed checkpoint holds each parameter once in the model dtype
(BF16, 2 bytes) and the optimizer's FP32 main weight and Adam moments (12 bytes) — 14 bytes a parameter, the
shards of every rank together (``ddp``/optimizer sharding changes which rank writes what, not the sum). The local
runtime's Hugging Face folder holds FP32 weights (4) and AdamW's two FP32 moments (8): 12 bytes a parameter, the MTP
block excluded (transformers builds NemotronH without it). Inference checkpoints (convert, quantize): 2 bytes.
MTP boosting (frozen backbone): only the head has gradients and optimizer state, so Megatron saves 2 bytes a
parameter of the whole model and 12 more a parameter of the head; the local runtime
(:mod:`nemotron.runtime.megatron.mtp_local`) copies the backbone's FP32 folder (4 bytes a parameter, without MTP)
and adds its FP32 head (4 bytes a parameter, no optimizer state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nemotron.config.catalogue import ATTENTION, MAMBA, MLP, MOE, ModelSpec, padded_vocab, param_count

MAMBA_CHUNK = 128
DEFAULT_MFU = 0.35

#: GPU model -> peak dense TFLOP/s per precision (NVIDIA datasheets; None: the GPU has no such tensor cores).
PEAK_TFLOPS: dict[str, dict[str, float | None]] = {
    "A100": {"bf16": 312.0, "fp8": None, "nvfp4": None},
    "H100": {"bf16": 989.0, "fp8": 1979.0, "nvfp4": None},
    "H200": {"bf16": 989.0, "fp8": 1979.0, "nvfp4": None},
    "B200": {"bf16": 2250.0, "fp8": 4500.0, "nvfp4": 9000.0},
    "GB200": {"bf16": 2500.0, "fp8": 5000.0, "nvfp4": 10000.0},
    "B300": {"bf16": 2500.0, "fp8": 5000.0, "nvfp4": 15000.0},
    "GB300": {"bf16": 2500.0, "fp8": 5000.0, "nvfp4": 15000.0},
}
#: The GPU assumed when the profile names none (the default node of layout/views.py: H200).
DEFAULT_GPU = "H200"

#: Bytes per parameter of one saved checkpoint, by format (module docstring).
CKPT_BYTES = {"megatron": 14.0, "hf-local": 12.0, "inference": 2.0}


def layer_flops(spec: ModelSpec, sym: str, seq: int) -> float:
    """Forward FLOPs per token of one layer of type ``sym`` at sequence length ``seq`` (module docstring)."""
    h = spec.hidden_size
    if sym == MAMBA:
        d, g, n, hh, k = (spec.mamba_d_inner, spec.mamba_num_groups, spec.mamba_state_dim, spec.mamba_num_heads,
                          spec.mamba_conv_kernel)
        return (2 * h * (2 * d + 2 * g * n + hh) + 2 * (d + 2 * g * n) * k + 2 * MAMBA_CHUNK * (d + g * n)
                + 6 * d * n + 5 * d + 2 * d * h)
    if sym == ATTENTION:
        q = spec.num_attention_heads * spec.head_dim
        kv = spec.num_query_groups * spec.head_dim
        return 2 * h * (q + 2 * kv) + 2 * q * h + 4 * seq * q / 2
    if sym == MOE:
        lat = spec.moe_latent_size or h
        latent = (2 * h * lat * 2) if spec.moe_latent_size else 0
        return (2 * h * spec.num_experts + latent + spec.moe_topk * 2 * 2 * lat * spec.moe_ffn_hidden_size
                + 2 * 2 * h * spec.moe_shared_expert_intermediate_size)
    if sym == MLP:
        return 2 * 2 * h * spec.moe_ffn_hidden_size
    raise ValueError(f"unknown layer symbol {sym!r}")


def forward_flops_per_token(spec: ModelSpec, seq: int, mtp_depths: int | None = None, tp: int = 1) -> dict[str, float]:
    """Forward FLOPs per token by part: ``Mamba-2``, ``attention``, ``MoE``, ``MLP``, ``output``, ``mtp``, ``total``."""
    names = {MAMBA: "Mamba-2", ATTENTION: "attention", MOE: "MoE", MLP: "MLP"}
    out = dict.fromkeys(names.values(), 0.0)
    for sym in spec.pattern:
        out[names[sym]] += layer_flops(spec, sym, seq)
    h, v = spec.hidden_size, padded_vocab(spec, tp)
    out["output"] = 2.0 * h * v
    depths = spec.mtp_depths if mtp_depths is None else mtp_depths
    out["mtp"] = depths * (2 * 2 * h * h + sum(layer_flops(spec, s, seq) for s in spec.mtp_pattern) + 2 * h * v)
    out["total"] = sum(out.values())
    return out


def peak_tflops(gpu: str | None, precision: str) -> tuple[float, str, list[str]]:
    """(peak dense TFLOP/s per GPU, the precision it is counted at, notes) for ``gpu`` (a ``GPU_MODELS`` name)."""
    notes: list[str] = []
    name = (gpu or "").upper()
    if name not in PEAK_TFLOPS:
        notes.append(f"GPU {gpu!r} has no datasheet figure here; assumed {DEFAULT_GPU}" if gpu else
                     f"no GPU named by the profile; assumed {DEFAULT_GPU}")
        name = DEFAULT_GPU
    table = PEAK_TFLOPS[name]
    order = ["nvfp4", "fp8", "bf16"]
    for p in order[order.index(precision) if precision in order else 2:]:
        if table.get(p):
            if p != precision:
                notes.append(f"{name} has no {precision.upper()} tensor cores: counted at its {p.upper()} peak")
            return float(table[p]), p, notes
    return float(table["bf16"] or 0.0), "bf16", notes


@dataclass
class RunEstimate:
    """Everything ``estimate`` prints (units in the names: seconds, hours, bytes, TFLOP/s)."""

    model: str
    gpu: str
    gpus: int
    nodes: int
    precision: str
    peak_tflops: float
    mfu: float
    seq_length: int
    global_batch_size: int
    steps: int
    tokens_per_step: int
    flops_per_token: dict[str, float]
    flops_per_step: float
    step_seconds: float
    wall_seconds: float
    gpu_hours: float
    node_hours: float
    walltime_seconds: int | None
    save_margin_seconds: int
    jobs: int | None
    params: int
    ckpt_format: str
    ckpt_bytes: int
    saves: int
    retained: int | None
    retained_bytes: int
    free_bytes: int | None
    free_path: str | None
    fits: bool | None
    notes: list[str] = field(default_factory=list)
    ckpt_path: str | None = None  # checkpoint.save, as configured
    #: why the free space was not measured (``cluster path``: the profile runs its jobs on other machines, so a folder
    #: at the same path here is not their storage); None: measured, or nothing of the path exists here
    free_unchecked: str | None = None
    #: the model has an MTP block that ``params`` leaves out (the local backend's checkpoint: it does not build MTP)
    mtp_left_out: bool = False
    #: MTP boosting: the parameters that train (the MTP head); None: every parameter trains
    trainable_params: int | None = None

    def rows(self) -> list[list[str]]:
        """Rows of the terminal table: what, value, how it was obtained."""
        rows = [
            ["model", f"{self.model}: {self.params / 1e9:.3g} B parameters"
             + (f" ({MTP_LEFT_OUT})" if self.mtp_left_out else "")
             + (f"; {_count(self.trainable_params)} of them train (the MTP head; the backbone is frozen)"
                if self.trainable_params is not None else ""), "config/catalogue.py"],
            ["GPUs", f"{self.gpus} ({self.nodes} node{'s' if self.nodes != 1 else ''} x {self.gpus // max(1, self.nodes)} {self.gpu})", "run.env.nodes x the profile's node"],
            ["peak throughput", (f"{self.peak_tflops:,.0f}" if self.peak_tflops >= 10 else f"{self.peak_tflops:.3g}")
             + f" TFLOP/s per {'GPU' if self.gpu != 'CPU' else 'CPU'} "
             f"({self.precision.upper()}, dense)", "NVIDIA datasheet" if self.gpu != "CPU" else "this CPU's torch.mm rate, measured now"],
            ["estimate.mfu (assumed)", f"{self.mfu:.2f}", "an assumption: +estimate.mfu=X sets it"],
            ["tokens per step", f"{self.tokens_per_step:,} ({self.global_batch_size} x {self.seq_length})", "global batch x sequence"],
            ["FLOPs per token (training)", f"{self.flops_per_step / self.tokens_per_step:.4g}",
             "forward of the whole model + backward of the MTP head (frozen backbone; +1 head forward with full "
             "recompute)" if self.trainable_params is not None else "3 x forward (+1 with full recompute)"],
            ["step time", _duration(self.step_seconds), "FLOPs per step / (GPUs x peak x MFU)"],
            ["steps", f"{self.steps:,}", "train.train_iters"],
            ["wall time", _duration(self.wall_seconds), "steps x step time"],
            ["GPU-hours / node-hours", f"{_hours(self.gpu_hours)} / {_hours(self.node_hours)}",
             "wall time x GPUs / nodes"],
            ["jobs", ("-" if self.jobs is None else f"{self.jobs}") + (
                f" of {_duration(self.walltime_seconds)} (saving {_duration(self.save_margin_seconds)} before the limit)"
                if self.walltime_seconds else " (no walltime: no profile time limit)"), "wall time / (walltime - margin)"],
            ["checkpoint per save", f"{_size(self.ckpt_bytes)} ({self._bytes_per_param()})",
             "parameters x bytes per parameter"],
            ["written per GPU (average)", _size(self.ckpt_bytes / max(1, self.gpus)),
             "one save / GPUs: each rank writes its shard (replicas once)"],
            ["saves per run", f"{self.saves}", "steps / checkpoint.save_interval (+ the last)"],
            ["kept on disk", _size(self.retained_bytes) + (f" ({self.retained} kept)" if self.retained else " (every save kept)"), "checkpoint.most_recent_k"],
            ["free space", (f"not checked: {self.free_unchecked}" if self.free_unchecked else "unknown")
             if self.free_bytes is None else f"{_size(self.free_bytes)} at {self.free_path}",
             "statvfs of the checkpoint root (a run here)"],
            ["verdict", self.verdict(), ""],
        ]
        return rows + [["note", n, ""] for n in self.notes]

    def _bytes_per_param(self) -> str:
        """How the checkpoint bytes were counted: ``14 B/param, megatron``; with a frozen backbone the whole model's
        bytes and the head's optimizer state apart (module docstring)."""
        if self.trainable_params is None:
            return f"{CKPT_BYTES[self.ckpt_format]:g} B/param, {self.ckpt_format}"
        if self.ckpt_format == "megatron":
            head = CKPT_BYTES["megatron"] - FROZEN_WEIGHT_BYTES
            return f"{FROZEN_WEIGHT_BYTES:g} B/param + {head:g} B/param of the head's optimizer state, megatron"
        return (f"{LOCAL_FP32_BYTES:g} B/param: the backbone copied and the FP32 head, no optimizer state, "
                f"{self.ckpt_format}")

    def verdict(self) -> str:
        if self.fits is None:
            if self.free_unchecked:
                return f"checkpoint space not checked: {self.free_unchecked}"
            return "checkpoint space not checked (the checkpoint root is not readable here)"
        if not self.fits:
            return f"one checkpoint ({_size(self.ckpt_bytes)}) does NOT fit the free {_size(self.free_bytes)}"
        if self.free_bytes is not None and self.retained_bytes > self.free_bytes:
            return (f"one checkpoint fits, the {_size(self.retained_bytes)} kept do not "
                    f"(free {_size(self.free_bytes)}): set checkpoint.most_recent_k")
        return "fits"


def _size(n: float | None) -> str:
    """Bytes in GB / TB / PB (10^9 ...), three significant figures at least."""
    if n is None:
        return "unknown"
    for unit, scale in (("PB", 1e15), ("TB", 1e12)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n / 1e9:,.2f} GB"


def _count(n: int) -> str:
    """A parameter count: ``35.8 B``, ``1.21 M``."""
    return f"{n / 1e9:.3g} B" if n >= 1e9 else f"{n / 1e6:.3g} M"


def _hours(hours: float) -> str:
    """GPU- or node-hours with three significant figures below 100 (a 12 s tiny run: ``0.0267``, not ``0.0``), one
    decimal above."""
    if hours >= 100:
        return f"{hours:,.1f}"
    if hours == 0:
        return "0"
    return f"{hours:.3g}" if hours >= 0.001 else f"{hours:.2e}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


#: How a parameter count of the local backend's model labels the MTP block it leaves out (the model table of a local
#: dry run says the same).
MTP_LEFT_OUT = "without the MTP block, which the local backend does not build"


#: Bytes of a frozen parameter in a Megatron checkpoint (BF16 weight; no main weight, no Adam moments) and of any
#: parameter the local runtime saves (FP32).
FROZEN_WEIGHT_BYTES = 2.0
LOCAL_FP32_BYTES = 4.0


def mtp_head(spec: ModelSpec, seq: int, local: bool = False) -> tuple[int, float]:
    """(parameters, forward FLOPs per token of one depth without its output layer) of the MTP head MTP boosting
    trains. The Megatron route: the catalogue's MTP block (:func:`nemotron.config.catalogue.param_count`'s ``mtp``,
    shared weights counted once; ``eh_proj`` 2·2h·h and the layers of ``spec.mtp_pattern``, as
    :func:`forward_flops_per_token`). ``local``: the local runtime's own head
    (:func:`nemotron.runtime.megatron.mtp_local.build_head`): norms 5h, ``eh_proj`` 2h·h, multi-head attention with
    ``num_attention_heads`` x ``head_dim`` (q, k, v and output: 4·q·h) and a squared-ReLU MLP of the shared expert's
    width S (``moe_shared_expert_intermediate_size``, else 4h; 2·h·S)."""
    h = spec.hidden_size
    if not local:
        return int(param_count(spec)["mtp"]), 2 * 2 * h * h + sum(layer_flops(spec, s, seq) for s in spec.mtp_pattern)
    q = spec.num_attention_heads * spec.head_dim
    ffn = spec.moe_shared_expert_intermediate_size or 4 * h
    params = 5 * h + 2 * h * h + 4 * q * h + 2 * h * ffn
    flops = 2 * 2 * h * h + 2 * 4 * q * h + 4 * seq * q / 2 + 2 * 2 * h * ffn
    return params, float(flops)


def checkpoint_params(spec: ModelSpec, ckpt_format: str) -> int:
    """Parameters one checkpoint holds: the whole model with MTP (Megatron), without it (the local HF folder)."""
    pc = param_count(spec, include_mtp=ckpt_format != "hf-local")
    return int(pc["total"])


def estimate_run(spec: ModelSpec, *, gpus: int, nodes: int, gpu: str | None, precision: str, seq_length: int,
                 global_batch_size: int, steps: int, mfu: float = DEFAULT_MFU, full_recompute: bool = False,
                 bf16_layers: int = 0, mtp_depths: int | None = None, tp: int = 1,
                 walltime_seconds: int | None = None, save_margin_seconds: int = 0, save_interval: int | None = None,
                 most_recent_k: int | None = None, ckpt_format: str = "megatron", free_bytes: int | None = None,
                 free_path: str | None = None, peak: tuple[float, str, str] | None = None,
                 frozen_backbone: bool = False) -> RunEstimate:
    """The run's estimate (module docstring). ``bf16_layers``: layers an NVFP4/FP8 run keeps in BF16. ``peak``:
    (TFLOP/s, precision, device name) instead of a datasheet GPU (a CPU's measured rate for a local run).
    ``frozen_backbone``: MTP boosting, ``mtp_depths`` rollout steps of the MTP head (:func:`mtp_head`; the local
    runtime's own head with ``ckpt_format="hf-local"``) train on a frozen backbone.

    Raises:
        ValueError: a non-positive GPU count, batch, sequence length or MFU outside (0, 1]; a frozen backbone with
            no MTP depth.
    """
    if gpus < 1 or global_batch_size < 1 or seq_length < 1:
        raise ValueError(f"GPUs {gpus}, global batch {global_batch_size} and sequence length {seq_length} must be >= 1")
    if not 0 < mfu <= 1:
        raise ValueError(f"estimate.mfu={mfu}: must be in (0, 1]")
    if peak is not None:
        peak_value, counted, device = peak
        notes: list[str] = []
    else:
        peak_value, counted, notes = peak_tflops(gpu, precision)
        device = (gpu or DEFAULT_GPU).upper() if (gpu or "").upper() in PEAK_TFLOPS else DEFAULT_GPU
    peak = peak_value  # type: ignore[assignment]
    fwd = forward_flops_per_token(spec, seq_length, mtp_depths, tp)
    mult = 4.0 if full_recompute else 3.0
    tokens = global_batch_size * seq_length
    trainable = None
    if frozen_backbone:
        depths = spec.mtp_depths if mtp_depths is None else mtp_depths
        if depths < 1:
            raise ValueError(f"MTP boosting with {depths} MTP steps: mtp_boost.num_steps must be >= 1")
        trainable, head = mtp_head(spec, seq_length, local=ckpt_format == "hf-local")
        out_layer = 2.0 * spec.hidden_size * padded_vocab(spec, tp)
        fwd["mtp"] = depths * (head + out_layer)  # the local head is not the catalogue's MTP block
        fwd["total"] = sum(v for k, v in fwd.items() if k != "total")
        # forward of everything; backward: the head's 2 x and the frozen output layer's input gradient 1 x, per
        # depth; full recompute: the head's forward once more
        per_token = fwd["total"] + depths * (2 * head + out_layer) + (depths * head if full_recompute else 0.0)
        flops = per_token * tokens
        body_mult = 1.0
    else:
        flops = mult * fwd["total"] * tokens
        body_mult = mult
    seconds = flops / (gpus * peak * 1e12 * mfu)
    if counted not in ("bf16", "fp32") and bf16_layers:
        share = min(1.0, bf16_layers / max(1, spec.num_layers))
        bf16_peak = peak_tflops(gpu, "bf16")[0]
        body = fwd["total"] - fwd["output"] - fwd["mtp"]
        slow = body_mult * tokens * body * share
        seconds = (flops - slow) / (gpus * peak * 1e12 * mfu) + slow / (gpus * bf16_peak * 1e12 * mfu)
        notes.append(f"{bf16_layers} of {spec.num_layers} layers in BF16 (first_last_layers_bf16): counted at the BF16 peak")
    wall = seconds * steps
    jobs = None
    if walltime_seconds:
        usable = walltime_seconds - save_margin_seconds
        if usable <= 0:
            notes.append(f"the walltime ({walltime_seconds} s) is not longer than the save margin ({save_margin_seconds} s)")
        else:
            jobs = max(1, math.ceil(wall / usable))
    params = checkpoint_params(spec, ckpt_format)
    per_save = int(params * CKPT_BYTES[ckpt_format])
    if trainable is not None and ckpt_format == "megatron":  # the head's optimizer state only
        per_save = int(params * FROZEN_WEIGHT_BYTES + trainable * (CKPT_BYTES["megatron"] - FROZEN_WEIGHT_BYTES))
    elif trainable is not None:  # the backbone's FP32 folder copied, and the FP32 head
        params += trainable
        per_save = int(params * LOCAL_FP32_BYTES)
    saves = (steps // save_interval + (0 if steps % save_interval == 0 else 1)) if save_interval else 1
    kept = min(saves, most_recent_k) if most_recent_k and most_recent_k > 0 else saves
    fits = None if free_bytes is None else per_save <= free_bytes
    return RunEstimate(model=spec.name, gpu=device,
                       gpus=gpus, nodes=nodes, precision=counted, peak_tflops=peak, mfu=mfu, seq_length=seq_length,
                       global_batch_size=global_batch_size, steps=steps, tokens_per_step=tokens, flops_per_token=fwd,
                       flops_per_step=flops, step_seconds=seconds, wall_seconds=wall, gpu_hours=wall * gpus / 3600,
                       node_hours=wall * nodes / 3600, walltime_seconds=walltime_seconds,
                       save_margin_seconds=save_margin_seconds, jobs=jobs, params=params, ckpt_format=ckpt_format,
                       ckpt_bytes=per_save, saves=saves, retained=most_recent_k if most_recent_k else None,
                       retained_bytes=per_save * kept, free_bytes=free_bytes, free_path=free_path, fits=fits, notes=notes,
                       mtp_left_out=ckpt_format == "hf-local" and bool(spec.mtp_depths) and trainable is None,
                       trainable_params=trainable)


__all__ = ["CKPT_BYTES", "DEFAULT_MFU", "FROZEN_WEIGHT_BYTES", "LOCAL_FP32_BYTES", "MTP_LEFT_OUT", "PEAK_TFLOPS",
           "RunEstimate", "estimate_run", "forward_flops_per_token", "layer_flops", "mtp_head", "peak_tflops"]
