"""The stage registry: every stage of every recipe, declared once, as data.

One generic command path (:func:`nemotron.cli.pipeline.run_stage`) serves all of them; there are no
per-stage command modules. A stage's runtime entry script is only a path here: it is resolved
and executed when the job runs, never imported by the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One pipeline stage.

    Attributes:
        name: unique id, also the artifact producer name (``"pretrain"``, ``"data-prep-sft"``).
        command: the words after ``nemotron <recipe>`` (``("data", "prep", "sft")``).
        recipe: command group (``"ultra3"``).
        kind: ``"data"`` (CPU data prep), ``"megatron"`` (Megatron-Bridge), ``"rl"`` (NeMo RL),
            ``"quantize"`` (Model Optimizer) or ``"convert"``.
        config_dir: folder under ``stages/`` holding ``default.yaml``, ``tiny.yaml``, ``local.yaml``...
        entry: the runtime entry script under ``stages/``; the job runs ``python ENTRY --config train.yaml``
            (or torchrun / a Ray job, per ``launch``).
        launch: ``"torchrun"`` (one process per GPU), ``"ray"`` (a Ray driver; a Ray cluster on Slurm)
            or ``"python"`` (one process).
        image: key of the container image in ``stages/images.toml``.
        consumes / produces: artifact kinds of the stage's ``default`` config (``--help``). A config may take
            other ones (``quantize -c local`` consumes ``sft-checkpoint`` and ``pretrain-data``; ``rlvr -c
            teacher-*`` produces ``teacher-<slot>``): what each config consumes and produces is read from its
            files (:func:`nemotron.config.compile.config_artifacts`, shown by ``list``); ``pipe`` wires a stage through
            the ``${art:...}`` values of its compiled config and the planned outputs of the stages before it
            (:func:`nemotron.launch.plan.planned_outputs`).
        gpu: whether the stage needs GPUs (a GPU stage on a profile without GPUs is an error); a stage without
            them, and ``convert`` with ``convert.device: cpu``, is planned with no GPU and one process
            (:func:`nemotron.launch.plan.cpu_only`).
        summary: one line for ``--help``.
        outputs: the fields of the artifact the stage produces, as templates over its config keys
            (``(("path", "{output_dir}"), ("blend_path", "{output_dir}/blend.json"))``): where the output
            will be, known before the job runs, so ``pipe`` can wire the next stage to it.
        output_files: instead of templates, the writer's own path function (``"module:function"``, called with
            the compiled config): a data stage writes a new version folder (``output_dir/v2``) once the latest
            one was consumed, and only its writer knows which folder and file names a run will write. It may
            return ``{artifact name: fields}`` for a run that records several (``data prep rl`` with
            ``backend: blends``: ``rl-blend-<stage>`` per stage file).
        checks: the check sets validation runs on the stage's config, in order (names of
            :data:`nemotron.validation.CHECK_SETS`: ``layout``, ``megatron-keys``, ``nemo-rl``, ``training-data``...).
        stands_in_for: artifacts whose consumers take this stage's output instead when both are in one ``pipe``,
            after it (``mtp-boost``'s checkpoint is the MOPD model with a boosted MTP head: ``pipe ... mopd mtp-boost
            quantize`` quantizes it). Only the wiring of that chain: what the stage records is its own artifact.
    """

    name: str
    command: tuple[str, ...]
    recipe: str
    kind: str
    config_dir: str
    entry: str
    launch: str
    image: str
    consumes: tuple[str, ...]
    produces: tuple[str, ...]
    gpu: bool
    summary: str
    outputs: tuple[tuple[str, str], ...] = ()
    output_files: str | None = None
    checks: tuple[str, ...] = ()
    stands_in_for: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        """``"ultra3 data prep sft"`` — how users type it after ``nemotron``."""
        return " ".join((self.recipe, *self.command))


def _stage(name: str, command: str, kind: str, launch: str, image: str, consumes: str, produces: str,
           gpu: bool, summary: str, outputs: dict[str, str] | str, checks: str, recipe: str = "ultra3",
           stands_in_for: str = "") -> Stage:
    folder = name.replace("-", "_")
    return Stage(
        name=name, command=tuple(command.split()), recipe=recipe, kind=kind,
        config_dir=f"{recipe}/{folder}", entry=f"{recipe}/{folder}/run.py", launch=launch, image=image,
        consumes=tuple(consumes.split()), produces=tuple(produces.split()), gpu=gpu, summary=summary,
        outputs=tuple(outputs.items()) if isinstance(outputs, dict) else (),
        output_files=outputs if isinstance(outputs, str) else None, checks=tuple(checks.split()),
        stands_in_for=tuple(stands_in_for.split()),
    )


