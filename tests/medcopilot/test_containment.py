"""No episode can take down a training run (issue #18), from the trainer's side.

* The rollout hook is total: whatever escapes one episode (its env could not reset, an env server went away, a
  reward term raised) is that row's infrastructure failure (reward None, counted in ``env/infra_failure_rate``),
  never an exception in the trainer; only generation itself may fail the call; a run whose infrastructure-failure
  share passes ``rollout.max_infra_failure_share`` stops with one line.
* Isolation is never lost silently: ``env.sandbox: local`` needs ``env.allow_unisolated: true``, ``--dry-run``
  prints the isolation of the run, and the learning helpers' ``auto`` fails where bwrap cannot start.
* Chaos: a tiny GRPO run and a tiny PPO run whose policy is mixed with adversarial turns (``_chaos.ATTACKS``)
  finish every step; adversarial episodes score 0, never None; infrastructure failures stay at 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medagentgym.env_client import Env, EnvConfig
from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, InfraFailureLimit, PromptIndex

from _chaos import ChaosRollout, check, crashing


def _submit(answer: str) -> str:
    return f"<tool_call>\n{json.dumps({'name': 'submit_answer', 'arguments': {'answer': answer}})}\n</tool_call>"


@pytest.fixture(scope="module")
def toy(tmp_path_factory, tiny_model_dir):
    """toy_sql built tiny, its prompt index, the tiny tokenizer and a two-worker pool."""
    from transformers import AutoTokenizer

    from medagentgym import tasks
    from medagentgym.env_client.prompts import initial_messages

    root = tmp_path_factory.mktemp("containment")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    family = tasks.make("toy_sql", root=root)
    index = PromptIndex.from_instances(family.instances("train")[:4],
                                       render=lambda inst: initial_messages(inst, family.actions))
    from medagentgym import sandbox

    pool = sandbox.make_pool("bwrap", workers=2, preload=family.sandbox_preload)  # what toy_sql declares
    yield {"root": root, "index": index, "tokenizer": AutoTokenizer.from_pretrained(tiny_model_dir), "pool": pool}
    pool.close()


#: The chaos turns import neither numpy nor pandas: lean warm workers (issue #29).
LEAN = ("sqlite3",)


def _scripted(tokenizer, text: str):
    """A generator whose every turn is ``text`` (then the end-of-turn token)."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]

    def gen(contexts, seeds):
        return [list(ids) for _ in contexts], [[0.0] * len(ids) for _ in contexts]

    return gen


def _rollout(toy, make_env=None, **kwargs) -> EnvRolloutFunc:
    config = EnvConfig(max_turns=2)
    return EnvRolloutFunc(make_env=make_env or (lambda: Env(toy["pool"], tasks_root=toy["root"], config=config)),
                          index=toy["index"], tokenizer=toy["tokenizer"], max_new_tokens=8, concurrency=2, seed=0,
                          **kwargs)


class _Flaky:
    """An env that fails in the host's own machinery (a lost env server, a broken reset), on given rows."""

    def __init__(self, inner: Env, fail: str | None) -> None:
        self.inner, self.fail = inner, fail

    def reset(self, *a, **k):
        if self.fail == "reset":
            raise ConnectionError("env server unreachable")
        return self.inner.reset(*a, **k)

    def step(self, *a, **k):
        if self.fail == "step":
            raise TimeoutError("the env server stopped answering")
        return self.inner.step(*a, **k)

    @property
    def trajectory(self):
        return self.inner.trajectory

    def close(self):
        self.inner.close()
        if self.fail == "close":
            raise OSError("close failed")


def test_what_escapes_one_episode_is_that_rows_infrastructure_failure(toy):
    """Before: the first exception of any episode was re-raised in the trainer's thread (training stopped)."""
    fails = iter(["reset", None, "step", "close"] * 2)

    def make_env():
        return _Flaky(Env(toy["pool"], tasks_root=toy["root"], config=EnvConfig(max_turns=2)), next(fails))

    rollout = _rollout(toy, make_env=make_env, max_infra_share=1.0)
    prompts = [row["prompt"] for row in toy["index"].rows]
    out = rollout.run(prompts, _scripted(toy["tokenizer"], _submit("12345")))
    flags = [s["infra_failure"] for s in out["episode_stats"]]
    rewards = out["reward_correctness"]
    assert len(rewards) == len(prompts) == len(out["completion_ids"]) == len(out["env_mask"])
    assert sum(flags) == 2 and rewards.count(None) == 2, (flags, rewards)  # the failed reset and the lost step
    for row, (flag, reward) in enumerate(zip(flags, rewards)):
        if flag:
            assert reward is None and out["env_mask"][row] == [0]  # a placeholder: nothing trained on
            assert out["episode_stats"][row]["grader_error"]
        else:
            assert reward == 0.0  # a wrong answer, a failed close only logged


