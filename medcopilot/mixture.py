"""Per-family sampling weights: how much of each task family a run trains on.

Without a mixture, TRL samples dataset rows uniformly, so a family's share is its share of the rows: over the
default build of the in-distribution families the two generated EHR-SQL families would be most of the prompts and
the small ones would almost never be seen. A recipe's ``tasks.mixture`` fixes each family's share instead:

- ``weights: {family: w, ...}``: share of family ``f`` is ``w_f / sum(w)`` (every listed family needs one);
- ``temperature: T``: share proportional to ``n_f ** (1 / T)`` for a family with ``n_f`` rows (``T = 1`` keeps
  the natural sizes, larger ``T`` flattens towards uniform over families);
- neither: the natural sizes (uniform over rows).

:func:`mixture_shares` turns either form into shares and :func:`resample` draws an epoch of rows with those shares
(each family's rows cycled in a seeded order, so a small family is repeated and a large one subsampled, never
biased towards its first rows). The trainers apply it to the GRPO dataset, the SFT conversations and the DPO
pairs. Pure Python: no torch.

Example:
    >>> shares = mixture_shares({"a": 90, "b": 10}, weights={"a": 1.0, "b": 1.0})
    >>> shares
    {'a': 0.5, 'b': 0.5}
    >>> rows = [{"family": "a", "i": i} for i in range(90)] + [{"family": "b", "i": i} for i in range(10)]
    >>> sum(r["family"] == "b" for r in resample(rows, shares, n=100, seed=0))
    50
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["apply_mixture", "describe_mixture", "describe_shares", "mixed_rows", "mixture_shares", "resample"]

T = TypeVar("T")


def mixture_shares(sizes: Mapping[str, int], *, weights: Mapping[str, float] | None = None,
                   temperature: float | None = None) -> dict[str, float]:
    """Each family's share of the training rows (shares sum to 1).

    Args:
        sizes: Rows available per family (a family with 0 rows gets share 0 and is reported by the caller).
        weights: Explicit relative weights per family (keys must be those of ``sizes``).
        temperature: Temperature over sizes (``n ** (1/T)``); ignored when ``weights`` is given.

    Returns:
        ``family -> share``, in the order of ``sizes``.

    Raises:
        ValueError: Weights that do not name exactly the families of ``sizes``, or nothing to sample from.
    """
    if weights:
        missing, extra = set(sizes) - set(weights), set(weights) - set(sizes)
        if missing or extra:
            raise ValueError(f"mixture weights must name exactly the families {sorted(sizes)}; "
                             f"missing {sorted(missing)}, extra {sorted(extra)}")
        raw = {f: float(weights[f]) if sizes[f] > 0 else 0.0 for f in sizes}
    else:
        t = 1.0 if temperature is None else float(temperature)
        raw = {f: float(n) ** (1.0 / t) if n > 0 else 0.0 for f, n in sizes.items()}
    total = sum(raw.values())
    if total <= 0:
        raise ValueError(f"no rows to sample from: sizes {dict(sizes)}")
    return {f: v / total for f, v in raw.items()}


def resample(rows: Sequence[T], shares: Mapping[str, float], *, n: int | None = None, seed: int = 0,
             family_of: Callable[[T], str] | None = None) -> list[T]:
    """An epoch of ``n`` rows in which family ``f`` has ``round(n * shares[f])`` rows (largest remainders).

    Each family's rows are shuffled with ``seed`` and cycled, so a family asked for more rows than it has repeats
    all of them (as evenly as possible) and one asked for fewer gets a random subset. The result is in family
    order; the trainer's sampler shuffles it.

    Args:
        rows: The rows (dicts with a ``family`` key, or anything ``family_of`` maps to a family).
        shares: From :func:`mixture_shares`; families absent here get no rows.
        n: Rows in the epoch (default ``len(rows)``).
        seed: Seeds the per-family order.
        family_of: Row -> family name (default ``row["family"]``).

    Returns:
        The resampled rows (the same objects, repeated where needed).
    """
    family_of = family_of or (lambda row: row["family"])  # type: ignore[index]
    n = len(rows) if n is None else n
    by_family: dict[str, list[T]] = {}
    for row in rows:
        by_family.setdefault(family_of(row), []).append(row)
    counts = _apportion({f: s for f, s in shares.items() if by_family.get(f)}, n)
    out: list[T] = []
    for family, count in counts.items():
        pool = list(by_family[family])
        random.Random(f"{seed}:{family}").shuffle(pool)
        out.extend(pool[i % len(pool)] for i in range(count))
    return out


def describe_shares(shares: Mapping[str, float], sizes: Mapping[str, int] | None = None) -> str:
    """One line: ``family 12.5 % (n=340), ...`` for logs and ``--dry-run``."""
    parts = []
    for family, share in shares.items():
        size = f" (n={sizes[family]})" if sizes is not None and family in sizes else ""
        parts.append(f"{family} {100 * share:.1f} %{size}")
    return ", ".join(parts)


def _apportion(shares: Mapping[str, float], n: int) -> dict[str, int]:
    """Integer counts summing to ``n`` in proportion to ``shares`` (Hamilton's largest-remainder method)."""
    total = sum(shares.values())
    if total <= 0 or n <= 0:
        return {f: 0 for f in shares}
    exact = {f: n * s / total for f, s in shares.items()}
    counts = {f: int(v) for f, v in exact.items()}
    left = n - sum(counts.values())
    for f in sorted(exact, key=lambda f: (counts[f] - exact[f], f))[:left]:
        counts[f] += 1
    return counts


def apply_mixture(tasks: Any, rows: Sequence[T], *, seed: int = 0, family_of: Callable[[T], str] | None = None,
                  tag: str = "mixture") -> list[T]:
    """Resample a trainer's rows to the recipe's ``tasks.mixture`` (rows unchanged without one).

    Args:
        tasks: The recipe's ``tasks`` section (``families``, ``mixture``).
        rows: Training rows, each of one family.
        seed: Seeds the per-family order (the trainer's seed).
        family_of: Row -> family (default ``row["family"]``).
        tag: Prefix of the one line printed with the shares.

    Returns:
        The epoch of rows (``tasks.mixture.rows`` of them, default as many as given).

    Raises:
        ValueError: No rows at all.
    """
    mix = getattr(tasks, "mixture", None)
    if mix is None or (not mix.weights and mix.temperature is None):
        return list(rows)
    family_of = family_of or (lambda row: row["family"])  # type: ignore[index]
    counts = Counter(family_of(r) for r in rows)
    sizes = {f: counts.get(f, 0) for f in tasks.families}
    empty = [f for f, n in sizes.items() if n == 0]
    shares = mixture_shares(sizes, weights=mix.weights, temperature=mix.temperature)
    out = resample(rows, shares, n=mix.rows or len(rows), seed=seed, family_of=family_of)
    note = f"; no rows for {', '.join(empty)} (their share goes to the others)" if empty else ""
    print(f"[{tag}] {len(out)} rows: {describe_shares(shares, sizes)}{note}", flush=True)
    return out


def mixed_rows(tasks: Any, episodes: Iterable[Any], build: Callable[[list[Any]], list[Any]], *, seed: int = 0,
               tag: str = "mixture") -> list[Any]:
    """``build(episodes)`` (e.g. ``sft_rows``, ``dpo_pairs``) family by family, resampled to ``tasks.mixture``.

    Without a mixture this is ``build(episodes)`` itself, rows in the same order.
    """
    episodes = list(episodes)
    mix = getattr(tasks, "mixture", None)
    if mix is None or (not mix.weights and mix.temperature is None):
        return build(episodes)
    by_family: dict[str, list[Any]] = {}
    for ep in episodes:
        by_family.setdefault(ep.family, []).append(ep)
    tagged = [(family, row) for family, eps in by_family.items() for row in build(eps)]
    return [row for _, row in apply_mixture(tasks, tagged, seed=seed, family_of=lambda t: t[0], tag=tag)]


def describe_mixture(tasks: Any) -> str:
    """One line: the families of a recipe's ``tasks`` section and their sampling shares as the recipe fixes them."""
    mix = tasks.mixture
    if mix is not None and mix.weights:
        shares = mixture_shares(dict.fromkeys(tasks.families, 1), weights=mix.weights)
        return f"families with mixture weights: {describe_shares(shares)}"
    if mix is not None and mix.temperature is not None:
        return (f"families {', '.join(tasks.families)}, shares proportional to rows ** (1/{mix.temperature:g}) "
                f"(sizes read when the run starts)")
    return f"families {', '.join(tasks.families)}, uniform over rows (no tasks.mixture)"
