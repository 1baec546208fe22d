"""The quantize stage's data and pure logic: recipes, module kinds, the export repair, settings, and the
cluster backend's config translation.

Light (stdlib + yaml): validation imports it at ``--dry-run`` and the entry scripts read their settings
with it before importing torch.

* **Recipes** are data: ``stages/ultra3/quantize/recipes/<name>.yaml``, each a Model Optimizer
  quantization config (``algorithm`` + ``quant_cfg``, the list form of nvidia-modelopt 0.47's
  ``QuantizeConfig``), naming its source and the format map it must produce (``expect``).
  ``quantization.recipe`` picks one (default ``ultra``).
* **Module kinds** group the module names of both layouts (Hugging Face NemotronH ``backbone.|model.
  layers.N.mixer.*``; Megatron-Core ``decoder.layers.N.mlp.*`` / ``.mixer.*`` / ``.self_attention.*``)
  into the rows of the summary table.
* **Export repair**: nvidia-modelopt 0.47's ``export_hf_checkpoint`` writes every layer name in
  ``hf_quant_config.json`` (and ``config.json``'s ``quantization_config``) with a placeholder tail,
  ``backbone.layers.0.mixer.in_proj.\\x00backbone.pt_name_sentinel``; :func:`repair_names` cuts it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.runtime.common.settings import SettingsError, config_path, get, shown

#: Summary rows, in order: kind → what it is. Source of the grouping: the Ultra recipe's own comments
#: (nvfp4-4o6.yaml) and the issue's map (routed experts, shared experts, Mamba in/out, KV cache; BF16 rest).
KINDS: dict[str, str] = {
    "routed_experts": "MoE routed experts (up/down projections)",
    "shared_experts": "MoE shared expert",
    "mamba_in_out_proj": "Mamba-2 in_proj / out_proj",
    "kv_cache": "attention KV cache (K/V after projection)",
    "attention_proj": "attention Q/K/V/O projections",
    "latent_proj": "MoE latent projections (fc1/fc2_latent_proj)",
    "router": "MoE router (gate)",
    "mamba_conv1d": "Mamba-2 conv1d",
    "mtp": "MTP block",
    "embeddings": "token embeddings",
    "output_head": "output head (lm_head)",
    "other": "norms, Mamba A/D/dt, expert bias",
}

_KIND_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("mtp", re.compile(r"(^|\.)mtp(\.|$)")),
    ("shared_experts", re.compile(r"\.(mixer|mlp)\.shared_experts(\.|_|$)")),
    ("routed_experts", re.compile(r"\.(mixer|mlp)\.experts(\.|_|$)")),
    ("latent_proj", re.compile(r"fc[12]_latent_proj")),
    ("router", re.compile(r"\.(mixer|mlp)\.(gate|router)(\.|$)")),
    ("kv_cache", re.compile(r"(\.|^)[kv]_bmm_quantizer$|\.[kv]_scale$")),
    ("mamba_in_out_proj", re.compile(r"\.mixer\.(in_proj|out_proj)(\.|$)")),
    ("mamba_conv1d", re.compile(r"\.mixer\.conv1d(\.|$)")),
    ("attention_proj", re.compile(r"\.mixer\.[qkvo]_proj(\.|$)|\.self_attention\.(linear_qkv|linear_proj)(\.|$)")),
    ("embeddings", re.compile(r"embed")),
    ("output_head", re.compile(r"(^|\.)(lm_head|output_layer)(\.|$)")),
)

#: The placeholder nvidia-modelopt 0.47 leaks into layer names of hf_quant_config.json.
_SENTINEL = re.compile(r"\.?\x00.*$", re.DOTALL)


class QuantConfigError(SettingsError):
    """A recipe or quantize setting that cannot be used; ``str()`` names the file or key."""


def module_kind(name: str) -> str:
    """The :data:`KINDS` key of a module, quantizer or checkpoint tensor name (either layout)."""
    for kind, pattern in _KIND_RULES:
        if pattern.search(name):
            return kind
    return "other"


# ------------------------------------------------------------------------------------------- recipes
@dataclass(frozen=True)
class Recipe:
    """One quantization recipe (``stages/ultra3/quantize/recipes/<name>.yaml``).

    ``algorithm`` and ``quant_cfg`` are passed to Model Optimizer unchanged (``mtq.quantize(model,
    {"quant_cfg": ..., "algorithm": ...})``); ``expect`` maps a module kind to the formats it must end up
    with (``{"weights": "nvfp4", "inputs": "nvfp4"}``, or one format for the KV cache); kinds not listed
    must stay BF16.
    """

    name: str
    path: Path
    description: str
    source: str
    expect: dict[str, Any]
    algorithm: dict[str, Any]
    quant_cfg: list[dict[str, Any]] = field(default_factory=list)

    def modelopt_config(self) -> dict[str, Any]:
        """The config dict ``mtq.quantize`` takes (fresh copies)."""
        import copy

        return {"quant_cfg": copy.deepcopy(self.quant_cfg), "algorithm": copy.deepcopy(self.algorithm)}


def recipes_dir() -> Path:
    """``stages/ultra3/quantize/recipes``."""
    from nemotron.config.paths import stages_dir

    return stages_dir() / "ultra3" / "quantize" / "recipes"


def recipe_names() -> list[str]:
    """Names of the shipped recipes (``ultra``, ``super-max-calib``)."""
    return sorted(p.stem for p in recipes_dir().glob("*.yaml"))


def load_recipe(name: str) -> Recipe:
    """The recipe called ``name``, or read from ``name`` when it is a path to a YAML file.

    Raises:
        QuantConfigError: unknown name, unreadable file, or a missing/ill-formed field (named).
    """
    import yaml

    text = str(name or "")
    path = Path(os.path.expanduser(text))
    if not (text.endswith((".yaml", ".yml")) and path.is_file()):
        path = recipes_dir() / f"{text}.yaml"
        if not path.is_file():
            from nemotron.errors import did_you_mean

            maybe = did_you_mean(text, recipe_names())
            raise QuantConfigError(f"quantization.recipe={name!r}: no such recipe" + (f"; {maybe}" if maybe else "")
                                   + f"; valid: {', '.join(recipe_names())} (or a path to a recipe .yaml)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise QuantConfigError(f"{path}: cannot read the recipe: {exc}") from None
    if not isinstance(data, dict):
        raise QuantConfigError(f"{path}: a recipe is a mapping with algorithm, quant_cfg, expect, source")
    for key, kind in (("quant_cfg", list), ("algorithm", dict), ("expect", dict), ("source", str)):
        if not isinstance(data.get(key), kind):
            raise QuantConfigError(f"{path}: key {key!r} must be a {kind.__name__}")
    for i, entry in enumerate(data["quant_cfg"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("quantizer_name"), str):
            raise QuantConfigError(f"{path}: quant_cfg[{i}] needs a quantizer_name (Model Optimizer 0.47 list form)")
        q = entry["quantizer_name"]
        if entry.get("enable", True) and q != "*" and q.endswith("_quantizer") and not re.search(
                r"(weight|input|\[kv\]_bmm|[kv]_bmm)_quantizer$", q):
            raise QuantConfigError(f"{path}: quant_cfg[{i}].quantizer_name={q!r} would also enable output "
                                   "quantizers; end it in weight_quantizer, input_quantizer or [kv]_bmm_quantizer")
    unknown = sorted(set(data["expect"]) - set(KINDS))
    if unknown:
        raise QuantConfigError(f"{path}: expect: unknown module kind(s) {', '.join(unknown)}; valid: {', '.join(KINDS)}")
    return Recipe(name=path.stem, path=path, description=str(data.get("description", "")), source=data["source"],
                  expect=data["expect"], algorithm=data["algorithm"], quant_cfg=data["quant_cfg"])


def expected_map(recipe: Recipe) -> dict[str, dict[str, str]]:
    """``kind → {"weights": fmt, "inputs": fmt}`` the recipe must produce; ``bf16`` where it says nothing.
    The KV cache has one format (``{"cache": fmt}``); norms and the like (``other``) are not listed."""
    out: dict[str, dict[str, str]] = {}
    for kind in KINDS:
        if kind == "other":
            continue
        want = recipe.expect.get(kind, "bf16")
        if kind == "kv_cache":
            out[kind] = {"cache": str(want)}
        elif isinstance(want, dict):
            out[kind] = {"weights": str(want.get("weights", "bf16")), "inputs": str(want.get("inputs", "bf16"))}
        else:
            out[kind] = {"weights": str(want), "inputs": str(want)}
    return out


def format_name(enabled: bool, num_bits: Any, block_sizes: dict | None) -> str:
    """A quantizer's format in words: ``bf16`` (off), ``fp8`` (E4M3), ``nvfp4`` (E2M1, blocks of 16,
    E4M3 scales), ``mxfp4``, ``int8``, or the raw numbers."""
    if not enabled:
        return "bf16"
    bits = tuple(num_bits) if isinstance(num_bits, (list, tuple)) else num_bits
    scale = tuple((block_sizes or {}).get("scale_bits") or ()) if block_sizes else ()
    if bits == (2, 1):
        if scale == (4, 3) and (block_sizes or {}).get(-1) == 16:
            return "nvfp4"
        if scale == (8, 0):
            return "mxfp4"
        return f"fp4 (blocks {block_sizes})"
    if bits == (4, 3):
        return "fp8"
    if bits == 8:
        return "int8"
    return f"num_bits={num_bits}"


# --------------------------------------------------------------------------------------- export repair
def repair_names(obj: Any) -> tuple[Any, int]:
    """``obj`` (parsed JSON) with the 0.47 placeholder cut from every string key and value; and how many
    strings were repaired. ``"backbone.layers.0.mixer.in_proj.\\x00backbone.pt_name_sentinel"`` →
    ``"backbone.layers.0.mixer.in_proj"``."""
    count = 0

    def fix(s: str) -> str:
        nonlocal count
        if "\x00" in s:
            count += 1
            return _SENTINEL.sub("", s)
        return s

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {fix(k) if isinstance(k, str) else k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return fix(x) if isinstance(x, str) else x

    return walk(obj), count


def repair_export(folder: str | os.PathLike[str]) -> dict[str, int]:
    """Repair ``hf_quant_config.json`` and ``config.json``'s ``quantization_config`` in an exported
    checkpoint folder in place (atomic rewrites); returns ``{file: names repaired}``. Files without the
    placeholder are left untouched."""
    out: dict[str, int] = {}
    for fname in ("hf_quant_config.json", "config.json"):
        path = Path(folder) / fname
        if not path.is_file():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        fixed, n = repair_names(data)
        out[fname] = n
        if n:
            tmp = path.with_name(f".{fname}.tmp")
            tmp.write_text(json.dumps(fixed, indent=4) + "\n", encoding="utf-8")
            os.replace(tmp, path)
    return out


def quantized_layers(folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """``layer name → {"quant_algo": ...}`` from an export's ``hf_quant_config.json``."""
    data = json.loads((Path(folder) / "hf_quant_config.json").read_text(encoding="utf-8"))
    return dict((data.get("quantization") or {}).get("quantized_layers") or {})


