"""Hand-worked cases for all 55 MedCalc-Bench calculators (medagentgym.tasks.medcalc), plus unit conversion and errors.

Every expected value below was worked by hand from the published formula; the arithmetic is in the comment.
Decimal answers are compared to 3 decimals (the benchmark's rounding), scores exactly.
"""

from __future__ import annotations

import pytest

from medagentgym.tasks.medcalc import (
    CALCULATORS,
    Entities,
    MissingEntity,
    bounds,
    calculate,
    get_calculator,
)
from medagentgym.tasks.medcalc.units import convert

M, F = "Male", "Female"
YRS = "years"


def yrs(n):
    return [n, YRS]


# (calculator id, entities, expected answer)  -- one tuple per hand-worked case
CASES = [
    # --- 2 Cockcroft-Gault (weight by BMI class) ---
    # BMI 70/1.75^2 = 22.86 (normal) -> min(IBW, actual); IBW = 50 + 2.3*(175/2.54 - 60) = 70.465 -> 70 kg.
    # CrCl = (140-60)*70/(72*1.0) = 5600/72 = 77.778
    (2, {"sex": M, "age": yrs(60), "weight": [70, "kg"], "height": [175, "cm"], "creatinine": [1.0, "mg/dL"]}, 77.778),
    # BMI 100/1.6^2 = 39.1 (obese) -> ABW; IBW = 45.5 + 2.3*(62.992-60) = 52.382; ABW = 52.382 + 0.4*47.618 = 71.429
    # Cr 88.4 umol/L = 1.0 mg/dL; CrCl = 90*71.429/72 * 0.85 = 75.893
    (2, {"sex": F, "age": yrs(50), "weight": [100, "kg"], "height": [160, "cm"], "creatinine": [88.4, "µmol/L"]},
     75.893),
    # BMI 50/1.8^2 = 15.4 (underweight) -> actual 50 kg; CrCl = 110*50/(72*0.8) = 5500/57.6 = 95.486
    (2, {"sex": M, "age": yrs(30), "weight": [50, "kg"], "height": [180, "cm"], "creatinine": [0.8, "mg/dL"]}, 95.486),
    # --- 3 CKD-EPI 2021 ---
    # male, Cr/0.9 = 1.33333: 142 * 1.33333^-1.2 (=0.708066) * 0.9938^50 (=0.732740) = 142 * 0.518829 = 73.674
    (3, {"sex": M, "age": yrs(50), "creatinine": [1.2, "mg/dL"]}, 73.674),
    # female, Cr/0.7 = 0.857143: 142 * 0.857143^-0.241 (=1.037849) * 0.9938^40 (=0.779758) * 1.012 = 116.295
    (3, {"sex": F, "age": yrs(40), "creatinine": [0.6, "mg/dL"]}, 116.295),
    # --- 4 CHA2DS2-VASc ---
    # age 70 (+1), female (+1), hypertension (+1), diabetes (+1) = 4
    (4, {"sex": F, "age": yrs(70), "Hypertension history": True, "Diabetes history": True}, 4),
    # age 80 (+2), stroke and TIA count once (+2) = 4
    (4, {"sex": M, "age": yrs(80), "Stroke": True, "Transient Ischemic Attacks History": True}, 4),
    (4, {"sex": M, "age": yrs(64), "Congestive Heart Faliure": False}, 0),  # boundary: 64 -> 0
    (4, {"sex": M, "age": yrs(65)}, 1),  # boundary: 65 -> 1
    (4, {"sex": M, "age": yrs(75), "Congestive Heart Failure": True, "Vascular disease history": True}, 4),  # 2+1+1
    # --- 5 MAP --- 2/3*80 + 1/3*120 = 53.333 + 40 = 93.333
    (5, {"Systolic Blood Pressure": [120, "mm hg"], "Diastolic Blood Pressure": [80, "mmhg"]}, 93.333),
    # --- 6 BMI --- 70/1.75^2 = 22.857 ; 154 lbs = 69.853 kg, 68 in = 1.7272 m -> 69.853/2.98322 = 23.415
    (6, {"weight": [70, "kg"], "height": [175, "cm"]}, 22.857),
    (6, {"weight": [154, "lbs"], "height": [68, "in"]}, 23.415),
    # --- 7 Calcium correction --- 8.0 + 0.8*(4-2.5) = 9.2 ; 2.0 mmol/L = 8.016 mg/dL, 30 g/L = 3.0 g/dL -> 8.816
    (7, {"Calcium": [8.0, "mg/dL"], "Albumin": [2.5, "g/dL"]}, 9.2),
    (7, {"Calcium": [2.0, "mmol/L"], "Albumin": [30, "g/L"]}, 8.816),
    # --- 8 Wells' PE --- HR 110 (1.5) + DVT signs (3) + hemoptysis (1) = 5.5
    (8, {"Heart Rate or Pulse": [110, "beats per minute"], "Clinical signs and symptoms of Deep Vein Thrombosis": True,
         "Hemoptysis": True}, 5.5),
    # HR 100 is not > 100 (0); immobilisation and surgery together count once (1.5); prior DVT (1.5) = 3.0
    (8, {"Heart Rate or Pulse": [100, "beats per minute"], "Immobilization for at least 3 days": True,
         "Surgery in the previous 4 weeks": True, "Previously documented Deep Vein Thrombosis": True}, 3.0),
    # --- 9 MDRD --- 175 * 1^-1.154 * 60^-0.203 (=0.43556) = 76.223
    (9, {"sex": M, "age": yrs(60), "creatinine": [1.0, "mg/dL"], "Race": "White"}, 76.223),
    # 175 * 2^-1.154 (=0.44938) * 50^-0.203 (=0.45197) * 0.742 * 1.212 = 31.965
    (9, {"sex": F, "age": yrs(50), "creatinine": [2.0, "mg/dL"], "Race": "Black"}, 31.965),
    # --- 10 IBW --- male 70 in: 50 + 2.3*10 = 73 ; female 160 cm = 62.992 in: 45.5 + 2.3*2.992 = 52.382
    (10, {"sex": M, "height": [70, "in"]}, 73.0),
    (10, {"sex": F, "height": [160, "cm"]}, 52.382),
    # --- 11 Bazett --- HR 60: RR 1 s -> 400 ; HR 90: RR 0.6667, sqrt 0.81650 -> 400/0.81650 = 489.898
    (11, {"Heart Rate or Pulse": [60, "beats per minute"], "QT interval": [400, "msec"]}, 400.0),
    (11, {"Heart Rate or Pulse": [90, "beats per minute"], "QT interval": [400, "msec"]}, 489.898),
    # --- 13 due date --- 01/01/2023 + 280 days = day 281 of 2023 = Oct 8 ; cycle 30 adds 2 days
    (13, {"Last menstrual date": "01/01/2023", "cycle length": 28}, "10/08/2023"),
    (13, {"Last menstrual date": "01/01/2023", "cycle length": 30}, "10/10/2023"),
    # --- 15 Child-Pugh --- bili 1.5 (1) + alb 3.0 (2) + INR 1.8 (2) + slight ascites (2) + grade 1-2 (2) = 9
    (15, {"Bilirubin": [1.5, "mg/dL"], "Albumin": [3.0, "g/dL"], "international normalized ratio": 1.8,
          "Ascites": "slight", "Encephalopathy": "Grade 1-2"}, 9),
    # bili 3.5 (3) + alb 2.5 (3) + INR 2.5 (3) + missing ascites (1) + missing encephalopathy (1) = 11
    (15, {"Bilirubin": [3.5, "mg/dL"], "Albumin": [2.5, "g/dL"], "international normalized ratio": 2.5}, 11),
    # boundaries: bili 2.0 -> 2, albumin 3.5 -> 2, INR 1.7 -> 2 ; + absent ascites 1 + no enceph 1 = 8
    (15, {"Bilirubin": [2.0, "mg/dL"], "Albumin": [3.5, "g/dL"], "international normalized ratio": 1.7,
          "Ascites": "absent", "Encephalopathy": "No Encephalopathy"}, 8),
    # bili 3.0 -> 2 (2-3), 51.3 umol/L = 3.0 mg/dL ; alb 2.8 -> 2 ; INR 2.3 -> 2 ; moderate ascites 3 ; 3-4 -> 3 = 12
    (15, {"Bilirubin": [51.3, "µmol/L"], "Albumin": [2.8, "g/dL"], "international normalized ratio": 2.3,
          "Ascites": "moderate", "Encephalopathy": "Grade 3-4"}, 12),
    # --- 16 Wells' DVT --- active cancer 1 + entire leg 1 - alternative dx 2 = 0
    (16, {"Active cancer": True, "Entire Leg Swollen": True,
          "Alternative diagnosis to Deep Vein Thrombosis as likely or more likely": True}, 0),
    # bedridden and major surgery are one criterion (1) + calf swelling 1 + pitting edema 1 = 3
    (16, {"Bedridden recently >3 days or major surgery within 12 weeks": True, "Major surgery within 12 weeks": True,
          "Calf swelling >3 centimeters compared to the other leg": True,
          "Pitting edema, confined to symptomatic leg": True}, 3),
    (16, {"Alternative diagnosis to Deep Vein Thrombosis as likely or more likely": True}, -2),
    # --- 17 RCRI --- elevated-risk surgery 1 + ischemic heart disease 1 + creatinine 2.5 > 2 (1) = 3
    (17, {"Elevated-risk surgery": True, "History of ischemic heart disease": True,
          "Pre-operative creatinine": [2.5, "mg/dL"]}, 3),
    # creatinine exactly 2.0 is not > 2 ; both cerebrovascular keys count once ; insulin 1 = 2
    (17, {"Pre-operative creatinine": [2.0, "mg/dL"], "Cerebrovascular disease history": True,
          "History of cerebrovascular disease": True, "Pre-operative treatment with insulin": True}, 2),
    # --- 18 HEART --- moderately suspicious 1 + normal ECG 0 + age 50 (1) + 2 risk factors (1) + troponin 0 = 3
    (18, {"age": yrs(50), "Suspicion History": "Moderately suspicious", "Electrocardiogram Test": "Normal",
          "Hypertension history": True, "smoking": True,
          "Initial troponin": "less than or equal to normal limit"}, 3),
    # highly 2 + ST deviation 2 + age 70 (2) + atherosclerotic disease (2) + troponin > 3x (2) = 10
    (18, {"age": yrs(70), "Suspicion History": "Highly suspicious", "Electrocardiogram Test": "Significant ST deviation",
          "atherosclerotic disease": True, "Initial troponin": "greater than three times normal limit"}, 10),
    # slightly 0 + repolarization 1 + age 44 (0) + 3 risk factors (2) + 1-3x troponin (1) = 4
    (18, {"age": yrs(44), "Suspicion History": "Slightly suspicious",
          "Electrocardiogram Test": "Non-specific repolarization disturbance", "obesity": True,
          "hypercholesterolemia": True, "parent or sibling with Cardiovascular disease before age 65": True,
          "Initial troponin": "between the normal limit or up to three times the normal limit"}, 4),
    # --- 19 FIB-4 --- 50*40 / (200 * sqrt(25)) = 2000/1000 = 2.0 (200,000/uL = 200 x10^9/L = 2e11/L)
    (19, {"age": yrs(50), "Aspartate aminotransferase": [40, "U/L"], "Alanine aminotransferase": [25, "U/L"],
          "Platelet count": [200000, "µL"]}, 2.0),
    (19, {"age": yrs(50), "Aspartate aminotransferase": [40, "U/L"], "Alanine aminotransferase": [25, "U/L"],
          "Platelet count": [2e11, "L"]}, 2.0),
    # --- 20 Centor/McIsaac --- age 10 (+1) + 38.5 C (+1) + no cough (+1) + exudate (+1) = 4
    (20, {"age": yrs(10), "Temperature": [38.5, "degrees celsius"], "Cough Absent": True,
          "Exudate or swelling on tonsils": True}, 4),
    # age 50 (-1) + 100.4 F = 38.0 C, not > 38 (0) + nodes (+1) = 0
    (20, {"age": yrs(50), "Temperature": [100.4, "degrees fahreinheit"],
          "Tender/swollen anterior cervical lymph nodes": True}, 0),
    # 36 months = 3 years (+1), 37 C (0) = 1 ; 15 years (0) = 0
    (20, {"age": [36, "months"], "Temperature": [37.0, "degrees celsius"]}, 1),
    (20, {"age": yrs(15), "Temperature": [37.0, "degrees celsius"]}, 0),
    # --- 21 GCS --- spontaneous 4 + confused 4 + localizes 5 = 13 ; none/none/none = 3
    (21, {"Best eye response": "eyes open spontaneously", "Best verbal response": "confused",
          "Best motor response": "localizes pain"}, 13),
    (21, {"Best eye response": "no eye opening", "Best verbal response": "no verbal response",
          "Best motor response": "no motor response"}, 3),
    # --- 22 maintenance fluids (4-2-1) --- 8 kg: 32 ; 15 kg: 40+10 = 50 ; 70 kg: 60+50 = 110
    (22, {"weight": [8, "kg"]}, 32.0),
    (22, {"weight": [15, "kg"]}, 50.0),
    (22, {"weight": [70, "kg"]}, 110.0),
    (22, {"weight": [154, "lbs"]}, 109.853),  # 154 lb = 69.853 kg -> 60 + 49.853
    (22, {"weight": [10000, "g"]}, 40.0),  # 10 kg -> 40
    # --- 23 MELD Na --- MELD(i) = 0.957 ln1.5 + 0.378 ln2 + 1.12 ln1.5 + 0.643 = 0.38803+0.26201+0.45412+0.643
    # = 1.74716 -> 1.7 (tenth) -> 17 ; > 11 so 17 + 1.32*7 - 0.033*17*7 = 17 + 9.24 - 3.927 = 22.313 -> 22
    (23, {"creatinine": [1.5, "mg/dL"], "Bilirubin": [2.0, "mg/dL"], "international normalized ratio": 1.5,
          "Sodium": [130, "mEq/L"], "Dialysis at least twice in the past week": False}, 22.0),
    # all floored at 1 -> 0.643 -> 0.6 -> 6 (<= 11, no sodium term)
    (23, {"creatinine": [0.8, "mg/dL"], "Bilirubin": [0.5, "mg/dL"], "international normalized ratio": 1.0,
          "Sodium": [140, "mEq/L"]}, 6.0),
    # dialysis -> Cr 4.0: 0.957 ln4 + 0.643 = 1.32669 + 0.643 = 1.96969 -> 2.0 -> 20 ; Na 137 -> 20
    (23, {"creatinine": [1.1, "mg/dL"], "Bilirubin": [1.0, "mg/dL"], "international normalized ratio": 1.0,
          "Sodium": [137, "mEq/L"], "Dialysis at least twice in the past week": True}, 20.0),
    # cap: Cr 4, bili 30, INR 6, Na 125: 1.32669 + 0.378*3.4012 + 1.12*1.79176 + 0.643 = 5.2063 -> 5.2 -> 52
    # -> 52 + 15.84 - 0.033*52*12 = 52 + 15.84 - 20.592 = 47.248 -> capped at 40
    (23, {"creatinine": [4.5, "mg/dL"], "Bilirubin": [30, "mg/dL"], "international normalized ratio": 6.0,
          "Sodium": [120, "mEq/L"]}, 40.0),
    # --- 24 steroid conversion --- prednisone 10 mg / 5 * 0.75 = 1.5 mg dexamethasone
    (24, {"input steroid": ["PredniSONE PO", 10, "mg"], "target steroid": "Dexamethasone IV"}, 1.5),
    (24, {"input steroid": ["Hydrocortisone IV", 100, "mg"], "target steroid": "MethylPrednisoLONE PO"}, 20.0),
    # --- 25 HAS-BLED --- age 70 > 65 (1) + hypertension 1 + 10 drinks (1) + medication 1 = 4
    (25, {"age": yrs(70), "Hypertension history": True, "Number of Alcoholic Drinks Per Week": 10,
          "Medication usage predisposing to bleeding": True}, 4),
    (25, {"age": yrs(65), "Number of Alcoholic Drinks Per Week": 8}, 1),  # 65 not > 65 ; 8 drinks -> 1
    (25, {"age": yrs(66), "Number of Alcoholic Drinks Per Week": 7}, 1),  # 66 -> 1 ; 7 drinks -> 0
    # --- 26 sodium correction --- 130 + 0.024*(400-100) = 137.2 ; 22.2 mmol/L = 399.955 mg/dL -> 137.199
    (26, {"Sodium": [130, "mEq/L"], "Glucose": [400, "mg/dL"]}, 137.2),
    (26, {"Sodium": [130, "mmol/L"], "Glucose": [22.2, "mmol/L"]}, 137.199),
    # --- 27 Glasgow-Blatchford --- BUN 25 (3) + male Hgb 11 (3) + SBP 95 (2) + HR 105 (1) + melena (1) = 10
    (27, {"sex": M, "Blood Urea Nitrogen (BUN)": [25, "mg/dL"], "Hemoglobin": [11, "g/dL"],
          "Systolic Blood Pressure": [95, "mm Hg"], "Heart Rate or Pulse": [105, "beats per minute"],
          "Melena present": True}, 10),
    # female Hgb 11 (1) + BUN 10 mmol/L = 28.02 mg/dL (4) + SBP 120 (0) + HR 80 (0) + syncope 2 + hepatic 2 = 9
    (27, {"sex": F, "Blood Urea Nitrogen (BUN)": [10, "mmol/L"], "Hemoglobin": [11, "g/dL"],
          "Systolic Blood Pressure": [120, "mm Hg"], "Heart Rate or Pulse": [80, "beats per minute"],
          "Recent syncope": True, "Hepatic disease history": True}, 9),
    # --- 29 PSI --- male 70 + nursing home 10 + RR 32 (20) + HR 130 (10) + BUN 35 (20) = 130
    (29, {"sex": M, "age": yrs(70), "Nursing home resident": True, "respiratory rate": [32, "breaths per minute"],
          "Systolic Blood Pressure": [120, "mm Hg"], "Temperature": [37, "degrees celsius"],
          "Heart Rate or Pulse": [130, "beats per minute"], "pH": 7.40, "Blood Urea Nitrogen (BUN)": [35, "mg/dL"],
          "Sodium": [135, "mEq/L"], "Glucose": [150, "mg/dL"], "Hematocrit": [35, "%"],
          "Partial pressure of oxygen (PaO₂) for Apache II": [70, "mm Hg"]}, 130),
    # female 60 - 10 = 50 + CHF 10 + pleural effusion 10 + temp 104 F = 40 C (15) + pH 7.30 (30) = 115
    (29, {"sex": F, "age": yrs(60), "Congestive Heart Faliure": True, "Pleural effusion on x-ray": True,
          "respiratory rate": [20, "breaths per minute"], "Systolic Blood Pressure": [120, "mm Hg"],
          "Temperature": [104, "degrees fahrenheit"], "Heart Rate or Pulse": [90, "beats per minute"], "pH": 7.30,
          "Blood Urea Nitrogen (BUN)": [15, "mg/dL"], "Sodium": [140, "mEq/L"], "Glucose": [100, "mg/dL"],
          "Hematocrit": [40, "%"], "Partial pressure of oxygen (PaO₂) for Apache II": [90, "mm Hg"]}, 115),
    # --- 30 serum osmolality --- 2*140 + 14/2.8 + 90/18 = 280 + 5 + 5 = 290
    (30, {"Sodium": [140, "mEq/L"], "Blood Urea Nitrogen (BUN)": [14, "mg/dL"], "Glucose": [90, "mg/dL"]}, 290.0),
    # --- 31 HOMA-IR --- 10 * 90 / 405 = 2.222
    (31, {"Insulin": [10, "µIU/mL"], "Glucose": [90, "mg/dL"]}, 2.222),
    # --- 32 Charlson --- age 65 (2) + MI 1 + uncomplicated diabetes 1 + metastatic tumour 6 = 10
    (32, {"age": yrs(65), "Myocardial infarction": True, "Diabetes mellitus criteria for CCI rule": "Uncomplicated",
          "Solid tumor": "Metastatic", "Cerebrovascular Accident": False, "Transient Ischemic Attacks History": False},
     10),
    # age 45 (0) + CHF 1 + moderate-severe liver 3 + CKD 2 + hemiplegia 2 + TIA 1 = 9
    (32, {"age": yrs(45), "Congestive Heart Faliure": True, "Liver disease severity": "Moderate to Severe",
          "Moderate to severe Chronic Kidney Disease": True, "Hemiplegia": True, "Cerebrovascular Accident": False,
          "Transient Ischemic Attacks History": True}, 9),
    # age 80 (4) + leukemia 2 + AIDS 6 + mild liver 1 + localized tumour 2 + end-organ diabetes 2 = 17
    (32, {"age": yrs(80), "Leukemia": True, "AIDS": True, "Liver disease severity": "Mild", "Solid tumor": "Localized",
          "Diabetes mellitus criteria for CCI rule": "End-organ damage", "Cerebrovascular Accident": False,
          "Transient Ischemic Attacks History": False}, 17),
    # --- 33 FeverPAIN --- fever 1 + purulence 1 + no cough/coryza 1 = 3 (the PECARN keys score nothing)
    (33, {"Fever in past 24 hours": True, "Purulent tonsils": True, "Absence of cough or coryza": True,
          "Severe tonsil inflammation": False, "Altered mental status for PECARN head injury criteria": True}, 3),
    # --- 36 Caprini --- age 50 (1) + major surgery (2) + BMI 30 > 25 (1) + varicose veins (1)
    #     + prior DVT and PE count once (3) + bed rest (1) = 9
    (36, {"sex": F, "age": yrs(50), "Surgery Type": "major", "Body Mass Index (BMI)": [30, "kg/m^2"],
          "Varicose veins": True, "Previously documented Deep Vein Thrombosis": True,
          "Previously Documented Pulmonary Embolism": True, "Mobility": "on bed rest"}, 9),
    # age 40 (0) + BMI 25 (not > 25, 0) + normal mobility 0 = 0
    (36, {"sex": M, "age": yrs(40), "Body Mass Index (BMI)": [25, "kg/m^2"], "Mobility": "normal"}, 0),
    # age 75 (3) + arthroplasty (5) + hip fracture (5) + confined > 72 h (2) + malignancy (2) + cast (2) = 19
    (36, {"sex": F, "age": yrs(75), "Surgery Type": "elective major lower extremity arthroplasty",
          "Hip, pelvis, or leg fracture in the last month": True, "Mobility": "confined to bed >72 hours",
          "Present or previous malignancy": True, "Immobilizing plaster cast in the last month": True,
          "Body Mass Index (BMI)": [22, "kg/m^2"]}, 19),
    (36, {"sex": M, "age": yrs(41), "Mobility": "normal", "Body Mass Index (BMI)": [22, "kg/m^2"]}, 1),  # 41 -> 1
    (36, {"sex": M, "age": yrs(61), "Mobility": "normal", "Body Mass Index (BMI)": [22, "kg/m^2"]}, 2),  # 61 -> 2
    # --- 38 free water deficit --- male 40: 0.6*70*(150/140-1) = 42*0.0714286 = 3.0
    (38, {"sex": M, "age": yrs(40), "weight": [70, "kg"], "Sodium": [150, "mEq/L"]}, 3.0),
    # female 70: 0.45*60*(130/140-1) = 27*(-0.0714286) = -1.929
    (38, {"sex": F, "age": yrs(70), "weight": [60, "kg"], "Sodium": [130, "mmol/L"]}, -1.929),
    # child (10 y): 0.6*30*(154/140-1) = 18*0.1 = 1.8 ; male 70: 0.5*80*0.1 = 4.0 ; female 30: 0.5*50*0.1 = 2.5
    (38, {"sex": M, "age": yrs(10), "weight": [30, "kg"], "Sodium": [154, "mEq/L"]}, 1.8),
    (38, {"sex": M, "age": yrs(70), "weight": [80, "kg"], "Sodium": [154, "mEq/L"]}, 4.0),
    (38, {"sex": F, "age": yrs(30), "weight": [50, "kg"], "Sodium": [154, "mEq/L"]}, 2.5),
    # --- 39 anion gap --- 140 - (100 + 24) = 16
    (39, {"Sodium": [140, "mEq/L"], "Chloride": [100, "mEq/L"], "Bicarbonate": [24, "mEq/L"]}, 16.0),
    # --- 40 FENa --- (40 * 2.0) / (140 * 100) * 100 = 80/14000*100 = 0.571
    (40, {"Urine sodium": [40, "mEq/L"], "creatinine": [2.0, "mg/dL"], "Sodium": [140, "mEq/L"],
          "Urine creatinine": [100, "mg/dL"]}, 0.571),
    # --- 43 SOFA --- PaO2/FiO2 = 80/0.5 = 160 ventilated (3) + platelets 120k (1) + GCS 14 (1) + bili 1.5 (1)
    #     + norepinephrine 0.05 (3) + creatinine 2.5 (2) = 11
    (43, {"Partial pressure of oxygen (PaO₂) for Apache II": [80, "mm Hg"], "FiO₂": [50, "%"],
          "On mechanical ventilation": True, "Continous positive airway pressure": False,
          "Platelet count": [120000, "µL"], "Glasgow Coma Score": 14, "Bilirubin": [1.5, "mg/dL"],
          "norEPINEPHrine": [0.05, "mcg/kg/min"], "creatinine": [2.5, "mg/dL"]}, 11),
    # 150 not ventilated (2) + platelets 200k (0) + GCS 15 (0) + bili 0.8 (0) + MAP 93 (0) + urine 150 mL/day (4) = 6
    (43, {"Partial pressure of oxygen (PaO₂) for Apache II": [75, "mm Hg"], "FiO₂": [50, "%"],
          "On mechanical ventilation": False, "Continous positive airway pressure": False,
          "Platelet count": [200000, "µL"], "Glasgow Coma Score": 15, "Bilirubin": [0.8, "mg/dL"],
          "Systolic Blood Pressure": [120, "mm Hg"], "Diastolic Blood Pressure": [80, "mm Hg"],
          "creatinine": [0.9, "mg/dL"], "Urine Output": [150, "mL/day"]}, 6),
    # 100/0.21 = 476 (0) + all normal + MAP (90+2*50)/3 = 63.3 < 70 (1) + dobutamine 5 (2, wins over 1) = 2
    (43, {"Partial pressure of oxygen (PaO₂) for Apache II": [100, "mm Hg"], "FiO₂": [21, "%"],
          "On mechanical ventilation": False, "Continous positive airway pressure": False,
          "Platelet count": [200000, "µL"], "Glasgow Coma Score": 15, "Bilirubin": [0.8, "mg/dL"],
          "Systolic Blood Pressure": [90, "mm Hg"], "Diastolic Blood Pressure": [50, "mm Hg"],
          "DOBUTamine": [5, "mcg/kg/min"]}, 2),
    # --- 44 LDL --- 200 - 50 - 150/5 = 120 ; 5.0/1.3/1.7 mmol/L = 193.325/50.265/150.569 mg/dL -> 112.947
    (44, {"Total cholesterol": [200, "mg/dL"], "high-density lipoprotein cholesterol": [50, "mg/dL"],
          "Triglycerides": [150, "mg/dL"]}, 120.0),
    (44, {"Total cholesterol": [5.0, "mmol/L"], "high-density lipoprotein cholesterol": [1.3, "mmol/L"],
          "Triglycerides": [1.7, "mmol/L"]}, 112.947),
    # --- 45 CURB-65 --- age 70, BUN 25 > 19, RR 32, SBP 85 -> 4 ; + confusion -> 5
    (45, {"age": yrs(70), "Blood Urea Nitrogen (BUN)": [25, "mg/dL"], "respiratory rate": [32, "breaths per minute"],
          "Systolic Blood Pressure": [85, "mm hg"], "Diastolic Blood Pressure": [70, "mm hg"]}, 4),
    (45, {"age": yrs(70), "Blood Urea Nitrogen (BUN)": [25, "mg/dL"], "respiratory rate": [32, "breaths per minute"],
          "Systolic Blood Pressure": [85, "mm hg"], "Diastolic Blood Pressure": [70, "mm hg"], "Confusion": True}, 5),
    # boundaries: age 64 (0), BUN 19 (0), RR 30 (1), SBP 120 but DBP 60 (1) = 2
    (45, {"age": yrs(64), "Blood Urea Nitrogen (BUN)": [19, "mg/dL"], "respiratory rate": [30, "breaths per minute"],
          "Systolic Blood Pressure": [120, "mm hg"], "Diastolic Blood Pressure": [60, "mm hg"]}, 2),
    # --- 46 Framingham (male 55, TC 213, HDL 50, SBP 120, non-smoker, untreated) ---
    # L = 52.00961*4.007333 + 20.014077*5.361292 - 0.905964*3.912023 + 1.305784*4.787492
    #   - 4.605038*4.007333*5.361292 - 2.93323*4.007333^2 - 172.300168
    #   = 208.4198 + 107.3013 - 3.5442 + 6.2514 - 98.9369 - 47.1040 - 172.3002 = 0.0872
    # risk = 1 - 0.9402^exp(0.0872) = 1 - 0.9402^1.0911 = 1 - 0.93494 = 6.51 %
    (46, {"sex": M, "age": yrs(55), "Total cholesterol": [213, "mg/dL"],
          "high-density lipoprotein cholesterol": [50, "mg/dL"], "Systolic Blood Pressure": [120, "mm Hg"],
          "Smoker": False, "Blood pressure being treated with medicines": False}, 6.51),
    # --- 48 PERC --- age 55 (1), HR 90 (0), SaO2 93 (1), hemoptysis (1) = 3 ; age 49, HR 99, SaO2 95 = 0
    (48, {"age": yrs(55), "Heart Rate or Pulse": [90, "beats per minute"], "O₂ saturation percentage": [93, "%"],
          "Hemoptysis": True, "Previously Documented Pulmonary Embolism": False,
          "Previously documented Deep Vein Thrombosis": False}, 3),
    (48, {"age": yrs(49), "Heart Rate or Pulse": [99, "beats per minute"], "O₂ saturation percentage": [95, "%"],
          "Previously Documented Pulmonary Embolism": False, "Previously documented Deep Vein Thrombosis": False}, 0),
    # prior PE and DVT are one criterion; HR 100 and age 50 are met -> 3
    (48, {"age": yrs(50), "Heart Rate or Pulse": [100, "beats per minute"], "O₂ saturation percentage": [98, "%"],
          "Previously Documented Pulmonary Embolism": True, "Previously documented Deep Vein Thrombosis": True}, 3),
    # --- 49 MME --- oxycodone 10 mg x4 x1.5 = 60 + morphine 15 mg x2 x1 = 30 -> 90
    (49, {"OxyCODONE Dose": [10, "mg"], "OxyCODONE Dose Per Day": [4, "per day"], "Morphine Dose": [15, "mg"],
          "Morphine Dose Per Day": [2, "per day"]}, 90.0),
    # fentanyl patch 25 x1 x2.4 = 60 ; hydromorphone 2 mg x3 x5 = 30 ; fentanyl buccal 200 ug x2 x0.13 = 52
    (49, {"FentANYL patch Dose": [25, "mg"], "FentANYL patch Dose Per Day": [1, "per day"]}, 60.0),
    (49, {"HYDROmorphone Dose": [2, "mg"], "HYDROmorphone Dose Per Day": [3, "per day"]}, 30.0),
    (49, {"FentaNYL buccal Dose": [200, "µg"], "FentaNYL buccal Dose Per Day": [2, "per day"]}, 52.0),
    # --- 51 SIRS --- 38.5 C, HR 95, RR 22, WBC 13,000 -> 4 ; 37 C, HR 80, RR 16 but PaCO2 30 (1), WBC 8,000 -> 1
    (51, {"Temperature": [38.5, "degrees celsius"], "Heart Rate or Pulse": [95, "beats per minute"],
          "respiratory rate": [22, "breaths per minute"], "White blood cell count": [13000, "µL"]}, 4),
    (51, {"Temperature": [37, "degrees celsius"], "Heart Rate or Pulse": [80, "bpm"],
          "respiratory rate": [16, "breaths per minute"], "PaCO₂": [30, "mm hg"],
          "White blood cell count": [8000, "µL"]}, 1),
    # boundaries: 38.0 C (no), HR 90 (no), RR 20 (no), WBC 1.2e10/L = 12,000/uL (no) -> 0 ; 95.0 F = 35 C (yes) -> 1
    (51, {"Temperature": [38.0, "degrees celsius"], "Heart Rate or Pulse": [90, "bpm"],
          "respiratory rate": [20, "breaths per minute"], "White blood cell count": [1.2e10, "L"]}, 0),
    (51, {"Temperature": [95.0, "degrees fahreinheit"], "Heart Rate or Pulse": [90, "bpm"],
          "respiratory rate": [20, "breaths per minute"], "White blood cell count": [12000, "µL"]}, 1),
    # --- QTc family, QT 400 ms, HR 90 (RR = 0.6667 s) ---
    (56, {"Heart Rate or Pulse": [90, "beats per minute"], "QT interval": [400, "msec"]}, 457.886),  # /0.87358
    (57, {"Heart Rate or Pulse": [90, "beats per minute"], "QT interval": [400, "msec"]}, 451.333),  # +154*0.3333
    (58, {"Heart Rate or Pulse": [90, "beats per minute"], "QT interval": [400, "msec"]}, 452.5),  # +1.75*30
    (59, {"Heart Rate or Pulse": [90, "beats per minute"], "QT interval": [400, "msec"]}, 466.667),  # *210/180
    (56, {"Heart Rate or Pulse": [60, "beats per minute"], "QT interval": [400, "msec"]}, 400.0),  # RR 1: no change
    # --- 60 BSA --- sqrt(180*80/3600) = sqrt(4) = 2.0
    (60, {"weight": [80, "kg"], "height": [180, "cm"]}, 2.0),
    # --- 61 target weight --- 22 * 1.7^2 = 63.58 ; 70 in = 1.778 m -> 22 * 3.161284 = 69.548
    (61, {"Body Mass Index (BMI)": [22, "kg/m^2"], "height": [170, "cm"]}, 63.58),
    (61, {"Body Mass Index (BMI)": [22, "kg/m^2"], "height": [70, "in"]}, 69.548),
    # --- 62 adjusted body weight --- male 70 in: IBW 73; 73 + 0.4*(100-73) = 83.8
    (62, {"sex": M, "weight": [100, "kg"], "height": [177.8, "cm"]}, 83.8),
    # --- gap family ---
    (63, {"Sodium": [140, "mEq/L"], "Chloride": [100, "mEq/L"], "Bicarbonate": [24, "mEq/L"]}, 4.0),  # 16 - 12
    (63, {"Sodium": [135, "mEq/L"], "Chloride": [105, "mEq/L"], "Bicarbonate": [24, "mEq/L"]}, -6.0),  # 6 - 12
    (64, {"Sodium": [140, "mEq/L"], "Chloride": [100, "mEq/L"], "Bicarbonate": [20, "mEq/L"]}, 2.0),  # 8/4
    (65, {"Sodium": [140, "mEq/L"], "Chloride": [100, "mEq/L"], "Bicarbonate": [24, "mEq/L"],
          "Albumin": [2.0, "g/dL"]}, 21.0),  # 16 + 2.5*2
    (65, {"Sodium": [140, "mEq/L"], "Chloride": [100, "mEq/L"], "Bicarbonate": [24, "mEq/L"],
          "Albumin": [20, "g/L"]}, 21.0),  # 20 g/L = 2.0 g/dL
    (66, {"Sodium": [140, "mEq/L"], "Chloride": [100, "mEq/L"], "Bicarbonate": [24, "mEq/L"],
          "Albumin": [2.0, "g/dL"]}, 9.0),  # 21 - 12
    (67, {"Sodium": [140, "mEq/L"], "Chloride": [100, "mEq/L"], "Bicarbonate": [20, "mEq/L"],
          "Albumin": [2.0, "g/dL"]}, 3.25),  # (20 + 5 - 12) / 4
    # --- 68 conception --- 01/01/2023 + 14 days = 01/15/2023 ; crosses a leap day: 02/20/2024 + 14 = 03/05/2024
    (68, {"Last menstrual date": "01/01/2023", "cycle length": 28}, "01/15/2023"),
    (68, {"Last menstrual date": "02/20/2024", "cycle length": 30}, "03/05/2024"),
    # --- 69 gestational age --- Jan 1 -> Mar 1 2023 = 31 + 28 = 59 days = 8 weeks 3 days
    (69, {"Last menstrual date": "01/01/2023", "Current Date": "03/01/2023"}, (8, 3)),
    (69, {"Last menstrual date": "01/01/2023", "Current Date": "01/01/2023"}, (0, 0)),
]

