"""The NeMo RL stages' (rlvr, mopd) checks of the config NeMo RL receives: rules NeMo RL itself applies, run
before a job is queued.

Each rule mirrors a refusal of NeMo RL at the commit ``stages/images.toml`` pins (``[nemo-rl]``), named in its
docstring with the place it happens; tests/contract/test_nemo_rl.py runs NeMo RL's own code on the same bad
configs and shows that both refuse (and that both accept every shipped config). They read the config the job
hands NeMo RL — :func:`nemotron.runtime.rl.nemo_rl.translate` of the compiled config — and NeMo RL's key list
(``keylists/nemo-rl-<version>.json``: its ``required`` classes, ``entry_reads``, ``metrics``), so the rules and
the contract tests read one source.

Rule ids: ``nemo-rl-required`` (a key ``MasterConfig`` requires is missing), ``nemo-rl-null`` (null for a key NeMo
RL declares a plain int, float, bool or str), ``nemo-rl-entry`` (a key the GRPO
entry script reads before training is missing), ``nemo-rl-metric`` (``checkpointing.metric_name`` that GRPO's
checkpoint step refuses), ``nemo-rl-gym-only`` (NeMo Gym-only settings on the native path, or the other way
round), ``nemo-rl-async`` (async GRPO on a generation backend or placement that cannot), ``nemo-rl-opd-routing``
(the OPD advantage on rows that never reach a teacher), and ours, ``rl-output`` (a run without checkpoints has no
output to record).

Stdlib only.
"""

from __future__ import annotations

from typing import Any

from nemotron.config import keys
from nemotron.config.tree import get
from nemotron.errors import ConfigError, Problem
from nemotron.runtime.rl.nemo_rl import entry_relpath, translate


def validate_nemo_rl(cfg: dict, keylist: dict) -> list[Problem]:
    """Every rule of this module on the compiled config ``cfg`` (translated as the job translates it).
    ``keylist``: NeMo RL's key list at the pinned commit (:func:`nemotron.config.keys.load_keylist`)."""

    try:
        master = translate(cfg)
    except ConfigError:
        return []  # checks.rl_translation says why
    return (schema(master, keylist) + null_values(master, keylist) + entry_reads(master, keylist, entry_relpath(master))
            + metric_name(master, keylist) + gym_only(master) + async_colocated(master) + opd_routing(master)
            + output_checkpoint(master) + validation_split(cfg))


def validation_split(cfg: dict) -> list[Problem]:
    """Rule ``rl-validation``: :func:`nemotron.runtime.rl.val_split.empty_validation` on the stage's config, the
    check the job's precheck makes again (:func:`nemotron.runtime.rl.nemo_rl.precheck`): an empty validation file
    on this machine while the run validates."""
    from nemotron.runtime.rl.val_split import empty_validation

    line = empty_validation(cfg)
    if line is None:
        return []
    return [Problem("data.validation.data_path", get(cfg, "data.validation.data_path"), line.split(": ", 1)[1],
                    rule="rl-validation")]


def output_checkpoint(master: dict) -> list[Problem]:
    """Rule ``rl-output`` (ours): the stage records the Hugging Face form of the newest ``step_N`` NeMo RL saved
    (:func:`nemotron.runtime.rl.nemo_rl.finish`; NeMo RL saves the last step whatever ``save_period``); with
    ``checkpointing.enabled`` false there is none, and the job would end with exit 1 after training."""
    if get(master, "checkpointing.enabled", True):
        return []
    return [Problem("checkpointing.enabled", False, "the stage's artifact is the Hugging Face form of NeMo RL's newest "
                                                    "checkpoint: without checkpoints there is nothing to record (the "
                                                    "job would end with exit 1 after training)", "true",
                    rule="rl-output")]


def schema(master: dict, keylist: dict) -> list[Problem]:
    """What building ``MasterConfig(**master)`` refuses that this module checks: the required keys
    (:func:`required_keys`) and ``RewardPenaltyConfig``'s own validator (:func:`reward_penalty_ids`). The
    contract tests delete every key of shipped job configs in turn: ``MasterConfig`` refuses ⇔ this is non-empty."""
    return required_keys(master, keylist) + reward_penalty_ids(master)


