"""Token-level rollouts: ids built turn by turn agree with a fresh chat-template render; mask and logprobs align."""

from __future__ import annotations

import shutil

import pytest

from medagentgym import tasks
from medagentgym.env_client import Env, EnvConfig, to_chat_messages
from medagentgym.env_client.policies import HFPolicy, bind, make_policy
from medagentgym.env_client.tokens import collate, observation_ids, render_prompt, token_rollout
from medagentgym.sandbox import make_pool

BACKEND = "bwrap" if shutil.which("bwrap") else "local"


@pytest.fixture(scope="module")
def tok_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir), AutoModelForCausalLM.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def env_and_family(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    fam = tasks.make("toy_sql", root=root)
    fam.build(root, size="tiny", seed=0)
    with make_pool(BACKEND, workers=1, allow_unisolated=True) as pool:
        env = Env(pool, tasks_root=root, config=EnvConfig(max_turns=3))
        yield env, fam
        env.close()


def _fresh(tok, traj) -> list[int]:
    text = tok.apply_chat_template(to_chat_messages(traj), tools=traj.tools or None, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def _segments(mask: list[int]) -> list[tuple[int, int, int]]:
    """(start, end, mask value) runs."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((start, i, mask[start]))
            start = i
    return runs


def test_canonical_ids_equal_a_fresh_render(tok_model, env_and_family):
    tok, _ = tok_model
    env, fam = env_and_family
    inst = fam.instances("test")[0]
    oracle = bind(make_policy("oracle", families={"toy_sql": fam}), inst)

    def scripted(ids, seed):  # a "model" that emits the canonical tokenization of the oracle's text
        new = tok(oracle.act([]).text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return new, [-0.25] * len(new)

    ep = token_rollout(env, inst, tokenizer=tok, generate_fn=scripted, seed=7)
    assert ep.reward == 1.0 and ep.turns == 2 and not ep.truncated
    ours = ep.prompt_ids + ep.completion_ids
    fresh = _fresh(tok, ep.trajectory)
    # Equal, except that a fresh render writes "\n" after the final <|im_end|>, which was never generated.
    assert fresh[: len(ours)] == ours
    assert tok.decode(fresh[len(ours):]) == "\n"
    assert ep.prompt_ids == render_prompt(tok, ep.trajectory.prompt, ep.trajectory.tools)
    assert len(ep.completion_ids) == len(ep.env_mask) == len(ep.logprobs)
    runs = _segments(ep.env_mask)
    assert [m for *_, m in runs] == [1, 0, 1]  # model turn, tool response + generation prompt, model turn
    assert all(ep.logprobs[i] == -0.25 for s, e, m in runs if m == 1 for i in range(s, e))
    assert all(ep.logprobs[i] == 0.0 for s, e, m in runs if m == 0 for i in range(s, e))
    env_text = tok.decode(ep.completion_ids[runs[1][0]:runs[1][1]])
    assert env_text.startswith("\n<|im_start|>user\n<tool_response>\n") and env_text.endswith(
        "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    batch = collate([ep, ep])
    assert set(batch) >= {"prompt_ids", "completion_ids", "env_mask", "logprobs"} and len(batch["env_mask"]) == 2


def test_sampled_rollout_with_tiny_model(tok_model, env_and_family):
    tok, model = tok_model
    env, fam = env_and_family
    inst = fam.instances("test")[1]
    a = token_rollout(env, inst, tokenizer=tok, model=model, seed=11, max_new_tokens=12, temperature=1.0)
    b = token_rollout(env, inst, tokenizer=tok, model=model, seed=11, max_new_tokens=12, temperature=1.0)
    assert a.completion_ids == b.completion_ids and a.logprobs == b.logprobs  # seeded
    assert a.turns == 3 and a.truncated and a.reward == 0.0  # a random model never submits
    runs = _segments(a.env_mask)
    model_runs = [(s, e) for s, e, m in runs if m == 1]
    assert len(model_runs) == a.turns
    assert all(a.logprobs[i] <= 0.0 for s, e in model_runs for i in range(s, e))
    assert any(a.logprobs[i] < 0.0 for s, e in model_runs for i in range(s, e))
    for (s, e), step in zip(model_runs, a.trajectory.steps):
        ids = a.completion_ids[s:e]
        body = ids[:-1] if ids[-1] == tok.eos_token_id else ids
        assert tok.decode(body) == step.raw_text  # the env saw exactly the decoded model ids
    # every environment segment between turns is the observation turn tokenized on its own
    env_runs = [(s, e) for s, e, m in runs if m == 0]
    for k, step in enumerate(a.trajectory.steps[:-1]):
        s, e = env_runs[k]
        obs = observation_ids(tok, [{"role": step.observation_role, "content": step.observation}], a.trajectory.tools)
        seg = a.completion_ids[s:e]
        closed = seg[0] == tok.eos_token_id and seg[1:] == obs  # turn cut by max_new_tokens: eos appended
        assert seg == obs or closed
    # nothing follows the last turn: an episode that ends on a cut turn ends without <|im_end|>, which is how
    # TRL tells a truncated completion (ids[-1] not an end token)
    last_s, last_e = model_runs[-1]
    assert last_e == len(a.completion_ids) and a.env_mask[-1] == 1
    last_turn_cut = a.completion_ids[-1] != tok.eos_token_id
    assert last_turn_cut == (len(a.completion_ids[last_s:]) == 12)  # cut exactly at max_new_tokens


def test_hf_policy_acts_with_token_ids(tok_model):
    tok, model = tok_model
    policy = HFPolicy("tiny", model=model, tokenizer=tok, max_new_tokens=8, temperature=1.0)
    msgs = [{"role": "user", "content": "How many patients?"}]
    out1, out2 = policy.act(msgs, seed=3), policy.act(msgs, seed=3)
    assert out1.token_ids == out2.token_ids and 1 <= out1.n_completion_tokens <= 8
    assert len(out1.logprobs) == len(out1.token_ids) and out1.n_prompt_tokens == len(render_prompt(tok, msgs))


def test_token_rollout_needs_a_generator(tok_model, env_and_family):
    tok, _ = tok_model
    env, fam = env_and_family
    with pytest.raises(ValueError, match="model="):
        token_rollout(env, fam.instances("test")[0], tokenizer=tok)
