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

from env_client.actions import parse_call

__all__ = ["FORMAT_EXAMPLES", "Format", "ParseResult", "parse_model_text"]

Format = Literal["tool_call", "json"]

FORMAT_EXAMPLES: dict[str, str] = {
    "tool_call": '<tool_call>\n{"name": "code_execution", "arguments": {"lang": "python", "code": "print(1 + 1)"}}\n'
    "</tool_call>",
    "json": '{"action": "code_execution", "params": {"lang": "python", "code": "print(1 + 1)"}}',
}

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TRIPLE_RE = re.compile(r'("""|\'\'\')(.*?)\1', re.DOTALL)


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
    text = _THINK_RE.sub("", text)
    if "</think>" in text:  # an opening tag lost to the chat template: drop everything before the close
        text = text.rsplit("</think>", 1)[1]
    return text


def _loads_object(text: str) -> tuple[Any, str]:
    """Decode the first JSON object in ``text``; returns (object, text after it)."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object found")
    decoder = json.JSONDecoder()
    try:
        obj, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError:
        fixed = _TRIPLE_RE.sub(lambda m: json.dumps(m.group(2)), text[start:])
        try:
            obj, end = decoder.raw_decode(fixed)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
        return obj, fixed[end:]
    return obj, text[end:]


def _parse_tool_calls(raw: str, text: str) -> ParseResult:
    blocks = _TOOL_CALL_RE.findall(text)
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
        except json.JSONDecodeError:
            return _fail(raw, "tool_call", '"arguments" is a string that is not a JSON object', name)
    if not isinstance(name, str):
        return _fail(raw, "tool_call", '"name" must be a string')
    try:
        return ParseResult(raw=raw, action=parse_call(name, args), format="tool_call", name=name)
    except ValueError as exc:
        return _fail(raw, "tool_call", str(exc), name)


def _parse_json(raw: str, text: str) -> ParseResult:
    fences = _FENCE_RE.findall(text)
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
        return _fail(str(raw), None, f"the reply must be text, got {type(raw).__name__}")
    text = _strip_think(raw)
    if not text.strip():
        return _fail(raw, None, "the reply is empty")
    if "<tool_call>" in text:
        return _parse_tool_calls(raw, text)
    return _parse_json(raw, text)
