"""Seeded random inputs for the biocoder hidden tests (sequences, FASTA/FASTQ/GFF/VCF/SAM text, intervals)."""

from __future__ import annotations

import random

DNA = "ACGT"
AMINO = "ACDEFGHIKLMNPQRSTVWY"


def dna(rng: random.Random, n: int, alphabet: str = DNA) -> str:
    """A random sequence of length ``n`` over ``alphabet``."""
    return "".join(rng.choice(alphabet) for _ in range(n))


def rna(rng: random.Random, n: int) -> str:
    """A random RNA sequence of length ``n``."""
    return dna(rng, n, "ACGU")


def balanced_rna(rng: random.Random, n_au: int, n_cg: int) -> str:
    """A shuffled RNA with ``n_au`` A and U each and ``n_cg`` C and G each (perfect matchings exist)."""
    letters = list("AU" * n_au + "CG" * n_cg) or ["A", "U"]
    rng.shuffle(letters)
    return "".join(letters)


def protein(rng: random.Random, n: int) -> str:
    """A random protein sequence of length ``n``."""
    return dna(rng, n, AMINO)


def coding(rng: random.Random, n_codons: int, *, stop: bool = True) -> str:
    """ATG + random sense codons (+ a stop codon), so translations are non-trivial."""
    stops = {"TAA", "TAG", "TGA"}
    codons = ["ATG"]
    while len(codons) < n_codons:
        c = dna(rng, 3)
        if c not in stops:
            codons.append(c)
    if stop:
        codons.append(rng.choice(sorted(stops)))
    return "".join(codons)


def with_motif(rng: random.Random, n: int, motif: str, copies: int) -> str:
    """A random sequence with ``copies`` of ``motif`` planted at random places."""
    seq = list(dna(rng, n))
    for _ in range(copies):
        at = rng.randrange(0, max(1, n - len(motif)))
        seq[at:at + len(motif)] = motif
    return "".join(seq)[:n]


def mutated_pair(rng: random.Random, seq: str, rate: float, alphabet: str = DNA) -> list[str]:
    """``[seq, copy]`` where each position of the copy is redrawn from ``alphabet`` with probability ``rate``."""
    return [seq, "".join(rng.choice(alphabet) if rng.random() < rate else x for x in seq)]


def planted_motif(rng: random.Random, motifs: dict[str, str] | list[str], lo: int, hi: int, copies: int) -> list[str]:
    """``[text, key]``: a random text of length lo..hi with 0..copies plants of one motif (a key of ``motifs``)."""
    key = rng.choice(list(motifs))
    motif = motifs[key] if isinstance(motifs, dict) else key
    return [with_motif(rng, rng.randint(lo, hi), motif, rng.randint(0, copies)), key]


def kmer_path(rng: random.Random, lo: int, hi: int, k_lo: int, k_hi: int) -> list[list[str]]:
    """``[kmers]``: the overlapping k-mers, in order, of a random text of length lo..hi (k in k_lo..k_hi)."""
    text, k = dna(rng, rng.randint(lo, hi)), rng.randint(k_lo, k_hi)
    return [[text[i:i + k] for i in range(len(text) - k + 1)]]


def fasta(rng: random.Random, n_records: int, lo: int = 8, hi: int = 40, width: int = 20) -> str:
    """FASTA text with wrapped sequence lines."""
    lines = []
    for i in range(n_records):
        seq = dna(rng, rng.randint(lo, hi))
        lines.append(f">seq{i + 1} sample_{rng.randint(1, 99)}")
        lines += [seq[j:j + width] for j in range(0, len(seq), width)]
    return "\n".join(lines) + "\n"


def quals(rng: random.Random, n: int, offset: int = 33) -> str:
    """A phred quality string (scores 2..40)."""
    return "".join(chr(offset + rng.randint(2, 40)) for _ in range(n))


def fastq(rng: random.Random, n_records: int, offset: int = 33) -> str:
    """FASTQ text (4 lines per record)."""
    out = []
    for i in range(n_records):
        n = rng.randint(8, 30)
        out += [f"@read{i + 1}", dna(rng, n), "+", quals(rng, n, offset)]
    return "\n".join(out) + "\n"


