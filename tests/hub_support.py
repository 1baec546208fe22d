"""A stand-in for the Hugging Face hub's endpoint on 127.0.0.1, so that the hub probe (:mod:`nemotron.data.hub`) of
the data prep configs never depends on this machine's network: ``HF_ENDPOINT`` points here for the whole test
session (tests/conftest.py), and tests of an unreachable hub point it at a closed port or at a server that
answers 503 (:func:`closed_port`, :func:`serve`)."""

from __future__ import annotations

import http.server
import socket
import threading


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def _answer(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = _answer
    do_GET = _answer

    def log_message(self, format, *args):  # quiet: the tests read their own output
        pass


def serve(status: int = 200) -> tuple[str, http.server.ThreadingHTTPServer]:
    """An HTTP server on 127.0.0.1 (a daemon thread of this process) answering every ``HEAD``/``GET`` with
    ``status`` and no body: ``(base URL, server)``; ``server.shutdown()`` stops it."""
    handler = type("Handler", (_Handler,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"hub-{status}", daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def closed_port() -> str:
    """``http://127.0.0.1:PORT`` where nothing listens (a port just bound and released): connects are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
