"""The seed document's example profile and validate commands, as a user types them; a Slurm profile without
``account``; NeMo-Run missing; hints that carry the ``--env-file`` given."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from config_support import config_valid

pytest.importorskip("nemo_run", reason="the dry runs render NeMo-Run's sbatch script")

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT.parent / "shared" / "seeds"


def _seed_profile() -> str:
    """The example env.toml profile of the seed recipe page, as written there."""
    docs = sorted(SEED.glob("001_*.txt"))
    if not docs:
        pytest.skip(f"the seed documents are not in {SEED}")
    text = docs[0].read_text(encoding="utf-8")
    block = re.search(r"Example `env.toml` profile:\s*```toml\n(.*?)```", text, re.S)
    assert block, "the seed's example profile was not found"
    return block.group(1)


def _seed_commands() -> list[list[str]]:
    text = sorted(SEED.glob("001_*.txt"))[0].read_text(encoding="utf-8")
    block = re.search(r"### Validate job configs\s*```bash\n(.*?)```", text, re.S).group(1)
    return [line.split()[3:] for line in block.strip().splitlines()]  # drop `uv run nemotron`


def _cli(tmp_path: Path, *args: str, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NEMOTRON_ENV_FILE"}
    env["NEMOTRON_HOME"] = str(tmp_path / "home")
    env["COLUMNS"] = "400"  # rich tables: no wrapped cells
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-m", "nemotron", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL)


@pytest.fixture
def seed_env(tmp_path: Path) -> Path:
    path = tmp_path / "env.toml"
    path.write_text(_seed_profile(), encoding="utf-8")
    return path


def test_seed_validate_commands_find_no_problem(seed_env, tmp_path):
    """Valid on the seed's profile as written; exit 2 only because no run has made their data yet (the run would
    refuse to start, and so does the dry run)."""
    commands = _seed_commands()
    assert len(commands) == 2 and all("--dry-run" in c and "YOUR-CLUSTER" in c for c in commands)
    for command in commands:
        done = _cli(tmp_path, *command)
        assert config_valid(done.returncode, done.stdout), f"{command}: {done.stderr}"
        # the profile's nodes = 48 is a budget: the 1-node tiny slice runs on its own count, and says so
        assert "allows up to 48 nodes" in done.stdout and "runs on the 1 node" in done.stdout
        assert "#SBATCH --nodes=1" in done.stdout and "#SBATCH --account=YOUR-ACCOUNT" in done.stdout


def test_seed_profile_nodes_is_a_budget_a_stage_above_it_is_an_error(seed_env, tmp_path):
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "default", "--run", "YOUR-CLUSTER", "--dry-run")
    assert done.returncode == 2
    assert "needs 96 nodes; profile YOUR-CLUSTER allows at most 48" in done.stdout + done.stderr
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "default", "--run", "YOUR-CLUSTER", "--dry-run",
                "profile.nodes=96")
    assert "allows at most" not in done.stdout + done.stderr


def test_seed_profile_ntasks_per_node_describes_the_training_launch(seed_env, tmp_path):
    """The seed's ntasks_per_node = 8 (one task per GPU) is the training launch's count: every Ray stage, typed as the
    seed writes it, is valid and runs one process per node, said in a note; a torchrun stage must still agree."""
    for stage in (["data", "prep", "pretrain"], ["data", "prep", "sft"], ["data", "prep", "rl"], ["rlvr"], ["mopd"]):
        done = _cli(tmp_path, "ultra3", *stage, "-c", "tiny", "--run", "YOUR-CLUSTER", "--dry-run")
        assert config_valid(done.returncode, done.stdout), f"{stage}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
        text = done.stdout + done.stderr
        assert "disagrees with the stage's launch" not in text and "ntasks_per_node=null" not in text, stage
        assert "ntasks_per_node = 8 describes the training launch" in done.stdout and "launch ray" in done.stdout, stage
        assert "#SBATCH --ntasks-per-node=1" in done.stdout, stage
    # pretrain on 4 GPUs a node: torchrun starts 4 processes per node, not the profile's 8
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "YOUR-CLUSTER", "--dry-run",
                "profile.gpus_per_node=4")
    assert done.returncode == 2 and "one process per GPU (4 GPUs per node)" in done.stdout + done.stderr


def test_the_seed_commands_hints_name_commands_that_pass_their_dry_run(seed_env, tmp_path):
    """The seed's pretrain validate command says how to make its missing data: both commands it names (the data
    prep, and the pipe that chains both), run as printed with --dry-run, pass on the seed's profile as written
    (its ntasks_per_node = 8 needs no override for the one-process-per-node data prep)."""
    import shlex

    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "YOUR-CLUSTER", "--dry-run")
    assert done.returncode == 2 and config_valid(done.returncode, done.stdout), done.stderr  # its data is not made
    last = done.stdout.strip().splitlines()[-1]
    made = re.search(r"make it first: nemotron (.*?); or chain both: nemotron (.*?); or set", last)
    assert made, last
    for command in made.groups():
        assert "ntasks_per_node" not in command, command
        again = _cli(tmp_path, *shlex.split(command), "--dry-run")
        assert again.returncode == 0, f"{command}: {again.stdout[-1500:]}{again.stderr[-1500:]}"
    # the pipe's verdict lines: the chain's first, each stage's report led and ended by its own, the chain's last
    verdicts = [ln for ln in again.stdout.splitlines() if ln.startswith("dry run:")]
    assert [v.split(" is valid")[0] for v in verdicts] == [
        "dry run: the chain of 2 stages", *["dry run: stage 1/2 (ultra3 data prep pretrain)"] * 2,
        *["dry run: stage 2/2 (ultra3 pretrain)"] * 2, "dry run: the chain of 2 stages"], verdicts
    # a profile key given to a pipe without its stage: the hint names a stage-prefixed form that works
    bare = _cli(tmp_path, "ultra3", "pipe", "data-prep-pretrain", "pretrain", "-c", "tiny", "--run", "YOUR-CLUSTER",
                "--dry-run", "profile.gpus_per_node=8")
    assert bare.returncode == 2 and "hint: e.g. data-prep-pretrain:profile.gpus_per_node=8 or" in bare.stderr, \
        bare.stderr


@pytest.mark.parametrize("command", [["pretrain"], ["data", "prep", "pretrain"], ["rlvr"]])
def test_slurm_profile_without_account_renders(tmp_path, command):
    (tmp_path / "env.toml").write_text('[c]\nexecutor = "slurm"\npartition = "batch"\ngpus_per_node = 8\n',
                                       encoding="utf-8")
    done = _cli(tmp_path, "ultra3", *command, "-c", "tiny", "--batch", "c", "--dry-run")
    assert config_valid(done.returncode, done.stdout), done.stderr  # 2: inputs not made yet
    assert "#SBATCH --partition=batch" in done.stdout and "--account" not in done.stdout
    assert "TypeError" not in done.stderr


def test_missing_nemo_run_is_one_line_naming_the_install(seed_env, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoNemoRun:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'nemo_run' or name.startswith('nemo_run.'):\n"
        "            raise ImportError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoNemoRun())\n", encoding="utf-8")
    done = _cli(tmp_path, "ultra3", "pretrain", "-c", "tiny", "--run", "YOUR-CLUSTER", "--dry-run",
                pythonpath=f"{shim}{os.pathsep}{ROOT / 'src'}")
    assert done.returncode == 1
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert errors == ["error: NeMo-Run is not importable: No module named 'nemo_run'"], done.stderr
    assert "reinstall the tool" in done.stderr and "Traceback" not in done.stderr and "Recursion" not in done.stderr


def test_profiles_table_hint_carries_the_env_file_given(tmp_path):
    from rich.console import Console

    from nemotron.profiles.load import load_profiles
    from nemotron.profiles.show import profiles_table

    env = tmp_path / "my env.toml"
    env.write_text('[broken]\nexecutor = "slurm"\ngpus_per_node = "eight"\n', encoding="utf-8")
    console = Console(width=400, record=True)
    console.print(profiles_table(load_profiles(env), env_file=str(env)))
    assert f"see: nemotron profiles broken --env-file '{env}'" in console.export_text()
    # and through the command (the table gets the --env-file the user gave)
    done = _cli(tmp_path, "profiles", "--env-file", str(env))
    assert done.returncode == 0, done.stderr
    assert f"see: nemotron profiles broken --env-file '{env}'" in done.stdout


def test_hints_carry_the_env_file_given(tmp_path):
    env = tmp_path / "my env.toml"
    env.write_text('[broken]\nexecutor = "slurm"\ngpus_per_node = "eight"\n', encoding="utf-8")
    done = _cli(tmp_path, "ultra3", "pretrain", "--run", "", "--env-file", str(env), "--dry-run")
    assert done.returncode == 2
    assert f"nemotron profiles --env-file '{env}'" in done.stderr
    done = _cli(tmp_path, "ultra3", "pipe", "pretrain", "--batch", " ", "--env-file", str(env), "--dry-run")
    assert done.returncode == 2 and f"nemotron profiles --env-file '{env}'" in done.stderr
