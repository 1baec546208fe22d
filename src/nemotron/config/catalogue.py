"""The model catalogue: every model a stage config can name in ``model.name``, as data.

Each entry is a frozen :class:`ModelSpec` that names its source. Three families:

``ultra``
    Nemotron 3 Ultra (550 B total / 55 B active). Dimensions from the technical report's Table 1 and
    the public Hugging Face config as restated by radixark/miles
    (``scripts/models/nemotron-3-ultra-550b-a55b.py``). The 108-layer hybrid pattern is the report's
    Figure 2 (``docs/assets/ultra3/figure-2.png`` in NVIDIA-NeMo/Nemotron), written out block by block:
    ``(ME)x3``, then four repeats of ``M*E (ME)x2 M*E (ME)x3 M*E (ME)x3``, then ``ME``. It reproduces
    Table 1's counts (48 Mamba-2, 48 LatentMoE, 12 attention) and miles' statement that source layers
    0, 1, 7, 8 are Mamba, MoE, attention, MoE.

``ultra<N>layer``
    An N-layer slice of Ultra with every other dimension unchanged (512 experts, top-22, latent 2048),
    so the weight-conversion and parallelism code paths are the real ones. The layers kept are the
    first occurrence of each block type, then the layers right after the first attention layer — for
    N = 4 that is miles' published slice (source layers 0, 1, 7, 8 → ``ME*E``,
    ``scripts/models/nemotron-3-ultra-550b-a55b-4layer.py``). The MTP block (``*E``) is kept.
    A slice fits one 8-GPU node; validation switches its layout to TP=1, PP=1, EP = all GPUs.

``small``
    A small NemotronH of our own design for the ``local`` configs (CPU or one GPU, Hugging Face
    transformers): it keeps every block type — Mamba-2, GQA attention, latent MoE with a shared expert
    and sigmoid routing, and an MTP block — at a size that trains on a CPU. Its vocabulary is the
    131,072-entry one the offline ``tiny`` data prep uses (the Nemotron 3 vocabulary size).
    transformers 5.x builds NemotronH without the MTP block (it skips ``mtp.*`` weights), so a
    ``local`` run trains the main decoder only; the MTP fields are kept for the Megatron path.

Everything here is pure data and arithmetic (stdlib only): the CLI imports it for ``--dry-run``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

#: Layer symbols of a hybrid pattern (Megatron-Core ``hybrid_layer_allocation.Symbols``).
MAMBA, MOE, ATTENTION, MLP = "M", "E", "*", "-"
SYMBOL_NAMES = {MAMBA: "Mamba-2", MOE: "MoE", ATTENTION: "attention", MLP: "MLP"}

_SLICE_RE = re.compile(r"^(?P<base>[a-z][a-z0-9_]*?)(?P<n>\d+)layer$")


class CatalogueError(KeyError):
    """An unknown model name or an impossible slice; ``str()`` is a user-facing sentence."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the sentence
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class ModelSpec:
    """One model's architecture, as the launcher needs it (validation, memory estimate, HF config).

    Units: sizes are element counts (not bytes). ``pattern`` is the main decoder's hybrid layer
    pattern (``M`` Mamba-2, ``E`` MoE, ``*`` attention, ``-`` dense MLP), one character per layer.
    ``mtp_pattern`` is one MTP depth's layers; ``mtp_depths`` how many depths are trained
    (Megatron ``mtp_num_layers``); with ``mtp_shared_weights`` all depths share one set of weights
    (``mtp_use_repeated_layer``). ``source`` says where the numbers come from.
    """

    name: str
    source: str
    pattern: str
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    head_dim: int
    mamba_num_heads: int
    mamba_head_dim: int
    mamba_state_dim: int
    mamba_num_groups: int
    mamba_conv_kernel: int
    num_experts: int
    moe_topk: int
    moe_ffn_hidden_size: int
    moe_shared_expert_intermediate_size: int
    moe_latent_size: int | None
    moe_router_score_function: str
    moe_router_enable_expert_bias: bool
    moe_routed_scaling_factor: float
    moe_n_group: int
    moe_topk_group: int
    vocab_size: int
    tie_embeddings: bool
    mtp_pattern: str
    mtp_depths: int
    mtp_shared_weights: bool
    hf_model_id: str | None = None
    tokenizer: str | None = None
    max_position_embeddings: int = 4096
    slice_of: str | None = None
    slice_layers: tuple[int, ...] = field(default=())

    # ------------------------------------------------------------------ derived shape facts
    @property
    def num_layers(self) -> int:
        """Main decoder layers (MTP excluded)."""
        return len(self.pattern)

    def counts(self, pattern: str | None = None) -> dict[str, int]:
        """``{"M": n, "E": n, "*": n, "-": n}`` for ``pattern`` (default: the main decoder)."""
        p = self.pattern if pattern is None else pattern
        return {s: p.count(s) for s in (MAMBA, MOE, ATTENTION, MLP)}

    @property
    def mamba_d_inner(self) -> int:
        """Mamba inner width = heads x head dim (elements)."""
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def is_moe(self) -> bool:
        return MOE in self.pattern

    @property
    def is_slice(self) -> bool:
        return self.slice_of is not None

    def hybrid_layer_pattern(self) -> str:
        """Megatron-Core's unified pattern: ``<main>/<mtp>/<mtp>...`` (one ``/<mtp>`` per depth)."""
        return self.pattern + "".join("/" + self.mtp_pattern for _ in range(self.mtp_depths))

    def describe(self) -> str:
        c = self.counts()
        parts = [f"{self.num_layers} layers ({c[MAMBA]} Mamba-2, {c[MOE]} MoE, {c[ATTENTION]} attention"]
        if c[MLP]:
            parts[0] += f", {c[MLP]} MLP"
        parts[0] += ")"
        if self.mtp_depths:
            parts.append(f"MTP {self.mtp_pattern!r} x{self.mtp_depths}")
        return f"{self.name}: " + ", ".join(parts)


