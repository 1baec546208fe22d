"""``nemotron kit slurm build [PROFILE] [--recipe RECIPE] [--stage STAGE]``: build a stage's container image
(without ``--stage``: every image the recipe's stages use) on a compute node as a Slurm job.

The job builds ``stages/docker/<image>.Dockerfile`` with podman (the build context is the ``nemotron``
package snapshot), imports the result into a squashfs file with enroot, and writes it into the
profile's ``image_cache`` folder (default ``<job_dir>/images``) with a manifest (image, base, frameworks, Dockerfile hash, when,
which job). Map the image key to that file in the profile (``[PROFILE.images]``) to run stages in it.
A node without podman or enroot ends the job with one clear line.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from nemotron import report
from nemotron.config.images import image_table
from nemotron.config.paths import stages_dir
from nemotron.config.registry import get_stage
from nemotron.errors import ConfigError, UsageError
from nemotron.launch import backends, records, submit
from nemotron.launch.nemo_run import _import_nemo_run
from nemotron.launch.plan import JobPlan, new_experiment_id, safe_name
from nemotron.profiles.load import load_profile
from nemotron.profiles.profile import Profile
from nemotron.profiles.schema import SlurmSettings


def dockerfile(image_key: str) -> Path:
    """``stages/docker/<image_key>.Dockerfile``.

    Raises:
        ConfigError: no Dockerfile for that image.
    """
    path = stages_dir() / "docker" / f"{image_key}.Dockerfile"
    if not path.is_file():
        have = sorted(p.name.removesuffix(".Dockerfile") for p in path.parent.glob("*.Dockerfile"))
        raise ConfigError(f"no Dockerfile for image {image_key!r} ({path})", f"images with one: {', '.join(have)}")
    return path


def squashfs_name(image_key: str, entry: dict[str, Any]) -> str:
    """The file name the build writes in ``image_cache``: ``<image key>-<tag of the stages/images.toml image>.sqsh``
    (``nemo-26.04.01.sqsh`` for ``nvcr.io/nvidia/nemo:26.04.01``), the name a profile's ``[PROFILE.images]`` maps
    the key to (env.toml.example)."""

    return f"{image_key}-{safe_name(str(entry['image']).rsplit(':', 1)[-1])}.sqsh"


def build_script(image_key: str, entry: dict[str, Any], context: str, out: str, manifest: dict[str, Any]) -> str:
    """The job's shell script: check tools, podman build, enroot import (atomic rename), manifest."""
    tag = f"nemotron-{image_key}:{manifest['dockerfile_sha256'][:12]}"
    q = shlex.quote
    return f"""set -euo pipefail
for tool in podman enroot; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "error: $tool is not installed on $(hostname): building an image needs podman and enroot on the compute node" >&2
    exit 127
  fi
done
podman build --build-arg BASE={q(entry['image'])} -f {q(context + '/Dockerfile')} -t {q(tag)} {q(context)}
mkdir -p {q(str(Path(out).parent))}
rm -f {q(out + '.partial')}
enroot import -o {q(out + '.partial')} podman://{q(tag)}
mv {q(out + '.partial')} {q(out)}
cat > {q(out + '.manifest.json')} <<'NEMOTRON_MANIFEST'
{json.dumps({**manifest, 'squashfs': out, 'tag': tag}, indent=2)}
NEMOTRON_MANIFEST
echo "built {out}"
"""


def _only_slurm_profile(env_file: str | None) -> str:
    """The name of the one Slurm profile of the env.toml in use, for a build command that names none.

    Raises:
        ConfigError: no env.toml, or no Slurm profile in it. UsageError: several (they are listed).
    """
    from nemotron.profiles.load import find_env_file, load_profiles

    path = find_env_file(env_file)
    if path is None:
        raise ConfigError("nemotron kit slurm build: no profile named and no env.toml found",
                          "copy env.toml.example to ./env.toml (a Slurm profile), or pass --env-file PATH")
    loaded = load_profiles(path)
    names = [n for n in loaded.names() if _resolved_executor(loaded, n) == "slurm"]
    if not names:
        raise ConfigError(f"{path}: no Slurm profile to build images on",
                          "add one (executor = \"slurm\"; docs/profiles.md), or name the profile: "
                          "nemotron kit slurm build PROFILE")
    if len(names) > 1:
        raise UsageError(f"{path} has {len(names)} Slurm profiles ({', '.join(names)}); name the one to build on: "
                         f"nemotron kit slurm build {names[0]}")
    return names[0]


def _resolved_executor(loaded: Any, name: str) -> str | None:
    try:
        return loaded.get(name).executor
    except ConfigError:  # an invalid profile is reported when it is used
        return None


def build_stages(recipe: str, stage_name: str | None) -> list[Any]:
    """The stages whose images a build makes: ``stage_name``'s, else one stage per image key of ``recipe`` (its
    first stage in registry order), so that every stage of the recipe has its image.

    Raises:
        UsageError: unknown stage, or a stage of another recipe.
    """
    from nemotron.config.registry import STAGES

    if stage_name is not None:
        try:
            stage = get_stage(stage_name)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
        if stage.recipe != recipe:
            raise UsageError(f"stage {stage.name} belongs to recipe {stage.recipe}, not {recipe}")
        return [stage]
    by_image: dict[str, Any] = {}
    for stage in STAGES:
        if stage.recipe == recipe and stage.image:
            by_image.setdefault(stage.image, stage)
    if not by_image:
        raise UsageError(f"recipe {recipe} has no stage with an image")
    return list(by_image.values())


