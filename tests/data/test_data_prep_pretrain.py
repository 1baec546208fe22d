"""End-to-end tests of `nemotron ultra3 data prep pretrain` on real text and a real 131,072-entry BPE.

Corpus: the Python standard library sources (always present) and, where the shared data folder
exists, WikiText-2 and Tiny Shakespeare. The outputs are read back with Megatron-Core's own
IndexedDataset and compared with a direct tokenization of the same records.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import yaml

from data_prep_pretrain_support import (
    SHARED_DATA,
    STAGE_DIR,
    descendants,
    load_config,
    megatron_documents,
    read_records,
)

pytestmark = pytest.mark.timeout(300)

STDLIB = sysconfig.get_paths()["stdlib"]
WIKI = SHARED_DATA / "pretrain" / "wikitext2-valid.jsonl"
needs_shared = pytest.mark.skipif(not WIKI.is_file(), reason=f"shared data folder absent ({WIKI.parent})")


def tiny(out: Path, tok_cache: str, **overrides):
    """The `tiny` config, pointed at a temporary output folder."""
    return load_config("tiny", output_dir=str(out), tokenizer__cache_dir=tok_cache,
                       path_vars={"stdlib": STDLIB, "shared_data": str(SHARED_DATA)}, **overrides)


def run(cfg):
    from nemotron.data.pretrain import Settings, prepare

    return prepare(Settings.from_config(cfg), quiet=True)


def blend_file(tmp: Path, datasets: list[dict], **top) -> str:
    path = tmp / "blend.json"
    path.write_text(json.dumps({"datasets": datasets, **top}, indent=2))
    return str(path)


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in (".bin", ".idx")}


def expected_docs(records: list[str | None], eos: int, tok, valid: int, test: int) -> dict[str, list[list[int]]]:
    """Direct tokenization of a dataset's records, split by the held-out rule (skipping bad/empty records)."""
    out: dict[str, list[list[int]]] = {"valid": [], "test": [], "train": []}
    for i, text in enumerate(records):
        split = "valid" if i < valid else "test" if i < valid + test else "train"
        if text is None or not text.strip():
            continue
        out[split].append([*tok.encode(text, add_special_tokens=False).ids, eos])
    return out


SAMPLE = 120


@pytest.fixture(scope="module")
def reference(ray_instance, tok_cache, tmp_path_factory):
    """One uninterrupted tiny run (sample=120 rows per dataset, small shards, 2 workers)."""
    out = tmp_path_factory.mktemp("ref") / "out"
    cfg = tiny(out, tok_cache, sample=SAMPLE, shards={"target_tokens": 40_000}, workers={"count": 2})
    return cfg, run(cfg)


def test_megatron_reads_every_shard_and_tokens_equal_direct_tokenization(reference, tok_cache):
    from tokenizers import Tokenizer

    cfg, manifest = reference
    out = Path(manifest["path"])
    tok = Tokenizer.from_file(str(out / "tokenizer" / "tokenizer.json"))
    tok.encode_special_tokens = True
    assert manifest["dtype"] == "int32" and manifest["tokenizer"]["vocab_size"] == 131_072
    eos = manifest["tokenizer"]["eos_id"]
    assert manifest["tokenizer"]["eos_token"] == "</s>"

    files = sorted(p for p in Path(STDLIB).rglob("*.py")
                   if not str(p.relative_to(STDLIB)).startswith(("site-packages", "dist-packages")))
    datasets = {"python-stdlib": [r for f in files[:SAMPLE] for r in read_records(str(f), "text", "text")]}
    if WIKI.is_file():
        datasets["wikitext2"] = read_records(str(WIKI), "jsonl", "text")[:SAMPLE]
        datasets["tinyshakespeare"] = read_records(str(SHARED_DATA / "pretrain" / "tinyshakespeare.parquet"),
                                                   "parquet", "content")[:SAMPLE]
    assert {d["name"] for d in manifest["datasets"]} == set(datasets)
    for name, records in datasets.items():
        want = expected_docs(records, eos, tok, cfg["split"]["valid_docs"], cfg["split"]["test_docs"])
        for split in ("train", "valid", "test"):
            prefixes = [s["prefix"] for s in manifest["shards"] if s["dataset"] == name and s["split"] == split]
            got = megatron_documents(prefixes)
            assert got == want[split], f"{name} {split}: {len(got)} docs vs {len(want[split])} expected"
    train_shards = [s for s in manifest["shards"] if s["id"].startswith("python-stdlib/train_")]
    assert len(train_shards) >= 3, "small target_tokens must give several stdlib shards"

    blend = json.loads((out / "blend.json").read_text())
    assert set(blend) == {"train", "valid", "test"}
    for flat in blend.values():
        assert flat and len(flat) % 2 == 0
        for w, prefix in zip(flat[::2], flat[1::2], strict=True):  # relative to the output folder: it can move
            assert not Path(prefix).is_absolute() and prefix.startswith("data/"), prefix
            assert w > 0 and (out / f"{prefix}.bin").stat().st_size > 0 and (out / f"{prefix}.idx").is_file()
    assert manifest["tokenizer"]["megatron"]["tokenizer_model"] == "tokenizer"
    # a dataset's prefix weights add up to its blend weight: its share is exactly what the blend says
    weights = {d["name"]: d["weight"] for d in manifest["datasets"]}
    for name, w in weights.items():
        got = sum(x for x, p in zip(blend["train"][::2], blend["train"][1::2], strict=True) if p.startswith(f"data/{name}/"))
        assert got == pytest.approx(w)


