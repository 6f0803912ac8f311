"""toy_sql: questions over a small synthetic clinic database, answered with SQL or Python.

Description:
    A seeded SQLite database of a fictional clinic (``patients``, ``visits``, ``labs``; a few hundred rows,
    all synthetic) and eleven question templates (counts, averages, maxima, sets, ordered lists, yes/no, dates,
    names). Each instance's gold answer is obtained by EXECUTING its gold SQL against the built database
    (read-only), never written by hand. Small enough to run in tests; shaped like the EHR SQL families.

Example instance:
    question: "How many patients born after 1970 live in Riverton?"
    context:  "SQLite database: /data/toy_sql.db (tables: patients, visits, labs). ..."
    answer:   7            answer_type: "integer"        category: "patients_in_city"
    solution: "SELECT COUNT(*) FROM patients WHERE city = 'Riverton' AND birth_year > 1970"

Allowed actions:
    request_info (schema, column names/values, term search over the database), code_execution (sql against
    /data/toy_sql.db read-only, or python), terminal, debugging, submit_answer.

Grading:
    One ``submit_answer`` per episode, graded by the strict grader of the instance's answer type
    (medagentgym.tasks.graders): integer exact; number within abs_tol 0.01 for rounded averages, 1e-4 relative otherwise;
    set order-insensitive; list ordered; boolean exactly one of true/false/yes/no; date by day; text
    normalised exact. Several candidates in one submission are wrong.

Episode end:
    The graded submit (terminated), or a budget (turns, tokens, wall time: truncated). Default 8 turns.

Arguments:
    ``tasks.make("toy_sql", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/toy_sql/{toy_sql.db, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed.
    tiny: 30 patients, 4 instances per template; default: 120 patients, 20 per template. 40 % go to test.

Version history:
    1: first version (11 templates, strict graders).
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import (
    ALL_ACTIONS,
    GradeContext,
    Instance,
    Size,
    Split,
    TaskError,
    Verdict,
    load_instances,
    run_then_submit,
    write_bytes_atomic,
    write_instances,
    write_manifest,
)
from medagentgym.tasks.graders import grade, render_answer

DB_NAME = "toy_sql.db"
_SIZES: dict[str, dict[str, int]] = {"tiny": {"patients": 30, "per_template": 4}, "default": {"patients": 120, "per_template": 20}}
_TEST_FRACTION = 0.4
_YEARS = (2019, 2020, 2021, 2022, 2023)
_CITIES = ("Riverton", "Lakeside", "Hillcrest", "Maple Grove", "Oakdale", "Fairview")
_DEPARTMENTS = ("cardiology", "endocrinology", "nephrology", "general medicine", "pulmonology")
_DIAGNOSES = ("hypertension", "type 2 diabetes", "asthma", "chronic kidney disease", "anemia", "influenza", "copd")
# test name -> (unit, low, high): values are drawn uniformly and rounded to one decimal
_TESTS = {
    "glucose": ("mg/dL", 65.0, 240.0),
    "creatinine": ("mg/dL", 0.4, 3.2),
    "hemoglobin": ("g/dL", 8.0, 17.5),
    "potassium": ("mmol/L", 2.9, 6.1),
}
_FIRST = ("Ada", "Ben", "Cora", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Mo", "Nia", "Omar")
_LAST = ("Adler", "Brooks", "Chen", "Diaz", "Evans", "Ford", "Garcia", "Hill", "Ito", "Jones", "Khan", "Lopez")
_SCHEMA = """
CREATE TABLE patients (patient_id INTEGER PRIMARY KEY, name TEXT NOT NULL, sex TEXT NOT NULL,
                       birth_year INTEGER NOT NULL, city TEXT NOT NULL);
CREATE TABLE visits (visit_id INTEGER PRIMARY KEY, patient_id INTEGER NOT NULL REFERENCES patients(patient_id),
                     visit_date TEXT NOT NULL, department TEXT NOT NULL, diagnosis TEXT NOT NULL);
CREATE TABLE labs (lab_id INTEGER PRIMARY KEY, visit_id INTEGER NOT NULL REFERENCES visits(visit_id),
                   test_name TEXT NOT NULL, value REAL NOT NULL, unit TEXT NOT NULL);
