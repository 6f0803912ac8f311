"""Host-side reads of files that jailed code wrote: never by name, always through a checked descriptor.

A grader that runs on the host (as root, often) and opens ``<workspace>/predictions.csv`` by name is racing the
agent: between a check (``is_file()``, ``stat()``) and the ``open`` the file can become a FIFO (the read then
blocks forever), a symlink (the grader reads any host file, e.g. into a verdict's reason) or a hard link to a
file outside the workspace. :func:`read_workspace_file` closes that time-of-check/time-of-use window: it walks
the relative path one component at a time from a directory descriptor of the workspace, never following a
symlink and never blocking, and checks the *opened descriptor* (``fstat``: a regular file with one link, no
larger than the cap, still the inode its workspace entry names) before it reads at most the cap from that same
descriptor. Whatever the file is swapped
for afterwards, the bytes read are those of the regular file that was checked.

Pure standard library; nothing here imports the rest of the sandbox.

Example:
    >>> data = read_workspace_file(session.workspace, "predictions.csv", max_bytes=20 << 20)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["UnsafeWorkspaceFile", "read_workspace_file"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafeWorkspaceFile(ValueError):
    """A workspace file that cannot be read safely: missing, not a regular file, linked, too large.

    The message is one line naming the file and what was wrong. Graders turn it into a wrong-answer verdict:
    the agent wrote (or failed to write) the file, so it is never an infrastructure failure.
    """


def _components(relpath: str) -> list[str]:
    if not isinstance(relpath, str) or not relpath or "\x00" in relpath:
        raise UnsafeWorkspaceFile(f"{relpath!r} is not a file name; give a path relative to the workspace")
    if relpath.startswith("/"):
        raise UnsafeWorkspaceFile(f"{relpath!r} is absolute; give a path relative to the workspace")
    parts = [p for p in relpath.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafeWorkspaceFile(f"{relpath!r} leaves the workspace or names no file")
    return parts


def read_workspace_file(root: Path | str, relpath: str, *, max_bytes: int) -> bytes:
    """Read ``root/relpath`` written by untrusted code, safely against swaps (see the module docstring).

    Args:
        root: Host path of the workspace (trusted: created by the pool, not by the agent).
        relpath: Path inside the workspace, e.g. ``"predictions.csv"`` or ``"out/result.json"``; no ``..``,
            not absolute.
        max_bytes: Size cap in bytes; a larger file is refused (never read in part).

    Returns:
        The file's bytes (at most ``max_bytes``).

    Raises:
        UnsafeWorkspaceFile: The path is malformed or leaves the workspace, a component is missing, a symlink
            or not a directory, the file is not a regular file (FIFO, socket, device, directory), has more
            than one hard link, or is larger than ``max_bytes``.

    Example:
        >>> read_workspace_file(ws, "predictions.csv", max_bytes=1 << 20)[:13]
        b'id,prediction'
    """
    parts = _components(relpath)
    try:
        dir_fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise UnsafeWorkspaceFile(f"workspace {str(root)!r} cannot be opened as a directory ({exc.strerror})"
                                  ) from None
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                raise UnsafeWorkspaceFile(_why("/".join(parts[:i + 1]), exc, directory=True, parent_fd=dir_fd,
                                               entry=name)) from None
            os.close(dir_fd)
            dir_fd = next_fd
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise UnsafeWorkspaceFile(_why(relpath, exc, directory=False)) from None
        try:
            _check_entry(fd, dir_fd, parts[-1], relpath, max_bytes)
            data = _read_capped(fd, relpath, max_bytes)
            # Checked again after the read: the bytes count only if the entry named this one-link inode both
            # before and after them (a swap anywhere in between is refused, however the kernel orders it).
            _check_entry(fd, dir_fd, parts[-1], relpath, max_bytes)
            return data
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def _why(name: str, exc: OSError, *, directory: bool, parent_fd: int | None = None, entry: str = "") -> str:
    import errno

    if exc.errno == errno.ENOTDIR and parent_fd is not None:
        # O_DIRECTORY reports a symlink as "not a directory"; look again (for the message only) to say which.
        try:
            if stat.S_ISLNK(os.stat(entry, dir_fd=parent_fd, follow_symlinks=False).st_mode):
                return f"{name} is a symlink; write into a real directory"
        except OSError:
            pass
    if exc.errno == errno.ENOENT:
        return f"{name} does not exist in the workspace; write it there, then submit"
    if exc.errno == errno.ELOOP:
        return f"{name} is a symlink; write a regular file"
    if exc.errno == errno.ENOTDIR:
        return f"{name} is not a directory" if directory else f"a parent of {name} is not a directory"
    if exc.errno == errno.ENXIO:
        return f"{name} is a socket or device, not a regular file"
    return f"{name} cannot be opened ({exc.strerror})"


def _check_entry(fd: int, dir_fd: int, entry: str, name: str, max_bytes: int) -> None:
    """The descriptor is a regular file within the cap whose ONLY link is the workspace entry ``entry``.

    ``st_nlink == 1`` on the descriptor alone is not enough in a race: the agent can hard-link a host file into
    the workspace, let the grader open it, then remove its own link (the host file is left with one link).
    Requiring the directory entry to still name the same inode, with one link, rules that out: a file that also
    has a name outside the workspace always has two links while the workspace entry points at it.
    """
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a directory" if stat.S_ISDIR(info.st_mode)
                else "a special file")
        raise UnsafeWorkspaceFile(f"{name} is {kind}, not a regular file")
    if info.st_nlink != 1:
        raise UnsafeWorkspaceFile(f"{name} has {info.st_nlink} hard links; write a plain file (one link)")
    try:
        again = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        again = None
    if again is None or (again.st_dev, again.st_ino) != (info.st_dev, info.st_ino) or again.st_nlink != 1:
        raise UnsafeWorkspaceFile(f"{name} was replaced or linked while it was being opened; write it once")
    if info.st_size > max_bytes:
        raise UnsafeWorkspaceFile(f"{name} is {info.st_size} bytes, more than the {max_bytes}-byte limit")


def _read_capped(fd: int, name: str, max_bytes: int) -> bytes:
    chunks, total = [], 0
    while total <= max_bytes:  # read one byte past the cap: a file that grew after fstat is refused too
        try:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
        except BlockingIOError:  # a regular file never blocks; be safe all the same
            raise UnsafeWorkspaceFile(f"{name} would block on read") from None
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > max_bytes:
        raise UnsafeWorkspaceFile(f"{name} grew past the {max_bytes}-byte limit while it was read")
    return b"".join(chunks)
