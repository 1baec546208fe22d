"""The ``megatron-bridge`` backend of ``ultra3 mtp-boost``: the dry-run's refusal, said by the job too.

At the pinned versions no cluster framework runs MTP boosting's objective (rule ``mtp-boost-framework``,
:func:`nemotron.layout.rules.mtp_boost_framework`; docs/mtp_boost.md). The job's entry calls :func:`main`, which
prints the same problem the dry-run reports and exits 2 before anything is loaded. Standard library only, so the
``nemo`` image needs nothing for it.
"""

from __future__ import annotations

import sys
from typing import Any

from nemotron.config.tree import get


def main(cfg: dict[str, Any]) -> int:
    """Print the refusal of ``cfg`` (one ``error:`` line and its ``hint:``) on stderr; returns 2."""
    from nemotron.layout.rules import mtp_boost_framework

    problems = mtp_boost_framework(str(get(cfg, "backend") or "megatron-bridge"), get(cfg, "mtp_boost.objective"),
                                   get(cfg, "mtp_boost.freeze_backbone"))
    for p in problems[:1]:
        print(f"error: ultra3 mtp-boost: {p.key}={p.value}: {p.message}", file=sys.stderr)
        print(f"hint: {p.valid}", file=sys.stderr)
    if not problems:
        print("error: ultra3 mtp-boost: this backend has no runtime for MTP boosting; use -c local", file=sys.stderr)
    return 2


__all__ = ["main"]
