"""An in-memory FHIR R4 store: the searches MedAgentBench needs, and POST creates kept per episode.

A :class:`BaseData` holds the synthetic resources once (read-only, indexed by type and patient). Each episode
gets its own :class:`FhirStore` over it: reads see the base data plus that episode's own creations; writes go
to the store's ``created`` log only, so one episode never sees another's orders. ``FhirStore.request`` maps
``(method, path, query, body)`` to ``(status, json)`` and is what the HTTP server calls.

Search parameters (string matches are case-insensitive prefix matches, as in FHIR):

* Patient: ``_id``, ``identifier``, ``name``, ``family``, ``given``, ``birthdate``, ``gender``, ``telecom``,
  ``address``, ``address-city``, ``address-state``, ``address-postalcode``;
* Observation: ``patient``/``subject``, ``code`` (coding code or text), ``category``, ``date``;
* MedicationRequest, ServiceRequest, Condition, Procedure: ``patient``/``subject``, ``code``, ``category``,
  ``date`` (authoredOn / recordedDate / performedDateTime), ``status``;
* all: ``_count``, ``_sort`` (``date``/``-date``), ``_format`` (ignored: JSON always). Dates take the FHIR
  prefixes ``eq ne gt lt ge le`` and may repeat (``date=ge2023-11-12&date=lt2023-11-13``).
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import re
import threading
from collections import defaultdict
from typing import Any
from urllib.parse import parse_qs

TYPES = ("Patient", "Observation", "MedicationRequest", "ServiceRequest", "Condition", "Procedure")
_DATE_FIELD = {"Observation": "effectiveDateTime", "MedicationRequest": "authoredOn", "ServiceRequest": "authoredOn",
               "Condition": "recordedDate", "Procedure": "performedDateTime"}
_CODE_FIELD = {"Observation": "code", "MedicationRequest": "medicationCodeableConcept", "ServiceRequest": "code",
               "Condition": "code", "Procedure": "code"}
_PREFIXES = ("eq", "ne", "gt", "lt", "ge", "le")
_PATIENT_PARAMS = {"_id", "identifier", "name", "family", "given", "birthdate", "gender", "telecom", "address",
                   "address-city", "address-state", "address-postalcode"}
_OTHER_PARAMS = {"code", "category", "date", "status"}
#: POSTs one episode may make (a runaway loop must not exhaust the host's memory).
MAX_CREATES = 500
#: Bytes of POSTed bodies one episode's store keeps in the host's memory (a real order is ~1 KB).
MAX_CREATED_BYTES = 4 << 20
_IGNORED = {"_format", "_pretty", "_summary"}


class FhirError(Exception):
    """A request the server answers with an OperationOutcome (status, one-line diagnostics)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def outcome(message: str, code: str = "invalid") -> dict[str, Any]:
    """An OperationOutcome with one issue."""
    return {"resourceType": "OperationOutcome",
            "issue": [{"severity": "error", "code": code, "diagnostics": message}]}


def parse_when(text: str) -> tuple[dt.datetime, dt.datetime]:
    """The [start, end) instant range a FHIR date/dateTime covers (a day, a minute, or one instant)."""
    text = re.sub(r" (\d\d:?\d\d)$", r"+\1", text.strip()).replace("Z", "+00:00")  # an unescaped '+'
    try:
        if len(text) == 10:
            start = dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)
            return start, start + dt.timedelta(days=1)
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise FhirError(400, f"bad date {text!r}: use YYYY-MM-DD or an ISO date-time like 2023-11-13T10:15:00+00:00")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value, value + dt.timedelta(microseconds=1)


def _date_ok(value: str | None, criterion: str) -> bool:
    if not value:
        return False
    prefix, rest = (criterion[:2], criterion[2:]) if criterion[:2] in _PREFIXES else ("eq", criterion)
    lo, hi = parse_when(rest)
    v_lo = parse_when(value)[0]
    return {"eq": lo <= v_lo < hi, "ne": not lo <= v_lo < hi, "gt": v_lo >= hi, "ge": v_lo >= lo,
            "lt": v_lo < lo, "le": v_lo < hi}[prefix]


def _codes(concept: Any) -> set[str]:
    if not isinstance(concept, dict):
        return set()
    found = {str(c.get("code", "")).lower() for c in concept.get("coding", []) or [] if isinstance(c, dict)}
    if concept.get("text"):
        found.add(str(concept["text"]).lower())
    return found


def _category_codes(resource: dict[str, Any]) -> set[str]:
    cats = resource.get("category") or []
    cats = cats if isinstance(cats, list) else [cats]
    return set().union(*(_codes(c) for c in cats)) if cats else set()


