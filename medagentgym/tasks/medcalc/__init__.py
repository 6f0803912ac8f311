"""MedCalc-Bench calculators (55), entity unit handling, and synthetic note generation.

``calculate(calculator_name_or_id, entities)`` is the public entry point; ``CALCULATORS`` maps id -> metadata.
"""

from medagentgym.tasks.medcalc.registry import (
    CALCULATORS,
    CONVENTIONS,
    Calculator,
    bounds,
    calculate,
    get_calculator,
)
from medagentgym.tasks.medcalc.units import Entities, MissingEntity

__all__ = [
    "CALCULATORS",
    "CONVENTIONS",
    "Calculator",
    "Entities",
    "MissingEntity",
    "bounds",
    "calculate",
    "get_calculator",
]
