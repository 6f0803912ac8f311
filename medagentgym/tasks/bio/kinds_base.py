"""The shape of a biocoder function kind: reference code template x variants x hidden-input generator."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from string import Template
from typing import Any

#: Codon table (standard genetic code, DNA codons); placed in contexts that translate.
CODON_TABLE_SRC = (
    "CODON_TABLE = {\n" + "".join(
        f"    {''.join(c)!r}: {aa!r},\n" for c, aa in zip(
            [(a, b, c) for a in "TCAG" for b in "TCAG" for c in "TCAG"],
            "FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG", strict=True)) + "}\n"
)


@dataclass(frozen=True)
class Kind:
    """One function kind, written once and instantiated per variant.

    Attributes:
        id: Category id (``reverse_complement``).
        group: Coarser theme (``sequence``, ``parsing``, ``alignment``, ...).
        params: The parameter list of the target function (without ``self``).
        problem: Spec text (``string.Template``; ``$fn`` and the variant's keys are substituted).
        code: Reference function source (Template, same keys), a complete ``def`` at column 0.
        variants: One dict per task; each has ``fn`` (the function name) plus template values.
        gen: ``gen(rng, variant) -> list of argument lists`` for the hidden tests (JSON-serialisable).
        helpers: Module-level context code (globals, helper functions) placed before the marker.
        imports: Modules the context imports.
        cls: When set, the target is a method of this class (the marker is indented inside it).
    """

    id: str
    group: str
    params: str
    problem: str
    code: str
    variants: tuple[dict[str, Any], ...]
    gen: Callable[[random.Random, dict[str, Any]], list[list[Any]]]
    helpers: str = ""
    imports: tuple[str, ...] = ("math", "re", "collections")
    cls: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def fill(self, text: str, variant: dict[str, Any]) -> str:
        """Substitute the variant's values into a template string (values may themselves use ``$key``)."""
        plain = {k: str(v) for k, v in variant.items()}
        values = {k: Template(v).safe_substitute(plain) for k, v in plain.items()}
        return Template(text).substitute(values)


def V(fn: str, **params: Any) -> dict[str, Any]:
    """A variant: the target function's name and the template values."""
    return {"fn": fn, **params}


def cases(n: int, make: Callable[[random.Random], list[Any]]) -> Callable[[random.Random, dict[str, Any]], list[list[Any]]]:
    """A generator of ``n`` argument lists, each from ``make(rng)``."""
    return lambda rng, variant: [make(rng) for _ in range(n)]
