"""The self-check of a ``megatron_to_hf`` export, recorded beside it in ``selfcheck.json``.

After :func:`nemotron.runtime.megatron.megatron_bridge._convert` has saved a Megatron checkpoint in the Hugging Face
form, :func:`run` checks that the export is the model that was exported:

1. **config shape** (:func:`check_config`): the exported ``config.json``'s ``num_hidden_layers`` and hybrid pattern
   (``hybrid_override_pattern``, or ``layers_block_type`` in the transformers-v5 form) equal the checkpoint's own
   (``model.num_layers`` / ``model.hybrid_layer_pattern`` of its ``run_config.yaml``, :func:`saved_model_shape`)
   and, for a catalogue model, the catalogue's ``config.json`` — never the full Ultra's 108 layers over the weights
   of a slice (issue 30, defect 2);
2. **tokenizer** (:func:`check_tokenizer`): ``transformers.AutoTokenizer.from_pretrained`` of the export folder
   loads, and its ids fit the exported ``vocab_size`` (every consumer of the export — NeMo RL, quantization, eval —
   loads the tokenizer from the export itself; ``save_hf_pretrained`` of a config-only bridge writes none, found
   reading the stages downstream of the first GPU export);
3. **reload** (:func:`hf_logits`): ``transformers.AutoModelForCausalLM.from_pretrained`` of the export (BF16, on the
   GPU when there is one; ``trust_remote_code`` as ``recipe.trust_remote_code`` says);
4. **logits** (:func:`compare_logits`): the same fixed batch (:func:`fixed_batch`: 2 x 64 token ids from seed
   1234, within the HF vocabulary) through the reloaded model and through the Megatron model that was exported
   (:func:`megatron_logits`: the model ``load_megatron_model`` gave the export, MTP off as upstream's
   ``examples/conversion/compare_hf_and_megatron/compare.py`` does, forward without labels → ``[b, s, v]``
   logits). The Megatron forward is reached on the single-rank GPU export only (``convert.device: gpu`` at
   world size 1): a CPU export (``AutoBridge.export_ckpt``) keeps no Megatron model in memory, and a multi-rank
   export holds one shard per rank (and a model that needs several GPUs would not reload on one). There steps 3
   and 4 are recorded as not run, with that reason, in ``selfcheck.json`` and in the job log (never left out
   silently); the config check still runs and still fails the job.

Thresholds (BF16 on both sides): the logits of all ``b x s`` positions must have a cosine similarity of
at least :data:`COSINE_MIN` = 0.98 (computed in FP64) — the ``SIMILARITY_THRESHOLD`` of Megatron-Bridge's own
``compare_hf_and_megatron/compare.py`` at 4588417, the gate upstream applies — and the two models' argmax must
agree at no fewer than :data:`TOP1_MIN` = 80 % of the positions (ours: it catches a systematic shift that a cosine
near 1 tolerates; BF16 noise on the logits, ~1e-2 relative, flips the argmax only where the top two logits lie
within that noise, and a briefly trained small model has flat, unigram-like outputs on random ids, so a fifth of
the positions is left for that — upstream prints the token match but does not gate on it). The maximum and mean
absolute difference are recorded (not gated: their scale follows the logits' own scale).

Any failure — a config shape that differs, a tokenizer that is absent or larger than the vocabulary, a reload that raises, logits beyond a threshold or not finite — writes
``selfcheck.json`` with ``"passed": false`` and the reason, prints one ``SELF-CHECK FAILED`` line naming the
numbers and thresholds, and raises :class:`SelfCheckError` (the job then exits 1).

torch and transformers are imported inside the functions that need them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: Minimum cosine similarity of the flattened FP32 logits (Megatron-Bridge 4588417
#: ``examples/conversion/compare_hf_and_megatron/compare.py`` ``SIMILARITY_THRESHOLD = 0.98``).
COSINE_MIN = 0.98
#: Minimum fraction of positions whose argmax agrees (ours; module docstring).
TOP1_MIN = 0.80
#: The fixed batch: sequences x tokens, and the seed of ``torch.Generator`` that draws the ids.
BATCH, SEQ, SEED = 2, 64, 1234
#: File written beside the export.
FILENAME = "selfcheck.json"


class SelfCheckError(RuntimeError):
    """The export failed its self-check; ``str()`` names the check, the figures and the thresholds."""


# ----------------------------------------------------------------------------------------------- config shape
def main_pattern(pattern: Any) -> str | None:
    """The main decoder's hybrid pattern of a Megatron ``hybrid_layer_pattern``: the part before the first MTP
    separator ``/``, without the pipeline-stage separators ``|`` (Megatron-Core's hybrid symbols). None for None."""
    if pattern is None:
        return None
    return str(pattern).split("/")[0].replace("|", "")


def saved_model_shape(source: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"num_layers", "pattern", "run_config"}`` of the checkpoint folder ``source``: ``model.num_layers`` and
    :func:`main_pattern` of ``model.hybrid_layer_pattern`` (else ``hybrid_override_pattern``) in the
    ``run_config.yaml`` of its newest ``iter_*`` folder (``latest_checkpointed_iteration.txt`` when present), else
    of the folder itself. Missing keys are None; no ``run_config.yaml`` at all gives ``run_config`` None."""
    import yaml

    root = Path(source)
    candidates: list[Path] = []
    latest = root / "latest_checkpointed_iteration.txt"
    if latest.is_file():
        text = latest.read_text(encoding="utf-8").strip()
        if text.isdigit():
            candidates.append(root / f"iter_{int(text):07d}")
    candidates += [*sorted(root.glob("iter_*"), reverse=True), root]
    for folder in candidates:
        rc = folder / "run_config.yaml"
        if rc.is_file():
            model = (yaml.safe_load(rc.read_text(encoding="utf-8")) or {}).get("model") or {}
            pattern = model.get("hybrid_layer_pattern") or model.get("hybrid_override_pattern")
            layers = model.get("num_layers")
            return {"num_layers": int(layers) if layers is not None else None, "pattern": main_pattern(pattern),
                    "run_config": str(rc)}
    return {"num_layers": None, "pattern": None, "run_config": None}


def exported_shape(config: dict[str, Any]) -> dict[str, Any]:
    """``{"num_layers", "pattern"}`` of an HF NemotronH ``config.json`` (a dict) in either form: v4
    ``hybrid_override_pattern`` or v5 ``layers_block_type`` (:mod:`nemotron.runtime.common.convert`); the layer count is
    ``num_hidden_layers``, else the pattern's length."""
    from nemotron.runtime.common.convert import pattern_from_block_types

    pattern = config.get("hybrid_override_pattern")
    if pattern is None and isinstance(config.get("layers_block_type"), list):
        pattern = pattern_from_block_types(config["layers_block_type"])
    layers = config.get("num_hidden_layers")
    if layers is None and pattern is not None:
        layers = len(pattern)
    return {"num_layers": int(layers) if layers is not None else None, "pattern": pattern}


def check_config(exported: dict[str, Any], checkpoint: dict[str, Any],
                 catalogue: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compare the exported ``config.json`` (a dict) with the checkpoint's shape (:func:`saved_model_shape`) and,
    when given, the catalogue's HF config (a dict). Returns ``{"exported", "checkpoint", "catalogue", "mismatches",
    "passed"}``; ``passed`` is False when a known reference differs in layer count or pattern, or when there is no
    reference at all (nothing to check against is a failure, not a pass)."""
    got = exported_shape(exported)
    refs = {"checkpoint": {k: checkpoint.get(k) for k in ("num_layers", "pattern")}}
    if catalogue is not None:
        refs["catalogue"] = exported_shape(catalogue)
    mismatches = []
    compared = 0
    for name, ref in refs.items():
        for key in ("num_layers", "pattern"):
            if ref.get(key) is None:
                continue
            compared += 1
            if ref[key] != got[key]:
                mismatches.append(f"{key}: exported {got[key]!r}, {name} {ref[key]!r}")
    if not compared:
        mismatches.append("no reference shape: the checkpoint's run_config.yaml names neither model.num_layers nor "
                          "model.hybrid_layer_pattern, and no catalogue config was given")
    return {"exported": got, **refs, "mismatches": mismatches, "passed": not mismatches}


# ------------------------------------------------------------------------------------------------------ logits
def check_tokenizer(folder: str | os.PathLike[str], vocab_size: int | None, trust_remote_code: bool = False
                    ) -> dict[str, Any]:
    """``{"class", "size", "vocab_size", "passed", "reason"?}`` for the tokenizer in the export ``folder``: it loads
    with ``AutoTokenizer`` from the folder alone, and its size (``len(tokenizer)``: base vocabulary plus added
    tokens) is at most the exported ``vocab_size`` (the embedding rows; Megatron pads the vocabulary up, never down).
    A tokenizer that does not load gives ``passed`` False with the error as ``reason``."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    except Exception as exc:  # absent files (OSError), an unknown class (ValueError): recorded, named
        return {"passed": False, "reason": f"no tokenizer loads from the export: {type(exc).__name__}: {exc}"[:500]}
    size = len(tok)
    out: dict[str, Any] = {"class": type(tok).__name__, "size": size, "vocab_size": vocab_size}
    out["passed"] = vocab_size is None or size <= int(vocab_size)
    if not out["passed"]:
        out["reason"] = f"the tokenizer has {size} tokens, the exported vocab_size is {vocab_size}"
    return out


def fixed_batch(vocab_size: int, batch: int = BATCH, seq: int = SEQ, seed: int = SEED) -> Any:
    """The fixed batch: a CPU ``torch.long`` tensor ``[batch, seq]`` of ids in ``[0, vocab_size)`` drawn by a
    ``torch.Generator`` seeded with ``seed`` (the same ids on every machine).

    Raises:
        SelfCheckError: ``vocab_size`` < 1.
    """
    import torch

    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise SelfCheckError(f"fixed batch: vocab_size={vocab_size!r}, must be a positive integer")
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, seq), generator=gen, dtype=torch.long)


