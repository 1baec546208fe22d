"""NeMo-Run, loaded only by the code that renders or submits a job."""

from __future__ import annotations

import sys
from typing import Any

from nemotron.errors import RuntimeFailure


def _import_nemo_run() -> Any:
    """Import NeMo-Run without torch.

    NeMo-Run imports torch (about 1.3 s here) only to teach its YAML dumper about ``torch.dtype``,
    inside a ``try``; we never serialise a dtype, so torch is hidden while NeMo-Run loads (measured by
    bench/cli_startup.py). If NeMo-Run fails to import with torch hidden, it is imported once more with
    torch visible (it may need it for real) before giving up.

    Raises:
        RuntimeFailure: NeMo-Run cannot be imported (one line naming the install that provides it).
    """
    if "nemo_run" in sys.modules and sys.modules["nemo_run"] is not None:
        return sys.modules["nemo_run"]
    for hide in ("torch" not in sys.modules, False):
        if hide:
            sys.modules["torch"] = None  # type: ignore[assignment]  # makes `import torch` raise ImportError
        try:
            import nemo_run as run

            return run
        except ImportError as exc:
            error = exc
            for name in [m for m in sys.modules if m == "nemo_run" or m.startswith("nemo_run.")]:
                del sys.modules[name]
        finally:
            if hide and sys.modules.get("torch", 0) is None:
                del sys.modules["torch"]
        if not hide:
            break
    raise RuntimeFailure(f"NeMo-Run is not importable: {error}",
                         "NeMo-Run is a base dependency: reinstall the tool (pip install nemotron-cli, or in a "
                         "checkout: uv sync / pip install -e .)")
