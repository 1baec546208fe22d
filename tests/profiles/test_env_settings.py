"""env.toml's settings sections: ``[artifacts] root`` decides where artifact records are kept, for runs
here and on profiles; ``[wandb]`` and ``[artifacts]`` are as strict as profiles (unknown key -> error
with a did-you-mean), wherever the file is read: ``nemotron profiles``, a run here, a run on a profile.

The real CLI in a subprocess and the real data prep runtime on the shared tiny data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nemotron.config import artifacts
from nemotron.errors import ConfigError
from nemotron.profiles.load import use_env_file
from nemotron.profiles.sections import artifacts_root
from nemotron.profiles.load import load_profiles
from submit_support import nemotron_runner


@pytest.fixture
def cli(tmp_path):
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")}
    env.pop("NEMOTRON_ENV_FILE", None)
    return nemotron_runner(env, tmp_path)


def _env(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "env.toml"
    path.write_text('[here]\nexecutor = "local"\n\n' + text, encoding="utf-8")
    return path


def test_artifacts_root_values(tmp_path):
    assert artifacts_root({}, tmp_path / "env.toml") is None
    assert artifacts_root({"artifacts": {"root": "/abs/store"}}) == Path("/abs/store")
    assert artifacts_root({"artifacts": {"root": "rel/store"}}, tmp_path / "env.toml") == tmp_path / "rel" / "store"
    assert artifacts_root({"artifacts": {"root": "~/store"}}) == Path.home() / "store"


@pytest.mark.parametrize("text, message", [
    ('[artifacts]\nrooot = "/x"\n', "[artifacts] rooot: unknown key (did you mean 'root'?)"),
    ("[artifacts]\nroot = 5\n", "[artifacts] root = 5: expected a non-empty string (a folder)"),
    ('[wandb]\nprojekt = "x"\n', "[wandb] projekt: unknown key (did you mean 'project'?)"),
])
def test_settings_sections_are_strict_on_load(tmp_path, text, message):
    path = _env(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_profiles(path)
    assert info.value.message == f"{path}: {message}"


@pytest.mark.parametrize("command", [("profiles",), ("ultra3", "data", "prep", "pretrain", "-c", "tiny", "--dry-run"),
                                     ("ultra3", "data", "prep", "pretrain", "-c", "tiny", "--dry-run", "--run", "here")])
def test_a_typo_in_a_section_stops_every_command_that_reads_the_file(cli, tmp_path, command):
    _env(tmp_path, '[wandb]\nprojekt = "x"\n')  # found by discovery: the working folder
    proc = cli(*command)
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert "[wandb] projekt: unknown key (did you mean 'project'?)" in proc.stderr


def test_records_go_to_the_artifacts_root_and_are_read_from_it(cli, tmp_path):
    """A data prep run here (env.toml found in the working folder) records pretrain-data under
    [artifacts] root, not in $NEMOTRON_HOME/artifacts; pretrain's dry-run then resolves it from there."""
    store = tmp_path / "team store"
    _env(tmp_path, f'[artifacts]\nroot = "{store}"\n')
    out = tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny"  # the default output folder (a scratch
    # output_dir= elsewhere would not be the latest: tests/config/test_artifact_scope.py)
    proc = cli("ultra3", "data", "prep", "pretrain", "-c", "tiny", "sample=300")
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((store / "pretrain-data" / "v1.json").read_text())
    assert record["path"] == str(out) and Path(record["blend_path"]).is_file()
    assert not (tmp_path / "home" / "artifacts").exists()
    proc = cli("ultra3", "pretrain", "-c", "tiny", "--dry-run")
    assert record["blend_path"] in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    # without the section the default store is used again (nothing recorded there): the artifact is unknown
    _env(tmp_path, "")
    proc = cli("ultra3", "pretrain", "-c", "tiny", "--dry-run")
    assert record["blend_path"] not in proc.stdout and "pretrain-data" in proc.stdout + proc.stderr


def test_use_env_file_switches_and_resets_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    try:
        use_env_file(_env(tmp_path, '[artifacts]\nroot = "store"\n'))
        assert artifacts.store() == tmp_path / "store"
        rec = artifacts.record("x", {"path": "/p"})
        assert (tmp_path / "store" / "x" / f"v{rec['version']}.json").is_file()
        use_env_file(None)
        assert artifacts.store() == tmp_path / "home" / "artifacts"
    finally:
        use_env_file(None)
