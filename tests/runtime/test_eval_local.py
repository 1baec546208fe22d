"""``ultra3 eval -c local`` on real checkpoints and real data: held-out perplexity on the test split of a real
``blend.json`` (Tiny Shakespeare + WikiText-2 through the Tekken tokenizer), GSM8K accuracy on real held-out problems
with NeMo RL's check, a chat sample; ``eval.json`` per checkpoint; ``eval --compare A B`` prints the deltas."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from quantize_support import real_text_blend
from rl_support import checkpoint, compile_stage, rl_jsonl, tokenizer_folder, write_yaml

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def test_eval_writes_eval_json_and_compare_prints_the_deltas(tmp_path, shared_data):
    tok = tokenizer_folder(tmp_path / "tokenizer")
    a = checkpoint(tmp_path / "a", tok, seed=7)
    b = checkpoint(tmp_path / "b", tok, seed=8)
    blend = real_text_blend(tmp_path / "pretrain", shared_data, docs=16)
    _, valid = rl_jsonl(tmp_path / "rl", shared_data, train=2, valid=3)
    out = tmp_path / "eval"
    cfg = compile_stage("eval", [f"eval.checkpoints.bf16={a}", f"eval.checkpoints.nvfp4={b}",
                                 f"eval.perplexity.data={blend}", "eval.perplexity.samples=2",
                                 "eval.perplexity.seq_length=64", f"eval.gsm8k.data={valid}", "eval.gsm8k.samples=3",
                                 "eval.gsm8k.max_new_tokens=4", "eval.chat.max_new_tokens=4", f"eval.output_dir={out}",
                                 "run.env.cpus=2"])
    path = write_yaml(tmp_path / "train.yaml", cfg)
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([PY, str(ROOT / "stages/ultra3/eval/run.py"), "--config", str(path)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((out / "eval.json").read_text())
    assert list(res["checkpoints"]) == ["bf16", "nvfp4"] and res["seed"] == 1234
    one = json.loads((out / "bf16" / "eval.json").read_text())
    m = one["metrics"]
    assert one["checkpoint"] == str(a) and m["perplexity_split"] == "test" and m["perplexity_tokens"] == 2 * 64
    assert math.isclose(m["perplexity"], math.exp(m["nll_per_token"]))
    # a freshly initialised model is about uniform over the 131,072 ids: perplexity of that order
    assert 1e4 < m["perplexity"] < 1e6
    assert m["gsm8k_samples"] == 3 and m["gsm8k_accuracy"] == 0.0
    assert [r["answer"] for r in one["gsm8k_responses"]] == [
        json.loads(x)["messages"][1]["content"] for x in valid.read_text().splitlines()]
    assert one["chat_sample"]["prompt"] == "What is 12 plus 30?"
    # the two checkpoints differ, so do their perplexities; compare prints B - A
    ppl_b = res["checkpoints"]["nvfp4"]["metrics"]["perplexity"]
    assert ppl_b != m["perplexity"]
    cmp = subprocess.run([PY, "-m", "nemotron", "ultra3", "eval", "--compare", f"{out}#bf16", f"{out}#nvfp4"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert cmp.returncode == 0, cmp.stderr
    line = next(x for x in cmp.stdout.splitlines() if x.startswith("held-out perplexity"))
    assert f"{ppl_b - m['perplexity']:+.3f}" in line
    assert "GSM8K accuracy" in cmp.stdout and "A = bf16" in cmp.stdout
    bad = subprocess.run([PY, "-m", "nemotron", "ultra3", "eval", "--compare", str(tmp_path / "nope"), str(out)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "cannot read" in bad.stderr
