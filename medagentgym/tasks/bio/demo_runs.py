"""Run a BioCoder module's own ``main()`` demo under controlled entropy: fixed worlds, hidden seeds, hash seeds.

Imported BioCoder records are graded on the stdout of their module's ``main()`` demo. Two things make that
demo a weak test as published: it may print unseeded random output (a second run differs, or by luck does not),
and its inputs are in plain sight of the agent (the module is shown). This module supplies both remedies.

**Worlds** (the determinism probe). A world fixes every source of entropy a program can reach through Python:
the global ``random`` and ``numpy.random`` generators are seeded from the world, a generator created without a
seed (``random.Random()``, ``np.random.default_rng()``, ``np.random.RandomState()``, ``random.seed()``) and
``os.urandom`` (hence ``uuid4``, ``secrets``, ``SystemRandom``) draw from the world too, and each world runs in
a fresh interpreter with its own fixed ``PYTHONHASHSEED`` (set iteration order). A program whose stdout differs
between worlds depends on entropy; because every world is fixed, the verdict is the same on every run (not a
two-run coin flip). Entropy the worlds cannot pin (wall-clock time, process ids) still shows as a difference. A
coincidence is still possible for a program printing, e.g., one of two values at random; so the probe also
*traces* entropy use (``sys.setprofile`` on the global generators' methods): a draw from a global generator the
program has not seeded (draws made while a module is imported aside), or an unseeded generator or ``os.urandom``
call made by the program's own code, marks it nondeterministic whatever it printed.

**Hidden seeds** (salts). Most demos build their inputs from a fixed seed (``random.seed(42)``). Under a salt,
every explicit seed the program passes (``random.seed(a)``, ``np.random.seed(a)``, ``default_rng(a)``,
``RandomState(a)``, ``Random(a)``) is replaced by one derived from ``(salt, a)``: the demo then draws inputs the
agent has never seen, and its printed results are the hidden test. Gold stdout per salt is recorded at import
from the reference; the grader runs the submission under the same salts and compares every stdout on the host.
Salt ``None`` is the visible demo, unchanged.
"""

from __future__ import annotations

import hashlib
from typing import Any

from medagentgym.tasks.bio.runner import PAYLOAD_VAR, new_nonce, run_graded

__all__ = ["HASH_SEEDS", "demo_program", "derive_salts", "probe_worlds", "run_salts"]

#: ``PYTHONHASHSEED`` of each probe world (one fresh interpreter each); the world number seeds the rest.
HASH_SEEDS = (11, 22, 33)

