"""The ``local`` backend of ``ultra3 mtp-boost``: MTP boosting of a frozen backbone on one machine (CPU or one GPU).

transformers' NemotronH builds no MTP block (it drops ``mtp.*`` weights), so the local head is ours: one
shared-weight MTP layer in Megatron-Core's form (``multi_token_prediction.py``: ``enorm`` / ``hnorm`` RMSNorms, the
``eh_proj`` linear layer 2h → h over ``[norm(embedding(token)), norm(hidden)]``, one transformer layer, a final
RMSNorm, the backbone's own embedding and output layer), its layer being a causal self-attention layer and a dense
MLP of the catalogue's sizes (``num_attention_heads``, ``head_dim``, ``moe_shared_expert_intermediate_size``; the
MTP block's MoE layer stands in as a dense MLP of its shared expert's width). One set of weights serves every step
(Megatron's ``mtp_use_repeated_layer``).

The objective (Nemotron 3 Ultra report, MTP boosting): the backbone is frozen (no gradient reaches it, its bytes are
copied unchanged into the output); step ``k`` of the ``N``-step rollout (``mtp_boost.num_steps``) takes the hidden
states step ``k-1`` produced (the backbone's for step 1) and, for ``k >= 2``, the tokens step ``k-1`` drafted (its
argmax), not the gold ones: training sees what drafting at inference feeds it. The loss is the forward KL
``KL(p_T || q_T)`` of the backbone's next-token distribution to the head's, both at temperature ``T``
(``mtp_boost.temperature``), times ``T**2`` (Hinton et al. 2015, so gradients keep their scale across ``T``),
averaged over positions and steps; no cross-entropy on the gold token. Training text: prompts of the RL data
(``data.train_path``) continued greedily by the backbone itself, so the targets are what speculative decoding
verifies against.

What the stage reports: the acceptance length at draft length ``k`` (``acceptance.draft_length``) of the head before
and after training, by greedy speculative decoding on held-out prompts (``data.held_out_path``): per verification
forward of the backbone, 1 + the number of draft tokens accepted (SPEED-Bench's "acceptance length": at most
``k + 1``). Every speculative output is compared token by token with the backbone's own greedy output; a
difference is an error (:class:`MTPError`), never a number.

Output (``mtp_boost.output_dir``): the backbone's files (``config.json``, ``model.safetensors``, tokenizer) copied
unchanged, ``mtp.safetensors`` (the head: FP32, keys ``mtp.*``), ``mtp_config.json`` (its shape and objective),
``summary.json`` (the acceptance numbers, losses) and ``metrics.jsonl``. The folder loads as the backbone with
:func:`nemotron.runtime.common.model.load` (what ``quantize -c local`` reads); a later ``mtp-boost`` starts from its
head.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemotron.runtime.common.settings import SettingsError, _float, _int, config_path, get

#: The head's files in a checkpoint folder.
HEAD_FILE = "mtp.safetensors"
HEAD_CONFIG = "mtp_config.json"
NEEDS = ("torch", "transformers", "safetensors")


class MTPError(RuntimeError):
    """A speculative output that differs from the backbone's greedy output, or a head that does not fit the model."""


@dataclass(frozen=True)
class MTPSettings:
    """The ``local`` config of ``mtp-boost``, read and checked without heavy imports (the dry run reads it too)."""

    model: str
    source: Path
    output_dir: Path
    train_path: Path
    held_out_path: Path
    num_steps: int
    temperature: float
    train_steps: int
    batch_size: int
    lr: float
    seed: int
    train_prompts: int
    held_out_prompts: int
    max_prompt_tokens: int
    continuation_tokens: int
    draft_length: int
    new_tokens: int
    cpus: int | None


