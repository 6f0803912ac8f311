"""GRPO pieces that need no model: step metrics and the reward adapter, then the recipe run end to end."""

from __future__ import annotations

import json
import math

import pytest

from medagentgym.medcopilot.config import RecipeError, load_recipe
from medagentgym.medcopilot.metrics import EpisodeStats, batch_metrics, zero_advantage_fraction
from medagentgym.medcopilot.rewards_adapter import EpisodeReward


def test_zero_advantage_fraction_counts_flat_groups():
    # groups: (1, 0) informative, (1, 1) flat, (None, 0) has one scored row -> flat
    assert zero_advantage_fraction([1.0, 0.0, 1.0, 1.0, None, 0.0], group_size=2) == pytest.approx(2 / 3)
    assert zero_advantage_fraction([0.0, 0.5, 0.5, 0.5], group_size=4) == 0.0
    with pytest.raises(ValueError, match="groups of 4"):
        zero_advantage_fraction([1.0, 0.0, 1.0], group_size=4)


def test_batch_metrics_aggregates_episodes():
    stats = [
        EpisodeStats(success=True, turns=2, tool_calls=2, tool_failures=0, sandbox_calls=1, sandbox_seconds=0.2),
        EpisodeStats(turns=4, tool_calls=4, tool_failures=3, looped=True, truncated=True,
                     sandbox_calls=3, sandbox_seconds=0.4),
    ]
    m = batch_metrics(stats, rewards=[1.0, 0.0], group_size=2)
    assert m["env/success_rate"] == 0.5
    assert m["env/turns_mean"] == 3.0
    assert m["env/tool_failure_rate"] == pytest.approx(3 / 6)
    assert m["env/loop_rate"] == 0.5
    assert m["env/truncation_rate"] == 0.5
    assert m["env/zero_adv_frac"] == 0.0
    assert m["env/sandbox_latency_s"] == pytest.approx(0.6 / 4)
    assert batch_metrics([], rewards=[], group_size=2) == {}


def test_episode_stats_round_trip_rejects_unknown_fields():
    s = EpisodeStats(success=True, turns=3)
    assert EpisodeStats.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="unknown EpisodeStats fields"):
        EpisodeStats.from_dict({"sucess": True})


def test_episode_reward_passes_rewards_and_logs_metrics():
    logged: dict[str, float] = {}
    reward = EpisodeReward("correctness", group_size=2)
    stats = [EpisodeStats(success=True, turns=1).to_dict(), EpisodeStats(turns=2, grader_error=True).to_dict()]
    out = reward(prompts=["p", "p"], completions=["a", "b"], reward_correctness=[1.0, None], episode_stats=stats,
                 log_metric=lambda k, v: logged.__setitem__(k, v), instance_id=["t/0", "t/0"])
    assert out == [1.0, None]
    assert logged["env/success_rate"] == 0.5 and logged["env/grader_error_rate"] == 0.5
    assert logged["env/zero_adv_frac"] == 1.0  # one scored row in the group: no signal
    assert reward.__name__ == "correctness"
    assert not any(math.isnan(v) for v in logged.values())


def test_episode_reward_without_rollout_kwarg_is_loud():
    with pytest.raises(KeyError, match="reward_correctness"):
        EpisodeReward("correctness", group_size=2)(prompts=["p"], completions=["a"])
    with pytest.raises(ValueError, match="group_size"):
        EpisodeReward("correctness", group_size=0)


def test_recipes_validate_without_loading_a_model():
    from medagentgym.medcopilot.trainers.grpo import _trainer_args, reward_components

    for name in ("grpo_tiny", "grpo_qwen7b", "grpo_qwen14b"):
        cfg = load_recipe(name)
        args = _trainer_args(cfg)
        assert cfg.method == "grpo" and args.top_p == 1.0 and args.top_k == 0 and args.beta == 0.0
        assert args.use_vllm == (cfg.rollout.backend == "vllm")
        assert args.generation_batch_size % args.num_generations == 0
        assert set(reward_components(cfg.reward.weights)) == set(cfg.reward.weights)
    big = load_recipe("grpo_qwen14b")
    assert big.model.name_or_path == "Qwen/Qwen2.5-14B-Instruct" and big.model.lora is not None
    assert big.trainer["vllm_mode"] == "colocate"


def test_contradicting_or_unknown_reward_keys_are_one_line_errors():
    from medagentgym.medcopilot.trainers.grpo import _trainer_args, reward_components

    with pytest.raises(RecipeError, match="contradicts rollout.temperature"):
        _trainer_args(load_recipe("grpo_tiny", ["trainer.temperature=0.5"]))
    with pytest.raises(RecipeError, match="unknown reward 'corectness'; did you mean 'correctness'"):
        reward_components({"corectness": 1.0})
    with pytest.raises(RecipeError, match="unknown reward 'RewardSpec'"):  # exported by rewards/, not a term
        reward_components({"RewardSpec": 1.0})


def test_grpo_tiny_through_train_py(tiny_model_dir, sandbox_backend, tmp_path, train_main, quiet_training_env):
    from medagentgym import tasks

    root = tmp_path / "tasks"
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    out = tmp_path / "grpo"
    argv = ["recipe=grpo_tiny", f"model.name_or_path={tiny_model_dir}", f"tasks.root={root}", f"output.dir={out}",
            f"env.sandbox={sandbox_backend}", f"env.allow_unisolated={sandbox_backend == 'local'}",
            "tasks.limit=2", "env.max_turns=2", "rollout.max_new_tokens=16",
            "trainer.max_steps=2", "trainer.per_device_train_batch_size=4", "trainer.num_generations=2"]
    assert train_main(argv) == 0
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["train_rows"] == 2
    assert summary["reward_first"] == summary["reward_last"] == 0.0  # a random model never submits correctly
    history = [row for row in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in row]
    assert len(history) == 2
    for row in history:
        assert row["env/turns_mean"] <= 2 and 0.0 <= row["env/tool_failure_rate"] <= 1.0
        assert row["env/truncation_rate"] + row["env/success_rate"] <= 1.0
        assert row["completions/mean_length"] > 0  # TRL counts only model tokens (env_mask = 1)
    assert (out / "model.safetensors").is_file() and (out / "recipe.yaml").is_file()
