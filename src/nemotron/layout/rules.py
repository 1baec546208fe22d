"""The launch rules: one small pure function each, with its source and the Megatron-Core versions
it holds for.

Every rule takes plain values (the model spec, numbers from the config, the dotted keys to name)
and returns a list of :class:`~nemotron.errors.Problem` — empty when the rule holds. Nothing here
reads files, the environment or the clock. :data:`RULES` lists them (id → :class:`RuleInfo`) for the
docs and the tests; ``docs/validation.md`` is the user-facing table.

Version statements were checked against the Megatron-LM tags ``core_v0.12.0`` … ``core_v0.19.0`` and
the commits the Ultra containers pin (Megatron-Bridge branch ``nemotron_3_ultra`` → Megatron-LM
``c8288b6``, package version 0.18.0; NeMo RL main → Megatron-Bridge ``8c46dc4`` → Megatron-LM
``14346b6``, package version 0.20.0).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from nemotron.config.catalogue import ModelSpec
from nemotron.errors import Problem, did_you_mean, plural


@dataclass(frozen=True)
class RuleInfo:
    """A rule's metadata. ``holds_for`` is the Megatron-Core (or framework) range it was checked for.

    ``func`` is the pure rule function here, or None for a rule declared with :func:`declare`: one whose check
    reads files, the environment or a framework and so lives with its reader (``where`` names that module).
    """

    id: str
    title: str
    source: str
    holds_for: str
    func: Callable[..., list[Problem]] | None = None
    where: str = ""


#: Every rule id a :class:`~nemotron.errors.Problem` may carry, id -> metadata: the pure rules below
#: (:func:`rule`) and the rules checked elsewhere (:func:`declare`, at the end of this module).
#: ``tests/validation/test_rule_ids.py`` fails on a ``Problem`` whose rule id is not here.
RULES: dict[str, RuleInfo] = {}


def rule(rid: str, title: str, source: str, holds_for: str):
    """Register a rule function under ``rid`` (see :data:`RULES`)."""

    def wrap(func: Callable[..., list[Problem]]) -> Callable[..., list[Problem]]:
        if rid in RULES:
            raise ValueError(f"rule id {rid!r} is declared twice")
        RULES[rid] = RuleInfo(rid, title, source, holds_for, func, __name__)
        func.rule_id = rid  # type: ignore[attr-defined]
        return func

    return wrap


def declare(rid: str, title: str, source: str, holds_for: str, where: str) -> None:
    """Declare a rule checked outside this module (``where``: the module that raises it), under ``rid``.

    Raises ValueError when ``rid`` is already registered (an id has one home)."""
    if rid in RULES:
        raise ValueError(f"rule id {rid!r} is declared twice")
    RULES[rid] = RuleInfo(rid, title, source, holds_for, None, where)


def _err(key: str, value: Any, message: str, valid: str | None, rid: str) -> Problem:
    return Problem(key=key, value=value, message=message, valid=valid, rule=rid, severity="error")


def _warn(key: str, value: Any, message: str, valid: str | None, rid: str) -> Problem:
    return Problem(key=key, value=value, message=message, valid=valid, rule=rid, severity="warning")


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n``, ascending."""
    n = abs(int(n))
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def common_divisors(*ns: int) -> list[int]:
    out = set(divisors(ns[0]))
    for n in ns[1:]:
        out &= set(divisors(n))
    return sorted(out)


def fmt(values: Iterable[int], limit: int = 14) -> str:
    """``1, 2, 4, 8`` (long lists elided in the middle)."""
    vals = list(values)
    if len(vals) <= limit:
        return ", ".join(map(str, vals))
    return ", ".join(map(str, vals[: limit - 3])) + ", ..., " + ", ".join(map(str, vals[-2:]))


def version_tuple(text: str | None) -> tuple[int, int]:
    """``"0.18.0"`` → (0, 18); unknown → (0, 0)."""
    if not text:
        return (0, 0)
    parts = [p for p in str(text).replace("rc", ".").split(".") if p.isdigit()]
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else (0, 0)


def _positive(key: str, value: Any, rid: str) -> list[Problem]:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return [_err(key, value, "must be a positive integer", "1, 2, 3, ...", rid)]
    return []


@rule("positive-int", "parallel sizes and batch sizes are positive integers",
      "Megatron-Core ModelParallelConfig / Megatron-Bridge TrainingConfig field types", "all versions")
def positive_ints(values: dict[str, Any]) -> list[Problem]:
    """Every ``key -> value`` given must be an int >= 1 (the other rules assume it)."""
    out: list[Problem] = []
    for key, value in values.items():
        out += _positive(key, value, "positive-int")
    return out


#: The count keys of every stage (what each counts), each a whole number >= 1 where a config sets it: the keys the
#: stages' own readers take with ``minimum=1`` (``nemotron.runtime.common.settings._int`` and its twins in
#: ``rl_settings``, ``warmup``, ``mtp_local``, ``evaluate``, ``quant_config``), which NeMo RL's GRPO / SFT loops and
#: the eval runner use as counts too. Parallel and batch sizes are rule ``positive-int``'s; the training length
#: rule ``train-length``'s. A key a config does not set, null, or still a ``${...}`` reference is not checked here.
COUNT_KEYS: dict[str, str] = {
    "grpo.num_prompts_per_step": "prompts per GRPO step",
    "grpo.num_generations_per_prompt": "responses generated per prompt",
    "grpo.max_num_steps": "GRPO steps",
    "grpo.max_num_epochs": "passes over the prompts",
    "grpo.val_batch_size": "prompts per validation batch",
    "checkpointing.save_period": "steps between checkpoints",
    "policy.generation.max_new_tokens": "tokens generated per response",
    "sft.max_num_steps": "warm-up SFT steps",
    "sft.max_num_epochs": "warm-up SFT passes over the data",
    "warmup.num_prompts": "prompts the teachers answer",
    "warmup.responses_per_prompt": "teacher responses per prompt",
    "warmup.max_new_tokens": "tokens generated per teacher response",
    "warmup.kl_new_tokens": "tokens of each held-out KL completion",
    "quantization.calib_size": "calibration sequences",
    "quantization.eval_size": "held-out sequences of the accuracy check",
    "eval.perplexity.samples": "held-out perplexity sequences",
    "eval.gsm8k.samples": "GSM8K rows scored",
    "eval.gsm8k.max_new_tokens": "tokens generated per GSM8K answer",
    "eval.chat.max_new_tokens": "tokens generated per chat answer",
    "eval.num_tests_per_prompt": "generations scored per prompt",
    "generation.max_new_tokens": "tokens generated per response",
    "mtp_boost.num_steps": "MTP head training steps",
    "mtp_boost.draft_length": "draft tokens per verification",
    "mtp_boost.new_tokens": "tokens generated per held-out prompt",
    "data.train_prompts": "training prompts",
    "data.held_out_prompts": "held-out prompts",
}


@rule("positive-count", "counts (prompts, generations, steps, samples, new tokens: COUNT_KEYS) are whole numbers >= 1",
      "the stages' readers (minimum=1: runtime/common/settings.py, rl/rl_settings.py, rl/warmup.py, "
      "megatron/mtp_local.py, eval/evaluate.py, quantization/quant_config.py); NeMo RL's GRPO/SFT loops count with them",
      "all versions")
def positive_counts(values: dict[str, Any]) -> list[Problem]:
    """``key -> value`` of :data:`COUNT_KEYS` keys (set, not null, resolved): each must be an int >= 1. Checked
    before the rules that compute with them (``grpo-batch``'s prompts x generations), so the key the user set is named
    rather than a product of it."""
    out: list[Problem] = []
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            what = COUNT_KEYS.get(key, "a count")
            out.append(_err(key, value, f"must be a whole number >= 1 ({what})", "1, 2, 3, ...", "positive-count"))
    return out


# ------------------------------------------------------------------------------------ rule 1: TP
@rule("tp-model", "TP divides the Mamba groups, the Mamba heads and the attention heads",
      "megatron/core/ssm/mamba_mixer.py (MambaMixer.__init__ asserts nheads % tp == 0 and ngroups % tp == 0); "
      "attention heads are split evenly across TP ranks (megatron/core/transformer/attention.py)",
      "Megatron-Core 0.12 - 0.20")
def tp_divides_model(model: ModelSpec, tp: int, key: str) -> list[Problem]:
    """TP must divide Mamba ``n_groups`` (8 for Ultra), the Mamba heads (256) and the query heads (64).

    Valid TP = the common divisors (1, 2, 4, 8 for Ultra): the Mamba groups cap tensor parallelism
    at 8, which is why every published Ultra layout scales with PP and EP instead.
    """
    reasons = []
    if model.mamba_num_groups and "M" in model.pattern + model.mtp_pattern and model.mamba_num_groups % tp:
        reasons.append(f"Mamba n_groups is {model.mamba_num_groups} and must be divisible by TP")
    if model.mamba_num_heads and "M" in model.pattern + model.mtp_pattern and model.mamba_num_heads % tp:
        reasons.append(f"the {model.mamba_num_heads} Mamba heads must be divisible by TP")
    if model.num_attention_heads % tp:
        reasons.append(f"the {model.num_attention_heads} attention heads must be divisible by TP")
    if not reasons:
        return []
    valid = common_divisors(model.mamba_num_groups, model.mamba_num_heads, model.num_attention_heads)
    return [_err(key, tp, "; ".join(reasons), fmt(valid), "tp-model")]


#: First Megatron-Core minor version that replicates KV heads when TP is a multiple of the groups.
KV_REPLICATION_SINCE = (0, 16)


@rule("tp-kv-groups", "TP versus the KV groups (divisor, or multiple with KV replication)",
      "megatron/core/transformer/transformer_config.py (TransformerConfig.__post_init__): up to core_v0.15.x "
      "'num_query_groups must be a multiple of tensor_model_parallel_size'; from core_v0.16.0 'a multiple or "
      "divisor' (KV heads are replicated when TP > groups)",
      "Megatron-Core <= 0.15: groups % TP == 0; >= 0.16 (0.16 - 0.20 checked): groups % TP == 0 or TP % groups == 0")
def tp_vs_kv_groups(model: ModelSpec, tp: int, mcore_version: str | None, key: str) -> list[Problem]:
    """Say which rule applied through the message; the version comes from ``stages/images.toml``."""
    g = model.num_query_groups
    ver = version_tuple(mcore_version)
    replicate = ver >= KV_REPLICATION_SINCE or ver == (0, 0)
    if g % tp == 0 or (replicate and tp % g == 0):
        return []
    if replicate:
        valid = f"{fmt(divisors(g))} or any multiple of {g}"
        msg = (f"TP must divide the {g} KV groups or be a multiple of them (Megatron-Core "
               f"{mcore_version or '>= 0.16'} replicates KV heads when TP is a multiple of the groups)")
        return [_err(key, tp, msg, valid, "tp-kv-groups")]
    else:
        valid = divisors(g)
        msg = (f"the {g} KV groups must be divisible by TP: Megatron-Core {mcore_version} (< 0.16) does not "
               f"replicate KV heads")
    return [_err(key, tp, msg, fmt(valid), "tp-kv-groups")]


def kv_note(model: ModelSpec, tp: int, mcore_version: str | None) -> str:
    """How the KV groups are laid out at this TP (for the dry-run's layout table)."""
    g = model.num_query_groups
    if tp <= g:
        return f"{plural(g // tp, 'KV group')} per rank (groups divisible by TP: holds for every Megatron-Core version)"
    return (f"KV heads replicated x{tp // g} (TP {tp} > {g} groups: needs Megatron-Core >= 0.16; "
            f"pinned {mcore_version or 'unknown'})")


# ------------------------------------------------------------------------------------ rule 2: SP
@rule("moe-tp-needs-sp", "MoE with TP > 1 requires sequence parallel",
      "megatron/core/transformer/moe/moe_layer.py (MoELayer.forward raises ValueError in training when the "
      "attention TP group is larger than 1 and sequence_parallel is off; model_parallel_config.py only warns)",
      "Megatron-Core 0.12 - 0.20")
def moe_tp_needs_sp(model: ModelSpec, tp: int, sp: bool, key: str) -> list[Problem]:
    if model.is_moe and tp > 1 and not sp:
        return [_err(key, sp, f"the model has MoE layers and TP={tp}: Megatron-Core refuses to train MoE with "
                              "tensor parallel unless sequence parallel is on", "true", "moe-tp-needs-sp")]
    return []


@rule("sp-tp1", "sequence parallel with TP = 1 is a no-op (warning)",
      "megatron/training/arguments.py ('Disabling sequence parallelism because tensor model parallelism is "
      "disabled'); Megatron-Bridge's 24-GPU Ultra pretrain recipe sets sequence_parallel=True at TP=1",
      "Megatron-Core 0.12 - 0.20")
