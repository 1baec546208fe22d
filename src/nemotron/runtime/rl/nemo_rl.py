"""The cluster runtime of ``ultra3 rlvr`` and ``ultra3 mopd``: our compiled config → NeMo RL's GRPO entry.

What the entry script (``stages/ultra3/{rlvr,mopd}/run.py``, through :mod:`nemotron.runtime.dispatch`) calls inside
the NeMo RL container, on the Ray head of the job's Ray cluster:

1. :func:`precheck` — before anything heavy, one line per problem: NeMo RL and the generation backend
   (``policy.generation.backend``: vLLM, SGLang, or Megatron-Bridge for Megatron generation) importable (Megatron
   generation also needs a FlashAttention that Megatron-Core's dynamic batching accepts, and ``flashinfer`` for a
   16-bit policy), every
   checkpoint path (policy, tokenizer, each teacher) present, the GPUs visible on this node equal to
   ``cluster.gpus_per_node``. Any problem: the lines are printed and the stage exits 1.
2. :func:`v4_views` — a policy or teacher checkpoint whose ``config.json`` is in the transformers-v5
   NemotronH form (``layers_block_type``) gets a v4 view (``hybrid_override_pattern``, what NeMo RL's
   Megatron-Bridge import and vLLM read): a folder holding the rewritten ``config.json``
   (:func:`nemotron.runtime.common.convert.v5_to_v4`) and links to the checkpoint's other files (weights are
   not copied: 1.1 TB for Ultra).
3. :func:`translate` — pure: drop our own keys (:data:`nemotron.config.keys.NEMO_RL_OWN_KEYS`), turn the teacher
   panel and routing table into ``on_policy_distillation.teacher_model_by_agent_name`` +
   ``default_teacher_alias``, fold the enabled NeMo Gym ``environments`` into ``env.nemo_gym``, and point
   checkpoint paths at their v4 views.
4. :func:`launch` — write the translated config next to the run and run NeMo RL's own GRPO entry script
   of the installed checkout (``examples/run_grpo.py``; ``examples/nemo_gym/run_grpo_nemo_gym.py`` when
   NeMo Gym is on — the script NVIDIA's Ultra launcher runs for every Ultra RL stage, MOPD included:
   on-policy distillation is part of NeMo RL's GRPO loop, ``nemo_rl/algorithms/grpo.py`` + ``opd.py``)
   with ``--config`` (:func:`run_entry`: its standard output is passed through line by line and read for the line
   NeMo RL prints at a stop below ``grpo.max_num_steps``); a non-zero exit code is the stage's.
5. :func:`finish` — NeMo RL's own converter turns the newest ``step_N`` into a Hugging Face folder
   (``<checkpoint_dir>/hf/step_N``, linked from ``hf/latest``), which is what the run records as its artifact.

The config is layered on NeMo RL's own Ultra recipe (``nemo_rl.base``: :func:`base_recipe`, the lowest layer of
:func:`nemotron.config.compile.compile_config`), and what step 4 hands NeMo RL (:func:`job_yaml`) is what
tests/contract/test_nemo_rl.py runs NeMo RL's own entry code on at the pinned commit (loading, ``MasterConfig``,
the entry's and ``setup()``'s checks that need no GPU). Steps 1-3 and 5 (with a stand-in for the converter's
run) are tested here (tests/runtime/test_rl.py); the converter's command line against its real argument parser and the
``step_N`` layout of NeMo RL's real ``CheckpointManager`` in the contract tests. Steps 4 and 5's conversion
need NeMo RL, vLLM, Megatron-Bridge and GPUs: they have not been run by this project.

Stdlib only at import time.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from nemotron.config.nemo_rl_base import BASE_KEY, keylist
from nemotron.errors import ConfigError, NemotronError
from nemotron.runtime.common import prestart
from nemotron.runtime.common.settings import EXIT_REQUEUE
from nemotron.runtime.common.settings import get as _get

#: The alias NeMo RL's OPD falls back to for an agent the routing table does not list
#: (``default_teacher_alias`` must be a key of ``teacher_model_by_agent_name``: nemo_rl/algorithms/opd.py
#: ``_validate_default_teacher_alias``).
DEFAULT_TEACHER_ALIAS = "nemotron_default_teacher"

#: The policy's own model server in NeMo Gym: first of ``env.nemo_gym.config_paths`` in every Ultra recipe
#: (NVIDIA-NeMo/RL examples/nemo_gym/nemotron-3-ultra/*.yaml).
GYM_POLICY_MODEL = "responses_api_models/vllm_model/configs/vllm_model_for_training.yaml"

_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class PrecheckError(NemotronError):
    """The container or the inputs are not what the stage needs (exit 1); ``problems`` one line each."""

    exit_code = 1

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems[0] if len(problems) == 1 else f"{len(problems)} problems before NeMo RL could start",
                         "; ".join(problems[1:]) if len(problems) > 1 else None)
        self.problems = problems


# ------------------------------------------------------------------------------------ base recipes


def recipe_drift(cfg: dict, root: Path) -> list[str]:
    """Inside the NeMo RL container: the base recipe of ``cfg`` (``nemo_rl.base``) composed from the container's
    own checkout ``root`` by NeMo RL's ``load_config`` must be the one the config was validated against (the key
    list's copy, :func:`base_recipe`); one line when it is not (another NeMo RL commit in the image: the config's
    values were checked against a different recipe). Empty when ``cfg`` names no base.

    Imports ``nemo_rl.utils.config`` and ``omegaconf`` (the container has both)."""
    own = cfg.get(BASE_KEY) if isinstance(cfg.get(BASE_KEY), dict) else {}
    name = own.get("base")
    if not name:
        return []
    path = Path(root) / str(name)
    if not path.is_file():
        return [f"{BASE_KEY}.base={name}: not in this container's NeMo RL checkout ({root}); the image is not the "
                "pinned NeMo RL commit (stages/images.toml nemo-rl)"]
    from nemo_rl.utils.config import load_config
    from omegaconf import OmegaConf

    here = OmegaConf.to_container(load_config(path), resolve=False)
    stored = (keylist().get("recipes") or {}).get(str(name))
    if here == stored:
        return []
    diffs = _differences(stored, here)
    shown = "; ".join(f"{k}: {a!r} validated, {b!r} here" for k, a, b in diffs[:3])
    return [f"{BASE_KEY}.base={name}: this container's NeMo RL ({root}) composes it differently from the copy the "
            f"config was validated against ({keylist().get('version')}): {len(diffs)} key(s), {shown}; build the "
            "image at the pinned commit, or regenerate the key list (scripts/nemo_rl_keys.py) for this one"]


def _differences(a, b, prefix: str = "") -> list[tuple[str, object, object]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += _differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if a == b else [(prefix, a, b)]


# ------------------------------------------------------------------------------------ checkpoints
def checkpoint_paths(cfg: dict) -> dict[str, str]:
    """The checkpoint paths the run reads, by config key: ``policy.model_name``, ``policy.tokenizer.name``
    and, for MOPD, the resolved panel's ``_teachers.<slot>`` (each slot once, unset slots fall back to
    ``general``). Values as written (local paths or Hugging Face repo ids)."""
    from nemotron.layout.rules import resolve_teachers

    out: dict[str, str] = {}
    for key in ("policy.model_name", "policy.tokenizer.name"):
        v = _get(cfg, key)
        if isinstance(v, str) and v:
            out[key] = v
    teachers = cfg.get("_teachers")
    if _get(cfg, "on_policy_distillation.enabled", False) and isinstance(teachers, dict):
        panel, _ = resolve_teachers(teachers)
        for slot, v in panel.items():
            if isinstance(v, str) and v:
                out[f"_teachers.{slot}"] = v
    return out


def is_local_path(value: str) -> bool:
    """A filesystem path (absolute, ``./``, ``~``) rather than a Hugging Face repo id (``org/name``)."""
    return value.startswith(("/", ".", "~")) or not _HF_ID.match(value)


# ------------------------------------------------------------------------------------ checks
def precheck(cfg: dict, importable=None, gpus: int | None = None, checkout: Path | None = None,
             host_memory=None, installed=None) -> list[str]:
    """Every reason the cluster run cannot start here, one line each (empty: ready).

    ``importable(module) -> bool`` and ``gpus`` (GPUs visible on this node) default to the real ones;
    tests pass their own. Checks: ``nemo_rl`` and the generation backend's module importable
    (:func:`generation_modules`: ``vllm`` for ``policy.generation.backend: vllm``, ``megatron.bridge`` for
    ``megatron``, ...; the NeMo RL container, ``stages/images.toml`` ``nemo-rl``); for ``megatron``, what
    Megatron-Core's dynamic inference engine needs at generation time (:func:`megatron_generation_problems`:
    ``flashinfer`` for a 16-bit policy, a FlashAttention its dynamic batching accepts; ``installed``: ``{distribution: version or
    None}`` for :data:`FA_DISTS`, default read with importlib.metadata); each local checkpoint path of :func:`checkpoint_paths` exists and
    holds a ``config.json``; the data files (``data.train/validation.data_path``) exist, the validation file not
    empty while the run validates (:func:`nemotron.runtime.rl.val_split.empty_validation`); ``gpus`` equals ``cluster.gpus_per_node`` (NeMo RL places
    ``cluster.num_nodes`` x that many GPUs with Ray placement groups; a node that shows fewer cannot
    hold its bundles); the base recipe in the container's NeMo RL checkout (``checkout``, default: the one
    ``nemo_rl`` is imported from) is the one the config was validated against (:func:`recipe_drift`); this node
    (the Ray head, where :func:`finish` runs NeMo RL's Hugging Face export after training) has the host RAM the
    export holds (:func:`export_memory_problems`; ``host_memory() -> (bytes or None, where)``, default
    :func:`nemotron.runtime.common.prestart.host_memory`), checked before NeMo RL trains.
    """
    if importable is None:
        from nemotron.runtime.dispatch import _importable as importable
    problems: list[str] = []
    image = _image()
    for module in ("nemo_rl", *generation_modules(cfg)):
        if not importable(module):
            problems.append(_not_available(module, image))
    problems += megatron_generation_problems(cfg, importable, installed)
    if checkout is None and importable("nemo_rl"):
        checkout = _checkout_root()
    if checkout is not None:
        problems += recipe_drift(cfg, checkout)
    for key, value in checkpoint_paths(cfg).items():
        if key == "policy.tokenizer.name" and value == _get(cfg, "policy.model_name"):
            continue
        if "${" in value:
            problems.append(f"{key}={value!r}: unresolved (an artifact or variable that was not set when the "
                            "config compiled)")
            continue
        if not is_local_path(value):
            continue
        p = Path(os.path.expanduser(value))
        if not p.is_dir():
            problems.append(f"{key}={value}: no such checkpoint folder on this node")
        elif not (p / "config.json").is_file():
            problems.append(f"{key}={value}: not a Hugging Face checkpoint (no config.json)")
    for key in ("data.train.data_path", "data.validation.data_path"):
        value = _get(cfg, key)
        if isinstance(value, str) and value and "${" not in value and not Path(os.path.expanduser(value)).exists():
            problems.append(f"{key}={value}: no such file on this node")
    from nemotron.runtime.rl.val_split import empty_validation

    if (empty := empty_validation(cfg)) is not None:
        problems.append(empty)
    # Ray, not torchrun: no WORLD_SIZE to compare, only what this node shows
    env = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in os.environ}
    problems += prestart.gpu_problems(_get(cfg, "cluster.num_nodes"), _get(cfg, "cluster.gpus_per_node"), env, gpus,
                                      "cluster.num_nodes", "cluster.gpus_per_node")
    problems += export_memory_problems(cfg, host_memory)
    return problems


#: The module each NeMo RL generation backend (``policy.generation.backend``) imports in its workers, beyond NeMo RL
#: itself (nemo_rl/models/generation/<backend>/): vLLM and SGLang are engines of their own; Megatron generation runs
#: the policy's own Megatron model through Megatron-Core's inference engine (nemo_rl/models/generation/megatron), so
#: what it needs is what the Megatron policy worker needs, Megatron-Bridge (which brings Megatron-Core).
GENERATION_MODULES = {"vllm": ("vllm",), "sglang": ("sglang",), "megatron": ("megatron.bridge",),
                      "trtllm": ("tensorrt_llm",), "dynamo": ("dynamo",)}


def generation_modules(cfg: dict) -> tuple[str, ...]:
    """The modules :func:`precheck` requires for ``policy.generation.backend`` (:data:`GENERATION_MODULES`; unset:
    NeMo RL's default, vLLM). A backend NeMo RL does not have requires nothing here: NeMo RL's own setup names it
    (``grpo.py``: ``assert backend in (...)``)."""
    backend = str(_get(cfg, "policy.generation.backend") or "vllm").lower()
    return GENERATION_MODULES.get(backend, ())


#: What Megatron generation (``policy.generation.backend: megatron``) needs beyond its module, found on the GPU
#: (2026-12-06) and read in the sources. It is always Megatron-Core's dynamic engine: NeMo RL's
#: ``nemo_rl/models/generation/megatron/megatron_worker.py`` (7ea279a) builds a ``DynamicInferenceContext`` and a
#: ``DynamicInferenceEngine`` and sets ``flash_decode = False`` (the static engine's path); no key selects another.
#: That worker sets ``use_flashinfer_fused_rope`` for a float16/bfloat16 model (``policy.precision``), and
#: Megatron-Core's ``DynamicInferenceContext.__init__`` then asserts flashinfer ("flashinfer is not installed";
#: inference/contexts/dynamic_context.py, in c8288b6 and in 14346b6). It also asks for ``sampling_backend="flashinfer"``
#: at every precision: Megatron-Core 14346b6 (NeMo RL 7ea279a's own Megatron-LM, megatron-core 0.20.0, the nemo-rl
#: image) falls back to torch sampling with a warning without it (c8288b6 raises instead), so a float32 policy is
#: not refused here.
FLASHINFER_MODULE = "flashinfer"
#: The ``policy.precision`` values that turn the fused RoPE on (NeMo RL's ``_apply_precision_config``: params_dtype).
FUSED_ROPE_PRECISIONS = ("bfloat16", "float16")

#: The FlashAttention Megatron-Core's ``Attention.forward`` asserts for dynamic batching (transformer/attention.py:
#: ``HAVE_FA4 or HAVE_FA3 or is_fa_min_version("2.7.3")``, in c8288b6 and 14346b6; every NemotronH has attention
#: layers): FlashAttention 2 (distribution ``flash-attn``) at :data:`FA2_MIN_VERSION` or later, or FA3 (a module of
#: :data:`FA3_MODULES`), or FA4 (``flash_attn.cute`` of the ``flash-attn-4`` distribution, at
#: :data:`FA4_MIN_VERSION` or later).
FA2_DIST, FA4_DIST = "flash-attn", "flash-attn-4"
FA_DISTS = (FA2_DIST, FA4_DIST)
#: ``is_fa_min_version("2.7.3")`` in Megatron-Core's ``Attention.forward`` (tests/contract/test_nemo_rl_generation.py).
FA2_MIN_VERSION = "2.7.3"
#: The FA3 modules Megatron-Core tries, in its order (transformer/attention.py).
FA3_MODULES = ("flash_attn_3.flash_attn_interface", "flashattn_hopper.flash_attn_interface")
#: The lowest ``flash-attn-4`` that counts as FA4: ``_MIN_FA4_VERSION`` of Megatron-Core 14346b6's
#: transformer/attention.py (NeMo RL 7ea279a's Megatron-LM; read from the distribution's metadata, as here).
#: The pinned archive's c8288b6 states none (any ``flash_attn.cute`` import counts); the contract test fails when
#: it names one that is not this.
FA4_MIN_VERSION = "4.0.0b20"
#: The versions NeMo RL's ``mcore`` extra pins (pyproject.toml, 7ea279a), named in the fixes (contract-tested).
MCORE_EXTRA_PINS = {"flash-attn": "2.8.1", "flashinfer-python": "0.6.8.post1"}


def megatron_generation_problems(cfg: dict, importable=None, installed=None) -> list[str]:
    """For ``policy.generation.backend: megatron`` (case-insensitive), one line per runtime need of
    Megatron-Core's dynamic engine that this Python lacks (:data:`FLASHINFER_MODULE` for a ``policy.precision`` of
    :data:`FUSED_ROPE_PRECISIONS`, then a FlashAttention of :func:`flash_attention_problem`); other backends: ``[]``.

    ``importable(module) -> bool`` (default :func:`nemotron.runtime.dispatch._importable`: ``find_spec``, no
    import of a top-level module); ``installed``: ``{distribution: version or None}`` for :data:`FA_DISTS`
    (default: importlib.metadata, no import). Cheap: the FA3 modules are looked up only when no FlashAttention
    distribution is new enough."""
    if str(_get(cfg, "policy.generation.backend") or "vllm").lower() != "megatron":
        return []
    if importable is None:
        from nemotron.runtime.dispatch import _importable as importable
    problems = []
    precision = _get(cfg, "policy.precision")
    if str(precision) in FUSED_ROPE_PRECISIONS and not importable(FLASHINFER_MODULE):
        problems.append(
            f"policy.generation.backend=megatron with policy.precision={precision}: {FLASHINFER_MODULE} is not "
            "importable here; NeMo RL's Megatron generation turns on flashinfer's fused RoPE for a 16-bit model and "
            "Megatron-Core's DynamicInferenceContext asserts \"flashinfer is not installed\" in step 1's generation; "
            f"install flashinfer-python in the image (NeMo RL's mcore extra pins {MCORE_EXTRA_PINS['flashinfer-python']}), "
            "or generate with vLLM (policy.generation.backend=vllm)")
    if installed is None:
        installed = prestart.installed_versions({d: d for d in FA_DISTS})
    if (fa := flash_attention_problem(importable, installed)) is not None:
        problems.append(fa)
    return problems


def flash_attention_problem(importable, installed) -> str | None:
    """``None`` when Megatron-Core's dynamic batching has a FlashAttention here (its own three-way test,
    transformer/attention.py: FA4, FA3 or FA2 >= 2.7.3), else one line naming what was found and the fix.

    ``installed``: ``{distribution: version or None}`` (:data:`FA_DISTS`); ``importable(module) -> bool`` for
    :data:`FA3_MODULES`. Versions compare by PEP 440 (``packaging``, as Megatron-Core's ``is_fa_min_version``;
    a version that does not parse counts as too old)."""
    fa4, fa2 = installed.get(FA4_DIST), installed.get(FA2_DIST)
    if fa4 is not None and _at_least(fa4, FA4_MIN_VERSION):
        return None
    if fa2 is not None and _at_least(fa2, FA2_MIN_VERSION):
        return None
    if any(importable(m) for m in FA3_MODULES):
        return None
    found = []
    if fa2 is not None:
        found.append(f"{FA2_DIST} {fa2} is installed, below {FA2_MIN_VERSION}")
    if fa4 is not None:
        found.append(f"{FA4_DIST} {fa4} is installed, below {FA4_MIN_VERSION}")
    have = "; ".join(found) if found else (f"none is installed here (neither {FA2_DIST} nor {FA4_DIST}, nor "
                                           f"{' / '.join(m.split('.')[0] for m in FA3_MODULES)})")
    return (f"policy.generation.backend=megatron: Megatron-Core's dynamic batching (NeMo RL's Megatron generation) "
            f"asserts FlashAttention 2 >= {FA2_MIN_VERSION}, FA3 or FA4 for the model's attention layers; {have}; "
            f"install {FA2_DIST}>={FA2_MIN_VERSION} in the image (NeMo RL's mcore extra pins "
            f"{MCORE_EXTRA_PINS['flash-attn']}), or FA3 ({FA3_MODULES[0].split('.')[0]}), or {FA4_DIST}>={FA4_MIN_VERSION}")


def _at_least(have: str, minimum: str) -> bool:
    """``have >= minimum`` by PEP 440 (``packaging.version``, which Megatron-Core needs for the same test); a
    version that does not parse: False."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(have) >= Version(minimum)
    except InvalidVersion:
        return False


