"""The API reference generator (``make docs`` = scripts/make_api_docs.py) documents every public name.

The generator runs for real on all six packages; the test enumerates the public names on its own (every
``__all__`` of a package and of its non-private modules) and looks for each one's entry and its docstring's
first line. The Markdown conversion of Google-style sections and the stable rendering of constants are
checked on small inputs.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

PACKAGES = ("sandbox", "tasks", "env_client", "rewards", "medcopilot", "adapters")


def _public(package: str) -> dict[str, object]:
    """``qualified name -> object`` for every name in ``__all__`` of ``package`` and its public modules."""
    pkg = importlib.import_module(package)
    found = {f"{package}.{name}": getattr(pkg, name) for name in getattr(pkg, "__all__", [])}
    for info in pkgutil.walk_packages(pkg.__path__, f"{package}."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        module = importlib.import_module(info.name)
        found.update({f"{info.name}.{name}": getattr(module, name) for name in getattr(module, "__all__", [])})
    return found


@pytest.fixture(scope="module")
def reference(tmp_path_factory, load_script) -> dict[str, str]:
    out = tmp_path_factory.mktemp("api")
    assert load_script("make_api_docs").main(["--out", str(out)]) == 0
    return {package: (out / f"{package}.md").read_text(encoding="utf-8") for package in PACKAGES}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_an_entry_with_its_docstring(package, reference):
    text = reference[package]
    public = _public(package)
    assert public or package == "adapters", f"{package} declares no public names"
    for qualname, obj in public.items():
        assert f'<a id="{qualname}"></a>\n\n### `{qualname}`' in text, f"{qualname} has no entry"
        doc = inspect.getdoc(obj) if inspect.isclass(obj) or inspect.isroutine(obj) else None
        if doc:
            first = doc.splitlines()[0].replace("``", "`")
            assert first.split(":")[0][:40] in text, f"{qualname}: its docstring is not on the page"
    assert "at 0x" not in text, "an object's repr with a memory address: the page would change on every run"


def test_the_package_entry_points_are_documented(reference):
    for needle in ("### `sandbox.make_pool`", "### `tasks.make`", "### `env_client.Env`", "### `rewards.RewardSpec`",
                   "### `medcopilot.load_recipe`", "### `adapters.trl.environment_factory`",
                   "### `env_client.evaluation.constant_floor`", "### `medcopilot.export.export_model`"):
        assert any(needle in text for text in reference.values()), needle


def test_google_sections_become_markdown(load_script):
    api = load_script("make_api_docs")
    doc = ("Add one.\n\nArgs:\n    x (int): A number,\n        any number.\n    y: Ignored.\n\n"
           "Returns:\n    ``x + 1``.\n\nRaises:\n    ValueError: Never.\n\nExample:\n    >>> add(1)\n    2\n")
    assert api.markdown(doc) == ("Add one.\n\n**Args**\n\n- `x (int)`: A number, any number.\n- `y`: Ignored.\n\n"
                                 "**Returns**\n\n`x + 1`.\n\n**Raises**\n\n- `ValueError`: Never.\n\n**Example**\n\n"
                                 "```python\n>>> add(1)\n2\n```")
    assert api.markdown(None) == "*(no docstring)*"


def test_constants_render_stably(load_script):
    api = load_script("make_api_docs")
    assert api.value_text(frozenset({"b", "a"})) == "frozenset({'a', 'b'})"
    assert api.value_text({"f": len, "t": ("x",)}) == "{'f': len, 't': ('x',)}"
    assert api.value_text("x" * 400).endswith(" ...")
