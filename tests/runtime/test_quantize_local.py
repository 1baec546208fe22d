"""The ``local`` quantize backend with the real nvidia-modelopt 0.47, transformers' NemotronH, the real
131,072-entry tokenizer and real text (../shared/data): the CPU NVFP4 route against an independent
reference quantizer written here, the format map of both recipes, and one end-to-end run (calibrate,
quantize, compare with BF16, generate, export, repair, de-quantizing reload).

Nothing is faked. ``test_cpu_route_matches_cuda`` needs a CUDA GPU and is skipped without one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest

from local_runtime_support import small_spec
from nemotron.runtime.quantization import nvfp4_cpu
from nemotron.runtime.quantization import quant_config as qc
from quantize_support import ROOT, compile_quantize, real_text_blend, small_checkpoint

torch = pytest.importorskip("torch")
pytest.importorskip("modelopt.torch.quantization")


# ---------------------------------------------------------------------- independent NVFP4 reference
# Written from the format definitions (OCP FP8 E4M3: 4 exponent bits, bias 7, 3 mantissa bits,
# subnormal spacing 2^-9, max 448; FP4 E2M1: {0, 0.5, 1, 1.5, 2, 3, 4, 6}; ties to the even mantissa),
# not from Model Optimizer's code. Scalar Python floats in float64 for the rounding; the scale arithmetic
# in float32, in the order the NVFP4 recipe defines it.
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_EVEN = {0.0, 1.0, 2.0, 4.0}  # mantissa bit 0


def e2m1(v: float) -> float:
    a = min(abs(v), 6.0)
    best = min(E2M1, key=lambda g: (abs(a - g), g not in E2M1_EVEN))
    return math.copysign(best, v) if best else 0.0


def e4m3(v: float) -> float:
    """Round a positive value to E4M3 (saturating at 448), ties to even."""
    if v >= 448.0:
        return 448.0
    e = max(math.floor(math.log2(v)), -6) if v > 0 else -6
    step = 2.0 ** (e - 3)
    return round(v / step) * step  # Python's round is half-to-even


def ref_nvfp4(x: np.ndarray, scale_2: np.float32, block_amax: np.ndarray) -> np.ndarray:
    """NVFP4 fake quantization of ``x`` ([rows, cols], float32) with per-block maxima ``block_amax``
    ([rows, cols / 16]) and the per-tensor scale ``scale_2``: block scale
    ``s = e4m3(clamp(block_amax / 6 / scale_2, 2^-9, 448))`` (``1`` for an all-zero block), value
    ``e2m1(x / (s * scale_2)) * s * scale_2``."""
    out = np.empty_like(x)
    rows, cols = x.shape
    for r in range(rows):
        for b in range(cols // 16):
            raw = float(np.float32(block_amax[r, b]) / (np.float32(6.0) * scale_2))
            s = np.float32(e4m3(min(max(raw, 2.0 ** -9), 448.0)) if raw > 0 else 1.0)
            full = np.float32(s * scale_2)
            for c in range(b * 16, b * 16 + 16):
                out[r, c] = np.float32(e2m1(float(np.float32(x[r, c]) / full))) * full
    return out


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 64)).astype(np.float32)
    a[2, 5] = 9.0  # an outlier in one block
    a[3, 16:32] = 0.0  # an all-zero block
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, 0.1],
                    dtype=np.float32)
    return [a, np.tile(ties, (2, 2)), (rng.standard_normal((3, 32)) * 1e-3).astype(np.float32)]


@pytest.mark.parametrize("case", range(3))
def test_cpu_route_dynamic_nvfp4_equals_the_reference(case):
    x = _cases()[case]
    amax = np.float32(np.abs(x).max()) if case != 1 else np.float32(6.0 * 448.0)  # case 1: scale_2 = 1 (exact ties)
    scale_2 = np.float32(amax / np.float32(6.0 * 448.0))
    block_amax = np.abs(x).reshape(x.shape[0], -1, 16).max(-1)
    want = ref_nvfp4(x, scale_2, block_amax)
    got = nvfp4_cpu.dynamic_nvfp4(torch.from_numpy(x), torch.tensor(amax)).numpy()
    np.testing.assert_array_equal(got, want)
    # ... and Model Optimizer's own quantizer reaches it through the route (it asserts CUDA without it)
    from modelopt.torch.quantization.config import QuantizerAttributeConfig
    from modelopt.torch.quantization.nn import TensorQuantizer

    q = TensorQuantizer(QuantizerAttributeConfig(num_bits=(2, 1), block_sizes={-1: 16, "type": "dynamic",
                                                                                "scale_bits": (4, 3)}))
    q.amax = torch.tensor(amax)
    with pytest.raises(AssertionError, match="CUDA"):
        q(torch.from_numpy(x))
    with nvfp4_cpu.cpu_route():
        np.testing.assert_array_equal(q(torch.from_numpy(x)).numpy(), want)


@pytest.mark.parametrize("fp8_max", [448.0, 256.0])  # 256: Four-over-Six
def test_cpu_route_static_nvfp4_equals_the_reference(fp8_max):
    x = _cases()[0]
    rng = np.random.default_rng(1)
    block_amax = np.abs(x).reshape(x.shape[0], -1, 16).max(-1) * rng.choice([1.0, 1.5], (x.shape[0], 4))
    block_amax = block_amax.astype(np.float32)
    g = np.float32(block_amax.max())
    scale_2 = np.float32(g / np.float32(6.0 * fp8_max))
    want = ref_nvfp4(x, scale_2, block_amax)
    got = nvfp4_cpu.static_nvfp4(torch.from_numpy(x), torch.from_numpy(block_amax), torch.tensor(g), fp8_max).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: compares the CPU route with "
                                                          "Model Optimizer's GPU kernels")
def test_cpu_route_matches_cuda():
    """Same tensors through Model Optimizer's CUDA/Triton NVFP4 kernels and through the CPU route."""
    from modelopt.torch.quantization import tensor_quant
    from modelopt.torch.quantization.config import QuantizerAttributeConfig
    from modelopt.torch.quantization.nn import TensorQuantizer

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 1024, generator=g) * torch.rand(256, 1, generator=g) * 4
    q = TensorQuantizer(QuantizerAttributeConfig(num_bits=(2, 1), block_sizes={-1: 16, "type": "dynamic",
                                                                                "scale_bits": (4, 3)}))
    q.amax = x.abs().max()
    gpu = q.cuda()(x.cuda()).cpu()
    q = q.cpu()
    with nvfp4_cpu.cpu_route():
        cpu = q(x)
    d = (gpu - cpu).abs()
    print(f"dynamic: {int((d > 0).sum())} of {d.numel()} elements differ, max {float(d.max()):.3g}")
    assert int((d > 0).sum()) <= d.numel() * 1e-4
    amax = x.abs().reshape(256, -1, 16).amax(-1) * 1.5
    gpu = tensor_quant.static_blockwise_fp4_fake_quant(x.cuda(), amax.cuda(), amax.max().cuda(), True, 256.0,
                                                       torch.float32).cpu()
    cpu = nvfp4_cpu.static_nvfp4(x, amax, amax.max(), 256.0)
    d = (gpu - cpu).abs()
    big = int((d > 1e-6 * x.abs().max()).sum())
    print(f"static (Four-over-Six): {int((d > 0).sum())} of {d.numel()} elements differ, {big} by more than "
          f"1e-6 x amax, max {float(d.max()):.3g}")
    assert big <= d.numel() * 1e-4


