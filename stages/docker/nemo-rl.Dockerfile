# Image of the NeMo RL stages (rlvr, mopd). NeMo RL's Ultra recipes live on its main branch at commit
# 7ea279abfbeb698b092856d0dab61e7cf39bc909; build its own docker/Dockerfile from that checkout, tag the
# result nemo-rl:main-ultra (the BASE below, stages/images.toml [nemo-rl] image and commits) and build this
# one on top with `nemotron kit slurm build PROFILE --recipe ultra3 --stage rlvr`.
ARG BASE=nemo-rl:main-ultra
FROM ${BASE}
RUN pip install --no-cache-dir "pyyaml>=6" "omegaconf>=2.3" "pydantic>=2.6" "rich>=13" "click>=8.1"
COPY nemotron /opt/nemotron/nemotron
ENV PYTHONPATH=/opt/nemotron
