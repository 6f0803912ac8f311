"""The rollout engine: many episodes of one policy, concurrently, deterministic, resumable.

Work is a list of ``(instance, sample_idx)`` pairs: ``k`` samples per task (groups for GRPO and Pass@K), each
with its own seed, :func:`episode_seed` of ``(base seed, task id, sample_idx)``, so a rerun, a resumed run and
a run with another concurrency see the same seeds. Turn ``t`` of an episode asks the policy with
``episode seed + t``.

Backends:

- ``thread`` (default): a thread pool; each worker thread owns one ``Env`` (reused across tasks), all sharing
  one sandbox pool of ``concurrency`` workers. Right for API policies and the sandbox (both release the GIL).
- ``async``: one asyncio event loop; ``concurrency`` worker coroutines, each owning one ``Env`` whose
  blocking calls run on a thread pool. Policies with ``aact`` (e.g. :class:`~medagentgym.env_client.policies.OpenAIPolicy`)
  are awaited directly, so hundreds of API requests can be in flight without a thread each.
- ``joblib``: loky worker processes; each process builds its own sandbox pool, ``Env`` and policy once and
  reuses them. Needs a picklable :class:`EnvSpec` and a policy spec string (or a picklable policy).
- ``ray``: one Ray actor per slot, each owning an ``Env`` (``pip install ray==2.60.0``; imported lazily). It joins
  the Ray cluster that exists (``RAY_ADDRESS``, or a head started by ``ray start --head``: ``ray.init(address=
  "auto")``), so sandboxes run on the cluster's CPU nodes; without one it starts a private local Ray.

Resumable: finished episodes are appended to a :class:`~medagentgym.env_client.trajectory.TrajectoryStore` by the parent
process only (one writer, one ``write`` per line), so a rerun with the same store skips every finished
``(task_id, sample_idx)`` and a kill -9 at any moment loses at most the episodes in flight, never a stored one,
and never duplicates one. A torn final line left by a kill is cut before resuming.

Example:
    >>> spec = EnvSpec(tasks_root="artifacts/tasks", backend="bwrap")
    >>> summary = rollout(instances, "oracle", spec, k=4, concurrency=8, store="runs/oracle.jsonl").summary
    >>> summary.success_rate, summary.per_category
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from medagentgym.env_client.errors import EnvClientError
from medagentgym.env_client.policies import Policy, PolicyError, bind, make_policy
from medagentgym.env_client.trajectory import Trajectory, TrajectoryStore
from medagentgym.rewards.oracle import infra_failure

__all__ = ["EnvSpec", "RolloutError", "RolloutResult", "RolloutSummary", "WorkItem", "describe_difference",
           "describe_run", "episode_seed", "family_names", "join_ray_cluster", "plan", "rollout", "run_episode", "run_key", "settings_path",
           "summarize"]

Backend = Literal["thread", "async", "joblib", "ray"]
BACKENDS = ("thread", "async", "joblib", "ray")


#: Episodes in a row whose policy request timed out that stop a run with ``on_error="skip"`` (a policy that counts
#: its own requests' timeouts, ``OpenAIPolicy``, declares a hang sooner: ``PolicyError.hung`` stops the run at once).
MAX_TIMEOUTS_IN_A_ROW = 2


class RolloutError(EnvClientError):
    """Bad rollout arguments, a missing backend, or an episode that failed with ``on_error="raise"``."""


def episode_seed(base_seed: int, task_id: str, sample_idx: int) -> int:
    """The seed of one sample: a 31-bit hash of ``(base_seed, task_id, sample_idx)``.

    Example:
        >>> episode_seed(0, "toy_sql/test/0000", 0) == episode_seed(0, "toy_sql/test/0000", 0)
        True
    """
    digest = hashlib.sha256(f"{base_seed}\x1f{task_id}\x1f{sample_idx}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class WorkItem:
    """One episode to run: the instance, its sample index within the task's group, and its seed."""

    instance: Any
    sample_idx: int
    seed: int

    @property
    def key(self) -> tuple[str, int]:
        """``(task id, sample index)``: what a trajectory store keys finished episodes by."""
        return (self.instance.id, self.sample_idx)


