"""The self-check of a megatron_to_hf export (nemotron.runtime.megatron.export_check): the config-shape check on real
catalogue configs and run_config.yaml files, the logits comparison on real tiny transformers NemotronH models
saved and reloaded through ``AutoModelForCausalLM.from_pretrained``, the selfcheck.json record, and the failure
paths. The Megatron forward itself (:func:`megatron_logits`) needs CUDA and Megatron-Core: where a test needs
its logits, the in-memory transformers model stands in for it (said at each place)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from nemotron.config import catalogue
from nemotron.runtime.common.convert import v4_to_v5
from nemotron.runtime.megatron import export_check as ec


def _tiny_config(**extra) -> dict:
    """The catalogue's `small` HF config shrunk to a few-second CPU model (same block types and MoE features)."""
    cfg = catalogue.hf_config(catalogue.get("small"))
    cfg.update(vocab_size=512, hidden_size=64, num_attention_heads=4, head_dim=16, mamba_num_heads=4,
               mamba_head_dim=16, ssm_state_size=16, n_routed_experts=4, num_experts_per_tok=2,
               moe_intermediate_size=32, intermediate_size=32, moe_shared_expert_intermediate_size=32,
               moe_latent_size=32, num_hidden_layers=4, hybrid_override_pattern="ME*E", **extra)
    return cfg


def _tiny_model(seed: int):
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**_tiny_config()))
    return model.to(torch.bfloat16).eval()


def _tokenizer(folder, vocab: int = 300):
    """A real byte-level BPE tokenizer of ``vocab`` entries, trained on WikiText-2 text (../shared/data) with the
    tokenizers library and saved as transformers saves one (tokenizer.json + tokenizer_config.json): small enough
    for the 512-entry vocabulary of :func:`_tiny_config`."""
    from pathlib import Path

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    data = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pretrain" / "wikitext2-valid.jsonl"
    if not data.is_file():
        pytest.skip(f"{data} is absent (the shared real data)")
    texts = [json.loads(line)["text"] for line in data.open(encoding="utf-8")][:20]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(str(folder))
    return folder


def _checkpoint(tmp_path, pattern: str, num_layers: int, iteration: int = 20):
    """A Megatron checkpoint folder's bookkeeping as Megatron-Bridge saves it: latest_checkpointed_iteration.txt
    and iter_NNNNNNN/run_config.yaml (model.num_layers, model.hybrid_layer_pattern with the MTP block after '/')."""
    root = tmp_path / "ckpt"
    (root / f"iter_{iteration:07d}").mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    (root / f"iter_{iteration:07d}" / "run_config.yaml").write_text(yaml.safe_dump(
        {"model": {"num_layers": num_layers, "hybrid_layer_pattern": pattern, "hidden_size": 256}}))
    return root


# ------------------------------------------------------------------------------------------------ batch, compare
def test_fixed_batch_is_fixed_and_within_the_vocabulary():
    a, b = ec.fixed_batch(512), ec.fixed_batch(512)
    assert a.shape == (2, 64) and a.dtype == torch.long
    assert torch.equal(a, b) and 0 <= int(a.min()) and int(a.max()) < 512
    assert not torch.equal(a, ec.fixed_batch(512, seed=1))
    with pytest.raises(ec.SelfCheckError, match="vocab_size=0"):
        ec.fixed_batch(0)


def test_compare_logits_passes_bf16_rounding_and_cuts_megatron_vocab_padding():
    torch.manual_seed(0)
    hf = torch.randn(2, 64, 100) * 4
    padded = torch.cat([hf, torch.full((2, 64, 28), 99.0)], dim=-1)  # Megatron pads the vocabulary
    got = ec.compare_logits(padded.to(torch.bfloat16), hf)
    assert got["passed"] and got["vocab_compared"] == 100 and got["positions"] == 128
    assert got["cosine"] > 0.999 and got["top1_agreement"] > 0.95
    assert 0 < got["max_abs_diff"] < 0.1                                  # bf16 rounding of |x| <= ~16
    assert got["cosine_min"] == 0.98 and got["top1_min"] == 0.80


