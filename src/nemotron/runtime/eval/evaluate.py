"""``backend: local`` of ``nemotron ultra3 eval``: measure Hugging Face checkpoints of the chain on this machine, and
``eval --compare A B``.

For each checkpoint of ``eval.checkpoints`` (label → folder: a pretrain/SFT run folder, an RLVR/MOPD ``hf/step_N``,
or a quantized export), in one process:

* **held-out perplexity**: ``eval.perplexity.samples`` sequences of ``eval.perplexity.seq_length`` tokens from the
  ``eval.perplexity.split`` split (default ``test``) of ``eval.perplexity.data`` (the ``blend.json`` of ``data prep
  pretrain``), read as Megatron-Core reads them (:class:`nemotron.runtime.megatron.pretrain_data.BlendedSamples`,
  unshuffled): ``exp`` of the mean next-token cross-entropy, in nats per token before the ``exp``;
* **GSM8K accuracy**: the first ``eval.gsm8k.samples`` rows of ``eval.gsm8k.data`` (the held-out ``validation.jsonl``
  of ``data prep rl``), one greedy completion of up to ``eval.gsm8k.max_new_tokens`` tokens each, scored by NeMo RL's
  math answer check (:mod:`nemotron.runtime.rl.rewards`, as the RL stages reward);
* **a chat sample**: the greedy reply to ``eval.chat.prompt`` through the tokenizer's chat template.

A quantized export (``hf_quant_config.json`` present) is loaded de-quantized by our own decoder of its NVFP4/FP8
tensors (:func:`nemotron.runtime.quantization.quantize.dequantized_load`): its weights as deployed, its activations in
FP32 here — the activation/KV quantizers of the deployed model are not applied (``quantize``'s own summary measures
those).

Why not lm-evaluation-harness: its GSM8K task scores with its own regular-expression filters and exact match, not
NeMo RL's answer check the RL stages reward with, and its perplexity tasks read text datasets from the hub, not the
Megatron ``.bin/.idx`` test split our pretraining used; both would need our own code inside its task system, so the
loop is ours (tens of lines, :mod:`nemotron.runtime.rl.rl_data`).

Results: ``<eval.output_dir>/<label>/eval.json`` per checkpoint (checkpoint, the artifact versions of the inputs,
metrics, seed, timings, the responses) and ``<eval.output_dir>/eval.json`` with all of them; the run records the
``eval-results`` artifact (that folder). :func:`compare` is ``eval --compare A B``.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.runtime.common.settings import SettingsError, _int, config_path, get

RESULTS = "eval.json"
#: The metrics of an eval.json, in table order: (key, label, format, higher is better).
METRICS = (("perplexity", "held-out perplexity", ".3f", False), ("nll_per_token", "held-out NLL (nats/token)", ".4f", False),
           ("gsm8k_accuracy", "GSM8K accuracy", ".3f", True))


@dataclass(frozen=True)
class EvalSettings:
    checkpoints: dict[str, Path]
    tokenizer: Path | None
    output_dir: Path
    model_name: str
    ppl_data: Path | None
    ppl_split: str
    ppl_samples: int
    ppl_seq_length: int
    gsm8k_data: Path | None
    gsm8k_samples: int
    gsm8k_max_new_tokens: int
    gsm8k_batch: int
    chat_prompt: str | None
    chat_max_new_tokens: int
    seed: int
    cpus: int | None
    raw: dict = field(default_factory=dict, repr=False)


def read(cfg: dict, *, unresolved_ok: bool = False) -> EvalSettings:
    """The settings of a local eval run.

    Raises:
        SettingsError: a missing or impossible value, naming the key.
    """
    def path(key: str) -> Path | None:
        value = get(cfg, key)
        if unresolved_ok and value not in (None, "") and "${" in str(value):
            return Path(str(value))
        return config_path(value, key)

    raw = get(cfg, "eval.checkpoints")
    if not isinstance(raw, dict) or not raw:
        raise SettingsError("eval.checkpoints: set at least one label: checkpoint folder (e.g. "
                            "eval.checkpoints.mopd=${art:mopd-checkpoint,path})")
    checkpoints = {}
    for label, value in raw.items():
        if value in (None, ""):
            continue
        p = path(f"eval.checkpoints.{label}")
        assert p is not None
        checkpoints[str(label)] = p
    if not checkpoints:
        raise SettingsError("eval.checkpoints: every entry is empty; set one to a checkpoint folder")
    mismatch = quantized_pair_problem(checkpoints)
    if mismatch:
        raise SettingsError(mismatch)
    out = path("eval.output_dir")
    if out is None:
        raise SettingsError("eval.output_dir is not set: where eval.json goes")
    ppl = path("eval.perplexity.data")
    gsm = path("eval.gsm8k.data")
    if ppl is None and gsm is None:
        raise SettingsError("eval.perplexity.data and eval.gsm8k.data are both unset: nothing to measure")
    cpus = get(cfg, "run.env.cpus")
    return EvalSettings(
        checkpoints=checkpoints, tokenizer=path("eval.tokenizer"), output_dir=out,
        model_name=str(get(cfg, "model.name", "small")),
        ppl_data=ppl, ppl_split=str(get(cfg, "eval.perplexity.split", "test")),
        ppl_samples=_int(cfg, "eval.perplexity.samples", 16, minimum=1),
        ppl_seq_length=_int(cfg, "eval.perplexity.seq_length", 256, minimum=2),
        gsm8k_data=gsm, gsm8k_samples=_int(cfg, "eval.gsm8k.samples", 16, minimum=1),
        gsm8k_max_new_tokens=_int(cfg, "eval.gsm8k.max_new_tokens", 64, minimum=1),
        gsm8k_batch=_int(cfg, "eval.gsm8k.batch_size", 8, minimum=1),
        chat_prompt=get(cfg, "eval.chat.prompt"), chat_max_new_tokens=_int(cfg, "eval.chat.max_new_tokens", 48, minimum=1),
        seed=_int(cfg, "rng.seed", 1234), cpus=None if cpus is None else _int(cfg, "run.env.cpus", minimum=1), raw=cfg)


#: The labels whose results read as one model before (``bf16``) and after (``nvfp4``) quantization.
PAIR = ("bf16", "nvfp4")


def quantized_pair_problem(checkpoints: dict[str, Path]) -> str | None:
    """Why ``eval.checkpoints.bf16`` is not the model ``eval.checkpoints.nvfp4`` was quantized from (None when it is,
    or when that cannot be told yet: either label missing, the export not written yet, as in a pipe's dry run, or a
    ``summary.json`` without a folder as ``source``). The export's ``summary.json`` names its ``source`` (the
    weights folder ``quantize -c local`` loaded); ``bf16`` matches it when it is that folder or holds it (a run
    folder whose newest checkpoint was taken). Stdlib only (the dry run calls it)."""
    bf16, nvfp4 = (checkpoints.get(label) for label in PAIR)
    if bf16 is None or nvfp4 is None or "${" in str(bf16) or "${" in str(nvfp4):
        return None
    try:
        source = json.loads((Path(nvfp4) / "summary.json").read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(source, str) or not source.startswith("/"):
        return None  # "built from the catalogue (...)": no folder to compare
    src, mine = Path(source).resolve(), Path(bf16).resolve()
    if src == mine or mine in src.parents:
        return None
    return (f"eval.checkpoints.bf16={str(bf16)!r} is not the model eval.checkpoints.nvfp4={str(nvfp4)!r} was "
            f"quantized from ({source}, its summary.json): the bf16/nvfp4 deltas would compare two different models; "
            f"set eval.checkpoints.bf16={source} (or give the other checkpoint another label)")


def _say(msg: str) -> None:
    print(f"[local] {msg}", flush=True)


def artifact_of(path: Path) -> str | None:
    """``"<artifact> v<N>"`` of the newest recorded artifact whose ``path`` (or a ``*_path`` field) is ``path``, from
    the artifact store of ``$NEMOTRON_HOME`` (:func:`nemotron.config.artifacts.version_of`); None when none is."""
    from nemotron.config import artifacts

    return artifacts.version_of(path)


def _quantized(folder: Path) -> bool:
    return (folder / "hf_quant_config.json").is_file()


def _load(spec: Any, folder: Path, work: Path) -> tuple[Any, str]:
    import torch

    from nemotron.runtime.common import model as modelmod

    if _quantized(folder):
        from nemotron.runtime.quantization.quantize import dequantized_load

        return dequantized_load(folder, work, torch.float32), "quantized export, de-quantized weights (FP32 activations)"
    return modelmod.load(spec, folder).eval(), "Hugging Face checkpoint (FP32)"


def _tokenizer_for(s: EvalSettings, folder: Path) -> Path:
    from nemotron.runtime.rl.rl_data import find_tokenizer

    cands = [folder]
    summary = folder / "summary.json"  # a quantized export names its source
    if summary.is_file():
        try:
            src = json.loads(summary.read_text(encoding="utf-8")).get("source")
            if src:
                cands.append(Path(str(src)))
        except (OSError, ValueError):
            pass
    last: Exception | None = None
    for c in cands:
        try:
            return find_tokenizer(c, s.tokenizer, key="eval.tokenizer")
        except Exception as exc:  # noqa: BLE001 - try the next candidate; the last error is the message
            last = exc
    assert last is not None
    raise last


def perplexity(model: Any, samples: Any) -> tuple[float, float, int]:
    """``(perplexity, mean NLL in nats/token, tokens)`` of ``model`` on ``samples`` (``[n, L + 1]`` int64 ids)."""
    import torch
    import torch.nn.functional as F

    nll, n = 0.0, 0
    device = next(model.parameters()).device
    with torch.no_grad():
        for row in samples:
            x, y = row[:-1].unsqueeze(0).to(device), row[1:].to(device)
            logits = model(input_ids=x).logits[0].float()
            nll += float(F.cross_entropy(logits, y, reduction="sum"))
            n += y.numel()
    return math.exp(nll / n), nll / n, n


def _ppl_samples(s: EvalSettings, vocab: int) -> tuple[Any, str]:
    import numpy as np
    import torch

    from nemotron.runtime.megatron.pretrain_data import BlendedSamples, DataError, max_token_id, read_blend

    assert s.ppl_data is not None
    blend = read_blend(s.ppl_data)
    if s.ppl_split not in blend:
        raise DataError(f"eval.perplexity.split={s.ppl_split!r}: {s.ppl_data} has the splits {', '.join(blend)}")
    if max_token_id(blend[s.ppl_split]) >= vocab:
        raise DataError(f"{s.ppl_data}: token ids do not fit the model's vocabulary of {vocab:,}")
    held = BlendedSamples(blend[s.ppl_split], s.ppl_seq_length, s.ppl_samples, s.seed, shuffle=False)
    return torch.from_numpy(np.stack([held.sample(i) for i in range(len(held))])), s.ppl_split


def run(s: EvalSettings, spec: Any = None) -> int:
    """Evaluate every checkpoint of ``s``; returns 0 (the results are in ``eval.json``).

    Raises:
        DataError, ModelError, RLDataError, SettingsError: unusable inputs (one line from the entry).
    """
    import torch

    from nemotron.config import catalogue
    from nemotron.config import artifacts as arts
    from nemotron.runtime.common.settings import thread_count
    from nemotron.runtime.rl.rl_data import accuracy, generate, load_tokenizer, read_rows

    torch.set_num_threads(thread_count(s.cpus))
    torch.manual_seed(s.seed)
    import transformers

    transformers.logging.set_verbosity_error()
    spec = spec or catalogue.get(s.model_name)
    s.output_dir.mkdir(parents=True, exist_ok=True)
    samples, split = _ppl_samples(s, spec.vocab_size) if s.ppl_data is not None else (None, None)
    rows = read_rows(s.gsm8k_data, s.gsm8k_samples) if s.gsm8k_data is not None else []
    inputs = {"perplexity_data": str(s.ppl_data) if s.ppl_data else None,
              "perplexity_data_artifact": artifact_of(s.ppl_data) if s.ppl_data else None,
              "gsm8k_data": str(s.gsm8k_data) if s.gsm8k_data else None,
              "gsm8k_data_artifact": artifact_of(s.gsm8k_data) if s.gsm8k_data else None}
    results: dict[str, Any] = {}
    for label, folder in s.checkpoints.items():
        t0 = time.perf_counter()
        tok_dir = _tokenizer_for(s, folder)
        tokenizer = load_tokenizer(tok_dir)
        model, how = _load(spec, folder, s.output_dir / ".work" / label)
        _say(f"{label}: {folder} ({how}); tokenizer {tok_dir}")
        rec: dict[str, Any] = {"label": label, "checkpoint": str(folder), "checkpoint_artifact": artifact_of(folder),
                               "loaded_as": how, "tokenizer": str(tok_dir), "seed": s.seed, **inputs, "metrics": {}}
        if samples is not None:
            ppl, nll, n = perplexity(model, samples)
            rec["metrics"].update(perplexity=ppl, nll_per_token=nll, perplexity_tokens=n, perplexity_split=split)
            _say(f"{label}: held-out perplexity {ppl:.3f} ({nll:.4f} nats/token over {n:,} tokens of the {split} split)")
        if rows:
            acc, recs = accuracy(model, tokenizer, rows, None, None, s.gsm8k_max_new_tokens, 0.0,
                                 batch_size=s.gsm8k_batch, seed=s.seed)
            rec["metrics"].update(gsm8k_accuracy=acc, gsm8k_samples=len(rows))
            rec["gsm8k_responses"] = recs
            _say(f"{label}: GSM8K accuracy {acc:.3f} on {len(rows)} held-out problems (NeMo RL's math check, greedy)")
        if s.chat_prompt:
            msgs = [{"role": "user", "content": str(s.chat_prompt)}]
            text = (tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
                    if getattr(tokenizer, "chat_template", None) else str(s.chat_prompt) + "\n")
            reply = generate(model, tokenizer, [text], s.chat_max_new_tokens, 0.0, batch_size=1)[0]
            rec["chat_sample"] = {"prompt": s.chat_prompt, "reply": reply}
            _say(f"{label}: chat sample: {s.chat_prompt!r} -> {reply[:160]!r}")
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        folder_out = s.output_dir / label
        folder_out.mkdir(parents=True, exist_ok=True)
        _write_json(folder_out / RESULTS, rec)
        results[label] = rec
        del model
    _write_json(s.output_dir / RESULTS, {"checkpoints": results, "seed": s.seed,
                                         "versions": {"torch": torch.__version__,
                                                      "transformers": transformers.__version__}})
    arts.write_outputs({"eval-results": {"path": str(s.output_dir), "results": str(s.output_dir / RESULTS),
                                         "labels": ",".join(results)}})
    labels = list(results)
    if len(labels) >= 2:
        print_compare(results[labels[0]], results[labels[-1]])
    _say(f"done: {len(results)} checkpoint(s); results in {s.output_dir / RESULTS}")
    return 0


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------------- compare


class CompareError(ValueError):
    """An ``eval --compare`` argument that names no readable eval.json."""


def load_results(ref: str) -> list[dict[str, Any]]:
    """The per-checkpoint records ``ref`` names: an ``eval.json`` file, a folder holding one, ``eval-results[:vN]``
    (the artifact), or ``<any of those>#<label>`` for one checkpoint of a multi-checkpoint run.

    Raises:
        CompareError: nothing readable there (the message names ``ref``).
    """
    base, _, label = ref.partition("#")
    path = Path(base).expanduser()
    if not path.exists() and base.startswith("eval-results"):
        from nemotron.config import artifacts

        name, version = artifacts.parse_ref(base)
        rec = artifacts.lookup(name, version)
        if rec is None:
            raise CompareError(f"{ref}: no such artifact (run `nemotron ultra3 eval` first)")
        path = Path(str(rec["path"]))
    if path.is_dir():
        path = path / RESULTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CompareError(f"{ref}: cannot read {path} ({exc.strerror or exc})") from None
    except ValueError:
        raise CompareError(f"{ref}: {path} is not JSON") from None
    recs = list(data["checkpoints"].values()) if isinstance(data.get("checkpoints"), dict) else [data]
    if label:
        recs = [r for r in recs if r.get("label") == label]
        if not recs:
            raise CompareError(f"{ref}: no checkpoint labelled {label!r} in {path}")
    if not all(isinstance(r.get("metrics"), dict) for r in recs):
        raise CompareError(f"{ref}: {path} has no metrics (not an eval.json)")
    return recs


def compare_rows(a: dict[str, Any], b: dict[str, Any]) -> list[list[str]]:
    """``[metric, A, B, B - A, better]`` for each metric both records have."""
    rows = []
    for key, label, fmt, higher in METRICS:
        x, y = a["metrics"].get(key), b["metrics"].get(key)
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            continue
        d = y - x
        better = "same" if d == 0 else ("B" if (d > 0) == higher else "A")
        rows.append([label, f"{x:{fmt}}", f"{y:{fmt}}", f"{d:+{fmt}}", better])
    return rows


def print_compare(a: dict[str, Any], b: dict[str, Any]) -> None:
    """The table of :func:`compare_rows` on stdout, A and B named above it."""
    from nemotron import report

    report.out(f"A = {a.get('label')} ({a.get('checkpoint')})\nB = {b.get('label')} ({b.get('checkpoint')})",
               plain=True)
    report.table(None, ["metric", "A", "B", "B - A", "better"], compare_rows(a, b))


def compare(a_ref: str, b_ref: str) -> int:
    """``nemotron ultra3 eval --compare A B``: the table of B - A per metric (one pair per checkpoint label when both
    name several). Returns 0; raises :class:`CompareError` (exit 2 by the CLI)."""
    a, b = load_results(a_ref), load_results(b_ref)
    if len(a) == 1 or len(b) == 1:
        pairs = [(x, y) for x in a[:1] for y in b[:1]] if len(a) == len(b) == 1 else \
            ([(a[0], y) for y in b] if len(a) == 1 else [(x, b[0]) for x in a])
    else:
        by = {r.get("label"): r for r in b}
        pairs = [(x, by[x.get("label")]) for x in a if x.get("label") in by]
        if not pairs:
            raise CompareError(f"{a_ref} and {b_ref} share no checkpoint label; name one with #LABEL")
    for x, y in pairs:
        rows = compare_rows(x, y)
        if not rows:
            raise CompareError(f"{a_ref} vs {b_ref}: no metric in common")
        print_compare(x, y)
    return 0


__all__ = ["CompareError", "EvalSettings", "METRICS", "artifact_of", "compare", "compare_rows", "load_results",
           "perplexity", "print_compare", "read", "run"]


def main(cfg: dict[str, Any]) -> int:
    """``backend: local`` of ``ultra3 eval`` (called by :func:`nemotron.runtime.dispatch.run`): the settings (exit 1
    naming the key), then the run (:func:`nemotron.runtime.megatron.entry.run_heavy`: one line per unusable input, exit
    1)."""
    import sys as _sys

    from nemotron.runtime.megatron.entry import LOCAL_NEEDS, run_heavy

    try:
        s = read(cfg)
        for label, p in s.checkpoints.items():
            if not p.exists():
                raise SettingsError(f"eval.checkpoints.{label}={p}: no such folder")
        for key, p in (("eval.perplexity.data", s.ppl_data), ("eval.gsm8k.data", s.gsm8k_data)):
            if p is not None and not p.is_file():
                raise SettingsError(f"{key}={p}: no such file")
    except SettingsError as exc:
        print(f"ultra3 eval: {exc}", file=_sys.stderr)
        return 1
    from nemotron.runtime.rl.rl_data import RLDataError

    return run_heavy("ultra3 eval", s.cpus, *LOCAL_NEEDS["eval"], lambda: run(s), errors=(RLDataError,))
