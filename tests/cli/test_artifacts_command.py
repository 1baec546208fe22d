"""``nemotron ultra3 artifacts``: the store's versions, their inputs and consumers, and ``--lineage`` upstream.

The store is filled by the real store API, never by hand-written records: :func:`nemotron.config.artifacts.record`
(what a run here records when it ends: ``nemotron.launch.execute``), :func:`nemotron.data.outputs.record_consumer`
(what a training run writes into the data version it reads) and :func:`nemotron.runtime.megatron.lineage.write` (the
``lineage.json`` a local training run writes into its checkpoint folder). The data and checkpoint folders are plain
folders with a ``manifest.json`` / a file in them (the command reads records, not weights). The last test runs the
README's local chain for real (``pipe data-prep-pretrain pretrain -c local``, a 2-step pretrain) and reads its store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemotron.cli.main import main
from nemotron.config import artifacts
from nemotron.data import outputs
from nemotron.runtime.megatron import lineage

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "schema" / "artifacts.schema.json"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NEMOTRON_ENV_FILE", raising=False)
    for var in ("NEMOTRON_DATA_DIR", "NEMOTRON_CKPT_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    artifacts.set_root(None)
    yield
    artifacts.set_root(None)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["ultra3", "artifacts", *args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def run_json(capsys, *args: str) -> dict:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
    assert not errors, errors[:5]
    assert doc["schema"] == "nemotron/artifacts/v1"
    return doc


def here_fields(path: Path, stage: str, config: str, run_id: str) -> dict:
    """What a run on this machine adds to its record (``launch.execute.run_here``, ``launch.plan.recorded_outputs``)."""
    return {"path": str(path), "stage": stage, "config": config, "experiment_id": run_id, "job_id": "local",
            **artifacts.scope_fields(None, None, os.environ, str(path))}


def data_version(folder: Path, tag: str) -> Path:
    """A finished data version folder: a ``manifest.json`` saying complete (what a data prep run writes last)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({"complete": True, "tag": tag}))
    return folder


def checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


@pytest.fixture
def chain(tmp_path) -> dict:
    """A store as this working folder's runs leave it:

    * ``pretrain-data`` v1 (./output/.../tiny) and v2 (./output/.../tiny/v2: a forced rebuild of the consumed v1);
    * ``pretrain-checkpoint`` v1, made by run ``pt-1`` from data v1 (its ``consumed_by`` record);
    * run ``pt-2`` consumed data v2 and recorded nothing (stopped by SIGTERM, as in the README's local run);
    * ``sft-data`` v1, and ``sft-checkpoint`` v1 made by run ``sft-1`` from it (``consumed_by``) and from
      ``pretrain-checkpoint`` v1 (its ``lineage.json``: ``pretrained_checkpoint``).
    """
    now = time.time()
    out = tmp_path / "output" / "ultra3"
    d1 = data_version(out / "pretrain-data" / "tiny", "v1")
    data1 = artifacts.record("pretrain-data", {**here_fields(d1, "data-prep-pretrain", "tiny", "dp-1"),
                                               "blend_path": str(d1 / "blend.json")}, at=now - 500)
    pt = checkpoint(tmp_path / "checkpoints" / "ultra3-pretrain-local")
    outputs.record_consumer(d1, stage="pretrain", run_id="pt-1", artifact="pretrain-data", checkpoint=str(pt))
    lineage.write(pt, {"stage": "pretrain", "data": str(d1 / "blend.json"), "pretrained_checkpoint": None,
                       "inputs": {"data.per_split_data_args_path": str(d1 / "blend.json")}, "experiment_id": "pt-1"})
    ckpt1 = artifacts.record("pretrain-checkpoint", here_fields(pt, "pretrain", "local", "pt-1"), at=now - 400)
    d2 = data_version(d1 / "v2", "v2")
    data2 = artifacts.record("pretrain-data", {**here_fields(d2, "data-prep-pretrain", "tiny", "dp-2"),
                                               "blend_path": str(d2 / "blend.json")}, at=now - 300)
    stopped = tmp_path / "checkpoints" / "ultra3-pretrain-local-2"
    outputs.record_consumer(d2, stage="pretrain", run_id="pt-2", artifact="pretrain-data", checkpoint=str(stopped))
    s1 = data_version(out / "sft-data" / "tiny", "sft")
    sft_data = artifacts.record("sft-data", here_fields(s1, "data-prep-sft", "tiny", "dps-1"), at=now - 250)
    sft = checkpoint(tmp_path / "checkpoints" / "ultra3-sft-local")
    outputs.record_consumer(s1, stage="sft", run_id="sft-1", artifact="sft-data", checkpoint=str(sft))
    lineage.write(sft, {"stage": "sft", "data": str(s1), "pretrained_checkpoint": str(pt),
                        "inputs": {"dataset.dataset_root": str(s1), "checkpoint.pretrained_checkpoint": str(pt)},
                        "experiment_id": "sft-1", "torch": "2.x"})
    sft_ckpt = artifacts.record("sft-checkpoint", here_fields(sft, "sft", "local", "sft-1"), at=now - 100)
    assert [data1["version"], data2["version"], ckpt1["version"], sft_data["version"], sft_ckpt["version"]] == \
        [1, 2, 1, 1, 1]
    return {"d1": d1, "d2": d2, "pt": pt, "stopped": stopped, "sft": sft, "s1": s1}


