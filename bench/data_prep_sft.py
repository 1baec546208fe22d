"""Benchmark of `nemotron ultra3 data prep sft` against the plain loop it must come close to (a script, not a test).

    python bench/data_prep_sft.py [--pairs 2] [--target-kib 256]

Data: the tiny config's blend — its own chat sample plus ../shared/data/sft (FastChat's 500 ShareGPT chats
and GPTeacher's 4,535 Alpaca records, one JSON array file each). Tokenizer: the tiny config's (Tekken +
chat tokens). Every figure is a ratio to a reference measured in the same run, interleaved with it
(reference, ours, reference, ours, ...; each of ours against the mean of the two references around it):

* reference: the plain single-thread loop over the same records, already parsed: normalise the record
  to messages, render the chat template once, encode the text (``Tokenizer.encode``, one Rust thread) —
  rows/s. It computes no mask, no split, writes nothing.
* ours, per worker: rows / the tokenizing tasks' own seconds (their receipts) — target >= 0.7 x the loop;
  with 1 worker (``workers.engine=auto`` runs it in this process) and with 2 workers (Ray), the large
  GPTeacher array cut into ``--target-kib`` shards so both workers get work: the tokenizing phase's wall
  time with 2 workers against 1 (scaling), and the whole run end to end (rows/s of the `run.py` process).
* the segmentation alone: one render per conversation (:func:`nemotron.data.chat.segment`) against the
  prefix renders of the definition (:func:`nemotron.data.chat.segment_by_prefixes`), same samples.
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
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "data")]

from test_data_prep_sft_support import SFT_DIR, SHARED_DATA, chat_tokenizer, compile_stage  # noqa: E402

LOOP = r"""
import json, os, sys, time
sys.path[:0] = sys.argv[3:4]
from tokenizers import Tokenizer
from nemotron.data import chat
from nemotron.data.records import iter_objects
from nemotron.data.sources import Piece, detect_format
tok = Tokenizer.from_file(sys.argv[1]); tok.encode_special_tokens = False
template = chat.load_template(sys.argv[2])
inputs = json.loads(sys.argv[4])
records = [(obj, schema) for path, schema in inputs
           for _p, _k, obj, problem, _d in iter_objects(Piece(path, detect_format(path))) if problem is None]
tok.encode("warm up", add_special_tokens=False)
rows, tokens, t0 = 0, 0, time.perf_counter()
for obj, schema in records:
    try:
        msgs, tools = chat.normalise(obj, schema)
    except chat.RecordProblem:
        continue
    text = template.render(msgs, tools)
    tokens += len(tok.encode(text, add_special_tokens=False).ids)
    rows += 1
