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
    expect = f"{blend}:1: datasets (np): {bad}: not a readable Parquet file (ArrowInvalid: Parquet magic bytes"
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
