"""Policies: what turns the chat so far into the model's next message.

A policy is anything with ``act(messages, *, tools=None, seed=None) -> PolicyOutput``. ``messages`` is the
OpenAI-style chat (``{"role", "content"}`` dicts) the episode has built so far, ``tools`` the JSON tool schemas
of the permitted actions, ``seed`` the per-turn sampling seed the rollout engine derives. A policy that needs
the task itself (the oracle) also has ``for_episode(instance) -> Policy``; :func:`bind` calls it when present,
so one policy object can serve many episodes on many threads.

Implementations:

- :class:`OpenAIPolicy`: any OpenAI-compatible chat-completions endpoint (OpenAI, a vLLM or SGLang server),
  with bounded retries (backoff and jitter) of connection errors, 429 and 5xx, never of a request timeout; an
  endpoint whose requests time out :data:`HUNG_AFTER_TIMEOUTS` times in a row is declared hung (the run stops);
  token usage recorded.
- :class:`HFPolicy`: a local transformers model (chat template + ``generate``; CPU is fine).
- :class:`VLLMPolicy`: an in-process vLLM engine (GPU only; ``pip install 'medagentgym[gpu]'``).
- :class:`OraclePolicy`: replays the family's ``reference_solution(instance)`` as model text.
- Grader-audit adversaries: :class:`ConstantPolicy` (always submits one value), :class:`ShotgunPolicy`
  (submits many candidates in one answer), :class:`TracebackPolicy` (submits a traceback), :class:`EmptyPolicy`
  (submits ""). A sound grader scores the last three 0 and the first at most the base rate.

Example:
    >>> policy = make_policy("openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1", temperature=0.7)
    >>> out = policy.act([{"role": "user", "content": "hi"}], seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from medagentgym.env_client.argtypes import nonneg_float, nonneg_int, positive_float, positive_int, probability
from medagentgym.env_client.errors import EnvClientError
from medagentgym.env_client.prompts import inline_tools

ActionFormat = Literal["tool_call", "json"]

__all__ = [
    "HUNG_AFTER_TIMEOUTS",
    "POLICY_HELP",
    "ConstantPolicy",
    "EmptyPolicy",
    "HFPolicy",
    "OpenAIPolicy",
    "OraclePolicy",
    "Policy",
    "PolicyError",
    "PolicyOutput",
    "ShotgunPolicy",
    "TracebackPolicy",
    "VLLMPolicy",
    "add_policy_arguments",
    "bind",
    "describe_policy",
    "endpoint_hint",
    "failures_in_a_row",
    "is_context_overflow",
    "make_policy",
    "model_path_problem",
    "policy_kwargs",
    "probe",
    "render_action",
    "weights_fingerprint",
]


class PolicyError(EnvClientError, RuntimeError):
    """A policy could not produce a message (bad spec, missing extra, endpoint down after retries).

    Attributes:
        status: The endpoint's HTTP status when an endpoint failed (None otherwise or for connection errors).
        context_overflow: The endpoint refused the chat as longer than the model's context: the episode ends
            there as truncated (``reason: context_length``), its turns and usage kept; not an infrastructure
            failure, and a rerun does not retry it.
        unreachable: The endpoint could not be reached or did not answer in time (connection refused, timeout).
        timed_out: The endpoint accepted the request but did not answer within the timeout (never retried):
            a run stops after a few of these in a row (``medagentgym.env_client.rollout``), not after many failed episodes.
        hung: The endpoint is declared hung (:data:`HUNG_AFTER_TIMEOUTS` request timeouts in a row, across every
            episode using the policy): the run stops at once with this error's one line.
    """

    status: int | None = None
    context_overflow: bool = False
    unreachable: bool = False
    timed_out: bool = False
    hung: bool = False


@dataclass
class PolicyOutput:
    """One model message and what it cost.

    Attributes:
        text: The model's message as text (the env parses actions out of it).
        n_prompt_tokens: Prompt tokens billed/seen for this turn (0 for scripted policies).
        n_completion_tokens: Tokens generated for this turn (0 for scripted policies).
        token_ids: Generated ids, when the policy runs the model itself (length ``n_completion_tokens``).
        logprobs: Sampling log-probability of each id in ``token_ids``.
    """

    text: str
    n_prompt_tokens: int = 0
    n_completion_tokens: int = 0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


@runtime_checkable
class Policy(Protocol):
    """Anything that maps a chat to the next assistant message."""

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        """Return the next assistant message for ``messages``."""
        ...


def bind(policy: Policy, instance: Any) -> Policy:
    """Return the policy to use for one episode of ``instance`` (``policy.for_episode`` when it has one)."""
    for_episode = getattr(policy, "for_episode", None)
    return for_episode(instance) if callable(for_episode) else policy


def render_action(action: str, params: dict[str, Any], fmt: ActionFormat = "tool_call") -> str:
    """Write one action as model text, in Qwen2.5's ``<tool_call>`` form or the original JSON form.

    Args:
        action: Action name, e.g. ``"submit_answer"``.
        params: Its arguments.
        fmt: ``"tool_call"`` (``<tool_call>\\n{"name", "arguments"}\\n</tool_call>``) or ``"json"``
            (``{"action", "params"}``, the original MedAgentGym reply format).

    Returns:
        The text a model would emit.
    """
    if fmt == "tool_call":
        return "<tool_call>\n" + json.dumps({"name": action, "arguments": params}, ensure_ascii=False) + "\n</tool_call>"
    if fmt == "json":
        return json.dumps({"action": action, "params": params}, ensure_ascii=False)
    raise PolicyError(f"unknown action format {fmt!r}; use 'tool_call' or 'json'")


# --------------------------------------------------------------------------------------------- scripted


class OraclePolicy:
    """Replays the family's reference solution, one action per turn.

    Args:
        families: Maps a family name to its loaded family object (anything with ``reference_solution``),
            or a callable ``name -> family``.
        fmt: Action text format (see :func:`render_action`).
    """

    def __init__(self, families: dict[str, Any] | Callable[[str], Any], fmt: ActionFormat = "tool_call") -> None:
        self._families, self.fmt = families, fmt

    def for_episode(self, instance: Any) -> _Replay:
        """A policy for one episode of ``instance`` that replays its reference actions, one per turn."""
        fam = self._families(instance.family) if callable(self._families) else self._families[instance.family]
        return _Replay(list(fam.reference_solution(instance)), self.fmt, instance.id)

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        """Refuses: the oracle needs its task; use ``bind(policy, instance)`` (``for_episode``) first."""
        raise PolicyError("OraclePolicy needs its task: call medagentgym.env_client.policies.bind(policy, instance) first")


class _Replay:
    def __init__(self, actions: list[dict[str, Any]], fmt: ActionFormat, task_id: str) -> None:
        self.actions, self.fmt, self.task_id, self.turn = actions, fmt, task_id, 0

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        if self.turn >= len(self.actions):
            raise PolicyError(f"oracle ran out of reference actions for {self.task_id} after {self.turn} turns; "
                              "the reference solution must end with submit_answer")
        step = self.actions[self.turn]
        self.turn += 1
        return PolicyOutput(render_action(step["action"], step.get("params", {}), self.fmt))


class _Submitter:
    """Base of the adversaries: every turn submits ``self.answer()``."""

    fmt: ActionFormat = "tool_call"
    submit_action = "submit_answer"
    answer_key = "answer"

    def answer(self) -> str:
        """The text submitted every turn."""
        raise NotImplementedError

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        """Submit ``self.answer()`` at once, whatever the chat says."""
        return PolicyOutput(render_action(self.submit_action, {self.answer_key: self.answer()}, self.fmt))


class ConstantPolicy(_Submitter):
    """Always submits the same value (default ``"0"``): its score estimates the grader's base rate."""

    def __init__(self, value: str = "0", fmt: ActionFormat = "tool_call") -> None:
        self.value, self.fmt = value, fmt

    def answer(self) -> str:
        return self.value


