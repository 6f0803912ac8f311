"""Rewards: plain named functions of a verdict and a trajectory. Imports neither env_client nor medcopilot."""

from rewards.oracle import correctness, oracle_reward

__all__ = ["correctness", "oracle_reward"]
