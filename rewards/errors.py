"""Errors of the ``rewards`` package: one root, so callers can catch every reward problem at once."""

from __future__ import annotations

__all__ = ["RewardError"]


class RewardError(ValueError):
    """A bad reward spec (unknown name, bad weight or ``missing`` mode) or a reward value out of range."""
