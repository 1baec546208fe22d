"""``why``: how a job ended, on real logs.

* the fixtures in ``tests/fixtures/why/``: excerpts of logs quoted in public bug reports (the first line of each names
  the report; the second the cause it must get), 15 kinds;
* the local Slurm cluster's own failed jobs, submitted here with a job record as a submission writes one: our code
  raising an exception (the first frame in ``src/nemotron`` is named), a stage's own ``error:``/``hint:`` lines, a job
  over its time limit (Slurm's ``TIMEOUT`` and its ``DUE TO TIME LIMIT`` line), a cancelled one, a completed one.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from nemotron.cli.main import main
from nemotron.launch import jobs, why

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "why"
REPO = Path(__file__).resolve().parents[2]


def _fixture(path: Path) -> tuple[str, str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    source = lines[0].removeprefix("# source: ")
    expect = lines[1].removeprefix("# expect: ")
    body = "\n".join(ln for ln in lines if not ln.startswith("# "))
    return source, expect, body


CASES = sorted(FIXTURES.glob("*.log"))


def test_fixtures_cover_fifteen_kinds_each_with_its_source():
    kinds = {_fixture(p)[1] for p in CASES}
    assert len(kinds) >= 15, kinds
    for p in CASES:
        source, expect, body = _fixture(p)
        assert source.startswith("https://github.com/") and expect in {c.id for c in why.CAUSES}, p.name
        assert body.strip(), p.name


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_public_log_excerpt_is_named(path):
    _, expect, body = _fixture(path)
    got = why.classify(body)
    assert got["cause"] == expect, (path.name, got)
    assert (got["evidence"] and got["evidence"] in body) or got["evidence"] == got.get("exception"), got
    assert got["hint"]


def test_oom_is_named_before_the_timeouts_it_causes():
    """One rank out of memory, the others' collectives time out: the OOM is the cause, the timeout listed as also."""
    oom = _fixture(FIXTURES / "cuda-oom.log")[2]
    timeout = _fixture(FIXTURES / "nccl-timeout.log")[2]
    got = why.classify(timeout + "\n" + oom)
    assert got["cause"] == "cuda-oom"
    assert [a["cause"] for a in got["also"]] == ["nccl-timeout"]


def test_scheduler_state_wins_and_fills_in_a_silent_log():
    assert why.classify("step 10 | loss 2.3", "TIMEOUT", "0:0")["cause"] == "walltime"
    assert why.classify("step 10 | loss 2.3", "PREEMPTED", "0:0")["cause"] == "preempted"
    assert why.classify("", "OUT_OF_MEMORY", "0:125")["cause"] == "host-oom"
    got = why.classify(_fixture(FIXTURES / "nccl-timeout.log")[2], "TIMEOUT", "0:0")
    assert got["cause"] == "walltime" and got["also"][0]["cause"] == "nccl-timeout"
    assert why.classify("done", "COMPLETED", "0:0")["cause"] == "completed"
    assert why.classify("nothing known here", "FAILED", "3:0")["cause"] == "unknown"


