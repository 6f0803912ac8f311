"""The verifiers plugin name of MedAgentGym: ``--env.taskset.id medagentgym-verifiers`` (verifiers imports a taskset
by its id as a top-level module). Everything lives in :mod:`medagentgym.adapters.verifiers`."""

from medagentgym.adapters.verifiers import MedAgentGymEnv, MedAgentGymTaskset, load_environment

__all__ = ["MedAgentGymEnv", "MedAgentGymTaskset", "load_environment"]
