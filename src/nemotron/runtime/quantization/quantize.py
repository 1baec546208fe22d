"""``backend: local`` of ``nemotron ultra3 quantize``: NVFP4 + FP8 post-training quantization of a small
NemotronH with NVIDIA Model Optimizer (nvidia-modelopt 0.47) on this machine.

Steps (:func:`run`), each checked:

1. load the Hugging Face checkpoint (``quantization.source``; or build the catalogue's model when
   ``quantization.from_catalogue``) in BF16, in eval mode, and keep a BF16 copy as the reference;
2. calibrate on real text: ``quantization.calib_size`` sequences of ``model.seq_length`` tokens from
   the train split of ``quantization.calib_dataset`` (the ``blend.json`` of ``data prep pretrain``),
   ``train.micro_batch_size`` per forward, with ``mtq.quantize`` and the recipe's config unchanged;
3. read back the format every module got, compare it with the map the recipe declares (a difference
   stops the run) and list every module the recipe left in BF16;
4. against the BF16 copy, on ``quantization.eval_size`` held-out sequences (the blend's ``test``
   split, else ``valid``): perplexity of both, KL(BF16 ‖ quantized) per token and top-1 agreement; a
   short greedy generation from both (``generate.prompts``);
5. export a Hugging Face checkpoint with ``export_hf_checkpoint(dtype=...)``, repair the layer names
   0.47 corrupts in ``hf_quant_config.json`` (:func:`nemotron.runtime.quantization.quant_config.repair_export`), and
   check it: our own de-quantization of its NVFP4/FP8 tensors, loaded by transformers, must give the
   logits of the fake-quantized model with activation and KV quantizers off (weights only);
6. write ``summary.json`` into the export and report the artifact (``quantized-checkpoint``).

On a CPU, NVFP4 fake quantization runs through :func:`nemotron.runtime.quantization.nvfp4_cpu.cpu_route`
(Model Optimizer's own pure-PyTorch NVFP4 code); on a GPU, Model Optimizer's kernels.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from nemotron.runtime.quantization.quant_config import (
    KINDS,
    QuantConfigError,
    QuantSettings,
    check_inputs,
    expected_map,
    export_identity,
    format_name,
    load_recipe,
    module_kind,
    read_settings,
    repair_export,
    source_origin,
)

TITLE = "ultra3 quantize"
#: E2M1 magnitudes by 3-bit code (OCP Microscaling FP4; NVIDIA NVFP4): sign is bit 3.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _say(msg: str) -> None:
    print(f"[quantize] {msg}", flush=True)


def main(cfg: dict[str, Any]) -> int:
    """Entry of the ``local`` backend (``stages/ultra3/quantize/run.py``); returns the exit code:
    0 done; 2 a setting or input refused before anything loads (:func:`check_inputs`: one line naming the
    key); 1 a failure while running (one line naming the key or file); 130 interrupted."""
    try:
        s = read_settings(cfg)
        problems = check_inputs(s)
    except QuantConfigError as exc:
        print(f"{TITLE}: {exc}", file=sys.stderr)
        return 2
    if problems:
        key, value, message = problems[0]
        print(f"{TITLE}: {key}={value!r}: {message}", file=sys.stderr)
        return 2
    from nemotron.runtime.megatron.entry import LOCAL_NEEDS, run_heavy

    def quantize() -> int:
        run(s)
        return 0

    return run_heavy(TITLE, s.cpus, *LOCAL_NEEDS["quantize"], quantize, (QuantConfigError, QuantizeError))


class QuantizeError(RuntimeError):
    """The quantized model is not what the recipe says, or the export does not reload; ``str()`` says how."""


# ------------------------------------------------------------------------------------------- inputs
def load_samples(s: QuantSettings, vocab_size: int) -> tuple[Any, Any, str]:
    """``(calibration, held-out, held-out split name)``: int64 tensors of shape ``[n, seq_length + 1]``
    from the blend's train split and its test split (else valid), read as Megatron-Core would
    (:class:`nemotron.runtime.megatron.pretrain_data.BlendedSamples`)."""
    import numpy as np
    import torch

    from nemotron.runtime.megatron.pretrain_data import (
        BlendedSamples,
        DataError,
        max_token_id,
        read_blend,
    )

    assert s.calib_blend is not None
    blend = read_blend(s.calib_blend)
    held = "test" if "test" in blend else "valid" if "valid" in blend else None
    if held is None:
        raise DataError(f"{s.calib_blend}: no test or valid split for the held-out comparison")
    top = max_token_id(blend["train"] + blend[held])
    if top >= vocab_size:
        raise DataError(f"{s.calib_blend}: token id {top} does not fit the model's vocabulary of {vocab_size:,}")
    calib = BlendedSamples(blend["train"], s.seq_length, s.calib_samples, s.seed)
    evals = BlendedSamples(blend[held], s.seq_length, s.eval_samples, s.seed + 1, shuffle=False)
    c = torch.from_numpy(np.stack([calib.sample(i) for i in range(len(calib))]))
    e = torch.from_numpy(np.stack([evals.sample(i) for i in range(len(evals))]))
    return c, e, held


def load_tokenizer(s: QuantSettings) -> tuple[Any, int | None, int | None]:
    """``(tokenizers.Tokenizer or None, bos id, eos id)``: ``tokenizer.tokenizer_model`` when set, else the
    tokenizer recorded in the calibration data's manifest (the ids the model was trained on)."""
    from nemotron.data import tokenizer as tokmod
    from nemotron.layout.views import read_manifest

    if s.tokenizer:
        from nemotron.config.artifacts import home

        info = tokmod.resolve(s.tokenizer, cache_dir=home() / "cache" / "tokenizers")
        return tokmod.load(info), info.bos_id, info.eos_id
    manifest, where = read_manifest(str(s.calib_blend))
    tok = (manifest or {}).get("tokenizer")
    if not isinstance(tok, dict) or not tok.get("json_path"):
        return None, None, None
    path = Path(tok["json_path"])
    if not path.is_absolute():
        path = Path(where).parent / path
    if not path.is_file():
        return None, None, None
    return tokmod.load(str(path)), tok.get("bos_id"), tok.get("eos_id")


