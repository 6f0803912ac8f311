"""PPO for multi-turn episodes: the ``trainer`` section, the policy + value head module and the loss math.

Pure tensor code with no rollout or file I/O, so every piece is unit-tested by hand
(``tests/medcopilot/test_ppo.py``); :mod:`medagentgym.medcopilot.trainers.ppo` runs the loop.

Shapes. An episode's completion is C tokens after its prompt: model tokens and environment tokens
(``env_mask`` 1 / 0, exactly as :mod:`medagentgym.env_client.tokens` built them). A batch pads completions on the right to
``(B, C)``; every per-token tensor below is ``(B, C)`` and ``mask`` is the assistant mask (1 = a token the model
sampled and is trained on; 0 = environment token or padding).

Choices, and why:

- **Critic**: a value head (one ``nn.Linear(hidden, 1)``) on the policy's last hidden state, sharing the trunk
  (and the LoRA adapters) with the policy. One 14B model in memory instead of two; the head starts at zero, so
  the value loss sends no gradient into the trunk until the head has learnt something.
- **Rewards per token**: ``-kl_coef * kl_t`` on every assistant token, plus the episode's scalar reward on its
  last assistant token. ``kl_t`` compares the sampling policy (its old logprobs) with the reference model:
  ``k1 = logp - ref_logp`` or ``k3 = exp(ref - logp) - 1 - (ref - logp)`` (Schulman's estimators).
- **GAE over assistant tokens only**: environment tokens are skipped, as if the assistant's tokens were one
  contiguous sequence. The value and advantage of the assistant token just before an observation bootstrap
  from the first assistant token after it; an environment token's value, reward, advantage and return are
  never read and come out as 0. The observation still shapes the critic through the hidden states of the next
  turn, so nothing about the environment is lost: it only takes no decisions, hence no credit.
- **Losses**: PPO's clipped surrogate and clipped value loss (both token means over assistant tokens), an
  optional entropy bonus, advantages whitened over the batch's assistant tokens.
- **KL control**: fixed ``kl_coef``, or Ziegler et al.'s (2019) adaptive controller towards ``target_kl``
  (per-episode summed KL).

Example:
    >>> import torch
    >>> adv, ret = gae(torch.tensor([[0., 1.]]), torch.tensor([[0., 0.]]), torch.tensor([[1., 1.]]), 1.0, 1.0)
    >>> adv.tolist(), ret.tolist()
    ([[1.0, 1.0]], [[1.0, 1.0]])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from medagentgym.medcopilot.config import RecipeError, _build

__all__ = [
    "AdaptiveKLController",
    "FixedKLController",
    "PPOArgs",
    "PolicyWithValue",
    "collate_rows",
    "completion_logprobs",
    "disable_dropout",
    "gae",
    "kl_estimate",
    "make_kl_controller",
    "masked_mean",
    "masked_whiten",
    "policy_loss",
    "token_rewards",
    "value_loss",
]


@dataclass
class PPOArgs:
    """The ``trainer`` section of a ``method: ppo`` recipe (PPO is trained in house, so it is declared here).

    Counts of episodes are per process; with N processes a step rolls out N times ``rollout_batch_size``.
    """

    max_steps: int = 100  # PPO steps; one step = one rollout batch + ppo_epochs passes over it
    rollout_batch_size: int = 8  # episodes per step (rollout.k episodes for each of rollout_batch_size/k tasks)
    mini_batch_size: int = 8  # episodes per optimizer step; must divide rollout_batch_size
    micro_batch_size: int = 1  # episodes per forward/backward (gradient accumulation); must divide mini_batch_size
    ppo_epochs: int = 4  # passes over each rollout batch
    learning_rate: float = 1.0e-5  # AdamW, policy parameters (all weights, or the LoRA adapters)
    value_head_learning_rate: float | None = None  # AdamW for the value head; null = learning_rate
    lr_scheduler_type: Literal["constant", "constant_with_warmup", "linear", "cosine"] = "constant"
    warmup_steps: int = 0  # PPO steps of linear warm-up (schedules "*_with_warmup", "linear", "cosine")
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # clip the global gradient norm per optimizer step; 0 = no clipping
    gamma: float = 1.0  # discount per assistant token (environment tokens are not counted)
    lam: float = 0.95  # GAE lambda; 1 = Monte-Carlo returns with the value as a baseline
    cliprange: float = 0.2  # policy ratio clip epsilon
    cliprange_value: float = 0.2  # value clip around the rollout's value (same units as the reward)
    vf_coef: float = 0.1  # weight of the value loss in the total loss
    ent_coef: float = 0.0  # entropy bonus weight; 0 logs the entropy without training on it
    kl_coef: float = 0.05  # initial KL penalty coefficient (beta); 0 = no reference model is loaded
    kl_estimator: Literal["k1", "k3"] = "k1"  # per-token KL estimate in the reward
    target_kl: float | None = None  # adaptive controller's target (summed KL per episode); null = fixed kl_coef
    kl_horizon: int = 10000  # adaptive controller horizon, in episodes
    whiten_advantages: bool = True  # normalise advantages over the batch's assistant tokens
    max_completion_length: int | None = 1024  # tokens per episode after the prompt (model + env); null = no cap
    activation_checkpointing: bool = False  # recompute activations in backward (needed for 14B-size models)
    logging_steps: int = 1  # average and log metrics every this many steps
    save_steps: int = 0  # write checkpoint-<step> every this many steps; 0 = no checkpoints, only the final save
    save_total_limit: int | None = None  # keep at most this many checkpoints (oldest deleted); null = all
    report_to: list[str] = field(default_factory=list)  # [] or [wandb] (wandb honours WANDB_MODE/PROJECT)
    seed: int = 0  # model init, data order and rollout sampling
    resume_from_checkpoint: str | None = None  # a checkpoint folder; null = the newest under output.dir

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, expected: str) -> None:
            if not ok:
                raise RecipeError(f"trainer.{key}={getattr(self, key)!r} is invalid: expected {expected}")

        for key in ("max_steps", "rollout_batch_size", "mini_batch_size", "micro_batch_size", "ppo_epochs",
                    "logging_steps", "kl_horizon"):
            check(getattr(self, key) >= 1, key, "an integer >= 1")
        check(self.rollout_batch_size % self.mini_batch_size == 0, "mini_batch_size",
              f"a divisor of trainer.rollout_batch_size={self.rollout_batch_size}")
        check(self.mini_batch_size % self.micro_batch_size == 0, "micro_batch_size",
              f"a divisor of trainer.mini_batch_size={self.mini_batch_size}")
        check(self.learning_rate > 0, "learning_rate", "a positive float such as 1e-5")
        check(self.value_head_learning_rate is None or self.value_head_learning_rate > 0, "value_head_learning_rate",
              "a positive float or null")
        check(0 < self.gamma <= 1, "gamma", "a value in (0, 1]")
        check(0 <= self.lam <= 1, "lam", "a value in [0, 1]")
        check(self.cliprange > 0, "cliprange", "a positive float such as 0.2")
        check(self.cliprange_value > 0, "cliprange_value", "a positive float such as 0.2")
        for key in ("vf_coef", "ent_coef", "kl_coef", "weight_decay", "max_grad_norm", "warmup_steps", "save_steps"):
            check(getattr(self, key) >= 0, key, "a non-negative number")
        check(self.target_kl is None or self.target_kl > 0, "target_kl", "a positive float or null (fixed kl_coef)")
        check(self.target_kl is None or self.kl_coef > 0, "kl_coef",
              "a positive starting value when trainer.target_kl is set (the controller scales it)")
        check(self.max_completion_length is None or self.max_completion_length >= 1, "max_completion_length",
              "an integer >= 1 or null")
        check(self.save_total_limit is None or self.save_total_limit >= 1, "save_total_limit",
              "an integer >= 1 or null")
        unknown = [r for r in self.report_to if r not in ("wandb", "none")]
        check(not unknown, "report_to", "[] or [wandb]")
        self.report_to = [r for r in self.report_to if r != "none"]

    @classmethod
    def from_trainer(cls, trainer: dict[str, Any]) -> PPOArgs:
        """Validate a recipe's ``trainer`` mapping (unknown keys name the nearest valid one).

        Raises:
            RecipeError: One line naming the bad key or value and what to set instead.
        """
        return _build(cls, dict(trainer), "trainer.")


# --- the model ---------------------------------------------------------------------------------------------------


class PolicyWithValue(nn.Module):
    """A causal LM (optionally a peft ``PeftModel``) plus a scalar value head on its last hidden state.

    One forward gives, for the completion part of each row, the log-probability of every next token under the
    temperature-scaled policy, the value of the state before it and the policy's entropy there. Rows are laid
    out with the prompt left-padded and the completion right-padded, so every row's completion starts at the same
    column ``start`` (see :func:`collate_rows`).

    Args:
        policy: A ``transformers`` causal LM or a ``PeftModel`` around one.
        hidden_size: Width of the LM's last hidden state (``config.hidden_size``).
    """

    def __init__(self, policy: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.policy = policy
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)  # values start at 0: no value gradient into the trunk at first
        nn.init.zeros_(self.value_head.bias)

    def lm(self) -> nn.Module:
        """The ``transformers`` model (LoRA layers, if any, are injected into it)."""
        return self.policy.get_base_model() if hasattr(self.policy, "get_base_model") else self.policy

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                start: int, temperature: float = 1.0, entropy_grad: bool = False,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-token logprobs, values and entropies of the completion columns ``start:``.

        Args:
            input_ids: ``(B, W)`` prompt (left-padded) + completion (right-padded) ids.
            attention_mask: ``(B, W)``, 0 on padding.
            position_ids: ``(B, W)``, counting from each row's first real token.
            start: Column of the first completion token (the same for every row).
            temperature: Logits are divided by it (the sampling distribution).
            entropy_grad: Keep the entropy in the graph (an entropy bonus); otherwise it is a logged statistic
                and costs no activation memory.

        Returns:
            ``(logprobs, values, entropy)``, each ``(B, W - start)`` float32.
        """
        state, logprobs, entropy = completion_logprobs(self.lm(), input_ids, attention_mask, position_ids, start,
                                                       temperature, entropy_grad=entropy_grad)
        return logprobs, self.value_head(state.float()).squeeze(-1), entropy


