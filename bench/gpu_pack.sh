#!/usr/bin/env bash
# Build, on a machine with a package index (the one pip is configured with), the files that bench/gpu_stack.sh
# installs on a GPU machine without one (Python 3.12, x86_64, CUDA 13), split into folders of at most 60 MiB (one transfer each):
#
#   bash bench/gpu_pack.sh [OUT]      # default OUT: <repo>/.gpukit  ->  OUT/c0 ... OUT/cN
#
# c0 holds the wheels, the kit (kit_src.tar.xz), the SFT packs (sft-data.tar) and snapshot.tar.gz (git archive of HEAD); then come the parts of
# Transformer Engine's core archive (te.sha256 beside the last) and the extra wheels. Needs: the upstream archives in
# ../shared/upstream, the project's .venv (for the `data prep pretrain -c tiny` output it packs), pip's configured index.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/.gpukit}
UPSTREAM=${NEMOTRON_UPSTREAM:-$REPO/../shared/upstream}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
say() { echo "[gpu-pack] $*"; }
PART=$((58 * 1024 * 1024))
TE_VERSION=2.20.2

# wheels for CPython 3.12 on manylinux x86_64 (the GPU machine's torch, numpy, einops, triton are kept)
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
         --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_39_x86_64 --platform any -d "$WORK/wheels" "$@"; }
mkdir -p "$WORK/wheels" "$WORK/kit/src"
dl "omegaconf==2.3.*" "pydantic==2.*" pydantic-core annotated-types typing-inspection \
   "nvidia-modelopt==0.47.0" "pulp==3.3.*" "nvidia-resiliency-ext==0.7.0" defusedxml \
   "transformers==5.8.*" "tokenizers==0.22.*" "transformer-engine==$TE_VERSION" "pybind11==3.0.1"
