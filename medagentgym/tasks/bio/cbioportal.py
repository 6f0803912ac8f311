"""Seeded synthetic cBioPortal-format studies (clinical, MAF mutations, CNA, SV, treatment timeline) as CSV.

All values are invented; the column names follow cBioPortal's export files. Survival depends on the mutation
status of the study's driver gene and on the treatment arm, so survival comparisons have real signal.
"""

from __future__ import annotations

import csv
import io
import random
from dataclasses import dataclass
from pathlib import Path

from medagentgym.tasks.base import write_bytes_atomic

MAF_COLUMNS = ("Hugo_Symbol", "Entrez_Gene_Id", "Center", "NCBI_Build", "Chromosome", "Start_Position", "End_Position",
               "Strand", "Consequence", "Variant_Classification", "Variant_Type", "Reference_Allele",
               "Tumor_Seq_Allele1", "Tumor_Seq_Allele2", "dbSNP_RS", "Tumor_Sample_Barcode",
               "Matched_Norm_Sample_Barcode", "HGVSc", "HGVSp", "HGVSp_Short", "Transcript_ID", "RefSeq",
               "Protein_position", "Codons", "t_ref_count", "t_alt_count", "n_ref_count", "n_alt_count")
PATIENT_COLUMNS = ("PATIENT_ID", "SEX", "AGE", "SMOKING_HISTORY", "STAGE", "TREATMENT_ARM", "OS_MONTHS", "OS_STATUS",
                   "PFS_MONTHS", "PFS_STATUS")
SAMPLE_COLUMNS = ("SAMPLE_ID", "PATIENT_ID", "CANCER_TYPE", "CANCER_TYPE_DETAILED", "ONCOTREE_CODE", "SAMPLE_TYPE",
                  "SOMATIC_STATUS", "TMB_NONSYNONYMOUS")
SV_COLUMNS = ("Sample_Id", "Site1_Hugo_Symbol", "Site2_Hugo_Symbol", "Class", "Event_Info", "SV_Status")
TIMELINE_COLUMNS = ("PATIENT_ID", "START_DATE", "STOP_DATE", "EVENT_TYPE", "TREATMENT_TYPE", "AGENT")
#: (classification, variant type, consequence, weight)
_CLASSES = (("Missense_Mutation", "SNP", "missense_variant", 55), ("Nonsense_Mutation", "SNP", "stop_gained", 10),
            ("Frame_Shift_Del", "DEL", "frameshift_variant", 8), ("Frame_Shift_Ins", "INS", "frameshift_variant", 5),
            ("Splice_Site", "SNP", "splice_acceptor_variant", 6), ("In_Frame_Del", "DEL", "inframe_deletion", 4),
            ("Silent", "SNP", "synonymous_variant", 12))
_AA = "ACDEFGHIKLMNPQRSTVWY"
_GENE_INFO = {  # symbol -> (Entrez id, chromosome)
    "TP53": (7157, "17"), "KRAS": (3845, "12"), "PIK3CA": (5290, "3"), "APC": (324, "5"), "ERBB2": (2064, "17"),
    "CDH1": (999, "16"), "ARID1A": (8289, "1"), "SMAD4": (4089, "18"), "EGFR": (1956, "7"), "PTEN": (5728, "10"),
    "IDH1": (3417, "2"), "BRAF": (673, "7"), "GATA3": (2625, "10"), "MAP3K1": (4214, "5"), "CDKN2A": (1029, "9"),
    "NF1": (4763, "17"), "RB1": (5925, "13"), "FBXW7": (55294, "4"), "ATRX": (546, "X"), "CCNE1": (898, "19"),
    "MET": (4233, "7"), "MYC": (4609, "8"), "ESR1": (2099, "6"), "FGFR2": (2263, "10"), "TERT": (7015, "5"),
}


@dataclass(frozen=True)
class Study:
    """One synthetic study: its id, size, cancer types, gene panel with mutation rates, arms and agents."""

    study_id: str
    title: str
    n_patients: int
    cancer_type: str
    detailed: tuple[tuple[str, str], ...]  # (CANCER_TYPE_DETAILED, ONCOTREE_CODE)
    genes: tuple[tuple[str, float], ...]  # (symbol, per-sample mutation probability)
    driver: str  # its mutation shortens survival
    arms: tuple[str, ...]
    agents: tuple[tuple[str, str], ...]  # (TREATMENT_TYPE, AGENT)
    fusions: tuple[tuple[str, str], ...]