# Defines __mg_control(world, salt) -> state dict and __mg_run(src, salts, world, modname) -> list of results.
# Self-contained (runs in the jail, in the session's worker or a fresh interpreter): stdlib and numpy only.
_RUNNER = r'''
MODULE_FILE = "<biocoder-module>"


def __mg_setup():
    import hashlib, os, random, sys
    try:
        import numpy as np
    except Exception:
        np = None
    st = {"world": None, "salt": None, "n": 0, "flags": set(), "seeded": {}}

    def derive(tag, *parts):
        text = tag + ":" + ":".join(repr(p) for p in parts)
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")

    def fresh():
        st["n"] += 1
        return derive("fresh", st["world"], st["n"])

    def from_program():
        f = sys._getframe(3)  # the caller of the patched function
        while f is not None and (f.f_code.co_filename.endswith(("random.py", "uuid.py", "secrets.py"))
                                 or "numpy" in f.f_code.co_filename):
            f = f.f_back
        return f is not None and f.f_code.co_filename == MODULE_FILE

    def unseeded(what):
        if from_program():
            st["flags"].add(what)

    def mapped(kind, a):
        if st["salt"] is not None:
            return derive(kind, st["salt"], a)
        return a

    orig_seed = random.Random.seed

    def seed(self, a=None, version=2):
        if a is None:
            if st["world"] is None:
                return orig_seed(self, a, version)
            unseeded("seeds a random generator from OS entropy (random.seed() / random.Random())")
            return orig_seed(self, fresh(), version)
        if self is random._inst:
            st["seeded"]["random"] = True
        return orig_seed(self, mapped("random", a) if isinstance(a, (int, str, bytes, float)) else a, version)

    random.Random.seed = seed
    random.seed = random._inst.seed
    orig_urandom = os.urandom

    def urandom(n):
        if st["world"] is None:
            return orig_urandom(n)
        unseeded("reads os.urandom (uuid4, secrets, SystemRandom)")
        out = b""
        while len(out) < n:
            out += hashlib.sha256(repr(("urandom", st["world"], fresh())).encode()).digest()
        return out[:n]

    os.urandom = urandom
    random._urandom = urandom
    if np is not None:
        npr = np.random
        orig_np_seed, orig_rs, orig_rng = npr.seed, npr.RandomState, npr.default_rng

        def np_seed(a=None):
            if a is None:
                if st["world"] is None:
                    return orig_np_seed()
                unseeded("seeds numpy's global generator from OS entropy (np.random.seed())")
                return orig_np_seed(fresh())
            st["seeded"]["numpy"] = True
            return orig_np_seed(mapped("numpy", int(a)) if isinstance(a, (int, np.integer)) else a)

        class RandomState(orig_rs):
            def __init__(self, seed=None):
                if seed is None and st["world"] is not None:
                    unseeded("creates np.random.RandomState() without a seed")
                    seed = fresh()
                elif isinstance(seed, (int, np.integer)):
                    seed = mapped("numpy", int(seed))
                super().__init__(seed)

        def default_rng(seed=None):
            if seed is None and st["world"] is not None:
                unseeded("creates np.random.default_rng() without a seed")
                seed = fresh()
            elif isinstance(seed, (int, np.integer)):
                seed = mapped("numpy", int(seed))
            elif isinstance(seed, (list, tuple)) and all(isinstance(s, (int, np.integer)) for s in seed):
                seed = mapped("numpy", [int(s) for s in seed])
            return orig_rng(seed)

        npr.seed, npr.RandomState, npr.default_rng = np_seed, RandomState, default_rng

    def restore():
        random.Random.seed = orig_seed
        random.seed = random._inst.seed
        os.urandom = random._urandom = orig_urandom
        if np is not None:
            npr.seed, npr.RandomState, npr.default_rng = orig_np_seed, orig_rs, orig_rng

    owners = {id(random._inst): "random"}
    if np is not None:
        owners[id(npr.mtrand._rand)] = "numpy"
    quiet = {"seed", "getstate", "setstate", "get_state", "set_state", "__reduce__"}

    def watch(frame, event, arg):
        # A draw from a global generator the program has not seeded (C methods of random's or numpy's global
        # instance); draws made while a module is being imported (rich, for one, draws an id at import) are
        # the library's, made once per process, and do not count.
        if event != "c_call":
            return
        kind = owners.get(id(getattr(arg, "__self__", None)))
        if kind is None or st["seeded"].get(kind) or getattr(arg, "__name__", "") in quiet:
            return
        f = frame
        while f is not None:
            if f.f_code.co_filename.startswith("<frozen importlib"):
                return
            f = f.f_back
        st["flags"].add(f"draws from {kind}'s global generator without seeding it")

    def control(world, salt):
        st.update(world=world, salt=salt, n=0, flags=set(), seeded={})
        if world is not None:
            orig_seed(random._inst, derive("plant", world))
            if np is not None:
                orig_np_seed(derive("plant-np", world))
            sys.setprofile(watch)
        return st

    def finish():
        sys.setprofile(None)
        return sorted(st["flags"]) if st["world"] is not None else []

    return control, finish, restore


def __mg_once(src, modname, here):
    import contextlib, io, os, sys, tempfile
    ns = {"__name__": modname, "__builtins__": __builtins__}
    buf = io.StringIO()
    status = "ok"
    work = tempfile.mkdtemp(prefix="demo_")
    try:
        os.chdir(work)
        with contextlib.redirect_stdout(buf):
            exec(compile(src, MODULE_FILE, "exec"), ns)
    except BaseException as exc:  # SystemExit included: the demo did not finish
        status = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        os.chdir(here)
        plt = sys.modules.get("matplotlib.pyplot")  # close the program's figures; never import it
        if plt is not None:
            try:
                plt.close("all")
            except Exception:
                pass
    return status, buf.getvalue()[-20000:]


def __mg_preimport(src):
    # Import the module's top-level imports first: some libraries draw from the global generators when first
    # imported, which would otherwise count as the program's draw in its first run (and only there).
    import ast, importlib
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return
    for node in tree.body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        for name in names:
            try:
                importlib.import_module(name)
            except BaseException:
                pass


def __mg_run(src, salts, world, modname):
    import os
    __mg_preimport(src)
    control, finish, restore = __mg_setup()
    here = os.getcwd()
    out = []
    try:
        for salt in salts:
            control(world, salt)
            status, stdout = __mg_once(src, modname, here)
            out.append({"status": status, "stdout": stdout, "flags": finish()})
    finally:
        restore()
    return out
'''

