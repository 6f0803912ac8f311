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
  saw: ``env_client.tokens.token_rollout`` builds them token-in/token-out, never re-tokenizing history.

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

from env_client.tokens import TokenEpisode, token_rollout
from medcopilot.metrics import episode_outcome

__all__ = ["BatchGenerate", "EnvRolloutFunc", "PromptIndex", "TurnBatcher", "hf_batch_generate", "prompt_key"]

log = logging.getLogger(__name__)

#: ``batch_generate(contexts) -> (new_ids per context, logprobs per context or None)``.
BatchGenerate = Callable[[list[list[int]]], "tuple[list[list[int]], list[list[float]] | None]"]


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
            raise ValueError("no task instances to train on: build the tasks first (scripts/build_tasks.py)")
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


def hf_batch_generate(model: Any, tokenizer: Any, contexts: list[list[int]], *, max_new_tokens: int,
                      temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                      seed: int | None = None) -> tuple[list[list[int]], list[list[float]]]:
    """Sample one continuation per context with ``model.generate`` (left padding) and return ids and logprobs.

    Logprobs come from the processed scores, i.e. the distribution the ids were drawn from. Each continuation is
    cut after its first stop id (eos ``<|im_end|>`` or pad).

    Args:
        model: An unwrapped HF causal LM.
        tokenizer: Its tokenizer (pad and eos ids set).
        contexts: Full id sequences so far, one per episode (shapes differ).
        max_new_tokens: Per-turn cap.
        temperature: Sampling temperature (> 0).
        top_p: Nucleus mass; 1 keeps the whole distribution.
        top_k: 0 disables top-k (transformers' default of 50 would bias GRPO's ratio).
        seed: Seeds torch's RNG for this batch.

    Returns:
        ``(new_ids, logprobs)``: per context, ``len(new_ids[i]) == len(logprobs[i]) >= 1``.
    """
    import torch

    if seed is not None:
        torch.manual_seed(seed)
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    stop = [t for t in (eos_id, pad_id) if t is not None]
    width = max(len(c) for c in contexts)
    device = next(model.parameters()).device
    ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(contexts), width), dtype=torch.long)
    for i, ctx in enumerate(contexts):  # left padding: every row's next token sits at the same column
        ids[i, width - len(ctx):] = torch.tensor(ctx, dtype=torch.long)
        mask[i, width - len(ctx):] = 1
    with torch.no_grad():
        out = model.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
                             do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k,
                             eos_token_id=stop, pad_token_id=pad_id, output_scores=True,
                             return_dict_in_generate=True)
    new_ids, logprobs = [], []
    steps = torch.stack(out.scores, dim=1).float().log_softmax(dim=-1)  # (B, T_new, V)
    for i in range(len(contexts)):
        row = out.sequences[i, width:].tolist()
        cut = next((k + 1 for k, t in enumerate(row) if t in stop), len(row))
        row = row[:cut]
        new_ids.append(row)
        logprobs.append([steps[i, k, t].item() for k, t in enumerate(row)])
    return new_ids, logprobs


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
        self._pending: dict[int, list[int]] = {}
        self._results: dict[int, tuple[list[int], list[float] | None]] = {}
        self._error: BaseException | None = None
        self.calls = 0

    def generate_fn(self, slot: int) -> Callable[[list[int], int | None], tuple[list[int], list[float]]]:
        """The ``generate_fn`` for episode ``slot`` (the per-turn seed is unused: one RNG draw per batch)."""
        def fn(context: list[int], seed: int | None) -> tuple[list[int], list[float]]:
            return self.request(slot, context)
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

    def request(self, slot: int, context: list[int]) -> tuple[list[int], list[float]]:
        """Queue one context and block until its continuation is generated."""
        with self._cv:
            self._pending[slot] = list(context)
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
                contexts = [self._pending.pop(s) for s in slots]
            began = time.monotonic()
            try:
                ids, logprobs = self._gen(contexts)
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


