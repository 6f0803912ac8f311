"""PPO: the math by hand (GAE with an environment span, masking, clipped losses, KL control), the trainer section,
the model layout against generation, a dropped episode, and the recipe run end to end with a resume."""

from __future__ import annotations

import json

import pytest
import torch

from medagentgym.medcopilot.config import RecipeError, load_recipe
from medagentgym.medcopilot.ppo import (
    AdaptiveKLController,
    FixedKLController,
    PPOArgs,
    gae,
    kl_estimate,
    make_kl_controller,
    masked_mean,
    masked_whiten,
    policy_loss,
    token_rewards,
    value_loss,
)

# One episode: assistant tokens 0-1, an observation (env tokens 2-3), assistant token 4, then padding (5).
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]])
VALUES = torch.tensor([[0.5, 0.6, 9.0, -9.0, 0.8, 3.0]])


def test_gae_skips_the_environment_span_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 5.0, 5.0, 1.0, 7.0]])  # env/padding rewards are never read
    adv, ret = gae(rewards, VALUES, MASK, gamma=1.0, lam=0.5)
    # assistant tokens only: values (0.5, 0.6, 0.8), rewards (0, 0, 1)
    # t=4: delta = 1 - 0.8 = 0.2, A = 0.2; t=1: delta = 0.8 - 0.6 = 0.2, A = 0.2 + 0.5 * 0.2 = 0.3
    # t=0: delta = 0.6 - 0.5 = 0.1, A = 0.1 + 0.5 * 0.3 = 0.25
    assert adv[0].tolist() == pytest.approx([0.25, 0.3, 0.0, 0.0, 0.2, 0.0])
    assert ret[0].tolist() == pytest.approx([0.75, 0.9, 0.0, 0.0, 1.0, 0.0])
    # with discounting: gamma = 0.9, lam = 1 -> A_t = sum of discounted rewards - V_t over assistant tokens
    adv, ret = gae(rewards, VALUES, MASK, gamma=0.9, lam=1.0)
    assert adv[0].tolist() == pytest.approx([0.81 - 0.5, 0.9 - 0.6, 0.0, 0.0, 1.0 - 0.8, 0.0])
    assert ret[0].tolist() == pytest.approx([0.81, 0.9, 0.0, 0.0, 1.0, 0.0])


def test_environment_tokens_do_not_change_assistant_advantages():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(3, 12, generator=gen)
    values = torch.randn(3, 12, generator=gen)
    mask = (torch.rand(3, 12, generator=gen) > 0.4).float()
    adv, ret = gae(rewards, values, mask, gamma=0.97, lam=0.9)
    noisy_rewards = torch.where(mask > 0, rewards, 100 * torch.randn(3, 12, generator=gen))
    noisy_values = torch.where(mask > 0, values, 100 * torch.randn(3, 12, generator=gen))
    adv2, ret2 = gae(noisy_rewards, noisy_values, mask, gamma=0.97, lam=0.9)
    assert torch.allclose(adv, adv2) and torch.allclose(ret, ret2)
    assert not adv[mask == 0].any() and not ret[mask == 0].any()
    # removing the environment tokens altogether gives the same assistant advantages
    row = mask[0] > 0
    packed, _ = gae(rewards[:1, row], values[:1, row], torch.ones(1, int(row.sum())), gamma=0.97, lam=0.9)
    assert torch.allclose(packed[0], adv[0, row])


def test_token_rewards_put_the_score_on_the_last_assistant_token():
    mask = torch.cat([MASK, torch.zeros(1, 6)])  # second episode dropped: no assistant token left
    kl = torch.full((2, 6), 0.5)
    rewards = token_rewards(torch.tensor([1.0, 1.0]), kl, mask, kl_coef=0.1)
    assert rewards[0].tolist() == pytest.approx([-0.05, -0.05, 0.0, 0.0, 1.0 - 0.05, 0.0])
    assert not rewards[1].any()


def test_whitening_and_masked_mean_use_assistant_tokens_only():
    x = torch.tensor([[1.0, 3.0, 100.0, -50.0, 5.0, 0.0]])
    white = masked_whiten(x, MASK)
    assert masked_mean(white, MASK).item() == pytest.approx(0.0, abs=1e-6)
    assert masked_mean(white ** 2, MASK).item() == pytest.approx(1.0, abs=1e-4)
    assert white[0, 2] == 0 and white[0, 3] == 0
    assert masked_mean(x, torch.zeros_like(x)).item() == 0.0  # an empty mask is 0, not NaN


