"""Why GRPO does not raise query choice on ``toy_choice``: cheap probes of the table decision alone (issue 30).

    nice -n 19 python scripts/diagnose_choice.py [--seed 0] [--json]

A full RL run costs 150-300 CPU s and mixes the table decision with everything else an episode does. This script
warm-starts the tiny model as a learning run does (``learning.warm_up`` with ``WARM_DEFAULTS['toy_choice']``),
then reads the one decision query choice is about directly: for every record, the model's probability of each
table's name right after ``SELECT value FROM`` in its first tool call (the three demonstrations of the record,
teacher-forced up to the table name, the name's tokens scored). From these it reports:

- **the cue in the tokens**: how the cue word is tokenised in the question and in the SQL (the same ids or not);
- **the warm start's table choice**: mean P(cued table) on held-out records (query-choice accuracy to expect), the
  3 x 3 matrix cue -> mean P(table) (rows equal: the choice ignores the cue), the mean entropy of the per-record
  table distribution (ln 3 = 1.10 is a uniform choice, 0 a fixed one), and the share of GRPO groups of 16 that
  have **zero reward variance** at these probabilities (no signal);
- **the loss mask**: whether the table-name tokens are model tokens (``env_mask`` 1, so they get gradient);
- **policy-gradient probes on the table decision alone** (an oracle reward: 1 for the cued table, whatever the
  answer; group-normalised advantages as GRPO's, AdamW): P(cued) on held-out records after ``steps`` steps at
  ``lr`` with ``records`` records of ``group`` samples each per step; and a supervised probe (cross-entropy on
  the cued table's name: can the model represent cue -> table at all at this learning rate).

Every probe starts from the same warm start (a deep copy). Prints one line per probe; ``--json`` ends with one
JSON line. docs/benchmarks.md ("Query choice: diagnosis") quotes its numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

for _key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: (name, kind, steps, lr, records per step, samples per record): the probes run from the warm start.
PROBES = (
    ("grpo-like: 1 record x 16, lr 5e-4, 60 steps", "pg", 60, 5e-4, 1, 16),
    ("grpo-like: 1 record x 16, lr 5e-4, 300 steps", "pg", 300, 5e-4, 1, 16),
    ("mixed cues: 4 records x 4, lr 5e-4, 60 steps", "pg", 60, 5e-4, 4, 4),
    ("mixed cues: 8 records x 8, lr 5e-4, 300 steps", "pg", 300, 5e-4, 8, 8),
    ("mixed cues: 8 records x 8, lr 2e-3, 300 steps", "pg", 300, 2e-3, 8, 8),
    ("supervised: 8 records, lr 5e-4, 300 steps", "sft", 300, 5e-4, 8, 1),
    ("supervised: 8 records, lr 3e-3, 300 steps", "sft", 300, 3e-3, 8, 1),
)


class Spans:
    """Per record: the three demonstrations cut right after their table name, and where each name's ids sit."""

    def __init__(self, episodes: list[Any], tables: tuple[str, ...], instances: list[Any]) -> None:
        self.cues = [inst.metadata["table"] for inst in instances]
        self.rows: list[list[tuple[list[int], int, int]]] = []  # per record, per table: (ids, start, end)
        self.masked: list[bool] = []
        self.prefix: list[int] = []  # per record: how many completion ids its demonstrations share (up to the name)
        n = len(tables)
        for r in range(len(instances)):
            eps = episodes[r * n:(r + 1) * n]
            comps = [e.completion_ids for e in eps]
            d = 0
            while all(len(c) > d and c[d] == comps[0][d] for c in comps):
                d += 1
            self.prefix.append(d)
            row = []
            for e, c in zip(eps, comps):
                name = self.names[tables[len(row)]]
                if c[d:d + len(name)] != name:
                    raise RuntimeError(f"the demonstration's ids at the table do not spell {tables[len(row)]!r}")
                end = d + len(name)
                p = len(e.prompt_ids)
                row.append((e.prompt_ids + c[:end], p + d, p + end))
                self.masked.append(all(e.env_mask[d:end]) and end > d)
            self.rows.append(row)

    names: ClassVar[dict[str, list[int]]] = {}  # table -> the ids of ' <table>' (set before use)


