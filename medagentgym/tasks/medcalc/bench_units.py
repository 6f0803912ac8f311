"""Unit handling as MedCalc-Bench's 2024 gold-generating code did it (the ``medcalc-bench`` convention).

The benchmark's calculators converted every quantity through a chain of small steps and rounded after each step
(to 3 decimals above 0.001, else to 3 significant digits). Some chains lose a lot: 1.2 mg of creatinine becomes
0.001 g before the division by the molar mass, 6.4 mmol of glucose becomes 0.006 mol. The same code read any
temperature unit other than the exact string ``'degrees celsius'`` as Fahrenheit (so ``'degrees celsisus'`` is
Fahrenheit), floored an age in months to whole years, and scaled cell counts between volumes without checking which
volume the formula wanted. :class:`BenchEntities` reproduces all of that behind the same accessors as
:class:`~medagentgym.tasks.medcalc.units.Entities`, so the published formulas run unchanged on the benchmark's numbers.

Each calculator also passed its own molar mass per analyte (bilirubin 548.66 g/mol in Child-Pugh but 584.66 in
SOFA, BUN 28.08 in Glasgow-Blatchford, cholesterol 386.654 in LDL): ``BenchEntities(raw, masses={...})``.

Example:
    >>> e = BenchEntities({"creatinine": [190.2, "µmol/L"], "Temperature": [38.3, "degrees celsisus"]})
    >>> e.num("creatinine", "mg/dL"), e.num("Temperature", "C")
    (2.1, 3.5)
"""

from __future__ import annotations

import math
from typing import Any

from medagentgym.tasks.medcalc.units import (
    KEY_ANALYTE,
    Entities,
    _norm_key,
    convert,
    normalize_unit,
)

__all__ = ["BENCH_ANALYTES", "BenchEntities", "bench_concentration", "round_2024"]

#: Molar mass (g/mol) and valence the benchmark passed for each analyte unless a calculator passed its own.
BENCH_ANALYTES: dict[str, tuple[float | None, int | None]] = {
    "creatinine": (113.12, None), "glucose": (180.16, None), "bun": (28.02, None), "calcium": (40.08, 2),
    "bilirubin": (584.66, None), "cholesterol": (386.65, None), "triglycerides": (861.338, None),
    "sodium": (22.99, 1), "chloride": (35.45, 1), "bicarbonate": (61.02, 1), "potassium": (22.99, 1),
    "albumin": (66500.0, None), "hemoglobin": (64500.0, None),
}
_AMOUNT = {"mol": 1.0, "mmol": 1e-3, "µmol": 1e-6, "pmol": 1e-9}
_MASS = {"kg": 1000.0, "g": 1.0, "mg": 1e-3, "µg": 1e-6}
_VOLUME_L = {"L": 1.0, "dL": 0.1, "mL": 1e-3, "µL": 1e-6, "mm^3": 1e-6, "cm^3": 1e-3, "m^3": 1e3}
# Our canonical spellings (medagentgym.tasks.medcalc.units) -> the benchmark's unit strings.
_CANON_TO_BENCH = {"umol/L": "µmol/L", "uL": "µL", "m3": "m^3", "ug": "µg"}


def round_2024(value: float) -> float:
    """The benchmark's rounding: 3 decimals above 0.001, otherwise 3 significant digits (0 stays 0)."""
    if value > 0.001:
        return round(value, 3)
    if value == 0:
        return 0
    return round(value, -math.floor(math.log10(abs(value))) + 2)


def _bench_unit(unit: str) -> str:
    canon = normalize_unit(unit)
    return _CANON_TO_BENCH.get(canon, canon)


def _rescale(value: float, src: str, dst: str) -> float:
    """Mass->mass or amount->amount: factor rounded, then the product rounded (unchanged when src == dst)."""
    if src == dst:
        return value
    table = _AMOUNT if src in _AMOUNT else _MASS
    return round_2024(value * round_2024(table[src] / table[dst]))


