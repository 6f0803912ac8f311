"""Token-level trajectories for RL on local models: exact ids, sampling logprobs and an environment mask.

Token-in/token-out: the running id sequence is never re-tokenized. The prompt is the chat template's render of
the episode's first messages (with the tool schemas and the generation prompt), tokenized once. Each turn the
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

Agreement with a fresh render. ``apply_chat_template(to_chat_messages(trajectory), tools=...)`` tokenized in one
go starts with exactly ``prompt_ids + completion_ids`` when the model's ids are the canonical tokenization of
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

__all__ = ["TokenEpisode", "collate", "generate", "observation_ids", "render_prompt", "token_rollout"]

#: ``generate_fn(prompt_and_history_ids, seed) -> (new_ids, logprobs)``.
GenerateFn = Callable[[list[int], "int | None"], "tuple[list[int], list[float]]"]

_PROBE = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render_prompt(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """Ids of the chat template's render of ``messages`` plus the generation prompt.

    Args:
        tokenizer: A HF tokenizer with a chat template.
        messages: OpenAI-style chat messages.
        tools: JSON tool schemas, rendered into the system turn by templates that support them.

    Returns:
        The prompt ids, length P.
    """
    text = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=False)
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


def generate(model: Any, tokenizer: Any, ids: list[int], *, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, seed: int | None = None) -> tuple[list[int], list[float]]:
    """Sample one completion with ``model.generate`` and return its ids and their sampling logprobs.

    Logprobs are taken from the processed scores (after temperature and top-p), i.e. under the distribution
    the ids were actually drawn from. Generation stops at the tokenizer's eos (``<|im_end|>``) or pad id.

    Args:
        model: A HF causal LM (CPU or GPU).
        tokenizer: Its tokenizer.
        ids: The full context ids so far.
        max_new_tokens: Cap on generated ids.
        temperature: 0 means greedy.
        top_p: Nucleus mass.
        seed: Seeds torch's global RNG before sampling (callers serialise concurrent calls).

    Returns:
        ``(new_ids, logprobs)``, equal lengths, the stop id included when one was produced.
    """
    import torch

    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    stop = [t for t in {tokenizer.eos_token_id, tokenizer.pad_token_id} if t is not None]
    sample = temperature > 0
    kwargs = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} if sample else {
        "do_sample": False}
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                             eos_token_id=stop, pad_token_id=tokenizer.pad_token_id, output_scores=True,
                             return_dict_in_generate=True, **kwargs)
    new = out.sequences[0, len(ids):].tolist()
    for k, tok in enumerate(new):  # cut at the first stop id (generate pads after it in batches)
        if tok in stop:
            new = new[: k + 1]
            break
    logprobs = [torch.log_softmax(score[0].float(), dim=-1)[tok].item() for score, tok in zip(out.scores, new)]
    return new, logprobs


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
        truncated: The episode ended on a budget (env turns or ``max_completion_tokens``) rather than a submit.
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
                  policy_name: str = "hf") -> TokenEpisode:
    """Drive one episode of ``env`` with a local model at token level.

    Args:
        env: An ``env_client.Env`` (or ``HTTPEnv``).
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