def table_logps(model: Any, spans: Spans, records: list[int], *, grad: bool) -> Any:
    """log P(each table's name) per record: a (records, 3) tensor."""
    import torch

    seqs = [row for r in records for row in spans.rows[r]]
    width = max(len(s[0]) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (s, _, _) in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), 1
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=ids, attention_mask=mask).logits.log_softmax(-1)
        out = []
        for i, (s, a, b) in enumerate(seqs):
            pos = torch.arange(a, b)
            out.append(logits[i, pos - 1, torch.tensor(s[a:b])].sum())
    return torch.stack(out).view(len(records), -1)


def choice_stats(model: Any, spans: Spans, tables: tuple[str, ...], group: int = 16) -> dict[str, Any]:
    """Mean P(cued), the cue -> P(table) matrix, entropy of the table choice, zero-variance share of groups."""
    import torch

    model.eval()
    lp = torch.cat([table_logps(model, spans, list(range(i, min(i + 16, len(spans.rows)))), grad=False)
                    for i in range(0, len(spans.rows), 16)])
    mass = lp.exp().sum(-1)
    p = lp.exp() / mass.unsqueeze(-1)
    cued = torch.tensor([tables.index(c) for c in spans.cues])
    pc = p[torch.arange(len(cued)), cued]
    matrix = {c: [round(float(p[cued == k, j].mean()), 3) for j in range(len(tables))] for k, c in enumerate(tables)}
    entropy = float(-(p * p.clamp_min(1e-12).log()).sum(-1).mean())
    zero = float((pc ** group + (1 - pc) ** group).mean())
    return {"p_cued": round(float(pc.mean()), 4), "matrix": matrix, "entropy": round(entropy, 3),
            "max_p": round(float(p.max(-1).values.mean()), 3), "zero_var_groups": round(zero, 4),
            "name_mass": round(float(mass.mean()), 3)}


def probe(model: Any, train: Spans, test: Spans, tables: tuple[str, ...], kind: str, steps: int, lr: float,
          records: int, group: int, seed: int) -> dict[str, Any]:
    """Train a copy of ``model`` on the table decision alone; P(cued) on held-out records after."""
    import torch

    m = copy.deepcopy(model)
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=lr)
    rng = random.Random(f"probe:{seed}")
    gen = torch.Generator().manual_seed(seed)
    cpu0 = time.process_time()
    for step in range(steps):
        for g in opt.param_groups:  # GRPO_DEFAULTS' 5-step warm-up
            g["lr"] = lr * min(1.0, (step + 1) / 5)
        rs = [rng.randrange(len(train.rows)) for _ in range(records)]
        lp = table_logps(m, train, rs, grad=True)
        cued = torch.tensor([tables.index(train.cues[r]) for r in rs])
        if kind == "sft":
            loss = -lp[torch.arange(len(rs)), cued].mean()
        else:
            probs = (lp.detach().exp() / lp.detach().exp().sum(-1, keepdim=True))
            picks = torch.multinomial(probs, group, replacement=True, generator=gen)  # (records, group)
            reward = (picks == cued.unsqueeze(-1)).float()
            adv = (reward - reward.mean(-1, keepdim=True)) / (reward.std(-1, keepdim=True) + 1e-4)
            weight = torch.zeros_like(lp).scatter_add_(1, picks, adv)  # sum of advantages per table
            loss = -(weight * lp).sum() / (records * group)
        loss.backward()
        opt.step()
        opt.zero_grad()
    after = choice_stats(m, test, tables)
    return {"p_cued": after["p_cued"], "matrix": after["matrix"], "entropy": after["entropy"],
            "train_p_cued": choice_stats(m, train, tables)["p_cued"], "cpu_s": round(time.process_time() - cpu0, 1)}


