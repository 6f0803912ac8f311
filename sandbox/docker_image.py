"""Build the Docker backend's image from files on this machine: no registry is pulled from.

``medagentgym sandbox-image`` drives it (``make test-docker`` runs that script). Two layers:

1. A base image imported with ``docker import`` from a root filesystem assembled here:
   * a userland: either the files of a few Debian packages installed on this host (``dpkg -L``: libc, a shell,
     coreutils, grep/sed/awk, find, ps, setsid, sqlite3, ...; the default, seconds and ~60 MB) or a
     ``debootstrap --variant=minbase`` tree of the host's Debian release (minutes and a mirror);
   * the interpreter the project's venv is made from (``sys.base_prefix``), moved to ``/usr/local``, without its
     test suite, IDLE, tkinter and build files;
   * the site-packages of the distributions the sandbox needs (:data:`IMAGE_DISTRIBUTIONS` and their
     requirements), copied file by file from this venv's ``RECORD`` lists, so the container runs exactly the
     versions bwrap runs, minus their ``tests`` folders; never torch or the training stack;
   * every shared library those files link to (``ldd``), an ``ld.so.cache`` and a minimal ``/etc``.
   Set-uid/set-gid bits and extended attributes (file capabilities) are not copied.
2. ``sandbox/Dockerfile`` built on that base (``--build-arg BASE=...``), which adds the ``sandbox`` package.

The base is tagged with a hash of its inputs and reused while they are unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

__all__ = ["IMAGE_DISTRIBUTIONS", "USERLAND_PACKAGES", "base_files", "distribution_closure", "library_closure",
           "materialize"]

#: What code in the container may import, beyond the standard library (with their requirements): the task
#: libraries, plus the ``[bio]`` extra that BioCoder's public records import (scikit-image, pysam, centrosome).
IMAGE_DISTRIBUTIONS = ("numpy", "pandas", "scipy", "scikit-learn", "statsmodels", "lifelines", "biopython",
                       "matplotlib", "pyseccomp", "scikit-image", "pysam", "centrosome")
#: Host Debian packages whose files make the ``host`` userland (tools an agent's shell commands expect).
USERLAND_PACKAGES = ("base-files", "libc6", "libc-bin", "dash", "bash", "coreutils", "debianutils", "grep", "sed",
                     "mawk", "findutils", "util-linux", "procps", "diffutils", "gzip", "tar", "sqlite3",
                     "libseccomp2", "tzdata")
PREFIX = "/usr/local"
_SKIP_DOCS = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/", "/usr/share/lintian/",
              "/usr/share/bug/")
_SKIP_STDLIB = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "__phello__"}
_SKIP_DYNLOAD = re.compile(r"^(_tkinter|_test|_ctypes_test|_xx|xx)")
_TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_closure(names: tuple[str, ...] = IMAGE_DISTRIBUTIONS,
                         site: Path | None = None) -> list[md.Distribution]:
    """The installed distributions ``names`` and, recursively, what they require (markers evaluated here).

    Args:
        names: Distribution names, as on PyPI.
        site: The site-packages folder to look in; default: this interpreter's.

    Returns:
        The distributions, sorted by name.

    Raises:
        LookupError: A required distribution is not installed there (the message names it).

    Example:
        >>> [d.metadata["Name"] for d in distribution_closure(("pandas",))][:2]
        ['numpy', 'pandas']
    """
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    path = [str(site or sysconfig.get_paths()["purelib"])]
    env = {**default_environment(), "extra": ""}
    found: dict[str, md.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if _norm(name) in found:
            continue
        dist = next(iter(md.distributions(name=name, path=path)), None)
        if dist is None:
            raise LookupError(f"distribution {name!r} is not installed in {path[0]}: run `make venv` first")
        found[_norm(name)] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return [found[k] for k in sorted(found)]


def _add_host_path(files: dict[str, Path], path: str) -> None:
    """Map host ``path`` to the same place in the image, following symlink chains (each link is kept)."""
    while True:
        parent, name = os.path.split(os.path.normpath(path))
        dest = os.path.join(os.path.realpath(parent), name)
        if dest in files or not os.path.lexists(path):
            return
        files[dest] = Path(path)
        if not os.path.islink(path):
            return
        path = os.path.join(os.path.dirname(dest), os.readlink(path))


def python_files(dists: list[md.Distribution], base_prefix: Path | None = None) -> dict[str, Path]:
    """``{image path: host path}`` of the interpreter (moved to ``/usr/local``) and of ``dists``' files."""
    base = Path(base_prefix or sys.base_prefix).resolve()
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    files: dict[str, Path] = {}
    for name in ("python3", version):
        files[f"{PREFIX}/bin/{name}"] = base / "bin" / name
    for entry in (base / "lib").glob("libpython3*.so*"):
        files[f"{PREFIX}/lib/{entry.name}"] = entry
    stdlib = base / "lib" / version
    for root, dirs, names in os.walk(stdlib):
        rel = Path(root).relative_to(stdlib)
        dirs[:] = [d for d in dirs if d not in ("test", "tests", "idle_test")]
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d not in _SKIP_STDLIB and not d.startswith("config-")]
        for name in names:
            if rel == Path("lib-dynload") and _SKIP_DYNLOAD.match(name):
                continue
            files[f"{PREFIX}/lib/{version}/{rel / name}"] = Path(root) / name
    site = f"{PREFIX}/lib/{version}/site-packages"
    for dist in dists:
        for item in dist.files or []:
            rel = Path(os.path.normpath(item))
            if rel.parts[0] == ".." or "tests" in rel.parts[:-1]:
                continue  # console scripts outside site-packages; test suites
            src = Path(dist.locate_file(item))
            if os.path.lexists(src):
                files[f"{site}/{rel}"] = src
    return files


