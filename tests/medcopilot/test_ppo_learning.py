"""PPO learns: the tiny model's reward on an easy family rises clearly under our in-house PPO loop.

Same family (``say_number``), SFT warm-up and measurement as the GRPO learning test (``_learning.py``): the tiny
model is warmed up on the family's oracle trajectories and stopped early, so it submits correctly only part of
the time when sampling at temperature 1. :class:`medcopilot.trainers.ppo.PPOTrainer` (our ``EnvRolloutFunc``
running real episodes through ``env_client.Env`` on a sandbox pool, the oracle grader's reward, a value head,
GAE and the clipped losses, a KL penalty against the frozen warm model) must then raise the sampled success rate
by at least ``MIN_GAIN``, measured before and after on the same prompts with the same number of episodes.
"""

from __future__ import annotations

import copy
import time

import torch
from _learning import FAMILY, declare_family, mean_reward, oracle_data, sft_warmup

from env_client import Env, EnvConfig
from medcopilot.ppo import PPOArgs
from medcopilot.rollout_func import EnvRolloutFunc, PromptIndex
from medcopilot.trainers.ppo import PPOTrainer

SFT_STEPS, SFT_BATCH, SFT_LR = 70, 8, 3e-3  # the GRPO test's warm-up
PPO_STEPS, BATCH, GROUP = 12, 16, 4  # 16 episodes per step: 4 tasks x 4
PPO_ARGS = {"mini_batch_size": 8, "micro_batch_size": 8, "ppo_epochs": 2, "learning_rate": 1e-3,
            "value_head_learning_rate": 1e-2, "gamma": 1.0, "lam": 1.0, "kl_coef": 0.01, "kl_estimator": "k3",
            "vf_coef": 0.1, "max_completion_length": 64}
EVAL_REPS = 12  # episodes per question for each reward measurement
MIN_GAIN = 0.2


def test_ppo_raises_reward_of_an_sft_warmed_tiny_model(tiny_model_dir, tmp_path, quiet_training_env):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import sandbox
    import tasks
    from env_client.prompts import initial_messages

    started = time.monotonic()
    root = declare_family(tmp_path / "tasks")
    family = tasks.make(FAMILY, root=root)
    index = PromptIndex.from_instances(family.instances("train"),
                                       render=lambda inst: initial_messages(inst, family.actions))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    prompts, targets = oracle_data(family, index, tok)
    sft_loss = sft_warmup(model, prompts, targets, steps=SFT_STEPS, batch=SFT_BATCH, lr=SFT_LR,
                          pad_id=tok.pad_token_id)
    reference = copy.deepcopy(model)  # the KL anchor: the warm model, frozen

    pool = sandbox.make_pool("local", workers=BATCH, allow_unisolated=True)  # submit-only: no code runs
    try:
        rollout = EnvRolloutFunc(
            make_env=lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=1)), index=index,
            tokenizer=tok, max_new_tokens=32, max_completion_tokens=64, concurrency=BATCH, seed=0, flush_s=30.0)
        dataset_prompts = [row["prompt"] for row in index.rows]
        before = mean_reward(rollout, model, dataset_prompts, EVAL_REPS)
        args = PPOArgs(max_steps=PPO_STEPS, rollout_batch_size=BATCH, seed=0, **PPO_ARGS)
        trainer = PPOTrainer(model=model, tokenizer=tok, rollout=rollout, prompts=dataset_prompts, args=args,
                             output_dir=tmp_path / "ppo", reward_weights={"correctness": 1.0}, group_size=GROUP,
                             ref_model=reference)
        trainer.train()
        after = mean_reward(rollout, trainer.accelerator.unwrap_model(trainer.model).policy, dataset_prompts,
                            EVAL_REPS)
    finally:
        pool.close()

    history = trainer.state.log_history
    print(f"\n[ppo-learning] SFT warm-up {SFT_STEPS} steps (last loss {sft_loss:.3f}); sampled reward before PPO "
          f"{before:.3f}, after {PPO_STEPS} PPO steps {after:.3f}; per-step training reward "
          f"{[round(r['reward'], 2) for r in history]}; kl {[round(r['kl'], 3) for r in history]}; "
          f"{time.monotonic() - started:.0f} s")
    assert 0.05 <= before <= 0.8, f"the warm start should be partly right (got {before:.3f}); retune SFT_STEPS"
    assert after >= before + MIN_GAIN, f"PPO did not raise the reward: {before:.3f} -> {after:.3f}"
    assert all(row["value_loss"] is not None and row["clipfrac"] is not None for row in history)
    assert history[-1]["kl"] > 0  # the policy moved away from the reference, and the penalty saw it
