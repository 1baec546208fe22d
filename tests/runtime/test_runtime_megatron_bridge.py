"""The Megatron-Bridge entry of pretrain, SFT and convert (src/nemotron/runtime/megatron/megatron_bridge.py): the pure
translation of our compiled configs into Megatron-Bridge's ConfigContainer values, the slice's HF config folder,
the recipe builder's arguments, and the checks the entry runs before any heavy import.

These tests run in the project venv, without Megatron-Bridge: they use the project's real config compiler, real
data files in our formats, and the stored key list of the pinned Megatron-Bridge (0.5.0 at 4588417) as the
reference for field names. The recipe builders, AutoBridge and ``ConfigContainer.validate()`` on the same
translation run in the contract tests (tests/contract/test_megatron_bridge.py, test_megatron_core.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from config_support import compile_stage
from local_runtime_support import ROOT, pack, write_packed_parquet, write_pretrain_data
from nemotron.config import keys
from nemotron.runtime.megatron import megatron_bridge as mb
from nemotron.runtime.megatron.pretrain_data import read_blend
from nemotron.runtime.megatron.tracking import wandb_run_id

PINNED = {"megatron_bridge": "0.5.0", "megatron_core": "0.18.0"}
KEYLIST = "0.5.0-4588417"  # the key list of that pin (package 0.5.0, branch nemotron_3_ultra at 4588417)


def _sections_as_config(bc: mb.BridgeConfig) -> dict:
    """The translated values as one ConfigContainer-shaped dict (for the key-list cross-check)."""
    out = {name: dict(values) for name, values in bc.sections.items()}
    ds = dict(bc.dataset)
    specs = ds.pop("packed_sequence_specs", None)
    ds.pop("dataset_kwargs", None)  # a mapping field: any sub-key is allowed
    out["dataset"] = ds
    if specs:
        out["dataset"]["packed_sequence_specs"] = specs
    out["mixed_precision"] = dict(bc.mixed_precision_overrides)
    return out


def test_pretrain_default_translates_to_megatron_bridge_fields(tmp_path):
    blend_path = write_pretrain_data(tmp_path / "data", weights=(1.0, 3.0))
    cfg = compile_stage("pretrain", "default", data__per_split_data_args_path=str(blend_path),
                        checkpoint__save=str(tmp_path / "ckpt"))
    bc = mb.translate(cfg, "pretrain", blend=read_blend(blend_path))
    assert bc.recipe == "nemotron_3_ultra_pretrain_config" and bc.hf_model_id.startswith("nvidia/")
    model = bc.sections["model"]
    assert (model["tensor_model_parallel_size"], model["pipeline_model_parallel_size"],
            model["expert_model_parallel_size"]) == (2, 12, 32)
    assert model["mtp_num_layers"] == 2 and model["mtp_loss_scaling_factor"] == 0.1  # MTP loss scaling
    assert model["recompute_modules"] == ["moe", "layernorm", "core_attn", "moe_act"]  # recompute
    assert "name" not in model and "first_last_layers_bf16" not in model  # ours / the precision recipe's
    sched = bc.sections["scheduler"]
    assert (sched["lr_decay_style"], sched["lr_wsd_decay_style"], sched["lr_wsd_decay_iters"]) == \
        ("WSD", "minus_sqrt", 198682)  # WSD schedule
    assert bc.mixed_precision == "bf16_with_nvfp4_mixed"  # NVFP4, with the BF16 layers around it
    assert bc.mixed_precision_overrides == {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 1,
                                            "num_layers_at_end_in_bf16": 16}
    assert bc.sections["train"]["exit_signal_handler"] is True  # SIGTERM: save and stop
    assert bc.sections["checkpoint"]["load"] == bc.sections["checkpoint"]["save"] == str(tmp_path / "ckpt")
    assert bc.dataset["blend_per_split"] == [
        ([str(tmp_path / "data" / "train_0"), str(tmp_path / "data" / "train_1")], [1.0, 3.0]),
        ([str(tmp_path / "data" / "valid_0")], [1.0]),
        None,
    ]
    assert bc.dataset["split"] is None and bc.dataset["blend"] is None and bc.dataset["seq_length"] == 8192
    assert not {"backend", "recipe", "run", "data", "convert"} & set(bc.sections)
    # every value we hand over has its Megatron-Bridge name at the pin
    problems = keys.unknown_keys(_sections_as_config(bc), keys.load_keylist(KEYLIST), own=())
    assert not problems, [p.message for p in problems]
    assert bc.train_iters == 794728 and bc.env == {}  # W&B off without a project


def test_sft_default_translates_packed_parquet_with_answer_only_loss(tmp_path):
    data = tmp_path / "sft"
    train = write_packed_parquet(data / "training_294912.idx.parquet", [pack([([1, 2], [3, 4])])])
    (data / "meta.json").write_text("[]")
    specs = {"packed_train_data_path": str(train), "packed_val_data_path": str(train),
             "packed_metadata_path": str(data / "meta.json")}
    cfg = compile_stage("sft", "default", dataset__dataset_root=str(data), dataset__packed_sequence_specs=specs,
                        checkpoint__pretrained_checkpoint=str(tmp_path / "pt"), checkpoint__save=str(tmp_path / "c"),
                        logger__wandb_project="ultra3")
    bc = mb.translate(cfg, "sft", data_version=str(data))
    assert bc.dataset_kind == "finetuning"
    assert bc.dataset["dataset_kwargs"]["answer_only_loss"] is True
    ps = bc.dataset["packed_sequence_specs"]
    assert ps["packed_sequence_size"] == 294912 == bc.dataset["seq_length"]  # the matching pack size
    assert ps["pad_seq_to_mult"] == 32 and ps["packed_train_data_path"] == str(train)
    assert bc.sections["model"]["context_parallel_size"] == 8 and bc.mixed_precision == "bf16_mixed"
    assert bc.mixed_precision_overrides == {}
    assert bc.sections["checkpoint"]["pretrained_checkpoint"] == str(tmp_path / "pt")
    # W&B: the run id follows the checkpoint folder, so every job of this run logs to one W&B run
    assert bc.env["WANDB_RUN_ID"] == wandb_run_id(tmp_path / "c") and bc.env["WANDB_RESUME"] == "allow"
    assert bc.sections["logger"]["wandb_exp_name"] == "ultra3-sft (sft-data v1)"
    problems = keys.unknown_keys(_sections_as_config(bc), keys.load_keylist(KEYLIST), own=())
    assert not problems, [p.message for p in problems]

    off = dict(cfg, dataset={**cfg["dataset"], "dataset_kwargs": {"answer_only_loss": False}})
    with pytest.raises(mb.TranslateError, match="answer_only_loss=false"):
        mb.translate(off, "sft")
    wrong = json.loads(json.dumps(cfg))
    wrong["dataset"]["packed_sequence_specs"]["packed_sequence_size"] = 4096
    with pytest.raises(mb.TranslateError, match=r"packed_sequence_size=4096: must equal model\.seq_length=294912"):
        mb.translate(wrong, "sft")
    typo = json.loads(json.dumps(cfg))
    typo["dataset"]["packed_sequence_specs"]["pad_seq_to_mul"] = 32
    with pytest.raises(mb.TranslateError, match="pad_seq_to_mul: not a PackedSequenceSpecs field"):
        mb.translate(typo, "sft")


def test_precheck_names_every_problem_in_one_line_each(tmp_path):
    blend_path = write_pretrain_data(tmp_path / "data")
    cfg = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(blend_path), run__env__gpus_per_node=8)
    ok = {"importable": lambda m: True, "gpus": 8, "installed": dict(PINNED), "env": {"WORLD_SIZE": "8"}}
    assert mb.precheck(cfg, "pretrain", **ok) == []
    assert mb.precheck(cfg, "pretrain", **{**ok, "gpus": 4}) == [
        "run.env.gpus_per_node=8: this node shows 4 GPU(s) (CUDA_VISIBLE_DEVICES=unset)"]
    world = mb.precheck(cfg, "pretrain", **{**ok, "env": {"WORLD_SIZE": "16"}})
    assert world and "torchrun started 16 processes; run.env.nodes x gpus_per_node = 1 x 8 = 8" in world[0]
    newer = mb.precheck(cfg, "pretrain", **{**ok, "installed": {**PINNED, "megatron_bridge": "0.6.0"}})
    assert len(newer) == 1 and newer[0].startswith("megatron-bridge 0.6.0 is installed; the configs and the key "
                                                   "list were checked against 0.5.0")
    assert mb.precheck(cfg, "pretrain", **{**ok, "installed": {**PINNED, "megatron_core": "0.18.0rc0"}}) == []
    wandb_on = json.loads(json.dumps(cfg))
    wandb_on["logger"]["wandb_project"] = "ultra3"
    assert mb.precheck(wandb_on, "pretrain", **ok)[0].startswith("logger.wandb_project='ultra3': WANDB_API_KEY")
    assert mb.precheck(wandb_on, "pretrain", **{**ok, "env": {"WORLD_SIZE": "8", "WANDB_API_KEY": "k"}}) == []
    (tmp_path / "data" / "train_1.bin").unlink()
    missing = mb.precheck(cfg, "pretrain", **{**ok, "importable": lambda m: False})
    assert missing[-1].startswith("this stage runs inside the NeMo container")  # last: what a log's tail shows
    assert missing[-1].endswith("megatron.bridge is not importable here")
    assert any("train_1.bin does not exist" in p for p in missing)

    sft = compile_stage("sft", "tiny", dataset__packed_sequence_specs={
        "packed_train_data_path": str(blend_path), "packed_val_data_path": str(blend_path),
        "packed_metadata_path": str(blend_path)}, checkpoint__pretrained_checkpoint=str(tmp_path))
    sft["dataset"]["packed_sequence_specs"]["packed_val_data_path"] = str(tmp_path / "none.parquet")  # gone since
    sft["checkpoint"]["pretrained_checkpoint"] = str(tmp_path / "nope")
    problems = mb.precheck(sft, "sft", **{**ok, "env": {"LOCAL_WORLD_SIZE": "8"}})
    assert any("packed_train_data_path" in p and "not a Parquet file" in p for p in problems), problems
    assert any("packed_val_data_path" in p and "no such file" in p for p in problems), problems
    assert any(p.startswith("checkpoint.pretrained_checkpoint=") and "no such folder" in p for p in problems)

    hf = tmp_path / "hf"
    hf.mkdir()
    conv = compile_stage("convert", "default", convert__direction="hf_to_megatron", convert__source=str(hf),
                         convert__device="cpu")
    expected = f"convert.source={hf}: not a Hugging Face checkpoint (no config.json)"
    assert mb.precheck(conv, "convert", **{**ok, "gpus": 0}) == [expected]


def test_exit_code_follows_the_last_saved_iteration(tmp_path):
    assert mb.exit_code(tmp_path, 100) == 1  # nothing saved
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("40\n")
    assert mb.exit_code(tmp_path, 100) == 75  # saved and stopped early: the next job resumes
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100\n")
    assert mb.exit_code(tmp_path, 100) == 0


def test_convert_translation_and_in_place_v4_rewrite(tmp_path):
    cfg = compile_stage("convert", "default", convert__source=str(tmp_path / "m"), convert__output_dir=str(tmp_path / "o"))
    bc = mb.translate(cfg, "convert")
    assert bc.convert["direction"] == "megatron_to_hf" and bc.sections["model"]["pipeline_model_parallel_size"] == 6
    with pytest.raises(mb.TranslateError, match="hf_v5_to_v4 is the local backend's"):
        mb.translate(compile_stage("convert", "default", convert__direction="hf_v5_to_v4"), "convert")
    v5 = {"model_type": "nemotron_h", "layers_block_type": ["mamba", "moe", "attention", "moe"],
          "mtp_layers_block_type": ["attention", "moe"], "hidden_size": 64}
    (tmp_path / "config.json").write_text(json.dumps(v5))
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    assert mb.rewrite_config_v4(tmp_path) is True
    out = json.loads((tmp_path / "config.json").read_text())
    assert out["hybrid_override_pattern"] == "ME*E" and out["num_hidden_layers"] == 4
    assert out["mtp_hybrid_override_pattern"] == "*E" and "layers_block_type" not in out
    assert (tmp_path / "model.safetensors").read_bytes() == b"weights"
    assert mb.rewrite_config_v4(tmp_path) is False  # already v4


def test_entry_reports_precheck_problems_without_a_traceback(tmp_path):
    """The real entry script with backend megatron-bridge on this machine (no Megatron-Bridge, no GPUs): exit 1,
    the problems as one line each, no traceback."""
    (tmp_path / "blend.json").write_text("{}")
    cfg = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(tmp_path / "blend.json"))
    cfg["data"]["per_split_data_args_path"] = str(tmp_path / "missing.json")  # gone since it compiled
    path = tmp_path / "train.yaml"
    path.write_text(json.dumps(cfg))
    proc = subprocess.run([sys.executable, str(ROOT / "stages/ultra3/pretrain/run.py"), "--config", str(path)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "megatron.bridge is not importable here" in proc.stderr
    assert f"data.per_split_data_args_path={tmp_path / 'missing.json'}: no such file on this node" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("stage,name", [("pretrain", "tiny"), ("pretrain", "long_context"), ("sft", "tiny")])
def test_every_cluster_config_translates_to_known_fields(tmp_path, stage, name):
    """Each shipped Megatron-Bridge config of pretrain and SFT becomes only field names of the pinned
    Megatron-Bridge."""
    if stage == "pretrain":
        blend = write_pretrain_data(tmp_path / "data")
        cfg = compile_stage(stage, name, data__per_split_data_args_path=str(blend),
                            checkpoint__save=str(tmp_path / "ckpt"))
        bc = mb.translate(cfg, stage, blend=read_blend(blend))
    else:
        train = write_packed_parquet(tmp_path / "sft" / "training_4096.idx.parquet", [pack([([1, 2], [3, 4])])])
        cfg = compile_stage(stage, name, dataset__packed_sequence_specs={
            "packed_train_data_path": str(train), "packed_val_data_path": str(train),
            "packed_metadata_path": str(train)}, checkpoint__pretrained_checkpoint=str(tmp_path),
            checkpoint__save=str(tmp_path / "ckpt"))
        bc = mb.translate(cfg, stage)
    problems = keys.unknown_keys(_sections_as_config(bc), keys.load_keylist(KEYLIST), own=())
    assert not problems, [p.message for p in problems]
    assert bc.sections["train"]["exit_signal_handler"] is True


def test_a_slice_carries_its_hf_config_from_the_catalogue(tmp_path):
    """``model.name: ultra4layer``: the translation carries the slice's HF config.json (4 layers ``ME*E``, the
    ``*E`` MTP block), the job writes it to a folder that becomes the recipe's ``hf_path``; MTP depth and shared
    weights are the ones the memory estimate counts. The full model has none: the recipe reads hf_model_id."""
    from nemotron.config import catalogue

    blend = write_pretrain_data(tmp_path / "data")
    cfg = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(blend), checkpoint__save=str(tmp_path / "c"))
    bc = mb.translate(cfg, "pretrain", blend=read_blend(blend))
    assert bc.hf_config == catalogue.hf_config(catalogue.get("ultra4layer"))
    assert (bc.hf_config["num_hidden_layers"], bc.hf_config["hybrid_override_pattern"],
            bc.hf_config["mtp_hybrid_override_pattern"]) == (4, "ME*E", "*E")
    assert bc.sections["model"]["mtp_num_layers"] == 2 and bc.sections["model"]["mtp_use_repeated_layer"] is True
    folder = mb.hf_source(bc, tmp_path / "slice")
    assert folder == str(tmp_path / "slice")
    assert json.loads((tmp_path / "slice" / "config.json").read_text()) == bc.hf_config
    assert mb.hf_source(bc) != folder  # default: a new folder of this process
    # unset MTP depth: the catalogue's (what the estimate assumes without the key)
    no_depth = json.loads(json.dumps(cfg))
    no_depth["model"].pop("mtp_num_layers")
    assert mb.translate(no_depth, "pretrain", blend=read_blend(blend)).sections["model"]["mtp_num_layers"] == 2
    full = mb.translate(compile_stage("pretrain", "default", data__per_split_data_args_path=str(blend),
                                      recipe__hf_model_id=str(tmp_path / "ultra-snapshot"),
                                      checkpoint__save=str(tmp_path / "d")), "pretrain", blend=read_blend(blend))
    assert full.hf_config is None and mb.hf_source(full) == str(tmp_path / "ultra-snapshot")  # a local folder
    assert full.seq_length == 8192 and full.trust_remote_code is False


def test_recipe_arguments_follow_the_builder_signature(tmp_path):
    """hf_path is required (else recipe.hf_model_id and a slice would not reach the provider); seq_length when the
    builder takes it; trust_remote_code only when true, and only for a builder that takes it."""
    blend = write_pretrain_data(tmp_path / "data")
    cfg = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(blend), checkpoint__save=str(tmp_path / "c"))
    bc = mb.translate(cfg, "pretrain", blend=read_blend(blend))
    assert mb.recipe_kwargs(bc, ["hf_path", "seq_length"], "/x") == {"hf_path": "/x", "seq_length": 4096}
    with pytest.raises(mb.TranslateError, match="takes no hf_path"):
        mb.recipe_kwargs(bc, [], "/x")
    trusting = mb.translate(dict(cfg, recipe={**cfg["recipe"], "trust_remote_code": True}), "pretrain",
                            blend=read_blend(blend))
    with pytest.raises(mb.TranslateError, match="takes no trust_remote_code"):
        mb.recipe_kwargs(trusting, ["hf_path", "seq_length"], "/x")
    assert mb.recipe_kwargs(trusting, ["hf_path", "trust_remote_code"], "/x") == {"hf_path": "/x",
                                                                                 "trust_remote_code": True}
    with pytest.raises(mb.TranslateError, match="recipe.trust_remote_code='yes'"):
        mb.translate(dict(cfg, recipe={**cfg["recipe"], "trust_remote_code": "yes"}), "pretrain", blend={})


def test_framework_mismatch_is_refused_unless_waived_and_then_said(tmp_path, capsys):
    """Other Megatron-Bridge / Megatron-Core versions than the [nemo] pins are refused; with
    NEMOTRON_SKIP_FRAMEWORK_CHECK=1 (the one-GPU bench outside the image) they are printed as warnings and every other
    check stays (here: the GPU count)."""
    from config_support import compile_stage
    from nemotron.runtime.common import prestart
    from nemotron.runtime.megatron import megatron_bridge as mb

    blend = write_pretrain_data(tmp_path / "data", docs=20, valid_docs=5)
    cfg = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(blend),
                        run__env__gpus_per_node=8, checkpoint__save=str(tmp_path / "ckpt"))
    installed = {**prestart.pinned_versions("nemo", tuple(mb.FRAMEWORKS)), "megatron_core": "0.16.1"}
    base = {"importable": lambda m: True, "gpus": 4, "installed": installed}
    refused = mb.precheck(cfg, "pretrain", **base, env={"WORLD_SIZE": "8"})
    assert any("0.16.1" in p for p in refused)
    waived = mb.precheck(cfg, "pretrain", **base, env={"WORLD_SIZE": "8", mb.SKIP_FRAMEWORK_CHECK: "1"})
    assert not any("0.16.1" in p for p in waived)
    assert any("this node shows 4 GPU(s)" in p for p in waived)  # the other checks stay
    assert "warning (NEMOTRON_SKIP_FRAMEWORK_CHECK=1)" in capsys.readouterr().out
