"""Submission to an existing Ray cluster (a `ray` profile): a real Ray head started on localhost by the
test, the job submitted with Ray's job API, and the cluster left running by our tool."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission", reason="needs Ray (a base dependency: reinstall nemotron-cli)")

SECRET = "ray-secret-value-5566"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(address: str) -> bool:
    """The dashboard answers HTTP (401 counts: Ray's token authentication is on by default)."""
    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def ray_head():
    ports = {name: _free_port() for name in ("port", "dashboard-port", "dashboard-agent-listen-port",
                                             "dashboard-agent-grpc-port", "runtime-env-agent-port",
                                             "metrics-export-port", "ray-client-server-port", "node-manager-port",
                                             "object-manager-port")}
    temp = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    ray = str(Path(sys.executable).with_name("ray"))
    args = [ray, "start", "--head", "--block", "--num-cpus", "2", "--include-dashboard=true",
            "--dashboard-host", "127.0.0.1", "--node-ip-address", "127.0.0.1", f"--temp-dir={temp}",
            *[f"--{k}={v}" for k, v in ports.items()]]
    log = open(Path(temp) / "head.log", "w")  # noqa: SIM115 - held open while the head runs, closed below
    head = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{ports['dashboard-port']}"
    deadline = time.time() + 90
    ready = False
    while time.time() < deadline and head.poll() is None:
        ready = _answers(address)
        if ready:
            break
        time.sleep(1)
    if not ready:
        os.killpg(head.pid, signal.SIGKILL)
        pytest.fail(f"the test's Ray head did not come up: {(Path(temp) / 'head.log').read_text()[-1500:]}")
    time.sleep(3)  # the job agent registers a moment after the dashboard answers
    yield address, head
    for sig in (signal.SIGTERM, signal.SIGKILL):  # the test started this cluster, so the test stops it
        try:
            os.killpg(head.pid, sig)
            head.wait(timeout=30)
            break
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue
    subprocess.run(["pkill", "-9", "-f", f"--temp-dir={temp}"], check=False)
    subprocess.run(["pkill", "-9", "-f", temp], check=False)
    log.close()


def test_data_prep_on_existing_ray_cluster(ray_head, tmp_path):
    address, head = ray_head
    env_file = tmp_path / "env.toml"
    env_file.write_text(f'[mine]\nexecutor = "ray"\naddress = "{address}"\npython = "{sys.executable}"\n'
                        f'secrets = {{ RAY_TEST_SECRET = "{SECRET}" }}\n')
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "pretrain", "-c", "tiny",
                           "--run", "mine", "--env-file", str(env_file), "sample=30", f"output_dir={out}"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert "Ray job" in proc.stderr
    assert (out / "blend.json").is_file()
    assert SECRET not in proc.stdout + proc.stderr
    # our tool never stops a cluster it did not start
    assert head.poll() is None and _answers(address)
    status = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "status"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0 and "COMPLETED" in status.stdout
    arts = list((tmp_path / "home" / "artifacts" / "pretrain-data").glob("v*.json"))
    assert arts and json.loads(arts[0].read_text())["blend_path"] == str(out / "blend.json")
