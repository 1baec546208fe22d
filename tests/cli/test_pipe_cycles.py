"""MOPD x N in a ``pipe``: a stage named again runs as its next cycle (``-c NAME-cycle<k>``), each cycle wired to the
one before, MOPD's student to the warmup (and only the student: the panel keeps the RLVR teachers); per-cycle
overrides ``STAGE#K:key=value``; artifact references with alternatives (``${art:A|B,...}``) and the cycle configs'
accepted producers (:mod:`nemotron.config.artifacts`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from nemotron.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
ENV = str(ROOT / "tests" / "fixtures" / "env.toml")


def _section(out: str, start: str, end: str | None) -> str:
    return out[out.index(start):out.index(end) if end else None]


def _value(section: str, key: str) -> str:
    m = re.search(rf"^\s+{re.escape(key)}: (\S+)", section, re.M)
    assert m, f"{key} not in {section[:2000]}"
    return m.group(1)


def test_tiny_chain_wires_warmup_and_two_cycles(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    code = main(["ultra3", "pipe", "rlvr", "mopd-warmup", "mopd", "mopd", "mtp-boost", "quantize", "-c", "tiny",
                 "--dry-run", "--batch", "sample", "--env-file", ENV])
    out = capsys.readouterr().out
    warm = _section(out, "[2/6] ultra3 mopd-warmup", "[3/6] ultra3 mopd")
    c1 = _section(out, "[3/6] ultra3 mopd", "[4/6] ultra3 mopd")
    c2 = _section(out, "[4/6] ultra3 mopd", "[5/6] ultra3 mtp-boost")
    mtp = _section(out, "[5/6] ultra3 mtp-boost", "[6/6] ultra3 quantize")
    assert _value(warm, "model_name").endswith("ultra3-rlvr-tiny/hf/latest")
    # cycle 1: the warmup's output is the student; the general teacher stays the RLVR result
    assert _value(c1, "model_name").endswith("ultra3-mopd-warmup-tiny/hf/latest")
    assert _value(c1, "general").endswith("ultra3-rlvr-tiny/hf/latest")
    assert _value(c1, "checkpoint_dir").endswith("ultra3-mopd-tiny")
    # cycle 2 (-c tiny-cycle2): its own folder, the MOPD-1 student as student and as general teacher
    assert "tiny-cycle2.yaml" in c2
    assert _value(c2, "model_name").endswith("ultra3-mopd-tiny/hf/latest")
    assert _value(c2, "general").endswith("ultra3-mopd-tiny/hf/latest")
    assert _value(c2, "checkpoint_dir").endswith("ultra3-mopd-tiny-cycle2")
    assert _value(mtp, "source").endswith("ultra3-mopd-tiny-cycle2/hf/latest")
    table = out[out.rindex("the chain"):]
    assert re.search(r"4\s+ultra3 mopd\s+tiny-cycle2", table), table
    assert code == 2  # refused at mtp-boost's cluster route only (rule mtp-boost-framework, docs/mtp_boost.md)
    assert "5/6 (ultra3 mtp-boost): 1" in out


def test_local_chain_dry_run_and_per_cycle_overrides(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NEMOTRON_CKPT_ROOT", str(tmp_path / "ckpt"))
    code = main(["ultra3", "pipe", "mopd-warmup", "mopd", "mopd", "-c", "local", "--dry-run",
                 "mopd:grpo.max_num_steps=3", "mopd#2:grpo.max_num_steps=5"])
    out = capsys.readouterr().out
    c1 = _section(out, "[2/3] ultra3 mopd", "[3/3] ultra3 mopd")
    c2 = _section(out, "[3/3] ultra3 mopd", None)
    assert _value(c1, "max_num_steps") == "3" and _value(c2, "max_num_steps") == "5"
    assert _value(c1, "model_name") == str(tmp_path / "ckpt" / "ultra3-mopd-warmup-local" / "hf" / "latest")
    assert _value(c2, "model_name") == str(tmp_path / "ckpt" / "ultra3-mopd-local" / "hf" / "latest")
    assert _value(c2, "checkpoint_dir") == str(tmp_path / "ckpt" / "ultra3-mopd-local-cycle2")
    # valid; the warmup's own inputs are not made yet, which the run refuses: so does the dry run (exit 2)
    assert code == 2 and out.startswith("dry run: the chain's configs are valid, but the run would refuse to start at "
                                        "stage 1/3 (ultra3 mopd-warmup)"), out[:500]


@pytest.mark.parametrize("args, line", [
    (["mopd", "mopd", "mopd", "-c", "tiny"], "error: pipe: stage mopd is named 3 times; its occurrence 3 would run -c "
                                             "tiny-cycle3, which mopd does not have"),
    (["mopd", "mopd", "-c", "tiny", "mopd#3:grpo.max_num_steps=2"], "error: overrides for runs not in the chain: mopd#3"),
    (["mopd", "mopd", "-c", "tiny-cycle2"], "error: pipe: -c tiny-cycle2 is itself cycle 2 of mopd's -c tiny"),
    (["mopd", "mopd", "-c", "cycle2"], "error: pipe: -c cycle2 is itself cycle 2 of mopd's -c default"),
    (["mopd", "-c", "tiny", "mopd#x:grpo.max_num_steps=2"], "error: 'mopd#x:grpo.max_num_steps=2': mopd#x: the "
                                                            "occurrence is a number from 1"),
])
def test_pipe_refuses_a_cycle_without_config_and_overrides_for_absent_runs(capsys, args, line):
    code = main(["ultra3", "pipe", *args, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and any(x.startswith(line) for x in err.splitlines()), err



@pytest.mark.parametrize("arg", ["mopd:2:grpo.max_num_steps=5", "mopd:#2:grpo.max_num_steps=5"])
def test_a_colon_for_the_run_number_points_to_the_hash_form(capsys, arg):
    """``mopd:2:key=value`` (the run number after a colon) is refused naming ``STAGE#K:key=value``, with the override
    rewritten that way in the hint, before any stage compiles."""
    code = main(["ultra3", "pipe", "mopd", "mopd", "-c", "tiny", arg, "--dry-run"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err[0] == (f"error: {arg!r}: the K-th run of a stage is written STAGE#K:key=value, not "
                      "STAGE:K:key=value"), err
    assert err[1] == ("hint: mopd#2:grpo.max_num_steps=5 (the run 2 of mopd in the chain); "
                      "mopd:grpo.max_num_steps=5 sets every run of mopd"), err


def test_a_stage_override_on_a_stage_run_twice_says_it_sets_every_run(capsys):
    main(["ultra3", "pipe", "mopd", "mopd", "-c", "local", "mopd:grpo.max_num_steps=3", "--dry-run", "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert ("note: mopd:grpo.max_num_steps=3 applies to every run of mopd in the chain (runs 1 to 2); "
            "mopd#K:key=value sets the K-th run only") in err, err
    main(["ultra3", "pipe", "mopd", "-c", "local", "mopd:grpo.max_num_steps=3", "--dry-run", "--quiet"])
    assert not any(x.startswith("note: mopd:") for x in capsys.readouterr().err.splitlines())  # one run: no note
    main(["ultra3", "pipe", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "STAGE:key=value sets every run of STAGE (all its cycles)" in help_text, help_text
    assert "STAGE#K:key=value sets its K-th run only" in help_text, help_text


def test_an_override_for_a_stage_the_pipe_does_not_name_says_to_name_it(capsys):
    """``pipe pretrain:KEY=V sft``: the override names a stage, but the chain must name it too; the hint shows how."""
    code = main(["ultra3", "pipe", "pretrain:train.global_batch_size=8", "sft", "-c", "tiny", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "error: overrides for stages not in the chain: pretrain" in err, err
    assert "hint: STAGE:key=value sets a key of a stage the pipe runs; name the stage too: nemotron ultra3 pipe " \
           "pretrain sft pretrain:KEY=VALUE" in err, err


def test_alternatives_take_the_planned_one_first_else_the_newest(tmp_path, monkeypatch):
    from nemotron.config import artifacts

    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    artifacts.set_root(None)
    for name in ("rl-checkpoint", "mopd-warmup-checkpoint"):
        (tmp_path / name).mkdir()
    artifacts.record("mopd-warmup-checkpoint", {"path": str(tmp_path / "mopd-warmup-checkpoint"), "config": "local"},
                     at=100.0)
    artifacts.record("rl-checkpoint", {"path": str(tmp_path / "rl-checkpoint"), "config": "local"}, at=200.0)
    refs = ["mopd-warmup-checkpoint", "rl-checkpoint"]
    assert artifacts.lookup_any(refs, "local")[0] == "rl-checkpoint"  # RLVR ran after that warmup: the warmup is stale
    artifacts.record("mopd-warmup-checkpoint", {"path": str(tmp_path / "mopd-warmup-checkpoint"), "config": "local"},
                     at=300.0)
    assert artifacts.lookup_any(refs, "local")[0] == "mopd-warmup-checkpoint"
    with artifacts.planning({"rl-checkpoint": {"path": "/planned/rl"}}):
        assert artifacts.lookup_any(refs, "local") == ("rl-checkpoint", {"path": "/planned/rl"})
    assert artifacts.lookup_any(["eval-results"], "local") is None


def test_cycle_configs_accept_their_base_and_are_accepted_by_it():
    from nemotron.config.artifacts import accepted_configs, cycle_base, cycle_config

    assert cycle_config("local", 2) == "local-cycle2" and cycle_config(None, 3) == "cycle3"
    assert cycle_base("tiny-cycle2") == "tiny" and cycle_base("cycle2") == "default" and cycle_base("tiny") is None
    assert "local-cycle2" in accepted_configs("local") and "tiny" in accepted_configs("local-cycle2")
    assert "cycle2" in accepted_configs("default") and "tiny-cycle2" not in accepted_configs("default")