def test_workers_1_and_2_give_byte_identical_outputs(reference, tok_cache, tmp_path):
    _cfg, manifest = reference
    one = tiny(tmp_path / "one", tok_cache, sample=SAMPLE, shards={"target_tokens": 40_000}, workers={"count": 1})
    m1 = run(one)
    a, b = files_of(Path(manifest["path"])), files_of(tmp_path / "one")
    assert a.keys() == b.keys() and len(a) >= 10
    assert all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]
    ref_blend = (Path(manifest["path"]) / "blend.json").read_text().replace(manifest["path"], "ROOT")
    assert (tmp_path / "one" / "blend.json").read_text().replace(str(tmp_path / "one"), "ROOT") == ref_blend
    assert m1["plan_key"] != manifest["plan_key"]  # the plan key includes the folder; the data does not


@needs_shared
def test_one_file_cut_into_many_shards_loses_and_repeats_nothing(ray_instance, tok_cache, tmp_path):
    from tokenizers import Tokenizer

    blend = blend_file(tmp_path, [{"name": "wiki", "path": str(WIKI), "weight": 1.0}])
    m = run(tiny(tmp_path / "out", tok_cache, blend_path=blend, shards={"target_tokens": 15_000}))
    train = [s for s in m["shards"] if s["split"] == "train"]
    assert len(train) >= 5, f"one file should give several shards, got {len(train)}"
    tok = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer" / "tokenizer.json"))
    tok.encode_special_tokens = True
    want = expected_docs(read_records(str(WIKI), "jsonl", "text"), m["tokenizer"]["eos_id"], tok, 10, 10)
    got = megatron_documents([s["prefix"] for s in train])
    assert got == want["train"] and len(got) == 40


@needs_shared
def test_sigkill_mid_run_then_rerun_equals_uninterrupted(reference, tok_cache, tmp_path):
    _cfg, manifest = reference
    out = tmp_path / "killed"
    killed_cfg = tiny(out, tok_cache, sample=SAMPLE, shards={"target_tokens": 40_000}, workers={"count": 1},
                      run={"env": {"nodes": 1, "gpus_per_node": None, "cpus": 1}})
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(killed_cfg))
    proc = subprocess.Popen([sys.executable, str(STAGE_DIR / "run.py"), "--config", str(train_yaml)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    total = len(manifest["shards"])
    deadline = time.monotonic() + 120
    done: list[Path] = []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            done = list(out.rglob("*.receipt.json"))
            if len(done) >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read().decode()[-800:]}"
        victims = [proc.pid, *descendants(proc.pid)]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    in_flight = list(out.rglob("*.tmp-*"))
    assert not (out / "manifest.json").exists(), "killed before the end"
    receipts_at_kill = len(list(out.rglob("*.receipt.json")))
    assert 2 <= receipts_at_kill < total
    assert len({p.name.split(".")[0] + str(p.parent) for p in in_flight}) <= 1, "at most one shard per worker in flight"

    resumed = run(killed_cfg)
    assert resumed["run"]["shards_reused"] >= receipts_at_kill
    assert resumed["run"]["shards_built"] == total - resumed["run"]["shards_reused"]
    a, b = files_of(Path(manifest["path"])), files_of(out)
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)
    assert not list(out.rglob("*.tmp-*")), "temporary files are cleaned up"
    rerun = run(killed_cfg)
    assert rerun == resumed  # up to date: nothing rebuilt, the finished manifest is returned


