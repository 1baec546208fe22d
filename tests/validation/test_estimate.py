"""The run estimate (``layout/estimate.py``): FLOPs, step time, jobs and checkpoint bytes, checked by hand, and the
``estimate`` command's refusal of a checkpoint that cannot fit (exit 2, as the run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nemotron.cli.main import main
from nemotron.config import catalogue
from nemotron.layout import estimate as est

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_dense_attention_layer_flops_by_hand():
    spec = catalogue.get("small")
    h, q, kv = spec.hidden_size, spec.num_attention_heads * spec.head_dim, spec.num_query_groups * spec.head_dim
    seq = 1024
    assert est.layer_flops(spec, catalogue.ATTENTION, seq) == 2 * h * (q + 2 * kv) + 2 * q * h + 2 * seq * q


def test_moe_layer_counts_top_k_experts_only():
    spec = catalogue.get("ultra")
    one = est.layer_flops(spec, catalogue.MOE, 4096)
    more = est.layer_flops(catalogue.make_slice(spec, 4).__class__(**{**spec.__dict__, "moe_topk": spec.moe_topk + 1}),
                           catalogue.MOE, 4096)
    assert more - one == 2 * 2 * spec.moe_latent_size * spec.moe_ffn_hidden_size  # one more expert: fc1 + fc2


def test_ultra_training_flops_near_six_times_active_parameters():
    """Sanity against the usual 6 N_active per token (attention over 8k context adds a little)."""
    spec = catalogue.get("ultra")
    active = catalogue.param_count(spec)["active"]
    per_token = 3 * est.forward_flops_per_token(spec, 8192)["total"]
    assert 0.9 < per_token / (6 * active) < 1.3


def test_step_time_jobs_and_checkpoint_arithmetic():
    spec = catalogue.get("small")
    e = est.estimate_run(spec, gpus=8, nodes=1, gpu="H100", precision="bf16", seq_length=1024, global_batch_size=32,
                         steps=10_000, mfu=0.5, walltime_seconds=3600, save_margin_seconds=600, save_interval=1000,
                         most_recent_k=3, free_bytes=10**12, free_path="/x")
    fwd = est.forward_flops_per_token(spec, 1024)["total"]
    assert e.step_seconds == pytest.approx(3 * fwd * 32 * 1024 / (8 * 989e12 * 0.5))
    assert e.jobs == math.ceil(e.wall_seconds / 3000)
    assert e.ckpt_bytes == int(catalogue.param_count(spec)["total"] * 14)
    assert (e.saves, e.retained_bytes) == (10, 3 * e.ckpt_bytes)
    assert e.fits and e.gpu_hours == pytest.approx(e.wall_seconds * 8 / 3600)


def test_nvfp4_on_hopper_is_counted_at_fp8_and_said_so():
    peak, counted, notes = est.peak_tflops("H100", "nvfp4")
    assert (peak, counted) == (1979.0, "fp8") and "no NVFP4" in notes[0]


def test_estimate_refuses_a_checkpoint_that_cannot_fit(capsys, tmp_path, monkeypatch):
    """ultra4layer's checkpoint (~500 GB) cannot fit this machine's temporary folder: exit 2, one line naming the key,
    and the JSON document says fits=false. The dry run and the run refuse it with the same problem."""
    monkeypatch.chdir(tmp_path)
    code = main(["ultra3", "pretrain", "-c", "tiny", "estimate", "--json", f"checkpoint.save={tmp_path}/ckpt"])
    cap = capsys.readouterr()
    assert code == 2
    doc = json.loads(cap.out)
    assert doc["fits"] is False and doc["ckpt_bytes"] > doc["free_bytes"]
    assert "error: checkpoint.save=" in cap.err and "the first save would fail" in cap.err
    assert main(["ultra3", "pretrain", "-c", "tiny", "--dry-run", f"checkpoint.save={tmp_path}/ckpt"]) == 2
    assert "the first save would fail" in capsys.readouterr().out


def test_estimate_is_for_training_stages(capsys):
    assert main(["ultra3", "data", "prep", "pretrain", "-c", "tiny", "estimate"]) == 2
    err = capsys.readouterr().err
    assert "ultra3 data prep pretrain has no estimate" in err and "the Megatron training stages" in err
    assert "nemotron ultra3 pretrain -c tiny estimate" in err  # the hint: the same word on a stage that has it


def test_a_default_checkpoint_root_that_cannot_fit_is_a_warning(capsys, tmp_path, monkeypatch):
    """A root the user never chose (``./checkpoints`` here) is not refused: a warning naming the keys that choose one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEMOTRON_CKPT_ROOT", raising=False)
    main(["ultra3", "pretrain", "-c", "tiny", "estimate", "--json"])
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    space = [p for p in doc["problems"] if p["rule"] == "checkpoint-space"]
    assert doc["fits"] is False and [p["severity"] for p in space] == ["warning"]
    assert "set one with the profile's checkpoint_root or checkpoint.save=PATH" in space[0]["message"]


