"""The ``direct`` executor: no profile, the stage runs in a child of this process
(:func:`nemotron.launch.execute.run_here`), attached; nothing is submitted, so no job record is written."""

from __future__ import annotations

import shlex

from nemotron.launch.backends.base import Backend, Job
from nemotron.launch.execute import _job_env, run_dir, run_here


class Here(Backend):
    """No profile: the stage runs in a child of this process."""

    executor, runs_here, scheduler = "direct", True, "this machine"

    def render(self, job: Job) -> str:
        cmd = shlex.join(job.plan.command(run_dir(job.plan) / "train.yaml"))
        env = _job_env(job.profile, for_display=True)
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return (f"# in {run_dir(job.plan)} (the run writes train.yaml and job.yaml there; a dry run writes nothing)\n"
                + (f"{prefix} " if prefix else "") + cmd)

    def run(self, job: Job) -> int:
        return run_here(job.req, job.compiled, job.profile, job.plan)
