"""The cluster RLVR route on one GPU: NeMo RL's GRPO with Megatron generation (a script for a machine with one NVIDIA
GPU; never a CI test). Status: packed and checked on the CPU, not yet run on a GPU (docs/gpu_run.md).

    python bench/gpu_rl.py --data DIR --out OUT [--model HF_FOLDER] [--tokenizer DIR] [KEY=VALUE ...]

What runs is the job the Ray head of a cluster job runs for ``nemotron ultra3 rlvr -c tiny``, on one GPU:

* the config: ``-c tiny`` compiled, prepared and validated by our own compiler and dry-run rules (as
  ``bench/gpu_megatron.py``'s ``compile_job`` does), with :data:`ONE_GPU_RL` on top (the catalogue's ``small``
  NemotronH at TP1 PP1 EP1 CP1 on one node of one GPU, NeMo RL's Megatron generation colocated with training — no
  vLLM —, 2 prompts x 4 generations a step, 4 steps, a checkpoint every 2) and the inputs as paths
  (:func:`rl_overrides`: this machine has no artifact store); extra ``KEY=VALUE`` arguments go last;
* the entry: ``stages/ultra3/rlvr/run.py --config train.yaml`` (``backend: nemo-rl``), i.e.
  :func:`nemotron.runtime.rl.nemo_rl.rlvr_main`: our precheck (NeMo RL and Megatron-Bridge importable, flashinfer
  and a FlashAttention Megatron-Core's dynamic batching accepts — the two stops of 2026-12-06 —, the policy
  folder, the data files, the GPU count, the host RAM of the export), the v4 view of the policy's ``config.json``,
  the translation, NeMo RL's own ``examples/run_grpo.py`` as a child process, then :func:`~nemotron.runtime.rl.
  nemo_rl.finish` (NeMo RL's converter turns the newest ``step_N`` into ``hf/step_N``, linked from ``hf/latest``);
* Ray: as our Slurm job's head does (``src/nemotron/templates/ray_slurm.sub.j2``), ``ray start --head --block`` of
  this machine first (its GPU and cores, usage stats off, a temporary folder of its own), then the entry with
  ``RAY_ADDRESS`` set; NeMo RL's ``init_ray`` attaches to it (a cluster without its tag is "externally managed"),
  and at the end that ``ray start`` is stopped, which stops the Ray processes it started (never another cluster). ``--ray local`` leaves it to ``init_ray`` (which starts a local cluster when none answers);
* the policy: ``--model`` (a Hugging Face NemotronH folder: what ``convert`` exports), else the catalogue's
  ``small`` freshly initialised (seed 3, as ``bench/gpu_local_pipe.sh`` makes its base) with the tokenizer folder
  ``--tokenizer`` (the Tekken vocabulary with our Nemotron 3 chat template: ``bench/gpu_rl_pack.sh`` carries it)
  saved beside it; its MTP depth (``num_nextn_predict_layers`` of its ``config.json``: 0 for a transformers-built
  model) sets ``policy.megatron_cfg.mtp_num_layers`` (:func:`mtp_overrides`: removed for 0, Megatron-Bridge has no MTP weights to
  import);
* NeMo RL's workers run in this Python (``NEMO_RL_PY_EXECUTABLES_SYSTEM=1``: its registry would otherwise start
  each worker under ``uv run --extra mcore``, which needs a package index), with this ``PYTHONPATH``; its one-time
  HF -> Megatron import of the policy goes to ``WORK/mcore-import`` (``NRL_MEGATRON_CHECKPOINT_DIR``), emptied first.

Everything lands in ``--out``: ``train.yaml`` (the compiled config), ``dry-run.txt``, ``rlvr.log`` (the job's output,
NeMo RL's included), ``summary.json`` / ``summary.md``: exit code, wall time, per-step reward and loss parsed from
NeMo RL's log (:func:`parse_steps`), the saved ``step_N`` folders, the Hugging Face conversion ``finish()`` made
(``hf/latest``, its ``config.json``, ``outputs.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

#: ``rlvr -c tiny`` made to fit one GPU. Layout: the catalogue's ``small`` at TP1 PP1 EP1 CP1 without sequence
#: parallelism, one node of one GPU (``run.env``: ``cluster.*`` and the colocated generation resources follow it);
#: the MoE dispatcher alltoall (the recipe's flex/HybridEP is the GB200 NVL72 multi-node NVLink dispatcher); the
#: optimizer on the GPU (tiny offloads it for the 32 B-parameter slice), in FP32 (no precision-aware optimizer),
#: synchronous checkpoint saves. Generation: NeMo RL's Megatron backend (``nemo_rl/models/generation/megatron``),
#: colocated with training (tiny's ``colocated.enabled: true``): it generates with the training model itself
#: (``dedicated_inference_megatron_cfg`` is None when the layouts agree), so no vLLM; its engine settings are NeMo
#: RL's ``grpo_math_1B.yaml`` ``mcore_generation_config`` with CUDA graphs off (eager: no capture at start-up for
#: 4 steps) and a 4 GB KV buffer (the small model at 512 tokens needs far less than the example's 10 GB).
#: Batch: 2 prompts x 4 generations = 8 samples a step = the global batch, micro-batch 1; 512-token sequences of at
#: most 256 new tokens; 4 steps, a checkpoint every 2 (steps 2 and 4); validation off (``grpo.val_period=0``,
#: ``val_at_end=false``), so no validation metric names the best checkpoint (``checkpointing.metric_name=null``:
#: NeMo RL keeps the newest). Math verification on 2 CPU workers. Logging: NeMo RL's stdout only (TensorBoard and
#: the GPU monitor off). The contract test ``tests/contract/test_nemo_rl.py`` (variant ``rlvr-tiny-1gpu``) runs NeMo
#: RL's own loading, ``MasterConfig`` and ``setup()`` checks on this config in CI.
ONE_GPU_RL = [
    "model.name=small", "run.env.nodes=1", "run.env.gpus_per_node=1",
    "policy.megatron_cfg.tensor_model_parallel_size=1", "policy.megatron_cfg.pipeline_model_parallel_size=1",
    "policy.megatron_cfg.expert_model_parallel_size=1", "policy.megatron_cfg.expert_tensor_parallel_size=1",
    "policy.megatron_cfg.context_parallel_size=1", "policy.megatron_cfg.sequence_parallel=false",
    "policy.megatron_cfg.moe_token_dispatcher_type=alltoall",
    "policy.megatron_cfg.optimizer.optimizer_cpu_offload=false",
    "policy.megatron_cfg.optimizer.use_precision_aware_optimizer=false",
    "policy.megatron_cfg.checkpoint.async_save=false",
    "policy.generation.backend=megatron",
    "+policy.generation.mcore_generation_config.max_model_len=512",
    "+policy.generation.mcore_generation_config.cuda_graph_impl=none",
    "+policy.generation.mcore_generation_config.buffer_size_gb=4",
    "+policy.generation.mcore_generation_config.num_cuda_graphs=1",
    "+policy.generation.mcore_generation_config.block_size_tokens=256",
    "+policy.generation.mcore_generation_config.use_cuda_graphs_for_non_decode_steps=false",
    "+policy.generation.mcore_generation_config.enable_chunked_prefill=true",
    "+policy.generation.mcore_generation_config.enable_prefix_caching=false",
    "+policy.generation.mcore_generation_config.max_tokens=16384",
    "+policy.generation.mcore_generation_config.kv_cache_management_mode=persist",
    "+policy.generation.mcore_generation_config.materialize_only_last_token_logits=true",
    "+policy.generation.mcore_generation_config.num_speculative_tokens=0",
    "+policy.generation.mcore_generation_config.refit_backend=nccl",
    "+policy.generation.mcore_generation_config.parsers=[]",
    "+policy.generation.mcore_generation_config.expose_http_server=false",
    "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4", "grpo.max_num_steps=4",
    "policy.train_global_batch_size=8", "policy.train_micro_batch_size=1", "policy.generation_batch_size=8",
    "policy.max_total_sequence_length=512", "policy.generation.max_new_tokens=256",
    "checkpointing.save_period=2", "checkpointing.metric_name=null",
    "grpo.val_period=0", "grpo.val_at_end=false", "grpo.max_val_samples=8", "grpo.val_batch_size=8",
    "env.math.num_workers=2", "logger.tensorboard_enabled=false", "logger.monitor_gpus=false",
]

#: ``mopd -c tiny`` made to fit one GPU, as far as NeMo RL 7ea279a's configuration lets it (checked on the CPU only;
#: no runner uses it yet: docs/gpu_run.md "MOPD on one GPU: what it needs" says what a run still lacks). It is
#: :data:`ONE_GPU_RL` with these changes:
#:
#: * ``run.env.nodes=2`` (``cluster.num_nodes: 2`` of one GPU each): NeMo RL reserves whole Ray nodes for its
#:   non-colocated OPD teachers — the only teachers it has — and asserts a node left for the policy
#:   (nemo_rl/algorithms/grpo.py ``setup``, ``policy_nodes must be > 0 after reserving OPD teacher nodes``; our rule
#:   ``rl-node-total``), so one node of one GPU is refused. Two Ray nodes of ``--num-gpus 1`` on the one host (a
#:   second raylet joined to the head, both seeing GPU 0) is the layout this config describes; untried on a GPU;
#: * ``policy.generation.colocated.enabled=true``: the student trains and generates on its node (tiny has a
#:   generation node of its own); NeMo RL's async GRPO — the only loop with teachers — allows colocation with the
#:   Megatron backend only;
#: * ``mcore_generation_config.expose_http_server=true``: NeMo Gym needs the generation backend's OpenAI-compatible
#:   server (nemo_rl/environments/nemo_gym.py ``should_use_nemo_gym`` asserts it); Megatron-Core's is Quart +
#:   Hypercorn on the policy's rank 0;
#: * the teacher at EP 1 (tiny's teacher runs EP 8 on its 8-GPU node) on its one GPU, ``num_nodes: 1``,
#:   ``gpus_per_node: 1`` (the layout rule sets the latter from the profile);
#: * ``grpo.max_val_samples=null``: NeMo RL's Gym entry refuses a number (it validates on the whole set).
ONE_GPU_MOPD = [
    *(o for o in ONE_GPU_RL if not o.startswith(
        ("run.env.nodes=", "grpo.max_val_samples=", "+policy.generation.mcore_generation_config.expose_http_server="))),
    "run.env.nodes=2", "policy.generation.colocated.enabled=true",
    "+policy.generation.mcore_generation_config.expose_http_server=true",
    "on_policy_distillation.non_colocated_teachers.default_teacher_cfg.expert_model_parallel_size=1",
    "grpo.max_val_samples=null",
]

#: NeMo RL's per-step lines (nemo_rl/algorithms/grpo.py ``grpo_train``: the step banner, then the results block).
_STEP = re.compile(r"=+\s*Step\s+(\d+)\s*/\s*(\d+)\s*=+")
_FIGURE = re.compile(r"^\s*(?:[^\w\s]\s*)?(Loss|Avg Reward|Mean Generation Length|Average Reward|Reward)\s*:\s*"
                     r"(-?[\d.]+(?:e[-+]?\d+)?)", re.IGNORECASE)


def rl_overrides(model: Path, data: Path, ckpt: Path, mtp_layers: int = 0, extra: list[str] | None = None) -> list[str]:
    """:data:`ONE_GPU_RL` with the inputs as paths: the policy folder ``model`` (also the tokenizer: NeMo RL reads
    ``policy.tokenizer.name``), ``data/train.jsonl`` and ``data/validation.jsonl`` (``nemotron ultra3 data prep rl
    -c tiny``'s output folder), the checkpoint folder ``ckpt``; ``mtp_layers`` of the policy (:func:`mtp_overrides`);
    ``extra`` overrides last."""
    return [*ONE_GPU_RL, f"policy.model_name={model}", f"policy.tokenizer.name={model}",
            f"data.train.data_path={data / 'train.jsonl'}", f"data.validation.data_path={data / 'validation.jsonl'}",
            f"checkpointing.checkpoint_dir={ckpt}", *mtp_overrides(mtp_layers), *(extra or [])]


def mtp_overrides(mtp_layers: int) -> list[str]:
    """``policy.megatron_cfg.mtp_num_layers`` for a policy with ``mtp_layers`` MTP depths: that number, or for 0 the
    key removed (NeMo RL's ``MegatronConfig`` types it ``NotRequired[int]``: null is refused by ``MasterConfig``;
    absent, Megatron-Bridge's provider keeps the Hugging Face config's, no MTP block, and NeMo RL's
    ``_apply_mtp_config`` leaves it alone)."""
    return [f"policy.megatron_cfg.mtp_num_layers={mtp_layers}"] if mtp_layers > 0 else \
        ["~policy.megatron_cfg.mtp_num_layers"]


def mtp_depth(model: Path) -> int:
    """``num_nextn_predict_layers`` of ``model/config.json`` (0 when absent or unreadable: no MTP block to import)."""
    try:
        return int(json.loads((model / "config.json").read_text()).get("num_nextn_predict_layers") or 0)
    except (OSError, ValueError, TypeError):
        return 0


def compile_job(args: list[str], path: Path, profile=None) -> dict:
    """``train.yaml`` of ``rlvr -c tiny`` with ``args``, as the CLI writes it (compiled, prepared, validated against
    ``profile``, None = this machine: any error stops here, one line each)."""
    from nemotron import validation
    from nemotron.config.compile import compile_config, write_yaml
    from nemotron.config.registry import get_stage

    stage = get_stage("rlvr")
    compiled = compile_config(stage, "tiny", args)
    validation.prepare(stage, compiled.config, compiled.user_keys, profile)
    errors = [f"{p.key}={p.value!r}: {p.message}" for p in validation.validate(stage, compiled.config, profile)
              if p.severity == "error"]
    if errors:
        sys.exit("the one-GPU rlvr config does not validate:\n  " + "\n  ".join(errors))
    write_yaml(compiled, path)
    return compiled.config


def make_base(folder: Path, tokenizer: Path, seed: int = 3) -> Path:
    """The catalogue's ``small`` NemotronH freshly initialised (``seed``), saved as a Hugging Face folder with the
    tokenizer files of ``tokenizer`` beside its weights (as bench/gpu_local_pipe.sh makes its base). Kept when
    ``folder/config.json`` exists."""
    if (folder / "config.json").is_file():
        return folder
    from nemotron.config import catalogue
    from nemotron.runtime.common import model as modelmod

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    modelmod.build(catalogue.get("small"), seed).save_pretrained(str(tmp))
    for f in tokenizer.iterdir():
        if f.is_file():
            shutil.copy2(f, tmp / f.name)
    os.replace(tmp, folder)
    return folder


def parse_steps(text: str) -> list[dict]:
    """Per-step figures of NeMo RL's GRPO log: ``[{"step": N, "loss": x, "reward": y, ...}]`` in log order, from the
    ``===== Step N/M =====`` banner and the ``Loss:`` / ``Avg Reward:`` / ``Mean Generation Length:`` lines that
    follow it (nemo_rl/algorithms/grpo.py prints them each step; keys lower-cased, spaces as ``_``)."""
    steps: list[dict] = []
    for line in text.splitlines():
        m = _STEP.search(line)
        if m:
            steps.append({"step": int(m.group(1)), "of": int(m.group(2))})
            continue
        f = _FIGURE.match(line)
        if f and steps:
            key = f.group(1).lower().replace(" ", "_")
            steps[-1].setdefault("reward" if "reward" in key else key, float(f.group(2)))
    return steps


def ray_head(env: dict, temp: Path, log: Path, timeout: float = 180) -> tuple[str, subprocess.Popen]:
    """``ray start --head --block`` on this machine, as the Slurm job's head (``ray_slurm.sub.j2``: usage stats off,
    its GPU and cores, a temporary folder of its own; ``--block`` so that stopping that one process stops the Ray
    processes it started, and no other Ray cluster of the machine): ``(address, the process)``. The address is read
    from its log once it is up. Raises ``RuntimeError`` with the log's tail when it exits or is not up in
    ``timeout`` seconds."""
    temp.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--port=0",
           "--num-cpus", str(os.cpu_count() or 1), "--disable-usage-stats", "--include-dashboard=false",
           f"--temp-dir={temp}"]
    try:
        import torch

        cmd += ["--num-gpus", str(torch.cuda.device_count())]
    except ImportError:
        pass
    fh = log.open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        text = log.read_text(errors="replace")
        m = re.search(r"ray start --address='([^']+)'", text)
        if m:
            return m.group(1), proc
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    stop_ray(proc)
    raise RuntimeError(f"ray start --head did not come up (exit {proc.returncode}): {log.read_text(errors='replace')[-1500:]}")


def stop_ray(proc: subprocess.Popen, grace: float = 60) -> None:
    """Stop the Ray head of :func:`ray_head`: SIGTERM to its ``ray start --block`` (which stops what it started), then
    SIGKILL to its process group after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def job_env(stash_site: str | None = None) -> dict[str, str]:
    """The environment of the job: this one plus NeMo RL's system-Python workers, offline Hugging Face, unbuffered
    output, and the framework waiver of the bare machine (its versions are not the nemo-rl image's)."""
    env = {**os.environ, "NEMO_RL_PY_EXECUTABLES_SYSTEM": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0",
           "NEMOTRON_SKIP_FRAMEWORK_CHECK": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # Ray's workers get theirs from NeMo RL; a torchrun leftover would mislead them
    return env


def summarize(ckpt: Path, log_text: str, rc: int, seconds: float) -> dict:
    """summary.json's figures: exit code, wall time, :func:`parse_steps`, the ``step_N`` folders NeMo RL saved, the
    Hugging Face conversion (``hf/latest`` and its ``config.json``) and the run's ``outputs.json`` record."""
    from nemotron.runtime.rl import nemo_rl

    steps = parse_steps(log_text)
    saved = sorted(int(p.name[5:]) for p in ckpt.glob("step_*") if p.is_dir() and p.name[5:].isdigit())
    latest = nemo_rl.hf_output(ckpt)
    hf = {"latest": os.readlink(latest) if latest.is_symlink() else None,
          "config_json": (latest / "config.json").is_file(),
          "files": sorted(f.name for f in latest.iterdir()) if latest.is_dir() else []}
    if hf["config_json"]:
        cfg = json.loads((latest / "config.json").read_text())
        hf["config"] = {k: cfg.get(k) for k in ("model_type", "num_hidden_layers", "hybrid_override_pattern",
                                                 "layers_block_type", "hidden_size", "torch_dtype", "dtype")}
    return {"rc": rc, "wall_s": round(seconds, 1), "steps": steps, "steps_logged": len(steps), "saved_steps": saved,
            "hf": hf, "reward": [s.get("reward") for s in steps], "loss": [s.get("loss") for s in steps]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="`nemotron ultra3 data prep rl -c tiny`'s output folder "
                                                             "(train.jsonl, validation.jsonl)")
    ap.add_argument("--out", type=Path, required=True, help="folder for summary.json, summary.md and the logs")
    ap.add_argument("--work", type=Path, default=None, help="folder for the base, the run and checkpoints (OUT/work)")
    ap.add_argument("--model", type=Path, default=None, help="the policy: a Hugging Face NemotronH folder (default: "
                                                             "a fresh `small` made in WORK/base)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="tokenizer folder for the fresh base (with a chat "
                                                                 "template: NeMo RL's math processor applies it)")
    ap.add_argument("--ray", choices=("head", "local"), default="head", help="head: `ray start --head` first, as the "
                    "Slurm job does; local: NeMo RL's init_ray starts its own")
    ap.add_argument("--timeout", type=float, default=480, help="seconds the job may run (then SIGKILL to its group)")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides after ONE_GPU_RL")
    args = ap.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = (args.work or out / "work").resolve()
    work.mkdir(parents=True, exist_ok=True)
    summary: dict = {"stage": "rlvr", "config": "tiny", "overrides": list(ONE_GPU_RL) + args.overrides}
    t0 = time.monotonic()
    try:
        import torch

        summary["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        summary["torch"] = torch.__version__
    except ImportError:
        summary["gpu"] = None
    for mod in ("nemo_rl", "ray", "megatron.bridge", "megatron.core", "transformer_engine", "mamba_ssm",
                "causal_conv1d", "transformers"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            summary.setdefault("stack", {})[mod] = getattr(m, "__version__", "?")
        except Exception as exc:  # the job's own precheck says the same, in its log
            summary.setdefault("stack", {})[mod] = f"not importable: {type(exc).__name__}: {exc}"[:300]

    def finish(code: int) -> int:
        summary["bench_wall_s"] = round(time.monotonic() - t0, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        (out / "summary.md").write_text(markdown(summary))
        print(markdown(summary))
        return code

    if args.model is not None:
        model = args.model.resolve()
        summary["policy"] = {"what": "given (--model)", "folder": str(model)}
    else:
        tok = args.tokenizer or ROOT / "output" / "ultra3" / "sft-data" / "tiny" / "tokenizer"
        if not (tok / "tokenizer_config.json").is_file():
            summary["error"] = (f"--tokenizer {tok}: no tokenizer_config.json (the fresh base needs the tokenizer "
                                "folder gpu_rl_pack.sh carries, or pass --model)")
            print(summary["error"], file=sys.stderr)
            return finish(2)
        model = make_base(work / "base", tok.resolve())
        summary["policy"] = {"what": "fresh catalogue `small`, seed 3", "folder": str(model), "tokenizer": str(tok)}
    ckpt = work / "ckpt"
    shutil.rmtree(ckpt, ignore_errors=True)  # a fresh run, never a resume of an earlier one
    job_args = rl_overrides(model, args.data.resolve(), ckpt, mtp_depth(model), args.overrides)
    cfg_path = out / "train.yaml"
    try:
        compile_job(job_args, cfg_path)
    except SystemExit as exc:  # the config does not validate: its lines go into summary.json too
        summary["error"] = str(exc)
        print(summary["error"], file=sys.stderr)
        return finish(2)
    dry = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "rlvr", "-c", "tiny", "--dry-run", *job_args],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "160"})
    (out / "dry-run.txt").write_text(dry.stdout + dry.stderr)
    summary["dry_run_verdict"] = (dry.stdout.splitlines() or [""])[0]

    env = job_env()
    env["NEMOTRON_RUN_DIR"] = str(work / "run")
    # NeMo RL converts the HF policy to a Megatron checkpoint once, under NRL_MEGATRON_CHECKPOINT_DIR (default
    # $HF_HOME/nemo_rl), and reuses one found there by the model's path (nemo_rl/models/megatron/setup.py): a
    # folder of this run's own, emptied, so that an earlier run's base is never reused
    mcore = work / "mcore-import"
    shutil.rmtree(mcore, ignore_errors=True)
    env["NRL_MEGATRON_CHECKPOINT_DIR"] = str(mcore)
    head: subprocess.Popen | None = None
    if args.ray == "head":
        try:
            address, head = ray_head(env, work / "ray", out / "ray-start.log")
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            summary["error"] = f"the Ray head did not start: {exc}"[:2000]
            return finish(1)
        env["RAY_ADDRESS"] = address
        summary["ray"] = {"mode": "head", "address": address}
    else:
        summary["ray"] = {"mode": "local (NeMo RL's init_ray)"}
    log = out / "rlvr.log"
    t1 = time.monotonic()
    rc = None
    try:
        with log.open("w") as fh:
            proc = subprocess.Popen([sys.executable, str(ROOT / "stages/ultra3/rlvr/run.py"), "--config", str(cfg_path)],
                                    cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
                summary["timed_out"] = f"killed after --timeout {args.timeout:g} s"
    finally:
        if head is not None:
            stop_ray(head)
    text = log.read_text(errors="replace")
    summary.update(summarize(ckpt, text, rc, time.monotonic() - t1))
    outputs = work / "run" / "outputs.json"
    if not outputs.is_file():
        outputs = ROOT / "outputs.json"
    summary["outputs_json"] = json.loads(outputs.read_text()) if outputs.is_file() else None
    summary["tail"] = text[-3000:]
    for rel in ("nemo_rl_config.yaml",):
        if (work / "run" / rel).is_file():
            shutil.copy(work / "run" / rel, out / rel)
    ok = rc == 0 and summary["saved_steps"] and summary["hf"]["config_json"]
    return finish(0 if ok else 1)


def markdown(s: dict) -> str:
    lines = ["| figure | value |", "|---|---|"]
    for k in ("stage", "gpu", "torch", "stack", "policy", "dry_run_verdict", "ray", "rc", "wall_s", "steps_logged",
              "reward", "loss", "saved_steps", "hf", "timed_out", "error"):
        if k in s:
            lines.append(f"| {k} | `{json.dumps(s[k])}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
