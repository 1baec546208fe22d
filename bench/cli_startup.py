"""Start-up latency of the CLI, next to `python -c pass` measured in the same run.

Targets (issue 2): `nemotron --help` <= 0.3 s; a dry-run without a profile <= 0.8 s; a dry-run
against a Slurm profile (NeMo-Run renders the sbatch script) <= 4 s.

    python bench/cli_startup.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def median_wall(argv: list[str], repeat: int, env: dict[str, str], cwd: str) -> tuple[float, int]:
    times, code = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
        times.append(time.perf_counter() - t0)
        code = code or proc.returncode
        if proc.returncode:
            print(proc.stderr.decode()[-400:], file=sys.stderr)
    return statistics.median(times), code


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    py = sys.executable
    nemotron = [py, "-m", "nemotron"]
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "NEMOTRON_HOME": home}
        env.pop("NEMOTRON_ENV_FILE", None)
        cases = [
            ("python -c pass (reference)", [py, "-c", "pass"], None),
            ("nemotron --help", [*nemotron, "--help"], 0.3),
            ("dry-run, no profile (pretrain -c tiny)", [*nemotron, "ultra3", "pretrain", "-c", "tiny", "--dry-run"], 0.8),
            ("dry-run, Slurm profile (NeMo-Run sbatch)",
             [*nemotron, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "--run", "cluster",
              "--env-file", str(ROOT / "env.toml.example")], 4.0),
        ]
        ref = None
        print(f"{'case':45s} {'median s':>9s} {'x python':>9s} {'target s':>9s}  verdict")
        worst = 0
        for name, argv, target in cases:
            t, code = median_wall(argv, args.repeat, env, home)
            ref = ref or t
            verdict = f"exit {code}" if code else ("ok" if target is None or t <= target else "over target")
            worst = worst or code
            print(f"{name:45s} {t:9.3f} {t / ref:9.1f} {target if target else '-':>9}  {verdict}")
    return 1 if worst else 0


if __name__ == "__main__":
    raise SystemExit(main())
