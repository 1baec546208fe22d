"""Cost of running a stage through a `local` profile (NeMo-Run's LocalExecutor under a supervisor
process) next to the same stage run with no profile (a direct child process) in the same run.

Cases, each the real `nemotron ultra3 data prep rl -c tiny` on the shared sample data:
  python -c pass                      interpreter start (reference)
  no profile                          direct child process (reference: the fast path)
  --run local profile                 package + supervisor + NeMo-Run LocalExecutor, attached to the end
  --batch local profile               until the job id is printed (the job keeps running)

    python bench/local_executor.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_support import timed


def main() -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / "env.toml"
        env_file.write_text(f'[here]\nexecutor = "local"\ngpus_per_node = 0\njob_dir = "{tmp}/jobs"\n')
        env = {**os.environ, "NEMOTRON_HOME": f"{tmp}/home"}
        cli = [sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "rl", "-c", "tiny", "--env-file", str(env_file)]
        cases = [
            ("python -c pass (reference)", lambda i: [sys.executable, "-c", "pass"]),
            ("no profile: direct child (reference)", lambda i: [*cli, f"output_dir={tmp}/direct{i}"]),
            ("--run local profile (LocalExecutor)", lambda i: [*cli, "--run", "here", f"output_dir={tmp}/run{i}"]),
            ("--batch local profile (to job id)", lambda i: [*cli, "--batch", "here", f"output_dir={tmp}/batch{i}"]),
        ]
        print(f"{'case':40s} {'median s':>9s} {'min s':>7s} {'max s':>7s}")
        for name, argv in cases:
            times = []
            for i in range(args.repeat):
                t, proc = timed(argv(i), env, tmp)
                if proc.returncode != 0:
                    print(f"{name}: exit {proc.returncode}: {proc.stderr[-300:]}", file=sys.stderr)
                    return 1
                times.append(t)
                if "--batch" in argv(i):  # let the detached job finish before the next measurement
                    job_id = proc.stdout.strip().splitlines()[-1]
                    subprocess.run([*cli[:3], "ultra3", "logs", job_id, "-f"], check=False, env=env, cwd=tmp,
                                   capture_output=True)
            print(f"{name:40s} {statistics.median(times):9.3f} {min(times):7.3f} {max(times):7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
