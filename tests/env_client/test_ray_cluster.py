"""A rollout on a Ray cluster started separately (``ray start --head``) joins that cluster instead of starting
its own. Slow (a minute: the head starts, then the actors); skipped only where Ray is not installed (the ``ray``
extra; ``make venv`` does not install it)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from medagentgym import tasks
from medagentgym.env_client.rollout import EnvSpec, rollout

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")


@pytest.fixture()
def ray_head(tmp_path, monkeypatch):
    """A Ray head in its own process group (stopped by killing that group only), and RAY_ADDRESS naming it."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token written under the home directory
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    with __import__("socket").socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray_bin = Path(sys.executable).with_name("ray")
    temp = Path("/tmp") / f"rayt{os.getpid()}"  # Ray's socket paths must stay short
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # the head answers once its GCS is up
            probe = subprocess.run([str(ray_bin), "status", f"--address={address}"], capture_output=True, text=True, check=False)
            if probe.returncode == 0:
                break
            assert head.poll() is None, f"ray start failed: {head.stdout.read()[-2000:]}"
            time.sleep(1)
        else:
            pytest.fail("the Ray head did not come up in 120 s")
        monkeypatch.setenv("RAY_ADDRESS", address)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        os.killpg(head.pid, signal.SIGTERM)  # our head's process group only
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_a_ray_rollout_joins_the_running_cluster(ray_head, tmp_path):
    root = tmp_path / "tasks"
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    spec = EnvSpec(tasks_root=str(root), backend="local", allow_unisolated=True)
    instances = tasks.make("toy_sql", root=root).instances("test")[:2]
    result = rollout(instances, "oracle", spec, concurrency=2, backend="ray")
    assert result.summary.success_rate == 1.0 and result.summary.episodes == 2
    gcs = ray.get_runtime_context().gcs_address  # Ray reports the node's own IP; the port identifies the head
    assert gcs.rsplit(":", 1)[1] == ray_head.rsplit(":", 1)[1], "the driver joined the cluster started above"
    nodes = ray.nodes()
    assert len(nodes) == 1 and nodes[0]["Resources"]["CPU"] == 2.0

