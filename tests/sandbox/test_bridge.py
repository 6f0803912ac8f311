"""Bridges: jailed code reaches exactly the host Unix socket it was given, at 127.0.0.1:<port>, and nothing else."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from medagentgym.sandbox.bridge import check_bridges, host_relay, jail_forwarders

FETCH = """
import urllib.request
try:
    print(urllib.request.urlopen({url!r}, timeout=3).read().decode())
except Exception as exc:
    print("UNREACHABLE", type(exc).__name__)
"""


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"{self.server.greeting} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:
        return "test"

    def log_message(self, *args) -> None:
        return


class _UnixHTTP(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _TcpHTTP(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(server, greeting: str):
    server.greeting = greeting
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture
def unix_service(tmp_path):
    """An HTTP service on a host Unix socket answering 'hello from unix <path>'."""
    path = tmp_path / "svc.sock"
    server = _serve(_UnixHTTP(str(path), _Hello), "hello from unix")
    yield path
    server.shutdown()
    server.server_close()


@pytest.fixture
def host_tcp_service():
    """An HTTP service on the HOST's 127.0.0.1 (must stay unreachable from the jail)."""
    server = _serve(_TcpHTTP(("127.0.0.1", 0), _Hello), "host tcp")
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_relay_and_forwarder_chain_in_process(tmp_path, unix_service):
    relay = host_relay(tmp_path / "relay.sock", unix_service)
    port = _free_port()
    (forwarder,) = jail_forwarders({port: str(tmp_path / "relay.sock")})
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/fhir/metadata", timeout=5).read().decode()
        assert body == "hello from unix /fhir/metadata"
    finally:
        forwarder.close()
        relay.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)


def test_check_bridges_rejects_bad_ports_and_targets(tmp_path, unix_service):
    assert check_bridges({8080: unix_service}) == {8080: unix_service.resolve()}
    with pytest.raises(ValueError, match="1024-65535"):
        check_bridges({80: unix_service})
    (tmp_path / "plain.txt").write_text("x")
    with pytest.raises(ValueError, match="not a listening Unix socket"):
        check_bridges({8080: tmp_path / "plain.txt"})


def test_jail_reaches_only_its_bridge(pool, unix_service, host_tcp_service):
    with pool.session(bridges={8080: unix_service}) as s, pool.session() as other:
        bridged = s.run_python(FETCH.format(url="http://127.0.0.1:8080/fhir/Patient"))
        assert bridged.stdout.strip() == "hello from unix /fhir/Patient"
        # the persistent runner keeps the forwarder: a second call and a shell command work too
        shell = s.run_shell("python3 -c \"import urllib.request as u; "
                            "print(u.urlopen('http://127.0.0.1:8080/x', timeout=3).read().decode())\"")
        assert shell.stdout.strip() == "hello from unix /x", shell.stderr
        # the host's own loopback service and an outside address stay unreachable
        host = s.run_python(FETCH.format(url=f"http://127.0.0.1:{host_tcp_service}/"))
        assert host.stdout.startswith("UNREACHABLE"), host.stdout
        outside = s.run_python(FETCH.format(url="http://93.184.216.34:80/"))
        assert outside.stdout.startswith("UNREACHABLE"), outside.stdout
        # another session (another worker) has no bridge at all
        assert other.run_python(FETCH.format(url="http://127.0.0.1:8080/")).stdout.startswith("UNREACHABLE")
        assert other.run_shell("ls -A /run/bridge").stdout.strip() == ""
    # once the session is closed, the next one on that worker has no bridge left
    with pool.session() as s2, pool.session() as s3:
        for sess in (s2, s3):
            assert sess.run_python(FETCH.format(url="http://127.0.0.1:8080/")).stdout.startswith("UNREACHABLE")


