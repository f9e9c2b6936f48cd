"""Exercises for chapter 14: the whole cascade, joint RL and the forgetting matrix."""
from __future__ import annotations

from typing import Any, Sequence

from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Choice, Function, Number
from cascadekit.exercises.committed import committed_metrics

RESULTS = "14_whole_cascade"
RL_STAGES = ("RLHF", "IF-RL", "Math RL", "Code RL", "SWE RL")


def _batches() -> list[Case]:
    """(domain, the batch's domains, that domain's scores of its own rollouts in order)."""
    return [("math", ["math", "code", "math"], [1.0, 0.0]), ("code", ["math", "code", "math"], [0.5]),
            ("swe", ["math", "code"], []), ("general", [], []), ("general", ["general"] * 4, [0.1, 0.2, 0.3, 0.4]),
            ("tools", ["swe", "tools", "tools", "swe", "tools"], [-1.0, 0.0, 2.5])]


def _routed(domain: str, batch: Sequence[str], scores: Sequence[float]) -> list[float | None]:
    from cascadekit.training.whole_cascade import DomainReward

    def own(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        assert len(completions) == len(scores)
        return list(scores)

    own.__name__ = "own"
    return DomainReward(domain, own)([""] * len(batch), [""] * len(batch), domain=list(batch))


def _most_disruptive_stage() -> str:
    from cascadekit.chapters.ch14_whole_cascade import forgetting

    cells = [c for c in forgetting(committed_metrics(RESULTS)) if not c["own"]]
    return max(RL_STAGES, key=lambda s: abs(sum(c["change"] for c in cells if c["stage"] == s)))


def _cascade_minus_joint() -> float:
    from cascadekit.chapters.ch14_whole_cascade import CASCADE, JOINT, final
    from cascadekit.evaluation.stage_claims import paired_change

    metrics = committed_metrics(RESULTS)
    return paired_change(final(metrics, JOINT), final(metrics, CASCADE))[0]


EXERCISES = [
    Exercise("14.1", "Give every rollout its own domain's reward",
             "A joint-RL batch mixes domains. Write `route(domain, batch, scores)`: `batch` lists the domain of "
             "every rollout in the batch, `scores` are `domain`'s reward for its own rollouts (in batch order). "
             "Return one entry per rollout: the score for `domain`'s rollouts and `None` for every other, as "
             "`DomainReward` hands TRL (which then skips the `None`s when it sums a rollout's rewards).",
             Function(_batches, _routed, describe_case=lambda case: f"{case[0]!r} in {case[1]}"),
             "walk the batch once, taking the next score each time the rollout's domain is `domain`; "
             "an empty batch gives an empty list.", "def route(domain, batch, scores):\n    ...\n\nanswer = route"),
    Exercise("14.2", "Which stage disturbed the others most?",
             "In the committed forgetting matrix (`forgetting(load_metrics(\"14_whole_cascade\"))` from "
             "`cascadekit.chapters.ch14_whole_cascade`), which RL stage moved the *other* domains most: the largest "
             "absolute value of the sum of its off-diagonal changes? One of " + ", ".join(map(repr, RL_STAGES))
             + ". Is that change inside the ±0.05 the forgetting claims allow?",
             Choice(RL_STAGES, _most_disruptive_stage), "keep the cells whose `own` is False, sum `change` per "
             "`stage`, compare absolute values.", "answer = None  # a stage name"),
    Exercise("14.3", "Cascade or joint?",
             "In the committed run, by how much does the cascade's final model beat joint RL over the whole suite "
             "(every domain, both modes; the paired change, cascade minus joint)? Within 0.005. Which domains "
             "carry the difference, and what did joint RL's mixed batches cost per step?",
             Number(_cascade_minus_joint, abs_=0.005), "`paired_change(final(m, JOINT), final(m, CASCADE))` "
             "(`cascadekit.evaluation.stage_claims`, `cascadekit.chapters.ch14_whole_cascade`); its first value is "
             "the estimate.", "answer = None  # a change in score", homework=True),
]
