"""Parse one model reply into exactly one typed action; two wire formats, auto-detected.

* ``tool_call`` (Qwen2.5 native, the default)::

      <tool_call>
      {"name": "code_execution", "arguments": {"lang": "sql", "code": "SELECT 1"}}
      </tool_call>

* ``json`` (the original MedAgentGym format): one object with exactly the keys ``action`` and ``params``::

      {"action": "validate_code", "params": {"code": "print(1)"}}

  A ```json fence is used when present; ``<think>...</think>`` blocks are ignored; a triple-quoted string value
  (``"code": \"\"\"...\"\"\"``) is accepted and converted to a JSON string.

A reply never raises: a problem comes back as :class:`ParseResult` with ``error`` set, a message that says
precisely what was wrong and shows the expected format. The raw text is always kept.

Example:
    >>> parse_model_text('<tool_call>{"name": "submit_answer", "arguments": {"answer": "42"}}</tool_call>').action
    SubmitAnswer(action='submit_answer', answer='42')
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from medagentgym.env_client.actions import parse_call

__all__ = ["FORMAT_EXAMPLES", "Format", "ParseResult", "parse_model_text"]

Format = Literal["tool_call", "json"]

FORMAT_EXAMPLES: dict[str, str] = {
    "tool_call": '<tool_call>\n{"name": "code_execution", "arguments": {"lang": "python", "code": "print(1 + 1)"}}\n'
    "</tool_call>",
    "json": '{"action": "code_execution", "params": {"lang": "python", "code": "print(1 + 1)"}}',
}

#: Longest reply parsed (characters); a longer one is a parse error. Generation caps a turn far below this (and the
#: HTTP server at 100,000 characters); the bound keeps a direct caller's megabytes from costing the host time.
MAX_REPLY_CHARS = 400_000
_THINK, _THINK_END = "<think>", "</think>"
_CALL, _CALL_END = "<tool_call>", "</tool_call>"
_FENCE = "```"
_TRIPLE_RE = re.compile(r'"""|\'\'\'')


@dataclass(frozen=True)
class ParseResult:
    """The outcome of parsing one reply.

    Attributes:
        raw: The model's text, unchanged.
        action: The typed action, or None on error.
        format: The detected wire format, or None when none was recognisable.
        error: What was wrong (and the expected format), or None.
        name: The action name as written by the model (``validate_code`` stays ``validate_code``), if any.
    """

    raw: str
    action: Any = None
    format: Format | None = None
    error: str | None = None
    name: str | None = None

    @property
    def ok(self) -> bool:
        """True when exactly one valid action was found."""
        return self.action is not None


def _fail(raw: str, fmt: Format | None, message: str, name: str | None = None) -> ParseResult:
    shown = fmt or "tool_call"
    text = f"Invalid action: {message}\nReply with exactly one action, in this format:\n{FORMAT_EXAMPLES[shown]}"
    return ParseResult(raw=raw, format=fmt, error=text, name=name)


def _strip_think(text: str) -> str:
    """Drop ``<think>...</think>`` blocks (each open tag up to the next close tag), in one pass."""
    parts, pos = [], 0
    while True:
        start = text.find(_THINK, pos)
        end = text.find(_THINK_END, start + len(_THINK)) if start >= 0 else -1
        if end < 0:  # no further complete block: a later open tag has no close tag either
            parts.append(text[pos:])
            break
        parts.append(text[pos:start])
        pos = end + len(_THINK_END)
    text = "".join(parts)
    if _THINK_END in text:  # an opening tag lost to the chat template: drop everything before the close
        text = text.rsplit(_THINK_END, 1)[1]
    return text


def _tool_call_blocks(text: str) -> list[str]:
    """The bodies of ``<tool_call>...</tool_call>`` blocks; an unclosed last block runs to the end of the text."""
    blocks, pos = [], 0
    while (start := text.find(_CALL, pos)) >= 0:
        body = start + len(_CALL)
        end = text.find(_CALL_END, body)
        if end < 0:
            blocks.append(text[body:])
            break
        blocks.append(text[body:end])
        pos = end + len(_CALL_END)
    return blocks


def _fences(text: str) -> list[str]:
    """The bodies of ```` ``` ```` fences (an optional ``json``/``JSON`` tag and leading whitespace skipped)."""
    bodies, pos = [], 0
    while (start := text.find(_FENCE, pos)) >= 0:
        body = start + len(_FENCE)
        if text.startswith(("json", "JSON"), body):
            body += 4
        while body < len(text) and text[body].isspace():
            body += 1
        end = text.find(_FENCE, body)
        if end < 0:  # an unclosed fence: no later one can close either
            break
        bodies.append(text[body:end])
        pos = end + len(_FENCE)
    return bodies