# ---------------------------------------------------------------------------------------- entries
def _ultra_pattern() -> str:
    """Figure 2 of the Nemotron 3 Ultra technical report, block by block (108 layers)."""
    body = "M*E" + "ME" * 2 + "M*E" + "ME" * 3 + "M*E" + "ME" * 3
    return "ME" * 3 + body * 4 + "ME"


ULTRA = ModelSpec(
    name="ultra",
    source=("Nemotron 3 Ultra technical report, Table 1 (dimensions) and Figure 2 (layer pattern); "
            "HF config nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16 as restated in radixark/miles "
            "scripts/models/nemotron-3-ultra-550b-a55b.py (vocab, routing, scaling factor, n_group); "
            "MTP depth 2 with shared weights from Megatron-Bridge recipes/nemotronh/h100/nemotron_3_ultra.py"),
    pattern=_ultra_pattern(),
    hidden_size=8192,
    num_attention_heads=64,
    num_query_groups=2,
    head_dim=128,
    mamba_num_heads=256,
    mamba_head_dim=64,
    mamba_state_dim=128,
    mamba_num_groups=8,
    mamba_conv_kernel=4,
    num_experts=512,
    moe_topk=22,
    moe_ffn_hidden_size=5120,
    moe_shared_expert_intermediate_size=10240,
    moe_latent_size=2048,
    moe_router_score_function="sigmoid",
    moe_router_enable_expert_bias=True,
    moe_routed_scaling_factor=5.0,
    moe_n_group=1,
    moe_topk_group=1,
    vocab_size=131072,
    tie_embeddings=False,
    mtp_pattern=ATTENTION + MOE,  # one attention layer followed by one MoE layer per head (report §2.1)
    mtp_depths=2,  # report: two shared-weight heads; the HF checkpoint carries one set of weights
    mtp_shared_weights=True,
    hf_model_id="nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
    tokenizer="nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
    max_position_embeddings=1048576,  # report: up to 1M tokens of context
)

SMALL = ModelSpec(
    name="small",
    source=("our own small NemotronH for the local configs (every Ultra block type; Ultra's routing "
            "choices: sigmoid + expert bias, latent MoE, shared expert, shared-weight MTP); vocabulary = "
            "the offline 131,072-entry tiny data-prep tokenizer"),
    pattern="MEM*EMEM*E",  # 4 Mamba-2, 4 MoE, 2 attention; PP-able by 1, 2, 5, 10
    hidden_size=256,
    num_attention_heads=8,
    num_query_groups=2,
    head_dim=32,
    mamba_num_heads=16,
    mamba_head_dim=32,
    mamba_state_dim=64,
    mamba_num_groups=2,
    mamba_conv_kernel=4,
    num_experts=16,
    moe_topk=4,
    moe_ffn_hidden_size=256,
    moe_shared_expert_intermediate_size=512,
    moe_latent_size=128,
    moe_router_score_function="sigmoid",
    moe_router_enable_expert_bias=True,
    moe_routed_scaling_factor=2.5,
    moe_n_group=1,
    moe_topk_group=1,
    vocab_size=131072,
    tie_embeddings=False,
    mtp_pattern=ATTENTION + MOE,
    mtp_depths=1,
    mtp_shared_weights=True,
    hf_model_id=None,
    tokenizer=None,  # whatever tokenizer the local data prep used (the manifest records it)
    max_position_embeddings=4096,
)