STUDIES: tuple[Study, ...] = (
    Study("egc_synth_2020", "Esophagogastric cancer, targeted sequencing (synthetic)", 140, "Esophagogastric Cancer",
          (("Stomach Adenocarcinoma", "STAD"), ("Esophageal Adenocarcinoma", "ESCA"), ("Gastroesophageal Junction Adenocarcinoma", "GEJ")),
          (("TP53", 0.55), ("CDH1", 0.18), ("ARID1A", 0.22), ("PIK3CA", 0.16), ("KRAS", 0.12), ("ERBB2", 0.15),
           ("SMAD4", 0.1), ("APC", 0.09), ("CDKN2A", 0.08), ("FBXW7", 0.06), ("RB1", 0.05), ("CCNE1", 0.07)),
          "TP53", ("Trastuzumab + chemo", "Chemo alone"), (("Chemotherapy", "Oxaliplatin"), ("Chemotherapy", "Capecitabine"),
                                                          ("Targeted", "Trastuzumab"), ("Immunotherapy", "Pembrolizumab")),
          (("ERBB2", "GRB7"), ("CLDN18", "ARHGAP26"), ("FGFR2", "BICC1"))),
    Study("crc_synth_2021", "Colorectal cancer cohort (synthetic)", 160, "Colorectal Cancer",
          (("Colon Adenocarcinoma", "COAD"), ("Rectal Adenocarcinoma", "READ"), ("Mucinous Adenocarcinoma of the Colon and Rectum", "MACR")),
          (("APC", 0.7), ("TP53", 0.5), ("KRAS", 0.42), ("PIK3CA", 0.18), ("SMAD4", 0.14), ("FBXW7", 0.11),
           ("BRAF", 0.09), ("ARID1A", 0.08), ("ATRX", 0.05), ("NF1", 0.06), ("PTEN", 0.05), ("MYC", 0.04)),
          "KRAS", ("FOLFOX", "FOLFOX + cetuximab"), (("Chemotherapy", "Fluorouracil"), ("Chemotherapy", "Oxaliplatin"),
                                                   ("Targeted", "Cetuximab"), ("Targeted", "Bevacizumab")),
          (("NTRK1", "TPM3"), ("RSPO3", "PTPRK"), ("BRAF", "AGK"))),
    Study("gbm_synth_2019", "Glioblastoma immunotherapy cohort (synthetic)", 110, "Glioma",
          (("Glioblastoma Multiforme", "GBM"), ("Astrocytoma", "ASTR"), ("Oligodendroglioma", "ODG")),
          (("TERT", 0.5), ("PTEN", 0.35), ("TP53", 0.3), ("EGFR", 0.28), ("NF1", 0.15), ("IDH1", 0.12), ("ATRX", 0.12),
           ("CDKN2A", 0.1), ("RB1", 0.08), ("PIK3CA", 0.08), ("BRAF", 0.04), ("MET", 0.05)),
          "IDH1", ("Nivolumab", "Temozolomide"), (("Chemotherapy", "Temozolomide"), ("Immunotherapy", "Nivolumab"),
                                                 ("Targeted", "Bevacizumab"), ("Radiation", "Radiotherapy")),
          (("FGFR3", "TACC3"), ("EGFR", "SEPTIN14"), ("MET", "PTPRZ1"))),
    Study("breast_synth_2022", "Metastatic breast cancer, PI3K inhibitor cohort (synthetic)", 150, "Breast Cancer",
          (("Breast Invasive Ductal Carcinoma", "IDC"), ("Breast Invasive Lobular Carcinoma", "ILC"), ("Breast Mixed Ductal and Lobular Carcinoma", "MDLC")),
          (("PIK3CA", 0.45), ("TP53", 0.35), ("GATA3", 0.15), ("CDH1", 0.14), ("MAP3K1", 0.1), ("ESR1", 0.12),
           ("PTEN", 0.07), ("ERBB2", 0.08), ("ARID1A", 0.07), ("NF1", 0.06), ("KRAS", 0.03), ("MYC", 0.05)),
          "PIK3CA", ("Alpelisib + fulvestrant", "Fulvestrant"), (("Targeted", "Alpelisib"), ("Hormone", "Fulvestrant"),
                                                                ("Hormone", "Letrozole"), ("Chemotherapy", "Capecitabine")),
          (("ESR1", "CCDC170"), ("FGFR2", "TACC2"), ("ERBB2", "PPP1R1B"))),
)
TABLES = ("data_clinical_patient.csv", "data_clinical_sample.csv", "data_mutations.csv", "data_cna.csv",
          "data_sv.csv", "data_timeline_treatment.csv")


