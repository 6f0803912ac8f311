"""TRL GRPO's ``rollout_func`` hook, running multi-turn episodes through ``env_client`` at token level.

What TRL 1.16 does with the hook (read from ``GRPOTrainer._generate``; the upstream docstring says otherwise):

- It calls ``rollout_func(prompts, trainer)`` once per generation round. ``prompts`` is the dataset's ``prompt``
  column for this process, **already repeated** ``num_generations`` times (consecutive rows form a group); the
  other dataset columns are not passed. We therefore map each prompt back to its task instance through a
  :class:`PromptIndex` built together with the dataset.
- It needs one completion per row: ``prompt_ids``, ``completion_ids`` and ``logprobs`` (None is allowed without
  vLLM). ``env_mask`` (1 = model token, 0 = environment token) keeps environment tokens out of the loss. Every
  other key reaches each reward function as a keyword argument: we pass ``reward_<name>`` per reward component
  (None for a failed grader) and ``episode_stats``; the dataset's ``instance_id`` column arrives there too.
- It rescores ``prompt_ids + completion_ids`` with the training model, so the ids must be exactly what the model
  saw: ``medagentgym.env_client.tokens.token_rollout`` builds them token-in/token-out, never re-tokenizing history.

Episodes of one call run concurrently (one thread each, at most ``concurrency``), each advancing on its own:
whenever the generator is free, the episodes waiting for a turn share the next batched call (:class:`TurnBatcher`,
continuous batching) while the others run their code in the sandbox: ``model.generate`` under
``trl.models.unwrap_model_for_generation`` on CPU, ``trainer.vllm_generation.generate`` with vLLM (colocate mode,
or server mode with one training process: each call is one assistant turn, so processes would have to agree on
the number of turns). ``batching="lockstep"`` instead waits for every running episode (or ``flush_s``), as
earlier versions did; ``EnvRolloutFunc.timing`` says how much of the last rollout the generator sat idle.

Example:
    >>> index = PromptIndex.from_instances(instances, render=lambda inst: initial_messages(inst))  # doctest: +SKIP
    >>> rollout = EnvRolloutFunc(make_env=make_env, index=index, tokenizer=tok, max_new_tokens=64)  # doctest: +SKIP
    >>> GRPOTrainer(model, reward_funcs=[EpisodeReward(group_size=4)], rollout_func=rollout, ...)  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from medagentgym.env_client.http_client import retry_lost
from medagentgym.env_client.tokens import TokenEpisode, generate_batch, token_rollout
from medagentgym.medcopilot.metrics import EpisodeStats, episode_outcome
from medagentgym.rewards import combine

__all__ = ["BatchGenerate", "EnvRolloutFunc", "InfraFailureLimit", "PromptIndex", "TurnBatcher",
           "check_generation_layout", "context_limit", "episode_seed", "hf_batch_generate", "prompt_key"]

log = logging.getLogger(__name__)

#: ``batch_generate(contexts, seeds) -> (new_ids per context, logprobs per context or None)``; one seed per context.
BatchGenerate = Callable[[list[list[int]], list[int]], "tuple[list[list[int]], list[list[float]] | None]"]


def prompt_key(prompt: Any) -> str:
    """A stable text key of a dataset prompt (a chat message list or a string)."""
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class PromptIndex:
    """Dataset prompt -> task instance, because TRL hands ``rollout_func`` only the prompts.

    Attributes:
        instances: Instance id -> instance.
        by_key: :func:`prompt_key` of the prompt -> instance id.
        dropped: Ids of instances left out because an earlier instance renders the very same prompt (the policy
            could not tell them apart, so one of them stands for both).
        rows: The training dataset, one row per kept instance: ``{"prompt", "instance_id", "family"}``
            (``prompt`` is what TRL passes to the hook; the other columns reach the reward functions).
    """

    instances: dict[str, Any] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_instances(cls, instances: Iterable[Any], render: Callable[[Any], list[dict]]) -> PromptIndex:
        """Index ``instances`` under the prompt ``render(instance)`` gives (the episode's first chat messages).

        Args:
            instances: Task instances (``tasks.Instance``; anything with ``.id``).
            render: Instance -> the chat messages the episode opens with (the dataset's ``prompt``).

        Returns:
            The index; ``rows`` holds the dataset rows ``{"prompt", "instance_id", "family"}``.
        """
        index = cls()
        for inst in instances:
            prompt = render(inst)
            key = prompt_key(prompt)
            if key in index.by_key:
                index.dropped.append(inst.id)
                continue
            index.by_key[key] = inst.id
            index.instances[inst.id] = inst
            index.rows.append({"prompt": prompt, "instance_id": inst.id, "family": inst.family})
        if index.dropped:
            log.warning("%d instances render the same prompt as an earlier one and were left out: %s",
                        len(index.dropped), ", ".join(index.dropped[:5]))
        if not index.rows:
            raise ValueError("no task instances to train on: build the tasks first (medagentgym build)")
        return index

    def lookup(self, prompt: Any) -> Any:
        """The instance a dataset prompt came from.

        Raises:
            KeyError: If the prompt is not in the index (the dataset and the index were built apart).
        """
        iid = self.by_key.get(prompt_key(prompt))
        if iid is None:
            raise KeyError(f"prompt not in the PromptIndex ({prompt_key(prompt)[:80]}...): build the dataset with "
                           "PromptIndex.rows so every prompt maps back to its task instance")
        return self.instances[iid]


def episode_seed(seed: int, rank: int, call: int, row: int) -> int:
    """The sampling seed of one episode: a hash of (base seed, process rank, round, row) into 62 bits.

    Turns add their index to it (:func:`medagentgym.env_client.tokens.token_rollout`); hashing keeps episodes' streams apart
    even then (row ``r``'s second turn never reuses row ``r + 1``'s first seed, as ``base + row`` would).
    """
    import numpy as np

    return int(np.random.SeedSequence([seed, rank, call, row]).generate_state(1, np.uint64)[0] >> 2)


def check_generation_layout(accelerator: Any) -> None:
    """Refuse multi-turn ``model.generate`` rollouts where processes must call generate in lockstep.

    Under DeepSpeed ZeRO-3 or FSDP with more than one process, transformers runs ``generate`` with
    ``synced_gpus=True``: every process must make the same number of generate calls. Episodes take different
    numbers of turns and batch by timing, so the calls differ per process and training would hang.

    Raises:
        RuntimeError: For ZeRO-3 or FSDP with more than one process (one line saying what to use instead).
    """
    if accelerator.num_processes <= 1:
        return
    kind = getattr(accelerator.distributed_type, "value", str(accelerator.distributed_type))
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    sharded = "FSDP" if kind == "FSDP" else (
        "DeepSpeed ZeRO-3" if kind == "DEEPSPEED" and getattr(plugin, "zero_stage", 0) == 3 else None)
    if sharded:
        raise RuntimeError(f"multi-turn rollouts with rollout.backend=transformers would hang under {sharded} with "
                           f"{accelerator.num_processes} processes (generate needs the same number of calls on "
                           f"every process); use DDP or ZeRO-2 (recipes/accelerate/zero2.yaml), or "
                           f"rollout.backend=vllm")


def context_limit(trainer: Any) -> int | None:
    """The generator's context limit in TRL's GRPO: ``vllm_max_model_length`` with vLLM (when set), else the
    model's ``max_position_embeddings`` (None when neither is known)."""
    args = trainer.args
    if getattr(args, "use_vllm", False) and getattr(args, "vllm_max_model_length", None):
        return int(args.vllm_max_model_length)
    model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None)
    return int(limit) if limit else None


def hf_batch_generate(model: Any, tokenizer: Any, contexts: list[list[int]], *, seeds: list[int],
                      max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                      top_k: int = 0) -> tuple[list[list[int]], list[list[float]]]:
    """Sample one continuation per context with ``model.generate``: :func:`medagentgym.env_client.tokens.generate_batch`.

    Row ``i`` depends only on the model, ``contexts[i]`` and ``seeds[i]`` (never on the batch it shares), the
    checkpoint's ``generation_config`` is not inherited, and only the sampled tokens' logprobs are kept.

    Returns:
        ``(new_ids, logprobs)``: per context, ``len(new_ids[i]) == len(logprobs[i]) >= 1``.
    """
    return generate_batch(model, tokenizer, contexts, seeds=seeds, max_new_tokens=max_new_tokens,
                          temperature=temperature, top_p=top_p, top_k=top_k)


class TurnBatcher:
    """Gathers per-episode generation requests from episode threads into batched calls.

    Episode threads call :meth:`start` when they begin (after any concurrency limit), :meth:`request`
    (through the ``generate_fn`` of ``token_rollout``) for each turn, and :meth:`done` when they end; the
    coordinating thread runs :meth:`serve` until all ``n_episodes`` are done.

    Two ways to form batches:

    - ``continuous`` (default): whenever the generator is free, the episodes that are waiting go into the next
      batch after at most ``coalesce_s`` (requests that arrive together still share a call); episodes advance
      independently, so the generator works while others are in the sandbox (continuous batching, one call at
      a time).
    - ``lockstep``: a batch is sent when every started, unfinished episode is waiting, or ``flush_s`` after the
      first request if some are busy elsewhere (in the sandbox, or waiting for a sandbox worker): fewer, larger
      batches, and the generator idles while the episodes run their code.

    ``generate_s`` (seconds inside ``batch_generate``), ``wall_s`` (from the first start to the end of
    :meth:`serve`) and :attr:`idle_share` measure how much of a rollout the generator (the GPU) sat idle.

    Args:
        batch_generate: Runs one batch (see :data:`BatchGenerate`).
        n_episodes: Episodes that will call in.
        flush_s: Lockstep only: longest wait for busy episodes before a partial batch is sent (seconds).
        batching: ``continuous`` or ``lockstep``.
    """

    def __init__(self, batch_generate: BatchGenerate, n_episodes: int, flush_s: float = 0.25,
                 batching: str = "continuous") -> None:
        if batching not in ("continuous", "lockstep"):
            raise ValueError(f"batching={batching!r}: use 'continuous' or 'lockstep'")
        self._gen, self._n, self.flush_s, self.batching = batch_generate, n_episodes, flush_s, batching
        self.coalesce_s = 0.01  # continuous: how long the first waiting request waits for company
        self.generate_s = self.wall_s = 0.0
        self._t0: float | None = None
        self._cv = threading.Condition()
        self._active = self._finished = 0
        self._pending: dict[int, tuple[list[int], int]] = {}
        self._results: dict[int, tuple[list[int], list[float] | None]] = {}
        self._error: BaseException | None = None
        self.calls = 0

    @property
    def failed(self) -> bool:
        """True once a generation call raised (every waiting episode is woken with an error)."""
        return self._error is not None

    def generate_fn(self, slot: int) -> Callable[[list[int], int | None], tuple[list[int], list[float]]]:
        """The ``generate_fn`` for episode ``slot``: each turn's context and seed join the next batch."""
        def fn(context: list[int], seed: int | None) -> tuple[list[int], list[float]]:
            return self.request(slot, context, seed)
        return fn

    @property
    def idle_share(self) -> float:
        """Share of the rollout's wall time with no generation call in flight (0 when nothing ran)."""
        return max(0.0, 1.0 - self.generate_s / self.wall_s) if self.wall_s > 0 else 0.0

    def start(self) -> None:
        """Mark one episode as running (it will request turns until :meth:`done`)."""
        with self._cv:
            if self._t0 is None:
                self._t0 = time.monotonic()
            self._active += 1
            self._cv.notify_all()

    def request(self, slot: int, context: list[int], seed: int | None = None) -> tuple[list[int], list[float]]:
        """Queue one context (sampled with ``seed``; None: the slot number) and block until it is generated."""
        with self._cv:
            self._pending[slot] = (list(context), slot if seed is None else seed)
            self._cv.notify_all()
            while slot not in self._results and self._error is None:
                self._cv.wait()
            if self._error is not None:
                raise RuntimeError("batched generation failed in another thread") from self._error
            ids, logprobs = self._results.pop(slot)
        return ids, logprobs if logprobs is not None else [0.0] * len(ids)

    def done(self) -> None:
        """Mark a started episode finished (exactly once, also on error)."""
        with self._cv:
            self._active -= 1
            self._finished += 1
            self._cv.notify_all()

    def serve(self) -> None:
        """Run batches until every episode is done. Re-raises a generation error after waking the waiters."""
        window = self.flush_s if self.batching == "lockstep" else min(self.coalesce_s, self.flush_s)
        while True:
            with self._cv:
                first_seen: float | None = None
                while self._finished < self._n:
                    if self._pending and len(self._pending) >= self._active:
                        break
                    if self._pending:
                        first_seen = first_seen or time.monotonic()
                        left = first_seen + window - time.monotonic()
                        if left <= 0:
                            break
                        self._cv.wait(timeout=left)
                    else:
                        first_seen = None
                        self._cv.wait(timeout=self.flush_s)
                if self._finished >= self._n:
                    self.wall_s = time.monotonic() - (self._t0 or time.monotonic())
                    return
                slots = sorted(self._pending)
                contexts, seeds = zip(*[self._pending.pop(s) for s in slots])
            began = time.monotonic()
            try:
                ids, logprobs = self._gen(list(contexts), list(seeds))
            except BaseException as exc:
                with self._cv:
                    self._error = exc
                    self._cv.notify_all()
                raise
            self.generate_s += time.monotonic() - began
            self.calls += 1
            with self._cv:
                for k, s in enumerate(slots):
                    self._results[s] = (ids[k], None if logprobs is None else logprobs[k])
                self._cv.notify_all()


class InfraFailureLimit(RuntimeError):
    """Too large a share of recent episodes failed for infrastructure reasons: the run stops (one line says why)."""


class _InfraWindow:
    """The infrastructure-failure flags of the last ``window`` episodes, and the bound their share may not pass."""

    def __init__(self, max_share: float, window: int) -> None:
        if not 0 < max_share <= 1 or window < 1:
            raise ValueError(f"max_infra_share={max_share} must be in (0, 1] and infra_window={window} >= 1")
        self.max_share, self.flags = max_share, collections.deque(maxlen=window)
        self.last_cause: str | None = None

    def add(self, flags: list[bool], causes: list[str]) -> None:
        """Record one rollout call's episodes; raises :class:`InfraFailureLimit` when the share passes the bound."""
        self.flags.extend(flags)
        self.last_cause = causes[-1] if causes else self.last_cause
        failed = sum(self.flags)
        if failed and failed / len(self.flags) > self.max_share:
            raise InfraFailureLimit(
                f"{failed} of the last {len(self.flags)} episodes failed for infrastructure reasons (more than "
                f"rollout.max_infra_failure_share={self.max_share:g}); last cause: {self.last_cause}; fix the "
                f"environment (sandbox, env servers, task data) and rerun to resume from the last checkpoint")


class EnvRolloutFunc:
    """The ``rollout_func`` for ``trl.GRPOTrainer``: one multi-turn env episode per prompt row.

    Every episode is total: no exception of one episode reaches the trainer. The environment itself turns what
    the model's text or its jailed code makes the host raise into that episode's outcome (a wrong answer, see
    ``medagentgym.env_client.episode``); anything that still escapes an episode (its env could not reset, an env server went
    away, a reward term raised) is an infrastructure failure: the row gets reward None (no advantage in GRPO,
    dropped by PPO), the cause is logged, and ``episode_stats`` marks it (``env/infra_failure_rate``). Only a
    failure of generation itself (the model, the GPU) stops the call. When more than ``max_infra_share`` of the
    last ``infra_window`` episodes failed that way, :class:`InfraFailureLimit` stops the run with one line.

    Args:
        make_env: Returns a fresh ``medagentgym.env_client.Env`` (one per concurrent episode; closed after it).
        index: Maps each dataset prompt back to its task instance.
        tokenizer: The policy's tokenizer (chat template, eos ``<|im_end|>``).
        max_new_tokens: Per assistant turn (tokens).
        max_completion_tokens: Per episode after the prompt, model and env tokens (None: no cap beyond turns).
        concurrency: Episodes in flight at once.
        rewards: Reward components, name -> ``fn(*, verdict, trajectory, **kw) -> float | None`` (functions of
            ``rewards``); each is returned as ``reward_<name>``. Default: ``{"correctness": medagentgym.rewards.correctness}``.
        seed: Base seed; each episode's seed derives from it, the process rank, the call count and the row (see
            :meth:`run`), and turn ``t`` of an episode samples with that seed plus ``t``.
        flush_s: See :class:`TurnBatcher`. Keep ``concurrency <= `` the sandbox pool's workers: an episode holds
            its session from reset to end, so extra episodes wait for a worker and turns batch poorly.
        batching: ``continuous`` (episodes advance independently; the generator serves whoever waits) or
            ``lockstep`` (turns wait for one another); see :class:`TurnBatcher`. ``timing`` holds the last
            call's generator busy time, wall time and idle share.
        policy_name: Recorded in each trajectory header.
        verifier: A learned-verifier scorer (``score(trajectories) -> list[float | None]``, e.g.
            ``medagentgym.medcopilot.verifier.VerifierScorer`` or ``medagentgym.rewards.HTTPVerifier``). When given, every call scores its
            finished episodes in one batch and passes each score to the reward functions as ``verifier_score``
            (None where the verifier failed: the ``verifier_score`` term is then missing, never 0).
        weights: Reward weights, name -> weight (``reward.weights``; default 1 per component). A row whose weighted
            total is missing by ``medagentgym.rewards.combine``'s rules (a weighted term is None) gets None for *every*
            component, so TRL counts it unscorable (advantage 0) instead of summing the other terms around the
            hole, which would score a failed grader like a wrong answer. PPO drops the same rows.
        max_context_tokens: The generator's context limit; an episode whose next turn could not fit ends as
            truncated before the call (see :func:`medagentgym.env_client.tokens.token_rollout`). None: as TRL's hook, the
            trainer's ``vllm_max_model_length`` with vLLM, else the model's ``max_position_embeddings``.
        max_infra_share: Largest share of infrastructure failures among the last ``infra_window`` episodes before
            the run stops (``rollout.max_infra_failure_share``).
        infra_window: How many recent episodes that share is taken over.
    """

    def __init__(self, *, make_env: Callable[[], Any], index: PromptIndex, tokenizer: Any, max_new_tokens: int,
                 max_completion_tokens: int | None = None, concurrency: int = 16,
                 rewards: dict[str, Callable[..., float | None]] | None = None, seed: int = 0,
                 flush_s: float = 0.25, policy_name: str = "grpo", verifier: Any = None,
                 weights: dict[str, float] | None = None, batching: str = "continuous",
                 max_context_tokens: int | None = None, max_infra_share: float = 0.25,
                 infra_window: int = 256):
        from medagentgym.rewards import correctness

        if max_new_tokens < 1 or concurrency < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} and concurrency={concurrency} must both be >= 1")
        self.make_env, self.index, self.tokenizer = make_env, index, tokenizer
        self.max_new_tokens, self.max_completion_tokens = max_new_tokens, max_completion_tokens
        self.concurrency, self.seed, self.flush_s, self.batching = concurrency, seed, flush_s, batching
        self.timing: dict[str, float] = {}  # the last call's generate_s, wall_s, idle_share, calls
        self._vllm_slept_at: int | None = None  # trainer step at which the hook last put vLLM to sleep
        self.policy_name = policy_name
        self.rewards = dict(rewards) if rewards else {"correctness": correctness}
        self.weights = dict(weights) if weights is not None else {name: 1.0 for name in self.rewards}
        if set(self.weights) != set(self.rewards):
            raise ValueError(f"reward weights {sorted(self.weights)} and reward components {sorted(self.rewards)} "
                             f"must name the same terms")
        self.verifier = verifier
        self.max_context_tokens = max_context_tokens
        self.calls = 0
        self._rounds_before: int | None = None  # generation rounds a resumed GRPO run had done (see round_index)
        self.infra = _InfraWindow(max_infra_share, infra_window)

    # ------------------------------------------------------------------ the hook TRL calls
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's hook: run one episode per row of ``prompts`` with the trainer's current policy.

        Args:
            prompts: The ``prompt`` column, each prompt repeated ``num_generations`` times.
            trainer: The ``GRPOTrainer`` (its model, accelerator, args and vLLM engine).

        Returns:
            ``prompt_ids``, ``completion_ids``, ``env_mask``, ``logprobs`` (None without vLLM), and the reward
            function kwargs ``reward_<name>`` (one per component) and ``episode_stats``: lists, one per row.
        """
        args = trainer.args
        call = self.round_index(trainer)
        limit = self.max_context_tokens or context_limit(trainer)
        if args.use_vllm:
            return self._run_vllm(prompts, trainer, call=call, limit=limit)
        from trl.models import unwrap_model_for_generation

        check_generation_layout(trainer.accelerator)
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=args.ds3_gather_for_generation) as model:
            was_training = model.training
            model.eval()
            try:
                out = self.run(prompts, self.hf_generator(model, temperature=args.temperature, top_p=args.top_p,
                                                          top_k=args.top_k),
                               call=call, rank=trainer.accelerator.process_index, max_context_tokens=limit)
            finally:
                model.train(was_training)
        out["logprobs"] = None  # only vLLM's importance-sampling correction reads them
        return out

    def hf_generator(self, model: Any, *, temperature: float, top_p: float = 1.0, top_k: int = 0) -> BatchGenerate:
        """A :data:`BatchGenerate` over ``model.generate`` (also used to evaluate a policy outside training)."""
        def gen(contexts: list[list[int]], seeds: list[int]) -> tuple[list[list[int]], list[list[float]]]:
            return hf_batch_generate(model, self.tokenizer, contexts, seeds=seeds, max_new_tokens=self.max_new_tokens,
                                     temperature=temperature, top_p=top_p, top_k=top_k)
        return gen

    def round_index(self, trainer: Any) -> int:
        """The number of this generation round in the whole run (1, 2, ...), continued across a resume.

        TRL's GRPO calls the hook every ``steps_per_generation * num_iterations`` micro-steps and restarts its
        micro-step counter when a run resumes, so counting calls alone would replay the first rounds' seeds. The
        rounds done before this trainer's first call are read from ``trainer.state.global_step`` and added to the
        call count (they are 0 on a fresh run, which numbers its rounds 1, 2, ... as before).
        """
        if self._rounds_before is None:
            args = trainer.args
            accumulation = int(getattr(trainer, "current_gradient_accumulation_steps", 0)
                               or args.gradient_accumulation_steps)
            every = int(args.steps_per_generation or accumulation) * int(getattr(args, "num_iterations", 1) or 1)
            micro_steps = int(trainer.state.global_step) * accumulation
            self._rounds_before = -(-micro_steps // every)  # rounds start at micro-steps 0, every, 2 * every, ...
        self.calls += 1
        return self._rounds_before + self.calls

    def _run_vllm(self, prompts: list[Any], trainer: Any, *, call: int | None = None,
                  limit: int | None = None) -> dict[str, list[Any]]:
        vg = trainer.vllm_generation
        if (vg.mode == "server" and trainer.accelerator.num_processes > 1) or vg.tensor_parallel_size > 1:
            raise NotImplementedError("multi-turn vLLM rollouts need vllm_mode='colocate' with tensor parallel size "
                                      "1 per process (server mode with several processes syncs every turn)")
        # VLLMGeneration reads its cap at each call: one call here is one assistant turn, not a whole episode.
        vg.max_completion_length = self.max_new_tokens

        def gen(contexts: list[list[int]], seeds: list[int]) -> tuple[list[list[int]], list[list[float]]]:
            # vLLM samples from its own per-request generators; TRL's engine takes no per-row seeds.
            _, completion_ids, logprobs, _ = vg.generate(prompts=contexts, images=None, num_generations=1)
            return completion_ids, [[lp[0] for lp in seq] for seq in logprobs]

        with self._vllm_awake(vg, trainer.state.global_step):
            return self.run(prompts, gen, call=call, rank=trainer.accelerator.process_index, max_context_tokens=limit)

    @contextlib.contextmanager
    def _vllm_awake(self, vg: Any, step: int) -> Iterator[None]:
        """Keep a sleep-mode colocated engine awake for one whole rollout round, asleep (level 1) otherwise.

        TRL wakes the engine around every ``generate`` call and sleeps it at level 2 afterwards, which discards the
        weights and pushes them again from the policy at the next call: once per batch of turns here. Instead the
        engine wakes once per round and sleeps at level 1 at its end (weights kept in CPU memory, KV cache freed
        for the update; TRL's weight sync before the next round wakes and overwrites them).
        """
        if vg.mode != "colocate" or not vg.enable_sleep_mode:
            yield
            return
        if self._vllm_slept_at == step:  # TRL syncs (and wakes) the weights only when the step moved on
            vg.llm.wake_up(tags=["weights"])
        vg.llm.wake_up(tags=["kv_cache"])
        vg.enable_sleep_mode = False  # TRL's generate() then neither wakes nor sleeps the engine per call
        try:
            yield
        finally:
            vg.enable_sleep_mode = True
            vg.llm.sleep(level=1)
            self._vllm_slept_at = step

    # ------------------------------------------------------------------ the rollout itself
    def run(self, prompts: Sequence[Any], batch_generate: BatchGenerate, *, call: int | None = None,
            rank: int = 0, max_context_tokens: int | None = None) -> dict[str, list[Any]]:
        """Run one episode per prompt row and collate them in row order.

        Episode ``row`` samples with the seed ``episode_seed(self.seed, rank, call, row)``: the same arguments give
        the same episodes (every row's tokens depend only on its own seed, see :func:`hf_batch_generate`), and two
        processes holding the same prompts (a GRPO group split across ranks) sample different ones.

        Args:
            prompts: Dataset prompts (each must be in the index).
            batch_generate: The batched generator (see :meth:`hf_generator`).
            call: Round number the seeds derive from; None takes the next one (``self.calls + 1``). A fixed
                evaluation passes the same ``call`` before and after training.
            rank: The process index (``accelerator.process_index``).
            max_context_tokens: The generator's context limit (default ``self.max_context_tokens``; None: none).

        Returns:
            The hook's dict (``logprobs`` filled from the generator).
        """
        instances = [self.index.lookup(p) for p in prompts]
        sample_idx, seen = [], {}
        for inst in instances:  # position of each row within its task's group (TRL repeats rows consecutively)
            sample_idx.append(seen.get(inst.id, 0))
            seen[inst.id] = sample_idx[-1] + 1
        if call is None:
            self.calls += 1
            call = self.calls
        limit = max_context_tokens if max_context_tokens is not None else self.max_context_tokens
        seeds = [episode_seed(self.seed, rank, call, row) for row in range(len(instances))]
        episodes: list[TokenEpisode | None] = [None] * len(instances)
        failures: dict[int, str] = {}  # row -> why its episode failed outside the env's own handling
        batcher = TurnBatcher(batch_generate, len(instances), flush_s=self.flush_s, batching=self.batching)
        started = threading.Semaphore(self.concurrency)

        def one(row: int) -> None:
            with started:
                batcher.start()
                try:
                    self._episode(row, instances[row], batcher, seeds[row], sample_idx[row], episodes, failures,
                                  limit)
                finally:
                    batcher.done()

        with ThreadPoolExecutor(max_workers=max(1, len(instances)), thread_name_prefix="episode") as pool:
            futures = [pool.submit(one, row) for row in range(len(instances))]
            batcher.serve()
            for f in futures:
                f.result()  # re-raise an episode's error here, in the trainer's thread
        self.timing = {"generate_s": batcher.generate_s, "wall_s": batcher.wall_s,
                       "idle_share": batcher.idle_share, "calls": float(batcher.calls)}
        for row, ep in enumerate(episodes):
            if ep is None:  # an infrastructure failure: a placeholder row (reward None, nothing trained on)
                failures.setdefault(row, "the episode produced no result")
                episodes[row] = self._placeholder(prompts[row])
        return self._collate(episodes, failures)

    def _episode(self, row: int, instance: Any, batcher: TurnBatcher, seed: int, sample_idx: int,
                 episodes: list[TokenEpisode | None], failures: dict[int, str],
                 max_context_tokens: int | None = None) -> None:
        """Play one episode into ``episodes[row]``; whatever escapes the env is recorded in ``failures[row]``.

        An episode whose env server died mid-way (``ServerLost``) is played again from its reset, same seed, on
        another server (:func:`medagentgym.env_client.http_client.retry_lost`) before it counts as a failure."""

        def play() -> TokenEpisode:
            env = self.make_env()
            try:
                return token_rollout(
                    env, instance, tokenizer=self.tokenizer, generate_fn=batcher.generate_fn(row), seed=seed,
                    max_new_tokens=self.max_new_tokens, max_completion_tokens=self.max_completion_tokens,
                    sample_idx=sample_idx, policy_name=self.policy_name, max_context_tokens=max_context_tokens)
            finally:
                try:
                    env.close()
                except Exception as exc:  # noqa: BLE001 - the episode is recorded; a failed close only logs
                    log.warning("closing the env of row %d failed: %s: %s", row, type(exc).__name__, exc)

        try:
            episodes[row] = retry_lost(play, what=f"episode of row {row}")
        except Exception as exc:  # noqa: BLE001 - one episode's failure is that episode's outcome
            if batcher.failed:  # generation itself failed: serve() re-raises it in the trainer's thread
                return
            episodes[row] = None
            failures[row] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            log.error("episode of row %d (%s) failed outside the environment's handling, counted as an "
                      "infrastructure failure (reward None): %s", row, getattr(instance, "id", "?"), failures[row],
                      exc_info=exc)

    def _placeholder(self, prompt: Any) -> TokenEpisode:
        """A row for an episode that could not be played: the prompt, one masked end-of-turn token, reward None."""
        from medagentgym.env_client.tokens import render_prompt

        try:
            ids = render_prompt(self.tokenizer, prompt) if isinstance(prompt, list) else \
                list(self.tokenizer(str(prompt), add_special_tokens=False)["input_ids"])
        except Exception:  # noqa: BLE001 - any ids will do: the row carries no reward and no trained token
            ids = [self.tokenizer.eos_token_id]
        ep = TokenEpisode(prompt_ids=ids or [self.tokenizer.eos_token_id], reward=None)
        ep.extend([self.tokenizer.eos_token_id], model=False)
        return ep

    def _score(self, episodes: list[TokenEpisode], failures: dict[int, str]) -> list[dict[str, Any]]:
        """The verifier's score per episode (none for failed rows; a failed call scores None everywhere)."""
        extra: list[dict[str, Any]] = [{} for _ in episodes]
        if self.verifier is None:
            return extra
        rows = [i for i in range(len(episodes)) if i not in failures]
        scores = list(self.verifier.score([episodes[i].trajectory for i in rows]))  # one batched call per round
        if len(scores) != len(rows):
            raise RuntimeError(f"the verifier returned {len(scores)} scores for {len(rows)} episodes")
        for i in range(len(episodes)):
            extra[i] = {"verifier_score": None}
        for i, score in zip(rows, scores):
            extra[i] = {"verifier_score": score}
        return extra

    def _collate(self, episodes: list[TokenEpisode], failures: dict[int, str] | None = None) -> dict[str, list[Any]]:
        failures = dict(failures or {})
        components: dict[str, list[float | None]] = {name: [] for name in self.rewards}
        stats = []
        extra = self._score(episodes, failures)
        for row, (ep, kwargs) in enumerate(zip(episodes, extra)):
            n_model = sum(ep.env_mask)
            if row in failures:
                st, values = EpisodeStats(model_tokens=n_model, env_tokens=len(ep.env_mask) - n_model), {}
            else:
                verdict, st = episode_outcome(ep.trajectory, model_tokens=n_model,
                                              env_tokens=len(ep.env_mask) - n_model)
                values = self._components(row, verdict, ep.trajectory, kwargs, failures)
            unscorable = row in failures or combine(values, self.weights).total is None
            for name in self.rewards:
                components[name].append(None if unscorable else values[name])
            infra = row in failures or _infra_outcome(ep.trajectory)
            stats.append(dataclasses.replace(st, grader_error=unscorable, infra_failure=infra,
                                             truncated=st.truncated or ep.truncated).to_dict())
        causes = [failures.get(row) or str(getattr(episodes[row].trajectory.final, "reason", ""))
                  for row, s in enumerate(stats) if s["infra_failure"]]
        self.infra.add([bool(s["infra_failure"]) for s in stats], causes)
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            **{f"reward_{name}": values for name, values in components.items()},
            "episode_stats": stats,
        }

    def _components(self, row: int, verdict: Any, trajectory: Any, kwargs: dict[str, Any],
                    failures: dict[int, str]) -> dict[str, float | None]:
        """Every reward term of one episode; a term that raises is missing (our failure: the row is dropped)."""
        values: dict[str, float | None] = {}
        for name, fn in self.rewards.items():
            try:
                values[name] = fn(verdict=verdict, trajectory=trajectory, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a broken reward term or family is ours, not the policy's
                failures[row] = f"reward term {name!r} raised {type(exc).__name__}: {str(exc)[:200]}"
                log.error("row %d: %s", row, failures[row])
                values[name] = None
        return values


def _infra_outcome(trajectory: Any) -> bool:
    """True when the env ended the episode on an infrastructure failure (a fatal sandbox error or infra grading)."""
    final = getattr(trajectory, "final", None)
    if final is None:
        return False
    verdict = final.verdict or {}
    return bool(verdict.get("infra") and verdict.get("error")) or str(final.reason or "").startswith("fatal")
