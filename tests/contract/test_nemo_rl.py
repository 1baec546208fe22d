"""NeMo RL's own code at the pinned commit (NVIDIA-NeMo/RL main 7ea279a) on what the rlvr and mopd stages hand it.

For every shipped rlvr/mopd config (every ``-c`` name but ``local``, which runs TRL on this machine, not NeMo RL) and every golden
NeMo RL config (tests/golden/nemo-rl/), the text the job writes as ``nemo_rl_config.yaml``
(:func:`nemotron.runtime.rl.nemo_rl.job_yaml` of :func:`~nemotron.runtime.rl.nemo_rl.translate`) goes through what NeMo
RL's GRPO entry does with a config before it needs GPUs, in its order, as NeMo RL's OWN statements: the
statements are taken from the entry script and from ``nemo_rl/algorithms/grpo.py`` of the archive by their
source (:data:`UPSTREAM_STEPS` below, ``ast``) and executed there, nothing is re-typed here:

1. the entry our runtime starts (``examples/run_grpo.py``, or ``examples/nemo_gym/run_grpo_nemo_gym.py`` with NeMo
   Gym on: :func:`nemotron.runtime.rl.nemo_rl.entry_relpath`) — ``load_config`` (``defaults:`` inheritance),
   ``OmegaConf.to_container(resolve=True)``, ``MasterConfig(**config)`` (pydantic: every required key, every type);
2. the entry's tokenizer block: ``get_tokenizer`` (a real 131,072-entry tokenizer: mistral-common's Tekken vocabulary
   converted by our data prep code, in a folder the config's ``policy.model_name`` points at), the unconditional
   ``config.policy["draft"]["enabled"]`` read of the non-Gym entry, ``configure_generation_config``; with Gym
   ``setup_nemo_gym_config``, ``assert should_use_nemo_gym(config)`` and the entry's ``max_val_samples`` refusal;
3. ``setup()``'s checks that run before it creates a Ray cluster: the generation-config normalisation and the
   validation-sampling asserts, ``CheckpointManager`` and the saved-state load, the batch checks, the loss
   function (``ClippedPGLossFn``) and its ``force_on_policy_ratio`` / KL checks, the reward-penalty refusal, the node
   reservation for OPD teachers (``create_teacher_configs_from_opd_config``) and the train/generation node asserts;
4. the trainer's start: the entry's async-GRPO refusals, ``async_grpo_train``'s opening asserts (the colocated one
   is given an object of the generation class ``setup()`` builds for the backend, made without running its
   ``__init__``: only its type is read), and the first training step's ``_resolve_message_level_advantage_penalties``;
5. without Gym: ``validate()``'s batch count and its metrics (its own statements, on two rewards per prompt);
6. then the checkpoint step of ``grpo_train`` and ``async_grpo_train`` with those metrics (the ``metric_name``
   rule; the training metrics are the fixed keys of the train step's ``metrics = {...}``, read from its source).
7. without Gym: the entry's data set-up, NeMo RL's own ``setup_response_data`` without its environments (Ray
   actors), on rows our data prep writes, and the first training and validation item through the task's processor
   (the chat template, the length check against ``data.max_input_seq_length``).

The same harness runs bad configs (:data:`CASES`): upstream refuses each one at the expected step, and our dry-run
(:func:`nemotron.validation.validate`) refuses it with the expected rule — and it accepts every shipped config,
which upstream accepts too. A deletion sweep removes each key of four job configs in turn: ``MasterConfig``
refuses ⇔ the dry-run's ``nemo-rl-required`` rule does (:func:`nemotron.validation.nemo_rl.schema`: the required
keys the key list names, :func:`nemotron.config.keys.missing_required_keys`, and ``RewardPenaltyConfig``'s validator).

The checkpoint chain: NeMo RL's real ``CheckpointManager`` writes ``step_N`` folders (and a ``tmp_step_N`` in
progress); :func:`nemotron.runtime.rl.nemo_rl.latest_step` picks the step ``get_latest_checkpoint_path`` picks; the
converter command our runtime runs is parsed by the converter's own ``parse_args`` and points at what the step
holds; the ``hf/`` folder we add beside the steps is invisible to the manager's history and pruning.

The recipes: the copy the key list carries of each Ultra recipe equals NeMo RL's ``load_config`` of the archive
(:func:`nemotron.runtime.rl.nemo_rl.recipe_drift`, the check the job makes inside its container), and a changed
checkout is reported.

Where the proof stops: no Ray cluster, no vLLM, no Megatron-Bridge model, no GPU — the data's environments (Ray
actors: the math verifier), everything of ``setup()`` from the Ray cluster on, the
training loop and the converter's run itself are not executed here. Only Transformer Engine is stood in for
(tests/contract/boot.py); vLLM is absent and is not imported on these paths.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from nemotron import validation
from nemotron.config import keys
from nemotron.config.compile import compile_config
from nemotron.config.paths import config_names
from nemotron.config.registry import get_stage
from nemotron.profiles.profile import from_table
from nemotron.runtime.rl import nemo_rl

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from gpu_rl import ONE_GPU_MOPD, ONE_GPU_RL, mtp_overrides  # noqa: E402  (the one-GPU RLVR / MOPD configs, checked here)

GOLDEN = REPO / "tests" / "golden" / "nemo-rl"
B200 = from_table("b200", {"executor": "slurm", "gpus_per_node": 8, "gpu_arch": "blackwell", "gpu_memory": 180.0})
H200 = from_table("h200", {"executor": "slurm", "gpus_per_node": 8, "gpu_arch": "hopper", "gpu_memory": 141.0})
#: One node of one H100 (80 GB): the machine of bench/gpu_rl.py.
H100X1 = from_table("h100x1", {"executor": "slurm", "gpus_per_node": 1, "gpu_arch": "hopper", "gpu_memory": 80.0})

SHIPPED = [(s, c) for s in ("rlvr", "mopd") for c in config_names(get_stage(s))
           if c != "local" and not c.startswith("local-")]  # local-cycle2: a later MOPD cycle on this machine

#: Bad configs: (id, stage, config, overrides, the upstream step that refuses, our rule that refuses).
CASES = [
    ("no-dynamic-batching", "rlvr", "default", ["~policy.dynamic_batching"], "entry: load_config + MasterConfig",
     "nemo-rl-required"),
    ("no-pipeline-dtype", "mopd", "default", ["~policy.megatron_cfg.pipeline_dtype"],
     "entry: load_config + MasterConfig", "nemo-rl-required"),
    ("no-val-temperature", "rlvr", "teacher-rlhf", ["~policy.generation.val_temperature"],
     "entry: load_config + MasterConfig", "nemo-rl-required"),
    ("no-unwanted-token-ids", "rlvr", "teacher-rlhf", ["reward_penalties.token_ids.unwanted=[]"],
     "entry: load_config + MasterConfig", "nemo-rl-required"),
    ("old-metric-name", "rlvr", "default", ["checkpointing.metric_name=val_reward"], "checkpoint step",
     "nemo-rl-metric"),
    ("metric-typo", "rlvr", "default", ["checkpointing.metric_name=val:acurracy"], "checkpoint step", "nemo-rl-metric"),
    ("gym-metric-native", "rlvr", "default", ["checkpointing.metric_name=val:total_reward/mean"], "checkpoint step",
     "nemo-rl-metric"),
    ("no-prefix", "rlvr", "default", ["checkpointing.metric_name=accuracy"], "checkpoint step", "nemo-rl-metric"),
    ("pass-k-ungrouped", "rlvr", "tiny", ["checkpointing.metric_name=val:pass_k",
                                          "grpo.val_num_generations_per_prompt=1"], "checkpoint step", "nemo-rl-metric"),
    ("penalty-native", "rlvr", "default", ["reward_penalties.penalize_empty_final_answer=true"], "setup() checks",
     "nemo-rl-gym-only"),
    ("tool-call-advantage-native", "rlvr", "tiny", ["grpo.invalid_tool_call_advantage=-5.0"], "trainer start",
     "nemo-rl-gym-only"),
    ("val-sampling-native", "rlvr", "default", ["policy.generation.val_temperature=0.6"], "setup() checks",
     "nemo-rl-gym-only"),
    ("no-max-val-native", "rlvr", "default", ["grpo.max_val_samples=null"], "validation",
     "nemo-rl-gym-only"),
    ("no-max-input-native", "rlvr", "tiny", ["data.max_input_seq_length=null"], "data: setup_response_data",
     "nemo-rl-gym-only"),
    ("max-val-gym", "rlvr", "teacher-rlhf", ["grpo.max_val_samples=256"], "entry: tokenizer + generation config",
     "nemo-rl-gym-only"),
    ("async-colocated-vllm", "mopd", "tiny", ["policy.generation.colocated.enabled=true",
                                              "policy.generation.colocated.resources.num_nodes=null",
                                              "run.env.nodes=2"], "trainer start", "nemo-rl-async"),
    ("async-sglang", "rlvr", "default", ["policy.generation.backend=sglang"], "trainer start", "nemo-rl-async"),
    # the one-GPU MOPD config on ONE Ray node: NeMo RL reserves whole nodes for its OPD teachers and asserts a node
    # left for the policy (grpo.py setup: "policy_nodes must be > 0 after reserving OPD teacher nodes")
    ("mopd-1gpu-one-ray-node", "mopd", "tiny", [*ONE_GPU_MOPD, *mtp_overrides(0), "run.env.nodes=1"],
     "setup() checks", "rl-node-total"),
    # VllmGeneration's layout asserts (vllm_generation.py): PP > 1 only with the async engine; the generation GPUs a
    # multiple of TP x PP (688 = 86 x 8 is not a multiple of 24)
    ("vllm-pp-sync-engine", "rlvr", "default", ["policy.generation.vllm_cfg.pipeline_parallel_size=2",
                                                "policy.generation.vllm_cfg.async_engine=false"], "setup() checks",
     "engine-layout"),
    ("vllm-engines-do-not-divide", "rlvr", "default", ["policy.generation.vllm_cfg.pipeline_parallel_size=3"],
     "setup() checks", "engine-layout"),
]
#: Accepted variations (upstream and the dry-run both accept): metric names the checkpoint step takes.
GOOD = [
    ("pass-k-grouped", "rlvr", "default", ["checkpointing.metric_name=val:pass_k"]),  # the recipe validates 2 per prompt
    ("avg-length", "mopd", "default", ["checkpointing.metric_name=val:avg_length"]),
    ("train-loss", "rlvr", "tiny", ["checkpointing.metric_name=train:loss"]),
    ("no-metric", "rlvr", "default", ["checkpointing.metric_name=null"]),
    # the fixes rule serving-memory names for the default's TP8 EP8 vLLM engines on Hopper profiles (GOOD_ON), with
    # the dispatcher rule gb200-tuned asks for there: NeMo RL's vLLM layout asserts and node asserts accept them
    ("h200-generation-pp2", "rlvr", "default", ["policy.generation.vllm_cfg.pipeline_parallel_size=2",
                                                "policy.megatron_cfg.moe_token_dispatcher_type=alltoall"]),
    ("h100-generation-pp3", "rlvr", "default", ["policy.generation.vllm_cfg.pipeline_parallel_size=3",
                                                "policy.generation.colocated.resources.num_nodes=87",
                                                "run.env.nodes=119",
                                                "policy.megatron_cfg.moe_token_dispatcher_type=alltoall",
                                                # the training's 100 GB of 80 (rule memory-fit): PP2, its own fix
                                                "policy.megatron_cfg.pipeline_model_parallel_size=2"]),
    ("h200-mopd-generation-pp2", "mopd", "default", ["policy.generation.vllm_cfg.pipeline_parallel_size=2",
                                                     "policy.generation.colocated.resources.num_nodes=72",
                                                     "run.env.nodes=106",
                                                     "policy.megatron_cfg.moe_token_dispatcher_type=alltoall"]),
]
#: Variants of shipped configs that runs outside CI use, checked like the shipped ones: (name, stage, config,
#: overrides, profile). ``rlvr-tiny-1gpu``: bench/gpu_rl.py's one-GPU run (NeMo RL's Megatron generation colocated
#: with training on one GPU; the policy folder, data and checkpoint paths are the harness's own).
#: ``mopd-tiny-1gpu``: bench/gpu_rl.py's ONE_GPU_MOPD (two Ray nodes of one GPU: the student's, colocated with its
#: Megatron generation and its HTTP server for NeMo Gym, and the teacher's), which no runner uses yet.
VARIANTS = [
    ("rlvr-tiny-1gpu", "rlvr", "tiny", [*ONE_GPU_RL, *mtp_overrides(0)], H100X1),  # the fresh `small`: no MTP
    ("mopd-tiny-1gpu", "mopd", "tiny", [*ONE_GPU_MOPD, *mtp_overrides(0)], H100X1),
]
H100 = from_table("h100", {"executor": "slurm", "gpus_per_node": 8, "gpu_arch": "hopper", "gpu_memory": 80.0})
#: The profile a GOOD case's dry-run runs on, where it is not the goldens' (:func:`_compile`).
GOOD_ON = {"h200-generation-pp2": H200, "h100-generation-pp3": H100, "h200-mopd-generation-pp2": H200,
           "mopd-1gpu-one-ray-node": H100X1}
#: Job configs swept key by key for the required-key parity.
SWEEP = ["rlvr-default", "rlvr-tiny", "rlvr-teacher-rlhf", "mopd-default"]

SCRIPT = r'''
import argparse, ast, copy, glob, json, os, runpy, shutil, sys, tempfile, traceback
from pathlib import Path
from types import SimpleNamespace
from upstream import read_payload, write_result

P = read_payload()
ROOT = Path(P["root"])
G_PATH = ROOT / "nemo_rl" / "algorithms" / "grpo.py"
V_PATH = ROOT / "nemo_rl" / "models" / "generation" / "vllm" / "vllm_generation.py"

_trees = {}
_blocks = {}


def stmts(path, func, start, end=None, until=None, inside=None, branch="body"):
    """Statements of upstream ``func`` in ``path``: from the one whose first line starts with ``start`` to the one
    starting with ``end`` (inclusive) or up to ``until`` (exclusive), in the same block; ``inside``: only in the
    ``branch`` of the ``if`` whose test reads ``inside``. Compiled with the upstream file name and lines (once)."""
    key = (str(path), func, start, end, until, inside, branch)
    if key in _blocks:
        return _blocks[key]
    path = Path(path)
    if path not in _trees:
        text = path.read_text(encoding="utf-8")
        _trees[path] = (ast.parse(text), text.splitlines())
    tree, lines = _trees[path]
    fn = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func)
    if inside is not None:
        node = next(n for n in ast.walk(fn) if isinstance(n, ast.If) and ast.unparse(n.test) == inside)
        lists = [getattr(node, branch)]
    else:
        lists = [getattr(n, f) for n in ast.walk(fn) for f in ("body", "orelse", "finalbody")
                 if isinstance(getattr(n, f, None), list)]
    first = lambda s: lines[s.lineno - 1][s.col_offset:]
    for body in lists:
        body = [s for s in body if isinstance(s, ast.stmt)]
        i = next((k for k, s in enumerate(body) if first(s).startswith(start)), None)
        if i is None:
            continue
        if end is not None:
            j = next(k for k in range(i, len(body)) if first(body[k]).startswith(end))
        elif until is not None:
            j = next(k for k in range(i, len(body)) if first(body[k]).startswith(until)) - 1
        else:
            j = i
        _blocks[key] = compile(ast.Module(body=body[i:j + 1], type_ignores=[]), str(path), "exec")
        return _blocks[key]
    raise LookupError(f"{path}: no statement starting with {start!r} in {func}()")


import nemo_rl.algorithms.grpo as G
from nemo_rl.algorithms.grpo import MasterConfig
from nemotron.config import keys
from nemotron.runtime.rl import nemo_rl as ours
from nemotron.validation.nemo_rl import schema

KL = keys.load_keylist(P["keylist_version"], "nemo-rl")
_entries = {}
_tokenizers = {}  # json of get_tokenizer's arguments -> (its result, the result's fingerprint)


def fingerprint(tok):
    t = getattr(tok, "tokenizer", tok)
    return [len(t), t.pad_token, t.eos_token, t.bos_token, t.chat_template, type(tok).__name__]


def memo_get_tokenizer(real):
    """NeMo RL's own get_tokenizer, run once per distinct argument set: loading the 131,072-entry tokenizer takes ~2 s
    and the jobs share a few configs. Identical arguments give the identical result; the code after it only reads the
    tokenizer, which the fingerprint check at the end proves."""
    def get_tokenizer(tokenizer_config, *args, **kwargs):
        key = json.dumps([tokenizer_config, args, kwargs], sort_keys=True, default=str)
        if key not in _tokenizers:
            tok = real(tokenizer_config, *args, **kwargs)
            _tokenizers[key] = (tok, fingerprint(tok))
        return _tokenizers[key][0]
    return get_tokenizer


def entry_globals(rel):
    if rel not in _entries:
        _entries[rel] = runpy.run_path(str(ROOT / rel), run_name="nemo_rl_entry")
        _entries[rel]["get_tokenizer"] = memo_get_tokenizer(_entries[rel]["get_tokenizer"])
    return dict(_entries[rel])


def generation_object(backend):
    """An object of the class setup() builds for ``backend`` (only its type is read)."""
    cls = {"vllm": G.VllmGeneration, "megatron": G.MegatronGeneration, "sglang": G.SGLangGeneration}.get(backend)
    return object.__new__(cls) if cls is not None else None


class Refused(Exception):
    pass


def check(job, workdir):
    """Run the upstream steps on one job config; [(step, "ok"|"failed"|"skipped", message)]."""
    steps = []

    def run(label, fn):
        try:
            fn()
            steps.append([label, "ok", ""])
        except BaseException as exc:
            steps.append([label, "failed", f"{type(exc).__name__}: {exc}"[:1500]])
            raise Refused() from None

    path = Path(workdir) / f"{job['name'].replace(':', '_')}.yaml"
    path.write_text(job["yaml"], encoding="utf-8")
    entry = job["entry"]
    gym = "nemo_gym" in entry
    ns = entry_globals(entry)
    ns.update(args=argparse.Namespace(config=str(path)), overrides=[])
    try:
        def load():
            exec(stmts(ROOT / entry, "main", "register_omegaconf_resolvers()"), ns)
            exec(stmts(ROOT / entry, "main", "config = load_config(args.config)",
                       end="materialize_vllm_video_config(" if gym else "config = MasterConfig(**config)"), ns)
        run("entry: load_config + MasterConfig", load)

        def tokenizer():
            if job["tokenizer"]:
                if gym:
                    exec(stmts(ROOT / entry, "main", "is_vlm = ", end="setup_nemo_gym_config(config, tokenizer)"), ns)
                    exec(stmts(ROOT / entry, "main", "assert should_use_nemo_gym(config)"), ns)
                else:
                    exec(stmts(ROOT / entry, "main", "tokenizer = get_tokenizer(",
                               end='config.policy["generation"] = configure_generation_config('), ns)
            if gym:
                exec(stmts(ROOT / entry, "main", "if config.grpo.max_val_samples is not None:"), ns)
        run("entry: tokenizer + generation config", tokenizer)
        mc = ns["config"]

        def setup():
            g = dict(vars(G))
            g.update(master_config=mc, tokenizer=ns.get("tokenizer"), dataset=None, val_dataset=None, processor=None,
                     policy_factory=None)
            exec(stmts(G_PATH, "setup", "setup_start_time = ", end="assert not ("), g)
            exec(stmts(G_PATH, "setup", "checkpointer = CheckpointManager(", end="grpo_save_state = _get_grpo_save_state("), g)
            exec(stmts(G_PATH, "setup", "num_prompts_per_step = grpo_config.num_prompts_per_step",
                       until="def init_train_dataloader"), g)
            exec(stmts(G_PATH, "setup", 'megatron_cfg = policy_config.get("megatron_cfg", {})',
                       end="_validate_use_kl_in_reward_compat(master_config)"), g)
            exec(stmts(G_PATH, "setup", "colocated_inference = generation_config", until="if colocated_inference:"), g)
            if g["colocated_inference"]:
                exec(stmts(G_PATH, "setup", "if total_nodes == 1:", inside="colocated_inference"), g)
            else:
                exec(stmts(G_PATH, "setup", "train_gpus_per_node = cluster_config", inside="colocated_inference",
                           branch="orelse", end="assert train_nodes > 0 and inference_nodes > 0"), g)
                if mc.policy["generation"]["backend"] == "vllm":  # VllmGeneration's layout asserts, on its cluster
                    gpus = g["inference_nodes"] * g["inference_gpus_per_node"]
                    v = {"self": SimpleNamespace(cfg=mc.policy["generation"]),
                         "cluster": SimpleNamespace(world_size=lambda: gpus)}
                    exec(stmts(V_PATH, "__init__", "self.tp_size = ", end="if self.ep_size > 1:"), v)
        run("setup() checks", setup)

        def trainer():
            if mc.grpo.async_grpo.enabled:
                exec(stmts(ROOT / entry, "main", "if config.grpo.use_dynamic_sampling:",
                           end='if config.data["use_multiple_dataloader"]:', inside="config.grpo.async_grpo.enabled"), ns)
                g = dict(vars(G))
                g.update(master_config=mc, policy_generation=generation_object(mc.policy["generation"]["backend"]))
                exec(stmts(G_PATH, "async_grpo_train", "generation_config = master_config.policy[",
                           end="assert master_config.loss_fn.use_importance_sampling_correction"), g)
                exec(stmts(G_PATH, "async_grpo_train", "if router_replay_enabled(master_config.policy)"), g)
                exec(stmts(G_PATH, "async_grpo_train", "colocated_inference = master_config.policy",
                           end="assert (not colocated_inference) or ("), g)
            G._resolve_message_level_advantage_penalties(mc)
        run("trainer start", trainer)

        if gym:
            steps.append(["validation", "skipped", "NeMo Gym's rollout metrics need its servers"])
            steps.append(["checkpoint step", "skipped", "NeMo Gym's rollout metrics need its servers"])
        else:
            val = {}
            run("validation", lambda: val.update(validation_metrics(mc)))
            run("checkpoint step", lambda: checkpoint_step(mc, val))
            if job["tokenizer"]:
                run("data: setup_response_data", lambda: data_step(mc, ns["tokenizer"]))
    except Refused:
        pass
    return steps


def data_step(mc, tokenizer):
    """NeMo RL's own data set-up of the entry (nemo_rl/data/utils.py ``setup_response_data``) on the job's ``data``
    section, with its JSONL paths pointed at rows our data prep rl writes (``P["rl_data"]``) and without the
    environments (``env_configs=None``: they are Ray actors); then the first training and validation item, which runs
    the task's data processor (chat template, length check against ``data.max_input_seq_length``)."""
    from nemo_rl.data.utils import setup_response_data

    data = copy.deepcopy(mc.data)
    for split in ("train", "validation"):
        data[split]["data_path"] = P["rl_data"][split]
    dataset, val_dataset = setup_response_data(tokenizer, data, None)[:2]  # without environments: (train, val)
    for ds in (dataset, val_dataset):
        item = ds[0]
        assert item["message_log"] and item["extra_env_info"]["ground_truth"], item


