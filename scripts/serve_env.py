"""Serve MedAgentGym episodes over HTTP (FastAPI + uvicorn) for remote rollouts.

    python scripts/serve_env.py --tasks-root artifacts/tasks --host 127.0.0.1 --port 8000 --workers 8

Starts a sandbox pool and the env server (``/health``, ``/schema``, ``/reset``, ``/step``, ``/state``,
``/close``; see ``sandbox/server.py``). Writes nothing; logs requests to stderr. Clients use
``env_client.http_client.HTTPEnv(url)``, which has the local ``Env`` interface. Bind to loopback unless a
trusted network needs it: the server has no authentication.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks-root", type=Path, default=Path("artifacts/tasks"),
                   help="built tasks root (scripts/build_tasks.py --out); default artifacts/tasks")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind; default 127.0.0.1 (loopback)")
    p.add_argument("--port", type=int, default=8000, help="TCP port; default 8000")
    p.add_argument("--workers", type=int, default=4, help="sandbox workers (episodes running code at once)")
    p.add_argument("--sandbox", choices=["bwrap", "docker", "local"], default="bwrap",
                   help="sandbox backend; default bwrap ('local' is unisolated)")
    p.add_argument("--allow-unisolated", action="store_true", help="permit --sandbox local")
    p.add_argument("--capacity", type=int, default=64, help="open sessions allowed (503 beyond); default 64")
    p.add_argument("--idle-timeout", type=float, default=600.0,
                   help="seconds after which an unused session is closed; default 600")
    p.add_argument("--max-turns", type=int, default=None, help="episode turn cap (EnvConfig.max_turns)")
    p.add_argument("--log-level", default="info", help="uvicorn log level; default info")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = p.parse_args(argv)
    try:
        if not args.tasks_root.is_dir():
            raise FileNotFoundError(f"tasks root {args.tasks_root} does not exist; build it with "
                                    f"`python scripts/build_tasks.py --out {args.tasks_root}`")
        import uvicorn

        from env_client.episode import EnvConfig
        from env_client.server_app import build_app

        config = EnvConfig(**({"max_turns": args.max_turns} if args.max_turns else {}))
        app = build_app(args.tasks_root, backend=args.sandbox, workers=args.workers,
                        allow_unisolated=args.allow_unisolated, config=config, capacity=args.capacity,
                        idle_timeout_s=args.idle_timeout)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    except Exception as exc:  # noqa: BLE001 - one line for the user, the traceback with --debug
        if args.debug:
            traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
