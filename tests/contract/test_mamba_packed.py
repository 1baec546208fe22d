"""Contract: packed sequences and Mamba's unfused path, at the pinned Megatron-LM (c8288b6).

On one H100 (2026-12-05, docs/gpu_run.md) ``sft -c tiny``'s packed Parquet went through Megatron-Bridge's
``finetune()`` (checkpoint loaded, 144 packs read, the loop started) and the first forward step failed in
``MambaMixer.forward``: with ``use_mamba_mem_eff_path=false`` (our one-GPU bench had set it: that path needs no
causal-conv1d) it asserts ``packed_seq_params is None``. Our rule ``packed-mamba-path`` refuses the same config in
the dry-run (``tests/validation/test_validation.py``, case ``packed-sft-unfused-mamba``). The mixer itself cannot
run on a CPU (its fused path is CUDA/Triton), so this test reads the pinned source: it fails when upstream lifts or
moves the assertion or changes the default (then the rule must be revisited).
"""

from __future__ import annotations

import ast

import pytest

from upstream import sources


def _forward_asserts(mixer_py: str) -> list[tuple[str, str]]:
    """``(if-condition, assert-test)`` source pairs of the ``if`` statements in ``MambaMixer.forward``."""
    tree = ast.parse(mixer_py)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MambaMixer")
    fwd = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    out = []
    for node in ast.walk(fwd):
        if isinstance(node, ast.If):
            for sub in node.body:
                if isinstance(sub, ast.Assert):
                    out.append((ast.unparse(node.test), ast.unparse(sub.test)))
    return out


@pytest.fixture(scope="module")
def megatron_lm():
    try:
        return sources()["Megatron-LM"]
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def test_unfused_mamba_path_refuses_packed_sequences_upstream(megatron_lm):
    mixer = (megatron_lm / "megatron/core/ssm/mamba_mixer.py").read_text()
    pairs = _forward_asserts(mixer)
    assert ("in_inference_mode or not self.use_mem_eff_path", "packed_seq_params is None") in pairs, pairs
    assert "self.use_mem_eff_path = self.config.use_mamba_mem_eff_path" in mixer
    cfg = ast.parse((megatron_lm / "megatron/core/transformer/transformer_config.py").read_text())
    field = next(n for n in ast.walk(cfg) if isinstance(n, ast.AnnAssign)
                 and getattr(n.target, "id", "") == "use_mamba_mem_eff_path")
    assert "default=True" in ast.unparse(field.value)  # unset in our config = the fused path

