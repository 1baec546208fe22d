"""Benchmark of SFT packing and of `data prep sft` end to end; every ratio is measured in this run.

    python bench/packing.py [--skip-10m] [--skip-e2e]

1. 100,000 sequences whose lengths are resampled from the real SFT data (../shared/data/sft, rendered
   with our chat template and tokenized with the tiny config's tokenizer), packed at 4,096: best-fit
   decreasing (the stage's algorithm) next to plain first-fit (the O(n x bins) reference): seconds,
   ratio, fill, and both against the optimum bound (sum of lengths / pack size: no packing uses fewer packs).
2. 10 million sequences streamed (same length distribution) at 294,912 in windows of 100,000: wall
   time, peak memory of the process after 1M and after 10M sequences (bounded = no growth), and the fill
   a window costs against packing 1M sequences at once.
3. `data prep sft` on ../shared/data/sft/* (the tiny config, every record): tokens/s, fill, share of
   tokens truncated or dropped, trained-token fraction, and rows/s reading the Parquet back the way the
   packed loader does (row group by row group, one row at a time).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from nemotron.data import chat, packing  # noqa: E402
from data_prep_sft_support import SHARED_DATA, TEMPLATE, chat_tokenizer, compile_stage  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """Resident memory of this process now (MB)."""
    import os

    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def real_lengths(cache: str) -> np.ndarray:
    """Token lengths of every training sample of the shared SFT files, through the stage's own code."""
    tok, _ = chat_tokenizer(cache)
    template = chat.load_template(str(TEMPLATE))
    segs = []
    for name, form in (("fastchat-dummy-conversation.json", "sharegpt"), ("gpteacher-codegen-instruct.json", "alpaca")):
        for rec in json.loads((SHARED_DATA / "sft" / name).read_text()):
            try:
                msgs, tools = chat.normalise(rec, form)
                segs += [chat.segment(template, s, tools) for s in chat.training_samples(msgs)]
            except chat.RecordProblem:
                pass
    return np.array([len(t.ids) for t in chat.tokenize_samples(tok, segs)], dtype=np.int64)


def fill(bins: list[list[int]], sizes: np.ndarray, cap: int) -> float:
    return float(sizes.sum()) / (len(bins) * cap)


