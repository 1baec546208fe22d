"""``model import PATH`` and ``data import PATH``: register an existing checkpoint or prepared data folder as an
artifact, so that the stages that consume that artifact start from it (released weights, a NeMo RL ``step_N``,
data prepared elsewhere).

The folder is checked first, with the readers the consumers use; a bad folder is one line naming the missing or bad
file (exit 2) and nothing is recorded. The record (:func:`nemotron.config.artifacts.record`) is made for runs on this
machine: ``site`` ``here:<hostname>`` and ``promoted`` (an imported folder lies outside the default output folders,
and an import is an explicit choice), with ``config`` = the consumer config it is for (``-c``, default ``default``:
:func:`nemotron.config.artifacts.accepted_configs`), ``stage`` ``import`` and ``job_id`` ``local`` (so a record
whose folder is later deleted is an error, never silently replaced: :func:`nemotron.config.artifacts.check_present`).

Checkpoint forms (:func:`checkpoint_form`):

* ``hf``: a Hugging Face folder: ``config.json`` (a JSON object with ``vocab_size``), its weights
  (``model.safetensors``, or ``model.safetensors.index.json`` whose ``weight_map`` names shards that all exist), each
  shard's safetensors header parsing and covering exactly the file's bytes (a truncated copy is refused), and a
  tokenizer (``tokenizer.json`` or ``tokenizer.model``) whose ids fit ``config.json``'s ``vocab_size``.
* ``megatron``: a Megatron distributed checkpoint: ``latest_checkpointed_iteration.txt`` naming ``iter_NNNNNNN/``
  with its ``metadata.json`` (``sharded_backend``) and, for ``torch_dist``, the ``.metadata`` file.
* ``nemo-rl``: a NeMo RL ``step_N`` (``config.yaml`` and a non-empty ``policy/weights/``); the record's ``path`` is its
  Hugging Face form ``<checkpoint_dir>/hf/step_N`` (what rlvr's and mopd's consumers load), which must exist and pass
  the ``hf`` checks.

``-c`` must be a config of a consumer of the artifact (:func:`check_config`: a typo would record an import no run
takes); a Hugging Face folder that is not the consumers' model is recorded with a warning (:func:`model_mismatch`);
the folder's real path is recorded, and importing it again for the same config adds no version
(:func:`nemotron.config.artifacts.record`; ``imported_at`` is bookkeeping).

A Hugging Face folder is also taken as ``pretrain-checkpoint`` or ``sft-checkpoint`` for a ``-c`` whose consumers all
run on this machine (``-c local``: the local trainer loads that form; :func:`local_consumers`), so a local chain can
start from a base model made elsewhere: ``model import BASE --as pretrain-checkpoint -c local``.
"""


import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from nemotron.errors import ConfigError

#: The checkpoint artifacts, and the forms each one's consumers load (``model.name``/``convert.source``: a Hugging
#: Face folder; ``checkpoint.pretrained_checkpoint``: a Megatron one).
CHECKPOINT_FORMS: dict[str, tuple[str, ...]] = {
    "pretrain-checkpoint": ("megatron",),
    "sft-checkpoint": ("megatron",),
    "hf-checkpoint": ("hf",),
    "rl-checkpoint": ("hf", "nemo-rl"),
    "mopd-checkpoint": ("hf", "nemo-rl"),
}
#: The artifact a checkpoint of each form is recorded as when ``--as`` is not given.
DEFAULT_ARTIFACT = {"hf": "hf-checkpoint", "megatron": "pretrain-checkpoint", "nemo-rl": "rl-checkpoint"}
DATA_ARTIFACTS = ("pretrain-data", "sft-data", "rl-data")
_STEP_RE = re.compile(r"^step_(\d+)$")


def _fail(message: str, hint: str) -> ConfigError:
    return ConfigError(message, hint + "; nothing was recorded")


def _json_object(path: Path) -> dict[str, Any]:
    """:func:`nemotron.runtime.common.model.json_object`, its hint ending "nothing was recorded"."""
    from nemotron.runtime.common.model import json_object

    try:
        return json_object(path)
    except ConfigError as exc:
        raise _fail(exc.message, exc.hint or "") from None


