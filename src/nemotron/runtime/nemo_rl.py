"""The cluster runtime of ``ultra3 rlvr`` and ``ultra3 mopd``: our compiled config → NeMo RL's GRPO entry.

What the entry script (``stages/ultra3/{rlvr,mopd}/run.py``, through :mod:`nemotron.entry`) calls inside
the NeMo RL container, on the Ray head of the job's Ray cluster:

1. :func:`precheck` — before anything heavy, one line per problem: NeMo RL and vLLM importable, every
   checkpoint path (policy, tokenizer, each teacher) present, the GPUs visible on this node equal to
   ``cluster.gpus_per_node``. Any problem: the lines are printed and the stage exits 1.
2. :func:`v4_views` — a policy or teacher checkpoint whose ``config.json`` is in the transformers-v5
   NemotronH form (``layers_block_type``) gets a v4 view (``hybrid_override_pattern``, what NeMo RL's
   Megatron-Bridge import and vLLM read): a folder holding the rewritten ``config.json``
   (:func:`nemotron.runtime.convert.v5_to_v4`) and links to the checkpoint's other files (weights are
   not copied: 1.1 TB for Ultra).
3. :func:`translate` — pure: drop our own keys (:data:`nemotron.keys.NEMO_RL_OWN_KEYS`), turn the teacher
   panel and routing table into ``on_policy_distillation.teacher_model_by_agent_name`` +
   ``default_teacher_alias``, fold the enabled NeMo Gym ``environments`` into ``env.nemo_gym``, and point
   checkpoint paths at their v4 views.
4. :func:`launch` — write the translated config next to the run and run NeMo RL's own GRPO entry script
   of the installed checkout (``examples/run_grpo.py``; ``examples/nemo_gym/run_grpo_nemo_gym.py`` when
   NeMo Gym is on — the script NVIDIA's Ultra launcher runs for every Ultra RL stage, MOPD included:
   on-policy distillation is part of NeMo RL's GRPO loop, ``nemo_rl/algorithms/grpo.py`` + ``opd.py``)
   with ``--config``; its exit code is the stage's.

Steps 1-3 are tested here (tests/test_rl.py). Step 4 needs NeMo RL, vLLM and GPUs, which this project's
test machines do not have: it has not been run by this project.

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

from nemotron.errors import ConfigError, NemotronError
from nemotron.runtime import prestart
from nemotron.runtime.settings import get as _get

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


# ------------------------------------------------------------------------------------ checkpoints
def checkpoint_paths(cfg: dict) -> dict[str, str]:
    """The checkpoint paths the run reads, by config key: ``policy.model_name``, ``policy.tokenizer.name``
    and, for MOPD, the resolved panel's ``_teachers.<slot>`` (each slot once, unset slots fall back to
    ``general``). Values as written (local paths or Hugging Face repo ids)."""
    from nemotron.validation.rules import resolve_teachers

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
def precheck(cfg: dict, importable=None, gpus: int | None = None) -> list[str]:
    """Every reason the cluster run cannot start here, one line each (empty: ready).

    ``importable(module) -> bool`` and ``gpus`` (GPUs visible on this node) default to the real ones;
    tests pass their own. Checks: ``nemo_rl`` and ``vllm`` importable (the NeMo RL container,
    ``stages/images.toml`` ``nemo-rl``); each local checkpoint path of :func:`checkpoint_paths` exists and
    holds a ``config.json``; the data files (``data.train/validation.data_path``) exist; ``gpus`` equals ``cluster.gpus_per_node`` (NeMo RL places
    ``cluster.num_nodes`` x that many GPUs with Ray placement groups; a node that shows fewer cannot
    hold its bundles).
    """
    if importable is None:
        from nemotron.entry import _importable as importable
    problems: list[str] = []
    image = _image()
    for module in ("nemo_rl", "vllm"):
        if not importable(module):
            problems.append(_not_available(module, image))
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
    # Ray, not torchrun: no WORLD_SIZE to compare, only what this node shows
    env = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in os.environ}
    problems += prestart.gpu_problems(_get(cfg, "cluster.num_nodes"), _get(cfg, "cluster.gpus_per_node"), env, gpus,
                                      "cluster.num_nodes", "cluster.gpus_per_node")
    return problems


def _not_available(module: str, image: str | None = None) -> str:
    return (f"NeMo RL not available: {module} is not importable here; this stage runs inside the NeMo RL "
            f"container (image {image or _image()})")


def _image() -> str:
    try:
        from nemotron.plan import image_table

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
        nemotron.runtime.convert.ConfigFormError: a config.json that is neither form.
    """
    from nemotron.runtime.convert import config_form, v5_to_v4

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
    from nemotron.validation.rules import resolve_teachers

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


