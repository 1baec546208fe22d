"""Data preparation: raw text and chat data into the files the trainers read.

Modules (each imports its heavy dependencies — ray, tokenizers, pyarrow, numpy — itself, so importing
this package stays cheap and the CLI never pulls them in):

* :mod:`nemotron.data.files` — atomic writes, hashing, JSON with line numbers (shared by every data stage).
* :mod:`nemotron.data.outputs` — versioned output folders, per-shard receipts, ``consumed_by`` records.
* :mod:`nemotron.data.progress` — a progress bar and summary tables (rich).
* :mod:`nemotron.data.raypool` — start or join Ray, run tasks with bounded concurrency and streamed progress.
* :mod:`nemotron.data.sources` — find input files, plan them into work units, read records with file:line.
* :mod:`nemotron.data.tokenizer` — load a Hugging Face tokenizer, or convert an offline vocabulary once.
* :mod:`nemotron.data.indexed` — the Megatron indexed dataset (``.bin``/``.idx``) writer.
* :mod:`nemotron.data.blend` — the input blend (datasets + weights) and the output ``blend.json``.
* :mod:`nemotron.data.pretrain` — the pretraining data pipeline (``main(cfg)``).
"""
