"""Blend dataset keys: each stage reads its own, and refuses (dry-run and run alike) a key another stage reads.

* ``text_field`` (pretraining's) in an SFT blend was accepted, said valid by the dry-run, then ignored by the run
  (every record rejected): now both refuse it naming the stage's keys, with the SFT way to say it (``fields``).
* ``fields`` (SFT): a field map that reads a preference record's ``chosen`` dialogue as the conversation, as a
  speaker-prefixed transcript (``{"text": "chosen"}``) or a messages list (``{"messages": "chosen"}``).
* ``sample_by`` (pretraining, plain text): ``line`` or ``paragraph`` cut one ``.txt`` file into many documents
  (a single file was refused before: one file was one document); on files that are not text it is refused.
"""

from __future__ import annotations

import itertools
import math
import json
from pathlib import Path

import pytest

from nemotron.data import pretrain, sft
from nemotron.data.blend import BlendProblems
from nemotron.errors import ConfigError
from nemotron.validation.data import validate_data
from data_prep_sft_support import SHARED_DATA, compile_stage

pytestmark = pytest.mark.timeout(300)
WIKI = SHARED_DATA / "pretrain" / "wikitext2-valid.jsonl"
FASTCHAT = SHARED_DATA / "sft" / "fastchat-dummy-conversation.json"


#: The dataset keys each stage reads (docs/data_prep_pretrain.md#blend-file).
_COMMON = "name, path, weight, format, subset, split, exclude, optional, note"
KEYS = {"data-prep-pretrain": f"{_COMMON}, category, text_field, sample_by", "data-prep-sft": f"{_COMMON}, fields",
        "data-prep-rl": _COMMON}


class _Stage:
    def __init__(self, name: str) -> None:
        self.name = name


def _blend(tmp_path: Path, datasets: list[dict]) -> Path:
    path = tmp_path / "blend.json"
    path.write_text(json.dumps({"datasets": datasets}))
    return path


def _need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared data folder beside the checkout)")
    return path


@pytest.mark.parametrize("stage, key, value, reads", [
    ("data-prep-sft", "text_field", "chosen", "data-prep-pretrain"),
    ("data-prep-sft", "category", "chat", "data-prep-pretrain"),
    ("data-prep-rl", "text_field", "prompt", "data-prep-pretrain"),
    ("data-prep-pretrain", "fields", {"text": "chosen"}, "data-prep-sft"),
])
def test_a_key_the_stage_does_not_read_is_refused_by_dry_run_and_run(tmp_path, tok_cache, stage, key, value, reads):
    data = _need(FASTCHAT) if stage != "data-prep-pretrain" else _need(WIKI)
    blend = _blend(tmp_path, [{"name": "d", "path": str(data), "weight": 1.0, key: value}])
    over = {} if stage == "data-prep-rl" else {"tokenizer__cache_dir": tok_cache}
    cfg = compile_stage(stage, "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"), **over)
    want = (f"{blend}:1: datasets[0] (d): key {key!r} is not read by {stage} (it is a {reads} key); {stage} reads "
            + KEYS[stage])
    problems = [p.message for p in validate_data(_Stage(stage), cfg) if p.rule == "data-blend"]
    assert any(m.startswith(want) for m in problems), problems
    module = {"data-prep-sft": sft, "data-prep-pretrain": pretrain}.get(stage)
    if module is None:
        from nemotron.data import rl as module
    with pytest.raises(BlendProblems) as err:
        module.prepare(module.Settings.from_config(cfg), quiet=True)
    assert any(m.startswith(want) for m in err.value.problems)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.bin"))
    if (stage, key) == ("data-prep-sft", "text_field"):
        assert '"fields": {"text": "FIELD"}' in err.value.problems[0]


def _preference_records() -> list[dict]:
    """FastChat's real conversations written as preference records (Anthropic HH's form: ``chosen`` and
    ``rejected`` transcripts; UltraFeedback's form: ``chosen``/``rejected`` message lists)."""
    out = []
    for r in json.loads(_need(FASTCHAT).read_text())[:40]:
        turns = [("user" if t["from"] == "human" else "assistant", t["value"].strip()) for t in r["conversations"]]
        while turns and turns[-1][0] != "assistant":
            turns.pop()
        if turns:
            out.append(turns)
    return out


