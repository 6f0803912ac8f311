"""Item vocabularies of the synthetic hospital: labs, drugs, charted/input/output items, cultures, demographics.

Values follow MIMIC-III's raw spelling and casing (the EHRSQL builder lower-cases later; MIMICSQL keeps it):
lab labels capitalised (``Creatinine``), drug names as ordered (including tall-man lettering such as
``HYDROmorphone (Dilaudid)``), admission fields upper-case (``EMERGENCY ROOM ADMIT``). Each row also names
its eICU counterpart, so one draw can be viewed in both databases. Lab and vital distributions are
(mean, sd, low, high) on a plausible adult ICU scale; they are shapes, not real statistics.
"""

from __future__ import annotations

#: (itemid, label, fluid, category, loinc, unit, mean, sd, low, high, decimals, eicu_labname, per_day)
LABS: tuple[tuple, ...] = (
    (50912, "Creatinine", "Blood", "Chemistry", "2160-0", "mg/dL", 1.4, 0.9, 0.3, 9.0, 1, "creatinine", 1.0),
    (51006, "Urea Nitrogen", "Blood", "Chemistry", "3094-0", "mg/dL", 28.0, 16.0, 4.0, 140.0, 0, "bun", 1.0),
    (50971, "Potassium", "Blood", "Chemistry", "2823-3", "mEq/L", 4.2, 0.6, 2.4, 7.2, 1, "potassium", 1.2),
    (50983, "Sodium", "Blood", "Chemistry", "2951-2", "mEq/L", 138.0, 4.5, 118.0, 160.0, 0, "sodium", 1.2),
    (50902, "Chloride", "Blood", "Chemistry", "2075-0", "mEq/L", 103.0, 5.5, 80.0, 125.0, 0, "chloride", 1.0),
    (50882, "Bicarbonate", "Blood", "Chemistry", "1963-8", "mEq/L", 24.0, 4.5, 8.0, 42.0, 0, "bicarbonate", 1.0),
    (50868, "Anion Gap", "Blood", "Chemistry", "1863-0", "mEq/L", 14.0, 3.5, 4.0, 35.0, 0, "anion gap", 1.0),
    (50931, "Glucose", "Blood", "Chemistry", "2345-7", "mg/dL", 135.0, 45.0, 40.0, 550.0, 0, "glucose", 1.0),
    (50960, "Magnesium", "Blood", "Chemistry", "2601-3", "mg/dL", 2.0, 0.3, 1.0, 4.0, 1, "magnesium", 0.9),
    (50970, "Phosphate", "Blood", "Chemistry", "2777-1", "mg/dL", 3.6, 1.1, 1.0, 9.5, 1, "phosphate", 0.8),
    (50893, "Calcium, Total", "Blood", "Chemistry", "2000-8", "mg/dL", 8.6, 0.7, 5.5, 12.0, 1, "calcium", 0.9),
    (51221, "Hematocrit", "Blood", "Hematology", "4544-3", "%", 31.0, 5.5, 16.0, 52.0, 1, "hct", 1.1),
    (51222, "Hemoglobin", "Blood", "Hematology", "718-7", "g/dL", 10.4, 1.9, 5.0, 17.5, 1, "hgb", 1.0),
    (51265, "Platelet Count", "Blood", "Hematology", "777-3", "K/uL", 220.0, 95.0, 8.0, 800.0, 0, "platelets x 1000", 1.0),
    (51301, "White Blood Cells", "Blood", "Hematology", "804-5", "K/uL", 10.5, 4.5, 0.5, 45.0, 1, "wbc x 1000", 1.0),
    (51279, "Red Blood Cells", "Blood", "Hematology", "789-8", "m/uL", 3.5, 0.6, 1.8, 6.0, 2, "rbc", 1.0),
    (51248, "MCH", "Blood", "Hematology", "785-6", "pg", 30.0, 2.2, 20.0, 38.0, 1, "mch", 1.0),
    (51249, "MCHC", "Blood", "Hematology", "786-4", "%", 33.6, 1.3, 29.0, 38.0, 1, "mchc", 1.0),
    (51250, "MCV", "Blood", "Hematology", "787-2", "fL", 90.0, 6.0, 65.0, 115.0, 0, "mcv", 1.0),
    (51277, "RDW", "Blood", "Hematology", "788-0", "%", 15.0, 1.8, 11.5, 26.0, 1, "rdw", 1.0),
    (51237, "INR(PT)", "Blood", "Hematology", "5895-7", "", 1.4, 0.5, 0.8, 8.0, 1, "pt - inr", 0.8),
    (51274, "PT", "Blood", "Hematology", "5902-2", "sec", 15.0, 3.5, 10.0, 60.0, 1, "pt", 0.8),
    (51275, "PTT", "Blood", "Hematology", "3173-2", "sec", 35.0, 12.0, 20.0, 150.0, 1, "ptt", 0.8),
    (50820, "pH", "Blood", "Blood Gas", "11558-4", "units", 7.38, 0.06, 6.9, 7.65, 2, "ph", 0.7),
    (50821, "pO2", "Blood", "Blood Gas", "11556-8", "mm Hg", 115.0, 55.0, 30.0, 500.0, 0, "pao2", 0.7),
    (50818, "pCO2", "Blood", "Blood Gas", "11557-6", "mm Hg", 41.0, 8.0, 18.0, 95.0, 0, "paco2", 0.7),
    (50802, "Base Excess", "Blood", "Blood Gas", "11555-0", "mEq/L", 0.0, 4.0, -20.0, 18.0, 0, "base excess", 0.7),
    (50804, "Calculated Total CO2", "Blood", "Blood Gas", "34728-6", "mEq/L", 25.0, 4.5, 8.0, 45.0, 0, "hco3", 0.7),
    (50813, "Lactate", "Blood", "Blood Gas", "32693-4", "mmol/L", 1.9, 1.2, 0.4, 15.0, 1, "lactate", 0.5),
    (50809, "Glucose", "Blood", "Blood Gas", "2339-0", "mg/dL", 140.0, 40.0, 45.0, 480.0, 0, "bedside glucose", 0.4),
    (50817, "Oxygen Saturation", "Blood", "Blood Gas", "20564-1", "%", 95.0, 3.5, 70.0, 100.0, 0, "o2 sat (%)", 0.3),
    (50861, "Alanine Aminotransferase (ALT)", "Blood", "Chemistry", "1742-6", "IU/L", 45.0, 40.0, 5.0, 900.0, 0, "alt (sgpt)", 0.35),
    (50878, "Asparate Aminotransferase (AST)", "Blood", "Chemistry", "1920-8", "IU/L", 55.0, 50.0, 8.0, 1200.0, 0, "ast (sgot)", 0.35),
    (50863, "Alkaline Phosphatase", "Blood", "Chemistry", "6768-6", "IU/L", 100.0, 50.0, 20.0, 900.0, 0, "alkaline phos.", 0.35),
    (50885, "Bilirubin, Total", "Blood", "Chemistry", "1975-2", "mg/dL", 1.1, 1.2, 0.1, 25.0, 1, "total bilirubin", 0.35),
    (50862, "Albumin", "Blood", "Chemistry", "1751-7", "g/dL", 3.2, 0.6, 1.2, 5.2, 1, "albumin", 0.3),
    (50976, "Protein, Total", "Blood", "Chemistry", "2885-2", "g/dL", 6.2, 0.8, 3.5, 9.0, 1, "total protein", 0.2),
    (50910, "Creatine Kinase (CK)", "Blood", "Chemistry", "2157-6", "IU/L", 250.0, 300.0, 15.0, 9000.0, 0, "ck", 0.2),
    (50911, "Creatine Kinase, MB Isoenzyme", "Blood", "Chemistry", "13969-1", "ng/mL", 6.0, 8.0, 1.0, 250.0, 0, "ck-mb", 0.2),
    (51003, "Troponin T", "Blood", "Chemistry", "6598-7", "ng/mL", 0.25, 0.5, 0.01, 12.0, 2, "troponin - t", 0.2),
    (51002, "Troponin I", "Blood", "Chemistry", "10839-9", "ng/mL", 0.6, 1.5, 0.01, 40.0, 2, "troponin - i", 0.1),
    (50954, "Lactate Dehydrogenase (LD)", "Blood", "Chemistry", "14804-9", "IU/L", 300.0, 150.0, 100.0, 3000.0, 0, "ldh", 0.15),
    (50956, "Lipase", "Blood", "Chemistry", "3040-3", "IU/L", 45.0, 60.0, 3.0, 2000.0, 0, "lipase", 0.12),
    (50867, "Amylase", "Blood", "Chemistry", "1798-8", "IU/L", 70.0, 60.0, 10.0, 1500.0, 0, "amylase", 0.08),
    (51244, "Lymphocytes", "Blood", "Hematology", "731-0", "%", 15.0, 8.0, 1.0, 60.0, 1, "-lymphs", 0.4),
    (51256, "Neutrophils", "Blood", "Hematology", "770-8", "%", 76.0, 10.0, 30.0, 97.0, 1, "-polys", 0.4),
    (51254, "Monocytes", "Blood", "Hematology", "742-7", "%", 5.5, 2.5, 0.5, 20.0, 1, "-monos", 0.4),
    (51200, "Eosinophils", "Blood", "Hematology", "711-2", "%", 1.5, 1.5, 0.0, 15.0, 1, "-eos", 0.4),
    (51146, "Basophils", "Blood", "Hematology", "704-7", "%", 0.3, 0.3, 0.0, 3.0, 1, "-basos", 0.4),
    (51214, "Fibrinogen, Functional", "Blood", "Hematology", "3255-7", "mg/dL", 380.0, 150.0, 60.0, 1000.0, 0, "fibrinogen", 0.1),
    (50852, "% Hemoglobin A1c", "Blood", "Chemistry", "4548-4", "%", 6.6, 1.4, 4.2, 14.0, 1, "hemoglobin a1c", 0.03),
    (51000, "Triglycerides", "Blood", "Chemistry", "1644-4", "mg/dL", 150.0, 80.0, 30.0, 900.0, 0, "triglycerides", 0.05),
    (50907, "Cholesterol, Total", "Blood", "Chemistry", "2093-3", "mg/dL", 165.0, 45.0, 60.0, 400.0, 0, "total cholesterol", 0.05),
    (50904, "Cholesterol, HDL", "Blood", "Chemistry", "2085-9", "mg/dL", 42.0, 14.0, 10.0, 110.0, 0, "hdl", 0.05),
    (50905, "Cholesterol, LDL, Calculated", "Blood", "Chemistry", "13457-7", "mg/dL", 95.0, 35.0, 20.0, 260.0, 0, "ldl", 0.05),
    (50924, "Ferritin", "Blood", "Chemistry", "2276-4", "ng/mL", 350.0, 400.0, 5.0, 5000.0, 0, "ferritin", 0.04),
    (50952, "Iron", "Blood", "Chemistry", "2498-4", "ug/dL", 45.0, 25.0, 5.0, 250.0, 0, "iron", 0.04),
    (51010, "Vitamin B12", "Blood", "Chemistry", "2132-9", "pg/mL", 550.0, 300.0, 100.0, 2000.0, 0, "vitamin b12", 0.03),
    (50993, "Thyroid Stimulating Hormone", "Blood", "Chemistry", "3024-7", "uIU/mL", 2.2, 2.0, 0.01, 40.0, 2, "tsh", 0.06),
    (50889, "C-Reactive Protein", "Blood", "Chemistry", "1988-5", "mg/L", 60.0, 60.0, 0.5, 350.0, 1, "crp", 0.05),
    (51007, "Uric Acid", "Blood", "Chemistry", "3084-1", "mg/dL", 6.0, 2.5, 1.0, 18.0, 1, "uric acid", 0.03),
    (51491, "pH", "Urine", "Hematology", "5803-2", "units", 6.0, 0.7, 5.0, 8.5, 1, "urinary ph", 0.1),
    (51498, "Specific Gravity", "Urine", "Hematology", "5811-5", "", 1.015, 0.006, 1.001, 1.040, 3, "urinary specific gravity", 0.1),
    (51516, "WBC", "Urine", "Hematology", "5821-4", "#/hpf", 12.0, 20.0, 0.0, 180.0, 0, "urine wbc", 0.1),
)

