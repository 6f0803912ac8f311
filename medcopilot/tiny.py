"""A tiny random Qwen2 model with a real byte-level BPE tokenizer, for CPU tests and smoke runs.

The model has the Qwen2 architecture at toy size (hidden 64, 2 layers, 4 query heads, 2 KV heads), so every code
path that handles a real Qwen2.5 checkpoint (chat template, LoRA target modules, generation config, export) runs on
it in milliseconds. The tokenizer is trained here, on a small built-in corpus of chat, tool-call, SQL and Python
text, with Qwen's own pre-tokenizer split regex and NFC normaliser. That matters: ``AutoTokenizer`` reloads a
``qwen2`` folder as ``Qwen2Tokenizer``, which rebuilds the pre-tokenizer from that regex, so a tokenizer trained any
other way would encode differently after a reload.

Special tokens follow Qwen2.5: ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos). The tool tags
``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>`` are added tokens that are *not* special,
so ``decode(..., skip_special_tokens=True)`` keeps them (the environment parses tool calls from decoded text).
The chat template is TRL's bundled Qwen2.5 template, byte for byte: TRL recognises templates by exact text (SFT's
assistant-only loss and GRPO's tool parsing depend on it).

Example:
    >>> from medagentgym.medcopilot.tiny import build_tiny_model
    >>> path = build_tiny_model("artifacts/tiny-qwen2")
    >>> AutoModelForCausalLM.from_pretrained(path)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
from pathlib import Path

from medagentgym.medcopilot.modeling import save_pretrained_atomic

#: Qwen2's pre-tokenizer split regex, as ``transformers.Qwen2Tokenizer`` rebuilds it on load.
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
#: Added, non-special tokens: they survive ``skip_special_tokens=True``.
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

#: Architecture of the tiny model (a Qwen2 at toy size; head_dim = 64 / 4 = 16).
#: Weights start at std 0.1, near 1/sqrt(hidden) = 0.125, instead of the 0.02 that ``Qwen2Config`` defaults to
#: (a scale meant for hidden sizes in the thousands): at 0.02 every product of two projections in a 64-wide model
#: is ~25x smaller than at its natural scale, and learning to copy a value out of an observation, which needs the
#: attention's query-key and value-output products to grow together, sat on a plateau for thousands of steps (at
#: 0.1 it is learnt in ~300; docs/benchmarks.md, "Learning").
TINY_ARCH = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
    "initializer_range": 0.1,
}
#: BPE target vocabulary (the trainer stops earlier if the corpus runs out of merges).
TINY_VOCAB_SIZE = 2048


def qwen25_chat_template() -> str:
    """TRL's bundled Qwen2.5 chat template, read from the installed ``trl`` package without importing it.

    Returns:
        The template text, unchanged.

    Raises:
        FileNotFoundError: If ``trl`` is not installed or no longer ships ``chat_templates/qwen2_5.jinja``.
    """
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("trl is not installed: `pip install trl==1.16.0` (it ships the Qwen2.5 chat template)")
    path = Path(next(iter(spec.submodule_search_locations))) / "chat_templates" / "qwen2_5.jinja"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: this trl version does not ship the Qwen2.5 template; use trl 1.16")
    return path.read_text(encoding="utf-8")


_SQL_TABLES = {
    "patients": ["subject_id", "gender", "dob", "age", "anchor_year"],
    "admissions": ["hadm_id", "subject_id", "admittime", "dischtime", "admission_type", "insurance"],
    "labevents": ["subject_id", "hadm_id", "itemid", "charttime", "valuenum", "valueuom"],
    "diagnoses_icd": ["subject_id", "hadm_id", "icd_code", "icd_version", "seq_num"],
    "prescriptions": ["subject_id", "hadm_id", "drug", "dose_val_rx", "route", "starttime"],
}
_WORDS = [
    "patient", "age", "glucose", "creatinine", "sodium", "potassium", "heart", "rate", "blood", "pressure",
    "admission", "discharge", "diagnosis", "count", "average", "maximum", "minimum", "number", "total", "value",
    "table", "column", "query", "result", "answer", "dataset", "cohort", "survival", "hazard", "ratio", "regression",
    "model", "sequence", "protein", "gene", "expression", "read", "file", "data", "frame", "mean", "median",
    "standard", "deviation", "first", "last", "time", "hospital", "stay", "days", "years", "male", "female",
    "insulin", "warfarin", "aspirin",
]
_QUESTIONS = (
    "How many {w} records are in the {t} table?",
    "What is the average {w} of patients older than {n}?",
    "Which {w} has the highest value in {t}?",
    "Compute the {w} for subject {n} and report a single number.",
    "List the distinct {w} values seen after year {n}.",
)
_PY_SNIPPETS = (
    "import pandas as pd\ndf = pd.read_csv('/data/{t}.csv')\nprint(df['{c}'].mean())\n",
    ("import sqlite3\ncon = sqlite3.connect('/data/db.sqlite')\nrows = con.execute('SELECT {c} FROM {t}').fetchall()\n"
     "print(len(rows))\n"),
    ("def solve(values):\n    total = 0\n    for v in values:\n        if v is not None:\n            total += v\n"
     "    return total / max(len(values), 1)\n\nanswer = solve([{n}, {m}])\nprint(answer)\n"),
    "from Bio.Seq import Seq\nseq = Seq('ATGC{n}')\nprint(seq.reverse_complement())\n",
    "import numpy as np\nx = np.array([{n}, {m}, 3.5])\nprint(round(float(x.std()), 3))\n",
)


def _corpus(seed: int = 0, n_items: int = 400) -> list[str]:
    """Deterministic training text: chat turns, tool calls and responses, SQL, Python and tracebacks."""
    rng = random.Random(seed)
    template = qwen25_chat_template()
    texts = [template, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."]
    for _ in range(n_items):
        table = rng.choice(sorted(_SQL_TABLES))
        col = rng.choice(_SQL_TABLES[table])
        n, m = rng.randint(0, 2020), round(rng.uniform(0, 300), 2)
        question = rng.choice(_QUESTIONS).format(w=rng.choice(_WORDS), t=table, n=n)
        sql = f"SELECT {col}, COUNT(*) FROM {table} WHERE {col} IS NOT NULL GROUP BY {col} ORDER BY 2 DESC LIMIT {n};"
        code = rng.choice(_PY_SNIPPETS).format(t=table, c=col, n=n, m=m)
        call = {"name": rng.choice(["execute_sql", "execute_python", "submit_answer", "request_info"]),
                "arguments": {"query": sql} if rng.random() < 0.5 else {"code": code}}
        texts.append(
            f"{IM_START}user\n{question}{EOS_TOKEN}\n{IM_START}assistant\nI will query the {table} table first.\n"
            f"<tool_call>\n{json.dumps(call)}\n</tool_call>{EOS_TOKEN}\n{IM_START}user\n<tool_response>\n"
            f"{col}\n{m}\n</tool_response>{EOS_TOKEN}\n"
        )
        texts.append(
            "Traceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\n"
            f"KeyError: '{col}'\nThe answer is {m}. " + " ".join(rng.choice(_WORDS) for _ in range(12))
        )
    return texts


def _train_tokenizer(seed: int):
    """Train the byte-level BPE with Qwen's normaliser and pre-tokenizer; returns a ``tokenizers.Tokenizer``."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE

    tok = Tokenizer(BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[PAD_TOKEN, IM_START, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer)
    return tok


def build_tiny_tokenizer(*, seed: int = 0):
    """Train the tiny tokenizer and wrap it as a ``transformers`` ``Qwen2Tokenizer`` with the Qwen2.5 template.

    Args:
        seed: Seed of the built-in corpus generator.

    Returns:
        A ``Qwen2Tokenizer``: pad ``<|endoftext|>``, eos ``<|im_end|>``, ``<|im_start|>`` special, tool tags added
        as non-special tokens, ``chat_template`` set.
    """
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    model = json.loads(_train_tokenizer(seed).to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=merges,
        unk_token=None,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        extra_special_tokens=[IM_START],
        model_max_length=TINY_ARCH["max_position_embeddings"],
    )
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tokenizer.chat_template = qwen25_chat_template()
    return tokenizer


def build_tiny_model(out_dir: str | os.PathLike, *, seed: int = 0, initializer_range: float | None = None) -> Path:
    """Write a random-init tiny Qwen2 model, its tokenizer and generation config to ``out_dir``.

    The folder loads with ``AutoModelForCausalLM`` / ``AutoTokenizer`` like any Hub checkpoint. It is written to a
    temporary sibling first and moved into place, so a crash never leaves a half-written model behind; an existing
    ``out_dir`` is replaced.

    Args:
        out_dir: Destination folder.
        seed: Seeds both the corpus and the weight initialisation (same seed, same files).
        initializer_range: Std of the initial weights instead of ``TINY_ARCH``'s 0.1.

    Returns:
        The path of the written folder.

    Example:
        >>> path = build_tiny_model("/tmp/tiny")  # doctest: +SKIP
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tokenizer = build_tiny_tokenizer(seed=seed)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id,
        **{**TINY_ARCH, **({} if initializer_range is None else {"initializer_range": initializer_range})},
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)

    return save_pretrained_atomic(out, model, tokenizer)


__all__ = ["build_tiny_model", "build_tiny_tokenizer", "qwen25_chat_template"]