# ---------------------------------------------------------------------------------------------- the empty store
def test_an_empty_store_says_nothing_is_recorded_and_how_to_record(capsys, tmp_path):
    code, out, err = run(capsys)
    assert code == 0, err
    assert out.count("\n") == 1, out
    assert f"nothing has been recorded in the artifact store {tmp_path / 'home' / 'artifacts'} yet" in out
    assert "bash scripts/main.sh" in out and "nemotron ultra3 data prep pretrain -c tiny" in out
    assert run_json(capsys)["artifacts"] == []


# ---------------------------------------------------------------------------------------------- the table
def test_the_table_has_one_row_per_kind_and_config_with_the_latest(capsys, chain, monkeypatch):
    code, out, err = run(capsys)  # 120 columns (no terminal): ids and paths are never folded nor cut
    assert code == 0, err
    words = out.split()
    assert "pt-1" in words and "./checkpoints/ultra3-pretrain-local" in words, out
    assert "./output/ultra3/pretrain-data/tiny/v2" in words, out
    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = run(capsys)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()
            and line.split()[0] in ("pretrain-data", "pretrain-checkpoint", "sft-data", "sft-checkpoint")}
    assert set(rows) == {"pretrain-data", "pretrain-checkpoint", "sft-data", "sft-checkpoint"}, out
    assert rows["pretrain-data"][1:5] == ["tiny", "v2", "2", "(v1-2)"], out
    assert rows["pretrain-checkpoint"][1:5] == ["local", "v1", "1", "(v1)"], out
    assert "pt-1" in rows["pretrain-checkpoint"], out
    assert "./checkpoints/ultra3-pretrain-local" in rows["pretrain-checkpoint"], out
    assert "./output/ultra3/pretrain-data/tiny/v2" in rows["pretrain-data"], out
    assert "*" not in out.split("each version")[0], out  # this working folder's own outputs: none left out

    doc = run_json(capsys)
    by = {(a["kind"], a["config"]): a for a in doc["artifacts"]}
    assert by[("pretrain-data", "tiny")]["latest"] == 2 and by[("pretrain-data", "tiny")]["versions"] == [1, 2]
    assert by[("pretrain-checkpoint", "local")] | {"created": None} == {
        "kind": "pretrain-checkpoint", "config": "local", "latest": 1, "versions": [1], "created": None,
        "latest_at": None, "stage": "pretrain", "job_id": "local", "run_id": "pt-1",
        "site": artifacts.site(None), "path": str(chain["pt"]), "exists": True, "left_out": None}


