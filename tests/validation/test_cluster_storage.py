"""A cluster job reads and writes only storage its profile says the nodes see; the storage defaults of container
and ssh profiles; the job's recorded git state (``-dirty`` with the changed and untracked files)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nemo_run", reason="the dry runs render NeMo-Run's sbatch script")

CLUSTER = """
[cluster]
executor = "slurm"
account = "acct"
partition = "batch"
gpus_per_node = 8
gpu = "H100"
mounts = ["/lustre/proj:/lustre/proj"]
job_dir = "/lustre/proj/jobs"
data_root = "/lustre/proj/data"
"""


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NEMOTRON_ENV_FILE"}
    env.update(NEMOTRON_HOME=str(tmp_path / "home"), COLUMNS="400")
    return subprocess.run([sys.executable, "-m", "nemotron", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL)


def _valid(done: subprocess.CompletedProcess) -> bool:
    """No problem found: exit 0, or exit 2 with the verdict that the config is valid but its input is not made yet
    (the run's refusal, which the dry run makes too)."""
    first = done.stdout.splitlines()[0] if done.stdout else ""
    return done.returncode == 0 or (done.returncode == 2 and first.startswith("dry run: the config is valid")
                                    and "but the run would refuse to start" in first)


def _local_pretrain_data(tmp_path: Path) -> Path:
    """A data prep artifact recorded on this machine (as `data prep pretrain -c tiny` run here records it)."""
    from local_runtime_support import write_pretrain_data

    out = tmp_path / "output" / "ultra3" / "pretrain-data" / "tiny"
    blend = write_pretrain_data(out, docs=10, valid_docs=5)  # real .bin/.idx shards (the dry-run reads their index)
    code = (f"from nemotron.config.compile import artifacts; artifacts.record('pretrain-data', {{'path': {str(out)!r}, "
            f"'blend_path': {str(blend)!r}, 'stage': 'data-prep-pretrain', 'config': 'tiny', 'job_id': 'local'}})")
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return blend


def test_local_artifact_wired_into_a_cluster_job_is_an_error_naming_path_key_and_artifact(tmp_path):
    (tmp_path / "env.toml").write_text(CLUSTER, encoding="utf-8")
    blend = _local_pretrain_data(tmp_path)
    # unpinned, the cluster job does not pick this machine's output: left out of the resolution, saying which and
    # why; the dry run says the run would refuse to start (an input not made yet is a warning there: a chain is
    # planned before its first stage ran), and the run refuses it
    for dry in (["--dry-run"], []):
        done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster", *dry)
        text = done.stdout + done.stderr
        assert done.returncode == 2, text  # the dry run refuses what the run refuses
        assert f"left out: v1: {blend.parent} is an older record's output" in text
        assert "outside this run's output folders (/lustre/proj/data" in text and "${art:pretrain-data:N,...}" in text
        assert ("but the run would refuse to start" in text) == bool(dry)
    # pinned, it resolves, and the storage check names path, key and artifact
    pin = "data.per_split_data_args_path=${art:pretrain-data:1,blend_path}"
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster", "--dry-run", pin)
    text = done.stdout + done.stderr
    assert done.returncode == 2, text
    line = next(ln for ln in text.splitlines() if ln.startswith("error: data.per_split_data_args_path"))
    assert str(blend) in line and "from artifact pretrain-data v1" in line
    assert "not on storage the nodes of profile cluster see" in line and "mounts[0] /lustre/proj" in line
    # the run refuses it too (one set of checks), before anything is queued
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster", pin)
    assert done.returncode == 2 and "data.per_split_data_args_path" in done.stdout + done.stderr


def test_path_on_the_profiles_storage_passes_and_one_off_it_from_the_command_line_fails(tmp_path):
    (tmp_path / "env.toml").write_text(CLUSTER, encoding="utf-8")
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster", "--dry-run",
                "checkpoint.save=/lustre/proj/data/ckpt")
    assert _valid(done), done.stdout + done.stderr
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster", "--dry-run",
                "checkpoint.save=/tmp/ckpt")
    assert done.returncode == 2
    assert "error: checkpoint.save='/tmp/ckpt': (set by override) is not on storage" in done.stdout + done.stderr


def test_input_on_the_storage_of_an_ssh_cluster_is_not_looked_for_on_this_machine(tmp_path):
    """Submitted over ssh, the nodes' storage is not this machine's: an input under the profile's data_root that
    exists only there is not refused by a local existence check; one off the declared storage still is."""
    key = tmp_path / "id_ed25519"
    key.write_text("a key\n")
    (tmp_path / "env.toml").write_text(CLUSTER + f'tunnel = "ssh"\nhost = "login"\nuser = "me"\nidentity = "{key}"\n',
                                       encoding="utf-8")
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster", "--dry-run",
                "data.per_split_data_args_path=/lustre/proj/data/pretrain/blend.json")
    assert _valid(done), done.stdout + done.stderr
    assert "input path does not exist" not in done.stdout + done.stderr
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster", "--dry-run",
                "data.per_split_data_args_path=/scratch/blend.json")
    assert done.returncode == 2
    assert ("error: data.per_split_data_args_path='/scratch/blend.json': (set by override) is not on storage"
            in done.stdout + done.stderr)