def completion_logprobs(lm: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        position_ids: torch.Tensor, start: int, temperature: float = 1.0, *,
                        entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run a ``transformers`` causal LM and score the completion columns (see :meth:`PolicyWithValue.forward`).

    Only the completion columns go through the LM head, so the prompt costs no ``(W, vocab)`` logits.

    Returns:
        ``(states, logprobs, entropy)``: the last hidden state each completion token was sampled in
        ``(B, W - start, hidden)``, and ``(B, W - start)`` float32 logprobs and entropies.
    """
    hidden = lm.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              use_cache=False).last_hidden_state
    states = hidden[:, start - 1:-1]
    logits = lm.get_output_embeddings()(states).float() / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, input_ids[:, start:, None]).squeeze(-1) - logz
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return states, logprobs, entropy


def collate_rows(prompts: list[list[int]], completions: list[list[int]],
                 pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Lay episodes out for one forward: prompts left-padded, completions right-padded.

    Every row's completion then starts at the same column, so per-token tensors of the completions line up as
    ``(B, C)`` with column 0 = first completion token. Position ids count from each row's first real token, so
    a padded row is computed exactly as it was alone (tests check this against the sampling logprobs).

    Example:
        >>> ids, attention, positions, start = collate_rows([[1, 2], [3]], [[4], [5, 6]], pad_id=0)
        >>> ids.tolist(), start
        ([[1, 2, 4, 0], [0, 3, 5, 6]], 2)

    Returns:
        ``(input_ids, attention_mask, position_ids, start)``: ``(B, P + C)`` tensors where ``P`` and ``C`` are
        the longest prompt and completion, and ``start = P`` is the column of every row's first completion token.
    """
    width_p, width_c = max(map(len, prompts)), max(map(len, completions))
    ids = torch.full((len(prompts), width_p + width_c), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        ids[i, width_p - len(prompt):width_p] = torch.tensor(prompt, dtype=torch.long)
        ids[i, width_p:width_p + len(completion)] = torch.tensor(completion, dtype=torch.long)
        attention[i, width_p - len(prompt):width_p + len(completion)] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return ids, attention, positions, width_p


def disable_dropout(model: nn.Module) -> None:
    """Set every dropout probability to 0, so the first PPO epoch's ratio is exactly 1 (as TRL's PPO did)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


# --- the math ----------------------------------------------------------------------------------------------------


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1; 0 when the mask is empty."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / std`` over the masked positions; masked-out positions come back as 0."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled tokens' logprobs.

    ``k1 = logp - ref`` is unbiased but can be negative per token; ``k3 = exp(ref - logp) - 1 - (ref - logp)``
    is unbiased and never negative, with lower variance when the two policies are close.
    """
    diff = logprobs - ref_logprobs
    if kind == "k1":
        return diff
    if kind == "k3":
        return torch.expm1(-diff) + diff
    raise ValueError(f"kl estimator {kind!r} is unknown; choose k1 or k3")


def token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """Per-token rewards: ``-kl_coef * kl`` on assistant tokens plus each episode's score on its last one.

    Args:
        scores: ``(B,)`` episode rewards.
        kl: ``(B, C)`` per-token KL estimates.
        mask: ``(B, C)`` assistant mask; a row with no assistant token gets no reward at all.

    Returns:
        ``(B, C)``, zero on environment tokens and padding.
    """
    rewards = -kl_coef * kl * mask
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, -1).max(dim=1).values  # (B,), -1 for an empty row
    rows = torch.nonzero(last >= 0).squeeze(-1)
    rewards[rows, last[rows]] += scores[rows].to(rewards.dtype)
    return rewards


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the assistant tokens of each row, skipping the others.

    Walking back from the end, an assistant token ``t`` gets ``delta = r_t + gamma * V(next) - V(t)`` and
    ``A_t = delta + gamma * lam * A(next)``, where "next" is the next *assistant* token of the row (0 after the
    last). Environment tokens and padding are skipped: their rewards and values are never read, and their
    advantage and return are 0.

    Args:
        rewards: ``(B, C)`` per-token rewards (:func:`token_rewards`).
        values: ``(B, C)`` value of the state before each token (as the rollout saw it).
        mask: ``(B, C)`` assistant mask.
        gamma: Discount per assistant token.
        lam: GAE lambda.

    Returns:
        ``(advantages, returns)``, ``(B, C)``; ``returns = advantages + values`` on assistant tokens, else 0.
    """
    mask = mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    next_adv = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in range(values.shape[1] - 1, -1, -1):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        advantages[:, t] = adv * m
        next_value = torch.where(m > 0, values[:, t], next_value)
        next_adv = torch.where(m > 0, adv, next_adv)
    return advantages, (advantages + values) * mask


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                cliprange: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, a token mean over assistant tokens.

    Returns:
        ``(loss, stats)`` with stats ``clipfrac`` (tokens whose clipped term was the active one) and
        ``approx_kl`` (``0.5 * (logp - old)^2``, KL between the update's policy and the rollout's).
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {"clipfrac": masked_mean((clipped > unclipped).float(), mask),
                 "approx_kl": masked_mean(0.5 * log_ratio ** 2, mask)}
    return loss, stats


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               cliprange_value: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss ``0.5 * max((V - R)^2, (V_clip - R)^2)``, a token mean over assistant tokens.

    ``V_clip`` keeps the new value within ``cliprange_value`` of the rollout's value.

    Returns:
        ``(loss, stats)`` with stats ``value_clipfrac`` (tokens where the clipped error was the larger).
    """
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    err = (values - returns) ** 2
    err_clipped = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err, err_clipped), mask)
    with torch.no_grad():
        stats = {"value_clipfrac": masked_mean((err_clipped > err).float(), mask)}
    return loss, stats


