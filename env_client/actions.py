"""Typed actions: one pydantic model per action, a discriminated union on ``action``, and tool schemas.

The five actions (``tasks.ALL_ACTIONS``): ``request_info``, ``code_execution``, ``terminal``, ``debugging``,
``submit_answer``. Models forbid extra keys and describe every field; the same models validate the wire format
of the local episode and the HTTP client, and generate the OpenAI/Qwen tool schemas shown to the model.

The original MedAgentGym JSON actions map onto these: ``validate_code`` → ``code_execution`` with
``lang="python"``, ``debug`` → ``debugging``; its parameter ``data_path`` is accepted for ``target``.

Example:
    >>> parse_call("validate_code", {"code": "print(1)"})
    CodeExecution(action='code_execution', lang='python', code='print(1)')
    >>> tool_schemas(["submit_answer"])[0]["function"]["name"]
    'submit_answer'
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

__all__ = [
    "ACTION_MODELS",
    "ORIGINAL_ALIASES",
    "Action",
    "CodeExecution",
    "Debugging",
    "RequestInfo",
    "SubmitAnswer",
    "Terminal",
    "describe_validation_error",
    "parse_action",
    "parse_call",
    "tool_schemas",
]

#: Largest code/command accepted in one action (characters).
MAX_CODE_CHARS = 100_000
#: Largest submitted answer (characters); an answer is one value, not a dump of output.
MAX_ANSWER_CHARS = 20_000
#: Largest ``request_info`` target or keyterm (characters): a name or a cell value, looked up on the host.
MAX_NAME_CHARS = 1_000


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RequestInfo(_Base):
    """Inspect the data without code: its schema, a table's columns, a column's values, or a term."""

    action: Literal["request_info"] = Field("request_info", description="Action name.")
    info_type: Literal["schema", "column_names", "column_values", "term"] = Field(
        description="What to show; column_values (of a column) and term (matching cells) need keyterm."
    )
    target: str | None = Field(
        None,
        max_length=MAX_NAME_CHARS,
        validation_alias=AliasChoices("target", "data_path"),
        description="A table or file; all data if omitted.",
    )
    keyterm: str | None = Field(None, max_length=MAX_NAME_CHARS, description="The column, or the text to find.")


class CodeExecution(_Base):
    """Run Python, or read-only SQL on the task database."""

    action: Literal["code_execution"] = Field("code_execution", description="Action name.")
    lang: Literal["python", "sql"] = Field("python", description="Python keeps variables between calls.")
    code: str = Field(min_length=1, max_length=MAX_CODE_CHARS, description="The program or query.")


class Terminal(_Base):
    """Run one shell command in the workspace (no network, data read-only)."""

    action: Literal["terminal"] = Field("terminal", description="Action name.")
    cmd: str = Field(min_length=1, max_length=MAX_CODE_CHARS, description="The command line.")


class Debugging(_Base):
    """Explain the last failed execution: error, line, source and a hint."""

    action: Literal["debugging"] = Field("debugging", description="Action name.")
    code: str | None = Field(None, max_length=MAX_CODE_CHARS, description="The failed code.")
    error_msg: str | None = Field(None, max_length=MAX_CODE_CHARS, description="The error seen.")


class SubmitAnswer(_Base):
    """Submit the final answer; it ends the episode and is graded once."""

    action: Literal["submit_answer"] = Field("submit_answer", description="Action name.")
    answer: str = Field(
        max_length=MAX_ANSWER_CHARS,
        description="The answer alone: a number, name, yes/no, date or JSON list.",
    )

    @field_validator("answer", mode="before")
    @classmethod
    def _render(cls, value: Any) -> Any:
        # Models often submit a bare JSON number or list; keep its JSON text rather than rejecting it.
        return value if isinstance(value, str) or value is None else json.dumps(value)


Action = Annotated[RequestInfo | CodeExecution | Terminal | Debugging | SubmitAnswer, Field(discriminator="action")]
ACTION_MODELS: dict[str, type[_Base]] = {
    "request_info": RequestInfo,
    "code_execution": CodeExecution,
    "terminal": Terminal,
    "debugging": Debugging,
    "submit_answer": SubmitAnswer,
}
#: Original MedAgentGym action name -> (our action, params it implies).
ORIGINAL_ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "validate_code": ("code_execution", {"lang": "python"}),
    "debug": ("debugging", {}),
}
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Action)


def describe_validation_error(name: str, exc: ValidationError) -> str:
    """One line per problem: ``code_execution.code: Field required``."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"] if p != name) or "(params)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            allowed = sorted(ACTION_MODELS[name].model_fields) if name in ACTION_MODELS else []
            msg = f"unexpected key; allowed keys: {', '.join(k for k in allowed if k != 'action')}"
        parts.append(f"{name}.{loc}: {msg}")
    return "; ".join(parts)


