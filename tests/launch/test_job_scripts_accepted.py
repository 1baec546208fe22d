"""Job scripts that the dry-run calls valid must be ones Slurm and Ray accept: each test renders the script
with ``--dry-run`` and hands it to the real local Slurm (``sbatch --test-only``, or a real submission), or runs
the rendered Ray-on-Slurm template's own shell where the cluster cannot (one node, no pmix)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from config_support import config_valid

from nemotron.cli.main import main

pytest.importorskip("nemo_run", reason="the job script is rendered by NeMo-Run (a base dependency: reinstall nemotron-cli)")


def _profile(tmp_path: Path, slurm, extra: str = "") -> Path:
    path = tmp_path / "env.toml"
    path.write_text(f'[cluster]\nexecutor = "slurm"\naccount = "{slurm.account}"\npartition = "{slurm.partition}"\n'
                    f'gpus_per_node = {slurm.gpus_per_node}\ncontainer = false\ntime = "00:10:00"\njob_dir = "{tmp_path / "jobs"}"\n{extra}',
                    encoding="utf-8")
    return path


def _render(tmp_path: Path, monkeypatch, capsys, env_file: Path, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code = main(["ultra3", *args, "--dry-run", "--batch", "cluster", "--env-file", str(env_file)])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _script(out: str) -> str:
    """The sbatch script of a dry run's output: from its shebang to the line before the next section rule."""
    start = out.index("#!/bin/bash")
    lines = []
    for line in out[start:].splitlines():
        if line.startswith("problems ─") or line.startswith("dry run:"):
            break
        lines.append(line)
    return "\n".join(lines).rstrip() + "\n"


