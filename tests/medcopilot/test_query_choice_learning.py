"""Query choice: RL must teach the tiny model to read the table the question names (``toy_choice``), which no
demonstration showed.

Fast mechanics guards (``make test``):

- The family: three tables per record, three different values, the cued table balanced over each split, and the
  answer only in the cued table; byte-identical per seed.
- The demonstrations (:func:`medagentgym.medcopilot.learning.choice_episodes`) are consistent (each submits the value its
  query returned) and never tie the table to the cue: every record is shown once with each table.
- Query-choice accuracy is read from the trajectories (the tables the model's own SQL names).
- The swapped-cue control (:func:`medagentgym.medcopilot.learning.swapped_cue`) moves the gold answer out of the cued table and
  changes nothing else: a policy that reads the cued table is right on every real record and on no swapped one.
- The paired record-level interval (:func:`medagentgym.medcopilot.learning.paired`).

The proof (slow): GRPO and PPO at the defaults raise query-choice accuracy by at least 0.2 with a paired
interval that excludes 0 on at least 4 of 5 seeds, and the swapped-cue control does not rise. Both hold at their
defaults (4 records x 16 a step; docs/benchmarks.md, "Query choice, fifth round").

- The cue is one token of the tiny tokenizer that only the question and the query hold (version 2; fast).
"""

from __future__ import annotations

import sqlite3
from collections import Counter

import pytest

from medagentgym.medcopilot.learning import (
    CHOICE,
    Playground,
    choice_accuracy,
    choice_episodes,
    learning_run,
    paired,
    sql_tables,
    swapped_cue,
)
from medagentgym.tasks.toy_choice import TABLES

pytestmark = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from medagentgym import tasks

    root = tmp_path_factory.mktemp("tasks")
    tasks.make(CHOICE, root=root).build(root, size="tiny", seed=0)
    return root


