"""The local route's checks and messages, as a new user met them (the real CLI, in process, on real folders):

* a source folder that is not a checkpoint of the config's model: ``--dry-run`` of quantize, mtp-boost, eval, mopd,
  mopd-warmup said "valid" and the run refused ("is not a checkpoint of model small: hidden_size ..."); now the dry run
  asks the run's own check (``model.check_checkpoint``) and names the key;
* ``convert -c local``: a hand-made folder was recorded as hf-checkpoint (now ``model import``'s checks first), the
  output was named "sft" whatever the source, ``convert.dtype`` was ignored silently, a valid direction of the cluster
  backend got "did you mean" the value typed;
* the make-it-first hint of ``--batch local`` offered a ``pipe ... --batch local``, which pipe refuses.
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


# ------------------------------------------------------------------------------------------- E: convert -c local
def _hand_made(folder, weights: bytes, **config):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "nemotron_h", "hybrid_override_pattern": "M*E",
                                                    **config}))
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_local_convert_checks_what_model_import_checks_before_recording(capsys, tmp_path, monkeypatch):
    """A hand-made folder (a pattern-only config.json, 8 bytes of garbage as model.safetensors) was converted and
    recorded as hf-checkpoint (rc 0); now the dry run and the run refuse it (exit 2, nothing written or recorded),
    naming the file, as ``model import`` refuses it; a real checkpoint without a tokenizer too."""
    from rl_support import checkpoint, tokenizer_folder

    from nemotron.cli.imports import check_hf
    from nemotron.config import artifacts
    from nemotron.errors import ConfigError

    monkeypatch.setenv("NEMOTRON_CKPT_ROOT", str(tmp_path / "ckpts"))
    no_vocab = _hand_made(tmp_path / "hand made" / "a", b"garbage\n")
    garbage = _hand_made(tmp_path / "hand made" / "b", b"garbage\n", vocab_size=512)
    bare = checkpoint(tmp_path / "bare", tokenizer_folder(tmp_path / "tok"), seed=1)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"):
        (bare / f).unlink(missing_ok=True)
    cases = [(no_vocab, f"{no_vocab}/config.json: vocab_size=None is not a positive integer"),
             (garbage, f"{garbage}/model.safetensors: header length "),
             (bare, f"{bare}: no tokenizer (tokenizer.json or tokenizer.model)")]
    for folder, what in cases:
        with pytest.raises(ConfigError) as imported:  # model import's refusal of the same folder
            check_hf(folder)
        assert imported.value.message.startswith(what), imported.value.message
        line = f"error: convert.source='{folder}': {what}"
        for dry in (["--dry-run"], []):
            code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", *dry, f"convert.source={folder}")
            assert code == 2 and any(x.startswith(line) for x in (out + err).splitlines()), (dry, out, err)
        assert not (tmp_path / "ckpts").exists() and not artifacts.versions("hf-checkpoint")


def test_local_convert_names_its_output_after_the_source(capsys, tmp_path, monkeypatch):
    """``convert.output_dir`` of ``-c local`` is ``<checkpoint root>/<the source's folder name>-hf`` (it was
    ``ultra3-sft-local-hf`` whatever the source); the run writes and records that folder."""
    from rl_support import checkpoint, tokenizer_folder

    from nemotron.config import artifacts
    from nemotron.runtime.megatron.convert_local import output_name

    monkeypatch.setenv("NEMOTRON_CKPT_ROOT", str(tmp_path / "ckpts"))
    model = checkpoint(tmp_path / "given" / "my-base", tokenizer_folder(tmp_path / "tok"), seed=1)
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", f"convert.source={model}")
    want = tmp_path / "ckpts" / "my-base-hf"
    assert code == 0 and f"note: convert.output_dir=null: {want} (named after convert.source)" in out, (out, err)
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", f"convert.source={model}")
    assert code == 0, (out, err)
    assert (want / "config.json").is_file() and (want / "model.safetensors").is_file()
    assert artifacts.lookup("hf-checkpoint", None, "local")["path"] == str(want)
    # the SFT run's folder keeps its old name; a save folder is named after its run
    assert output_name("/c/ultra3-sft-local") == "ultra3-sft-local-hf"
    assert output_name("/c/ultra3-rlvr-local/hf/step_3") == "ultra3-rlvr-local-hf"
    assert output_name("/c/run/checkpoint-40") == "run-hf"
    # an output_dir you set is kept
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", f"convert.source={model}",
                             f"convert.output_dir={tmp_path / 'mine'}")
    assert code == 0 and "named after convert.source" not in out, (out, err)


# -------------------------------------------------------------------------- J, K: the convert keys -c local ignores
def test_local_convert_warns_that_dtype_is_ignored_and_refuses_a_cluster_direction_without_did_you_mean(capsys,
                                                                                                      tmp_path):
    """``convert.dtype=float32`` was silently ignored (weights copied); ``convert.direction=megatron_to_hf`` said
    "did you mean 'megatron_to_hf'?" (the value typed). Now: a warning naming the key, in the dry run and the run (which
    still copies the weights: the config.json keeps no torch_dtype of float32); the direction's refusal has no
    did-you-mean for a valid direction, and keeps it for a near miss."""
    from rl_support import checkpoint, tokenizer_folder

    from nemotron.runtime.megatron.convert_local import local_main

    model = checkpoint(tmp_path / "model", tokenizer_folder(tmp_path / "tok"), seed=1)
    out_dir = tmp_path / "out"
    keys = [f"convert.source={model}", f"convert.output_dir={out_dir}"]
    line = ("warning: convert.dtype='float32': ignored by the local backend: it copies the weights as they are (no "
            "cast; config.json keeps its torch_dtype); valid: null (-c local's value); a cast to bfloat16/float16/"
            "float32 is the Megatron-Bridge conversion's (-c tiny or default)")
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", *keys, "convert.dtype=float32")
    assert code == 0 and line in (out + err).splitlines(), (out, err)
    conv = {"direction": "hf_v5_to_v4", "source": str(model), "output_dir": str(out_dir), "dtype": "float32"}
    assert local_main({"convert": conv}) == 0
    assert "ultra3 convert: " + line in capsys.readouterr().err.splitlines()
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", *keys)  # null: nothing said
    assert code == 0 and "convert.dtype" not in out + err, (out, err)

    for value, start in (("megatron_to_hf", "error: convert.direction='megatron_to_hf': the local backend only "),
                         ("megatron2hf", "error: convert.direction='megatron2hf': did you mean 'megatron_to_hf'? ")):
        code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", *keys,
                                 f"convert.direction={value}")
        assert code == 2 and any(x.startswith(start) for x in out.splitlines()), (value, out, err)


# ------------------------------------------------------------------ F: the make-it-first hint of --batch local
def test_the_chain_hint_of_a_local_profile_is_a_pipe_that_runs(capsys, tmp_path):
    """``rlvr -c local --batch local`` before its inputs exist hinted ``pipe ... -c local --batch local``, which pipe
    refuses ("pipe --batch needs a slurm profile"); now the hint's pipe runs here without the profile, and its dry
    run is valid. The single-stage command keeps ``--batch local`` (a stage takes it)."""
    import re
    import shlex

    env = tmp_path / "env.toml"
    env.write_text(f'[local]\nexecutor = "local"\ngpus_per_node = 0\njob_dir = "{tmp_path / "jobs"}"\n')
    code, out, err = run_cli(capsys, "ultra3", "rlvr", "-c", "local", "--batch", "local", "--env-file", str(env))
    hint = next(x for x in err.splitlines() if x.startswith("hint: "))
    assert code == 2 and f"make it first: nemotron ultra3 sft -c local --batch local --env-file {env}; " in hint, err
    assert ", without --batch local (pipe queues a chain on a Slurm profile only): " in hint, hint
    pipe = re.search(r"(nemotron ultra3 pipe [^;]*)", hint).group(1)
    assert "--batch" not in pipe and pipe.endswith(" rlvr -c local"), pipe
    code, out, err = run_cli(capsys, *shlex.split(pipe)[1:], "--dry-run", "-q")
    assert code == 0 and "dry run: the chain of" in out and "is valid" in out, (out[-2000:], err[-2000:])