def test_compare_logits_fails_on_unrelated_logits_nan_and_shape():
    torch.manual_seed(0)
    a, b = torch.randn(2, 64, 100), torch.randn(2, 64, 100)
    got = ec.compare_logits(a, b)
    assert not got["passed"] and got["cosine"] < 0.5 and got["top1_agreement"] < 0.2
    nan = a.clone()
    nan[0, 0, 0] = float("nan")
    assert not ec.compare_logits(nan, a)["passed"]
    # a small systematic error that keeps the cosine high but moves argmax: the top-1 gate catches it
    shifted = a + torch.randn(2, 64, 100) * 0.4
    got = ec.compare_logits(a, shifted, cosine_min=0.9)
    assert got["cosine"] >= 0.9 and not got["passed"] and got["top1_agreement"] < 0.8
    with pytest.raises(ec.SelfCheckError, match=r"Megatron \(2, 64, 50\), HF \(2, 64, 100\)"):
        ec.compare_logits(a[..., :50], b)
    with pytest.raises(ec.SelfCheckError, match="shapes differ"):
        ec.compare_logits(a[:, :10], b)


def test_an_export_reloads_and_matches_its_model_and_not_another(tmp_path):
    model = _tiny_model(0)
    model.save_pretrained(tmp_path / "hf")
    ids = ec.fixed_batch(512)
    with torch.no_grad():
        same = model(input_ids=ids).logits
        other = _tiny_model(1)(input_ids=ids).logits
    reloaded = ec.hf_logits(tmp_path / "hf", ids, device="cpu")
    assert reloaded.shape == (2, 64, 512)
    # an export whose weights the model does not take: named in the load info, and the logits disagree
    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / "hf" / "model.safetensors")
    lm = next(k for k in weights if k.startswith("lm_head"))
    weights["renamed." + lm] = weights.pop(lm)
    save_file(weights, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    info: dict = {}
    broken = ec.hf_logits(tmp_path / "hf", ids, device="cpu", info=info)
    assert info["missing_keys"] == 1 and info["missing_keys_first"] == [lm]
    assert info["unexpected_keys_first"] == ["renamed." + lm]
    assert not ec.compare_logits(same, broken)["passed"]
    assert ec.compare_logits(same, reloaded)["passed"]
    bad = ec.compare_logits(other, reloaded)
    assert not bad["passed"] and bad["top1_agreement"] < 0.5


def test_a_reload_that_fails_is_named(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(_tiny_config()))  # no weights
    with pytest.raises(ec.SelfCheckError, match=r"does not reload in transformers: \w+"):
        ec.hf_logits(tmp_path / "hf", ec.fixed_batch(512), device="cpu")


# -------------------------------------------------------------------------------------------------- config shape
def test_saved_model_shape_reads_the_latest_iteration(tmp_path):
    root = _checkpoint(tmp_path, "MEM|*EMEM*E/*E", 10, iteration=20)
    (root / "iter_0000010").mkdir()
    (root / "iter_0000010" / "run_config.yaml").write_text(yaml.safe_dump({"model": {"num_layers": 3}}))
    got = ec.saved_model_shape(root)
    assert got["num_layers"] == 10 and got["pattern"] == "MEM*EMEM*E" and got["run_config"].endswith(
        "iter_0000020/run_config.yaml")
    assert ec.saved_model_shape(tmp_path / "nothing") == {"num_layers": None, "pattern": None, "run_config": None}


@pytest.mark.parametrize("form", ["v4", "v5"])
def test_the_slice_config_passes_and_the_full_ultra_config_fails(tmp_path, form):
    small, ultra = (catalogue.hf_config(catalogue.get(n)) for n in ("small", "ultra"))
    if form == "v5":
        small, ultra = v4_to_v5(small), v4_to_v5(ultra)
    spec = catalogue.get("small")
    ckpt = ec.saved_model_shape(_checkpoint(tmp_path, spec.pattern + "/" + spec.mtp_pattern, spec.num_layers))
    ok = ec.check_config(small, ckpt, catalogue.hf_config(spec))
    assert ok["passed"] and ok["exported"] == {"num_layers": 10, "pattern": "MEM*EMEM*E"}, ok
    bad = ec.check_config(ultra, ckpt, catalogue.hf_config(spec))  # defect 2: Ultra's config over a slice
    assert not bad["passed"] and bad["exported"]["num_layers"] == 108
    assert "num_layers: exported 108, checkpoint 10" in bad["mismatches"]
    assert any(m.startswith("pattern: exported") and "catalogue 'MEM*EMEM*E'" in m for m in bad["mismatches"])


def test_a_config_check_without_any_reference_fails():
    got = ec.check_config(catalogue.hf_config(catalogue.get("small")), {"num_layers": None, "pattern": None})
    assert not got["passed"] and "no reference shape" in got["mismatches"][0]


# ------------------------------------------------------------------------------------------------ run + record
def test_run_without_a_megatron_model_records_why_and_checks_the_config(tmp_path):
    spec = catalogue.get("small")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(catalogue.hf_config(spec)))
    _tokenizer(out)
    ckpt = _checkpoint(tmp_path, spec.pattern + "/*E", spec.num_layers)
    lines: list[str] = []
    rec = ec.run(out, ckpt, no_megatron_reason="convert.device=cpu", catalogue_config=catalogue.hf_config(spec),
                 say=lines.append)
    saved = json.loads((out / "selfcheck.json").read_text())
    assert saved == rec and rec["passed"] and rec["logits"] == {"ran": False, "reason": "convert.device=cpu"}
    assert lines == [ec.verdict(rec)] and lines[0].startswith("self-check passed: config 10 layers")
    assert "logits comparison not run: convert.device=cpu" in lines[0]
    assert rec["tokenizer"]["passed"] and rec["tokenizer"]["size"] == 300 and "tokenizer " in lines[0]
    with pytest.raises(ec.SelfCheckError, match="no reason given"):
        ec.run(out, ckpt, say=lines.append)
    # the full Ultra's config.json over the slice's checkpoint: loud, recorded, nonzero for the job
    (out / "config.json").write_text(json.dumps(catalogue.hf_config(catalogue.get("ultra"))))
    with pytest.raises(ec.SelfCheckError, match=r"SELF-CHECK FAILED: config 108 layers .*MISMATCH: num_layers: "
                                                r"exported 108, checkpoint 10"):
        ec.run(out, ckpt, no_megatron_reason="cpu", say=lines.append)
    assert json.loads((out / "selfcheck.json").read_text())["passed"] is False