def sp_with_tp1(tp: int, sp: bool, key: str) -> list[Problem]:
    if tp == 1 and sp:
        return [_warn(key, sp, "sequence parallel has no effect at TP=1 (Megatron turns it off with a warning)",
                      "false (or TP > 1)", "sp-tp1")]
    return []


# ------------------------------------------------------------------------------------ rule 3: EP
@rule("ep-experts", "EP divides the number of experts",
      "megatron/core/transformer/moe/moe_layer.py (assert num_moe_experts % ep_size == 0)",
      "Megatron-Core 0.12 - 0.20")
def ep_divides_experts(model: ModelSpec, ep: int, key: str) -> list[Problem]:
    if not model.is_moe or model.num_experts % ep == 0:
        return []
    return [_err(key, ep, f"the {model.num_experts} experts must be divisible by EP", fmt(divisors(model.num_experts)),
                 "ep-experts")]


@rule("etp-ffn", "ETP divides the expert FFN and the latent size",
      "megatron/core/transformer/moe/experts.py (expert fc1/fc2 are column/row-parallel over moe_ffn_hidden_size "
      "by ETP: megatron.core.utils.divide asserts divisibility). The latent projections are replicated "
      "(moe_layer.py, parallel_mode='duplicated'), so requiring ETP to divide the latent size is our conservative "
      "addition; the ETP values it excludes (5, 10, 20, ... for 5120) are not sensible layouts",
      "Megatron-Core 0.16 - 0.20 (latent MoE)")
def etp_divides_ffn(model: ModelSpec, etp: int, key: str) -> list[Problem]:
    if not model.is_moe:
        return []
    reasons = []
    if model.moe_ffn_hidden_size % etp:
        reasons.append(f"the expert FFN ({model.moe_ffn_hidden_size}) must be divisible by ETP")
    if model.moe_latent_size and model.moe_latent_size % etp:
        reasons.append(f"the MoE latent size ({model.moe_latent_size}) must be divisible by ETP")
    if not reasons:
        return []
    dims = [model.moe_ffn_hidden_size] + ([model.moe_latent_size] if model.moe_latent_size else [])
    return [_err(key, etp, "; ".join(reasons), fmt(common_divisors(*dims)), "etp-ffn")]


@rule("expert-world", "EP x ETP divides world / PP; the expert side PP x EP x ETP x EDP fills the world",
      "megatron/core/parallel_state.py (initialize_model_parallel builds the expert groups from "
      "world / (PP x EP x ETP) and fails when it does not divide)",
      "Megatron-Core 0.12 - 0.20")
def expert_fills_world(model: ModelSpec, world: int, pp: int, ep: int, etp: int, ep_key: str) -> list[Problem]:
    if not model.is_moe or world % pp:
        return []  # the PP/world rule reports a world that PP does not divide
    per_stage = world // pp
    if per_stage % (ep * etp) == 0:
        return []
    valid = [d for d in divisors(per_stage) if model.num_experts % d == 0]
    return [_err(ep_key, ep, f"EP x ETP = {ep * etp} must divide world / PP = {world} / {pp} = {per_stage} "
                             f"(the expert side PP x EP x ETP x EDP must fill the same {plural(world, 'GPU')})",
                 f"EP in {fmt(valid)} (with ETP={etp})" if etp == 1 else f"EP x ETP dividing {per_stage}",
                 "expert-world")]


# ------------------------------------------------------------------------------------ rule 4: PP
@rule("pp-layers", "PP splits the layers evenly (or an explicit first/last stage size is given)",
      "megatron/core/models/hybrid/hybrid_layer_allocation.py (select_pipeline_segment: 'Number of layers must be "
      "evenly divisible by pipeline-model-parallel-size' unless num_layers_in_first/last_pipeline_stage or '|' "
      "separators are given)",
      "Megatron-Core 0.17 - 0.20 (hybrid model); earlier MambaModel has the same even-split requirement")
def pp_splits_layers(model: ModelSpec, pp: int, first: int | None, last: int | None, key: str,
                     first_key: str = "", last_key: str = "") -> list[Problem]:
    n = model.num_layers
    if pp > n:
        return [_err(key, pp, f"PP={pp} is larger than the {n} layers of {model.name}", fmt(divisors(n)), "pp-layers")]
    if first is None and last is None:
        if n % pp:
            return [_err(key, pp, f"{model.name} has {n} layers, which PP={pp} does not split evenly "
                                  f"(or set {first_key or 'num_layers_in_first_pipeline_stage'} / "
                                  f"{last_key or 'num_layers_in_last_pipeline_stage'})",
                         fmt(divisors(n)), "pp-layers")]
        return []
    f, l_ = first or 0, last or 0
    middle_stages = pp - (first is not None) - (last is not None)
    middle = n - f - l_
    if middle_stages < 0 or middle < 0 or (middle_stages == 0 and middle != 0) or (middle_stages > 0 and (middle % middle_stages or middle == 0)):
        return [_err(first_key or key, first, f"with PP={pp}, first stage {first} and last stage {last} layers, the "
                                              f"remaining {middle} layers cannot be split evenly over {middle_stages} "
                                              f"middle {'stage' if middle_stages == 1 else 'stages'} of {model.name}'s {n} layers",
                     "first + last + k x (PP - stages given) = layers", "pp-layers")]
    return []


