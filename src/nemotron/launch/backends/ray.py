"""The ``ray`` executor: a stage submitted to a running Ray cluster (a ``ray`` profile's ``address``) with Ray's
job submission API, and followed there: its status, its one log (kept by the Ray cluster), ``stop_job``. Nothing
here starts, stops or restarts the cluster; its storage is the cluster's, so outputs are recorded as planned.
"""

from __future__ import annotations

import shlex
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from nemotron.config import yamlio
from nemotron.errors import RuntimeFailure
from nemotron.launch import execute, records, submit
from nemotron.launch.backends.base import Backend, Job
from nemotron.launch.plan import recorded_outputs
from nemotron.launch.records import JobRecord
from nemotron.profiles.profile import Profile
from nemotron.profiles.schema import RaySettings

#: Ray job states in Slurm's words, so that every caller speaks one vocabulary.
_RAY_STATES = {"PENDING": "PENDING", "RUNNING": "RUNNING", "SUCCEEDED": "COMPLETED", "FAILED": "FAILED",
               "STOPPED": "CANCELLED"}


def _client(rec: JobRecord) -> Any:
    return records.ray_client(str(rec.host), records.profile_secrets(rec))


def submit_ray(req: Any, compiled: Any, profile: Profile[RaySettings], plan: Any) -> str:
    """Submit the stage as a job to an existing Ray cluster (a ``ray`` profile's ``address``) with
    Ray's job submission API; returns the submission id (our experiment id).

    The job's working directory is the code snapshot plus train.yaml and job.yaml. Secrets travel in
    it as ``secrets.env``, sourced by the entrypoint and deleted from the job's copy before the stage
    starts (Ray keeps the uploaded package in its object store: anyone who can read the cluster's
    storage can read it). Nothing here starts, stops or restarts the Ray cluster.

    Raises:
        RuntimeFailure: Ray missing, cluster unreachable, or submission refused.
    """

    submit.require_secrets(profile)
    address = profile.settings.address
    client = records.ray_client(address, profile.secret_values())
    entry = f"nemotron/_stages/{plan.stage.entry}"
    with tempfile.TemporaryDirectory(prefix="nemotron-ray-") as tmp:
        work = Path(tmp) / "job"
        work.mkdir()
        submit.code_snapshot(Path(tmp) / "code.tar.gz")
        with tarfile.open(Path(tmp) / "code.tar.gz") as tar:
            tar.extractall(work, filter="data")
        (work / "train.yaml").write_text(yamlio.dumps(compiled.config), encoding="utf-8")
        (work / "job.yaml").write_text(yamlio.dumps(execute.provenance(req, compiled, profile, plan)), encoding="utf-8")
        command = f"{shlex.quote(profile.settings.python)} {shlex.quote(entry)} --config train.yaml"
        secrets = profile.secret_values()
        if secrets:
            (work / "secrets.env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(secrets.items())))
            command = f"set -a; . ./secrets.env; set +a; rm -f secrets.env; {command}"
        own = profile.public_env_vars()
        env_vars = {**own, "PYTHONPATH": "." + (f":{own['PYTHONPATH']}" if own.get("PYTHONPATH") else ""),
                    "NEMOTRON_EXPERIMENT_ID": plan.experiment_id}
        try:
            job_id = client.submit_job(entrypoint=f"bash -c {shlex.quote(command)}", submission_id=plan.experiment_id,
                                       runtime_env={"working_dir": str(work), "env_vars": env_vars},
                                       metadata={"nemotron_stage": plan.stage.name})
        except Exception as exc:
            raise RuntimeFailure(f"submission to the Ray cluster at {address} failed: {type(exc).__name__}: "
                                 f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}") from exc
    records.save(records.JobRecord(
        experiment_id=plan.experiment_id, job_id=job_id, stage=plan.stage.name, title=plan.stage.title,
        profile=profile.name, env_file=str(profile.source), run_dir="(the Ray job's working directory)",
        log_dir="(kept by the Ray cluster)", job_name=plan.job_name, tunnel="ray", host=address,
        executor=plan.executor,
        outputs=recorded_outputs(compiled, profile, getattr(req, "latest", False)), config_hash=compiled.config_hash(), config=Path(plan.config_name).stem,
    ))
    return job_id


class Ray(Backend):
    """A Ray profile: Ray's job submission API to a running cluster (:func:`submit_ray`)."""

    executor, runs_here, scheduler = "ray", False, "Ray"
    settings = RaySettings

    def render(self, job: Job) -> str:
        entry = f"nemotron/_stages/{job.plan.stage.entry}"
        address = job.profile_as(RaySettings).settings.address
        return (f"# submitted with Ray's job submission API to {address}; working directory: the nemotron\n"
                f"# package snapshot with train.yaml and job.yaml; the cluster is neither started nor stopped\n"
                f"python {entry} --config train.yaml")

    def submit(self, job: Job, chain: list[str]) -> tuple[str, str]:
        profile = job.profile_as(RaySettings)
        job_id = submit_ray(job.req, job.compiled, profile, job.plan)
        return job_id, f"Ray job {job_id} on {profile.settings.address}"

    def state(self, rec: JobRecord) -> tuple[str, str]:
        """The Ray job status in Slurm's words (SUCCEEDED is COMPLETED, STOPPED CANCELLED); no exit code.

        Raises:
            RuntimeFailure: the Ray cluster cannot be asked.
        """
        status = str(_client(rec).get_job_status(rec.job_id)).rsplit(".", 1)[-1]
        return _RAY_STATES.get(status, status), ""

    def log_files(self, rec: JobRecord) -> list[str]:
        """One log, kept by the Ray cluster (named ``log-ray``)."""
        return ["log-ray"]

    def read_log(self, rec: JobRecord, path: str, offset: int = 0) -> str:
        return _client(rec).get_job_logs(rec.job_id).encode()[offset:].decode(errors="replace")

    def cancel(self, rec: JobRecord) -> None:
        """``stop_job`` on the Ray cluster (the cluster itself is never touched)."""
        _client(rec).stop_job(rec.job_id)
