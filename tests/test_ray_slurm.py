"""Ray stages (`launch: ray`: data prep, rlvr, mopd) on a Slurm profile: the job script NeMo-Run renders
from our Ray template (src/nemotron/templates/ray_slurm.sub.j2), with and without containers.

These tests only render (`--dry-run`); the job itself runs on the real local Slurm in
tests/test_submit_slurm.py (test_data_prep_run_attached_completes). Containers (pyxis/enroot) cannot
run here: their rendering is checked, and the golden files in tests/golden show it in full.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nemotron.cli import main

pytest.importorskip("nemo_run", reason="the job script is rendered by NeMo-Run (pip install 'nemotron-cli[run]')")

SECRET = "ray-template-secret-5150"


def _env_file(tmp_path: Path, container: bool) -> Path:
    path = tmp_path / "env.toml"
    path.write_text(
        f"""
[cluster]
executor = "slurm"
account = "acct"
partition = "batch"
gpus_per_node = 8
container = {str(container).lower()}
mounts = ["/shared/data:/shared/data"]
job_dir = "{tmp_path / 'jobs'}"
secrets = {{ RAY_TEMPLATE_SECRET = "{SECRET}" }}
""",
        encoding="utf-8",
    )
    return path


def _script(text: str) -> str:
    """The sbatch script out of the dry-run output (from its shebang to its last line, `exit $code`)."""
    start = text.index("#!/bin/bash")
    end = text.index("exit $code", start) + len("exit $code")
    return text[start:end] + "\n"


def _dry_run(tmp_path, monkeypatch, capsys, container: bool, *args: str) -> str:
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code = main(["ultra3", *args, "--dry-run", "--batch", "cluster", "--env-file", str(_env_file(tmp_path, container))])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert SECRET not in cap.out + cap.err
    return cap.out


@pytest.mark.parametrize("container", [False, True], ids=["host", "container"])
def test_ray_stage_renders_a_ray_cluster_job(tmp_path, monkeypatch, capsys, container):
    out = _dry_run(tmp_path, monkeypatch, capsys, container, "data", "prep", "rl", "-c", "tiny", "run.env.nodes=2")
    assert "NOT SUBMITTABLE" not in out
    script = _script(out)
    assert "#SBATCH --nodes=2" in script
    head = next(line for line in script.splitlines() if line.startswith('srun --nodes=1 --ntasks=1 -w "$head_node"'))
    assert re.search(r"ray start --head --block", script) and re.search(r"ray start --block .*--address=", script)
    assert 'export RAY_ADDRESS=$ray_address' in script and "ray-job.log" in script
    assert "ray stop" not in script  # it would stop every Ray instance of the user on the node
    assert "secrets.env" in script  # sourced from the 0600 file, never written into the script
    if container:
        assert "--container-image=rayproject/ray" in head and "--container-name=ray-head" in head
        assert "--container-mounts /shared/data:/shared/data" in head
    else:
        assert "--container" not in script and "--mpi=pmix" not in script
        assert f'driver="{sys.executable} ' in script  # the host's Python runs the stage
    # the rendered script is valid bash
    path = tmp_path / "job.sh"
    path.write_text(script, encoding="utf-8")
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("stage", [("rlvr",), ("mopd",)], ids=["rlvr", "mopd"])
def test_rl_stages_take_the_ray_path(tmp_path, monkeypatch, capsys, stage):
    """NeMo RL runs one Ray cluster over the whole allocation: the RL stages use the same template,
    with the node's GPUs given to the Ray processes (``--gres=gpu:8`` on the host path)."""
    script = _script(_dry_run(tmp_path, monkeypatch, capsys, False, *stage, "-c", "tiny"))
    assert "ray start --head --block" in script and "--gres=gpu:8" in script
    assert f"/_stages/ultra3/{stage[0]}/run.py --config" in script
