"""Token-level trajectories for RL on local models: exact ids, sampling logprobs and an environment mask.

Token-in/token-out: the running id sequence is never re-tokenized. The prompt is the chat template's render of
the episode's first messages (with the tool schemas and the generation prompt; a template that drops ``tools``
gets them in the system message instead, :func:`fit_tools`), tokenized once. Each turn the
model's completion ids are appended as generated, ending with ``<|im_end|>``; then the ids of the rendered
observation turn are appended, tokenized on their own. For the Qwen2.5 template that turn is
``"\\n<|im_start|>user\\n<tool_response>\\n…\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n"`` for tool
messages or ``"\\n<|im_start|>user\\n…<|im_end|>\\n<|im_start|>assistant\\n"`` for user messages; it is obtained
from the template itself (render a fixed two-message chat with and without the new messages and take the
difference), so any template that renders a chat as a concatenation of turns works.

Shapes (per episode, what TRL's GRPO ``rollout_func`` consumes once collated by :func:`collate`):

- ``prompt_ids``: ``list[int]``, length P.
- ``completion_ids``: ``list[int]``, length C, everything after the prompt: model and environment tokens.
- ``env_mask``: ``list[int]``, length C, 1 for model tokens (trained), 0 for environment tokens (context only).
- ``logprobs``: ``list[float]``, length C, the sampling log-probability of each model token, 0.0 for env tokens.

Agreement with a fresh render. ``apply_chat_template(*fit_tools(tok, to_chat_messages(trajectory), tools))``
tokenized in one go starts with exactly ``prompt_ids + completion_ids`` when the model's ids are the canonical tokenization of
their own text, and has one more token: the ``"\\n"`` the template writes after the final ``<|im_end|>``, which
was never generated (tests/env_client/test_tokens.py checks both). Other documented differences:

1. Sampled ids need not be canonical: a model may emit ``"ab"`` as ``a``+``b`` where the tokenizer would
   write one ``ab`` token. The text is identical, the ids differ, and training must use what was sampled.
2. A turn cut by ``max_new_tokens`` has no ``<|im_end|>``; when the episode goes on, one is appended as an
   *environment* token (mask 0) so the next turn starts on a clean boundary. A turn that ends with another stop
   id (``<|endoftext|>``) keeps it and gets ``<|im_end|>`` appended the same way. A fresh render shows neither.
   When the episode ends on a cut turn, nothing is appended: the completion ends without an end-of-turn token,
   which is how TRL recognises a truncated completion (``completions/clipped_ratio``, and
   ``mask_truncated_completions=True`` keeps it out of the loss).
3. Segment boundaries always fall next to special tokens (``<|im_end|>`` / ``<|im_start|>``), which the
   tokenizer never merges across, so tokenizing the observation turn on its own costs nothing there.

Nothing here imports torch or transformers at module level: they are imported inside the generating functions.

Example:
    >>> ep = token_rollout(env, instance, model=model, tokenizer=tok, seed=0, max_new_tokens=64)
    >>> batch = collate([ep])  # {"prompt_ids": [[...]], "completion_ids": [[...]], "env_mask": ..., "logprobs": ...}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TokenEpisode", "collate", "fit_tools", "generate", "generate_batch", "observation_ids", "render_prompt",
           "template_renders_tools", "token_rollout"]

#: ``generate_fn(prompt_and_history_ids, seed) -> (new_ids, logprobs)``.
GenerateFn = Callable[[list[int], "int | None"], "tuple[list[int], list[float]]"]

_PROBE = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


_TOOL_PROBE_CHAT = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
_TOOL_PROBE = [{"type": "function", "function": {"name": "probe_tool", "description": "d",
                                                 "parameters": {"type": "object", "properties": {}}}}]
_RENDERS_TOOLS: dict[str, bool] = {}  # chat template text -> whether it renders a tool list


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template shows a ``tools`` list to the model.

    Renders a fixed two-message chat with and without a one-tool list: identical text means the template drops
    ``tools`` (SmolLM2's ChatML template does; Qwen2.5's renders a ``<tools>`` block). A template that raises on
    ``tools`` counts as not rendering them. The answer is cached per template text.
    """
    template = tokenizer.chat_template
    key = template if isinstance(template, str) else repr(template)
    if key not in _RENDERS_TOOLS:
        plain = tokenizer.apply_chat_template(_TOOL_PROBE_CHAT, add_generation_prompt=True, tokenize=False)
        try:
            with_tools = tokenizer.apply_chat_template(_TOOL_PROBE_CHAT, tools=_TOOL_PROBE, add_generation_prompt=True,
                                                       tokenize=False)
        except Exception:  # noqa: BLE001 - a template that cannot take tools does not show them
            with_tools = plain
        _RENDERS_TOOLS[key] = with_tools != plain
    return _RENDERS_TOOLS[key]


