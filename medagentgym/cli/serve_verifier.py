"""Serve a trained learned verifier over HTTP (FastAPI + uvicorn): batched P(correct) for episodes or texts.

    medagentgym serve-verifier --model runs/verifier_tiny --port 8100
    medagentgym serve-verifier --model runs/verifier_qwen7b --device cuda --batch-size 16 --host 0.0.0.0

Endpoints:

* ``POST /score`` with ``{"trajectories": [<trajectory JSON record>, ...]}`` (records as stored in a trajectory
  JSONL) or ``{"texts": ["<rendered text>", ...]}`` (exactly one of the two) answers ``{"scores": [p, ...]}``,
  one probability per item in request order. A request is scored in length-sorted batches of ``--batch-size``;
  concurrent requests are served one at a time. A malformed item is a 422 whose ``detail`` names it.
* ``GET /health`` answers ``{"status": "ok", "model", "max_length"}``.

Clients: ``medagentgym.rewards.verifier.HTTPVerifier(url)`` (httpx only; a failed call scores None, never 0), e.g. as
``reward.verifier: http://host:8100`` in a GRPO recipe or ``--verifier`` of ``medagentgym score``.
The server has no authentication: bind to loopback unless a trusted network needs it. Ctrl-C stops it with one
line (exit 130); it writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any

from pydantic import BaseModel, ConfigDict

from medagentgym.env_client.argtypes import port, positive_int

__all__ = ["ScoreRequest", "create_app", "main"]

#: Most items one request may carry (larger lists are sent in chunks by the client).
MAX_ITEMS = 4096


class ScoreRequest(BaseModel):
    """Body of ``POST /score``: exactly one of ``texts`` or ``trajectories``."""

    model_config = ConfigDict(extra="forbid")

    texts: list[str] | None = None
    trajectories: list[dict[str, Any]] | None = None


def create_app(scorer: Any, *, max_items: int = MAX_ITEMS) -> Any:
    """The FastAPI app serving ``scorer`` (a ``medagentgym.medcopilot.verifier.VerifierScorer`` or any object with
    ``score(items) -> list[float]`` and, optionally, ``path`` and ``max_length``).

    Args:
        scorer: The scorer; it is called from the server's worker threads (``VerifierScorer`` locks itself).
        max_items: Items allowed per request (413 beyond).
    """
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="MedAgentGym learned verifier", version="1")

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "model": str(getattr(scorer, "path", "")),
                "max_length": getattr(scorer, "max_length", None)}

    @app.post("/score")
    def score(request: ScoreRequest) -> dict[str, list[float]]:
        if (request.texts is None) == (request.trajectories is None):
            raise HTTPException(422, "give exactly one of 'texts' (rendered strings) or 'trajectories' (records)")
        items: list[Any] = request.texts if request.texts is not None else request.trajectories
        if len(items) > max_items:
            raise HTTPException(413, f"{len(items)} items in one request; send at most {max_items} per call")
        try:
            scores = [float(s) for s in scorer.score(items)]
        except (ValueError, TypeError) as exc:  # an item that is not a trajectory record, or encodes to nothing
            raise HTTPException(422, " ".join(str(exc).split())) from None
        return {"scores": scores}

    return app


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 with one line on a bad model folder or flag)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="trained verifier folder (output.dir of a verifier recipe)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind; default 127.0.0.1 (loopback)")
    p.add_argument("--port", type=port, default=8100, help="TCP port; default 8100")
    p.add_argument("--device", default=None, help="torch device (cpu, cuda, cuda:1); default the GPU if any")
    p.add_argument("--batch-size", type=positive_int, default=8, help="rows per forward pass; default 8")
    p.add_argument("--max-length", type=positive_int, default=None, help="tokens read per item; default the trained value")
    p.add_argument("--log-level", default="info", help="uvicorn log level; default info")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = p.parse_args(argv)
    try:
        import uvicorn

        from medagentgym.medcopilot.verifier import VerifierScorer

        scorer = VerifierScorer(args.model, device=args.device, batch_size=args.batch_size,
                                max_length=args.max_length)
        print(f"verifier {args.model} on {scorer.device}, max_length {scorer.max_length}: "
              f"http://{args.host}:{args.port}/score", file=sys.stderr, flush=True)
        # uvicorn.Server, not uvicorn.run (which swallows Ctrl-C): the interrupt comes back after a graceful shutdown.
        uvicorn.Server(uvicorn.Config(create_app(scorer), host=args.host, port=args.port,
                                      log_level=args.log_level)).run()
    except KeyboardInterrupt:
        print("\ninterrupted: server stopped; it saves nothing (scores go to the clients), so nothing was lost; rerun "
              "the same command to serve again", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one line for the user, the traceback with --debug
        if args.debug:
            traceback.print_exc()
        print(f"error: {' '.join(str(exc).split()) or type(exc).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