# ------------------------------------------------------------------------------------- the format map
def _quantized_small(recipe: str):
    """The small NemotronH (512-entry vocabulary for speed) quantized with ``recipe`` on one calibration batch."""
    import modelopt.torch.quantization as mtq

    from nemotron.runtime.common import model as modelmod

    m = modelmod.build(small_spec(512), 3).to(torch.bfloat16).eval()
    x = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    with nvfp4_cpu.cpu_route(), torch.no_grad():
        mtq.quantize(m, qc.load_recipe(recipe).modelopt_config(), lambda mm: mm(input_ids=x))
    return m


def test_super_max_calib_format_map_on_the_small_model():
    from nemotron.runtime.quantization.quantize import check_map, format_map, left_in_bf16

    m = _quantized_small("super-max-calib")
    found = format_map(m)
    assert check_map(found, qc.load_recipe("super-max-calib")) == []
    assert found["kinds"]["routed_experts"] == {"weights": ["nvfp4"], "inputs": ["nvfp4"]}
    assert found["kinds"]["kv_cache"] == {"cache": ["fp8"]}
    # max calibration: expert weights keep dynamic block scales (the MSE recipe makes them static)
    wq = m.model.layers[1].mixer.experts.up_proj_weight_quantizers[0]
    assert wq.block_sizes["type"] == "dynamic"
    assert sorted(left_in_bf16(found)) == ["attention_proj", "embeddings", "latent_proj", "mamba_conv1d", "other",
                                           "output_head", "router"]
    # a recipe whose declared map differs is caught: ultra declares the same map, a changed one does not
    changed = qc.Recipe(**{**qc.load_recipe("super-max-calib").__dict__, "expect": {"routed_experts": "fp8"}})
    problems = check_map(found, changed)
    assert any(p.startswith("routed_experts weights: nvfp4") for p in problems)
    assert any(p.startswith("shared_experts weights: fp8 (recipe super-max-calib: bf16)") for p in problems)


