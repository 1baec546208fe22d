"""Every ``nemotron ...`` command of the two seed documents (``../shared/seeds``), run as written.

The seeds are the documents this project was started from: NVIDIA's "Nemotron 3 Ultra Training Recipe" page
(the ``nemotron ultra3`` commands and an example ``env.toml`` profile) and the miles launch recipe for the same
model (its commands are miles' own launcher and ``ray``/``hf``, none of them ours; its layouts are checked
through our stages below). Each command is extracted from the seed text, ``uv run`` dropped (the install is
tested in tests/test_install.py), ``--dry-run`` added where it would submit, train or tokenize a full dataset,
and run with the real CLI in a temporary folder holding the seed's profile as ``env.toml``. It must exit 0, or
exit 2 with a one-line ``error:`` that says what to change and a ``hint:`` — never a traceback. The commands
expected to be refused are listed in :data:`REFUSED`, with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT.parent / "shared" / "seeds"
RECIPE = SEEDS / "001_318e44702299bc5d.txt"  # NVIDIA's Nemotron 3 Ultra recipe page
MILES = SEEDS / "000_d1477b7aa9563c42.txt"  # the miles launch recipe

pytestmark = pytest.mark.skipif(not RECIPE.is_file() or not MILES.is_file(),
                                reason=f"the seed documents are not in {SEEDS} (see the project README)")

#: Commands the seeds show that are expected to be refused (exit 2), and why: the refusal must say so.
#: command as run -> (a phrase the error or hint must contain, why it is right to refuse)
REFUSED: dict[str, tuple[str, str]] = {}

#: Commands the seed implies beside the ones it prints: the image build for one stage, on its profile as written
#: (no image_cache: the default under the profile's job_dir).
IMPLIED = ["nemotron kit slurm build YOUR-CLUSTER --stage pretrain --dry-run"]

#: The miles recipe's layouts, typed into our stages (its own commands run miles' launcher, not this tool).
MILES_EQUIVALENTS = {
    # 4.1 single-node smoke test: the 4-layer slice, TP1 PP1 EP8 on one 8-GPU node
    "nemotron ultra3 rlvr -c tiny --run YOUR-CLUSTER --dry-run": "4-layer slice on one node (section 4.1, 5.1)",
}


def seed_profile() -> str:
    """The example ``env.toml`` profile of the recipe page, as printed there."""
    m = re.search(r"```toml\n(.*?)```", RECIPE.read_text(encoding="utf-8"), re.S)
    assert m, f"no toml block in {RECIPE.name}"
    return m.group(1)


def seed_commands(path: Path) -> list[str]:
    """Every ``nemotron ...`` command line of a seed: code-block lines and inline code, ``uv run`` dropped."""
    text = path.read_text(encoding="utf-8")
    found: list[str] = []
    for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip().removeprefix("uv run ")
            if line.startswith("nemotron "):
                found.append(line)
    for m in re.finditer(r"`((?:uv run )?nemotron [^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
        found.append(m.group(1).removeprefix("uv run "))
    return list(dict.fromkeys(found))


def as_run(command: str) -> str:
    """The command as the test runs it: ``--dry-run`` added to a stage command that would submit, train or
    tokenize (the seed's data prep commands name the full open mixture, hundreds of GB from the Hub)."""
    argv = command.split()
    stage_command = len(argv) > 2 and argv[1] == "ultra3" and argv[2] not in ("status", "logs", "cancel", "list")
    build = argv[1:4] == ["kit", "slurm", "build"]  # submits build jobs
    if (stage_command or build) and "--dry-run" not in argv:
        argv.append("--dry-run")
    return " ".join(argv)


def test_the_seeds_name_the_commands_we_expect():
    """The extraction itself: the recipe page's two validate commands, its two data prep commands and the image
    build tool; the miles page has no command of this tool (its launcher is ``python scripts/run_...py``)."""
    assert seed_commands(RECIPE) == [
        "nemotron ultra3 pretrain -c tiny --run YOUR-CLUSTER --dry-run",
        "nemotron ultra3 sft -c tiny --run YOUR-CLUSTER --dry-run",
        "nemotron kit slurm build",
        "nemotron ultra3 data prep pretrain",
        "nemotron ultra3 data prep sft",
    ]
    assert seed_commands(MILES) == []
    assert "nodes = 48" in seed_profile() and "ntasks_per_node = 8" in seed_profile()


@pytest.fixture
def seed_folder(tmp_path: Path) -> Path:
    (tmp_path / "env.toml").write_text(seed_profile(), encoding="utf-8")
    return tmp_path


def run(command: str, folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEMOTRON_HOME": str(folder / "home"), "NO_COLOR": "1"}
    env.pop("NEMOTRON_ENV_FILE", None)
    argv = command.split()[1:]
    return subprocess.run([sys.executable, "-m", "nemotron", *argv], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=600)


def check(command: str, proc: subprocess.CompletedProcess) -> None:
    """Exit 0 (or, for a dry run whose inputs no run has made yet, exit 2 with the verdict that the config is valid
    but the run would refuse to start: the dry run refuses what the run refuses), or exit 2 with one ``error:`` line
    and a ``hint:`` line (no traceback), as :data:`REFUSED` says."""
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, f"{command}: traceback\n{text[-3000:]}"
    if command not in REFUSED:
        first = proc.stdout.splitlines()[0] if proc.stdout else ""
        inputs_missing = first.startswith("dry run: the config is valid") and "but the run would refuse" in first
        assert proc.returncode == (2 if inputs_missing else 0), f"{command}: exit {proc.returncode}\n{text[-3000:]}"
        return
    phrase, why = REFUSED[command]
    assert proc.returncode == 2, f"{command} ({why}): exit {proc.returncode}\n{text[-3000:]}"
    # a dry run lists its problems in its report (stdout), the verdict and hint on stderr
    lines = [line for line in text.splitlines() if line.startswith(("error: ", "hint: "))]
    assert any(phrase in line for line in lines if line.startswith("error: ")), \
        f"{command}: expected an error line with {phrase!r} ({why})\n{text[-3000:]}"
    assert proc.stderr.rstrip().splitlines()[-1].startswith("hint: "), f"{command}: no hint\n{proc.stderr}"


SEED_RUNS = [as_run(c) for c in seed_commands(RECIPE)] if RECIPE.is_file() else []
SEED_RUNS += [c for c in [*REFUSED, *IMPLIED] if c not in SEED_RUNS and c not in MILES_EQUIVALENTS]


@pytest.mark.parametrize("command", SEED_RUNS)
def test_seed_command(command, seed_folder):
    check(command, run(command, seed_folder))


@pytest.mark.parametrize("command", list(MILES_EQUIVALENTS), ids=list(MILES_EQUIVALENTS.values()))
def test_miles_layout_through_our_stage(command, seed_folder):
    check(command, run(command, seed_folder))


def test_the_seed_validate_command_says_what_the_run_needs(seed_folder):
    """On a fresh folder the seed's pretrain validate command finds the config valid, and its last line says what
    the run still needs (the data prep artifact) and the command that makes it; it exits 2, as the run would."""
    proc = run("nemotron ultra3 pretrain -c tiny --run YOUR-CLUSTER --dry-run", seed_folder)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stdout.rstrip().splitlines()[-1]
    assert "the run would refuse to start" in last and "nemotron ultra3 data prep pretrain -c tiny" in last, last


def test_the_seed_build_command_builds_every_image(seed_folder):
    """`nemotron kit slurm build`, as the seed writes it: the env.toml's only Slurm profile, every image the stages
    use, into the default image_cache under the profile's job_dir."""
    proc = run(as_run("nemotron kit slurm build"), seed_folder)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "profile: YOUR-CLUSTER (the only Slurm profile" in proc.stdout
    images = re.findall(r"^squashfs: (\S+)$", proc.stdout, re.M)
    assert [Path(p).name for p in images] == ["data-2.52.0-py311-cpu.sqsh", "nemo-26.04.01.sqsh", "nemo-rl-main-ultra.sqsh"]
    assert all(Path(p).parent == seed_folder / "home" / "jobs" / "images" for p in images), images


def miles_launcher_commands() -> list[str]:
    """The miles page's own launch lines (``python scripts/run_nemotron_3_ultra_550b_a55b.py ...``), as written."""
    text = MILES.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(line.split())
            if line.startswith("python scripts/run_nemotron_3_ultra_550b_a55b.py"):
                found.append(line)
    return found


def test_the_miles_launcher_lines_name_the_nemotron_command_of_the_same_run(tmp_path):
    """Typed here as the miles page writes them (from the checkout's root, its ``cd`` aside), miles' launcher lines
    answer with one error line, the reasons, and a hint that is the nemotron command of the same run (a command
    of :data:`MILES_EQUIVALENTS`, which passes its dry run on the seed profile); exit 2, nothing started."""
    lines = miles_launcher_commands()
    assert [line.split()[2] for line in lines] == ["full-train", "train"], lines
    for line in lines:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MILES_SCRIPT_EXTERNAL_RAY")}
        if " train " in f"{line} ":
            env.update(MILES_SCRIPT_EXTERNAL_RAY="1", RAY_ADDRESS="http://10.0.0.1:8265")  # section 4.2's exports
        proc = subprocess.run([sys.executable, *line.split()[1:]], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (line, proc.returncode, proc.stderr)
        err = proc.stderr.splitlines()
        assert err[0].startswith("error: this is miles' launcher command"), proc.stderr
        hint = err[-1].removeprefix("hint: ")
        expected = "nemotron ultra3 rlvr -c tiny --run YOUR-CLUSTER --dry-run" if "4layer" in line else \
            "nemotron ultra3 rlvr -c default --run YOUR-CLUSTER --dry-run"
        assert hint == expected, proc.stderr
        if "4layer" in line:
            assert hint in MILES_EQUIVALENTS
        else:
            assert any('executor = "ray"' in x for x in err), proc.stderr  # the external Ray cluster of section 4.2