def train_metric_names():
    """Keys of grpo_train's ``metrics = {...}`` literal (the train step's fixed metrics), read from its source."""
    src = G_PATH.read_text(encoding="utf-8")
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == "grpo_train")
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict) and any(
                isinstance(t, ast.Name) and t.id == "metrics" for t in n.targets):
            names = [k.value for k in n.value.keys if isinstance(k, ast.Constant)]
            if "loss" in names:
                return names
    return []


TRAIN = train_metric_names()


def validation_metrics(mc):
    """validate()'s own statements: its batch count, then its metrics from two rewards per prompt."""
    k = mc.grpo.val_num_generations_per_prompt
    v = dict(vars(G))
    v.update(master_config=mc, total_rewards=[1.0, 0.0] * max(k, 1), total_lengths=[100.0],
             additional_metrics_to_report={}, val_num_generations_per_prompt=k)
    exec(stmts(G_PATH, "validate", "max_batches = "), v)
    exec(stmts(G_PATH, "validate", "num_samples = len(total_rewards)", end="if pass_k is not None:"), v)
    METRICS.update(v["val_metrics"])
    return v["val_metrics"]


def checkpoint_step(mc, val_metrics):
    """The metric_name statements of the checkpoint step of grpo_train and of async_grpo_train."""
    for loop in ("grpo_train", "async_grpo_train"):
        s = dict(vars(G))
        s.update(master_config=mc, metrics={n: 0.5 for n in TRAIN}, val_metrics=val_metrics,
                 grpo_save_state=G._initial_grpo_save_state())
        exec(stmts(G_PATH, loop, "full_metric_name = master_config.checkpointing", end="if full_metric_name is not None:"), s)


