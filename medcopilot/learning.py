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
4. **RL**: TRL's ``GRPOTrainer`` with :class:`~medagentgym.medcopilot.rollout_func.EnvRolloutFunc`, or the in-house
   :class:`~medagentgym.medcopilot.trainers.ppo.PPOTrainer`, evaluated every ``eval_every`` steps for a reward curve.

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
    "CHOICE",
    "CHOICE_METRIC",
    "CONTROLLED",
    "DECLARED",
    "FAMILIES",
    "FAMILY_PROMPT",
    "GRPO_DEFAULTS",
    "OBSERVATION",
    "PPO_DEFAULTS",
    "PROMPT",
    "RETRY",
    "WARM_DEFAULTS",
    "Playground",
    "RunResult",
    "Score",
    "choice_accuracy",
    "choice_episodes",
    "choice_hits",
    "copy_check",
    "declare_clinic_code",
    "declare_say_number",
    "decoy_observations",
    "default_settings",
    "evaluate",
    "learning_run",
    "oracle_episodes",
    "paired",
    "sql_tables",
    "swapped_cue",
    "train_grpo",
    "train_ppo",
    "warm_start",
    "warm_up",
    "wilson",
]

SAY_NUMBER = "say_number"
SAY_NUMBER_QUESTIONS = ("Submit the number 7.", "Please submit 7 as the answer.", "The answer is 7; submit it.",
                        "Reply with the number 7.")
CLINIC_CODE = "clinic_code"
CLINIC_CODE_QUESTIONS = ("What is the clinic's protocol code? Query the database, then submit it.",
                         "Look up the protocol code in the clinic database and submit it.",
                         "Find the clinic's current protocol code with SQL; submit only the code.",
                         "Run a query for the protocol code, then submit the code.")
#: The family whose answers exist only in a tool observation (``medagentgym/tasks/toy_lookup.py``): its fixed
#: evaluation runs on held-out records and has a control with every observed value made wrong.
OBSERVATION = "toy_lookup"
#: The query-choice family (``medagentgym/tasks/toy_choice.py``): three tables per record, the question names which
#: one to read. Its demonstrations read a table drawn at random (:func:`choice_episodes`), its fixed evaluation runs
#: on 128 held-out records, reports query-choice accuracy and has a swapped-cue control (:func:`swapped_cue`).
CHOICE = "toy_choice"
#: Family -> (turn budget, tokens per assistant turn, tokens per episode after the prompt).
FAMILIES = {SAY_NUMBER: (1, 32, 64), CLINIC_CODE: (3, 40, 160), OBSERVATION: (3, 40, 160), CHOICE: (3, 48, 176)}
#: The error-recovery family (``medagentgym/tasks/toy_retry.py``): toy_choice records, every second one with its
#: tables renamed, so the first query fails with a grounded error listing the real names. Its demonstrations retry
#: with a listed name drawn at random (:func:`choice_episodes`); it reports first-retry accuracy.
RETRY = "toy_retry"
FAMILIES[RETRY] = (4, 48, 320)
#: Families evaluated on held-out records (the observation, query-choice and error-recovery rungs).
HELD_OUT = (OBSERVATION, CHOICE, RETRY)
#: Families with a control copy of their held-out records (:func:`decoy_observations`, :func:`swapped_cue`).
CONTROLLED = (OBSERVATION, CHOICE)
#: Family -> (what its choice accuracy measures, which SQL read of an episode it looks at).
CHOICE_METRIC = {CHOICE: ("query choice", 0), RETRY: ("first retry", 1)}
#: Prompt style of every learning run (``medagentgym.env_client.prompts``): one system line naming the actions instead of the
#: ~650-token tool block, which the tiny model learns from demonstrations anyway; a third of the tokens to train
#: and sample on each step.
PROMPT = "compact"
#: Families that open with another prompt style: the query-choice rungs put the question last (``compact_last``), so
#: the warm start's short-context copy of the reading into the query holds in the whole prompt (:func:`warm_up`).
FAMILY_PROMPT = {CHOICE: "compact_last", RETRY: "compact_last"}
#: Round number of the fixed evaluation's seeds (training rounds count from 1, so they never coincide).
EVAL_CALL = 1_000_000
#: Warm-start steps (the first ``short`` of them without the shared system prompt: cheap, see
#: :func:`warm_start`), batch, learning rate and demonstrator per family: a well-formed start that is right
#: only part of the time (success ~0.2-0.5).
WARM_DEFAULTS = {SAY_NUMBER: {"steps": 100, "batch": 8, "lr": 3e-3, "per_task": 9, "right_share": 1 / 3},
                 CLINIC_CODE: {"steps": 200, "short": 150, "batch": 8, "lr": 3e-3, "per_task": 8, "right_share": 0.5},
                 OBSERVATION: {"steps": 600, "last_turn": 300, "clean": 100, "batch": 8, "lr": 3e-3,
                               "per_task": 4, "right_share": 0.25},
                 # Every phase on the random-table demonstrator (each training record once per table): copying
                 # the observed value is taught, choosing the cued table is not (success ~1/3 of the copy rate).
                 # first_turn: the copy of the reading into the query's comment in a short context first (see warm_up).
                 CHOICE: {"steps": 600, "first_turn": 200, "first_context": 48, "last_turn": 300, "clean": 100,
                          "batch": 8, "lr": 3e-3},
                 RETRY: {"steps": 600, "first_turn": 200, "first_context": 48, "last_turn": 300, "clean": 100,
                         "batch": 8, "lr": 3e-3}}
