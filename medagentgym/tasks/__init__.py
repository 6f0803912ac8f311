"""Task families: the contract (``medagentgym.tasks.base``), the registry and the strict graders.

``from medagentgym import tasks`` loads no family module: families are registered with lazy string entry points and imported by
``make``. Add a family by writing ``medagentgym/tasks/<family>.py`` and one ``register(...)`` line below, or, with no
edit here, in your own package through the ``medagentgym.families`` entry point group (docs/add_a_family.md).

Example:
    >>> from medagentgym import tasks
    >>> fam = tasks.make("toy_sql", root="artifacts/tasks")
    >>> fam.build("artifacts/tasks", size="tiny", seed=0)["counts"]
    {'train': 22, 'test': 22}
"""

from medagentgym.tasks.base import ALL_ACTIONS, GradeContext, Instance, NotBuilt, TaskError, TaskFamily, UnknownTask, Verdict
from medagentgym.tasks.registry import check_family, make, names, register

__all__ = [
    "ALL_ACTIONS",
    "SUITES",
    "GradeContext",
    "Instance",
    "NotBuilt",
    "TaskError",
    "TaskFamily",
    "UnknownTask",
    "Verdict",
    "check_family",
    "make",
    "names",
    "register",
]

# One line per family whose module exists; the entry point is imported only when the family is made.
register("toy_sql", entry_point="medagentgym.tasks.toy_sql:ToySQL", max_turns=8)
register("medcalcbench", entry_point="medagentgym.tasks.medcalcbench:MedCalcBench", max_turns=8)
register("npowerai", entry_point="medagentgym.tasks.npowerai:NPowerAI", max_turns=10)
register("ehrshot", entry_point="medagentgym.tasks.ehrshot:EHRShot", max_turns=12)
register("mimic_iii", entry_point="medagentgym.tasks.mimic_iii:MimicIII", max_turns=15)
register("eicu", entry_point="medagentgym.tasks.eicu:EICU", max_turns=15)
register("treqs", entry_point="medagentgym.tasks.treqs:TREQS", max_turns=15)
register("ehr_seqsql", entry_point="medagentgym.tasks.ehr_seqsql:EHRSeqSQL", max_turns=15)
register("ehrcon", entry_point="medagentgym.tasks.ehrcon:EHRCon", max_turns=15)
register("mimic_extract", entry_point="medagentgym.tasks.mimic_extract:MimicExtract", max_turns=15)
register("biocoder", entry_point="medagentgym.tasks.biocoder:BioCoder", max_turns=10)
register("biodsbench", entry_point="medagentgym.tasks.biodsbench:BioDSBench", max_turns=10)
register("medagentbench", entry_point="medagentgym.tasks.medagentbench:MedAgentBench", max_turns=10)
register("toy_lookup", entry_point="medagentgym.tasks.toy_lookup:ToyLookup", max_turns=3)
register("toy_choice", entry_point="medagentgym.tasks.toy_choice:ToyChoice", max_turns=3)
register("toy_retry", entry_point="medagentgym.tasks.toy_retry:ToyRetry", max_turns=4)

#: The evaluation protocol of the MedAgentGym paper: its results table has eight in-distribution columns (trained
#: and evaluated on) and four further scenarios held out of every training recipe (``--suite ood``). The two are
#: disjoint; ``toy_sql``, ``toy_lookup``, ``toy_choice`` and ``toy_retry`` are in neither (smoke-test and
#: learning-check families).
SUITES: dict[str, tuple[str, ...]] = {
    "id": ("mimic_iii", "eicu", "treqs", "medcalcbench", "medagentbench", "biocoder", "biodsbench", "ehrshot"),
    "ood": ("ehr_seqsql", "ehrcon", "mimic_extract", "npowerai"),
}
