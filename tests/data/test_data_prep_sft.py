"""End-to-end tests of `nemotron ultra3 data prep sft` on real chat data and a real 131,072-entry BPE.

Data: our chat sample shipped with the stage (always present) and, where the shared data folder
exists, FastChat's ShareGPT conversations and GPTeacher's Alpaca records (../shared/data/sft). The
packed Parquet is read back the way Megatron-Bridge's packed loader reads it, and what the loss mask
selects is compared with the assistant text computed independently from the input records.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from nemotron.data import chat
from nemotron.errors import ConfigError, RuntimeFailure
from config_support import config_valid
from data_prep_sft_support import SFT_DIR, SHARED_DATA, TEMPLATE, compile_stage, loader_view, read_packs

pytestmark = pytest.mark.timeout(300)
SHARED_SFT = SHARED_DATA / "sft" / "gpteacher-codegen-instruct.json"


def config(out: Path, tok_cache: str, **overrides):
    base = {"output_dir": str(out), "tokenizer__cache_dir": tok_cache, "path_vars__shared_data": str(SHARED_DATA),
            "sample": 150, "pack__window": 120, "split__validation_fraction": 0.1}
    base.update(overrides)
    return compile_stage("data-prep-sft", "tiny", **base)


def run(cfg):
    from nemotron.data.sft import Settings, prepare

    return prepare(Settings.from_config(cfg), quiet=True)


def outputs_of(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "data").glob("*.idx.parquet"))}


@pytest.fixture(scope="module")
def reference(ray_instance, tok_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "ref"
    manifest = run(config(out, tok_cache, workers__count=1))
    return out, manifest


def test_parquet_is_what_the_packed_loader_reads(reference):
    out, m = reference
    path = Path(m["loader"]["packed_train_data_path"])
    assert path.name == "training_4096.idx.parquet" and path.parent == out / "data"
    schema = pq.read_schema(path)
    assert str(schema.field("input_ids").type) == "list<element: int32>"
    assert str(schema.field("loss_mask").type) == "list<element: uint8>"
    assert str(schema.field("seq_start_id").type) == "list<element: int32>"
    rows = read_packs(path)
    assert len(rows) == m["packing"]["train"]["packs"] > 1
    for row in rows:
        ids, mask, starts = row["input_ids"], row["loss_mask"], row["seq_start_id"]
        assert len(mask) == len(ids) and set(mask) <= {0, 1}
        assert starts[0] == 0 and all(a < b for a, b in itertools.pairwise(starts)) and starts[-1] < len(ids)
        assert len(ids) <= 4096  # a row never exceeds the pack size, so what the loader feeds fits too
    meta = json.loads((out / "data" / "4096_metadata.jsonl").read_text())
    assert [set(e) for e in meta] == [{"dataset_max_seqlen", "max_samples_per_bin", "packing_factor",
                                       "packing_efficiency", "pack_size", "min_packed_seqlen"}] * 2
    assert meta[0]["max_samples_per_bin"] == max(len(r["seq_start_id"]) for r in rows)


def test_loss_mask_is_label_aligned_and_selects_exactly_the_assistant_output(reference, tok_cache):
    """The loader trains the prediction of ``input_ids[t + 1]`` where ``loss_mask[t]`` is 1 (labels are
    inputs shifted by one). So the labels the mask selects, decoded, must be exactly the assistant
    output (reasoning, ``</think>``, answer, tool calls, ``<|im_end|>``), and nothing of the prompt."""
    from nemotron.data import tokenizer as tk

    out, m = reference
    tok = tk.load(str(out / "tokenizer" / "tokenizer.json"), False)
    end = tok.token_to_id("<|im_end|>")
    got = []
    for split in ("train", "valid"):
        for row in read_packs(m["loader"][f"packed_{'train' if split == 'train' else 'val'}_data_path"]):
            for _inputs, labels, weights in loader_view(row):
                runs, cur = [], []
                for label, w in zip(labels, weights, strict=True):
                    if w:
                        cur.append(label)
                        if label == end:
                            runs.append(tok.decode(cur, skip_special_tokens=False))
                            cur = []
                assert not cur, "a learned run that does not end with <|im_end|>"
                got.append(tuple(runs))
    # the same, computed from the input records without the pipeline
    template = chat.load_template(str(TEMPLATE))
    want = []
    for line in (SFT_DIR / "samples" / "chat_sample.jsonl").read_text().splitlines():
        msgs, tools = chat.normalise(json.loads(line), None)
        for sample in chat.training_samples(msgs):
            seg = chat.segment(template, sample, tools)
            want.append(tuple(p for p, learned in zip(seg.pieces, seg.learned, strict=True) if learned))
    for w in want:
        assert w in got, f"the learned text of a sample is not in the packs: {w}"
    assert all(r[-1].endswith("<|im_end|>") for r in got if r)


def test_manifest_names_what_validation_reads(reference):
    from nemotron.layout.views import manifest_field, read_manifest

    out, m = reference
    found, where = read_manifest(str(out))
    assert where.endswith("manifest.json") and found["complete"]
    assert manifest_field(found, "pack_size") == 4096 and manifest_field(found, "pad_to_multiple") == 1
    tok = manifest_field(found, "tokenizer")
    assert tok["vocab_size"] == 131_072 and len(tok["vocab_sha256"]) == 64 and tok["name"].endswith("tekken_240911.json")
    assert set(tok["added_special_tokens"]) >= {"<|im_start|>", "<|im_end|>", "<think>", "</think>"}
    p = m["packing"]["train"]
    assert 0.5 < p["fill"] <= 1 and 0 < p["trained_fraction"] < 1
    assert m["totals"]["lost_tokens"] == 0 and m["datasets"][0]["name"] == "chat-sample"
    assert (out / "tokenizer" / "tokenizer_config.json").is_file()


def test_deterministic_whatever_the_worker_count_and_resumable(reference, ray_instance, tok_cache, tmp_path):
    ref_out, ref = reference
    other = tmp_path / "two"
    m2 = run(config(other, tok_cache, workers__count=2))
    assert outputs_of(other) == outputs_of(ref_out)
    strip = {k: {x: y for x, y in v.items() if x != "path"} for k, v in ref["packing"].items()}
    assert {k: {x: y for x, y in v.items() if x != "path"} for k, v in m2["packing"].items()} == strip
    # a run killed half way: one tokenized shard and the joined outputs lost, the manifest not written
    (other / "manifest.json").unlink()
    seq = sorted((other / "data" / "sequences").rglob("*.receipt.json"))
    seq[0].unlink()
    for f in (other / "data").glob("*.idx.parquet*"):
        f.unlink()
    m3 = run(config(other, tok_cache, workers__count=2))
    assert outputs_of(other) == outputs_of(ref_out)
    assert m3["plan_key"] == m2["plan_key"]
    # finished output: a rerun does nothing
    assert run(config(other, tok_cache, workers__count=2))["created"] == m3["created"]
    with pytest.raises(ConfigError, match="other inputs or settings"):
        run(config(other, tok_cache, pack__seed=99))


def test_pad_multiple_for_context_parallel(ray_instance, tok_cache, tmp_path):
    m = run(config(tmp_path / "cp", tok_cache, pack__pad_to_multiple=8, sample=60))
    assert m["pad_to_multiple"] == 8 and m["loader"]["pad_seq_to_mult"] == 8
    pad = m["pad_id"]
    for row in read_packs(m["loader"]["packed_train_data_path"]):
        for inputs, _labels, _weights in loader_view(row):
            assert len(inputs) % 8 == 0  # every fed sub-sequence is a multiple of 2 x CP (x TP)
        bounds = row["seq_start_id"] + [len(row["input_ids"])]
        for s, e in itertools.pairwise(bounds):
            seq, mask = row["input_ids"][s:e], row["loss_mask"][s:e]
            k = len(seq)
            while k > 0 and seq[k - 1] == pad:
                k -= 1
            assert k < len(seq) or (len(seq) - 1) % 8 == 0
            assert not any(mask[k - 1:]), "padding (and the last real token, whose label is padding) carries no loss"


def test_too_long_conversations_are_truncated_at_a_turn_or_dropped(ray_instance, tok_cache, tmp_path):
    m = run(config(tmp_path / "short", tok_cache, pack__pack_size=128, sample=40))
    d = {x["name"]: x for x in m["datasets"]}
    lost = sum(x["truncated_tokens"] + x["dropped_tokens"] for x in d.values())
    assert lost == m["totals"]["lost_tokens"] > 0
    assert any(x["truncated"] for x in d.values()) or any(x["skipped"].get("too_long") for x in d.values())
    for row in read_packs(m["loader"]["packed_train_data_path"]):
        for inputs, _labels, _weights in loader_view(row):
            assert len(inputs) <= 128
    with pytest.raises(RuntimeFailure, match=r"\.jsonl?:\d+: too_long: \d+ tokens do not fit pack_size=128"):
        run(config(tmp_path / "fail", tok_cache, pack__pack_size=128, sample=40, policies__too_long="fail"))


def test_bad_records_are_counted_with_file_and_line(ray_instance, tok_cache, tmp_path):
    data = tmp_path / "bad.jsonl"
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    lines = [json.dumps(good), "{not json", json.dumps({"messages": [{"role": "user", "content": "only a question"}]}),
             json.dumps({"messages": [{"role": "wizard", "content": "x"}, {"role": "assistant", "content": "y"}]}),
             json.dumps({"conversations": [{"from": "human", "value": "a"}, {"from": "human", "value": "b"},
                                           {"from": "gpt", "value": "c"}]}),
             json.dumps(good)]
    data.write_text("\n".join(lines) + "\n")
    blend = tmp_path / "blend.json"
    blend.write_text(json.dumps({"datasets": [{"name": "bad", "path": str(data), "weight": 1.0}]}))
    cfg = config(tmp_path / "out", tok_cache, blend_path=str(blend), split__validation_fraction=0.0)
    m = run(cfg)
    d = m["datasets"][0]
    assert d["records"] == 6 and d["conversations"] == 3  # two good ones and the merged user turns
    assert d["skipped"] == {"malformed_json": 1, "no_assistant_turn": 1, "unknown_role": 1}
    assert any(f"{data}:2: malformed_json" in e for e in d["examples"])
    assert any(f"{data}:4: unknown_role" in e for e in d["examples"])
    cfg_fail = config(tmp_path / "out2", tok_cache, blend_path=str(blend), policies__unknown_role="fail")
    with pytest.raises(RuntimeFailure, match=rf"{data}:4: unknown_role: message 0 has role 'wizard'"):
        run(cfg_fail)


def test_weighted_mixing_repeats_datasets_never_drops(ray_instance, tok_cache, tmp_path):
    if not SHARED_SFT.is_file():
        pytest.skip(f"shared data folder absent ({SHARED_SFT.parent})")
    blend = json.loads((SFT_DIR / "blends" / "tiny.json").read_text())
    blend["datasets"][0]["weight"] = 1.0   # chat-sample: tiny, so a weight equal to the others repeats it
    path = tmp_path / "w.json"
    path.write_text(json.dumps(blend))
    m = run(config(tmp_path / "w", tok_cache, blend_path=str(path), mixing="weighted", sample=100,
                   path_vars__stage_dir=str(SFT_DIR)))
    d = {x["name"]: x for x in m["datasets"]}
    assert min(x["passes"] for x in d.values()) == pytest.approx(1.0)
    assert d["chat-sample"]["passes"] > 2
    shares = [x["effective_share"] for x in d.values()]
    assert all(s == pytest.approx(1 / 3, rel=1e-6) for s in shares)  # equal weights, equal token shares
    n_train = m["packing"]["train"]["sequences"]
    assert n_train >= sum(x["sequences"]["train"] for x in d.values())


def test_cli_entry_reports_config_errors(tmp_path):
    cfg = compile_stage("data-prep-sft", "tiny", output_dir=str(tmp_path / "o"))
    cfg["pack"]["pack_sise"] = 10
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, str(SFT_DIR / "run.py"), "--config", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown key pack.pack_sise; did you mean pack.pack_size?" in proc.stderr


def test_cli_dry_run(tmp_path, monkeypatch, capsys):
    from nemotron.cli.main import main

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    code = main(["ultra3", "data", "prep", "sft", "-c", "tiny", "--dry-run", "pack.pad_to_multiple=8"])
    out = capsys.readouterr().out
    assert code == 0 and "pad_to_multiple: 8" in out and "data_prep_sft/run.py" in out


def test_duplicate_conversations_are_counted_as_rl_counts_them(ray_instance, tok_cache, tmp_path, capsys):
    """10 records with one id and one content, and the same conversation again in a second dataset, were written
    with no word (data prep rl has a `duplicates` column). The summary's `duplicates` column, the manifest and a
    note count every repeat of an earlier conversation (the same messages and tools, whatever the id), across
    datasets as RL counts them; they are kept (each copy trained on), as the note says."""
    same = {"id": "same", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    other = [{"id": "same", "messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
             for i in range(5)]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(x) + "\n" for x in [same] * 10 + other))
    b.write_text(json.dumps({**same, "id": "other"}) + "\n" + json.dumps(other[0]) + "\n"
                 + json.dumps({"messages": [{"role": "user", "content": "new"}, {"role": "assistant", "content": "x"}]}))
    blend = tmp_path / "blend.json"
    blend.write_text(json.dumps({"datasets": [{"name": "a", "path": str(a), "weight": 1.0},
                                              {"name": "b", "path": str(b), "weight": 1.0}]}))
    from nemotron.data.sft import Settings, prepare

    m = prepare(Settings.from_config(config(tmp_path / "out", tok_cache, blend_path=str(blend),
                                            split__validation_fraction=0.0)), live_progress=False)
    text = capsys.readouterr().out
    by = {d["name"]: d for d in m["datasets"]}
    assert by["a"]["duplicates"] == 9 and by["b"]["duplicates"] == 2 and m["totals"]["duplicates"] == 11
    assert by["a"]["conversations"] == 15 and by["a"]["samples"] == 15  # kept: reported, not dropped
    assert _row(text, "a")[4] == "9" and _row(text, "b")[4] == "2" and _row(text, "total")[4] == "11", text
    assert ("note: 11 conversation(s) repeat an earlier one (the same messages and tools; a 9, b 2): kept, each copy "
            "is trained on") in text, text


def _row(out: str, first: str) -> list[str]:
    """The cells of the printed table row whose first cell is ``first``."""
    line = next(ln for ln in out.splitlines() if ln.startswith(f"| {first} "))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _final_progress_counts(out: str) -> dict[str, int]:
    """How many times each progress bar printed its 100% line."""
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    return {t: sum(ln.startswith(f"[{t}] 100.0%") for ln in lines) for t in {ln[1:].split("]")[0] for ln in lines}}


def test_summary_tells_this_runs_work_and_warns_without_validation(ray_instance, tok_cache, tmp_path, capsys,
                                                                   monkeypatch):
    from nemotron.cli.main import main
    from nemotron.data.progress import human
    from nemotron.data.sft import Settings, prepare

    out = tmp_path / "s"
    cfg = config(out, tok_cache, sample=30, split__validation_fraction=0.0)
    m = prepare(Settings.from_config(cfg), live_progress=False)
    text = capsys.readouterr().out
    lines = text.splitlines()
    t, r = m["totals"], m["run"]
    # the total row: counts only; no seconds under "passes", no rate under "share"
    assert _row(text, "total") == ["total", f"{t['records']:,}", f"{t['samples']:,}", "0", "0", "0", "0",
                                   human(t["tokens"]), "", "", "100%"]
    counts = _final_progress_counts(text)
    assert {"sft sequences", "sft packs"} <= set(counts) and set(counts.values()) == {1}, counts
    n, w = r["shards_built"], r["windows_built"]
    assert r["tokens_built"] == t["tokens"] and r["shards_reused"] == r["windows_reused"] == 0
    assert (f"work: {n} of {n} shards tokenized and {w} of {w} windows packed: {human(t['tokens'])} tokens in "
            f"{r['work_seconds']:.1f}s ({human(t['tokens'] / r['work_seconds'])} tok/s); {r['seconds']:.1f}s in all"
            ) in lines
    assert m["loader"]["packed_val_data_path"] is None
    assert ("warning: no validation set (split.validation_fraction=0); the sft stage gets packed_val_data_path: "
            "null and runs no validation") in lines

    # resumed: one tokenized shard and the joined outputs lost; the rate is of the one shard redone
    (out / "manifest.json").unlink()
    sorted((out / "data" / "sequences").rglob("*.receipt.json"))[0].unlink()
    for f in (out / "data").glob("*.idx.parquet*"):
        f.unlink()
    m2 = prepare(Settings.from_config(cfg), live_progress=False)
    lines = capsys.readouterr().out.splitlines()
    r2 = m2["run"]
    assert r2["shards_built"] == 1 and r2["tokens_built"] + r2["tokens_reused"] == t["tokens"]
    assert (f"work: 1 of {n} shards tokenized and {w} of {w} windows packed: {human(r2['tokens_built'])} tokens in "
            f"{r2['work_seconds']:.1f}s ({human(r2['tokens_built'] / r2['work_seconds'])} tok/s); reused from a "
            f"previous run: {n - 1} shards, {human(r2['tokens_reused'])} tokens; {r2['seconds']:.1f}s in all") in lines

    # the sft stage's dry-run on that data (its artifact has valid_path: null) warns
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    specs = "dataset.packed_sequence_specs"
    # on a cluster profile whose nodes mount that folder (without a profile `-c tiny` is refused on this machine)
    env = tmp_path / "env.toml"
    env.write_text(f'[cluster]\nexecutor = "slurm"\naccount = "acct"\npartition = "batch"\ngpus_per_node = 8\n'
                   f'gpu = "H100"\njob_dir = "/shared/jobs"\nmounts = ["{out}:{out}"]\n', encoding="utf-8")
    code = main(["ultra3", "sft", "-c", "tiny", "--dry-run", "--batch", "cluster", "--env-file", str(env),
                 f"dataset.dataset_root={out}",
                 f"{specs}.packed_train_data_path={m2['loader']['packed_train_data_path']}",
                 f"{specs}.packed_metadata_path={m2['loader']['packed_metadata_path']}", f"{specs}.packed_val_data_path=null"])
    dry = capsys.readouterr()
    assert config_valid(code, dry.out), dry.out[-2000:]  # 2: its pretrained checkpoint is not made yet
    assert (f"warning: {specs}.packed_val_data_path=null: no validation data: the packed SFT data has no validation "
            "split, so this run computes no validation loss; valid: re-run data prep sft with "
            "split.validation_fraction > 0 and enough records for it") in (dry.out + dry.err).splitlines()


def test_too_few_records_for_the_validation_fraction_are_warned(ray_instance, tok_cache, tmp_path, capsys):
    from nemotron.data.sft import Settings, prepare

    m = prepare(Settings.from_config(config(tmp_path / "f", tok_cache, sample=10, split__validation_fraction=0.001)),
                live_progress=False)
    n = sum(d["sequences"]["train"] + d["sequences"]["valid"] for d in m["datasets"])
    assert m["loader"]["packed_val_data_path"] is None
    assert (f"warning: no validation set (none of the {n:,} sequences fell in the held-out share "
            f"split.validation_fraction=0.001 (about {n * 0.001:.2g} expected): too few records for the fraction); "
            "the sft stage gets packed_val_data_path: null and runs no validation") in capsys.readouterr().out.splitlines()


def test_no_training_sequence_says_why_and_which_key(ray_instance, tok_cache, tmp_path, capsys):
    from nemotron.data.sft import Settings, prepare

    with pytest.raises(RuntimeFailure) as err:
        prepare(Settings.from_config(config(tmp_path / "p", tok_cache, sample=10, pack__pack_size=16)),
                live_progress=False)
    # every record is too long for the pack: the blend's first dataset is named as contributing nothing (its
    # counts, its reason) and the hint names the key to change, not the records
    receipts = [json.loads(p.read_text()) for p in sorted((tmp_path / "p" / "data" / "sequences").rglob("*.receipt.json"))]
    receipts = [r for r in receipts if r["dataset"] == "chat-sample"]
    records = sum(r["records"] for r in receipts)
    too_long = sum(r["skipped"].get("too_long", 0) for r in receipts)
    shortest = min(r["shortest_dropped"] for r in receipts if r["shortest_dropped"])
    assert records and too_long >= records and shortest > 16
    assert err.value.message == (f"dataset chat-sample (weight 1) contributes nothing: {records:,} records read, all "
                                 f"rejected (top reasons: too_long {too_long:,})")
    assert err.value.hint == (f"pack.pack_size=16 is smaller than every sample (the shortest dropped one has "
                              f"{shortest:,} tokens): set pack.pack_size to at least {shortest}")


def test_a_damaged_finished_output_is_rebuilt_not_up_to_date(ray_instance, tok_cache, tmp_path, capsys):
    """A truncated training file and a deleted validation file of a finished output: the rerun warns, names them,
    and writes them again (the same bytes), never "up to date"."""
    from nemotron.data import outputs
    from nemotron.data.files import sha256_file

    cfg = config(tmp_path / "o", tok_cache)
    m = run(cfg)
    train, valid = Path(m["loader"]["packed_train_data_path"]), Path(m["loader"]["packed_val_data_path"])
    digests = {p: sha256_file(p) for p in (train, valid)}
    with open(train, "r+b") as fh:
        fh.truncate(500)
    valid.unlink()
    damaged = outputs.damaged_files(tmp_path / "o", m)
    assert any(line.startswith(f"{train.relative_to(tmp_path / 'o')}: 500 bytes, its receipt records ") for line in damaged)
    assert f"{valid.relative_to(tmp_path / 'o')}: missing" in " ".join(damaged), damaged
    capsys.readouterr()
    from nemotron.data.sft import Settings, prepare

    prepare(Settings.from_config(cfg), live_progress=False)
    out = capsys.readouterr().out
    assert "nothing to do" not in out and "2 files changed since" in out, out
    assert {p: sha256_file(p) for p in (train, valid)} == digests
    assert outputs.damaged_files(tmp_path / "o", m) == []