# ---------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def e2e(module_tmp, shared_data):
    """One real run of the local backend through its entry (``main(cfg)``) on real text."""
    from nemotron.runtime.quantization import quantize

    root = module_tmp("quantize")
    blend = real_text_blend(root / "data", shared_data)
    ckpt = small_checkpoint(root / "ckpt")
    out = root / "export"
    cfg = compile_quantize(_e2e_args(ckpt, blend, out))
    assert quantize.main(cfg) == 0
    return out, json.loads((out / "summary.json").read_text())


def _e2e_args(ckpt, blend, out, *more: str) -> list[str]:
    return [f"quantization.source={ckpt}", f"quantization.calib_dataset={blend}", "quantization.calib_size=4",
            "quantization.eval_size=2", "model.seq_length=128", "train.micro_batch_size=2",
            "train.global_batch_size=2", "generate.max_new_tokens=4", f"export.output_dir={out}", *more]


def test_local_run_applies_the_ultra_map_and_lists_what_stays_bf16(e2e):
    _, s = e2e
    f = s["formats"]
    assert (f["routed_experts"]["weights"], f["routed_experts"]["inputs"]) == ("nvfp4", "nvfp4")
    assert (f["shared_experts"]["weights"], f["shared_experts"]["inputs"]) == ("fp8", "fp8")
    assert (f["mamba_in_out_proj"]["weights"], f["mamba_in_out_proj"]["inputs"]) == ("fp8", "fp8")
    assert f["kv_cache"]["cache"] == "fp8"
    for kind in ("attention_proj", "latent_proj", "router", "mamba_conv1d", "embeddings", "output_head"):
        assert f[kind]["weights"] == "bf16", kind
    left = s["left_in_bf16"]
    assert sorted(left["attention_proj"]) == sorted(f"model.layers.{i}.mixer.{p}_proj" for i in (3, 8) for p in "qkvo")
    assert len(left["latent_proj"]) == 8 and left["output_head"] == ["lm_head"]
    # NVFP4 at 4.5 bits: routed-expert weights shrink to 9/32 of BF16 (0.5 B + one E4M3 scale per 16 values)
    e = f["routed_experts"]
    assert abs(e["exported_bytes"] / e["bf16_bytes"] - (0.5 + 1 / 16) / 2) < 0.01
    assert f["shared_experts"]["exported_bytes"] / f["shared_experts"]["bf16_bytes"] == pytest.approx(0.5, abs=0.01)
    assert 0 < s["weight_bytes"]["reduction"] < 1