def translate(cfg: dict, checkpoint_views: dict[str, str] | None = None) -> dict:
    """NeMo RL's ``MasterConfig`` (a new dict) from our compiled rlvr/mopd config. Pure.

    * our keys (:data:`nemotron.keys.NEMO_RL_OWN_KEYS`: ``backend``, ``model``, ``run``, ``_teachers``,
      ``teacher_routing``, ``environments``, ``output_artifact``) are dropped;
    * MOPD: ``on_policy_distillation.teacher_model_by_agent_name`` / ``default_teacher_alias`` from
      :func:`teacher_map`;
    * each enabled NeMo Gym environment adds its ``gym_config`` to ``env.nemo_gym.config_paths`` (once,
      after the policy's model server :data:`GYM_POLICY_MODEL`) and merges its ``gym`` mapping (NeMo
      Gym's own keys, passed through) into ``env.nemo_gym``; a judge's ``endpoint`` becomes
      ``env.nemo_gym.<server>.base_url`` (else its ``model`` ``...<server>.model``), a sandbox's ``image``
      the top-level key ``image_key`` (``sif_dir``), as NVIDIA's ultra_launch.sh overrides them;
    * ``checkpoint_views`` (``{path: v4 view}``, from :func:`v4_views`) replaces those paths in
      ``policy.model_name``, ``policy.tokenizer.name`` and the teacher map.
    """
    from nemotron.keys import NEMO_RL_OWN_KEYS

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
    policy = out.get("policy") or {}
    if policy.get("model_name") in views:
        policy["model_name"] = views[policy["model_name"]]
    tok = policy.get("tokenizer") or {}
    if tok.get("name") in views:
        tok["name"] = views[tok["name"]]
    return out


# ------------------------------------------------------------------------------------ launch
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
    rel = "examples/nemo_gym/run_grpo_nemo_gym.py" if _get(cfg, "env.should_use_nemo_gym", False) else "examples/run_grpo.py"
    script = root / rel
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
    from nemotron.runtime.convert import ConfigFormError

    try:
        views = v4_views(cfg, run_dir / "v4-checkpoints")
    except ConfigFormError as exc:
        print(f"{stage}: a checkpoint's config.json cannot be read as NemotronH: {exc}", file=sys.stderr)
        return 1
    master = translate(cfg, views)
    import yaml

    path = run_dir / "nemo_rl_config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(master, sort_keys=False), encoding="utf-8")
    script, root = entry_script(cfg)
    print(f"{stage}: NeMo RL {script.relative_to(root)} --config {path}", flush=True)
    return subprocess.call([sys.executable, str(script), "--config", str(path)], cwd=str(root))


def rlvr_main(cfg: dict) -> int:
    """``backend: nemo-rl`` of ``ultra3 rlvr`` (GRPO; teacher runs too)."""
    return launch(cfg, "ultra3 rlvr")


def mopd_main(cfg: dict) -> int:
    """``backend: nemo-rl`` of ``ultra3 mopd`` (GRPO with on-policy distillation from the teacher panel)."""
    return launch(cfg, "ultra3 mopd")


__all__ = [
    "DEFAULT_TEACHER_ALIAS",
    "PrecheckError",
    "checkpoint_paths",
    "enabled_environments",
    "entry_script",
    "launch",
    "mopd_main",
    "precheck",
    "rlvr_main",
    "teacher_map",
    "translate",
    "v4_views",
]
