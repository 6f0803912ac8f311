"""Error grounding on real exceptions: in-process first, then end to end through the sandbox backends."""

from __future__ import annotations

import json
import shutil
import sqlite3
import types
import warnings

import pytest

from medagentgym.sandbox.grounding import MAX_MESSAGE_CHARS, collect_context, ground

FRAME = "import pandas as pd\ndf = pd.DataFrame({'age': [70, 81], 'sex': ['F', 'M']})\n"


def _run_in_process(code: str, namespace: dict | None = None, conn: sqlite3.Connection | None = None):
    """Exec ``code`` here and shape the failure the way the worker does (a real exception object)."""
    ns = {} if namespace is None else namespace
    try:
        exec(compile(code, "<cell>", "exec"), ns)  # noqa: S102 - real exceptions from real code
    except Exception as exc:  # noqa: BLE001 - the point is to catch whatever user code raises
        lineno = exc.lineno if isinstance(exc, SyntaxError) else None
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<cell>":
                lineno = tb.tb_lineno
            tb = tb.tb_next
        context = collect_context(exc, ns, conn)
        exception = {"type": type(exc).__name__, "message": str(exc), "lineno": lineno,
                     "offset": getattr(exc, "offset", None), "context": context}
        kind = "syntax_error" if isinstance(exc, SyntaxError) else "python_error"
        return context, types.SimpleNamespace(error_kind=kind, exception=exception, source=code, stderr="",
                                              truncated=False, exit_code=1)
    raise AssertionError("the snippet was expected to fail")


def test_name_error_lists_defined_names_and_suggests():
    ctx, result = _run_in_process("import math\ntotl = 3\ndef helper():\n    pass\nprint(total)")
    assert ctx["missing"] == "total"
    assert set(ctx["defined"]) == {"math", "totl", "helper"}
    assert ctx["suggestions"] == ["totl"]
    message = ground(result)
    assert "line 5" in message and "print(total)" in message and "'totl'" in message


def test_name_error_for_a_missing_import_alias():
    ctx, result = _run_in_process("x = pd.DataFrame()")
    assert ctx["import_hint"] == "import pandas as pd"
    assert "import pandas as pd" in ground(result)


def test_key_error_on_dataframe_finds_the_frame_in_the_traceback():
    # Two frames in the namespace: only the traceback tells which one failed.
    ns = {}
    ctx, result = _run_in_process(FRAME + "other = pd.DataFrame({'x': [1]})\nm = df['agee'].mean()", ns)
    assert ctx["columns"] == ["age", "sex"]
    assert ctx["suggestions"] == ["age"]
    message = ground(result)
    assert "KeyError" in message and "line 4" in message and "df['agee']" in message and "'age'" in message


def test_key_error_in_groupby_and_on_a_plain_dict():
    ctx, _ = _run_in_process(FRAME + "df.groupby('Sexx')['age'].mean()")
    assert ctx["suggestions"] == ["sex"]
    ctx, _ = _run_in_process("labels = {'alpha': 1}\nlabels['alpah']")
    assert ctx["suggestions"] == ["alpha"]


def test_attribute_error_on_dataframe_and_list():
    ctx, _ = _run_in_process(FRAME + "df.agee")
    assert ctx["suggestions"][0] == "age" and ctx["columns"] == ["age", "sex"]
    ctx, result = _run_in_process("x = []\nx.apend(1)")
    assert ctx["suggestions"] == ["append"]
    assert "'append'" in ground(result)


def test_module_not_found_suggests_the_import_name():
    ctx, result = _run_in_process("import scikit_learn")
    assert ctx["suggestions"][0] == "sklearn" and "pandas" in ctx["available"]
    assert "cannot be installed" in ground(result)


def test_syntax_error_quotes_line_and_column():
    _, result = _run_in_process("x = 1\nif x = 3:\n    pass")
    message = ground(result)
    assert message.startswith("Syntax error (SyntaxError) at line 2, column")
    assert "  2 | if x = 3:" in message and "^" in message and "<cell>" not in message


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE patients (subject_id INTEGER, gender TEXT, dob TEXT)")
    conn.execute("CREATE TABLE admissions (hadm_id INTEGER, subject_id INTEGER)")
    return conn


def test_sql_no_such_column_describes_only_the_queried_tables():
    conn = _db()
    query = "SELECT gendr FROM patients WHERE subject_id = 1"
    with pytest.raises(sqlite3.OperationalError) as info:
        conn.execute(query)
    ctx = collect_context(info.value, None, conn, query=query)
    assert ctx == {"missing": "gendr", "tables": {"patients": ["subject_id", "gender", "dob"]},
                   "suggestions": ["gender"]}
    result = types.SimpleNamespace(error_kind="sql_error", source=query, stderr="", truncated=False,
                                   exception={"type": "OperationalError", "message": str(info.value),
                                              "context": ctx})
    message = ground(result)
    assert message.startswith("SQL error: no such column: gendr")
    assert "patients(subject_id, gender, dob)" in message and "admissions" not in message


