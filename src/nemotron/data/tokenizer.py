"""Tokenizers for data prep: a Hugging Face ``tokenizer.json`` (hub id, local folder or file), or an
offline vocabulary in another format converted once into one.

Everything downstream works on a plain ``tokenizers.Tokenizer`` built from a ``tokenizer.json``
file: it is fast (Rust), needs neither ``transformers`` nor network access in the workers, and one
file fully determines the token ids. :func:`resolve` finds or builds that file and returns a
:class:`TokenizerInfo`; :func:`load` loads it (cached per process).

Supported sources (``tokenizer.name`` in the stage config):

* a Hugging Face hub id (``org/name``; needs ``huggingface_hub`` and a reachable hub, or its cache);
* a local folder holding ``tokenizer.json`` (plus ``tokenizer_config.json`` for the BOS/EOS names),
  or a slow tokenizer that ``transformers`` can turn into a fast one (converted once, cached);
* a ``tokenizer.json`` file;
* a mistral-common Tekken vocabulary (``tekken_*.json``: byte-level BPE given as ranked byte strings,
  tiktoken style). It is converted once into an equivalent ``tokenizer.json`` and cached on disk under
  ``cache_dir/<hash of the source file>/``; the test suite checks the conversion against
  mistral-common's own encoder.

Facts used by the Tekken conversion (from the mistral-common file format): the file's ``config`` gives
``default_vocab_size`` (131,072 in ``tekken_240718/240911.json``) and ``default_num_special_tokens``
(1,000); ids ``0..num_special-1`` are control tokens (``<unk>``, ``<s>``, ``</s>``, ... then
``<SPECIAL_n>`` fillers when the file lists none), and the byte-level BPE ranks follow, shifted by the
number of special tokens and cut at the vocabulary size.
"""

from __future__ import annotations

import contextlib
import base64
import json
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from nemotron.data.files import atomic_write_bytes, atomic_write_json, sha256_file
from nemotron.errors import ConfigError, RuntimeFailure

#: Bump when the conversion's output changes, so cached conversions are rebuilt.
CONVERTER_VERSION = 1

# Control tokens of Tekken files that carry no ``special_tokens`` list, in id order
# (mistral-common's default list for tokenizer versions up to v7).
_TEKKEN_DEFAULT_SPECIALS = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
    "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
)


@dataclass(frozen=True)
class TokenizerInfo:
    """What data prep needs to know about a tokenizer; recorded in the manifest.

    Attributes:
        name: the configured source (hub id or path), as the user wrote it.
        json_path: local ``tokenizer.json`` that workers load.
        kind: ``"hub"``, ``"folder"``, ``"file"`` or ``"converted:<format>"``.
        vocab_size: number of ids, added tokens included (max id + 1); chooses the on-disk dtype.
        vocab_sha256: SHA-256 of the canonical JSON of the token→id mapping (added tokens included): two
            tokenizers with equal hashes map every token string to the same id.
        file_sha256: SHA-256 of the ``tokenizer.json`` bytes (normaliser, pre-tokeniser, merges included).
        bos_token / eos_token: token strings, or ``None`` when the tokenizer declares none.
        bos_id / eos_id: their ids, or ``None``.
        split_special_tokens: when true, special-token strings inside documents are tokenized as plain
            text (a document cannot inject a control token).
    """

    name: str
    json_path: str
    kind: str
    vocab_size: int
    vocab_sha256: str
    file_sha256: str
    bos_token: str | None
    eos_token: str | None
    bos_id: int | None
    eos_id: int | None
    split_special_tokens: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# loading


@lru_cache(maxsize=4)
def _load_cached(json_path: str, split_special_tokens: bool):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(json_path)
    tok.encode_special_tokens = split_special_tokens
    tok.no_truncation()
    tok.no_padding()
    return tok


#: Tokenizers loaded in this process by (file SHA-256, split_special_tokens): a copy of a file already
#: loaded (an output's ``tokenizer/tokenizer.json`` in an in-process run) is not parsed again.
_BY_SHA: dict[tuple[str, bool], Any] = {}