def test_a_reward_term_that_raises_is_a_missing_reward_not_a_crash(toy):
    def broken(**_):
        raise ValueError("verdict score 7 is not a number in [0, 1]")

    rollout = _rollout(toy, rewards={"correctness": broken}, max_infra_share=1.0)
    out = rollout.run([toy["index"].rows[0]["prompt"]], _scripted(toy["tokenizer"], _submit("1")))
    assert out["reward_correctness"] == [None] and out["episode_stats"][0]["infra_failure"]


def test_a_generation_failure_still_stops_the_call(toy):
    def gen(contexts, seeds):
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        _rollout(toy).run([toy["index"].rows[0]["prompt"]], gen)


def test_a_run_stops_with_one_line_when_infrastructure_keeps_failing(toy):
    rollout = _rollout(toy, make_env=lambda: _Flaky(None, "reset"), max_infra_share=0.5, infra_window=8)
    with pytest.raises(InfraFailureLimit) as raised:
        rollout.run([row["prompt"] for row in toy["index"].rows], _scripted(toy["tokenizer"], _submit("1")))
    message = str(raised.value)
    assert "\n" not in message and "4 of the last 4 episodes" in message and "ConnectionError" in message
    assert "rollout.max_infra_failure_share=0.5" in message
    ok = _rollout(toy, max_infra_share=0.5, infra_window=8)  # healthy episodes never count
    for _ in range(3):
        ok.run([row["prompt"] for row in toy["index"].rows], _scripted(toy["tokenizer"], _submit("1")))


# -- isolation is never lost silently ----------------------------------------------------------------------------
def test_an_unisolated_sandbox_must_be_asked_for_and_the_dry_run_says_so(train_main, capsys):
    from medagentgym.medcopilot.config import RecipeError, load_recipe

    with pytest.raises(RecipeError, match="env.allow_unisolated=true"):
        load_recipe("grpo_qwen14b", ["env.sandbox=local"])  # was valid, with no warning
    assert train_main(["recipe=grpo_qwen14b", "env.sandbox=local", "--dry-run"]) == 2
    assert "WITHOUT isolation" in capsys.readouterr().err
    assert train_main(["recipe=grpo_qwen14b", "env.sandbox=local", "env.allow_unisolated=true", "--dry-run"]) == 0
    assert "# isolation: NONE" in capsys.readouterr().out
    assert train_main(["recipe=grpo_qwen14b", "--dry-run"]) == 0
    assert "# isolation: bwrap jail" in capsys.readouterr().out


def test_the_learning_helpers_auto_never_falls_back_to_unsandboxed(tmp_path, monkeypatch, tiny_model_dir):
    from medagentgym import sandbox
    from medagentgym.medcopilot.learning import Playground

    asked: list[str] = []

    def no_bwrap(backend, **kwargs):
        asked.append(backend)
        raise sandbox.SandboxUnavailable("bwrap worker failed to start (no user namespaces here)")

    monkeypatch.setattr(sandbox, "make_pool", no_bwrap)
    with pytest.raises(sandbox.SandboxUnavailable, match="bwrap"):
        Playground.open("toy_lookup", tmp_path, tokenizer=None, sandbox="auto", workers=1)
    assert asked == ["bwrap"]  # never "local"


# -- chaos: tiny GRPO and PPO runs with adversarial turns ---------------------------------------------------------
@pytest.fixture(scope="module")
def chaos_root(tmp_path_factory):
    from medagentgym import tasks

    root = tmp_path_factory.mktemp("chaos")
    for name in ("toy_sql", "medagentbench"):
        tasks.make(name, root=root).build(root, size="tiny", seed=0)
    return root


