"""The Megatron-Bridge key list (src/nemotron/keylists, made by scripts/megatron_bridge_keys.py) and the
unknown-pass-through-key check (src/nemotron/config/keys.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from nemotron.config import keys

ROOT = Path(__file__).resolve().parents[2]


def _pinned(framework: str) -> str:
    """The key list name for the ``[nemo]`` pin: version and short commit (``0.5.0-4588417``)."""
    from nemotron.config.images import keylist_version

    return keylist_version("nemo", framework)


def test_a_key_list_is_stored_for_the_pinned_version():
    version = _pinned("megatron_bridge")
    table = tomllib.loads((ROOT / "stages" / "images.toml").read_text())["nemo"]
    kl = keys.load_keylist(version)
    assert kl["version"] == version == f"{table['frameworks']['megatron_bridge']}-{table['commits']['megatron_bridge'][:7]}"
    assert kl["package_version"] == table["frameworks"]["megatron_bridge"]
    assert kl["megatron_core"] == table["frameworks"]["megatron_core"]
    sections = kl["sections"]
    for name in ("train", "model", "optimizer", "scheduler", "ddp", "dataset", "checkpoint", "logger", "tokenizer",
                 "dist", "rng", "validation", "mixed_precision"):
        assert sections[name]["fields"], name
    assert "train_iters" in sections["train"]["fields"]
    assert "moe_router_topk_scaling_factor" in sections["model"]["fields"]       # from megatron-core TransformerConfig
    assert "pad_seq_to_mult" in sections["dataset"]["fields"]["packed_sequence_specs"]["fields"]
    with pytest.raises(KeyError, match=r"stored: 0\.5\.0"):
        keys.load_keylist("0.0.1")


@pytest.mark.parametrize("stage", ["pretrain", "sft", "convert"])
def test_every_stage_config_key_is_ours_or_megatron_bridges(stage):
    import yaml

    kl = keys.load_keylist(_pinned("megatron_bridge"))
    for path in sorted((ROOT / "stages" / "ultra3" / stage).glob("*.yaml")):
        problems = keys.unknown_keys(yaml.safe_load(path.read_text()), kl)
        assert not problems, f"{path.name}: " + "; ".join(map(keys.describe, problems))


def test_unknown_pass_through_key_is_rejected_with_a_did_you_mean():
    """`+train.train_itres=5` gets past the config compiler (+ adds a key); the key list stops it."""
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage

    cfg = compile_config(get_stage("pretrain"), "tiny", ["+train.train_itres=5", "+model.moe_router_topk_scalin=5.0",
                                                          "+optimzer.lr=1"], check_paths=False).config
    problems = keys.unknown_keys(cfg, keys.load_keylist(_pinned("megatron_bridge")))
    got = {p.key: p.suggestion for p in problems}
    assert got == {"train.train_itres": "train.train_iters",
                   "model.moe_router_topk_scalin": "model.moe_router_topk_scaling_factor",
                   "optimzer": "optimizer"}
    line = keys.describe(next(p for p in problems if p.key == "train.train_itres"))
    assert "Megatron-Bridge 0.5.0" in line and "did you mean train.train_iters?" in line
    # free-form mappings and our own keys pass
    ok = {"dataset": {"dataset_kwargs": {"anything": 1}}, "model": {"name": "ultra"}, "backend": "local"}
    assert keys.unknown_keys(ok, keys.load_keylist(_pinned("megatron_bridge"))) == []
    # a class the job constructs itself must get its required fields
    missing = keys.missing_keys({"dataset": {"dataset_root": "/d"}}, keys.load_keylist(_pinned("megatron_bridge")),
                                {"dataset": "FinetuningDatasetConfig"})
    assert [p.key for p in missing] == ["dataset.seq_length"] and "required by FinetuningDatasetConfig" in missing[0].message


def test_generator_reads_dataclasses_through_imports_and_inheritance(tmp_path):
    """The generator on a miniature source tree: aliased imports, re-exports from a package __init__,
    inherited fields, a nested config dataclass, a mapping field, a union of providers."""
    files = {
        "megatron/bridge/training/config.py": """
            from dataclasses import dataclass
            from typing import Optional, Union
            from megatron.training.config import TrainingConfig as MTrainTrainingConfig
            from megatron.bridge.models import GPTModelProvider
            from megatron.bridge.data.specs import PackedSequenceSpecs

            @dataclass
            class TrainingConfig(MTrainTrainingConfig):
                extra_flag: bool = False

            @dataclass
            class FinetuningDatasetConfig:
                dataset_root: str = ""
                packed_sequence_specs: Optional[PackedSequenceSpecs] = None
                dataset_kwargs: Optional[dict] = None

            class ConfigContainer:
                train: TrainingConfig
                model: GPTModelProvider | "MambaModelProvider"
                dataset: FinetuningDatasetConfig
                mixed_precision: Optional[Union[str, "MixedPrecisionConfig"]] = None
        """,
        "megatron/training/config/__init__.py": "from .training_config import TrainingConfig\n",
        "megatron/training/config/training_config.py": """
            from dataclasses import dataclass
            from typing import ClassVar
            @dataclass
            class TrainingConfig:
                train_iters: int | None = None
                global_batch_size: int = 1
                registry: ClassVar[dict] = {}
        """,
        "megatron/bridge/models/__init__.py": "from megatron.bridge.models.gpt import GPTModelProvider\n",
        "megatron/bridge/models/gpt.py": """
            from dataclasses import dataclass
            @dataclass
            class GPTModelProvider:
                tensor_model_parallel_size: int = 1
        """,
        "megatron/bridge/models/mamba.py": """
            from dataclasses import dataclass
            from megatron.bridge.models.gpt import GPTModelProvider
            @dataclass
            class MambaModelProvider(GPTModelProvider):
                hybrid_override_pattern: str = ""
        """,
        "megatron/bridge/data/specs.py": """
            from dataclasses import dataclass
            @dataclass
            class PackedSequenceSpecs:
                packed_sequence_size: int = -1
                pad_seq_to_mult: int = 1
        """,
    }
    for rel, text in files.items():
        path = tmp_path / "src" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    spec = importlib.util.spec_from_file_location("mbkeys", ROOT / "scripts" / "megatron_bridge_keys.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mbkeys"] = mod
    spec.loader.exec_module(mod)
    data = mod.generate(tmp_path / "src", tmp_path / "src")
    s = data["sections"]
    assert set(s["train"]["fields"]) == {"train_iters", "global_batch_size", "extra_flag"}   # ClassVar left out
    assert set(s["model"]["fields"]) == {"tensor_model_parallel_size", "hybrid_override_pattern"}
    assert s["dataset"]["fields"]["packed_sequence_specs"]["fields"].keys() == {"packed_sequence_size", "pad_seq_to_mult"}
    assert s["dataset"]["fields"]["dataset_kwargs"]["mapping"] is True
    problems = keys.unknown_keys({"dataset": {"packed_sequence_specs": {"pad_seq_to_mul": 2}},
                                  "train": {"train_iters": 1}}, data)
    assert [p.suggestion for p in problems] == ["dataset.packed_sequence_specs.pad_seq_to_mult"]
    json.dumps(data)  # stored as JSON
    # the same tree as a git-archive file (a top folder, then src/): the key list is named by its commit
    import tarfile

    archive = tmp_path / "megatron-bridge-somebranch-abcdef1.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "src", arcname="Megatron-Bridge/src")
    packed = mod.generate(archive, archive)
    assert packed["commit"] == "abcdef1" and packed["sections"] == data["sections"]
    assert packed["sections"]["dataset"]["required"] == {}