def load(info: TokenizerInfo | str, split_special_tokens: bool = True, sha256: str | None = None):
    """A ``tokenizers.Tokenizer`` for ``info`` (or a ``tokenizer.json`` path), cached per process.

    Truncation and padding are off; ``encode_special_tokens`` follows ``split_special_tokens``. With
    ``sha256`` (the file's SHA-256, as :class:`TokenizerInfo` records it), a tokenizer this process already
    loaded from a file of those bytes is returned instead of parsing the file again.
    """
    if isinstance(info, TokenizerInfo):
        tok = _load_cached(info.json_path, info.split_special_tokens)
        _BY_SHA.setdefault((info.file_sha256, info.split_special_tokens), tok)
        return tok
    if sha256 is not None and (sha256, split_special_tokens) in _BY_SHA:
        return _BY_SHA[(sha256, split_special_tokens)]
    return _load_cached(str(info), split_special_tokens)


#: :func:`text_only` tokenizers by the id of the tokenizer they were made from (kept alive alongside it).
_TEXT_ONLY: dict[int, tuple[Any, Any]] = {}


def added_tokens(tok) -> dict[str, int]:
    """``{string: id}`` of every added token of ``tok`` (special or not): the strings its encoder turns into
    one id wherever they appear in a text."""
    return {t.content: i for i, t in tok.get_added_tokens_decoder().items()}


def text_only(tok):
    """A copy of ``tok`` that encodes every string as text: no added token (special or not) is matched, and
    none is left in the model's vocabulary for the model to emit (BPE/WordPiece: the entry is removed, its
    id kept free; Unigram: its score made the lowest). Built once per tokenizer and process.

    Text without any added-token string is encoded exactly as ``tok`` encodes it (the encoder cuts its
    input at added tokens first, then the same normaliser, pre-tokeniser and model run on each part).

    Raises:
        RuntimeFailure: the copy still encodes an added-token string into an added token's id (a model that
            builds the string from its merges): such a tokenizer cannot keep control-token text as text;
            ``policies.control_token_text=skip`` refuses those records instead.
    """
    from tokenizers import Tokenizer

    key = id(tok)
    if key in _TEXT_ONLY and _TEXT_ONLY[key][0] is tok:
        return _TEXT_ONLY[key][1]
    added = added_tokens(tok)
    doc = json.loads(tok.to_str())
    doc["added_tokens"] = []
    model = doc.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        model["vocab"] = {k: v for k, v in vocab.items() if k not in added}
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, the id is the position
        low = min((float(e[1]) for e in vocab), default=0.0) - 1000.0
        model["vocab"] = [[e[0], low] if e[0] in added else e for e in vocab]
    try:
        plain = Tokenizer.from_str(json.dumps(doc, ensure_ascii=False))
    except Exception:  # a model whose merges name a removed entry: keep the vocabulary, the check below decides
        doc["model"]["vocab"] = vocab
        plain = Tokenizer.from_str(json.dumps(doc, ensure_ascii=False))
    plain.no_truncation()
    plain.no_padding()
    ids = set(added.values())
    strings = list(added)
    for text, enc in zip(strings, plain.encode_batch_fast(strings, add_special_tokens=False) if strings else [],
                         strict=True):
        if ids.intersection(enc.ids):
            raise RuntimeFailure(f"the tokenizer's model encodes the text {text!r} as a control token even with its "
                                 "added tokens off: control-token text in messages cannot be kept as text",
                                 "set policies.control_token_text=skip (or fail) to refuse such records")
    _TEXT_ONLY[key] = (tok, plain)
    return plain


def document_tokenizer(tok, split_special_tokens: bool):
    """The tokenizer that encodes documents (pretraining): ``tok`` itself, or, with ``split_special_tokens``
    and added tokens that are not marked special (Hugging Face chat tokenizers often add ``<think>``,
    ``<tool_call>`` ... so), :func:`text_only` of it: ``encode_special_tokens`` turns only *special* tokens'
    text into text, so a document holding ``<think>`` would otherwise still become that token's id.

    Raises:
        RuntimeFailure: as :func:`text_only`.
    """
    if not split_special_tokens or all(t.special for t in tok.get_added_tokens_decoder().values()):
        return tok
    return text_only(tok)


