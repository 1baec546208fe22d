#!/usr/bin/env bash
# The seed's post-training chain from SFT to MTP boosting on one GPU, the same local pipe as CI's
# tests/runtime/test_pipe_local_chain.py with larger settings (issue 33):
#
#   nemotron ultra3 model import BASE --as pretrain-checkpoint -c local
#   nemotron ultra3 pipe data-prep-sft sft data-prep-rl rlvr mopd-warmup mopd mopd mtp-boost -c local SETTINGS
#
# on a machine with one NVIDIA GPU, Python 3.12 and PyTorch, without a package index, where the wheels of
# bench/gpu_pack.sh are installed with `pip install --target` (bench/gpu_stack.sh install-kit: $STASH/site;
# install-missing: $STASH/site-extra):
#
#   bash bench/gpu_local_pipe.sh [OVERRIDES]        # STAGE:key=value ..., after (and over) the settings below
#
# gpu_pack.sh's local/ folder (LOCAL_WHEELS, default the stash's in/local: the project's transformers 5.24 with its
# tokenizers and hub client, TRL, Math-Verify, mistral-common) is installed into site-local/ on the first call.
# PYTHONPATH is site-local/, site/ (SITE), site-extra/ when present, then src/ of this checkout: the local runtime
# takes transformers 5.24 before the 5.8 that Megatron-Bridge pins in site/. The base is the catalogue's
# `small` NemotronH freshly initialised (seed 3) with the Tekken tokenizer the data prep uses, as in CI;
# BASE=pretrain makes it with `data-prep-pretrain pretrain -c local` in the same pipe instead (about a minute more).
# The data prep stages run in this process (workers.engine=in_process): no Ray. Their raw inputs are the samples
# shipped with the stages plus the shared data folder (NEMOTRON_SHARED_DATA; default local/shared-data of gpu_pack.sh,
# else ../shared/data beside the checkout); without it the RL data is 24 problems, fewer than the settings take.
# Log, the final table and each stage's summary.json go to $OUT/gpu-local-pipe (default ./gpu-local-pipe-out).
# DEVICE=cpu runs it without a GPU (with OVERRIDES that make it small: a check of the script, not a measurement).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STASH=${NEMOTRON_GPU_STASH:-/tmp/nemotron-gpu}
SITE=${SITE:-$STASH/site}
PY=${PYTHON:-python3}
say() { echo "[gpu-local-pipe] $*"; }

LOCAL_SITE=${LOCAL_SITE:-$STASH/site-local}
wheels=${LOCAL_WHEELS:-$STASH/in/local}
if [[ ! -d $LOCAL_SITE && -d $wheels ]]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$LOCAL_SITE" "$wheels"/*.whl
  say "installed $(ls "$wheels"/*.whl | wc -l) wheels of $wheels into $LOCAL_SITE"
fi
path=$LOCAL_SITE:$SITE
[[ -d $STASH/site-extra ]] && path=$path:$STASH/site-extra
export PYTHONPATH="$path:$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
out=${OUT:-$PWD/gpu-local-pipe-out}/gpu-local-pipe
work=${WORK:-$STASH/local-pipe}
rm -rf "$work"
mkdir -p "$out" "$work"
# the data prep stages' raw inputs: gpu_pack.sh's local/shared-data, else the shared data folder beside the checkout
[[ -n ${NEMOTRON_SHARED_DATA:-} || ! -d $wheels/shared-data ]] || export NEMOTRON_SHARED_DATA=$wheels/shared-data
export NEMOTRON_HOME=$work/home NEMOTRON_CKPT_ROOT=$work/ckpts NEMOTRON_DATA_DIR=$work/data NEMOTRON_WRAP=0
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
cd "$work"

# 1. what the chain imports, each module named when it is missing (the list: docs/post_training_pipeline.md)
if ! "$PY" - "${DEVICE:-cuda}" <<'EOF' 2>&1 | tee "$out/probe.txt"; then exit 2; fi
import importlib, sys
mods = ["torch", "transformers", "tokenizers", "safetensors", "accelerate", "datasets", "trl", "math_verify",
        "latex2sympy2_extended", "omegaconf", "pydantic", "typer", "rich", "yaml", "jinja2", "pyarrow", "numpy",
        "mistral_common", "nemotron.cli.main"]
missing = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as exc:  # noqa: BLE001 - each one is reported
        missing.append(f"{m} ({type(exc).__name__}: {exc})")
if missing:
    sys.exit("[gpu-local-pipe] error: missing: " + "; ".join(missing)
             + "\nhint: bash bench/gpu_pack.sh carries them (c0/wheels, the extra wheels, local/: LOCAL_WHEELS)")
import torch, transformers, trl
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("[gpu-local-pipe] error: torch sees no CUDA device\nhint: DEVICE=cpu runs it on the CPU (small OVERRIDES)")
print("[gpu-local-pipe] python", sys.version.split()[0], "| torch", torch.__version__,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "| transformers", transformers.__version__,
      "| trl", trl.__version__)
EOF

# 2. the base: BASE=pretrain makes it in the pipe; else a fresh `small` checkpoint, imported as pretrain-checkpoint
base=()
if [[ ${BASE:-fresh} == pretrain ]]; then
  base=(data-prep-pretrain pretrain)
