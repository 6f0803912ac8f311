"""Errors of the episode layer, under one root (:class:`EnvClientError`)."""

from __future__ import annotations

__all__ = ["EnvClientError", "InvalidAction", "ResetNeeded", "StoreError"]


class EnvClientError(Exception):
    """Root of the ``env_client`` error hierarchy."""


class ResetNeeded(EnvClientError):
    """``step`` was called before ``reset`` or after the episode ended; call ``reset(task)`` first."""


class InvalidAction(EnvClientError, ValueError):
    """A typed action (not model text) that fails validation; model text never raises, it gets an observation."""


class StoreError(EnvClientError):
    """A trajectory file that cannot be read or appended to (names the path and the line)."""
