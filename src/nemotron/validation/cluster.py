"""Checks of a job against the cluster its profile describes: the profile's node budget and task shape
(``nodes``, ``ntasks_per_node``) and the storage the cluster's nodes see.

Called once per stage by the command path, after planning (:func:`check`), for the dry run and the run
alike: what it finds is listed with every other problem, and a run refuses to start on an error.

Standard library only (plus :mod:`nemotron.errors`): importing it costs nothing at start-up.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import TYPE_CHECKING, Any

from nemotron.config.artifacts import producer_command
from nemotron.config.paths import OUTPUT_FOLDER_KEYS
from nemotron.config.tree import leaves
from nemotron.errors import Problem

if TYPE_CHECKING:  # annotations only (pydantic is loaded with a profile, not with this module)
    from nemotron.profiles.profile import ExecutorProfile, Profile
    from nemotron.profiles.schema import RaySettings, SlurmSettings

#: Config keys (besides :data:`nemotron.config.paths.OUTPUT_FOLDER_KEYS` and every key an artifact fills) that name
#: a file or folder a training job reads or writes.
PATH_KEYS = ("checkpoint.load", "checkpoint.pretrained_checkpoint", "logger.tensorboard_dir", "logger.log_dir",
             "data.per_split_data_args_path")


def check(compiled: Any, profile: ExecutorProfile | None, plan: Any, problems: list[Problem], notes: list[str]) -> None:
    """Append to ``problems`` and ``notes`` what the profile says about the planned job ``plan``.

    * ``nodes`` (a Slurm profile's node budget): a stage planned on more nodes (``run.env.nodes``) is an
      error naming both numbers; one planned on fewer runs on its own count, said as a note.
    * ``ntasks_per_node``: describes the training launch, one task per GPU: a ``torchrun`` stage must start that
      many processes per node (its ``gpus_per_node``; Slurm gets one task per node, torchrun spawning one process
      per GPU), else an error with the reason. A stage that launches otherwise (``ray``, ``python``: one process
      per node) uses its own count, said as a note, as for ``nodes``.
    * ``address`` of a ``ray`` profile (:func:`ray_profile_problems`): something answers there.
    * a Slurm profile without ``job_dir`` (:func:`unset_storage_problems`): a warning saying where its jobs,
      data and checkpoints would go (this machine's ``$NEMOTRON_HOME/jobs``) and the keys to set.
    * storage (:func:`storage_problems`): on a Slurm profile whose nodes do not share this machine's file
      system as it is (a container, or an ``ssh`` tunnel), every path the job reads or writes lies on storage
      the profile declares.
    """
    if profile is None:
        return
    from nemotron.profiles.schema import RaySettings, SlurmSettings  # loaded with the profile already

    if isinstance(profile.settings, RaySettings):
        problems.extend(ray_profile_problems(profile.narrow(RaySettings)))
    elif isinstance(profile.settings, SlurmSettings):
        slurm = profile.narrow(SlurmSettings)
        problems.extend(shape_problems(slurm, plan, notes))
        problems.extend(unset_storage_problems(slurm))
        problems.extend(storage_problems(compiled, slurm, plan))
        problems.extend(mount_space_problems(slurm, plan))


#: Seconds the ``ray-address`` probe tries to connect to a ``ray`` profile's ``address``.
RAY_PROBE_SECONDS = 2.0


def ray_profile_problems(profile: Profile[RaySettings]) -> list[Problem]:
    """Rule ``ray-address``: an error when nothing answers at a ``ray`` profile's ``address`` (a TCP connect of at
    most :data:`RAY_PROBE_SECONDS`, :func:`nemotron.data.raypool.probe_address`): the run submits there through
    Ray's job submission API and would fail (:func:`nemotron.launch.records.ray_client`), so the dry-run says so too."""
    from nemotron.data.raypool import probe_address

    address = profile.settings.address
    reason = probe_address(address, timeout_s=RAY_PROBE_SECONDS)
    if reason is None:
        return []
    return [Problem(f"profile.{profile.name}.address", address,
                    f"{reason}; the run submits its job there and would fail",
                    "start the Ray cluster (ray start --head --dashboard-host=0.0.0.0), or set address in env.toml to "
                    "its dashboard (http://HOST:8265) or Ray Client (ray://HOST:10001) address", rule="ray-address")]


def shape_problems(profile: Profile[SlurmSettings], plan: Any, notes: list[str]) -> list[Problem]:
    """Problems (and, in ``notes``, remarks) of the profile's ``nodes`` and ``ntasks_per_node`` for ``plan``."""
    out: list[Problem] = []
    budget = profile.settings.nodes
    if budget is not None:
        if plan.nodes > budget:
            out.append(Problem("run.env.nodes", plan.nodes, rule="profile-nodes",
                               message=f"{plan.stage.title} needs {plan.nodes} nodes; profile {profile.name} allows at "
                                       f"most {budget} (its key nodes)",
                               valid=f"run.env.nodes <= {budget} with a layout that fits, or a profile with nodes >= "
                                     f"{plan.nodes} (profile.nodes={plan.nodes} for this command)"))
        elif plan.nodes < budget:
            notes.append(f"profile {profile.name} allows up to {budget} nodes (its key nodes); {plan.stage.title} "
                         f"runs on the {plan.nodes} node{'s' if plan.nodes != 1 else ''} its layout needs "
                         "(run.env.nodes)")
    tasks = profile.settings.ntasks_per_node
    if tasks is None:
        return out
    if plan.launch == "torchrun" and plan.gpus_per_node:
        if tasks != plan.gpus_per_node:
            out.append(Problem(f"profile.{profile.name}.ntasks_per_node", tasks, rule="profile-ntasks",
                               message=f"disagrees with the stage's launch: {plan.stage.title} starts one process per "
                                       f"GPU ({plan.gpus_per_node} GPUs per node)",
                               valid=f"{plan.gpus_per_node}, or leave ntasks_per_node out of the profile (the stage's "
                                     f"launch decides; profile.ntasks_per_node=null for this command)"))
    elif tasks != 1:
        notes.append(f"profile {profile.name}'s ntasks_per_node = {tasks} describes the training launch (one task per "
                     f"GPU); {plan.stage.title} starts one process per node (launch {plan.launch}) and uses its own "
                     "count (1)")
    return out


#: The storage keys whose absence sends a Slurm profile's jobs to this machine's ``$NEMOTRON_HOME/jobs``.
UNSET_STORAGE_KEYS = ("job_dir", "data_root", "checkpoint_root")


def unset_storage_problems(profile: Profile[SlurmSettings]) -> list[Problem]:
    """Rule ``profile-storage-unset``: a warning when a Slurm profile leaves ``job_dir`` unset (the seed
    documents' ``[YOUR-CLUSTER]`` example does), so that job folders (and, unless set, ``data_root`` and
    ``checkpoint_root``, :mod:`nemotron.profiles.profile`'s defaults on the job folder) go under this machine's
    ``$NEMOTRON_HOME/jobs``, which every job mounts: rarely shared storage, never sized for checkpoints. It
    names the unset keys, where each would go and the keys to set; none when ``job_dir`` is set (in env.toml
    or by a ``profile.job_dir=`` override)."""
    if profile.provenance.get("job_dir") != "default":
        return []
    s = profile.settings
    unset = [k for k in UNSET_STORAGE_KEYS if getattr(s, k) is None or profile.provenance.get(k) == "default"]
    where = "; ".join(f"{k} -> {getattr(s, k)}" if getattr(s, k) else f"{k} -> the stage config's own default"
                      for k in unset)
    return [Problem("", None, rule="profile-storage-unset", severity="warning",
                    message=f"profile {profile.name} ({profile.source}) sets none of {', '.join(unset)}: the jobs' "
                            "folders, data and checkpoints "
                            f"go under this machine's $NEMOTRON_HOME/jobs ({where}), and the jobs mount it; the "
                            "cluster's nodes must see that folder and it must hold the checkpoints",
                    valid=f"set job_dir, data_root and checkpoint_root in [{profile.name}] to shared storage the nodes "
                          "see (e.g. job_dir = \"/lustre/my-project/nemotron-jobs\", data_root = "
                          "\"/lustre/my-project/data\", checkpoint_root = \"/lustre/my-project/checkpoints\"; "
                          "docs/profiles.md), or profile.job_dir=/PATH for one command")]


def visible_roots(profile: Profile[SlurmSettings]) -> list[tuple[str, str]]:
    """``(folder, the profile key that declares it)`` of the storage a Slurm profile's nodes see: each
    mount's host side, ``data_root``, ``checkpoint_root``, ``index_cache_dir``, ``hf_home`` and ``job_dir``
    (as written and as the job reaches it)."""
    from nemotron.profiles.schema import shell_safe_root

    roots: list[tuple[str, str]] = []
    s = profile.settings
    for i, mount in enumerate(s.mounts):
        roots.append((mount.split(":", 1)[0], f"mounts[{i}]"))
    for key, value in s.storage().items():
        if value:
            roots.append((str(value), key))
    job_dir = s.job_dir
    if job_dir:
        roots.append((str(job_dir), "job_dir"))
        roots.append((shell_safe_root(str(job_dir)), "job_dir"))
    return roots


def mount_space_problems(profile: Profile[SlurmSettings], plan: Any) -> list[Problem]:
    """Rule ``container-mount-space``: a job in a container (``plan.image``) mounts each storage root (``data_root``,
    ``checkpoint_root``, ``index_cache_dir``, ``hf_home``) that no ``mounts`` entry covers at its own path
    (:func:`nemotron.launch.submit.container_mounts`); pyxis hands each mount to enroot as one whitespace-separated
    ``SRC DST FLAGS`` entry (pyxis ``args.c``, ``add_mount``), so a root with whitespace fails at the job's start.
    ``job_dir`` is reached through a space-free alias (:func:`nemotron.profiles.schema.shell_safe_root`); a storage
    root cannot be: the config's paths name it as written, and the container would not have that path. One error
    per such key, naming the profile and its file."""
    if getattr(plan, "image", None) is None:
        return []
    s = profile.settings
    out = []
    for key, value in s.storage().items():
        text = str(value) if value else ""
        if not text or not re.search(r"\s", text) or any(_under(text, m.split(":", 1)[0]) for m in s.mounts):
            continue
        parent, rest = text.rstrip("/"), []
        while re.search(r"\s", parent):  # the nearest ancestor without whitespace, the rest joined with '-'
            parent, name = os.path.split(parent)
            rest.insert(0, name)
        link = os.path.join(parent, re.sub(r"\s+", "-", "-".join(rest)))
        out.append(Problem(f"profile.{profile.name}.{key}", text, rule="container-mount-space",
                           message=f"contains whitespace ({profile.source}); the job mounts it into its container and "
                                   "pyxis gives each mount to enroot as one whitespace-separated 'SRC DST FLAGS' "
                                   "entry, so the job would fail at start (job_dir gets a space-free alias; "
                                   f"{key} cannot: the stage's paths name it as written)",
                           valid=f"a path without whitespace, e.g. a symlink to it: ln -s {shlex.quote(text)} {link}, "
                                 f"then {key} = \"{link}\" in [{profile.name}]"))
    return out


def _under(path: str, root: str) -> bool:
    path, root = os.path.normpath(path), os.path.normpath(root)
    return root == os.sep or path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def storage_problems(compiled: Any, profile: Profile[SlurmSettings], plan: Any) -> list[Problem]:
    """An error for each path the job reads or writes that lies outside the storage the profile says its
    nodes see (:func:`visible_roots`), naming the path, the config key and the artifact (name and version)
    it came from. Checked keys: every key an artifact fills (``${art:...}``), the output and checkpoint
    folders (:data:`nemotron.config.paths.OUTPUT_FOLDER_KEYS`, :data:`PATH_KEYS`) and every absolute path set on
    the command line. Only for a job in a container or submitted over ``ssh``: a host-Python job through
    a local tunnel runs on nodes that share this machine's file system."""
    if plan.image is None and not profile.settings.over_ssh:
        return []
    from nemotron.config.compile import OVERRIDE

    keys = set(OUTPUT_FOLDER_KEYS) | set(PATH_KEYS) | set(compiled.artifact_keys) | _artifact_wired(compiled)
    roots = visible_roots(profile)
    out = []
    for key, value in leaves(compiled.config):
        if not isinstance(value, str) or not value.startswith("/") or "${" in value:
            continue
        if key not in keys and compiled.provenance.get(key) != OVERRIDE:
            continue
        if any(_under(value, root) for root, _ in roots):
            continue
        artifact = compiled.artifact_keys.get(key)
        origin = f"from artifact {artifact}" if artifact else f"set by {compiled.provenance.get(key, 'the config')}"
        declared = ", ".join(dict.fromkeys(f"{k} {r}" for r, k in roots)) or "none"  # job_dir once when shell-safe
        make = ""
        if artifact:

            command = producer_command(artifact.split()[0], compiled.config_name)
            if command:
                make = f"make it on this profile: {command}{getattr(compiled, 'launch_args', '')}; or "
        out.append(Problem(key, value, rule="cluster-storage",
                           message=f"({origin}) is not on storage the nodes of profile {profile.name} see "
                                   f"(declared: {declared}); the job would not find it",
                           valid=f"a path under the profile's mounts, data_root, checkpoint_root or job_dir: {make}"
                                 "set the key to a cluster path (an artifact version made there: "
                                 "${art:NAME:VERSION,FIELD}), or add a mount"))
    return out


def _artifact_wired(compiled: Any) -> set[str]:
    """Keys the config's files wire to an artifact (``${art:...}``), resolved or not."""
    try:
        from nemotron.config.compile import _raw_tree

        return {k for k, v in leaves(_raw_tree(compiled.stage, compiled.config_name))
                if isinstance(v, str) and "${art:" in v}
    except Exception:  # the compile already reported a broken config chain
        return set()


def warning_signal_problem(seconds: Any, profile: Profile[SlurmSettings]) -> Problem | None:
    """The error of a warning signal ``seconds`` (``run.signal_before_s``) that would come at or before the start
    of a Slurm job on ``profile`` (its ``time``, else :data:`DEFAULT_TIME`); None when it comes before the limit,
    the profile has no limit, or ``seconds`` is unset. Validation lists it with every other problem; submission
    refuses with it (:func:`_warning_signal`)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        return None
    from nemotron.profiles.schema import DEFAULT_TIME, parse_slurm_time  # pydantic: loaded only when asked

    limit_text = profile.settings.time or DEFAULT_TIME
    limit = parse_slurm_time(limit_text)
    if limit is None or seconds < limit:  # None: no time limit, any warning time comes before it
        return None
    return Problem("run.signal_before_s", seconds, rule="signal-before-limit",
                   message=f"the warning signal must come before the job's time limit ({limit_text} = {limit} s, "
                           f"profile {profile.name} key time)",
                   valid=f"set run.signal_before_s below {limit} or give the profile a longer time")
