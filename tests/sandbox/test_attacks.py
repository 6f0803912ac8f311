"""Attacks on the bwrap sandbox. Each test asserts containment, then that the pool still serves."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from sandbox import ErrorKind, Limits, make_pool


@pytest.fixture()
def still_serves(leftovers):
    """``still_serves(pool)``: a trivial call on a fresh session works, no jailed process is left over."""

    def check(pool) -> None:
        with pool.session() as s:
            res = s.run_python("print(6 * 7)")
            assert res.ok and res.stdout == "42\n", res
        assert leftovers(pool.jail_uids) == []

    return check


def test_fork_bomb(pool, still_serves):
    bomb_code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    with pool.session() as bomb, pool.session() as other:
        results = []
        t = threading.Thread(target=lambda: results.append(
            bomb.run_python(bomb_code, limits=Limits(wall_s=2.0, processes=32))))
        t.start()
        time.sleep(0.5)
        # the other worker runs as another uid: the bomb cannot exhaust its process limit
        side = other.run_python("import subprocess\nprint(subprocess.run(['true']).returncode)")
        t.join()
        assert side.stdout == "0\n", side
        assert results[0].timed_out and results[0].duration_s < 5
        assert bomb.run_python("print('after')").stdout == "after\n"
    still_serves(pool)


def test_memory_bomb(pool, still_serves):
    with pool.session() as s:
        res = s.run_python("hog = []\nwhile True:\n    hog.append(bytearray(50 * 1024**2))",
                           limits=Limits(memory_mb=1024, wall_s=10))
        assert res.error_kind == ErrorKind.MEMORY and not res.timed_out
    still_serves(pool)


def test_cpu_spin_past_limit(pool, still_serves):
    with pool.session() as s:
        start = time.monotonic()
        res = s.run_python("x = 0\nwhile True:\n    x += 1", limits=Limits(cpu_s=1, wall_s=1.5))
        assert res.timed_out and res.error_kind == ErrorKind.TIMEOUT and time.monotonic() - start < 5
    still_serves(pool)


def test_huge_stdout_is_capped_fast(pool, still_serves):
    code = ("import sys\nline = 'y' * 1023 + '\\n'\n"
            "for _ in range(100 * 1024):\n    sys.stdout.write(line)\nprint('END')")
    with pool.session() as s:
        res = s.run_python(code, limits=Limits(wall_s=20))
        assert res.ok and res.truncated and res.stdout_bytes == 100 * 1024**2 + 4
        assert len(res.stdout.encode()) < 66_000 and res.stdout.startswith("yyy") and res.stdout.endswith("END\n")
        assert res.duration_s < 15
    still_serves(pool)


def test_binary_and_invalid_utf8_output(pool, still_serves):
    with pool.session() as session:
        res = session.run_python("import os\nos.write(1, bytes(range(256)) + b'\\xff\\xfe')\nos.write(2, b'\\xc3')")
    assert res.ok and "\ufffd" in res.stdout and res.stdout_bytes == 258 and res.stderr == "\ufffd"
    json.dumps(res.to_dict())
    still_serves(pool)


def test_network_egress_blocked(pool, still_serves):
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    host.settimeout(0.2)
    port = host.getsockname()[1]
    code = (
        "import socket, time\n"
        "for addr in [('1.1.1.1', 53), ('8.8.8.8', 53), ('127.0.0.1', %d)]:\n"
        "    t = time.monotonic()\n"
        "    try:\n"
        "        socket.create_connection(addr, timeout=3).close(); print('CONNECTED', addr)\n"
        "    except OSError as e:\n"
        "        print('blocked', addr[0], round(time.monotonic() - t, 2))\n" % port
    )
    try:
        with pool.session() as s:
            res = s.run_python(code)
        assert "CONNECTED" not in res.stdout and res.stdout.count("blocked") == 3, res.stdout
        assert all(float(line.split()[-1]) < 1.0 for line in res.stdout.splitlines())
        with pytest.raises(socket.timeout):
            host.accept()
    finally:
        host.close()
    still_serves(pool)


def test_write_outside_workspace(pool, tmp_path, still_serves):
    tmp_path.chmod(0o755)
    code = (
        "import os\n"
        "for p in ['/evil', '/usr/evil', '/etc/evil', '/data/mnt/evil', '/work/evil', '/proc/evil']:\n"
        "    try:\n"
        "        open(p, 'w').write('x'); print('WROTE', p)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('/workspace/ok.txt', 'w').write('fine'); open('/tmp/ok.txt', 'w').write('fine'); print('done')"
    )
    with pool.session(mounts={"mnt": tmp_path}) as s:
        res = s.run_python(code)
        assert res.stdout == "done\n", res
    assert list(tmp_path.iterdir()) == []
    still_serves(pool)


def test_read_root_only_file(pool, tmp_path, still_serves):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)
    code = (
        "for p in ['/data/sec/secret.txt', %r, '/etc/shadow', '/root/.bash_history']:\n"
        "    try:\n"
        "        print('READ', open(p).read())\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n" % str(secret)
    )
    with pool.session(mounts={"sec": tmp_path}) as s:
        res = s.run_python(code)
    assert "TOP-SECRET" not in res.stdout and "READ" not in res.stdout
    assert res.stdout.splitlines()[0] == "PermissionError"
    still_serves(pool)


def test_caller_environment_invisible(monkeypatch, fast_limits):
    monkeypatch.setenv("SANDBOX_PLANTED_SECRET", "hunter2-planted")
    with make_pool("bwrap", workers=1, limits=fast_limits, workspace_mb=16) as fresh, fresh.session() as s:
        res = s.run_python(
            "import os, glob\nprint(sorted(os.environ))\n"
            "for p in glob.glob('/proc/*/environ'):\n"
            "    try:\n        print(open(p, 'rb').read())\n    except OSError:\n        pass")
        shell = s.run_shell("env; cat /proc/1/environ 2>/dev/null")
    assert res.ok and shell.exit_code in (0, 1)
    assert "hunter2-planted" not in res.stdout + shell.stdout
    assert "SANDBOX_PLANTED_SECRET" not in res.stdout + shell.stdout


def test_host_processes_invisible(pool, still_serves):
    with pool.session() as session:
        res = session.run_python(
            "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\nprint(len(pids))\n"
            "print(' '.join(open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace') for p in pids))")
    count, cmdlines = res.stdout.splitlines()
    # The jail's own: its init, the worker server, the light zygote, up to two spare runners and this runner.
    assert int(count) <= 6 and "pytest" not in cmdlines
    still_serves(pool)


@pytest.mark.parametrize("attack", [
    "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "import os, signal\nos.kill(1, signal.SIGKILL)",
    "import os, signal\nos.kill(-1, signal.SIGKILL)",
    "import os, signal\nos.killpg(0, signal.SIGKILL)",
])
def test_kill_the_worker_machinery(pool, attack, still_serves):
    with pool.session() as s:
        s.run_python("kept = 1")
        res = s.run_python(attack + "\nprint('survived')")
        assert res.error_kind in (ErrorKind.PYTHON, ErrorKind.KILLED, ErrorKind.OK)
        after = s.run_python("print('next call ok')")
        assert after.stdout == "next call ok\n"
    still_serves(pool)


def test_deep_recursion(pool, still_serves):
    with pool.session() as s:
        res = s.run_python("def f(n):\n    return f(n + 1)\nf(0)")
        assert res.exception["type"] == "RecursionError" and res.error_kind == ErrorKind.PYTHON
        crash = s.run_python("import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)",
                             limits=Limits(memory_mb=700, wall_s=4))
        assert crash.error_kind in (ErrorKind.KILLED, ErrorKind.PYTHON, ErrorKind.MEMORY, ErrorKind.TIMEOUT)
        assert s.run_python("print('ok')").stdout == "ok\n"
    still_serves(pool)


def test_fill_workspace_past_quota(pool, still_serves):
    if "ws-quota" not in pool.layers:
        pytest.fail("the workspace quota layer is expected on this host (root may mount tmpfs)")
    code = ("import os\nn = 0\ntry:\n    for i in range(200):\n"
            "        with open(f'fill{i}', 'wb') as f:\n            f.write(b'z' * (8 * 1024**2))\n        n += 8\n"
            "except OSError as e:\n    print('stopped', n, e.errno)")
    with pool.session() as s:
        res = s.run_python(code)
        assert res.stdout.startswith("stopped") and int(res.stdout.split()[1]) <= 64
        ws = s.workspace
    assert list(ws.iterdir()) == []  # wiped when the session closed
    with pool.session() as s:
        assert s.run_python("open('small', 'w').write('x' * 1000); print('ok')").stdout == "ok\n"
    still_serves(pool)


def test_no_process_survives_a_timeout(pool, still_serves, leftovers):
    code = ("import subprocess, os, time\n"
            "subprocess.Popen(['sleep', '1000'])\n"
            "subprocess.Popen(['setsid', 'sh', '-c', 'sleep 1000 & sleep 1000'])\n"
            "if os.fork() == 0:\n    os.setsid()\n    time.sleep(1000)\n"
            "time.sleep(1000)")
    with pool.session() as s:
        res = s.run_python(code, limits=Limits(wall_s=1.0))
        assert res.timed_out
        assert leftovers(pool.jail_uids) == []
        shell = s.run_shell("sleep 1000 &\necho started")
        assert shell.stdout == "started\n"
        left = leftovers(pool.jail_uids, settle_s=0.3)
        assert len(left) == 1 and "sandbox.worker" in left[0], f"a background job outlived its call: {left}"
    still_serves(pool)


def test_sys_exit_and_os_exit(pool, still_serves):
    with pool.session() as s:
        s.run_python("kept = 5")
        res = s.run_python("import sys\nprint('bye')\nsys.exit(3)")
        assert res.exit_code == 3 and res.stdout == "bye\n" and res.error_kind == ErrorKind.PYTHON
        assert s.run_python("print(kept)").stdout == "5\n"  # sys.exit keeps the namespace
        assert s.run_python("raise SystemExit(0)").ok
        hard = s.run_python("import os\nprint('hard', flush=True)\nos._exit(4)")
        assert hard.exit_code == 4 and hard.stdout == "hard\n" and "restarted" in hard.stderr
        assert s.run_python("print('fresh')").stdout == "fresh\n"
    still_serves(pool)


def test_threads_hammering_one_session_are_serialised(pool):
    results = []
    with pool.session() as s:
        s.run_python("n = 0")
        threads = [threading.Thread(target=lambda: results.append(s.run_python("n += 1"))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.ok for r in results) and s.run_python("print(n)").stdout == "8\n"
    assert os.path.isdir(pool._base)