@needs_shared
def test_force_never_overwrites_consumed_output(ray_instance, tok_cache, tmp_path):
    from nemotron.data.outputs import consumers, record_consumer
    from nemotron.errors import ConfigError

    blend = blend_file(tmp_path, [{"name": "wiki", "path": str(WIKI), "weight": 1.0}])
    out = tmp_path / "out"
    base = dict(blend_path=blend, shards={"target_tokens": 100_000})
    m1 = run(tiny(out, tok_cache, **base))
    assert m1["version"] == 1 and Path(m1["path"]) == out
    snapshot = files_of(out)
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.bin")}

    with pytest.raises(ConfigError, match="other inputs or settings"):
        run(tiny(out, tok_cache, max_doc_tokens=64, **base))

    record_consumer(out, stage="pretrain", run_id="pretrain-2024-01-01/job 7", artifact="ultra3-pretrain-ckpt:1")
    assert consumers(out)[0]["run_id"] == "pretrain-2024-01-01/job 7"
    m2 = run(tiny(out, tok_cache, force=True, max_doc_tokens=64, **base))
    assert m2["version"] == 2 and Path(m2["path"]) == out / "v2"
    from nemotron.data.blend import read_blend_pairs

    assert files_of(out / "v2") and read_blend_pairs(out / "v2" / "blend.json")["train"][0][1].is_relative_to(out / "v2")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.bin") if "v2" not in p.parts} == stamps
    assert {k: v for k, v in files_of(out).items() if not k.startswith("v2")} == snapshot
    m3 = run(tiny(out, tok_cache, force=True, **base))  # v2 is not consumed: rebuilt in place
    assert m3["version"] == 2 and not (out / "v3").exists()


def test_bad_inputs_are_counted_with_file_and_line(ray_instance, tok_cache, tmp_path):
    from nemotron.errors import ConfigError, RuntimeFailure

    bad = tmp_path / "bad.jsonl"
    long_text = "word " * 400
    lines = [json.dumps({"text": f"good document {i}"}).encode() for i in range(25)] + [
        json.dumps({"text": ""}).encode(),                      # line 26: empty
        json.dumps({"text": "   \n\t "}).encode(),              # line 27: whitespace only
        json.dumps({"body": "no text field"}).encode(),         # line 28: missing field
        b'{"text": "caf\xe9 latin-1"}',                         # line 29: not UTF-8
        b'{"text": "unterminated',                              # line 30: malformed JSON
        json.dumps({"text": long_text}).encode(),               # line 31: too long
        json.dumps({"text": 42}).encode(),                      # line 32: not a string (wrong_type)
    ]
    bad.write_bytes(b"\n".join(lines) + b"\n")
    blend = blend_file(tmp_path, [{"name": "bad", "path": str(bad), "weight": 2.0}])
    m = run(tiny(tmp_path / "out", tok_cache, blend_path=blend, max_doc_tokens=32))
    d = m["datasets"][0]
    assert d["skipped"] == {"empty": 2, "invalid_utf8": 1, "malformed_json": 1, "missing_field": 1, "wrong_type": 1}
    assert d["truncated"] == 1
    text = "\n".join(d["examples"])
    assert f"{bad}:26: empty" in text and f"{bad}:28: missing_field" in text and f"{bad}:29: invalid_utf8" in text
    # the truncated document keeps its end-of-document token and is exactly max_doc_tokens long
    docs = megatron_documents([s["prefix"] for s in m["shards"] if s["split"] == "train"])
    longest = max(docs, key=len)
    assert len(longest) == 32 and longest[-1] == m["tokenizer"]["eos_id"]
    assert sum(len(x) for x in docs) == d["tokens"]["train"]

    for policy, line, reason in (("malformed_json", 30, "malformed_json"), ("invalid_utf8", 29, "invalid_utf8"),
                                 ("too_long", 31, "too_long")):
        with pytest.raises(RuntimeFailure, match=f"{bad}:{line}: {reason}"):
            run(tiny(tmp_path / f"fail-{policy}", tok_cache, blend_path=blend, max_doc_tokens=32,
                     on_bad={policy: "fail"}))

    # a glob that matches nothing: an error naming the blend file and line, or skipped by policy
    blend2 = blend_file(tmp_path, [{"name": "bad", "path": str(bad), "weight": 1.0},
                                   {"name": "nothing", "path": str(tmp_path / "nope" / "*.jsonl"), "weight": 1.0}])
    with pytest.raises(ConfigError, match=r"blend\.json:\d+: datasets \(nothing\): path .* matches no file"):
        run(tiny(tmp_path / "glob", tok_cache, blend_path=blend2))
    m = run(tiny(tmp_path / "glob2", tok_cache, blend_path=blend2, on_bad={"empty_glob": "skip"}))
    assert [x["name"] for x in m["datasets"]] == ["bad"] and "matches no file" in m["blend"]["not_found"][0]

    # uint16 cannot hold a 131,072-entry vocabulary (on the first blend: blend_file rewrote blend.json)
    blend = blend_file(tmp_path, [{"name": "bad", "path": str(bad), "weight": 2.0}])
    with pytest.raises(ConfigError, match=r"uint16.*131,072"):
        run(tiny(tmp_path / "u16", tok_cache, blend_path=blend, output={"dtype": "uint16"}))


