"""Browse a run's episodes in one self-contained HTML page.

    medagentgym view runs/eval/oracle                  # writes runs/eval/oracle/view.html
    medagentgym view runs/rollouts/oracle.jsonl --out /tmp/oracle.html
    medagentgym view runs/eval/sft --serve             # also serves it on http://127.0.0.1:8765/ until Ctrl-C

RUN_DIR is the ``--out`` of ``medagentgym eval`` or ``collect`` (its ``trajectories.jsonl``), or a trajectories
``.jsonl`` file (``medagentgym rollout --out``). The page lists every episode with its family, outcome, reward,
turns and the grader's verdict, filters by family, outcome and verdict (and a text search), and opens an episode:
its prompt, every action with its code, every observation and the verdict. It needs no server (open the file in
a browser); the filters and the open episode are kept in the URL's fragment, so a link shows the same view.
Model-written text is shown as text, never run (``medagentgym.env_client.viewer``). Large runs stay fast: the data is one
embedded JSON document and only the rows in view are drawn.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from medagentgym.env_client.argtypes import port
from medagentgym.env_client.viewer import write_page

__all__ = ["main"]


def serve(page: Path, at: int) -> int:
    """Serve ``page`` alone on ``127.0.0.1:at`` until Ctrl-C (exit 130)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = page.read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/", "/" + page.name):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", at), Handler) as server:
        print(f"serving {page} on http://127.0.0.1:{at}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("\nstopped; the page stays in " + str(page), file=sys.stderr)
            return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("run", type=Path, help="a run folder (with trajectories.jsonl) or a trajectories .jsonl file")
    p.add_argument("--out", type=Path, default=None, help="the page to write (default: view.html beside the episodes)")
    p.add_argument("--serve", action="store_true", help="also serve the page on 127.0.0.1 until Ctrl-C")
    p.add_argument("--port", type=port, default=8765, help="port of --serve (default 8765)")
    args = p.parse_args(argv)
    try:
        page, n = write_page(args.run, args.out)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{n} episode(s) -> {page} (open it in a browser; no server needed)")
    return serve(page, args.port) if args.serve else 0


if __name__ == "__main__":
    sys.exit(main())
