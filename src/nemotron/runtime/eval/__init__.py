"""The runtime of the registry's ``eval`` kind: :mod:`~nemotron.runtime.eval.evaluate`, the ``local`` backend of
``eval`` and ``eval --compare A B`` (its ``nemo-rl`` backend is :func:`nemotron.runtime.rl.nemo_rl.eval_main`).
"""