#: Lab labels whose VALUEUOM is missing in a share of raw rows (EHRSQL drops such rows).
LAB_UNIT_SOMETIMES_MISSING = frozenset({"INR(PT)", "Specific Gravity"})

#: (drug as ordered, drug_type, formulary_cd, dose, unit, route, weight, eicu_drugname, eicu_dosage, eicu_route)
DRUGS: tuple[tuple, ...] = (
    ("Potassium Chloride", "MAIN", "KCL20PM", "20", "mEq", "PO", 40, "potassium chloride", "20 meq", "po"),
    ("Heparin", "MAIN", "HEPA5I", "5000", "UNIT", "SC", 40, "heparin (porcine) 5,000 unit/ml 1 ml inj", "5000 3", "subcutaneous"),
    ("Insulin", "MAIN", "INSULIN", "0", "UNIT", "SC", 35, "insulin lispro (humalog) inj", "0-10 3", "subcutaneous"),
    ("Sodium Chloride 0.9%  Flush", "BASE", "NACLFLUSH", "3", "mL", "IV", 40, "sodium chloride 0.9% 1000 ml bag", "1000 3", "iv"),
    ("D5W", "BASE", "D5W250", "250", "mL", "IV", 25, "dextrose 5% in water (d5w) iv : 1000 ml bag", "1000 3", "intravenous"),
    ("Furosemide", "MAIN", "FURO40I", "40", "mg", "IV", 30, "furosemide 10 mg/ml 4 ml inj", "40 3", "iv push"),
    ("Acetaminophen", "MAIN", "ACET325", "650", "mg", "PO", 35, "acetaminophen 325 mg po tabs", "650 3", "po"),
    ("Metoprolol Tartrate", "MAIN", "METO25", "25", "mg", "PO", 30, "metoprolol tartrate 25 mg po tabs", "25 3", "po"),
    ("Docusate Sodium", "MAIN", "DOCU100", "100", "mg", "PO", 28, "docusate sodium 100 mg po caps", "100 3", "po"),
    ("Senna", "MAIN", "SENN187", "1", "TAB", "PO", 25, "senna 8.6 mg po tabs", "2 3", "po"),
    ("Magnesium Sulfate", "MAIN", "MAG2PM", "2", "gm", "IV", 28, "magnesium sulfate 2 g/50 ml ivpb", "2 3", "ivpb"),
    ("Pantoprazole", "MAIN", "PANT40", "40", "mg", "PO", 25, "pantoprazole 40 mg iv recon soln", "40 3", "iv push"),
    ("Aspirin", "MAIN", "ASA81", "81", "mg", "PO", 25, "aspirin 81 mg po chew", "81 3", "po"),
    ("Vancomycin", "MAIN", "VANC1F", "1000", "mg", "IV", 22, "vancomycin inj 1,000 mg vial", "1000 3", "iv piggyback"),
    ("Morphine Sulfate", "MAIN", "MORP2I", "2", "mg", "IV", 18, "morphine 4 mg/ml syringe", "2 3", "iv push"),
    ("Ondansetron", "MAIN", "ONDAN4I", "4", "mg", "IV", 20, "ondansetron 2 mg/ml 2 ml inj", "4 3", "iv push"),
    ("Lorazepam", "MAIN", "LORA1I", "1", "mg", "IV", 15, "lorazepam 2 mg/ml 1 ml inj", "1 3", "iv push"),
    ("Bisacodyl", "MAIN", "BISA10R", "10", "mg", "PR", 18, "bisacodyl 10 mg re supp", "10 3", "rectal"),
    ("Atorvastatin", "MAIN", "ATOR40", "40", "mg", "PO", 14, "atorvastatin 40 mg po tabs", "40 3", "po"),
    ("Lisinopril", "MAIN", "LISI10", "10", "mg", "PO", 12, "lisinopril 10 mg po tabs", "10 3", "po"),
    ("Warfarin", "MAIN", "WARF5", "5", "mg", "PO", 12, "warfarin 5 mg po tabs", "5 3", "po"),
    ("Famotidine", "MAIN", "FAMO20I", "20", "mg", "IV", 12, "famotidine 20 mg/2 ml iv soln", "20 3", "iv push"),
    ("Albuterol 0.083% Neb Soln", "MAIN", "ALBU3H", "1", "NEB", "IH", 14, "albuterol 2.5 mg/3 ml neb soln", "2.5 3", "inhalation"),
    ("Ipratropium Bromide Neb", "MAIN", "IPRA2H", "1", "NEB", "IH", 12, "ipratropium 0.02% neb soln", "0.5 3", "inhalation"),
    ("Calcium Gluconate", "MAIN", "CALG1I", "2", "gm", "IV", 10, "calcium gluconate 100 mg/ml inj", "2 3", "iv piggyback"),
    ("Zolpidem Tartrate", "MAIN", "ZOLP5", "5", "mg", "PO", 8, "zolpidem 5 mg po tabs", "5 3", "po"),
    ("OxyCODONE (Immediate Release) ", "MAIN", "OXYC5", "5", "mg", "PO", 12, "oxycodone 5 mg po tabs", "5 3", "po"),
    ("HYDROmorphone (Dilaudid)", "MAIN", "HYDR1I", "1", "mg", "IV", 10, "hydromorphone 1 mg/ml syringe", "1 3", "iv push"),
    ("Fentanyl Citrate", "MAIN", "FENT2I", "50", "mcg", "IV", 12, "fentanyl citrate 0.05 mg/ml 2 ml inj", "50 3", "iv push"),
    ("Propofol", "MAIN", "PROP100IG", "1000", "mg", "IV DRIP", 10, "propofol 10 mg/ml 100 ml inj", "100 3", "iv infusion"),
    ("Midazolam", "MAIN", "MIDA2I", "2", "mg", "IV", 8, "midazolam 1 mg/ml 2 ml inj", "2 3", "iv push"),
    ("Piperacillin-Tazobactam Na", "MAIN", "PIPT4I", "4.5", "g", "IV", 10, "piperacillin-tazobactam 4.5 g ivpb", "4.5 3", "iv piggyback"),
    ("Levofloxacin", "MAIN", "LEVO750I", "750", "mg", "IV", 9, "levofloxacin in d5w 750 mg/150 ml iv soln", "750 3", "iv piggyback"),
    ("CeftriaXONE", "MAIN", "CEFT1I", "1", "gm", "IV", 9, "ceftriaxone 1 g ivpb", "1 3", "iv piggyback"),
    ("MetRONIDAZOLE (FLagyl)", "MAIN", "METR500I", "500", "mg", "IV", 8, "metronidazole 500 mg/100 ml ivpb", "500 3", "iv piggyback"),
    ("Ciprofloxacin IV", "MAIN", "CIPR400I", "400", "mg", "IV", 6, "ciprofloxacin 400 mg/200 ml ivpb", "400 3", "iv piggyback"),
    ("CefazoLIN", "MAIN", "CEFA1I", "1", "gm", "IV", 8, "cefazolin 1 g ivpb", "1 3", "iv piggyback"),
    ("PredniSONE", "MAIN", "PRED10", "10", "mg", "PO", 7, "prednisone 10 mg po tabs", "10 3", "po"),
    ("Methylprednisolone Na Succ", "MAIN", "METH125I", "125", "mg", "IV", 5, "methylprednisolone 125 mg inj", "125 3", "iv push"),
    ("Amiodarone HCl", "MAIN", "AMIO200", "200", "mg", "PO", 7, "amiodarone 200 mg po tabs", "200 3", "po"),
    ("Diltiazem", "MAIN", "DILT30", "30", "mg", "PO", 6, "diltiazem 30 mg po tabs", "30 3", "po"),
    ("Labetalol", "MAIN", "LABE10I", "10", "mg", "IV", 7, "labetalol 5 mg/ml 4 ml inj", "10 3", "iv push"),
    ("HydrALAzine", "MAIN", "HYDA10I", "10", "mg", "IV", 8, "hydralazine 20 mg/ml 1 ml inj", "10 3", "iv push"),
    ("NORepinephrine", "MAIN", "NORE4I", "4", "mg", "IV DRIP", 8, "norepinephrine 4 mg/250 ml ns", "4 3", "iv infusion"),
    ("Phenylephrine", "MAIN", "PHEN50I", "50", "mg", "IV DRIP", 6, "phenylephrine 10 mg/ml 1 ml inj", "50 3", "iv infusion"),
    ("Vasopressin", "MAIN", "VASO20I", "40", "UNIT", "IV DRIP", 4, "vasopressin 20 unit/ml 1 ml inj", "40 3", "iv infusion"),
    ("Nitroglycerin SL", "MAIN", "NTG4SL", "0.4", "mg", "SL", 6, "nitroglycerin 0.4 mg sl tabs", "0.4 3", "sublingual"),
    ("Clopidogrel Bisulfate", "MAIN", "CLOP75", "75", "mg", "PO", 8, "clopidogrel 75 mg po tabs", "75 3", "po"),
    ("Simvastatin", "MAIN", "SIMV20", "20", "mg", "PO", 6, "simvastatin 20 mg po tabs", "20 3", "po"),
    ("Levothyroxine Sodium", "MAIN", "LEVO50", "50", "mcg", "PO", 7, "levothyroxine 50 mcg po tabs", "50 3", "po"),
    ("Gabapentin", "MAIN", "GABA300", "300", "mg", "PO", 7, "gabapentin 300 mg po caps", "300 3", "po"),
    ("QUEtiapine Fumarate", "MAIN", "QUET25", "25", "mg", "PO", 6, "quetiapine 25 mg po tabs", "25 3", "po"),
    ("Haloperidol", "MAIN", "HALO5I", "5", "mg", "IV", 5, "haloperidol lactate 5 mg/ml inj", "5 3", "iv push"),
    ("Tamsulosin", "MAIN", "TAMS4", "0.4", "mg", "PO", 5, "tamsulosin 0.4 mg po caps", "0.4 3", "po"),
    ("Lactulose", "MAIN", "LACT30L", "30", "mL", "PO", 5, "lactulose 10 gram/15 ml po soln", "30 3", "po"),
    ("Omeprazole", "MAIN", "OMEP20", "20", "mg", "PO", 6, "omeprazole 20 mg po cpdr", "20 3", "po"),
    ("Sucralfate", "MAIN", "SUCR1", "1", "gm", "PO", 4, "sucralfate 1 g po tabs", "1 3", "po"),
    ("Glucagon", "MAIN", "GLUC1I", "1", "mg", "IM", 3, "glucagon 1 mg inj", "1 3", "im"),
    ("Dextrose 50%", "MAIN", "DEX50SY", "25", "gm", "IV", 5, "dextrose 50% in water (d50w) iv syringe", "25 3", "iv push"),
    ("Sodium Bicarbonate", "MAIN", "SODB650", "650", "mg", "PO", 4, "sodium bicarbonate 650 mg po tabs", "650 3", "po"),
    ("Fluconazole", "MAIN", "FLUC200I", "200", "mg", "IV", 4, "fluconazole 200 mg/100 ml ivpb", "200 3", "iv piggyback"),
    ("Meropenem", "MAIN", "MERO1I", "1000", "mg", "IV", 5, "meropenem 1 g iv recon soln", "1000 3", "iv piggyback"),
    ("CefePIME", "MAIN", "CEFE2I", "2", "g", "IV", 5, "cefepime 2 g ivpb", "2 3", "iv piggyback"),
    ("Enoxaparin Sodium", "MAIN", "ENOX40I", "40", "mg", "SC", 8, "enoxaparin 40 mg/0.4 ml sc soln", "40 3", "subcutaneous"),
    ("Spironolactone", "MAIN", "SPIR25", "25", "mg", "PO", 4, "spironolactone 25 mg po tabs", "25 3", "po"),
    ("Carvedilol", "MAIN", "CARV625", "6.25", "mg", "PO", 5, "carvedilol 6.25 mg po tabs", "6.25 3", "po"),
    ("amLODIPine", "MAIN", "AMLO5", "5", "mg", "PO", 6, "amlodipine 5 mg po tabs", "5 3", "po"),
    ("Digoxin", "MAIN", "DIGO125", "0.125", "mg", "PO", 3, "digoxin 125 mcg po tabs", "0.125 3", "po"),
    ("Nystatin Oral Suspension", "MAIN", "NYST500L", "5", "mL", "PO/NG", 4, "nystatin 100,000 unit/ml po susp", "5 3", "po"),
    ("Chlorhexidine Gluconate 0.12% Oral Rinse", "MAIN", "CHLO15L", "15", "mL", "ORAL", 5, "chlorhexidine 0.12% mouthwash", "15 3", "oral rinse"),
    ("Lidocaine 5% Patch", "MAIN", "LIDO5T", "1", "PTCH", "TP", 4, "lidocaine 5% patch", "1 3", "transdermal"),
    ("Nicotine Patch", "MAIN", "NICO14T", "14", "mg", "TP", 3, "nicotine 14 mg/24 hr td patch", "14 3", "transdermal"),
    ("Thiamine", "MAIN", "THIA100", "100", "mg", "PO", 4, "thiamine 100 mg po tabs", "100 3", "po"),
    ("FoLIC Acid", "MAIN", "FOLI1", "1", "mg", "PO", 5, "folic acid 1 mg po tabs", "1 3", "po"),
    ("Multivitamins", "MAIN", "MULT1", "1", "TAB", "PO", 4, "multivitamin po tabs", "1 3", "po"),
    ("traZODONE", "MAIN", "TRAZ50", "50", "mg", "PO", 4, "trazodone 50 mg po tabs", "50 3", "po"),
    ("Tacrolimus", "MAIN", "TACR1", "1", "mg", "PO", 2, "tacrolimus 1 mg po caps", "1 3", "po"),
    ("Metformin (Glucophage)", "MAIN", "METF500", "500", "mg", "PO", 4, "metformin 500 mg po tabs", "500 3", "po"),
    ("Glucose Gel", "MAIN", "GLUC15G", "15", "g", "PO", 2, "glucose 40% oral gel", "15 3", "po"),
)