def _test_only(slurm, tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    job = tmp_path / "job.sh"
    job.write_text(script, encoding="utf-8")
    return slurm.run("sbatch", "--test-only", str(job), check=False)


@pytest.mark.parametrize("how", ["toml", "override"])
@pytest.mark.parametrize("stage", [("data", "prep", "rl"), ("pretrain",)], ids=["ray", "torchrun"])
def test_exclusive_false_renders_a_script_sbatch_accepts(slurm, tmp_path, monkeypatch, capsys, how, stage):
    env_file = _profile(tmp_path, slurm, "exclusive = false\n" if how == "toml" else "exclusive = true\n")
    args = [*stage, "-c", "tiny"] + (["profile.exclusive=false"] if how == "override" else [])
    code, out, err = _render(tmp_path, monkeypatch, capsys, env_file, *args)
    assert config_valid(code, out), err + out[-2000:]  # pretrain: exit 2, its data is not made in this home
    script = _script(out)
    assert "--exclusive" not in script
    done = _test_only(slurm, tmp_path, script)
    assert done.returncode == 0, done.stderr
    # and `exclusive = true` is the bare flag, which sbatch takes too
    code, out, err = _render(tmp_path, monkeypatch, capsys, _profile(tmp_path, slurm, "exclusive = true\n"), *stage, "-c", "tiny")
    assert config_valid(code, out) and "#SBATCH --exclusive\n" in _script(out)
    done = _test_only(slurm, tmp_path, _script(out))
    assert done.returncode == 0, done.stderr


_DRIVER = 'import os, ray; ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR"); print("nodes joined:", len(ray.nodes()), flush=True)'


def _ray_script(tmp_path, monkeypatch, capsys, slurm, extra: str = "", container: bool = False) -> str:
    env_file = _profile(tmp_path, slurm, extra)
    if container:
        env_file.write_text(env_file.read_text().replace("container = false", "container = true"), encoding="utf-8")
    code, out, err = _render(tmp_path, monkeypatch, capsys, env_file, "data", "prep", "rl", "-c", "tiny")
    assert code == 0, err + out[-2000:]
    return _script(out)


@pytest.mark.parametrize("container", [False, True], ids=["host", "container"])
def test_ray_steps_take_the_profiles_mpi_default_none(slurm, tmp_path, monkeypatch, capsys, container):
    script = _ray_script(tmp_path, monkeypatch, capsys, slurm, container=container)
    assert "--mpi=pmix" not in script
    assert "export NEMOTRON_RAY_SRUN_MPI=none" in script
    sruns = [ln for ln in script.splitlines() if ln.lstrip().startswith("srun ")]
    assert len(sruns) == 3 and all('"$srun_mpi"' in ln for ln in sruns), sruns  # head, workers, on_head
    script = _ray_script(tmp_path, monkeypatch, capsys, slurm, 'ray_srun_mpi = "pmix"\n', container=container)
    assert "export NEMOTRON_RAY_SRUN_MPI=pmix" in script


def test_ray_srun_mpi_is_checked_when_the_profile_loads(slurm, tmp_path, monkeypatch, capsys):
    code, out, err = _render(tmp_path, monkeypatch, capsys, _profile(tmp_path, slurm, 'ray_srun_mpi = "pmix --x"\n'),
                             "data", "prep", "rl", "-c", "tiny")
    assert code == 2 and "ray_srun_mpi" in err, err


def _submit(slurm, tmp_path: Path, script: str, name: str, code: str = _DRIVER) -> tuple[str, str]:
    """Submit ``script`` (a rendered Ray job) with its driver replaced by the Python ``code``; returns the job's
    final state and its batch output followed by its Ray logs."""
    driver = tmp_path / "driver.py"
    driver.write_text(code + "\n", encoding="utf-8")
    script, n = re.subn(r'^driver=".*"$', f'driver="{sys.executable} {driver}"', script, flags=re.M)
    assert n == 1
    job_sh = tmp_path / f"{name}.sh"
    job_sh.write_text(script, encoding="utf-8")
    out = slurm.run("sbatch", "--parsable", "-o", str(tmp_path / f"{name}-%j.out"), str(job_sh)).stdout
    job = out.strip().split(";")[0]
    try:
        state = slurm.wait(job, timeout=240)
    finally:
        slurm.run("scancel", job, check=False)
    log_dir = Path(re.search(r"^export LOG_DIR=(.*)$", script, re.M).group(1).strip("'\""))
    text = (tmp_path / f"{name}-{job}.out").read_text(errors="replace")
    text += "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("*.log")))
    return state, text


def test_ray_job_without_pmix_runs_on_the_local_slurm(slurm, tmp_path, monkeypatch, capsys):
    """The local Slurm has no PMIx (as many clusters): the default (none) starts the Ray cluster and the driver joins
    it; the profile's ray_srun_mpi = "pmix" reaches every step, and the cluster refuses it, in seconds."""
    state, text = _submit(slurm, tmp_path, _ray_script(tmp_path, monkeypatch, capsys, slurm), "none")
    assert state == "COMPLETED" and "nodes joined: 1" in text, text[-3000:]
    state, text = _submit(slurm, tmp_path, _ray_script(tmp_path, monkeypatch, capsys, slurm, 'ray_srun_mpi = "pmix"\n'),
                          "pmix")
    assert state == "FAILED" and "a ray start step ended before the cluster was up" in text, text[-3000:]


def test_ray_head_on_loopback_with_several_nodes_fails_fast(slurm, tmp_path, monkeypatch, capsys):
    """A head whose name resolves to 127.x (here: `localhost`, on a node whose network has nothing but loopback, a
    network namespace of its own) cannot be joined from another node: the job script says so in one line and ends
    in seconds, before any `ray start`."""
    if subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("unshare -n (a network namespace of our own) needs root")
    script = _ray_script(tmp_path, monkeypatch, capsys, slurm)
    job_sh = tmp_path / "job.sh"
    job_sh.write_text(script, encoding="utf-8")
    env = {**slurm.env, "SLURM_JOB_NODELIST": "localhost,localhost", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "1"}
    done = subprocess.run(["unshare", "-n", "bash", str(job_sh)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("[nemotron]")]
    assert len(errors) == 1 and "is loopback" in errors[0] and "RAY_HEAD_IP" in errors[0], done.stderr[-2000:]
    assert "starting the Ray head" not in done.stdout
    # one node on loopback is a whole cluster: the guard lets it through (it fails later, here, at srun)
    env.update(SLURM_JOB_NODELIST="localhost", SLURM_JOB_NUM_NODES="1")
    done = subprocess.run(["unshare", "-n", "timeout", "20", "bash", str(job_sh)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert "is loopback" not in done.stderr and "starting the Ray head" in done.stdout, done.stderr[-2000:]


_ENV_DRIVER = 'import os; print("\\n".join(f"env {k}={os.environ.get(k)}" for k in ("PATH", "PYTHONPATH", "FOO")), flush=True)'


def test_every_profile_env_var_reaches_the_job(slurm, tmp_path, monkeypatch, capsys):
    """PATH and PYTHONPATH of a profile's env_vars reach the job (after the host Python's folder and the code
    snapshot, which the job needs first), like any other variable, on the real local Slurm."""
    tools = tmp_path / "tools-bin"
    extra = f'env_vars = {{ PATH = "{tools}:$PATH", PYTHONPATH = "{tmp_path / "pylib"}", FOO = "bar" }}\n'
    state, text = _submit(slurm, tmp_path, _ray_script(tmp_path, monkeypatch, capsys, slurm, extra), "env", _ENV_DRIVER)
    assert state == "COMPLETED", text[-3000:]
    env = dict(line.split(" ", 1)[1].split("=", 1) for line in text.splitlines() if line.startswith("env "))
    path = env["PATH"].split(":")
    assert path[0] == str(Path(sys.executable).parent) and path[1] == str(tools) and "/usr/bin" in path, env["PATH"]
    assert env["PYTHONPATH"].endswith(f"/code:{tmp_path / 'pylib'}"), env["PYTHONPATH"]
    assert env["FOO"] == "bar"


@pytest.mark.parametrize("name", ["NEMOTRON_RUN_DIR", "NEMOTRON_EXPERIMENT_ID", "RAY_ADDRESS", "LOG_DIR"])
def test_env_vars_the_job_sets_itself_are_refused_by_name(slurm, tmp_path, monkeypatch, capsys, name):
    env_file = _profile(tmp_path, slurm, f'env_vars = {{ {name} = "x" }}\n')
    code, out, err = _render(tmp_path, monkeypatch, capsys, env_file, "data", "prep", "rl", "-c", "tiny")
    assert code == 2 and f"{name}: cannot be set in a profile" in err and "env.toml" in err, err


def test_path_with_path_not_last_is_refused(slurm, tmp_path, monkeypatch, capsys):
    env_file = _profile(tmp_path, slurm, 'env_vars = { PATH = "$PATH:/opt/x" }\n')
    code, out, err = _render(tmp_path, monkeypatch, capsys, env_file, "data", "prep", "rl", "-c", "tiny")
    assert code == 2 and "$PATH may only be its last entry" in err, err


def test_long_config_file_name_stays_within_os_limits(slurm, tmp_path, monkeypatch, capsys):
    """A config file named with 240 characters (a file system takes 255): the names derived from it (experiment id,
    job name, NeMo-Run's log file) are cut to fit, the Slurm dry-run is valid and sbatch takes its script, and the
    run folder of a run on this machine can be made; two long names that share their beginning stay distinct."""
    from nemotron.config.paths import stages_dir

    source = (stages_dir() / "ultra3" / "data_prep_rl" / "tiny.yaml").read_text(encoding="utf-8")
    configs = []
    for tail in "ab":
        path = tmp_path / ("x" * 239 + tail + ".yaml")
        path.write_text(source, encoding="utf-8")
        configs.append(path)
    names = []
    for config in configs:
        code, out, err = _render(tmp_path, monkeypatch, capsys, _profile(tmp_path, slurm), "data", "prep", "rl",
                                 "-c", str(config))
        assert code == 0 and "OSError" not in out + err, err + out[-2000:]
        script = _script(out)
        name = re.search(r"^#SBATCH --job-name=(\S+)$", script, re.M).group(1)
        output = re.search(r"^#SBATCH --output=(\S+)$", script, re.M).group(1)
        assert all(len(part) <= 255 for part in output.split("/")), output
        names.append(name)
        done = _test_only(slurm, tmp_path, script)
        assert done.returncode == 0, done.stderr
    assert names[0] != names[1] and all(len(n) < 80 for n in names), names
    # without a profile: the run folder the dry run names can be made on this file system
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    code = main(["ultra3", "data", "prep", "rl", "-c", str(configs[0]), "--dry-run"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    run_dir = Path(re.search(r"^# in (\S+) \(the run writes", cap.out, re.M).group(1))
    run_dir.mkdir(parents=True)
    assert run_dir.is_dir()


def test_kit_build_without_profile_stage_or_image_cache(slurm, tmp_path):
    """`nemotron kit slurm build` as the seed writes it, in a folder whose env.toml has one Slurm profile (no
    image_cache): the dry run shows one build per image into <job_dir>/images; submitted on the real local Slurm,
    the first build job reaches the node and ends FAILED with its one line (no podman here), leaving no image."""
    from submit_support import nemotron_runner

    _profile(tmp_path, slurm)
    cli = nemotron_runner({**slurm.env, "NEMOTRON_HOME": str(tmp_path / "home")}, tmp_path)
    dry = cli("kit", "slurm", "build", "--dry-run")
    assert dry.returncode == 0, dry.stderr[-2000:]
    images = re.findall(r"^squashfs: (\S+)$", dry.stdout, re.M)
    assert len(images) == 3 and all(Path(p).parent == tmp_path / "jobs" / "images" for p in images), images
    proc = cli("kit", "slurm", "build", timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "is not installed" in proc.stderr and "ended FAILED" in proc.stderr
    assert not list((tmp_path / "jobs" / "images").glob("*.sqsh"))
    # two Slurm profiles: the command names them instead of guessing
    env_file = tmp_path / "env.toml"
    env_file.write_text(env_file.read_text() + '\n[other]\nextends = "cluster"\n', encoding="utf-8")
    two = cli("kit", "slurm", "build", "--dry-run")
    assert two.returncode == 2 and "2 Slurm profiles (cluster, other)" in two.stderr, two.stderr