def encode_documents(tok, texts: list[str], bos_id: int | None, eos_id: int | None) -> list[list[int]]:
    """Token ids of each text, without the tokenizer's own template, plus BOS/EOS when given.

    This is the reference tokenization of a document; the pipeline writes exactly these ids.
    """
    encs = tok.encode_batch_fast(texts, add_special_tokens=False)
    head = [bos_id] if bos_id is not None else []
    tail = [eos_id] if eos_id is not None else []
    return [head + e.ids + tail for e in encs]


def vocab_hash(tok) -> str:
    """SHA-256 of the canonical token→id mapping (added tokens included)."""
    import hashlib

    vocab = tok.get_vocab(with_added_tokens=True)
    data = json.dumps(sorted(vocab.items(), key=lambda kv: kv[1]), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


# --------------------------------------------------------------------------------------------------
# the tokenizer folder an output carries, and what the training frameworks build from it

#: The Megatron tokenizer type that loads an output's ``tokenizer/`` folder: Megatron-Core's
#: ``HuggingFaceTokenizer`` (``transformers.AutoTokenizer.from_pretrained`` on the folder), the type the
#: Megatron-Bridge recipes start from. Megatron's ``TikTokenizer`` is not used for Tekken sources: it
#: reads a plain list of ranked tokens (not a Tekken file), knows two fixed split patterns only and
#: requires ``<mask>``/``<cls>``/``<sep>`` among the control tokens, which a Tekken vocabulary lacks.
MEGATRON_TOKENIZER_TYPE = "HuggingFaceTokenizer"


def write_folder(folder: Path, info: TokenizerInfo, chat_template: str | None = None) -> dict[str, Any]:
    """Write the tokenizer the data was made with as a folder ``transformers.AutoTokenizer`` loads, and
    return what Megatron builds it from (recorded in the manifest as ``tokenizer.megatron``).

    Files: ``folder/tokenizer.json`` (a copy of ``info.json_path``, kept when its SHA-256 already
    matches) and ``folder/tokenizer_config.json``: ``tokenizer_class`` ``PreTrainedTokenizerFast``, the
    BOS/EOS token strings (Megatron's EOD and EOS ids come from them; null when the tokenizer has none),
    ``split_special_tokens`` as data prep tokenized (so ``AutoTokenizer`` treats control-token strings in
    text as data prep did), ``clean_up_tokenization_spaces`` false (decoding gives back the text), and
    ``chat_template`` when given. The tokenizer.json has no post-processor, so the loaded tokenizer adds no
    BOS/EOS of its own: encoding a document gives its ids without the BOS/EOS data prep appends.

    Returns:
        ``{"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "<absolute folder>"}``: the
        Megatron-Bridge ``TokenizerConfig`` fields (names unchanged) the training stage passes on.
    """
    from nemotron.data.driver import copy_tokenizer

    copy_tokenizer(folder, info)
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": info.bos_token,
                              "eos_token": info.eos_token, "split_special_tokens": info.split_special_tokens,
                              "clean_up_tokenization_spaces": False}
    if chat_template is not None:
        config["chat_template"] = chat_template
    atomic_write_json(folder / "tokenizer_config.json", config)
    return megatron_fields(folder)