def test_run_compares_logits_and_fails_loudly_with_both_numbers(tmp_path, monkeypatch):
    """The Megatron forward needs CUDA and Megatron-Core: a transformers model's forward stands in for
    megatron_logits here (the same [b, s, v] contract); everything else is the real path."""
    out = tmp_path / "hf"
    _tiny_model(0).save_pretrained(out)
    _tokenizer(out)
    ckpt = _checkpoint(tmp_path, "ME*E/*E", 4)

    def stand_in(model, ids):
        with torch.no_grad():
            return model(input_ids=ids).logits

    monkeypatch.setattr(ec, "megatron_logits", stand_in)
    rec = ec.run(out, ckpt, megatron_model=_tiny_model(0), device="cpu", say=lambda _: None)
    assert rec["passed"] and rec["logits"]["ran"] and rec["logits"]["top1_agreement"] == 1.0
    assert rec["ids_head"] == ec.fixed_batch(512)[0, :8].tolist()
    assert rec["reload"] == {"missing_keys": 0, "missing_keys_first": [], "unexpected_keys": 0,
                             "unexpected_keys_first": []}
    lines: list[str] = []
    with pytest.raises(ec.SelfCheckError) as err:
        ec.run(out, ckpt, megatron_model=_tiny_model(1), device="cpu", say=lines.append)
    saved = json.loads((out / "selfcheck.json").read_text())
    assert saved["passed"] is False and saved["logits"]["cosine"] < 0.98
    assert str(err.value) == lines[0] and lines[0].startswith("SELF-CHECK FAILED")
    assert f"cosine {saved['logits']['cosine']:.5f} (min 0.98)" in lines[0] and "(min 0.8)" in lines[0]


