"""Latency of `--batch` submission to the local Slurm cluster and of a Slurm-profile `--dry-run`,
next to `python -c pass` and a bare `sbatch --wrap true` measured in the same run.

Needs the local cluster: `bash scripts/local_slurm.sh start` (as root), then
`eval "$(bash scripts/local_slurm.sh env)"` and

    python bench/submit_latency.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from bench_support import slurm_profile, timed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = slurm_profile(tmp, "00:05:00")
        if found is None:
            return 2
        env_file, cluster = found
        account, partition = str(cluster["account"]), str(cluster["partition"])
        env = {**os.environ, "NEMOTRON_HOME": f"{tmp}/home"}
        cli = [sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "rl", "-c", "tiny", "--env-file", str(env_file)]
        cases = [
            ("python -c pass (reference)", [sys.executable, "-c", "pass"]),
            ("sbatch --wrap true (reference)", ["sbatch", "-A", account, "-p", partition, "--parsable", "--wrap", "true"]),
            ("nemotron --dry-run, Slurm profile", [*cli, "--dry-run", "--batch", "ci"]),
            ("nemotron --batch (submit, detached)", [*cli, "--batch", "ci", "profile.setup=[\"exit 0\"]"]),
        ]
        print(f"{'case':40s} {'median s':>9s} {'min s':>7s} {'max s':>7s}")
        for name, argv in cases:
            times = []
            for _ in range(args.repeat):
                t, proc = timed(argv, env, tmp)
                if proc.returncode != 0:
                    print(f"{name}: exit {proc.returncode}: {proc.stderr[-300:]}", file=sys.stderr)
                    return 1
                times.append(t)
            print(f"{name:40s} {statistics.median(times):9.3f} {min(times):7.3f} {max(times):7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
