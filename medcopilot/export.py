"""Export a trained run as a standalone Hugging Face model folder, with a model card, and optionally push it.

``export_model(run_dir, out_dir)`` loads what a run saved (a full model, or a LoRA adapter on its base model, which
is merged), writes model weights, tokenizer, chat template and generation config to ``out_dir``, and a
``README.md`` model card built with ``huggingface_hub.ModelCard``: metadata (base model as a Hub id, license,
datasets, tags, and ``model-index`` evaluation results read from ``medagentgym eval`` reports), then the
training recipe and data, the evaluation tables, intended use, out-of-scope use and limitations written for a
model trained on synthetic medical tasks. The folder loads with ``AutoModelForCausalLM`` / ``AutoTokenizer`` and
serves with vLLM as is.

The merge runs in fp32 and the weights are cast once to ``dtype``. By default (:func:`export_dtype`) a LoRA run
exports **float32**: a bf16 export rounds every weight to 8 significant bits, which keeps only part of an update
smaller than half a bf16 step of the weight (on a base stored in bf16, about half of a 1e-3 relative update and
almost none of a 1e-4 one), while float32 keeps the merged weights exact at twice the size. A full model exports
in the dtype it is stored in (its weights were trained in it). ``dtype="bfloat16"`` asks for the small export;
the choice and its reason are printed.

``push="org/name"`` uploads the folder with ``huggingface_hub``, authenticated by ``HF_TOKEN``. Everything that
can be checked before the merge is (offline mode, token, a Hub id for the base model, a license), so a refused
push costs no minutes of merging. An upload that fails after the export keeps the folder and says, in one line,
how to retry the upload alone (``medagentgym export --upload OUT --push ORG/NAME``).

Example:
    >>> export_model("runs/grpo_qwen7b", "artifacts/export/grpo_qwen7b", push="my-org/med-copilot-7b",
    ...              eval_reports=["runs/eval/grpo_qwen7b/report.json"])  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from medagentgym.medcopilot.config import ModelConfig
from medagentgym.medcopilot.modeling import adapter_base, load_model, load_tokenizer, save_pretrained_atomic

__all__ = ["ExportError", "export_dtype", "export_model", "hub_model_id", "model_card", "push_folder"]

#: Licenses of the Qwen2.5 models the recipes start from, as their Hub cards state them (November 2026): a
#: fine-tune keeps its base's license. Other bases need ``license=`` (``--license``) before they can be pushed.
BASE_LICENSES: dict[str, str] = {
    **{f"Qwen/Qwen2.5-{size}-Instruct": "apache-2.0" for size in ("0.5B", "1.5B", "7B", "14B", "32B")},
    **{f"Qwen/Qwen2.5-{size}": "apache-2.0" for size in ("0.5B", "1.5B", "7B", "14B", "32B")},
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")

_INTENDED_USE = """\
## Intended use