def read(cfg: dict[str, Any], *, unresolved_ok: bool = False) -> MTPSettings:
    """The settings of a compiled ``mtp-boost -c local`` config: ``mtp_boost.*`` and ``data.*`` (ours), and the
    Megatron keys the stage shares with SFT where they mean the same: ``train.train_iters`` (optimizer steps),
    ``train.global_batch_size`` (sequences a step), ``optimizer.lr`` (AdamW), ``rng.seed`` (the head's init and
    the batch order). ``unresolved_ok``: a path that is still an unresolved ``${...}`` (a dry run before the
    inputs exist) is accepted as it is.

    Raises:
        SettingsError: a missing or malformed key (named, with its value).
    """
    def path(key: str) -> Path:
        value = get(cfg, key)
        if unresolved_ok and isinstance(value, str) and "${" in value:
            return Path(value)
        p = config_path(value, key)
        if p is None:
            raise SettingsError(f"{key} is not set")
        return p

    temperature = _float(cfg, "mtp_boost.temperature")
    if not temperature > 0:
        raise SettingsError(f"mtp_boost.temperature={temperature}: must be above 0 (the report's T = 2)")
    lr = _float(cfg, "optimizer.lr")
    if not lr > 0:
        raise SettingsError(f"optimizer.lr={lr}: must be above 0")
    objective = get(cfg, "mtp_boost.objective")
    if objective != "forward-kl":
        raise SettingsError(f"mtp_boost.objective={objective!r}: the only objective is 'forward-kl' (the report's "
                            "temperature-scaled forward KL to the backbone's logits; no cross-entropy)")
    if get(cfg, "mtp_boost.freeze_backbone") is not True:
        raise SettingsError(f"mtp_boost.freeze_backbone={get(cfg, 'mtp_boost.freeze_backbone')!r}: MTP boosting "
                            "trains the head only; set true")
    cpus = get(cfg, "run.env.cpus")
    return MTPSettings(
        model=str(get(cfg, "model.name", "small")), source=path("mtp_boost.source"),
        output_dir=path("mtp_boost.output_dir"), train_path=path("data.train_path"),
        held_out_path=path("data.held_out_path"),
        num_steps=_int(cfg, "mtp_boost.num_steps", minimum=1), temperature=temperature,
        train_steps=_int(cfg, "train.train_iters", minimum=0),
        batch_size=_int(cfg, "train.global_batch_size", minimum=1), lr=lr, seed=_int(cfg, "rng.seed", 0),
        train_prompts=_int(cfg, "data.train_prompts", minimum=1),
        held_out_prompts=_int(cfg, "data.held_out_prompts", minimum=1),
        max_prompt_tokens=_int(cfg, "data.max_prompt_tokens", minimum=1),
        continuation_tokens=_int(cfg, "data.continuation_tokens", minimum=2),
        draft_length=_int(cfg, "mtp_boost.draft_length", minimum=1),
        new_tokens=_int(cfg, "mtp_boost.new_tokens", minimum=1),
        cpus=None if cpus is None else int(cpus))


def _say(msg: str) -> None:
    print(f"[mtp-boost] {msg}", flush=True)


# --------------------------------------------------------------------------------------------- #
# the head
# --------------------------------------------------------------------------------------------- #

def head_shape(spec: Any) -> dict[str, Any]:
    """The head's sizes for catalogue model ``spec``: ``hidden``, ``heads``, ``head_dim``, ``ffn``, ``eps``."""
    return {"hidden": spec.hidden_size, "heads": spec.num_attention_heads, "head_dim": spec.head_dim,
            "ffn": spec.moe_shared_expert_intermediate_size or 4 * spec.hidden_size, "eps": 1e-5}