def compare_logits(reference: Any, candidate: Any, cosine_min: float = COSINE_MIN,
                   top1_min: float = TOP1_MIN) -> dict[str, Any]:
    """Compare two logits tensors ``[b, s, v]`` (any float dtype, any device; compared in FP64 on the CPU: an FP32
    cosine over the 2 x 64 x 131,072 logits of the GPU self-check read 1.00085, and 1.0011 for a tensor against
    itself, an error as large as the gap between a good export and the threshold).
    ``reference`` (Megatron's) may have a padded vocabulary: it is cut to ``candidate``'s ``v``, as upstream's
    ``compare.py`` does. Returns ``max_abs_diff``, ``mean_abs_diff``, ``cosine`` (of the flattened logits),
    ``min_position_cosine``, ``top1_agreement`` (fraction of the ``b x s`` positions), ``positions``,
    ``vocab_compared``, ``finite``, the thresholds and ``passed`` (finite, cosine >= ``cosine_min``, top-1 >=
    ``top1_min``).

    Raises:
        SelfCheckError: the shapes differ in ``b`` or ``s``, or ``reference``'s vocabulary is the smaller.
    """
    import torch

    ref = reference.detach().cpu().double()
    cand = candidate.detach().cpu().double()
    if ref.dim() != 3 or cand.dim() != 3 or ref.shape[:2] != cand.shape[:2] or ref.shape[2] < cand.shape[2]:
        raise SelfCheckError(f"logits shapes differ: Megatron {tuple(ref.shape)}, HF {tuple(cand.shape)} "
                             "(expected [b, s, v] with the same b and s, Megatron's v >= HF's)")
    ref = ref[..., : cand.shape[2]]
    finite = bool(torch.isfinite(ref).all() and torch.isfinite(cand).all())
    diff = (ref - cand).abs()
    flat_cos = torch.nn.functional.cosine_similarity(ref.reshape(1, -1), cand.reshape(1, -1)).item()
    pos_cos = torch.nn.functional.cosine_similarity(ref.reshape(-1, ref.shape[2]), cand.reshape(-1, cand.shape[2]),
                                                    dim=-1)
    top1 = (ref.argmax(-1) == cand.argmax(-1)).float().mean().item()
    out = {"max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()), "cosine": float(flat_cos),
           "min_position_cosine": float(pos_cos.min()), "top1_agreement": float(top1),
           "positions": int(ref.shape[0] * ref.shape[1]), "vocab_compared": int(cand.shape[2]), "finite": finite,
           "cosine_min": cosine_min, "top1_min": top1_min}
    out["passed"] = bool(finite and flat_cos >= cosine_min and top1 >= top1_min)
    return out


