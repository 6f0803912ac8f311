"""Clinical notes rendered from an EHRSQL MIMIC-III database, with injected, recorded inconsistencies (EHRCon).

For one admission, :func:`admission_mentions` picks entities from its rows (labs, vitals, prescriptions,
diagnoses, procedures) and states each as a *claim* (entity, value, unit, time, dose, route), naming the entity
by its database label or by the clinical shorthand a note would use (``Hct``, ``BUN``, ``HR``, ``SBP``:
:data:`SHORTHAND`). Some claims are deliberately falsified, and the kind of falsification is recorded:

* ``value``: a lab/vital number that no row of that entity at that time has;
* ``unit``: another unit than the row's;
* ``time``: a chart time (or prescription start date) moved by hours (days);
* ``dose``: a prescription dose multiplied or increased;
* ``absent``: an entity the admission has no row of at all (a lab, vital, drug, diagnosis or procedure).

:func:`check_sql` turns a claim into a reference check (SQL returning ``'true'`` when the claim has no matching
row, i.e. the note is inconsistent). :func:`render_notes` writes the claims into NOTEEVENTS-shaped rows
(discharge summary, nursing and physician notes) whose text a reader must parse to recover each claim.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
from dataclasses import dataclass, field
from typing import Any

#: Entity tables and the inconsistency kinds each can carry ("none" = a faithful mention).
KINDS: dict[str, tuple[str, ...]] = {
    "lab": ("none", "value", "unit", "time", "absent"),
    "vital": ("none", "value", "unit", "time", "absent"),
    "rx": ("none", "dose", "unit", "time", "absent"),
    "dx": ("none", "absent"),
    "px": ("none", "absent"),
}
#: Mentions per admission and table (at most).
PER_TABLE = {"lab": 2, "vital": 2, "rx": 2, "dx": 1, "px": 1}
#: Which note each table's mentions go into.
NOTE_OF = {"lab": "physician", "vital": "nursing", "rx": "discharge", "dx": "discharge", "px": "discharge"}
NOTE_COLUMNS = ["ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "STORETIME", "CATEGORY", "DESCRIPTION",
                "CGID", "ISERROR", "TEXT", "ADMITTIME"]
_FMT = "%Y-%m-%d %H:%M:%S"


#: Clinical shorthand real notes use for a database label (MIMIC-III ``d_labitems`` / ``d_items`` / routes, as the
#: EHRSQL vocabularies spell them). A note names an entity by its label or by one of these, and EHRCon's question
#: names it the way the note does, so matching a note's "Hct" to ``hematocrit`` is part of the task.
SHORTHAND: dict[str, tuple[str, ...]] = {
    "glucose": ("BG", "gluc"), "sodium": ("Na",), "potassium": ("K",), "chloride": ("Cl",),
    "bicarbonate": ("HCO3", "bicarb"), "platelet count": ("plt", "PLT"), "white blood cells": ("WBC",),
    "hematocrit": ("Hct", "HCT"), "hemoglobin": ("Hgb", "Hb"), "urea nitrogen": ("BUN",), "creatinine": ("Cr", "Creat"),
    "magnesium": ("Mg",), "calcium, total": ("Ca",), "phosphate": ("Phos",), "anion gap": ("AG",), "ptt": ("PTT",),
    "pt": ("PT",), "inr(pt)": ("INR",), "po2": ("pO2",), "pco2": ("pCO2",), "ph": ("pH",), "lactate": ("lactate",),
    "alanine aminotransferase (alt)": ("ALT",), "asparate aminotransferase (ast)": ("AST",),
    "bilirubin, total": ("T bili", "tbili"), "alkaline phosphatase": ("alk phos",), "troponin t": ("TropT", "trop"),
    "creatine kinase (ck)": ("CK",), "red blood cells": ("RBC",), "calculated total co2": ("TCO2",),
    "base excess": ("BE",), "oxygen saturation": ("O2 sat",), "red cell distribution width": ("RDW-CV",),
    "heart rate": ("HR",), "sao2": ("SaO2", "sats"), "respiratory rate": ("RR",), "arterial bp [systolic]": ("SBP",),
    "arterial bp [diastolic]": ("DBP",), "arterial bp mean": ("MAP",), "temperature c (calc)": ("temp",),
    "admit wt": ("wt",), "admit ht": ("ht",),
}
SHORTHAND.update({
    # more labs
    "albumin": ("alb",), "lipase": ("lip",), "ammonia": ("NH3",), "c-reactive protein": ("CRP",),
    "thyroid stimulating hormone": ("TSH",), "lactate dehydrogenase (ld)": ("LDH",), "troponin i": ("TnI", "trop I"),
    "ntprobnp": ("BNP", "proBNP"), "neutrophils": ("PMNs", "polys"), "lymphocytes": ("lymphs",), "eosinophils": ("eos",),
    "monocytes": ("monos",), "basophils": ("basos",), "sedimentation rate": ("ESR",), "% hemoglobin a1c": ("HbA1c", "A1c"),
    "cholesterol, ldl, calculated": ("LDL",), "cholesterol, hdl": ("HDL",), "triglycerides": ("TG", "trigs"),
    "iron": ("Fe",), "vitamin b12": ("B12",), "uric acid": ("urate",), "protein, total": ("TP",),
    "potassium, whole blood": ("K (whole blood)",), "sodium, whole blood": ("Na (whole blood)",),
    "parathyroid hormone": ("PTH",), "thyroxine (t4), free": ("FT4", "free T4"), "triiodothyronine (t3)": ("T3",),
    "creatine kinase, mb isoenzyme": ("CK-MB",), "digoxin": ("dig level",), "osmolality, measured": ("serum osm",),
    "carboxyhemoglobin": ("COHb",), "methemoglobin": ("MetHb",), "reticulocyte count, automated": ("retic",),
    "haptoglobin": ("hapto",), "fibrinogen, functional": ("fibrinogen", "fib"), "bilirubin, direct": ("D bili",),
    "magnesium, urine": ("urine Mg",), "creatinine, urine": ("UCr",), "sodium, urine": ("UNa",),
    "calculated bicarbonate, whole blood": ("calc HCO3",), "thyroxine (t4)": ("T4",),
    # drugs: brand names and the short forms prescribers write
    "acetaminophen": ("Tylenol", "APAP"), "acetaminophen (liquid)": ("Tylenol liquid",), "heparin": ("hep", "SQH"),
    "insulin": ("insulin SS", "RISS"), "potassium chloride": ("KCl",), "docusate sodium": ("Colace",),
    "labetalol": ("Trandate",), "ondansetron": ("Zofran",), "oxycodone (immediate release)": ("OxyIR", "oxy IR"),
    "pantoprazole": ("Protonix",), "aspirin": ("ASA",), "lisinopril": ("Zestril", "Prinivil"),
    "magnesium sulfate": ("MgSO4", "mag sulfate"), "metoprolol tartrate": ("Lopressor",), "midazolam": ("Versed",),
    "senna": ("Senokot",), "vancomycin": ("vanc", "Vanco"), "albuterol 0.083% neb soln": ("albuterol neb",),
    "amlodipine": ("Norvasc",), "atorvastatin": ("Lipitor",), "famotidine": ("Pepcid",), "fentanyl citrate": ("fent",),
    "furosemide": ("Lasix",), "lorazepam": ("Ativan",), "morphine sulfate": ("MSO4", "MS"),
    "nystatin oral suspension": ("nystatin S&S",), "prednisone": ("pred",), "albuterol-ipratropium": ("DuoNeb",),
    "amiodarone hcl": ("amio",), "amiodarone": ("Cordarone",), "ceftriaxone": ("Rocephin", "CTX"),
    "chlorhexidine gluconate 0.12% oral rinse": ("Peridex",), "dextrose 50%": ("D50", "amp of D50"),
    "levofloxacin": ("Levaquin", "levo"), "nicardipine hcl iv": ("nicardipine gtt", "nicard"),
    "norepinephrine": ("Levophed", "levo gtt"), "zolpidem tartrate": ("Ambien",), "valproate sodium": ("Depacon",),
    "diazepam": ("Valium",), "ciprofloxacin hcl": ("Cipro",), "ciprofloxacin iv": ("Cipro IV",),
    "metronidazole": ("Flagyl",), "warfarin": ("Coumadin",), "piperacillin-tazobactam": ("Zosyn", "pip-tazo"),
    "propofol": ("Diprivan",), "haloperidol": ("Haldol",), "oxycodone-acetaminophen": ("Percocet",),
    "simvastatin": ("Zocor",), "sodium chloride 0.9%  flush": ("NS flush",), "ipratropium bromide neb": ("Atrovent",),
    "clonidine tts 1 patch": ("clonidine patch",), "timolol maleate 0.5%": ("timolol gtts",),
    "calcium gluconate": ("Ca gluc",), "glucose gel": ("gluc gel",), "naproxen": ("Naprosyn",),
    "potassium chl 40 meq / 1000 ml d5 1/2 ns": ("KCl in D5 1/2NS",), "amitriptyline": ("Elavil",),
    "calcium acetate": ("PhosLo",), "clarithromycin": ("Biaxin",), "clotrimazole cream": ("Lotrimin",),
    "benzocaine 20% spray": ("Hurricaine",), "fat emulsion 20%": ("Intralipid",), "hydralazine": ("hydral",),
    "metoprolol succinate xl": ("Toprol XL",), "lansoprazole oral disintegrating tab": ("Prevacid",),
    "bisacodyl": ("Dulcolax",), "polyethylene glycol": ("Miralax",), "lactulose": ("enulose",),
    "enoxaparin sodium": ("Lovenox",), "clopidogrel bisulfate": ("Plavix",), "gabapentin": ("Neurontin",),
    "levothyroxine sodium": ("Synthroid",), "quetiapine fumarate": ("Seroquel",), "cefazolin": ("Ancef",),
    "sodium bicarbonate": ("NaHCO3",), "phenylephrine": ("neo", "Neo-Synephrine"), "dopamine": ("dopa",),
    "d5w": ("D5W",), "ns": ("normal saline",), "sodium chloride 0.9%": ("NS",),
    # diagnoses and procedures: the abbreviations notes use for the database's short titles
    "acute kidney failure nos": ("AKI", "ARF"), "septicemia nos": ("septicemia",), "hypertension nos": ("HTN",),
    "chf nos": ("CHF",), "esophageal reflux": ("GERD",), "crnry athrscl natve vssl": ("CAD",),
    "atrial fibrillation": ("afib", "AF"), "urin tract infection nos": ("UTI",), "pneumonia, organism nos": ("PNA",),
    "hyperlipidemia nec/nos": ("HLD",), "end stage renal disease": ("ESRD",), "subendo infarct, initial": ("NSTEMI",),
    "secondary malig neo lung": ("lung mets",), "pure hypercholesterolem": ("hypercholesterolemia",),
    "long-term use anticoagul": ("on chronic anticoagulation",), "hx of alcoholism": ("h/o EtOH abuse",),
    "dmii wo cmp nt st uncntr": ("DM2", "T2DM"), "depressive disorder nec": ("depression",),
    "cirrhosis of liver nos": ("cirrhosis",), "chr airway obstruct nec": ("COPD",), "anemia nos": ("anemia",),
    "alcoh dep nec/nos-unspec": ("EtOH dependence",), "ac posthemorrhag anemia": ("ABLA",),
    "ac kidny fail, tubr necr": ("ATN",), "old myocardial infarct": ("h/o MI",), "parox ventric tachycard": ("VT",),
    "obstructive sleep apnea": ("OSA",), "hypothyroidism nos": ("hypothyroid",), "tobacco use disorder": ("tobacco use",),
    "acute respiratry failure": ("acute resp failure",), "acute respiratory failure": ("ARF (resp)",),
    "hypertensive chronic kidney disease": ("HTN CKD",), "chronic kidney dis nos": ("CKD",), "hyposmolality": ("hypoNa",),
    "hyperpotassemia": ("hyperK",), "hypopotassemia": ("hypoK",), "thrombocytopenia nos": ("thrombocytopenia",),
    "diabetes mellitus": ("DM",), "mitral valve disorder": ("MVD",), "morbid obesity": ("obesity",),
    "venous cath nec": ("central line",), "insert endotracheal tube": ("intubation", "ETT placement"),
    "extracorporeal circulat": ("bypass",), "cv cath plcmt w guidance": ("CVL placement",),
    "1 int mam-cor art bypass": ("CABG x1",), "hemodialysis": ("HD",), "fiber-optic bronchoscopy": ("bronch",),
    "cont inv mec ven <96 hrs": ("mech vent",), "cont inv mec ven 96+ hrs": ("prolonged mech vent",),
    "ptca": ("PCI",), "parent infus nutrit sub": ("TPN",), "coronary arteriogram nec": ("cath",),
    "ven cath renal dialysis": ("HD line",), "thoracentesis": ("thora",), "packed cell transfusion": ("PRBC transfusion",),
    "insert 1 vascular stent": ("stent x1",), "entral infus nutrit sub": ("tube feeds",),
    "egd with closed biopsy": ("EGD w bx",), "coronar arteriogr-2 cath": ("cardiac cath",),
    "aicd check": ("ICD interrogation",), "pulmon art wedge monitor": ("swan",), "implt/repl carddefib tot": ("AICD placement",),
    "rt/left heart card cath": ("R/L heart cath",), "total hip replacement": ("THR",),
    "percu abdominal drainage": ("perc drain",), "spinal tap": ("LP",), "arterial catheterization": ("A-line",),
    "transfusion of plasma": ("FFP",), "serum transfusion nec": ("serum transfusion",), "left heart cardiac cath": ("LHC",),
    "insert intercostal cath": ("chest tube",), "temporary tracheostomy": ("trach",), "percutan aspiration liver": ("liver aspiration",),
    # the default build's most mentioned labels that had no short form yet
    "hydromorphone (dilaudid)": ("Dilaudid",), "omeprazole": ("Prilosec",),
    "lidocaine 5% patch": ("Lidoderm",), "verapamil": ("Calan",), "diltiazem": ("Cardizem", "dilt"),
    "methylprednisolone na succ": ("Solu-Medrol",), "folic acid": ("folate",),
    "trazodone": ("Desyrel",), "nitrofurantoin monohyd (macrobid)": ("Macrobid",), "fenofibrate": ("Tricor",),
    "donepezil": ("Aricept",), "fluconazole": ("Diflucan",), "simethicone": ("Mylicon",), "sterile water": ("SW",),
    "pravastatin": ("Pravachol",), "insulin human regular": ("regular insulin", "RI"), "famvir": ("famciclovir",),
    "multivitamins": ("MVI",), "metoprolol xl": ("metoprolol ER",), "meropenem": ("Merrem",),
    "maalox/benadryl/lidocaine": ("magic mouthwash",),
    "oxcarbazepine": ("Trileptal",), "cefepime": ("Maxipime",), "tizanidine": ("Zanaflex",),
    "spironolactone": ("Aldactone",), "sucralfate": ("Carafate",), "vancomycin hcl": ("vanc HCl",),
    "sulfameth/trimethoprim ss": ("Bactrim SS",), "sulfameth/trimethoprim ds": ("Bactrim DS",),
    "amoxicillin oral susp.": ("amox susp",), "bumetanide": ("Bumex",), "methadone": ("Dolophine",),
    "potassium chloride replacement": ("KCl repletion",), "glucagon": ("GlucaGen",), "oxacillin": ("oxacillin IV",),
    "mesalamine dr": ("Asacol",), "bethanechol": ("Urecholine",), "pseudoephedrine": ("Sudafed",),
    "food/vomit pneumonitis": ("aspiration PNA",), "severe sepsis": ("severe sepsis (SIRS)",),
    "iron defic anemia nos": ("IDA",), "intracerebral hemorrhage": ("ICH",), "asthma nos": ("asthma",),
    "chest pain nec": ("CP",), "prim cardiomyopathy nec": ("CMP",), "history of tobacco use": ("former smoker",),
    "aortic valve disorder": ("AV disease",), "hy kid nos w cr kid i-iv": ("HTN nephropathy",),
    "delirium d/t other cond": ("delirium",), "chr kidney dis stage iii": ("CKD III",),
    "anemia in chr kidney dis": ("anemia of CKD",), "convulsions nec": ("seizures",), "atrial flutter": ("AFL",),
    "pneumococcal pneumonia": ("strep pneumo PNA",), "fx mult ribs nos-closed": ("rib fxs",),
    "anxiety state nos": ("anxiety",), "pleural effusion nos": ("effusion",), "personal history of fall": ("h/o falls",),
    "shortness of breath": ("SOB",), "iatrogenic pneumothorax": ("iatrogenic PTX",), "backache nos": ("back pain",),
    "dvrtclo colon w/o hmrhg": ("diverticulosis",), "malnutrition mild degree": ("mild malnutrition",),
    "herpes zoster nos": ("shingles",), "nausea with vomiting": ("N/V",), "alcohol cirrhosis liver": ("EtOH cirrhosis",),
    "bph w/o urinary obs/luts": ("BPH",), "pulm embol/infarct nec": ("PE",), "cannabis abuse-unspec": ("MJ use",),
    "acidosis": ("metabolic acidosis",), "septic shock": ("septic shock (on pressors)",),
    "hyperosmolality": ("hyperNa",), "epilep nos w/o intr epil": ("epilepsy",),
    "procedure-one vessel": ("1-vessel PCI",), "sm bowel endoscopy nec": ("enteroscopy",),
    "cnt intraart bld gas mon": ("ABG monitoring",), "rt & lt heart angiocard": ("R/L heart angiography",),
    "non-invasive mech vent": ("BiPAP",), "ins drug-elut coronry st": ("DES placement",),
    "aortocor bypas-2 cor art": ("CABG x2",), "aortocor bypas-3 cor art": ("CABG x3",), "dx ultrasound-heart": ("TTE",),
    "ins nondrug elut cor st": ("BMS placement",), "inject/infus nesiritide": ("Natrecor",),
    "c.a.t. scan of head": ("head CT",), "bronch/trach lavage nec": ("BAL",), "closed bx skin/subq tiss": ("skin bx",),
    "total knee replacement": ("TKR",), "opn/oth rep aortic valve": ("AVR",), "closed liver biopsy": ("liver bx",),
    "endosc remove bile stone": ("ERCP stone extraction",), "exc wound debridement": ("wound debridement",),
    "cardiopulm resuscita nos": ("CPR",), "alcohol detoxification": ("EtOH detox",), "temporary colostomy": ("colostomy",),
    "endosc retro cholangiopa": ("ERCP",), "platelet transfusion": ("plt transfusion",),
    "oth cardiac mon output": ("CO monitoring",),
    # labels that are themselves abbreviations or brand names, written as notes write them (the public notes' most
    # named entities include RDW, MCHC, MCH, MCV: EHRCon counts them as abbreviations)
    "rdw": ("RDW",), "mch": ("MCH",), "mchc": ("MCHC",), "mcv": ("MCV",), "c4": ("C4",), "d10w": ("D10W",),
    "d15w": ("D15W",), "d5ns": ("D5NS",), "lr": ("LR",), "avapro": ("Avapro",), "sonata": ("Sonata",),
    "soma": ("Soma",), "mirapex": ("Mirapex",), "zyrtec": ("Zyrtec",), "emtriva": ("Emtriva",), "creon 12": ("Creon",),
    # labs on other fluids: the fluid, then the lab's short form
    "hematocrit, pleural": ("pleural Hct",), "wbc, csf": ("CSF WBC",), "glucose, csf": ("CSF gluc",),
    "total protein, body fluid": ("BF TP",), "potassium, urine": ("urine K",), "chloride, whole blood": ("Cl (whole blood)",),
    "wbc, joint fluid": ("synovial WBC",), "amylase, body fluid": ("BF amylase",), "albumin, body fluid": ("BF alb",),
    "albumin/creatinine, urine": ("UACR",), "rbc, pleural": ("pleural RBC",), "lactate dehydrogenase, csf": ("CSF LDH",),
    "hematocrit, other fluid": ("fluid Hct",), "glucose, body fluid": ("BF gluc",), "ld, body fluid": ("BF LDH",),
    "total protein, urine": ("urine TP",), "phosphate, urine": ("urine phos",), "bilirubin, total, pleural": ("pleural T bili",),
    "rbc, csf": ("CSF RBC",), "total protein, csf": ("CSF TP",), "creatinine, pleural": ("pleural Cr",),
    "hematocrit, ascites": ("ascitic Hct",), "bilirubin, total, body fluid": ("BF T bili",),
    # more labs
    "bilirubin, indirect": ("I bili",), "granulocyte count": ("gran ct",), "homocysteine": ("Hcy",),
    "absolute lymphocyte count": ("ALC",), "alveolar-arterial gradient": ("A-a gradient",), "atypical lymphocytes": ("atyps",),
    "metamyelocytes": ("metas",), "absolute cd4 count": ("CD4 ct",), "protein/creatinine ratio": ("UPCR",),
    "fibrin degradation products": ("FDP",), "ethanol": ("EtOH level",), "immunoglobulin a": ("IgA",),
    "rheumatoid factor": ("RF",), "ck-mb index": ("MB index",), "heparin, lmw": ("anti-Xa",), "phenytoin": ("Dilantin level",),
    "gentamicin": ("gent level",), "theophylline": ("theo level",), "reticulocyte count, manual": ("manual retic",),
    "promyelocytes": ("promyelos",), "cd4/cd8 ratio": ("CD4:CD8",), "cd3 cells, percent": ("CD3%",),
    "absolute cd3 count": ("CD3 ct",), "cholesterol, total": ("total chol",), "24 hr creatinine": ("24h UCr",),
    # more drugs: brand names and prescribers' short forms
    "vasopressin": ("vaso",), "phenytoin (suspension)": ("Dilantin susp",), "oxymetazoline": ("Afrin",),
    "diltiazem extended-release": ("Cardizem CD",), "loperamide": ("Imodium",), "cimetidine": ("Tagamet",),
    "rituximab": ("Rituxan",), "zidovudine": ("AZT",), "baclofen": ("Lioresal",), "ranitidine": ("Zantac",),
    "ketorolac": ("Toradol",), "caspofungin": ("Cancidas",), "tramadol": ("Ultram",), "nitroglycerin": ("NTG",),
    "basiliximab": ("Simulect",), "indomethacin": ("Indocin",), "nitroprusside sodium": ("Nipride",),
    "glipizide": ("Glucotrol",), "voriconazole": ("Vfend",), "dexamethasone": ("Decadron",), "ziprasidone": ("Geodon",),
    "tiotropium bromide": ("Spiriva",), "hydrochlorothiazide": ("HCTZ",), "amoxicillin-clavulanic acid": ("Augmentin",),
    "acetylcysteine 20%": ("Mucomyst",), "chlorothiazide": ("Diuril",), "bupropion": ("Wellbutrin",),
    "metoclopramide": ("Reglan",), "valsartan": ("Diovan",), "buspirone": ("BuSpar",), "tacrolimus": ("Prograf", "FK506"),
    "paroxetine hcl": ("Paxil",), "benztropine mesylate": ("Cogentin",), "diphenhydramine hcl": ("Benadryl",),
    "enalaprilat": ("Vasotec IV",), "cefpodoxime proxetil": ("Vantin",), "ferrous sulfate": ("FeSO4",),
    "magnesium oxide": ("MgO", "mag ox"), "calcium carbonate": ("Tums",), "ascorbic acid": ("vit C",),
    "vitamin d": ("vit D",), "nicotine patch": ("NicoDerm",), "methimazole": ("Tapazole",),
    "dornase alfa *nf*": ("Pulmozyme",), "posaconazole suspension": ("Noxafil",), "ipratropium bromide mdi": ("Atrovent MDI",),
    "emtricitabine-tenofovir": ("Truvada",), "indinavir sulfate": ("Crixivan",), "rosiglitazone maleate": ("Avandia",),
    "atovaquone suspension": ("Mepron",), "theophylline sr": ("Theo-24",), "topiramate": ("Topamax",),
    "fluticasone-salmeterol diskus (100/50)": ("Advair",), "influenza virus vaccine": ("flu shot",),
    "metformin (glucophage)": ("Glucophage",), "oxycodone sr (oxycontin)": ("OxyContin",),
    "hydrocortisone na succ.": ("Solu-Cortef",), "alteplase (catheter clearance)": ("Cathflo",),
    "phenytoin infatab": ("Dilantin Infatab",), "phenytoin sodium": ("Dilantin",), "thiamine": ("vit B1",),
    "hydromorphone": ("HM",), "amlodipine besylate": ("amlo",), "sodium citrate 4%": ("citrate lock",),
    "isosorbide dinitrate sa": ("ISDN SA",), "neo*iv*morphine sulfate": ("neo MSO4",), "clobetasol propionate 0.05% ointment": ("Temovate",),
    "d5w (excel bag)": ("D5W bag",), "neo*desitin creamy": ("Desitin",), "oxycodone-acetaminophen elixir": ("Roxicet",),
    "triamcinolone acetonide 0.025% cream": ("TAC cream",), "albumin 25% (12.5g / 50ml)": ("25% albumin",),
    "albumin 5% (25g / 500ml)": ("5% albumin",), "heparin sodium (preservative free)": ("PF heparin",),
    "potassium chl 40 meq / 1000 ml d5w": ("KCl in D5W",), "ns epidural bag (0.9% nacl)": ("epidural NS",),
    "heparin flush picc (100 units/ml)": ("PICC flush",), "heparin flush hickman (100 units/ml)": ("Hickman flush",),
    "ibuprofen suspension": ("Motrin susp",), "*nf* nicardipine hcl iv": ("Cardene IV",),
    # more diagnoses and procedures
    "c.a.t. scan of abdomen": ("abd CT",), "colonoscopy": ("c-scope",), "percu endosc gastrostomy": ("PEG",),
    "percu endosc jejunostomy": ("PEJ",), "exploratory laparotomy": ("ex lap",), "laparoscopic cholecystec": ("lap chole",),
    "peritoneal dialysis": ("PD",), "d & c nec": ("D&C",), "flexible sigmoidoscopy": ("flex sig",),
    "adm inhal nitric oxide": ("iNO",), "inser temp pacemaker sys": ("temp pacer",), "ami anterior wall, init": ("anterior STEMI",),
    "dmii wo cmp uncntrld": ("uncontrolled DM2",), "hx tia/stroke w/o resid": ("h/o TIA",), "gastrointest hemorr nos": ("GIB",),
    "bacterial pneumonia nos": ("bacterial PNA",), "staph pneumonia nec": ("staph PNA",), "pyelonephritis nos": ("pyelo",),
    "status cardiac pacemaker": ("s/p PPM",), "depend-supplement oxygen": ("home O2",), "crbl art ocl nos w infrc": ("ischemic CVA",),
    "hx of gi malignancy nec": ("h/o GI cancer",), "oth transureth prostatec": ("TURP",), "other permanent tracheos": ("perm trach",),
    "int insert dual-cham dev": ("dual-chamber PPM",), "clo endosc bx bile duct": ("ERCP bx",),
    "inject ca chemother nec": ("chemo",), "adv eff insulin/antidiab": ("hypoglycemia (insulin)",),
    "opn/oth rep aort vlv-tis": ("tissue AVR",), "sm-to-sm bowel anastom": ("SB anastomosis",),
    "vena cav angiocardiogram": ("venacavogram",), "fall on stair/step nec": ("fall down stairs",),
    "oth cerv fusion ant/ant": ("ACDF",), "drsl/dslmb fus post/post": ("posterior lumbar fusion",),
    "excise lg intestine les": ("colon lesion excision",), "percutan liver aspirat": ("perc liver aspiration",),
    "endosc destruc bronc les": ("bronch ablation",), "pancreat sphincteroplas": ("pancreatic sphincteroplasty",),
    "pulsation balloon implan": ("IABP",), "revise sm bowel anastom": ("SB anastomosis revision",),
    "rt heart angiocardiogram": ("R heart angio",), "small bowel incision nec": ("enterotomy",),
    "skin & subq dx proc nec": ("skin dx proc",), "intermed coronary synd": ("unstable angina",),
    "periph t cell lym abdom": ("PTCL (abd)",), "dis phosphorus metabol": ("phos disorder",),
})
#: Share of mentions written in shorthand when the label has one (the public EHRCon notes name 82 % of their
#: entities by abbreviations or brand names: BP, Hct, Tmax, Percocet).
SHORTHAND_SHARE = 0.95


@dataclass
class Mention:
    """One entity stated in a note: what is claimed, and the recorded injection (``kind``).

    ``entity`` is the database label the reference check matches; ``surface`` is how the note writes it (the
    label, or clinical shorthand such as ``Hct``), which is what EHRCon's question names.
    """

    table: str
    entity: str
    kind: str
    claim: dict[str, Any] = field(default_factory=dict)
    surface: str = ""

    def __post_init__(self) -> None:
        self.surface = self.surface or self.entity

    @property
    def inconsistent(self) -> bool:
        """True when an inconsistency was injected."""
        return self.kind != "none"


def _q(text: str) -> str:
    return str(text).replace("'", "''")


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def check_sql(hadm_id: int, table: str, claim: dict[str, Any]) -> str:
    """SQL that returns ``'true'`` when no row of admission ``hadm_id`` matches ``claim`` (inconsistent)."""
    if table in ("lab", "vital"):
        events, items = ("labevents", "d_labitems") if table == "lab" else ("chartevents", "d_items")
        link = "" if table == "lab" else " and d_items.linksto = 'chartevents'"
        cond = (f"{events}.itemid in ( select {items}.itemid from {items} where {items}.label = '{_q(claim['entity'])}'"
                f"{link} ) and {events}.charttime = '{claim['time']}:00' and abs( {events}.valuenum - {claim['value']} )"
                f" < 1e-6 and {events}.valueuom = '{_q(claim['unit'])}'")
    elif table == "rx":
        events = "prescriptions"
        cond = (f"prescriptions.drug = '{_q(claim['entity'])}' and cast( prescriptions.dose_val_rx as real ) = "
                f"{claim['dose']} and prescriptions.dose_unit_rx = '{_q(claim['unit'])}' and prescriptions.route = "
                f"'{_q(claim['route'])}' and date( prescriptions.startdate ) = '{claim['date']}'")
    elif table in ("dx", "px"):
        events, d = ("diagnoses_icd", "d_icd_diagnoses") if table == "dx" else ("procedures_icd", "d_icd_procedures")
        cond = f"{events}.icd9_code in ( select {d}.icd9_code from {d} where {d}.short_title = '{_q(claim['entity'])}' )"
    else:
        raise ValueError(f"unknown entity table {table!r}; use one of {sorted(KINDS)}")
    return (f"select case when count( * ) = 0 then 'true' else 'false' end from {events} "
            f"where {events}.hadm_id = {int(hadm_id)} and {cond}")


def _rows(con: sqlite3.Connection, sql: str, *args: Any) -> list[tuple]:
    return con.execute(sql, args).fetchall()


class Vocab:
    """Database-wide candidates for absent entities, falsified values and swapped units (read once per build).

    Falsified and absent statements draw their numbers, units and entities from the database's own rows (a value
    some row of that entity has, a unit some row of that table has, weighted by how often rows carry them), so a
    false statement is written exactly like a true one: same decimals, rounding, units and lengths. Before, they
    printed random two-decimal values (``temp 50.19 deg. c``) and the format alone predicted the label.
    """

    def __init__(self, con: sqlite3.Connection) -> None:
        #: Every entity label of the database, lower-cased (a shorthand form may not be one of them).
        self.labels = frozenset(str(r[0]).lower() for r in _rows(
            con, "select label from d_labitems union select label from d_items union select drug from prescriptions "
                 "union select short_title from d_icd_diagnoses union select short_title from d_icd_procedures"))
        self.values: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for table, sql in (("lab", "select d.label, l.valuenum, l.valueuom from labevents l join d_labitems d "
                                   "on l.itemid = d.itemid order by l.row_id"),
                           ("vital", "select d.label, c.valuenum, c.valueuom from chartevents c join d_items d "
                                     "on c.itemid = d.itemid order by c.row_id")):
            for label, value, unit in _rows(con, sql):
                self.values.setdefault((table, label), []).append((_num(value), unit))
        self.doses: dict[str, list[tuple[str, str, str]]] = {}
        for drug, dose, unit, route in _rows(con, "select drug, dose_val_rx, dose_unit_rx, route from prescriptions "
                                                  "order by row_id"):
            self.doses.setdefault(drug, []).append((str(dose), unit, route))
        self.unit_rows = {
            "lab": [r[0] for r in _rows(con, "select valueuom from labevents order by row_id")],
            "vital": [r[0] for r in _rows(con, "select valueuom from chartevents order by row_id")],
            "rx": [r[0] for r in _rows(con, "select dose_unit_rx from prescriptions order by row_id")],
        }
        self.entity_rows = {
            "lab": [r[0] for r in _rows(con, "select d.label from labevents l join d_labitems d on l.itemid = d.itemid "
                                             "order by l.row_id")],
            "vital": [r[0] for r in _rows(con, "select d.label from chartevents c join d_items d on c.itemid = d.itemid "
                                               "order by c.row_id")],
            "rx": [r[0] for r in _rows(con, "select drug from prescriptions order by row_id")],
            "dx": [r[0] for r in _rows(con, "select d.short_title from diagnoses_icd x join d_icd_diagnoses d on "
                                            "x.icd9_code = d.icd9_code order by x.row_id")],
            "px": [r[0] for r in _rows(con, "select d.short_title from procedures_icd x join d_icd_procedures d on "
                                            "x.icd9_code = d.icd9_code order by x.row_id")],
        }


def _event_rows(con: sqlite3.Connection, table: str, hadm: int) -> list[tuple]:
    if table == "lab":
        return _rows(con, "select d.label, l.charttime, l.valuenum, l.valueuom from labevents l join d_labitems d "
                          "on l.itemid = d.itemid where l.hadm_id = ? order by l.row_id", hadm)
    if table == "vital":
        return _rows(con, "select d.label, c.charttime, c.valuenum, c.valueuom from chartevents c join d_items d "
                          "on c.itemid = d.itemid where c.hadm_id = ? order by c.row_id", hadm)
    if table == "rx":
        return _rows(con, "select drug, startdate, dose_val_rx, dose_unit_rx, route from prescriptions "
                          "where hadm_id = ? order by row_id", hadm)
    events, d = ("diagnoses_icd", "d_icd_diagnoses") if table == "dx" else ("procedures_icd", "d_icd_procedures")
    return _rows(con, f"select distinct d.short_title from {events} e join {d} d on e.icd9_code = d.icd9_code "
                      f"where e.hadm_id = ? order by 1", hadm)


def _draw_other(rng: random.Random, pool: list[Any], avoid: Any, tries: int = 30) -> Any:
    """A random element of ``pool`` (row-weighted: pools hold one entry per row) other than ``avoid``, or None."""
    if not pool:
        return None
    for _ in range(tries):
        pick = rng.choice(pool)
        if pick != avoid:
            return pick
    others = [p for p in dict.fromkeys(pool) if p != avoid]
    return rng.choice(others) if others else None


def _falsify(rng: random.Random, table: str, kind: str, claim: dict[str, Any], vocab: Vocab) -> dict[str, Any] | None:
    """A copy of a faithful claim with one field falsified from the database's own distribution (another value of
    that entity, another unit of that table, another dose of that drug), or None when there is none."""
    claim = dict(claim)
    if kind == "value":
        pool = [v for v, _ in vocab.values.get((table, claim["entity"]), ())]
        value = _draw_other(rng, pool, claim["value"])
        if value is None:
            return None
        claim["value"] = value
    elif kind == "unit":
        unit = _draw_other(rng, vocab.unit_rows[table], claim["unit"])
        if unit is None:
            return None
        claim["unit"] = unit
    elif kind == "time" and table == "rx":
        day = dt.date.fromisoformat(claim["date"]) + dt.timedelta(days=rng.choice((-3, -2, -1, 1, 2, 3, 4)))
        claim["date"] = day.isoformat()
    elif kind == "time":
        when = dt.datetime.strptime(claim["time"], "%Y-%m-%d %H:%M")
        claim["time"] = (when + dt.timedelta(hours=rng.choice((-30, -12, -6, -3, 3, 5, 8, 20)))).strftime("%Y-%m-%d %H:%M")
    elif kind == "dose":
        pool = [d for d, _, _ in vocab.doses.get(claim["entity"], ())] + [d for d, _, _ in rng.choice(
            list(vocab.doses.values()) or [[]])]
        dose = _draw_other(rng, pool, str(claim["dose"]))
        if dose is None:
            return None
        claim["dose"] = dose
    return claim


def _absent(rng: random.Random, table: str, present: set[str], vocab: Vocab, when: str) -> dict[str, Any] | None:
    """A claim about an entity the admission has no row of (or None when every candidate is present): the entity
    drawn as often as database rows name it, its value, unit, dose and route those of one of its rows."""
    pool = vocab.entity_rows[table]
    entity = None
    for _ in range(100):
        pick = rng.choice(pool) if pool else None
        if pick is not None and pick not in present and rng.random() * MENTION_WEIGHT < mention_weight(pick):
            entity = pick
            break
    if entity is None:
        return None
    if table in ("dx", "px"):
        return {"entity": entity}
    if table == "rx":
        dose, unit, route = rng.choice(vocab.doses[entity])
        return {"entity": entity, "dose": dose, "unit": unit, "route": route, "date": when[:10]}
    value, unit = rng.choice(vocab.values[(table, entity)])
    return {"entity": entity, "value": value, "unit": unit, "time": when[:16]}


#: How much more often a note mentions an entity that has a short form (:data:`SHORTHAND`) than one that has none
#: (faithful and absent entities alike, before the label is drawn): real notes name the common labs, vitals and
#: drugs (BP, Hct, Tmax, Lasix) far more often than a pleural fluid's amylase.
MENTION_WEIGHT = 4.0


def mention_weight(entity: str) -> float:
    """The relative chance that a note mentions ``entity``: :data:`MENTION_WEIGHT` when it has a short form, else 1."""
    return MENTION_WEIGHT if SHORTHAND.get(entity) else 1.0


#: Chance that a mention is falsified when drawn (the build then balances each table to the public share).
FALSIFY = 0.4


def _surface(entity: str, rng: random.Random, taken: set[str], labels: frozenset[str] = frozenset()) -> str:
    """How a note writes ``entity``: its shorthand about :data:`SHORTHAND_SHARE` of the time, never a form another
    entity of the admission already uses, nor another entity's database label (``labels``; compared
    case-insensitively), so that the name in the question means one entity only."""
    own = entity.lower()
    forms = [f for f in SHORTHAND.get(entity, ())
             if f.lower() == own or (f.lower() not in taken and f.lower() not in labels)]
    if forms and rng.random() < SHORTHAND_SHARE:
        return rng.choice(forms)
    return entity


def admission_mentions(con: sqlite3.Connection, hadm: int, admit: str, rng: random.Random,
                       vocab: Vocab) -> list[Mention]:
    """Entities of one admission stated as claims, some falsified (kind recorded), each named by its label or
    its clinical shorthand (unique within the admission)."""
    mentions: list[Mention] = []
    used: set[str] = set()
    forms: set[str] = set()
    for table, n in PER_TABLE.items():
        rows = _event_rows(con, table, hadm)
        present = {r[0] for r in rows}
        # notes mention what clinicians write about (the common labs, vitals and drugs, which have short forms)
        # more often: weighted sampling without replacement, the same weights as absent entities are drawn with
        names = sorted(sorted(present - used), key=lambda e: -rng.random() ** (1.0 / mention_weight(e)))
        for name in names[:n]:
            kind = "none" if rng.random() >= FALSIFY else rng.choice(KINDS[table][1:])
            if kind == "absent":
                # a time of one of the admission's own rows, as a true statement has (not the admission time)
                when = rng.choice(rows)[1] if rows and table in ("lab", "vital", "rx") else admit
                claim = _absent(rng, table, present | used, vocab, when)
                if claim is None:
                    continue
            else:
                candidates = [r for r in rows if r[0] == name]
                row = rng.choice(candidates)
                if table in ("lab", "vital"):
                    claim = {"entity": name, "time": row[1][:16], "value": _num(row[2]), "unit": row[3]}
                elif table == "rx":
                    claim = {"entity": name, "date": row[1][:10], "dose": row[2], "unit": row[3], "route": row[4]}
                else:
                    claim = {"entity": name}
                if kind != "none":
                    claim = _falsify(rng, table, kind, claim, vocab)
                    if claim is None:
                        continue
            if claim["entity"] in used or claim["entity"].lower() in forms:
                continue
            used.add(claim["entity"])
            surface = _surface(claim["entity"], rng, forms | {u.lower() for u in used}, vocab.labels)
            forms.add(surface.lower())
            mentions.append(Mention(table=table, entity=claim["entity"], kind=kind, claim=claim, surface=surface))
    return mentions


def _sentence(m: Mention, rng: random.Random) -> str:
    c, e = m.claim, m.surface
    if m.table == "lab":
        return rng.choice(("{e} was {v} {u} at {t}.", "labs at {t} showed {e} {v} {u}.", "{e} resulted {v} {u} ({t}).",
                           "{t} labs: {e} {v} {u}.", "{e} {v}{u} @ {t}.")).format(e=e, v=c["value"], u=c["unit"],
                                                                                 t=c["time"])
    if m.table == "vital":
        return rng.choice(("{e} {v} {u} at {t}.", "at {t} the {e} was {v} {u}.", "{e} charted as {v} {u} at {t}.",
                           "VS @ {t}: {e} {v} {u}.", "{e} {v}{u} @ {t}, resting comfortably.")).format(
            e=e, v=c["value"], u=c["unit"], t=c["time"])
    if m.table == "rx":
        return rng.choice(("{e} {d} {u} {r} was started on {t}.", "started {e} {d} {u} ({r}) on {t}.",
                           "{t}: started {e} {d}{u} {r}.", "was started on {e} {d} {u} {r} {t}.")).format(
            e=e, d=c["dose"], u=c["unit"], r=c["route"], t=c["date"])
    if m.table == "dx":
        return rng.choice(("diagnosis this admission: {e}.", "patient was diagnosed with {e}.", "dx: {e}.",
                           "found to have {e} this adm.")).format(e=e)
    return rng.choice(("procedure performed: {e}.", "underwent {e} during this stay.", "s/p {e} this adm.")).format(e=e)


#: Filler lines of a note that claim nothing checkable (shorthand as nurses and physicians chart it).
_FILLER = {
    "discharge": ("tolerated diet, ambulating w/ assist.", "d/w patient and family, questions answered.",
                  "f/u w/ pcp in 1-2 wks.", "afebrile overnight, no acute events.", "pain well controlled on current regimen."),
    "nursing": ("alert and oriented x3, calm and cooperative.", "skin intact, turned q2h.", "voiding qs, no c/o pain.",
                "resp: lungs clear bilat, no distress.", "family at bedside, updated on poc.", "will cont to monitor."),
    "physician": ("a/p: cont current mgmt, trend labs.", "no acute overnight events.", "exam unchanged from yesterday.",
                  "d/w attending, plan as above.", "consider d/c planning in am."),
}


_OPENINGS = {
    "discharge": ("discharge summary", "admission date: {admit}. brief hospital course follows.",
                  "discharge instructions: follow up with primary care in one week."),
    "nursing": ("nursing progress note", "alert, resting in bed. vitals reviewed.", "will continue to monitor."),
    "physician": ("physician progress note", "assessment and plan reviewed with team. pertinent results:",
                  "continue current management."),
}


def render_notes(hadm: int, subject: int, admit: str, disch: str | None, mentions: list[Mention],
                 rng: random.Random, first_row_id: int) -> list[list[Any]]:
    """NOTEEVENTS rows (columns :data:`NOTE_COLUMNS`) for one admission: one note per note type with mentions."""
    out = []
    for k, note in enumerate(("discharge", "nursing", "physician")):
        mine = [m for m in mentions if NOTE_OF[m.table] == note]
        if not mine:
            continue
        description, opening, closing = _OPENINGS[note]
        body = [opening.format(admit=admit[:10])] + [_sentence(m, rng) for m in mine]
        filler = list(_FILLER[note])
        rng.shuffle(filler)
        for line in filler[: rng.randint(1, 3)]:
            body.insert(rng.randint(1, len(body)), line)
        body.append(closing)
        when = disch or admit
        out.append([first_row_id + len(out), subject, hadm, when[:10], when if note != "discharge" else "", when,
                    note if note != "discharge" else "discharge summary", description, 14000 + k, "",
                    "\n".join(body), admit])
    return out


#: A feature bucket holding less than this share of the statements is not reported (too few to say anything).
MIN_BUCKET_SHARE = 0.05


def _decimals(text: str) -> str:
    return str(len(text.split(".", 1)[1])) if "." in text else "0"


def _rounding(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        return "text"
    if value != int(value):
        return "fraction"
    return "x10" if value % 10 == 0 else "x5" if value % 5 == 0 else "integer"


#: A short form -> the database label it names (each form names one label: tests/tasks/test_ehrcon_surface.py).
ALIAS_OF: dict[str, str] = {form.lower(): entity for entity, forms in SHORTHAND.items() for form in forms}


def resolve(surface: str, labels: frozenset[str] | set[str]) -> str | None:
    """The database label a note's entity name stands for: the label itself, however capitalised (``RDW`` for
    ``rdw``), else the label whose short form it is (``Hct`` -> ``hematocrit``), else None. ``labels``: the
    database's labels, lower-cased (:attr:`Vocab.labels`); a label wins over a short form spelled alike."""
    low = surface.strip().lower()
    if low in labels:
        return low
    entity = ALIAS_OF.get(low)
    return entity if entity is not None and entity in labels else None