def load_model(s: QuantSettings, spec: Any, dtype: Any) -> tuple[Any, str]:
    """The NemotronH to quantize in ``dtype`` and eval mode, and where it came from."""
    from nemotron.runtime.common import model as modelmod

    origin = source_origin(s)
    if s.from_catalogue:
        m = modelmod.build(spec, s.seed)
    else:
        assert s.source is not None
        try:
            m = modelmod.load(spec, s.source)
        except modelmod.ModelError:
            raise
        except Exception as exc:  # transformers' loaders raise many kinds; the run says it in one line
            first = (str(exc).strip().splitlines() or [""])[0]
            raise modelmod.ModelError(f"quantization.source={str(s.source)!r}: cannot load {origin} as "
                                      f"{spec.name}: {type(exc).__name__}: {first}") from exc
    m = m.to(dtype).eval()
    m.config.dtype = dtype  # the export compares it with the target dtype
    return m, origin


# ------------------------------------------------------------------------------------------ format map
def quantizers(model: Any) -> list[tuple[str, Any]]:
    """``(name, TensorQuantizer)`` of every quantizer Model Optimizer inserted."""
    from modelopt.torch.quantization.nn import TensorQuantizer

    return [(n, m) for n, m in model.named_modules() if isinstance(m, TensorQuantizer)]


def _strip_index(qname: str) -> str:
    """Fused experts keep one weight quantizer per expert: ``experts.up_proj_weight_quantizers.3``."""
    head, _, last = qname.rpartition(".")
    return head.removesuffix("s") if last.isdigit() and head.endswith("_quantizers") else qname


def _role(qname: str) -> str:
    last = _strip_index(qname).rsplit(".", 1)[-1]
    if last.endswith("weight_quantizer"):
        return "weights"
    if last.endswith("input_quantizer"):
        return "inputs"
    if last in ("k_bmm_quantizer", "v_bmm_quantizer"):
        return "cache"
    return "other"


def _owner(qname: str) -> str:
    """The module a quantizer belongs to (fused experts name theirs ``up_proj_weight_quantizer``)."""
    head, _, last = _strip_index(qname).rpartition(".")
    if last in ("k_bmm_quantizer", "v_bmm_quantizer"):
        return f"{head}.{last[0]}_cache"
    m = re.match(r"(.+)_(weight|input|output)_quantizer$", last)
    if m:
        return f"{head}.{m.group(1)}"
    return head