class EnvRolloutFunc:
    """The ``rollout_func`` for ``trl.GRPOTrainer``: one multi-turn env episode per prompt row.

    Args:
        make_env: Returns a fresh ``env_client.Env`` (one per concurrent episode; closed after it).
        index: Maps each dataset prompt back to its task instance.
        tokenizer: The policy's tokenizer (chat template, eos ``<|im_end|>``).
        max_new_tokens: Per assistant turn (tokens).
        max_completion_tokens: Per episode after the prompt, model and env tokens (None: no cap beyond turns).
        concurrency: Episodes in flight at once.
        rewards: Reward components, name -> ``fn(*, verdict, trajectory, **kw) -> float | None`` (functions of
            ``rewards``); each is returned as ``reward_<name>``. Default: ``{"correctness": rewards.correctness}``.
        seed: Base seed; episode seeds derive from it, the call count and the row.
        flush_s: See :class:`TurnBatcher`. Keep ``concurrency <= `` the sandbox pool's workers: an episode holds
            its session from reset to end, so extra episodes wait for a worker and turns batch poorly.
        batching: ``continuous`` (episodes advance independently; the generator serves whoever waits) or
            ``lockstep`` (turns wait for one another); see :class:`TurnBatcher`. ``timing`` holds the last
            call's generator busy time, wall time and idle share.
        policy_name: Recorded in each trajectory header.
        verifier: A learned-verifier scorer (``score(trajectories) -> list[float | None]``, e.g.
            ``medcopilot.verifier.VerifierScorer`` or ``rewards.HTTPVerifier``). When given, every call scores its
            finished episodes in one batch and passes each score to the reward functions as ``verifier_score``
            (None where the verifier failed: the ``verifier_score`` term is then missing, never 0).
    """

    def __init__(self, *, make_env: Callable[[], Any], index: PromptIndex, tokenizer: Any, max_new_tokens: int,
                 max_completion_tokens: int | None = None, concurrency: int = 16,
                 rewards: dict[str, Callable[..., float | None]] | None = None, seed: int = 0,
                 flush_s: float = 0.25, policy_name: str = "grpo", verifier: Any = None,
                 batching: str = "continuous"):
        from rewards import correctness

        if max_new_tokens < 1 or concurrency < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} and concurrency={concurrency} must both be >= 1")
        self.make_env, self.index, self.tokenizer = make_env, index, tokenizer
        self.max_new_tokens, self.max_completion_tokens = max_new_tokens, max_completion_tokens
        self.concurrency, self.seed, self.flush_s, self.batching = concurrency, seed, flush_s, batching
        self.timing: dict[str, float] = {}  # the last call's generate_s, wall_s, idle_share, calls
        self._vllm_slept_at: int | None = None  # trainer step at which the hook last put vLLM to sleep
        self.policy_name = policy_name
        self.rewards = dict(rewards) if rewards else {"correctness": correctness}
        self.verifier = verifier
        self.calls = 0

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
        if args.use_vllm:
            return self._run_vllm(prompts, trainer)
        from trl.models import unwrap_model_for_generation

        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=args.ds3_gather_for_generation) as model:
            was_training = model.training
            model.eval()
            try:
                out = self.run(prompts, self.hf_generator(model, temperature=args.temperature, top_p=args.top_p,
                                                          top_k=args.top_k))
            finally:
                model.train(was_training)
        out["logprobs"] = None  # only vLLM's importance-sampling correction reads them
        return out

    def hf_generator(self, model: Any, *, temperature: float, top_p: float = 1.0, top_k: int = 0) -> BatchGenerate:
        """A :data:`BatchGenerate` over ``model.generate`` (also used to evaluate a policy outside training)."""
        counter = iter(range(1 << 62))

        def gen(contexts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
            return hf_batch_generate(model, self.tokenizer, contexts, max_new_tokens=self.max_new_tokens,
                                     temperature=temperature, top_p=top_p, top_k=top_k,
                                     seed=self.seed * 1_000_003 + self.calls * 10_007 + next(counter))
        return gen

    def _run_vllm(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        vg = trainer.vllm_generation
        if (vg.mode == "server" and trainer.accelerator.num_processes > 1) or vg.tensor_parallel_size > 1:
            raise NotImplementedError("multi-turn vLLM rollouts need vllm_mode='colocate' with tensor parallel size "
                                      "1 per process (server mode with several processes syncs every turn)")
        # VLLMGeneration reads its cap at each call: one call here is one assistant turn, not a whole episode.
        vg.max_completion_length = self.max_new_tokens

        def gen(contexts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
            _, completion_ids, logprobs, _ = vg.generate(prompts=contexts, images=None, num_generations=1)
            return completion_ids, [[lp[0] for lp in seq] for seq in logprobs]

        with self._vllm_awake(vg, trainer.state.global_step):
            return self.run(prompts, gen)

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
    def run(self, prompts: Sequence[Any], batch_generate: BatchGenerate) -> dict[str, list[Any]]:
        """Run one episode per prompt row and collate them in row order.

        Args:
            prompts: Dataset prompts (each must be in the index).
            batch_generate: The batched generator (see :meth:`hf_generator`).

        Returns:
            The hook's dict (``logprobs`` filled from the generator).
        """
        instances = [self.index.lookup(p) for p in prompts]
        sample_idx, seen = [], {}
        for inst in instances:  # position of each row within its task's group (TRL repeats rows consecutively)
            sample_idx.append(seen.get(inst.id, 0))
            seen[inst.id] = sample_idx[-1] + 1
        self.calls += 1
        base = (self.seed * 1_000_003 + self.calls) * 100_003
        episodes: list[TokenEpisode | None] = [None] * len(instances)
        batcher = TurnBatcher(batch_generate, len(instances), flush_s=self.flush_s, batching=self.batching)
        started = threading.Semaphore(self.concurrency)

        def one(row: int) -> None:
            with started:
                batcher.start()
                try:
                    env = self.make_env()
                    try:
                        episodes[row] = token_rollout(
                            env, instances[row], tokenizer=self.tokenizer, generate_fn=batcher.generate_fn(row),
                            seed=base + row, max_new_tokens=self.max_new_tokens,
                            max_completion_tokens=self.max_completion_tokens, sample_idx=sample_idx[row],
                            policy_name=self.policy_name)
                    finally:
                        env.close()
                finally:
                    batcher.done()

        with ThreadPoolExecutor(max_workers=max(1, len(instances)), thread_name_prefix="episode") as pool:
            futures = [pool.submit(one, row) for row in range(len(instances))]
            batcher.serve()
            for f in futures:
                f.result()  # re-raise an episode's error here, in the trainer's thread
        self.timing = {"generate_s": batcher.generate_s, "wall_s": batcher.wall_s,
                       "idle_share": batcher.idle_share, "calls": float(batcher.calls)}
        missing = [row for row, e in enumerate(episodes) if e is None]
        if missing:
            raise RuntimeError(f"episodes of rows {missing} produced no result")
        return self._collate(episodes)

    def _collate(self, episodes: list[TokenEpisode]) -> dict[str, list[Any]]:
        components: dict[str, list[float | None]] = {name: [] for name in self.rewards}
        stats = []
        extra: list[dict[str, Any]] = [{} for _ in episodes]
        if self.verifier is not None:  # one batched call per generation round
            scores = list(self.verifier.score([ep.trajectory for ep in episodes]))
            if len(scores) != len(episodes):
                raise RuntimeError(f"the verifier returned {len(scores)} scores for {len(episodes)} episodes")
            extra = [{"verifier_score": s} for s in scores]
        for ep, kwargs in zip(episodes, extra):
            n_model = sum(ep.env_mask)
            verdict, st = episode_outcome(ep.trajectory, model_tokens=n_model,
                                          env_tokens=len(ep.env_mask) - n_model)
            for name, fn in self.rewards.items():
                components[name].append(fn(verdict=verdict, trajectory=ep.trajectory, **kwargs))
            failed = any(values[-1] is None for values in components.values())
            stats.append(dataclasses.replace(st, grader_error=failed).to_dict())
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            **{f"reward_{name}": values for name, values in components.items()},
            "episode_stats": stats,
        }