def test_clipped_policy_loss_by_hand():
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    new = torch.log(torch.tensor([[1.1, 1.5, 1.5]])).requires_grad_()  # ratios 1.1, 1.5, 1.5
    loss, stats = policy_loss(new, old, adv, mask, cliprange=0.2)
    # token 0: inside the clip, -1.1; token 1: A > 0 and ratio > 1.2 -> clipped at -1.2 (no gradient);
    # token 2: A < 0 and ratio > 1.2 -> the unclipped 1.5 is the larger loss (pessimistic bound), keeps its gradient
    assert loss.item() == pytest.approx((-1.1 - 1.2 + 1.5) / 3)
    assert stats["clipfrac"].item() == pytest.approx(1 / 3)
    loss.backward()
    assert new.grad[0, 1] == 0 and new.grad[0, 0] != 0 and new.grad[0, 2] != 0
    assert stats["approx_kl"].item() == pytest.approx(0.5 * float((new.detach() ** 2).mean()))


def test_clipped_value_loss_by_hand():
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0]])
    values = torch.tensor([[0.5, -0.5]]).requires_grad_()
    loss, stats = value_loss(values, old, returns, torch.ones(1, 2), cliprange_value=0.2)
    # token 0: (0.5-1)^2 = 0.25 vs clipped (0.2-1)^2 = 0.64 -> 0.64; token 1: (-1.5)^2 = 2.25 vs (-0.2-1)^2 = 1.44
    assert loss.item() == pytest.approx(0.5 * (0.64 + 2.25) / 2)
    assert stats["value_clipfrac"].item() == pytest.approx(0.5)
    loss.backward()
    assert values.grad[0, 0] == 0 and values.grad[0, 1] != 0


def test_kl_estimators_and_controllers():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    assert kl_estimate(logp, ref, "k1").tolist() == pytest.approx([0.5, -1.0])
    k3 = kl_estimate(logp, ref, "k3")
    assert k3.tolist() == pytest.approx([torch.exp(torch.tensor(-0.5)).item() - 1 + 0.5, torch.e - 1 - 1.0])
    assert (k3 >= 0).all()
    with pytest.raises(ValueError, match="k1 or k3"):
        kl_estimate(logp, ref, "k2")

    ctl = AdaptiveKLController(0.1, target=6.0, horizon=100)
    ctl.update(12.0, n_episodes=10)  # error clipped to +0.2: coef * (1 + 0.2 * 10 / 100)
    assert ctl.value == pytest.approx(0.1 * 1.02)
    ctl.update(4.5, n_episodes=10)  # error -0.25 clipped to -0.2
    assert ctl.value == pytest.approx(0.1 * 1.02 * 0.98)
    ctl.update(6.6, n_episodes=50)  # error +0.1: coef * (1 + 0.1 * 0.5)
    assert ctl.value == pytest.approx(0.1 * 1.02 * 0.98 * 1.05)
    before = ctl.value
    ctl.update(float("nan"), n_episodes=10)
    assert ctl.value == before
    fixed = FixedKLController(0.05)
    fixed.update(100.0, n_episodes=10)
    assert fixed.value == 0.05
    assert isinstance(make_kl_controller(PPOArgs(target_kl=3.0)), AdaptiveKLController)
    assert isinstance(make_kl_controller(PPOArgs()), FixedKLController)


