"""Cost of running a Ray stage as a Slurm job that starts its own Ray cluster: the tiny pretraining
data prep (`sample=30`) run here on a local Ray (the reference, same run) and with `--run` on the local
Slurm cluster (host Python), with the seconds from the job's start until its Ray cluster was up (read
from the job's own log line "Ray cluster up: ... Ns after the job started").

Needs the local cluster: `bash scripts/local_slurm.sh start` (as root), then
`eval "$(bash scripts/local_slurm.sh env)"` and

    python bench/ray_slurm_startup.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

from bench_support import slurm_profile, timed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = slurm_profile(tmp, "00:10:00")
        if found is None:
            return 2
        env_file = found[0]
        env = {**os.environ, "NEMOTRON_HOME": f"{tmp}/home"}
        base = [sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "pretrain", "-c", "tiny", "sample=30",
                "--env-file", str(env_file)]
        rows: dict[str, list[float]] = {"here, local Ray (reference)": [], "--run on Slurm, Ray cluster in the job": [],
                                        "  of which: job start -> Ray cluster up": []}
        for i in range(args.repeat):
            for name, extra in (("here, local Ray (reference)", []), ("--run on Slurm, Ray cluster in the job", ["--run", "ci"])):
                t, proc = timed([*base, *extra, f"output_dir={tmp}/out-{i}-{len(extra)}"], env, tmp)
                rows[name].append(t)
                if proc.returncode != 0:
                    print(f"{name}: exit {proc.returncode}: {proc.stderr[-500:]}", file=sys.stderr)
                    return 1
                if extra:
                    job_id = re.search(r"Slurm job (\d+)", proc.stderr).group(1)
                    log = next(Path(tmp, "jobs", "experiments").glob(f"*/*/*/sbatch_*_{job_id}.out")).read_text()
                    rows["  of which: job start -> Ray cluster up"].append(
                        float(re.search(r"Ray cluster up: .*?(\d+)s after the job started", log).group(1)))
        print(f"{'case (data prep pretrain -c tiny sample=30)':48s} {'median s':>9s} {'min s':>7s} {'max s':>7s}")
        for name, times in rows.items():
            print(f"{name:48s} {statistics.median(times):9.1f} {min(times):7.1f} {max(times):7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
