"""Submission through NeMo-Run to the real local Slurm cluster that scripts/test.sh starts.

No mocks: each test runs the `nemotron` command in a subprocess, as a user would, against the
one-node cluster (8 GPUs declared, no containers: the profile runs jobs on the host's Python).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from submit_support import nemotron_runner, write_slurm_profile

pytest.importorskip("nemo_run", reason="submission needs NeMo-Run (a base dependency: reinstall nemotron-cli)")

SECRET = "s3cret-value-for-tests-7788"


@pytest.fixture
def env_file(slurm, tmp_path) -> Path:
    """Profile `ci` on the local cluster; its job root has spaces, as a shared file system's may."""
    return write_slurm_profile(
        tmp_path / "env.toml", account=slurm.account, partition=slurm.partition, gpus_per_node=slurm.gpus_per_node,
        job_dir=tmp_path / "job root with spaces",
        extra=f'image_cache = "{tmp_path / "images"}"\nsecrets = {{ NEMOTRON_TEST_SECRET = "{SECRET}" }}')


@pytest.fixture
def cli(slurm, tmp_path):
    return nemotron_runner({**slurm.env, "NEMOTRON_HOME": str(tmp_path / "home"),
                            "NEMOTRON_DATA_DIR": str(tmp_path / "data")}, tmp_path)


def test_data_prep_run_attached_completes(cli, env_file, slurm, tmp_path):
    """The data prep runs on a Ray cluster that its Slurm job starts (NeMo-Run's Ray-on-Slurm request,
    our template, host Python): streamed, COMPLETED, outputs readable, no Ray process left behind, and no GPU
    allocated on the profile's 8-GPU node (data prep runs on CPUs)."""
    from nemotron.data.indexed import read_index

    out_dir = tmp_path / "prep out"
    proc = cli("ultra3", "data", "prep", "pretrain", "-c", "tiny", "--run", "ci", "--env-file", str(env_file),
               "sample=30", f"output_dir={out_dir}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Slurm job" in proc.stderr and "COMPLETED" in proc.stderr
    assert "blend.json" in proc.stdout  # the job's own log lines were streamed
    job_id = re.search(r"Slurm job (\d+)", proc.stderr).group(1)
    alloc = slurm.run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "AllocTRES").stdout.strip()
    assert alloc and "gpu" not in alloc, alloc
    # the driver joined the cluster the job started (RAY_ADDRESS), not a Ray instance of its own
    assert re.search(r"Ray: \d+\.\d+\.\d+\.\d+:\d+", proc.stdout), proc.stdout[-2000:]
    logs = next((tmp_path / "job root with spaces" / "experiments").glob("*/*/data-prep-pretrain-tiny"))
    assert "Ray cluster up: 1 node(s)" in next(logs.glob(f"sbatch_*_{job_id}.out")).read_text()
    assert (logs / "ray-head.log").is_file() and "blend.json" in (logs / "ray-job.log").read_text()
    blend = json.loads((out_dir / "blend.json").read_text())
    for split in ("train", "valid", "test"):
        prefix = str(out_dir / blend[split][1])  # relative to the output folder
        index = read_index(prefix)
        tokens = int(index["lengths"].sum())
        assert tokens > 0 and Path(prefix + ".bin").stat().st_size == tokens * np.dtype(index["dtype"]).itemsize
    runs = list((tmp_path / "job root with spaces" / "runs").iterdir())
    assert len(runs) == 1
    job_yaml = (runs[0] / "job.yaml").read_text()
    assert "experiment_id:" in job_yaml and "config_hash:" in job_yaml and "git_commit:" in job_yaml
    assert (runs[0] / "train.yaml").is_file()
    deadline = time.time() + 30  # the job stopped the Ray processes it started (their temp dir names the job)
    while _processes_mentioning(f"/ray-{job_id}/") and time.time() < deadline:
        time.sleep(1)
    assert not _processes_mentioning(f"/ray-{job_id}/")


def test_ray_cluster_that_cannot_start_fails_with_its_reason(cli, env_file):
    """A Ray stage whose head cannot start (its temp dir made unwritable by a setup line): the job ends
    FAILED, the command exits 1 and shows the reason from the job's log."""
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "ci", "--env-file", str(env_file),
               'profile.setup=["RAY_TEMP_DIR=/proc/no-such-dir/ray"]')
    assert proc.returncode == 1, proc.stderr[-1500:]
    assert "ended FAILED" in proc.stderr
    assert "a ray start step ended before the cluster was up" in proc.stderr


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of this machine's processes that contain ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(line)
    return found