@pytest.mark.parametrize("form", ["transcript", "messages"])
def test_preference_records_are_read_through_a_field_map(tmp_path, tok_cache, form):
    convs = _preference_records()
    rows = []
    for turns in convs:
        if form == "transcript":
            chosen = "".join(f"\n\n{'Human' if r == 'user' else 'Assistant'}: {v}" for r, v in turns)
        else:
            chosen = [{"role": r, "content": v} for r, v in turns]
        rows.append({"chosen": chosen, "rejected": chosen[:-1] if form == "messages" else "Human: no"})
    data = tmp_path / "prefs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fields = {"text": "chosen"} if form == "transcript" else {"messages": "chosen"}
    blend = _blend(tmp_path, [{"name": "prefs", "path": str(data), "weight": 1.0, "fields": fields}])
    cfg = compile_stage("data-prep-sft", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                        tokenizer__cache_dir=tok_cache, split__validation_fraction=0.0, workers__count=1,
                        workers__engine="in_process")
    assert [p for p in validate_data(_Stage("data-prep-sft"), cfg) if p.severity == "error"] == []
    m = sft.prepare(sft.Settings.from_config(cfg), quiet=True)
    [d] = m["datasets"]
    assert d["records"] == d["conversations"] == len(convs) and d["skipped"] == {}
    # the learned text is the chosen answers, every one of them
    from nemotron.data import tokenizer as tk
    from nemotron.data.indexed import read_index
    import numpy as np

    tok = tk.load(str(tmp_path / "out" / "tokenizer" / "tokenizer.json"), False)
    [idx] = sorted((tmp_path / "out" / "data" / "sequences").rglob("*.idx"))
    prefix = str(idx)[:-4]
    ids = np.fromfile(prefix + ".bin", dtype="<i4")
    mask = np.fromfile(prefix + ".mask", dtype=np.uint8)
    bounds = np.concatenate([[0], np.cumsum(read_index(prefix)["lengths"])])
    for turns, (a, b) in zip(convs, itertools.pairwise(bounds), strict=True):
        learned = tok.decode(ids[a:b][mask[a:b] == 1].tolist(), skip_special_tokens=False)
        assert learned == "".join(f"{v}<|im_end|>" for r, v in turns if r == "assistant")
    # a record without the mapped field is a bad_record naming the field
    data.write_text(json.dumps({"prompt": "x"}) + "\n" + "".join(json.dumps(r) + "\n" for r in rows))
    m = sft.prepare(sft.Settings.from_config(compile_stage(
        "data-prep-sft", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out2"), tokenizer__cache_dir=tok_cache,
        split__validation_fraction=0.0, workers__count=1, workers__engine="in_process")), quiet=True)
    assert m["datasets"][0]["skipped"] == {"bad_record": 1}
    assert f"{data}:1: bad_record: no field 'chosen'" in m["datasets"][0]["examples"][0]


def _wiki_text(tmp_path: Path) -> tuple[Path, str]:
    """A real plain-text file: 20 WikiText-2 articles, blank lines between them (and inside them)."""
    text = "\n\n".join(json.loads(x)["text"] for x in _need(WIKI).read_text().splitlines()[:20])
    path = tmp_path / "wiki.txt"
    path.write_text(text)
    return path, text


@pytest.mark.parametrize("sample_by", ["paragraph", "line"])
def test_one_text_file_is_cut_into_documents_by_sample_by(tmp_path, tok_cache, sample_by):
    path, text = _wiki_text(tmp_path)
    lines = text.split("\n")
    if sample_by == "line":
        want = [x for x in lines if x.strip()]
    else:
        want = ["\n".join(g) for blank, g in itertools.groupby(lines, key=lambda x: not x.strip()) if not blank]
    blend = _blend(tmp_path, [{"name": "wiki-text", "path": str(path), "weight": 1.0, "sample_by": sample_by}])
    cfg = compile_stage("data-prep-pretrain", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                        tokenizer__cache_dir=tok_cache)
    assert [p for p in validate_data(_Stage("data-prep-pretrain"), cfg) if p.severity == "error"] == []
    m = pretrain.prepare(pretrain.Settings.from_config(cfg), quiet=True)
    [d] = m["datasets"]
    assert sum(d["documents"].values()) + sum(d["skipped"].values()) == len(want) > 20
    # the held-out documents are the file's first ones, each exactly its paragraph / line
    from nemotron.data import tokenizer as tk
    from nemotron.data.indexed import read_index
    import numpy as np

    tok = tk.load(str(tmp_path / "out" / "tokenizer" / "tokenizer.json"), True)
    prefix = str(tmp_path / "out" / "data" / "wiki-text" / "valid_00000")
    ids = np.fromfile(prefix + ".bin", dtype=np.dtype(read_index(prefix)["dtype"]))
    bounds = np.concatenate([[0], np.cumsum(read_index(prefix)["lengths"])])
    docs = [tok.decode(ids[a:b].tolist(), skip_special_tokens=True) for a, b in itertools.pairwise(bounds)]
    assert docs == want[:len(docs)] and len(docs) == d["documents"]["valid"]


