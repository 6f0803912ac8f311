"""Attacks on the graders, one class at a time, as a reward-hacking policy would try them (issue #11).

Each test asserts containment (no reward without the answer, no host file in a verdict, no hang) AND that the
grading path still serves afterwards (the reference solution still scores 1, on the same pool where there is
one). Classes:

* races: predictions.csv swapped for a FIFO / a symlink to a mode-600 host file / a hard link while the host
  grader reads it (mimic_extract, ehrshot);
* reading gold: a submission that walks ``sys._getframe``, ``inspect.stack()`` and ``gc.get_objects()`` for
  the gold values (biodsbench, biocoder), and fake plots with the right labels (biodsbench);
* crash-to-abstain: forged result lines (biocoder, biodsbench), ``1e999`` / ``nan`` / huge ids / odd unicode /
  very long answers (every family), malformed POST bodies (medagentbench): each a wrong answer with reward 0.0,
  while a genuine infrastructure failure (a closed session, a grader raising ``InfraError``) gives None;
* leaks: what one mimic_extract or ehrshot instance mounts encodes none of its hidden labels.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import threading
import time

import numpy as np
import pandas as pd
import pytest

from medagentgym import tasks
from medagentgym.env_client.episode import grade_submission
from medagentgym.rewards import oracle_reward
from medagentgym.tasks.base import GradeContext, InfraError
from medagentgym.tasks.biocoder import BioCoder
from medagentgym.tasks.biodsbench import MOUNT as DS_MOUNT
from medagentgym.tasks.biodsbench import BioDSBench

SECRET = "HOST-SECRET-7f3a: never in a verdict"
FAMILIES = ("toy_sql", "treqs", "mimic_iii", "eicu", "ehr_seqsql", "ehrcon", "npowerai", "medcalcbench",
            "medagentbench", "biocoder", "biodsbench", "mimic_extract", "ehrshot")


@pytest.fixture(scope="module")
def root(all_families_tiny_root):
    """Every family built once (tiny, seed 0) into one tasks root (the session's shared build; read-only)."""
    assert set(FAMILIES) <= set(tasks.names())
    return all_families_tiny_root


@pytest.fixture(scope="module")
def backend(make_test_pool):
    pool = make_test_pool(1, preload=None)
    pool.close()
    return pool.backend


@pytest.fixture(scope="module")
def pool(make_test_pool):
    pool = make_test_pool(1, preload=None)
    yield pool
    pool.close()


def family(root, name, backend=None):
    if name in ("biocoder", "biodsbench"):
        cls = BioCoder if name == "biocoder" else BioDSBench
        return cls(root=root / name, grader_backend=backend or "bwrap")
    return tasks.make(name, root=root)


def reward_of(fam, inst, answer, ctx=None) -> tuple[float | None, object]:
    """The episode's reward for ``answer``: the real grading path of ``Env`` (grade_submission + oracle_reward).

    Also checks that the verdict serialises (a trajectory that cannot be written would crash the rollout).
    """
    verdict = grade_submission(fam, inst, answer, ctx)
    verdict.model_dump_json()
    return oracle_reward(verdict), verdict


def ds_session(pool, fam):
    return pool.session(mounts={DS_MOUNT: fam.root / "studies"})


def first(fam, category=None, task=None):
    items = fam.instances("test") + fam.instances("train")
    return next(i for i in items if (category is None or i.category == category)
                and (task is None or i.metadata.get("task") == task))


# ---------------------------------------------------------------------------------------------------------
# races: the host grader reads a file the agent keeps swapping
# ---------------------------------------------------------------------------------------------------------
def _gold_predictions(fam, inst) -> str:
    if inst.family == "ehrshot":
        rows = list(csv.reader((fam.root / inst.metadata["hidden_labels"]).read_text().splitlines()))[1:]
        return "id,prediction\n" + "".join(f"{a},{b}\n" for a, b in rows)
    from medagentgym.tasks.mimic_extract import load_hidden_labels

    gold = load_hidden_labels(fam.root / inst.metadata["hidden_labels"], inst.category)
    return pd.DataFrame({"id": gold.index, "prediction": list(gold)}).to_csv(index=False)


@pytest.mark.parametrize("name,category,answer", [("mimic_extract", "mort_icu", "done"),
                                                  ("ehrshot", "guo_los", "predictions.csv")])
def test_race_fifo_symlink_hardlink_swaps_never_hang_or_leak(root, tmp_path, name, category, answer):
    fam = family(root, name)
    inst = first(fam, category)
    secret = tmp_path / "secret.csv"
    secret.write_text(f"id,prediction\n{SECRET},1\n")
    os.chmod(secret, 0o600)
    ws = tmp_path / "workspace"
    ws.mkdir()
    ctx = GradeContext(workspace=ws, family_dir=fam.root)
    target, constant = ws / "predictions.csv", "id,prediction\n1,0\n"
    stop = threading.Event()

    def swapper() -> None:
        kinds, k = ("symlink", "fifo", "hardlink", "regular"), 0
        while not stop.is_set():
            tmp = ws / f".s{k}"
            _swap_one(tmp, kinds[k % 4], secret, constant)
            os.replace(tmp, target)
            k += 1

    verdicts, done = [], threading.Event()

    def grader() -> None:
        for _ in range(40):
            verdicts.append(reward_of(fam, inst, answer, ctx))
            time.sleep(0)
        done.set()

    threads = [threading.Thread(target=swapper, daemon=True), threading.Thread(target=grader, daemon=True)]
    for t in threads:
        t.start()
    try:
        assert done.wait(240), "a grade blocked during the swap race (FIFO?)"
    finally:
        stop.set()
        threads[0].join(10)
    for reward, verdict in verdicts:
        assert reward == 0.0 and SECRET not in verdict.reason + str(verdict.error), verdict
    # still serves: the real predictions, written once, score 1
    for leftover in ws.iterdir():
        leftover.unlink()
    target.write_text(_gold_predictions(fam, inst))
    assert reward_of(fam, inst, answer, ctx)[0] == 1.0


def _swap_one(tmp, kind, secret, constant):
    if kind == "symlink":
        tmp.symlink_to(secret)
    elif kind == "fifo":
        os.mkfifo(tmp)
    elif kind == "hardlink":
        os.link(secret, tmp)
    else:
        tmp.write_text(constant)


# ---------------------------------------------------------------------------------------------------------
# reading gold: frame walking, gc, inspect; fake plots
# ---------------------------------------------------------------------------------------------------------
def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


_HUNT = '''
import gc, hashlib, inspect, json, re, sys
WANT = {want!r}  # variable -> sha256 of the gold value's JSON: the gold itself is NOT in this source
def _h(v):
    try:
        return hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()
    except Exception:
        return None
def _small(v):
    return isinstance(v, (int, float)) or (isinstance(v, (list, dict)) and len(v) <= 50)
strings, values = [], []
f = sys._getframe()
while f is not None:
    for scope in (f.f_locals, f.f_globals):
        for v in list(scope.values()):
            (strings if isinstance(v, str) else values).append(v)
    f = f.f_back
for fr in inspect.stack():
    strings.extend(s for s in (fr.code_context or []) if isinstance(s, str))
if {walk_gc!r}:
    for o in gc.get_objects():
        if isinstance(o, dict):
            for v in list(o.values())[:200]:
                (strings if isinstance(v, str) else values).append(v)
        elif isinstance(o, list) and len(o) <= 50:
            values.append(o)
for s in strings:  # every number in every reachable string (the v1 wrapper's frame held the assert source)
    values.extend(float(x) for x in re.findall(r"-?\\d+\\.\\d+(?:e-?\\d+)?", s[:200000])[:5000])
found = {{}}
for v in values:
    if not _small(v):
        continue
    h = _h(v)
    for name, digest in WANT.items():
        if h == digest:
            found[name] = v
'''


def test_frame_and_gc_walking_finds_no_gold_in_biodsbench(root, pool, backend):
    fam = family(root, "biodsbench", backend)
    inst = first(fam, "km_median_os_by_gene")
    gold = inst.metadata["values"]
    want = {name: _digest(value) for name, value in gold.items()}

    def v1_wrapper(src: str) -> dict:  # v1 ran the hidden asserts in this frame's program: src was reachable
        ns: dict = {}
        exec(compile(_HUNT.format(want=want, walk_gc=False), "<attack>", "exec"), ns)  # noqa: S102 - test code
        return ns["found"]

    v1_src = "".join(f"assert abs(float({n}) - {v!r}) <= 1e-6 * max(1.0, abs({v!r}))\n" for n, v in gold.items())
    assert set(v1_wrapper(v1_src)) == set(gold)  # control: against the v1 layout this hunt finds the gold
    attack = _HUNT.format(want=want, walk_gc=True) + "".join(f"{n} = found.get({n!r}, -1.0)\n" for n in gold)
    with ds_session(pool, fam) as session:
        reward, verdict = reward_of(fam, inst, attack, GradeContext(session=session))
        assert reward == 0.0 and "wrong value" in verdict.reason, verdict
    with ds_session(pool, fam) as session:  # the pool still serves
        assert reward_of(fam, inst, inst.solution, GradeContext(session=session))[0] == 1.0
    fam.close()


def test_frame_and_gc_walking_finds_no_gold_in_biocoder(root, pool, backend):
    """The hidden inputs enter the jail, the expected outputs never do: a function that hunts every frame and
    every gc-tracked list for the gold results (shaped [["ok", value], ...]) finds none."""
    fam = family(root, "biocoder", backend)
    inst = first(fam, task="reverse_complement.complement_rna")
    n, fn = len(inst.metadata["expected"]), inst.metadata["target"]
    attack = f"""
import gc, sys
_calls = []
def _hunt():
    pools, f = [], sys._getframe()
    while f is not None:
        pools.append(list(f.f_locals.values()) + list(f.f_globals.values()))
        f = f.f_back
    for pool in pools + [gc.get_objects()]:
        for o in pool:
            if isinstance(o, list) and len(o) == {n} and all(isinstance(x, list) and len(x) == 2 and x[0] == "ok"
                                                          for x in o):
                return o
def {fn}(seq):
    gold = _hunt()
    _calls.append(seq)
    return gold[len(_calls) - 1][1] if gold else None
"""
    with pool.session() as session:
        reward, verdict = reward_of(fam, inst, attack, GradeContext(session=session))
        assert reward == 0.0 and f"{n} of {n} hidden tests fail" in verdict.reason, verdict
    with pool.session() as session:  # the pool still serves
        assert reward_of(fam, inst, inst.solution, GradeContext(session=session))[0] == 1.0


FAKE_KM = '''
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.step([0, 10, 20, 30], [1.0, 0.8, 0.5, 0.2], where="post", label="Mutant")
ax.step([0, 10, 20, 30], [1.0, 0.9, 0.7, 0.6], where="post", label="Wild type")
ax.set_xlabel("Months")
ax.set_ylabel("Overall survival probability")
ax.set_title({title!r})
fig.savefig({file!r})
'''


def test_fake_curves_with_the_right_labels_score_zero(root, pool, backend):
    fam = family(root, "biodsbench", backend)
    km = first(fam, "km_plot")
    plot = km.metadata["plot"]
    fake = FAKE_KM.format(title=plot["labels"]["title"], file=plot["file"])
    bars = first(fam, "mutation_bar_plot")
    fake_bars = bars.solution.replace("[per_gene[g] for g in top]", "[per_gene[g] + 1 for g in top]")
    hist = first(fam, "age_histogram")
    fake_hist = hist.solution.replace("ax.hist(patients['AGE'], bins=", "ax.hist(patients['AGE'] * 0.9, bins=")
    # a linearly interpolated KM curve is not the step function the estimator is
    linear = km.solution.replace(".plot_survival_function(ax=ax)",
                                 ".survival_function_.plot(ax=ax, legend=False)")
    with ds_session(pool, fam) as session:
        ctx = GradeContext(session=session)
        for inst, code, why in ((km, fake, "no plotted line matches"), (bars, fake_bars, "height"),
                                (hist, fake_hist, "bin"), (km, linear, "no plotted line matches")):
            reward, verdict = reward_of(fam, inst, code, ctx)
            assert reward == 0.0 and why in verdict.reason, (inst.category, verdict.reason)
        for inst in (km, bars, hist):  # still serves, and the real plots pass on data
            assert reward_of(fam, inst, inst.solution, ctx)[0] == 1.0, inst.category
    fam.close()


# ---------------------------------------------------------------------------------------------------------
# crash-to-abstain: whatever makes a grader fail is a wrong answer (0.0); infrastructure failures are None
# ---------------------------------------------------------------------------------------------------------
_FORGE = '''
import os, sys
_tag = sys._getframe({depth}).f_locals.get("tag") or "@@none@@"
sys.__stdout__.write(_tag + {head!r} + _tag + {body!r} + "\\n")
sys.__stdout__.flush()
{tail}
'''
FORGERIES = [
    ("{not json", "x", ""),  # malformed, then the wrapper's genuine line: two lines
    ("{not json", "x", "os._exit(0)"),  # malformed and alone
    ('{"status": 5, "stdout": ""}', "{}", "os._exit(0)"),  # a bad status record
    ('{"status": "ok", "stdout": ""}', '{"defined": true, "results": "x", "values": [1e999]}', "os._exit(0)"),
    ('{"status": "ok", "stdout": ""}', "[" * 5000 + "]" * 5000, "os._exit(0)"),  # deeper than json can parse
    ('{"status": "ok", "stdout": ""}', '{"defined": true, "results": [[' * 50 + "]]" * 50 + "}", "os._exit(0)"),
]


@pytest.mark.parametrize("head,body,tail", FORGERIES)
def test_forged_result_lines_are_wrong_answers_not_errors(root, pool, backend, head, body, tail):
    coder, ds = family(root, "biocoder", backend), family(root, "biodsbench", backend)
    inst_c = first(coder, task="reverse_complement.complement_rna")
    fn = inst_c.metadata["target"]
    forged_c = _FORGE.format(depth=1, head=head, body=body, tail=tail) + f"def {fn}(seq):\n    return seq\n"
    inst_d = first(ds, "cohort_size")
    forged_d = "n_patients = n_samples = 1\n" + _FORGE.format(depth=1, head=head, body=body, tail=tail)
    with pool.session() as session:
        reward, verdict = reward_of(coder, inst_c, forged_c, GradeContext(session=session))
        assert reward == 0.0 and not verdict.infra, verdict
    with ds_session(pool, ds) as session:
        reward, verdict = reward_of(ds, inst_d, forged_d, GradeContext(session=session))
        assert reward == 0.0 and not verdict.infra, verdict
        assert reward_of(ds, inst_d, inst_d.solution, GradeContext(session=session))[0] == 1.0  # still serves
    ds.close()


_PIPE_GARBAGE = ("import os as _os\n_b = b'[' * 100000 + b']' * 100000\n"
                 "_os.write(4, len(_b).to_bytes(4, 'big') + _b)\n")


@pytest.mark.parametrize("where", ["top", "call"])
def test_garbage_on_the_reply_pipe_is_a_wrong_answer_not_an_infrastructure_failure(root, pool, backend, where):
    """Any wrong submission could write a frame nested past the decoder's depth to the runner's reply pipe while
    the grader ran it: the worker answered with an error, the host raised SandboxError, grading said "infra",
    and the wrong answer got reward None (no penalty) in biocoder and biodsbench."""
    coder, ds = family(root, "biocoder", backend), family(root, "biodsbench", backend)
    inst_c = first(coder, task="reverse_complement.complement_rna")
    fn = inst_c.metadata["target"]
    if where == "top":
        sub_c = _PIPE_GARBAGE + f"def {fn}(seq):\n    return seq\n"
    else:  # only when the hidden test calls the function
        body = "\n".join("    " + line for line in _PIPE_GARBAGE.splitlines())
        sub_c = f"def {fn}(seq):\n{body}\n    return seq\n"
    inst_d = first(ds, "cohort_size")
    sub_d = "n_patients = n_samples = 1\n" + _PIPE_GARBAGE
    with pool.session() as session:
        reward, verdict = reward_of(coder, inst_c, sub_c, GradeContext(session=session))
        assert reward == 0.0 and not verdict.infra, verdict
        assert reward_of(coder, inst_c, inst_c.solution, GradeContext(session=session))[0] == 1.0  # still serves
    with ds_session(pool, ds) as session:
        reward, verdict = reward_of(ds, inst_d, sub_d, GradeContext(session=session))
        assert reward == 0.0 and not verdict.infra, verdict
        assert reward_of(ds, inst_d, inst_d.solution, GradeContext(session=session))[0] == 1.0
    ds.close()


def test_text_the_jail_raises_cannot_break_the_stored_verdict(root, pool, backend):
    """An exception message with lone surrogates (JSON "\\ud800" escapes) and megabytes of text reaches the
    verdict's reason: it is made printable and cut, so the trajectory still serialises."""
    coder = family(root, "biocoder", backend)
    inst = first(coder, task="reverse_complement.complement_rna")
    fn = inst.metadata["target"]
    code = f"def {fn}(seq):\n    return seq\nraise ValueError('\\udfff' * 50 + 'x' * 1_000_000)\n"
    with pool.session() as session:
        reward, verdict = reward_of(coder, inst, code, GradeContext(session=session))
        assert reward == 0.0 and "ValueError" in verdict.reason and "\udfff" not in verdict.reason
        assert len(verdict.reason) < 3000
        assert reward_of(coder, inst, inst.solution, GradeContext(session=session))[0] == 1.0


def test_an_infrastructure_failure_is_none_not_zero(root, pool, backend):
    coder = family(root, "biocoder", backend)
    inst = first(coder, task="reverse_complement.complement_rna")
    session = pool.session()
    session.close()  # the worker is no longer this session's: the sandbox raises SessionClosed
    reward, verdict = reward_of(coder, inst, inst.solution, GradeContext(session=session))
    assert reward is None and verdict.infra and "SessionClosed" in verdict.error
    toy = family(root, "toy_sql")

    class Broken:  # a grader whose own dependency is down
        actions = toy.actions

        def grade(self, *_a, **_k):
            raise InfraError("the FHIR server is down")

    reward, verdict = reward_of(Broken(), toy.instances("test")[0], "1")
    assert reward is None and verdict.infra
    with pool.session() as fresh:  # the pool still serves
        assert reward_of(coder, inst, inst.solution, GradeContext(session=fresh))[0] == 1.0


# (Unicode digits are digits: "٣" is a correct answer where the gold is 3, so only implausible values here.)
HOSTILE = ["1e999", "-1e999", "nan", "NaN", "inf", "[1e999]", "[NaN]", "9" * 299, "\ud800", "\x00",
           "\U0001F600" * 100, "٣٣٣٣٣٣٣٣٣", "𝟙𝟚𝟛𝟜𝟝𝟞𝟟𝟠𝟡", "a" * 200_000, "[" * 900 + "]" * 900,
           "[" + ",".join(map(str, range(20000))) + "]", '{"GET": [1e999], "POST": [{"resourceType": 5}]}',
           "0000-00-00", "99999-12-31T25:61"]


@pytest.mark.parametrize("name", ["toy_sql", "treqs", "mimic_iii", "eicu", "ehr_seqsql", "ehrcon", "npowerai",
                                  "medcalcbench", "medagentbench"])
def test_hostile_answers_are_wrong_answers_in_every_text_graded_family(root, name):
    fam = family(root, name)
    by_type = {}
    for inst in fam.instances("test") + fam.instances("train"):
        by_type.setdefault((inst.category, inst.answer_type), inst)
    for inst in list(by_type.values())[:12]:
        for answer in HOSTILE:
            start = time.process_time()
            reward, verdict = reward_of(fam, inst, answer)
            assert reward == 0.0 and not verdict.infra, (inst.id, answer[:30], verdict)
            assert verdict.error is None, (inst.id, answer[:30], verdict.error)  # the grader itself held
            assert time.process_time() - start < 10, (inst.id, answer[:30])  # no quadratic blow-up
        assert reward_of(fam, inst, fam.reference_solution(inst)[-1]["params"]["answer"])[0] == 1.0


HOSTILE_ROWS = ["1e999,0.5", "nan,0.5", "inf,1", "99999999999999999999999999999,0.5", "\u00e9\u0301,0.5",
                "1," + "9" * 5000, "-0,0.5", "1.5,0.5", ",", '"' + "x" * 200_000 + '",1']


@pytest.mark.parametrize("name,category,answer", [("mimic_extract", "mort_icu", "done"),
                                                  ("mimic_extract", "vasopressor", "done"),
                                                  ("ehrshot", "guo_los", "predictions.csv"),
                                                  ("ehrshot", "chexpert", "predictions.csv")])
def test_hostile_prediction_files_are_wrong_answers(root, tmp_path, name, category, answer):
    fam = family(root, name)
    inst = first(fam, category)
    ctx = GradeContext(workspace=tmp_path, family_dir=fam.root)
    good = _gold_predictions(fam, inst)
    for row in HOSTILE_ROWS:
        (tmp_path / "predictions.csv").write_text(good + row + "\n", encoding="utf-8", errors="surrogatepass")
        reward, verdict = reward_of(fam, inst, answer, ctx)
        assert reward == 0.0 and verdict.error is None, (row[:30], verdict)
    (tmp_path / "predictions.csv").write_bytes(b"\xff\xfe\x00garbage" * 1000)
    assert reward_of(fam, inst, answer, ctx)[0] == 0.0
    for text in ("1e999", "\ud800", "x" * 100_000):
        assert reward_of(fam, inst, text, ctx)[0] == 0.0
    (tmp_path / "predictions.csv").write_text(good)
    assert reward_of(fam, inst, answer, ctx)[0] == 1.0


MALFORMED_POSTS = [{"code": "BP"}, {"code": ["x"]}, {"category": 5}, {"category": [{"coding": 7}]},
                   {"subject": "Patient/x"}, {"medicationCodeableConcept": {"coding": 5}},
                   {"dosageInstruction": [{"route": 5, "doseAndRate": [{"doseQuantity": 3}]}]},
                   {"dosageInstruction": "x"}, {"authoredOn": "0001-01-01T00:00:00+05:00"},
                   {"note": [{"text": 5}]}, {"valueString": ["a"]}, {"status": {"a": 1}}]


def test_malformed_post_bodies_are_wrong_answers(root):
    """Offline (the submission's POST list) and in an episode (bodies POSTed to the episode's own server, which
    the jail reaches through its bridge)."""
    fam = family(root, "medagentbench")
    for task in ("task3", "task5", "task8", "task9", "task10"):
        cases = [i for i in fam.instances("test") + fam.instances("train")
                 if i.metadata["task"] == task and json.loads(i.answer)["POST"]]
        inst = cases[0]
        gold = json.loads(inst.answer)
        for change in MALFORMED_POSTS:
            body = {**gold["POST"][0], **change}
            # a malformed field the order has is wrong; one it does not have is ignored (never a crash)
            expected = 0.0 if set(change) & set(gold["POST"][0]) else 1.0
            posts = [body, *gold["POST"][1:]]
            reward, verdict = reward_of(fam, inst, json.dumps({"GET": gold["GET"], "POST": posts}))
            assert reward == expected and verdict.error is None, (task, change, verdict)
            episode = fam.open_episode(inst)
            try:
                store = episode.server.store
                for post in posts:
                    assert store.request("POST", f"/fhir/{post['resourceType']}", "", json.dumps(post).encode())[0] == 201

                class Session:
                    bridges = episode.bridges

                reward, verdict = reward_of(fam, inst, json.dumps(gold["GET"]), GradeContext(session=Session()))
                assert reward == expected and verdict.error is None, (task, change, verdict)
            finally:
                episode.close()
        episode = fam.open_episode(inst)  # still serves: the reference orders, POSTed for real, score 1
        try:
            for post in gold["POST"]:
                episode.server.store.request("POST", f"/fhir/{post['resourceType']}", "", json.dumps(post).encode())

            class Session:
                bridges = episode.bridges

            assert reward_of(fam, inst, json.dumps(gold["GET"]), GradeContext(session=Session()))[0] == 1.0
        finally:
            episode.close()


# ---------------------------------------------------------------------------------------------------------
# leaks: what one instance mounts says nothing about its hidden labels
# ---------------------------------------------------------------------------------------------------------
def test_no_instance_mount_encodes_its_hidden_labels(root):
    from sklearn.metrics import roc_auc_score

    from medagentgym.tasks.mimic_extract import load_hidden_labels

    me = family(root, "mimic_extract")
    for inst in me.instances("test"):
        mounted = me.root / inst.data["mimic_extract"]
        files = sorted(p.relative_to(mounted).as_posix() for p in mounted.rglob("*.csv"))
        gold = load_hidden_labels(me.root / inst.metadata["hidden_labels"], inst.category)
        assert not any("window" in f for f in files) if inst.category.startswith(("mort", "los")) else \
            not any("X_lab" in f for f in files)
        counts = pd.concat([pd.read_csv(mounted / f).groupby(pd.read_csv(mounted / f).columns[0]).size()
                            for f in files if "_test" in f], axis=1).fillna(0)
        if inst.category.startswith(("mort", "los")):
            for column in counts:  # rows per test stay in every visible test file: no length of stay in them
                per_id = counts[column].reindex(gold.index.astype(int)).to_numpy()
                assert len(set(per_id)) == 1 and roc_auc_score(gold.to_numpy(), per_id) == 0.5
    eh = family(root, "ehrshot")
    for inst in eh.instances("test"):
        mounted = eh.root / inst.data["ehrshot"]
        truth = {int(r[0]) for r in list(csv.reader((eh.root / inst.metadata["hidden_labels"]).read_text()
                                                    .splitlines()))[1:]}
        for path in mounted.rglob("*"):
            assert path.suffix in (".npy", ".csv") and "hidden" not in path.as_posix()
            if path.name.endswith("labels.csv"):
                ids = {int(r[0]) for r in list(csv.reader(path.read_text().splitlines()))[1:]}
                assert not ids & truth, inst.id
        assert np.load(mounted / "test_embeddings.npy").shape[0] == len(truth)