class ShotgunPolicy(_Submitter):
    """Submits many candidates at once (integers, booleans, yes/no): a sound grader gives 0."""

    def __init__(self, upto: int = 100, fmt: ActionFormat = "tool_call") -> None:
        self.upto, self.fmt = upto, fmt

    def answer(self) -> str:
        words = ["True", "False", "true", "false", "yes", "no", "None", "A", "B", "C", "D"]
        return ", ".join([str(i) for i in range(self.upto + 1)] + words)


class TracebackPolicy(_Submitter):
    """Submits a Python traceback, which substring graders over execution output used to accept."""

    def __init__(self, fmt: ActionFormat = "tool_call") -> None:
        self.fmt = fmt

    def answer(self) -> str:
        return ('Traceback (most recent call last):\n  File "/workspace/main.py", line 3, in <module>\n'
                "    answer = df['value'].mean() / 0\nZeroDivisionError: float division by zero")


class EmptyPolicy(_Submitter):
    """Submits an empty answer."""

    def __init__(self, fmt: ActionFormat = "tool_call") -> None:
        self.fmt = fmt

    def answer(self) -> str:
        return ""


# --------------------------------------------------------------------------------------------- models


def _plain_messages(messages: list[dict]) -> list[dict]:
    """Messages an OpenAI endpoint accepts without tool-call ids: tool results become user turns."""
    out = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


_TOOL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)


