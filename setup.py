"""The wheel's one build step beyond pyproject.toml: the deprecated top-level names ship as their ``__init__.py``.

Importing an old name (sandbox, rewards, env_client, medcopilot) runs that file, whose first lines bind the old
name to the package under ``medagentgym`` (medagentgym/_compat.py); every submodule imported by the old name is then
answered by the alias finder with the module of the new name. The folders' other files are the files of
``medagentgym/<name>/`` (a committed symlink in the repository), never loaded under the old name: the wheel leaves
them out, so it holds each module once (tests/docs/test_pip_install.py checks both). All else is in pyproject.toml.
"""

from setuptools import setup
from setuptools.command.build_py import build_py

#: The deprecated top-level packages: the keys of medagentgym/_compat.py's ALIASES (tests/test_packaging.py).
OLD_NAMES = ("sandbox", "rewards", "env_client", "medcopilot")


class BuildPy(build_py):
    """``build_py`` that copies only ``__init__.py`` of the deprecated top-level packages, and none of their data."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if m[1] == "__init__"] if package in OLD_NAMES else modules

    def find_data_files(self, package, src_dir):
        return [] if package in OLD_NAMES else super().find_data_files(package, src_dir)


setup(cmdclass={"build_py": BuildPy})