def format_map(model: Any) -> dict[str, Any]:
    """What the quantized model holds, per module kind.

    Returns ``{"kinds": {kind: {role: sorted formats}}, "modules": {module: {role: format}},
    "unexpected": [quantizer names]}`` with roles ``weights``, ``inputs``, ``cache``; ``unexpected`` lists
    enabled quantizers of any other role (output, Q or softmax BMM), which no recipe here turns on.
    Parameters without a quantizer (router, embeddings, norms) appear with ``weights: bf16``.
    """
    kinds: dict[str, dict[str, set[str]]] = {}
    modules: dict[str, dict[str, str]] = {}
    unexpected = []
    covered = set()
    for name, q in quantizers(model):
        role = _role(name)
        fmt = format_name(q.is_enabled, getattr(q, "num_bits", None), getattr(q, "block_sizes", None))
        if role == "other":
            if fmt != "bf16":
                unexpected.append(name)
            continue
        owner = _owner(name)
        covered.add(owner)
        kind = module_kind(name)
        kinds.setdefault(kind, {}).setdefault(role, set()).add(fmt)
        modules.setdefault(owner, {})[role] = fmt
    for pname, _ in model.named_parameters():  # parameters of modules without quantizers (router, norms, ...)
        if pname in covered or pname.rsplit(".", 1)[0] in covered:
            continue
        kinds.setdefault(module_kind(pname), {}).setdefault("weights", set()).add("bf16")
        modules.setdefault(pname, {})["weights"] = "bf16"
    return {"kinds": {k: {r: sorted(v) for r, v in roles.items()} for k, roles in kinds.items()},
            "modules": modules, "unexpected": unexpected}


def check_map(found: dict[str, Any], recipe: Any) -> list[str]:
    """Differences between the model's formats and the recipe's declared map (empty when they agree)."""
    out = []
    want = expected_map(recipe)
    for kind, roles in found["kinds"].items():
        for role, formats in roles.items():
            expected = want.get(kind, {}).get(role, "bf16")
            if formats != [expected]:
                mods = sorted(m for m, r in found["modules"].items()
                              if module_kind(m) == kind and r.get(role) not in (None, expected))
                out.append(f"{kind} {role}: {', '.join(formats)} (recipe {recipe.name}: {expected})"
                           + (f" in {', '.join(mods[:4])}" + (" ..." if len(mods) > 4 else "") if mods else ""))
    for kind, roles in want.items():
        for role, fmt in roles.items():
            if fmt != "bf16" and kind not in found["kinds"] and kind != "mtp":
                out.append(f"{kind} {role}: the recipe quantizes them ({fmt}) but the model has none")
    if found["unexpected"]:
        out.append(f"enabled quantizers outside weights/inputs/KV cache: {', '.join(found['unexpected'][:4])}")
    return out


def left_in_bf16(found: dict[str, Any]) -> dict[str, list[str]]:
    """``kind → module names`` whose weights the recipe did not match (they stay BF16)."""
    out: dict[str, list[str]] = {}
    for mod, roles in sorted(found["modules"].items()):
        if roles.get("weights") == "bf16":
            out.setdefault(module_kind(mod + ".weight"), []).append(mod)
    return out


def compress_names(names: list[str]) -> list[str]:
    """``model.layers.3.mixer.q_proj`` + ``model.layers.8.mixer.q_proj`` → ``model.layers.{3,8}.mixer.q_proj``."""
    groups: dict[str, list[str]] = {}
    for n in names:
        m = re.search(r"\.layers\.(\d+)\.", n)
        key = n[:m.start()] + ".layers.{}." + n[m.end():] if m else n
        groups.setdefault(key, []).append(m.group(1) if m else "")
    return [k.replace("{}", "{" + ",".join(v) + "}") if "{}" in k else k for k, v in groups.items()]


