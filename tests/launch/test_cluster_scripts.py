"""Every job script the tool renders (NeMo-Run's sbatch script of each stage kind, the Ray-on-Slurm template,
the local executor's command line, the command of a run here) is valid bash with hostile profile values, and
each ``env_vars`` value read back by bash is the value written in env.toml (NeMo-Run writes
``export KEY=value`` unquoted and upper-cases names; the tool quotes and exports them itself)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nemotron.launch import backends
from nemotron.errors import ConfigError
from nemotron.cli.pipeline import StageRequest, prepare_stage
from nemotron.config.registry import STAGES

pytest.importorskip("nemo_run", reason="the sbatch scripts are rendered by NeMo-Run")

HOSTILE = {
    "SPACES": "a b  c",
    "QUOTES": "it's \"quoted\"",
    "DOLLAR": "$HOME and $$ and ${app_id} and $(id)",
    "TICKS": "`id` ;rm -rf /tmp/x; echo",
    "NEWLINE": "line1\nline2\n",
    "BACKSLASH": "C:\\dir\\ end\\",
    "http_proxy": "http://proxy.example:3128",
}


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _env_file(tmp_path: Path) -> Path:
    env_vars = "\n".join(f"{k} = {_toml_string(v)}" for k, v in HOSTILE.items())
    path = tmp_path / "env.toml"
    path.write_text(f"""
[hostile]
executor = "slurm"
account = "acct"
partition = "batch"
gpus_per_node = 8
gpu = "H100"
job_dir = "{tmp_path}/my jobs"
mounts = ["/data:/data"]
[hostile.env_vars]
{env_vars}

[hostile-host]
extends = "hostile"
container = false

