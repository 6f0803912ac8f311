"""Date-based MedCalc-Bench calculators: due date, conception date, gestational age.

Dates are ``MM/DD/YYYY`` strings in and out (zero-padded), as in the benchmark.
"""

from __future__ import annotations

import datetime as dt

from medagentgym.tasks.medcalc.units import Entities

DATE_FORMAT = "%m/%d/%Y"


def parse_date(value: object, key: str) -> dt.date:
    """Parse an entity date (``MM/DD/YYYY``, ``M/D/YYYY`` or ISO ``YYYY-MM-DD``)."""
    text = str(value).strip()
    for fmt in (DATE_FORMAT, "%Y-%m-%d"):
        try:
            return dt.datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    raise ValueError(f"entity {key!r} must be a date written MM/DD/YYYY, got {value!r}")


def format_date(day: dt.date) -> str:
    """``MM/DD/YYYY`` with zero padding."""
    return day.strftime(DATE_FORMAT)


def _lmp(e: Entities) -> dt.date:
    return parse_date(e.require("Last menstrual date"), "Last menstrual date")


def estimated_due_date(e: Entities) -> str:
    """Naegele's rule adjusted for cycle length: LMP + 280 days + (cycle length − 28) days."""
    cycle = e.num("cycle length", "days") if isinstance(e.get("cycle length"), list) else e.num("cycle length")
    return format_date(_lmp(e) + dt.timedelta(days=280 + round(cycle) - 28))


def estimated_conception_date(e: Entities) -> str:
    """Conception is estimated two weeks (14 days) after the first day of the last menstrual period."""
    return format_date(_lmp(e) + dt.timedelta(days=14))


def estimated_gestational_age(e: Entities) -> tuple[int, int]:
    """(weeks, days) elapsed from the first day of the last menstrual period to the current date."""
    current = parse_date(e.require("Current Date"), "Current Date")
    elapsed = (current - _lmp(e)).days
    if elapsed < 0:
        raise ValueError(f"'Current Date' {e.get('Current Date')!r} is before 'Last menstrual date'")
    weeks, days = divmod(elapsed, 7)
    return weeks, days
