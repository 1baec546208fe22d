#!/usr/bin/env bash
# The whole local post-training chain (`pipe ... -c local`) on a machine with one NVIDIA GPU and PyTorch but no
# package index, with larger settings than the 2-core CPU run of docs/local_posttraining.md:
#
#   bash bench/gpu_chain.sh pack [OUT]     # on a machine with PyPI: OUT (default <repo>/.gpuchain) ->
#                                          #   OUT/k0 ... OUT/kN, folders of at most 58 MiB (one transfer each)
#   bash bench/gpu_chain.sh receive DIR    # on the GPU machine: keep DIR's files in the stash
#   bash bench/gpu_chain.sh install        # install the wheels (--no-deps, into the stash's site-chain/)
#   STAGES="..." bash bench/gpu_chain.sh run [OVERRIDES]  # the chain (default: all nine stages) with the settings
#                                          #   below; its log and final table in $OUT/gpu-chain (or ./gpu-chain-out)
#
# The wheels are the project's own pinned versions (pyproject.toml [tool.uv] constraint-dependencies, resolved by
# `uv export` for the extra `local`) of every distribution that the GPU image
# lacks (bench/gpu_image_packages.txt; torch, triton, the NVIDIA libraries are never carried), save transformers and
# huggingface-hub, carried at the versions the chain is tested with (the image has transformers 5.17), and outside
# the submission stack (nemo-run, Ray: `-c local` runs each stage in this process, and the data prep stages are given
# workers.engine=in_process). The raw inputs of the data prep stages (the project's shared data folder, 9 MB) travel
# in k0. The stash (NEMOTRON_GPU_STASH, default /tmp/nemotron-gpu) is shared with bench/gpu_stack.sh.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STASH=${NEMOTRON_GPU_STASH:-/tmp/nemotron-gpu}
SITE=$STASH/site-chain
PY=${PYTHON:-python3}
PART=$((58 * 1024 * 1024))
say() { echo "[gpu-chain] $*"; }

# What the machine brings (a PyTorch install) or what `-c local` never imports (the submission stack and its
# exclusive dependencies; Windows-only packages). huggingface-hub 2 imports httpx2, httpcore2 and truststore: they travel
SKIP='^(torch|triton|nvidia-(?!modelopt|ml-py).*|cuda-.*|numpy|sympy|mpmath|networkx|jinja2|markupsafe|filelock|fsspec|setuptools|typing-extensions|ray|nemo-run|leptonai|fiddle|torchx|py-spy|virtualenv|fabric|paramiko|invoke|docker|pywin32|pyyaml-ft|win32-setctime|colorama|ninja|opencensus|opencensus-context|opentelemetry-.*|prometheus-.*|aiohttp-cors|colorful|smart-open|grpcio|google-.*|googleapis-common-protos|proto-plus|py-spy|pynacl|bcrypt|cryptography|cffi|pycparser|inquirerpy|pfzy|prompt-toolkit|wcwidth|fastapi|starlette|uvicorn|python-multipart|ledoc-ui|lazy-importer|libcst|pyre-extensions|typing-inspect|mypy-extensions|graphviz|catalogue|docstring-parser|toml|tabulate|distlib|platformdirs|python-discovery)=='

MACHINE=$(grep -v '^#' "$REPO/bench/gpu_image_packages.txt" | paste -sd'|')
FORCE='transformers|huggingface-hub'

