"""``data inspect PATH``: training data as the trainer reads it.

Three kinds of input, told apart by the path:

* **packed SFT Parquet** (``*.parquet`` with ``input_ids``/``loss_mask``/``seq_start_id``, or a data prep SFT output
  folder): per pack its documents (the ``seq_start_id`` boundaries), the learned tokens (``loss_mask`` is
  label-aligned: ``loss_mask[t] = 1`` learns the token at ``t + 1``, data/packing.py), the fill, and flags: a pack
  with no learned token, a trailing pad run (EOS padding after the last document), a document cut at the pack end
  (its last token is not EOS).
* **pretrain** ``blend.json`` (or a folder with one, or one ``.bin/.idx`` prefix): documents and tokens per
  prefix, the achieved token share of each against its blend weight; with ``step`` the documents of that global
  batch (:mod:`nemotron.data.megatron_batch`).
* **RL JSONL** (NeMo RL's math-environment lines ``{"messages": [user, assistant]}``): prompts and reference
  answers, and the answer check run on the reference answers (each answer parsed by ``math-verify``, the checker
  NeMo RL's math environment uses, and verified against itself: an answer the checker cannot parse would never
  reward a correct response).

Units: tokens and documents are counts; shares are fractions of 1.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nemotron.config.artifacts import producer_command
from nemotron.data import megatron_batch
from nemotron.errors import ConfigError, UsageError


#: ``--split`` names -> the split; the file names data prep writes: ``data/training_<N>.idx.parquet`` and
#: ``data/validation_<N>.idx.parquet`` (data prep sft), ``train.jsonl`` and ``validation.jsonl`` (data prep rl).
SPLITS = {"train": "train", "training": "train", "validation": "validation", "val": "validation",
          "valid": "validation"}
_SPLIT_GLOBS = {"train": ("*train*",), "validation": ("*validation*", "*valid*", "*val*")}


def _split_name(split: str | None) -> str | None:
    """The split ``--split NAME`` names (``train`` | ``validation``), or None when not given.

    Raises:
        UsageError: a name that is no split (the valid names listed).
    """
    if split is None:
        return None
    name = SPLITS.get(split.strip().lower())
    if name is None:
        raise UsageError(f"--split {split!r}: not a split; valid: train, validation")
    return name


def _split_file(folder: Path, split: str, suffix: str, kind: str) -> Path:
    """The ``split`` file (``suffix``: ``.parquet`` | ``.jsonl``) of a data prep output ``folder``.

    Raises:
        ConfigError: the folder has no file of that split (the files it has named).
    """
    for pattern in _SPLIT_GLOBS[split]:
        found = sorted(f for f in folder.rglob(pattern + suffix)
                       if split != "train" or not any(v in f.name for v in ("validation", "valid")))
        if found:
            return found[0]
    have = sorted(str(f.relative_to(folder)) for f in folder.rglob("*" + suffix))
    raise ConfigError(f"{folder}: no {split} file (*{split}*{suffix}) of this {kind} output; it has: "
                      f"{', '.join(have) or 'none'}",
                      "data prep writes no validation set when too few records are held out (its run says so); "
                      "inspect --split train" if split == "validation" else "give the file itself")


def kind_of(path: Path, split: str | None = None) -> tuple[str, Path]:
    """(``"sft"`` | ``"pretrain"`` | ``"rl"``, the file) for ``path``; ``split`` (``train`` | ``validation``, or
    their other spellings in :data:`SPLITS`) picks the file of a packed SFT or RL output folder (default: the
    training file).

    Raises:
        ConfigError: the path does not exist or holds none of the three; the folder has no file of ``split``.
        UsageError: ``split`` is no split name, or given for a single file or a pretrain blend (which reports
            every split).
    """
    split = _split_name(split)
    if split is not None and path.exists() and not path.is_dir():
        raise UsageError(f"--split {split} picks a file of a data prep output folder; {path} is a file",
                         "give the folder, or the file of the split itself")
    if not path.exists() and Path(str(path) + ".idx").is_file():
        return "pretrain", path
    if not path.exists():
        hint = "give a packed .parquet, a blend.json, a .bin/.idx prefix or an RL .jsonl"
        # a data prep's default output folder (output/ultra3/sft-data/tiny) not made yet: name the command that makes it
        made = producer_command(path.parent.name, path.name) if path.parent.name.endswith("-data") else None
        if made:
            hint = f"make it first: {made}; or {hint}"
        raise ConfigError(f"{path}: does not exist", hint)
    if path.is_dir():
        for name, kind in (("blend.json", "pretrain"),):
            if (path / name).is_file():
                if split is not None:
                    raise UsageError(f"--split {split}: {path} is a pretrain output; its report shows every split "
                                     "of blend.json", "leave out --split")
                return kind, path / name
        for suffix, kind in ((".parquet", "sft"), (".jsonl", "rl")):
            if not any(path.rglob("*" + suffix)):
                continue
            if split is not None:
                return kind, _split_file(path, split, suffix, kind)
            return kind, (sorted(path.rglob("*train*" + suffix)) or sorted(path.rglob("*" + suffix)))[0]
        raise ConfigError(f"{path}: no blend.json, .parquet or .jsonl inside", "give the file itself")
    if path.suffix == ".parquet":
        return "sft", path
    if path.suffix in (".bin", ".idx"):
        return "pretrain", path.with_suffix("")
    if path.suffix == ".json":
        return "pretrain", path
    if path.suffix == ".jsonl":
        return "rl", path
    raise ConfigError(f"{path}: not a .parquet, blend.json, .bin/.idx or .jsonl", "give one of those")


# ------------------------------------------------------------------------------------------------ SFT
def _tokenizer_near(path: Path) -> Any:
    """The data prep output's tokenizer (``<output>/tokenizer``, recorded in its manifest), or None."""
    for folder in [path.parent, *path.parents][:5]:
        tok = folder / "tokenizer"
        if (tok / "tokenizer.json").is_file():
            try:
                from tokenizers import Tokenizer

                return Tokenizer.from_file(str(tok / "tokenizer.json"))
            except Exception:
                return None
    return None


