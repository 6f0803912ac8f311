"""Multi-turn tool use on ``toy_lookup``: environment tokens stay out of GRPO's loss.

The family (``medagentgym/tasks/toy_lookup.py``): run one SQL query against the record's own database, then submit the value
it returned. One GRPO update (plain SGD, no clipping) on scripted two-turn episodes equals the gradient of the
policy loss over the *model's* tokens only; the same loss with the observation tokens included points elsewhere
(right and wrong episodes run different queries, so their observations differ and would not cancel).
"""

from __future__ import annotations

import re

import pytest
import torch

from medagentgym.env_client import Env, EnvConfig
from medagentgym.env_client.policies import render_action
from medagentgym.medcopilot.rewards_adapter import EpisodeReward
from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex

#: CPU-bound for 1-2 minutes; on a loaded shared machine the wall time can be many times that.
pytestmark = pytest.mark.timeout(1800)

GROUP = 4


class ScriptedLookup(EnvRolloutFunc):
    """Per task, alternately: the right query then its value, or a query of another column then a wrong value."""

    def hf_generator(self, model, *, temperature, top_p=1.0, top_k=0):
        tok, turns = self.tokenizer, {}

        def gen(contexts, seeds):
            out = []
            for context in contexts:
                text = tok.decode(context)
                record = re.findall(r"Record (\S+):", text)[-1]
                if "<tool_response>" not in text:  # first turn: the query
                    k = turns[record] = turns.get(record, -1) + 1
                    query = "SELECT value FROM reading" if k % 2 == 0 else "SELECT test FROM reading"
                    action = render_action("code_execution", {"lang": "sql", "code": query})
                else:  # second turn: the value the right query returned, or a value no record holds
                    seen = re.search(r"value\n-+\n(\d)", text)
                    action = render_action("submit_answer", {"answer": seen.group(1) if seen else "0"})
                out.append(tok(action, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
            return out, [[0.0] * len(ids) for ids in out]
        return gen


@pytest.fixture(scope="module")
def lookup(tmp_path_factory, make_test_pool):
    from medagentgym import tasks
    from medagentgym.env_client.prompts import initial_messages

    root = tmp_path_factory.mktemp("tasks")
    fam = tasks.make("toy_lookup", root=root)
    fam.build(root, size="tiny", seed=0)
    index = PromptIndex.from_instances(fam.instances("train")[:2],
                                       render=lambda inst: initial_messages(inst, fam.actions))
    pool = make_test_pool(2 * GROUP)  # the SQL really runs: the observations differ by query
    yield {"root": root, "family": fam, "index": index, "pool": pool}
    pool.close()


def _flat_grad(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_env_tokens_are_masked_out_of_the_grpo_loss(tiny_model_dir, lookup, tmp_path, quiet_training_env):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    start = [p.detach().clone() for p in model.parameters()]
    rollout = ScriptedLookup(
        make_env=lambda: Env(lookup["pool"], tasks_root=lookup["root"], config=EnvConfig(max_turns=3)),
        index=lookup["index"], tokenizer=tok, max_new_tokens=40, concurrency=2 * GROUP, seed=0, flush_s=30.0)
    returned = []

    def hook(prompts, trainer):
        returned.append(rollout(prompts, trainer))
        return returned[-1]

    lr = 1e-2
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=1, per_device_train_batch_size=2 * GROUP,
                      num_generations=GROUP, learning_rate=lr, optim="sgd", max_grad_norm=0.0, beta=0.0,
                      loss_type="dapo", use_cpu=True, bf16=False, activation_checkpointing=False, report_to=[],
                      save_strategy="no", disable_tqdm=True, max_completion_length=256, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[EpisodeReward("correctness", group_size=GROUP)], args=args,
                          train_dataset=Dataset.from_list(lookup["index"].rows), processing_class=tok,
                          rollout_func=hook)
    trainer.train()
    out, advantages = returned[0], trainer._logs["advantages"]  # TRL's per-row advantages, in row order
    assert out["reward_correctness"].count(1.0) == GROUP and out["reward_correctness"].count(0.0) == GROUP
    update = torch.cat([(p0 - p.detach()).flatten() for p0, p in zip(start, trainer.model.parameters())]) / lr

    # The policy-gradient loss at the start, with the model's tokens only or with the observations too.
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    grads = {}
    for name in ("model", "all"):
        reference.zero_grad()
        total, tokens = 0.0, 0
        for prompt, completion, env_mask, adv in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"],
                                                    advantages):
            logits = reference(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1].float()
            logp = logits.log_softmax(-1).gather(1, torch.tensor(completion)[:, None])[:, 0]
            mask = torch.tensor(env_mask if name == "model" else [1] * len(completion), dtype=torch.float)
            total = total - adv * (logp * mask).sum()
            tokens += int(mask.sum())
        (total / tokens).backward()
        grads[name] = _flat_grad(reference).clone()
    cos = {name: torch.nn.functional.cosine_similarity(update, g, dim=0).item() for name, g in grads.items()}
    assert any(0 in m for m in out["env_mask"]) and len(set(map(tuple, out["env_mask"]))) > 1
    assert cos["model"] > 0.999, cos  # TRL's update is the model-token gradient
    assert cos["all"] < 0.99, cos  # which is not the gradient with observation tokens in the loss