def gradient_share(model: Any, episodes: list[Any], spans: Spans, tables: tuple[str, ...], records: list[int],
                   names: dict[str, list[int]]) -> dict[str, Any]:
    """Where a GRPO step's gradient comes from, on one record's three demonstrations at a time.

    Each record's demonstrations read each table once; the one that read the cued table earns 1, the others 0, and
    the group-normalised advantages weight the DAPO loss over every model token (``env_mask`` 1) divided by their
    number, as TRL's loss does. That loss is split by token position: before the table's name (the same ids in the
    three demonstrations, so their terms cancel), the name itself (the decision query choice is about), and after it
    (the rest of the query, then the submitted answer: a correct copy of a wrong table's value is pushed down). Per
    record: the norm of each part's gradient and the cosine between the whole gradient and the name's; means over
    ``records``.
    """
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    model.eval()
    rows = []
    for r in records:
        eps = episodes[r * len(tables):(r + 1) * len(tables)]
        d = spans.prefix[r]
        reward = torch.tensor([float(t == spans.cues[r]) for t in tables])
        adv = (reward - reward.mean()) / (reward.std() + 1e-4)
        n_model = sum(sum(e.env_mask) for e in eps)
        parts = {"before": 0.0, "name": 0.0, "after": 0.0}
        counts = dict.fromkeys(parts, 0)
        for k, (e, t) in enumerate(zip(eps, tables)):
            ids = torch.tensor([e.prompt_ids + e.completion_ids])
            logp = model(input_ids=ids).logits[0, :-1].log_softmax(-1)
            p0 = len(e.prompt_ids)
            target = torch.tensor(e.completion_ids)
            tok = logp[p0 - 1:p0 - 1 + len(target)].gather(-1, target.unsqueeze(-1)).squeeze(-1)
            mask = torch.tensor(e.env_mask, dtype=torch.float)
            pos = torch.arange(len(target))
            end = d + len(names[t])
            for part, sel in (("before", pos < d), ("name", (pos >= d) & (pos < end)), ("after", pos >= end)):
                w = mask * sel.float()
                parts[part] = parts[part] + (-adv[k] * (tok * w).sum() / n_model)
                counts[part] += int(w.sum())
        grads = {}
        for part, loss in parts.items():
            g = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
            grads[part] = torch.cat([(x if x is not None else torch.zeros_like(p)).flatten()
                                     for x, p in zip(g, params)])
        whole = grads["before"] + grads["name"] + grads["after"]
        cos = float(torch.nn.functional.cosine_similarity(whole, grads["name"], dim=0))
        rows.append({"cos_whole_name": cos, **{f"norm_{k}": float(v.norm()) for k, v in grads.items()},
                     "norm_whole": float(whole.norm()), **{f"tokens_{k}": v for k, v in counts.items()}})
    keys = rows[0].keys()
    return {k: round(sum(row[k] for row in rows) / len(rows), 5) for k in keys} | {"records": len(rows)}