def nemo_image() -> str:
    from nemotron.config.images import image_table

    return str(image_table()["nemo"]["image"])


def test_gpu_stage_reaches_entry_and_fails_fast(cli, env_file, tmp_path, slurm):
    # a blend of real shards (the dry run's checks read their index and pass; the entry stops before reading them)
    from local_runtime_support import write_pretrain_data

    blend = write_pretrain_data(tmp_path / "data", docs=10, valid_docs=5)
    proc = cli("ultra3", "pretrain", "-c", "tiny", "--run", "ci", "--env-file", str(env_file),
               f"data.per_split_data_args_path={blend}")
    assert proc.returncode == 1
    assert "ended FAILED" in proc.stderr
    assert "megatron.bridge is not importable here" in proc.stdout + proc.stderr
    # the summary names the cause (once, for all ranks) before the log's tail, which is torchrun's report
    summary = proc.stderr[proc.stderr.index("ended FAILED"):].splitlines()
    assert summary[0].endswith("; ultra3 pretrain said:"), summary[:3]
    said = summary[1:summary.index("[nemotron] last log lines:")]
    # torchrun stops the other ranks once one has failed, so how many ranks printed the line before their
    # SIGTERM varies from run to run: one line for all of them, counting between 1 and the ranks started
    cause = (f"  ultra3 pretrain: this stage runs inside the NeMo container (image {nemo_image()}); "
             f"megatron.bridge is not importable here")
    counted = [re.fullmatch(re.escape(cause) + r"(?: \((\d+) ranks\))?", line) for line in said]
    counted = [m for m in counted if m]
    assert len(counted) == 1, said
    assert 1 <= int(counted[0].group(1) or 1) <= slurm.gpus_per_node, said
    assert len(said) == len(set(said)) and all(line.startswith("  ultra3 pretrain: ") for line in said), said


def test_batch_status_logs_cancel(cli, env_file, slurm):
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "ci", "--env-file", str(env_file),
               "profile.setup=[\"echo sleeping-now\", \"sleep 120\"]")
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    assert job_id.isdigit()
    assert f"nemotron ultra3 logs {job_id} -f" in proc.stderr
    deadline = time.time() + 60
    while slurm.state(job_id) != "RUNNING" and time.time() < deadline:
        time.sleep(0.5)
    status = cli("ultra3", "status")
    assert status.returncode == 0 and job_id in status.stdout and "RUNNING" in status.stdout
    deadline = time.time() + 30
    logs = cli("ultra3", "logs", job_id)
    while "sleeping-now" not in logs.stdout and time.time() < deadline:
        time.sleep(1)
        logs = cli("ultra3", "logs", job_id)
    assert "sleeping-now" in logs.stdout
    cancel = cli("ultra3", "cancel", job_id)
    assert cancel.returncode == 0, cancel.stderr
    assert slurm.wait(job_id, timeout=60) == "CANCELLED"
    follow = cli("ultra3", "logs", job_id, "-f")
    assert follow.returncode == 1 and "CANCELLED" in follow.stderr


def test_logs_and_failure_summary_are_plain_text_off_a_terminal(cli, env_file, slurm):
    """A job log with colour codes (Ray's prefixes, progress bars and tools that force colour write them) reads
    as plain text through `logs` and in the failure summary when the output is not a terminal."""
    setup = r"""profile.setup=['printf "\033[31mcoloured-line\033[0m \033]0;title\007done\n"', 'exit 3']"""
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "ci", "--env-file", str(env_file), setup)
    assert proc.returncode == 1, proc.stderr
    assert "coloured-line done" in proc.stderr + proc.stdout and "\x1b" not in proc.stderr + proc.stdout, proc.stderr
    job_id = proc.stderr.split("Slurm job ", 1)[1].split(",", 1)[0]
    logs = cli("ultra3", "logs", job_id)
    assert logs.returncode == 0 and "coloured-line done" in logs.stdout and "\x1b" not in logs.stdout, logs.stdout


