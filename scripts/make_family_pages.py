"""The family pages of docs/families (``make docs``): the same as ``medagentgym pages`` (see
``medagentgym/cli/make_family_pages.py``).

    python scripts/make_family_pages.py --out docs/families
"""

import sys

from medagentgym.cli.make_family_pages import main

if __name__ == "__main__":
    sys.exit(main())
