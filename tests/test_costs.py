"""The suite's cost order and CPU records (tests/_costs.py, issue #29): the costliest modules are dispatched first
under ``--dist loadscope``, unseen modules get a size-based cost, and the records add up per worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import _costs

HERE = Path(__file__).resolve().parent


def test_scopes_are_ordered_by_cost_and_stay_whole():
    ids = ["a.py::t1", "b.py::t1", "b.py::t2", "c.py::K::t1", "c.py::t9", "a.py::t2"]
    order = [ids[i] for i in _costs.order_scopes(ids, {"a.py": 1.0, "b.py": 30.0, "c.py::K": 5.0, "c.py": 0.5})]
    assert order == ["b.py::t1", "b.py::t2", "c.py::K::t1", "a.py::t1", "a.py::t2", "c.py::t9"]


def test_an_unseen_scope_is_costed_by_its_size_and_no_table_keeps_the_order():
    ids = [f"new.py::t{i}" for i in range(10)] + ["small.py::t", "big.py::t1", "big.py::t2"]
    # median per test: small 1.0/1, big 200/2 -> 50.5; new.py: 10 tests -> 505 > big's 200
    order = [ids[i] for i in _costs.order_scopes(ids, {"small.py": 1.0, "big.py": 200.0})]
    assert order[:10] == ids[:10] and order[10:] == ["big.py::t1", "big.py::t2", "small.py::t"]
    assert _costs.order_scopes(ids, {}) == list(range(len(ids)))


def test_a_missing_or_bad_table_is_empty(tmp_path):
    assert _costs.load_table(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert _costs.load_table(tmp_path / "bad.json") == {}
    assert isinstance(_costs.load_table(), dict)  # the checked-in table reads


def test_xdist_dispatches_the_costliest_module_first_and_records_each_tests_cpu(tmp_path):
    """A real ``-n 2 --dist loadscope`` run: xdist alone would start the module with most tests (many.py) first;
    with the table, the two costly one-test modules start before it. Each test's record is written."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        "import sys\nsys.path.insert(0, %r)\nimport _costs\n_costs.TABLE = _costs.Path(%r)\n"
        "pytest_plugins = ('_costs',)\n" % (str(HERE), str(tmp_path / "costs.json")))
    (suite / "test_many.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(6)))
    (suite / "test_long_a.py").write_text("def test_a():\n    sum(range(10**6))\n")
    (suite / "test_long_b.py").write_text("def test_b():\n    sum(range(10**6))\n")
    (suite / "test_broken.py").write_text("def test_fails():\n    assert False\n")
    (tmp_path / "costs.json").write_text(json.dumps({"scopes": {
        "test_long_a.py": 90.0, "test_long_b.py": 80.0, "test_many.py": 1.0, "test_broken.py": 0.5}}))
    records = tmp_path / "records"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                          "--dist", "loadscope", "-o", "addopts=", "."], cwd=suite,
                         env={**os.environ, _costs.ENV: str(records)}, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1 and "1 failed, 8 passed" in run.stdout, run.stdout + run.stderr
    rows = [json.loads(line) for f in records.glob("gw*.jsonl") for line in f.read_text().splitlines()]
    tests = [r for r in rows if "nodeid" in r]
    assert len(tests) == 9 and all(r["cpu"] >= 0 and r["end"] >= r["start"] for r in tests)
    assert {r["nodeid"] for r in tests if r["outcome"] != "passed"} == {"test_broken.py::test_fails"}
    assert sum(r.get("event") == "collected" for r in rows) == 2 and sum(r.get("event") == "finished" for r in rows) == 2
    first = {scope: min(r["start"] for r in tests if r["scope"] == scope) for scope in {r["scope"] for r in tests}}
    many = first["test_many.py"]
    assert first["test_long_a.py"] < many and first["test_long_b.py"] < many, first
    report, scopes = _costs.summarize(records)
    assert "2 worker(s)" in report and "failed or errored: 1" in report
    assert set(scopes) == {"test_many.py", "test_long_a.py", "test_long_b.py", "test_broken.py"}


def test_a_partial_run_updates_the_table_and_a_deleted_module_leaves_it(tmp_path):
    (tmp_path / "tests").mkdir()
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / "tests" / name).write_text("")
    table = tmp_path / "tests" / "costs.json"
    table.write_text(json.dumps({"scopes": {"tests/test_a.py": 5.0, "tests/test_b.py::K": 7.0,
                                            "tests/test_gone.py": 9.0}}))
    merged = _costs.write_table({"tests/test_a.py": 6.5}, table)
    assert merged == {"tests/test_a.py": 6.5, "tests/test_b.py::K": 7.0} == _costs.load_table(table)
