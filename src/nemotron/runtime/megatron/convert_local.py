"""``backend: local`` of ``ultra3 convert``: a Hugging Face checkpoint's config rewritten to the v4 form on this machine."""

from __future__ import annotations

import re
from pathlib import Path

from nemotron.errors import ConfigError, Problem, did_you_mean
from nemotron.runtime.common.convert import ConfigFormError, convert_checkpoint_config
from nemotron.runtime.common.model import check_hf_folder


#: The one direction the local backend converts (a Hugging Face config rewritten to the v4 form).
LOCAL_DIRECTION = "hf_v5_to_v4"


def direction_refusal(direction: object) -> str | None:
    """The local backend's refusal of ``convert.direction`` (one line, a did-you-mean for a near miss of
    :data:`LOCAL_DIRECTION`), or None. Said by :func:`local_main` and, before anything runs, by the dry run
    (:func:`nemotron.validation.checks.validate_local`, rule ``local-convert``)."""
    if direction == LOCAL_DIRECTION:
        return None
    maybe = did_you_mean(direction, (LOCAL_DIRECTION, "hf_to_megatron", "megatron_to_hf"))
    return (f"convert.direction={direction!r}: " + (f"{maybe} " if maybe else "")
            + f"the local backend only rewrites HF configs ({LOCAL_DIRECTION}); Megatron <-> HF conversion "
            "(hf_to_megatron, megatron_to_hf) runs in the NeMo container (-c tiny or default on a Slurm profile)")


def option_problems(conv: dict) -> list[Problem]:
    """The local backend's word on the ``convert`` keys it does not act on (rule ``local-convert``), said by
    :func:`local_main` and, before anything runs, by the dry run (:func:`nemotron.validation.checks.validate_local`):

    * ``convert.hf_config_form`` other than ``v4`` (or null): an **error**; the one local direction,
      :data:`LOCAL_DIRECTION`, writes the v4 form (``hybrid_override_pattern``, what NeMo RL reads), so a ``v5``
      asked for would be written as v4 without a word;
    * ``convert.device: gpu``: a **warning**; rewriting a config and copying files uses no GPU, whatever the key says;
    * ``convert.dtype`` set (``-c local`` sets null): a **warning**; the weights are copied, never cast.

    Returns: the problems, each naming its key and value (empty when there is nothing to say).
    """
    out: list[Problem] = []
    form = conv.get("hf_config_form")
    if form is not None and form != "v4":
        out.append(Problem("convert.hf_config_form", form, f"the local backend's one direction ({LOCAL_DIRECTION}) "
                           "writes config.json in the v4 form (hybrid_override_pattern), never another",
                           "v4 (or null); a v5 config (layers_block_type) comes from megatron_to_hf on a Slurm profile "
                           "(-c tiny or default)", rule="local-convert"))
    device = conv.get("device")
    if isinstance(device, str) and device.lower() == "gpu":
        out.append(Problem("convert.device", device, "ignored by the local backend: it rewrites config.json and copies "
                           "the weights in one process, on no GPU", "cpu", rule="local-convert", severity="warning"))
    dtype = conv.get("dtype")
    if dtype is not None:
        out.append(Problem("convert.dtype", dtype, "ignored by the local backend: it copies the weights as they are "
                           "(no cast; config.json keeps its torch_dtype)", "null (-c local's value); a cast to "
                           "bfloat16/float16/float32 is the Megatron-Bridge conversion's (-c tiny or default)",
                           rule="local-convert", severity="warning"))
    return out


def _recorded_as(folder: Path) -> str | None:
    """The artifact record(s) on this machine whose ``path`` is ``folder`` (``"sft-checkpoint v1, imported"``;
    ``", made by sft -c local"`` for a run's output), newest first, or None: the words that tell a user which
    record a stage took. Reads the artifact store (:mod:`nemotron.config.artifacts`); nothing when it is absent."""
    from nemotron.config import artifacts

    found = []
    try:
        for name in artifacts.known_names():
            for v in reversed(artifacts.versions(name)):
                rec = artifacts.lookup(name, v)
                if rec and rec.get("path") and Path(str(rec["path"])).expanduser().absolute() == folder:
                    how = "imported" if rec.get("stage") == "import" else (
                        f"made by {rec.get('stage')}" + (f" -c {rec['config']}" if rec.get("config") else ""))
                    found.append(f"{name} v{v}, {how}")
    except (OSError, ValueError, ConfigError):  # an unreadable store names nothing; the refusal stands
        return None
    return "; ".join(found[:2]) or None