def _fix_triple_quotes(text: str) -> str:
    """Turn each ``\"\"\"...\"\"\"`` (or ``\'\'\'...\'\'\'``) string into a JSON string, in linear time."""
    parts, pos, search, dead = [], 0, 0, set()
    while (found := _TRIPLE_RE.search(text, search)) is not None:
        quote, start = found.group(), found.start()
        if quote in dead:
            search = start + 1
            continue
        end = text.find(quote, start + 3)
        if end < 0:  # no closing quote for this kind: none of its later openings closes either
            dead.add(quote)
            search = start + 1
            continue
        parts += [text[pos:start], json.dumps(text[start + 3:end])]
        pos = search = end + 3
    parts.append(text[pos:])
    return "".join(parts)


def _loads_object(text: str) -> tuple[Any, str]:
    """Decode the first JSON object in ``text``; returns (object, text after it)."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object found")
    decoder = json.JSONDecoder()
    try:
        obj, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError:
        fixed = _fix_triple_quotes(text[start:])
        try:
            obj, end = decoder.raw_decode(fixed)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
        except RecursionError:
            raise ValueError("the JSON is nested too deeply") from None
        return obj, fixed[end:]
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    return obj, text[end:]


def _parse_tool_calls(raw: str, text: str) -> ParseResult:
    blocks = _tool_call_blocks(text)
    if len(blocks) > 1:
        return _fail(raw, "tool_call", f"{len(blocks)} tool calls in one reply; make exactly one call per turn")
    try:
        call, rest = _loads_object(blocks[0])
    except ValueError as exc:
        return _fail(raw, "tool_call", f"the <tool_call> body is not valid JSON: {exc}")
    if rest.strip():
        return _fail(raw, "tool_call", "extra text inside <tool_call> after the JSON object")
    if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
        keys = sorted(call) if isinstance(call, dict) else type(call).__name__
        return _fail(raw, "tool_call", f'a tool call needs exactly the keys "name" and "arguments", got {keys}')
    name, args = call["name"], call["arguments"]
    if isinstance(args, str):  # OpenAI-style arguments serialised as a string
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
            return _fail(raw, "tool_call", '"arguments" is a string that is not a JSON object', name)
    if not isinstance(name, str):
        return _fail(raw, "tool_call", '"name" must be a string')
    try:
        return ParseResult(raw=raw, action=parse_call(name, args), format="tool_call", name=name)
    except ValueError as exc:
        return _fail(raw, "tool_call", str(exc), name)


def _parse_json(raw: str, text: str) -> ParseResult:
    fences = _fences(text)
    json_fences = [f for f in fences if f.lstrip().startswith("{")]
    if len(json_fences) > 1:
        return _fail(raw, "json", f"{len(json_fences)} JSON blocks in one reply; send exactly one action")
    body = json_fences[0] if json_fences else text
    try:
        obj, rest = _loads_object(body)
    except ValueError as exc:
        if "{" not in text:
            return _fail(raw, None, "no action found (neither a <tool_call> block nor a JSON action object)")
        return _fail(raw, "json", str(exc))
    if '"action"' in rest or "'action'" in rest:
        return _fail(raw, "json", "several actions in one reply; send exactly one")
    if not isinstance(obj, dict) or set(obj) != {"action", "params"}:
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        return _fail(raw, "json", f'the JSON object must have exactly the keys "action" and "params", got {keys}')
    name = obj["action"]
    if not isinstance(name, str):
        return _fail(raw, "json", '"action" must be a string naming the action')
    try:
        return ParseResult(raw=raw, action=parse_call(name, obj["params"]), format="json", name=name)
    except ValueError as exc:
        return _fail(raw, "json", str(exc), name)


def parse_model_text(raw: str) -> ParseResult:
    """Parse one model reply (either format) into exactly one action.

    Args:
        raw: The full assistant text of one turn.

    Returns:
        A :class:`ParseResult`; ``error`` is set (and ``action`` is None) when the reply is not exactly one valid
        action.
    """
    if not isinstance(raw, str):
        return _fail(f"<{type(raw).__name__}>", None, f"the reply must be text, got {type(raw).__name__}")
    if len(raw) > MAX_REPLY_CHARS:
        return _fail(raw, None, f"the reply has {len(raw):,} characters (at most {MAX_REPLY_CHARS:,} are read); "
                                "send one short action")
    try:
        text = _strip_think(raw)
        if not text.strip():
            return _fail(raw, None, "the reply is empty")
        if _CALL in text:
            return _parse_tool_calls(raw, text)
        return _parse_json(raw, text)
    except Exception as exc:  # noqa: BLE001 - whatever the text makes a parser raise is the reply's error, not ours
        return _fail(raw, None, f"the reply could not be read ({type(exc).__name__})")
