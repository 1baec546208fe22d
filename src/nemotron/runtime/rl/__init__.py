"""The runtimes of the registry's ``rl`` kind: ``rlvr``, ``mopd-warmup`` and ``mopd`` (and ``eval``'s NeMo RL backend).

* :mod:`~nemotron.runtime.rl.nemo_rl` — the cluster runtime (NeMo RL container, Ray): checks, the v4 checkpoint
  views, the translation to NeMo RL's config (pure), the call of its GRPO entry (``rlvr``, ``mopd``) and of its
  evaluation (``eval``'s ``nemo-rl`` backend);
* :mod:`~nemotron.runtime.rl.rl_entry`, :mod:`~nemotron.runtime.rl.rl_settings`, :mod:`~nemotron.runtime.rl.rl_data`,
  :mod:`~nemotron.runtime.rl.rl_local` — the ``local`` backend of ``rlvr`` and ``mopd`` (TRL): its entry, settings,
  data (RL JSONL rows, prompts, tokenizer, generation) and run;
* :mod:`~nemotron.runtime.rl.rewards` — the maths reward (NeMo RL's math environment check);
* :mod:`~nemotron.runtime.rl.panel` — the MOPD teacher panel and its routing (stdlib only);
* :mod:`~nemotron.runtime.rl.warmup`, :mod:`~nemotron.runtime.rl.warmup_local` — ``mopd-warmup``: its settings and
  cluster job; its ``local`` backend.
"""
