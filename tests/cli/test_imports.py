"""`model import` / `data import`: real-shaped folders built in tmp_path (a real HF NemotronH saved with transformers
from the catalogue's ``small`` config with a real 131,072-id tokenizer; a torch distributed checkpoint in Megatron's
layout; packed Parquet, blend.json + .bin/.idx and RL JSONL written the way the data prep writes them) are checked,
recorded, and resolved by the consuming stage's dry run; every bad folder is one line naming the file, exit 2, and
no record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nemotron.config import artifacts
from test_cli import _isolated_home, run_cli  # noqa: F401 - the autouse fixture isolates NEMOTRON_HOME, cwd here


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory) -> Path:
    from rl_support import checkpoint, tokenizer_folder

    root = tmp_path_factory.mktemp("hf")
    return checkpoint(root / "model", tokenizer_folder(root / "tok"), seed=1)


def megatron_checkpoint(folder: Path, step: int = 20) -> Path:
    """Megatron's layout: the tracker file and ``iter_NNNNNNN/`` saved by torch.distributed.checkpoint
    (``.metadata``, ``__0_0.distcp``) with Megatron's ``metadata.json``."""
    import torch
    import torch.distributed.checkpoint as dcp

    it = folder / f"iter_{step:07d}"
    dcp.save({"decoder.weight": torch.randn(8, 4)}, checkpoint_id=str(it), no_dist=True)
    (it / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                                                   "common_backend": "torch", "common_backend_version": 1}))
    (folder / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    return folder


def sft_data(folder: Path, pack: int = 64) -> Path:
    from local_runtime_support import write_sft_data

    write_sft_data(folder / "data", pack)
    (folder / "data" / f"{pack}_metadata.jsonl").write_text(json.dumps({"max_samples_per_bin": 8}) + "\n")
    (folder / "manifest.json").write_text(json.dumps({"complete": True}))
    return folder


def records(name: str) -> list[Path]:
    return sorted((artifacts.store() / name).glob("v*.json"))


def test_hf_import_is_recorded_for_this_machine_and_resolved(capsys, hf_model):
    code, out, err = run_cli(capsys, "ultra3", "model", "import", str(hf_model))
    assert code == 0, err
    assert f"artifact hf-checkpoint v1: {hf_model}" in out
    rec = artifacts.lookup("hf-checkpoint", config="default")
    assert rec["path"] == str(hf_model) and rec["form"] == "hf" and rec["vocab_size"] == 131072
    scope = artifacts.Scope.of(None, None, {})  # a stage run on this machine, from another working folder
    assert scope.why_not(rec) is None
    with artifacts.scoped(scope):
        assert artifacts.lookup("hf-checkpoint", config="default")["version"] == 1


def _fails(capsys, *args: str, match: str) -> None:
    code, out, err = run_cli(capsys, "ultra3", *args)
    assert code == 2, (out, err)
    first = err.splitlines()[0]
    assert first.startswith("error: ") and match in first, err
    assert "nothing was recorded" in err
    assert not any(artifacts.store().glob("*/v*.json")), "a bad folder was recorded"


def test_hf_import_refuses_a_missing_shard_a_truncated_one_and_a_too_large_tokenizer(capsys, hf_model, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(hf_model, bad)
    (bad / "model.safetensors").rename(bad / "model-00001-of-00002.safetensors")
    (bad / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    _fails(capsys, "model", "import", str(bad), match=f"{bad / 'model-00002-of-00002.safetensors'}: shard named")
    (bad / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors"}}))
    shard = bad / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    _fails(capsys, "model", "import", str(bad), match=f"{shard}: ")
    shutil.copy2(hf_model / "model.safetensors", shard)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "vocab_size": 1000}))
    _fails(capsys, "model", "import", str(bad), match="131,072 token ids, more than config.json's vocab_size=1,000")
    (bad / "config.json").write_text(json.dumps(cfg))
    (bad / "tokenizer.json").unlink()
    _fails(capsys, "model", "import", str(bad), match="no tokenizer")


def test_hf_import_says_what_a_weights_entry_is_when_it_is_no_file(capsys, hf_model, tmp_path):
    """model.safetensors that loops (a link to itself), a broken link, a directory; a shard the index names that is
    a directory: one line saying what the entry is, never "no model.safetensors ... (found model.safetensors)"."""
    bad = tmp_path / "bad"
    shutil.copytree(hf_model, bad)
    weights = bad / "model.safetensors"
    weights.unlink()
    weights.symlink_to("model.safetensors")
    _fails(capsys, "model", "import", str(bad),
           match=f"{weights} is a link that loops (-> model.safetensors), not a file")
    weights.unlink()
    weights.symlink_to(tmp_path / "gone.safetensors")
    _fails(capsys, "model", "import", str(bad), match=f"{weights} is a broken link (-> {tmp_path / 'gone.safetensors'})")
    weights.unlink()
    weights.mkdir()
    _fails(capsys, "model", "import", str(bad), match=f"{weights} is a directory, not a file")
    weights.rmdir()
    shard = bad / "model-00001-of-00001.safetensors"
    shard.mkdir()
    (bad / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": shard.name}}))
    _fails(capsys, "model", "import", str(bad), match=f"{shard} is a directory, not a file")


def test_hf_folder_as_a_megatron_artifact_is_refused(capsys, hf_model):
    _fails(capsys, "model", "import", str(hf_model), "--as", "pretrain-checkpoint",
           match="a hf checkpoint; the consumers of pretrain-checkpoint load a megatron checkpoint")


def test_megatron_import_then_sft_dry_run_takes_it(capsys, tmp_path):
    ckpt = megatron_checkpoint(tmp_path / "released")
    data = sft_data(tmp_path / "sft-v1")
    assert run_cli(capsys, "ultra3", "model", "import", str(ckpt), "-c", "tiny")[0] == 0
    code, out, err = run_cli(capsys, "ultra3", "data", "import", str(data), "--as", "sft-data", "-c", "tiny")
    assert code == 0, err
    rec = json.loads(records("sft-data")[0].read_text())
    assert rec["train_path"] == str(data / "data" / "training_64.idx.parquet") and rec["pack_size"] == "64"
    code, out, err = run_cli(capsys, "ultra3", "sft", "-c", "tiny", "--dry-run")
    text = out + err
    assert f"[nemotron] input pretrain-checkpoint v1: {ckpt} (made on here:" in text, text[:3000]
    assert "-> checkpoint.pretrained_checkpoint" in text
    assert f"[nemotron] input sft-data v1: {data}" in text


def test_megatron_import_refuses_a_missing_iteration_and_missing_metadata(capsys, tmp_path):
    ckpt = megatron_checkpoint(tmp_path / "m")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("30\n")
    _fails(capsys, "model", "import", str(ckpt), match=f"{ckpt / 'iter_0000030'}: missing")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("20\n")
    (ckpt / "iter_0000020" / ".metadata").unlink()
    _fails(capsys, "model", "import", str(ckpt), match=f"{ckpt / 'iter_0000020' / '.metadata'}: missing")


def test_nemo_rl_step_is_recorded_as_its_hf_form(capsys, tmp_path, hf_model):
    step = tmp_path / "ck" / "step_7"
    (step / "policy" / "weights").mkdir(parents=True)
    (step / "policy" / "weights" / "__0_0.distcp").write_bytes(b"x")
    (step / "config.yaml").write_text("policy: {}\n")
    _fails(capsys, "model", "import", str(step), match=f"{tmp_path / 'ck' / 'hf' / 'step_7'}: step_7 has no Hugging")
    shutil.copytree(hf_model, tmp_path / "ck" / "hf" / "step_7")
    code, out, err = run_cli(capsys, "ultra3", "model", "import", str(step), "--as", "mopd-checkpoint")
    assert code == 0, err
    rec = artifacts.lookup("mopd-checkpoint", config="default")
    assert rec["path"] == str(tmp_path / "ck" / "hf" / "step_7") and rec["step"] == 7 and rec["source"] == str(step)


def test_data_imports_check_with_the_consumers_readers(capsys, tmp_path, shared_data):
    from local_runtime_support import write_pretrain_data
    from rl_support import rl_jsonl

    pre = tmp_path / "pre"
    write_pretrain_data(pre)
    (pre / "train_1.bin").unlink()
    _fails(capsys, "data", "import", str(pre), "--as", "pretrain-data", match=f"{pre / 'train_1.bin'} does not exist")
    rl = tmp_path / "rl"
    rl_jsonl(rl, shared_data)
    with open(rl / "validation.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"messages": []}\n')
    _fails(capsys, "data", "import", str(rl), "--as", "rl-data", match=f"{rl / 'validation.jsonl'}:5: not an RL line")
    sft = sft_data(tmp_path / "sft")
    (sft / "data" / "64_metadata.jsonl").unlink()
    _fails(capsys, "data", "import", str(sft), "--as", "sft-data", match=f"{sft / 'data' / '64_metadata.jsonl'}: missing")
    write_pretrain_data(pre)
    code, out, err = run_cli(capsys, "ultra3", "data", "import", str(pre), "--as", "pretrain-data")
    assert code == 0, err
    assert artifacts.lookup("pretrain-data", config="default")["blend_path"] == str(pre / "blend.json")


def test_a_pretrain_shard_whose_index_overruns_its_bin_is_refused_by_import_and_inspect(capsys, tmp_path):
    """A corrupt ``.idx`` (one length set to 10**9 in a 72 kB shard; the last entry intact, so the size check of
    the header and last entry passed) was imported, and ``data inspect`` counted 10**9 tokens and showed samples
    read past the end of the ``.bin``. Now import and inspect refuse it naming the index and its first bad entry;
    and an index whose SHA-256 differs from its data prep receipt is refused by the import."""
    import hashlib
    import struct

    from local_runtime_support import write_pretrain_data

    pre = tmp_path / "pre"
    write_pretrain_data(pre)
    idx = pre / "train_0.idx"
    good = idx.read_bytes()
    n = struct.unpack_from("<Q", good, 18)[0]
    for entry in (0, n // 2):  # the first length, and one in the middle
        bad = bytearray(good)
        bad[34 + 4 * entry:38 + 4 * entry] = struct.pack("<i", 10**9)
        idx.write_bytes(bytes(bad))
        words = f"{idx}: entry {entry} of {n:,}: 1,000,000,000 tokens at byte "
        _fails(capsys, "data", "import", str(pre), "--as", "pretrain-data", match=words)
        code, out, err = run_cli(capsys, "ultra3", "data", "inspect", str(pre / "blend.json"))
        assert code == 2 and words in err and "past the end of train_0.bin" in err, (out, err)
    idx.write_bytes(good)
    receipt = pre / "train_0.receipt.json"
    receipt.write_text(json.dumps({"idx_sha256": hashlib.sha256(b"another index").hexdigest()}))
    _fails(capsys, "data", "import", str(pre), "--as", "pretrain-data",
           match=f"{idx}: SHA-256 {hashlib.sha256(good).hexdigest()[:12]}... differs from the")
    receipt.write_text(json.dumps({"idx_sha256": hashlib.sha256(good).hexdigest()}))
    code, out, err = run_cli(capsys, "ultra3", "data", "import", str(pre), "--as", "pretrain-data")
    assert code == 0, err


def test_hf_folder_as_pretrain_checkpoint_for_the_local_consumers(capsys, hf_model, tmp_path):
    """``-c local``'s consumers of ``pretrain-checkpoint`` (sft, mopd-warmup, mopd) all load a Hugging Face folder:
    the import records it for them, and ``sft -c local``'s dry run takes it; ``-c tiny``'s (Megatron-Bridge) still
    refuse it, with the hint naming ``-c local``."""
    from nemotron.cli.imports import local_consumers

    assert set(local_consumers("pretrain-checkpoint", "local")) >= {"sft", "mopd-warmup", "mopd"}
    assert local_consumers("pretrain-checkpoint", "tiny") == [] and local_consumers("pretrain-checkpoint", "nope") == []
    code, out, err = run_cli(capsys, "ultra3", "model", "import", str(hf_model), "--as", "pretrain-checkpoint",
                             "-c", "tiny")
    assert code == 2 and "a hf checkpoint; the consumers of pretrain-checkpoint load a megatron" in err, err
    assert "-c local" in err and not records("pretrain-checkpoint")
    code, out, err = run_cli(capsys, "ultra3", "model", "import", str(hf_model), "--as", "pretrain-checkpoint",
                             "-c", "local")
    assert code == 0, err
    rec = artifacts.lookup("pretrain-checkpoint", config="local")
    assert rec["path"] == str(hf_model) and rec["form"] == "hf"
    code, out, err = run_cli(capsys, "ultra3", "sft", "-c", "local", "--dry-run")
    text = out + err
    assert f"[nemotron] input pretrain-checkpoint v1: {hf_model}" in text, text[:3000]
    assert "-> checkpoint.pretrained_checkpoint" in text


def test_sft_data_without_a_validation_set_is_imported_as_data_prep_records_it(capsys, tmp_path):
    """data prep sft writes no validation file when no record fell in the held-out share and records the output
    with valid_path null; the import refused that very folder ("validation_64.idx.parquet: missing"). A manifest
    that names a validation file still needs it; a manifest that is not JSON is named as such (it was reported as
    "no training_<pack size>.idx.parquet" of the data folder)."""
    sft = sft_data(tmp_path / "sft")
    (sft / "data" / "validation_64.idx.parquet").unlink()
    (sft / "manifest.json").write_text(json.dumps({"loader": {
        "packed_train_data_path": str(sft / "data" / "training_64.idx.parquet"), "packed_val_data_path": None}}))
    bad = tmp_path / "bad"
    shutil.copytree(sft, bad)
    (bad / "manifest.json").write_text("{not json")
    _fails(capsys, "data", "import", str(bad), "--as", "sft-data", match=f"{bad / 'manifest.json'}: not valid JSON")
    (bad / "manifest.json").write_text(json.dumps({"loader": {"packed_val_data_path": "data/validation_64.idx.parquet"}}))
    _fails(capsys, "data", "import", str(bad), "--as", "sft-data",
           match=f"{bad / 'data' / 'validation_64.idx.parquet'}: missing")
    code, out, err = run_cli(capsys, "ultra3", "data", "import", str(sft), "--as", "sft-data", "-c", "tiny")
    assert code == 0, err
    rec = json.loads(records("sft-data")[0].read_text())
    assert rec["valid_path"] is None and rec["train_path"] == str(sft / "data" / "training_64.idx.parquet")


def test_an_import_for_a_config_no_consumer_has_is_refused(capsys, hf_model, tmp_path):
    """``model import -c no-such-config`` (or a typo, ``-c tny``) recorded an artifact no run would take; now exit 2
    with the consumers' configs and the closest one, for model and data imports alike."""
    _fails(capsys, "model", "import", str(hf_model), "-c", "tny",
           match="-c tny: no stage that consumes hf-checkpoint has a config 'tny'")
    code, out, err = run_cli(capsys, "ultra3", "model", "import", str(hf_model), "-c", "no-such-config")
    assert code == 2 and "the configs of its consumers: default, tiny, phase2" in err, err
    sft = sft_data(tmp_path / "sft")
    code, out, err = run_cli(capsys, "ultra3", "data", "import", str(sft), "--as", "sft-data", "-c", "tyni")
    assert code == 2 and "did you mean 'tiny'?" in err, err
    assert not any(artifacts.store().glob("*/v*.json"))


def test_a_model_that_is_not_the_consumers_is_refused_or_recorded_with_a_warning(capsys, hf_model, tmp_path):
    """A Llama folder, or a NemotronH of other sizes than the consumer config's model.name, was recorded as the
    start of Ultra's RL with no word; now a Llama is refused naming config.json's model_type and architectures, and
    a NemotronH of other sizes is recorded with a warning naming the sizes that differ."""
    code, out, err = run_cli(capsys, "ultra3", "model", "import", str(hf_model), "-c", "tiny")
    assert code == 0, err
    assert f"warning: {hf_model / 'config.json'}: not the model rlvr -c tiny builds: num_hidden_layers" in err, err
    assert "(model.name=ultra4layer: 4)" in err, err
    llama = tmp_path / "llama"
    shutil.copytree(hf_model, llama)
    cfg = json.loads((llama / "config.json").read_text())
    (llama / "config.json").write_text(json.dumps({**cfg, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    # a Llama: refused (exit 2, nothing recorded): no consumer could load it (it was recorded with a warning, the
    # latest hf-checkpoint for -c tiny, which the next rlvr -c tiny took)
    for artifact in ("hf-checkpoint", "rl-checkpoint"):
        code, out, err = run_cli(capsys, "ultra3", "model", "import", str(llama), "--as", artifact, "-c", "tiny")
        assert code == 2, (out, err)
        assert err.startswith(f"error: {llama / 'config.json'}: model_type='llama' (architectures "
                              "['LlamaForCausalLM']) is not NemotronH (nemotron_h), the model every consumer of "
                              f"{artifact} builds (") and "nothing was recorded" in err, err
    assert [r.name for r in records("hf-checkpoint")] == ["v1.json"] and not records("rl-checkpoint")


def test_importing_the_same_folder_again_adds_no_version(capsys, hf_model, tmp_path):
    """Re-importing a folder added a version each time (again, with a trailing /, through a symlink): the import's
    time stamp made every record new. Now the same folder for the same config is the same record, the latest
    again; another config is another record."""
    link = tmp_path / "link"
    link.symlink_to(hf_model)
    versions = []
    for arg in (str(hf_model), str(hf_model), str(hf_model) + "/", str(link)):
        code, out, err = run_cli(capsys, "ultra3", "model", "import", arg)
        assert code == 0, err
        versions.append(int(out.split("artifact hf-checkpoint v")[1].split(":")[0]))
    assert versions == [1, 1, 1, 1] and "already recorded; the latest again" in out, out
    assert len(records("hf-checkpoint")) == 1 and json.loads(records("hf-checkpoint")[0].read_text())["path"] == str(hf_model)
    code, out, err = run_cli(capsys, "ultra3", "model", "import", str(hf_model), "-c", "tiny")
    assert code == 0 and "artifact hf-checkpoint v2" in out, err
