"""Job scripts that the dry-run calls valid must be ones Slurm and Ray accept: each test renders the script
with ``--dry-run`` and hands it to the real local Slurm (``sbatch --test-only``, or a real submission), or runs
the rendered Ray-on-Slurm template's own shell where the cluster cannot (one node, no pmix)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nemotron.cli.main import main

pytest.importorskip("nemo_run", reason="the job script is rendered by NeMo-Run (a base dependency: reinstall nemotron-cli)")


def _profile(tmp_path: Path, slurm, extra: str = "") -> Path:
    path = tmp_path / "env.toml"
    path.write_text(f'[cluster]\nexecutor = "slurm"\naccount = "{slurm.account}"\npartition = "{slurm.partition}"\n'
                    f'gpus_per_node = {slurm.gpus_per_node}\ncontainer = false\ntime = "00:10:00"\njob_dir = "{tmp_path / "jobs"}"\n{extra}',
                    encoding="utf-8")
    return path


def _render(tmp_path: Path, monkeypatch, capsys, env_file: Path, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code = main(["ultra3", *args, "--dry-run", "--batch", "cluster", "--env-file", str(env_file)])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _script(out: str) -> str:
    """The sbatch script of a dry run's output: from its shebang to the line before the next section rule."""
    start = out.index("#!/bin/bash")
    lines = []
    for line in out[start:].splitlines():
        if line.startswith("problems ─") or line.startswith("dry run:"):
            break
        lines.append(line)
    return "\n".join(lines).rstrip() + "\n"


def _test_only(slurm, tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    job = tmp_path / "job.sh"
    job.write_text(script, encoding="utf-8")
    return slurm.run("sbatch", "--test-only", str(job), check=False)


@pytest.mark.parametrize("how", ["toml", "override"])
@pytest.mark.parametrize("stage", [("data", "prep", "rl"), ("pretrain",)], ids=["ray", "torchrun"])
def test_exclusive_false_renders_a_script_sbatch_accepts(slurm, tmp_path, monkeypatch, capsys, how, stage):
    env_file = _profile(tmp_path, slurm, "exclusive = false\n" if how == "toml" else "exclusive = true\n")
    args = [*stage, "-c", "tiny"] + (["profile.exclusive=false"] if how == "override" else [])
    code, out, err = _render(tmp_path, monkeypatch, capsys, env_file, *args)
    assert code == 0, err + out[-2000:]
    script = _script(out)
    assert "--exclusive" not in script
    done = _test_only(slurm, tmp_path, script)
    assert done.returncode == 0, done.stderr
    # and `exclusive = true` is the bare flag, which sbatch takes too
    code, out, err = _render(tmp_path, monkeypatch, capsys, _profile(tmp_path, slurm, "exclusive = true\n"), *stage, "-c", "tiny")
    assert code == 0 and "#SBATCH --exclusive\n" in _script(out)
    done = _test_only(slurm, tmp_path, _script(out))
    assert done.returncode == 0, done.stderr
