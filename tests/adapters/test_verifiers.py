"""verifiers (v1): its own loader builds the env from this taskset id, the taskset yields toy_sql tasks, and the
env's ``run`` plays an episode to a graded reward recorded on the trace.

The agent is the one stand-in: a verifiers agent runs its harness program through ``uv`` (packages fetched at run
time) against a model endpoint, neither of which a test may reach. The stand-in replays fixed replies through the
same ``interaction`` / ``turn`` surface the env drives, and records rewards the way ``vf.Trace`` does.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

vf = pytest.importorskip("verifiers.v1", reason="verifiers is not installed (pip install '.[verifiers]')")

from medagentgym.adapters.verifiers import MedAgentGymEnv, MedAgentGymTaskset, load_environment


class _Segment:
    def __init__(self, reply: str | None) -> None:
        self.last_reply, self.terminated = reply, reply is None


class _Trace:
    def __init__(self) -> None:
        self.rewards: dict[str, float] = {}
        self.stop_condition: str | None = None

    def record_reward(self, name: str, value: float, weight: float = 1.0) -> None:
        self.rewards[name] = float(value)

    def stop(self, condition: str, override: bool = False) -> None:
        self.stop_condition = self.stop_condition or condition


class _ScriptedPlayer:
    """Answers each turn with the next scripted reply; ``None`` ends the run."""

    def __init__(self, replies: list[str | None]) -> None:
        self.replies, self.seen, self.trace = list(replies), [], _Trace()

    @contextlib.asynccontextmanager
    async def interaction(self, task):
        self.seen.append(task.data.prompt)
        player = self

        class _Interaction:
            trace = player.trace

            async def turn(self, message=None):
                if message is not None:
                    player.seen.append(message)
                return _Segment(player.replies.pop(0) if player.replies else None)

        yield _Interaction()


class _Agents:
    def __init__(self, player: _ScriptedPlayer) -> None:
        self.player = player


def _call(name: str, arguments: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


def test_loader_builds_the_env_and_an_episode_earns_a_graded_reward(toy_root, sandbox_backend, oracle_answer):
    env = load_environment(tasks_root=str(toy_root), families=["toy_sql"], split="test", limit=3,
                           sandbox=sandbox_backend, allow_unisolated=True)
    assert isinstance(env, MedAgentGymEnv) and isinstance(env.taskset, MedAgentGymTaskset)
    tasks = list(env.taskset)
    assert [t.key for t in tasks] == ["toy_sql/test/0000", "toy_sql/test/0001", "toy_sql/test/0002"]
    task = tasks[1]
    assert "submit_answer" in task.data.system_prompt and "Question:" in task.data.prompt
    # verifiers shows the model no tool schemas: the system prompt carries their compact form, once each
    assert task.data.system_prompt.count("code_execution(lang?: python|sql, code: str)") == 1

    sql = _call("code_execution", '{"lang": "sql", "code": "SELECT COUNT(*) FROM patients"}')
    player = _ScriptedPlayer([sql, _call("submit_answer", f'{{"answer": "{oracle_answer(task.key)}"}}')])
    asyncio.run(env.run(task, _Agents(player)))
    assert player.trace.rewards == {"medagentgym": 1.0}
    assert "status: SUCCESS" in player.seen[-1]  # the SQL result came back as the user's turn

    wrong = _ScriptedPlayer([_call("submit_answer", '{"answer": "-1"}')])
    asyncio.run(env.run(task, _Agents(wrong)))
    assert wrong.trace.rewards == {"medagentgym": 0.0}
    quiet = _ScriptedPlayer([])  # the agent stops without answering: a graded 0 for the closed episode
    asyncio.run(env.run(task, _Agents(quiet)))
    assert quiet.trace.rewards == {"medagentgym": 0.0}