def required_keys(master: dict, keylist: dict) -> list[Problem]:
    """Rule ``nemo-rl-required``: every key ``MasterConfig`` requires is in ``master``
    (:func:`nemotron.config.keys.missing_required_keys`; NeMo RL's entry builds ``MasterConfig(**config)`` first and
    pydantic refuses a missing required key: ``Field required``)."""

    out = []
    for p in keys.missing_required_keys(master, keylist):
        why = p.message.split(": ", 1)[1]  # "required by MegatronConfig (NeMo RL main-7ea279a) and missing from ..."
        out.append(Problem("", None, f"{p.key}: {why}; NeMo RL's entry builds MasterConfig(**config) and refuses the "
                                     "config without it", f"set {p.key} (it comes from the base recipe, nemo_rl.base, "
                                                          "unless a layer deleted it)", rule="nemo-rl-required"))
    return out


#: Declared types (the key list's ``sections``) that take no null: a plain number, flag or string, neither
#: ``Optional``/``| None`` nor ``NotRequired`` (a ``NotRequired`` key NeMo RL reads with ``.get`` and a default).
_NO_NULL = frozenset({"int", "float", "bool", "str", "PositiveInt", "NonNegativeInt", "int | float"})


def null_values(master: dict, keylist: dict) -> list[Problem]:
    """Rule ``nemo-rl-null``: a key of ``master`` that is null where NeMo RL declares a plain ``int``, ``float``,
    ``bool`` or ``str`` (the key list's ``sections``, read from its config classes): NeMo RL reads it as that type
    (``grpo.num_prompts_per_step`` sizes every step; ``cluster.num_nodes`` the Ray cluster), so the job would be
    queued and fail on its nodes (``TypeError`` on ``None``). One problem per key, in config order."""
    out: list[Problem] = []

    def walk(node: Any, tree: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict) or not isinstance(tree, dict):
            return
        for k, v in node.items():
            spec = tree.get(k)
            if not isinstance(spec, dict):
                continue
            if v is None and spec.get("type") in _NO_NULL:
                key = ".".join((*path, k))
                out.append(Problem(key, None, f"null, but NeMo RL declares it {spec['type']} (not optional) and reads it "
                                              "as one: the job would be queued and fail on its nodes",
                                   f"a value of type {spec['type']} (drop the override to use the recipe's)",
                                   rule="nemo-rl-null"))
            elif isinstance(v, dict):
                walk(v, spec.get("fields"), (*path, k))

    walk(master, keylist.get("sections") or {}, ())
    return out


def reward_penalty_ids(master: dict) -> list[Problem]:
    """Rule ``nemo-rl-required``: ``reward_penalties.penalize_unwanted_tokens`` true needs the token ids it
    zeroes the reward for, ``reward_penalties.token_ids.unwanted`` (non-empty): ``RewardPenaltyConfig``'s
    validator refuses the config without them (nemo_rl/algorithms/grpo.py)."""
    rp = master.get("reward_penalties")
    if not isinstance(rp, dict) or not rp.get("penalize_unwanted_tokens"):
        return []
    ids = rp.get("token_ids") if isinstance(rp.get("token_ids"), dict) else {}
    if ids.get("unwanted"):
        return []
    return [Problem("reward_penalties.token_ids.unwanted", ids.get("unwanted"),
                    "NeMo RL's RewardPenaltyConfig requires the unwanted token ids when "
                    "reward_penalties.penalize_unwanted_tokens is true", "a list of token ids (the recipes: [2]), or "
                                                                         "penalize_unwanted_tokens=false",
                    rule="nemo-rl-required")]


def entry_reads(master: dict, keylist: dict, entry: str) -> list[Problem]:
    """Rule ``nemo-rl-entry``: the keys ``entry`` reads as ``config.<section>[...]`` in its ``main()`` before
    training, outside any test (the key list's ``entry_reads``: ``policy.draft.enabled`` in
    ``examples/run_grpo.py``, which the Ultra recipes, written for the Gym entry, do not have) are present:
    a missing one is a ``KeyError`` once the Ray cluster is up."""
    out = []
    for key in (keylist.get("entry_reads") or {}).get(entry, []):
        if get(master, key, _ABSENT) is _ABSENT:
            out.append(Problem("", None, f"{key}: missing; NeMo RL's {entry} reads it before training (a KeyError "
                                         "once the job has its nodes)",
                               f"+{key}=false" if key.endswith(".enabled") else f"+{key}=VALUE", rule="nemo-rl-entry"))
    return out


_ABSENT = object()


