"""A loopback HTTP server for task pages: folders on disk mounted under URL prefixes.

MiniWoB's pages load their scripts by relative paths (``../core/core.js``) and the flight
tasks refuse ``file://``; a user's task folder is a small site. One server per env serves
them all from ``127.0.0.1`` on a free port, read-only, without directory listings. The
port is never shown to the agent (observations must not change between runs).

It is also the only place the env's browser can reach: the browser sends every request
to it as to an HTTP proxy (``envs.gui.session``), and it answers those for its own origin
and refuses the rest (any other host or port, any ``CONNECT`` tunnel: WebSockets, TLS) with
403. So a task page, whatever its scripts or the agent do, talks to no other port of the
machine, loopback included.
"""

from __future__ import annotations

import os
import posixpath
import sys
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(SimpleHTTPRequestHandler):
    mounts: dict[str, Path] = {}
    origin = ""  # http://127.0.0.1:<port>, set once the server has its port

    def parse_request(self) -> bool:
        """Accept a request for this server's own origin, whether sent to it directly
        (``GET /path``) or as to a proxy (``GET http://127.0.0.1:<port>/path``); refuse a
        proxy request for anywhere else."""
        if not super().parse_request():
            return False
        if self.command != "CONNECT" and self.path.startswith("/"):
            return True
        target = urllib.parse.urlsplit(self.path)
        if self.command == "CONNECT" or f"{target.scheme}://{target.netloc}" != self.origin:
            self.send_error(403, "A task's page may reach only its own server")
            return False
        self.path = (target.path or "/") + (f"?{target.query}" if target.query else "")
        return True

    def translate_path(self, path: str) -> str:
        path = urllib.parse.unquote(path.split("?", 1)[0].split("#", 1)[0])
        parts = [p for p in posixpath.normpath(path).split("/") if p and p not in (".", "..")]
        if not parts or parts[0] not in self.mounts:
            return ""
        return str(self.mounts[parts[0]].joinpath(*parts[1:]))

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(404, "no directory listings")
        return None

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # A browser that hangs up before the answer is read (a cancelled load, a refused
        # proxy request it no longer wants) is normal, not worth a traceback on stderr.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class PageServer:
    """Serves ``mounts`` (URL prefix -> folder) on 127.0.0.1 until :meth:`close`."""

    def __init__(self, mounts: dict[str, Path]) -> None:
        for prefix in mounts:
            if not prefix or "/" in prefix:
                raise ValueError(f"a mount prefix must be one path segment, got {prefix!r}")
        handler = type("Handler", (_Handler,), {"mounts": {k: Path(v) for k, v in mounts.items()}})
        # Request threads are joined on close (block_on_close), so none outlives the env.
        self._server = _Server(("127.0.0.1", 0), handler)
        handler.origin = self.origin
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="clawgym-pages")
        self._thread.start()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``: the pages' origin, and the browser's proxy."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, prefix: str, path: str = "") -> str:
        """The URL of ``path`` inside the folder mounted at ``prefix``."""
        return f"{self.origin}/{prefix}/{urllib.parse.quote(path)}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