def _subject_id(resource: dict[str, Any]) -> str | None:
    if resource.get("resourceType") == "Patient":
        return resource.get("id")
    ref = (resource.get("subject") or {}).get("reference", "") if isinstance(resource.get("subject"), dict) else ""
    return ref.rsplit("/", 1)[-1] if ref else None


def _patient_match(p: dict[str, Any], key: str, value: str) -> bool:
    v = value.lower()
    names = p.get("name") or []
    if key == "identifier":
        return any(i.get("value", "").lower() == v.rsplit("|", 1)[-1] for i in p.get("identifier", []))
    if key == "family":
        return any(n.get("family", "").lower().startswith(v) for n in names)
    if key == "given":
        return any(g.lower().startswith(v) for n in names for g in n.get("given", []))
    if key == "name":
        parts = [n.get("family", "") for n in names] + [g for n in names for g in n.get("given", [])]
        return any(part.lower().startswith(v) for part in parts)
    if key == "birthdate":
        return _date_ok(p.get("birthDate"), value)
    if key == "gender":
        return p.get("gender", "").lower() == v
    if key == "_id":
        return p.get("id", "").lower() == v
    if key == "telecom":
        return any(t.get("value", "").lower() == v for t in p.get("telecom", []))
    if key.startswith("address"):
        field = {"address": None, "address-city": "city", "address-state": "state",
                 "address-postalcode": "postalCode"}[key]
        for addr in p.get("address", []):
            parts = [addr.get(field, "")] if field else [*addr.get("line", []), addr.get("city", ""),
                                                         addr.get("state", ""), addr.get("postalCode", "")]
            if any(str(part).lower().startswith(v) for part in parts):
                return True
        return False
    raise FhirError(400, f"unknown Patient search parameter {key!r}")


class BaseData:
    """Read-only resources, indexed by type and by patient id (shared by every episode's store)."""

    def __init__(self, resources: list[dict[str, Any]]) -> None:
        self.by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.by_patient: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        self.by_id: dict[tuple[str, str], dict[str, Any]] = {}
        for res in resources:
            rtype = res["resourceType"]
            self.by_type[rtype].append(res)
            self.by_id[(rtype, res["id"])] = res
            subject = _subject_id(res)
            if subject:
                self.by_patient[(rtype, subject)].append(res)


