"""An in-process data prep run (``workers.engine`` auto on small local input: no Ray) behaves as a Ray run
does where it matters to a user: SIGTERM stops it resumably (exit 75), the rerun builds only what is missing,
and the bytes are the recorded ones; the summary says where the work ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from output_hashes import WIKI, pretrain_config, pretrain_hashes
from test_data_prep_output_hashes import PRETRAIN
from data_prep_pretrain_support import STAGE_DIR

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(not WIKI.is_file(), reason=f"shared data folder absent ({WIKI.parent})")]


def _run_py(cfg_path, env):
    return subprocess.Popen([sys.executable, str(STAGE_DIR / "run.py"), "--config", str(cfg_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)


def test_sigterm_stops_an_in_process_run_resumably_and_the_rerun_completes_it(tok_cache, tmp_path):
    out = tmp_path / "out"
    # 4 KiB batches: the same bytes (batch size shapes no output), a run slow enough to be stopped mid-way
    cfg = pretrain_config(out, tok_cache, shards={"batch_bytes": 4096})
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = _run_py(cfg_path, env)
    deadline = time.monotonic() + 120
    while proc.poll() is None and not list(out.rglob("*.receipt.json")) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    log = proc.communicate(timeout=120)[0]
    assert proc.returncode == 75, log[-2000:]
    done = len(list(out.rglob("*.receipt.json")))
    assert 1 <= done < 12, done
    assert not list(out.rglob("*.tmp-*")), "temporary files of the stopped shard are removed"
    again = _run_py(cfg_path, env)
    log2 = again.communicate(timeout=240)[0]
    assert again.returncode == 0, log2[-2000:]
    assert f"resuming {out}: {done} of" in log2
    assert "in this process, no Ray" in log2  # the summary's work line says where the work ran
    m = json.loads((out / "manifest.json").read_text())
    assert m["run"]["engine"] == "in_process" and m["run"]["shards_reused"] == done
    assert pretrain_hashes(out) == PRETRAIN
