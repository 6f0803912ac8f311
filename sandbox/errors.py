"""Errors raised by the sandbox package (one root: :class:`SandboxError`)."""

from __future__ import annotations

__all__ = ["SandboxBusy", "SandboxError", "SandboxUnavailable", "SessionClosed", "WorkerLost", "WorkerRefused"]


class SandboxError(RuntimeError):
    """Root of every error the sandbox raises on the host side."""


class SandboxUnavailable(SandboxError):
    """The requested backend cannot run on this machine (the message names the fix)."""


class SessionClosed(SandboxError):
    """A call was made on a session (or pool) that is already closed."""


class WorkerLost(SandboxError):
    """A worker process died or stopped answering; the pool replaces it."""


class WorkerRefused(SandboxError):
    """A worker answered a request with an error. During a session's call the session turns this into a killed
    call on a fresh worker (the call's code may have caused it); elsewhere (open, reset) the pool replaces it."""


class SandboxBusy(SandboxError):
    """No worker became free within the pool's ``acquire_timeout``: retry later (a server answers 503)."""
