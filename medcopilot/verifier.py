"""The learned verifier: what it reads, how it is loaded, and a batched scorer of finished episodes.

A verifier is a Qwen2 sequence classifier (``AutoModelForSequenceClassification`` with one output: a score head on
the causal LM's last non-pad token) trained with a binary cross-entropy loss to predict whether an episode's
graded answer was correct (:mod:`medagentgym.medcopilot.trainers.verifier`). Its probability picks the best of K samples
(Best@K, ``medagentgym score``) and can be a GRPO reward term (``reward.verifier``, term
``verifier_score``).

* **Text**: the episode's chat (``medagentgym.env_client.trajectory.to_chat_messages``: question, the model's raw turns and
  the environment's observations, never the grader's answer to the submit) rendered with the tokenizer's chat
  template. System messages are dropped: they are the same for every episode of a family and would only use up
  length. An episode longer than ``max_length`` tokens keeps its head (the question, up to half the budget) and
  its tail (the final turns and the submitted answer); the middle is replaced by a short "omitted" marker.
* **Label**: 1 when the final verdict says ``correct``, else 0 (a truncated episode or a grader error is 0).
* **Saved verifier**: a model folder (or a LoRA adapter folder with its score head) plus the tokenizer and
  ``verifier_config.json`` (``max_length``, ``base_model``). :class:`VerifierScorer` loads either.

Example:
    >>> scorer = VerifierScorer("runs/verifier_tiny")                      # doctest: +SKIP
    >>> scorer.score(TrajectoryStore("runs/eval/x/trajectories.jsonl").read())   # doctest: +SKIP
    [0.93, 0.04, ...]
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from medagentgym.medcopilot.config import ModelConfig, RecipeError

__all__ = ["VERIFIER_CONFIG", "VerifierScorer", "auroc", "encode_messages", "encode_text", "episode_label",
           "load_verifier_model", "make_scorer", "score_rows", "split_by_task", "trajectory_messages", "verifier_messages",
           "write_score_rows", "write_verifier_config"]

#: File in a trained verifier's folder that marks it as one and records how it reads text.
VERIFIER_CONFIG = "verifier_config.json"
#: Marker put where the middle of an over-long episode was cut.
OMITTED = "\n[... middle of the episode omitted ...]\n"

Message = dict[str, Any]


# --------------------------------------------------------------------------------------------- text and labels


def trajectory_messages(item: Any) -> list[Message]:
    """The chat of one finished episode, as the verifier reads it (system messages dropped).

    Args:
        item: A ``medagentgym.env_client.trajectory.Trajectory``, its JSON record (a dict, as stored in a trajectory
            JSONL), or a :class:`medagentgym.medcopilot.data.Episode`.

    Returns:
        ``[{"role", "content"}, ...]``: the question, then each assistant turn and the observation that
        answered it (the environment's answer to the final turn is left out: it may reveal the verdict).

    Raises:
        TypeError: ``item`` is none of those (the message names its type).
        ValueError: A dict that is not a trajectory record.
    """
    from medagentgym.env_client.trajectory import Trajectory, to_chat_messages
    from medagentgym.medcopilot.data import Episode

    if isinstance(item, Episode):
        return verifier_messages(item.messages)
    if isinstance(item, dict):
        try:
            item = Trajectory.model_validate(item)
        except ValueError as exc:
            raise ValueError(f"not a trajectory record: {str(exc).splitlines()[0]}") from None
    if not isinstance(item, Trajectory):
        raise TypeError(f"cannot read a {type(item).__name__} as an episode; pass a Trajectory, its JSON record "
                         f"(dict) or a medagentgym.medcopilot.data.Episode")
    return verifier_messages(to_chat_messages(item))


def verifier_messages(messages: Iterable[Message]) -> list[Message]:
    """Chat messages without system turns, with every content a string (tool calls stay in the raw text)."""
    return [{"role": m["role"], "content": m.get("content") or ""} for m in messages if m.get("role") != "system"]


def episode_label(item: Any) -> int:
    """1 when the episode's final verdict says correct, else 0 (``Episode``, ``Trajectory`` or its record)."""
    if hasattr(item, "success"):
        return int(bool(item.success))
    final = item.get("final") if isinstance(item, dict) else item.final
    verdict = (final.get("verdict") if isinstance(final, dict) else getattr(final, "verdict", None)) or {}
    return int(bool(verdict.get("correct")) and not verdict.get("error"))


def encode_messages(messages: list[Message], tokenizer: Any, max_length: int) -> list[int]:
    """Render a chat with the tokenizer's chat template and tokenize it, keeping head and tail within budget.

    The head is the rendered question (the chat up to the first assistant turn), at most half of ``max_length``;
    the tail fills the rest, so the final answer is always read. The cut is marked with :data:`OMITTED`.

    Args:
        messages: Output of :func:`trajectory_messages`.
        tokenizer: A tokenizer with a chat template.
        max_length: Most tokens returned (>= 16).

    Returns:
        Token ids, at most ``max_length`` of them.
    """
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    first_reply = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    head_text = tokenizer.apply_chat_template(messages[:first_reply], tokenize=False) if first_reply else ""
    head = len(tokenizer(head_text, add_special_tokens=False)["input_ids"]) if head_text else 0
    return _fit(tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer, max_length, head)


def encode_text(text: str, tokenizer: Any, max_length: int) -> list[int]:
    """Tokenize an already rendered text; an over-long one keeps its first quarter and its end (see above)."""
    return _fit(tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer, max_length, max_length // 4)


def _fit(ids: list[int], tokenizer: Any, max_length: int, head: int) -> list[int]:
    if max_length < 16:
        raise ValueError(f"max_length={max_length} is too small for a verifier; use at least 16 (e.g. 2048)")
    if len(ids) <= max_length:
        return list(ids)
    head = min(head, max_length // 2)
    marker = tokenizer(OMITTED, add_special_tokens=False)["input_ids"][: max_length // 4]
    tail = max_length - head - len(marker)
    return list(ids[:head]) + marker + list(ids[len(ids) - tail:])


def split_by_task(items: Sequence[Any], fraction: float, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """Split episodes into (train, held out) by task id, so no task has episodes on both sides.

    Tasks with a success and tasks without one are split separately (each ``fraction`` of its tasks, at least
    one when it has two or more), so the held-out side has both labels whenever the data allows.

    Args:
        items: Episodes (``.task_id`` and ``.success``).
        fraction: Share of tasks held out, in ``[0, 1)``; 0 holds out nothing.
        seed: Seed of the shuffle of task ids.
    """
    if not 0.0 <= fraction < 1.0:
        raise RecipeError(f"trainer.eval_fraction={fraction!r} is invalid: expected a share of tasks in [0, 1)")
    by_task: dict[str, list[Any]] = {}
    for item in items:
        by_task.setdefault(item.task_id, []).append(item)
    held: set[str] = set()
    rng = random.Random(seed)
    for has_success in (True, False):
        group = sorted(t for t, eps in by_task.items() if any(e.success for e in eps) == has_success)
        rng.shuffle(group)
        n = round(fraction * len(group))
        if fraction > 0 and n == 0 and len(group) >= 2:
            n = 1
        held.update(group[:n])
    return ([i for i in items if i.task_id not in held], [i for i in items if i.task_id in held])


def auroc(labels: Sequence[int], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve (the chance a random positive outranks a random negative; ties count half).

    Returns:
        A value in ``[0, 1]``; None when only one class is present (the area is undefined).
    """
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):  # average ranks over ties (Mann-Whitney U)
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    rank_sum = sum(r for r, y in zip(ranks, labels) if y)
    return (rank_sum - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


# --------------------------------------------------------------------------------------------- model


def load_verifier_model(spec: ModelConfig, tokenizer: Any) -> Any:
    """A one-output sequence classifier from a causal-LM or verifier checkpoint (a fresh score head on an LM).

    Args:
        spec: The recipe's ``model`` section (dtype, attention kernel; ``lora`` is applied by the trainer).
        tokenizer: The model's tokenizer; its pad id is written into the model config (the head reads the last
            non-pad token of each row).

    Raises:
        RecipeError: The checkpoint cannot be loaded, or it is a LoRA adapter folder of a causal LM.
    """
    from transformers import AutoModelForSequenceClassification

    from medagentgym.medcopilot.modeling import adapter_base, resolve_dtype

    path = str(Path(spec.name_or_path).resolve()) if Path(spec.name_or_path).is_dir() else spec.name_or_path
    if adapter_base(path) is not None:
        raise RecipeError(f"model.name_or_path={path!r} is a LoRA adapter folder; start the verifier from a full "
                          f"model (merge it first: medagentgym export {path} --out <folder>)")
    kwargs: dict[str, Any] = {"dtype": resolve_dtype(spec.dtype), "num_labels": 1}
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    try:
        model = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RecipeError(f"cannot load model.name_or_path={path!r} as a sequence classifier: {text}") from exc
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def write_verifier_config(out_dir: str | os.PathLike, *, max_length: int, base_model: str,
                          metrics: dict[str, Any] | None = None) -> Path:
    """Write ``verifier_config.json`` (atomically) into a trained verifier's folder and return its path."""
    from medagentgym.tasks.base import write_bytes_atomic

    target = Path(out_dir) / VERIFIER_CONFIG
    data = {"kind": "medcopilot-verifier", "max_length": int(max_length), "base_model": base_model,
            "label": "1 = the episode's graded answer was correct", "heldout": metrics or {}}
    write_bytes_atomic(target, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
    return target


# --------------------------------------------------------------------------------------------- scoring


class VerifierScorer:
    """Scores finished episodes (or rendered texts) with a trained verifier: P(correct) per item.

    Items are encoded, sorted by length and scored in batches (right padding; the score head reads each row's
    last real token, so padding never changes a score), under ``torch.no_grad``; results come back in input
    order. Thread-safe: one batch at a time.

    Args:
        path: A trained verifier folder (``verifier_config.json``; full model or LoRA adapter with its head).
        device: ``"cpu"``, ``"cuda"``, ...; default the GPU when there is one.
        batch_size: Rows per forward pass.
        max_length: Tokens read per episode; default the value the verifier was trained with.
        dtype: ``auto`` (bfloat16 on a GPU, float32 on CPU), ``bfloat16``, ``float16`` or ``float32``.

    Raises:
        RecipeError: ``path`` is not a trained verifier folder.
    """

    def __init__(self, path: str | os.PathLike, *, device: str | None = None, batch_size: int = 8,
                 max_length: int | None = None, dtype: str = "auto") -> None:
        import torch

        from medagentgym.medcopilot.modeling import adapter_base, load_tokenizer

        folder = Path(path)
        config_file = folder / VERIFIER_CONFIG
        if not config_file.is_file():
            raise RecipeError(f"{str(path)!r} is not a trained verifier (no {VERIFIER_CONFIG}); train one with "
                              f"python train.py recipe=verifier_tiny")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        info = json.loads(config_file.read_text(encoding="utf-8"))
        self.path, self.batch_size = folder, batch_size
        self.max_length = int(max_length or info["max_length"])
        self.tokenizer = load_tokenizer(str(folder))
        base = adapter_base(folder)
        model = load_verifier_model(ModelConfig(name_or_path=base or str(folder), dtype=dtype), self.tokenizer)
        if base is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self._lock = threading.Lock()

    def encode(self, item: Any) -> list[int]:
        """Token ids the verifier reads for one item (a rendered text, or an episode in any accepted form)."""
        if isinstance(item, str):
            return encode_text(item, self.tokenizer, self.max_length)
        return encode_messages(trajectory_messages(item), self.tokenizer, self.max_length)

    def score(self, items: Iterable[Any]) -> list[float]:
        """P(correct) for each item, in input order.

        Args:
            items: Rendered texts (str), ``env_client`` trajectories, their JSON records, or ``Episode``\\ s.

        Returns:
            One probability in ``[0, 1]`` per item.
        """
        return self.score_ids([self.encode(item) for item in items])

    def score_ids(self, rows: list[list[int]]) -> list[float]:
        """P(correct) for already encoded rows (see :meth:`encode`), batched by length."""
        import torch

        if any(not row for row in rows):
            raise ValueError("an item encoded to no tokens; pass non-empty texts or episodes")
        out: list[float] = [math.nan] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        pad = self.tokenizer.pad_token_id
        with self._lock, torch.no_grad():
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                width = max(len(rows[i]) for i in batch)
                ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for r, i in enumerate(batch):
                    ids[r, :len(rows[i])] = torch.tensor(rows[i], dtype=torch.long)
                    mask[r, :len(rows[i])] = 1
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                for r, p in zip(batch, torch.sigmoid(logits.float().view(-1)).tolist()):
                    out[r] = p
        return out


def score_rows(scorer: Any, trajectories: Sequence[Any]) -> list[dict[str, Any]]:
    """``{"task_id", "sample_idx", "score"}`` per finished episode: the Best@K input of ``medagentgym eval --scores``.

    Args:
        scorer: Anything with ``score(trajectories) -> list[float | None]`` (:func:`make_scorer`).
        trajectories: ``medagentgym.env_client.trajectory.Trajectory`` objects, each episode once.

    Raises:
        ValueError: No episodes, an episode twice, or a score missing (names how many, the first, and the
            scorer's ``last_error`` when it has one).
    """
    if not trajectories:
        raise ValueError("no finished episodes to score")
    keys = [t.key for t in trajectories]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"episode {dup} appears more than once; score one rollout at a time")
    scores = list(scorer.score(list(trajectories)))
    if len(scores) != len(keys):
        raise ValueError(f"the verifier returned {len(scores)} scores for {len(keys)} episodes")
    missing = [k for k, v in zip(keys, scores) if v is None]
    if missing:
        why = getattr(scorer, "last_error", None)
        raise ValueError(f"{len(missing)} of {len(keys)} episodes got no score (e.g. {missing[0]})"
                         f"{f': {why}' if why else ''}; check the verifier and rerun")
    return [{"task_id": k[0], "sample_idx": k[1], "score": float(v)} for k, v in zip(keys, scores)]


def write_score_rows(rows: list[dict[str, Any]], path: Path | str) -> Path:
    """Write :func:`score_rows` output as JSONL atomically (tmp file, then rename); returns the path."""
    from medagentgym.tasks.base import write_bytes_atomic

    path = Path(path)
    write_bytes_atomic(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode("utf-8"))
    return path


def make_scorer(spec: str, *, batch_size: int | None = None, **kwargs: Any) -> Any:
    """A scorer from a path or URL: ``http(s)://...`` gives a :class:`medagentgym.rewards.verifier.HTTPVerifier` (failed
    calls score None), anything else a local :class:`VerifierScorer` (``kwargs``, e.g. ``device``, go to it).
    ``batch_size`` is rows per forward pass (local) or per request (URL); None keeps each class's default."""
    batch = {} if batch_size is None else {"batch_size": batch_size}
    if spec.startswith(("http://", "https://")):
        from medagentgym.rewards.verifier import HTTPVerifier

        return HTTPVerifier(spec, **batch)
    return VerifierScorer(spec, **batch, **kwargs)