def hf_logits(folder: str | os.PathLike[str], input_ids: Any, trust_remote_code: bool = False,
              device: str | None = None, info: dict[str, Any] | None = None) -> Any:
    """Logits ``[b, s, v]`` (the model's output dtype: transformers' NemotronH upcasts to FP32) of ``input_ids``
    through ``AutoModelForCausalLM.from_pretrained(folder)``, loaded in BF16 on ``device`` (default: ``cuda`` when available, else ``cpu``); the model is freed afterwards.
    ``info``, when given, receives what transformers reported about the load: ``missing_keys`` /
    ``unexpected_keys`` counts and their first 8 names (weights of the export that the model did not take, e.g.
    an MTP block transformers does not build, and weights the model lacked and initialised at random — the logits
    comparison then fails).

    Raises:
        SelfCheckError: the reload or the forward raises (the message names the folder and the error).
    """
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        from transformers import AutoModelForCausalLM

        model, loading = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16,
                                                              trust_remote_code=trust_remote_code,
                                                              output_loading_info=True)
        if info is not None:
            for key in ("missing_keys", "unexpected_keys"):
                names = sorted(str(k) for k in (loading or {}).get(key) or [])
                info[key] = len(names)
                info[f"{key}_first"] = names[:8]
        model.to(device=device, dtype=torch.bfloat16).eval()  # BF16 also where from_pretrained ignores dtype=
        with torch.no_grad():
            logits = model(input_ids=input_ids.to(device)).logits
    except Exception as exc:  # any reload failure is the self-check's failure, named
        raise SelfCheckError(f"the export in {folder} does not reload in transformers: {type(exc).__name__}: "
                             f"{exc}") from exc
    del model
    return logits


