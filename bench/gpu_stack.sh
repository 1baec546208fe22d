#!/usr/bin/env bash
# The Megatron stack for bench/gpu_megatron.py on a machine with one NVIDIA GPU, CUDA's compiler and PyTorch but
# no package index, from files carried to it (see docs/gpu_run.md for how they are made):
#
#   bash bench/gpu_stack.sh receive DIR    # keep the carried files of DIR (TE archive parts, wheels, kit) in the stash
#   bash bench/gpu_stack.sh install-kit    # install the wheels and the kit, relocate the data
#   bash bench/gpu_stack.sh install-missing  # the extra wheels (in/extra) of distributions this Python lacks
#   bash bench/gpu_stack.sh install-te     # join + check the Transformer Engine archive, unpack it, build its
#                                          # PyTorch extension (C++ against this torch; sm_90 only)
#   bash bench/gpu_stack.sh install-conv1d # build causal-conv1d's CUDA extension (the fused Mamba path packed SFT needs)
#   bash bench/gpu_stack.sh probe          # import the training path; name every module still missing
#   bash bench/gpu_stack.sh run [ARGS]     # python bench/gpu_megatron.py --blend <the data> --packed <the SFT packs>
#                                          #   --out $OUT/gpu-run ARGS (--stage sft: the SFT run; --stage
#                                          #   convert: megatron_to_hf of the SFT checkpoint, with its self-check;
#                                          #   --stage quantize: NVFP4 of that export, reloaded and compared)
#
# The RLVR route (NeMo RL's GRPO with Megatron generation; bench/gpu_rl_pack.sh's folders r0 ..., after the kit):
#   bash bench/gpu_stack.sh install-rl     # join + check ray's wheel; NeMo RL's source, its own Megatron-Bridge and
#                                          # Megatron-Core (rl-megatron/, first on the RL path), the wheels this
#                                          # Python lacks (site-rl/, after the kit's), the base's tokenizer, the RL data
#   bash bench/gpu_stack.sh probe-rl       # import the GRPO entry's modules; name every module still missing
#   bash bench/gpu_stack.sh run-rl [ARGS]  # python bench/gpu_rl.py --data <the RL data> --tokenizer <it>
#                                          #   --out $OUT/gpu-rl ARGS
#
# The stash (NEMOTRON_GPU_STASH, default /tmp/nemotron-gpu) holds site/ (a --target install on PYTHONPATH),
# in/ (what was received) and build/. The kit (kit_src.tar.xz) holds Megatron-Bridge's and Megatron-Core's
# source at the pinned commits, mamba-ssm's Python package, Transformer Engine's PyTorch sdist and the tiny
# data prep output (data.tar).
set -euo pipefail

STASH=${NEMOTRON_GPU_STASH:-/tmp/nemotron-gpu}
SITE=$STASH/site
EXTRA=$STASH/site-extra
# the RL route: NeMo RL's own Megatron-Bridge/-Core (before the kit's), NeMo RL's checkout, its wheels (after the kit's)
RL_MEGATRON=$STASH/rl-megatron
RL_SRC=$STASH/rl
SITE_RL=$STASH/site-rl
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
# (nvidia-cutlass-dsl puts its packages on sys.path with a .pth file, which a --target folder on PYTHONPATH does not
# run: its folder is named here)
RL_PATH=$RL_MEGATRON:$RL_SRC/RL:$SITE:$EXTRA:$SITE_RL:$SITE_RL/nvidia_cutlass_dsl/dsl_packages:$REPO/src
mkdir -p "$STASH/in" "$SITE"

say() { echo "[gpu-stack] $*"; }

case "${1:-}" in
  receive)
    src=${2:?usage: gpu_stack.sh receive DIR}
    cp -r "$src"/. "$STASH/in/"
    say "received $(du -sh "$src" | cut -f1) from $src; stash: $(du -sh "$STASH/in" | cut -f1)"
    ;;
  install-kit)
    cd "$STASH/in"
    t0=$SECONDS
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" wheels/*.whl
    mkdir -p "$STASH/build"
    tar -xJf kit_src.tar.xz -C "$STASH/build"
    cp -r "$STASH/build/src/." "$SITE/"
    (cd "$REPO" && tar -xf "$STASH/build/data.tar")
    # the SFT packs (`data prep sft -c tiny`: manifest, tokenizer, packed Parquet), carried beside the kit
    if [[ -f sft-data.tar ]]; then (cd "$REPO" && tar -xf "$STASH/in/sft-data.tar"); fi
    # the data prep outputs name their files by absolute path: move the prefix to where they now lie
    "$PY" - "$REPO" <<'EOF'
