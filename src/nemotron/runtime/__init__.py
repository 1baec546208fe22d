"""Runtimes that execute a stage's job (imported by the stages' entry scripts; the CLI and validation import light
parts of them inside functions: the settings readers and translations the dry run checks, ``pipe``'s metrics).

Grouped by the registry's families (:data:`nemotron.config.registry.FAMILIES`, a row's ``kind``): a family's entry,
settings, data readers and both of its backends (the cluster one and ``local``) sit in one package.

* :mod:`~nemotron.runtime.dispatch` — what every stage's ``run.py`` calls: reads the compiled config, picks the
  backend, checks the environment, runs the backend's ``module:function``;
* :mod:`~nemotron.runtime.stage_metrics` — what a finished stage measured, read back for ``pipe`` (stdlib only);
* :mod:`~nemotron.runtime.common` — what the families share: settings readers, the transformers NemotronH, its
  config forms, curves, the cluster pre-start checks;
* :mod:`~nemotron.runtime.megatron` — kinds ``megatron`` and ``convert`` (``pretrain``, ``sft``, ``mtp-boost``,
  ``convert``): Megatron-Bridge on the cluster, the local trainer, the pretrain/SFT data readers;
* :mod:`~nemotron.runtime.rl` — kind ``rl`` (``rlvr``, ``mopd-warmup``, ``mopd``): NeMo RL on the cluster, TRL
  locally;
* :mod:`~nemotron.runtime.quantization` — kind ``quantize``: Model Optimizer, locally and under Megatron-Bridge;
* :mod:`~nemotron.runtime.eval` — kind ``eval``: the local evaluation and ``--compare``.

Data prep (kind ``data``) runs in :mod:`nemotron.data`. A new stage's runtime goes into its kind's package; a new
kind adds a package. Heavy third-party modules are imported inside functions, except torch in
``megatron/loss.py`` and ``megatron/moe.py`` and numpy in ``megatron/pretrain_data.py`` and
``megatron/sft_data.py``: those modules stay off the CLI's import path.
"""