# pydantic-core must be the one this pydantic pins
pc=$(unzip -p "$WORK"/wheels/pydantic-2*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core==\([^ ;]*\).*/\1/p')
rm -f "$WORK"/wheels/pydantic_core-*.whl
dl "pydantic-core==$pc"
# antlr4's runtime (omegaconf's parser) exists as an sdist only: build its pure-Python wheel here
python3 -m pip wheel -q --no-deps -w "$WORK/wheels" "antlr4-python3-runtime==4.9.3"
say "wheels: $(ls "$WORK/wheels" | wc -l), $(du -sh "$WORK/wheels" | cut -f1)"

# the kit: Megatron-Bridge and Megatron-LM source at the pinned refs, mamba-ssm's Python package, TE's torch sdist,
# causal-conv1d's sdist
tar -xzf "$UPSTREAM"/megatron-bridge-nemotron_3_ultra-*.tgz -C "$WORK"
tar -xzf "$UPSTREAM"/megatron-lm-*.tgz -C "$WORK"
mkdir -p "$WORK/kit/src/megatron"
cp -r "$WORK/Megatron-Bridge/src/megatron/bridge" "$WORK/kit/src/megatron/"
cp -r "$WORK/Megatron-LM/megatron/core" "$WORK/Megatron-LM/megatron/training" "$WORK/kit/src/megatron/"
# sdists: `pip download` would run their setup.py (which imports torch) just to read their metadata, so pip's own
# finder and session look the archive up on the index pip is configured with (pip.conf, PIP_INDEX_URL, ...) and
# fetch it, checked against the index's hash
sdist() {  # sdist NAME VERSION -> $WORK/sdist/<file>.tar.gz
  python3 - "$1" "$2" "$WORK/sdist" <<'PY'
import hashlib, pathlib, sys
from pip._internal.commands import create_command
name, version, out = sys.argv[1:]
cmd = create_command("download")
opts, _ = cmd.parse_args(["--no-deps", "--no-binary=:all:", f"{name}=={version}"])
with cmd.main_context():
    session = cmd.get_default_session(opts)
    finder = cmd._build_package_finder(options=opts, session=session, ignore_requires_python=True)
    links = [c.link for c in finder.find_all_candidates(name) if str(c.version) == version and not c.link.is_wheel]
    if not links:
        sys.exit(f"[gpu-pack] error: no source archive of {name}=={version} on the index pip is configured with")
    resp = session.get(links[0].url_without_fragment, timeout=300)
    resp.raise_for_status()
link = links[0]
if link.hash_name and hashlib.new(link.hash_name, resp.content).hexdigest() != link.hash:
    sys.exit(f"[gpu-pack] error: {link.filename}: its {link.hash_name} differs from the index's")
pathlib.Path(out).mkdir(parents=True, exist_ok=True)
(pathlib.Path(out) / link.filename).write_bytes(resp.content)
PY
}
sdist mamba-ssm 2.3.2.post1
sdist transformer-engine-torch "$TE_VERSION"
# causal-conv1d: Megatron-Core's fused Mamba path (mamba_split_conv1d_scan_combined, use_mamba_mem_eff_path) calls
# its CUDA extension, and packed SFT runs only on that path (rule packed-mamba-path); no wheel exists for the GPU
# machine's torch, so install-conv1d builds it there from this source
sdist causal-conv1d 1.6.1
tar -xzf "$WORK"/sdist/mamba_ssm-*.tar.gz -C "$WORK/sdist"
cp -r "$WORK"/sdist/mamba_ssm-*/mamba_ssm "$WORK/kit/src/"
cp "$WORK"/sdist/transformer_engine_torch-*.tar.gz "$WORK/kit/"
cp "$WORK"/sdist/causal_conv1d-*.tar.gz "$WORK/kit/"
# the pretraining data: our own `data prep pretrain -c tiny` output (paths are relocated by install-kit)
(cd "$REPO" && [[ -f output/ultra3/pretrain-data/tiny/blend.json ]] || .venv/bin/nemotron ultra3 data prep pretrain -c tiny >/dev/null)
(cd "$REPO" && tar -cf "$WORK/kit/data.tar" output/ultra3/pretrain-data/tiny)
# the SFT packs of `data prep sft -c tiny` (bench/gpu_megatron.py --stage sft): its manifest, tokenizer folder and packed
# Parquet, not the intermediate sequences (install-kit unpacks and relocates them)
sft=output/ultra3/sft-data/tiny
(cd "$REPO" && [[ -f $sft/manifest.json ]] || .venv/bin/nemotron ultra3 data prep sft -c tiny >/dev/null)
(cd "$REPO" && tar -cf "$WORK/sft-data.tar" $sft/manifest.json $sft/plan.json $sft/tokenizer $sft/data/*.idx.parquet \
   $sft/data/*_metadata.jsonl $sft/data/*.receipt.json)
(cd "$WORK/kit" && tar -cJf "$WORK/kit_src.tar.xz" src data.tar transformer_engine_torch-*.tar.gz causal_conv1d-*.tar.gz)
say "kit: $(du -sh "$WORK/kit_src.tar.xz" | cut -f1)"

# Transformer Engine's core (the cu13 wheel is larger than one transfer): unpacked, re-archived as xz, split
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
  -d "$WORK/te" "transformer-engine-cu13==$TE_VERSION"
mkdir -p "$WORK/te/tree"
python3 -m zipfile -e "$WORK"/te/transformer_engine_cu13-*.whl "$WORK/te/tree"
(cd "$WORK/te/tree" && tar -cf - . | xz -T0 -6 > "$WORK/te.tar.xz")
say "Transformer Engine core: $(du -sh "$WORK/te.tar.xz" | cut -f1)"

# folders of one transfer each: c0 the wheels, the kit and a snapshot of this checkout's HEAD (run it from there on
# the GPU machine, so that work in progress in the checkout does not ride along); then the parts of Transformer
# Engine's core (te.sha256 beside the last); then the extra wheels
rm -rf "$OUT"
mkdir -p "$OUT/c0"
cp -r "$WORK/wheels" "$WORK/kit_src.tar.xz" "$WORK/sft-data.tar" "$OUT/c0/"
# the texts `run --stage quantize` calibrates on and compares with (WikiText-2 validation, 60 articles, 1.1 MB)
cp "${NEMOTRON_SHARED_DATA:-$REPO/../shared/data}/pretrain/wikitext2-valid.jsonl" "$OUT/c0/calib.jsonl"
(cd "$REPO" && git archive --format=tar.gz -o "$OUT/c0/snapshot.tar.gz" HEAD)
split -b "$PART" -d -a 2 "$WORK/te.tar.xz" "$WORK/te.part"
i=1
for p in "$WORK"/te.part*; do
  mkdir -p "$OUT/c$i"
  mv "$p" "$OUT/c$i/"
  i=$((i + 1))
done
sha256sum "$WORK/te.tar.xz" | cut -c1-64 > "$OUT/c$((i - 1))/te.sha256"
# The import-time dependencies of the training path outside the NeMo image, resolved together with the kit's
# transformers (so that huggingface-hub stays inside its <2 pin): Megatron-Bridge's recipes package imports the
# diffusion recipes (diffusers, megatron-energon), its training step datasets and tensorboard; Model Optimizer
# (installed without its dependencies above) imports rich and scipy; nvidia-resiliency-ext reads NVML through
# nvidia-ml-py. Found by importing megatron.bridge.training.pretrain/finetune, gpt_step, the Nemotron-H recipes
# and our runtime with every module outside this list made absent. What the GPU machine's own PyTorch install
# brings is left out, and install-missing installs only what that machine lacks.
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any \
  -d "$WORK/extra" "diffusers==0.42.1" "datasets==5.2.0" "megatron-energon==7.4.1" "transformers==5.8.1" \
  "tokenizers==0.22.2" "tensorboard" "rich" "scipy" "nvidia-ml-py" "ninja"
size=$PART
# the GPU image's own distributions (bench/gpu_image_packages.txt) stay behind: install-missing would skip them anyway
image=$(grep -v '^#' "$REPO/bench/gpu_image_packages.txt" | paste -sd'|')
for w in $(ls -S "$WORK"/extra/*.whl); do
  dist=$(basename "$w" | cut -d- -f1 | tr '_A-Z' '-a-z')
  [[ "$dist" == nvidia-ml-py ]] || ! grep -Pq "^($image)\$" <<< "$dist" || continue
  case $(basename "$w" | cut -d- -f1) in
    nvidia_ml_py) ;;
    torch|nvidia_*|triton|cuda_*|numpy|sympy|mpmath|networkx|setuptools|jinja2|markupsafe|transformers|tokenizers) continue ;;
  esac
  n=$(stat -c %s "$w")
  if ((size + n > PART)); then mkdir -p "$OUT/c$i/extra"; cur=$OUT/c$i/extra; i=$((i + 1)); size=0; fi
  mv "$w" "$cur/"
  size=$((size + n))
done
# builds an earlier GPU machine of the same image left in its OUT (install-te's transformer_engine_torch wheel,
# install-conv1d's causal_conv1d_built.tgz), kept in <repo>/.gpubuilt/: carried, they skip about 5 minutes of
# compiling there
if compgen -G "$REPO/.gpubuilt/*" >/dev/null; then mkdir -p "$OUT/c$i"; cp "$REPO"/.gpubuilt/* "$OUT/c$i/"; i=$((i + 1)); fi
# The local post-training chain (bench/gpu_local_pipe.sh: `pipe data-prep-sft sft ... mtp-boost -c local`), in a
# folder of its own (local/, about 34 MB with the shared data below; the script installs it into site-local/, first on its PYTHONPATH): the
# local runtime needs the project's transformers (5.24: the 5.8 that Megatron-Bridge pins routes NemotronH's MoE in
# another module, and the expert-bias update of nemotron.runtime.megatron.moe fails on it) with its tokenizers and hub client;
# TRL (the GRPO and distillation trainers), Math-Verify and latex2sympy2-extended (the reward; the 4.9.3 antlr4
# runtime of c0 is within its pins); mistral-common for its Tekken vocabulary file only (`data prep sft -c tiny`
# reads it; its import needs only the standard library). All at the project's pins, without dependencies: the rest
# is in c0, the extra wheels or the GPU image. Found by running the chain with every imported module listed and the
# optional ones made absent (docs/post_training_pipeline.md). No Ray and no NeMo-Run: `-c local` never imports them.
mkdir -p "$OUT/c$i/local"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any \
  -d "$OUT/c$i/local" "transformers==5.24.0" "tokenizers==0.23.3" "huggingface-hub==2.4.0" "httpx2==2.6.0" \
  "httpcore2==2.6.0" "truststore==0.10.5" "trl==1.16.0" "math-verify==0.9.0" "latex2sympy2-extended==1.11.0" \
  "mistral-common==1.13.1"
# and the data prep stages' raw inputs beside them (the shared data folder, 9 MB: GSM8K, the SFT chat sets; without it
# the RL data is the stage's own 24 problems, fewer than a step of the GPU settings takes)
cp -r "${NEMOTRON_SHARED_DATA:-$REPO/../shared/data}" "$OUT/c$i/local/shared-data"
for d in "$OUT"/c*; do say "$(basename "$d"): $(du -sh "$d" | cut -f1)"; done
