"""Unit tests of the pretraining data-prep building blocks (no Ray): tokenizer conversion, the indexed
dataset writer, blends, readers, settings and output versions."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import sysconfig
from pathlib import Path

import pytest

from data_prep_pretrain_support import SHARED_DATA, load_config, megatron_documents

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def tekken_path() -> str:
    import mistral_common

    return str(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json")


@pytest.fixture(scope="module")
def tekken(tmp_path_factory):
    from nemotron.data import tokenizer as tk

    cache = tmp_path_factory.mktemp("tok")
    return tk.resolve(tekken_path(), cache_dir=cache), cache


# ---------------------------------------------------------------------------------------------- tokenizer


def test_tekken_conversion_matches_mistral_common(tekken):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    from nemotron.data import tokenizer as tk

    info, _cache = tekken
    assert info.vocab_size == 131_072 and info.kind == "converted:tekken"
    assert (info.bos_token, info.bos_id, info.eos_token, info.eos_id) == ("<s>", 1, "</s>", 2)
    ref = Tekkenizer.from_file(tekken_path())
    texts = [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[:60]]
    texts += ["héllo wörld — naïve café 你好世界 🙂🚀 \x00\x01", "  leading\n\n\r\n\ttabs  trailing   ",
              "<s> </s> [INST] <SPECIAL_7> literal control-token strings", "a" * 5000, "", " ", "1234567890" * 7]
    wiki = SHARED_DATA / "pretrain" / "wikitext2-valid.jsonl"
    if wiki.is_file():
        texts += [json.loads(line)["text"] for line in wiki.read_text().splitlines()[:20]]
    ours = tk.encode_documents(tk.load(info), texts, None, None)
    for text, got in zip(texts, ours, strict=True):
        assert got == ref.encode(text, bos=False, eos=False), text[:80]
    with_specials = tk.encode_documents(tk.load(info), ["x"], info.bos_id, info.eos_id)[0]
    assert with_specials[0] == 1 and with_specials[-1] == 2


def test_tokenizer_folder_loads_in_transformers_to_our_ids(tekken, tmp_path):
    """The folder an output carries (tokenizer.json + tokenizer_config.json) is what AutoTokenizer -- and so
    Megatron's HuggingFaceTokenizer -- loads: same ids (control-token strings in text stay text, as data prep
    tokenized them), BOS/EOS named, no BOS/EOS added. The pinned Megatron-Bridge's own loading of it is
    tests/contract/test_megatron_data.py."""
    from transformers import AutoTokenizer

    from nemotron.data import tokenizer as tk

    info, _cache = tekken
    record = tk.write_folder(tmp_path / "tokenizer", info)
    assert record == {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": str(tmp_path / "tokenizer")}
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "tokenizer"))
    assert (hf.bos_token_id, hf.eos_token_id, len(hf)) == (info.bos_id, info.eos_id, info.vocab_size)
    texts = [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[:20]]
    texts += ["<s> </s> [INST] literal control-token strings", "héllo 你好 🙂", "  a\n\r\n\tb  "]
    for text, ours in zip(texts, tk.encode_documents(tk.load(info), texts, None, None), strict=True):
        assert hf(text).input_ids == ours, text[:60]


def test_megatron_tokenizer_is_the_manifest_record_and_old_manifests_are_refused(tmp_path):
    from nemotron.data.outputs import megatron_tokenizer
    from nemotron.errors import ConfigError

    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    record = {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": str(folder)}
    assert megatron_tokenizer({"tokenizer": {"name": "x", "megatron": record}}, "m.json") == record
    assert megatron_tokenizer(None) is None
    with pytest.raises(ConfigError, match=r"m.json: tokenizer.megatron is missing .*tokenizer.name='/x/tekken.json'"):
        megatron_tokenizer({"tokenizer": {"name": "/x/tekken.json"}}, "m.json")
    gone = dict(record, tokenizer_model=str(tmp_path / "gone"))
    with pytest.raises(ConfigError, match=r"tokenizer.megatron.tokenizer_model=.*gone' holds no tokenizer.json"):
        megatron_tokenizer({"tokenizer": {"megatron": gone}}, "m.json")


def test_data_manifest_is_found_from_what_a_training_stage_is_given(tmp_path):
    """blend.json sits beside the manifest, the SFT packed Parquet one level below it (data/)."""
    from nemotron.data.outputs import data_manifest

    (tmp_path / "data").mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps({"stage": "data-prep-sft"}))
    for f in ("blend.json", "data/training_4096.idx.parquet"):
        (tmp_path / f).write_text("x")
        assert data_manifest(str(tmp_path / f)) == ({"stage": "data-prep-sft"}, str(tmp_path / "manifest.json"))
    assert data_manifest(str(tmp_path)) == ({"stage": "data-prep-sft"}, str(tmp_path / "manifest.json"))
    assert data_manifest(str(tmp_path / "absent.json")) == (None, "")
    assert data_manifest("${art:sft-data,train_path}") == (None, "")


def test_dry_run_refuses_an_old_data_manifest_as_the_run_does(tmp_path):
    """Parity: the Megatron-Bridge run (megatron_bridge.main) refuses data whose manifest names no Megatron tokenizer
    when tokenizer.tokenizer_model is null; validation (the dry-run) applies the same check; a record passes."""
    from config_support import compile_stage
    from nemotron.config import catalogue
    from nemotron.config.registry import get_stage
    from nemotron.validation.checks import data_tokenizer_rules

    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "tokenizer.json").write_text("{}")
    (tmp_path / "blend.json").write_text(json.dumps({"train": [1.0, str(tmp_path / "x")]}))
    tok = {"name": "/x/tekken_240911.json", "vocab_size": 131072, "vocab_sha256": "a" * 64}
    (tmp_path / "manifest.json").write_text(json.dumps({"tokenizer": tok}))
    cfg = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(tmp_path / "blend.json"))
    assert cfg["tokenizer"]["tokenizer_model"] is None and cfg["backend"] == "megatron-bridge"
    model = catalogue.get("ultra4layer")
    problems = data_tokenizer_rules(get_stage("pretrain"), cfg, model)
    assert [p.key for p in problems] == ["tokenizer.tokenizer_model"]
    assert "tokenizer.megatron is missing" in problems[0].message and problems[0].rule == "data-tokenizer"
    tok["megatron"] = {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": str(tmp_path / "tokenizer")}
    (tmp_path / "manifest.json").write_text(json.dumps({"tokenizer": tok}))
    assert data_tokenizer_rules(get_stage("pretrain"), cfg, model) == []


def test_tekken_conversion_is_cached_by_source_hash(tekken):
    from nemotron.data import tokenizer as tk

    info, cache = tekken
    stamp = os.stat(info.json_path).st_mtime_ns
    again = tk.resolve(tekken_path(), cache_dir=cache)
    assert again.json_path == info.json_path and os.stat(info.json_path).st_mtime_ns == stamp
    assert again.vocab_sha256 == info.vocab_sha256 and len(info.vocab_sha256) == 64
    assert Path(info.json_path).parent.name.startswith("tekken-")


def test_tokenizer_source_errors(tmp_path):
    from nemotron.data import tokenizer as tk
    from nemotron.errors import ConfigError

    with pytest.raises(ConfigError, match="no such file or folder"):
        tk.resolve(str(tmp_path / "missing.json"), cache_dir=tmp_path)
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}')
    with pytest.raises(ConfigError, match=r"not a tokenizer\.json nor a Tekken"):
        tk.resolve(str(junk), cache_dir=tmp_path)


def test_tokenizer_from_folder_and_bos_override(tekken, tmp_path):
    from nemotron.data import tokenizer as tk
    from nemotron.errors import ConfigError

    info, _ = tekken
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(Path(info.json_path).read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    got = tk.resolve(str(folder), cache_dir=tmp_path)
    assert (got.kind, got.bos_id, got.eos_id, got.vocab_sha256) == ("folder", 1, 2, info.vocab_sha256)
    assert tk.resolve(str(folder), cache_dir=tmp_path, eos_token="[INST]").eos_id == 3
    with pytest.raises(ConfigError, match="not in the vocabulary"):
        tk.resolve(str(folder), cache_dir=tmp_path, eos_token="<|nope|>")


# ---------------------------------------------------------------------------------------------- indexed


def test_dtype_follows_megatron_core():
    from megatron.core.datasets.indexed_dataset import DType

    from nemotron.data.indexed import choose_dtype
    from nemotron.errors import ConfigError

    for vocab in (50_257, 65_499, 65_500, 65_536, 131_072):
        assert choose_dtype(vocab) == DType.optimal_dtype(vocab).__name__
    assert choose_dtype(50_257, "int32") == "int32"
    assert choose_dtype(65_536, "uint16") == "uint16"  # ids 0 ... 65,535: the largest uint16
    for vocab in (65_537, 131_072):
        with pytest.raises(ConfigError, match="uint16"):
            choose_dtype(vocab, "uint16")
    with pytest.raises(ConfigError, match="valid: auto, uint16, int32"):
        choose_dtype(10, "int8")


@pytest.mark.parametrize("dtype,code", [("uint16", 8), ("int32", 4)])
def test_indexed_writer_is_read_by_megatron(tmp_path, dtype, code):
    import numpy as np

    from nemotron.data.indexed import IndexedWriter, read_index

    docs = [[1, 2, 3], [65_000], list(range(100, 1100)), [7, 7]]
    if dtype == "int32":
        docs.append([131_071, 0, 99_999])
    w = IndexedWriter(tmp_path / "shard", dtype)
    w.add(docs[:2])
    w.add_flat(np.array([t for d in docs[2:] for t in d]), np.array([len(d) for d in docs[2:]]))
    w.finish()
    raw = (tmp_path / "shard.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00" and raw[9:17] == (1).to_bytes(8, "little") and raw[17] == code
    assert megatron_documents([str(tmp_path / "shard")]) == docs
    idx = read_index(tmp_path / "shard")
    assert idx["dtype"] == dtype and list(idx["lengths"]) == [len(d) for d in docs]
    assert w.tokens == sum(map(len, docs)) and len(w.sha256) == 64


def test_indexed_writer_abort_and_range_check(tmp_path):
    from nemotron.data.indexed import IndexedWriter

    w = IndexedWriter(tmp_path / "x", "uint16")
    with pytest.raises(ValueError, match="out of range"):
        w.add([[70_000]])
    w.abort()
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- blends


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("weight", ["0", "-1.5", '"abc"', "NaN", "true"])
def test_bad_weight_names_file_line_and_policy(tmp_path, weight):
    from nemotron.data.blend import load_blend
    from nemotron.errors import ConfigError

    blend = write(tmp_path / "b.json", '{\n  "datasets": [\n    {"name": "ok", "path": "a", "weight": 1},\n'
                  f'    {{"name": "bad", "path": "b",\n     "weight": {weight}}}\n  ]\n}}\n')
    with pytest.raises(ConfigError, match=r"b\.json:4: datasets\[1\] \(bad\): weight=.* (not|must be)"):
        load_blend(blend)
    b = load_blend(blend, bad_weight="skip")
    assert [d.name for d in b.datasets] == ["ok"] and "b.json:4" in b.dropped[0][1]


def test_blend_keys_and_placeholders(tmp_path):
    from nemotron.data.blend import load_blend
    from nemotron.errors import ConfigError

    typo = write(tmp_path / "t.json", '{"datasets": [{"name": "x", "path": "a", "weigth": 1}]}')
    with pytest.raises(ConfigError, match="unknown key 'weigth'; did you mean 'weight'"):
        load_blend(typo)
    ph = write(tmp_path / "p.json", '{"datasets": [{"name": "x", "path": "{root}/a/{sub}", "weight": 1}]}')
    assert load_blend(ph, path_vars={"root": "/r", "sub": "s"}).datasets[0].path == "/r/a/s"
    with pytest.raises(ConfigError, match=r"placeholder \{sub\} is not in path_vars"):
        load_blend(ph, path_vars={"root": "/r"})
    dup = write(tmp_path / "d.json", '{"datasets": [{"name": "x", "path": "a", "weight": 1}, '
                '{"name": "x", "path": "b", "weight": 1}]}')
    with pytest.raises(ConfigError, match="duplicate dataset name"):
        load_blend(dup)
    broken = write(tmp_path / "j.json", '{"datasets": [\n  {"name": "x",}\n]}')
    with pytest.raises(ConfigError, match=r"j\.json:2:\d+: invalid JSON"):
        load_blend(broken)


@pytest.mark.parametrize("name", ["tiny", "default", "phase1", "phase2"])
def test_shipped_configs_and_blends_load(name):
    from nemotron.data.blend import load_blend
    from nemotron.data.pretrain import Settings

    cfg = load_config(name, path_vars={"stdlib": str(STDLIB), "shared_data": str(SHARED_DATA)}
                      if name == "tiny" else {})
    s = Settings.from_config(cfg)
    b = load_blend(s.blend_path, path_vars=s.path_vars)
    if name == "tiny":
        assert s.tokenizer_name.endswith("tekken_240911.json") and Path(s.tokenizer_name).is_file()
        return
    assert s.tokenizer_name == "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"
    total = sum(d.weight for d in b.datasets) + sum(m["weight"] for m in b.missing)
    assert total == pytest.approx(99.9, abs=0.05)  # Figure 4's shares, as printed, add to 99.9%
    assert all(d.path.startswith("hf://") and d.subset for d in b.datasets)
    assert {m["category"] for m in b.missing} == {"code", "nemotron-cc-code", "academic", "crawl++"}


def test_settings_reject_unknown_and_mistyped_keys():
    from nemotron.data.pretrain import Settings
    from nemotron.errors import ConfigError

    base = load_config("tiny", path_vars={})
    with pytest.raises(ConfigError, match="unknown key 'max_doc_token'; did you mean 'max_doc_tokens'"):
        Settings.from_config({**base, "max_doc_token": 5})
    with pytest.raises(ConfigError, match=r"split.valid_docs=0 must be at least 1"):
        Settings.from_config({**base, "split": {"valid_docs": 0, "test_docs": 1}})
    with pytest.raises(ConfigError, match=r"add_eos='yes' must be true or false"):
        Settings.from_config({**base, "add_eos": "yes"})
    with pytest.raises(ConfigError, match=r"on_bad.too_long='drop' is not allowed; valid: truncate, skip, fail"):
        Settings.from_config({**base, "on_bad": {**base["on_bad"], "too_long": "drop"}})
    with pytest.raises(ConfigError, match=r"^on_bad.empty_document is missing"):  # a partial section: keys never set
        Settings.from_config({**base, "on_bad": {"too_long": "truncate"}})


# ---------------------------------------------------------------------------------------------- sources


def test_readers_report_problems_with_lines(tmp_path):
    from nemotron.data.sources import Piece, iter_records

    jl = tmp_path / "a.jsonl"
    jl.write_bytes(b'{"text": "one"}\n\n{"text": "two"}\n{"x": 1}\n\xff\xfe\n{bad json\n[1, 2]\n{"text": "last"}')
    got = [(pos, text, reason) for pos, text, reason, _ in iter_records(Piece(str(jl), "jsonl"), "text")]
    assert got == [(1, "one", None), (3, "two", None), (4, None, "missing_field"), (5, None, "invalid_utf8"),
                   (6, None, "malformed_json"), (7, None, "not_object"), (8, "last", None)]

    gz = tmp_path / "a.jsonl.gz"
    with gzip.open(gz, "wb") as fh:
        fh.write(b'{"t": {"body": "nested"}}\n{"t": 3}\n')
    assert [(p, t, r) for p, t, r, _ in iter_records(Piece(str(gz), "jsonl.gz"), "t.body")] == [
        (1, "nested", None), (2, None, "missing_field")]

    arr = tmp_path / "a.json"
    arr.write_text('[\n  {"text": "a"},\n  {"text": "b"},\n  {"text": oops}\n]')
    assert [(p, t, r) for p, t, r, _ in iter_records(Piece(str(arr), "json"), "text")] == [
        (2, "a", None), (3, "b", None), (4, None, "malformed_json")]

    txt = tmp_path / "latin1.py"
    txt.write_bytes(b"# line one\n# line two\nname = 'caf\xe9'\n")
    assert [(p, r) for p, _t, r, _ in iter_records(Piece(str(txt), "text"), "text")] == [(3, "invalid_utf8")]


def test_parquet_reader_and_missing_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nemotron.data.sources import check_parquet_field, iter_records, split_file
    from nemotron.errors import ConfigError

    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"content": [f"row {i}" if i != 5 else None for i in range(100)]}), path,
                   row_group_size=10)
    with pytest.raises(ConfigError, match="no column 'text' \\(columns: content\\)"):
        check_parquet_field(str(path), "text")
    pieces = split_file(str(path), "parquet", target_bytes=200, text_field="content")
    assert len(pieces) > 1 and pieces[0].start == 0 and pieces[-1].stop is None
    assert all(a.stop == b.start for a, b in itertools.pairwise(pieces))
    rows = [r for p in pieces for r in iter_records(p, "content")]
    assert [r[0] for r in rows] == list(range(100)) and rows[5][2] == "missing_field"


def test_whole_records_keep_the_text_readers_boundaries(tmp_path):
    """nemotron.data.records (chat and RL data) reads a piece's records where iter_records does, whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nemotron.data.records import iter_objects
    from nemotron.data.sources import Piece, iter_records, split_file

    jl = tmp_path / "a.jsonl"
    jl.write_bytes(b'{"text": "one"}\n\n[1]\n\xff\n{bad\n{"text": "two"}')
    assert [(p, k, o, r) for p, k, o, r, _ in iter_objects(Piece(str(jl), "jsonl"))] == [
        (1, 1, {"text": "one"}, None), (3, 3, None, "not_an_object"), (4, 4, None, "invalid_utf8"),
        (5, 5, None, "malformed_json"), (6, 6, {"text": "two"}, None)]
    gz = tmp_path / "a.jsonl.gz"
    with gzip.open(gz, "wb") as fh:
        fh.write(b'{"n": 0}\n\n{"n": 1}\n{"n": 2}\n')
    assert [(p, k, o) for p, k, o, _r, _ in iter_objects(Piece(str(gz), "jsonl.gz", 1, 2))] == [(3, 3, {"n": 1})]
    arr = tmp_path / "a.json"
    arr.write_text('[\n  {"n": 0},\n  7,\n  {"n": 2} {"n": 3}\n]')
    assert [(p, k, o, r) for p, k, o, r, _ in iter_objects(Piece(str(arr), "json", 1))] == [
        (3, 1, None, "not_an_object"), (4, 2, {"n": 2}, None), (4, 3, None, "malformed_json")]
    assert [p for p, *_ in iter_records(Piece(str(arr), "json", 1), "n")] == [3, 4, 4]
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(25)]}), path, row_group_size=4)
    pieces = split_file(str(path), "parquet", target_bytes=30, text_field="text")
    assert len(pieces) > 1
    whole = [(p, o["text"]) for piece in pieces for p, _k, o, _r, _d in iter_objects(piece)]
    assert whole == [(p, t) for piece in pieces for p, t, _r, _d in iter_records(piece, "text")]
    assert [p for p, _t in whole] == list(range(25))


