"""Importers of every non-SQL family's public task file, on small files written in the real formats: one bad
record never aborts a file, records needing user data name it, imports load and pass their oracle."""

from __future__ import annotations

import csv
import json
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from medagentgym import tasks
from medagentgym.tasks.base import TaskError
from medagentgym.tasks.importers import check_import, import_files
from medagentgym.tasks.importers.biocoder import normalise_context
from medagentgym.tasks.importers.records import read_records

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "import_other"
SANDBOX = "bwrap" if shutil.which("bwrap") else "local"


def _load(root: Path, family: str) -> dict[str, object]:
    fam = tasks.make(family, root=root)
    return {i.id: i for s in ("train", "test") for i in fam.instances(s)}


def test_records_reader_reports_bad_lines_and_keeps_going(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"x": 1}\n\n[1, 2]\n{oops\n{"x": 2}\n')
    assert [(n, r, e is None) for n, r, e in read_records(jsonl)] == [
        (1, {"x": 1}, True), (3, None, False), (4, None, False), (5, {"x": 2}, True)]
    array = tmp_path / "a.json"
    array.write_text('[\n  {"x": 1},\n  {"x": 2 "y": 3},\n  {"x": 3}\n]\n')
    assert [(n, r) for n, r, _ in read_records(array)] == [(2, {"x": 1}), (3, None), (4, {"x": 3})]
    table = tmp_path / "a.csv"
    table.write_text("a,b\n1,2\n3,4\n")
    assert [(n, r) for n, r, _ in read_records(table)] == [(2, {"a": "1", "b": "2"}), (3, {"a": "3", "b": "4"})]


def test_medcalc_rows_import_one_by_one(tmp_path):
    _, report = import_files("medcalcbench", [FIXTURES / "medcalc_rows.jsonl"], tmp_path)
    assert report.kept == 2 and {r.line: r.reason for r in report.rejected} == {3: "bad_row", 4: "bad_row"}
    assert "Relevant Entities" in report.rejected[1].detail
    assert check_import("medcalcbench", tmp_path)["test"] == {"instances": 2, "oracle": 1.0, "empty": 0.0,
                                                               "shotgun": 0.0}


def test_biocoder_normalises_contexts_names_packages_and_runs_references(tmp_path):
    _, report = import_files("biocoder", [FIXTURES / "biocoder_records.jsonl"], tmp_path, backend=SANDBOX)
    assert report.kept == 2 and report.notes["context_normalised"] == 2
    assert {r.line: r.reason for r in report.rejected} == {3: "needs_packages", 4: "missing_field", 5: "not_json"}
    assert "pip install zz_not_a_real_package_xyz" in report.rejected[0].detail and report.needs
    items = list(_load(tmp_path, "biocoder").values())
    assert [i.metadata["expected_stdout"].strip() for i in items] == ["0.6667", "[0.333, 0.667, 1.0]"]
    assert check_import("biocoder", tmp_path, backend=SANDBOX)["test"]["oracle"] == 1.0
    fam = tasks.make("biocoder", root=tmp_path)
    assert not fam.grade(items[0], "def gc_share(seq):\n    print('0.6667')").correct  # stdout alone is not enough


def test_numpy1_names_are_defined_before_the_first_import():
    context = '"""doc."""\nfrom __future__ import annotations\nimport numpy as np\nx = np.float_(1)\n'
    fixed = normalise_context(context)
    assert fixed.index("_np1.float_ = _np1.float64") < fixed.index("import numpy as np")
    assert fixed.index("from __future__") < fixed.index("_np1")
    assert normalise_context("import os\n<<insert solution here>>\n") == "import os\n<<insert solution here>>\n"


def test_biodsbench_needs_the_study_tables_and_drops_failing_references(tmp_path):
    _, without = import_files("biodsbench", [FIXTURES / "biodsbench_records.jsonl"], tmp_path / "a")
    assert without.by_reason == {"needs_data": 4, "missing_field": 1}
    assert any("egc_trap_msk_2020" in w and "data_clinical_patient.csv" in w and "--data" in w for w in without.needs)
    _, report = import_files("biodsbench", [FIXTURES / "biodsbench_records.jsonl"], tmp_path / "b",
                             data=FIXTURES / "biodsbench", backend=SANDBOX)
    reasons = {r.line: r.reason for r in report.rejected}
    assert report.kept == 2 and reasons == {3: "reference_fails", 4: "needs_data", 5: "missing_field"}
    assert "data_mutations.csv" in report.rejected[1].detail and "hist" in report.rejected[1].detail
    items = _load(tmp_path / "b", "biodsbench")
    assert all(i.data == {"workdir": "imported/32437664"} for i in items.values())
    assert all((i.solution + i.metadata["prelude"]).replace("/data/workdir/", "").count("/workdir/") == 0
               for i in items.values())
    assert "patients = pd.read_csv('/data/workdir/" in items["biodsbench/test/rec-32437664-1"].metadata["prelude"]
    assert (tmp_path / "b" / "biodsbench" / "imported" / "32437664" / "data_clinical_patient.csv").is_file()


def _medagentbench_records(patients: list[dict]) -> list[dict]:
    out = []
    for k, p in enumerate(patients[:3]):
        name, mrn = p["name"][0], p["id"]
        out.append({"id": f"task1_{k}", "instruction": f"What’s the MRN of the patient with name {name['given'][0]} "
                    f"{name['family']} and DOB of {p['birthDate']}? If the patient does not exist, the answer should "
                    "be \"Patient not found\"", "context": "", "sol": [mrn], "eval_MRN": mrn})
        out.append({"id": f"task4_{k}", "instruction": f"What’s the most recent magnesium level of the patient {mrn} "
                    "within last 24 hours?", "context": "", "sol": None, "eval_MRN": mrn})
        out.append({"id": f"task3_{k}", "instruction": f"I just measured the blood pressure for patient with MRN of "
                    f"{mrn}, and it is \"118/77 mmHg\". Help me record it.", "context": "", "sol": None,
                    "eval_MRN": mrn})
    out.append({"id": "task2_9", "instruction": "What's the age of the patient with MRN of S0000001?", "context": "",
                "sol": None, "eval_MRN": "S0000001"})
    return out


def test_medagentbench_snapshots_the_server_and_executes_references(tmp_path):
    from medagentgym.tasks.fhir.patients import generate_patients
    from medagentgym.tasks.fhir.server import FhirServer
    from medagentgym.tasks.fhir.store import BaseData, FhirStore

    resources = generate_patients(6, seed=5)
    records = tmp_path / "test_tasks.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in _medagentbench_records(
        [r for r in resources if r["resourceType"] == "Patient"])))
    _, offline = import_files("medagentbench", [records], tmp_path / "a")
    assert offline.by_reason == {"needs_data": 10} and "--fhir-url" in next(iter(offline.needs))
    with FhirServer(FhirStore(BaseData(resources)), port=0) as server:  # stands in for the benchmark's server
        _, report = import_files("medagentbench", [records], tmp_path / "b", fhir_url=server.url)
    assert report.kept == 9 and report.notes["matches_original"] == 3
    assert {r.line: r.reason for r in report.rejected} == {10: "patient_not_found"}
    snapshot = json.loads((tmp_path / "b" / "medagentbench" / "fhir" / "resources.json").read_text())
    assert {r["id"] for r in snapshot if r["resourceType"] == "Patient"} <= {r["id"] for r in resources}
    items = _load(tmp_path / "b", "medagentbench")
    assert items["medagentbench/test/task3_0"].metadata["slots"]["reading"] == "118/77 mmHg"
    assert check_import("medagentbench", tmp_path / "b")["test"] == {"instances": 9, "oracle": 1.0, "empty": 0.0,
                                                                      "shotgun": 0.0}


