"""Policies: what turns the chat so far into the model's next message.

A policy is anything with ``act(messages, *, tools=None, seed=None) -> PolicyOutput``. ``messages`` is the
OpenAI-style chat (``{"role", "content"}`` dicts) the episode has built so far, ``tools`` the JSON tool schemas
of the permitted actions, ``seed`` the per-turn sampling seed the rollout engine derives. A policy that needs
the task itself (the oracle) also has ``for_episode(instance) -> Policy``; :func:`bind` calls it when present,
so one policy object can serve many episodes on many threads.

Implementations:

- :class:`OpenAIPolicy`: any OpenAI-compatible chat-completions endpoint (OpenAI, a vLLM or SGLang server),
  with retries and exponential backoff on transient errors and token usage recorded.
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
import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from env_client.errors import EnvClientError

ActionFormat = Literal["tool_call", "json"]

__all__ = [
    "ConstantPolicy", "EmptyPolicy", "HFPolicy", "OpenAIPolicy", "OraclePolicy", "Policy", "PolicyError",
    "PolicyOutput", "ShotgunPolicy", "TracebackPolicy", "VLLMPolicy", "bind", "make_policy", "render_action",
]


class PolicyError(EnvClientError, RuntimeError):
    """A policy could not produce a message (bad spec, missing extra, endpoint down after retries)."""


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
        fam = self._families(instance.family) if callable(self._families) else self._families[instance.family]
        return _Replay(list(fam.reference_solution(instance)), self.fmt, instance.id)

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        raise PolicyError("OraclePolicy needs its task: call env_client.policies.bind(policy, instance) first")


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
        raise NotImplementedError

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
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


@dataclass
class OpenAIPolicy:
    """An OpenAI-compatible chat-completions endpoint.

    Args:
        model: Model name the endpoint serves.
        base_url: Endpoint root, e.g. ``http://127.0.0.1:8000/v1``; ``None`` means OpenAI's.
        api_key: Key; defaults to ``$OPENAI_API_KEY`` and then ``"EMPTY"`` (local servers ignore it).
        temperature: Sampling temperature (the original harness ignored it; we send it every call).
        max_tokens: Completion cap per turn.
        top_p: Nucleus sampling mass.
        max_retries: Extra attempts after a transient error (connection, timeout, 429, 5xx).
        backoff_s: First backoff; attempt ``i`` waits ``backoff_s * 2**i`` (times a jitter in [0.5, 1)).
        timeout_s: Per-request timeout.
        native_tools: Send ``tools=`` to the endpoint (function calling); native tool calls are turned back
            into ``<tool_call>`` text so the env parses one format. Off by default: the system prompt lists the
            actions already.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    temperature: float = 0.7
    max_tokens: int = 2048
    top_p: float = 1.0
    max_retries: int = 4
    backoff_s: float = 1.0
    timeout_s: float = 120.0
    native_tools: bool = False
    _client: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        import openai  # runtime dependency, imported here so `import env_client` stays light

        self._openai = openai
        self._client = openai.OpenAI(base_url=self.base_url, api_key=self._key(), timeout=self.timeout_s,
                                     max_retries=0)
        self._aclients: Any = weakref.WeakKeyDictionary()  # one AsyncOpenAI per event loop (loop-bound sockets)
        self._transient = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                           openai.InternalServerError)

    def _key(self) -> str:
        return self.api_key or os.environ.get("OPENAI_API_KEY", "EMPTY")

    def _request(self, messages: list[dict], tools: list[dict] | None, seed: int | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": _plain_messages(messages),
                                  "temperature": self.temperature, "max_tokens": self.max_tokens, "top_p": self.top_p}
        if seed is not None:
            kwargs["seed"] = seed
        if self.native_tools and tools:
            kwargs["tools"] = tools
        return kwargs

    def _backoff(self, attempt: int, exc: Exception, jitter: random.Random) -> float:
        """Seconds to wait before the next attempt; raises once the retries are spent."""
        if attempt == self.max_retries:
            raise PolicyError(f"{self.base_url or 'OpenAI'} failed {attempt + 1} times for model "
                              f"{self.model!r}: {type(exc).__name__}: {exc}") from exc
        return self.backoff_s * 2**attempt * (0.5 + jitter.random() / 2)

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        kwargs, jitter = self._request(messages, tools, seed), random.Random(seed)
        for attempt in range(self.max_retries + 1):
            try:
                return _output(self._client.chat.completions.create(**kwargs))
            except self._transient as exc:
                time.sleep(self._backoff(attempt, exc, jitter))
        raise AssertionError("unreachable: the last attempt raises")

    async def aact(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None
                   ) -> PolicyOutput:
        """:meth:`act` for the rollout engine's ``async`` backend: many requests in flight, no thread each."""
        import asyncio

        loop = asyncio.get_running_loop()
        if loop not in self._aclients:
            self._aclients[loop] = self._openai.AsyncOpenAI(base_url=self.base_url, api_key=self._key(),
                                                            timeout=self.timeout_s, max_retries=0)
        client = self._aclients[loop]
        kwargs, jitter = self._request(messages, tools, seed), random.Random(seed)
        for attempt in range(self.max_retries + 1):
            try:
                return _output(await client.chat.completions.create(**kwargs))
            except self._transient as exc:
                await asyncio.sleep(self._backoff(attempt, exc, jitter))
        raise AssertionError("unreachable: the last attempt raises")


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

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        from env_client.tokens import generate, render_prompt

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

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
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


def make_policy(spec: str, *, families: dict[str, Any] | Callable[[str], Any] | None = None,
                fmt: ActionFormat = "tool_call", **kwargs: Any) -> Policy:
    """Build a policy from a short spec string (what the CLIs take).

    Args:
        spec: One of ``oracle``, ``constant``, ``constant:VALUE``, ``shotgun``, ``traceback``, ``empty``,
            ``openai:MODEL@BASE_URL`` (or ``openai:MODEL`` for OpenAI itself), ``hf:PATH``, ``vllm:PATH``.
        families: For ``oracle``: family name -> family object, or a callable returning one.
        fmt: Action text format of the scripted policies.
        **kwargs: Passed to the model policies (``temperature``, ``max_new_tokens`` (``max_tokens`` for
            OpenAI), ...); scripted policies ignore them.

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
    if kind == "hf" and arg:
        return HFPolicy(arg, **kwargs)
    if kind == "vllm" and arg:
        return VLLMPolicy(arg, **kwargs)
    raise PolicyError(f"unknown policy spec {spec!r}; use one of: {', '.join(_KINDS)}")
