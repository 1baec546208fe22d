"""One backend per executor behind one protocol (:class:`Backend`): render, submit or run a planned job, and
follow it (:func:`attach`). Chosen by ``plan.executor`` in one place, :func:`backend`."""

from __future__ import annotations

import shlex
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol

from nemotron.errors import RESUMABLE
from nemotron.launch import jobs, local, local_job, submit
from nemotron.launch.execute import _job_env, run_dir, run_here


@dataclass(frozen=True)
class Job:
    """A planned job: what the command asked (``req``), the compiled config, the profile (None: this machine) and
    the plan. The four travel together from planning to the backend."""

    req: Any
    compiled: Any
    profile: Any
    plan: Any


class Backend(Protocol):
    """What one executor does with a planned job (``plan.executor`` names it: ``direct``, ``slurm``, ``ray``,
    ``local``). A new executor is one more class here and its row in :data:`BACKENDS`."""

    executor: str
    #: True when the job runs in this process's child and :meth:`run` returns its exit code; else :meth:`submit`.
    #: A backend has only the one of the two that its ``runs_here`` names (the dispatcher below reads the flag).
    runs_here: bool

    def render(self, job: Job) -> str:
        """The exact job that would run, as text (the ``--dry-run`` job section)."""
        ...

    def submit(self, job: Job, chain: list[str]) -> tuple[str, str]:
        """Queue the job: ``(job id, where in words)``; ``chain`` receives every job id queued (``run.chain``).

        Raises:
            RuntimeFailure: the job could not be submitted.
        """
        ...

    def run(self, job: Job) -> int:
        """Run the job here, attached; its exit code."""
        ...


def _command_line(job: Job) -> tuple[str, str]:
    cmd = shlex.join(job.plan.command(run_dir(job.plan) / "train.yaml"))
    env = _job_env(job.profile, for_display=True)
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()), cmd


class Here:
    """No profile: the stage runs in a child of this process (:func:`nemotron.launch.execute.run_here`)."""

    executor, runs_here = "direct", True

    def render(self, job: Job) -> str:
        prefix, cmd = _command_line(job)
        return (f"# in {run_dir(job.plan)} (the run writes train.yaml and job.yaml there; a dry run writes nothing)\n"
                + (f"{prefix} " if prefix else "") + cmd)

    def run(self, job: Job) -> int:
        return run_here(job.req, job.compiled, job.profile, job.plan)


class Slurm:
    """A Slurm profile: NeMo-Run's sbatch script, submitted through its tunnel (:mod:`nemotron.launch.submit`)."""

    executor, runs_here = "slurm", False

    def render(self, job: Job) -> str:
        return submit.render_sbatch(job.req, job.compiled, job.profile, job.plan)

    def submit(self, job: Job, chain: list[str]) -> tuple[str, str]:
        with submit.reporting_queued(chain, job.plan.stage.recipe):
            job_id = submit.submit(job.req, job.compiled, job.profile, job.plan, chain_ids=chain)
        return job_id, f"Slurm job {job_id}"


class Ray:
    """A Ray profile: Ray's job submission API to a running cluster (:func:`nemotron.launch.submit.submit_ray`)."""

    executor, runs_here = "ray", False

    def render(self, job: Job) -> str:
        entry = f"nemotron/_stages/{job.plan.stage.entry}"
        return (f"# submitted with Ray's job submission API to {job.profile.address}; working directory: the nemotron\n"
                f"# package snapshot with train.yaml and job.yaml; the cluster is neither started nor stopped\n"
                f"python {entry} --config train.yaml")

    def submit(self, job: Job, chain: list[str]) -> tuple[str, str]:
        job_id = submit.submit_ray(job.req, job.compiled, job.profile, job.plan)
        return job_id, f"Ray job {job_id} on {job.profile.address}"


class LocalJob:
    """A ``local`` profile: NeMo-Run's LocalExecutor on this machine, under a supervisor
    (:mod:`nemotron.launch.local`)."""

    executor, runs_here = "local", False

    def render(self, job: Job) -> str:
        return local.render(job.profile, job.plan)

    def submit(self, job: Job, chain: list[str]) -> tuple[str, str]:
        job_id = local.submit_local(job.req, job.compiled, job.profile, job.plan)
        return job_id, f"local job {job_id} (NeMo-Run local executor)"



