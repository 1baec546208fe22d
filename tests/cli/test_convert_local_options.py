"""``convert -c local`` and the ``convert`` keys its backend does not act on. A new user's
``convert -c local convert.hf_config_form=v5`` was "valid" and wrote a v4 config.json (hybrid_override_pattern) without
a word; ``convert.device=gpu`` on a machine without a GPU ran (rc 0) with nothing saying the key was ignored. Now one
check (``convert_local.option_problems``) serves the dry run and the run: ``hf_config_form`` other than v4 is refused
(exit 2, nothing written), ``device: gpu`` is a warning naming the key; the run on a real checkpoint then converts."""

from __future__ import annotations

import json

from test_cli import _isolated_home, run_cli  # noqa: F401 - the autouse fixture isolates NEMOTRON_HOME here too


def _model(tmp_path):
    from rl_support import checkpoint, tokenizer_folder

    return checkpoint(tmp_path / "model", tokenizer_folder(tmp_path / "tok"), seed=1)


def test_local_convert_refuses_hf_config_form_v5_in_the_dry_run_and_the_run(capsys, tmp_path):
    from nemotron.runtime.megatron.convert_local import local_main

    model = _model(tmp_path)
    out_dir = tmp_path / "out"
    keys = [f"convert.source={model}", f"convert.output_dir={out_dir}"]
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", "--quiet", *keys,
                             "convert.hf_config_form=v5")
    line = ("error: convert.hf_config_form='v5': the local backend's one direction (hf_v5_to_v4) writes config.json "
            "in the v4 form (hybrid_override_pattern), never another; valid: v4 (or null)")
    assert code == 2 and any(x.startswith(line) for x in out.splitlines()), (out, err)
    conv = {"direction": "hf_v5_to_v4", "source": str(model), "output_dir": str(out_dir), "hf_config_form": "v5"}
    assert local_main({"convert": conv}) == 2
    assert capsys.readouterr().err.startswith("ultra3 convert: " + line)
    assert not out_dir.exists()
    # v4 (what it writes) and null are fine: the dry run is valid and the run writes the v4 form
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", "--quiet", *keys,
                             "convert.hf_config_form=v4")
    assert code == 0, (out, err)
    assert local_main({"convert": {**conv, "hf_config_form": None}}) == 0
    assert "hybrid_override_pattern" in json.loads((out_dir / "config.json").read_text())


def test_local_convert_says_that_device_gpu_is_ignored_in_the_dry_run_and_the_run(capsys, tmp_path):
    from nemotron.runtime.megatron.convert_local import local_main

    model = _model(tmp_path)
    out_dir = tmp_path / "out"
    keys = [f"convert.source={model}", f"convert.output_dir={out_dir}", "convert.device=gpu"]
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", *keys)
    line = ("warning: convert.device='gpu': ignored by the local backend: it rewrites config.json and copies the "
            "weights in one process, on no GPU; valid: cpu")
    assert code == 0 and line in (out + err).splitlines(), (out, err)
    conv = {"direction": "hf_v5_to_v4", "source": str(model), "output_dir": str(out_dir), "device": "gpu"}
    assert local_main({"convert": conv}) == 0
    assert "ultra3 convert: " + line in capsys.readouterr().err.splitlines()
    assert (out_dir / "config.json").is_file()
    # cpu, the local config's own value: nothing said
    code, out, err = run_cli(capsys, "ultra3", "convert", "-c", "local", "--dry-run", *keys[:2])
    assert code == 0 and "convert.device" not in out + err, (out, err)
