"""Contract: what NeMo RL's Megatron generation needs at run time, at the pinned NeMo RL (7ea279a) and Megatron-LM
(c8288b6) — the premises of :func:`nemotron.runtime.rl.nemo_rl.megatron_generation_problems`.

The one-GPU RLVR run (2026-12-06, ``policy.generation.backend: megatron``, colocated) stopped twice in step 1's
generation, after minutes of set-up: Megatron-Core's dynamic inference context asserted ``flashinfer``, then its
``Attention.forward`` asserted a FlashAttention for dynamic batching. Our precheck now refuses both before NeMo RL
starts. The engine needs CUDA, so this test reads the pinned source (``ast``) and fails when a premise changes:

* NeMo RL's Megatron generation is always the dynamic engine (``DynamicInferenceContext`` /
  ``DynamicInferenceEngine``; ``flash_decode`` forced off; nothing in it names the static engine), and it asks for
  flashinfer's fused RoPE for a float16/bfloat16 model (``policy.precision`` → ``params_dtype``);
* Megatron-Core's ``DynamicInferenceContext.__init__`` asserts flashinfer for that fused RoPE;
* ``Attention.forward`` asserts ``HAVE_FA4 or HAVE_FA3 or is_fa_min_version(FA2_MIN_VERSION)`` under dynamic
  batching, FA3 from :data:`~nemotron.runtime.rl.nemo_rl.FA3_MODULES` in that order, FA4 from ``flash_attn.cute``,
  ``is_fa_min_version`` comparing with ``>=``; the archive's Megatron-Core names no FA4 version of its own, or it
  names ours (:data:`~nemotron.runtime.rl.nemo_rl.FA4_MIN_VERSION`, Megatron-Core 14346b6's ``_MIN_FA4_VERSION``:
  NeMo RL 7ea279a's own Megatron-LM, which the archives do not hold — c8288b6 is the Megatron-Bridge branch's);
* the versions our fixes name are NeMo RL's ``mcore`` extra pins (:data:`~nemotron.runtime.rl.nemo_rl.MCORE_EXTRA_PINS`).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from nemotron.runtime.rl import nemo_rl
from upstream import sources

WORKER = "nemo_rl/models/generation/megatron/megatron_worker.py"
CONTEXT = "megatron/core/inference/contexts/dynamic_context.py"
ATTENTION = "megatron/core/transformer/attention.py"


@pytest.fixture(scope="module")
def roots() -> dict[str, Path]:
    try:
        return sources()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _function(tree: ast.AST, name: str, cls: str | None = None) -> ast.FunctionDef:
    scope = tree if cls is None else next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in ast.walk(scope) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)]


def _try_imports(tree: ast.Module) -> list[tuple[list[str], set[str]]]:
    """Per module-level ``try:`` block: the modules its body imports from and the names it sets to True."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            mods = [n.module for s in node.body for n in ast.walk(s) if isinstance(n, ast.ImportFrom) and n.module]
            mods += [a.name for s in node.body for n in ast.walk(s) if isinstance(n, ast.Import) for a in n.names]
            flags = {t.id for s in node.body if isinstance(s, ast.Assign) and ast.unparse(s.value) == "True"
                     for t in s.targets if isinstance(t, ast.Name)}
            out.append((mods, flags))
    return out


def test_megatron_generation_is_always_the_dynamic_engine(roots):
    tree = _tree(roots["RL"] / WORKER)
    init = _function(tree, "_initialize_inference_engine", "MegatronGenerationMixin")
    assert _calls(init, "DynamicInferenceContext") and _calls(init, "DynamicInferenceEngine")
    prepare = _function(tree, "prepare_for_generation", "MegatronGenerationMixin")
    assert "gen_model.config.flash_decode = False" in ast.unparse(prepare)  # the static engine's decode path, off
    for path in (roots["RL"] / "nemo_rl/models/generation/megatron").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"StaticInferenceEngine|static_engine|engines\.static", text), (
            f"{path.name} now names Megatron-Core's static engine: is the dynamic engine still the only one? "
            "(nemo_rl.megatron_generation_problems asks for its needs whenever the backend is megatron)")


def test_nemo_rl_asks_for_flashinfer_fused_rope_for_a_16_bit_policy(roots):
    """(It asks for flashinfer sampling at every precision too; Megatron-Core 14346b6, NeMo RL's own, falls back to
    torch sampling without flashinfer, so that is not a premise of the precheck.)"""
    init = _function(_tree(roots["RL"] / WORKER), "_initialize_inference_engine", "MegatronGenerationMixin")
    [config] = _calls(init, "InferenceConfig")
    kw = {k.arg: k.value for k in config.keywords}
    assert isinstance(kw["sampling_backend"], ast.Constant) and kw["sampling_backend"].value == "flashinfer"
    assert ast.unparse(kw["use_flashinfer_fused_rope"]) == "use_flashinfer_fused_rope"
    [rope] = [n for n in ast.walk(init) if isinstance(n, ast.Assign)
              and [ast.unparse(t) for t in n.targets] == ["use_flashinfer_fused_rope"]]
    assert ast.unparse(rope.value) == "gen_model.config.params_dtype in (torch.float16, torch.bfloat16)"
    assert set(nemo_rl.FUSED_ROPE_PRECISIONS) == {"float16", "bfloat16"}
    # policy.precision is what sets params_dtype (nemo_rl/models/megatron/setup.py)
    setup = _tree(roots["RL"] / "nemo_rl/models/megatron/setup.py")
    assert "dtype = dtype_map[config['precision']]" in ast.unparse(setup)
    precision = ast.unparse(_function(setup, "_apply_precision_config"))
    assert "model_cfg.bf16 = dtype == torch.bfloat16" in precision and "model_cfg.fp16 = dtype == torch.float16" in precision
    assert "model_cfg.params_dtype = torch.bfloat16" in precision and "model_cfg.params_dtype = torch.float16" in precision


