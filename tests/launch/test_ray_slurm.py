"""Ray stages (`launch: ray`: data prep, rlvr, mopd) on a Slurm profile: the job script NeMo-Run renders
from our Ray template (src/nemotron/templates/ray_slurm.sub.j2), with and without containers.

These tests only render (`--dry-run`); the job itself runs on the real local Slurm in
tests/launch/test_submit_slurm.py (test_data_prep_run_attached_completes). Containers (pyxis/enroot) cannot
run here: their rendering is checked, and the golden files in tests/golden show it in full.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemotron.cli.main import main

pytest.importorskip("nemo_run", reason="the job script is rendered by NeMo-Run (a base dependency: reinstall nemotron-cli)")

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


from config_support import config_valid  # noqa: E402


def _dry_run(tmp_path, monkeypatch, capsys, container: bool, *args: str) -> str:
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code = main(["ultra3", *args, "--dry-run", "--batch", "cluster", "--env-file", str(_env_file(tmp_path, container))])
    cap = capsys.readouterr()
    assert config_valid(code, cap.out), cap.err  # 2: inputs not made yet
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


_WARNED_DRIVER = r'''
"""Stand-in for a Ray stage's entry script: on its first run it waits for SIGTERM, then counts the live
nodes of the job's Ray cluster, writes the requeue marker and exits 75 (as an entry that saved does: the
batch script then requeues the job); on the second run it says so and exits 0."""
import os, signal, sys, time
from pathlib import Path

import ray

from nemotron.runtime.dispatch import mark_stopped

marker = Path(sys.argv[1])
if marker.exists():
    print("driver run 2 (after the requeue)", flush=True)
    sys.exit(0)
print("driver run 1", flush=True)
warned = []
signal.signal(signal.SIGTERM, lambda *_: warned.append(time.time()))
marker.write_text("waiting for the warning\n")
deadline = time.time() + 180
while not warned and time.time() < deadline:
    time.sleep(0.2)
if not warned:
    print("no warning signal came", flush=True)
    sys.exit(1)
ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
alive = sum(1 for n in ray.nodes() if n["Alive"])
ray.shutdown()
print(f"warning received; Ray nodes alive: {alive}", flush=True)
Path(os.environ["NEMOTRON_REQUEUE_MARKER"]).parent.mkdir(parents=True, exist_ok=True)  # a dry run made no run folder
mark_stopped("ultra3 data prep rl", "stand-in driver saved and stopped")
sys.exit(75)
'''


def test_warning_reaches_only_the_driver_and_logs_append_across_a_requeue(slurm, tmp_path, monkeypatch, capsys):
    """On the real local Slurm: the job script rendered from our template (host Python, real Ray head
    started by it) with ``run.signal_before_s``. The stage's entry is replaced by a stand-in driver (the
    data prep itself finishes too fast to be signalled); the warning is delivered as ``sbatch
    --signal=B:TERM@N`` delivers it, to the batch script alone (``scancel --batch --signal=TERM``, rather
    than waiting up to a minute of Slurm's signal timer). The driver must get SIGTERM while the Ray
    cluster is still up and exit 75 with the requeue marker written; the batch script (after stopping the Ray
    cluster) requeues the job, and the second run's driver lines must follow the first run's in ray-job.log."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    env_file = tmp_path / "env.toml"
    env_file.write_text(f'[cluster]\nexecutor = "slurm"\naccount = "{slurm.account}"\npartition = "{slurm.partition}"\n'
                        f'gpus_per_node = 0\ncontainer = false\ntime = "00:10:00"\njob_dir = "{tmp_path / "jobs"}"\n',
                        encoding="utf-8")
    code = main(["ultra3", "data", "prep", "rl", "-c", "tiny", "+run.signal_before_s=120", "+run.requeue=true",
                 "--dry-run", "--batch", "cluster", "--env-file", str(env_file)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    script = _script(cap.out)
    assert "#SBATCH --signal=B:TERM@120" in script  # to the batch script only, not to every job step
    driver = tmp_path / "driver.py"
    driver.write_text(_WARNED_DRIVER, encoding="utf-8")
    marker = tmp_path / "driver-started"
    script, n = re.subn(r'^driver=".*"$', f'driver="{sys.executable} {driver} {marker}"', script, flags=re.M)
    assert n == 1
    log_dir = Path(re.search(r"^export LOG_DIR=(.*)$", script, re.M).group(1).strip("'\""))
    job_sh = tmp_path / "job.sh"
    job_sh.write_text(script, encoding="utf-8")
    out = slurm.run("sbatch", "--parsable", "-p", slurm.partition, "-A", slurm.account, "--requeue",
                    "-o", str(tmp_path / "batch-%j.out"), str(job_sh)).stdout
    job = out.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert time.monotonic() < deadline, (tmp_path / f"batch-{job}.out").read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        slurm.run("scancel", "--batch", "--signal=TERM", job)
        state = slurm.wait(job, timeout=400)  # the requeued run starts after Slurm's hold (cred_expire)
    finally:
        slurm.run("scancel", job, check=False)
    batch = (tmp_path / f"batch-{job}.out").read_text(errors="replace")
    assert state == "COMPLETED", batch[-3000:]
    assert "SIGTERM to the driver (step " in batch, batch[-3000:]
    assert "[nemotron] driver exited with code 75" in batch and "[nemotron] ultra3 data prep rl: stand-in driver saved" \
        in batch and f"[nemotron] requeued Slurm job {job} (restart 1)" in batch, batch[-3000:]
    lines = [line for line in (log_dir / "ray-job.log").read_text(errors="replace").splitlines()
             if line.startswith(("driver run", "warning received", "no warning"))]
    assert lines == ["driver run 1", "warning received; Ray nodes alive: 1", "driver run 2 (after the requeue)"], lines