# ---------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class QuantSettings:
    """What the ``local`` quantize run needs, read from the compiled config (units in the names).

    ``calib_samples`` / ``eval_samples`` count sequences of ``seq_length`` tokens; ``batch_size`` is the
    number of sequences per forward (``train.micro_batch_size``).
    """

    model_name: str
    recipe: str
    source: Path | None
    from_catalogue: bool
    calib_blend: Path | None
    calib_samples: int
    eval_samples: int
    seq_length: int
    batch_size: int
    seed: int
    export_dir: Path
    export_dtype: str
    overwrite: bool
    generate: bool
    generate_kernels: str
    prompts: tuple[str, ...]
    max_new_tokens: int
    tokenizer: str | None
    cpus: int | None
    raw: dict = field(default_factory=dict, repr=False, compare=False)


EXPORT_DTYPES = ("bfloat16", "float16")


def _int(cfg: dict, key: str, default: Any, minimum: int) -> int:
    value = get(cfg, key, default)
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise QuantConfigError(f"{key}={shown(value)}: expected an integer") from None
    if out < minimum:
        raise QuantConfigError(f"{key}={out}: must be at least {minimum}")
    return out


def read_settings(cfg: dict) -> QuantSettings:
    """Read and check the settings of a ``local`` quantize run (stdlib only).

    Raises:
        QuantConfigError: a missing or impossible value (the message names the key).
    """
    from_catalogue = bool(get(cfg, "quantization.from_catalogue", False))
    source = config_path(get(cfg, "quantization.source"), "quantization.source", QuantConfigError)
    if source is None and not from_catalogue:
        raise QuantConfigError("quantization.source is not set: point it at a Hugging Face NemotronH checkpoint "
                               "(the local pretrain/SFT output), or set quantization.from_catalogue=true")
    export = config_path(get(cfg, "export.output_dir"), "export.output_dir", QuantConfigError)
    if export is None:
        raise QuantConfigError("export.output_dir is not set: the quantized checkpoint needs a folder")
    dtype = str(get(cfg, "export.dtype", "bfloat16"))
    if dtype not in EXPORT_DTYPES:
        raise QuantConfigError(f"export.dtype={dtype!r}: valid: {', '.join(EXPORT_DTYPES)}")
    kernels = str(get(cfg, "generate.kernels", "fake_quant"))
    if kernels not in ("fake_quant", "nvfp4"):
        raise QuantConfigError(f"generate.kernels={kernels!r}: valid: fake_quant, nvfp4")
    prompts = get(cfg, "generate.prompts", []) or []
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise QuantConfigError(f"generate.prompts={prompts!r}: expected a list of strings")
    tok = get(cfg, "tokenizer.tokenizer_model")
    cpus = get(cfg, "run.env.cpus")
    return QuantSettings(
        model_name=str(get(cfg, "model.name", "small")),
        recipe=str(get(cfg, "quantization.recipe", "ultra")),
        source=source, from_catalogue=from_catalogue,
        calib_blend=config_path(get(cfg, "quantization.calib_dataset"), "quantization.calib_dataset", QuantConfigError),
        calib_samples=_int(cfg, "quantization.calib_size", 64, 1),
        eval_samples=_int(cfg, "quantization.eval_size", 16, 1),
        seq_length=_int(cfg, "model.seq_length", 256, 2),
        batch_size=_int(cfg, "train.micro_batch_size", 1, 1),
        seed=_int(cfg, "quantization.seed", 1234, 0),
        export_dir=export, export_dtype=dtype, overwrite=bool(get(cfg, "export.overwrite", False)),
        generate=bool(get(cfg, "generate.enabled", True)), generate_kernels=kernels, prompts=tuple(prompts),
        max_new_tokens=_int(cfg, "generate.max_new_tokens", 32, 0),
        tokenizer=None if tok in (None, "") else str(tok),
        cpus=None if cpus is None else _int(cfg, "run.env.cpus", None, 1),
        raw=cfg,
    )


