"""``data inspect``: the flags of packed SFT, the RL answer check, and the errors for paths and options that do not
fit. (The real data prep outputs are inspected in tests/cli/test_json_schemas.py; the batch of a step against
Megatron-Core in tests/contract/test_megatron_batch.py.)"""

from __future__ import annotations

import json

import pytest

from nemotron.cli.main import main
from nemotron.data import inspect as di
from nemotron.errors import ConfigError, UsageError


def _packs(tmp_path, packs, pad_id=2):
    from local_runtime_support import write_packed_parquet

    (tmp_path / "manifest.json").write_text(json.dumps({"pad_id": pad_id, "pack_size": 12}))
    return write_packed_parquet(tmp_path / "data" / "training_12.idx.parquet", packs)


def test_sft_flags(tmp_path):
    """Documents end with token 9 (the file's usual end); pack 1 learns nothing; pack 2 ends a document in pads;
    pack 3's last document is cut inside its learned answer."""
    ok = {"input_ids": [5, 6, 7, 9, 5, 6, 7, 9], "loss_mask": [0, 1, 1, 0, 0, 1, 1, 0], "seq_start_id": [0, 4]}
    silent = {"input_ids": [5, 6, 7, 9], "loss_mask": [0, 0, 0, 0], "seq_start_id": [0]}
    padded = {"input_ids": [5, 6, 7, 9, 2, 2], "loss_mask": [0, 1, 1, 0, 0, 0], "seq_start_id": [0]}
    cut = {"input_ids": [5, 6, 7, 9, 5, 6, 7, 8], "loss_mask": [0, 1, 1, 0, 0, 1, 1, 1], "seq_start_id": [0, 4]}
    path = _packs(tmp_path, [ok, silent, padded, cut])
    doc = di.inspect_path(path, count=4)
    assert [p["flags"] for p in doc["shown"]] == [[], ["no_learned_token"], ["pad_run"], ["document_cut"]]
    assert doc["flags"] == {"no_learned_token": 1, "pad_run": 1, "document_cut": 1}
    assert doc["shown"][2]["pad_run"] == 2 and doc["learned_tokens"] == 4 + 0 + 2 + 5
    # the mask is label-aligned: loss_mask[t] = 1 learns token t + 1, shown in [[...]] (ids here: no tokenizer)
    assert doc["shown"][0]["documents"][0]["text"] == "5 6 [[7 9]]"


