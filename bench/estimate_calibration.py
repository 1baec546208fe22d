"""Calibration of ``nemotron ultra3 STAGE estimate`` (a script, not a test).

    python bench/estimate_calibration.py [--blend BLEND_JSON] [--steps 4] [--json]

Two comparisons, each printed next to what it is compared with:

1. **checkpoint bytes**: the estimate's bytes per save for ``pretrain -c local`` (12 bytes a parameter: FP32 weights
   and AdamW's two FP32 moments; ``src/nemotron/layout/estimate.py``) against a real checkpoint written in this run by
   the real command, ``nemotron ultra3 pretrain -c local`` (every file of its ``checkpoint-<step>`` folder counted).
   Target: within 2 %.
2. **step time**: the estimate's FLOPs per step of the same model and batch against step times measured:
   (a) in this run on this machine's CPU (per-step timestamps of ``metrics.jsonl``, after a warm-up step), with this
   CPU's own FP32 matrix-multiply rate measured in the same run as its "peak" (``torch.mm`` of 2048 x 2048);
   (b) the H200 figures in ``docs/local_runtime.md`` (the local runtime, BF16) and ``docs/gpu_run.md`` (Megatron-Bridge
   with Transformer Engine), which were measured in earlier sessions on one H200 and are quoted, not re-measured here.
   For each it prints the estimate at the assumed MFU, the measured time and the MFU the measurement implies.

3. **per-GPU memory** (``--memory``, no run: arithmetic only): the memory estimate of the one-GPU pretrain run of
   ``docs/gpu_run.md`` (``bench/results/gpu_run_h200.json``: the ``small`` model at TP1 PP1 EP1, 1,024 x 4 tokens
   per micro-batch, 2 MTP depths, Megatron-Bridge's Ultra recipe: Transformer Engine's fused cross entropy) next to
   its measured ``max_memory_allocated`` and ``max_memory_reserved``, before (FP32 logits, a 5 GB allowance) and
   after (BF16 logits kept by the fused cross entropy; context, NCCL and fragmentation outside the allocator); and
   the same estimate of the one-GPU packed SFT run (``bench/results/gpu_sft_h100.json``) against its peaks.

Without ``--blend`` it first runs ``nemotron ultra3 data prep pretrain -c tiny`` (in-process for this size) into a
temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

#: Measured earlier on one NVIDIA H200 (BF16), quoted from the docs: (where, batch, seq, tokens/s).
H200_FIGURES = [
    ("docs/local_runtime.md, local runtime", 4, 256, 15_160),
    ("docs/local_runtime.md, local runtime", 8, 1024, 94_387),
    ("docs/local_runtime.md, local runtime", 8, 4096, 152_424),
    ("docs/gpu_run.md, Megatron-Bridge + TE", 16, 1024, 19_519),
    ("docs/local_posttraining.md, local runtime", 16, 1024, 86_089),
]


def _nemotron(args: list[str], env: dict[str, str], cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "nemotron.console", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode != 0:
        sys.exit(f"nemotron {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")


def cpu_matmul_gflops() -> float:
    """This CPU's FP32 ``torch.mm`` rate (GFLOP/s), best of 5 (the threads torch uses here)."""
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * 2048**3 / (time.perf_counter() - t) / 1e9)
    return best


GIB = 2**30
GPU_RUN = ROOT / "bench" / "results" / "gpu_run_h200.json"
GPU_SFT = ROOT / "bench" / "results" / "gpu_sft_h100.json"


def sft_memory_comparison(run: Path = GPU_SFT) -> dict:
    """The memory estimate of the one-GPU packed SFT run of docs/gpu_run.md (``bench/gpu_megatron.py`` ONE_GPU_SFT:
    the ``small`` model at TP1 PP1 EP1, one 4,096-token pack per micro-batch, 4 per step, 2 MTP depths, the SFT
    recipe's cross entropy: Megatron-Core's "native" fusion, as the dry run reads it from the recipe) against its
    measured peaks, before (the BF16 logits of TE's fused cross entropy, 2 B an element: what the estimate assumed
    for every recipe, as the run's dry run printed it) and after (4 B saved a head + the last head's
    :func:`memory.last_head_bytes`, inferred from the two runs). GB = 1e9 bytes."""
    from nemotron.config import catalogue
    from nemotron.layout import memory, views

    rec = json.loads(run.read_text(encoding="utf-8"))
    alloc, reserved = rec["peak_allocated_gib"] * GIB / 1e9, rec["peak_reserved_gib"] * GIB / 1e9
    setup = dict(seq_length=4096, micro_batch=1, global_batch=4, world=1, mtp_depths=2)
    ce = views._logits_bytes(True, None, "nemotron_3_ultra_sft_openmathinstruct2_packed_config")
    est = memory.estimate(catalogue.get("small"), memory.TrainSetup(**setup, logits_bytes=ce), None).peak
    # what the dry run of this run printed: TE's BF16 logits assumed for every recipe, no last-head term
    heads = 1 + setup["mtp_depths"]
    before_allocated = est.weights_gb + est.activations_gb + heads * 4096 * catalogue.padded_vocab(
        catalogue.get("small"), 1) * 2 / 1e9
    return {"measured": {"max_allocated_gb": alloc, "max_reserved_gb": reserved, "gpu": rec.get("gpu"),
                         "source": str(run.relative_to(ROOT))},
            "before": {"allocated_gb": before_allocated, "vs_allocated": before_allocated / alloc - 1},
            "estimate": {"logits_bytes": ce, "weights_gb": est.weights_gb, "activations_gb": est.activations_gb,
                         "logits_gb": est.logits_gb, "allocated_gb": est.allocated_gb,
                         "vs_allocated": est.allocated_gb / alloc - 1, "total_gb": est.total_gb,
                         "vs_reserved_total": est.total_gb / reserved - 1}}