def _demo_logps(model: Any, eps: list[Any]) -> list[Any]:
    """Per demonstration: log p of each completion token (teacher-forced), a 1-D tensor."""
    import torch

    width = max(len(e.prompt_ids) + len(e.completion_ids) for e in eps)
    ids = torch.zeros((len(eps), width), dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, e in enumerate(eps):
        seq = e.prompt_ids + e.completion_ids
        ids[i, :len(seq)], att[i, :len(seq)] = torch.tensor(seq), 1
    logp = model(input_ids=ids, attention_mask=att).logits.log_softmax(-1)
    out = []
    for i, e in enumerate(eps):
        p0, target = len(e.prompt_ids), torch.tensor(e.completion_ids)
        out.append(logp[i, p0 - 1:p0 - 1 + len(target)].gather(-1, target.unsqueeze(-1)).squeeze(-1))
    return out


def _after_logp(model: Any, episodes: list[Any], spans: Spans, tables: tuple[str, ...],
                names: dict[str, list[int]]) -> float:
    """Mean log p of the model tokens after the table's name in the cued demonstrations (the rest of the query and
    the submitted copy of the value read): how well the copying survives."""
    import torch

    n = len(tables)
    total, count = 0.0, 0
    with torch.no_grad():
        for r, cue in enumerate(spans.cues):
            k = tables.index(cue)
            e = episodes[r * n + k]
            lp = _demo_logps(model, [e])[0]
            mask = torch.tensor(e.env_mask, dtype=torch.bool)
            mask[:spans.prefix[r] + len(names[cue])] = False
            total += float(lp[mask].sum())
            count += int(mask.sum())
    return total / max(count, 1)


def trajectory_probe(model: Any, train_eps: list[Any], test_eps: list[Any], train: Spans, test: Spans,
                     tables: tuple[str, ...], names: dict[str, list[int]], *, part: str, steps: int, lr: float,
                     group: int, seed: int, records: int = 1, beta: float = 0.0) -> dict[str, Any]:
    """The policy-gradient probe on whole demonstrations: each step samples ``group`` tables for one record from
    the policy's own table distribution, takes that record's demonstration of each sampled table (teacher-forced),
    and weights its tokens by the group-normalised advantage (1 for the cued table), divided by the number of model
    tokens in the step (TRL's DAPO loss), AdamW with the 5-step warm-up. ``part``: ``name`` puts the loss on the
    table's name alone (the probe above, in this loss's scale), ``all`` on every model token as GRPO does.
    ``records`` records per step; ``beta`` > 0 adds TRL's KL term (k3, per model token) to the frozen warm start.
    Reports
    held-out P(cued) and the copying after the name (:func:`_after_logp`) after ``steps``."""
    import torch

    m = copy.deepcopy(model)
    m.train()
    ref = model.eval() if beta else None
    opt = torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.0)
    rng = random.Random(f"traj:{seed}")
    gen = torch.Generator().manual_seed(seed)
    n = len(tables)
    cpu0 = time.process_time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 5)
        batch = []  # (advantage, episode, table index, shared prefix length)
        for r in [rng.randrange(len(train.rows)) for _ in range(records)]:
            with torch.no_grad():
                lp = table_logps(m, train, [r], grad=False)[0]
            picks = torch.multinomial((lp.exp() / lp.exp().sum()), group, replacement=True, generator=gen)
            reward = (picks == tables.index(train.cues[r])).float()
            adv = (reward - reward.mean()) / (reward.std() + 1e-4)
            batch += [(a, train_eps[r * n + int(k)], int(k), train.prefix[r]) for a, k in zip(adv, picks)]
        eps = [b[1] for b in batch]
        logps = _demo_logps(m, eps)
        refs = None
        if beta:
            with torch.no_grad():
                refs = _demo_logps(ref, eps)
        n_tok = sum(sum(e.env_mask) for e in eps)
        loss = 0.0
        for i, ((a, e, k, d), tok) in enumerate(zip(batch, logps)):
            w = torch.tensor(e.env_mask, dtype=torch.float)
            if beta:  # TRL's per-token k3 estimate of KL(policy || warm start), on every model token
                delta = refs[i] - tok
                loss = loss + beta * ((delta.exp() - delta - 1) * w).sum() / n_tok
            if part == "name":
                sel = torch.zeros_like(w)
                sel[d:d + len(names[tables[k]])] = 1.0
                w = w * sel
            loss = loss - a * (tok * w).sum() / n_tok
        loss.backward()
        opt.step()
        opt.zero_grad()
    m.eval()
    return {"p_cued": choice_stats(m, test, tables)["p_cued"], "after_logp": round(_after_logp(m, test_eps, test,
            tables, names), 4), "cpu_s": round(time.process_time() - cpu0, 1)}