def megatron_fields(folder: str | os.PathLike[str], base: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The Megatron-Bridge ``TokenizerConfig`` fields that load the tokenizer folder ``folder``
    (:func:`write_folder`): ``tokenizer_type`` and ``tokenizer_model`` (the folder, absolute; with ``base``, relative
    to ``base`` when inside it: what a data prep manifest records, so that a copied output names its own tokenizer;
    :func:`nemotron.data.outputs.megatron_tokenizer` resolves it from the manifest's folder)."""
    model = Path(folder).absolute()
    if base is not None:
        try:
            return {"tokenizer_type": MEGATRON_TOKENIZER_TYPE,
                    "tokenizer_model": model.relative_to(Path(base).absolute()).as_posix()}
        except ValueError:
            pass
    return {"tokenizer_type": MEGATRON_TOKENIZER_TYPE, "tokenizer_model": str(model)}


# --------------------------------------------------------------------------------------------------
# resolving a configured source into a local tokenizer.json


def resolve(
    name: str,
    *,
    cache_dir: str | os.PathLike[str],
    revision: str | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    split_special_tokens: bool = True,
) -> TokenizerInfo:
    """Find or build a local ``tokenizer.json`` for ``name`` and describe it.

    Args:
        name: hub id, folder, ``tokenizer.json`` file or Tekken ``.json`` file.
        cache_dir: where converted tokenizers are kept (``<cache_dir>/<source hash>/tokenizer.json``).
        revision: hub revision (branch, tag or commit) for hub ids.
        bos_token / eos_token: override the BOS/EOS token strings the tokenizer declares.
        split_special_tokens: see :class:`TokenizerInfo`.

    Raises:
        ConfigError: the source does not exist, cannot be read, is an unknown format, or a named
            BOS/EOS token is not in its vocabulary.
        RuntimeFailure: the hub cannot be reached for a hub id that is not cached (said within
            :data:`nemotron.data.hub.PROBE_SECONDS`: :func:`nemotron.data.hub.probe`).
    """
    if not name:
        raise ConfigError("tokenizer.name is empty: give a hub id, a folder or a tokenizer.json file")
    path = Path(os.path.expanduser(name))
    specials: dict[str, str | None] = {}
    if path.is_file():
        json_path, kind, specials = _from_file(path, Path(cache_dir))
    elif path.is_dir():
        check_folder(name)
        json_path, kind, specials = _from_folder(path, Path(cache_dir))
    elif _looks_like_hub_id(name):
        json_path, kind, specials = _from_hub(name, revision, Path(cache_dir))
    else:
        raise ConfigError(f"tokenizer.name={name!r}: no such file or folder, and not a hub id (org/name)")

    tok = load(str(json_path), split_special_tokens)
    file_sha = sha256_file(json_path)
    _BY_SHA.setdefault((file_sha, split_special_tokens), tok)
    vocab_size, vocab_sha = _vocab_facts(tok, file_sha, Path(cache_dir))
    bos = bos_token if bos_token is not None else specials.get("bos_token")
    eos = eos_token if eos_token is not None else specials.get("eos_token")
    ids: dict[str, int | None] = {}
    for key, token in (("bos", bos), ("eos", eos)):
        if token is None:
            ids[key] = None
            continue
        tid = tok.token_to_id(token)
        if tid is None:
            raise ConfigError(f"tokenizer.{key}_token={token!r} is not in the vocabulary of {name}")
        ids[key] = tid
    return TokenizerInfo(
        name=name, json_path=str(json_path), kind=kind, vocab_size=vocab_size, vocab_sha256=vocab_sha,
        file_sha256=file_sha, bos_token=bos, eos_token=eos, bos_id=ids["bos"], eos_id=ids["eos"],
        split_special_tokens=split_special_tokens,
    )


def _vocab_facts(tok, file_sha256: str, cache_dir: Path) -> tuple[int, str]:
    """``(vocab_size, vocab_sha256)`` of ``tok`` (loaded from a file with SHA-256 ``file_sha256``): read from
    ``<cache_dir>/vocab-facts/<file_sha256>.json`` when an earlier run recorded them (both are functions of
    the file's bytes), else computed (:func:`vocab_hash`; max id + 1) and recorded there."""
    from nemotron.data.files import atomic_write_bytes

    record = cache_dir / "vocab-facts" / f"{file_sha256}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        facts = json.loads(record.read_text(encoding="utf-8"))
        return int(facts["vocab_size"]), str(facts["vocab_sha256"])
    vocab = tok.get_vocab(with_added_tokens=True)
    vocab_size = max(tok.get_vocab_size(with_added_tokens=True), max(vocab.values(), default=-1) + 1)
    vocab_sha = vocab_hash(tok)
    with contextlib.suppress(OSError):
        atomic_write_bytes(record, json.dumps({"vocab_size": vocab_size, "vocab_sha256": vocab_sha}).encode())
    return vocab_size, vocab_sha


def _local_json(name: str) -> Any:
    """The parsed JSON of a local tokenizer file (``name`` itself, or a folder's ``tokenizer.json``, else its first
    ``tekken*.json``); None for a hub id, a missing file, or a file that is not JSON."""
    path = Path(os.path.expanduser(name)) if name else None
    if path is not None and path.is_dir():
        candidates = [path / "tokenizer.json", *sorted(path.glob("tekken*.json"))]
        path = next((c for c in candidates if c.is_file()), None)
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def vocab_size_hint(name: str) -> int | None:
    """The vocabulary size (max id + 1, added tokens included) of a local tokenizer, read from its JSON
    without building it, for checks before any work (``--dry-run``); ``None`` for a hub id or anything
    that cannot be read here (the run itself then decides, through :func:`resolve`).

    Equal to :attr:`TokenizerInfo.vocab_size`: a ``tokenizer.json`` counts its model vocabulary and added
    tokens; a Tekken file has ``config.default_vocab_size`` ids (the conversion cuts there).
    """
    data = _local_json(name)
    if data is None:
        return None
    try:
        if isinstance(data, dict) and isinstance(data.get("vocab"), list) and "config" in data:  # Tekken
            return int(data["config"]["default_vocab_size"])
        vocab = data["model"]["vocab"]
        ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))  # BPE/WordPiece; Unigram
        tokens = set(vocab) if isinstance(vocab, dict) else {str(i) for i in ids}
        for added in data.get("added_tokens") or []:
            ids.append(int(added["id"]))
            tokens.add(added["content"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return max(len(tokens), max(ids, default=-1) + 1) if ids else None


def declared_tokens(name: str) -> set[str] | None:
    """The token strings of a local tokenizer file (or a folder with one), read from its JSON without building it,
    for checks before any work: a ``tokenizer.json``'s model vocabulary and added tokens; a Tekken file's special
    tokens and the ``token_str`` of its first ``config.default_vocab_size`` vocabulary entries (what the conversion
    keeps). ``None`` for a hub id or anything that cannot be read here (the run itself then decides)."""
    data = _local_json(name)
    if data is None:
        return None
    try:
        if isinstance(data, dict) and isinstance(data.get("vocab"), list) and "config" in data:  # Tekken
            keep = int(data["config"]["default_vocab_size"]) - len(data.get("special_tokens") or [])
            tokens = {t["token_str"] for t in data.get("special_tokens") or [] if isinstance(t.get("token_str"), str)}
            tokens |= {t["token_str"] for t in data["vocab"][:max(keep, 0)] if isinstance(t.get("token_str"), str)}
            return tokens
        vocab = data["model"]["vocab"]
        tokens = set(vocab) if isinstance(vocab, dict) else {str(v[0]) for v in vocab if isinstance(v, list) and v}
        tokens |= {added["content"] for added in data.get("added_tokens") or []}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return tokens


#: Vocabulary files a folder without ``tokenizer.json`` may hold for ``transformers`` to convert.
_CONVERTIBLE = ("*.model", "vocab.json", "vocab.txt")


def check_folder(name: str) -> None:
    """Refuse a ``tokenizer.name`` that is a folder holding no tokenizer file: none of ``tokenizer.json``,
    ``tekken*.json`` or a vocabulary ``transformers`` can convert (:data:`_CONVERTIBLE`). Anything else
    (a file, a hub id, a folder with one of those) passes; checked at ``--dry-run`` and by :func:`resolve`.

    Raises:
        ConfigError: ``tokenizer.name=<folder>: the folder holds no tokenizer file (...)``.
    """
    path = Path(os.path.expanduser(name)) if name else None
    if path is None or not path.is_dir():
        return
    if any(any(path.glob(pattern)) for pattern in ("tokenizer.json", "tekken*.json", *_CONVERTIBLE)):
        return
    raise ConfigError(f"tokenizer.name={name}: the folder holds no tokenizer file (tokenizer.json, tekken*.json, "
                      f"or a vocabulary to convert: {', '.join(_CONVERTIBLE)})",
                      "point tokenizer.name at a tokenizer.json, a folder holding one, or a hub id (org/name)")


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~"))


def is_hub_id(name: str) -> bool:
    """Whether :func:`resolve` fetches ``name`` from the Hugging Face hub: no such file or folder here, and of the
    form ``org/name``."""
    return bool(name) and not Path(os.path.expanduser(name)).exists() and _looks_like_hub_id(name)


def _special_names(config: dict[str, Any]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key in ("bos_token", "eos_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        out[key] = value if isinstance(value, str) else None
    return out


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read tokenizer file ({exc})") from None


def _from_file(path: Path, cache_dir: Path) -> tuple[Path, str, dict[str, str | None]]:
    head = path.read_bytes()[:4096]
    if b'"model"' in head or b'"added_tokens"' in head or b'"truncation"' in head:
        cfg_path = path.with_name("tokenizer_config.json")
        specials = _special_names(_read_json(cfg_path)) if cfg_path.is_file() else {}
        return path, "file", specials
    cached = _tekken_cached(path, cache_dir)
    if cached is not None:  # converted before: the cache key is the source file's hash, no need to parse it
        return cached
    data = _read_json(path)
    if isinstance(data, dict) and "model" in data:
        return path, "file", {}
    if isinstance(data, dict) and isinstance(data.get("vocab"), list) and "config" in data:
        return _convert_tekken(path, data, cache_dir)
    raise ConfigError(f"{path}: not a tokenizer.json nor a Tekken vocabulary (no 'model' or 'vocab' key)")


def _from_folder(path: Path, cache_dir: Path) -> tuple[Path, str, dict[str, str | None]]:
    cfg_path = path / "tokenizer_config.json"
    specials = _special_names(_read_json(cfg_path)) if cfg_path.is_file() else {}
    if (path / "tokenizer.json").is_file():
        return path / "tokenizer.json", "folder", specials
    tekken = sorted(path.glob("tekken*.json"))
    if tekken:
        json_path, kind, conv_specials = _from_file(tekken[0], cache_dir)
        return json_path, kind, specials or conv_specials
    return _convert_with_transformers(path, cache_dir, specials)


def _from_hub(name: str, revision: str | None, cache_dir: Path) -> tuple[Path, str, dict[str, str | None]]:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise RuntimeFailure(f"tokenizer.name={name!r} is a hub id but huggingface_hub is not installed",
                             "pip install huggingface_hub, or point tokenizer.name at a local folder") from None
    from nemotron.data import hub

    reason = hub.probe()  # seconds, where huggingface_hub's own retries take 25-30 s
    if reason is not None:  # unreachable (or HF_HUB_OFFLINE): the cache, or the dry-run's own refusal
        cached = hub.cached_file(name, "tokenizer.json", revision)
        if cached is None:
            raise RuntimeFailure(hub.unreachable(f"tokenizer.name={name!r}", reason) + " and it is not cached",
                                 hub.hint())
        config = hub.cached_file(name, "tokenizer_config.json", revision)
        return Path(cached), "hub", _special_names(_read_json(Path(config))) if config else {}
    try:
        json_path = Path(hf_hub_download(name, "tokenizer.json", revision=revision))
    except Exception as exc:  # any hub/network failure is reported the same way
        raise RuntimeFailure(
            f"tokenizer.name={name!r}: cannot fetch tokenizer.json from the Hugging Face hub "
            f"({type(exc).__name__})",
            "check network access and HF_TOKEN, or set tokenizer.name to a local folder or tokenizer.json",
        ) from None
    specials: dict[str, str | None] = {}
    try:
        cfg = Path(hf_hub_download(name, "tokenizer_config.json", revision=revision))
        specials = _special_names(_read_json(cfg))
    except Exception:  # the config is optional
        pass
    return json_path, "hub", specials


def _convert_with_transformers(path: Path, cache_dir: Path, specials: dict[str, str | None]):
    key = _folder_hash(path)
    out = cache_dir / f"hf-{key}" / "tokenizer.json"
    if not out.is_file():
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ConfigError(f"{path}: no tokenizer.json and transformers is not installed to build one") from None
        try:
            tok = AutoTokenizer.from_pretrained(str(path))
            backend = tok.backend_tokenizer
        except Exception as exc:  # transformers' messages run over several lines: the first says what failed
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise ConfigError(f"tokenizer.name={path}: not a tokenizer folder transformers can load ({first})") from None
        atomic_write_bytes(out, backend.to_str().encode())
        specials = {"bos_token": specials.get("bos_token") or tok.bos_token,
                    "eos_token": specials.get("eos_token") or tok.eos_token}
    return out, "converted:transformers", specials


def _folder_hash(path: Path) -> str:
    import hashlib

    h = hashlib.sha256(f"v{CONVERTER_VERSION}".encode())
    for f in sorted(p for p in path.iterdir() if p.is_file()):
        h.update(f.name.encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# Tekken (tiktoken-style ranked byte BPE) -> tokenizer.json


def _byte_to_unicode() -> dict[int, str]:
    """The byte-level alphabet: printable Latin-1 bytes stand for themselves, the other bytes are
    mapped, in order, to code points from 256 upward (the convention of byte-level BPE tokenizers)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table: dict[int, str] = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _tekken_cached(path: Path, cache_dir: Path) -> tuple[Path, str, dict[str, str | None]] | None:
    """The converted tokenizer of the Tekken file ``path`` already in ``cache_dir``, or ``None``."""
    out_dir = cache_dir / f"tekken-{sha256_file(path)[:16]}-v{CONVERTER_VERSION}"
    out = out_dir / "tokenizer.json"
    meta_path = out_dir / "meta.json"
    if out.is_file() and meta_path.is_file():
        meta = _read_json(meta_path)
        return out, "converted:tekken", {"bos_token": meta.get("bos_token"), "eos_token": meta.get("eos_token")}
    return None


def _convert_tekken(path: Path, data: dict[str, Any], cache_dir: Path):
    key = f"tekken-{sha256_file(path)[:16]}-v{CONVERTER_VERSION}"
    out_dir = cache_dir / key
    out = out_dir / "tokenizer.json"
    meta_path = out_dir / "meta.json"
    cached = _tekken_cached(path, cache_dir)
    if cached is not None:
        return cached

    cfg = data["config"]
    try:
        vocab_size = int(cfg["default_vocab_size"])
        n_special = int(cfg["default_num_special_tokens"])
        pattern = str(cfg["pattern"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{path}: Tekken file without config.default_vocab_size/default_num_special_tokens/pattern") from None
    specials_list = data.get("special_tokens")
    names = [t["token_str"] for t in sorted(specials_list, key=lambda t: t["rank"])] if specials_list else list(
        _TEKKEN_DEFAULT_SPECIALS)
    names = names[:n_special] + [f"<SPECIAL_{i}>" for i in range(len(names), n_special)]
    bos = "<s>" if "<s>" in names else names[1]
    eos = "</s>" if "</s>" in names else names[2]
    inner = vocab_size - n_special
    ranked = sorted(data["vocab"], key=lambda t: t["rank"])[:inner]
    if len(ranked) < inner:
        raise ConfigError(f"{path}: {len(ranked)} ranked tokens, fewer than the {inner} the config asks for")

    b2u = _byte_to_unicode()
    token_bytes = [base64.b64decode(t["token_bytes"]) for t in ranked]
    rank_of = {tb: i for i, tb in enumerate(token_bytes)}
    as_str = ["".join(b2u[b] for b in tb) for tb in token_bytes]
    vocab = {s: i + n_special for i, s in enumerate(as_str)}
    clash = [n for n in names if n in vocab]
    if clash:
        raise ConfigError(f"{path}: special token {clash[0]!r} is also a regular token; cannot convert")
    # The control tokens sit in the model's vocabulary at their own ids (else the added-token table
    # would renumber them after the regular tokens); no merge produces them.
    vocab.update({n: i for i, n in enumerate(names)})
    # tiktoken merges the adjacent pair whose concatenation has the lowest rank; a BPE with one merge
    # per (left, right) split of every token, prioritised by the token's rank, does the same.
    merges: list[tuple[int, int, int]] = []
    for rank, tb in enumerate(token_bytes):
        for i in range(1, len(tb)):
            left = rank_of.get(tb[:i])
            right = rank_of.get(tb[i:])
            if left is not None and right is not None:
                merges.append((rank, left, right))
    merges.sort()
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": n, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, n in enumerate(names)
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
            "vocab": vocab,
            "merges": [[as_str[a], as_str[b]] for _r, a, b in merges],
        },
    }
    atomic_write_bytes(out, json.dumps(doc, ensure_ascii=False).encode())
    atomic_write_json(meta_path, {"source": str(path), "source_sha256": sha256_file(path),
                                  "converter_version": CONVERTER_VERSION, "vocab_size": vocab_size,
                                  "num_special_tokens": n_special, "bos_token": bos, "eos_token": eos})
    return out, "converted:tekken", {"bos_token": bos, "eos_token": eos}
