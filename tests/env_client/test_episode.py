"""Episodes: every action in both formats, budgets, truncation, loops, permitted actions, one graded submit."""

from __future__ import annotations

import collections
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from medagentgym.env_client import InvalidAction, ResetNeeded, to_chat_messages
from medagentgym.env_client.actions import Terminal
from medagentgym.env_client.episode import truncate_middle
from medagentgym.sandbox import SessionClosed, WorkerLost
from medagentgym.tasks.base import GraderError, InfraError
from medagentgym.tasks.graders import render_answer

TRACEBACK = 'Traceback (most recent call last):\n  File "<cell-1>", line 1, in <module>\nNameError: name "x"'


def call(name, **arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def original(action, **params):
    return json.dumps({"action": action, "params": params})


def test_reset_builds_prompt_and_tools(make_env, toy_test):
    env = make_env()
    obs, info = env.reset(toy_test[0], seed=7, options={"policy": "unit", "sample_idx": 2})
    assert [m["role"] for m in obs.messages] == ["system", "user"]
    assert toy_test[0].question in obs.text and obs.kind == "task"
    assert "submit_answer" in obs.messages[0]["content"] and "<tool_call>" in obs.messages[0]["content"]
    assert {t["function"]["name"] for t in obs.tools} == set(info["permitted_actions"])
    assert info["max_turns"] == obs.turns_left == 8  # min(EnvConfig 15, toy_sql's 8)
    header = env.trajectory.header
    assert (header.policy, header.sample_idx, header.seed, header.family_version) == ("unit", 2, 7, 1)
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(toy_test[0], options={"polcy": "x"})


@pytest.mark.parametrize("fmt", ["tool_call", "json"])
def test_every_action_in_both_formats(make_env, toy_test, fmt):
    def act(name, **params):
        return call(name, **params) if fmt == "tool_call" else original(name, **params)

    env = make_env()
    inst = next(i for i in toy_test if i.answer_type == "integer")
    env.reset(inst)
    r = env.step(act("request_info", info_type="schema"))
    assert "patients(patient_id" in r.observation.text and r.info["action"] == "request_info"
    assert r.observation.role == ("tool" if fmt == "tool_call" else "user")
    r = env.step(act("request_info", info_type="column_values", target="visits", keyterm="department"))
    assert "cardiology" in r.observation.text
    r = env.step(act("request_info", info_type="term", keyterm="astma"))
    assert "asthma" in r.observation.text
    r = env.step(act("code_execution", lang="sql", code=inst.solution))
    assert r.info["status"] == "ok" and str(inst.answer) in r.observation.text and r.info["exec_s"] > 0
    r = env.step(act("code_execution", lang="python", code="import sqlite3\nn = 40\nprint(undefined_name)"))
    assert r.info["status"] == "error" and r.info["error_kind"] == "python_error"
    assert "NameError" in r.observation.text and "status: FAILED" in r.observation.text
    r = env.step(act("debugging"))
    assert "Last failure: python_error" in r.observation.text and ">    3 | print(undefined_name)" in r.observation.text
    assert r.info["llm_debugger"] is False
    r = env.step(act("terminal", cmd="ls /data && echo $((n+2))"))
    assert "toy_sql.db" in r.observation.text and r.info["action"] == "terminal"
    assert r.reward == 0.0 and not r.terminated and not r.truncated
    r = env.step(act("submit_answer", answer=str(inst.answer)))
    assert r.terminated and not r.truncated and r.reward == 1.0 and r.info["verdict"]["correct"]
    assert [s.format for s in env.trajectory.steps] == [fmt] * 8


def test_python_state_persists_within_an_episode_only(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    env.step(call("code_execution", code="x = 41"))
    assert "42" in env.step(call("code_execution", code="print(x + 1)")).observation.text
    env.reset(toy_test[1])
    assert "NameError" in env.step(call("code_execution", code="print(x)")).observation.text


def test_debugging_without_a_failure(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    text = env.step(call("debugging", error_msg="it broke")).observation.text
    assert "No failed execution" in text and "it broke" in text


def test_parse_error_is_an_observation_and_a_turn(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    r = env.step("The answer is probably 4.", n_tokens=9)
    assert r.info["status"] == "parse_error" and r.info["parse_error"] and r.reward == 0.0
    assert "no action found" in r.observation.text and r.observation.turns_left == 7
    step = env.trajectory.steps[0]
    assert step.raw_text == "The answer is probably 4." and step.action is None and step.n_tokens == 9


def test_max_turns_truncates_and_then_reset_is_needed(make_env, toy_test):
    env = make_env(max_turns=3)
    env.reset(toy_test[0])
    results = [env.step(call("code_execution", code=f"print({i})")) for i in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert results[-1].reward == 0.0 and not results[-1].terminated and results[-1].info["reason"] == "max_turns"
    final = env.trajectory.final
    assert (final.reason, final.turns, final.truncated, final.verdict) == ("max_turns", 3, True, None)
    with pytest.raises(ResetNeeded):
        env.step(call("submit_answer", answer="1"))


def test_token_budget(make_env, toy_test):
    env = make_env(max_total_tokens=100)
    env.reset(toy_test[0])
    assert not env.step(call("terminal", cmd="true"), n_tokens=60).truncated
    r = env.step(call("terminal", cmd="true"), n_tokens=60)
    assert r.truncated and r.info["reason"] == "max_tokens" and env.trajectory.final.total_tokens == 120


def test_wall_budget(make_env, toy_test):
    env = make_env(episode_wall_s=0.3)
    env.reset(toy_test[0])
    r = env.step(call("code_execution", code="import time\ntime.sleep(0.4)"))
    assert r.truncated and r.info["reason"] == "wall_time"


def test_long_output_is_truncated_head_and_tail(make_env, toy_test):
    env = make_env(obs_max_chars=400)
    env.reset(toy_test[0])
    r = env.step(call("code_execution", code="print('HEAD' + 'x' * 5000 + 'TAIL')"))
    text = r.observation.text
    assert len(text) <= 400 and "chars truncated] …" in text
    assert "HEAD" in text and "TAIL" in text
    assert truncate_middle("short", 10) == "short"


def test_loop_detection_flags_and_optionally_ends(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    same = call("code_execution", code="print(1)")
    flags = [env.step(same).info["loop"] for _ in range(3)]
    assert flags == [False, False, True] and env.trajectory.steps[-1].loop
    env.reset(toy_test[0])
    flags = [env.step(f"no action {i}").info["loop"] for i in range(3)]  # same parse error, different text
    assert flags == [False, False, True]
    env = make_env(end_on_loop=True)
    env.reset(toy_test[0])
    results = [env.step(call("code_execution", code=f"print(missing_{i % 1})")) for i in range(3)]
    assert results[-1].truncated and results[-1].info["reason"] == "loop"


def test_permitted_actions_are_enforced(make_env, tmp_path):
    d = tmp_path / "only_code"
    d.mkdir()
    (d / "family.yaml").write_text(yaml.safe_dump({"name": "only_code", "answer_type": "integer",
                                                   "actions": ["code_execution", "submit_answer"]}))
    (d / "tasks.jsonl").write_text(json.dumps({"question": "2+2?", "answer": 4, "split": "test"}) + "\n")
    from medagentgym import tasks

    inst = tasks.make("only_code", root=tmp_path).instances("test")[0]
    env = make_env(root=tmp_path)
    obs, info = env.reset(inst)
    assert info["permitted_actions"] == ["code_execution", "submit_answer"]
    assert "terminal" not in obs.messages[0]["content"] and len(obs.tools) == 2
    r = env.step(call("terminal", cmd="ls"))
    assert r.info["status"] == "forbidden" and "Allowed actions: code_execution, submit_answer" in r.observation.text
    assert r.observation.turns_left == 14
    assert env.step(call("submit_answer", answer="4")).reward == 1.0


def test_submit_is_graded_exactly_once(make_env, toy_test, monkeypatch):
    env = make_env()
    fam = env.family("toy_sql")
    calls = []
    real = fam.grade
    monkeypatch.setattr(fam, "grade", lambda inst, sub, ctx=None: calls.append(sub) or real(inst, sub, ctx))
    env.reset(toy_test[0])
    env.step(call("code_execution", code="print(12345)"))  # intermediate output: never graded
    r = env.step(call("submit_answer", answer="not it"))
    assert r.terminated and r.reward == 0.0 and calls == ["not it"]
    with pytest.raises(ResetNeeded):
        env.step(call("submit_answer", answer="again"))
    assert calls == ["not it"]


def test_a_grader_the_submission_crashes_scores_zero(make_env, toy_test, monkeypatch):
    """Any exception from grade() that is not an infrastructure error could be the policy's doing: reward 0."""
    env = make_env()
    fam = env.family("toy_sql")
    monkeypatch.setattr(fam, "grade", lambda *a, **k: 1 / 0)
    env.reset(toy_test[0])
    r = env.step(call("submit_answer", answer="1"))
    verdict = r.info["verdict"]
    assert r.terminated and r.reward == 0.0 and "ZeroDivisionError" in verdict["error"] and not verdict["infra"]
    assert env.trajectory.final.reward == 0.0


@pytest.mark.parametrize("error", [InfraError("FHIR server down"), GraderError("gold is NaN"),
                                   WorkerLost("worker gone"), SessionClosed("closed")])
def test_an_infrastructure_failure_of_grading_gives_no_reward(make_env, toy_test, monkeypatch, error):
    env = make_env()
    fam = env.family("toy_sql")

    def broken(*_a, **_k):
        raise error

    monkeypatch.setattr(fam, "grade", broken)
    env.reset(toy_test[0])
    r = env.step(call("submit_answer", answer="1"))
    assert r.terminated and r.reward is None and r.info["verdict"]["infra"] is True
    assert type(error).__name__ in r.info["verdict"]["error"] and env.trajectory.final.reward is None


def test_a_grader_returning_no_verdict_is_infrastructure(make_env, toy_test, monkeypatch):
    env = make_env()
    monkeypatch.setattr(env.family("toy_sql"), "grade", lambda *a, **k: 1.0)
    env.reset(toy_test[0])
    r = env.step(call("submit_answer", answer="1"))
    assert r.reward is None and "not a Verdict" in r.info["verdict"]["error"]


def test_step_before_reset_and_close_twice(make_env, toy_test):
    env = make_env()
    with pytest.raises(ResetNeeded):
        env.step(call("terminal", cmd="true"))
    env.reset(toy_test[0])
    env.step(call("terminal", cmd="true"))
    env.close()
    env.close()
    assert env.trajectory.final.reason == "closed"
    with pytest.raises(ResetNeeded):
        env.step(call("terminal", cmd="true"))


def test_typed_actions(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    r = env.step(Terminal(cmd="echo typed"))
    assert "typed" in r.observation.text and env.trajectory.steps[-1].raw_text.startswith("<tool_call>")
    r = env.step({"action": "terminal", "cmd": "echo dict"})
    assert "dict" in r.observation.text
    with pytest.raises(InvalidAction, match="invalid typed action"):
        env.step({"action": "terminal", "command": "ls"})


def _replay(env, inst, steps, fmt):
    env.reset(inst)
    for step in steps:
        text = call(step["action"], **step["params"]) if fmt == "tool_call" else original(step["action"],
                                                                                         **step["params"])
        result = env.step(text)
    return result


@pytest.mark.parametrize("fmt", ["tool_call", "json"])
def test_oracle_scores_100_percent(make_env, toy_root, toy_test, fmt):
    from medagentgym import tasks

    fam = tasks.make("toy_sql", root=toy_root)
    env = make_env()
    rewards = [_replay(env, inst, fam.reference_solution(inst), fmt).reward for inst in toy_test]
    assert rewards == [1.0] * len(toy_test)
    assert env.trajectory.steps[0].status == "ok"


def test_adversarial_policies_score_at_most_base_rate(make_env, toy_test):
    counts = collections.Counter(render_answer(i.answer_type, i.answer) for i in toy_test)
    base = counts.most_common(1)[0][1] / len(toy_test)
    shotgun = " ".join(str(n) for n in range(500)) + " yes no cardiology nephrology"
    env = make_env()
    for answer in ["0", "yes", shotgun, TRACEBACK, ""]:
        total = sum(_replay(env, inst, [{"action": "submit_answer", "params": {"answer": answer}}], "tool_call")
                    .reward for inst in toy_test)
        assert total / len(toy_test) <= base, answer[:20]
        if answer in (shotgun, TRACEBACK, ""):
            assert total == 0


def test_trajectory_record_and_chat_messages(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    env.step("<think>look</think>" + call("request_info", info_type="schema"), n_tokens=5)
    env.step(original("submit_answer", answer="3"), n_tokens=4)
    traj = env.trajectory
    assert [s.status for s in traj.steps] == ["ok", "submitted"]
    assert traj.steps[0].raw_text.startswith("<think>") and traj.steps[0].action["info_type"] == "schema"
    assert traj.final.turns == 2 and traj.final.total_tokens == 9 and traj.final.terminated
    msgs = to_chat_messages(traj)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    assert msgs[2]["content"] == traj.steps[0].raw_text
    assert to_chat_messages(traj, include_final_observation=True)[-1]["role"] == "user"


class _FakeChat(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeChat.seen.append(body)
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": "Define the variable first."}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_optional_llm_debugger_is_recorded(make_env, toy_test):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        env = make_env(llm_debugger={"base_url": url, "model": "helper", "timeout_s": 5})
        env.reset(toy_test[0])
        env.step(call("code_execution", code="print(y)"))
        r = env.step(call("debugging"))
        assert r.info["llm_debugger"] is True and env.trajectory.steps[-1].llm_debugger
        assert "Define the variable first." in r.observation.text
        assert "NameError" in _FakeChat.seen[-1]["messages"][-1]["content"]
    finally:
        server.shutdown()
    with pytest.raises(ValueError, match="llm_debugger needs base_url and model"):
        make_env(llm_debugger={"model": "x"})


def test_a_dead_session_is_fatal_without_reward(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    env._session.close()  # the sandbox session disappears under the episode
    r = env.step(call("code_execution", code="print(1)"))
    assert r.terminated and r.reward is None and r.info["status"] == "fatal"
    assert env.trajectory.final.reason.startswith("fatal: SessionClosed")


def test_reset_closes_an_unfinished_episode(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    env.step(call("terminal", cmd="true"))
    first = env.trajectory
    env.reset(toy_test[1])
    assert first.final.reason == "closed" and first.final.turns == 1
    assert env.trajectory is not first and env.trajectory.steps == []


def test_per_call_limits_apply(make_env, toy_test):
    env = make_env(limits={"wall_s": 0.5, "cpu_s": 5})
    env.reset(toy_test[0])
    r = env.step(call("code_execution", code="import time\ntime.sleep(5)"))
    assert r.info["error_kind"] == "timeout" and "Timeout" in r.observation.text
    assert not r.truncated and r.info["exec_s"] < 3


def test_a_mount_that_exposes_gold_answers_is_refused(make_env, tmp_path):
    from medagentgym import tasks

    d = tmp_path / "leaky"
    d.mkdir()
    (d / "family.yaml").write_text(yaml.safe_dump({"name": "leaky", "answer_type": "integer", "data": {"all": "."}}))
    (d / "tasks.jsonl").write_text(json.dumps({"question": "2+2?", "answer": 4, "split": "test"}) + "\n")
    inst = tasks.make("leaky", root=tmp_path).instances("test")[0]
    env = make_env(root=tmp_path)
    with pytest.raises(tasks.TaskError, match="exposes instance files with gold answers"):
        env.reset(inst)
    with pytest.raises(ResetNeeded):
        env.step(call("submit_answer", answer="4"))


# -- attacks on the host side of a step: nothing a reply or the jailed code does may raise out of step() ---------
_DEEP_CONTEXT = "ctx = cur = {}\nfor _ in range(960):\n    cur['k'] = {}\n    cur = cur['k']\n"


@pytest.mark.parametrize("context", [
    # The worker-side grounding of the agent's own process rewritten to send types the host does not expect.
    'ctx = {"tables": {"t": 5}, "suggestions": 7, "frames": [1], "columns": {"a": 1}, "defined": None, '
    '"note": [[1]]}\n',
    # ... or nesting as deep as the runner's encoder allows: deeper than the host's decoder once wrapped.
    _DEEP_CONTEXT,
])
def test_a_rewritten_runner_module_cannot_crash_the_step(make_env, toy_test, context):
    env = make_env()
    env.reset(toy_test[0])
    rewrite = context + "import medagentgym.sandbox._runner as r\nr._context = lambda *a, **k: ctx\n"
    assert env.step(call("code_execution", code=rewrite)).info["status"] == "ok"
    r = env.step(call("code_execution", code="undefined_name_here"))  # grounding raised TypeError / RecursionError
    assert not r.terminated and r.info["status"] == "error", r
    assert "NameError" in r.observation.text or "Error" in r.observation.text
    r = env.step(call("debugging"))  # explain_failure grounds the same result again
    assert r.info["status"] == "ok" and not r.terminated


def test_garbage_on_the_reply_pipe_is_a_killed_call_not_an_infrastructure_failure(make_env, toy_test):
    env = make_env()
    env.reset(toy_test[0])
    code = ("import os, struct\nbody = b'[' * 200000 + b']' * 200000\n"
            "os.write(4, struct.pack('>I', len(body)) + body)\nimport time; time.sleep(30)")
    r = env.step(call("code_execution", code=code))  # was: SandboxError -> fatal, reward None
    assert not r.terminated and r.info["status"] == "error" and r.info["error_kind"] == "killed", r.info
    r = env.step(call("code_execution", code="print(6 * 7)"))
    assert r.info["status"] == "ok" and "42" in r.observation.text
    r = env.step(call("submit_answer", answer="definitely wrong"))
    assert r.terminated and r.reward == 0.0


def test_an_unforeseen_exception_ends_the_episode_as_a_wrong_answer(make_env, toy_test, monkeypatch):
    """An exception we did not classify may be the action's doing: the episode ends with 0.0, never None."""
    from medagentgym.env_client.request_info import Catalogue

    env = make_env()
    env.reset(toy_test[0])
    monkeypatch.setattr(Catalogue, "answer", lambda *a, **k: {}["no such key"])
    r = env.step(call("request_info", info_type="schema"))
    assert r.terminated and r.reward == 0.0 and r.info["status"] == "agent_error", r.info
    final = env.trajectory.final
    assert final.reward == 0.0 and "KeyError" in final.verdict["error"] and not final.verdict["infra"]
    assert final.reason.startswith("agent_error")
    # ... while an infrastructure error while handling an action is None, as in grading.
    env.reset(toy_test[0])
    monkeypatch.setattr(Catalogue, "answer", lambda *a, **k: (_ for _ in ()).throw(InfraError("data gone")))
    r = env.step(call("request_info", info_type="schema"))
    assert r.terminated and r.reward is None and r.info["status"] == "fatal"


def test_request_info_has_a_cpu_budget_and_a_keyterm_bound(make_env, toy_test, monkeypatch):
    import medagentgym.env_client.request_info as ri

    env = make_env()
    env.reset(toy_test[0])
    r = env.step(call("request_info", info_type="term", keyterm="x" * 2000))  # 75 s of host CPU before
    assert r.info["status"] == "parse_error" and not r.terminated
    r = env.step(call("request_info", info_type="term", keyterm="y" * 500))
    assert r.info["status"] == "error" and "characters" in r.observation.text
    monkeypatch.setattr(ri, "INFO_CPU_S", 0.0)  # any request runs out at its first check: the episode's error
    r = env.step(call("request_info", info_type="term", keyterm="astma"))
    assert r.info["status"] == "error" and "CPU" in r.observation.text and not r.terminated
