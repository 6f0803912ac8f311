"""MedAgentGym's env server for OpenEnv: ``build_openenv_app`` under uvicorn (``server`` script, the image's command).

    server --host 0.0.0.0 --port 8000 --tasks-root /opt/medagentgym/tasks      # token from $MEDAGENTGYM_ENV_TOKEN

Settings come from the command line, else from the environment (what a container gets): ``MEDAGENTGYM_TASKS_ROOT``,
``MEDAGENTGYM_FAMILIES`` (comma-separated; default every family built there), ``MEDAGENTGYM_SANDBOX`` (default
bwrap; ``local`` also needs ``MEDAGENTGYM_ALLOW_UNISOLATED=1``, development only), ``MEDAGENTGYM_ENV_TOKEN``
(required unless the server listens on loopback only), ``HOST``, ``PORT``.
``uvicorn medagentgym_env.server.app:app`` serves the same app, built on first use from the environment.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["build", "main"]

#: Shown when the sandbox cannot build its jails, which in a container means the container lacks the options.
JAIL_HINT = ("in a container, start it with --cap-add SYS_ADMIN --security-opt seccomp=unconfined "
             "--security-opt apparmor=unconfined (the jails inside drop all of it; medagentgym_env.client."
             "JailDockerProvider does this for from_docker_image)")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def build(tasks_root: str | Path | None = None, *, families: list[str] | None = None, sandbox: str | None = None,
          tokens: list[str] | None = None) -> Any:
    """The FastAPI app (``medagentgym.adapters.openenv.build_openenv_app``), settings defaulting to the environment.

    Raises:
        FileNotFoundError: The tasks root does not exist (the message says how to build it).
        SandboxUnavailable: The sandbox cannot start here (the message names the fix).
    """
    from medagentgym.adapters.openenv import build_openenv_app
    from medagentgym.sandbox.errors import SandboxUnavailable

    root = Path(tasks_root or os.environ.get("MEDAGENTGYM_TASKS_ROOT", "artifacts/tasks"))
    if not root.is_dir():
        raise FileNotFoundError(f"tasks root {root} does not exist; build it with "
                                f"`medagentgym build --out {root}` or mount one there")
    names = families or [f for f in os.environ.get("MEDAGENTGYM_FAMILIES", "").split(",") if f] or None
    token = os.environ.get("MEDAGENTGYM_ENV_TOKEN", "").strip()
    try:
        return build_openenv_app(root, families=names, backend=sandbox or os.environ.get("MEDAGENTGYM_SANDBOX", "bwrap"),
                                 allow_unisolated=os.environ.get("MEDAGENTGYM_ALLOW_UNISOLATED") == "1",
                                 tokens=tokens if tokens is not None else [t for t in [token] if t])
    except SandboxUnavailable as exc:
        raise SandboxUnavailable(f"{exc}; {JAIL_HINT}") from None


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted; returns the exit status (2 with one line on a setup error)."""
    p = argparse.ArgumentParser(description="MedAgentGym env server for OpenEnv clients")
    p.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"), help="interface (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")), help="port (default 8000)")
    p.add_argument("--tasks-root", default=None, help="built tasks root (default $MEDAGENTGYM_TASKS_ROOT)")
    p.add_argument("--sandbox", choices=["bwrap", "docker", "local"], default=None, help="default bwrap")
    args = p.parse_args(argv)
    try:
        if not _loopback(args.host) and not os.environ.get("MEDAGENTGYM_ENV_TOKEN", "").strip():
            raise ValueError(f"--host {args.host} is reachable from other machines and MEDAGENTGYM_ENV_TOKEN is not "
                             "set: set it (clients send it), or listen on 127.0.0.1")
        import uvicorn

        app = build(args.tasks_root, sandbox=args.sandbox)
        uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, timeout_keep_alive=5,
                                      ws_max_size=1 << 20)).run()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one line for whoever reads the container's log
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


def __getattr__(name: str) -> Any:
    """``app``: built from the environment on first use (so importing this module starts no sandbox)."""
    if name == "app":
        globals()["app"] = app = build()
        return app
    raise AttributeError(name)


if __name__ == "__main__":
    sys.exit(main())