def bench_100k(lengths: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    sizes = np.array([packing.padded_length(int(n)) for n in rng.choice(lengths, 100_000)], dtype=np.int64)
    t = time.perf_counter()
    bfd = packing.best_fit_decreasing(sizes, 4096)
    t_bfd = time.perf_counter() - t
    t = time.perf_counter()
    ff = packing.first_fit(sizes, 4096)
    t_ff = time.perf_counter() - t
    print(f"100k sequences (lengths resampled from {len(lengths):,} real samples, mean {lengths.mean():.0f}, "
          f"max {lengths.max()}) at pack 4,096:")
    print(f"  best-fit decreasing: {t_bfd:.3f} s, {len(bfd):,} packs, fill {100 * fill(bfd, sizes, 4096):.2f}%")
    print(f"  first-fit reference: {t_ff:.3f} s, {len(ff):,} packs, fill {100 * fill(ff, sizes, 4096):.2f}%")
    bound = -(-int(sizes.sum()) // 4096)  # no packing can use fewer packs than sum of lengths / pack size
    print(f"  speed-up {t_ff / t_bfd:.1f}x; optimum bound (sum of lengths / pack size): {bound:,} packs, fill "
          f"{100 * float(sizes.sum()) / (bound * 4096):.2f}%; best-fit decreasing uses {len(bfd) - bound:,} packs "
          f"({100 * (len(bfd) - bound) / bound:.2f}%) more, first-fit {len(ff) - bound:,} "
          f"({100 * (len(ff) - bound) / bound:.2f}%)")


def bench_10m(lengths: np.ndarray) -> None:
    cap, window, total = 294_912, 100_000, 10_000_000
    rng = np.random.default_rng(1)

    def stream():
        for _ in range(total // window):
            yield from (packing.padded_length(int(n)) for n in rng.choice(lengths, window))

    rss0 = rss_mb()
    t = time.perf_counter()
    packs = items = 0
    marks: dict[int, float] = {}
    for bins in packing.pack_stream(stream(), cap, window):
        packs += len(bins)
        items += sum(len(b) for b in bins)
        for m in (1_000_000, 5_000_000):
            if m not in marks and items >= m:
                marks[m] = rss_mb()
    wall = time.perf_counter() - t
    marks[items] = rss_mb()
    rng2 = np.random.default_rng(1)
    sample = np.array([packing.padded_length(int(n)) for n in rng2.choice(lengths, window * 10)], dtype=np.int64)
    tokens = float(sample.sum())  # (the stream's first 1M sequences)
    whole = packing.best_fit_decreasing(sample, cap)
    windowed = [b for w in packing.pack_stream(sample.tolist(), cap, window) for b in w]
    print(f"10M sequences streamed at pack {cap:,}, window {window:,}: {wall:.1f} s "
          f"({items / wall / 1e6:.2f}M sequences/s), {packs:,} packs")
    print(f"  resident memory: {rss0:.0f} MB before, " + ", ".join(f"{v:.0f} MB after {k / 1e6:.0f}M"
                                                                   for k, v in marks.items())
          + f" (process peak {peak_rss_mb():.0f} MB, including the real-data tokenization before)")
    print(f"  fill on 1M of them: {100 * tokens / (len(windowed) * cap):.3f}% in windows of {window:,} vs "
          f"{100 * tokens / (len(whole) * cap):.3f}% packed at once ({len(windowed) - len(whole)} more packs)")


def bench_e2e() -> None:
    import pyarrow.parquet as pq
    import ray

    from nemotron.data.sft import Settings, prepare

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compile_stage("data-prep-sft", "tiny", output_dir=f"{tmp}/out", tokenizer__cache_dir=f"{tmp}/tok",
                            path_vars__shared_data=str(SHARED_DATA))
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
        try:
            t = time.perf_counter()
            m = prepare(Settings.from_config(cfg), quiet=True)
            wall = time.perf_counter() - t
        finally:
            ray.shutdown()
        p, tot = m["packing"]["train"], m["totals"]
        print(f"data prep sft on ../shared/data/sft/* + the stage's sample ({tot['records']:,} records, "
              f"{tot['samples']:,} samples, 2 workers, Ray already up):")
        print(f"  {wall:.1f} s wall, {tot['tokens'] / wall / 1e3:.0f}k tokens/s end to end "
              f"(tokenize {m['run']['tokenize_seconds']:.1f} s, pack {m['run']['pack_seconds']:.1f} s)")
        print(f"  fill {100 * p['fill']:.2f}%, trained-token fraction {100 * p['trained_fraction']:.1f}% of pack "
              f"capacity ({100 * p['learned_fraction_of_tokens']:.1f}% of tokens), truncated or dropped "
              f"{100 * tot['lost_fraction']:.2f}% of tokens")
        path = m["loader"]["packed_train_data_path"]
        t = time.perf_counter()
        pf = pq.ParquetFile(path)
        rows = 0
        for g in range(pf.metadata.num_row_groups):
            table = pf.read_row_group(g, columns=["input_ids", "seq_start_id", "loss_mask"])
            for r in range(table.num_rows):
                table.column("input_ids")[r].as_py()
                table.column("seq_start_id")[r].as_py()
                table.column("loss_mask")[r].as_py()
                rows += 1
        dt = time.perf_counter() - t
        print(f"  read back: {rows:,} rows in {dt:.2f} s = {rows / dt:,.0f} rows/s "
              f"({rows * 4096 / dt / 1e6:.1f}M token slots/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-10m", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    args = parser.parse_args()
    if not (SHARED_DATA / "sft").is_dir():
        sys.exit(f"the shared data folder {SHARED_DATA / 'sft'} is absent: the benchmark needs the real SFT data")
    with tempfile.TemporaryDirectory() as cache:
        lengths = real_lengths(cache)
    bench_100k(lengths)
    if not args.skip_10m:
        bench_10m(lengths)
    if not args.skip_e2e:
        bench_e2e()


if __name__ == "__main__":
    main()