[hostile-local]
executor = "local"
gpus_per_node = 0
job_dir = "{tmp_path}/local jobs"
[hostile-local.env_vars]
{env_vars}
""", encoding="utf-8")
    return path


def _render(stage, profile: str | None, env_file: Path) -> str:
    req = StageRequest(stage=stage, config="tiny", overrides=(), mode="batch" if profile else "here", profile=profile,
                       dry_run=True, env_file=str(env_file))
    p = prepare_stage(req)
    return backends.render(req, p.compiled, p.profile, p.plan)


def _bash_n(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _read_back(block: str, names: list[str]) -> list[str]:
    """Run ``block`` (export lines) in bash and return the values of ``names``, NUL-separated as bash has them."""
    script = block + "\nprintf '%s\\0' " + " ".join(f'"${{{n}}}"' for n in names)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return done.stdout.split("\0")[:-1]


def _exports(script: str) -> str:
    """The export statements of the hostile variables in ``script`` (values may span lines)."""
    lines = script.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("export SPACES="))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("export PYTHONPATH="))
    lower = [ln for ln in lines if ln.startswith("export http_proxy=")]
    assert not any(ln.startswith("export HTTP_PROXY=") for ln in lines), "a lower-case name was upper-cased"
    return "\n".join(lines[start:end] + lower)


@pytest.mark.parametrize("profile", ["hostile", "hostile-host"])
@pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])
def test_sbatch_script_is_bash_and_round_trips_env_vars(stage, profile, tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    text = _render(stage, profile, _env_file(tmp_path))
    script = text.split("# SBATCH_SCRIPT\n#----------------\n", 1)[1]
    _bash_n(script)
    assert _read_back(_exports(script), list(HOSTILE)) == list(HOSTILE.values())
    assert "my jobs" not in script, "the job root with a space reached the script (it is reached by a safe symlink)"


def test_local_executor_command_is_bash_and_round_trips_env_vars(tmp_path, monkeypatch):
    from nemotron.launch import submit

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    stage = next(s for s in STAGES if s.name == "data-prep-pretrain")
    text = _render(stage, "hostile-local", _env_file(tmp_path))
    _bash_n(text)
    line = text.rstrip("\n").split("\n# logs: ", 1)[1].split("\n", 1)[1]
    req = StageRequest(stage=stage, config="tiny", overrides=(), mode="batch", profile="hostile-local", dry_run=True,
                       env_file=str(tmp_path / "env.toml"))
    p = prepare_stage(req)
    entry = submit.task_spec(p.plan, p.profile)["entrypoint"]
    prefix = line.rsplit(f" {entry} ", 1)[0]
    values = _read_back(f"export {prefix}", list(HOSTILE))
    assert values == list(HOSTILE.values())


def test_command_of_a_run_here_is_bash(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    stage = next(s for s in STAGES if s.name == "data-prep-pretrain")
    text = _render(stage, None, _env_file(tmp_path))
    _bash_n(text)
    assert "a dry run writes nothing" in text and "are written there" not in text


@pytest.mark.parametrize("mount, says", [
    ("/my data:/data", "a space"),
    ("/data,x:/data", "','"),
    ("/data:/da$ta", "'$'"),
    ("data", "a mount is 'SRC:/DST'"),
])
def test_mount_that_would_split_the_srun_line_is_refused_with_the_reason(tmp_path, mount, says):
    from nemotron.profiles.load import load_profiles

    path = tmp_path / "env.toml"
    path.write_text(f'[c]\nexecutor = "slurm"\nmounts = [{_toml_string(mount)}]\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_profiles(path).get("c")
    assert says in info.value.message and "mounts" in info.value.message
    if says != "a mount is 'SRC:/DST'":
        assert "unquoted" in info.value.message  # the reason, not the shape rule


def test_image_path_with_a_space_is_refused(tmp_path):
    from nemotron.profiles.load import load_profiles

    path = tmp_path / "env.toml"
    path.write_text('[c]\nexecutor = "slurm"\n[c.images]\nnemo = "/my images/nemo.sqsh"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="a space.*unquoted"):
        load_profiles(path).get("c")


#: Storage roots a job mounts (and exports) with every character a shell line would split or expand.
HOSTILE_ROOTS = {"data_root": "/data2/my project/da$ta `echo INJECTED`", "checkpoint_root": "/ck pt/$(echo INJECTED)",
                 "hf_home": "/hf home/cache's"}


def _srun_lines(script: str) -> list[str]:
    """Each ``srun`` command of ``script`` with ``--container-mounts``, its continuation lines joined, without a
    trailing ``&``."""
    out, lines = [], script.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("srun "):
            j, text = i, line
            while text.endswith("\\"):
                j += 1
                text = text[:-1] + lines[j]
            if "--container-mounts" in text:
                out.append(text.strip().removesuffix("&").strip())
    return out


@pytest.mark.parametrize("stage_name", ["pretrain", "data-prep-rl"])
def test_storage_roots_with_shell_characters_reach_the_mounts_as_written(stage_name, tmp_path, monkeypatch):
    """data_root / checkpoint_root / hf_home with a space, ``$``, a backquote, ``$(...)`` or a quote: each srun line of
    the rendered job script, run by bash with a stub ``srun`` that prints its arguments, gives pyxis each root as
    ``PATH:PATH`` exactly, splits nowhere and executes nothing (NeMo-Run writes the mount list unquoted: these went
    into it as shell words, and the backquote ran). The Ray template (data-prep-rl) and NeMo-Run's sbatch (pretrain)."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    roots = "\n".join(f"{k} = {_toml_string(v)}" for k, v in HOSTILE_ROOTS.items())
    path = tmp_path / "env.toml"
    path.write_text(f'[c]\nexecutor = "slurm"\naccount = "a"\npartition = "p"\ngpus_per_node = 8\n'
                    f'job_dir = "{tmp_path}/jobs"\nmounts = ["/data:/data"]\n{roots}\n', encoding="utf-8")
    stage = next(s for s in STAGES if s.name == stage_name)
    text = _render(stage, "c", path)
    lines = _srun_lines(text)
    assert lines, "no srun line with container mounts"
    for line in lines:
        stub = "srun() { printf 'ARG[%s]\\n' \"$@\"; }\n" + line + "\n"
        done = subprocess.run(["bash", "-c", stub], capture_output=True, text=True, check=True)
        args = [a.removeprefix("ARG[") for a in done.stdout.split("]\n")[:-1]]
        assert "INJECTED" not in done.stdout.replace("echo INJECTED", ""), done.stdout  # nothing ran
        mounts = args[args.index("--container-mounts") + 1].split(",")
        for value in HOSTILE_ROOTS.values():
            assert f"{value}:{value}" in mounts, (value, mounts)
    assert "export NEMOTRON_DATA_DIR='/data2/my project/da$ta `echo INJECTED`'" in text


