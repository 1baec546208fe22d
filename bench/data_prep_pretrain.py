"""Benchmark of `nemotron ultra3 data prep pretrain` (a script, not a test).

    python bench/data_prep_pretrain.py [--copies 2] [--small-mb 5] [--scale 8] [--skip ...]

Corpus: the Python standard library sources (every .py file outside site-packages is one record), written
as JSONL; the 1x corpus is ``--copies`` copies (two: ~65 MB), the small one its first ``--small-mb`` MB.
Tokenizer: the tiny config's 131,072-entry Tekken BPE. The machine may be shared, so every figure is a
ratio to a reference measured in the same run, interleaved with it (reference, ours, reference, ours: each
of our runs is divided by the mean of the references right before and after it) and the pairs averaged:

1. end to end (the whole `run.py` process: interpreter start, config, tokenizer, planning, tokenizing,
   writing, manifest) tokens/s over the raw tokens/s of the same tokenizer batch-encoding the same text in
   memory (``encode_batch_fast``, its Rust thread pool pinned to the same thread count) — targets: >= 0.8 at
   the 1x corpus, >= 0.5 at the small one. The default engine (``workers.engine=auto``: in this process
   below ``workers.in_process_max_bytes``) and, once, Ray (``workers.engine=ray``).
2. Megatron-LM's own ``tools/preprocess_data.py`` (the pinned archive in ../shared/upstream, run by the
   contract interpreter .venv-upstream) on the same JSONL file, the same tokenizer folder (the one our
   output carries) and the same worker count, ``--append-eod``: wall time of both, and whether the token
   streams are identical. They are with ``tokenizer.split_special_tokens=false``; our default keeps the
   literal text ``<s>``, ``</s>``, ``<unk>`` (and any other special token's text) as text, so a document
   cannot inject an EOS: the count of documents whose tokens that changes is printed.
3. tokens/s per worker with 1 and 2 workers (task seconds), against the raw tokenizer on 1 thread and per
   thread, and the wall-clock time per node of N cores that follows for the Ultra phase-1 budget.
4. peak memory of the whole process tree as PSS (proportional set size, /proc/<pid>/smaps_rollup: a page
   shared by k processes counts 1/k in each, so shared libraries and Ray's shared memory count once), at
   1x and ``--scale`` x the corpus — target ratio <= 1.3 (flat); the summed RSS is printed beside it.
5. work lost when the run is SIGKILLed mid-way, and whether the resumed output equals the uninterrupted
   one byte for byte.
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
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "data"), str(ROOT / "tests" / "contract")]

from data_prep_pretrain_support import STAGE_DIR, descendants, load_config, tree_rss_bytes  # noqa: E402

RAW_SCRIPT = r"""
import json, os, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1]); tok.encode_special_tokens = True
texts = [json.loads(l)["text"] for f in sys.argv[3:] for l in open(f, encoding="utf-8")]
batch_chars = int(sys.argv[2])
batches, cur, n = [], [], 0
for t in texts:
    cur.append(t); n += len(t)
    if n >= batch_chars:
        batches.append(cur); cur, n = [], 0
if cur: batches.append(cur)
tok.encode_batch_fast(batches[0][:4], add_special_tokens=False)  # warm the thread pool
tokens, t0 = 0, time.perf_counter()
for b in batches:
    tokens += sum(len(e.ids) for e in tok.encode_batch_fast(b, add_special_tokens=False))
