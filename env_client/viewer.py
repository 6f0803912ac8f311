"""One self-contained HTML page to browse a run's episodes (``medagentgym view RUN_DIR``).

The page lists every episode (task, family, outcome, reward, turns, the grader's verdict), filters them by family,
outcome and verdict, and opens one: its prompt, every action with its code, every observation and the verdict.
It needs no server: the data is one JSON document embedded in the page, the list renders only the rows in view
(a virtualised list: 10,000 episodes cost a few dozen row elements), and the filters and the open episode live in
the URL's fragment (``view.html#family=toy_sql&outcome=wrong&episode=12``) so a view can be linked to.

Model-written text is hostile. Nothing from the run is ever parsed as HTML: the embedded JSON has ``<``, ``>``,
``&`` and the line separators escaped (a ``</script>`` in an action cannot close the data block), and the page
builds every element with ``textContent`` (an ``<img onerror=...>`` in an observation is shown as text). The page
loads no script, style or font from anywhere else.

Example:
    >>> page = render_page(load_episodes([]), title="empty run")
    >>> page.startswith("<!DOCTYPE html>") and "</script><img" not in page
    True
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["episode_row", "find_store", "load_episodes", "outcome", "render_page", "verdict_kind", "write_page"]


def find_store(run: Path) -> Path:
    """The trajectories file of a run: ``run`` itself (a ``.jsonl``) or ``run/trajectories.jsonl``.

    Raises:
        FileNotFoundError: Neither exists (one line naming what was looked for).
    """
    if run.is_file():
        return run
    store = run / "trajectories.jsonl"
    if store.is_file():
        return store
    found = sorted(p.name for p in run.glob("*.jsonl")) if run.is_dir() else []
    hint = f" (it holds {', '.join(found[:5])}: pass one of them)" if found else ""
    raise FileNotFoundError(f"{run} is not a run: no {store}{hint}; pass the --out of medagentgym eval, rollout or "
                            f"collect, or a trajectories .jsonl file")


def outcome(final: dict[str, Any] | None) -> str:
    """The episode's outcome in one word: correct, wrong, truncated, grader error, no submission, failed to run."""
    if not final:
        return "failed to run"
    verdict = final.get("verdict") or {}
    if verdict.get("infra"):
        return "failed to run"
    if verdict.get("correct"):
        return "correct"
    if final.get("truncated"):
        return "truncated"
    if verdict.get("error"):
        return "grader error"
    if final.get("reason") not in (None, "submitted"):
        return "no submission"
    return "wrong"


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def verdict_kind(reason: str | None) -> str:
    """The grader's reason with its values blanked (``'2 matches'`` -> ``'# matches'``): what the verdict filter
    groups by."""
    if not reason:
        return "(none)"
    text = _NUMBER.sub("#", _QUOTED.sub("'…'", reason))
    return text[:80]


class _Strings:
    """Interns long repeated strings (system prompts, contexts shared by many episodes): stored once."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def ref(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.items)
            self.items.append(text)
        return self.index[text]


def _action_text(action: dict[str, Any] | None) -> tuple[str, str]:
    """``(name, code or arguments)`` of a parsed action."""
    if not action:
        return "", ""
    name = str(action.get("action", ""))
    if "code" in action:
        return name, str(action["code"])
    rest = {k: v for k, v in action.items() if k != "action"}
    if set(rest) == {"answer"}:
        return name, str(rest["answer"])
    return name, json.dumps(rest, ensure_ascii=False, sort_keys=True) if rest else ""


def episode_row(row: dict[str, Any], strings: _Strings) -> dict[str, Any]:
    """One trajectory record as the page's compact episode (short keys; prompts interned in ``strings``)."""
    header, final = row.get("header") or {}, row.get("final") or None
    verdict = (final or {}).get("verdict") or {}
    steps = []
    for step in row.get("steps") or []:
        name, code = _action_text(step.get("action"))
        raw = str(step.get("raw_text") or "")
        steps.append({"a": name or "(unparsed)", "c": code, "r": raw,
                      "pe": step.get("parse_error") or "", "o": str(step.get("observation") or ""),
                      "s": str(step.get("status") or ""), "ek": step.get("error_kind") or ""})
    lang = (row.get("steps") or [{}])[0].get("action") or {}
    return {"id": str(header.get("task_id", "?")), "f": str(header.get("family", "?")),
            "k": int(header.get("sample_idx", 0) or 0), "o": outcome(final),
            "rw": (final or {}).get("reward"), "t": (final or {}).get("turns", len(steps)),
            "v": str(verdict.get("reason") or ""), "vk": verdict_kind(verdict.get("reason")),
            "ve": str(verdict.get("error") or ""), "end": str((final or {}).get("reason") or ""),
            "p": [[str(m.get("role", "")), strings.ref(str(m.get("content") or ""))] for m in row.get("prompt") or []],
            "st": steps, "lang": str(lang.get("lang", ""))}


def load_episodes(lines: Any, *, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The page's data from trajectory JSON lines (an iterable of str); unreadable lines are counted, not fatal.

    Returns:
        ``{"episodes", "strings", "meta", "unreadable", "families", "outcomes", "verdicts"}``.
    """
    strings = _Strings()
    episodes, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            episodes.append(episode_row(json.loads(line), strings))
        except (ValueError, TypeError, AttributeError):
            bad += 1
    return {"episodes": episodes, "strings": strings.items, "meta": meta or {}, "unreadable": bad,
            "families": sorted(Counter(e["f"] for e in episodes)),
            "outcomes": [o for o, _ in Counter(e["o"] for e in episodes).most_common()],
            "verdicts": [v for v, _ in Counter(e["vk"] for e in episodes).most_common(60)]}


def _script_json(data: Any) -> str:
    """JSON that is inert inside a ``<script type="application/json">`` block, whatever the strings hold."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _escape(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("'", "&#39;"))


def render_page(data: dict[str, Any], *, title: str) -> str:
    """The HTML page (string) for :func:`load_episodes`'s data."""
    from medagentgym.env_client._viewer_page import PAGE

    return (PAGE.replace("__TITLE__", _escape(title))
            .replace("__DATA__", _script_json(data)))


def write_page(run: Path, out: Path | None = None) -> tuple[Path, int]:
    """Read the run's trajectories (and its ``report.json`` headline, if any) and write the page atomically.

    Returns:
        ``(path of the page, episodes on it)``.
    """
    store = find_store(run)
    meta: dict[str, Any] = {"source": str(store)}
    report = store.parent / "report.json"
    if report.is_file():
        try:
            rep = json.loads(report.read_text(encoding="utf-8"))
            meta.update({"policy": rep.get("policy"), "success_rate": rep.get("success_rate"),
                         "ci95": rep.get("ci95"), "episodes": rep.get("episodes")})
        except (OSError, ValueError, AttributeError):
            pass
    with open(store, encoding="utf-8", errors="replace") as fh:
        data = load_episodes(fh, meta=meta)
    out = out or store.parent / "view.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp.write_text(render_page(data, title=f"{store.parent.name or store.name}: episodes"), encoding="utf-8")
    os.replace(tmp, out)
    return out, len(data["episodes"])