@pytest.mark.parametrize("key, value, says", [
    ("data_root", "/lustre/a:b", "':'"),
    ("checkpoint_root", "/lustre/a,b", "','"),
    ("data_root", "~/data", "starts with '~'"),
    ("hf_home", "$SCRATCH/hf", "starts with a shell variable"),
    ("index_cache_dir", "/lustre/a\nb", "a newline"),
    ("data_root", "relative/data", "a relative path"),
    ("image_cache", "/my images", "a space"),
])
def test_storage_root_that_cannot_be_mounted_is_refused_by_key(tmp_path, key, value, says):
    """A storage root becomes a container mount 'PATH:PATH' (pyxis: SRC:DST[:FLAGS], the list split at commas) and a
    quoted export: ':' ',' and control characters cannot be mounted, a leading '~' / '$VAR' would never be expanded;
    image_cache also reaches the unquoted --container-image. One line each, naming the key and the value."""
    from nemotron.profiles.load import load_profiles

    path = tmp_path / "env.toml"
    path.write_text(f'[c]\nexecutor = "slurm"\n{key} = {_toml_string(value)}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_profiles(path).get("c")
    assert f"{key}: {value!r}: " in info.value.message and says in info.value.message, info.value.message


def test_storage_root_with_a_space_is_refused_for_a_container_job_naming_the_key(tmp_path, monkeypatch):
    """pyxis gives each container mount to enroot as a whitespace-separated 'SRC DST FLAGS' entry, so a data_root /
    checkpoint_root with a space (mounted at its own path: only job_dir gets a space-free alias) would fail at the
    job's start: the dry run refuses it, one error per key naming the profile, its file and a symlink to use. A root
    that a space-free `mounts` entry covers is not mounted on its own, and is not refused."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    jobs = tmp_path / "my jobs"
    path = tmp_path / "env dir" / "my env.toml"
    path.parent.mkdir()
    path.write_text(f'["my cluster"]\nexecutor = "slurm"\naccount = "a"\npartition = "p"\ngpus_per_node = 8\n'
                    f'job_dir = "{jobs}"\ndata_root = "{jobs}/data"\ncheckpoint_root = "{jobs}/ckpt"\n',
                    encoding="utf-8")
    stage = next(s for s in STAGES if s.name == "pretrain")
    req = StageRequest(stage=stage, config="tiny", overrides=(), mode="batch", profile="my cluster", dry_run=True,
                       env_file=str(path))
    found = [p for p in prepare_stage(req).problems if p.rule == "container-mount-space"]
    assert [(p.key, p.value) for p in found] == [("profile.my cluster.data_root", f"{jobs}/data"),
                                                 ("profile.my cluster.checkpoint_root", f"{jobs}/ckpt")], found
    assert found[0].render() == (
        f"profile.my cluster.data_root='{jobs}/data': contains whitespace ({path}); the job mounts it into its "
        "container and pyxis gives each mount to enroot as one whitespace-separated 'SRC DST FLAGS' entry, so the "
        "job would fail at start (job_dir gets a space-free alias; data_root cannot: the stage's paths name it as "
        f"written); valid: a path without whitespace, e.g. a symlink to it: ln -s '{jobs}/data' "
        f"{tmp_path}/my-jobs-data, then data_root = \"{tmp_path}/my-jobs-data\" in [my cluster]")
    # covered by a mount without spaces (the mount's path is what the container gets): nothing to refuse
    path.write_text(path.read_text() + f'mounts = ["{tmp_path}:{tmp_path}"]\n', encoding="utf-8")
    assert not [p for p in prepare_stage(req).problems if p.rule == "container-mount-space"]