# --- KL control --------------------------------------------------------------------------------------------------


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_episodes: int) -> None:
        """No-op: the coefficient stays fixed."""


class AdaptiveKLController:
    """Ziegler et al. (2019)'s proportional controller: move ``kl_coef`` so the measured KL tracks a target.

    After each batch, ``error = clip(kl / target - 1, -0.2, 0.2)`` and ``kl_coef *= 1 + error * n / horizon``,
    where ``kl`` is the batch's mean summed KL per episode and ``n`` the batch's episodes.

    Args:
        kl_coef: Starting coefficient.
        target: Target summed KL per episode (nats).
        horizon: Episodes over which a persistent error of 20 % changes the coefficient by about e^0.2.
    """

    def __init__(self, kl_coef: float, target: float, horizon: int) -> None:
        if kl_coef <= 0 or target <= 0 or horizon < 1:
            raise ValueError(f"kl_coef={kl_coef}, target={target} must be > 0 and horizon={horizon} >= 1")
        self.value, self.target, self.horizon = float(kl_coef), float(target), int(horizon)

    def update(self, current_kl: float, n_episodes: int) -> None:
        """Scale the coefficient after a batch of ``n_episodes`` whose mean summed KL was ``current_kl``."""
        if not math.isfinite(current_kl) or n_episodes <= 0:
            return
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_episodes / self.horizon


def make_kl_controller(args: PPOArgs) -> FixedKLController | AdaptiveKLController:
    """The controller the recipe asks for: adaptive when ``trainer.target_kl`` is set, else fixed."""
    if args.target_kl is None:
        return FixedKLController(args.kl_coef)
    return AdaptiveKLController(args.kl_coef, args.target_kl, args.kl_horizon)
