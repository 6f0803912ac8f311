"""Rewards: plain named functions of a verdict and a trajectory, and ``RewardSpec`` to combine them.

Imports neither ``env_client`` nor ``medcopilot``; trajectories are duck-typed (``.steps``, ``.final``).
"""

if not __name__.startswith("medagentgym."):  # the deprecated top-level name: an alias (medagentgym/_compat.py)
    import medagentgym._compat

    medagentgym._compat.redirect(__name__)

from medagentgym.rewards.errors import RewardError
from medagentgym.rewards.oracle import correctness, infra_failure, oracle_reward
from medagentgym.rewards.shaping import (
           format_penalty,
           length_cost,
           loop_penalty,
           turn_cost,
           verifier_score,
)
from medagentgym.rewards.spec import REWARD_FUNCS, RewardResult, RewardSpec, combine
from medagentgym.rewards.verifier import HTTPVerifier, VerifierScorerProtocol

__all__ = ["REWARD_FUNCS", "HTTPVerifier", "RewardError", "RewardResult", "RewardSpec", "VerifierScorerProtocol",
           "combine", "correctness", "format_penalty", "infra_failure", "length_cost", "loop_penalty", "oracle_reward",
           "turn_cost", "verifier_score"]
