"""Output folders that cannot be created: refused by validation for runs on this machine, and named by
their config key when a runtime meets one anyway (nemotron.config.paths, nemotron.validation, nemotron.runtime.dispatch).

Real CLI in a subprocess, real stage configs, the real data prep runtime; /sys stands for a folder nobody
may create entries in (the kernel's sysfs refuses mkdir even to root).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from config_support import compile_stage, config_valid
from nemotron.config.paths import cannot_create_folder, folder_key
from submit_support import nemotron_runner

REPO = Path(__file__).resolve().parents[2]
FIXTURE_ENV = REPO / "tests" / "fixtures" / "env.toml"


def _sysfs_refuses() -> bool:
    try:
        os.rmdir(tempfile.mkdtemp(dir="/sys"))
    except OSError:
        return True
    return False


needs_sysfs = pytest.mark.skipif(not _sysfs_refuses(), reason="needs a /sys that refuses new folders (Linux)")


@pytest.fixture
def cli(tmp_path):
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")}
    env.pop("NEMOTRON_ENV_FILE", None)
    return nemotron_runner(env, tmp_path)


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "afile"
    path.write_text("not a folder\n")
    return path


def test_cannot_create_folder_reasons(tmp_path, a_file):
    assert cannot_create_folder(tmp_path) is None
    assert cannot_create_folder(tmp_path / "new" / "deeper") is None
    assert not (tmp_path / "new").exists()  # the check creates nothing that stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert cannot_create_folder(a_file) == "it is a file, not a folder"
    assert cannot_create_folder(a_file / "sub") == f"{a_file} is a file, not a folder"


@needs_sysfs
def test_cannot_create_folder_under_sysfs():
    assert cannot_create_folder("/sys/nemotron_out") == "Operation not permitted in /sys"


def test_folder_key_prefers_output_keys_and_matches_parents_and_children(tmp_path):
    out = str(tmp_path / "out")
    cfg = {"output_dir": out, "tokenizer": {"cache_dir": str(tmp_path)}, "n": 3}
    assert folder_key(cfg, out) == "output_dir"
    assert folder_key(cfg, f"{out}/shard_0.bin.tmp") == "output_dir"
    assert folder_key(cfg, str(tmp_path)) == "output_dir"  # makedirs failed at the parent
    assert folder_key(cfg, str(tmp_path / "other")) == "tokenizer.cache_dir"
    assert folder_key(cfg, "/elsewhere/x") is None and folder_key(cfg, None) is None


@needs_sysfs
@pytest.mark.parametrize("args, key, value", [
    (("data", "prep", "pretrain", "-c", "tiny", "output_dir=/sys/nemotron_out", "sample=100"), "output_dir",
     "/sys/nemotron_out"),
    (("pretrain", "-c", "local", "checkpoint.save=/sys/ckpt", "train.train_iters=1"), "checkpoint.save", "/sys/ckpt"),
])
def test_run_here_refuses_an_output_folder_that_cannot_be_created(cli, args, key, value):
    for extra in ((), ("--dry-run",)):
        proc = cli("ultra3", *args, *extra)
        assert proc.returncode == 2, proc.stderr[-2000:]
        text = proc.stdout + proc.stderr
        assert (f"error: {key}='{value}': cannot create (Operation not permitted in /sys); valid: a folder you can "
                f"write (it is created when missing)") in text, text[-2000:]
        assert "cannot read config" not in text and "Traceback" not in text


def test_output_folder_below_a_file_and_on_a_local_profile(cli, a_file):
    proc = cli("ultra3", "data", "prep", "sft", "-c", "tiny", f"output_dir={a_file}/sub", "--dry-run")
    assert proc.returncode == 2
    assert f"error: output_dir='{a_file}/sub': cannot create ({a_file} is a file, not a folder)" in proc.stdout
    proc = cli("ultra3", "data", "prep", "sft", "-c", "tiny", f"output_dir={a_file}", "--dry-run",
               "--run", "sample-local", "--env-file", str(FIXTURE_ENV))
    assert proc.returncode == 2
    assert proc.stdout.count("is a file, not a folder") == 1, proc.stdout  # one problem, not two rules' copies


def test_cluster_profile_paths_are_not_checked_here(cli, a_file):
    """A Slurm profile's paths live on the cluster's file system: nothing to check on this machine (a folder under
    the profile's checkpoint_root, which this machine does not have)."""
    assert not Path("/shared/jobs").exists()
    proc = cli("ultra3", "pretrain", "-c", "tiny", f"checkpoint.save=/shared/jobs/checkpoints/{a_file.name}/sub",
               "checkpoint.load=null", "--dry-run",
               "--run", "sample", "--env-file", str(FIXTURE_ENV))
    assert "cannot create" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
    assert config_valid(proc.returncode, proc.stdout), proc.stderr[-2000:]  # 2: inputs not made yet



@pytest.mark.parametrize("where", [[], ["--run", "sample", "--env-file", str(FIXTURE_ENV)]], ids=["here", "slurm"])
def test_a_folder_name_longer_than_the_file_system_takes_is_refused_by_key(cli, tmp_path, where):
    """A 300-byte folder name (file systems take 255): exit 2 naming the key, on this machine and for a cluster
    profile alike (it was an internal error from the free-space check, exit 1)."""
    long = f"{tmp_path}/{'a' * 300}"
    proc = cli("ultra3", "pretrain", "-c", "tiny", f"checkpoint.save={long}", "--dry-run", *where)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-2000:]
    shown = f"{long[:40]}...{long[-12:]}"
    assert f"error: checkpoint.save='{shown}': has a name of 300 bytes" in text, text[-2000:]
    assert "internal error" not in text