def _readings(root, inst) -> dict[str, int]:
    con = sqlite3.connect(root / CHOICE / inst.metadata["sql_database"])
    try:
        return {t: con.execute(f"SELECT value FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        con.close()


def test_each_record_has_three_readings_and_the_answer_is_the_cued_one(built, tmp_path):
    from medagentgym import tasks

    family = tasks.make(CHOICE, root=built)
    for split, n in (("train", 96), ("test", 128)):
        items = family.instances(split)
        assert len(items) == n
        counts = Counter(i.metadata["table"] for i in items)
        assert set(counts) == set(TABLES) and max(counts.values()) - min(counts.values()) <= 1  # balanced cues
        for inst in items:
            stored = _readings(built, inst)
            assert stored == inst.metadata["readings"] and len(set(stored.values())) == 3  # another table: wrong
            assert inst.answer == stored[inst.metadata["table"]]
            assert f"the {inst.metadata['table']} reading" in inst.question
            assert not any(ch.isdigit() for ch in inst.question)
    again = tmp_path / "again"
    tasks.make(CHOICE, root=again).build(again, size="tiny", seed=0)
    for path in sorted((built / CHOICE).rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (again / path.relative_to(built)).read_bytes(), path


def test_the_cue_is_one_token_that_only_the_question_and_the_query_hold(built, tiny_model_dir):
    """Issue 30's diagnosis: the table the policy reads is decided at the first token of its name after ``FROM``. In
    version 1 that token was " m" (also in every question's " monitor"), " n", or a bare " " (14 times in every
    prompt), and the context listed all three names: the cue was no token a copying head could find. Now each name
    is one token, the same in the question and in the SQL, and no other table's name appears in the prompt."""
    from transformers import AutoTokenizer

    from medagentgym.env_client.prompts import initial_messages
    from medagentgym import tasks
    from medagentgym.medcopilot.learning import FAMILY_PROMPT

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    family = tasks.make(CHOICE, root=built)
    name = {t: tok(f" {t}", add_special_tokens=False)["input_ids"] for t in TABLES}
    assert all(len(ids) == 1 for ids in name.values()), name
    for inst in family.instances("test")[:12]:
        cue = inst.metadata["table"]
        sql = tok(inst.solution, add_special_tokens=False)["input_ids"]
        assert sql[-1:] == name[cue]  # the query's last token is the name's one token
        text = tok.apply_chat_template(initial_messages(inst, family.actions, prompt=FAMILY_PROMPT[CHOICE]),
                                       tokenize=False, add_generation_prompt=True)
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        held = {t: prompt.count(name[t][0]) for t in TABLES}
        assert held == {t: int(t == cue) for t in TABLES}, (inst.id, held)


@pytest.fixture(scope="module")
def demos(built, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    play = Playground.open(CHOICE, built, tok, workers=4)
    try:
        instances = list(play.index.instances.values())[:12]
        yield tok, instances, choice_episodes(play, instances)
    finally:
        play.close()


def test_demonstrations_copy_what_they_read_and_never_tie_the_table_to_the_cue(demos):
    from medagentgym.medcopilot.learning import _model_turns

    tok, instances, episodes = demos
    assert len(episodes) == 3 * len(instances)
    shown = Counter()
    for k, ep in enumerate(episodes):
        inst = instances[k // 3]
        turns = _model_turns(tok, ep.completion_ids, ep.env_mask)
        (table,) = sql_tables(turns[0])  # read from the trajectory's own tokens
        read = inst.metadata["readings"][table]
        observation = tok.decode([t for t, m in zip(ep.completion_ids, ep.env_mask) if not m])
        assert f"\n{read}" in observation  # the query returned that table's value ...
        assert f'"answer": "{read}"' in turns[1]  # ... and the episode submits it: consistent
        assert ep.reward == float(table == inst.metadata["table"])
        # the query's comment names the question's reading, whichever table it reads: a copy, not a choice
        assert f'"code": "-- {inst.metadata["table"]}\\nSELECT value FROM {table}"' in turns[0], turns[0]
        shown[(inst.metadata["table"], table)] += 1
    # Every cue is shown with every table equally often: the demonstrations carry no cue -> table signal.
    per_cue = {cue: {t: shown[(cue, t)] for t in TABLES} for cue in {c for c, _ in shown}}
    assert all(len(set(row.values())) == 1 for row in per_cue.values()), per_cue


def test_query_choice_accuracy_is_read_from_the_model_turns():
    from medagentgym.medcopilot.learning import Score

    assert sql_tables('<tool_call>{"name": "code_execution", "arguments": {"lang": "sql", '
                      '"code": "SELECT value FROM Noon"}}</tool_call>') == ["noon"]
    assert sql_tables('{"code": "select value from `evening` join morning"}') == ["evening"]
    assert sql_tables('{"code": "SELECT value\\nFROM  evening; SELECT * FROM morning"}') == ["evening", "morning"]
    assert sql_tables("submit 4") == []
    score = Score(0.0, 0.0, 4, ("a", "a", "b", "c"), (0, 0, 0, 0), (("noon",), ("morning", "noon"), (), ("evening",)))
    cued = {"a": "noon", "b": "noon", "c": "evening"}
    assert choice_accuracy(score, cued) == 0.5  # first reads: right, wrong, none (wrong), right
    assert choice_accuracy(score, cued, at=1) == 0.25  # second reads: only the second episode's


def test_the_paired_interval_is_record_level():
    # 4 records x 2 episodes; per record differences 1, 0.5, 0, 0.5 -> mean 0.5, sd 0.408, se 0.204
    records = ["a", "a", "b", "b", "c", "c", "d", "d"]
    before = [0, 0, 0, 1, 1, 0, 0, 0]
    after = [1, 1, 1, 1, 1, 0, 1, 0]
    out = paired(before, after, records)
    assert out["records"] == 4 and out["mean"] == 0.5
    assert out["low"] == pytest.approx(0.5 - 1.96 * 0.40825 / 2, abs=1e-3) and out["low"] > 0
    flat = paired([1, 0, 1, 0], [0, 1, 0, 1], ["a", "b", "c", "d"])
    assert flat["mean"] == 0 and flat["low"] < 0 < flat["high"]


def _cue_reader_success(root, tok, make_test_pool, n: int = 32) -> tuple[float, int]:
    """Read the cued table, submit what the observation says, on the first ``n`` test records of ``root``."""
    import re

    from medagentgym.env_client import Env
    from medagentgym.env_client.policies import render_action
    from medagentgym import tasks

    family = tasks.make(CHOICE, root=root)
    pool = make_test_pool(2)
    wins = []
    try:
        play = Playground(root, family, None, tok, pool, 3, 40, 160)
        for inst in family.instances("test")[:n]:
            env = Env(pool, tasks_root=root, config=play.env_config)
            try:
                env.reset(inst)
                code = f"SELECT value FROM {inst.metadata['table']}"
                seen = env.step(render_action("code_execution", {"lang": "sql", "code": code})).observation.text
                value = re.search(r"value\n-+\n(\d)", seen)
                wins.append(env.step(render_action("submit_answer", {"answer": value.group(1)})).reward)
            finally:
                env.close()
    finally:
        pool.close()
    return sum(wins) / len(wins), len(wins)


def test_the_swapped_cue_control_moves_the_answer_out_of_the_cued_table_only(built, tmp_path, tiny_model_dir,
                                                                             make_test_pool):
    from transformers import AutoTokenizer

    from medagentgym.env_client.prompts import initial_messages
    from medagentgym import tasks

    swapped = swapped_cue(built, tmp_path / "swapped", seed=1)
    real, fake = (tasks.make(CHOICE, root=r) for r in (built, swapped))
    for split in ("train", "test"):
        for a, b in zip(real.instances(split), fake.instances(split)):
            assert a.answer == b.answer and initial_messages(a, real.actions) == initial_messages(b, fake.actions)
            got, cue = _readings(swapped, b), b.metadata["table"]
            if split == "train":
                assert got == a.metadata["readings"]
                continue
            assert got[cue] != b.answer and sorted(got.values()) == sorted(a.metadata["readings"].values())
            moved = [t for t in TABLES if got[t] != a.metadata["readings"][t]]
            assert len(moved) == 2 and cue in moved and got[next(t for t in moved if t != cue)] == b.answer
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert _cue_reader_success(built, tok, make_test_pool) == (1.0, 32)  # the databases above: all 128 swapped
    assert _cue_reader_success(swapped, tok, make_test_pool) == (0.0, 32)


def test_ppo_uses_the_k1_kl_estimator(monkeypatch):
    """The learning runs' PPO puts k1 in the reward, as the recipes do (issue 30)."""
    import medagentgym.medcopilot.trainers.ppo as ppo_module
    from medagentgym.medcopilot.learning import train_ppo

    seen = {}

    class Capture:
        def __init__(self, *, args, **kw):
            seen["args"] = args

        def train(self):
            return None

    monkeypatch.setattr(ppo_module, "PPOTrainer", Capture)

    class Rollout:
        max_completion_tokens = 8

    import torch

    train_ppo(torch.nn.Linear(1, 1), None, Rollout(), [], steps=1, lr=1e-3, group=2, batch=4, output_dir="unused")
    assert seen["args"].kl_estimator == "k1"


@pytest.mark.slow
# Both at their FAMILY_RL defaults (4 records x 16 episodes a step): 5/5 seeds each through bench_learning.py,
# docs/benchmarks.md "Query choice, fifth round".
@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_rl_teaches_query_choice_that_no_demonstration_showed(method, tiny_model_dir, tmp_path, quiet_training_env):
    runs = []
    for seed in range(5):
        run = learning_run(method, CHOICE, tiny_model_dir, tmp_path / f"seed{seed}", seed=seed)
        print(f"\n[query choice] {method} seed {seed}: choice {run.choice_before:.3f} -> {run.choice_after:.3f} "
              f"{run.paired_choice}; success {run.before:.3f} -> {run.after:.3f} {run.paired_success}; "
              f"swapped cue {run.control_before:.3f} -> {run.control_after:.3f}; {run.cpu_s:.0f} s CPU")
        runs.append(run)
    good = [r for r in runs if r.choice_after - r.choice_before >= 0.2 and r.paired_choice["low"] > 0]
    assert len(good) >= 4, [(r.seed, r.choice_before, r.choice_after, r.paired_choice) for r in runs]
    assert all(r.paired_success["low"] > 0 for r in good), [r.paired_success for r in good]
    assert all(r.paired_control["low"] <= 0 for r in runs), [r.paired_control for r in runs]  # the control: no rise


def test_the_retry_rung_fails_first_with_a_grounded_error_and_demonstrates_a_random_retry(tmp_path, tiny_model_dir):
    """toy_retry: on renamed records the listed name fails with the sandbox's grounded error naming the real tables;
    the demonstrations retry with a real name drawn independently of the cue, and submit what that read returned."""
    from transformers import AutoTokenizer

    from medagentgym.medcopilot.learning import RETRY, _model_turns
    from medagentgym import tasks

    tasks.make(RETRY, root=tmp_path).build(tmp_path, size="tiny", seed=0)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    play = Playground.open(RETRY, tmp_path, tok, workers=2)
    try:
        instances = list(play.index.instances.values())[:4]
        episodes = choice_episodes(play, instances)
    finally:
        play.close()
    assert [i.metadata["renamed"] for i in instances] == [False, True, False, True]
    retried = Counter()
    for k, ep in enumerate(episodes):
        inst = instances[k // 3]
        reads = [t for turn in _model_turns(tok, ep.completion_ids, ep.env_mask) for t in sql_tables(turn)]
        observed = tok.decode([t for t, m in zip(ep.completion_ids, ep.env_mask) if not m])
        if not inst.metadata["renamed"]:
            assert len(reads) == 1 and "no such table" not in observed
            continue
        first, retry = reads
        assert first in TABLES and retry == f"{retry[:-3]}_v2" and retry[:-3] in TABLES
        assert f"no such table: {first}" in observed and "tables: admission_v2, discharge_v2, recent_v2" in observed
        assert f"did you mean '{first}_v2'" in observed  # the grounded error names the real table
        assert ep.reward == float(retry == inst.metadata["tables"][inst.metadata["table"]])
        retried[(inst.metadata["table"], retry)] += 1
    assert len(retried) == 6 and set(retried.values()) == {1}  # each renamed record: every real name once


def test_the_first_turn_phase_sees_the_cue_and_trains_the_turn_alone(demos):
    """Issue 30: the warm-up's first phase trains each demonstration's first turn after the last ``first_context``
    prompt ids. With the question last (``compact_last``) that window holds the cue, at the distance from the reply
    it has in the whole prompt; the loss falls on the turn's ids only."""
    from medagentgym.medcopilot.learning import WARM_DEFAULTS, _first_turns

    tok, instances, episodes = demos
    context = WARM_DEFAULTS[CHOICE]["first_context"]
    cuts = _first_turns(episodes, context)
    for k, (ep, (ids, labels)) in enumerate(zip(episodes, cuts)):
        cue = tok(f" {instances[k // 3].metadata['table']}", add_special_tokens=False)["input_ids"][0]
        assert ids[:context] == ep.prompt_ids[-context:] and cue in ids[:context]
        assert ep.prompt_ids[-context:].index(cue) >= context - 24  # the question is the prompt's last line
        turn = [t for t, label in zip(ids, labels) if label != -100]
        assert turn == ids[context:] and tok.decode(turn).count("<tool_call>") == 1
