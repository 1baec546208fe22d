"""A data prep config the run cannot use is refused before any work, naming the key, and every hint names a key the
stage has.

Real configs compiled as the CLI compiles them (tests/config_support.py), the stages' real ``Settings`` readers and
the real blend loader; the dry runs are the CLI's own, in a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from config_support import compile_stage
from nemotron.data import driver, pretrain, rl, sft
from nemotron.errors import ConfigError

STAGES = {"data-prep-pretrain": pretrain, "data-prep-sft": sft, "data-prep-rl": rl}


def dry_run(home: Path, kind: str, *args: str) -> tuple[int, str]:
    """`nemotron ultra3 data prep KIND -c tiny --dry-run ARGS` in a fresh process: (exit code, stdout + stderr)."""
    r = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", kind, "-c", "tiny", "--dry-run",
                        *args], capture_output=True, text=True, timeout=180, env={**os.environ, "NEMOTRON_HOME": str(home)})
    return r.returncode, r.stdout + r.stderr


# --------------------------------------------------------------------------------------------------
# null for a key that needs a value (findings 18, 19)


@pytest.mark.parametrize("stage,key,what", [
    ("data-prep-pretrain", "shards.target_tokens", "a whole number of at least 1"),
    ("data-prep-pretrain", "split.valid_docs", "a whole number of at least 1"),
    ("data-prep-pretrain", "on_bad.max_examples", "a whole number of at least 0"),
    ("data-prep-sft", "pack.pack_size", "a whole number of at least 16"),
    ("data-prep-sft", "split.validation_fraction", "a number of at least 0"),
    ("data-prep-rl", "split.validation_rows", "a whole number of at least 0"),
    ("data-prep-rl", "shards.target_bytes", "a whole number of at least 1"),
    ("data-prep-rl", "split.seed", "a whole number"),
    ("data-prep-rl", "summary.progress_interval_s", "a number of at least 0"),
])
def test_null_for_a_number_key_is_refused_naming_it(stage, key, what):
    with pytest.raises(ConfigError, match=rf"^{key}=null: the stage needs {what} here") as info:
        STAGES[stage].Settings.from_config(compile_stage(stage, "tiny", **{key.replace(".", "__"): None}))
    assert f"set {key}=VALUE" in (info.value.hint or "")


def test_null_stays_allowed_where_it_means_something():
    s = rl.Settings.from_config(compile_stage("data-prep-rl", "tiny", sample=None, workers__count=None))
    assert s.sample is None and s.workers is None


# --------------------------------------------------------------------------------------------------
# a key deleted, or its section replaced by a mapping without it (finding 18)


@pytest.mark.parametrize("stage,args,key", [
    ("sft", ["~pack.pack_size"], "pack.pack_size"),
    ("sft", ["pack=null"], "pack.pack_size"),
    ("sft", ["pack={window: 5}"], "pack.pack_size"),
    ("pretrain", ["~shards.target_tokens"], "shards.target_tokens"),
    ("rl", ["split=null"], "split.validation_rows"),
    ("rl", ["~policies.missing_answer"], "policies.missing_answer"),
    ("rl", ["~dedupe"], "dedupe"),
])
def test_a_deleted_key_is_refused_by_the_dry_run(tmp_path, stage, args, key):
    code, out = dry_run(tmp_path, stage, *args)
    assert code == 2, out
    assert f"error: {key} is missing (deleted with ~{key}, or its section replaced by a mapping without it)" in out, out
    assert "internal error" not in out and "Traceback" not in out


@pytest.mark.parametrize("stage,section", [("sft", "pack"), ("pretrain", "shards"), ("pretrain", "on_bad"), ("rl", "split"),
                                           ("rl", "policies")])
def test_an_emptied_section_is_refused_like_a_deleted_one(tmp_path, stage, section):
    code, out = dry_run(tmp_path, stage, f"{section}={{}}")
    assert code == 2, out
    assert (f"error: override '{section}={{}}': '{section}' is a section of the stage and cannot be emptied (its keys "
            "would fall back to values you never set)") in out, out


def test_a_deleted_key_is_refused_by_the_run_config_reader():
    cfg = compile_stage("data-prep-sft", "tiny")
    del cfg["pack"]["pack_size"]
    with pytest.raises(ConfigError, match=r"^pack\.pack_size is missing"):
        sft.Settings.from_config(cfg)
    cfg = compile_stage("data-prep-rl", "tiny")
    del cfg["path_vars"]  # a free-form mapping: absent is no entries
    assert rl.Settings.from_config(cfg).path_vars == {}


# --------------------------------------------------------------------------------------------------
# an empty glob's hint names the stage's own policy key (finding 4)


@pytest.mark.parametrize("stage,key", [("data-prep-rl", "policies.empty_glob"), ("data-prep-sft", "policies.empty_glob"),
                                       ("data-prep-pretrain", "on_bad.empty_glob")])
def test_an_empty_glob_hint_names_the_stage_own_keys(tmp_path, stage, key):
    blend = tmp_path / "blend.json"
    blend.write_text(json.dumps({"datasets": [{"name": "none", "path": str(tmp_path / "*.txt"), "weight": 1.0}]}))
    s = STAGES[stage].Settings.from_config(compile_stage(stage, "tiny", blend_path=str(blend),
                                                          output_dir=str(tmp_path / "out")))
    with pytest.raises(ConfigError, match="matches no file") as info:
        driver.stage_blend(s)
    hint = info.value.hint or ""
    assert f"{key}=skip" in hint, hint
    if stage != "data-prep-pretrain":
        assert "on_bad" not in hint and "bad_weight" not in hint, hint
        s.policies["empty_glob"] = "skip"  # following the hint works
        assert driver.stage_blend(s).datasets[0].name == "none"


# --------------------------------------------------------------------------------------------------
# the dry run refuses what the run refuses (finding 9; tokenizer.add_special_tokens=[] of finding 18)


def test_a_chat_template_the_run_cannot_read_or_compile_is_refused_by_the_dry_run(tmp_path):
    code, out = dry_run(tmp_path, "sft", "chat.template=/nonexistent.jinja")
    assert code == 2 and "error: chat.template=/nonexistent.jinja: cannot read (No such file or directory)" in out, out
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }\n")
    code, out = dry_run(tmp_path, "sft", f"chat.template={bad}")
    assert code == 2 and f"error: {bad}:" in out and "chat template syntax error" in out, out


def test_a_tokenizer_without_the_chat_tokens_is_refused_by_the_dry_run(tmp_path):
    code, out = dry_run(tmp_path, "sft", "tokenizer.add_special_tokens=[]")
    assert code == 2, out
    assert "the vocabulary has no <|im_start|>, <|im_end|>, <think>, </think> token (the Nemotron 3 chat format" in out
    code, out = dry_run(tmp_path, "sft", "tokenizer.add_special_tokens=[<|im_start|>, <|im_end|>]")
    assert code == 2 and "the vocabulary has no <think>, </think> token" in out, out


@pytest.mark.parametrize("path,why", [("/", "/ is the file system root"), ("/etc", "/etc is a folder of the operating system"),
                                      ("/usr/share/out", "/usr/share/out is inside /usr, a folder of the operating system"),
                                      ("/tmp", "/tmp is a shared top-level or home folder")])
def test_a_system_folder_is_no_output_dir(tmp_path, path, why):
    for stage in STAGES:
        with pytest.raises(ConfigError, match=rf"^output_dir={path}: {why}"):
            STAGES[stage].Settings.from_config(compile_stage(stage, "tiny", output_dir=path))
    code, out = dry_run(tmp_path, "rl", f"output_dir={path}")
    assert code == 2 and f"error: output_dir={path}: {why}" in out, out


def test_a_non_empty_folder_that_is_no_data_prep_output_is_a_warning(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "important.txt").write_text("mine")
    code, out = dry_run(tmp_path, "rl", f"output_dir={folder}")
    assert code == 0 and out.splitlines()[0] == "dry run: valid (1 warning); nothing was submitted", out
    assert (f"warning: output_dir='{folder}': is not empty and is not a data prep output: it holds 1 file(s) no data "
            "prep wrote (important.txt)") in out, out
    (folder / "important.txt").unlink()
    code, out = dry_run(tmp_path, "rl", f"output_dir={folder}")
    assert code == 0 and "is not empty" not in out, out