def _native_messages(messages: list[dict]) -> list[dict]:
    """The chat as a function-calling endpoint expects it: an assistant turn's ``<tool_call>`` blocks become
    ``tool_calls`` (ids ``call_<turn>_<i>``) and the observation after it a ``role: "tool"`` message answering
    the first call (the env runs one action per turn; further calls are answered as not executed).

    Example:
        >>> _native_messages([{"role": "assistant", "content": '<tool_call>{"name": "f", "arguments": {}}'
        ...                    '</tool_call>'}, {"role": "tool", "content": "ok"}])[1]["tool_call_id"]
        'call_1_0'
    """
    out: list[dict] = []
    pending: list[str] = []  # ids of the last assistant turn's calls, still to be answered
    turn = 0
    for m in messages:
        role = m["role"]
        if role == "assistant":
            turn += 1
            text = m.get("content") or ""
            calls = []
            for i, block in enumerate(_TOOL_BLOCK.findall(text)):
                try:
                    obj = json.loads(block)
                    name, args = str(obj["name"]), obj.get("arguments", {})
                except (ValueError, KeyError, TypeError):
                    continue  # not a call the endpoint could have made: it stays in the text
                calls.append({"id": f"call_{turn}_{i}", "type": "function",
                              "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}})
            if calls:
                rest = _TOOL_BLOCK.sub("", text).strip()
                out.append({"role": "assistant", "content": rest or None, "tool_calls": calls})
                pending = [c["id"] for c in calls]
            else:
                out.append({"role": "assistant", "content": text})
                pending = []
        elif role == "tool" and pending:
            out.append({"role": "tool", "tool_call_id": pending[0], "content": m.get("content") or ""})
            out += [{"role": "tool", "tool_call_id": cid, "content": "(not executed: one action per turn)"}
                    for cid in pending[1:]]
            pending = []
        elif role == "tool":  # a tool result with no call to answer: plain text, as without native tools
            out.append({"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"})
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    return out


#: Hints shown once with an endpoint's own error, by HTTP status.
_ENDPOINT_HINTS = {
    400: "the request was refused: often a prompt longer than the model's context (lower --max-turns or "
         "--max-tokens) or a parameter the server does not support (check --extra-body)",
    401: "the key was refused: set OPENAI_API_KEY (or the server's key) for this endpoint",
    403: "the key may not use this model or endpoint",
    404: "no such model or URL: check MODEL and BASE_URL in 'openai:MODEL@BASE_URL' (it usually ends in /v1)",
    413: "the request is too large for the server: lower --max-turns",
    422: "the server could not process the request: check the model name and --extra-body",
    429: "rate limited after every retry: lower --concurrency or raise the limit",
}


#: What OpenAI, vLLM, SGLang and TGI say when a chat does not fit the model's context (a 400).
_CONTEXT_OVERFLOW = re.compile(r"context[_ ]length|maximum context|context window|prompt is too long|too many tokens|"
                               r"maximum (?:input|model) length|exceeds the (?:model's )?(?:max|context)",
                               re.IGNORECASE)


def is_context_overflow(status: int | None, message: str) -> bool:
    """Whether an endpoint error says the chat is longer than the model's context (400/413 with such words).

    Example:
        >>> is_context_overflow(400, "This model's maximum context length is 4096 tokens. However, you requested 5000")
        True
    """
    return status in (400, 413, 422) and bool(_CONTEXT_OVERFLOW.search(message or ""))


def endpoint_hint(status: int | None) -> str:
    """A one-line hint for an endpoint error status (5xx and connection errors: the server is down or busy)."""
    if status is None:
        return "the endpoint did not answer: check that the server runs and BASE_URL is right"
    return _ENDPOINT_HINTS.get(status, "the server failed: check its log" if status >= 500 else "see the message")


#: The probe's timeout: a model list comes back at once from a live server, whatever the chat timeout. Also the
#: cap of the liveness check after a request timeout (a 1-token chat: a live server answers it at once).
_PROBE_TIMEOUT_S = 15.0

#: Request timeouts in a row, across every episode using one :class:`OpenAIPolicy` (and the liveness check after
#: the first), that declare its endpoint hung: the run stops (``medagentgym.env_client.rollout``) with one line. At the
#: defaults (``--timeout 60``) a hang is declared within ``60 + 15`` s at any concurrency (see OpenAIPolicy).
HUNG_AFTER_TIMEOUTS = 2

#: Longest ``Retry-After`` honoured (seconds); a longer one is cut to this.
_MAX_RETRY_AFTER_S = 60.0


def probe(policy: Any) -> None:
    """Probe a policy's endpoint once before a run (``OpenAIPolicy.probe``); other policies have none.

    Raises:
        PolicyError: The endpoint cannot be used (one line).
    """
    check = getattr(policy, "probe", None)
    if callable(check):
        check()


def _retry_after(exc: BaseException) -> float | None:
    """The server's ``Retry-After`` in seconds (a number of seconds; an HTTP date is ignored), capped."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return min(max(float(value), 0.0), _MAX_RETRY_AFTER_S) if value is not None else None
    except ValueError:
        return None


@dataclass
class OpenAIPolicy:
    """An OpenAI-compatible chat-completions endpoint.

    The SDK's own retries are off. A connection error (refused, reset), a 429 and a 5xx are retried up to
    ``max_retries`` times (tenacity: exponential backoff from ``backoff_s`` with jitter, at least the server's
    ``Retry-After``); a request timeout is never retried: the endpoint accepted the request and did not answer, and
    sending it again would only wait again. Every request timeout counts, across all episodes using this policy
    (threads or coroutines), until a request is answered; after the first of a streak one 1-token chat checks that
    the endpoint is alive (within ``min(timeout_s, 15)`` s). :data:`HUNG_AFTER_TIMEOUTS` timeouts in a row declare
    the endpoint hung: that request, and every later one without sending it, fails with ``PolicyError.hung`` and a
    line naming the endpoint, the timeout and what to do; ``medagentgym.env_client.rollout`` stops the run on it.

    How long a hang costs (defaults: ``--timeout 60``, evaluate/rollout ``--concurrency 4``, collect 8; computed, not
    measured at these values): the first request in flight when the endpoint hangs times out within ``timeout_s``,
    then a second one or the liveness check (15 s) declares the hang: within ``timeout_s + 15`` s, 75 s at the
    defaults, at any concurrency. At concurrency 1 the run ends then. At higher concurrency the run ends once the
    requests already sent before the declaration have timed out (none is sent after it): about ``timeout_s`` (60 s)
    when every episode was waiting on the model as it hung, at most ``2 x timeout_s + 15`` s (135 s).

    Args:
        model: Model name the endpoint serves.
        base_url: Endpoint root, e.g. ``http://127.0.0.1:8000/v1``; ``None`` means OpenAI's.
        api_key: Key; defaults to ``$OPENAI_API_KEY`` and then ``"EMPTY"`` (local servers ignore it).
        temperature: Sampling temperature (the original harness ignored it; we send it every call).
        max_tokens: Completion cap per turn.
        top_p: Nucleus sampling mass.
        max_retries: Retries of a request after a connection error, a 429 or a 5xx (``--max-retries``); a timeout
            is never retried.
        timeout_s: Per-request timeout in seconds (``--timeout``).
        native_tools: Send ``tools=`` (function calling) and the history as ``tool_calls`` / ``role: "tool"``
            messages; the endpoint's tool calls come back as ``<tool_call>`` text, so the env parses one
            format. Off: the endpoint never sees ``tools``, so their compact form is put into the system message
            (``medagentgym.env_client.prompts.inline_tools``) and tool results are user turns.
        extra_body: Extra JSON fields for every request (e.g. ``{"top_k": 20}`` for vLLM, ``{"reasoning_effort":
            "low"}``).
        backoff_s: First retry's wait in seconds (doubling, capped at 16x, plus up to ``backoff_s`` of jitter).

    Raises:
        PolicyError: From :meth:`act` when the endpoint fails for good; ``status`` holds its HTTP status.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    temperature: float = 0.7
    max_tokens: int = 2048
    top_p: float = 1.0
    max_retries: int = 2
    timeout_s: float = 60.0
    native_tools: bool = False
    extra_body: dict[str, Any] | None = None
    backoff_s: float = 0.5
    _client: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        import openai  # runtime dependency, imported here so `from medagentgym import env_client` stays light

        if self.max_retries < 0 or not self.timeout_s > 0 or self.backoff_s < 0:
            raise PolicyError(f"max_retries={self.max_retries} must be >= 0, timeout_s={self.timeout_s} > 0 and "
                              f"backoff_s={self.backoff_s} >= 0")
        self._openai = openai
        # max_retries=0: the SDK would retry a timed-out request too; _retrying retries only what may pass
        self._client = openai.OpenAI(base_url=self.base_url, api_key=self._key(), timeout=self.timeout_s,
                                     max_retries=0)
        self._aclients: Any = weakref.WeakKeyDictionary()  # one AsyncOpenAI per event loop (loop-bound sockets)
        #: The model ids the endpoint said it answered with (each response's ``model``: a snapshot or served
        #: name that may differ from ``model``); reports record them as provenance.
        self.served_models: set[str] = set()
        self._health = threading.Lock()  # guards the timeout streak, shared by every episode's thread
        self._checking = threading.Lock()  # held while one liveness check runs
        self.timeouts_in_a_row = 0
        self._hung: str | None = None  # the hung line, once declared

    def _seen(self, resp: Any) -> Any:
        served = getattr(resp, "model", None)
        if isinstance(served, str) and served:
            self.served_models.add(served)
        return resp

    def _key(self) -> str:
        return self.api_key or os.environ.get("OPENAI_API_KEY", "EMPTY")

    def sampling(self) -> dict[str, Any]:
        """What changes the sampled episodes (recorded in evaluation reports and resume keys)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "native_tools": self.native_tools, "extra_body": self.extra_body or {}}

    def _request(self, messages: list[dict], tools: list[dict] | None, seed: int | None) -> dict[str, Any]:
        native = self.native_tools and bool(tools)
        # Without native tools the endpoint never sees `tools`: their compact form goes into the system message.
        chat = _native_messages(messages) if native else _plain_messages(inline_tools(messages, tools))
        kwargs: dict[str, Any] = {"model": self.model, "messages": chat,
                                  "temperature": self.temperature, "max_tokens": self.max_tokens, "top_p": self.top_p}
        if seed is not None:
            kwargs["seed"] = seed
        if native:
            kwargs["tools"] = tools
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    # ------------------------------------------------------------------ retries and the hang detector

    def _retryable(self, exc: BaseException) -> bool:
        """A connection error (not a timeout), a 429 or a 5xx: the next try may pass."""
        o = self._openai
        if isinstance(exc, o.APITimeoutError):
            return False
        if isinstance(exc, o.APIConnectionError):
            return True
        return isinstance(exc, o.APIStatusError) and (exc.status_code == 429 or exc.status_code >= 500)

    def _wait(self, state: Any) -> float:
        """Exponential backoff with jitter, at least the server's ``Retry-After``."""
        import random

        exp = self.backoff_s * min(2 ** (state.attempt_number - 1), 16) + random.uniform(0, self.backoff_s)
        exc = state.outcome.exception() if state.outcome is not None else None
        return max(exp, _retry_after(exc) or 0.0) if exc is not None else exp

    def _retry_kwargs(self) -> dict[str, Any]:
        import tenacity

        return {"stop": tenacity.stop_after_attempt(self.max_retries + 1),
                "retry": tenacity.retry_if_exception(self._retryable), "wait": self._wait, "reraise": True}

    def _hung_error(self) -> PolicyError:
        """The one-line error of a declared hang (only once ``self._hung`` is set)."""
        err = PolicyError(self._hung)
        err.unreachable = err.timed_out = err.hung = True
        return err

    def _check_hung(self) -> None:
        if self._hung is not None:
            raise self._hung_error()

    def _answered(self) -> None:
        with self._health:
            self.timeouts_in_a_row = 0

    def _timed_out(self) -> bool:
        """Count one request timeout; True when it starts a streak (a liveness check should follow)."""
        with self._health:
            self.timeouts_in_a_row += 1
            if self.timeouts_in_a_row >= HUNG_AFTER_TIMEOUTS and self._hung is None:
                where = self.base_url or "OpenAI"
                self._hung = (f"the model endpoint {where} stopped answering: {self.timeouts_in_a_row} requests in "
                              f"a row for {self.model!r} timed out (--timeout {self.timeout_s:g} s, not retried); "
                              f"check that the server is up and not stuck (its log, its GPU), then rerun the same "
                              f"command to resume (raise --timeout if its answers are just slow)")
            return self.timeouts_in_a_row == 1

    def _alive(self) -> None:
        """One 1-token chat after a request timeout, no retry, within ``min(timeout_s, 15)`` s: it answers (any
        HTTP status: the streak ends) or times out (the next timeout of the streak). One check at a time."""
        if not self._checking.acquire(blocking=False):
            return
        try:
            self._one_token_chat(min(self.timeout_s, _PROBE_TIMEOUT_S))
        except self._openai.APITimeoutError:
            self._timed_out()
        except self._openai.APIStatusError:
            self._answered()
        except self._openai.APIError:
            pass  # refused or reset: not a hang; the run's failures in a row see it
        else:
            self._answered()
        finally:
            self._checking.release()

    def _one_token_chat(self, timeout_s: float) -> None:
        """A 1-token chat, not retried (the probe's and the liveness check's)."""
        chat = self._client.with_options(max_retries=0, timeout=timeout_s)
        chat.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Say OK."}],
                                     max_tokens=1, **({"extra_body": self.extra_body} if self.extra_body else {}))

    def _failure(self, exc: Exception) -> PolicyError:
        status = getattr(exc, "status_code", None)
        body = getattr(exc, "message", None) or str(exc)
        where = self.base_url or "OpenAI"
        timed_out = isinstance(exc, self._openai.APITimeoutError)
        if timed_out and self._hung is not None:
            return self._hung_error()
        unreachable = isinstance(exc, self._openai.APIConnectionError)  # APITimeoutError is one
        hint = (f"no answer within --timeout {self.timeout_s:g} s (not retried): check that the server runs and "
                f"BASE_URL is right" if timed_out else endpoint_hint(status))
        err = PolicyError(f"{where} failed for model {self.model!r}: {type(exc).__name__}"
                          f"{f' {status}' if status else ''}: {' '.join(str(body).split())[:300]} "
                          f"(hint: {hint})")
        err.status, err.unreachable, err.timed_out = status, unreachable, timed_out
        err.context_overflow = is_context_overflow(status, str(body))
        return err

    def probe(self) -> None:
        """Ask the endpoint once for its models (``GET /models``, no retry), then for one 1-token chat (no retry,
        ``timeout_s``), before a run starts; it also clears a hang declared in an earlier run.

        A closed port or a wrong URL fails at once, a server that accepts and never answers after ``timeout_s``;
        an endpoint that answers but does not list the model fails with the models it serves; one that lists them
        but does not answer a chat within ``timeout_s`` fails then (not after every episode's retries). An endpoint
        without ``/models`` (404) goes on to the chat.

        Raises:
            PolicyError: One line saying what is wrong and what to do.
        """
        with self._health:
            self.timeouts_in_a_row, self._hung = 0, None
        where = self.base_url or "OpenAI"
        try:
            probe = self._client.with_options(max_retries=0, timeout=min(self.timeout_s, _PROBE_TIMEOUT_S))
            served = [m.id for m in probe.models.list()]
        except self._openai.NotFoundError:
            served = []  # no model list here: the chat below tells
        except self._openai.APITimeoutError as exc:
            wait = min(self.timeout_s, _PROBE_TIMEOUT_S)
            err = PolicyError(f"{where} accepted the connection but did not answer within {wait:g} s (probe: GET "
                              f"/models); check that the server runs and is not overloaded")
            err.unreachable = True
            raise err from exc
        except self._openai.APIError as exc:
            raise self._failure(exc) from exc
        if served and self.model not in served:
            shown = ", ".join(served[:5]) + (f" and {len(served) - 5} more" if len(served) > 5 else "")
            raise PolicyError(f"{where} does not serve model {self.model!r}; it serves {shown} "
                              f"(use openai:MODEL@{self.base_url or 'URL'})")
        self._probe_chat(where)

    def _probe_chat(self, where: str) -> None:
        """One 1-token chat, no retry, within ``timeout_s``: an endpoint that lists its models but never answers a
        chat fails here, once, instead of after every episode's retries. Any other error is left to the run (its
        retries and its failures in a row): the endpoint did answer."""
        try:
            self._one_token_chat(self.timeout_s)
        except self._openai.APITimeoutError as exc:
            err = PolicyError(f"{where} lists its models but did not answer a 1-token chat for {self.model!r} "
                              f"within --timeout {self.timeout_s:g} s (probe); check that the server is not stuck "
                              f"or overloaded (or raise --timeout)")
            err.unreachable = err.timed_out = True
            raise err from exc
        except self._openai.APIConnectionError as exc:
            raise self._failure(exc) from exc
        except self._openai.APIError:
            return

    def _note(self, exc: BaseException) -> bool:
        """Count a failed request for the hang detector; True when a liveness check should follow."""
        if isinstance(exc, self._openai.APITimeoutError):
            return self._timed_out()
        if isinstance(exc, self._openai.APIStatusError):  # the endpoint answered, if with an error
            self._answered()
        return False

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        """One chat-completions call (retried after a connection error, 429 or 5xx; never after a timeout); endpoint
        errors become ``PolicyError`` with the status and a hint (``hung`` once the endpoint is declared hung)."""
        import tenacity

        self._check_hung()
        request = self._request(messages, tools, seed)
        try:
            resp = tenacity.Retrying(**self._retry_kwargs())(self._client.chat.completions.create, **request)
        except self._openai.APIError as exc:
            if self._note(exc):
                self._alive()
            raise self._failure(exc) from exc
        self._answered()
        return _output(self._seen(resp))

    async def aact(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None
                   ) -> PolicyOutput:
        """:meth:`act` for the rollout engine's ``async`` backend: many requests in flight, no thread each."""
        import asyncio

        import tenacity

        self._check_hung()
        loop = asyncio.get_running_loop()
        if loop not in self._aclients:
            self._aclients[loop] = self._openai.AsyncOpenAI(base_url=self.base_url, api_key=self._key(),
                                                            timeout=self.timeout_s, max_retries=0)
        client, request = self._aclients[loop], self._request(messages, tools, seed)

        async def create() -> Any:  # a coroutine function, so tenacity awaits each try
            return await client.chat.completions.create(**request)

        try:
            resp = await tenacity.AsyncRetrying(**self._retry_kwargs())(create)
        except self._openai.APIError as exc:
            if self._note(exc):
                await asyncio.to_thread(self._alive)
            raise self._failure(exc) from exc
        self._answered()
        return _output(self._seen(resp))


def _output(resp: Any) -> PolicyOutput:
    """A chat-completions response as a PolicyOutput; native tool calls become ``<tool_call>`` text."""
    msg = resp.choices[0].message
    text = msg.content or ""
    for call in msg.tool_calls or []:
        try:
            block = render_action(call.function.name, json.loads(call.function.arguments or "{}"))
        except ValueError:  # malformed arguments: pass them on verbatim so the env reports a parse error
            block = f'<tool_call>\n{{"name": "{call.function.name}", "arguments": {call.function.arguments}}}\n</tool_call>'
        text += ("\n" if text else "") + block
    usage = resp.usage
    return PolicyOutput(text, usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0)


class HFPolicy:
    """A local transformers causal LM, prompted with its chat template and sampled with ``generate``.

    Args:
        path: Model folder or hub id (offline machines: a local folder).
        temperature: Sampling temperature; 0 means greedy.
        max_new_tokens: Completion cap per turn.
        top_p: Nucleus sampling mass.
        model: An already loaded model (then ``path`` only names it); ``tokenizer`` likewise.
    """

    def __init__(self, path: str, *, temperature: float = 0.7, max_new_tokens: int = 512, top_p: float = 1.0,
                 model: Any = None, tokenizer: Any = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path, self.temperature, self.max_new_tokens, self.top_p = path, temperature, max_new_tokens, top_p
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
        self.model = model or AutoModelForCausalLM.from_pretrained(path)
        self.model.eval()
        self._lock = threading.Lock()  # torch's global RNG is seeded per call

    def sampling(self) -> dict[str, Any]:
        """What changes the sampled episodes (recorded in evaluation reports and resume keys)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens}

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        """Render the chat with the model's template and sample one reply (ids and log-probs kept)."""
        from medagentgym.env_client.tokens import generate, render_prompt

        prompt = render_prompt(self.tokenizer, messages, tools)
        with self._lock:
            ids, logprobs = generate(self.model, self.tokenizer, prompt, max_new_tokens=self.max_new_tokens,
                                     temperature=self.temperature, top_p=self.top_p, seed=seed)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return PolicyOutput(text, len(prompt), len(ids), ids, logprobs)


class VLLMPolicy:
    """An in-process vLLM engine (GPU only). For a vLLM *server*, use :class:`OpenAIPolicy`.

    Args:
        path: Model folder or hub id.
        temperature: Sampling temperature.
        max_new_tokens: Completion cap per turn.
        top_p: Nucleus sampling mass.
        engine_kwargs: Passed to ``vllm.LLM`` (e.g. ``tensor_parallel_size``, ``gpu_memory_utilization``).

    Raises:
        PolicyError: If vllm is not installed.
    """

    def __init__(self, path: str, *, temperature: float = 0.7, max_new_tokens: int = 2048, top_p: float = 1.0,
                 **engine_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise PolicyError("vllm is not installed (it needs a CUDA GPU): pip install 'medagentgym[gpu]', "
                              "or serve the model and use 'openai:MODEL@URL'") from exc
        self._vllm, self.temperature, self.max_new_tokens, self.top_p = vllm, temperature, max_new_tokens, top_p
        self.engine = vllm.LLM(model=path, **engine_kwargs)

    def sampling(self) -> dict[str, Any]:
        """What changes the sampled episodes (recorded in evaluation reports and resume keys)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens}

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        """Sample one reply with the vLLM engine (ids and log-probs kept)."""
        params = self._vllm.SamplingParams(temperature=self.temperature, top_p=self.top_p,
                                           max_tokens=self.max_new_tokens, seed=seed, logprobs=0)
        out = self.engine.chat(messages, params, tools=tools, use_tqdm=False)[0]
        comp = out.outputs[0]
        ids = list(comp.token_ids)
        logprobs = [step[tok].logprob for step, tok in zip(comp.logprobs or [], ids)] or None
        return PolicyOutput(comp.text, len(out.prompt_token_ids), len(ids), ids, logprobs)


# --------------------------------------------------------------------------------------------- factory

_KINDS = ("oracle", "constant", "constant:VALUE", "shotgun", "traceback", "empty", "openai:MODEL@BASE_URL",
          "hf:PATH", "vllm:PATH")

#: The policy grammar, shown by every CLI that takes ``--policy`` (``--help``).
POLICY_HELP = """\
policy specs (--policy):
  oracle                   replays each task's reference solution (scores 100 % on a sound family)
  constant[:VALUE]         always submits VALUE (default 0): the grader's constant-answer floor
  shotgun | traceback | empty
                           grader-audit adversaries (many candidates / a traceback / an empty answer)
  openai:MODEL@BASE_URL    any OpenAI-compatible endpoint (vLLM, SGLang, a hosted API); the key comes from
                           OPENAI_API_KEY; without @BASE_URL, OpenAI itself. Probed once (GET /models)
                           before the run; --timeout S per request (never retried: 2 timeouts in a row
                           stop the run), --max-retries N (connection errors, 429, 5xx); a chat longer than the
                           model's context ends that episode as truncated (reason context_length)
  hf:PATH                  a local transformers model folder (CPU works), e.g. a train.py output
  vllm:PATH                an in-process vLLM engine (GPU; pip install 'medagentgym[gpu]')
examples:
  --policy oracle
  --policy openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1 --temperature 0.7 --max-tokens 1024
  --policy openai:gpt-4.1-mini --native-tools --extra-body '{"service_tier": "flex"}'
  --policy hf:runs/sft_tiny --temperature 0 --max-tokens 256
sampling flags (model policies): --temperature, --top-p, --max-tokens (per turn), --native-tools (OpenAI
function calling, with tool_calls / role "tool" history), --extra-body JSON, --timeout, --max-retries
(OpenAI-compatible endpoints)."""


def add_policy_arguments(parser: Any) -> None:
    """Add ``--policy`` and the sampling flags to an argparse parser (``--help`` shows :data:`POLICY_HELP`)."""
    parser.add_argument("--policy", default="oracle", help="policy spec (grammar below); default oracle")
    parser.add_argument("--temperature", type=nonneg_float, default=None, help="sampling temperature of model policies")
    parser.add_argument("--top-p", type=probability, default=None, help="nucleus sampling mass of model policies")
    parser.add_argument("--max-tokens", type=positive_int, default=None, help="completion tokens per turn (model policies)")
    parser.add_argument("--native-tools", action="store_true",
                        help="openai: use the endpoint's function calling (tools=, tool_calls history)")
    parser.add_argument("--extra-body", default=None, metavar="JSON",
                        help="openai: extra JSON fields for every request, e.g. '{\"top_k\": 20}'")
    parser.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                        help="openai: seconds to wait for one answer (default 60)")
    parser.add_argument("--max-retries", type=nonneg_int, default=None, metavar="N",
                        help="openai: retries of a request after a connection error, 429 or 5xx, with backoff "
                             "(default 2); a timed-out request is never retried, and 2 timeouts in a row stop the run")
    parser.add_argument("--max-failures-in-a-row", type=nonneg_int, default=10, metavar="N",
                        help="stop the run (finished episodes kept) once N episodes in a row failed to run, e.g. "
                             "an endpoint that went away; 0: never stop (default 10)")
    epilog = getattr(parser, "epilog", None)
    parser.epilog = f"{epilog}\n\n{POLICY_HELP}" if epilog else POLICY_HELP


def failures_in_a_row(args: Any) -> int | None:
    """``--max-failures-in-a-row`` as ``rollout(max_consecutive_failures=...)``: None when 0 (never stop)."""
    value = getattr(args, "max_failures_in_a_row", None)
    if value is not None and value < 0:
        raise PolicyError(f"--max-failures-in-a-row {value} must be >= 0 (0: never stop)")
    return value or None


def policy_kwargs(args: Any) -> dict[str, Any]:
    """The sampling keyword arguments of :func:`make_policy` set on the command line (unset ones left out).

    Raises:
        PolicyError: ``--extra-body`` is not a JSON object, or a flag does not apply to the policy.
    """
    kwargs: dict[str, Any] = {}
    for name in ("temperature", "top_p", "max_tokens"):
        if getattr(args, name, None) is not None:
            kwargs[name] = getattr(args, name)
    openai_only = {"native_tools": bool(getattr(args, "native_tools", False))}
    if getattr(args, "extra_body", None):
        try:
            body = json.loads(args.extra_body)
        except ValueError as exc:
            raise PolicyError(f"--extra-body is not JSON ({exc}); pass an object, e.g. '{{\"top_k\": 20}}'") from None
        if not isinstance(body, dict):
            raise PolicyError("--extra-body must be a JSON object, e.g. '{\"top_k\": 20}'")
        openai_only["extra_body"] = body
    timeout, retries = getattr(args, "timeout", None), getattr(args, "max_retries", None)
    if timeout is not None:
        if not timeout > 0:
            raise PolicyError(f"--timeout {timeout:g} must be > 0 seconds")
        openai_only["timeout_s"] = float(timeout)
    if retries is not None:
        if retries < 0:
            raise PolicyError(f"--max-retries {retries} must be >= 0")
        openai_only["max_retries"] = int(retries)
    if any(v is not None and v is not False for v in openai_only.values()):
        if not str(args.policy).startswith("openai:"):
            raise PolicyError(f"--native-tools, --extra-body, --timeout and --max-retries apply to "
                              f"'openai:MODEL@URL' policies, not {args.policy!r}")
        kwargs.update({k: v for k, v in openai_only.items() if v is not None and v is not False})
    return kwargs


def weights_fingerprint(path: str) -> str:
    """A fingerprint of the model weights at ``path``: sha256 over the names, sizes and mtimes of its weight
    files plus the bytes of its small config files, so retrained weights at the same path get a new value.
    A path that is not a local folder (a hub id) is its own fingerprint."""
    import hashlib
    from pathlib import Path

    root = Path(path)
    if not root.is_dir():
        return f"id:{path}"
    digest = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = f.relative_to(root).as_posix()
        st = f.stat()
        if f.suffix in (".json", ".txt", ".model", ".jinja") and st.st_size < (1 << 22):
            digest.update(f"{rel}\0".encode() + f.read_bytes())
        elif f.suffix in (".safetensors", ".bin", ".pt", ".pth", ".gguf"):
            digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return "sha256:" + digest.hexdigest()[:16]


def model_path_problem(path: str) -> str | None:
    """Why ``path`` (``hf:PATH``, ``vllm:PATH``, a recipe's ``model.name_or_path``) cannot be loaded, found
    without touching the network; None when it may load.

    A local folder must exist: a path that starts with ``/``, ``.`` or ``~``, has more than one ``/``, or whose
    first part is a folder here (``runs/ppo_tny``) is local, and a missing one is named at once with the nearest
    existing siblings (instead of a Hub lookup that waits for the network and reports a connection error). An
    ``org/name`` Hub id passes, unless ``HF_HUB_OFFLINE`` is set and it is not in the local Hub cache.

    Example:
        >>> model_path_problem("/no/such/model")
        "no model folder at '/no/such/model' (/no does not exist)"
    """
    import difflib
    from pathlib import Path

    p = Path(path).expanduser()
    if p.is_dir():
        return None if any(p.iterdir()) else f"the model folder {path!r} is empty"
    if p.exists():
        return f"{path!r} is a file, not a model folder"
    parts = p.parts
    local = path.startswith(("/", ".", "~")) or len(parts) > 2 or (len(parts) == 2 and Path(parts[0]).is_dir())
    if local:
        parent = next((a for a in p.parents if a.is_dir()), Path("."))  # the nearest folder that exists
        first_missing = next((a for a in [p, *p.parents] if a.parent == parent), p)
        near = difflib.get_close_matches(first_missing.name, [c.name for c in parent.iterdir() if c.is_dir()], n=2)
        hint = f"; did you mean {' or '.join(str(parent / n) for n in near)}?" if near else ""
        return f"no model folder at {path!r} ({first_missing} does not exist){hint}"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") and len(parts) == 2:
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return None
        if not isinstance(try_to_load_from_cache(path, "config.json"), str):
            return (f"{path!r} is neither a local folder nor in the Hub cache, and HF_HUB_OFFLINE is set: download "
                    f"it first, or pass a local folder")
    return None


def describe_policy(spec: str, policy: Any = None, **kwargs: Any) -> dict[str, Any]:
    """What identifies a policy's episodes: its spec, its sampling settings and (local models) its weights.

    Args:
        spec: The policy spec string.
        policy: The built policy, whose ``sampling()`` is used when it has one.
        **kwargs: The sampling keyword arguments it was built with (used when ``policy`` has no ``sampling``).
    """
    sampling = policy.sampling() if callable(getattr(policy, "sampling", None)) else dict(kwargs)
    out: dict[str, Any] = {"spec": spec, "sampling": sampling}
    kind, _, arg = spec.partition(":")
    if kind in ("hf", "vllm") and arg:
        out["weights"] = weights_fingerprint(arg)
    return out


def make_policy(spec: str, *, families: dict[str, Any] | Callable[[str], Any] | None = None,
                fmt: ActionFormat = "tool_call", **kwargs: Any) -> Policy:
    """Build a policy from a short spec string (what the CLIs take; grammar in :data:`POLICY_HELP`).

    Args:
        spec: One of ``oracle``, ``constant``, ``constant:VALUE``, ``shotgun``, ``traceback``, ``empty``,
            ``openai:MODEL@BASE_URL`` (or ``openai:MODEL`` for OpenAI itself), ``hf:PATH``, ``vllm:PATH``.
        families: For ``oracle``: family name -> family object, or a callable returning one.
        fmt: Action text format of the scripted policies.
        **kwargs: Passed to the model policies (``temperature``, ``top_p``, ``max_tokens`` (or
            ``max_new_tokens``: one name per turn cap), ``native_tools``, ``extra_body``); scripted policies
            ignore them.

    Returns:
        The policy.

    Raises:
        PolicyError: On an unknown spec, a missing argument, or a missing optional extra.
    """
    kind, _, arg = spec.partition(":")
    if kind == "oracle" and not arg:
        if families is None:
            raise PolicyError("policy 'oracle' needs the loaded task families: make_policy('oracle', families=...)")
        return OraclePolicy(families, fmt)
    if kind == "constant":
        return ConstantPolicy(arg if arg else "0", fmt)
    if kind in ("shotgun", "traceback", "empty") and not arg:
        return {"shotgun": ShotgunPolicy, "traceback": TracebackPolicy, "empty": EmptyPolicy}[kind](fmt=fmt)
    if kind == "openai" and arg:
        model, _, base_url = arg.partition("@")
        if "max_new_tokens" in kwargs:  # one name for the per-turn cap across model policies
            kwargs["max_tokens"] = kwargs.pop("max_new_tokens")
        return OpenAIPolicy(model, base_url or None, **kwargs)
    if kind in ("hf", "vllm") and arg:
        problem = model_path_problem(arg)
        if problem:
            raise PolicyError(f"policy {spec!r}: {problem}")
        if "max_tokens" in kwargs:
            kwargs["max_new_tokens"] = kwargs.pop("max_tokens")
        return (HFPolicy if kind == "hf" else VLLMPolicy)(arg, **kwargs)
    raise PolicyError(f"unknown policy spec {spec!r}; use one of: {', '.join(_KINDS)}")
