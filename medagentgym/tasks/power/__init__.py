"""Statistical power helpers of the N-PowerAI family: scenarios, reference snippets, independent formulas.

Example:
    >>> from medagentgym.tasks.power import DESIGNS, reference_code
    >>> sorted(DESIGNS)[:2]
    ['anova', 'chisq']
"""

from medagentgym.tasks.power.scenarios import question, sample
from medagentgym.tasks.power.snippets import DESIGNS, reference_code

__all__ = ["DESIGNS", "question", "reference_code", "sample"]
