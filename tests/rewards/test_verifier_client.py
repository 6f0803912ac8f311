"""The verifier's HTTP client and service, with a stand-in scorer (no torch): real uvicorn server on a free port.

A failed call must score None for each of its items, never 0; the request body is texts or trajectory records.
The trained model behind the same service is tested in tests/medcopilot/test_verifier.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym.rewards import HTTPVerifier, RewardError, RewardSpec, VerifierScorerProtocol
from medagentgym.rewards.verifier import request_body

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LengthScorer:
    """Scores an item by its length: texts by characters, trajectory records by step count (deterministic)."""

    path, max_length = "stand-in", 64

    def __init__(self) -> None:
        self.calls: list[int] = []

    def score(self, items):
        self.calls.append(len(items))
        out = []
        for item in items:
            if isinstance(item, str):
                out.append(min(len(item) / 100, 1.0))
            elif "steps" in item:
                out.append(len(item["steps"]) / 10)
            else:
                raise ValueError("not a trajectory record: 'steps' missing")
        return out


@pytest.fixture(scope="module")
def service(load_script, serve_app):
    scorer = LengthScorer()
    return serve_app(load_script("serve_verifier").create_app(scorer, max_items=50)), scorer


def test_http_scores_texts_and_trajectories_in_chunks(service, sample_trajectory_store):
    from medagentgym.env_client.trajectory import TrajectoryStore

    url, scorer = service
    client = HTTPVerifier(url + "/score/", batch_size=3)  # a trailing /score is accepted
    assert client.url == url and client.health()
    texts = ["a" * n for n in (10, 50, 20, 100, 5)]
    scorer.calls.clear()
    assert client.score(texts) == [0.1, 0.5, 0.2, 1.0, 0.05]
    assert scorer.calls == [3, 2]  # 5 items in chunks of 3
    trajs = list(TrajectoryStore(sample_trajectory_store).read())
    expected = [len(t.steps) / 10 for t in trajs]
    assert client.score(trajs) == expected  # pydantic trajectories travel as their JSON records
    records = [json.loads(line) for line in sample_trajectory_store.read_text().splitlines()]
    assert client.score(records) == expected and client.failures == 0
    assert client.score([]) == []
    assert isinstance(client, VerifierScorerProtocol) and isinstance(LengthScorer(), VerifierScorerProtocol)


def test_failed_calls_score_none_never_zero(service):
    import httpx

    url, _ = service
    client = HTTPVerifier(url, batch_size=2)
    assert client.score([{"not": "a trajectory"}, {"steps": []}]) == [None, None]  # 422 from the service
    assert client.failures == 1 and "HTTP 422" in client.last_error and "steps" in client.last_error
    big = HTTPVerifier(url, batch_size=100)
    assert big.score(["x"] * 60) == [None] * 60 and "HTTP 413" in big.last_error  # over the service's max_items
    # both fields, or neither: a 422 naming the rule
    both = httpx.post(f"{url}/score", json={"texts": ["a"], "trajectories": []})
    assert both.status_code == 422 and "exactly one" in both.json()["detail"]

    dead = HTTPVerifier(f"http://127.0.0.1:{free_port()}", timeout_s=2.0)
    assert dead.score(["a", "b", "c"]) == [None, None, None] and not dead.health()
    assert dead.failures == 1 and "ConnectError" in dead.last_error

    spec = RewardSpec.from_weights({"verifier_score": 1.0})  # a missing score is a missing reward, not 0
    assert spec(verifier_score=dead.score(["a"])[0]).total is None
    assert spec(verifier_score=0.25).total == 0.25


def test_malformed_answers_are_failures(serve_app):
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/score")
    def score(body: dict) -> dict:
        n = len(body.get("texts") or [])
        return {"scores": [1.5] + [0.5] * (n - 1)} if n > 1 else {"scores": []}

    client = HTTPVerifier(serve_app(app))
    assert client.score(["one"]) == [None]  # wrong length
    assert client.score(["a", "b"]) == [None, 0.5]  # an out-of-range value is None, the rest kept
    assert client.failures == 2 and "outside [0, 1]" in client.last_error


def test_transient_failures_are_retried(serve_app):
    from fastapi import FastAPI, HTTPException

    app = FastAPI()
    calls = []

    @app.post("/score")
    def score(body: dict) -> dict:
        calls.append(1)
        if len(calls) % 2 == 1:  # every other call: the service is busy
            raise HTTPException(503, "busy")
        return {"scores": [0.5] * len(body["texts"])}

    url = serve_app(app)
    assert HTTPVerifier(url).score(["a", "b"]) == [0.5, 0.5] and len(calls) == 2
    once = HTTPVerifier(url, retries=0)
    assert once.score(["a"]) == [None] and "HTTP 503" in once.last_error and len(calls) == 3


def test_request_body_and_bad_arguments():
    assert request_body(["a", "b"]) == {"texts": ["a", "b"]}
    assert request_body([{"steps": []}]) == {"trajectories": [{"steps": []}]}
    with pytest.raises(RewardError, match="mixes texts and episodes"):
        request_body(["a", {"steps": []}])
    with pytest.raises(RewardError, match="cannot send a int"):
        request_body([3])
    with pytest.raises(RewardError, match="is not http"):
        HTTPVerifier("localhost:8100")
    with pytest.raises(RewardError, match="retries=-1"):
        HTTPVerifier("http://localhost:8100", retries=-1)


def test_serve_script_bad_model_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "medagentgym", "serve-verifier", "--model", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert "\n" not in err and "is not a trained verifier" in err and "recipe=verifier_tiny" in err