def plan(instances: Iterable[Any], *, k: int = 1, seed: int = 0, skip: set[tuple[str, int]] = frozenset()
         ) -> list[WorkItem]:
    """All ``(instance, sample_idx)`` pairs not in ``skip``, task-major (a task's k samples are adjacent).

    Raises:
        RolloutError: ``k < 1`` or duplicate instance ids.
    """
    if k < 1:
        raise RolloutError(f"k={k} must be >= 1 (samples per task)")
    instances = list(instances)
    ids = [inst.id for inst in instances]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise RolloutError(f"instance id {dup!r} appears twice; pass each task once and use k for repeats")
    return [WorkItem(inst, j, episode_seed(seed, inst.id, j))
            for inst in instances for j in range(k) if (inst.id, j) not in skip]


@dataclass(frozen=True)
class EnvSpec:
    """A picklable recipe for episodes: where the tasks are and which sandbox runs them.

    Args:
        tasks_root: The tasks root the families were built under.
        backend: Sandbox backend (``bwrap``, ``docker``, ``local``).
        allow_unisolated: Required for ``backend="local"``.
        config: ``EnvConfig`` fields (None = defaults).
        sandbox_workers: Sandbox workers per process; None = the rollout's concurrency (thread backend) or 1.
    """

    tasks_root: str
    backend: str = "bwrap"
    allow_unisolated: bool = False
    config: dict[str, Any] | None = None
    sandbox_workers: int | None = None

    def __post_init__(self) -> None:
        # Absolute before the spec travels to worker processes: Ray actors do not start in the driver's working
        # directory, so a relative tasks root would point elsewhere there.
        object.__setattr__(self, "tasks_root", os.path.abspath(self.tasks_root))

    def make_pool(self, workers: int, families: Iterable[str] = ()) -> Any:
        """Start a sandbox pool with ``sandbox_workers`` (or ``workers``) workers, preloading what ``families``
        (the names of the families its episodes come from) declare (:func:`family_preload`)."""
        from medagentgym.sandbox import make_pool

        preload = family_preload(self.families(), families)
        return make_pool(self.backend, workers=self.sandbox_workers or workers,
                         allow_unisolated=self.allow_unisolated, preload=preload)

    def make_env(self, pool: Any) -> Any:
        """An ``Env`` over ``pool``."""
        from medagentgym.env_client.episode import Env, EnvConfig

        return Env(pool, tasks_root=self.tasks_root, config=EnvConfig(**(self.config or {})))

    def families(self) -> Callable[[str], Any]:
        """``name -> family`` (cached), for the oracle policy."""
        from medagentgym import tasks

        cache: dict[str, Any] = {}

        def family(name: str) -> Any:
            if name not in cache:  # a family's constructor may parse its templates: once per process
                cache[name] = tasks.make(name, root=self.tasks_root)
            return cache[name]

        return family


def family_preload(family: Callable[[str], Any], names: Iterable[str]) -> tuple[str, ...] | None:
    """What a warm sandbox worker should import before episodes of the families ``names``: the union of their
    ``sandbox_preload`` attributes (a family that runs SQL alone declares ``("sqlite3",)``: its workers then start
    in ~0.15 CPU-s instead of ~0.9 with numpy and pandas), in sorted order. None, meaning the pool's default
    (numpy, pandas, sqlite3), when ``names`` is empty or any of them declares nothing."""
    mods: set[str] = set()
    names = sorted(set(names))
    for name in names:
        declared = getattr(family(name), "sandbox_preload", None)
        if declared is None:
            return None
        mods.update(declared)
    return tuple(sorted(mods)) if names else None


def tasks_root_preload(tasks_root: str | os.PathLike) -> tuple[str, ...] | None:
    """:func:`family_preload` over every family built (``manifest.json``) or declared (``family.yaml``) under
    ``tasks_root``: what a pool serving that root (an env server, an adapter's shared pool) preloads. None (the
    sandbox's default) when any family there declares nothing, none is there yet, or one cannot be loaded; a
    family built later runs on these workers too, importing what they lack on first use."""
    from medagentgym import tasks
    from medagentgym.tasks.base import TaskError

    root = Path(tasks_root)
    try:
        names = [p.name for p in root.iterdir() if (p / "manifest.json").is_file() or (p / "family.yaml").is_file()]
        return family_preload(lambda name: tasks.make(name, root=root), names)
    except (OSError, TaskError):
        return None


