"""A small in-process FHIR R4 server with synthetic patients (used by the ``medagentbench`` family).

* :mod:`tasks.fhir.patients`: deterministic synthetic patients and labs around the fixed clock;
* :mod:`tasks.fhir.store`: the in-memory store (searches, reads, per-episode creates);
* :mod:`tasks.fhir.server`: the HTTP server on a Unix socket or 127.0.0.1, and the external-server proxy.
"""

from tasks.fhir.patients import CLOCK, CLOCK_ISO, generate_patients
from tasks.fhir.server import EpisodeServer, FhirServer, ProxyStore, open_episode_server
from tasks.fhir.store import BaseData, FhirError, FhirStore

__all__ = ["CLOCK", "CLOCK_ISO", "BaseData", "EpisodeServer", "FhirError", "FhirServer", "FhirStore", "ProxyStore",
           "generate_patients", "open_episode_server"]
