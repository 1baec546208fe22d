"""Whether the Hugging Face hub answers: one quick probe that the dry-run and the data prep runs share.

A data prep config that names a hub tokenizer (``tokenizer.name: org/name``) or a hub dataset (``hf://org/name``
in its blend) fetches them at run time through ``huggingface_hub``, whose own retries take 25-30 s before it
gives up on an unreachable hub. :func:`probe` answers in at most ``timeout_s`` seconds (default
:data:`PROBE_SECONDS`): the validation of a run here (``--dry-run`` and the run itself,
:func:`nemotron.validation.data.hub_problems`) and the runtimes' hub fetches
(:func:`nemotron.data.tokenizer.resolve`, :func:`nemotron.data.sources.resolve_remote`) call it before anything
is fetched, so both refuse in the same words.

Stdlib only: importing this module costs nothing at start-up.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping

#: Seconds :func:`probe` waits for the hub's answer (connect and first response together).
PROBE_SECONDS = 3.0
#: The hub ``huggingface_hub`` talks to when ``HF_ENDPOINT`` is not set (its ``constants.ENDPOINT``).
DEFAULT_ENDPOINT = "https://huggingface.co"

_TRUE = ("1", "on", "true", "yes")


def endpoint(env: Mapping[str, str] | None = None) -> str:
    """The hub's base URL as ``huggingface_hub`` reads it: ``HF_ENDPOINT``, else :data:`DEFAULT_ENDPOINT`
    (no trailing slash)."""
    env = os.environ if env is None else env
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set to a true value (``huggingface_hub`` then never contacts the hub)."""
    env = os.environ if env is None else env
    return str(env.get("HF_HUB_OFFLINE", "")).strip().lower() in _TRUE


def probe(timeout_s: float = PROBE_SECONDS, env: Mapping[str, str] | None = None) -> str | None:
    """Why the hub cannot be reached from this machine, or ``None`` when it answers.

    One HTTP ``HEAD`` of :func:`endpoint` (through the proxies the environment names, as ``huggingface_hub``
    does) with a ``timeout_s``-second timeout. Any HTTP answer below 500 counts as reachable (the hub's root
    redirects or refuses ``HEAD`` on some mirrors); a 5xx answer, a refused or timed-out connection, a name
    that does not resolve, a malformed ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE=1`` are reasons. Never raises.

    Returns:
        ``None``, or one phrase such as ``"nothing answers at http://127.0.0.1:9 (Connection refused, 0.0s)"``.
    """
    if offline(env):
        return "HF_HUB_OFFLINE=1 is set (the hub is never contacted)"
    url = endpoint(env)
    if not url.startswith(("http://", "https://")):
        return f"HF_ENDPOINT={url!r} is not an http(s) URL"
    start = time.monotonic()
    req = urllib.request.Request(url + "/", method="HEAD", headers={"User-Agent": "nemotron-hub-probe"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:  # URLError, timeouts, refused, DNS; a malformed host
        reason = getattr(exc, "reason", None) or exc
        why = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        return f"nothing answers at {url} ({why}, {time.monotonic() - start:.1f}s)"
    if status >= 500:
        return f"{url} answers HTTP {status}"
    return None


def unreachable(what: str, reason: str, many: bool = False) -> str:
    """The one message of a hub fetch that cannot happen: ``what`` (e.g. ``"tokenizer.name='org/x'"``; ``many``:
    it names several things) needs the hub, ``reason`` from :func:`probe`."""
    verb = "are" if many else "is"
    return f"{what} {verb} fetched from the Hugging Face hub, which cannot be reached from here: {reason}"


def hint(command: str | None = None) -> str:
    """The hint of :func:`unreachable`: the network settings, local files, the offline sample config (``command``:
    the stage's words, e.g. ``"nemotron ultra3 data prep sft"``)."""
    tiny = f"`{command} -c tiny`" if command else "`-c tiny`"
    return (f"run where the hub answers (HF_ENDPOINT, HTTPS_PROXY, HF_TOKEN), point the config at local files, or "
            f"use the offline sample config {tiny} (local files, no hub)")


def cached_file(repo: str, filename: str, revision: str | None = None) -> str | None:
    """The local path of ``filename`` of the hub model ``repo`` in the Hugging Face cache (``HF_HUB_CACHE``), or
    ``None`` when it is not cached or ``huggingface_hub`` is not installed. Reads the cache only."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo, filename, revision=revision)
    except Exception:  # a malformed repo id or revision: not cached
        return None
    return found if isinstance(found, str) else None