def metric_name(master: dict, keylist: dict) -> list[Problem]:
    """Rule ``nemo-rl-metric``: ``checkpointing.metric_name`` as GRPO's checkpoint step takes it
    (nemo_rl/algorithms/grpo.py, ``grpo_train`` and ``async_grpo_train``, at every save): null, or one of the
    prefixes it asserts (``val:``, ``train:``) and a metric of that source — else an ``AssertionError``
    ("metric_name=... must start with 'val:' or 'train:'") or a ``ValueError`` ("Metric ... not found in val
    metrics") at the first checkpoint save, after the first ``save_period`` steps.

    Validation metrics (``val:``): what ``validate()`` reports — ``accuracy``, ``avg_length``, and ``pass_k``
    with ``grpo.val_num_generations_per_prompt`` > 1 (the key list's ``metrics``) — plus, with NeMo Gym, the
    rollout metrics of Gym's environments, whose names only the run knows (a warning). Training metrics
    (``train:``): the fixed ones of the train step are known; the rest are added at run time by the loss
    function, generation and rollouts (a warning for a name outside the fixed set). A ``val:`` metric while
    validation never runs (``val_period`` <= 0 and neither ``val_at_start`` nor ``val_at_end``) is a warning:
    NeMo RL then keeps checkpoints without ranking them."""
    if not get(master, "checkpointing.enabled", True):
        return []
    value = get(master, "checkpointing.metric_name")
    if value is None:
        return []
    m = keylist.get("metrics") or {}
    prefixes = m.get("prefixes") or ["train:", "val:"]
    key = "checkpointing.metric_name"
    src = m.get("source", "nemo_rl/algorithms/grpo.py")
    if not isinstance(value, str) or not value.startswith(tuple(prefixes)):
        hint = ""
        if isinstance(value, str) and value.startswith("val_"):
            hint = f" (the old form: now 'val:{value[4:]}')"
        return [Problem(key, value, f"NeMo RL's checkpoint step asserts it starts with {' or '.join(map(repr, prefixes))}"
                                    f"{hint}, at the first save ({src})",
                        _metric_choices(master, m), rule="nemo-rl-metric")]
    prefix, name = value.split(":", 1)
    gym = bool(get(master, "env.should_use_nemo_gym", False))
    if prefix == "val":
        known = list(m.get("val") or [])
        k = get(master, "grpo.val_num_generations_per_prompt", 1)
        if isinstance(k, int) and k > 1:
            known += list(m.get("val_grouped") or [])
        runs = _validation_runs(master)
        if name in known:
            if not runs:
                return [Problem(key, value, "validation never runs (grpo.val_period <= 0, val_at_start and val_at_end "
                                            "false): NeMo RL keeps checkpoints without ranking them by it",
                                "grpo.val_period > 0 or grpo.val_at_end=true", rule="nemo-rl-metric", severity="warning")]
            return []
        if gym:
            return [Problem(key, value, f"not one of the validation metrics NeMo RL always reports ({', '.join(known)}); "
                                        "with NeMo Gym it may be a rollout metric of an environment, which only the run "
                                        "knows: a wrong name stops the run at its first checkpoint save",
                            _metric_choices(master, m), rule="nemo-rl-metric", severity="warning")]
        why = ""
        if name == "pass_k":
            why = " (pass_k is reported only with grpo.val_num_generations_per_prompt > 1)"
        return [Problem(key, value, f"NeMo RL's validation reports {', '.join(known)}{why}; any other name stops the run "
                                    f"with 'Metric {name} not found in val metrics' at its first checkpoint save ({src})",
                        _metric_choices(master, m), rule="nemo-rl-metric")]
    if name in (m.get("train") or []):
        return []
    return [Problem(key, value, f"not one of the training metrics NeMo RL always reports ({', '.join(m.get('train') or [])}); "
                                "others are added at run time: a wrong name stops the run at its first checkpoint save",
                    _metric_choices(master, m), rule="nemo-rl-metric", severity="warning")]


def _validation_runs(master: dict) -> bool:
    """Whether GRPO validates at all: ``grpo.val_period`` > 0, or ``val_at_start`` / ``val_at_end``."""
    return bool((get(master, "grpo.val_period", 0) or 0) > 0 or get(master, "grpo.val_at_start")
                or get(master, "grpo.val_at_end"))


def _metric_choices(master: dict, m: dict) -> str:
    val = list(m.get("val") or [])
    k = get(master, "grpo.val_num_generations_per_prompt", 1)
    if isinstance(k, int) and k > 1:
        val += list(m.get("val_grouped") or [])
    return ", ".join([*(f"val:{n}" for n in val), *(f"train:{n}" for n in (m.get("train") or [])[:3]), "null"])