#: (name, part, steps, lr, group, records, beta): whole-demonstration probes (``--trajectory``).
TRAJECTORY_PROBES = (
    ("name only, 1 record x 16, lr 5e-4, 60 steps", "name", 60, 5e-4, 16, 1, 0.0),
    ("all model tokens, 1 record x 16, lr 5e-4, 60 steps", "all", 60, 5e-4, 16, 1, 0.0),
    ("name only, 1 record x 16, lr 1e-3, 60 steps", "name", 60, 1e-3, 16, 1, 0.0),
    ("all model tokens, 1 record x 16, lr 1e-3, 60 steps", "all", 60, 1e-3, 16, 1, 0.0),
    ("all model tokens, 4 records x 16, lr 5e-4, 60 steps", "all", 60, 5e-4, 16, 4, 0.0),
    ("all model tokens + KL 0.04, 1 record x 16, lr 5e-4, 60 steps", "all", 60, 5e-4, 16, 1, 0.04),
    ("all model tokens, 1 record x 16, lr 2e-4, 150 steps", "all", 150, 2e-4, 16, 1, 0.0),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0, help="warm-start and probe seed; default 0")
    p.add_argument("--probes", type=int, nargs="*", help="indices of PROBES to run (default all)")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.add_argument("--trajectory", action="store_true",
                   help="also run TRAJECTORY_PROBES: the policy gradient on whole demonstrations, the name alone "
                        "against every model token (see trajectory_probe)")
    p.add_argument("--trajectory-probes", type=int, nargs="*", help="indices of TRAJECTORY_PROBES (default all)")
    p.add_argument("--gradient-share", type=int, default=0, metavar="N",
                   help="also split one GRPO step's gradient by token position on N training records (see "
                        "gradient_share); default 0 (skip)")
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym.tasks.toy_choice import TABLES
    from medagentgym.medcopilot import tiny
    from medagentgym.medcopilot.learning import CHOICE, WARM_DEFAULTS, Playground, choice_episodes, warm_up

    out: dict[str, Any] = {"seed": args.seed}
    cpu0 = time.process_time()
    with tempfile.TemporaryDirectory() as work:
        model_dir = tiny.build_tiny_model(Path(work) / "tiny", seed=0)
        tok = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        torch.manual_seed(args.seed)
        play = Playground.open(CHOICE, Path(work) / "tasks", tok, workers=4)
        try:
            inst = play.family.instances("train")[0]
            q = tok(inst.question, add_special_tokens=False)["input_ids"]
            out["tokens"] = {t: {"in question": tok(f" {t} reading", add_special_tokens=False)["input_ids"][:-1],
                                 "in sql": tok(f"FROM {t}", add_special_tokens=False)["input_ids"][1:]}
                             for t in TABLES}
            out["question_tokens"] = [tok.decode([i]) for i in q]
            print("cue tokens:", json.dumps(out["tokens"]), flush=True)
            print("question as tokens:", "|".join(out["question_tokens"]), flush=True)
            loss = warm_up(model, play, WARM_DEFAULTS[CHOICE], seed=args.seed)
            print(f"warm start: loss {loss:.3f} ({time.process_time() - cpu0:.0f} s CPU)", flush=True)
            test_insts = play.family.instances("test")
            Spans.names = {t: tok(f" {t}", add_special_tokens=False)["input_ids"] for t in TABLES}
            train_episodes = choice_episodes(play)
            train = Spans(train_episodes, TABLES, list(play.index.instances.values()))
            test_episodes = choice_episodes(play, test_insts)
            test = Spans(test_episodes, TABLES, test_insts)
        finally:
            play.close()
        names = {tok.decode(train.rows[0][k][0][train.rows[0][k][1]:train.rows[0][k][2]]) for k in range(3)}
        out["name_spans"] = sorted(names)
        out["names_are_model_tokens"] = all(train.masked + test.masked)
        print(f"table names scored: {sorted(names)}; all model tokens (env_mask 1): {out['names_are_model_tokens']}",
              flush=True)
        out["warm"] = {"train": choice_stats(model, train, TABLES), "test": choice_stats(model, test, TABLES)}
        print("warm start, held-out:", json.dumps(out["warm"]["test"]), flush=True)
        print("warm start, train:", json.dumps(out["warm"]["train"]), flush=True)
        if args.gradient_share:
            out["gradient_share"] = gradient_share(model, train_episodes, train, TABLES,
                                                   list(range(min(args.gradient_share, len(train.rows)))), Spans.names)
            print("gradient share of one GRPO step (warm start):", json.dumps(out["gradient_share"]), flush=True)
        if args.trajectory:
            warm_after = round(_after_logp(model, test_episodes, test, TABLES, Spans.names), 4)
            out["trajectory"] = {"warm_after_logp": warm_after, "probes": []}
            print(f"warm start: held-out copying after the name, mean log p {warm_after}", flush=True)
            for i, (name, part, steps, lr, group, records, beta) in enumerate(TRAJECTORY_PROBES):
                if args.trajectory_probes and i not in args.trajectory_probes:
                    continue
                r = {"probe": name, **trajectory_probe(model, train_episodes, test_episodes, train, test, TABLES,
                                                       Spans.names, part=part, steps=steps, lr=lr, group=group,
                                                       seed=args.seed, records=records, beta=beta)}
                out["trajectory"]["probes"].append(r)
                print(f"{name}: held-out P(cued) {out['warm']['test']['p_cued']:.3f} -> {r['p_cued']:.3f}, copying "
                      f"after the name {warm_after} -> {r['after_logp']} ({r['cpu_s']:.0f} s CPU)", flush=True)
        out["probes"] = []
        for i, (name, kind, steps, lr, records, group) in enumerate(PROBES):
            if args.probes and i not in args.probes:
                continue
            r = {"probe": name, **probe(model, train, test, TABLES, kind, steps, lr, records, group, args.seed)}
            out["probes"].append(r)
            print(f"{name}: held-out P(cued) {out['warm']['test']['p_cued']:.3f} -> {r['p_cued']:.3f} "
                  f"(train {r['train_p_cued']:.3f}), entropy {r['entropy']:.2f}, matrix {r['matrix']} "
                  f"({r['cpu_s']:.0f} s CPU)", flush=True)
    out["cpu_s"] = round(time.process_time() - cpu0, 1)
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