def test_why_log_json_on_a_fixture(capsys):
    code = main(["ultra3", "why", "--log", str(FIXTURES / "host-oom.log"), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert doc["cause"] == "host-oom" and doc["schema"] == "nemotron/why/v1"


def test_a_log_that_cannot_be_read_is_one_line_with_a_hint(tmp_path, capsys):
    assert main(["ultra3", "why", "--log", str(tmp_path / "none.log")]) == 2
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'none.log'}: cannot read (No such file or directory)" in err and "hint: " in err, err


def test_the_evidence_names_whose_state_it_is():
    assert why.classify("", "COMPLETED")["evidence"] == "Slurm state COMPLETED"
    assert why.classify("", "COMPLETED", None, "local executor")["evidence"] == "local executor state COMPLETED"
    got = why.classify("", "TIMEOUT", "0:0", "Ray")
    assert got["cause"] == "walltime" and got["evidence"] == "Ray state TIMEOUT (exit code 0:0)", got


def test_a_log_file_given_as_the_job_id_gets_the_log_option_as_its_hint(capsys):
    log = FIXTURES / "cuda-oom.log"
    assert main(["ultra3", "why", str(log)]) == 2
    err = capsys.readouterr().err
    assert f"no job '{log}'" in err and f"hint: to read a log file: nemotron ultra3 why --log {log}" in err, err


def test_a_stage_error_without_a_hint_line_gets_a_fix_of_its_own():
    """The fix never points at a ``hint:`` line that is not there; a hint line, when present, is the fix."""
    bad_parquet = ("error: /d/notparquet.parquet: cannot read (ArrowInvalid: Parquet magic bytes not found in footer. "
                   "Either the file is corrupted or this is not a parquet file.)\n"
                   "ultra3 data prep sft failed with exit code 1 (run folder: /h/runs/x)")
    for text in (bad_parquet, "error: dataset p (weight 1) contributes nothing", "error: something new went wrong",
                 "error: /d/a.jsonl: not UTF-8 text (byte 3)", "error: " + "y" * 1000 + "\nlast line"):
        got = why.classify(text)
        assert got["cause"] == "stage-error" and got["hint"], got
        assert "hint line" not in got["hint"], got
    assert "not the format its name says" in why.classify(bad_parquet)["hint"]
    assert why.classify("error: x\nhint: do y")["hint"] == "do y"
    # a long error line keeps its own hint line (the evidence is cut, the line is still found)
    got = why.classify("error: " + "z" * 1000 + "\nhint: do z")
    assert got["hint"] == "do z" and got["evidence"].endswith("...") and len(got["evidence"]) == why.EVIDENCE_CHARS + 3


def test_a_not_parquet_input_fails_with_a_hint_that_why_shows(tmp_path, monkeypatch, capfd):
    """The real stage's message (data prep sft on a file named .parquet that is not Parquet: refused before any
    work, exit 2, with its hint line), read back by ``why``."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    (tmp_path / "notparquet.parquet").write_text("not parquet\n")
    blend = tmp_path / "blend.json"
    blend.write_text(json.dumps({"datasets": [{"name": "np", "path": str(tmp_path / "notparquet.parquet"),
                                               "weight": 1}]}))
    code = main(["ultra3", "data", "prep", "sft", "-c", "tiny", f"blend_path={blend}",
                 f"output_dir={tmp_path / 'out'}"])
    err = capfd.readouterr().err
    assert code == 2, err
    log = tmp_path / "job.log"
    log.write_text(err)
    got = why.explain_files([str(log)])
    assert got["cause"] == "stage-error" and "not a readable Parquet file (Parquet magic bytes" in got["evidence"], got
    assert "path and format" in got["hint"], got


def test_a_run_in_the_shell_keeps_its_output_for_why_and_is_no_job_for_status_logs(tmp_path, monkeypatch, capfd):
    """A run without a profile names its run folder, which keeps its output (output.log) and exit code (exit.json):
    ``why`` given its id or folder, or without an id when it is the latest run, explains it from there;
    ``status``/``logs``/``cancel`` say it is no submitted job and that ``why`` explains it; ``status`` without an id
    notes that the latest run here was such a run when a submitted job is shown."""
    import gzip

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    # a gzip file whose deflate data is corrupt (its first bytes are gzip's): it fails in the work, exit 1
    gz = gzip.compress("".join(json.dumps({"messages": [{"role": "user", "content": f"q {i * 7919}"},
                                                         {"role": "assistant", "content": f"a {i * 104729}"}]}) + "\n"
                               for i in range(2000)).encode())
    (tmp_path / "corrupt.jsonl.gz").write_bytes(gz[:30] + bytes(300) + gz[330:])
    blend = tmp_path / "blend.json"
    blend.write_text(json.dumps({"datasets": [{"name": "gz", "path": str(tmp_path / "corrupt.jsonl.gz"),
                                               "weight": 1}]}))
    old = jobs.JobRecord(experiment_id="ultra3-pretrain-tiny-old", job_id="77", stage="pretrain",
                         title="ultra3 pretrain", profile="local-gpu", env_file="", run_dir=str(tmp_path / "gone"),
                         log_dir=str(tmp_path / "gone"),
                         job_name="pretrain", tunnel=jobs.LOCAL_EXECUTOR, submitted=time.time() - 3600)
    assert main(["ultra3", "why"]) == 2
    err = capfd.readouterr().err
    assert "no job has been submitted from this machine yet" in err and "are not jobs" in err, err
    code = main(["ultra3", "data", "prep", "sft", "-c", "tiny", f"blend_path={blend}",
                 f"output_dir={tmp_path / 'out'}"])
    err = capfd.readouterr().err
    assert code == 1, err
    folder = Path(re.search(r"\(run folder: (\S+)\)", err).group(1))
    # the run folder keeps the run's output and exit code: why (by id, by folder, or the latest) explains it
    assert json.loads((folder / "exit.json").read_text())["exit_code"] == 1
    assert "error: " in (folder / "output.log").read_text()
    for argv in (["why", folder.name, "--json"], ["why", str(folder), "--json"], ["why", "--json"]):
        assert main(["ultra3", *argv]) == 0, argv
        verdict = json.loads(capfd.readouterr().out)
        assert verdict["job"] == folder.name and verdict["state"] == "FAILED" and verdict["exit_code"] == "1", verdict
        assert verdict["cause"] == "stage-error" and verdict["evidence"].startswith("error: "), verdict
        assert verdict["sources"] == [str(folder / "output.log")], verdict
    for argv in (["status", str(folder)], ["logs", folder.name], ["cancel", folder.name]):
        assert main(["ultra3", *argv]) == 2, argv
        err = capfd.readouterr().err
        assert f"error: '{folder.name}' is a run in this shell on this machine, not a submitted job" in err, err
        assert f"run folder ({folder}: output.log" in err and f"nemotron ultra3 why {folder.name}" in err, err
    jobs.save(old)
    main(["ultra3", "status"])
    err = capfd.readouterr().err
    assert f"note: the latest run here, {folder.name}, ran in the shell" in err and "job, 77 " in err, err
    main(["ultra3", "why", "--json"])  # the run here is newer than job 77: why explains it
    assert json.loads(capfd.readouterr().out)["job"] == folder.name
    main(["ultra3", "why", "77"])  # an id given: that job (whose folders are gone here), no note
    assert "note:" not in capfd.readouterr().err
    (folder / "output.log").unlink()  # a run folder of a version before the output was kept: said, with the way out
    assert main(["ultra3", "why", folder.name]) == 2
    assert "kept no output in its run folder" in capfd.readouterr().err


def test_why_is_linear_in_a_long_line_and_shows_at_most_a_line_of_evidence(tmp_path, capsys):
    """A log of one 20 MB line (a progress bar without newlines): seconds, not minutes; the evidence is cut."""
    log = tmp_path / "long.log"
    log.write_text("x" * 20_000_000 + "\n")
    start = time.monotonic()
    assert main(["ultra3", "why", "--log", str(log)]) == 0
    took = time.monotonic() - start
    out = capsys.readouterr().out
    assert took < 15, took  # was 79 s on 2 shared cores: the whole line printed as evidence and wrapped
    assert len(out) < 3000, len(out)
    got = why.classify("x" * 100_000 + " CUDA out of memory. Tried to allocate 2 GiB")
    assert got["cause"] == "cuda-oom" and len(got["evidence"]) == why.EVIDENCE_CHARS + 3, got  # found at a line's end


def test_why_reads_only_a_large_logs_end_in_bounded_memory(tmp_path, monkeypatch):
    """A log larger than TAIL_BYTES is read from its end only: the memory ``why`` takes stays a few TAIL_BYTES
    (it read the whole file into one string, then its lines: several times a 90 MB log's size), the cause at the end is found as in the
    whole text, and a log that fits is read whole (the same result as classifying its text)."""
    import tracemalloc

    monkeypatch.setattr(why, "TAIL_BYTES", 4 << 20)
    oom = _fixture(FIXTURES / "cuda-oom.log")[2]
    log = tmp_path / "big.log"
    block = "".join(f"[rank0]: iteration {i:>8} | loss 2.345 | lr 1.0e-4 | step time 1.23 s\n" for i in range(20_000))
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("error: an early line the tail does not reach\n")
        for _ in range(64):  # about 90 MB of ordinary progress lines
            fh.write(block)
        fh.write(oom + "\n")
    assert log.stat().st_size > 80 << 20
    tracemalloc.start()
    try:
        got = why.explain_files([str(log)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * why.TAIL_BYTES < log.stat().st_size // 2, peak  # the lines and their searched copies
    expected = why.classify(block[-1000:] + oom + "\n")
    assert (got["cause"], got["evidence"]) == (expected["cause"], expected["evidence"]) == ("cuda-oom", got["evidence"])
    small = tmp_path / "small.log"
    small.write_text(block[:5000] + oom + "\n")
    got = why.explain_files([str(small)])
    assert {k: got[k] for k in ("cause", "evidence", "hint")} == {k: why.classify(small.read_text())[k]
                                                                  for k in ("cause", "evidence", "hint")}
    assert why.tail_text(b"rt line\nwhole\n", True) == "whole\n" and why.tail_text(b"one line", True) == "one line"


def test_a_binary_file_as_a_log_is_described_not_printed(tmp_path):
    import random
    log = tmp_path / "random.log"
    log.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(20_000)))
    got = why.explain_files([str(log)])
    assert got["cause"] == "unknown" and got["evidence"].startswith("(not text: "), got
    got = why.classify("ok line\nerror: bad \x1b[31mred\x1b[0m \ufffd value")
    assert got["evidence"] == "error: bad ?[31mred?[0m ? value", got


# ------------------------------------------------------------------------------------------------ local Slurm
def _submit(slurm, tmp_path, name: str, script: str, *sbatch: str) -> jobs.JobRecord:
    logs = tmp_path / name
    logs.mkdir()
    job = slurm.sbatch("-J", name, "-o", str(logs / f"log-{name}_%j_0.out"), *sbatch, "--wrap", script)
    rec = jobs.JobRecord(experiment_id=f"ultra3-{name}-test", job_id=job, stage="pretrain", title="ultra3 pretrain",
                         profile="local-slurm", env_file="", run_dir=str(logs), log_dir=str(logs), job_name=name,
                         submitted=time.time())
    jobs.save(rec)
    return rec


@pytest.fixture
def slurm_env(slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return slurm


@pytest.mark.slow
def test_local_slurm_failed_jobs_are_named(slurm_env, tmp_path, capsys):
    slurm = slurm_env
    py = sys.executable
    failing = _submit(slurm, tmp_path, "exc",
                      f"{py} -c 'from pathlib import Path; from nemotron.data.inspect import kind_of; kind_of(Path(\"/nonexistent.parquet\"))'")
    refused = _submit(slurm, tmp_path, "refused", f"{py} -m nemotron.console ultra3 data inspect /nonexistent.jsonl")
    over = _submit(slurm, tmp_path, "over", "sleep 300", "--time=00:01:00")
    cancelled = _submit(slurm, tmp_path, "cancel", "sleep 300")
    done = _submit(slurm, tmp_path, "done", "echo all good")
    for rec in (failing, refused, done):
        slurm.wait(rec.job_id, timeout=120)
    time.sleep(1)
    slurm.run("scancel", cancelled.job_id)
    slurm.wait(cancelled.job_id, timeout=60)
    slurm.wait(over.job_id, timeout=240)

    got = why.explain_job(failing.job_id)
    assert got["state"] == "FAILED" and got["cause"] == "python-exception", got
    assert "ConfigError" in got["exception"] and "src/nemotron/data/inspect.py" in got["frame"], got

    got = why.explain_job(refused.job_id)
    assert got["cause"] == "stage-error" and got["evidence"].startswith("error: /nonexistent.jsonl: does not exist")
    assert got["hint"].startswith("give a packed .parquet"), got

    got = why.explain_job(over.job_id)
    assert got["state"] == "TIMEOUT" and got["cause"] == "walltime", got
    assert "DUE TO TIME LIMIT" in got["evidence"], got  # Slurm's own line in the job's log

    assert why.explain_job(cancelled.job_id)["cause"] == "cancelled"
    assert why.explain_job(done.job_id)["cause"] == "completed"

    # the command, as text and JSON
    assert main(["ultra3", "why", over.job_id]) == 0
    assert "walltime" in capsys.readouterr().out
    assert main(["ultra3", "why", failing.job_id, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job"] == failing.job_id and doc["cause"] == "python-exception"


def test_our_own_interrupted_run_log_is_interrupted_with_the_same_command_as_the_fix(tmp_path, capsys):
    """A run stopped with Ctrl-C in the shell, its output kept with `tee`: the lines our trainer and CLI print on the
    way out (the trainer's format, :func:`nemotron.launch.execute.stopped_line`) are the cause "interrupted", with
    "run the same command again" as the fix, not "unknown" with a `logs JOB` for a job that does not exist."""
    from nemotron.launch import execute

    folder = tmp_path / "runs" / "ultra3-pretrain-local-20261206-060623-1124fc"
    log = tmp_path / "run.log"
    log.write_text(
        "[local] step 1/100 loss 11.93\n"
        "[local] SIGINT received: saving a checkpoint at the end of this step, then stopping\n"
        "[local] saved checkpoint-1\n"
        f"[local] stopped by SIGINT at step 1/100; checkpoint saved in {tmp_path}/ckpt. Run the same command again to "
        "resume.\n"
        f"interrupted: {execute.stopped_line('ultra3 pretrain', str(folder), 'saved its state')}\n", encoding="utf-8")
    assert main(["ultra3", "why", "--log", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cause"] == "interrupted", doc
    assert "stopped by SIGINT at step 1/100" in doc["evidence"], doc
    assert doc["hint"].startswith("run the same command again"), doc
    # the CLI's line alone (a stage that printed nothing else on the way out), and a data prep's
    alone = f"interrupted: {execute.stopped_line('ultra3 sft', str(folder), 'saved its state')}\n"
    assert why.classify(alone)["cause"] == "interrupted"
    prep = ("ultra3 data prep sft: stopped by SIGINT; what was finished is kept, run the same command again to "
            "resume\n")
    assert why.classify(prep)["cause"] == "interrupted"
    # a cancel stays a cancel (the stop listed as also)
    got = why.classify(alone, "CANCELLED by 0", "0:15")
    assert got["cause"] == "cancelled" and "interrupted" in [a["cause"] for a in got["also"]], got


def test_why_log_of_an_empty_file_says_it_is_empty(tmp_path, capsys):
    """An empty log (or one of blank lines) was `cause unknown` with evidence `-`: now the title and evidence say the
    file is empty, and the hint where a log with something in it comes from."""
    empty, blank = tmp_path / "empty.log", tmp_path / "blank.log"
    empty.write_text("")
    blank.write_text("\n  \n\n")
    assert main(["ultra3", "why", "--log", str(empty), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cause"] == "unknown" and doc["title"] == "the log is empty", doc
    assert doc["evidence"] == f"{empty}: empty (0 bytes)" and "tee run.log" in doc["hint"], doc
    assert main(["ultra3", "why", "--log", str(blank)]) == 0
    out = capsys.readouterr().out
    assert f"{blank}: only blank lines (5 bytes)" in out and "tee run.log" in out, out
    log = tmp_path / "some.log"
    log.write_text("step 1 | loss 2.3\n")  # a log with something in it stays unknown, its last line the evidence
    assert main(["ultra3", "why", "--log", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["title"] == "none of the known causes" and doc["evidence"] == "step 1 | loss 2.3", doc
