"""The runtimes of the registry's ``quantize`` kind (``quantize``: Model Optimizer post-training quantization).

* :mod:`~nemotron.runtime.quantization.quant_config` — recipes, module kinds, the export repair, the settings and the
  cluster config translation (stdlib + yaml: validation imports it at ``--dry-run``);
* :mod:`~nemotron.runtime.quantization.quantize` — the ``local`` backend (nvidia-modelopt);
  :mod:`~nemotron.runtime.quantization.nvfp4_cpu` — its CPU NVFP4 route;
* :mod:`~nemotron.runtime.quantization.quantize_cluster` — the Megatron-Bridge backend (checks first).
"""
