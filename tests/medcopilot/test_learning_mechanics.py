"""Deterministic guards of the RL mechanics: no sampling noise, so each runs in seconds and fails only on a bug.

Scripted episodes (the rollout hook's generator replaced by one that writes a chosen answer) run through the
real environment, the oracle grader and the real trainers:

- rewards stay aligned with TRL's rows: with a different answer per prompt, the reward TRL hands each row is the
  grade of that row's own completion (read back from TRL's decoded completions and dataset columns);
- GRPO (TRL) and PPO (in house) move in the right direction: after one update on groups of right and wrong
  episodes, log p(right answer) rises and log p(right) - log p(wrong) widens for *every* prompt;
- a row whose weighted total is missing (a failed grader next to another reward term) gets no advantage in GRPO,
  as PPO drops it, instead of the wrong-answer advantage TRL's nansum would give it.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from medagentgym.env_client import Env, EnvConfig
from medagentgym.env_client.policies import render_action
from medagentgym.env_client.tokens import render_prompt
from medagentgym.medcopilot.rewards_adapter import EpisodeReward
from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex

ANSWERS = (1, 3, 5)  # right answers; the wrong one is n + 1, never another prompt's right answer
GROUP = 4


class ScriptedRollout(EnvRolloutFunc):
    """An ``EnvRolloutFunc`` whose "model" answers each prompt right and wrong in turn (real env, real grader)."""

    def hf_generator(self, model, *, temperature, top_p=1.0, top_k=0):
        tok, seen = self.tokenizer, {}

        def gen(contexts, seeds):
            out = []
            for context in contexts:
                n = int(re.findall(r"Submit the number (\d)", tok.decode(context))[-1])
                k = seen[n] = seen.get(n, -1) + 1
                out.append(answer_ids(tok, n if k % 2 == 0 else n + 1))
            return out, [[0.0] * len(ids) for ids in out]
        return gen


def answer_ids(tok, answer: int) -> list[int]:
    """The canonical ids of a submit of ``answer``, ``<|im_end|>`` included."""
    text = render_action("submit_answer", {"answer": str(answer)})
    return tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    from medagentgym import sandbox
    from medagentgym import tasks
    from medagentgym.env_client.prompts import initial_messages

    root = tmp_path_factory.mktemp("tasks")
    (root / "pick").mkdir()
    (root / "pick" / "family.yaml").write_text("name: pick\nanswer_type: integer\nactions: [submit_answer]\n"
                                              "max_turns: 1\nsplits: [train, test]\n", encoding="utf-8")
    (root / "pick" / "tasks.jsonl").write_text("".join(
        json.dumps({"question": f"Submit the number {n}.", "answer": n, "split": "train"}) + "\n" for n in ANSWERS),
        encoding="utf-8")
    fam = tasks.make("pick", root=root)
    index = PromptIndex.from_instances(fam.instances("train"), render=lambda inst: initial_messages(inst, fam.actions))
    pool = sandbox.make_pool("local", workers=GROUP * len(ANSWERS), allow_unisolated=True,
                             preload=("sqlite3",))  # submit only: no code, so lean workers
    yield {"root": root, "family": fam, "index": index, "pool": pool}
    pool.close()


def _rollout(family, tok, **kwargs) -> ScriptedRollout:
    def make_env():
        return Env(family["pool"], tasks_root=family["root"], config=EnvConfig(max_turns=1))

    return ScriptedRollout(make_env=make_env, index=family["index"], tokenizer=tok, max_new_tokens=32,
                           concurrency=GROUP * len(ANSWERS), seed=0, flush_s=30.0, **kwargs)


@pytest.fixture(scope="module")
def mechanics_model_dir(tmp_path_factory):
    """The tiny model at weights of std 0.02 (``Qwen2Config``'s default) instead of the shipped 0.1.

    The direction tests take one AdamW step, which moves every weight by about the learning rate whatever its
    gradient, the near-cancelled gradients of the tokens right and wrong episodes share included. At std 0.1 that
    shared-token part outweighed the answer token's in one prompt's total log p(right) (-144.701 -> -144.712 for
    ``5``); at 0.02 the step is a small first-order move, so the tests see the update's direction.
    """
    from medagentgym.medcopilot.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny002") / "tiny-qwen2", seed=0, initializer_range=0.02)


def _model(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir), AutoModelForCausalLM.from_pretrained(tiny_model_dir)


def _answer_logprobs(model, tok, family) -> dict[int, tuple[float, float]]:
    """Per prompt: (log p(right submit), log p(wrong submit)), summed over the completion's tokens."""
    from medagentgym.env_client import tool_schemas

    out = {}
    tools = tool_schemas(family["family"].actions)
    for row in family["index"].rows:
        n = family["index"].instances[row["instance_id"]].answer
        prompt = render_prompt(tok, row["prompt"], tools)
        pair = []
        for answer in (n, n + 1):
            completion = answer_ids(tok, answer)
            with torch.no_grad():
                logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1].float()
            pair.append(logits.log_softmax(-1).gather(1, torch.tensor(completion)[:, None]).sum().item())
        out[n] = tuple(pair)
    return out


