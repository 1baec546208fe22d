"""Golden `--dry-run` output of every stage with `-c tiny` against a sample Slurm profile.

The sbatch script in it is rendered by NeMo-Run itself. Regenerate after an intended change with

    NEMOTRON_REGEN_GOLDEN=1 python -m pytest tests/cli/test_dryrun_golden.py

and review the diff like code.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from pathlib import Path

import pytest

from nemotron.cli.main import main
from nemotron.config.registry import STAGES
from golden_support import normalise

pytest.importorskip("nemo_run", reason="the golden dry-runs are rendered by NeMo-Run (a base dependency: reinstall nemotron-cli)")

HERE = Path(__file__).resolve().parents[1]  # tests/
ROOT = HERE.parent
GOLDEN = HERE / "golden"
ENV_FILE = HERE / "fixtures" / "env.toml"
SECRETS = ("golden-secret-value-4242", "golden-token-value-9999")
#: Stages whose cluster route (-c tiny) the dry run refuses by design, with the rule that refuses it.
REFUSED_CLUSTER_ROUTE = {"mtp-boost": "mtp-boost-framework"}
REFUSED_MESSAGE = "MTP boosting cannot run on megatron-bridge at the pinned versions"


@pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])
def test_golden_dry_run(stage, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("NEMOTRON_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    code = main(["ultra3", *stage.command, "-c", "tiny", "--dry-run", "--batch", "sample", "--env-file", str(ENV_FILE)])
    cap = capsys.readouterr()
    # mtp-boost's cluster route is refused at the pinned versions (rule mtp-boost-framework, docs/mtp_boost.md); a
    # stage whose inputs no run has made yet (a fresh NEMOTRON_HOME) is valid, but the run would refuse to start and
    # so does the dry run (exit 2), saying so in its verdict
    inputs_missing = "but the run would refuse to start" in cap.out.splitlines()[0]
    assert code == (2 if stage.name in REFUSED_CLUSTER_ROUTE or inputs_missing else 0), cap.err
    if stage.name not in REFUSED_CLUSTER_ROUTE:  # every stage that consumes an artifact: none is made here
        assert inputs_missing == bool(stage.consumes), cap.out.splitlines()[0]
    if stage.name in REFUSED_CLUSTER_ROUTE:
        assert f"[{REFUSED_CLUSTER_ROUTE[stage.name]}]" in cap.out or REFUSED_MESSAGE in cap.out + cap.err
    for secret in SECRETS:
        assert secret not in cap.out and secret not in cap.err, "a secret leaked into the dry-run output"
    if stage.launch == "torchrun" or stage.kind != "data":
        assert "#SBATCH --account=ultra-acct" in cap.out
    assert not list(tmp_path.glob("home/jobs/*")), "a dry run must not write job folders"
    text = normalise(cap.out, home)
    path = GOLDEN / f"{stage.name}.txt"
    if os.environ.get("NEMOTRON_REGEN_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path.name}; run with NEMOTRON_REGEN_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"dry-run output of {stage.name} changed; diff it against {path} (regenerate if intended)"


def test_secrets_absent_from_sbatch_script(tmp_path, monkeypatch):
    """The sbatch script NeMo-Run renders carries no secret value, only the path of the 0600 file
    the job sources."""
    from nemotron.launch import backends
    from nemotron.config.compile import compile_config
    from nemotron.cli.pipeline import StageRequest
    from nemotron.profiles.load import load_profile
    from nemotron.launch.plan import plan_job
    from nemotron.config.registry import get_stage

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path))
    stage = get_stage("pretrain")
    compiled = compile_config(stage, "tiny", [])
    profile = load_profile("sample", str(ENV_FILE), {})
    plan = plan_job(compiled, profile)
    req = StageRequest(stage=stage, config="tiny", overrides=(), mode="batch", profile="sample", dry_run=True,
                       env_file=str(ENV_FILE))
    script = backends.render(req, compiled, profile, plan)
    assert "#SBATCH" in script
    for secret in SECRETS:
        assert secret not in script
    assert "secrets.env" in script and "WANDB_API_KEY" in script and "HF_TOKEN" in script
    assert "export NCCL_DEBUG=WARN" in script


def test_profile_storage_roots_reach_config_and_job(tmp_path, monkeypatch, capsys):
    """The profile owns shared storage: its checkpoint root becomes the stage's checkpoint path at
    compile time, and its cache and offline settings are exported in the job."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NEMOTRON_CKPT_ROOT", "/elsewhere")  # the profile, which owns storage, wins
    monkeypatch.chdir(tmp_path)
    code = main(["ultra3", "pretrain", "-c", "tiny", "--dry-run", "--batch", "sample-storage", "--env-file", str(ENV_FILE)])
    out = capsys.readouterr().out
    assert code == 2 and out.startswith("dry run: the config is valid")  # valid; its data is not made yet
    assert "save: /shared/checkpoints/ultra3-pretrain-tiny" in out
    for line in ("export NEMOTRON_CKPT_ROOT=/shared/checkpoints", "export HF_HOME=/shared/hf", "export HF_HUB_OFFLINE=1"):
        assert line in out