# -------------------------------------------------------------------------------------------- metrics
def compare(ref: Any, quant: Any, samples: Any, device: str) -> dict[str, float]:
    """Held-out comparison of ``quant`` with ``ref`` on ``samples`` (``[n, L + 1]`` token ids), one
    sequence per forward: perplexity of each (exp of the mean next-token cross-entropy), mean per-token
    KL(ref ‖ quant) in nats, and the share of positions where both pick the same top-1 token."""
    import torch
    import torch.nn.functional as F

    ce_r = ce_q = kl = agree = 0.0
    n = 0
    with torch.no_grad():
        for row in samples:
            x, y = row[:-1].unsqueeze(0).to(device), row[1:].to(device)
            lr = ref(input_ids=x).logits[0].float().log_softmax(-1)
            lq = quant(input_ids=x).logits[0].float().log_softmax(-1)
            ce_r += float(F.nll_loss(lr, y, reduction="sum"))
            ce_q += float(F.nll_loss(lq, y, reduction="sum"))
            kl += float((lr.exp() * (lr - lq)).sum())
            agree += float((lr.argmax(-1) == lq.argmax(-1)).sum())
            n += y.numel()
    return {"tokens": n, "ppl_bf16": math.exp(ce_r / n), "ppl_quantized": math.exp(ce_q / n),
            "kl_per_token": kl / n, "top1_agreement": agree / n}


def greedy(model: Any, ids: list[int], new_tokens: int, eos: int | None, device: str) -> list[int]:
    """Greedy continuation of ``ids`` (full forward per step: the local NemotronH runs without a cache)."""
    import torch

    out = list(ids)
    with torch.no_grad():
        for _ in range(new_tokens):
            nxt = int(model(input_ids=torch.tensor([out], device=device)).logits[0, -1].argmax())
            out.append(nxt)
            if eos is not None and nxt == eos:
                break
    return out[len(ids):]


# --------------------------------------------------------------------------------------------- export
@contextlib.contextmanager
def weights_only(model: Any):
    """Activation and KV-cache quantizers off inside the block (weights stay fake-quantized)."""
    off = [q for name, q in quantizers(model) if _role(name) != "weights" and q.is_enabled]
    for q in off:
        q.disable()
    try:
        yield
    finally:
        for q in off:
            q.enable()