def test_another_working_folders_artifacts_are_marked_as_the_dry_run_leaves_them_out(capsys, chain, tmp_path,
                                                                                     monkeypatch):
    other = tmp_path / "other-checkout"
    other.mkdir()
    monkeypatch.chdir(other)
    code, out, err = run(capsys)
    assert code == 0, err
    assert "v2*" in out and "v1*" in out, out
    note = f"* pretrain-data v2: {chain['d2']} is another working folder's output, outside this run's output folders"
    assert note in out, out
    doc = run_json(capsys)
    assert all(a["left_out"] and "another working folder's output" in a["left_out"] for a in doc["artifacts"])


# ---------------------------------------------------------------------------------------------- one kind
def test_every_version_of_a_kind_with_its_consumers_and_the_run_that_recorded_nothing(capsys, chain):
    code, out, err = run(capsys, "pretrain-data")
    assert code == 0, err
    v2, v1 = out.split("\nv2 ")[1].split("\nv1 ")
    assert v2.startswith(f"(latest of -c tiny)  {chain['d2']}  exists here"), out
    assert "consumers: run pt-2 (pretrain, checkpoint " + str(chain["stopped"]) in v2
    assert "no artifact recorded from it)" in v2
    assert v1.startswith(f" {chain['d1']}  exists here") or v1.startswith(f"{chain['d1']}  exists here"), out
    assert "consumers: pretrain-checkpoint v1 (pretrain -c local)" in v1
    assert "inputs: made by data prep from its raw sources (no artifact input)" in v1

    code, out, err = run(capsys, "pretrain-data:1")  # one version alone
    assert code == 0 and out.startswith("pretrain-data: 1 version(s)") and "\nv1 " in out and "\nv2 " not in out, out
    doc = run_json(capsys, "pretrain-data")
    by = {v["version"]: v for v in doc["versions"]}
    assert by[1]["consumers"] == [{"kind": "pretrain-checkpoint", "version": 1, "via": "consumed_by, lineage.json"}]
    assert by[1]["runs"] == [] and by[1]["latest"] is False
    assert [r["run_id"] for r in by[2]["runs"]] == ["pt-2"] and by[2]["consumers"] == [] and by[2]["latest"] is True


def test_inputs_come_from_consumed_by_and_lineage_json(capsys, chain):
    code, out, err = run(capsys, "sft-checkpoint")
    assert code == 0, err
    assert "inputs: sft-data v1 (consumed_by, lineage.json); pretrain-checkpoint v1 (lineage.json)" in out, out
    code, out, err = run(capsys, "pretrain-checkpoint")
    assert "inputs: pretrain-data v1 (consumed_by, lineage.json)" in out, out
    assert f"checkpoint folder {chain['stopped']} trained on pretrain-data v2" in out, out  # run pt-2, stopped
    assert "consumers: sft-checkpoint v1 (sft -c local)" in out, out


