"""Benchmark of `nemotron ultra3 data prep pretrain` (a script, not a test).

    python bench/data_prep_pretrain.py [--copies 2] [--scale 8] [--cores 64 128]

Corpus: the Python standard library sources (every .py file outside site-packages is one record),
written as JSONL and repeated ``--copies`` times (at least 50 MB). Tokenizer: the tiny config's
131,072-entry Tekken BPE. Every figure is printed next to a reference measured in the same run:

1. end-to-end tokens/s (the whole `run.py` process: start-up, Ray, planning, tokenizing, writing)
   ÷ raw tokens/s of the same tokenizer batch-encoding the same text in memory on the same cores
   (``encode_batch_fast``, its Rust thread pool pinned to the same core count) — target >= 0.8;
2. tokens/s per worker with 1 and 2 workers, and the wall-clock time per node of N cores that
   follows for the Ultra phase-1 blend;
3. peak resident memory summed over the whole process tree (driver, Ray, workers) at 1x and
   ``--scale``x the corpus — target ratio <= 1.3;
4. work lost when the run is SIGKILLed mid-way: shards in flight at the kill (at most one per
   worker) and whether the resumed output equals the uninterrupted one byte for byte.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from data_prep_pretrain_support import STAGE_DIR, descendants, load_config, tree_rss_bytes  # noqa: E402

RAW_SCRIPT = r"""
import json, os, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1]); tok.encode_special_tokens = True
texts = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
batch_chars = int(sys.argv[3]); copies = int(sys.argv[4])
batches, cur, n = [], [], 0
for t in texts:
    cur.append(t); n += len(t)
    if n >= batch_chars:
        batches.append(cur); cur, n = [], 0
if cur: batches.append(cur)
tok.encode_batch_fast(batches[0][:4], add_special_tokens=False)  # warm the thread pool
tokens, t0 = 0, time.perf_counter()
for _ in range(copies):
    for b in batches:
        tokens += sum(len(e.ids) for e in tok.encode_batch_fast(b, add_special_tokens=False))