# One world in a fresh interpreter: reads {"src", "salts", "world", "tag"} as JSON on stdin, prints one tagged line.
_WORLD_MAIN = _RUNNER + r'''
import json as _json, sys as _sys
_job = _json.loads(_sys.stdin.read())
_res = __mg_run(_job["src"], _job["salts"], _job["world"], "__main__")
_sys.stdout.flush()
print("\n" + _job["tag"] + _json.dumps({"status": "ok", "stdout": ""}) + _job["tag"] + _json.dumps(_res))
'''

# In the session: launch one fresh interpreter per hash seed, collect each world's results into the payload.
_PROBE = r'''
def __mg_probe(src, salts, hash_seeds, world_main, wall_s):
    import json, os, subprocess, sys
    results = []
    for k, hseed in enumerate(hash_seeds):
        tag = "@@world%d@@" % k
        job = json.dumps({"src": src, "salts": salts, "world": k + 1, "tag": tag})
        env = {**os.environ, "PYTHONHASHSEED": str(hseed)}
        try:
            done = subprocess.run([sys.executable, "-c", world_main], input=job, capture_output=True, text=True,
                                  env=env, timeout=wall_s)
        except subprocess.TimeoutExpired:
            results.append({"error": "world %d timed out after %ss" % (k + 1, wall_s)})
            continue
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith(tag)]
        if len(lines) != 1:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            results.append({"error": "world %d printed no result (%s)" % (k + 1, tail[:200])})
            continue
        results.append({"runs": json.loads(lines[0][len(tag):].split(tag, 1)[1])})
    return results
'''


def derive_salts(key: str, n: int = 2) -> list[int]:
    """``n`` hidden salts for one record, derived from ``key`` (e.g. the record's idx and the import seed)."""
    return [int.from_bytes(hashlib.sha256(f"biocoder-hidden:{key}:{k}".encode()).digest()[:4], "big")
            for k in range(n)]


def demo_program(source: str, salts: list[int | None], nonce: str, *, world: int | None = None) -> str:
    """A program for :func:`medagentgym.tasks.bio.runner.run_graded`: runs ``source``'s ``__main__`` once per salt
    in fresh namespaces and assigns the per-salt ``{"status", "stdout", "flags"}`` list to the payload variable."""
    return (_RUNNER + f"\n{PAYLOAD_VAR.format(nonce=nonce)} = __mg_run({source!r}, {salts!r}, {world!r}, "
            "'__main__')\n")


def run_salts(session: Any, source: str, salts: list[int | None], *, wall_s: float) -> tuple[str, list[str]]:
    """Run ``source``'s demo once per salt in ``session`` (one process); ``(status, stdouts)``.

    ``status`` is ``"ok"`` when every salt's run finished, else why not (the first failing run's exception, or
    an untrustworthy result). Nothing of the expected output enters the jail.
    """
    nonce = new_nonce()
    status, payload, _ = run_graded(session, demo_program(source, salts, nonce), nonce, wall_s=wall_s)
    if status != "ok":
        return status, []
    if not (isinstance(payload, list) and len(payload) == len(salts)
            and all(isinstance(r, dict) and isinstance(r.get("status"), str) and isinstance(r.get("stdout"), str)
                    for r in payload)):
        return "malformed demo results (forged?)", []
    failed = next((r["status"] for r in payload if r["status"] != "ok"), None)
    if failed:
        return failed[:300], []
    return "ok", [r["stdout"] for r in payload]


def probe_worlds(session: Any, source: str, salts: list[int | None], *, wall_s: float,
                 hash_seeds: tuple[int, ...] = HASH_SEEDS) -> list[dict[str, Any]]:
    """Run ``source``'s demo in each fixed world (a fresh interpreter per hash seed), once per salt.

    Returns:
        One dict per world: ``{"runs": [{"status", "stdout", "flags"}, ...]}`` (one run per salt), or
        ``{"error": why}`` when the world produced no result. For trusted reference programs at import time.
    """
    nonce = new_nonce()
    program = (_PROBE + f"\n{PAYLOAD_VAR.format(nonce=nonce)} = __mg_probe({source!r}, {salts!r}, "
               f"{list(hash_seeds)!r}, {_WORLD_MAIN!r}, {wall_s / max(1, len(hash_seeds))!r})\n")
    status, payload, _ = run_graded(session, program, nonce, wall_s=wall_s + 10)
    if status != "ok" or not isinstance(payload, list):
        return [{"error": f"probe failed: {status}"}]
    return payload