#: Raw spelling variants of drug names seen in the ordering system (case noise), keyed by canonical name.
DRUG_CASE_VARIANTS: dict[str, tuple[str, ...]] = {
    "Heparin": ("heparin", "HEPARIN"),
    "Insulin": ("insulin",),
    "Potassium Chloride": ("potassium chloride", "Potassium Chloride Replacement"),
    "Furosemide": ("FUROSEMIDE",),
    "Acetaminophen": ("Acetaminophen (Liquid)",),
    "Sodium Chloride 0.9%  Flush": ("NS",),
}

#: CHARTEVENTS vital items used by EHRSQL: (itemid, raw label, unit, mean, sd, low, high, decimals, eicu column)
VITALS: tuple[tuple, ...] = (
    (677, "Temperature C (calc)", "Deg. C", 37.0, 0.6, 34.0, 40.5, 1, "temperature"),
    (834, "SaO2", "%", 96.5, 2.5, 78.0, 100.0, 0, "sao2"),
    (211, "Heart Rate", "BPM", 86.0, 16.0, 38.0, 170.0, 0, "heartrate"),
    (618, "Respiratory Rate", "BPM", 19.0, 4.5, 6.0, 45.0, 0, "respiration"),
    (51, "Arterial BP [Systolic]", "mmHg", 121.0, 19.0, 65.0, 210.0, 0, "systemicsystolic"),
    (8368, "Arterial BP [Diastolic]", "mmHg", 60.0, 11.0, 30.0, 115.0, 0, "systemicdiastolic"),
    (52, "Arterial BP Mean", "mmHg", 79.0, 13.0, 40.0, 140.0, 0, "systemicmean"),
)
ADMIT_WEIGHT = (762, "Admit Wt", "kg")
ADMIT_HEIGHT = (920, "Admit Ht", "cm")
#: Other chart items in D_ITEMS whose rows EHRSQL filters out of CHARTEVENTS: (itemid, label, unit, mean, sd)
OTHER_CHART_ITEMS: tuple[tuple, ...] = (
    (220045, "Heart Rate", "bpm", 85.0, 15.0),
    (646, "SpO2", "%", 97.0, 2.0),
    (455, "NBP [Systolic]", "mmHg", 122.0, 20.0),
    (198, "GCS Total", "points", 13.0, 3.0),
)

