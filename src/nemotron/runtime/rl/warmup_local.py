"""The ``local`` backend of ``ultra3 mopd-warmup``: MOPD warmup on one machine (CPU or one GPU), transformers'
NemotronH of the catalogue, one process (:mod:`nemotron.runtime.rl.warmup` says what warmup is).

1. The teachers answer: each prompt of ``warmup.prompts_path`` (the first ``warmup.num_prompts``) goes to the teacher
   the MOPD panel routes its task to (the local MOPD runtime's routing, :func:`nemotron.runtime.rl.rl_settings.route`),
   which samples ``warmup.responses_per_prompt`` responses of up to ``warmup.max_new_tokens`` tokens
   (``warmup.temperature`` / ``top_p``; 0: greedy) with the KV/SSM cache (:func:`nemotron.runtime.rl.rl_data.generate`).
   The pairs are written to ``<warmup.data_dir>/train.jsonl`` in the form the cluster job hands NeMo RL's SFT
   (``ResponseDataset``: ``input`` / ``output``, plus ``task`` and ``teacher``).
2. The student (``policy.model_name``) is fine-tuned on them: cross-entropy on the response tokens (and the EOS
   token after each, NeMo RL's ``add_eos``) only, token-mean over each global batch of
   ``policy.train_global_batch_size`` pairs (micro-batches of ``train_micro_batch_size`` accumulated), AdamW
   (``policy.megatron_cfg.optimizer.lr`` / ``weight_decay``), constant LR; steps = min(``sft.max_num_steps``,
   ``sft.max_num_epochs`` x full batches per epoch), as NeMo RL's SFT counts them (nemo_rl/algorithms/sft.py).
3. Before and after: the student's per-token **reverse KL to its routed teacher**, sum over the vocabulary of
   ``p_s (log p_s - log p_t)`` at every position of the student's own greedy completion (``warmup.kl_new_tokens``
   tokens) of the first ``warmup.kl_prompts`` held-out prompts (``warmup.held_out_path``) — the quantity MOPD's loss
   is (TRL's distillation with ``beta=1``), measured exactly over the vocabulary rather than sampled.
4. The student in Hugging Face form at ``<checkpointing.checkpoint_dir>/hf/step_N`` (+ ``hf/latest``), recorded as
   ``output_artifact`` (``mopd-warmup-checkpoint``), ``summary.json`` and ``metrics.jsonl`` beside it.

Not here: resume (the stage is short: a rerun starts over and replaces the output), validation loss, sequence packing.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from nemotron.runtime.rl.warmup import WarmupSettings, read_tasks

NEEDS = ("torch", "transformers")


def _say(msg: str) -> None:
    print(f"[local] {msg}", flush=True)


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def reverse_kl(student: Any, teacher: Any, ids: Any, mask: Any) -> tuple[float, int]:
    """``(sum over tokens of KL(p_student || p_teacher), number of tokens)`` over the positions ``mask`` marks.

    Args:
        ids: ``[batch, seq]`` token ids (long), on the models' device.
        mask: ``[batch, seq]`` 1 where token ``t`` is a completion token: the distribution that predicts it (the
            logits at ``t - 1``) is compared.
    """
    import torch

    with torch.no_grad():
        ls = torch.log_softmax(student(input_ids=ids).logits[:, :-1].float(), dim=-1)
        lt = torch.log_softmax(teacher(input_ids=ids).logits[:, :-1].float(), dim=-1)
        kl = (ls.exp() * (ls - lt)).sum(-1)              # [batch, seq-1]
        m = mask[:, 1:].to(kl.dtype)
        return float((kl * m).sum()), int(m.sum())


def held_out_kl(student: Any, teachers: dict[str, Any], tokenizer: Any, prompts: list[tuple[str, str]],
                new_tokens: int) -> dict[str, Any]:
    """The student's per-token reverse KL to each prompt's routed teacher on its own greedy completions.

    Args:
        prompts: ``[(prompt text, teacher alias)]``.

    Returns:
        ``{"kl": mean over all completion tokens, "tokens": n, "by_teacher": {alias: mean}}`` (``kl`` None when no
        prompt produced a token).
    """
    import torch

    device = next(student.parameters()).device
    total, count, per = 0.0, 0, {}
    student.eval()
    for text, alias in prompts:
        enc = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"].to(device)
        with torch.no_grad():
            ids = student.generate(input_ids=enc, max_new_tokens=new_tokens, do_sample=False, use_cache=True,
                                   pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        mask = torch.zeros_like(ids)
        mask[:, enc.shape[1]:] = 1
        s, n = reverse_kl(student, teachers[alias], ids, mask)
        total, count = total + s, count + n
        a = per.setdefault(alias, [0.0, 0])
        a[0] += s
        a[1] += n
    return {"kl": total / count if count else None, "tokens": count,
            "by_teacher": {a: v[0] / v[1] for a, v in sorted(per.items()) if v[1]}}


def _examples(tokenizer: Any, pairs: list[dict[str, Any]], limit: int) -> list[tuple[list[int], int]]:
    """``[(token ids, prompt length)]``: prompt + response + EOS, cut to ``limit`` tokens; pairs whose prompt
    leaves no response token are dropped."""
    out = []
    for p in pairs:
        prompt = tokenizer(p["input"], add_special_tokens=False)["input_ids"]
        resp = tokenizer(p["output"], add_special_tokens=False)["input_ids"]
        if tokenizer.eos_token_id is not None:
            resp = resp + [tokenizer.eos_token_id]
        ids = (prompt + resp)[:limit]
        if len(ids) > len(prompt):
            out.append((ids, len(prompt)))
    return out


def _batch(examples: list[tuple[list[int], int]], pad: int, device: str) -> tuple[Any, Any, Any]:
    """``(ids, attention mask, labels)`` right-padded; labels -100 on the prompt and the padding."""
    import torch

    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    att = torch.zeros((len(examples), width), dtype=torch.long)
    lab = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (x, plen) in enumerate(examples):
        ids[i, :len(x)] = torch.tensor(x)
        att[i, :len(x)] = 1
        lab[i, plen:len(x)] = torch.tensor(x[plen:])
    return ids.to(device), att.to(device), lab.to(device)


def sft_steps(n_examples: int, global_batch: int, max_steps: int, epochs: int) -> int:
    """Optimizer steps: min(``max_steps``, ``epochs`` x full global batches in ``n_examples``) — NeMo RL's SFT count
    (its dataloader drops the last partial batch). 0 when not one full batch exists."""
    return min(max_steps, epochs * (n_examples // global_batch))


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def export(model: Any, tokenizer: Any, s: WarmupSettings, step: int) -> Path:
    """The student at ``<checkpoint_dir>/hf/step_<step>``, ``hf/latest`` pointing at it, ``outputs.json`` naming it
    as ``output_artifact`` (the form the RL runtimes give their result:
    :func:`nemotron.runtime.rl.nemo_rl.hf_output`)."""
    import shutil

    from nemotron.config import artifacts
    from nemotron.runtime.rl.nemo_rl import hf_output

    out = hf_output(s.checkpoint_dir, step)
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    latest = hf_output(s.checkpoint_dir)
    link = latest.with_name(f".{latest.name}.tmp")
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(out.name)
    os.replace(link, latest)
    artifacts.write_outputs({s.output_artifact: {"path": str(out), "step": step,
                                                 "checkpoint_dir": str(s.checkpoint_dir)}})
    return out


def run(s: WarmupSettings, spec: Any = None) -> int:
    """Generate with the teachers, fine-tune the student, measure its reverse KL before/after, export; exit code
    0 (done).

    Raises:
        RLDataError, ModelError, SettingsError: unusable inputs (the entry prints them as one line).
    """
    import torch
    import transformers

    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod
    from nemotron.runtime.common.settings import SettingsError, thread_count
    from nemotron.runtime.megatron.trainer import record_consumption
    from nemotron.runtime.rl.rl_data import RLDataError, find_tokenizer, generate, load_tokenizer, read_rows, render
    from nemotron.runtime.rl.rl_settings import route

    torch.set_num_threads(thread_count(s.cpus))
    spec = spec or catalogue.get(s.model_name)
    device = _device()
    transformers.set_seed(s.seed)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    s.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    s.data_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(find_tokenizer(modelmod.resolve_weights(s.student), s.tokenizer_path))
    student = modelmod.load(spec, s.student).to(device)
    by_path: dict[str, Any] = {}
    teachers: dict[str, Any] = {}
    for alias, path in sorted(s.teachers.items()):
        key = str(modelmod.resolve_weights(path).resolve())
        if key not in by_path:  # slots sharing a checkpoint share one teacher
            t = modelmod.load(spec, path).to(device).eval()
            for p in t.parameters():
                p.requires_grad_(False)
            by_path[key] = t
        teachers[alias] = by_path[key]
    rows = read_rows(s.prompts_path, s.num_prompts)
    tasks = read_tasks(s.prompts_path)[:len(rows)]
    alias_of = [route(t, s.teachers, s.default_teacher) for t in tasks]
    texts = [render(tokenizer, r, None, None) for r in rows]
    _say(f"mopd-warmup: student {s.student} ({spec.name}) on {device}, {torch.get_num_threads()} thread(s); "
         f"{len(by_path)} teacher checkpoint(s); {len(rows)} prompts from {s.prompts_path}")
    rec = record_consumption(s.prompts_path, "mopd-warmup", s.checkpoint_dir, "rl-data")
    if rec is not None:
        _say(f"recorded this run as a consumer of {rec.parent.parent}")

    held = read_rows(s.held_out_path, s.kl_prompts) if s.held_out_path is not None and s.kl_prompts else []
    held_tasks = read_tasks(s.held_out_path)[:len(held)] if held else []
    held_prompts = [(render(tokenizer, r, None, None), route(t, s.teachers, s.default_teacher))
                    for r, t in zip(held, held_tasks)]
    before = held_out_kl(student, teachers, tokenizer, held_prompts, s.kl_new_tokens) if held_prompts else None
    if before is not None:
        _say(f"reverse KL to the teachers before warmup: {before['kl']:.4g} per token ({before['tokens']} tokens of "
             f"{len(held_prompts)} held-out prompts)")

    # 1. the teachers answer (one group per teacher alias, seeded per group: reproducible)
    t0 = time.perf_counter()
    pairs: list[dict[str, Any]] = []
    for alias in sorted(set(alias_of)):
        idx = [i for i, a in enumerate(alias_of) if a == alias]
        prompts = [texts[i] for i in idx for _ in range(s.responses_per_prompt)]
        outs = generate(teachers[alias], tokenizer, prompts, s.max_new_tokens, s.temperature, top_p=s.top_p,
                        seed=s.seed, max_prompt_tokens=s.max_total_length - s.max_new_tokens)
        for k, text in enumerate(outs):
            i = idx[k // s.responses_per_prompt]
            pairs.append({"input": texts[i], "output": text, "task": tasks[i], "teacher": alias,
                          "source": rows[i].source})
    gen_s = time.perf_counter() - t0
    data_file = s.data_dir / "train.jsonl"
    with open(data_file, "w", encoding="utf-8") as fh:
        for p in pairs:
            fh.write(json.dumps(p) + "\n")
    _say(f"teachers wrote {len(pairs)} responses in {gen_s:.0f} s -> {data_file}")

    # 2. SFT of the student on the teachers' responses
    examples = _examples(tokenizer, pairs, s.max_total_length)
    steps = sft_steps(len(examples), s.global_batch_size, s.max_steps, s.epochs)
    if steps == 0:
        raise SettingsError(f"policy.train_global_batch_size={s.global_batch_size}: more than the {len(examples)} "
                            f"usable teacher responses; lower it or raise warmup.num_prompts / responses_per_prompt")
    if not examples:
        raise RLDataError(f"{data_file}: no usable pair (every prompt fills policy.max_total_sequence_length)")
    opt = torch.optim.AdamW(student.parameters(), lr=s.lr, weight_decay=s.weight_decay)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    order = list(range(len(examples)))
    rng = random.Random(s.seed)
    metrics = s.checkpoint_dir / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    losses: list[float] = []
    per_epoch = len(examples) // s.global_batch_size
    t1 = time.perf_counter()
    student.train()
    for step in range(steps):
        if step % per_epoch == 0:
            rng.shuffle(order)
        chosen = [examples[i] for i in order[(step % per_epoch) * s.global_batch_size:][:s.global_batch_size]]
        n_tok = sum(len(x) - p for x, p in chosen)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(0, len(chosen), s.micro_batch_size):
            ids, att, lab = _batch(chosen[m:m + s.micro_batch_size], pad, device)
            logits = student(input_ids=ids, attention_mask=att).logits[:, :-1].float()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab[:, 1:].reshape(-1),
                                                     ignore_index=-100, reduction="sum") / n_tok
            loss.backward()
            total += float(loss.detach())
        opt.step()
        losses.append(total)
        with open(metrics, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step + 1, "loss": total, "tokens": n_tok, "time": time.time()}) + "\n")
        _say(f"step {step + 1}/{steps} | loss {total:.4f} | response tokens {n_tok}")
    sft_s = time.perf_counter() - t1
    student.eval()
    after = held_out_kl(student, teachers, tokenizer, held_prompts, s.kl_new_tokens) if held_prompts else None
    out = export(student, tokenizer, s, steps)
    summary = {
        "stage": "mopd-warmup", "prompts": len(rows), "responses": len(pairs), "examples": len(examples),
        "steps": steps, "loss_first": losses[0], "loss_last": losses[-1],
        "kl_before": before["kl"] if before else None, "kl_after": after["kl"] if after else None,
        "kl_before_by_teacher": before["by_teacher"] if before else {},
        "kl_after_by_teacher": after["by_teacher"] if after else {},
        "kl_tokens": after["tokens"] if after else 0, "kl_prompts": len(held_prompts),
        "generation_seconds": gen_s, "sft_seconds": sft_s, "data": str(data_file), "output": str(out),
        "teachers": {a: str(p) for a, p in s.teachers.items()},
    }
    _write_json(s.checkpoint_dir / "summary.json", summary)
    kl = (f"; reverse KL to the teachers {before['kl']:.4g} -> {after['kl']:.4g} per token"
          if before and after and before["kl"] is not None and after["kl"] is not None else "")
    _say(f"done: {steps} SFT steps on {len(examples)} teacher responses; loss {losses[0]:.4f} -> {losses[-1]:.4f}"
         f"{kl}; final model in {out} (Hugging Face form)")
    return 0


def local_main(cfg: dict) -> int:
    """``backend: local``: the settings and inputs checked (one line, exit 1), then, holding the output folder's
    writer lock as the local RL runs do, :func:`run`."""
    import contextlib
    import sys

    from nemotron.runtime.common.settings import SettingsError
    from nemotron.runtime.megatron.entry import LOCAL_NEEDS, run_heavy
    from nemotron.runtime.rl.rl_entry import lock_checkpoint_dir
    from nemotron.runtime.rl.warmup import read

    title = "ultra3 mopd-warmup"
    try:
        s = read(cfg)
        checks = [("policy.model_name", s.student), ("warmup.prompts_path", s.prompts_path)]
        checks += [("warmup.held_out_path", s.held_out_path)] if s.held_out_path is not None else []
        checks += [(f"_teachers (route {a})", p) for a, p in s.teachers.items()]
        for key, path in checks:
            if not Path(path).exists():
                raise SettingsError(f"{key}={path}: no such file or folder")
    except SettingsError as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 1
    with contextlib.ExitStack() as held:
        if not lock_checkpoint_dir(held, title, s.checkpoint_dir):
            return 1

        def work() -> int:
            return run(s)

        from nemotron.runtime.rl.rl_data import RLDataError

        return run_heavy(title, s.cpus, *LOCAL_NEEDS["mopd-warmup"], work, errors=(RLDataError,))


__all__ = ["NEEDS", "export", "local_main", "held_out_kl", "reverse_kl", "run", "sft_steps"]
