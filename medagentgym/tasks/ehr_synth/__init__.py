"""A seeded synthetic hospital in MIMIC-III shape and the builders of the EHR SQL databases.

* ``hospital.draw_hospital(n_patients, seed)``: the raw draw (MIMIC-III CSV-shaped frames, synthetic only);
* ``mimic_iii_db.build_mimic_iii``, ``eicu_db.build_eicu`` (from ``eicu_view.eicu_view``), ``treqs_db.build_treqs``:
  the EHRSQL MIMIC-III, EHRSQL eICU and MIMICSQL databases, byte-identical per seed;
* ``importers``: the same builders over real MIMIC-III / eICU CSVs, and public question files re-instantiated;
* ``templating`` / ``family``: question templates as data and the shared family machinery;
* ``public_vocab`` / ``vocab``: the public questions' vocabularies (shipped as data) merged into the draw;
  ``plant``: patients that public question files name (``build(..., public_questions=...)``);
  ``public_sql``: how much public gold SQL gives a meaningful answer here (``scripts/check_public_sql.py``).

Families built on it: ``medagentgym/tasks/mimic_iii.py``, ``medagentgym/tasks/eicu.py``, ``medagentgym/tasks/treqs.py``. The raw draw is meant to be
reused by EHR-SeqSQL, EHRCon and MIMIC-Extract style families (same frames, other views).
"""

from medagentgym.tasks.ehr_synth.hospital import SIZES, RawHospital, cached_draw, draw_hospital

__all__ = ["SIZES", "RawHospital", "cached_draw", "draw_hospital"]