#: Every executor's backend, by ``plan.executor``.
BACKENDS: dict[str, Backend] = {b.executor: b for b in (Here(), Slurm(), Ray(), LocalJob())}


def backend(executor: str) -> Backend:
    """The backend of ``executor`` (a planned job's ``plan.executor``)."""
    return BACKENDS[executor]


def render(req: Any, compiled: Any, profile: Any, plan: Any) -> str:
    """The exact job that would run, as text: NeMo-Run's sbatch script for a Slurm profile, the
    command line otherwise."""
    return backend(plan.executor).render(Job(req, compiled, profile, plan))


def start(req: Any, compiled: Any, profile: Any, plan: Any) -> int:
    """Run or submit the job; returns the exit code (the job's own for an attached run).

    Raises:
        RuntimeFailure: the job could not be started or submitted.
    """
    job, chosen = Job(req, compiled, profile, plan), backend(plan.executor)
    if chosen.runs_here:
        return chosen.run(job)
    chain: list[str] = []  # a Slurm job and its run.chain continuation jobs, first to last
    job_id, where = chosen.submit(job, chain)
    rec = jobs.load(plan.experiment_id)
    recipe = plan.stage.recipe
    print(f"submitted {plan.stage.title}: {where}, experiment {plan.experiment_id}", file=sys.stderr)
    if req.mode == "batch":
        print(job_id)
        print(f"  follow:  nemotron {recipe} logs {job_id} -f\n  status:  nemotron {recipe} status {job_id}\n"
              f"  cancel:  nemotron {recipe} cancel {job_id}", file=sys.stderr)
        return 0
    return attach(rec, owner=True, chain=[jobs.load(i) for i in chain[1:]])


#: Slurm states in which a job of a ``run.chain`` ends without failing the chain when a next job continues:
#: the next one resumes from the last save (the resumable exit 75 is told by its exit code, not its state).
_CONTINUES = {"COMPLETED", "PREEMPTED", "TIMEOUT", "NODE_FAIL"}


def attach(rec: Any, owner: bool = False, chain: Any = ()) -> int:
    """Stream an attached job's log until it ends; 0 only when Slurm says COMPLETED, else 1 with the
    final state and the last log lines. Ctrl-C detaches (the job keeps running) and returns 130.

    ``chain``: the ``run.chain`` continuation jobs of ``rec`` (records, first to last). They are followed
    in turn, each log streamed, with a line when it moves on (``job N ended ...; continuing with job M
    (run.chain 1/2)``); a job that ended in a failure (not one of :data:`_CONTINUES` nor exit 75) gets its
    failure summary there. The result is the chain's: that of the last job that ran (one cancelled before
    it started is skipped), so 0 only when it ended COMPLETED; its artifacts are recorded then.

    A job of a ``local`` profile (:mod:`nemotron.launch.local_job`) behaves like a run here instead: the
    result is the stage's own exit code (75: stopped resumably); for the command that started it
    (``owner``) Ctrl-C stops the job and returns 130, and SIGTERM (``kill``, ``timeout``) is passed
    on to the job. ``logs -f`` (not the owner) only stops following on Ctrl-C.
    """

    if rec.tunnel == jobs.LOCAL_EXECUTOR:
        return _attach_local(rec, owner)
    recs = [rec, *chain]
    last = None  # (record, state, exit code) of the last job that ran
    reported = set()  # jobs whose failure summary was shown on the way
    for i, current in enumerate(recs):
        try:
            st, code = jobs.follow(current)
        except KeyboardInterrupt:
            left = [r.job_id for r in recs[i:]]
            what = f"job {left[0]} keeps running; stop it" if len(left) == 1 else \
                f"jobs {', '.join(left)} (run.chain) keep running; stop them"
            recipe = current.job_name.split("-", 1)[0]
            print(f"\ndetached: {what} with: {'; '.join(f'nemotron {recipe} cancel {j}' for j in left)}",
                  file=sys.stderr)
            return 130
        if st != "CANCELLED" or last is None or jobs.started(current):
            last = (current, st, code)
        else:
            print(f"[nemotron] job {current.job_id} was cancelled before it started", file=sys.stderr)
        if i + 1 < len(recs):
            if last[0] is current and st not in _CONTINUES and str(code).split(":")[0] != str(RESUMABLE):
                _report_failure(current, st, code)
                reported.add(current.job_id)
            print(f"[nemotron] job {current.job_id} ended {st} (exit code {code or '?'}); continuing with job "
                  f"{recs[i + 1].job_id} (run.chain {i + 1}/{len(recs) - 1})", file=sys.stderr)
    rec, st, code = last
    if st == "COMPLETED":
        for art in jobs.record_outputs(rec):
            print(f"[nemotron] artifact {art['name']} v{art['version']}: {art['path']}", file=sys.stderr)
        return 0
    if rec.job_id in reported:
        print(f"[nemotron] run.chain ended with job {rec.job_id}: {st} (exit code {code or '?'})", file=sys.stderr)
    else:
        _report_failure(rec, st, code)
    return 1


