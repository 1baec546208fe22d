"""The stage registry carries a stage's identity: its rows are checked when the module is imported, every point of
use reads the row (its family, its training data, its metrics reader, its output folder), and an unknown stage is
refused where it is looked up, never treated as another stage (issue 32: stage rows)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import yaml

from nemotron.config import registry
from nemotron.config.registry import (FAMILIES, METRICS_READERS, STAGES, TRAINING_DATA, RegistryError, _stage,
                                      get_stage)

SRC = Path(registry.__file__).resolve().parents[1]
ROW = dict(name="midtrain", command="midtrain", kind="megatron", launch="torchrun", image="nemo",
           consumes="pretrain-checkpoint pretrain-data", produces="midtrain-checkpoint", gpu=True,
           summary="Mid-training on a blend.", outputs={"path": "{checkpoint.save}"},
           checks="layout megatron-keys training-data")


def _import_with(row_source: str) -> types.ModuleType:
    """``nemotron.config.registry``'s own source with one more row, executed as a fresh module (an import)."""
    text = Path(registry.__file__).read_text(encoding="utf-8")
    head, sep, tail = text.partition("STAGES: tuple[Stage, ...] = (\n")
    assert sep, "registry.py no longer declares STAGES as a tuple of _stage(...) rows"
    module = types.ModuleType("registry_with_new_row")
    sys.modules[module.__name__] = module  # dataclasses look their module up while the classes are made
    try:
        exec(compile(head + sep + row_source + ",\n" + tail, "registry_with_new_row.py", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def test_a_complete_new_row_imports_and_carries_what_the_points_of_use_read():
    mod = _import_with('_stage("midtrain", "midtrain", "megatron", "torchrun", "nemo", "pretrain-checkpoint '
                       'pretrain-data", "midtrain-checkpoint", True, "Mid-training on a blend.", '
                       '{"path": "{checkpoint.save}"}, "layout megatron-keys training-data", '
                       'trains_on="pretrain-data")')
    row = mod.get_stage("midtrain")
    assert row.family is mod.FAMILIES["megatron"] and row.family.estimate and row.family.optimizer
    assert row.training_data.blend and row.training_data.artifact == "pretrain-data"
    assert row.metrics == "trainer" and row.output_folder == "{checkpoint.save}" and row.bridge


@pytest.mark.parametrize("row_source,field", [
    # a forgotten positional field (here: the check sets) is a TypeError when the module is imported
    ('_stage("midtrain", "midtrain", "megatron", "torchrun", "nemo", "pretrain-data", "midtrain-checkpoint", True, '
     '"s", {"path": "{checkpoint.save}"})', "checks"),
    # an empty one, a kind without a family, a training data nobody reads, one it does not consume
    ('_stage("midtrain", "midtrain", "megatron", "torchrun", "nemo", "pretrain-data", "midtrain-checkpoint", True, '
     '"s", {"path": "{checkpoint.save}"}, "")', "checks"),
    ('_stage("midtrain", "midtrain", "megatorn", "torchrun", "nemo", "pretrain-data", "midtrain-checkpoint", True, '
     '"s", {"path": "{checkpoint.save}"}, "layout")', "kind"),
    ('_stage("midtrain", "midtrain", "megatron", "torchrun", "nemo", "pretrain-data", "midtrain-checkpoint", True, '
     '"s", {"path": "{checkpoint.save}"}, "layout", trains_on="midtrain-data")', "trains_on"),
    ('_stage("midtrain", "midtrain", "megatron", "torchrun", "nemo", "pretrain-checkpoint", "midtrain-checkpoint", '
     'True, "s", {"path": "{checkpoint.save}"}, "layout", trains_on="pretrain-data")', "trains_on"),
    ('_stage("midtrain", "midtrain", "megatron", "torchrun", "nemo", "pretrain-data", "midtrain-checkpoint", True, '
     '"s", {}, "layout")', "outputs"),
    ('_stage("midtrain", "midtrain", "megatron", "srun", "nemo", "pretrain-data", "midtrain-checkpoint", True, '
     '"s", {"path": "{checkpoint.save}"}, "layout")', "launch"),
    ('_stage("midtrain", "midtrain", "megatron", "torchrun", "nemo", "pretrain-data", "midtrain-checkpoint", True, '
     '"s", {"path": "{checkpoint.save}"}, "layout", metrics="loss")', "metrics"),
])
def test_a_forgotten_or_wrong_field_of_a_new_row_fails_at_import(row_source, field):
    with pytest.raises((TypeError, ValueError)) as err:  # the fresh module's RegistryError is a ValueError
        _import_with(row_source)
    assert field in str(err.value)
    if type(err.value).__name__ == "RegistryError":
        assert str(err.value).startswith(f"stage 'midtrain': {field}=")  # the row and its field are named


def test_the_shipped_rows_and_their_families():
    for stage in STAGES:
        assert stage.family.kind == stage.kind
        assert stage.metrics in (*METRICS_READERS, "")
        assert stage.trains_on in (*TRAINING_DATA, "")
    assert [s.name for s in STAGES if s.training_data is not None] == ["pretrain", "sft"]
    assert get_stage("pretrain").training_data.blend and not get_stage("sft").training_data.blend
    assert [s.name for s in STAGES if s.bridge] == ["pretrain", "sft", "convert"]
    assert get_stage("rlvr").output_folder == "{checkpointing.checkpoint_dir}"  # not .../hf/latest
    assert get_stage("data-prep-pretrain").written_data is TRAINING_DATA["pretrain-data"]
    assert get_stage("data-prep-rl").written_data is None
    assert set(FAMILIES) == {s.kind for s in STAGES}


def test_an_unknown_stage_fails_where_it_is_looked_up():
    with pytest.raises(KeyError, match="did you mean 'pretrain'"):
        get_stage("pretrian")
    _ = _stage(**ROW)  # a row that is not registered is not found either
    with pytest.raises(KeyError, match="no stage 'midtrain'"):
        get_stage("midtrain")


def test_megatron_bridge_refuses_a_stage_it_does_not_run_instead_of_treating_it_as_sft():
    from nemotron.runtime.megatron import megatron_bridge as mb

    for name, said in (("pretrian", "did you mean 'pretrain'"), ("rlvr", "runs the stages that train on"),
                       ("mtp-boost", "pretrain, sft, convert")):
        with pytest.raises(mb.TranslateError, match=re.escape(said)):
            mb.translate({"recipe": {"hf_model_id": "x"}}, name)
        with pytest.raises(mb.TranslateError, match=re.escape(said)):
            mb.precheck({}, name, importable=lambda m: True, gpus=0, installed={}, env={})


def test_the_local_trainer_refuses_a_stage_without_training_data():
    from nemotron.runtime.common.settings import SettingsError, read

    with pytest.raises(SettingsError, match="trains the stages that read training data .pretrain, sft."):
        read({}, "rlvr")
    with pytest.raises(SettingsError, match="no stage 'sfft'"):
        read({}, "sfft")


def test_stage_metrics_read_the_row_reader_in_its_output_folder(tmp_path):
    from nemotron.runtime.stage_metrics import READERS, collect, output_folder

    assert set(READERS) == set(METRICS_READERS)
    (tmp_path / "summary.json").write_text('{"reward_last": 0.5, "val_accuracy_last": 0.25}', encoding="utf-8")
    cfg = {"checkpointing": {"checkpoint_dir": str(tmp_path)}}
    assert output_folder(get_stage("rlvr"), cfg) == tmp_path
    assert collect("rlvr", cfg) == {"reward": 0.5, "val_accuracy": 0.25}
    assert collect("convert", {"convert": {"output_dir": str(tmp_path)}}) == {}  # the row names no reader
    with pytest.raises(KeyError):
        collect("pretrian", {})


def test_a_per_stage_runtime_gets_the_entry_stage_from_the_registry(tmp_path, capsys):
    """``Backend(per_stage=True)``: the shared local trainer entry is called with the stage of the entry that
    runs it (sft: it asks for the packed data), so a new stage of that runtime needs no function of its own."""
    from nemotron.errors import ConfigError
    from nemotron.runtime.dispatch import registry_name, run, stage_backends

    assert registry_name("ultra3 data prep sft") == "data-prep-sft"
    with pytest.raises(ConfigError, match="no stage"):
        registry_name("ultra3 midtrain")
    cfg = {"backend": "local", "model": {"name": "small", "seq_length": 64},
           "train": {"train_iters": 2, "global_batch_size": 1, "micro_batch_size": 1},
           "optimizer": {"lr": 1e-4}, "checkpoint": {"save": str(tmp_path / "ckpt")}}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    for stage, said in (("sft", "dataset.dataset_root is not set"),
                        ("pretrain", "data.per_split_data_args_path is not set")):
        backends, default = stage_backends(get_stage(stage))
        assert backends["local"].per_stage and backends["megatron-bridge"].per_stage
        assert run(f"ultra3 {stage}", backends, default, ["--config", str(path)]) == 1
        assert f"ultra3 {stage}: {said}" in capsys.readouterr().err


def test_no_stage_is_told_by_comparing_its_name_or_kind():
    """The count issue 32 measures (stage-name tests, ``.kind`` tests) stays at 0: the local RL runtime, too, reads
    its stage's ``rl_objective`` from the row."""
    names = re.compile(r"(name|stage)[\"']?\)? ?(==|!=|in) \(?[\"'](pretrain|sft|convert|rlvr|mopd|quantize|eval|"
                       r"data-prep)")
    kinds = re.compile(r"\.kind ?(==|!=|in\b)|getattr\([\w.]*stage, \"kind\""
                       r"|getattr\([\w.]*stage, \"name\", \"\"\) ?(==|in)")
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if kinds.search(line) or names.search(line):
                found.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_a_new_training_stage_needs_only_its_row_configs_and_entry(tmp_path, monkeypatch):
    """docs/architecture.md's worked example, made true: a Megatron stage that trains on a blend (a mid-training
    stage), registered as one row, is compiled, validated as pretrain is, translated for Megatron-Bridge, read by the
    local trainer and its ``pipe`` metrics collected, with no edit anywhere else. Its configs and entry here are
    pretrain's own files (the row points at them), standing for the YAML and run.py such a stage would add."""
    import dataclasses

    from local_runtime_support import write_pretrain_data
    from nemotron import validation
    from nemotron.config.compile import compile_config
    from nemotron.runtime.common.settings import read
    from nemotron.runtime.megatron import megatron_bridge as mb
    from nemotron.runtime.megatron.pretrain_data import read_blend
    from nemotron.runtime.stage_metrics import collect

    row = dataclasses.replace(_stage(**ROW, trains_on="pretrain-data"), config_dir="ultra3/pretrain",
                              entry="ultra3/pretrain/run.py")
    monkeypatch.setitem(registry._BY_NAME, "midtrain", row)
    monkeypatch.setattr(registry, "STAGES", (*registry.STAGES, row))
    blend = write_pretrain_data(tmp_path / "data")
    over = [f"data.per_split_data_args_path={blend}", f"checkpoint.save={tmp_path / 'ckpt'}"]

    def checked(stage):
        compiled = compile_config(stage, "tiny", over)
        validation.prepare(stage, compiled.config, compiled.user_keys, None)
        found = validation.validate(stage, compiled.config, None)
        return compiled.config, sorted((p.rule, p.key, p.severity) for p in found)

    cfg, problems = checked(row)
    assert problems == checked(get_stage("pretrain"))[1]
    assert not [p for p in problems if p[2] == "error"], problems
    bc = mb.translate(cfg, "midtrain", blend=read_blend(blend))
    assert bc.dataset_kind == "gpt" and bc.data.artifact == "pretrain-data" and bc.stage == "midtrain"
    local = compile_config(row, "local", over).config
    assert read(local, "midtrain").blend_path == blend
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "summary.json").write_text('{"train_loss_last": 2.5}', encoding="utf-8")
    assert collect("midtrain", cfg) == {"train_loss": 2.5}


def test_the_local_rl_runtime_reads_the_objective_from_the_row():
    """``rl_objective`` picks GRPO or distillation in the local RL runtime; a stage without one is refused there by
    name, and a row with an unknown objective, or one on a stage that is not NeMo RL's, fails at import."""
    from nemotron.config.registry import RegistryError, _stage
    from nemotron.runtime.rl.rl_settings import SettingsError, read

    assert (get_stage("rlvr").rl_objective, get_stage("mopd").rl_objective) == ("reward", "distillation")
    assert get_stage("mopd-warmup").rl_objective == ""  # an SFT of the student: not the RL runtime's
    with pytest.raises(SettingsError, match=r"stage 'mopd-warmup': the local RL runtime runs the stages with an RL "
                                            r"objective \('rlvr', 'mopd'\)"):
        read({}, "mopd-warmup")
    row = dict(command="x", launch="ray", image="nemo-rl", consumes="rl-data", produces="x-checkpoint", gpu=True,
               summary="x", outputs={"path": "{out}"}, checks="nemo-rl")
    with pytest.raises(RegistryError, match="rl_objective='rewards': valid: reward, distillation"):
        _stage("x", kind="rl", rl_objective="rewards", **row)
    with pytest.raises(RegistryError, match="only a NeMo RL stage has one"):
        _stage("x", kind="megatron", rl_objective="reward", **row)
