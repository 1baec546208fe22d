"""``ultra3 mopd-warmup``: the settings of a run and its cluster job (stdlib only at import time).

MOPD warmup (Nemotron 3 Ultra technical report §3.3): a one-time light SFT of the RLVR student on responses the
MOPD teachers generate for the RL prompts, so that the student's rollouts start near the teachers' distributions
before on-policy distillation. Two steps, on either backend:

1. **generate**: each prompt of ``warmup.prompts_path`` (the RL ``train.jsonl``) goes to the teacher the MOPD panel
   routes its task to (``_teachers`` + ``teacher_routing``, turned into NeMo RL's agent -> checkpoint map by
   :func:`nemotron.runtime.rl.nemo_rl.teacher_map`, the MOPD runtime's own function), which writes
   ``warmup.responses_per_prompt`` responses; the pairs are written as ``<warmup.data_dir>/train.jsonl`` in NeMo RL's
   ``ResponseDataset`` form (``{"input": prompt, "output": response, "task": ..., "teacher": alias}``).
2. **SFT** the student (``policy.model_name``, Hugging Face form) on those pairs, loss on the response tokens only.

``backend: nemo-rl`` (:func:`cluster_main`): step 1 with vLLM's offline ``LLM`` per teacher checkpoint (the nemo-rl
image has vLLM), step 2 with NeMo RL's own SFT entry ``examples/run_sft.py`` on :func:`sft_config` (the job config
inherits NeMo RL's ``examples/configs/sft.yaml`` of the installed checkout through NeMo RL's ``defaults:``; ours
sets the rest); NeMo RL's converter then writes ``hf/step_N`` as after RLVR/MOPD (:func:`nemotron.runtime.rl.nemo_rl.finish`).
``backend: local`` (:func:`nemotron.runtime.rl.warmup_local.local_main`): both steps on this machine with transformers, plus the
student's per-token reverse KL to its routed teacher on held-out prompts before and after (the point of warmup).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.runtime.common.settings import SettingsError, _float, _int, config_path, get

#: NeMo RL's SFT config the cluster job inherits (``defaults:``), relative to its checkout: the file
#: ``examples/run_sft.py`` loads when given none (NVIDIA-NeMo/RL main 7ea279a).
SFT_DEFAULTS = "examples/configs/sft.yaml"
#: NeMo RL's SFT entry (relative to its checkout).
SFT_ENTRY = "examples/run_sft.py"
#: Our keys of the stage config, dropped before NeMo RL sees it (``warmup`` is the generation pass).
OWN_KEYS = ("backend", "model", "run", "_teachers", "teacher_routing", "output_artifact", "warmup")
#: NeMo RL's ``SFTConfig`` fields and their types (nemo_rl/algorithms/sft.py @ 7ea279a: pydantic, so a value of
#: another type is refused by ``MasterConfig(**config)``; ``bool`` is not taken for an ``int`` here as pydantic
#: would take it, on purpose: ``max_num_steps: true`` is a mistake).
SFT_FIELDS: dict[str, type] = {"max_num_steps": int, "max_num_epochs": int, "val_period": int, "val_batches": int,
                               "val_global_batch_size": int, "val_micro_batch_size": int, "val_at_start": bool,
                               "val_at_end": bool, "seed": int, "only_unmask_final": bool}
#: NeMo RL's ``MasterConfig`` sections of the SFT entry (all required).
SFT_SECTIONS = ("policy", "data", "sft", "logger", "cluster", "checkpointing")


@dataclass(frozen=True)
class WarmupSettings:
    """One ``mopd-warmup`` run. Counts are prompts/responses/tokens/steps; paths absolute."""

    backend: str
    model_name: str
    student: Path
    tokenizer_path: Path | None
    prompts_path: Path
    held_out_path: Path | None
    data_dir: Path
    checkpoint_dir: Path
    num_prompts: int
    responses_per_prompt: int
    max_new_tokens: int
    temperature: float
    top_p: float
    kl_prompts: int
    kl_new_tokens: int
    max_steps: int
    epochs: int
    global_batch_size: int
    micro_batch_size: int
    max_total_length: int
    lr: float
    weight_decay: float
    seed: int
    cpus: int | None
    output_artifact: str
    teachers: dict[str, Path] = field(default_factory=dict)   # alias (agent) -> checkpoint
    default_teacher: str = ""                                  # the alias of the fallback (general) teacher
    raw: dict = field(default_factory=dict, repr=False)


def _path(cfg: dict, key: str, unresolved_ok: bool) -> Path | None:
    value = get(cfg, key)
    if unresolved_ok and value not in (None, "") and "${" in str(value):
        return Path(str(value))
    return config_path(value, key)


def sft_problems(cfg: dict) -> list[tuple[str, Any, str]]:
    """``[(key, value, why)]``: what NeMo RL's SFT ``MasterConfig`` (pydantic) refuses in the job config that our
    keys decide: a missing section of :data:`SFT_SECTIONS`, an ``sft.*`` field of :data:`SFT_FIELDS` of another
    type (the others come from NeMo RL's ``sft.yaml``)."""
    out = []
    for sec in SFT_SECTIONS:
        if sec != "sft" and not isinstance(cfg.get(sec), dict):
            out.append((sec, cfg.get(sec), "a section of NeMo RL's SFT MasterConfig (nemo_rl/algorithms/sft.py)"))
    sft = cfg.get("sft")
    if not isinstance(sft, dict):
        return out + [("sft", sft, "NeMo RL's SFTConfig section (max_num_steps, seed, ...)")]
    for key, typ in SFT_FIELDS.items():
        if key not in sft:
            continue
        v = sft[key]
        ok = isinstance(v, bool) if typ is bool else (isinstance(v, int) and not isinstance(v, bool))
        if not ok:
            out.append((f"sft.{key}", v, f"NeMo RL's SFTConfig.{key} is {'true/false' if typ is bool else 'a whole number'}"))
    return out


def read(cfg: dict, *, unresolved_ok: bool = False) -> WarmupSettings:
    """Read and check the settings of a ``mopd-warmup`` run (both backends read the same keys).

    Raises:
        SettingsError: a missing or impossible value (each message names the key and the valid values).
    """
    from nemotron.runtime.rl.panel import panel

    backend = str(get(cfg, "backend", "nemo-rl"))
    if backend not in ("nemo-rl", "local"):
        raise SettingsError(f"backend={backend!r}: mopd-warmup runs on 'nemo-rl' (the cluster) or 'local'")
    for key, value, why in sft_problems(cfg):
        raise SettingsError(f"{key}={value!r}: {why}")
    student = _path(cfg, "policy.model_name", unresolved_ok)
    if student is None:
        raise SettingsError("policy.model_name is not set: the student (the RLVR result, Hugging Face form; `pipe` "
                            "wires it)")
    prompts = _path(cfg, "warmup.prompts_path", unresolved_ok)
    if prompts is None:
        raise SettingsError("warmup.prompts_path is not set: train.jsonl of `data prep rl` (the prompts the teachers "
                            "answer)")
    ckdir = _path(cfg, "checkpointing.checkpoint_dir", unresolved_ok)
    if ckdir is None:
        raise SettingsError("checkpointing.checkpoint_dir is not set: the run needs a stable output folder")
    data_dir = _path(cfg, "warmup.data_dir", unresolved_ok) or ckdir / "warmup-data"
    gbs = _int(cfg, "policy.train_global_batch_size", minimum=1)
    mbs = _int(cfg, "policy.train_micro_batch_size", minimum=1)
    if gbs % mbs:
        raise SettingsError(f"policy.train_global_batch_size={gbs}: must be a multiple of "
                            f"policy.train_micro_batch_size={mbs}")
    max_new = _int(cfg, "warmup.max_new_tokens", minimum=1)
    total = _int(cfg, "policy.max_total_sequence_length", minimum=2)
    if max_new >= total:
        raise SettingsError(f"warmup.max_new_tokens={max_new}: must be below policy.max_total_sequence_length={total} "
                            "(the prompt needs room)")
    temperature = _float(cfg, "warmup.temperature", 1.0)
    if temperature < 0:
        raise SettingsError(f"warmup.temperature={temperature}: must be >= 0 (0: greedy)")
    teachers, default = panel(cfg, unresolved_ok)
    cpus = get(cfg, "run.env.cpus")
    tok = get(cfg, "policy.tokenizer.name")
    return WarmupSettings(
        backend=backend, model_name=str(get(cfg, "model.name", "small")), student=student,
        tokenizer_path=_path(cfg, "policy.tokenizer.name", unresolved_ok) if tok else None,
        prompts_path=prompts, held_out_path=_path(cfg, "warmup.held_out_path", unresolved_ok),
        data_dir=data_dir, checkpoint_dir=ckdir,
        num_prompts=_int(cfg, "warmup.num_prompts", minimum=1),
        responses_per_prompt=_int(cfg, "warmup.responses_per_prompt", 1, minimum=1),
        max_new_tokens=max_new, temperature=temperature, top_p=_float(cfg, "warmup.top_p", 1.0),
        kl_prompts=_int(cfg, "warmup.kl_prompts", 0, minimum=0),
        kl_new_tokens=_int(cfg, "warmup.kl_new_tokens", max_new, minimum=1),
        max_steps=_int(cfg, "sft.max_num_steps", minimum=1), epochs=_int(cfg, "sft.max_num_epochs", 1, minimum=1),
        global_batch_size=gbs, micro_batch_size=mbs, max_total_length=total,
        lr=_float(cfg, "policy.megatron_cfg.optimizer.lr", 1e-5),
        weight_decay=_float(cfg, "policy.megatron_cfg.optimizer.weight_decay", 0.0),
        seed=_int(cfg, "sft.seed", 42),
        cpus=None if cpus is None else _int(cfg, "run.env.cpus", minimum=1),
        output_artifact=str(get(cfg, "output_artifact", "mopd-warmup-checkpoint")),
        teachers=teachers, default_teacher=default, raw=cfg,
    )


# ------------------------------------------------------------------------------------ the cluster job
def sft_config(cfg: dict, data_file: str, checkout: str | Path) -> dict:
    """The job config NeMo RL's ``examples/run_sft.py`` loads (a new dict; pure): ``defaults:`` NeMo RL's
    ``sft.yaml`` of ``checkout`` (:data:`SFT_DEFAULTS`, composed by NeMo RL's ``load_config``), our config without
    our keys (:data:`OWN_KEYS`) over it, and ``data.train`` the generated pairs (``ResponseDataset`` over
    ``data_file``, keys ``input`` / ``output``; no validation split: ``sft.val_period`` 0)."""
    out: dict[str, Any] = {"defaults": str(Path(checkout) / SFT_DEFAULTS)}
    out.update({k: copy.deepcopy(v) for k, v in cfg.items() if k not in OWN_KEYS})
    data = out.setdefault("data", {})
    data["train"] = {"dataset_name": "ResponseDataset", "data_path": str(data_file), "input_key": "input",
                     "output_key": "output"}
    data["validation"] = None
    return out


def read_problems(path: Path, limit: int) -> list[str]:
    """The first ``limit`` prompts (``messages[0].content``) of an RL JSONL, for the cluster job (the nemo-rl image
    has none of the local runtime's readers' dependencies).

    Raises:
        ValueError: ``path:line: not an RL line`` for a line without ``messages[0].content``; OSError unreadable.
    """
    import json

    out: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                out.append(str(json.loads(line)["messages"][0]["content"]))
            except (ValueError, KeyError, IndexError, TypeError):
                raise ValueError(f"{path}:{i}: not an RL line (messages[0].content)") from None
    return out


def read_tasks(path: Path) -> list[str | None]:
    """The task of each line of an RL JSONL (``task``, else ``task_name``, else None), in order: what the MOPD panel
    routes by. Reading errors are :func:`nemotron.runtime.rl.rl_data.read_rows`'s to report (called first)."""
    import json

    out: list[str | None] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                obj = json.loads(line)
                out.append(obj.get("task") or obj.get("task_name"))
    return out


def generation_groups(s: WarmupSettings, tasks: list[str | None]) -> dict[str, list[int]]:
    """``{teacher checkpoint: [prompt index, ...]}``: each prompt under the checkpoint of the teacher its task is
    routed to (:func:`nemotron.runtime.rl.rl_settings.route`); slots that share a checkpoint share one group (one
    engine), as NeMo RL deduplicates shared teacher checkpoints."""
    from nemotron.runtime.rl.panel import route

    out: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        out.setdefault(str(s.teachers[route(task, s.teachers, s.default_teacher)]), []).append(i)
    return out


def cluster_main(cfg: dict) -> int:
    """``backend: nemo-rl``: generate with vLLM per teacher checkpoint, then NeMo RL's SFT entry, then the
    Hugging Face export (:func:`nemotron.runtime.rl.nemo_rl.finish`). Not run on a GPU in this version
    (docs/rl.md, MOPD warmup)."""
    import importlib.util
    import json
    import subprocess
    import sys

    import yaml

    title = "ultra3 mopd-warmup"
    try:
        s = read(cfg)
    except SettingsError as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 1
    for mod in ("nemo_rl", "vllm"):
        if importlib.util.find_spec(mod) is None:
            print(f"{title}: {mod} is not importable here: this backend runs inside the nemo-rl container",
                  file=sys.stderr)
            return 1
    from nemotron.runtime.rl.nemo_rl import finish

    try:
        problems = read_problems(s.prompts_path, s.num_prompts)
    except (OSError, ValueError) as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 1
    tasks = read_tasks(s.prompts_path)[:len(problems)]
    s.data_dir.mkdir(parents=True, exist_ok=True)
    pairs = s.data_dir / "train.jsonl"
    tp = int(get(cfg, "warmup.generation.tensor_parallel_size", 8))
    from vllm import LLM, SamplingParams  # the nemo-rl image's vLLM

    params = SamplingParams(n=s.responses_per_prompt, temperature=s.temperature, top_p=s.top_p,
                            max_tokens=s.max_new_tokens, seed=s.seed)
    with open(pairs, "w", encoding="utf-8") as fh:
        for ckpt, idx in generation_groups(s, tasks).items():
            llm = LLM(model=ckpt, tensor_parallel_size=tp, trust_remote_code=True,
                      gpu_memory_utilization=float(get(cfg, "warmup.generation.gpu_memory_utilization", 0.85)))
            prompts = [[{"role": "user", "content": problems[i]}] for i in idx]
            for i, res in zip(idx, llm.chat(prompts, params)):
                for o in res.outputs:
                    fh.write(json.dumps({"input": problems[i], "output": o.text, "task": tasks[i],
                                         "teacher": ckpt}) + "\n")
            del llm
    import nemo_rl

    root = Path(nemo_rl.__file__).resolve().parent.parent
    job = s.checkpoint_dir / "nemo_rl_sft.yaml"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(yaml.safe_dump(sft_config(cfg, str(pairs), root), sort_keys=False), encoding="utf-8")
    print(f"{title}: NeMo RL {SFT_ENTRY} --config {job}", flush=True)
    code = subprocess.call([sys.executable, str(root / SFT_ENTRY), "--config", str(job)], cwd=str(root))
    return code if code != 0 else finish(cfg, title, root)


__all__ = ["OWN_KEYS", "SFT_DEFAULTS", "SFT_ENTRY", "SFT_FIELDS", "SFT_SECTIONS", "WarmupSettings", "cluster_main",
           "generation_groups", "read", "read_problems", "read_tasks", "sft_config", "sft_problems"]