def memory_comparison(run: Path = GPU_RUN) -> dict:
    """The memory estimate of the measured one-GPU run (docs/gpu_run.md) before and after the calibration, against
    its measured peaks. GB = 1e9 bytes (the estimate's unit); the measurements are GiB in the JSON."""
    from nemotron.config import catalogue
    from nemotron.layout import memory

    rec = json.loads(run.read_text(encoding="utf-8"))
    alloc, reserved = rec["peak_allocated_gib"] * GIB / 1e9, rec["peak_reserved_gib"] * GIB / 1e9
    spec = catalogue.get("small")
    # bench/gpu_megatron.py ONE_GPU: TP1 PP1 EP1, seq 1,024, micro 4, global 16, 2 MTP depths, no recompute
    setup = dict(seq_length=1024, micro_batch=4, global_batch=16, world=1, mtp_depths=2)
    after = memory.estimate(spec, memory.TrainSetup(**setup, logits_bytes=2.0), None).peak
    # the first version: the same terms with FP32 logits (4 B an element of each head) + a 5 GB allowance
    heads = 1 + setup["mtp_depths"]
    before_logits = heads * setup["seq_length"] * setup["micro_batch"] * catalogue.padded_vocab(spec, 1) * 4 / 1e9
    before_total = after.weights_gb + after.activations_gb + before_logits + memory.OVERHEAD_GB
    return {
        "measured": {"max_allocated_gb": alloc, "max_reserved_gb": reserved, "source": str(run.relative_to(ROOT))},
        "before": {"weights_gb": after.weights_gb, "activations_gb": after.activations_gb,
                   "logits_gb": before_logits, "allowance_gb": memory.OVERHEAD_GB, "total_gb": before_total,
                   "vs_allocated": before_total / alloc - 1},
        "after": {"weights_gb": after.weights_gb, "activations_gb": after.activations_gb, "logits_gb": after.logits_gb,
                  "allocated_gb": after.allocated_gb, "vs_allocated": after.allocated_gb / alloc - 1,
                  "reserved_gb": after.allocated_gb * memory.FRAGMENTATION,
                  "vs_reserved": after.allocated_gb * memory.FRAGMENTATION / reserved - 1,
                  "outside": dict(after.outside), "total_gb": after.total_gb},
    }


def print_memory(m: dict) -> None:
    ms, b, a = m["measured"], m["before"], m["after"]
    print(f"memory, one-GPU pretrain run ({ms['source']}): measured max allocated {ms['max_allocated_gb']:.2f} GB, "
          f"max reserved {ms['max_reserved_gb']:.2f} GB")
    print(f"  before: weights+grads+optimizer {b['weights_gb']:.2f} + activations {b['activations_gb']:.2f} + FP32 "
          f"logits {b['logits_gb']:.2f} + allowance {b['allowance_gb']:.1f} = {b['total_gb']:.2f} GB "
          f"({b['vs_allocated']:+.0%} vs allocated)")
    print(f"  after:  weights+grads+optimizer {a['weights_gb']:.2f} + activations {a['activations_gb']:.2f} + BF16 "
          f"logits (3 heads saved + the last head's copy) {a['logits_gb']:.2f} = allocated {a['allocated_gb']:.2f} GB ({a['vs_allocated']:+.1%} vs allocated); "
          f"x fragmentation = {a['reserved_gb']:.2f} GB ({a['vs_reserved']:+.1%} vs reserved); outside the allocator: "
          + ", ".join(f"{k} {v:.2f} GB" for k, v in a["outside"].items()) + f"; total {a['total_gb']:.2f} GB")


