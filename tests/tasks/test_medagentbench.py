"""medagentbench: the contract, the branch coverage, strict order grading, and real episodes over a bridge."""

from __future__ import annotations

import copy
import json
import time

import pytest

from medagentgym import tasks
from medagentgym.tasks.base import GradeContext
from medagentgym.tasks.medagentbench import CATEGORIES, MedAgentBench

ENTRY = "medagentgym.tasks.medagentbench:MedAgentBench"


@pytest.fixture(scope="module")
def fam(tmp_path_factory):
    tasks.register("medagentbench", entry_point=ENTRY, max_turns=10, replace=True)
    root = tmp_path_factory.mktemp("mab")
    start = time.process_time()  # CPU, not the clock (issue #29): ~0.5 s here, whatever the host's load
    family = tasks.make("medagentbench", root=root)
    family.build(root, size="tiny", seed=0)
    family.build_seconds = time.process_time() - start
    return family


def _all(fam):
    return fam.instances("train") + fam.instances("test")


def _one(fam, category):
    return next(i for i in _all(fam) if i.category == category)


def _submit(gold, **changes):
    sub = copy.deepcopy(gold)
    sub.update(changes)
    return json.dumps(sub)


def test_contract_and_tiny_build_time(fam):
    report = tasks.check_family("medagentbench", size="tiny", seed=0)
    assert report["train"]["oracle"] == 1.0 and report["test"]["oracle"] == 1.0
    assert report["train"]["base_rate"] < 0.3
    assert fam.build_seconds < 10


def test_every_branch_occurs_and_counts_match(fam):
    items = _all(fam)
    assert {i.category for i in items} == set(CATEGORIES)
    assert len(items) == fam.counts("tiny")["instances"]
    assert fam.counts("default")["instances"] >= 2000
    assert all(i.data == {} and "Patient not found" not in i.context for i in items)  # nothing hidden is mounted


def test_no_order_when_not_indicated(fam):
    inst = _one(fam, "task5_normal")
    gold = json.loads(inst.answer)
    assert gold["POST"] == []
    assert fam.grade(inst, json.dumps(gold["GET"])).correct
    needless = json.loads(_one(fam, "task5_moderate").answer)["POST"][0]
    needless["subject"] = {"reference": f"Patient/{inst.metadata['slots']['mrn']}"}
    assert not fam.grade(inst, _submit(gold, POST=[needless])).correct


def test_magnesium_dose_route_and_fields_are_checked(fam):
    inst = _one(fam, "task5_moderate")
    gold = json.loads(inst.answer)
    assert fam.grade(inst, inst.answer).correct
    assert not fam.grade(inst, json.dumps(gold["GET"])).correct  # the order is missing
    order = gold["POST"][0]
    for path, value in ((("doseAndRate", "doseQuantity", "value"), 1), (("doseAndRate", "rateQuantity", "value"), 4),
                        (("route", "text"), "oral")):
        bad = copy.deepcopy(order)
        node = bad["dosageInstruction"][0]
        for key in path[:-1]:
            node = node[key][0] if key == "doseAndRate" else node[key]
        node[path[-1]] = value
        assert not fam.grade(inst, _submit(gold, POST=[bad])).correct, path
    for key, value in (("status", "draft"), ("intent", "plan"), ("authoredOn", "2023-11-12T10:15:00+00:00"),
                       ("subject", {"reference": "Patient/S0000001"})):
        assert not fam.grade(inst, _submit(gold, POST=[{**order, key: value}])).correct, key
    assert not fam.grade(inst, _submit(gold, POST=[order, order])).correct  # one order, not two
    loose = copy.deepcopy(order)
    loose["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"]["value"] = 2.0
    assert fam.grade(inst, _submit(gold, POST=[loose])).correct


