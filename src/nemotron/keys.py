"""Unknown pass-through keys of Megatron-Bridge and NeMo RL stages, rejected before a job is queued.

A Megatron-Bridge stage passes most of its config straight to the framework's ``ConfigContainer``
(``train.*``, ``model.*``, ``optimizer.*``, ...). A key added with ``+key=value``, or a typo in a
stage YAML, would otherwise reach the job and fail there (or be ignored). The key list of the
Megatron-Bridge version pinned to the stage's image (``stages/images.toml`` ``[nemo].frameworks``) is
stored as data in ``src/nemotron/keylists/megatron-bridge-<version>.json``, generated from the
released wheels by ``scripts/megatron_bridge_keys.py`` (ConfigContainer sections and their dataclass
fields, read with ``ast``). NeMo RL stages (rlvr, mopd) are checked the same way against
``keylists/nemo-rl-<version>.json`` (``[nemo-rl].frameworks.nemo_rl``), generated from a source
checkout at the pinned commit by ``scripts/nemo_rl_keys.py`` (``MasterConfig`` and its config
classes, plus the keys of NeMo RL's example configs). :func:`unknown_keys` walks a compiled config
against either list.

Stdlib only (the CLI's validation path imports it).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

KEYLIST_DIR = Path(__file__).resolve().parent / "keylists"

#: Keys of our Megatron-Bridge stage configs that are ours, not the framework's (a key or a prefix).
#: ``model.name`` picks the catalogue entry; ``data.*`` is our blend.json input; ``recipe.*`` which
#: Megatron-Bridge recipe to start from; ``run.*`` the launcher; ``convert.*`` the conversion job;
#: ``tokenizer.vocab_sha256`` our data check; ``backend`` local vs cluster; ``model.first_last_layers_bf16``
#: and ``model.num_layers_at_{start,end}_in_bf16`` feed the NVFP4 mixed-precision recipe (Nemotron's
#: ultra3 train.py), not the provider.
OWN_KEYS: tuple[str, ...] = (
    "backend", "recipe", "run", "data", "convert", "model.name", "tokenizer.vocab_sha256",
    "model.first_last_layers_bf16", "model.num_layers_at_start_in_bf16", "model.num_layers_at_end_in_bf16",
    "dataset.local_layout",
)

#: Keys of our NeMo RL stage configs that are ours (the runtime, nemotron.runtime.nemo_rl, drops or
#: translates them before NeMo RL sees the config): ``model.name`` the catalogue entry, ``backend``,
#: ``run`` the launcher, ``_teachers`` the MOPD panel, ``teacher_routing`` (becomes
#: ``on_policy_distillation.teacher_model_by_agent_name``), ``environments`` (becomes ``env.*``) and
#: ``output_artifact`` (the artifact a teacher run records).
NEMO_RL_OWN_KEYS: tuple[str, ...] = (
    "backend", "model", "run", "_teachers", "teacher_routing", "environments", "output_artifact",
)

#: Key list file prefix and label of each framework.
FRAMEWORKS = {"megatron-bridge": ("Megatron-Bridge", "scripts/megatron_bridge_keys.py from that version's wheels"),
              "nemo-rl": ("NeMo RL", "scripts/nemo_rl_keys.py from a source checkout at that commit")}


@dataclass(frozen=True)
class KeyProblem:
    """One key that the framework does not have: ``key`` dotted, ``message`` a sentence, ``suggestion``
    the closest valid key (dotted) or None, ``valid`` a few of the valid names at that level."""

    key: str
    message: str
    suggestion: str | None
    valid: tuple[str, ...]


def available_versions(framework: str = "megatron-bridge") -> list[str]:
    """Versions of ``framework`` (``megatron-bridge``, ``nemo-rl``) that have a stored key list."""
    return sorted(p.name[len(framework) + 1:-len(".json")] for p in KEYLIST_DIR.glob(f"{framework}-*.json"))


@lru_cache(maxsize=8)
def load_keylist(version: str, framework: str = "megatron-bridge") -> dict[str, Any]:
    """The stored key list of ``framework`` (``megatron-bridge`` or ``nemo-rl``) at ``version``
    (``0.5.0``; for NeMo RL ``main-<commit>``, as ``stages/images.toml`` pins it).

    Raises:
        KeyError: no key list for that version (the message lists the stored ones and how to add one).
    """
    label, how = FRAMEWORKS.get(framework, (framework, "its generator script"))
    path = KEYLIST_DIR / f"{framework}-{version}.json"
    if not path.is_file():
        raise KeyError(f"no {label} key list for version {version!r} (stored: "
                       f"{', '.join(available_versions(framework)) or 'none'}); generate it with {how}")
    return json.loads(path.read_text(encoding="utf-8"))


def _own(key: str, own: Iterable[str]) -> bool:
    return any(key == o or key.startswith(o + ".") for o in own)


def _leaves(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, dict) and node:
        out = []
        for k, v in node.items():
            out += _leaves(v, (*prefix, str(k)))
        return out
    return [prefix] if prefix else []


def _suggest(word: str, names: Iterable[str]) -> str | None:
    names = list(names)
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.75)
    if not close:  # a typo of a long name scores low on the ratio; try prefix overlap
        close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_keys(config: dict[str, Any], keylist: dict[str, Any], own: Iterable[str] = OWN_KEYS) -> list[KeyProblem]:
    """Every leaf key of ``config`` that is neither ours (``own``) nor a field of the framework's root
    config in ``keylist`` (Megatron-Bridge's ``ConfigContainer``, NeMo RL's ``MasterConfig``; one
    problem per key, in config order).

    A key under a field whose type is a mapping (``dataset.dataset_kwargs.*``, NeMo RL's ``env.*``) is
    accepted as is.
    """
    sections = keylist["sections"]
    version = keylist.get("version", "?")
    label = keylist.get("label", "Megatron-Bridge")
    root = keylist.get("root", "ConfigContainer")
    own = tuple(own)
    problems: list[KeyProblem] = []
    seen: set[str] = set()
    for path in _leaves(config):
        dotted = ".".join(path)
        if _own(dotted, own):
            continue
        head = path[0]
        if head not in sections:
            if head in seen:
                continue
            seen.add(head)
            sug = _suggest(head, sections)
            problems.append(KeyProblem(head, f"{head}: not a section of {label} {version}'s {root}",
                                       sug, tuple(sorted(sections))))
            continue
        if sections[head].get("mapping"):
            continue
        fields = sections[head]["fields"]
        where = head
        for i, part in enumerate(path[1:], start=1):
            entry = fields.get(part)
            if entry is None:
                sug = _suggest(part, fields)
                names = sections[head]["types"]
                types = where if i > 1 else (", ".join(names) if len(names) <= 2 else
                                             f"any of {', '.join(names[:3])}, ... ({len(names)} classes)")
                problems.append(KeyProblem(
                    dotted, f"{dotted}: {part!r} is not a field of {types or where} ({label} {version})",
                    f"{where}.{sug}" if sug else None, tuple(sorted(fields))[:12]))
                break
            where = f"{where}.{part}"
            if entry.get("mapping"):
                break
            nested = entry.get("fields")
            if i < len(path) - 1 and not nested:
                break  # a value given as a mapping (e.g. a dataclass the key list did not expand): let it pass
            fields = nested or {}
    return problems


def describe(problem: KeyProblem) -> str:
    """One line for the user: the key, why, and the did-you-mean."""
    hint = f"; did you mean {problem.suggestion}?" if problem.suggestion else ""
    return problem.message + hint


__all__ = ["FRAMEWORKS", "NEMO_RL_OWN_KEYS", "OWN_KEYS", "KeyProblem", "available_versions", "describe", "load_keylist",
           "unknown_keys"]