def test_a_stopped_run_shows_which_data_its_checkpoint_folder_trained_on(capsys, tmp_path):
    """Finding P's shape: data prep recorded pretrain-data, then ``pretrain -c local`` was stopped (exit 75): it
    wrote its consumed_by record and a checkpoint folder, and recorded no pretrain-checkpoint."""
    d = data_version(tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny", "v1")
    artifacts.record("pretrain-data", here_fields(d, "data-prep-pretrain", "tiny", "dp-1"))
    ckpt = tmp_path / "checkpoints" / "ultra3-pretrain-local"
    outputs.record_consumer(d, stage="pretrain", run_id="ultra3-pretrain-local-1", artifact="pretrain-data",
                            checkpoint=str(ckpt))
    code, out, err = run(capsys, "pretrain-checkpoint")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("no version of pretrain-checkpoint has been recorded in ") and \
        lines[0].endswith("yet; it is made by: nemotron ultra3 pretrain"), out
    assert lines[1] == ("runs that made no pretrain-checkpoint record (stopped, failed or still running), and the "
                        "data each read:"), out
    assert lines[2].startswith("    run ultra3-pretrain-local-1 (pretrain, ") and lines[2].endswith(
        f"checkpoint folder {ckpt} trained on pretrain-data v1 ({d})"), out
    doc = run_json(capsys, "pretrain-checkpoint")
    assert doc["versions"] == [] and [(r["run_id"], r["read"]) for r in doc["unrecorded_runs"]] == [
        ("ultra3-pretrain-local-1", {"kind": "pretrain-data", "version": 1})]
    code, out, err = run(capsys, "pretrain-data")
    assert "consumers: run ultra3-pretrain-local-1 (pretrain, checkpoint " in out, out


def test_a_config_picks_the_versions_its_runs_take(capsys, chain):
    code, out, err = run(capsys, "pretrain-data", "-c", "local")  # -c local takes the data prep's tiny sample
    assert code == 0 and "pretrain-data: 2 version(s) taken by -c local" in out, out + err
    code, out, err = run(capsys, "pretrain-data", "-c", "default")
    assert code == 0 and out.strip() == "no version of pretrain-data is taken by -c default: recorded for tiny", out
    code, _, err = run(capsys, "pretrain-data", "-c", "lcoal")
    assert code == 2 and err.startswith("error: -c lcoal: no stage has a config of that name"), err
    assert "did you mean 'local'?" in err


# ---------------------------------------------------------------------------------------------- --lineage
def test_lineage_walks_upstream_down_to_the_data(capsys, chain):
    code, out, err = run(capsys, "sft-checkpoint", "--lineage")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"sft-checkpoint v1  {chain['sft']}  ("), out
    assert lines[1].startswith(f"├─ sft-data v1  {chain['s1']}") and lines[1].endswith("[consumed_by, lineage.json]")
    assert lines[2] == "│  inputs: made by data prep from its raw sources (no artifact input)", out
    assert lines[3].startswith(f"└─ pretrain-checkpoint v1  {chain['pt']}") and lines[3].endswith("[lineage.json]")
    assert lines[4].startswith(f"   └─ pretrain-data v1  {chain['d1']}"), out  # v1, not the latest v2
    assert lines[5] == "      inputs: made by data prep from its raw sources (no artifact input)", out

    doc = run_json(capsys, "sft-checkpoint:v1", "--lineage")
    node = doc["lineage"]
    assert (node["kind"], node["version"], node["via"]) == ("sft-checkpoint", 1, None)
    assert [(i["kind"], i["version"], i["via"]) for i in node["inputs"]] == [
        ("sft-data", 1, "consumed_by, lineage.json"), ("pretrain-checkpoint", 1, "lineage.json")]
    assert [(i["kind"], i["version"]) for i in node["inputs"][1]["inputs"]] == [("pretrain-data", 1)]


