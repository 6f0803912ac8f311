"""The synthetic FHIR server: patients, searches, per-episode creates, HTTP over a Unix socket, the proxy."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.request

import pytest

from medagentgym.tasks.fhir import BaseData, FhirServer, FhirStore, ProxyStore, generate_patients, open_episode_server
from medagentgym.tasks.fhir.patients import A1C_BRANCHES, GLU_BRANCHES, K_BRANCHES, MG_BRANCHES, profiles


@pytest.fixture(scope="module")
def resources():
    return generate_patients(12, seed=3)


@pytest.fixture(scope="module")
def base(resources):
    return BaseData(resources)


def _entries(bundle):
    assert bundle["resourceType"] == "Bundle" and bundle["type"] == "searchset"
    return [e["resource"] for e in bundle["entry"]]


def test_patients_are_deterministic_unique_and_cover_every_branch(resources):
    assert generate_patients(12, seed=3) == resources
    assert generate_patients(12, seed=4) != resources
    patients = [r for r in resources if r["resourceType"] == "Patient"]
    mrns = [p["id"] for p in patients]
    assert len(set(mrns)) == 12 and all(m[0] == "S" and len(m) == 8 and m[1:].isdigit() for m in mrns)
    block = profiles(6, seed=0)
    for lab, branches in (("MG", MG_BRANCHES), ("K", K_BRANCHES), ("GLU", GLU_BRANCHES), ("A1C", A1C_BRANCHES)):
        assert {p[lab] for p in block} == set(branches)


def test_patient_searches_and_read(base, resources):
    store = FhirStore(base)
    patient = next(r for r in resources if r["resourceType"] == "Patient")
    name = patient["name"][0]
    status, bundle = store.request("GET", "/fhir/Patient", f"given={name['given'][0]}&family={name['family']}"
                                                           f"&birthdate={patient['birthDate']}&_format=json")
    assert status == 200 and [p["id"] for p in _entries(bundle)] == [patient["id"]]
    assert [p["id"] for p in _entries(store.request("GET", "/fhir/Patient", f"identifier={patient['id']}")[1])] \
        == [patient["id"]]
    assert store.request("GET", f"/fhir/Patient/{patient['id']}")[1]["birthDate"] == patient["birthDate"]
    status, body = store.request("GET", "/fhir/Patient/S0000000")
    assert status == 404 and body["resourceType"] == "OperationOutcome"
    assert store.request("GET", "/fhir/Patient", "birthdate=1800-01-01")[1]["entry"] == []
    city = patient["address"][0]["city"]
    by_city = _entries(store.request("GET", "/fhir/Patient", f"address-city={city}&_count=100")[1])
    assert patient["id"] in {p["id"] for p in by_city} and all(p["address"][0]["city"] == city for p in by_city)


def test_observation_code_date_and_sort(base, resources):
    store = FhirStore(base)
    mg = [r for r in resources if r["resourceType"] == "Observation" and r["code"]["text"] == "MG"]
    pid = mg[0]["subject"]["reference"].split("/")[1]
    mine = sorted((o for o in mg if o["subject"]["reference"] == f"Patient/{pid}"), key=lambda o: o["effectiveDateTime"])
    got = _entries(store.request("GET", "/fhir/Observation", f"patient={pid}&code=MG&_sort=-date&_count=5000")[1])
    assert [o["id"] for o in got] == [o["id"] for o in reversed(mine)]
    since = "ge2023-11-12T10:15:00%2B00:00"
    recent = _entries(store.request("GET", "/fhir/Observation", f"patient={pid}&code=MG&date={since}")[1])
    assert all(o["effectiveDateTime"] >= "2023-11-12T10:15:00+00:00" for o in recent)
    assert len(recent) == sum(o["effectiveDateTime"] >= "2023-11-12T10:15:00+00:00" for o in mine)
    status, body = store.request("GET", "/fhir/Observation", "patient=x&colour=red")
    assert status == 400 and "colour" in body["issue"][0]["diagnostics"]


def test_creates_are_per_store(base, resources):
    pid = next(r["id"] for r in resources if r["resourceType"] == "Patient")
    first, second = FhirStore(base), FhirStore(base)
    order = {"resourceType": "ServiceRequest", "status": "active", "subject": {"reference": f"Patient/{pid}"},
             "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]}}
    status, created = first.request("POST", "/fhir/ServiceRequest", "", json.dumps(order).encode())
    assert status == 201 and created["id"]
    assert [r["id"] for r in _entries(first.request("GET", "/fhir/ServiceRequest", f"patient={pid}&code=4548-4")[1])] \
        == [created["id"]]
    assert _entries(second.request("GET", "/fhir/ServiceRequest", f"patient={pid}&code=4548-4")[1]) == []
    assert second.created == [] and len(first.created) == 1
    assert first.request("POST", "/fhir/Observation", "", json.dumps(order).encode())[0] == 400
    assert first.request("POST", "/fhir/Observation", "", b"{not json")[0] == 400
    assert first.request("GET", "/fhir/Banana", "")[0] == 404


def _unix_get(path, target):
    conn = http.client.HTTPConnection("localhost")
    conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.sock.connect(str(path))
    conn.request("GET", target)
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def _unix_post(path, target, resource):
    conn = http.client.HTTPConnection("localhost")
    conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.sock.connect(str(path))
    conn.request("POST", target, body=json.dumps(resource), headers={"Content-Type": "application/fhir+json"})
    resp = conn.getresponse()
    return resp.status, resp.getheader("Location"), json.loads(resp.read())


def test_episode_servers_over_unix_sockets_are_isolated(base, resources):
    pid = next(r["id"] for r in resources if r["resourceType"] == "Patient")
    one, two = open_episode_server(base), open_episode_server(base)
    try:
        assert _unix_get(one.socket_path, "/fhir/metadata")[1]["resourceType"] == "CapabilityStatement"
        status, location, body = _unix_post(one.socket_path, "/fhir/Observation",
                                            {"resourceType": "Observation", "subject": {"reference": f"Patient/{pid}"},
                                             "code": {"text": "BP"}, "valueString": "120/80 mmHg"})
        assert status == 201 and location.startswith(f"Observation/{body['id']}")
        assert len(_entries(_unix_get(one.socket_path, f"/fhir/Observation?patient={pid}&code=BP")[1])) == 1
        assert _entries(_unix_get(two.socket_path, f"/fhir/Observation?patient={pid}&code=BP")[1]) == []
    finally:
        one.close()
        two.close()
    assert not one.socket_path.exists() and not one.socket_path.parent.exists()


def test_proxy_forwards_reads_and_keeps_posts_local(base, resources):
    pid = next(r["id"] for r in resources if r["resourceType"] == "Patient")
    upstream_store = FhirStore(base)
    with FhirServer(upstream_store, port=0) as upstream:
        proxy = ProxyStore(upstream.url)
        status, bundle = proxy.request("GET", "/fhir/Patient", f"identifier={pid}")
        assert status == 200 and [p["id"] for p in _entries(bundle)] == [pid]
        assert proxy.request("GET", "/fhir/Patient/S0000000")[0] == 404
        status, _ = proxy.request("POST", "/fhir/ServiceRequest", "",
                                        json.dumps({"resourceType": "ServiceRequest"}).encode())
        assert status == 201 and len(proxy.created) == 1 and upstream_store.created == []
        body = json.load(urllib.request.urlopen(upstream.url + "metadata", timeout=5))
        assert body["fhirVersion"] == "4.0.1"
    assert ProxyStore("http://127.0.0.1:9/fhir/").request("GET", "/fhir/metadata")[0] == 502
    with pytest.raises(ValueError, match="http"):
        ProxyStore("localhost:8080")


def test_hostile_and_sloppy_requests_get_clear_answers(base, resources):
    store = FhirStore(base)
    pid = next(r["id"] for r in resources if r["resourceType"] == "Patient")
    # an unescaped '+' in a date arrives as a space; it is read as the offset it was meant to be
    status, _ = store.request("GET", "/fhir/Observation", f"patient={pid}&code=GLU&date=ge2023-11-12T10:15:00+00:00")
    assert status == 200
    assert store.request("GET", "/fhir/Observation", f"patient={pid}&_count=lots")[0] == 400
    deep = b"[" * 100000 + b"]" * 100000
    assert store.request("POST", "/fhir/Observation", "", deep)[0] == 400
    assert store.request("DELETE", "/fhir/Observation/1")[0] == 405


def test_an_episode_store_keeps_a_bounded_number_of_bytes(base):
    """Every POST is kept in the host's memory for grading: ~450 MB per episode at the resource cap before."""
    store, proxy = FhirStore(base), ProxyStore("http://127.0.0.1:9/fhir/")
    body = json.dumps({"resourceType": "Observation", "note": "x" * 900_000}).encode()
    for target in (store, proxy):
        statuses = [target.request("POST", "/fhir/Observation", "", body)[0] for _ in range(40)]
        kept = sum(len(json.dumps(r)) for r in target.created)
        assert statuses[0] == 201 and statuses[-1] in (413, 429), statuses
        assert kept <= 8 << 20, kept
        small = json.dumps({"resourceType": "Observation"}).encode()
        assert target.request("POST", "/fhir/Observation", "", small)[0] in (201, 413, 429)


def test_a_post_without_a_byte_count_is_refused_before_it_is_read(base):
    with open_episode_server(base) as server:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(10)
        conn.connect(str(server.socket_path))
        # read(-1) would hold the thread and every byte sent until the client closed the connection
        conn.sendall(b"POST /fhir/Observation HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n" + b"x" * 100_000)
        assert conn.recv(100).startswith(b"HTTP/1.1 400")  # at once (it timed out waiting before)
        conn.close()
