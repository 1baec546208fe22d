# Image of the Megatron-Bridge stages (pretrain, sft, convert, quantize): the NeMo container plus
# Megatron-Bridge's Nemotron 3 Ultra branch (stages/images.toml says which versions and why).
ARG BASE=nvcr.io/nvidia/nemo:26.04.01
FROM ${BASE}
ARG MEGATRON_BRIDGE_REF=nemotron_3_ultra
RUN pip install --no-cache-dir --no-deps \
        "megatron-bridge @ git+https://github.com/NVIDIA-NeMo/Megatron-Bridge.git@${MEGATRON_BRIDGE_REF}"
RUN pip install --no-cache-dir "pyyaml>=6" "omegaconf>=2.3" "pydantic>=2.6" "rich>=13" "click>=8.1"
COPY nemotron /opt/nemotron/nemotron
ENV PYTHONPATH=/opt/nemotron
