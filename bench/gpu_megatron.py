"""One real GPU run of the cluster training path (a script for a machine with one NVIDIA GPU; never a CI test).

    python bench/gpu_megatron.py --blend output/ultra3/pretrain-data/tiny/blend.json --out gpu-run [--iters 60]

What runs is the job a cluster node runs for ``nemotron ultra3 pretrain -c tiny``, on one GPU:

* the config: ``-c tiny`` compiled, prepared and validated by our own compiler and dry-run rules, with
  :data:`ONE_GPU` on top (the catalogue's ``small`` NemotronH — every Ultra block type: Mamba-2, attention, latent
  MoE with a shared expert and sigmoid routing with expert bias, the shared-weight MTP block — at TP1 PP1 EP1 on
  one GPU); ``nemotron ultra3 pretrain --dry-run`` with the same overrides gives the per-GPU memory estimate;
* the entry: ``stages/ultra3/pretrain/run.py --config train.yaml`` (``backend: megatron-bridge``), i.e.
  :func:`nemotron.runtime.megatron.megatron_bridge.main`: our pre-start checks, our translation, Megatron-Bridge's Ultra
  recipe built from the model's catalogue ``config.json``, AutoBridge's provider, then Megatron-Bridge's own
  ``pretrain()`` with its ``forward_step`` (recorded by :mod:`nemotron.runtime.megatron.batch_log`), Megatron-Core's GPT
  dataset builder over our ``.bin/.idx`` blend, its distributed checkpointing;
* the stack it needs from the host: Megatron-Bridge and Megatron-Core source at the pinned commits, Transformer
  Engine, mamba-ssm's Python package (its Triton kernels), on ``PYTHONPATH``. The pinned versions are those of the
  NeMo image, which a bare GPU machine does not have, so the script sets ``NEMOTRON_SKIP_FRAMEWORK_CHECK=1`` and
  reports the mismatches our pre-start check prints as warnings.

Runs, all in this one invocation:

1. **reference**: ``--iters`` steps uninterrupted (checkpoint folder ``ref``);
2. **signalled**: the same config in folder ``sig``; SIGTERM once step ``--signal-at`` has begun (the warning
   Slurm sends before the time limit). Expected: a checkpoint at the step that was running, exit code 75;
3. **resumed**: the same command again. Expected: it resumes at the saved step, ends with exit 0, and every step
   from there on draws the same samples (SHA-256 of each sample's token ids) as the reference run did;
4. **plain loop**: a plain PyTorch loop (forward with labels, backward, fused AdamW; BF16 autocast) of the same
   model built by transformers, same micro-batch, sequence and global batch, on random tokens — the local
   backend's reference (``bench/train_tiny.py``). It has no MTP block (transformers builds none), so it does less
   work per token than the Megatron run.

``--stage sft`` runs the job of ``nemotron ultra3 sft -c tiny`` the same way (:data:`ONE_GPU_SFT`: the same model
and layout at the 4,096-token packs of ``data prep sft -c tiny``), through ``stages/ultra3/sft/run.py``, i.e.
Megatron-Bridge's ``finetune()`` on our packed Parquet (its packed-sequence dataset, answer-only loss on our stored
loss mask), starting from a pretrain checkpoint this script makes first (``--pretrain-iters`` steps of the pretrain
job above, kept in ``WORK/pre``): runs 1-3 as above, and the plain loop at the SFT batch shape.

``--stage quantize`` runs the job of ``nemotron ultra3 quantize -c tiny`` (``backend: megatron-bridge``,
:data:`ONE_GPU_QUANTIZE`) on the convert job's export ``WORK/hf``, calibrated on ``--calib``, then reloads the NVFP4
export and compares it with the BF16 model (:func:`quantize_main`).

``--stage convert`` runs the job of ``nemotron ultra3 convert -c tiny`` (megatron_to_hf) the same way
(:data:`ONE_GPU_CONVERT`: the same model at TP1 PP1 EP1 ETP1), through ``stages/ultra3/convert/run.py``, from the
checkpoint ``--stage sft`` left in WORK (``ref``, else ``sig``, else the pretrain checkpoint ``pre``;
:func:`convert_source`; with ``--pretrain-if-none`` and none of them, a pretrain checkpoint made first) into
``WORK/hf``; the job's own self-check (:mod:`nemotron.runtime.megatron.export_check`) writes
``selfcheck.json`` there; summary.json gets its figures, the export size and the wall time (:func:`convert_main`).

Figures: the loss curve (first/last steps), tokens/s of the Megatron run (steady-state, from the recorded step times
after ``--warmup`` steps) against the plain loop's, the peak GPU memory allocated by the training process (the CUDA
caching allocator's ``max_memory_allocated``) against our estimate. Everything lands in ``--out``:
``summary.json``, ``summary.md``, and the logs of each run.
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

#: ``-c tiny`` made to fit one GPU: the catalogue's ``small`` model at TP1 PP1 EP1 (the layout validation would
#: otherwise derive for a slice on an 8-GPU node), the optimizer on the GPU (tiny offloads it for the 32 B-parameter
#: slice), no recompute (the small model needs none; the plain loop has none), sequence 1,024 tokens, global batch 16
#: of micro-batches of 4 (4 micro-batches per step), evaluation off, a checkpoint every 20 steps, Mamba's unfused
#: path (below). The contract test
#: ``tests/contract/test_megatron_bridge.py`` builds this exact config with Megatron-Bridge's recipe and validates it
#: on the CPU in CI.
ONE_GPU = [
    "model.name=small", "model.seq_length=1024", "run.env.gpus_per_node=1",
    "model.tensor_model_parallel_size=1", "model.pipeline_model_parallel_size=1",
    "model.expert_model_parallel_size=1", "model.sequence_parallel=false",
    "model.recompute_granularity=null", "model.recompute_method=null", "model.recompute_num_layers=null",
    "train.global_batch_size=16", "train.micro_batch_size=4",
    "optimizer.optimizer_cpu_offload=false", "optimizer.use_precision_aware_optimizer=false",
    "validation.eval_iters=0", "checkpoint.save_interval=20", "scheduler.lr_warmup_iters=5",
    # Megatron-Core's fused Mamba path (mamba_split_conv1d_scan_combined) needs causal-conv1d's CUDA extension,
    # which has no wheel for this torch; the unfused path runs the same Mamba-2 layer with torch's conv1d and
    # mamba-ssm's Triton chunked scan (megatron/core/ssm/mamba_mixer.py, use_mem_eff_path=False)
    "+model.use_mamba_mem_eff_path=false",
    # the recipe fuses weight-gradient accumulation (APEX's fused_weight_gradient_mlp_cuda); no APEX build exists for
    # this torch, and Megatron-Core refuses the fusion without it (tensor_parallel/layers.py)
    "+model.gradient_accumulation_fusion=false",
]


#: ``sft -c tiny`` made to fit one GPU: the same model and layout as :data:`ONE_GPU`, at the pack size of
#: ``data prep sft -c tiny`` (4,096 tokens: one pack is one training sequence; CP 1), one pack per micro-batch (as
#: Megatron-Bridge requires for packed data) and 4 per step (30 steps draw 120 of the 144 training packs: one epoch,
#: no pack seen twice), a checkpoint every 10 steps. Mamba's fused path stays on (Megatron-Core's default): packed
#: sequences run only there (the first try on an H100, with the unfused path of :data:`ONE_GPU`, stopped at step 1 on
#: MambaMixer's assert; rule ``packed-mamba-path``), so ``gpu_stack.sh install-conv1d`` builds causal-conv1d first.
ONE_GPU_SFT = [o for o in ONE_GPU if not o.startswith(("model.seq_length=", "train.", "checkpoint.save_interval=",
                                                       "+model.use_mamba_mem_eff_path="))] + [
    "model.seq_length=4096", "model.context_parallel_size=1", "train.global_batch_size=4", "train.micro_batch_size=1",
    "checkpoint.save_interval=10",
]


#: ``convert -c tiny`` (megatron_to_hf) made to fit one GPU: the same model as :data:`ONE_GPU` / :data:`ONE_GPU_SFT`
#: (the catalogue's ``small``, whose HF ``config.json`` the export is built against: nothing downloaded) at TP1 PP1
#: EP1 ETP1 on one node of one GPU.
ONE_GPU_CONVERT = [
    "model.name=small", "run.env.nodes=1", "run.env.gpus_per_node=1",
    "model.tensor_model_parallel_size=1", "model.pipeline_model_parallel_size=1",
    "model.expert_model_parallel_size=1", "model.expert_tensor_parallel_size=1",
]


#: ``quantize -c tiny`` (``backend: megatron-bridge``) made to fit one GPU: the convert job's model and layout, and the
#: export layout at 1 GPU too (``tiny`` sets it for an ``<N>layer`` slice only; its default, PP12, is more stages than
#: ``small`` has layers).
ONE_GPU_QUANTIZE = [*ONE_GPU_CONVERT, "export.tensor_model_parallel_size=1", "export.pipeline_model_parallel_size=1",
                    "export.expert_model_parallel_size=1", "export.expert_tensor_parallel_size=1"]

#: The held-out comparison after the quantize job: sequences of this many tokens (+1 for the labels), at most
#: :data:`EVAL_SEQUENCES` of them, from the calibration file's texts after the first ``quantization.calib_size``.
EVAL_TOKENS, EVAL_SEQUENCES = 512, 16


def quantize_overrides(source: Path, calib: Path, work: Path) -> list[str]:
    """``quantize -c tiny`` on one GPU: the HF folder ``source`` (the convert job's export) quantized with the
    calibration texts of ``calib`` (JSONL with a ``text`` field); the Megatron checkpoint into ``WORK/q-megatron``,
    the Hugging Face export into ``WORK/q-hf`` (the ``${art:mopd-checkpoint,path}`` input given as a path)."""
    return [*ONE_GPU_QUANTIZE, f"quantization.source={source}", f"quantization.calib_dataset={calib}",
            f"quantization.output_dir={work / 'q-megatron'}", f"export.output_dir={work / 'q-hf'}"]


def held_out_ids(calib: Path, skip: int, tokenizer, seq: int = EVAL_TOKENS, most: int = EVAL_SEQUENCES):
    """``[n, seq + 1]`` int64 token ids (n <= ``most``): the texts of ``calib`` after the first ``skip`` (those the
    job calibrated on), tokenized with ``tokenizer`` (no special tokens), concatenated and cut into rows."""
    import torch

    texts = [json.loads(x).get("text") or "" for x in calib.read_text(encoding="utf-8").splitlines() if x.strip()]
    ids: list[int] = []
    for text in texts[skip:]:
        ids += tokenizer(text, add_special_tokens=False)["input_ids"]
    n = min(most, len(ids) // (seq + 1))
    if n == 0:
        raise ValueError(f"{calib}: fewer than {seq + 1} held-out tokens after the first {skip} texts")
    return torch.tensor(ids[: n * (seq + 1)], dtype=torch.long).reshape(n, seq + 1)


def quantize_main(args: argparse.Namespace, out: Path, work: Path, summary: dict) -> int:
    """``--stage quantize``: the job of ``nemotron ultra3 quantize -c tiny`` (``backend: megatron-bridge``:
    :func:`nemotron.runtime.quantization.quantize_cluster.run` — AutoBridge from the HF folder, Model Optimizer's
    ``mtq.quantize`` with the ``ultra`` recipe calibrated on ``--calib``, the quantized Megatron checkpoint, a
    fake-quantized generation, ``export_mcore_gpt_to_hf``) on one GPU, from the convert job's export ``WORK/hf``.
    Then the export is reloaded and compared with the BF16 model it came from: our own de-quantization of its NVFP4
    / FP8 tensors (:func:`nemotron.runtime.quantization.quantize.dequantized_load`) loaded by transformers, against
    ``WORK/hf`` in BF16, on held-out text (:func:`held_out_ids`): perplexity of both, KL(BF16 || quantized) per
    token, top-1 agreement (:func:`nemotron.runtime.quantization.quantize.compare`). Weights only: the reloaded
    model runs its activations in BF16. Returns 0 when the job exited 0 and the comparison ran."""
    summary["stage"] = "quantize"
    source, calib = work / "hf", args.calib
    if not (source / "config.json").is_file() or calib is None or not calib.is_file():
        summary["error"] = (f"quantize needs the convert job's export {source} (run --stage convert first with the "
                            f"same work folder) and --calib (a JSONL file of texts): {calib}")
        print(summary["error"], file=sys.stderr)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return 1
    summary["source"] = {"folder": str(source), "selfcheck": (json.loads((source / "selfcheck.json").read_text())
                                                              .get("passed") if (source / "selfcheck.json").is_file()
                                                              else None)}
    cfg_path = work / "quantize.yaml"
    cfg = compile_job(args.blend, source, 0, cfg_path, "quantize", quantize_overrides(source, calib, work))
    for name in ("q-megatron", "q-hf", "q-deq"):
        shutil.rmtree(work / name, ignore_errors=True)   # a fresh quantization, never files of an earlier one
    run = train(cfg_path, out / "quantize.jsonl", out, "quantize", timeout=args.timeout, stage_name="quantize")
    summary["runs"] = {"quantize": run}
    summary["wall_s"] = run["seconds"]
    log = (out / "quantize.log").read_text(errors="replace") if (out / "quantize.log").is_file() else ""
    summary["generate"] = [line.strip()[:300] for line in log.splitlines() if line.startswith("[quantize] generate")]
    export = work / "q-hf"
    ok = run["rc"] == 0 and (export / "config.json").is_file()
    if ok:
        from nemotron.runtime.quantization import quant_config, quantize as q

        try:
            summary["export_bytes_by_kind"] = q.tensor_bytes(export)
            summary["bf16_bytes_by_kind"] = q.tensor_bytes(source)
            algos: dict = {}
            for rec in quant_config.quantized_layers(export).values():
                algos[str(rec.get("quant_algo"))] = algos.get(str(rec.get("quant_algo")), 0) + 1
            summary["quantized_layers_by_format"] = algos
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            t0 = time.monotonic()
            tok = AutoTokenizer.from_pretrained(str(source))
            ids = held_out_ids(calib, int(cfg["quantization"]["calib_size"]), tok)
            ref = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.bfloat16).cuda().eval()
            quant = q.dequantized_load(export, work / "q-deq", torch.bfloat16).cuda().eval()
            summary["comparison"] = {**q.compare(ref, quant, ids, "cuda"), "sequences": int(ids.shape[0]),
                                     "tokens_per_sequence": EVAL_TOKENS, "seconds": round(time.monotonic() - t0, 1),
                                     "what": "weights-only: the export de-quantized by our decoder, activations BF16"}
        except Exception as exc:  # recorded, named: the figures the issue asks for did not come
            summary["error"] = f"comparison: {type(exc).__name__}: {exc}"[:800]
            ok = False
    else:
        summary["error"] = f"the quantize job exited {run['rc']} without an export in {export} (see quantize.log)"
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    (out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0 if ok and "comparison" in summary else 1


def convert_overrides(source: Path, output_dir: Path) -> list[str]:
    """``convert -c tiny`` on one GPU from the Megatron checkpoint folder ``source`` into ``output_dir``: the
    ``${art:sft-checkpoint,path}`` input given as a path (this machine has no artifact store)."""
    return [*ONE_GPU_CONVERT, f"convert.source={source}", f"convert.output_dir={output_dir}"]


def convert_source(work: Path) -> tuple[Path, str] | None:
    """The checkpoint the convert run exports and what it is: ``WORK/ref`` (the SFT reference run's), else
    ``WORK/sig`` (the signalled and resumed SFT run's), else ``WORK/pre`` (the pretrain checkpoint SFT starts
    from), the first holding ``latest_checkpointed_iteration.txt``; None when none does."""
    for name, what in (("ref", "SFT reference checkpoint"), ("sig", "SFT signalled+resumed checkpoint"),
                       ("pre", "pretrain checkpoint (no SFT checkpoint in WORK)")):
        if (work / name / "latest_checkpointed_iteration.txt").is_file():
            return work / name, what
    return None


def folder_bytes(folder: Path) -> int:
    """Total size in bytes of the files under ``folder`` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def make_pretrain(blend: Path, work: Path, out: Path, iters: int, timeout: float) -> dict:
    """The pretrain checkpoint ``WORK/pre`` (``iters`` steps of the one-GPU pretrain job on ``blend``, saved at the
    end): the run's record (:func:`train`) with ``saved_iteration``."""
    pre = work / "pre"
    shutil.rmtree(pre, ignore_errors=True)
    cfg = work / "pre.yaml"
    compile_job(blend, pre, iters, cfg, args=overrides(blend, pre, iters, save_interval=iters))
    run = train(cfg, out / "pre.jsonl", out, "pretrain", timeout=timeout)
    saved = pre / "latest_checkpointed_iteration.txt"
    run["saved_iteration"] = int(saved.read_text().strip()) if saved.is_file() else None
    return run


def convert_main(args: argparse.Namespace, out: Path, work: Path, summary: dict) -> int:
    """``--stage convert``: the job of ``nemotron ultra3 convert -c tiny`` (megatron_to_hf) on one GPU through
    ``stages/ultra3/convert/run.py`` (:func:`nemotron.runtime.megatron.megatron_bridge.main` → ``_convert``, then the
    export's self-check, :mod:`nemotron.runtime.megatron.export_check`), from :func:`convert_source`'s checkpoint into
    ``WORK/hf``. summary.json gets the source, exit code, wall time, export size and ``selfcheck.json``'s figures;
    the export's ``config.json`` and ``selfcheck.json`` are copied into ``--out``. Returns 0 when the job exited 0
    and its self-check passed."""
    summary["stage"] = "convert"
    runs: dict = {}
    found = convert_source(work)
    if found is None and getattr(args, "pretrain_if_none", False):  # a fresh machine: a pretrain checkpoint first
        print(f"convert: no checkpoint in {work}; making the pretrain checkpoint ({args.pretrain_iters} steps)",
              flush=True)
        runs["pretrain"] = make_pretrain(args.blend, work, out, args.pretrain_iters, args.timeout)
        found = convert_source(work)
    if found is None:
        summary["runs"] = runs
        summary["error"] = (f"no checkpoint to convert: none of {work}/ref, {work}/sig, {work}/pre holds "
                            "latest_checkpointed_iteration.txt (run --stage sft first with the same --work, or "
                            "pass --pretrain-if-none)")
        print(summary["error"], file=sys.stderr)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return 1
    source, what = found
    export = work / "hf"
    iteration = (source / "latest_checkpointed_iteration.txt").read_text().strip()
    summary["source"] = {"folder": str(source), "what": what, "iteration": iteration}
    print(f"convert: exporting the {what} {source} (iteration {iteration}) -> {export}", flush=True)
    cfg = work / "convert.yaml"
    compile_job(args.blend, source, 0, cfg, "convert", convert_overrides(source, export))
    shutil.rmtree(export, ignore_errors=True)  # a fresh export, never files of an earlier one
    run = train(cfg, out / "convert.jsonl", out, "convert", timeout=args.timeout, stage_name="convert")
    summary["runs"] = {**runs, "convert": run}
    summary["wall_s"] = run["seconds"]
    summary["export_bytes"] = folder_bytes(export)
    summary["export_gb"] = round(summary["export_bytes"] / 1e9, 3)
    for name in ("config.json", "selfcheck.json"):
        if (export / name).is_file():
            shutil.copy(export / name, out / name)
    check = json.loads((export / "selfcheck.json").read_text()) if (export / "selfcheck.json").is_file() else None
    summary["selfcheck"] = check if check is not None else "no selfcheck.json: the job stopped before its self-check"
    if check is None:
        summary["error"] = f"{summary['selfcheck']} (exit code {run['rc']}; see convert.log)"
    if check is not None:
        lg = check.get("logits") or {}
        summary["selfcheck_figures"] = {k: lg.get(k) for k in ("max_abs_diff", "mean_abs_diff", "cosine",
                                                              "min_position_cosine", "top1_agreement", "cosine_min",
                                                              "top1_min")}
        summary["selfcheck_figures"]["config"] = (check.get("config") or {}).get("exported")
        summary["selfcheck_figures"]["reload"] = check.get("reload")
        summary["selfcheck_figures"]["passed"] = check.get("passed")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    (out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0 if run["rc"] == 0 and isinstance(check, dict) and check.get("passed") and check["logits"].get("ran") else 1


def overrides(blend: Path, ckpt: Path, iters: int, save_interval: int | None = None,
              fused_mamba: bool = False) -> list[str]:
    """The pretrain job's overrides: :data:`ONE_GPU` with the blend, checkpoint folder and length; ``fused_mamba``
    keeps Megatron-Core's fused Mamba path (the recipe's default; it needs causal-conv1d's extension,
    ``gpu_stack.sh install-conv1d``) instead of the unfused one :data:`ONE_GPU` picks."""
    extra = [f"checkpoint.save_interval={save_interval}"] if save_interval else []
    base = [o for o in ONE_GPU if not (fused_mamba and o.startswith("+model.use_mamba_mem_eff_path="))]
    return [*base, f"data.per_split_data_args_path={blend}", f"checkpoint.save={ckpt}",
            f"train.train_iters={iters}", f"scheduler.lr_decay_iters={iters}",
            f"scheduler.lr_wsd_decay_iters={max(1, iters // 5)}", *extra]


def sft_overrides(packed: Path, pretrained: Path, ckpt: Path, iters: int) -> list[str]:
    """``sft -c tiny`` on one GPU over the packed Parquet folder ``packed`` (``data prep sft -c tiny``'s output),
    starting from the pretrain checkpoint folder ``pretrained``: the ``${art:...}`` inputs of the config given as
    paths (this machine has no artifact store)."""
    data = packed / "data"
    return [*ONE_GPU_SFT, f"dataset.dataset_root={packed}",
            f"dataset.packed_sequence_specs.packed_train_data_path={data / 'training_4096.idx.parquet'}",
            f"dataset.packed_sequence_specs.packed_val_data_path={data / 'validation_4096.idx.parquet'}",
            f"dataset.packed_sequence_specs.packed_metadata_path={data / '4096_metadata.jsonl'}",
            f"checkpoint.pretrained_checkpoint={pretrained}", f"checkpoint.save={ckpt}",
            f"train.train_iters={iters}", f"scheduler.lr_decay_iters={iters}"]


def compile_job(blend: Path, ckpt: Path, iters: int, path: Path, stage_name: str = "pretrain",
                args: list[str] | None = None) -> dict:
    """``train.yaml`` for the job, as the CLI writes it (compiled, prepared, validated: any error stops here).
    ``args``: the overrides (default: :func:`overrides` of pretrain)."""
    from nemotron import validation
    from nemotron.config.compile import compile_config, write_yaml
    from nemotron.config.registry import get_stage

    stage = get_stage(stage_name)
    compiled = compile_config(stage, "tiny", args if args is not None else overrides(blend, ckpt, iters))
    validation.prepare(stage, compiled.config, compiled.user_keys, None)
    errors = [f"{p.key}={p.value!r}: {p.message}" for p in validation.validate(stage, compiled.config, None)
              if p.severity == "error"]
    if errors:
        sys.exit("the one-GPU config does not validate:\n  " + "\n  ".join(errors))
    write_yaml(compiled, path)
    return compiled.config


def estimate(blend: Path, ckpt: Path, iters: int, out: Path, stage_name: str = "pretrain",
             args: list[str] | None = None) -> float | None:
    """The dry-run's per-GPU memory estimate (GB = 1e9 bytes, ``total on the peak stage``) for the same command."""
    argv = [sys.executable, "-m", "nemotron", "ultra3", stage_name, "-c", "tiny", "--dry-run",
            *(args if args is not None else overrides(blend, ckpt, iters))]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "160"})
    (out / "dry-run.txt").write_text(proc.stdout + proc.stderr)
    m = re.search(r"total on the peak stage\s+([\d.]+) GB", proc.stdout + proc.stderr)
    return float(m.group(1)) if m else None


def job_env(log: Path) -> dict[str, str]:
    """The environment torchrun gives one rank of a one-GPU job, plus the batch record and the framework waiver."""
    return {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": os.environ.get("MASTER_PORT", "29533"),
            "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONUNBUFFERED": "1",
            "NEMOTRON_BATCH_LOG": str(log), "NEMOTRON_SKIP_FRAMEWORK_CHECK": "1"}


def _steps_begun(log: Path) -> int:
    if not log.is_file():
        return -1
    steps = [json.loads(x)["step"] for x in log.read_text().splitlines() if '"kind": "batch"' in x]
    return max(steps, default=-1)


def train(config: Path, log: Path, out: Path, name: str, signal_at: int | None = None,
          timeout: float = 420, stage_name: str = "pretrain") -> dict:
    """Run the job's entry (``stages/ultra3/<stage_name>/run.py``) once; with ``signal_at``, SIGTERM it once that
    step has begun. Returns ``{"rc", "seconds", "log"}``; the process output is in ``<out>/<name>.log``."""
    text = out / f"{name}.log"
    t0 = time.monotonic()
    with text.open("w") as fh:
        proc = subprocess.Popen([sys.executable, str(ROOT / f"stages/ultra3/{stage_name}/run.py"), "--config",
                                 str(config)],
                                cwd=ROOT, env=job_env(log), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        signalled = None
        while proc.poll() is None:
            if time.monotonic() - t0 > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            if signal_at is not None and signalled is None and _steps_begun(log) >= signal_at:
                proc.send_signal(signal.SIGTERM)
                signalled = _steps_begun(log)
            time.sleep(0.2)
        proc.wait()
    return {"rc": proc.returncode, "seconds": round(time.monotonic() - t0, 1), "signalled_at_step": signalled,
            "tail": text.read_text(errors="replace")[-1500:]}


def tokens_per_s(rec: dict, tokens_per_step: int, warmup: int) -> float | None:
    """Steady-state throughput from the recorded start time of each step (steps after ``warmup``)."""
    t = sorted(rec["times"].items())
    t = [(s, v) for s, v in t if s >= warmup]
    if len(t) < 3:
        return None
    # consecutive steps of one process only (a resumed run's clock restarts)
    pairs = [(b[1] - a[1]) for a, b in zip(t, t[1:]) if b[0] == a[0] + 1 and b[1] > a[1]]
    return tokens_per_step * len(pairs) / sum(pairs) if pairs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blend", type=Path, required=True, help="blend.json of `nemotron ultra3 data prep pretrain -c tiny`")
    ap.add_argument("--out", type=Path, required=True, help="folder for summary.json, summary.md and the logs")
    ap.add_argument("--work", type=Path, default=None, help="folder for configs and checkpoints (default: OUT/work)")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--signal-at", type=int, default=30, help="SIGTERM once this step (0-based) has begun")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the throughput figure")
    ap.add_argument("--plain-steps", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=420, help="seconds each training process may run")
    ap.add_argument("--skip", default="", help="comma list of runs to skip: reference,signal,plain")
    ap.add_argument("--calib", type=Path, default=None,
                    help="quantize: JSONL of texts (a `text` field) to calibrate on; the texts after the first "
                         "quantization.calib_size are the held-out comparison's")
    ap.add_argument("--stage", choices=("pretrain", "sft", "convert", "quantize"), default="pretrain",
                    help="sft: finetune() on --packed from a pretrain checkpoint this script makes first (--pretrain-iters "
                         "steps of the pretrain job on --blend, in WORK/pre, kept for later invocations); convert: "
                         "megatron_to_hf of WORK/ref (else WORK/sig, else WORK/pre) into WORK/hf, with its self-check; "
                         "quantize: NVFP4 of WORK/hf through Megatron-Bridge + Model Optimizer, then the export "
                         "reloaded and compared with WORK/hf")
    ap.add_argument("--packed", type=Path, default=None, help="sft: the folder of `nemotron ultra3 data prep sft -c tiny`")
    ap.add_argument("--pretrain-iters", type=int, default=10, help="sft: steps of the pretrain run it starts from")
    ap.add_argument("--fused-mamba", action="store_true",
                    help="pretrain: Megatron-Core's fused Mamba path (needs gpu_stack.sh install-conv1d first)")
    ap.add_argument("--pretrain-if-none", action="store_true",
                    help="convert: when WORK holds no checkpoint, make the pretrain one first (--pretrain-iters steps) "
                         "and convert that")
    args = ap.parse_args()
    if args.stage == "sft" and args.packed is None:
        ap.error("--stage sft needs --packed (the data prep sft -c tiny folder)")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = (args.work or out / "work").resolve()
    work.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    from nemotron.runtime.megatron import batch_log

    summary: dict = {"iters": args.iters, "signal_at": args.signal_at}
    try:
        import torch

        summary["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        summary["torch"] = torch.__version__
    except ImportError:
        summary["gpu"] = None
    for mod in ("megatron.bridge", "megatron.core", "transformer_engine", "mamba_ssm", "transformers"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            summary.setdefault("stack", {})[mod] = getattr(m, "__version__", "?")
        except Exception as exc:  # the job's own pre-start check says the same, in its log
            summary.setdefault("stack", {})[mod] = f"not importable: {type(exc).__name__}: {exc}"[:300]

    if args.stage == "convert":
        args.blend = args.blend.resolve()
        return convert_main(args, out, work, summary)
    if args.stage == "quantize":
        args.blend = args.blend.resolve()
        args.calib = args.calib.resolve() if args.calib else None
        return quantize_main(args, out, work, summary)
    blend = args.blend.resolve()
    stage_name = args.stage
    runs: dict = {}
    recs: dict = {}
    if stage_name == "sft":
        tokens_per_step, micro, gbs, seq = 4 * 4096, 1, 4, 4096
        pre = work / "pre"
        if not (pre / "latest_checkpointed_iteration.txt").is_file():  # the checkpoint SFT starts from
            runs["pretrain"] = make_pretrain(blend, work, out, args.pretrain_iters, args.timeout)
        packed = args.packed.resolve()
        job_args = lambda ckpt: sft_overrides(packed, pre, ckpt, args.iters)  # noqa: E731
    else:
        tokens_per_step, micro, gbs, seq = 16 * 1024, 4, 16, 1024
        job_args = lambda ckpt: overrides(blend, ckpt, args.iters, fused_mamba=args.fused_mamba)  # noqa: E731
        summary["mamba_path"] = "fused (causal-conv1d)" if args.fused_mamba else "unfused (use_mamba_mem_eff_path=false)"
    summary["stage"] = stage_name
    summary["estimate_gb"] = estimate(blend, work / "ref", args.iters, out, stage_name, job_args(work / "ref"))
    if "reference" not in skip:
        cfg = work / "ref.yaml"
        compile_job(blend, work / "ref", args.iters, cfg, stage_name, job_args(work / "ref"))
        shutil.rmtree(work / "ref", ignore_errors=True)  # a fresh start, not a resume of an earlier reference
        (out / "ref.jsonl").unlink(missing_ok=True)
        runs["reference"] = train(cfg, out / "ref.jsonl", out, "reference", timeout=args.timeout,
                                  stage_name=stage_name)
    if (out / "ref.jsonl").is_file():  # this invocation's reference, or an earlier one's in the same --out
        recs["reference"] = batch_log.read(out / "ref.jsonl")
        if "reference" not in runs and (out / "summary.json").is_file():
            earlier_runs = json.loads((out / "summary.json").read_text()).get("runs", {})
            for key in ("reference", "pretrain"):
                if key not in runs and earlier_runs.get(key):
                    runs[key] = earlier_runs[key]
    if "signal" not in skip:
        cfg = work / "sig.yaml"
        shutil.rmtree(work / "sig", ignore_errors=True)
        (out / "sig.jsonl").unlink(missing_ok=True)
        compile_job(blend, work / "sig", args.iters, cfg, stage_name, job_args(work / "sig"))
        runs["signalled"] = train(cfg, out / "sig.jsonl", out, "signalled", signal_at=args.signal_at,
                                    timeout=args.timeout, stage_name=stage_name)
        saved = (work / "sig" / "latest_checkpointed_iteration.txt")
        runs["signalled"]["saved_iteration"] = int(saved.read_text().strip()) if saved.is_file() else None
        lines_before = len((out / "sig.jsonl").read_text().splitlines()) if (out / "sig.jsonl").is_file() else 0
        runs["resumed"] = train(cfg, out / "sig.jsonl", out, "resumed", timeout=args.timeout, stage_name=stage_name)
        recs["signalled"] = batch_log.read(out / "sig.jsonl") if (out / "sig.jsonl").is_file() else None
        later = (out / "sig.jsonl").read_text().splitlines()[lines_before:] if (out / "sig.jsonl").is_file() else []
        firsts = [json.loads(x)["step"] for x in later if '"kind": "batch"' in x][:1]
        runs["resumed"]["first_step"] = firsts[0] if firsts else None  # the step the resumed process began with
        resumed_log = (out / "resumed.log").read_text(errors="replace") if (out / "resumed.log").is_file() else ""
        m = re.search(r"load\w* checkpoint from .*?at iteration (\d+)", resumed_log)
        runs["resumed"]["loaded_iteration"] = int(m.group(1)) if m else None
    summary["runs"] = runs

    ref, sig = recs.get("reference"), recs.get("signalled")
    if ref:
        losses = [ref["loss"][s] for s in sorted(ref["loss"])]
        summary["loss"] = {"first": losses[:3], "last": losses[-3:], "steps": len(losses)}
        summary["peak_allocated_gib"] = ref["max_allocated_gib"]
        summary["peak_reserved_gib"] = ref["max_reserved_gib"]
        summary["tokens_per_s"] = tokens_per_s(ref, tokens_per_step, args.warmup)
    if ref and sig:
        saved = runs["signalled"].get("saved_iteration")
        after = [s for s in sorted(ref["samples"]) if saved is not None and s >= saved]
        same = [s for s in after if sig["samples"].get(s) == ref["samples"][s]]
        before = [s for s in sorted(ref["samples"]) if saved is not None and s < saved]
        summary["resume"] = {
            "saved_iteration": saved, "exit_codes": [runs["signalled"]["rc"], runs["resumed"]["rc"]],
            "loaded_iteration": runs["resumed"].get("loaded_iteration"),
            "resumed_first_step": runs["resumed"].get("first_step"),
            "steps_after_resume": len(after), "steps_with_the_reference_samples": len(same),
            "first_step_after_resume_samples": sig["samples"].get(saved, [])[:4] if saved is not None else None,
            "reference_samples_at_that_step": ref["samples"].get(saved, [])[:4] if saved is not None else None,
            "steps_before_signal_matching": sum(sig["samples"].get(s) == ref["samples"][s] for s in before),
            "steps_before_signal": len(before),
            "max_loss_difference_after_resume": max((abs(sig["loss"][s] - ref["loss"][s]) for s in after
                                                     if s in sig["loss"] and s in ref["loss"]), default=None),
        }
    if "plain" not in skip:
        try:
            from train_tiny import reference as plain_loop

            from nemotron.config import catalogue

            best = max(plain_loop(catalogue.get("small"), seq, gbs, micro, args.plain_steps, "cuda", "bf16")
                       for _ in range(2))
            summary["plain_loop_tokens_per_s"] = best
        except Exception as exc:
            summary["plain_loop_error"] = f"{type(exc).__name__}: {exc}"[:500]
    elif (out / "summary.json").is_file():  # an earlier invocation's plain loop in the same --out
        earlier = json.loads((out / "summary.json").read_text())
        for key in ("plain_loop_tokens_per_s", "plain_loop_error"):
            if key in earlier:
                summary[key] = earlier[key]
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    (out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    ok = bool(ref) and (sig is None or (summary.get("resume", {}).get("exit_codes") == [75, 0]
                                       and summary["resume"]["steps_with_the_reference_samples"]
                                       == summary["resume"]["steps_after_resume"] > 0))
    return 0 if ok else 1


def markdown(s: dict) -> str:
    lines = ["| figure | value |", "|---|---|"]
    for k in ("stage", "gpu", "torch", "stack", "loss", "tokens_per_s", "plain_loop_tokens_per_s", "peak_allocated_gib",
              "peak_reserved_gib", "estimate_gb", "resume", "source", "wall_s", "export_gb", "selfcheck_figures",
              "quantized_layers_by_format", "comparison", "generate", "error"):
        if k in s:
            lines.append(f"| {k} | `{json.dumps(s[k])}` |")
    for name, r in (s.get("runs") or {}).items():
        lines.append(f"| run {name} | rc {r['rc']}, {r['seconds']} s |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