def run_episode(env: Any, policy: Policy, item: WorkItem, *, policy_name: str | None = None) -> Trajectory:
    """Play one episode of ``item`` with ``policy`` on ``env`` (any object with the ``Env`` interface).

    An episode whose env server is lost mid-way (``http_client.ServerLost``: the server died or forgot it) is
    played again from its reset, with the same seed, on another server (``EnvServers`` picks a healthy one).

    Returns:
        The finished trajectory (header carries ``sample_idx`` and ``seed``). When the policy's endpoint refuses
        the chat as longer than the model's context (``PolicyError.context_overflow``), the episode ends there as
        truncated (``reason: context_length``) with its turns and usage so far: the model's limit, not an
        infrastructure failure, so it is stored and a rerun does not retry it.
    """
    from medagentgym.env_client.http_client import retry_lost

    return retry_lost(lambda: _play(env, policy, item, policy_name),
                      what=f"episode {item.instance.id}#{item.sample_idx}")


def _play(env: Any, policy: Policy, item: WorkItem, policy_name: str | None) -> Trajectory:
    p = bind(policy, item.instance)
    obs, _info = env.reset(item.instance, seed=item.seed,
                           options={"policy": policy_name, "sample_idx": item.sample_idx})
    messages, tools = list(obs.messages), obs.tools
    turn = 0
    overflow = False
    try:
        while True:
            try:
                out = p.act(messages, tools=tools, seed=(item.seed + turn) & 0x7FFFFFFF)
            except PolicyError as exc:
                if not exc.context_overflow:
                    raise
                overflow = True
                break
            result = env.step(out.text, n_tokens=out.n_completion_tokens, n_prompt_tokens=out.n_prompt_tokens)
            if result.terminated or result.truncated:
                break
            messages.append({"role": "assistant", "content": out.text})
            messages.extend(result.observation.messages)
            turn += 1
    finally:
        # Return the sandbox session now, not at the next reset: an env idle between episodes must not hold a
        # pool worker that another env is waiting for. A failed episode is not stored and reruns later.
        env.close()
    return _ended(env.trajectory, overflow)  # still readable after close


def _ended(traj: Trajectory, overflow: bool) -> Trajectory:
    """The trajectory, its end marked truncated by the model's context when the endpoint refused a turn."""
    if overflow and traj.final is not None and traj.final.reason == "closed":
        traj.final = traj.final.model_copy(update={"truncated": True, "reason": "context_length"})
    return traj


# ------------------------------------------------------------------------------------------ summary


@dataclass
class RolloutSummary:
    """Aggregates over the episodes of a run (stored earlier ones included, timings from this run only)."""

    episodes: int = 0
    new: int = 0
    skipped: int = 0
    failed: int = 0
    success_rate: float = 0.0
    pass_at_k: float = 0.0
    mean_reward: float = 0.0
    grader_errors: int = 0
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)
    mean_turns: float = 0.0
    total_tokens: int = 0
    steps: int = 0
    wall_s: float = 0.0
    episodes_per_s: float = 0.0
    steps_per_s: float = 0.0
    env_overhead_p50_ms: float = 0.0
    exec_p50_ms: float = 0.0
    backend: str = "thread"
    errors: list[str] = field(default_factory=list)
    #: The failed episodes (not stored; a rerun retries them): task_id, family, category, sample_idx, error.
    failures: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Every field, as plain JSON-ready data."""
        return asdict(self)


def _success(traj: Trajectory) -> bool:
    return bool(traj.final and traj.final.verdict and traj.final.verdict.get("correct"))


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 4) if values else 0.0


def summarize(trajs: list[Trajectory], *, new: list[Trajectory] | None = None, wall_s: float = 0.0,
              backend: str = "thread") -> RolloutSummary:
    """Success rate (per sample, per task as Pass@K, per ``family/category``), turns, tokens, throughput.

    Args:
        trajs: All trajectories of the run (stored and new).
        new: Those produced now; throughput and step timings are computed over them only.
        wall_s: Wall time of producing ``new``.
        backend: Recorded in the summary.
    """
    new = trajs if new is None else new
    s = RolloutSummary(episodes=len(trajs), new=len(new), skipped=len(trajs) - len(new), backend=backend)
    if trajs:
        s.success_rate = sum(map(_success, trajs)) / len(trajs)
        by_task: dict[str, bool] = {}
        for t in trajs:  # Pass@K with K = the samples present per task: any of them succeeded
            by_task[t.header.task_id] = by_task.get(t.header.task_id, False) or _success(t)
        s.pass_at_k = sum(by_task.values()) / len(by_task)
        s.mean_reward = sum((t.final.reward or 0.0) for t in trajs if t.final) / len(trajs)
        s.grader_errors = sum(1 for t in trajs if t.final and infra_failure(t.final.verdict))
        s.mean_turns = sum(len(t.steps) for t in trajs) / len(trajs)
        s.total_tokens = sum(t.final.total_tokens for t in trajs if t.final)
        groups: dict[str, list[bool]] = {}
        for t in trajs:
            groups.setdefault(f"{t.header.family}/{t.header.category}", []).append(_success(t))
        s.per_category = {c: {"n": len(v), "success_rate": sum(v) / len(v)} for c, v in sorted(groups.items())}
    steps = [st for t in new for st in t.steps]
    s.steps, s.wall_s = len(steps), round(wall_s, 4)
    if wall_s > 0:
        s.episodes_per_s, s.steps_per_s = round(len(new) / wall_s, 3), round(len(steps) / wall_s, 3)
    s.env_overhead_p50_ms = _median_ms([max(st.duration_s - st.exec_s, 0.0) for st in steps])
    s.exec_p50_ms = _median_ms([st.exec_s for st in steps])
    return s


@dataclass
class RolloutResult:
    """What :func:`rollout` returns: the summary and every trajectory of the requested work, in plan order
    (task by task as given, samples by ``sample_idx``), so a task's group of k samples is contiguous."""

    summary: RolloutSummary
    trajectories: list[Trajectory]