def test_secret_reaches_job_but_no_file_or_log(cli, env_file, tmp_path, slurm):
    """The second setup line expands the secret: the job script runs under `set -x`, whose trace would
    print the expanded value into the job's .out unless the profile's setup lines run untraced."""
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "ci", "--env-file", str(env_file),
               'profile.setup=["echo secret-length=${#NEMOTRON_TEST_SECRET}", '
               '"printf %s $NEMOTRON_TEST_SECRET > /dev/null"]')
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert f"secret-length={len(SECRET)}" in proc.stdout + proc.stderr + _all_text(tmp_path)
    assert SECRET not in proc.stdout + proc.stderr
    leaks = [p for p in (tmp_path / "job root with spaces").rglob("*")
             if p.is_file() and p.name != "secrets.env" and SECRET in p.read_text(errors="replace")]
    assert not leaks, f"secret written to {leaks}"
    secret_files = list((tmp_path / "job root with spaces").rglob("secrets.env"))
    assert secret_files and all(oct(f.stat().st_mode & 0o777) == "0o600" for f in secret_files)


def _all_text(root: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in root.rglob("*.out") if p.is_file())


@pytest.mark.slow
def test_concurrent_batch_submissions_get_distinct_ids(cli, env_file, tmp_path, slurm):
    n = 8  # started together, 4 per core of the 2-core machine: each allocates its ids while the others do

    def one(i: int) -> subprocess.CompletedProcess:
        return cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "ci", "--env-file", str(env_file),
                   "profile.setup=[\"exit 0\"]", timeout=600)

    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(one, range(n)))
    failed = [r.stderr[-500:] for r in results if r.returncode != 0]
    assert not failed, failed[0]
    job_ids = [r.stdout.strip().splitlines()[-1] for r in results]
    experiments = [re.search(r"experiment (\S+)", r.stderr).group(1) for r in results]
    assert len(set(job_ids)) == n and len(set(experiments)) == n
    runs = list((tmp_path / "job root with spaces" / "runs").iterdir())
    assert len(runs) == n
    for job_id in job_ids:
        assert slurm.wait(job_id, timeout=120) == "COMPLETED"


def test_job_name_is_sanitised(cli, env_file, tmp_path, slurm):
    cfg = tmp_path / "we:ird/na me"
    cfg.mkdir(parents=True)
    path = cfg / "my:cfg v1.yaml"
    path.write_text("defaults: tiny\n", encoding="utf-8")
    proc = cli("ultra3", "data", "prep", "rl", "-c", str(path), "--batch", "ci", "--env-file", str(env_file),
               "profile.setup=[\"exit 0\"]")
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    assert slurm.wait(job_id) == "COMPLETED"
    deadline, name = time.time() + 20, ""
    while time.time() < deadline:  # sacct may briefly show a placeholder name ("allocation") for a new record
        name = slurm.run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobName").stdout.strip()
        if name != "allocation":
            break
        time.sleep(1)
    assert name == "ultra3-data-prep-rl-my-cfg-v1", (job_id, name)


def _times(slurm, job_id: str) -> tuple[str, str]:
    out = slurm.run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "Start,End").stdout.strip().splitlines()[0]
    start, end = out.split("|")
    return start, end


def test_pipe_second_stage_waits_and_reads_first_artifact(cli, env_file, tmp_path, slurm):
    out_dir = tmp_path / "chain data"
    proc = cli("ultra3", "pipe", "data-prep-pretrain", "pretrain", "-c", "tiny", "--batch", "ci",
               "--env-file", str(env_file), "data-prep-pretrain:sample=30", f"data-prep-pretrain:output_dir={out_dir}")
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.split()[-2:]
    assert slurm.wait(first, timeout=180) == "COMPLETED"
    assert slurm.wait(second, timeout=180) == "FAILED"  # the GPU stage fails fast here: no Megatron-Bridge
    assert _times(slurm, second)[0] >= _times(slurm, first)[1]  # it started only after the first ended
    runs = sorted((tmp_path / "job root with spaces" / "runs").glob("ultra3-pretrain-*"))
    train = runs[0].joinpath("train.yaml").read_text()
    assert f"per_split_data_args_path: {out_dir}/blend.json" in train
    assert (out_dir / "blend.json").is_file()


def test_pipe_failure_cancels_the_rest(cli, env_file, slurm):
    proc = cli("ultra3", "pipe", "data-prep-pretrain", "pretrain", "-c", "tiny", "--batch", "ci",
               "--env-file", str(env_file), 'data-prep-pretrain:profile.setup=["exit 3"]')
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.split()[-2:]
    assert slurm.wait(first, timeout=120) == "FAILED"
    assert slurm.wait(second, timeout=120) == "CANCELLED"