#: INPUTEVENTS_CV items: (itemid, label, mean ml, sd ml, weight, eicu celllabel, eicu cellpath group)
INPUT_ITEMS: tuple[tuple, ...] = (
    (30013, "D5W", 60.0, 40.0, 20, "d5w", "ivpb"),
    (30018, ".9% Normal Saline", 120.0, 150.0, 30, "ns", "crystalloids"),
    (30056, "PO Intake", 200.0, 120.0, 20, "p.o.", "oral"),
    (30001, "Packed RBC's", 300.0, 40.0, 5, "prbcs", "blood products"),
    (30005, "Fresh Frozen Plasma", 250.0, 30.0, 3, "ffp", "blood products"),
    (30008, "Albumin 5%", 250.0, 20.0, 4, "albumin 5%", "colloids"),
    (30020, ".45% Normal Saline", 100.0, 50.0, 5, "1/2 ns", "crystalloids"),
    (30021, "Lactated Ringers", 250.0, 200.0, 10, "lr", "crystalloids"),
    (30090, "Free Water Bolus", 150.0, 60.0, 6, "free water", "enteral"),
    (30131, "Propofol", 15.0, 10.0, 8, "propofol", "continuous infusion meds"),
    (30047, "Levophed", 10.0, 8.0, 6, "norepinephrine", "continuous infusion meds"),
    (30025, "Heparin", 8.0, 5.0, 6, "heparin", "continuous infusion meds"),
    (30100, "Replete w/Fiber", 45.0, 20.0, 8, "enteral formula volume/bolus amt (ml)", "enteral"),
    (30045, "Insulin", 3.0, 2.0, 5, "insulin", "continuous infusion meds"),
    (30027, "Pre-Admission Intake", 700.0, 500.0, 2, "pre-admission intake", "other"),
    (30063, "IV Piggyback", 50.0, 20.0, 6, "ivpb", "ivpb"),
)
#: OUTPUTEVENTS items: (itemid, label, mean ml, sd ml, weight, eicu celllabel)
OUTPUT_ITEMS: tuple[tuple, ...] = (
    (40055, "Urine Out Foley", 110.0, 70.0, 40, "urine"),
    (40069, "Urine Out Void", 250.0, 120.0, 10, "voided amount"),
    (40094, "Urine Out Condom Cath", 220.0, 100.0, 3, "condom catheter"),
    (40715, "Urine Out Suprapubic", 150.0, 80.0, 2, "suprapubic urine"),
    (40076, "Chest Tube #1", 40.0, 35.0, 6, "output amt-chest tube"),
    (40054, "Stool Out Stool", 150.0, 120.0, 4, "stool"),
    (40050, "Gastric Gastric Tube", 120.0, 90.0, 5, "gastric (ng)"),
    (40060, "Pre-Admission Output", 500.0, 300.0, 2, "pre-admission output"),
    (40051, "Emesis", 100.0, 80.0, 2, "emesis"),
    (40071, "Drain Out #1 JP Medial", 60.0, 50.0, 3, "jp drain"),
)