METRICS = {}
work = tempfile.mkdtemp(prefix="nemo-rl-jobs-")
results = {job["name"]: check(job, work) for job in P["jobs"]}


# -------------------------------------------------------------- required keys: delete each key in turn
def paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from paths(v, (*prefix, k))


sweep = {}
for name in P["sweep"]:
    job = next(j for j in P["jobs"] if j["name"] == name)
    base = json.loads(json.dumps(ours.translate(job["compiled"])))  # the job config as a plain dict
    mismatches, refused, total = [], 0, 0
    for p in paths(base):
        cfg = copy.deepcopy(base)
        node = cfg
        for seg in p[:-1]:
            node = node[seg]
        del node[p[-1]]
        try:
            MasterConfig(**cfg)
            upstream = False
            why = ""
        except Exception as exc:
            upstream = True
            why = str(exc).splitlines()[1] if len(str(exc).splitlines()) > 1 else str(exc)
        mine = bool(schema(cfg, KL))
        total += 1
        refused += upstream
        if upstream != mine:
            mismatches.append([".".join(map(str, p)), upstream, mine, why[:300]])
    sweep[name] = {"keys": total, "refused": refused, "mismatches": mismatches}


# -------------------------------------------------------------- the entry's read of policy.draft.enabled
from nemotron.validation.nemo_rl import entry_reads
job = next(j for j in P["jobs"] if j["name"] == "rlvr-default")
no_draft = json.loads(json.dumps(ours.translate(job["compiled"])))
del no_draft["policy"]["draft"]
draft = {"ours": [p.message for p in entry_reads(no_draft, KL, job["entry"])]}
draft["upstream"] = check({**job, "name": "no-draft", "yaml": ours.job_yaml(no_draft)}, work)


