"""``--json``: every command that takes it prints exactly one JSON document on stdout, valid against its schema in
``docs/schema/`` (JSON Schema 2020-12, checked with the ``jsonschema`` library), on real inputs: the shipped configs,
the sample env.toml, real tiny data prep outputs (../shared/data), the why fixtures and a job of the local Slurm.
"""

from __future__ import annotations

import json
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from nemotron.cli.jsonout import SCHEMAS
from nemotron.cli.main import main

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra: pip install -e '.[test]'")

HERE = Path(__file__).resolve().parents[1]
SCHEMA_DIR = HERE.parent / "docs" / "schema"
ENV_FILE = HERE / "fixtures" / "env.toml"


def _validator(name: str):
    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def run_json(capsys, name: str, argv: list[str], code: int = 0) -> dict:
    """Run the command; stdout must be one JSON document valid against ``name``'s schema."""
    got = main(argv)
    cap = capsys.readouterr()
    assert got == code, (argv, cap.err[-2000:])
    doc = json.loads(cap.out)  # the whole of stdout: nothing else is printed there
    errors = sorted(_validator(name).iter_errors(doc), key=str)
    assert not errors, (argv, [f"{list(e.path)}: {e.message}" for e in errors[:5]])
    assert doc["schema"] == f"nemotron/{name}/v1"
    return doc


def test_every_schema_file_is_a_valid_schema_and_named():
    assert sorted(p.name.removesuffix(".schema.json") for p in SCHEMA_DIR.glob("*.schema.json")) == sorted(SCHEMAS)
    for name in SCHEMAS:
        _validator(name)


def test_a_schema_rejects_what_it_should(capsys):
    """The schemas are not vacuous: a document with a wrong field type or an unknown field fails."""
    doc = run_json(capsys, "list", ["ultra3", "list", "--json"])
    bad = json.loads(json.dumps(doc))
    bad["stages"][0]["gpu"] = "yes"
    assert list(_validator("list").iter_errors(bad))
    bad = json.loads(json.dumps(doc)) | {"extra": 1}
    assert list(_validator("list").iter_errors(bad))


def test_list_and_profiles(capsys):
    doc = run_json(capsys, "list", ["ultra3", "list", "--json"])
    assert {s["stage"] for s in doc["stages"]} >= {"pretrain", "sft", "data-prep-pretrain", "rlvr"}
    doc = run_json(capsys, "profiles", ["profiles", "--env-file", str(ENV_FILE), "--json"])
    assert any(p["name"] == "sample" and p["valid"] for p in doc["profiles"])
    doc = run_json(capsys, "profiles", ["profiles", "sample", "--env-file", str(ENV_FILE), "--json"])
    assert doc["name"] == "sample" and doc["profile"]["executor"] == "slurm"
    assert "golden-secret-value-4242" not in json.dumps(doc)


def test_keys_json(capsys):
    """``keys STAGE --json``: every key of the merged tree (the NeMo RL recipe's included), valid against its schema."""
    doc = run_json(capsys, "keys", ["ultra3", "keys", "mopd", "-c", "tiny", "--json"])
    assert doc["layers"][1].startswith("nemo-rl:") and doc["layers"][-1] == "tiny.yaml"
    assert {k["source"] for k in doc["keys"]} >= {"recipe", "default.yaml", "tiny.yaml"}
    doc = run_json(capsys, "keys", ["ultra3", "keys", "data-prep-sft", "pack.", "--json"])
    assert doc["prefix"] == "pack." and doc["keys"] and all(k["key"].startswith("pack.") for k in doc["keys"])


@pytest.mark.parametrize("stage", ["pretrain", "sft", "data prep pretrain", "rlvr", "quantize"])
def test_dry_run_json(capsys, tmp_path, monkeypatch, stage):
    monkeypatch.chdir(tmp_path)
    # a stage whose inputs no run has made yet: valid, but the run would refuse to start (its "refusal"), exit 2
    inputs = stage != "data prep pretrain"
    doc = run_json(capsys, "dry-run", ["ultra3", *stage.split(), "-c", "tiny", "--dry-run", "--batch", "sample",
                                       "--env-file", str(ENV_FILE), "--json"], code=2 if inputs else 0)
    assert doc["valid"] and doc["executor"] == "slurm" and "#SBATCH" in doc["job"]
    assert (doc["refusal"] is not None) == inputs, doc["refusal"]
    assert (doc["estimate"] is not None) == (stage in ("pretrain", "sft"))
    assert "golden-secret-value-4242" not in json.dumps(doc)


def test_dry_run_json_with_errors_exits_2(capsys, tmp_path, monkeypatch):
    """Without a profile the default pretrain cannot start here: the document says why, exit 2."""
    monkeypatch.chdir(tmp_path)
    doc = run_json(capsys, "dry-run", ["ultra3", "pretrain", "--dry-run", "--json"], code=2)
    assert not doc["valid"] and any(p["severity"] == "error" for p in doc["problems"])