print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - t0}))
"""


def make_corpus(folder: Path, copies: int) -> tuple[list[Path], int]:
    """Write the stdlib corpus as JSONL, ``copies`` files of one copy each; returns (files, bytes)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    records = []
    for p in sorted(stdlib.rglob("*.py")):
        rel = str(p.relative_to(stdlib))
        if rel.startswith(("site-packages", "dist-packages")):
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            records.append(json.dumps({"text": text, "path": rel}))
    data = ("\n".join(records) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(copies):
        f = folder / f"stdlib-{i:03d}.jsonl"
        if not f.exists() or f.stat().st_size != len(data):
            f.write_bytes(data)
        files.append(f)
    return files, len(data) * copies


def run_pipeline(cfg: dict, work: Path, name: str, kill_after_receipts: int | None = None) -> dict:
    """Run `run.py` on ``cfg`` in a subprocess; sample the process tree's RSS every 200 ms."""
    cfg_path = work / f"{name}.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(STAGE_DIR / "run.py"), "--config", str(cfg_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    peak = {"rss": 0, "procs": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak["rss"] = max(peak["rss"], tree_rss_bytes(proc.pid))
            peak["procs"] = max(peak["procs"], 1 + len(descendants(proc.pid)))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = Path(cfg["output_dir"])
    killed: dict = {}
    if kill_after_receipts is not None:
        while proc.poll() is None:
            if len(list(out.rglob("*.receipt.json"))) >= kill_after_receipts:
                in_flight = sorted({p.name.split(".")[0] for p in out.rglob("*.tmp-*")})
                victims = [proc.pid, *descendants(proc.pid)]
                for pid in victims:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                killed = {"receipts": len(list(out.rglob("*.receipt.json"))), "in_flight": in_flight}
                break
            time.sleep(0.01)
    log = proc.communicate()[0].decode(errors="replace")
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    if kill_after_receipts is None and proc.returncode != 0:
        raise SystemExit(f"{name}: run.py exited {proc.returncode}\n{log[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    return {"wall": wall, "peak_rss": peak["rss"], "procs": peak["procs"], "manifest": manifest, "killed": killed,
            "log": log}


def shard_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.suffix in (".bin", ".idx")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=2, help="stdlib copies in the 1x corpus (2 = ~63 MB of JSONL)")
    ap.add_argument("--scale", type=int, default=8, help="the large corpus is this many times the 1x corpus")
    ap.add_argument("--cores", type=int, nargs="*", default=[64, 128], help="node sizes for the projection")
    ap.add_argument("--target-tokens", type=int, default=2_000_000, help="shards.target_tokens")
    ap.add_argument("--ultra-tokens", type=float, default=15e12,
                    help="tokens to prepare for the phase-1 projection (default: phase 1's 15T training budget)")
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args()

    cores = os.cpu_count() or 1
    workers = min(2, cores)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-pretrain-"))
    tok_cache = work / "tokenizers"
    files1, bytes1 = make_corpus(work / "corpus", args.copies)
    if bytes1 < 50e6:
        raise SystemExit(f"the 1x corpus is {bytes1 / 1e6:.0f} MB; use more --copies (>= 50 MB)")
    filesN, bytesN = make_corpus(work / "corpus", args.copies * args.scale)

    def cfg(name: str, files: list[Path], n_workers: int) -> dict:
        blend = work / f"{name}-blend.json"
        glob = str(work / "corpus" / "stdlib-*.jsonl")
        blend.write_text(json.dumps({"datasets": [{"name": "stdlib", "path": glob, "weight": 1.0, "category": "code",
                                                   "exclude": [f"stdlib-{i:03d}.jsonl" for i in range(len(files), 999)]}]}))
        return load_config("tiny", blend_path=str(blend), output_dir=str(work / "out" / name),
                           tokenizer__cache_dir=str(tok_cache), path_vars={},
                           shards={"target_tokens": args.target_tokens}, workers={"count": n_workers},
                           run={"env": {"nodes": 1, "gpus_per_node": None, "cpus": n_workers}})

    print(f"machine: {cores} cores; corpus 1x = {bytes1 / 1e6:.1f} MB ({len(files1)} JSONL files), "
          f"{args.scale}x = {bytesN / 1e6:.1f} MB; work folder {work}", flush=True)

    # warm-up: converts the Tekken vocabulary once (cached) so no run below pays for it
    from nemotron.data import tokenizer as tk

    info = tk.resolve(load_config("tiny", path_vars={})["tokenizer"]["name"], cache_dir=tok_cache)

    # 1. raw reference: the same tokenizer batch-encoding the same text in memory, RAYON pinned to the same
    # core count. The machine may be shared, so the reference is measured right before and right after each
    # pipeline run it is compared with, and the two are averaged.
    def measure_raw(threads: int) -> tuple[float, int]:
        env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true"}
        r = json.loads(subprocess.run(
            [sys.executable, "-c", RAW_SCRIPT, info.json_path, str(files1[0]), "1048576", str(len(files1))],
            env=env, capture_output=True, text=True, check=True).stdout)
        return r["tokens"] / r["seconds"], r["tokens"]

    raw_a, raw_tokens = measure_raw(workers)
    r2 = run_pipeline(cfg("x1-w2", files1, workers), work, "x1-w2")
    raw_b, _ = measure_raw(workers)
    raw_tps_x1 = (raw_a + raw_b) / 2
    raw1_a, _ = measure_raw(1)
    print(f"raw tokenizer: {raw_a / 1e6:.3f}M / {raw_b / 1e6:.3f}M tok/s on {workers} threads (before/after), "
          f"{raw1_a / 1e6:.3f}M on 1", flush=True)

    # 2. the pipeline, 1x corpus, `workers` workers and 1 worker
    m2 = r2["manifest"]
    tokens1 = sum(m2["totals"]["tokens"].values())
    docs1 = sum(sum(d["documents"].values()) for d in m2["datasets"])
    assert tokens1 - docs1 == raw_tokens, (tokens1, docs1, raw_tokens)  # the pipeline adds one EOS per document
    e2e = tokens1 / r2["wall"]
    work_tps = tokens1 / m2["run"]["work_seconds"]
    per_worker2 = tokens1 / sum(d["seconds"] for d in m2["datasets"])
    print(f"pipeline x1 {workers} workers: {r2['wall']:.1f}s wall", flush=True)
    r1 = run_pipeline(cfg("x1-w1", files1, 1), work, "x1-w1")
    raw1_b, _ = measure_raw(1)
    raw1_tps = (raw1_a + raw1_b) / 2
    per_worker1 = tokens1 / sum(d["seconds"] for d in r1["manifest"]["datasets"])
    print(f"pipeline x1 1 worker: {r1['wall']:.1f}s wall", flush=True)
    identical = shard_bytes(work / "out" / "x1-w2") == shard_bytes(work / "out" / "x1-w1")

    # 3. large corpus
    raw_c, _ = measure_raw(workers)
    rN = run_pipeline(cfg(f"x{args.scale}-w2", filesN, workers), work, f"x{args.scale}")
    raw_d, _ = measure_raw(workers)
    raw_tps_xN = (raw_c + raw_d) / 2
    tokensN = sum(rN["manifest"]["totals"]["tokens"].values())
    e2eN = tokensN / rN["wall"]
    print(f"pipeline x{args.scale}: {rN['wall']:.1f}s wall", flush=True)

    # 4. SIGKILL mid-run, then resume
    kcfg = cfg("kill", files1, workers)
    shards_total = len(m2["shards"])
    rk = run_pipeline(kcfg, work, "kill", kill_after_receipts=max(shards_total // 3, 1))
    rr = run_pipeline(kcfg, work, "kill-resume")
    resumed = rr["manifest"]["run"]
    same_after_resume = shard_bytes(work / "out" / "kill") == shard_bytes(work / "out" / "x1-w2")
    lost_tokens = sum(s["tokens"] for s in m2["shards"]
                      if s["id"].split("/")[1] in rk["killed"].get("in_flight", []))
    biggest = max(s["tokens"] for s in m2["shards"])

    print()
    print(f"{'figure':58s} {'measured':>16s}   reference (same run)")
    line = lambda a, b, c: print(f"{a:58s} {b:>16s}   {c}")  # noqa: E731
    line("1. end-to-end tokens/s, 1x corpus (whole run.py process)", f"{e2e / 1e6:.3f}M",
         f"raw batch-encode {raw_tps_x1 / 1e6:.3f}M on {workers} threads -> ratio {e2e / raw_tps_x1:.2f} (target >= 0.8)")
    line(f"   end-to-end tokens/s, {args.scale}x corpus", f"{e2eN / 1e6:.3f}M",
         f"raw {raw_tps_xN / 1e6:.3f}M measured around it -> ratio {e2eN / raw_tps_xN:.2f}")
    line("   tokenizing phase only (Ray up, 1x)", f"{work_tps / 1e6:.3f}M", f"ratio {work_tps / raw_tps_x1:.2f}")
    raw_tps = raw_tps_x1
    line("2. tokens/s per worker, 1 worker", f"{per_worker1 / 1e6:.3f}M",
         f"raw 1 thread {raw1_tps / 1e6:.3f}M -> {per_worker1 / raw1_tps:.2f}")
    line(f"   tokens/s per worker, {workers} workers", f"{per_worker2 / 1e6:.3f}M",
         f"raw {raw_tps / workers / 1e6:.3f}M per thread -> {per_worker2 / (raw_tps / workers):.2f}")
    for n in args.cores:
        hours = args.ultra_tokens / (per_worker2 * n) / 3600
        line(f"   projected: {args.ultra_tokens / 1e12:.0f}T tokens on one {n}-core node", f"{hours:,.0f} h",
             f"= {hours / 24:,.1f} days; {hours / 24 / 32:,.2f} days on 32 such nodes (linear in nodes)")
    line("3. peak RSS of the process tree, 1x corpus", f"{r2['peak_rss'] / 2**20:,.0f} MiB",
         f"{r2['procs']} processes at peak")
    line(f"   peak RSS of the process tree, {args.scale}x corpus", f"{rN['peak_rss'] / 2**20:,.0f} MiB",
         f"ratio {rN['peak_rss'] / r2['peak_rss']:.2f} (target <= 1.3); {rN['procs']} processes")
    line("4. shards in flight when SIGKILLed", f"{len(rk['killed'].get('in_flight', []))}",
         f"workers {workers}; {rk['killed'].get('receipts')} of {shards_total} shards had receipts")
    line("   tokens lost (rebuilt) from in-flight shards", f"{lost_tokens / 1e6:.2f}M",
         f"<= {workers} x largest shard {biggest / 1e6:.2f}M")
    line("   resumed run", f"{resumed['shards_built']} built",
         f"{resumed['shards_reused']} reused; output identical to uninterrupted: {same_after_resume}")
    line("   1 vs 2 workers byte-identical", str(identical), "")
    print(f"\ntokens: 1x {tokens1:,}, {args.scale}x {tokensN:,}; shards 1x {shards_total}")


if __name__ == "__main__":
    main()
