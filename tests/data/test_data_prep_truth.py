"""Data prep never deletes what it did not write, and its reports tell the truth.

Real stages on real files (real Ray, the stages' own configs compiled as the CLI does): a user's own
files in an output folder are named on the first run and survive a ``force=true`` rebuild; an up-to-date
rerun prints no work line copied from the earlier run; every problem of a blend comes in one report, at
run time and at ``--dry-run``; an unknown key of a ``-c`` file names its line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nemotron.data import blend as blend_mod
from nemotron.data import driver, outputs, pretrain, rl, sft
from nemotron.errors import ConfigError
from test_data_prep_inputs import dry_run, error_lines, run_py, write_blend
from data_prep_sft_support import SHARED_DATA, compile_stage

pytestmark = pytest.mark.timeout(300)
STAGES = {"data-prep-pretrain": pretrain, "data-prep-sft": sft, "data-prep-rl": rl}


def stage_settings(stage: str, out: Path, tok_cache: str, tmp_path: Path):
    """The stage's `tiny` config on small real inputs, writing to ``out``."""
    over: dict = {"output_dir": str(out), "path_vars__shared_data": str(SHARED_DATA)}
    if stage != "data-prep-rl":
        over["tokenizer__cache_dir"] = tok_cache
    if stage == "data-prep-pretrain":
        data = tmp_path / "docs.jsonl"
        data.write_text("".join(json.dumps({"text": f"document {i}: " + "lorem ipsum dolor sit amet " * 20}) + "\n"
                                for i in range(60)))
        over["blend_path"] = str(write_blend(tmp_path / "pb.json", [{"name": "d", "path": str(data), "weight": 1}]))
    if stage == "data-prep-sft":
        over.update(sample=60, pack__window=120, split__validation_fraction=0.1)
    return STAGES[stage].Settings.from_config(compile_stage(stage, "tiny", **over))


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_rebuild_keeps_foreign_files_and_a_rerun_reports_no_old_work(stage, ray_instance, tok_cache, tmp_path,
                                                                        capsys):
    out = tmp_path / "userdir"
    (out / "data").mkdir(parents=True)
    (out / "notes.txt").write_text("mine\n")
    (out / "data" / "mine.txt").write_text("also mine\n")
    s = stage_settings(stage, out, tok_cache, tmp_path)
    STAGES[stage].prepare(s, live_progress=False)
    first = capsys.readouterr().out.splitlines()
    assert [ln for ln in first if "does not write" in ln] == [
        f"note: output_dir={out} already holds 2 file(s) this stage does not write (data/mine.txt, notes.txt); "
        "they are left alone (a force=true rebuild deletes only the stage's own files)"], first

    STAGES[stage].prepare(s, live_progress=False)  # up to date: nothing done, and the summary says so
    again = capsys.readouterr().out.splitlines()
    assert any(ln.startswith("up to date: ") for ln in again), again
    assert [ln for ln in again if ln.startswith(("work:", "run:"))] == ["work: none (up to date)"], again

    s.force = True
    STAGES[stage].prepare(s, quiet=True)
    assert (out / "data" / "mine.txt").read_text() == "also mine\n"
    assert (out / "notes.txt").read_text() == "mine\n"
    assert outputs.foreign_files(out, type(s).OUTPUT_NAMES) == ["data/mine.txt", "notes.txt"]
    assert (out / outputs.MANIFEST).is_file()


def test_clear_version_deletes_only_what_the_stage_wrote(tmp_path):
    """A half-written version (plan and a receipt, no manifest): the planned shard files, the receipt's
    files and temporary files go; a user's files in data/ and tokenizer/ stay, with their folders."""
    v = tmp_path / "v"
    shard = v / "data" / "d" / "train_00000"
    shard.parent.mkdir(parents=True)
    for suffix in (".bin", ".idx"):
        Path(f"{shard}{suffix}").write_bytes(b"x")
    outputs.write_receipt(shard, {"key": "k", "files": {"train_00000.bin": 1, "train_00000.idx": 1}})
    Path(f"{shard.parent / 'valid_00000'}.bin.tmp-1-ab").write_bytes(b"x")
    (v / "plan.json").write_text(json.dumps({"plan_key": "p", "shards": [{"prefix": str(shard)}]}))
    (v / "tokenizer").mkdir()
    (v / "tokenizer" / "tokenizer.json").write_text("{}")
    (v / "tokenizer" / "README").write_text("mine")
    (v / "data" / "d" / "notes.md").write_text("mine")
    outputs.clear_version(v)
    left = sorted(str(p.relative_to(v)) for p in v.rglob("*") if p.is_file())
    assert left == ["data/d/notes.md", "tokenizer/README"]


def test_every_problem_of_a_blend_in_one_report(tmp_path):
    """A bad weight, an unknown key, a missing path and an unmatched glob: all four, each with its line
    and dataset, from the run (run.py) and from --dry-run."""
    data = tmp_path / "ok.jsonl"
    data.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    blend = tmp_path / "blend.json"
    blend.write_text("{\"datasets\": [\n"
                     f"  {{\"name\": \"a\", \"path\": \"{data}\", \"weight\": \"3\"}},\n"
                     f"  {{\"name\": \"b\", \"path\": \"{tmp_path}/none/*.jsonl\", \"weight\": 1}},\n"
                     f"  {{\"name\": \"c\", \"path\": \"{data}\", \"weight\": 1, \"wieght\": 2}},\n"
                     "  {\"name\": \"d\", \"weight\": 1}\n"
                     "]}\n")
    expected = [f"{blend}:2: datasets[0] (a): weight='3' is not a number",
                f"{blend}:3: datasets (b): path '{tmp_path}/none/*.jsonl' matches no file",
                f"{blend}:4: datasets[2] (c): unknown key 'wieght'; did you mean 'weight'?",
                f"{blend}:5: datasets[3] (d): 'path' is required (file, folder, glob or hf://org/name)"]
    s = rl.Settings.from_config(compile_stage("data-prep-rl", "tiny", blend_path=str(blend),
                                              output_dir=str(tmp_path / "o")))
    with pytest.raises(blend_mod.BlendProblems) as info:
        driver.stage_blend(s)
    assert info.value.problems == expected
    r = run_py("data-prep-rl", compile_stage("data-prep-rl", "tiny", blend_path=str(blend),
                                             output_dir=str(tmp_path / "o")), tmp_path)
    assert r.returncode == 2 and error_lines(r.stderr) == ["error: 4 problems: " + "; ".join(expected)], r.stderr
    code, text = dry_run(tmp_path / "home", "data-prep-rl", f"blend_path={blend}", f"output_dir={tmp_path / 'o'}")
    assert code == 2, text
    for message in expected:
        assert message.split(": ", 1)[1] in text, text
    assert "4 errors, " in text, text
    assert not (tmp_path / "o").exists()


def test_unknown_key_of_a_config_file_names_its_line(tmp_path):
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage

    typo = tmp_path / "typo.yaml"
    typo.write_text("# a user's config\nsplit:\n  validation_rows: 4\n  validation_rws: 5\n")
    with pytest.raises(ConfigError) as info:
        compile_config(get_stage("data-prep-rl"), str(typo), [])
    assert info.value.message.startswith(f"{typo}:4: unknown key 'split.validation_rws'"), info.value.message
