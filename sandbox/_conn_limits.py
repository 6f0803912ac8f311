"""Connection limits of the env server, before any request is read: a header deadline, per-address and total caps.

The token check (``sandbox/_server_guard.py``) runs once a request's headers are complete, so a client that never
finishes them (slowloris) or opens thousands of sockets is past every limit of the app. These limits live in
uvicorn's protocol objects instead, where a connection is accepted:

- ``max_connections`` open connections in all and ``max_per_address`` from one peer address (HTTP and WebSocket
  alike; an IPv6 peer counts by its /64, an IPv4-mapped one as its IPv4 address); a connection past either cap is
  closed as soon as it is accepted, before a byte is read;
- ``header_timeout_s``: a connection that has not sent a complete request head within this long after it opened,
  or after its previous response (keep-alive), is closed. A request whose head arrived is not bound by it (the
  guard's body deadline and the app's own limits apply).

:func:`server_config` builds the ``uvicorn.Config`` with them (and uvicorn's own keep-alive, message and head-size
limits); ``medagentgym serve`` and ``medagentgym.env_client.server_app.background_server`` use it.

Example:
    >>> config = server_config(app, host="127.0.0.1", port=8000, limits=ConnLimits(header_timeout_s=10))
    >>> uvicorn.Server(config).run()
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["ConnLimits", "server_config"]
log = logging.getLogger("medagentgym.sandbox.server")


@dataclass
class ConnLimits:
    """The caps and the deadline (see the module docstring), with their live counts (one event loop: no lock).

    Attributes:
        header_timeout_s: Longest wait for a complete request head.
        max_per_address: Open connections one peer address may hold.
        max_connections: Open connections in all.
    """

    header_timeout_s: float = 10.0
    max_per_address: int = 256
    max_connections: int = 1024
    refused: int = 0  # connections closed at accept (a cap) or at the header deadline, for the logs and tests
    _by_address: Counter[str] = field(default_factory=Counter, repr=False)
    _open: dict[int, str] = field(default_factory=dict, repr=False)  # id(transport) -> its address

    def __post_init__(self) -> None:
        if self.header_timeout_s <= 0 or self.max_per_address < 1 or self.max_connections < 1:
            raise ValueError(f"connection limits must be positive (header_timeout_s={self.header_timeout_s}, "
                             f"max_per_address={self.max_per_address}, max_connections={self.max_connections})")

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection; False (and nothing counted) when a cap is reached."""
        peer = transport.get_extra_info("peername")
        address = _address_key(str(peer[0])) if isinstance(peer, (tuple, list)) and peer else "?"
        if len(self._open) >= self.max_connections or self._by_address[address] >= self.max_per_address:
            self.refused += 1
            return False
        self._open[id(transport)] = address
        self._by_address[address] += 1
        return True

    def release(self, transport: asyncio.BaseTransport) -> None:
        """Uncount a connection (idempotent: both protocols of an upgraded connection call it)."""
        address = self._open.pop(id(transport), None)
        if address is not None:
            self._by_address[address] -= 1
            if self._by_address[address] <= 0:
                del self._by_address[address]

    @property
    def open_connections(self) -> int:
        return len(self._open)


def _address_key(host: str) -> str:
    """What the per-address cap counts: an IPv4 address; an IPv6 peer by its /64 (one host or site holds a whole
    /64, so counting its addresses apart would let one machine take the total cap); an IPv4-mapped IPv6 peer
    (a dual-stack socket) as its IPv4 address."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _protocols(limits: ConnLimits) -> tuple[type, type]:
    """uvicorn's h11 and WebSocket protocol classes, bound to ``limits``."""

    class LimitedWebSockets(WebSocketsSansIOProtocol):
        def connection_lost(self, exc: Exception | None) -> None:
            limits.release(self.transport)
            super().connection_lost(exc)

    class LimitedH11(H11Protocol):
        _admitted = False
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if not limits.admit(transport):
                transport.abort()  # before a byte is read; connection_lost follows and does nothing
                return
            self._admitted = True
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_deadline)

        def _head_deadline(self) -> None:
            self._head_timer = None
            waiting_for_head = self.cycle is None or self.cycle.response_complete
            if waiting_for_head and not self.transport.is_closing():
                limits.refused += 1
                self.transport.abort()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's head has its own deadline

        def handle_websocket_upgrade(self, event: Any) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc: Exception | None) -> None:
            if not self._admitted:
                return
            if self._head_timer is not None:
                self._head_timer.cancel()
            limits.release(self.transport)
            super().connection_lost(exc)

    return LimitedH11, LimitedWebSockets


def server_config(app: Any, *, limits: ConnLimits | None = None, ws_max_size: int = 1 << 20, **kwargs: Any) -> Any:
    """A ``uvicorn.Config`` serving ``app`` under ``limits`` (defaults: :class:`ConnLimits`); ``kwargs`` go to
    uvicorn (``host``, ``port``, ``log_level``...). The limits object is ``config.conn_limits``."""
    import uvicorn

    limits = limits or ConnLimits()
    http, ws = _protocols(limits)
    options = {"timeout_keep_alive": 5, "h11_max_incomplete_event_size": 16 * 1024, **kwargs}
    config = uvicorn.Config(app, http=http, ws=ws, ws_max_size=ws_max_size, **options)
    config.conn_limits = limits
    return config