def test_container_profile_without_storage_roots_defaults_them_on_the_job_dir(tmp_path):
    (tmp_path / "env.toml").write_text(
        '[c]\nexecutor = "slurm"\npartition = "batch"\ngpus_per_node = 8\njob_dir = "/lustre/proj/jobs"\n',
        encoding="utf-8")
    done = _cli(tmp_path, "profiles", "c")
    assert "data_root: /lustre/proj/jobs/data  # default" in done.stdout
    assert "checkpoint_root: /lustre/proj/jobs/checkpoints  # default" in done.stdout
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--batch", "c", "--dry-run")
    assert _valid(done), done.stdout + done.stderr
    assert "save: /lustre/proj/jobs/checkpoints/ultra3-pretrain-tiny" in done.stdout
    assert "export NEMOTRON_CKPT_ROOT=/lustre/proj/jobs/checkpoints" in done.stdout
    # a host-Python profile through a local tunnel shares this machine's file system: no default, no check
    (tmp_path / "env.toml").write_text(
        '[h]\nexecutor = "slurm"\npartition = "batch"\ngpus_per_node = 8\ncontainer = false\n', encoding="utf-8")
    done = _cli(tmp_path, "profiles", "h")
    assert "data_root" not in done.stdout


def test_storage_root_outside_the_mounts_is_mounted_into_the_container(tmp_path):
    (tmp_path / "env.toml").write_text(CLUSTER + 'checkpoint_root = "/scratch/ckpt"\n', encoding="utf-8")
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "cluster", "--dry-run")
    assert _valid(done), done.stdout + done.stderr
    mounts = next(ln for ln in done.stdout.splitlines() if ln.startswith("srun --output")).split("--container-mounts ")[1]
    assert mounts.split(" ")[0].split(",")[:3] == ["/lustre/proj:/lustre/proj", "/lustre/proj/jobs:/lustre/proj/jobs",
                                                   "/scratch/ckpt:/scratch/ckpt"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"})


def test_git_state_marks_untracked_files_the_snapshot_ships(tmp_path):
    from nemotron.launch.execute import git_state

    repo = tmp_path / "repo"
    (repo / "src" / "nemotron").mkdir(parents=True)
    (repo / "stages").mkdir()
    (repo / "src" / "nemotron" / "a.py").write_text("x = 1\n")
    (repo / "README.md").write_text("r\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c")
    clean = git_state(repo)
    assert clean is not None and not clean["commit"].endswith("-dirty") and clean["untracked"] == []
    (repo / "stages" / "new stage.py").write_text("print(1)\n")  # shipped by the code snapshot, untracked
    (repo / "notes.txt").write_text("not shipped\n")
    state = git_state(repo)
    assert state["commit"] == clean["commit"] + "-dirty"
    assert state["untracked"] == ["stages/new stage.py"] and state["changed"] == []
    (repo / "src" / "nemotron" / "a.py").write_text("x = 2\n")
    assert git_state(repo)["changed"] == ["src/nemotron/a.py"]


#: The seed documents' cluster profile, as written there: no job_dir, data_root nor checkpoint_root.
SEED_PROFILE = """
[YOUR-CLUSTER]
executor = "slurm"
account = "YOUR-ACCOUNT"
partition = "batch"
nodes = 48
ntasks_per_node = 8
gpus_per_node = 8
mounts = ["/lustre:/lustre"]
"""


def test_profile_without_job_dir_warns_where_everything_would_go_in_dry_run_and_run(tmp_path):
    """The seed's profile copied as written planned every job folder, data prep output and checkpoint under this
    machine's $NEMOTRON_HOME/jobs (and mounted it into every job) with no word: the dry run said valid. Now the dry
    run and the run (here refused for its missing input, after its report) warn, naming the unset keys, where each
    goes and what to set; a profile.job_dir= override (or job_dir in env.toml) ends the warning."""
    (tmp_path / "env.toml").write_text(SEED_PROFILE, encoding="utf-8")
    home = tmp_path / "home"
    want = (f"warning: profile YOUR-CLUSTER ({tmp_path / 'env.toml'}) sets none of job_dir, data_root, checkpoint_root: "
            f"the jobs' folders, data and checkpoints go under this machine's $NEMOTRON_HOME/jobs (job_dir -> "
            f"{home}/jobs; data_root -> {home}/jobs/data; checkpoint_root -> {home}/jobs/checkpoints)")
    for dry in (["--dry-run"], []):
        done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "YOUR-CLUSTER", *dry)
        text = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 2 and "pretrain-data does not exist yet" in text, text  # its input: not made yet
        assert want in text, text
        assert 'set job_dir, data_root and checkpoint_root in [YOUR-CLUSTER]' in text
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "YOUR-CLUSTER", "--dry-run",
                "profile.job_dir=/lustre/proj/jobs")
    assert "sets none of" not in done.stdout + done.stderr
    # job_dir set, the roots left to their documented defaults on it: no warning
    (tmp_path / "env.toml").write_text(SEED_PROFILE + 'job_dir = "/lustre/proj/jobs"\n', encoding="utf-8")
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "YOUR-CLUSTER", "--dry-run")
    assert "sets none of" not in done.stdout + done.stderr and _valid(done), done.stdout + done.stderr