# -------------------------------------------------------------- the checkpoint chain
from nemo_rl.utils.checkpoint import CheckpointManager, _load_checkpoint_history
chain = {}
job = next(j for j in P["jobs"] if j["name"] == "rlvr-tiny")
master = ours.translate(job["compiled"])
d = Path(tempfile.mkdtemp(prefix="ckpt-", dir=work))
conf = {**master["checkpointing"], "checkpoint_dir": str(d), "save_period": 1}
cm = CheckpointManager(conf)
import transformers
tok = transformers.AutoTokenizer.from_pretrained(P["tokenizer"])
for step in (1, 2, 10):
    p = Path(cm.init_tmp_checkpoint(step, {"val:accuracy": 0.1 * step}, MasterConfig(**master)))
    (p / "policy" / "weights" / "iter_0000000").mkdir(parents=True)
    tok.save_pretrained(str(p / "policy" / "tokenizer"))  # what the policy's save_checkpoint does with tokenizer_path
    cm.finalize_checkpoint(p)
cm.init_tmp_checkpoint(11, {}, MasterConfig(**master))  # a save in progress
chain["upstream_latest"] = cm.get_latest_checkpoint_path()
found = ours.latest_step(d)
chain["ours_latest"] = [found[0], str(found[1])]
out = ours.hf_output(d, found[0])
cmd = ours.converter_command(master, found[1], out, ROOT)
chain["cmd"] = cmd
saved = sys.argv
sys.argv = cmd[1:]
try:
    try:
        conv = runpy.run_path(cmd[1], run_name="converter")
        args = conv["parse_args"]()
        chain["parsed_by"] = "the converter's parse_args"
    except ImportError as exc:  # its module imports Megatron-Bridge's export path
        chain["import_error"] = f"{type(exc).__name__}: {exc}"
        tree = ast.parse(Path(cmd[1]).read_text())
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args")
        g = {"argparse": argparse}
        exec(compile(ast.Module(body=[fn], type_ignores=[]), cmd[1], "exec"), g)
        args = g["parse_args"]()
        chain["parsed_by"] = "the converter's parse_args, alone"