print(json.dumps({"rows": rows, "records": len(records), "tokens": tokens, "seconds": time.perf_counter() - t0}))
"""


def loop_reference(tok_json: str, inputs: list[tuple[str, str | None]]) -> dict[str, Any]:
    """The plain loop in a fresh process, one tokenizer thread (see the module docstring)."""
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, "-c", LOOP, tok_json, str(SFT_DIR / "nemotron3_chat.jinja"),
                          str(ROOT / "src"), json.dumps(inputs)], env=env, capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    r["rows_per_s"] = r["rows"] / r["seconds"]
    return r


def run_stage(cfg: dict[str, Any], work: Path, name: str) -> dict[str, Any]:
    """``run.py`` of the SFT stage on ``cfg`` in a subprocess: wall seconds and the manifest."""
    import shutil

    shutil.rmtree(cfg["output_dir"], ignore_errors=True)  # a rerun of a work folder must redo the work
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(SFT_DIR / "run.py"), "--config", str(path)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: run.py exited {proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}")
    out = Path(cfg["output_dir"])
    manifest = json.loads((out / "manifest.json").read_text())
    receipts = [json.loads(p.read_text()) for p in sorted((out / "data" / "sequences").rglob("*.receipt.json"))]
    return {"wall": wall, "manifest": manifest, "receipts": receipts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2, help="interleaved (reference, ours) pairs per worker count")
    ap.add_argument("--target-kib", type=int, default=256, help="shards.target_bytes of the 2-worker runs (KiB)")
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args()
    if not (SHARED_DATA / "sft").is_dir():
        raise SystemExit(f"{SHARED_DATA / 'sft'}: absent; this benchmark reads the shared SFT files")
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-sft-"))
    tok_cache = str(work / "tokenizers")
    tok, ct = chat_tokenizer(tok_cache)
    blend = json.loads((SFT_DIR / "blends" / "tiny.json").read_text())
    subst = {"{stage_dir}": str(SFT_DIR), "{shared_data}": str(SHARED_DATA)}
    inputs = []
    for d in blend["datasets"]:
        path = d["path"]
        for k, v in subst.items():
            path = path.replace(k, v)
        inputs.append((path, d.get("format")))
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; work folder {work}", flush=True)

    def cfg(name: str, n_workers: int, **extra: Any) -> dict[str, Any]:
        return compile_stage("data-prep-sft", "tiny", output_dir=str(work / "out" / name), tokenizer__cache_dir=tok_cache,
                             path_vars={"shared_data": str(SHARED_DATA)}, workers={"count": n_workers},
                             run={"env": {"nodes": 1, "gpus_per_node": None, "cpus": n_workers}}, **extra)

    refs = [loop_reference(ct.info.json_path, inputs)]
    print(f"  reference loop: {refs[0]['rows']:,} rows in {refs[0]['seconds']:.2f}s", flush=True)
    results: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for k in range(args.pairs):
        for n in (1, 2):
            extra = {"shards": {"target_bytes": args.target_kib * 1024}} if n == 2 else {}
            r = run_stage(cfg(f"w{n}-{k}", n, **extra), work, f"w{n}-{k}")
            refs.append(loop_reference(ct.info.json_path, inputs))
            ref = (refs[-2]["rows_per_s"] + refs[-1]["rows_per_s"]) / 2
            m = r["manifest"]
            rows = m["totals"]["records"]
            task_s = sum(x["seconds"] for x in r["receipts"])
            r.update(rows=rows, ref=ref, per_worker=rows / task_s, ratio=rows / task_s / ref,
                     e2e=rows / r["wall"], tokenize_s=m["run"]["tokenize_seconds"], shards=len(r["receipts"]))
            results[n].append(r)
            print(f"  {n} worker(s), run {k + 1}: {r['wall']:.1f}s wall, tokenize phase {r['tokenize_s']:.2f}s, "
                  f"{r['per_worker']:,.0f} rows/s per worker vs loop {ref:,.0f} -> {r['ratio']:.2f} "
                  f"({m['run']['engine']}, {r['shards']} shards)", flush=True)

    # segmentation alone: one render against the prefix renders, same samples, this process
    from nemotron.data import chat
    from nemotron.data.records import iter_objects
    from nemotron.data.sources import Piece, detect_format

    template = chat.load_template(str(SFT_DIR / "nemotron3_chat.jinja"))
    samples = []
    for path, schema in inputs:
        for _p, _k, obj, problem, _d in iter_objects(Piece(path, detect_format(path))):
            if problem is None:
                try:
                    msgs, tools = chat.normalise(obj, schema)
                except chat.RecordProblem:
                    continue
                samples.extend((smp, tools) for smp in chat.training_samples(msgs))
    template.one_render_agrees()
    seg_times = []
    for fn in (chat.segment_by_prefixes, chat.segment, chat.segment_by_prefixes, chat.segment):
        t0 = time.perf_counter()
        for smp, tools in samples:
            fn(template, smp, tools)
        seg_times.append(time.perf_counter() - t0)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    from output_hashes import sft_hashes  # content hashes of sequences, masks and packed columns

    hashes = [sft_hashes(Path(r["manifest"]["path"]), r["manifest"]) for r in results[1] + results[2]]
    same = all(h == hashes[0] for h in hashes)
    print()
    print(f"{'figure':60s} {'measured':>14s}   reference (same run)")
    row = lambda a, b, c: print(f"{a:60s} {b:>14s}   {c}")  # noqa: E731
    r1, r2 = results[1], results[2]
    row("rows/s per worker, 1 worker (" + r1[0]["manifest"]["run"]["engine"] + ")", f"{mean([r['per_worker'] for r in r1]):,.0f}",
        f"plain loop {mean([r['ref'] for r in r1]):,.0f} rows/s, 1 thread -> {mean([r['ratio'] for r in r1]):.2f} "
        f"(pairs {', '.join(format(r['ratio'], '.2f') for r in r1)}; target >= 0.7)")
    row(f"rows/s per worker, 2 workers ({r2[0]['manifest']['run']['engine']}, {r2[0]['shards']} shards)",
        f"{mean([r['per_worker'] for r in r2]):,.0f}",
        f"plain loop {mean([r['ref'] for r in r2]):,.0f} -> {mean([r['ratio'] for r in r2]):.2f} (target >= 0.7)")
    row("tokenizing phase wall, 2 workers vs 1", f"{mean([r['tokenize_s'] for r in r2]):.2f}s",
        f"1 worker {mean([r['tokenize_s'] for r in r1]):.2f}s -> speed-up {mean([r['tokenize_s'] for r in r1]) / mean([r['tokenize_s'] for r in r2]):.2f}x "
        "(2 cores shared with other work)")
    row("end to end rows/s (whole run.py), 1 worker", f"{mean([r['e2e'] for r in r1]):,.0f}",
        f"plain loop {mean([r['ref'] for r in r1]):,.0f} -> {mean([r['e2e'] for r in r1]) / mean([r['ref'] for r in r1]):.2f}")
    row("end to end rows/s (whole run.py), 2 workers", f"{mean([r['e2e'] for r in r2]):,.0f}",
        f"plain loop {mean([r['ref'] for r in r2]):,.0f} -> {mean([r['e2e'] for r in r2]) / mean([r['ref'] for r in r2]):.2f}"
        " (Ray start-up included)")
    row(f"segmentation, one render ({len(samples):,} samples)", f"{mean(seg_times[1::2]):.2f}s",
        f"prefix renders {mean(seg_times[0::2]):.2f}s -> {mean(seg_times[0::2]) / mean(seg_times[1::2]):.1f}x fewer seconds")
    row("sequences, masks and packs identical across runs and worker counts", str(same), "(content hashes)")
    print(f"\nrows {r1[0]['rows']:,}; load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