BASE_MODELS: dict[str, ModelSpec] = {ULTRA.name: ULTRA, SMALL.name: SMALL}

#: Slices whose layer selection is published (and therefore must match exactly).
PUBLISHED_SLICES: dict[str, tuple[int, ...]] = {
    "ultra4layer": (0, 1, 7, 8),  # radixark/miles prune_nemotron_h.py selection, renumbered 0..3
}


def slice_layers(base: ModelSpec, n: int) -> tuple[int, ...]:
    """Source layer indices an ``n``-layer slice of ``base`` keeps (sorted).

    Rule: the first layer of each block type the base has, then the layers that follow the first
    attention layer (falling back to the earliest unused layers). For Ultra and n = 4 this gives
    (0, 1, 7, 8), miles' published slice.

    Raises:
        CatalogueError: ``n`` smaller than the number of block types, or not smaller than the
            base's layer count.
    """
    kinds = [s for s in (MAMBA, MOE, ATTENTION, MLP) if s in base.pattern]
    if n < len(kinds):
        raise CatalogueError(
            f"a {n}-layer slice of {base.name} cannot keep every block type "
            f"({', '.join(SYMBOL_NAMES[k] for k in kinds)}); use at least {len(kinds)} layers")
    if n >= base.num_layers:
        raise CatalogueError(f"{base.name} has {base.num_layers} layers; a slice must have fewer (use model.name={base.name})")
    chosen = [base.pattern.index(k) for k in kinds]
    anchor = base.pattern.index(ATTENTION) if ATTENTION in base.pattern else max(chosen)
    candidates = list(range(anchor + 1, base.num_layers)) + list(range(base.num_layers))
    for i in candidates:
        if len(chosen) >= n:
            break
        if i not in chosen:
            chosen.append(i)
    return tuple(sorted(chosen))


def make_slice(base: ModelSpec, n: int) -> ModelSpec:
    """The ``<base><n>layer`` spec (see :func:`slice_layers`)."""
    name = f"{base.name}{n}layer"
    layers = PUBLISHED_SLICES.get(name) or slice_layers(base, n)
    pattern = "".join(base.pattern[i] for i in layers)
    source = f"{n}-layer slice of {base.name} keeping source layers {', '.join(map(str, layers))}"
    if name in PUBLISHED_SLICES:
        source += " (radixark/miles scripts/models/nemotron-3-ultra-550b-a55b-4layer.py)"
    return replace(base, name=name, pattern=pattern, source=source, slice_of=base.name, slice_layers=layers)


def slice_size(name: str) -> int | None:
    """``N`` for a name ending in ``<N>layer`` (``"ultra4layer"`` → 4), else None."""
    m = _SLICE_RE.match(name.strip().lower()) if isinstance(name, str) else None
    return int(m.group("n")) if m else None


def names() -> list[str]:
    """Model names to show as valid values (base models and the published slices)."""
    return [*BASE_MODELS, *PUBLISHED_SLICES, "ultra<N>layer"]


def _hf_name(key: str) -> str | None:
    """The catalogue name for a lower-cased Hugging Face repo name of a base model, with or without the owner
    and an ``-<N>layer`` suffix (``nvidia-nemotron-3-ultra-550b-a55b-bf16-4layer`` → ``ultra4layer``), else None."""
    for base, spec in BASE_MODELS.items():
        if not spec.hf_model_id:
            continue
        repo = spec.hf_model_id.lower().split("/")[-1]
        for alias in (repo, repo.removeprefix("nvidia-")):
            m = re.fullmatch(re.escape(alias) + r"(?:-(\d+)layer)?", key.split("/")[-1])
            if m:
                return base + (f"{m.group(1)}layer" if m.group(1) else "")
    return None


