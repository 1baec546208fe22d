"""`executor = "local"` profiles: the job package of a Slurm job, run by NeMo-Run's real LocalExecutor.

No mocks: each test runs the `nemotron` command in a subprocess, as a user would; NeMo-Run (0.11.1)
starts the stage's entry script from the job folder; the stages are the real data prep and the real
`local` pretraining runtime (which saves a checkpoint and exits 75 on SIGTERM).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local_runtime_support import write_pretrain_data
from submit_support import nemotron_runner

pytest.importorskip("nemo_run", reason="the local executor is NeMo-Run's (a base dependency: reinstall nemotron-cli)")

SECRET = "s3cret-local-value-5521"


@pytest.fixture
def env_file(tmp_path) -> Path:
    path = tmp_path / "env.toml"
    path.write_text(
        f"""
[here]
executor = "local"
gpus_per_node = 0
job_dir = "{tmp_path / 'job root'}"
secrets = {{ NEMOTRON_TEST_SECRET = "{SECRET}" }}
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    out = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "NEMOTRON_DATA_DIR": str(tmp_path / "data")}
    out.pop("NEMOTRON_ENV_FILE", None)
    return out


@pytest.fixture
def cli(env, tmp_path):
    return nemotron_runner(env, tmp_path)


def _pretrain_args(tmp_path: Path, env_file: Path, mode: str, iters: int = 5000) -> list[str]:
    """The real `local` pretraining (small NemotronH on CPU), long enough to be stopped while it trains."""
    blend = write_pretrain_data(tmp_path / "pdata", docs=60, valid_docs=10)
    return ["ultra3", "pretrain", "-c", "local", mode, "here", "--env-file", str(env_file),
            f"data.per_split_data_args_path={blend}", "model.seq_length=32", f"train.train_iters={iters}",
            "train.global_batch_size=2", "train.micro_batch_size=2", "validation.eval_iters=0",
            f"checkpoint.save_interval={iters}", "logger.log_interval=1", "scheduler.lr_warmup_iters=1",
            f"scheduler.lr_decay_iters={iters}", "run.env.cpus=2", f"checkpoint.save={tmp_path / 'ckpt'}"]