else
  "$PY" - "$work/base" <<'EOF'
import shutil, sys
from pathlib import Path
import mistral_common
from nemotron.config import catalogue
from nemotron.data import tokenizer as tk
from nemotron.runtime.common import model as modelmod

folder = Path(sys.argv[1])
tok = folder.parent / "base-tokenizer"
tk.write_folder(tok, tk.resolve(str(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"),
                                cache_dir=folder.parent / "tokenizer-cache"))
modelmod.build(catalogue.get("small"), 3).save_pretrained(str(folder))
for f in tok.iterdir():
    shutil.copy2(f, folder / f.name)
EOF
  "$PY" -m nemotron ultra3 model import "$work/base" --as pretrain-checkpoint -c local
fi

# 3. the chain. Sizes (ours; each stage's per-step time measured on one H200 with the same model in
# docs/local_posttraining.md, or estimated from the CPU run): SFT 30 steps of 8 packs of 4,096 tokens (~50 s),
# RLVR 8 steps of 8 prompts x 8 generations x 128 tokens (~60 s), the warmup 64 teacher answers of 128 tokens,
# 16 SFT steps of 8, the KL on 16 held-out prompts x 64 tokens (~40 s), each MOPD cycle 8 steps of 16 prompts x
# 128 tokens (~45 s each), MTP boosting 100 head steps of 8 of 32 backbone continuations of 96 tokens, N = 3, draft
# length 3, acceptance on 8 held-out prompts x 48 tokens (~60 s; its greedy loops run one full forward a token):
# measured on one H100 (2026-12-05, the GPU shared with another job): 536 s of stages, 9 minutes of pipe
# (docs/post_training_pipeline.md, bench/results/gpu_local_pipe_h100.json).
settings=(
  data-prep-sft:workers.engine=in_process data-prep-rl:workers.engine=in_process
  sft:train.train_iters=30 sft:scheduler.lr_decay_iters=30 sft:train.global_batch_size=8 sft:train.micro_batch_size=4
  sft:validation.eval_interval=15 sft:checkpoint.save_interval=30 sft:logger.log_interval=5
  rlvr:grpo.max_num_steps=8 rlvr:grpo.num_prompts_per_step=8 rlvr:grpo.num_generations_per_prompt=8
  rlvr:policy.train_global_batch_size=64 rlvr:policy.train_micro_batch_size=16 rlvr:policy.generation_batch_size=64
  rlvr:policy.generation.max_new_tokens=128 rlvr:checkpointing.save_period=8 rlvr:grpo.max_val_samples=32
  rlvr:grpo.val_batch_size=32
  mopd-warmup:warmup.num_prompts=64 mopd-warmup:warmup.max_new_tokens=128 mopd-warmup:warmup.kl_prompts=16
  mopd-warmup:warmup.kl_new_tokens=64 mopd-warmup:sft.max_num_steps=16 mopd-warmup:policy.train_global_batch_size=8
  mopd-warmup:policy.train_micro_batch_size=8
  mopd:grpo.max_num_steps=8 mopd:grpo.num_prompts_per_step=16 mopd:policy.train_global_batch_size=16
  mopd:policy.train_micro_batch_size=16 mopd:policy.generation_batch_size=16 mopd:policy.generation.max_new_tokens=128
  mopd:checkpointing.save_period=8 mopd:grpo.max_val_samples=32 mopd:grpo.val_batch_size=32
  mtp-boost:train.train_iters=100 mtp-boost:train.global_batch_size=8 mtp-boost:data.train_prompts=32
  mtp-boost:data.held_out_prompts=8 mtp-boost:data.continuation_tokens=96 mtp-boost:mtp_boost.num_steps=3
  mtp-boost:mtp_boost.draft_length=3 mtp-boost:mtp_boost.new_tokens=48 mtp-boost:model.seq_length=256
)
if [[ ${BASE:-fresh} == pretrain ]]; then
  settings+=(data-prep-pretrain:workers.engine=in_process pretrain:train.train_iters=200
             pretrain:scheduler.lr_decay_iters=200 pretrain:train.global_batch_size=16 pretrain:train.micro_batch_size=16
             pretrain:model.seq_length=1024 pretrain:validation.eval_interval=100 pretrain:checkpoint.save_interval=200
             pretrain:logger.log_interval=20)
fi
log=$out/pipe.log
rc=0
timer=()
command -v /usr/bin/time >/dev/null && timer=(/usr/bin/time -v -o "$out/pipe.time")
"${timer[@]}" "$PY" -m nemotron ultra3 pipe "${base[@]}" data-prep-sft sft data-prep-rl rlvr mopd-warmup mopd mopd \
  mtp-boost -c local "${settings[@]}" "$@" > "$log" 2>&1 || rc=$?
for d in "$NEMOTRON_CKPT_ROOT"/ultra3-*; do
  [[ -f $d/summary.json ]] && cp "$d/summary.json" "$out/$(basename "$d").summary.json"
done
sed -n '/^pipe: every stage/,$p' "$log" | tee "$out/table.txt"
[[ -s $out/table.txt ]] || tail -60 "$log"
say "exit code $rc ($log)"
exit $rc
