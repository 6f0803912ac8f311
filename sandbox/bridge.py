"""Bridges: let jailed code reach ONE host service through a Unix socket, and nothing else.

The jail's network namespace has only its own loopback, so jailed code cannot reach any host address. A
bridge opens exactly one hole, chosen by the host: ``pool.session(bridges={8080: "/run/fhir.sock"})`` makes
``http://127.0.0.1:8080`` inside the jail reach the service listening on the host Unix socket
``/run/fhir.sock``. Two stdlib-only forwarders make it up:

* on the host, a relay (:func:`host_relay`) listens on a socket in the worker slot's private ``bridge``
  directory (bound read-only at ``/run/bridge`` in that slot's jail only) and connects each client to the
  target socket;
* in the jail, a forwarder (:func:`jail_forwarders`) runs as a thread of the session's runner process (which
  survives between calls; the worker kills every other process after a call) and listens on
  ``127.0.0.1:<port>``, connecting each client to ``/run/bridge/<port>.sock``.

Only the target the host named is reachable: the jail still has no route to any host or outside address.

Every host relay connection costs the host two threads and two descriptors (and the target service its own),
and jailed code can connect to the relay socket directly, so the host relays of a session are budgeted:
at most :data:`MAX_OPEN_CONNECTIONS` at once and :data:`MAX_SESSION_CONNECTIONS` over the session, per bridge.
A connection past the budget is accepted and closed at once (the jailed client sees the connection reset): the
episode's problem, never the host's.

Example:
    >>> relay = host_relay(Path("/tmp/w0/bridge/8080.sock"), Path("/run/fhir.sock"))
    >>> relay.close()
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

#: Where the slot's bridge directory appears inside a bwrap jail.
JAIL_BRIDGE_DIR = "/run/bridge"
#: Connections one session's host relay keeps open at once (each costs the host two threads and two fds).
MAX_OPEN_CONNECTIONS = 16
#: Connections one session's host relay accepts in all (an episode makes a few dozen requests).
MAX_SESSION_CONNECTIONS = 4096
_CHUNK = 1 << 16
_POLL_S = 0.2


def socket_name(port: int) -> str:
    """File name of the relay socket that serves in-jail port ``port``."""
    return f"{int(port)}.sock"


def check_bridges(bridges: dict[int, str | os.PathLike] | None) -> dict[int, Path]:
    """Validate ``{port: host_unix_socket}``; return it with int ports and resolved paths.

    Raises:
        ValueError: A port outside 1024-65535 or a target that is not an existing Unix socket.
    """
    import stat

    checked: dict[int, Path] = {}
    for port, target in (bridges or {}).items():
        if isinstance(port, bool) or not str(port).isdigit() or not 1024 <= int(port) <= 65535:
            raise ValueError(f"bridge port {port!r} is invalid: use an int in 1024-65535 (jailed code is unprivileged)")
        path = Path(target).resolve()
        try:
            is_sock = stat.S_ISSOCK(os.stat(path).st_mode)
        except OSError:
            is_sock = False
        if not is_sock:
            raise ValueError(f"bridge {port}: {str(target)!r} is not a listening Unix socket; start the service first")
        checked[int(port)] = path
    return checked


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until EOF or an error, then half-close ``dst``."""
    try:
        while True:
            data = src.recv(_CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class Forwarder:
    """Accepts on ``listener`` and joins each client to a fresh ``connect()`` socket, both ways.

    Args:
        listener: A listening socket.
        connect: Opens the upstream socket for one client.
        name: For the thread names.
        max_open: Clients served at once (None: no bound); one past it is closed as soon as it is accepted.
        max_total: Clients served over the forwarder's life (None: no bound).

    Attributes:
        address: What the listener is bound to (a path or ``(host, port)``).
        refused: Clients closed at once because a budget was spent.
    """

    def __init__(self, listener: socket.socket, connect: Callable[[], socket.socket], name: str,
                 max_open: int | None = None, max_total: int | None = None) -> None:
        self._listener = listener
        self._connect = connect
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.max_open, self.max_total = max_open, max_total
        self._active = self._served = self.refused = 0
        self.address = listener.getsockname()
        listener.settimeout(_POLL_S)
        self._thread = threading.Thread(target=self._accept_loop, name=f"bridge-{name}", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            if self._stop.is_set():  # the knock of close()
                client.close()
                return
            with self._lock:
                over = (self.max_open is not None and self._active >= self.max_open) or \
                    (self.max_total is not None and self._served >= self.max_total)
                if over:
                    self.refused += 1
                else:
                    self._active += 1
                    self._served += 1
            if over:  # the budget is spent: the client's problem, at the cost of one accept
                client.close()
                continue
            client.settimeout(None)
            try:
                threading.Thread(target=self._serve, args=(client,), daemon=True).start()
            except RuntimeError:  # no thread left on the host: refuse this one
                client.close()
                self._release()

    def _release(self) -> None:
        with self._lock:
            self._active -= 1

    def _serve(self, client: socket.socket) -> None:
        try:
            self._serve_one(client)
        finally:
            self._release()

    def _serve_one(self, client: socket.socket) -> None:
        try:
            upstream = self._connect()
        except OSError:
            client.close()
            return
        with self._lock:
            if self._stop.is_set():
                client.close()
                upstream.close()
                return
            self._open.update((client, upstream))
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        try:
            back.start()
        except RuntimeError:  # no thread left (the jail's process limit): drop this connection
            back = None
        if back is not None:
            _pump(client, upstream)
            back.join()
        with self._lock:
            self._open.difference_update((client, upstream))
        client.close()
        upstream.close()

    def close(self) -> None:
        """Stop accepting, drop the open connections and wait for the accept thread. Idempotent."""
        self._stop.set()
        with self._lock:
            for sock in self._open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._open.clear()
        try:  # wake the blocked accept() now rather than at its next poll timeout (up to _POLL_S later)
            with socket.socket(self._listener.family, socket.SOCK_STREAM) as knock:
                knock.settimeout(_POLL_S)
                knock.connect(self.address)
        except OSError:
            pass
        self._thread.join(timeout=2 * _POLL_S + 1)
        self._listener.close()


class SessionBridges:
    """The host relays of one sandbox session: one per bridge, in the worker slot's bridge directory.

    Args:
        bridge_dir: The slot's host bridge directory (bound at ``/run/bridge`` in that slot's jail only).
        bridges: ``{port: host_unix_socket}`` (checked by :func:`check_bridges`).
        jail_dir: How the runner sees ``bridge_dir`` (``/run/bridge`` in bwrap; the host path unjailed).
    """

    def __init__(self, bridge_dir: Path, bridges: dict[int, Path], jail_dir: str = JAIL_BRIDGE_DIR) -> None:
        self.bridge_dir = Path(bridge_dir)
        self.bridges = dict(bridges)
        self.jail_dir = jail_dir
        self._relays: list[Forwarder] = []
        try:
            for port, target in self.bridges.items():
                self._relays.append(host_relay(self.bridge_dir / socket_name(port), target,
                                               max_open=MAX_OPEN_CONNECTIONS, max_total=MAX_SESSION_CONNECTIONS))
        except BaseException:
            self.close()
            raise

    def jail_paths(self) -> dict[str, str]:
        """``{port: relay socket path as the runner sees it}`` (what the worker's ``open`` frame carries)."""
        return {str(port): os.path.join(self.jail_dir, socket_name(port)) for port in self.bridges}

    def close(self) -> None:
        """Stop the relays and remove their sockets. Idempotent."""
        relays, self._relays = self._relays, []
        for relay in relays:
            relay.close()
            try:
                os.unlink(relay.address)
            except (OSError, TypeError):
                pass


def _unix_connector(path: str | os.PathLike) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.fspath(path))
        except OSError:
            sock.close()
            raise
        return sock

    return connect


def host_relay(listen_path: Path, target: Path, *, mode: int = 0o666, max_open: int | None = None,
               max_total: int | None = None) -> Forwarder:
    """Host side: listen on ``listen_path`` (created, ``mode`` applied) and forward to the socket ``target``
    (at most ``max_open`` clients at once and ``max_total`` in all, see :class:`Forwarder`)."""
    listen_path = Path(listen_path)
    if listen_path.exists() or listen_path.is_symlink():
        listen_path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(listen_path))
    os.chmod(listen_path, mode)  # the jail's unprivileged uid must be allowed to connect
    listener.listen(64)
    return Forwarder(listener, _unix_connector(target), name=listen_path.name, max_open=max_open,
                     max_total=max_total)


