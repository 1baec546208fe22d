"""Reading a compiled stage config into the numbers the rules need.

The two framework families name the same things differently: Megatron-Bridge stages keep the
parallel layout under ``model.*`` and the batch under ``train.*``; NeMo RL stages under
``policy.megatron_cfg.*`` and ``policy.train_*``. A :class:`TrainView` holds one layout with the
dotted keys it came from, so every message names the key the user wrote.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nemotron.config.tree import as_int, get, unresolved

if TYPE_CHECKING:  # annotations only: pydantic is loaded with a profile, not with this module
    from nemotron.profiles.profile import ExecutorProfile

#: Node shape assumed when no profile is given (DESIGN §3: an 8-GPU H200 node).
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_GPU_MEMORY_GB = 141.0
DEFAULT_GPU_ARCH = "hopper"


@dataclass
class NodeShape:
    """GPUs per node and GPU facts for this run: from the config's ``run.env.gpus_per_node`` when set,
    else the profile, else the default 8-GPU H200 node. ``declared`` says whether a profile said so."""

    gpus_per_node: int
    config_gpus_per_node: int | None
    profile_gpus_per_node: int | None
    profile_name: str | None
    gpu_arch: str | None
    gpu_memory_gb: float | None
    declared_arch: bool
    has_profile: bool
    #: where ``gpu_memory_gb`` comes from, for the dry run's memory table: ``profile cluster (gpu = "H100")``,
    #: ``assumed: no profile, an 8-GPU H200 node``, or why it is unknown.
    memory_source: str = ""


def node_shape(cfg: dict, profile: ExecutorProfile | None) -> NodeShape:
    """The node shape of a run of ``cfg`` (a compiled config) on ``profile`` (None: no profile, the default node)."""
    cfg_gpn = as_int(get(cfg, "run.env.gpus_per_node"))
    if cfg_gpn is not None and cfg_gpn < 0:
        cfg_gpn = None  # reported by the resource rules
    if profile is None:
        gpn = cfg_gpn or DEFAULT_GPUS_PER_NODE
        return NodeShape(gpn, cfg_gpn, None, None, DEFAULT_GPU_ARCH, DEFAULT_GPU_MEMORY_GB, False, False,
                         f"assumed: no profile, so an H200 node ({DEFAULT_GPU_MEMORY_GB:.0f} GB a GPU)")
    prof_gpn, name, arch, mem = profile.gpus_per_node, profile.name, profile.gpu_arch, profile.gpu_memory
    gpn = cfg_gpn if cfg_gpn is not None else (prof_gpn if prof_gpn is not None else 0)
    gpu = profile.settings.gpu
    if mem:
        source = f'profile {name}, gpu = "{gpu}"' if gpu else f"profile {name}, gpu_memory"
    else:
        source = f'profile {name} declares no GPU memory (gpu = "H100" or gpu_memory = 80 sets it)'
    return NodeShape(gpn, cfg_gpn, prof_gpn, name, arch, float(mem) if mem else None, arch is not None, True, source)


#: Slurm's memory size suffixes (``sbatch --mem``: "Default units are megabytes. Different units can be specified
#: using the suffix [K|M|G|T]"), in bytes: Slurm's units are binary (a megabyte is 2^20 bytes).
_SLURM_MEM_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def slurm_mem_bytes(value: Any) -> int | None:
    """Bytes of a Slurm ``--mem`` value (a profile's ``mem``): an integer or digits alone are MB (2^20 bytes), a
    ``K``/``M``/``G``/``T`` suffix (any case) binary multiples. ``None`` for no concrete size: unset, ``0`` (all
    of the node's memory, whatever it is), or anything else (the profile schema refuses those when it loads)."""
    if isinstance(value, bool) or value is None:
        return None
    text = str(value).strip().upper()
    unit = _SLURM_MEM_UNITS.get(text[-1:], None)
    digits = text[:-1] if unit else text
    if not digits.isdigit() or int(digits) == 0:
        return None
    return int(digits) * (unit or _SLURM_MEM_UNITS["M"])


@dataclass(frozen=True)
class HostMemory:
    """The RAM a job's process may use on one node, as the profile states it: ``bytes`` (None: unknown),
    ``key`` (the profile key it came from, ``profile.<name>.mem`` / ``profile.<name>.host_memory``; the key to set
    when unknown), ``value`` (that key's value) and ``source`` (the words a message uses: ``Slurm mem = '512G'
    of profile cluster``)."""

    bytes: int | None
    key: str
    value: Any
    source: str


def host_memory(profile: ExecutorProfile | None) -> HostMemory:
    """The host memory a node of ``profile`` gives a job: Slurm's ``mem`` (the job's memory per node) when it is a
    concrete size (:func:`slurm_mem_bytes`), else the profile's ``host_memory`` (GB = 10^9 bytes, the node's RAM),
    else unknown (``bytes`` None; ``key`` then names ``host_memory``, the key that declares it). ``profile`` None
    (no profile) is unknown too."""
    if profile is None:
        return HostMemory(None, "profile.host_memory", None, "no profile")
    from nemotron.profiles.schema import SlurmSettings  # loaded with the profile already

    name = profile.name
    prefix = f"profile.{name}."
    mem = profile.settings.mem if isinstance(profile.settings, SlurmSettings) else None
    got = slurm_mem_bytes(mem)
    if got is not None:
        return HostMemory(got, prefix + "mem", mem, f"Slurm mem = {mem!r} of profile {name}")
    declared = profile.settings.host_memory
    if declared:
        return HostMemory(int(float(declared) * 1e9), prefix + "host_memory", declared,
                          f"host_memory = {declared:g} of profile {name}")
    why = f"profile {name} declares {'mem = 0 (all of the node) and ' if mem is not None else ''}no host_memory"
    return HostMemory(None, prefix + "host_memory", declared, why)


@dataclass
class TrainView:
    """One Megatron training (or inference) layout and the keys it was read from."""

    keys: dict[str, str]
    tp: Any
    pp: Any
    ep: Any
    etp: Any
    cp: Any
    sp: bool
    seq: Any
    gbs: Any
    mbs: Any
    first: int | None = None
    last: int | None = None
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()
    distributed_optimizer: bool = True
    grad_fp32: bool = True
    offload_fraction: float = 0.0
    precision: str = "bf16"
    mtp_depths: int | None = None
    #: bytes per logits element kept until backward (2: Transformer Engine's fused cross entropy; 4: FP32)
    logits_bytes: float = 4.0
    world: int = 0
    world_key: str = "run.env.nodes"
    world_what: str = "nodes x GPUs per node"
    nodes: int = 1
    notes: list[str] = field(default_factory=list)

    def ints(self) -> dict[str, Any]:
        return {self.keys[k]: getattr(self, k) for k in ("tp", "pp", "ep", "etp", "cp", "gbs", "mbs", "seq") if k in self.keys}

    @property
    def ok(self) -> bool:
        return all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in self.ints().values())


MB_KEYS = {
    "tp": "model.tensor_model_parallel_size", "pp": "model.pipeline_model_parallel_size",
    "ep": "model.expert_model_parallel_size", "etp": "model.expert_tensor_parallel_size",
    "cp": "model.context_parallel_size", "sp": "model.sequence_parallel", "seq": "model.seq_length",
    "gbs": "train.global_batch_size", "mbs": "train.micro_batch_size",
    "first": "model.num_layers_in_first_pipeline_stage", "last": "model.num_layers_in_last_pipeline_stage",
}

RL_PREFIX = "policy.megatron_cfg"
RL_KEYS = {
    "tp": f"{RL_PREFIX}.tensor_model_parallel_size", "pp": f"{RL_PREFIX}.pipeline_model_parallel_size",
    "ep": f"{RL_PREFIX}.expert_model_parallel_size", "etp": f"{RL_PREFIX}.expert_tensor_parallel_size",
    "cp": f"{RL_PREFIX}.context_parallel_size", "sp": f"{RL_PREFIX}.sequence_parallel",
    "seq": "policy.max_total_sequence_length", "gbs": "policy.train_global_batch_size",
    "mbs": "policy.train_micro_batch_size",
    "first": f"{RL_PREFIX}.num_layers_in_first_pipeline_stage", "last": f"{RL_PREFIX}.num_layers_in_last_pipeline_stage",
}


#: The parallel-layout keys of a quantize stage's export (a second layout inside the same allocation).
EXPORT_KEYS = {"tp": "export.tensor_model_parallel_size", "pp": "export.pipeline_model_parallel_size",
               "ep": "export.expert_model_parallel_size", "etp": "export.expert_tensor_parallel_size"}


def layout_keys(kind: str) -> dict[str, str]:
    """The dotted keys of a stage's training layout (``tp``, ``pp``, ``ep``, ``etp``, ``cp``, ``sp``, ``seq``,
    ``gbs``, ``mbs``, ``first``, ``last``): NeMo RL's ``policy.megatron_cfg.*`` for ``kind`` ``"rl"``, else
    Megatron-Bridge's ``model.*`` / ``train.*``. The one place these key names are spelt."""
    return dict(RL_KEYS if kind == "rl" else MB_KEYS)


def _precision(mixed: Any, fp8_enabled: bool = False) -> str:
    text = str(mixed or "").lower()
    if "fp4" in text:
        return "nvfp4"
    if "fp8" in text or fp8_enabled:
        return "fp8"
    return "bf16"


def megatron_view(cfg: dict) -> TrainView:
    """The ``model.*`` / ``train.*`` layout of a Megatron-Bridge stage."""
    g = lambda k, d=None: get(cfg, MB_KEYS[k], d)  # noqa: E731
    modules = get(cfg, "model.recompute_modules") or ()
    return TrainView(
        keys=dict(MB_KEYS), tp=as_int(g("tp", 1)) or g("tp"), pp=as_int(g("pp", 1)) or g("pp"),
        ep=as_int(g("ep", 1)) or g("ep"), etp=as_int(g("etp", 1)) or g("etp"), cp=as_int(g("cp", 1)) or g("cp"),
        sp=bool(g("sp", False)), seq=as_int(g("seq")) or g("seq"), gbs=as_int(g("gbs", 1)) or g("gbs"),
        mbs=as_int(g("mbs", 1)) or g("mbs"), first=as_int(g("first")), last=as_int(g("last")),
        recompute_granularity=get(cfg, "model.recompute_granularity"),
        recompute_method=get(cfg, "model.recompute_method"),
        recompute_num_layers=as_int(get(cfg, "model.recompute_num_layers")),
        recompute_modules=tuple(modules) if isinstance(modules, (list, tuple)) else (),
        distributed_optimizer=bool(get(cfg, "ddp.use_distributed_optimizer", get(cfg, "optimizer.use_distributed_optimizer", True))),
        grad_fp32=bool(get(cfg, "ddp.grad_reduce_in_fp32", True)),
        offload_fraction=_offload(get(cfg, "optimizer.optimizer_cpu_offload"), get(cfg, "optimizer.optimizer_offload_fraction")),
        precision=_precision(get(cfg, "mixed_precision")),
        mtp_depths=as_int(get(cfg, "model.mtp_num_layers")),
        logits_bytes=_logits_bytes(get(cfg, "model.cross_entropy_loss_fusion", True),
                                   get(cfg, "model.cross_entropy_fusion_impl"), get(cfg, "recipe.name")),
    )


#: The Megatron-Bridge recipes (4588417, ``recipes/nemotronh/nemotron_3_ultra.py``) that set
#: ``cross_entropy_fusion_impl = "te"``: the pretrain recipe only. The SFT and PEFT recipes leave Megatron-Core's
#: default, "native" (seen in the one-GPU SFT run's config dump, docs/gpu_run.md).
TE_CROSS_ENTROPY_RECIPES = frozenset({"nemotron_3_ultra_pretrain_config"})


def _logits_bytes(fusion: Any, impl: Any, recipe: Any = None) -> float:
    """2 when Megatron-Core runs Transformer Engine's fused cross entropy (``cross_entropy_loss_fusion`` and
    ``cross_entropy_fusion_impl: te``: the BF16 logits are kept, the gradient written into them), else 4 (an FP32
    softmax or copy is kept). Unset keys take what the stage's Megatron-Bridge recipe ``recipe`` gives: fusion on
    (the Mamba provider's default), impl "te" for the recipes of :data:`TE_CROSS_ENTROPY_RECIPES`, else
    Megatron-Core's default "native"."""
    if impl is None:
        impl = "te" if str(recipe or "") in TE_CROSS_ENTROPY_RECIPES else "native"
    return 2.0 if bool(fusion) and str(impl).lower() == "te" else 4.0


def _offload(enabled: Any, fraction: Any) -> float:
    if not enabled:
        return 0.0
    try:
        f = float(fraction) if fraction is not None else 1.0
    except (TypeError, ValueError):
        f = 1.0
    return f if f > 0 else 1.0


def rl_view(cfg: dict) -> TrainView:
    """The ``policy.megatron_cfg.*`` / ``policy.train_*`` layout of a NeMo RL stage."""
    g = lambda k, d=None: get(cfg, RL_KEYS[k], d)  # noqa: E731
    ckpt = bool(get(cfg, f"{RL_PREFIX}.activation_checkpointing", False))
    return TrainView(
        keys=dict(RL_KEYS), tp=as_int(g("tp", 1)) or g("tp"), pp=as_int(g("pp", 1)) or g("pp"),
        ep=as_int(g("ep", 1)) or g("ep"), etp=as_int(g("etp", 1)) or g("etp"), cp=as_int(g("cp", 1)) or g("cp"),
        sp=bool(g("sp", False)), seq=as_int(g("seq")) or g("seq"), gbs=as_int(g("gbs", 1)) or g("gbs"),
        mbs=as_int(g("mbs", 1)) or g("mbs"), first=as_int(g("first")), last=as_int(g("last")),
        recompute_granularity="full" if ckpt else None, recompute_method="uniform" if ckpt else None,
        recompute_num_layers=1 if ckpt else None,
        distributed_optimizer=bool(get(cfg, f"{RL_PREFIX}.optimizer.use_distributed_optimizer", True)),
        grad_fp32=bool(get(cfg, f"{RL_PREFIX}.distributed_data_parallel_config.grad_reduce_in_fp32", False)),
        offload_fraction=_offload(get(cfg, f"{RL_PREFIX}.optimizer.optimizer_cpu_offload"),
                                  get(cfg, f"{RL_PREFIX}.optimizer.optimizer_offload_fraction")),
        precision=_precision(None, bool(get(cfg, f"{RL_PREFIX}.fp8_cfg.enabled", False))),
        mtp_depths=as_int(get(cfg, f"{RL_PREFIX}.mtp_num_layers")),
        world_key="cluster.num_nodes", world_what="training nodes x GPUs per node",
    )


# ------------------------------------------------------------------------------------ framework pins


# ------------------------------------------------------------------------------------ data metadata
MANIFEST_NAMES = ("manifest.json", "metadata.json", "packing_metadata.json", "nemotron_manifest.json")


def read_manifest(path_value: Any) -> tuple[dict[str, Any] | None, str]:
    """The data artifact's manifest next to ``path_value`` (a file or folder), or (None, "").

    Looks for ``manifest.json`` (then ``metadata.json``) in the folder itself or, for a file such as
    ``blend.json``, in its folder. Read only when the path exists locally; a manifest that cannot
    be parsed is ignored (data prep owns its format; validation only reads ``tokenizer``,
    ``pack_size`` and ``pad_to_multiple`` from it).
    """
    if not isinstance(path_value, str) or not path_value or unresolved(path_value):
        return None, ""
    p = Path(os.path.expanduser(path_value))
    folders = [p] if p.is_dir() else [p.parent] if p.exists() else []
    for folder in folders:
        for name in MANIFEST_NAMES:
            f = folder / name
            if f.is_file():
                try:
                    data = json.loads(f.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                if isinstance(data, dict):
                    return data, str(f)
    return None, ""


def manifest_field(manifest: dict[str, Any] | None, *names: str) -> Any:
    """First of ``names`` (dotted) present in ``manifest``."""
    if not manifest:
        return None
    for n in names:
        v = get(manifest, n)
        if v is not None:
            return v
    return None


@dataclass(frozen=True)
class ExportSize:
    """What an RLVR/MOPD run's Hugging Face export (:func:`nemotron.runtime.rl.nemo_rl.finish`) holds: ``params``
    (elements, total incl. MTP) or None when they could not be counted; ``source`` says where the count comes from
    (``catalogue model ultra``, ``/path/config.json``) or why there is none."""

    params: int | None
    source: str


def rl_export_size(cfg: dict) -> ExportSize | None:
    """The policy's parameters that NeMo RL's export after training holds; None when nothing is exported
    (``checkpointing.enabled`` false or no ``checkpointing.checkpoint_dir``: the run records no checkpoint).

    From ``model.name`` when it is a catalogue model (:func:`nemotron.config.catalogue.param_count`); else from the
    ``config.json`` of ``policy.model_name`` (the Hugging Face folder the converter builds its bridge from:
    ``export_model_from_megatron(hf_model_name=policy.model_name)``, NeMo RL 7ea279a) when that is a folder this
    machine sees, counted by :func:`nemotron.config.catalogue.spec_from_hf_config`; else ``params`` None with the
    reason (a hub id, a path not here, not a NemotronH config: the caller says the check did not run)."""
    from nemotron.config import catalogue

    if get(cfg, "checkpointing.enabled", True) is False or not get(cfg, "checkpointing.checkpoint_dir"):
        return None
    name = get(cfg, "model.name")
    if isinstance(name, str):
        try:
            return ExportSize(catalogue.param_count(catalogue.get(name))["total"], f"catalogue model {name}")
        except catalogue.CatalogueError:
            pass
    outside = f"model.name={name!r} is not a catalogue model"
    folder = get(cfg, "policy.model_name")
    if not isinstance(folder, str) or not folder or unresolved(folder):
        return ExportSize(None, f"{outside} and policy.model_name={folder!r} is not a folder yet")
    path = Path(os.path.expanduser(folder)) / "config.json"
    if not path.is_file():
        return ExportSize(None, f"{outside} and policy.model_name={folder!r} has no config.json on this machine")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return ExportSize(None, f"{outside} and {path} is not readable JSON ({type(exc).__name__})")
    try:
        spec = catalogue.spec_from_hf_config(config if isinstance(config, dict) else {}, str(path))
    except catalogue.CatalogueError as exc:
        return ExportSize(None, f"{outside} and its parameters cannot be counted from {exc}")
    return ExportSize(catalogue.param_count(spec)["total"], str(path))


def rl_export_params(cfg: dict) -> int | None:
    """``params`` of :func:`rl_export_size` (None: nothing exported, or not counted)."""
    size = rl_export_size(cfg)
    return size.params if size else None
