"""The deprecated top-level import names (issue #33): ``sandbox``, ``rewards``, ``env_client``, ``medcopilot``.

The code lives under the ``medagentgym`` namespace (``medagentgym.sandbox`` ...), so a user's own ``sandbox/``
folder in the working directory or ``rewards`` package on ``sys.path`` can no longer stand in for ours. The
repository keeps the folders at its top (``medagentgym/sandbox`` is a committed symlink to ``../sandbox``), so a
clone's top-level ``sandbox/__init__.py`` is found under both names; its first lines call :func:`redirect` when it
runs under the old one. For a deprecation period the old names keep working, as aliases, never as copies:

* ``import sandbox`` returns the module object of ``medagentgym.sandbox`` (``sys.modules`` holds it under both
  names) and warns once per name with a ``DeprecationWarning`` that names the new import;
* ``import sandbox.limits`` (any submodule, at any depth) is answered by :class:`AliasFinder`, first on
  ``sys.meta_path``, with the module object of ``medagentgym.sandbox.limits``: one module per file, so one
  registry, one class identity, and pickles made under either name load under both.

The finder answers only names below an old name that is already bound to our package: it never claims a bare
top-level name, so a user's own ``sandbox`` package imported before ours keeps working for the user.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

#: old top-level name -> new name
ALIASES = {
    "sandbox": "medagentgym.sandbox",
    "rewards": "medagentgym.rewards",
    "env_client": "medagentgym.env_client",
    "medcopilot": "medagentgym.medcopilot",
}

_warned: set[str] = set()
#: the module objects our packages' ``__init__`` ran as under an old name (sys.modules holds them until
#: :func:`redirect` replaces them: a submodule imported meanwhile is still ours to alias)
_shims: list = []


def new_name(fullname: str) -> str | None:
    """``medagentgym.sandbox.limits`` for ``sandbox.limits``; None for a name outside the old ones."""
    top, dot, rest = fullname.partition(".")
    target = ALIASES.get(top)
    return None if target is None else target + dot + rest


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``sandbox.X`` with the module ``medagentgym.sandbox.X`` (imported if need be), never a copy."""

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if fullname == top or top not in ALIASES:
            return None
        parent = sys.modules.get(top)
        if parent is None or not (parent is sys.modules.get(ALIASES[top]) or any(parent is m for m in _shims)):
            return None  # the old name is someone else's package (or not imported): not ours to answer
        return importlib.machinery.ModuleSpec(fullname, self, is_package=False)

    def create_module(self, spec):
        module = importlib.import_module(new_name(spec.name))
        # the import system sets __spec__ on whatever create_module returns: keep the real one
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        real = module.__spec__.loader_state
        if real is not None:
            module.__spec__ = real


_FINDER = AliasFinder()


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _FINDER)


def redirect(old: str) -> None:
    """Bind the deprecated top-level name ``old`` to our package: called by that package's ``__init__`` when it
    runs under the old name. Warns once per name; ``sys.modules[old]`` becomes the new package's module object,
    which the import statement that is running returns."""
    new = ALIASES[old]
    if old not in _warned:
        _warned.add(old)
        warnings.warn(f"`import {old}` is deprecated and will be removed: use `import {new}` "
                      f"(`from {new} import ...`) instead", DeprecationWarning, stacklevel=3)
    install()
    shim = sys.modules.get(old)
    if shim is not None and not any(shim is m for m in _shims):
        _shims.append(shim)
    sys.modules[old] = importlib.import_module(new)
