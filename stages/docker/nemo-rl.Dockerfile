# Image of the NeMo RL stages (rlvr, mopd). NeMo RL's Ultra recipes live on its main branch; its own
# docker/Dockerfile builds the runtime. Point BASE at that image once built (stages/images.toml).
ARG BASE=nemo-rl:main-ultra
FROM ${BASE}
RUN pip install --no-cache-dir "pyyaml>=6" "omegaconf>=2.3" "pydantic>=2.6" "rich>=13" "click>=8.1"
COPY nemotron /opt/nemotron/nemotron
ENV PYTHONPATH=/opt/nemotron
