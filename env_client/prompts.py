"""The initial chat messages of an episode: the system text (instruction, permitted actions, formats, rules) and
the first user message (the question and its context).

Example:
    >>> msgs = initial_messages(instance, ["code_execution", "submit_answer"], fmt="tool_call")
    >>> [m["role"] for m in msgs]
    ['system', 'user']
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from env_client.actions import ACTION_MODELS, tool_schema
from env_client.parsing import Format

__all__ = ["initial_messages", "system_prompt", "user_prompt"]

_INSTRUCTION = (
    "You are a biomedical data scientist working in a sandboxed environment. Solve the task by exploring the "
    "data and running code, then submit the final answer. Data is mounted read-only under /data; your working "
    "directory is private to this task."
)
_EXAMPLE_PARAMS: dict[str, dict[str, Any]] = {
    "request_info": {"info_type": "column_names", "target": "patients"},
    "code_execution": {"lang": "python", "code": "import pandas as pd\nprint(pd.__version__)"},
    "terminal": {"cmd": "ls -la /data"},
    "debugging": {},
    "submit_answer": {"answer": "42"},
}


def _action_lines(name: str, fmt: Format) -> list[str]:
    schema = tool_schema(name)["function"]
    params = schema["parameters"]["properties"]
    required = set(schema["parameters"].get("required", []))
    lines = [f"- {name}: {schema['description']}"]
    for key, prop in params.items():
        kind = "|".join(map(str, prop["enum"])) if "enum" in prop else prop.get("type", "any")
        flag = "required" if key in required else "optional"
        lines.append(f"    {key} ({kind}, {flag}): {prop.get('description', '')}")
    example = _EXAMPLE_PARAMS[name]
    if fmt == "tool_call":
        call = json.dumps({"name": name, "arguments": example})
        lines.append(f"    e.g. <tool_call>\n    {call}\n    </tool_call>")
    else:
        lines.append(f"    e.g. {json.dumps({'action': name, 'params': example})}")
    return lines


def system_prompt(actions: Iterable[str], *, fmt: Format = "tool_call") -> str:
    """The system text: instruction, the permitted actions with their parameters and formats, and the rules.

    Args:
        actions: The family's permitted action names.
        fmt: The format used in the examples. Both formats are always accepted and explained.
    """
    permitted = [name for name in ACTION_MODELS if name in set(actions)]
    lines = [_INSTRUCTION, "", f"You can use these {len(permitted)} actions, one per reply:"]
    for name in permitted:
        lines += _action_lines(name, fmt)
    other = "json" if fmt == "tool_call" else "tool_call"
    lines += [
        "",
        "Format: reply with exactly one action. "
        + ("Use a tool call: <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>. "
           if fmt == "tool_call" else "Use one JSON object with exactly the keys \"action\" and \"params\". ")
        + ("A JSON object {\"action\": ..., \"params\": {...}} is also accepted."
           if other == "json" else "A <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> block is also accepted."),
        "",
        "Rules:",
    ]
    rules = []
    if "request_info" in permitted:
        rules.append("Request information about the data (schema, columns, values) before writing code.")
    rules += [
        "Exactly one action per reply; you may think briefly before it.",
        "Intermediate outputs are never graded; only submit_answer is.",
        "Submit once: submit_answer ends the episode. Submit only the answer itself, not several candidates.",
    ]
    lines += [f"{i}. {rule}" for i, rule in enumerate(rules, 1)]
    return "\n".join(lines)


def user_prompt(instance: Any) -> str:
    """The first user message: the question and the instance's context."""
    parts = [f"Question: {instance.question}"]
    if instance.context:
        parts.append(f"Context:\n{instance.context}")
    if instance.data:
        parts.append("Data (read-only): " + ", ".join(f"/data/{name}" for name in sorted(instance.data)))
    return "\n\n".join(parts)


def initial_messages(instance: Any, actions: Iterable[str], *, fmt: Format = "tool_call") -> list[dict[str, str]]:
    """``[system, user]`` chat messages that open an episode on ``instance``."""
    return [
        {"role": "system", "content": system_prompt(actions, fmt=fmt)},
        {"role": "user", "content": user_prompt(instance)},
    ]
