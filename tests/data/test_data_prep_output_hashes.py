"""Data prep outputs are byte-identical to the ones recorded before the speed work (issue 19), whichever
engine runs the tasks: the driver process itself (``workers.engine=in_process``) or Ray.

The expected hashes were recorded with ``python tests/data/output_hashes.py pretrain|sft OUT`` on the code
before that change (Ray engine, the only one then), on the real shared data files and the tiny config's
Tekken tokenizer; see tests/data/output_hashes.py for what each hash covers.
"""

from __future__ import annotations

import json

import pytest

from output_hashes import SFT_FILES, WIKI, pretrain_config, pretrain_hashes, sft_config, sft_hashes

pytestmark = [pytest.mark.timeout(600), pytest.mark.skipif(not WIKI.is_file() or not all(f.is_file() for f in SFT_FILES),
                                                          reason=f"shared data folder absent ({WIKI.parent.parent})")]

PRETRAIN = {
    'data/shakespeare/test_00000.bin': '5ca32798cbac81873ef81a241dda3a682de7b53effe01ae6efbd6230d30bff47',
    'data/shakespeare/test_00000.idx': '71c95d7eeb81d38cd90dd8ace5dcc22bc530af7acae3bffedbad1c9df9eb624d',
    'data/shakespeare/train_00000.bin': '12272d93027a880385dd596a84a9d17c110ffdecab57ebe5b038a2ac932449b3',
    'data/shakespeare/train_00000.idx': '36393fcb0fac11ae2834bfc6170f9efd1f9069a70f85d74283052862a56a1e8b',
    'data/shakespeare/valid_00000.bin': '06ec7b859a1bcc6c3568de1ecebbb56d10a06b0b4542022623f73c022d725144',
    'data/shakespeare/valid_00000.idx': '4d481ecc609600fde9cee6936a5c9c8a4ff2ac99f53fe63327cb0d7d3af51526',
    'data/wiki/test_00000.bin': 'b7683ede5643e5f36ef1689d8f06825352770e75d3f78dfa4d77d22eac4c1f65',
    'data/wiki/test_00000.idx': '021aa6b96df3ffbd92b207eb13631497decb20df74679837de140d5daa7af598',
    'data/wiki/train_00000.bin': 'cd3a79020235a83237e834dc84b8f8f7f4270b0f60279097e0ff9cf5488e9585',
    'data/wiki/train_00000.idx': '25537a9a1ee2e1ede010688acac4ca756b6f2468c99b6f9c5a6ef7f78f5cc288',
    'data/wiki/train_00001.bin': 'e8b210c7fdee7164d661ddaa9b88511a8586b29c82e9c0938083f8bb73eb9566',
    'data/wiki/train_00001.idx': 'c1188211a33e47fbebbae550f6c2c56c14cb0f542c0e7251b3e0ac70a23bf788',
    'data/wiki/train_00002.bin': 'fef461653f61877088672ecafaf44894841830a18d302e8125f55bd97869eea5',
    'data/wiki/train_00002.idx': '1cf20c13bc14512fbba3e75e4e7c5ca5772a7eac0914fa02bcc7d1bf40537d60',
    'data/wiki/train_00003.bin': '7faf4b12ae972b2003a52d5f979b88329bad9d907bec9a31dcd2ff5a01681a12',
    'data/wiki/train_00003.idx': '6d4e5dea3cb3be53bafded48c9cf37d1f2d770c31c353804a7e50292e9ff4fc0',
    'data/wiki/valid_00000.bin': '739dd0e4efc2913ba8bb2c195e0c655b5aafc79326b0eab51b7464a957dcf253',
    'data/wiki/valid_00000.idx': 'e30ab507802220c2a16d9fc7508abcd4dbd4c65ae5482b9f485f9ac6deeef607',
}