def _manifest_near(path: Path) -> dict[str, Any]:
    for folder in [path.parent, *path.parents][:5]:
        m = folder / "manifest.json"
        if m.is_file():
            try:
                data = json.loads(m.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data
    return {}


def sft(path: Path, count: int, colour: bool = False) -> dict[str, Any]:
    """Summary and ``count`` packs of a packed SFT Parquet file.

    Each shown document's ``text`` shows a control-token string that a message holds as text (encoded as ordinary
    tokens, not the control token: data prep sft's ``policies.control_token_text: text``) as :data:`TEXT_CONTROL`,
    ``{text:<|im_end|>}``, and counts them (``control_text``); the template's own control tokens (one id each)
    stay as they are.

    Flags: ``no_learned_token`` (a pack that trains on nothing), ``pad_run`` (a document ending in pad tokens: the
    manifest's ``pad_id``, masked; data prep pads a sub-sequence to ``pad_to_multiple``), ``document_cut`` (a document
    whose last token is learned and is not the token the file's documents end with: an answer cut off).

    Raises:
        ConfigError: not a Parquet file, a Parquet file without the three columns (the missing ones named, not
            pyarrow's schema dump), or one without rows.
    """
    from collections import Counter

    import pyarrow.parquet as pq

    columns = ["input_ids", "loss_mask", "seq_start_id"]
    hint = "data prep sft writes them: input_ids, loss_mask, seq_start_id"
    try:
        names = pq.read_schema(path).names
    except Exception as exc:  # not Parquet at all: pyarrow's first line says why
        raise ConfigError(f"{path}: not a Parquet file ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
                          hint) from None
    missing = [c for c in columns if c not in names]
    if missing:
        raise ConfigError(f"{path}: not a packed SFT Parquet file: no column {', '.join(missing)} (it has "
                          f"{', '.join(names[:8]) or 'none'}{' ...' if len(names) > 8 else ''})", hint)
    try:
        table = pq.read_table(path, columns=columns)
    except Exception as exc:
        raise ConfigError(f"{path}: not a packed SFT Parquet file ({str(exc).splitlines()[0]})", hint) from None
    if table.num_rows == 0:
        raise ConfigError(f"{path}: no packs (0 rows)", "an empty file: re-run data prep sft, or give another file")
    ids_col, mask_col, start_col = (table.column(c).to_pylist() for c in ("input_ids", "loss_mask", "seq_start_id"))
    tok = _tokenizer_near(path)
    manifest = _manifest_near(path)
    pad_id = manifest.get("pad_id") if isinstance(manifest.get("pad_id"), int) else None
    size = int(manifest.get("pack_size") or max((len(x) for x in ids_col), default=0))

    def docs_of(ids: list[int], starts: list[int]) -> list[tuple[int, int, int]]:
        """(start, end without padding, end) of each document."""
        from itertools import pairwise

        out = []
        for a, b in pairwise([*starts, len(ids)]):
            e = b
            while pad_id is not None and e > a + 1 and ids[e - 1] == pad_id:  # data prep's documents end in <|im_end|>\n
                e -= 1
            out.append((a, e, b))
        return out

    controls = _controls(tok)
    last_tokens = Counter(ids[e - 1] for ids, starts in zip(ids_col, start_col, strict=True)
                          for _, e, _ in docs_of(ids, starts) if e > 0)
    end_token = last_tokens.most_common(1)[0][0] if last_tokens else None
    packs, flags_total = [], {"no_learned_token": 0, "pad_run": 0, "document_cut": 0}
    learned_total = tokens_total = 0
    for n, (ids, mask, starts) in enumerate(zip(ids_col, mask_col, start_col, strict=True)):
        learned = sum(int(m) for m in mask)
        docs = docs_of(ids, starts)
        pad = sum(b - e for _, e, b in docs)
        cut = sum(1 for a, e, _ in docs if e - a > 1 and ids[e - 1] != end_token and mask[e - 2])
        flags = [f for f, on in (("no_learned_token", learned == 0), ("pad_run", pad > 0), ("document_cut", cut > 0)) if on]
        for f in flags:
            flags_total[f] += 1
        learned_total += learned
        tokens_total += len(ids)
        if n < count:
            shown = []
            for a, _, b in docs:
                # position t is learned when mask[t - 1] = 1 (the stored mask is label-aligned)
                marks = [bool(mask[t - 1]) if t > a else False for t in range(a, b)]
                counted = [0]
                text = _marked(ids[a:b], marks, tok, colour, controls, counted)
                shown.append({"start": a, "end": b, "tokens": b - a, "learned": sum(marks), "text": text,
                              "control_text": counted[0]})
            packs.append({"index": n, "tokens": len(ids), "fill": len(ids) / size if size else 0.0,
                          "learned": learned, "documents": shown, "pad_run": pad, "flags": flags})
    return {"kind": "sft", "path": str(path), "packs": len(ids_col), "pack_size": size, "tokens": tokens_total,
            "learned_tokens": learned_total, "fill": tokens_total / (size * len(ids_col)) if size and ids_col else 0.0,
            "flags": flags_total, "pad_id": pad_id, "decoded": tok is not None, "shown": packs}


#: How a control-token string that a message holds as text (encoded as ordinary tokens, never the control token:
#: data prep sft's ``policies.control_token_text: text``) is shown, so it cannot be taken for the template's own
#: control token (one id, shown as it is): ``{text:<|im_end|>}``.
TEXT_CONTROL = "{{text:{}}}"


def _controls(tok: Any) -> tuple[set[int], Any]:
    """The ids of ``tok``'s added tokens (each the control token itself) and a :class:`nemotron.data.chat.ControlText`
    of their strings (to find them written as text); ``(set(), None)`` without a tokenizer."""
    if tok is None:
        return set(), None
    from nemotron.data import chat
    from nemotron.data import tokenizer as tk

    added = tk.added_tokens(tok)
    return set(added.values()), chat.ControlText(added)


def _decoded(run: list[int], tok: Any, special: set[int], control: Any, colour: bool) -> tuple[str, int]:
    """``run`` decoded, each control-token string found in text decoded from ordinary tokens shown as
    :data:`TEXT_CONTROL` (yellow on a terminal), the added tokens themselves as they are; and how many were marked.
    The text between two added tokens is decoded as one piece (an added token is where the encoder cut it)."""
    parts: list[str] = []
    marked = 0
    chunk: list[int] = []

    def text_of(ids: list[int]) -> None:
        nonlocal marked
        if not ids:
            return
        text = tok.decode(ids, skip_special_tokens=False)
        pieces = control.split(text) if control is not None else [text]
        for i, piece in enumerate(pieces):
            if i % 2:  # a control-token string inside text: ordinary tokens, not the control token
                marked += 1
                shown = TEXT_CONTROL.format(piece)
                parts.append(f"\x1b[33m{shown}\x1b[39m" if colour else shown)
            else:
                parts.append(piece)
        ids.clear()

    for t in run:
        if t in special:
            text_of(chunk)
            parts.append(tok.decode([t], skip_special_tokens=False))
        else:
            chunk.append(t)
    text_of(chunk)
    return "".join(parts), marked


def _marked(ids: list[int], learned: list[bool], tok: Any, colour: bool,
            controls: tuple[set[int], Any] | None = None, counted: list[int] | None = None) -> str:
    """The tokens as text, learned runs in ``[[...]]`` (green on a terminal), masked ones plain; a control-token
    string written as text (not the control token's own id) as :data:`TEXT_CONTROL` (``controls``: from
    :func:`_controls`, computed when not given; ``counted``: a one-item list the number marked is added to)."""
    out, run, state = [], [], None
    special, control = controls if controls is not None else _controls(tok)

    def flush() -> None:
        if not run:
            return
        if tok is not None:
            text, n = _decoded(run, tok, special, control, colour)
            if counted is not None:
                counted[0] += n
        else:
            text = " ".join(map(str, run))
        if state:
            out.append(f"\x1b[32m{text}\x1b[0m" if colour else f"[[{text}]]")
        else:
            out.append(text)
        run.clear()

    for t, on in zip(ids, learned, strict=True):
        if state is not None and on != state:
            flush()
        state = on
        run.append(t)
    flush()
    return "".join(out) if tok is not None else " ".join(out)


# ------------------------------------------------------------------------------------------------ pretrain
def pretrain(path: Path, count: int, step: int | None = None, gbs: int | None = None, seq: int | None = None,
             train_iters: int | None = None, train_samples: int | None = None, seed: int = megatron_batch.DEFAULT_SEED,
             colour: bool = False) -> dict[str, Any]:
    """Per-prefix documents and tokens, achieved shares against the blend weights, and the documents of ``step``.

    Raises:
        UsageError: ``step`` without the batch size, sequence length and run length it needs.
        ConfigError: an unreadable blend.json or index.
    """
    import numpy as np

    from nemotron.data.blend import BlendFileError, read_blend_pairs
    from nemotron.data.indexed import read_index

    if path.suffix == ".json":
        try:
            splits = read_blend_pairs(path)
        except BlendFileError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        if not any(splits.values()):
            raise ConfigError(f"{path}: not a blend.json: no split lists a prefix",
                              "expected {\"train\": [weight, prefix, ...], \"valid\": [...], ...} (data prep pretrain "
                              "writes one)")
    else:
        splits = {"train": [(1.0, path)]}
    from nemotron.data.indexed import bin_size_problem

    out: dict[str, Any] = {"kind": "pretrain", "path": str(path), "splits": {}}
    for split, pairs in splits.items():
        rows = []
        for w, prefix in pairs:
            try:
                index = read_index(prefix)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"{prefix}.idx: {exc}") from None
            size = bin_size_problem(prefix)
            if size is not None:  # Megatron-Core and our trainer refuse it; its samples would read nothing
                raise ConfigError(size, "the shard as data prep wrote it (a truncated copy or a corrupt index? copy it "
                                        "again, or run the data prep again)")
            rows.append({"prefix": str(prefix), "weight": float(w), "documents": len(index["lengths"]),
                         "tokens": int(np.asarray(index["lengths"], dtype=np.int64).sum()), "dtype": index["dtype"]})
        tokens = sum(r["tokens"] for r in rows) or 1
        wsum = sum(r["weight"] for r in rows) or 1.0
        for r in rows:
            r["token_share"] = r["tokens"] / tokens
            r["weight_share"] = r["weight"] / wsum
        out["splits"][split] = rows
        datasets: dict[str, dict[str, Any]] = {}
        for r in rows:  # a dataset is the folder of its shards (data prep writes data/<dataset>/<split>_NNNNN)
            name = Path(r["prefix"]).parent.name
            d = datasets.setdefault(name, {"dataset": name, "prefixes": 0, "documents": 0, "tokens": 0, "weight": 0.0})
            d["prefixes"] += 1
            d["documents"] += r["documents"]
            d["tokens"] += r["tokens"]
            d["weight"] += r["weight"]
        for d in datasets.values():
            d["token_share"], d["weight_share"] = d["tokens"] / tokens, d["weight"] / wsum
        out.setdefault("datasets", {})[split] = list(datasets.values())
    run_given = bool(gbs and seq and (train_iters or train_samples))
    if step is None and not run_given:
        return out
    if not run_given:
        raise UsageError("--step needs --global-batch-size, --seq-length and --train-iters (or --train-samples)",
                         "Megatron-Core's sample order depends on the run's total samples: give the run's "
                         "train.train_iters, train.global_batch_size and model.seq_length")
    total = train_samples or train_iters * gbs
    try:
        train = megatron_batch.build_train([(w, str(p)) for w, p in splits.get("train", [])], total, seq, seed=seed)
        batch = megatron_batch.global_batch(train, step, gbs) if step is not None else []
    except megatron_batch.BatchError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    # the achieved share: which fraction of the run's train samples each prefix supplies (Megatron's blending)
    counts = (np.bincount(np.asarray(train.dataset_index, dtype=np.int64)[:total], minlength=len(train.prefixes))
              if train.dataset_index is not None else np.asarray([total]))
    for r, n in zip(out["splits"]["train"], counts, strict=True):
        r["samples"], r["sample_share"] = int(n), int(n) / total
    for d in out["datasets"]["train"]:
        d["samples"] = sum(r["samples"] for r in out["splits"]["train"] if Path(r["prefix"]).parent.name == d["dataset"])
        d["sample_share"] = d["samples"] / total
    out["run"] = {"train_samples": total, "seq_length": seq, "global_batch_size": gbs, "seed": seed,
                  "epochs": {str(ds.prefix.prefix): ds.epochs for ds in train.datasets}}
    if step is None:
        return out
    tok = _tokenizer_near(path)
    samples = []
    import hashlib

    for s in batch:
        parts = [{"document": d, "offset": o, "tokens": n} for d, o, n in s["parts"]]
        text = None
        if tok is not None and len(samples) < count:
            text = tok.decode([int(t) for t in s["tokens"][:200]], skip_special_tokens=False)
        samples.append({"index": s["index"], "dataset_id": s["dataset_id"], "prefix": s["prefix"],
                        "dataset_sample": s["dataset_sample"], "documents": s["documents"], "parts": parts,
                        "sha256": hashlib.sha256(np.asarray(s["tokens"], dtype=np.int64).tobytes()).hexdigest(),
                        "preview": text})
    out["batch"] = {"step": step, "global_batch_size": gbs, "seq_length": seq, "train_samples": total, "seed": seed,
                    "first_sample": (step - 1) * gbs, "samples": samples}
    return out


