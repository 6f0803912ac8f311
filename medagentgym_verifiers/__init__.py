"""The verifiers plugin name of MedAgentGym: ``vf-eval medagentgym-verifiers`` (verifiers imports a taskset by its id as
a top-level module, and takes its env and default harness from the same module). Everything lives in
:mod:`medagentgym.adapters.verifiers`."""

from medagentgym.adapters.verifiers import (
    MedAgentGymEnv,
    MedAgentGymHarness,
    MedAgentGymTaskset,
    load_environment,
)

__all__ = ["MedAgentGymEnv", "MedAgentGymHarness", "MedAgentGymTaskset", "load_environment"]