def _amount(value: float, src: str, dst: str, molar_mass: float | None, valence: int | None) -> float:
    """One mass/amount step between g-, mol- and mEq-based units, rounding as the benchmark did."""
    src_kind = "g" if src in _MASS else "mol" if src in _AMOUNT else "mEq"
    dst_kind = "g" if dst in _MASS else "mol" if dst in _AMOUNT else "mEq"
    if src_kind == dst_kind:
        return _rescale(value, src, dst)
    if molar_mass is None and "g" in (src_kind, dst_kind) or valence is None and "mEq" in (src_kind, dst_kind):
        raise ValueError(f"the 2024 converter cannot turn {src} into {dst} without a molar mass or valence")
    if src_kind == "mol" and dst_kind == "g":
        return _rescale(round_2024(_rescale(value, src, "mol") * molar_mass), "g", dst)
    if src_kind == "g" and dst_kind == "mol":
        return _rescale(round_2024(_rescale(value, src, "g") / molar_mass), "mol", dst)
    if src_kind == "mol":  # -> mEq
        return round_2024(_rescale(value, src, "mmol") * valence)
    if dst_kind == "mol":  # mEq ->
        return _rescale(round_2024(value / valence), "mmol", dst)
    if dst_kind == "g":  # mEq -> g via mmol and mol
        mol = _rescale(round_2024(value / valence), "mmol", "mol")
        return _rescale(round_2024(mol * molar_mass), "g", dst)
    return round_2024(_amount(value, src, "mmol", molar_mass, valence) * valence)  # g -> mEq


def bench_concentration(value: float, src: str, dst: str, molar_mass: float | None = None,
                        valence: int | None = None) -> float:
    """Convert a concentration (``'mg/dL'``, ``'µmol/L'``, ``'mEq/L'``, ...) with the benchmark's rounding chain.

    Args:
        value: The number.
        src: Its unit (any spelling :func:`~medagentgym.tasks.medcalc.units.normalize_unit` knows).
        dst: The wanted unit.
        molar_mass: g/mol, needed between mass and amount units.
        valence: Needed between mEq and other units.

    Returns:
        The converted value, rounded after every step as in the 2024 code (unchanged when the units agree).

    Example:
        >>> bench_concentration(1.2, "mg/dL", "µmol/L", 113.12)
        88.4
    """
    src_mass, src_vol = _bench_unit(src).split("/")
    dst_mass, dst_vol = _bench_unit(dst).split("/")
    if (src_mass, src_vol) == (dst_mass, dst_vol):
        return value
    mass = value if src_mass == dst_mass else _amount(value, src_mass, dst_mass, molar_mass, valence)
    factor = 1 if src_vol == dst_vol else round_2024(_VOLUME_L[src_vol] / _VOLUME_L[dst_vol])
    return round_2024(mass / factor)


def _is_concentration(unit: str) -> bool:
    parts = _bench_unit(unit).split("/")
    known = set(_MASS) | set(_AMOUNT) | {"mEq"}
    return len(parts) == 2 and parts[0] in known and parts[1] in _VOLUME_L


def _age_years(value: list[Any]) -> float:
    """The first part of an age ``[n, unit, ...]``: years as given, months and weeks floored, days 0."""
    for number, unit in zip(value[::2], value[1::2]):
        if "year" in unit:
            return number
        if "months" in unit:
            return number // 12
        if "weeks" in unit:
            return number // 52
        if "days" in unit:
            return 0
    raise ValueError(f"age {value!r} has no years, months, weeks or days part")


def _height(number: float, unit: str, target: str) -> float:
    canon = normalize_unit(unit)
    if canon == target:
        return number
    factors = {("cm", "m"): 0.01, ("in", "m"): 0.0254, ("ft", "m"): 0.3048, ("m", "cm"): 100.0,
               ("in", "cm"): 2.54, ("ft", "cm"): 30.48, ("m", "in"): 39.3701, ("cm", "in"): 0.393701,
               ("ft", "in"): 12.0}
    if (canon, target) not in factors:
        raise ValueError(f"cannot convert height unit {unit!r} to {target!r}")
    if (canon, target) == ("cm", "m"):
        return round_2024(number / 100)
    return round_2024(number * factors[(canon, target)])


