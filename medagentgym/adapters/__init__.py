"""Adapters: MedAgentGym episodes through other RL libraries' own interfaces (the outer ring of the house).

Each module imports its library at import time and fails with the extra to install when it is missing; nothing
in ``env_client``, ``sandbox``, ``tasks`` or ``rewards`` imports this package.

- ``medagentgym.adapters.openenv``: the env server speaking OpenEnv's protocol (``pip install 'medagentgym[openenv]'``).
- ``medagentgym.adapters.trl``: a TRL ``environment_factory`` class whose tools are the family's actions.
- ``medagentgym.adapters.verifiers``: ``load_environment()`` for verifiers / prime-rl (``[verifiers]``).
- ``medagentgym.adapters.skyrl``: a SkyRL-gym ``BaseTextEnv`` registered as ``medagentgym`` (``[skyrl]``).
- ``medagentgym.adapters.gym``: a ``gymnasium.Env`` registered as ``MedAgentGym-v0`` (``[gymnasium]``).
"""

__all__: list[str] = []
