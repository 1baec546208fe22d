"""Contract: ``nemotron ultra3 data inspect blend.json --step N`` lists exactly the samples Megatron-Core's blended GPT
dataset (c8288b6) puts in global batch N, on a real ``data prep pretrain -c tiny`` output.

The upstream side is the trainer's own path: the compiled ``pretrain -c tiny`` config translated by our entry
(:func:`nemotron.runtime.megatron.megatron_bridge.translate`), set on Megatron-Bridge's recipe base, then per case the
sequence length, iterations, global batch size, seed and blend weights changed on that container,
``get_train_valid_test_num_samples`` -> ``get_dataset_provider`` -> ``BlendedMegatronDatasetBuilder(GPTDataset)``.
For every sample of the step's batch (consumed samples ``(N-1) x B`` .. ``N x B - 1``, the order of Megatron-Bridge's
pretraining sampler) it reads ``BlendedDataset.dataset_index`` / ``dataset_sample_index`` and the ``GPTDataset``'s
``_query_document_sample_shuffle_indices`` (the token ids and document ids ``__getitem__`` is made from).

Asserted: for every case and step, the dataset id, the dataset's sample index, the document ids and the token ids
as int64 bytes are identical to :mod:`nemotron.data.megatron_batch`'s, and ``__getitem__``'s ``tokens``/``labels``
are those ids shifted (pad ids aside). The cases cover one epoch and many, the final epoch shuffled apart and not,
one prefix and five, unequal weights, and two seeds.

Where the proof stops: no ``torch.distributed`` (the builder builds every dataset locally, upstream's own branch for
it); no batch-size ramp-up; the data loader's workers and ``dataloader_type=cyclic`` are not modelled.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from test_megatron_data import megatron_helpers

pytestmark = pytest.mark.timeout(900)

SCRIPT = r'''
import hashlib, importlib.util, sys
from upstream import read_payload, write_result

p = read_payload()
spec = importlib.util.spec_from_file_location("megatron.core.datasets.helpers_cpp", p["helpers_so"])
helpers_cpp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helpers_cpp)
sys.modules[spec.name] = helpers_cpp

import numpy as np
from megatron.bridge.data.loaders import get_train_valid_test_num_samples
from megatron.bridge.data.utils import get_dataset_provider
from megatron.bridge.recipes.common import _pretrain_common
from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer

bc = p["bc"]
out = []
tok = None
for case in p["cases"]:
    c = _pretrain_common()
    for section in ("tokenizer", "train", "validation"):
        for key, value in (bc["sections"].get(section) or {}).items():
            setattr(getattr(c, section), key, value)
    for key, value in bc["dataset"].items():
        if key == "blend_per_split":
            value = [None if b is None else (list(b[0]), list(b[1])) for b in value]
        setattr(c.dataset, key, value)
    if tok is None:
        tok = build_tokenizer(c.tokenizer)
    c.train.train_iters = case["train_iters"]
    c.train.global_batch_size = case["gbs"]
    c.dataset.seq_length = case["seq"]
    c.dataset.random_seed = case["seed"]
    c.dataset.path_to_cache = case["cache"]
    c.dataset.blend_per_split = [(list(case["prefixes"]), list(case["weights"])), None, None]
    c.dataset.mid_level_dataset_surplus = case["surplus"]
    c.dataset.tokenizer = tok
    c.dataset.finalize()
    nums = get_train_valid_test_num_samples(c)
    try:
        train = get_dataset_provider(c.dataset)([nums[0], 0, 0], c.dataset)[0]
    except IndexError as exc:  # the blend oversamples a dataset: Megatron-Core refuses it
        out.append({"num_samples": list(nums), "refused": str(exc)})
        continue
    blended = hasattr(train, "dataset_index")
    res = {"num_samples": list(nums), "class": type(train).__name__, "len": len(train), "steps": {}}
    for step in case["steps"]:
        samples = []
        for i in range((step - 1) * case["gbs"], step * case["gbs"]):
            if blended:
                d, s = int(train.dataset_index[i]), int(train.dataset_sample_index[i])
                gpt = train.datasets[d]
            else:
                d, s, gpt = 0, i, train
            text, docs = gpt._query_document_sample_shuffle_indices(s)
            item = train[i]
            pad = gpt._pad_token_id
            tokens, labels = item["tokens"].numpy(), item["labels"].numpy()
            shifted = bool(np.all((tokens == text[:-1]) | (text[:-1] == pad)) and np.all((labels == text[1:]) | (text[1:] == pad)))
            samples.append({"dataset": d, "sample": s, "documents": [int(x) for x in docs],
                            "sha256": hashlib.sha256(np.asarray(text, dtype=np.int64).tobytes()).hexdigest(),
                            "n": int(len(text)), "getitem_is_the_text": shifted,
                            "epochs": int(getattr(gpt, "num_samples", 0) or 0)})
        res["steps"][str(step)] = samples
    out.append(res)
write_result(out)
'''


def _bc_payload(bc) -> dict:
    return {"sections": {k: bc.sections.get(k) or {} for k in ("tokenizer", "train", "validation")},
            "dataset": json.loads(json.dumps(bc.dataset))}


@pytest.fixture(scope="module")
def prepared_pretrain(ray_instance, tok_cache, shared_data, tmp_path_factory):
    """A real tiny pretrain data prep (the shared-data sample) and the `pretrain -c tiny` config translated on it."""
    import sysconfig

    from config_support import compile_stage
    from nemotron.data import pretrain as dp_pretrain
    from nemotron.data.outputs import data_manifest, megatron_tokenizer
    from nemotron.runtime.megatron import megatron_bridge as mb
    from nemotron.runtime.megatron.pretrain_data import read_blend

    root = tmp_path_factory.mktemp("megatron-batch")
    cfg = compile_stage("data-prep-pretrain", "tiny", output_dir=str(root / "pretrain"), tokenizer__cache_dir=tok_cache,
                        sample=120, shards={"target_tokens": 20_000},
                        path_vars={"stdlib": sysconfig.get_paths()["stdlib"], "shared_data": str(shared_data)})
    manifest = dp_pretrain.prepare(dp_pretrain.Settings.from_config(cfg), quiet=True)
    blend_json = root / "pretrain" / "blend.json"
    train = compile_stage("pretrain", "tiny", data__per_split_data_args_path=str(blend_json),
                          checkpoint__save=str(root / "ckpt"))
    m, where = data_manifest(str(blend_json))
    bc = mb.translate(train, "pretrain", blend=read_blend(blend_json), data_tokenizer=megatron_tokenizer(m, where))
    return {"root": root, "manifest": manifest, "blend": blend_json, "bc": bc}


def _cases(prepared) -> list[dict]:
    blend = json.loads(prepared["blend"].read_text())["train"]
    weights, prefixes = blend[0::2], [str(prepared["blend"].parent / p) for p in blend[1::2]]  # relative: resolved
    cases = [
        # the tiny run itself: 20 iterations x 16 at 4096 tokens. Megatron-Core refuses it: a dataset of 65 samples
        # is asked for 66 (its default surplus of 0.5 % rounds to nothing at that size); so must we
        {"prefixes": prefixes, "weights": weights, "train_iters": 20, "gbs": 16, "seq": 4096, "seed": 1234,
         "steps": [1, 2, 11, 20]},
        # the same with the surplus raised as its message advises: many epochs of every shard
        {"prefixes": prefixes, "weights": weights, "train_iters": 20, "gbs": 16, "seq": 4096, "seed": 1234,
         "steps": [1, 2, 11, 20], "surplus": 0.1},
        # short sequences, few samples: one epoch, the final-epoch split not taken
        {"prefixes": prefixes, "weights": weights, "train_iters": 3, "gbs": 4, "seq": 64, "seed": 1234, "steps": [1, 3]},
        # unequal weights, another seed, a length that does not divide anything
        {"prefixes": prefixes, "weights": [w * (i + 1) for i, w in enumerate(weights)], "train_iters": 7, "gbs": 6,
         "seq": 333, "seed": 7, "steps": [1, 4, 7]},
        # one prefix alone: no BlendedDataset, the GPTDataset itself
        {"prefixes": prefixes[:1], "weights": [1.0], "train_iters": 5, "gbs": 8, "seq": 512, "seed": 1234,
         "steps": [1, 5]},
    ]
    # a run just past one epoch of the first prefix: the final epoch shuffled apart (below 80 % of an epoch)
    from nemotron.data.indexed import read_index

    tokens = int(read_index(prefixes[0])["lengths"].sum())
    seq = 128
    per_epoch = (tokens - 1) // seq
    cases.append({"prefixes": prefixes[:1], "weights": [1.0], "train_iters": per_epoch + 3, "gbs": 1, "seq": seq,
                  "seed": 1234, "steps": [1, per_epoch + 1, per_epoch + 3]})
    for n, case in enumerate(cases):
        case["cache"] = str(prepared["root"] / f"cache-{n}")
        case.setdefault("surplus", 0.005)
    return cases


@pytest.fixture(scope="module")
def compared(upstream, prepared_pretrain):
    cases = _cases(prepared_pretrain)
    theirs = upstream.run(SCRIPT, {"helpers_so": str(megatron_helpers(upstream)), "bc": _bc_payload(prepared_pretrain["bc"]),
                                   "cases": cases}, timeout=900)
    return cases, theirs


def test_global_batch_is_byte_identical_to_megatron_core(compared):
    import numpy as np

    from nemotron.data import megatron_batch as mbatch

    cases, theirs = compared
    assert len(theirs) == len(cases)
    checked = refused = 0
    kinds = set()
    for case, res in zip(cases, theirs, strict=True):
        assert res["num_samples"][0] == case["train_iters"] * case["gbs"]
        pairs = list(zip(case["weights"], case["prefixes"], strict=True))
        if "refused" in res:  # Megatron-Core refused the blend: ours must too, naming the same dataset
            with pytest.raises(mbatch.BatchError, match="more than its") as exc:
                mbatch.build_train(pairs, res["num_samples"][0], case["seq"], seed=case["seed"], surplus=case["surplus"])
            import re

            asked, size = re.search(r"requests (\d+) samples .* of its size (\d+)", res["refused"]).groups()
            assert f"for {asked} samples, more than its {size}" in str(exc.value), (res["refused"], str(exc.value))
            refused += 1
            continue
        train = mbatch.build_train(pairs, res["num_samples"][0], case["seq"], seed=case["seed"], surplus=case["surplus"])
        assert len(train) == res["len"], case
        kinds.add((res["class"], tuple(ds.epochs > 1 for ds in train.datasets), any(ds.separate_final_epoch for ds in train.datasets)))
        for step, samples in res["steps"].items():
            ours = mbatch.global_batch(train, int(step), case["gbs"])
            assert len(ours) == len(samples) == case["gbs"]
            for o, t in zip(ours, samples, strict=True):
                assert (o["dataset_id"], o["dataset_sample"], o["documents"]) == (t["dataset"], t["sample"], t["documents"]), (case["seq"], step)
                assert len(o["tokens"]) == t["n"] == case["seq"] + 1
                assert hashlib.sha256(np.asarray(o["tokens"], dtype=np.int64).tobytes()).hexdigest() == t["sha256"]
                assert t["getitem_is_the_text"]
                checked += 1
    assert checked > 100 and refused == 1
    # the cases reached what they are for: several epochs, a final epoch set apart, a lone GPTDataset
    assert any(sep for _, _, sep in kinds), kinds
    assert any(any(multi) for _, multi, _ in kinds), kinds
    assert {"BlendedDataset", "GPTDataset"} <= {cls for cls, _, _ in kinds}, kinds