#: Microbiology specimens: (raw SPEC_TYPE_DESC, weight, eicu culturesite)
SPECIMENS: tuple[tuple, ...] = (
    ("BLOOD CULTURE", 35, "blood, venipuncture"),
    ("URINE", 30, "urine, catheter specimen"),
    ("SPUTUM", 12, "sputum, tracheal specimen"),
    ("MRSA SCREEN", 15, "nasopharynx"),
    ("SWAB", 5, "wound, decubitus"),
    ("CATHETER TIP-IV", 4, "other"),
    ("STOOL", 8, "stool"),
    ("BRONCHOALVEOLAR LAVAGE", 4, "bronchial lavage"),
    ("PLEURAL FLUID", 3, "pleural fluid"),
    ("CSF;SPINAL FLUID", 2, "csf"),
    ("BLOOD CULTURE ( MYCO/F LYTIC BOTTLE)", 2, "blood, central line"),
    ("Blood (EBV)", 1, "blood, venipuncture"),
)
#: Organisms: (raw ORG_NAME, weight, eicu organism); None = no growth (ORG_NAME NULL).
ORGANISMS: tuple[tuple, ...] = (
    (None, 60, "no growth"),
    ("STAPH AUREUS COAG +", 8, "staphylococcus aureus"),
    ("ESCHERICHIA COLI", 8, "escherichia coli"),
    ("KLEBSIELLA PNEUMONIAE", 5, "klebsiella pneumoniae"),
    ("PSEUDOMONAS AERUGINOSA", 4, "pseudomonas aeruginosa"),
    ("ENTEROCOCCUS SP.", 4, "enterococcus faecalis"),
    ("STAPHYLOCOCCUS, COAGULASE NEGATIVE", 5, "coagulase negative staphylococci"),
    ("YEAST", 4, "candida albicans"),
    ("PROTEUS MIRABILIS", 2, "proteus mirabilis"),
    ("ENTEROBACTER CLOACAE", 2, "enterobacter cloacae"),
    ("SERRATIA MARCESCENS", 1, "serratia marcescens"),
    ("CLOSTRIDIUM DIFFICILE", 2, "clostridium difficile"),
    ("GRAM NEGATIVE ROD(S)", 1, "other"),
)