finally:
    sys.argv = saved
import yaml
step_config = yaml.safe_load(Path(args.config).read_text())
chain["args"] = vars(args)
chain["config_has"] = {"policy.model_name": step_config["policy"]["model_name"],
                       "policy.tokenizer.name": step_config["policy"]["tokenizer"]["name"]}
chain["megatron_dir"] = Path(getattr(args, "megatron_ckpt_path", "") or "").is_dir()
# our hf/ folder beside the steps: NeMo RL neither lists it nor prunes it
(out).mkdir(parents=True)
(out / "config.json").write_text("{}")
(ours.hf_output(d)).symlink_to(out.name)
cm2 = CheckpointManager({**conf, "keep_top_k": 1})
cm2.remove_old_checkpoints()
chain["history"] = sorted(Path(str(p)).name for _, p, _ in _load_checkpoint_history(d))
chain["after_prune"] = sorted(x.name for x in d.iterdir())
chain["latest_after"] = cm2.get_latest_checkpoint_path()


# -------------------------------------------------------------- the recipes: stored copy == NeMo RL's loader
recipes = {}
for name in KL["recipes"]:
    recipes[name] = ours.recipe_drift({"nemo_rl": {"base": name}}, ROOT)
changed = Path(tempfile.mkdtemp(prefix="checkout-", dir=work))
name = "examples/nemo_gym/nemotron-3-ultra/student_rlvr1.yaml"
(changed / name).parent.mkdir(parents=True)
text = (ROOT / name).read_text().replace("lr: 4.0e-6", "lr: 5.0e-6", 1)
(changed / name).write_text(text)
recipes["changed checkout"] = ours.recipe_drift({"nemo_rl": {"base": name}}, changed)

