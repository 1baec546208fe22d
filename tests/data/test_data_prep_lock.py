"""One writing run per data prep output folder (nemotron.data.outputs.writer_lock): a second run on the
same output_dir stops at once (exit 1) naming the first one's pid, and writes nothing.

Real fcntl locks between real processes; the real CLI and data prep runtime on the shared tiny data.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from nemotron.data.outputs import LOCK, writer_lock
from nemotron.errors import RuntimeFailure
from submit_support import nemotron_runner


def test_second_holder_is_refused_with_the_first_ones_pid(tmp_path):
    out = tmp_path / "a" / "b"
    with writer_lock(out) as lock:
        assert lock == out / LOCK and lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(RuntimeFailure) as info, writer_lock(out):
            pass
        assert info.value.message == f"another run (pid {os.getpid()}) is writing {out}"
        assert info.value.exit_code == 1
    with writer_lock(out):  # released on exit; the file left behind does not block
        pass


def test_a_killed_holder_leaves_no_lock(tmp_path):
    code = ("import sys, time\nfrom nemotron.data.outputs import writer_lock\n"
            f"with writer_lock({str(tmp_path)!r}):\n    print('held', flush=True)\n    time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeFailure, match=f"another run \\(pid {holder.pid}\\) is writing"), \
                writer_lock(tmp_path):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with writer_lock(tmp_path):
        pass


def test_cli_run_on_a_held_output_dir_stops_at_once_and_writes_nothing(tmp_path):
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")}
    env.pop("NEMOTRON_ENV_FILE", None)
    cli = nemotron_runner(env, tmp_path)
    out = tmp_path / "X"
    args = ("ultra3", "data", "prep", "pretrain", "-c", "tiny", f"output_dir={out}", "sample=300")
    with writer_lock(out):  # stands for a first run in progress
        start = time.monotonic()
        proc = cli(*args)
        waited = time.monotonic() - start
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert f"error: another run (pid {os.getpid()}) is writing {out}" in proc.stderr
        assert sorted(p.name for p in out.iterdir()) == [LOCK]  # nothing written
        assert "Traceback" not in proc.stderr
        print(f"refused after {waited:.1f} s (CLI start-up included)")
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text())["complete"] is True
