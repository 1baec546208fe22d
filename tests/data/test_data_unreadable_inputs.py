"""A local input that is not what its name says (a ``.parquet`` that is not Parquet, a ``.jsonl.gz`` that is not
gzip) is refused before any work, exit 2, naming the blend line and the file, by the dry run and by the run alike
(the run through the CLI and as a job runs ``run.py``): it failed in the work with exit 1 before. A Parquet file of 0
rows is an empty dataset (rule ``data-empty``), as a 0-byte file is. Real files, real command lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from data_prep_sft_support import compile_stage
from test_data_guard_inputs import cli, run_py

pytestmark = pytest.mark.timeout(600)


def _blend(tmp_path: Path, name: str, path: Path) -> Path:
    blend = tmp_path / f"blend_{name}.json"
    blend.write_text(json.dumps({"datasets": [{"name": name, "path": str(path), "weight": 1.0}]}))
    return blend


@pytest.mark.parametrize("stage", ["sft", "pretrain", "rl"])
def test_a_file_that_is_not_parquet_is_refused_before_work(tmp_path, stage):
    bad = tmp_path / "notparquet.parquet"
    bad.write_text("this is a text file with a .parquet name\n")
    blend, out = _blend(tmp_path, "np", bad), tmp_path / "out"
    expect = f"{blend}:1: datasets (np): {bad}: not a readable Parquet file (Parquet magic bytes not found at its start"
    for extra in (["--dry-run"], [f"output_dir={out}"]):
        code, text = cli("ultra3", "data", "prep", stage, "-c", "tiny", f"blend_path={blend}", *extra,
                         home=tmp_path / "home")
        assert code == 2 and expect in text, text[-3000:]
    assert not out.exists()  # nothing written: refused before the lock file
    cfg = compile_stage(f"data-prep-{stage}", "tiny", blend_path=str(blend), output_dir=str(out))
    r, _ = run_py(f"data-prep-{stage}", cfg, tmp_path)  # as a job runs it: the entry's own check
    assert r.returncode == 2 and expect in r.stderr, r.stderr[-3000:]


def test_a_file_that_is_not_gzip_is_refused_before_work(tmp_path):
    bad = tmp_path / "fake.jsonl.gz"
    bad.write_text('{"messages": []}\n')
    blend = _blend(tmp_path, "gz", bad)
    code, text = cli("ultra3", "data", "prep", "sft", "-c", "tiny", f"blend_path={blend}", "--dry-run",
                     home=tmp_path / "home")
    assert code == 2 and f"{bad}: not a gzip file (its first bytes are not gzip's 1f 8b)" in text, text[-3000:]


def test_a_parquet_file_of_zero_rows_is_an_empty_dataset(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    zero = tmp_path / "zero.parquet"
    pq.write_table(pa.table({"messages": pa.array([], type=pa.string())}), zero)
    blend = _blend(tmp_path, "zero", zero)
    code, text = cli("ultra3", "data", "prep", "sft", "-c", "tiny", f"blend_path={blend}", "--dry-run",
                     home=tmp_path / "home")
    assert code == 2 and f"'{zero}' is empty (0 rows): the dataset has no documents" in text, text[-3000:]


def test_the_parquet_checks_read_a_few_bytes_without_pyarrow_and_agree_with_it(tmp_path):
    """sources.parquet_layout / parquet_num_rows (what the dry run's checks use: no pyarrow import, so the dry run
    stays light) against pyarrow's own footer reading, on tables of 0, 1 and 1,000 rows in several row groups with
    nested list columns (as the SFT packs are), the shared real Parquet file, and damaged copies."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nemotron.data.sources import parquet_num_rows, unreadable

    files = []
    for n in (0, 1, 1000):
        f = tmp_path / f"t{n}.parquet"
        pq.write_table(pa.table({"input_ids": pa.array([[i, i + 1] for i in range(n)], type=pa.list_(pa.int32())),
                                 "text": pa.array([f"row {i}" for i in range(n)]),
                                 "meta": pa.array([{"k": i} for i in range(n)], type=pa.struct([("k", pa.int64())]))}),
                       f, row_group_size=128)
        files.append(f)
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pretrain" / "tinyshakespeare.parquet"
    files += [shared] if shared.is_file() else []
    for f in files:
        assert parquet_num_rows(str(f)) == pq.read_metadata(f).num_rows, f
        assert unreadable(str(f), "parquet") is None
    whole = files[2].read_bytes()
    for name, data, why in (("cut.parquet", whole[:-20], "not found at its end"),
                            ("text.parquet", b"plain text, not parquet\n", "not found at its start"),
                            ("long.parquet", whole[:4] + b"x" * 8 + (10**6).to_bytes(4, "little") + b"PAR1",
                             "overruns the file")):
        (tmp_path / name).write_bytes(data)
        assert parquet_num_rows(str(tmp_path / name)) is None
        assert why in unreadable(str(tmp_path / name), "parquet").message