Research on tool-using language-model agents for biomedical data science: the model reads a question about a
database, a table or a code base, writes SQL, Python or shell code, reads the sandbox's output and submits one
answer. It is meant for benchmarking agents (e.g. with MedAgentGym's `medagentgym eval`), for further
fine-tuning and RL research, and for studying how such agents fail.

## Out-of-scope use

- **Not for clinical decisions.** Do not use it to diagnose, treat, triage, dose or advise patients, or for any
  decision about a real person's care. It is not a medical device and has not been validated clinically.
- Not for unsupervised analysis of real patient records: it never saw real patient data, and its answers on real
  data have not been measured.
- Do not run the code it writes outside an isolated sandbox (no network, read-only data, resource limits).
"""

_LIMITATIONS = """\
## Limitations and risks

- **Synthetic training data.** Every training task comes from MedAgentGym's generators: synthetic hospitals in
  the MIMIC-III / eICU schemas, synthetic studies and calculator inputs, with gold answers computed by reference
  solutions. No credentialed or real patient data was used. Success on these tasks does not show competence on
  real records, whose coding, missingness and errors differ.
- The evaluation numbers above are success rates under a strict oracle on a fixed, finite set of synthetic
  instances (see the episode counts); small sets give wide intervals, and they say nothing about safety.
- The model can write plausible code that is wrong, and answers that look precise but are not; medical
  calculators and cohort definitions are easy to get subtly wrong. Outputs must be checked by qualified people.
- Code it writes may be slow, destructive or try to reach the network: execute it only in a sandbox.
- It inherits the base model's limitations and biases, and was trained and evaluated in English only.
"""


class ExportError(RuntimeError):
    """Export or upload failed; the message is one line naming the cause and the fix."""


def export_model(run_dir: str | os.PathLike, out_dir: str | os.PathLike, *, push: str | None = None,
                 private: bool = True, base_model: str | None = None, license: str | None = None,
                 datasets: Iterable[str] = (), eval_reports: Iterable[str | os.PathLike] = (),
                 dtype: str | None = None) -> Path:
    """Write a merged, standalone HF model folder (plus model card) for a run; optionally push it.

    Args:
        run_dir: A run's ``output.dir`` (or any model / adapter folder).
        out_dir: Destination; replaced atomically if it exists.
        push: Hub repo id (``org/name``) to upload to, or None.
        private: Create the Hub repo as private (when it does not exist yet).
        base_model: Hub id of the model the run started from; default: the adapter's or recipe's base, when that
            is a Hub id (a run from a local folder needs this to be pushed).
        license: License id for the card (e.g. ``apache-2.0``); default: the base model's, when known.
        datasets: Hub dataset ids the model was trained on (e.g. trajectories you published), for the metadata.
        eval_reports: ``report.json`` files (or their folders) written by ``medagentgym eval --out``; they
            become the card's ``model-index`` and evaluation tables.
        dtype: Weights of the export: ``bfloat16``, ``float16``, ``float32`` or ``auto``; None:
            :func:`export_dtype` (float32 for a LoRA run, the stored dtype for a full model). The merge itself is
            always fp32. The choice is printed.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ExportError: Nothing loadable in ``run_dir``, an unreadable report, or the upload cannot happen (offline,
            no token, no Hub base model or license, or the Hub refused: then the export is kept).

    Example:
        >>> export_model("runs/sft_tiny", "artifacts/export/sft_tiny", base_model="Qwen/Qwen2.5-0.5B-Instruct")
    """
    src, out = Path(run_dir), Path(out_dir)
    if push is not None:
        _check_can_push(push)  # fail before minutes of merging, not after
    if base_model is not None and hub_model_id(base_model) is None:
        raise ExportError(f"base model {base_model!r} is not a Hub model id; pass it as org/name, "
                          f"e.g. Qwen/Qwen2.5-7B-Instruct")
    if not (src / "config.json").is_file() and adapter_base(src) is None:
        raise ExportError(f"{src} holds no model (config.json) and no LoRA adapter (adapter_config.json); "
                          f"pass a run's output.dir after training finished")
    recipe = _read_yaml(src / "recipe.yaml")
    base = base_model or adapter_base(src) or _base_from_recipe(recipe, src)
    card = model_card(src, base_model=base, repo=push, license=license, datasets=datasets,
                      eval_reports=eval_reports)
    if push is not None:
        _check_publishable(card, base)
    if dtype is not None and dtype not in ("auto", "bfloat16", "float16", "float32"):
        raise ExportError(f"dtype={dtype!r} is not a weight dtype; use bfloat16, float16, float32 or auto")
    dtype, why = export_dtype(src, dtype)
    print(f"[export] weights: {dtype} ({why})", flush=True)
    model = load_model(ModelConfig(name_or_path=str(src), dtype=dtype))
    tokenizer = load_tokenizer(str(src))
    save_pretrained_atomic(out, model, tokenizer, extra_files={"README.md": str(card)})
    if push is not None:
        push_folder(out, push, private=private)
    return out


def export_dtype(run_dir: str | os.PathLike, dtype: str | None = None) -> tuple[str, str]:
    """The dtype :func:`export_model` writes for ``run_dir`` and why: ``(dtype, reason)``.

    A LoRA adapter (merged into its base on export) defaults to ``float32``: the merge is exact there, while a
    bf16 export rounds away the part of the update below half a bf16 step of each weight. A full model keeps the
    dtype its ``config.json`` records (``auto`` when none is recorded). An explicit ``dtype`` is used as given.

    Example:
        >>> export_dtype("runs/grpo_qwen7b")  # doctest: +SKIP
        ('float32', 'a LoRA adapter merged in fp32 ...')
    """
    src = Path(run_dir)
    if dtype is not None:
        small = " (rounds away LoRA updates below half a bf16 step of each weight)" if (
            dtype in ("bfloat16", "float16") and adapter_base(src) is not None) else ""
        return dtype, f"as asked{small}"
    if adapter_base(src) is not None:
        return "float32", ("a LoRA adapter merged in fp32 and kept exact: bfloat16 would round away updates below half "
                           "a bf16 step of each weight; --dtype bfloat16 halves the size")
    config = _read_json(src / "config.json")
    stored = config.get("dtype") or config.get("torch_dtype")
    if stored in ("bfloat16", "float16", "float32"):
        return str(stored), "a full model, in the dtype it is stored in"
    return "auto", "a full model without a recorded dtype"


def hub_model_id(name_or_path: str) -> str | None:
    """``name_or_path`` when it names a Hub model (``org/name``, not an existing local folder), else None.

    Example:
        >>> hub_model_id("Qwen/Qwen2.5-7B-Instruct"), hub_model_id("/models/qwen")
        ('Qwen/Qwen2.5-7B-Instruct', None)
    """
    text = str(name_or_path)
    if not _HUB_ID.match(text) or Path(text).exists() or "--" in text or ".." in text:
        return None
    return text


def model_card(run_dir: str | os.PathLike, *, base_model: str, repo: str | None = None, license: str | None = None,
               datasets: Iterable[str] = (), eval_reports: Iterable[str | os.PathLike] = ()) -> Any:
    """The ``huggingface_hub.ModelCard`` of a run: metadata, training, evaluation, intended use, limitations.

    Args:
        run_dir: The run's output folder (``recipe.yaml``, ``run_summary.json``, ``trainer_state.json`` are read
            when present).
        base_model: What the run started from: a Hub id goes into the metadata; a local path only into the text.
        repo: The Hub repo id, for the title and the usage snippet.
        license: License id; default: the base model's from :data:`BASE_LICENSES`, else unset.
        datasets: Hub dataset ids for the metadata.
        eval_reports: ``medagentgym eval`` ``report.json`` files (or folders holding one).

    Returns:
        A ``ModelCard``; ``str(card)`` is the README.md text, ``card.data`` the metadata.

    Raises:
        ExportError: A report cannot be read or is not a medagentgym eval report.

    Example:
        >>> card = model_card("runs/sft_tiny", base_model="Qwen/Qwen2.5-0.5B-Instruct",
        ...                   eval_reports=["runs/eval/sft_tiny"])
        >>> card.data.eval_results[0].metric_value
    """
    from huggingface_hub import ModelCard, ModelCardData

    src = Path(run_dir)
    recipe = _read_yaml(src / "recipe.yaml")
    summary = _read_json(src / "run_summary.json")
    method = str(recipe.get("method", summary.get("method", "unknown")))
    reports = _load_reports(eval_reports)
    hub_base = hub_model_id(base_model)
    name = repo or src.name
    data = ModelCardData(
        model_name=name, base_model=hub_base, license=license or BASE_LICENSES.get(hub_base or ""),
        datasets=list(datasets) or None, language="en", library_name="transformers", pipeline_tag="text-generation",
        tags=["medical", "biomedical", "agent", "tool-use", "code", "medagentgym", "med-copilot",
              *(["trl"] if trainer_library(method) == "TRL" else []), method.lower()],
        eval_results=[r for report in reports for r in _eval_results(report)] or None,
    )
    base_text = f"`{hub_base}`" if hub_base else f"`{base_model}` (a local folder, not a Hub id)"
    body = [
        f"# {name}",
        "",
        f"Med-Copilot agent policy: {base_text} fine-tuned with {method.upper()} ({trainer_library(method)}) in "
        "MedAgentGym, a sandboxed",
        "environment of biomedical data-science tasks. It acts with Qwen2.5 `<tool_call>` messages: request",
        "information, run SQL / Python / shell code in a sandbox, debug, and submit one answer that an oracle grades.",
        "",
        f"- License: {data.license or 'not set; it must follow the base model: pass --license'}",
        "",
        _INTENDED_USE,
        _training_section(recipe, summary, _read_json(src / "trainer_state.json"), base_text),
        _evaluation_section(reports),
        _LIMITATIONS,
        _usage_section(name),
        "## Recipe",
        "",
        "```yaml",
        yaml.safe_dump(recipe, sort_keys=False).rstrip() if recipe else "# recipe.yaml not found in the run folder",
        "```",
        "",
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))


def push_folder(folder: str | os.PathLike, repo: str, *, private: bool = True) -> str:
    """Upload ``folder`` to the Hub model repo ``repo`` (created if missing); returns the commit URL.

    Raises:
        ExportError: Offline mode, no ``HF_TOKEN``, or the upload failed (one line: the Hub's reason, that the
            folder is kept, and the command that retries the upload alone).

    Example:
        >>> push_folder("artifacts/export/grpo_qwen7b", "my-org/med-copilot-7b")  # doctest: +SKIP
    """
    token = _check_can_push(repo)
    if not (Path(folder) / "config.json").is_file():
        raise ExportError(f"{folder} is not an exported model folder (no config.json); export first with "
                          f"medagentgym export RUN_DIR --out {folder}")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                                 commit_message="Upload Med-Copilot model")
    # Any failure at the network boundary (HTTP refusal, DNS, TLS, a dropped connection: their classes change
    # with huggingface_hub's transport) ends the same way: nothing was lost locally, so say how to retry.
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"upload to {repo} failed ({type(exc).__name__}: {first}); the export is kept in "
                          f"{folder}; retry the upload alone with: medagentgym export --upload {folder} "
                          f"--push {repo}") from exc
    return str(getattr(info, "commit_url", info))


def _check_can_push(repo: str) -> str:
    """Return the token to push with, or raise a one-line ExportError saying what to set."""
    if not _HUB_ID.match(repo):
        raise ExportError(f"push repo {repo!r} must be a Hub repo id of the form org/name")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ExportError(f"cannot push to {repo}: HF_HUB_OFFLINE is set; unset it (and set HF_TOKEN) to upload")
    token = os.environ.get("HF_TOKEN", "").strip()
    if not token:
        raise ExportError(f"cannot push to {repo}: HF_TOKEN is not set; export HF_TOKEN=<a write token> and retry")
    return token


def _check_publishable(card: Any, base_model: str) -> None:
    """A card going to the Hub names its base model by Hub id and carries a license."""
    if not card.data.base_model:
        raise ExportError(f"cannot push: the base model {base_model!r} is not a Hub id (a local folder?); "
                          f"pass --base-model ORG/NAME, the Hub model the run started from")
    if not card.data.license:
        raise ExportError(f"cannot push: no license for base model {card.data.base_model!r}; pass --license ID "
                          f"(the base model's license, e.g. apache-2.0)")


def trainer_library(method: str) -> str:
    """Who implements a recipe method's trainer, as the model card names it: ``"TRL"`` for SFT, DPO and GRPO
    (TRL's trainers), ``"in-house PPO"`` for PPO (``medagentgym.medcopilot.ppo``: TRL removed its PPOTrainer),
    ``"transformers Trainer"`` for the verifier.

    Example:
        >>> trainer_library("ppo")
        'in-house PPO'
    """
    return {"sft": "TRL", "dpo": "TRL", "grpo": "TRL", "ppo": "in-house PPO"}.get(method.lower(),
                                                                                 "transformers Trainer")


def _load_reports(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    paths = list(paths)
    if not paths:
        return []
    from medagentgym.env_client.evaluation import EvalError, load_reports

    try:
        return load_reports(paths)
    except EvalError as exc:
        raise ExportError(str(exc)) from exc


def _eval_results(report: dict[str, Any]) -> list[Any]:
    """``model-index`` entries of one report: success rate overall and per family (dataset config = family)."""
    from huggingface_hub import EvalResult

    meta = report.get("meta") or {}
    common = {"task_type": "text-generation", "task_name": "Agentic biomedical data science (MedAgentGym)",
              "dataset_type": "medagentgym", "dataset_split": meta.get("split"),
              "dataset_revision": meta.get("task_set")}  # the hash of the exact instances, when recorded
    size = f", {meta['size']} size" if meta.get("size") else ""
    families = sorted(report["per_family"])
    results = [EvalResult(**common, dataset_name=f"MedAgentGym, {len(families)} families{size}",
                          metric_type="accuracy", metric_name="success rate (oracle-graded)",
                          metric_value=round(float(report["success_rate"]), 4))]
    for family in families:
        results.append(EvalResult(**common, dataset_name=f"MedAgentGym {family}{size}", dataset_config=family,
                                  metric_type="accuracy", metric_name="success rate (oracle-graded)",
                                  metric_value=round(float(report["per_family"][family]["success_rate"]), 4)))
    return results


def _training_section(recipe: dict[str, Any], summary: dict[str, Any], state: dict[str, Any], base_text: str) -> str:
    tasks = recipe.get("tasks") or {}
    rollout = recipe.get("rollout") or {}
    metrics = dict(summary.get("metrics") or {})
    logs = [e for e in state.get("log_history", []) if "loss" in e]
    if logs:
        metrics.setdefault("final_logged_loss", logs[-1]["loss"])
    lines = [
        "## Training",
        "",
        f"- Base model: {base_text}",
        (f"- Method: {str(recipe.get('method', summary.get('method', 'unknown'))).upper()}; recipe "
         f"`{recipe.get('name') or 'unknown'}` (full resolved recipe at the end of this card)"),
        (f"- Data: MedAgentGym task families {', '.join(tasks.get('families') or []) or 'unknown'} "
         f"(split `{tasks.get('split', '?')}`, build size `{tasks.get('size', '?')}`), all synthetic; "
         f"trajectories: `{rollout.get('store') or 'online rollouts in the sandbox'}`; "
         f"training rows: {summary.get('train_rows', 'unknown')}"),
        f"- Steps: {summary.get('global_step', state.get('global_step', 'unknown'))}",
        "",
        "| metric (end of training) | value |",
        "|---|---|",
        *[f"| {k} | {_fmt(v)} |" for k, v in sorted(metrics.items())],
        "",
    ]
    return "\n".join(lines)


def _evaluation_section(reports: list[dict[str, Any]]) -> str:
    """Per report: the headline (with its 95 % interval when the report has one), a table per family, settings."""
    if not reports:
        return "## Evaluation\n\nNo evaluation report was attached (`medagentgym export --eval REPORT.json`).\n"
    lines = ["## Evaluation", "", "Success = the oracle graded the episode's single submitted answer correct.", ""]
    for report in reports:
        method = f", {report['ci_method']}" if report.get("ci_method") else ""
        overall = f" (95 % interval {_interval(report)}{method})" if _interval(report) else ""
        lines += [(f"**{report['policy']}**: {_pct(report['success_rate'])}{overall} over "
                   f"{report.get('episodes', '?')} episodes"), "",
                  "| family | episodes | success | 95 % interval | base rate |", "|---|---|---|---|---|"]
        for family, row in sorted(report["per_family"].items()):
            base = row.get("base_rate")
            lines.append(f"| {family} | {row.get('n', '?')} | {_pct(row['success_rate'])} | "
                         f"{_interval(row)} | {_pct(base) if base is not None else ''} |")
        lines += ["", "Settings:", ""]
        for key, value in sorted((report.get("meta") or {}).items()):
            text = value if isinstance(value, (str, int, float)) or value is None else json.dumps(value)
            lines.append(f"- {key}: `{str(text)[:200]}`")
        lines.append("")
    return "\n".join(lines)


def _interval(row: dict[str, Any]) -> str:
    """``"lo%-hi%"`` of a report row's ``ci95`` (reports written before intervals have none: ``""``)."""
    ci = row.get("ci95")
    return f"{_pct(ci[0])}-{_pct(ci[1])}" if ci and len(ci) == 2 else ""


def _usage_section(name: str) -> str:
    return "\n".join([
        "## How to use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        f'tok = AutoTokenizer.from_pretrained("{name}")',
        f'model = AutoModelForCausalLM.from_pretrained("{name}")',
        "```",
        "",
        "As an agent, run it in MedAgentGym (its code then runs in the bubblewrap sandbox):",
        f"`medagentgym eval --policy hf:{name} --families toy_sql`.",
        "",
    ])


def _base_from_recipe(recipe: dict[str, Any], src: Path) -> str:
    return str((recipe.get("model") or {}).get("name_or_path") or src)


def _read_yaml(path: Path) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _pct(value: Any) -> str:
    return f"{float(value):.1%}"
