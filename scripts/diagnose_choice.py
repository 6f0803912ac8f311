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
        n = len(tables)
        for r in range(len(instances)):
            eps = episodes[r * n:(r + 1) * n]
            comps = [e.completion_ids for e in eps]
            d = 0
            while all(len(c) > d and c[d] == comps[0][d] for c in comps):
                d += 1
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0, help="warm-start and probe seed; default 0")
    p.add_argument("--probes", type=int, nargs="*", help="indices of PROBES to run (default all)")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
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
            train = Spans(choice_episodes(play), TABLES, list(play.index.instances.values()))
            test = Spans(choice_episodes(play, test_insts), TABLES, test_insts)
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
