"""Ray for the data stages: start or join a cluster, run tasks with bounded concurrency.

* :func:`ray_session` — use the Ray instance that is already initialised in this process; else join
  the cluster ``RAY_ADDRESS`` names (a Ray cluster that a Slurm job started), after a TCP probe of
  its address (:func:`probe_address`: a stale address fails in seconds, not after Ray's own minutes
  of retries); else start a local one with ``num_cpus`` CPUs, no dashboard and quiet logs. Only what
  it started or joined is shut down.
* :func:`run_streaming` — run one streaming-generator task per work item, at most ``max_in_flight``
  at a time, handing each yielded progress message and each final result to callbacks as they come.
  A task's exception is re-raised in the driver as the original exception (a ``NemotronError``
  keeps its message and exit code); remaining tasks are cancelled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from nemotron.errors import NemotronError, RuntimeFailure, StopRequested, hold_point, request_stop


#: Seconds :func:`probe_address` keeps trying to connect to a ``RAY_ADDRESS`` (a head still starting gets
#: this long; a Slurm job's driver starts only after its head answered).
PROBE_SECONDS = 5.0
#: The port of a ``ray://`` client address without one (Ray Client's default).
_CLIENT_PORT = 10001
#: The port of an ``http(s)://`` address without one (the Ray dashboard's, which serves job submission).
_DASHBOARD_PORT = 8265
#: Seconds :func:`probe_address` waits for the server's first HTTP/2 frame once the TCP connection is open.
SPEAKS_SECONDS = 3.0
#: The HTTP/2 client connection preface (RFC 9113 section 3.4) followed by an empty SETTINGS frame (9-byte header:
#: length 0, type 0x4, flags 0, stream 0). A gRPC server (Ray's GCS, the Ray Client server) answers it with a
#: SETTINGS frame of its own.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _speaks_grpc(sock: socket.socket, timeout_s: float) -> str | None:
    """Why the server on ``sock`` (connected) is not a gRPC (HTTP/2) server such as Ray's GCS, or ``None``: it must
    answer the HTTP/2 preface with a SETTINGS frame within ``timeout_s`` seconds (a web server answers HTTP/1 text,
    an SSH or database server its own banner, a silent one nothing)."""
    sock.settimeout(timeout_s)
    try:
        sock.sendall(_H2_PREFACE)
        head = b""
        deadline = time.monotonic() + timeout_s
        while len(head) < 9 and time.monotonic() < deadline:
            sock.settimeout(max(deadline - time.monotonic(), 0.05))
            chunk = sock.recv(64)
            if not chunk:
                break
            head += chunk
    except socket.timeout:
        pass
    except OSError as exc:
        return f"it closed the connection ({exc.strerror or type(exc).__name__})"
    if len(head) >= 9 and head[3] == 4:
        return None
    if not head:
        return f"it sent nothing back in {timeout_s:g}s"
    shown = head.split(b"\r\n", 1)[0].decode("ascii", "replace")
    return f"it answered {shown!r}" if shown.isprintable() else "it answered with something else"


def probe_address(address: str, timeout_s: float = PROBE_SECONDS) -> str | None:
    """Why the Ray cluster at ``address`` (the value of ``RAY_ADDRESS``) cannot be joined, or ``None``.

    ``host:port`` (the GCS address ``ray start --head`` prints), ``ray://host[:port]`` (Ray Client,
    port 10001 by default) and ``http(s)://host[:port]`` (the dashboard's job submission API, a ``ray``
    profile's ``address``; port 8265 by default) are probed with TCP connects for up to ``timeout_s`` seconds; a
    GCS or Ray Client address must then speak gRPC (:func:`_speaks_grpc`, at most :data:`SPEAKS_SECONDS`): Ray's own
    join of a port where something else listens retries for minutes with only C++ warnings (the dashboard speaks
    HTTP/1, so an ``http(s)://`` address is only connected to). ``auto`` and ``local`` are left to Ray (they name no
    host). Only opens and closes a socket; never raises.
    """
    address = address.strip()
    if address in ("auto", "local") or not address:
        return None
    scheme, _, rest = address.partition("://") if "://" in address else ("", "", address)
    default_port = {"ray": _CLIENT_PORT, "http": _DASHBOARD_PORT, "https": _DASHBOARD_PORT}.get(scheme)
    if scheme and default_port is None:
        return f"{address!r} is not host:port (or ray://host:port, http://host:port, auto)"
    rest = rest.split("/", 1)[0]
    host, sep, port_text = rest.rpartition(":")
    if not sep:
        host, port_text = rest, str(default_port or "")
    host = host.strip("[]")
    if not host or not port_text.isdigit():
        return f"{address!r} is not host:port (or ray://host:port, http://host:port, auto)"
    port = int(port_text)
    deadline = time.monotonic() + timeout_s
    reason = "no answer"
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(min(left, 2.0), 0.1)) as sock:
                if scheme in ("http", "https"):  # the dashboard: HTTP/1, not gRPC
                    return None
                other = _speaks_grpc(sock, min(SPEAKS_SECONDS, max(timeout_s, 0.5)))
                if other is None:
                    return None
                return (f"{host}:{port} is not a Ray cluster's address: {other} (a Ray head's GCS port, as `ray start "
                        f"--head` prints it, or ray://HOST:10001, answers in gRPC)")
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
        if time.monotonic() + 0.5 >= deadline:
            return f"nothing answers at {host}:{port} ({reason}, tried for {timeout_s:g}s)"
        time.sleep(0.5)


def _no_native_sigterm_dump(ray: Any) -> None:
    """Keep Ray's core worker from installing its native failure-signal handler (Abseil's, through Ray's
    ``logging.cc``) in this driver process.

    That handler also takes SIGTERM: a ``kill``, ``timeout``, ``scancel`` or an attached run's Ctrl-C during or
    right after ``ray.init`` then printed ``*** SIGTERM received ... PC: @ ... __recv`` stack dumps and ended the
    job with 15 or 134 (SIGABRT), never with our clean stop (exit 75). Ray reads the switch
    ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER`` from ``ray._private.ray_constants`` when it builds the driver's core
    worker; setting the module's value (not the environment variable) keeps the handler in Ray's worker processes,
    whose crash dumps stay. A Ray without that constant is left as it is.
    """
    with contextlib.suppress(Exception):
        from ray._private import ray_constants

        if hasattr(ray_constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"):
            ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True


@contextlib.contextmanager
def ray_session(num_cpus: int | None = None) -> Iterator[dict[str, Any]]:
    """Yield ``{"started": bool, "address": str, "cpus": int}`` with Ray initialised.

    Args:
        num_cpus: CPUs for a locally started Ray (``None``: all of this machine's). Ignored when
            joining an existing cluster, whose size is its own.

    Raises:
        RuntimeFailure: Ray is not installed, or cannot start / connect; a ``RAY_ADDRESS`` where nothing
            answers (:func:`probe_address`) is said within seconds, with the hint to unset the variable.
    """
    try:
        import ray
    except ImportError:
        raise RuntimeFailure("data prep needs Ray, which is not installed",
                             "Ray is a base dependency: reinstall the tool (pip install nemotron-cli, or in a checkout: uv sync / "
                             "pip install -e .)") from None
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    started = False
    ours = threading.current_thread() is threading.main_thread()
    # the handler before ray.init replaces it (the stage's own: nemotron.data.driver.stage_main): put back when the
    # session ends, so a SIGTERM while the outputs are written after it still stops the run cleanly (exit 75), not
    # through Ray's handler (exit 15)
    outer = signal.getsignal(signal.SIGTERM) if ours else None
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        kwargs: dict[str, Any] = dict(logging_level=logging.ERROR, log_to_driver=True, configure_logging=True)
        if address:
            problem = probe_address(address)
            if problem is not None:
                raise RuntimeFailure(f"cannot join the Ray cluster at RAY_ADDRESS={address}: {problem}",
                                     "unset RAY_ADDRESS (`unset RAY_ADDRESS`) to start a local Ray on this machine, "
                                     "or set it to the address of a running Ray head (ray start --head prints it)")
        _no_native_sigterm_dump(ray)
        try:
            if address:
                ray.init(address=address, **kwargs)
            else:
                # address="local": always a fresh instance of our own, even when a `ray start` cluster of
                # someone else runs on this machine (plain ray.init() would join that one)
                ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False, **kwargs)
            hold_point("ray-started")  # tests: a SIGTERM while Ray's init handler (sys.exit) is still the one set
        except SystemExit as exc:  # SIGTERM while Ray starts: its init's own handler exits with the signal number
            if exc.code != signal.SIGTERM:
                raise
            with contextlib.suppress(Exception):
                ray.shutdown()
            raise StopRequested(signal.SIGTERM) from None
        except Exception as exc:  # report any start failure the same way
            where = f"the Ray cluster at RAY_ADDRESS={address}" if address else "a local Ray instance"
            raise RuntimeFailure(f"cannot start or join {where}: {type(exc).__name__}: {exc}") from None
        started = True
    # Ray's init sets a SIGTERM handler (sys.exit) in the driver; ours replaces it (main thread only) so `kill`, `timeout`, scancel and Slurm's warning stop the run cleanly:
    # StopRequested (an interrupt) unwinds through the pipelines' cleanup and the entry exits 75 (resumable)
    if ours:
        signal.signal(signal.SIGTERM, request_stop)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        yield {"started": started, "address": os.environ.get("RAY_ADDRESS") or "local", "cpus": cpus}
    finally:
        if started:
            ray.shutdown()
        if ours:  # a handler installed outside Python reads back as None: the default then
            signal.signal(signal.SIGTERM, outer if outer is not None else signal.SIG_DFL)



def run_streaming(
    remote_fn: Any,
    items: list[Any],
    *,
    args: tuple[Any, ...] = (),
    max_in_flight: int,
    num_cpus: float = 1,
    on_progress: Callable[[Any, Any], None] | None = None,
    on_done: Callable[[Any, Any], None] | None = None,
) -> None:
    """Run ``remote_fn(item, *args)`` for every item as a Ray streaming-generator task.

    The task yields ``("progress", payload)`` any number of times and ``("done", result)`` once, last.
    Items start in the order given, at most ``max_in_flight`` at a time (the order and concurrency
    affect only timing, never what a task computes).

    Raises:
        NemotronError: re-raised from a task that raised one.
        RuntimeFailure: a task failed otherwise (worker crash, unexpected exception).
    """
    import ray

    todo = list(items)
    todo.reverse()
    running: dict[Any, Any] = {}

    def submit() -> None:
        while todo and len(running) < max_in_flight:
            item = todo.pop()
            gen = remote_fn.options(num_returns="streaming", num_cpus=num_cpus).remote(item, *args)
            running[gen] = item

    try:
        submit()
        while running:
            ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for gen in ready:
                item = running[gen]
                try:
                    ref = next(gen)
                except StopIteration:
                    del running[gen]
                    continue
                try:
                    kind, payload = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, NemotronError):
                        raise cause from None
                    raise RuntimeFailure(f"task for {_label(item)} failed: {type(cause or exc).__name__}: "
                                         f"{str(cause or exc).splitlines()[-1] if str(cause or exc) else ''}") from None
                except ray.exceptions.RayError as exc:
                    raise RuntimeFailure(f"task for {_label(item)} failed: {type(exc).__name__}: "
                                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
                if kind == "progress":
                    if on_progress:
                        on_progress(item, payload)
                else:
                    if on_done:
                        on_done(item, payload)
            submit()
    finally:
        for gen in running:
            with contextlib.suppress(Exception):
                ray.cancel(gen, force=True)


def _label(item: Any) -> str:
    if isinstance(item, dict) and "id" in item:
        return str(item["id"])
    return str(item)[:80]
