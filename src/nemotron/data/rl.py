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

An answer that is missing or empty (``missing_answer``), of the wrong type (``wrong_type``: a list, a mapping; for
gsm8k a number too) or, for gsm8k, without the ``####`` marker (``no_answer_marker``) is skipped and counted under
that reason (all three follow ``policies.missing_answer``), never written as an empty ground truth.

**Held-out rows**: after de-duplication, the last ``split.validation_rows`` rows of the stream (in
blend order, files sorted, records in file order) or a seeded sample of that many (``split.method``)
go to ``validation.jsonl``; never more than half of the rows.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.data import driver, outputs
from nemotron.data.blend import Blend
from nemotron.data.chat import CHAT_TOKENS
from nemotron.data.files import atomic_open, atomic_write_json, remove_tmp_files, sha256_file, stable_hash
from nemotron.data.prep import Problems, passes_from_weights, plan_datasets, unit_hash
from nemotron.errors import RuntimeFailure

STAGE = "data-prep-rl"
RL_SCHEMAS = ("gsm8k", "dapo", "messages")
POLICIES: dict[str, tuple[str, ...]] = {
    "missing_answer": ("skip", "fail"),
    "bad_record": ("skip", "fail"),
    "empty_glob": ("fail", "skip"),
    "control_token_text": ("skip", "keep", "fail"),
}
#: The control-token strings looked for in a prompt or answer (``policies.control_token_text``): the Nemotron 3 chat
#: format's tokens (:data:`nemotron.data.chat.CHAT_TOKENS`) and the BOS/EOS strings. NeMo RL builds the policy's
#: prompt with the model's Hugging Face tokenizer and chat template, whose encoder turns such a string in the text
#: into the control token itself: ``<|im_start|>system ...`` inside a problem becomes an injected system turn.
CONTROL_STRINGS = (*CHAT_TOKENS, "<s>", "</s>")
_SECTIONS = {
    "policies": (*POLICIES, "max_examples", "unrestored"),  # unrestored: backend blends (nemotron.data.rl_blends)
    "split": ("validation_rows", "method", "seed"),
    "shards": ("target_bytes",),
    "workers": ("count", "cpus_per_task", "engine", "in_process_max_bytes"),
    "remote": ("cache_dir",),
    "summary": ("progress_interval_s",),
}
_TOP = ("blend_path", "output_dir", "path_vars", "sample", "force", "mixing", "task_name", "answer_field", "dedupe",
        "backend", "blends")  # backend blends: a released RL blend repository, read by nemotron.data.rl_blends
TRAIN, VALID = outputs.RL_TRAIN, outputs.RL_VALID


@dataclass
class Settings(driver.StageSettings):
    """The stage config, checked."""

    STAGE = STAGE  # the blend's dataset keys this stage reads: nemotron.data.blend.STAGE_DATASET_KEYS

    OUTPUT_NAMES = (TRAIN, VALID)

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

    @classmethod
    def reader(cls, cfg: dict[str, Any]) -> driver.Reader:
        """This stage's config reader over ``cfg`` (it knows the stage's keys)."""
        return driver.Reader(cfg, _TOP, _SECTIONS)

    def read_own(self, c: driver.Reader) -> None:
        """Read this stage's own keys (see :meth:`nemotron.data.driver.StageSettings.from_config`)."""
        self.mixing = c.choice("mixing", ("natural", "weighted"), "natural")
        self.task_name = c.str("task_name", "math")
        self.answer_field = c.str("answer_field", None)
        self.dedupe = c.bool("dedupe", True)
        self.policies = {k: c.choice(f"policies.{k}", v, v[0]) for k, v in POLICIES.items()}
        self.max_examples = c.int("policies.max_examples", 5, minimum=0)
        self.validation_rows = c.int("split.validation_rows", 100, minimum=0)
        self.method = c.choice("split.method", ("last", "sample"), "last")
        self.split_seed = c.int("split.seed", self.split_seed)
        self.target_bytes = c.int("shards.target_bytes", self.target_bytes, minimum=1)


