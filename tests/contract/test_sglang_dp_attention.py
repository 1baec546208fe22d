"""Contract: NeMo RL's SGLang engines get no DP-attention, at the pinned NeMo RL (main 7ea279a).

Rule ``sglang-dp-attention`` (:func:`nemotron.layout.rules.sglang_dp_attention`, issue 30 finding 3) refuses
``policy.generation.sglang_cfg.enable_dp_attention: true`` and ``dp_size > 1``, and the engine view
(:meth:`nemotron.validation.checks.RLPlan.engine`) takes ``tp_size`` as the attention TP, because NeMo RL's SGLang
worker builds SGLang's server arguments in ``SGLangGenerationWorker._compute_server_args`` and never passes
``enable_dp_attention`` there: miles' 32-GPU engines with DP-attention 4 cannot reach SGLang through NeMo RL.

The worker starts SGLang servers on GPUs, so this test reads the pinned source (``ast``): it fails when the worker
starts passing ``enable_dp_attention`` (as a key of its own or through its pass-through key list), when another module
of NeMo RL's SGLang backend starts reading it, or when the ``tp_size = num_gpus_per_engine // pp_size`` assertion the
engine view relies on goes. Then the refusal must be revisited.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from upstream import sources

SGLANG = Path("nemo_rl/models/generation/sglang")


@pytest.fixture(scope="module")
def nemo_rl_root() -> Path:
    try:
        return sources()["RL"]
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _server_args(root: Path) -> ast.FunctionDef:
    tree = ast.parse((root / SGLANG / "sglang_worker.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SGLangGenerationWorker")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_compute_server_args")


def test_the_worker_never_passes_enable_dp_attention(nemo_rl_root):
    fn = _server_args(nemo_rl_root)
    kwargs = next(n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                  and [getattr(t, "id", "") for t in n.targets] == ["kwargs"] and isinstance(n.value, ast.Dict))
    keys = {k.value for k in kwargs.keys if isinstance(k, ast.Constant)}
    assert {"tp_size", "dp_size", "pp_size", "ep_size"} <= keys, keys  # what the worker does pass
    passthrough = next(n.iter for n in ast.walk(fn) if isinstance(n, ast.For) and isinstance(n.iter, ast.List))
    listed = {e.value for e in passthrough.elts if isinstance(e, ast.Constant)}
    assert "mem_fraction_static" in listed, listed  # the list is the one the worker copies from sglang_cfg
    assert "enable_dp_attention" not in keys | listed
    assert "enable_dp_attention" not in ast.unparse(fn)  # nor set any other way in the function
    assert "assert tp_size == _gpus_per_engine // pp_size" in ast.unparse(fn)


def test_no_module_of_the_sglang_backend_reads_enable_dp_attention(nemo_rl_root):
    """Only the config's TypedDict declares it (``config.py``: ``enable_dp_attention: NotRequired[bool]``)."""
    readers = sorted(str(p.relative_to(nemo_rl_root)) for p in (nemo_rl_root / SGLANG).rglob("*.py")
                     if p.name != "config.py" and "enable_dp_attention" in p.read_text(encoding="utf-8"))
    assert readers == []
    assert "enable_dp_attention: NotRequired[bool]" in (nemo_rl_root / SGLANG / "config.py").read_text(encoding="utf-8")
