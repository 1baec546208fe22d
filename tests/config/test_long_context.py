"""`pretrain -c long_context`: the report's long-context continued pretraining (1,048,576-token context,
CP32 TP8 EP128 PP2 on GB200, constant LR 2.5e-6, ~33 B tokens, 46 % own long-context data + 54 % phase-2
blend). Its golden dry-run on a GB200 profile, the layout rules that catch a broken variant, and the blend
mix both runtimes train on (real .bin/.idx shards, our real blend reader and Megatron-Core-style sampler).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from config_support import compile_stage, config_valid
from local_runtime_support import write_pretrain_data
from nemotron.cli.main import main
from nemotron.data.blend import mix_blend_files, training_blend
from nemotron.errors import ConfigError

HERE = Path(__file__).resolve().parents[1]  # tests/
ENV_FILE = HERE / "fixtures" / "env.toml"
GOLDEN = HERE / "golden" / "pretrain-long_context.txt"


def _dry_run(tmp_path, monkeypatch, capsys, profile: str, *overrides: str) -> tuple[int, str]:
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code = main(["ultra3", "pretrain", "-c", "long_context", *overrides, "--dry-run", "--batch", profile,
                 "--env-file", str(ENV_FILE)])
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def test_golden_dry_run_on_gb200(tmp_path, monkeypatch, capsys):
    pytest.importorskip("nemo_run", reason="the sbatch script is rendered by NeMo-Run")
    from golden_support import normalise

    code, out = _dry_run(tmp_path, monkeypatch, capsys, "sample-gb200")
    assert config_valid(code, out), out[-3000:]  # 2: inputs not made yet
    for line in ("TP / PP / CP                                 8 / 2 / 32 (sequence parallel)",
                 "EP / ETP                                     128 / 1 (4 experts per rank)",
                 "tokens per step                              25,165,824"):
        assert line in out
    text = normalise(out, tmp_path / "home")
    if os.environ.get("NEMOTRON_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), f"dry-run output changed; diff it against {GOLDEN}"


@pytest.mark.parametrize("overrides,profile,expected", [
    (["model.seq_length=1048000"], "sample-gb200",
     "error: model.seq_length=1048000: the sequence length must be divisible by 2 x CP x TP = 2 x 32 x 8 = 512"),
    (["model.context_parallel_size=64"], "sample-gb200",
     ("error: run.env.nodes=128: nodes x GPUs per node = 512 GPUs, which TP x PP x CP = 8 x 2 x 64 = 1024 does not "
      "divide")),
    (["model.expert_model_parallel_size=96"], "sample-gb200", "error: model.expert_model_parallel_size=96"),
    ([], "sample", "error: run.env.gpus_per_node=4: this config was laid out for 128 nodes of 4 GPUs"),
    ([], "sample", "NVFP4 training precision needs Blackwell GPUs"),
])
def test_broken_layouts_are_refused_before_queueing(tmp_path, monkeypatch, capsys, overrides, profile, expected):
    code, out = _dry_run(tmp_path, monkeypatch, capsys, profile, *overrides)
    assert code == 2 and expected in out, out[-2000:]


def test_config_carries_the_report_numbers():
    cfg = compile_stage("pretrain", "long_context")
    m, t = cfg["model"], cfg["train"]
    assert (m["tensor_model_parallel_size"], m["context_parallel_size"], m["expert_model_parallel_size"],
            m["pipeline_model_parallel_size"], m["seq_length"]) == (8, 32, 128, 2, 1048576)
    assert cfg["optimizer"]["lr"] == cfg["optimizer"]["min_lr"] == 2.5e-6
    assert cfg["scheduler"]["lr_decay_style"] == "constant"
    tokens = t["train_iters"] * t["global_batch_size"] * m["seq_length"]
    assert 33e9 <= tokens < 33e9 + t["global_batch_size"] * m["seq_length"]  # ~33 B tokens
    assert [x["share"] for x in cfg["data"]["mix_with"]] == [0.54]


def test_mix_gives_each_blend_its_share_of_the_samples(tmp_path):
    from nemotron.runtime.megatron.pretrain_data import BlendedSamples, read_blend

    own = write_pretrain_data(tmp_path / "long", weights=(2.0, 2.0))       # the user's long-context data
    phase2 = write_pretrain_data(tmp_path / "phase2", weights=(1.0, 3.0))  # the phase-2 blend
    rel = json.loads(phase2.read_text())
    rel["train"] = [x if i % 2 == 0 else Path(x).name for i, x in enumerate(rel["train"])]
    phase2.write_text(json.dumps(rel))  # relative prefixes resolve from the blend file's folder
    mixed = mix_blend_files(own, [{"blend": str(phase2), "share": 0.54}])
    weights = dict(zip(mixed["train"][1::2], mixed["train"][0::2], strict=True))
    assert weights == pytest.approx({str(tmp_path / "long" / "train_0"): 0.23, str(tmp_path / "long" / "train_1"): 0.23,
                                     str(tmp_path / "phase2" / "train_0"): 0.135,
                                     str(tmp_path / "phase2" / "train_1"): 0.405})
    cfg = {"data": {"per_split_data_args_path": str(own), "mix_with": [{"blend": str(phase2), "share": 0.54}]}}
    path = training_blend(cfg, tmp_path / "ckpt")
    assert path == tmp_path / "ckpt" / "mixed_blend.json"
    samples = BlendedSamples(read_blend(path)["train"], 32, 2000, seed=1)
    got = {}
    for row in samples.summary():
        folder = Path(row["prefix"]).parent.name
        got[folder] = got.get(folder, 0) + row["samples"]
    assert got["long"] / 2000 == pytest.approx(0.46, abs=0.002) and got["phase2"] / 2000 == pytest.approx(0.54, abs=0.002)
    assert training_blend({"data": {"per_split_data_args_path": str(own), "mix_with": []}}, tmp_path) == own

    with pytest.raises(ConfigError, match=r"data.mix_with\[0\].share=1.2: a share of the training tokens"):
        mix_blend_files(own, [{"blend": str(phase2), "share": 1.2}])
    with pytest.raises(ConfigError, match="the shares add up to 1; they must leave a share"):
        mix_blend_files(own, [{"blend": str(phase2), "share": 0.5}, {"blend": str(phase2), "share": 0.5}])
    with pytest.raises(ConfigError, match=r"data.mix_with\[0\].blend=.*nope.json: cannot read"):
        mix_blend_files(own, [{"blend": str(tmp_path / "nope.json"), "share": 0.5}])


def test_dry_run_checks_the_mix(tmp_path, monkeypatch, capsys):
    own = write_pretrain_data(tmp_path / "long")
    code, out = _dry_run(tmp_path, monkeypatch, capsys, "sample-gb200", f"data.per_split_data_args_path={own}",
                         "data.mix_with=[{blend: " + str(tmp_path / "gone.json") + ", share: 0.54}]")
    assert code == 2 and f"data.mix_with[0].blend={tmp_path / 'gone.json'}: cannot read" in out, out[-1500:]
    code, out = _dry_run(tmp_path, monkeypatch, capsys, "sample-gb200",
                         "data.mix_with=[{blend: x.json, share: 0.6}, {blend: y.json, share: 0.4}]")
    assert code == 2 and "data.mix_with: the shares add up to 1; they must leave a share" in out, out[-1500:]
