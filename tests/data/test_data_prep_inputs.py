"""Data prep never damages its inputs, and every unreadable input is one line.

Real files on disk, the stages' real configs (compiled as the CLI does), real Ray where a stage runs:
inputs that a run would overwrite are refused at --dry-run and at run time; corrupt Parquet, gzip and
unreadable paths give ``<file>: cannot read (...)``; folders where a file is expected name their key;
a UTF-8 byte order mark never costs a record; an older version that matches the plan is reused.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nemotron.data import driver, outputs, pretrain, rl, sft
from nemotron.data.records import iter_objects
from nemotron.data.sources import Piece, file_size_estimate, iter_records, scan_rows
from nemotron.errors import ConfigError, RuntimeFailure
from data_prep_sft_support import compile_stage

pytestmark = pytest.mark.timeout(300)
BOM = b"\xef\xbb\xbf"
STAGES = {"data-prep-pretrain": pretrain, "data-prep-sft": sft, "data-prep-rl": rl}


def gsm8k_rows(n: int, start: int = 0) -> list[dict]:
    return [{"question": f"What is {i} + {i}?", "answer": f"{i} and {i} make {2 * i}.\n#### {2 * i}"}
            for i in range(start, start + n)]


def write_blend(path: Path, datasets: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"datasets": datasets}))
    return path


def settings(stage: str, **overrides):
    return STAGES[stage].Settings.from_config(compile_stage(stage, "tiny", **overrides))


def dry_run(home: Path, stage: str, *args: str) -> tuple[int, str]:
    """`nemotron ultra3 data prep <stage> -c tiny --dry-run ARGS` in a fresh process: (exit code, its output)."""
    kind = stage.removeprefix("data-prep-")
    r = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", kind, "-c", "tiny",
                        "--dry-run", *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NEMOTRON_HOME": str(home)})
    return r.returncode, r.stdout + r.stderr


def run_py(stage: str, cfg: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """The stage's run.py on a compiled config, as a job runs it."""
    path = tmp_path / f"{stage}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    folder = {"data-prep-pretrain": "data_prep_pretrain", "data-prep-sft": "data_prep_sft", "data-prep-rl": "data_prep_rl"}
    run = Path(__file__).resolve().parents[2] / "stages" / "ultra3" / folder[stage] / "run.py"
    return subprocess.run([sys.executable, str(run), "--config", str(path)], capture_output=True, text=True, timeout=240)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# --------------------------------------------------------------------------------------------------
# 1. an input the run would write, replace or delete is refused


def test_written_path_names_every_path_a_stage_writes(tmp_path):
    out = tmp_path / "out"
    for rel, what in [(".nemotron-writer.lock", ".nemotron-writer.lock"), ("blend.json", "blend.json"),
                      ("manifest.json", "manifest.json"), ("plan.json", "plan.json"),
                      ("data/wiki/train_00000.bin", "data/"), ("tokenizer/tokenizer.json", "tokenizer/"),
                      ("v2", "v2/"), ("v2/blend.json", "v2/blend.json"), ("v7/data", "v7/data")]:
        assert outputs.written_path(out / rel, out) == what, rel
    for rel in ("a.jsonl", "raw/blend.json", "v1/blend.json", "v7/notes.txt", "consumed_by/run.json", "train.jsonl"):
        assert outputs.written_path(out / rel, out) is None, rel
    assert outputs.written_path(out / "train.jsonl", out, rl.Settings.OUTPUT_NAMES) == "train.jsonl"
    assert outputs.written_path(out / "v3" / "validation.jsonl", out, rl.Settings.OUTPUT_NAMES) == "v3/validation.jsonl"
    assert outputs.written_path(tmp_path / "elsewhere.json", out) is None
    (tmp_path / "link").symlink_to(out)  # a link into the output folder is the output folder
    assert outputs.written_path(tmp_path / "link" / "plan.json", out) == "plan.json"