def _grpo(model, tok, family, rollout, reward_funcs, tmp_path, **config):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(**{"output_dir": str(tmp_path / "grpo"), "max_steps": 1, "num_generations": GROUP,
                         "per_device_train_batch_size": GROUP * len(ANSWERS), "learning_rate": 1e-3, "beta": 0.0,
                         "loss_type": "dapo", "use_cpu": True, "bf16": False, "activation_checkpointing": False,
                         "logging_steps": 1, "report_to": [], "save_strategy": "no", "disable_tqdm": True,
                         "max_completion_length": 64, "seed": 0, **config})
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args,
                          train_dataset=Dataset.from_list(family["index"].rows), processing_class=tok,
                          rollout_func=rollout)
    trainer.train()
    return trainer


def test_grpo_rewards_stay_aligned_with_trl_rows(tiny_model_dir, family, tmp_path, quiet_training_env):
    tok, model = _model(tiny_model_dir)
    audited = []

    def audit(prompts, completions, instance_id, reward_correctness, **kwargs):
        """Re-grade every row from what TRL itself holds for it: its dataset row and its decoded completion."""
        for prompt, completion, iid, reward in zip(prompts, completions, instance_id, reward_correctness):
            answer = family["index"].instances[iid].answer
            assert f"Submit the number {answer}." in prompt[-1]["content"]  # TRL's prompt is this row's task
            submitted = int(re.search(r'"answer": "(\d)"', completion[0]["content"]).group(1))
            audited.append((answer, submitted, reward))
        return [0.0] * len(prompts)

    _grpo(model, tok, family, _rollout(family, tok), [EpisodeReward("correctness", group_size=GROUP), audit], tmp_path,
          reward_weights=[1.0, 0.0])
    assert len(audited) == GROUP * len(ANSWERS)
    assert {a for a, _, _ in audited} == set(ANSWERS)  # every prompt was in the batch
    for answer, submitted, reward in audited:
        assert reward == float(submitted == answer), (answer, submitted, reward)
    assert sum(r for *_, r in audited) == len(audited) / 2  # the script answers half right


def test_one_grpo_update_raises_the_right_answer_for_every_prompt(mechanics_model_dir, family, tmp_path,
                                                                  quiet_training_env):
    tok, model = _model(mechanics_model_dir)
    before = _answer_logprobs(model, tok, family)
    trainer = _grpo(model, tok, family, _rollout(family, tok), [EpisodeReward("correctness", group_size=GROUP)],
                    tmp_path)
    after = _answer_logprobs(trainer.model, tok, family)
    for n in ANSWERS:
        (right0, wrong0), (right1, wrong1) = before[n], after[n]
        assert right1 > right0, (n, right0, right1)
        assert right1 - wrong1 > right0 - wrong0, (n, before[n], after[n])