STAGES: tuple[Stage, ...] = (
    _stage("data-prep-pretrain", "data prep pretrain", "data", "ray", "data", "", "pretrain-data", False,
           "Tokenize a blend of raw text into Megatron .bin/.idx shards and blend.json (Ray).",
           "nemotron.data.outputs:pretrain_files", "data"),
    _stage("data-prep-sft", "data prep sft", "data", "ray", "data", "", "sft-data", False,
           "Render chat data with the Nemotron 3 template, mask the loss and pack it into Parquet (Ray).",
           "nemotron.data.outputs:sft_files", "data"),
    _stage("data-prep-rl", "data prep rl", "data", "ray", "data", "", "rl-data", False,
           "Turn prompts with verifiable answers into the RL JSONL files (train and validation).",
           "nemotron.data.outputs:rl_files", "data"),
    _stage("pretrain", "pretrain", "megatron", "torchrun", "nemo", "pretrain-data", "pretrain-checkpoint", True,
           "Pretrain Nemotron 3 Ultra on a blend.json: Megatron-Bridge (default, tiny), or -c local on this machine.",
           {"path": "{checkpoint.save}"}, "layout megatron-keys blend-mix training-data"),
    _stage("sft", "sft", "megatron", "torchrun", "nemo", "pretrain-checkpoint sft-data", "sft-checkpoint", True,
           "Supervised fine-tuning on packed Parquet (answer-only loss): Megatron-Bridge, or -c local on this machine.",
           {"path": "{checkpoint.save}"}, "layout megatron-keys training-data"),
    _stage("convert", "convert", "convert", "torchrun", "nemo", "sft-checkpoint", "hf-checkpoint", True,
           "Convert checkpoints between the Hugging Face and Megatron forms: Megatron-Bridge's AutoBridge, or -c local "
           "on this machine.",
           {"path": "{convert.output_dir}"}, "layout megatron-keys"),
    _stage("rlvr", "rlvr", "rl", "ray", "nemo-rl", "hf-checkpoint rl-data", "rl-checkpoint", True,
           "Reinforcement learning with verifiable rewards (GRPO) on NeMo RL; -c teacher-<slot> trains MOPD teachers.",
           # the Hugging Face form of the newest step (nemotron.runtime.nemo_rl.finish; the run records hf/step_N)
           {"path": "{checkpointing.checkpoint_dir}/hf/latest", "checkpoint_dir": "{checkpointing.checkpoint_dir}"},
           "layout nemo-rl"),
    _stage("mopd-warmup", "mopd-warmup", "rl", "ray", "nemo-rl", "rl-checkpoint rl-data", "mopd-warmup-checkpoint", True,
           "MOPD warmup: the teacher panel answers the RL prompts, the RLVR student is fine-tuned on the answers "
           "(NeMo RL's SFT), so MOPD's rollouts start near the teachers; -c local on this machine.",
           {"path": "{checkpointing.checkpoint_dir}/hf/latest", "checkpoint_dir": "{checkpointing.checkpoint_dir}"},
           "mopd-warmup"),
    _stage("mopd", "mopd", "rl", "ray", "nemo-rl", "mopd-warmup-checkpoint rl-checkpoint rl-data", "mopd-checkpoint", True,
           "Multi-teacher on-policy distillation on NeMo RL.",
           {"path": "{checkpointing.checkpoint_dir}/hf/latest", "checkpoint_dir": "{checkpointing.checkpoint_dir}"},
           "layout nemo-rl"),
    _stage("mtp-boost", "mtp-boost", "megatron", "torchrun", "nemo", "mopd-checkpoint rl-data sft-data", "mtp-checkpoint",
           True,
           "MTP boosting: freeze the backbone, train the shared-weight MTP head (forward KL to the backbone at "
           "temperature T over an N-step rollout), report acceptance length before/after; -c local on this machine.",
           {"path": "{mtp_boost.output_dir}"}, "layout megatron-keys mtp-boost", stands_in_for="mopd-checkpoint"),
    _stage("quantize", "quantize", "quantize", "torchrun", "nemo", "mopd-checkpoint", "quantized-checkpoint", True,
           "NVFP4 + FP8 post-training quantization with NVIDIA Model Optimizer.",
           {"path": "{export.output_dir}"}, "layout quantize"),
    _stage("eval", "eval", "eval", "ray", "nemo-rl", "mopd-checkpoint rl-data", "eval-results", True,
           "Evaluate checkpoints of the chain (held-out perplexity, GSM8K accuracy, a chat sample): NeMo RL's "
           "evaluator, or -c local on this machine; --compare A B prints the deltas.",
           {"path": "{eval.output_dir}"}, "eval"),
)

#: The order ``pipe`` runs stages in when none are named.
PIPELINE_ORDER: tuple[str, ...] = tuple(s.name for s in STAGES)

_BY_NAME = {s.name: s for s in STAGES}


def get_stage(name: str) -> Stage:
    """The stage called ``name`` (``"pretrain"``, ``"data-prep-sft"``; spaces work too).

    Raises:
        KeyError: with the list of stage names.
    """
    key = name.strip().replace(" ", "-")
    if key.startswith("ultra3-"):
        key = key[len("ultra3-"):]
    try:
        return _BY_NAME[key]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(key, list(_BY_NAME), n=1)
        maybe = f" (did you mean {close[0]!r}?)" if close else ""
        raise KeyError(f"no stage {name!r}{maybe}; stages: {', '.join(_BY_NAME)}") from None


def recipes() -> list[str]:
    """Recipe command groups, in declaration order."""
    return list(dict.fromkeys(s.recipe for s in STAGES))