def export_identity(s: QuantSettings, origin: str) -> dict[str, str]:
    """What makes two local exports the same export: the recipe, the source (``origin``: the weights folder,
    or the catalogue build) and ``config_hash``, a SHA-256 (16 hex digits) of every other setting that
    changes the exported tensors (calibration data, sizes, seed, dtype, model). Written into
    ``summary.json``; :func:`check_inputs` compares an existing export's with the run's."""
    import hashlib

    shaped = {"model": s.model_name, "calib_blend": str(s.calib_blend),
              "calib_samples": s.calib_samples, "seq_length": s.seq_length, "batch_size": s.batch_size,
              "seed": s.seed, "dtype": s.export_dtype}
    digest = hashlib.sha256(json.dumps(shaped, sort_keys=True).encode()).hexdigest()[:16]
    try:
        recipe = load_recipe(s.recipe).name
    except QuantConfigError:
        recipe = s.recipe
    return {"recipe": recipe, "source": origin, "config_hash": digest}


def source_origin(s: QuantSettings) -> str:
    """The source as ``summary.json`` names it: the resolved weights folder, or the catalogue build.

    Raises:
        nemotron.runtime.common.model.ModelError: no checkpoint at ``quantization.source``.
    """
    from nemotron.runtime.common.model import resolve_weights

    if s.from_catalogue or s.source is None:
        return f"built from the catalogue ({s.model_name}, seed {s.seed})"
    return str(resolve_weights(s.source).resolve())