def build_head(shape: dict[str, Any], seed: int) -> Any:
    """A fresh MTP head (``torch.nn.Module``, FP32, seeded). ``head(hidden [B, L, h], token_embeddings [B, L, h])``
    returns the next hidden states ``[B, L, h]`` (causal over the L positions)."""
    import torch
    from torch import nn

    h, nh, hd, ffn, eps = shape["hidden"], shape["heads"], shape["head_dim"], shape["ffn"], shape["eps"]

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enorm = nn.RMSNorm(h, eps=eps)
            self.hnorm = nn.RMSNorm(h, eps=eps)
            self.eh_proj = nn.Linear(2 * h, h, bias=False)
            self.input_layernorm = nn.RMSNorm(h, eps=eps)
            self.qkv = nn.Linear(h, 3 * nh * hd, bias=False)
            self.o_proj = nn.Linear(nh * hd, h, bias=False)
            self.pre_mlp_layernorm = nn.RMSNorm(h, eps=eps)
            self.up_proj = nn.Linear(h, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, h, bias=False)
            self.final_layernorm = nn.RMSNorm(h, eps=eps)

        def forward(self, hidden: Any, emb: Any) -> Any:
            x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hidden)], dim=-1))
            b, n, _ = x.shape
            q, k, v = self.qkv(self.input_layernorm(x)).view(b, n, 3, nh, hd).permute(2, 0, 3, 1, 4)
            att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o_proj(att.transpose(1, 2).reshape(b, n, nh * hd))
            x = x + self.down_proj(torch.relu(self.up_proj(self.pre_mlp_layernorm(x))) ** 2)  # squared ReLU
            return x

        def norm_out(self, x: Any) -> Any:
            return self.final_layernorm(x)

    torch.manual_seed(seed)
    return Layer()


def save_head(head: Any, shape: dict[str, Any], folder: Path, extra: dict[str, Any]) -> None:
    """``folder/mtp.safetensors`` (keys ``mtp.<name>``) and ``folder/mtp_config.json``."""
    from safetensors.torch import save_file

    save_file({f"mtp.{k}": v.detach().cpu().contiguous() for k, v in head.state_dict().items()},
              str(folder / HEAD_FILE))
    (folder / HEAD_CONFIG).write_text(json.dumps({"shape": shape, **extra}, indent=2, sort_keys=True) + "\n",
                                      encoding="utf-8")


def load_head(folder: Path, shape: dict[str, Any], seed: int) -> tuple[Any, str]:
    """The head saved in ``folder`` (``(head, "<file>")``), or a fresh one (``(head, "fresh ...")``) when it has none.

    Raises:
        MTPError: a saved head whose shape differs from the model's, or whose weights do not fit it.
    """
    head = build_head(shape, seed)
    file = Path(folder) / HEAD_FILE
    if not file.is_file():
        return head, f"fresh (seed {seed}; {folder} has no {HEAD_FILE})"
    from safetensors.torch import load_file

    try:
        saved = json.loads((Path(folder) / HEAD_CONFIG).read_text(encoding="utf-8")).get("shape")
    except (OSError, ValueError) as exc:
        raise MTPError(f"{folder}/{HEAD_CONFIG}: unreadable ({exc}); it describes {HEAD_FILE}") from None
    if saved != shape:
        raise MTPError(f"{file}: a head of shape {saved}, the model needs {shape}")
    state = {k.removeprefix("mtp."): v for k, v in load_file(str(file)).items()}
    try:
        head.load_state_dict(state)
    except RuntimeError as exc:
        raise MTPError(f"{file}: does not fit the head ({exc})") from None
    return head, str(file)


# --------------------------------------------------------------------------------------------- #
# rollout, loss, speculative decoding
# --------------------------------------------------------------------------------------------- #

def backbone_forward(model: Any, ids: Any) -> tuple[Any, Any]:
    """``(hidden [1, L, h], logits [1, L, V])`` of the frozen backbone on ``ids`` ``[1, L]`` (no gradient); hidden
    is its last hidden state, the one its output layer reads."""
    import torch

    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    return out.hidden_states[-1], out.logits


def rollout(model: Any, head: Any, hidden: Any, first_tokens: Any, steps: int) -> list[Any]:
    """The N-step MTP rollout over every position: logits ``[1, L_k, V]`` of each step ``k`` (1..``steps``).

    ``hidden`` ``[1, L, h]``: the backbone's hidden states; ``first_tokens`` ``[1, L']``: the token after each
    position (step 1's input; ``L' <= L``). Every step runs over the ``L'`` positions (causal: a position never
    sees a later one, so training and drafting compute the same thing at a position), on the hidden states step
    ``k-1`` produced and the tokens step ``k-1`` drafted (its argmax, detached): position ``s`` of step ``k``
    predicts token ``s + k + 1``.
    """
    embed, lm_head = model.get_input_embeddings(), model.get_output_embeddings()
    out = []
    h = hidden[:, :first_tokens.shape[1]]
    tokens = first_tokens
    for _ in range(steps):
        h = head(h, embed(tokens))
        logits = lm_head(head.norm_out(h))
        out.append(logits)
        tokens = logits.argmax(-1).detach()  # what step k drafted at each position: step k+1's input
    return out


