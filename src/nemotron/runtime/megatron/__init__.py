"""The runtimes of the registry's ``megatron`` kind (``pretrain``, ``sft``, ``mtp-boost``) and of ``convert``, whose
cluster backend is the same Megatron-Bridge entry.

Cluster (``backend: megatron-bridge``, the NeMo container, torchrun):

* :mod:`~nemotron.runtime.megatron.megatron_bridge` — checks, the translation to Megatron-Bridge's ConfigContainer
  (pure), AutoBridge and the training or conversion call, for ``pretrain``, ``sft`` and ``convert``;
* :mod:`~nemotron.runtime.megatron.exit_signal`, :mod:`~nemotron.runtime.megatron.batch_log`,
  :mod:`~nemotron.runtime.megatron.routing` — the exit-signal fix, the per-step sample record, the MoE-routing check;
* :mod:`~nemotron.runtime.megatron.export_check` — the self-check of a ``megatron_to_hf`` export (config shape,
  reload, logits), recorded in ``selfcheck.json``;
* :mod:`~nemotron.runtime.megatron.mtp_cluster` — ``mtp-boost``'s refusal (no cluster framework runs it yet).

Local (``backend: local``, one process, transformers):

* :mod:`~nemotron.runtime.megatron.entry` — the pretrain/SFT entry (checks first, heavy imports after), and the
  ``run_heavy`` frame (and ``LOCAL_NEEDS`` table) the local RL, warmup, MTP, quantize and eval runtimes start their
  heavy part through;
* :mod:`~nemotron.runtime.megatron.trainer`, :mod:`~nemotron.runtime.megatron.loss`,
  :mod:`~nemotron.runtime.megatron.moe` — the training loop, its loss, the expert-bias update;
* :mod:`~nemotron.runtime.megatron.pretrain_data`, :mod:`~nemotron.runtime.megatron.sft_data` — the data readers
  (``blend.json`` over ``.bin/.idx``; packed Parquet);
* :mod:`~nemotron.runtime.megatron.lineage`, :mod:`~nemotron.runtime.megatron.tracking` — resume checks, TensorBoard /
  W&B identity (shared with the cluster entry);
* :mod:`~nemotron.runtime.megatron.mtp_local` — MTP boosting of a frozen backbone;
* :mod:`~nemotron.runtime.megatron.convert_local` — ``convert``'s config rewrite.
"""
