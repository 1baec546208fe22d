#!/usr/bin/env bash
# Build, on a machine with a package index (the one pip is configured with), what the one-GPU RLVR run
# (bench/gpu_rl.py: NeMo RL's GRPO with Megatron generation) needs on a GPU machine without one, beyond the Megatron
# kit of bench/gpu_pack.sh, as folders of at most 58 MiB (one transfer each):
#
#   bash bench/gpu_rl_pack.sh [OUT]      # default OUT: <repo>/.gpukit  ->  OUT/r0 ... OUT/rN (next to c0 ... cN)
#
# What (bench/gpu_stack.sh install-rl installs it; docs/gpu_run.md "RLVR on one GPU"):
# - rl-nemo-rl.tgz: NeMo RL at 7ea279a (the archive of ../shared/upstream: nemo_rl/, examples/ with run_grpo.py, its
#   converters and the recipes our precheck compares, pyproject.toml);
# - rl-megatron.tar.xz: the Megatron-Bridge and Megatron-Core NeMo RL 7ea279a pins (its submodule
#   3rdparty/Megatron-Bridge-workspace/Megatron-Bridge at MB_COMMIT, whose 3rdparty/Megatron-LM is at MLM_COMMIT):
#   `megatron/bridge` and Megatron-LM's whole `megatron/` (core, training, inference, post_training, rl, ...). Not the kit's (Megatron-Bridge 4588417 of the Ultra branch
#   and Megatron-LM c8288b6): NeMo RL's Megatron policy worker imports names that Megatron-Core lacks there
#   (`FullyShardedDataParallelV1` of megatron/core/distributed/fsdp/mcore_fsdp_adapter.py). install-rl puts them in
#   a folder of their own, first on the RL run's PYTHONPATH; the pretrain/SFT/convert runs keep the kit's. Read from
#   git repositories of the two projects holding those commits (MB_GIT, MLM_GIT: any clone or mirror, `git cat-file`
#   only, so a partial clone does);
# - rl-ray.partNN + rl-ray.sha256: ray's cp312 manylinux wheel (RAY_VERSION, within NeMo RL's `ray[default]>=2.55.1`;
#   the contract interpreter's version), split (~79 MB);
# - rl-wheels/: every other distribution the GRPO entry and its workers import on the Megatron-generation path that
#   neither the GPU image (bench/gpu_image_packages.txt) nor the Megatron kit (gpu_pack.sh) has, without their
#   dependencies, at the versions of the contract interpreter (tests/contract/requirements.txt), plus ray's
#   `default` extra (NeMo RL pins ray[default]). Found by importing for real (bench/gpu_rl_closure.py: run_grpo.py,
#   the Megatron policy and generation workers, the math environment, the logger, the converter, with the sources
#   above); install-rl installs only those the machine lacks;
# - rl-tokenizer.tar.xz: the tokenizer folder the fresh `small` base gets (the Tekken vocabulary data prep uses, with
#   our Nemotron 3 chat template: NeMo RL's math data processor applies the chat template);
# - rl-data.tar: `nemotron ultra3 data prep rl -c tiny`'s output (GSM8K from the shared data folder).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/.gpukit}
UPSTREAM=${NEMOTRON_UPSTREAM:-$REPO/../shared/upstream}
MB_GIT=${MB_GIT:?set MB_GIT to a git repository of Megatron-Bridge holding the commit NeMo RL 7ea279a pins}
MLM_GIT=${MLM_GIT:?set MLM_GIT to a git repository of Megatron-LM holding the commit that Megatron-Bridge pins}
# NeMo RL 7ea279a: 3rdparty/Megatron-Bridge-workspace/Megatron-Bridge -> MB_COMMIT; its 3rdparty/Megatron-LM -> MLM_COMMIT
MB_COMMIT=8c46dc4259080c510b7455f43e836fdff222c5d3
MLM_COMMIT=14346b65a2d0790e451919858f7771078105c5f0
RAY_VERSION=2.60.0
PART=$((58 * 1024 * 1024))
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
say() { echo "[gpu-rl-pack] $*"; }
mkdir -p "$WORK/items/rl-wheels"

# NeMo RL's source at the pinned commit, as archived
cp "$UPSTREAM"/nemo-rl-7ea279a.tgz "$WORK/items/rl-nemo-rl.tgz"
chmod u+w "$WORK/items/rl-nemo-rl.tgz"  # the shared archive is read-only; a second receive overwrites it