case "${1:-}" in
  pack)
    out=${2:-$REPO/.gpuchain}
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    # one version per name: where the pins hold two (per Python version), the newer one (Python 3.12). uv resolves
    # at the pins from the index it is configured with (the lock it writes is untracked)
    (cd "$REPO" && python3 -m uv export --extra local --no-hashes --no-emit-project --no-annotate) |
      sed -n 's/^\([A-Za-z0-9_.-]*==[^ ;]*\).*/\1/p' | grep -Pv "$SKIP" | sort -t= -k1,1 -k3,3V |
      awk -F'==' '{last[$1]=$0} END {for (k in last) print last[k]}' | sort > "$work/all.txt"
    # only what the GPU machine's image lacks, and the versions the chain must have (transformers with NemotronH,
    # the hub client it pins); MACHINE: bench/gpu_image_packages.txt
    grep -Pv "^($MACHINE)==" "$work/all.txt" > "$work/req.txt" || true
    grep -P "^($FORCE)==" "$work/all.txt" >> "$work/req.txt"
    say "$(wc -l < "$work/req.txt") distributions"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_34_x86_64 --platform any -d "$work/wheels" -r "$work/req.txt"
    rm -rf "$out"
    mkdir -p "$out/k0/wheels"
    cp -r "$REPO/../shared/data" "$out/k0/shared-data"
    size=$(du -sb "$out/k0" | cut -f1)
    i=0
    for w in $(ls -S "$work"/wheels/*.whl); do
      n=$(stat -c %s "$w")
      if ((size + n > PART)); then i=$((i + 1)); mkdir -p "$out/k$i/wheels"; size=0; fi
      mv "$w" "$out/k$i/wheels/"
      size=$((size + n))
    done
    cp "$work/req.txt" "$out/k0/"
    for d in "$out"/k*; do say "$(basename "$d"): $(du -sh "$d" | cut -f1)"; done
    ;;
  receive)
    src=${2:?usage: gpu_chain.sh receive DIR}
    mkdir -p "$STASH/chain-in"
    cp -r "$src"/. "$STASH/chain-in/"
    say "received $(du -sh "$src" | cut -f1) from $src"
    ;;
  install)
    t0=$SECONDS
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$STASH"/chain-in/wheels/*.whl
    say "installed $(ls "$STASH"/chain-in/wheels/*.whl | wc -l) wheels into $SITE ($((SECONDS - t0)) s)"
    PYTHONPATH="$SITE:$REPO/src" "$PY" -c 'import torch, transformers, trl, datasets, modelopt, math_verify
print("[gpu-chain] torch", torch.__version__, "cuda", torch.cuda.is_available(), "| transformers", transformers.__version__,
      "| trl", trl.__version__, "| modelopt", modelopt.__version__)'
    ;;
  run)
    # STAGES: the stages of this call (default: all nine); a later call can run the rest of the chain on the same
    # machine (the artifacts of the earlier stages are recorded in the stash's NEMOTRON_HOME). ARGS: more overrides.
    shift
    stages=${STAGES:-data-prep-pretrain pretrain data-prep-sft sft data-prep-rl rlvr mopd quantize eval}
    out=${OUT:-$REPO/gpu-chain-out}/gpu-chain
    mkdir -p "$out"
    cd "$REPO"
    export NEMOTRON_HOME=${NEMOTRON_HOME:-$STASH/chain-home} NEMOTRON_SHARED_DATA=$STASH/chain-in/shared-data
    export NEMOTRON_CKPT_ROOT=${NEMOTRON_CKPT_ROOT:-$STASH/chain-ckpt} NEMOTRON_DATA_DIR=${NEMOTRON_DATA_DIR:-$STASH/chain-data}
    export PYTHONPATH="$SITE:$REPO/src" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
    # Larger than the CPU run of docs/local_posttraining.md: pretrain 16 x 1,024 tokens a step, SFT 8 packs of 4,096,
    # RLVR 8 prompts x 8 generations x 128 tokens, MOPD 16 prompts x 128 tokens, eval on 1,024-token windows
    n=$(find "$out" -maxdepth 1 -name "chain*.log" | wc -l)
    log=$out/chain$n.log
    rc=0
    settings=(
      data-prep-pretrain:workers.engine=in_process data-prep-sft:workers.engine=in_process
      data-prep-rl:workers.engine=in_process
      pretrain:train.train_iters=200 pretrain:scheduler.lr_decay_iters=200 pretrain:train.global_batch_size=16
      pretrain:train.micro_batch_size=16 pretrain:model.seq_length=1024 pretrain:validation.eval_interval=100
      pretrain:checkpoint.save_interval=100 pretrain:logger.log_interval=20
      sft:train.train_iters=40 sft:scheduler.lr_decay_iters=40 sft:train.global_batch_size=8
      sft:train.micro_batch_size=4 sft:validation.eval_interval=20 sft:checkpoint.save_interval=20
      sft:logger.log_interval=10
      rlvr:grpo.max_num_steps=10 rlvr:grpo.num_prompts_per_step=8 rlvr:grpo.num_generations_per_prompt=8
      rlvr:policy.train_global_batch_size=64 rlvr:policy.train_micro_batch_size=16
      rlvr:policy.generation_batch_size=64 rlvr:policy.generation.max_new_tokens=128 rlvr:checkpointing.save_period=5
      rlvr:grpo.max_val_samples=32 rlvr:grpo.val_batch_size=32
      mopd:grpo.max_num_steps=10 mopd:grpo.num_prompts_per_step=16 mopd:policy.train_global_batch_size=16
      mopd:policy.train_micro_batch_size=16 mopd:policy.generation_batch_size=16
      mopd:policy.generation.max_new_tokens=128 mopd:checkpointing.save_period=5
      mopd:grpo.max_val_samples=32 mopd:grpo.val_batch_size=32
      'quantize:quantization.source=${art:mopd-checkpoint,path}'
      eval:eval.perplexity.samples=64 eval:eval.perplexity.seq_length=1024 eval:eval.gsm8k.samples=32
      eval:eval.gsm8k.max_new_tokens=128 eval:eval.gsm8k.batch_size=32
    )
    # only the settings of the stages in this call (the pipe refuses overrides for stages outside its chain)
    picked=()
    for o in "${settings[@]}"; do [[ " $stages " == *" ${o%%:*} "* ]] && picked+=("$o"); done
    # shellcheck disable=SC2086  # one stage per word
    /usr/bin/time -v -o "$log.time" "$PY" -m nemotron ultra3 pipe $stages -c local "${picked[@]}" \
      "$@" > "$log" 2>&1 || rc=$?
    tail -70 "$log"
    say "exit code $rc ($log)"
    exit $rc
    ;;
  *)
    sed -n '2,17p' "$0"
    exit 2
    ;;
esac
