"""Runtimes that execute a stage's job (imported only by the stages' entry scripts, never by the CLI).

The ``local`` backend of ``pretrain`` and ``sft`` trains the catalogue's ``small`` NemotronH with
Hugging Face transformers' ``Trainer`` on one machine (the CPU, or one GPU when visible), from the
files our data prep writes:

* :mod:`~nemotron.runtime.settings` — the compiled ``train.yaml`` read into one record, and
  Megatron-Core's learning-rate schedule as a pure function (stdlib only);
* :mod:`~nemotron.runtime.pretrain_data` — Megatron ``.bin/.idx`` shards through ``blend.json``,
  sampled as Megatron-Core's GPT and blended datasets do (numpy);
* :mod:`~nemotron.runtime.sft_data` — Megatron-Bridge packed Parquet, unpacked into one row per
  sub-sequence (or kept packed with real boundaries when the CUDA Mamba kernels are present);
* :mod:`~nemotron.runtime.model` — build or load the NemotronH (transformers);
* :mod:`~nemotron.runtime.trainer` — the training loop (``transformers.Trainer``), checkpoints in
  Hugging Face form under ``checkpoint.save``, resume, signals;
* :mod:`~nemotron.runtime.entry` — what ``stages/ultra3/{pretrain,sft}/run.py`` call: checks first,
  heavy imports after;
* :mod:`~nemotron.runtime.convert` — the transformers-v5 → v4 NemotronH config rewrite (pure);
* :mod:`~nemotron.runtime.routing` — the MoE-routing check the Megatron-Bridge entry runs on its
  model provider (pure);
* :mod:`~nemotron.runtime.quant_config` — quantize recipes, module kinds, the export-name repair, the
  local settings and the cluster config translation (stdlib + yaml);
* :mod:`~nemotron.runtime.quantize` — the ``local`` quantize backend (nvidia-modelopt);
  :mod:`~nemotron.runtime.nvfp4_cpu` — its CPU NVFP4 route; :mod:`~nemotron.runtime.quantize_cluster` —
  the Megatron-Bridge quantize entry (checks first).
* :mod:`~nemotron.runtime.megatron_bridge` — the cluster runtime of ``pretrain``, ``sft`` and ``convert``:
  checks, the translation to Megatron-Bridge's ConfigContainer (pure), AutoBridge and the training call
  (stdlib at import time);
* :mod:`~nemotron.runtime.tracking` — TensorBoard / W&B identity shared by both training runtimes (pure);
* :mod:`~nemotron.runtime.nemo_rl` — the cluster runtime of ``rlvr`` and ``mopd``: checks, the v4
  checkpoint views, the translation to NeMo RL's config (pure) and the call of NeMo RL's GRPO entry
  (stdlib at import time).

Only :mod:`settings`, :mod:`convert`, :mod:`routing` and :mod:`nemo_rl` are light; the rest import numpy, pyarrow,
torch or transformers at module level and must stay out of the CLI's import path.
"""
