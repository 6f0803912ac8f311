"""The sandbox API: results, limits, SQL, shell, mounts, sessions and backend selection."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import time

import pytest

from medagentgym.sandbox import (
    ErrorKind,
    ExecResult,
    Limits,
    SandboxUnavailable,
    SessionClosed,
    make_pool,
)
from medagentgym.sandbox._clock import hard_wall_s


def test_pool_reports_its_layers(pool):
    assert pool.backend == "bwrap"
    for layer in ("bwrap", "pidns", "netns", "ro-root", "rlimits", "env-scrub", "seccomp"):
        assert layer in pool.layers


def test_data_root_and_scientific_stack(session):
    res = session.run_python(
        "import scipy.stats, sklearn.linear_model, statsmodels.api, lifelines, Bio.Seq\n"
        "from joblib import Parallel, delayed\n"
        "print(open('/data/demo/readme.txt').read().strip(), Parallel(n_jobs=1)(delayed(abs)(-1) for _ in 'a'))",
        limits=Limits(wall_s=120))
    assert res.ok and res.stdout == "demo data [1]\n", res.stderr
    assert "Permission denied" not in res.stderr


def test_python_result_and_roundtrip(session):
    res = session.run_python("import pandas as pd\nprint(pd.DataFrame({'a': [1, 2]}).a.sum())")
    assert res.ok and res.stdout == "3\n" and res.exit_code == 0 and res.lang == "python"
    back = ExecResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back == res


def test_python_exception_reports_user_line_and_context(session):
    res = session.run_python("x = 1\ntotl = 2\nprint(total)\n")
    assert res.error_kind == ErrorKind.PYTHON and res.exit_code == 1
    assert res.exception["type"] == "NameError" and res.exception["lineno"] == 3
    assert "print(total)" in res.exception["traceback"] and "NameError" in res.stderr
    assert "_runner.py" not in res.stderr  # only the user's frames are shown
    assert isinstance(res.exception["context"], dict)


def test_exception_with_broken_str_is_reported(session):
    res = session.run_python("class E(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise E()")
    assert res.error_kind == ErrorKind.PYTHON and res.exception["type"] == "E" and res.exception["lineno"] == 4
    assert session.run_python("print('alive')").stdout == "alive\n"


def test_syntax_error(session):
    res = session.run_python("def f(:\n  pass")
    assert res.error_kind == ErrorKind.SYNTAX and res.exception["lineno"] == 1


def test_persistent_namespace_and_fresh_one(pool):
    with pool.session(persistent=True) as s:
        s.run_python("import numpy as np\nv = np.arange(4)")
        assert s.run_python("print(int(v.sum()))").stdout == "6\n"
    with pool.session(persistent=False) as s:
        s.run_python("v = 1")
        res = s.run_python("print(v)")
        assert res.exception["type"] == "NameError"


def test_truncation_keeps_head_and_tail(session):
    res = session.run_python("print('HEAD'); print('x' * 300000); print('TAIL')",
                             limits=Limits(output_bytes=1000))
    assert res.truncated and res.stdout_bytes == 4 + 1 + 300001 + 5
    assert res.stdout.startswith("HEAD") and res.stdout.rstrip().endswith("TAIL")
    assert "bytes omitted" in res.stdout and len(res.stdout) < 1200


def test_wall_limit(session):
    res = session.run_python("import time\nprint('started', flush=True)\ntime.sleep(30)",
                             limits=Limits(wall_s=1.0))
    # stopped at its 1 s limit, long before the 30 s sleep ends; the bound is the jail's hard cap, not a speed check
    # (issue #29: a sleeper is never starved, but a host at load 60 may be late to kill and report it)
    assert res.timed_out and res.error_kind == ErrorKind.TIMEOUT and 1.0 <= res.duration_s < hard_wall_s(1.0)
    assert res.stdout == "started\n" and "restarted" in res.stderr
    assert session.run_python("print(2)").stdout == "2\n"


def test_cpu_limit(session):
    res = session.run_python("while True:\n    pass", limits=Limits(cpu_s=1.0, wall_s=60.0))  # a loaded box shares the CPU
    assert res.timed_out and res.signal == signal.SIGXCPU and res.error_kind == ErrorKind.TIMEOUT


def test_memory_limit(session):
    res = session.run_python("x = bytearray(3 * 1024**3)", limits=Limits(memory_mb=1024))
    assert res.error_kind == ErrorKind.MEMORY and res.exception["type"] == "MemoryError"
    assert session.run_python("print('alive')").ok  # the interpreter survives a MemoryError


def test_process_limit(session):
    code = ("import os\nkids = 0\ntry:\n    for _ in range(100):\n        if os.fork() == 0:\n"
            "            import time; time.sleep(5); os._exit(0)\n        kids += 1\n"
            "except OSError as e:\n    print('stopped at', kids, e.errno)")
    res = session.run_python(code, limits=Limits(processes=8, wall_s=5))
    assert res.stdout.startswith("stopped at") and int(res.stdout.split()[2]) < 8


def test_file_size_limit(session):
    res = session.run_python("open('big', 'wb').write(b'x' * (3 * 1024**2))", limits=Limits(file_size_mb=1))
    assert not res.ok and res.error_kind in (ErrorKind.PYTHON, ErrorKind.KILLED)
    assert (session.workspace / "big").stat().st_size <= 1024**2


def test_sql_table_and_read_only(pool, tmp_path):
    db_dir = tmp_path / "ehr"
    db_dir.mkdir()
    db_dir.chmod(0o755)
    with sqlite3.connect(db_dir / "ehr.db") as conn:
        conn.execute("CREATE TABLE patients (subject_id INTEGER, gender TEXT)")
        conn.executemany("INSERT INTO patients VALUES (?, ?)", [(i, "F" if i % 2 else "M") for i in range(250)])
    (db_dir / "ehr.db").chmod(0o644)
    with pool.session(mounts={"ehr": db_dir}) as s:
        res = s.run_sql("SELECT subject_id, gender FROM patients ORDER BY subject_id LIMIT 3", "/data/ehr/ehr.db")
        lines = res.stdout.splitlines()
        assert res.ok and lines[0].split() == ["subject_id", "|", "gender"] and "(3 rows)" in res.stdout
        big = s.run_sql("SELECT * FROM patients", "ehr", max_rows=10)
        assert "showing the first 10 rows" in big.stdout and len(big.stdout.splitlines()) == 13
        for stmt in ("DELETE FROM patients", "CREATE TABLE t (x)", "INSERT INTO patients VALUES (1, 'F')"):
            bad = s.run_sql(stmt, "ehr/ehr.db")
            assert bad.error_kind == ErrorKind.SQL and bad.exception["type"] == "OperationalError"
        err = s.run_sql("SELECT nope FROM patients", "ehr")
        assert err.error_kind == ErrorKind.SQL and "no such column" in err.exception["message"]
        missing = s.run_sql("SELECT 1", "/data/absent.db")
        assert missing.error_kind == ErrorKind.SQL
    with sqlite3.connect(db_dir / "ehr.db") as conn:
        assert conn.execute("SELECT count(*) FROM patients").fetchone()[0] == 250


def test_shell_exit_codes_and_workspace(session):
    ok = session.run_shell("echo hi > f.txt && cat f.txt && pwd")
    assert ok.ok and ok.stdout == "hi\n/workspace\n"
    assert (session.workspace / "f.txt").read_text() == "hi\n"
    bad = session.run_shell("echo oops >&2; exit 3")
    assert bad.exit_code == 3 and bad.error_kind == ErrorKind.SHELL and bad.stderr == "oops\n"
    assert session.run_shell("nonexistent-command-xyz").exit_code == 127


def test_mounts_are_visible_read_only(pool, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    tmp_path.chmod(0o755)
    (tmp_path / "notes.txt").chmod(0o644)
    with pool.session(mounts={"notes": tmp_path}) as s:
        assert s.run_python("print(open('/data/notes/notes.txt').read())").stdout == "hello\n"
        res = s.run_python("open('/data/notes/new.txt', 'w')")
        assert res.exception["type"] in ("OSError", "PermissionError")
    assert not (tmp_path / "new.txt").exists()


def test_closed_session_and_bad_arguments(pool):
    s = pool.session()
    s.close()
    s.close()  # idempotent
    with pytest.raises(SessionClosed):
        s.run_python("print(1)")
    with pytest.raises(ValueError, match="did you mean 'bwrap'"):
        make_pool("bwrp")
    with pytest.raises(SandboxUnavailable, match="allow_unisolated=True"):
        make_pool("local")
    with pytest.raises(ValueError, match="wall_s"):
        Limits(wall_s=0)
    with pytest.raises(ValueError, match="mount name"):
        pool.session(mounts={"../x": "/tmp"})


def test_missing_bwrap_is_refused_with_the_fix():
    from medagentgym.sandbox._jail import BwrapLauncher

    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap.*allow_unisolated=True"):
        BwrapLauncher("/nonexistent/bwrap")


def test_closed_pool_refuses_and_in_flight_session_fails_cleanly(fast_limits):
    small = make_pool("bwrap", workers=1, limits=fast_limits, workspace_mb=16)
    s = small.session()
    small.close()
    small.close()
    with pytest.raises(SessionClosed):
        small.session()
    with pytest.raises(SessionClosed):
        s.run_python("print(1)")
    s.close()


def test_local_backend_warns_and_runs(tmp_path):
    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        local = make_pool("local", workers=1, allow_unisolated=True, mounts={"d": tmp_path})
    (tmp_path / "a.txt").write_text("data")
    with local, local.session() as s:
        assert local.layers and "netns" not in local.layers
        assert s.run_python("x = 3").ok and s.run_python("print(x)").stdout == "3\n"
        read = "import os\nprint(open(os.path.join(os.environ['HOME'], '..', 'data', 'd', 'a.txt')).read())"
        assert s.run_python(read).stdout == "data\n"
        assert s.run_python("import time; time.sleep(5)", limits=Limits(wall_s=0.5)).timed_out
    # SQL names databases by their jail path (/data/<mount>/...), as episodes do; the local backend reads them
    # from its data folder.
    import sqlite3

    con = sqlite3.connect(tmp_path / "t.db")
    con.execute("CREATE TABLE t (v INTEGER)")
    con.execute("INSERT INTO t VALUES (7)")
    con.commit()
    con.close()
    with make_pool("local", workers=1, allow_unisolated=True, mounts={"d": tmp_path}) as local, \
            local.session() as s:
        res = s.run_sql("SELECT v FROM t", "/data/d/t.db")
        assert res.ok and "7" in res.stdout, res


def test_sql_and_shell_sessions_fork_from_the_light_zygote(pool):
    assert all(w.ready["light_zygote"] for w in pool._workers)
    check = "import sys\nprint('pandas' in sys.modules)"
    with pool.session() as s:  # first call shell: a light runner, without the preloaded modules
        status = s.run_shell("cat /proc/self/status").stdout  # locked down like the server's own runners
        assert "NoNewPrivs:\t1" in status
        assert ("Seccomp:\t2" in status) == ("seccomp" in pool.layers)
        assert s.run_python(check).stdout == "False\n"
        assert s.run_python("import pandas as pd\nprint(int(pd.Series([1, 2]).sum()))").stdout == "3\n"
    with pool.session() as s:  # first call Python: the preloaded runner
        assert s.run_python(check).stdout == "True\n"


def _child_pids(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(p) for p in fh.read().split()]


def test_sessions_survive_the_loss_of_the_light_zygote():
    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        local = make_pool("local", workers=1, allow_unisolated=True)
    check = "import sys\nprint('pandas' in sys.modules)"
    with local:
        (worker,) = local._workers
        zygote = worker.ready["light_zygote"]  # the local backend shares our pid namespace
        assert zygote in _child_pids(worker.ready["pid"])
        with local.session() as s:
            assert s.run_shell("true").ok and s.run_python(check).stdout == "False\n"
        os.kill(zygote, signal.SIGKILL)
        preloaded = []
        for _ in range(3):  # a light spare forked earlier may serve once; then light sessions fork from the server
            with local.session() as s:
                assert s.run_shell("echo ok").stdout == "ok\n"
                preloaded.append(s.run_python(check).stdout)
        assert preloaded[-1] == "True\n"


def test_runner_kind_follows_the_first_call():
    from medagentgym.sandbox.worker import runner_kind

    assert runner_kind("sql", "SELECT 1") == runner_kind("shell", "import sklearn") == "light"
    assert runner_kind("python", "import numpy as np\nfrom sklearn.linear_model import Ridge") == "ml"
    assert runner_kind("python", "    import statsmodels.api as sm") == "ml"
    assert runner_kind("python", "import sklearnish\nx = 'import scipy'") == "full"


def test_ml_sessions_fork_from_a_zygote_with_sklearn_loaded(pool):
    check = "import sys\nprint('statsmodels.api' in sys.modules)"
    deadline = time.monotonic() + 90
    seen = []
    while time.monotonic() < deadline:  # the ml zygote imports in the background after the first demand
        with pool.session() as s:
            assert s.run_python("import sklearn.linear_model").ok
            seen.append(s.run_python(check).stdout)
        if seen[-1] == "True\n":
            break
        time.sleep(0.5)
    assert seen[-1] == "True\n", f"no ml runner after {len(seen)} sessions"
    with pool.session() as s:  # plain Python sessions keep the lighter runner
        assert s.run_python(check).stdout == "False\n"


def test_a_worker_that_stops_reading_fails_the_request_in_time():
    from medagentgym.sandbox.errors import WorkerLost

    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        local = make_pool("local", workers=1, allow_unisolated=True)
    with local:
        (worker,) = local._workers
        os.kill(worker.ready["pid"], signal.SIGSTOP)  # wedged: reads nothing more
        started = time.monotonic()
        with pytest.raises(WorkerLost, match="did not read its request in time"):
            worker.request({"op": "ping", "pad": "x" * (1 << 20)}, timeout=1.0)  # far more than a pipe buffers
        assert time.monotonic() - started < 60  # 1 s timeout; a wedged worker would block for ever
        with local.session() as s:  # the pool replaced it
            assert s.run_shell("echo ok").stdout == "ok\n"


def test_same_bytes_under_the_same_mount_name_keep_the_worker(tmp_path, fast_limits):
    from medagentgym.sandbox.pool import same_source

    db = tmp_path / "a" / "x.db"
    db.parent.mkdir()
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (v INTEGER)")
        con.execute("INSERT INTO t VALUES (7)")
    twin, other = tmp_path / "b" / "x.db", tmp_path / "c" / "x.db"
    for path in (twin, other):
        path.parent.mkdir()
        path.write_bytes(db.read_bytes())
    other.write_bytes(other.read_bytes()[:-1] + b"\x01")  # same size, other bytes
    assert same_source(db, twin) and not same_source(db, other) and not same_source(db, tmp_path / "a")
    pool = make_pool("bwrap", workers=1, limits=fast_limits)
    with pool:
        pids = []
        read = "import hashlib; print(hashlib.sha256(open('/data/x.db', 'rb').read()).hexdigest())"
        for path in (db, twin, db, other):
            with pool.session(mounts={"x.db": path}) as s:
                assert s.run_sql("SELECT v FROM t", database="x.db").ok
                assert s.run_python(read).stdout.strip() == hashlib.sha256(path.read_bytes()).hexdigest()
                pids.append(pool._workers[0].proc.pid)
        assert pids[0] == pids[1] == pids[2], "identical files under one name restarted the worker"
