"""TRL's ``environment_factory``: GRPOTrainer accepts the class (reset, typed and documented tools, get_reward),
its own chat template renders the tools and its own parser turns a model reply into the tool call that plays a
toy_sql episode to a graded reward; a slow test runs a real GRPO step whose rollouts call the tools."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl")

from medagentgym.env_client.actions import tool_schema
from medagentgym.adapters.trl import environment_factory, tool_env_dataset

ACTIONS = ["code_execution", "debugging", "request_info", "submit_answer", "terminal"]


def _trainer(model_dir, tmp_path, dataset, factory, **config):
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    settings = {"max_steps": 1, "per_device_train_batch_size": 2, "num_generations": 2, "max_completion_length": 32}
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to=[], logging_steps=1,
                      save_strategy="no", activation_checkpointing=False, beta=0.0, **{**settings, **config})
    return GRPOTrainer(model=str(model_dir), args=args, train_dataset=dataset, environment_factory=factory)


def _reply(tokenizer, name: str, arguments: str) -> list[int]:
    text = f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call><|im_end|>'
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_grpo_trainer_accepts_the_env_and_its_parser_drives_an_episode(toy_root, tiny_model_dir, tmp_path,
                                                                       sandbox_backend, oracle_answer):
    from trl.chat_template_utils import parse_response

    factory = environment_factory(toy_root, "toy_sql", sandbox=sandbox_backend, allow_unisolated=True)
    dataset = tool_env_dataset(toy_root, "toy_sql", "train", limit=2)
    trainer = _trainer(tiny_model_dir, tmp_path, dataset, factory)
    tools = {tool.__name__: tool for tool in trainer.tools}
    assert sorted(tools) == ACTIONS  # the family's actions, nothing else (reset/get_reward are not tools)
    tok = trainer.processing_class
    rendered = tok.apply_chat_template(dataset[0]["prompt"], tools=trainer.tools, add_generation_prompt=True,
                                       tokenize=False)
    code_doc = tool_schema("code_execution")["function"]["parameters"]["properties"]["code"]["description"]
    assert '"name": "code_execution"' in rendered and code_doc in rendered  # descriptions from the action model
    prefix = tok(rendered, add_special_tokens=False)["input_ids"]

    env = tools["submit_answer"].__self__  # the instance TRL probed and pooled
    task_id = dataset[0]["task_id"]
    env.reset(**dataset[0])
    for name, arguments in (("code_execution", '{"code": "SELECT COUNT(*) FROM patients", "lang": "sql"}'),
                            ("submit_answer", f'{{"answer": "{oracle_answer(task_id)}"}}')):
        parsed = parse_response(tok, _reply(tok, name, arguments), prefix=prefix, tools=trainer.tools)
        call = parsed["tool_calls"][0]["function"]
        observation = tools[call["name"]](**call["arguments"])
        assert "status: SUCCESS" in observation or "submitted" in observation
    assert env.get_reward() == 1.0
    assert "episode is over" in tools["terminal"](cmd="ls")  # no action after the graded submit
    env.reset(**dataset[1])
    assert env.get_reward() == 0.0  # ended without an answer: a graded 0, not a missing reward


def test_actions_subset_and_bad_names(toy_root):
    only = environment_factory(toy_root, "toy_sql", actions=["submit_answer"])
    assert [n for n in ACTIONS if callable(getattr(only, n, None))] == ["submit_answer"]
    with pytest.raises(ValueError, match="not permitted in toy_sql"):
        environment_factory(toy_root, "toy_sql", actions=["browse_web"])


@pytest.mark.slow
def test_a_grpo_step_plays_episodes_through_the_tools(toy_root, tiny_model_dir, tmp_path, sandbox_backend,
                                                     oracle_answer):
    """The tiny model is first taught one reply (submit the task's answer), then GRPO generates, TRL parses the
    tool call, the env grades it, and get_reward's reward is logged."""
    import torch

    factory = environment_factory(toy_root, "toy_sql", actions=["submit_answer"], sandbox=sandbox_backend,
                                  allow_unisolated=True)
    dataset = tool_env_dataset(toy_root, "toy_sql", "train", limit=1)
    trainer = _trainer(tiny_model_dir, tmp_path, dataset, factory, learning_rate=1e-6)
    tok, model = trainer.processing_class, trainer.model
    prompt = tok.apply_chat_template(dataset[0]["prompt"], tools=trainer.tools, add_generation_prompt=True,
                                     tokenize=False)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    c_ids = _reply(tok, "submit_answer", f'{{"answer": "{oracle_answer(dataset[0]["task_id"])}"}}')
    ids, labels = torch.tensor([p_ids + c_ids]), torch.tensor([[-100] * len(p_ids) + c_ids])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(400):  # memorise the one reply (a few hundred steps of a 140k-parameter model)
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.005:
            break
    trainer.train()
    logged = next(e for e in trainer.state.log_history if "rewards/MedAgentGym_toy_sql/mean" in e)
    assert logged["tools/call_frequency"] > 0 and logged["rewards/MedAgentGym_toy_sql/mean"] > 0


@pytest.mark.parametrize("rollouts", [4, pytest.param(16, marks=pytest.mark.slow)])
def test_grpo_steps_with_a_generation_batch_of_episodes(rollouts, toy_root, tiny_model_dir, tmp_path,
                                                        sandbox_backend):
    """TRL resets one env per rollout of its generation batch before generating, so ``rollouts`` episodes hold a
    sandbox worker each at once. With no worker flag the shared pool grows to them and two GRPO steps finish
    (the default pool of 2 used to stall the third reset for 600 s)."""
    from medagentgym.adapters._common import shared_pool

    factory = environment_factory(toy_root, "toy_sql", sandbox=sandbox_backend, allow_unisolated=True)
    dataset = tool_env_dataset(toy_root, "toy_sql", "train", limit=rollouts)
    trainer = _trainer(tiny_model_dir, tmp_path, dataset, factory, max_steps=2, per_device_train_batch_size=rollouts,
                       num_generations=4, max_completion_length=16)
    trainer.train()
    steps = [e for e in trainer.state.log_history if "rewards/MedAgentGym_toy_sql/mean" in e]
    assert trainer.state.global_step == 2 and len(steps) == 2
    assert len(trainer._environment_pool[None]) == rollouts  # TRL made one env per rollout ...
    assert shared_pool(sandbox_backend, allow_unisolated=True).stats()["peak"] >= rollouts  # ... and the pool followed