def test_potassium_dose_tolerance_and_two_orders(fam):
    inst = _one(fam, "task9_low")
    gold = json.loads(inst.answer)
    assert sorted(p["resourceType"] for p in gold["POST"]) == ["MedicationRequest", "ServiceRequest"]
    med = next(p for p in gold["POST"] if p["resourceType"] == "MedicationRequest")
    lab = next(p for p in gold["POST"] if p["resourceType"] == "ServiceRequest")
    dose = med["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"]
    assert dose["value"] == pytest.approx((3.5 - gold["GET"][0]) / 0.1 * 10, abs=0.1)
    for delta, ok in ((0.05, True), (0.5, False)):
        changed = copy.deepcopy(med)
        changed["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"]["value"] = dose["value"] + delta
        assert fam.grade(inst, _submit(gold, POST=[lab, changed])).correct is ok
    assert not fam.grade(inst, _submit(gold, POST=[med])).correct
    assert not fam.grade(inst, _submit(gold, POST=[med, {**lab, "occurrenceDateTime": "2023-11-15T08:00:00+00:00"}]))\
        .correct


def test_answers_are_compared_strictly(fam):
    inst = _one(fam, "task4_recent")
    value = json.loads(inst.answer)["GET"][0]
    assert fam.grade(inst, json.dumps([value])).correct
    assert fam.grade(inst, f"[{value + 0.005}]").correct
    for bad in (f"[{value}, {value + 1}]", f"{value}", f"The answer is {value}", "[]", f"[{value + 0.3}]"):
        assert not fam.grade(inst, bad).correct, bad
    a1c = _one(fam, "task10_recent")
    val, when = json.loads(a1c.answer)["GET"]
    assert fam.grade(a1c, json.dumps([val, when.replace("+00:00", "Z")])).correct
    assert not fam.grade(a1c, json.dumps([val, "2020-01-01T00:00:00+00:00"])).correct
    found = _one(fam, "task1_not_found")
    assert fam.grade(found, '["Patient not found"]').correct and not fam.grade(found, '["S1234567"]').correct


def test_bp_note_and_referral_payloads(fam):
    bp = _one(fam, "task3_record_bp")
    gold = json.loads(bp.answer)
    obs = gold["POST"][0]
    assert fam.grade(bp, _submit(gold, POST=[{**obs, "valueString": " " + obs["valueString"] + " "}])).correct
    assert not fam.grade(bp, _submit(gold, POST=[{**obs, "valueString": "120/80 mmHg"}])).correct
    assert not fam.grade(bp, _submit(gold, POST=[{**obs, "code": {"text": "HR"}}])).correct
    ref = _one(fam, "task8_referral")
    gold = json.loads(ref.answer)
    order = gold["POST"][0]
    assert fam.grade(ref, _submit(gold, POST=[{**order, "note": [order["note"]]}])).correct
    assert not fam.grade(ref, _submit(gold, POST=[{**order, "note": {"text": "please see"}}])).correct
    assert not fam.grade(ref, _submit(gold, POST=[{**order, "priority": "routine"}])).correct


@pytest.fixture(scope="module")
def bwrap_pool():
    from medagentgym.sandbox import SandboxUnavailable, make_pool

    try:
        pool = make_pool("bwrap", workers=1)
    except SandboxUnavailable as exc:
        pytest.skip(f"bwrap unavailable: {exc}")
    yield pool
    pool.close()