def test_ehrcon_needs_its_files_and_drops_duplicate_and_conflicting_pairs(tmp_path):
    records = [{"Hospital admission": "100001.0", "Medical entity": "INR", "Number of inconsistencies": 0,
                "Has error": False, "split": "test"},
               {"Hospital admission": "100001.0", "Medical entity": "inr", "Number of inconsistencies": 0,
                "Has error": False, "split": "test"},
               {"Hospital admission": "100002.0", "Medical entity": "heparin", "Number of inconsistencies": 1,
                "Has error": True, "split": "test"},
               {"Hospital admission": "100002.0", "Medical entity": "Heparin", "Number of inconsistencies": 0,
                "Has error": False, "split": "test"},
               {"Hospital admission": "100003.0", "Medical entity": "glucose", "Number of inconsistencies": 2,
                "Has error": True, "split": "train"},
               {"Hospital admission": "100009.0", "Medical entity": "glucose", "Number of inconsistencies": 0,
                "Has error": False, "split": "test"},
               {"Hospital admission": "100003.0", "Medical entity": "potassium"}]
    path = tmp_path / "test_tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    data = tmp_path / "ehrcon_data"
    data.mkdir()
    con = sqlite3.connect(data / "EHRCon_combined.db")
    con.execute("create table labevents (hadm_id integer, itemid integer, valuenum real)")
    con.commit()
    con.close()
    with open(data / "clinical_notes.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["ROW_ID", "SUBJECT_ID", "HADM_ID", "TEXT"])
        writer.writerows([[1, 7, 100001, "inr 1.1"], [2, 8, 100002, "heparin 5000 units"], [3, 9, 100003, "glu"]])
    _, offline = import_files("ehrcon", [path], tmp_path / "a")
    assert offline.by_reason == {"needs_data": 6, "missing_field": 1}
    assert "EHRCon_combined.db" in next(iter(offline.needs))
    _, report = import_files("ehrcon", [path], tmp_path / "b", data=data)
    assert {r.line: r.reason for r in report.rejected} == {
        2: "duplicate", 3: "conflicting_labels", 4: "conflicting_labels", 6: "admission_not_found", 7: "missing_field"}
    items = _load(tmp_path / "b", "ehrcon")
    assert sorted(i.answer for i in items.values()) == [False, True]
    assert check_import("ehrcon", tmp_path / "b")["test"]["oracle"] == 1.0


def _ehrshot_files(data: Path, task: str, rng: np.random.Generator) -> None:
    direction = rng.normal(size=8)
    for split, n in (("train", 160), ("val", 40), ("test", 80)):
        x = rng.normal(size=(n, 8)).astype(np.float32)
        pids = np.arange(n) + {"train": 1000, "val": 5000, "test": 9000}[split]
        times = pd.Timestamp("2021-01-01") + pd.to_timedelta(rng.integers(0, 300, n), unit="D")
        pd.to_pickle({"data_matrix": x, "patient_ids": pids, "labeling_time": list(times)}, data / f"clmbr_{split}.pkl")
        y = (x @ direction + 0.3 * rng.normal(size=n)) > 0
        labels = pd.DataFrame({"patient_id": pids, "value": np.where(y, "True", "False"), "label_type": "boolean",
                               "prediction_time": [t.isoformat() for t in times]})
        (data / task).mkdir(exist_ok=True)
        labels.to_csv(data / task / f"{split}_labels.csv", index=False)


def test_ehrshot_converts_the_users_files_into_the_family_layout(tmp_path):
    records = tmp_path / "task.jsonl"
    records.write_text(json.dumps({"task_id": 0, "task_name": "guo_los", "task_description": "los >= 7 days"}) + "\n"
                       + json.dumps({"task_id": 99, "task_name": "nope", "task_description": "?"}) + "\n")
    _, offline = import_files("ehrshot", [records], tmp_path / "a")
    assert offline.by_reason == {"needs_data": 1, "unknown_task": 1} and "clmbr_train.pkl" in next(iter(offline.needs))
    data = tmp_path / "ehrshot_data"
    data.mkdir()
    _ehrshot_files(data, "guo_los", np.random.default_rng(0))
    _, report = import_files("ehrshot", [records], tmp_path / "b", data=data, allow_pickle=True)
    assert report.kept == 1
    (inst,) = _load(tmp_path / "b", "ehrshot").values()
    assert "8-dim" in inst.context and inst.metadata["reference_metric"] > 0.8
    family_dir = tmp_path / "b" / "ehrshot"
    assert len(pd.read_csv(family_dir / "data" / "imported" / "guo_los" / "train_labels.csv")) == 200  # train + val
    assert (family_dir / "hidden" / "imported" / "guo_los" / "test_labels.csv").is_file()
    assert not (family_dir / "data" / "imported" / "guo_los" / "test_labels.csv").exists()  # never mounted
    assert check_import("ehrshot", tmp_path / "b", backend=SANDBOX)["test"] == {
        "instances": 1, "oracle": 1.0, "empty": 0.0, "shotgun": 0.0}


def _extract_files(folder: Path, rng: np.random.Generator) -> None:
    folder.mkdir(parents=True)
    for split, n in (("train", 120), ("val", 30), ("test", 60)):
        subjects = np.arange(n) + {"train": 1, "val": 500, "test": 900}[split]
        severity = rng.normal(size=n)
        rows = pd.MultiIndex.from_product([subjects, range(24)], names=["subject_id", "hours_in"])
        cols = pd.MultiIndex.from_product([["heart rate", "lactate"], ["count", "mean", "std"]],
                                          names=["LEVEL2", "Aggregation Function"])
        values = rng.normal(size=(len(rows), 6)) + np.repeat(severity, 24)[:, None] * np.array([0, 2, 0, 0, 1, 0])
        lab = pd.DataFrame(values, index=rows, columns=cols).reset_index()
        lab.insert(1, "hadm_id", lab["subject_id"] + 10_000)
        lab.insert(2, "icustay_id", lab["subject_id"] + 20_000)
        pd.to_pickle(lab.set_index(["subject_id", "hadm_id", "icustay_id", "hours_in"]), folder / f"X_lab_{split}.pkl")
        static = pd.DataFrame({"subject_id": subjects, "gender_F": rng.integers(0, 2, n), "age_1": 0, "age_2": 1})
        pd.to_pickle(static.set_index("subject_id"), folder / f"X_static_{split}.pkl")
        pd.DataFrame({"subject_id": subjects, "hadm_id": subjects + 10_000, "mort_icu": severity > 0.5}).to_csv(
            folder / f"{split}_mort_icu_labels.csv", index=False)


def test_mimic_extract_converts_stay_tasks_and_names_window_files(tmp_path):
    records = tmp_path / "test_tasks.jsonl"
    records.write_text("".join(json.dumps({"task_name": t, "task_description": "d", "task_category": "classification",
                                           "feature_label_directory": d, "model": "random forest"}) + "\n"
                               for t, d in (("mort_icu", "./mortality_los"), ("vasopressor", "./vasopressor_ventilation"),
                                            ("mort_icu", "./mortality_los"))))
    data = tmp_path / "extract"
    _extract_files(data / "mortality_los", np.random.default_rng(1))
    _, report = import_files("mimic_extract", [records], tmp_path / "b", data=data, allow_pickle=True)
    assert report.kept == 1 and {r.line: r.reason for r in report.rejected} == {2: "needs_data", 3: "duplicate"}
    assert "X_windows_train.csv" in report.rejected[0].detail
    family_dir = tmp_path / "b" / "mimic_extract"
    lab = pd.read_csv(family_dir / "imported" / "stay" / "mortality_los" / "X_lab_train.csv")
    assert {"heart rate__mean", "subject_id", "hours_in"} <= set(lab.columns) and lab["subject_id"].nunique() == 150
    assert (family_dir / "hidden" / "imported" / "test_labels.csv").is_file()
    assert check_import("mimic_extract", tmp_path / "b", backend=SANDBOX)["test"]["oracle"] == 1.0


class _Payload:
    """A pickle that runs code when loaded: it creates a folder (a stand-in for anything run as root)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.mkdir, (str(self.marker),)


@pytest.mark.parametrize("family", ["ehrshot", "mimic_extract"])
def test_import_never_unpickles_the_data_folder_without_the_opt_in(family, tmp_path, capsys):
    """Attack (issue 31): a crafted clmbr_train.pkl (X_lab_train.pkl) in --data ran code as root at import."""
    import pickle

    from medagentgym.cli import import_tasks

    records, data, marker = tmp_path / "task.jsonl", tmp_path / "data", tmp_path / "pwned"
    data.mkdir()
    if family == "ehrshot":
        records.write_text(json.dumps({"task_id": 0, "task_name": "guo_los", "task_description": "los"}) + "\n")
        _ehrshot_files(data, "guo_los", np.random.default_rng(0))
        crafted = data / "clmbr_train.pkl"
    else:
        records.write_text(json.dumps({"task_name": "mort_icu", "task_description": "d",
                                       "feature_label_directory": "./mortality_los"}) + "\n")
        _extract_files(data / "mortality_los", np.random.default_rng(1))
        crafted = data / "mortality_los" / "X_lab_train.pkl"
    crafted.write_bytes(pickle.dumps(_Payload(marker)))
    argv = ["--family", family, "--from", str(records), "--data", str(data), "--out", str(tmp_path / "out")]
    assert import_tasks.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--allow-pickle" in err and "pickle" in err
    assert not marker.exists(), "the import unpickled an untrusted file"
    assert not (tmp_path / "out" / family).exists()
    with pytest.raises(TaskError, match="allow-pickle"):
        import_files(family, [records], tmp_path / "api", data=data)
    assert not marker.exists()
    import_tasks.main([*argv, "--allow-pickle", "--force"])  # the opt-in: the file is trusted, and it runs
    assert marker.exists()


def _page_command(family: str) -> list[str]:
    """The import command of docs/families/<family>.md (made by medagentgym/cli/make_family_pages.py), as argv."""
    import shlex

    page = (Path(__file__).resolve().parents[2] / "docs" / "families" / f"{family}.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in page.splitlines() if ln.startswith(".venv/bin/medagentgym import ")]
    return shlex.split(line)


@pytest.mark.parametrize("family", ["ehrshot", "mimic_extract", "ehrcon", "biodsbench", "medagentbench"])
def test_the_family_page_command_passes_every_flag_its_page_says_the_import_needs(family):
    from medagentgym.cli.make_family_pages import IMPORT_INPUTS

    command = _page_command(family)
    needed = set(re.findall(r"--[a-z][a-z-]+", IMPORT_INPUTS[family][1]))
    assert needed and needed <= set(command), (family, needed, command)


@pytest.mark.parametrize("family", ["ehrshot", "mimic_extract"])
def test_the_family_page_import_command_runs_verbatim_on_the_users_files(family, tmp_path, monkeypatch, capsys):
    """docs/families/{ehrshot,mimic_extract}.md: the command, FILE and DIR standing for the user's files, imports
    (it lacked --data and --allow-pickle, and so imported nothing)."""
    from medagentgym.cli import import_tasks

    data = tmp_path / "data"
    data.mkdir()
    if family == "ehrshot":
        record = {"task_id": 0, "task_name": "guo_los", "task_description": "los >= 7 days"}
        _ehrshot_files(data, "guo_los", np.random.default_rng(0))
    else:
        record = {"task_name": "mort_icu", "task_description": "d", "feature_label_directory": "./mortality_los"}
        _extract_files(data / "mortality_los", np.random.default_rng(1))
    (tmp_path / "FILE").write_text(json.dumps(record) + "\n")
    command = [str(data) if arg == "DIR" else arg for arg in _page_command(family)]
    assert command[:2] == [".venv/bin/medagentgym", "import"] and "FILE" in command
    monkeypatch.chdir(tmp_path)
    sandbox = ["--sandbox", "local"] if SANDBOX == "local" else []
    assert import_tasks.main(command[2:] + sandbox) == 0, capsys.readouterr().err
    assert len(_load(tmp_path / "artifacts" / "imported", family)) == 1