def stage_layers(n_layers: int, pp: int, first: int | None = None, last: int | None = None) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` layer ranges per pipeline stage (assumes :func:`pp_splits_layers` holds)."""
    if pp <= 1:
        return [(0, n_layers)]
    f = first if first is not None else None
    la = last if last is not None else None
    middle_stages = pp - (f is not None) - (la is not None)
    middle = n_layers - (f or 0) - (la or 0)
    per = middle // middle_stages if middle_stages > 0 else 0
    out, start = [], 0
    for i in range(pp):
        if i == 0 and f is not None:
            size = f
        elif i == pp - 1 and la is not None:
            size = la
        else:
            size = per
        out.append((start, start + size))
        start += size
    return out


# ------------------------------------------------------------------------------------ rule 5: world
@rule("world-layout", "world = nodes x GPUs per node = TP x PP x CP x DP; minimum GPUs = PP x max(TP x CP, EP x ETP)",
      "megatron/core/parallel_state.py (initialize_model_parallel: world_size % (TP x PP x CP) == 0); minimum "
      "from Megatron-Bridge examples/models/nemotron/nemotron_3/ultra/README.md",
      "Megatron-Core 0.12 - 0.20")
def world_divides(world: int, tp: int, pp: int, cp: int, ep: int, etp: int, nodes_key: str, nodes: int,
                  gpus_per_node: int, what: str = "nodes x GPUs per node", extra_nodes: int = 0) -> list[Problem]:
    """``extra_nodes``: nodes of the same job that are not this layout's (added to the valid counts)."""
    need = tp * pp * cp
    minimum = pp * max(tp * cp, ep * etp)
    if world % need == 0 and world >= minimum:
        return []
    # the node counts that work, nearest to the current one first
    step = _lcm(need, pp * ep * etp)
    ok = [k for k in range(1, 100000) if (k * gpus_per_node) % step == 0 and k * gpus_per_node >= minimum][:64] if gpus_per_node else []
    current = world // gpus_per_node if gpus_per_node else 0
    ok_nodes = sorted(sorted(ok, key=lambda k: (abs(k - current), k))[:4])
    ok_nodes = [k + extra_nodes for k in ok_nodes]
    reason = (f"{what} = {plural(world, 'GPU')}, which TP x PP x CP = {tp} x {pp} x {cp} = {need} does not divide"
              if world % need else f"{what} = {plural(world, 'GPU')}, fewer than the layout's minimum PP x max(TP x CP, EP x ETP) = {minimum}")
    valid = f"{nodes_key} in {fmt(ok_nodes)}, ..." if ok_nodes else f"a multiple of {plural(step, 'GPU')}"
    return [_err(nodes_key, nodes, reason, valid, "world-layout")]


def _lcm(a: int, b: int) -> int:
    from math import gcd

    return a * b // gcd(a, b) if a and b else max(a, b)


# ------------------------------------------------------------------------------------ rule 6: batch
@rule("batch-dp", "global batch divisible by micro batch x DP",
      "megatron/core/num_microbatches_calculator.py (ConstantNumMicroBatchesCalculator asserts 'global batch size "
      "is not divisible by micro batch size times data parallel size' unless decrease_batch_size_if_needed)",
      "Megatron-Core 0.12 - 0.20; NeMo RL policy training uses the same calculator")
def batch_divisible(gbs: int, mbs: int, dp: int, gbs_key: str) -> list[Problem]:
    step = mbs * dp
    if step and gbs % step == 0:
        return []
    lo = max(step, (gbs // step) * step) if step else 1
    return [_err(gbs_key, gbs, f"the global batch must be divisible by micro batch x DP = {mbs} x {dp} = {step}",
                 f"multiples of {step}, e.g. {lo}, {lo + step}", "batch-dp")]


# ------------------------------------------------------------------------------------ rule 7: CP
def cp_multiple(tp: int, cp: int, sp: bool) -> int:
    """The multiple every (sub-)sequence must have: 2 x CP when CP > 1 (Megatron splits each sequence into
    2 x CP chunks for load balance), times TP with sequence parallel (each CP chunk is scattered over TP);
    TP alone with SP and CP = 1; else 1. NeMo RL uses the same product (make_sequence_length_divisible_by =
    CP x 2 x TP in its Ultra recipes)."""
    m = 2 * cp if cp > 1 else 1
    if sp and tp > 1:
        m *= tp
    return m


def pack_pad_multiple(tp: int, cp: int, sp: bool) -> int:
    """The multiple each packed sub-sequence is padded to: with CP > 1, 2 x CP (x TP with sequence
    parallel) — Transformer Engine's THD attention splits every sub-sequence into 2 x CP chunks; with
    CP = 1 no per-sub-sequence padding is needed (only the whole pack must divide by TP, which the
    ``cp-seq`` rule checks on the sequence length)."""
    return cp_multiple(tp, cp, sp) if cp > 1 else 1


@rule("cp-seq", "sequence length divisible by 2 x CP (x TP with sequence parallel)",
      "megatron/core/utils.py get_pretrain_batch_on_this_cp_rank (zigzag split of each sequence into 2 x CP chunks) "
      "and get_sft_batch_on_this_cp_rank (THD, packed); sequence parallel scatters each rank's chunk over TP; "
      "Megatron-Bridge PackedSequenceSpecs.pad_seq_to_mult documents CP x 2; NeMo RL's Ultra recipes pad to "
      "CP x 2 x TP",
      "Megatron-Core 0.12 - 0.20")
def cp_seq_divisible(seq: int, tp: int, cp: int, sp: bool, seq_key: str) -> list[Problem]:
    m = cp_multiple(tp, cp, sp)
    if m <= 1 or seq % m == 0:
        return []
    lo = (seq // m) * m
    if cp > 1 and sp and tp > 1:
        detail = f"2 x CP x TP = 2 x {cp} x {tp} = {m} (context parallel, sequence parallel over TP)"
    elif cp > 1:
        detail = f"2 x CP = 2 x {cp} = {m} (context parallel splits each sequence into 2 x CP chunks)"
    else:
        detail = f"TP = {m} (sequence parallel)"
    return [_err(seq_key, seq, f"the sequence length must be divisible by {detail}",
                 f"multiples of {m}, e.g. {lo or m}, {lo + m}", "cp-seq")]


@rule("sft-pad-multiple", "packed SFT data padded to the multiple the SFT layout needs",
      "DESIGN §3 / Megatron-Bridge packed THD data: every sub-sequence padded to a multiple of 2 x CP (x TP with "
      "SP) plus one token (the loader drops one token per sub-sequence)",
      "Megatron-Bridge 0.5 (nemotron_3_ultra) packed Parquet loader")
def sft_pad_matches(data_multiple: int | None, required: int, key: str, value: Any, source: str) -> list[Problem]:
    if data_multiple is None or (required <= 1 and data_multiple in (None, 0, 1)):
        return []
    if data_multiple % required:
        return [_err(key, value, f"the packed data ({source}) pads each sub-sequence to a multiple of "
                                         f"{data_multiple}, but this SFT layout needs a multiple of {required}; "
                                         "re-run data prep sft with the matching pad multiple",
                     f"{required} (or a multiple of it)", "sft-pad-multiple")]
    if data_multiple != required:
        return [_warn(key, value, f"the packed data ({source}) pads to a multiple of {data_multiple}; this "
                                          f"layout needs only {required} (extra padding wastes tokens)",
                      str(required), "sft-pad-multiple")]
    return []


# ------------------------------------------------------------------------------------ rule 8: engines
@rule("engine-layout", "generation engines: GPUs divisible by GPUs per engine, engine divisible by its "
      "DP-attention size, attention TP divides the Mamba groups",
      "radixark/miles scripts/run_nemotron_3_ultra_550b_a55b.py (_sglang_args asserts total % gpus_per_engine "
      "and that attn_tp = gpus_per_engine / dp_size divides n_groups=8); NeMo RL "
      "nemo_rl/models/generation/vllm/vllm_generation.py (world % (TP x PP) == 0, EP % TP == 0, EP != TP needs "
      "async_engine=false)",
      "miles (Aug 2026), NeMo RL main 7ea279a (vLLM 0.25)")
def engine_layout(model: ModelSpec, total_gpus: int, gpus_per_engine: int, dp_attention: int, attn_tp: int,
                  keys: dict[str, str], values: dict[str, Any]) -> list[Problem]:
    """``keys``/``values``: ``total``, ``engine``, ``dp`` — the config keys that set those numbers."""
    out: list[Problem] = []
    if gpus_per_engine < 1 or total_gpus % gpus_per_engine:
        out.append(_err(keys["engine"], values["engine"], f"the {total_gpus} generation GPUs must be divisible by the "
                                                          f"GPUs per engine ({gpus_per_engine})",
                        fmt([d for d in divisors(total_gpus) if d <= 64]), "engine-layout"))
    if dp_attention < 1 or gpus_per_engine % dp_attention:
        out.append(_err(keys["dp"], values["dp"], f"an engine of {plural(gpus_per_engine, 'GPU')} must be divisible by its "
                                                  f"DP-attention size ({dp_attention})",
                        fmt(divisors(gpus_per_engine)), "engine-layout"))
    elif attn_tp and model.mamba_num_groups and model.mamba_num_groups % attn_tp:
        valid = [d for d in divisors(gpus_per_engine) if model.mamba_num_groups % (gpus_per_engine // d) == 0]
        out.append(_err(keys["dp"], values["dp"], f"attention TP inside an engine = {gpus_per_engine} / {dp_attention} "
                                                  f"= {attn_tp} must divide Mamba n_groups = {model.mamba_num_groups}",
                        f"DP-attention in {fmt(valid)}", "engine-layout"))
    return out


@rule("serving-memory", "a serving engine's (eval's vLLM; NeMo RL's vLLM or SGLang generation engines) BF16 weights "
      "per GPU, one max_model_len request's KV and Mamba state and the fixed allowance fit within "
      "gpu_memory_utilization (SGLang: mem_fraction_static) x GPU memory",
      "vLLM takes gpu_memory_utilization x GPU memory (SGLang mem_fraction_static x GPU memory) for weights, "
      "activations and the KV cache, and refuses to start "
      "when the cache of one max_model_len request does not fit in what the weights leave; weights per GPU: "
      "nemotron.layout.memory.inference_weights_gb (dense / (TP x PP) + experts / (EP x PP))",
      "vLLM 0.x as pinned by NeMo RL main 7ea279a")
def serving_memory(weights_gb: float, state_gb: float, allowance_gb: float, gpu_memory_gb: float | None,
                   utilization: float, layout: str, key: str, value: Any, valid: str,
                   severity: str = "error", engine: str = "vLLM", utilization_key: str = "gpu_memory_utilization",
                   note: str = "") -> list[Problem]:
    """Refuse (``severity`` "error") a serving layout whose ``weights_gb + state_gb + allowance_gb`` (GB per GPU)
    exceed ``utilization x gpu_memory_gb``. ``layout`` names the layout in the message (``TP8 PP1 EP8``); ``key`` /
    ``value`` the config key to change, ``valid`` the hint (a layout that fits); ``engine`` the server that cannot
    start (``vLLM``, ``SGLang``) and ``utilization_key`` its memory-fraction key; ``note``: said at the end of the
    message in parentheses (where an assumed GPU memory comes from, why it is only a warning). Nothing when the GPU memory is unknown (the memory table
    says so)."""
    if not gpu_memory_gb or utilization <= 0:
        return []
    budget = utilization * gpu_memory_gb
    need = weights_gb + state_gb + allowance_gb
    if need <= budget:
        return []
    msg = (f"{layout} holds {weights_gb:.0f} GB of BF16 weights per GPU; with one request's KV and Mamba state "
           f"({state_gb:.2f} GB) and the {allowance_gb:.0f} GB allowance that is {need:.0f} GB, more than "
           f"{utilization_key} {utilization:g} x {gpu_memory_gb:.0f} GB = {budget:.0f} GB: {engine} "
           f"{'cannot' if severity == 'error' else 'may not'} start")
    if note:
        msg += f" ({note})"
    return [Problem(key=key, value=value, message=msg, valid=valid, rule="serving-memory", severity=severity)]


#: Bytes a parameter takes in host RAM and in the files NeMo RL's Hugging Face export reads and writes: BF16, the
#: dtype of the Megatron model Megatron-Bridge builds for NemotronH and of the safetensors it saves.
EXPORT_BYTES_PER_PARAM = 2


@rule("rl-export-host-memory", "NeMo RL's Hugging Face export after RLVR/MOPD holds the whole policy in the host RAM "
      "of one process on the Ray head's node: params x 2 bytes (BF16) must fit the node's memory",
      "NeMo RL examples/converters/convert_megatron_to_hf.py -> nemo_rl/models/megatron/community_import.py "
      "export_model_from_megatron (one process: gloo temporary_distributed_context on CPU, "
      "bridge.load_megatron_model, then save_hf_pretrained); convert_dcp_to_hf.py -> nemo_rl/utils/native_checkpoint.py "
      "convert_dcp_to_hf (dcp_to_torch_save, then torch.load of the whole state dict); parameters: "
      "nemotron.config.catalogue.param_count (Ultra 560.5 B), or for a model outside the catalogue "
      "catalogue.spec_from_hf_config of policy.model_name's config.json", "NeMo RL main 7ea279a")
def rl_export_host_memory(params: int | None, available_bytes: int | None, key: str, value: Any, where: str,
                          fix: str, severity_unknown: str = "warning", counted: str = "") -> list[Problem]:
    """The Ray head's node against the host RAM NeMo RL's export needs (what :func:`nemotron.runtime.rl.nemo_rl.finish`
    runs after training): ``params`` (elements, total incl. MTP) x :data:`EXPORT_BYTES_PER_PARAM` bytes, a lower
    bound (no margin is added: no pinned source states the converter's peak above the weights it holds). The one
    process reads about that many bytes of Megatron weights (the checkpoint's optimizer state is not read) and
    writes as many of Hugging Face safetensors.

    ``available_bytes``: the RAM a process may use there (None: unknown); ``where`` says where that figure comes
    from (``Slurm mem = '512G' of profile cluster``, ``this node (/proc/meminfo MemTotal)``); ``key`` /
    ``value`` the key that sets it (or would); ``fix`` the hint; ``counted``: where ``params`` comes from, said in
    the message when not empty (a model outside the catalogue: its ``config.json``), or, with ``params`` None, why
    the parameters could not be counted. Returns an error when both figures are known and the memory is below the
    need, a ``severity_unknown`` problem (default a warning) when the memory or the parameters are unknown (the
    check did not run), nothing when it fits. All figures in GB = 10^9 bytes."""
    if params is None:
        return [Problem(key=key, value=value, rule="rl-export-host-memory", severity=severity_unknown, valid=fix,
                        message=f"NeMo RL's Hugging Face export after training loads the whole policy into one CPU "
                                f"process on the Ray head's node, and its host RAM is not checked: {counted}")]
    need = int(params) * EXPORT_BYTES_PER_PARAM
    what = (f"NeMo RL's Hugging Face export after training loads the whole policy into one CPU process on the Ray "
            f"head's node: {params / 1e9:.1f} B parameters x {EXPORT_BYTES_PER_PARAM} bytes (BF16) = "
            f"{need / 1e9:.0f} GB of host RAM at least (it reads {need / 1e9:.0f} GB of Megatron weights and writes "
            f"{need / 1e9:.0f} GB of safetensors{'; parameters counted from ' + counted if counted else ''})")
    if available_bytes is None:
        return [Problem(key=key, value=value, rule="rl-export-host-memory", severity=severity_unknown, valid=fix,
                        message=f"{what}; the node's memory is unknown ({where}), so it is not checked before the "
                                f"run: a node with less loses the conversion only after the whole training run")]
    if available_bytes >= need:
        return []
    return [_err(key, value, f"{what}, more than the {available_bytes / 1e9:.0f} GB of {where}: the conversion "
                             "would fail after the whole training run", fix, "rl-export-host-memory")]


#: Bytes a parameter takes in the Hugging Face safetensors a conversion writes, by ``convert.dtype`` (torch's element
#: sizes: bfloat16 and float16 2, float32 4).
CONVERT_DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float32": 4, "fp32": 4}


@rule("convert-cpu-host-memory", "a CPU conversion (convert.device=cpu) holds the whole model in the host RAM of its "
      "one process: params x the bytes of convert.dtype must fit the node's memory",
      "Megatron-Bridge examples/conversion/convert_checkpoints.py (AutoBridge.export_ckpt / import_ckpt on CPU: the "
      "whole state dict in one process) and its Ultra README (CPU conversion when one node's host RAM holds the "
      "1.1 TB model); parameters: nemotron.config.catalogue.param_count (Ultra 560.5 B)", "Megatron-Bridge 4588417")
def convert_cpu_host_memory(params: int, dtype: str, available_bytes: int | None, key: str, value: Any, where: str,
                            fix: str) -> list[Problem]:
    """A CPU conversion's node against the host RAM the conversion holds: ``params`` (elements, total incl. MTP when
    the conversion keeps it) x :data:`CONVERT_DTYPE_BYTES` of ``dtype`` (``convert.dtype``; a dtype not in the table
    is counted as 2 bytes, the smallest, and left to its own check), a lower bound (no margin added).

    ``available_bytes``: the RAM a process may use on the node (None: unknown); ``where`` says where that figure comes
    from; ``key`` / ``value`` the key that sets it; ``fix`` the hint. Returns an error when the figure is known and
    below the need, a warning when it is unknown, nothing when it fits. All figures in GB = 10^9 bytes."""
    per = CONVERT_DTYPE_BYTES.get(str(dtype).lower(), 2)
    need = int(params) * per
    what = (f"a CPU conversion (convert.device=cpu) holds the whole model in one process's host RAM: "
            f"{params / 1e9:.1f} B parameters x {per} bytes ({dtype}, convert.dtype) = {need / 1e9:.0f} GB at least")
    if available_bytes is None:
        return [_warn(key, value, f"{what}; the node's memory is unknown ({where}), so it is not checked before the "
                                  "run", fix, "convert-cpu-host-memory")]
    if available_bytes >= need:
        return []
    return [_err(key, value, f"{what}, more than the {available_bytes / 1e9:.0f} GB of {where}: the conversion would "
                             "run out of host memory", fix, "convert-cpu-host-memory")]


@rule("gb200-tuned", "settings the Ultra RL recipes tuned for GB200 NVL72 on other GPUs: HybridEP's multi-node NVLink "
      "(refused), HybridEP itself and vLLM's flashinfer_cutlass MoE backend (warnings: no source states their hardware)",
      "NeMo RL nemo_rl/models/megatron/setup.py (hybridep: NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN defaults to "
      "min(EP, 64), USE_MNNVL to int(EP > 4)); Megatron-Core transformer_config.py (only the hybridep backend "
      "supports MNNVL) and moe/fused_a2a.py (ranks per NVLink domain divide the EP group); NeMo RL "
      "examples/nemo_gym/nemotron-3-ultra/*.yaml (GB200 NVL72 cluster shapes; the MOPD teachers override the "
      "dispatcher to alltoall); NeMo RL 8-GPU-node recipes (grpo-qwen3-30ba3b-8n8g-megatron.yaml: moe_backend triton)",
      "NeMo RL main 7ea279a, Megatron-Core 0.18 (c8288b6)")
def gb200_tuned(arch: str | None, gpus_per_node: int, ep: int, dispatcher: Any, flex_backend: Any, use_mnnvl: Any,
                ranks_per_domain: Any, moe_backend: Any, prefix: str, gen_prefix: str,
                declared: bool = True, profile_name: str | None = None) -> list[Problem]:
    """On a profile whose GPUs are not Blackwell (an H100/H200 node: NVLink reaches the GPUs of one node only):

    * ``moe_flex_dispatcher_backend: hybridep`` with the flex dispatcher and EP above the node's GPUs, and neither
      ``hybridep_use_mnnvl: false`` nor ``hybridep_num_ranks_per_nvlink_domain`` <= GPUs per node set: an error.
      NeMo RL would export ``USE_MNNVL=1`` and ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=min(EP, 64)``, the
      multi-node NVLink domain of a GB200 NVL72 rack, which these nodes lack.
      A warning instead when no profile declared the GPUs (``declared`` false: Hopper is assumed).
    * hybridep otherwise: a warning — the pinned sources do not say whether DeepEP's HybridEP kernels run on Hopper.
    * ``vllm_kwargs.moe_backend: flashinfer_cutlass``: a warning — vLLM is not in the pinned sources, so what
      hardware this backend needs is not stated there; NeMo RL's 8-GPU-node recipes use ``triton``.

    ``arch`` None (a profile, ``profile_name``, that declares neither ``gpu`` nor ``gpu_arch``): one warning when the
    config keeps either setting, saying the check could not run and how to enable it (declare the profile's GPU).
    ``declared`` false (no profile: ``arch`` is the assumed Hopper): the same findings, all warnings, each saying
    the GPUs were assumed and not checked against real ones, so that both unknown-GPU cases say the same.
    """
    if arch == "blackwell":
        return []
    hybridep = str(dispatcher) == "flex" and str(flex_backend) == "hybridep"
    if arch is None:
        kept = [f"{prefix}.moe_flex_dispatcher_backend=hybridep"] if hybridep else []
        kept += [f"{gen_prefix}.moe_backend=flashinfer_cutlass"] if str(moe_backend) == "flashinfer_cutlass" else []
        if not kept:
            return []
        where = f"profile {profile_name}" if profile_name else "the profile"
        return [_warn(f"profile.{profile_name}.gpu" if profile_name else "profile.gpu", None,
                      f"{where} declares no GPU (gpu or gpu_arch), so the GB200-tuned settings {', '.join(kept)} are "
                      "not checked against its GPUs (on H100/H200 nodes HybridEP's multi-node NVLink defaults are "
                      "refused)", 'declare the GPU in the profile: gpu = "H100" (or gpu_arch = "hopper")',
                      "gb200-tuned")]
    out: list[Problem] = []
    if hybridep:
        domain = ranks_per_domain if isinstance(ranks_per_domain, int) else None
        node_domain = use_mnnvl is False or (domain is not None and domain <= max(1, gpus_per_node))
        if ep > gpus_per_node and not node_domain:
            out.append((_err if declared else _warn)(f"{prefix}.moe_flex_dispatcher_backend", flex_backend,
                            f"HybridEP at EP {ep} on {arch} nodes of {gpus_per_node} GPUs: NeMo RL would set "
                            f"USE_MNNVL=1 and {min(ep, 64)} ranks per NVLink domain (the GB200 NVL72 recipe's "
                            f"multi-node NVLink), but NVLink here reaches the {gpus_per_node} GPUs of one node",
                            f"{prefix}.moe_token_dispatcher_type=alltoall (as the recipe's MOPD teachers), or "
                            f"+{prefix}.hybridep_use_mnnvl=false +{prefix}.hybridep_num_ranks_per_nvlink_domain="
                            f"{gpus_per_node}", "gb200-tuned"))
        else:
            out.append(_warn(f"{prefix}.moe_flex_dispatcher_backend", flex_backend,
                             f"HybridEP comes from the GB200 recipes; the pinned Megatron-Core and NeMo RL sources do "
                             f"not state whether its kernels (DeepEP's hybrid-ep branch) run on {arch} GPUs",
                             f"{prefix}.moe_token_dispatcher_type=alltoall (Megatron-Core's all-to-all dispatcher)",
                             "gb200-tuned"))
    if str(moe_backend) == "flashinfer_cutlass":
        out.append(_warn(f"{gen_prefix}.moe_backend", moe_backend,
                         f"vLLM's flashinfer_cutlass MoE backend comes from the GB200 recipes; vLLM is not in the "
                         f"pinned sources, so whether it runs on {arch} GPUs is not stated there",
                         f"{gen_prefix}.moe_backend=triton (NeMo RL's 8-GPU-node recipes)", "gb200-tuned"))
    if not declared:  # no profile: the GPUs are a guess, so is the verdict; say so, as for a profile without a GPU
        out = [replace(p, message=f"{p.message} (assumed: no profile, so {arch} GPUs; not checked against real ones: "
                                  "a profile that declares its gpu checks it)") for p in out]
    return out


@rule("sglang-dp-attention", "NeMo RL's SGLang engines get no DP-attention: dp_size 1, enable_dp_attention unset",
      "NVIDIA-NeMo/RL nemo_rl/models/generation/sglang/sglang_worker.py _compute_server_args (passes tp_size, dp_size, "
      "pp_size, ep_size and a fixed key list, never enable_dp_attention; asserts tp_size = num_gpus_per_engine / "
      "pp_size); SGLang ServerArgs (dp_size > 1 without DP-attention runs dp_size replicas of tp_size GPUs each)",
      "NeMo RL main 7ea279a")
def sglang_dp_attention(enable_dp_attention: Any, dp_size: int, tp_size: int, gpus_per_engine: int,
                        prefix: str) -> list[Problem]:
    """``prefix``: ``policy.generation.sglang_cfg``. The miles layout (attention TP = engine GPUs / DP-attention
    size) never reaches SGLang under NeMo RL, so the engine's attention TP is ``tp_size``."""
    out: list[Problem] = []
    rid = "sglang-dp-attention"
    if enable_dp_attention:
        out.append(_err(f"{prefix}.enable_dp_attention", enable_dp_attention,
                        "NeMo RL's SGLang worker never passes enable_dp_attention to SGLang: it would be silently off",
                        "false (attention TP = tp_size), or the vllm backend", rid))
    if dp_size > 1:
        out.append(_err(f"{prefix}.dp_size", dp_size,
                        f"without DP-attention (NeMo RL never passes it) SGLang runs dp_size x tp_size = {dp_size} x "
                        f"{tp_size} = {dp_size * tp_size} ranks on an engine of {plural(gpus_per_engine, 'GPU')}",
                        "1", rid))
    return out


# ------------------------------------------------------------------------------------ rule 9: GRPO
@rule("grpo-batch", "prompts per step x generations per prompt equals (or is a multiple of) the global batch",
      "nemo_rl/algorithms/grpo.py (enforces a training batch of num_prompts_per_step x num_generations_per_prompt "
      "samples, consumed in global batches of policy.train_global_batch_size)",
      "NeMo RL main 7ea279a")
def grpo_batch(prompts: int, generations: int, gbs: int, gbs_key: str, step: int = 1) -> list[Problem]:
    """``step``: micro batch x DP of the training layout (a valid global batch is also a multiple of it)."""
    samples = prompts * generations
    if gbs and samples % gbs == 0:
        return []
    good = [d for d in divisors(samples) if d % max(step, 1) == 0]
    near = sorted(sorted(good, key=lambda d: (abs(d - gbs), d))[:4])
    valid = (f"a divisor of {samples} that is a multiple of micro batch x DP = {step}: {fmt(near)}" if near
             else f"change the prompts or generations: no divisor of {samples} is a multiple of micro batch x DP = {step}")
    return [_err(gbs_key, gbs, f"each step yields grpo.num_prompts_per_step x grpo.num_generations_per_prompt = "
                               f"{prompts} x {generations} = {samples} samples, which the global batch does not divide",
                 valid, "grpo-batch")]


# ------------------------------------------------------------------------------------ rule 10: MOPD
TEACHER_SLOTS = ("general", "rlhf", "ifbench", "reasoning", "swe")


@rule("mopd-general-teacher", "MOPD needs a general teacher; other slots fall back to it",
      "NVIDIA-NeMo/RL examples/nemo_gym/nemotron-3-ultra/mopd.yaml (_teachers.general required, others "
      "${_teachers.general}) and ultra_launch.sh (NRL_GENERAL_TEACHER_PATH is required)",
      "NeMo RL main 7ea279a")
def mopd_general_teacher(teachers: dict[str, Any], key_prefix: str = "_teachers") -> list[Problem]:
    general = teachers.get("general")
    if general in (None, ""):
        return [_err(f"{key_prefix}.general", general, "MOPD needs a general teacher (the Student RLVR checkpoint); "
                                                      "the other teacher slots fall back to it",
                     "a checkpoint path or ${art:rl-checkpoint,path}", "mopd-general-teacher")]
    return []


def resolve_teachers(teachers: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Fill unset slots with the general teacher. Returns (panel, slots that fell back)."""
    general = teachers.get("general")
    panel: dict[str, Any] = {}
    fell: list[str] = []
    for slot in [*TEACHER_SLOTS, *(s for s in teachers if s not in TEACHER_SLOTS)]:
        value = teachers.get(slot)
        if value in (None, "") and slot != "general":
            panel[slot] = general
            fell.append(slot)
        else:
            panel[slot] = value
    return panel, fell


@rule("mopd-teacher-layout", "each teacher's TP x CP x PP (and EP) fits its nodes' GPUs",
      "nemo_rl/algorithms/opd.py (TeacherResourceConfig: num_nodes x gpus_per_node GPUs per teacher) and "
      "nemo_rl/algorithms/grpo.py (teacher gpus_per_node <= cluster.gpus_per_node)",
      "NeMo RL main 7ea279a; Megatron-Core 0.20")
def teacher_layout(model: ModelSpec, tp: int, cp: int, pp: int, ep: int, nodes: int, gpus_per_node: int,
                   cluster_gpus_per_node: int, prefix: str) -> list[Problem]:
    out: list[Problem] = []
    gpus = nodes * gpus_per_node
    if gpus_per_node > cluster_gpus_per_node:
        out.append(_err(f"{prefix}.gpus_per_node", gpus_per_node, f"a teacher's placement group must fit one node of "
                                                                  f"{plural(cluster_gpus_per_node, 'GPU')}",
                        f"<= {cluster_gpus_per_node}", "mopd-teacher-layout"))
    if gpus % (tp * cp * pp):
        out.append(_err(f"{prefix}.tensor_model_parallel_size", tp,
                        f"a teacher has num_nodes x gpus_per_node = {nodes} x {gpus_per_node} = {plural(gpus, 'GPU')}, which "
                        f"TP x CP x PP = {tp} x {cp} x {pp} = {tp * cp * pp} does not divide",
                        f"TP x CP x PP dividing {gpus}", "mopd-teacher-layout"))
    elif (gpus // pp) % ep:
        out.append(_err(f"{prefix}.expert_model_parallel_size", ep,
                        f"EP must divide a teacher's GPUs per pipeline stage ({gpus} / PP {pp} = {gpus // pp})",
                        fmt([d for d in divisors(gpus // pp) if model.num_experts % d == 0]), "mopd-teacher-layout"))
    return out


@rule("rl-node-total", "nodes = training + generation + gym + teachers, and the job asks for that many",
      "NVIDIA-NeMo/RL examples/nemo_gym/nemotron-3-ultra/ultra_launch.sh (cluster.num_nodes = train + generation "
      "+ teachers; the allocation adds the gym nodes) and nemo_rl/algorithms/grpo.py (train nodes = "
      "cluster.num_nodes - teacher nodes - generation nodes, must be > 0)",
      "NeMo RL main 7ea279a")
def rl_node_total(run_nodes: int, cluster_nodes: int, gen_nodes: int, gym_nodes: int, teacher_nodes: int,
                  colocated: bool) -> list[Problem]:
    out: list[Problem] = []
    train = cluster_nodes - teacher_nodes - (0 if colocated else gen_nodes)
    if train < 1:
        parts = f"generation {gen_nodes} + " if not colocated else ""
        out.append(_err("cluster.num_nodes", cluster_nodes,
                        f"no nodes left for training: cluster.num_nodes must cover {parts}teachers {teacher_nodes} "
                        "+ at least one training node", f">= {cluster_nodes - train + 1}", "rl-node-total"))
    if run_nodes != cluster_nodes + gym_nodes:
        out.append(_err("run.env.nodes", run_nodes,
                        f"the job must ask for cluster.num_nodes ({cluster_nodes} = training {max(train, 0)} + "
                        f"{'' if colocated else f'generation {gen_nodes} + '}teachers {teacher_nodes}) + gym "
                        f"{plural(gym_nodes, 'node')}", str(cluster_nodes + gym_nodes), "rl-node-total"))
    return out


#: Environment kinds of our ``environments`` table: ``builtin`` = NeMo RL's own environment (math answer
#: verification, ``env.math``: nemo_rl/environments/math_environment.py); the rest are NeMo Gym resources
#: servers (``env.nemo_gym``): an LLM ``judge``, ``instruction_following`` verifiers, a code ``sandbox``, and
#: ``verifier``, a resources server that scores on CPUs (``math_with_judge`` with ``should_use_judge: false``,
#: NVIDIA-NeMo/RL examples/configs/recipes/llm/mopd-qwen3-1.7b-3n8g-megatron-pack.yaml) whose ``agent`` names the
#: ``agent_ref`` the runtime writes into each row of our RL data (nemotron.runtime.rl.nemo_rl.gym_rows).
ENV_KINDS = ("builtin", "judge", "instruction_following", "sandbox", "verifier")
#: NeMo RL's built-in environments our stages use (the ``env.<name>`` section NeMo RL reads).
BUILTIN_ENVS = ("math",)


def _given(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


@rule("rl-environments", "every environment the data needs is on and has what it needs; NeMo Gym ones need Gym on",
      "NVIDIA-NeMo/RL examples/nemo_gym/nemotron-3-ultra/*.yaml and ultra_launch.sh (judge base_url or model, "
      "sif_dir for SWE, env.should_use_nemo_gym, data.default.env_name nemo_gym) and nemo_rl/environments "
      "(math_environment.py: the built-in math verifier)", "NeMo RL main 7ea279a")
def rl_environments(envs: dict[str, Any], env_names: dict[str, Any], use_gym: bool, gym_nodes: int) -> list[Problem]:
    """``envs``: our ``environments`` table; ``env_names``: data keys → the environment each data split
    names (``data.default.env_name``); ``use_gym``: ``env.should_use_nemo_gym``; ``gym_nodes``:
    ``env.nemo_gym.num_gpu_nodes``. A value still holding ``${...}`` (an unset variable, an artifact not
    made yet) counts as given: the compiler warns about it and submission refuses it."""
    out: list[Problem] = []
    rid = "rl-environments"
    enabled_gym = []
    for name, e in envs.items():
        key = f"environments.{name}"
        if not isinstance(e, dict):
            out.append(_err(key, e, "must be a mapping with kind and enabled", "see stages/ultra3/rlvr/default.yaml", rid))
            continue
        kind = e.get("kind")
        if kind not in ENV_KINDS:
            out.append(_err(f"{key}.kind", kind, "not an environment kind", ", ".join(ENV_KINDS), rid))
            continue
        if not e.get("enabled", False):
            continue
        if kind == "builtin":
            if name not in BUILTIN_ENVS:
                out.append(_err(f"{key}.kind", kind, f"NeMo RL has no built-in environment {name!r}",
                                f"builtin only for {', '.join(BUILTIN_ENVS)}; other environments run in NeMo Gym", rid))
            continue
        enabled_gym.append(name)
        if not _given(e.get("gym_config")):
            out.append(_err(f"{key}.gym_config", e.get("gym_config"), "a NeMo Gym environment needs its resources "
                                                                    "server config (a path in the NeMo Gym tree)",
                            "e.g. resources_servers/genrm_compare/configs/genrm_compare.yaml", rid))
        if kind == "judge":
            endpoint, model = e.get("endpoint"), e.get("model")
            if not _given(endpoint) and not _given(model):
                out.append(_err(f"{key}.endpoint", endpoint, f"the {name} judge is on but has neither an endpoint nor "
                                                            "a model to serve", f"{key}.endpoint=http://HOST:PORT/v1 "
                                                                                f"or {key}.model=CHECKPOINT", rid))
            elif _given(endpoint) and "${" not in endpoint and not endpoint.startswith(("http://", "https://")):
                out.append(_err(f"{key}.endpoint", endpoint, "a judge endpoint is a base URL", "http://HOST:PORT/v1", rid))
            elif not _given(endpoint) and gym_nodes < 1:
                out.append(_err("env.nemo_gym.num_gpu_nodes", gym_nodes, f"the {name} judge is served inside NeMo Gym "
                                                                        f"({key}.model) but Gym has no GPU nodes",
                                f"1 or more (and add them to run.env.nodes), or {key}.endpoint=URL", rid))
            if not _given(e.get("server")):
                out.append(_err(f"{key}.server", e.get("server"), "the key under env.nemo_gym where the judge's "
                                                                  "base_url/model go", "e.g. genrm_model.responses_api_models.genrm_model", rid))
        if kind == "sandbox" and not _given(e.get("image")):
            out.append(_err(f"{key}.image", e.get("image"), f"the {name} sandbox is on but names no container images",
                            "a folder of .sif images or an image URI", rid))
    if enabled_gym and not use_gym:
        out.append(_err("env.should_use_nemo_gym", use_gym, f"NeMo Gym environments are on ({', '.join(enabled_gym)}) "
                                                           "but NeMo Gym is off: they would be silently unused",
                        f"true, or environments.<name>.enabled=false for {', '.join(enabled_gym)}", rid))
    if use_gym and not enabled_gym:
        out.append(_err("env.should_use_nemo_gym", use_gym, "NeMo Gym is on but no NeMo Gym environment is enabled",
                        "enable one in environments (judge, instruction_following, sandbox, verifier), or false", rid))
    for key, name in env_names.items():
        if not _given(name) or "${" in name:
            continue
        if name == "nemo_gym":
            if not use_gym:
                out.append(_err(key, name, "the data is routed to NeMo Gym, which is off", "env.should_use_nemo_gym=true",
                                rid))
            continue
        e = envs.get(name)
        if not isinstance(e, dict) or not e.get("enabled", False):
            on = [n for n, v in envs.items() if isinstance(v, dict) and v.get("enabled") and v.get("kind") == "builtin"]
            out.append(_err(key, name, "the data's environment is " + ("off" if isinstance(e, dict) else "not defined")
                            + " (its rewards would be missing)",
                            ", ".join([*on, "nemo_gym"]) + (f", or environments.{name}.enabled=true" if isinstance(e, dict) else ""),
                            rid))
    return out


@rule("segment-multiple", "on 4-GPU GB200 nodes the Ray nodes are a multiple of the NVLink segment (16)",
      "NVIDIA-NeMo/RL examples/nemo_gym/nemotron-3-ultra/ultra_launch.sh (NUM_RAY_NODES % SEGMENT_SIZE, default "
      "16, 'one NVLink domain group')",
      "NeMo RL main 7ea279a")
def segment_multiple(total_nodes: int, segment: int, key: str, segment_key: str = "cluster.segment_size",
                     segment_value: Any = None) -> list[Problem]:
    """Ray nodes (``total_nodes``, set by ``key``) against the NVLink segment ``segment`` (0: none), which comes from
    ``segment_key`` = ``segment_value`` (None: the GB200 NVL72 default of 16 for 4-GPU nodes). The error's valid
    values are the nearest multiples (each once), then the segment key itself with the divisors of ``total_nodes``
    below ``segment`` (a smaller segment: the way out for a small run)."""
    if not segment or total_nodes % segment == 0:
        return []
    lo = (total_nodes // segment) * segment
    near = list(dict.fromkeys(n for n in (lo, lo + segment) if n > 0))
    where = (f"{segment_key}={segment_value}" if segment_value is not None
             else f"{segment_key}=null: the GB200 NVL72 default for 4-GPU nodes")
    smaller = [d for d in divisors(total_nodes) if d < segment]
    valid = f"{key}=" + " or ".join(str(n) for n in near)
    if smaller:
        valid += (f"; or a smaller segment for a small run: {segment_key}="
                  + " or ".join(str(d) for d in smaller) + f" (a divisor of {total_nodes})")
    return [_err(key, total_nodes, f"training + generation + gym + teacher nodes must be a multiple of the NVLink "
                                   f"segment size {segment} ({where})", valid, "segment-multiple")]


# ------------------------------------------------------------------------------------ rule 11: precision
@rule("nvfp4-blackwell", "NVFP4 training precision or NVFP4 GEMMs need Blackwell GPUs",
      "Transformer Engine NVFP4 recipe (FP4 tensor cores exist on Blackwell only); Nemotron 3 Ultra model card "
      "(Hopper runs the NVFP4 checkpoint as W4A16 only); Model Optimizer fake quantization runs anywhere",
      "Transformer Engine 2.x")
def nvfp4_needs_blackwell(uses_nvfp4: bool, arch: str | None, declared: bool, key: str, value: Any,
                          what: str, profile: str | None = None, off: str = "a BF16/FP8 setting") -> list[Problem]:
    """``profile``: the name of the profile the run uses (None: no profile). Undeclared architecture: a warning
    saying, without a profile, to pass one; with a profile that declares no GPU, to declare it there. ``off``: the
    ``key=value`` that runs on the declared non-Blackwell GPU (``mixed_precision=bf16_mixed``,
    ``generate.kernels=fake_quant``), named in the error's fix."""
    if not uses_nvfp4 or arch == "blackwell":
        return []
    if not declared and profile:
        return [_warn(key, value, f"{what} needs Blackwell GPUs; profile {profile} declares no GPU (gpu / gpu_arch), "
                                  "so this is not checked",
                      f"set gpu = \"B200\" (or gpu_arch = \"blackwell\"; GB200, B300, GB300) in [{profile}] of "
                      "env.toml, or profile.gpu=B200 for one command", "nvfp4-blackwell")]
    if not declared:
        return [_warn(key, value, f"{what} needs Blackwell GPUs; no profile declares the GPU architecture, so this "
                                  "is checked when you pass --run/--batch PROFILE",
                      "a profile with gpu_arch = \"blackwell\" (B200, GB200, B300, GB300)", "nvfp4-blackwell")]
    return [_err(key, value, f"{what} needs Blackwell GPUs, but the profile declares {arch} "
                             "(Hopper and Ampere can only fake-quantize NVFP4)",
                 f"{off}, or a Blackwell profile", "nvfp4-blackwell")]


#: Values per NVFP4 scaling block: one FP8 (E4M3) scale for each 16 consecutive FP4 values along a GEMM's reduction
#: (K) dimension (NVIDIA's NVFP4 format; Model Optimizer's NVFP4 quantizer, block size 16).
NVFP4_BLOCK = 16


@rule("nvfp4-tp-blocks", "a TP shard of an NVFP4 GEMM holds whole 16-value scaling blocks",
      "NVFP4 format (one E4M3 scale per 16 values along K); a row-parallel layer (attention output, Mamba output, "
      "expert and shared-expert down projections) is split along K across TP ranks (vLLM / Megatron-Core "
      "RowParallelLinear), so each rank's K must be a multiple of 16",
      "NVFP4 checkpoints of Model Optimizer 0.3x; vLLM modelopt_fp4")
def nvfp4_tp_blocks(model: ModelSpec, tp: int, key: str) -> list[Problem]:
    """Each row-parallel GEMM's input dimension (elements) divided by ``tp`` must be a multiple of
    :data:`NVFP4_BLOCK`: attention ``heads x head_dim``, Mamba ``heads x head_dim``, the expert FFN hidden size and
    the shared expert's intermediate size (those the model has)."""
    dims = {"attention output": model.num_attention_heads * model.head_dim,
            "Mamba output": model.mamba_num_heads * model.mamba_head_dim if "M" in model.pattern else 0,
            "expert down projection": model.moe_ffn_hidden_size if model.num_experts else 0,
            "shared expert down projection": model.moe_shared_expert_intermediate_size if model.num_experts else 0}
    bad = [f"{name} K = {k} / TP {tp} = {k / tp:g}" for name, k in dims.items() if k and k % (NVFP4_BLOCK * tp)]
    if not bad:
        return []
    valid = [t for t in range(1, 65) if all(not k or k % (NVFP4_BLOCK * t) == 0 for k in dims.values())]
    return [_err(key, tp, f"each TP shard must hold whole {NVFP4_BLOCK}-value NVFP4 blocks: {'; '.join(bad)}",
                 fmt(valid), "nvfp4-tp-blocks")]


# ------------------------------------------------------------------------------------ rule 12: resources
@rule("node-shape", "the profile owns the node shape: run.env.gpus_per_node must agree with it",
      "DESIGN §2 (each setting has one owner; a disagreement is an error, never a silent winner)", "all versions")
def node_shape(config_gpn: int | None, profile_gpn: int | None, profile_name: str | None, nodes: int,
               world_needed: int | None) -> list[Problem]:
    if config_gpn is None or profile_gpn is None or config_gpn == profile_gpn:
        return []
    hint = ""
    if world_needed and profile_gpn and world_needed % profile_gpn == 0:
        hint = f" (the layout's {plural(world_needed, 'GPU')} = {plural(world_needed // profile_gpn, 'node')} of {profile_gpn})"
    return [_err("run.env.gpus_per_node", config_gpn,
                 f"this config was laid out for {plural(nodes, 'node')} of {plural(config_gpn, 'GPU')}, but the profile "
                 f"{profile_name or ''} has {plural(profile_gpn, 'GPU')} per node{hint}",
                 f"{profile_gpn}, or null to take the profile's; then set run.env.nodes", "node-shape")]


@rule("gpu-stage", "a GPU stage needs a profile with GPUs",
      "registry: the stage's gpu flag; the profile's gpus_per_node", "all versions")
def gpu_stage_needs_gpus(stage_name: str, profile_gpn: int | None, profile_name: str | None) -> list[Problem]:
    if profile_gpn:
        return []
    return [_err("run.env.gpus_per_node", profile_gpn,
                 f"{stage_name} runs on GPUs, but the profile {profile_name or ''} declares "
                 f"{'no' if profile_gpn is None else 0} GPUs per node",
                 "a profile with gpus_per_node >= 1 (or -c local, which runs on one machine)", "gpu-stage")]


# ------------------------------------------------------------------------------------ rule 13: data
def _norm_tok(name: Any) -> str:
    return str(name or "").strip().rstrip("/").lower().replace("--", "/").rsplit("/", 2)[-1] if name else ""


@rule("data-tokenizer", "the data was tokenized with the model's tokenizer (name and vocabulary hash)",
      "data artifact manifest (tokenizer name, vocab_size, vocab_sha256 written by data prep) versus the stage's "
      "tokenizer and the model's vocabulary", "all versions")
def data_tokenizer_matches(data_tok: dict[str, Any] | None, model_tok_name: str | None, model_vocab: int,
                           expected_sha: str | None, key: str, source: str) -> list[Problem]:
    if not data_tok:
        return []
    out: list[Problem] = []
    dname, dsha, dvocab = data_tok.get("name"), data_tok.get("vocab_sha256"), data_tok.get("vocab_size")
    if expected_sha and dsha and dsha != expected_sha:
        out.append(_err(key, model_tok_name, f"the data ({source}) was tokenized with {dname!r} (vocab hash "
                                             f"{str(dsha)[:12]}...), not this tokenizer (vocab hash {expected_sha[:12]}...)",
                        f"re-run data prep with tokenizer {model_tok_name!r}", "data-tokenizer"))
    elif not expected_sha and model_tok_name and dname and _norm_tok(dname) != _norm_tok(model_tok_name):
        out.append(_err(key, model_tok_name, f"the data ({source}) was tokenized with {dname!r}, not {model_tok_name!r}",
                        f"re-run data prep with tokenizer {model_tok_name!r}, or set {key}={dname!r}", "data-tokenizer"))
    if isinstance(dvocab, int) and dvocab > model_vocab:
        out.append(_err(key, model_tok_name, f"the data's vocabulary ({dvocab} ids) is larger than the model's "
                                             f"({model_vocab}); token ids would overflow the embedding",
                        f"a tokenizer with at most {model_vocab} ids", "data-tokenizer"))
    return out


@rule("sft-pack-size", "SFT's pack size matches the sequence length the config trains at",
      "Megatron-Bridge PackedSequenceSpecs.packed_sequence_size vs model.seq_length; data prep sft's pack_size "
      "(artifact metadata)", "Megatron-Bridge 0.5")
def sft_pack_size(seq: int, spec_pack: int | None, data_pack: int | None, seq_key: str, spec_key: str,
                  source: str) -> list[Problem]:
    out: list[Problem] = []
    if spec_pack not in (None, -1) and spec_pack != seq:
        out.append(_err(spec_key, spec_pack, f"the pack size must equal {seq_key} = {seq}", str(seq), "sft-pack-size"))
    if data_pack is not None and data_pack != seq:
        out.append(_err(seq_key, seq, f"the packed data ({source}) was packed at {data_pack} tokens, but the config "
                                      f"trains at {seq}", f"{data_pack}, or re-run data prep sft with pack_size={seq}",
                        "sft-pack-size"))
    return out


@rule("sft-validation-data", "SFT has packed validation data (else no validation loss is computed)",
      "data prep sft writes no validation file when its split is empty (split.validation_fraction=0 or too few "
      "records); its artifact then has valid_path: null", "data prep sft (this project)")
def sft_validation_data(train_path: Any, val_path: Any, key: str) -> list[Problem]:
    """A warning when the training data is set but ``packed_val_data_path`` is null: the run computes
    no validation loss (an unresolved training path is reported by the artifact check instead)."""
    if val_path is not None or not isinstance(train_path, str) or "${" in train_path:
        return []
    return [_warn(key, None, "no validation data: the packed SFT data has no validation split, so this run "
                             "computes no validation loss",
                  "re-run data prep sft with split.validation_fraction > 0 and enough records for it",
                  "sft-validation-data")]


@rule("packed-micro-batch", "packed SFT trains one pack per micro-batch: train.micro_batch_size = 1",
      "Megatron-Bridge training/config.py ConfigContainer.validate raises ValueError ('Micro batch size should be 1 "
      "when training with packed sequence') when a FinetuningDatasetConfig has packed_sequence_specs with "
      "packed_sequence_size > 0 and micro_batch_size > 1", "Megatron-Bridge nemotron_3_ultra 4588417 (0.5.0)")
def packed_micro_batch(pack_size: Any, mbs: Any, gbs: Any, mbs_key: str = "train.micro_batch_size") -> list[Problem]:
    """One pack is one sequence: a micro-batch of ``mbs`` packs is refused at start; the equivalent is
    ``mbs = 1``, ``gbs / mbs`` and packs ``mbs`` times longer (Megatron-Bridge says the same)."""
    size, m = _iters(pack_size), _iters(mbs)
    if size is None or size <= 0 or m is None or m <= 1:
        return []
    g = _iters(gbs)
    same = (f"; the same tokens per step: micro batch 1, global batch {g // m} and packs of {size * m} tokens"
            if g is not None else "")
    return [_err(mbs_key, mbs, f"packed SFT takes one pack of {size} tokens per micro-batch (Megatron-Bridge refuses "
                               f"a larger micro batch at start){same}", "1", "packed-micro-batch")]


@rule("packed-mamba-path", "packed SFT on a hybrid (Mamba) model trains on Mamba's memory-efficient path: "
      "model.use_mamba_mem_eff_path stays true",
      "Megatron-Core ssm/mamba_mixer.py MambaMixer.forward asserts packed_seq_params is None on the "
      "non-memory-efficient path ('Training with packed sequences is not supported in the non-memory-efficient code "
      "path') at the first forward step; seen on one H100 on 2026-12-05 (sft -c tiny's packs through "
      "Megatron-Bridge's finetune(), docs/gpu_run.md). The memory-efficient path needs causal-conv1d's CUDA "
      "extension, which the NeMo image has", "Megatron-LM c8288b6 (megatron-core 0.18.0)")
def packed_mamba_path(pack_size: Any, mem_eff_path: Any, hybrid: bool,
                      key: str = "model.use_mamba_mem_eff_path") -> list[Problem]:
    """``pack_size``: tokens per pack (None or <= 0: not packed); ``mem_eff_path``: the config's
    ``model.use_mamba_mem_eff_path`` (None: unset, Megatron-Core's default true); ``hybrid``: the model has Mamba
    layers. An error when packed data meets the unfused Mamba path (it fails at step 1, after the job queued and
    loaded its checkpoint)."""
    size = _iters(pack_size)
    if not hybrid or size is None or size <= 0 or mem_eff_path is not False:
        return []
    return [_err(key, mem_eff_path, "packed SFT data cannot train on Mamba's unfused path: Megatron-Core asserts "
                                    "packed_seq_params is None there at the first forward step",
                 "true (Megatron-Core's default; it needs causal-conv1d's CUDA extension, which the NeMo image has)",
                 "packed-mamba-path")]


@rule("optimizer-offload", "optimizer CPU offload needs the precision-aware optimizer (and, with FP8 parameter "
      "gather, delayed FP8 scaling); the precision-aware optimizer needs Adam and the distributed optimizer",
      "Megatron-LM megatron/training/arguments.py validate_args asserts use_precision_aware_optimizer (and "
      "fp8_param_gather only with fp8_recipe 'delayed') when optimizer_cpu_offload is on: the hybrid CPU/GPU optimizer "
      "reuses the precision-aware path; megatron/core/optimizer/optimizer_config.py OptimizerConfig.__post_init__ "
      "asserts optimizer 'adam' and use_distributed_optimizer with use_precision_aware_optimizer",
      "Megatron-LM c8288b6 (megatron-core 0.18.0)")
def optimizer_offload(offload: Any, precision_aware: Any, optimizer: Any, distributed: Any, fp8_param_gather: Any,
                      fp8_recipe: Any, preset: Any, prefix: str = "optimizer") -> list[Problem]:
    """``offload`` / ``precision_aware`` / ``distributed``: the config's ``optimizer_cpu_offload``,
    ``use_precision_aware_optimizer``, ``use_distributed_optimizer`` (None: unset, the recipe's); ``optimizer``
    its ``optimizer`` name (None: ``adam``); ``fp8_param_gather`` / ``fp8_recipe``: what the mixed-precision
    ``preset`` sets (None: unknown)."""
    rid = "optimizer-offload"
    out: list[Problem] = []
    if offload is True and precision_aware is not True:
        out.append(_err(f"{prefix}.use_precision_aware_optimizer", precision_aware,
                        f"{prefix}.optimizer_cpu_offload=true needs the precision-aware optimizer: Megatron-LM asserts "
                        "it (its hybrid CPU/GPU optimizer reuses that code path)", "true", rid))
    if offload is True and fp8_param_gather is True and fp8_recipe != "delayed":
        out.append(_err(f"{prefix}.optimizer_cpu_offload", offload,
                        f"the mixed-precision preset {preset} gathers FP8 parameters with the {fp8_recipe!r} recipe: "
                        "Megatron-LM allows optimizer CPU offload with FP8 parameter gather only for delayed scaling",
                        "false, or a preset without fp8_param_gather (e.g. bf16_mixed), or a delayed-scaling one", rid))
    if precision_aware is True:
        if optimizer not in (None, "adam"):
            out.append(_err(f"{prefix}.optimizer", optimizer, "the precision-aware optimizer runs Adam only "
                                                              "(Megatron-Core asserts it)", "adam", rid))
        if distributed is False:
            out.append(_err(f"{prefix}.use_distributed_optimizer", distributed,
                            "the precision-aware optimizer runs only with the distributed optimizer (Megatron-Core "
                            "asserts it)", "true", rid))
    return out


# ------------------------------------------------------------------------------------ optimizer schedule, precision
#: Megatron-Core's learning-rate decay styles and WSD annealing styles (``OptimizerParamScheduler.get_lr`` in
#: ``megatron/core/optimizer_param_scheduler.py``, the same names in 0.12-0.20): any other name raises
#: "... decay style is not supported" at the first training step. The local runtime implements the same set.
DECAY_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
WSD_STYLES = ("linear", "cosine", "exponential", "minus_sqrt")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _iters(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


@rule("train-length", "Megatron-Bridge trains for `train.train_iters`, or with it null for `train.train_samples` "
      "(then train_iters = train_samples // global_batch_size): exactly one of them, a positive whole number",
      "Megatron-Bridge training/config.py TrainingConfig.finalize asserts 'Either train_iters or train_samples must be "
      "provided', 'Cannot specify both train_iters and train_samples' and train_samples > 0, in the job",
      "Megatron-Bridge 4588417")
def train_length(train_iters: Any, train_samples: Any, global_batch_size: Any, iters_key: str = "train.train_iters",
                 samples_key: str = "train.train_samples") -> list[Problem]:
    """Rule ``train-length`` for a Megatron-Bridge training config (null and absent ``train_samples`` alike: ours
    sets none; ``+train.train_samples=N`` adds it)."""
    rid = "train-length"
    if train_iters is None and train_samples is None:
        return [_err(iters_key, None, f"the run needs a length: Megatron-Bridge takes {iters_key} or, with it null, "
                                      f"{samples_key} (TrainingConfig.finalize asserts one of them in the job)",
                     f"{iters_key}=N (iterations), or {iters_key}=null +{samples_key}=N (train_iters = samples // "
                     "global batch)", rid)]
    if train_iters is not None and train_samples is not None:
        return [_err(samples_key, train_samples, f"is set with {iters_key}={train_iters}: Megatron-Bridge takes one of "
                                                 "them (TrainingConfig.finalize asserts it)",
                     f"drop one: {iters_key}=null, or ~{samples_key}", rid)]
    if train_samples is not None:
        n, gbs = _iters(train_samples), _iters(global_batch_size)
        if n is None or n < 1:
            return [_err(samples_key, train_samples, "must be a positive number of samples", "1, 2, 3, ...", rid)]
        if gbs is not None and gbs >= 1 and n // gbs < 1:
            return [_err(samples_key, train_samples, f"is fewer than one global batch (train.global_batch_size = "
                                                     f"{gbs}): train_samples // global_batch_size = 0 iterations",
                         f"{gbs} or more", rid)]
    return []


def iterations_of(train_iters: Any, train_samples: Any, global_batch_size: Any) -> int | None:
    """The iterations a Megatron-Bridge run trains for: ``train_iters``, or with it null ``train_samples //
    global_batch_size`` (TrainingConfig.finalize); None when neither gives a positive whole number."""
    if train_iters is not None:
        return _iters(train_iters)
    n, gbs = _iters(train_samples), _iters(global_batch_size)
    return n // gbs if n is not None and gbs else None


@rule("lr-range", "the peak learning rate is above 0 and the minimum between 0 and the peak",
      "megatron/core/optimizer_param_scheduler.py OptimizerParamScheduler.__init__ asserts min_lr >= 0 and "
      "max_lr >= min_lr (checked in 0.16.1); a zero peak is ours: the weights would never move",
      "Megatron-Core 0.12-0.20; the local runtime")
def lr_range(lr: Any, min_lr: Any, lr_key: str = "optimizer.lr", min_key: str = "optimizer.min_lr") -> list[Problem]:
    peak, low = _number(lr), _number(min_lr if min_lr is not None else 0.0)
    if peak is None:
        return [_err(lr_key, lr, "the peak learning rate must be a number", "e.g. 2.5e-4", "lr-range")]
    if peak <= 0:
        return [_err(lr_key, lr, "the peak learning rate must be above 0 (0 never moves the weights; Megatron-Core "
                                 "asserts lr >= min_lr >= 0)", "a positive number, e.g. 2.5e-4", "lr-range")]
    if low is None or not 0 <= low <= peak:
        return [_err(min_key, min_lr, f"the minimum learning rate must lie between 0 and {lr_key} = {lr:g} "
                                      "(Megatron-Core asserts 0 <= min_lr <= lr)", f"0 ... {lr:g}", "lr-range")]
    return []


@rule("lr-warmup", "warmup ends before the decay: lr_warmup_iters < lr_decay_iters (default train_iters); "
      "warmup past train_iters with a longer decay is a warning",
      "optimizer_param_scheduler.py asserts lr_decay_steps > 0 and lr_warmup_steps < lr_decay_steps; Megatron-Bridge "
      "0.5 ConfigContainer caps the warmup at lr_decay_steps - 1 with a warning instead (the run would never decay); "
      "the local runtime refuses it", "Megatron-Core 0.12-0.20, Megatron-Bridge 0.5; the local runtime")
def lr_warmup(train_iters: Any, warmup: Any, decay: Any, train_key: str = "train.train_iters",
              warmup_key: str = "scheduler.lr_warmup_iters", decay_key: str = "scheduler.lr_decay_iters") -> list[Problem]:
    rid = "lr-warmup"
    total = _iters(train_iters)
    if total is None or total < 1:
        return [_err(train_key, train_iters, "must be a positive number of iterations", "1, 2, 3, ...", rid)]
    w = _iters(warmup if warmup is not None else 0)
    if w is None or w < 0:
        return [_err(warmup_key, warmup, "must be a number of iterations, 0 or more", f"0 ... {total - 1}", rid)]
    d = _iters(decay if decay is not None else total)
    if d is None or d < 1:
        return [_err(decay_key, decay, "must be a positive number of iterations, or null for train.train_iters",
                     f"null, or 1 ... (e.g. {total})", rid)]
    decay_name = decay_key if decay is not None else f"{decay_key} (null: {train_key})"
    if w >= d:
        return [_err(warmup_key, warmup, f"the warmup must end before the decay does ({decay_name} = {d}): Megatron-Core "
                                         "asserts it, Megatron-Bridge would cap the warmup and the learning rate would "
                                         "never decay", f"0 ... {d - 1}", rid)]
    if w >= total:
        return [_warn(warmup_key, warmup, f"the run ends ({train_key} = {total}) before the warmup does: the learning "
                                          "rate never reaches its peak", f"0 ... {total - 1}", rid)]
    return []


@rule("lr-decay-style", "the decay style is one Megatron-Core has; WSD: a known annealing style and "
      "0 < lr_wsd_decay_iters <= lr_decay_iters",
      "optimizer_param_scheduler.py OptimizerParamScheduler.get_lr raises on any other style at the first step; "
      "__init__ asserts wsd_decay_steps is set for WSD", "Megatron-Core 0.12-0.20; the local runtime")
def lr_decay_style(style: Any, wsd_style: Any, wsd_iters: Any, decay: int,
                   style_key: str = "scheduler.lr_decay_style", wsd_style_key: str = "scheduler.lr_wsd_decay_style",
                   wsd_key: str = "scheduler.lr_wsd_decay_iters") -> list[Problem]:
    rid = "lr-decay-style"
    if style is None:
        return []
    if style not in DECAY_STYLES:
        hint = [s for s in DECAY_STYLES if str(style).lower() == s.lower()]
        maybe = did_you_mean(style, DECAY_STYLES) if not hint else ""
        return [_err(style_key, style, "not a learning-rate decay style of Megatron-Core" +
                     (f" (names are case-sensitive: {hint[0]})" if hint else f"; {maybe}" if maybe else ""),
                     ", ".join(DECAY_STYLES), rid)]
    if style != "WSD":
        return []
    out: list[Problem] = []
    if wsd_style is not None and wsd_style not in WSD_STYLES:
        maybe = did_you_mean(wsd_style, WSD_STYLES)
        out.append(_err(wsd_style_key, wsd_style, "not a WSD annealing style of Megatron-Core"
                        + (f"; {maybe}" if maybe else ""), ", ".join(WSD_STYLES), rid))
    n = _iters(wsd_iters)
    if wsd_iters is not None and (n is None or not 0 < n <= decay):
        out.append(_err(wsd_key, wsd_iters, f"the WSD annealing phase must be 1 ... lr_decay_iters ({decay}) iterations",
                        f"1 ... {decay}", rid))
    return out


@rule("mixed-precision", "mixed_precision names a preset the runtime has",
      "Megatron-Bridge training/mixed_precision.py get_mixed_precision_config raises ValueError on an unknown name "
      "(the names: the key list of the pinned version, scripts/megatron_bridge_keys.py); the local runtime's "
      "LOCAL_PRECISIONS", "Megatron-Bridge 0.5.0; the local runtime")
def mixed_precision_name(value: Any, valid: Iterable[str], where: str, key: str = "mixed_precision") -> list[Problem]:
    names = [str(v) for v in valid]
    if value is None or not names or str(value) in names:
        return []
    close = [n for n in names if str(value).replace("-", "_").lower() == n.replace("-", "_").lower()]
    close = close or difflib.get_close_matches(str(value), names, n=1, cutoff=0.75)
    shown = sorted({n for n in names if "-" not in n} or set(names))
    return [_err(key, value, f"not a mixed-precision preset of {where}" + (f"; did you mean '{close[0]}'?" if close else ""),
                 ", ".join(shown), "mixed-precision")]


__all__ = ["RULES", "RuleInfo", "divisors", "common_divisors", "fmt", "version_tuple", "stage_layers", "cp_multiple",
           "pack_pad_multiple",
           "kv_note", "resolve_teachers", "TEACHER_SLOTS", "ENV_KINDS", "BUILTIN_ENVS", "DECAY_STYLES", "WSD_STYLES"] + [
    r.func.__name__ for r in RULES.values()]


# ------------------------------------------------------------------------------------ MTP boosting
#: What the Megatron-Core pinned for the ``nemo`` image (c8288b6, under Megatron-Bridge 4588417) lacks for MTP
#: boosting: read in megatron/core/transformer/multi_token_prediction.py (process_mtp_loss, the MTP layers' input)
#: and Megatron-Bridge's Mamba provider (models/mamba/mamba_provider.py).
MTP_BOOST_MISSING = ("no KL-to-backbone MTP objective: process_mtp_loss computes the language-model cross-entropy "
                     "of each MTP depth against the gold labels (mtp_loss_scaling_factor scales it); each depth reads "
                     "the gold tokens, not the previous depth's drafts; and no key freezes the NemotronH backbone "
                     "(freeze_language_model exists only on vision-language providers)")


@rule("mtp-boost-framework", "MTP boosting (frozen backbone, forward KL to the backbone, drafts fed back) needs a "
                             "framework that has it",
      "Megatron-Core c8288b6 megatron/core/transformer/multi_token_prediction.py process_mtp_loss (cross-entropy on "
      "rolled gold labels); Megatron-Bridge 4588417 models/mamba/mamba_provider.py (no freeze key); Model "
      "Optimizer's speculative_mtp_boost recipe (modelopt.torch.speculative.mtp) exists only after nvidia-modelopt 0.47",
      "Megatron-Bridge 4588417 / Megatron-Core c8288b6 / nvidia-modelopt 0.47")
def mtp_boost_framework(backend: str, objective: Any, freeze: Any) -> list[Problem]:
    """MTP boosting runs only on the ``local`` backend (:mod:`nemotron.runtime.megatron.mtp_local`); a cluster backend
    is refused, naming what its pinned framework lacks. On ``local``: ``mtp_boost.objective`` must be ``forward-kl``
    and ``mtp_boost.freeze_backbone`` true (the report's MTP boosting; anything else is another method)."""
    if backend != "local":
        return [_err("backend", backend, f"MTP boosting cannot run on {backend} at the pinned versions: "
                     f"{MTP_BOOST_MISSING}; Model Optimizer's speculative_mtp_boost recipe is not in "
                     "nvidia-modelopt 0.47 either. Refused rather than training a different objective",
                     "local (-c local: the report's objective on one machine)", "mtp-boost-framework")]
    out = []
    if objective != "forward-kl":
        maybe = did_you_mean(objective, ("forward-kl",))
        out.append(_err("mtp_boost.objective", objective, (f"{maybe} " if maybe else "") + "MTP boosting trains "
                        "with the temperature-scaled forward KL to the backbone's logits (no cross-entropy on the "
                        "gold token)", "forward-kl", "mtp-boost-framework"))
    if freeze is not True:
        out.append(_err("mtp_boost.freeze_backbone", freeze, "MTP boosting trains the MTP head only; the backbone "
                        "stays as MOPD left it", "true", "mtp-boost-framework"))
    return out


# ----------------------------------------------------------------------- rules checked where their facts are
# These checks read files, the environment, a profile or a framework's key list, so they live with their
# readers (``where``); this is their one declaration: id, title, source. docs/validation.md has a row for each.
_V = "nemotron.validation"
# the config and the profile
declare("model-name", "model.name is a string naming a model of the catalogue",
        "this project's model catalogue (nemotron.config.catalogue)", "this version", f"{_V}.checks")
declare("unresolved", "a ${...} value the compiled config could not resolve (an environment variable or artifact "
        "that does not exist yet) -- warning; submission refuses it", "this project's config compiler "
        "(nemotron.config.compile, OmegaConf interpolation)", "this version",
        "nemotron.config.compile")
declare("profile", "what this shell lacks to start the profile's job (a declared secret, the ssh identity file, "
        "a W&B login): error for a run, warning for a dry run or an estimate",
        "the profile's own checks, nemotron.profiles.profile launch_problems and tracking_problems (env.toml)",
        "this version",
        "nemotron.cli.pipeline")
declare("profile-nodes", "run.env.nodes is at most the profile's nodes", "the profile's nodes key (env.toml); "
        "Slurm refuses or never starts a job above the partition's node limit", "—", f"{_V}.cluster")
declare("profile-ntasks", "the profile's ntasks_per_node agrees with the stage's launch (torchrun: one process per "
        "GPU)", "the profile's ntasks_per_node (env.toml, Slurm's --ntasks-per-node); JobPlan.launch", "—",
        f"{_V}.cluster")
declare("profile-storage-unset", "warning: a Slurm profile without job_dir puts its job folders (and the default "
        "data_root and checkpoint_root) under this machine's $NEMOTRON_HOME/jobs", "the profile's provenance "
        "(env.toml; nemotron.profiles.profile: the defaults on the job folder)", "—", f"{_V}.cluster")
declare("cluster-storage", "every input and output path of a cluster run is on storage the nodes see (the "
        "profile's mounts, data_root, checkpoint_root or job_dir)", "the profile's declared storage (env.toml); "
        "the Slurm nodes see only what is mounted there", "—", f"{_V}.cluster")
declare("container-mount-space", "a container job's storage roots (data_root, checkpoint_root, index_cache_dir, "
        "hf_home) that no mounts entry covers have no whitespace", "pyxis args.c add_mount: each mount goes to enroot "
        "as one whitespace-separated 'SRC DST FLAGS' entry", "—", f"{_V}.cluster")
declare("ray-address", "a ray profile's address answers (TCP connect of at most 2 s)",
        "Ray's job submission API (nemotron.data.raypool.probe_address)", "—", f"{_V}.cluster")
declare("signal-before-limit", "on a Slurm profile run.signal_before_s is below the profile's time limit",
        "sbatch --signal=TERM@N; the same check submission makes", "—", f"{_V}.cluster")
declare("run-keys", "run.signal_before_s and run.chain are whole numbers >= 0",
        "nemotron.launch.plan.plan_job", "—", _V)
declare("runtime-available", "the config's backend has a runtime in this version (the stage's run.py BACKENDS)",
        "the stage's entry script", "this version", _V)
declare("one-machine", "run.env.nodes > 1 with no profile or a local profile: the run is one machine -- warning",
        "JobPlan.command, the local executor (torchrun --nnodes 1)", "—", _V)
declare("gpus-here", "a run on this machine of a cluster backend sees the GPUs its plan counts",
        "runtime/common/prestart.py gpu_problems (the runtimes' own check)", "this version", _V)
declare("framework-here", "a run on this machine of a cluster backend can import its framework "
        "(megatron.bridge, nemo_rl)", "runtime/common/prestart.py missing_modules", "this version", _V)
declare("local-modules", "a backend: local run on this machine can import the modules its entry imports first",
        "runtime/megatron/entry.py run_heavy with the table LOCAL_NEEDS", "this version", _V)
declare("path-name-length", "no path in the config has a file or folder name over 255 bytes (NAME_MAX)",
        "the operating system's ENAMETOOLONG at the path's first use", "—", _V)
declare("output-folder", "each output folder a run on this machine names can be created or written",
        "the run's first mkdir", "—", _V)
declare("blend-mix", "a blend's mix_with parses and mixes with the primary blend as the run mixes it",
        "nemotron.data.blend.parse_mix and mix_blend_files, called again", "this version", _V)
# translation into the framework's form, the framework's key lists
declare("mb-keys", "every Megatron-Bridge key the config passes through is a ConfigContainer key of the pinned "
        "version (did-you-mean); a missing key list is a warning",
        "the stored key list, scripts/megatron_bridge_keys.py (Megatron-Bridge source at the pinned commit)",
        "Megatron-Bridge 4588417", _V)
declare("nemo-rl-keys", "every NeMo RL key the config passes through is a MasterConfig key of the pinned version "
        "(did-you-mean); a missing key list is a warning",
        "the stored key list, scripts/nemo_rl_keys.py (NeMo RL source at the pinned commit)", "NeMo RL main 7ea279a",
        _V)
declare("bridge-translate", "pretrain, SFT, convert: the config translates into Megatron-Bridge's form as the job "
        "translates it", "nemotron.runtime.megatron.megatron_bridge.translate and recipe_kwargs, called again with the "
        "recipe signatures stored in the key list", "Megatron-Bridge 4588417", f"{_V}.checks")
declare("rl-translate", "RLVR, MOPD, eval on a cluster: the config translates into NeMo RL's MasterConfig as the "
        "job translates it", "nemotron.runtime.rl.nemo_rl.translate / eval_config, called again",
        "NeMo RL main 7ea279a", _V)
declare("nemo-rl-sft", "mopd-warmup on NeMo RL: every section of NeMo RL's SFT MasterConfig is present and each "
        "sft.* field we set is an SFTConfig field", "nemo_rl/algorithms/sft.py SFTConfig, MasterConfig",
        "NeMo RL main 7ea279a", _V)
declare("nemo-rl-required", "every key NeMo RL's MasterConfig requires is in the translated config",
        "NeMo RL's entry builds MasterConfig(**config) (pydantic: Field required); the key list's required keys",
        "NeMo RL main 7ea279a", f"{_V}.nemo_rl")
declare("nemo-rl-null", "no null where NeMo RL declares a plain int, float, bool or str (grpo.num_prompts_per_step, "
        "cluster.num_nodes)", "the key list's sections (NeMo RL's config classes' annotations)", "NeMo RL main 7ea279a",
        f"{_V}.nemo_rl")
declare("nemo-rl-entry", "the keys the NeMo RL entry script reads before training are present",
        "the key list's entry_reads (config.<section>[...] reads in the entry's main(), e.g. "
        "examples/run_grpo.py policy.draft.enabled)", "NeMo RL main 7ea279a", f"{_V}.nemo_rl")
declare("nemo-rl-metric", "checkpointing.metric_name is null or a val:/train: metric NeMo RL reports",
        "nemo_rl/algorithms/grpo.py grpo_train / async_grpo_train at each checkpoint save; the key list's metrics",
        "NeMo RL main 7ea279a", f"{_V}.nemo_rl")
declare("nemo-rl-gym-only", "settings NeMo RL takes on one rollout path only (reward penalties, message-level "
        "advantages, validation sampling and grpo.max_val_samples, with and without NeMo Gym)",
        "examples/run_grpo.py setup(); examples/nemo_gym/run_grpo_nemo_gym.py; nemo_rl/algorithms/grpo.py",
        "NeMo RL main 7ea279a", f"{_V}.nemo_rl")
declare("nemo-rl-async", "async GRPO needs a generation backend async_grpo_train accepts (not sglang), and the "
        "megatron backend when generation is colocated", "nemo_rl/algorithms/grpo.py async_grpo_train asserts",
        "NeMo RL main 7ea279a", f"{_V}.nemo_rl")
declare("nemo-rl-opd-routing", "the OPD advantage needs NeMo Gym rollouts (env.should_use_nemo_gym, the Gym data "
        "processor) and on_policy_distillation.enabled", "nemo_rl/algorithms/advantage_estimator.py "
        "(OPD requires teacher_logprobs); async_utils/trajectory_collector.py; experience/rollouts.py",
        "NeMo RL main 7ea279a", f"{_V}.nemo_rl")
declare("rl-validation", "NeMo RL stages that validate (grpo.val_period > 0, val_at_start or val_at_end): "
        "data.validation.data_path, when on this machine, holds rows", "nemotron.runtime.rl.val_split.empty_validation, "
        "called again (the local runtime's reader and the cluster job's precheck call it)", "this version", f"{_V}.nemo_rl")
declare("rl-output", "checkpointing.enabled is true on NeMo RL stages: the stage records the Hugging Face form of "
        "the newest checkpoint", "this project's stage output (nemotron.runtime.rl.nemo_rl.finish)", "this version",
        f"{_V}.nemo_rl")
# the local runtime, memory, storage
declare("local-layout", "backend: local runs one process: parallel sizes 1, one node, at most one GPU",
        "the local runtime (one process)", "the local runtime", f"{_V}.checks")
declare("local-refusal", "backend: local pretrain/SFT on this machine: what the run refuses before it starts",
        "nemotron.runtime.megatron.entry.refusals (with nemotron.runtime.megatron.lineage.check_resume), called again",
        "the local runtime", f"{_V}.checks")
declare("local-settings", "backend: local stages: the local runtime's settings reader accepts the config",
        "nemotron.runtime.common.settings.read, rl_settings.read, evaluate.read, called again", "the local runtime", _V)
declare("local-checkpoint", "backend: local stages on this machine: each checkpoint folder the run loads is a "
        "checkpoint of model.name (its config.json's fields)", "nemotron.runtime.common.model.check_checkpoint, "
        "called again", "the local runtime", _V)
declare("local-convert", "backend: local convert rewrites a Hugging Face config (convert.direction hf_v5_to_v4) "
        "of a NemotronH convert.source, in the v4 form only (hf_config_form), on no GPU (device: gpu is ignored)", "nemotron.runtime.megatron.convert_local.direction_refusal, source_refusal, option_problems, "
        "called again", "the local runtime", f"{_V}.checks")
declare("convert-cpu", "a CPU conversion (convert.device=cpu) runs on one node", "the convert stage's CPU path "
        "(one process on one node)", "—", f"{_V}.checks")
declare("memory", "the memory estimate is above the profile's GPU memory by at most the estimate's calibration "
        "margin (15 %), or cannot be checked -- warning", "nemotron.layout.memory (docs/validation.md, The memory "
        "estimate)", "—", f"{_V}.checks")
declare("memory-fit", "the memory estimate is not above the profile's GPU memory by more than the estimate's "
        "calibration margin (memory.CALIBRATION_MARGIN, 15 %)", "nemotron.layout.memory; the margin: "
        "bench/estimate_calibration.py --memory (docs/estimate.md, Per-GPU memory)", "—", f"{_V}.checks")
declare("checkpoint-space", "one checkpoint fits the free space of checkpoint.save's file system",
        "layout/estimate.py, cli/costs.py (docs/estimate.md)", "—", "nemotron.cli.costs")
# quantize
declare("quantize-recipe", "quantization.recipe names a recipe with algorithm, quant_cfg, expect, source",
        "docs/quantize.md; stages/ultra3/quantize/recipes/", "nvidia-modelopt 0.47", f"{_V}.quantize")
declare("quantize-settings", "the quantize runtime's settings reader accepts the config",
        "nemotron.runtime.quantization.quant_config.read_settings, called again", "this version", f"{_V}.quantize")
declare("quantize-inputs", "the checkpoint to quantize (and, local, the calibration blend) exists and is not "
        "already quantized", "nemotron.runtime.quantization.quant_config.check_inputs, called again (docs/quantize.md)", "—",
        f"{_V}.quantize")
declare("input-exists", "every stage's input paths (the keys its configs wire to an artifact, convert.source, "
        "quantization.source, generation.model_name, ...) exist when this machine sees the job's files (no profile, a "
        "local one, a Slurm one with tunnel = local)", "nemotron.validation.inputs.missing_inputs (the job's own "
        "existence checks, said before submission)", "—", "nemotron.validation.inputs")
# data prep
declare("data-settings", "data prep: the stage's runtime settings reader accepts the config",
        "the data runtime's Settings.from_config (nemotron.data), called again", "this version", f"{_V}.data")
declare("data-blend", "data prep: the blend file parses as the run parses it (every problem at once)",
        "nemotron.data.driver.stage_blend, called again", "this version", f"{_V}.data")
declare("data-inputs", "data prep: every required dataset of the blend matches a file (RL blend repositories: "
        "stage files, row schemas, placeholder sources)", "nemotron.data.driver.check_inputs; "
        "nemotron.data.rl_blends.problems", "this version", f"{_V}.data")
declare("data-left-out", "data prep: an optional dataset (or policy skip) that matches no file is left out -- "
        "warning", "nemotron.data.driver.unmatched (the run's own line)", "this version", f"{_V}.data")
declare("data-text", "data prep for chat or RL records: a plain-text source is refused as the run refuses it",
        "nemotron.data.prep.plain_text_problem, called again", "this version", f"{_V}.data")
declare("data-output", "data prep: output_dir is a folder (or absent), not a file; a non-empty folder that is not a "
        "data prep output -- warning", "the run's first mkdir; the run's own note (nemotron.data.outputs.foreign_files)",
        "—", f"{_V}.data")
declare("data-template", "data prep sft: chat.template is read and compiled as the run does before any work",
        "nemotron.data.chat.load_template, called again", "this version", f"{_V}.data")
declare("data-dtype", "data prep pretrain: output.dtype holds every token id of the tokenizer",
        "nemotron.data.indexed.choose_dtype", "—", f"{_V}.data")
declare("data-hub", "data prep: what the run fetches from the Hugging Face hub answers (error here, warning for a "
        "cluster profile)", "nemotron.data.tokenizer.resolve, nemotron.data.sources.resolve_remote", "—",
        f"{_V}.data")
declare("data-empty", "a dataset whose every local file is 0 bytes", "the runs' own refusals after reading "
        "(produced no training tokens)", "—", f"{_V}.data")
declare("data-ray", "RAY_ADDRESS set in this shell answers -- warning", "nemotron.data.raypool.probe_address "
        "(the run joins RAY_ADDRESS)", "—", f"{_V}.data")
declare("blend-prefix", "pretrain: every blend.json the run reads parses with its reader, each prefix has its "
        ".bin and .idx", "nemotron.runtime.megatron.pretrain_data.read_blend, Shard", "—", f"{_V}.data")
