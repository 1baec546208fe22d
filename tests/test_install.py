"""An installed (non-editable) copy finds its stage definitions."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_carries_stages_and_runs(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("nemotron_cli-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "nemotron/_stages/images.toml" in names
    assert "nemotron/_stages/ultra3/pretrain/default.yaml" in names
    assert "nemotron/_stages/ultra3/data_prep_pretrain/run.py" in names
    assert "nemotron/templates/ray_slurm.sub.j2" in names  # the job script of Ray stages on Slurm
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    env = {**os.environ, "PYTHONPATH": str(target), "NEMOTRON_HOME": str(tmp_path / "home")}
    code = ("import nemotron.paths as p, sys; from nemotron.cli import main; "
            "print(p.stages_dir()); sys.exit(main(['ultra3', 'pretrain', '-c', 'tiny', '--dry-run']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0] == str(target / "nemotron" / "_stages")
    assert "dry run: valid" in proc.stdout