def gym_only(master: dict) -> list[Problem]:
    """Rule ``nemo-rl-gym-only``: settings that NeMo RL takes on one rollout path only.

    Without NeMo Gym (``env.should_use_nemo_gym`` false, ``examples/run_grpo.py``):

    * ``reward_penalties.penalize_*`` true — refused in ``setup()``
      (``_raise_if_reward_penalties_enabled_without_nemo_gym``);
    * ``grpo.invalid_tool_call_advantage`` / ``grpo.malformed_thinking_advantage`` set — refused at the first
      training step (``_resolve_message_level_advantage_penalties``);
    * ``policy.generation.val_temperature``/``val_top_p``/``val_top_k`` different from the training sampling —
      ``setup()`` asserts validation samples like training there;
    * ``grpo.max_val_samples`` null while validation runs — ``validate()`` divides it by ``val_batch_size``
      (a ``TypeError`` at the first validation; the Gym entry is the one that sizes it from the data);
    * ``data.max_input_seq_length`` null — the entry's data set-up hands it to every task's data processor, and the
      native ones compare each prompt's length with it (nemo_rl/data/processors.py ``math_hf_data_processor``:
      ``length >= max_seq_length``, a ``TypeError`` on the first prompt; the Gym processor takes None).

    With NeMo Gym (``examples/nemo_gym/run_grpo_nemo_gym.py``): ``grpo.max_val_samples`` set — the entry refuses
    it (``ValueError``: the validation set is used as given).
    """
    gym = bool(get(master, "env.should_use_nemo_gym", False))
    out: list[Problem] = []
    if gym:
        value = get(master, "grpo.max_val_samples")
        if value is not None:
            out.append(Problem("grpo.max_val_samples", value, "NeMo RL's Gym entry (run_grpo_nemo_gym.py) refuses a "
                                                              "number: it validates on the whole validation set",
                               "null", rule="nemo-rl-gym-only"))
        return out
    native = "without NeMo Gym (env.should_use_nemo_gym=false)"
    for flag in ("penalize_duplicated_reasoning", "penalize_empty_final_answer", "penalize_unwanted_tokens",
                 "penalize_malformed_think_tag"):
        if get(master, f"reward_penalties.{flag}", False):
            out.append(Problem(f"reward_penalties.{flag}", True, f"NeMo RL refuses reward penalties {native}, in "
                                                                "setup()", "false (or turn NeMo Gym on)",
                               rule="nemo-rl-gym-only"))
    for key in ("grpo.invalid_tool_call_advantage", "grpo.malformed_thinking_advantage"):
        value = get(master, key)
        if value is not None:
            out.append(Problem(key, value, f"NeMo RL refuses message-level advantage penalties {native}, at the first "
                                           "training step", "null (or turn NeMo Gym on)", rule="nemo-rl-gym-only"))
    gen = get(master, "policy.generation") or {}
    if isinstance(gen, dict):
        for v, t in (("val_temperature", "temperature"), ("val_top_p", "top_p"), ("val_top_k", "top_k")):
            if v in gen and t in gen and gen[v] != gen[t]:
                out.append(Problem(f"policy.generation.{v}", gen[v], f"differs from policy.generation.{t}={gen[t]!r}: "
                                                                     f"NeMo RL's setup() asserts validation samples like "
                                                                     f"training {native}",
                                   f"${{policy.generation.{t}}}", rule="nemo-rl-gym-only"))
    data = master.get("data") if isinstance(master.get("data"), dict) else None
    if data is not None and "max_input_seq_length" in data and data["max_input_seq_length"] is None:
        out.append(Problem("data.max_input_seq_length", None, f"{native} NeMo RL's data processors compare every "
                                                               "prompt's length with it: null fails on the first prompt",
                           "${policy.max_total_sequence_length} (NeMo RL's grpo_math_1B.yaml)", rule="nemo-rl-gym-only"))
    runs = _validation_runs(master)
    if runs and get(master, "grpo.max_val_samples") is None:
        out.append(Problem("grpo.max_val_samples", None, f"{native} NeMo RL's validate() runs max_val_samples // "
                                                         "val_batch_size batches: null fails at the first validation",
                           "a number of prompts, e.g. 256 (or grpo.val_period=0 and val_at_end=false: no validation)",
                           rule="nemo-rl-gym-only"))
    return out


