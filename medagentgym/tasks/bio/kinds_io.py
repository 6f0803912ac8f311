"""biocoder kinds over file formats, alignment scores, distances, intervals and statistics."""

from __future__ import annotations

from medagentgym.tasks.bio import inputs as gi
from medagentgym.tasks.bio.kinds_base import CODON_TABLE_SRC, Kind, V, cases

_PARSE_FASTA = ("def read_fasta(text):\n    \"\"\"Parse FASTA text into an ordered dict id -> sequence (id = first word).\"\"\"\n"
                "    out, name = collections.OrderedDict(), None\n    for line in text.splitlines():\n"
                "        line = line.strip()\n        if line.startswith('>'):\n            name = line[1:].split()[0]\n"
                "            out[name] = ''\n        elif line and name is not None:\n            out[name] += line\n    return out\n")

KINDS: list[Kind] = [
    Kind("fasta_parsing", "parsing", "text",
         "`text` is FASTA (headers start with '>', the record id is the first word after '>', sequences may be "
         "wrapped over several lines). Return $what.",
         "def $fn(text):\n    recs, name = {}, None\n    for line in text.splitlines():\n        line = line.strip()\n"
         "        if line.startswith('>'):\n            name = line[1:].split()[0]\n            recs[name] = ''\n"
         "        elif line and name is not None:\n            recs[name] += line\n$body",
         (V("parse_fasta", what="a dict id -> full sequence", body="    return recs\n"),
          V("fasta_lengths", what="a list of (id, length) pairs in file order", body="    return [(k, len(s)) for k, s in recs.items()]\n"),
          V("highest_gc_record", what="the id of the record with the highest GC fraction (first on ties)",
            body="    gc = {k: (s.count('G') + s.count('C')) / len(s) for k, s in recs.items()}\n    return max(recs, key=lambda k: gc[k])\n"),
          V("total_fasta_length", what="the total number of bases over all records", body="    return sum(len(s) for s in recs.values())\n")),
         cases(5, lambda rng: [gi.fasta(rng, rng.randint(1, 5))])),
    Kind("assembly_stats", "statistics", "lengths",
         "`lengths` is a list of contig lengths. Return $what.",
         "def $fn(lengths):\n    xs = sorted(lengths, reverse=True)\n    total = sum(xs)\n    acc = 0\n"
         "    for i, x in enumerate(xs):\n        acc += x\n        if acc * 100 >= total * $pct:\n            break\n$body",
         (V("n50", pct=50, what="the N50 (the length x such that contigs of length >= x cover at least half of the total)",
            body="    return x\n"),
          V("l50", pct=50, what="the L50 (the number of longest contigs needed to cover at least half of the total)",
            body="    return i + 1\n"),
          V("n90", pct=90, what="the N90 (as N50, at 90 % of the total)", body="    return x\n"),
          V("l75", pct=75, what="the L75 (as L50, at 75 % of the total)", body="    return i + 1\n")),
         cases(6, lambda rng: [[rng.randint(50, 5000) for _ in range(rng.randint(1, 15))]])),
    Kind("fastq_quality", "parsing", "text",
         "`text` is FASTQ (4 lines per record; Phred+$offset qualities). Return $what.",
         "def $fn(text):\n    lines = [l for l in text.splitlines() if l.strip()]\n"
         "    recs = [(lines[i][1:], lines[i + 1], [ord(c) - $offset for c in lines[i + 3]]) for i in range(0, len(lines), 4)]\n$body",
         (V("mean_read_quality", offset=33, what="a dict read id -> mean quality rounded to 2 decimals",
            body="    return {r: round(sum(q) / len(q), 2) for r, _, q in recs}\n"),
          V("reads_above_quality", offset=33, what="the ids (in order) of reads whose mean quality is at least 25",
            body="    return [r for r, _, q in recs if sum(q) / len(q) >= 25]\n"),
          V("position_mean_quality", offset=33, what="the mean quality at each position (0-based) over the reads "
            "long enough to have it, rounded to 2 decimals, as a list up to the longest read",
            body="    n = max(len(q) for _, _, q in recs)\n    out = []\n    for i in range(n):\n"
                 "        vals = [q[i] for _, _, q in recs if len(q) > i]\n        out.append(round(sum(vals) / len(vals), 2))\n    return out\n"),
          V("low_quality_bases", offset=64, what="the total number of bases with quality below 20",
            body="    return sum(1 for _, _, q in recs for x in q if x < 20)\n")),
         lambda rng, v: [[gi.fastq(rng, rng.randint(1, 5), v["offset"])] for _ in range(5)]),
    Kind("phred_scores", "parsing", "qual",
         "`qual` is a quality string. Return $what.",
         "def $fn(qual):\n$body",
         (V("phred33_scores", what="the list of Phred+33 scores", body="    return [ord(c) - 33 for c in qual]\n"),
          V("mean_error_probability", what="the mean per-base error probability 10^(-Q/10) (Phred+33), rounded to 6 decimals",
            body="    return round(sum(10 ** (-(ord(c) - 33) / 10) for c in qual) / len(qual), 6)\n"),
          V("phred64_to_phred33", what="the same qualities re-encoded from Phred+64 to Phred+33",
            body="    return ''.join(chr(ord(c) - 31) for c in qual)\n"),
          V("trim_low_quality_end", what="the length kept after trimming bases from the 3' end while their "
            "Phred+33 score is below 20", body="    n = len(qual)\n    while n and ord(qual[n - 1]) - 33 < 20:\n        n -= 1\n    return n\n")),
         lambda rng, v: [[gi.quals(rng, rng.randint(1, 30), 64 if v["fn"] == "phred64_to_phred33" else 33)] for _ in range(6)]),
    Kind("gff_parsing", "parsing", "text",
         "`text` is GFF3 (tab-separated: seqid, source, type, start, end, score, strand, phase, attributes as "
         "key=value pairs separated by ';'; lines starting with '#' are comments). Return $what.",
         "def $fn(text):\n    rows = []\n    for line in text.splitlines():\n        if not line or line.startswith('#'):\n            continue\n"
         "        f = line.split('\\t')\n        attrs = dict(kv.split('=', 1) for kv in f[8].split(';') if kv)\n"
         "        rows.append((f[0], f[2], int(f[3]), int(f[4]), f[6], attrs))\n$body",
         (V("gene_spans", what="a list of (ID, seqid, start, end, strand) for features of type gene, in file order",
            body="    return [(a['ID'], s, b, e, st) for s, t, b, e, st, a in rows if t == 'gene']\n"),
          V("feature_type_counts", what="a dict feature type -> count", body="    return dict(collections.Counter(t for _, t, *_ in rows))\n"),
          V("exon_length_by_parent", what="a dict Parent id -> total exon length (end - start + 1, 1-based inclusive)",
            body="    out = collections.defaultdict(int)\n    for s, t, b, e, st, a in rows:\n        if t == 'exon':\n"
                 "            out[a['Parent']] += e - b + 1\n    return dict(out)\n"),
          V("minus_strand_genes", what="the sorted IDs of genes on the '-' strand",
            body="    return sorted(a['ID'] for s, t, b, e, st, a in rows if t == 'gene' and st == '-')\n")),
         cases(4, lambda rng: [gi.gff(rng, rng.randint(1, 5))])),
    Kind("vcf_parsing", "parsing", "text",
         "`text` is a VCF with one sample (columns CHROM POS ID REF ALT QUAL FILTER INFO FORMAT sample; '#' lines "
         "are headers). A SNP has REF and ALT of length 1; anything else is an indel. Return $what.",
         "def $fn(text):\n    recs = [l.split('\\t') for l in text.splitlines() if l and not l.startswith('#')]\n$body",
         (V("count_variant_types", what="a dict {'snp': n, 'indel': m}",
            body="    snp = sum(1 for r in recs if len(r[3]) == 1 and len(r[4]) == 1)\n    return {'snp': snp, 'indel': len(recs) - snp}\n"),
          V("passing_variant_ids", what="the IDs of records whose FILTER is PASS, in order", body="    return [r[2] for r in recs if r[6] == 'PASS']\n"),
          V("genotype_counts", what="a dict genotype string (GT) -> count", body="    return dict(collections.Counter(r[9] for r in recs))\n"),
          V("mean_allele_frequency", what="the mean of the INFO field AF over all records, rounded to 4 decimals",
            body="    afs = [float(dict(kv.split('=') for kv in r[7].split(';'))['AF']) for r in recs]\n    return round(sum(afs) / len(afs), 4)\n")),
         cases(4, lambda rng: [gi.vcf(rng, rng.randint(1, 10))])),
    Kind("cigar_parsing", "parsing", "cigar",
         "`cigar` is a SAM CIGAR string (e.g. '5S20M2I10M'). Return $what.",
         "def $fn(cigar):\n    ops = [(int(n), op) for n, op in re.findall(r'(\\d+)([MIDNSHP=X])', cigar)]\n$body",
         (V("parse_cigar", what="the list of (length, operation) pairs", body="    return ops\n"),
          V("reference_span", what="the number of reference bases covered (M, D, N, =, X)",
            body="    return sum(n for n, op in ops if op in 'MDN=X')\n"),
          V("query_length", what="the read length implied (M, I, S, =, X)", body="    return sum(n for n, op in ops if op in 'MIS=X')\n"),
          V("soft_clipped_bases", what="the number of soft-clipped bases (S)", body="    return sum(n for n, op in ops if op == 'S')\n")),
         cases(6, lambda rng: [gi.cigar(rng)])),
    Kind("sam_parsing", "parsing", "text",
         "`text` is SAM (header lines start with '@'; fields QNAME FLAG RNAME POS MAPQ CIGAR ...). Flag bit 4 = "
         "unmapped, 16 = reverse strand, 256 = secondary, 1024 = duplicate. Return $what.",
         "def $fn(text):\n    recs = [l.split('\\t') for l in text.splitlines() if l and not l.startswith('@')]\n$body",
         (V("count_mapped_reads", what="the number of records without the unmapped bit", body="    return sum(1 for r in recs if not int(r[1]) & 4)\n"),
          V("reverse_strand_reads", what="the QNAMEs (in order) of mapped records on the reverse strand",
            body="    return [r[0] for r in recs if int(r[1]) & 16 and not int(r[1]) & 4]\n"),
          V("mean_mapq", what="the mean MAPQ of mapped, non-secondary, non-duplicate records, rounded to 2 decimals (0.0 if none)",
            body="    q = [int(r[4]) for r in recs if not int(r[1]) & (4 | 256 | 1024)]\n    return round(sum(q) / len(q), 2) if q else 0.0\n"),
          V("flag_summary", what="a dict with keys 'unmapped', 'reverse', 'secondary', 'duplicate' -> record counts",
            body="    bits = {'unmapped': 4, 'reverse': 16, 'secondary': 256, 'duplicate': 1024}\n"
                 "    return {k: sum(1 for r in recs if int(r[1]) & b) for k, b in bits.items()}\n")),
         cases(4, lambda rng: [gi.sam(rng, rng.randint(1, 10))])),
    Kind("hamming", "alignment", "a, b",
         "`a` and `b` are DNA strings of equal length. Return $what.",
         "def $fn(a, b):\n    if len(a) != len(b):\n        raise ValueError('sequences differ in length')\n"
         "    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y$skip]\n$body",
         (V("hamming_distance", skip="", what="the Hamming distance", body="    return len(diff)\n"),
          V("hamming_ignore_n", skip=" and 'N' not in (x, y)", what="the number of mismatching positions, ignoring "
            "positions where either base is N", body="    return len(diff)\n"),
          V("p_distance", skip="", what="the proportion of differing sites, rounded to 4 decimals",
            body="    return round(len(diff) / len(a), 4)\n"),
          V("mismatch_positions", skip="", what="the 0-based mismatch positions", body="    return diff\n")),
         lambda rng, v: [gi.mutated_pair(rng, gi.dna(rng, rng.randint(1, 30), "ACGTN" if "_n" in v["fn"] else "ACGT"),
                                         0.3, "ACGTN") for _ in range(6)]),
    Kind("transition_transversion", "alignment", "a, b",
         "Compare equal-length DNA strings `a` and `b`. Transitions are A<->G and C<->T; other substitutions "
         "are transversions. Return $what.",
         "def $fn(a, b):\n    purine = set('AG')\n    ts = tv = 0\n    for x, y in zip(a, b):\n        if x != y:\n"
         "            if (x in purine) == (y in purine):\n                ts += 1\n            else:\n                tv += 1\n$body",
         (V("ts_tv_ratio", what="transitions / transversions rounded to 4 decimals (None when there is no transversion)",
            body="    return round(ts / tv, 4) if tv else None\n"),
          V("count_transitions", what="the number of transitions", body="    return ts\n"),
          V("count_transversions", what="the number of transversions", body="    return tv\n"),
          V("substitution_summary", what="the tuple (transitions, transversions)", body="    return (ts, tv)\n")),
         cases(6, lambda rng: gi.mutated_pair(rng, gi.dna(rng, rng.randint(5, 40)), 0.4))),
    Kind("edit_distance", "alignment", "a, b",
         "Return the $what between strings `a` and `b` (dynamic programming).",
         "def $fn(a, b):\n    prev = [j * $indel for j in range(len(b) + 1)]\n    for i in range(1, len(a) + 1):\n"
         "        cur = [i * $indel] + [0] * len(b)\n        for j in range(1, len(b) + 1):\n"
         "            sub = prev[j - 1] + (0 if a[i - 1] == b[j - 1] else $sub)\n"
         "            cur[j] = min(sub, prev[j] + $indel, cur[j - 1] + $indel)\n        prev = cur\n    return prev[-1]\n",
         (V("edit_distance", indel=1, sub=1, what="Levenshtein distance (unit costs)"),
          V("weighted_edit_distance", indel=1, sub=2, what="edit distance with substitution cost 2 and indel cost 1"),
          V("indel_distance", indel=1, sub=10 ** 6, what="distance using insertions and deletions only (each cost 1)"),
          V("gap_heavy_edit_distance", indel=3, sub=1, what="edit distance with substitution cost 1 and indel cost 3")),
         cases(6, lambda rng: [gi.dna(rng, rng.randint(0, 15)), gi.dna(rng, rng.randint(1, 15))])),
    Kind("global_alignment", "alignment", "a, b",
         "Return the optimal Needleman-Wunsch global alignment score of `a` and `b` with match $m, mismatch $x "
         "and linear gap penalty $g per gap position.",
         "def $fn(a, b):\n    prev = [j * $g for j in range(len(b) + 1)]\n    for i in range(1, len(a) + 1):\n"
         "        cur = [i * $g] + [0] * len(b)\n        for j in range(1, len(b) + 1):\n"
         "            s = $m if a[i - 1] == b[j - 1] else $x\n            cur[j] = max(prev[j - 1] + s, prev[j] + $g, cur[j - 1] + $g)\n"
         "        prev = cur\n    return prev[-1]\n",
         (V("needleman_wunsch_score", m=1, x=-1, g=-2), V("global_alignment_score", m=2, x=-1, g=-2),
          V("nw_score_simple", m=1, x=0, g=-1), V("global_score_strict", m=5, x=-4, g=-6)),
         cases(6, lambda rng: [gi.dna(rng, rng.randint(1, 15)), gi.dna(rng, rng.randint(1, 15))])),
    Kind("local_alignment", "alignment", "a, b",
         "Return the optimal Smith-Waterman local alignment score of `a` and `b` (match $m, mismatch $x, linear "
         "gap $g; scores never below 0)$extra.",
         "def $fn(a, b):\n    best, best_at = 0, (0, 0)\n    prev = [0] * (len(b) + 1)\n    for i in range(1, len(a) + 1):\n"
         "        cur = [0] * (len(b) + 1)\n        for j in range(1, len(b) + 1):\n            s = $m if a[i - 1] == b[j - 1] else $x\n"
         "            cur[j] = max(0, prev[j - 1] + s, prev[j] + $g, cur[j - 1] + $g)\n"
         "            if cur[j] > best:\n                best, best_at = cur[j], (i, j)\n        prev = cur\n$body",
         (V("smith_waterman_score", m=2, x=-1, g=-2, extra="", body="    return best\n"),
          V("local_alignment_score", m=3, x=-3, g=-2, extra="", body="    return best\n"),
          V("local_alignment_end", m=2, x=-1, g=-2, extra=" and return the tuple (score, i, j) where i, j are the "
            "1-based end positions of the first cell reaching the best score in row-major order (0, 0, 0 when no "
            "positive score)", body="    return (best,) + best_at\n"),
          V("sw_score_blastn_like", m=1, x=-3, g=-5, extra="", body="    return best\n")),
         cases(6, lambda rng: [gi.dna(rng, rng.randint(1, 15)), gi.dna(rng, rng.randint(1, 15))])),
    Kind("common_subsequence", "alignment", "a, b",
         "Return $what of `a` and `b`.",
         "def $fn(a, b):\n$body",
         (V("lcs_length", what="the length of the longest common subsequence",
            body="    prev = [0] * (len(b) + 1)\n    for x in a:\n        cur = [0]\n        for j, y in enumerate(b):\n"
                 "            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))\n        prev = cur\n    return prev[-1]\n"),
          V("longest_common_substring", what="the longest common substring (the first in `a` on ties; '' if none)",
            body="    best = ''\n    for i in range(len(a)):\n        for j in range(i + len(best) + 1, len(a) + 1):\n"
                 "            if a[i:j] in b:\n                best = a[i:j]\n            else:\n                break\n    return best\n"),
          V("shared_kmer_count", what="the number of distinct 3-mers present in both",
            body="    ka = {a[i:i + 3] for i in range(len(a) - 2)}\n    return len(ka & {b[i:i + 3] for i in range(len(b) - 2)})\n"),
          V("is_subsequence", what="True when `a` is a (not necessarily contiguous) subsequence of `b`",
            body="    it = iter(b)\n    return all(ch in it for ch in a)\n")),
         cases(6, lambda rng: [gi.dna(rng, rng.randint(1, 7)), gi.dna(rng, rng.randint(1, 25))])),
    Kind("distance_matrix", "alignment", "seqs",
         "`seqs` is a list of equal-length DNA strings. Return $what.",
         "def $fn(seqs):\n    n = len(seqs)\n"
         "    d = [[sum(x != y for x, y in zip(seqs[i], seqs[j])) / len(seqs[0]) for j in range(n)] for i in range(n)]\n$body",
         (V("p_distance_matrix", what="the n x n matrix of p-distances (proportion of differing sites), rounded to 4 decimals",
            body="    return [[round(x, 4) for x in row] for row in d]\n"),
          V("closest_pair", what="the pair (i, j), i < j, with the smallest p-distance (first in row-major order on ties)",
            body="    pairs = [(d[i][j], i, j) for i in range(n) for j in range(i + 1, n)]\n    return min(pairs)[1:]\n"),
          V("jukes_cantor_matrix", what="the Jukes-Cantor distance matrix -3/4*ln(1 - 4p/3) rounded to 4 decimals "
            "(use None where p >= 0.75)",
            body="    return [[round(-0.75 * math.log(1 - 4 * p / 3), 4) if p < 0.75 else None for p in row] for row in d]\n"),
          V("mean_pairwise_distance", what="the mean p-distance over all pairs i < j, rounded to 4 decimals",
            body="    vals = [d[i][j] for i in range(n) for j in range(i + 1, n)]\n    return round(sum(vals) / len(vals), 4)\n")),
         cases(5, lambda rng: [gi.aligned(rng, rng.randint(2, 5), rng.randint(5, 20))])),
    Kind("consensus_profile", "alignment", "seqs",
         "`seqs` is a list of equal-length DNA strings (an alignment without gaps). Return $what.",
         "def $fn(seqs):\n    cols = [collections.Counter(col) for col in zip(*seqs)]\n$body",
         (V("consensus_string", what="the consensus (most common base per column; alphabetically first on ties)",
            body="    return ''.join(min(c, key=lambda b: (-c[b], b)) for c in cols)\n"),
          V("profile_matrix", what="a dict base -> list of per-column counts, for A, C, G, T",
            body="    return {b: [c[b] for c in cols] for b in 'ACGT'}\n"),
          V("column_entropy", what="the Shannon entropy (bits) of each column, rounded to 4 decimals",
            body="    n = len(seqs)\n    return [round(-sum(v / n * math.log2(v / n) for v in c.values()) + 0.0, 4) for c in cols]\n"),
          V("conserved_columns", what="the 0-based indices of columns where all sequences agree",
            body="    return [i for i, c in enumerate(cols) if len(c) == 1]\n")),
         cases(5, lambda rng: [gi.aligned(rng, rng.randint(2, 6), rng.randint(4, 16), 0.3)])),
    Kind("interval_ops", "intervals", "intervals",
         "`intervals` is a list of half-open genomic intervals [start, end). Return $what.",
         "def $fn(intervals):\n    merged = []\n    for s, e in sorted(intervals):\n        if merged and s <= merged[-1][1]:\n"
         "            merged[-1][1] = max(merged[-1][1], e)\n        else:\n            merged.append([s, e])\n$body",
         (V("merge_intervals", what="the merged intervals sorted by start (touching intervals merge)", body="    return merged\n"),
          V("covered_bases", what="the number of bases covered by at least one interval", body="    return sum(e - s for s, e in merged)\n"),
          V("coverage_gaps", what="the gaps [end, next start) between merged intervals",
            body="    return [[a[1], b[0]] for a, b in zip(merged, merged[1:])]\n"),
          V("max_depth", what="the maximum number of intervals overlapping one base (0 for no intervals)",
            body="    ev = sorted([(s, 1) for s, e in intervals] + [(e, -1) for s, e in intervals])\n"
                 "    depth = best = 0\n    for _, d in ev:\n        depth += d\n        best = max(best, depth)\n    return best\n")),
         cases(6, lambda rng: [gi.intervals(rng, rng.randint(1, 8))])),
    Kind("rna_structure", "structure", "rna",
         "For the RNA string `rna`, return $what.",
         "def $fn(rna):\n$body",
         (V("max_base_pairs", what="the maximum number of non-crossing Watson-Crick pairs (A-U, C-G) with at least "
            "$loop unpaired bases inside each pair (Nussinov)", loop=3,
            body="    n = len(rna)\n    ok = {('A', 'U'), ('U', 'A'), ('C', 'G'), ('G', 'C')}\n    dp = [[0] * n for _ in range(n)]\n"
                 "    for span in range($loop + 1, n):\n        for i in range(n - span):\n            j = i + span\n"
                 "            best = dp[i][j - 1]\n            for k in range(i, j - $loop):\n                if (rna[k], rna[j]) in ok:\n"
                 "                    best = max(best, (dp[i][k - 1] if k > i else 0) + 1 + dp[k + 1][j - 1])\n"
                 "            dp[i][j] = best\n    return dp[0][n - 1] if n else 0\n"),
          V("max_base_pairs_wobble", what="the maximum number of non-crossing pairs (A-U, C-G and G-U wobble) with at "
            "least $loop unpaired bases inside each pair (Nussinov)", loop=2,
            body="    n = len(rna)\n    ok = {('A', 'U'), ('U', 'A'), ('C', 'G'), ('G', 'C'), ('G', 'U'), ('U', 'G')}\n"
                 "    dp = [[0] * n for _ in range(n)]\n    for span in range($loop + 1, n):\n        for i in range(n - span):\n"
                 "            j = i + span\n            best = dp[i][j - 1]\n            for k in range(i, j - $loop):\n"
                 "                if (rna[k], rna[j]) in ok:\n                    best = max(best, (dp[i][k - 1] if k > i else 0) + 1 + dp[k + 1][j - 1])\n"
                 "            dp[i][j] = best\n    return dp[0][n - 1] if n else 0\n"),
          V("perfect_matchings", loop=0, what="the number of perfect matchings of the bonding graph when #A = #U and "
            "#C = #G (pairs may cross): (#A)! * (#C)!; return 0 otherwise",
            body="    a, u, c, g = (rna.count(x) for x in 'AUCG')\n    return math.factorial(a) * math.factorial(c) if a == u and c == g else 0\n"),
          V("maximum_matchings", loop=0, what="the number of maximum (possibly crossing) matchings: "
            "max(A,U)!/(max-min)! * max(C,G)!/(max-min)!",
            body="    a, u, c, g = (rna.count(x) for x in 'AUCG')\n"
                 "    f = lambda x, y: math.factorial(max(x, y)) // math.factorial(max(x, y) - min(x, y))\n    return f(a, u) * f(c, g)\n")),
         lambda rng, v: [[gi.balanced_rna(rng, rng.randint(0, 4), rng.randint(0, 4)) if k % 2 else gi.rna(rng, rng.randint(4, 18))]
                         for k in range(6)]),
    Kind("mutation_effects", "sequence", "ref, alt",
         "`ref` and `alt` are equal-length coding DNA sequences (in frame from 0). Using CODON_TABLE, return $what.",
         "def $fn(ref, alt):\n    syn = non = 0\n    changed = []\n    for i in range(0, len(ref) - 2, 3):\n"
         "        a, b = ref[i:i + 3], alt[i:i + 3]\n        if a != b:\n            if CODON_TABLE[a] == CODON_TABLE[b]:\n"
         "                syn += 1\n            else:\n                non += 1\n                changed.append(f'{CODON_TABLE[a]}{i // 3 + 1}{CODON_TABLE[b]}')\n$body",
         (V("count_synonymous", what="the number of codons changed synonymously", body="    return syn\n"),
          V("count_nonsynonymous", what="the number of codons whose amino acid changed", body="    return non\n"),
          V("protein_changes", what="the amino-acid changes as strings like 'K12R' (ref aa, 1-based codon, alt aa)",
            body="    return changed\n"),
          V("dn_ds_naive", what="nonsynonymous/synonymous changed-codon ratio rounded to 4 decimals (None when no synonymous change)",
            body="    return round(non / syn, 4) if syn else None\n")),
         cases(6, lambda rng: gi.mutated_pair(rng, gi.coding(rng, rng.randint(4, 20), stop=False), 0.15)),
         helpers=CODON_TABLE_SRC),
    Kind("descriptive_stats", "statistics", "values",
         "`values` is a non-empty list of numbers (e.g. read depths). Return $what.",
         "def $fn(values):\n    n = len(values)\n    mean = sum(values) / n\n$body",
         (V("depth_summary", what="(mean, median) each rounded to 3 decimals",
            body="    s = sorted(values)\n    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n    return (round(mean, 3), round(med, 3))\n"),
          V("sample_std", what="the sample standard deviation (n - 1) rounded to 4 decimals (0.0 when n = 1)",
            body="    return round(math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1)), 4) if n > 1 else 0.0\n"),
          V("zscores", what="the population z-scores rounded to 3 decimals (all 0.0 when the variance is 0)",
            body="    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / n)\n    return [round((x - mean) / sd, 3) if sd else 0.0 for x in values]\n"),
          V("coefficient_of_variation", what="the population standard deviation divided by the mean, rounded to 4 "
            "decimals (None when the mean is 0)",
            body="    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / n)\n    return round(sd / mean, 4) if mean else None\n")),
         cases(6, lambda rng: [[rng.randint(0, 60) for _ in range(rng.randint(1, 12))]])),
    Kind("sequence_toolkit", "class_methods", "seq",
         "This is a method of the class SequenceToolkit (the marker sits inside the class body). It receives a DNA "
         "string `seq` and must return $what, using self.alphabet (the valid letters).",
         "def $fn(self, seq):\n$body",
         (V("invalid_positions", what="the 0-based positions of letters not in self.alphabet",
            body="    return [i for i, b in enumerate(seq) if b not in self.alphabet]\n"),
          V("clean", what="`seq` uppercased with every letter not in self.alphabet removed",
            body="    return ''.join(b for b in seq.upper() if b in self.alphabet)\n"),
          V("longest_homopolymer", what="the length of the longest run of one repeated valid letter (0 if none)",
            body="    best = run = 0\n    prev = None\n    for b in seq:\n        run = run + 1 if b == prev and b in self.alphabet else (1 if b in self.alphabet else 0)\n"
                 "        prev = b\n        best = max(best, run)\n    return best\n"),
          V("masked", what="`seq` with every letter not in self.alphabet replaced by 'N'",
            body="    return ''.join(b if b in self.alphabet else 'N' for b in seq)\n")),
         cases(6, lambda rng: [gi.dna(rng, rng.randint(1, 30), "ACGTACGTRYx")]),
         cls="SequenceToolkit"),
]
