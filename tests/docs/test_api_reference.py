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

PACKAGES = ("medagentgym.sandbox", "medagentgym.tasks", "medagentgym.env_client", "medagentgym.rewards",
            "medagentgym.medcopilot", "medagentgym.adapters")


def _public(package: str) -> tuple[dict[str, object], list[str]]:
    """``(qualified name -> object, modules that cannot be imported here)`` for every name in ``__all__`` of
    ``package`` and of its public modules (an adapter's optional library may be missing)."""
    pkg = importlib.import_module(package)
    found = {f"{package}.{name}": getattr(pkg, name) for name in getattr(pkg, "__all__", [])}
    unimportable = []
    for info in pkgutil.walk_packages(pkg.__path__, f"{package}."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            unimportable.append(info.name)
            continue
        found.update({f"{info.name}.{name}": getattr(module, name) for name in getattr(module, "__all__", [])})
    return found, unimportable


@pytest.fixture(scope="module")
def reference(tmp_path_factory, load_script) -> dict[str, str]:
    out = tmp_path_factory.mktemp("api")
    assert load_script("make_api_docs").main(["--out", str(out)]) == 0
    return {package: (out / f"{package}.md").read_text(encoding="utf-8") for package in PACKAGES}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_an_entry_with_its_docstring(package, reference):
    text = reference[package]
    public, unimportable = _public(package)
    assert public or unimportable, f"{package} declares no public names"
    for name in unimportable:  # named, with the reason, rather than silently missing
        assert f"- `{name}`: " in text.split("## Not documented here", 1)[-1], name
    for qualname, obj in public.items():
        assert f'<a id="{qualname}"></a>\n\n### `{qualname}`' in text, f"{qualname} has no entry"
        doc = inspect.getdoc(obj) if inspect.isclass(obj) or inspect.isroutine(obj) else None
        if doc:
            first = doc.splitlines()[0].replace("``", "`")
            assert first.split(":")[0][:40] in text, f"{qualname}: its docstring is not on the page"
    assert "at 0x" not in text, "an object's repr with a memory address: the page would change on every run"


def test_the_package_entry_points_are_documented(reference):
    for needle in ("### `medagentgym.sandbox.make_pool`", "### `medagentgym.tasks.make`", "### `medagentgym.env_client.Env`", "### `medagentgym.rewards.RewardSpec`",
                   "### `medagentgym.medcopilot.load_recipe`", "### `medagentgym.adapters.trl.environment_factory`",
                   "### `medagentgym.env_client.evaluation.constant_floor`", "### `medagentgym.medcopilot.export.export_model`"):
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


def test_a_module_that_cannot_be_imported_is_named_not_dropped(load_script, tmp_path, monkeypatch):
    api = load_script("make_api_docs")
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A package."""\n__all__ = []\n')
    (pkg / "ok.py").write_text('"""Fine."""\n__all__ = ["f"]\n\ndef f(x: int) -> int:\n    """Add one."""\n    return x + 1\n')
    (pkg / "broken.py").write_text('raise ImportError("fakepkg.broken needs zlibx: pip install \'fakepkg[z]\'")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    page, documented, undocumented, failed = api.package_page("fakepkg")
    assert documented == ["fakepkg.ok.f"] and not undocumented
    assert failed == {"fakepkg.broken": "fakepkg.broken needs zlibx: pip install 'fakepkg[z]'"}
    assert "def f(x: int) -> int" in page and "- `fakepkg.broken`: fakepkg.broken needs zlibx" in page