import pathlib, re, sys
repo = pathlib.Path(sys.argv[1])
for rel in ("output/ultra3/pretrain-data/tiny", "output/ultra3/sft-data/tiny"):
    root = repo / rel
    if not root.is_dir():
        continue
    files = list(root.rglob("*.json"))
    olds = {m.group(1) for f in files for m in re.finditer(r'"(/[^"]*?)/' + re.escape(rel), f.read_text())}
    for old in olds - {str(repo)}:
        for f in files:
            text = f.read_text()
            if old + "/" + rel in text:
                f.write_text(text.replace(old + "/" + rel, str(root)))
        print(f"[gpu-stack] {rel} relocated: {old} -> {repo}")
EOF
    # Megatron-Core's dataset index helpers (C++, pybind11): Megatron-Bridge's initialize runs `make` in that folder
    # on every start; built here once, with this Python's extension suffix, `make` finds them up to date
    ds=$SITE/megatron/core/datasets
    ext=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    g++ -O3 -Wall -shared -std=c++17 -fPIC $(PYTHONPATH="$SITE" "$PY" -m pybind11 --includes) "$ds/helpers.cpp" \
      -o "$ds/helpers_cpp$ext" || { say "Megatron-Core's dataset helpers did not build"; exit 1; }
    say "wheels and kit installed, dataset helpers built: helpers_cpp$ext ($((SECONDS - t0)) s)"
    # mamba-ssm's package __init__ imports selective_scan_cuda, its Mamba-1 CUDA kernel, which has no build for this
    # torch; the Mamba-2 path Megatron-Core runs (mamba_ssm.ops.triton: chunked scan, gated RMSNorm) never calls
    # it. A stand-in for that one module only: any call into it raises.
    cat > "$SITE/selective_scan_cuda.py" <<'PY'
"""Stand-in for mamba-ssm's Mamba-1 CUDA kernel (not built on this machine): the Mamba-2 path never calls it."""
def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    def _absent(*args, **kwargs):
        raise RuntimeError(f"selective_scan_cuda.{name}: mamba-ssm's Mamba-1 CUDA kernel is not built here")
    return _absent
