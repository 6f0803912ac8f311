"""medagentbench: FHIR R4 agent tasks (look-ups, calculations and orders) against a per-episode server.

Description:
    MedAgentBench's ten task types, re-implemented over synthetic patients (``medagentgym.tasks.fhir``): find a patient's
    MRN, compute an age, record a blood pressure, read the latest magnesium / glucose / potassium / HbA1c
    and, when clinically indicated, place orders (IV magnesium, oral potassium + a morning potassium lab, an
    HbA1c lab, an orthopedic referral). The clock is fixed at 2023-11-13T10:15:00+00:00 and the patients'
    labs sit around it so that every branch occurs (recent vs stale values, low vs normal levels, old vs
    recent HbA1c, no value at all). Every episode gets its OWN server state: a fresh store on its own Unix
    socket, shown to the agent's sandbox as ``http://127.0.0.1:8080/fhir/`` through a sandbox bridge; no
    other address is reachable. Gold answers and gold orders come from EXECUTING the reference program of
    the task type against a fresh server state at build time.

Example instance:
    question: "Check patient S2380961's most recent serum magnesium within the last 24 hours. If it is low, ..."
    context:  "It's 2023-11-13T10:15:00+00:00 now. The code for magnesium is "MG". ... A FHIR R4 server ..."
    answer:   '{"GET": [1.3], "POST": [{"resourceType": "MedicationRequest", ...}]}'   answer_type: "text"
    category: "task5_moderate"   solution: the reference Python program (HTTP calls to the server)

Allowed actions:
    request_info, code_execution (python or shell: ``curl`` works), terminal, debugging, submit_answer.

Grading:
    The submission is a JSON list of answers (``[1.3]``, ``["S2380961"]``, ``[6.4, "2023-02-01T08:00:00+00:00"]``,
    ``[]``); a JSON object ``{"GET": [...], "POST": [...]}`` (MedAgentGym's shape) is accepted too. Values are
    compared element by element (numbers within 0.01, the CBG mean within 0.1, date-times as instants, MRNs
    exactly); a wrong length is wrong. Orders: in an episode, the resources the agent POSTed to its own server
    are graded (a POST list in the submission is then ignored; a session without the FHIR bridge is a grader
    error); only without any session (offline grading, ``tasks.check_family``) is the submission's POST list
    graded. The number of POSTs per resource type must
    equal the reference's (none when no order is indicated), and each POST must carry the required fields:
    resourceType, subject ``Patient/<MRN>``, code system + code, status, intent, priority, authoredOn within
    the clock's minute, route, dose (±0.01 g; potassium ±0.1 mEq) and rate with units, occurrenceDateTime,
    the BP valueString, category and code.text, the referral's note text.

Episode end:
    The graded submit, or a budget (10 turns by default).

Arguments:
    ``tasks.make("medagentbench", root=DIR, fhir_base_url=None)``. ``fhir_base_url`` points episodes at an
    external FHIR server instead (e.g. ``http://localhost:8080/fhir/``): reads are proxied to it, POSTs are
    recorded for the episode and NOT forwarded; the external server must hold the built patients
    (``export_bundle(path)`` writes them as a transaction Bundle to load). ``build(out_dir, size, seed)``
    writes ``<out_dir>/medagentbench/{fhir/resources.json, train.jsonl, test.jsonl, manifest.json}``;
    tiny: 12 patients; default: 240 patients (10 instances each, plus "not found" look-ups, minus the
    do-nothing cases beyond 6 % of a split); 20 % of the patients go to test. Episodes: ``ep = fam.open_episode(instance)``; ``pool.session(..., bridges=ep.bridges)``;
    ``ep.close()`` after grading.

Version history:
    1: first version (10 task types, 22 branch categories, per-episode server, bridge networking).
    2: do-nothing cases rebalanced: instances whose gold is "answer [-1], order nothing" (no magnesium,
       glucose or potassium value where one is asked for) were ~20 % of a build, so a silent ``[-1]`` scored
       ~20 % (a 2026 audit of MedAgentBench found the same "silent finish" ceiling, 41.7 %, and rebuilt the
       benchmark at 8.9 %). Now at most 8 % of a split is such an instance (taken round-robin over the task
       types, so every branch still occurs); the others are not kept. The "Patient not found" look-ups are
       spread over both splits (all of them fell in test, where "Patient not found" scored 10.5 %).
    3: malformed POST bodies and answer values (non-object codes, non-list codings, huge numbers, impossible
       instants) are wrong answers with a reason instead of grader crashes; a missing FHIR bridge is an
       infrastructure failure (``Verdict.infra``).
    4: do-nothing instances capped at 6 % of a split (was 8 %): one constant per task type learned on train
       ("[-1]", "Patient not found") scored 10.3 % of test at default size, above the 10 % per-template bound.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import io
import itertools
import json
import random
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import (
    ALL_ACTIONS,
    GradeContext,
    Instance,
    Size,
    Split,
    TaskError,
    Verdict,
    load_instances,
    run_then_submit,
    write_bytes_atomic,
    write_instances,
    write_manifest,
)
from medagentgym.tasks.fhir.patients import generate_patients, profiles
from medagentgym.tasks.fhir.reference import TEXTS, context_of, instruction, solution_code
from medagentgym.tasks.fhir.server import EpisodeServer, FhirServer, open_episode_server
from medagentgym.tasks.fhir.store import BaseData, FhirStore
from medagentgym.tasks.graders import looks_like_error

FHIR_PORT = 8080
RESOURCES = "fhir/resources.json"
_SIZES = {"tiny": 12, "default": 240}
_TEST_EVERY = 5
_NOT_FOUND_EVERY = 5
#: The most a split's do-nothing instances (answer [-1], no order) may make up: about a fifth of the drawn
#: instances are such, which let a silent "[-1]" score ~20 %; the rest of them are not kept. 6 %, not 8 %: per
#: task type, "[-1]" and task1's "Patient not found" add up (the per-template floor was 10.3 % at 8 %).
IDLE_SHARE = 0.06
TASKS = tuple(TEXTS)
CATEGORIES = ("task1_found", "task1_not_found", "task2_age", "task3_record_bp", "task4_recent", "task4_none",
              "task5_none", "task5_normal", "task5_severe", "task5_moderate", "task5_mild", "task6_recent",
              "task6_none", "task7_found", "task7_none", "task8_referral", "task9_none", "task9_normal",
              "task9_low", "task10_none", "task10_stale", "task10_recent")
_CLOCK = dt.datetime(2023, 11, 13, 10, 15, tzinfo=dt.timezone.utc)
_SBAR = (("acute right knee pain and swelling after a fall", "left hip pain on weight bearing",
          "worsening low back pain radiating to the leg", "a displaced distal radius fracture on x-ray"),
         ("history of osteoarthritis", "on anticoagulation for atrial fibrillation", "type 2 diabetes, well controlled",
          "no prior orthopedic surgery"),
         ("stable vitals, neurovascularly intact", "limited range of motion, pain 7/10", "effusion on exam"),
         ("please evaluate for operative management", "request outpatient orthopedic assessment this week",
          "please assess and advise on imaging and management"))


def _norm(text: Any) -> str:
    return re.sub(r"\s+", " ", str(text)).strip().lower()


def _instant(value: Any) -> dt.datetime | None:
    try:
        parsed = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def _same_minute(value: Any, gold: Any) -> bool:
    got, want = _instant(value), _instant(gold)
    if got is None or want is None:
        return False
    try:
        got = got.astimezone(dt.timezone.utc)
    except OverflowError:  # e.g. year 1 with a positive offset
        return False
    return got.replace(second=0, microsecond=0) == want.replace(second=0, microsecond=0)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):  # OverflowError: an int too large for a float
        return None


def _codings(concept: Any) -> set[tuple[str, str]]:
    coding = concept.get("coding") if isinstance(concept, dict) else None
    if not isinstance(coding, list):
        return set()
    return {(str(c.get("system", "")), str(c.get("code", ""))) for c in coding if isinstance(c, dict)}


def _category_ok(resource: dict[str, Any]) -> bool:
    systems = {"http://hl7.org/fhir/observation-category", "http://terminology.hl7.org/CodeSystem/observation-category"}
    cats = resource.get("category") or []
    return any((s, c) in {(x, "vital-signs") for x in systems}
               for cat in (cats if isinstance(cats, list) else [cats]) for s, c in _codings(cat))


def _dose(resource: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(route text, first doseAndRate entry) of a MedicationRequest; empty when malformed."""
    try:
        dosage = resource["dosageInstruction"][0]
        route = dosage.get("route") or {}
        text = route.get("text") or next((c.get("code") or c.get("display") for c in route.get("coding", [])), "")
        return _norm(text), dosage["doseAndRate"][0]
    except (KeyError, IndexError, TypeError, AttributeError):
        return "", {}


