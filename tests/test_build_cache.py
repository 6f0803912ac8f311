"""The test fixtures' family build cache (tests/_build_cache.py, issue #29): its key follows the source a build can
run, a warm entry is reused without building, and a session's copy cannot spoil the cache."""

from __future__ import annotations

import json

import _build_cache as cache
import pytest
from _build_cache import REPO_ROOT, family_key, source_files, tasks_root


def test_the_key_covers_the_modules_a_family_imports_and_no_other_family():
    ehrcon = {p.relative_to(REPO_ROOT).as_posix() for p in source_files("medagentgym.tasks.ehrcon")}
    assert {"medagentgym/tasks/ehrcon.py", "medagentgym/tasks/ehr_seqsql.py", "medagentgym/tasks/base.py",
            "medagentgym/tasks/ehr_synth/notes.py"} <= ehrcon  # its own, another family's it imports, shared code
    toy = {p.relative_to(REPO_ROOT).as_posix() for p in source_files("medagentgym.tasks.toy_sql")}
    assert "medagentgym/tasks/toy_sql.py" in toy and "medagentgym/tasks/ehrcon.py" not in toy
    keys = {family_key("toy_sql", "tiny", 0), family_key("toy_sql", "tiny", 1), family_key("toy_sql", "default", 0),
            family_key("treqs", "tiny", 0)}
    assert len(keys) == 4 and family_key("toy_sql", "tiny", 0) == family_key("toy_sql", "tiny", 0)


def test_a_changed_source_file_gives_a_new_key(monkeypatch, tmp_path):
    before = family_key("toy_sql", "tiny", 0)
    real = cache.source_files
    extra = tmp_path / "medagentgym" / "edited.py"
    extra.parent.mkdir()
    extra.write_text("x = 1\n")
    monkeypatch.setattr(cache, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(cache, "source_files", lambda module: [extra])
    one = family_key("toy_sql", "tiny", 0)
    extra.write_text("x = 2\n")
    assert family_key("toy_sql", "tiny", 0) != one
    monkeypatch.setattr(cache, "REPO_ROOT", REPO_ROOT)
    monkeypatch.setattr(cache, "source_files", real)
    assert family_key("toy_sql", "tiny", 0) == before


def test_a_warm_entry_is_copied_not_rebuilt_and_the_copy_is_the_sessions_own(monkeypatch, tmp_path):
    monkeypatch.setenv("MEDAGENTGYM_TEST_CACHE", str(tmp_path / "cache"))
    first = tasks_root(["toy_sql"], tmp_path / "a", jobs=1)
    manifest = json.loads((first / "toy_sql" / "manifest.json").read_text())
    assert manifest["counts"]["test"] > 0
    entry = tmp_path / "cache" / family_key("toy_sql", "tiny", 0)
    assert (entry / "toy_sql" / "manifest.json").is_file()
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".build-")]  # scratch removed

    def no_build(*args, **kwargs):
        raise AssertionError("a warm entry was built again")

    monkeypatch.setattr(cache, "_build", no_build)
    second = tasks_root(["toy_sql"], tmp_path / "b", jobs=1)
    (second / "toy_sql" / "manifest.json").write_text("{}")  # a test that writes into its root
    assert json.loads((entry / "toy_sql" / "manifest.json").read_text()) == manifest
    with pytest.raises(AssertionError, match="built again"):  # a cold key does build
        tasks_root(["toy_sql"], tmp_path / "c", seed=1, jobs=1)


def test_off_builds_into_the_root_and_keeps_no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("MEDAGENTGYM_TEST_CACHE", "off")
    assert cache.cache_dir() is None
    root = tasks_root(["toy_sql"], tmp_path / "root", jobs=1)
    assert (root / "toy_sql" / "manifest.json").is_file()


def test_a_cached_model_is_built_once_and_each_session_gets_its_own_copy(monkeypatch, tmp_path):
    monkeypatch.setenv("MEDAGENTGYM_TEST_CACHE", str(tmp_path / "cache"))
    builds = []

    def build(out):
        builds.append(out)
        out.mkdir(parents=True)
        (out / "weights.bin").write_bytes(b"w" * 10)

    first = cache.cached_copy("model-k1", build, tmp_path / "a")
    second = cache.cached_copy("model-k1", build, tmp_path / "b")
    assert len(builds) == 1 and (second / "weights.bin").read_bytes() == b"w" * 10
    (first / "weights.bin").write_bytes(b"spoiled")  # a test that writes into its copy
    assert (cache.cached_copy("model-k1", build, tmp_path / "c") / "weights.bin").read_bytes() == b"w" * 10
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".build-")]  # scratch removed
    cache.cached_copy("model-k2", build, tmp_path / "d")  # another key builds
    assert len(builds) == 2


def test_a_failed_model_build_leaves_no_entry(monkeypatch, tmp_path):
    monkeypatch.setenv("MEDAGENTGYM_TEST_CACHE", str(tmp_path / "cache"))

    def half(out):
        out.mkdir(parents=True)
        (out / "part").write_text("x")
        raise RuntimeError("killed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        cache.cached_copy("model-k", half, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["model-k.lock"]


def test_the_model_keys_follow_their_builders_source():
    tiny = {p.relative_to(REPO_ROOT).as_posix() for p in source_files("medagentgym.medcopilot.tiny")}
    # the files by their import path (medagentgym/medcopilot is the committed link to the medcopilot folder)
    assert {"medagentgym/medcopilot/tiny.py", "medagentgym/medcopilot/modeling.py"} <= tiny
    assert "medagentgym/medcopilot/real_model.py" in {p.relative_to(REPO_ROOT).as_posix()
                                          for p in source_files("medagentgym.medcopilot.real_model")}
    assert cache.module_key("m", "medagentgym.medcopilot.tiny") != cache.module_key("m", "medagentgym.medcopilot.real_model")
    assert cache.module_key("m", "medagentgym.medcopilot.tiny") != cache.module_key("m", "medagentgym.medcopilot.tiny", ("torch",))