def test_sql_no_such_table_lists_tables_and_finds_connection_in_namespace():
    ns = {"db": _db()}
    ctx, result = _run_in_process("db.execute('SELECT * FROM patient')", ns)
    assert ctx["tables"] == ["admissions", "patients"] and ctx["suggestions"] == ["patients"]
    assert "'patients'" in ground(result)


def test_pandas_read_sql_error_parses_the_query_from_the_message():
    ns = {"conn": _db()}
    ctx, _ = _run_in_process("import pandas as pd\npd.read_sql_query('SELECT hadm FROM admissions a', conn)", ns)
    assert ctx["tables"] == {"admissions": ["hadm_id", "subject_id"]} and ctx["suggestions"] == ["hadm_id"]


def test_context_is_bounded_and_json_able():
    ns = {f"variable_number_{i}_" + "x" * 200: i for i in range(500)}
    ctx, result = _run_in_process("print(undefined_thing)", ns)
    encoded = json.dumps(ctx)
    assert len(ctx["defined"]) <= 31 and len(encoded) < 4000
    assert all(len(name) <= 80 for name in ctx["defined"])
    assert len(ground(result)) <= MAX_MESSAGE_CHARS


def test_collect_context_never_raises():
    class Hostile(dict):
        def items(self):
            raise RuntimeError("boom")

        def __iter__(self):
            raise RuntimeError("boom")

    ctx = collect_context(NameError("name 'x' is not defined"), Hostile(a=1))
    assert ctx == {"context_error": "RuntimeError"}


def _result(**fields):
    base = {"error_kind": "ok", "source": "", "stdout": "", "stderr": "", "exit_code": 0, "signal": None,
            "timed_out": False, "truncated": False, "stdout_bytes": 0, "stderr_bytes": 0, "duration_s": 0.01,
            "exception": None}
    base.update(fields)
    return types.SimpleNamespace(**base)


def test_ground_non_python_outcomes():
    assert ground(_result()) == ""
    timeout = ground(_result(error_kind="timeout", timed_out=True, duration_s=30.2), wall_limit_s=30)
    assert "exceeded the 30 s wall-clock limit" in timeout
    assert ground(_result(error_kind="memory", signal=9)).startswith("Memory:")
    assert "CPU-time limit" in ground(_result(error_kind="killed", signal=24))
    shell = ground(_result(error_kind="shell_error", exit_code=127, source="frobnicate --x",
                           stderr="sh: 1: frobnicate: not found\n"))
    assert "status 127" in shell and "frobnicate: not found" in shell and "command not found" in shell
    truncated = ground(_result(truncated=True, stdout_bytes=5_000_000))
    assert "truncated" in truncated and "5,000,000" in truncated


def test_ground_parses_a_traceback_when_no_structured_exception():
    stderr = ('Traceback (most recent call last):\n  File "<cell>", line 2, in <module>\n'
              "ZeroDivisionError: division by zero\n")
    message = ground(_result(error_kind="python_error", exit_code=1, stderr=stderr, source="a = 1\nb = a / 0"))
    assert "(ZeroDivisionError) at line 2" in message and "b = a / 0" in message
    short = "Traceback (most recent call last):\n  line 1, in <module>\n    1 / 0\nZeroDivisionError: division by zero\n"
    message = ground(_result(error_kind="python_error", exit_code=1, stderr=short, source="1 / 0"))
    assert "(ZeroDivisionError) at line 1" in message and "  1 | 1 / 0" in message


def test_ground_is_bounded():
    huge = "x" * 50_000
    message = ground(_result(error_kind="sql_error", source=huge,
                             exception={"type": "OperationalError", "message": huge}))
    assert len(message) <= MAX_MESSAGE_CHARS


# -- end to end: the worker calls collect_context, the host grounds the ExecResult -----------------------