def _report_failure(rec: Any, st: str, code: str) -> None:
    """The summary of a Slurm job that did not complete: its state and exit code, what the stage said
    (:func:`nemotron.launch.jobs.failure_messages`) and the last log lines, on stderr."""

    said = jobs.failure_messages(rec)  # the cause, before the launcher's summary that ends the log
    if said:
        print(f"[nemotron] job {rec.job_id} ended {st} (exit code {code or '?'}); {rec.title} said:", file=sys.stderr)
        for line in said:
            print(f"  {line}", file=sys.stderr)
        print("[nemotron] last log lines:", file=sys.stderr)
    else:
        print(f"[nemotron] job {rec.job_id} ended {st} (exit code {code or '?'}); last log lines:", file=sys.stderr)
    for line in jobs.tail_lines(rec):
        print(f"  {line}", file=sys.stderr)


def _attach_local(rec: Any, owner: bool) -> int:

    def forward(_signum: int, _frame: Any) -> None:  # `kill`/`timeout` on the CLI stop the stage too
        local_job.cancel(rec.run_dir)

    previous = signal.signal(signal.SIGTERM, forward) if owner else None
    try:
        try:
            st, code = jobs.follow(rec, poll_s=0.2)
        except KeyboardInterrupt:
            if not owner:
                print(f"\nstopped following; local job {rec.job_id} keeps running", file=sys.stderr)
                return 130
            print(f"\nstopping local job {rec.job_id} (Ctrl-C again: stop it at once) ...", file=sys.stderr)
            local_job.cancel(rec.run_dir)
            deadline = time.monotonic() + local_job.GRACE_S + 30  # then NeMo-Run's SIGKILL, 10 s after its SIGTERM
            while time.monotonic() < deadline:
                try:
                    if jobs.state(rec)[0] in jobs.TERMINAL:
                        break
                    time.sleep(0.2)
                except KeyboardInterrupt:
                    local_job.cancel(rec.run_dir)
            return 130
    finally:
        if owner:
            signal.signal(signal.SIGTERM, previous)
    exit_code = int(code) if str(code).lstrip("-").isdigit() else 1
    folder = f"run folder: {rec.run_dir}; logs: {rec.log_dir}"
    if st == "COMPLETED":
        for art in jobs.record_outputs(rec):
            print(f"[nemotron] artifact {art['name']} v{art['version']}: {art['path']}", file=sys.stderr)
        return 0
    if exit_code == RESUMABLE:
        print(f"{rec.title} saved its state and stopped on a signal: run the same command again to resume ({folder})",
              file=sys.stderr)
        return exit_code
    if exit_code == 0:  # cancelled before it failed or finished, or its supervisor died
        exit_code = 1
    if exit_code != 2:  # 2: the stage already said what is wrong with its config or input
        print(f"{rec.title} ended {st} with exit code {code if code not in (None, '') else '?'} ({folder})",
              file=sys.stderr)
    return exit_code