def test_local_run_compares_with_bf16_on_held_out_text_and_generates(e2e):
    _, s = e2e
    h = s["held_out"]
    assert h["split"] == "test" and h["tokens"] == 2 * 128
    assert h["kl_per_token"] > 0 and 0 < h["top1_agreement"] <= 1
    assert h["ppl_bf16"] > 1 and h["ppl_quantized"] > 1
    if torch.cuda.is_available():  # Model Optimizer's own kernels, nothing routed
        assert s["device"] == "cuda" and "CUDA" in s["nvfp4_fake_quant"]
    else:
        assert s["device"] == "cpu" and "pure-PyTorch" in s["nvfp4_fake_quant"]
    assert len(s["generations"]) == 2 and all(isinstance(g["quantized"], str) for g in s["generations"])


def test_export_repaired_and_reloads_to_the_fake_quantized_model(e2e):
    out, s = e2e
    from safetensors import safe_open

    # 0.47 wrote the placeholder into every layer name; the run repaired both files
    assert s["export"]["names_repaired"]["hf_quant_config.json"] > 0
    text = (out / "hf_quant_config.json").read_text()
    assert "\\u0000" not in text and "pt_name_sentinel" not in text
    layers = qc.quantized_layers(out)
    with safe_open(str(out / "model.safetensors"), "pt") as fh:
        keys = set(fh.keys())
        dtypes = {k: fh.get_slice(k).get_dtype() for k in keys}
    for name in layers:  # every repaired name is a real module of the checkpoint
        assert any(k.startswith(name + ".") for k in keys), name
    assert {a["quant_algo"] for a in layers.values()} == {"NVFP4", "FP8"}
    assert dtypes["backbone.layers.1.mixer.experts.0.up_proj.weight"] == "U8"
    assert dtypes["backbone.layers.0.mixer.in_proj.weight"] == "F8_E4M3"
    assert dtypes["backbone.layers.3.mixer.q_proj.weight"] == "BF16"  # dtype passed: BF16, not the FP32 default
    hf_quant = json.loads((out / "hf_quant_config.json").read_text())["quantization"]
    assert hf_quant["quant_algo"] == "MIXED_PRECISION" and hf_quant["kv_cache_quant_algo"] == "FP8"
    w = s["export"]["weights_vs_fake_quant"]
    if torch.cuda.is_available():  # Triton's FP32 scale arithmetic vs the export's: one step at rare ties
        assert w["nvfp4"]["max_steps"] <= 1.1 and w["nvfp4"]["differ"] <= 1e-3 * w["nvfp4"]["elements"]
    else:  # the CPU route and the export run the same PyTorch code
        assert w["nvfp4"]["differ"] == 0 and w["nvfp4"]["max_steps"] < 0.05
    # FP8: 0.47 divides by the scale in BF16 before the E4M3 cast; some weights land one step away
    assert w["fp8"]["max_steps"] <= 1.1 and w["fp8"]["differ"] < 0.1 * w["fp8"]["elements"]
    assert s["export"]["reload_top1_agreement"] > 0.5
    assert s["export"]["reload_max_abs_logit_diff"] < 0.25 * s["export"]["reload_logit_scale"]


# ------------------------------------------------------------------------------ what an export may replace
def _cli(*args: str, home) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEMOTRON_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "quantize", "-c", "local", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def _problems(args: list[str]) -> list[tuple]:
    return qc.check_inputs(qc.read_settings(compile_quantize(args)))


