"""``convert`` (megatron_to_hf) of the 4-layer slice through Megatron-Bridge's own export code (branch
nemotron_3_ultra @ 4588417), on the CPU.

The checkpoint is what ``sft -c tiny`` saves: its ``ConfigContainer`` (built by the recipe from our translation,
``tests/contract/test_megatron_bridge.py``'s ``build``) written by ``ConfigContainer.to_yaml`` as
``iter_0000010/run_config.yaml``, as Megatron-Bridge's ``save_checkpoint`` writes it. Then ``convert -c tiny`` on that
folder: our translation (:func:`nemotron.runtime.megatron.megatron_bridge.translate`) and the bridge the export saves
through (:func:`~nemotron.runtime.megatron.megatron_bridge.export_bridge`: ``AutoBridge.from_auto_config``, as
Megatron-Bridge's ``examples/conversion/convert_checkpoints.py``), with no network (``HF_HUB_OFFLINE=1``). The exported
``config.json`` is the config-only bridge's ``hf_pretrained.to_dict()`` (what ``save_hf_pretrained`` writes); it
must be the slice's: 4 layers ``ME*E``, the slice's MTP block, read back by transformers as NemotronH; and the
export's self-check (:mod:`nemotron.runtime.megatron.export_check`) reads the same shape from the saved
``run_config.yaml``, passes that config and fails the full Ultra's. Also the
layout a PP > 1 export reads from the checkpoint
(:func:`~nemotron.runtime.megatron.megatron_bridge.saved_pipeline_layout`) against Megatron-Bridge's
``load_model_config`` of the same file.

Where the proof stops: no weights are loaded or written here (no Megatron model); the weight pass itself runs on a
shrunk ``small`` in tests/contract/test_megatron_export_weights.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_megatron_bridge import BUILD, TE_ONLY, compile_shipped, inputs  # noqa: E402

SCRIPT = BUILD + r'''
import yaml
from upstream import read_payload, write_result
from nemotron.config import catalogue

p = read_payload()
bc_sft, hf_path, container = build(p["sft"])
ckpt = Path(p["ckpt"])
it = ckpt / "iter_0000010"
it.mkdir(parents=True)
# what pretrain()/finetune() run before the first save: the provider's finalize() turns the main pattern and the
# MTP block into the unified MAIN/MTP/MTP pattern that save_checkpoint writes (the TE-only check set off, as in
# test_megatron_bridge.py). Not for the PP case: it writes a 2-stage layout into this PP-1 config by hand below,
# which a finalized PP-1 provider does not keep
from megatron.bridge.training.config import runtime_config_update
if p.get("layout") is None:
    os.environ["WORLD_SIZE"] = "1"
    for key, value in p["te_only"].items():
        setattr(container.model, key, value)
    runtime_config_update(container)
container.to_yaml(str(it / "run_config.yaml"))
if p.get("layout") is not None:   # a PP > 1 checkpoint: the layout it was saved with
    rc = yaml.safe_load((it / "run_config.yaml").read_text())
    rc["model"]["pipeline_model_parallel_layout"] = p["layout"]
    (it / "run_config.yaml").write_text(yaml.safe_dump(rc))
res0 = {"saved_pattern": yaml.safe_load((it / "run_config.yaml").read_text())["model"].get("hybrid_layer_pattern")}
try:   # the export as upstream's examples/conversion/convert_checkpoints.py does it, on the file itself
    from megatron.bridge import AutoBridge
    AutoBridge.from_auto_config(str(ckpt), str(mb.hf_source(mb.translate(p["convert"], "convert"),
                                                            Path(p["work"]) / "ref-direct")))
    res0["upstream_direct"] = "ok"
except Exception as exc:
    res0["upstream_direct"] = f"{type(exc).__name__}: {exc}"[:500]
bc = mb.translate(p["convert"], "convert")
res = {**res0, "hf_model_id": bc.hf_model_id, "has_slice_config": bc.hf_config is not None}
try:
    bridge = mb.export_bridge(bc, str(ckpt), Path(p["work"]) / "ref") if hasattr(mb, "export_bridge") else None
    if bridge is None:   # the export as the runtime did it before: the recipe's HF id
        from megatron.bridge import AutoBridge
        bridge = AutoBridge.from_hf_pretrained(bc.hf_model_id)
    exported = bridge.hf_pretrained.to_dict() if hasattr(bridge.hf_pretrained, "to_dict") else \
        bridge.hf_pretrained.config.to_dict()
    res["config"] = exported
    from transformers import AutoConfig
    out = Path(p["work"]) / "exported"
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(exported))
    back = AutoConfig.from_pretrained(str(out))
    res["read_back"] = {"type": type(back).__name__, "num_hidden_layers": back.num_hidden_layers}
    # the MTP weights' mappings the weight export builds (NemotronHBridge.build_conversion_tasks takes the block depth
    # from hf_pretrained.config; a config-only bridge holds the config itself): upstream's depth, ours, and whether the
    # mapping registry then maps the first MTP parameter (the one the first GPU export stopped on)
    mbr = bridge._model_bridge
    up = getattr(getattr(bridge.hf_pretrained, "config", None), "mtp_hybrid_override_pattern", None)
    res["mtp_depth"] = {"upstream": len(up) if up else 0, "ours": mb.mtp_block_depth(bridge.hf_pretrained)}
    for who, depth in res["mtp_depth"].items():
        mbr._mtp_layers_per_block = depth
        reg = mbr.mapping_registry()
        res.setdefault("mtp_mapped", {})[who] = [reg.megatron_to_hf_lookup(n) is not None for n in (
            "mtp.layers.0.enorm.weight", "mtp.layers.0.eh_proj.weight",
            "mtp.layers.0.mtp_model_layer.layers.0.self_attention.linear_qkv.weight")]
    with mb.mtp_export_mappings():   # the patched method sets the depth the same way, then runs the parent's
        from megatron.bridge.models.nemotronh.nemotron_h_bridge import NemotronHBridge
        try:
            NemotronHBridge.build_conversion_tasks(mbr, bridge.hf_pretrained, [])
        except Exception as exc:   # no Megatron model on a CPU: the parent stops after the depth is set
            res["patched_build_stop"] = type(exc).__name__
        res["patched_depth"] = mbr._mtp_layers_per_block
    from nemotron.runtime.megatron import export_check
    shape = export_check.saved_model_shape(str(ckpt))   # the self-check's reading of the real run_config.yaml
    res["saved_shape"] = {k: shape[k] for k in ("num_layers", "pattern")}
    res["selfcheck_config"] = export_check.check_config(exported, shape, bc.hf_config)
    res["selfcheck_ultra"] = export_check.check_config(catalogue.hf_config(catalogue.get("ultra")), shape, bc.hf_config)
except Exception as exc:
    res["error"] = f"{type(exc).__name__}: {exc}"[:2000]
if hasattr(mb, "saved_pipeline_layout"):
    from megatron.bridge.training.model_load_save import load_model_config
    res["saved_layout"] = mb.saved_pipeline_layout(str(ckpt))
    mcfg, _ = load_model_config(str(it))
    res["bridge_layout"] = getattr(mcfg, "pipeline_model_parallel_layout", None)
try:   # the export's tokenizer: what Megatron-Bridge's own ConfigContainer.to_yaml saved under tokenizer
    name, origin = mb.export_tokenizer_source(str(ckpt), None)
    tok, _, _ = mb.load_export_tokenizer(str(ckpt), None)
    res["tokenizer"] = {"name": name, "origin": origin, "size": len(tok),
                        "saved": yaml.safe_load((it / "run_config.yaml").read_text())["tokenizer"]}
except Exception as exc:
    res["tokenizer"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
res["slice"] = catalogue.hf_config(catalogue.get("ultra4layer"))
res["trained_mtp_layers"] = container.model.mtp_num_layers
write_result(res)
'''


def _cases(root: Path, layout=None, one_gpu: bool = False) -> dict:
    """``one_gpu``: bench/gpu_megatron.py's one-GPU SFT (:data:`ONE_GPU_SFT`) and convert
    (:func:`convert_overrides`) configs instead of the shipped ``-c tiny`` ones."""
    from gpu_megatron import ONE_GPU_SFT, convert_overrides

    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage

    files = inputs(root)
    if one_gpu:  # the folder the saved run_config.yaml names as the tokenizer: a real one (the export takes it)
        from rl_support import tokenizer_folder

        tokenizer_folder(Path(files["ultra_hf"]))
    sft = compile_shipped("sft", "tiny", root, files, list(ONE_GPU_SFT) if one_gpu else None)
    sft["stage"], sft["work"] = "sft", str(root / "work-sft")
    ckpt = root / "sft-ckpt"
    over = (convert_overrides(ckpt, root / "hf-out") if one_gpu else
            [f"convert.source={ckpt}", f"convert.output_dir={root / 'hf-out'}"])
    conv = compile_config(get_stage("convert"), "tiny", over).config
    return {"sft": sft, "convert": conv, "ckpt": str(ckpt), "work": str(root / "work"), "layout": layout,
            "te_only": TE_ONLY}


def _pattern(cfg: dict, mtp: bool = False) -> str:
    """The hybrid pattern of an HF NemotronH config in either form (v4 ``hybrid_override_pattern``, v5
    ``layers_block_type``); ``mtp``: of its MTP block."""
    v4, v5 = ("mtp_hybrid_override_pattern", "mtp_layers_block_type") if mtp else ("hybrid_override_pattern",
                                                                                 "layers_block_type")
    if cfg.get(v4):
        return cfg[v4]
    kinds = {"mamba": "M", "attention": "*", "moe": "E", "mlp": "-"}
    return "".join(kinds[k] for k in cfg[v5])


def test_convert_of_the_slice_exports_the_slices_hf_config_offline(upstream, tmp_path):
    out = upstream.run(SCRIPT, _cases(tmp_path), timeout=900)
    assert "error" not in out, out["error"]
    cfg, want = out["config"], out["slice"]
    assert out["has_slice_config"]
    # the slice's layers (transformers v5 form: layers_block_type), not the full Ultra's 108
    assert _pattern(cfg) == _pattern(want) == "ME*E"
    assert _pattern(cfg, mtp=True) == _pattern(want, mtp=True) == "*E"
    assert cfg["num_nextn_predict_layers"] == out["trained_mtp_layers"]   # the MTP depth the checkpoint trained
    for key in ("hidden_size", "n_routed_experts", "num_experts_per_tok", "num_attention_heads", "num_key_value_heads",
                "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "moe_intermediate_size", "vocab_size"):
        assert cfg.get(key) == want[key], key
    assert out["read_back"] == {"type": "NemotronHConfig", "num_hidden_layers": 4}
    # the export's self-check (nemotron.runtime.megatron.export_check) reads the shape Megatron-Bridge saved in
    # run_config.yaml, passes the slice's exported config, and fails the full Ultra's over the slice (defect 2)
    assert out["saved_shape"] == {"num_layers": 4, "pattern": "ME*E"}
    assert out["saved_pattern"] == "ME*E/*E/*E"   # finalize()'s unified pattern, as a trained checkpoint saves it
    assert out["selfcheck_config"]["passed"], out["selfcheck_config"]
    assert not out["selfcheck_ultra"]["passed"]
    assert "num_layers: exported 108, checkpoint 4" in out["selfcheck_ultra"]["mismatches"]


def test_pp_export_reads_the_checkpoints_pipeline_layout(upstream, tmp_path):
    layout = [["embedding", "mamba", "attention"], ["moe", "moe", "loss"]]
    out = upstream.run(SCRIPT, _cases(tmp_path, layout), timeout=900)
    assert out.get("saved_layout") == layout, out.get("error")
    assert out["bridge_layout"] == layout, out.get("error")   # what Megatron-Bridge's own load_model_config reads from the file


def test_the_one_gpu_convert_of_small_exports_smalls_config(upstream, tmp_path):
    """bench/gpu_megatron.py --stage convert: the catalogue's `small` model saved by the one-GPU SFT run, exported
    with its own config (10 layers MEM*EMEM*E), which the export's self-check passes."""
    from nemotron.config import catalogue

    out = upstream.run(SCRIPT, _cases(tmp_path, one_gpu=True), timeout=900)
    assert "error" not in out, out["error"]
    spec = catalogue.get("small")
    assert out["has_slice_config"] and _pattern(out["config"]) == spec.pattern == "MEM*EMEM*E"
    assert out["saved_shape"] == {"num_layers": 10, "pattern": "MEM*EMEM*E"}
    # what the first GPU export found (docs/gpu_run.md): the checkpoint saves finalize()'s unified pattern, and
    # upstream's own export of it stops at the MTP separator; ours exports the main pattern + the MTP block
    assert out["saved_pattern"] == "MEM*EMEM*E/*E/*E"
    assert "Unknown layer type characters in hybrid_override_pattern: {'/'}" in out["upstream_direct"]
    assert _pattern(out["config"], mtp=True) == "*E" and out["config"]["num_nextn_predict_layers"] == 2
    assert out["selfcheck_config"]["passed"], out["selfcheck_config"]
    assert out["read_back"] == {"type": "NemotronHConfig", "num_hidden_layers": 10}
    # the weight export's MTP mappings: upstream's depth from a config-only bridge is 0 and leaves the MTP weights
    # unmapped (the first GPU export stopped there); ours is the block's 2 layers and maps them
    assert out["mtp_depth"] == {"upstream": 0, "ours": 2}, out["mtp_depth"]
    assert out["mtp_mapped"] == {"upstream": [False] * 3, "ours": [True] * 3}, out["mtp_mapped"]
    assert out["patched_depth"] == 2
    # save_hf_pretrained of the config-only bridge writes no tokenizer; the export takes the one the run_config.yaml
    # Megatron-Bridge saved names (the data's tokenizer folder), which loads and fits the vocabulary
    tok = out["tokenizer"]
    assert "error" not in tok, tok
    assert tok["name"] == tok["saved"]["tokenizer_model"] and tok["origin"].startswith("the tokenizer the checkpoint")
    assert 0 < tok["size"] <= out["config"]["vocab_size"]