def _backends() -> list:
    params = [pytest.param("local", id="local")]
    params.append(pytest.param("bwrap", id="bwrap", marks=pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")))
    return params


@pytest.fixture(scope="module", params=_backends())
def sandbox_session(request, tmp_path_factory):
    from medagentgym.sandbox import make_pool

    data = tmp_path_factory.mktemp("grounding-data")
    conn = sqlite3.connect(data / "clinic.db")
    conn.executescript("CREATE TABLE patients (subject_id INTEGER, gender TEXT, age INTEGER);"
                       "CREATE TABLE admissions (hadm_id INTEGER, subject_id INTEGER);"
                       "INSERT INTO patients VALUES (1, 'F', 70);")
    conn.commit()
    conn.close()
    data.chmod(0o755)
    (data / "clinic.db").chmod(0o644)
    with warnings.catch_warnings():  # the local backend warns that it is unisolated
        warnings.simplefilter("ignore", RuntimeWarning)
        pool = make_pool(request.param, workers=1, mounts={"clinic": data},
                         allow_unisolated=request.param == "local")
    try:
        with pool.session() as session:
            yield session
    finally:
        pool.close()


def test_e2e_key_error_on_a_dataframe(sandbox_session):
    assert sandbox_session.run_python(FRAME).ok
    result = sandbox_session.run_python("mean_age = df['agee'].mean()\nprint(mean_age)")
    assert result.error_kind.value == "python_error"
    message = ground(result)
    assert message.splitlines()[:3] == ["Python error (KeyError) at line 1:",
                                        "  1 | mean_age = df['agee'].mean()", "KeyError: 'agee'"]
    assert "did you mean 'age'?" in message and "DataFrame columns: age, sex" in message


def test_e2e_name_error_lists_the_session_names(sandbox_session):
    sandbox_session.run_python("cohort_size = 12")
    message = ground(sandbox_session.run_python("print(cohort_sise)"))
    assert "(NameError) at line 1" in message and "did you mean 'cohort_size'?" in message


def test_e2e_syntax_error(sandbox_session):
    message = ground(sandbox_session.run_python("x = 1\nfor i in range(3)\n    x += i"))
    assert message.startswith("Syntax error (SyntaxError) at line 2")
    assert "  2 | for i in range(3)" in message and "expected ':'" in message


def test_e2e_sql_no_such_column(sandbox_session):
    result = sandbox_session.run_sql("SELECT gendr FROM patients", database="clinic/clinic.db")
    assert result.error_kind.value == "sql_error"
    message = ground(result)
    assert message.startswith("SQL error: no such column: gendr")
    assert "query: SELECT gendr FROM patients" in message and "did you mean 'gender'?" in message


def test_e2e_sql_no_such_table(sandbox_session):
    message = ground(sandbox_session.run_sql("SELECT * FROM admission", database="clinic/clinic.db"))
    assert "no such table: admission" in message and "did you mean 'admissions'?" in message


def test_e2e_shell_and_timeout(sandbox_session):
    from medagentgym.sandbox import Limits

    shell = ground(sandbox_session.run_shell("ls /definitely/missing"))
    assert "exited with status 2" in shell and "/definitely/missing" in shell
    slow = sandbox_session.run_python("while True:\n    pass", limits=Limits(wall_s=0.5, cpu_s=5))
    assert slow.timed_out
    assert "exceeded the 0.5 s wall-clock limit" in ground(slow, wall_limit_s=0.5)


def test_e2e_truncated_output_is_noted(sandbox_session):
    from medagentgym.sandbox import Limits

    result = sandbox_session.run_python("print('x' * 100_000)", limits=Limits(output_bytes=1024))
    assert result.truncated and "truncated (100,001 bytes produced)" in ground(result)


def test_e2e_exit_status_memory_and_missing_database(sandbox_session):
    from medagentgym.sandbox import Limits

    exited = ground(sandbox_session.run_python("import sys\nsys.exit(3)"))
    assert exited.startswith("Python code exited with status 3")
    memory = sandbox_session.run_python("blob = bytearray(900 * 1024 * 1024)", limits=Limits(memory_mb=300))
    assert memory.error_kind.value == "memory" and ground(memory).startswith("Memory:")
    missing = ground(sandbox_session.run_sql("SELECT 1", database="nowhere.db"))
    assert "no database file" in missing and "Hint: name the database as /data/<mount>" in missing


@pytest.mark.parametrize("exception", [
    {"type": "NameError", "message": "x", "context": {"suggestions": 7, "tables": {"t": 5}, "frames": [1]}},
    {"type": "KeyError", "message": "x", "context": {"columns": {"a": 1}, "defined": None, "note": [[1]]}},
    {"type": ["KeyError"], "message": {"m": 1}, "lineno": "3", "offset": [2], "text": 5, "context": "x"},
    {"type": "SyntaxError", "message": None, "lineno": 10**30, "offset": -5, "context": {"tables": [[[]]]}},
])
@pytest.mark.parametrize("kind", ["python_error", "syntax_error", "sql_error", "killed", "weird"])
def test_ground_never_raises_on_what_a_runner_may_send(exception, kind):
    """A runner can send any JSON as its exception (its code can rewrite the runner's modules): ground is total."""
    message = ground(_result(error_kind=kind, exception=exception, signal=[9], exit_code="1", source=b"x"))
    assert isinstance(message, str) and len(message) <= MAX_MESSAGE_CHARS
