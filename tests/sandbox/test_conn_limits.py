"""Connection limits before authentication (issue 31): slowloris, one address's flood, the total cap.

Attacks on a real uvicorn server on loopback: sockets that send half a request head and stop. Before the limits
every one of them stayed open (300 of 300 in the attack round); now a connection past the per-address or total cap
is closed at accept, and a head that is not complete within the header deadline closes its connection.
"""

from __future__ import annotations

import select
import socket
import time

import pytest
from pydantic import BaseModel

from medagentgym.env_client.server_app import background_server
from medagentgym.sandbox._conn_limits import ConnLimits
from medagentgym.sandbox.server import create_app

TOKEN = "conn-limits-token-0001"
HALF_HEAD = b"POST /reset HTTP/1.1\r\nHost: x\r\nX-Slow: "  # never finished


class _Nothing(BaseModel):
    pass


class _Env:
    def reset(self, request):
        return _Nothing(), {}

    def step(self, action):
        return _Nothing(), 0.0, True, False, {}

    def state(self):
        return {}

    def close(self):
        pass


def _app():
    return create_app(_Env, _Nothing, _Nothing, tokens=[TOKEN], capacity=4)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _connect(port: int, source: str = "127.0.0.1", send: bytes = HALF_HEAD) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    if send:
        s.sendall(send)
    return s


def _read_response(s: socket.socket) -> bytes:
    """One whole response (head and ``Content-Length`` body). A response read in part leaves bytes that
    :func:`_closed_by_server`'s peek would see for ever (it once arrived as two segments: 1 run in 5 failed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk, data + body
        body += chunk
    return head + b"\r\n\r\n" + body


def _closed_by_server(s: socket.socket) -> bool:
    """The server closed (or reset) this connection; a socket it still holds has nothing to read."""
    if not select.select([s], [], [], 0)[0]:
        return False
    try:
        return s.recv(65536, socket.MSG_PEEK) == b""
    except (ConnectionResetError, OSError):
        return True


def _wait(predicate, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _get_health(port: int, source: str) -> bytes:
    s = _connect(port, source, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    s.settimeout(60)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return data


def test_one_address_cannot_hold_more_than_its_cap_of_unfinished_heads():
    """60 half-sent heads from one address: only 16 (its cap) stay open; another address is still served."""
    limits = ConnLimits(header_timeout_s=600, max_per_address=16, max_connections=64)
    with background_server(_app(), limits=limits) as url:
        port = _port(url)
        socks = [_connect(port) for _ in range(60)]
        try:
            assert _wait(lambda: sum(map(_closed_by_server, socks)) >= 44), \
                f"{sum(not _closed_by_server(s) for s in socks)} of 60 unfinished connections stayed open"
            assert sum(not _closed_by_server(s) for s in socks) == 16
            assert _get_health(port, "127.0.0.2").startswith(b"HTTP/1.1 200")  # another address is served
            assert limits.refused >= 44
        finally:
            for s in socks:
                s.close()
        assert _wait(lambda: limits.open_connections == 0)  # closed connections are uncounted


def test_the_total_cap_holds_across_addresses():
    limits = ConnLimits(header_timeout_s=600, max_per_address=16, max_connections=24)
    with background_server(_app(), limits=limits) as url:
        port = _port(url)
        socks = [_connect(port, f"127.0.0.{2 + i // 8}") for i in range(40)]  # 5 addresses x 8
        try:
            assert _wait(lambda: sum(map(_closed_by_server, socks)) >= 16)
            assert sum(not _closed_by_server(s) for s in socks) == 24
        finally:
            for s in socks:
                s.close()
        assert _wait(lambda: limits.open_connections == 0)
        assert _get_health(port, "127.0.0.9").startswith(b"HTTP/1.1 200")


def test_unfinished_heads_are_closed_at_the_header_deadline():
    """Slowloris: heads that never finish (also the second request on a keep-alive connection) are closed after
    ``header_timeout_s``; a request whose head arrived is served."""
    limits = ConnLimits(header_timeout_s=0.5, max_per_address=64, max_connections=64)
    with background_server(_app(), limits=limits) as url:
        port = _port(url)
        socks = [_connect(port) for _ in range(30)]
        silent = [_connect(port, send=b"") for _ in range(5)]  # not a byte sent
        keep_alive = _connect(port, send=b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        keep_alive.settimeout(60)
        assert _read_response(keep_alive).startswith(b"HTTP/1.1 200")
        keep_alive.sendall(HALF_HEAD)  # the next request's head never finishes
        every = [*socks, *silent, keep_alive]
        try:
            assert _wait(lambda: all(map(_closed_by_server, every))), \
                f"{sum(not _closed_by_server(s) for s in every)} of {len(every)} stayed open past the deadline"
        finally:
            for s in every:
                s.close()
        assert _get_health(port, "127.0.0.1").startswith(b"HTTP/1.1 200")
        assert _wait(lambda: limits.open_connections == 0)


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        ConnLimits(header_timeout_s=0)