# ------------------------------------------------------------------------------------------------ checkpoints
def checkpoint_form(path: Path) -> str | None:
    """``"hf"``, ``"megatron"`` or ``"nemo-rl"`` by the files ``path`` holds (``config.json``;
    ``latest_checkpointed_iteration.txt`` or an ``iter_N`` folder's ``metadata.json``; ``config.yaml`` with
    ``policy/``), or None."""
    if (path / "config.json").is_file():
        return "hf"
    if (path / "latest_checkpointed_iteration.txt").is_file() or any(path.glob("iter_*")) \
            or (path.name.startswith("iter_") and (path / "metadata.json").is_file()):
        return "megatron"
    if (path / "config.yaml").is_file() and (path / "policy").is_dir():
        return "nemo-rl"
    return None


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file, or None (:func:`nemotron.runtime.common.model.safetensors_problem`,
    the check the local convert and a resume use too)."""
    from nemotron.runtime.common.model import safetensors_problem as problem

    return problem(path)


def check_hf(path: Path) -> dict[str, Any]:
    """Check a Hugging Face checkpoint folder (module docstring) with
    :func:`nemotron.runtime.common.model.check_hf_folder`, the check the local convert makes before it records its
    output; returns the record fields it adds: ``form``, ``model_type``, ``vocab_size``, ``shards``.

    Raises:
        ConfigError: the first missing or bad file, by name (its hint ends "nothing was recorded").
    """
    from nemotron.runtime.common.model import check_hf_folder

    try:
        return check_hf_folder(path)
    except ConfigError as exc:
        raise _fail(exc.message, exc.hint or "") from None


def check_megatron(path: Path) -> dict[str, Any]:
    """Check a Megatron distributed checkpoint (module docstring); returns ``form``, ``iteration``.

    Raises:
        ConfigError: the first missing or bad file, by name.
    """
    if path.name.startswith("iter_"):
        folder, step = path, int(path.name[5:]) if path.name[5:].isdigit() else None
    else:
        tracker = path / "latest_checkpointed_iteration.txt"
        if not tracker.is_file():
            raise _fail(f"{tracker}: missing (Megatron writes it last, after a save completes)",
                        "the checkpoint folder of a finished save (the one holding iter_NNNNNNN/)")
        text = tracker.read_text(encoding="utf-8").strip()
        if not text.isdigit():
            raise _fail(f"{tracker}: {text!r} is not an iteration number", "the tracker file Megatron wrote")
        step = int(text)
        folder = path / f"iter_{step:07d}"
        if not folder.is_dir():
            raise _fail(f"{folder}: missing (named by {tracker.name})", "copy the iteration folder the tracker names")
    meta = _json_object(folder / "metadata.json") if (folder / "metadata.json").is_file() else None
    if meta is None or not meta.get("sharded_backend"):
        raise _fail(f"{folder / 'metadata.json'}: missing or without sharded_backend (not a distributed checkpoint)",
                    "a Megatron distributed checkpoint (torch_dist), as Megatron-Bridge saves it")
    if meta.get("sharded_backend") == "torch_dist" and not (folder / ".metadata").is_file():
        raise _fail(f"{folder / '.metadata'}: missing (torch_dist's index of the shards)",
                    "copy the whole iteration folder, hidden files included")
    return {"form": "megatron", "iteration": step}


def check_nemo_rl(path: Path) -> dict[str, Any]:
    """Check a NeMo RL ``step_N`` (module docstring); returns ``form``, ``step``, ``checkpoint_dir``, ``source`` and
    ``path`` = its Hugging Face form, with that folder's fields (:func:`check_hf`).

    Raises:
        ConfigError: the first missing or bad file, by name.
    """
    m = _STEP_RE.match(path.name)
    if not m:
        raise _fail(f"{path}: a NeMo RL checkpoint is a step_N folder", "the step_N folder under checkpoint_dir")
    if not (path / "config.yaml").is_file():
        raise _fail(f"{path / 'config.yaml'}: missing", "the step_N folder as NeMo RL saved it")
    weights = path / "policy" / "weights"
    if not weights.is_dir() or not any(weights.iterdir()):
        raise _fail(f"{weights}: missing or empty", "the step_N folder as NeMo RL saved it")
    step = int(m.group(1))
    hf = path.parent / "hf" / f"step_{step}"
    if not (hf / "config.json").is_file():
        raise _fail(f"{hf}: {path.name} has no Hugging Face form (the consumers load one)",
                    "convert it with NeMo RL's examples/converters/convert_dcp_to_hf.py into that folder "
                    "(with policy/tokenizer's files), or import a Hugging Face folder")
    fields = check_hf(hf)
    return {**fields, "form": "nemo-rl", "path": str(hf), "step": step, "checkpoint_dir": str(path.parent),
            "source": str(path)}


def local_consumers(artifact: str, config: str) -> list[str]:
    """The stages whose config ``config`` consumes ``artifact``, when every one of them runs on this machine
    (``backend: local``, which loads a Hugging Face folder wherever a cluster config loads a Megatron checkpoint:
    ``sft -c local``'s ``checkpoint.pretrained_checkpoint``); ``[]`` when none does or any runs on a cluster.

    Raises:
        ConfigError: a stage config that cannot be read.
    """
    from nemotron.config.compile import config_artifacts, config_backend
    from nemotron.config.paths import config_names
    from nemotron.config.registry import STAGES

    found = []
    for stage in STAGES:
        if config not in config_names(stage) or artifact not in config_artifacts(stage, config)[0]:
            continue
        if config_backend(stage, config) != "local":
            return []
        found.append(stage.name)
    return found


def check_checkpoint(path: Path, artifact: str | None, config: str = "default") -> tuple[str, dict[str, Any]]:
    """The artifact name and record fields of checkpoint folder ``path`` (``artifact``: ``--as``, else by its form:
    :data:`DEFAULT_ARTIFACT`), for the consumers run with ``-c config``: a Hugging Face folder is taken as any
    checkpoint artifact whose consumers of that config all run on this machine (:func:`local_consumers`: ``model
    import BASE --as pretrain-checkpoint -c local`` starts ``sft -c local``).

    Raises:
        ConfigError: not a folder, an unknown artifact, a form the artifact's consumers do not load, a bad file.
    """
    if not path.is_dir():
        raise _fail(f"{path}: {'not a folder' if path.exists() else 'does not exist'}", "a checkpoint folder")
    if artifact is not None and artifact not in CHECKPOINT_FORMS:
        raise _fail(f"--as {artifact}: not a checkpoint artifact", f"one of {', '.join(CHECKPOINT_FORMS)}")
    form = checkpoint_form(path)
    if form is None:
        raise _fail(f"{path}: neither a Hugging Face folder (config.json), a Megatron checkpoint "
                    "(latest_checkpointed_iteration.txt) nor a NeMo RL step_N (config.yaml, policy/)",
                    "the checkpoint's own folder")
    name = artifact or DEFAULT_ARTIFACT[form]
    if form not in CHECKPOINT_FORMS[name] and not (form == "hf" and local_consumers(name, config)):
        raise _fail(f"{path}: a {form} checkpoint; the consumers of {name} load a {' or '.join(CHECKPOINT_FORMS[name])} "
                    "checkpoint", "convert it first (nemotron ultra3 convert), or import it as "
                    + " or ".join(a for a, forms in CHECKPOINT_FORMS.items() if form in forms)
                    + (" (or for the local consumers: -c local)" if form == "hf" else ""))
    fields = {"hf": check_hf, "megatron": check_megatron, "nemo-rl": check_nemo_rl}[form](path)
    return name, {"path": str(path), **fields}


# ------------------------------------------------------------------------------------------------ data
#: The hint for a copied data prep output whose files name the original's (absolute paths, as data prep wrote them
#: before it wrote them relative to the output folder).
OLD_ABSOLUTE_HINT = ("a copy of an output written with absolute paths (by an older data prep); re-run the data prep "
                     "stage (force=true) and copy its new output, whose paths are relative to its folder, or import "
                     "the original folder")


def _tokenizer_inside(path: Path) -> None:
    """Refuse a data prep output whose manifest records its tokenizer folder (``tokenizer.megatron.tokenizer_model``,
    what the training stages load when ``tokenizer.tokenizer_model`` is unset) outside ``path``: a copy of an older
    output, whose manifest names the original's. A manifest without that record is left to the consumers' checks.

    Raises:
        ConfigError: the manifest is not a JSON object, or names a tokenizer folder outside ``path``.
    """
    from nemotron.data import outputs

    f = path / outputs.MANIFEST
    if not f.is_file():
        return
    tok = _json_object(f).get("tokenizer")
    record = tok.get("megatron") if isinstance(tok, dict) else None
    model = record.get("tokenizer_model") if isinstance(record, dict) else None
    if not isinstance(model, str) or not os.path.isabs(model):
        return
    root, full = Path(os.path.realpath(path)), Path(os.path.realpath(model))
    if full != root and root not in full.parents:
        raise _fail(f"{f}: tokenizer.megatron.tokenizer_model={model!r} lies outside the folder you import: the "
                    "consumers would load that tokenizer, not this folder's", OLD_ABSOLUTE_HINT)


def check_data(path: Path, artifact: str) -> dict[str, Any]:
    """Check a prepared data folder as the consumers of ``artifact`` read it; returns the record fields (those
    the stages' configs take: ``blend_path``; ``train_path``/``valid_path``/``metadata_path``/``pack_size``;
    ``train_path``/``validation_path``).

    * ``pretrain-data``: ``blend.json`` parses with the trainer's reader and every prefix has its ``.bin`` and
      ``.idx`` of the right size, every index entry inside the ``.bin``
      (:func:`nemotron.validation.data.training_data_problems`, :func:`nemotron.data.indexed.bin_size_problem`)
      and, where the shard has its data prep receipt, the ``.idx`` hash the receipt recorded
      (:func:`nemotron.data.indexed.receipt_problem`), inside ``path`` (a copy
      of an output whose blend.json names the original's shards by absolute path is refused:
      :func:`nemotron.data.blend.prefixes_outside`).
    * ``pretrain-data`` and ``sft-data``: the manifest's tokenizer folder, when recorded absolute, lies inside
      ``path`` (:func:`_tokenizer_inside`).
    * ``sft-data``: ``manifest.json`` (a JSON object), ``data/training_<N>.idx.parquet`` and
      ``data/validation_<N>.idx.parquet`` (read and checked row by row:
      :func:`nemotron.runtime.megatron.sft_data.read_packed`) and ``data/<N>_metadata.jsonl``. An output whose
      manifest's ``loader.packed_val_data_path`` is null (data prep sft held out no record) has no validation file
      and is recorded with ``valid_path`` null, as data prep sft records it.
    * ``rl-data``: ``train.jsonl`` and ``validation.jsonl``, every line read by
      :func:`nemotron.runtime.rl.rl_data.read_rows`.

    Raises:
        ConfigError: the first missing or bad file, by name.
    """
    from nemotron.data import outputs

    if not path.is_dir():
        raise _fail(f"{path}: {'not a folder' if path.exists() else 'does not exist'}", "a prepared data folder")
    if artifact == "pretrain-data":
        from nemotron.validation.data import training_data_problems

        blend = path / outputs.BLEND
        if not blend.is_file():
            raise _fail(f"{blend}: missing", "a data prep pretrain output (blend.json beside its .bin/.idx shards)")
        problems = training_data_problems("pretrain", {"data": {"per_split_data_args_path": str(blend)}})
        if problems:
            raise _fail(f"{blend}: {problems[0].message}", problems[0].valid or "the output as data prep wrote it")
        from nemotron.data.blend import prefixes_outside, read_blend_pairs
        from nemotron.data.indexed import receipt_problem

        for pairs in read_blend_pairs(blend).values():  # parsed above: training_data_problems found no problem
            for _w, prefix in pairs:
                if (changed := receipt_problem(prefix)) is not None:
                    raise _fail(f"{blend}: {changed}", "the shard as data prep wrote it (copy it again, or run the "
                                "data prep again)")
        outside = prefixes_outside(blend, path)
        if outside:
            where = sorted({str(p.parent.parent) for p in outside})
            raise _fail(f"{blend}: names {len(outside)} shard prefix(es) outside the folder you import, in "
                        f"{', '.join(where[:2])} ({outside[0]}...): the consumers would read those, not this folder's",
                        OLD_ABSOLUTE_HINT)
        _tokenizer_inside(path)
        return {"path": str(path), "blend_path": str(blend)}
    if artifact == "sft-data":
        from nemotron.runtime.megatron.pretrain_data import DataError
        from nemotron.runtime.megatron.sft_data import read_packed

        if not (path / outputs.MANIFEST).is_file():
            raise _fail(f"{path / outputs.MANIFEST}: missing", "a data prep sft output (its version folder)")
        _tokenizer_inside(path)
        loader = _json_object(path / outputs.MANIFEST).get("loader")
        # data prep sft writes no validation file when no record fell in the held-out share, and records the
        # output with valid_path null (the sft stage then runs no validation): the import takes it the same way
        no_valid = isinstance(loader, dict) and "packed_val_data_path" in loader and loader["packed_val_data_path"] is None
        sizes = sorted({int(m.group(1)) for p in (path / "data").glob("training_*.idx.parquet")
                        if (m := re.match(r"^training_(\d+)\.idx\.parquet$", p.name))})
        if len(sizes) != 1:
            raise _fail(f"{path / 'data'}: {'no' if not sizes else 'several'} training_<pack size>.idx.parquet"
                        + (f" ({', '.join(map(str, sizes))})" if sizes else ""),
                        "one data prep sft output (one pack size)")
        pack = sizes[0]
        fields = {"path": str(path), "pack_size": str(pack),
                  "train_path": str(outputs.sft_split_file(path, pack, "train")),
                  "valid_path": str(outputs.sft_split_file(path, pack, "valid")),
                  "metadata_path": str(outputs.sft_metadata_file(path, pack))}
        if no_valid and not Path(fields["valid_path"]).exists():
            fields["valid_path"] = None
        for key in ("train_path", "valid_path", "metadata_path"):
            if fields[key] is not None and not Path(fields[key]).is_file():
                raise _fail(f"{fields[key]}: missing", "the output as data prep sft wrote it"
                            + ("" if key != "valid_path" else " (its manifest.json names a validation file)"))
        for key in ("train_path", "valid_path"):
            if fields[key] is None:
                continue
            try:
                read_packed(fields[key], pack)
            except DataError as exc:
                raise _fail(str(exc), "the output as data prep sft wrote it") from None
        return fields
    if artifact == "rl-data":
        from nemotron.runtime.rl.rl_data import RLDataError, read_rows

        fields = {"path": str(path), "train_path": str(path / outputs.RL_TRAIN),
                  "validation_path": str(path / outputs.RL_VALID)}
        for key in ("train_path", "validation_path"):
            if not Path(fields[key]).is_file():
                raise _fail(f"{fields[key]}: missing", "a data prep rl output (train.jsonl and validation.jsonl)")
            try:
                read_rows(Path(fields[key]))
            except RLDataError as exc:
                raise _fail(str(exc), "the output as data prep rl wrote it") from None
        return fields
    raise _fail(f"--as {artifact}: not a data artifact", f"one of {', '.join(DATA_ARTIFACTS)}")


# ------------------------------------------------------------------------------------------------ consumers
def consumer_configs(artifact: str) -> dict[str, list[str]]:
    """``{config: [stage, ...]}``: the configs of the stages that consume ``artifact`` (as their files name it:
    :func:`nemotron.config.compile.config_artifacts`), each with the stages whose config of that name does.

    Raises:
        ConfigError: a stage config that cannot be read.
    """
    from nemotron.config.compile import config_artifacts
    from nemotron.config.paths import config_names
    from nemotron.config.registry import STAGES

    out: dict[str, list[str]] = {}
    for stage in STAGES:
        for name in config_names(stage):
            if artifact in config_artifacts(stage, name)[0]:
                out.setdefault(name, []).append(stage.name)
    return out


def check_config(artifact: str, config: str) -> list[str]:
    """The stages that take an import of ``artifact`` recorded for ``-c config`` (a consumer run with ``-c X``
    takes the records of :func:`nemotron.config.artifacts.accepted_configs` ``(X)``: ``local`` also ``tiny``'s, a
    cycle config its base's...).

    Raises:
        ConfigError: no consumer of ``artifact`` runs with a config that takes it (a typo of ``-c``: the record
            would be found by no run); the consumers' configs listed, the closest named.
    """
    from nemotron.config.artifacts import accepted_configs
    from nemotron.errors import did_you_mean

    configs = consumer_configs(artifact)
    takers = sorted({st for name, stages in configs.items() if config in accepted_configs(name) for st in stages})
    if not takers:
        close = did_you_mean(config, list(configs))
        raise _fail(f"-c {config}: no stage that consumes {artifact} has a config {config!r} (its record would be "
                    "taken by no run)", (f"{close} " if close else "") + f"the configs of its consumers: "
                    f"{', '.join(configs) or 'none'}")
    return takers


def not_nemotron_h(path: Path, fields: dict[str, Any], artifact: str, config: str) -> None:
    """Refuse a Hugging Face checkpoint whose ``config.json`` ``model_type`` is not ``nemotron_h``: every consumer
    of every checkpoint artifact (:data:`CHECKPOINT_FORMS`: the stages of this project) builds NemotronH, so such a
    record, the latest for ``-c config``, would be taken by the next run and fail there (transformers' NemotronH
    classes, Megatron-Bridge's NemotronH bridge, NeMo RL's v4 view). There is no flag to record it anyway: a run
    can still be pointed at any folder by its own key (``policy.model_name=PATH``). Another form: nothing here.

    Raises:
        ConfigError: exit 2, naming the config.json, its ``model_type`` and ``architectures`` and the consumers.
    """
    if fields.get("form") != "hf":
        return
    cfg = _json_object(Path(str(fields["path"])) / "config.json")
    if cfg.get("model_type") == "nemotron_h":
        return
    shown = f"{path / 'config.json'}" if str(fields["path"]) == str(path) else f"{fields['path']}/config.json"
    takers = ", ".join(f"{st} -c {config}" for st in check_config(artifact, config)[:3])
    raise _fail(f"{shown}: model_type={cfg.get('model_type')!r} (architectures {cfg.get('architectures')!r}) is not "
                f"NemotronH (nemotron_h), the model every consumer of {artifact} builds ({takers}): none could load it",
                "import a NemotronH checkpoint (config.json model_type nemotron_h); to start one run from another "
                "folder, give that run the folder by its key (e.g. policy.model_name=PATH)")


def model_mismatch(path: Path, fields: dict[str, Any], artifact: str, config: str) -> list[str]:
    """Warnings for a NemotronH Hugging Face checkpoint (:func:`not_nemotron_h` refuses any other model type) that
    is not the model its consumers build: its sizes (:data:`nemotron.runtime.common.model.ARCH_FIELDS`,
    ``num_hidden_layers``) differ from the catalogue model (``model.name``) of a consumer config that takes the
    import. ``[]`` for another form, or when they agree."""
    if fields.get("form") != "hf":
        return []
    from nemotron.config import catalogue
    from nemotron.config.artifacts import accepted_configs
    from nemotron.config.compile import _raw_tree
    from nemotron.config.registry import STAGES
    from nemotron.runtime.common.model import ARCH_FIELDS

    cfg = _json_object(Path(str(fields["path"])) / "config.json")
    shown = f"{path / 'config.json'}" if str(fields["path"]) == str(path) else f"{fields['path']}/config.json"
    if cfg.get("model_type") != "nemotron_h":
        return []
    out: list[str] = []
    for name, stages in consumer_configs(artifact).items():
        if config not in accepted_configs(name):
            continue
        for stage_name in stages:
            stage = next(s for s in STAGES if s.name == stage_name)
            model = (_raw_tree(stage, name).get("model") or {}).get("name")
            try:
                want = catalogue.hf_config(catalogue.get(str(model)))
            except Exception:  # an interpolated or unknown name: the consumer's own dry run checks it
                continue
            diffs = [f"{k} {cfg.get(k)!r} (model.name={model}: {want.get(k)!r})"
                     for k in ("num_hidden_layers", *ARCH_FIELDS) if k in want and cfg.get(k) != want.get(k)]
            if diffs:
                out.append(f"{shown}: not the model {stage_name} -c {name} builds: " + ", ".join(diffs[:4])
                           + (f" and {len(diffs) - 4} more" if len(diffs) > 4 else "") + "; recorded anyway")
                return out
    return out


# ------------------------------------------------------------------------------------------------ record
def register(name: str, fields: dict[str, Any], config: str, env_file: str | None) -> dict[str, Any]:
    """Record ``fields`` as artifact ``name`` for consumers run with ``-c config`` on this machine (module
    docstring), in the store a stage command uses: the ``[artifacts] root`` of the env.toml found as a stage command finds it
    (``env_file``, ``$NEMOTRON_ENV_FILE``, ``./env.toml`` upward...), else the default store. Returns the record."""
    import time

    from nemotron.config import artifacts
    from nemotron.profiles.load import load_profile

    load_profile(None, env_file, {})  # the env.toml a stage command finds, its [artifacts] root checked and used
    return artifacts.record(name, {**fields, "config": config, "stage": "import", "job_id": "local",
                                   "site": artifacts.site(None), "scratch": False, "promoted": True,
                                   "imported_at": time.strftime("%Y-%m-%d %H:%M:%S")})


def _run(kind: str, path: str, artifact: str | None, config: str, env_file: str | None) -> int:
    from nemotron import report

    # the folder itself (a symlink or a trailing / names the same one): one record however it is named
    folder = Path(os.path.realpath(os.path.expanduser(path)))
    if kind == "model":
        name, fields = check_checkpoint(folder, artifact, config)
    else:
        name, fields = str(artifact), check_data(folder, str(artifact))
    check_config(name, config)
    if kind == "model":
        not_nemotron_h(folder, fields, name, config)
    warnings = model_mismatch(folder, fields, name, config) if kind == "model" else []
    rec = register(name, fields, config, env_file)
    again = "latest_at" in rec  # artifacts.record: the same output, already recorded, stamped the latest again
    for w in warnings:
        report.err(f"warning: {w}")
    typer.echo(f"[nemotron] artifact {name} v{rec['version']}: {rec['path']} ("
               + ("already recorded; the latest again, " if again else "")
               + f"imported for -c {config} on {rec['site']}; its consumers take it as ${{art:{name},path}})")
    return 0


ConfigOpt = Annotated[str, typer.Option("-c", "--config", metavar="NAME",
                                        help="The consumer config that takes it (its records' config: sft -c NAME "
                                             "reads it).")]
EnvFileOpt = Annotated[Optional[str], typer.Option("--env-file", metavar="PATH",
                                                   help="env.toml whose [artifacts] root holds the record.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks.")]
PathArg = Annotated[str, typer.Argument(metavar="PATH", show_default=False)]


def add_import_commands(tree: Any) -> None:
    """Add ``model import`` (a new ``model`` group) and ``data import`` (under the existing ``data`` group) to
    ``tree`` (a :class:`nemotron.cli.main.Tree`)."""
    model = tree.group("model", "Model checkpoints.")

    @model.command("import")
    def model_import(path: PathArg,
                     artifact: Annotated[Optional[Literal[tuple(CHECKPOINT_FORMS)]],  # type: ignore[valid-type]
                                         typer.Option(
                         "--as", help="The artifact to record (default: by the folder's form: hf-checkpoint, "
                                      "pretrain-checkpoint, rl-checkpoint for a NeMo RL step_N).")] = None,
                     config: ConfigOpt = "default", env_file: EnvFileOpt = None, debug: DebugOpt = False) -> int:
        """Register a checkpoint folder (Hugging Face, Megatron, NeMo RL step_N) as an artifact, after checking it."""
        return _run("model", path, artifact, config, env_file)

    if "data" in tree.groups:
        @tree.groups["data"].command("import")
        def data_import(path: PathArg,
                        artifact: Annotated[Literal[DATA_ARTIFACTS], typer.Option(  # type: ignore[valid-type]
                            "--as", help="The artifact to record.", show_default=False)],
                        config: ConfigOpt = "default", env_file: EnvFileOpt = None, debug: DebugOpt = False) -> int:
            """Register a prepared data folder (a data prep output's version folder) as an artifact, after checking
            it."""
            return _run("data", path, artifact, config, env_file)


__all__ = ["add_import_commands", "check_checkpoint", "check_data", "local_consumers", "register"]