def image_cache(profile: Profile[SlurmSettings]) -> tuple[str, bool]:
    """``(folder, is_default)``: the profile's ``image_cache``, else ``<job_dir>/images`` (the job root that every
    node sees, :func:`nemotron.launch.submit.job_root`)."""
    cache = profile.settings.image_cache
    if cache:
        return str(cache).rstrip("/"), False
    return f"{submit.job_root(profile).rstrip('/')}/images", True


def slurm_build(profile_name: str | None, recipe: str, stage_name: str | None, env_file: str | None,
                dry_run: bool) -> int:
    """Plan (and unless ``dry_run``, submit and follow, one after the other) the image build jobs: the image of
    ``stage_name``, or without it every image the recipe's stages use (:func:`build_stages`). Without
    ``profile_name`` the env.toml's only Slurm profile is used. The images go to :func:`image_cache`. Returns the
    exit code (the first failed build's).

    Raises:
        UsageError: unknown stage or recipe, or several Slurm profiles and none named. ConfigError: no env.toml,
        profile not slurm, no Dockerfile. RuntimeFailure: submission failed.
    """
    stages = build_stages(recipe, stage_name)
    chosen = profile_name is None
    name = profile_name if profile_name is not None else _only_slurm_profile(env_file)
    loaded = load_profile(name, env_file, {})  # never None: a name is given
    if loaded is None or not isinstance(loaded.settings, SlurmSettings):
        what = f"a {loaded.executor}" if loaded is not None else "not a"
        raise ConfigError(f"profile {name} is {what} profile; images are built on a Slurm node")
    profile = loaded.narrow(SlurmSettings)
    cache, default_cache = image_cache(profile)
    if chosen:
        report.out(f"profile: {profile.name} (the only Slurm profile of {profile.source})", plain=True)
    if default_cache:
        report.out(f"image_cache: {cache} (default: the profile's job_dir/images; set image_cache in env.toml to "
                   "choose the folder)", plain=True)
    if not profile.settings.container:
        report.out(f"note: profile {profile.name} runs stages without containers (container = false): the images "
                   "are used once container = true and [images] maps them", plain=True)
    for stage in stages:
        code = _build_one(profile, recipe, stage, cache, dry_run)
        if code:
            return code
    return 0


def _build_one(profile: Profile[SlurmSettings], recipe: str, stage: Any, cache: str, dry_run: bool) -> int:
    """One image build job (the image of ``stage``): shown, and unless ``dry_run`` submitted and followed."""
    entry = image_table()[stage.image]
    docker = dockerfile(stage.image)
    text = docker.read_text(encoding="utf-8")
    out = f"{cache}/{squashfs_name(stage.image, entry)}"
    plan = JobPlan(stage=stage, config_name="image-build", profile=profile.name, executor="slurm", nodes=1,
                   gpus_per_node=0, world_size=1, launch="python", image=None, image_key=stage.image,
                   entry=docker, experiment_id=new_experiment_id(stage, f"build-{stage.image}"),
                   job_name=safe_name(f"{recipe}-build-{stage.image}"))

    rdir = submit.remote_run_dir(profile, plan)
    manifest = {"image_key": stage.image, "base": entry["image"], "frameworks": entry.get("frameworks", {}),
                "dockerfile_sha256": hashlib.sha256(text.encode()).hexdigest(), "experiment_id": plan.experiment_id,
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    script = build_script(stage.image, entry, f"{rdir}/context", out, manifest)
    report.heading(f"build image {stage.image} for {stage.title} on profile {profile.name}")
    report.out(f"Dockerfile: {docker}\nbase: {entry['image']}\nsquashfs: {out}\n", plain=True)
    if dry_run:
        report.out(script, plain=True)
        report.out(f"dry run: image {stage.image} — nothing was submitted", plain=True)
        return 0
    run = _import_nemo_run()

    def stage_files(executor: Any) -> None:
        submit.upload(executor.tunnel, profile, rdir, {"context/Dockerfile": text}, code_dir="context")

    def make_task() -> Any:
        return run.Script(inline=script)


    job_id = submit.sbatch(plan, profile, "batch", stage_files, make_task)
    root = submit.safe_root(profile)
    records.save(records.JobRecord(
        experiment_id=plan.experiment_id, job_id=job_id, stage=stage.name, title=f"image build {stage.image}",
        profile=profile.name, env_file=str(profile.source), run_dir=rdir,
        log_dir=f"{root}/experiments/{plan.job_name}/{plan.experiment_id}/{submit.task_name(plan)}",
        job_name=f"{stage.recipe}-{submit.task_name(plan)}", tunnel=profile.settings.tunnel,
        host=profile.settings.host, user=profile.settings.user, executor=plan.executor,
    ))
    print(f"submitted image build: Slurm job {job_id}", file=sys.stderr)
    return backends.attach(records.load(job_id))