def test_the_mfu_override_is_ours_and_never_reaches_megatron_bridge(capsys, tmp_path, monkeypatch):
    """``+estimate.mfu=X`` (what the estimate table says sets it) is our key: the estimate uses it and exits 0, the
    dry run does not call it a section of ConfigContainer, and the Megatron-Bridge translation drops it."""
    from nemotron.config.compile import compile_config
    from nemotron.config.registry import get_stage
    from nemotron.runtime.megatron import megatron_bridge

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NEMOTRON_CKPT_ROOT", str(tmp_path / "ckpt"))
    base = ["ultra3", "pretrain", "--batch", "sample", "--env-file", "{fixtures}/env.toml", "profile.gpu=B200"]
    argv = [a.replace("{fixtures}", str(FIXTURES)) for a in base]
    assert main([*argv, "estimate", "--json", "+estimate.mfu=0.4"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mfu"] == 0.4 and not [p for p in doc["problems"] if p["rule"] == "mb-keys"], doc["problems"]
    main([*argv, "--dry-run", "+estimate.mfu=0.4"])
    out = capsys.readouterr().out
    assert "estimate={'mfu': 0.4}" not in out and "not a section of" not in out, out[-3000:]
    compiled = compile_config(get_stage("pretrain"), "tiny", ["+estimate.mfu=0.4"], check_paths=False)
    assert "estimate" not in megatron_bridge._strip_own(compiled.config)


def test_an_unset_secret_is_a_warning_for_the_estimate_as_for_the_dry_run(capsys, tmp_path, monkeypatch):
    """The estimate starts nothing: a secret this shell lacks is the dry run's warning, not the run's refusal."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NEMOTRON_CKPT_ROOT", str(tmp_path / "ckpt"))
    text = (FIXTURES / "env.toml").read_text(encoding="utf-8")
    declared = 'secrets = { WANDB_API_KEY = "golden-secret-value-4242" }'
    assert declared in text
    (tmp_path / "env.toml").write_text(text.replace(declared, 'secrets = ["WANDB_API_KEY"]'), encoding="utf-8")
    code = main(["ultra3", "pretrain", "--batch", "sample", "--env-file", str(tmp_path / "env.toml"), "profile.gpu=B200",
                 "estimate", "--json"])
    doc = json.loads(capsys.readouterr().out)
    secret = [p for p in doc["problems"] if "WANDB_API_KEY" in str(p["value"]) + p["message"]]
    assert code == 0 and [p["severity"] for p in secret] == ["warning"], doc["problems"]
    assert "the run will refuse to start" in secret[0]["message"]


def test_local_dry_run_and_estimate_give_one_parameter_count(capsys, tmp_path, monkeypatch):
    """The local backend builds no MTP block: the dry run's "local run" table and the estimate's model row both
    count ultra4layer without it (24.6 B, not the 35.8 B with MTP) and both say so."""
    from nemotron.validation import checks

    monkeypatch.chdir(tmp_path)
    spec = catalogue.get("ultra4layer")
    assert spec.mtp_depths  # else the test shows nothing
    without = catalogue.param_count(spec, include_mtp=False)["total"]
    assert without < catalogue.param_count(spec)["total"]
    main(["ultra3", "pretrain", "-c", "local", "--dry-run", "model.name=ultra4layer"])
    out = capsys.readouterr().out
    assert f"parameters   {without / 1e6:.1f} M (" in out and f"embedding; {est.MTP_LEFT_OUT})" in out
    main(["ultra3", "pretrain", "-c", "local", "estimate", "--json", "model.name=ultra4layer"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["params"] == without and doc["mtp_left_out"] is True
    row = est.estimate_run(spec, gpus=1, nodes=1, gpu="H100", precision="bf16", seq_length=64, global_batch_size=1,
                           steps=1, ckpt_format="hf-local").rows()[0]
    assert row[1] == f"ultra4layer: {without / 1e9:.3g} B parameters ({est.MTP_LEFT_OUT})"
    megatron = est.estimate_run(spec, gpus=1, nodes=1, gpu="H100", precision="bf16", seq_length=64,
                                global_batch_size=1, steps=1).rows()[0]
    assert megatron[1] == "ultra4layer: 35.8 B parameters"  # a Megatron checkpoint holds the MTP block
    assert checks.MTP_LEFT_OUT == est.MTP_LEFT_OUT


def test_a_cluster_profiles_checkpoint_root_is_not_measured_on_this_machine(capsys, tmp_path, monkeypatch):
    """A profile that runs its jobs elsewhere (Slurm through a local tunnel here) keeps checkpoints on its nodes'
    storage: a folder that happens to exist at the same path on this machine (one a failed submission made) is not
    that mount, so its free space is not judged ("not checked: cluster path"); it refused the dry run with this
    disk's free space before. A ``local`` profile runs here: measured, and refused."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "lustre" / "checkpoints"
    root.mkdir(parents=True)  # exists here, on this machine's disk, far too small for 501 GB
    env = tmp_path / "env.toml"
    env.write_text(f'[cl]\nexecutor = "slurm"\ngpus_per_node = 8\ngpu = "H100"\ncheckpoint_root = "{root}"\n'
                   f'job_dir = "{tmp_path}/jobs"\n\n[here]\nexecutor = "local"\ngpus_per_node = 8\ngpu = "H100"\n'
                   f'checkpoint_root = "{root}"\n')
    main(["ultra3", "pretrain", "-c", "tiny", "estimate", "--json", "--run", "cl", "--env-file", str(env)])
    doc = json.loads(capsys.readouterr().out)
    assert doc["free_bytes"] is None and doc["fits"] is None and doc["free_unchecked"].startswith("cluster path"), doc
    assert doc["verdict"].startswith("checkpoint space not checked: cluster path (profile cl runs its jobs")
    assert not [p for p in doc["problems"] if p["rule"] == "checkpoint-space"]
    main(["ultra3", "pretrain", "-c", "tiny", "--dry-run", "--run", "cl", "--env-file", str(env)])
    out = capsys.readouterr().out
    assert "the first save would fail" not in out and "not checked: cluster path" in out, out[-3000:]
    main(["ultra3", "pretrain", "-c", "tiny", "estimate", "--json", "--run", "here", "--env-file", str(env)])
    doc = json.loads(capsys.readouterr().out)
    assert doc["free_unchecked"] is None and doc["free_bytes"] is not None and doc["fits"] is False, doc
    assert [p["severity"] for p in doc["problems"] if p["rule"] == "checkpoint-space"] == ["error"]


def test_mtp_boost_estimate_models_the_frozen_backbone(capsys, tmp_path, monkeypatch):
    """`mtp-boost estimate` used to print sft's table verbatim (3 x forward, 14 B/param of 35.8 B parameters): MTP
    boosting trains only the MTP head on a frozen backbone (docs/mtp_boost.md). Forward of the whole model, backward
    of the head (2 x) and of each depth's frozen output layer's input (1 x), full recompute one more head forward;
    the checkpoint holds every parameter in BF16 and the head's FP32 optimizer state. The route is refused (exit 2),
    the estimate still printed."""
    monkeypatch.chdir(tmp_path)
    on_sample = ["--batch", "sample", "--env-file", str(FIXTURES / "env.toml")]
    assert main(["ultra3", "sft", "-c", "tiny", "estimate", "--json", *on_sample]) in (0, 2)
    sft = json.loads(capsys.readouterr().out)
    assert main(["ultra3", "mtp-boost", "-c", "tiny", "estimate", "--json", *on_sample]) == 2
    doc = json.loads(capsys.readouterr().out)
    spec = catalogue.get("ultra4layer")
    head_params, head = est.mtp_head(spec, 4096)
    assert head_params == catalogue.param_count(spec)["mtp"] > 0 and doc["trainable_params"] == head_params
    depths, out_layer = 2, 2 * spec.hidden_size * catalogue.padded_vocab(spec, 1)  # mtp_boost.num_steps of tiny
    fwd = est.forward_flops_per_token(spec, 4096, depths)
    assert fwd["mtp"] == pytest.approx(depths * (head + out_layer))
    per_token = fwd["total"] + depths * (2 * head + out_layer) + depths * head  # tiny: full recompute
    assert doc["flops_per_step"] == pytest.approx(per_token * 16 * 4096)
    assert doc["flops_per_step"] < 0.6 * sft["flops_per_step"]  # no backward of the backbone
    total = catalogue.param_count(spec)["total"]
    assert doc["ckpt_bytes"] == int(total * 2 + head_params * 12) and sft["ckpt_bytes"] == int(total * 14)
    monkeypatch.setenv("COLUMNS", "400")  # one table row a line
    main(["ultra3", "mtp-boost", "-c", "tiny", "estimate", *on_sample])
    out = capsys.readouterr().out
    assert "of them train (the MTP head; the backbone is frozen)" in out
    assert "2 B/param + 12 B/param of the head's optimizer state, megatron" in out


def test_local_mtp_head_count_is_the_runtimes_module():
    """`-c local` trains the local runtime's own head (a dense stand-in of the MTP block): its parameter count is the
    real module's (torch), and its checkpoint is the backbone's FP32 folder plus the FP32 head."""
    pytest.importorskip("torch")
    from nemotron.runtime.megatron import mtp_local

    spec = catalogue.get("small")
    head = mtp_local.build_head(mtp_local.head_shape(spec), seed=0)
    assert est.mtp_head(spec, 256, local=True)[0] == sum(p.numel() for p in head.parameters())
    e = est.estimate_run(spec, gpus=1, nodes=1, gpu="H100", precision="bf16", seq_length=256, global_batch_size=4,
                         steps=20, mtp_depths=2, ckpt_format="hf-local", frozen_backbone=True)
    backbone = catalogue.param_count(spec, include_mtp=False)["total"]
    assert e.ckpt_bytes == int((backbone + e.trainable_params) * 4) and not e.mtp_left_out
    with pytest.raises(ValueError, match="mtp_boost.num_steps must be >= 1"):
        est.estimate_run(spec, gpus=1, nodes=1, gpu="H100", precision="bf16", seq_length=256, global_batch_size=4,
                         steps=20, mtp_depths=0, ckpt_format="hf-local", frozen_backbone=True)


def test_gpu_hours_of_a_short_run_keep_three_figures():
    """A 27 s tiny run printed "GPU-hours / node-hours 0.0 / 0.0"."""
    spec = catalogue.get("ultra4layer")
    e = est.estimate_run(spec, gpus=8, nodes=1, gpu="H100", precision="bf16", seq_length=4096, global_batch_size=16,
                         steps=20)
    row = next(r for r in e.rows() if r[0] == "GPU-hours / node-hours")
    assert row[1] == f"{e.gpu_hours:.3g} / {e.node_hours:.3g}" and e.gpu_hours < 0.5, row
    assert not row[1].startswith("0.0 "), row
    assert est._hours(1234.56) == "1,234.6" and est._hours(0.00001) == "1.00e-05"