def userland_files(packages: tuple[str, ...] = USERLAND_PACKAGES) -> dict[str, Path]:
    """``{image path: host path}`` of the files of installed Debian ``packages`` (docs and man pages left out),
    plus the host's command symlinks (``/usr/bin/awk``, ``/bin/sh``) whose final target is one of them."""
    listed = subprocess.run(["dpkg", "-L", *packages], capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        raise RuntimeError(f"`dpkg -L` failed ({listed.stderr.strip()[:200]}): the host userland needs a Debian "
                           "host with these packages installed; use --userland debootstrap instead")
    files: dict[str, Path] = {}
    for line in listed.stdout.splitlines():
        if line.startswith("/") and not line.startswith(_SKIP_DOCS) and not os.path.isdir(line):
            _add_host_path(files, line)
    targets = {os.path.realpath(p) for p in files.values()}
    for folder in ("/usr/bin", "/usr/sbin"):
        for entry in os.scandir(folder):
            if entry.is_symlink() and os.path.realpath(entry.path) in targets:
                _add_host_path(files, entry.path)
    return files


def library_closure(files: dict[str, Path], provided: list[Path]) -> dict[str, Path]:
    """Shared libraries that the ELF files among ``files`` load and that ``files`` lacks, from the host.

    Args:
        files: ``{image path: host path}`` of the image so far.
        provided: Host folders whose files may only come through ``files`` (the venv, the base prefix): a
            library resolved there but absent from ``files`` is an error, not a copy.

    Returns:
        ``{image path: host path}`` of the missing libraries (and their symlink chains).

    Raises:
        RuntimeError: A library cannot be found, or lies in a ``provided`` folder but was not copied.
    """
    elves = [str(src) for src in files.values() if not src.is_symlink() and _is_elf(src)]
    have = {os.path.realpath(src) for src in files.values()} | set(files)
    names = {os.path.basename(dest) for dest in files}
    extra: dict[str, Path] = {}
    for i in range(0, len(elves), 200):
        out = subprocess.run(["ldd", *elves[i:i + 200]], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            match = re.match(r"\s+(\S+) => (\S+) \(", line) or re.match(r"\s+(/\S+) \(", line)
            if "=> not found" in line:
                # A wheel's bundled library needed by another bundled one: the loader finds it already
                # loaded (by its soname) through the extension module's own $ORIGIN run path.
                if line.split()[0] in names:
                    continue
                raise RuntimeError(f"a library needed by the image is missing on this host: {line.strip()}")
            if match is None:
                continue
            lib = match.group(match.lastindex)
            if os.path.realpath(lib) in have:
                continue
            if any(Path(lib).resolve().is_relative_to(root) for root in provided):
                raise RuntimeError(f"{lib} is needed but belongs to no distribution in the image")
            _add_host_path(extra, lib)
    return {dest: src for dest, src in extra.items() if dest not in files}


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def materialize(files: dict[str, Path], rootfs: Path) -> int:
    """Copy ``files`` into ``rootfs`` (symlinks as symlinks; no set-id bits, no xattrs). Returns bytes copied."""
    total = 0
    for dest in sorted(files):
        src, target = files[dest], rootfs / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        if os.path.lexists(target):
            continue  # a userland file already there (debootstrap) wins over the host's copy
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copyfile(src, target)
            os.chmod(target, stat.S_IMODE(src.stat().st_mode) & 0o777 & ~0o022 | 0o444)
            total += target.stat().st_size
    return total


def base_files(rootfs: Path) -> None:
    """Top-level links of a merged-/usr host, a minimal ``/etc`` (root and nobody only), empty mount points
    and ``ld.so.cache``."""
    for name in _TOP_LINKS:
        host = Path("/") / name
        if host.is_symlink() and not os.path.lexists(rootfs / name):
            os.symlink(os.readlink(host), rootfs / name)
    if not os.path.lexists(rootfs / PREFIX.lstrip("/") / "bin" / "python"):
        os.symlink("python3", rootfs / PREFIX.lstrip("/") / "bin" / "python")
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    triplet = getattr(sys.implementation, "_multiarch", "x86_64-linux-gnu")
    texts = {
        "passwd": ("root:x:0:0:root:/root:/usr/sbin/nologin\n"
                   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
        "group": "root:x:0:\nnogroup:x:65534:\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
        "ld.so.conf": f"{PREFIX}/lib\n{PREFIX}/lib/{triplet}\n/lib/{triplet}\n/usr/lib/{triplet}\n",
    }
    for name, text in texts.items():
        (etc / name).unlink(missing_ok=True)
        (etc / name).write_text(text)
        os.chmod(etc / name, 0o644)
    for folder in ("tmp", "workspace", "data", "run", "var/tmp", "proc", "sys", "dev", "opt/medagentgym", "root"):
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
    os.chmod(rootfs / "tmp", 0o1777)
    subprocess.run(["ldconfig", "-r", str(rootfs)], check=True, capture_output=True)


def debootstrap(rootfs: Path, mirror: str = "http://deb.debian.org/debian") -> None:
    """A ``minbase`` tree of the host's Debian release in ``rootfs``, without apt's caches, docs and locales."""
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: `apt-get install debootstrap`, or use --userland host")
    release = {}
    for line in Path("/etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        release[key] = value.strip('"')
    suite = release.get("VERSION_CODENAME") or "bookworm"
    proc = subprocess.run(["debootstrap", "--variant=minbase", "--include=libseccomp2,sqlite3,procps", suite,
                           str(rootfs), mirror], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"debootstrap {suite} failed: {(proc.stdout + proc.stderr).strip()[-300:]}")
    for junk in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale",
                 "usr/share/info"):
        shutil.rmtree(rootfs / junk, ignore_errors=True)


def inputs_digest(files: dict[str, Path], userland: str) -> str:
    """A short hash of everything the base image is made from (paths, sizes, modification times)."""
    digest = hashlib.sha256(f"v1 {userland} {sys.version}".encode())
    for dest in sorted(files):
        st = files[dest].lstat()
        digest.update(f"{dest}\0{files[dest]}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    for marker in ("/var/lib/dpkg/status",):  # host libraries change with package upgrades
        if os.path.exists(marker):
            digest.update(str(os.stat(marker).st_mtime_ns).encode())
    return digest.hexdigest()[:16]
