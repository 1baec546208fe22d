"""An installed (non-editable) copy finds its stage definitions."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_carries_stages_and_runs(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("nemotron_cli-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "nemotron/_stages/images.toml" in names
    assert "nemotron/_stages/ultra3/pretrain/default.yaml" in names
    assert "nemotron/_stages/ultra3/data_prep_pretrain/run.py" in names
    assert "nemotron/templates/ray_slurm.sub.j2" in names  # the job script of Ray stages on Slurm
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    env = {**os.environ, "PYTHONPATH": str(target), "NEMOTRON_HOME": str(tmp_path / "home")}
    code = ("import nemotron.config.paths as p, sys; from nemotron.cli.main import main; "
            "print(p.stages_dir()); sys.exit(main(['ultra3', 'data', 'prep', 'pretrain', '-c', 'tiny', '--dry-run']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0] == str(target / "nemotron" / "_stages")
    assert "dry run: valid" in proc.stdout


# ---------------------------------------------------------------------------------------------------------------
# Fresh installs: `pip install .` and `uv run` from a copy of the checkout give a tool that runs every command its
# install promises (submission and data prep in the base install; local training and quantization say in one
# line that they need the `local` extra). The base install must not need torch.

import json  # noqa: E402
import shutil  # noqa: E402

import pytest  # noqa: E402


def _fresh_copy(dst: Path) -> Path:
    """The checkout as a fresh clone would have it plus the uncommitted work: tracked and untracked files that git
    does not ignore (no .venv, no build outputs, no lock that is not in the repository)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot list the checkout's files")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.decode()[-300:]}")
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


def _user_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "NEMOTRON_ENV_FILE", "CONDA_PREFIX")}
    env.update(NEMOTRON_HOME=str(tmp_path / "home"), NEMOTRON_DATA_DIR=str(tmp_path / "data"), COLUMNS="200",
               **extra)
    return env


def _one_line_needs_local(proc: subprocess.CompletedProcess) -> None:
    """A local training/quantization run without the `local` extra: refused before it starts, as its dry run
    refuses it (rule local-modules, exit 2), in one line naming the modules and the extra."""
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    said = [ln for ln in text.splitlines() if "nemotron-cli[local]" in ln]
    assert len(said) == 1 and "the local backend needs" in said[0] and "not importable here" in said[0], text[-3000:]


def _check_promised_commands(nemotron: list[str], cwd: Path, env: dict[str, str], tmp_path: Path) -> None:
    """The commands an install promises, run as a user types them (``nemotron`` is the argv prefix)."""
    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*nemotron, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    proc = run("ultra3", "list")
    assert proc.returncode == 0 and "data prep pretrain" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = run("ultra3", "data", "prep", "pretrain", "-c", "tiny", "--dry-run")
    assert proc.returncode == 0 and "dry run: valid" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    # submission: NeMo-Run renders the sbatch script of the README's cluster profile
    shutil.copy(cwd / "env.toml.example", cwd / "env.toml")
    proc = run("ultra3", "pretrain", "-c", "tiny", "--dry-run", "--run", "cluster")
    # exit 2 as the run would: the profile's secrets are not exported and no data prep has run (the README says so)
    assert proc.returncode == 2 and "#SBATCH" in proc.stdout and "dry run: " in proc.stdout, \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    # data prep for real, on local Ray (the offline tiny sample, tokenizer from mistral-common's package data)
    proc = run("ultra3", "data", "prep", "rl", "-c", "tiny", f"output_dir={tmp_path / 'rl'}", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "rl" / "train.jsonl").is_file()
    # local training / quantization need the `local` extra: one line each, never a traceback
    from local_runtime_support import write_pretrain_data

    blend = write_pretrain_data(tmp_path / "pdata", docs=20, valid_docs=5)
    _one_line_needs_local(run("ultra3", "pretrain", "-c", "local", f"data.per_split_data_args_path={blend}",
                              "train.train_iters=2", f"checkpoint.save={tmp_path / 'ckpt'}"))
    model = tmp_path / "hf-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "nemotron_h"}), encoding="utf-8")
    (model / "model.safetensors").write_bytes(b"")
    _one_line_needs_local(run("ultra3", "quantize", "-c", "local", f"quantization.source={model}",
                              f"quantization.calib_dataset={blend}", f"quantization.output_dir={tmp_path / 'q'}"))