def print_sft_memory(m: dict) -> None:
    ms, b, e = m["measured"], m["before"], m["estimate"]
    print(f"memory, one-GPU packed SFT run ({ms['source']}, {ms['gpu']}): measured max allocated "
          f"{ms['max_allocated_gb']:.2f} GB, max reserved {ms['max_reserved_gb']:.2f} GB")
    print(f"  before: TE-fused BF16 logits assumed = allocated {b['allocated_gb']:.2f} GB ({b['vs_allocated']:+.0%} "
          "vs allocated)")
    print(f"  after:  weights+grads+optimizer {e['weights_gb']:.2f} + activations {e['activations_gb']:.2f} + logits "
          f"(native cross entropy: {e['logits_bytes']:.0f} B saved a head + the last head's forward) "
          f"{e['logits_gb']:.2f} = allocated {e['allocated_gb']:.2f} GB ({e['vs_allocated']:+.1%} vs allocated); "
          f"total {e['total_gb']:.2f} GB ({e['vs_reserved_total']:+.1%} vs reserved)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blend", help="a pretrain blend.json (default: run data prep pretrain -c tiny first)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--memory", action="store_true", help="only the memory comparison (no run)")
    a = ap.parse_args()
    if a.memory:
        m, s = memory_comparison(), sft_memory_comparison()
        if a.json:
            print(json.dumps({"pretrain": m, "sft": s}, indent=2))
        else:
            print_memory(m)
            print_sft_memory(s)
        return 0

    from nemotron.config import catalogue
    from nemotron.layout import estimate as est

    work = Path(tempfile.mkdtemp(prefix="estimate-calibration-"))
    env = {**os.environ, "NEMOTRON_HOME": str(work / "home"), "PYTHONPATH": str(ROOT / "src")}
    blend = a.blend
    if blend is None:
        _nemotron(["ultra3", "data", "prep", "pretrain", "-c", "tiny", f"output_dir={work / 'data'}"], env, work)
        blend = str(next((work / "data").rglob("blend.json")))
    ckpt = work / "ckpt"
    seq, batch = 256, 4  # pretrain -c local's batch
    started = time.time()
    _nemotron(["ultra3", "pretrain", "-c", "local", f"train.train_iters={a.steps}", f"checkpoint.save_interval={a.steps}",
               f"checkpoint.save={ckpt}", f"data.per_split_data_args_path={blend}", "validation.eval_interval=null", "logger.log_interval=1"],
              env, work)
    wall = time.time() - started
    folder = max(ckpt.glob("checkpoint-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))
    real = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    spec = catalogue.get("small")
    e = est.estimate_run(spec, gpus=1, nodes=1, gpu="H200", precision="bf16", seq_length=seq, global_batch_size=batch,
                         steps=a.steps, mtp_depths=0, ckpt_format="hf-local")
    ckpt_err = (e.ckpt_bytes - real) / real

    times = [json.loads(ln)["time"] for ln in (ckpt / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(ln) and "eval_loss" not in json.loads(ln)]
    cpu_step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    peak_cpu = cpu_matmul_gflops()

    def flops(b: int, s: int) -> float:
        return 3 * est.forward_flops_per_token(spec, s, mtp_depths=0)["total"] * b * s

    rows = []
    if cpu_step:
        f = flops(batch, seq)
        rows.append({"where": "this CPU, measured now (FP32, local runtime)", "batch": f"{batch} x {seq}",
                     "flops_per_step": f, "peak_tflops": peak_cpu / 1e3, "estimate_s": f / (peak_cpu * 1e9 * est.DEFAULT_MFU),
                     "measured_s": cpu_step, "implied_mfu": f / (cpu_step * peak_cpu * 1e9)})
    peak = est.PEAK_TFLOPS["H200"]["bf16"]
    for where, b, s, tps in H200_FIGURES:
        f = flops(b, s)
        measured = b * s / tps
        rows.append({"where": f"H200, {where}", "batch": f"{b} x {s}", "flops_per_step": f, "peak_tflops": peak,
                     "estimate_s": f / (peak * 1e12 * est.DEFAULT_MFU), "measured_s": measured,
                     "implied_mfu": f / (measured * peak * 1e12)})
    result = {"checkpoint": {"folder": str(folder), "real_bytes": real, "estimate_bytes": e.ckpt_bytes,
                             "relative_error": ckpt_err, "within_2_percent": abs(ckpt_err) <= 0.02,
                             "params": e.params, "bytes_per_param": est.CKPT_BYTES["hf-local"]},
              "mfu_assumed": est.DEFAULT_MFU, "cpu_matmul_gflops": peak_cpu, "step_time": rows,
              "local_run_wall_s": wall, "memory": memory_comparison(),
              "memory_sft": sft_memory_comparison()}
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"checkpoint: estimate {e.ckpt_bytes:,} bytes ({e.params:,} parameters x 12) vs real {real:,} bytes "
          f"({folder.name}, every file) -> {ckpt_err:+.3%} ({'within' if abs(ckpt_err) <= 0.02 else 'OUTSIDE'} 2 %)")
    print(f"step time at the assumed MFU {est.DEFAULT_MFU} (the estimate's default; the last column is the MFU each "
          "measurement implies):")
    print(f"{'where':58} {'batch':>9} {'TFLOP/step':>11} {'peak TFLOP/s':>13} {'estimate':>10} {'measured':>10} {'MFU':>7}")
    for r in rows:
        print(f"{r['where']:58} {r['batch']:>9} {r['flops_per_step'] / 1e12:>11.3f} {r['peak_tflops']:>13.3f} "
              f"{r['estimate_s']:>9.3f}s {r['measured_s']:>9.3f}s {r['implied_mfu']:>7.3f}")
    print(f"(this CPU's FP32 torch.mm rate, measured now: {peak_cpu:.1f} GFLOP/s; work folder {work})")
    print_memory(result["memory"])
    print_sft_memory(result["memory_sft"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
