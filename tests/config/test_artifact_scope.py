"""``${art:NAME}`` takes "latest" among what the consumer can read, through the real CLI and real data prep runs.

* a scratch run (``output_dir=`` outside the default output folders) does not become the latest unless asked
  (``--latest``), and deleting its folder blocks nobody; pinning its version still takes it;
* another working folder's outputs are not this folder's inputs (the defaults ``./output`` are per folder);
* a cluster job's record (made on a Slurm cluster) is not a local run's input;
* every run and dry run prints its resolved inputs (artifact, version, path, where and when made) first.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from submit_support import nemotron_runner


@pytest.fixture
def folders(tmp_path):
    home, work, other = tmp_path / "home", tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NEMOTRON_DATA_DIR", "NEMOTRON_CKPT_ROOT")}
    env["NEMOTRON_HOME"] = str(home)
    return home, nemotron_runner(env, work), nemotron_runner(env, other), work


def _first_line(proc) -> str:
    return (proc.stderr.splitlines() or [""])[0]


@pytest.mark.slow
def test_scratch_and_other_folders_are_not_latest(folders, tmp_path):
    home, here, elsewhere, work = folders
    default = work / "output" / "ultra3" / "pretrain-data" / "tiny"
    scratch = tmp_path / "scratch"
    proc = here("ultra3", "data", "prep", "pretrain", "-c", "tiny", "sample=30")
    assert proc.returncode == 0 and "artifact pretrain-data v1:" in proc.stderr, proc.stderr[-2000:]
    proc = here("ultra3", "data", "prep", "pretrain", "-c", "tiny", "sample=30", f"output_dir={scratch}")
    assert proc.returncode == 0 and "artifact pretrain-data v2:" in proc.stderr, proc.stderr[-2000:]
    v2 = json.loads((home / "artifacts" / "pretrain-data" / "v2.json").read_text())
    assert v2["scratch"] is True and v2["site"].startswith("here:"), v2

    # the scratch v2 is newer, but the default-location v1 is the latest; said first
    proc = here("ultra3", "pretrain", "-c", "local", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = _first_line(proc)
    assert line.startswith(f"[nemotron] input pretrain-data v1: {default} (made on here:"), proc.stderr[:1000]
    assert "by data-prep-pretrain -c tiny, job local, 20" in line and line.endswith("-> data.per_split_data_args_path")
    assert f"per_split_data_args_path: {default}/blend.json" in proc.stdout

    # deleting the scratch output blocks nobody; pinning it by version still takes it (while it exists)
    pinned = f"data.per_split_data_args_path=${{art:pretrain-data:2,blend_path}}"
    proc = here("ultra3", "pretrain", "-c", "local", "--dry-run", pinned)
    assert _first_line(proc).startswith(f"[nemotron] input pretrain-data v2: {scratch} "), proc.stderr[:1000]
    shutil.rmtree(scratch)
    proc = here("ultra3", "pretrain", "-c", "local", "--dry-run")
    assert proc.returncode == 0 and _first_line(proc).startswith("[nemotron] input pretrain-data v1:"), proc.stderr

    # another working folder: ./output is its own; v1 is not its input, and the refusal says why
    proc = elsewhere("ultra3", "pretrain", "-c", "local", "--dry-run")
    assert "[nemotron] input" not in proc.stderr
    assert f"v1: {default} is another working folder's output" in proc.stdout, proc.stdout[-3000:]


    # asked: --latest makes a scratch output the latest all the same
    promoted = tmp_path / "promoted"
    proc = here("ultra3", "data", "prep", "pretrain", "-c", "tiny", "sample=30", f"output_dir={promoted}", "--latest")
    assert proc.returncode == 0 and "artifact pretrain-data v3:" in proc.stderr, proc.stderr[-2000:]
    proc = here("ultra3", "pretrain", "-c", "local", "--dry-run")
    assert _first_line(proc).startswith(f"[nemotron] input pretrain-data v3: {promoted} "), proc.stderr[:1000]


def test_a_cluster_jobs_record_is_not_a_local_runs_input(folders, tmp_path):
    """A record made by a Slurm job (its site) whose path happens to exist here too is not taken by a run on this
    machine; the record of a run here is."""
    from local_runtime_support import write_pretrain_data

    home, here, _, work = folders
    local = work / "output" / "local-data"
    blend_local = write_pretrain_data(local, docs=10, valid_docs=3)
    cluster = work / "output" / "cluster-data"
    blend_cluster = write_pretrain_data(cluster, docs=10, valid_docs=3)
    store = home / "artifacts" / "pretrain-data"
    store.mkdir(parents=True)
    import socket

    for v, (path, blend, site, job, when) in enumerate([
            (local, blend_local, f"here:{socket.gethostname()}", "local", 1000.0),
            (cluster, blend_cluster, "slurm:login.example", "4242", 2000.0)], 1):
        (store / f"v{v}.json").write_text(json.dumps(
            {"name": "pretrain-data", "version": v, "path": str(path), "blend_path": str(blend), "config": "tiny",
             "stage": "data-prep-pretrain", "job_id": job, "site": site, "scratch": False, "created": when}))
    proc = here("ultra3", "pretrain", "-c", "local", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _first_line(proc).startswith(f"[nemotron] input pretrain-data v1: {local} (made on here:"), proc.stderr
    assert f"per_split_data_args_path: {blend_local}" in proc.stdout


def test_an_older_record_without_site_is_judged_by_its_folder(folders, tmp_path):
    """A record written before records said where they were made (no ``site``) is an input only inside this run's
    output folders: another checkout's ``./output`` on the same machine (a fresh clone beside an older one, both
    using ``~/.nemotron``) is not taken, and the refusal says why; the same kind of record inside ``./output`` is."""
    from local_runtime_support import write_pretrain_data

    home, here, _, work = folders
    other_checkout = tmp_path / "older-checkout" / "output" / "ultra3" / "pretrain-data" / "tiny"
    blend_other = write_pretrain_data(other_checkout, docs=10, valid_docs=3)
    store = home / "artifacts" / "pretrain-data"
    store.mkdir(parents=True)
    (store / "v1.json").write_text(json.dumps(
        {"name": "pretrain-data", "version": 1, "path": str(other_checkout), "blend_path": str(blend_other),
         "config": "tiny", "stage": "data-prep-pretrain", "job_id": "local", "created": 1000.0}))
    proc = here("ultra3", "pretrain", "-c", "local", "--dry-run")
    assert "[nemotron] input pretrain-data" not in proc.stderr, proc.stderr[:1000]
    assert f"v1: {other_checkout} is an older record's output" in proc.stdout, proc.stdout[-3000:]

    mine = work / "output" / "ultra3" / "pretrain-data" / "tiny"
    blend_mine = write_pretrain_data(mine, docs=10, valid_docs=3)
    (store / "v2.json").write_text(json.dumps(
        {"name": "pretrain-data", "version": 2, "path": str(mine), "blend_path": str(blend_mine), "config": "tiny",
         "stage": "data-prep-pretrain", "job_id": "local", "created": 2000.0}))
    proc = here("ultra3", "pretrain", "-c", "local", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _first_line(proc).startswith(f"[nemotron] input pretrain-data v2: {mine} "), proc.stderr[:1000]