def test_rl_answer_check_fails_an_answer_it_cannot_reward(tmp_path):
    pytest.importorskip("math_verify", reason="math-verify is the inspect extra")
    f = tmp_path / "train.jsonl"
    lines = [{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
             {"messages": [{"role": "user", "content": "which one?"}, {"role": "assistant", "content": "the red one"}]}]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    doc = di.inspect_path(f, count=5)
    assert doc["checker"] == "math-verify" and doc["records"] == 2
    assert doc["shown"][0]["check"] == {"parsed": True, "numeric": True, "rewarded": True, "wrong_rejected": True}
    assert doc["shown"][1]["check"]["numeric"] is False  # math-verify reads it as a product of symbols
    assert doc["check"]["failed_lines"] == [2] and doc["check"]["failed"] == 1


def test_a_default_output_folder_not_made_yet_names_its_data_prep(tmp_path):
    with pytest.raises(ConfigError) as caught:
        di.kind_of(tmp_path / "output" / "ultra3" / "sft-data" / "tiny")
    assert caught.value.hint.startswith("make it first: nemotron ultra3 data prep sft -c tiny; or give a packed")
    with pytest.raises(ConfigError) as caught:
        di.kind_of(tmp_path / "elsewhere" / "tiny")
    assert caught.value.hint.startswith("give a packed .parquet")


def test_bad_inputs_are_one_line(tmp_path, capsys):
    with pytest.raises(ConfigError, match="does not exist"):
        di.kind_of(tmp_path / "missing.parquet")
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"prompt": 1}\n')
    with pytest.raises(ConfigError, match=r"x.jsonl:1: not an RL line"):
        di.inspect_path(bad)
    with pytest.raises(UsageError, match="--step is for a pretrain"):
        di.inspect_path(bad, step=3)
    assert main(["ultra3", "data", "inspect", str(tmp_path / "missing.idx")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_binary_and_empty_rl_files_are_one_line_exit_2(tmp_path, capsys):
    """Bytes that are not UTF-8 (a binary file named .jsonl) and an empty file: one line naming the file (and the
    line), exit 2; they were an internal error (UnicodeDecodeError, exit 1) and a 0-record report (exit 0)."""
    binary = tmp_path / "garbage.jsonl"
    binary.write_bytes(b'\xdd\xfe\x00\x81 not text\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert main(["ultra3", "data", "inspect", str(binary)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {binary}:1: not UTF-8 text") and "internal error" not in err, err
    assert main(["ultra3", "data", "inspect", str(empty)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {empty}: no RL lines"), err


def test_step_needs_the_run_length(tmp_path):
    from nemotron.data.indexed import IndexedWriter

    w = IndexedWriter(tmp_path / "d", "int32")
    w.add([[1, 2, 3, 4, 5] * 20])
    w.finish()
    with pytest.raises(UsageError, match="--train-iters"):
        di.inspect_path(tmp_path / "d.idx", step=1, gbs=2, seq=8)
    doc = di.inspect_path(tmp_path / "d.idx", step=2, gbs=2, seq=8, train_iters=3)
    assert [s["index"] for s in doc["batch"]["samples"]] == [2, 3]


@pytest.mark.parametrize("args", [("-n", "0"), ("-n", "-1"),
                                  ("--step", "1", "--global-batch-size", "0", "--seq-length", "8", "--train-iters", "2")])
def test_data_inspect_refuses_counts_below_one(tmp_path, args):
    """``-n 0`` showed the default 3, ``-n -1`` none (exit 0), ``--global-batch-size 0`` said it was missing:
    each is now a usage error naming the option (exit 2), before any file is read."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "inspect", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "is not in the range x>=1" in done.stderr, done.stderr


def _rl_lines(n, base):
    return "".join(json.dumps({"messages": [{"role": "user", "content": f"{base}+{i}?"},
                                            {"role": "assistant", "content": str(base + i)}]}) + "\n"
                   for i in range(n))


def test_split_picks_the_file_of_a_folder(tmp_path, capsys):
    """``--split validation`` was ignored: the training file was shown for ``validation`` and for ``bogus`` alike,
    and for a folder without a validation file. Now: the split's file; exit 2 for a name that is no split, for a
    split the folder lacks (naming the files it has) and for a single file."""
    ok = {"input_ids": [5, 6, 7, 9], "loss_mask": [0, 1, 1, 0], "seq_start_id": [0]}
    sft = tmp_path / "sft"
    sft.mkdir()
    _packs(sft, [ok] * 3)
    from local_runtime_support import write_packed_parquet

    write_packed_parquet(sft / "data" / "validation_12.idx.parquet", [ok])
    assert di.inspect_path(sft)["packs"] == 3
    assert di.inspect_path(sft, split="train")["path"].endswith("training_12.idx.parquet")
    doc = di.inspect_path(sft, split="validation")
    assert doc["path"].endswith("validation_12.idx.parquet") and doc["packs"] == 1
    rl = tmp_path / "rl"
    rl.mkdir()
    (rl / "train.jsonl").write_text(_rl_lines(3, 10))
    (rl / "validation.jsonl").write_text(_rl_lines(2, 50))
    assert di.inspect_path(rl, split="validation")["records"] == 2
    assert di.inspect_path(rl, split="training")["records"] == 3
    assert main(["ultra3", "data", "inspect", str(rl), "--split", "validation", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"].endswith("validation.jsonl")
    with pytest.raises(UsageError, match=r"--split 'bogus': not a split; valid: train, validation"):
        di.inspect_path(rl, split="bogus")
    (sft / "data" / "validation_12.idx.parquet").unlink()
    with pytest.raises(ConfigError, match=r"no validation file .* it has: data/training_12.idx.parquet"):
        di.inspect_path(sft, split="validation")
    with pytest.raises(UsageError, match="is a file"):
        di.inspect_path(rl / "train.jsonl", split="validation")
    assert main(["ultra3", "data", "inspect", str(rl), "--split", "bogus"]) == 2
    assert capsys.readouterr().err.startswith("error: --split 'bogus': not a split")


def test_hints_with_brackets_are_printed_whole(tmp_path, capsys):
    """Table cells and headings went through rich markup: ``pip install 'nemotron-cli[inspect]'`` came out as
    ``pip install 'nemotron-cli'``. The RL report without the checker now names the extra; so does any cell."""
    from nemotron import report
    from nemotron.cli.inspect import _print_inspect

    f = tmp_path / "train.jsonl"
    f.write_text(_rl_lines(1, 1))
    doc = di.rl(f, 1)
    doc.update(checker=None, check=None)
    for s in doc["shown"]:
        s["check"] = None
    _print_inspect(doc)
    report.table("t [local]", ["[plots]"], [["a[b]", "[bold]x[/bold]"]])
    report.heading("h [x]")
    out = capsys.readouterr().out
    assert "pip install 'nemotron-cli[inspect]'" in out, out
    for text in ("t [local]", "[plots]", "a[b]", "[bold]x[/bold]", "h [x]"):
        assert text in out, (text, out)


def test_a_parquet_that_is_not_packed_or_is_empty_is_one_line_exit_2(tmp_path, capsys):
    """A Parquet file of other columns printed pyarrow's schema (``__fragment_index: int32``...) inside the error;
    a file without rows was shown as 0 packs (exit 0). Each is now one line naming what is missing, exit 2."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2], "input_ids": [[1], [2]]}), other)
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({c: pa.array([], type=pa.list_(pa.int32()))
                             for c in ("input_ids", "loss_mask", "seq_start_id")}), empty)
    text = tmp_path / "text.parquet"
    text.write_text("not parquet")
    for f, line in ((other, f"error: {other}: not a packed SFT Parquet file: no column loss_mask, seq_start_id "
                            "(it has x, input_ids)"),
                    (empty, f"error: {empty}: no packs (0 rows)"), (text, f"error: {text}: not a Parquet file (")):
        assert main(["ultra3", "data", "inspect", str(f)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(line) and "__fragment_index" not in err and len(err.splitlines()) == 2, err


def test_data_prep_summaries_print_brackets_as_written(capsys):
    """The data prep summaries (nemotron.data.progress) quote paths and skipped records through rich: a record's
    ``[/INST]`` raised rich's MarkupError and ``[inspect]`` vanished. Their console now prints text as written."""
    from nemotron.data import progress

    progress.console().print("skipped: line 3: '[INST] hi [/INST]' pip install 'nemotron-cli[local]'")
    progress.print_table("t [x]", ["a", "b"], [["[bold]y[/bold]", "[/INST]"]])
    out = capsys.readouterr().out
    for text in ("'[INST] hi [/INST]'", "'nemotron-cli[local]'", "t [x]", "[bold]y[/bold]", "[/INST]"):
        assert text in out, (text, out)


@pytest.mark.parametrize("width", [250, 120, 70])
def test_a_skipped_reasons_cell_loses_no_reason_at_any_width(capsys, monkeypatch, width):
    """The data prep summary's "skipped (reason)" cell at 120 columns read `bad_record 1,` on the row's line (the
    rest wrapped to a line of its own, or cut at narrower widths), which reads as the whole story: a table wider
    than the console shows the first reason and `+N more` and names every reason on a line after the table."""
    from nemotron.data import progress

    monkeypatch.setenv("COLUMNS", str(width))
    cols = ["dataset", "records", "samples", "skipped (reason)", "truncated", "tokens lost", "tokens", "learned",
            "passes", "share"]
    progress.print_table("sft data: /x", cols, [["sft_odd", "16", "14", "bad_record 1, empty_content 1", "-", "1.2k",
                                                 "12.3k", "45.0%", "1", "100%"],
                                                ["plain", "2", "2", "-", "-", "0", "1k", "50.0%", "1", "0%"]],
                         footer=["total", "18", "16", "2", "0", "1.2k", "13.3k", "", "", "100%"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "sft_" in line)
    if width >= 250:  # room for the whole cell: one line, no note
        assert "bad_record 1, empty_content 1" in row and "more" not in out, out
    else:
        if width == 120:  # the shortened cell fits on the row's line
            assert "bad_record 1 +1 more" in row, out
        assert out.splitlines()[-1] == "skipped (reason) of sft_odd: bad_record 1, empty_content 1", out
