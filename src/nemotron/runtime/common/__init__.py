"""What the families' runtimes share: the compiled ``train.yaml``'s readers, the NemotronH of Hugging Face
transformers, its config forms, the curves picture, and the checks a cluster runtime makes before it loads a
framework.

* :mod:`~nemotron.runtime.common.settings` — the compiled ``train.yaml`` of a ``local`` pretrain/SFT run read into
  one record, the key readers the other runtimes' settings use too (``get``, ``config_path``, ``thread_count``,
  ``EXIT_REQUEUE``), and Megatron-Core's learning-rate schedule as a pure function (stdlib only);
* :mod:`~nemotron.runtime.common.model` — build or load the catalogue's NemotronH (transformers), its checkpoints'
  records and resume;
* :mod:`~nemotron.runtime.common.convert` — NemotronH config forms, transformers v5 ↔ v4 (pure);
* :mod:`~nemotron.runtime.common.curves` — a run's ``metrics.png`` beside its ``metrics.jsonl``;
* :mod:`~nemotron.runtime.common.prestart` — pinned versions, GPUs, paths and memory, checked by every backend that
  runs in a container under torchrun or Ray before it imports its framework.

Nothing here imports a family's package.
"""
