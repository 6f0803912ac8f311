"""An oracle evaluation with -k 2 on 10 tasks, its report.md parsed back: tables, intervals, provenance, floors.

The report is what a paper prints from: every table keeps its shape, every rate has an interval that does not
collapse to [100 %, 100 %] when all tasks agree, and the provenance names what ran.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = "bwrap" if shutil.which("bwrap") else "local"
_PCT = r"(\d+\.\d)%"


def _table(md: str, header_start: str) -> list[dict[str, str]]:
    """The Markdown table whose header line starts with ``header_start``, as dicts (cells split on unescaped |)."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    head, rule, body = rows[0], rows[1], rows[2:]
    assert len(rule) == len(head) and all(set(c) <= set("-:") for c in rule)
    assert all(len(r) == len(head) for r in body), f"a row of the {header_start!r} table lost its shape"
    return [dict(zip(head, r)) for r in body]


def _interval(cell: str) -> tuple[float, float]:
    lo, hi = re.fullmatch(rf"\[{_PCT}, {_PCT}\]", cell).groups()
    return float(lo) / 100, float(hi) / 100


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("eval_k2")
    out = base / "oracle"
    proc = subprocess.run([sys.executable, "-m", "medagentgym", "eval", "--policy", "oracle",
                           "--families", "toy_sql", "--limit", "10", "-k", "2", "--size", "tiny",
                           "--tasks-root", str(base / "tasks"), "--out", str(out), "--sandbox", SANDBOX,
                           "--allow-unisolated", "--no-progress", "--json", "--concurrency", "2"],
                          cwd=base, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout.strip().splitlines()[-1])


def test_oracle_k2_on_10_tasks_reports_a_lower_bound_below_100_percent(oracle_run):
    out, summary = oracle_run
    assert summary["episodes"] == 20 and summary["success_rate"] == 1.0
    lo, hi = summary["ci95"]
    assert lo < 0.75 and hi == 1.0  # Wilson over 10 tasks: [72.2 %, 100 %]
    report = json.loads((out / "report.json").read_text())
    assert report["ci_method"] == "wilson-tasks" and report["tasks"] == 10 and report["se"] == 0.0


def test_report_md_parses_back_with_tables_intervals_provenance_and_floors(oracle_run):
    out, _ = oracle_run
    md = (out / "report.md").read_text()
    report = json.loads((out / "report.json").read_text())
    head = re.search(rf"\*\*Success rate: {_PCT}\*\* ± {_PCT} SE \(95 % CI (\[[^\]]+\]), wilson-tasks\), macro over "
                     rf"1 families: {_PCT}", md)
    assert head, md[:600]
    assert float(head.group(1)) == 100.0 and float(head.group(2)) == 0.0 and float(head.group(4)) == 100.0
    lo, hi = _interval(head.group(3))
    assert lo == pytest.approx(report["ci95"][0], abs=5e-4) and lo < 1.0 and hi == 1.0

    fams = {row["family"]: row for row in _table(md, "| family |")}
    assert set(fams) == {"toy_sql", "**micro (all episodes)**", "**macro (mean of families)**"}
    toy = fams["toy_sql"]
    assert (toy["episodes"], toy["tasks"], toy["success"]) == ("20", "10", "100.0%")
    assert _interval(toy["95 % CI"])[0] < 1.0
    floor = report["per_family"]["toy_sql"]["floor"]
    assert toy["constant floor"].startswith(f"{floor['floor']:.1%} (`") and toy["floor bound"] == "≤ 10%"
    assert toy["infra failures"] == "0"

    rows = [line for line in md.split("## Provenance", 1)[1].splitlines() if line.startswith("| ") and "---" not in line]
    provenance = dict(re.fullmatch(r"\| (\S+) \| `(.*)` \|", line).groups() for line in rows[1:])
    assert provenance["policy"].startswith('{"sampling"') and '"spec": "oracle"' in provenance["policy"]
    assert provenance["split"] == "test" and provenance["size"] == "tiny" and provenance["k"] == "2"
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?|medagentgym .*", provenance["commit"])
    assert provenance["task_set"] == report["meta"]["task_set"] and len(provenance["task_set"]) == 16
    pass_k = _table(md, "| K | Pass@K |")
    assert [r["K"] for r in pass_k] == ["1", "2"] and all(r["Pass@K"] == "100.0%" for r in pass_k)
    for png in ("success_by_family.png", "pass_at_k.png", "errors.png"):
        assert (out / png).stat().st_size > 1000


