"""Chapter 02: judging a solution step by step, and the unbiased pass@k.

A final answer is a weak signal on this world (answers are small numbers, so a
guesser is often right), so every Part I sample is judged by process
verification: the solution is parsed into steps and compared node by node with
the gold graph (:mod:`cascadekit.verify.process`), and the rewards are scores of
that verdict (:mod:`cascadekit.rewards`). pass@k is the unbiased estimator of
:mod:`cascadekit.passk`. The chapter has no experiment of its own (``experiment:
false`` in ``chapters.yaml``): its notebook is the whole chapter, and this module
holds its exercises.
"""
from __future__ import annotations

from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Function, Number
from cascadekit.passk import pass_at_k
from cascadekit.rewards import process_score
from cascadekit.verify.mutations import MUTATIONS
from cascadekit.verify.process import judge
from cascadekit.world import generate_problem


def _passk_cases() -> list[Case]:
    return [(n, c, k) for n, c, k in ((1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (5, 4, 2), (16, 3, 8),
                                      (16, 0, 16), (16, 16, 4), (100, 1, 50), (200, 37, 128))]


def _passk(n: int, c: int, k: int) -> float:
    return pass_at_k(n, c, k)


def _dropped_step_reward() -> float:
    problem = generate_problem(op=6, context="A", seed=0, style="compact")
    return process_score(judge(MUTATIONS["dropped step"](problem), problem))


EXERCISES = [
    Exercise("02.1", "Implement the unbiased pass@k",
             "Write `pass_at_k(n, c, k)` for one problem with `n` samples of which `c` are correct: the probability "
             "that at least one of `k` samples drawn without replacement is correct. It must stay exact when "
             "`n` is in the hundreds.",
             Function(_passk_cases, _passk), "1 minus the chance that all k drawn samples are wrong: C(n-c, k) / "
             "C(n, k). When n - c < k some drawn sample must be correct. `math.comb` keeps it exact.",
             "def pass_at_k(n, c, k):\n    ...\n\nanswer = pass_at_k"),
    Exercise("02.2", "What a dropped step costs",
             "Take `problem = generate_problem(op=6, context=\"A\", seed=0, style=\"compact\")` and the solution "
             "`MUTATIONS[\"dropped step\"](problem)`. Predict, then compute, its **process reward** "
             "(`process_score` of the judge's verdict).",
             Number(_dropped_step_reward), "judge the text with `judge(text, problem)`: a dropped node is missing and "
             "its child now has a wrong parent; the process score is 1 - penalty / |gold| for a right answer.",
             "answer = None  # a number in [0, 1]"),
]
