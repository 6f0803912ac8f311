"""Attacks on the bwrap sandbox. Each test asserts containment, then that the pool still serves."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from medagentgym.sandbox import ErrorKind, Limits, make_pool
from medagentgym.sandbox._clock import hard_wall_s


@pytest.fixture()
def still_serves(leftovers):
    """``still_serves(pool)``: a trivial call on a fresh session works, no jailed process is left over."""

    def check(pool) -> None:
        with pool.session() as s:
            res = s.run_python("print(6 * 7)")
            assert res.ok and res.stdout == "42\n", res
        assert leftovers(pool) == []

    return check


def test_fork_bomb(pool, still_serves):
    bomb_code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    with pool.session() as bomb, pool.session() as other:
        results = []
        t = threading.Thread(target=lambda: results.append(
            bomb.run_python(bomb_code, limits=Limits(wall_s=2.0, cpu_s=4.0, processes=32))))
        t.start()
        time.sleep(0.5)
        # the other worker runs as another uid: the bomb cannot exhaust its process limit
        side = other.run_python("import subprocess\nprint(subprocess.run(['true']).returncode)")
        t.join()
        assert side.stdout == "0\n", side
        # 32 runnable processes are all kept waiting on a busy host, which the wall guard does not charge: the bomb
        # ends at the call's CPU limit or, at the latest, at the hard cap (medagentgym.sandbox._clock). cpu_s=4 (the
        # default is 30): the bomb's processes together stop after 4 CPU seconds, ~2 s on two idle cores, instead of
        # burning both cores to the 20 s hard cap (issue #29); the side call above still runs while it forks.
        assert results[0].timed_out and results[0].duration_s < hard_wall_s(2.0) + 5
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
        # ended by its CPU: on a busy host that takes longer on the clock, never past the hard cap (plus slack
        # for starting and reaping the runner on a host 5x slower; the loop itself would never end)
        assert res.timed_out and res.error_kind == ErrorKind.TIMEOUT
        assert time.monotonic() - start < hard_wall_s(1.5) + 30
    still_serves(pool)


def test_huge_stdout_is_capped_fast(pool, still_serves):
    code = ("import sys\nline = 'y' * 1023 + '\\n'\n"
            "for _ in range(100 * 1024):\n    sys.stdout.write(line)\nprint('END')")
    with pool.session() as s:
        # ~2 s quiet; the limit is a hang guard sized far above a loaded or 5x slower machine. Keeping only a
        # bounded head and tail is checked by the sizes; a capture that grew with the output would hold 100 MB
        res = s.run_python(code, limits=Limits(wall_s=120))
        assert res.ok and res.truncated and res.stdout_bytes == 100 * 1024**2 + 4
        assert len(res.stdout.encode()) < 66_000 and res.stdout.startswith("yyy") and res.stdout.endswith("END\n")
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
    # The jail's own: its init, the worker server, the light zygote, up to two spare runners and this runner, plus
    # (seen once under load) a spare of the previous session's uid that is still exiting. No host process.
    assert int(count) <= 7 and "pytest" not in cmdlines
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
        assert leftovers(pool) == []
        shell = s.run_shell("sleep 1000 &\necho started")
        assert shell.stdout == "started\n"
        left = leftovers(pool, settle_s=0.3)
        runner = [pid for pid, role in pool.process_roles().items() if role == "runner"]
        assert len(left) == 1 and int(left[0].split()[3]) in runner, f"a background job outlived its call: {left}"
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


# ----------------------------------------------------------------------------------------------------------------
# The escape chain of the November 2026 review, each link on its own: a planted module, a wedged or lying worker,
# a restart in a dirty slot, a cwd on sys.path, a privileged server. Plus capabilities, IPC and mounts.
# ----------------------------------------------------------------------------------------------------------------

#: Module names the worker server, the zygotes or a runner import (or Python itself at start-up), planted where
#: the jailed code can write. Imported by anything privileged, each would write its marker to the worker's log.
PLANTED = ["sandbox/__init__.py", "sandbox/worker.py", "sandbox/_runner.py", "numpy.py", "pandas.py",
           "sqlite3.py", "json.py", "sitecustomize.py", "usercustomize.py", "encodings/__init__.py", "site.py",
           "subprocess.py", "argparse.py", "ctypes/__init__.py", "pyseccomp.py", "sklearn/__init__.py"]
MARKER = "PLANTED-MODULE-RAN"


def _plant_code(where: str) -> str:
    body = f"import sys; sys.stderr.write('{MARKER} uid=' + str(__import__('os').getuid()) + '\\\\n')\\n"
    return ("import os\n"
            f"for rel in {PLANTED!r}:\n"
            f"    path = os.path.join({where!r}, rel)\n"
            "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
            f"    open(path, 'w').write({body!r})\n"
            "print('planted')")


@pytest.fixture(scope="module")
def solo(fast_limits, backend):
    """A one-worker pool: every session lands on the same worker (and the same slot directories)."""
    with make_pool(backend, workers=1, limits=fast_limits, workspace_mb=64) as p:
        yield p


def _log(pool) -> str:
    return "".join(w.log_path.read_text(errors="replace") for w in pool._workers if w.log_path.exists())


def test_planted_modules_never_run_in_the_worker_machinery(solo, still_serves):
    with solo.session() as s:
        for where in ("/workspace", "/tmp", "/dev/shm"):
            assert s.run_python(_plant_code(where)).stdout == "planted\n"
        # A planted module must not shadow anything for the runner's own machinery either (only the session's
        # own imports see /workspace): a SQL call, a shell call, an ml import still work.
        assert s.run_python("import sqlite3; sqlite3.connect('t.db').execute('CREATE TABLE t (x)')").ok
        assert s.run_sql("SELECT count(*) AS n FROM t", database="t.db").ok
        assert s.run_shell("echo shell-ok").stdout == "shell-ok\n"
        # The host restarts the worker in the same slot, as it would after a wedge. Plant the files again from
        # the host side at the moment of the restart, to test -I independently of the wipe.
        worker = solo._workers[0]
        for rel in PLANTED:
            path = worker.slot.workspace / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"import sys; sys.stderr.write('{MARKER} host-planted\\n')\n")
        os.kill(worker.proc.pid, 9)
        worker.proc.wait(timeout=30)  # dead for sure: the next call must not race a jail still answering
        res = s.run_python("print('after restart')")
        assert res.error_kind == ErrorKind.KILLED and "fresh worker" in res.stderr
        assert s.run_python("import numpy, pandas, sqlite3; print('imports ok')").stdout == "imports ok\n"
        listing = s.run_shell("ls -A /workspace /tmp /dev/shm")
    assert MARKER not in _log(solo), "a planted module ran in a privileged process"
    # The restart wiped the slot: what the first session planted is gone (the host-planted files too).
    assert "sitecustomize.py" not in listing.stdout and "numpy.py" not in listing.stdout, listing.stdout
    still_serves(solo)


def test_server_and_zygotes_have_an_isolated_sys_path(solo):
    """The server, the zygotes and a spare have no writable directory on sys.path and start in '/'."""
    roles = solo.process_roles()
    for pid, role in roles.items():
        if role == "runner":
            continue
        cwd, root = os.readlink(f"/proc/{pid}/cwd"), os.readlink(f"/proc/{pid}/root")
        assert cwd == root, (role, cwd, root)  # the jail's own root directory, whatever its host path
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        assert b"-I" in cmdline, (role, cmdline)


@pytest.mark.parametrize("forgery", [
    "os.write(4, b'\\x00\\x00\\x10\\x00{\"exit_')\ntime.sleep(60)",               # a partial frame, then silence
    "os.write(4, b'\\xff\\xff\\xff\\xff')\ntime.sleep(60)",                          # an absurd length
    "os.write(4, b'\\x00\\x00\\x00\\x05hello')\ntime.sleep(60)",                     # not JSON
    "os.write(4, b'\\x00\\x00\\x00\\x02[]')\ntime.sleep(60)",                        # JSON, not an object
    # JSON nested past the decoder's depth: RecursionError in the server was answered as its own failure
    # (SandboxError on the host, which grading counted as infrastructure: reward None for a wrong answer)
    "b = b'[' * 100000 + b']' * 100000\nos.write(4, len(b).to_bytes(4, 'big') + b)\ntime.sleep(60)",
])
def test_a_lying_reply_channel_is_killed_not_waited_for(solo, forgery, still_serves):
    with solo.session() as s:
        start = time.monotonic()
        res = s.run_python("import os, time\n" + forgery, limits=Limits(wall_s=3.0))
        assert time.monotonic() - start < 40  # killed at its 3 s limit, not waited for (the code sleeps 60 s)
        assert not res.ok and res.error_kind in (ErrorKind.KILLED, ErrorKind.TIMEOUT), res
        assert s.run_python("print('next')").stdout == "next\n"
    still_serves(solo)


def test_a_forged_reply_is_ignored_or_reaches_the_host_with_sane_types(solo, still_serves):
    forged = {"exit_code": "0; rm -rf /", "signal": [9], "error_kind": "pwned", "exception": ["x"] * 3}
    code = ("import os, json, struct, sys\n"
            "for seq in SEQS:\n"
            f"    body = json.dumps(dict({forged!r}, seq=seq)).encode()\n"
            "    os.write(4, struct.pack('>I', len(body)) + body)\n"
            "print('done')\n")
    # The call's number, dug out of the runner's own frames (the request it is serving).
    dig = ("import sys\nf = sys._getframe()\nnums = []\n"
           "while f is not None:\n"
           "    req = f.f_locals.get('req')\n"
           "    if isinstance(req, dict) and 'seq' in req: nums.append(req['seq'])\n"
           "    f = f.f_back\n")
    with solo.session() as s:
        # Guessed numbers (small counters, nonsense) are skipped: the call's own reply is the one reported, and
        # the forged frames left in the pipe cannot stand in for the next call's reply either.
        for seqs in ("[None, -1, 'x']", "range(2000)"):
            honest = s.run_python(code.replace("SEQS", seqs))
            assert honest.ok and honest.stdout == "done\n", honest
            assert s.run_python("print('fine')").stdout == "fine\n"
        # With the real number the forged reply of this very call wins, but every field reaches the host typed.
        res = s.run_python(dig + code.replace("SEQS", "nums"))
        assert res.exit_code is None and res.signal is None and res.exception is None
        assert res.error_kind == ErrorKind.PYTHON
        json.dumps(res.to_dict())
        # ... and the calls stay in step with their replies: the next call gets its own reply. Its stdout may
        # begin with the forging call's tail ("done"), written after the host took the forged reply: that output
        # is the same session's own, so a forgery only ever confuses the policy that wrote it.
        nxt = s.run_python("print('fine')")
        assert nxt.ok and nxt.stdout in ("fine\n", "done\nfine\n"), nxt
        assert s.run_python("print('and next')").stdout == "and next\n"
    still_serves(solo)


def _jail_status(pool) -> list[tuple[str, dict]]:
    from medagentgym.sandbox._caps import read_status

    roles = pool.process_roles()
    out = []
    for worker in pool._workers:
        from medagentgym.sandbox.pool import _namespace_pids

        root = pool.launcher.jail_root(worker.slot) if hasattr(pool.launcher, "jail_root") else None
        for pid in _namespace_pids(root or worker.proc.pid):
            if pid == worker.proc.pid:
                continue  # the outer bwrap process lives on the host side, outside the jail
            try:
                out.append((roles.get(pid, "user-process"), read_status(pid)))
            except OSError:
                pass
    return out


def test_every_process_in_the_jail_holds_only_the_documented_capabilities(solo):
    from medagentgym.sandbox import _caps

    assert "caps" in solo.layers and "seccomp" in solo.layers
    server = _caps.mask({_caps.CAP_KILL, _caps.CAP_SETUID, _caps.CAP_SETGID, _caps.CAP_SETPCAP})
    zygote = _caps.mask({_caps.CAP_SETUID, _caps.CAP_SETGID, _caps.CAP_SETPCAP})
    expected = {  # role: (CapEff, CapPrm, CapBnd)
        "server": (_caps.mask({_caps.CAP_KILL}), server, server),
        "zygote": (0, zygote, zygote),
        "spare": (0, 0, 0), "runner": (0, 0, 0), "user": (0, 0, 0),
    }
    with solo.session() as s:
        slow = Limits(wall_s=120, cpu_s=120)  # a loaded machine may take long to import scikit-learn
        assert s.run_python("import sklearn.linear_model", limits=slow).ok  # the ml zygote starts too
        assert s.run_python("x = 1").ok
        assert "runner" in solo.process_roles().values()  # who is who, asked between calls
        # The next session's spare is forked once the host has been quiet a moment (each ping below is a request).
        deadline = time.monotonic() + 60
        while not any(r.startswith("spare-") for r in solo.process_roles().values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        # A process the user's code started lives only during its call: sample while one runs. It waits for a file
        # the test writes into the workspace once it has seen it (the event), not for a fixed time (issue #29).
        go = s.workspace / "go"
        call = threading.Thread(target=s.run_python, args=(
            "import subprocess\nsubprocess.run(['sh', '-c', 'while [ ! -e go ]; do sleep 0.05; done'])",),
            kwargs={"limits": Limits(wall_s=120)})
        call.start()
        statuses = []
        try:
            while call.is_alive() and not any(r == "user-process" for r, _ in statuses):
                time.sleep(0.2)
                statuses = _jail_status(solo)
        finally:
            go.write_text("")
            call.join()
        seen = set()
        for role, st in statuses:
            kind = role.split("-")[0]
            seen.add(kind)
            assert (st["CapEff"], st["CapPrm"], st["CapBnd"]) == expected[kind], (role, st)
            assert st["CapInh"] == 0 and st["CapAmb"] == 0, (role, st)
            assert st["Seccomp"] == 2 and st["NoNewPrivs"] == 1, (role, st)
        assert {"server", "zygote", "spare", "runner", "user"} <= seen, seen


def _ipc_code() -> str:
    return """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
