"""The FHIR HTTP server: stdlib ``http.server`` in a thread, on a Unix socket or on 127.0.0.1.

``FhirServer(store, uds=path)`` serves one store (normally one episode's :class:`~medagentgym.tasks.fhir.store.FhirStore`)
on a Unix socket; a sandbox bridge (``pool.session(bridges={8080: path})``) shows it to jailed code as
``http://127.0.0.1:8080/fhir/``. ``FhirServer(store, port=0)`` listens on the host's loopback instead (builds,
tests, local use). :func:`open_episode_server` gives each episode a fresh store and its own socket.

``ProxyStore(base_url)`` is the adapter for an external FHIR server (e.g. a real MedAgentBench HAPI server at
``http://localhost:8080/fhir/``): GETs are forwarded to it, POSTs are recorded for the episode and answered
locally (201) without touching the shared server, so episodes stay independent.

Example:
    >>> server = open_episode_server(BaseData(generate_patients(6)))
    >>> server.socket_path.exists()
    True
    >>> server.close()
"""

from __future__ import annotations

import json
import shutil
import socketserver
import tempfile
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from medagentgym.tasks.fhir.store import MAX_CREATED_BYTES, MAX_CREATES, BaseData, FhirStore, outcome

_MAX_BODY = 1 << 20


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "MedAgentGymFHIR/1"

    def _answer(self, method: str) -> None:
        split = urlsplit(self.path)
        body = None
        if method == "POST":
            declared = (self.headers.get("Content-Length") or "0").strip()
            if not declared.isdigit():  # read(-1) would read until the client stops sending
                self._send(400, outcome(f"Content-Length {declared[:40]!r} is not a byte count"))
                self.close_connection = True
                return
            length = int(declared)
            if length > _MAX_BODY:
                self._send(413, outcome(f"body of {length} bytes is too large (limit {_MAX_BODY})", "too-large"))
                return
            body = self.rfile.read(length) if length else b""
        status, payload = self.server.store.request(method, split.path, split.query, body)
        self._send(status, payload)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/fhir+json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if status == 201 and payload.get("id"):
            self.send_header("Location", f"{payload['resourceType']}/{payload['id']}/_history/1")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._send(405, outcome("PUT is not supported: use POST to create", "not-supported"))

    do_DELETE = do_PATCH = do_PUT

    def address_string(self) -> str:
        return "bridge"

    def log_message(self, *args: Any) -> None:  # quiet: requests are not logged to stderr
        return


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


class _TcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class FhirServer:
    """Serves ``store`` over HTTP from a daemon thread until :meth:`close`.

    Args:
        store: Anything with ``request(method, path, query, body) -> (status, json)``.
        uds: Listen on this Unix socket path (created; an existing file there is replaced).
        port: Otherwise listen on 127.0.0.1:port (0 picks a free port).

    Attributes:
        url: ``http://127.0.0.1:<port>/fhir/`` for a TCP server, else None.
        socket_path: The Unix socket, else None.
    """

    def __init__(self, store: Any, *, uds: Path | str | None = None, port: int | None = None) -> None:
        self.store = store
        self.socket_path = Path(uds) if uds is not None else None
        if self.socket_path is not None:
            if self.socket_path.exists() or self.socket_path.is_symlink():
                self.socket_path.unlink()
            self._server = _UnixServer(str(self.socket_path), _Handler)
            self.url = None
        else:
            self._server = _TcpServer(("127.0.0.1", int(port or 0)), _Handler)
            self.url = f"http://127.0.0.1:{self._server.server_address[1]}/fhir/"
        self._server.store = store
        # poll_interval bounds how long close() waits for the loop to notice shutdown (once per episode).
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fhir-server", daemon=True)
        self._thread.start()
        self._closed = False

    def swap(self, store: Any) -> None:
        """Serve ``store`` from now on (a fresh state without restarting the server)."""
        self.store = store
        self._server.store = store

    def close(self) -> None:
        """Stop serving and remove the socket file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        if self.socket_path is not None:
            try:
                self.socket_path.unlink()
            except OSError:
                pass

    def __enter__(self) -> FhirServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EpisodeServer(FhirServer):
    """One episode's server: a fresh store on its own Unix socket in a private temporary directory."""

    def __init__(self, store: Any) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="fhir-episode-"))
        super().__init__(store, uds=self._dir / "fhir.sock")

    def close(self) -> None:
        """Stop serving and remove the socket and its directory."""
        super().close()
        shutil.rmtree(self._dir, ignore_errors=True)


def open_episode_server(base: BaseData | None = None, *, base_url: str | None = None) -> EpisodeServer:
    """Start a server for one episode: the local synthetic data, or a proxy to the external ``base_url``."""
    if base_url:
        return EpisodeServer(ProxyStore(base_url))
    if base is None:
        raise ValueError("open_episode_server needs base data or base_url")
    return EpisodeServer(FhirStore(base))


class ProxyStore:
    """Forwards reads to an external FHIR server; keeps POSTs for the episode (never forwarded).

    Args:
        base_url: The external server's base, e.g. ``http://localhost:8080/fhir/``.
        timeout_s: Per-request timeout.

    Attributes:
        created: The accepted POSTs of this episode, with locally assigned ids.
    """

    def __init__(self, base_url: str, timeout_s: float = 30.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"fhir_base_url {base_url!r} must start with http:// or https://")
        self.base_url = base_url.rstrip("/") + "/"
        self.timeout_s = timeout_s
        self.created: list[dict[str, Any]] = []
        self.created_bytes = 0
        self._lock = threading.Lock()

    def request(self, method: str, path: str, query: str = "", body: bytes | None = None) -> tuple[int, dict]:
        """Proxy a GET; record a POST and answer 201 locally."""
        rel = "/".join(p for p in path.split("/") if p)
        rel = rel[len("fhir/"):] if rel.startswith("fhir/") else ("" if rel == "fhir" else rel)
        if method == "POST":
            body = body or b""
            with self._lock:
                if len(self.created) >= MAX_CREATES or self.created_bytes + len(body) > MAX_CREATED_BYTES:
                    return 429, outcome(f"this episode reached its budget of {MAX_CREATES} resources or "
                                        f"{MAX_CREATED_BYTES} bytes; no more are accepted")
            try:
                resource = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                return 400, outcome(f"body is not JSON ({type(exc).__name__}); send a FHIR resource as a JSON object")
            if not isinstance(resource, dict) or resource.get("resourceType") != rel.split("/")[0]:
                return 400, outcome("body must be one FHIR resource whose resourceType matches the URL")
            with self._lock:
                resource["id"] = f"ep-{len(self.created) + 1}"
                self.created.append(resource)
                self.created_bytes += len(body)
            return 201, resource
        if method != "GET":
            return 405, outcome(f"{method} is not supported: use GET or POST")
        url = self.base_url + rel + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                return resp.status, json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read().decode("utf-8"))
            except ValueError:
                return exc.code, outcome(f"upstream answered {exc.code}")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return 502, outcome(f"the external FHIR server at {self.base_url} is unreachable: {exc}", "exception")