def test_sample_by_on_records_is_refused(tmp_path, tok_cache):
    blend = _blend(tmp_path, [{"name": "wiki", "path": str(_need(WIKI)), "weight": 1.0, "sample_by": "paragraph"}])
    cfg = compile_stage("data-prep-pretrain", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                        tokenizer__cache_dir=tok_cache)
    want = f"{blend}:1: datasets (wiki): sample_by='paragraph' cuts plain text into documents, but the dataset's files are jsonl"
    assert any(p.message == want for p in validate_data(_Stage("data-prep-pretrain"), cfg))
    with pytest.raises(ConfigError, match="sample_by='paragraph' cuts plain text"):
        pretrain.prepare(pretrain.Settings.from_config(cfg), quiet=True)
    bad = _blend(tmp_path, [{"name": "wiki", "path": str(WIKI), "weight": 1.0, "sample_by": "sentence"}])
    with pytest.raises(BlendProblems, match="sample_by='sentence' must be document"):
        pretrain.prepare(pretrain.Settings.from_config(compile_stage(
            "data-prep-pretrain", "tiny", blend_path=str(bad), output_dir=str(tmp_path / "o2"), tokenizer__cache_dir=tok_cache)),
            quiet=True)


def test_plain_text_files_are_one_transcript_each_for_sft(tmp_path, tok_cache):
    """SFT reads a plain-text file as one record, ``{"text": <the file>}``: a folder of ``.txt`` transcripts (one
    conversation per file, FastChat's real conversations here) needs no conversion; RL, which reads prompt
    records, refuses plain text naming the file."""
    convs = _preference_records()[:6]
    folder = tmp_path / "chats"
    folder.mkdir()
    for k, turns in enumerate(convs):
        (folder / f"{k:02d}.txt").write_text("\n".join(f"{'User' if r == 'user' else 'Assistant'}: {v}" for r, v in turns))
    blend = _blend(tmp_path, [{"name": "chats", "path": str(folder / "*.txt"), "weight": 1.0}])
    cfg = compile_stage("data-prep-sft", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                        tokenizer__cache_dir=tok_cache, split__validation_fraction=0.0, workers__count=1,
                        workers__engine="in_process")
    assert [p for p in validate_data(_Stage("data-prep-sft"), cfg) if p.severity == "error"] == []
    m = sft.prepare(sft.Settings.from_config(cfg), quiet=True)
    [d] = m["datasets"]
    assert d["records"] == d["conversations"] == len(convs) and d["skipped"] == {} and d["files"] == len(convs)
    from nemotron.data import rl

    rl_cfg = compile_stage("data-prep-rl", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "rl"))
    assert any("00.txt is plain text, and this stage reads records" in p.message
               for p in validate_data(_Stage("data-prep-rl"), rl_cfg))
    with pytest.raises(ConfigError, match=r"00\.txt is plain text, and this stage reads records"):
        rl.prepare(rl.Settings.from_config(rl_cfg), quiet=True)


def test_weights_whose_sum_is_not_finite_are_refused_by_dry_run_and_run(tmp_path, tok_cache):
    """Each weight finite, their sum not (1e308 + 1e308): the run wrote `Infinity` weights into blend.json (not
    JSON; Megatron's normalisation gives NaN) and recorded the artifact. Now the dry run and the run refuse it,
    naming the file and the fix, and nothing is written."""
    blend = _blend(tmp_path, [{"name": "a", "path": str(_need(WIKI)), "weight": 1e308},
                              {"name": "b", "path": str(WIKI), "weight": 1e308}])
    cfg = compile_stage("data-prep-pretrain", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                        tokenizer__cache_dir=tok_cache)
    want = f"{blend}: the weights of datasets a, b sum to inf"
    errors = [p for p in validate_data(_Stage("data-prep-pretrain"), cfg) if p.severity == "error"]
    assert any(p.message.startswith(want) and "scale them all down" in (p.valid or "") for p in errors), errors
    with pytest.raises(BlendProblems) as err:
        pretrain.prepare(pretrain.Settings.from_config(cfg), quiet=True)
    assert err.value.problems[0].startswith(want) and "scale them all down" in (err.value.hint or "")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("blend.json"))


