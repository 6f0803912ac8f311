"""biodsbench analysis kinds: question + reference code templates over a cBioPortal-format study.

Templates use ``string.Template``: ``$root`` is the study folder (``/data/biodsbench/<study>``), other keys
come from the kind's parameter sets. ``outputs`` are the variables whose values (from EXECUTING the reference)
are the gold, compared on the host. Plot kinds carry a :class:`PlotSpec` (the saved file, exact labels, which
data to check) and ``plot_gold``: build-time code, run after the reference in its namespace, that assigns the
reference data ``plot_gold`` (Kaplan-Meier survival functions from lifelines, bar heights, histogram bins);
``medagentgym.tasks.bio.plots`` compares the plotted data with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from medagentgym.tasks.bio.cbioportal import Study

_READ = {
    "pat": "patients = pd.read_csv('$root/data_clinical_patient.csv')\n",
    "smp": "samples = pd.read_csv('$root/data_clinical_sample.csv')\n",
    "mut": "mut = pd.read_csv('$root/data_mutations.csv')\n",
    "cna": "cna = pd.read_csv('$root/data_cna.csv')\n",
    "sv": "sv = pd.read_csv('$root/data_sv.csv')\n",
    "tl": "timeline = pd.read_csv('$root/data_timeline_treatment.csv')\n",
}
_STATUS = ("hit = set(mut.loc[mut['Hugo_Symbol'] == '$gene', 'Tumor_Sample_Barcode'])\n"
           "patients['mutant'] = patients['PATIENT_ID'].isin(samples.loc[samples['SAMPLE_ID'].isin(hit), 'PATIENT_ID'])\n"
           "patients['os_event'] = patients['OS_STATUS'].str.startswith('1').astype(int)\n")
_MUTANT_DEF = ("A patient is $gene-mutant when any of their samples has at least one row for $gene in "
               "data_mutations.csv (any Variant_Classification); OS events are OS_STATUS values starting with '1'.")
_SAMPLE_DEF = ("Use every sample of data_clinical_sample.csv as profiled; a sample is $gene-mutated when it has at "
               "least one row for $gene in data_mutations.csv.")


@dataclass(frozen=True)
class PlotSpec:
    """What a plot kind's figure must show (templates, filled per instance).

    Attributes:
        file: The file the figure is saved to, in the working directory.
        file_type: ``png`` or ``pdf`` (checked by magic bytes).
        labels: ``(("xlabel" | "ylabel" | "title", exact text), ...)``.
    """

    file: str
    file_type: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class DSKind:
    """One analysis kind: tables it reads, question and reference templates, gold outputs, optional plot."""

    id: str
    tables: tuple[str, ...]
    question: str
    code: str
    outputs: tuple[str, ...]
    params: Callable[[Study], list[dict[str, Any]]]
    imports: str = "import pandas as pd\n"
    plot: PlotSpec | None = None
    #: Build-time code (after the reference, in its namespace) assigning the reference data ``plot_gold``.
    plot_gold: str = ""


def _genes(n: int) -> Callable[[Study], list[dict[str, Any]]]:
    return lambda st: [{"gene": g} for g, _ in st.genes[:n]]


def _one(**kw: Any) -> Callable[[Study], list[dict[str, Any]]]:
    return lambda st: [dict(kw)]


_PLOT = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
_KM = "from lifelines import KaplanMeierFitter\n"
_KM_GOLD = ("def _km_curve(g):\n"
            "    sf = KaplanMeierFitter().fit(g['OS_MONTHS'], g['os_event']).survival_function_\n"
            "    return [[float(t) for t in sf.index], [float(v) for v in sf.iloc[:, 0]]]\n"
            "plot_gold = {'curves': [_km_curve(patients[patients['mutant']]),\n"
            "                        _km_curve(patients[~patients['mutant']])]}\n")

KINDS: tuple[DSKind, ...] = (
    DSKind("cohort_size", ("pat", "smp"), "How many unique patients and how many samples are in the study? Store them "
           "in `n_patients` and `n_samples` (integers).",
           "n_patients = patients['PATIENT_ID'].nunique()\nn_samples = samples['SAMPLE_ID'].nunique()\n",
           ("n_patients", "n_samples"), _one()),
    DSKind("sex_distribution", ("pat",), "Count patients by SEX. Store the number of female patients in `n_female` "
           "and of male patients in `n_male`.",
           "n_female = int((patients['SEX'] == 'Female').sum())\nn_male = int((patients['SEX'] == 'Male').sum())\n",
           ("n_female", "n_male"), _one()),
    DSKind("age_summary", ("pat",), "Compute the median and the mean patient AGE; store them in `median_age` and "
           "`mean_age` (floats, not rounded).",
           "median_age = float(patients['AGE'].median())\nmean_age = float(patients['AGE'].mean())\n",
           ("median_age", "mean_age"), _one()),
    DSKind("subtype_counts", ("smp",), "Count samples per CANCER_TYPE_DETAILED. Store a dict subtype -> number of "
           "samples in `subtype_counts` and the most common subtype in `top_subtype` (alphabetically first on ties).",
           "subtype_counts = samples['CANCER_TYPE_DETAILED'].value_counts().to_dict()\n"
           "top_subtype = sorted(subtype_counts, key=lambda k: (-subtype_counts[k], k))[0]\n",
           ("subtype_counts", "top_subtype"), _one()),
    DSKind("gene_mutation_frequency", ("smp", "mut"), "What fraction of samples carry a $gene mutation? " + _SAMPLE_DEF +
           " Store the fraction (0-1) in `mut_freq` and the number of mutated samples in `n_mutated`.",
           "hit = set(mut.loc[mut['Hugo_Symbol'] == '$gene', 'Tumor_Sample_Barcode'])\n"
           "n_mutated = int(samples['SAMPLE_ID'].isin(hit).sum())\nmut_freq = n_mutated / len(samples)\n",
           ("mut_freq", "n_mutated"), _genes(8)),
    DSKind("top_mutated_genes", ("mut",), "Rank genes by the number of distinct samples with at least one mutation "
           "(descending; ties broken by gene symbol ascending). Store the top $n gene symbols as a list in `top_genes`.",
           "per_gene = mut.groupby('Hugo_Symbol')['Tumor_Sample_Barcode'].nunique()\n"
           "top_genes = sorted(per_gene.index, key=lambda g: (-per_gene[g], g))[:$n]\n",
           ("top_genes",), lambda st: [{"n": 3}, {"n": 5}, {"n": 8}]),
    DSKind("variant_classification_counts", ("mut",), "For $gene, count mutation rows per Variant_Classification. "
           "Store a dict classification -> count in `vc_counts`.",
           "vc_counts = mut.loc[mut['Hugo_Symbol'] == '$gene', 'Variant_Classification'].value_counts().to_dict()\n",
           ("vc_counts",), _genes(4)),
    DSKind("truncating_fraction", ("mut",), "Among all mutation rows of $gene, what fraction are truncating "
           "(Nonsense_Mutation, Frame_Shift_Del, Frame_Shift_Ins, Splice_Site)? Store it in `trunc_frac`.",
           "g = mut[mut['Hugo_Symbol'] == '$gene']\n"
           "trunc_frac = float(g['Variant_Classification'].isin(['Nonsense_Mutation', 'Frame_Shift_Del', "
           "'Frame_Shift_Ins', 'Splice_Site']).mean())\n",
           ("trunc_frac",), _genes(4)),
    DSKind("top_protein_change", ("mut",), "Which HGVSp_Short protein change is most frequent among $gene mutation rows "
           "(ties: alphabetically first)? Store it in `top_change` and its row count in `top_change_count`.",
           "c = mut.loc[mut['Hugo_Symbol'] == '$gene', 'HGVSp_Short'].value_counts()\n"
           "top_change = sorted(c.index, key=lambda k: (-c[k], k))[0]\ntop_change_count = int(c[top_change])\n",
           ("top_change", "top_change_count"), _genes(3)),
    DSKind("tmb_by_mutation", ("smp", "mut"), "Compare TMB_NONSYNONYMOUS between $gene-mutated and non-mutated "
           "samples. " + _SAMPLE_DEF + " Store the two means in `tmb_mut_mean` and `tmb_wt_mean` and the p-value of "
           "Welch's t-test (scipy.stats.ttest_ind, equal_var=False) in `tmb_pvalue`.",
           "from scipy import stats\nhit = set(mut.loc[mut['Hugo_Symbol'] == '$gene', 'Tumor_Sample_Barcode'])\n"
           "m = samples['SAMPLE_ID'].isin(hit)\ntmb_mut_mean = float(samples.loc[m, 'TMB_NONSYNONYMOUS'].mean())\n"
           "tmb_wt_mean = float(samples.loc[~m, 'TMB_NONSYNONYMOUS'].mean())\n"
           "tmb_pvalue = float(stats.ttest_ind(samples.loc[m, 'TMB_NONSYNONYMOUS'], samples.loc[~m, 'TMB_NONSYNONYMOUS'], equal_var=False).pvalue)\n",
           ("tmb_mut_mean", "tmb_wt_mean", "tmb_pvalue"), _genes(4)),
    DSKind("km_median_os", ("pat",), "Fit a Kaplan-Meier estimator (lifelines) of overall survival (OS_MONTHS; event = "
           "OS_STATUS starting with '1') over all patients and store the median survival time in `median_os`.",
           _KM + "kmf = KaplanMeierFitter()\nkmf.fit(patients['OS_MONTHS'], patients['OS_STATUS'].str.startswith('1'))\n"
           "median_os = float(kmf.median_survival_time_)\n", ("median_os",), _one()),
    DSKind("km_median_os_by_gene", ("pat", "smp", "mut"), "Compare overall survival (OS_MONTHS) of $gene-mutant and "
           "wild-type patients. " + _MUTANT_DEF + " With lifelines' KaplanMeierFitter, store the median OS of each "
           "group in `median_os_mut` and `median_os_wt`.",
           _KM + _STATUS + "kmf = KaplanMeierFitter()\nm = patients['mutant']\n"
           "median_os_mut = float(kmf.fit(patients.loc[m, 'OS_MONTHS'], patients.loc[m, 'os_event']).median_survival_time_)\n"
           "median_os_wt = float(kmf.fit(patients.loc[~m, 'OS_MONTHS'], patients.loc[~m, 'os_event']).median_survival_time_)\n",
           ("median_os_mut", "median_os_wt"), _genes(3)),
    DSKind("logrank_os_by_gene", ("pat", "smp", "mut"), "Test whether overall survival differs between $gene-mutant "
           "and wild-type patients. " + _MUTANT_DEF + " Store the log-rank test p-value (lifelines.statistics."
           "logrank_test) in `logrank_p`.",
           "from lifelines.statistics import logrank_test\n" + _STATUS + "m = patients['mutant']\n"
           "logrank_p = float(logrank_test(patients.loc[m, 'OS_MONTHS'], patients.loc[~m, 'OS_MONTHS'], "
           "patients.loc[m, 'os_event'], patients.loc[~m, 'os_event']).p_value)\n",
           ("logrank_p",), _genes(4)),
    DSKind("km_median_pfs_by_arm", ("pat",), "For each TREATMENT_ARM, fit a Kaplan-Meier estimator of progression-free "
           "survival (PFS_MONTHS; event = PFS_STATUS starting with '1'). Store a dict arm -> median PFS in "
           "`median_pfs_by_arm`.",
           _KM + "median_pfs_by_arm = {}\nfor arm, g in patients.groupby('TREATMENT_ARM'):\n"
           "    kmf = KaplanMeierFitter().fit(g['PFS_MONTHS'], g['PFS_STATUS'].str.startswith('1'))\n"
           "    median_pfs_by_arm[arm] = float(kmf.median_survival_time_)\n", ("median_pfs_by_arm",), _one()),
    DSKind("logrank_by_arm", ("pat",), "Compare $endpoint survival between the two TREATMENT_ARM groups with a log-rank "
           "test (lifelines; time = ${col}_MONTHS, event = ${col}_STATUS starting with '1'). Store the p-value in `arm_p`.",
           "from lifelines.statistics import logrank_test\narms = sorted(patients['TREATMENT_ARM'].unique())\n"
           "a, b = (patients[patients['TREATMENT_ARM'] == x] for x in arms)\n"
           "arm_p = float(logrank_test(a['${col}_MONTHS'], b['${col}_MONTHS'], a['${col}_STATUS'].str.startswith('1'), "
           "b['${col}_STATUS'].str.startswith('1')).p_value)\n",
           ("arm_p",), lambda st: [{"endpoint": "overall", "col": "OS"}, {"endpoint": "progression-free", "col": "PFS"}]),
    DSKind("cox_hazard_ratio", ("pat", "smp", "mut"), "Fit a Cox proportional-hazards model (lifelines CoxPHFitter, "
           "default settings) of overall survival with one covariate, $gene mutation status (1 = mutant). " + _MUTANT_DEF +
           " Store the hazard ratio exp(coef) in `hazard_ratio`.",
           "from lifelines import CoxPHFitter\n" + _STATUS +
           "df = pd.DataFrame({'T': patients['OS_MONTHS'], 'E': patients['os_event'], 'mut': patients['mutant'].astype(int)})\n"
           "hazard_ratio = float(CoxPHFitter().fit(df, 'T', 'E').hazard_ratios_['mut'])\n",
           ("hazard_ratio",), _genes(2)),
    DSKind("chi2_gene_sex", ("pat", "smp", "mut"), "Is $gene mutation status associated with SEX? " + _MUTANT_DEF +
           " Build the patient-level 2x2 table (pd.crosstab of mutant status vs SEX) and store the p-value of "
           "scipy.stats.chi2_contingency (default Yates correction) in `chi2_p`.",
           "from scipy.stats import chi2_contingency\n" + _STATUS +
           "chi2_p = float(chi2_contingency(pd.crosstab(patients['mutant'], patients['SEX']))[1])\n",
           ("chi2_p",), _genes(3)),
    DSKind("co_occurrence", ("smp", "mut"), "Test co-occurrence of $gene and $other mutations across samples. "
           "Store the number of samples mutated in both in `n_both` and the two-sided Fisher exact test p-value "
           "(scipy.stats.fisher_exact on the 2x2 table of the two mutation statuses over all samples) in `fisher_p`.",
           "from scipy.stats import fisher_exact\n"
           "a = samples['SAMPLE_ID'].isin(set(mut.loc[mut['Hugo_Symbol'] == '$gene', 'Tumor_Sample_Barcode']))\n"
           "b = samples['SAMPLE_ID'].isin(set(mut.loc[mut['Hugo_Symbol'] == '$other', 'Tumor_Sample_Barcode']))\n"
           "n_both = int((a & b).sum())\n"
           "fisher_p = float(fisher_exact([[n_both, int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]])[1])\n",
           ("n_both", "fisher_p"), lambda st: [{"gene": st.genes[0][0], "other": g} for g, _ in st.genes[1:4]]),
    DSKind("cna_events", ("cna",), "In data_cna.csv (one row per Hugo_Symbol, one column per sample; 2 = "
           "amplification, -2 = deep deletion), count the samples with a $gene amplification (`n_amp`) and compute "
           "the fraction of samples with a $gene deep deletion (`del_frac`).",
           "row = cna.set_index('Hugo_Symbol').loc['$gene']\nn_amp = int((row == 2).sum())\ndel_frac = float((row == -2).mean())\n",
           ("n_amp", "del_frac"), _genes(6)),
    DSKind("altered_fraction", ("smp", "mut", "cna"), "What fraction of samples have $gene altered, i.e. at least one "
           "mutation row in data_mutations.csv OR a value of 2 or -2 in data_cna.csv? Use all samples of "
           "data_clinical_sample.csv as the denominator. Store it in `altered_frac`.",
           "row = cna.set_index('Hugo_Symbol').loc['$gene']\ncna_hit = set(row[row.abs() == 2].index)\n"
           "hit = set(mut.loc[mut['Hugo_Symbol'] == '$gene', 'Tumor_Sample_Barcode']) | cna_hit\n"
           "altered_frac = float(samples['SAMPLE_ID'].isin(hit).mean())\n", ("altered_frac",), _genes(3)),
    DSKind("sv_summary", ("sv",), "Summarise structural variants: store a dict Class -> number of rows in "
           "`sv_class_counts`, and the most frequent Event_Info in `top_event` (alphabetically first on ties).",
           "sv_class_counts = sv['Class'].value_counts().to_dict()\nc = sv['Event_Info'].value_counts()\n"
           "top_event = sorted(c.index, key=lambda k: (-c[k], k))[0]\n", ("sv_class_counts", "top_event"), _one()),
    DSKind("treatment_exposure", ("tl",), "From the treatment timeline, how many distinct patients received $agent "
           "(`n_treated`), and what is the mean duration in days (STOP_DATE - START_DATE) of $agent treatment rows "
           "(`mean_duration`)?",
           "t = timeline[timeline['AGENT'] == '$agent']\nn_treated = int(t['PATIENT_ID'].nunique())\n"
           "mean_duration = float((t['STOP_DATE'] - t['START_DATE']).mean())\n",
           ("n_treated", "mean_duration"), lambda st: [{"agent": a} for _, a in st.agents]),
    DSKind("mutations_per_sample", ("smp", "mut"), "Count mutation rows per sample, including samples with none "
           "(count 0). Store the mean count in `mean_mutations` and the SAMPLE_ID with the most rows in `max_sample` "
           "(alphabetically first on ties).",
           "c = mut['Tumor_Sample_Barcode'].value_counts().reindex(samples['SAMPLE_ID'], fill_value=0)\n"
           "mean_mutations = float(c.mean())\nmax_sample = sorted(c.index, key=lambda s: (-c[s], s))[0]\n",
           ("mean_mutations", "max_sample"), _one()),
    DSKind("age_group_os", ("pat",), "Compare OS_MONTHS between patients aged $cut or older and younger patients with "
           "a two-sided Mann-Whitney U test (scipy.stats.mannwhitneyu, default options). Store the p-value in `mw_p` "
           "and the number of older patients in `n_older`.",
           "from scipy.stats import mannwhitneyu\nold = patients['AGE'] >= $cut\nn_older = int(old.sum())\n"
           "mw_p = float(mannwhitneyu(patients.loc[old, 'OS_MONTHS'], patients.loc[~old, 'OS_MONTHS']).pvalue)\n",
           ("mw_p", "n_older"), lambda st: [{"cut": 60}, {"cut": 65}, {"cut": 70}]),
    DSKind("stage_event_rate", ("pat",), "For each STAGE, compute the fraction of patients whose OS_STATUS starts with "
           "'1'. Store a dict stage -> fraction in `death_rate_by_stage`.",
           "death_rate_by_stage = patients.groupby('STAGE')['OS_STATUS'].apply(lambda s: s.str.startswith('1').mean()).to_dict()\n",
           ("death_rate_by_stage",), _one()),
    DSKind("km_plot", ("pat", "smp", "mut"), "Plot Kaplan-Meier overall-survival curves (lifelines) for $gene-mutant "
           "and wild-type patients on one axes. " + _MUTANT_DEF + " Keep the figure in `fig`; x label 'Months', y "
           "label 'Overall survival probability', title 'Overall survival by $gene status'; save it as '$file' (PNG) "
           "in the working directory.",
           _PLOT + _KM + _STATUS + "fig, ax = plt.subplots()\nfor label, g in (('Mutant', patients[patients['mutant']]), "
           "('Wild type', patients[~patients['mutant']])):\n"
           "    KaplanMeierFitter().fit(g['OS_MONTHS'], g['os_event'], label=label).plot_survival_function(ax=ax)\n"
           "ax.set_xlabel('Months')\nax.set_ylabel('Overall survival probability')\nax.set_title('Overall survival by $gene status')\n"
           "fig.savefig('$file')\n", (),
           lambda st: [{"gene": g, "file": f"km_{g.lower()}.png"} for g, _ in st.genes[:3]],
           plot=PlotSpec("$file", "png", (("xlabel", "Months"), ("ylabel", "Overall survival probability"),
                                          ("title", "Overall survival by $gene status"))),
           plot_gold=_KM_GOLD),
    DSKind("mutation_bar_plot", ("mut",), "Make a bar chart of the number of distinct mutated samples for the top $n "
           "genes (ranked by that number, descending; ties by symbol), one bar per gene in that order. Keep the "
           "figure in `fig`, y label 'Mutated samples', save it as 'top_genes.png'.",
           _PLOT + "per_gene = mut.groupby('Hugo_Symbol')['Tumor_Sample_Barcode'].nunique()\n"
           "top = sorted(per_gene.index, key=lambda g: (-per_gene[g], g))[:$n]\nfig, ax = plt.subplots()\n"
           "ax.bar(top, [per_gene[g] for g in top])\nax.set_ylabel('Mutated samples')\nfig.savefig('top_genes.png')\n",
           (), lambda st: [{"n": 5}, {"n": 8}],
           plot=PlotSpec("top_genes.png", "png", (("ylabel", "Mutated samples"),)),
           plot_gold="plot_gold = {'bars': [float(per_gene[g]) for g in top]}\n"),
    DSKind("age_histogram", ("pat",), "Plot a histogram of patient AGE with $bins bins. Keep the figure in `fig`, "
           "x label 'Age (years)', y label 'Patients', and save it as 'age_hist.pdf' (PDF).",
           _PLOT + "fig, ax = plt.subplots()\nax.hist(patients['AGE'], bins=$bins)\nax.set_xlabel('Age (years)')\n"
           "ax.set_ylabel('Patients')\nfig.savefig('age_hist.pdf')\n", (),
           lambda st: [{"bins": 10}, {"bins": 15}],
           plot=PlotSpec("age_hist.pdf", "pdf", (("xlabel", "Age (years)"), ("ylabel", "Patients"))),
           plot_gold="import numpy as np\n_counts, _edges = np.histogram(patients['AGE'], bins=$bins)\n"
                     "plot_gold = {'bars': [float(c) for c in _counts], 'edges': [float(e) for e in _edges]}\n"),
)
