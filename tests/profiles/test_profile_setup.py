"""A profile's ``setup`` lines go verbatim into the job script: a line bash cannot parse is refused when the profile
loads (dry run and run alike), naming the file, line and ``setup[i]``; valid lines render into a script that
``bash -n`` accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROFILE = """[c]
executor = "slurm"
account = "a"
partition = "p"
job_dir = "/lustre/jobs"
setup = [{lines}]
"""


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NEMOTRON_ENV_FILE"}
    env.update(NEMOTRON_HOME=str(tmp_path / "home"), COLUMNS="300")
    return subprocess.run([sys.executable, "-m", "nemotron", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("line", ["echo \\\"hi $USER\\\" it's", "if true; then echo x", "echo $(date"])
def test_a_setup_line_bash_cannot_parse_is_refused_naming_it(tmp_path, line):
    env = tmp_path / "env.toml"
    env.write_text(PROFILE.format(lines=f'"module load x", "{line}"'), encoding="utf-8")
    for extra in (["--dry-run"], []):
        done = _cli(tmp_path, "ultra3", "data", "prep", "rl", "-c", "tiny", "--batch", "c", "--env-file", str(env),
                    *extra)
        assert done.returncode == 2, done.stdout + done.stderr
        first = done.stderr.strip().splitlines()[0]
        assert first.startswith(f"error: {env}:6: profile 'c': setup[1]: is not a bash command line"), first
        assert "Traceback" not in done.stderr


def test_valid_setup_lines_render_into_a_script_bash_accepts(tmp_path, monkeypatch):
    pytest.importorskip("nemo_run", reason="the job script is rendered by NeMo-Run")
    from nemotron.launch import backends
    from nemotron.cli.pipeline import StageRequest, prepare_stage
    from nemotron.config.registry import get_stage

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    env = tmp_path / "env.toml"
    env.write_text(PROFILE.format(lines='"module load x", "export A=\\"b c\\"", "cd /lustre && ls"'),
                   encoding="utf-8")
    req = StageRequest(stage=get_stage("data-prep-rl"), config="tiny", overrides=(), mode="batch", profile="c",
                       dry_run=True, env_file=str(env))
    p = prepare_stage(req)
    script = backends.render(req, p.compiled, p.profile, p.plan)
    assert 'export A="b c"' in script
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