@pytest.mark.slow
def test_pip_install_fresh_copy_runs_what_it_promises(tmp_path):
    """`pip install .` into a fresh venv: no torch, and every base command works."""
    src = _fresh_copy(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = _user_env(tmp_path)
    inst = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src)], env=env,
                          capture_output=True, text=True, timeout=1200)
    if inst.returncode != 0 and any(s in inst.stderr for s in ("NewConnectionError", "Could not fetch URL",
                                                               "Temporary failure in name resolution")):
        pytest.skip(f"the package index is unreachable: {inst.stderr.strip().splitlines()[-1]}")
    assert inst.returncode == 0, inst.stderr[-3000:]
    py = str(venv / "bin" / "python")
    probe = subprocess.run([py, "-c", "import importlib.util as u; print([m for m in ('torch', 'transformers', "
                            "'modelopt', 'nemo_run', 'ray', 'pyarrow', 'mistral_common', 'tokenizers', 'jinja2') "
                            "if u.find_spec(m)])"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert probe.stdout.strip() == "['nemo_run', 'ray', 'pyarrow', 'mistral_common', 'tokenizers', 'jinja2']", \
        probe.stdout + probe.stderr
    work = tmp_path / "work"  # a folder of the user's, outside the source tree
    work.mkdir()
    shutil.copy(src / "env.toml.example", work / "env.toml.example")
    _check_promised_commands([str(venv / "bin" / "nemotron")], work, env, tmp_path)


def _uv(tmp_path: Path) -> str:
    """A uv executable: on PATH, else installed with pip into a scratch venv; skips when neither works."""
    found = shutil.which("uv")
    if found:
        return found
    venv = tmp_path / "uv-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    inst = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "uv"], capture_output=True,
                          text=True, timeout=600)
    if inst.returncode != 0:
        pytest.skip(f"uv is not installed and `pip install uv` failed: {inst.stderr.strip()[-300:]}")
    return str(venv / "bin" / "uv")


#: What uv prints when it cannot reach the package index it is configured with.
_UV_OFFLINE = ("dns error", "Failed to fetch", "error sending request", "Connection refused", "Network is unreachable",
               "client error (Connect)")


@pytest.mark.slow
def test_uv_run_fresh_copy_runs_what_it_promises(tmp_path):
    """The seed's way: `uv run nemotron ...` in a fresh clone (no lock file) resolves the base dependencies (no torch)
    at the pins of pyproject.toml [tool.uv] constraint-dependencies from the index uv is configured with, and runs
    submission and data prep; `uv sync` installs the same."""
    uv = _uv(tmp_path)
    src = _fresh_copy(tmp_path / "src")
    assert not (src / "uv.lock").exists(), "a lock file records the index host: the pins live in pyproject.toml"
    base_python = getattr(sys, "_base_executable", None) or sys.executable
    env = _user_env(tmp_path, UV_PYTHON=base_python, UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
    sync = subprocess.run([uv, "sync"], cwd=src, env=env, capture_output=True, text=True, timeout=1800)
    if sync.returncode != 0 and any(s in sync.stderr for s in _UV_OFFLINE):
        pytest.skip(f"the package index uv is configured with is unreachable: {sync.stderr.strip()[-300:]}")
    assert sync.returncode == 0, sync.stderr[-3000:]
    site = list((src / ".venv" / "lib").glob("python3*/site-packages"))
    assert site and not (site[0] / "torch").exists(), "the base install must not pull torch"
    assert (site[0] / "nemo_run").is_dir() and (site[0] / "mistral_common").is_dir()
    # the resolution took the pinned versions (the lock uv wrote is the untracked one)
    pins = _constraint_pins()
    probe = subprocess.run([str(src / ".venv" / "bin" / "python"), "-c",
                            "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower()"
                            ".replace('_', '-'): d.version for d in m.distributions()}))"],
                           capture_output=True, text=True, timeout=120)
    installed = json.loads(probe.stdout)
    off = {n: (v, pins[n]) for n, v in installed.items() if n in pins and v not in pins[n]}
    assert not off and {"nemo-run", "ray", "pyarrow", "tokenizers"} <= installed.keys() & pins.keys(), off
    _check_promised_commands([uv, "run", "--project", str(src), "nemotron"], src, env, tmp_path)


def _constraint_pins() -> dict[str, set[str]]:
    """pyproject.toml [tool.uv] constraint-dependencies as {normalized name: versions} (two where a marker splits
    by Python version)."""
    import tomllib

    from packaging.requirements import Requirement

    pins: dict[str, set[str]] = {}
    for line in tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["uv"]["constraint-dependencies"]:
        req = Requirement(line)
        spec = list(req.specifier)
        assert len(spec) == 1 and spec[0].operator == "==", f"pyproject.toml [tool.uv]: {line!r} is not name==version"
        pins.setdefault(req.name.lower().replace("_", "-"), set()).add(spec[0].version)
    return pins


def test_uv_constraints_pin_every_requirement():
    """Every requirement of the project (base and every extra) has an exact pin in [tool.uv]
    constraint-dependencies, one version per name unless an environment marker splits it, and that version
    satisfies the project's own range."""
    import tomllib

    from packaging.requirements import Requirement

    pins = _constraint_pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    lines = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    for line in lines:
        req = Requirement(line)
        name = req.name.lower().replace("_", "-")
        if name == "nemotron-cli":  # `all` names the other extras
            continue
        assert name in pins, f"pyproject.toml: {line!r} has no pin in [tool.uv] constraint-dependencies"
        assert any(req.specifier.contains(v, prereleases=True) for v in pins[name]), (line, pins[name])


def _registry_hosts() -> set[str]:
    """The package-registry hosts and local index folders no tracked file may name: the default index of pip (and
    uv, which uses the same) as pip itself spells it, and every index pip or uv is configured with here."""
    from urllib.parse import urlsplit

    from pip._internal.models.index import PyPI, TestPyPI  # pip's own record of its default index

    hosts = {PyPI.netloc, PyPI.file_storage_domain, TestPyPI.netloc, TestPyPI.file_storage_domain}
    urls = [os.environ.get(k, "") for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX",
                                            "UV_INDEX", "UV_EXTRA_INDEX_URL")]
    conf = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
    urls += [ln.split("=", 1)[1].strip("'\"") for ln in conf.stdout.splitlines() if "index-url=" in ln]
    for url in " ".join(urls).split():
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname:
            hosts.add(parts.hostname)
        elif parts.scheme == "file" and parts.path.strip("/"):
            hosts.add(parts.path.rstrip("/"))
    return {h for h in hosts if h}


def test_tree_names_no_registry_host():
    """No file of the checkout (tracked, or new and not ignored) names a package registry's host: installs use the
    index pip/uv are configured with. Reports every file and line."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    hosts = _registry_hosts()
    assert len(hosts) >= 3, hosts
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, timeout=60, check=True)
    found = []
    for rel in filter(None, listed.stdout.decode().split("\0")):
        path = ROOT / rel
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace").lower()
        for no, line in enumerate(text.splitlines(), 1):
            found += [f"{rel}:{no}: {h}" for h in hosts if h.lower() in line]
    assert not found, "package-registry hosts in the tree (use the configured index):\n" + "\n".join(found[:40])


def test_gitignore_covers_what_runs_write():
    """checkpoints/ (local runs), env.toml (the user's profiles) and output/ are ignored; the committed test
    fixture env.toml is not."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["checkpoints/pretrain-local/model.safetensors", "env.toml", "output/x/blend.json",
             "tests/fixtures/env.toml"]
    proc = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", *paths], capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.split() == paths[:3], proc.stdout + proc.stderr


@pytest.mark.slow
def test_main_script_sets_up_the_base_install_and_runs(tmp_path):
    """README's first command on a fresh copy: `bash scripts/main.sh` creates .venv with the base install (no
    torch: the main job is data prep) and runs the data prep; a second run only checks the venv."""
    src = _fresh_copy(tmp_path / "src")
    env = _user_env(tmp_path, NEMOTRON_PYTHON=getattr(sys, "_base_executable", None) or sys.executable)
    env.pop("NEMOTRON_EXTRAS", None)
    proc = subprocess.run(["bash", "scripts/main.sh", "--dry-run"], cwd=src, env=env, capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode != 0 and "Could not fetch URL" in proc.stdout + proc.stderr:
        pytest.skip("the package index is unreachable")
    assert proc.returncode == 0 and "dry run: valid" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no torch" in proc.stdout and "installing nemotron-cli (editable)" in proc.stdout, proc.stdout[-3000:]
    site = list((src / ".venv" / "lib").glob("python3*/site-packages"))
    assert site and not (site[0] / "torch").exists() and (site[0] / "nemo_run").is_dir()
    again = subprocess.run(["bash", "scripts/setup.sh"], cwd=src, env={**env, "NEMOTRON_EXTRAS": ""},
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "up to date" in again.stdout, again.stdout + again.stderr