# NeMo RL's Megatron-Bridge and Megatron-Core, blob by blob (works on partial clones, where `git archive` may stop
# on an absent blob elsewhere in the tree)
export_tree() {  # export_tree GIT COMMIT DEST PATH...
  local git=$1 commit=$2 dest=$3; shift 3
  git -C "$git" cat-file -e "$commit^{commit}" || { say "error: $git has no commit $commit"; exit 1; }
  git -C "$git" ls-tree -r "$commit" -- "$@" | while read -r _ type sha path; do
    [[ $type == blob ]] || continue
    mkdir -p "$dest/$(dirname "$path")"
    git -C "$git" cat-file blob "$sha" > "$dest/$path"
  done
}
export_tree "$MB_GIT" "$MB_COMMIT" "$WORK/mb" src/megatron/bridge
# the whole megatron/ of Megatron-LM (core, training, and the inference, post_training, rl, elastification packages
# megatron.training imports lazily): NeMo RL's own __init__ puts the whole Megatron-LM checkout on sys.path for that
export_tree "$MLM_GIT" "$MLM_COMMIT" "$WORK/mlm" megatron
mkdir -p "$WORK/rlm"
mv "$WORK/mlm/megatron" "$WORK/rlm/megatron"
mv "$WORK/mb/src/megatron/bridge" "$WORK/rlm/megatron/"
printf 'megatron-bridge %s\nmegatron-lm %s\n' "$MB_COMMIT" "$MLM_COMMIT" > "$WORK/rlm/COMMITS"
(cd "$WORK/rlm" && tar -cf - . | xz -T0 -6 > "$WORK/items/rl-megatron.tar.xz")
say "NeMo RL's Megatron-Bridge ${MB_COMMIT:0:8} + Megatron-LM ${MLM_COMMIT:0:8}: $(du -sh "$WORK/items/rl-megatron.tar.xz" | cut -f1)"

# wheels for CPython 3.12 on manylinux x86_64
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
         --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
         --platform any -d "$1" "${@:2}"; }
mkdir -p "$WORK/ray"
dl "$WORK/ray" "ray==$RAY_VERSION"
# the import closure beyond the image and the kit (bench/gpu_rl_closure.py), at the contract interpreter's versions
# + flashinfer (NeMo RL's mcore extra pins 0.6.8.post1): its Megatron generation worker asks Megatron-Core's dynamic
# inference context for flashinfer's fused RoPE whenever the model is BF16, and the context asserts flashinfer is
# importable (first GPU run, 2026-12-06); it JIT-builds its kernels with nvcc + ninja (no cubin/jit-cache wheels)
# + FlashAttention 4 (CuTe DSL, wheels only): Megatron-Core's attention asserts FA2 >= 2.7.3, FA3 or FA4 for the
# dynamic batching NeMo RL's Megatron generation uses (second GPU run). FA2 and FA3 are CUDA builds of an hour and
# more; FA4 is Python over NVIDIA's CUTLASS DSL (its CUDA 13 libraries: one wheel of 92 MB, split below)
dl "$WORK/items/rl-wheels" \
  "hydra-core==1.3.2" "torchdata==0.11.0" "tensordict==0.15.3" "pyvers==0.2.3" "orjson==3.13.0" "einops==0.8.2" \
  "math-verify==0.9.0" "latex2sympy2_extended==1.11.0" "pyzmq==27.3.0" "soundfile==0.14.0" \
  "wandb==0.31.0" "mlflow==3.17.2" "mlflow-skinny==3.17.2" "mlflow-tracing==3.17.2" "swanlab==0.10.3" \
  "matplotlib==3.11.2" "cycler==0.12.1" "fonttools==4.68.0" "kiwisolver==1.5.1" "pyparsing==3.3.3" \
  "scikit-learn==1.9.1" "joblib==1.6.0" "threadpoolctl==3.8.0" "narwhals==2.29.0" \
  "fastapi==0.165.0" "starlette==1.10.0" "uvicorn==0.54.0" "sniffio==1.3.1" "python-dotenv==1.2.4" \
  "pydantic-settings==2.16.3" "pydantic-extra-types==2.11.1" "platformdirs==4.14.9" "cachetools==7.3.3" \
  "databricks-sdk==0.167.0" "google-auth==2.63.0" "googleapis-common-protos==1.76.0" "sqlparse==0.6.1" \
  "opentelemetry-sdk==1.45.2" "opentelemetry-proto==1.45.2" "opentelemetry-semantic-conventions==0.66b2" \
  "opentelemetry-exporter-otlp-proto-http==1.45.2" "opentelemetry-exporter-otlp-proto-common==1.45.2" \
  "opentelemetry-exporter-otlp-common==0.66b2" "opentelemetry-exporter-http-transport==0.66b2" \
  "pyecharts==2.1.0" "simplejson==4.3.0" "pyroaring==1.0.3" "watchdog==7.1.1" "more-itertools==10.8.0" \
  "jaraco.context==6.1.0" "jaraco.functools==4.4.0" "jaraco.text==4.0.0" "backports.tarfile==1.2.0" \
  "aiohttp-cors" "colorful" "py-spy" "opencensus" "opencensus-context" "opentelemetry-exporter-prometheus" \
  "smart-open" "virtualenv" "distlib" \
  "flashinfer-python==0.6.8.post1" "apache-tvm-ffi==0.1.15.post2" "ninja" "nvidia-ml-py" \
  "flash-attn-4==4.0.0b36" "quack-kernels==0.6.5" "torch-c-dlpack-ext==0.1.5" "nvidia-cutlass-dsl==4.8.1" \
  "nvidia-cutlass-dsl-libs-base==4.8.1" "nvidia-cutlass-dsl-libs-cu13==4.8.1"
