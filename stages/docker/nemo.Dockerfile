# Image of the Megatron-Bridge stages (pretrain, sft, convert, quantize): the NeMo container plus
# Megatron-Bridge's Nemotron 3 Ultra branch at a fixed commit, the Megatron-Core commit that the branch's
# 3rdparty/Megatron-LM submodule pins, and Model Optimizer 0.47. stages/images.toml [nemo] records the
# same base, commits and versions and says why (tests/test_images.py keeps the two in step).
# Built by `nemotron kit slurm build PROFILE --recipe ultra3 --stage pretrain`; the build context holds
# `nemotron/` (the package snapshot, with its stage definitions in nemotron/_stages).
ARG BASE=nvcr.io/nvidia/nemo:26.04.01
FROM ${BASE}
# Megatron-Bridge branch nemotron_3_ultra at 4588417 (package 0.5.0) and Megatron-LM c8288b6 (megatron-core
# 0.18.0; the base image's own megatron-core is another build of that version). Both from git and without
# their dependencies (the base image has them), so pip records each commit in the package's direct_url.json,
# which the runtime pre-check compares with stages/images.toml [nemo].commits.
ARG MEGATRON_BRIDGE_COMMIT=4588417902c8ce59881c7477f369b224ad185ba7
ARG MEGATRON_CORE_COMMIT=c8288b6c978f2b6b6c460a21b5b42114f5c0be3e
RUN pip install --no-cache-dir --no-deps --no-build-isolation \
        "megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git@${MEGATRON_CORE_COMMIT}" \
        "megatron-bridge @ git+https://github.com/NVIDIA-NeMo/Megatron-Bridge.git@${MEGATRON_BRIDGE_COMMIT}"
# The quantize recipes are written in Model Optimizer 0.47's quant_cfg list form (the branch pins 0.44.0rc5;
# the quantize entry refuses anything older than 0.47).
ARG MODELOPT_VERSION=0.47.0
RUN pip install --no-cache-dir "nvidia-modelopt==${MODELOPT_VERSION}"
RUN pip install --no-cache-dir "pyyaml>=6" "omegaconf>=2.3" "pydantic>=2.6" "rich>=13" "click>=8.1"
COPY nemotron /opt/nemotron/nemotron
ENV PYTHONPATH=/opt/nemotron
# The build fails here when the image would fail the stages' own framework check (versions and commits).
RUN python -c "from nemotron.runtime.megatron.megatron_bridge import framework_problems as f; p = f(); print(*p, sep='\n'); raise SystemExit(1 if p else 0)"
