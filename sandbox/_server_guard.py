"""The env server's front door: bearer tokens, client identity and request size limits (a plain ASGI middleware).

It runs before FastAPI parses anything, so an unauthenticated or oversized request costs the server a few header
bytes and at most ``max_body_bytes`` of memory: the body is read chunk by chunk, counted, and refused with 413
as soon as it passes the limit (or at once when ``Content-Length`` already says so). A body that trickles in
slower than ``body_timeout_s`` is refused with 408, so a slow client cannot hold a connection open forever.

Each request is tagged with a client id in ``scope["env_server.client"]``: ``token:<i>`` (the i-th accepted
token) when tokens are on, else ``addr:<peer ip>``. The session table counts sessions per client id; the guard
itself counts open WebSocket connections (one session each) per client and refuses one past
``max_ws_per_client`` at the handshake. A token is accepted as ``Authorization: Bearer <token>`` or as the
password of HTTP Basic auth (any user name), which is what a WebSocket client sends for a URL such as
``ws://user:<token>@host:8000/ws``; clients that cannot set headers (OpenEnv's generic client) use that form.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import hmac
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["CLIENT_KEY", "Guard", "check_tokens", "client_id", "current_client"]

CLIENT_KEY = "env_server.client"
#: The client id of the request (or WebSocket connection) being served, for code that sees no scope (another
#: protocol's session table); None outside a request (a reaper, the lifespan).
_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("env_server_client", default=None)
log = logging.getLogger("medagentgym.sandbox.server")
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
_TOKEN_HINT = ("send 'Authorization: Bearer <token>' with a token the server was started with "
               "(medagentgym serve --token, or MEDAGENTGYM_ENV_TOKEN on both sides)")


def client_id(scope: Scope) -> str:
    """The client id the guard assigned to this request (``addr:?`` outside the guard, e.g. in-process tests)."""
    return scope.get(CLIENT_KEY) or _peer(scope)


def current_client() -> str | None:
    """The client id of the request this code serves (set by :class:`Guard`), None outside a request."""
    return _CURRENT.get()


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return f"addr:{client[0]}" if client else "addr:?"


def check_tokens(tokens: Sequence[str]) -> None:
    """Refuse tokens too short to be secret.

    Raises:
        ValueError: A token shorter than 8 characters (or not ASCII).
    """
    for token in tokens:
        if len(token) < 8 or not token.isascii() or any(c.isspace() for c in token):
            raise ValueError("every bearer token must be at least 8 printable ASCII characters without spaces "
                             "(make one with `openssl rand -hex 16`)")


class Guard:
    """ASGI middleware: token check (all paths but ``open_paths``), client tagging, body size and time limits.

    Args:
        app: The wrapped ASGI app.
        tokens: Accepted bearer tokens; empty = no authentication (clients are told apart by peer address).
        max_body_bytes: Largest request body accepted (413 beyond).
        body_timeout_s: Longest time to receive a whole body (408 beyond).
        open_paths: Paths served without a token (liveness probes).
        ws_refusal: ``ws_refusal(client) -> reason or None``: refuse a WebSocket handshake (e.g. the client holds
            its cap of sessions already).
    """

    def __init__(self, app: Any, *, tokens: Sequence[str] = (), max_body_bytes: int = 1 << 20,
                 body_timeout_s: float = 30.0, max_ws_per_client: int | None = None,
                 open_paths: frozenset[str] = frozenset({"/health"}),
                 ws_refusal: Callable[[str], str | None] | None = None) -> None:
        check_tokens(tokens)
        self.app, self.max_body_bytes, self.body_timeout_s = app, max_body_bytes, body_timeout_s
        self._tokens = [t.encode() for t in tokens]
        self.open_paths, self.max_ws_per_client, self.ws_refusal = open_paths, max_ws_per_client, ws_refusal
        self._ws_open: Counter[str] = Counter()  # open WebSocket connections per client (one event loop: no lock)

    def _identify(self, scope: Scope) -> str | None:
        if not self._tokens:
            return _peer(scope)
        given = _presented_token(dict(scope.get("headers") or []).get(b"authorization", b""))
        match = None
        for i, token in enumerate(self._tokens):  # compare with every token: time does not tell which was close
            if hmac.compare_digest(given, token):
                match = f"token:{i}"
        return match

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        who = self._identify(scope)
        if who is None and scope.get("path") not in self.open_paths:
            if kind == "websocket":  # closing before accept refuses the handshake (HTTP 403)
                await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
            else:
                await _reply(send, 401, f"missing or wrong bearer token; {_TOKEN_HINT}",
                             [(b"www-authenticate", b"Bearer")])
            return
        scope[CLIENT_KEY] = who = who or _peer(scope)
        _CURRENT.set(who)  # this request's task (and what it awaits) sees its client
        if kind == "websocket":
            refusal = self.ws_refusal(who) if self.ws_refusal is not None else None
            if refusal is None and self.max_ws_per_client is not None and self._ws_open[who] >= self.max_ws_per_client:
                refusal = f"this client already holds {self.max_ws_per_client} sessions"
            if refusal is not None:  # at the handshake (HTTP 403), before a session is made for it
                await send({"type": "websocket.close", "code": 1008, "reason": refusal[:120]})
                return
            self._ws_open[who] += 1
            try:
                await self.app(scope, *_quiet_close(receive, send))
            finally:
                self._ws_open[who] -= 1
                if self._ws_open[who] <= 0:  # forget the client: without tokens every peer address is one
                    del self._ws_open[who]
            return
        if kind == "http" and scope.get("method") in ("POST", "PUT", "PATCH"):
            body = await self._read_body(scope, receive, send)
            if body is None:
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None after answering 413/408 (never more than ``max_body_bytes`` held)."""
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"").strip()
        too_big = (f"request body over the server's limit of {self.max_body_bytes} bytes; send a shorter action "
                   f"(or start the server with a larger --max-body-bytes)")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await _reply(send, 413, too_big)
            return None
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                await _reply(send, 408, f"request body not received within {self.body_timeout_s:g} s")
                return None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _reply(send, 413, too_big)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _quiet_close(receive: Receive, send: Send) -> tuple[Receive, Send]:
    """Let an app close a WebSocket the client already closed (uvicorn would log a server error for it)."""
    gone = False

    async def watched_receive() -> dict[str, Any]:
        nonlocal gone
        message = await receive()
        gone = gone or message["type"] == "websocket.disconnect"
        return message

    async def guarded_send(message: dict[str, Any]) -> None:
        if message["type"] != "websocket.close":
            await send(message)
            return
        if not gone:
            try:
                await send(message)
            except Exception:  # noqa: BLE001 - the peer left first: the socket is closed either way
                log.debug("closing a WebSocket the client had already closed")

    return watched_receive, guarded_send


def _presented_token(header: bytes) -> bytes:
    """The token of ``Bearer <token>`` or the password of ``Basic base64(user:token)``; ``b""`` otherwise."""
    scheme, _, value = header.partition(b" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == b"bearer":
        return value
    if scheme == b"basic":
        try:
            return base64.b64decode(value, validate=True).partition(b":")[2]
        except (binascii.Error, ValueError):
            return b""
    return b""


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later calls wait for the client's disconnect, as uvicorn's own receive does

    return replay


async def _reply(send: Send, status: int, detail: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})