SFT = {
    'chat-sample/ids': 'dbefd4e5a4f746bda57706388c7fbb1d262d14338d58dc956e7814415843c1a5',
    'chat-sample/lengths': '32daff5c9ce377f452f607b69a22e2d8223b61e9df500e0ff3580a9283020ca3',
    'chat-sample/mask': 'dc788028defa2341be6fcbd4372120b13f1283b73bbe64ac4619d259acba7c9e',
    'fastchat-dummy/ids': '65d361ad280a9b4cd22eb2dcf1510f92bbfe9d1ba355c3aea38e1fd79d8d2c6b',
    'fastchat-dummy/lengths': 'c154c867188f040dbf0ea96bd28b6ffc41ef8b9fd2cc570b9fe791463a96c1a4',
    'fastchat-dummy/mask': '323dea1f20740c92e1f88bf0f48e31d8334ffc42638cbbf1df8e6cd9e4187179',
    'gpteacher-codegen/ids': '9747ea1c922814ad8218045eb81dbcb6ad37c76d54c56a4038149b76e23bfcd4',
    'gpteacher-codegen/lengths': '24e2413579b4282d96d251941a09fdfe16e3fe05197421c8f633a263a3f970c5',
    'gpteacher-codegen/mask': '079aaea32978a7fe22881e710ebed028f90c72cdd7b04fa35f1e2c7ced1461cf',
    'train/input_ids': '7c66f7031d90413a26059c5664a35a8db462860a352191b2ffd365ac1c2050db',
    'train/loss_mask': '8b35126cfca3479ea50e3c169b4d8ee11da48ad9fdf68d2472cb270da80d79c1',
    'train/seq_start_id': '0ad517e729af4d639a8c3cbcdca099cef2080ee55b9eab20d206183f937811ba',
    'valid/input_ids': '4538d792d21d9cbabca79b49341ca8918277a3ad8c6be7744454425f175cff29',
    'valid/loss_mask': '4e71e872169f17cfc7468b5684b2f69c3a6e1860a4016fda1f06ef016428476d',
    'valid/seq_start_id': '0e86ca70b8f7b07141b44cab228756c6fe33df16a17be5568bba8d9d609c90ad',
}


def _pretrain(out, tok_cache, **overrides):
    from nemotron.data.pretrain import Settings, prepare

    return prepare(Settings.from_config(pretrain_config(out, tok_cache, **overrides)), quiet=True)


def _sft(out, tok_cache, **overrides):
    from nemotron.data.sft import Settings, prepare

    return prepare(Settings.from_config(sft_config(out, tok_cache, **overrides)), quiet=True)


def test_pretrain_in_process_writes_the_recorded_bytes(tok_cache, tmp_path):
    m = _pretrain(tmp_path / "out", tok_cache, workers={"engine": "in_process", "count": 2})
    assert m["run"]["engine"] == "in_process"
    assert pretrain_hashes(tmp_path / "out") == PRETRAIN


def test_pretrain_ray_writes_the_recorded_bytes(ray_instance, tok_cache, tmp_path):
    m = _pretrain(tmp_path / "out", tok_cache, workers={"engine": "ray", "count": 2})
    assert m["run"]["engine"] == "ray"
    assert pretrain_hashes(tmp_path / "out") == PRETRAIN


def test_sft_in_process_writes_the_recorded_sequences_masks_and_packs(tok_cache, tmp_path):
    m = _sft(tmp_path / "out", tok_cache, workers={"engine": "in_process", "count": 1})
    assert m["run"]["engine"] == "in_process"
    assert sft_hashes(tmp_path / "out", m) == SFT


def test_sft_ray_with_split_json_arrays_writes_the_recorded_bytes(ray_instance, tok_cache, tmp_path):
    # 256 KiB shards: the 2.2 MB GPTeacher array (one file) becomes several shards on two workers
    m = _sft(tmp_path / "out", tok_cache, workers={"engine": "ray", "count": 2}, shards={"target_bytes": 262144})
    assert m["run"]["engine"] == "ray"
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    cut = [sh["pieces"] for sh in plan["shards"] if sh["dataset"] == "gpteacher-codegen"]
    assert len(cut) >= 4 and all(p["fmt"] == "json" for pieces in cut for p in pieces), cut
    assert len({p["file"] for pieces in cut for p in pieces}) == 1
    assert sft_hashes(tmp_path / "out", m) == SFT
