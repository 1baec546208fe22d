"""Which artifact version a run took, kept beside it: ``version_of`` maps a folder or file back to the record that
names it (the one recorded last when a folder was written again in place), ``lineage.json``'s ``input_versions`` is
made from it; and a data prep rerun with ``-c local`` (which runs the ``tiny`` config) of data that is up to date
reuses the version ``-c tiny`` recorded instead of adding one that says ``local``.

The real artifact store (``nemotron.config.artifacts``) in a temporary NEMOTRON_HOME."""

from __future__ import annotations

import json

import pytest

from nemotron.config import artifacts


@pytest.fixture
def store(tmp_path):
    artifacts.set_root(tmp_path / "artifacts")
    yield tmp_path
    artifacts.set_root(None)


def test_version_of_names_the_newest_record_of_a_folder(store):
    ckpt, data = store / "ckpt" / "ultra3-pretrain-local", store / "data" / "v1"
    ckpt.mkdir(parents=True)
    data.mkdir(parents=True)
    (data / "blend.json").write_text("{}")
    (data / "manifest.json").write_text(json.dumps({"complete": True}))
    assert artifacts.version_of(ckpt) is None  # nothing recorded yet
    artifacts.record("pretrain-checkpoint", {"path": str(ckpt), "step": 2}, at=100.0)
    artifacts.record("pretrain-checkpoint", {"path": str(ckpt), "step": 4}, at=200.0)  # the same folder, rewritten
    artifacts.record("pretrain-data", {"path": str(data), "blend_path": str(data / "blend.json")}, at=50.0)
    assert artifacts.version_of(ckpt) == "pretrain-checkpoint v2"
    assert artifacts.version_of(str(ckpt) + "/") == "pretrain-checkpoint v2"
    assert artifacts.version_of(data / "blend.json") == "pretrain-data v1"  # a *_path field
    assert artifacts.version_of(store / "elsewhere") is None and artifacts.version_of(None) is None

    from nemotron.runtime.megatron.lineage import input_versions

    assert input_versions({"data.per_split_data_args_path": str(data / "blend.json"),
                           "checkpoint.pretrained_checkpoint": str(ckpt), "dataset.dataset_root": None}) == {
        "data.per_split_data_args_path": "pretrain-data v1",
        "checkpoint.pretrained_checkpoint": "pretrain-checkpoint v2", "dataset.dataset_root": None}


def test_data_prep_local_rerun_of_up_to_date_data_reuses_the_tiny_version(store):
    out = store / "output" / "ultra3" / "pretrain-data" / "tiny"
    out.mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({"complete": True, "files": ["a.bin"]}))
    assert artifacts.recorded_config("data-prep-pretrain", "local") == "tiny"  # no local.yaml: it runs tiny.yaml
    assert artifacts.recorded_config("data-prep-pretrain", "/some/where/tiny.yaml") == "tiny"
    assert artifacts.recorded_config("pretrain", "local") == "local"
    first = artifacts.record("pretrain-data", {"path": str(out), "stage": "data-prep-pretrain",
                                               "config": artifacts.recorded_config("data-prep-pretrain", "tiny"),
                                               "config_hash": "a", "experiment_id": "e1"})
    again = artifacts.record("pretrain-data", {"path": str(out), "stage": "data-prep-pretrain",
                                               "config": artifacts.recorded_config("data-prep-pretrain", "local"),
                                               "config_hash": "b", "experiment_id": "e2"})
    assert first["version"] == again["version"] == 1 and again["config"] == "tiny"
    assert artifacts.versions("pretrain-data") == [1]