# ------------------------------------------------------------------------------------------ backends


def _thread_results(items: list[WorkItem], policy: Policy, env_factory: Callable[[], Any], concurrency: int,
                    policy_name: str | None) -> Iterator[tuple[WorkItem, Trajectory | BaseException]]:
    local, envs, lock = threading.local(), [], threading.Lock()

    def work(item: WorkItem) -> Trajectory:
        if not hasattr(local, "env"):
            local.env = env_factory()
            with lock:
                envs.append(local.env)
        return run_episode(local.env, policy, item, policy_name=policy_name)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rollout") as ex:
        pending = {ex.submit(work, item): item for item in items}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    item = pending.pop(fut)
                    exc = fut.exception()
                    yield item, (exc if exc is not None else fut.result())
        finally:
            for fut in pending:
                fut.cancel()
            ex.shutdown(wait=True)
            for env in envs:
                env.close()


async def _arun_episode(env: Any, policy: Policy, item: WorkItem, policy_name: str | None,
                        call: Callable[..., Any]) -> Trajectory:
    """:func:`run_episode` on an event loop: env calls go through ``call`` (a thread pool), ``aact`` is awaited; an
    episode whose server was lost is played again (as in :func:`run_episode`)."""
    from medagentgym.env_client.http_client import EPISODE_ATTEMPTS, ServerLost

    for attempt in range(1, EPISODE_ATTEMPTS + 1):
        try:
            return await _aplay(env, policy, item, policy_name, call)
        except ServerLost:
            if attempt == EPISODE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


async def _aplay(env: Any, policy: Policy, item: WorkItem, policy_name: str | None,
                 call: Callable[..., Any]) -> Trajectory:
    p = bind(policy, item.instance)
    obs, _info = await call(env.reset, item.instance, seed=item.seed,
                            options={"policy": policy_name, "sample_idx": item.sample_idx})
    messages, tools = list(obs.messages), obs.tools
    aact = getattr(p, "aact", None)
    turn = 0
    overflow = False
    try:
        while True:
            seed = (item.seed + turn) & 0x7FFFFFFF
            try:
                out = await (aact(messages, tools=tools, seed=seed) if aact else call(p.act, messages, tools=tools,
                                                                                      seed=seed))
            except PolicyError as exc:
                if not exc.context_overflow:
                    raise
                overflow = True
                break
            result = await call(env.step, out.text, n_tokens=out.n_completion_tokens,
                                n_prompt_tokens=out.n_prompt_tokens)
            if result.terminated or result.truncated:
                break
            messages.append({"role": "assistant", "content": out.text})
            messages.extend(result.observation.messages)
            turn += 1
    finally:
        await call(env.close)  # as in run_episode: free the sandbox session between episodes
    return _ended(env.trajectory, overflow)