#: ICU care units: (name, ward ids); eICU unit types by care unit
CAREUNITS: dict[str, tuple[int, ...]] = {
    "MICU": (50, 52, 23), "SICU": (33, 57), "CCU": (7, 57), "CSRU": (14, 15), "TSICU": (14, 33),
}
CAREUNIT_WEIGHTS: dict[str, int] = {"MICU": 35, "SICU": 15, "CCU": 15, "CSRU": 20, "TSICU": 15}
WARDS_GENERAL: tuple[int, ...] = (2, 3, 6, 12, 17, 26, 27, 32, 36, 45, 55)
EICU_UNITTYPE = {"MICU": "micu", "SICU": "sicu", "CCU": "cardiac icu", "CSRU": "csicu", "TSICU": "med-surg icu"}

ADMISSION_TYPES = (("EMERGENCY", 70), ("ELECTIVE", 18), ("URGENT", 6), ("NEWBORN", 0))
ADMISSION_LOCATIONS = (
    ("EMERGENCY ROOM ADMIT", 40), ("PHYS REFERRAL/NORMAL DELI", 22), ("CLINIC REFERRAL/PREMATURE", 16),
    ("TRANSFER FROM HOSP/EXTRAM", 15), ("TRANSFER FROM SKILLED NUR", 3), ("TRANSFER FROM OTHER HEALT", 2),
    ("** INFO NOT AVAILABLE **", 1),
)
EICU_ADMIT_SOURCE = {
    "EMERGENCY ROOM ADMIT": "emergency department", "PHYS REFERRAL/NORMAL DELI": "direct admit",
    "CLINIC REFERRAL/PREMATURE": "floor", "TRANSFER FROM HOSP/EXTRAM": "other hospital",
    "TRANSFER FROM SKILLED NUR": "step-down unit (sdu)", "TRANSFER FROM OTHER HEALT": "acute care/floor",
    "** INFO NOT AVAILABLE **": "other",
}
DISCHARGE_LOCATIONS = (
    ("HOME", 25), ("HOME HEALTH CARE", 22), ("SNF", 20), ("REHAB/DISTINCT PART HOSP", 11),
    ("LONG TERM CARE HOSPITAL", 4), ("SHORT TERM HOSPITAL", 2), ("DISC-TRAN CANCER/CHLDRN H", 1),
    ("HOSPICE-HOME", 2), ("LEFT AGAINST MEDICAL ADVI", 1),
)
INSURANCE = (("Medicare", 50), ("Private", 30), ("Medicaid", 10), ("Government", 4), ("Self Pay", 2))
LANGUAGES = (("ENGL", 70), ("SPAN", 6), ("RUSS", 3), ("PTUN", 2), ("CANT", 2), ("PORT", 1), (None, 16))
RELIGIONS = (
    ("CATHOLIC", 35), ("NOT SPECIFIED", 18), ("UNOBTAINABLE", 8), ("PROTESTANT QUAKER", 12), ("JEWISH", 8),
    ("OTHER", 6), ("EPISCOPALIAN", 2), ("CHRISTIAN SCIENTIST", 1), ("BUDDHIST", 1), ("MUSLIM", 1), (None, 8),
)
MARITAL = (("MARRIED", 45), ("SINGLE", 25), ("WIDOWED", 14), ("DIVORCED", 6), ("SEPARATED", 1), (None, 9))
ETHNICITIES = (
    ("WHITE", 70), ("BLACK/AFRICAN AMERICAN", 9), ("UNKNOWN/NOT SPECIFIED", 6), ("HISPANIC OR LATINO", 3),
    ("ASIAN", 3), ("OTHER", 3), ("UNABLE TO OBTAIN", 2), ("PATIENT DECLINED TO ANSWER", 1),
    ("HISPANIC/LATINO - PUERTO RICAN", 1), ("ASIAN - CHINESE", 1), ("WHITE - RUSSIAN", 1),
)
EICU_ETHNICITY = {
    "WHITE": "caucasian", "BLACK/AFRICAN AMERICAN": "african american", "HISPANIC OR LATINO": "hispanic",
    "HISPANIC/LATINO - PUERTO RICAN": "hispanic", "ASIAN": "asian", "ASIAN - CHINESE": "asian",
    "WHITE - RUSSIAN": "caucasian",
}
#: Free-text admission diagnoses (ADMISSIONS.DIAGNOSIS), upper-case as in MIMIC.
ADMIT_DIAGNOSES = (
    "PNEUMONIA", "SEPSIS", "CONGESTIVE HEART FAILURE", "CORONARY ARTERY DISEASE", "CHEST PAIN",
    "INTRACRANIAL HEMORRHAGE", "ALTERED MENTAL STATUS", "GASTROINTESTINAL BLEED", "UPPER GI BLEED",
    "ACUTE RENAL FAILURE", "ABDOMINAL PAIN", "HYPOTENSION", "FEVER", "STROKE", "S/P FALL",
    "CORONARY ARTERY DISEASE\\CORONARY ARTERY BYPASS GRAFT /SDA", "AORTIC STENOSIS", "DIABETIC KETOACIDOSIS",
    "COPD EXACERBATION", "PULMONARY EMBOLISM", "SYNCOPE", "OVERDOSE", "SEIZURE", "PANCREATITIS",
    "ST ELEVATION MYOCARDIAL INFARCTION", "ATRIAL FIBRILLATION", "LIVER FAILURE", "RESPIRATORY FAILURE",
)
#: eICU allergies: (allergyname, drugname or None, weight)
ALLERGIES: tuple[tuple, ...] = (
    ("penicillins", None, 20), ("sulfa (sulfonamide antibiotics)", None, 14), ("codeine", "codeine", 8),
    ("morphine", "morphine sulfate", 6), ("iodine", None, 5), ("latex", None, 6), ("aspirin", "aspirin", 4),
    ("bactrim", "bactrim", 4), ("shellfish", None, 4), ("cephalosporins", None, 3), ("nsaids", None, 3),
    ("levaquin", "levofloxacin", 3), ("vancomycin", "vancomycin hcl", 3), ("lisinopril", "lisinopril", 2),
    ("percocet", "oxycodone-acetaminophen", 2), ("erythromycin", None, 2), ("tape", None, 2),
)
FIRST_NAMES = (
    "James", "Mary", "John", "Patricia", "Robert", "Jennifer", "Michael", "Linda", "William", "Elizabeth",
    "David", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Charles", "Karen",
    "Daniel", "Nancy", "Matthew", "Lisa", "Anthony", "Betty", "Mark", "Margaret", "Donald", "Sandra",
    "Steven", "Ashley", "Paul", "Kimberly", "Andrew", "Emily", "Joshua", "Donna", "Kenneth", "Michelle",
)
LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin",
    "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson",
    "Walker", "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores",
)