def _quantity_ok(got: Any, want: dict[str, Any], tol: float, units: set[str]) -> bool:
    if not isinstance(got, dict):
        return False
    value = _number(got.get("value"))
    return value is not None and abs(value - float(want["value"])) <= tol and _norm(got.get("unit", "")) in units


def check_post(task: str, got: Any, gold: dict[str, Any]) -> str | None:
    """Why the POSTed ``got`` does not satisfy the reference order ``gold`` (None when it does).

    ``got`` is whatever the agent POSTed: any shape of JSON is a reason, never an exception.
    """
    if not isinstance(got, dict):
        return "a POST body is not a JSON object"
    try:
        return _post_problem(task, got, gold)
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError, RecursionError) as exc:
        return f"a POSTed {gold['resourceType']} is malformed ({type(exc).__name__})"


def _post_problem(task: str, got: dict[str, Any], gold: dict[str, Any]) -> str | None:
    rtype = gold["resourceType"]
    if got.get("resourceType") != rtype:
        return f"expected a {rtype}, got {got.get('resourceType')!r}"
    subject = got.get("subject") if isinstance(got.get("subject"), dict) else {}
    if subject.get("reference") != gold["subject"]["reference"]:
        return f"{rtype}: subject must be {gold['subject']['reference']}"
    for key in ("status", "intent", "priority"):
        if key in gold and _norm(got.get(key, "")) != gold[key]:
            return f"{rtype}: {key} must be {gold[key]!r}"
    for key in ("authoredOn", "occurrenceDateTime", "effectiveDateTime"):
        if key in gold and not _same_minute(got.get(key), gold[key]):
            return f"{rtype}: {key} must be {gold[key]}"
    concept = "medicationCodeableConcept" if rtype == "MedicationRequest" else "code"
    wanted = _codings(gold[concept])
    if wanted and not wanted <= _codings(got.get(concept)):
        return f"{rtype}: {concept} must include {sorted(wanted)}"
    if rtype == "Observation":
        code = got.get("code") if isinstance(got.get("code"), dict) else {}
        if not _category_ok(got) or _norm(code.get("text", "")) != "bp":
            return "Observation: needs the vital-signs category and code.text 'BP'"
        if _norm(got.get("valueString", "")) != _norm(gold["valueString"]):
            return f"Observation: valueString must be {gold['valueString']!r}"
    if "note" in gold:
        notes = got.get("note") if isinstance(got.get("note"), list) else [got.get("note")]
        if not any(isinstance(n, dict) and _norm(gold["note"]["text"]) in _norm(n.get("text", "")) for n in notes):
            return "ServiceRequest: note.text must carry the given free text"
    if rtype == "MedicationRequest":
        route, got_rate = _dose(got)
        want_route, want_rate = _dose(gold)
        tol = 0.1 if task == "task9" else 0.01
        if route != want_route:
            return f"MedicationRequest: route must be {want_route!r}"
        if not _quantity_ok(got_rate.get("doseQuantity"), want_rate["doseQuantity"], tol,
                            {_norm(want_rate["doseQuantity"]["unit"])}):
            return f"MedicationRequest: doseQuantity must be {want_rate['doseQuantity']}"
        if "rateQuantity" in want_rate and not _quantity_ok(got_rate.get("rateQuantity"), want_rate["rateQuantity"],
                                                            0.01, {"h", "hr", "hour", "hours"}):
            return f"MedicationRequest: rateQuantity must be {want_rate['rateQuantity']}"
    return None