def test_inputs_inside_the_outputs_are_refused_by_every_stage(tmp_path):
    out = tmp_path / "w2"
    out.mkdir()
    data = out / "problems.jsonl"  # an input file next to the outputs: allowed
    data.write_text("".join(json.dumps(r) + "\n" for r in gsm8k_rows(20)))
    blend = write_blend(out / "blend.json", [{"name": "a", "path": str(data), "weight": 1}])
    for stage in STAGES:
        s = settings(stage, blend_path=str(blend), output_dir=str(out))
        problems = driver.check_inputs(s, driver.stage_blend(s))
        assert [p.message for p in problems] == [
            f"blend_path={blend}: the run writes blend.json in output_dir={out}, which would overwrite or delete this input"]
        s = settings(stage, blend_path=str(blend), output_dir=str(tmp_path / "elsewhere"))
        assert driver.check_inputs(s, driver.stage_blend(s)) == []

    # RL writes train.jsonl and validation.jsonl into the version folder; a dataset file there is refused
    train = out / "v2" / "train.jsonl"
    train.parent.mkdir()
    train.write_text(data.read_text())
    blend2 = write_blend(tmp_path / "b" / "blend.json", [{"name": "a", "path": str(train), "weight": 1}])
    s = settings("data-prep-rl", blend_path=str(blend2), output_dir=str(out))
    (msg,) = [p.message for p in driver.check_inputs(s, driver.stage_blend(s))]
    assert msg == (f"{blend2}:1: datasets (a): input {train}: the run writes v2/train.jsonl in output_dir={out}, "
                   "which would overwrite or delete this input")
    # a dataset folder that holds the output folder: the outputs would become inputs on the next run
    blend3 = write_blend(tmp_path / "c" / "blend.json", [{"name": "a", "path": str(tmp_path), "weight": 1}])
    s = settings("data-prep-rl", blend_path=str(blend3), output_dir=str(out))
    (msg,) = [p.message for p in driver.check_inputs(s, driver.stage_blend(s))]
    assert f"path {str(tmp_path)!r} is a folder holding output_dir={out}" in msg
    # the tokenizer and the chat template are inputs too
    tok = out / "tokenizer" / "tokenizer.json"
    tok.parent.mkdir()
    tok.write_text("{}")
    s = settings("data-prep-sft", blend_path=str(blend2), output_dir=str(out), tokenizer__name=str(tok),
                 chat__template=str(tok))
    assert [p.message.split(":")[0] for p in driver.check_inputs(s, driver.stage_blend(s))] == [
        f"tokenizer.name={tok}", f"chat.template={tok}"]  # v2/train.jsonl is RL's output, not SFT's


def test_the_run_and_the_dry_run_refuse_and_leave_the_input_alone(tmp_path):
    out = tmp_path / "w2"
    out.mkdir()
    data = out / "problems.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in gsm8k_rows(20)))
    blend = write_blend(out / "blend.json", [{"name": "a", "path": str(data), "weight": 1}])
    before = blend.read_bytes()
    code, err = dry_run(tmp_path / "home", "data-prep-pretrain", f"blend_path={blend}", f"output_dir={out}")
    assert code == 2 and f"blend_path={blend}: the run writes blend.json in output_dir={out}" in err, err
    r = run_py("data-prep-rl", compile_stage("data-prep-rl", "tiny", blend_path=str(blend), output_dir=str(out)), tmp_path)
    assert r.returncode == 2 and error_lines(r.stderr) == [
        f"error: blend_path={blend}: the run writes blend.json in output_dir={out}, which would overwrite or delete "
        "this input"], r.stderr
    assert blend.read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["blend.json", "problems.jsonl"]  # not even the lock file


# --------------------------------------------------------------------------------------------------
# 2. unreadable inputs: one line, in the driver and in the Ray workers