def test_megatron_core_asserts_flashinfer_for_the_fused_rope(roots):
    ctx = _tree(roots["Megatron-LM"] / CONTEXT)
    assert ([nemo_rl.FLASHINFER_MODULE], {"HAVE_FLASHINFER"}) in _try_imports(ctx)
    init = _function(ctx, "__init__", "DynamicInferenceContext")
    [rope] = [n for n in ast.walk(init) if isinstance(n, ast.If)
              and ast.unparse(n.test) == "inference_config.use_flashinfer_fused_rope is True"]
    assert [ast.unparse(s) for s in rope.body] == ["assert HAVE_FLASHINFER, 'flashinfer is not installed'"]


def test_attention_requires_fa4_fa3_or_fa2_at_our_minimum(roots):
    tree = _tree(roots["Megatron-LM"] / ATTENTION)
    forward = _function(tree, "forward", "Attention")
    guards = [n for n in ast.walk(forward) if isinstance(n, ast.If) and "is_dynamic_batching()" in ast.unparse(n.test)
              and any(isinstance(s, ast.Assert) for s in n.body)]
    assert len(guards) == 1, "Attention.forward: the FlashAttention assert under dynamic batching moved or multiplied"
    [check] = [s for s in guards[0].body if isinstance(s, ast.Assert)]
    assert ast.unparse(check.test) == f"HAVE_FA4 or HAVE_FA3 or is_fa_min_version('{nemo_rl.FA2_MIN_VERSION}')"
    # where HAVE_FA3 and HAVE_FA4 come from
    fa3 = [mods[0] for mods, flags in _try_imports(tree) if flags == {"HAVE_FA3"} and mods]
    assert tuple(fa3) == nemo_rl.FA3_MODULES
    fa4 = [mods for mods, flags in _try_imports(tree) if flags == {"HAVE_FA4"}]
    assert fa4 == [["flash_attn.cute"]]
    # is_fa_min_version compares with >= by default: 2.7.3 itself is accepted
    utils = _tree(roots["Megatron-LM"] / "megatron/core/utils.py")
    fa_min = _function(utils, "is_fa_min_version")
    assert ast.unparse(fa_min.args.defaults[0]) == "True"
    [eq] = [n for n in ast.walk(fa_min) if isinstance(n, ast.If) and ast.unparse(n.test) == "check_equality"]
    assert [ast.unparse(s) for s in eq.body] == ["return get_fa_version() >= PkgVersion(version)"]
    assert "version('flash-attn')" in ast.unparse(_function(utils, "get_fa_version"))  # our FA2_DIST
    assert nemo_rl.FA2_DIST == "flash-attn"


def test_megatron_core_names_no_other_fa4_version(roots):
    """Megatron-Core c8288b6 accepts FA4 on the import of ``flash_attn.cute`` alone; our
    :data:`~nemotron.runtime.rl.nemo_rl.FA4_MIN_VERSION` is Megatron-Core 14346b6's ``_MIN_FA4_VERSION`` (NeMo RL
    7ea279a's own Megatron-LM, what the GPU run found; not in the archives). When the archive's Megatron-Core
    names an FA4 version (a ``4.x`` version string in a file about FA4: ``_MIN_FA4_VERSION = "4.0.0b20"`` in
    14346b6), it must be ours."""
    core = roots["Megatron-LM"] / "megatron/core"
    named = set()
    for path in core.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if not re.search(r"flash[-_]attn[-_]4|flash_attn\.cute|HAVE_FA4|fa4", text, re.IGNORECASE):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                    r"4\.\d+(\.\d+)?((a|b|rc)\d+)?(\.post\d+|\.dev\d+)?", node.value):
                named.add((path.relative_to(core).as_posix(), node.value))
    assert {v for _, v in named} <= {nemo_rl.FA4_MIN_VERSION}, (
        f"Megatron-Core names an FA4 version: {sorted(named)}; ours is {nemo_rl.FA4_MIN_VERSION} "
        "(nemo_rl.FA4_MIN_VERSION): compare and revisit")
    assert nemo_rl.FA4_DIST == "flash-attn-4"


def test_our_fixes_name_nemo_rls_mcore_pins(roots):
    extra = tomllib.loads((roots["RL"] / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]["mcore"]
    pins = {}
    for req in extra:
        m = re.match(r"([A-Za-z0-9_.-]+)\s*==\s*([^\s;]+)", req)
        if m and m.group(1) in nemo_rl.MCORE_EXTRA_PINS:
            pins[m.group(1)] = m.group(2)
    assert pins == nemo_rl.MCORE_EXTRA_PINS
