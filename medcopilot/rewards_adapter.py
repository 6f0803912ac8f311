"""The adapter from episode rewards to TRL's ``reward_funcs`` hook.

The environment grades each episode while the rollout runs (:mod:`medagentgym.medcopilot.rollout_func`), and the rollout
hook scores it with every reward named in the recipe's ``reward.weights`` (functions of ``rewards``). It returns
each component under the extra key ``reward_<name>``; TRL hands every extra key to every reward function as a
keyword argument (one value per row), and one :class:`EpisodeReward` per component returns its column unchanged.
TRL then weights the components with ``GRPOConfig.reward_weights`` and logs each as ``rewards/<name>/mean``.
``None`` (a failed grader) stays ``None``: TRL turns it into NaN and gives that row a zero advantage instead of
scoring it as a wrong answer.

The same call logs the batch's environment metrics (:func:`medagentgym.medcopilot.metrics.batch_metrics`) and the success
rate of each family in the batch (``env/success_rate/<family>``, from the dataset's ``family`` column) through
TRL's ``log_metric`` kwarg, so they land in ``trainer.state.log_history`` (and wandb, and stdout) at every
logging step.

Example:
    >>> reward = EpisodeReward("correctness", group_size=2)
    >>> reward(prompts=["p", "p"], completions=["a", "b"], reward_correctness=[1.0, None])
    [1.0, None]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from medagentgym.medcopilot.metrics import EpisodeStats, batch_metrics

__all__ = ["EpisodeReward", "family_success"]


class EpisodeReward:
    """TRL reward function returning one reward component the rollout computed for each episode.

    Args:
        name: The component (a function of ``rewards``, e.g. ``"correctness"``); read from ``reward_<name>``
            and logged by TRL as ``rewards/<name>/mean``.
        group_size: ``num_generations`` of the trainer (rows per group), for the zero-advantage metric.
        log_metrics: Log the ``env/*`` batch metrics through ``log_metric``. Give it to one component only,
            so the metrics are not logged twice.
    """

    def __init__(self, name: str, *, group_size: int, log_metrics: bool = True) -> None:
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1 (got {group_size}); pass the trainer's num_generations")
        self.key = f"reward_{name}"
        self.group_size = group_size
        self.log_metrics = log_metrics
        self.__name__ = name  # TRL names a reward function by its __name__

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        *,
        episode_stats: Sequence[dict] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """Return one reward per row; log the ``env/*`` metrics when TRL passes ``log_metric``.

        Args:
            prompts: TRL's prompts (unused; the environment already graded the episode).
            completions: TRL's decoded completions (unused, same reason).
            episode_stats: From the rollout hook: one :meth:`EpisodeStats.to_dict` per row.
            log_metric: TRL's scalar logger (``log_metric(name, value)``).
            **kwargs: ``reward_<name>`` from the rollout hook (one float, or None for a failed grader, per row),
                every dataset column and TRL's other kwargs.

        Returns:
            The component's rewards, one per row.

        Raises:
            KeyError: If the rollout hook did not return ``reward_<name>`` (it was built without this component).
        """
        episode_reward = kwargs.get(self.key)
        if episode_reward is None:
            raise KeyError(f"reward function {self.__name__!r} got no {self.key!r} kwarg: pass rollout_func="
                           f"EnvRolloutFunc(..., rewards={{{self.__name__!r}: ...}}) to GRPOTrainer")
        if len(episode_reward) != len(completions):
            raise ValueError(f"{len(episode_reward)} episode rewards for {len(completions)} completions")
        rewards = [None if r is None else float(r) for r in episode_reward]
        if self.log_metrics and log_metric is not None and episode_stats is not None:
            from accelerate.utils import gather_object

            stats = [EpisodeStats.from_dict(dict(s)) for s in episode_stats]
            # A group may span processes (TRL hands each process a contiguous slice of the batch): count flat
            # groups over every process's rows, in rank order. All processes then log the same value.
            everyone = gather_object(rewards)
            for name, value in batch_metrics(stats, rewards=rewards, group_size=self.group_size,
                                             group_rewards=everyone).items():
                log_metric(name, value)
        if self.log_metrics and log_metric is not None and episode_stats is not None and kwargs.get("family"):
            for name, value in family_success(episode_stats, kwargs["family"]).items():
                log_metric(name, value)
        return rewards


def family_success(episode_stats: Sequence[dict], families: Sequence[str]) -> dict[str, float]:
    """``env/success_rate/<family>`` for each family with rows in this batch (the dataset's ``family`` column).

    Example:
        >>> family_success([{"success": True}, {"success": False}, {"success": True}], ["a", "a", "b"])
        {'env/success_rate/a': 0.5, 'env/success_rate/b': 1.0}
    """
    if len(families) != len(episode_stats):
        raise ValueError(f"{len(families)} family names for {len(episode_stats)} episodes")
    rows: dict[str, list[bool]] = {}
    for stat, family in zip(episode_stats, families):
        rows.setdefault(str(family), []).append(bool(stat.get("success")))
    return {f"env/success_rate/{family}": sum(v) / len(v) for family, v in sorted(rows.items())}