# APACHE II, worked criterion by criterion (too long for the table above).
_APACHE_NORMAL = {
    "age": yrs(50), "Temperature": [37, "degrees celsius"], "Systolic Blood Pressure": [120, "mm Hg"],
    "Diastolic Blood Pressure": [80, "mm Hg"], "Heart Rate or Pulse": [100, "beats per minute"],
    "respiratory rate": [20, "breaths per minute"], "FiO₂": [40, "%"],
    "Partial pressure of oxygen (PaO₂) for Apache II": [80, "mm Hg"], "pH": 7.40, "Sodium": [140, "mEq/L"],
    "Potassium": [4.0, "mEq/L"], "creatinine": [1.0, "mg/dL"], "Hematocrit": [40, "%"],
    "White blood cell count": [10000, "µL"], "Glasgow Coma Score": 15,
}
# Only age 50 scores (2): temp 37, MAP 93.3, HR 100, RR 20, PaO2 80 at FiO2 40 %, pH 7.40, Na 140, K 4.0,
# Cr 1.0, Hct 40, WBC 10k, GCS 15 all score 0.
CASES.append((28, _APACHE_NORMAL, 2))
# age 70 (5) + 39.5 C (3) + MAP (80+2*40)/3 = 53.3 (2) + HR 150 (3) + RR 36 (3) + FiO2 60 % with A-a 400 (3)
# + pH 7.20 (3) + Na 125 (2) + K 3.2 (1) + Cr 2.5 (3) doubled for acute renal failure (6) + Hct 25 (2)
# + WBC 25k (2) + GCS 10 (15-10 = 5) + severe organ insufficiency, nonoperative (5) = 45
CASES.append((28, {
    "age": yrs(70), "Temperature": [39.5, "degrees celsius"], "Systolic Blood Pressure": [80, "mm Hg"],
    "Diastolic Blood Pressure": [40, "mm Hg"], "Heart Rate or Pulse": [150, "beats per minute"],
    "respiratory rate": [36, "breaths per minute"], "FiO₂": [60, "%"], "A-a gradient": 400,
    "Partial pressure of oxygen (PaO₂) for Apache II": [80, "mm Hg"], "pH": 7.20, "Sodium": [125, "mEq/L"],
    "Potassium": [3.2, "mEq/L"], "creatinine": [2.5, "mg/dL"], "Acute renal failure": True, "Hematocrit": [25, "%"],
    "White blood cell count": [25000, "µL"], "Glasgow Coma Score": 10,
    "History of severe organ failure or immunocompromise": True, "Surgery Type": "Nonoperative "}, 45))
