"""What of the host's Python the jail binds: the runtime and site-packages, never another ``sys.path`` entry."""

from __future__ import annotations

import site
import sys

from medagentgym.sandbox._jail import python_paths


def test_a_layered_venvs_site_packages_is_bound_but_no_checkout_or_user_site(tmp_path, monkeypatch):
    layered = tmp_path / "full-venv" / "lib" / "python3.11" / "site-packages"  # a light venv's .pth added it
    checkout = tmp_path / "clone"  # a source tree on the path may hold built tasks with their answers
    user = tmp_path / "home" / ".local" / "lib" / "python3.11" / "site-packages"
    for path in (layered, checkout, user):
        path.mkdir(parents=True)
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(user))
    monkeypatch.setattr(sys, "path", [str(checkout), *sys.path, str(layered), str(user), "relative/site-packages"])
    found = python_paths()
    assert layered in found
    assert not any(p == checkout or checkout in p.parents or p == user for p in found), found
    assert all(p.is_absolute() for p in found)