@pytest.mark.parametrize(("trainer", "message"), [
    ({"lerning_rate": 1e-4}, "unknown key 'trainer.lerning_rate': did you mean 'learning_rate'?"),
    ({"mini_batch_size": 3}, "trainer.mini_batch_size=3 is invalid: expected a divisor of trainer.rollout_batch_size"),
    ({"lam": 1.5}, "trainer.lam=1.5 is invalid"),
    ({"kl_estimator": "k2"}, "trainer.kl_estimator='k2' is not allowed"),
    ({"report_to": ["tensorboard"]}, "trainer.report_to=['tensorboard'] is invalid: expected [] or [wandb]"),
    ({"target_kl": 6.0, "kl_coef": 0.0}, "trainer.kl_coef=0.0 is invalid"),
    ({"ppo_epochs": "4"}, "trainer.ppo_epochs='4' has the wrong type"),
])
def test_bad_trainer_keys_are_one_line_errors(trainer, message):
    with pytest.raises(RecipeError) as exc:
        PPOArgs.from_trainer(trainer)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_recipes_validate_and_cross_section_checks():
    from medagentgym.medcopilot.trainers.ppo import ppo_args

    for name in ("ppo_tiny", "ppo_qwen14b"):
        cfg = load_recipe(name)
        args = ppo_args(cfg)
        assert cfg.method == "ppo" and args.rollout_batch_size % cfg.rollout.k == 0
    big = load_recipe("ppo_qwen14b")
    assert big.model.name_or_path == "Qwen/Qwen2.5-14B-Instruct" and big.model.lora is not None
    assert big.model.dtype == "bfloat16" and ppo_args(big).activation_checkpointing
    with pytest.raises(RecipeError, match="rollout.backend='vllm' is not supported by PPO"):
        ppo_args(load_recipe("ppo_tiny", ["rollout.backend=vllm"]))
    with pytest.raises(RecipeError, match="not a multiple of rollout.k=3"):
        ppo_args(load_recipe("ppo_tiny", ["rollout.k=3"]))
    with pytest.raises(RecipeError, match="temperature"):
        ppo_args(load_recipe("ppo_tiny", ["rollout.temperature=0"]))


# --- with the tiny model --------------------------------------------------------------------------------------------


class _FixedRollout:
    """Stands in for EnvRolloutFunc: returns the same two episodes every call (the second one's grader failed)."""

    def __init__(self, tokenizer):
        self.calls = 0
        ids = tokenizer("hello world", add_special_tokens=False)["input_ids"]
        self.out = {"prompt_ids": [ids + [1, 2], ids], "completion_ids": [[5, 6, 7, 8, 9], [5, 6, 7]],
                    "env_mask": [[1, 1, 0, 0, 1], [1, 1, 1]], "logprobs": [[0.0] * 5, [0.0] * 3],
                    "reward_correctness": [1.0, None], "reward_format": [None, 0.5],
                    "episode_stats": [{"success": True, "turns": 2}, {"turns": 1, "grader_error": True}]}

    def hf_generator(self, model, temperature):
        return None

    def run(self, prompts, batch_generate, **seeding):
        assert len(prompts) == 2
        return self.out


def _trainer(model_dir, tmp_path, rollout_factory, lora=False, **overrides):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym.medcopilot.trainers.ppo import PPOTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ref = None
    if lora:
        from peft import get_peft_model

        from medagentgym.medcopilot.config import LoraSpec
        from medagentgym.medcopilot.modeling import lora_config

        model = get_peft_model(model, lora_config(LoraSpec(r=4, dropout=0.1)))
    else:
        ref = AutoModelForCausalLM.from_pretrained(model_dir)
    args = PPOArgs(**{"max_steps": 1, "rollout_batch_size": 2, "mini_batch_size": 2, "micro_batch_size": 2,
                      "ppo_epochs": 1, "learning_rate": 1e-3, **overrides})
    return PPOTrainer(model=model, tokenizer=tok, rollout=rollout_factory(tok), prompts=["p"], args=args,
                      output_dir=tmp_path, reward_weights={"correctness": 1.0, "format": 0.0}, ref_model=ref)


def test_a_failed_grader_drops_the_episode_and_a_zero_weight_none_does_not(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path, _FixedRollout, lam=1.0)
    batch, metrics = trainer._rollout(0)
    assert metrics["episodes_dropped"] == 1.0 and metrics["reward"] == 1.0  # not (1 + 0) / 2
    assert batch.mask.tolist() == [[1, 1, 0, 0, 1], [0, 0, 0, 0, 0]]
    assert metrics["rewards/correctness/mean"] == 1.0 and metrics["rewards/format/mean"] == 0.5
    assert metrics["env/grader_error_rate"] == 0.5
    stats = trainer._advantages(batch)
    assert not batch.advantages[1].any() and not batch.returns[1].any()
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before any update
    assert batch.returns[0].tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0, 1.0])  # values 0, lam 1
    update = trainer._update(batch, 0)
    assert update["clipfrac"] == 0.0 and update["value_loss"] == pytest.approx(0.5)  # 0.5 * (0 - 1)^2


