"""Each executor's backend owns its job's whole life, chosen once from the plan or the job record.

Records written before the record kept its executor still load (the executor told by the tunnel, as before); a
record naming an executor this version does not know is one clear error; every profile kind has a backend that
answers every question about its jobs; the profile schema says what code outside the backends asks of an executor.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from nemotron.cli.main import main
from nemotron.config.artifacts import home
from nemotron.launch import backends, jobs
from nemotron.errors import ConfigError
from nemotron.launch.backends.base import Backend, Job
from nemotron.profiles import schema
from nemotron.profiles.profile import from_table, storage_host, uses_container

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
    submitting = {name: type(b).settings for name, b in backends.BACKENDS.items() if not b.runs_here}
    assert submitting == schema._MODELS  # each backend names the profile model its profiles parse into
    # the executors a profile may name are read from the union of the models, one per executor
    assert [schema._executor_name(m) for m in typing.get_args(schema.ProfileSettings)] == list(schema.EXECUTORS)
    assert backends.backend("direct").runs_here and type(backends.backend("direct")).settings is None


def test_the_schema_says_what_an_executor_is():
    local = from_table("box", {"executor": "local"})
    ray = from_table("r", {"executor": "ray", "address": "ray://head:10001"})
    slurm = from_table("c", {"executor": "slurm", "host": "login", "user": "me", "job_dir": "/j", "tunnel": "ssh"})
    bare = from_table("b", {"executor": "slurm", "container": False})
    assert [schema.on_this_machine(e) for e in (None, "direct", "local", "ray", "slurm")] == \
        [True, True, True, False, False]
    assert [storage_host(p) for p in (None, local, ray, slurm)] == [None, None, "ray://head:10001", "login"]
    assert [uses_container(p) for p in (None, local, ray, slurm, bare)] == [False, False, False, True, False]
    assert [schema.queues_dependent_jobs(e) for e in (None, "local", "ray", "slurm")] == [False, False, False, True]
    assert [p.settings.where() for p in (local, ray, slurm)] == ["this machine", "ray://head:10001", "- via ssh login"]
    assert [p.settings.over_ssh for p in (local, ray, slurm, bare)] == [False, False, True, False]
    assert [p.settings.image_for("nemo", "nvcr.io/x") for p in (local, ray, slurm, bare)] == \
        [None, None, "nvcr.io/x", None]


def test_a_profile_is_its_executors_typed_model_not_a_bag_of_keys():
    """A key of another executor is an AttributeError on the typed model (it used to read as None through
    ``Profile.__getattr__``); a backend takes its own executor's profile and refuses another's by name."""
    local = from_table("box", {"executor": "local"})
    assert isinstance(local.settings, schema.LocalSettings) and not hasattr(type(local), "__getattr__")
    with pytest.raises(AttributeError):
        local.partition  # noqa: B018 - the access is the test
    with pytest.raises(AttributeError):
        local.settings.partition  # noqa: B018
    assert local.narrow(schema.LocalSettings) is local
    with pytest.raises(ConfigError, match="profile 'box' is a local profile, not a slurm one"):
        local.narrow(schema.SlurmSettings)
    job = Job(req=None, compiled=None, profile=local, plan=None)
    with pytest.raises(ConfigError, match="not a slurm one"):
        backends.backend("slurm").render(job)


def test_a_new_backend_file_is_found_without_editing_the_package(tmp_path):
    """A new executor is one file: a ``Backend`` subclass in a module of the backends package registers itself
    and :func:`nemotron.launch.backends.discover` finds it, with nothing listed in ``__init__.py``. The file is
    written into a folder added to the package's ``__path__`` (how Python extends a package's search path), as a
    file dropped into ``launch/backends/`` would be found."""
    import sys

    from nemotron.launch.backends import base

    (tmp_path / "skytest.py").write_text(
        "from nemotron.launch.backends.base import Backend\n\n\n"
        "class SkyTest(Backend):\n"
        "    executor, runs_here, scheduler = 'skytest', False, 'SkyTest'\n\n"
        "    def render(self, job):\n"
        "        return 'sky launch'\n", encoding="utf-8")
    before = set(backends.BACKENDS)
    assert "skytest" not in before
    backends.__path__.append(str(tmp_path))
    try:
        found = backends.discover()
        assert type(found["skytest"]).__module__ == "nemotron.launch.backends.skytest"
        assert "skytest" in backends.BACKENDS  # the package's mapping takes in the newly registered backend
        assert backends.backend("skytest").render(None) == "sky launch"
        assert set(found) == before | {"skytest"}
        # a second file claiming the same executor is refused by name, not silently shadowed
        (tmp_path / "skytwin.py").write_text(
            "from nemotron.launch.backends.base import Backend\n\n\n"
            "class SkyTwin(Backend):\n    executor = 'skytest'\n", encoding="utf-8")
        with pytest.raises(TypeError, match="executor 'skytest' is already the backend "
                                            "nemotron.launch.backends.skytest.SkyTest"):
            backends.discover()
    finally:
        backends.__path__.remove(str(tmp_path))
        base.REGISTERED.pop("skytest", None)
        for name in ("skytest", "skytwin"):
            sys.modules.pop(f"nemotron.launch.backends.{name}", None)
    assert set(backends.BACKENDS) == before


def test_a_question_an_executor_has_no_answer_to_is_one_clear_error():
    """``direct`` runs in this process and keeps no records; the queueing executors run nothing here: asking either
    is a RuntimeFailure naming the executor (one line for the CLI), not a bare NotImplementedError."""
    from nemotron.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match="the direct executor does not keep job records to cancel"):
        backends.backend("direct").cancel(None)
    with pytest.raises(RuntimeFailure, match="the slurm executor does not run jobs in this process"):
        backends.backend("slurm").run(None)
