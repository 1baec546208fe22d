# Image of the data prep stages: Ray on CPU, plus what nemotron's data prep imports.
# Built by `nemotron kit slurm build PROFILE --recipe ultra3 --stage data-prep-pretrain`; the build
# context holds `nemotron/` (the package snapshot, with its stage definitions in nemotron/_stages).
ARG BASE=rayproject/ray:2.52.0-py311-cpu
FROM ${BASE}
# The hub inputs of the default configs: hf:// blends (datasets, huggingface-hub), the hub tokenizer (huggingface-hub),
# the chat templates of SFT (jinja2) and a tokenizer folder without tokenizer.json (transformers converts it).
# tests/config/test_image_census.py checks these lines against every module the data stages import.
RUN pip install --no-cache-dir "pyyaml>=6" "omegaconf>=2.3" "pydantic>=2.6" "rich>=13" "click>=8.1" \
        "pyarrow>=15" "numpy>=1.26" "tokenizers>=0.20" "mistral-common>=1.5" \
        "datasets>=3" "huggingface-hub>=0.26" "jinja2>=3.1" "transformers>=5.2"
COPY nemotron /opt/nemotron/nemotron
ENV PYTHONPATH=/opt/nemotron
