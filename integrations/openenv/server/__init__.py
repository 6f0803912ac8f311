"""The env server of the ``medagentgym_env`` OpenEnv package (:mod:`medagentgym_env.server.app`)."""