class FhirStore:
    """One episode's view: the shared base data plus the resources this episode created.

    Attributes:
        created: Every accepted POST, in order, as the stored resource (with its server-assigned ``id``).
    """

    def __init__(self, base: BaseData) -> None:
        self.base = base
        self.created: list[dict[str, Any]] = []
        self.created_bytes = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    # -- public API ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, query: str = "", body: bytes | None = None) -> tuple[int, dict]:
        """Answer one REST call: ``GET [base]/Type?...``, ``GET [base]/Type/id``, ``POST [base]/Type``, ``metadata``.

        Returns:
            ``(http_status, json_body)``; errors come back as an OperationOutcome, never as an exception.
        """
        try:
            parts = [p for p in path.split("/") if p]
            if parts and parts[0] == "fhir":
                parts = parts[1:]
            if method == "GET" and parts == ["metadata"]:
                return 200, self.capability()
            if not parts or parts[0] not in TYPES or len(parts) > 2:
                raise FhirError(404, f"unknown resource path {path!r}: use [base]/<{'|'.join(TYPES)}>[/<id>]")
            if method == "POST" and len(parts) == 1:
                return 201, self.create(parts[0], body or b"")
            if method != "GET":
                raise FhirError(405, f"{method} {path} is not supported: use GET (search/read) or POST (create)")
            if len(parts) == 2:
                return 200, self.read(parts[0], parts[1])
            return 200, self.search(parts[0], parse_qs(query, keep_blank_values=False))
        except FhirError as exc:
            return exc.status, outcome(str(exc), "not-found" if exc.status == 404 else "invalid")
        except (RecursionError, MemoryError, TypeError, AttributeError) as exc:  # hostile or odd input
            return 400, outcome(f"cannot process this request ({type(exc).__name__}); send plain FHIR JSON")

    def capability(self) -> dict[str, Any]:
        """A minimal CapabilityStatement (the health check)."""
        return {"resourceType": "CapabilityStatement", "status": "active", "kind": "instance", "fhirVersion": "4.0.1",
                "format": ["json"], "rest": [{"mode": "server", "resource": [
                    {"type": t, "interaction": [{"code": "read"}, {"code": "search-type"}, {"code": "create"}]}
                    for t in TYPES]}]}

    def read(self, rtype: str, rid: str) -> dict[str, Any]:
        """One resource by id (404 OperationOutcome if absent)."""
        with self._lock:
            for res in self.created:
                if res["resourceType"] == rtype and res["id"] == rid:
                    return copy.deepcopy(res)
        found = self.base.by_id.get((rtype, rid))
        if found is None:
            raise FhirError(404, f"{rtype}/{rid} not found")
        return copy.deepcopy(found)

    def create(self, rtype: str, body: bytes) -> dict[str, Any]:
        """Store a POSTed resource for this episode; returns it with its new ``id`` and ``meta``."""
        import json

        with self._lock:
            if self.created_bytes + len(body) > MAX_CREATED_BYTES:
                raise FhirError(413, f"this episode's created resources would pass {MAX_CREATED_BYTES} bytes; "
                                     "no more are accepted (send one small resource per order)")
        try:
            resource = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise FhirError(400, f"body is not JSON ({exc}); send a FHIR resource as a JSON object")
        if not isinstance(resource, dict):
            raise FhirError(400, "body must be a JSON object (one FHIR resource)")
        if resource.get("resourceType") != rtype:
            raise FhirError(400, f"resourceType {resource.get('resourceType')!r} does not match the URL type {rtype!r}")
        with self._lock:
            if len(self.created) >= MAX_CREATES:
                raise FhirError(429, f"this episode already created {MAX_CREATES} resources; no more are accepted")
            resource["id"] = f"ep-{rtype.lower()}-{next(self._ids)}"
            resource["meta"] = {"versionId": "1"}
            self.created.append(resource)
            self.created_bytes += len(body)
            return copy.deepcopy(resource)

    def search(self, rtype: str, params: dict[str, list[str]]) -> dict[str, Any]:
        """A searchset Bundle of the matching resources."""
        params = {k: v for k, v in params.items() if k not in _IGNORED}
        count_text = params.pop("_count", ["1000"])[-1]
        if not count_text.isdigit():
            raise FhirError(400, f"_count={count_text!r} must be a non-negative integer")
        count = int(count_text)
        sort = params.pop("_sort", [None])[-1]
        patient = (params.pop("patient", []) + params.pop("subject", []))
        known = _PATIENT_PARAMS if rtype == "Patient" else _OTHER_PARAMS
        unknown = sorted(set(params) - known)
        if unknown:
            raise FhirError(400, f"unknown {rtype} search parameter {unknown[0]!r}; supported: {', '.join(sorted(known))}")
        if rtype == "Patient":
            pool = self._all(rtype)
        elif patient:
            pool = self._for_patient(rtype, patient[-1].rsplit("/", 1)[-1])
        else:
            pool = self._all(rtype)
        hits = [r for r in pool if self._matches(rtype, r, params)]
        if sort:
            key = _DATE_FIELD.get(rtype, "birthDate")
            hits.sort(key=lambda r: parse_when(r.get(key) or "0001-01-01")[0], reverse=sort.startswith("-"))
        total, hits = len(hits), hits[:count]
        return {"resourceType": "Bundle", "type": "searchset", "total": total,
                "entry": [{"fullUrl": f"{r['resourceType']}/{r['id']}", "resource": copy.deepcopy(r),
                           "search": {"mode": "match"}} for r in hits]}

    # -- internals ------------------------------------------------------------------------------------
    def _all(self, rtype: str) -> list[dict[str, Any]]:
        with self._lock:
            mine = [r for r in self.created if r["resourceType"] == rtype]
        return list(self.base.by_type.get(rtype, [])) + mine

    def _for_patient(self, rtype: str, pid: str) -> list[dict[str, Any]]:
        with self._lock:
            mine = [r for r in self.created if r["resourceType"] == rtype and _subject_id(r) == pid]
        return list(self.base.by_patient.get((rtype, pid), [])) + mine

    def _matches(self, rtype: str, res: dict[str, Any], params: dict[str, list[str]]) -> bool:
        for key, values in params.items():
            for value in values:
                if rtype == "Patient":
                    ok = _patient_match(res, key, value)
                elif key == "code":
                    ok = bool({v.strip().lower() for v in value.split(",")} & _codes(res.get(_CODE_FIELD[rtype])))
                elif key == "category":
                    ok = bool({v.strip().lower() for v in value.split(",")} & _category_codes(res))
                elif key == "date":
                    ok = _date_ok(res.get(_DATE_FIELD[rtype]) or res.get("onsetDateTime"), value)
                elif key == "status":
                    ok = str(res.get("status", "")).lower() == value.lower()
                else:
                    raise FhirError(400, f"unknown {rtype} search parameter {key!r}")
                if not ok:
                    return False
        return True