def _values_equal(task: str, got: Any, want: Any) -> bool:
    if isinstance(want, str):
        if task == "task10":
            return isinstance(got, str) and _instant(got) is not None and _instant(got) == _instant(want)
        return isinstance(got, str) and got.strip().lower() == want.lower()
    value = _number(got)
    return value is not None and abs(value - float(want)) <= (0.1 if task == "task6" else 0.01)


def parse_submission(text: str) -> tuple[list[Any] | None, list[Any] | None, str]:
    """``(answers, posts or None, why)``: a JSON/Python list, or an object with "GET" (and "POST")."""
    value: Any = None
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(text.strip())
            break
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    if isinstance(value, dict) and isinstance(value.get("GET"), list):
        posts = value.get("POST")
        posts = [p for p in posts if isinstance(p, dict)] if isinstance(posts, list) else []
        return value["GET"], posts, ""
    if isinstance(value, list):
        return value, None, ""
    return None, None, "the submission must be a JSON list of answers, e.g. [2.1] (or {\"GET\": [...]})"


@dataclass
class FhirEpisode:
    """One episode's FHIR server; pass ``bridges`` to ``pool.session`` and ``close()`` after grading."""

    server: EpisodeServer
    bridges: dict[int, Path]
    _on_close: Any = field(repr=False, default=None)

    @property
    def posts(self) -> list[dict[str, Any]]:
        """The resources POSTed in this episode, in order."""
        return list(self.server.store.created)

    def close(self) -> None:
        """Stop the server and forget the episode. Idempotent."""
        if self._on_close is not None:
            self._on_close(self)
        self.server.close()


