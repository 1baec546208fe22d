"""The model catalogue: Ultra's published facts, slices, the small model, and parameter arithmetic."""

from __future__ import annotations

import importlib.util

import pytest

from nemotron.config import catalogue
from nemotron.config.catalogue import ATTENTION, MAMBA, MOE


def test_ultra_matches_table_1():
    u = catalogue.get("ultra")
    assert u.num_layers == 108
    assert u.counts() == {MAMBA: 48, MOE: 48, ATTENTION: 12, "-": 0}  # report Table 1
    assert (u.hidden_size, u.num_attention_heads, u.num_query_groups, u.head_dim) == (8192, 64, 2, 128)
    assert (u.mamba_num_heads, u.mamba_head_dim, u.mamba_state_dim, u.mamba_num_groups) == (256, 64, 128, 8)
    assert (u.num_experts, u.moe_topk, u.moe_ffn_hidden_size) == (512, 22, 5120)
    assert (u.moe_shared_expert_intermediate_size, u.moe_latent_size) == (10240, 2048)
    assert u.moe_router_score_function == "sigmoid" and u.moe_router_enable_expert_bias
    assert u.moe_routed_scaling_factor == 5.0
    assert u.vocab_size == 131072 and not u.tie_embeddings
    assert u.mtp_pattern == "*E" and u.mtp_depths == 2 and u.mtp_shared_weights
    assert u.source and "Table 1" in u.source


def test_ultra_pattern_is_figure_2():
    """Figure 2: (ME)x3, then 4 x [M*E (ME)x2 M*E (ME)x3 M*E (ME)x3], then ME; miles: layers 0,1,7,8 = M,E,*,E."""
    p = catalogue.get("ultra").pattern
    assert p.startswith("MEMEME") and p.endswith("ME")
    block = "M*EMEMEM*EMEMEMEM*EMEMEME"
    assert p == "MEMEME" + block * 4 + "ME"
    assert [p[i] for i in (0, 1, 7, 8)] == ["M", "E", "*", "E"]
    assert "MM" not in p and "EE" not in p  # Mamba and MoE alternate; attention sits between them


def test_parameter_count_matches_550b_55b():
    pc = catalogue.param_count(catalogue.get("ultra"))
    assert 545e9 < pc["total"] - pc["mtp"] < 555e9  # "550B total"
    assert 555e9 < pc["total"] < 565e9  # "~560B" with the MTP block (Nemotron quantization guide)
    assert 54e9 < pc["active"] < 57e9  # "55B active"
    assert 1.0e12 < 2 * (pc["total"] - pc["mtp"]) < 1.2e12  # "about 1.1 TB in BF16"


def test_published_4layer_slice():
    s = catalogue.get("ultra4layer")
    assert s.slice_layers == (0, 1, 7, 8) and s.pattern == "ME*E"  # miles prune_nemotron_h.py selection
    assert s.is_slice and s.slice_of == "ultra"
    assert s.num_experts == 512 and s.moe_topk == 22 and s.moe_latent_size == 2048  # unchanged
    assert s.mtp_pattern == "*E"
    assert "miles" in s.source


@pytest.mark.parametrize("n", [3, 5, 6, 12, 50])
def test_slices_keep_every_block_type(n):
    s = catalogue.get(f"ultra{n}layer")
    assert s.num_layers == n
    assert all(s.counts()[k] >= 1 for k in (MAMBA, MOE, ATTENTION))
    assert list(s.slice_layers) == sorted(set(s.slice_layers))
    assert s.pattern == "".join(catalogue.ULTRA.pattern[i] for i in s.slice_layers)


@pytest.mark.parametrize("name,fragment", [
    ("ultra2layer", "cannot keep every block type"),
    ("ultra108layer", "must have fewer"),
    ("ultar", "did you mean 'ultra'"),
    ("nano", "unknown model"),
])
def test_bad_names(name, fragment):
    with pytest.raises(catalogue.CatalogueError) as exc:
        catalogue.get(name)
    assert fragment in str(exc.value)


def test_slice_size():
    assert catalogue.slice_size("ultra4layer") == 4
    assert catalogue.slice_size("ULTRA16layer") == 16
    assert catalogue.slice_size("ultra") is None and catalogue.slice_size("small") is None


def test_small_keeps_every_block_type():
    s = catalogue.get("small")
    c = s.counts()
    assert c[MAMBA] and c[MOE] and c[ATTENTION]
    assert s.moe_latent_size and s.moe_shared_expert_intermediate_size and s.mtp_depths >= 1
    assert s.moe_router_score_function == "sigmoid"
    assert s.num_attention_heads % s.num_query_groups == 0
    assert s.mamba_num_heads % s.mamba_num_groups == 0
    assert s.vocab_size == 131072  # the offline tiny data-prep vocabulary


def test_hf_config_shape():
    cfg = catalogue.hf_config(catalogue.get("ultra"))
    assert cfg["model_type"] == "nemotron_h"
    assert cfg["hybrid_override_pattern"] == catalogue.ULTRA.pattern
    assert cfg["num_hidden_layers"] == 108 and cfg["n_groups"] == 8 and cfg["routed_scaling_factor"] == 5.0
    assert cfg["mtp_hybrid_override_pattern"] == "*E"


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
                    reason="transformers/torch not installed (pip install -e .[local])")
def test_small_builds_with_transformers_and_counts_agree():
    """Our parameter arithmetic agrees with a real Hugging Face NemotronH built from the catalogue."""
    import transformers

    if not hasattr(transformers, "NemotronHConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no NemotronH")
    spec = catalogue.get("small")
    config = transformers.NemotronHConfig(**catalogue.hf_config(spec))
    model = transformers.NemotronHForCausalLM(config)
    real = sum(p.numel() for p in model.parameters())
    ours = catalogue.param_count(spec, include_mtp=False)["total"]  # transformers builds no MTP block
    # transformers keeps the routers' expert bias as a buffer, not a parameter: E per MoE layer
    assert ours - real == spec.num_experts * spec.counts()[MOE]


def test_layer_params_split():
    lp = catalogue.layer_params(catalogue.get("ultra"))
    assert lp[MOE]["expert"] == 512 * 2 * 2048 * 5120
    assert lp[MOE]["rep"] > 2 * 8192 * 2048  # latent projections are replicated (mcore 'duplicated')
    assert lp[MAMBA]["expert"] == 0 and lp[ATTENTION]["expert"] == 0
    assert catalogue.padded_vocab(catalogue.get("ultra"), tp=8) % (128 * 8) == 0


@pytest.mark.parametrize("name, canonical", [
    ("NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16-4layer", "ultra4layer"),  # the miles recipe's --model-name
    ("Nemotron-3-Ultra-550B-A55B-BF16-4layer", "ultra4layer"),         # its model table
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", "ultra"),
])
def test_a_hugging_face_model_name_is_refused_naming_the_catalogue_name(name, canonical):
    with pytest.raises(catalogue.CatalogueError, match=f"the Hugging Face name of {canonical}: write {canonical}"):
        catalogue.get(name)
