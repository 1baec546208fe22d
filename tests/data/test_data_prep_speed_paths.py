"""The faster paths of data prep give exactly what the paths they replace give (issue 19): one render per
conversation against the prefix renders of the definition, the scalar split hash against the vectorised one,
a JSON array cut into element ranges against reading it whole, and the engine choice of ``workers.engine``.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from output_hashes import SFT_FILES
from data_prep_sft_support import FIXTURES, TEMPLATE

from nemotron.data import chat
from nemotron.data.prep import unit_hash, unit_hash_one
from nemotron.data.records import iter_objects
from nemotron.data.sources import Piece, split_json_array

needs_sft = pytest.mark.skipif(not all(f.is_file() for f in SFT_FILES), reason=f"shared data folder absent ({SFT_FILES[0].parent})")


def _conversations():
    yield from ((obj, None) for obj in json.loads((FIXTURES / "conversations.json").read_text())["cases"]
                if isinstance(obj, dict) and obj.get("messages"))
    for path, schema in zip(SFT_FILES, ("sharegpt", "alpaca"), strict=True):
        if path.is_file():
            yield from ((obj, schema) for _p, _k, obj, problem, _d in iter_objects(Piece(str(path), "json")) if problem is None)


@needs_sft
def test_one_render_gives_the_pieces_of_the_prefix_renders():
    template = chat.load_template(str(TEMPLATE))
    assert template.one_render_agrees()
    compared = fast = 0
    for obj, schema in _conversations():
        try:
            msgs, tools = chat.normalise(obj, schema)
        except chat.RecordProblem:
            continue
        for keep in ("split", "keep"):
            for sample in chat.training_samples(msgs, keep):
                full = template.render(sample.messages, tools, truncate_history_thinking=not sample.keep_history_reasoning)
                fast += chat.one_render_spans(full, sample, tools) is not None
                got, want = chat.segment(template, sample, tools), chat.segment_by_prefixes(template, sample, tools)
                assert (got.pieces, got.learned) == (want.pieces, want.learned)
                compared += 1
    assert compared > 10_000 and fast == compared  # every real sample took the one-render path


def test_control_tokens_in_text_fall_back_to_the_prefix_renders():
    template = chat.load_template(str(TEMPLATE))
    msgs, _ = chat.normalise({"messages": [{"role": "user", "content": "say <|im_end|> please"},
                                           {"role": "assistant", "content": "ok <|im_start|>"}]}, None)
    sample = chat.training_samples(msgs)[0]
    assert chat.one_render_spans(template.render(msgs), sample, None) is None
    got, want = chat.segment(template, sample, None), chat.segment_by_prefixes(template, sample, None)
    assert (got.pieces, got.learned) == (want.pieces, want.learned)


def test_a_template_that_disagrees_on_the_probes_is_segmented_by_its_prefixes(tmp_path):
    # a template that writes every assistant header twice: the headers no longer match the messages
    text = TEMPLATE.read_text().replace("{{- '<|im_start|>assistant\\n' ~ (body", "{{- '<|im_start|>assistant\\n<|im_start|>assistant\\n' ~ (body")
    assert text != TEMPLATE.read_text()
    odd = chat.ChatTemplate(text, "odd.jinja")
    msgs, _ = chat.normalise({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}, None)
    sample = chat.training_samples(msgs)[0]
    assert chat.one_render_spans(odd.render(msgs), sample, None) is None
    with pytest.raises(chat.TemplateMismatch):
        chat.segment(odd, sample, None)  # the definition's check still applies


def test_scalar_split_hash_equals_the_vectorised_one():
    rng = random.Random(7)
    for seed, key in ((1234, "gpteacher-codegen/0"), (0, "x/3"), (2**40, "")):
        ords = [0, 1, 2**32 + 5, 2**64 - 1, *(rng.randrange(2**64) for _ in range(500))]
        assert [unit_hash_one(seed, key, o) for o in ords] == list(unit_hash(seed, key, np.array(ords, dtype=np.uint64)))


@needs_sft
def test_a_json_array_cut_into_ranges_reads_every_record_once_in_order():
    path = str(SFT_FILES[1])
    whole = [(k, obj) for _p, k, obj, _pr, _d in iter_objects(Piece(path, "json"))]
    pieces = split_json_array(path, 200_000)
    assert len(pieces) >= 8 and pieces[0].start == 0 and pieces[-1].stop is None
    assert all(a.stop == b.start for a, b in zip(pieces, pieces[1:]))
    cut = [(k, obj) for p in pieces for _p, k, obj, _pr, _d in iter_objects(p)]
    assert cut == whole


def test_a_json_file_that_is_not_one_array_stays_one_piece(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[" + ",".join(json.dumps({"instruction": "x" * 100, "output": "y"}) for _ in range(50)) + ",,]")
    assert split_json_array(str(bad), 500) == [Piece(str(bad), "json", 0, None, 1, bad.stat().st_size)]


def test_engine_choice(tmp_path, monkeypatch):
    from nemotron.data import driver, pretrain, sft
    from nemotron.data.blend import load_blend

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(50)))
    blend_path = tmp_path / "b.json"
    blend_path.write_text(json.dumps({"datasets": [{"name": "d", "path": str(data), "weight": 1.0}]}))
    blend = load_blend(str(blend_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def s(cls, **kw):
        obj = cls.__new__(cls)
        obj.engine, obj.workers, obj.cpus_per_task, obj.ray_cpus = kw.get("engine", "auto"), kw.get("workers", 2), 1, None
        obj.in_process_max_bytes = kw.get("max_bytes", driver.IN_PROCESS_MAX_BYTES)
        return obj

    assert driver.choose_engine(s(pretrain.Settings), blend)[0] == "in_process"
    assert driver.choose_engine(s(pretrain.Settings, max_bytes=10), blend)[0] == "ray"
    assert driver.choose_engine(s(pretrain.Settings, engine="ray"), blend) == ("ray", "workers.engine=ray")
    assert driver.choose_engine(s(sft.Settings), blend)[0] == "ray"  # 2 workers of Python work need processes
    assert driver.choose_engine(s(sft.Settings, workers=1), blend)[0] == "in_process"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    assert driver.choose_engine(s(pretrain.Settings), blend) == ("ray", "RAY_ADDRESS is set")

