"""MedAgentGym as an OpenEnv environment (the ``medagentgym_env`` package of the ``openenv-medagentgym-env``
distribution): its client (:mod:`medagentgym_env.client`), the manifest ``openenv.yaml`` that openenv-core's
AutoEnv discovers, and the env server (:mod:`medagentgym_env.server.app`, ``server/Dockerfile``)."""

from medagentgym_env.client import (
    MedAction,
    MedAgentGymEnv,
    MedagentgymEnv,
    MedObservation,
)

__all__ = ["MedAction", "MedAgentGymEnv", "MedObservation", "MedagentgymEnv"]