#: eICU ``diagnosisstring`` paths of core diagnosis codes (levels 3-4 become ``diagnosisname``).
DX_PATHS: dict[str, str] = {
    "4019": "cardiovascular|vascular disorders|hypertension", "4280": "cardiovascular|ventricular disorders|congestive heart failure",
    "42731": "cardiovascular|arrhythmias|atrial fibrillation|with rapid ventricular response",
    "51881": "pulmonary|respiratory failure|acute respiratory failure",
    "51884": "pulmonary|respiratory failure|acute respiratory failure|due to obstructive lung disease",
    "5849": "renal|disorder of kidney|acute renal failure", "0389": "infectious diseases|systemic/other infections|sepsis",
    "99592": "infectious diseases|systemic/other infections|sepsis|severe", "78552": "cardiovascular|shock / hypotension|septic shock",
    "486": "pulmonary|pulmonary infections|pneumonia", "25000": "endocrine|glucose metabolism|diabetes mellitus",
    "2724": "endocrine|lipid metabolism|hyperlipidemia", "2859": "hematology|red blood cell disorders|anemia",
    "2851": "hematology|red blood cell disorders|anemia|acute blood loss anemia",
    "28529": "hematology|red blood cell disorders|anemia|anemia of critical illness",
    "2762": "renal|disorder of acid base|metabolic acidosis", "2768": "endocrine|electrolyte imbalance|hypokalemia",
    "2767": "endocrine|electrolyte imbalance|hyperkalemia", "2761": "endocrine|electrolyte imbalance|hyponatremia",
    "5990": "infectious diseases|genitourinary infections|urinary tract infection", "496": "pulmonary|disorders of the airways|copd",
    "41401": "cardiovascular|chest pain / ash|coronary artery disease|known",
    "41071": "cardiovascular|chest pain / ash|acute coronary syndrome|non-st elevation",
    "2875": "hematology|platelet disorders|thrombocytopenia", "2449": "endocrine|thyroid|hypothyroidism",
    "5789": "gastrointestinal|gi bleeding / pud|gi bleeding", "431": "neurologic|disorders of vasculature|stroke|hemorrhagic stroke",
    "43411": "neurologic|disorders of vasculature|stroke|ischemic stroke", "2930": "neurologic|altered mental status / pain|delirium",
    "5070": "pulmonary|pulmonary infections|aspiration pneumonia", "4589": "cardiovascular|shock / hypotension|hypotension",
    "41519": "pulmonary|pulmonary vascular disorders|pulmonary embolism", "5119": "pulmonary|pleural disorders|pleural effusion",
    "5715": "gastrointestinal|hepatic disease|cirrhosis of liver", "5856": "renal|disorder of kidney|esrd (end stage renal disease)",
    "5859": "renal|disorder of kidney|chronic kidney disease", "79902": "pulmonary|respiratory failure|hypoxemia",
    "27651": "endocrine|fluids and electrolytes|dehydration", "30500": "toxicology|drug abuse|ethanol overdose",
}
#: eICU ``treatmentstring`` paths of core procedure codes.
PX_PATHS: dict[str, str] = {
    "9671": "pulmonary|ventilation and oxygenation|mechanical ventilation",
    "9672": "pulmonary|ventilation and oxygenation|mechanical ventilation",
    "9604": "pulmonary|ventilation and oxygenation|mechanical ventilation",
    "9390": "pulmonary|ventilation and oxygenation|non-invasive ventilation",
    "9904": "hematology|red blood cell disorders|blood product administration|packed red blood cells",
    "9905": "hematology|coagulation and platelets|blood product administration|platelet concentrate",
    "3995": "renal|dialysis|hemodialysis", "3893": "cardiovascular|vascular surgery|central venous catheter placement",
    "3897": "cardiovascular|vascular surgery|central venous catheter placement",
    "3891": "cardiovascular|invasive hemodynamic monitoring|arterial line placement",
    "8703": "neurologic|procedures / diagnostics|head ct scan", "8741": "pulmonary|radiologic procedures / bronchoscopy|ct scan",
    "966": "endocrine|nutrition|enteral feeds", "9915": "endocrine|nutrition|parenteral feeds/tpn",
    "3491": "pulmonary|radiologic procedures / bronchoscopy|thoracentesis",
    "3322": "pulmonary|radiologic procedures / bronchoscopy|bronchoscopy", "8872": "cardiovascular|diagnostic studies|echocardiography",
}
#: eICU treatments recorded beside some orders of a core drug.
DRUG_TREATMENTS: dict[str, str] = {
    "Vancomycin": "infectious diseases|medications|therapeutic antibacterials|vancomycin",
    "Piperacillin-Tazobactam Na": "infectious diseases|medications|therapeutic antibacterials|penicillins",
    "CeftriaXONE": "infectious diseases|medications|therapeutic antibacterials|cephalosporin",
    "CefazoLIN": "infectious diseases|medications|therapeutic antibacterials|cephalosporin",
    "Levofloxacin": "infectious diseases|medications|therapeutic antibacterials|quinolone",
    "Heparin": "cardiovascular|vascular disorders|vte prophylaxis|conventional heparin therapy",
    "Enoxaparin Sodium": "cardiovascular|vascular disorders|vte prophylaxis|low molecular weight heparin",
    "Pantoprazole": "gastrointestinal|medications|stress ulcer prophylaxis|pantoprazole",
    "Famotidine": "gastrointestinal|medications|stress ulcer prophylaxis|famotidine",
    "Insulin": "endocrine|glucose metabolism|insulin", "Propofol": "neurologic|pain / agitation / altered mentation|sedative agent|propofol",
    "Fentanyl Citrate": "neurologic|pain / agitation / altered mentation|analgesics|narcotic analgesic",
    "Morphine Sulfate": "neurologic|pain / agitation / altered mentation|analgesics|narcotic analgesic",
    "NORepinephrine": "cardiovascular|shock|vasopressors|norepinephrine > 0.1 micrograms/kg/min",
    "Potassium Chloride": "renal|electrolyte correction|electrolyte administration|potassium",
    "Magnesium Sulfate": "renal|electrolyte correction|electrolyte administration|magnesium",
    "Albuterol 0.083% Neb Soln": "pulmonary|medications|bronchodilator",
    "Methylprednisolone Na Succ": "endocrine|glucocorticoids|glucocorticoid administration|methylprednisolone",
    "Labetalol": "cardiovascular|hypertension|antihypertensive drug|labetalol",
    "Acetaminophen": "neurologic|pain / agitation / altered mentation|analgesics|non-narcotic analgesic",
    "Ondansetron": "gastrointestinal|medications|antiemetic|serotonin antagonist",
    "Furosemide": "renal|electrolyte correction|diuretic|loop diuretic",
}