def abbreviated(entity: str, surface: str) -> bool:
    """Whether a note names ``entity`` by an abbreviation or brand name: any form other than the database's own
    (lower-case) label, including a label that is itself an acronym written as one (``RDW``, ``MCHC``)."""
    return surface != entity


def surface_features(table: str, claim: dict[str, Any], surface: str) -> dict[str, str]:
    """What a statement looks like, without reading the database: the number's decimals, rounding and length,
    the unit, the name's length and whether it is shorthand (``na`` where a table states no number)."""
    number = str(claim.get("value", claim.get("dose", "")))
    return {
        "decimals": _decimals(number) if number else "na",
        "rounding": _rounding(number) if number else "na",
        "number_length": str(min(len(number), 6)) if number else "na",
        "unit": str(claim.get("unit", "na")),
        "name_length": str(min(len(surface) // 4, 6)),
        "shorthand": str(surface.lower() != str(claim.get("entity", surface)).lower()),
        "statement_length": str(min(sum(len(str(v)) for v in claim.values()) // 8, 8)),
    }


def surface_association(items: list[tuple[str, dict[str, Any], str, bool]],
                        min_share: float = MIN_BUCKET_SHARE) -> dict[str, Any]:
    """How much each surface feature of a statement predicts its label.

    Args:
        items: ``(table, claim, surface, inconsistent)`` per statement (an EHRCon instance's metadata and label).
        min_share: Buckets holding fewer statements are ignored.

    Returns:
        ``{"base", "worst", "features"}``: ``base`` the inconsistent share; per feature, the bucket whose
        inconsistent share is farthest from ``base`` (``bucket``, ``share``, ``rate``, ``diff`` in points);
        ``worst`` the largest ``diff`` over features (what "predicts its label by N points" means).
    """
    n = len(items)
    base = sum(label for *_, label in items) / n if n else 0.0
    features: dict[str, dict[str, Any]] = {}
    buckets: dict[str, dict[str, list[bool]]] = {}
    for table, claim, surface, label in items:
        for name, value in surface_features(table, claim, surface).items():
            buckets.setdefault(name, {}).setdefault(value, []).append(label)
    for name, groups in sorted(buckets.items()):
        best = None
        for value, labels in sorted(groups.items()):
            if len(labels) < min_share * n:
                continue
            rate = sum(labels) / len(labels)
            diff = round(100 * abs(rate - base), 2)
            if best is None or diff > best["diff"]:
                best = {"bucket": value, "share": round(len(labels) / n, 4), "rate": round(rate, 4), "diff": diff}
        features[name] = best or {"bucket": None, "share": 0.0, "rate": base, "diff": 0.0}
    return {"base": round(base, 4), "worst": max((f["diff"] for f in features.values()), default=0.0),
            "features": features}