def kl_loss(step_logits: list[Any], teacher_logits: Any, temperature: float) -> tuple[Any, list[float]]:
    """Mean over steps of ``T**2 * KL(softmax(z/T) || softmax(q/T))`` per position (nats), and each step's value.
    Step ``k``'s position ``s`` is compared with the backbone's logits at position ``s + k``."""
    import torch.nn.functional as F

    losses = []
    for k, q in enumerate(step_logits, 1):
        n = min(q.shape[1], teacher_logits.shape[1] - k)  # positions whose target exists
        if n <= 0:
            break
        q = q[:, :n]
        z = teacher_logits[:, k:k + n].detach()
        p_log = F.log_softmax(z / temperature, dim=-1)
        q_log = F.log_softmax(q / temperature, dim=-1)
        kl = (p_log.exp() * (p_log - q_log)).sum(-1).mean() * temperature ** 2
        losses.append(kl)
    total = sum(losses) / len(losses)
    return total, [float(x.detach()) for x in losses]


def draft(model: Any, head: Any, hidden: Any, ids: Any, next_token: int, k: int) -> list[int]:
    """``k`` draft tokens after ``ids`` + ``next_token`` (greedy), by the same rollout as training."""
    import torch

    first = torch.cat([ids[:, 1:], torch.tensor([[next_token]], device=ids.device)], dim=1)
    with torch.no_grad():
        logits = rollout(model, head, hidden, first, k)
    return [int(step[0, -1].argmax()) for step in logits]


def greedy(model: Any, ids: Any, n: int) -> list[int]:
    """The backbone's own greedy continuation of ``ids``: ``n`` tokens, one full forward each (no cache, the
    same computation as the verification forwards)."""
    import torch

    out: list[int] = []
    for _ in range(n):
        _, logits = backbone_forward(model, ids)
        t = int(logits[0, -1].argmax())
        out.append(t)
        ids = torch.cat([ids, torch.tensor([[t]], device=ids.device)], dim=1)
    return out


def speculative(model: Any, head: Any, ids: Any, n: int, k: int) -> tuple[list[int], list[int]]:
    """Greedy speculative decoding of ``n`` tokens after ``ids`` ``[1, L]`` with draft length ``k``: ``(tokens,
    tokens produced per verification forward)``; each entry of the second is 1 + the drafts accepted."""
    import torch

    hidden, logits = backbone_forward(model, ids)
    y = int(logits[0, -1].argmax())
    out: list[int] = []
    per_forward: list[int] = []
    while len(out) < n:
        drafts = draft(model, head, hidden, ids, y, k)
        seq = torch.cat([ids, torch.tensor([[y, *drafts]], device=ids.device)], dim=1)
        hidden_v, logits_v = backbone_forward(model, seq)
        base = ids.shape[1]  # the position of y: its logits predict drafts[0]
        a = 0
        while a < k and int(logits_v[0, base + a].argmax()) == drafts[a]:
            a += 1
        accepted = [y, *drafts[:a]]
        out += accepted
        per_forward.append(len(accepted))
        ids = seq[:, :base + 1 + a]
        hidden = hidden_v[:, :ids.shape[1]]
        y = int(logits_v[0, base + a].argmax())
    return out[:n], per_forward


