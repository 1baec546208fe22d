"""The stage registry: every stage of every recipe, declared once, as data.

One generic command path (:func:`nemotron.cli.pipeline.run_stage`) serves all of them; there are no
per-stage command modules. A stage's runtime entry script is only a path here: it is resolved
and executed when the job runs, never imported by the CLI.

A stage's identity lives in its row, not in string tests at the points of use: what the validation, the planner,
the CLI and the runtimes need to know about a stage is a field of its row (:class:`Stage`), of the family of its
kind (:class:`Family`, one per kind in :data:`FAMILIES`) or of the training data it reads (:class:`TrainingData`,
:data:`TRAINING_DATA`). The rows are checked when this module is imported (:func:`_stage`): a row with an unknown
kind, launch, training data or metrics reader, or without outputs or check sets, raises :class:`RegistryError`
naming the stage and the field, so a forgotten field fails at import, not on the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass


class RegistryError(ValueError):
    """A registry row that cannot be used; ``str()`` names the stage, the field and the valid values."""


@dataclass(frozen=True)
class TrainingData:
    """The data a training stage reads (the stages whose row sets ``trains_on``): what the Megatron-Bridge runtime
    (:mod:`nemotron.runtime.megatron.megatron_bridge`), the local trainer (:mod:`nemotron.runtime.megatron.trainer`) and
    their checks (:mod:`nemotron.validation.checks`, :mod:`nemotron.validation.data`) do with it.

    Attributes:
        artifact: the artifact kind (``"pretrain-data"``, ``"sft-data"``): what the run records itself as a consumer
            of (the data folder becomes immutable to data prep) and the data label of its W&B run.
        blend: True: a ``blend.json`` of Megatron ``.bin/.idx`` prefixes (``data.per_split_data_args_path``, mixed
            with ``data.mix_with``), Megatron-Core's GPT dataset; False: the packed Parquet of ``data prep sft``
            (``dataset.packed_sequence_specs.*``), Megatron-Bridge's ``FinetuningDatasetConfig``, starting from
            ``checkpoint.pretrained_checkpoint``.
        path_key: the config key naming the data folder (or file) whose data prep ``manifest.json`` says which
            tokenizer it was made with.
        bridge_train: Megatron-Bridge's training function, ``"module:function"`` (``training/pretrain.py``
            ``pretrain``, ``training/finetune.py`` ``finetune``; Megatron-Bridge 0.5.0).
        bridge_defaults: the function of ``megatron.bridge.recipes.common`` giving the defaults when ``recipe.name``
            is not one of Megatron-Bridge's recipes (``_pretrain_common`` / ``_sft_common``).
    """

    artifact: str
    blend: bool
    path_key: str
    bridge_train: str
    bridge_defaults: str


#: The training data a row's ``trains_on`` may name, by artifact kind.
TRAINING_DATA: dict[str, TrainingData] = {
    "pretrain-data": TrainingData("pretrain-data", blend=True, path_key="data.per_split_data_args_path",
                                  bridge_train="megatron.bridge.training.pretrain:pretrain",
                                  bridge_defaults="_pretrain_common"),
    "sft-data": TrainingData("sft-data", blend=False, path_key="dataset.dataset_root",
                             bridge_train="megatron.bridge.training.finetune:finetune",
                             bridge_defaults="_sft_common"),
}

#: The readers of :mod:`nemotron.runtime.stage_metrics` a row's ``metrics`` may name (``""``: the stage reports
#: none): ``trainer`` (the local trainer's ``summary.json``), ``rl`` (the RL runtimes' ``summary.json``: reward
#: or reverse KL), ``mtp-boost``, ``quantize``, ``eval`` (``eval.json``).
METRICS_READERS: tuple[str, ...] = ("trainer", "rl", "mopd-warmup", "mtp-boost", "quantize", "eval")

#: What a NeMo RL training stage optimises (:attr:`Stage.rl_objective`): ``reward`` (GRPO on verifiable rewards,
#: several generations per prompt for the group baseline) or ``distillation`` (on-policy distillation: the per-token
#: reverse KL to the teacher each prompt is routed to, one generation per prompt).
RL_OBJECTIVES: tuple[str, ...] = ("reward", "distillation")

#: How a stage's job is started (:class:`nemotron.launch.plan.JobPlan`).
LAUNCHES: tuple[str, ...] = ("torchrun", "ray", "python")


@dataclass(frozen=True)
class Family:
    """What every stage of one kind shares: the questions validation, planning and the CLI ask of a stage, answered
    once per kind (:data:`FAMILIES`). A new stage of an existing kind needs none of this; a new kind adds one entry.

    Attributes:
        kind: the registry kind (``"data"``, ``"megatron"``, ``"rl"``, ``"convert"``, ``"quantize"``, ``"eval"``).
        layout: the layout keys its config spells (:func:`nemotron.layout.views.layout_keys`): ``"megatron"``
            (``model.*`` / ``train.*``), ``"rl"`` (NeMo RL's ``policy.megatron_cfg.*``) or ``""`` (no model layout).
        prepares_data: a data prep stage (CPU, Ray): no model, no layout; its ``local`` config is its ``tiny`` one;
            its outputs are version folders finished by a ``manifest.json``.
        nemo_rl: its config is NeMo RL's (layered on a NeMo RL base recipe; nodes in ``cluster.*``; the MOPD
            teacher panel; the RL node arithmetic of the dry run).
        optimizer: a Megatron training run: optimizer and training-precision rules (NVFP4 needs Blackwell).
        batch: its config has a global / micro batch that the batch rules check (training or calibration).
        inference: its job holds the weights only (no gradients, no optimizer state) for the memory estimate.
        quantizes: Model Optimizer post-training quantization: its rules, and a second (export) layout ``export.*``.
        converts: a checkpoint conversion (Megatron-Bridge's AutoBridge).
        cpu_key: the config key whose value ``cpu`` makes the job one process without GPUs (``convert.device``).
        estimate: ``estimate`` (step time, GPU-hours, checkpoint bytes; docs/estimate.md) models it.
        compare: the stage takes ``--compare A B`` (the deltas of two of its results).
        memory_note: what the dry run's memory table adds to its title.
        metrics: the default metrics reader of its rows (:data:`METRICS_READERS`; ``""``: none).
    """

    kind: str
    layout: str = "megatron"
    prepares_data: bool = False
    nemo_rl: bool = False
    optimizer: bool = False
    batch: bool = True
    inference: bool = False
    quantizes: bool = False
    converts: bool = False
    cpu_key: str = ""
    estimate: bool = False
    compare: bool = False
    memory_note: str = ""
    metrics: str = ""


#: One family per registry kind.
FAMILIES: dict[str, Family] = {f.kind: f for f in (
    Family("data", layout="", prepares_data=True, batch=False),
    Family("megatron", optimizer=True, estimate=True, metrics="trainer"),
    Family("rl", layout="rl", nemo_rl=True, metrics="rl"),
    Family("convert", batch=False, inference=True, converts=True, cpu_key="convert.device",
           memory_note=" — weights only (conversion)"),
    Family("quantize", inference=True, quantizes=True, memory_note=" — weights and calibration forward",
           metrics="quantize"),
    Family("eval", compare=True, metrics="eval"),
)}


@dataclass(frozen=True)
class Stage:
    """One pipeline stage.

    Attributes:
        name: unique id, also the artifact producer name (``"pretrain"``, ``"data-prep-sft"``).
        command: the words after ``nemotron <recipe>`` (``("data", "prep", "sft")``).
        recipe: command group (``"ultra3"``).
        kind: ``"data"`` (CPU data prep), ``"megatron"`` (Megatron-Bridge), ``"rl"`` (NeMo RL),
            ``"quantize"`` (Model Optimizer), ``"convert"`` or ``"eval"``: a key of :data:`FAMILIES`, whose
            :class:`Family` (:attr:`family`) answers what the points of use ask of the stage's kind.
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
        trains_on: the training data it reads, a key of :data:`TRAINING_DATA` (``"pretrain-data"``, ``"sft-data"``)
            and one of ``consumes``; ``""``: it trains on no such data (:attr:`training_data`).
        metrics: the reader of what a finished run measured (:data:`METRICS_READERS`, read from the file it names in
            :attr:`output_folder`; :mod:`nemotron.runtime.stage_metrics`); ``""``: none.
        rl_objective: what an RL training stage optimises (:data:`RL_OBJECTIVES`: ``rlvr`` a reward, ``mopd`` a
            distillation); ``""``: not an RL training stage (the local RL runtime refuses it).
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
    trains_on: str = ""
    metrics: str = ""
    rl_objective: str = ""

    @property
    def title(self) -> str:
        """``"ultra3 data prep sft"`` — how users type it after ``nemotron``."""
        return " ".join((self.recipe, *self.command))

    @property
    def family(self) -> Family:
        """The family of its kind (:data:`FAMILIES`; every row's kind has one: checked at import)."""
        return FAMILIES[self.kind]

    @property
    def training_data(self) -> TrainingData | None:
        """The training data it reads (:data:`TRAINING_DATA` of ``trains_on``), or None."""
        return TRAINING_DATA[self.trains_on] if self.trains_on else None

    @property
    def written_data(self) -> TrainingData | None:
        """The training data this stage writes (a data prep stage producing ``pretrain-data`` or ``sft-data``), or
        None: ``data prep pretrain`` tokenizes plain-text documents into a blend; ``data prep sft`` renders chat."""
        return next((TRAINING_DATA[a] for a in self.produces if a in TRAINING_DATA), None)

    @property
    def bridge(self) -> bool:
        """Whether its ``megatron-bridge`` backend is :mod:`nemotron.runtime.megatron.megatron_bridge` (the translation
        the dry run checks, rule ``bridge-translate``): a training stage reading :attr:`training_data`, or a
        conversion."""
        return self.family.converts or self.training_data is not None

    @property
    def output_folder(self) -> str | None:
        """The template (over config keys) of the folder its run writes into: its ``checkpoint_dir`` output field when
        it declares one (the RL stages, whose ``path`` is the newest Hugging Face step inside it), else ``path``;
        None for a stage whose writer names its files (:attr:`output_files`)."""
        fields = dict(self.outputs)
        return fields.get("checkpoint_dir") or fields.get("path")


def _stage(name: str, command: str, kind: str, launch: str, image: str, consumes: str, produces: str,
           gpu: bool, summary: str, outputs: dict[str, str] | str, checks: str, recipe: str = "ultra3",
           stands_in_for: str = "", trains_on: str = "", metrics: str | None = None, rl_objective: str = "") -> Stage:
    """One row, checked (``metrics`` None: the family's reader).

    Raises:
        RegistryError: an unknown ``kind``, ``launch``, ``trains_on``, ``metrics`` or ``rl_objective`` (or one on a
            stage whose family is not NeMo RL's); ``trains_on`` not among
            ``consumes``; no ``produces``, ``outputs`` or ``checks``. The message names the stage and the field.
    """
    def bad(field: str, value: object, valid: str) -> RegistryError:
        return RegistryError(f"stage {name!r}: {field}={value!r}: {valid} (nemotron.config.registry)")

    if kind not in FAMILIES:
        raise bad("kind", kind, f"not a kind with a family; kinds: {', '.join(FAMILIES)} (a new kind adds its Family)")
    if launch not in LAUNCHES:
        raise bad("launch", launch, f"valid: {', '.join(LAUNCHES)}")
    if not produces.split():
        raise bad("produces", produces, "every stage produces an artifact")
    if not outputs:
        raise bad("outputs", outputs, "templates over config keys, or the writer's 'module:function'")
    if not checks.split():
        raise bad("checks", checks, "the check sets validation runs (names of nemotron.validation.CHECK_SETS)")
    if trains_on and trains_on not in TRAINING_DATA:
        raise bad("trains_on", trains_on, f"valid: {', '.join(TRAINING_DATA)} (or '' for none)")
    if trains_on and trains_on not in consumes.split():
        raise bad("trains_on", trains_on, f"must be one of what it consumes ({consumes})")
    reader = FAMILIES[kind].metrics if metrics is None else metrics
    if reader and reader not in METRICS_READERS:
        raise bad("metrics", reader, f"valid: {', '.join(METRICS_READERS)} (or '' for none)")
    if rl_objective and rl_objective not in RL_OBJECTIVES:
        raise bad("rl_objective", rl_objective, f"valid: {', '.join(RL_OBJECTIVES)} (or '' for none)")
    if rl_objective and not FAMILIES[kind].nemo_rl:
        raise bad("rl_objective", rl_objective, f"only a NeMo RL stage has one (kind {kind!r} is not)")
    folder = name.replace("-", "_")
    return Stage(
        name=name, command=tuple(command.split()), recipe=recipe, kind=kind,
        config_dir=f"{recipe}/{folder}", entry=f"{recipe}/{folder}/run.py", launch=launch, image=image,
        consumes=tuple(consumes.split()), produces=tuple(produces.split()), gpu=gpu, summary=summary,
        outputs=tuple(outputs.items()) if isinstance(outputs, dict) else (),
        output_files=outputs if isinstance(outputs, str) else None, checks=tuple(checks.split()),
        stands_in_for=tuple(stands_in_for.split()), trains_on=trains_on, metrics=reader,
        rl_objective=rl_objective,
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
           {"path": "{checkpoint.save}"}, "layout megatron-keys blend-mix training-data", trains_on="pretrain-data"),
    _stage("sft", "sft", "megatron", "torchrun", "nemo", "pretrain-checkpoint sft-data", "sft-checkpoint", True,
           "Supervised fine-tuning on packed Parquet (answer-only loss): Megatron-Bridge, or -c local on this machine.",
           {"path": "{checkpoint.save}"}, "layout megatron-keys training-data", trains_on="sft-data"),
    _stage("convert", "convert", "convert", "torchrun", "nemo", "sft-checkpoint", "hf-checkpoint", True,
           "Convert checkpoints between the Hugging Face and Megatron forms: Megatron-Bridge's AutoBridge, or -c local "
           "on this machine.",
           {"path": "{convert.output_dir}"}, "layout megatron-keys"),
    _stage("rlvr", "rlvr", "rl", "ray", "nemo-rl", "hf-checkpoint rl-data", "rl-checkpoint", True,
           "Reinforcement learning with verifiable rewards (GRPO) on NeMo RL; -c teacher-<slot> trains MOPD teachers.",
           # the Hugging Face form of the newest step (nemotron.runtime.rl.nemo_rl.finish; the run records hf/step_N)
           {"path": "{checkpointing.checkpoint_dir}/hf/latest", "checkpoint_dir": "{checkpointing.checkpoint_dir}"},
           "layout nemo-rl", rl_objective="reward"),
    _stage("mopd-warmup", "mopd-warmup", "rl", "ray", "nemo-rl", "rl-checkpoint rl-data", "mopd-warmup-checkpoint", True,
           "MOPD warmup: the teacher panel answers the RL prompts, the RLVR student is fine-tuned on the answers "
           "(NeMo RL's SFT), so MOPD's rollouts start near the teachers; -c local on this machine.",
           {"path": "{checkpointing.checkpoint_dir}/hf/latest", "checkpoint_dir": "{checkpointing.checkpoint_dir}"},
           "mopd-warmup", metrics="mopd-warmup"),
    _stage("mopd", "mopd", "rl", "ray", "nemo-rl", "mopd-warmup-checkpoint rl-checkpoint rl-data", "mopd-checkpoint", True,
           "Multi-teacher on-policy distillation on NeMo RL.",
           {"path": "{checkpointing.checkpoint_dir}/hf/latest", "checkpoint_dir": "{checkpointing.checkpoint_dir}"},
           "layout nemo-rl", rl_objective="distillation"),
    _stage("mtp-boost", "mtp-boost", "megatron", "torchrun", "nemo", "mopd-checkpoint rl-data sft-data", "mtp-checkpoint",
           True,
           "MTP boosting: freeze the backbone, train the shared-weight MTP head (forward KL to the backbone at "
           "temperature T over an N-step rollout), report acceptance length before/after; -c local on this machine.",
           {"path": "{mtp_boost.output_dir}"}, "layout megatron-keys mtp-boost", stands_in_for="mopd-checkpoint",
           metrics="mtp-boost"),
    _stage("quantize", "quantize", "quantize", "torchrun", "nemo", "mopd-checkpoint", "quantized-checkpoint", True,
           "NVFP4 + FP8 post-training quantization with NVIDIA Model Optimizer.",
           # source: the model it quantized (eval -c local compares the export with it: the same model, before/after)
           {"path": "{export.output_dir}", "source": "{quantization.source?}"}, "layout quantize"),
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