def test_a_version_rebuilt_in_place_is_told_apart_by_time(capsys, tmp_path):
    """Data prep ``force=true`` on an unconsumed version rewrites its folder: two records, one path. The run that
    consumed the folder afterwards read the second."""
    now = time.time()
    d = data_version(tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny", "first")
    artifacts.record("pretrain-data", here_fields(d, "data-prep-pretrain", "tiny", "dp-1"), at=now - 200)
    data_version(d, "second")  # a new manifest: a new version at the same path
    artifacts.record("pretrain-data", here_fields(d, "data-prep-pretrain", "tiny", "dp-2"), at=now - 100)
    pt = checkpoint(tmp_path / "checkpoints" / "ultra3-pretrain-local")
    outputs.record_consumer(d, stage="pretrain", run_id="pt-1", artifact="pretrain-data", checkpoint=str(pt))
    artifacts.record("pretrain-checkpoint", here_fields(pt, "pretrain", "local", "pt-1"))
    doc = run_json(capsys, "pretrain-checkpoint", "--lineage")
    assert [(i["kind"], i["version"]) for i in doc["lineage"]["inputs"]] == [("pretrain-data", 2)]


def test_a_consumer_without_the_records_run_id_is_matched_by_its_checkpoint_folder(capsys, tmp_path):
    """A trainer started without the CLI names its run ``local-<checkpoint folder>`` (no experiment id): the record
    of its checkpoint folder made after it started is its product, not one an earlier run of that folder made."""
    now = time.time()
    d = data_version(tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny", "v1")
    artifacts.record("pretrain-data", here_fields(d, "data-prep-pretrain", "tiny", "dp-1"), at=now - 2000)
    pt = checkpoint(tmp_path / "checkpoints" / "ultra3-pretrain-local")
    artifacts.record("pretrain-checkpoint", {**here_fields(pt, "pretrain", "local", "earlier"), "config_hash": "aaaa"},
                     at=now - 1000)
    outputs.record_consumer(d, stage="pretrain", run_id="local-ultra3-pretrain-local", artifact="pretrain-data",
                            checkpoint=str(pt))
    artifacts.record("pretrain-checkpoint", {**here_fields(pt, "pretrain", "local", "later"), "config_hash": "bbbb"},
                     at=now + 5)
    doc = run_json(capsys, "pretrain-data")
    assert doc["versions"][0]["consumers"] == [{"kind": "pretrain-checkpoint", "version": 2, "via": "consumed_by"}]


def test_a_checkpoint_whose_folder_is_elsewhere_says_its_inputs_are_not_recorded_here(capsys, tmp_path):
    """A cluster job's record: its folder is on the cluster, so neither consumed_by nor lineage.json can be read."""
    artifacts.record("pretrain-checkpoint", {"path": "/lustre/ckpt/ultra3-pretrain-tiny", "stage": "pretrain",
                                             "config": "tiny", "experiment_id": "pt-tiny", "job_id": "4242",
                                             **artifacts.scope_fields("slurm", "login1", {}, "/lustre/x")})
    code, out, err = run(capsys, "pretrain-checkpoint")
    assert code == 0, err
    assert "not on this machine" in out and "job 4242" not in out.split("made:")[0]
    assert "made: " in out and ", job 4242, run pt-tiny, on slurm:login1" in out, out
    assert "inputs: none recorded here (its folder is not on this machine: no lineage.json to read)" in out, out
    code, out, err = run(capsys)
    assert "job 4242 (pt-tiny)" in out and "v1*" in out and "made on slurm:login1" in out, out


# ---------------------------------------------------------------------------------------------- bad input
def test_unknown_kind_version_and_usage_are_one_line_and_exit_2(capsys, chain):
    code, out, err = run(capsys, "pretrain-dat")
    assert code == 2 and out == ""
    first = err.splitlines()[0]
    assert first.startswith("error: no artifact kind 'pretrain-dat': recorded: pretrain-checkpoint, pretrain-data, "
                            "sft-checkpoint, sft-data; made by a stage: "), err
    assert "hint: did you mean 'pretrain-data'?" in err and "local" not in first.split("made by a stage:")[1].split(
        ", ")  # config names are not kinds
    code, _, err = run(capsys, "pretrain-data:v3")
    assert code == 2 and err.splitlines()[0] == "error: pretrain-data has no v3: recorded: v1, v2", err
    code, _, err = run(capsys, "pretrain-data:x")
    assert code == 2 and "version must be a positive integer" in err
    code, _, err = run(capsys, "--lineage")
    assert code == 2 and err.startswith("error: --lineage needs an artifact: KIND or KIND:vN"), err
    code, _, err = run(capsys, "pretrain-data:1", "-c", "tiny")
    assert code == 2 and "names one version" in err


def test_a_kind_a_stage_makes_but_nobody_recorded_is_not_an_error(capsys, chain):
    code, out, err = run(capsys, "rl-checkpoint")
    assert code == 0, err
    assert out.strip().startswith("no version of rl-checkpoint has been recorded in ")
    assert "it is made by: nemotron ultra3 rlvr" in out
    assert run_json(capsys, "rl-checkpoint")["versions"] == []


def test_a_broken_record_names_its_file(capsys, chain, tmp_path):
    bad = tmp_path / "home" / "artifacts" / "pretrain-data" / "v3.json"
    bad.write_text("{not json")
    code, _, err = run(capsys)
    assert code == 2 and err.startswith(f"error: {bad}:1: artifact record is not valid JSON"), err


def test_the_env_files_artifacts_root_is_the_store(capsys, tmp_path):
    root = tmp_path / "team-store"
    env = tmp_path / "env.toml"
    env.write_text(f'[artifacts]\nroot = "{root}"\n')
    artifacts.set_root(root)
    d = data_version(tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny", "v1")
    artifacts.record("pretrain-data", here_fields(d, "data-prep-pretrain", "tiny", "dp-1"))
    artifacts.set_root(None)
    code, out, err = run(capsys, "--env-file", str(env))
    assert code == 0 and f"store {root}" in out and "pretrain-data" in out, out + err
    code, out, _ = run(capsys, "--env-file", str(tmp_path / "absent.toml"))
    assert code == 2


# ---------------------------------------------------------------------------------------------- the README's chain
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_readmes_local_chain_is_listed_with_its_lineage(tmp_path):
    """``pipe data-prep-pretrain pretrain -c local`` (the README's local run; a 2-step pretrain of the small model,
    about 2 minutes on 2 cores), then ``artifacts``, ``artifacts pretrain-data`` and ``--lineage`` in a subprocess,
    on the store that run wrote."""
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT / "src"),
           "NEMOTRON_WRAP": "0", "COLUMNS": "250"}
    for var in ("NEMOTRON_ENV_FILE", "NEMOTRON_DATA_DIR", "NEMOTRON_CKPT_ROOT"):
        env.pop(var, None)
    cli = [sys.executable, "-m", "nemotron", "ultra3"]
    small = ["pretrain:train.train_iters=2", "pretrain:scheduler.lr_decay_iters=2",
             "pretrain:scheduler.lr_warmup_iters=1", "pretrain:validation.eval_interval=2",
             "pretrain:checkpoint.save_interval=2", "pretrain:model.seq_length=64"]
    proc = subprocess.run([*cli, "pipe", "data-prep-pretrain", "pretrain", "-c", "local", *small], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "recorded this run as a consumer of" in proc.stdout + proc.stderr

    def cmd(*args: str) -> str:
        p = subprocess.run([*cli, "artifacts", *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    table = cmd()
    assert "./output/ultra3/pretrain-data/tiny" in table and "./checkpoints/ultra3-pretrain-local" in table, table
    doc = json.loads(cmd("pretrain-data", "--json"))
    (v1,) = doc["versions"]
    # a pipe of -c local: data prep has no local config and runs its tiny one, which its record names
    assert v1["exists"] and v1["stage"] == "data-prep-pretrain" and v1["config"] == "tiny"
    assert v1["consumers"] == [{"kind": "pretrain-checkpoint", "version": 1, "via": "consumed_by, lineage.json"}]
    node = json.loads(cmd("pretrain-checkpoint", "--lineage", "--json"))["lineage"]
    assert (node["stage"], node["config"], node["job_id"]) == ("pretrain", "local", "local")
    assert node["run_id"].startswith("ultra3-pretrain-local-")
    assert [(i["kind"], i["version"], i["path"]) for i in node["inputs"]] == [
        ("pretrain-data", 1, str(tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny"))]
    # the consumer record the run wrote is the one the command read
    (rec,) = outputs.consumers(tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny")
    assert rec["run_id"] == node["run_id"] and rec["checkpoint"] == node["path"]