# ------------------------------------------------------------------------------- bench/gpu_megatron.py --stage convert
def _bench():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import gpu_megatron

    return gpu_megatron


def test_the_convert_bench_prefers_the_sft_reference_then_sig_then_pre(tmp_path):
    g = _bench()
    assert g.convert_source(tmp_path) is None
    for name in ("pre", "sig", "ref"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "latest_checkpointed_iteration.txt").write_text("10\n")
        src, what = g.convert_source(tmp_path)
        assert src == tmp_path / name, name
    assert "reference" in what
    (tmp_path / "ref" / "latest_checkpointed_iteration.txt").unlink()   # a reference run that never saved
    assert g.convert_source(tmp_path)[0] == tmp_path / "sig"


def test_the_convert_bench_runs_the_job_entry_and_reports_a_stop_before_the_self_check(tmp_path):
    """The real path on a CPU: the one-GPU convert config compiled and validated, stages/ultra3/convert/run.py
    started with it; on this machine the job's pre-start check refuses (no GPU / no Megatron-Bridge), so no
    selfcheck.json exists and the bench must say so and return 1."""
    import argparse

    g = _bench()
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    summary: dict = {}
    args = argparse.Namespace(blend=tmp_path / "blend.json", timeout=120)
    assert g.convert_main(args, out, work, summary) == 1  # work/ does not exist yet: no checkpoint
    assert "no checkpoint to convert" in summary["error"]
    (work / "ref" / "iter_0000010").mkdir(parents=True)
    (work / "ref" / "latest_checkpointed_iteration.txt").write_text("10\n")
    summary = {}
    assert g.convert_main(args, out, work, summary) == 1
    assert summary["source"] == {"folder": str(work / "ref"), "what": "SFT reference checkpoint", "iteration": "10"}
    assert summary["runs"]["convert"]["rc"] != 0
    assert summary["selfcheck"].startswith("no selfcheck.json") and "see convert.log" in summary["error"]
    assert (work / "convert.yaml").is_file() and "model.name" not in summary
    saved = json.loads((out / "summary.json").read_text())
    assert saved["stage"] == "convert" and saved["export_bytes"] == 0
    assert "| source |" in (out / "summary.md").read_text()
    cfg = yaml.safe_load((work / "convert.yaml").read_text())
    assert cfg["model"]["name"] == "small" and cfg["convert"]["source"] == str(work / "ref")
    assert cfg["convert"]["output_dir"] == str(work / "hf") and cfg["run"]["env"]["gpus_per_node"] == 1


def test_an_unreadable_checkpoint_config_fails_the_self_check_and_is_recorded(tmp_path):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(catalogue.hf_config(catalogue.get("small"))))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "run_config.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ec.SelfCheckError, match="SELF-CHECK FAILED.*error: \\w*(YAML|Scanner|Parser)\\w*Error"):
        ec.run(out, ckpt, no_megatron_reason="cpu", say=lambda _: None)
    assert json.loads((out / "selfcheck.json").read_text())["passed"] is False


def test_the_convert_bench_makes_a_pretrain_checkpoint_first_only_when_asked(tmp_path):
    """--pretrain-if-none on a machine whose WORK holds no checkpoint: the one-GPU pretrain job is compiled and
    started first (here its pre-start check refuses: no GPU), and the bench then names the missing checkpoint."""
    import argparse

    from local_runtime_support import write_pretrain_data

    g = _bench()
    blend = write_pretrain_data(tmp_path / "data")
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    summary: dict = {}
    args = argparse.Namespace(blend=blend, timeout=120, pretrain_if_none=True, pretrain_iters=10)
    assert g.convert_main(args, out, work, summary) == 1
    assert summary["runs"]["pretrain"]["rc"] != 0 and summary["runs"]["pretrain"]["saved_iteration"] is None
    assert (work / "pre.yaml").is_file() and "pass --pretrain-if-none" in summary["error"]
    assert "this node shows 0 GPU" in (out / "pretrain.log").read_text()