#: GRPO and PPO settings (chosen from the sweep in docs/benchmarks.md).
#: GRPO warms its learning rate up over 5 steps: Adam's first steps move every weight by about ``lr`` whatever
#: the gradient, and at full rate they collapsed one seed in five (docs/benchmarks.md, "Learning").
GRPO_DEFAULTS = {"steps": 60, "lr": 5e-4, "group": 16, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 5}
PPO_DEFAULTS = {"steps": 30, "lr": 5e-4, "group": 4, "batch": 16}
#: Per-family changes to those: on toy_lookup PPO takes 60 steps (seed 0: +0.12 after 30, +0.32 after 60). On
#: toy_choice GRPO trains on 4 records x 16 episodes a step (one record a step pushed the policy toward whichever
#: table that record cues; with four, only the cue-to-table rule is common to the step's gradient; issue 30,
#: docs/benchmarks.md "Query choice, fourth round": +0.21 to +0.64 query choice on seeds 0-4). PPO likewise: 64
#: episodes a step, 16 per record, 60 steps (pilot, seed 0: query choice 0.344 -> 0.875; "fifth round").
#: toy_retry takes toy_choice's shape unchanged (its retry is the same cue-to-table decision, made after an error;
#: no pilot of its own; per seed in docs/benchmarks.md, "Query choice and error recovery, sixth round").
FAMILY_RL = {OBSERVATION: {"ppo": {"steps": 60}},
             CHOICE: {"grpo": {"per_device_train_batch_size": 64}, "ppo": {"steps": 60, "group": 16, "batch": 64}}}
FAMILY_RL[RETRY] = {method: dict(changes) for method, changes in FAMILY_RL[CHOICE].items()}


def default_settings(method: str, family: str) -> dict[str, Any]:
    """What :func:`learning_run` uses for ``method`` on ``family`` unless told otherwise: ``{"rl": ..., "warm":
    ..., "prompt": ...}`` (:data:`GRPO_DEFAULTS` or :data:`PPO_DEFAULTS` with :data:`FAMILY_RL`'s changes,
    :data:`WARM_DEFAULTS`, the prompt style). A benchmark keys its stored runs on it, so a run made under other
    defaults is never reused as if it were this one."""
    rl = {**(GRPO_DEFAULTS if method == "grpo" else PPO_DEFAULTS), **FAMILY_RL.get(family, {}).get(method, {})}
    return {"rl": rl, "warm": dict(WARM_DEFAULTS[family]), "prompt": FAMILY_PROMPT.get(family, PROMPT)}


def declare_say_number(root: str | os.PathLike, questions: tuple[str, ...] = SAY_NUMBER_QUESTIONS, *,
                       name: str = SAY_NUMBER) -> Path:
    """Declare the one-turn family ``name`` (``say_number``) under the tasks root ``root``; returns ``root``.

    Every question shows the number to submit (7); the only action is ``submit_answer``.
    """
    root = Path(root)
    fam = root / name
    fam.mkdir(parents=True, exist_ok=True)
    (fam / "family.yaml").write_text(f"name: {name}\nanswer_type: integer\nactions: [submit_answer]\n"
                                     "max_turns: 1\nsplits: [train, test]\nsandbox_preload: [sqlite3]\n",
                                     encoding="utf-8")
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
                                     "data: {clinic.db: data/clinic.db}\nsplits: [train, test]\n"
                                     "sandbox_preload: [sqlite3]\n", encoding="utf-8")
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
    prompt: str = PROMPT

    @classmethod
    def open(cls, name: str, root: str | os.PathLike, tokenizer: Any, *, sandbox: str = "auto", workers: int = 16,
             split: str = "train", prompt: str | None = None) -> Playground:
        """Load family ``name`` from the tasks root ``root`` (a :data:`DECLARED` one is declared there if missing,
        ``toy_lookup`` built at size tiny) and start a sandbox pool of ``workers``: ``bwrap`` (``auto`` is the same:
        it fails where bwrap cannot run rather than fall back), or ``local`` (unisolated, asked for by name).
        Episodes open with the ``prompt`` style (``medagentgym.env_client.prompts.PROMPTS``; default the family's
        :data:`FAMILY_PROMPT`, else :data:`PROMPT`)."""
        from medagentgym import sandbox as sandbox_pkg
        from medagentgym import tasks

        if name not in FAMILIES:
            raise ValueError(f"family {name!r} has no learning settings; choose one of {', '.join(FAMILIES)}")
        prompt = prompt or FAMILY_PROMPT.get(name, PROMPT)
        root = Path(root)
        if name in DECLARED and not (root / name / "family.yaml").is_file():
            DECLARED[name](root)
        family = tasks.make(name, root=root)
        if name not in DECLARED and not (root / name / "manifest.json").is_file():
            family.build(root, size="tiny", seed=0)
        index = _index(family, split, prompt)
        # Workers start with the family's data mounted, so no episode restarts one to mount it.
        mounts = {name: root / family.name / rel for inst in family.instances(split) for name, rel in inst.data.items()}
        # ``auto`` is the jail: isolation is never lost silently (bwrap that cannot start raises, naming the fix);
        # unisolated runs are asked for by name, ``sandbox="local"``.
        backend = "bwrap" if sandbox == "auto" else sandbox
        # lean workers: every learning family declares sandbox_preload (sqlite3 alone; say_number and clinic_code
        # in the family.yaml written above), as rollouts and the RL trainers' pools read it
        pool = sandbox_pkg.make_pool(backend, workers=workers, allow_unisolated=backend == "local", mounts=mounts,
                                     preload=getattr(family, "sandbox_preload", None))
        return cls(root, family, index, tokenizer, pool, *FAMILIES[name], prompt=prompt)

    @property
    def prompts(self) -> list[Any]:
        """The dataset prompts, one per task."""
        return [row["prompt"] for row in self.index.rows]

    @property
    def env_config(self) -> Any:
        """The episode rules: the family's turn budget and the prompt style."""
        from medagentgym.env_client import EnvConfig

        return EnvConfig(max_turns=self.max_turns, prompt=self.prompt)

    def split_index(self, split: str) -> Any:
        """A prompt index of another split's instances (their data must be under the same mounts, as
        ``toy_lookup``'s test records are)."""
        return _index(self.family, split, self.prompt)

    def rollout(self, *, seed: int, concurrency: int = 16, index: Any = None, batching: str = "continuous") -> Any:
        """An :class:`~medagentgym.medcopilot.rollout_func.EnvRolloutFunc` over this family (``index`` defaults to ours;
        ``batching``: see :class:`~medagentgym.medcopilot.rollout_func.TurnBatcher`)."""
        from medagentgym.env_client import Env
        from medagentgym.medcopilot.rollout_func import EnvRolloutFunc

        config = self.env_config
        return EnvRolloutFunc(make_env=lambda: Env(self.pool, tasks_root=self.root, config=config),
                              index=index or self.index, tokenizer=self.tokenizer, max_new_tokens=self.max_new_tokens,
                              max_completion_tokens=self.max_completion_tokens, concurrency=concurrency, seed=seed,
                              flush_s=30.0, batching=batching)

    def close(self) -> None:
        """Stop the sandbox pool."""
        self.pool.close()


