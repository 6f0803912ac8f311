"""Recipe configuration: one YAML file per run, mapped 1:1 onto :class:`RecipeConfig`.

A recipe has the sections ``method``, ``model``, ``tasks``, ``env``, ``rollout``, ``reward``, ``trainer`` and
``output``. Every field except those of ``trainer`` is declared (and documented) once, below. The ``trainer``
section is a plain mapping handed straight to TRL's ``SFTConfig`` / ``DPOConfig`` / ``GRPOConfig`` by
:meth:`RecipeConfig.trainer_args`, so TRL validates its own fields and we never re-declare them.

Loading is cheap (PyYAML only): ``load_recipe`` reads a bundled recipe by name (:data:`RECIPES_DIR`) or a YAML
file by path, applies dotted overrides such as ``trainer.max_steps=5`` (values are parsed as YAML: ``5`` is an
int, ``5e-4`` a float, ``null`` is None, ``[q, v]`` a list) and validates names, types and ranges. Every problem is one line of :class:`RecipeError` naming
the bad key or value, the nearest valid key and what to do.

Example:
    >>> cfg = load_recipe("sft_tiny", overrides=["trainer.max_steps=2", "model.lora=null"])
    >>> cfg.method, cfg.trainer["max_steps"], cfg.model.lora
    ('sft', 2, None)
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from medagentgym.tasks._files import FileFormatError, load_yaml
from medagentgym.tasks.builds import DEFAULT_SIZE

#: Folder of the bundled recipes, with ``accelerate/`` configs and ``sweeps/``: package data of ``medcopilot``, so
#: ``recipe=<name>`` works from any directory of an installed package; a clone also has it as ``recipes/`` (a link).
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
Method = Literal["sft", "dpo", "grpo", "ppo", "verifier"]
#: Config class per method: a TRL class name, or ``module:Class`` (the verifier's ``TrainingArguments``
#: subclass); ``ppo`` is trained in house and takes its ``trainer`` keys as they are.
TRL_CONFIG_CLASSES = {"sft": "SFTConfig", "dpo": "DPOConfig", "grpo": "GRPOConfig",
                      "verifier": "medagentgym.medcopilot.trainers.verifier:VerifierConfig"}


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, plus YAML 1.2 floats: ``5e-4`` is a float (YAML 1.1 would make it a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


class RecipeError(ValueError):
    """A recipe or override is invalid. The message is one line: what was wrong, the value, and the fix."""


@dataclass
class LoraSpec:
    """Low-rank adapters (peft ``LoraConfig``). Set ``model.lora: null`` for full fine-tuning."""

    r: int = 16  # adapter rank; 8-64 is typical for 7B-14B models
    alpha: int = 32  # scaling numerator (effective scale = alpha / r)
    dropout: float = 0.05  # dropout on the adapter input, in [0, 1)
    # Modules to adapt: "all-linear" (every linear layer except the LM head) or a list of module names.
    target_modules: str | list[str] = "all-linear"

    def __post_init__(self) -> None:
        _check(self.r >= 1, "model.lora.r", self.r, "a positive rank such as 16")
        _check(self.alpha >= 1, "model.lora.alpha", self.alpha, "a positive integer, usually 2 * r")
        _check(0.0 <= self.dropout < 1.0, "model.lora.dropout", self.dropout, "a value in [0, 1)")


@dataclass
class ModelConfig:
    """The policy model to start from."""

    # Hub id (e.g. "Qwen/Qwen2.5-7B-Instruct"), a local HF folder, or the output dir of an earlier run.
    # A folder holding only a LoRA adapter (adapter_config.json) is loaded on its base model and merged.
    name_or_path: str = ""
    lora: LoraSpec | None = None  # new LoRA adapters to train; null = train all weights
    # Weight dtype: "auto" = bfloat16 on a GPU, float32 on CPU (CPU bf16 matmuls are slow and lossy).
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    # Attention kernel passed to from_pretrained: "sdpa" (torch's, everywhere; null means the same), "eager", or
    # "flash_attention_2" (needs the `flash` extra, a CUDA GPU and bf16/fp16 weights); --dry-run refuses any other.
    attn_implementation: str | None = "sdpa"

    def __post_init__(self) -> None:
        _check(bool(self.name_or_path), "model.name_or_path", self.name_or_path,
               "a Hub id such as Qwen/Qwen2.5-7B-Instruct or a local model folder")


@dataclass
class MixtureConfig:
    """Each family's share of the training rows (:mod:`medagentgym.medcopilot.mixture`); without one, TRL's uniform sampling
    over rows gives each family its share of the rows."""

    # Relative weight per family (every family of tasks.families, each > 0); shares are weight / sum.
    weights: dict[str, float] | None = None
    # Or: shares proportional to rows ** (1 / temperature) (1 = natural sizes, larger = closer to uniform).
    temperature: float | None = None
    rows: int | None = None  # rows in one epoch of the resampled data; null = as many as there are

    def __post_init__(self) -> None:
        _check(self.weights is None or self.temperature is None, "tasks.mixture", "weights and temperature",
               "one of weights or temperature, not both")
        _check(self.weights is None or (bool(self.weights) and all(w > 0 for w in self.weights.values())),
               "tasks.mixture.weights", self.weights, "a positive weight per family, e.g. {mimic_iii: 1.0, eicu: 1.0}")
        _check(self.temperature is None or self.temperature > 0, "tasks.mixture.temperature", self.temperature,
               "a positive float such as 2.0")
        _check(self.rows is None or self.rows >= 1, "tasks.mixture.rows", self.rows, "a positive integer or null")


@dataclass
class TasksConfig:
    """Which task instances the run uses (built by the task registry under ``root``)."""

    root: str = "artifacts/tasks"  # folder the families were built into (see medagentgym build)
    families: list[str] = field(default_factory=lambda: ["toy_sql"])  # registered family names
    split: Literal["train", "test"] = "train"  # instances to train on
    # Build size: a build of another size under root is refused; families not built yet are built at it on start.
    # Default: medagentgym build's (tasks.builds.DEFAULT_SIZE, tiny); every bundled recipe names it.
    size: Literal["tiny", "default"] = DEFAULT_SIZE
    limit: int | None = None  # at most this many instances per family (null = all); for smoke runs
    mixture: MixtureConfig | None = None  # per-family sampling shares; null = uniform over rows

    def __post_init__(self) -> None:
        _check(len(self.families) > 0, "tasks.families", self.families, "a non-empty list such as [toy_sql]")
        _check(len(set(self.families)) == len(self.families), "tasks.families", self.families,
               "each family once (use tasks.mixture.weights to weight one more)")
        _check(self.limit is None or self.limit >= 1, "tasks.limit", self.limit, "a positive integer or null")
        weights = self.mixture.weights if self.mixture is not None else None
        if weights is not None and set(weights) != set(self.families):
            missing = sorted(set(self.families) - set(weights))
            extra = sorted(set(weights) - set(self.families))
            raise RecipeError(f"tasks.mixture.weights must weight exactly tasks.families: missing {missing}, not in "
                              f"tasks.families {extra}; add or remove those keys")


@dataclass
class EnvConfig:
    """How episodes run (multi-turn, code executed in the sandbox)."""

    max_turns: int | None = None  # assistant turns per episode; null = the family's registered default
    sandbox: Literal["bwrap", "docker", "local"] = "bwrap"  # executor backend; "local" has no isolation
    # "local" runs model-written code with your user's rights: refused unless this says so explicitly.
    allow_unisolated: bool = False
    workers: int = 2  # warm sandbox workers shared by concurrent episodes (in process; per server when remote)
    # Most sandbox workers: the pool grows past `workers` to the episodes in flight, up to this; null = half the
    # host's memory at medagentgym.sandbox.pool.WORKER_MB per worker (or $MEDAGENTGYM_SANDBOX_MAX_WORKERS).
    max_workers: int | None = None
    # Env servers (medagentgym serve) that run the episodes instead of this process: one URL or a list,
    # used round-robin with health checks and retry (medagentgym.env_client.http_client.EnvServers); null = in process.
    # A server started with --token needs MEDAGENTGYM_ENV_TOKEN set to the same token.
    url: str | list[str] | None = None

    def __post_init__(self) -> None:
        _check(self.max_turns is None or self.max_turns >= 1, "env.max_turns", self.max_turns, "an integer >= 1")
        _check(self.workers >= 1, "env.workers", self.workers, "an integer >= 1")
        _check(self.max_workers is None or self.max_workers >= 1, "env.max_workers", self.max_workers,
               "an integer >= 1, or null for the cap derived from memory")
        if self.sandbox == "local" and not self.allow_unisolated:
            raise RecipeError("env.sandbox=local runs model-written code WITHOUT isolation (with your user's rights); "
                              "use env.sandbox=bwrap, or accept it explicitly with env.allow_unisolated=true")
        for i, url in enumerate(self.urls):
            _check(url.startswith(("http://", "https://")) and len(url) > 8, f"env.url[{i}]", url,
                   "an http(s)://host:port URL of medagentgym serve")
        _check(len(set(self.urls)) == len(self.urls), "env.url", self.url, "each server once")

    def isolation(self) -> str:
        """One line saying how model-written code is isolated in this run (``train.py --dry-run`` prints it)."""
        if self.urls:
            return f"isolation: episodes run on env servers {', '.join(self.urls)} (their sandbox isolates the code)"
        if self.sandbox == "local":
            return ("isolation: NONE (env.sandbox=local, env.allow_unisolated=true): model-written code runs "
                    "unsandboxed with this user's rights")
        return (f"isolation: {self.sandbox} jail (namespaces, read-only root, unprivileged uid, seccomp, rlimits; "
                f"the pool lists its layers when it starts and fails rather than run unisolated)")

    @property
    def urls(self) -> list[str]:
        """``url`` as a list (empty: episodes run in this process)."""
        if self.url is None:
            return []
        return [self.url] if isinstance(self.url, str) else list(self.url)


@dataclass
class RolloutConfig:
    """How trajectories are produced (GRPO/PPO online; SFT/DPO offline, into ``store``)."""

    # Policy spec for medagentgym.env_client.policies.make_policy: "oracle", "hf:PATH", "openai:MODEL", "constant:0", ...
    # SFT/DPO store generation may join several with "+" (e.g. "oracle+constant:0": successes and failures).
    policy: str = "oracle"
    k: int = 1  # episodes per task instance (GRPO: the group size is trainer.num_generations)
    concurrency: int = 4  # episodes in flight at once
    backend: Literal["transformers", "vllm"] = "transformers"  # generation engine for the trained policy
    # Trajectory JSONL store: SFT/DPO read it, and write it first (with `policy`) when it does not exist yet.
    store: str | None = None
    temperature: float = 1.0  # sampling temperature for the policy's turns
    max_new_tokens: int = 512  # per assistant turn
    # GRPO/PPO stop (one line) when more than this share of the last 256 episodes failed for infrastructure reasons
    # (reward None: sandbox, env servers, task data); episodes the policy breaks are wrong answers and never count.
    max_infra_failure_share: float = 0.25

    def __post_init__(self) -> None:
        _check(self.k >= 1, "rollout.k", self.k, "an integer >= 1")
        _check(self.concurrency >= 1, "rollout.concurrency", self.concurrency, "an integer >= 1")
        _check(self.temperature >= 0, "rollout.temperature", self.temperature, "a non-negative float")
        _check(self.max_new_tokens >= 1, "rollout.max_new_tokens", self.max_new_tokens, "an integer >= 1")
        _check(0 < self.max_infra_failure_share <= 1, "rollout.max_infra_failure_share", self.max_infra_failure_share,
               "a share in (0, 1]")


@dataclass
class RewardConfig:
    """How verdicts become scalar rewards. Weight 0 means "log it, don't train on it"."""

    weights: dict[str, float] = field(default_factory=lambda: {"correctness": 1.0})  # reward name -> weight
    # Learned verifier for the verifier_score term (GRPO): a trained verifier folder (scored in the trainer's
    # process) or the http(s):// URL of medagentgym serve-verifier (a failed call makes the term missing).
    verifier: str | None = None

    def __post_init__(self) -> None:
        from medagentgym.rewards import REWARD_FUNCS

        for name in self.weights:
            if name not in REWARD_FUNCS:
                raise RecipeError(f"unknown reward term reward.weights.{name}: {_did_you_mean(str(name), REWARD_FUNCS)}"
                                  f"known terms: {', '.join(sorted(REWARD_FUNCS))}")
        bad = {k: v for k, v in self.weights.items() if v < 0}
        _check(not bad, "reward.weights", bad, "non-negative weights (0 logs a component without training on it)")
        _check(self.verifier is None or bool(self.verifier.strip()), "reward.verifier", self.verifier,
               "a trained verifier folder, an http(s):// URL, or null")


@dataclass
class OutputConfig:
    """Where the run writes, and where it publishes."""

    dir: str = ""  # checkpoints, recipe.yaml, metrics and the final model; empty = runs/<recipe name>
    push_to_hub: str | None = None  # Hub repo id ("org/name") to upload the final model to; null = don't

    def __post_init__(self) -> None:
        _check(self.push_to_hub is None or self.push_to_hub.count("/") == 1, "output.push_to_hub",
               self.push_to_hub, "a repo id of the form org/name, or null")


@dataclass
class RecipeConfig:
    """One training run. Sections mirror the recipe YAML; ``trainer`` goes to TRL unchanged.

    Example:
        >>> cfg = RecipeConfig.from_dict({"method": "sft", "model": {"name_or_path": "artifacts/tiny-qwen2"}})
        >>> cfg.output.dir
        'runs/sft'
    """

    method: Method = "sft"  # trainer module to run: medagentgym.medcopilot.trainers.<method>
    model: ModelConfig = field(default_factory=ModelConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    # Fields of TRL's SFTConfig / DPOConfig / GRPOConfig (learning_rate, max_steps, ...). Checked by trainer_args().
    trainer: dict[str, Any] = field(default_factory=dict)
    output: OutputConfig = field(default_factory=OutputConfig)
    name: str = ""  # recipe name (file stem); set by load_recipe, used for the default output dir

    def __post_init__(self) -> None:
        if "output_dir" in self.trainer:
            raise RecipeError(f"trainer.output_dir={self.trainer['output_dir']!r} is not used: set output.dir instead")
        if not self.output.dir:
            self.output.dir = f"runs/{self.name or self.method}"

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, name: str = "") -> RecipeConfig:
        """Build and validate a recipe from a plain mapping (as read from YAML).

        Raises:
            RecipeError: On an unknown key (naming the nearest valid one), a wrong type or a bad value.
        """
        if not isinstance(data, dict):
            raise RecipeError(f"a recipe must be a mapping of sections, got {type(data).__name__}: {data!r:.80}")
        data = dict(data)
        data.setdefault("name", name)
        return _build(cls, data, "")

    def to_dict(self) -> dict[str, Any]:
        """The resolved recipe as plain data (what ``recipe.yaml`` holds)."""
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        """The resolved recipe as YAML, sections in declaration order."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)

    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the resolved recipe atomically (default ``<output.dir>/recipe.yaml``) and return its path."""
        target = Path(path) if path is not None else Path(self.output.dir) / "recipe.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(self.to_yaml(), encoding="utf-8")
        os.replace(tmp, target)
        return target

    def trainer_args(self, **extra: Any) -> Any:
        """Build TRL's config object for this method from ``trainer`` (plus ``extra`` set by the trainer module).

        Sets ``output_dir`` from ``output.dir`` and picks the device precision unless the recipe did: bf16 on a
        GPU, ``use_cpu=True`` and fp32 on CPU. Imports TRL (a few seconds); loads no model.

        Args:
            **extra: Keys the trainer module fixes itself (e.g. ``assistant_only_loss=True``); recipe keys win.

        Returns:
            A ``trl.SFTConfig`` / ``DPOConfig`` / ``GRPOConfig``, or the verifier's ``VerifierConfig`` (a
            ``transformers.TrainingArguments`` subclass, :mod:`medagentgym.medcopilot.trainers.verifier`).

        Raises:
            RecipeError: On a key TRL's config does not have (naming the nearest one) or a value TRL rejects.
        """
        if self.method not in TRL_CONFIG_CLASSES:
            raise RecipeError(f"method={self.method!r} has no TRL config; trainer_args() serves "
                              f"{', '.join(TRL_CONFIG_CLASSES)}")
        import importlib

        import torch

        module, _, cls_name = TRL_CONFIG_CLASSES[self.method].rpartition(":")
        cls = getattr(importlib.import_module(module or "trl"), cls_name)
        where = f"{module or 'trl'}.{cls.__name__}"
        valid = [f.name for f in dataclasses.fields(cls) if f.init]
        trainer = _renamed_keys(self.trainer, valid)
        extra = _renamed_keys(extra, valid)
        for key in trainer:
            if key not in valid:
                raise RecipeError(_unknown_key(f"trainer.{key}", key, valid, f"fields of {where}"))
        kwargs: dict[str, Any] = {**extra, **_typed_trainer(cls, trainer, where), "output_dir": self.output.dir}
        if torch.cuda.is_available():
            kwargs.setdefault("bf16", self.model.dtype in ("auto", "bfloat16"))
            kwargs.setdefault("fp16", self.model.dtype == "float16")
        else:
            kwargs.setdefault("use_cpu", True)
            kwargs.setdefault("bf16", False)
        try:
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RecipeError(f"{where} rejected the trainer section: {first}") from exc


def check_recipe(cfg: RecipeConfig, *, base_model: str | None = None, notes: list[str] | None = None) -> Any:
    """Everything that can be checked without loading a model: what ``train.py --dry-run`` runs.

    Family names must be registered or declared by a ``family.yaml`` under ``tasks.root``; reward terms were
    checked when the recipe was built; the ``trainer`` section is built into its config object (TRL's config
    class, the verifier's ``VerifierConfig``, or PPO's ``PPOArgs`` with its cross-section checks), each value
    checked against the type its field declares; then :func:`medagentgym.medcopilot.recipe_checks.check_runnable` refuses
    what cannot run as configured (an attention kernel no extra installs, a vLLM stage without a full model to
    start from, memory settings that cannot hold one sequence or do not fit the GPU).

    Args:
        cfg: A recipe from :func:`load_recipe` or :meth:`RecipeConfig.from_dict`.
        base_model: For a sweep stage whose ``model.name_or_path`` an earlier stage will write: the full model
            at the root of the chain (its shape and vLLM's starting point).
        notes: When given, lines describing the mixture and the checks are appended (``--dry-run`` prints them).

    Returns:
        The trainer's config object.

    Raises:
        RecipeError: One line naming the bad key or value, the nearest valid one and the fix.

    Example:
        >>> check_recipe(load_recipe("ppo_tiny", ["trainer.max_steps=2"])).max_steps
        2
    """
    from medagentgym.medcopilot.recipe_checks import check_runnable
    from medagentgym.tasks.base import UnknownTask
    from medagentgym.tasks.registry import spec

    for i, name in enumerate(cfg.tasks.families):
        try:
            spec(name, root=cfg.tasks.root)
        except UnknownTask as exc:
            raise RecipeError(f"tasks.families[{i}]={name!r}: {exc} (families are registered in medagentgym/tasks/registry.py "
                              f"or declared by {cfg.tasks.root}/<name>/family.yaml)") from None
    if cfg.method == "ppo":
        from medagentgym.medcopilot.trainers.ppo import ppo_args

        args = ppo_args(cfg)
    else:
        args = cfg.trainer_args()
    found = check_runnable(cfg, args, base_model=base_model)
    if notes is not None:
        notes.extend(found)
    return args


def load_recipe(recipe: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> RecipeConfig:
    """Read a recipe by name (``<RECIPES_DIR>/<name>.yaml``) or path, apply dotted overrides, validate.

    Args:
        recipe: A bundled recipe name such as ``"sft_tiny"``, or a path to a YAML file.
        overrides: ``"a.b=c"`` strings applied in order; values are parsed as YAML.

    Returns:
        The validated :class:`RecipeConfig`.

    Raises:
        RecipeError: Missing file (naming it and the bundled recipes), bad YAML, bad override, or invalid content.
    """
    path = resolve_recipe_path(recipe)
    try:
        data = load_yaml(path, loader=_Loader) or {}
    except FileFormatError as exc:
        raise RecipeError(str(exc)) from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path} must be a mapping of sections (method, model, ...), got {type(data).__name__}")
    for item in overrides:
        apply_override(data, item)
    return RecipeConfig.from_dict(data, name=path.stem)


def resolve_recipe_path(recipe: str | os.PathLike) -> Path:
    """Map a recipe name or path to an existing file; a missing one names the nearest bundled recipe."""
    text = str(recipe)
    candidates = [Path(text)] if text.endswith((".yaml", ".yml")) or os.sep in text else []
    candidates.append(RECIPES_DIR / f"{text}.yaml")
    for path in candidates:
        if path.is_file():
            return path
    names = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
    near = difflib.get_close_matches(Path(text).stem, names, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise RecipeError(f"recipe {text!r} not found (looked for {', '.join(map(str, candidates))}); {hint}"
                      f"bundled recipes: {', '.join(names) or 'none'}")


def apply_override(data: dict[str, Any], item: str) -> None:
    """Apply one ``a.b.c=value`` override to a raw recipe mapping in place (value parsed as YAML).

    Intermediate sections are created as needed, so ``model.lora.r=8`` works when the recipe had ``lora: null``.
    Key names are validated later, by :meth:`RecipeConfig.from_dict`.

    Raises:
        RecipeError: If ``item`` is not ``key=value`` or walks into a non-mapping value.
    """
    key, sep, raw = item.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        raise RecipeError(f"override {item!r} is not of the form section.key=value (e.g. trainer.max_steps=5)")
    try:
        value = _yaml_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # not YAML (e.g. an unbalanced bracket in a path): keep the text as given
    parts = key.strip().split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise RecipeError(f"override {item!r}: {where} is {child!r}, not a section; set {where}=<value> instead")
        node = child
    node[parts[-1]] = value


# --- validation -------------------------------------------------------------------------------------------------


#: Trainer keys transformers renamed, new name -> old name. Recipes use the new names; the GPU stack's
#: transformers (5.17, pinned by vLLM 0.31 in constraints-gpu.txt) still has the old ones.
RENAMED_TRAINER_KEYS = {"activation_checkpointing": "gradient_checkpointing",
                        "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs"}


def _renamed_keys(trainer: dict[str, Any], valid: list[str]) -> dict[str, Any]:
    """``trainer`` with each renamed key under the name the installed config class declares."""
    out = dict(trainer)
    for new, old in RENAMED_TRAINER_KEYS.items():
        if new in out and new not in valid and old in valid and old not in out:
            out[old] = out.pop(new)
    return out


def _check(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise RecipeError(f"{key}={value!r} is invalid: expected {expected}")


def _did_you_mean(key: str, valid: Iterable[str]) -> str:
    near = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return f"did you mean {near[0]!r}? " if near else ""


def _unknown_key(dotted: str, key: str, valid: list[str], what: str) -> str:
    hint = _did_you_mean(key, valid)
    shown = ", ".join(valid) if len(valid) <= 20 else f"the {len(valid)} {what}"
    return f"unknown key {dotted!r}: {hint}valid keys: {shown}"


def _typed_trainer(cls: type, trainer: dict[str, Any], where: str) -> dict[str, Any]:
    """Check each ``trainer`` value against the type ``cls`` declares for it (TRL's dataclasses do not check)."""
    from pydantic import ConfigDict, TypeAdapter, ValidationError

    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: leave the checking to the class itself
        hints = {}
    checked = {}
    for key, value in trainer.items():
        checked[key] = value
        if key not in hints:
            continue
        try:
            adapter = TypeAdapter(hints[key], config=ConfigDict(arbitrary_types_allowed=True))
        except Exception:  # noqa: BLE001, S112 - a type pydantic cannot describe: the class checks it itself
            continue
        try:
            checked[key] = adapter.validate_python(value)
        except ValidationError as exc:
            why = exc.errors()[0]["msg"]
            raise RecipeError(f"trainer.{key}={value!r} has the wrong type: {where} expects "
                              f"{_type_name(hints[key])} ({why}); set e.g. trainer.{key}="
                              f"{_example(cls, key)}") from None
    return checked


def _example(cls: type, key: str) -> str:
    default = next((f.default for f in dataclasses.fields(cls) if f.name == key), None)
    if default is dataclasses.MISSING or default is None:
        return "<value>"
    return yaml.safe_dump(getattr(default, "value", default), default_flow_style=True).strip().removesuffix(
        "...").strip()


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    """Construct dataclass ``cls`` from ``data``, checking keys and types field by field."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            raise RecipeError(_unknown_key(dotted, str(key), names, f"{cls.__name__} fields"))
        kwargs[key] = _coerce(hints[key], value, dotted)
    try:
        return cls(**kwargs)
    except RecipeError:
        raise
    except (TypeError, ValueError) as exc:  # a dataclass missing a required field
        raise RecipeError(f"{prefix or 'recipe'}: {exc}") from exc


def _coerce(tp: Any, value: Any, key: str) -> Any:
    """Check ``value`` against annotation ``tp``; build nested dataclasses; ints are accepted as floats."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, key)
            except RecipeError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise RecipeError(f"{key}={value!r} has the wrong type: expected {_type_name(tp)}")
    if origin is Literal:
        if value not in args:
            near = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise RecipeError(f"{key}={value!r} is not allowed: {hint}choose one of {', '.join(map(str, args))}")
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecipeError(f"{key}={value!r} must be a section (a mapping of {tp.__name__} fields)")
        return _build(tp, value, f"{key}.")
    if origin is list:
        if not isinstance(value, list):
            raise RecipeError(f"{key}={value!r} has the wrong type: expected a list of {_type_name(args[0])}")
        return [_coerce(args[0], v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"{key}={value!r} has the wrong type: expected a mapping")
        return {_coerce(args[0], k, key): _coerce(args[1], v, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        raise RecipeError(f"{key}={value!r} has the wrong type: expected {_type_name(tp)}, got {type(value).__name__}")
    return value


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


__all__ = [
    "EnvConfig",
    "LoraSpec",
    "ModelConfig",
    "OutputConfig",
    "RecipeConfig",
    "RecipeError",
    "RewardConfig",
    "RolloutConfig",
    "TasksConfig",
    "check_recipe",
    "load_recipe",
]
