"""Launch checks of the data prep stages: what their runtimes would reject, found before anything runs.

Each data stage's runtime parses its config into ``Settings`` and its blend file before any work;
here the same parsers run at ``--dry-run`` (they import nothing heavy), plus the checks of the inputs
on this machine: every non-optional local dataset path matches files, a local tokenizer file exists
(a folder holds one), ``output_dir`` is not a file, and no input is a file the run would write or
delete (:func:`nemotron.data.driver.check_inputs`). One piece of logic each: the runtimes' own
parsers and checks, called again.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nemotron.errors import ConfigError, Problem

if TYPE_CHECKING:
    from nemotron.profiles.profile import ExecutorProfile


def _problem(exc: ConfigError, rule: str) -> Problem:
    return Problem(key="", value=None, message=exc.message, valid=exc.hint, rule=rule)


def token_dtype_fits(tokenizer: str, requested: str) -> list[Problem]:
    """Rule ``data-dtype``: an explicit ``output.dtype`` holds every token id of the tokenizer (uint16: fewer
    than 65,536 ids; Ultra's 131,072 need int32). The runtime's own choice (:func:`nemotron.data.indexed.choose_dtype`)
    on the vocabulary size read from the tokenizer file (:func:`nemotron.data.tokenizer.vocab_size_hint`);
    a hub id is checked by the run itself."""
    from nemotron.data.indexed import choose_dtype
    from nemotron.data.tokenizer import vocab_size_hint

    vocab = vocab_size_hint(tokenizer)
    if vocab is None:
        return []
    try:
        choose_dtype(vocab, requested)
    except ConfigError as exc:
        return [Problem("output.dtype", requested, exc.message.removeprefix(f"output.dtype={requested!r} ").split("; valid: ")[0] +
                        f" (tokenizer {tokenizer})", "auto or int32", rule="data-dtype")]
    return []


def runtime_module(stage: Any, cfg: dict) -> str | None:
    """The module of the runtime a data prep ``stage`` runs with ``cfg``: the one its entry script's ``BACKENDS``
    names for the config's ``backend`` (its ``DEFAULT`` when unset; :func:`nemotron.runtime.dispatch.stage_backends`,
    the table the job runs with). None for a backend without a runtime or one the entry does not have (the
    config's own check says so).

    Raises:
        KeyError: ``stage`` names no registry stage (:func:`nemotron.config.registry.get_stage`).
    """
    from nemotron.config.registry import get_stage
    from nemotron.runtime.dispatch import stage_backends

    backends, default = stage_backends(get_stage(stage.name))
    entry = backends.get(str(cfg.get("backend") or default))
    return entry.runtime.partition(":")[0] if entry is not None and entry.runtime else None


def choice_sets(stage: Any, cfg: dict) -> dict[str, tuple[str, ...]]:
    """The keys of a data prep stage whose values the runtime checks against a set, and each set
    (``{"chat.reasoning": ("auto", "off"), "policies.control_token_text": ("text", "skip", "fail"), ...}``), read
    by the runtime's own ``Settings.from_config`` on ``cfg`` (:func:`nemotron.data.driver.recorded_choices`): the
    values a ``key=VALUE`` completion offers are the ones validation accepts. ``{}`` for a stage without such a
    runtime; never raises for a config the settings refuse (the sets read before the refusal are returned)."""
    from nemotron.config.registry import get_stage
    from nemotron.data.driver import recorded_choices

    try:
        module = runtime_module(get_stage(stage.name), cfg)
        settings_cls = getattr(importlib.import_module(module), "Settings", None) if module else None
    except Exception:  # an unknown backend, a module that cannot load: no sets
        return {}
    if settings_cls is None:
        return {}
    with recorded_choices() as seen:
        try:
            settings_cls.from_config(cfg)
        except Exception:  # an unrelated key the settings refuse: the sets read so far still hold
            pass
    return dict(seen)


def validate_data(stage: Any, cfg: dict, profile: ExecutorProfile | None = None) -> list[Problem]:
    """Problems of a data prep config (errors), each the runtime's own message; ``profile`` (None: a run here)
    decides whether an unreachable hub is an error (:func:`hub_problems`). ``stage``: a registry row (or an object
    with its ``name``); the runtime checked is the one its entry script runs (:func:`runtime_module`)."""
    from nemotron.config.registry import get_stage

    row = get_stage(stage.name)
    module = runtime_module(row, cfg)
    if module is None:
        return []
    mod = importlib.import_module(module)
    if module == "nemotron.data.rl_blends":  # a released RL blend repository (backend: blends): its own checks
        return blend_repo_problems(stage, cfg, profile)
    settings_cls = getattr(mod, "Settings", None)
    if settings_cls is None:
        return []
    try:
        s = settings_cls.from_config(cfg)
    except ConfigError as exc:
        return [_problem(exc, "data-settings")]
    problems: list[Problem] = []
    written = row.written_data
    documents = written is not None and written.blend  # tokenized plain-text documents (data prep pretrain)
    out = getattr(s, "output_dir", None)
    if out and Path(out).exists() and not Path(out).is_dir():
        problems.append(Problem("output_dir", out, "is a file, not a folder", "a folder path (it is created)",
                                rule="data-output"))
    elif out and Path(out).is_dir() and getattr(s, "force", False) is not None:
        from nemotron.data.outputs import MANIFEST, PLAN, foreign_files

        foreign = [] if (Path(out) / PLAN).exists() or (Path(out) / MANIFEST).exists() else \
            foreign_files(out, getattr(settings_cls, "OUTPUT_NAMES", ()))
        if foreign:  # the run writes beside them (and says so); a rebuild never deletes them
            listed = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            problems.append(Problem("output_dir", out, f"is not empty and is not a data prep output: it holds "
                                                       f"{len(foreign)} file(s) no data prep wrote ({listed}); the run "
                                                       "writes its own files (data/, manifest.json, plan.json ...) beside them",
                                    "an empty or new folder for this output (your files are never deleted)",
                                    rule="data-output", severity="warning"))
    template = getattr(s, "template", None)
    if template:  # data prep sft's chat template: read and compiled as the run does before any work
        from nemotron.data.chat import load_template

        try:
            load_template(os.path.expanduser(template))
        except ConfigError as exc:
            problems.append(_problem(exc, "data-template"))
    chat_tokens = getattr(mod, "chat_token_problem", None)
    if chat_tokens is not None and getattr(s, "tokenizer_name", None):  # data prep sft: the chat tokens the run requires (local tokenizer file)
        refused = chat_tokens(s)
        if refused is not None:
            problems.append(_problem(refused, "data-tokenizer"))
    tokenizer = getattr(s, "tokenizer_name", None) or ""
    if tokenizer.startswith(("/", "./", "../", "~")) and not Path(os.path.expanduser(tokenizer)).exists():
        problems.append(Problem("tokenizer.name", tokenizer, "no such file or folder",
                                "a tokenizer.json, a folder with one, or a Hugging Face model id", rule="data-tokenizer"))
    if tokenizer:
        from nemotron.data.tokenizer import check_folder

        try:
            check_folder(tokenizer)
        except ConfigError as exc:
            problems.append(_problem(exc, "data-tokenizer"))
    if getattr(s, "dtype", "auto") != "auto" and tokenizer:
        problems += token_dtype_fits(tokenizer, s.dtype)
    blend_path = getattr(s, "blend_path", None)
    if not blend_path:
        return problems + hub_problems(s, None, profile, stage=stage)
    from nemotron.data.driver import check_inputs, relative_note, stage_blend, unmatched, unreadable_inputs
    from nemotron.data.sources import FORMATS, expand, is_remote, parquet_num_rows

    try:
        blend = stage_blend(s)
    except ConfigError as exc:  # a blend's problems come all at once (BlendProblems), one Problem each
        each = getattr(exc, "problems", None) or [exc.message]
        hints = getattr(exc, "hints", None) or [exc.hint] * len(each)  # each problem's own ways out
        return [*problems, *(_problem(ConfigError(m, h), "data-blend") for m, h in zip(each, hints)),
                *hub_problems(s, None, profile, stage=stage)]
    problems += [_problem(exc, "data-inputs") for exc in check_inputs(s, blend) + unreadable_inputs(blend)]
    problems += [Problem("", None, message, rule="data-blend", severity="warning") for message in blend.warnings]
    on_bad = getattr(s, "on_bad", None) or {}
    section = "on_bad" if "empty_glob" in on_bad else "policies"
    policy = (on_bad if section == "on_bad" else getattr(s, "policies", None) or {}).get("empty_glob", "fail")
    empty: list[tuple[Any, list[str]]] = []  # datasets whose every file is 0 bytes
    for ds in blend.datasets:
        if is_remote(ds.path):
            continue
        try:
            found = expand(ds.path, exclude=list(ds.exclude), fmt=ds.format if ds.format in FORMATS else None)
        except ConfigError as exc:
            problems.append(_problem(exc, "data-inputs"))
            continue
        if found and all(os.path.getsize(f) == 0 or (f.lower().endswith(".parquet") and parquet_num_rows(f) == 0)
                         for f in found):  # 0 bytes, or a Parquet file of 0 rows
            empty.append((ds, found))
            continue
        if found:
            if documents:  # the run's own refusal of too little plain text
                from nemotron.data.pretrain import text_documents_problem
                from nemotron.data.sources import detect_format, text_format

                fmt = text_format(detect_format(found[0], ds.format), ds.sample_by)
                refused = text_documents_problem(blend_path, ds, fmt, len(found), s)
                if refused is not None:
                    problems.append(_problem(refused, "data-text"))
            else:  # chat and RL records: the run's refusal of plain text
                from nemotron.data.prep import plain_text_problem
                from nemotron.data.sources import detect_format

                fmt = detect_format(found[0], ds.format if ds.format in FORMATS else None)
                refused = plain_text_problem(ds, fmt, found[0], s)
                if refused is not None:
                    problems.append(_problem(refused, "data-text"))
            continue
        if ds.optional or policy == "skip":  # the run leaves it out and says so: the same line, a warning here
            problems.append(Problem("", None, unmatched(blend, ds, policy, section),
                                    rule="data-left-out", severity="warning",
                                    valid="an existing file, folder or glob (absolute, or relative to the working "
                                          "directory)"))
        else:
            problems.append(Problem(f"{blend_path}:{ds.line} datasets ({ds.name})", ds.path,
                                    "matches no file" + relative_note(ds),
                                    "an existing file, folder or glob; or mark the dataset optional", rule="data-inputs"))
    problems += empty_input_problems(row, blend_path, blend, empty)
    return problems + hub_problems(s, blend, profile, stage=stage) + ray_address_problems()


def _runs_here(profile: ExecutorProfile | None) -> bool:
    """Whether the job runs on this machine (no profile, or a ``local`` one): its network is this machine's."""
    return profile is None or profile.settings.on_this_machine


def blend_repo_problems(stage: Any, cfg: dict, profile: ExecutorProfile | None = None, env: Any = None) -> list[Problem]:
    """``data prep rl`` with ``backend: blends`` (a released RL blend repository): the run's own checks
    (:func:`nemotron.data.rl_blends.settings` and :func:`nemotron.data.rl_blends.problems`: stage files present,
    every row's schema, placeholder sources present), plus rule ``data-hub`` for its ``hf://`` repository and
    sources when the hub does not answer (an error for a run here, a warning for a cluster profile). A placeholder
    source that no row of a local repository needs (:func:`nemotron.data.rl_blends.unused_sources`) is neither
    probed nor looked for: the run never reads it; one warning names those sources."""
    from nemotron.data import hub, rl_blends

    try:
        s = rl_blends.settings(cfg)
    except ConfigError as exc:
        return [_problem(exc, "data-settings")]
    unused = rl_blends.unused_sources(s)
    problems = [_problem(exc, "data-inputs") for exc in rl_blends.problems(s, unused)]
    if unused:
        names = ", ".join(f"{src.name} ({src.path})" for src in unused)
        problems.append(Problem(
            "blends.placeholders", ", ".join(src.name for src in unused),
            f"no placeholder row of the stage files needs {names}: not fetched nor read, so neither the hub nor the "
            f"path is checked for {'it' if len(unused) == 1 else 'them'}", "drop the entry to silence this (~blends.placeholders.<name>, or "
            "'blends.placeholders={}' for all)", rule="data-inputs", severity="warning"))
    out = Path(s.output_dir)
    if out.exists() and not out.is_dir():
        problems.append(Problem("output_dir", s.output_dir, "is a file, not a folder", "a folder path (it is created)",
                                rule="data-output"))
    remote = [("blends.source", s.source)] if s.source.startswith("hf://") else []
    remote += [(f"blends.placeholders.{src.name}.path", src.path) for src in s.sources
               if src.path.startswith("hf://") and src not in unused]
    if remote:
        reason = hub.probe(env=env)
        if reason is not None:
            here = _runs_here(profile)
            tail = "; the run would fail" if here else \
                f" (checked from this machine; profile {profile.name if profile else '?'} runs on its own nodes)"
            what = ", ".join(v for _, v in remote)
            problems.append(Problem(remote[0][0], remote[0][1], hub.unreachable(what, reason, many=len(remote) > 1) + tail,
                                    "run where the hub answers (HF_ENDPOINT, HTTPS_PROXY, HF_TOKEN), or point blends.source "
                                    "and blends.placeholders.<name>.path at local copies",
                                    rule="data-hub", severity="error" if here else "warning"))
    return problems + ray_address_problems()


def hub_problems(s: Any, blend: Any, profile: ExecutorProfile | None = None, env: Any = None, stage: Any = None) -> list[Problem]:
    """Rule ``data-hub``: what the run fetches from the Hugging Face hub (a hub tokenizer id ``tokenizer.name`` not
    in the local cache, the ``hf://`` datasets of ``blend``) when the hub does not answer from this machine
    (:func:`nemotron.data.hub.probe`: one HTTP request of at most :data:`nemotron.data.hub.PROBE_SECONDS`, the
    probe the runtimes make before they fetch). Nothing needs the hub: no probe, no problem. One problem for
    all of it, naming the tokenizer and the blend's file, lines and dataset count.

    ``s``: the stage's parsed ``Settings`` (``tokenizer_name``, ``tokenizer_revision``, ``blend_path``); ``blend``:
    its parsed blend or None; ``env``: the environment (default ``os.environ``; ``HF_ENDPOINT``,
    ``HF_HUB_OFFLINE``); ``stage``: for the hint's offline command. An error for a run here (no profile, or a
    ``local`` one): the run fails the same way. A warning for a cluster profile: its nodes' network is not this
    machine's."""
    from nemotron.data import hub
    from nemotron.data.sources import is_remote
    from nemotron.data.tokenizer import is_hub_id

    what: list[str] = []
    key, value = "", None
    name = getattr(s, "tokenizer_name", None) or ""
    revision = getattr(s, "tokenizer_revision", None)
    if is_hub_id(name) and hub.cached_file(name, "tokenizer.json", revision) is None:
        what.append("the tokenizer")
        key, value = "tokenizer.name", name
    remote = [ds for ds in getattr(blend, "datasets", None) or [] if is_remote(ds.path)]
    if remote:
        blend_path = getattr(s, "blend_path", None)
        lines = ", ".join(str(ds.line) for ds in remote[:5]) + (", ..." if len(remote) > 5 else "")
        many = len(remote) > 1
        what.append(f"{len(remote)} hf:// dataset{'s' * many} of {Path(str(blend_path)).name} "
                    f"(line{'s' * many} {lines})")
        if not key:
            key, value = f"{blend_path}:{remote[0].line} datasets ({remote[0].name})", remote[0].path
    if not what:
        return []
    reason = hub.probe(env=env)
    if reason is None:
        return []
    here = _runs_here(profile)
    tail = "; the run would fail" if here else \
        f" (checked from this machine; profile {profile.name if profile else '?'} runs on its own nodes)"
    command = f"nemotron {stage.recipe} {' '.join(stage.command)}" if getattr(stage, "command", None) else None
    valid = hub.hint(command)
    message = hub.unreachable(" and ".join(what), reason, many=len(what) > 1 or len(remote) > 1) + tail
    return [Problem(key, value, message, valid, rule="data-hub", severity="error" if here else "warning")]


def empty_input_problems(stage: Any, blend_path: str, blend: Any, empty: list[tuple[Any, list[str]]]) -> list[Problem]:
    """Rule ``data-empty``: datasets of ``blend`` whose every local file is 0 bytes or a Parquet file of 0 rows
    (``empty``: ``(dataset, files)``);
    ``stage``: the registry row (:class:`nemotron.config.registry.Stage`).

    The runs refuse them after reading: pretrain per dataset (``produced no training tokens``,
    :func:`nemotron.data.pretrain._no_train_tokens`), SFT and RL only when no dataset yields a record (``no training
    sequence was produced`` / ``no usable prompt was found``). So for pretrain each is an error; for the others a
    warning each, and an error when every dataset of the blend is empty."""
    if not empty:
        return []
    written = stage.written_data
    per_dataset = written is not None and written.blend  # a blend of tokenized documents, refused per dataset
    every = len(empty) == len(blend.datasets)
    out = []
    for ds, files in empty:
        none = "0 bytes" if all(os.path.getsize(f) == 0 for f in files) else (
            "0 rows" if not any(os.path.getsize(f) == 0 for f in files) else "0 bytes, or Parquet of 0 rows")
        what = f"'{files[0]}' is empty ({none})" if len(files) == 1 else f"all {len(files)} files are empty ({none})"
        out.append(Problem(f"{blend_path}:{ds.line} datasets ({ds.name})", ds.path,
                           f"{what}: the dataset has no documents" + ("" if per_dataset or every else
                                                                        "; the run goes on without it"),
                           "a file with records, or remove the dataset from the blend", rule="data-empty",
                           severity="error" if per_dataset or every else "warning"))
    return out


def ray_address_problems(env: dict[str, str] | None = None) -> list[Problem]:
    """Rule ``data-ray``: a warning when ``RAY_ADDRESS`` is set in this shell and nothing answers there
    (:func:`nemotron.data.raypool.probe_address`, a TCP connect of at most 2 s): a run on this machine would
    join that address and fail (the run itself refuses it the same way, in seconds). A Slurm job sets its own
    ``RAY_ADDRESS``, so this is only a warning."""
    from nemotron.data.raypool import probe_address

    address = (os.environ if env is None else env).get("RAY_ADDRESS")
    if not address:
        return []
    problem = probe_address(address, timeout_s=2.0)
    if problem is None:
        return []
    return [Problem("RAY_ADDRESS", address, f"{problem}; a run on this machine joins RAY_ADDRESS and would fail",
                    "unset RAY_ADDRESS (a local Ray is then started), or the address of a running Ray head",
                    rule="data-ray", severity="warning")]


# ------------------------------------------------------------------------------------ training stages' data
def training_sources(stage_name: str, cfg: dict) -> list[tuple[str, str]]:
    """``(config key, path)`` of every data input a training stage reads, the one its tokenizer comes from first.

    pretrain: ``data.per_split_data_args_path``, then each ``data.mix_with[i].blend`` (the mix the run trains
    on, :func:`nemotron.data.blend.training_blend`). SFT: ``dataset.packed_sequence_specs.packed_train_data_path``
    (the run loads the tokenizer of its output), ``dataset.dataset_root`` and ``packed_val_data_path``. Values
    that are not set, or still hold ``${...}``, are left out. Which of these a stage reads is its registry row's
    training data (:attr:`nemotron.config.registry.Stage.training_data`); a stage without any has none.

    Raises:
        KeyError: ``stage_name`` is not a registry stage.
    """
    from nemotron.config.registry import get_stage
    from nemotron.config.tree import get

    data = get_stage(stage_name).training_data
    if data is None:
        return []
    if data.blend:
        pairs = [("data.per_split_data_args_path", get(cfg, "data.per_split_data_args_path"))]
        for i, item in enumerate(get(cfg, "data.mix_with") or []):
            pairs.append((f"data.mix_with[{i}].blend", item.get("blend") if isinstance(item, dict) else None))
    else:  # packed Parquet
        specs = "dataset.packed_sequence_specs"
        pairs = [(f"{specs}.packed_train_data_path", get(cfg, f"{specs}.packed_train_data_path")),
                 ("dataset.dataset_root", get(cfg, "dataset.dataset_root")),
                 (f"{specs}.packed_val_data_path", get(cfg, f"{specs}.packed_val_data_path"))]
    return [(k, os.path.expanduser(v)) for k, v in pairs if isinstance(v, str) and v and "${" not in v]


def training_data_problems(stage_name: str, cfg: dict) -> list[Problem]:
    """What the pretrain and SFT runs refuse about the data they read, found before anything is queued.

    * Rule ``blend-prefix`` (pretrain): every blend.json the run reads (the main one and each ``data.mix_with``
      blend) parses (:func:`nemotron.data.blend.read_blend_pairs`, the run's own reader: a prefix ending in
      ``.bin``/``.idx`` or naming a folder is refused with the prefix to write) and every prefix has its
      ``.bin`` and ``.idx`` (the run's message: ``split 'train': <prefix>.bin does not exist``). With a
      ``data.mix_with`` on a readable main blend the parse errors are :func:`nemotron.validation._blend_mix`'s.
    * Rule ``data-tokenizer`` for every input after the first (:func:`training_sources`): its data prep
      manifest's tokenizer (``vocab_sha256``) is the one the stage trains with — ``tokenizer.vocab_sha256``
      when set, else the first input's (whose tokenizer the run loads when ``tokenizer.tokenizer_model`` is
      null) — and its vocabulary fits the model's (``model.name`` in the catalogue). The first input's own
      check is :func:`nemotron.layout.rules.data_tokenizer_matches`.

    Only reads local files; a path that does not exist here is left to the checks that say so.
    """
    from nemotron.config.tree import get
    from nemotron.data.blend import BlendFileError, read_blend_pairs
    from nemotron.data.outputs import data_manifest

    from nemotron.config.registry import get_stage

    sources = training_sources(stage_name, cfg)
    out: list[Problem] = []
    data = get_stage(stage_name).training_data
    if data is not None and data.blend:
        mixed = bool(get(cfg, "data.mix_with")) and bool(sources) and Path(sources[0][1]).is_file()
        for key, path in sources:
            if not Path(path).is_file():
                continue
            try:
                splits = read_blend_pairs(path)
            except BlendFileError as exc:
                if not mixed:
                    out.append(Problem(key, path, str(exc), "a blend.json of weight, prefix pairs: the prefixes "
                                       "without .bin/.idx (data prep pretrain writes one)", rule="blend-prefix"))
                continue
            for split, pairs in splits.items():
                missing = [f"{prefix}{suffix}" for _w, prefix in pairs for suffix in (".bin", ".idx")
                           if not Path(f"{prefix}{suffix}").is_file()]
                if missing:
                    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
                    out.append(Problem(key, path, f"split {split!r}: {missing[0]} does not exist{more}",
                                       "prefixes whose .bin and .idx exist (paths relative to the blend file's folder "
                                       "are taken from there)", rule="blend-prefix"))
                    break
                from nemotron.data.indexed import bin_size_problem

                sizes = [m for _w, prefix in pairs if (m := bin_size_problem(prefix)) is not None]
                if sizes:  # the run's reader refuses it when it opens the shard
                    more = f" (and {len(sizes) - 1} more)" if len(sizes) > 1 else ""
                    out.append(Problem(key, path, f"split {split!r}: {sizes[0]}{more}",
                                       "the shard as data prep wrote it (a truncated copy or a corrupt index? copy it "
                                       "again, or run the data prep again)", rule="blend-prefix"))
                    break
    manifests = []
    seen: set[str] = set()
    for key, path in sources:
        manifest, where = data_manifest(path)
        tok = manifest.get("tokenizer") if isinstance(manifest, dict) else None
        if isinstance(tok, dict) and where not in seen:
            seen.add(where)
            manifests.append((key, path, tok, where))
    if not manifests:
        return out
    model_vocab = _model_vocab(get(cfg, "model.name"))
    expected = get(cfg, "tokenizer.vocab_sha256")
    first_key, _first_path, first_tok, _ = manifests[0]
    ref_sha = expected or first_tok.get("vocab_sha256")
    ref = (f"tokenizer.vocab_sha256={str(expected)[:12]}..." if expected else
           f"the tokenizer of {first_key} ({_describe(first_tok)})")
    shares = _mix_shares(cfg)
    for key, path, tok, where in manifests[1:]:  # the first one's own check: rules.data_tokenizer_matches
        dsha = tok.get("vocab_sha256")
        if ref_sha and dsha and dsha != ref_sha:
            share = f" ({shares[key]:.0%} of the training samples)" if key in shares else ""
            out.append(Problem(key, path, f"the data{share} was tokenized with {_describe(tok)}, not with {ref}; "
                                          f"its token ids mean other tokens to this model (manifest {where})",
                               f"re-run data prep for it with the stage's tokenizer, or drop it from {key.split('[')[0]}"
                               if key in shares else "data prepared with the stage's tokenizer (one data prep output)",
                               rule="data-tokenizer"))
        dvocab = tok.get("vocab_size")
        if isinstance(dvocab, int) and model_vocab and dvocab > model_vocab:
            out.append(Problem(key, path, f"the data's vocabulary ({dvocab:,} ids) is larger than the model's "
                                          f"({model_vocab:,}); token ids would overflow the embedding",
                               f"a tokenizer with at most {model_vocab:,} ids", rule="data-tokenizer"))
    return out


def _describe(tok: dict[str, Any]) -> str:
    vocab = tok.get("vocab_size")
    sha = str(tok.get("vocab_sha256") or "")[:12]
    return (f"{tok.get('name')!r}" + (f", {vocab:,} ids" if isinstance(vocab, int) else "")
            + (f", vocab hash {sha}..." if sha else ""))


def _model_vocab(name: Any) -> int | None:
    from nemotron.config import catalogue

    try:
        return catalogue.get(name).vocab_size if isinstance(name, str) else None
    except catalogue.CatalogueError:
        return None


def _mix_shares(cfg: dict) -> dict[str, float]:
    """``{"data.mix_with[i].blend": share}`` of a well-formed pretrain mix (else empty)."""
    from nemotron.config.tree import get
    from nemotron.data.blend import parse_mix

    try:
        _rest, entries = parse_mix(get(cfg, "data.mix_with"))
    except ConfigError:
        return {}
    return {where: share for share, _path, where in entries}