PY
    if ! command -v make >/dev/null; then  # a bare machine without make: the helpers above are what make would build
      mkdir -p "$STASH/bin"
      printf '#!/bin/sh\n# stands in for make on a machine without it: the dataset helpers were built by install-kit\nexit 0\n' > "$STASH/bin/make"
      chmod +x "$STASH/bin/make"
      say "no make on this machine: $STASH/bin/make stands in (the dataset helpers are built)"
    fi
    (command -v python3-config >/dev/null && python3-config --extension-suffix) | sed 's/^/[gpu-stack] python3-config: /' || say "no python3-config: make rebuilds the helpers under another name each start"
    "$PY" -c 'import sysconfig, os, sys; i = sysconfig.get_paths()["include"]; print("[gpu-stack] python", sys.version.split()[0], "headers", i, os.path.isfile(i + "/Python.h"))'
    (nvcc --version | tail -2; g++ --version | head -1; nproc) 2>&1 | sed 's/^/[gpu-stack] /'
    ;;
  install-missing)
    # the wheels under in/extra (Megatron-Bridge's import-time dependencies: diffusers, datasets and theirs), each
    # installed only where this Python lacks that distribution: the machine's own numpy, torch, ... stay
    cd "$STASH/in"
    want=$(PYTHONPATH="$SITE:$EXTRA" "$PY" - extra/*.whl <<'EOF'
import importlib.metadata as md, re, sys
for whl in sys.argv[1:]:
    dist = re.split(r"-\d", whl.rsplit("/", 1)[-1], maxsplit=1)[0]
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        print(whl)
EOF
)
    # shellcheck disable=SC2086  # one wheel path per word
    # into a folder of their own, after site/ on PYTHONPATH: `pip --target --upgrade` replaces a top-level folder it
    # shares (megatron-energon's megatron/ would replace the kit's megatron/ with bridge/ and core/)
    [[ -z "$want" ]] || "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$EXTRA" $want
    say "installed $(echo $want | wc -w) of $(ls extra/*.whl | wc -l) extra wheels: $(for w in $want; do basename "$w" | cut -d- -f1; done | paste -sd' ')"
    ;;
  install-te)
    cd "$STASH/in"
    t0=$SECONDS
    cat $(ls te.part* | sort -V) > "$STASH/te.tar.xz"
    want=$(cat te.sha256)
    got=$(sha256sum "$STASH/te.tar.xz" | cut -c1-64)
    [[ "$want" == "$got" ]] || { say "Transformer Engine archive: sha256 $got, expected $want (a part is missing)"; exit 1; }
    tar -xJf "$STASH/te.tar.xz" -C "$SITE"
    say "Transformer Engine core unpacked ($((SECONDS - t0)) s)"
    # Transformer Engine's PyTorch extension: C++ only (CppExtension), against this torch; cuDNN and NCCL headers
    # come from the NVIDIA wheels next to torch
    mkdir -p "$STASH/build/wheel"
    if compgen -G "$STASH/in/transformer_engine_torch-*.whl" >/dev/null; then
      # built on an earlier machine of the same image (install-te leaves it in OUT): no build
      cp "$STASH"/in/transformer_engine_torch-*.whl "$STASH/build/wheel/"
    else
    tar -xzf "$STASH/build/transformer_engine_torch-2.20.2.tar.gz" -C "$STASH/build"
    inc=$("$PY" -c 'import nvidia; print("\n".join(nvidia.__path__))' | while read -r d; do find "$d" -maxdepth 3 -type d -name include 2>/dev/null || true; done | paste -sd: || true)
    (cd "$STASH/build/transformer_engine_torch-2.20.2" &&
      CPLUS_INCLUDE_PATH="$inc${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}" PYTHONPATH="$SITE" \
      NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_CUDA_ARCHS=90 NVTE_WITH_NCCL_EP=0 NVTE_FRAMEWORK=pytorch \
      MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      "$PY" -m pip wheel --no-build-isolation --no-index --no-deps --no-cache-dir -w "$STASH/build/wheel" . \
      > "$STASH/te-build.log" 2>&1) || { tail -40 "$STASH/te-build.log"; say "Transformer Engine's PyTorch extension did not build"; exit 1; }
    fi
    # unpacked beside transformer_engine/ (where it looks for transformer_engine_torch*.so first)
    (cd "$SITE" && "$PY" -m zipfile -e "$STASH"/build/wheel/transformer_engine_torch-*.whl .)
    # kept where the caller collects files (OUT), so that a later machine can skip the build
    [[ -z "${OUT:-}" ]] || cp "$STASH"/build/wheel/transformer_engine_torch-*.whl "$OUT/" 2>/dev/null || true
    # the wheel puts it under transformer_engine/wheel_lib/, where transformer_engine looks for it
    so=$(find "$SITE/transformer_engine" -maxdepth 2 -name 'transformer_engine_torch*.so' | head -1)
    [[ -n "$so" ]] || { grep -n "\.so\|error" "$STASH/te-build.log" 2>/dev/null | tail -20; say "no transformer_engine_torch*.so in the built wheel"; exit 1; }
    say "Transformer Engine's PyTorch extension built: $(basename "$so") ($((SECONDS - t0)) s in all)"
    PYTHONPATH="$SITE:$EXTRA" "$PY" -c 'import transformer_engine.pytorch as te, transformer_engine; print("[gpu-stack] transformer_engine", transformer_engine.__version__, "imports")'
    ;;
  install-conv1d)
    # causal-conv1d's CUDA extension (Megatron-Core's fused Mamba path; packed SFT needs it), built from the kit's
    # sdist for this GPU's architecture only (its setup.py compiles ten; one takes about a tenth of the time), with
    # the nvcc flags of its setup.py, then its Python package beside it in site/
    t0=$SECONDS
    if [[ -f "$STASH/in/causal_conv1d_built.tgz" ]]; then
      # built on an earlier machine of the same image (this step leaves it in OUT): no build
      tar -xzf "$STASH/in/causal_conv1d_built.tgz" -C "$SITE"
      PYTHONPATH="$SITE" "$PY" -c 'import causal_conv1d, causal_conv1d_cuda; print("[gpu-stack] causal_conv1d", causal_conv1d.__version__, "imports (carried build)")'
      exit 0
    fi
    rm -rf "$STASH/build/conv1d" && mkdir -p "$STASH/build/conv1d"
    tar -xzf "$STASH"/build/causal_conv1d-*.tar.gz -C "$STASH/build/conv1d" --strip-components=1
    cd "$STASH/build/conv1d"
    arch=$("$PY" -c 'import torch; print("%d%d" % torch.cuda.get_device_capability())')
    PYTHONPATH="$SITE" MAX_JOBS=${MAX_JOBS:-16} "$PY" - "$arch" <<'PY' > build.log 2>&1 || { tail -30 build.log; exit 1; }
import sys
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
arch = sys.argv[1]
sys.argv = [sys.argv[0], "build_ext", "--inplace"]
nvcc = ["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_OPERATORS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
        "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "--threads", "4",
        "-gencode", f"arch=compute_{arch},code=sm_{arch}"]
srcs = ["csrc/causal_conv1d.cpp", "csrc/causal_conv1d_fwd.cu", "csrc/causal_conv1d_bwd.cu", "csrc/causal_conv1d_update.cu"]
setup(name="causal_conv1d", ext_modules=[CUDAExtension("causal_conv1d_cuda", srcs, include_dirs=["csrc"],
      extra_compile_args={"cxx": ["-O3"], "nvcc": nvcc})], cmdclass={"build_ext": BuildExtension})
PY
    cp causal_conv1d_cuda*.so "$SITE/"
    rm -rf "$SITE/causal_conv1d" && cp -r causal_conv1d "$SITE/"
    # kept where the caller collects files (OUT), so that a later machine can skip the build (about 5 minutes)
    [[ -z "${OUT:-}" ]] || tar -czf "$OUT/causal_conv1d_built.tgz" causal_conv1d_cuda*.so causal_conv1d
    PYTHONPATH="$SITE" "$PY" -c 'import causal_conv1d, causal_conv1d_cuda; print("[gpu-stack] causal_conv1d", causal_conv1d.__version__, "imports")'
    say "causal-conv1d built for sm_$arch ($((SECONDS - t0)) s)"
    ;;
  probe)
    cd "$REPO"
    # the training path; bench/import_probe.py names every module missing from it in one pass
    PYTHONPATH="$SITE:$EXTRA:$REPO/src" "$PY" bench/import_probe.py transformer_engine.pytorch megatron.core mamba_ssm \
      causal_conv1d nvidia_resiliency_ext.inprocess megatron.bridge megatron.bridge.recipes.nemotronh \
      megatron.bridge.training.gpt_step megatron.bridge.training.pretrain megatron.bridge.training.finetune \
      nemotron.runtime.megatron.megatron_bridge
    ;;
  install-rl)
    cd "$STASH/in"
    t0=$SECONDS
    [[ -f rl-ray.sha256 && -f rl-nemo-rl.tgz && -f rl-megatron.tar.xz ]] || { say "no RL pack in $STASH/in: receive the folders r0 ... of bench/gpu_rl_pack.sh first"; exit 1; }
    # ray's wheel: join the parts, check the SHA-256
    ray_whl=$STASH/$(cat rl-ray.name)
    cat $(ls rl-ray.part* | sort -V) > "$ray_whl"
    want=$(cat rl-ray.sha256)
    got=$(sha256sum "$ray_whl" | cut -c1-64)
    [[ "$want" == "$got" ]] || { say "ray's wheel: sha256 $got, expected $want (a part is missing: each r folder received?)"; exit 1; }
    # NeMo RL's checkout (RL/: nemo_rl, examples/run_grpo.py, its converters and recipes) and the Megatron-Bridge and
    # Megatron-Core it pins, in a folder of their own before the kit's on the RL path (megatron/ is a namespace
    # package: the first folder holding megatron/core wins)
    rm -rf "$RL_SRC/RL" "$RL_MEGATRON"
    mkdir -p "$RL_SRC" "$RL_MEGATRON"
    tar -xzf rl-nemo-rl.tgz -C "$RL_SRC"
    tar -xJf rl-megatron.tar.xz -C "$RL_MEGATRON"
    tar -xJf rl-tokenizer.tar.xz -C "$RL_SRC"
    (cd "$REPO" && tar -xf "$STASH/in/rl-data.tar")
    # Megatron-Core's dataset index helpers in that copy too (as install-kit builds the kit's)
    ds=$RL_MEGATRON/megatron/core/datasets
    ext=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    g++ -O3 -Wall -shared -std=c++17 -fPIC $(PYTHONPATH="$SITE" "$PY" -m pybind11 --includes) "$ds/helpers.cpp" \
      -o "$ds/helpers_cpp$ext" || { say "Megatron-Core's dataset helpers (NeMo RL's copy) did not build"; exit 1; }
    # the wheels split for transfer (gpu_rl_pack.sh): join, check the SHA-256
    for sum in rl-wheels/*.whl.sha256; do
      [[ -e "$sum" ]] || continue
      whl=${sum%.sha256}
      cat $(ls "$whl".part* | sort -V) > "$whl"
      got=$(sha256sum "$whl" | cut -c1-64)
      [[ "$(cat "$sum")" == "$got" ]] || { say "$(basename "$whl"): sha256 $got, expected $(cat "$sum") (a part is missing: each r folder received?)"; exit 1; }
    done
    # the wheels this Python lacks, with the RL path: the image's and the kit's distributions stay
    want=$(PYTHONPATH="$RL_PATH" "$PY" - "$ray_whl" rl-wheels/*.whl <<'EOF'
import importlib.metadata as md, re, sys
for whl in sys.argv[1:]:
    dist = re.split(r"-\d", whl.rsplit("/", 1)[-1], maxsplit=1)[0]
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        print(whl)
EOF
)
    # shellcheck disable=SC2086  # one wheel path per word
    [[ -z "$want" ]] || "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE_RL" $want
    say "installed $(echo $want | wc -w) of $(($(ls rl-wheels/*.whl | wc -l) + 1)) RL wheels: $(for w in $want; do basename "$w" | cut -d- -f1; done | paste -sd' ')"
    # flashinfer's JIT runs `ninja` from PATH (the Ray workers inherit run-rl's PATH, which starts with $STASH/bin)
    if [[ -x "$SITE_RL/bin/ninja" ]] && ! command -v ninja >/dev/null; then
      mkdir -p "$STASH/bin" && ln -sf "$SITE_RL/bin/ninja" "$STASH/bin/ninja"
    fi
    say "NeMo RL at $RL_SRC/RL, its Megatron ($(paste -sd' ' "$RL_MEGATRON/COMMITS")) at $RL_MEGATRON, the base's tokenizer at $RL_SRC/tokenizer ($((SECONDS - t0)) s)"
    ;;
  probe-rl)
    cd "$REPO"
    # what NeMo RL's GRPO entry and its workers import on the Megatron-generation path, and where megatron.core and
    # megatron.bridge come from (NeMo RL's pins, not the kit's)
    rl=$RL_SRC/RL
    PATH="$STASH/bin:$PATH" PYTHONPATH="$RL_PATH" NEMO_RL_PY_EXECUTABLES_SYSTEM=1 "$PY" bench/import_probe.py \
      --where megatron.core,megatron.bridge,nemo_rl,ray,transformers,torch \
      ray transformer_engine.pytorch mamba_ssm causal_conv1d megatron.core megatron.bridge nemo_rl.algorithms.grpo \
      nemo_rl.utils.logger nemo_rl.environments.math_environment nemo_rl.models.policy.lm_policy \
      nemo_rl.models.policy.workers.megatron_policy_worker nemo_rl.models.generation.megatron.megatron_generation \
      nemo_rl.models.generation.megatron.megatron_worker flashinfer flash_attn.cute megatron.core.transformer.attention \
      nemotron.runtime.rl.nemo_rl \
      "$rl/examples/run_grpo.py" "$rl/examples/converters/convert_megatron_to_hf.py"
    # which FlashAttention Megatron-Core's dynamic batching will find (it needs one of them)
    PYTHONPATH="$RL_PATH" "$PY" -c 'from megatron.core.transformer import attention as a
print("[gpu-stack] Megatron-Core sees FA4", a.HAVE_FA4, "FA3", a.HAVE_FA3)' 2>&1 | grep -v -i warn || true
    ;;
  run-rl)
    shift
    cd "$REPO"
    out=${OUT:-$REPO/gpu-run-out}/gpu-rl
    PATH="$STASH/bin:$PATH" PYTHONPATH="$RL_PATH" "$PY" bench/gpu_rl.py --data "$REPO/output/ultra3/rl-data/tiny" \
      --tokenizer "$RL_SRC/tokenizer" --out "$out" --work "$STASH/rl-work" "$@"
    ;;
  run)
    shift
    cd "$REPO"
    # RUN_OUT: a folder that outlives one command (the runs of one machine can be split over several commands:
    # --skip reference in a later one reads the earlier reference's record from there); copied into OUT at the end
    out=${RUN_OUT:-${OUT:-$REPO/gpu-run-out}/gpu-run}
    rc=0
    # calib.jsonl (c0): the texts --stage quantize calibrates on (WikiText-2 validation articles of the shared data)
    calib=(); [[ -f "$STASH/in/calib.jsonl" ]] && calib=(--calib "$STASH/in/calib.jsonl")
    PATH="$STASH/bin:$PATH" PYTHONPATH="$SITE:$EXTRA:$REPO/src" "$PY" bench/gpu_megatron.py \
      --blend "$REPO/output/ultra3/pretrain-data/tiny/blend.json" --packed "$REPO/output/ultra3/sft-data/tiny" \
      --out "$out" --work "$STASH/work" "${calib[@]}" "$@" || rc=$?
    [[ -z "${OUT:-}" || -z "${RUN_OUT:-}" ]] || cp -r "$out" "$OUT/"
    exit $rc
    ;;
  *)
    sed -n '2,26p' "$0"
    exit 2
    ;;
esac