def _quantized_marker(folder: Path) -> str | None:
    """Why the checkpoint in ``folder`` is already quantized (None when it is not)."""
    if (folder / "hf_quant_config.json").exists():
        return "it has an hf_quant_config.json"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(config, dict) and config.get("quantization_config"):
        return "its config.json has a quantization_config"
    return None


def _overlap(a: Path, b: Path) -> str | None:
    """How folder ``a`` relates to ``b`` after resolving symlinks: "is", "is inside" or "contains" (None: apart)."""
    ra, rb = a.resolve(), b.resolve()
    if ra == rb:
        return "is"
    if rb in ra.parents:
        return "is inside"
    if ra in rb.parents:
        return "contains"
    return None


def _export_problem(s: QuantSettings) -> str | None:
    """Why the run may not write ``export.output_dir`` (None: it may). A folder holding another export
    (``summary.json`` with another recipe, source or config hash) needs ``export.overwrite=true``; one holding
    the same export is redone; one holding anything else is refused."""
    folder = s.export_dir
    if not folder.exists():
        return None
    if not folder.is_dir():
        return "exists and is not a folder"
    names = sorted(p.name for p in folder.iterdir())
    if not names:
        return None
    try:
        old = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        old = old if isinstance(old, dict) else None
    except (OSError, ValueError):
        old = None
    if old is None or "recipe" not in old:
        return (f"holds files that are not a quantize export ({', '.join(names[:3])}{' ...' if len(names) > 3 else ''});"
                " choose an empty or new export.output_dir")
    if s.overwrite:
        return None
    from nemotron.runtime.common.model import ModelError

    try:
        want = export_identity(s, source_origin(s))
    except ModelError:  # the source's own problem is reported under its key
        return None
    differ = [f"{k} {old.get(k)!r} (this run: {v!r})" for k, v in want.items() if old.get(k) != v]
    if not differ:
        return None
    return (f"holds another export ({'; '.join(differ)}); choose another export.output_dir, or set "
            "export.overwrite=true to replace it")