#: Megatron-Core's own reading of a saved ``pipeline_model_parallel_layout`` at a given PP (what ``finalize()`` of the
#: export's provider builds from it).
_LAYOUT_AT_PP = r'''
from upstream import read_payload, write_result
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

p = read_payload()
out = {}
for pp in p["pps"]:
    try:
        got = PipelineParallelLayerLayout(p["layout"], pp)
        out[str(pp)] = {"vpp": got.virtual_pipeline_model_parallel_size,
                        "rank0": [[t.name for t in chunk] for chunk in got.layout[0]]}
    except AssertionError as exc:
        out[str(pp)] = {"refused": str(exc)}
write_result(out)
'''


def test_a_layout_saved_at_another_pp_is_another_split_to_megatron_core_so_the_export_refuses_it(upstream, tmp_path):
    """Why :func:`export_pipeline_layout` refuses a layout saved for another PP: Megatron-Core (c8288b6) takes a PP-4
    layout at PP 2 without a word, as VPP 2 (rank 0 then builds stages 0 and 2, not stage 0), and at PP 3 stops on
    an assertion deep in ``finalize()``; at PP 4 it is the saved split. The export refuses both before that."""
    import yaml

    from nemotron.runtime.megatron import megatron_bridge as mb

    pp4 = [["embedding", "decoder"], ["decoder", "decoder"], ["decoder"], ["decoder", "mtp", "loss"]]
    got = upstream.run(_LAYOUT_AT_PP, {"layout": pp4, "pps": [4, 2, 3]})
    assert got["4"] == {"vpp": 1, "rank0": [["embedding", "decoder"]]}
    assert got["2"] == {"vpp": 2, "rank0": [["embedding", "decoder"], ["decoder"]]}   # another split, silently
    assert "divisible by pipeline_model_parallel_size" in got["3"]["refused"]
    (tmp_path / "iter_0000010").mkdir()
    (tmp_path / "iter_0000010" / "run_config.yaml").write_text(yaml.safe_dump(
        {"model": {"pipeline_model_parallel_size": 4, "pipeline_model_parallel_layout": pp4}}))
    assert mb.export_pipeline_layout(tmp_path, 4) == pp4
    for pp in (2, 3):
        with pytest.raises(mb.TranslateError, match=f"saved for model.pipeline_model_parallel_size=4, but this export "
                                                    f"runs at model.pipeline_model_parallel_size={pp}"):
            mb.export_pipeline_layout(tmp_path, pp)
