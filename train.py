"""Train a Med-Copilot policy from a recipe: ``accelerate launch train.py recipe=<name> [key=value ...]``.

The same as ``medagentgym train`` (the body is ``medagentgym/cli/train.py``); kept at the repository root because
``accelerate launch`` takes a script path.
"""

import sys

from medagentgym.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
