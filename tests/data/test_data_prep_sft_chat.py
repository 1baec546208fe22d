"""The Nemotron 3 chat format and the assistant-only loss mask.

* Our template (stages/ultra3/data_prep_sft/nemotron3_chat.jinja) reproduces, character for character,
  the texts the released template rendered (tests/fixtures/chat/rendered.json; see its README), both with
  our own renderer and with Hugging Face transformers' chat-template renderer.
* The learned text of a sample is pinned for one turn, several turns, reasoning on, reasoning off and
  tool calls: exactly the assistant's output after the generation prompt, through ``<|im_end|>``,
  and nothing of the system/user/tool turns.
* Normalisation of every supported form and every policy, the tokenizer's chat tokens.
"""

from __future__ import annotations

import json

import pytest

from nemotron.data import chat
from data_prep_sft_support import TEMPLATE, chat_tokenizer, fixture_cases


@pytest.fixture(scope="module")
def template():
    return chat.load_template(str(TEMPLATE))


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return chat_tokenizer(str(tmp_path_factory.mktemp("tok")))[0]


def _render_case(render, spec, case):
    tools = spec["tools"][case["tools"]] if case.get("tools") else None
    return render(case["messages"], tools, bool(case.get("add_generation_prompt")), **(case.get("kwargs") or {}))


def test_fixtures_cover_the_format():
    spec, rendered = fixture_cases()
    names = [c["name"] for c in spec["cases"]]
    assert names == [c["name"] for c in rendered]
    for needed in ("one_turn", "several_turns", "reasoning_on", "reasoning_multi_turn", "reasoning_off_prompt",
                   "reasoning_multi_turn_keep_history", "tool_calls", "tool_calls_in_history", "medium_effort"):
        assert needed in names


def test_our_template_reproduces_the_released_renderings(template):
    spec, rendered = fixture_cases()
    for case, ref in zip(spec["cases"], rendered, strict=True):
        got = _render_case(lambda m, t, g, **kw: template.render(m, t, add_generation_prompt=g, **kw), spec, case)
        assert got == ref["text"], f"{case['name']}: our template renders differently from the released one"


def test_same_through_the_hugging_face_renderer():
    pytest.importorskip("transformers")
    from transformers.utils.chat_template_utils import render_jinja_template

    text = TEMPLATE.read_text(encoding="utf-8")
    spec, rendered = fixture_cases()
    for case, ref in zip(spec["cases"], rendered, strict=True):
        got = _render_case(lambda m, t, g, **kw: render_jinja_template(
            conversations=[m], tools=t, chat_template=text, add_generation_prompt=g, **kw)[0][0], spec, case)
        assert got == ref["text"], case["name"]


def learned_texts(template, record, *, reasoning="auto", history="split"):
    """The learned pieces of every sample of one record."""
    msgs, tools = chat.normalise(record, None, chat.ChatPolicy(reasoning=reasoning))
    out = []
    for sample in chat.training_samples(msgs, history):
        seg = chat.segment(template, sample, tools)
        assert "".join(seg.pieces) == seg.text
        out.append([p for p, learned in zip(seg.pieces, seg.learned, strict=True) if learned])
    return out


def test_mask_one_turn(template):
    rec = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of Peru?"},
                        {"role": "assistant", "content": "Lima."}]}
    # the generation prompt "<|im_start|>assistant\n<think></think>" is the template's, not learned
    assert learned_texts(template, rec) == [["Lima.<|im_end|>"]]


def test_mask_several_turns(template):
    rec = {"conversations": [{"from": "human", "value": "Prime?"}, {"from": "gpt", "value": "7"},
                             {"from": "human", "value": "Bigger?"}, {"from": "gpt", "value": " 101 "}]}
    assert learned_texts(template, rec) == [["7<|im_end|>", "101<|im_end|>"]]