def test_size_default_over_a_tiny_build_is_refused_not_recorded_as_default(oracle_run, tmp_path):
    out, _ = oracle_run
    tasks_root = out.parent / "tasks"
    proc = subprocess.run([sys.executable, "-m", "medagentgym", "eval", "--policy", "oracle",
                           "--families", "toy_sql", "--limit", "2", "--size", "default", "--tasks-root",
                           str(tasks_root), "--out", str(tmp_path / "o"), "--sandbox", SANDBOX, "--allow-unisolated",
                           "--no-progress"], capture_output=True, text=True, timeout=1200, check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert err[0].startswith(f"error: {tasks_root / 'toy_sql'} is a tiny build, not default: rebuild it with")
    assert not (tmp_path / "o" / "report.json").exists()
    # without --size, the build's own size is what the report records
    proc = subprocess.run([sys.executable, "-m", "medagentgym", "eval", "--policy", "oracle",
                           "--families", "toy_sql", "--limit", "2", "--tasks-root", str(tasks_root), "--out",
                           str(tmp_path / "o"), "--sandbox", SANDBOX, "--allow-unisolated", "--no-progress",
                           "--no-plots"], capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "report.json").read_text())["meta"]["size"] == "tiny"


def _eval(out: Path, tasks_root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medagentgym", "eval", "--policy", "oracle", "--tasks-root",
                           str(tasks_root), "--out", str(out), "--sandbox", SANDBOX, "--allow-unisolated",
                           "--no-progress", "--no-plots", *args], capture_output=True, text=True, timeout=600,
                          check=False)


def test_a_rerun_that_asks_another_question_is_refused_in_words_and_keeps_the_bigger_report(oracle_run):
    out, _ = oracle_run
    tasks_root = out.parent / "tasks"
    before = (out / "report.json").read_bytes()
    proc = _eval(out, tasks_root, "--families", "toy_sql", "--limit", "2", "-k", "2")
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert err[0] == (f"error: {out} holds the report of another question (--limit: 10 -> 2); pass another --out, "
                      f"or --overwrite to replace it")
    assert (out / "report.json").read_bytes() == before, "a smaller rerun must not replace the report"
    proc = _eval(out, tasks_root, "--families", "toy_sql,toy_lookup", "--limit", "10", "-k", "1", "--seed", "3")
    assert proc.returncode == 2
    assert ("(--families: toy_sql -> 2 families (toy_lookup, toy_sql); -k: 2 -> 1; --seed: 0 -> 3)"
            in proc.stderr), proc.stderr
    assert len(proc.stderr) < 300 and "manifest" not in proc.stderr
    assert (out / "report.json").read_bytes() == before