# the image's own distributions stay behind (install-rl would skip them anyway)
image=$(grep -v '^#' "$REPO/bench/gpu_image_packages.txt" | paste -sd'|')
for w in "$WORK"/items/rl-wheels/*.whl; do
  dist=$(basename "$w" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
  if grep -Pq "^($image)\$" <<< "$dist"; then rm "$w"; fi
done
say "wheels: $(ls "$WORK"/items/rl-wheels | wc -l), $(du -sh "$WORK/items/rl-wheels" | cut -f1)"

# the fresh base's tokenizer: the Tekken vocabulary of data prep with our Nemotron 3 chat template
(cd "$REPO" && PYTHONPATH="$REPO/src" .venv/bin/python - "$WORK/tok/tokenizer" <<'PY'
import sys
from pathlib import Path
import mistral_common
from nemotron.data import tokenizer as tk
out = Path(sys.argv[1])
info = tk.resolve(str(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"), cache_dir=out.parent / "cache")
tk.write_folder(out, info, chat_template=Path("stages/ultra3/data_prep_sft/nemotron3_chat.jinja").read_text(encoding="utf-8"))
PY
)
(cd "$WORK/tok" && tar -cf - tokenizer | xz -T0 -6 > "$WORK/items/rl-tokenizer.tar.xz")
# the RL data: `data prep rl -c tiny` (GSM8K from the shared data folder beside the checkout)
rl=output/ultra3/rl-data/tiny
(cd "$REPO" && [[ -f $rl/train.jsonl ]] || .venv/bin/nemotron ultra3 data prep rl -c tiny >/dev/null)
(cd "$REPO" && tar -cf "$WORK/items/rl-data.tar" $rl/train.jsonl $rl/validation.jsonl $rl/manifest.json)

# ray, split; its SHA-256 beside the last part
split -b "$PART" -d -a 2 "$WORK"/ray/ray-*.whl "$WORK/items/rl-ray.part"
sha256sum "$WORK"/ray/ray-*.whl | cut -c1-64 > "$WORK/items/rl-ray.sha256"
basename "$WORK"/ray/ray-*.whl > "$WORK/items/rl-ray.name"

# a wheel larger than one transfer: NAME.whl.partNN + NAME.whl.sha256 (install-rl joins and checks them)
for w in "$WORK"/items/rl-wheels/*.whl; do
  if (( $(stat -c %s "$w") > PART )); then
    split -b "$PART" -d -a 2 "$w" "$w.part"
    sha256sum "$w" | cut -c1-64 > "$w.sha256"
    rm "$w"
  fi
done

# folders of one transfer each: the items, largest first, each into the first folder it fits (wheels keep their
# folder name inside the transfer folder)
rm -rf "$OUT"/r[0-9]*
python3 - "$WORK/items" "$OUT" "$PART" <<'PY'
import os, shutil, sys
from pathlib import Path
items, out, cap = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
files = sorted((p for p in items.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
bins: list[int] = []
for f in files:
    n = f.stat().st_size
    i = next((k for k, used in enumerate(bins) if used + n <= cap), None)
    if i is None:
        bins.append(0)
        i = len(bins) - 1
    bins[i] += n
    dest = out / f"r{i}" / f.relative_to(items)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(f), dest)
PY
for d in "$OUT"/r[0-9]*; do say "$(basename "$d"): $(du -sh "$d" | cut -f1) ($(find "$d" -type f | wc -l) files)"; done