def test_lora_policy_trains_adapters_only_against_its_disabled_adapters(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path, _FixedRollout, lora=True, max_steps=2, ppo_epochs=2,
                       learning_rate=1e-2, kl_coef=0.1, activation_checkpointing=True)
    policy = trainer.accelerator.unwrap_model(trainer.model).policy
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    assert all(m.p == 0 for m in policy.modules() if isinstance(m, torch.nn.Dropout))  # LoRA dropout switched off
    trainer.train()
    changed = {n for n, p in policy.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed and all("lora_" in n for n in changed)
    first, second = trainer.state.log_history
    # adapters off = the reference; then the policy has moved. _FixedRollout's completions are not sampled from the
    # policy, so the k1 estimate has no sign (it was -1.17 with the tiny model's weights at std 0.1): only != 0
    assert first["kl"] == pytest.approx(0.0, abs=1e-6) and abs(second["kl"]) > 1e-3
    assert second["approx_kl"] > 0 and first["value_loss"] > 0


def test_resuming_a_checkpoint_continues_exactly_like_an_unbroken_run(tiny_model_dir, tmp_path):
    """Weights, value head, Adam moments, schedule and the adaptive KL coefficient all come back: 2 steps, save,
    resume in a fresh trainer, 1 more step == 3 steps in one go (the stand-in rollout is deterministic)."""
    from safetensors.torch import load_file

    settings = {"max_steps": 3, "save_steps": 2, "ppo_epochs": 2, "lr_scheduler_type": "linear", "warmup_steps": 1,
                "kl_coef": 0.2, "target_kl": 0.01, "kl_horizon": 10, "kl_estimator": "k3", "ent_coef": 0.1}
    straight = _trainer(tiny_model_dir, tmp_path / "a", _FixedRollout, **settings)
    straight.train()
    resumed = _trainer(tiny_model_dir, tmp_path / "b", _FixedRollout, **settings)
    resumed.load_checkpoint(tmp_path / "a" / "checkpoint-2")
    assert resumed.state.global_step == 2 and [r["step"] for r in resumed.state.log_history] == [1, 2]
    resumed.train()
    assert resumed.kl_ctl.value == straight.kl_ctl.value != 0.2  # the controller moved, and was restored
    for a, b in zip(resumed.state.log_history, straight.state.log_history, strict=True):
        assert {k: v for k, v in a.items() if not k.endswith("_s")} == pytest.approx(
            {k: v for k, v in b.items() if not k.endswith("_s")})
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    head = load_file(str(tmp_path / "a" / "checkpoint-2" / "value_head.safetensors"))
    assert head["weight"].abs().sum() > 0  # the value head was trained and saved


def test_rescoring_matches_the_sampling_logprobs_of_multi_turn_episodes(tiny_model_dir, tmp_path):
    """The layout the update uses (left-padded prompts, right-padded completions, env tokens spliced in) gives
    back the very logprobs generation sampled with, at temperature 1 and 0.7, for every model token."""
    from medagentgym import sandbox
    from medagentgym import tasks
    from medagentgym.env_client import Env, EnvConfig
    from medagentgym.env_client.prompts import initial_messages
    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex

    root = tmp_path / "tasks"
    (root / "count_to").mkdir(parents=True)
    (root / "count_to" / "family.yaml").write_text(
        "name: count_to\nanswer_type: integer\nactions: [code_execution, submit_answer]\nmax_turns: 2\n"
        "splits: [train, test]\n", encoding="utf-8")
    (root / "count_to" / "tasks.jsonl").write_text(
        "".join(json.dumps({"question": f"Count to {n}.", "answer": n, "split": "train"}) + "\n" for n in (2, 5)),
        encoding="utf-8")
    family = tasks.make("count_to", root=root)
    index = PromptIndex.from_instances(family.instances("train"),
                                       render=lambda inst: initial_messages(inst, family.actions))
    pool = sandbox.make_pool("local", workers=3, allow_unisolated=True)
    try:
        def factory(tok):
            return EnvRolloutFunc(make_env=lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=2)),
                                  index=index, tokenizer=tok, max_new_tokens=6, concurrency=3, seed=1)

        trainer = _trainer(tiny_model_dir, tmp_path / "out", factory, rollout_batch_size=3, mini_batch_size=3,
                           micro_batch_size=3, kl_coef=0.0)
        prompts = [index.rows[0]["prompt"], index.rows[1]["prompt"], index.rows[0]["prompt"]]
        policy = trainer.accelerator.unwrap_model(trainer.model).policy.eval()
        for temperature in (1.0, 0.7):
            trainer.temperature = temperature
            out = trainer.rollout.run(prompts, trainer.rollout.hf_generator(policy, temperature=temperature))
            assert any(0 in m for m in out["env_mask"])  # the random model's turns get observations back
            from medagentgym.medcopilot.ppo import collate_rows

            ids, att, pos, start = collate_rows(out["prompt_ids"], out["completion_ids"], trainer.tokenizer.pad_token_id)
            with torch.no_grad():
                logprobs, values, _ = trainer.model(ids, att, pos, start, temperature)
            for i, (mask, sampled) in enumerate(zip(out["env_mask"], out["logprobs"])):
                model_cols = [k for k, m in enumerate(mask) if m]
                assert logprobs[i, model_cols].tolist() == pytest.approx([sampled[k] for k in model_cols], abs=2e-4)
            assert not values.any()  # the value head starts at zero
    finally:
        pool.close()


