"""argparse ``type=`` checkers for the numeric flags of the ``medagentgym`` commands: a value out of range is refused
when the command line is parsed, with argparse's one error line naming the flag, the value and the range (exit 2),
never silently ignored or clamped (``--max-turns 0`` used to mean "the family's default").

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser()
    >>> _ = p.add_argument("--max-turns", type=positive_int)
    >>> p.parse_args(["--max-turns", "3"]).max_turns
    3
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["nonneg_float", "nonneg_int", "port", "positive_float", "positive_int", "probability"]


def _number(kind: type, test: Callable[[float], bool], wanted: str) -> Callable[[str], float]:
    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if not (math.isfinite(value) and test(value)):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: give {wanted}")
        return value

    check.__name__ = wanted  # argparse names the type in some messages
    return check


#: An integer >= 1 (counts, caps, sizes).
positive_int = _number(int, lambda v: v >= 1, "an integer >= 1")
#: An integer >= 0 (seeds, retries, "0 = off" knobs).
nonneg_int = _number(int, lambda v: v >= 0, "an integer >= 0")
#: A number > 0 (timeouts in seconds).
positive_float = _number(float, lambda v: v > 0, "a number > 0")
#: A number >= 0 (sampling temperature).
nonneg_float = _number(float, lambda v: v >= 0, "a number >= 0")
#: A number in (0, 1] (nucleus sampling mass).
probability = _number(float, lambda v: 0 < v <= 1, "a number in (0, 1]")
#: A TCP port, 1-65535.
port = _number(int, lambda v: 1 <= v <= 65535, "a TCP port from 1 to 65535")