def _csv(header: tuple[str, ...] | list[str], rows: list[list[object]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _mutation(rng: random.Random, gene: str, sample: str) -> list[object]:
    entrez, chrom = _GENE_INFO.get(gene, (0, "1"))
    cls, vtype, consequence, _ = rng.choices(_CLASSES, weights=[c[3] for c in _CLASSES])[0]
    pos = rng.randint(20, 900)
    start = rng.randint(1_000_000, 90_000_000)
    ref = rng.choice("ACGT")
    alt = rng.choice([b for b in "ACGT" if b != ref])
    aa_from, aa_to = rng.choice(_AA), rng.choice(_AA)
    if cls == "Nonsense_Mutation":
        aa_to = "*"
    elif cls == "Silent":
        aa_to = aa_from
    elif cls.startswith("Frame_Shift"):
        aa_to = rng.choice(_AA) + "fs"
    elif cls == "Splice_Site":
        aa_from, aa_to = "X", "_splice"
    elif cls == "In_Frame_Del":
        aa_to = "del"
    short = f"p.{aa_from}{pos}{aa_to}"
    if vtype == "DEL":
        ref, alt = ref + rng.choice("ACGT"), "-"
    elif vtype == "INS":
        ref = "-"
    depth = rng.randint(40, 600)
    alt_count = max(3, int(depth * rng.uniform(0.05, 0.6)))
    return [gene, entrez, "SYNTH", "GRCh37", chrom, start, start + max(0, len(ref) - 1), "+", consequence, cls, vtype,
            ref, ref, alt, "novel", sample, sample.rsplit("-", 1)[0] + "-N", f"c.{pos * 3}{ref[:1]}>{alt[:1]}",
            f"p.{aa_from}{pos}{aa_to}", short, f"ENST{entrez:011d}", f"NM_{entrez:06d}.3", pos,
            f"{ref[:1]}CG/{alt[:1]}CG", depth - alt_count, alt_count, rng.randint(30, 300), 0]


def write_study(study: Study, out_dir: Path, seed: int) -> None:
    """Write the study's six CSV tables into ``out_dir`` (byte-identical per seed)."""
    rng = random.Random(f"cbioportal:{seed}:{study.study_id}")
    prefix = study.study_id.split("_")[0].upper()
    patients, samples, muts, sv, timeline = [], [], [], [], []
    for p in range(1, study.n_patients + 1):
        pid = f"P-{prefix}{p:04d}"
        arm = rng.choice(study.arms)
        n_samples = 2 if rng.random() < 0.12 else 1
        driver_hit = False
        for s in range(1, n_samples + 1):
            sid = f"{pid}-T{s:02d}"
            detailed, code = rng.choice(study.detailed)
            n_mut = 0
            for gene, prob in study.genes:
                if rng.random() < prob:
                    for _ in range(1 if rng.random() < 0.85 else 2):
                        muts.append(_mutation(rng, gene, sid))
                        n_mut += 1
                    driver_hit |= gene == study.driver
            tmb = round(n_mut * rng.uniform(0.8, 2.5) + rng.uniform(0, 4), 2)
            samples.append([sid, pid, study.cancer_type, detailed, code, "Primary" if s == 1 else "Metastasis",
                            "Matched", tmb])
            if rng.random() < 0.18:
                a, b = rng.choice(study.fusions)
                sv.append([sid, a, b, rng.choice(["FUSION", "FUSION", "DELETION", "TRANSLOCATION"]), f"{a}-{b} fusion",
                           "SOMATIC"])
        scale = 30.0 * (0.55 if driver_hit else 1.0) * (1.35 if arm == study.arms[0] else 1.0)
        os_m = round(min(rng.expovariate(1 / scale), 120.0) + 0.5, 2)
        died = rng.random() < 0.7
        pfs_m = round(min(os_m, rng.expovariate(1 / (scale * 0.45)) + 0.3), 2)
        progressed = died or rng.random() < 0.6
        patients.append([pid, rng.choice(["Male", "Female"]), rng.randint(28, 86),
                         rng.choice(["Never", "Former", "Current", "Unknown"]), rng.choice(["I", "II", "III", "IV"]),
                         arm, os_m, "1:DECEASED" if died else "0:LIVING", pfs_m,
                         "1:Progressed" if progressed else "0:Not Progressed"])
        start = 0
        for _ in range(rng.randint(1, 3)):
            ttype, agent = rng.choice(study.agents)
            stop = start + rng.randint(14, 400)
            timeline.append([pid, start, stop, "TREATMENT", ttype, agent])
            start = stop + rng.randint(0, 90)
    sample_ids = [s[0] for s in samples]
    cna = []
    for gene, _ in study.genes:
        cna.append([gene] + [rng.choices([-2, -1, 0, 1, 2], weights=[4, 10, 70, 10, 6])[0] for _ in sample_ids])
    tables = {
        "data_clinical_patient.csv": _csv(PATIENT_COLUMNS, patients),
        "data_clinical_sample.csv": _csv(SAMPLE_COLUMNS, samples),
        "data_mutations.csv": _csv(MAF_COLUMNS, muts),
        "data_cna.csv": _csv(["Hugo_Symbol", *sample_ids], cna),
        "data_sv.csv": _csv(SV_COLUMNS, sv),
        "data_timeline_treatment.csv": _csv(TIMELINE_COLUMNS, timeline),
    }
    for name, data in tables.items():
        write_bytes_atomic(Path(out_dir) / name, data)
