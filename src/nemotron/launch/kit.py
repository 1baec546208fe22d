"""``nemotron kit slurm build PROFILE --recipe RECIPE --stage STAGE``: build a stage's container image
on a compute node as a Slurm job.

The job builds ``stages/docker/<image>.Dockerfile`` with podman (the build context is the ``nemotron``
package snapshot), imports the result into a squashfs file with enroot, and writes it into the
profile's ``image_cache`` folder with a manifest (image, base, frameworks, Dockerfile hash, when,
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
from nemotron.launch import backends, jobs, submit
from nemotron.launch.nemo_run import _import_nemo_run
from nemotron.launch.plan import JobPlan, new_experiment_id, safe_name
from nemotron.profiles.load import load_profile


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


def slurm_build(profile_name: str, recipe: str, stage_name: str, env_file: str | None, dry_run: bool) -> int:
    """Plan (and unless ``dry_run``, submit and follow) the image build job. Returns the exit code.

    Raises:
        UsageError: unknown stage or recipe. ConfigError: profile not slurm, no ``image_cache``,
        no Dockerfile. RuntimeFailure: submission failed.
    """

    try:
        stage = get_stage(stage_name)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    if stage.recipe != recipe:
        raise UsageError(f"stage {stage.name} belongs to recipe {stage.recipe}, not {recipe}")
    profile = load_profile(profile_name, env_file, {})
    if profile.executor != "slurm":
        raise ConfigError(f"profile {profile.name} is a {profile.executor} profile; images are built on a Slurm node")
    cache = getattr(profile, "image_cache", None)
    if not cache:
        raise ConfigError(f"profile {profile.name} has no image_cache",
                          "set image_cache = \"/shared/images\" (a folder visible from every node) in env.toml")
    entry = image_table()[stage.image]
    docker = dockerfile(stage.image)
    text = docker.read_text(encoding="utf-8")
    out = f"{cache.rstrip('/')}/{squashfs_name(stage.image, entry)}"
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
        report.out("dry run: nothing was submitted", plain=True)
        return 0
    run = _import_nemo_run()

    def stage_files(executor: Any) -> None:
        submit.upload(executor.tunnel, profile, rdir, {"context/Dockerfile": text}, code_dir="context")

    def make_task() -> Any:
        return run.Script(inline=script)


    job_id = submit.sbatch(plan, profile, "batch", stage_files, make_task)
    root = submit.safe_root(profile)
    jobs.save(jobs.JobRecord(
        experiment_id=plan.experiment_id, job_id=job_id, stage=stage.name, title=f"image build {stage.image}",
        profile=profile.name, env_file=str(profile.source), run_dir=rdir,
        log_dir=f"{root}/experiments/{plan.job_name}/{plan.experiment_id}/{submit.task_name(plan)}",
        job_name=f"{stage.recipe}-{submit.task_name(plan)}", tunnel=getattr(profile, "tunnel", "local") or "local",
        host=getattr(profile, "host", None), user=getattr(profile, "user", None),
    ))
    print(f"submitted image build: Slurm job {job_id}", file=sys.stderr)
    return backends.attach(jobs.load(job_id))
