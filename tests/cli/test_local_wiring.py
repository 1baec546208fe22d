"""What the ``-c local`` chain wires each stage to, and that it says so: quantize takes the MOPD output (the cluster
configs' input) when the chain has one, eval compares the NVFP4 export with the very model it was quantized from
(refusing a bf16/nvfp4 pair of two different models), and a key that ``local.yaml`` wires to another artifact than
``default.yaml`` (mopd-warmup's student: the pretrain model) says so in the input plan and in ``keys``.

The real CLI (``nemotron.cli.main``) on the shipped configs; a fresh NEMOTRON_HOME (no artifact made yet).
"""

from __future__ import annotations

import json
import re

from test_cli import _isolated_home, run_cli  # noqa: F401 - the autouse fixture isolates NEMOTRON_HOME here too

CHAIN = ("data-prep-pretrain", "pretrain", "data-prep-sft", "sft", "data-prep-rl", "rlvr", "mopd-warmup", "mopd",
         "mtp-boost", "quantize", "eval")


def _stage_block(out: str, n: int, name: str) -> str:
    start = out.index(f"[{n}/")
    rest = out[start:]
    nxt = re.search(rf"^\[{n + 1}/", rest, re.M)
    block = rest[:nxt.start()] if nxt else rest
    assert name in block.splitlines()[0], block[:200]
    return block


def _value(block: str, key: str) -> str:
    m = re.search(rf"^\s+{key}: (\S+)", block, re.M)
    assert m, (key, block[:3000])
    return m.group(1)


def test_local_chain_quantizes_the_mopd_output_and_eval_compares_it_with_its_own_export(capsys):
    code, out, err = run_cli(capsys, "ultra3", "pipe", *CHAIN, "-c", "local", "--dry-run")
    assert code == 0, (out + err)[-3000:]
    quantize = _stage_block(out, 10, "quantize")
    source = _value(quantize, "source")
    assert source.endswith("/ultra3-mtp-boost-local"), source  # mtp-boost stands in for the MOPD output
    evaluate = _stage_block(out, 11, "eval")
    assert _value(evaluate, "bf16") == source, evaluate[:3000]
    assert _value(evaluate, "nvfp4") == _value(quantize, "output_dir").replace("ultra3-nvfp4-local",
                                                                                  "ultra3-nvfp4-local-hf")
    # without the RL stages the short chain quantizes the SFT model, and eval still compares that one
    code, out, err = run_cli(capsys, "ultra3", "pipe", "data-prep-pretrain", "pretrain", "data-prep-sft", "sft",
                             "data-prep-rl", "quantize", "eval", "-c", "local", "--dry-run")
    assert code == 0, (out + err)[-3000:]
    source = _value(_stage_block(out, 6, "quantize"), "source")
    assert source.endswith("/ultra3-sft-local"), source
    assert _value(_stage_block(out, 7, "eval"), "bf16") == source


def test_input_plan_and_keys_say_where_local_wires_another_artifact(capsys):
    code, out, err = run_cli(capsys, "ultra3", "pipe", *CHAIN[:7], "-c", "local", "--dry-run")  # -q hides input lines
    assert code == 0, (out + err)[-3000:]
    line = next(ln for ln in (out + err).splitlines()
                if ln.startswith("[nemotron] input pretrain-checkpoint") and "policy.model_name" in ln)
    assert line.endswith("-> policy.model_name (local.yaml takes pretrain-checkpoint for policy.model_name, not "
                         "default.yaml's rl-checkpoint; why: nemotron ultra3 keys mopd-warmup policy.model_name -c "
                         "local)"), line
    # a key wired as default.yaml wires it gets no note
    assert not any("not default.yaml's" in ln for ln in (out + err).splitlines()
                   if ln.startswith("[nemotron] input rl-data")), out
    code, out, _ = run_cli(capsys, "ultra3", "keys", "mopd-warmup", "policy.model_name", "-c", "local", "--json")
    assert code == 0
    about = json.loads(out)["keys"][0]["description"]
    assert about.startswith("local.yaml: artifact pretrain-checkpoint, see Artifact inputs; -c local: the student is "
                            "the pretrain model, not the RLVR result"), about
    assert "every RLVR reward is 0" in about
    code, out, _ = run_cli(capsys, "ultra3", "keys", "mopd-warmup", "policy.model_name", "-c", "tiny", "--json")
    assert json.loads(out)["keys"][0]["description"].startswith("artifact rl-checkpoint")


def test_eval_refuses_a_bf16_that_is_not_the_nvfp4_exports_source(capsys, tmp_path):
    """The export's summary.json (as ``quantize -c local`` writes it) names its source; bf16 elsewhere is refused in
    the dry run and by the run's reader, bf16 = the source (or its run folder) passes."""
    from nemotron.runtime.eval.evaluate import quantized_pair_problem

    source, other, export = tmp_path / "mopd" / "hf" / "step_4", tmp_path / "sft", tmp_path / "nvfp4"
    for folder in (source, other, export):
        folder.mkdir(parents=True)
    (export / "summary.json").write_text(json.dumps({"source": str(source), "recipe": "ultra"}))
    assert quantized_pair_problem({"bf16": source, "nvfp4": export}) is None
    assert quantized_pair_problem({"bf16": tmp_path / "mopd", "nvfp4": export}) is None  # its run folder
    assert quantized_pair_problem({"a": other, "nvfp4": export}) is None  # no bf16 label: nothing to pair
    problem = quantized_pair_problem({"bf16": other, "nvfp4": export})
    assert problem == (f"eval.checkpoints.bf16='{other}' is not the model eval.checkpoints.nvfp4='{export}' was "
                       f"quantized from ({source}, its summary.json): the bf16/nvfp4 deltas would compare two "
                       f"different models; set eval.checkpoints.bf16={source} (or give the other checkpoint another "
                       "label)")
    blend, rl = tmp_path / "blend.json", tmp_path / "validation.jsonl"
    blend.write_text("{}")
    rl.write_text("")
    code, out, err = run_cli(capsys, "ultra3", "eval", "-c", "local", f"eval.checkpoints.bf16={other}",
                             f"eval.checkpoints.nvfp4={export}", f"eval.perplexity.data={blend}",
                             f"eval.gsm8k.data={rl}", "--dry-run", "--quiet")
    assert code != 0 and problem in out + err, (out + err)[-3000:]