def test_mask_reasoning_on(template):
    rec = {"messages": [{"role": "user", "content": "Is 91 prime?"},
                        {"role": "assistant", "reasoning_content": "91 = 7 x 13.", "content": "No."}]}
    # the generation prompt with reasoning on ends with "<think>\n"; the reasoning, "</think>" and the
    # answer are learned
    assert learned_texts(template, rec) == [["91 = 7 x 13.</think>No.<|im_end|>"]]


def test_mask_reasoning_history_split_and_keep(template):
    rec = {"messages": [{"role": "user", "content": "17+25?"},
                        {"role": "assistant", "reasoning_content": "Add.", "content": "42"},
                        {"role": "user", "content": "Double it."},
                        {"role": "assistant", "reasoning_content": "Times two.", "content": "84"}]}
    # split: the first turn's reasoning is dropped from the history by the template, so each user turn
    # becomes a sample that learns only its own answer
    assert learned_texts(template, rec) == [["Add.</think>42<|im_end|>"], ["Times two.</think>84<|im_end|>"]]
    # keep: one sample rendered with truncate_history_thinking=false learns both
    assert learned_texts(template, rec, history="keep") == [["Add.</think>42<|im_end|>",
                                                              "Times two.</think>84<|im_end|>"]]


def test_mask_reasoning_off(template):
    rec = {"messages": [{"role": "user", "content": "Is 91 prime?"},
                        {"role": "assistant", "reasoning_content": "91 = 7 x 13.", "content": "No."}]}
    # reasoning removed: the prompt ends with "<think></think>"; only the answer is learned
    assert learned_texts(template, rec, reasoning="off") == [["No.<|im_end|>"]]


def test_mask_tool_calls(template):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    rec = {"tools": tools, "messages": [
        {"role": "user", "content": "Weather in Lyon?"},
        {"role": "assistant", "content": "Checking.",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "21 C."}]}
    assert learned_texts(template, rec) == [[
        "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n</function>\n"
        "</tool_call>\n<|im_end|>",
        "21 C.<|im_end|>"]]
    msgs, t = chat.normalise(rec, None)
    seg = chat.segment(template, chat.training_samples(msgs)[0], t)
    context = "".join(p for p, learned in zip(seg.pieces, seg.learned, strict=True) if not learned)
    # nothing of the system block, the user turn or the tool result is learned
    assert "# Tools" in context and "<tool_response>\n{\"temp\": 21}\n</tool_response>" in context
    assert "Weather in Lyon?" in context


def test_token_mask_matches_the_learned_text(template, tok):
    spec, _ = fixture_cases()
    for case in spec["cases"]:
        if case.get("add_generation_prompt") or case.get("kwargs"):
            continue
        tools = spec["tools"][case["tools"]] if case.get("tools") else None
        msgs, t = chat.normalise({"messages": case["messages"], "tools": tools}, None)
        segs = [chat.segment(template, s, t) for s in chat.training_samples(msgs)]
        for seg, toks in zip(segs, chat.tokenize_samples(tok, segs), strict=True):
            # pieces are tokenized apart, as at inference (the prompt is tokenized, then the model writes):
            # lossless, and equal to tokenizing the whole text unless a learned piece starts with
            # whitespace that would merge with the prompt's last newline ("<think>\n" + "\n  x")
            assert tok.decode(toks.ids, skip_special_tokens=False) == seg.text
            if not any(learned and p[:1].isspace() for p, learned in zip(seg.pieces, seg.learned, strict=True)):
                assert toks.ids == tok.encode(seg.text, add_special_tokens=False).ids, case["name"]
            learned_ids = [i for i, m in zip(toks.ids, toks.learned, strict=True) if m]
            want = "".join(p for p, learned in zip(seg.pieces, seg.learned, strict=True) if learned)
            assert tok.decode(learned_ids, skip_special_tokens=False) == want
            assert toks.turn_ends and toks.turn_ends[-1] == len(toks.ids)


