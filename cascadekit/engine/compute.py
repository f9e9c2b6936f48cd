"""Compute accounting for finding 3: mid-training and RL under one budget.

The Interplay paper (appendix A.10.1) prices both stages in forward/backward
FLOPs of a model with ``P`` non-embedding parameters:

- supervised training on ``T`` tokens costs ``6 P T`` (2 forward + 4 backward);
- RL on ``N`` prompts with ``r`` rollouts of ``L`` tokens each costs
  ``(8 + 2 g) P N r L``: 2 to generate the rollout, 6 for the policy's forward
  and backward pass on it, and 2 more for a reference model's forward pass when
  one is run (``g = 1``, i.e. a KL penalty), else ``g = 0``.

Dividing the RL cost by ``6 P`` expresses it in supervised tokens:
``T_RL = (8 + 2 g) / 6 * N r L``, which is ``5/3 N r L`` with a reference model
(the paper's setting, KL 1e-3) and ``4/3 N r L`` without one (the kit's default
strict on-policy GRPO, KL off).

Token-equivalents are exact rationals here (:class:`fractions.Fraction`), so a
budget split between the two stages can be checked to the token.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import gcd

import torch

from cascadekit.engine.models import count_parameters

#: The paper's five arms: the share of the budget given to RL.
ARMS: dict[str, float] = {
    "full_midtrain": 0.0,
    "light_rl": 0.2,
    "medium_rl": 0.5,
    "heavy_rl": 0.8,
    "full_rl": 1.0,
}


def non_embedding_params(model: torch.nn.Module) -> int:
    """``P``: the model's parameters minus its token embedding and (untied) output head."""
    return count_parameters(model, embeddings=False)


def supervised_flops(params: int, tokens: int) -> int:
    """``6 P T``: one forward (2) and backward (4) pass per token."""
    return 6 * params * tokens


def rl_flops(params: int, prompts: int, rollouts: int, tokens_per_rollout: int, *, reference_model: bool = True) -> int:
    """``(8 + 2 g) P N r L``: generate (2), policy forward/backward (6), reference forward (2 g)."""
    return (8 + 2 * int(reference_model)) * params * prompts * rollouts * tokens_per_rollout


def rl_token_equivalent(
    prompts: int, rollouts: int, tokens_per_rollout: int, *, reference_model: bool = True
) -> Fraction:
    """``T_RL = (8 + 2 g) / 6 * N r L``: the supervised tokens that cost as much as this RL run."""
    return rl_cost_per_prompt(rollouts, tokens_per_rollout, reference_model=reference_model) * prompts


def rl_cost_per_prompt(rollouts: int, tokens_per_rollout: int, *, reference_model: bool = True) -> Fraction:
    """Token-equivalents of one RL prompt: ``(8 + 2 g) / 6 * r L``."""
    return Fraction(8 + 2 * int(reference_model), 6) * rollouts * tokens_per_rollout


@dataclass(frozen=True)
class BudgetSplit:
    """One arm's spend: mid-training tokens plus RL prompts, in token-equivalents."""

    arm: str
    rl_fraction: float  # the share asked for
    midtrain_tokens: int
    rl_prompts: int
    rollouts: int
    tokens_per_rollout: int
    rl_tokens: Fraction  # T_RL of the prompts actually given
    total: Fraction

    @property
    def actual_rl_fraction(self) -> float:
        """The share RL actually got, after rounding to whole prompts."""
        return float(self.rl_tokens / self.total) if self.total else 0.0


def _prompt_granule(rollouts: int, tokens_per_rollout: int, reference_model: bool) -> int:
    """The fewest prompts whose RL cost is a whole number of token-equivalents."""
    numerator = (8 + 2 * int(reference_model)) * rollouts * tokens_per_rollout
    return 6 // gcd(6, numerator)


def split_budget(
    total_tokens: int,
    rl_fraction: float,
    rollouts: int,
    tokens_per_rollout: int,
    *,
    reference_model: bool = True,
    arm: str = "",
) -> BudgetSplit:
    """Split ``total_tokens`` token-equivalents: ``rl_fraction`` to RL, the rest to mid-training.

    RL gets the whole number of prompts nearest to its share (in steps that keep
    its cost integral); mid-training gets exactly what is left, so
    ``midtrain_tokens + rl_tokens == total_tokens`` always. Use
    :func:`budget_arms` to compare arms: it first trims the total so that even
    the full-RL arm spends it exactly.
    """
    if not 0.0 <= rl_fraction <= 1.0:
        raise ValueError(f"rl_fraction must be in [0, 1], got {rl_fraction}")
    granule = _prompt_granule(rollouts, tokens_per_rollout, reference_model)
    per_granule = rl_cost_per_prompt(rollouts, tokens_per_rollout, reference_model=reference_model) * granule
    max_granules = int(Fraction(total_tokens) // per_granule)
    granules = min(round(Fraction(rl_fraction) * total_tokens / per_granule), max_granules)
    rl_tokens = per_granule * granules
    return BudgetSplit(
        arm=arm,
        rl_fraction=rl_fraction,
        midtrain_tokens=int(total_tokens - rl_tokens),
        rl_prompts=granules * granule,
        rollouts=rollouts,
        tokens_per_rollout=tokens_per_rollout,
        rl_tokens=rl_tokens,
        total=Fraction(total_tokens),
    )


def budget_arms(
    total_tokens: int,
    rollouts: int,
    tokens_per_rollout: int,
    *,
    reference_model: bool = True,
    arms: dict[str, float] | None = None,
) -> list[BudgetSplit]:
    """The paper's arms (full mid-training, light/medium/heavy RL, full RL) under one exact budget.

    The budget is first trimmed down to a whole number of RL prompts' cost, so
    that the full-RL arm spends all of it on RL and every arm's total is exactly
    the same number of token-equivalents (returned in each split's ``total``).

    Where the kit departs from the paper: the paper's own end points do not
    match. Its full mid-training arm is 1B supervised tokens, while its full-RL
    arm (batch 1024 prompts x 100 updates, r = 6, L = 2048, reference model on)
    costs ``5/3 * 102400 * 6 * 2048`` = about 2.10B token-equivalents, twice as
    much. Here all arms share one budget.
    """
    arms = ARMS if arms is None else arms
    granule = _prompt_granule(rollouts, tokens_per_rollout, reference_model)
    per_granule = rl_cost_per_prompt(rollouts, tokens_per_rollout, reference_model=reference_model) * granule
    budget = int((Fraction(total_tokens) // per_granule) * per_granule)
    if budget == 0:
        raise ValueError(f"a budget of {total_tokens} token-equivalents buys no RL prompt (one costs {per_granule})")
    return [
        split_budget(budget, fraction, rollouts, tokens_per_rollout, reference_model=reference_model, arm=name)
        for name, fraction in arms.items()
    ]
