"""The real-model pipeline's evaluation speed settings (medagentgym.medcopilot.real_pipeline): the thread count follows the
load, the before/after probe measures both settings on the same contexts, and the greedy lock-step evaluation
batches every live episode's turn into one generate call."""

from __future__ import annotations

import os
import shutil

import pytest
import torch


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("load", "cores", "expected"), [(0.0, 2, 2), (0.6, 2, 1), (14.7, 2, 1), (1.2, 8, 7)])
def test_auto_threads_are_the_cores_the_load_leaves(monkeypatch, restore_threads, load, cores, expected):
    from medagentgym.medcopilot.real_pipeline import torch_threads

    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert torch_threads("auto") == expected == torch.get_num_threads()
    assert torch_threads(1) == 1
    with pytest.raises(ValueError, match="positive number or 'auto'"):
        torch_threads(0)


def test_the_speed_probe_runs_both_settings_on_the_same_rows(tiny_model_dir, restore_threads):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym.medcopilot.real_pipeline import generation_speed

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    contexts = [tok("hello there", add_special_tokens=False)["input_ids"], [5, 6, 7]]
    speed = generation_speed(model, tok, contexts, tokens=4, threads=1, before_threads=2)
    assert speed["rows"] == 2 and torch.get_num_threads() == 1
    assert speed["before"]["threads"] == 2 and speed["after"]["threads"] == 1
    for side in ("before", "after"):
        assert 2 <= speed[side]["positions"] <= 8 and speed[side]["per_cpu_s"] > 0
    assert speed["ratio_cpu"] == pytest.approx(speed["after"]["per_cpu_s"] / speed["before"]["per_cpu_s"], rel=0.02)


def test_a_greedy_lockstep_evaluation_batches_every_live_episode(tiny_model_dir, tmp_path, monkeypatch):
    """16 toy_lookup episodes, greedy, lock-step: each generate call serves every episode still running, so the
    calls number the turns of the longest episode, not the episodes; greedy repeats exactly."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym import sandbox
    from medagentgym.medcopilot import real_pipeline, rollout_func
    from medagentgym.medcopilot.real_pipeline import ID, open_arena

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    widths = []
    real = rollout_func.hf_batch_generate

    def counted(model, tokenizer, contexts, **kw):
        widths.append(len(contexts))
        return real(model, tokenizer, contexts, **kw)

    monkeypatch.setattr(rollout_func, "hf_batch_generate", counted)
    root = tmp_path / "tasks"
    from medagentgym import tasks

    tasks.make("toy_lookup", root=root).build(root, size="tiny", seed=0)
    backend = "bwrap" if shutil.which("bwrap") else "local"
    with sandbox.make_pool(backend, workers=16, allow_unisolated=backend == "local",
                           mounts=real_pipeline._mounts(root, ["toy_lookup"]),
                           preload=tasks.make("toy_lookup", root=root).sandbox_preload) as pool:
        arena = open_arena("toy_lookup", ID["toy_lookup"], root, tok, pool, train_limit=2, eval_limit=16)
        settings = {"eval_temperature": 0.0, "reps": 3, "eval_concurrency": 16}
        first = real_pipeline._score(arena, model, settings, seed=0)
        calls = len(widths)
        again = real_pipeline._score(arena, model, settings, seed=5)
    assert first[1] == 16  # greedy: one episode per instance, whatever reps says
    assert first == again  # greedy does not depend on the sampling seed
    turns = ID["toy_lookup"][1]
    assert max(widths[:calls]) >= 8 and calls <= 3 * turns, widths  # one call per turn per episode would be 16+