@pytest.fixture()
def crashing_graders(monkeypatch):
    from medagentgym.tasks.medagentbench import MedAgentBench
    from medagentgym.tasks.toy_sql import ToySQL

    for cls in (ToySQL, MedAgentBench):
        monkeypatch.setattr(cls, "grade", crashing(cls.grade))


def _chaos_index(root: Path, per_family: int) -> PromptIndex:
    from medagentgym import tasks
    from medagentgym.env_client.prompts import initial_messages

    instances, actions = [], {}
    for name in ("toy_sql", "medagentbench"):
        fam = tasks.make(name, root=root)
        actions[name] = fam.actions
        instances += fam.instances("train")[:per_family]
    return PromptIndex.from_instances(instances, render=lambda inst: initial_messages(inst, actions[inst.family]))


def _chaos_rollout(root: Path, pool, tokenizer, index: PromptIndex, *, turns: int, concurrency: int) -> ChaosRollout:
    # Observations are cut short so that the tiny model's 4096 positions hold a whole adversarial episode.
    config = EnvConfig(max_turns=turns, obs_max_chars=400)
    return ChaosRollout(make_env=lambda: Env(pool, tasks_root=root, config=config), index=index,
                        tokenizer=tokenizer, max_new_tokens=8, max_completion_tokens=2400, concurrency=concurrency,
                        seed=0, policy_name="chaos")


def _grpo_chaos(root, tiny_model_dir, out: Path, *, steps: int, batch: int, turns: int, per_family: int) -> None:
    from medagentgym import sandbox
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from medagentgym.medcopilot.rewards_adapter import EpisodeReward

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    index = _chaos_index(root, per_family)
    with sandbox.make_pool("bwrap", workers=batch, preload=LEAN) as pool:
        rollout = _chaos_rollout(root, pool, tokenizer, index, turns=turns, concurrency=batch)
        args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=batch, num_generations=2,
                          use_cpu=True, bf16=False, activation_checkpointing=False, logging_steps=1, report_to=[],
                          save_strategy="no", disable_tqdm=True, learning_rate=1e-3, max_completion_length=2400,
                          seed=0)
        trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                              reward_funcs=[EpisodeReward("correctness", group_size=2)], args=args,
                              train_dataset=Dataset.from_list(index.rows), processing_class=tokenizer,
                              rollout_func=rollout)
        trainer.train()
    assert trainer.state.global_step == steps
    check(rollout, trainer.state.log_history)


def _ppo_chaos(root, tiny_model_dir, out: Path, *, steps: int, batch: int, turns: int, per_family: int) -> None:
    from medagentgym import sandbox
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym.medcopilot.ppo import PPOArgs
    from medagentgym.medcopilot.trainers.ppo import PPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    index = _chaos_index(root, per_family)
    with sandbox.make_pool("bwrap", workers=batch, preload=LEAN) as pool:
        rollout = _chaos_rollout(root, pool, tokenizer, index, turns=turns, concurrency=batch)
        args = PPOArgs(max_steps=steps, rollout_batch_size=batch, mini_batch_size=batch, micro_batch_size=2,
                       ppo_epochs=1, learning_rate=1e-3, kl_coef=0.0, logging_steps=1, save_steps=0, report_to=[])
        trainer = PPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), tokenizer=tokenizer,
                             rollout=rollout, prompts=[row["prompt"] for row in index.rows], args=args,
                             output_dir=out, reward_weights={"correctness": 1.0}, group_size=2)
        trainer.train()
    assert trainer.state.global_step == steps
    check(rollout, trainer.state.log_history)


@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_chaos_a_tiny_run_survives_adversarial_turns(method, chaos_root, tiny_model_dir, tmp_path,
                                                     crashing_graders, quiet_training_env):
    """Two steps of four episodes, two turns each: every other turn is the next attack (all seven are played).
    Before the fixes the first nested-bracket turn raised RecursionError in the trainer."""
    run = _grpo_chaos if method == "grpo" else _ppo_chaos
    run(chaos_root, tiny_model_dir, tmp_path / method, steps=2, batch=4, turns=2, per_family=2)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_chaos_slow_more_steps_turns_and_tasks(method, chaos_root, tiny_model_dir, tmp_path, crashing_graders,
                                               quiet_training_env):
    run = _grpo_chaos if method == "grpo" else _ppo_chaos
    run(chaos_root, tiny_model_dir, tmp_path / method, steps=6, batch=8, turns=3, per_family=6)