print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - t0}))
"""


# --------------------------------------------------------------------------------------------------
# corpus and measurements


def stdlib_records() -> list[str]:
    """Every stdlib .py file outside site-packages as one JSONL line ``{"text", "path"}``, sorted by path."""
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
    return records


def write_once(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.stat().st_size != len(data):
        path.write_bytes(data)
    return path


def make_corpus(folder: Path, copies: int) -> tuple[list[Path], int]:
    """Write the stdlib corpus as JSONL, ``copies`` files of one copy each; returns (files, bytes)."""
    data = ("\n".join(stdlib_records()) + "\n").encode()
    files = [write_once(folder / f"stdlib-{i:03d}.jsonl", data) for i in range(copies)]
    return files, len(data) * copies


def make_small(folder: Path, megabytes: float) -> tuple[Path, int]:
    """The first records of the stdlib corpus up to ``megabytes`` MB, as one JSONL file."""
    out, size = [], 0
    for rec in stdlib_records():
        out.append(rec)
        size += len(rec.encode()) + 1
        if size >= megabytes * 1e6:
            break
    data = ("\n".join(out) + "\n").encode()
    return write_once(folder / f"small-{megabytes:g}mb.jsonl", data), len(data)


def pss_bytes(pid: int) -> int:
    """Proportional set size of one process (bytes, from /proc/<pid>/smaps_rollup; 0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss_bytes(pid: int) -> int:
    """PSS of ``pid`` and all its descendants, summed: each shared page counted once over the tree."""
    return sum(pss_bytes(p) for p in [pid, *descendants(pid)])


def run_pipeline(cfg: dict, work: Path, name: str, kill_after_receipts: int | None = None, resume: bool = False) -> dict:
    """Run `run.py` on ``cfg`` in a subprocess; sample the process tree's PSS and RSS every 200 ms.
    The output folder is emptied first unless ``resume`` (a rerun of a work folder must redo the work)."""
    if not resume:
        import shutil

        shutil.rmtree(cfg["output_dir"], ignore_errors=True)
    cfg_path = work / f"{name}.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(STAGE_DIR / "run.py"), "--config", str(cfg_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    peak = {"pss": 0, "rss": 0, "procs": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak["pss"] = max(peak["pss"], tree_pss_bytes(proc.pid))
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
                in_flight = sorted({f"{p.parent.name}/{p.name.split('.')[0]}" for p in out.rglob("*.tmp-*")})
                for pid in [proc.pid, *descendants(proc.pid)]:
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
    return {"wall": wall, "peak_pss": peak["pss"], "peak_rss": peak["rss"], "procs": peak["procs"],
            "manifest": manifest, "killed": killed, "log": log}


def shard_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.suffix in (".bin", ".idx")}


def token_stream(prefixes: list[str]) -> tuple[Any, Any]:
    """``(tokens, lengths)`` of Megatron indexed datasets read back in order (numpy arrays)."""
    import numpy as np

    from nemotron.data.indexed import read_index

    toks, lens = [], []
    for prefix in prefixes:
        ix = read_index(prefix)
        toks.append(np.fromfile(prefix + ".bin", dtype=np.dtype(ix["dtype"]).newbyteorder("<")).astype(np.int64))
        lens.append(np.asarray(ix["lengths"], dtype=np.int64))
    return np.concatenate(toks), np.concatenate(lens)


def docs_differing(a: tuple[Any, Any], b: tuple[Any, Any]) -> int | None:
    """How many documents differ between two token streams of the same documents (None: counts differ)."""
    import numpy as np

    (ta, la), (tb, lb) = a, b
    if len(la) != len(lb):
        return None
    oa = np.concatenate([[0], np.cumsum(la)])
    ob = np.concatenate([[0], np.cumsum(lb)])
    return sum(1 for i in range(len(la)) if la[i] != lb[i] or not np.array_equal(ta[oa[i]:oa[i + 1]], tb[ob[i]:ob[i + 1]]))


