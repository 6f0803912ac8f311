"""The rollout engine: planning and seeds, determinism, resume, failures, adversaries, process backends."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from medagentgym.env_client import Env, EnvConfig
from medagentgym.env_client.policies import PolicyOutput, make_policy
from medagentgym.env_client.rollout import EnvSpec, RolloutError, episode_seed, family_preload, plan, rollout
from medagentgym.env_client.trajectory import TrajectoryStore
from medagentgym.sandbox import make_pool

BACKEND = "bwrap" if shutil.which("bwrap") else "local"
@pytest.fixture(scope="module")
def env_factory(built):
    root, _ = built
    with make_pool(BACKEND, workers=2, allow_unisolated=True) as pool:
        yield lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=4))


class EchoSeed:
    """Submits its per-turn seed: makes the seeds the engine passes visible in the trajectories."""

    def act(self, messages, *, tools=None, seed=None):
        return PolicyOutput(f'<tool_call>\n{{"name": "submit_answer", "arguments": {{"answer": "{seed}"}}}}\n'
                            "</tool_call>", n_prompt_tokens=3, n_completion_tokens=5)


def test_plan_and_seeds(built):
    _, fam = built
    insts = fam.instances("test")[:3]
    items = plan(insts, k=3, seed=9)
    assert [(i.instance.id, i.sample_idx) for i in items[:3]] == [(insts[0].id, j) for j in range(3)]
    assert len({i.seed for i in items}) == 9
    assert items[4].seed == episode_seed(9, insts[1].id, 1) != episode_seed(10, insts[1].id, 1)
    assert len(plan(insts, k=3, seed=9, skip={(insts[0].id, 1)})) == 8
    with pytest.raises(RolloutError, match="k=0"):
        plan(insts, k=0)
    with pytest.raises(RolloutError, match="appears twice"):
        plan(insts + insts[:1])


def test_deterministic_across_concurrency(built, env_factory, strip_timings):
    _, fam = built
    insts = fam.instances("test")[:4]
    a = rollout(insts, EchoSeed(), env_factory, k=2, seed=1, concurrency=1)
    b = rollout(insts, EchoSeed(), env_factory, k=2, seed=1, concurrency=2)
    dump = lambda r: sorted((strip_timings(t.model_dump(mode="json")) for t in r.trajectories), key=str)
    assert dump(a) == dump(b) and len(a.trajectories) == 8
    assert [t.key for t in b.trajectories] == [(i.id, j) for i in insts for j in range(2)]  # plan order
    for t in a.trajectories:
        assert t.steps[0].raw_text.count(str(t.header.seed)) == 1  # turn 0 is asked with the episode seed
    assert a.summary.total_tokens == 8 * 5 and a.summary.mean_turns == 1.0
    assert a.summary.success_rate <= a.summary.pass_at_k <= 1.0


def test_oracle_summary_and_resume(built, env_factory, tmp_path):
    _, fam = built
    insts = fam.instances("test")
    out = tmp_path / "r.jsonl"
    policy = make_policy("oracle", families={"toy_sql": fam})
    first = rollout(insts[:5], policy, env_factory, k=2, store=out, concurrency=2)
    assert first.summary.new == 10 and first.summary.success_rate == first.summary.pass_at_k == 1.0
    assert first.summary.steps == 20 and first.summary.episodes_per_s > 0
    cats = {f"toy_sql/{i.category}" for i in insts[:5]}
    assert set(first.summary.per_category) == cats
    with open(out, "ab") as f:  # a torn line, as a kill -9 during a write would leave
        f.write(b'{"header": {"task_id": "tor')
    second = rollout(insts[:7], policy, env_factory, k=2, store=out, concurrency=2)
    assert (second.summary.skipped, second.summary.new, second.summary.episodes) == (10, 4, 14)
    keys = [t.key for t in TrajectoryStore(out).read()]
    assert len(keys) == 14 and max(Counter(keys).values()) == 1


class FlakyOracle:
    """The oracle, except that it raises on one task."""

    def __init__(self, fam, bad_id):
        self.inner, self.bad_id = make_policy("oracle", families={"toy_sql": fam}), bad_id

    def for_episode(self, inst):
        if inst.id == self.bad_id:
            raise ConnectionError("endpoint down")
        return self.inner.for_episode(inst)


def test_failed_episodes_raise_or_skip_and_are_retried(built, env_factory, tmp_path):
    _, fam = built
    insts = fam.instances("test")[:3]
    out = tmp_path / "f.jsonl"
    with pytest.raises(RolloutError, match="endpoint down"):
        rollout(insts, FlakyOracle(fam, insts[1].id), env_factory, store=out)
    res = rollout(insts, FlakyOracle(fam, insts[1].id), env_factory, store=out, on_error="skip")
    assert res.summary.failed == 1 and insts[1].id in res.summary.errors[0]
    assert {t.key for t in TrajectoryStore(out).read()} == {(insts[0].id, 0), (insts[2].id, 0)}
    res = rollout(insts, make_policy("oracle", families={"toy_sql": fam}), env_factory, store=out)
    assert res.summary.new == 1 and res.summary.episodes == 3 and res.summary.success_rate == 1.0


def test_adversaries_score_nothing_and_constant_at_most_base_rate(built, env_factory):
    _, fam = built
    insts = fam.instances("test")
    for spec in ("shotgun", "traceback", "empty"):
        res = rollout(insts, spec, env_factory, concurrency=3)  # more envs than sandbox workers
        assert res.summary.success_rate == 0.0, spec
        assert res.summary.grader_errors == 0
    for value in ("0", "yes", "1"):
        rate = rollout(insts, f"constant:{value}", env_factory, concurrency=2).summary.success_rate
        assert rate <= 0.25, (value, rate)


def test_joblib_backend_matches_thread(built, env_factory, strip_timings):
    root, fam = built
    insts = fam.instances("test")[:2]
    spec = EnvSpec(tasks_root=str(root), backend=BACKEND, allow_unisolated=True, config={"max_turns": 4})
    via_jl = rollout(insts, "oracle", spec, k=2, seed=4, concurrency=2, backend="joblib")
    via_th = rollout(insts, make_policy("oracle", families={"toy_sql": fam}), env_factory, k=2, seed=4,
                     policy_name="oracle")
    dump = lambda r: sorted((strip_timings(t.model_dump(mode="json")) for t in r.trajectories), key=str)
    assert dump(via_jl) == dump(via_th) and via_jl.summary.backend == "joblib"


def test_ray_backend_or_its_guard(built):
    root, fam = built
    spec = EnvSpec(tasks_root=str(root), backend=BACKEND, allow_unisolated=True)
    try:
        import ray
    except ImportError:
        with pytest.raises(RolloutError, match=r"pip install ray==2\.60\.0"):
            rollout(fam.instances("test")[:1], "oracle", spec, backend="ray")
        return
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        res = rollout(fam.instances("test")[:2], "oracle", spec, concurrency=2, backend="ray")
        assert res.summary.success_rate == 1.0 and res.summary.episodes == 2
    finally:
        ray.shutdown()


def test_argument_errors(built, env_factory):
    _, fam = built
    insts = fam.instances("test")[:1]
    with pytest.raises(RolloutError, match="unknown backend 'dask'"):
        rollout(insts, "empty", env_factory, backend="dask")  # type: ignore[arg-type]
    with pytest.raises(RolloutError, match="pass an EnvSpec"):
        rollout(insts, "empty", env_factory, backend="joblib")
    with pytest.raises(RolloutError, match="concurrency=0"):
        rollout(insts, "empty", env_factory, concurrency=0)


def test_summary_counts_per_sample_and_per_task():
    from medagentgym.env_client.rollout import summarize
    from medagentgym.env_client.trajectory import (
        FinalRecord,
        StepRecord,
        Trajectory,
        TrajectoryHeader,
    )

    def traj(task, sample, correct, error=None):
        verdict = {"correct": correct, "score": float(correct), "reason": "", "error": error, "infra": bool(error)}
        return Trajectory(
            header=TrajectoryHeader(task_id=task, family="f", category=task[-1], split="test", sample_idx=sample,
                                    config_hash="x"),
            prompt=[], steps=[StepRecord(turn=1, raw_text="t", observation="o", status="submitted",
                                         duration_s=0.004, exec_s=0.001)],
            final=FinalRecord(verdict=verdict, reward=None if error else float(correct), terminated=True,
                              truncated=False, reason="submitted", turns=1, total_tokens=7, wall_s=0.01))

    trajs = [traj("f/a", 0, True), traj("f/a", 1, False), traj("f/b", 0, False), traj("f/b", 1, False, "boom")]
    s = summarize(trajs, wall_s=2.0)
    assert (s.success_rate, s.pass_at_k, s.grader_errors, s.total_tokens) == (0.25, 0.5, 1, 28)
    assert s.per_category == {"f/a": {"n": 2, "success_rate": 0.5}, "f/b": {"n": 2, "success_rate": 0.0}}
    assert (s.episodes_per_s, s.steps_per_s, s.env_overhead_p50_ms, s.exec_p50_ms) == (2.0, 2.0, 3.0, 1.0)


def test_async_backend_matches_thread_and_awaits_aact(built, env_factory, strip_timings):
    _, fam = built
    insts = fam.instances("test")[:4]
    th = rollout(insts, EchoSeed(), env_factory, k=2, seed=2, concurrency=2)
    asy = rollout(insts, EchoSeed(), env_factory, k=2, seed=2, concurrency=2, backend="async")
    dump = lambda r: [strip_timings(t.model_dump(mode="json")) for t in r.trajectories]
    assert dump(th) == dump(asy) and asy.summary.backend == "async"

    class AsyncOracle:  # only aact: the async backend must await it rather than call act
        def __init__(self):
            self.inner = make_policy("oracle", families={"toy_sql": fam})

        def for_episode(self, inst):
            replay = self.inner.for_episode(inst)

            class _A:
                async def aact(self, messages, *, tools=None, seed=None):
                    return replay.act(messages, tools=tools, seed=seed)

            return _A()

    res = rollout(insts, AsyncOracle(), env_factory, concurrency=3, backend="async")
    assert res.summary.success_rate == 1.0 and res.summary.episodes == 4
    res = rollout(insts, FlakyOracle(fam, insts[2].id), env_factory, backend="async", on_error="skip")
    assert res.summary.failed == 1 and res.summary.new == 3

    def broken():
        raise OSError("no sandbox here")

    with pytest.raises(RolloutError, match="no sandbox here"):
        rollout(insts, EchoSeed(), broken, backend="async")


def test_a_refused_resume_names_the_difference_in_words_not_manifest_hashes():
    from medagentgym.env_client.rollout import describe_difference

    fams = {f"fam{i}": {"version": 1, "manifest": f"{i:016x}"} for i in range(14)}
    old = {"families": fams, "split": "test", "env": {"max_turns": 4}}
    new = {"families": {"fam3": {"version": 2, "manifest": "x"}, "fam4": {"version": 1, "manifest": "changed"}},
           "split": "test", "env": {"max_turns": 2}}
    words = describe_difference(old, new)
    assert words[0] == "families: 14 families (fam0, fam1, fam10, fam11, ...) -> 2 families (fam3, fam4)"
    assert words[1:] == ["fam3: family version 1 -> 2", "fam4: rebuilt since (another size, seed or data)",
                         "env.max_turns: 4 -> 2"]
    assert not any("0000" in w for w in words), "no manifest digest in the message"


def test_pools_preload_what_the_families_declare(built):
    """Issue #29: a rollout over SQL-only families starts lean sandbox workers (sqlite3, not numpy and pandas: ~0.15
    instead of ~0.9 CPU-s each); a family that declares nothing keeps the sandbox's default, and a lean worker still
    runs python that imports pandas on use."""
    root, _ = built
    spec = EnvSpec(str(root), backend=BACKEND, allow_unisolated=True)
    known = spec.families()

    class Silent:
        pass

    class Numeric:
        sandbox_preload = ("numpy",)

    lookup = {"toy_sql": known("toy_sql"), "silent": Silent(), "numeric": Numeric()}.__getitem__
    assert family_preload(known, ["toy_sql"]) == ("sqlite3",)
    assert family_preload(lookup, ["toy_sql", "numeric", "toy_sql"]) == ("numpy", "sqlite3")
    assert family_preload(lookup, ["toy_sql", "silent"]) is None and family_preload(lookup, []) is None
    with spec.make_pool(1, {"toy_sql"}) as pool:
        assert pool.preload == "sqlite3"
        with pool.session() as s:
            out = s.run_python("import pandas\nprint(pandas.DataFrame({'a': [1, 2]}).shape)")
            assert out.ok and out.stdout == "(2, 1)\n", out.stderr
    with spec.make_pool(1) as pool:
        assert pool.preload == "numpy,pandas,sqlite3"


def test_the_rl_trainers_pool_preloads_what_the_recipes_families_declare(built):
    from medagentgym.medcopilot.config import load_recipe
    from medagentgym.medcopilot.trainers._common import make_env_pool

    root, _ = built
    overrides = [f"tasks.root={root}", f"env.sandbox={BACKEND}", "env.workers=1", "env.allow_unisolated=true"]
    pool = make_env_pool(load_recipe("grpo_tiny", [*overrides, "tasks.families=[toy_sql]"]))
    try:
        assert pool.preload == "sqlite3"
    finally:
        pool.close()
    assert make_env_pool(load_recipe("grpo_tiny", [*overrides, "env.url=http://127.0.0.1:9"])) is None


def test_a_tasks_root_and_a_config_family_preload_what_they_declare(built, tmp_path):
    """Issue #29: env servers, the adapters' shared pool and check_family's jail preload what the families of
    their tasks root declare (``tasks_root_preload``); a config family declares it in its family.yaml, and a value
    that is not a module name is refused in one line before it could reach a worker's command line."""
    from medagentgym import tasks
    from medagentgym.env_client.rollout import tasks_root_preload
    from medagentgym.medcopilot.config import load_recipe
    from medagentgym.medcopilot.trainers._common import make_env_pool
    from medagentgym.tasks.base import TaskError

    root, _ = built
    assert tasks_root_preload(root) == ("sqlite3",)  # toy_sql declares it in its class
    assert tasks_root_preload(tmp_path / "missing") is None
    cfg = tmp_path / "cfg"

    def declare(name: str, extra: str = "") -> None:
        (cfg / name).mkdir(parents=True, exist_ok=True)
        (cfg / name / "family.yaml").write_text(f"name: {name}\nanswer_type: integer\n{extra}", encoding="utf-8")
        (cfg / name / "tasks.jsonl").write_text('{"question": "q", "answer": 7, "split": "train"}\n')

    declare("lean", "sandbox_preload: [sqlite3]\n")
    assert tasks.make("lean", root=cfg).sandbox_preload == ("sqlite3",)
    assert tasks_root_preload(cfg) == ("sqlite3",)
    overrides = [f"tasks.root={cfg}", f"env.sandbox={BACKEND}", "env.workers=1", "env.allow_unisolated=true"]
    pool = make_env_pool(load_recipe("grpo_tiny", [*overrides, "tasks.families=[lean]"]))
    try:
        assert pool.preload == "sqlite3"  # the trainers read a config family's declaration too
    finally:
        pool.close()
    declare("plain")  # declares nothing: the whole root gets the sandbox's default
    assert tasks.make("plain", root=cfg).sandbox_preload is None and tasks_root_preload(cfg) is None
    declare("bad", "sandbox_preload: ['numpy,os']\n")
    with pytest.raises(TaskError, match=r"family.yaml: sandbox_preload: .*'numpy,os' is not a module name"):
        tasks.make("bad", root=cfg)