def test_run_py_exit_codes(tok_cache, tmp_path):
    """run.py maps outcomes to exit codes: 2 for a config problem, 1 for a runtime failure."""
    bad_key = tiny(tmp_path / "a", tok_cache)
    bad_key["shards"]["target_tokenz"] = 5
    cfg_path = tmp_path / "a.yaml"
    cfg_path.write_text(yaml.safe_dump(bad_key))
    r = subprocess.run([sys.executable, str(STAGE_DIR / "run.py"), "--config", str(cfg_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown key shards.target_tokenz; did you mean shards.target_tokens?" in r.stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n' * 25 + '{"text": broken\n')
    cfg = tiny(tmp_path / "b", tok_cache, blend_path=blend_file(tmp_path, [{"name": "x", "path": str(bad), "weight": 1}]),
               on_bad={"malformed_json": "fail"}, run={"env": {"nodes": 1, "gpus_per_node": None, "cpus": 1}})
    cfg_path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, str(STAGE_DIR / "run.py"), "--config", str(cfg_path)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"error: {bad}:26: malformed_json" in r.stderr
    assert "hint: set on_bad.malformed_json=skip" in r.stderr


def test_resumed_summary_rates_only_this_runs_work(ray_instance, tok_cache, tmp_path, capsys):
    """After a resume the work line's tokens and rate are of the shards this run wrote; the reused
    shards and tokens are said apart, and the total row has no wall time or rate of all tokens."""
    from nemotron.data.pretrain import Settings, prepare
    from nemotron.data.progress import human

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i}: " + "lorem ipsum dolor sit amet " * 30}) + "\n"
                            for i in range(200)))
    cfg = tiny(tmp_path / "out", tok_cache, blend_path=blend_file(tmp_path, [{"name": "d", "path": str(data), "weight": 1}]),
               shards={"target_tokens": 5_000})
    first = run(cfg)
    n = first["totals"]["shards"]
    assert n >= 3
    (tmp_path / "out" / "manifest.json").unlink()
    lost = sorted((tmp_path / "out" / "data" / "d").glob("train_*.receipt.json"))[0]
    lost.unlink()
    m = prepare(Settings.from_config(cfg), live_progress=False)
    text = capsys.readouterr().out
    r, tokens = m["run"], sum(m["totals"]["tokens"].values())
    built = next(s["tokens"] for s in m["shards"] if lost.name.startswith(Path(s["prefix"]).name + "."))
    assert r["shards_built"] == 1 and r["tokens_built"] == built and r["tokens_reused"] == tokens - built
    assert (f"work: 1 of {n} shards built: {human(built)} tokens in {r['work_seconds']:.1f}s "
            f"({human(built / r['work_seconds'])} tok/s); reused from a previous run: {n - 1} shards, "
            f"{human(tokens - built)} tokens; {r['seconds']:.1f}s in all") in text.splitlines()
    total = next(ln for ln in text.splitlines() if ln.startswith("| total "))
    assert [c.strip() for c in total.strip().strip("|").split("|")][5:9] == [str(n), "", "", "100%"]


