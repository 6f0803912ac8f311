"""medagentgym.sandbox.hostio: host reads of agent-written files refuse FIFOs, symlinks, hard links, directories, huge files,
and never hang or return another file's bytes while the file is being swapped."""

from __future__ import annotations

import os
import threading
import time

import pytest

from medagentgym.sandbox.hostio import UnsafeWorkspaceFile, read_workspace_file

GOOD = b"id,prediction\n1,0.5\n"
SECRET = b"host secret: never in a verdict\n"


@pytest.fixture()
def ws(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace


@pytest.fixture()
def secret(tmp_path):
    path = tmp_path / "secret.txt"
    path.write_bytes(SECRET)
    os.chmod(path, 0o600)
    return path


def test_reads_a_regular_file_and_nested_paths(ws):
    (ws / "predictions.csv").write_bytes(GOOD)
    (ws / "out").mkdir()
    (ws / "out" / "r.json").write_bytes(b"{}")
    assert read_workspace_file(ws, "predictions.csv", max_bytes=1 << 20) == GOOD
    assert read_workspace_file(ws, "./out/r.json", max_bytes=10) == b"{}"
    (ws / "empty").write_bytes(b"")
    assert read_workspace_file(ws, "empty", max_bytes=0) == b""


@pytest.mark.parametrize("relpath", ["", "/etc/passwd", "../secret.txt", "out/../../secret.txt", ".", "a\x00b"])
def test_malformed_paths_are_refused(ws, relpath):
    with pytest.raises(UnsafeWorkspaceFile):
        read_workspace_file(ws, relpath, max_bytes=100)


def test_missing_file_and_missing_workspace(ws, tmp_path):
    with pytest.raises(UnsafeWorkspaceFile, match="does not exist"):
        read_workspace_file(ws, "predictions.csv", max_bytes=100)
    with pytest.raises(UnsafeWorkspaceFile, match="cannot be opened as a directory"):
        read_workspace_file(tmp_path / "nope", "predictions.csv", max_bytes=100)


def test_symlink_to_a_host_file_is_refused(ws, secret):
    (ws / "predictions.csv").symlink_to(secret)
    with pytest.raises(UnsafeWorkspaceFile, match="symlink") as exc:
        read_workspace_file(ws, "predictions.csv", max_bytes=1 << 20)
    assert "host secret" not in str(exc.value)


def test_symlinked_parent_directory_is_refused(ws, secret):
    (ws / "out").symlink_to(secret.parent)
    with pytest.raises(UnsafeWorkspaceFile, match="symlink"):
        read_workspace_file(ws, "out/secret.txt", max_bytes=1 << 20)


def test_hard_link_to_a_host_file_is_refused(ws, secret):
    os.link(secret, ws / "predictions.csv")
    with pytest.raises(UnsafeWorkspaceFile, match="hard links"):
        read_workspace_file(ws, "predictions.csv", max_bytes=1 << 20)


def test_fifo_is_refused_without_blocking(ws):
    os.mkfifo(ws / "predictions.csv")
    done = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            read_workspace_file(ws, "predictions.csv", max_bytes=100)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion below
            errors.append(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    # A blocking open of a FIFO never returns; a generous bound keeps a loaded machine from failing the test.
    assert done.wait(60), "reading a FIFO blocked"
    assert len(errors) == 1 and isinstance(errors[0], UnsafeWorkspaceFile) and "FIFO" in str(errors[0])


def test_directory_and_oversize_are_refused(ws):
    (ws / "predictions.csv").mkdir()
    with pytest.raises(UnsafeWorkspaceFile, match="directory"):
        read_workspace_file(ws, "predictions.csv", max_bytes=100)
    (ws / "big.csv").write_bytes(b"x" * 101)
    with pytest.raises(UnsafeWorkspaceFile, match="101 bytes"):
        read_workspace_file(ws, "big.csv", max_bytes=100)


def test_swap_race_never_hangs_and_never_returns_another_files_bytes(ws, secret):
    """A thread keeps replacing predictions.csv with a symlink to a host file, a FIFO, a hard link and the
    real file while the reader loops: every read returns the real bytes or refuses, and none blocks."""
    target = ws / "predictions.csv"
    stop = threading.Event()
    swaps = [0]

    def swapper() -> None:
        k = 0
        while not stop.is_set():
            tmp = ws / f".swap{k % 4}"
            try:
                if k % 4 == 0:
                    tmp.symlink_to(secret)
                elif k % 4 == 1:
                    os.mkfifo(tmp)
                elif k % 4 == 2:
                    os.link(secret, tmp)
                else:
                    tmp.write_bytes(GOOD)
                os.replace(tmp, target)
                swaps[0] += 1
            except FileExistsError:
                tmp.unlink()
            k += 1

    outcomes = {"good": 0, "refused": 0}
    finished = threading.Event()
    bad: list[object] = []

    def reader() -> None:
        deadline = time.monotonic() + 2.0
        n = 0
        while n < 300 or (time.monotonic() < deadline and n < 5000):
            n += 1
            time.sleep(0)  # let the swapper run between reads (the GIL would otherwise batch them)
            try:
                data = read_workspace_file(ws, "predictions.csv", max_bytes=1 << 20)
            except UnsafeWorkspaceFile:
                outcomes["refused"] += 1
                continue
            except BaseException as exc:  # noqa: BLE001 - anything else is a failure of the contract
                bad.append(exc)
                continue
            if data == GOOD:
                outcomes["good"] += 1
            else:
                bad.append(data)
        finished.set()

    threads = [threading.Thread(target=swapper, daemon=True), threading.Thread(target=reader, daemon=True)]
    for t in threads:
        t.start()
    try:
        assert finished.wait(120), "a read blocked during the swap race"
    finally:
        stop.set()
        threads[0].join(10)
    # The host file must still have its own name: a secret whose only remaining link is the workspace entry is
    # the agent's file (a cleaner that removed the test's temp dir mid-run would make the race meaningless).
    assert secret.read_bytes() == SECRET
    assert not bad, bad[:3]
    assert swaps[0] > 0 and outcomes["good"] + outcomes["refused"] >= 300