# elective surgery gives 2 chronic-health points instead of 5: 2 (age) + 2 = 4 ; PaO2 58 at FiO2 30 % adds 3 -> 7
CASES.append((28, {**_APACHE_NORMAL, "History of severe organ failure or immunocompromise": True,
                   "Surgery Type": "Elective", "Partial pressure of oxygen (PaO₂) for Apache II": [58, "mm Hg"],
                   "FiO₂": [30, "%"]}, 7))


@pytest.mark.parametrize("calc_id, entities, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_hand_worked_case(calc_id, entities, expected):
    got = calculate(calc_id, entities)
    if isinstance(expected, float):
        assert got == pytest.approx(expected, abs=2e-3), (calc_id, got, expected)
    else:
        assert got == expected


def test_every_calculator_has_a_hand_worked_case():
    covered = {case[0] for case in CASES}
    assert covered == set(CALCULATORS), sorted(set(CALCULATORS) - covered)
    assert len(CALCULATORS) == 55


def test_lookup_by_id_name_and_slug_agree():
    for calc in CALCULATORS.values():
        assert get_calculator(calc.id) is calc
        assert get_calculator(calc.name.upper()) is calc
        assert get_calculator(calc.slug) is calc
    assert get_calculator("Estimated Date of Conception").id == 68  # MedCalc-Bench-Verified spelling


def test_unknown_calculator_names_the_nearest():
    with pytest.raises(ValueError, match=r"unknown calculator 'CHADS-VASc'; did you mean 'CHA2DS2-VASc Score"):
        calculate("CHADS-VASc", {})


def test_missing_entity_names_the_key():
    with pytest.raises(MissingEntity, match=r"missing entity 'creatinine'"):
        calculate(2, {"sex": "Male", "age": [60, "years"], "weight": [70, "kg"], "height": [175, "cm"]})


def test_bad_categorical_value_is_one_line_error():
    with pytest.raises(ValueError, match=r"'Best eye response' has unknown value 'blinks'"):
        calculate(21, {"Best eye response": "blinks", "Best verbal response": "oriented",
                       "Best motor response": "obeys commands"})


def test_key_spelling_variants_are_normalised():
    # the rows spell 'Faliure'; the correct spelling must work too
    a = calculate(4, {"sex": "Male", "age": [50, "years"], "Congestive Heart Faliure": True})
    b = calculate(4, {"sex": "Male", "age": [50, "years"], "Congestive Heart Failure": True})
    assert a == b == 1


@pytest.mark.parametrize("value, unit, target, analyte, expected", [
    (88.4, "µmol/L", "mg/dL", "creatinine", 0.99998),    # 88.4 * 113.12 / 10000 = 0.999981
    (10, "mmol/L", "mg/dL", "glucose", 180.16),           # 10 * 180.16 / 10
    (10, "mmol/L", "mg/dL", "bun", 28.02),                # urea nitrogen 28.02 g/mol
    (2.5, "mmol/L", "mg/dL", "calcium", 10.02),           # 2.5 * 40.08 / 10
    (5.0, "mEq/L", "mmol/L", "calcium", 2.5),             # divalent
    (17.1, "µmol/L", "mg/dL", "bilirubin", 0.999769),     # 17.1 * 584.66 / 10000 = 0.9997686
    (35, "g/L", "g/dL", "albumin", 3.5),
    (100, "lbs", "kg", None, 45.359237),
    (72, "in", "cm", None, 182.88),
    (98.6, "degrees fahreinheit", "C", None, 37.0),
    (250000, "µL", "L", None, 2.5e11),
    (24, "months", "years", None, 2.0),
    (1.0, "s", "ms", None, 1000.0),
])
def test_unit_conversion(value, unit, target, analyte, expected):
    assert convert(value, unit, target, analyte) == pytest.approx(expected, rel=1e-5)


def test_unit_conversion_refuses_mismatched_dimensions():
    with pytest.raises(ValueError, match="cannot convert 'kg' to 'cm'"):
        convert(1, "kg", "cm")


def test_bounds_follow_the_benchmark():
    assert bounds("decimal", 100.0) == pytest.approx((95.0, 105.0))
    assert bounds("decimal", -2.0) == pytest.approx((-2.1, -1.9))  # swapped for negatives
    assert bounds("decimal", 0.0) == (0.0, 0.0)
    assert bounds("integer", 4) == (4, 4)


def test_entities_accessors():
    e = Entities({"Stroke": "Not mentinoed", "Hemoptysis": True, "weight": [154, "lbs"], "pH": 7.3})
    assert not e.flag("Stroke") and e.flag("Hemoptysis") and not e.flag("Absent key")
    assert e.num("weight", "kg") == pytest.approx(69.853, abs=1e-3)
    assert e.num("pH") == 7.3
    with pytest.raises(ValueError, match="must be a number"):
        Entities({"age": True}).num("age", "years")
    # compound ages as the benchmark writes them: 2 years 6 months = 2.5 years
    assert Entities({"age": [2, "years", 6, "months"]}).num("age", "years") == pytest.approx(2.5)
    with pytest.raises(ValueError, match=r"must be \[number, unit\]"):
        Entities({"age": ["old", "years"]}).num("age", "years")


# The "medcalc-bench" convention (medagentgym/tasks/medcalc/bench.py) is tested quirk by quirk in test_medcalc_bench.py.


def test_conventions_agree_elsewhere_and_reject_unknown():
    assert calculate(6, {"weight": [70, "kg"], "height": [175, "cm"]}, convention="medcalc-bench") == 22.857
    with pytest.raises(ValueError, match="unknown convention 'mdcalc'; use one of published, medcalc-bench"):
        calculate(6, {"weight": [70, "kg"], "height": [175, "cm"]}, convention="mdcalc")