def _async_results(items: list[WorkItem], policy: Policy, env_factory: Callable[[], Any], concurrency: int,
                   policy_name: str | None) -> Iterator[tuple[WorkItem, Trajectory | BaseException]]:
    """Run the episodes on an event loop in a helper thread; yield them as they finish."""
    import asyncio
    import functools
    import queue

    done: queue.Queue = queue.Queue()
    stop = threading.Event()  # set when the consumer stops early: no new episodes are started

    async def main() -> None:
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rollout-async")
        todo, envs = list(reversed(items)), []

        def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

        async def worker() -> None:
            env = await call(env_factory)
            envs.append(env)
            while todo and not stop.is_set():
                item = todo.pop()
                try:
                    done.put((item, await _arun_episode(env, policy, item, policy_name, call)))
                except Exception as exc:  # noqa: BLE001 - handed to the consumer, which applies on_error
                    done.put((item, exc))

        try:
            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))
        except Exception as exc:  # noqa: BLE001 - e.g. the env factory failed: re-raised in the consumer
            done.put(exc)
        finally:
            for env in envs:
                await call(env.close)
            executor.shutdown(wait=True)
            done.put(None)

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="rollout-loop", daemon=True)
    thread.start()
    try:
        while (got := done.get()) is not None:
            if isinstance(got, BaseException):
                raise RolloutError(f"the async backend failed: {type(got).__name__}: {got}") from got
            yield got
    finally:
        stop.set()
        thread.join()


# Per-process cache of (pool, env, policy) in joblib workers; the sandbox pool lives as long as the worker
# process (its jailed workers die with it).
_WORKER: dict[Any, tuple[Any, Any, Policy]] = {}


def _worker_state(spec: EnvSpec, policy: Policy | str) -> tuple[Any, Any, Policy]:
    # Content keys: a policy object arrives freshly unpickled for every task, so its id() would not repeat.
    pol_key = policy if isinstance(policy, str) else hashlib.sha256(pickle.dumps(policy)).hexdigest()
    key = (json.dumps(asdict(spec), sort_keys=True), pol_key)
    if key not in _WORKER:
        pool = spec.make_pool(1)
        pol = make_policy(policy, families=spec.families()) if isinstance(policy, str) else policy
        _WORKER[key] = (pool, spec.make_env(pool), pol)
    return _WORKER[key]


def _process_episode(spec: EnvSpec, policy: Policy | str, item: WorkItem, policy_name: str | None
                     ) -> tuple[WorkItem, str | None, str | None]:
    """Run one episode in a worker process; returns (item, trajectory JSON, error text)."""
    _pool, env, pol = _worker_state(spec, policy)
    try:
        return item, run_episode(env, pol, item, policy_name=policy_name).model_dump_json(), None
    except Exception as exc:  # noqa: BLE001 - shipped back to the parent, which applies on_error
        return item, None, f"{type(exc).__name__}: {exc}"


def _joblib_results(items: list[WorkItem], policy: Policy | str, spec: EnvSpec, concurrency: int,
                    policy_name: str | None) -> Iterator[tuple[WorkItem, Trajectory | BaseException]]:
    from joblib import Parallel, delayed

    parallel = Parallel(n_jobs=concurrency, backend="loky", return_as="generator_unordered")
    for item, js, err in parallel(delayed(_process_episode)(spec, policy, it, policy_name) for it in items):
        yield item, (Trajectory.model_validate_json(js) if js is not None else PolicyError(err))


def _ray_results(items: list[WorkItem], policy: Policy | str, spec: EnvSpec, concurrency: int,
                 policy_name: str | None) -> Iterator[tuple[WorkItem, Trajectory | BaseException]]:
    try:
        import ray
        from ray.util import ActorPool
    except ImportError as exc:
        raise RolloutError("backend 'ray' needs Ray: pip install ray==2.60.0 (or use --backend thread|joblib)"
                           ) from exc
    if not ray.is_initialized():
        join_ray_cluster(ray, num_cpus=concurrency)
    actor_cls = ray.remote(num_cpus=1)(_RayWorker)
    actors = ActorPool([actor_cls.remote(spec, policy, policy_name) for _ in range(concurrency)])
    for item, js, err in actors.map_unordered(lambda a, it: a.run.remote(it), items):
        yield item, (Trajectory.model_validate_json(js) if js is not None else PolicyError(err))


def join_ray_cluster(ray: Any, *, num_cpus: int) -> str:
    """Join the Ray cluster that exists (``RAY_ADDRESS``, or a head started with ``ray start --head`` on this
    machine), else start a private local one with ``num_cpus`` CPUs.

    Joining never passes resources (a running cluster has its own); the actors then run wherever the cluster
    has free CPUs, e.g. on CPU nodes while the trainer holds the GPU nodes. Each node needs this package
    installed (the actors import ``env_client`` and ``sandbox``) and the tasks root at the same path.

    Returns:
        ``"joined <address>"`` or ``"local"``.
    """
    address = os.environ.get("RAY_ADDRESS", "").strip() or "auto"
    try:
        context = ray.init(address=address, log_to_driver=False)
    except ConnectionError:
        if os.environ.get("RAY_ADDRESS", "").strip():
            raise RolloutError(f"RAY_ADDRESS={address} names no running Ray cluster; start one with "
                               f"`ray start --head` or unset RAY_ADDRESS for a local one") from None
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        return "local"
    return f"joined {getattr(context, 'address_info', {}).get('gcs_address', address)}"