def test_jsonl_split_covers_the_file_exactly(tmp_path):
    from nemotron.data.sources import Piece, iter_records, split_file

    path = tmp_path / "big.jsonl"
    lines = [json.dumps({"text": f"document {i} " + "x" * (i % 37)}) for i in range(2000)]
    path.write_text("\n".join(lines[:1000]) + "\n\n\n" + "\n".join(lines[1000:]) + "\n")
    pieces = split_file(str(path), "jsonl", target_bytes=3000)
    assert len(pieces) > 10
    assert pieces[0].start == 0 and all(a.stop == b.start for a, b in itertools.pairwise(pieces))
    got = [(pos, text) for p in pieces for pos, text, _r, _d in iter_records(p, "text")]
    whole = [(pos, text) for pos, text, _r, _d in iter_records(Piece(str(path), "jsonl"), "text")]
    assert got == whole and len(got) == 2000 and got[-1][0] == 2002


def test_expand_globs_folders_and_excludes(tmp_path):
    from nemotron.data.sources import expand

    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/a.jsonl", "d/sub/b.jsonl", "d/sub/c.parquet", "d/notes.txt", "d/skip.jsonl"):
        (tmp_path / name).write_text("")
    assert [Path(p).name for p in expand(str(tmp_path / "d"), exclude=["skip*"])] == ["a.jsonl", "b.jsonl",
                                                                                      "c.parquet"]
    assert [Path(p).name for p in expand(str(tmp_path / "d" / "**" / "*.jsonl"))] == ["a.jsonl", "skip.jsonl",
                                                                                       "b.jsonl"]
    assert expand(str(tmp_path / "nothing" / "*.jsonl")) == []


# ---------------------------------------------------------------------------------------------- outputs


def test_versions_and_consumers(tmp_path):
    from nemotron.data import outputs
    from nemotron.errors import ConfigError

    root = tmp_path / "out"
    assert outputs.select_version(root, force=True) == (1, root, "new")
    root.mkdir()
    (root / "plan.json").write_text("{}")
    assert outputs.select_version(root, force=False) == (1, root, "existing")
    assert outputs.select_version(root, force=True) == (1, root, "rebuild")
    outputs.record_consumer(root, stage="pretrain", run_id="run/1")
    n, folder, why = outputs.select_version(root, force=True)
    assert (n, folder) == (2, root / "v2") and "consumed by run/1" in why
    with pytest.raises(ConfigError, match="consumed"):
        outputs.clear_version(root)
    (root / "v2").mkdir()
    (root / "v2" / "plan.json").write_text("{}")
    (root / "v2" / "keep-me.txt").write_text("user file")
    assert outputs.select_version(root, force=False)[:2] == (2, root / "v2")
    outputs.clear_version(root / "v2")
    assert [p.name for p in (root / "v2").iterdir()] == ["keep-me.txt"]
