"""The dry run's verdict first (and ``--quiet``), long problem lines broken readably, ``estimate`` only where a stage
has it, and ``nemotron ultra3 jobs`` (issue 32, the CLI)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from nemotron.cli.main import main
from nemotron.errors import Problem

ENV_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "env.toml"
DOCS = Path(__file__).resolve().parents[2] / "docs"

pytest.importorskip("nemo_run", reason="the Slurm dry run is rendered by NeMo-Run")


def _dry(capsys, *extra):
    code = main(["ultra3", "pretrain", "-c", "tiny", "--dry-run", "--batch", "sample", "--env-file", str(ENV_FILE),
                 *extra])
    cap = capsys.readouterr()
    return code, cap.out.splitlines(), cap.err


def _block(lines):
    """The first message of ``lines``: its first line and the indented continuation lines of a long one."""
    n = 1
    while n < len(lines) and lines[n].startswith("    "):
        n += 1
    return lines[:n]


def test_dry_run_leads_with_the_verdict_and_quiet_prints_it_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    code, lines, err = _dry(capsys)
    assert code == 2  # the run's refusal is the dry run's too
    assert err.splitlines()[-2].startswith("error: the run would refuse to start ultra3 pretrain with 1 unresolved")
    first = _block(lines)  # pretrain -c tiny: valid, but its data is not made yet, which the run refuses
    assert first[0].startswith("dry run: the config is valid (") and "the run would refuse to start" in first[0]
    assert first[-1].endswith("nothing was submitted"), first
    assert lines[-len(first):] == first and len(lines) > 50  # the details between, the verdict again last
    code, quiet, err = _dry(capsys, "--quiet")
    assert code == 2 and quiet == first, quiet
    # errors: the count first, the run's refusal said; --quiet keeps the errors, drops the details; exit 2 both ways
    bad = "model.tensor_model_parallel_size=3"
    code, lines, err = _dry(capsys, bad)
    assert code == 2 and "dry run: valid" not in "\n".join(lines)
    # the count says errors and warnings apart ("2 errors, 3 warnings"), not "2 problems found (3 warnings)"
    m = re.match(r"dry run: (\d+) errors?, (\d+) warnings?: the run would refuse to start", lines[0])
    assert m and "problem" not in lines[0], lines[0]
    n = int(m.group(1))
    assert f"error: {n} error{'s' if n > 1 else ''} found before anything was queued" in err
    code, quiet, _ = _dry(capsys, bad, "-q")
    assert code == 2 and quiet[0] == lines[0] and "#SBATCH --account=ultra-acct" in "\n".join(lines)
    errors = [x for x in quiet if x.startswith("error: ")]
    assert len(errors) == n and "model.tensor_model_parallel_size=3" in quiet[1], quiet
    assert not any(x.startswith(("warning: ", "#SBATCH", "layers ")) for x in quiet), quiet


def test_quiet_without_dry_run_is_refused(capsys):
    assert main(["ultra3", "pretrain", "-c", "tiny", "--quiet"]) == 2
    assert "--quiet is for --dry-run" in capsys.readouterr().err


def test_a_very_long_problem_line_is_broken_at_its_clauses_nothing_lost(monkeypatch):
    """At a terminal (NEMOTRON_WRAP=1 stands in for one) a long line is broken at its clauses; for a pipe or a log
    (NEMOTRON_WRAP=0, or no terminal) it stays one line, searchable whole."""
    from nemotron.report import problem_line

    monkeypatch.setenv("NEMOTRON_WRAP", "1")

    message = "; ".join(f"clause {i}: the path /data/some/long/folder/name-{i}/shard_{i:05d}.parquet is not there"
                        for i in range(9))
    p = Problem(key="data.blend.paths", value=["/a/b"] * 3, message=message, valid="a list of existing paths")
    flat = f"error: {p.render()}"
    assert len(flat) > 700
    lines = problem_line(p).splitlines()
    assert all(len(x) <= 120 for x in lines), [len(x) for x in lines]
    assert lines[0].startswith("error: data.blend.paths=['/a/b', '/a/b', '/a/b']: clause 0")
    assert lines[-1] == "    valid: a list of existing paths"
    assert " ".join(x.strip() for x in lines) == flat  # nothing dropped
    short = Problem(key="k", value=1, message="too small")
    assert problem_line(short) == "error: k=1: too small"  # a short line stays one searchable line
    monkeypatch.setenv("NEMOTRON_WRAP", "0")
    assert problem_line(p) == flat  # not at a terminal: one line


def test_estimate_is_offered_only_by_the_stages_that_have_it(capsys):
    assert main(["ultra3", "quantize", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "estimate" not in help_text, help_text
    assert main(["ultra3", "pretrain", "--help"]) == 0
    assert "Usage: nemotron ultra3 pretrain [OPTIONS] [estimate|KEY=VALUE]..." in capsys.readouterr().out
    assert main(["ultra3", "quantize", "-c", "tiny", "estimate"]) == 2
    err = capsys.readouterr().err
    assert "error: ultra3 quantize has no estimate" in err and "pretrain" in err and "sft" in err, err


def test_jobs_lists_the_submitted_jobs_newest_first(tmp_path, monkeypatch, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    from nemotron.launch import jobs

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    assert main(["ultra3", "jobs"]) == 0
    assert "no ultra3 job has been submitted" in capsys.readouterr().out
    now = time.time()
    for i, stage in enumerate(("pretrain", "sft")):
        jobs.save(jobs.JobRecord(experiment_id=f"ultra3-{stage}-tiny-x{i}", job_id=str(100 + i), stage=stage,
                                 title=f"ultra3 {stage}", profile="local-gpu", env_file=str(ENV_FILE),
                                 run_dir=str(tmp_path / f"run{i}"), log_dir=str(tmp_path / f"run{i}"),
                                 job_name=stage, tunnel=jobs.LOCAL_EXECUTOR, submitted=now - 100 + i, config="tiny"))
    assert main(["ultra3", "jobs"]) == 0
    cap = capsys.readouterr()
    rows = [x for x in cap.out.splitlines() if x.startswith(("100 ", "101 "))]
    assert [r.split()[:4] for r in rows] == [["101", "sft", "tiny", "local-gpu"], ["100", "pretrain", "tiny", "local-gpu"]]
    assert "UNKNOWN" in rows[0] and "run folder" in cap.out  # its folder is gone: said, still listed
    assert "warning: job 101" in cap.err
    assert main(["ultra3", "jobs", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    schema = json.loads((DOCS / "schema" / "jobs.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert [j["job"] for j in doc["jobs"]] == ["101", "100"] and doc["jobs"][0]["reason"]
    assert doc["jobs"][0]["run_folder"] == str(tmp_path / "run1") and doc["jobs"][0]["config"] == "tiny"


@pytest.mark.parametrize("columns", [120, 80, 60, 200])
def test_jobs_never_wraps_a_job_id_whatever_the_width(tmp_path, monkeypatch, capsys, columns):
    """A local job's id (NeMo-Run's ``<name>-<random>``, 33 characters) and a long run folder at 120 columns: the id
    stays whole on one line (it is copied into status/logs/cancel); the run folder is cut at its start instead, and a
    width too narrow for a table lists each job as ``name: value`` lines."""
    from nemotron.launch import jobs

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", str(columns))
    job = "data-prep-sft-tiny-w6ck0bzt1fvh1c"
    run_dir = str(tmp_path / "nemotron-jobs" / "experiments" / "ultra3-data-prep-sft-tiny"
                  / "ultra3-data-prep-sft-tiny_1764972000" / job)
    jobs.save(jobs.JobRecord(experiment_id=f"ultra3-data-prep-sft-tiny-{job}", job_id=job, stage="data-prep-sft",
                             title="ultra3 data prep sft", profile="local", env_file=str(ENV_FILE), run_dir=run_dir,
                             log_dir=run_dir, job_name="data-prep-sft-tiny", tunnel=jobs.LOCAL_EXECUTOR,
                             submitted=time.time(), config="tiny"))
    assert main(["ultra3", "jobs"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(job in ln for ln in lines), out
    assert all(len(ln.rstrip()) <= columns for ln in lines if run_dir not in ln), out
    assert "data-prep-sft" in out and "UNKNOWN" in out and "tiny" in out and "local" in out, out  # no column dropped
    if columns >= 120:
        row = next(ln for ln in lines if ln.startswith(job))
        assert row.rstrip().endswith(job[-8:]) and ("..." in row or run_dir in row), row  # the folder's end shown


@pytest.mark.parametrize("ended", ["COMPLETED", "FAILED", "CANCELLED"])
def test_cancel_of_a_job_that_already_ended_says_so_and_exits_0(tmp_path, monkeypatch, capsys, ended):
    """A real local-executor job record whose supervisor wrote its final state (``local-job.json``, as
    :mod:`nemotron.launch.local_job` writes it): `cancel` says it had ended and exits 0; the record is left as it
    is. A job still running is cancelled through its backend (tests/launch/test_local_executor.py)."""
    from nemotron.launch import jobs, local_job

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    run.mkdir()
    (run / local_job.STATE_FILE).write_text(json.dumps({"state": ended, "exit_code": 0 if ended == "COMPLETED" else 1}))
    jobs.save(jobs.JobRecord(experiment_id="ultra3-pretrain-local-x1", job_id="local-7", stage="pretrain",
                             title="ultra3 pretrain", profile="box", env_file="", run_dir=str(run), log_dir=str(run),
                             job_name="pretrain", tunnel=jobs.LOCAL_EXECUTOR, submitted=time.time(), executor="local"))
    assert main(["ultra3", "cancel", "local-7"]) == 0
    err = capsys.readouterr().err
    assert err.strip() == f"job local-7 (ultra3-pretrain-local-x1) had already ended ({ended}); nothing to cancel", err
    assert json.loads((run / local_job.STATE_FILE).read_text())["state"] == ended
    assert main(["ultra3", "cancel", "no-such-job"]) == 2  # an unknown id is still an error