@lru_cache(maxsize=64)
def get(name: str) -> ModelSpec:
    """The spec for ``name``: ``ultra``, ``small``, or ``<base><N>layer`` (e.g. ``ultra4layer``).

    Raises:
        CatalogueError: unknown name (with a did-you-mean), or an impossible slice.
    """
    if not isinstance(name, str) or not name.strip():
        raise CatalogueError(f"model name must be a non-empty string, got {name!r}; valid: {', '.join(names())}")
    key = name.strip().lower()
    if key in BASE_MODELS:
        return BASE_MODELS[key]
    m = _SLICE_RE.match(key)
    if m and m.group("base") in BASE_MODELS:
        return make_slice(BASE_MODELS[m.group("base")], int(m.group("n")))
    close = difflib.get_close_matches(key, [*BASE_MODELS, *PUBLISHED_SLICES], n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    hf = _hf_name(key)
    if hf is not None:  # a Hugging Face repo name, as the miles recipe writes its slice (...-BF16-4layer)
        hint = f" (the Hugging Face name of {hf}: write {hf})"
    raise CatalogueError(f"unknown model {name!r}{hint}; valid: {', '.join(names())}")


# ---------------------------------------------------------------------------------------- params
def layer_params(spec: ModelSpec) -> dict[str, dict[str, int]]:
    """Parameter counts (elements) of one layer of each type, split by how Megatron-Core shards them.

    Keys per type: ``tp`` (split by tensor parallel), ``rep`` (replicated on every TP rank: norms,
    router, latent projections — Megatron-Core 0.18 builds ``fc1/fc2_latent_proj`` with
    ``parallel_mode="duplicated"``), ``expert`` (routed experts: split by EP x ETP).

    Formulas (h hidden, d = mamba heads x head dim, G groups, N state, H mamba heads, K conv kernel,
    q/kv heads x head dim, E experts, F expert FFN, L latent, S shared-expert FFN, bias-free):

    * Mamba-2 (mcore ``MambaMixer``): in_proj h x (2d + 2GN + H), conv1d (d + 2GN) x (K + 1),
      A, D, dt_bias 3H, gated RMSNorm d, out_proj d x h; pre-norm h.
    * attention: qkv h x (q + 2 kv) head-dims, proj (q x hd) x h; pre-norm h.
    * MoE (latent): experts E x (L x F + F x L) (squared-ReLU, not gated); shared expert h x S + S x h;
      latent projections h x L + L x h; router h x E + E expert bias; pre-norm h.
      Without a latent size the experts work on h instead of L.
    """
    h = spec.hidden_size
    d, g, n, hh, k = spec.mamba_d_inner, spec.mamba_num_groups, spec.mamba_state_dim, spec.mamba_num_heads, spec.mamba_conv_kernel
    conv_dim = d + 2 * g * n
    mamba_tp = h * (2 * d + 2 * g * n + hh) + conv_dim * (k + 1) + 3 * hh + d + d * h
    q = spec.num_attention_heads * spec.head_dim
    kv = spec.num_query_groups * spec.head_dim
    attn_tp = h * (q + 2 * kv) + q * h
    width = spec.moe_latent_size or h
    expert = spec.num_experts * 2 * width * spec.moe_ffn_hidden_size
    shared = 2 * h * spec.moe_shared_expert_intermediate_size
    latent = 2 * h * spec.moe_latent_size if spec.moe_latent_size else 0
    router = h * spec.num_experts + spec.num_experts
    mlp_tp = 2 * h * spec.moe_ffn_hidden_size
    return {
        MAMBA: {"tp": mamba_tp, "rep": h, "expert": 0},
        ATTENTION: {"tp": attn_tp, "rep": h, "expert": 0},
        MOE: {"tp": shared, "rep": latent + router + h, "expert": expert},
        MLP: {"tp": mlp_tp, "rep": h, "expert": 0},
    }


def padded_vocab(spec: ModelSpec, tp: int = 1, divisible_by: int = 128) -> int:
    """Vocabulary padded as Megatron does: up to a multiple of ``divisible_by x TP``."""
    m = divisible_by * max(1, tp)
    return -(-spec.vocab_size // m) * m


def param_count(spec: ModelSpec, *, include_mtp: bool = True) -> dict[str, int]:
    """Total parameters (elements): ``{"total", "active", "embedding", "output", "mtp", per type}``.

    ``active`` counts one token's path: every non-expert weight plus top-k experts per MoE layer.
    MTP weights are counted once when they are shared across depths.
    """
    lp = layer_params(spec)
    c = spec.counts()
    out: dict[str, int] = {}
    body = 0
    active = 0
    for sym, n in c.items():
        per = lp[sym]
        tot = n * (per["tp"] + per["rep"] + per["expert"])
        out[SYMBOL_NAMES[sym]] = tot
        body += tot
        act_expert = per["expert"] * spec.moe_topk // spec.num_experts if spec.num_experts else 0
        active += n * (per["tp"] + per["rep"] + act_expert)
    emb = spec.vocab_size * spec.hidden_size
    outp = 0 if spec.tie_embeddings else emb
    mtp = 0
    if include_mtp and spec.mtp_depths:
        copies = 1 if spec.mtp_shared_weights else spec.mtp_depths
        per_depth = 2 * spec.hidden_size * spec.hidden_size + 3 * spec.hidden_size  # eh_proj + enorm/hnorm/final norm
        for sym in spec.mtp_pattern:
            per_depth += lp[sym]["tp"] + lp[sym]["rep"] + lp[sym]["expert"]
        mtp = copies * per_depth
    out.update(embedding=emb, output=outp, mtp=mtp)
    out["total"] = body + emb + outp + spec.hidden_size + mtp
    out["active"] = active + emb + outp + spec.hidden_size
    return out


# ---------------------------------------------------------------------------------------- HF form
_HF_V4_SYMBOLS = {MAMBA: "M", MOE: "E", ATTENTION: "*", MLP: "-"}


def hf_config(spec: ModelSpec) -> dict:
    """A Hugging Face ``NemotronHConfig`` dict for ``spec`` (``model_type: nemotron_h``), in the
    compact v4 form (``hybrid_override_pattern``) that transformers 5.x still reads and NeMo RL's
    runtime needs. Used by the ``local`` runtimes to build the small model."""
    return {
        "model_type": "nemotron_h",
        "architectures": ["NemotronHForCausalLM"],
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_layers,
        "hybrid_override_pattern": "".join(_HF_V4_SYMBOLS[s] for s in spec.pattern),
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_query_groups,
        "head_dim": spec.head_dim,
        "mamba_num_heads": spec.mamba_num_heads,
        "mamba_head_dim": spec.mamba_head_dim,
        "ssm_state_size": spec.mamba_state_dim,
        "n_groups": spec.mamba_num_groups,
        "conv_kernel": spec.mamba_conv_kernel,
        "expand": spec.mamba_d_inner // spec.hidden_size if spec.mamba_d_inner % spec.hidden_size == 0 else 2,
        "n_routed_experts": spec.num_experts,
        "num_experts_per_tok": spec.moe_topk,
        "moe_intermediate_size": spec.moe_ffn_hidden_size,
        "intermediate_size": spec.moe_ffn_hidden_size,
        "n_shared_experts": 1,
        "moe_shared_expert_intermediate_size": spec.moe_shared_expert_intermediate_size,
        "moe_latent_size": spec.moe_latent_size,
        "routed_scaling_factor": spec.moe_routed_scaling_factor,
        "n_group": spec.moe_n_group,
        "topk_group": spec.moe_topk_group,
        "mlp_hidden_act": "relu2",
        "tie_word_embeddings": spec.tie_embeddings,
        "num_nextn_predict_layers": 1 if spec.mtp_depths else 0,
        "mtp_hybrid_override_pattern": "".join(_HF_V4_SYMBOLS[s] for s in spec.mtp_pattern),
        "max_position_embeddings": spec.max_position_embeddings,
    }


#: Hugging Face NemotronH block types (v5 ``layers_block_type``, legacy names included) -> pattern symbols.
HF_BLOCK_SYMBOLS = {"linear_attention": MAMBA, "mamba": MAMBA, "moe": MOE, "full_attention": ATTENTION,
                    "attention": ATTENTION, "mlp": MLP}


def _hf_pattern(config: dict, v4: str, v5: str) -> str | None:
    """The pattern of ``config`` in v4 (``v4``: a string of ``M E * -``) or v5 (``v5``: a list of block types) form;
    None when neither field is set. Raises :class:`CatalogueError` for a symbol or block type outside those."""
    value = config.get(v4)
    if isinstance(value, str) and value:
        bad = sorted({c for c in value if c not in SYMBOL_NAMES})
        if bad:
            raise CatalogueError(f"{v4}={value!r}: unknown symbol(s) {' '.join(bad)}; valid: M E * -")
        return value
    blocks = config.get(v5)
    if isinstance(blocks, list) and blocks:
        bad = sorted({str(b) for b in blocks if b not in HF_BLOCK_SYMBOLS})
        if bad:
            raise CatalogueError(f"{v5}: unknown block type(s) {', '.join(bad)}; valid: {', '.join(HF_BLOCK_SYMBOLS)}")
        return "".join(HF_BLOCK_SYMBOLS[b] for b in blocks)
    return None


def spec_from_hf_config(config: dict, name: str) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face NemotronH ``config.json`` (the parsed dict, v4
    ``hybrid_override_pattern`` or v5 ``layers_block_type`` form): the inverse of :func:`hf_config`, so that
    :func:`param_count` counts a model outside the catalogue. Field names are transformers' ``NemotronHConfig``
    ones; the MTP block is ``num_nextn_predict_layers`` sets of ``mtp_hybrid_override_pattern`` /
    ``mtp_layers_block_type`` (the sets of weights the checkpoint carries: :func:`hf_config` writes 1 for Ultra's two
    shared-weight depths). ``head_dim`` defaults to ``hidden_size / num_attention_heads`` (transformers' default).

    Raises:
        CatalogueError: not a NemotronH config (``model_type``), no layer pattern, a field the pattern's layers need
            is missing or not a positive whole number (named), or dense MLP layers wider or narrower than the
            experts' ``moe_intermediate_size`` (which :func:`layer_params` takes for both).
    """
    where = f"{name}: "
    if config.get("model_type") not in (None, "nemotron_h"):
        raise CatalogueError(f"{where}model_type={config.get('model_type')!r} is not a NemotronH config (nemotron_h)")
    pattern = _hf_pattern(config, "hybrid_override_pattern", "layers_block_type")
    if not pattern:
        raise CatalogueError(f"{where}neither hybrid_override_pattern (v4) nor layers_block_type (v5) is set")
    mtp_sets = config.get("num_nextn_predict_layers") or 0
    mtp = (_hf_pattern(config, "mtp_hybrid_override_pattern", "mtp_layers_block_type") or "") if mtp_sets else ""
    used = set(pattern + mtp)

    def whole(key: str, needed: bool = True, default: int = 0) -> int:
        value = config.get(key)
        if value is None and not needed:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CatalogueError(f"{where}{key}={value!r}: a positive whole number is needed to count the parameters")
        return value

    hidden, vocab = whole("hidden_size"), whole("vocab_size")
    attention, mamba, moe = ATTENTION in used, MAMBA in used, MOE in used or MLP in used
    heads = whole("num_attention_heads", attention)
    if MLP in used and config.get("intermediate_size") not in (None, config.get("moe_intermediate_size")):
        raise CatalogueError(f"{where}intermediate_size={config.get('intermediate_size')!r} differs from "
                             f"moe_intermediate_size={config.get('moe_intermediate_size')!r}: dense MLP layers of "
                             "another width are not counted")
    latent = config.get("moe_latent_size")
    return ModelSpec(
        name=name, source=f"Hugging Face config.json of {name}", pattern=pattern, hidden_size=hidden,
        num_attention_heads=heads, num_query_groups=whole("num_key_value_heads", attention),
        head_dim=whole("head_dim", False, hidden // heads if heads else 0),
        mamba_num_heads=whole("mamba_num_heads", mamba), mamba_head_dim=whole("mamba_head_dim", mamba),
        mamba_state_dim=whole("ssm_state_size", mamba), mamba_num_groups=whole("n_groups", mamba),
        mamba_conv_kernel=whole("conv_kernel", mamba),
        num_experts=whole("n_routed_experts", MOE in used), moe_topk=whole("num_experts_per_tok", MOE in used),
        moe_ffn_hidden_size=whole("moe_intermediate_size", moe),
        moe_shared_expert_intermediate_size=whole("moe_shared_expert_intermediate_size", MOE in used),
        moe_latent_size=latent if isinstance(latent, int) and latent > 0 else None,
        moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
        moe_routed_scaling_factor=float(config.get("routed_scaling_factor") or 1.0),
        moe_n_group=int(config.get("n_group") or 1), moe_topk_group=int(config.get("topk_group") or 1),
        vocab_size=vocab, tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        mtp_pattern=mtp, mtp_depths=int(mtp_sets) if mtp else 0, mtp_shared_weights=False,
    )


__all__ = [
    "ATTENTION",
    "BASE_MODELS",
    "MAMBA",
    "MLP",
    "MOE",
    "PUBLISHED_SLICES",
    "SMALL",
    "SYMBOL_NAMES",
    "ULTRA",
    "HF_BLOCK_SYMBOLS",
    "CatalogueError",
    "ModelSpec",
    "get",
    "hf_config",
    "layer_params",
    "make_slice",
    "names",
    "padded_vocab",
    "param_count",
    "slice_layers",
    "slice_size",
    "spec_from_hf_config",
]