def parse_call(name: str, params: dict[str, Any] | None) -> Any:
    """Build a typed action from an action name and its parameters.

    Args:
        name: One of our action names or an original alias (``validate_code``, ``debug``).
        params: The parameters (the ``arguments`` of a tool call or the ``params`` of a JSON action).

    Returns:
        The action model instance.

    Raises:
        ValueError: Unknown action name (with the nearest one) or invalid parameters (field-level message).
    """
    if not isinstance(params, dict):
        raise ValueError(f"{name}: parameters must be a JSON object, got {type(params).__name__}")
    implied: dict[str, Any] = {}
    if name in ORIGINAL_ALIASES:
        name, implied = ORIGINAL_ALIASES[name]
    if name not in ACTION_MODELS:
        known = [*ACTION_MODELS, *ORIGINAL_ALIASES]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(ACTION_MODELS)}"
        raise ValueError(f"unknown action {name!r}; {hint}")
    if "action" in params:
        raise ValueError(f"{name}: 'action' goes outside the parameters")
    try:
        return ACTION_MODELS[name].model_validate({**implied, **params, "action": name})
    except ValidationError as exc:
        raise ValueError(describe_validation_error(name, exc)) from None


def parse_action(data: dict[str, Any]) -> Any:
    """Validate a flat typed action dict (``{"action": "terminal", "cmd": "ls"}``) into its model.

    Raises:
        pydantic.ValidationError: The dict is not a valid action.
    """
    return _ADAPTER.validate_python(data)


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def tool_schema(name: str) -> dict[str, Any]:
    """The OpenAI/Qwen function-tool schema of one action (its parameters without the ``action`` key)."""
    return copy.deepcopy(_tool_schema(name))


@functools.lru_cache(maxsize=None)
def _tool_schema(name: str) -> dict[str, Any]:
    # Building pydantic JSON schemas dominates an episode's reset when done every time: cache it once per action.
    model = ACTION_MODELS[name]
    params = _strip_titles(copy.deepcopy(model.model_json_schema()))
    params.pop("description", None)
    params["properties"].pop("action", None)
    for prop in params["properties"].values():
        # Optional fields: show the plain type (tool-call templates render `anyOf [..., null]` poorly).
        variants = [v for v in prop.pop("anyOf", []) if v.get("type") != "null"]
        if len(variants) == 1:
            prop.update(variants[0])
        if prop.get("default", 0) is None:
            prop.pop("default")
        # Size caps guard the server, not the model's choices: validated, but not spent on prompt tokens.
        prop.pop("maxLength", None)
        prop.pop("minLength", None)
    params["required"] = [k for k in params.get("required", []) if k != "action"]
    # Unknown keys are still rejected (the models forbid extras, naming the allowed keys); the shown schema omits
    # `additionalProperties` and an empty `required`, which only cost prompt tokens.
    params.pop("additionalProperties", None)
    if not params["required"]:
        params.pop("required")
    description = " ".join((model.__doc__ or name).split())
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


def tool_schemas(actions: Iterable[str]) -> list[dict[str, Any]]:
    """Tool schemas for ``actions``, in the canonical action order.

    Example:
        >>> [t["function"]["name"] for t in tool_schemas({"submit_answer", "code_execution"})]
        ['code_execution', 'submit_answer']
    """
    wanted = set(actions)
    unknown = wanted - set(ACTION_MODELS)
    if unknown:
        raise ValueError(f"unknown action(s) {sorted(unknown)}; known: {', '.join(ACTION_MODELS)}")
    return [tool_schema(name) for name in ACTION_MODELS if name in wanted]
