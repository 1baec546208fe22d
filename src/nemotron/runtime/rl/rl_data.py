"""What the local RL stages and ``eval`` share: the RL JSONL rows, the prompt as NeMo RL renders it, the
tokenizer of a checkpoint, batched generation, and the GSM8K accuracy with the math check.

Rows are the lines ``data prep rl`` writes (``messages[0].content`` the problem, ``messages[1].content`` the
ground truth, ``source`` = ``<file>:<line>``; :mod:`nemotron.data.rl`). The prompt is built as NeMo RL's
``math_hf_data_processor`` builds it (nemo_rl/data/processors.py @ 7ea279a): an optional system message from
``data.default.system_prompt_file``, the user message ``prompt.format(problem)`` when
``data.default.prompt_file`` is set (else the problem itself), then the tokenizer's chat template with the
generation prompt; a tokenizer without a chat template gets the plain text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class RLDataError(ValueError):
    """An RL JSONL line, prompt file or tokenizer that cannot be used; ``str()`` names the file and line."""


@dataclass(frozen=True)
class Row:
    """One RL prompt: ``problem``, ``answer`` (the ground truth text), ``source`` (``<file>:<line>``)."""

    problem: str
    answer: str
    source: str


def read_rows(path: Path, limit: int | None = None) -> list[Row]:
    """The rows of an RL JSONL file (all, or the first ``limit``).

    Raises:
        RLDataError: unreadable file, a line that is not JSON or lacks ``messages[0..1].content`` (file:line).
    """
    rows: list[Row] = []
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise RLDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with fh:
        for n, line in enumerate(fh, 1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                msgs = obj["messages"]
                problem, answer = str(msgs[0]["content"]), str(msgs[1]["content"])
            except (ValueError, KeyError, IndexError, TypeError):
                raise RLDataError(f"{path}:{n}: not an RL line (expected messages[0].content = problem, "
                                  "messages[1].content = answer; the output of `data prep rl`)") from None
            rows.append(Row(problem, answer, str(obj.get("source") or f"{path.name}:{n}")))
    if not rows:
        raise RLDataError(f"{path}: no rows")
    return rows


def prompt_template(prompt_file: Path | None, system_prompt_file: Path | None) -> tuple[str | None, str | None]:
    """``(user prompt with one {} for the problem, system prompt)`` from NeMo RL's two keys (None: unset).

    Raises:
        RLDataError: a file that cannot be read, or a prompt without ``{}``.
    """
    out: list[str | None] = []
    for key, path in (("data.default.prompt_file", prompt_file), ("data.default.system_prompt_file", system_prompt_file)):
        if path is None:
            out.append(None)
            continue
        try:
            out.append(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise RLDataError(f"{key}={path}: cannot read ({exc.strerror or exc})") from None
    if out[0] is not None and "{}" not in out[0]:
        raise RLDataError(f"data.default.prompt_file={prompt_file}: has no '{{}}' where the problem goes")
    return out[0], out[1]


def messages(row: Row, prompt: str | None, system: str | None) -> list[dict[str, str]]:
    """The chat messages of ``row`` as NeMo RL's math processor builds them."""
    out = [{"role": "system", "content": system}] if system else []
    out.append({"role": "user", "content": prompt.format(row.problem) if prompt else row.problem})
    return out


def render(tokenizer: Any, row: Row, prompt: str | None, system: str | None) -> str:
    """The prompt text the policy continues: the chat template with the generation prompt, or plain text."""
    msgs = messages(row, prompt, system)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in msgs) + "\n"


_TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json")


def _has_tokenizer(folder: Path) -> bool:
    return folder.is_dir() and any((folder / m).is_file() for m in _TOKENIZER_MARKERS)


def find_tokenizer(model_path: Path, explicit: Path | None = None, key: str = "policy.tokenizer.name") -> Path:
    """The tokenizer folder of a checkpoint: ``explicit`` when it holds one; else the checkpoint folder (or the
    run folder above a ``checkpoint-<step>``); else the ``tokenizer/`` of the data the run trained on, found
    through its ``lineage.json`` (:mod:`nemotron.runtime.megatron.lineage`: a local pretrain/SFT run records its data;
    the data version folder of ``data prep`` carries the tokenizer with its chat template).

    Raises:
        RLDataError: nothing found (names ``key``).
    """
    cands = [p for p in (explicit, model_path, model_path.parent) if p is not None]
    for c in cands:
        if _has_tokenizer(Path(c)):
            return Path(c)
    for c in (model_path, model_path.parent, model_path.parent.parent):
        lin = Path(c) / "lineage.json"
        if not lin.is_file():
            continue
        try:
            data = Path(str(json.loads(lin.read_text(encoding="utf-8")).get("data") or ""))
        except (OSError, ValueError):
            continue
        for up in (data, *data.parents[:4]):
            if _has_tokenizer(up / "tokenizer"):
                return up / "tokenizer"
    raise RLDataError(f"{key}={explicit or model_path}: no tokenizer there (tokenizer.json), nor in the data its "
                      "lineage.json names; set it to the tokenizer/ folder of the data prep output")


def load_tokenizer(folder: Path) -> Any:
    """``AutoTokenizer`` of ``folder``, left-padded (generation), pad = EOS when it has no pad token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def generate(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, temperature: float,
             top_p: float = 1.0, top_k: int | None = None, batch_size: int = 8, seed: int | None = None,
             max_prompt_tokens: int | None = None) -> list[str]:
    """Completions of ``prompts`` (text, special tokens dropped), ``batch_size`` at a time with the KV/SSM cache.
    ``temperature`` 0: greedy. ``max_prompt_tokens``: prompts are cut to their last that many tokens."""
    import torch

    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    out: list[str] = []
    was_training = model.training
    model.eval()
    try:
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(prompts[i:i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            if max_prompt_tokens:
                enc = {k: v[:, -max_prompt_tokens:] for k, v in enc.items()}
            enc = {k: v.to(device) for k, v in enc.items()}
            kw: dict[str, Any] = dict(max_new_tokens=max_new_tokens, use_cache=True,
                                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            if temperature > 0:
                kw.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k or 0)
            else:
                kw.update(do_sample=False)
            with torch.no_grad():
                ids = model.generate(**enc, **kw)
            out.extend(tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True))
    finally:
        model.train(was_training)
    return out


def accuracy(model: Any, tokenizer: Any, rows: list[Row], prompt: str | None, system: str | None,
             max_new_tokens: int, temperature: float = 0.0, batch_size: int = 8, seed: int | None = None,
             max_prompt_tokens: int | None = None) -> tuple[float, list[dict[str, Any]]]:
    """``(mean reward, per-row records)`` of one generation per row, scored by NeMo RL's math check
    (:func:`nemotron.runtime.rl.rewards.math_reward`). Records: ``source``, ``answer``, ``response``, ``reward``."""
    from nemotron.runtime.rl.rewards import math_reward

    texts = [render(tokenizer, r, prompt, system) for r in rows]
    responses = generate(model, tokenizer, texts, max_new_tokens, temperature, batch_size=batch_size, seed=seed,
                         max_prompt_tokens=max_prompt_tokens)
    recs = [{"source": r.source, "answer": r.answer, "response": resp, "reward": math_reward(resp, r.answer)}
            for r, resp in zip(rows, responses)]
    return (sum(x["reward"] for x in recs) / len(recs) if recs else 0.0), recs


__all__ = ["RLDataError", "Row", "accuracy", "find_tokenizer", "generate", "load_tokenizer", "messages",
           "prompt_template", "read_rows", "render"]