def fit_tools(tokenizer: Any, messages: list[dict],
              tools: list[dict] | None) -> tuple[list[dict], list[dict] | None]:
    """``(messages, tools)`` as the tokenizer's template should get them: unchanged when it renders ``tools``;
    otherwise the schemas' compact text form goes into the system message (``medagentgym.env_client.prompts.inline_tools``:
    one ``- name(param: type, optional?: type): purpose`` line per action and the reply syntax
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, which ``medagentgym.env_client.parsing`` accepts) and
    ``tools`` becomes None, so a model whose template ignores ``tools`` is still told every action's parameters.
    """
    if not tools or template_renders_tools(tokenizer):
        return messages, tools or None
    from medagentgym.env_client.prompts import inline_tools

    return inline_tools(messages, tools), None


def render_prompt(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """Ids of the chat template's render of ``messages`` plus the generation prompt.

    Args:
        tokenizer: A HF tokenizer with a chat template.
        messages: OpenAI-style chat messages.
        tools: JSON tool schemas: rendered by the template when it supports them, else put into the system
            message in their compact text form (:func:`fit_tools`).

    Returns:
        The prompt ids, length P.
    """
    messages, tools = fit_tools(tokenizer, messages, tools)
    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return _encode(tokenizer, text)


def observation_ids(tokenizer: Any, new_messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """Ids the environment appends after a completion that ended with ``<|im_end|>``.

    Renders the template's turn for ``new_messages`` (tool or user messages) plus the next generation prompt,
    preceded by the newline the template writes after ``<|im_end|>``.

    Raises:
        ValueError: If the template does not render a chat as a concatenation of turns.
    """
    def render(msgs: list[dict], gen: bool) -> str:
        return tokenizer.apply_chat_template(msgs, tools=tools or None, add_generation_prompt=gen, tokenize=False)

    head = render(_PROBE, False)
    full = render(_PROBE + list(new_messages), True)
    eos = tokenizer.eos_token
    if not full.startswith(head) or not head.rstrip("\n").endswith(eos):
        raise ValueError("the chat template does not render turns by concatenation ending in the eos token; "
                         "token-level rollouts need a Qwen2.5-style template")
    tail = head[head.rindex(eos) + len(eos):]  # what the template writes after <|im_end|>, usually "\n"
    return _encode(tokenizer, tail + full[len(head):])


class _SeededSampler:
    """A logits processor that draws every row's next token itself, from the row's own random stream.

    ``model.generate`` runs greedy over what this returns: -inf everywhere except the drawn token. The draw is
    Gumbel-max (``argmax(log p + G)`` with ``G`` standard Gumbel noise is an exact sample from ``p``), where
    ``log p`` is the log-softmax of the logits at ``temperature`` after optional top-k / top-p filtering, and the
    noise of row ``i`` comes from a generator seeded with ``seeds[i]``. So a row's tokens depend only on the model,
    its context and its seed: not on which other rows share the batch, their padding, the process, or timing.
    The sampled token's log-probability is kept per step (``(B,)`` floats), never the ``(B, V)`` scores.
    """

    def __init__(self, seeds: list[int], *, temperature: float, top_k: int, top_p: float, device: Any) -> None:
        import torch
        from transformers import LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper

        self.temperature = temperature
        self.gens = [torch.Generator(device=device).manual_seed(int(s) % (1 << 63)) for s in seeds]
        self.filters = LogitsProcessorList(([TopKLogitsWarper(top_k)] if top_k > 0 else [])
                                           + ([TopPLogitsWarper(top_p)] if top_p < 1.0 else []))
        self.steps: list[Any] = []  # per step: (B,) logprob of the drawn token

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        logits = scores.float()
        if self.temperature > 0:
            logits = logits / self.temperature
        logits = self.filters(input_ids, logits)
        logp = torch.log_softmax(logits, dim=-1)  # (B, V)
        if self.temperature > 0:
            uniform = torch.stack([torch.rand(logp.shape[-1], generator=g, device=logp.device) for g in self.gens])
            drawn = (logp - torch.log(-torch.log(uniform.clamp_min(1e-20)))).argmax(dim=-1)
        else:
            drawn = logp.argmax(dim=-1)
        self.steps.append(logp.gather(1, drawn[:, None])[:, 0])
        return torch.full_like(scores, float("-inf")).scatter_(1, drawn[:, None], 0.0)


def _generation_config(max_new_tokens: int, stop: list[int], pad_id: int | None) -> Any:
    """Greedy decoding with every logits-shaping field set to its neutral global default.

    ``model.generate`` fills each field a config leaves unset from the checkpoint's own ``generation_config``
    (Qwen2.5-Instruct ships ``repetition_penalty 1.05``, ``top_k 20``, ``top_p 0.8``, ``temperature 0.7``), which
    would make the sampled policy differ from the one the trainers rescore. Spelling out the defaults stops that.
    """
    from transformers import GenerationConfig

    neutral = GenerationConfig()._get_default_generation_params()
    return GenerationConfig(**{**neutral, "max_length": None, "max_new_tokens": max_new_tokens, "do_sample": False,
                               "num_beams": 1, "eos_token_id": stop, "pad_token_id": pad_id})


def generate_batch(model: Any, tokenizer: Any, contexts: list[list[int]], *, seeds: list[int], max_new_tokens: int,
                   temperature: float = 1.0, top_p: float = 1.0,
                   top_k: int = 0) -> tuple[list[list[int]], list[list[float]]]:
    """Sample one continuation per context in one ``model.generate`` call (left padding).

    Row ``i`` is drawn from its own random stream seeded with ``seeds[i]`` (see :class:`_SeededSampler`), so it
    is the same whether sampled alone or in any batch, and two processes or episodes with different seeds never
    share noise. Logprobs are those of the distribution the ids were drawn from (logits / temperature, after
    top-k / top-p), which is what the trainers rescore when ``top_p=1`` and ``top_k=0``. Only the sampled token's
    logprob is kept per step; no ``(B, T, V)`` scores are stored. The checkpoint's ``generation_config`` is not
    inherited (see :func:`_generation_config`).

    Args:
        model: A HF causal LM (CPU or GPU), unwrapped.
        tokenizer: Its tokenizer (pad and eos ids set).
        contexts: Full id sequences so far, one per row (lengths differ).
        seeds: One per row.
        max_new_tokens: Per-call cap.
        temperature: Sampling temperature; 0 = greedy.
        top_p: Nucleus mass; 1 keeps the whole distribution.
        top_k: 0 disables top-k.

    Returns:
        ``(new_ids, logprobs)``: per row, ``len(new_ids[i]) == len(logprobs[i]) >= 1``, cut after the first stop
        id (eos ``<|im_end|>`` or pad), which is included.

    Raises:
        ValueError: If ``seeds`` and ``contexts`` differ in length.

    Example:
        >>> ids, lps = generate_batch(model, tok, [[1, 2, 3], [4]], seeds=[0, 1], max_new_tokens=8)  # doctest: +SKIP
    """
    import torch

    if len(seeds) != len(contexts):
        raise ValueError(f"{len(seeds)} seeds for {len(contexts)} contexts; pass one seed per context")
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    stop = [t for t in dict.fromkeys((eos_id, pad_id)) if t is not None]
    width = max(len(c) for c in contexts)
    device = next(model.parameters()).device
    ids = torch.full((len(contexts), width), pad_id if pad_id is not None else eos_id, dtype=torch.long)
    mask = torch.zeros((len(contexts), width), dtype=torch.long)
    for i, ctx in enumerate(contexts):  # left padding: every row's next token sits at the same column
        ids[i, width - len(ctx):] = torch.tensor(ctx, dtype=torch.long)
        mask[i, width - len(ctx):] = 1
    sampler = _SeededSampler(seeds, temperature=temperature, top_k=top_k, top_p=top_p, device=device)
    with torch.no_grad():
        sequences = model.generate(ids.to(device), attention_mask=mask.to(device),
                                   generation_config=_generation_config(max_new_tokens, stop, pad_id),
                                   logits_processor=[sampler])
    steps = torch.stack(sampler.steps, dim=1).tolist()  # (B, T_new)
    new_ids, logprobs = [], []
    for i, row in enumerate(sequences[:, width:].tolist()):
        cut = next((k + 1 for k, t in enumerate(row) if t in stop), len(row))
        new_ids.append(row[:cut])
        logprobs.append(steps[i][:cut])
    return new_ids, logprobs


def generate(model: Any, tokenizer: Any, ids: list[int], *, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, seed: int | None = None) -> tuple[list[int], list[float]]:
    """Sample one completion (:func:`generate_batch` with one row) and return its ids and sampling logprobs.

    Args:
        model: A HF causal LM (CPU or GPU).
        tokenizer: Its tokenizer.
        ids: The full context ids so far.
        max_new_tokens: Cap on generated ids.
        temperature: 0 means greedy.
        top_p: Nucleus mass.
        seed: The row's seed (None: one drawn from torch's global RNG).

    Returns:
        ``(new_ids, logprobs)``, equal lengths, the stop id included when one was produced.
    """
    import torch

    if seed is None:
        seed = int(torch.randint(0, 1 << 62, ()).item())
    new, logprobs = generate_batch(model, tokenizer, [ids], seeds=[seed], max_new_tokens=max_new_tokens,
                                   temperature=temperature, top_p=top_p)
    return new[0], logprobs[0]


@dataclass
class TokenEpisode:
    """One episode at token level (see the module docstring for shapes).

    Attributes:
        prompt_ids: Rendered prompt ids (P).
        completion_ids: Model and environment ids after the prompt (C).
        env_mask: 1 for model ids, 0 for environment ids (C).
        logprobs: Sampling logprob per model id, 0.0 for environment ids (C).
        reward: The episode's reward (the graded submit; 0.0 when none; None when grading failed for an
            infrastructure reason).
        trajectory: The env's trajectory record of the episode.
        turns: Model turns taken.
        truncated: The episode ended on a budget (env turns, ``max_completion_tokens`` or the context limit)
            rather than a submit.
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float | None = 0.0
    trajectory: Any = None
    turns: int = 0
    truncated: bool = False

    def extend(self, ids: list[int], *, model: bool, logprobs: list[float] | None = None) -> None:
        """Append ids as model (mask 1) or environment (mask 0) tokens."""
        self.completion_ids.extend(ids)
        self.env_mask.extend([1 if model else 0] * len(ids))
        self.logprobs.extend(logprobs if model and logprobs is not None else [0.0] * len(ids))


def collate(episodes: list[TokenEpisode]) -> dict[str, Any]:
    """Lists per key, one entry per episode: the dict TRL's GRPO ``rollout_func`` returns (plus ``reward``).

    Returns:
        ``{"prompt_ids", "completion_ids", "env_mask", "logprobs", "reward"}``, each a list of length
        ``len(episodes)``.
    """
    return {
        "prompt_ids": [e.prompt_ids for e in episodes],
        "completion_ids": [e.completion_ids for e in episodes],
        "env_mask": [e.env_mask for e in episodes],
        "logprobs": [e.logprobs for e in episodes],
        "reward": [e.reward for e in episodes],
    }


def _hf_generate_fn(model: Any, tokenizer: Any, max_new_tokens: int, temperature: float, top_p: float) -> GenerateFn:
    def fn(ids: list[int], seed: int | None) -> tuple[list[int], list[float]]:
        return generate(model, tokenizer, ids, max_new_tokens=max_new_tokens, temperature=temperature,
                        top_p=top_p, seed=seed)
    return fn


def token_rollout(env: Any, instance: Any, *, tokenizer: Any, model: Any = None, generate_fn: GenerateFn | None = None,
                  seed: int | None = None, max_new_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                  max_completion_tokens: int | None = None, sample_idx: int = 0,
                  policy_name: str = "hf", max_context_tokens: int | None = None) -> TokenEpisode:
    """Drive one episode of ``env`` with a local model at token level.

    Args:
        env: A ``medagentgym.env_client.Env`` (or ``HTTPEnv``).
        instance: The task instance to reset on.
        tokenizer: HF tokenizer with the model's chat template; ``eos_token`` must be the end-of-turn token.
        model: HF causal LM; used when ``generate_fn`` is not given.
        generate_fn: ``(context_ids, seed) -> (new_ids, logprobs)``, e.g. a vLLM-backed generator; overrides
            ``model``.
        seed: Episode seed; turn ``t`` samples with ``seed + t``.
        max_new_tokens: Per-turn generation cap.
        temperature: Sampling temperature (0 = greedy).
        top_p: Nucleus mass.
        max_completion_tokens: Stop the episode (truncated) once the completion is this long.
        sample_idx: Recorded in the trajectory header (index within the task's group).
        policy_name: Recorded in the trajectory header.
        max_context_tokens: The generator's context limit (vLLM's ``max_model_len``, the model's position limit):
            before each turn, an episode whose context plus a full turn (``max_new_tokens``) would not fit ends
            as truncated instead of calling the generator (which would refuse or overrun it). When that happens
            before the first turn, the completion is one end-of-turn token marked as environment (never trained
            on), since the trainers need a non-empty completion.

    Returns:
        The :class:`TokenEpisode`.

    Raises:
        ValueError: If neither ``model`` nor ``generate_fn`` is given.
    """
    if generate_fn is None:
        if model is None:
            raise ValueError("token_rollout needs model= (a HF causal LM) or generate_fn=")
        generate_fn = _hf_generate_fn(model, tokenizer, max_new_tokens, temperature, top_p)
    obs, _info = env.reset(instance, seed=seed, options={"policy": policy_name, "sample_idx": sample_idx})
    messages, tools = list(obs.messages), obs.tools or None  # [system, user] and the tool schemas
    ep = TokenEpisode(prompt_ids=render_prompt(tokenizer, messages, tools))
    eos_id = tokenizer.eos_token_id
    while True:
        context = ep.prompt_ids + ep.completion_ids
        if max_context_tokens is not None and len(context) + max_new_tokens > max_context_tokens:
            ep.truncated = True
            if not ep.completion_ids:
                ep.extend([eos_id], model=False)
            break
        ids, logprobs = generate_fn(context, None if seed is None else seed + ep.turns)
        ep.extend(ids, model=True, logprobs=logprobs)
        ep.turns += 1
        body = ids[:-1] if ids and ids[-1] == eos_id else ids
        text = tokenizer.decode(body, skip_special_tokens=False)
        result = env.step(text, n_tokens=len(ids))
        ep.reward = None if result.reward is None else float(result.reward)  # a failed grader is not a 0
        if result.terminated or result.truncated:
            ep.truncated = bool(result.truncated and not result.terminated)
            break
        if max_completion_tokens is not None and len(ep.completion_ids) >= max_completion_tokens:
            ep.truncated = True
            break
        if not ids or ids[-1] != eos_id:  # cut by max_new_tokens or another stop id: close the turn ourselves
            ep.extend([eos_id], model=False)
        ep.extend(observation_ids(tokenizer, result.observation.messages, tools), model=False)
    ep.trajectory = env.trajectory
    return ep
