"""RL data prep: prompts with verifiable answers → JSONL for NeMo RL's math environment.

Flow (:func:`prepare`)::

    load blend ─► choose output version ─► plan shards (pure) ─► Ray: normalise each shard into a part
      (JSONL + one 64-bit key per line; receipts) ─► driver: dedupe, hold out validation rows, passes
      ─► train.jsonl + validation.jsonl (atomic) ─► manifest.json (last) ─► summary

**Output line** — what NeMo RL's ``ResponseDataset`` + ``math_hf_data_processor`` read (the stage's
``data.train.data_path`` / ``data.validation.data_path``)::

    {"messages": [{"role": "user", "content": <problem>},          # messages[0].content: the problem
                  {"role": "assistant", "content": <answer>}],     # messages[1].content: the ground truth
     "task": "math", "dataset": <blend name>, "source": "<file>:<line>"}

The processor builds the policy's prompt from ``messages[0]`` (with NeMo RL's own prompt and system
prompt files) and gives ``messages[1]`` to the math environment as the ground truth. The task name is
written as ``task``, not ``task_name``: ``ResponseDataset`` adds a ``task_name`` column itself (from the
file path), and Hugging Face ``datasets`` refuses a second column of that name.

**Record forms** (a dataset's ``format``, or detected per record):

* ``gsm8k`` — ``question`` + ``answer`` whose final answer follows ``####`` (the text after the last
  marker, stripped, as NeMo RL's GSM8K loader takes it);
* ``dapo`` — DAPO-Math's ``prompt`` (a list of chat messages; the user message is the problem) and
  ``reward_model.ground_truth``;
* ``messages`` — a ``messages`` list with one user turn, the answer in ``answer_field`` or, when that is
  not set, in a final assistant turn. System turns are dropped (NeMo RL adds its own) and counted.

An answer that is missing, empty or without the ``####`` marker is skipped and counted
(``missing_answer``), never written as an empty ground truth.

**Held-out rows**: after de-duplication, the last ``split.validation_rows`` rows of the stream (in
blend order, files sorted, records in file order) or a seeded sample of that many (``split.method``)
go to ``validation.jsonl``; never more than half of the rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.data import outputs
from nemotron.data.blend import Blend, load_blend
from nemotron.data.files import atomic_open, atomic_write_json, remove_tmp_files, sha256_file, stable_hash
from nemotron.data.prep import Problems, Reader, passes_from_weights, plan_dataset, unit_hash
from nemotron.errors import ConfigError, RuntimeFailure

STAGE = "data-prep-rl"
RL_SCHEMAS = ("gsm8k", "dapo", "messages")
POLICIES: dict[str, tuple[str, ...]] = {
    "missing_answer": ("skip", "fail"),
    "bad_record": ("skip", "fail"),
    "empty_glob": ("fail", "skip"),
}
_SECTIONS = {
    "policies": (*POLICIES, "max_examples"),
    "split": ("validation_rows", "method", "seed"),
    "shards": ("target_bytes",),
    "workers": ("count", "cpus_per_task"),
    "remote": ("cache_dir",),
    "summary": ("progress_interval_s",),
}
_TOP = ("blend_path", "output_dir", "path_vars", "sample", "force", "mixing", "task_name", "answer_field", "dedupe")
TRAIN, VALID = "train.jsonl", "validation.jsonl"


@dataclass
class Settings:
    """The stage config, checked."""

    blend_path: str
    output_dir: str
    path_vars: dict[str, Any] = field(default_factory=dict)
    sample: int | None = None
    force: bool = False
    mixing: str = "natural"
    task_name: str = "math"
    answer_field: str | None = None
    dedupe: bool = True
    policies: dict[str, str] = field(default_factory=lambda: {k: v[0] for k, v in POLICIES.items()})
    max_examples: int = 5
    validation_rows: int = 100
    method: str = "last"
    split_seed: int = 1234
    target_bytes: int = 64 << 20
    workers: int | None = None
    cpus_per_task: int = 1
    ray_cpus: int | None = None
    remote_cache_dir: str = "~/.cache/nemotron/hf-datasets"
    progress_interval_s: float = 10.0

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Settings:
        """Build from the compiled stage config.

        Raises:
            ConfigError: a key is unknown (with a did-you-mean), has the wrong type, or is out of range.
        """
        c = Reader(cfg, _TOP, _SECTIONS)
        s = cls(blend_path=os.path.abspath(c.str("blend_path")), output_dir=os.path.abspath(c.str("output_dir")))
        s.path_vars = c.dict("path_vars", {})
        s.sample = c.int("sample", None, minimum=1)
        s.force = c.bool("force", False)
        s.mixing = c.choice("mixing", ("natural", "weighted"), "natural")
        s.task_name = c.str("task_name", "math")
        s.answer_field = c.str("answer_field", None)
        s.dedupe = c.bool("dedupe", True)
        s.policies = {k: c.choice(f"policies.{k}", v, v[0]) for k, v in POLICIES.items()}
        s.max_examples = c.int("policies.max_examples", 5, minimum=0)
        s.validation_rows = c.int("split.validation_rows", 100, minimum=0)
        s.method = c.choice("split.method", ("last", "sample"), "last")
        s.split_seed = c.int("split.seed", s.split_seed)
        s.target_bytes = c.int("shards.target_bytes", s.target_bytes, minimum=1)
        s.workers = c.int("workers.count", None, minimum=1)
        s.cpus_per_task = c.int("workers.cpus_per_task", 1, minimum=1)
        s.ray_cpus = c.int("run.env.cpus", None, minimum=1)
        s.remote_cache_dir = c.str("remote.cache_dir", s.remote_cache_dir)
        s.progress_interval_s = c.float("summary.progress_interval_s", 10.0, minimum=0) or 10.0
        c.check_unknown()
        return s


def main(cfg: dict[str, Any]) -> int:
    """Entry point of ``run.py``; returns 0.

    Raises:
        ConfigError: a config, blend or input problem found before any work (exit 2).
        RuntimeFailure: a failure while working (exit 1).
    """
    s = Settings.from_config(cfg)
    with outputs.writer_lock(s.output_dir):  # one writing run per output folder
        manifest = prepare(s)
    from nemotron.artifacts import write_outputs

    write_outputs({"rl-data": {"path": manifest["path"], "data_version": manifest["version"],
                               "train_path": manifest["files"]["train"]["path"],
                               "validation_path": manifest["files"]["validation"]["path"],
                               "task_name": manifest["task_name"]}})
    return 0


# --------------------------------------------------------------------------------------------------
# records


class MissingAnswer(Exception):
    """The record has no usable expected answer."""


class BadRecord(Exception):
    """The record is not in the form its dataset declares."""


def detect_schema(obj: dict[str, Any]) -> str | None:
    """The RL record form of ``obj``: ``gsm8k``, ``dapo``, ``messages`` or ``None``."""
    if "question" in obj and "answer" in obj:
        return "gsm8k"
    if "prompt" in obj and "reward_model" in obj:
        return "dapo"
    if isinstance(obj.get("messages"), list):
        return "messages"
    return None


def _field(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def extract(obj: dict[str, Any], schema: str | None, answer_field: str | None = None) -> tuple[str, str, int]:
    """``(problem, expected_answer, system_turns_dropped)`` of one record.

    Raises:
        MissingAnswer: no answer, an empty one, or (GSM8K) no ``####`` marker.
        BadRecord: the record does not have the fields of its form.
    """
    form = schema or detect_schema(obj)
    dropped = 0
    if form == "gsm8k":
        problem, answer = obj.get("question"), obj.get("answer")
        if not isinstance(problem, str):
            raise BadRecord("'question' is missing or not text")
        if not isinstance(answer, str) or "####" not in answer:
            raise MissingAnswer("the answer has no '#### <answer>' marker")
        answer = answer.rsplit("####", 1)[1].strip()
    elif form == "dapo":
        prompt = obj.get("prompt")
        if isinstance(prompt, str):
            problem = prompt
        elif isinstance(prompt, list):
            users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role", "user") == "user"]
            dropped = sum(1 for m in prompt if isinstance(m, dict) and m.get("role") == "system")
            if len(users) != 1 or not isinstance(users[0], str):
                raise BadRecord(f"'prompt' must hold exactly one user message (found {len(users)})")
            problem = users[0]
        else:
            raise BadRecord("'prompt' is missing or not a message list")
        answer = _field(obj, answer_field or "reward_model.ground_truth")
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
    elif form == "messages":
        msgs = obj.get("messages")
        if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
            raise BadRecord("'messages' must be a list of objects")
        answer = _field(obj, answer_field) if answer_field else None
        if answer_field is None and msgs and msgs[-1].get("role") == "assistant":
            answer = msgs[-1].get("content")
            msgs = msgs[:-1]
        dropped = sum(1 for m in msgs if m.get("role") == "system")
        users = [m for m in msgs if m.get("role") != "system"]
        if len(users) != 1 or users[0].get("role") != "user" or not isinstance(users[0].get("content"), str):
            raise BadRecord("'messages' must hold one user turn (plus an optional system turn and final answer)")
        problem = users[0]["content"]
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
    else:
        raise BadRecord("no 'question'+'answer', 'prompt'+'reward_model' or 'messages' fields")
    if not isinstance(answer, str) or not answer.strip():
        raise MissingAnswer("the expected answer is missing or empty")
    if not problem.strip():
        raise BadRecord("the problem text is empty")
    return problem, answer.strip(), dropped


def line_key(problem: str, answer: str) -> int:
    """A 64-bit key of a (problem, answer) pair, for de-duplication."""
    digest = hashlib.blake2b(json.dumps([problem, answer]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


# --------------------------------------------------------------------------------------------------
# the shard task (runs in a Ray worker)


def normalise_shard(shard: dict[str, Any], opts: dict[str, Any]):
    """Write one shard's usable records as ``<prefix>.jsonl`` (+ ``<prefix>.keys.npy``); yields ``("done", receipt)``.

    Raises:
        RuntimeFailure: a problem whose policy is ``fail`` (message ``<file>:<line>: ...``).
    """
    import numpy as np

    from nemotron.data.records import iter_objects, where
    from nemotron.data.sources import Piece, fetch_remote, is_remote

    t0 = time.monotonic()
    problems = Problems(opts["policies"], opts["max_examples"])
    prefix = Path(shard["prefix"])
    keys: list[int] = []
    counts: Counter[str] = Counter()
    jsonl = prefix.with_name(prefix.name + ".jsonl")
    with atomic_open(jsonl, "w") as out:
        for pd in shard["pieces"]:
            piece = Piece.from_dict(pd)
            label = piece.file
            if is_remote(piece.file):
                piece = Piece(fetch_remote(piece.file, opts["remote_cache_dir"]), piece.fmt, piece.start, piece.stop,
                              piece.line, piece.est_bytes)
            for pos, _ordinal, obj, problem, detail in iter_objects(piece):
                at = where(label, piece.fmt, pos)
                counts["records"] += 1
                if problem is not None:
                    problems.report(problem, at, detail or "", policy_key="bad_record")
                    continue
                try:
                    text, answer, dropped = extract(obj, shard["schema"], opts["answer_field"])
                except MissingAnswer as exc:
                    problems.report("missing_answer", at, str(exc))
                    continue
                except BadRecord as exc:
                    problems.report("bad_record", at, str(exc))
                    continue
                counts["system_dropped"] += dropped
                line = {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": answer}],
                        "task": opts["task_name"], "dataset": shard["dataset"], "source": at}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                keys.append(line_key(text, answer))
    keys_path = prefix.with_name(prefix.name + ".keys.npy")
    with atomic_open(keys_path, "wb") as fh:
        np.save(fh, np.asarray(keys, dtype=np.uint64))
    receipt = {"key": shard["key"], "id": shard["id"], "dataset": shard["dataset"], "records": counts["records"],
               "rows": len(keys), "system_dropped": counts["system_dropped"],
               "skipped": dict(sorted(problems.counts.items())), "examples": problems.examples,
               "files": {jsonl.name: jsonl.stat().st_size, keys_path.name: keys_path.stat().st_size},
               "seconds": round(time.monotonic() - t0, 3)}
    outputs.write_receipt(prefix, receipt)
    yield "done", receipt


# --------------------------------------------------------------------------------------------------
# the pipeline


def prepare(s: Settings, *, live_progress: bool | None = None, quiet: bool = False) -> dict[str, Any]:
    """Run the pipeline; returns the manifest (also written to ``<version>/manifest.json``).

    Raises:
        ConfigError: a config, blend or input problem found before any work.
        RuntimeFailure: a failure while working (rerun to resume).
    """
    from nemotron.data.progress import console

    say = (lambda *a: None) if quiet else console().print
    t0 = time.monotonic()
    blend = load_blend(s.blend_path, path_vars=s.path_vars)
    version, vdir, why = outputs.select_version(s.output_dir, s.force)
    datasets, shards, not_found = _plan(s, blend, vdir)
    for line in not_found:
        say(f"note: {line}")
    key = stable_hash({"shards": [sh["key"] for sh in shards], "mixing": s.mixing, "dedupe": s.dedupe,
                       "weights": [d.spec.weight for d in datasets], "split": [s.validation_rows, s.method, s.split_seed],
                       "root": str(vdir)})
    old_plan = _read_json(vdir / outputs.PLAN)
    old_manifest = _read_json(vdir / outputs.MANIFEST)
    if old_plan is not None and old_plan.get("plan_key") != key and not s.force:
        raise ConfigError(f"output_dir={vdir} holds data prepared from other inputs or settings "
                          f"(plan {old_plan.get('plan_key')}, now {key})",
                          "rerun with force=true to rebuild, or choose another output_dir")
    if s.force and why != "rebuild" and version > 1:
        say(f"note: {why}: {vdir}")
    if why == "rebuild":
        outputs.clear_version(vdir)
        for name in (TRAIN, VALID):
            with contextlib.suppress(FileNotFoundError):
                (vdir / name).unlink()
    elif old_manifest and old_manifest.get("complete") and old_manifest.get("plan_key") == key:
        say(f"up to date: {vdir} (plan {key}); nothing to do. Rerun with force=true to rebuild.")
        _print_summary(old_manifest, quiet)
        return old_manifest
    vdir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(vdir / outputs.PLAN, {"stage": STAGE, "plan_key": key, "shards": shards})
    opts = {"policies": dict(s.policies), "max_examples": s.max_examples, "answer_field": s.answer_field,
            "task_name": s.task_name, "remote_cache_dir": os.path.expanduser(s.remote_cache_dir)}
    try:
        receipts, run_info = _run(s, shards, opts, live_progress, quiet, say)
    finally:  # also on Ctrl-C or a failure: only finished shards (renamed into place) stay
        remove_tmp_files(vdir / "data")
    manifest = _write(s, blend, datasets, shards, receipts, vdir, version, key, not_found, run_info, t0)
    _print_summary(manifest, quiet)
    return manifest


def _plan(s: Settings, blend: Blend, vdir: Path) -> tuple[list[Any], list[dict[str, Any]], list[str]]:
    datasets, shards, not_found = [], [], []
    for spec in blend.datasets:
        ds = plan_dataset(spec, s, RL_SCHEMAS, s.target_bytes, s.sample)
        if ds is None or not ds.shards:
            message = f"{blend.path}:{spec.line}: datasets ({spec.name}): path {spec.path!r} matches no file"
            if spec.optional:
                not_found.append(f"{spec.name}: optional, nothing at {spec.path}")
                continue
            if s.policies["empty_glob"] == "skip":
                not_found.append(f"{message}; dataset skipped (policies.empty_glob=skip)")
                continue
            raise ConfigError(message, "fix the path, mark the dataset optional, or set policies.empty_glob=skip")
        datasets.append(ds)
        for k, pieces in enumerate(ds.shards):
            sh = {"id": f"{spec.name}/{k:05d}", "dataset": spec.name, "schema": ds.schema,
                  "prefix": str(vdir / "data" / spec.name / f"{k:05d}"), "pieces": [p.to_dict() for p in pieces],
                  "est_bytes": sum(p.est_bytes for p in pieces)}
            sh["key"] = stable_hash({"pieces": sh["pieces"], "schema": ds.schema, "task": s.task_name,
                                     "answer_field": s.answer_field, "policies": s.policies})
            shards.append(sh)
    if not datasets:
        raise ConfigError(f"{blend.path}: no dataset has any input file")
    return datasets, shards, not_found


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _run(s: Settings, shards: list[dict[str, Any]], opts: dict[str, Any], live_progress: bool | None, quiet: bool,
         say: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    import ray

    from nemotron.data.progress import Progress
    from nemotron.data.raypool import ray_session, run_streaming

    receipts: dict[str, dict[str, Any]] = {}
    todo = []
    for sh in shards:
        rec = outputs.read_receipt(sh["prefix"], sh["key"])
        if rec is not None:
            receipts[sh["id"]] = rec
        else:
            todo.append(sh)
    if receipts and todo:
        say(f"resuming: {len(receipts)} of {len(shards)} shards already done")
    info: dict[str, Any] = {"shards_built": len(todo), "shards_reused": len(receipts)}
    if not todo:
        return receipts, info
    t0 = time.monotonic()
    with ray_session(s.ray_cpus) as session:
        workers = s.workers or max(session["cpus"] // s.cpus_per_task, 1)
        info.update(workers=workers, ray=session["address"], ray_cpus=session["cpus"])
        if not quiet:
            print(f"reading {len(todo)} shards on {workers} workers", flush=True)
        with Progress(sum(max(sh["est_bytes"], 1) for sh in todo), "rl prompts", interval_s=s.progress_interval_s,
                      live=False if quiet and live_progress is None else live_progress, item="prompts",
                      count_tokens=False) as bar:
            if quiet:
                bar.interval_s = math.inf

            def on_done(sh: dict[str, Any], rec: dict[str, Any]) -> None:
                receipts[sh["id"]] = rec
                bar.advance(max(sh["est_bytes"], 1), docs=rec["rows"])

            run_streaming(ray.remote(normalise_shard), sorted(todo, key=lambda x: (-x["est_bytes"], x["id"])),
                          args=(opts,), max_in_flight=workers, num_cpus=s.cpus_per_task, on_done=on_done)
    info["work_seconds"] = round(time.monotonic() - t0, 3)
    return receipts, info


def _write(s: Settings, blend: Blend, datasets: list[Any], shards: list[dict[str, Any]],
           receipts: dict[str, dict[str, Any]], vdir: Path, version: int, key: str, not_found: list[str],
           run_info: dict[str, Any], t0: float) -> dict[str, Any]:
    """Dedupe, hold out, apply passes, and write train.jsonl / validation.jsonl and the manifest."""
    import numpy as np

    # pass 0: every shard's rows in order, duplicates removed
    kept: dict[str, Any] = {}
    seen: set[int] = set()
    dup = Counter()
    for sh in shards:
        keys = np.load(sh["prefix"] + ".keys.npy")
        mask = np.ones(len(keys), dtype=bool)
        if s.dedupe:
            for i, k in enumerate(keys.tolist()):
                if k in seen:
                    mask[i] = False
                else:
                    seen.add(k)
            dup[sh["dataset"]] += int((~mask).sum())
        kept[sh["id"]] = mask
    order = [(sh["id"], i) for sh in shards for i in np.flatnonzero(kept[sh["id"]]).tolist()]
    total = len(order)
    if total == 0:
        raise RuntimeFailure("no usable prompt was found (every record was skipped)", "see the skip reasons above")
    n_valid = min(s.validation_rows, total // 2)
    if s.method == "last":
        held = set(range(total - n_valid, total))
    else:
        held = set(np.random.default_rng(s.split_seed).choice(total, size=n_valid, replace=False).tolist())
    valid_rows = {order[j] for j in held}
    train_by_ds = Counter(next(sh["dataset"] for sh in shards if sh["id"] == sid) for j, (sid, _i) in enumerate(order)
                          if j not in held)
    passes = ({d.spec.name: 1.0 for d in datasets} if s.mixing == "natural" else
              dict(zip([d.spec.name for d in datasets],
                       passes_from_weights([d.spec.weight for d in datasets],
                                           [float(train_by_ds[d.spec.name]) for d in datasets]), strict=True)))
    rounds = max(math.ceil(p - 1e-9) for p in passes.values())
    written = {"train": Counter(), "valid": Counter()}
    with atomic_open(vdir / TRAIN, "w") as ftrain, atomic_open(vdir / VALID, "w") as fvalid:
        for p in range(rounds):
            for d in datasets:
                frac = min(1.0, passes[d.spec.name] - p)
                if frac <= 1e-9:
                    continue
                for sh in shards:
                    if sh["dataset"] != d.spec.name:
                        continue
                    mask = kept[sh["id"]]
                    take = None if frac >= 1.0 else unit_hash(s.split_seed, f"{sh['id']}/pass{p}", np.arange(len(mask))) < frac
                    with open(sh["prefix"] + ".jsonl", encoding="utf-8") as fh:
                        for i, line in enumerate(fh):
                            if not mask[i] or (take is not None and not take[i]):
                                continue
                            if (sh["id"], i) in valid_rows:
                                if p == 0:
                                    fvalid.write(line)
                                    written["valid"][d.spec.name] += 1
                                continue
                            ftrain.write(line)
                            written["train"][d.spec.name] += 1
    rows = []
    for d in datasets:
        recs = [receipts[sh["id"]] for sh in shards if sh["dataset"] == d.spec.name]
        skipped: Counter[str] = Counter()
        for r in recs:
            skipped.update(r["skipped"])
        rows.append({"name": d.spec.name, "schema": d.schema or "auto", "weight": d.spec.weight,
                     "files": len(d.files), "records": sum(r["records"] for r in recs),
                     "usable": sum(r["rows"] for r in recs), "duplicates": dup[d.spec.name],
                     "skipped": dict(sorted(skipped.items())), "system_dropped": sum(r["system_dropped"] for r in recs),
                     "passes": round(passes[d.spec.name], 6), "train_rows": written["train"][d.spec.name],
                     "validation_rows": written["valid"][d.spec.name],
                     "examples": [e for r in recs for e in r["examples"]][: s.max_examples]})
    seconds = round(time.monotonic() - t0, 3)
    files = {name: {"path": str(vdir / fname), "rows": sum(written[k].values()), "sha256": sha256_file(vdir / fname),
                    "bytes": (vdir / fname).stat().st_size}
             for name, fname, k in (("train", TRAIN, "train"), ("validation", VALID, "valid"))}
    manifest = {
        "stage": STAGE, "kind": "rl-data", "format": "nemo-rl-jsonl", "complete": True, "version": version,
        "path": str(vdir), "plan_key": key, "config_hash": key, "task_name": s.task_name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "line_format": {"messages[0].content": "problem", "messages[1].content": "expected answer",
                        "task": "task name", "dataset": "blend dataset", "source": "file:line"},
        "nemo_rl": {"dataset_name": "ResponseDataset", "processor": "math_hf_data_processor", "env_name": "math",
                    "train.data_path": files["train"]["path"], "validation.data_path": files["validation"]["path"]},
        "files": files,
        "blend": {"path": blend.path, "name": blend.name, "sha256": sha256_file(blend.path), "not_found": not_found},
        "settings": {"sample": s.sample, "mixing": s.mixing, "dedupe": s.dedupe, "answer_field": s.answer_field,
                     "policies": s.policies, "validation_rows": s.validation_rows, "held_out": n_valid,
                     "method": s.method, "seed": s.split_seed},
        "datasets": rows,
        "run": {**run_info, "seconds": seconds},
    }
    atomic_write_json(vdir / outputs.MANIFEST, manifest)
    return manifest


def _print_summary(m: dict[str, Any], quiet: bool) -> None:
    if quiet:
        return
    from nemotron.data.progress import console, fmt_counts, print_table

    rows = []
    for d in m["datasets"]:
        skipped = fmt_counts(d["skipped"]) or "-"
        rows.append([d["name"], d["schema"], f"{d['records']:,}", skipped, f"{d['duplicates']:,}",
                     f"{d['passes']:.3g}", f"{d['train_rows']:,}", f"{d['validation_rows']:,}"])
    f = m["files"]
    footer = ["total", "", f"{sum(d['records'] for d in m['datasets']):,}",
              f"{sum(sum(d['skipped'].values()) for d in m['datasets']):,}",
              f"{sum(d['duplicates'] for d in m['datasets']):,}", f"{m['run']['seconds']:.1f}s",
              f"{f['train']['rows']:,}", f"{f['validation']['rows']:,}"]
    print_table(f"rl data: {m['path']} (task {m['task_name']})",
                ["dataset", "form", "records", "skipped (reason)", "duplicates", "passes", "train", "validation"],
                rows, footer=footer)
    con = console()
    for d in m["datasets"]:
        for e in d.get("examples", []):
            con.print(f"skipped: {e}")
    con.print(f"train: {f['train']['path']}  validation: {f['validation']['path']}")
