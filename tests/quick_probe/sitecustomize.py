"""Put first on ``PYTHONPATH`` by ``pytest --quick`` (tests/conftest.py): every Python process a quick test starts
writes, when it exits, the ``nemotron.*`` modules it imported into ``$NEMOTRON_QUICK_MODULES/<pid>.txt`` (one name a
line), so the tier's check counts a module that only a subprocess runs (a stage's ``run.py``, the ``nemotron``
console script). Imports nothing but the standard library's ``atexit``, ``os`` and ``sys``; a process that ends by a
signal or ``os._exit`` writes nothing."""

import atexit
import os
import sys


def _write_modules() -> None:
    folder = os.environ.get("NEMOTRON_QUICK_MODULES")
    names = [m for m in list(sys.modules) if m == "nemotron" or m.startswith("nemotron.")]
    if not folder or not names or not os.path.isdir(folder):
        return
    try:
        with open(os.path.join(folder, f"{os.getpid()}.txt"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(names) + "\n")
    except OSError:
        pass


atexit.register(_write_modules)
