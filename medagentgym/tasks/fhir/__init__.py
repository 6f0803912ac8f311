"""A small in-process FHIR R4 server with synthetic patients (used by the ``medagentbench`` family).

* :mod:`medagentgym.tasks.fhir.patients`: deterministic synthetic patients and labs around the fixed clock;
* :mod:`medagentgym.tasks.fhir.store`: the in-memory store (searches, reads, per-episode creates);
* :mod:`medagentgym.tasks.fhir.server`: the HTTP server on a Unix socket or 127.0.0.1, and the external-server proxy.
"""

from medagentgym.tasks.fhir.patients import CLOCK, CLOCK_ISO, generate_patients
from medagentgym.tasks.fhir.server import EpisodeServer, FhirServer, ProxyStore, open_episode_server
from medagentgym.tasks.fhir.store import BaseData, FhirError, FhirStore

__all__ = ["CLOCK", "CLOCK_ISO", "BaseData", "EpisodeServer", "FhirError", "FhirServer", "FhirStore", "ProxyStore",
           "generate_patients", "open_episode_server"]
