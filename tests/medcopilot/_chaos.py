"""Adversarial turns for the chaos tests: what a policy under training will emit sooner or later.

:class:`ChaosRollout` is the real :class:`~medagentgym.medcopilot.rollout_func.EnvRolloutFunc` whose generator hands every
other turn (in order, whatever the batching) to the next attack of :data:`ATTACKS` instead of the model, and which
records every finished episode (trajectory, reward, statistics) as the trainers collate it. GRPO (through TRL's
``GRPOTrainer``) and PPO (through our ``PPOTrainer``) call it exactly as they call the plain hook.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from medagentgym.medcopilot.rollout_func import EnvRolloutFunc

CRASH = "CRASH-THE-GRADER"


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


_PIPE = ("import os, time\nb = b'[' * 100000 + b']' * 100000\nos.write(4, len(b).to_bytes(4, 'big') + b)\n"
         "time.sleep(30)")
_REWRITE = ("ctx = cur = {}\nfor _ in range(960):\n    cur['k'] = {}\n    cur = cur['k']\n"
            "import medagentgym.sandbox._runner as r\nr._context = lambda *a, **k: ctx\nundefined_name")
_FLOOD = ("import signal, socket\nsignal.signal(signal.SIGPIPE, signal.SIG_IGN)\nheld = []\n"
          "for addr in ['/run/bridge/8080.sock'] * 150 + [('127.0.0.1', 8080)] * 150:\n"
          "    s = socket.socket(socket.AF_UNIX if isinstance(addr, str) else socket.AF_INET)\n"
          "    try:\n        s.connect(addr)\n        held.append(s)\n    except OSError:\n        s.close()\n"
          "print(len(held))")

#: name -> the assistant text of one adversarial turn.
ATTACKS: dict[str, str] = {
    # A JSON nesting deeper than the decoder's recursion limit (RecursionError out of the parser).
    "nested_brackets": '<tool_call>{"name": "submit_answer", "arguments": {"answer": ' + "[" * 1100 + "}}</tool_call>",
    # Open tags without a close: the old <think> regex was quadratic in them.
    "think_flood": "<think>" * 250 + _call("terminal", cmd="true"),
    # Megabytes of output: kept head and tail, the observation cut.
    "huge_output": _call("code_execution", code="print('x' * 10**7)"),
    # A frame nested past the decoder's depth on the runner's reply pipe (SandboxError -> reward None before).
    "pipe_garbage": _call("code_execution", code=_PIPE),
    # The runner's own grounding module rewritten: what it sends back as context is nested past the host's depth.
    "module_rewrite": _call("code_execution", code=_REWRITE),
    # Connections straight to the bridge socket and to the bridged port (medagentbench's FHIR server).
    "connection_flood": _call("code_execution", code=_FLOOD),
    # A submission that makes the grader raise (installed by the test): a wrong answer.
    "crashing_grader": _call("submit_answer", answer=CRASH),
}


class ChaosRollout(EnvRolloutFunc):
    """The rollout hook with every other turn replaced by the next attack; records each collated episode."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.turns = 0
        self.used: dict[str, int] = dict.fromkeys(ATTACKS, 0)
        self.episodes: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def hf_generator(self, model: Any, **kwargs: Any):
        base = super().hf_generator(model, **kwargs)
        names = list(ATTACKS)
        eos = self.tokenizer.eos_token_id

        def gen(contexts: list[list[int]], seeds: list[int]):
            ids, logprobs = base(contexts, seeds)
            ids, logprobs = list(ids), list(logprobs) if logprobs is not None else None
            with self._lock:
                for i in range(len(contexts)):
                    n, self.turns = self.turns, self.turns + 1
                    if n % 2:
                        continue
                    name = names[(n // 2) % len(names)]
                    self.used[name] += 1
                    ids[i] = list(self.tokenizer(ATTACKS[name], add_special_tokens=False)["input_ids"]) + [eos]
                    if logprobs is not None:
                        logprobs[i] = [0.0] * len(ids[i])
            return ids, logprobs

        return gen

    def _collate(self, episodes, failures=None):
        out = super()._collate(episodes, failures)
        for ep, stats, reward in zip(episodes, out["episode_stats"], out["reward_correctness"]):
            texts = [s.raw_text for s in ep.trajectory.steps] if ep.trajectory is not None else []
            hit = sorted({name for name, text in ATTACKS.items() if any(t == text for t in texts)})
            self.episodes.append({"attacks": hit, "reward": reward, "stats": stats,
                                  "reason": ep.trajectory.final.reason if ep.trajectory is not None else None,
                                  "statuses": [s.status for s in ep.trajectory.steps] if ep.trajectory else []})
        return out


def crashing(grade):
    """A family's ``grade`` that raises (a bug the submission found) when the answer is :data:`CRASH`."""
    def wrapped(self, instance, submission, ctx=None):
        if CRASH in str(submission):
            raise ValueError("the grader fell over on this submission")
        return grade(self, instance, submission, ctx)
    return wrapped


def check(rollout: ChaosRollout, log_history: list[dict[str, Any]]) -> None:
    """The chaos contract: every attack was played, adversarial episodes score 0 (never None), no infra failure."""
    assert all(n >= 1 for n in rollout.used.values()), rollout.used
    adversarial = [e for e in rollout.episodes if e["attacks"]]
    assert adversarial, rollout.episodes
    for ep in adversarial:
        assert ep["reward"] == 0.0, ep  # a wrong answer: never None (no penalty), never a crash
    for ep in rollout.episodes:
        assert not ep["stats"]["infra_failure"] and ep["reward"] is not None, ep
    logged = [row["env/infra_failure_rate"] for row in log_history if "env/infra_failure_rate" in row]
    assert logged and all(v == 0.0 for v in logged), log_history