def source_refusal(conv: dict) -> str | None:
    """What the local convert refuses about ``convert.source`` before it writes anything, or None: the folder's
    weights (:func:`nemotron.runtime.common.model.resolve_weights`) and its ``config.json`` read and rewritten in
    memory to the v4 form (:func:`nemotron.runtime.common.convert.v5_to_v4`: a NemotronH config with
    ``layers_block_type`` or ``hybrid_override_pattern``). The one check of both :func:`local_main` and the dry
    run (:func:`nemotron.validation.checks.validate_local`, rule ``local-convert``), so the dry run never calls
    valid a source the run refuses. A source not set or still a ``${...}`` reference is None here (the run says so
    itself; the dry run's unresolved-value check names it); so is one an earlier stage of the same ``pipe`` will
    write (:func:`nemotron.config.artifacts.is_planned`). A source absent on this machine is refused.

    Returns:
        one line: ``<folder>/config.json (<artifact> v<N>, imported): <what>; <hint>``.
    """
    import json

    from nemotron.runtime.common.convert import v5_to_v4
    from nemotron.runtime.common.model import ModelError, resolve_weights

    source = conv.get("source")
    if not isinstance(source, str) or not source or "${" in source:
        return None
    path = Path(source).expanduser().absolute()
    if not path.exists():
        from nemotron.config.artifacts import is_planned

        if is_planned(source):  # an earlier stage of this pipe writes it
            return None
        return (f"convert.source: {path}: no such folder (the checkpoint to convert); set convert.source to a Hugging "
                "Face checkpoint folder (config.json + model.safetensors) or a run folder with checkpoint-<step> "
                "folders, or ${art:sft-checkpoint,path}")
    try:
        folder = resolve_weights(path)
    except ModelError as exc:
        return f"convert.source: {exc}"
    config = folder / "config.json"
    try:
        v5_to_v4(json.loads(config.read_text(encoding="utf-8")))
    except (OSError, ValueError, ConfigFormError) as exc:
        what = f"cannot read: {exc}" if isinstance(exc, (OSError, json.JSONDecodeError)) else str(exc)
        record = _recorded_as(path) or (_recorded_as(folder) if folder != path else None)
        return (f"{config}" + (f" ({record})" if record else "") + f": {what}; the local convert rewrites a "
                "NemotronH config.json (model_type nemotron_h with layers_block_type or hybrid_override_pattern): "
                "set convert.source to such a checkpoint" + (", or import one in place of that record" if record
                                                             else ""))
    try:  # what `model import` checks: its output is recorded as hf-checkpoint, which later stages load
        check_hf_folder(folder, tokenizer_folder(path, folder))
    except ConfigError as exc:
        return (f"convert.source: {exc.message}; the output is recorded as hf-checkpoint, which the stages after it "
                f"load: {exc.hint}")
    return None


def tokenizer_folder(source: Path, weights: Path) -> Path:
    """Where the tokenizer of the checkpoint at ``source`` (weights in ``weights``) lies: ``weights``, ``source`` or
    the run folder above a ``checkpoint-<step>`` when one holds tokenizer files, else the ``tokenizer/`` of the data
    its ``lineage.json`` names (a local SFT run's folder: :func:`nemotron.runtime.rl.rl_data.find_tokenizer`, what
    the RL stages load), else ``weights`` (which then has none)."""
    from nemotron.runtime.common.model import TOKENIZER_FILES

    for cand in (weights, source, weights.parent):
        if any((cand / f).is_file() for f in TOKENIZER_FILES):
            return cand
    from nemotron.runtime.rl.rl_data import RLDataError, find_tokenizer

    try:
        return find_tokenizer(weights, key="convert.source")
    except RLDataError:
        return weights


#: Folder names that say which save, not which model (a run's ``checkpoint-<step>``, NeMo RL's ``hf/step_N`` or
#: ``hf/latest``, Megatron's ``iter_N``): the output is named after the folder above them.
_GENERIC = re.compile(r"^(checkpoint-\d+|step_\d+|iter_\d+|latest|hf)$")


def output_name(source: str) -> str:
    """The output folder's name for ``convert.output_dir: null``: ``<the source folder's name>-hf``
    (``/ckpt/ultra3-sft-local`` -> ``ultra3-sft-local-hf``, as ``-c local`` named it before; ``.../hf1`` ->
    ``hf1-hf``), the names of :data:`_GENERIC` save folders skipped."""
    path = Path(source).expanduser().absolute()
    while _GENERIC.match(path.name) and path.parent != path:
        path = path.parent
    return f"{path.name or 'checkpoint'}-hf"


def local_main(cfg: dict) -> int:
    """``backend: local`` of ``ultra3 convert``: ``convert.direction: hf_v5_to_v4`` on a Hugging Face
    checkpoint folder (config.json rewritten to the v4 form, weights copied). Returns the exit code."""
    import sys

    from nemotron.runtime.common.model import ModelError, resolve_weights

    stage = "ultra3 convert"
    conv = cfg.get("convert") or {}
    refusal = direction_refusal(conv.get("direction"))
    if refusal is not None:  # the dry run refuses it too (exit 2): a config problem
        print(f"{stage}: {refusal}", file=sys.stderr)
        return 2
    options = option_problems(conv)
    for p in options:  # the dry run says the same (an error: exit 2, a config problem; a warning: said, then run)
        print(f"{stage}: {p.severity}: {p.render()}", file=sys.stderr)
    if any(p.severity == "error" for p in options):
        return 2
    source, output = conv.get("source"), conv.get("output_dir")
    if not source or not output or "${" in str(source):
        print(f"{stage}: convert.source={source!r} / convert.output_dir={output!r}: both must be set", file=sys.stderr)
        return 1
    refusal = source_refusal(conv)
    if refusal is not None:  # the dry run refuses it too (exit 2): an input problem, said before anything is written
        print(f"{stage}: {refusal}", file=sys.stderr)
        return 2
    try:
        folder = resolve_weights(Path(source).expanduser().absolute())
        out = convert_checkpoint_config(folder, Path(output).expanduser().absolute(), "v4")
    except (ConfigFormError, ModelError, OSError) as exc:
        print(f"{stage}: {exc}", file=sys.stderr)
        return 1
    print(f"{stage}: {folder} -> {out} (config.json in the v4 form; weights copied)")
    return 0