def test_ppo_tiny_through_train_py_then_resume(tiny_model_dir, sandbox_backend, tmp_path, train_main, quiet_training_env, capsys):
    from safetensors.torch import load_file

    from medagentgym import tasks

    root = tmp_path / "tasks"
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    out = tmp_path / "ppo"
    argv = ["recipe=ppo_tiny", f"model.name_or_path={tiny_model_dir}", f"tasks.root={root}", f"output.dir={out}",
            f"env.sandbox={sandbox_backend}", f"env.allow_unisolated={sandbox_backend == 'local'}",
            "tasks.limit=1", "env.max_turns=2", "rollout.max_new_tokens=6",
            "trainer.rollout_batch_size=2", "trainer.ppo_epochs=1", "trainer.ent_coef=0.5", "trainer.save_steps=1",
            "trainer.learning_rate=1e-2"]
    assert train_main([*argv, "trainer.max_steps=2"]) == 0
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["train_rows"] == 1 and summary["resumed_from"] is None
    assert summary["reward_first"] == summary["reward_last"] == 0.0  # a random model never submits correctly
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert not list(out.glob(".checkpoint-*"))  # no temporary folder left behind
    for name in ("model.safetensors", "value_head.safetensors", "tokenizer.json", "train_results.json",
                 "recipe.yaml"):
        assert (out / name).is_file(), name
    for name in ("optimizer.pt", "scheduler.pt", "rng_state_0.pth", "value_head.safetensors"):
        assert (out / "checkpoint-2" / name).is_file(), name
    start = load_file(str(tiny_model_dir / "model.safetensors"))
    trained = load_file(str(out / "model.safetensors"))
    assert any(not torch.equal(start[k], trained[k]) for k in start)  # the entropy bonus moved the weights
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [row["step"] for row in history] == [1, 2]
    for key in ("reward", "kl", "kl_coef", "policy_loss", "value_loss", "clipfrac", "entropy", "approx_kl",
                "env/success_rate", "env/turns_mean", "env/truncation_rate", "learning_rate"):
        assert key in history[-1], key
    # moved off the reference (k1, the recipe's estimator, sums to either sign on one episode)
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-6) and abs(history[1]["kl"]) > 1e-6

    capsys.readouterr()
    assert train_main([*argv, "trainer.max_steps=3", "trainer.report_to=[wandb]"]) == 0
    assert "resuming from " + str(out / "checkpoint-2") in capsys.readouterr().out
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 3 and summary["resumed_from"] == str(out / "checkpoint-2")
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]  # save_total_limit
    state = json.loads((out / "trainer_state.json").read_text())
    assert [row["step"] for row in state["log_history"]] == [1, 2, 3]  # old history kept, none repeated
    saved = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["log_history"][:2] == saved["log_history"]
    assert list((quiet_training_env / "wandb").glob("offline-run-*"))  # WANDB_MODE=offline in tests