def test_episodes_post_to_their_own_server_only(fam, bwrap_pool):
    inst = _one(fam, "task5_severe")
    mrn = inst.metadata["slots"]["mrn"]
    count = ("import json, urllib.request\nb = json.load(urllib.request.urlopen("
             f"'http://127.0.0.1:8080/fhir/MedicationRequest?patient={mrn}', timeout=5))\nprint(len(b['entry']))")
    first = fam.open_episode(inst)
    try:
        with bwrap_pool.session(bridges=first.bridges) as s:
            before = int(s.run_python(count).stdout)
            run = s.run_python(inst.solution)
            assert run.ok, run.stderr
            assert json.loads(run.stdout.strip().splitlines()[-1]) == json.loads(inst.answer)
            assert int(s.run_python(count).stdout) == before + 1
            ctx = GradeContext(session=s, workspace=s.workspace, family_dir=fam.root)
            assert fam.grade(inst, json.dumps(json.loads(inst.answer)["GET"]), ctx).correct
            outside = s.run_python("import socket\ntry:\n    socket.create_connection(('10.0.0.1', 80), timeout=2)\n"
                                   "    print('reached')\nexcept OSError:\n    print('blocked')")
            assert outside.stdout.strip() == "blocked"
    finally:
        first.close()
    second = fam.open_episode(inst)
    try:
        with bwrap_pool.session(bridges=second.bridges) as s:
            assert int(s.run_python(count).stdout) == before  # the first episode's order is not here
            ctx = GradeContext(session=s, workspace=s.workspace, family_dir=fam.root)
            # with a live episode server, a POST list in the submission does not count: nothing was ordered
            assert not fam.grade(inst, inst.answer, ctx).correct
    finally:
        second.close()
    assert fam.grade(inst, inst.answer, ctx).error  # the episode is gone: a loud grader error, not a silent 0
    with bwrap_pool.session() as s:  # a live session without the bridge cannot be graded from the submission
        verdict = fam.grade(inst, inst.answer, GradeContext(session=s, workspace=s.workspace, family_dir=fam.root))
        assert not verdict.correct and "bridge" in verdict.error
    assert isinstance(tasks.make("medagentbench", root=fam.root, fhir_base_url="http://127.0.0.1:9/fhir/"),
                      MedAgentBench)


def test_reference_programs_pass_in_real_episodes_for_every_branch(fam, bwrap_pool):
    for category in CATEGORIES:
        inst = _one(fam, category)
        episode = fam.open_episode(inst)
        try:
            with bwrap_pool.session(bridges=episode.bridges) as s:
                for step in fam.reference_solution(inst)[:-1]:
                    assert s.run_python(step["params"]["code"]).ok, category
                ctx = GradeContext(session=s, workspace=s.workspace, family_dir=fam.root)
                answers = json.dumps(json.loads(inst.answer)["GET"])
                verdict = fam.grade(inst, answers, ctx)
                assert verdict.correct, (category, verdict.reason)
                assert len(episode.posts) == len(json.loads(inst.answer)["POST"])
        finally:
            episode.close()


def test_external_server_adapter_proxies_reads_and_keeps_posts(fam, tmp_path):
    import http.client
    import socket

    from medagentgym.tasks.fhir import FhirServer, FhirStore

    def call(path, method="GET", body=None):
        conn = http.client.HTTPConnection("localhost")
        conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.sock.connect(str(episode.bridges[8080]))
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())

    mrn = _one(fam, "task2_age").metadata["slots"]["mrn"]
    upstream_store = FhirStore(fam.base_data())
    with FhirServer(upstream_store, port=0) as upstream:
        external = MedAgentBench(fam.root, fhir_base_url=upstream.url)
        episode = external.open_episode()
        try:
            status, bundle = call(f"/fhir/Patient?identifier={mrn}")
            assert status == 200 and bundle["entry"][0]["resource"]["id"] == mrn
            order = {"resourceType": "ServiceRequest", "subject": {"reference": f"Patient/{mrn}"}}
            assert call("/fhir/ServiceRequest", "POST", json.dumps(order))[0] == 201
            assert [p["resourceType"] for p in episode.posts] == ["ServiceRequest"]
            assert upstream_store.created == []  # the shared external server is never written to
        finally:
            episode.close()
    bundle = json.loads(fam.export_bundle(tmp_path / "bundle.json").read_text())
    assert bundle["type"] == "transaction" and len(bundle["entry"]) == len(fam.base_data().by_id)