def test_export_folder_that_is_holds_or_lies_in_the_source_is_refused_before_loading(tmp_path, shared_data):
    blend = real_text_blend(tmp_path / "data", shared_data, docs=8)
    src = small_checkpoint(tmp_path / "qsrc")
    before = {p.name: p.stat().st_mtime_ns for p in src.iterdir()}
    (tmp_path / "link").symlink_to(src)
    for out, how in ((src, "is"), (src / "sub", "is inside"), (tmp_path, "contains"), (tmp_path / "link", "is")):
        problems = _problems(_e2e_args(src, blend, out))
        assert [(k, m.split(" the checkpoint")[0]) for k, _, m in problems[:1]] == [("export.output_dir", how)], out
        assert f"quantization.source={str(src)!r}" in problems[0][2]
    # the reported case, through the CLI: dry run and run refuse (exit 2), one line, the source intact
    for extra in (["--dry-run"], []):
        r = _cli(*_e2e_args(src, blend, src), *extra, home=tmp_path / "home")
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"export.output_dir='{src}': is the checkpoint to quantize" in r.stdout + r.stderr
        assert "Traceback" not in r.stderr
    from nemotron.runtime.quantization import quantize  # the stage's entry itself refuses too, before loading anything

    assert quantize.main(compile_quantize(_e2e_args(src, blend, src))) == 2
    assert {p.name: p.stat().st_mtime_ns for p in src.iterdir()} == before
    # calibration data inside the export folder
    problems = _problems(_e2e_args(src, blend, blend.parent))
    assert ("quantization.calib_dataset", str(blend)) in [(k, v) for k, v, _ in problems]


def test_an_export_folder_holding_another_export_or_other_files_is_refused(e2e):
    out, s = e2e
    ckpt, blend = s["source"], s["calibration"]["blend"]
    assert s["recipe"] == "ultra" and len(s["config_hash"]) == 16
    assert _problems(_e2e_args(ckpt, blend, out)) == []  # the same export: redone
    other = _problems(_e2e_args(ckpt, blend, out, "quantization.recipe=super-max-calib"))
    assert [(k, v) for k, v, _ in other] == [("export.output_dir", str(out))]
    assert other[0][2].startswith("holds another export (recipe 'ultra' (this run: 'super-max-calib'))")
    assert "export.overwrite=true" in other[0][2]
    assert _problems(_e2e_args(ckpt, blend, out, "quantization.recipe=super-max-calib", "export.overwrite=true")) == []
    assert "holds another export (config_hash" in _problems(_e2e_args(ckpt, blend, out, "quantization.seed=9"))[0][2]
    unrelated = out.parent / "unrelated"
    unrelated.mkdir()
    (unrelated / "notes.txt").write_text("mine\n")
    for more in ([], ["export.overwrite=true"]):
        got = _problems(_e2e_args(ckpt, blend, unrelated, *more))
        assert [(k, m) for k, _, m in got] == [("export.output_dir", "holds files that are not a quantize export "
                                                "(notes.txt); choose an empty or new export.output_dir")]


def test_export_files_get_the_umask_mode(e2e):
    out, _ = e2e
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o666 & ~mask}, modes


def test_a_quantized_source_is_refused_in_one_line(e2e, tmp_path, capsys):
    from nemotron.runtime.quantization import quantize

    out, s = e2e
    blend = s["calibration"]["blend"]
    r = _cli(*_e2e_args(out, blend, tmp_path / "again"), "--dry-run", home=tmp_path / "home")
    assert r.returncode == 2
    assert (f"quantization.source='{out}': already quantized (it has an hf_quant_config.json): quantize needs a "
            "BF16 checkpoint") in r.stdout
    # markers removed: the load itself fails, still one line
    bare = tmp_path / "bare"
    shutil.copytree(out, bare)
    (bare / "hf_quant_config.json").unlink()
    config = json.loads((bare / "config.json").read_text())
    config.pop("quantization_config")
    (bare / "config.json").write_text(json.dumps(config))
    assert [m for _, _, m in _problems(_e2e_args(bare, blend, tmp_path / "again"))] == []
    assert quantize.main(compile_quantize(_e2e_args(bare, blend, tmp_path / "again"))) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ultra3 quantize: quantization.source={str(bare)!r}: cannot load"), err
    assert not (tmp_path / "again").exists()