def _job_processes(experiment_id: str) -> list[int]:
    """Pids of live processes whose environment names the experiment (the job and its children)."""
    pids = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"NEMOTRON_EXPERIMENT_ID={experiment_id}".encode() in env.read_bytes().split(b"\0"):
                stat = (env.parent / "stat").read_text()
                if stat.rsplit(")", 1)[-1].split()[0] != "Z":
                    pids.append(int(env.parent.name))
        except OSError:
            continue
    return pids


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def _run_folder(tmp_path: Path) -> Path:
    runs = list((tmp_path / "job root" / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_run_completes_with_the_slurm_package_and_records_the_artifact(cli, env_file, tmp_path):
    out_dir = tmp_path / "rl out"
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "here", "--env-file", str(env_file),
               f"output_dir={out_dir}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "NeMo-Run local executor" in proc.stderr and "COMPLETED" in proc.stderr
    assert "train.jsonl" in proc.stdout  # the stage's own output lines were streamed
    assert (out_dir / "train.jsonl").is_file() and (out_dir / "validation.jsonl").is_file()
    assert "artifact rl-data v1" in proc.stderr
    recorded = json.loads((tmp_path / "home" / "artifacts" / "rl-data" / "v1.json").read_text())
    assert recorded["path"] == str(out_dir) and recorded["job_id"] != "local"
    # the package of a Slurm job: train.yaml, job.yaml, secrets.env (0600), the code snapshot it ran from
    run = _run_folder(tmp_path)
    assert (run / "train.yaml").is_file() and "config_hash:" in (run / "job.yaml").read_text()
    assert oct((run / "secrets.env").stat().st_mode & 0o777) == "0o600"
    assert (run / "code" / "nemotron" / "_stages" / "ultra3" / "data_prep_rl" / "run.py").is_file()
    state = json.loads((run / "local-job.json").read_text())
    assert state["state"] == "COMPLETED" and state["exit_code"] == 0
    # the job's PATH: the host Python's folder, then the submitting shell's PATH (system commands too)
    assert state["env_vars"]["PATH"] == f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"
    assert state["task"]["path"] == f"{state['run_dir']}/code/nemotron/_stages/ultra3/data_prep_rl/run.py"
    # ... run by NeMo-Run: its experiment folder with the LocalExecutor config and the task's logs
    experiments = tmp_path / "job root" / "experiments"
    executor_yaml = next(experiments.rglob("*_executor.yaml")).read_text()
    assert "LocalExecutor" in executor_yaml
    assert "train.jsonl" in Path(state["stdout"]).read_text()
    status = cli("ultra3", "status")
    assert status.returncode == 0 and "COMPLETED" in status.stdout and state["app_id"] in status.stdout


def test_failure_returns_the_stage_exit_code(cli, env_file, tmp_path):
    # a shard that only the stage itself finds wrong: a whole, consistent index (the dry run's checks read every
    # entry against the .bin and pass) over token ids the model's vocabulary does not hold; the stage refuses it when
    # it reads the data (exit 1, its own message)
    import struct

    from nemotron.data.indexed import DTYPE_CODES, MAGIC, VERSION

    (tmp_path / "damaged").mkdir()
    index = (MAGIC + struct.pack("<QBQQ", VERSION, DTYPE_CODES["int32"], 2, 3) + struct.pack("<2i", 2, 2)
             + struct.pack("<2q", 0, 8) + struct.pack("<3q", 0, 1, 2))
    (tmp_path / "damaged" / "shard.idx").write_bytes(index)
    (tmp_path / "damaged" / "shard.bin").write_bytes(struct.pack("<4i", *[999_999_999] * 4))
    bad = tmp_path / "blend.json"
    bad.write_text(json.dumps({"train": [1.0, str(tmp_path / "damaged" / "shard")]}))
    args = ["ultra3", "pretrain", "-c", "local", f"data.per_split_data_args_path={bad}"]
    direct = cli(*args)
    assert direct.returncode not in (0, 2), direct.stderr[-1500:]  # 2 would mean refused before starting
    proc = cli(*args, "--run", "here", "--env-file", str(env_file))
    assert proc.returncode == direct.returncode, proc.stderr[-2000:]
    assert "token id 999999999 does not fit the model's vocabulary" in proc.stderr  # the stage's own message, streamed
    assert f"ended FAILED with exit code {direct.returncode}" in proc.stderr
    assert "artifact" not in proc.stderr
    status = cli("ultra3", "status")
    assert "FAILED" in status.stdout


@pytest.mark.slow
def test_batch_status_logs_secret_and_cancel(cli, env_file, tmp_path, env):
    """--batch returns at once; the job trains meanwhile (with the secret in its environment only);
    cancel stops it through NeMo-Run: the stage saves and exits 75, which status and logs -f report."""
    proc = cli(*_pretrain_args(tmp_path, env_file, "--batch"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    job_id = proc.stdout.strip().splitlines()[-1]
    assert f"nemotron ultra3 logs {job_id} -f" in proc.stderr
    experiment = json.loads((_run_folder(tmp_path) / "local-job.json").read_text())["experiment_id"]
    try:
        status = cli("ultra3", "status", job_id)
        assert status.returncode == 0 and "RUNNING" in status.stdout, status.stdout + status.stderr
        _wait(lambda: "step 3/" in cli("ultra3", "logs", job_id).stdout, 240, "training steps in the log")
        # why of the running job: still running, its last line, how to follow it (no "cause unknown", no literal JOB)
        why = cli("ultra3", "why", job_id, "--json")
        verdict = json.loads(why.stdout)
        assert verdict["cause"] == "running" and verdict["state"] == "RUNNING", verdict
        assert verdict["evidence"].startswith("its last line so far: ") and "JOB" not in verdict["hint"], verdict
        assert verdict["hint"] == (f"follow it: nemotron ultra3 logs {job_id} -f; once it has ended: "
                                   f"nemotron ultra3 why {job_id}"), verdict
        pids = _job_processes(experiment)
        assert pids, "no process of the job found"
        environ = Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
        assert f"NEMOTRON_TEST_SECRET={SECRET}".encode() in environ
        # the running stage's PATH: the venv's folder, the shell's PATH (once), then the working folder (torchx's)
        path = next(v.decode()[5:] for v in environ if v.startswith(b"PATH="))
        assert path == f"{os.path.dirname(sys.executable)}:{env['PATH']}:{tmp_path}", path
        assert shutil.which("bash", path=path) and shutil.which("git", path=path), path
        cancel = cli("ultra3", "cancel", job_id)
        assert cancel.returncode == 0, cancel.stderr
        # cancel waits for the job's end: status right after says CANCELLED (it said RUNNING for ~20 s)
        assert f"cancelled job {job_id} ({experiment}): CANCELLED (exit code 75)" in cancel.stderr, cancel.stderr
        now = cli("ultra3", "status", job_id)
        assert "CANCELLED" in now.stdout and "RUNNING" not in now.stdout, now.stdout
        follow = cli("ultra3", "logs", job_id, "-f", timeout=120)
        assert follow.returncode == 75, follow.stderr[-2000:]  # saved and stopped: resumable
        assert "CANCELLED" in follow.stderr and "run the same command again to resume" in follow.stderr
    finally:
        for pid in _job_processes(experiment):  # never leave the job behind a failed assertion
            os.kill(pid, signal.SIGKILL)
    status = cli("ultra3", "status", job_id)
    assert "CANCELLED" in status.stdout and "75" in status.stdout
    assert not _job_processes(experiment)
    leaks = [p for p in (tmp_path / "job root").rglob("*")
             if p.is_file() and p.name != "secrets.env" and SECRET in p.read_text(errors="replace")]
    assert not leaks, f"secret written to {leaks}"
    again = cli("ultra3", "cancel", job_id)
    assert again.returncode == 0 and "had already ended (CANCELLED); nothing to cancel" in again.stderr


@pytest.mark.slow
def test_why_of_a_run_in_the_shell_that_is_still_running(env, env_file, tmp_path):
    """`why` while a run in this shell (no profile) trains said "cause unknown" and "fix: nemotron ultra3 logs JOB",
    which refuses a shell run's id: now cause running, its last progress line, and `tail -f` of its output.log."""
    args = [a for a in _pretrain_args(tmp_path, env_file, "--run") if a not in ("--run", "here", "--env-file",
                                                                                str(env_file))]
    proc = subprocess.Popen([sys.executable, "-m", "nemotron", *args], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        runs = tmp_path / "home" / "runs"
        def stepped() -> Path | None:
            for log in runs.glob("*/output.log"):
                if "step 1/" in log.read_text(errors="replace"):
                    return log
            return None

        log = _wait(stepped, 240, "a training step in the run folder's output.log")
        out = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "why", log.parent.name], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "running" in out.stdout and "cause unknown" not in out.stdout and "logs JOB" not in out.stdout
        verdict = json.loads(subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "why", log.parent.name,
                                             "--json"], env=env, cwd=tmp_path, capture_output=True, text=True,
                                            timeout=120).stdout)
        assert verdict["cause"] == "running" and verdict["state"] == "RUNNING", verdict
        assert "[local] step " in verdict["evidence"], verdict
        assert verdict["hint"] == (f"follow it: tail -f {shlex.quote(str(log))}; once it has ended: "
                                   f"nemotron ultra3 why {log.parent.name}"), verdict
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


@pytest.mark.parametrize("signum,expected", [(signal.SIGINT, 130), (signal.SIGTERM, 75)])
@pytest.mark.slow
def test_run_stops_the_job_on_ctrl_c_and_passes_sigterm_on(env, env_file, tmp_path, signum, expected):
    """Ctrl-C (SIGINT to the command, as a terminal sends it) stops the job and exits 130; SIGTERM
    (`kill`, `timeout`) is passed on: the stage saves its checkpoint and its exit code 75 comes back."""
    cmd = [sys.executable, "-m", "nemotron", *_pretrain_args(tmp_path, env_file, "--run")]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    experiment = None
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "step 3/" in line:
                break
        else:
            pytest.fail("the run ended before training:\n" + "".join(lines[-40:]))
        experiment = json.loads((_run_folder(tmp_path) / "local-job.json").read_text())["experiment_id"]
        proc.send_signal(signum)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == expected, rest[-2000:]
    state = json.loads((_run_folder(tmp_path) / "local-job.json").read_text())
    assert state["state"] == "CANCELLED" and state["exit_code"] == 75
    assert "stopped by SIGTERM" in Path(state["stdout"]).read_text()
    assert experiment and not _job_processes(experiment)


def test_dry_run_shows_the_package_and_hides_the_secret(cli, env_file):
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run", "--batch", "here", "--env-file", str(env_file))
    assert proc.returncode == 0, proc.stderr
    assert "NeMo-Run LocalExecutor" in proc.stdout and "/code/nemotron/_stages/ultra3/data_prep_rl/run.py" in proc.stdout
    assert "NEMOTRON_TEST_SECRET='***'" in proc.stdout and SECRET not in proc.stdout
    # a shell line that can be pasted: $PATH outside single quotes, so the shell expands it
    bindir = os.path.dirname(sys.executable)
    assert f' PATH={shlex.quote(bindir)}:"$PATH" ' in proc.stdout, proc.stdout


def test_run_without_profile_stays_a_direct_child_process(cli, tmp_path):
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", f"output_dir={tmp_path / 'o'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "NeMo-Run" not in proc.stderr and not (tmp_path / "job root").exists()
    assert list((tmp_path / "home" / "runs").glob("*/train.yaml"))


def test_gpu_stage_is_refused_before_anything_is_packaged(env_file, env, tmp_path):
    env["CUDA_VISIBLE_DEVICES"] = ""
    cli = nemotron_runner(env, tmp_path)  # after the change: the runner copies the environment it is given
    text = env_file.read_text().replace("gpus_per_node = 0", "gpus_per_node = 8")
    env_file.write_text(text)
    proc = cli("ultra3", "pretrain", "-c", "tiny", "--run", "here", "--env-file", str(env_file),
               f"data.per_split_data_args_path={env_file}")
    assert proc.returncode == 2, proc.stderr[-1500:]
    assert "needs 8 GPUs per node; this machine has 0 visible" in proc.stderr, proc.stderr
    assert not (tmp_path / "job root").exists()


def test_a_batch_job_records_its_artifact_when_it_ends(cli, env_file, tmp_path):
    """The artifact is recorded by the job as it ends (stamped then), not when a later command looks: the record is
    there before any `status`, made no later than the supervisor saw the job end."""
    out_dir = tmp_path / "output" / "rl"
    proc = cli("ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "here", "--env-file", str(env_file),
               f"output_dir={out_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    state_file = _run_folder(tmp_path) / "local-job.json"
    state = _wait(lambda: (s := json.loads(state_file.read_text())) if json.loads(state_file.read_text())["state"]
                  in ("COMPLETED", "FAILED", "CANCELLED") else None, 240, "the job to end")
    assert state["state"] == "COMPLETED", state
    record = tmp_path / "home" / "artifacts" / "rl-data" / "v1.json"
    assert record.is_file(), "no artifact recorded when the job ended"
    recorded = json.loads(record.read_text())
    assert recorded["path"] == str(out_dir) and recorded["created"] <= state["ended"], (recorded, state)
    assert recorded["site"].startswith("here:") and recorded["job_id"] == state["experiment_id"], recorded
    assert "(recorded at job end)" in Path(state["stderr"]).read_text()
    # a later `status` adds no version and keeps the job's time
    assert cli("ultra3", "status").returncode == 0
    assert sorted(p.name for p in record.parent.glob("v*.json")) == ["v1.json"]
    again = json.loads(record.read_text())
    assert again.get("latest_at", again["created"]) <= state["ended"] + 1, again


def test_the_interrupted_line_says_what_the_data_prep_kept(tmp_path, monkeypatch):
    """The line after a Ctrl-C says what is actually kept: the data prep driver counts the finished shards (their
    receipts) of the version folder it writes and leaves that in the run folder (interrupted.txt), which the CLI's
    line uses; before any shard is finished it says that the next run starts from the beginning, never "saved its
    state". A stage that leaves no note (training: its checkpoint) keeps the old words."""
    from nemotron.data import driver
    from nemotron.launch.execute import stopped_line

    class S:
        output_dir = str(tmp_path / "out")

    vdir = tmp_path / "out"
    (vdir / "data").mkdir(parents=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("NEMOTRON_RUN_DIR", str(run_dir))
    monkeypatch.setitem(driver._WRITING, "vdir", vdir)
    assert stopped_line("ultra3 pretrain", run_dir, "saved its state") == (
        f"ultra3 pretrain saved its state; run the same command again to resume (run folder: {run_dir})")
    driver.write_interrupt_note(driver.kept_note(S()))
    line = stopped_line("ultra3 data prep pretrain", run_dir, "saved its state")
    assert line == (f"ultra3 data prep pretrain was interrupted before any shard was finished; nothing of it is kept "
                    f"in {vdir}, so the next run starts from the beginning (run folder: {run_dir})")
    for k in range(3):
        (vdir / "data" / f"train_{k:05d}.receipt.json").write_text("{}")
    driver.write_interrupt_note(driver.kept_note(S()))
    assert stopped_line("ultra3 data prep pretrain", run_dir, "saved its state").startswith(
        f"ultra3 data prep pretrain was interrupted; 3 finished shards (with their receipts) kept in {vdir}: run the "
        "same command again to resume from there")
    from nemotron.runtime.dispatch import _interrupt_note

    assert _interrupt_note() == driver.kept_note(S())  # the job's own SIGTERM line (and requeue marker) says it too


@pytest.mark.slow
def test_ctrl_c_while_ray_starts_stops_the_job_cleanly_and_relays_its_line(env, env_file, tmp_path):
    """Ctrl-C of the attached command while the job's Ray has just started (where Ray's native failure-signal handler
    used to take the job's SIGTERM: a `*** SIGTERM received ... __recv` stack dump and exit 134): the job stops as
    later ones do (exit 75, one `stopped by SIGTERM before any shard was finished` line, no dump), and the attached
    command relays that line. The moment is made exact with the stage's hold point (nemotron.errors.HOLD_ENV)."""
    from nemotron.errors import HOLD_ENV

    marker = tmp_path / "held"
    env = {**env, HOLD_ENV: f"ray-started={marker}"}
    cmd = [sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "rl", "-c", "tiny", "--run", "here",
           "--env-file", str(env_file), f"output_dir={tmp_path / 'out'}", "workers.engine=ray", "run.env.cpus=1"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait(lambda: marker.exists() or proc.poll() is not None, 240, "the job to hold right after Ray started")
        assert proc.poll() is None, proc.communicate()[0][-2000:]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-2000:]
    state = json.loads((_run_folder(tmp_path) / "local-job.json").read_text())
    log = Path(state["stdout"]).read_text() + Path(state["stderr"]).read_text()
    assert state["state"] == "CANCELLED" and state["exit_code"] == 75, (state, log[-2000:])
    assert "SIGTERM received" not in log and "logging.cc" not in log, log[-2000:]
    line = "ultra3 data prep rl: stopped by SIGTERM before any shard was finished; nothing of it is kept"
    assert line in log, log[-2000:]
    after = out.split("stopping local job", 1)[1]
    assert line in after, out[-2000:]  # relayed by the attached command


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux `script` for a terminal")
def test_a_run_here_in_a_terminal_keeps_its_output_and_the_stage_still_sees_a_terminal(env, tmp_path):
    """Under a terminal (util-linux `script` gives the command one), the run here still gives the stage a terminal (a
    pseudo-terminal: its live progress bar, drawn with ANSI erase-line codes, is there) while output.log keeps the
    output with plain \\n line ends and exit.json the exit code."""
    command = shlex.join([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "rl", "-c", "tiny",
                          f"output_dir={tmp_path / 'o'}"])
    proc = subprocess.run(["script", "-qec", command, "/dev/null"], env=env, cwd=tmp_path, capture_output=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:]
    (folder,) = (tmp_path / "home" / "runs").iterdir()
    log = (folder / "output.log").read_bytes()
    assert log.startswith(b"planning: reading ") and b"\r\n" not in log, log[:300]
    assert b"\x1b[2K" in log, log[-500:]  # the live progress bar: the stage saw a terminal
    assert json.loads((folder / "exit.json").read_text())["exit_code"] == 0
    assert b"planning: reading " in proc.stdout  # and the terminal got it


@pytest.mark.slow
def test_cancel_after_every_shard_was_finished_says_nothing_is_left_to_resume(cli, env, env_file, tmp_path):
    """`cancel` of a `--batch` data prep whose shards were all finished (here: held where it writes its manifest,
    nemotron.errors.HOLD_ENV `publishing`) said "N finished shards ... run the same command again to resume" although
    nothing was left: the log says every shard was finished and that a rerun redoes none, only writes the last files
    and records the output; the rerun does exactly that (exit 0, no shard's receipt rewritten)."""
    from nemotron.errors import HOLD_ENV

    marker = tmp_path / "held"
    out_dir = tmp_path / "rl out"
    args = ("ultra3", "data", "prep", "rl", "-c", "tiny", "--env-file", str(env_file), f"output_dir={out_dir}")
    held = nemotron_runner({**env, HOLD_ENV: f"publishing={marker}"}, tmp_path)
    proc = held(*args[:6], "--batch", "here", *args[6:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    job_id = proc.stdout.strip().splitlines()[-1]
    _wait(lambda: marker.exists() or any(w in cli("ultra3", "status", job_id).stdout for w in ("COMPLETED", "FAILED")),
          240, "the job to hold before its manifest")
    assert marker.exists(), cli("ultra3", "logs", job_id).stdout[-2000:]
    receipts = {p: p.stat().st_mtime_ns for p in out_dir.rglob("*.receipt.json")}
    assert receipts and not (out_dir / "manifest.json").exists()
    assert cli("ultra3", "cancel", job_id).returncode == 0
    follow = cli("ultra3", "logs", job_id, "-f", timeout=120)
    log = follow.stdout + follow.stderr
    assert follow.returncode == 75, log[-2000:]
    assert (f"ultra3 data prep rl: stopped by SIGTERM after every shard was finished ({len(receipts)} shards with "
            f"their receipts in {out_dir}): nothing is left to resume; the same command run again redoes no shard, it "
            "only writes the output's last files (manifest.json) from them and records it") in log, log[-2000:]
    assert "again to resume" not in log, log[-2000:]
    again = cli(*args[:6], "--run", "here", *args[6:])
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert (out_dir / "manifest.json").is_file()
    assert {p: p.stat().st_mtime_ns for p in out_dir.rglob("*.receipt.json")} == receipts  # no shard redone
