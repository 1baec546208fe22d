"""Stages that need no GPU ask Slurm for none (issue #13, items 6 and 10b): the data prep stages (Ray on CPUs) and
`convert convert.device=cpu` (one process holding the model in host RAM), and the GPU conversion's
process-group timeout.

The dry-run tests read the sbatch script NeMo-Run renders for the submission; the Slurm test submits the CPU
conversion to the real local cluster, where it stops at its container check (Megatron-Bridge cannot load
here) after Slurm has allocated it: what it was given is read back from accounting.
"""

from __future__ import annotations

import datetime
import re
import inspect
from pathlib import Path

import pytest

from config_support import compile_stage
from nemotron.config.registry import get_stage
from nemotron.launch.plan import cpu_only, plan_job
from nemotron.runtime.megatron import megatron_bridge as mb

ROOT = Path(__file__).resolve().parents[2]
ENV_FILE = ROOT / "tests" / "fixtures" / "env.toml"

CPU_PROFILE = """
[cpu-only]
executor = "slurm"
account = "ultra-acct"
partition = "cpu"
time = "02:00:00"
gpus_per_node = 0
job_dir = "/shared/jobs"
"""

#: The checkpoint to convert, on the cluster: under the profiles' checkpoint_root (<job_dir>/checkpoints). A cluster
#: job may read only storage its profile says the nodes see, so a folder of this machine's /tmp is refused.
CLUSTER_CKPT = "/shared/jobs/checkpoints/megatron-ckpt"


