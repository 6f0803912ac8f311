"""Attack round on issue 31's connection bookkeeping: counts that never shrink are a slow leak an attacker drives.

- The guard's per-client WebSocket count kept one entry per client id it ever saw (at 0 after the socket closed);
  without tokens a client id is the peer address, so every new address grew the table for the server's lifetime.
- The per-address connection cap counted every IPv6 address apart: one host holds a /64 (2**64 addresses), so
  one machine could take the whole total cap before authentication. Now an IPv6 peer counts by its /64 and an
  IPv4-mapped one as its IPv4 address.
"""

from __future__ import annotations

import asyncio

from medagentgym.sandbox._conn_limits import ConnLimits
from medagentgym.sandbox._server_guard import Guard


async def _ws_app(scope, receive, send):
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


def _one_socket(guard: Guard, address: str, abnormal: bool) -> None:
    """One WebSocket through the guard from ``address``: it connects, then goes away (a clean close, or the
    connection drops under the app: the receive raises)."""
    events = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1000}]

    async def receive():
        if abnormal and len(events) == 1:
            raise ConnectionResetError("peer vanished")
        return events.pop(0)

    async def send(message):
        pass

    scope = {"type": "websocket", "path": "/ws", "headers": [], "client": (address, 40000)}
    try:
        asyncio.run(guard(scope, receive, send))
    except ConnectionResetError:
        pass


def test_the_guard_forgets_clients_whose_sockets_closed():
    guard = Guard(_ws_app, max_ws_per_client=2)
    for i in range(50):
        _one_socket(guard, f"10.0.{i // 250}.{i % 250}", abnormal=i % 2 == 1)
    assert sum(guard._ws_open.values()) == 0
    assert len(guard._ws_open) == 0, f"{len(guard._ws_open)} closed clients still have an entry"


class _Transport:
    def __init__(self, host: str) -> None:
        self.host = host

    def get_extra_info(self, name: str):
        return (self.host, 5000, 0, 0) if name == "peername" else None


def test_one_ipv6_prefix_is_one_address_for_the_cap():
    limits = ConnLimits(max_per_address=4, max_connections=1000)
    hosts = [f"2001:db8:0:1::{i:x}" for i in range(1, 41)]  # 40 addresses of one /64
    tried = [_Transport(h) for h in hosts]  # kept alive: the limits key an open connection by its transport
    admitted = [t for t in tried if limits.admit(t)]
    assert len(admitted) == 4, f"{len(admitted)} connections from one /64 admitted past a per-address cap of 4"
    other = _Transport("2001:db8:0:2::1")
    assert limits.admit(other)  # another /64 is another address
    tried += [_Transport(h) for h in ["::ffff:192.0.2.7"] * 3 + ["192.0.2.7"] * 3]
    mapped = [t for t in tried[-6:] if limits.admit(t)]
    assert len(mapped) == 4  # an IPv4-mapped peer is its IPv4 address
    for t in [*admitted, *mapped]:
        limits.release(t)
    assert limits.open_connections == 1 and len(limits._by_address) == 1