def test_chat_tokens_take_placeholder_ids(tmp_path):
    tk, ct = chat_tokenizer(str(tmp_path))
    assert ct.info.vocab_size == 131_072 == ct.source["vocab_size"]
    assert list(ct.added) == ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                              "<tool_response>", "</tool_response>"]
    assert sorted(ct.added.values()) == list(range(20, 28))  # the first <SPECIAL_n> fillers of Tekken
    for token, tid in ct.added.items():
        assert tk.encode(f"a{token}b", add_special_tokens=False).ids[1] == tid
    assert ct.info.vocab_sha256 != ct.source["vocab_sha256"]


def test_forms_normalise_to_one_conversation():
    want = [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"}]
    assert chat.normalise({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
                          None)[0] == want
    assert chat.normalise({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]},
                          None)[0] == want
    assert chat.normalise({"instruction": "Hi", "input": "", "output": "Hello"}, None)[0] == want
    msgs, _ = chat.normalise({"instruction": "Sum", "input": "1 2", "response": "3"}, "alpaca")
    assert msgs[1]["content"] == "Sum\n\n1 2"
    msgs, _ = chat.normalise({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                           {"role": "assistant", "content": "<think>\nx</think>y"}]}, None)
    assert msgs[1]["content"] == "ab" and msgs[2] == {"role": "assistant", "content": "y", "reasoning_content": "x"}


@pytest.mark.parametrize("record, reason", [
    ({"messages": [{"role": "user", "content": "Hi"}]}, "no_assistant_turn"),
    ({"messages": [{"role": "critic", "content": "x"}, {"role": "assistant", "content": "y"}]}, "unknown_role"),
    ({"messages": [{"role": "user", "content": "  "}, {"role": "assistant", "content": "y"}]}, "empty_content"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]}, "empty_content"),
    ({"text": "no chat here"}, "bad_record"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y",
                   "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]}]}, "bad_record"),
    ({"messages": [{"role": "user", "content": {"image": 1}}, {"role": "assistant", "content": "y"}]}, "bad_record"),
])
def test_problems_name_their_reason(record, reason):
    with pytest.raises(chat.RecordProblem) as err:
        chat.normalise(record, None)
    assert err.value.reason == reason


def test_consecutive_same_role_merge_or_skip():
    rec = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                        {"role": "assistant", "content": "c"}, {"role": "tool", "content": "t1"},
                        {"role": "tool", "content": "t2"}, {"role": "assistant", "content": "d"}]}
    msgs, _ = chat.normalise(rec, None)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert msgs[1]["content"] == "a\n\nb"  # merged; consecutive tool results are left alone
    with pytest.raises(chat.RecordProblem) as err:
        chat.normalise(rec, None, chat.ChatPolicy(consecutive_same_role="skip"))
    assert err.value.reason == "consecutive_same_role"


def test_template_mismatch_is_an_error(tmp_path):
    # a template that numbers turns from the end renders a different prefix than the whole conversation
    bad = tmp_path / "bad.jinja"
    bad.write_text("{%- for m in messages -%}<|im_start|>{{ m.role }} {{ messages | length - loop.index0 }}\n"
                   "{{ m.content }}<|im_end|>\n{%- endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant\n"
                   "{%- endif -%}")
    msgs, _ = chat.normalise({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
                             None)
    with pytest.raises(chat.TemplateMismatch) as err:
        chat.segment(chat.ChatTemplate(bad.read_text(), str(bad)), chat.training_samples(msgs)[0], None)
    assert err.value.reason == "template_mismatch" and "not a prefix" in err.value.detail


def test_rendered_fixture_provenance_is_recorded():
    from data_prep_sft_support import FIXTURES

    doc = json.loads((FIXTURES / "rendered.json").read_text(encoding="utf-8"))
    assert doc["template_source"] and len(doc["template_sha256"]) == 64 and doc["renderer"].startswith("transformers")