# ------------------------------------------------------------------------------------------------ RL
def _checker() -> Any:
    """The answer check of NeMo RL's math environment (``math_verify_impl: hf_math_verify``): Math-Verify's
    ``math_metric`` with LaTeX extraction of the gold ``\\boxed{answer}`` and expression + LaTeX extraction of the
    response; None when math-verify is not installed (the ``inspect`` extra)."""
    try:
        import logging

        from math_verify.metric import math_metric
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig, parse
    except ImportError:
        return None
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    metric = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                         pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))

    def check(answer: str) -> dict[str, bool]:
        import sympy

        gold = "\\boxed{" + answer + "}"
        parsed = parse(gold, extraction_config=[LatexExtractionConfig()])
        numeric = bool(parsed) and isinstance(parsed[0], sympy.Number)
        wrong = str(parsed[0] + 1) if numeric else "0"

        def score(response: str) -> float:
            try:
                return float(metric([gold], [response])[0])
            except Exception:
                return 0.0

        return {"parsed": bool(parsed), "numeric": numeric,
                "rewarded": score(f"The answer is \\boxed{{{answer}}}.") == 1.0,
                "wrong_rejected": score(f"The answer is \\boxed{{{wrong}}}.") == 0.0}

    return check


def rl(path: Path, count: int) -> dict[str, Any]:
    """Prompts, reference answers and the answer check on the reference answers of an RL JSONL file: per answer
    whether the checker parses it, as a number, rewards a response that states it and rejects one that states
    another value. An answer that fails any of these is listed (``failed_lines``): it cannot reward a policy right.

    ``form`` says what the lines are: ``data-prep-rl`` (every line as data prep rl writes it: ``messages`` =
    [user, assistant] and its ``task``), or ``chat-messages`` (some line without ``task``: a chat file of single
    user/assistant exchanges, read the same way, the user turn as the prompt and the assistant turn as the
    reference answer; not a data prep rl output).

    Raises:
        ConfigError: a line that is not UTF-8, not JSON or has no user prompt and assistant answer (file and line
            named); a line whose messages are not exactly [user, assistant] (a system turn, several turns: a chat
            record, not an RL prompt); a file without any line.
    """
    check = _checker()
    shown, total, untasked = [], 0, 0
    counts = {"parsed": 0, "numeric": 0, "rewarded": 0, "wrong_rejected": 0}
    failed: list[int] = []
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{path}:{line_no}: not UTF-8 text (byte {raw[exc.start]:#04x} at column "
                                  f"{exc.start + 1}): not an RL JSONL file", "data prep rl writes them") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                msgs = obj["messages"]
                prompt = next(m["content"] for m in msgs if m.get("role") == "user")
                answer = next(m["content"] for m in msgs if m.get("role") == "assistant")
            except (ValueError, KeyError, TypeError, StopIteration, AttributeError):
                raise ConfigError(f"{path}:{line_no}: not an RL line {{\"messages\": [user, assistant]}}",
                                  "data prep rl writes them") from None
            roles = [m.get("role") if isinstance(m, dict) else None for m in msgs]
            if roles != ["user", "assistant"]:
                raise ConfigError(f"{path}:{line_no}: a chat record of {len(roles)} messages ({', '.join(map(str, roles))}), "
                                  "not a data prep rl line (one user prompt and its reference answer: "
                                  "{\"messages\": [user, assistant], \"task\": ...})",
                                  "data inspect reads data prep outputs: chat data after `nemotron ultra3 data prep "
                                  "sft` (give its output folder), RL prompts after `nemotron ultra3 data prep rl`") from None
            untasked += not isinstance(obj.get("task"), str)
            total += 1
            outcome = check(str(answer)) if check is not None else None
            if outcome is not None:
                for k in counts:
                    counts[k] += outcome[k]
                if not all(outcome.values()):
                    failed.append(line_no)
            if len(shown) < count:
                shown.append({"line": line_no, "prompt": prompt, "answer": answer, "check": outcome})
    if total == 0:
        raise ConfigError(f"{path}: no RL lines (the file is empty or blank)", "data prep rl writes them")
    return {"kind": "rl", "path": str(path), "form": "chat-messages" if untasked else "data-prep-rl",
            "untasked": untasked, "records": total, "checker": "math-verify" if check else None,
            "check": None if check is None else {**counts, "failed_lines": failed[:20], "failed": len(failed)},
            "shown": shown}


def inspect_path(path: str | os.PathLike[str], count: int = 3, **batch: Any) -> dict[str, Any]:
    """The report of :func:`kind_of`'s kind for ``path`` (``batch``: ``split``, ``step``, ``gbs``, ``seq``,
    ``train_iters``, ``train_samples``, ``seed``, ``colour``)."""
    kind, f = kind_of(Path(path), batch.pop("split", None))
    colour = bool(batch.pop("colour", False))
    if kind != "pretrain" and batch.get("step") is not None:
        raise UsageError(f"--step is for a pretrain blend.json or .bin/.idx; {f} is {kind} data")
    if batch.get("seed") is None:
        batch.pop("seed", None)
    if kind == "sft":
        return sft(f, count, colour)
    if kind == "rl":
        return rl(f, count)
    return pretrain(f, count, colour=colour, **batch)  # type: ignore[arg-type]


__all__ = ["inspect_path", "kind_of", "pretrain", "rl", "sft"]