def megatron_logits(model: Any, input_ids: Any) -> Any:
    """Logits ``[b, s, v_padded]`` of ``input_ids`` through the Megatron model ``model`` (the list of model chunks
    ``load_megatron_model`` returns; one chunk: TP1 PP1), on the current CUDA device: MTP switched off for the
    forward (Megatron-Bridge's ``disable_mtp_for_inference``, as upstream's ``compare.py``), ``position_ids`` =
    0..s-1, ``attention_mask`` None (Megatron-Core builds the causal mask), no labels (Megatron-Core's hybrid model
    then returns ``[b, s, v]`` logits).

    Raises:
        SelfCheckError: more than one model chunk (a pipeline-parallel export), or the forward raises.
    """
    import torch

    chunks = list(model) if isinstance(model, (list, tuple)) else [model]
    if len(chunks) != 1:
        raise SelfCheckError(f"the Megatron forward of the self-check runs one model chunk, got {len(chunks)}")
    m = chunks[0]
    try:
        from megatron.bridge.utils.common_utils import disable_mtp_for_inference

        disable_mtp_for_inference(m)
    except ImportError:  # older Megatron-Bridge: the same two switches by hand
        m.config.mtp_num_layers = None
        inner = getattr(m, "module", m)
        if hasattr(inner, "mtp_process"):
            inner.mtp_process = False
    m.eval()
    ids = input_ids.to(torch.device("cuda", torch.cuda.current_device()))
    pos = torch.arange(ids.shape[1], dtype=torch.long, device=ids.device).unsqueeze(0).expand_as(ids)
    try:
        with torch.no_grad():
            return m(input_ids=ids, position_ids=pos, attention_mask=None)
    except Exception as exc:
        raise SelfCheckError(f"the Megatron forward of the self-check raised {type(exc).__name__}: {exc}") from exc


