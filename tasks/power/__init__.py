"""Statistical power helpers of the N-PowerAI family: scenarios, reference snippets, independent formulas.

Example:
    >>> from tasks.power import DESIGNS, reference_code
    >>> sorted(DESIGNS)[:2]
    ['anova', 'chisq']
"""

from tasks.power.scenarios import question, sample
from tasks.power.snippets import DESIGNS, reference_code

__all__ = ["DESIGNS", "question", "reference_code", "sample"]
