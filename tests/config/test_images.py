"""The container images (issue #13, items 7 and 8): what stages/docker/*.Dockerfile install agrees with what
stages/images.toml records and the runtime pre-checks compare, and env.toml.example maps each image key to the
file `nemotron kit slurm build` writes for it.

No image is built here (no podman/enroot, no NVIDIA registry): the Dockerfiles are read as text. The commit
check runs on a real pip install from a real git repository: a small stand-in package named megatron-core,
since the real one at the pinned commit needs Python 3.12 and a C++ build; pip records the commit of a git
install the same way (PEP 610 direct_url.json) for either.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from nemotron.config.images import image_table
from nemotron.launch.kit import squashfs_name
from nemotron.runtime.common import prestart
from nemotron.runtime.megatron import megatron_bridge as mb
from nemotron.runtime.quantization.quantize_cluster import MIN_MODELOPT

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "stages" / "docker"

#: Megatron-Bridge branch nemotron_3_ultra at the commit the configs and key list were checked against, and the
#: Megatron-LM commit its 3rdparty/Megatron-LM submodule pins (../shared/upstream/README.md).
MEGATRON_BRIDGE = "4588417902c8ce59881c7477f369b224ad185ba7"
MEGATRON_CORE = "c8288b6c978f2b6b6c460a21b5b42114f5c0be3e"


def _args(dockerfile: Path) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile.read_text(), re.M))


def test_nemo_dockerfile_installs_what_images_toml_records():
    text = (DOCKER / "nemo.Dockerfile").read_text()
    args = _args(DOCKER / "nemo.Dockerfile")
    nemo = image_table()["nemo"]
    assert args["BASE"] == nemo["image"]
    assert nemo["commits"] == {"megatron_bridge": MEGATRON_BRIDGE, "megatron_core": MEGATRON_CORE}
    assert args["MEGATRON_BRIDGE_COMMIT"] == MEGATRON_BRIDGE and args["MEGATRON_CORE_COMMIT"] == MEGATRON_CORE
    # both from git at those commits (pip then records them), not Megatron-Bridge's branch name
    bridge_url = "git+https://github.com/NVIDIA-NeMo/Megatron-Bridge.git"
    assert f'"megatron-bridge @ {bridge_url}@${{MEGATRON_BRIDGE_COMMIT}}"' in text
    assert '"megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git@${MEGATRON_CORE_COMMIT}"' in text
    assert "nemotron_3_ultra}" not in text and "MEGATRON_BRIDGE_REF" not in text
    # Model Optimizer 0.47: what the quantize entry requires, recorded in images.toml
    assert args["MODELOPT_VERSION"] == nemo["frameworks"]["modelopt"] == "0.47.0"
    assert '"nvidia-modelopt==${MODELOPT_VERSION}"' in text
    assert prestart.minimum_version_problem("nvidia-modelopt", nemo["frameworks"]["modelopt"], MIN_MODELOPT, "") is None
    # the build runs the stages' own framework check last
    assert text.rstrip().splitlines()[-1].startswith("RUN python -c \"from nemotron.runtime.megatron.megatron_bridge import "
                                                     "framework_problems")


def test_every_dockerfile_builds_on_its_images_toml_image():
    table = image_table()
    for key in table:
        assert _args(DOCKER / f"{key}.Dockerfile")["BASE"] == table[key]["image"], key
    rl = (DOCKER / "nemo-rl.Dockerfile").read_text()
    assert table["nemo-rl"]["commits"]["nemo_rl"] in rl and table["nemo-rl"]["frameworks"]["nemo_rl"].endswith(
        table["nemo-rl"]["commits"]["nemo_rl"][:7])


def test_example_profiles_map_images_to_the_files_the_build_writes():
    """Every `[PROFILE.images]` path of env.toml.example is `<that profile's image_cache>/<key>-<tag>.sqsh` of
    stages/images.toml (`nemotron kit slurm build`'s name), not a file of another release."""
    example = tomllib.loads((ROOT / "env.toml.example").read_text())
    table = image_table()
    seen = 0
    for name, profile in example.items():
        cache = profile.get("image_cache") or example.get(profile.get("extends", ""), {}).get("image_cache")
        for key, path in (profile.get("images") or {}).items():
            assert path == f"{cache}/{squashfs_name(key, table[key])}", (name, key, path)
            seen += 1
    assert seen == 4  # cluster: nemo, nemo-rl, data; gb200: nemo


def _git_install(tmp_path: Path, version: str) -> tuple[Path, str]:
    """A package ``megatron-core`` ``version`` in a git repository, pip-installed from ``git+file://...@<commit>``
    into a folder of its own; returns (that folder, the commit)."""
    repo = tmp_path / "repo"
    (repo / "fake_megatron_core").mkdir(parents=True)
    (repo / "fake_megatron_core" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text(f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                         f'"setuptools.build_meta"\n\n[project]\nname = "megatron-core"\n'
                                         f'version = "{version}"\n')
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), f"megatron-core @ git+file://{repo}@{commit}"], check=True, timeout=300)
    return target, commit


def test_pre_check_compares_the_commit_pip_recorded(tmp_path):
    """megatron-core 0.18.0 from another commit than images.toml's passes the version check but not the commit
    check; the pinned commit (full or short) passes; a package that records no commit is left to the version."""
    target, commit = _git_install(tmp_path, "0.18.0")
    found = prestart.installed_commits({"megatron_core": "megatron-core"}, paths=[str(target)])
    assert found == {"megatron_core": commit}
    versions = prestart.installed_versions({"megatron_core": "megatron-core"})  # this venv's, from a wheel
    assert prestart.installed_commits({"megatron_core": "megatron-core"}) == {"megatron_core": None}
    pins = prestart.pinned_versions("nemo", tuple(mb.FRAMEWORKS))
    assert versions["megatron_core"] is not None
    problems = mb.framework_problems(pins, found)
    assert problems == [f"megatron-core is installed from commit {commit[:12]}; the configs and the key list were "
                        f"checked against {MEGATRON_CORE[:12]} (stages/images.toml [nemo].commits): run in the image "
                        "stages/docker/nemo.Dockerfile builds"]
    assert mb.framework_problems(pins, {"megatron_core": MEGATRON_CORE, "megatron_bridge": MEGATRON_BRIDGE[:7]}) == []
    assert mb.framework_problems(pins, {"megatron_core": None, "megatron_bridge": None}) == []