LONG = "x" * 300


@pytest.mark.parametrize("args", [
    ["ultra3", "data", "prep", "pretrain", "-c", "tiny", "output_dir={d}/" + LONG, "--dry-run"],
    ["ultra3", "data", "prep", "sft", "-c", "tiny", "output_dir={d}/" + LONG, "--dry-run"],
    ["ultra3", "pretrain", "-c", "local", "checkpoint.save={d}/" + LONG, "--dry-run"],
    ["ultra3", "pretrain", "-c", "{d}/" + LONG + ".yaml"],
    ["profiles", "--env-file", "{d}/" + LONG + ".toml"],
    ["ultra3", "model", "import", "{d}/" + LONG, "--as", "hf-checkpoint"],
    ["ultra3", "data", "inspect", "{d}/" + LONG],
    ["ultra3", "pretrain", "-c", "tiny", "--run", "sample", "--env-file", str(FIXTURE_ENV),
     "data.per_split_data_args_path={d}/" + LONG, "--dry-run"],
], ids=["data-prep-output", "sft-data-output", "checkpoint-save", "config-file", "env-file", "model-import",
        "data-inspect", "cluster-input"])
def test_every_path_with_a_name_over_255_bytes_is_one_error_line_exit_2(cli, tmp_path, args):
    """The whole kind (a new user found eight commands that ended in ``internal error: OSError: File name too
    long``, exit 1): a config key's path is refused by key (rule ``path-name-length``, before any check asks the
    file system about it), a path given on the command line by its name; exit 2, one error line, no traceback."""
    proc = cli(*[a.replace("{d}", str(tmp_path)) for a in args])
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-2000:]
    errors = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert errors and "255 bytes" in errors[0], text[-2000:]
    assert "internal error" not in text and "Traceback" not in text


def test_runtime_os_error_names_the_key_not_the_config(tmp_path, a_file):
    """Past validation (a job's entry runs the compiled config as is), the entry's one line names the
    key and path; a config that cannot be read is still reported as such."""
    cfg = compile_stage("data-prep-pretrain", "tiny", output_dir=f"{a_file}/sub", sample=40)
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(cfg))
    entry = [sys.executable, str(REPO / "stages" / "ultra3" / "data_prep_pretrain" / "run.py"), "--config"]
    proc = subprocess.run([*entry, str(config)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[0] == (f"error: ultra3 data prep pretrain: output_dir={a_file}/sub: cannot create "
                                           "(Not a directory)"), proc.stderr
    assert "Traceback" not in proc.stderr and "train.yaml" not in proc.stderr
    proc = subprocess.run([*entry, str(tmp_path / "missing.yaml")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: cannot read config {tmp_path / 'missing.yaml'}: No such file or directory"