def test_estimate_json(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = run_json(capsys, "estimate", ["ultra3", "pretrain", "-c", "tiny", "estimate", "--batch", "sample",
                                        "--env-file", str(ENV_FILE), "--json"])
    assert doc["gpus"] == 8 and doc["jobs"] == 1 and doc["fits"] is None  # /shared/... is not mounted here
    # the local config on this machine: its checkpoint root is here, so free space is read
    doc = run_json(capsys, "estimate", ["ultra3", "pretrain", "-c", "local", "estimate", "--json",
                                        f"checkpoint.save={tmp_path}/ckpt"])
    assert doc["fits"] is True and doc["free_bytes"] > 0 and doc["ckpt_format"] == "hf-local"


@pytest.fixture(scope="module")
def data(tok_cache, shared_data, tmp_path_factory):
    """Real tiny data prep outputs (pretrain, SFT, RL) from samples of ../shared/data."""
    from config_support import compile_stage
    from nemotron.data import pretrain as dp_pretrain
    from nemotron.data import rl as dp_rl
    from nemotron.data import sft as dp_sft

    root = tmp_path_factory.mktemp("inspect-data")
    pv = {"stdlib": sysconfig.get_paths()["stdlib"], "shared_data": str(shared_data)}
    cfg = compile_stage("data-prep-pretrain", "tiny", output_dir=str(root / "pretrain"), tokenizer__cache_dir=tok_cache,
                        sample=60, shards={"target_tokens": 40_000}, path_vars=pv)
    dp_pretrain.prepare(dp_pretrain.Settings.from_config(cfg), quiet=True)
    cfg = compile_stage("data-prep-sft", "tiny", output_dir=str(root / "sft"), tokenizer__cache_dir=tok_cache,
                        sample=200, path_vars={"shared_data": str(shared_data)})
    sft = dp_sft.prepare(dp_sft.Settings.from_config(cfg), quiet=True)
    cfg = compile_stage("data-prep-rl", "tiny", output_dir=str(root / "rl"), sample=50,
                        path_vars={"shared_data": str(shared_data)})
    dp_rl.prepare(dp_rl.Settings.from_config(cfg), quiet=True)
    return {"pretrain": root / "pretrain", "sft": sft["loader"]["packed_train_data_path"], "rl": root / "rl"}


def test_data_inspect_json(capsys, data):
    doc = run_json(capsys, "data-inspect", ["ultra3", "data", "inspect", str(data["sft"]), "-n", "2", "--json"])
    assert doc["kind"] == "sft" and doc["packs"] > 0 and doc["learned_tokens"] > 0 and len(doc["shown"]) == 2
    doc = run_json(capsys, "data-inspect", ["ultra3", "data", "inspect", str(data["pretrain"]), "--json"])
    assert doc["kind"] == "pretrain" and doc["splits"]["train"]
    doc = run_json(capsys, "data-inspect", ["ultra3", "data", "inspect", str(data["pretrain"] / "blend.json"),
                                             "--step", "2", "--global-batch-size", "4", "--seq-length", "256",
                                             "--train-iters", "5", "--json"])
    assert doc["batch"]["first_sample"] == 4 and len(doc["batch"]["samples"]) == 4
    assert abs(sum(d["sample_share"] for d in doc["datasets"]["train"]) - 1) < 1e-9
    doc = run_json(capsys, "data-inspect", ["ultra3", "data", "inspect", str(data["rl"]), "--json"])
    assert doc["kind"] == "rl" and doc["records"] > 0
    assert doc["form"] == "data-prep-rl" and doc["untasked"] == 0


def test_data_inspect_of_a_raw_chat_file_says_what_it_read(capsys, data, tmp_path):
    """A raw SFT chat file (OpenAI messages) was shown as `RL prompts` with no word that it is no RL data. Now a
    chat record that is not [user, assistant] (a system turn, several turns) is refused naming the line and what it
    holds; single user/assistant exchanges without `task` are read, with form `chat-messages` and a note saying they
    are not a data prep rl output; a real data prep rl output says its form."""
    chat = tmp_path / "sft_good.jsonl"
    chat.write_text("".join(json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                                     {"role": "user", "content": f"q{i}"},
                                                     {"role": "assistant", "content": f"a{i}"}]}) + "\n"
                            for i in range(3)))
    assert main(["ultra3", "data", "inspect", str(chat)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {chat}:1: a chat record of 3 messages (system, user, assistant), not a data prep "
                          "rl line"), err
    assert "nemotron ultra3 data prep sft" in err
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                      {"role": "assistant", "content": f"a{i}"}]}) + "\n"
                             for i in range(3)))
    doc = run_json(capsys, "data-inspect", ["ultra3", "data", "inspect", str(pairs), "--json"])
    assert doc["form"] == "chat-messages" and doc["untasked"] == 3 and doc["records"] == 3
    assert main(["ultra3", "data", "inspect", str(pairs)]) == 0
    out = capsys.readouterr().out
    assert "note: 3 of 3 lines have no 'task' field: chat messages, not a data prep rl output" in out, out
    assert main(["ultra3", "data", "inspect", str(data["rl"])]) == 0
    assert "form: data prep rl output (messages [user, assistant] and task)" in capsys.readouterr().out


def test_why_json(capsys):
    doc = run_json(capsys, "why", ["ultra3", "why", "--log", str(HERE / "fixtures" / "why" / "nccl-timeout.log"), "--json"])
    assert doc["cause"] == "nccl-timeout" and doc["job"] is None


def test_status_and_why_json_of_a_local_slurm_job(capsys, slurm, tmp_path, monkeypatch):
    from nemotron.launch import jobs

    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    logs = tmp_path / "logs"
    logs.mkdir()
    job = slurm.sbatch("-J", "json", "-o", str(logs / "log-json_%j_0.out"), "--wrap", f"{sys.executable} -c 'raise SystemExit(3)'")
    jobs.save(jobs.JobRecord(experiment_id="ultra3-json-test", job_id=job, stage="pretrain", title="ultra3 pretrain",
                             profile="local-slurm", env_file="", run_dir=str(logs), log_dir=str(logs), job_name="json",
                             submitted=time.time()))
    slurm.wait(job, timeout=120)
    doc = run_json(capsys, "status", ["ultra3", "status", job, "--json"])
    assert doc["state"] == "FAILED" and doc["exit_code"] == "3:0" and doc["terminal"]
    doc = run_json(capsys, "why", ["ultra3", "why", job, "--json"])
    assert doc["job"] == job and doc["state"] == "FAILED"

