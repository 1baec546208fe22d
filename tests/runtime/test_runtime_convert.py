"""The convert stage's pure parts: the NemotronH config rewrite between transformers v5
(``layers_block_type``) and v4 (``hybrid_override_pattern``), checked against transformers' own
NemotronHConfig; the local convert entry; and the MoE-routing check the Megatron-Bridge entry runs on
its model provider (plain objects stand in for the provider)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from nemotron.config import catalogue
from nemotron.runtime.common.convert import ConfigFormError, config_form, convert_checkpoint_config, v4_to_v5, v5_to_v4
from nemotron.runtime.megatron.routing import RoutingError, check_routing, require_routing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _v5_config(name: str) -> dict:
    """A config.json as transformers 5.x writes it (the real producer of the v5 form)."""
    from transformers import NemotronHConfig

    d = catalogue.hf_config(catalogue.get(name))
    return NemotronHConfig(**d).to_dict()


@pytest.mark.parametrize("name", ["small", "ultra4layer", "ultra"])
def test_v5_to_v4_matches_the_catalogue_and_round_trips_through_transformers(name):
    from transformers import NemotronHConfig

    spec = catalogue.get(name)
    v5 = _v5_config(name)
    assert config_form(v5) == "v5" and "hybrid_override_pattern" not in v5
    v4 = v5_to_v4(v5)
    assert "layers_block_type" not in v4 and "mtp_layers_block_type" not in v4
    assert v4["hybrid_override_pattern"] == spec.pattern            # Megatron's symbols, one per layer
    assert v4["num_hidden_layers"] == spec.num_layers
    assert v4["mtp_hybrid_override_pattern"] == spec.mtp_pattern     # "*E"
    same = {k: v for k, v in v5.items() if k not in ("layers_block_type", "mtp_layers_block_type")}
    assert {k: v4[k] for k in same} == same                          # every other field untouched
    assert v5 == _v5_config(name)                                    # the input is not modified
    # transformers reads the v4 form back into the same layers
    assert NemotronHConfig(**v4).layers_block_type == v5["layers_block_type"]
    assert v4_to_v5(v4) == dict(v5.items())


def test_legacy_v5_names_and_errors():
    cfg = {"model_type": "nemotron_h", "layers_block_type": ["mamba", "moe", "attention", "mlp"]}
    assert v5_to_v4(cfg)["hybrid_override_pattern"] == "ME*-"
    with pytest.raises(ConfigFormError, match=r"unknown block type.*gru"):
        v5_to_v4({"model_type": "nemotron_h", "layers_block_type": ["mamba", "gru"]})
    with pytest.raises(ConfigFormError, match="disagrees"):
        v5_to_v4({"model_type": "nemotron_h", "layers_block_type": ["mamba"], "hybrid_override_pattern": "E"})
    with pytest.raises(ConfigFormError, match="num_hidden_layers=3"):
        v5_to_v4({"model_type": "nemotron_h", "layers_block_type": ["mamba"], "num_hidden_layers": 3})
    with pytest.raises(ConfigFormError, match="not a NemotronH config"):
        v5_to_v4({"model_type": "llama", "layers_block_type": ["mamba"]})
    with pytest.raises(ConfigFormError, match="neither"):
        v5_to_v4({"model_type": "nemotron_h"})
    both = {"model_type": "nemotron_h", "layers_block_type": ["mamba", "moe"], "hybrid_override_pattern": "ME"}
    assert v5_to_v4(both) == {"model_type": "nemotron_h", "hybrid_override_pattern": "ME", "num_hidden_layers": 2}


def _safetensors(tensor_bytes: bytes) -> bytes:
    """A whole safetensors file of one U8 tensor holding ``tensor_bytes`` (the format: an 8-byte little-endian
    header length, the JSON header, the data)."""
    import struct

    header = json.dumps({"w": {"dtype": "U8", "shape": [len(tensor_bytes)],
                               "data_offsets": [0, len(tensor_bytes)]}}).encode()
    return struct.pack("<Q", len(header)) + header + tensor_bytes


def test_local_convert_entry_rewrites_config_and_copies_weights(tmp_path):
    src = tmp_path / "sft"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(_v5_config("small")))
    weights = _safetensors(b"weights")  # the local convert checks what `model import` checks: a readable header,
    (src / "model.safetensors").write_bytes(weights)
    (src / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}))  # a tokenizer that fits
    train_yaml = tmp_path / "train.yaml"
    out = tmp_path / "hf"
    train_yaml.write_text(json.dumps({"backend": "local", "convert": {
        "direction": "hf_v5_to_v4", "source": str(src), "output_dir": str(out)}}))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "stages/ultra3/convert/run.py"), "--config",
                           str(train_yaml)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads((out / "config.json").read_text())
    assert got["hybrid_override_pattern"] == "MEM*EMEM*E" and "layers_block_type" not in got
    assert (out / "model.safetensors").read_bytes() == weights
    # a copy, not a link: rewriting the source in place later does not change the converted checkpoint
    assert os.stat(out / "model.safetensors").st_ino != os.stat(src / "model.safetensors").st_ino
    # a second run replaces the output in place
    convert_checkpoint_config(src, out)
    train_yaml.write_text(json.dumps({"backend": "local", "convert": {"direction": "megatron_to_hf",
                                                                       "source": str(src), "output_dir": str(out)}}))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "stages/ultra3/convert/run.py"), "--config",
                           str(train_yaml)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "only rewrites HF configs" in proc.stderr  # a config problem (the dry run says it too)


# ------------------------------------------------------------------------------------ routing check
def _provider(**changes):
    """What Megatron-Bridge's NemotronH bridge should build for Ultra (TransformerConfig field names)."""
    fields = dict(moe_router_topk_scaling_factor=5.0, moe_router_topk=22, num_moe_experts=512,
                  moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True, moe_latent_size=2048,
                  moe_ffn_hidden_size=5120, moe_router_num_groups=1, moe_router_group_topk=1)
    fields.update(changes)
    return SimpleNamespace(**{k: v for k, v in fields.items() if v is not ...})