def test_image_build_job_reaches_the_node_and_says_what_is_missing(cli, env_file, tmp_path):
    dry = cli("kit", "slurm", "build", "ci", "--stage", "data-prep-pretrain", "--env-file", str(env_file), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "podman build" in dry.stdout and "enroot import" in dry.stdout and str(tmp_path / "images") in dry.stdout
    proc = cli("kit", "slurm", "build", "ci", "--stage", "data-prep-pretrain", "--env-file", str(env_file))
    assert proc.returncode == 1
    assert "is not installed" in proc.stderr and "podman and enroot" in proc.stderr
    assert "ended FAILED" in proc.stderr
    assert not list((tmp_path / "images").glob("*.sqsh"))  # nothing half-built is left as an image


def test_stage_messages_dedupe_ranks_and_skip_the_launcher():
    """The failure summary's lines from a log as torchrun (--tee prefix) and srun --label write it."""
    from nemotron.launch.jobs import stage_messages

    log = "\n".join([
        "I1130 torch/distributed/run.py:747] Using nproc_per_node=2.",
        "[default1]:ultra3 sft: cannot read x",
        "[default0]:ultra3 sft: cannot read x",
        "[rank0]:error: data.path='/d': no such file",
        "1: hint: check the path",
        "  exitcode  : -15 (pid: 24107)  (SIGTERM)",
        "ultra3 sft_extra: not this stage's line",
    ])
    assert stage_messages(log, "ultra3 sft") == ["ultra3 sft: cannot read x (2 ranks)",
                                                 "error: data.path='/d': no such file", "hint: check the path"]
    assert stage_messages(log, "ultra3 sft", n=1) == ["ultra3 sft: cannot read x (2 ranks)"]
    assert stage_messages("Traceback (most recent call last):\n  exitcode  : 1", "ultra3 sft") == []


def _folders(root: Path) -> dict[str, set[str]]:
    """The job folders under a job root: ``runs/<id>`` and NeMo-Run's ``experiments/<job name>/<id>``."""
    return {"runs": {p.name for p in (root / "runs").iterdir()} if (root / "runs").is_dir() else set(),
            "experiments": {f"{p.parent.name}/{p.name}" for p in (root / "experiments").glob("*/*")}}


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_refused_submission_removes_its_folders_only(cli, env_file, tmp_path, slurm):
    """sbatch refuses the job (a partition the cluster does not have): exit 1 with the one error line and its
    hint, and the folders written for that job (run folder, NeMo-Run's experiment folder) are gone, while the
    folders of a job Slurm accepted before are intact."""
    root = tmp_path / "job root with spaces"
    ok = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "ci", "--env-file", str(env_file),
             'profile.setup=["exit 0"]')
    assert ok.returncode == 0, ok.stderr
    kept = re.search(r"experiment (\S+)", ok.stderr).group(1)
    before = _folders(root)
    assert before == {"runs": {kept}, "experiments": {f"ultra3-data-prep-rl-tiny/{kept}"}}, before
    assert slurm.wait(ok.stdout.split()[-1], timeout=120) == "COMPLETED"
    kept_files = {f: _files(root / f) for f in [f"runs/{kept}", f"experiments/ultra3-data-prep-rl-tiny/{kept}"]}
    assert "train.yaml" in kept_files[f"runs/{kept}"] and "secrets.env" in kept_files[f"runs/{kept}"]

    refused = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "ci", "--env-file", str(env_file),
                  "profile.partition=no-such-partition")
    assert refused.returncode == 1, refused.stderr[-2000:]
    # the warnings of the dry-run's checks, if any, come first
    lines = [x for x in refused.stderr.strip().splitlines() if not x.startswith("warning: ")]
    assert len(lines) == 2 and lines[0].startswith("error: submission of ultra3 data prep rl failed: "), lines
    assert "invalid partition" in lines[0].lower() and lines[1].startswith("hint: "), lines
    assert _folders(root) == before
    assert {f: _files(root / f) for f in kept_files} == kept_files
    # the exact folders of the refused job: its experiment id is in the sbatch command NeMo-Run ran (--debug)
    debug = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "ci", "--env-file", str(env_file),
                "profile.partition=no-such-partition", "--debug")
    assert debug.returncode == 1
    gone = re.search(r"experiments/ultra3-data-prep-rl-tiny/(ultra3-data-prep-rl-tiny-[0-9-]+-[0-9a-f]{6})/",
                     debug.stderr).group(1)
    assert gone != kept
    assert not (root / "runs" / gone).exists() and not (root / "experiments" / "ultra3-data-prep-rl-tiny" / gone).exists()
    assert _folders(root) == before and debug.stderr.strip().splitlines()[-2].startswith("error: submission of")