def dequantize_tensors(tensors: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """An exported state dict with every NVFP4 and FP8 weight turned back into ``dtype`` and the scale
    tensors dropped (our own decoding, independent of Model Optimizer's).

    NVFP4 (Model Optimizer's export layout): ``W.weight`` uint8 ``[..., K/2]``, two E2M1 codes a byte
    (element ``2i`` in the low nibble); ``W.weight_scale`` E4M3 ``[..., K/16]``; ``W.weight_scale_2``
    FP32 scalar; value = E2M1(code) x scale x scale_2. FP8: ``W.weight`` E4M3 x ``W.weight_scale`` (FP32).
    """
    import torch

    table = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    out = {}
    scales = (".weight_scale", ".weight_scale_2", ".input_scale", ".k_scale", ".v_scale")
    for key, t in tensors.items():
        if key.endswith(scales):
            continue
        base = key[: -len(".weight")] if key.endswith(".weight") else None
        if base is not None and t.dtype == torch.uint8 and f"{base}.weight_scale_2" in tensors:
            lo, hi = (t & 0x0F).long(), (t >> 4).long()
            codes = torch.stack([lo, hi], dim=-1).reshape(*t.shape[:-1], t.shape[-1] * 2)
            vals = table[codes & 7] * torch.where(codes & 8 != 0, -1.0, 1.0)
            s = tensors[f"{base}.weight_scale"].float() * tensors[f"{base}.weight_scale_2"].float()
            block = vals.shape[-1] // s.shape[-1]
            vals = (vals.reshape(*vals.shape[:-1], s.shape[-1], block) * s.unsqueeze(-1)).reshape(vals.shape)
            out[key] = vals.to(dtype)
        elif base is not None and t.dtype == torch.float8_e4m3fn:
            out[key] = (t.float() * tensors[f"{base}.weight_scale"].float()).to(dtype)
        else:
            out[key] = t.to(dtype) if t.is_floating_point() else t
    return out


def fake_quantized_weights(model: Any) -> dict[str, Any]:
    """``checkpoint-style name → (format, weight as the fake-quantized model uses it)`` (FP32 copies) for every
    weight with an enabled quantizer; names without their first component (``layers.2.mixer.in_proj.weight``;
    fused experts per expert: ``layers.1.mixer.experts.0.up_proj.weight``), as in the export."""
    def fmt(q: Any) -> str:
        return format_name(q.is_enabled, getattr(q, "num_bits", None), getattr(q, "block_sizes", None))

    out = {}
    for name, mod in model.named_modules():
        tail = name.split(".", 1)[1] if "." in name else name
        for attr, child in mod.named_children():
            if attr == "weight_quantizer" and child.is_enabled and getattr(mod, "weight", None) is not None:
                out[f"{tail}.weight"] = (fmt(child), child(mod.weight).float().cpu())
            elif attr.endswith("_weight_quantizers"):
                param = attr.removesuffix("_weight_quantizers")
                for e, q in enumerate(child):
                    if q.is_enabled:
                        out[f"{tail}.{e}.{param}.weight"] = (fmt(q), q(getattr(mod, param)[e]).float().cpu())
    return out


def check_export(fake: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """Compare an export (``raw``: its safetensors, names with their first component dropped on both sides)
    with the fake-quantized weights (``fake``: name → (format, tensor), from :func:`fake_quantized_weights`).

    Returns per format ``{"tensors", "elements", "differ", "max_steps"}``: how many elements of the
    de-quantized export (:func:`dequantize_tensors`) differ from the fake-quantized model, and the largest
    difference in steps of the format at that element (an element "differs" beyond 0.25 step) (FP8 E4M3: ``2^(e - 3)`` times the tensor's
    ``weight_scale`` for a scaled value in ``[2^e, 2^(e+1))``, ``e >= -6``; NVFP4: the block's E2M1 top step,
    ``2 x scale x scale_2``). Raises :class:`QuantizeError` for a weight missing from the export or a
    shape that differs."""
    import torch

    raw = {k.split(".", 1)[1]: v for k, v in raw.items()}
    deq = dequantize_tensors(raw, torch.float32)
    out: dict[str, dict[str, Any]] = {}
    for name, (fmt, w) in fake.items():
        got = deq.get(name)
        if got is None:
            raise QuantizeError(f"the export has no tensor for the quantized weight {name}")
        if tuple(got.shape) != tuple(w.shape):
            raise QuantizeError(f"export {name}: shape {tuple(got.shape)}, the model's {tuple(w.shape)}")
        base = name[: -len(".weight")]
        d = (got - w).abs()
        if fmt == "fp8":
            scale = raw[f"{base}.weight_scale"].float()
            x = torch.maximum(got.abs(), w.abs()) / scale
            step = torch.exp2(torch.floor(torch.log2(x.clamp(min=2.0 ** -6))) - 3) * scale
        else:
            block = raw[f"{base}.weight_scale"].float() * raw[f"{base}.weight_scale_2"].float()
            step = (2 * block).repeat_interleave(w.shape[-1] // block.shape[-1], dim=-1)
        rec = out.setdefault(fmt, {"tensors": 0, "elements": 0, "differ": 0, "max_steps": 0.0})
        rec["tensors"] += 1
        rec["elements"] += w.numel()
        rec["differ"] += int((d > 0.25 * step).sum())  # BF16 rounding of the fake-quantized values is < 0.05 step
        rec["max_steps"] = max(rec["max_steps"], float((d / step).max()))
    return out


def export_matches(fmt: str, rec: dict[str, Any], device: str) -> bool:
    """Whether an export's ``fmt`` weights (``rec`` from :func:`check_export`) match the fake-quantized model.

    FP8 may be one step off anywhere: Model Optimizer 0.47 divides by the scale in the checkpoint dtype (BF16)
    before the E4M3 cast, a second rounding. NVFP4 on the CPU route must match up to BF16 rounding of the
    fake-quantized values (< 0.05 step): export and fake quantization run the same PyTorch code. On CUDA the
    fake quantization is Model Optimizer's Triton kernel, whose FP32 scale arithmetic differs from the
    export's at rounding ties: one step in at most 0.1 % of the elements is accepted (measured on an NVIDIA
    H200 with the small model and the ``ultra`` recipe: 284 of 4,194,304, 0.007 %)."""
    if fmt == "fp8":
        return rec["max_steps"] <= 1.1
    if device == "cuda":
        return rec["max_steps"] <= 1.1 and rec["differ"] <= 1e-3 * rec["elements"]
    return rec["max_steps"] <= 0.05


def dequantized_load(export_dir: Path, work: Path, dtype: Any) -> Any:
    """transformers' ``NemotronHForCausalLM`` from a de-quantized copy of the export (written to ``work``)."""
    from safetensors.torch import load_file, save_file
    from transformers import NemotronHForCausalLM

    tensors: dict[str, Any] = {}
    for f in sorted(export_dir.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    work.mkdir(parents=True, exist_ok=True)
    save_file(dequantize_tensors(tensors, dtype), str(work / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((export_dir / "config.json").read_text(encoding="utf-8"))
    config.pop("quantization_config", None)
    (work / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return NemotronHForCausalLM.from_pretrained(str(work), dtype=dtype).eval()


def tensor_bytes(export_dir: Path) -> dict[str, int]:
    """Bytes of the exported tensors per module kind (scales included)."""
    from safetensors import safe_open

    sizes = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
             "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
    out: dict[str, int] = {}
    for f in sorted(export_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for key in fh.keys():  # noqa: SIM118 (safe_open is not a dict)
                sl = fh.get_slice(key)
                n = math.prod(sl.get_shape()) * sizes[sl.get_dtype()]
                kind = module_kind(key)
                out[kind] = out.get(kind, 0) + n
    return out


# ----------------------------------------------------------------------------------------------- run
def nvfp4_path_of(device: str) -> str:
    """Which code fake-quantizes NVFP4 on ``device`` (for the log and the summary)."""
    if device == "cuda":
        return "Model Optimizer's CUDA/Triton kernels"
    return "Model Optimizer's pure-PyTorch NVFP4 (NVFP4QTensor), routed on the CPU"


def run(s: QuantSettings, spec: Any = None) -> dict[str, Any]:
    """Quantize as ``s`` says (see the module docstring); returns the summary (also written to
    ``<export>/summary.json``). ``spec`` overrides the catalogue entry named by ``model.name``.

    Raises:
        QuantizeError: the format map differs from the recipe's, or the export does not reload to the
            fake-quantized model. ModelError / DataError / QuantConfigError: unusable inputs.
    """
    import torch

    from nemotron.runtime.common.settings import thread_count

    torch.set_num_threads(thread_count(s.cpus))
    import modelopt.torch.quantization as mtq
    import transformers
    from modelopt.torch.export import export_hf_checkpoint

    from nemotron.config import catalogue
    from nemotron.runtime.quantization.nvfp4_cpu import cpu_route

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # a failing load is then one line (and the log has no bars)
    t0 = time.perf_counter()
    spec = spec or catalogue.get(s.model_name)
    recipe = load_recipe(s.recipe)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, s.export_dtype)
    calib, held, held_split = load_samples(s, spec.vocab_size)
    tok, bos, eos = load_tokenizer(s)
    model, origin = load_model(s, spec, dtype)
    model.to(device)
    ref = copy.deepcopy(model)
    nvfp4_path = nvfp4_path_of(device)
    _say(f"model {spec.name} from {origin}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, "
         f"{s.export_dtype}, {device} ({torch.get_num_threads()} thread(s)); recipe {recipe.name} ({recipe.source})")
    _say(f"calibration: {len(calib)} x {s.seq_length} tokens from the train split of {s.calib_blend}, "
         f"{s.batch_size} per forward; held-out: {len(held)} x {s.seq_length} tokens of its {held_split} split; "
         f"NVFP4 fake quantization: {nvfp4_path}")

    route = cpu_route() if device == "cpu" else contextlib.nullcontext()
    with route, torch.no_grad():
        def forward_loop(m: Any) -> None:
            m.eval()
            for i in range(0, len(calib), s.batch_size):
                m(input_ids=calib[i:i + s.batch_size, :-1].to(device))

        t = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # Model Optimizer prints progress on stdout
            mtq.quantize(model, recipe.modelopt_config(), forward_loop)
        model.eval()
        calib_s = time.perf_counter() - t
        found = format_map(model)
        problems = check_map(found, recipe)
        if problems:
            raise QuantizeError(f"recipe {recipe.name} did not produce its declared map: " + "; ".join(problems))
        bf16_left = left_in_bf16(found)

        metrics = compare(ref, model, held, device)
        generations = []
        if s.generate and s.max_new_tokens and s.prompts:
            for prompt in s.prompts:
                ids = ([bos] if bos is not None else []) + (tok.encode(prompt, add_special_tokens=False).ids if tok else [])
                if not ids:
                    ids = [int(held[0, 0])]
                q_ids = greedy(model, ids, s.max_new_tokens, eos, device)
                r_ids = greedy(ref, ids, s.max_new_tokens, eos, device)
                text = (lambda ids: tok.decode(ids, skip_special_tokens=False)) if tok else (lambda ids: str(ids))
                generations.append({"prompt": prompt, "quantized": text(q_ids), "bf16": text(r_ids),
                                    "new_tokens": [len(q_ids), len(r_ids)], "same_tokens": q_ids == r_ids})
        check_x = held[:1, :-1].to(device)
        with weights_only(model):
            fake_logits = model(input_ids=check_x).logits.float().cpu()
        fake_w = fake_quantized_weights(model)

        out_dir = s.export_dir
        tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.redirect_stdout(sys.stderr):
            export_hf_checkpoint(model, dtype=dtype, export_dir=tmp)
    try:
        return _finish(s, recipe, spec, origin, device, dtype, t0, calib_s, found, bf16_left, metrics, generations,
                       held_split, calib, check_x, fake_logits, fake_w, ref, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _finish(s: QuantSettings, recipe: Any, spec: Any, origin: str, device: str, dtype: Any, t0: float,
            calib_s: float, found: dict, bf16_left: dict, metrics: dict, generations: list, held_split: str,
            calib: Any, check_x: Any, fake_logits: Any, fake_w: dict, ref: Any, tmp: Path) -> dict[str, Any]:
    """Steps 5-6 of :func:`run` on the export written to ``tmp``: repair, check, move into place, report."""
    import torch
    import transformers

    from nemotron.report import table

    nvfp4_path = nvfp4_path_of(device)
    out_dir = s.export_dir
    repaired = repair_export(tmp)
    from safetensors.torch import load_file

    exported: dict[str, Any] = {}
    for f in sorted(tmp.glob("*.safetensors")):
        exported.update(load_file(str(f)))
    weights_check = check_export(fake_w, exported)
    del exported
    bad = {f: r for f, r in weights_check.items() if not export_matches(f, r, device)}
    if bad:
        raise QuantizeError("the export's weights do not de-quantize to the fake-quantized model's: " + "; ".join(
            f"{f}: {r['differ']:,} of {r['elements']:,} elements differ, up to {r['max_steps']:.2f} steps"
            for f, r in bad.items()))
    reload_dir = tmp / ".dequantized"
    try:
        reloaded = dequantized_load(tmp, reload_dir, dtype).to(device)
        with torch.no_grad():
            re_logits = reloaded(input_ids=check_x).logits.float().cpu()
    finally:
        shutil.rmtree(reload_dir, ignore_errors=True)
    reload_diff = float((re_logits - fake_logits).abs().max())
    reload_agree = float((re_logits.argmax(-1) == fake_logits.argmax(-1)).float().mean())

    ref_bytes: dict[str, int] = {}
    for name, p in ref.named_parameters():
        k = module_kind(name)
        ref_bytes[k] = ref_bytes.get(k, 0) + p.numel() * p.element_size()
    q_bytes = tensor_bytes(tmp)
    kinds = {}
    for kind in KINDS:
        roles = found["kinds"].get(kind)
        if roles is None and kind not in ref_bytes:
            continue
        roles = roles or {}
        kinds[kind] = {"weights": "/".join(roles.get("weights", ["-" if kind == "kv_cache" else "bf16"])),
                       "inputs": "/".join(roles.get("inputs", ["-"])), "cache": "/".join(roles.get("cache", ["-"])),
                       "bf16_bytes": ref_bytes.get(kind, 0), "exported_bytes": q_bytes.get(kind, 0)}
    total_ref, total_q = sum(ref_bytes.values()), sum(q_bytes.values())
    summary = {
        **export_identity(s, origin), "recipe_source": recipe.source, "model": spec.name,
        "device": device, "nvfp4_fake_quant": nvfp4_path, "dtype": s.export_dtype,
        "calibration": {"samples": len(calib), "seq_length": s.seq_length, "batch": s.batch_size,
                        "blend": str(s.calib_blend), "seconds": round(calib_s, 2)},
        "held_out": {"split": held_split, **metrics},
        "formats": kinds, "left_in_bf16": bf16_left,
        "weight_bytes": {"bf16": total_ref, "exported": total_q, "reduction": 1 - total_q / total_ref},
        "export": {"path": str(out_dir), "names_repaired": repaired, "weights_vs_fake_quant": weights_check,
                   "reload_max_abs_logit_diff": reload_diff, "reload_top1_agreement": reload_agree,
                   "reload_logit_scale": float(fake_logits.abs().max())},
        "generations": generations, "seconds": round(time.perf_counter() - t0, 1),
        "versions": {"modelopt": _version("nvidia-modelopt"), "transformers": transformers.__version__,
                     "torch": torch.__version__},
    }
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    normal_modes(tmp)
    if out_dir.exists():  # check_inputs allowed it: empty, the same export, or export.overwrite=true
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)

    rows = [[k, KINDS[k], v["weights"], v["inputs"] if k != "kv_cache" else v["cache"],
             _mb(v["bf16_bytes"]), _mb(v["exported_bytes"]),
             f"{1 - v['exported_bytes'] / v['bf16_bytes']:.0%}" if v["bf16_bytes"] else "-"] for k, v in kinds.items()]
    rows.append(["total", "", "", "", _mb(total_ref), _mb(total_q), f"{1 - total_q / total_ref:.0%}"])
    table(f"recipe {recipe.name}: formats and weight memory", ["kind", "modules", "weights", "activations / cache",
                                                              f"{s.export_dtype} MB", "exported MB", "saved"], rows)
    table(f"against the {s.export_dtype} model on {metrics['tokens']:,} held-out tokens ({held_split} split)",
          ["metric", "value"],
          [["perplexity, bf16", f"{metrics['ppl_bf16']:.3f}"], ["perplexity, quantized", f"{metrics['ppl_quantized']:.3f}"],
           ["KL(bf16 || quantized) per token", f"{metrics['kl_per_token']:.5f} nats"],
           ["top-1 agreement", f"{metrics['top1_agreement']:.2%}"],
           ["export reload vs fake quant (weights only): max |logit diff|",
            f"{reload_diff:.3g} of logits up to {float(fake_logits.abs().max()):.3g} (top-1 {reload_agree:.2%})"]]
          + [[f"export {f} weights differing from fake quant",
               f"{r['differ']:,} of {r['elements']:,} (<= {r['max_steps']:.2f} step)"] for f, r in weights_check.items()])
    for kind, names in bf16_left.items():
        _say(f"left in BF16 (not matched by recipe {recipe.name}): {kind}: {len(names)} module(s): "
             + ", ".join(compress_names(names)))
    for g in generations:
        _say(f"generate {g['prompt']!r}: quantized {g['quantized']!r} | bf16 {g['bf16']!r}")
    if any(repaired.values()):
        _say(f"repaired {sum(repaired.values())} layer name(s) Model Optimizer 0.47 wrote with a placeholder "
             f"({', '.join(f'{k}: {v}' for k, v in repaired.items() if v)})")
    _say(f"done in {summary['seconds']} s: {out_dir} (Hugging Face checkpoint + hf_quant_config.json + summary.json)")
    from nemotron.config.artifacts import write_outputs

    write_outputs({"quantized-checkpoint": {"path": str(out_dir), "recipe": recipe.name, "source": origin}})
    return summary


def normal_modes(folder: Path) -> None:
    """Give ``folder`` and everything in it the modes a new file or folder gets under this process's umask
    (files ``0o666 & ~umask``, folders ``0o777 & ~umask``): some writers (the exporter's safetensors file)
    create theirs private (``0o600``)."""
    mask = os.umask(0)
    os.umask(mask)
    folder.chmod(0o777 & ~mask)
    for p in folder.rglob("*"):
        if not p.is_symlink():
            p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


__all__ = [
    "E2M1_VALUES",
    "QuantizeError",
    "check_map",
    "compare",
    "dequantize_tensors",
    "dequantized_load",
    "format_map",
    "greedy",
    "left_in_bf16",
    "load_samples",
    "main",
    "normal_modes",
    "run",
    "tensor_bytes",
    "weights_only",
]