def megatron_preprocess(jsonl: Path, tokenizer_folder: Path, prefix: Path, workers: int) -> float:
    """Wall seconds of Megatron-LM's tools/preprocess_data.py (pinned archive, contract interpreter) on
    ``jsonl``, writing ``<prefix>_text_document.bin/.idx``."""
    import upstream

    u = upstream.Upstream(upstream.sources())
    env = u.env()
    env.pop("TOKENIZERS_PARALLELISM", None)  # as a user runs it
    prefix.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run([str(u.python), str(upstream.BOOT), str(u.megatron_lm / "tools" / "preprocess_data.py"),
                           "--input", str(jsonl), "--json-keys", "text", "--tokenizer-type", "HuggingFaceTokenizer",
                           "--tokenizer-model", str(tokenizer_folder), "--output-prefix", str(prefix),
                           "--workers", str(workers), "--append-eod"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"Megatron-LM preprocess_data.py exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return wall


# --------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=2, help="stdlib copies in the 1x corpus (2 = ~65 MB of JSONL)")
    ap.add_argument("--small-mb", type=float, default=5.0, help="size of the small corpus (MB)")
    ap.add_argument("--scale", type=int, default=8, help="the large corpus is this many times the 1x corpus")
    ap.add_argument("--pairs", type=int, default=2, help="interleaved (reference, ours) pairs per size")
    ap.add_argument("--cores", type=int, nargs="*", default=[64, 128], help="node sizes for the projection")
    ap.add_argument("--target-tokens", type=int, default=2_000_000, help="shards.target_tokens")
    ap.add_argument("--ultra-tokens", type=float, default=15e12,
                    help="tokens to prepare for the phase-1 projection (default: phase 1's 15T training budget)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["ray", "megatron", "workers", "memory", "kill"],
                    help="sections to leave out")
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args()

    cores = os.cpu_count() or 1
    workers = min(2, cores)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-pretrain-"))
    tok_cache = work / "tokenizers"
    files1, bytes1 = make_corpus(work / "corpus", args.copies)
    small, bytes_small = make_small(work / "corpus", args.small_mb)
    print(f"machine: {cores} cores, load {os.getloadavg()[0]:.1f}; corpus 1x = {bytes1 / 1e6:.1f} MB "
          f"({len(files1)} JSONL files), small = {bytes_small / 1e6:.1f} MB; work folder {work}", flush=True)

    def cfg(name: str, files: list[Path], n_workers: int, **extra: Any) -> dict:
        blend = work / f"{name}-blend.json"
        blend.write_text(json.dumps({"datasets": [{"name": "stdlib", "path": str(f), "weight": 1.0, "category": "code"}
                                                  for f in files[:1]]
                                     + [{"name": f"stdlib-{i}", "path": str(f), "weight": 1.0, "category": "code"}
                                        for i, f in enumerate(files[1:], 1)]}))
        return load_config("tiny", blend_path=str(blend), output_dir=str(work / "out" / name),
                           tokenizer__cache_dir=str(tok_cache), path_vars={},
                           shards={"target_tokens": args.target_tokens},
                           workers={"count": n_workers, **extra.pop("workers", {})},
                           run={"env": {"nodes": 1, "gpus_per_node": None, "cpus": n_workers}}, **extra)

    from nemotron.data import tokenizer as tk

    info = tk.resolve(load_config("tiny", path_vars={})["tokenizer"]["name"], cache_dir=tok_cache)  # converted once

    def raw(threads: int, files: list[Path]) -> tuple[float, int]:
        env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true"}
        r = json.loads(subprocess.run([sys.executable, "-c", RAW_SCRIPT, info.json_path, "1048576", *map(str, files)],
                                      env=env, capture_output=True, text=True, check=True).stdout)
        return r["tokens"] / r["seconds"], r["tokens"]

    def paired(name: str, files: list[Path], n_workers: int, pairs: int, **extra: Any) -> dict:
        """``pairs`` runs of ours, each between two raw references (R O R O R); ratio per run, averaged."""
        refs = [raw(n_workers, files)[0]]
        runs, ratios = [], []
        for k in range(pairs):
            r = run_pipeline(cfg(f"{name}-{k}", files, n_workers, **extra), work, f"{name}-{k}")
            refs.append(raw(n_workers, files)[0])
            m = r["manifest"]
            tokens = sum(m["totals"]["tokens"].values())
            r["tps"] = tokens / r["wall"]
            r["work_tps"] = tokens / m["run"]["work_seconds"]
            ratios.append(r["tps"] / ((refs[k] + refs[k + 1]) / 2))
            runs.append(r)
            print(f"  {name} run {k + 1}: {r['wall']:.1f}s wall, {r['tps'] / 1e6:.3f}M tok/s, raw "
                  f"{refs[k] / 1e6:.3f}M/{refs[k + 1] / 1e6:.3f}M -> {ratios[-1]:.2f} "
                  f"({m['run'].get('engine')})", flush=True)
        return {"runs": runs, "ratio": sum(ratios) / len(ratios), "ratios": ratios, "raw": sum(refs) / len(refs),
                "tokens": sum(runs[0]["manifest"]["totals"]["tokens"].values()), "manifest": runs[0]["manifest"]}

    rows: list[tuple[str, str, str]] = []
    line = rows.append

    print("1. end to end against the raw tokenizer", flush=True)
    big = paired("x1", files1, workers, args.pairs)
    little = paired("small", [small], workers, args.pairs)
    m1 = big["manifest"]
    docs1 = sum(sum(d["documents"].values()) for d in m1["datasets"])
    raw_tokens = raw(workers, files1)[1]
    assert big["tokens"] - docs1 == raw_tokens, (big["tokens"], docs1, raw_tokens)  # one EOS per document
    line(("1. end to end tok/s, 1x corpus (whole run.py, engine " + m1["run"]["engine"] + ")",
          f"{sum(r['tps'] for r in big['runs']) / args.pairs / 1e6:.3f}M",
          f"raw batch-encode {big['raw'] / 1e6:.3f}M, {workers} threads: ratio {big['ratio']:.2f} "
          f"(pairs {', '.join(f'{x:.2f}' for x in big['ratios'])}; target >= 0.8)"))
    line((f"   end to end tok/s, small corpus {bytes_small / 1e6:.1f} MB", f"{sum(r['tps'] for r in little['runs']) / args.pairs / 1e6:.3f}M",
          f"raw {little['raw'] / 1e6:.3f}M: ratio {little['ratio']:.2f} (pairs "
          f"{', '.join(f'{x:.2f}' for x in little['ratios'])}; target >= 0.5)"))
    line(("   tokenizing phase only, 1x", f"{big['runs'][0]['work_tps'] / 1e6:.3f}M",
          f"ratio {big['runs'][0]['work_tps'] / big['raw']:.2f}"))
    if "ray" not in args.skip:
        ray1 = paired("x1-ray", files1, workers, 1, workers={"engine": "ray"})
        line(("   end to end tok/s, 1x corpus, workers.engine=ray", f"{ray1['runs'][0]['tps'] / 1e6:.3f}M",
              f"raw {ray1['raw'] / 1e6:.3f}M: ratio {ray1['ratio']:.2f}; Ray's start-up and shutdown included "
              f"({ray1['runs'][0]['wall'] - ray1['tokens'] / ray1['runs'][0]['work_tps']:.1f}s outside the tokenizing phase)"))
        same = shard_bytes(work / "out" / "x1-ray-0") == shard_bytes(work / "out" / "x1-0")
        line(("   Ray and in-process outputs byte-identical", str(same), ""))

    if "megatron" not in args.skip:
        print("2. Megatron-LM tools/preprocess_data.py on the same JSONL", flush=True)
        for label, jsonl in (("1 stdlib copy", files1[0]), ("small corpus", small)):
            ours = run_pipeline(cfg(f"mlm-ours-{jsonl.stem}", [jsonl], workers,
                                    tokenizer={"split_special_tokens": False}), work, f"mlm-ours-{jsonl.stem}")
            # the tokenizer folder that output carries (its tokenizer_config.json says split_special_tokens: false,
            # which is also what AutoTokenizer does with a bare tokenizer.json)
            folder = work / "out" / f"mlm-ours-{jsonl.stem}" / "tokenizer"
            mlm_wall = megatron_preprocess(jsonl, folder, work / "mlm" / jsonl.stem, workers)
            ours_b = run_pipeline(cfg(f"mlm-ours-b-{jsonl.stem}", [jsonl], workers,
                                      tokenizer={"split_special_tokens": False}), work, f"mlm-ours-b-{jsonl.stem}")
            ours_wall = (ours["wall"] + ours_b["wall"]) / 2
            mine = token_stream([s["prefix"] for s in ours["manifest"]["shards"]])
            theirs = token_stream([str(work / "mlm" / f"{jsonl.stem}_text_document")])
            identical = bool(len(mine[0]) == len(theirs[0]) and (mine[0] == theirs[0]).all()
                             and (mine[1] == theirs[1]).all())
            default = token_stream([s["prefix"] for s in run_pipeline(cfg(f"mlm-default-{jsonl.stem}", [jsonl], workers),
                                                                      work, f"mlm-default-{jsonl.stem}")["manifest"]["shards"]])
            changed = docs_differing(default, theirs)
            line((f"2. Megatron-LM preprocess_data.py, {label} ({jsonl.stat().st_size / 1e6:.1f} MB), {workers} workers",
                  f"{ours_wall:.1f}s ours", f"Megatron {mlm_wall:.1f}s (run between our two): {mlm_wall / ours_wall:.1f}x "
                  f"faster; token streams identical (split_special_tokens=false): {identical}; our default "
                  f"(special-token text kept as text) changes {changed} of {len(theirs[1])} documents"))

    if "workers" not in args.skip:
        print("3. tokens/s per worker", flush=True)
        r1 = run_pipeline(cfg("x1-w1", files1, 1), work, "x1-w1")
        raw1 = (raw(1, files1)[0] + raw(1, files1)[0]) / 2
        def per_worker(m: dict) -> float:
            # a task's seconds; in process one task at a time holds every worker's threads
            held = m["run"]["workers"] if m["run"].get("engine") == "in_process" else 1
            return big["tokens"] / (sum(d["seconds"] for d in m["datasets"]) * held)

        per1, per2 = per_worker(r1["manifest"]), per_worker(m1)
        line(("3. tokens/s per worker, 1 worker", f"{per1 / 1e6:.3f}M", f"raw 1 thread {raw1 / 1e6:.3f}M -> {per1 / raw1:.2f}"))
        line((f"   tokens/s per worker, {workers} workers", f"{per2 / 1e6:.3f}M",
              f"raw {big['raw'] / workers / 1e6:.3f}M per thread -> {per2 / (big['raw'] / workers):.2f}"))
        for n in args.cores:
            hours = args.ultra_tokens / (per2 * n) / 3600
            line((f"   projected: {args.ultra_tokens / 1e12:.0f}T tokens on one {n}-core node", f"{hours:,.0f} h",
                  f"= {hours / 24:,.1f} days; {hours / 24 / 32:,.2f} days on 32 such nodes (linear in nodes)"))
        line(("   1 vs 2 workers byte-identical", str(shard_bytes(work / "out" / "x1-w1") == shard_bytes(work / "out" / "x1-0")), ""))

    if "memory" not in args.skip:
        print("4. peak memory (PSS) at 1x and large", flush=True)
        filesN, bytesN = make_corpus(work / "corpus", args.copies * args.scale)
        rN = run_pipeline(cfg(f"x{args.scale}", filesN, workers), work, f"x{args.scale}")
        r1m = big["runs"][0]
        line(("4. peak PSS of the process tree, 1x corpus", f"{r1m['peak_pss'] / 2**20:,.0f} MiB",
              f"summed RSS {r1m['peak_rss'] / 2**20:,.0f} MiB; {r1m['procs']} processes at peak"))
        line((f"   peak PSS, {args.scale}x corpus ({bytesN / 1e6:,.0f} MB)", f"{rN['peak_pss'] / 2**20:,.0f} MiB",
              f"ratio {rN['peak_pss'] / r1m['peak_pss']:.2f} (target <= 1.3); summed RSS {rN['peak_rss'] / 2**20:,.0f} MiB; "
              f"{rN['procs']} processes; engine {rN['manifest']['run']['engine']}"))
        if "ray" not in args.skip:
            rr = ray1["runs"][0]
            line(("   peak PSS, 1x corpus, workers.engine=ray", f"{rr['peak_pss'] / 2**20:,.0f} MiB",
                  f"summed RSS {rr['peak_rss'] / 2**20:,.0f} MiB (counts shared pages once per process); {rr['procs']} processes"))

    if "kill" not in args.skip:
        print("5. SIGKILL and resume", flush=True)
        kcfg = cfg("kill", files1, workers)
        shards_total = len(m1["shards"])
        rk = run_pipeline(kcfg, work, "kill", kill_after_receipts=max(shards_total // 3, 1))
        rr2 = run_pipeline(kcfg, work, "kill-resume", resume=True)
        resumed = rr2["manifest"]["run"]
        same_after_resume = shard_bytes(work / "out" / "kill") == shard_bytes(work / "out" / "x1-0")
        lost = sum(s["tokens"] for s in m1["shards"] if s["id"] in rk["killed"].get("in_flight", []))
        biggest = max(s["tokens"] for s in m1["shards"])
        line(("5. shards in flight when SIGKILLed", f"{len(rk['killed'].get('in_flight', []))}",
              f"workers {workers}; {rk['killed'].get('receipts')} of {shards_total} shards had receipts"))
        line(("   tokens lost (rebuilt) from in-flight shards", f"{lost / 1e6:.2f}M",
              f"<= {workers} x largest shard {biggest / 1e6:.2f}M"))
        line(("   resumed run", f"{resumed['shards_built']} built",
              f"{resumed['shards_reused']} reused; output identical to uninterrupted: {same_after_resume}"))

    print()
    print(f"{'figure':64s} {'measured':>12s}   reference (same run)")
    for a, b, c in rows:
        print(f"{a:64s} {b:>12s}   {c}")
    print(f"\ntokens: 1x {big['tokens']:,}, small {little['tokens']:,}; shards 1x {len(m1['shards'])}; "
          f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