"""


def _q(value: Any) -> str:
    """A SQL literal for one of our own vocabulary values."""
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"


@dataclass(frozen=True)
class _Template:
    id: str
    answer_type: str
    question: str
    sql: str
    slots: Callable[[random.Random, dict[str, list[Any]]], dict[str, Any]]
    #: SQL that must return 1 for the instance to be kept (e.g. "the maximum is unique").
    valid_sql: str | None = None
    grading: dict[str, Any] = field(default_factory=dict)
    max_items: int = 12


def _pick(name: str) -> Callable[[random.Random, dict[str, list[Any]]], Any]:
    return lambda rng, facts: rng.choice(facts[name])


def _slots(**pickers: Callable[[random.Random, dict[str, list[Any]]], Any]):
    return lambda rng, facts: {k: p(rng, facts) for k, p in pickers.items()}


def _has_dx_slots(rng: random.Random, facts: dict[str, list[Any]]) -> dict[str, Any]:
    pid = rng.choice(facts["patient_id"])
    own = [d for p, d in facts["patient_dx"] if p == pid]
    # Half the items ask about one of the patient's own diagnoses, so "no" is not a free 50 %+.
    diagnosis = rng.choice(own) if own and rng.random() < 0.5 else rng.choice(_DIAGNOSES)
    return {"pid": pid, "diagnosis": diagnosis}


def _threshold_slots(rng: random.Random, facts: dict[str, list[Any]]) -> dict[str, Any]:
    test = rng.choice(sorted(_TESTS))
    unit, low, high = _TESTS[test]
    threshold = round(low + (high - low) * rng.uniform(0.55, 0.9), 1)
    return {"test": test, "unit": unit, "threshold": threshold, "birth_year": rng.choice(facts["birth_year"])}


_LAB_JOIN = "FROM labs l JOIN visits v ON l.visit_id = v.visit_id"
_CITY_YEAR = ("FROM visits v JOIN patients p ON v.patient_id = p.patient_id "
              "WHERE strftime('%Y', v.visit_date) = '{year}' AND p.city = {city!q}")
_CITY_DEPT = ("city = {city!q} AND patient_id IN (SELECT patient_id FROM visits WHERE department = {department!q})")
TEMPLATES: tuple[_Template, ...] = (
    _Template("patients_in_city", "integer", "How many patients born after {birth_year} live in {city}?",
              "SELECT COUNT(*) FROM patients WHERE city = {city!q} AND birth_year > {birth_year}",
              _slots(city=_pick("city"), birth_year=_pick("birth_year"))),
    _Template("visits_in_department_year", "integer",
              "How many visits to the {department} department took place in {year}?",
              "SELECT COUNT(*) FROM visits WHERE department = {department!q} AND strftime('%Y', visit_date) = '{year}'",
              _slots(department=_pick("department"), year=_pick("year"))),
    _Template("average_lab_value", "number",
              "What is the average {test} value over all lab results of patients living in {city}? "
              "Round to 2 decimals.",
              "SELECT ROUND(AVG(l.value), 2) " + _LAB_JOIN + " JOIN patients p ON v.patient_id = p.patient_id "
              "WHERE l.test_name = {test!q} AND p.city = {city!q}",
              _slots(test=_pick("test"), city=_pick("city")), grading={"abs_tol": 0.01, "rel_tol": 0.0}),
    _Template("max_lab_patient", "number", "What is the highest {test} value ever recorded for patient {pid}?",
              "SELECT MAX(l.value) " + _LAB_JOIN + " WHERE v.patient_id = {pid} AND l.test_name = {test!q}",
              _slots(pid=_pick("patient_id"), test=_pick("test"))),
    _Template("diagnoses_of_patient", "set", "Which distinct diagnoses were recorded for patient {pid}?",
              "SELECT DISTINCT diagnosis FROM visits WHERE patient_id = {pid} ORDER BY diagnosis",
              _slots(pid=_pick("patient_id"))),
    _Template("has_diagnosis", "boolean", "Was patient {pid} ever diagnosed with {diagnosis}? Answer yes or no.",
              "SELECT EXISTS(SELECT 1 FROM visits WHERE patient_id = {pid} AND diagnosis = {diagnosis!q})",
              _has_dx_slots),
    _Template("first_visit_date", "date", "On what date did patient {pid} first visit the clinic?",
              "SELECT MIN(visit_date) FROM visits WHERE patient_id = {pid}", _slots(pid=_pick("patient_id"))),
    _Template("busiest_department", "text",
              "Which department had the most visits in {year} by patients living in {city}?",
              "SELECT v.department " + _CITY_YEAR + " GROUP BY v.department ORDER BY COUNT(*) DESC, v.department LIMIT 1",
              _slots(year=_pick("year"), city=_pick("city")),
              valid_sql="SELECT COUNT(*) = 1 FROM (SELECT COUNT(*) AS n " + _CITY_YEAR + " GROUP BY v.department) "
                        "WHERE n = (SELECT MAX(n) FROM (SELECT COUNT(*) AS n " + _CITY_YEAR + " GROUP BY v.department))"),
    _Template("patients_with_high_lab", "list",
              "List, in ascending order, the ids of patients born before {birth_year} with at least one {test} "
              "result above {threshold} {unit}.",
              "SELECT DISTINCT v.patient_id " + _LAB_JOIN + " JOIN patients p ON v.patient_id = p.patient_id "
              "WHERE p.birth_year < {birth_year} AND l.test_name = {test!q} AND l.value > {threshold} "
              "ORDER BY v.patient_id",
              _threshold_slots),
    _Template("count_high_lab", "integer", "How many {test} results are above {threshold} {unit}?",
              "SELECT COUNT(*) FROM labs WHERE test_name = {test!q} AND value > {threshold}", _threshold_slots),
    _Template("oldest_patient", "text",
              "What is the name of the oldest patient (earliest birth year) living in {city} who ever visited the "
              "{department} department?",
              "SELECT name FROM patients WHERE " + _CITY_DEPT + " ORDER BY birth_year, patient_id LIMIT 1",
              _slots(city=_pick("city"), department=_pick("department")),
              valid_sql="SELECT COUNT(*) = 1 FROM patients WHERE " + _CITY_DEPT + " AND birth_year = "
                        "(SELECT MIN(birth_year) FROM patients WHERE " + _CITY_DEPT + ")"),
)


def _fill(text: str, slots: dict[str, Any]) -> str:
    """Format ``text``; ``{name!q}`` renders the slot as a SQL literal."""
    for key, value in slots.items():
        text = text.replace("{" + key + "!q}", _q(value))
    return text.format(**slots)


def _write_database(path: Path, rng: random.Random, n_patients: int) -> None:
    con = sqlite3.connect(path)
    try:
        con.executescript(_SCHEMA)
        visit_id = lab_id = 0
        for pid in range(1, n_patients + 1):
            name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
            con.execute("INSERT INTO patients VALUES (?, ?, ?, ?, ?)",
                        (pid, name, rng.choice("FM"), rng.randint(1935, 2005), rng.choice(_CITIES)))
            for _ in range(rng.randint(1, 5)):
                visit_id += 1
                date = f"{rng.choice(_YEARS)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
                con.execute("INSERT INTO visits VALUES (?, ?, ?, ?, ?)",
                            (visit_id, pid, date, rng.choice(_DEPARTMENTS), rng.choice(_DIAGNOSES)))
                for test in rng.sample(sorted(_TESTS), rng.randint(1, 3)):
                    unit, low, high = _TESTS[test]
                    lab_id += 1
                    con.execute("INSERT INTO labs VALUES (?, ?, ?, ?, ?)",
                                (lab_id, visit_id, test, round(rng.uniform(low, high), 1), unit))
        con.commit()
    finally:
        con.close()


def _facts(con: sqlite3.Connection) -> dict[str, list[Any]]:
    def col(sql: str) -> list[Any]:
        return [row[0] for row in con.execute(sql)]

    return {
        "patient_id": col("SELECT patient_id FROM patients ORDER BY patient_id"),
        "city": col("SELECT DISTINCT city FROM patients ORDER BY city"),
        "department": col("SELECT DISTINCT department FROM visits ORDER BY department"),
        "year": col("SELECT DISTINCT CAST(strftime('%Y', visit_date) AS INTEGER) FROM visits ORDER BY 1"),
        "test": col("SELECT DISTINCT test_name FROM labs ORDER BY test_name"),
        "birth_year": col("SELECT DISTINCT birth_year FROM patients ORDER BY birth_year"),
        "patient_dx": [tuple(r) for r in con.execute("SELECT DISTINCT patient_id, diagnosis FROM visits ORDER BY 1, 2")],
    }


def _gold(template: _Template, rows: list[tuple[Any, ...]]) -> Any:
    """The gold answer from the executed rows; None when the instance is degenerate."""
    if template.answer_type in {"set", "list"}:
        values = [r[0] for r in rows]
        return values if 0 < len(values) <= template.max_items else None
    if not rows or rows[0][0] is None:
        return None
    value = rows[0][0]
    return bool(value) if template.answer_type == "boolean" else value


def _instances_for(template: _Template, con: sqlite3.Connection, facts: dict[str, list[Any]], seed: int,
                   n: int, db_mount: str) -> list[tuple[dict[str, Any], str, Any]]:
    rng = random.Random(f"toy_sql:{seed}:{template.id}")
    seen: set[str] = set()
    out = []
    for _ in range(n * 50):
        if len(out) == n:
            break
        slots = template.slots(rng, facts)
        key = template.question.format(**slots)
        if key in seen:
            continue
        seen.add(key)
        if template.valid_sql and con.execute(_fill(template.valid_sql, slots)).fetchone()[0] != 1:
            continue
        sql = _fill(template.sql, slots)
        answer = _gold(template, con.execute(sql).fetchall())
        if answer is not None:
            out.append((slots, sql, answer))
    if len(out) < n:
        raise TaskError(f"toy_sql template {template.id!r} produced {len(out)} of {n} instances; raise the size")
    return out


class ToySQL:
    """The toy_sql family (see the module docstring for the spec card)."""

    name = "toy_sql"
    version = 1
    actions = frozenset(ALL_ACTIONS)
    #: Its episodes' code is SQL: the sandbox's warm workers import sqlite3 alone, not numpy and pandas
    #: (``medagentgym.env_client.rollout.family_preload``; a worker starts in ~0.15 CPU-s instead of ~0.9).
    sandbox_preload = ("sqlite3",)

    def __init__(self, root: Path | str) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/toy_sql``)."""
        self.root = Path(root)

    @property
    def categories(self) -> list[str]:
        """Template ids, in a fixed order."""
        return [t.id for t in TEMPLATES]

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Instance counts for ``size`` without building (every template yields exactly its quota)."""
        return {"categories": len(TEMPLATES), "instances": len(TEMPLATES) * _SIZES[size]["per_template"]}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write ``<out_dir>/toy_sql/``: the database, train/test instances and a manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` (tests) or ``"default"``.
            seed: Seeds the data and the slot draws; the same seed gives byte-identical files.

        Returns:
            The manifest (counts per split and category, seed, size, version, sha256 per file).
        """
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        family_dir = Path(out_dir) / self.name
        family_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=family_dir) as tmp:
            tmp_db = Path(tmp) / DB_NAME
            _write_database(tmp_db, random.Random(seed), _SIZES[size]["patients"])
            write_bytes_atomic(family_dir / DB_NAME, tmp_db.read_bytes())
        splits = self._make_instances(family_dir / DB_NAME, size=size, seed=seed)
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        return write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed,
            counts={split: len(items) for split, items in splits.items()},
            categories={t.id: sum(i.category == t.id for items in splits.values() for i in items) for t in TEMPLATES},
        )

    def _make_instances(self, db: Path, *, size: Size, seed: int) -> dict[str, list[Instance]]:
        per = _SIZES[size]["per_template"]
        n_test = max(1, round(per * _TEST_FRACTION))
        splits: dict[str, list[Instance]] = {"train": [], "test": []}
        # Gold answers come from executing the gold SQL on a read-only connection to the built file.
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            facts = _facts(con)
            for template in TEMPLATES:
                for k, (slots, sql, answer) in enumerate(_instances_for(template, con, facts, seed, per, DB_NAME)):
                    split: Split = "test" if k < n_test else "train"
                    splits[split].append(self._instance(template, slots, sql, answer, split, len(splits[split])))
        finally:
            con.close()
        return splits

    def _instance(self, template: _Template, slots: dict[str, Any], sql: str, answer: Any, split: Split,
                  index: int) -> Instance:
        context = (
            f"SQLite database: /data/{DB_NAME} (tables: patients, visits, labs), read-only. Run SQL with "
            "code_execution (lang 'sql'), or open it from Python with sqlite3. Submit only the final answer."
        )
        return Instance(
            id=f"{self.name}/{split}/{index:04d}", family=self.name, category=template.id, split=split,
            question=template.question.format(**slots), context=context, answer=answer,
            answer_type=template.answer_type, solution=sql, solution_lang="sql", data={DB_NAME: DB_NAME},
            metadata={"slots": slots, "grading": dict(template.grading), "sql_database": DB_NAME},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the gold SQL, then submit the rendered gold answer."""
        return run_then_submit("sql", instance.solution, render_answer(instance.answer_type, instance.answer))

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """The strict grader of the instance's answer type, with the template's tolerances."""
        return grade(instance.answer_type, instance.answer, submission, **instance.metadata.get("grading", {}))
