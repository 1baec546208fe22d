"""Benchmark of the `local` training runtime (a script, not a test).

    python bench/train_tiny.py [--steps 10] [--seq 256] [--batch 4] [--micro 4] [--vocab N] [--json]

Model: the catalogue's ``small`` NemotronH (76.5 M parameters with the 131,072-entry vocabulary;
``--vocab`` shrinks only the vocabulary) in transformers, FP32 on the CPU, BF16 autocast on a GPU.
Every figure is printed next to a reference measured in the same run:

1. **ours**: tokens/s of the real local runtime (``nemotron.runtime.megatron.trainer.run``: transformers' Trainer,
   our blend.json → ``.bin/.idx`` sampler, gradient accumulation, Megatron's LR schedule, clipping), from
   the per-step timestamps of ``metrics.jsonl`` after two warm-up steps (evaluation off; checkpoint only
   at the end, outside the timed window);
2. **reference**: a plain loop over the same model and batch shape — forward with labels, backward,
   fused AdamW step — on random tokens, no data path and no Trainer; measured before and after ours
   (the machine may be shared), best of the two reported;
3. **memory**: the estimate of ``src/nemotron/layout/memory.py`` for the same model at TP1 PP1 (one
   GPU, same sequence and micro-batch, MTP off) next to what the run used: peak GPU memory allocated by
   torch on a GPU, peak resident memory of the process on the CPU. The estimate assumes Megatron's
   BF16 weights + FP32 gradients + FP32 Adam (18 B/parameter) and flash attention; the local run keeps
   FP32 weights (16 B/parameter) and transformers' attention, so expect the same order, not equality.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def reference(spec, seq: int, batch: int, micro: int, steps: int, device: str, precision: str) -> float:
    """Tokens/s of a plain forward/backward/AdamW loop of ``spec`` (``batch`` samples of ``seq`` tokens per
    step, ``batch // micro`` micro-batches)."""
    import torch

    from nemotron.runtime.common.model import build

    model = build(spec, 0).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, spec.vocab_size, (micro, seq), generator=gen).to(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    def step() -> None:
        for _ in range(batch // micro):
            with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    return steps * batch * seq / (time.perf_counter() - t0)


def ours(spec, seq: int, batch: int, micro: int, steps: int, work: Path) -> dict:
    """Run the local runtime for ``steps + 2`` steps; tokens/s over the steps after the first two."""
    from local_runtime_support import compile_local, write_pretrain_data
    from nemotron.runtime.common import settings as S
    from nemotron.runtime.megatron.trainer import run

    blend = write_pretrain_data(work / "data", docs=400, valid_docs=10)
    total = steps + 2
    cfg = compile_local("pretrain", {
        "data.per_split_data_args_path": str(blend), "model.seq_length": seq, "train.train_iters": total,
        "train.global_batch_size": batch, "train.micro_batch_size": micro, "validation.eval_iters": 0,
        "checkpoint.save": str(work / "ckpt"), "checkpoint.save_interval": 10**6, "logger.log_interval": 1,
        "scheduler.lr_warmup_iters": 1, "scheduler.lr_decay_iters": total})
    code = run(S.read(cfg, "pretrain"), spec=spec)
    if code != 0:
        raise SystemExit(f"the local runtime exited {code}")
    logs = [json.loads(line) for line in (work / "ckpt" / "metrics.jsonl").read_text().splitlines()]
    times = {r["step"]: r["time"] for r in logs if "loss" in r}
    first, last = 2, max(times)
    seconds = times[last] - times[first]
    summary = json.loads((work / "ckpt" / "summary.json").read_text())
    return {"tokens_per_s": (last - first) * batch * seq / seconds, "seconds_per_step": seconds / (last - first),
            "peak_gpu_memory_gb": summary.get("peak_gpu_memory_gb")}


def estimate_gb(spec, seq: int, micro: int, batch: int) -> float:
    """The launcher's per-GPU memory estimate for ``spec`` at TP1 PP1 on one GPU (MTP off)."""
    from nemotron.layout import memory

    setup = memory.TrainSetup(tp=1, pp=1, cp=1, ep=1, etp=1, world=1, seq_length=seq, micro_batch=micro,
                              global_batch=batch, distributed_optimizer=False, grad_fp32=True, mtp_depths=0)
    return memory.estimate(spec, setup, None).peak.total_gb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps (after 2 warm-up steps)")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4, help="global batch (samples per step)")
    parser.add_argument("--micro", type=int, default=4, help="micro batch")
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: the catalogue's)")
    parser.add_argument("--json", action="store_true", help="print one JSON line at the end")
    a = parser.parse_args()

    import torch

    from nemotron.config import catalogue
    from nemotron.runtime.common.settings import thread_count

    torch.set_num_threads(thread_count(None))
    spec = catalogue.get("small")
    if a.vocab:
        spec = replace(spec, vocab_size=a.vocab)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    precision = "bf16" if device == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    where = torch.cuda.get_device_name(0) if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    params = catalogue.param_count(spec, include_mtp=False)["total"]
    print(f"model {spec.name}: {params / 1e6:.1f} M parameters (vocabulary {spec.vocab_size:,}); {where}; "
          f"{a.batch} x {a.seq} tokens per step, micro-batch {a.micro}, {precision}", flush=True)

    ref1 = reference(spec, a.seq, a.batch, a.micro, a.steps, device, precision)
    if device == "cuda":
        torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory(prefix="train-tiny-") as tmp:
        got = ours(spec, a.seq, a.batch, a.micro, a.steps, Path(tmp))
    ref2 = reference(spec, a.seq, a.batch, a.micro, a.steps, device, precision)
    ref = max(ref1, ref2)
    est = estimate_gb(spec, a.seq, a.micro, a.batch)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    rows = [
        ("local runtime (Trainer + our data path)", f"{got['tokens_per_s']:,.0f} tokens/s",
         f"{got['seconds_per_step']:.3f} s/step"),
        ("reference (plain fwd/bwd/AdamW loop)", f"{ref:,.0f} tokens/s", f"runs: {ref1:,.0f} and {ref2:,.0f}"),
        ("ratio ours / reference", f"{got['tokens_per_s'] / ref:.2f}", ""),
        ("memory estimate at TP1 PP1 (validation/memory.py)", f"{est:.2f} GB", "incl. 5 GB fixed allowance"),
        ("estimate without the fixed allowance", f"{est - 5.0:.2f} GB", ""),
    ]
    if got.get("peak_gpu_memory_gb") is not None:
        rows.append(("peak GPU memory of the local run (torch)", f"{got['peak_gpu_memory_gb']:.2f} GB", ""))
    else:
        rows.append(("peak resident memory of this process (CPU)", f"{rss_gb:.2f} GB", "all three runs"))
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>18}  {note}")
    if a.json:
        print(json.dumps({"device": where, "precision": precision, "params": params, "seq": a.seq, "batch": a.batch,
                          "micro": a.micro, "ours_tokens_per_s": got["tokens_per_s"], "reference_tokens_per_s": ref,
                          "ratio": got["tokens_per_s"] / ref, "estimate_gb": est,
                          "peak_gpu_memory_gb": got.get("peak_gpu_memory_gb"), "peak_rss_gb": rss_gb}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
