"""The env server's front door: bearer tokens, client identity and request size limits (a plain ASGI middleware).

It runs before FastAPI parses anything, so an unauthenticated or oversized request costs the server a few header
bytes and at most ``max_body_bytes`` of memory: the body is read chunk by chunk, counted, and refused with 413
as soon as it passes the limit (or at once when ``Content-Length`` already says so). A body that trickles in
slower than ``body_timeout_s`` is refused with 408, so a slow client cannot hold a connection open forever.

Each request is tagged with a client id in ``scope["env_server.client"]``: ``token:<i>`` (the i-th accepted
token) when tokens are on, else ``addr:<peer ip>``. The session table counts sessions per client id.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["CLIENT_KEY", "Guard", "check_tokens", "client_id"]

CLIENT_KEY = "env_server.client"
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
_TOKEN_HINT = ("send 'Authorization: Bearer <token>' with a token the server was started with "
               "(serve_env.py --token, or MEDAGENTGYM_ENV_TOKEN on both sides)")


def client_id(scope: Scope) -> str:
    """The client id the guard assigned to this request (``addr:?`` outside the guard, e.g. in-process tests)."""
    return scope.get(CLIENT_KEY) or _peer(scope)


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
    """

    def __init__(self, app: Any, *, tokens: Sequence[str] = (), max_body_bytes: int = 1 << 20,
                 body_timeout_s: float = 30.0, open_paths: frozenset[str] = frozenset({"/health"})) -> None:
        check_tokens(tokens)
        self.app, self.max_body_bytes, self.body_timeout_s = app, max_body_bytes, body_timeout_s
        self._tokens = [t.encode() for t in tokens]
        self.open_paths = open_paths

    def _identify(self, scope: Scope) -> str | None:
        if not self._tokens:
            return _peer(scope)
        headers = dict(scope.get("headers") or [])
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        match = None
        for i, token in enumerate(self._tokens):  # compare with every token: time does not tell which was close
            if hmac.compare_digest(given.strip(), token) and scheme.lower() == b"bearer":
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
        scope[CLIENT_KEY] = who or _peer(scope)
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