def test_bridge_in_non_persistent_session(pool, unix_service):
    with pool.session(persistent=False, bridges={9090: unix_service}) as s:
        for path in ("/a", "/b"):
            res = s.run_python(FETCH.format(url=f"http://127.0.0.1:9090{path}"))
            assert res.stdout.strip() == f"hello from unix {path}"


def test_session_rejects_a_missing_socket(pool, tmp_path):
    with pytest.raises(ValueError, match="not a listening Unix socket"):
        pool.session(bridges={8080: tmp_path / "nothing.sock"})



def test_a_port_that_cannot_listen_is_reported(unix_service):
    from medagentgym.sandbox.worker import _start_bridges

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        notes = _start_bridges({str(port): str(unix_service)})
    assert len(notes) == 1 and f"port(s) {port}" in notes[0] and "unavailable" in notes[0]


_FLOOD = """
import signal, socket, time
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
held, refused = [], 0
for _ in range({n}):
    s = socket.socket(socket.AF_UNIX if {direct} else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.connect('/run/bridge/8080.sock' if {direct} else ('127.0.0.1', 8080))
        held.append(s)
    except OSError:
        refused += 1
        s.close()
time.sleep({hold})
served = 0
for s in held:  # a refused connection was accepted and closed at once: it reads EOF
    try:
        s.settimeout(2)
        s.sendall(b'GET /x HTTP/1.0\\r\\n\\r\\n')
        served += bool(s.recv(100))
    except OSError:
        pass
    s.close()
print(len(held), refused, served)
"""


@pytest.mark.parametrize("direct", [True, False], ids=["relay-socket", "loopback-port"])
def test_a_connection_flood_costs_the_host_a_bounded_number_of_threads(pool, unix_service, direct):
    """Jailed code can connect to the host relay socket directly: each connection costs host threads and fds."""
    import medagentgym.sandbox.bridge

    budget = getattr(medagentgym.sandbox.bridge, "MAX_OPEN_CONNECTIONS", 16)
    before = threading.active_count()
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], threading.active_count())
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with pool.session(bridges={8080: unix_service}) as s:
        res = s.run_python(_FLOOD.format(n=300, direct=direct, hold=1.5), limits=None)
        stop.set()
        sampler.join()
        held, _refused, served = (int(x) for x in res.stdout.split())
        # Every relay connection is two host threads (plus one of the target service): bounded by the budget,
        # not by what the jail opens (300 connections were ~900 host threads before).
        assert peak[0] - before <= 3 * budget + 4, (peak[0], before)
        assert served <= budget and held >= served, res.stdout
        # The flood is over (its sockets closed): the bridge serves the session again.
        again = s.run_python(FETCH.format(url="http://127.0.0.1:8080/fhir/Patient"))
        assert again.stdout.strip() == "hello from unix /fhir/Patient", again


def test_a_bridge_has_a_connection_budget_per_session(tmp_path, unix_service):
    def closed_at_once(c: socket.socket) -> bool:
        c.settimeout(5)
        try:
            return c.recv(10) == b""
        except ConnectionResetError:
            return True

    def fetch() -> socket.socket:
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(tmp_path / "relay.sock"))
        return c

    relay = host_relay(tmp_path / "relay.sock", unix_service, max_open=2, max_total=3)
    try:
        held = [fetch() for _ in range(3)]
        assert closed_at_once(held[2])  # a third at once: accepted and closed by the relay
        for c in held:
            c.close()
        deadline = time.monotonic() + 120  # ends when the relay saw both close (a hang guard, issue #29)
        while relay._active and time.monotonic() < deadline:  # the relay sees both ends close in its threads
            time.sleep(0.01)
        third = fetch()  # the two are gone: one more may open (three served in all) ...
        third.sendall(b"GET /a HTTP/1.0\r\n\r\n")
        assert b"hello from unix /a" in third.makefile("rb").read()
        third.close()
        assert closed_at_once(fetch())  # ... and then the session's budget is spent
        assert relay.refused == 2
    finally:
        relay.close()