def _index(family: Any, split: str, prompt: str) -> Any:
    """The prompt index (dataset rows) of ``family``'s ``split`` instances, rendered in the ``prompt`` style."""
    from medagentgym.env_client.prompts import initial_messages
    from medagentgym.medcopilot.rollout_func import PromptIndex

    return PromptIndex.from_instances(family.instances(split),
                                      render=lambda inst: initial_messages(inst, family.actions, prompt=prompt))


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
        :class:`medagentgym.env_client.tokens.TokenEpisode` per task and repetition (``env_mask`` 0 on observation tokens).

    Raises:
        RuntimeError: If an episode's grade disagrees with the demonstration (a broken family or environment).
    """
    import random

    rng = random.Random(seed)
    out = []
    tasks_ = instances if instances is not None else list(playground.index.instances.values())
    for inst in [i for i in tasks_ for _ in range(per_task)]:
        steps = [dict(step) for step in playground.family.reference_solution(inst)]
        right = rng.random() < right_share
        if not right:  # the same episode, one wrong digit submitted
            gold = str(steps[-1]["params"]["answer"])
            steps[-1] = {**steps[-1], "params": {"answer": rng.choice([d for d in "123456789" if d != gold])}}
        out.append(_play_script(playground, inst, steps, float(right)))
    return out


def choice_episodes(playground: Playground, instances: list[Any] | None = None) -> list[Any]:
    """The :data:`CHOICE` family's demonstrations: every record queried once per table, the value read submitted.

    Each episode reads one of the record's three tables and submits the value that table holds (what the
    observation shows), so the episodes are consistent (the submission is always the observed value: copying is
    taught) and the table read never depends on the question (every record is shown once with each table: cue ->
    table is not taught; one in three of them is right). The query opens with a comment naming the reading the
    question asks for, ``-- discharge`` then ``SELECT value FROM recent``: the question's word is copied into the
    query (copying again), whichever table is read. Played through the environment like :func:`oracle_episodes`.

    Raises:
        RuntimeError: If an episode's grade is not 1 exactly when it read the cued table.
    """
    from medagentgym.tasks.toy_choice import TABLES, query

    def sql(cue: str, table: str) -> dict[str, Any]:
        # a comment naming the reading the question asks for: a copy of the question's word into the query, right
        # before the table is chosen (the question-to-query path RL can redirect to the table); the table itself
        # stays the draw's, and the output is unchanged (a column alias would change the observation's header)
        return {"action": "code_execution", "params": {"lang": "sql", "code": f"-- {cue}\n{query(table)}"}}

    out = []
    tasks_ = instances if instances is not None else list(playground.index.instances.values())
    for inst in tasks_:
        real, cue = inst.metadata.get("tables", {t: t for t in TABLES}), inst.metadata["table"]
        for k, table in enumerate(TABLES):
            # toy_retry's renamed records: a listed name first (it fails), then a real name, each once per record
            first = [sql(cue, TABLES[(k + 1) % len(TABLES)])] if inst.metadata.get("renamed") else []
            steps = [*first, sql(cue, real[table]),
                     {"action": "submit_answer", "params": {"answer": str(inst.metadata["readings"][table])}}]
            out.append(_play_script(playground, inst, steps, float(table == cue),
                                    failing=len(first)))
    return out


def _play_script(playground: Playground, inst: Any, steps: list[dict[str, Any]], expected: float, *,
                 failing: int = 0) -> Any:
    """Play the actions ``steps`` on ``inst`` at token level; the episode must score ``expected`` and its steps run
    cleanly, except its first ``failing`` ones, which must fail (toy_retry's query of a renamed table)."""
    from medagentgym.env_client import Env
    from medagentgym.env_client.policies import render_action
    from medagentgym.env_client.tokens import token_rollout

    tok = playground.tokenizer
    script = iter(steps)

    def scripted(context: list[int], seed: int | None) -> tuple[list[int], list[float]]:
        step = next(script)
        ids = tok(render_action(step["action"], step["params"]), add_special_tokens=False)["input_ids"]
        return ids + [tok.eos_token_id], [0.0] * (len(ids) + 1)

    env = Env(playground.pool, tasks_root=playground.root, config=playground.env_config)
    try:
        episode = token_rollout(env, inst, tokenizer=tok, generate_fn=scripted, seed=0, policy_name="oracle")
    finally:
        env.close()
    ran = episode.trajectory.steps
    failed = [s for s in ran[failing:] if s.status not in ("ok", "submitted")]
    failed += [s for s in ran[:failing] if s.status in ("ok", "submitted")]
    if failed or episode.reward != expected:  # a demonstration must really run, not just submit the gold
        why = f"step {failed[0].turn} {failed[0].status}: {failed[0].observation[:160]!r}" if failed else \
            f"scored {episode.reward}, expected {expected}"
        raise RuntimeError(f"a demonstration of {inst.id} did not run cleanly ({why})")
    return episode


def warm_up(model: Any, playground: Playground, settings: dict[str, Any], *, seed: int) -> float:
    """The warm start of a learning run, from a family's :data:`WARM_DEFAULTS` entry (``settings``).

    ``steps`` supervised steps (:func:`warm_start`, one AdamW throughout, ``batch`` episodes per step at ``lr``) in
    up to four phases, in this order:

    0. ``first_turn`` steps on the exact demonstrator's first turns, each with only the last ``first_context``
       tokens of its prompt before it (positions from 0): where a turn copies a word of the question (the query
       choice rungs' comment naming the reading, :func:`choice_episodes`), a short context teaches the copy in ~200
       steps, and with the question last in the prompt (``compact_last``) it sits as far from the reply as in the
       whole prompt, so the copy holds there (in the whole prompt from the start it is not learnt in 100 steps:
       issue 30's diagnosis).
    1. ``last_turn`` steps on the exact demonstrator's episodes (one per task) with each episode cut to its last
       turn: the observation before it, then the submit. With a ~60-token context the model learns to copy the
       observed value in ~200 steps; with the whole episode (~250 tokens) that takes thousands on some seeds.
    2. ``clean`` steps on the same episodes, whole: the copying carries over within ~50 steps.

    On :data:`CHOICE` phases 1-2 use :func:`choice_episodes` (a table read at random, the value read submitted)
    instead of the exact demonstrator, and its settings have no later phase.
    3. ``short`` steps on the noisy demonstrator's episodes (``per_task`` per task, right with probability
       ``right_share``) without the shared prompt prefix.
    4. The rest on the noisy demonstrator's episodes, whole. After phases 1-2 this brings success down to about
       ``right_share`` while the copying stays in the weights, for RL to raise again.

    Returns:
        The last step's loss.
    """
    import torch

    pad, batch, lr = playground.tokenizer.pad_token_id, settings["batch"], settings["lr"]
    first_turn, last_turn, clean, short = (settings.get(k, 0) for k in ("first_turn", "last_turn", "clean", "short"))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rest = settings["steps"] - first_turn - last_turn - clean - short
    if min(first_turn, last_turn, clean, short, rest) < 0:
        raise ValueError(f"warm-up phases first_turn={first_turn}, last_turn={last_turn}, clean={clean}, "
                         f"short={short} must be >= 0 and add up to at most steps={settings['steps']}")
    common = {"batch": batch, "lr": lr, "pad_id": pad, "optimizer": opt}
    loss = float("nan")
    if first_turn or last_turn or clean:
        exact = (choice_episodes(playground) if playground.family.name in (CHOICE, RETRY)
                 else oracle_episodes(playground, seed=seed))
        if first_turn:
            loss = _warm_cuts(model, _first_turns(exact, settings["first_context"]), steps=first_turn,
                              seed=seed + 5, **common)
        if last_turn:
            loss = warm_start(model, exact, steps=last_turn, seed=seed + 3, last_turn=True, **common)
        if clean:
            loss = warm_start(model, exact, steps=clean, seed=seed + 2, **common)
    if not (short or rest):
        return loss
    demos = oracle_episodes(playground, per_task=settings["per_task"], right_share=settings["right_share"], seed=seed)
    warm_start(model, demos, steps=short, seed=seed, prefix=False, **common)
    return warm_start(model, demos, steps=rest, seed=seed + 1, **common)


def warm_start(model: Any, episodes: list[Any], *, steps: int, batch: int, lr: float, pad_id: int,
               seed: int = 0, prefix: bool = True, last_turn: bool = False, optimizer: Any = None) -> float:
    """Supervised steps on oracle episodes: loss on the model's tokens only (``env_mask`` 1), AdamW.

    The prompt prefix every episode shares (the system prompt and tool schemas, most of each sequence) is
    encoded once per step without gradient and reused from the KV cache, so a step trains only on the short
    rest. The forward computation is the one generation runs; only the gradient through the shared prefix is
    left out, which keeps a warm start to seconds on two CPU cores.

    Args:
        model: A HF causal LM (trained in place).
        episodes: :class:`medagentgym.env_client.tokens.TokenEpisode` (prompt ids, completion ids, env mask).
        steps: Optimizer steps.
        batch: Episodes per step, drawn with replacement by a generator seeded with ``seed``.
        lr: AdamW learning rate.
        pad_id: Padding id.
        seed: Seeds the batch draws.
        prefix: Attend to the shared prefix. False trains on the rest alone (same positions, the prefix masked
            out): a cheap first phase in which attention between the question, the actions and the observations
            is learnt without the shared system-prompt and tool tokens (~650 for ``clinic_code`` with the tiny
            model's tokenizer) diluting every attention row.
        last_turn: Train on each episode's last assistant turn with only the observation before it as context
            (positions from 0): the shortest context in which the turn's decision can be learnt, e.g. copying
            the observed value (see :func:`warm_up`). Every episode needs an observation.
        optimizer: Continue with this optimizer (its state included) instead of a fresh AdamW at ``lr``.

    Returns:
        The last step's loss (nan when ``steps`` is 0).
    """
    import torch

    if last_turn:
        return _warm_last_turn(model, episodes, steps=steps, batch=batch, lr=lr, pad_id=pad_id, seed=seed,
                               optimizer=optimizer)
    prompts = [e.prompt_ids for e in episodes]
    shared = 0
    while all(len(p) > shared + 1 and p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    prefix_ids = torch.tensor([prompts[0][:shared]])
    opt = optimizer if optimizer is not None else torch.optim.AdamW(model.parameters(), lr=lr)
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


def _warm_last_turn(model: Any, episodes: list[Any], *, steps: int, batch: int, lr: float, pad_id: int, seed: int,
                    optimizer: Any) -> float:
    """:func:`warm_start` with ``last_turn``: each episode from its last observation on, loss on the last turn."""
    cuts = []
    for ep in episodes:
        mask = ep.env_mask
        end = len(mask)
        turn = end
        while turn > 0 and mask[turn - 1]:  # the last assistant turn
            turn -= 1
        start = turn
        while start > 0 and not mask[start - 1]:  # the observation before it
            start -= 1
        if start == turn:
            raise ValueError("last_turn needs episodes with an observation before their last turn")
        ids = ep.completion_ids[start:]
        cuts.append((ids, [t if m else -100 for t, m in zip(ids, mask[start:])]))
    return _warm_cuts(model, cuts, steps=steps, batch=batch, lr=lr, pad_id=pad_id, seed=seed, optimizer=optimizer)


def _first_turns(episodes: list[Any], context: int) -> list[tuple[list[int], list[int]]]:
    """Each episode's first assistant turn after the last ``context`` ids of its prompt: ``(ids, labels)``, the
    loss on the turn alone."""
    cuts = []
    for ep in episodes:
        n = 0
        while n < len(ep.env_mask) and ep.env_mask[n]:
            n += 1
        if n == 0:
            raise ValueError("first_turn needs episodes whose completion opens with a model turn")
        head = ep.prompt_ids[-context:]
        turn = ep.completion_ids[:n]
        cuts.append((head + turn, [-100] * len(head) + turn))
    return cuts


def _warm_cuts(model: Any, cuts: list[tuple[list[int], list[int]]], *, steps: int, batch: int, lr: float,
               pad_id: int, seed: int, optimizer: Any) -> float:
    """Supervised steps on short ``(ids, labels)`` sequences, positions from 0; the last step's loss."""
    import torch

    opt = optimizer if optimizer is not None else torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        rows = torch.randint(0, len(cuts), (batch,), generator=gen).tolist()
        width = max(len(cuts[r][0]) for r in rows)
        ids = torch.full((batch, width), pad_id)
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(cuts[r][0])
            ids[i, :n], labels[i, :n], mask[i, :n] = torch.tensor(cuts[r][0]), torch.tensor(cuts[r][1]), 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return loss.item()


# --- evaluation --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """A fixed evaluation's result: mean reward and success over ``episodes`` (graded ones for the reward).

    ``records`` (the instance id), ``wins`` (1.0 or 0.0) and ``queries`` (the tables the episode's SQL read, in
    order, :func:`sql_tables`) hold one entry per episode, in row order, for record-level statistics
    (:func:`paired`) and query-choice accuracy (:func:`choice_accuracy`).
    """

    reward: float
    success: float
    episodes: int
    records: tuple[str, ...] = ()
    wins: tuple[float, ...] = ()
    queries: tuple[tuple[str, ...], ...] = ()


def evaluate(rollout: Any, model: Any, prompts: list[Any], *, reps: int, temperature: float = 1.0) -> Score:
    """Sample ``reps`` episodes per prompt with ``model`` on the fixed evaluation seeds and score them.

    The seeds depend only on ``rollout.seed`` and the row (prompt ``i``, repetition ``k`` is row
    ``i * reps + k``), so two calls with the same rollout score two policies on the same random draws.
    """
    was_training = model.training
    model.eval()
    rows = [p for p in prompts for _ in range(reps)]
    try:
        out = rollout.run(rows, rollout.hf_generator(model, temperature=temperature), call=EVAL_CALL)
    finally:
        model.train(was_training)
    graded = [r for r in out["reward_correctness"] if r is not None]
    wins = tuple(float(s["success"]) for s in out["episode_stats"])
    turns = [_model_turns(rollout.tokenizer, ids, mask) for ids, mask in zip(out["completion_ids"], out["env_mask"])]
    return Score(statistics.fmean(graded) if graded else float("nan"), statistics.fmean(wins), len(wins),
                 tuple(rollout.index.lookup(p).id for p in rows), wins,
                 tuple(tuple(t for turn in ts for t in sql_tables(turn)) for ts in turns))


def _model_turns(tokenizer: Any, ids: list[int], mask: list[int]) -> list[str]:
    """The assistant turns of one episode's completion (runs of ``env_mask`` 1), decoded."""
    from itertools import groupby

    runs = groupby(zip(ids, mask), key=lambda pair: bool(pair[1]))
    return [tokenizer.decode([t for t, _ in run], skip_special_tokens=True) for own, run in runs if own]


def sql_tables(turn: str) -> list[str]:
    """The tables a turn's ``code_execution`` reads: each ``FROM <name>`` of its code (lower case), in order.

    The turn's text is the model's own (a ``<tool_call>`` JSON, possibly malformed); a turn that does not parse as
    an action still names what it would have read, which is what query choice is about.
    """
    import re

    turn = turn.replace("\\n", " ").replace("\\t", " ")  # the code as JSON-escaped in the tool call's text
    return [m.lower() for m in re.findall(r"\bFROM\s+[\"'`\[]?([A-Za-z_][A-Za-z0-9_]*)", turn, flags=re.IGNORECASE)]


def choice_hits(score: Score, cued: dict[str, str], *, at: int = 0) -> list[float]:
    """Per episode of ``score`` on a record in ``cued`` (instance id -> table): 1.0 if its ``at``-th SQL read (0: the
    first) is that table, else 0.0 (an episode without that read too). Episodes on other records are left out."""
    return [float(len(q) > at and q[at] == cued[r]) for r, q in zip(score.records, score.queries) if r in cued]


def choice_accuracy(score: Score, cued: dict[str, str], *, at: int = 0) -> float:
    """Query-choice accuracy: the share of ``score``'s episodes on ``cued``'s records whose ``at``-th SQL read is the
    cued table (:func:`choice_hits`). On :data:`CHOICE` (``at`` 0, every record): the first query; on
    :data:`RETRY` (``at`` 1, the renamed records, their cued table's real name): first-retry accuracy."""
    hits = choice_hits(score, cued, at=at)
    return statistics.fmean(hits) if hits else float("nan")


def paired(before: list[float] | tuple[float, ...], after: list[float] | tuple[float, ...],
           records: list[str] | tuple[str, ...], *, z: float = 1.96) -> dict[str, float]:
    """The record-level paired difference ``after - before`` and its 95 % interval.

    ``before[i]`` and ``after[i]`` are one episode's outcome (0/1) under two policies on the same record and the same
    sampling seed (common random numbers); episodes are averaged per record first, then the per-record differences
    give the mean, its standard error (sample standard deviation / sqrt(records)) and the normal interval
    (``z`` 1.96; with >= 128 records the t quantile is 1.98, the same to two digits). "Improved" means ``low > 0``.
    """
    per: dict[str, list[float]] = {}
    for r, b, a in zip(records, before, after):
        per.setdefault(r, []).append(a - b)
    diffs = [statistics.fmean(v) for v in per.values()]
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    return {"mean": round(mean, 4), "low": round(mean - z * se, 4), "high": round(mean + z * se, 4),
            "records": len(diffs)}


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

    from medagentgym.medcopilot.rewards_adapter import EpisodeReward

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
    sweep), Monte-Carlo returns (``gamma = lam = 1``), k1 KL in the reward with a fixed coefficient (as the
    recipes: k1's policy gradient is the KL's), a 10x faster value head.
    ``args`` override :class:`~medagentgym.medcopilot.ppo.PPOArgs` fields.
    """
    import copy

    from medagentgym.medcopilot.ppo import PPOArgs
    from medagentgym.medcopilot.trainers.ppo import PPOTrainer

    settings = {"max_steps": steps, "rollout_batch_size": batch, "mini_batch_size": batch,
                "micro_batch_size": batch // 2, "ppo_epochs": 1, "learning_rate": lr,
                "value_head_learning_rate": 10 * lr, "gamma": 1.0, "lam": 1.0, "kl_coef": 0.01, "kl_estimator": "k1",
                "vf_coef": 0.1, "max_completion_length": rollout.max_completion_tokens, "seed": seed, **args}
    trainer = PPOTrainer(model=model, tokenizer=tokenizer, rollout=rollout, prompts=prompts, args=PPOArgs(**settings),
                         output_dir=output_dir, reward_weights={"correctness": 1.0}, group_size=group,
                         ref_model=copy.deepcopy(model), callbacks=[] if on_step is None else [on_step])
    trainer.train()
    return trainer


@dataclass
class RunResult:
    """One learning run: the fixed evaluation before and after, the curve, the control, and what it cost.

    Attributes:
        method: ``grpo`` or ``ppo``.
        family: The family trained on.
        seed: The run's seed.
        before: Success on the fixed evaluation after the warm start.
        after: Success on the fixed evaluation after RL.
        curve: ``(step, success, low, high)`` on the fixed evaluation (step 0 = ``before``; ``low``/``high``: the
            95 % Wilson interval of that evaluation's success).
        train_rewards: ``(step, mean reward of the step's episodes)`` per generation round.
        eval_split: The split the fixed evaluation runs on: ``test`` (records never trained on) for the
            :data:`OBSERVATION` families, else ``train``.
        control_before: Success of the warm-started policy on the same evaluation with every observed value
            replaced by a wrong one (:func:`decoy_observations`); None when not measured.
        control_after: The same for the trained policy: 0 for a policy that submits what it reads, chance (1/9)
            for one that guesses; its success on the real records above this needs the observation.
        reward_before: Mean reward on the fixed evaluation before RL (here the correctness reward: equal to
            ``before`` unless a grader failed).
        reward_after: The same after RL.
        sandbox_layers: The isolation layers of the sandbox the episodes ran in.
        settings: Hyper-parameters of the run.
        wall_s: Wall time (seconds).
        cpu_s: CPU time of this process (user + system seconds).
        paired_success: On the held-out families, :func:`paired` of the evaluation's episodes after vs before RL
            (record-level mean difference and 95 % interval).
        paired_control: The same for the control.
        choice_metric: ``query choice`` on :data:`CHOICE`, ``first retry`` on :data:`RETRY` (:data:`CHOICE_METRIC`).
        choice_before: That accuracy before RL (:func:`choice_accuracy`; chance 1/3).
        choice_after: The same after RL.
        paired_choice: :func:`paired` of the choice (1 if the query read the cued table) after vs before.
        choice_curve: ``(step, accuracy)`` at each evaluation.
    """

    method: str
    family: str
    seed: int
    before: float
    after: float
    curve: list[tuple[int, float, float, float]] = field(default_factory=list)
    train_rewards: list[tuple[int, float]] = field(default_factory=list)
    eval_split: str = "train"
    control_before: float | None = None
    control_after: float | None = None
    reward_before: float | None = None
    reward_after: float | None = None
    sandbox_layers: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    paired_success: dict[str, float] | None = None
    paired_control: dict[str, float] | None = None
    choice_metric: str = ""
    choice_before: float | None = None
    choice_after: float | None = None
    paired_choice: dict[str, float] | None = None
    choice_curve: list[tuple[int, float]] = field(default_factory=list)

    @property
    def gain(self) -> float:
        """``after - before``."""
        return self.after - self.before

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict, ``gain`` included."""
        return {**asdict(self), "gain": self.gain}


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a success share ``successes / n`` (95 % by default)."""
    if n <= 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def decoy_observations(root: str | os.PathLike, out: str | os.PathLike, *, split: str = "test",
                       seed: int = 0) -> Path:
    """A copy of ``toy_lookup`` under the tasks root ``out`` whose ``split`` records hold a wrong value.

    Every record's database gets another value than the instance's gold answer (uniform on the other eight of
    1..9), while the answer stays: the prompts, queries and observation format are unchanged, only what the
    observation says is now wrong. A policy that submits what it read scores 0 there; one that ignores the
    observation (a constant, a guess, memory) keeps its score, which for a guess is chance (1/9). So success on the
    real records above success here is success that needs the observation. This is the control of the
    observation proof.

    Args:
        root: The tasks root holding a built ``toy_lookup``.
        out: Tasks root to write the copy into (replaced if present).
        split: Whose records to change.
        seed: Seeds the replacement values.

    Returns:
        ``out``.
    """

    def wrong_value(con: Any, inst: Any, rng: Any) -> None:
        con.execute("UPDATE reading SET value = ?", (rng.choice([v for v in range(1, 10) if v != inst.answer]),))

    return _control_copy(OBSERVATION, root, out, split, f"decoy:{seed}", wrong_value)


def _control_copy(family: str, root: str | os.PathLike, out: str | os.PathLike, split: str, rng_name: str,
                  rewrite: Callable[[Any, Any, Any], None]) -> Path:
    """Copy ``family``'s built folder from the tasks root ``root`` to ``out`` (replacing it), then call
    ``rewrite(connection, instance, rng)`` on each ``split`` record's database (committed after; ``rng`` a
    ``random.Random`` named ``rng_name``, shared by the records in order). Returns ``out``."""
    import random
    import shutil
    import sqlite3

    from medagentgym import tasks

    src, dst = Path(root) / family, Path(out) / family
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    rng = random.Random(rng_name)
    for inst in tasks.make(family, root=out).instances(split):
        con = sqlite3.connect(dst / inst.metadata["sql_database"])
        try:
            rewrite(con, inst, rng)
            con.commit()
        finally:
            con.close()
    return Path(out)


def swapped_cue(root: str | os.PathLike, out: str | os.PathLike, *, split: str = "test", seed: int = 0) -> Path:
    """A copy of :data:`CHOICE` under the tasks root ``out`` whose ``split`` records hold a wrong value in the cued table.

    In every record's database the cued table's value is swapped with that of one of the two other tables (drawn
    at random): the gold answer now sits in a table the question does not name, and the cued table holds another
    reading's value. Prompts, answers and the observation format are unchanged. A policy that reads the cued table
    and submits what it read scores 0 there; one that reads a table at random keeps the score it has on the real
    records (1/3 of its copy rate); so a rise on the real records with no rise here comes from choosing the cued
    table. This is the control of the query-choice rung.

    Args:
        root: The tasks root holding a built ``toy_choice``.
        out: Tasks root to write the copy into (replaced if present).
        split: Whose records to change.
        seed: Seeds which other table each record swaps with.

    Returns:
        ``out``.
    """
    from medagentgym.tasks.toy_choice import TABLES

    def swap(con: Any, inst: Any, rng: Any) -> None:
        readings, cue = inst.metadata["readings"], inst.metadata["table"]
        other = rng.choice([t for t in TABLES if t != cue])
        # table names come from TABLES, never from the records
        con.execute(f"UPDATE {cue} SET value = ?", (readings[other],))
        con.execute(f"UPDATE {other} SET value = ?", (readings[cue],))

    return _control_copy(CHOICE, root, out, split, f"swapped-cue:{seed}", swap)


def copy_check(model: Any, tokenizer: Any, workdir: str | os.PathLike, settings: dict[str, Any], *, seed: int,
               prompt: str = PROMPT, reps: int = 3) -> tuple[Score, Score]:
    """Warm ``model`` up on :data:`OBSERVATION` (:func:`warm_up` with ``settings``), then score sampled episodes on
    the held-out records and on the same records with every observed value made wrong (:func:`decoy_observations`).

    A model that learnt to copy the observed value scores high on the first and near 0 on the second. The fast
    guard of the observation proof and ``scripts/ablate_copy_warmup.py`` use it.

    Args:
        model: The model to warm up (trained in place).
        tokenizer: Its tokenizer.
        workdir: Scratch folder: ``tasks`` (the family, built there if missing) and ``decoy`` (the control's copy).
        settings: A :data:`WARM_DEFAULTS` entry, usually cut to its exact-demonstrator phases.
        seed: Seeds the warm-up, the sampling and the decoy values.
        prompt: The prompt style (``medagentgym.env_client.prompts.PROMPTS``).
        reps: Episodes per held-out record in each evaluation.

    Returns:
        ``(held_out, control)`` scores.
    """
    workdir = Path(workdir)
    root = workdir / "tasks"
    play = Playground.open(OBSERVATION, root, tokenizer, workers=16, prompt=prompt)
    try:
        warm_up(model, play, settings, seed=seed)
        index = play.split_index("test")
        held = evaluate(play.rollout(seed=seed, index=index), model, [r["prompt"] for r in index.rows], reps=reps)
    finally:
        play.close()
    decoy = Playground.open(OBSERVATION, decoy_observations(root, workdir / "decoy", seed=seed), tokenizer,
                            workers=16, split="test", prompt=prompt)
    try:
        control = evaluate(decoy.rollout(seed=seed), model, decoy.prompts, reps=reps)
    finally:
        decoy.close()
    return held, control


def learning_run(method: str, family: str, model_dir: str | os.PathLike, workdir: str | os.PathLike, *, seed: int,
                 steps: int | None = None, lr: float | None = None, group: int | None = None,
                 eval_episodes: int = 96, eval_every: int = 0, control: bool | None = None, sandbox: str = "auto",
                 warm: dict[str, Any] | None = None, log: Callable[[str], None] | None = None,
                 tasks_root: str | os.PathLike | None = None, save_to: str | os.PathLike | None = None,
                 **extra: Any) -> RunResult:
    """Warm start the tiny model at ``model_dir`` on ``family``, then train it with ``method``; see the module doc.

    Args:
        method: ``grpo`` or ``ppo``.
        family: A key of :data:`FAMILIES`.
        model_dir: The tiny model folder (``medagentgym.medcopilot.tiny.build_tiny_model``); it is not modified.
        workdir: Scratch folder (tasks root and trainer output).
        seed: Seeds the warm start, RL sampling and the fixed evaluation.
        steps: RL steps (default from :data:`GRPO_DEFAULTS` / :data:`PPO_DEFAULTS` and :data:`FAMILY_RL`).
        lr: RL learning rate (same defaults).
        group: Episodes per task in a step (same defaults).
        eval_episodes: Episodes of the fixed evaluation (at least; every evaluated task gets the same number).
        eval_every: Evaluate every this many steps for the curve (0: before and after only).
        control: Also score the warm and the trained policy with every observed value replaced by a wrong one
            (:func:`decoy_observations`); default: for the :data:`OBSERVATION` family, whose fixed evaluation
            runs on held-out records.
        sandbox: Sandbox backend for the episodes (``auto``, ``bwrap`` or ``local``).
        warm: Overrides of :data:`WARM_DEFAULTS` for the family (``steps``, ``batch``, ``lr``, ...).
        log: Called with one progress line per evaluation.
        tasks_root: Where the family's tasks live (built or declared there when missing); default
            ``workdir/tasks``.
        save_to: Save the trained model and tokenizer there (atomically).
        **extra: More trainer settings (``GRPOConfig`` fields, or ``PPOArgs`` fields plus ``batch``).

    Returns:
        The :class:`RunResult`.
    """
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if method not in ("grpo", "ppo"):
        raise ValueError(f"method {method!r} is unknown; choose grpo or ppo")
    held_out = family in HELD_OUT
    control = family in CONTROLLED if control is None else control
    if control and family not in CONTROLLED:
        raise ValueError(f"the control needs {' or '.join(CONTROLLED)}; {family!r} has no control copy")
    defaults = default_settings(method, family)["rl"]
    settings = {**defaults, **{k: v for k, v in {"steps": steps, "lr": lr, "group": group}.items() if v is not None},
                **extra}
    warm_settings = {**WARM_DEFAULTS[family], **(warm or {})}
    started, cpu0 = time.monotonic(), time.process_time()
    workdir = Path(workdir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    concurrency = max(16, settings.get("batch", settings["group"]))
    root = Path(tasks_root or workdir / "tasks")
    play = Playground.open(family, root, tok, sandbox=sandbox, workers=concurrency)
    eval_split = "test" if held_out else "train"

    def say(text: str) -> None:
        if log:
            log(f"[{method}/{family} seed {seed}] {text} ({time.process_time() - cpu0:.0f} s CPU)")

    try:
        loss = warm_up(model, play, warm_settings, seed=seed)
        rollout = play.rollout(seed=seed, concurrency=concurrency)
        eval_index = play.index if eval_split == "train" else play.split_index(eval_split)
        eval_rollout = rollout if eval_split == "train" else play.rollout(seed=seed, concurrency=concurrency,
                                                                          index=eval_index)
        eval_prompts = [row["prompt"] for row in eval_index.rows]
        reps = -(-eval_episodes // len(eval_prompts))

        def score(m: Any) -> Score:
            return evaluate(eval_rollout, m, eval_prompts, reps=reps)

        def point(step: int, sc: Score) -> tuple[int, float, float, float]:
            low, high = wilson(sc.success * sc.episodes, sc.episodes)
            return step, sc.success, round(low, 4), round(high, 4)

        metric, at = CHOICE_METRIC.get(family, ("", 0))
        cued = {i.id: i.metadata["tables"][i.metadata["table"]] if family == RETRY else i.metadata.get("table", "")
                for i in eval_index.instances.values() if family != RETRY or i.metadata["renamed"]}
        choice_curve: list[tuple[int, float]] = []

        def chose(step: int, sc: Score) -> str:
            if not metric:
                return ""
            choice_curve.append((step, round(choice_accuracy(sc, cued, at=at), 4)))
            return f", {metric} {choice_curve[-1][1]:.3f}"

        first = score(model)
        before = first.success
        curve = [point(0, first)]
        say(f"warm start loss {loss:.3f}; success {before:.3f} ({eval_split} split){chose(0, first)}")
        warm_model = copy.deepcopy(model) if control else None

        def on_step(step: int, m: Any) -> None:
            if eval_every and step % eval_every == 0 and step < settings["steps"]:
                sc = score(m)
                curve.append(point(step, sc))
                say(f"step {step}: success {curve[-1][1]:.3f}{chose(step, sc)}")

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
        curve.append(point(settings["steps"], last))
        if save_to is not None:
            from medagentgym.medcopilot.modeling import save_pretrained_atomic

            save_pretrained_atomic(save_to, final, tok)
        say(f"after {settings['steps']} steps: success {after:.3f} (gain {after - before:+.3f})"
            f"{chose(settings['steps'], last)}")
    finally:
        play.close()
    control_before = control_after = None
    stats: dict[str, Any] = {}
    if held_out:
        stats["paired_success"] = paired(first.wins, last.wins, first.records)
        if metric:
            stats["choice_metric"] = metric
            stats["choice_before"], stats["choice_after"] = choice_curve[0][1], choice_curve[-1][1]
            stats["paired_choice"] = paired(choice_hits(first, cued, at=at), choice_hits(last, cued, at=at),
                                            [r for r in first.records if r in cued])
            stats["choice_curve"] = choice_curve
    if control:
        make_control = swapped_cue if family == CHOICE else decoy_observations
        decoy = Playground.open(family, make_control(root, workdir / "decoy", split=eval_split, seed=seed), tok,
                                sandbox=sandbox, workers=concurrency, split=eval_split)
        try:
            decoy_rollout = decoy.rollout(seed=seed, concurrency=concurrency)
            ctrl = [evaluate(decoy_rollout, m, decoy.prompts, reps=reps) for m in (warm_model, final)]
        finally:
            decoy.close()
        control_before, control_after = ctrl[0].success, ctrl[1].success
        stats["paired_control"] = paired(ctrl[0].wins, ctrl[1].wins, ctrl[0].records)
        what = "the cued table's value made wrong" if family == CHOICE else "observed values made wrong"
        say(f"control ({what}): {control_before:.3f} -> {control_after:.3f}")
    return RunResult(method, family, seed, before, after, curve, [(step, round(r, 4)) for step, r in rewards],
                     eval_split, control_before, control_after, first.reward, last.reward,
                     list(getattr(play.pool, "layers", [])),
                     {**settings, "warm": warm_settings, "eval_episodes": len(eval_prompts) * reps,
                      "prompt": play.prompt},
                     round(time.monotonic() - started, 1), round(time.process_time() - cpu0, 1), **stats)
