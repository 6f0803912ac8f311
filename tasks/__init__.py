"""Task families: the contract (``tasks.base``), the registry and the strict graders.

``import tasks`` loads no family module: families are registered with lazy string entry points and imported by
``make``. Add a family by writing ``tasks/<family>.py`` and one ``register(...)`` line below.

Example:
    >>> import tasks
    >>> fam = tasks.make("toy_sql", root="artifacts/tasks")
    >>> fam.build("artifacts/tasks", size="tiny", seed=0)["counts"]
    {'train': 22, 'test': 22}
"""

from tasks.base import ALL_ACTIONS, GradeContext, Instance, NotBuilt, TaskError, TaskFamily, UnknownTask, Verdict
from tasks.registry import check_family, make, names, register

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
register("toy_sql", entry_point="tasks.toy_sql:ToySQL", max_turns=8)
register("medcalcbench", entry_point="tasks.medcalcbench:MedCalcBench", max_turns=8)
register("npowerai", entry_point="tasks.npowerai:NPowerAI", max_turns=10)
register("ehrshot", entry_point="tasks.ehrshot:EHRShot", max_turns=12)
register("mimic_iii", entry_point="tasks.mimic_iii:MimicIII", max_turns=15)
register("eicu", entry_point="tasks.eicu:EICU", max_turns=15)
register("treqs", entry_point="tasks.treqs:TREQS", max_turns=15)
register("ehr_seqsql", entry_point="tasks.ehr_seqsql:EHRSeqSQL", max_turns=15)
register("ehrcon", entry_point="tasks.ehrcon:EHRCon", max_turns=15)
register("mimic_extract", entry_point="tasks.mimic_extract:MimicExtract", max_turns=15)
register("biocoder", entry_point="tasks.biocoder:BioCoder", max_turns=10)
register("biodsbench", entry_point="tasks.biodsbench:BioDSBench", max_turns=10)
register("medagentbench", entry_point="tasks.medagentbench:MedAgentBench", max_turns=10)
register("toy_lookup", entry_point="tasks.toy_lookup:ToyLookup", max_turns=3)

#: The evaluation protocol of the MedAgentGym paper: its results table has eight in-distribution columns (trained
#: and evaluated on) and four further scenarios held out of every training recipe (``--suite ood``). The two are
#: disjoint; ``toy_sql`` and ``toy_lookup`` are in neither (smoke-test and learning-check families).
SUITES: dict[str, tuple[str, ...]] = {
    "id": ("mimic_iii", "eicu", "treqs", "medcalcbench", "medagentbench", "biocoder", "biodsbench", "ehrshot"),
    "ood": ("ehr_seqsql", "ehrcon", "mimic_extract", "npowerai"),
}