def _bind_loopback(port: int, wait_s: float = 3.0) -> socket.socket:
    """Listen on 127.0.0.1:port; wait out a previous runner that was killed but not yet torn down."""
    import errno
    import time

    deadline = time.monotonic() + wait_s
    while True:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", port))
            listener.listen(64)
            return listener
        except OSError as exc:
            listener.close()
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def jail_forwarders(bridges: dict, bridge_dir: str = JAIL_BRIDGE_DIR) -> list[Forwarder]:
    """Jail side: for each ``port``, listen on 127.0.0.1:port and forward to ``<bridge_dir>/<port>.sock``.

    Args:
        bridges: ``{port: socket_path}`` (a path per port) as sent in the session's ``open`` frame.
        bridge_dir: Unused when paths are given; the default directory otherwise.

    Returns:
        The running forwarders (threads of the calling process).
    """
    out = []
    for port, path in sorted(bridges.items(), key=lambda kv: int(kv[0])):
        listener = _bind_loopback(int(port))
        target = path or os.path.join(bridge_dir, socket_name(int(port)))
        # The same bound as the host relay: connections past it would only be refused there, after costing
        # threads here (which count against the session's own process limit).
        out.append(Forwarder(listener, _unix_connector(target), name=f"port{port}", max_open=MAX_OPEN_CONNECTIONS))
    return out