def test_routing_intact_passes():
    ultra = catalogue.get("ultra")
    assert check_routing(_provider(), ultra) == []
    # None groups = no group-limited routing = one group: same thing
    assert check_routing(_provider(moe_router_num_groups=None, moe_router_group_topk=None), ultra) == []
    assert check_routing(_provider(), catalogue.get("ultra4layer")) == []
    require_routing(_provider(), ultra)


@pytest.mark.parametrize("change,needle", [
    ({"moe_router_topk_scaling_factor": None}, "moe_router_topk_scaling_factor=None (Megatron-Core then uses 1.0); expected 5.0"),
    ({"moe_router_topk_scaling_factor": 2.5}, "moe_router_topk_scaling_factor=2.5; expected 5.0"),
    ({"moe_router_topk": 8}, "moe_router_topk=8; expected 22"),
    ({"moe_router_score_function": "softmax"}, "moe_router_score_function='softmax'; expected 'sigmoid'"),
    ({"moe_router_enable_expert_bias": False}, "moe_router_enable_expert_bias=False; expected True"),
    ({"moe_router_enable_expert_bias": None}, "moe_router_enable_expert_bias=None (Megatron-Core then uses False)"),
    ({"moe_latent_size": None}, "moe_latent_size=None; expected 2048"),
    ({"moe_router_num_groups": 8}, "moe_router_num_groups=8; expected 1"),
    ({"moe_router_topk_scaling_factor": ...}, "moe_router_topk_scaling_factor is missing from the provider"),
])
def test_routing_drift_is_named(change, needle):
    problems = check_routing(_provider(**change), catalogue.get("ultra"))
    assert len(problems) == 1 and needle in problems[0], problems


def test_require_routing_lists_every_field():
    with pytest.raises(RoutingError) as err:
        require_routing(_provider(moe_router_topk_scaling_factor=None, moe_router_topk=6), catalogue.get("ultra"))
    text = str(err.value)
    assert "2 field(s)" in text and "moe_router_topk_scaling_factor" in text and "moe_router_topk=6" in text
    # the small local model has its own scaling (2.5): the check follows the catalogue entry
    small = catalogue.get("small")
    assert check_routing(_provider(moe_router_topk_scaling_factor=2.5, moe_router_topk=4, num_moe_experts=16,
                                   moe_latent_size=128, moe_ffn_hidden_size=256), small) == []