def _dry_run(tmp_path, monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    pytest.importorskip("nemo_run", reason="the sbatch script is rendered by NeMo-Run")
    from nemotron.cli.main import main

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    # CLUSTER_CKPT lies on the sample cluster's storage, which this machine does not hold: the one stand-in here
    # says this machine does not see the job's files (as through an SSH tunnel), so rule input-exists (tested in
    # tests/cli/test_cli_refusals.py) does not refuse the cluster path; everything else runs for real
    monkeypatch.setattr("nemotron.validation.inputs.same_files", lambda profile: False)
    code = main(["ultra3", *argv, "--dry-run"])
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def _script(out: str) -> str:
    return out[out.index("#!/bin/bash"):]


def test_cpu_conversion_is_one_process_without_gpus(tmp_path, monkeypatch, capsys):
    """`convert -c tiny convert.device=cpu` on an 8-GPU profile: one task, one process (no torchrun), no GPU
    request; the GPU conversion of the same config keeps torchrun over the node's 8 GPUs."""
    src = CLUSTER_CKPT
    code, out = _dry_run(tmp_path, monkeypatch, capsys, "convert", "-c", "tiny", "convert.device=cpu",
                         f"convert.source={src}", "--batch", "sample", "--env-file", str(ENV_FILE))
    assert code == 0, out[-3000:]
    script = _script(out)
    assert "#SBATCH --ntasks-per-node=1" in script and "#SBATCH --nodes=1" in script
    assert "gpus" not in script and "--gres" not in script and "torchrun" not in script
    step = next(ln for ln in script.splitlines() if ln.startswith("srun --output"))
    assert step.endswith(f"python /shared/jobs/runs/{step.split('/shared/jobs/runs/')[1].split('/')[0]}"
                         "/code/nemotron/_stages/ultra3/convert/run.py --config "
                         f"/shared/jobs/runs/{step.split('/shared/jobs/runs/')[1].split('/')[0]}/train.yaml")
    assert "1       0           1            python   slurm" in out  # nodes, GPUs/node, world size, launch
    code, out = _dry_run(tmp_path, monkeypatch, capsys, "convert", "-c", "tiny", f"convert.source={src}",
                         "--batch", "sample", "--env-file", str(ENV_FILE))
    assert code == 0, out[-3000:]
    assert "#SBATCH --gpus-per-node=8" in out and "torchrun" in out and "--nproc-per-node 8" in out


def test_cpu_conversion_runs_on_a_profile_without_gpus(tmp_path, monkeypatch, capsys):
    """A CPU partition's profile (gpus_per_node = 0) takes the CPU conversion (no "GPU stage" refusal, no
    node-shape disagreement with the GPU layout's run.env.gpus_per_node), and still refuses the GPU one."""
    env = tmp_path / "env.toml"
    env.write_text(CPU_PROFILE)
    src = CLUSTER_CKPT
    code, out = _dry_run(tmp_path, monkeypatch, capsys, "convert", "convert.device=cpu", "run.env.nodes=1",
                         f"convert.source={src}", "--batch", "cpu-only", "--env-file", str(env))
    assert code == 0, out[-3000:]
    assert "#SBATCH --partition=cpu" in out and "gpus" not in _script(out)
    code, out = _dry_run(tmp_path, monkeypatch, capsys, "convert", f"convert.source={src}", "--batch", "cpu-only",
                         "--env-file", str(env))
    assert code == 2 and "ultra3 convert runs on GPUs, but the profile cpu-only declares 0 GPUs per node" in out
    code, out = _dry_run(tmp_path, monkeypatch, capsys, "convert", "convert.device=cpu", f"convert.source={src}",
                         "--batch", "cpu-only", "--env-file", str(env))  # default: 6 nodes
    assert code == 2 and "error: run.env.nodes=6: a CPU conversion runs on one node; valid: 1" in out


@pytest.mark.parametrize("stage", ["data prep pretrain", "data prep sft", "data prep rl"])
def test_data_prep_asks_no_gpus(stage, tmp_path, monkeypatch, capsys):
    """Ray data prep on an 8-GPU profile: neither the allocation (`--gpus-per-node`) nor the Ray head/worker
    steps (`--gres=gpu:N`) ask for GPUs."""
    code, out = _dry_run(tmp_path, monkeypatch, capsys, *stage.split(), "-c", "tiny", "--batch", "sample",
                         "--env-file", str(ENV_FILE))
    assert code == 0, out[-3000:]
    script = _script(out)
    assert "--gpus-per-node" not in script and "--gres" not in script
    assert "1       0           1            ray      slurm" in out


def test_plan_of_cpu_only_stages(tmp_path):
    from nemotron.config.compile import compile_config

    for name in ("data-prep-pretrain", "data-prep-sft", "data-prep-rl"):
        assert cpu_only(get_stage(name), {})
    convert = get_stage("convert")
    assert cpu_only(convert, {"convert": {"device": "cpu"}}) and not cpu_only(convert, {"convert": {"device": "gpu"}})
    assert not cpu_only(get_stage("pretrain"), {"convert": {"device": "cpu"}})
    plan = plan_job(compile_config(convert, "tiny", ["convert.device=cpu", f"convert.source={tmp_path}"]), None)
    assert (plan.launch, plan.gpus_per_node, plan.world_size) == ("python", 0, 1)
    assert plan.command("train.yaml", "python") == ["python", str(plan.entry), "--config", "train.yaml"]


def test_gpu_conversion_timeout_reaches_init_process_group(tmp_path):
    """`dist.distributed_timeout_minutes` (30 in convert's default.yaml) becomes init_process_group's timeout; the
    options bind to torch's real signature."""
    import torch.distributed

    cfg = compile_stage("convert", "tiny", convert__source=str(tmp_path))
    options = mb.process_group_options(cfg["dist"]["distributed_timeout_minutes"])
    assert options == {"backend": "nccl", "timeout": datetime.timedelta(minutes=30)}
    inspect.signature(torch.distributed.init_process_group).bind(**options)
    assert mb.process_group_options(None)["timeout"] == datetime.timedelta(minutes=10)
    with pytest.raises(mb.TranslateError, match=r"dist.distributed_timeout_minutes=0: must be a positive number"):
        mb.process_group_options(0)


def test_cpu_conversion_job_on_slurm_gets_no_gpu_and_one_process(slurm, tmp_path):
    """On the local cluster (8 GPUs declared): the job of `convert -c tiny convert.device=cpu` is allocated no GPU
    (sacct's AllocTRES has no gres/gpu) and runs one process, which stops at its container check (Megatron-Bridge
    cannot load here): its line is in the log once, not once per GPU."""
    pytest.importorskip("nemo_run", reason="submission needs NeMo-Run (a base dependency: reinstall nemotron-cli)")
    import re

    from submit_support import nemotron_runner, write_slurm_profile

    env_file = write_slurm_profile(tmp_path / "env.toml", account=slurm.account, partition=slurm.partition,
                                   gpus_per_node=slurm.gpus_per_node, job_dir=tmp_path / "jobs")
    src = tmp_path / "megatron-ckpt"
    src.mkdir()
    cli = nemotron_runner({**slurm.env, "NEMOTRON_HOME": str(tmp_path / "home")}, tmp_path)
    proc = cli("ultra3", "convert", "-c", "tiny", "convert.device=cpu", f"convert.source={src}",
               f"convert.output_dir={tmp_path / 'hf'}", "--run", "ci", "--env-file", str(env_file))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    job = re.search(r"Slurm job (\d+)", proc.stderr).group(1)
    assert slurm.wait(job, timeout=120) == "FAILED"
    alloc = slurm.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "AllocTRES").stdout.strip()
    assert alloc and "gpu" not in alloc, alloc
    log = "".join(p.read_text() for p in (tmp_path / "jobs").rglob(f"log-*_{job}_*.out"))
    assert log.count("megatron.bridge is not importable here") == 1, log


@pytest.mark.parametrize("device", ["tpu", "GPU", "cuda"])
def test_unknown_convert_device_is_refused_by_the_dry_run(tmp_path, monkeypatch, capsys, device):
    """Only `gpu` and `cpu` are conversions the entry knows; anything else used to render an 8-GPU torchrun job."""
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text("{}", encoding="utf-8")
    code, out = _dry_run(tmp_path, monkeypatch, capsys, "convert", "-c", "tiny", f"convert.device={device}",
                         f"convert.source={src}")
    assert code == 2
    assert re.search(rf"convert.device='{device}': (did you mean '[a-z]+'\? )?valid: gpu", out), out
