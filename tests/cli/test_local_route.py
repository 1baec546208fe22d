"""The local route's checks and messages, as a new user met them (the real CLI, in process, on real folders):

* a source folder that is not a checkpoint of the config's model: ``--dry-run`` of quantize, mtp-boost, eval, mopd,
  mopd-warmup said "valid" and the run refused ("is not a checkpoint of model small: hidden_size ..."); now the dry run
  asks the run's own check (``model.check_checkpoint``) and names the key.
"""

from __future__ import annotations

import json

import pytest

from test_cli import _isolated_home, run_cli  # noqa: F401 - the autouse fixture isolates NEMOTRON_HOME here too


def _config_only(folder, **changes):
    """A Hugging Face folder whose config.json is the catalogue ``small`` model's (v4 form) with ``changes``, and an
    empty model.safetensors: what the shape check reads (config.json only)."""
    from nemotron.config import catalogue

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**catalogue.hf_config(catalogue.get("small")), **changes}))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize("stage,key", [("quantize", "quantization.source"), ("mtp-boost", "mtp_boost.source"),
                                       ("eval", "eval.checkpoints.bf16"), ("mopd", "policy.model_name"),
                                       ("mopd-warmup", "_teachers.general")])
def test_dry_run_refuses_a_source_of_another_model_as_the_run_does(capsys, tmp_path, stage, key):
    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod

    other = _config_only(tmp_path / "other", hidden_size=512)
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "local", "--dry-run", "--quiet", f"{key}={other}")
    with pytest.raises(modelmod.ModelError) as run_refusal:  # what the run's load raises, before torch loads weights
        modelmod.check_checkpoint(catalogue.get("small"), other)
    assert str(run_refusal.value) == f"{other} is not a checkpoint of model small: hidden_size: checkpoint 512, model 256"
    line = (f"error: {key}='{other}': it is not a checkpoint of model small: hidden_size: checkpoint 512, model 256; "
            "valid: a checkpoint of model small (config.json with its fields), or model.name=<the checkpoint's model>")
    assert code == 2 and line in out.splitlines(), (out, err)
    # a checkpoint of the model: no such line
    same = _config_only(tmp_path / "same")
    code, out, err = run_cli(capsys, "ultra3", stage, "-c", "local", "--dry-run", "--quiet", f"{key}={same}")
    assert "not a checkpoint of model" not in out + err, (out, err)
