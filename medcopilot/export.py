"""Export a trained run as a standalone Hugging Face model folder, with a model card, and optionally push it.

``export_model(run_dir, out_dir)`` loads what a run saved (a full model, or a LoRA adapter on its base model, which
is merged), writes model weights, tokenizer, chat template and generation config to ``out_dir``, and a
``README.md`` model card naming the base model, the recipe, the training data and the final metrics (from the run's
``recipe.yaml``, ``run_summary.json`` and ``trainer_state.json`` when present). The folder loads with
``AutoModelForCausalLM`` / ``AutoTokenizer`` and serves with vLLM as is.

``push="org/name"`` uploads the folder with ``huggingface_hub``, authenticated by ``HF_TOKEN``. Without network
(``HF_HUB_OFFLINE=1``) or without a token it stops with one line saying what to set; nothing is half-uploaded.

Example:
    >>> export_model("runs/sft_qwen7b", "artifacts/export/sft_qwen7b", push="my-org/med-copilot-7b")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from medcopilot.config import ModelConfig
from medcopilot.modeling import adapter_base, load_model, load_tokenizer, save_pretrained_atomic

__all__ = ["ExportError", "export_model", "model_card", "push_folder"]


class ExportError(RuntimeError):
    """Export or upload failed; the message is one line naming the cause and the fix."""


def export_model(run_dir: str | os.PathLike, out_dir: str | os.PathLike, *, push: str | None = None,
                 private: bool = True) -> Path:
    """Write a merged, standalone HF model folder (plus model card) for a run; optionally push it.

    Args:
        run_dir: A run's ``output.dir`` (or any model / adapter folder).
        out_dir: Destination; replaced atomically if it exists.
        push: Hub repo id (``org/name``) to upload to, or None.
        private: Create the Hub repo as private (when it does not exist yet).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ExportError: Nothing loadable in ``run_dir``, or the upload cannot happen (offline, no token, refused).
    """
    src, out = Path(run_dir), Path(out_dir)
    if push is not None:
        _check_can_push(push)  # fail before minutes of merging, not after
    if not (src / "config.json").is_file() and adapter_base(src) is None:
        raise ExportError(f"{src} holds no model (config.json) and no LoRA adapter (adapter_config.json); "
                          f"pass a run's output.dir after training finished")
    base = adapter_base(src)
    recipe = _read_yaml(src / "recipe.yaml")
    dtype = ((recipe.get("model") or {}).get("dtype")) or "auto"
    model = load_model(ModelConfig(name_or_path=str(src), dtype=dtype))
    tokenizer = load_tokenizer(str(src))

    card = model_card(src, base_model=base or _base_from_recipe(recipe, src), repo=push)
    save_pretrained_atomic(out, model, tokenizer, extra_files={"README.md": card})
    if push is not None:
        push_folder(out, push, private=private)
    return out


def model_card(run_dir: str | os.PathLike, *, base_model: str, repo: str | None = None) -> str:
    """Markdown model card for a run: base model, recipe, data and final metrics.

    Args:
        run_dir: The run's output folder (``recipe.yaml``, ``run_summary.json``, ``trainer_state.json`` are read
            when present).
        base_model: What the run started from.
        repo: The Hub repo id, for the title.
    """
    src = Path(run_dir)
    recipe = _read_yaml(src / "recipe.yaml")
    summary = _read_json(src / "run_summary.json")
    state = _read_json(src / "trainer_state.json")
    method = str(recipe.get("method", summary.get("method", "unknown"))).upper()
    tasks = recipe.get("tasks") or {}
    rollout = recipe.get("rollout") or {}
    metrics = dict(summary.get("metrics") or {})
    logs = [e for e in state.get("log_history", []) if "loss" in e]
    if logs:
        metrics.setdefault("final_logged_loss", logs[-1]["loss"])
    lines = [
        "---",
        f"base_model: {base_model}",
        "library_name: transformers",
        "tags: [med-copilot, medagentgym, trl, " + method.lower() + "]",
        "---",
        "",
        f"# {repo or src.name}",
        "",
        f"Med-Copilot policy trained with {method} (TRL) in MedAgentGym, a sandboxed environment of biomedical",
        "data-science tasks. It acts with Qwen2.5 `<tool_call>` messages (run code, query data, submit an answer).",
        "",
        "## Training",
        "",
        f"- Base model: `{base_model}`",
        f"- Recipe: `{recipe.get('name') or 'unknown'}` (full resolved recipe below)",
        f"- Task families: {', '.join(tasks.get('families') or []) or 'unknown'} (split `{tasks.get('split', '?')}`)",
        (f"- Trajectories: `{rollout.get('store') or 'online rollouts'}`; training rows: "
         f"{summary.get('train_rows', 'unknown')}"),
        f"- Steps: {summary.get('global_step', state.get('global_step', 'unknown'))}",
        "",
        "## Metrics (end of training)",
        "",
        "| metric | value |",
        "|---|---|",
        *[f"| {k} | {_fmt(v)} |" for k, v in sorted(metrics.items())],
        "",
        "## Recipe",
        "",
        "```yaml",
        yaml.safe_dump(recipe, sort_keys=False).rstrip() if recipe else "# recipe.yaml not found in the run folder",
        "```",
        "",
    ]
    return "\n".join(lines)


def push_folder(folder: str | os.PathLike, repo: str, *, private: bool = True) -> str:
    """Upload ``folder`` to the Hub model repo ``repo`` (created if missing); returns the commit URL.

    Raises:
        ExportError: Offline mode, no ``HF_TOKEN``, or the Hub refused (one line with the Hub's reason).
    """
    token = _check_can_push(repo)
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(token=token)
    try:
        api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                                 commit_message="Upload Med-Copilot model")
    except (HfHubHTTPError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"upload to {repo} failed: {first}") from exc
    return str(getattr(info, "commit_url", info))


def _check_can_push(repo: str) -> str:
    """Return the token to push with, or raise a one-line ExportError saying what to set."""
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ExportError(f"push repo {repo!r} must be a Hub repo id of the form org/name")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ExportError(f"cannot push to {repo}: HF_HUB_OFFLINE is set; unset it (and set HF_TOKEN) to upload")
    token = os.environ.get("HF_TOKEN", "").strip()
    if not token:
        raise ExportError(f"cannot push to {repo}: HF_TOKEN is not set; export HF_TOKEN=<a write token> and retry")
    return token


def _base_from_recipe(recipe: dict[str, Any], src: Path) -> str:
    return str((recipe.get("model") or {}).get("name_or_path") or src)


def _read_yaml(path: Path) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
