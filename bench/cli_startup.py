"""Start-up latency of the CLI, each case interleaved with `python -c pass` measured in the same run (A B A B ...).

Targets: `nemotron --help` <= 0.15 s (issue 32, on Typer; issue 2's was 0.3 s); a stage's --help, which reads its
configs and env.toml, <= 0.3 s; one shell completion answer (config keys) <= 0.5 s (Typer 0.29 coerces the stage's
unset options through pydantic, which it imports for that: ~0.1-0.2 s of it); a dry-run without a profile <= 0.8 s
(issue 2); a dry-run against a Slurm profile (NeMo-Run renders the sbatch script) <= 1.2 s (issue 19; issue
2's target was 4 s).

    python bench/cli_startup.py [--repeat N] [--only help]

The first row is the reference itself, `python -c pass`, measured in the same run (its median over every pair), so
that the table says what a bare interpreter costs on this machine now. ``--only help`` runs the help and completion
cases alone (the dry runs take seconds each).

Each case's runs alternate with runs of the reference, so that a change of machine load during the run moves both
alike; the table gives the case's median, the median of the references run beside it, and the median of the paired
differences (the CLI's own cost above a bare interpreter). The no-profile case is ``pretrain -c local``: a dry-run
of ``-c tiny`` without a profile is refused on a machine without its 8 GPUs (exit 2), which is not what is timed.
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


def wall(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, int, bytes]:
    """Seconds of one run of ``argv``, its exit code and the tail of its stderr."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0, proc.returncode, proc.stderr[-400:]


def paired(argv: list[str], ref: list[str], repeat: int, env: dict[str, str], cwd: str) -> dict:
    """``repeat`` pairs (reference, case), alternating. Returns the medians of the case, of the references and of
    the per-pair differences (seconds), the reference's times (``refs``), and the case's first non-zero exit code."""
    case_t, ref_t, code = [], [], 0
    for _ in range(repeat):
        r, _, _ = wall(ref, env, cwd)
        t, rc, err = wall(argv, env, cwd)
        ref_t.append(r)
        case_t.append(t)
        if rc and not code:
            code = rc
            print(err.decode(errors="replace"), file=sys.stderr)
    return {"case": statistics.median(case_t), "ref": statistics.median(ref_t), "refs": ref_t,
            "diff": statistics.median(c - r for c, r in zip(case_t, ref_t)), "code": code}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", choices=["help"], help="help: the --help and completion cases alone")
    args = ap.parse_args()
    py = sys.executable
    nemotron = [py, "-m", "nemotron"]
    ref = [py, "-c", "pass"]
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "NEMOTRON_HOME": home}
        env.pop("NEMOTRON_ENV_FILE", None)
        complete = {**env, "_NEMOTRON_COMPLETE": "complete_bash", "COMP_WORDS": "nemotron ultra3 pretrain train.",
                    "COMP_CWORD": "3"}
        cases = [
            ("nemotron --help", [*nemotron, "--help"], 0.15, env),
            ("nemotron ultra3 pretrain --help (every key)", [*nemotron, "ultra3", "pretrain", "--help"], 0.3, env),
            ("completion: pretrain train.<TAB>", nemotron, 0.5, complete),
            ("dry-run, no profile (pretrain -c local)", [*nemotron, "ultra3", "pretrain", "-c", "local", "--dry-run"],
             0.8, env),
            ("dry-run, Slurm profile (NeMo-Run sbatch)",
             [*nemotron, "ultra3", "pretrain", "-c", "tiny", "--dry-run", "--run", "cluster",
              "--env-file", str(ROOT / "env.toml.example")], 1.2, env),
        ]
        if args.only == "help":
            cases = cases[:3]
        print(f"{'case':45s} {'median s':>9s} {'python s':>9s} {'above s':>9s} {'target s':>9s}  verdict")
        worst = 0
        refs: list[float] = []
        rows = []
        for name, argv, target, case_env in cases:
            m = paired(argv, ref, args.repeat, case_env, home)
            refs += m["refs"]
            verdict = f"exit {m['code']}" if m["code"] else ("ok" if m["case"] <= target else "over target")
            worst = worst or m["code"]
            rows.append(f"{name:45s} {m['case']:9.3f} {m['ref']:9.3f} {m['diff']:9.3f} {target:9.2f}  {verdict}")
        print(f"{'python -c pass (the reference, every pair)':45s} {statistics.median(refs):9.3f} {'':>9s} {'':>9s} "
              f"{'':>9s}  {len(refs)} runs")
        print("\n".join(rows))
    return 1 if worst else 0


if __name__ == "__main__":
    raise SystemExit(main())