def test_one_ppo_update_raises_the_right_answer_for_every_prompt(mechanics_model_dir, family, tmp_path):
    from medagentgym.medcopilot.ppo import PPOArgs
    from medagentgym.medcopilot.trainers.ppo import PPOTrainer

    tok, model = _model(mechanics_model_dir)
    before = _answer_logprobs(model, tok, family)
    prompts = [row["prompt"] for row in family["index"].rows]
    args = PPOArgs(max_steps=1, rollout_batch_size=GROUP * len(ANSWERS), mini_batch_size=GROUP * len(ANSWERS),
                   micro_batch_size=GROUP * len(ANSWERS), ppo_epochs=1, learning_rate=1e-3, kl_coef=0.0, gamma=1.0,
                   lam=1.0, max_completion_length=64)
    trainer = PPOTrainer(model=model, tokenizer=tok, rollout=_rollout(family, tok), prompts=prompts, args=args,
                         output_dir=tmp_path / "ppo", reward_weights={"correctness": 1.0}, group_size=GROUP)
    trainer.train()
    assert trainer.state.log_history[0]["reward"] == 0.5
    after = _answer_logprobs(trainer.accelerator.unwrap_model(trainer.model).policy, tok, family)
    for n in ANSWERS:
        (right0, wrong0), (right1, wrong1) = before[n], after[n]
        assert right1 > right0, (n, right0, right1)
        assert right1 - wrong1 > right0 - wrong0, (n, before[n], after[n])


def test_a_failed_grader_next_to_another_term_gets_no_grpo_advantage(tiny_model_dir, family, tmp_path,
                                                                    quiet_training_env):
    """RewardSpec(missing="none") says the total is missing: TRL must see every term None for that row (its
    nansum would otherwise score the row as a wrong answer plus the other term, with a real advantage)."""
    from medagentgym.rewards import correctness

    def flaky(*, verdict, trajectory, **kw):  # the grader "fails" on the first episode of every group
        return None if trajectory.header.sample_idx == 0 else correctness(verdict=verdict)

    def bonus(**kw):
        return 0.5

    tok, model = _model(tiny_model_dir)
    rollout = _rollout(family, tok, rewards={"correctness": flaky, "bonus": bonus},
                       weights={"correctness": 1.0, "bonus": 0.1})
    returned = []

    def hook(prompts, trainer):
        returned.append(rollout(prompts, trainer))
        return returned[-1]

    trainer = _grpo(model, tok, family, hook, [EpisodeReward("correctness", group_size=GROUP),
                                               EpisodeReward("bonus", group_size=GROUP, log_metrics=False)],
                    tmp_path, reward_weights=[1.0, 0.1])
    out = returned[0]
    failed = [i for i, s in enumerate(out["episode_stats"]) if s["grader_error"]]
    assert len(failed) == len(ANSWERS)  # one per group
    assert all(out["reward_correctness"][i] is None and out["reward_bonus"][i] is None for i in failed)
    advantages = trainer._logs["advantages"]  # TRL's per-row advantages of the step, in row order
    assert [advantages[i] for i in failed] == [0.0] * len(failed)
    assert all(advantages[i] != 0.0 for i in range(len(advantages)) if i not in failed)


def test_a_zero_weight_missing_term_does_not_make_a_row_unscorable(tiny_model_dir, family):
    tok, model = _model(tiny_model_dir)
    rollout = _rollout(family, tok, rewards={"correctness": lambda **kw: 1.0, "logged": lambda **kw: None},
                       weights={"correctness": 1.0, "logged": 0.0})
    out = rollout.run([family["index"].rows[0]["prompt"]] * 2, rollout.hf_generator(model, temperature=1.0))
    assert out["reward_correctness"] == [1.0, 1.0] and out["reward_logged"] == [None, None]
    assert not any(s["grader_error"] for s in out["episode_stats"])
    with pytest.raises(ValueError, match="same terms"):
        _rollout(family, tok, rewards={"correctness": lambda **kw: 1.0}, weights={"correctness": 1.0, "x": 1.0})
