"""nemotron: the staged training pipeline for NVIDIA Nemotron 3 Ultra.

Importing this package is cheap on purpose: it pulls in nothing heavy (no nemo_run, ray, torch,
transformers, Megatron or NeMo RL). Those are imported only by the code that submits or runs a job.
"""

__version__ = "0.1.0"