def export_memory_problems(cfg: dict, host_memory=None) -> list[str]:
    """Rule rl-export-host-memory (:func:`nemotron.layout.rules.rl_export_host_memory`, the dry-run's rule) on this
    node's real memory (``host_memory() -> (bytes or None, where)``, default
    :func:`nemotron.runtime.common.prestart.host_memory`: ``/proc/meminfo`` ``MemTotal`` and the cgroup limit): one line
    when it is below the policy's parameters x 2 bytes, which NeMo RL's export after training holds in one process
    here. The parameters: the catalogue's, or for a model outside it the ``config.json`` of ``policy.model_name``
    (:func:`nemotron.layout.views.rl_export_size`). Memory that cannot be read, or parameters that cannot be counted,
    is not a refusal (a ``note:`` line on stdout says the check did not run); nothing is exported (checkpointing off):
    no line."""
    from nemotron.layout.rules import EXPORT_BYTES_PER_PARAM, rl_export_host_memory
    from nemotron.layout.views import rl_export_size

    size = rl_export_size(cfg)
    if size is None:
        return []
    if size.params is None:
        for p in rl_export_host_memory(None, None, "policy.model_name", _get(cfg, "policy.model_name"), "",
                                       "a catalogue model.name, or policy.model_name = a folder with the model's "
                                       "NemotronH config.json", counted=size.source):
            print(f"note: {p.render()}", flush=True)
        return []
    params = size.params
    have, where = (host_memory or prestart.host_memory)()
    need_gb = -(-params * EXPORT_BYTES_PER_PARAM // 10**9)
    fix = (f"run the job where the Ray head's node has at least {need_gb} GB of RAM for it (a partition of such nodes; "
           "Slurm mem = 0 or a size that large), and declare host_memory in the profile so the dry-run checks it")
    found = rl_export_host_memory(params, have, "", None, where, fix,
                                  counted="" if size.source.startswith("catalogue ") else size.source)
    if have is None:
        for p in found:
            print(f"note: {p.render()}", flush=True)
        return []
    return [p.render() for p in found]


def _checkout_root() -> Path | None:
    """The NeMo RL checkout the installed ``nemo_rl`` package comes from (the folder above it), or None."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nemo_rl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    root = Path(spec.origin).resolve().parent.parent
    return root if (root / "examples").is_dir() else None


def _not_available(module: str, image: str | None = None) -> str:
    return (f"NeMo RL not available: {module} is not importable here; this stage runs inside the NeMo RL "
            f"container (image {image or _image()})")


def _image() -> str:
    try:
        from nemotron.config.images import image_table

        return str(image_table()["nemo-rl"]["image"])
    except Exception:  # the message stays useful without the table
        return "nemo-rl"


# ------------------------------------------------------------------------------------ v4 views
def v4_views(cfg: dict, root: Path) -> dict[str, str]:
    """For each local checkpoint of :func:`checkpoint_paths` whose ``config.json`` is in the v5 NemotronH
    form, a v4 view under ``root`` (rewritten ``config.json``, links to the other files); returns
    ``{original path: view path}`` (empty when every checkpoint is already v4). Views are rebuilt each
    run (the source may have changed) and written atomically per file.

    Raises:
        nemotron.runtime.common.convert.ConfigFormError: a config.json that is neither form.
    """
    from nemotron.runtime.common.convert import config_form, v5_to_v4

    out: dict[str, str] = {}
    for key, value in checkpoint_paths(cfg).items():
        if value in out or not is_local_path(value):
            continue
        src = Path(os.path.expanduser(value))
        try:
            config = json.loads((src / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # precheck reported it
        if config.get("model_type") != "nemotron_h" or config_form(config) == "v4":
            continue
        view = root / re.sub(r"[^\w.-]+", "_", key)
        view.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.name == "config.json":
                continue
            link = view / f.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(f.resolve())
        tmp = view / ".config.json.tmp"
        tmp.write_text(json.dumps(v5_to_v4(config), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, view / "config.json")
        out[value] = str(view)
    return out


# ------------------------------------------------------------------------------------ translation
def teacher_map(cfg: dict) -> tuple[dict[str, str], str | None]:
    """``(teacher_model_by_agent_name, default_teacher_alias)`` from our panel and routing table.

    Each ``teacher_routing.by_agent`` entry maps an agent (task) to a slot; the slot's checkpoint comes
    from the panel (``_teachers``, unset slots = ``general``). Agents the table does not list go to
    ``teacher_routing.default_slot``: NeMo RL falls back to ``default_teacher_alias``, which must be an
    agent of the map, so the map gets one more entry, :data:`DEFAULT_TEACHER_ALIAS` → the default slot's
    checkpoint. ``({}, None)`` when distillation is off.

    Raises:
        ConfigError: a routed or default slot that is not in the panel (validation reports it first).
    """
    from nemotron.layout.rules import resolve_teachers

    if not _get(cfg, "on_policy_distillation.enabled", False):
        return {}, None
    teachers = cfg.get("_teachers") if isinstance(cfg.get("_teachers"), dict) else {}
    panel, _ = resolve_teachers(teachers)
    routing = _get(cfg, "teacher_routing.by_agent") or {}
    default_slot = _get(cfg, "teacher_routing.default_slot") or "general"
    out: dict[str, str] = {}
    for agent, slot in routing.items():
        if slot not in panel:
            raise ConfigError(f"teacher_routing.by_agent.{agent}={slot!r}: not a teacher slot",
                              f"slots: {', '.join(panel)}")
        out[str(agent)] = panel[slot]
    if default_slot not in panel:
        raise ConfigError(f"teacher_routing.default_slot={default_slot!r}: not a teacher slot",
                          f"slots: {', '.join(panel)}")
    out[DEFAULT_TEACHER_ALIAS] = panel[default_slot]
    return out, DEFAULT_TEACHER_ALIAS


def enabled_environments(cfg: dict) -> dict[str, dict]:
    """``environments`` entries with ``enabled: true`` (name → entry)."""
    envs = cfg.get("environments") or {}
    return {n: e for n, e in envs.items() if isinstance(e, dict) and e.get("enabled", False)}


def _deep_merge(into: dict, add: dict) -> None:
    for k, v in add.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _deep_merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


#: ``agent_ref.type`` of a NeMo Gym row (the agent servers' group in NeMo Gym's config).
GYM_AGENT_TYPE = "responses_api_agents"


def gym_agent(cfg: dict) -> str | None:
    """The ``agent`` of the enabled ``verifier`` environment (the ``agent_ref.name`` our RL rows get in NeMo Gym
    form), or None when no enabled environment names one."""
    for entry in enabled_environments(cfg).values():
        if entry.get("kind") == "verifier" and isinstance(entry.get("agent"), str) and entry["agent"]:
            return entry["agent"]
    return None


def gym_rows(src: str | Path, dst: str | Path, agent: str) -> int:
    """Write ``dst``: each line of ``src`` (data prep rl's JSONL: ``messages[0].content`` the problem,
    ``messages[1].content`` the expected answer) as a NeMo Gym row — ``responses_create_params.input`` (the user
    turn), ``question``, ``expected_answer`` and ``agent_ref`` ``{"type": "responses_api_agents", "name": agent}``,
    the key NeMo RL routes teacher log-probs by (nemo_rl/algorithms/async_utils/trajectory_collector.py,
    nemo_rl/algorithms/opd.py ``resolve_reference_aliases``). A line already in Gym form
    (``responses_create_params``) is kept, given ``agent_ref`` when it has none. Returns the number of rows;
    written to ``dst.tmp`` and renamed (a failed run leaves no half file).

    Raises:
        ConfigError: ``src`` is missing, or a line is not JSON / not one of those forms (file and line named).
    """
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise ConfigError(f"{src}: RL data file not found (data.*.data_path): run `nemotron ultra3 data prep rl` "
                          "or point the stage at a JSONL file")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    n = 0
    with src.open(encoding="utf-8") as f, tmp.open("w", encoding="utf-8") as out:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                tmp.unlink()
                raise ConfigError(f"{src}:{lineno}: not JSON ({exc.msg}): each line is one RL record") from None
            if isinstance(row, dict) and isinstance(row.get("responses_create_params"), dict):
                row.setdefault("agent_ref", {"type": GYM_AGENT_TYPE, "name": agent})
            else:
                msgs = row.get("messages") if isinstance(row, dict) else None
                if (not isinstance(msgs, list) or len(msgs) < 2 or not all(isinstance(m, dict) for m in msgs[:2])
                        or not isinstance(msgs[0].get("content"), str) or not isinstance(msgs[1].get("content"), str)):
                    tmp.unlink()
                    raise ConfigError(f"{src}:{lineno}: not a data prep rl record (messages[0].content the problem, "
                                      "messages[1].content the answer) nor a NeMo Gym row (responses_create_params): "
                                      "rerun `nemotron ultra3 data prep rl`")
                problem, answer = msgs[0]["content"], msgs[1]["content"]
                row = {"responses_create_params": {"input": [{"role": "user", "content": problem}]},
                       "question": problem, "expected_answer": answer,
                       "agent_ref": {"type": GYM_AGENT_TYPE, "name": agent}}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, dst)
    return n


def gym_data(cfg: dict, folder: str | Path) -> dict[str, str]:
    """With an enabled ``verifier`` environment that names an ``agent`` (:func:`gym_agent`): each
    ``data.<split>.data_path`` written in NeMo Gym form (:func:`gym_rows`) to ``folder/<split>.jsonl``; returns
    ``{original path: Gym path}`` for :func:`translate` (``{}`` when there is no such environment)."""
    agent = gym_agent(cfg)
    if agent is None:
        return {}
    out: dict[str, str] = {}
    for split in ("train", "validation"):
        path = _get(cfg, f"data.{split}.data_path")
        if isinstance(path, str) and path and path not in out:
            dst = Path(folder) / f"{split}.jsonl"
            gym_rows(path, dst, agent)
            out[path] = str(dst)
    return out


def translate(cfg: dict, checkpoint_views: dict[str, str] | None = None,
              data_views: dict[str, str] | None = None) -> dict:
    """NeMo RL's ``MasterConfig`` (a new dict) from our compiled rlvr/mopd config. Pure.

    * our keys (:data:`nemotron.config.keys.NEMO_RL_OWN_KEYS`: ``backend``, ``model``, ``run``, ``_teachers``,
      ``teacher_routing``, ``environments``, ``output_artifact``) are dropped;
    * MOPD: ``on_policy_distillation.teacher_model_by_agent_name`` / ``default_teacher_alias`` from
      :func:`teacher_map`;
    * each enabled NeMo Gym environment adds its ``gym_config`` to ``env.nemo_gym.config_paths`` (once,
      after the policy's model server :data:`GYM_POLICY_MODEL`) and merges its ``gym`` mapping (NeMo
      Gym's own keys, passed through) into ``env.nemo_gym``; a judge's ``endpoint`` becomes
      ``env.nemo_gym.<server>.base_url`` (else its ``model`` ``...<server>.model``), a sandbox's ``image``
      the top-level key ``image_key`` (``sif_dir``), as NVIDIA's ultra_launch.sh overrides them;
    * ``checkpoint_views`` (``{path: v4 view}``, from :func:`v4_views`) replaces those paths in
      ``policy.model_name``, ``policy.tokenizer.name`` and the teacher map;
    * ``data_views`` (``{path: NeMo Gym rows}``, from :func:`gym_data`) replaces ``data.<split>.data_path``.
    """
    from nemotron.config.keys import NEMO_RL_OWN_KEYS

    views = checkpoint_views or {}
    out = {k: copy.deepcopy(v) for k, v in cfg.items() if k not in NEMO_RL_OWN_KEYS}
    tmap, alias = teacher_map(cfg)
    if alias is not None:
        opd = out.setdefault("on_policy_distillation", {})
        opd["teacher_model_by_agent_name"] = {a: views.get(p, p) for a, p in tmap.items()}
        opd["default_teacher_alias"] = alias
    gym_envs = {n: e for n, e in enabled_environments(cfg).items() if e.get("kind") != "builtin"}
    if gym_envs:
        gym = out.setdefault("env", {}).setdefault("nemo_gym", {})
        paths = list(gym.get("config_paths") or [])
        if GYM_POLICY_MODEL not in paths:
            paths.insert(0, GYM_POLICY_MODEL)
        for entry in gym_envs.values():
            cp = entry.get("gym_config")
            if cp and cp not in paths:
                paths.append(cp)
            if isinstance(entry.get("gym"), dict):
                _deep_merge(gym, entry["gym"])
            if entry.get("kind") == "judge" and entry.get("server"):
                server = gym
                for seg in str(entry["server"]).split("."):
                    server = server.setdefault(seg, {})
                if entry.get("endpoint"):
                    server["base_url"] = entry["endpoint"]
                elif entry.get("model"):
                    server["model"] = entry["model"]
            if entry.get("kind") == "sandbox" and entry.get("image") and entry.get("image_key"):
                out[str(entry["image_key"])] = entry["image"]
        gym["config_paths"] = paths
    for split in (out.get("data") or {}).values():
        if isinstance(split, dict) and split.get("data_path") in (data_views or {}):
            split["data_path"] = data_views[split["data_path"]]
    policy = out.get("policy") or {}
    if policy.get("model_name") in views:
        policy["model_name"] = views[policy["model_name"]]
    tok = policy.get("tokenizer") or {}
    if tok.get("name") in views:
        tok["name"] = views[tok["name"]]
    return out


def job_yaml(master: dict) -> str:
    """The text of ``nemo_rl_config.yaml``, the file the job hands NeMo RL's entry (``--config``): ``master``
    (:func:`translate`'s output) as YAML, keys in config order. The contract tests
    (tests/contract/test_nemo_rl.py) run NeMo RL's own loading of exactly this text."""
    import yaml

    return yaml.safe_dump(master, sort_keys=False)


# ------------------------------------------------------------------------------------ launch
def entry_relpath(cfg: dict) -> str:
    """NeMo RL's GRPO entry script for ``cfg``, relative to its checkout: ``examples/nemo_gym/run_grpo_nemo_gym.py``
    with NeMo Gym on (``env.should_use_nemo_gym``: the script NVIDIA's Ultra launcher runs for every stage, MOPD
    included), else ``examples/run_grpo.py`` (on-policy distillation runs in either: its teachers are part of
    GRPO's setup and loop)."""
    from nemotron.runtime.rl.nemo_rl import GYM_ENTRY, NATIVE_ENTRY

    return GYM_ENTRY if _get(cfg, "env.should_use_nemo_gym", False) else NATIVE_ENTRY


def entry_script(cfg: dict) -> tuple[Path, Path]:
    """``(script, checkout root)``: NeMo RL's GRPO entry script in the installed checkout (the folder above
    the ``nemo_rl`` package): ``examples/nemo_gym/run_grpo_nemo_gym.py`` with NeMo Gym on, else
    ``examples/run_grpo.py``.

    Raises:
        PrecheckError: nemo_rl is not installed from a checkout that has the script.
    """
    import importlib.util

    spec = importlib.util.find_spec("nemo_rl")
    if spec is None or not spec.origin:
        raise PrecheckError([_not_available("nemo_rl")])
    root = Path(spec.origin).resolve().parent.parent
    script = root / entry_relpath(cfg)
    if not script.is_file():
        raise PrecheckError([(f"{script}: NeMo RL's GRPO entry is missing from the installed checkout ({root}); "
                              "the nemo-rl image must hold the NeMo RL source tree, as NVIDIA's Dockerfile builds it")])
    return script, root


def launch(cfg: dict, stage: str) -> int:
    """Checks, v4 views, translation, then NeMo RL's entry script as a child process; its exit code."""
    problems = precheck(cfg)
    if problems:
        return prestart.refuse(stage, problems)
    run_dir = Path(os.environ.get("NEMOTRON_RUN_DIR") or _get(cfg, "checkpointing.checkpoint_dir") or ".")
    from nemotron.runtime.common.convert import ConfigFormError

    try:
        views = v4_views(cfg, run_dir / "v4-checkpoints")
    except ConfigFormError as exc:
        print(f"{stage}: a checkpoint's config.json cannot be read as NemotronH: {exc}", file=sys.stderr)
        return 1
    try:
        rows = gym_data(cfg, run_dir / "gym-data")
    except ConfigError as exc:
        print(f"{stage}: {exc}", file=sys.stderr)
        return 1
    path = run_dir / "nemo_rl_config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(job_yaml(translate(cfg, views, rows)), encoding="utf-8")
    script, root = entry_script(cfg)
    print(f"{stage}: NeMo RL {script.relative_to(root)} --config {path}", flush=True)
    code, stopped = run_entry([sys.executable, str(script), "--config", str(path)], str(root))
    if code != 0:
        return code
    return finish(cfg, stage, root, stopped=stopped)


# ------------------------------------------------------------------------------------ how NeMo RL stopped
#: What NeMo RL's GRPO trainers print right before they return at ``checkpointing.checkpoint_must_save_by``, after
#: saving the step (nemo_rl/algorithms/grpo.py ``grpo_train`` and ``async_grpo_train``, grpo_sync.py
#: ``grpo_train_sync`` @ 7ea279a; tests/contract/test_nemo_rl_stops.py reads it there).
TIMEOUT_LINE = "Timeout has been reached, stopping training early"
#: What they print at a ``grpo.stop_at_validation_metric`` stop (``_validation_early_stop_message``: "Validation
#: {metric} reached the early-stop threshold ({value:.4f} >= {threshold}); stopping training", "Initial validation"
#: at the validation before the first step); the step is saved like a last step and the trainer returns before its
#: timeout branch, so a run prints at most one of the two.
EARLY_STOP = re.compile(r"(?:Initial validation|Validation) (?P<metric>\S+) reached the early-stop threshold "
                        r"\((?P<value>[^)]*)\); stopping training$")
#: :func:`stop_reason`'s answers.
DEADLINE, VALIDATION_STOP = "deadline", "validation-metric"


def stop_reason(line: str) -> str | None:
    """:data:`DEADLINE` for NeMo RL's timeout line (:data:`TIMEOUT_LINE`), :data:`VALIDATION_STOP` for its
    validation-metric early stop (:data:`EARLY_STOP`), None for any other line of its output (trailing white space
    and a prefix, such as a logger's, are allowed)."""
    text = line.rstrip()
    if text.endswith(TIMEOUT_LINE):
        return DEADLINE
    return VALIDATION_STOP if EARLY_STOP.search(text) else None


#: What Megatron-Core logs when the loop of its dynamic inference engine dies (``trace_async_exceptions`` in
#: megatron/core/utils.py around ``DynamicInferenceEngine.run_engine_with_coordinator`` / ``run_engine``: "Exception
#: in async function {name}: {error}"; tests/contract/test_nemo_rl_stops.py reads it there). NeMo RL's Megatron
#: generation waits on that engine's requests with no timeout, so after this line the run hangs until the job's
#: time limit: on one H100 (2026-12-06) a missing FlashAttention killed the engine at step 1 and NeMo RL waited on.
ENGINE_DEATH = re.compile(r"Exception in async function (?P<fn>run_engine_with_coordinator|run_engine): "
                          r"(?P<error>.*?)\s*$")
#: Seconds :func:`run_entry` gives NeMo RL to end by itself after :data:`ENGINE_DEATH` before it stops the entry
#: (ours: long enough for a worker's own clean-up and Ray's error to reach the driver, short against a job's hours).
ENGINE_DEATH_GRACE_S = 120.0
#: The entry's exit code after such a stop (a failure: requeueing would die the same way).
ENGINE_DEATH_EXIT = 1


def engine_death(line: str) -> str | None:
    """The error of a :data:`ENGINE_DEATH` line (any prefix, such as Ray's ``(MegatronPolicyWorker pid=...)`` or a
    logger's, allowed), None for any other line."""
    m = ENGINE_DEATH.search(line)
    return m.group("error") if m else None


def run_entry(cmd: list[str], cwd: str, out=None, err=None,
              grace: float = ENGINE_DEATH_GRACE_S) -> tuple[int, str | None]:
    """Run NeMo RL's entry ``cmd`` in ``cwd``: its standard output and standard error are copied byte for byte to
    ``out`` and ``err`` (binary streams; default this process's) as they come. Each line of standard output is read
    with :func:`stop_reason`; each line of both with :func:`engine_death`: when Megatron-Core's inference engine has
    died and the entry is still running ``grace`` seconds later, the entry is stopped (SIGTERM, SIGKILL 30 s later)
    and one line says why. Returns ``(exit code, the last stop reason seen or None)``; after such a stop
    ``(ENGINE_DEATH_EXIT, None)``."""
    import threading

    out = out if out is not None else sys.stdout.buffer
    err = err if err is not None else sys.stderr.buffer
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the lines come as NeMo RL prints them, not at exit
    reason = None
    death: dict = {}
    lock = threading.Lock()
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:

        def stop() -> None:
            if proc.poll() is None:
                death["stopped"] = True
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()

        def scan(raw: bytes) -> None:
            error = engine_death(raw.decode("utf-8", errors="replace"))
            with lock:
                if error is not None and "error" not in death:
                    death["error"] = error
                    death["timer"] = threading.Timer(grace, stop)
                    death["timer"].daemon = True
                    death["timer"].start()

        def pump_err() -> None:
            for raw in proc.stderr:
                err.write(raw)
                err.flush()
                scan(raw)

        reader = threading.Thread(target=pump_err, daemon=True)
        reader.start()
        for raw in proc.stdout:
            out.write(raw)
            out.flush()
            reason = stop_reason(raw.decode("utf-8", errors="replace")) or reason
            scan(raw)
        code = proc.wait()
        reader.join(timeout=10)
        with lock:
            if "timer" in death:
                death["timer"].cancel()
    if death.get("stopped"):
        print(f"NeMo RL stopped by nemotron: Megatron-Core's inference engine died ({death['error']}) and the run was "
              f"still waiting on it {grace:.0f} s later (it would wait until the job's time limit); fix the cause in "
              "the log above and submit again (saved steps are kept)", flush=True)
        return ENGINE_DEATH_EXIT, None
    return code, reason


# ------------------------------------------------------------------------------------ the output checkpoint
#: Under ``checkpointing.checkpoint_dir``: the Hugging Face form of each converted step (``hf/step_N``) and
#: ``hf/latest``, a link to the newest one (the planned artifact path, ``nemotron.config.registry``).
HF_FOLDER, HF_LATEST = "hf", "latest"
_STEP = re.compile(r"step_(\d+)")
#: Tokenizer files NeMo RL saves with each step (``step_N/policy/tokenizer``; its converters do not write them).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                    "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "added_tokens.json")


def latest_step(checkpoint_dir: str | Path) -> tuple[int, Path] | None:
    """``(N, path)`` of the newest finished checkpoint NeMo RL's ``CheckpointManager`` wrote under
    ``checkpoint_dir`` (folders named exactly ``step_<N>``, the highest N; the ``tmp_step_N`` of a save in
    progress does not count), as ``CheckpointManager.get_latest_checkpoint_path`` picks it
    (nemo_rl/utils/checkpoint.py); None when there is none."""
    folder = Path(checkpoint_dir)
    steps = [(int(m.group(1)), p) for p in (folder.iterdir() if folder.is_dir() else ())
             if p.is_dir() and (m := _STEP.fullmatch(p.name))]
    return max(steps) if steps else None


def hf_output(checkpoint_dir: str | Path, step: int | None = None) -> Path:
    """Where the Hugging Face form of step ``step`` goes (``<checkpoint_dir>/hf/step_<N>``), or with ``step``
    None the link to the newest one (``<checkpoint_dir>/hf/latest``: the path a ``pipe`` wires the next stage
    to before the run)."""
    base = Path(checkpoint_dir) / HF_FOLDER
    return base / (HF_LATEST if step is None else f"step_{step}")


def converter_command(cfg: dict, step_dir: Path, out: Path, root: Path) -> list[str]:
    """NeMo RL's own converter of a step's policy weights to a Hugging Face folder (examples/converters of its
    checkout), as its usage line gives it: ``convert_megatron_to_hf.py --config step_N/config.yaml
    --megatron-ckpt-path step_N/policy/weights/iter_XXXXXXX --hf-ckpt-path OUT`` for the Megatron backend
    (``policy.megatron_cfg.enabled``; the iteration folder Megatron-Bridge wrote, the highest ``iter_*``), else
    ``convert_dcp_to_hf.py --config ... --dcp-ckpt-path step_N/policy/weights --hf-ckpt-path OUT``. The
    converter reads the model's architecture from ``policy.model_name`` of the step's ``config.yaml`` (what
    ``CheckpointManager`` saved: the run's own config)."""
    weights = step_dir / "policy" / "weights"
    config = step_dir / "config.yaml"
    if _get(cfg, "policy.megatron_cfg.enabled", False):
        iters = sorted(p.name for p in weights.glob("iter_*") if p.is_dir()) if weights.is_dir() else []
        megatron = weights / (iters[-1] if iters else "iter_0000000")
        return [sys.executable, str(root / "examples" / "converters" / "convert_megatron_to_hf.py"), "--config",
                str(config), "--megatron-ckpt-path", str(megatron), "--hf-ckpt-path", str(out)]
    return [sys.executable, str(root / "examples" / "converters" / "convert_dcp_to_hf.py"), "--config", str(config),
            "--dcp-ckpt-path", str(weights), "--hf-ckpt-path", str(out)]


def output_artifacts(cfg: dict) -> list[str]:
    """The artifact names the run records (``output_artifact``: ``rl-checkpoint``, ``teacher-<slot>``,
    ``mopd-checkpoint``)."""
    name = cfg.get("output_artifact")
    return [str(name)] if isinstance(name, str) and name else []


def deadline_stop(cfg: dict, stage: str, checkpoint_dir: str | Path, step: int, stopped: str | None = None) -> bool:
    """Whether NeMo RL's exit 0 after saving ``step`` is a stop at ``checkpointing.checkpoint_must_save_by`` with
    ``grpo.max_num_steps`` not reached (see :func:`finish`). True: the marker ``<checkpoint_dir>/hf/.deadline-step_N``
    is written, the requeue marker too, and one line says so. False when there is no deadline, the step reached
    ``max_num_steps``, NeMo RL said it stopped at its validation metric (``stopped`` :data:`VALIDATION_STOP`, from
    :func:`run_entry`: a finished run, one line says so), or the marker of this step is already there (a resumed run
    that added no step)."""
    deadline = _get(cfg, "checkpointing.checkpoint_must_save_by")
    max_steps = _get(cfg, "grpo.max_num_steps")
    if not deadline or not isinstance(max_steps, int) or step >= max_steps:
        return False
    if stopped == VALIDATION_STOP:
        print(f"{stage}: NeMo RL stopped at step {step} of grpo.max_num_steps={max_steps} because "
              f"grpo.stop_at_validation_metric={_get(cfg, 'grpo.stop_at_validation_metric')} reached "
              f"grpo.stop_at_validation_threshold={_get(cfg, 'grpo.stop_at_validation_threshold')}: step {step} is "
              "the result (not a checkpointing.checkpoint_must_save_by stop)", flush=True)
        return False
    marker = Path(checkpoint_dir) / HF_FOLDER / f".deadline-step_{step}"
    if marker.exists():
        print(f"{stage}: resumed at step {step} and NeMo RL saved no later step (the data ran out or a stop "
              f"condition held): step {step} of grpo.max_num_steps={max_steps} is the result", flush=True)
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{deadline}\n", encoding="utf-8")
    detail = (f"saved step {step} of grpo.max_num_steps={max_steps} at checkpointing.checkpoint_must_save_by="
              f"{deadline} and stopped")
    print(f"{stage}: {detail}; nothing recorded yet: the next job of this run resumes from step_{step}", flush=True)
    from nemotron.runtime.dispatch import mark_stopped

    mark_stopped(stage, detail)
    return True


def finish(cfg: dict, stage: str, root: Path, run=None, stopped: str | None = None) -> int:
    """After NeMo RL's entry exited 0: the newest step (:func:`latest_step`) in Hugging Face form, the artifact
    the later stages read (teachers, MOPD and quantize load Hugging Face folders with a ``config.json``, not
    NeMo RL's ``step_N``).

    1. ``<checkpoint_dir>/hf/step_N`` is made with NeMo RL's converter (:func:`converter_command`; ``run(cmd,
       cwd)`` runs it, default ``subprocess.call``) into a temporary folder, the tokenizer files NeMo RL saved
       with the step (``step_N/policy/tokenizer``) are copied in, and the folder is renamed into place; a step
       already converted (a ``config.json`` there: a resubmitted job) is kept.
    2. ``<checkpoint_dir>/hf/latest`` points at it (replaced atomically).
    3. ``outputs.json`` in the run folder (:func:`nemotron.config.artifacts.write_outputs`) records each artifact of
       :func:`output_artifacts` with ``path`` = ``hf/step_N``, ``step``, ``checkpoint_dir`` and ``source`` (the
       step folder).

    A **deadline stop** is not a finished stage: NeMo RL saves and exits 0 when ``checkpointing.checkpoint_must_save_by``
    is reached (nemo_rl/algorithms/grpo.py: "Timeout has been reached, stopping training early"). So with that key
    set and the newest step below ``grpo.max_num_steps``, nothing is converted or recorded: a marker
    ``hf/.deadline-step_N`` is left, the requeue marker is written (:func:`nemotron.runtime.dispatch.mark_stopped`)
    and the exit code is 75 (resumable: NeMo RL's ``CheckpointManager`` resumes from ``step_N``). A resumed run that
    ends at the same step again (no step after it: the data ran out) is recorded as finished. A stop at
    ``grpo.stop_at_validation_metric`` exits 0 below ``max_num_steps`` too, and leaves the same files; it is told
    apart by the line NeMo RL prints (``stopped``: :func:`stop_reason` of its output, read by :func:`run_entry`;
    None when not read) and recorded. Without a deadline a step below ``max_num_steps`` is recorded (those are NeMo
    RL's own ends).

    Returns the stage's exit code: 0; 75 at a deadline stop; 1 when checkpointing is off or no step was saved
    (nothing to record: the message says so), or the converter's non-zero exit code.
    """
    import shutil

    from nemotron.config import artifacts

    run = run or (lambda cmd, cwd: subprocess.call(cmd, cwd=cwd))
    ckdir = _get(cfg, "checkpointing.checkpoint_dir")
    if not _get(cfg, "checkpointing.enabled", True) or not ckdir:
        print(f"{stage}: checkpointing.enabled is false: no checkpoint to record as "
              f"{', '.join(output_artifacts(cfg)) or 'an artifact'}", file=sys.stderr)
        return 1
    found = latest_step(ckdir)
    if found is None:
        print(f"{stage}: NeMo RL finished without a step_N checkpoint in {ckdir}: nothing to record "
              "(grpo.max_num_steps below checkpointing.save_period?)", file=sys.stderr)
        return 1
    step, step_dir = found
    if deadline_stop(cfg, stage, ckdir, step, stopped):
        return EXIT_REQUEUE
    out = hf_output(ckdir, step)
    if not (out / "config.json").is_file():
        tmp = out.with_name(f".{out.name}.tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        cmd = converter_command(cfg, step_dir, tmp, root)
        print(f"{stage}: converting {step_dir} to Hugging Face form: {' '.join(cmd[1:])}", flush=True)
        code = run(cmd, str(root))
        if code != 0:
            print(f"{stage}: NeMo RL's converter exited {code}; {step_dir} is kept as NeMo RL wrote it", file=sys.stderr)
            return code
        if not (tmp / "config.json").is_file():
            print(f"{stage}: NeMo RL's converter wrote no config.json in {tmp}", file=sys.stderr)
            return 1
        tok = step_dir / "policy" / "tokenizer"
        for name in _TOKENIZER_FILES:
            if (tok / name).is_file() and not (tmp / name).exists():
                shutil.copy2(tok / name, tmp / name)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    latest = hf_output(ckdir)
    link = latest.with_name(f".{latest.name}.tmp")
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(out.name)
    os.replace(link, latest)
    fields = {"path": str(out), "step": step, "checkpoint_dir": str(ckdir), "source": str(step_dir)}
    artifacts.write_outputs({name: dict(fields) for name in output_artifacts(cfg)})
    print(f"{stage}: step {step} in Hugging Face form: {out}", flush=True)
    return 0


# ------------------------------------------------------------------------------------------------ eval
#: Our keys of the eval stage's ``eval`` section (NeMo RL's are metric, num_tests_per_prompt, seed, k_value, save_path).
_OUR_EVAL_KEYS = ("checkpoints", "output_dir", "gsm8k", "perplexity", "chat", "tokenizer")
#: The flat JSON lines the eval job writes for NeMo RL's ``LocalMathDataset`` (problem_key / solution_key).
EVAL_PROBLEM_KEY, EVAL_SOLUTION_KEY = "problem", "expected_answer"


def eval_config(cfg: dict, data_file: str | None = None) -> dict:
    """NeMo RL's evaluator config (``nemo_rl/evals/eval.py`` ``MasterConfig`` @ 7ea279a) from the eval stage's config:
    ``eval`` without our keys, ``generation``, ``tokenizer``, ``data`` pointed at ``data_file`` (the flat JSON lines
    :func:`eval_data` writes; default: ``<eval.output_dir>/gsm8k_eval.jsonl``) through ``LocalMathDataset`` (json,
    ``problem`` / ``expected_answer``, split ``train``: the one split a JSON file has), ``env``, ``cluster``.

    Raises:
        ConfigError: a missing section, or a generation backend other than vLLM (NeMo RL's evaluator has only it).
    """
    missing = [k for k in ("eval", "generation", "tokenizer", "data", "env", "cluster") if not isinstance(cfg.get(k), dict)]
    if missing:
        raise ConfigError(f"eval stage: section(s) {', '.join(missing)} missing (NeMo RL's evaluator needs them)",
                          "see stages/ultra3/eval/default.yaml")
    backend = _get(cfg, "generation.backend")
    if backend != "vllm":
        raise ConfigError(f"generation.backend={backend!r}: NeMo RL's evaluator generates with vLLM only",
                          "set generation.backend=vllm (or -c local for the loop on this machine)")
    if not _get(cfg, "eval.gsm8k.data"):
        raise ConfigError("eval.gsm8k.data is not set: the held-out validation.jsonl of `data prep rl`")
    out = copy.deepcopy({k: cfg[k] for k in ("eval", "generation", "tokenizer", "data", "env", "cluster")})
    for k in _OUR_EVAL_KEYS:
        out["eval"].pop(k, None)
    default = f"{_get(cfg, 'eval.output_dir') or '.'}/gsm8k_eval.jsonl"
    out["data"].update(dataset_name=data_file or default, problem_key=EVAL_PROBLEM_KEY,
                       solution_key=EVAL_SOLUTION_KEY, file_format="json", split="train")
    return out


def eval_data(rl_jsonl: Path, out: Path) -> int:
    """Write ``out``: one ``{"problem", "expected_answer"}`` line per line of our RL JSONL (``messages[0]`` /
    ``messages[1]`` content); returns the count. Raises ``ValueError`` naming the file and line of a bad line."""
    n = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(rl_jsonl, encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        for i, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                msgs = json.loads(line)["messages"]
                rec = {EVAL_PROBLEM_KEY: msgs[0]["content"], EVAL_SOLUTION_KEY: msgs[1]["content"]}
            except (ValueError, KeyError, IndexError, TypeError):
                raise ValueError(f"{rl_jsonl}:{i}: not an RL line (messages[0..1].content)") from None
            dst.write(json.dumps(rec) + "\n")
            n += 1
    return n


def eval_main(cfg: dict) -> int:
    """``backend: nemo-rl`` of ``ultra3 eval``: NeMo RL importable (the container), the data converted
    (:func:`eval_data`), :func:`eval_config` written as ``nemo_rl_eval.yaml``, NeMo RL's ``examples/run_eval.py`` run
    on it; its exit code. (Not run on a GPU in this version: docs/eval.md.)"""
    import importlib.util

    stage = "ultra3 eval"
    if importlib.util.find_spec("nemo_rl") is None:
        print(f"{stage}: NeMo RL is not importable here: this backend runs inside the nemo-rl container", file=sys.stderr)
        return 1
    out_dir = Path(str(_get(cfg, "eval.output_dir") or "."))
    data = out_dir / "gsm8k_eval.jsonl"
    try:
        n = eval_data(Path(str(_get(cfg, "eval.gsm8k.data"))), data)
        config = eval_config(cfg, str(data))
    except (OSError, ValueError) as exc:
        print(f"{stage}: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"{stage}: {exc.message}", file=sys.stderr)
        return 2
    path = out_dir / "nemo_rl_eval.yaml"
    import yaml

    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    import nemo_rl

    root = Path(nemo_rl.__file__).resolve().parent.parent
    print(f"{stage}: NeMo RL examples/run_eval.py --config {path} ({n} problems)", flush=True)
    code = subprocess.call([sys.executable, str(root / "examples" / "run_eval.py"), "--config", str(path)], cwd=str(root))
    if code == 0:
        from nemotron.config import artifacts

        artifacts.write_outputs({"eval-results": {"path": str(out_dir)}})
    return code


def rlvr_main(cfg: dict) -> int:
    """``backend: nemo-rl`` of ``ultra3 rlvr`` (GRPO; teacher runs too)."""
    return launch(cfg, "ultra3 rlvr")


def mopd_main(cfg: dict) -> int:
    """``backend: nemo-rl`` of ``ultra3 mopd`` (GRPO with on-policy distillation from the teacher panel)."""
    return launch(cfg, "ultra3 mopd")


__all__ = [
    "BASE_KEY",
    "DEFAULT_TEACHER_ALIAS",
    "PrecheckError",
    "converter_command",
    "deadline_stop",
    "engine_death",
    "run_entry",
    "stop_reason",
    "entry_relpath",
    "finish",
    "flash_attention_problem",
    "generation_modules",
    "gym_agent",
    "gym_data",
    "gym_rows",
    "hf_output",
    "job_yaml",
    "latest_step",
    "recipe_drift",
    "checkpoint_paths",
    "enabled_environments",
    "entry_script",
    "eval_config",
    "eval_data",
    "eval_main",
    "launch",
    "megatron_generation_problems",
    "mopd_main",
    "precheck",
    "rlvr_main",
    "teacher_map",
    "translate",
    "v4_views",
]


#: The entry scripts of NeMo RL's checkout our runtime starts: without and with NeMo Gym
#: (:func:`nemotron.runtime.rl.nemo_rl.entry_relpath`).
NATIVE_ENTRY, GYM_ENTRY = "examples/run_grpo.py", "examples/nemo_gym/run_grpo_nemo_gym.py"