def _saved(tmp_path, model: dict, iters=(10, 20)):
    for i in iters:
        (tmp_path / f"iter_{i:07d}").mkdir(parents=True)
        (tmp_path / f"iter_{i:07d}" / "run_config.yaml").write_text(yaml.safe_dump({"model": dict(model, it=i),
                                                                                    "train": {"x": 1}}))
    return tmp_path


def test_the_export_reads_the_main_pattern_and_the_mtp_block_of_a_finalized_checkpoint(tmp_path):
    """The first GPU export (docs/gpu_run.md) stopped in Megatron-Bridge's NemotronH megatron_to_hf_config on the
    ``/`` of the unified pattern finalize() saves; the view from_auto_config reads splits it (the contract test
    tests/contract/test_megatron_bridge_convert.py runs upstream on it)."""
    from nemotron.runtime.megatron import megatron_bridge as mb

    src = _saved(tmp_path, {"hybrid_layer_pattern": "MEM*EMEM*E/*E/*E", "mtp_hybrid_override_pattern": "*E",
                            "mtp_num_layers": 2})
    view = mb.export_run_config(src)
    assert view["model"]["hybrid_layer_pattern"] == "MEM*EMEM*E"
    assert view["model"]["mtp_hybrid_override_pattern"] == "*E" and view["model"]["mtp_num_layers"] == 2
    assert view["model"]["it"] == 20 and view["train"] == {"x": 1}   # upstream's pick: the highest iteration
    # the MTP block comes from the pattern when the key was not saved; pipeline separators stay for upstream
    src2 = _saved(tmp_path / "b", {"hybrid_override_pattern": "ME|*E/*E/*E"}, iters=(5,))
    assert mb.export_run_config(src2)["model"] == {"hybrid_override_pattern": "ME|*E", "it": 5,
                                                   "mtp_hybrid_override_pattern": "*E"}
    # nothing to split: upstream reads the file itself
    assert mb.export_run_config(_saved(tmp_path / "c", {"hybrid_layer_pattern": "ME*E"})) is None
    assert mb.export_run_config(tmp_path / "empty") is None


def test_an_mtp_pattern_the_export_would_misread_is_refused(tmp_path):
    from nemotron.runtime.megatron import megatron_bridge as mb

    src = _saved(tmp_path, {"hybrid_layer_pattern": "ME*E/*E/-E"})
    with pytest.raises(mb.TranslateError, match="MTP blocks differ"):
        mb.export_run_config(src)
    src = _saved(tmp_path / "b", {"hybrid_layer_pattern": "ME*E/*E", "mtp_hybrid_override_pattern": "*-"})
    with pytest.raises(mb.TranslateError, match=r"run_config.yaml: model.hybrid_layer_pattern='ME\*E/\*E'"):
        mb.export_run_config(src)


def test_a_run_config_that_is_not_yaml_is_one_error_naming_the_file(tmp_path):
    from nemotron.runtime.megatron import megatron_bridge as mb

    (tmp_path / "iter_0000001").mkdir()
    (tmp_path / "iter_0000001" / "run_config.yaml").write_bytes(b"model: [unclosed\n")
    with pytest.raises(mb.TranslateError, match=r"iter_0000001/run_config.yaml: not a readable run_config.yaml"):
        mb.export_run_config(tmp_path)
    (tmp_path / "iter_0000001" / "run_config.yaml").write_text("- a list\n")
    assert mb.export_run_config(tmp_path) is None


# ------------------------------------------------------------------------------------------- the export's tokenizer
def test_an_export_without_a_tokenizer_or_with_one_larger_than_its_vocabulary_fails(tmp_path):
    """save_hf_pretrained of a config-only bridge writes no tokenizer, and NeMo RL, quantization and eval load it
    from the export folder: the self-check fails an export without one, and one whose ids overrun the embedding."""
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(_tiny_config()))
    ckpt = _checkpoint(tmp_path, "ME*E/*E", 4)
    lines: list[str] = []
    with pytest.raises(ec.SelfCheckError, match="TOKENIZER: no tokenizer loads from the export"):
        ec.run(out, ckpt, no_megatron_reason="cpu", say=lines.append)
    assert json.loads((out / "selfcheck.json").read_text())["tokenizer"]["passed"] is False
    _tokenizer(out, vocab=600)   # more tokens than the 512 embedding rows
    with pytest.raises(ec.SelfCheckError, match="TOKENIZER: the tokenizer has 600 tokens, the exported vocab_size "
                                                "is 512"):
        ec.run(out, ckpt, no_megatron_reason="cpu", say=lines.append)
    _tokenizer(out, vocab=512)
    assert ec.run(out, ckpt, no_megatron_reason="cpu", say=lines.append)["tokenizer"]["size"] == 512


