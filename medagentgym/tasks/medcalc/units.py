"""Entity access and unit conversion for MedCalc-Bench "Relevant Entities" dicts.

An entity value is one of: ``[value, "unit"]`` (a quantity), a bare number, a bool, a categorical string, a
``MM/DD/YYYY`` date string, or ``[drug, dose, "mg"]`` (steroid input). :class:`Entities` wraps such a dict,
normalises key spellings (the benchmark's rows spell ``Congestive Heart Faliure``; its calculators spell it
correctly), and converts quantities to the unit a formula wants.

Concentrations convert through molar mass: anything (``mg/dL``, ``g/L``, ``mmol/L``, ``µmol/L``, ``mEq/L``) goes
to mg/dL first, then to the target. Count units (``µL``, ``mm^3``, ``L``, ``m^3``) mean "cells per that volume".

Example:
    >>> ents = Entities({"creatinine": [88.4, "µmol/L"], "weight": [154, "lbs"]})
    >>> round(ents.num("creatinine", "mg/dL"), 3), round(ents.num("weight", "kg"), 2)
    (1.0, 69.85)
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

__all__ = ["Entities", "MissingEntity", "convert", "normalize_unit"]


class MissingEntity(ValueError):
    """A required entity key is absent (the message names the key)."""


#: Molar mass (g/mol) and valence of analytes that appear in both conventional and SI units.
ANALYTES: dict[str, tuple[float, int]] = {
    "creatinine": (113.12, 1),
    "glucose": (180.16, 1),
    "bun": (28.02, 1),  # urea nitrogen: two N atoms per urea
    "calcium": (40.08, 2),
    "bilirubin": (584.66, 1),
    "cholesterol": (386.65, 1),
    "triglycerides": (885.7, 1),
    "sodium": (22.99, 1),
    "chloride": (35.45, 1),
    "bicarbonate": (61.02, 1),
    "potassium": (39.10, 1),
    "albumin": (66500.0, 1),
}

#: Entity key (normalised) -> analyte, for concentration conversions.
KEY_ANALYTE = {
    "creatinine": "creatinine",
    "pre-operative creatinine": "creatinine",
    "urine creatinine": "creatinine",
    "glucose": "glucose",
    "blood urea nitrogen (bun)": "bun",
    "calcium": "calcium",
    "bilirubin": "bilirubin",
    "total cholesterol": "cholesterol",
    "high-density lipoprotein cholesterol": "cholesterol",
    "triglycerides": "triglycerides",
    "sodium": "sodium",
    "urine sodium": "sodium",
    "chloride": "chloride",
    "bicarbonate": "bicarbonate",
    "potassium": "potassium",
    "albumin": "albumin",
    "hemoglobin": "albumin",  # only mass units are used; the molar mass is never needed
}

# Unit spelling variants seen in the benchmark rows -> canonical spelling.
_UNIT_ALIASES = {
    "mm hg": "mmHg", "mmhg": "mmHg", "mm of hg": "mmHg",
    "beats per minute": "bpm", "bpm": "bpm", "/min": "bpm",
    "breaths per minute": "bpm",
    "degrees celsius": "C", "degrees celsisus": "C", "°c": "C", "c": "C", "celsius": "C",
    "degrees fahrenheit": "F", "degrees fahreinheit": "F", "°f": "F", "f": "F", "fahrenheit": "F",
    "µl": "uL", "ul": "uL", "mcl": "uL", "mm^3": "uL", "mm3": "uL", "mm³": "uL",
    "l": "L", "m^3": "m3", "m3": "m3", "ml": "mL", "dl": "dL",
    "µmol/l": "umol/L", "umol/l": "umol/L", "mmol/l": "mmol/L", "meq/l": "mEq/L",
    "mg/dl": "mg/dL", "g/dl": "g/dL", "g/l": "g/L", "mg/l": "mg/L",
    "kg": "kg", "g": "g", "lbs": "lb", "lb": "lb", "pounds": "lb", "oz": "oz",
    "cm": "cm", "m": "m", "in": "in", "inches": "in", "ft": "ft", "mm": "mm",
    "years": "years", "year": "years", "months": "months", "month": "months", "weeks": "weeks", "days": "days",
    "msec": "ms", "ms": "ms", "s": "s", "sec": "s",
    "mg": "mg", "µg": "ug", "ug": "ug", "mcg": "ug",
    "mcg/kg/min": "ug/kg/min", "mc/kg/min": "ug/kg/min", "µg/kg/min": "ug/kg/min",
    "%": "%", "µiu/ml": "uIU/mL", "uiu/ml": "uIU/mL", "miu/l": "uIU/mL", "pmol/l": "pmol/L",
    "ml/day": "mL/day", "ml/hr": "mL/hr", "ml/h": "mL/hr",
    "kg/m^2": "kg/m2", "kg/m2": "kg/m2", "kg/m²": "kg/m2",
    "u/l": "U/L", "iu/l": "U/L", "per day": "per day", "kpa": "kPa",
}

# Linear dimensions: unit -> factor to the dimension's base unit.
_LINEAR = {
    "mass": {"kg": 1.0, "g": 1e-3, "lb": 0.45359237, "oz": 0.028349523125},
    "length": {"cm": 1.0, "m": 100.0, "in": 2.54, "ft": 30.48, "mm": 0.1},
    "age": {"years": 1.0, "months": 1 / 12, "weeks": 7 / 365.25, "days": 1 / 365.25},
    "time": {"ms": 1.0, "s": 1000.0},
    "dose": {"mg": 1.0, "ug": 1e-3, "g": 1000.0},
    "count": {"uL": 1.0, "mL": 1e-3, "dL": 1e-5, "L": 1e-6, "m3": 1e-9},  # cells per volume -> per µL
    "pressure": {"mmHg": 1.0, "kPa": 7.50062},
    "rate": {"bpm": 1.0},
    "percent": {"%": 1.0},
    "insulin": {"uIU/mL": 1.0, "pmol/L": 1 / 6.0},
    "urine": {"mL/day": 1.0, "mL/hr": 24.0},
    "vaso": {"ug/kg/min": 1.0},
    "bmi": {"kg/m2": 1.0},
    "enzyme": {"U/L": 1.0},
    "perday": {"per day": 1.0},
}
# Mass concentration units -> factor to mg/dL.
_MASS_CONC = {"mg/dL": 1.0, "g/dL": 1000.0, "g/L": 100.0, "mg/L": 0.1}
_MOLAR_CONC = {"mmol/L": 1.0, "umol/L": 1e-3, "mEq/L": None}


def normalize_unit(unit: str) -> str:
    """Canonical spelling of a unit string (``'mm hg'`` -> ``'mmHg'``); unknown spellings are returned stripped."""
    text = str(unit).strip()
    return _UNIT_ALIASES.get(text.lower(), text)


def _to_mg_dl(value: float, unit: str, analyte: str | None) -> float:
    if unit in _MASS_CONC:
        return value * _MASS_CONC[unit]
    if unit in _MOLAR_CONC:
        if analyte is None:
            raise ValueError(f"cannot convert {unit} without knowing the analyte; pass analyte=")
        molar_mass, valence = ANALYTES[analyte]
        mmol = value / valence if unit == "mEq/L" else value * _MOLAR_CONC[unit]
        return mmol * molar_mass / 10.0
    raise ValueError(f"unknown concentration unit {unit!r}; use mg/dL, g/dL, g/L, mmol/L, µmol/L or mEq/L")


def convert(value: float, unit: str, target: str, analyte: str | None = None) -> float:
    """Convert ``value`` from ``unit`` to ``target``.

    Args:
        value: The number.
        unit: Its unit, any spelling seen in the benchmark (``'degrees fahreinheit'``, ``'mm hg'``).
        target: The wanted unit (canonical spelling, e.g. ``'mg/dL'``, ``'kg'``, ``'C'``, ``'uL'``).
        analyte: For concentrations between mass and molar units, a key of :data:`ANALYTES`.

    Returns:
        The converted value.

    Raises:
        ValueError: Unknown unit, or units of different dimensions.
    """
    src, dst = normalize_unit(unit), normalize_unit(target)
    value = float(value)
    if src == dst:
        return value
    if {src, dst} <= {"C", "F"}:
        return (value - 32.0) * 5.0 / 9.0 if src == "F" else value * 9.0 / 5.0 + 32.0
    if src in _MOLAR_CONC and dst in _MOLAR_CONC:  # molar <-> molar needs only the valence
        valence = ANALYTES[analyte][1] if analyte else 1
        mmol = value / valence if src == "mEq/L" else value * _MOLAR_CONC[src]
        return mmol * valence if dst == "mEq/L" else mmol / _MOLAR_CONC[dst]
    conc = set(_MASS_CONC) | set(_MOLAR_CONC)
    if src in conc and dst in conc:
        mg_dl = _to_mg_dl(value, src, analyte)
        if dst in _MASS_CONC:
            return mg_dl / _MASS_CONC[dst]
        return mg_dl / _to_mg_dl(1.0, dst, analyte)
    for table in _LINEAR.values():
        if src in table and dst in table:
            return value * table[src] / table[dst]
    raise ValueError(f"cannot convert {unit!r} to {target!r}; the units are unknown or of different kinds")


def _norm_key(key: str) -> str:
    text = str(key).strip().lower()
    for typo, fix in (("faliure", "failure"), ("continous", "continuous"), ("conciousness", "consciousness")):
        text = text.replace(typo, fix)
    return re.sub(r"\s+", " ", text)


_FALSEY = {"false", "no", "absent", "none", "not mentioned", "not mentinoed", "n/a", ""}


class Entities:
    """Read-only view of a Relevant Entities dict with typed, unit-converting accessors.

    Args:
        raw: The entities dict (benchmark key spellings; a missing optional key means "absent").
    """

    def __init__(self, raw: dict[str, Any]):
        if not isinstance(raw, dict):
            raise ValueError(f"entities must be a dict of key -> value, got {type(raw).__name__}")  # noqa: TRY004
        self.raw = raw
        self._by_norm = {_norm_key(k): v for k, v in raw.items()}

    def has(self, key: str) -> bool:
        """True when ``key`` (any spelling variant) is present."""
        return _norm_key(key) in self._by_norm

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value of ``key`` or ``default``."""
        return self._by_norm.get(_norm_key(key), default)

    def require(self, key: str) -> Any:
        """The raw value of ``key``; raises :class:`MissingEntity` naming the key when absent."""
        norm = _norm_key(key)
        if norm not in self._by_norm:
            near = difflib.get_close_matches(str(key), list(self.raw), n=1)
            hint = f"; the nearest given key is {near[0]!r}" if near else ""
            raise MissingEntity(f"missing entity {key!r}{hint}")
        return self._by_norm[norm]

    def num(self, key: str, unit: str | None = None) -> float:
        """A required quantity converted to ``unit`` (bare numbers are taken as already in ``unit``)."""
        value = self.require(key)
        if isinstance(value, bool) or value is None:
            raise ValueError(f"entity {key!r} must be a number or [value, unit], got {value!r}")
        if isinstance(value, (list, tuple)):
            if len(value) >= 4 and len(value) % 2 == 0 and unit is not None:
                # compound quantities such as [45, 'years', 6, 'months']: convert each part and add them up
                return sum(self._one(key, value[i:i + 2], unit) for i in range(0, len(value), 2))
            if len(value) != 2:
                raise ValueError(f"entity {key!r} must be [value, unit], got {value!r}")
            return self._one(key, value, unit)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"entity {key!r} must be a number or [value, unit], got {value!r}") from None
        if math.isnan(number):
            raise ValueError(f"entity {key!r} is NaN")
        return number

    def _one(self, key: str, pair: Any, unit: str | None) -> float:
        number, src = pair
        try:
            number = float(number)
        except (TypeError, ValueError):
            raise ValueError(f"entity {key!r} must be [number, unit], got {list(pair)!r}") from None
        return number if unit is None else convert(number, src, unit, KEY_ANALYTE.get(_norm_key(key)))

    def opt_num(self, key: str, unit: str | None = None) -> float | None:
        """Like :meth:`num` but ``None`` when the key is absent."""
        return self.num(key, unit) if self.has(key) else None

    def flag(self, *keys: str) -> bool:
        """True when any of ``keys`` is present and truthy (missing, False, 'Not mentioned' count as absent)."""
        for key in keys:
            value = self.get(key)
            if isinstance(value, str):
                if value.strip().lower() not in _FALSEY:
                    return True
            elif value:
                return True
        return False

    def text(self, key: str, default: str | None = None) -> str:
        """A categorical value, stripped and lower-cased; ``default`` when absent (required when no default)."""
        value = self.get(key) if default is not None else self.require(key)
        if value is None:
            return default  # type: ignore[return-value]
        return str(value).strip().lower()