def test_pipe_stage_refused_names_the_queued_jobs(cli, env_file, tmp_path, slurm):
    """The second stage of a pipe is refused after the first was queued: the command says which job is
    queued and how to cancel it, and only the refused stage's folders are removed."""
    root = tmp_path / "job root with spaces"
    proc = cli("ultra3", "pipe", "data-prep-pretrain", "pretrain", "-c", "tiny", "--batch", "ci",
               "--env-file", str(env_file), 'data-prep-pretrain:profile.setup=["sleep 300"]',
               "pretrain:profile.partition=no-such-partition")
    first = re.search(r"submitted ultra3 data prep pretrain: Slurm job (\d+)", proc.stderr)
    try:
        assert proc.returncode == 1 and first, proc.stderr[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert lines[-3] == (f"[nemotron] submitted before the failure and still queued: Slurm job(s) {first.group(1)}; "
                             f"cancel them with: nemotron ultra3 cancel {first.group(1)}"), lines[-3:]
        assert lines[-2].startswith("error: submission of ultra3 pretrain failed: ") and lines[-1].startswith("hint: ")
        assert slurm.state(first.group(1)) in ("PENDING", "RUNNING")
        folders = _folders(root)
        assert len(folders["runs"]) == 1 and next(iter(folders["runs"])).startswith("ultra3-data-prep-pretrain-tiny-")
        assert [f.split("/")[0] for f in folders["experiments"]] == ["ultra3-data-prep-pretrain-tiny"], folders
        cancel = cli("ultra3", "cancel", first.group(1))
        assert cancel.returncode == 0, cancel.stderr
    finally:
        if first:
            slurm.run("scancel", first.group(1), check=False)


def test_batch_job_records_its_artifact_when_it_ends(cli, env_file, tmp_path, slurm):
    """A detached Slurm job (local tunnel: the job reaches this machine's store) records its artifact as it ends:
    the record is there once Slurm says COMPLETED, before any `status` looks, with the job's own id."""
    out_dir = tmp_path / "data" / "rl"
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "ci", "--env-file", str(env_file),
               f"output_dir={out_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    job_id = proc.stdout.split()[-1]
    assert slurm.wait(job_id, timeout=240) == "COMPLETED"
    record = tmp_path / "home" / "artifacts" / "rl-data" / "v1.json"
    assert record.is_file(), "no artifact recorded when the job ended"
    recorded = json.loads(record.read_text())
    assert recorded["path"] == str(out_dir) and recorded["job_id"] == job_id, recorded
    assert recorded["site"].startswith("slurm:") and recorded["scratch"] is False, recorded
    status = cli("ultra3", "status", job_id)
    assert status.returncode == 0 and "COMPLETED" in status.stdout
    assert sorted(p.name for p in record.parent.glob("v*.json")) == ["v1.json"]


@pytest.mark.skipif(not __import__("shutil").which("sbatch") or Path("/etc/slurm/slurm.conf").exists(),
                    reason="needs an sbatch that finds no Slurm controller (no SLURM_CONF, no /etc/slurm/slurm.conf)")
@pytest.mark.parametrize("job_dir", ["lustre/my-project/nemotron-jobs", "lustre/my project/jobs"])
def test_a_submission_sbatch_cannot_make_leaves_nothing_on_this_machine(tmp_path, job_dir):
    """This machine has sbatch but no Slurm controller to reach (a laptop with the Slurm client, a cluster profile
    copied to it): one line saying so with a hint, and the job_dir it would have made here (the folders, a job root
    with spaces' safe symlink) is gone, so that later dry runs do not measure this disk as the cluster's."""
    import os
    import subprocess
    import sys

    env_file = write_slurm_profile(tmp_path / "env.toml", account="a", partition="p", job_dir=tmp_path / job_dir)
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "NEMOTRON_ENV_FILE")}
    env["NEMOTRON_HOME"] = str(tmp_path / "home")
    before = set(tmp_path.iterdir())
    proc = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch",
                           "ci", "--env-file", str(env_file)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    lines = [x for x in proc.stderr.strip().splitlines() if not x.startswith("warning: ")]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert set(tmp_path.iterdir()) == before and not (tmp_path / "lustre").exists(), sorted(tmp_path.iterdir())
    assert lines[0].startswith("error: submission of ultra3 data prep rl failed: sbatch on this machine cannot reach "
                               "a Slurm controller (sbatch: error: "), lines
    assert lines[1].startswith("hint: submit from the cluster's login node") and len(lines) == 2, lines