def test_no_training_tokens_says_why_and_which_key(ray_instance, tok_cache, tmp_path):
    from nemotron.errors import RuntimeFailure

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"document number {i} " * 20}) + "\n" for i in range(30)))
    blend = blend_file(tmp_path, [{"name": "d", "path": str(data), "weight": 1}])
    with pytest.raises(RuntimeFailure) as err:
        run(tiny(tmp_path / "a", tok_cache, blend_path=blend, max_doc_tokens=8, on_bad={"too_long": "skip"}))
    assert err.value.message == ("dataset d produced no training tokens: 30 records skipped (too_long 30), "
                                 "0 held out for validation and 0 for test")
    assert err.value.hint.startswith("max_doc_tokens=8 is below every document's length: raise it, or set "
                                     "on_bad.too_long=truncate; first skipped: ")
    assert err.value.hint.count(": too_long: ") == 3  # the records it names (the summary is never printed)
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(15)))
    with pytest.raises(RuntimeFailure) as err:
        run(tiny(tmp_path / "b", tok_cache, blend_path=blend_file(tmp_path, [{"name": "s", "path": str(short), "weight": 1}])))
    assert err.value.message == ("dataset s produced no training tokens: 0 records skipped, 10 held out for "
                                 "validation and 5 for test")
    assert err.value.hint == ("the dataset has 15 records, all held out by split.valid_docs=10 + split.test_docs=10: "
                              "lower them below 15 together")


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_text_field_of_the_wrong_type_is_named_as_such(ray_instance, tok_cache, tmp_path, fmt):
    """A text field that holds numbers is ``wrong_type`` (not ``missing_field``), and the hint is about the field's
    type, not about renaming text_field (which would name the same field)."""
    from nemotron.errors import RuntimeFailure

    path = tmp_path / f"inttext.{fmt}"
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": list(range(30))}), path)
    else:
        path.write_text("".join(json.dumps({"text": i}) + "\n" for i in range(30)))
    blend = blend_file(tmp_path, [{"name": "inttext", "path": str(path), "weight": 1}])
    with pytest.raises(RuntimeFailure) as err:
        run(tiny(tmp_path / "out", tok_cache, blend_path=blend, split={"valid_docs": 1, "test_docs": 1}))
    assert "(wrong_type " in err.value.message and "missing_field" not in err.value.message, err.value.message
    assert err.value.hint.startswith("the field 'text' holds no text (numbers, lists or objects): point the dataset's "
                                     "text_field at a string field, or convert that column to text"), err.value.hint
    assert ": wrong_type: " in err.value.hint and "is int, not text" in err.value.hint


def test_a_jsonl_line_that_is_no_object_is_not_object_not_missing_field(ray_instance, tok_cache, tmp_path):
    """JSONL lines that are a list, a string or null were counted as ``missing_field: record is not an object``
    (and the hint said to set text_field): now reason ``not_object``, saying what the line is, with a hint about the
    records' form; mixed with good documents they are skipped and counted as such."""
    from nemotron.errors import RuntimeFailure

    path = tmp_path / "lists.jsonl"
    path.write_text("[1, 2, 3]\n\"just a string\"\nnull\n" * 10)
    blend = blend_file(tmp_path, [{"name": "lists", "path": str(path), "weight": 1}])
    with pytest.raises(RuntimeFailure) as err:
        run(tiny(tmp_path / "out", tok_cache, blend_path=blend, split={"valid_docs": 1, "test_docs": 1}))
    assert "(not_object 30)" in err.value.message and "missing_field" not in err.value.message, err.value.message
    assert err.value.hint.startswith("the records are not JSON objects (each line a list, a string or null): give one "
                                     "object per line with the text in 'text'"), err.value.hint
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps({"text": f"good document {i}"}) + "\n" for i in range(20))
                     + "[1, 2, 3]\n\"just a string\"\nnull\n")
    blend = blend_file(tmp_path, [{"name": "mixed", "path": str(mixed), "weight": 1}])
    d = run(tiny(tmp_path / "out2", tok_cache, blend_path=blend, split={"valid_docs": 1, "test_docs": 1}))["datasets"][0]
    assert d["skipped"] == {"not_object": 3}
    text = "\n".join(d["examples"])
    assert f"{mixed}:21: not_object: the record is a list, not a JSON object with field 'text'" in text, text
    assert f"{mixed}:22: not_object: the record is a string" in text and f"{mixed}:23: not_object: the record is null" in text


def test_a_truncated_shard_of_a_finished_output_is_rebuilt(ray_instance, tok_cache, tmp_path, capsys):
    """A finished output with a truncated .bin is not up to date: the rerun names the shard and rebuilds it."""
    from nemotron.data import outputs
    from nemotron.data.pretrain import Settings, prepare

    cfg = tiny(tmp_path / "o", tok_cache)
    m = run(cfg)
    shard = sorted((tmp_path / "o" / "data").rglob("*.bin"))[-1]
    before = shard.read_bytes()
    with open(shard, "r+b") as fh:
        fh.truncate(1000)
    assert [ln.split(":")[0] for ln in outputs.damaged_files(tmp_path / "o", m)] == [str(shard.relative_to(tmp_path / "o"))]
    capsys.readouterr()
    prepare(Settings.from_config(cfg), live_progress=False)
    out = capsys.readouterr().out
    assert "nothing to do" not in out and f"{shard.relative_to(tmp_path / 'o')}: 1,000 bytes, its receipt records" in out, out
    assert shard.read_bytes() == before