#: The data processor whose rows carry NeMo Gym's ``agent_ref`` (nemo_rl/data/processors.py
#: ``nemo_gym_data_processor``: the whole JSONL row becomes ``extra_env_info``).
GYM_PROCESSOR = "nemo_gym_data_processor"


def opd_routing(master: dict) -> list[Problem]:
    """Rule ``nemo-rl-opd-routing``: the OPD advantage (``grpo.adv_estimator.name: opd``) needs teacher log-probs,
    and NeMo RL computes them only for rollouts that carry ``agent_ref``
    (nemo_rl/algorithms/async_utils/trajectory_collector.py ``_enqueue_rollout_group``: ``if
    self._has_distillation_teachers and "agent_ref" in final_batch_cpu``). ``agent_ref`` comes only from NeMo Gym
    rows (nemo_rl/experience/rollouts.py ``run_async_nemo_gym_rollout``: ``result["agent_ref"] =
    nemo_gym_row["agent_ref"]``); the native path's ``rl_collate_fn`` (nemo_rl/data/collate_fn.py) keeps a fixed
    key set without it. Without them ``OPDAdvantageEstimator.compute_advantage`` raises ``OPD requires
    teacher_logprobs`` at the first training step (nemo_rl/algorithms/advantage_estimator.py). So OPD needs
    ``env.should_use_nemo_gym`` true, ``data.default.processor`` :data:`GYM_PROCESSOR` and
    ``on_policy_distillation.enabled`` (the teachers)."""
    if get(master, "grpo.adv_estimator.name") != "opd":
        return []
    rid, out = "nemo-rl-opd-routing", []
    why = ("NeMo RL computes teacher log-probs only for rollouts carrying agent_ref, which only NeMo Gym rows have; "
           "the OPD advantage raises 'OPD requires teacher_logprobs' at the first step")
    if not get(master, "env.should_use_nemo_gym", False):
        out.append(Problem("env.should_use_nemo_gym", get(master, "env.should_use_nemo_gym", False), why,
                           "true, with NeMo Gym rows (data.default.processor=nemo_gym_data_processor)", rule=rid))
    elif get(master, "data.default.processor") != GYM_PROCESSOR:
        out.append(Problem("data.default.processor", get(master, "data.default.processor"), why,
                           GYM_PROCESSOR, rule=rid))
    if not get(master, "on_policy_distillation.enabled", False):
        out.append(Problem("on_policy_distillation.enabled", get(master, "on_policy_distillation.enabled", False),
                           "the OPD advantage needs teachers: without them no rollout gets teacher log-probs and "
                           "the first step raises 'OPD requires teacher_logprobs'", "true", rule=rid))
    return out


#: The generation backends ``async_grpo_train`` asserts (nemo_rl/algorithms/grpo.py).
ASYNC_BACKENDS = ("vllm", "megatron", "trtllm", "dynamo")


def async_colocated(master: dict) -> list[Problem]:
    """Rule ``nemo-rl-async``: async GRPO (``grpo.async_grpo.enabled``) asserts, before its first step
    (``async_grpo_train``), a generation backend of :data:`ASYNC_BACKENDS` (not ``sglang``) and, with generation
    colocated on the training GPUs (``policy.generation.colocated.enabled``), the ``megatron`` backend ("Colocated
    async GRPO is only supported for the Megatron generation backend")."""
    if not get(master, "grpo.async_grpo.enabled", False):
        return []
    backend = get(master, "policy.generation.backend")
    if backend not in ASYNC_BACKENDS:
        return [Problem("grpo.async_grpo.enabled", True, f"NeMo RL's async GRPO (async_grpo_train) supports the "
                                                         f"{', '.join(ASYNC_BACKENDS)} generation backends, not {backend}",
                        "false (synchronous GRPO), or another policy.generation.backend", rule="nemo-rl-async")]
    if not get(master, "policy.generation.colocated.enabled", False) or backend == "megatron":
        return []
    return [Problem("grpo.async_grpo.enabled", True, f"with colocated generation (policy.generation.colocated.enabled) "
                                                     f"NeMo RL's async GRPO supports only the megatron generation "
                                                     f"backend, not {backend}", "false (synchronous GRPO), or "
                                                                               "non-colocated generation",
                    rule="nemo-rl-async")]


__all__ = ["async_colocated", "entry_reads", "gym_only", "metric_name", "opd_routing", "required_keys",
           "output_checkpoint", "reward_penalty_ids", "schema", "validate_nemo_rl", "validation_split"]
