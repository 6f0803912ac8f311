"""``python -m medagentgym <command>``: the ``medagentgym`` command (see :mod:`medagentgym.cli`)."""

import os
import sys

# `python -m` put the working directory first on sys.path; a `sandbox/` or `tasks/` folder there must not stand
# in for our packages (the console script never has it).
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from medagentgym.cli import main  # noqa: E402

sys.exit(main())