# ------------------------------------------------------------------------------------------------------- record
def write(folder: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """Write ``record`` as ``<folder>/selfcheck.json`` (sorted keys, atomically); returns the path."""
    path = Path(folder) / FILENAME
    tmp = path.with_name("." + FILENAME + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def verdict(record: dict[str, Any]) -> str:
    """The one-line verdict of a self-check record (the job log's line)."""
    cfg = record.get("config") or {}
    shape = cfg.get("exported") or {}
    state = "matches the checkpoint" if cfg.get("passed") else "MISMATCH: " + "; ".join(cfg.get("mismatches", []))
    parts = [f"config {shape.get('num_layers')} layers {shape.get('pattern')!r} ({state})"]
    tk = record.get("tokenizer")
    if tk:
        parts.append(f"tokenizer {tk.get('class')} of {tk.get('size')} tokens (vocab_size {tk.get('vocab_size')})"
                     if tk.get("passed") else f"TOKENIZER: {tk.get('reason')}")
    lg = record.get("logits") or {}
    if lg.get("ran"):
        parts.append(f"logits max|diff| {lg['max_abs_diff']:.4g} mean {lg['mean_abs_diff']:.4g}, cosine "
                     f"{lg['cosine']:.5f} (min {lg['cosine_min']}), top-1 agreement {lg['top1_agreement']:.3f} "
                     f"(min {lg['top1_min']}) over {lg['positions']} positions")
    else:
        parts.append(f"logits comparison not run: {lg.get('reason')}")
    if record.get("error"):
        parts.append(f"error: {record['error']}")
    head = "self-check passed" if record.get("passed") else "SELF-CHECK FAILED"
    return f"{head}: " + "; ".join(parts)


def run(folder: str | os.PathLike[str], source: str | os.PathLike[str], *, megatron_model: Any = None,
        no_megatron_reason: str | None = None, catalogue_config: dict[str, Any] | None = None,
        trust_remote_code: bool = False, device: str | None = None, say: Any = print) -> dict[str, Any]:
    """The self-check of the export in ``folder`` made from the Megatron checkpoint ``source`` (module docstring).
    ``megatron_model``: the model chunks that were exported (None: the logits comparison is recorded as not run,
    for ``no_megatron_reason``, which must then be given). Writes ``selfcheck.json`` in ``folder`` and prints the
    verdict with ``say``; returns the record.

    Raises:
        SelfCheckError: any check failed (after the record is written); the message is the verdict line.
    """
    import time

    t0 = time.monotonic()
    record: dict[str, Any] = {"export": str(folder), "source": str(source), "batch": [BATCH, SEQ], "seed": SEED}
    failed = False
    try:
        exported = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        record["config"] = check_config(exported, saved_model_shape(source), catalogue_config)
        failed = not record["config"]["passed"]
        record["tokenizer"] = check_tokenizer(folder, exported.get("vocab_size"), trust_remote_code)
        failed = failed or not record["tokenizer"]["passed"]
        if megatron_model is None:
            if not no_megatron_reason:
                raise SelfCheckError("no Megatron model and no reason given for not comparing logits")
            record["logits"] = {"ran": False, "reason": no_megatron_reason}
        else:
            ids = fixed_batch(int(exported.get("vocab_size") or 0))
            record["ids_head"] = ids[0, :8].tolist()
            reference = megatron_logits(megatron_model, ids)
            record["reload"] = {}
            record["logits"] = {"ran": True, **compare_logits(reference, hf_logits(folder, ids, trust_remote_code,
                                                                                    device, record["reload"]))}
            failed = failed or not record["logits"]["passed"]
    except SelfCheckError as exc:
        record["error"] = str(exc)
        failed = True
    except Exception as exc:  # an unreadable config.json or run_config.yaml, a failed comparison: named, recorded
        record["error"] = f"{type(exc).__name__}: {exc}"
        failed = True
    record.setdefault("logits", {"ran": False, "reason": "an earlier step failed"})
    record["passed"] = not failed
    record["seconds"] = round(time.monotonic() - t0, 1)
    write(folder, record)
    line = verdict(record)
    say(line)
    if failed:
        raise SelfCheckError(line)
    return record