class _RayWorker:
    """A Ray actor body: owns one sandbox pool, one Env and one policy."""

    def __init__(self, spec: EnvSpec, policy: Policy | str, policy_name: str | None) -> None:
        self.spec, self.policy, self.policy_name = spec, policy, policy_name

    def run(self, item: WorkItem) -> tuple[WorkItem, str | None, str | None]:
        return _process_episode(self.spec, self.policy, item, self.policy_name)


# ------------------------------------------------------------------------------------------ driver


def _repair_tail(path: Path) -> None:
    """Cut a torn (newline-less) final line a killed run may have left, so appends start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            os.fsync(f.fileno())


def _stored(store: TrajectoryStore, instances: list[Any], k: int) -> list[Trajectory]:
    """The finished episodes of the requested keys already in ``store`` (after cutting a torn tail)."""
    _repair_tail(store.path)
    wanted = {(inst.id, j) for inst in instances for j in range(k)}
    seen: dict[tuple[str, int], Trajectory] = {}
    for t in store.read():  # the first record of a key wins, should another writer have duplicated it
        if t.key in wanted:
            seen.setdefault(t.key, t)
    return list(seen.values())


def describe_run(policy_spec: str, policy: Any, policy_kwargs: dict[str, Any], *, config: dict[str, Any] | None,
                 fmt: str, split: str, tasks_root: str | Path, families: Iterable[str]) -> dict[str, Any]:
    """The ``run_info`` of a CLI run: policy (spec, sampling, weights), episode rules, format, split, and each
    family's version and data (``manifest.json`` digest): everything besides the task and seed that changes an
    episode. See :func:`rollout`."""
    from medagentgym import tasks
    from medagentgym.env_client.episode import EnvConfig
    from medagentgym.env_client.policies import describe_policy

    facts = {}
    for name in sorted(set(families)):
        manifest = Path(tasks_root) / name / "manifest.json"
        digest = hashlib.sha256(manifest.read_bytes()).hexdigest()[:16] if manifest.exists() else None
        facts[name] = {"version": getattr(tasks.make(name, root=tasks_root), "version", None), "manifest": digest}
        if digest is not None and "planted" in json.loads(manifest.read_text(encoding="utf-8")):
            facts[name]["planted"] = True  # a schema/coverage smoke build (ehr_synth.plant): reports must say so
    return {"policy": describe_policy(policy_spec, None if isinstance(policy, str) else policy, **policy_kwargs),
            "env": EnvConfig(**(config or {})).model_dump(), "format": fmt, "split": split, "families": facts}


def run_key(run_info: dict[str, Any]) -> str:
    """The fingerprint of a run's settings (sha256 prefix of its canonical JSON)."""
    return hashlib.sha256(json.dumps(run_info, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    """``key: old -> new`` for every leaf that differs between two nested dicts."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            out += _diff(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [f"{prefix.rstrip('.')}: {json.dumps(old, default=str)} -> {json.dumps(new, default=str)}"]


def family_names(names: Iterable[str]) -> str:
    """``toy_sql`` / ``3 families (a, b, c)`` / ``14 families (a, b, c, ...)``: a family list in words."""
    names = sorted(names)
    if len(names) == 1:
        return names[0]
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return f"{len(names)} families ({shown})" if names else "no family"


def describe_difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two runs' settings, in words: the families asked for, each family's version and build
    (not its manifest digest), then every other setting as ``key: old -> new``.

    Example:
        >>> describe_difference({"families": {"a": {"version": 1}}}, {"families": {"b": {"version": 1}}})
        ['families: a -> b']
    """
    old_f, new_f = old.get("families") or {}, new.get("families") or {}
    words = []
    if set(old_f) != set(new_f):
        words.append(f"families: {family_names(old_f)} -> {family_names(new_f)}")
    for name in sorted(set(old_f) & set(new_f)):
        a, b = old_f[name] or {}, new_f[name] or {}
        if a.get("version") != b.get("version"):
            words.append(f"{name}: family version {a.get('version')} -> {b.get('version')}")
        elif a.get("manifest") != b.get("manifest"):
            words.append(f"{name}: rebuilt since (another size, seed or data)")
    rest = _diff({k: v for k, v in old.items() if k != "families"}, {k: v for k, v in new.items() if k != "families"})
    return words + rest


def settings_path(store: str | Path) -> Path:
    """Where a store's run settings are recorded: ``<store>.run.json`` beside it (see :func:`rollout`)."""
    store = Path(store)
    return store.with_name(store.name + ".run.json")


def _check_run(store: TrajectoryStore, run_info: dict[str, Any], start_over: str | None = None) -> str:
    """Refuse to resume a store written under other settings; record the settings of a new store. ``start_over``
    ends the refusal (what to do besides another ``--out``; default: delete the store).

    Returns:
        The run key to stamp on new episodes.

    Raises:
        RolloutError: The store holds episodes of other settings (the message names what differs).
    """
    key = run_key(run_info)
    side = settings_path(store.path)
    keys = {t.header.run_key for t in store.read()}
    if keys:
        try:
            old = json.loads(side.read_text())
        except (OSError, ValueError):
            old = None
        if keys != {key} or old is None:
            what = ("; ".join(describe_difference(old, run_info)[:6]) if old is not None
                    else "its settings were not recorded")
            raise RolloutError(f"{store.path} holds episodes of another run ({what}); pass another --out, or "
                               f"{start_over or f'delete {store.path} to start over'}")
    if not side.exists() or not keys:
        tmp = side.with_name(f".{side.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(run_info, indent=2, sort_keys=True, default=str) + "\n")
        os.replace(tmp, side)
    return key


def rollout(instances: Iterable[Any], policy: Policy | str, env: EnvSpec | Callable[[], Any], *, k: int = 1,
            seed: int = 0, concurrency: int = 1, backend: Backend = "thread",
            store: TrajectoryStore | str | Path | None = None, policy_name: str | None = None,
            on_error: Literal["raise", "skip"] = "raise", progress: bool = False,
            run_info: dict[str, Any] | None = None, max_consecutive_failures: int | None = None,
            start_over: str | None = None) -> RolloutResult:
    """Run ``k`` episodes per instance with ``policy``.

    Args:
        instances: Task instances (unique ids).
        policy: A policy object, or a spec for :func:`~medagentgym.env_client.policies.make_policy` (``"oracle"`` gets
            the families from ``env``).
        env: An :class:`EnvSpec`, or (thread and async backends) a zero-argument factory of env objects
            (e.g. ``lambda: HTTPEnv(url)``).
        k: Samples per task (sample_idx 0..k-1).
        seed: Base seed; each sample's seed is ``episode_seed(seed, task_id, sample_idx)``.
        concurrency: Episodes in flight (threads, coroutines, processes or actors).
        backend: ``thread``, ``async``, ``joblib`` or ``ray``.
        store: Where finished episodes are appended; finished keys found there are skipped (resume).
        policy_name: Recorded in each trajectory header (defaults to the spec string).
        on_error: ``raise`` stops at the first failed episode; ``skip`` counts it in ``summary.failed``
            and goes on (it is not stored, so a rerun retries it).
        progress: Show a tqdm bar on stderr.
        run_info: Everything besides the task that changes an episode (policy spec, weights, sampling, caps,
            format, family versions; the base ``seed`` is added). With a ``store``, it is recorded beside it
            (``<store>.run.json``) and stamped on each episode (``header.run_key``); resuming a store written
            under other settings is refused, so stale episodes are never reused.
        max_consecutive_failures: With ``on_error="skip"``: stop the run (``RolloutError``, one line) once this
            many episodes in a row failed to run (an endpoint that went away): the finished ones are stored, a
            rerun resumes. None: never stop. Whatever it is, a policy error marked ``hung`` (an endpoint whose
            requests timed out in a row, see ``OpenAIPolicy``) stops the run at once, and
            :data:`MAX_TIMEOUTS_IN_A_ROW` episodes in a row whose policy request timed out stop it the same way.
        start_over: How the refusal to resume a ``store`` of other settings ends, after "pass another --out, or"
            (a CLI's ``"--overwrite to replace it"``); default ``"delete <store> to start over"``.

    Returns:
        :class:`RolloutResult` with the summary and the trajectories of all requested keys (stored and new).

    Raises:
        RolloutError: Bad arguments, a missing backend, or a failed episode with ``on_error="raise"``.
    """
    if backend not in BACKENDS:
        raise RolloutError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if concurrency < 1:
        raise RolloutError(f"concurrency={concurrency} must be >= 1")
    if backend in ("joblib", "ray") and not isinstance(env, EnvSpec):
        raise RolloutError(f"backend {backend!r} runs episodes in other processes: pass an EnvSpec, not a factory")
    if isinstance(store, (str, Path)):
        store = TrajectoryStore(store)
    instances = list(instances)
    key = None
    if store is not None and run_info is not None:
        key = _check_run(store, {**run_info, "seed": seed}, start_over)
    previous = _stored(store, instances, k) if store is not None else []
    items = plan(instances, k=k, seed=seed, skip={t.key for t in previous})
    name = policy_name or (policy if isinstance(policy, str) else type(policy).__name__)
    new: list[Trajectory] = []
    failures: list[tuple[WorkItem, str]] = []
    in_a_row = timeouts = 0
    t0 = time.perf_counter()
    if items:
        results, cleanup = _results(items, policy, env, concurrency, backend, name)
        t0 = time.perf_counter()  # throughput excludes starting the in-process backends' sandbox pool
        from tqdm.auto import tqdm

        bar = tqdm(total=len(items), disable=not progress, desc="episodes", unit="ep", dynamic_ncols=True)
        try:
            for item, out in results:
                bar.update(1)
                if isinstance(out, BaseException):
                    msg = f"{item.instance.id}#{item.sample_idx}: {type(out).__name__}: {out}"
                    if on_error == "raise":
                        raise RolloutError(f"episode {msg}; rerun to resume, or pass on_error='skip'") from out
                    failures.append((item, msg))
                    in_a_row += 1
                    timeouts = timeouts + 1 if getattr(out, "timed_out", False) else 0
                    if getattr(out, "hung", False):  # the policy counted its requests' timeouts across episodes
                        raise RolloutError(f"stopped: {' '.join(str(out).split())[:500]}; {len(new)} new "
                                           f"episode(s) kept")
                    if timeouts >= MAX_TIMEOUTS_IN_A_ROW:  # a hung endpoint: each costs its timeouts and retries
                        raise RolloutError(f"stopped: the policy's endpoint did not answer {timeouts} episodes in a "
                                           f"row (request timeouts): {' '.join(str(out).split())[:300]}; "
                                           f"{len(new)} new episode(s) kept; rerun the same command to resume")
                    if max_consecutive_failures is not None and in_a_row >= max_consecutive_failures:
                        kept = f"{len(new)} new episode(s) stored in {store.path}" if store is not None else \
                            f"{len(new)} episode(s) finished"
                        raise RolloutError(f"stopped: {in_a_row} episodes in a row failed to run, the last with "
                                           f"{type(out).__name__}: {' '.join(str(out).split())[:300]}; {kept}; "
                                           f"rerun the same command to resume")
                    continue
                in_a_row = timeouts = 0
                if key is not None:
                    out.header.run_key = key
                if store is not None:
                    store.append(out)
                new.append(out)
        finally:
            bar.close()
            results.close()
            cleanup()
    summary = summarize(previous + new, new=new, wall_s=time.perf_counter() - t0, backend=backend)
    summary.failed, summary.errors = len(failures), [msg for _, msg in failures]
    summary.failures = [{"task_id": item.instance.id, "family": item.instance.family,
                         "category": item.instance.category, "sample_idx": item.sample_idx, "error": msg}
                        for item, msg in failures]
    order = {inst.id: i for i, inst in enumerate(instances)}
    trajs = sorted(previous + new, key=lambda t: (order[t.header.task_id], t.header.sample_idx))
    return RolloutResult(summary, trajs)


def _results(items: list[WorkItem], policy: Policy | str, env: EnvSpec | Callable[[], Any], concurrency: int,
             backend: str, name: str) -> tuple[Iterator[tuple[WorkItem, Any]], Callable[[], None]]:
    if backend in ("thread", "async"):
        pool = None
        if isinstance(env, EnvSpec):
            pol = make_policy(policy, families=env.families()) if isinstance(policy, str) else policy
            pool = env.make_pool(concurrency, {item.instance.family for item in items})
            factory: Callable[[], Any] = lambda: env.make_env(pool)
        else:
            factory = env
            pol = make_policy(policy) if isinstance(policy, str) else policy
        run = _thread_results if backend == "thread" else _async_results
        return run(items, pol, factory, concurrency, name), (pool.close if pool else lambda: None)
    if backend == "joblib":
        return _joblib_results(items, policy, env, concurrency, name), lambda: None
    return _ray_results(items, policy, env, concurrency, name), lambda: None
