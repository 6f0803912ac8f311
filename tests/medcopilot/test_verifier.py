"""The learned verifier: its text and labels, training through train.py on real toy_sql episodes, the batched
scorer, the HTTP service with the real model, Best@K scores for evaluate, and GRPO's verifier_score term.

The store is rolled out by the trainer itself (oracle = correct, constant "0" and shotgun = wrong) on toy_sql
tiny; a quarter of the task ids is held out, so the held-out AUROC measures tasks the verifier never saw.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medagentgym.env_client.trajectory import TrajectoryStore
from medagentgym.medcopilot.config import RecipeError, load_recipe
from medagentgym.medcopilot.data import load_episodes
from medagentgym.medcopilot.verifier import (
    OMITTED,
    auroc,
    encode_messages,
    episode_label,
    split_by_task,
    trajectory_messages,
)

STEPS = 20
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trained(tiny_model_dir, train_main, tmp_path_factory):
    """``(out_dir, store, summary)`` of verifier_tiny trained through train.py; the store is rolled out first."""
    base = tmp_path_factory.mktemp("verifier")
    out, store = base / "run", base / "store.jsonl"
    argv = ["recipe=verifier_tiny", f"model.name_or_path={tiny_model_dir}", f"tasks.root={base / 'tasks'}",
            "tasks.limit=16", "env.sandbox=local",
            "env.allow_unisolated=true", f"rollout.store={store}", f"output.dir={out}",
            f"trainer.max_steps={STEPS}", f"trainer.save_steps={STEPS}", "--debug"]  # a failure shows its traceback
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("HF_HUB_OFFLINE", "1")
        assert train_main(argv) == 0
    return out, store, json.loads((out / "run_summary.json").read_text())


@pytest.fixture(scope="module")
def scorer(trained):
    from medagentgym.medcopilot.verifier import VerifierScorer

    return VerifierScorer(trained[0], batch_size=4)


# ------------------------------------------------------------------------------------ text, labels, split


def test_text_drops_system_and_final_observation_and_labels_follow_the_verdict(sample_trajectory_store,
                                                                                 tiny_model_dir):
    from transformers import AutoTokenizer

    trajs = list(TrajectoryStore(sample_trajectory_store).read())
    messages = trajectory_messages(trajs[0])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert '"answer": "40"' in messages[-1]["content"] and all(m["content"] != "submitted" for m in messages)
    record = json.loads(sample_trajectory_store.read_text().splitlines()[0])
    assert trajectory_messages(record) == messages  # a JSON record reads the same
    assert trajectory_messages(load_episodes(sample_trajectory_store)[0]) == messages  # and an Episode
    assert [episode_label(t) for t in trajs] == [1, 0, 0] * 3 + [0]  # the truncated episode (no verdict) is 0
    assert [episode_label(e) for e in load_episodes(sample_trajectory_store)] == [episode_label(t) for t in trajs]
    with pytest.raises(ValueError, match="not a trajectory record"):
        trajectory_messages({"steps": []})
    with pytest.raises(TypeError, match="cannot read a int"):
        trajectory_messages(3)

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    long = messages[:1] + [{"role": "assistant", "content": f"step {i} " + "x" * 200} for i in range(30)] \
        + messages[-1:]
    full = tok.apply_chat_template(long, tokenize=False)
    ids = encode_messages(long, tok, 256)
    assert len(ids) == 256 and len(tok(full)["input_ids"]) > 256
    text = tok.decode(ids)
    assert "older than 60" in text and OMITTED.strip() in text  # the question (head) and the cut marker
    assert text.endswith(tok.apply_chat_template(long[-1:], tokenize=False).split("<|im_start|>assistant")[-1])
    short = encode_messages(messages, tok, 4096)
    assert tok.decode(short) == tok.apply_chat_template(messages, tokenize=False)  # fits: untouched


def test_split_by_task_never_leaks_a_task_and_auroc():
    from medagentgym.medcopilot.data import Episode

    eps = [Episode(f"t/{t}", "f", "c", [], success=(s == 0 and t % 5 != 0)) for t in range(20) for s in range(3)]
    train, held = split_by_task(eps, 0.25, seed=0)
    assert {e.task_id for e in train}.isdisjoint({e.task_id for e in held})
    assert len(train) + len(held) == len(eps) and len({e.task_id for e in held}) == 5
    assert {e.success for e in held} == {True, False}
    assert split_by_task(eps, 0.25, seed=0) == (train, held)  # deterministic
    assert split_by_task(eps, 0.0) == (eps, [])
    with pytest.raises(RecipeError, match="eval_fraction"):
        split_by_task(eps, 1.0)

    assert auroc([1, 0, 1, 0], [0.9, 0.1, 0.8, 0.2]) == 1.0
    assert auroc([1, 0, 1, 0], [0.1, 0.9, 0.2, 0.8]) == 0.0
    assert auroc([1, 0], [0.5, 0.5]) == 0.5  # a tie counts half
    assert auroc([1, 0, 0], [0.6, 0.6, 0.1]) == 0.75
    assert auroc([1, 1], [0.2, 0.3]) is None


# ------------------------------------------------------------------------------------ training


def test_tiny_verifier_trains_on_cpu_and_separates_heldout_tasks(trained):
    out, store, summary = trained
    episodes = load_episodes(store)
    assert {e.success for e in episodes} == {True, False}  # the mixed rollout gave both labels
    assert summary["method"] == "verifier" and summary["global_step"] == STEPS
    held = summary["heldout"]
    assert summary["heldout_tasks"] == 4 and summary["heldout_rows"] == held["eval_n"] == 12
    assert summary["train_rows"] + summary["heldout_rows"] == len(episodes)
    assert held["eval_auroc"] > 0.8 and held["eval_accuracy"] > 0.7  # chance is 0.5 and 2/3
    assert summary["pos_weight"] == pytest.approx(2.0)  # two wrong episodes per correct one
    for name in ("model.safetensors", "tokenizer.json", "trainer_state.json", "verifier_config.json",
                 "recipe.yaml", f"checkpoint-{STEPS}"):
        assert (out / name).exists(), name
    config = json.loads((out / "verifier_config.json").read_text())
    assert config["max_length"] == 1024 and config["heldout"]["eval_auroc"] == held["eval_auroc"]
    losses = [row["loss"] for row in json.loads((out / "trainer_state.json").read_text())["log_history"]
              if "loss" in row]
    assert losses[-1] < losses[0]


def test_rerun_resumes_from_the_newest_checkpoint(trained, tiny_model_dir, train_main, capsys):
    out, store, _ = trained
    argv = ["recipe=verifier_tiny", f"model.name_or_path={tiny_model_dir}", f"rollout.store={store}",
            f"output.dir={out}", f"trainer.max_steps={STEPS}", f"trainer.save_steps={STEPS}"]
    assert train_main(argv) == 0
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["resumed_from"] == str(out / f"checkpoint-{STEPS}") and summary["global_step"] == STEPS
    assert f"resuming from {out / f'checkpoint-{STEPS}'}" in capsys.readouterr().out


def test_store_with_one_outcome_is_a_one_line_error(sample_trajectory_store, tiny_model_dir, tmp_path, train_main,
                                                    capsys):
    wins = tmp_path / "wins.jsonl"
    wins.write_text("".join(line + "\n" for line in sample_trajectory_store.read_text().splitlines()
                            if '"correct":true' in line.replace(" ", "")))
    argv = ["recipe=verifier_tiny", f"model.name_or_path={tiny_model_dir}", f"rollout.store={wins}",
            f"output.dir={tmp_path / 'o'}"]
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "needs successes and failures" in err and "only successes" in err and "oracle+constant:0" in err
    with pytest.raises(RecipeError, match="unknown key 'trainer.eval_fractoin': did you mean 'eval_fraction'"):
        load_recipe("verifier_tiny", ["trainer.eval_fractoin=0.2"]).trainer_args()
    with pytest.raises(RecipeError, match="VerifierConfig rejected the trainer section: pos_weight=-1"):
        load_recipe("verifier_tiny", ["trainer.pos_weight=-1"]).trainer_args()


def test_lora_verifier_saves_its_score_head_and_loads_for_scoring(sample_trajectory_store, tiny_model_dir,
                                                                  tmp_path, train_main, quiet_training_env):
    from safetensors.torch import load_file

    from medagentgym.medcopilot.verifier import VerifierScorer

    out = tmp_path / "lora"
    argv = ["recipe=verifier_tiny", f"model.name_or_path={tiny_model_dir}", f"rollout.store={sample_trajectory_store}",
            f"output.dir={out}", "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: all-linear}",
            "trainer.max_steps=2", "trainer.eval_fraction=0.0"]
    assert train_main(argv) == 0
    assert json.loads((out / "adapter_config.json").read_text())["task_type"] == "SEQ_CLS"
    assert any("score" in key for key in load_file(out / "adapter_model.safetensors"))
    trajs = list(TrajectoryStore(sample_trajectory_store).read())
    first, again = VerifierScorer(out).score(trajs), VerifierScorer(out).score(trajs)
    assert first == again and all(0.0 <= p <= 1.0 for p in first)
    assert json.loads((out / "run_summary.json").read_text())["heldout"] == {}


# ------------------------------------------------------------------------------------ scoring


def test_batched_scores_equal_one_at_a_time_in_input_order(scorer, trained):
    trajs = list(TrajectoryStore(trained[1]).read())[:10]
    batched = scorer.score(trajs)
    single = [scorer.score([t])[0] for t in trajs]
    assert batched == pytest.approx(single, abs=1e-5)
    assert scorer.score(list(reversed(trajs))) == pytest.approx(list(reversed(batched)), abs=1e-5)
    assert len({len(scorer.encode(t)) for t in trajs}) > 1  # rows of different lengths were padded together
    texts = [scorer.tokenizer.decode(scorer.encode(t)) for t in trajs[:3]]
    assert scorer.score(texts) == pytest.approx(batched[:3], abs=1e-4)  # a rendered text scores like its episode


def test_http_service_with_the_real_model_matches_local_scores(scorer, trained, load_script, serve_app):
    from medagentgym.rewards import HTTPVerifier

    trajs = list(TrajectoryStore(trained[1]).read())[:6]
    remote = HTTPVerifier(serve_app(load_script("serve_verifier").create_app(scorer))).score(trajs)
    assert remote == pytest.approx(scorer.score(trajs), abs=1e-6)


def test_best_at_k_scores_file_is_what_evaluate_reads(scorer, trained, tmp_path, capsys, load_script):
    from medagentgym.env_client.evaluation import evaluate

    out, store, _ = trained
    held_tasks = {e.task_id for e in split_by_task(load_episodes(store), 0.25, seed=0)[1]}
    # The store holds one episode per policy and task (all sample_idx 0): renumber them as k=3 samples of a task.
    trajs, seen = [], {}
    for t in TrajectoryStore(store).read():
        if t.header.task_id in held_tasks:
            idx = seen[t.header.task_id] = seen.get(t.header.task_id, -1) + 1
            trajs.append(t.model_copy(update={"header": t.header.model_copy(update={"sample_idx": idx})}))
    samples = tmp_path / "trajectories.jsonl"
    TrajectoryStore(samples).extend(trajs)

    script = load_script("score_trajectories")
    assert script.main(["--verifier", str(out), "--trajectories", str(samples)]) == 0
    assert f"scored {len(trajs)} episodes" in capsys.readouterr().out
    scores = load_script("evaluate").read_scores(tmp_path / "scores.jsonl")
    assert set(scores) == {t.key for t in trajs}
    report = evaluate(trajs, scores=scores)
    assert report.k == 3 and report.success_rate == pytest.approx(1 / 3, abs=1e-6)
    assert report.best_at_k["1"] == report.pass_at_k["1"]  # one sample: nothing to choose
    assert report.best_at_k["3"] > report.pass_at_k["1"]  # the verifier picks the correct one more often
    assert report.best_at_k["3"] == pytest.approx(1.0)  # held-out AUROC is high here: it always does

    assert script.main(["--verifier", "http://127.0.0.1:9", "--trajectories", str(samples),
                        "--out", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "got no score" in err and not (tmp_path / "none.jsonl").exists()


def test_evaluate_with_verifier_scores_the_episodes_for_best_at_k(trained, tmp_path, capsys, load_script):
    out, _, _ = trained
    evaluate_cli = load_script("evaluate")
    common = ["--policy", "shotgun", "--families", "toy_sql", "--tasks-root", str(trained[0].parent / "tasks"),
              "--limit", "3", "-k", "2", "--sandbox", "local", "--allow-unisolated", "--no-plots", "--no-progress",
              "--out", str(tmp_path / "eval")]
    assert evaluate_cli.main([*common, "--verifier", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    scores = evaluate_cli.read_scores(tmp_path / "eval" / "scores.jsonl")
    assert len(scores) == summary["episodes"] == 6 and all(0.0 <= v <= 1.0 for v in scores.values())
    assert set(summary["best_at_k"]) == {"1", "2"}

    assert evaluate_cli.main([*common, "--verifier", str(tmp_path / "no_such_verifier")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "verifier" in err


# ------------------------------------------------------------------------------------ GRPO reward term


def test_grpo_rollout_passes_verifier_scores_to_the_reward_terms(scorer, sample_trajectory_store):
    from medagentgym.env_client.tokens import TokenEpisode
    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex
    from medagentgym.rewards import RewardSpec, correctness, verifier_score

    trajs = list(TrajectoryStore(sample_trajectory_store).read())[:4]
    episodes = [TokenEpisode(prompt_ids=[1], completion_ids=[2, 3], env_mask=[1, 1], logprobs=[0.0, 0.0],
                             trajectory=t) for t in trajs]

    class Flaky:  # a verifier whose call failed for one episode
        def score(self, items):
            return [0.9, None, 0.2, 0.4][: len(items)]

    def collate(verifier):
        rollout = EnvRolloutFunc(make_env=lambda: None, index=PromptIndex(), tokenizer=None, max_new_tokens=4,
                                 rewards={"correctness": correctness, "verifier_score": verifier_score},
                                 verifier=verifier)
        return rollout._collate(episodes)

    out = collate(Flaky())
    assert out["reward_verifier_score"] == [0.9, None, 0.2, 0.4]
    # Both terms weigh in (weight 1 by default), so the row whose verifier call failed has no total: every term of
    # it reaches TRL as None (no advantage), never a wrong-answer score.
    assert out["reward_correctness"] == [1.0, None, 0.0, 1.0]
    spec = RewardSpec.from_weights({"correctness": 1.0, "verifier_score": 0.5})
    assert spec(verdict=trajs[1].final.verdict, verifier_score=None).total is None  # missing, never 0
    assert collate(scorer)["reward_verifier_score"] == pytest.approx(scorer.score(trajs), abs=1e-6)
    assert collate(None)["reward_verifier_score"] == [None] * 4  # no verifier: the term is missing


def test_grpo_recipe_names_its_verifier(trained):
    from medagentgym.medcopilot.trainers.grpo import make_verifier
    from medagentgym.medcopilot.verifier import VerifierScorer
    from medagentgym.rewards import HTTPVerifier

    with pytest.raises(RecipeError, match="verifier_score but reward.verifier is not set"):
        make_verifier(load_recipe("grpo_tiny", ["reward.weights.verifier_score=0.5"]))
    with pytest.raises(RecipeError, match="has no verifier_score; add reward.weights.verifier_score"):
        make_verifier(load_recipe("grpo_tiny", ["reward.verifier=http://127.0.0.1:8100"]))
    assert make_verifier(load_recipe("grpo_tiny")) is None
    remote = make_verifier(load_recipe("grpo_tiny", ["reward.weights.verifier_score=0",
                                                     "reward.verifier=http://127.0.0.1:8100"]))
    assert isinstance(remote, HTTPVerifier) and remote.url == "http://127.0.0.1:8100"
    local = make_verifier(load_recipe("grpo_tiny", ["reward.weights.verifier_score=0.5",
                                                    f"reward.verifier={trained[0]}"]))
    assert isinstance(local, VerifierScorer) and str(local.device) == "cpu"
    with pytest.raises(RecipeError, match="is not a trained verifier"):
        make_verifier(load_recipe("grpo_tiny", ["reward.weights.verifier_score=0.5", "reward.verifier=/nonexistent"]))


@pytest.mark.slow
def test_grpo_trains_with_the_verifier_reward_through_train_py(trained, tiny_model_dir, tmp_path, train_main,
                                                               quiet_training_env):
    """One GRPO step whose reward includes the trained verifier's score (about 25 s on 2 cores)."""
    from medagentgym import tasks

    root = tmp_path / "tasks"
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    out = tmp_path / "grpo"
    argv = ["recipe=grpo_tiny", f"model.name_or_path={tiny_model_dir}", f"tasks.root={root}", f"output.dir={out}",
            "env.sandbox=local",
            "env.allow_unisolated=true", "tasks.limit=2", "env.max_turns=2", "rollout.max_new_tokens=16",
            "trainer.max_steps=1", "trainer.per_device_train_batch_size=4", "trainer.num_generations=2",
            "reward.weights.verifier_score=0.5", f"reward.verifier={trained[0]}"]
    assert train_main(argv) == 0
    row = json.loads((out / "trainer_state.json").read_text())["log_history"][0]
    assert 0.0 < row["rewards/verifier_score/mean"] < 1.0 and row["rewards/correctness/mean"] == 0.0
    assert row["reward"] == pytest.approx(0.5 * row["rewards/verifier_score/mean"], abs=1e-6)
