"""Each executor's backend owns its job's whole life, chosen once from the plan or the job record.

Records written before the record kept its executor still load (the executor told by the tunnel, as before); a
record naming an executor this version does not know is one clear error; every profile kind has a backend that
answers every question about its jobs; the profile schema says what code outside the backends asks of an executor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nemotron.cli.main import main
from nemotron.config.artifacts import home
from nemotron.launch import backends, jobs
from nemotron.launch.backends.base import Backend
from nemotron.profiles import schema

_FIELDS = {"stage": "pretrain", "title": "ultra3 pretrain", "profile": "c", "env_file": "env.toml", "run_dir": "/r",
           "log_dir": "/l", "job_name": "ultra3-pretrain", "submitted": 1.0}


def _write_old(experiment_id: str, **fields) -> Path:
    """A record as a version before ``executor`` was kept wrote it (no ``executor`` key)."""
    folder = home() / "submissions"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{experiment_id}.json"
    path.write_text(json.dumps({"experiment_id": experiment_id, "job_id": experiment_id, **_FIELDS, **fields}),
                    encoding="utf-8")
    return path


@pytest.mark.parametrize(("tunnel", "executor", "backend"), [
    ("local", "slurm", "Slurm"), ("ssh", "slurm", "Slurm"), ("ray", "ray", "Ray"),
    (jobs.LOCAL_EXECUTOR, "local", "LocalJob")])
def test_an_old_record_is_read_with_the_executor_its_tunnel_named(tunnel, executor, backend):
    _write_old("exp-backends-old", tunnel=tunnel)
    rec = jobs.load("exp-backends-old")
    assert rec.executor == executor
    assert type(backends.backend_for(rec)).__name__ == backend


def test_a_record_keeps_its_executor():
    rec = jobs.JobRecord(experiment_id="exp-backends-1", job_id="raysubmit-1", tunnel="ray", executor="ray", **_FIELDS)
    path = jobs.save(rec)
    assert json.loads(path.read_text(encoding="utf-8"))["executor"] == "ray"
    assert jobs.load("exp-backends-1") == rec


def test_a_record_of_an_executor_this_version_does_not_know_is_one_clear_error(capsys):
    path = _write_old("exp-backends-new", tunnel="local", executor="skypilot")
    try:
        assert main(["ultra3", "status", "exp-backends-new"]) == 2
        err = capsys.readouterr().err
        assert main(["ultra3", "jobs", "--json"]) == 0  # the listing still lists it, its state unknown
        listed = json.loads(capsys.readouterr().out)
    finally:
        path.unlink()
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert errors == [f"error: {path}: executor 'skypilot' is not one this version of nemotron knows "
                      "(local, ray, slurm)"], err
    assert "hint: follow the job with the nemotron version that submitted it" in err
    [row] = [j for j in listed["jobs"] if j["experiment"] == "exp-backends-new"]
    assert row["state"] == "UNKNOWN" and "skypilot" in row["reason"]


_LIFE = ("render", "submit", "state", "log_files", "read_log", "cancel")


@pytest.mark.parametrize("name", sorted(backends.BACKENDS))
def test_every_backend_answers_for_its_whole_life(name):
    """A backend that submits answers every question about its jobs itself (the base class has no default for
    these); one that runs here renders and runs."""
    b = backends.BACKENDS[name]
    assert isinstance(b, Backend) and b.executor == name and b.scheduler
    own = ("render", "run") if b.runs_here else _LIFE
    missing = [m for m in own if getattr(type(b), m) is getattr(Backend, m)]
    assert not missing, f"backend {name} lacks {missing}"


def test_every_profile_kind_has_its_backend():
    submitting = {name for name, b in backends.BACKENDS.items() if not b.runs_here}
    assert submitting == set(schema._MODELS)
    assert backends.backend("direct").runs_here


def test_the_schema_says_what_an_executor_is():
    local = schema.LocalSettings(executor="local")
    ray = schema.RaySettings(executor="ray", address="ray://head:10001")
    slurm = schema.SlurmSettings(executor="slurm", host="login", tunnel="ssh")
    bare = schema.SlurmSettings(executor="slurm", container=False)
    assert [schema.on_this_machine(e) for e in (None, "direct", "local", "ray", "slurm")] == \
        [True, True, True, False, False]
    assert [schema.storage_host(p) for p in (None, local, ray, slurm)] == [None, None, "ray://head:10001", "login"]
    assert [schema.uses_container(p) for p in (None, local, ray, slurm, bare)] == [False, False, False, True, False]
    assert [schema.queues_dependent_jobs(e) for e in (None, "local", "ray", "slurm")] == [False, False, False, True]
    assert [p.where() for p in (local, ray, slurm)] == ["this machine", "ray://head:10001", "- via ssh login"]


def test_a_question_an_executor_has_no_answer_to_is_one_clear_error():
    """``direct`` runs in this process and keeps no records; the queueing executors run nothing here: asking either
    is a RuntimeFailure naming the executor (one line for the CLI), not a bare NotImplementedError."""
    from nemotron.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match="the direct executor does not keep job records to cancel"):
        backends.backend("direct").cancel(None)
    with pytest.raises(RuntimeFailure, match="the slurm executor does not run jobs in this process"):
        backends.backend("slurm").run(None)