def check_inputs(s: QuantSettings) -> list[tuple[str, Any, str]]:
    """Problems with the inputs on this machine, as ``(key, value, message)``: the checkpoint to quantize
    is not a Hugging Face model folder or is already quantized, the calibration blend is missing, the export
    folder is the source, inside it or contains it (symlinks resolved), or holds the calibration blend,
    another export (without ``export.overwrite``) or unrelated files, or is a file.
    A checkpoint is what :func:`nemotron.runtime.common.model.resolve_weights` accepts (a model folder, a run
    folder with a top-level export, or its newest ``checkpoint-<step>``)."""
    from nemotron.runtime.common.model import (  # light: torch is imported inside its loaders
        ModelError,
        resolve_weights,
    )

    out: list[tuple[str, Any, str]] = []
    if s.source is not None and not s.from_catalogue:
        how = _overlap(s.export_dir, s.source)
        if how:
            out.append(("export.output_dir", str(s.export_dir), (f"{how} the checkpoint to quantize "
                        f"(quantization.source={str(s.source)!r}): the export would overwrite it; choose another "
                        "export.output_dir")))
        if not s.source.exists():
            out.append(("quantization.source", str(s.source), "no such folder (the checkpoint to quantize)"))
        else:
            try:
                weights = resolve_weights(s.source)
            except ModelError:
                out.append(("quantization.source", str(s.source), ("not a Hugging Face model folder (config.json + "
                            "model*.safetensors), nor a run folder with checkpoint-<step> folders")))
            else:
                why = _quantized_marker(weights)
                if why:
                    out.append(("quantization.source", str(s.source), (f"already quantized ({why}): quantize "
                                "needs a BF16 checkpoint (the pretrain or SFT output)")))
    if s.calib_blend is None:
        out.append(("quantization.calib_dataset", None, ("the local backend calibrates on the blend.json of "
                    "`data prep pretrain` (its train split; metrics on its test or valid split)")))
    else:
        if _overlap(s.calib_blend, s.export_dir):
            out.append(("quantization.calib_dataset", str(s.calib_blend), (f"lies in the export folder "
                        f"(export.output_dir={str(s.export_dir)!r}), which the export replaces; choose another "
                        "export.output_dir")))
        if not s.calib_blend.is_file():
            out.append(("quantization.calib_dataset", str(s.calib_blend), ("no such file (the blend.json of "
                        "`data prep pretrain`)")))
    if not any(key == "export.output_dir" for key, _, _ in out):
        why = _export_problem(s)
        if why:
            out.append(("export.output_dir", str(s.export_dir), why))
    if s.generate and s.generate_kernels == "nvfp4":
        out.append(("generate.kernels", "nvfp4", ("the local backend generates with fake quantization only "
                    "(real NVFP4 GEMMs need vLLM on Blackwell); set fake_quant")))
    return out