def acceptance(model: Any, head: Any, prompts: list[Any], k: int, n: int, label: str,
               reference: Any = None) -> dict[str, Any]:
    """Speculative decoding of every held-out prompt, each output checked against the greedy output of
    ``reference`` (None: the backbone itself, the check the stage runs).

    Returns ``{"acceptance_length", "accepted_per_draft", "forwards", "tokens"}``: the mean of 1 + accepted drafts
    per verification forward, the mean accepted drafts per forward, the forwards and tokens in all.

    Raises:
        MTPError: a speculative output that is not the backbone's greedy output (names the prompt and position).
    """
    per: list[int] = []
    tokens = 0
    head.eval()
    for i, ids in enumerate(prompts):
        spec_out, per_forward = speculative(model, head, ids, n, k)
        want = greedy(model if reference is None else reference, ids, n)
        if spec_out != want:
            pos = next(j for j, (a, b) in enumerate(zip(spec_out, want)) if a != b)
            raise MTPError(f"{label}: held-out prompt {i + 1}: speculative decoding (draft length {k}) gave token "
                           f"{spec_out[pos]} at position {pos}, the backbone's greedy decoding gives {want[pos]}: the "
                           "verification is broken; no acceptance length is reported")
        per += per_forward
        tokens += len(spec_out)
    mean = sum(per) / len(per)
    return {"acceptance_length": mean, "accepted_per_draft": mean - 1, "forwards": len(per), "tokens": tokens}


# --------------------------------------------------------------------------------------------- #
# the run
# --------------------------------------------------------------------------------------------- #

def _prompt_ids(tokenizer: Any, path: Path, count: int, max_tokens: int, device: str) -> list[Any]:
    import torch

    from nemotron.runtime.rl.rl_data import read_rows, render

    rows = read_rows(path, count)
    out = []
    for row in rows:
        ids = tokenizer(render(tokenizer, row, None, None), add_special_tokens=False)["input_ids"][-max_tokens:]
        out.append(torch.tensor([ids], device=device))
    return out


def _copy_backbone(source: Path, dest: Path) -> list[str]:
    """Copy the backbone's files (not a previous head, summary or metrics) into ``dest``; returns their names."""
    skip = {HEAD_FILE, HEAD_CONFIG, "summary.json", "metrics.jsonl"}
    names = []
    for p in sorted(source.iterdir()):
        if p.is_file() and p.name not in skip and not p.name.startswith("."):
            shutil.copy2(p, dest / p.name)
            names.append(p.name)
    return names