def gff(rng: random.Random, n_genes: int) -> str:
    """GFF3 text: genes with mRNA and 1-3 exons each, one header line."""
    lines = ["##gff-version 3"]
    pos = 1
    for g in range(1, n_genes + 1):
        seqid = rng.choice(["chr1", "chr2", "chrX"])
        strand = rng.choice("+-")
        start = pos + rng.randint(10, 500)
        exons = []
        cur = start
        for _ in range(rng.randint(1, 3)):
            e_end = cur + rng.randint(20, 200)
            exons.append((cur, e_end))
            cur = e_end + rng.randint(30, 300)
        end = exons[-1][1]
        pos = end
        gid = f"gene{g:03d}"
        lines.append(f"{seqid}\tsynth\tgene\t{start}\t{end}\t.\t{strand}\t.\tID={gid};Name=G{g}")
        lines.append(f"{seqid}\tsynth\tmRNA\t{start}\t{end}\t.\t{strand}\t.\tID={gid}.t1;Parent={gid}")
        for k, (a, b) in enumerate(exons, 1):
            lines.append(f"{seqid}\tsynth\texon\t{a}\t{b}\t.\t{strand}\t.\tID={gid}.e{k};Parent={gid}.t1")
    return "\n".join(lines) + "\n"


def vcf(rng: random.Random, n: int) -> str:
    """VCF text: header, one sample column, SNPs and indels, PASS/LowQual filters, AF/DP in INFO."""
    lines = ["##fileformat=VCFv4.2", "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tS1"]
    pos = 100
    for i in range(n):
        pos += rng.randint(1, 400)
        ref = rng.choice(DNA)
        kind = rng.random()
        alt = rng.choice([b for b in DNA if b != ref]) if kind < 0.7 else (
            ref + dna(rng, rng.randint(1, 3)) if kind < 0.85 else ref)
        if alt == ref:
            ref, alt = ref + dna(rng, rng.randint(1, 3)), ref
        gt = rng.choice(["0/1", "1/1", "0/0", "0/1"])
        af = round(rng.uniform(0.01, 0.99), 3)
        lines.append(f"chr{rng.choice('12')}\t{pos}\trs{1000 + i}\t{ref}\t{alt}\t{rng.randint(5, 99)}\t"
                     f"{rng.choice(['PASS', 'PASS', 'LowQual'])}\tDP={rng.randint(5, 80)};AF={af}\tGT\t{gt}")
    return "\n".join(lines) + "\n"


def cigar(rng: random.Random) -> str:
    """A random CIGAR string (M/I/D/S/N)."""
    parts = []
    if rng.random() < 0.4:
        parts.append(f"{rng.randint(1, 9)}S")
    for _ in range(rng.randint(1, 4)):
        parts.append(f"{rng.randint(5, 60)}M")
        if rng.random() < 0.5:
            parts.append(f"{rng.randint(1, 5)}{rng.choice('IDN')}")
    parts.append(f"{rng.randint(5, 40)}M")
    if rng.random() < 0.3:
        parts.append(f"{rng.randint(1, 9)}S")
    return "".join(parts)


def sam(rng: random.Random, n: int) -> str:
    """SAM text: an @HD header and ``n`` alignment lines."""
    lines = ["@HD\tVN:1.6\tSO:coordinate"]
    for i in range(n):
        flag = rng.choice([0, 16, 4, 0, 16, 1024, 256])
        mapped = not flag & 4
        seq = dna(rng, 20)
        lines.append("\t".join([f"r{i + 1}", str(flag), "chr1" if mapped else "*",
                                str(rng.randint(1, 5000) if mapped else 0), str(rng.randint(0, 60) if mapped else 0),
                                cigar(rng) if mapped else "*", "*", "0", "0", seq, quals(rng, 20)]))
    return "\n".join(lines) + "\n"


def intervals(rng: random.Random, n: int, span: int = 300) -> list[list[int]]:
    """``n`` half-open [start, end) intervals."""
    out = []
    for _ in range(n):
        a = rng.randint(0, span)
        out.append([a, a + rng.randint(1, 60)])
    return out


def aligned(rng: random.Random, n: int, length: int, mutate: float = 0.25) -> list[str]:
    """``n`` equal-length sequences derived from one ancestor with point changes."""
    base = dna(rng, length)
    return ["".join(rng.choice(DNA) if rng.random() < mutate else b for b in base) for _ in range(n)]