def test_the_exports_tokenizer_is_the_trained_one_else_the_configs_else_a_named_error(tmp_path):
    from nemotron.runtime.megatron import megatron_bridge as mb

    trained = _tokenizer(tmp_path / "trained-tok")
    src = _saved(tmp_path / "ck", {"hybrid_layer_pattern": "ME*E"})
    rc = src / "iter_0000020" / "run_config.yaml"
    data = yaml.safe_load(rc.read_text())
    data["tokenizer"] = {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": str(trained)}
    rc.write_text(yaml.safe_dump(data))
    name, origin = mb.export_tokenizer_source(src, "nvidia/some-hub-id")
    assert name == str(trained) and origin.startswith("the tokenizer the checkpoint was trained with")
    tok, name, _ = mb.load_export_tokenizer(src, None)
    assert len(tok) == 300 and name == str(trained)
    # the trained-with folder is not on this node (another cluster's path): the config's, said why
    data["tokenizer"]["tokenizer_model"] = str(tmp_path / "gone")
    rc.write_text(yaml.safe_dump(data))
    name, origin = mb.export_tokenizer_source(src, "nvidia/some-hub-id")
    assert name == "nvidia/some-hub-id" and "is not a folder on this node" in origin
    with pytest.raises(mb.TranslateError, match=r"no tokenizer for the export: .*gone.* and "
                                                r"tokenizer.tokenizer_model is not set"):
        mb.export_tokenizer_source(src, None)
    with pytest.raises(mb.TranslateError, match=r"tokenizer.tokenizer_model='/nowhere/tok' is not a folder"):
        mb.export_tokenizer_source(src, "/nowhere/tok")
    # a folder that holds no tokenizer: the load fails early, one line naming it
    (tmp_path / "empty-tok").mkdir()
    with pytest.raises(mb.TranslateError, match=r"the export's tokenizer '.*empty-tok' .* does not load: \w+"):
        mb.load_export_tokenizer(src, str(tmp_path / "empty-tok"))


# ------------------------------------------------------------------------------ bench/gpu_megatron.py --stage quantize
def test_the_quantize_bench_compiles_the_one_gpu_job_runs_its_entry_and_reports_the_stop(tmp_path):
    """The real path on a CPU: without the convert export the bench says what to run first; with one, the one-GPU
    quantize config (backend megatron-bridge, the export layout at 1 GPU) compiles and validates, and
    stages/ultra3/quantize/run.py starts with it; on this machine the job's pre-start check refuses (no torchrun
    GPU / no Megatron-Bridge), so the bench names the exit code and returns 1."""
    import argparse
    from pathlib import Path

    g = _bench()
    calib = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pretrain" / "wikitext2-valid.jsonl"
    if not calib.is_file():
        pytest.skip(f"{calib} is absent (the shared real data)")
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    args = argparse.Namespace(blend=tmp_path / "blend.json", timeout=120, calib=calib)
    summary: dict = {}
    assert g.quantize_main(args, out, work, summary) == 1
    assert "run --stage convert first" in summary["error"]
    (work / "hf").mkdir(parents=True)
    (work / "hf" / "config.json").write_text(json.dumps(catalogue.hf_config(catalogue.get("small"))))
    summary = {}
    assert g.quantize_main(args, out, work, summary) == 1
    assert summary["runs"]["quantize"]["rc"] != 0 and "without an export" in summary["error"]
    cfg = yaml.safe_load((work / "quantize.yaml").read_text())
    assert cfg["backend"] == "megatron-bridge" and cfg["model"]["name"] == "small"
    assert cfg["quantization"]["source"] == str(work / "hf") and cfg["quantization"]["calib_dataset"] == str(calib)
    assert cfg["export"]["output_dir"] == str(work / "q-hf") and cfg["export"]["pipeline_model_parallel_size"] == 1
    from nemotron.runtime.quantization.quant_config import cluster_plan

    plan = cluster_plan(cfg, 1)   # what the job's entry computes from it under torchrun's WORLD_SIZE=1
    assert plan["calibration_layout"]["expert_model_parallel_size"] == 1 and plan["recipe"] == "ultra"
    assert "megatron.bridge is not importable here" in (out / "quantize.log").read_text()  # the dispatch refusal


def test_the_quantize_comparison_holds_out_the_texts_after_the_calibration_ones(tmp_path):
    g = _bench()
    calib = tmp_path / "c.jsonl"
    calib.write_text("\n".join(json.dumps({"text": t}) for t in ["a " * 50, "b " * 50, "c d " * 400]) + "\n")
    tok = __import__("transformers").AutoTokenizer.from_pretrained(str(_tokenizer(tmp_path / "tok")))
    ids = g.held_out_ids(calib, 2, tok, seq=64, most=3)
    assert ids.shape == (3, 65) and ids.dtype == torch.int64
    assert tok.decode(ids[0, :6]).strip().startswith("c d")   # the calibration texts (a, b) are not in it
    with pytest.raises(ValueError, match="fewer than 65 held-out tokens after the first 3 texts"):
        g.held_out_ids(calib, 3, tok, seq=64)


def test_the_pipeline_layout_comes_from_the_same_save_as_the_exports_model_config(tmp_path):
    """The PP > 1 export gives the provider the layout the checkpoint was saved with: read from the run_config.yaml the
    export's bridge reads (the newest iter_*), never an older save's."""
    from nemotron.runtime.megatron import megatron_bridge as mb

    old, new = [["embedding", "mamba"], ["moe", "loss"]], [["embedding", "mamba", "moe"], ["loss"]]
    for it, layout in ((10, old), (20, new)):
        (tmp_path / f"iter_{it:07d}").mkdir()
        (tmp_path / f"iter_{it:07d}" / "run_config.yaml").write_text(yaml.safe_dump(
            {"model": {"hybrid_layer_pattern": "ME", "pipeline_model_parallel_layout": layout}}))
    assert mb.saved_pipeline_layout(tmp_path) == new
    assert mb.export_run_config_file(tmp_path).parent.name == "iter_0000020"
    (tmp_path / "iter_0000020" / "run_config.yaml").write_text(yaml.safe_dump({"model": {"num_layers": 2}}))
    assert mb.saved_pipeline_layout(tmp_path) is None   # the newest save has none: no layout from an older one
    assert mb.saved_pipeline_layout(tmp_path / "absent") is None


def test_every_reader_of_the_export_takes_the_newest_iteration_even_beside_a_top_level_run_config(tmp_path):
    """The export converts the newest iter_*'s weights (AutoBridge.load_megatron_model); a run_config.yaml at the
    folder's top (which upstream's from_auto_config would read first) must not give the layout or the model config of
    another save."""
    from nemotron.runtime.megatron import megatron_bridge as mb

    top, new = [["embedding", "mamba"], ["moe", "loss"]], [["embedding", "mamba", "moe"], ["loss"]]
    (tmp_path / "run_config.yaml").write_text(yaml.safe_dump(
        {"model": {"hybrid_layer_pattern": "ME", "pipeline_model_parallel_layout": top}}))
    for it in (5, 30):
        (tmp_path / f"iter_{it:07d}").mkdir()
    (tmp_path / "iter_0000030" / "run_config.yaml").write_text(yaml.safe_dump(
        {"model": {"hybrid_layer_pattern": "ME", "pipeline_model_parallel_layout": new}}))
    assert mb.saved_pipeline_layout(tmp_path) == new
    assert mb.export_run_config_file(tmp_path) == tmp_path / "iter_0000030" / "run_config.yaml"
    assert mb.export_iteration(tmp_path).name == "iter_0000030"
    (tmp_path / "iter_0000030" / "run_config.yaml").unlink()   # the newest save has none: the folder's own
    assert mb.export_run_config_file(tmp_path) == tmp_path / "run_config.yaml"
    assert mb.export_iteration(tmp_path / "iter_0000005") == tmp_path / "iter_0000005"   # an iteration folder itself


def _pp_save(root, layout, saved_pp):
    (root / "iter_0000010").mkdir(parents=True)
    model = {"hybrid_layer_pattern": "MEME", "pipeline_model_parallel_layout": layout}
    if saved_pp is not None:
        model["pipeline_model_parallel_size"] = saved_pp
    (root / "iter_0000010" / "run_config.yaml").write_text(yaml.safe_dump({"model": model}))
    return root


def test_a_layout_saved_for_another_pp_is_refused_naming_both_sizes(tmp_path):
    """A PP > 1 export gets the saved layout only at the PP it was saved with: Megatron-Core reads S stages at PP p
    as VPP S / p, so a PP-4 layout at PP 2 would be another split of the layers (and at PP 3 an assertion)."""
    from nemotron.runtime.megatron import megatron_bridge as mb

    pp4 = [["embedding", "decoder"], ["decoder", "decoder"], ["decoder"], ["decoder", "mtp", "loss"]]
    src = _pp_save(tmp_path / "a", pp4, 4)
    assert mb.export_pipeline_layout(src, 4) == pp4
    assert mb.export_pipeline_layout(src, 1) is None   # one stage: no layout is given
    for pp in (2, 3, 8):
        with pytest.raises(mb.TranslateError) as exc:
            mb.export_pipeline_layout(src, pp)
        line = str(exc.value)
        assert "\n" not in line and "iter_0000010/run_config.yaml" in line
        assert "(4 stages) was saved for model.pipeline_model_parallel_size=4" in line
        assert f"this export runs at model.pipeline_model_parallel_size={pp}" in line
        assert line.endswith("valid: model.pipeline_model_parallel_size=4 (the checkpoint's own)")
    # no saved PP in the file: a PP that divides the stages is taken (as Megatron-Core would), another refused
    src = _pp_save(tmp_path / "b", pp4, None)
    assert mb.export_pipeline_layout(src, 2) == pp4
    with pytest.raises(mb.TranslateError, match=r"saved for a PP that divides its 4 stages, but this export runs at "
                                                 r"model.pipeline_model_parallel_size=3.*valid: model.pipeline_model_"
                                                 r"parallel_size=a divisor of 4"):
        mb.export_pipeline_layout(src, 3)
    # no layout saved: nothing to refuse
    (tmp_path / "c" / "iter_0000010").mkdir(parents=True)
    (tmp_path / "c" / "iter_0000010" / "run_config.yaml").write_text(yaml.safe_dump({"model": {"num_layers": 4}}))
    assert mb.export_pipeline_layout(tmp_path / "c", 2) is None


def test_compare_logits_cosine_is_exact_at_the_gpu_self_checks_size():
    """The GPU self-check (2 x 64 positions x 131,072 vocabulary) read cosine 1.00085 when the sums ran in FP32; a
    tensor against itself read 1.0011 there. In FP64 the cosine of a tensor with itself is 1 to 1e-9 and a cosine
    just under the threshold stays under it."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 64, 131072, generator=g) * 3).to(torch.bfloat16)
    assert abs(ec.compare_logits(x, x)["cosine"] - 1.0) < 1e-9
    # y = x + noise with |noise| chosen so that the true cosine is about 0.979 (< COSINE_MIN = 0.98)
    xf = x.double()
    noise = torch.randn(xf.shape, generator=g, dtype=torch.float64)
    noise *= xf.norm() / noise.norm() * 0.2085
    y = (xf + noise).to(torch.bfloat16)
    true = torch.nn.functional.cosine_similarity(x.double().reshape(1, -1), y.double().reshape(1, -1)).item()
    got = ec.compare_logits(x, y)
    assert abs(got["cosine"] - true) < 1e-9
    assert true < ec.COSINE_MIN and not got["passed"]