def test_one_huge_weight_gives_finite_prefix_weights():
    """A weight near the largest float split over shards: weight * tokens overflowed to inf before the division."""
    from nemotron.data.blend import prefix_weights

    out = prefix_weights(1e308, [1_000_000, 3])
    assert all(map(math.isfinite, out)) and out[0] > out[1] > 0


def test_the_same_file_under_two_names_is_a_warning_of_dry_run_and_run(tmp_path, tok_cache, capsys):
    """One file listed under two dataset names (here once through `..`) was valid with no word: it is read and
    weighted twice. Both the dry run and the run now say so, naming the line, both names and the weights."""
    data = _need(WIKI)
    blend = _blend(tmp_path, [{"name": "a", "path": str(data), "weight": 1.0},
                              {"name": "b", "path": f"{data.parent}/../{data.parent.name}/{data.name}", "weight": 2.0}])
    cfg = compile_stage("data-prep-pretrain", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                        tokenizer__cache_dir=tok_cache)
    want = f"{blend}:1: datasets[1] (b): path "
    problems = validate_data(_Stage("data-prep-pretrain"), cfg)
    assert [p for p in problems if p.severity == "error"] == []
    [warn] = [p for p in problems if p.rule == "data-blend"]
    assert warn.severity == "warning" and warn.message.startswith(want), warn
    assert "is also datasets[0] (a)" in warn.message and "weights 2 + 1" in warn.message
    pretrain.prepare(pretrain.Settings.from_config(cfg), live_progress=False)
    out = capsys.readouterr().out
    assert f"warning: {warn.message}" in " ".join(out.split()), out  # the run says the dry run's line


def test_each_blend_problem_gets_only_the_advice_that_applies(tmp_path, tok_cache):
    """A path placeholder missing from path_vars was advised `optional: true ... or policies.empty_glob=skip` (which
    leave out a dataset whose path matches nothing: no help for a placeholder). Each problem now gets its own ways
    out, in the dry run's lines and in the run's error: a placeholder its value, a path that matches nothing the
    optional/empty_glob way out, a bad weight (pretrain) on_bad.bad_weight=skip."""
    blend = _blend(tmp_path, [{"name": "ph", "path": "{stage_dir}/a.jsonl", "weight": 1},
                              {"name": "none", "path": str(tmp_path / "nothing-*.jsonl"), "weight": 1},
                              {"name": "ok", "path": str(_need(WIKI)), "weight": 1}])
    cfg = compile_stage("data-prep-rl", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"))
    cfg["path_vars"] = {}
    errors = {p.message.split(": ", 2)[1]: p.valid for p in validate_data(_Stage("data-prep-rl"), cfg)
              if p.severity == "error"}
    ph, none = errors["datasets[0] (ph)"], next(v for k, v in errors.items() if "(none)" in k)
    assert ph == "fix each line named; give each placeholder named a value (path_vars.NAME=VALUE) or write the path out"
    assert "empty_glob" not in ph and "optional" not in ph
    assert none.endswith("optional: true (on the dataset) or policies.empty_glob=skip leaves a dataset whose path "
                         "matches nothing out") and "path_vars" not in none
    with pytest.raises(BlendProblems) as err:  # the run: one error, its hint names both ways out, each once
        from nemotron.data.driver import stage_blend
        from nemotron.data import rl

        stage_blend(rl.Settings.from_config(cfg))
    assert err.value.hints == [ph, none] and "path_vars.NAME=VALUE" in err.value.hint and "empty_glob" in err.value.hint
    bad = _blend(tmp_path, [{"name": "w", "path": str(WIKI), "weight": -1}])
    cfg = compile_stage("data-prep-pretrain", "tiny", blend_path=str(bad), output_dir=str(tmp_path / "o2"),
                        tokenizer__cache_dir=tok_cache)
    (weight,) = [p.valid for p in validate_data(_Stage("data-prep-pretrain"), cfg) if p.severity == "error"]
    assert weight == "fix each line named; on_bad.bad_weight=skip leaves a dataset with a bad weight out"