def shm(mb):
    ident = libc.shmget(IPC_PRIVATE, ctypes.c_size_t(mb << 20), IPC_CREAT | 0o600)
    return ident, ctypes.get_errno()
big, err = shm(1024)
print('1GiB', big, err)
got = []
for _ in range(8):
    ident, err = shm(30)
    if ident < 0:
        break
    addr = libc.shmat(ident, None, 0)
    if addr not in (None, ctypes.c_void_p(-1).value):
        ctypes.memset(addr, 1, 30 << 20)
    got.append(ident)
print('30MiB segments', len(got), 'then errno', err)
q = libc.msgget(0x5ec2e7, IPC_CREAT | 0o600)
print('queue', q)
print('mqueue', libc.syscall(240, b'/leak', 0o100 | 0o2, 0o600, None), ctypes.get_errno())  # mq_open
"""


def _shmem_kb() -> int:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Shmem:"))


def test_sysv_ipc_is_capped_and_removed_between_sessions(solo, still_serves):
    assert "ipc-limits" in solo.layers
    before = _shmem_kb()
    with solo.session() as s:
        res = s.run_python(_ipc_code(), limits=Limits(memory_mb=512))
        lines = res.stdout.splitlines()
        assert lines[0].split()[1] == "-1", lines       # 1 GiB in one segment: refused (shmmax)
        n = int(lines[1].split()[2])
        assert 1 <= n <= solo.sysv_shm_mb // 30, lines   # the namespace's total (shmall) stops the rest
        assert int(lines[2].split()[1]) >= 0             # a small message queue is allowed ...
        assert lines[3].split()[1] == "-1", lines        # ... POSIX message queues are not
        during = _shmem_kb()
        assert during - before < (solo.sysv_shm_mb + 16) * 1024, (before, during)
        listing = s.run_shell("cat /proc/sysvipc/shm /proc/sysvipc/msg | wc -l").stdout
        assert int(listing) > 2
    with solo.session() as s:  # the same worker: nothing of the last session's IPC objects is left
        rows = s.run_shell("tail -n +2 /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem").stdout
        assert all(not line.strip() or line.startswith("==>") for line in rows.splitlines()), rows
        probe = s.run_python("import ctypes; print(ctypes.CDLL(None).msgget(0x5ec2e7, 0))")
        assert probe.stdout.strip() == "-1"
    deadline = time.monotonic() + 60  # ends as soon as it is released (a hang guard, issue #29)
    while _shmem_kb() - before > 16 * 1024 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _shmem_kb() - before < 16 * 1024, "shared memory stayed allocated on the host"
    still_serves(solo)


def test_a_session_sees_only_its_own_mounts_and_no_host_paths(solo, tmp_path, still_serves):
    secret_dir = tmp_path / "tasks-root-marker" / "ehrshot" / "labels"
    secret_dir.mkdir(parents=True)
    (secret_dir / "labels.csv").write_text("patient,label\n1,0\n")
    for p in (tmp_path / "tasks-root-marker", tmp_path / "tasks-root-marker" / "ehrshot", secret_dir):
        p.chmod(0o755)
    (secret_dir / "labels.csv").chmod(0o644)
    with solo.session(mounts={"labels": secret_dir}) as s:
        assert s.run_python("print(open('/data/labels/labels.csv').read())").stdout.startswith("patient")
        info = s.run_shell("cat /proc/self/mountinfo /proc/1/mountinfo 2>/dev/null").stdout
        assert "tasks-root-marker" not in info and str(tmp_path) not in info, info
        # ... nor the pool's own directory, where every slot's workspace lives (the staged copies showed it)
        assert solo._base.name not in info and "sandbox-pool" not in info, info
    with solo.session() as s:  # the next session on the same worker does not see the earlier one's mount
        res = s.run_shell("ls /data; cat /data/labels/labels.csv 2>&1")
        assert "patient" not in res.stdout, res.stdout
    still_serves(solo)


def test_a_runner_that_stops_reading_cannot_wedge_the_server(solo, still_serves):
    with solo.session() as s:
        # The code rewires its own runner so that it never reads another request.
        hog = "import medagentgym.sandbox.worker as w, time\nw._read_exact = lambda fd, size: time.sleep(3600)"
        assert s.run_python(hog).ok
        big = "x = 1\n" + "# padding\n" * 20000  # more than a pipe holds
        start = time.monotonic()
        res = s.run_python(big, limits=Limits(wall_s=2.0))
        assert res.timed_out and time.monotonic() - start < 60, res  # its 2 s limit; wedged would be for ever
        assert s.run_python("print('fresh runner')").stdout == "fresh runner\n"
    still_serves(solo)


def test_a_runner_rewriting_its_reply_module_reaches_the_host_with_documented_shapes(solo, still_serves):
    """The code can replace any module of its own runner: what it sends as error context is rebuilt by the server."""
    from medagentgym.sandbox.grounding import ground

    deep = "ctx = cur = {}\nfor _ in range(960):\n    cur['k'] = {}\n    cur = cur['k']\n"
    odd = ('ctx = {"tables": {"t": 5, "u": [[1]]}, "suggestions": 7, "frames": [1], "columns": {"a": 1}, '
           '"defined": None, "note": [[1]], "extra": "x" * 10**6, "missing": {"a": [1]}}\n')
    with solo.session() as s:
        for ctx in (deep, odd):
            assert s.run_python(ctx + "import medagentgym.sandbox._runner as r\nr._context = lambda *a, **k: ctx").ok
            res = s.run_python("undefined_name")
            assert res.error_kind == ErrorKind.PYTHON, res  # the host read the reply (RecursionError before)
            context = res.exception["context"]
            assert set(context) <= {"tables", "suggestions", "frames", "columns", "defined", "note", "missing"}
            assert len(json.dumps(context)) < 20_000
            for value in context.values():
                assert isinstance(value, (str, list, dict))
                for item in (value.values() if isinstance(value, dict) else [value]):
                    assert isinstance(item, str) or all(isinstance(x, str) for x in item), context
            assert "NameError" in ground(res)
        # Exception fields of other types (a forged reply of this very call) become strings without conversion.
        forged = ("import os, sys, json\nf = sys._getframe()\nwhile 'req' not in f.f_locals: f = f.f_back\n"
                  "seq = f.f_locals['req']['seq']\nv = []\nfor _ in range(900): v = [v]\n"
                  "body = json.dumps({'seq': seq, 'error_kind': 'python_error', 'exception': {'type': v, "
                  "'message': v, 'traceback': v, 'lineno': v, 'context': {'tables': v}}}).encode()\n"
                  "os.write(4, len(body).to_bytes(4, 'big') + body)\n")
        res = s.run_python(forged)
        assert res.exception["type"] == "<list>" and res.exception["lineno"] is None, res
        assert ground(res)
        assert s.run_python("print('next')").stdout == "next\n"
    still_serves(solo)


_STOP_MY_UID = """
import os, resource, signal, threading, time
me = os.getpid()
def mine():
    for name in os.listdir('/proc'):
        if name.isdigit() and int(name) != me:
            try:
                with open(f'/proc/{name}/status') as fh:
                    uid = next(line.split()[1] for line in fh if line.startswith('Uid:'))
            except (OSError, StopIteration):
                continue
            if int(uid) == os.getuid():
                yield int(name)
