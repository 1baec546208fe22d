"""Per-GPU memory estimate for a parallel layout (first version).

A pure function of the model spec and the layout; no framework is imported. It is an estimate to
catch layouts that cannot fit before a job waits in the queue, not a prediction of the allocator's
peak: the formulas below are stated so the verdicts can be checked by hand, and they are never tuned
to make a published layout fit.

Units: parameters and tokens are counts; memory is in bytes internally and reported in GB
(10^9 bytes, the unit GPU vendors quote: H100 80 GB, H200 141 GB, GB200 186 GB).

**Parameters per GPU** (for the most loaded pipeline stage). Layer parameter counts come from
:func:`nemotron.config.catalogue.layer_params`. On a rank of stage *i*:

* dense = Σ over the stage's layers of (TP-split part / TP + replicated part), where attention's KV
  projection keeps ``max(1, groups / TP)`` groups per rank (replication when TP > groups);
  + word embedding V_pad·h / TP on the first stage; + output layer V_pad·h / TP and final norm on the
  last; + the MTP block on the last stage (its layers, ``eh_proj`` 2h·h / TP, norms, and — when
  PP > 1 — a copy of the word embedding, since Megatron-Core builds the embedding on every stage that
  runs MTP: ``hybrid_model.py``, ``if self.pre_process or self.mtp_process``). V_pad = vocab rounded up
  to a multiple of 128·TP (Megatron ``make_vocab_size_divisible_by``).
* expert = Σ over the stage's MoE layers of E·2·L·F / (EP·ETP) (+ the MTP MoE layer on the last stage).

**Bytes per parameter** (training, Megatron mixed precision; Megatron-LM
``docs/user-guide/features/dist_optimizer.md``): BF16 weight 2 + main gradient 4 (2 when
``grad_reduce_in_fp32`` is false) + FP32 main weight, Adam m and v 12 / d with the distributed
optimizer (12 without), where d = DP x CP for dense parameters and d = EDP = world / (PP x EP x ETP)
for expert parameters (the optimizer shards over each parameter's data-parallel group). With CPU
optimizer offload a fraction f of those 12 / d bytes lives on the host: (1 - f) x 12 / d stays.
Low-precision training adds the quantized weight copies Transformer Engine caches across the
micro-batches of a step, row- and column-wise: FP8 2 bytes/param, NVFP4 2 x 0.5625 bytes/param
(4-bit values plus one E4M3 scale per 16). Inference (convert, calibration, generation, teachers):
2 bytes/param (BF16), no gradients or optimizer.

**Activations** per micro-batch, BF16, per token of the rank's share of the sequence
(s / CP tokens x micro batch; t = TP when sequence parallel is on, else 1; hidden h):

* Mamba-2 layer: layer input 2h/t, norm output 2h/t, in_proj output 2(2d + 2GN + H)/TP, conv output
  2(d + 2GN)/TP, scan output 2d/TP, dt and dA cumsum 8H/TP (FP32), gated-norm output 2d/TP.
* attention: input 2h/t, norm output 2h/t, q/k/v 2(q + 2·kv_rank)/TP, attention output 2q/TP,
  softmax statistics 4·heads/TP (flash attention: no s x s matrix is kept).
* MoE (latent, top-k, squared ReLU): input 2h/t, norm output 2h/t, router logits and scores 8E/t (FP32),
  latent input 2L/t, dispatched tokens 2kL/t, expert fc1 output 2kF/(ETP·t), activation output
  2kF/(ETP·t), combined output 2L/t, shared-expert fc1 and activation outputs 4S/TP. Routed tokens
  are assumed balanced: each EP rank receives top-k times its own tokens.
* Selective recompute drops the terms of the modules named in ``recompute_modules`` (``layernorm``:
  norm outputs; ``core_attn``: softmax statistics; ``moe``: the whole MoE layer but its input;
  ``moe_act``: expert fc1 outputs; ``mlp``/``shared_experts``: shared-expert intermediates). Full
  recompute keeps only each layer's input (2h/t per token) plus, once, the full activations of the
  layer being recomputed.
* Pipeline schedule (1F1B, Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models"): stage i keeps min(PP - i, M) micro-batches in flight, M = micro-batches per step.
* Last stage: the logits s/CP x V_pad/TP of the main head and of each MTP depth, all alive at the end of
  the forward (one micro-batch at a time: the last stage runs backward right after forward). Bytes per element
  depend on the cross entropy Megatron-Core runs (``compute_language_model_loss``,
  ``megatron/core/models/common/language_module/language_module.py``): **2** with
  ``cross_entropy_loss_fusion`` and ``cross_entropy_fusion_impl: te`` — Transformer Engine's
  ``parallel_cross_entropy`` computes the loss and writes the gradient in place into the BF16 logits, which it
  keeps for backward (the MTP loop of ``process_mtp_loss``, ``multi_token_prediction.py``, keeps one per depth);
  this is Megatron-Bridge's Ultra recipe (``recipes/nemotronh/nemotron_3_ultra.py``: impl "te"; the Mamba
  provider's ``cross_entropy_loss_fusion`` defaults to true). **4** otherwise: the ``native`` fusion saves the
  FP32 softmax (``fused_cross_entropy.py``: ``ctx.save_for_backward(exp_logits, ...)``), the unfused path an FP32
  copy. (:attr:`TrainSetup.logits_bytes`.) The head whose loss runs last also holds, while the others are saved,
  a BF16 copy of its logits (:data:`LAST_HEAD_COPY_BYTES`) and, with 4, one more FP32 buffer
  (:data:`NATIVE_CE_FP32_BYTES`: ``calculate_logits_max``'s ``.float()`` copy is made in a ``jit_fuser`` function;
  the in-place subtraction and exponential that follow are in place in eager code only). Inferred, not traced,
  from the two one-GPU runs (``docs/gpu_run.md``, 3 heads of 4,096 x 131,072 logits): pretrain with TE's cross
  entropy, 6.36 GB allocated — 3 x 2 B + 2 B gives 6.04 GB (-5 %; 3 x 2 B alone -22 %); packed SFT with the native
  one, 11.65 GB — 3 x 4 B + 6 B gives 11.42 GB (-2 %; 3 x 4 B alone -30 %).

**Outside the estimate of the allocator** (what ``torch.cuda.max_memory_allocated`` does not count, added for
the verdict against the GPU memory): the CUDA context with the kernel images of torch, Transformer Engine and
the other extensions, outside the caching allocator — an allowance of 1 GB (:data:`CONTEXT_GB`, not measured
here); NCCL's communicator buffers, only when the world is above one GPU — an allowance of 2 GB
(:data:`NCCL_GB`); and the caching allocator's fragmentation, reserved / allocated, 1.09 in the one-GPU
pretrain run on an H200 (``docs/gpu_run.md``: 6.46 / 5.93 GiB; :data:`FRAGMENTATION`) — a measurement of
that run, applied to the allocator's terms. Inference estimates (convert, calibration, serving) keep the
plain 5 GB allowance (:data:`OVERHEAD_GB`).

Not modelled (each would add memory): MoE dispatcher buffers (DeepEP/HybridEP), routing imbalance,
virtual pipeline interleaving, Transformer Engine workspace growth, vLLM's CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nemotron.config.catalogue import ATTENTION, MAMBA, MLP, MOE, ModelSpec, layer_params, padded_vocab, param_count
from nemotron.layout.rules import stage_layers

GB = 1e9
#: Bytes per logits element the head whose loss runs last holds on top of the saved ones: a BF16 copy of its
#: logits (2), and with the native or unfused cross entropy one FP32 buffer more (4). See the module docstring:
#: inferred from the two one-GPU runs, not traced.
LAST_HEAD_COPY_BYTES = 2.0
NATIVE_CE_FP32_BYTES = 4.0


def last_head_bytes(logits_bytes: float) -> float:
    """:data:`LAST_HEAD_COPY_BYTES`, plus :data:`NATIVE_CE_FP32_BYTES` when the saved logits are FP32
    (``logits_bytes`` > 2: the native or unfused cross entropy)."""
    return LAST_HEAD_COPY_BYTES + (NATIVE_CE_FP32_BYTES if logits_bytes > 2 else 0.0)

#: How far the estimate may be off a measured peak: ``bench/estimate_calibration.py --memory`` puts the one-GPU
#: pretrain and SFT runs within 15 % of their measured max allocated (-5 %, -2 %; docs/estimate.md, "Per-GPU
#: memory"). An estimate above the GPU memory by more than this is an error (rule ``memory-fit``), within it a
#: warning (rule ``memory``).
CALIBRATION_MARGIN = 0.15

#: The allowance of inference estimates (serving engines, conversion, calibration): CUDA context, workspaces,
#: activations of the forward, fragmentation.
OVERHEAD_GB = 5.0
#: Training, outside ``max_memory_allocated``: the CUDA context and the kernel images (an allowance).
CONTEXT_GB = 1.0
#: Training with world > 1: NCCL's communicator buffers, outside the caching allocator (an allowance).
NCCL_GB = 2.0
#: Reserved / allocated of the caching allocator, measured in the one-GPU pretrain run (docs/gpu_run.md:
#: 6.463 / 5.927 GiB).
FRAGMENTATION = 6.463 / 5.927
LOWP_BYTES = {"bf16": 0.0, "fp8": 2.0, "nvfp4": 2 * 0.5625}


@dataclass
class TrainSetup:
    """What the estimate needs about a training (or inference) layout."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sp: bool = False
    world: int = 1
    seq_length: int = 4096
    micro_batch: int = 1
    global_batch: int = 1
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    recompute_granularity: str | None = None  # None | "selective" | "full"
    recompute_method: str | None = None  # "uniform" | "block"
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()
    distributed_optimizer: bool = True
    grad_fp32: bool = True
    optimizer_offload_fraction: float = 0.0
    precision: str = "bf16"  # bf16 | fp8 | nvfp4
    mtp_depths: int | None = None  # None = the model's
    inference: bool = False  # weights only (convert, calibration)
    #: bytes per logits element kept until backward: 2 with Transformer Engine's fused cross entropy, 4 otherwise
    logits_bytes: float = 4.0

    @property
    def dp(self) -> int:
        return max(1, self.world // (self.tp * self.pp * self.cp))

    @property
    def edp(self) -> int:
        return max(1, self.world // (self.pp * self.ep * self.etp))

    @property
    def microbatches(self) -> int:
        return max(1, self.global_batch // max(1, self.micro_batch * self.dp))


@dataclass
class StageMemory:
    """One pipeline stage's estimate (GB per GPU)."""

    stage: int
    dense_params: float
    expert_params: float
    weights_gb: float
    activations_gb: float
    logits_gb: float
    overhead_gb: float = OVERHEAD_GB
    inflight: int = 1
    notes: list[str] = field(default_factory=list)
    #: the terms the caching allocator does not count (training: context, NCCL, fragmentation), for the table
    outside: list[tuple[str, float]] = field(default_factory=list)
    logits_bytes: float = 4.0

    @property
    def allocated_gb(self) -> float:
        """What ``torch.cuda.max_memory_allocated`` would show: weights, grads, optimizer, activations, logits."""
        return self.weights_gb + self.activations_gb + self.logits_gb

    @property
    def total_gb(self) -> float:
        return self.allocated_gb + self.overhead_gb


@dataclass
class Estimate:
    """The estimate for a layout: every stage, the peak, and the verdict against the GPU memory."""

    stages: list[StageMemory]
    gpu_memory_gb: float | None
    label: str = "training"
    #: where ``gpu_memory_gb`` comes from (:attr:`nemotron.layout.views.NodeShape.memory_source`); "" unknown
    memory_source: str = ""

    @property
    def peak(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total_gb)

    @property
    def fits(self) -> bool | None:
        return None if not self.gpu_memory_gb else self.peak.total_gb <= self.gpu_memory_gb

    def verdict(self) -> str:
        """One line: ``fits`` (peak <= the GPU memory), ``borderline`` (above it by at most
        :data:`CALIBRATION_MARGIN`: rule ``memory``, a warning) or ``does NOT fit``, with GB and the share."""
        p = self.peak
        if not self.gpu_memory_gb:
            return f"{p.total_gb:.0f} GB per GPU, not checked: no GPU memory declared"
        share = p.total_gb / self.gpu_memory_gb
        # above the GPU memory by at most the estimate's margin: neither "fits" nor a refusal (rule memory, a warning)
        word = ("fits" if share <= 1 else "borderline" if share <= 1 + CALIBRATION_MARGIN else "does NOT fit")
        margin = f", within the estimate's {CALIBRATION_MARGIN:.0%} margin" if word == "borderline" else ""
        return (f"{word}: {p.total_gb:.0f} GB of {self.gpu_memory_gb:.0f} GB per GPU ({share:.0%}, peak on PP stage "
                f"{p.stage}){margin}")

    def rows(self) -> list[list[str]]:
        """Rows for the dry-run table (the peak stage's terms)."""
        p = self.peak
        rows = [
            ["parameters on the rank", f"{p.dense_params / 1e9:.2f} B dense + {p.expert_params / 1e9:.2f} B expert"],
            ["weights + grads + optimizer" if self.label == "training" else "weights (BF16)", f"{p.weights_gb:.1f} GB"],
            [f"activations ({p.inflight} micro-batch{'es' if p.inflight != 1 else ''} in flight)", f"{p.activations_gb:.1f} GB"],
        ]
        if self.label == "training":  # inference estimates keep no logits for a backward
            rows.append([f"logits ({'BF16, fused TE cross entropy' if p.logits_bytes == 2 else 'FP32, native/unfused CE'}, "
                         "main + MTP heads)", f"{p.logits_gb:.1f} GB"])
        if p.outside:
            rows.append(["allocated (weights to logits)", f"{p.allocated_gb:.1f} GB"])
            rows += [[name, f"{gb:.1f} GB"] for name, gb in p.outside]
        else:
            rows.append(["fixed allowance (context, NCCL, fragmentation)", f"{p.overhead_gb:.1f} GB"])
        rows += [
            ["total on the peak stage", f"{p.total_gb:.1f} GB (PP stage {p.stage})"],
            ["GPU memory", (f"{self.gpu_memory_gb:.0f} GB" if self.gpu_memory_gb else "unknown")
             + (f" ({self.memory_source})" if self.memory_source else "")],
            ["verdict", self.verdict()],
        ]
        for note in p.notes:
            rows.append(["note", note])
        return rows


# ------------------------------------------------------------------------------------ parameters
def _attn_tp_params(spec: ModelSpec, tp: int) -> float:
    """Attention parameters on one TP rank, with KV replication when TP > groups."""
    h, hd = spec.hidden_size, spec.head_dim
    q = spec.num_attention_heads * hd
    kv_groups_rank = max(1.0, spec.num_query_groups / tp)
    return h * (q / tp + 2 * kv_groups_rank * hd) + q * h / tp


def _layer_rank_params(spec: ModelSpec, sym: str, tp: int, ep: int, etp: int) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one rank."""
    lp = layer_params(spec)[sym]
    dense = (_attn_tp_params(spec, tp) if sym == ATTENTION else lp["tp"] / tp) + lp["rep"]
    expert = lp["expert"] / (ep * etp)
    return dense, expert


def stage_param_counts(spec: ModelSpec, s: TrainSetup) -> list[tuple[float, float, str, bool]]:
    """Per PP stage: (dense params, expert params, the stage's pattern, holds MTP)."""
    ranges = stage_layers(spec.num_layers, s.pp, s.first_stage_layers, s.last_stage_layers)
    vpad = padded_vocab(spec, s.tp)
    h = spec.hidden_size
    depths = spec.mtp_depths if s.mtp_depths is None else s.mtp_depths
    out = []
    for i, (a, b) in enumerate(ranges):
        pat = spec.pattern[a:b]
        dense = expert = 0.0
        for sym in pat:
            d, e = _layer_rank_params(spec, sym, s.tp, s.ep, s.etp)
            dense, expert = dense + d, expert + e
        if i == 0:
            dense += vpad * h / s.tp
        last = i == len(ranges) - 1
        if last:
            if not spec.tie_embeddings or s.pp > 1:
                dense += vpad * h / s.tp
            dense += h
        mtp = last and depths > 0
        if mtp:
            copies = 1 if spec.mtp_shared_weights else depths
            for sym in spec.mtp_pattern:
                d, e = _layer_rank_params(spec, sym, s.tp, s.ep, s.etp)
                dense, expert = dense + copies * d, expert + copies * e
            dense += copies * (2 * h * h / s.tp + 3 * h)
            if s.pp > 1:
                dense += vpad * h / s.tp  # the embedding copy the MTP block needs on the last stage
        out.append((dense, expert, pat, mtp))
    return out


def _bytes_per_param(s: TrainSetup, dp_group: int) -> float:
    if s.inference:
        return 2.0
    grad = 4.0 if s.grad_fp32 else 2.0
    opt = 12.0 * (1.0 - max(0.0, min(1.0, s.optimizer_offload_fraction)))
    opt = opt / dp_group if s.distributed_optimizer else opt
    return 2.0 + grad + opt + LOWP_BYTES.get(s.precision, 0.0)


# ------------------------------------------------------------------------------------ activations
def layer_activation_bytes(spec: ModelSpec, sym: str, s: TrainSetup, dropped: frozenset[str] = frozenset()) -> float:
    """Bytes of stored activations per token of the rank's sequence share, for one layer (see module doc)."""
    h, tp = spec.hidden_size, s.tp
    t = tp if (s.sp and tp > 1) else 1
    items: list[tuple[str, float]] = [("input", 2 * h / t), ("layernorm", 2 * h / t)]
    if sym == MAMBA:
        d, g, n, hh = spec.mamba_d_inner, spec.mamba_num_groups, spec.mamba_state_dim, spec.mamba_num_heads
        items += [("mamba", 2 * (2 * d + 2 * g * n + hh) / tp), ("mamba", 2 * (d + 2 * g * n) / tp),
                  ("mamba", 2 * d / tp), ("mamba", 8 * hh / tp), ("mamba", 2 * d / tp)]
    elif sym == ATTENTION:
        hd = spec.head_dim
        q = spec.num_attention_heads * hd
        kv = max(1.0, spec.num_query_groups / tp) * hd
        items += [("attn", 2 * (q / tp + 2 * kv)), ("attn", 2 * q / tp), ("core_attn", 4 * spec.num_attention_heads / tp)]
    elif sym == MOE:
        k, f, e = spec.moe_topk, spec.moe_ffn_hidden_size, spec.num_experts
        lat = spec.moe_latent_size or h
        sh = spec.moe_shared_expert_intermediate_size
        items += [("moe", 8 * e / t), ("moe", 2 * lat / t), ("moe", 2 * k * lat / t),
                  ("moe_act", 2 * k * f / (s.etp * t)), ("moe", 2 * k * f / (s.etp * t)), ("moe", 2 * lat / t),
                  ("shared_experts", 4 * sh / tp)]
    elif sym == MLP:
        items += [("mlp", 4 * spec.moe_ffn_hidden_size / tp)]
    total = 0.0
    for tag, b in items:
        if tag == "input":
            total += b
            continue
        if tag in dropped:
            continue
        if "moe" in dropped and sym == MOE and tag in ("layernorm", "moe_act", "shared_experts"):
            continue  # recomputing the whole MoE layer drops its internals
        if tag == "shared_experts" and "mlp" in dropped:
            continue
        total += b
    return total


def stage_activation_bytes(spec: ModelSpec, s: TrainSetup, pattern: str, mtp: bool, stage: int) -> tuple[float, float, int]:
    """(activation bytes, logits bytes, micro-batches in flight) on one rank of ``stage``."""
    tokens = s.seq_length * s.micro_batch / max(1, s.cp)
    depths = max(0, spec.mtp_depths if s.mtp_depths is None else s.mtp_depths)
    # layer symbol -> how many of that layer the stage runs (MTP layers once per depth)
    counts: dict[str, int] = {}
    for sym in pattern:
        counts[sym] = counts.get(sym, 0) + 1
    if mtp:
        for sym in spec.mtp_pattern:
            counts[sym] = counts.get(sym, 0) + depths
    n_layers = sum(counts.values())
    full = {sym: layer_activation_bytes(spec, sym, s) for sym in counts}
    if s.inference:
        return max(full.values(), default=0.0) * tokens, 0.0, 1
    inflight = min(s.pp - stage, s.microbatches) if s.pp > 1 else 1
    h = spec.hidden_size
    t = s.tp if (s.sp and s.tp > 1) else 1
    full_sum = sum(full[sym] * c for sym, c in counts.items())
    if s.recompute_granularity == "full":
        n = max(1, min(s.recompute_num_layers or 1, max(n_layers, 1)))
        if s.recompute_method == "block":  # the first n layers keep only their input, the rest keep everything
            head = list(pattern)[:n]
            kept = full_sum - sum(full[sym] for sym in head) + (2 * h / t) * len(head)
        else:  # uniform: every group of n layers keeps only its input
            kept = (2 * h / t) * -(-n_layers // n)
        per_mb = kept * tokens
        working = max(full.values(), default=0.0) * tokens * n
    elif s.recompute_granularity == "selective":
        dropped = frozenset(s.recompute_modules)
        per_mb = sum(layer_activation_bytes(spec, sym, s, dropped) * c for sym, c in counts.items()) * tokens
        working = 0.0
    else:
        per_mb = full_sum * tokens
        working = 0.0
    acts = per_mb * inflight + working
    logits = 0.0
    if stage == s.pp - 1:
        vpad = padded_vocab(spec, s.tp)
        logits = tokens * vpad / s.tp * (s.logits_bytes * (1 + (depths if mtp else 0)) + last_head_bytes(s.logits_bytes))
    return acts, logits, inflight


# ------------------------------------------------------------------------------------ estimate
def estimate(spec: ModelSpec, s: TrainSetup, gpu_memory_gb: float | None, label: str = "training",
             memory_source: str = "") -> Estimate:
    """The per-GPU estimate for every pipeline stage of ``spec`` under ``s``."""
    stages = []
    for i, (dense, expert, pattern, mtp) in enumerate(stage_param_counts(spec, s)):
        weights = dense * _bytes_per_param(s, s.dp * s.cp) + expert * _bytes_per_param(s, s.edp)
        acts, logits, inflight = stage_activation_bytes(spec, s, pattern, mtp, i)
        notes = []
        if s.optimizer_offload_fraction and not s.inference:
            notes.append(f"optimizer states {s.optimizer_offload_fraction:.0%} on the host (CPU offload)")
        if s.precision in ("fp8", "nvfp4") and not s.inference:
            notes.append(f"{s.precision.upper()} quantized weight copies included ({LOWP_BYTES[s.precision]} B/param)")
        allocated = (weights + acts + logits) / GB
        outside: list[tuple[str, float]] = []
        if not s.inference:
            outside.append(("CUDA context, kernel images (allowance)", CONTEXT_GB))
            if s.world > 1:
                outside.append(("NCCL buffers, world > 1 (allowance)", NCCL_GB))
            outside.append((f"allocator fragmentation (x{FRAGMENTATION:.2f}, measured)", allocated * (FRAGMENTATION - 1)))
        stages.append(StageMemory(stage=i, dense_params=dense, expert_params=expert, weights_gb=weights / GB,
                                  activations_gb=acts / GB, logits_gb=logits / GB, inflight=inflight, notes=notes,
                                  overhead_gb=sum(g for _, g in outside) if outside else OVERHEAD_GB,
                                  outside=outside, logits_bytes=s.logits_bytes))
    return Estimate(stages=stages, gpu_memory_gb=gpu_memory_gb, label=label, memory_source=memory_source)


def inference_weights_gb(spec: ModelSpec, tp: int, ep: int, pp: int = 1) -> float:
    """BF16 weights per GPU of an inference engine/teacher: dense / (TP x PP) + experts / (EP x PP), in GB.
    (Dense attention/Mamba weights are replicated across an engine's DP-attention ranks.)"""

    pc = param_count(spec)
    lp = layer_params(spec)
    experts = spec.counts()[MOE] * lp[MOE]["expert"] + (lp[MOE]["expert"] if spec.mtp_depths and MOE in spec.mtp_pattern else 0)
    dense = pc["total"] - experts
    return 2 * (dense / (tp * pp) + experts / (ep * pp)) / GB


def serving_state_gb(spec: ModelSpec, tp: int, pp: int, max_len: int) -> float:
    """Per GPU, in GB: the cache one request of ``max_len`` tokens needs in a serving engine (vLLM) at TP ``tp``
    and PP ``pp`` — what vLLM must find free after loading the weights, or it refuses to start.

    * attention KV cache: (attention layers / PP) x 2 (K and V) x max(1, KV groups / TP) x head_dim x 2 bytes
      (BF16) per token, times ``max_len``; KV heads are replicated when TP exceeds the groups;
    * Mamba-2 state, one per request (its size does not grow with the tokens): (Mamba layers / PP) x
      (SSM state heads x head_dim x state_dim / TP + conv state (d_inner + 2 x groups x state_dim) / TP x
      (conv kernel - 1)) x 4 bytes (FP32: the Ultra RL recipes set ``mamba_ssm_cache_dtype: float32``; an upper
      bound for a BF16 cache).

    Raises nothing; ``tp``, ``pp`` below 1 count as 1."""
    tp, pp = max(1, tp), max(1, pp)
    counts = spec.counts()
    kv_per_token = counts[ATTENTION] / pp * 2 * max(1.0, spec.num_query_groups / tp) * spec.head_dim * 2
    d_inner = spec.mamba_num_heads * spec.mamba_head_dim
    conv = (d_inner + 2 * spec.mamba_num_groups * spec.mamba_state_dim) / tp * max(0, spec.mamba_conv_kernel - 1)
    ssm = d_inner * spec.mamba_state_dim / tp
    mamba = counts[MAMBA] / pp * (ssm + conv) * 4
    return (kv_per_token * max(0, max_len) + mamba) / GB


__all__ = [
    "CONTEXT_GB",
    "FRAGMENTATION",
    "GB",
    "NCCL_GB",
    "OVERHEAD_GB",
    "Estimate",
    "StageMemory",
    "TrainSetup",
    "estimate",
    "inference_weights_gb",
    "serving_state_gb",
    "layer_activation_bytes",
    "stage_param_counts",
]
