"""The initial chat messages of an episode: the system text (instruction, permitted actions, format, rules) and
the first user message (the question and its context).

Action schemas have one source, the pydantic models in :mod:`medagentgym.env_client.actions` (``tool_schema``), and reach the
model once, by one of two routes:

- ``tool_call`` format: the chat template's tool block (the episode's ``tools``, :func:`episode_tools`) carries
  each action's purpose and parameters; the system text only names the actions (their purposes would be a
  second copy of the block's descriptions), the reply format and the rules.
- ``json`` format, or a consumer that cannot pass ``tools`` to the model (the OpenAI policy without native
  tools, the verifiers and SkyRL adapters): the system text carries a compact form generated from the same
  schemas, one line per action with its purpose, e.g. ``- code_execution(lang?: python|sql, code: str): Run
  Python, or read-only SQL on the task database.`` (:func:`inline_tools` puts it into an existing system
  message; ``system_prompt(..., inline=True)`` builds it directly).
- ``tool_call`` format with a local model whose chat template drops ``tools`` (SmolLM2's ChatML template renders
  the same text with or without them): ``medagentgym.env_client.tokens.render_prompt`` detects that
  (``template_renders_tools``) and renders :func:`inline_tools`' form instead, so the model is told each action's
  parameters and the ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` syntax the parser reads;
  ``medagentgym.medcopilot.data.fit_rows`` does the same to SFT/DPO rows, so training sees what rollouts show.

A third, ``compact`` prompt (``EnvConfig(prompt="compact")``, :func:`compact_system_prompt`) is for tiny models
that learn the reply format from demonstrations (the CPU learning checks, ``medagentgym.medcopilot.learning``): one system line
with the action signatures and the reply format, no tool block. The Qwen2.5 tool block and rules are ~650 tokens
of the tiny model's tokenizer; every attention row of a 140k-parameter model spread over them learns far slower
(docs/benchmarks.md, "Learning"). ``compact_last`` is the same with the question after its context and data lines
(long context first, the question right before the reply): a word of the question then sits as close to the first
reply as it does in a question-only context, so a copy from the question into the query that a short-context
warm-up teaches holds in the whole prompt (the query-choice and error-recovery rungs, issue 30).

Example:
    >>> msgs = initial_messages(instance, ["code_execution", "submit_answer"], fmt="tool_call")
    >>> [m["role"] for m in msgs]
    ['system', 'user']
    >>> action_signature(tool_schemas(["terminal"])[0])
    'terminal(cmd: str)'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from medagentgym.env_client.actions import ACTION_MODELS, tool_schemas
from medagentgym.env_client.parsing import Format

__all__ = ["PROMPTS", "action_signature", "compact_system_prompt", "episode_tools", "initial_messages", "inline_tools",
           "system_prompt", "user_prompt"]

#: Prompt styles: ``full`` (instruction, actions, rules; the tool block in ``tool_call`` format), ``compact`` or
#: ``compact_last`` (compact, the question last).
PROMPTS = ("full", "compact", "compact_last")

_INSTRUCTION = (
    "You are a biomedical data scientist in a sandbox: explore the data, run code, then submit the final answer. "
    "Data is read-only under /data."
)
_FORMATS: dict[str, str] = {
    "tool_call": '<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
    "json": '{"action": ..., "params": {...}}',
}


def action_signature(tool: dict[str, Any]) -> str:
    """The compact text form of one tool schema's parameters: ``name(param: type, optional?: type)``.

    Enumerated values are joined with ``|``; a ``?`` marks an optional parameter.

    Args:
        tool: An OpenAI/Qwen function-tool schema (an item of ``tool_schemas``).

    Returns:
        One line without the description.

    Example:
        >>> action_signature(tool_schemas(["code_execution"])[0])
        'code_execution(lang?: python|sql, code: str)'
    """
    fn = tool["function"]
    params = fn.get("parameters", {})
    required = set(params.get("required", []))
    parts = []
    for key, prop in params.get("properties", {}).items():
        kind = "|".join(map(str, prop["enum"])) if "enum" in prop else {"string": "str"}.get(prop.get("type"), "any")
        parts.append(f"{key}{'' if key in required else '?'}: {kind}")
    return f"{fn['name']}({', '.join(parts)})"


def _actions_block(tools: list[dict[str, Any]], fmt: Format, *, inline: bool) -> list[str]:
    """The actions and the reply format: names only when the chat template's tool block describes the actions and
    the tool-call syntax, else one compact line per action and the syntax spelled out."""
    if not inline and fmt == "tool_call":
        return [f"Actions (see the tools): {', '.join(t['function']['name'] for t in tools)}.",
                "Reply with exactly one <tool_call> block; you may think briefly first."]
    return ["Actions (? = optional):", *(f"- {action_signature(t)}: {t['function']['description']}" for t in tools),
            f"Reply with exactly one {_FORMATS[fmt]}; you may think briefly first."]


def system_prompt(actions: Iterable[str], *, fmt: Format = "tool_call", inline: bool | None = None) -> str:
    """The system text: instruction, the permitted actions, the reply format and the rules.

    Args:
        actions: The family's permitted action names.
        fmt: The reply format the text asks for (the parser accepts both formats whatever this says).
        inline: Put each action's parameters into the text (compact form). Default: only in ``json`` format,
            where no tool block is rendered; pass True for a consumer that cannot show the model ``tools``.

    Returns:
        The system message's content.

    Example:
        >>> "code_execution(" in system_prompt(["code_execution", "submit_answer"], fmt="json")
        True
    """
    inline = fmt == "json" if inline is None else inline
    wanted = set(actions)
    names = [name for name in ACTION_MODELS if name in wanted]
    tools = tool_schemas(names)
    lines = [_INSTRUCTION, "", *_actions_block(tools, fmt, inline=inline), "Rules:"]
    rules = ["Request information about the data before writing code."] if "request_info" in names else []
    rules += ["Only submit_answer is graded, once: it ends the episode, so submit the answer alone."]
    lines += [f"{i}. {rule}" for i, rule in enumerate(rules, 1)]
    return "\n".join(lines)


def compact_system_prompt(actions: Iterable[str], *, fmt: Format = "tool_call") -> str:
    """The ``compact`` system text: the permitted actions' signatures and the reply format, on one line.

    Example:
        >>> compact_system_prompt(["code_execution", "submit_answer"])
        'Actions: code_execution(lang?: python|sql, code: str); submit_answer(answer: str). Reply with one <tool_call> block; submit_answer ends the episode.'
    """
    wanted = set(actions)
    tools = tool_schemas([name for name in ACTION_MODELS if name in wanted])
    block = "<tool_call> block" if fmt == "tool_call" else "JSON object {\"action\": ..., \"params\": {...}}"
    return (f"Actions: {'; '.join(action_signature(t) for t in tools)}. Reply with one {block}; "
            "submit_answer ends the episode.")


def episode_tools(actions: Iterable[str], fmt: Format = "tool_call", *, prompt: str = "full") -> list[dict[str, Any]]:
    """The tool schemas an episode hands to the chat template: the permitted actions' in ``tool_call`` format,
    none in ``json`` format (its system text carries the compact form, so the parameters appear once) or with the
    ``compact`` prompt (its one line names the signatures).

    Example:
        >>> [t["function"]["name"] for t in episode_tools(["submit_answer"])], episode_tools(["submit_answer"], "json")
        (['submit_answer'], [])
    """
    return tool_schemas(actions) if fmt == "tool_call" and prompt == "full" else []


def inline_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``messages`` with the compact form of ``tools`` in the system message, for a model that never sees ``tools``.

    In our own ``tool_call``-format text, the lines naming the actions and the reply format are replaced by the
    compact block (``- name(params): purpose`` per action, the ``<tool_call>`` syntax spelled out), which makes
    it ``system_prompt(actions, inline=True)``. Any other system message gets the block appended (once), and a
    system message is added when there is none. The input is not modified.

    Args:
        messages: OpenAI-style chat messages, usually the episode's ``[system, user, ...]``.
        tools: The tool schemas the episode offered (empty or None: ``messages`` is returned as is).

    Returns:
        A new list; only the system message differs.

    Example:
        >>> msgs = initial_messages(instance, ["terminal", "submit_answer"])
        >>> "terminal(cmd: str)" in inline_tools(msgs, episode_tools(["terminal", "submit_answer"]))[0]["content"]
        True
    """
    if not tools:
        return list(messages)
    out = [dict(m) for m in messages]
    if not out or out[0].get("role") != "system":
        out.insert(0, {"role": "system", "content": ""})
    lines = str(out[0].get("content") or "").split("\n")
    short, block = _actions_block(tools, "tool_call", inline=False), _actions_block(tools, "tool_call", inline=True)
    at = next((i for i in range(len(lines)) if lines[i:i + len(short)] == short), None)
    if at is not None:  # our own tool_call-format text: its names and format lines become the compact block
        lines[at:at + len(short)] = block
    elif not set(block) <= set(lines):
        lines += ["", *block]
    text = "\n".join(lines).strip()
    out[0]["content"] = text
    return out


def user_prompt(instance: Any, *, question_last: bool = False) -> str:
    """The first user message: the question and the instance's context (``question_last``: after it)."""
    parts = []
    if instance.context:
        parts.append(f"Context:\n{instance.context}")
    if instance.data:
        parts.append("Data (read-only): " + ", ".join(f"/data/{name}" for name in sorted(instance.data)))
    question = f"Question: {instance.question}"
    return "\n\n".join([*parts, question] if question_last else [question, *parts])


def initial_messages(instance: Any, actions: Iterable[str], *, fmt: Format = "tool_call",
                     prompt: str = "full") -> list[dict[str, str]]:
    """``[system, user]`` chat messages that open an episode on ``instance`` (``prompt``: one of :data:`PROMPTS`)."""
    if prompt not in PROMPTS:
        raise ValueError(f"prompt style {prompt!r} is unknown; choose one of {', '.join(PROMPTS)}")
    system = system_prompt(actions, fmt=fmt) if prompt == "full" else compact_system_prompt(actions, fmt=fmt)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user_prompt(instance, question_last=prompt == "compact_last")},
    ]