def main(cfg: dict[str, Any]) -> int:
    """Entry point of ``run.py``; returns 0.

    Raises:
        ConfigError: a config, blend or input problem found before any work (exit 2).
        RuntimeFailure: a failure while working (exit 1).
    """
    return driver.stage_main(cfg, Settings, prepare, lambda m: {"rl-data": {
        "path": m["path"], "data_version": m["version"], "train_path": m["files"]["train"]["path"],
        "validation_path": m["files"]["validation"]["path"], "task_name": m["task_name"]}})


# --------------------------------------------------------------------------------------------------
# records


class MissingAnswer(Exception):
    """The record has no usable expected answer. ``reason``: the skip reason it is counted as (all under the one
    policy ``policies.missing_answer``): ``missing_answer`` (no answer, or an empty one), ``wrong_type`` (the answer
    field holds no text: a list, a mapping, a bool; gsm8k: a number too), ``no_answer_marker`` (gsm8k: no ``####``)."""

    def __init__(self, message: str, reason: str = "missing_answer") -> None:
        super().__init__(message)
        self.reason = reason


def _answer_type(value: Any, field: str) -> None:
    """Raise :class:`MissingAnswer` (``wrong_type``) when ``value`` of ``field`` is there but no text or number."""
    if value is not None and (isinstance(value, (bool, list, dict)) or not isinstance(value, (str, int, float))):
        raise MissingAnswer(f"{field!r} is {type(value).__name__}, not text", "wrong_type")


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
        MissingAnswer: no answer, an empty one, one of the wrong type, or (GSM8K) no ``####`` marker (its
            ``reason``).
        BadRecord: the record does not have the fields of its form.
    """
    form = schema or detect_schema(obj)
    dropped = 0
    if form == "gsm8k":
        problem, answer = obj.get("question"), obj.get("answer")
        if not isinstance(problem, str):
            raise BadRecord("'question' is missing or not text")
        if answer is None:
            raise MissingAnswer("no 'answer' field")
        if not isinstance(answer, str):
            raise MissingAnswer(f"'answer' is {type(answer).__name__}, not text (gsm8k form: the text after its last "
                                "'####')", "wrong_type")
        if "####" not in answer:
            raise MissingAnswer("no '####' in 'answer' (gsm8k form: the answer follows the last '####')",
                                "no_answer_marker")
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
        _answer_type(answer, answer_field or "reward_model.ground_truth")
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
        _answer_type(answer, answer_field or "the last assistant message's content")
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


def control_string(text: str) -> str | None:
    """The first of :data:`CONTROL_STRINGS` found in ``text`` (the longest at the earliest position), or ``None``."""
    found = [(text.find(t), -len(t), t) for t in CONTROL_STRINGS if t in text]
    return min(found)[2] if found else None


def control_token_policy(texts: Iterable[Any], problems: Problems, at: str) -> str | None:
    """Apply ``policies.control_token_text`` to one record's texts: the one function both backends of
    ``data prep rl`` call (the problem and answer here; a NeMo Gym row's prompt messages and answer in
    :mod:`nemotron.data.rl_blends`).

    Args:
        texts: the record's texts (non-strings are ignored).
        problems: the record counter; its ``policies["control_token_text"]`` (``skip`` when absent) decides.
        at: ``<file>:<line>`` of the record, for the message.

    Returns:
        ``None``: no control-token string (write the record); ``"keep"``: one found, policy ``keep`` (write it; the
        caller counts it as ``control_token_text`` for the summary's note); ``"skip"``: one found and counted in
        ``problems`` as ``control_token_text`` (leave the record out).

    Raises:
        RuntimeFailure: one found and the policy is ``fail`` (``<at>: control_token_text: holds ...``).
    """
    token = next((t for t in (control_string(x) for x in texts if isinstance(x, str)) if t is not None), None)
    if token is None:
        return None
    if problems.policies.get("control_token_text", "skip") == "keep":
        return "keep"
    problems.report("control_token_text", at, f"holds the control-token string {token!r} as text (NeMo RL's "
                    "tokenizer would read it as the control token)")
    return "skip"


def control_token_note(name: str, kept: int) -> str | None:
    """The summary's ``note:`` line for ``kept`` records written with control-token text (policy ``keep``) in
    dataset or stage file ``name``; ``None`` when there are none. Both backends print it."""
    if not kept:
        return None
    return (f"note: {name}: {kept:,} record(s) hold control-token text (such as <|im_start|> or </s>) in the "
            "problem or answer, kept as written (policies.control_token_text=keep): NeMo RL's tokenizer reads it as "
            "the control token; policies.control_token_text=skip leaves them out")


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

    t0 = time.monotonic()
    problems = Problems(opts["policies"], opts["max_examples"])
    prefix = Path(shard["prefix"])
    keys: list[int] = []
    counts: Counter[str] = Counter()
    jsonl = prefix.with_name(prefix.name + ".jsonl")
    with atomic_open(jsonl, "w") as out:
        for label, piece in driver.shard_pieces(shard, opts["remote_cache_dir"]):
            for pos, _ordinal, obj, problem, detail in iter_objects(piece):
                at = where(label, piece.fmt, pos)
                counts["records"] += 1
                if problem is not None:
                    problems.report(problem, at, detail or "", policy_key="bad_record")
                    continue
                try:
                    text, answer, dropped = extract(obj, shard["schema"], opts["answer_field"])
                except MissingAnswer as exc:
                    problems.report(exc.reason, at, str(exc), policy_key="missing_answer")
                    continue
                except BadRecord as exc:
                    problems.report("bad_record", at, str(exc))
                    continue
                verdict = control_token_policy((text, answer), problems, at)
                if verdict == "skip":
                    continue
                if verdict == "keep":
                    counts["control_text"] += 1
                counts["system_dropped"] += dropped
                line = {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": answer}],
                        "task": opts["task_name"], "dataset": shard["dataset"], "source": at}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                keys.append(line_key(text, answer))
    keys_path = prefix.with_name(prefix.name + ".keys.npy")
    with atomic_open(keys_path, "wb") as fh:
        np.save(fh, np.asarray(keys, dtype=np.uint64))
    receipt = {"key": shard["key"], "id": shard["id"], "dataset": shard["dataset"], "records": counts["records"],
               "rows": len(keys), "system_dropped": counts["system_dropped"], "control_text": counts["control_text"],
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
    # no Ray while planning: it starts only when a shard is left to read (see _run)
    return driver.drive(s, _plan, _execute, live_progress=live_progress, quiet=quiet, overlap_ray=False)


def _execute(run: driver.Run, blend: Blend, planned: tuple[Any, ...]) -> dict[str, Any]:
    s, vdir = run.s, run.vdir
    datasets, shards, not_found, key = planned
    basis = driver.plan_basis(run.s, shards)
    done = driver.reuse_or_reset(run, key, not_found, _print_summary, basis=basis,
                                 hint="rerun with force=true to rebuild, or choose another output_dir")
    if done is not None:
        return done
    atomic_write_json(vdir / outputs.PLAN, {"stage": STAGE, "plan_key": key, "shards": shards, "basis": basis})
    opts = {"policies": dict(s.policies), "max_examples": s.max_examples, "answer_field": s.answer_field,
            "task_name": s.task_name, "remote_cache_dir": os.path.expanduser(s.remote_cache_dir)}
    try:
        receipts, run_info = _run(run, shards, opts)
    finally:  # also on Ctrl-C or a failure: only finished shards (renamed into place) stay
        remove_tmp_files(vdir / "data")
    return _write(run, blend, datasets, shards, receipts, key, not_found, run_info)


def _plan(s: Settings, blend: Blend, vdir: Path) -> tuple[list[Any], list[dict[str, Any]], list[str], str]:
    datasets, not_found = plan_datasets(blend, s, RL_SCHEMAS)
    shards = []
    for ds in datasets:
        spec = ds.spec
        for k, pieces in enumerate(ds.shards):
            sh = {"id": f"{spec.name}/{k:05d}", "dataset": spec.name, "schema": ds.schema,
                  "prefix": str(vdir / "data" / spec.name / f"{k:05d}"), "pieces": [p.to_dict() for p in pieces],
                  "est_bytes": sum(p.est_bytes for p in pieces)}
            sh["key"] = stable_hash({"pieces": sh["pieces"], "schema": ds.schema, "task": s.task_name,
                                     "answer_field": s.answer_field, "policies": s.policies})
            shards.append(sh)
    key = stable_hash({"shards": [sh["key"] for sh in shards], "mixing": s.mixing, "dedupe": s.dedupe,
                       "weights": [d.spec.weight for d in datasets], "split": [s.validation_rows, s.method, s.split_seed],
                       "root": str(vdir)})
    return datasets, shards, not_found, key


def _run(run: driver.Run, shards: list[dict[str, Any]],
         opts: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    receipts, todo = driver.split_done(shards, run.say)
    info: dict[str, Any] = {}
    t0 = time.monotonic()
    if todo:
        with driver.ray_workers(run) as (workers, ray_info):
            info.update(ray_info)
            driver.stream(run, normalise_shard, todo, opts, workers, receipts, title="rl prompts", verb="reading",
                          noun="shards", units=lambda sh: max(sh["est_bytes"], 1), item="prompts", count_tokens=False)
    info["work_seconds"] = round(time.monotonic() - t0, 3)
    info.update(driver.account(shards, todo, receipts, "shards", "records", lambda r: r["records"]))
    return receipts, info


def _write(run: driver.Run, blend: Blend, datasets: list[Any], shards: list[dict[str, Any]],
           receipts: dict[str, dict[str, Any]], key: str, not_found: list[str],
           run_info: dict[str, Any]) -> dict[str, Any]:
    """Dedupe, hold out, apply passes, and write train.jsonl / validation.jsonl and the manifest."""
    import numpy as np

    s, vdir = run.s, run.vdir

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
        raise RuntimeFailure(*_no_rows(s, [receipts[sh["id"]] for sh in shards]))
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
        skipped, examples = driver.problems_of(recs, s.max_examples)
        rows.append({"name": d.spec.name, "schema": d.schema or "auto", "weight": d.spec.weight,
                     "files": len(d.files), "records": sum(r["records"] for r in recs),
                     "usable": sum(r["rows"] for r in recs), "duplicates": dup[d.spec.name],
                     "skipped": dict(sorted(skipped.items())), "system_dropped": sum(r["system_dropped"] for r in recs),
                     "control_token_text": sum(r.get("control_text", 0) for r in recs),
                     "passes": round(passes[d.spec.name], 6), "train_rows": written["train"][d.spec.name],
                     "validation_rows": written["valid"][d.spec.name],
                     "examples": examples})
    seconds = round(time.monotonic() - run.t_start, 3)
    files = {name: {"path": str(vdir / fname), "rows": sum(written[k].values()), "sha256": sha256_file(vdir / fname),
                    "bytes": (vdir / fname).stat().st_size}
             for name, fname, k in (("train", TRAIN, "train"), ("validation", VALID, "valid"))}
    manifest = {
        **driver.manifest_head(run, STAGE, "rl-data", "nemo-rl-jsonl", key, config_hash=key, task_name=s.task_name),
        "line_format": {"messages[0].content": "problem", "messages[1].content": "expected answer",
                        "task": "task name", "dataset": "blend dataset", "source": "file:line"},
        "nemo_rl": {"dataset_name": "ResponseDataset", "processor": "math_hf_data_processor", "env_name": "math",
                    "train.data_path": files["train"]["path"], "validation.data_path": files["validation"]["path"]},
        "files": files,
        "blend": driver.blend_record(blend, not_found),
        "settings": {"sample": s.sample, "mixing": s.mixing, "dedupe": s.dedupe, "answer_field": s.answer_field,
                     "policies": s.policies, "validation_rows": s.validation_rows, "held_out": n_valid,
                     "split_rows": total,
                     "method": s.method, "seed": s.split_seed},
        "datasets": rows,
        "run": {**run_info, "seconds": seconds},
    }
    return driver.publish(run, manifest, _print_summary, consumed_by=False)


def _no_rows(s: Settings, recs: list[dict[str, Any]]) -> tuple[str, str]:
    """The message and hint when no usable prompt is left: the records' skip counts by reason and the
    key to change for what took them all."""
    from nemotron.data.progress import fmt_counts

    skipped = driver.problems_of(recs, 0)[0]
    message = (f"no usable prompt was found, so no training rows ({driver.count(sum(r['records'] for r in recs), 'records')} read; "
               f"skipped: {fmt_counts(skipped) or 'none'})")
    top = max(skipped, key=lambda k: skipped[k]) if skipped else None
    first = next((e for e in driver.problems_of(recs, 10 ** 6)[1] if f": {top}: " in e), None)
    at = f" (first: {first})" if first else ""
    if top == "missing_answer":
        field = s.answer_field or ("the form's own: 'answer' (gsm8k), 'reward_model.ground_truth' (dapo), the last "
                                   "assistant message (messages)")
        hint = (f"no record has an expected answer at answer_field={field}{at}: set answer_field to the field that "
                "holds it")
    elif top == "wrong_type":
        hint = (f"the answer field holds no text{at}: give the answers as text, or set answer_field to a field that "
                "holds them")
    elif top == "no_answer_marker":
        hint = (f"the gsm8k form takes the answer after the last '####' of 'answer'{at}: add the marker, or give "
                "the dataset the form of its rows (\"format\": \"messages\" or \"dapo\" with answer_field=answer)")
    elif top is not None:
        hint = f"most records were skipped as {top}: check the datasets' paths and format (the record form)"
    else:
        hint = "the inputs hold no records: check the dataset paths (and sample)"
    return message, hint


def _print_summary(m: dict[str, Any]) -> None:
    from nemotron.data.progress import fmt_counts, print_table

    rows = []
    for d in m["datasets"]:
        skipped = fmt_counts(d["skipped"]) or "-"
        rows.append([d["name"], d["schema"], f"{d['records']:,}", skipped, f"{d['duplicates']:,}",
                     f"{d['passes']:.3g}", f"{d['train_rows']:,}", f"{d['validation_rows']:,}"])
    f = m["files"]
    footer = ["total", "", f"{sum(d['records'] for d in m['datasets']):,}",
              f"{sum(sum(d['skipped'].values()) for d in m['datasets']):,}",
              f"{sum(d['duplicates'] for d in m['datasets']):,}", "",
              f"{f['train']['rows']:,}", f"{f['validation']['rows']:,}"]
    print_table(f"rl data: {m['path']} (task {m['task_name']})",
                ["dataset", "form", "records", "skipped (reason)", "duplicates", "passes", "train", "validation"],
                rows, footer=footer)
    con = driver.print_examples(m, "policies.max_examples")
    con.print(driver.work_line(m["run"], [("shards", "read")], "records", "records/s"))
    note = held_out_note(m)
    if note:
        con.print(note)
    for d in m["datasets"]:
        note = control_token_note(f"dataset {d['name']}", d.get("control_token_text", 0))
        if note:
            con.print(note)
    con.print(f"train: {f['train']['path']}  validation: {f['validation']['path']}")


def held_out_note(m: dict[str, Any]) -> str | None:
    """The summary's note about the held-out split, or ``None`` when ``split.validation_rows`` was met with at least
    one row held out.

    * No row held out (``validation.jsonl`` empty: too few distinct rows, or ``split.validation_rows=0``): ``note:
      validation.jsonl is EMPTY (0 of 1 rows held out ...)``, saying that ``rlvr`` and ``mopd`` refuse an empty
      split while they validate (:func:`nemotron.runtime.rl.val_split.empty_validation`) and how to turn it off.
    * Fewer than asked (never more than half of the rows are held out, so that training keeps at least as many):
      ``note: split.validation_rows=64 is more than the data allows: 5 of 10 rows held out ...``."""
    st = m["settings"]
    asked, held = st["validation_rows"], st["held_out"]
    total = st.get("split_rows")  # the rows after de-duplication, before passes
    of = f" of {total:,} rows" if total is not None else ""
    if held == 0:
        why = ("split.validation_rows=0" if asked == 0 else
               f"split.validation_rows={asked:,} asks for more than the data allows: never more than half of the rows")
        return (f"note: validation.jsonl is EMPTY (0{of} held out for validation; {why}): rlvr and mopd refuse it while "
                "they validate (grpo.val_period > 0, val_at_start or val_at_end); give the stage more distinct records, "
                "or run them with grpo.val_period=0 grpo.val_at_start=false grpo.val_at_end=false "
                "checkpointing.metric_name=null")
    if held >= asked:
        return None
    return (f"note: split.validation_rows={asked:,} is more than the data allows: {held:,}{of} held out for validation "
            f"(never more than half of the rows); set split.validation_rows={held:,} to ask for what it holds, or give "
            "the stage more records")
