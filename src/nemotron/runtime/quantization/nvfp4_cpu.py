"""NVFP4 fake quantization on the CPU through Model Optimizer's own pure-PyTorch NVFP4 code.

nvidia-modelopt 0.47 fake-quantizes NVFP4 with GPU kernels only: the dynamic-block path (activations,
and the weights of max-calibrated recipes) goes to a Triton kernel or a CUDA extension and asserts a
CUDA tensor; the static-block path (weights with per-block scales chosen by MSE, e.g. Four-over-Six)
needs Triton. Its exporter, however, quantizes NVFP4 in plain PyTorch: ``NVFP4QTensor.quantize`` /
``dequantize`` (``modelopt/torch/quantization/qtensor/nvfp4_tensor.py``). :func:`cpu_route` sends the
CPU calls of both fake-quant functions there, so the fake-quantized model on a CPU computes what the
exported checkpoint holds; CUDA tensors keep Model Optimizer's kernels untouched.

NVFP4 as both paths compute it (values: FP4 E2M1 ``{0, 0.5, 1, 1.5, 2, 3, 4, 6}`` with sign, ties
to the even mantissa; one E4M3 scale per block of 16 along the last dimension; one FP32 scale per
tensor):

* dynamic block: ``scale_2 = amax / (6 * 448)`` (``amax`` the calibrated per-tensor maximum);
  per block ``s = e4m3(block_max / (6 * scale_2))``; ``y = e2m1(x / (s * scale_2)) * s * scale_2``;
* static block: the block maxima come from calibration (MSE may replace them: Four-over-Six keeps
  ``amax`` (6 is the top value) or takes ``1.5 * amax`` (4 is)); ``fp8_max`` is 448, or 256 with
  Four-over-Six (``modelopt.torch.quantization.utils.numeric_utils.fp8_max_for_normalization``);
  ``scale_2 = global_amax / (6 * fp8_max)``, ``s = e4m3(block_amax / 6 / scale_2)``.

One difference from the kernels, at the edge of the E4M3 range: a block whose scale falls below
E4M3's smallest subnormal (2^-9; a block maximum under about 2e-6 of the tensor maximum) is clamped
to 2^-9 here, as the exporter does, where the dynamic kernel treats it as zero. The comparison on a
GPU (``tests/runtime/test_quantize_local.py::test_cpu_route_matches_cuda``) measures both paths on the same
tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

#: E2M1 largest magnitude and E4M3 largest finite value (OCP FP8/FP4 formats; NVIDIA NVFP4).
E2M1_MAX = 6.0
E4M3_MAX = 448.0


def _nvfp4(x: Any, block: int, per_block_scale: Any | None, scale_2: Any) -> Any:
    """Quantize then de-quantize ``x`` with Model Optimizer's ``NVFP4QTensor`` (pure PyTorch)."""
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    if x.shape[-1] % block:
        raise ValueError(f"NVFP4 needs the last dimension ({x.shape[-1]}) to be a multiple of the block ({block})")
    dtype = x.dtype
    q, scale, scale_2 = NVFP4QTensor.quantize(x.float(), block, per_block_scale, scale_2)
    return q.dequantize(dtype=dtype, scale=scale, double_scale=scale_2, block_sizes={-1: block})


def dynamic_nvfp4(x: Any, amax: Any, block: int = 16) -> Any:
    """Dynamic-block NVFP4 fake quantization of ``x`` (any shape, last dim a multiple of ``block``)
    with the per-tensor ``amax``; returns a tensor of ``x``'s shape and dtype."""
    scale_2 = amax.float().reshape(()) / (E2M1_MAX * E4M3_MAX)
    return _nvfp4(x, block, None, scale_2)


def static_nvfp4(x: Any, block_amax: Any, global_amax: Any | None, fp8_max: float = E4M3_MAX) -> Any:
    """Static-block NVFP4 fake quantization with calibrated per-block maxima ``block_amax``
    (``x.numel() / block`` values) and ``global_amax`` (default: their maximum)."""
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    block = x.numel() // block_amax.numel()
    amax = block_amax.float()
    g = (amax.max() if global_amax is None else global_amax.float()).reshape(())
    per_block = (amax / E2M1_MAX).reshape(*x.shape[:-1], x.shape[-1] // block).clone()
    per_block[per_block == 0] = 1.0
    per_block = NVFP4QTensor._cast_per_block_scale_to_fp8(per_block, g / E2M1_MAX, fp8_max)
    return _nvfp4(x, block, per_block, g / (E2M1_MAX * fp8_max))


@contextlib.contextmanager
def cpu_route() -> Iterator[None]:
    """Inside the block, NVFP4 fake quantization of CPU tensors runs through :func:`dynamic_nvfp4` /
    :func:`static_nvfp4`; anything else (CUDA tensors, other formats) goes to Model Optimizer as before.
    Restores Model Optimizer's functions on exit. Forward only: no straight-through gradient."""
    from modelopt.torch.quantization import tensor_quant
    from modelopt.torch.quantization.nn.modules import tensor_quantizer

    dynamic_orig = tensor_quant._dynamic_block_quantize_forward
    static_orig = tensor_quantizer.static_blockwise_fp4_fake_quant

    def dynamic(ctx: Any, inputs: Any, block_size: int, amax: Any, num_bits: Any, scale_bits: Any, *rest: Any) -> Any:
        if not inputs.is_cuda and tuple(num_bits) == (2, 1) and tuple(scale_bits) == (4, 3) and amax is not None:
            return dynamic_nvfp4(inputs, amax, block_size)
        return dynamic_orig(ctx, inputs, block_size, amax, num_bits, scale_bits, *rest)

    def static(x: Any, amax: Any, global_amax: Any = None, quantize_block_scales: bool = True,
               fp8_max: float = E4M3_MAX, out_dtype: Any = None, *rest: Any) -> Any:
        if not x.is_cuda and quantize_block_scales:
            out = static_nvfp4(x, amax, global_amax, fp8_max)
            return out if out_dtype is None else out.to(out_dtype)
        return static_orig(x, amax, global_amax, quantize_block_scales, fp8_max, out_dtype, *rest)

    tensor_quant._dynamic_block_quantize_forward = dynamic
    tensor_quantizer.static_blockwise_fp4_fake_quant = static
    try:
        yield
    finally:
        tensor_quant._dynamic_block_quantize_forward = dynamic_orig
        tensor_quantizer.static_blockwise_fp4_fake_quant = static_orig


__all__ = ["E2M1_MAX", "E4M3_MAX", "cpu_route", "dynamic_nvfp4", "static_nvfp4"]