class MedAgentBench:
    """The medagentbench family (see the module docstring for the spec card)."""

    name = "medagentbench"
    version = 4
    actions = frozenset(ALL_ACTIONS)

    def __init__(self, root: Path | str, fhir_base_url: str | None = None) -> None:
        """Bind to the built directory ``root``; ``fhir_base_url`` selects an external FHIR server for episodes."""
        self.root = Path(root)
        self.fhir_base_url = fhir_base_url
        self._base: BaseData | None = None
        self._episodes: dict[str, FhirEpisode] = {}
        self._lock = threading.Lock()

    @property
    def categories(self) -> list[str]:
        """Task type × branch, in a fixed order."""
        return list(CATEGORIES)

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Instance counts for ``size`` without building (exact for seed 0: the lab profiles fix the branches)."""
        n = _SIZES[size]
        drawn = []
        for index, profile in enumerate(profiles(n, 0)):
            split = "test" if index % _TEST_EVERY == 0 else "train"
            drawn += [(split, task, idle) for task, idle in zip(TASKS, _idle_flags(profile))]
            drawn += [(split, "task1", False)] * _not_found(index)
        return {"categories": len(CATEGORIES), "instances": len(_rebalance(drawn))}

    # -- build ---------------------------------------------------------------------------------------
    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write the synthetic FHIR resources, the instances (gold from executed reference programs), a manifest."""
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        family_dir = Path(out_dir) / self.name
        resources = generate_patients(_SIZES[size], seed)
        text = "[\n" + ",\n".join(json.dumps(r, sort_keys=True) for r in resources) + "\n]\n"
        write_bytes_atomic(family_dir / RESOURCES, text.encode("utf-8"))
        splits = self._make_instances(resources, seed)
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        return write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed,
            counts={split: len(items) for split, items in splits.items()},
            categories={c: sum(i.category == c for v in splits.values() for i in v) for c in CATEGORIES})

    def _make_instances(self, resources: list[dict[str, Any]], seed: int) -> dict[str, list[Instance]]:
        rng = random.Random(f"medagentbench:{seed}")
        patients = [r for r in resources if r["resourceType"] == "Patient"]
        base = BaseData(resources)
        drawn: list[tuple[Split, str, dict[str, str], dict[str, Any]]] = []
        with FhirServer(FhirStore(base), port=0) as server:
            for index, patient in enumerate(patients):
                split: Split = "test" if index % _TEST_EVERY == 0 else "train"
                for task, slots in self._slots(rng, patient, patients, index):
                    drawn.append((split, task, slots, reference_gold(server, base, task, slots)))
        keep = _rebalance([(split, task, is_idle(gold)) for split, task, _, gold in drawn])
        splits: dict[str, list[Instance]] = {"train": [], "test": []}
        for k, (split, task, slots, gold) in enumerate(drawn):
            if k in keep:
                splits[split].append(self._instance(task, slots, gold, split, len(splits[split])))
        return splits

    @staticmethod
    def _slots(rng: random.Random, patient: dict[str, Any], patients: list[dict[str, Any]],
               index: int) -> list[tuple[str, dict[str, str]]]:
        mrn, name = patient["id"], patient["name"][0]
        out: list[tuple[str, dict[str, str]]] = []
        for task in TASKS:
            slots = {"mrn": mrn}
            if task == "task1":
                slots = {"given": name["given"][0], "family": name["family"], "dob": patient["birthDate"]}
            elif task == "task3":
                slots["reading"] = f"{rng.randint(95, 175)}/{rng.randint(55, 105)} mmHg"
            elif task == "task8":
                slots["sbar"] = ("SBAR - Situation: {}. Background: {}. Assessment: {}. Recommendation: {}."
                                 .format(*(rng.choice(part) for part in _SBAR)))
            out.append((task, slots))
        if _not_found(index):  # a name that exists, with a birth date no such patient has
            other = patients[(index + 1) % len(patients)]
            shifted = dt.date.fromisoformat(other["birthDate"]) + dt.timedelta(days=rng.randint(1, 400))
            out.append(("task1", {"given": other["name"][0]["given"][0], "family": other["name"][0]["family"],
                                  "dob": shifted.isoformat()}))
        return out

    def _instance(self, task: str, slots: dict[str, str], gold: dict[str, Any], split: Split,
                  index: int) -> Instance:
        return Instance(
            id=f"{self.name}/{split}/{index:05d}", family=self.name, category=_category(task, gold), split=split,
            question=instruction(task, slots), context=context_of(task),
            answer=json.dumps(gold, sort_keys=True), answer_type="text",
            solution=solution_code(task, slots), solution_lang="python",
            metadata={"task": task, "slots": slots, "fhir_port": FHIR_PORT})

    def question_template(self, instance: Instance) -> str:
        """The task type (``task5``): its instruction wording is one template, whatever the outcome category
        (``task5_normal`` / ``task5_mild``) says about the answer (used by the per-template reward floor)."""
        return str(instance.metadata.get("task") or instance.category.split("_", 1)[0])

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    #: check_family does not run the reference program on its own: it talks to the episode's FHIR server.
    reference_runs_alone = False

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the reference program against the episode's server, then submit its output."""
        return run_then_submit("python", instance.solution, instance.answer)

    # -- episodes --------------------------------------------------------------------------------------
    def base_data(self) -> BaseData:
        """The built synthetic resources, loaded once."""
        with self._lock:
            if self._base is None:
                path = self.root / RESOURCES
                if not path.is_file():
                    load_instances(self.root, "test", family=self.name)  # raises NotBuilt with the command
                    raise TaskError(f"{path} is missing; rebuild the family")
                self._base = BaseData(json.loads(path.read_text(encoding="utf-8")))
            return self._base

    def open_episode(self, instance: Instance | None = None) -> FhirEpisode:
        """Start a fresh FHIR server state for one episode (local data, or a proxy to ``fhir_base_url``)."""
        server = (open_episode_server(base_url=self.fhir_base_url) if self.fhir_base_url
                  else open_episode_server(self.base_data()))
        episode = FhirEpisode(server, {FHIR_PORT: server.socket_path}, self._forget)
        with self._lock:
            self._episodes[str(server.socket_path.resolve())] = episode
        return episode

    def close(self) -> None:
        """Close every episode still open (their servers and sockets)."""
        with self._lock:
            episodes = list(self._episodes.values())
        for episode in episodes:
            episode.close()

    def _forget(self, episode: FhirEpisode) -> None:
        with self._lock:
            self._episodes.pop(str(episode.server.socket_path.resolve()), None)

    def _episode_of(self, ctx: GradeContext | None) -> tuple[FhirEpisode | None, str | None]:
        session = getattr(ctx, "session", None)
        if session is None:
            return None, None  # offline grading: the submission's POST list is graded
        target = (getattr(session, "bridges", None) or {}).get(FHIR_PORT)
        if target is None:
            return None, (f"the episode's sandbox session has no FHIR bridge on port {FHIR_PORT}: open it with "
                          "pool.session(..., bridges=family.open_episode(instance).bridges)")
        with self._lock:
            episode = self._episodes.get(str(Path(target).resolve()))
        return episode, None if episode else f"no open medagentbench episode serves {target}"

    def export_bundle(self, path: Path | str) -> Path:
        """Write the built resources as a FHIR transaction Bundle (to load into an external server)."""
        entries = [{"resource": r, "request": {"method": "PUT", "url": f"{r['resourceType']}/{r['id']}"}}
                   for r in json.loads((self.root / RESOURCES).read_text(encoding="utf-8"))]
        bundle = {"resourceType": "Bundle", "type": "transaction", "entry": entries}
        write_bytes_atomic(Path(path), json.dumps(bundle).encode("utf-8"))
        return Path(path)

    # -- grading ---------------------------------------------------------------------------------------
    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Check the answers, then the orders (from the episode's server when there is one)."""
        if not isinstance(submission, str) or not submission.strip():
            return _wrong("empty submission")
        if looks_like_error(submission):
            return _wrong("submission is an error message or traceback, not an answer")
        answers, submitted_posts, why = parse_submission(submission)
        if answers is None:
            return _wrong(why)
        episode, missing = self._episode_of(ctx)
        if missing:  # the harness did not wire the episode: not the submission's fault
            return Verdict(correct=False, score=0.0, reason="no FHIR server for this episode", error=missing,
                           infra=True)
        task, gold = instance.metadata["task"], json.loads(instance.answer)
        if len(answers) != len(gold["GET"]):
            return _wrong(f"expected {len(gold['GET'])} answer value(s), got {len(answers)}")
        if not all(_values_equal(task, g, w) for g, w in zip(answers, gold["GET"])):
            return _wrong("an answer value is wrong")
        posts = episode.posts if episode is not None else (submitted_posts or [])
        for rtype in sorted({p["resourceType"] for p in gold["POST"]} | {str(p.get("resourceType")) for p in posts}):
            want = [p for p in gold["POST"] if p["resourceType"] == rtype]
            got = [p for p in posts if p.get("resourceType") == rtype]
            if len(got) != len(want):
                return _wrong(f"expected {len(want)} POSTed {rtype}, found {len(got)}")
            for g, w in zip(got, want):
                problem = check_post(task, g, w)
                if problem:
                    return _wrong(problem)
        return Verdict(correct=True, score=1.0, reason="answers and orders match the reference")


def _not_found(index: int) -> bool:
    """Whether patient ``index`` also gets a "not found" look-up: one in _NOT_FOUND_EVERY in each split (test
    patients are those with index % _TEST_EVERY == 0, so a plain index % 5 rule put every look-up in test)."""
    return (index // _TEST_EVERY) % _NOT_FOUND_EVERY == index % _TEST_EVERY % _NOT_FOUND_EVERY


def is_idle(gold: dict[str, Any]) -> bool:
    """Whether doing nothing is right: the answer is ``[-1]`` (no value) and no order is due."""
    return gold["GET"] == [-1] and not gold["POST"]


def reference_gold(server: FhirServer, base: BaseData, task: str, slots: dict[str, str]) -> dict[str, Any]:
    """Run the reference program of ``task`` against a fresh state of ``base`` served by ``server``.

    Returns:
        ``{"GET": answers, "POST": the resources it created (without server ids)}``.
    """
    server.swap(FhirStore(base))  # each reference run starts from a fresh state
    gold = _execute(solution_code(task, slots, base=server.url))
    gold["POST"] = [{k: v for k, v in p.items() if k not in ("id", "meta")} for p in server.store.created]
    return gold


def _rebalance(drawn: list[tuple[str, str, bool]]) -> set[int]:
    """Indices of the drawn ``(split, task, idle)`` instances to keep: every non-idle one, and per split at most
    :data:`IDLE_SHARE` of idle ones (in train at least one per task type), taken round-robin over the task types in
    draw order (so each kind stays)."""
    keep = {k for k, (_, _, idle) in enumerate(drawn) if not idle}
    for split in ("train", "test"):
        others = sum(1 for s, _, idle in drawn if s == split and not idle)
        allowed = int(IDLE_SHARE * others / (1 - IDLE_SHARE))
        queues: dict[str, list[int]] = {}
        for k, (s, task, idle) in enumerate(drawn):
            if s == split and idle:
                queues.setdefault(task, []).append(k)
        chosen = [k for group in itertools.zip_longest(*queues.values()) for k in group if k is not None]
        if split == "train":  # a small build still shows every do-nothing branch once (in train, not test)
            allowed = max(allowed, len(queues))
        keep.update(chosen[:allowed])
    return keep


def _idle_flags(profile: dict[str, str]) -> list[bool]:
    """Whether each of one patient's ten instances (task order) has a do-nothing gold, from its lab profile."""
    mg_none = profile["MG"] in ("none", "stale")
    flags = {"task4": mg_none, "task5": mg_none, "task6": profile["GLU"] in ("none", "stale"),
             "task7": profile["GLU"] == "none", "task9": profile["K"] == "none"}
    return [flags.get(task, False) for task in TASKS]


def _wrong(reason: str) -> Verdict:
    return Verdict(correct=False, score=0.0, reason=reason)


def _execute(code: str) -> dict[str, Any]:
    """Run a reference program in-process; return its final JSON line."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<medagentbench-reference>", "exec"), {"__name__": "__reference__"})
    lines = out.getvalue().strip().splitlines()
    if not lines:
        raise TaskError("a medagentbench reference program printed nothing")
    return json.loads(lines[-1])


def _category(task: str, gold: dict[str, Any]) -> str:
    """The branch the reference run took, e.g. ``task5_moderate``."""
    value, posts = gold["GET"], gold["POST"]
    if task == "task1":
        return "task1_not_found" if value == ["Patient not found"] else "task1_found"
    if task in ("task2", "task3", "task8"):
        return {"task2": "task2_age", "task3": "task3_record_bp", "task8": "task8_referral"}[task]
    none = value == [-1]
    if task == "task5" and not none and posts:
        grams = posts[0]["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"]["value"]
        return {4: "task5_severe", 2: "task5_moderate", 1: "task5_mild"}[grams]
    if task in ("task5", "task9"):
        return f"{task}_none" if none else (f"{task}_low" if posts else f"{task}_normal")
    if task == "task10":
        return "task10_none" if none else ("task10_stale" if posts else "task10_recent")
    return f"{task}_{'none' if none else ('found' if task == 'task7' else 'recent')}"