def run(s: MTPSettings, spec: Any = None) -> int:
    """Train the head, measure it before and after, write the output folder; returns the exit code (0)."""
    import torch

    from nemotron.config import catalogue
    from nemotron.config.artifacts import write_outputs
    from nemotron.runtime.common import model as modelmod
    from nemotron.runtime.common.settings import thread_count
    from nemotron.runtime.rl.rl_data import find_tokenizer, load_tokenizer

    torch.set_num_threads(thread_count(s.cpus))
    t0 = time.perf_counter()
    spec = spec or catalogue.get(s.model)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    folder = modelmod.resolve_weights(s.source)
    model = modelmod.load(spec, folder).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    tokenizer = load_tokenizer(find_tokenizer(folder, key="mtp_boost.source"))
    shape = head_shape(spec)
    head, origin = load_head(folder, shape, s.seed)
    head = head.to(device)
    _say(f"backbone {folder} (frozen: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters); head "
         f"{origin} ({sum(p.numel() for p in head.parameters()) / 1e6:.2f} M parameters), {s.num_steps} steps, "
         f"T = {s.temperature:g}, on {device}")

    held_out = _prompt_ids(tokenizer, s.held_out_path, s.held_out_prompts, s.max_prompt_tokens, device)
    before = acceptance(model, head, held_out, s.draft_length, s.new_tokens, "before training")
    _say(f"before: acceptance length {before['acceptance_length']:.3f} at draft length {s.draft_length} "
         f"({before['forwards']} verification forwards, {before['tokens']} tokens; equal to greedy decoding)")

    # training text: the prompts continued greedily by the backbone (what speculative decoding verifies against)
    seqs = []
    for ids in _prompt_ids(tokenizer, s.train_path, s.train_prompts, s.max_prompt_tokens, device):
        with torch.no_grad():
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=s.continuation_tokens, pad_token_id=tokenizer.pad_token_id)
        seqs.append(gen[:, :ids.shape[1] + s.continuation_tokens])
    cached = []
    for seq in seqs:
        hidden, logits = backbone_forward(model, seq)
        cached.append((seq, hidden, logits))

    s.output_dir.mkdir(parents=True, exist_ok=True)
    log_path = s.output_dir / "metrics.jsonl"
    log_path.write_text("", encoding="utf-8")
    opt = torch.optim.AdamW(head.parameters(), lr=s.lr, weight_decay=0.0)
    gen_rng = torch.Generator().manual_seed(s.seed)
    history = []
    head.train()
    for step in range(1, s.train_steps + 1):
        pick = torch.randperm(len(cached), generator=gen_rng)[:s.batch_size].tolist()
        opt.zero_grad()
        total, per_step = 0.0, [0.0] * s.num_steps
        for i in pick:
            seq, hidden, logits = cached[i]
            loss, parts = kl_loss(rollout(model, head, hidden, seq[:, 1:], s.num_steps), logits, s.temperature)
            (loss / len(pick)).backward()
            total += float(loss.detach()) / len(pick)
            for j, v in enumerate(parts):
                per_step[j] += v / len(pick)
        opt.step()
        rec = {"step": step, "kl": total, "kl_per_step": per_step}
        history.append(rec)
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
        _say(f"step {step}/{s.train_steps}: forward KL (x T^2) {total:.4f}")
    if any(p.grad is not None for p in model.parameters()):
        raise MTPError("the backbone received gradients; it must stay frozen")

    after = acceptance(model, head, held_out, s.draft_length, s.new_tokens, "after training")
    _say(f"after: acceptance length {after['acceptance_length']:.3f} at draft length {s.draft_length} "
         f"(before {before['acceptance_length']:.3f}; equal to greedy decoding)")

    tmp = s.output_dir / ".export.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    copied = _copy_backbone(folder, tmp)
    save_head(head, shape, tmp, {"num_steps": s.num_steps, "temperature": s.temperature, "objective": "forward-kl",
                                 "shared_weights": True, "source": str(folder)})
    summary = {"source": str(folder), "head_start": origin, "num_steps": s.num_steps, "temperature": s.temperature,
               "draft_length": s.draft_length, "held_out_prompts": len(held_out), "new_tokens": s.new_tokens,
               "train_steps": s.train_steps, "train_sequences": len(seqs),
               "kl_first": history[0]["kl"] if history else None, "kl_last": history[-1]["kl"] if history else None,
               "before": before, "after": after, "speculative_equals_greedy": True,
               "backbone_files": copied, "seconds": round(time.perf_counter() - t0, 1)}
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for p in tmp.iterdir():
        os.replace(p, s.output_dir / p.name)
    tmp.rmdir()
    write_outputs({"mtp-checkpoint": {"path": str(s.output_dir), "source": str(folder)}})
    _say(f"done in {summary['seconds']} s: {s.output_dir} (backbone unchanged + {HEAD_FILE}); acceptance length "
         f"{before['acceptance_length']:.3f} -> {after['acceptance_length']:.3f} at draft length {s.draft_length}")
    return 0


def main(cfg: dict[str, Any]) -> int:
    """``backend: local`` of ``ultra3 mtp-boost``: the settings, the inputs, then :func:`run`."""
    import sys

    from nemotron.runtime.megatron.entry import run_heavy

    try:
        s = read(cfg)
        for key, p in (("mtp_boost.source", s.source), ("data.train_path", s.train_path),
                       ("data.held_out_path", s.held_out_path)):
            if not p.exists():
                raise SettingsError(f"{key}={p}: no such file or folder")
    except SettingsError as exc:
        print(f"ultra3 mtp-boost: {exc}", file=sys.stderr)
        return 1
    from nemotron.runtime.rl.rl_data import RLDataError

    return run_heavy("ultra3 mtp-boost", s.cpus, NEEDS, "torch, transformers>=5.2 and safetensors",
                     lambda: run(s), errors=(RLDataError, MTPError))


__all__ = ["HEAD_FILE", "MTPError", "MTPSettings", "acceptance", "build_head", "draft", "greedy", "kl_loss",
           "load_head", "main", "read", "rollout", "run", "speculative"]