tokenizers = [{"loaded": fp, "at_end": fingerprint(tok)} for tok, fp in _tokenizers.values()]
write_result({"results": results, "sweep": sweep, "draft": draft, "chain": chain, "recipes": recipes,
              "tokenizers": tokenizers,
              "val_metrics": sorted(METRICS), "train_metrics": TRAIN})
shutil.rmtree(work)
'''


def _tokenizer(folder: Path) -> Path:
    """A Hugging Face tokenizer folder: mistral-common's Tekken vocabulary (131,072 ids) converted by our data prep
    code (:func:`nemotron.data.tokenizer.resolve`) into a ``tokenizer.json``, with its control tokens named and our
    Nemotron 3 chat template (what ``data prep sft`` gives the checkpoints' tokenizer, and NeMo RL's math data
    processor applies)."""
    import mistral_common

    from nemotron.data import tokenizer as tk

    info = tk.resolve(str(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"),
                      cache_dir=folder / "cache")
    out = folder / "tokenizer"
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes(Path(info.json_path).read_bytes())
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "pad_token": "<pad>", "model_max_length": 1048576,
        "chat_template": (REPO / "stages" / "ultra3" / "data_prep_sft" / "nemotron3_chat.jinja").read_text()}))
    return out


def _rl_rows(folder: Path) -> dict[str, str]:
    """``train.jsonl`` / ``validation.jsonl`` in the form ``data prep rl`` writes (nemotron.data.rl
    ``normalise_shard``: ``messages`` user problem + assistant answer, ``task``), made by its own ``extract`` from the
    math samples shipped with the stage (4 rows each)."""
    from nemotron.data.rl import detect_schema, extract

    lines = (REPO / "stages" / "ultra3" / "data_prep_rl" / "samples" / "math_sample.jsonl").read_text().splitlines()
    rows = []
    for line in lines[:8]:
        obj = json.loads(line)
        text, answer, _ = extract(obj, detect_schema(obj))
        rows.append({"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": answer}],
                     "task": "math", "dataset": "math-sample"})
    out = {}
    for split, part in (("train", rows[:4]), ("validation", rows[4:])):
        path = folder / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
        out[split] = str(path)
    return out


def _compile(stage: str, config: str, overrides: list[str], model: str, profile=None):
    """The compiled, prepared config as ``nemotron ultra3 STAGE -c CONFIG`` makes it (``policy.model_name`` =
    ``model``), and the dry-run's problems on ``profile`` (default: the one the goldens use)."""
    args = [f"policy.model_name={model}", "data.train.data_path=/data/rl/train.jsonl",
            "data.validation.data_path=/data/rl/validation.jsonl"]
    if config in ("teacher-rlhf", "teacher-ifbench", "teacher-swe"):  # NeMo Gym rows: the artifact rl-blend-<slot>
        slot = config.removeprefix("teacher-")
        args = [args[0], f"data.train.data_path=/data/{slot}/train.jsonl",
                f"data.validation.data_path=/data/{slot}/validation.jsonl"]
    if stage == "mopd":
        args.append("_teachers.general=/ckpt/student")
        if config == "full-panel":
            args += [f"_teachers.{s}=/ckpt/teacher-{s}" for s in ("rlhf", "ifbench", "reasoning", "swe")]
    c = compile_config(get_stage(stage), config, [*args, *overrides], check_paths=False)
    assert not c.unresolved, c.unresolved
    profile = profile or (H200 if config == "tiny" else B200)
    validation.prepare(get_stage(stage), c.config, c.user_keys, profile)
    return c.config, validation.validate(get_stage(stage), c.config, profile)


def _job(name: str, cfg: dict, tokenizer: bool) -> dict:
    master = nemo_rl.translate(cfg)
    return {"name": name, "yaml": nemo_rl.job_yaml(master), "entry": nemo_rl.entry_relpath(master),
            "tokenizer": tokenizer, "compiled": cfg}


@pytest.fixture(scope="module")
def contract(upstream, tmp_path_factory):
    tok = _tokenizer(tmp_path_factory.mktemp("nemo-rl-tokenizer"))
    env = {"NEMOTRON_CKPT_ROOT": "/ckpt", "NEMOTRON_GENRM_MODEL": "/ckpt/genrm", "NEMOTRON_SWE_SIF_DIR": "/sif"}
    jobs, dry = [], {}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        for stage, config in SHIPPED:
            cfg, problems = _compile(stage, config, [], str(tok))
            jobs.append(_job(f"{stage}-{config}", cfg, True))
            dry[f"{stage}-{config}"] = problems
        for name, stage, config, overrides, profile in VARIANTS:
            cfg, problems = _compile(stage, config, overrides, str(tok), profile)
            jobs.append(_job(name, cfg, True))
            dry[name] = problems
        for name, stage, config, overrides, *_ in [*CASES, *GOOD]:
            cfg, problems = _compile(stage, config, overrides, str(tok), GOOD_ON.get(name))
            jobs.append(_job(f"case:{name}", cfg, True))
            dry[f"case:{name}"] = problems
    for path in sorted(GOLDEN.glob("*.yaml")):
        master = yaml.safe_load(path.read_text(encoding="utf-8"))
        jobs.append({"name": f"golden:{path.stem}", "yaml": path.read_text(encoding="utf-8"),
                     "entry": nemo_rl.entry_relpath(master), "tokenizer": False, "compiled": master})
    version = nemo_rl.keylist()["version"]
    rl_data = _rl_rows(tmp_path_factory.mktemp("nemo-rl-data"))
    out = upstream.run(SCRIPT, {"root": str(upstream.nemo_rl), "jobs": jobs, "sweep": SWEEP, "tokenizer": str(tok),
                                "keylist_version": version, "rl_data": rl_data}, timeout=1200)
    out["dry"] = dry
    out["jobs"] = {j["name"]: j for j in jobs}
    return out


def _errors(problems) -> list:
    """The dry run's errors, without rule ``input-exists``: the configs here name placeholder cluster paths
    (``/data/rl/train.jsonl``, teacher folders) that this machine does not hold; NeMo RL's checks, not file
    existence, are what this file compares (the rule is tested in tests/cli/test_cli_refusals.py)."""
    return [p for p in problems if p.severity == "error" and p.rule != "input-exists"]


def _refusal(steps: list) -> list | None:
    return next((s for s in steps if s[1] == "failed"), None)


# ------------------------------------------------------------------------------------------ every shipped config
@pytest.mark.parametrize("name", [f"{s}-{c}" for s, c in SHIPPED])
@pytest.mark.slow
def test_every_shipped_config_passes_nemo_rls_entry_checks(contract, name):
    """NeMo RL's entry and setup() checks accept the job config, and so does our dry-run (no errors)."""
    steps = contract["results"][name]
    assert _refusal(steps) is None, f"{name}: NeMo RL refuses at {_refusal(steps)[0]}: {_refusal(steps)[2]}"
    ran = [s[0] for s in steps if s[1] == "ok"]
    assert ran[:4] == ["entry: load_config + MasterConfig", "entry: tokenizer + generation config", "setup() checks",
                       "trainer start"], steps
    assert not _errors(contract["dry"][name]), [p.render() for p in _errors(contract["dry"][name])]


@pytest.mark.parametrize("name", [v[0] for v in VARIANTS])
def test_every_variant_passes_nemo_rls_entry_checks(contract, name):
    """The one-GPU configs of bench/gpu_rl.py: NeMo RL's entry (for MOPD the Gym entry, whose ``should_use_nemo_gym``
    asserts the Megatron generation's HTTP server), setup() (for MOPD its OPD teacher-node reservation) and
    trainer-start checks (for MOPD async GRPO's colocation assert) accept them, with the Megatron generation class
    setup() builds, and our dry-run on one H100 reports no error."""
    steps = contract["results"][name]
    assert _refusal(steps) is None, f"{name}: NeMo RL refuses at {_refusal(steps)[0]}: {_refusal(steps)[2]}"
    ran = [s[0] for s in steps if s[1] == "ok"]
    assert ran[:4] == ["entry: load_config + MasterConfig", "entry: tokenizer + generation config", "setup() checks",
                       "trainer start"], steps
    assert not _errors(contract["dry"][name]), [p.render() for p in _errors(contract["dry"][name])]
    job = yaml.safe_load(contract["jobs"][name]["yaml"])
    mopd = name.startswith("mopd-")
    assert job["policy"]["generation"]["backend"] == "megatron" and job["cluster"] == {
        "gpus_per_node": 1, "num_nodes": 2 if mopd else 1, "segment_size": None}
    if mopd:  # the Gym entry, async GRPO colocated, the teacher on the second Ray node
        assert contract["jobs"][name]["entry"] == "examples/nemo_gym/run_grpo_nemo_gym.py"
        assert job["policy"]["generation"]["mcore_generation_config"]["expose_http_server"] is True
        assert job["grpo"]["async_grpo"]["enabled"] and job["policy"]["generation"]["colocated"]["enabled"]
        teacher = job["on_policy_distillation"]["non_colocated_teachers"]
        assert teacher["enabled"] and (teacher["default_teacher_cfg"]["num_nodes"],
                                       teacher["default_teacher_cfg"]["gpus_per_node"]) == (1, 1)
    assert job["policy"]["generation"]["mcore_generation_config"]["cuda_graph_impl"] == "none"
    assert job["grpo"]["num_prompts_per_step"] * job["grpo"]["num_generations_per_prompt"] == \
        job["policy"]["train_global_batch_size"] == 8


def test_one_gpu_mopd_on_one_ray_node_stops_at_nemo_rls_teacher_node_assert(contract):
    """MOPD on one Ray node of one GPU: NeMo RL's setup() refuses it at the OPD teacher-node reservation (its
    teachers take whole Ray nodes), not at an earlier check; the entry's Gym and generation checks pass."""
    steps = contract["results"]["case:mopd-1gpu-one-ray-node"]
    assert [s[:2] for s in steps[:2]] == [["entry: load_config + MasterConfig", "ok"],
                                          ["entry: tokenizer + generation config", "ok"]], steps
    assert steps[2][:2] == ["setup() checks", "failed"], steps
    assert "policy_nodes must be > 0 after reserving OPD teacher nodes" in steps[2][2], steps[2]


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_golden_nemo_rl_config_passes_nemo_rls_entry_checks(contract, path):
    """The goldens (their checkpoints are paths, not tokenizers: the tokenizer block is the shipped run's)."""
    steps = contract["results"][f"golden:{path.stem}"]
    assert _refusal(steps) is None, f"{path.name}: NeMo RL refuses at {_refusal(steps)[0]}: {_refusal(steps)[2]}"


def test_the_shared_tokenizer_is_only_read(contract):
    """The harness runs NeMo RL's get_tokenizer once per distinct argument set (a 131,072-entry load is ~2 s); the
    steps after it read the tokenizer and never change it, so the job that reuses it sees what a fresh load gives."""
    toks = contract["tokenizers"]
    assert toks and all(t["at_end"] == t["loaded"] for t in toks), toks
    assert all(t["loaded"][0] == 131072 for t in toks), toks


def test_the_entry_is_the_one_the_runtime_starts(contract):
    entries = {n: j["entry"] for n, j in contract["jobs"].items() if "-" in n and ":" not in n}
    gym = {n for n, e in entries.items() if "nemo_gym" in e}
    # MOPD through NeMo Gym: teacher log-probs are computed only for rollouts carrying Gym's agent_ref
    # (tests/contract/test_nemo_rl_opd.py)
    # every MOPD config, its cycles included (cycle 2 distils from the same kind of panel)
    mopd = {n for n in entries if n.startswith("mopd-")}
    assert mopd >= {"mopd-default", "mopd-tiny", "mopd-full-panel", "mopd-cycle2", "mopd-tiny-cycle2"}, entries
    assert gym == {"rlvr-teacher-rlhf", "rlvr-teacher-ifbench", "rlvr-teacher-swe"} | mopd, entries
    assert {e for n, e in entries.items() if n not in gym} == {"examples/run_grpo.py"}


# ------------------------------------------------------------------------------------------ parity on bad configs
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_upstream_refuses_and_the_dry_run_refuses(contract, case):
    name, _, _, overrides, step, rule = case
    steps = contract["results"][f"case:{name}"]
    refused = _refusal(steps)
    assert refused is not None, f"NeMo RL accepts {overrides}: {steps}"
    assert refused[0] == step, refused
    ours = _errors(contract["dry"][f"case:{name}"])
    assert ours, f"the dry-run accepts {overrides}, which NeMo RL refuses at {step}: {refused[2]}"
    assert rule in {p.rule for p in ours}, [p.render() for p in ours]


@pytest.mark.parametrize("case", GOOD, ids=[c[0] for c in GOOD])
def test_upstream_accepts_and_the_dry_run_accepts(contract, case):
    name, _, _, overrides = case
    assert _refusal(contract["results"][f"case:{name}"]) is None, contract["results"][f"case:{name}"]
    assert not _errors(contract["dry"][f"case:{name}"]), [p.render() for p in _errors(contract["dry"][f"case:{name}"])]


def test_tilde_dynamic_batching_names_the_key_in_the_dry_run(contract):
    """`~policy.dynamic_batching`: MasterConfig says 'Field required'; our dry-run names the key, rule nemo-rl-required."""
    refused = _refusal(contract["results"]["case:no-dynamic-batching"])
    assert "policy.dynamic_batching" in refused[2] and "Field required" in refused[2], refused
    ours = [p.render() for p in _errors(contract["dry"]["case:no-dynamic-batching"]) if p.rule == "nemo-rl-required"]
    assert ours == [next(r for r in ours if r.startswith("policy.dynamic_batching: required by PolicyConfig"))], ours


def test_deleting_any_key_masterconfig_refuses_iff_the_dry_run_does(contract):
    """Every key of four job configs deleted in turn: NeMo RL's MasterConfig refuses ⇔ our rule does."""
    for name, r in contract["sweep"].items():
        assert r["keys"] > 300 and r["refused"] > 50, (name, r["keys"], r["refused"])
        assert not r["mismatches"], f"{name}: (key, MasterConfig refuses, we refuse, why): {r['mismatches'][:10]}"


def test_the_non_gym_entry_reads_policy_draft_enabled(contract):
    """Without policy.draft the non-Gym entry raises KeyError in its tokenizer block; our rule names the key."""
    refused = _refusal(contract["draft"]["upstream"])
    assert refused and refused[0] == "entry: tokenizer + generation config" and "KeyError: 'draft'" in refused[2], refused
    assert contract["draft"]["ours"] and contract["draft"]["ours"][0].startswith("policy.draft.enabled: missing")


def test_key_list_metrics_are_what_validate_reports(contract):
    """The metric names the key list carries (our rule's source) are the ones NeMo RL's validate() builds."""
    m = nemo_rl.keylist()["metrics"]
    assert sorted(m["val"] + m["val_grouped"]) == contract["val_metrics"]
    assert m["train"] == contract["train_metrics"] and m["prefixes"] == ["train:", "val:"]


# ------------------------------------------------------------------------------------------ the checkpoint chain
def test_latest_step_is_checkpoint_managers(contract):
    chain = contract["chain"]
    assert chain["upstream_latest"].endswith("/step_10") and chain["ours_latest"][0] == 10
    assert chain["ours_latest"][1] == chain["upstream_latest"]


def test_converter_command_is_accepted_by_nemo_rls_converter(contract):
    chain = contract["chain"]
    assert chain["cmd"][1].endswith("examples/converters/convert_megatron_to_hf.py")
    args = chain["args"]
    assert args["config"].endswith("step_10/config.yaml") and args["hf_ckpt_path"].endswith("hf/step_10")
    assert args["megatron_ckpt_path"].endswith("step_10/policy/weights/iter_0000000") and chain["megatron_dir"]
    # what the converter's main() reads from the step's config.yaml (written by CheckpointManager)
    assert chain["config_has"]["policy.model_name"] and chain["config_has"]["policy.tokenizer.name"]


def test_hf_folder_is_invisible_to_checkpoint_manager(contract):
    chain = contract["chain"]
    assert "hf" not in chain["history"] and chain["latest_after"].endswith("/step_10")
    assert "hf" in chain["after_prune"] and "step_10" in chain["after_prune"]


# ------------------------------------------------------------------------------------------ the recipes
def test_stored_recipes_are_nemo_rls_loader_output(contract):
    recipes = dict(contract["recipes"])
    changed = recipes.pop("changed checkout")
    assert len(recipes) == 7 and all(v == [] for v in recipes.values()), recipes
    assert len(changed) == 1 and "policy.megatron_cfg.optimizer.lr" in changed[0], changed


def test_report_shipped_configs_times_masterconfig(contract, capsys):
    passed = [n for n in contract["results"] if not n.startswith("case:") and _refusal(contract["results"][n]) is None]
    with capsys.disabled():
        print(f"\n[nemo-rl contract] {len(passed)} of {len([n for n in contract['results'] if not n.startswith('case:')])}"
              f" shipped + golden job configs pass NeMo RL 7ea279a's entry and setup() checks")
    assert len(passed) == len(SHIPPED) + len(VARIANTS) + len(list(GOLDEN.glob("*.yaml")))


GENERATE = r'''
import runpy, tempfile
from pathlib import Path
from upstream import read_payload, write_result
p = read_payload()
with tempfile.TemporaryDirectory(prefix="keylist-") as folder:
    out = Path(folder) / "keylist.json"
    gen = runpy.run_path(p["script"], run_name="nemo_rl_keys")
    gen["main"](["--source", p["root"], "--commit", p["commit"], "--out", str(out)])
    write_result({"text": out.read_text(encoding="utf-8")})
'''


def test_stored_key_list_is_the_generators_output_from_the_archive(upstream):
    """scripts/nemo_rl_keys.py on the archive (NeMo RL's own load_config composes the recipes) writes exactly the
    key list the dry-run and these tests read: one source."""
    stored = nemo_rl.keylist()
    path = REPO / "src" / "nemotron" / "keylists" / f"nemo-rl-{stored['version']}.json"
    out = upstream.run(GENERATE, {"script": str(REPO / "scripts" / "nemo_rl_keys.py"), "root": str(upstream.nemo_rl),
                                  "commit": stored["commit"]})
    assert out["text"] == path.read_text(encoding="utf-8")