class BenchEntities(Entities):
    """:class:`~medagentgym.tasks.medcalc.units.Entities` whose conversions reproduce the benchmark's 2024 code.

    Args:
        raw: The entities dict.
        masses: Per-calculator overrides of :data:`BENCH_ANALYTES`, e.g. ``{"bilirubin": (548.66, None)}``.
    """

    def __init__(self, raw: dict[str, Any], masses: dict[str, tuple[float | None, int | None]] | None = None):
        super().__init__(raw)
        self.masses = {**BENCH_ANALYTES, **(masses or {})}

    def num(self, key: str, unit: str | None = None) -> float:
        """A quantity converted the 2024 way (ages: first part only, months and weeks floored; a height
        ``[ft, 'ft', in, 'in']`` totalled in inches first)."""
        value = self.require(key)
        if unit == "years" and isinstance(value, (list, tuple)) and len(value) >= 2:
            return float(_age_years(list(value)))
        if _norm_key(key) == "height" and isinstance(value, (list, tuple)) and len(value) == 4:
            return self._one(key, [self._number(key, value[0]) * 12 + self._number(key, value[2]), "in"], unit)
        return super().num(key, unit)

    @staticmethod
    def _number(key: str, value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError(f"entity {key!r} must be a number or [value, unit], got {value!r}")  # noqa: TRY004
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"entity {key!r} must be a number or [value, unit], got {value!r}") from None

    def _one(self, key: str, pair: Any, unit: str | None) -> float:
        number, src = self._number(key, pair[0]), pair[1]
        norm = _norm_key(key)
        if unit is None:
            return number
        if unit == "C":  # only the exact string 'degrees celsius' was read as Celsius
            return number if src == "degrees celsius" else round_2024((number - 32) * 5 / 9)
        if norm == "weight" and unit == "kg":
            return round_2024(number * 0.453592) if src == "lbs" else number / 1000 if src == "g" else number
        if norm == "height" and unit in {"m", "cm", "in"}:
            return _height(number, src, unit)
        if _is_concentration(src) and _is_concentration(unit):
            analyte = "hemoglobin" if norm == "hemoglobin" else KEY_ANALYTE.get(norm)
            molar_mass, valence = self.masses.get(analyte, (None, None))
            return bench_concentration(number, src, unit, molar_mass, valence)
        return convert(number, src, unit, KEY_ANALYTE.get(norm))

    def cells(self, key: str, volume: str) -> float:
        """A cell count scaled to ``volume`` (``'L'``, ``'µL'``, ``'mm^3'``, ``'m^3'``) as the 2024 code did.

        The factor is the ratio of the two volumes, so a count per µL asked per m³ grows by 10⁹ (the SIRS code asked
        for m³ where it meant mm³).
        """
        value = self.require(key)
        if not isinstance(value, (list, tuple)) or len(value) != 2 or _bench_unit(value[1]) not in _VOLUME_L:
            raise ValueError(f"entity {key!r} must be [count, volume] with a volume among {', '.join(_VOLUME_L)}, "
                             f"got {value!r}")
        number, src = self._number(key, value[0]), _bench_unit(value[1])
        if src == volume:
            return number
        return round_2024(round_2024(_VOLUME_L[volume] / _VOLUME_L[src]) * number)

    def raw_value(self, key: str, default: Any = None) -> Any:
        """The value exactly as given (the 2024 code compared strings case-sensitively)."""
        return self.get(key, default)

    def first(self, key: str) -> float:
        """The bare number of a ``[value, unit]`` entity, unit ignored (as the 2024 code read vitals)."""
        value = self.require(key)
        return self._number(key, value[0] if isinstance(value, (list, tuple)) and value else value)
