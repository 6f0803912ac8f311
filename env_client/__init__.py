"""Episodes over the sandbox: typed actions, model-text parsing, the gymnasium-like ``Env``, trajectories.

Example:
    >>> from medagentgym.sandbox import make_pool
    >>> from medagentgym.env_client import Env
    >>> with make_pool(workers=2) as pool, Env(pool, tasks_root="artifacts/tasks") as env:
    ...     obs, info = env.reset(task)
    ...     result = env.step(model_reply, n_tokens=57)
"""

if not __name__.startswith("medagentgym."):  # the deprecated top-level name: an alias (medagentgym/_compat.py)
    import medagentgym._compat

    medagentgym._compat.redirect(__name__)

from medagentgym.env_client.actions import Action, parse_call, tool_schemas
from medagentgym.env_client.episode import Env, EnvConfig, Observation, StepResult
from medagentgym.env_client.errors import EnvClientError, InvalidAction, ResetNeeded
from medagentgym.env_client.parsing import ParseResult, parse_model_text
from medagentgym.env_client.trajectory import StepRecord, Trajectory, TrajectoryStore, to_chat_messages

__all__ = [
    "Action",
    "Env",
    "EnvClientError",
    "EnvConfig",
    "InvalidAction",
    "Observation",
    "ParseResult",
    "ResetNeeded",
    "StepRecord",
    "StepResult",
    "Trajectory",
    "TrajectoryStore",
    "parse_call",
    "parse_model_text",
    "to_chat_messages",
    "tool_schemas",
]