def hit():
    hits = 0
    for pid in mine():
        for act in (lambda: os.kill(pid, signal.SIGSTOP),
                    lambda: resource.prlimit(pid, resource.RLIMIT_AS, (8 << 20, 8 << 20))):
            try:
                act()
                hits += 1
            except OSError:
                pass
    return hits
def keep_hitting():
    while True:
        hit()
        time.sleep(0.005)
threading.Thread(target=keep_hitting, daemon=True).start()
print('hit', hit())
"""


def test_a_session_cannot_touch_the_runner_of_the_next_session(solo, still_serves):
    """Spare runners forked while a session's code lives must not share its uid: a SIGSTOP (or a prlimit) on them
    made the next session's first call time out (or fail) although that session did nothing wrong."""
    with solo.session() as s:
        assert s.run_python("print('warm')").ok
        time.sleep(0.5)  # the worker forks its spares once the host is quiet
        res = s.run_python(_STOP_MY_UID)
        assert res.ok, res
        time.sleep(0.5)  # the thread keeps at it while the session stays open
    for _ in range(3):  # the next sessions on the same worker: every kind of first call
        with solo.session() as s:
            start = time.monotonic()
            results = [s.run_python("import numpy\nprint(numpy.zeros(1000).sum())", limits=Limits(wall_s=5)),
                       s.run_sql("SELECT 1", database=":memory:", limits=Limits(wall_s=5)),
                       s.run_shell("echo ok", limits=Limits(wall_s=5))]
            assert results[0].ok and results[0].stdout == "0.0\n", results[0]
            assert results[2].ok, results[2]
            # a stopped or throttled runner shows as a call that times out, not only as a slow clock
            assert not any(r.timed_out for r in results) and time.monotonic() - start < 60, results
    still_serves(solo)
