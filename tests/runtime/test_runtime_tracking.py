"""Metrics of the training runtimes (src/nemotron/runtime/megatron/tracking.py and the local trainer): TensorBoard
event files hold the logged loss; the W&B run id is the same for every job of a run, so a resumed
(requeued) run continues the same W&B run; the API key is read from the environment and written nowhere.

W&B runs in its offline mode (real wandb package, no server: there is no network here). Sizes as in
test_runtime_local.py: the catalogue's `small` blocks with a 512-entry vocabulary, a few steps on the CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config_support import config_valid
from local_runtime_support import (
    compile_local,
    fast_overrides,
    small_spec,
    write_pretrain_data,
)
from nemotron.profiles.sections import wandb_key_problem
from nemotron.runtime.common import settings as S
from nemotron.runtime.megatron.tracking import data_label, wandb_identity, wandb_run_id

KEY = "wandb-key-for-tests-0123456789abcdef0123"
TRACKING_ENV = ("WANDB_RUN_ID", "WANDB_RESUME", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_NAME", "WANDB_DIR",
                "WANDB_MODE", "WANDB_API_KEY", "WANDB_SILENT", "TENSORBOARD_LOGGING_DIR")


def test_wandb_identity_is_stable_per_checkpoint_folder(tmp_path):
    a = wandb_identity(checkpoint_dir=tmp_path / "ckpt", project="p", exp_name="ultra3-pretrain-local",
                       data=data_label(tmp_path / "out" / "v2", "pretrain-data"))
    b = wandb_identity(checkpoint_dir=tmp_path / "ckpt", project="p", exp_name="ultra3-pretrain-local",
                       data=data_label(tmp_path / "out" / "v2", "pretrain-data"))
    other = wandb_identity(checkpoint_dir=tmp_path / "ckpt2", project="p", stage="pretrain")
    assert a == b and a.run_id == wandb_run_id(tmp_path / "ckpt") and len(a.run_id) == 16
    assert other.run_id != a.run_id
    assert a.name == "ultra3-pretrain-local (pretrain-data v2)" and other.name == "ultra3-pretrain"
    assert data_label(tmp_path / "out", "sft-data") == "sft-data v1"  # the first version is output_dir itself
    env = a.env()
    assert env["WANDB_RUN_ID"] == a.run_id and env["WANDB_RESUME"] == "allow" and "WANDB_API_KEY" not in env
    assert wandb_identity(checkpoint_dir=tmp_path, project=None) is None  # W&B off


def test_wandb_without_a_key_is_refused_before_training():
    """W&B on, no key, not offline: one line naming the key and the fix (the key's value is never shown)."""
    line = wandb_key_problem("ultra3", {})
    assert line.startswith("logger.wandb_project='ultra3': WANDB_API_KEY is not set") and "profile secret" in line
    assert wandb_key_problem("ultra3", {"WANDB_API_KEY": KEY}) is None
    assert wandb_key_problem("ultra3", {"WANDB_MODE": "offline"}) is None
    assert wandb_key_problem(None, {}) is None  # W&B off


def _scalars(tb_dir: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[int, float] = {}
    for events in sorted(tb_dir.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events))
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            out.update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def test_tensorboard_holds_the_loss_and_wandb_resumes_the_same_run(tmp_path, monkeypatch, capfd):
    """Two jobs of one run (step 1, then resumed to step 2): TensorBoard has the training loss of every step
    as metrics.jsonl logged it; both jobs log to one W&B run id; the API key is in no output or file."""
    pytest.importorskip("tensorboard", reason="TensorBoard comes with the local extra")
    wandb = pytest.importorskip("wandb", reason="W&B logging needs the wandb package")
    from nemotron.runtime.megatron.trainer import run

    for var in TRACKING_ENV:  # whatever the runtime sets is undone after the test
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    blend = write_pretrain_data(tmp_path / "data", docs=40, valid_docs=10)
    (tmp_path / "data" / "manifest.json").write_text('{"complete": true}')  # a data prep version folder
    ckpt = tmp_path / "ckpt"
    for iters in (1, 2):
        cfg = compile_local("pretrain", fast_overrides(ckpt, seq=32, iters=2, **{
            "data.per_split_data_args_path": str(blend), "validation.eval_iters": 0, "logger.log_interval": 1,
            "checkpoint.save_interval": 1, "scheduler.lr_warmup_iters": 1, "logger.wandb_project": "nemotron-tests"}))
        cfg["train"]["train_iters"] = iters
        assert run(S.read(cfg, "pretrain"), spec=small_spec()) == 0
        assert wandb.run is None  # each job closes its W&B run
    logged = {}
    for line in (ckpt / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:
            logged[rec["step"]] = rec["loss"]
    tb = _scalars(ckpt / "tb_logs", "train/loss")
    assert sorted(tb) == [1, 2] == sorted(logged)
    assert all(abs(tb[k] - logged[k]) < 1e-4 for k in tb), (tb, logged)

    run_dirs = sorted(p.name for p in (ckpt / "wandb").rglob("offline-run-*") if p.is_dir())
    assert len(run_dirs) == 2, run_dirs  # one per job ...
    assert {d.rsplit("-", 1)[1] for d in run_dirs} == {wandb_run_id(ckpt)}  # ... both the same W&B run
    out = capfd.readouterr()
    assert KEY not in out.out + out.err
    assert f"W&B: project nemotron-tests, run 'ultra3-pretrain-local (pretrain-data v1)' (id {wandb_run_id(ckpt)}" \
        in out.out
    # the data folder is now consumed: data prep's force=true writes a new version instead of rewriting it
    from nemotron.data.outputs import consumers, select_version

    assert [c["stage"] for c in consumers(tmp_path / "data")] == ["pretrain"]
    version, folder, why = select_version(tmp_path / "data", force=True)
    assert (version, folder) == (2, tmp_path / "data" / "v2") and "consumed" in why
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert not leaks, leaks


def test_env_toml_wandb_section_supplies_the_project(tmp_path, monkeypatch, capsys):
    """The [wandb] settings section fills logger.wandb_project / wandb_entity of a run on a profile; a
    config's own value wins; a misspelt key is refused with a did-you-mean."""
    from nemotron.cli.main import main

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    # the job (a local profile's: this shell's environment) logs offline: no key needed, so nothing is refused; a
    # dry run exits 2 only for the data no run has made yet (config_valid)
    monkeypatch.setenv("WANDB_MODE", "offline")
    env = tmp_path / "env.toml"
    env.write_text('[here]\nexecutor = "local"\ngpus_per_node = 0\n\n[wandb]\nproject = "nemotron-ultra3"\n'
                   'entity = "my-team"\n')
    code = main(["ultra3", "pretrain", "-c", "local", "--dry-run", "--batch", "here", "--env-file", str(env)])
    out = capsys.readouterr().out
    assert config_valid(code, out), out[-2000:]
    assert "wandb_project: nemotron-ultra3  # env.toml [wandb] project" in out
    assert "wandb_entity: my-team  # env.toml [wandb] entity" in out
    code = main(["ultra3", "pretrain", "-c", "local", "logger.wandb_project=mine", "--dry-run", "--batch", "here",
                 "--env-file", str(env)])
    out = capsys.readouterr().out
    assert config_valid(code, out), out[-2000:]
    assert "wandb_project: mine  # override" in out and "wandb_entity: my-team  # env.toml [wandb] entity" in out
    code = main(["ultra3", "pretrain", "-c", "local", "--dry-run"])  # no profile: W&B stays off
    out = capsys.readouterr().out
    assert config_valid(code, out) and "wandb_project: null" in out
    env.write_text('[here]\nexecutor = "local"\n\n[wandb]\nprojekt = "x"\n')
    assert main(["ultra3", "pretrain", "-c", "local", "--dry-run", "--batch", "here", "--env-file", str(env)]) == 2
    assert "[wandb] projekt: unknown key (did you mean 'project'?)" in capsys.readouterr().err