@pytest.fixture
def broken(tmp_path) -> dict[str, Path]:
    """Real broken files: a Parquet cut to 2000 bytes, one with a corrupt data page (its footer intact),
    a gzip with corrupt deflate data, a one-byte gzip, a folder named like a data file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = gsm8k_rows(400)
    good = tmp_path / "good.parquet"
    pq.write_table(pa.Table.from_pylist([{**r, "text": r["question"] * 20} for r in rows]), good, compression="zstd")
    raw = good.read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(raw[:2000])
    page = tmp_path / "page.parquet"  # the pages scrambled, the footer (the last 1200 bytes) intact
    page.write_bytes(raw[:4] + bytes(b ^ 0x5A for b in raw[4:-1200]) + raw[-1200:])
    gz = gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())
    bad_gz = tmp_path / "corrupt.jsonl.gz"
    bad_gz.write_bytes(gz[:30] + bytes(300) + gz[330:])
    short_gz = tmp_path / "short.jsonl.gz"
    short_gz.write_bytes(b"\x1f")
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    return {"cut": cut, "page": page, "gz": bad_gz, "short": short_gz, "folder": folder}


def test_readers_turn_every_read_error_into_one_line(broken):
    cases = [(broken["cut"], "parquet", "ArrowInvalid: Parquet magic bytes not found in footer"),
             (broken["page"], "parquet", "OSError: Couldn't deserialize thrift"), (broken["gz"], "jsonl.gz", "zlib.error: Error -3"),
             (broken["short"], "jsonl.gz", "BadGzipFile"), (broken["folder"], "jsonl", "IsADirectoryError"),
             (broken["folder"], "json", "IsADirectoryError"), (broken["folder"], "text", "IsADirectoryError")]
    for path, fmt, detail in cases:
        readers = [lambda p=path, f=fmt: list(iter_records(Piece(str(p), f), "text"))]
        if fmt != "text":
            readers.append(lambda p=path, f=fmt: list(iter_objects(Piece(str(p), f))))
        for read in readers:
            with pytest.raises(RuntimeFailure) as info:
                read()
            assert info.value.message.startswith(f"{path}: cannot read ({detail}"), info.value.message
            assert "\n" not in info.value.message
    assert file_size_estimate(str(broken["short"]), "jsonl.gz") == 1  # planning leaves the report to the reader


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_truncated_parquet_input_is_one_line_in_every_stage(stage, ray_instance, tok_cache, broken, tmp_path):
    blend = write_blend(tmp_path / "blend.json", [{"name": "p", "path": str(broken["cut"]), "weight": 1}])
    extra = {"tokenizer__cache_dir": tok_cache} if stage != "data-prep-rl" else {}
    s = settings(stage, blend_path=str(blend), output_dir=str(tmp_path / "out"), **extra)
    with pytest.raises(RuntimeFailure) as info:
        STAGES[stage].prepare(s, quiet=True)
    assert info.value.message == (f"{broken['cut']}: cannot read (ArrowInvalid: Parquet magic bytes not found in "
                                  "footer. Either the file is corrupted or this is not a parquet file.)")
    assert info.value.hint and "path and format" in info.value.hint, info.value.hint  # `why` shows it as the fix


def test_a_corrupt_page_read_in_a_ray_worker_is_one_line(ray_instance, broken, tmp_path):
    # the footer is intact, so planning passes; the worker meets the corrupt page
    blend = write_blend(tmp_path / "blend.json", [{"name": "p", "path": str(broken["page"]), "weight": 1}])
    s = settings("data-prep-rl", blend_path=str(blend), output_dir=str(tmp_path / "out"))
    with pytest.raises(RuntimeFailure, match=rf"^{broken['page']}: cannot read \(") as info:
        rl.prepare(s, quiet=True)
    assert "\n" not in info.value.message


# --------------------------------------------------------------------------------------------------
# 3. a folder where a file is expected names its key, exit 2, at --dry-run too


def test_folders_where_files_are_expected(tmp_path):
    folder = tmp_path / "w"
    folder.mkdir()
    for stage in STAGES:
        with pytest.raises(ConfigError, match=rf"^blend_path={folder}: is a folder, not a blend file$"):
            settings(stage, blend_path=str(folder), output_dir=str(tmp_path / "out"))
    code, err = dry_run(tmp_path / "home", "data-prep-pretrain", f"blend_path={folder}")
    assert code == 2 and f"blend_path={folder}: is a folder, not a blend file" in err, err

    # a tokenizer folder without a tokenizer file: refused by the dry-run and by the run, in one line
    code, err = dry_run(tmp_path / "home", "data-prep-pretrain", f"tokenizer.name={folder}")
    assert code == 2 and f"tokenizer.name={folder}: the folder holds no tokenizer file" in err, err
    from nemotron.data import tokenizer as tk

    with pytest.raises(ConfigError, match=rf"^tokenizer.name={folder}: the folder holds no tokenizer file") as info:
        tk.resolve(str(folder), cache_dir=tmp_path / "cache")
    assert "\n" not in info.value.message
    (folder / "vocab.json").write_text("{}")  # something transformers might convert: its own error, one line
    with pytest.raises(ConfigError, match=rf"^tokenizer.name={folder}: not a tokenizer folder") as info:
        tk.resolve(str(folder), cache_dir=tmp_path / "cache")
    assert "\n" not in info.value.message


def test_a_dataset_folder_without_files_and_odd_entries(ray_instance, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")  # a broken link is no input file
    (data / "sub.jsonl").mkdir()
    blend = write_blend(tmp_path / "b" / "blend.json", [{"name": "a", "path": str(data), "weight": 1}])
    s = settings("data-prep-rl", blend_path=str(blend), output_dir=str(tmp_path / "out"))
    with pytest.raises(ConfigError, match=rf"datasets \(a\): path {str(data)!r} matches no file"):
        rl.prepare(s, quiet=True)


# --------------------------------------------------------------------------------------------------
# 4. a UTF-8 byte order mark costs no record, in every text format


def test_byte_order_mark_in_every_text_format(tmp_path):
    rows = [{"text": "first", "n": 1}, {"text": "second", "n": 2}]
    lines = "".join(json.dumps(r) + "\n" for r in rows).encode()
    files = {"jsonl": tmp_path / "a.jsonl", "jsonl.gz": tmp_path / "a.jsonl.gz", "json": tmp_path / "a.json"}
    files["jsonl"].write_bytes(BOM + lines)
    files["jsonl.gz"].write_bytes(gzip.compress(BOM + lines))
    files["json"].write_bytes(BOM + json.dumps(rows, indent=1).encode())
    for fmt, path in files.items():
        assert [t for _p, t, _r, _d in iter_records(Piece(str(path), fmt), "text")] == ["first", "second"], fmt
        assert [o for _p, _k, o, _r, _d in iter_objects(Piece(str(path), fmt))] == rows, fmt
    text = tmp_path / "a.txt"
    text.write_bytes(BOM + b"hello\n")
    assert list(iter_records(Piece(str(text), "text"), "text")) == [(1, "hello\n", None, None)]
    blank = tmp_path / "blank.jsonl"  # a BOM alone on the first line is a blank line, in the scan and the read
    blank.write_bytes(BOM + b"\n" + lines)
    assert scan_rows(str(blank), "jsonl", 10).lines == [2, 3]
    assert [p for p, _t, _r, _d in iter_records(Piece(str(blank), "jsonl"), "text")] == [2, 3]
    blend = tmp_path / "blend.json"
    blend.write_bytes(BOM + json.dumps({"datasets": [{"name": "a", "path": str(files["jsonl"]), "weight": 1}]}).encode())
    s = settings("data-prep-rl", blend_path=str(blend), output_dir=str(tmp_path / "out"))
    assert [d.name for d in driver.stage_blend(s).datasets] == ["a"]


def test_byte_order_mark_keeps_the_first_record_in_a_run(ray_instance, tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_bytes(BOM + "".join(json.dumps(r) + "\n" for r in gsm8k_rows(12)).encode())
    blend = write_blend(tmp_path / "b" / "blend.json", [{"name": "a", "path": str(data), "weight": 1}])
    m = rl.prepare(settings("data-prep-rl", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                            split__validation_rows=2), quiet=True)
    d = m["datasets"][0]
    assert d["records"] == 12 and d["skipped"] == {} and d["train_rows"] + d["validation_rows"] == 12


# --------------------------------------------------------------------------------------------------
# 5. an older version that matches the plan is reused; consumed versions stay as they are


def test_an_older_matching_version_is_up_to_date(ray_instance, tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in gsm8k_rows(30)))
    blend = write_blend(tmp_path / "b" / "blend.json", [{"name": "a", "path": str(data), "weight": 1}])
    out = tmp_path / "out"

    def run(**overrides):
        return rl.prepare(settings("data-prep-rl", blend_path=str(blend), output_dir=str(out), **overrides), quiet=True)

    m1 = run()
    outputs.record_consumer(out, stage="rlvr", run_id="rlvr/1")
    v1_files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    m2 = run(force=True, split__validation_rows=4)
    assert (m1["version"], m2["version"]) == (1, 2) and Path(m2["path"]) == out / "v2"
    again = run()  # the plain run: v1 holds exactly this data
    assert again == m1
    assert run(split__validation_rows=4) == m2
    assert {p: p.read_bytes() for p in v1_files} == v1_files
    with pytest.raises(driver.PlanMismatch) as info:
        run(split__validation_rows=6)
    assert "no version matches this run (versions: v1 (consumed), v2)" in info.value.message
    assert "force=true" in info.value.hint
    assert not (out / "v3").exists()


@pytest.mark.parametrize("stage", ["data-prep-pretrain", "data-prep-sft", "data-prep-rl"])
def test_an_empty_input_file_is_refused_by_the_dry_run_as_by_the_run(tmp_path, stage):
    """A 0-byte input: the runs refuse it only after reading (pretrain: ``produced no training tokens``; SFT/RL:
    nothing produced), with exit 1. The dry-run said valid. Now both refuse it up front, exit 2, naming the blend
    line and the file; the run writes nothing."""
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    blend = write_blend(tmp_path / "blend.json", [{"name": "nothing", "path": str(empty), "weight": 1}])
    code, err = dry_run(tmp_path / "home", stage, f"blend_path={blend}", f"output_dir={tmp_path / 'out'}")
    assert code == 2, err
    assert f"{blend}:" in err and "datasets (nothing)" in err and f"'{empty}' is empty (0 bytes)" in err, err
    kind = stage.removeprefix("data-prep-")
    run = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", kind, "-c", "tiny",
                          f"blend_path={blend}", f"output_dir={tmp_path / 'out'}"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "NEMOTRON_HOME": str(tmp_path / "home")})
    assert run.returncode == 2 and "is empty (0 bytes)" in run.stdout + run.stderr, run.stdout + run.stderr
    assert not (tmp_path / "out").exists()


def test_a_refused_rerun_names_the_changed_key_or_input_and_the_interrupted_run(ray_instance, tmp_path):
    """A rerun into an output_dir that holds an interrupted run of other settings is refused (nothing reused), and
    the refusal names what differs (``split.validation_rows: 4 -> 6``, ``input p.jsonl changed``) and calls the
    unfinished run what it is (``an interrupted run (K of N shards)``), not just "v1" and two plan hashes."""
    data, other = tmp_path / "p.jsonl", tmp_path / "q.jsonl"
    for path in (data, other):
        path.write_text("".join(json.dumps(r) + "\n" for r in gsm8k_rows(40)))
    blend = write_blend(tmp_path / "b" / "blend.json", [{"name": "a", "path": str(data), "weight": 1},
                                                         {"name": "b", "path": str(other), "weight": 1}])
    out = tmp_path / "out"

    def run(**overrides):
        return rl.prepare(settings("data-prep-rl", blend_path=str(blend), output_dir=str(out), **overrides), quiet=True)

    run(split__validation_rows=4)
    # as a run stopped half way leaves it: no manifest, one shard's receipt gone
    (out / outputs.MANIFEST).unlink()
    receipts = sorted(out.rglob("*" + outputs.RECEIPT_SUFFIX))
    total = len(json.loads((out / outputs.PLAN).read_text())["shards"])
    assert total == len(receipts) > 1, receipts
    receipts[0].unlink()
    with pytest.raises(driver.PlanMismatch) as info:
        run(split__validation_rows=6)
    message = info.value.message
    assert f"holds an interrupted run ({total - 1} of {total} shards) prepared from other inputs or settings: " \
           "split.validation_rows: 4 -> 6" in message, message
    assert f"(versions: v1 (an interrupted run ({total - 1} of {total} shards)))" in message, message
    assert "plan " not in message, message  # the hashes only when nothing nameable differs
    with data.open("a") as f:
        f.write(json.dumps(gsm8k_rows(41)[-1]) + "\n")
    with pytest.raises(driver.PlanMismatch) as info:
        run(split__validation_rows=4)
    assert "input p.jsonl changed (size " in info.value.message and "validation_rows" not in info.value.message, \
        info.value.message