def _episodes(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_overwrite_replaces_the_report_folder_only_when_the_run_ends_and_an_interrupted_one_resumes(oracle_run,
                                                                                                    tmp_path):
    """`eval --overwrite` has `rollout --overwrite`'s semantics: the old --out stays whole (report, episodes, plots)
    until the new run's report is written; a killed --overwrite run resumes; nothing of the old run is left."""
    import signal
    import time

    source, _ = oracle_run
    tasks_root = source.parent / "tasks"
    out = tmp_path / "oracle"
    shutil.copytree(source, out)  # a finished report of 10 tasks x 2 with plots (the module's run: kept intact)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"report.json", "trajectories.jsonl", "errors.png"} <= set(before)
    hidden = tmp_path / ".oracle.overwrite"
    args = ["--families", "toy_sql", "--limit", "6", "-k", "1", "--concurrency", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "medagentgym", "eval", "--policy", "oracle", "--tasks-root",
                             str(tasks_root), "--out", str(out), "--sandbox", SANDBOX, "--allow-unisolated",
                             "--no-progress", "--no-plots", "--overwrite", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600  # ends at the 2nd episode of the new run (the event); a hang guard
    while _episodes(hidden / "trajectories.jsonl") < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and 2 <= _episodes(hidden / "trajectories.jsonl") < 6, "kill mid-run"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "the old --out stays whole until the run ends"
    # without --overwrite the same command is refused (the report answers another question), in words
    proc = _eval(out, tasks_root, *args)
    assert proc.returncode == 2 and "(--limit: 10 -> 6; -k: 2 -> 1)" in proc.stderr, proc.stderr
    assert proc.stderr.strip().endswith("pass another --out, or --overwrite to replace it"), proc.stderr
    # the interrupted --overwrite run resumes, then takes the place of --out
    proc = _eval(out, tasks_root, *args, "--overwrite", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 6 and summary["success_rate"] == 1.0 and summary["out"] == str(out)
    assert not hidden.exists() and not (tmp_path / ".oracle.replaced").exists()
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md", "trajectories.jsonl",
                                                     "trajectories.jsonl.run.json"], "the old plots are gone"
    assert _episodes(out / "trajectories.jsonl") == 6
    meta = json.loads((out / "report.json").read_text())["meta"]
    assert (meta["limit"], meta["k"]) == (6, 1)
    # the same question now resumes (no new episode); --overwrite starts over, ignoring a stale twin of another run
    stored = (out / "trajectories.jsonl").read_bytes()
    proc = _eval(out, tasks_root, *args, "--json")
    assert proc.returncode == 0 and (out / "trajectories.jsonl").read_bytes() == stored, proc.stderr
    shutil.copytree(source, hidden)  # a twin left by an --overwrite run of another question
    proc = _eval(out, tasks_root, "--families", "toy_sql", "--limit", "2", "-k", "1", "--overwrite", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["episodes"] == 2 and not hidden.exists()
    assert _episodes(out / "trajectories.jsonl") == 2


def test_an_interrupted_run_without_a_report_refuses_another_question_in_words(oracle_run, tmp_path):
    """Before any report exists (a run killed midway), the stored episodes' recorded question is checked."""
    source, _ = oracle_run
    tasks_root = source.parent / "tasks"
    out = tmp_path / "partial"
    proc = _eval(out, tasks_root, "--families", "toy_sql", "--limit", "3")
    assert proc.returncode == 0, proc.stderr
    (out / "report.json").unlink()  # as a run killed after its episodes, before its report
    before = (out / "trajectories.jsonl").read_bytes()
    proc = _eval(out, tasks_root, "--families", "toy_sql", "--limit", "2")
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert err[0] == (f"error: {out / 'trajectories.jsonl'} holds the episodes of another question (--limit: 3 -> 2); "
                      f"pass another --out, or --overwrite to replace it")
    assert (out / "trajectories.jsonl").read_bytes() == before
    proc = _eval(out, tasks_root, "--families", "toy_sql", "--limit", "3", "--max-turns", "3")
    assert proc.returncode == 2 and "env.max_turns: 15 -> 3" in proc.stderr, proc.stderr
    assert proc.stderr.strip().endswith("pass another --out, or --overwrite to replace it"), proc.stderr
    assert _eval(out, tasks_root, "--families", "toy_sql", "--limit", "3").returncode == 0  # the same one resumes
    assert (out / "trajectories.jsonl").read_bytes() == before and (out / "report.json").is_file()


@pytest.mark.parametrize(("flag", "value", "wanted"), [
    ("--max-turns", "0", "an integer >= 1"), ("--limit", "0", "an integer >= 1"), ("-k", "-1", "an integer >= 1"),
    ("--concurrency", "0", "an integer >= 1"), ("--temperature", "-0.5", "a number >= 0"),
    ("--top-p", "1.5", "a number in (0, 1]"), ("--max-tokens", "0", "an integer >= 1"),
    ("--timeout", "nan", "a number > 0"), ("--seed", "-1", "an integer >= 0"), ("--max-turns", "two", "an integer")])
def test_numeric_flags_out_of_range_are_refused_when_parsed(flag, value, wanted, tmp_path, capsys):
    from medagentgym.cli.evaluate import main

    with pytest.raises(SystemExit) as stop:
        main(["--policy", "oracle", "--families", "toy_sql", "--tasks-root", str(tmp_path / "tasks"), "--out",
              str(tmp_path / "o"), flag, value])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"argument {flag}: '{value}' is" in err and wanted in err
    assert "error: argument" in err.strip().splitlines()[-1]
    assert not (tmp_path / "tasks").exists(), "refused before building anything"
