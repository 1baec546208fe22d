"""Run the frameworks' own code, at our pinned refs, on what we generate (the contract-test layer).

The sources are the ``git archive`` files in ``../shared/upstream`` (its README names each repository and
commit). :func:`sources` unpacks each once per machine into ``${TMPDIR:-/tmp}/nemotron-upstream/<archive>``
(atomically: a folder is complete or absent). :meth:`Upstream.run` runs a Python script in the contract
interpreter ``.venv-upstream`` (made by ``scripts/setup_upstream.sh`` from ``tests/contract/requirements.txt``)
with the three source trees and our ``src/`` on ``sys.path``, through ``tests/contract/boot.py`` (what it
stands in for, and why, is said there). The script reads a JSON payload from stdin and writes its JSON result
to the file named by ``$CONTRACT_RESULT``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHARED_UPSTREAM = REPO.parent / "shared" / "upstream"
VENV_PYTHON = REPO / ".venv-upstream" / "bin" / "python"
BOOT = Path(__file__).resolve().with_name("boot.py")

#: archive file -> the top folder it unpacks to, and the folder of it that goes on sys.path.
ARCHIVES = {
    "megatron-bridge-nemotron_3_ultra-4588417.tgz": ("Megatron-Bridge", "Megatron-Bridge/src"),
    "megatron-lm-c8288b6.tgz": ("Megatron-LM", "Megatron-LM"),
    "nemo-rl-7ea279a.tgz": ("RL", "RL"),
}


class UpstreamError(RuntimeError):
    """An upstream script failed; ``str()`` holds its stderr tail."""


def sources(archive_dir: Path = SHARED_UPSTREAM) -> dict[str, Path]:
    """``{top folder: unpacked path}`` of every archive in :data:`ARCHIVES` (unpacked once per machine).

    Raises:
        FileNotFoundError: an archive is missing from ``archive_dir``.
    """
    cache = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "nemotron-upstream"
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name, (top, _) in ARCHIVES.items():
        archive = archive_dir / name
        if not archive.is_file():
            raise FileNotFoundError(f"{archive}: missing (see ../shared/upstream/README.md)")
        dest = cache / name.removesuffix(".tgz")
        if not (dest / top).is_dir():
            tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache))
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            try:
                os.replace(tmp, dest)
            except OSError:  # another test run unpacked it first
                shutil.rmtree(tmp, ignore_errors=True)
        out[top] = dest / top
    return out


@dataclass(frozen=True)
class Upstream:
    """The unpacked sources and the interpreter that runs them."""

    roots: dict[str, Path]
    python: Path = VENV_PYTHON

    @property
    def megatron_bridge(self) -> Path:
        return self.roots["Megatron-Bridge"]

    @property
    def megatron_lm(self) -> Path:
        return self.roots["Megatron-LM"]

    @property
    def nemo_rl(self) -> Path:
        return self.roots["RL"]

    def env(self) -> dict[str, str]:
        paths = [str(self.roots[top].parent / sub) for top, sub in ((t, s) for t, s in ARCHIVES.values())]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(PYTHONPATH=os.pathsep.join([*paths, str(REPO / "src"), str(BOOT.parent)]), PYTHONDONTWRITEBYTECODE="1",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   CUDA_VISIBLE_DEVICES="", WANDB_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
        return env

    def run(self, script: str | Path, payload: Any = None, *, timeout: float = 600, cwd: Path | None = None) -> Any:
        """Run ``script`` (a path, or Python source text) in the contract interpreter; return its JSON result.

        Raises:
            UpstreamError: the script exited non-zero or wrote no result (the message carries its output tail).
        """
        with tempfile.TemporaryDirectory(prefix="contract-") as tmp:
            if isinstance(script, str) and "\n" in script:
                path = Path(tmp) / "script.py"
                path.write_text(script, encoding="utf-8")
            else:
                path = Path(script)
            result = Path(tmp) / "result.json"
            env = self.env() | {"CONTRACT_RESULT": str(result)}
            if _FORK:
                code, out, err = _server(self).run(path, json.dumps(payload), env, Path(cwd or tmp), Path(tmp),
                                                   timeout)
            else:
                proc = subprocess.run([str(self.python), str(BOOT), str(path)], input=json.dumps(payload), text=True,
                                      capture_output=True, env=env, timeout=timeout, cwd=str(cwd or tmp))
                code, out, err = proc.returncode, proc.stdout, proc.stderr
            if code != 0 or not result.is_file():
                tail = "\n".join((out + "\n" + err).strip().splitlines()[-40:])
                raise UpstreamError(f"{path.name} exited {code}:\n{tail}")
            return json.loads(result.read_text(encoding="utf-8"))


#: ``NEMOTRON_CONTRACT_FORK=0`` starts a fresh interpreter for every script (the slow way, for a suspected
#: difference); by default one server per test process imports the frameworks once and forks per script.
_FORK = os.environ.get("NEMOTRON_CONTRACT_FORK", "1") != "0"
_SERVERS: dict[tuple[str, str], "_ForkServer"] = {}


def _server(up: "Upstream") -> "_ForkServer":
    env = up.env()
    key = (str(up.python), env["PYTHONPATH"])
    if key not in _SERVERS or not _SERVERS[key].alive():
        _SERVERS[key] = _ForkServer(up.python, env)
    return _SERVERS[key]


class _ForkServer:
    """``boot.py --serve`` in the contract interpreter: the frameworks imported once (about 15 CPU-seconds), then one
    fork per script. A child is what ``python boot.py SCRIPT`` is after those imports: the same interpreter, import
    hook, environment (only ``CONTRACT_RESULT`` and the folder differ, set in the child), and default signal
    dispositions. Stopped when the test process exits."""

    def __init__(self, python: Path, env: dict[str, str]) -> None:
        import atexit

        self.log = tempfile.NamedTemporaryFile(prefix="contract-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([str(python), str(BOOT), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=str(REPO))
        self._buffer = b""
        atexit.register(self.stop)
        if (self._line(timeout=600) or {}).get("ready") is not True:
            said = self._log_tail()
            self.stop()
            raise UpstreamError(f"boot.py --serve did not start:\n{said}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)

    def _log_tail(self) -> str:
        return Path(self.log.name).read_text(encoding="utf-8", errors="replace")[-4000:]

    def _line(self, timeout: float) -> dict | None:
        """The server's next JSON line; ``{}`` when it ended; ``None`` after ``timeout`` seconds."""
        import select
        import time

        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return {}
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, script: Path, payload: str, env: dict[str, str], cwd: Path, tmp: Path,
            timeout: float) -> tuple[int, str, str]:
        """Run ``script`` in a fork; ``(exit status, stdout, stderr)``.

        Raises:
            subprocess.TimeoutExpired: the script ran longer than ``timeout`` seconds (it is killed).
            UpstreamError: the server died.
        """
        import signal

        files = {name: tmp / f"script.{name}" for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_text(payload, encoding="utf-8")
        request = {"script": str(script), "cwd": str(cwd), "env": env, **{k: str(v) for k, v in files.items()}}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        started = self._line(timeout=60) or {}
        if "pid" not in started:
            raise UpstreamError(f"the contract server ended:\n{self._log_tail()}")
        ended = self._line(timeout)
        if ended is None:
            os.kill(started["pid"], signal.SIGKILL)
            self._line(timeout=60)
            raise subprocess.TimeoutExpired([str(script)], timeout)
        if "status" not in ended:
            raise UpstreamError(f"the contract server ended:\n{self._log_tail()}")
        read = lambda p: p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""  # noqa: E731
        return ended["status"], read(files["stdout"]), read(files["stderr"])


def write_result(value: Any) -> None:
    """For scripts: write the JSON result where :meth:`Upstream.run` reads it."""
    Path(os.environ["CONTRACT_RESULT"]).write_text(json.dumps(value, default=str), encoding="utf-8")


def read_payload() -> Any:
    """For scripts: the JSON payload :meth:`Upstream.run` sent."""
    return json.loads(sys.stdin.read() or "null")
