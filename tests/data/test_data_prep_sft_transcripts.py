"""Speaker-prefixed transcripts: only the transcript's own speaker labels start turns.

A line inside a turn that starts with ``Question:``, ``Answer:``, ``Model:`` or ``Agent:`` is content, not a new
speaker (else the user's words become learned assistant text and labels vanish). The labels are learnt from the
record (:func:`nemotron.data.chat.transcript_speakers`); where two labels could each be one role's speaker, the
record is refused naming ``file:line`` and the transcript's lines.

Real data: every GPTeacher code instruction (../shared/data/sft) written as a ``User:``/``Assistant:`` transcript
must give back its instruction and its response unchanged (one response holds a ``    model: str`` line), and
every FastChat conversation written as a ``### Human:``/``### Assistant:`` transcript its turns.
"""

from __future__ import annotations

import json

import pytest

from nemotron.data import chat
from nemotron.errors import RuntimeFailure
from data_prep_sft_support import SHARED_DATA, compile_stage

GPTEACHER = SHARED_DATA / "sft" / "gpteacher-codegen-instruct.json"
FASTCHAT = SHARED_DATA / "sft" / "fastchat-dummy-conversation.json"


def _need(path):
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared data folder beside the checkout)")
    return json.loads(path.read_text(encoding="utf-8"))


def test_real_instructions_as_transcripts_keep_their_turns():
    changed = []
    for i, r in enumerate(_need(GPTEACHER)):
        prompt = r["instruction"] + (f"\n\n{r['input']}" if r["input"].strip() else "")
        msgs, _ = chat.normalise({"text": f"User: {prompt}\nAssistant: {r['response']}"}, None)
        got = [(m["role"], m["content"]) for m in msgs[1:]]
        if got != [("user", prompt.strip()), ("assistant", r["response"].strip())]:
            changed.append(i)
    assert changed == []


def test_real_conversations_as_transcripts_keep_their_turns():
    roles = {"human": "user", "gpt": "assistant"}
    for r in _need(FASTCHAT):
        turns = [(roles[t["from"]], t["value"].strip()) for t in r["conversations"]]
        while turns and turns[-1][0] != "assistant":
            turns.pop()
        text = "\n".join(f"### {'Human' if role == 'user' else 'Assistant'}: {value}" for role, value in turns)
        msgs, _ = chat.normalise({"text": text}, None)
        assert [(m["role"], m["content"]) for m in msgs[1:]] == turns, r["id"]


@pytest.mark.parametrize("text, turns", [
    ("User: Solve it.\nQuestion: what is 2+2?\nAnswer: 4\nAssistant: It is 4.",
     [("user", "Solve it.\nQuestion: what is 2+2?\nAnswer: 4"), ("assistant", "It is 4.")]),
    ("Human: Fix my config.\nAssistant: Set it so:\nModel: gpt\nAgent: none\nHuman: Thanks\nAssistant: Welcome.",
     [("user", "Fix my config."), ("assistant", "Set it so:\nModel: gpt\nAgent: none"), ("user", "Thanks"),
      ("assistant", "Welcome.")]),
    ("### Human: q\n### Assistant: a\nAnswer: still the assistant",
     [("user", "q"), ("assistant", "a\nAnswer: still the assistant")]),
    ("Question: What is the capital of France?\nAnswer: Paris.",  # Q&A labels are the speakers when nothing else is
     [("user", "What is the capital of France?"), ("assistant", "Paris.")]),
    ("System: Be brief.\nUser: Hi\nResponse: my words\nAssistant: Hello.",
     [("system", "Be brief."), ("user", "Hi\nResponse: my words"), ("assistant", "Hello.")]),
])
def test_only_the_transcripts_own_labels_start_turns(text, turns):
    msgs, _ = chat.normalise({"text": text}, None)
    got = [(m["role"], m["content"]) for m in msgs if m["role"] != "system" or m["content"]]
    assert got == turns


def test_ambiguous_speaker_labels_are_refused_with_file_and_line(tmp_path, tok_cache):
    from nemotron.data.sft import Settings, prepare

    data = tmp_path / "qa.jsonl"
    rows = [{"text": "Question: What?\nAnswer: 42"},
            {"text": "Question: What is 6 x 7?\nResponse: think first\nAnswer: 42"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    blend = tmp_path / "blend.json"
    blend.write_text(json.dumps({"datasets": [{"name": "qa", "path": str(data), "weight": 1.0}]}))
    over = {"blend_path": str(blend), "tokenizer__cache_dir": tok_cache, "split__validation_fraction": 0.0,
            "workers__count": 1, "workers__engine": "in_process"}
    m = prepare(Settings.from_config(compile_stage("data-prep-sft", "tiny", output_dir=str(tmp_path / "a"), **over)),
                quiet=True)
    [d] = m["datasets"]
    assert d["conversations"] == 1 and d["skipped"] == {"bad_record": 1}
    with pytest.raises(RuntimeFailure, match=rf"{data}:2: bad_record: transcript lines 2 and 3: 'Response:' and "
                                             r"'Answer:' could each be the assistant's speaker label"):
        prepare(Settings.from_config(compile_stage("data-prep-sft", "tiny", output_dir=str(tmp_path / "b"),
                                                   policies__bad_record="fail", **over)), quiet=True)