# ------------------------------------------------------------------------------- cluster translation
def cluster_plan(cfg: dict, world_size: int) -> dict[str, Any]:
    """What the Megatron-Bridge entry does, from the compiled config (pure): the calibration layout
    (``model.*`` parallel sizes, Megatron-Core names kept), the export layout (``export.*``), the
    calibration data and size, the recipe's Model Optimizer config, the export folder and dtype, and the
    generation check.

    Raises:
        QuantConfigError: unknown recipe; the calibration layout does not fill ``world_size`` GPUs
            (TP x PP x CP x DP with DP >= 1 and EP x ETP dividing world / PP); the source is unset.
    """
    def size(key: str) -> int:
        value = get(cfg, key, 1)
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise QuantConfigError(f"{key}={shown(value)}: expected a positive integer") from None
        if n < 1:
            raise QuantConfigError(f"{key}={n}: expected a positive integer")
        return n

    keys = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
            "expert_tensor_parallel_size", "context_parallel_size")
    calib = {k: size(f"model.{k}") for k in keys}
    export = {k: size(f"export.{k}") for k in keys[:4]}
    tp, pp, cp = calib["tensor_model_parallel_size"], calib["pipeline_model_parallel_size"], calib["context_parallel_size"]
    ep, etp = calib["expert_model_parallel_size"], calib["expert_tensor_parallel_size"]
    if world_size % (tp * pp * cp):
        raise QuantConfigError(f"model.tensor_model_parallel_size x pipeline x context = {tp * pp * cp} does not "
                               f"divide the {world_size} GPUs of the job")
    if (world_size // pp) % (ep * etp):
        raise QuantConfigError(f"model.expert_model_parallel_size x expert_tensor_parallel_size = {ep * etp} does "
                               f"not divide the {world_size // pp} GPUs of a pipeline stage")
    ex_need = export["pipeline_model_parallel_size"] * max(
        export["tensor_model_parallel_size"], export["expert_model_parallel_size"] * export["expert_tensor_parallel_size"])
    if ex_need > world_size:
        raise QuantConfigError(f"export layout needs {ex_need} GPUs, the job has {world_size}")
    source = get(cfg, "quantization.source")
    if source in (None, "") or "${" in str(source):
        raise QuantConfigError(f"quantization.source={source!r}: set the checkpoint to quantize")
    recipe = load_recipe(str(get(cfg, "quantization.recipe", "ultra")))
    gbs, mbs = size("train.global_batch_size"), size("train.micro_batch_size")
    dp = world_size // (tp * pp * cp)
    if gbs % (mbs * dp):
        raise QuantConfigError(f"train.global_batch_size={gbs}: must be a multiple of micro batch x DP = {mbs} x {dp}")
    return {
        "world_size": world_size, "calibration_layout": calib, "data_parallel_size": dp, "export_layout": export,
        "seq_length": size("model.seq_length"), "calib_size": size("quantization.calib_size"),
        "calib_dataset": get(cfg, "quantization.calib_dataset"), "global_batch_size": gbs, "micro_batch_size": mbs,
        "source": str(source), "hf_model_id": get(cfg, "recipe.hf_model_id"),
        "megatron_output_dir": get(cfg, "quantization.output_dir"), "export_dir": get(cfg, "export.output_dir"),
        "export_dtype": str(get(cfg, "export.dtype", "bfloat16")),
        "recipe": recipe.name, "recipe_source": recipe.source, "modelopt_config": recipe.modelopt_config(),
        "generate": {"enabled": bool(get(cfg, "generate.enabled", True)), "kernels": get(cfg, "generate.kernels"),
                     "prompts": list(get(cfg, "generate.prompts", []) or []),
                     "max_new_tokens": size("generate.max_new_tokens")},
        "mtp_num_layers": get(cfg, "model.mtp_num_layers", 0),
        "distributed_timeout_minutes": get(cfg, "dist.distributed_timeout_minutes", 60),
    }


__all__ = [
    "EXPORT_DTYPES",
    "KINDS",
    "QuantConfigError",
    "QuantSettings",
    "Recipe",
    "check_inputs",
    "cluster_plan",
    "expected_map",
    "export_identity",
    "format_name",
    "load_recipe",
    "module_kind",
    "quantized_layers",
    "read_settings",
    "recipe_names",
    "recipes_dir",
    "repair_export",
    "repair_names",
    "source_origin",
]
