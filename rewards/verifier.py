"""Learned-verifier scores over HTTP, and the protocol every verifier scorer follows.

A scorer turns finished episodes into P(correct): ``scorer.score(items) -> list[float | None]``, one value per
item in input order. Two implementations are interchangeable wherever a scorer is taken (Best@K scoring, GRPO's
``verifier_score`` term):

* ``medagentgym.medcopilot.verifier.VerifierScorer``: the trained model in this process (needs torch; never fails silently,
  an error raises);
* :class:`HTTPVerifier`: a client of the scoring service (``medagentgym serve-verifier``), httpx only. A call that
  fails (connection refused, timeout, an HTTP error, a malformed answer) yields ``None`` for each item of that
  call, never 0: the reward term is then *missing* and ``RewardSpec`` drops or flags the sample.

Items are rendered texts (``str``), ``env_client`` trajectories (anything with ``model_dump``) or their JSON
records (``dict``); one call holds texts only or episodes only. This module imports neither torch nor
``medcopilot`` nor ``env_client``.

Example:
    >>> verifier = HTTPVerifier("http://127.0.0.1:8100")
    >>> verifier.score(trajectories)      # [0.91, 0.07, None, ...]: None where a call failed
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx

from medagentgym.rewards.errors import RewardError

__all__ = ["HTTPVerifier", "VerifierScorerProtocol", "request_body"]

log = logging.getLogger(__name__)


@runtime_checkable
class VerifierScorerProtocol(Protocol):
    """What a verifier scorer offers: ``score(items)`` returns P(correct) per item, None where unknown."""

    def score(self, items: Iterable[Any]) -> Sequence[float | None]:
        """P(correct) per item (in ``[0, 1]``), in input order; None for an item that could not be scored."""
        ...


def request_body(items: Sequence[Any]) -> dict[str, list[Any]]:
    """The ``POST /score`` body for ``items``: ``{"texts": [...]}`` or ``{"trajectories": [...]}``.

    Raises:
        RewardError: Texts and episodes mixed in one call, or an item that is neither (names its type).
    """
    texts = [isinstance(item, str) for item in items]
    if any(texts) and not all(texts):
        raise RewardError("a verifier call mixes texts and episodes; score them in separate calls")
    if items and all(texts):
        return {"texts": list(items)}
    records = []
    for item in items:
        if hasattr(item, "model_dump"):
            records.append(item.model_dump(mode="json"))
        elif isinstance(item, dict):
            records.append(item)
        else:
            raise RewardError(f"cannot send a {type(item).__name__} to the verifier; pass rendered texts, "
                              f"trajectories or their JSON records")
    return {"trajectories": records}


class HTTPVerifier:
    """Client of the verifier scoring service; a failed call scores None, never 0.

    Args:
        url: The service's base URL (``http://host:port``; a trailing ``/score`` is accepted).
        timeout_s: Seconds per HTTP call.
        batch_size: Items per call (large lists are sent in chunks; a failed chunk is None, the rest scored).
        client: An ``httpx.Client`` to reuse; one is created otherwise.
        retries: Extra attempts of a call that failed in transport (refused, timed out) or with a 5xx status,
            after 0.2 s, 0.4 s, ...; a 4xx (a request the service rejects) is not retried.

    Attributes:
        failures: Calls that failed so far.
        last_error: One line describing the last failure, or None.
    """

    def __init__(self, url: str, *, timeout_s: float = 60.0, batch_size: int = 64,
                 client: httpx.Client | None = None, retries: int = 1) -> None:
        if not url.startswith(("http://", "https://")):
            raise RewardError(f"verifier URL {url!r} is not http(s)://host:port; pass the scoring service's URL")
        if batch_size < 1 or retries < 0:
            raise RewardError(f"batch_size={batch_size} must be >= 1 and retries={retries} >= 0")
        base = url.rstrip("/")
        self.url = base.removesuffix("/score")
        self.timeout_s, self.batch_size, self.retries = timeout_s, batch_size, retries
        self._http = client or httpx.Client(timeout=timeout_s)
        self.failures = 0
        self.last_error: str | None = None

    def score(self, items: Iterable[Any]) -> list[float | None]:
        """P(correct) per item, in input order; None for every item of a call that failed.

        Raises:
            RewardError: Items the service cannot take (see :func:`request_body`); a failed call never raises.
        """
        items = list(items)
        out: list[float | None] = []
        for start in range(0, len(items), self.batch_size):
            chunk = items[start:start + self.batch_size]
            out.extend(self._call(request_body(chunk), len(chunk)))
        return out

    def health(self) -> bool:
        """True when ``GET /health`` answers 200."""
        try:
            return self._http.get(f"{self.url}/health", timeout=self.timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def _post(self, body: dict[str, list[Any]]) -> httpx.Response:
        """POST /score, retrying transport errors and 5xx answers ``retries`` times."""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(0.2 * 2 ** (attempt - 1))
            try:
                response = self._http.post(f"{self.url}/score", json=body, timeout=self.timeout_s)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                continue
            if response.status_code < 500 or attempt == self.retries:
                return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _call(self, body: dict[str, list[Any]], n: int) -> list[float | None]:
        try:
            response = self._post(body)
            if response.status_code != 200:
                detail = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
                return self._failed(f"HTTP {response.status_code} from {self.url}/score: {detail}", n)
            scores = response.json().get("scores")
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            return self._failed(f"{type(exc).__name__} calling {self.url}/score: {str(exc)[:200]}", n)
        if not isinstance(scores, list) or len(scores) != n:
            return self._failed(f"{self.url}/score answered {n} items with {str(scores)[:80]}", n)
        good = [s if _is_probability(s) else None for s in scores]
        if any(g is None for g in good):
            self.failures += 1
            self.last_error = f"{self.url}/score returned values outside [0, 1]: {str(scores)[:80]}"
            log.warning("verifier: %s", self.last_error)
        return [None if g is None else float(g) for g in good]

    def _failed(self, message: str, n: int) -> list[None]:
        self.failures += 1
        self.last_error = message
        log.warning("verifier call failed (%d items scored None): %s", n, message)
        return [None] * n


def _is_probability(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0.0 <= value <= 1.0
