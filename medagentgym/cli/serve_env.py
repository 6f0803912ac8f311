"""Serve MedAgentGym episodes over HTTP (FastAPI + uvicorn) for remote rollouts.

    medagentgym serve --tasks-root artifacts/tasks --host 127.0.0.1 --port 8000 --workers 8
    MEDAGENTGYM_ENV_TOKEN=$(openssl rand -hex 16) medagentgym serve --host 0.0.0.0 --splits train

Starts a sandbox pool and the env server (``/health``, ``/schema``, ``/reset``, ``/step``, ``/state``,
``/close``; see ``sandbox/server.py``). Writes nothing; logs requests to stderr. Clients use
``medagentgym.env_client.http_client.HTTPEnv(url)``, which has the local ``Env`` interface. With ``--openenv`` the same
server also speaks OpenEnv's protocol (WebSocket sessions at ``/ws``; ``medagentgym/adapters/openenv.py``), so
``openenv.GenericEnvClient(base_url=url)`` works as it is.

Abuse limits, all on by default: before any request is read, a connection that does not send a complete request
head within ``--header-timeout`` seconds is closed, and one peer address holds at most
``--max-connections-per-address`` connections (``--max-connections`` in all); gold answers and grader reasons never reach a client (``--show-gold`` turns
that off for a trusted debugging session); bodies over ``--max-body-bytes`` get 413; one client (its token, else
its address) holds at most ``--max-sessions-per-client`` sessions, finished ones included (429 beyond; default half
``--capacity``, never more than the pool's workers); a
``/reset`` waits at most ``--worker-wait`` seconds for a sandbox worker (503 beyond); a session without a ``/reset``
or ``/step`` for ``--idle-timeout`` seconds (polling ``/state`` does not count), or whose episode started
``--max-episode-s`` ago, is closed and its worker freed. ``--token`` (repeatable: one per client) or ``MEDAGENTGYM_ENV_TOKEN`` requires
``Authorization: Bearer <token>`` on every endpoint but ``/health``; binding beyond loopback without a token is
refused. Tokens travel in clear text: over a network, put the server behind TLS. Ctrl-C closes the open sessions
and stops the server with one line (exit 130); the server keeps no state, so nothing is lost.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import traceback
from pathlib import Path

from medagentgym.env_client.argtypes import port, positive_float, positive_int
from medagentgym.env_client.http_client import TOKEN_ENV


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks-root", type=Path, default=Path("artifacts/tasks"),
                   help="built tasks root (medagentgym build --out); default artifacts/tasks")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind; default 127.0.0.1 (loopback)")
    p.add_argument("--port", type=port, default=8000, help="TCP port; default 8000")
    p.add_argument("--workers", type=positive_int, default=4, help="warm sandbox workers kept ready; default 4")
    p.add_argument("--max-workers", type=positive_int, default=None,
                   help="most sandbox workers: the pool grows to the open episodes (each holds one) up to this; "
                        "default half the memory at 40 MiB per worker, or $MEDAGENTGYM_SANDBOX_MAX_WORKERS")
    p.add_argument("--sandbox", choices=["bwrap", "docker", "local"], default="bwrap",
                   help="sandbox backend; default bwrap ('local' is unisolated)")
    p.add_argument("--allow-unisolated", action="store_true", help="permit --sandbox local")
    p.add_argument("--capacity", type=positive_int, default=64, help="open sessions allowed (503 beyond); default 64")
    p.add_argument("--max-sessions-per-client", type=positive_int, default=None,
                   help="open sessions one client may hold, running or finished, any protocol (429 beyond), at "
                        "most the pool's workers and --capacity; default half --capacity (at most the workers)")
    p.add_argument("--idle-timeout", type=positive_float, default=120.0,
                   help="seconds without a /reset or /step after which a session is closed and its worker freed "
                        "(polling /state does not count); default 120")
    p.add_argument("--max-episode-s", type=positive_float, default=None,
                   help="seconds after its /reset at which an episode is closed even if it keeps stepping; default "
                        "the episode's wall budget (600 s) plus 120")
    p.add_argument("--worker-wait", type=positive_float, default=10.0,
                   help="seconds a /reset waits for a free sandbox worker before answering 503; default 10")
    p.add_argument("--max-body-bytes", type=positive_int, default=1 << 20,
                   help="largest request body accepted (413 beyond); default 1048576")
    p.add_argument("--header-timeout", type=positive_float, default=10.0,
                   help="seconds a connection may take to send a complete request head (closed beyond, before the "
                        "token check); default 10")
    p.add_argument("--max-connections-per-address", type=positive_int, default=None,
                   help="open connections one peer address may hold (more are closed at accept); default "
                        "max(256, 2 x --capacity): a trainer's one connection per episode fits")
    p.add_argument("--max-connections", type=positive_int, default=None,
                   help="open connections in all (more are closed at accept); default max(1024, 4 x --capacity)")
    p.add_argument("--token", action="append", default=[],
                   help=f"bearer token clients must send (repeat for one token per client); default ${TOKEN_ENV}")
    p.add_argument("--splits", default="train,test",
                   help="splits clients may reset on, e.g. 'train' keeps test graders unreachable; default both")
    p.add_argument("--show-gold", action="store_true",
                   help="return grader reasons and error texts to clients (they can quote gold answers)")
    p.add_argument("--openenv", action="store_true",
                   help="also speak OpenEnv's protocol (/ws sessions, /metadata) for openenv-core clients; "
                        "needs pip install '.[openenv]'")
    p.add_argument("--max-turns", type=positive_int, default=None, help="episode turn cap (EnvConfig.max_turns)")
    p.add_argument("--log-level", default="info", help="uvicorn log level; default info")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    args = parse_args(argv)
    try:
        tokens = args.token or [t for t in [os.environ.get(TOKEN_ENV, "").strip()] if t]
        if not tokens and not _loopback(args.host):
            raise ValueError(f"--host {args.host} is reachable from other machines and no token is set: pass "
                             f"--token (or set {TOKEN_ENV}), or bind to 127.0.0.1")
        if not args.tasks_root.is_dir():
            raise FileNotFoundError(f"tasks root {args.tasks_root} does not exist; build it with "
                                    f"`medagentgym build --out {args.tasks_root}`")
        import uvicorn

        from medagentgym.env_client.episode import EnvConfig
        from medagentgym.env_client.server_app import build_app
        from medagentgym.sandbox._conn_limits import ConnLimits, server_config

        config = EnvConfig(**({"max_turns": args.max_turns} if args.max_turns else {}))
        splits = tuple(s.strip() for s in args.splits.split(",") if s.strip())
        options = {"backend": args.sandbox, "workers": args.workers, "max_workers": args.max_workers,
                   "allow_unisolated": args.allow_unisolated,
                   "config": config, "capacity": args.capacity, "idle_timeout_s": args.idle_timeout,
                   "hide_gold": not args.show_gold, "tokens": tokens, "max_body_bytes": args.max_body_bytes,
                   "max_sessions_per_client": args.max_sessions_per_client, "worker_wait_s": args.worker_wait,
                   "splits": splits, "max_episode_s": args.max_episode_s}
        if args.openenv:
            from medagentgym.adapters.openenv import build_openenv_app

            app = build_openenv_app(args.tasks_root, split="train" if "train" in splits else splits[0], **options)
        else:
            app = build_app(args.tasks_root, **options)
        # uvicorn.Server rather than uvicorn.run: run() swallows Ctrl-C, Server.run() re-raises it after a graceful
        # shutdown, so the user learns that the server stopped and why.
        limits = ConnLimits(header_timeout_s=args.header_timeout,
                            max_per_address=args.max_connections_per_address or max(256, 2 * args.capacity),
                            max_connections=args.max_connections or max(1024, 4 * args.capacity))
        uvicorn.Server(server_config(app, limits=limits, host=args.host, port=args.port, log_level=args.log_level,
                                     ws_max_size=args.max_body_bytes)).run()
    except KeyboardInterrupt:
        print("\ninterrupted: server stopped, open sessions closed; it saves nothing (episodes live in the clients' "
              "stores), so nothing was lost; rerun the same command to serve again", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one line for the user, the traceback with --debug
        if args.debug:
            traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
