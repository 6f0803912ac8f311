"""Learning on the tiny model: an oracle warm start, a fixed evaluation, and short GRPO / PPO runs on CPU.

The pieces the learning tests (``tests/medcopilot/test_*learning*.py``), ``scripts/bench_learning.py`` and
``medagentgym demo`` share. A run (:func:`learning_run`) goes:

1. **Family**: ``say_number`` (one turn: the question shows the number to submit; declared in a folder by
   :func:`declare_say_number`), ``clinic_code`` (two turns: query the clinic database, submit the code it holds,
   the same for every task; :func:`declare_clinic_code`) or ``toy_lookup`` (two turns: run SQL, submit the value
   it returned; a registered family whose answers exist only in each instance's database, so success needs the
   observation).
2. **Warm start**: the tiny random model never emits a valid tool call, so it first learns from the family's
   oracle episodes (``reference_solution`` played through the real environment at token level: exact ids,
   environment tokens masked out of the loss) for a few supervised steps, stopped early on purpose so that it
   is right only part of the time when sampling at temperature 1.
3. **Fixed evaluation** (:func:`evaluate`): ``reps`` sampled episodes per task with seeds that depend only on the
   run's seed and the episode's row, the same before and after training (common random numbers: the
   difference measures the policy, not the draw).
4. **RL**: TRL's ``GRPOTrainer`` with :class:`~medcopilot.rollout_func.EnvRolloutFunc`, or the in-house
   :class:`~medcopilot.trainers.ppo.PPOTrainer`, evaluated every ``eval_every`` steps for a reward curve.

Everything is seeded by the run's ``seed`` (warm-up batches, RL sampling, evaluation draws), so one seed gives
one run; different seeds stand in for the floating-point paths of other CPUs.

Example:
    >>> result = learning_run("grpo", "say_number", tiny_dir, workdir, seed=0, steps=30)  # doctest: +SKIP
    >>> result.gain  # success after minus before, on the fixed evaluation
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DECLARED", "FAMILIES", "GRPO_DEFAULTS", "PPO_DEFAULTS", "Playground", "RunResult", "Score", "WARM_DEFAULTS",
    "declare_clinic_code", "declare_say_number", "evaluate", "learning_run", "oracle_episodes", "train_grpo",
    "train_ppo", "warm_start",
]

SAY_NUMBER = "say_number"
SAY_NUMBER_QUESTIONS = ("Submit the number 7.", "Please submit 7 as the answer.", "The answer is 7; submit it.",
                        "Reply with the number 7.")
CLINIC_CODE = "clinic_code"
CLINIC_CODE_QUESTIONS = ("What is the clinic's protocol code? Query the database, then submit it.",
                         "Look up the protocol code in the clinic database and submit it.",
                         "Find the clinic's current protocol code with SQL; submit only the code.",
                         "Run a query for the protocol code, then submit the code.")
#: Family -> (turn budget, tokens per assistant turn, tokens per episode after the prompt).
FAMILIES = {SAY_NUMBER: (1, 32, 64), CLINIC_CODE: (3, 40, 160), "toy_lookup": (3, 40, 160)}
#: Round number of the fixed evaluation's seeds (training rounds count from 1, so they never coincide).
EVAL_CALL = 1_000_000
#: Warm-start steps (the first ``short`` of them without the shared system prompt: cheap, see
#: :func:`warm_start`), batch, learning rate and demonstrator per family: a well-formed start that is right
#: only part of the time (success ~0.2-0.5).
WARM_DEFAULTS = {SAY_NUMBER: {"steps": 100, "batch": 8, "lr": 3e-3, "per_task": 9, "right_share": 1 / 3},
                 CLINIC_CODE: {"steps": 200, "short": 150, "batch": 8, "lr": 3e-3, "per_task": 8, "right_share": 0.5},
                 "toy_lookup": {"steps": 120, "batch": 8, "lr": 3e-3, "per_task": 1, "right_share": 1.0}}
#: GRPO and PPO settings (chosen from the sweep in docs/benchmarks.md).
#: GRPO warms its learning rate up over 5 steps: Adam's first steps move every weight by about ``lr`` whatever
#: the gradient, and at full rate they collapsed one seed in five (docs/benchmarks.md, "Learning").
GRPO_DEFAULTS = {"steps": 60, "lr": 5e-4, "group": 16, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 5}
PPO_DEFAULTS = {"steps": 30, "lr": 5e-4, "group": 4, "batch": 16}


def declare_say_number(root: str | os.PathLike, questions: tuple[str, ...] = SAY_NUMBER_QUESTIONS, *,
                       name: str = SAY_NUMBER) -> Path:
    """Declare the one-turn family ``name`` (``say_number``) under the tasks root ``root``; returns ``root``.

    Every question shows the number to submit (7); the only action is ``submit_answer``.
    """
    root = Path(root)
    fam = root / name
    fam.mkdir(parents=True, exist_ok=True)
    (fam / "family.yaml").write_text(f"name: {name}\nanswer_type: integer\nactions: [submit_answer]\n"
                                     "max_turns: 1\nsplits: [train, test]\n", encoding="utf-8")
    lines = [{"question": q, "answer": 7, "split": "train"} for q in questions]
    (fam / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return root


def declare_clinic_code(root: str | os.PathLike) -> Path:
    """Declare the two-turn ``clinic_code`` family under the tasks root ``root``; returns ``root``.

    Every task asks for the protocol code stored in ``/data/clinic.db`` (table ``protocol``, code 7): the
    reference solution queries it with SQL, then submits it. All tasks share the one answer, which a 140k-parameter
    model can learn in minutes; reading a per-task answer out of an observation (``toy_lookup``) it cannot (see
    docs/benchmarks.md), so this is the family the demo trains on.
    """
    import sqlite3

    root = Path(root)
    fam = root / CLINIC_CODE
    (fam / "data").mkdir(parents=True, exist_ok=True)
    db = fam / "data" / "clinic.db"
    if not db.exists():
        tmp = db.with_name(f".clinic.db.{os.getpid()}")
        con = sqlite3.connect(tmp)
        try:
            con.execute("CREATE TABLE protocol (code INTEGER NOT NULL, name TEXT NOT NULL)")
            con.execute("INSERT INTO protocol VALUES (7, 'sepsis bundle')")
            con.commit()
        finally:
            con.close()
        os.replace(tmp, db)
    (fam / "family.yaml").write_text(f"name: {CLINIC_CODE}\nanswer_type: integer\n"
                                     "actions: [code_execution, submit_answer]\nmax_turns: 3\n"
                                     "data: {clinic.db: data/clinic.db}\nsplits: [train, test]\n", encoding="utf-8")
    lines = [{"question": q, "answer": 7, "split": "train", "solution": "SELECT code FROM protocol",
              "solution_lang": "sql"} for q in CLINIC_CODE_QUESTIONS]
    (fam / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return root


#: Families declared in a folder on first use (the others are registered ``tasks`` families).
DECLARED = {SAY_NUMBER: declare_say_number, CLINIC_CODE: declare_clinic_code}


@dataclass
class Playground:
    """A family's tasks, prompt index and sandbox pool, ready for rollouts.

    Attributes:
        root: The tasks root.
        family: The ``tasks`` family object.
        index: Prompt index of the ``split`` instances (the training dataset's rows).
        tokenizer: The policy's tokenizer.
        pool: The sandbox pool (closed by :meth:`close`).
        max_turns: Turn budget of an episode.
        max_new_tokens: Tokens per assistant turn.
        max_completion_tokens: Tokens per episode after the prompt (model and environment).
    """

    root: Path
    family: Any
    index: Any
    tokenizer: Any
    pool: Any
    max_turns: int
    max_new_tokens: int
    max_completion_tokens: int

    @classmethod
    def open(cls, name: str, root: str | os.PathLike, tokenizer: Any, *, sandbox: str = "auto", workers: int = 16,
             split: str = "train") -> Playground:
        """Load family ``name`` from the tasks root ``root`` (a :data:`DECLARED` one is declared there if missing,
        ``toy_lookup`` built at size tiny) and start a sandbox pool of ``workers``: ``bwrap`` (``auto`` is the same:
        it fails where bwrap cannot run rather than fall back), or ``local`` (unisolated, asked for by name)."""
        import sandbox as sandbox_pkg
        from medagentgym import tasks
        from env_client.prompts import initial_messages
        from medcopilot.rollout_func import PromptIndex

        if name not in FAMILIES:
            raise ValueError(f"family {name!r} has no learning settings; choose one of {', '.join(FAMILIES)}")
        root = Path(root)
        if name in DECLARED and not (root / name / "family.yaml").is_file():
            DECLARED[name](root)
        family = tasks.make(name, root=root)
        if name not in DECLARED and not (root / name / "manifest.json").is_file():
            family.build(root, size="tiny", seed=0)
        index = PromptIndex.from_instances(family.instances(split),
                                           render=lambda inst: initial_messages(inst, family.actions))
        # Workers start with the family's data mounted, so no episode restarts one to mount it.
        mounts = {name: root / family.name / rel for inst in family.instances(split) for name, rel in inst.data.items()}
        # ``auto`` is the jail: isolation is never lost silently (bwrap that cannot start raises, naming the fix);
        # unisolated runs are asked for by name, ``sandbox="local"``.
        backend = "bwrap" if sandbox == "auto" else sandbox
        pool = sandbox_pkg.make_pool(backend, workers=workers, allow_unisolated=backend == "local", mounts=mounts)
        return cls(root, family, index, tokenizer, pool, *FAMILIES[name])

    @property
    def prompts(self) -> list[Any]:
        """The dataset prompts, one per task."""
        return [row["prompt"] for row in self.index.rows]

    def rollout(self, *, seed: int, concurrency: int = 16, index: Any = None) -> Any:
        """An :class:`~medcopilot.rollout_func.EnvRolloutFunc` over this family (``index`` defaults to ours)."""
        from env_client import Env, EnvConfig
        from medcopilot.rollout_func import EnvRolloutFunc

        config = EnvConfig(max_turns=self.max_turns)
        return EnvRolloutFunc(make_env=lambda: Env(self.pool, tasks_root=self.root, config=config),
                              index=index or self.index, tokenizer=self.tokenizer, max_new_tokens=self.max_new_tokens,
                              max_completion_tokens=self.max_completion_tokens, concurrency=concurrency, seed=seed,
                              flush_s=30.0)

    def close(self) -> None:
        """Stop the sandbox pool."""
        self.pool.close()


# --- warm start --------------------------------------------------------------------------------------------------


def oracle_episodes(playground: Playground, instances: list[Any] | None = None, *, per_task: int = 1,
                    right_share: float = 1.0, seed: int = 0) -> list[Any]:
    """Demonstrations: the family's reference solutions played through the environment at token level.

    Each action is rendered as the model would write it (``<tool_call>`` JSON) and tokenized canonically, plus
    ``<|im_end|>``; observations come from the real environment (the sandbox runs the demonstrated code). With
    ``right_share < 1`` the demonstrator is noisy: each episode's submitted answer is the right one with that
    probability and otherwise another digit (for the integer families here), so a model imitating it ends up
    well formed but right only that often, and RL's job is the one decision that earns the reward.

    Args:
        playground: The family and its sandbox pool.
        instances: Tasks to demonstrate (default: every training task).
        per_task: Episodes per task.
        right_share: Probability that a demonstrated answer is the right one.
        seed: Seeds which episodes are wrong and their wrong answers.

    Returns:
        :class:`env_client.tokens.TokenEpisode` per task and repetition (``env_mask`` 0 on observation tokens).

    Raises:
        RuntimeError: If an episode's grade disagrees with the demonstration (a broken family or environment).
    """
    import random

    from env_client import Env, EnvConfig
    from env_client.policies import render_action
    from env_client.tokens import token_rollout

    tok, rng = playground.tokenizer, random.Random(seed)
    out = []
    tasks_ = instances if instances is not None else list(playground.index.instances.values())
    for inst in [i for i in tasks_ for _ in range(per_task)]:
        steps = [dict(step) for step in playground.family.reference_solution(inst)]
        right = rng.random() < right_share
        if not right:  # the same episode, one wrong digit submitted
            gold = str(steps[-1]["params"]["answer"])
            steps[-1] = {**steps[-1], "params": {"answer": rng.choice([d for d in "123456789" if d != gold])}}
        script = iter(steps)

        def scripted(context: list[int], seed: int | None) -> tuple[list[int], list[float]]:
            step = next(script)
            ids = tok(render_action(step["action"], step["params"]), add_special_tokens=False)["input_ids"]
            return ids + [tok.eos_token_id], [0.0] * (len(ids) + 1)

        env = Env(playground.pool, tasks_root=playground.root, config=EnvConfig(max_turns=playground.max_turns))
        try:
            episode = token_rollout(env, inst, tokenizer=tok, generate_fn=scripted, seed=0, policy_name="oracle")
        finally:
            env.close()
        failed = [s for s in episode.trajectory.steps if s.status not in ("ok", "submitted")]
        if failed or episode.reward != float(right):  # a demonstration must really run, not just submit the gold
            why = f"step {failed[0].turn} {failed[0].status}: {failed[0].observation[:160]!r}" if failed else \
                f"scored {episode.reward}, expected {float(right)}"
            raise RuntimeError(f"a demonstration of {inst.id} did not run cleanly ({why})")
        out.append(episode)
    return out


def warm_start(model: Any, episodes: list[Any], *, steps: int, batch: int, lr: float, pad_id: int,
               seed: int = 0, prefix: bool = True) -> float:
    """Supervised steps on oracle episodes: loss on the model's tokens only (``env_mask`` 1), AdamW.

    The prompt prefix every episode shares (the system prompt and tool schemas, most of each sequence) is
    encoded once per step without gradient and reused from the KV cache, so a step trains only on the short
    rest. The forward computation is the one generation runs; only the gradient through the shared prefix is
    left out, which keeps a warm start to seconds on two CPU cores.

    Args:
        model: A HF causal LM (trained in place).
        episodes: :class:`env_client.tokens.TokenEpisode` (prompt ids, completion ids, env mask).
        steps: Optimizer steps.
        batch: Episodes per step, drawn with replacement by a generator seeded with ``seed``.
        lr: AdamW learning rate.
        pad_id: Padding id.
        seed: Seeds the batch draws.
        prefix: Attend to the shared prefix. False trains on the rest alone (same positions, the prefix masked
            out): a cheap first phase in which attention between the question, the actions and the observations
            is learnt without the shared system-prompt and tool tokens (~650 for ``clinic_code`` with the tiny
            model's tokenizer) diluting every attention row.

    Returns:
        The last step's loss.
    """
    import torch

    prompts = [e.prompt_ids for e in episodes]
    shared = 0
    while all(len(p) > shared + 1 and p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    prefix_ids = torch.tensor([prompts[0][:shared]])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        cache, seen = None, shared if prefix else 0
        if prefix:
            with torch.no_grad():
                cache = model(input_ids=prefix_ids, use_cache=True).past_key_values
            cache.batch_repeat_interleave(batch)
        rows = torch.randint(0, len(episodes), (batch,), generator=gen).tolist()
        seqs = [episodes[r].prompt_ids[shared:] + episodes[r].completion_ids for r in rows]
        width = max(map(len, seqs))
        ids = torch.full((batch, width), pad_id)
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, seen + width), dtype=torch.long)
        mask[:, :seen] = 1
        for i, (r, seq) in enumerate(zip(rows, seqs)):
            ids[i, :len(seq)] = torch.tensor(seq)
            start = len(episodes[r].prompt_ids) - shared
            trained = torch.tensor(episodes[r].env_mask, dtype=torch.bool)
            labels[i, start:len(seq)] = torch.where(trained, torch.tensor(episodes[r].completion_ids), -100)
            mask[i, seen:seen + len(seq)] = 1
        positions = torch.arange(shared, shared + width).expand(batch, width)
        loss = model(input_ids=ids, attention_mask=mask, past_key_values=cache, position_ids=positions,
                     labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return loss.item()


# --- evaluation --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """A fixed evaluation's result: mean reward and success over ``episodes`` (graded ones for the reward)."""

    reward: float
    success: float
    episodes: int


def evaluate(rollout: Any, model: Any, prompts: list[Any], *, reps: int, temperature: float = 1.0) -> Score:
    """Sample ``reps`` episodes per prompt with ``model`` on the fixed evaluation seeds and score them.

    The seeds depend only on ``rollout.seed`` and the row (prompt ``i``, repetition ``k`` is row
    ``i * reps + k``), so two calls with the same rollout score two policies on the same random draws.
    """
    was_training = model.training
    model.eval()
    try:
        out = rollout.run([p for p in prompts for _ in range(reps)],
                          rollout.hf_generator(model, temperature=temperature), call=EVAL_CALL)
    finally:
        model.train(was_training)
    graded = [r for r in out["reward_correctness"] if r is not None]
    return Score(statistics.fmean(graded) if graded else float("nan"),
                 statistics.fmean(float(s["success"]) for s in out["episode_stats"]), len(out["episode_stats"]))


# --- RL ----------------------------------------------------------------------------------------------------------


def train_grpo(model: Any, tokenizer: Any, rollout: Any, rows: list[dict], *, steps: int, lr: float, group: int,
               output_dir: str | os.PathLike, seed: int = 0, on_step: Callable[[int, Any], None] | None = None,
               **config: Any) -> Any:
    """Train ``model`` with TRL's ``GRPOTrainer`` and ``rollout`` as its ``rollout_func``; returns the trainer.

    One step generates ``group`` episodes of one task (``per_device_train_batch_size = num_generations``), DAPO
    loss, no KL reference, constant learning rate (unless ``config`` names a scheduler), top-p 1 and top-k 0
    (sampled = rescored distribution).
    ``on_step(step, model)`` runs after every optimizer step (e.g. an evaluation for a reward curve).
    """
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from medcopilot.rewards_adapter import EpisodeReward

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = GRPOConfig(**{"output_dir": str(output_dir), "max_steps": steps, "per_device_train_batch_size": group,
                         "num_generations": group, "learning_rate": lr, "lr_scheduler_type": "constant",
                         "beta": 0.0, "loss_type": "dapo", "top_p": 1.0, "top_k": 0, "use_cpu": True, "bf16": False,
                         "activation_checkpointing": False, "logging_steps": 1, "report_to": [],
                         "save_strategy": "no", "disable_tqdm": True, "seed": seed,
                         "max_completion_length": rollout.max_completion_tokens, **config})

    class _OnStep(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if on_step is not None:
                on_step(state.global_step, model)

    trainer = GRPOTrainer(model=model, reward_funcs=[EpisodeReward("correctness", group_size=group)], args=args,
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer, rollout_func=rollout,
                          callbacks=[_OnStep()])
    trainer.remove_callback(PrinterCallback)  # one dict per step on stdout; the history keeps them
    trainer.train()
    return trainer


def train_ppo(model: Any, tokenizer: Any, rollout: Any, prompts: list[Any], *, steps: int, lr: float, group: int,
              batch: int, output_dir: str | os.PathLike, seed: int = 0,
              on_step: Callable[[int, Any], None] | None = None, **args: Any) -> Any:
    """Train ``model`` with the in-house PPO loop (KL against a frozen copy of its start); returns the trainer.

    ``batch`` episodes per step (``group`` per task) and one optimizer step on them (one epoch, one mini-batch:
    as many updates as GRPO makes; four per step made the tiny model's policy blow up within 25 steps in the
    sweep), Monte-Carlo returns (``gamma = lam = 1``), k3 KL with a fixed coefficient, a 10x faster value head.
    ``args`` override :class:`~medcopilot.ppo.PPOArgs` fields.
    """
    import copy

    from medcopilot.ppo import PPOArgs
    from medcopilot.trainers.ppo import PPOTrainer

    settings = {"max_steps": steps, "rollout_batch_size": batch, "mini_batch_size": batch,
                "micro_batch_size": batch // 2, "ppo_epochs": 1, "learning_rate": lr,
                "value_head_learning_rate": 10 * lr, "gamma": 1.0, "lam": 1.0, "kl_coef": 0.01, "kl_estimator": "k3",
                "vf_coef": 0.1, "max_completion_length": rollout.max_completion_tokens, "seed": seed, **args}
    trainer = PPOTrainer(model=model, tokenizer=tokenizer, rollout=rollout, prompts=prompts, args=PPOArgs(**settings),
                         output_dir=output_dir, reward_weights={"correctness": 1.0}, group_size=group,
                         ref_model=copy.deepcopy(model), callbacks=[] if on_step is None else [on_step])
    trainer.train()
    return trainer


@dataclass
class RunResult:
    """One learning run: the fixed evaluation before and after, the curve, and what it cost.

    Attributes:
        method: ``grpo`` or ``ppo``.
        family: The family trained on.
        seed: The run's seed.
        before: Success on the fixed evaluation after the warm start.
        after: Success on the fixed evaluation after RL.
        curve: ``(step, success)`` on the fixed evaluation, step 0 = ``before``.
        train_rewards: ``(step, mean reward of the step's episodes)`` per generation round.
        heldout_before: Success on held-out test tasks before RL (None when not measured).
        heldout_after: The same after RL.
        reward_before: Mean reward on the fixed evaluation before RL (here the correctness reward: equal to
            ``before`` unless a grader failed).
        reward_after: The same after RL.
        sandbox_layers: The isolation layers of the sandbox the episodes ran in.
        settings: Hyper-parameters of the run.
        wall_s: Wall time (seconds).
        cpu_s: CPU time of this process (user + system seconds).
    """

    method: str
    family: str
    seed: int
    before: float
    after: float
    curve: list[tuple[int, float]] = field(default_factory=list)
    train_rewards: list[tuple[int, float]] = field(default_factory=list)
    heldout_before: float | None = None
    heldout_after: float | None = None
    reward_before: float | None = None
    reward_after: float | None = None
    sandbox_layers: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def gain(self) -> float:
        """``after - before``."""
        return self.after - self.before

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict, ``gain`` included."""
        return {**asdict(self), "gain": self.gain}


def learning_run(method: str, family: str, model_dir: str | os.PathLike, workdir: str | os.PathLike, *, seed: int,
                 steps: int | None = None, lr: float | None = None, group: int | None = None,
                 eval_episodes: int = 96, eval_every: int = 0, heldout: bool = False, sandbox: str = "auto",
                 warm: dict[str, Any] | None = None, log: Callable[[str], None] | None = None,
                 tasks_root: str | os.PathLike | None = None, save_to: str | os.PathLike | None = None,
                 **extra: Any) -> RunResult:
    """Warm start the tiny model at ``model_dir`` on ``family``, then train it with ``method``; see the module doc.

    Args:
        method: ``grpo`` or ``ppo``.
        family: A key of :data:`FAMILIES`.
        model_dir: The tiny model folder (``medcopilot.tiny.build_tiny_model``); it is not modified.
        workdir: Scratch folder (tasks root and trainer output).
        seed: Seeds the warm start, RL sampling and the fixed evaluation.
        steps: RL steps (default from :data:`GRPO_DEFAULTS` / :data:`PPO_DEFAULTS`).
        lr: RL learning rate (same defaults).
        group: Episodes per task in a step (same defaults).
        eval_episodes: Episodes of the fixed evaluation (at least; every training task gets the same number).
        eval_every: Evaluate every this many steps for the curve (0: before and after only).
        heldout: Also evaluate on the family's test split before and after (tasks never trained on).
        sandbox: Sandbox backend for the episodes (``auto``, ``bwrap`` or ``local``).
        warm: Overrides of :data:`WARM_DEFAULTS` for the family (``steps``, ``batch``, ``lr``).
        log: Called with one progress line per evaluation.
        tasks_root: Where the family's tasks live (built or declared there when missing); default
            ``workdir/tasks``.
        save_to: Save the trained model and tokenizer there (atomically).
        **extra: More trainer settings (``GRPOConfig`` fields, or ``PPOArgs`` fields plus ``batch``).

    Returns:
        The :class:`RunResult`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medcopilot.rollout_func import PromptIndex

    if method not in ("grpo", "ppo"):
        raise ValueError(f"method {method!r} is unknown; choose grpo or ppo")
    defaults = dict(GRPO_DEFAULTS if method == "grpo" else PPO_DEFAULTS)
    settings = {**defaults, **{k: v for k, v in {"steps": steps, "lr": lr, "group": group}.items() if v is not None},
                **extra}
    warm_settings = {**WARM_DEFAULTS[family], **(warm or {})}
    started, cpu0 = time.monotonic(), time.process_time()
    workdir = Path(workdir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    concurrency = max(16, settings.get("batch", settings["group"]))
    play = Playground.open(family, tasks_root or workdir / "tasks", tok, sandbox=sandbox, workers=concurrency)
    try:
        demos = oracle_episodes(play, per_task=warm_settings["per_task"], right_share=warm_settings["right_share"],
                                seed=seed)
        short = warm_settings.get("short", 0)
        if short:
            warm_start(model, demos, steps=short, batch=warm_settings["batch"], lr=warm_settings["lr"],
                       pad_id=tok.pad_token_id, seed=seed, prefix=False)
        loss = warm_start(model, demos, steps=warm_settings["steps"] - short, batch=warm_settings["batch"],
                          lr=warm_settings["lr"], pad_id=tok.pad_token_id, seed=seed + 1)
        rollout = play.rollout(seed=seed, concurrency=concurrency)
        test_rollout = None
        if heldout:
            from env_client.prompts import initial_messages

            test_index = PromptIndex.from_instances(play.family.instances("test"),
                                                    render=lambda i: initial_messages(i, play.family.actions))
            test_rollout = play.rollout(seed=seed, concurrency=concurrency, index=test_index)
            test_prompts = [row["prompt"] for row in test_index.rows]

        reps = -(-eval_episodes // len(play.prompts))

        def score(m: Any) -> Score:
            return evaluate(rollout, m, play.prompts, reps=reps)

        def say(text: str) -> None:
            if log:
                log(f"[{method}/{family} seed {seed}] {text} ({time.process_time() - cpu0:.0f} s CPU)")

        first = score(model)
        before = first.success
        curve = [(0, before)]
        say(f"warm start loss {loss:.3f}; success {before:.3f}")
        held_before = evaluate(test_rollout, model, test_prompts, reps=1).success if test_rollout else None

        def on_step(step: int, m: Any) -> None:
            if eval_every and step % eval_every == 0 and step < settings["steps"]:
                curve.append((step, score(m).success))
                say(f"step {step}: success {curve[-1][1]:.3f}")

        rl = {k: v for k, v in settings.items() if k not in ("steps", "lr", "group")}
        if method == "grpo":
            trainer = train_grpo(model, tok, rollout, play.index.rows, steps=settings["steps"], lr=settings["lr"],
                                 group=settings["group"], output_dir=workdir / "out", seed=seed, on_step=on_step, **rl)
            final = trainer.model
            rewards = [(row["step"], row["reward"]) for row in trainer.state.log_history if "reward" in row]
        else:
            trainer = train_ppo(model, tok, rollout, play.prompts, steps=settings["steps"], lr=settings["lr"],
                                group=settings["group"], output_dir=workdir / "out", seed=seed, on_step=on_step, **rl)
            final = trainer.accelerator.unwrap_model(trainer.model).policy
            rewards = [(row["step"], row["reward"]) for row in trainer.state.log_history
                       if row.get("reward") is not None]
        last = score(final)
        after = last.success
        curve.append((settings["steps"], after))
        held_after = evaluate(test_rollout, final, test_prompts, reps=1).success if test_rollout else None
        if save_to is not None:
            from medcopilot.modeling import save_pretrained_atomic

            save_pretrained_atomic(save_to, final, tok)
        say(f"after {settings['steps']} steps: success {after:.3f} (gain {after - before:+.3f})")
    finally:
        play.close()
    return RunResult(method, family, seed, before, after, curve, [(step, round(r, 4)) for step, r in rewards], held_before,
                     held_after, first.reward, last.reward, list(getattr(play.pool, "layers", [])),
                     {**settings, "warm": warm_settings, "eval_episodes": len(play.prompts) * reps},
                     round(time.monotonic() - started, 1), round(time.process_time() - cpu0, 1))
