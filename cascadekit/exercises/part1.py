"""Exercises for Part I (chapters 01-07): the DAG world, judging, pretraining and the four findings."""
from __future__ import annotations

import statistics
from typing import Any, Sequence

from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Choice, Function, Number
from cascadekit.course.notebook import lookup
from cascadekit.results import load_metrics


def committed(chapter: str) -> dict[str, Any]:
    """A chapter's committed toy-run metrics; FileNotFoundError (reported by ``check``) when absent."""
    metrics = load_metrics(chapter)
    if metrics is None:
        raise FileNotFoundError(f"data/results/{chapter}/metrics.json")
    return metrics


# 01 · the DAG world ---------------------------------------------------------

def _length_ratio() -> float:
    from cascadekit.world import generate_problem

    def mean_length(style: str) -> float:
        return statistics.mean(len(generate_problem(op=10, context="A", seed=s, style=style).problem_text)
                               for s in range(20))
    return mean_length("full") / mean_length("minimal")


def _chains() -> list[Case]:
    from cascadekit.world import generate_problem

    return [([(n.name, list(n.parents)) for n in generate_problem(op=op, context=c, seed=s, style="compact").nodes],)
            for op in range(2, 9) for c in "AB" for s in range(2)]


def longest_chain(nodes: Sequence[tuple[str, Sequence[str]]]) -> int:
    """Nodes on the longest dependency chain ending at the last (queried) node."""
    parents = dict((name, list(ps)) for name, ps in nodes)
    depth: dict[str, int] = {}
    for name, _ in nodes:  # solution order: parents come first
        depth[name] = 1 + max((depth.get(p, 1) for p in parents[name]), default=0)
    return depth[nodes[-1][0]]


# 02 · judging a solution ----------------------------------------------------

def _passk_cases() -> list[Case]:
    return [(n, c, k) for n, c, k in ((1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (5, 4, 2), (16, 3, 8),
                                      (16, 0, 16), (16, 16, 4), (100, 1, 50), (200, 37, 128))]


def _passk(n: int, c: int, k: int) -> float:
    from cascadekit.passk import pass_at_k

    return pass_at_k(n, c, k)


def _dropped_step_reward() -> float:
    from cascadekit.rewards import process_score
    from cascadekit.verify.mutations import MUTATIONS
    from cascadekit.verify.process import judge
    from cascadekit.world import generate_problem

    problem = generate_problem(op=6, context="A", seed=0, style="compact")
    return process_score(judge(MUTATIONS["dropped step"](problem), problem))


# 03 · pretraining -----------------------------------------------------------

def _luckiest_op() -> int:
    ladder = committed("03_pretraining")["ladder"]
    return max(ladder, key=lambda r: r["answer_pass@1"] - r["process_pass@1"])["op"]


def _tokens_per_second() -> float:
    metrics = committed("03_pretraining")
    return metrics["pretrain_tokens"] / metrics["base_build_wall_s"]


# 04 · the edge of competence ------------------------------------------------

def _groups() -> list[Case]:
    return [([0.0, 0.0, 0.0, 0.0], 4), ([1.0, 1.0, 1.0, 1.0], 4), ([0.0, 1.0, 0.0, 0.0], 4),
            ([0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], 4), ([0.2, 0.84, 1.0, 0.0, 0.5, 0.5], 3),
            ([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0], 8)]


def _advantages(rewards: list[float], group_size: int) -> list[float]:
    import torch

    from cascadekit.training.grpo import grpo_advantages

    return grpo_advantages(torch.tensor(rewards, dtype=torch.float64), group_size).tolist()


def _scaled_advantage_factor() -> float:
    group = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    before = _advantages(group, 8)
    after = _advantages([10 * r for r in group], 8)
    return after[1] / before[1]


def _hard_signal() -> float:
    summary = committed("04_edge_of_competence")["curve_summary"]
    return 1 - lookup({"s": summary}, "s[run=too_hard].mean_frac_reward_zero_std")


# 05 · context transfer ------------------------------------------------------

def _actual_share() -> float:
    return lookup(committed("05_context_transfer"), "variants[b_share=0.01].corpus.actual_b_share")


SHARES = ("0.0", "0.001", "0.01", "0.1")


def _best_share() -> str:
    def transfer(variant: dict) -> float:
        rows = [r for r in variant["after"] if r["context"] == "B" and r["op"] >= 3]
        return statistics.mean(r["pass@32"] for r in rows)
    best = max(committed("05_context_transfer")["variants"], key=transfer)
    return next(s for s in SHARES if float(s) == best["b_share"])


# 06 · a fixed budget --------------------------------------------------------

def _rl_cost(prompts: int, rollouts: int, tokens: int, reference_model: bool) -> float:
    from cascadekit.engine.compute import rl_token_equivalent

    return float(rl_token_equivalent(prompts, rollouts, tokens, reference_model=reference_model))


ARMS = ("full_midtrain", "light_rl", "medium_rl", "heavy_rl", "full_rl")


def _best_edge_arm() -> str:
    arms = committed("06_fixed_budget")["arms"]
    return max(arms, key=lambda a: lookup(a, "by_range[range=edge].pass@1"))["arm"]


# 07 · process rewards -------------------------------------------------------

def _verdict(n_gold: int, n_missing: int, n_dependency: int, n_value: int, n_extra: int, answer_correct: bool) -> Any:
    from cascadekit.verify.process import ProcessVerdict

    return ProcessVerdict(correct=False, answer_correct=answer_correct, process_accuracy=0.0, n_gold=n_gold,
                          n_missing=n_missing, n_dependency=n_dependency, n_value=n_value, n_extra=n_extra,
                          answer_mismatch=not answer_correct, reason="")


def _mixed_one_mistake() -> float:
    from cascadekit.rewards import outcome_score, process_score

    verdict = _verdict(5, 0, 1, 0, 0, True)
    return 0.2 * outcome_score(verdict) + 0.8 * process_score(verdict)


def _process_score(n_gold: int, n_missing: int, n_dependency: int, n_value: int, n_extra: int,
                   answer_correct: bool) -> float:
    from cascadekit.rewards import process_score

    return process_score(_verdict(n_gold, n_missing, n_dependency, n_value, n_extra, answer_correct))


def _verdict_cases() -> list[Case]:
    return [(5, 0, 0, 0, 0, True), (5, 0, 1, 0, 0, True), (5, 1, 1, 0, 0, True), (4, 0, 0, 0, 2, True),
            (3, 0, 0, 0, 9, True), (6, 2, 2, 3, 0, True), (5, 0, 0, 0, 0, False), (2, 0, 0, 1, 0, True)]


MODELS = ("base", "outcome", "mixed", "strict")


def _fewest_dependency_errors() -> str:
    errors = committed("07_process_rewards")["errors"]
    return min((r for r in errors if r["range"] == "edge"), key=lambda r: r["dependency mismatch"])["model"]


EXERCISES = [
    Exercise("01.1", "How much shorter is the minimal rendering?",
             "Generate `generate_problem(op=10, context=\"A\", seed=s, style=...)` for seeds 0-19 in the `full` and "
             "the `minimal` style. How many times longer, on average, is the full `problem_text` than the minimal one "
             "(mean length of full / mean length of minimal, in characters)? Within 10%.",
             Number(_length_ratio, rel=0.1), "use `statistics.mean(len(p.problem_text) for p in ...)` for each style, "
             "then divide; the same 20 seeds for both.", "answer = None  # a number"),
    Exercise("01.2", "The longest chain of a problem",
             "Write `longest_chain(nodes)`: `nodes` is a problem's gold graph as a list of `(name, parents)` pairs "
             "in solution order (`[(n.name, list(n.parents)) for n in problem.nodes]`), the query last. Return the "
             "number of nodes on the longest dependency chain that ends at the query (a leaf alone counts 1).",
             Function(_chains, longest_chain, describe_case=lambda case: f"a graph of {len(case[0])} nodes"),
             "walk the nodes in order and keep, per name, 1 + the largest depth among its parents (0 when it has "
             "none); a parent always comes before its children.",
             "def longest_chain(nodes):\n    ...\n\nanswer = longest_chain", homework=True),
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
    Exercise("03.1", "Lucky guesses in the ladder",
             "In the committed toy run (`load_metrics(\"03_pretraining\")[\"ladder\"]`), at which op is the gap "
             "between answer-only pass@1 and process-verified pass@1 the largest?",
             Number(_luckiest_op, abs_=0.0), "for each row compute `answer_pass@1 - process_pass@1` and take the op "
             "of the largest; small answers are easy to guess.", "answer = None  # an op, e.g. 4"),
    Exercise("03.2", "What the shipped base cost",
             "From the committed toy run, how many tokens per second did building the shipped base reach "
             "(`pretrain_tokens` over `base_build_wall_s`)? Within 2%. Then estimate how long 32M tokens would take.",
             Number(_tokens_per_second, rel=0.02), "both numbers are top-level keys of the chapter's metrics.json.",
             "answer = None  # tokens per second"),
    Exercise("04.1", "Implement the GRPO group advantage",
             "Write `advantages(rewards, group_size)`: `rewards` is a flat list, the rollouts of one prompt adjacent. "
             "Return each rollout's group-relative advantage as TRL computes it (ε = 1e-4).",
             Function(_groups, _advantages, rel=1e-4, abs_=1e-4),
             "per group: (r - mean) / (std + 1e-4), with the sample standard deviation (divide by G - 1, not G). "
             "A group where every reward is equal gets all zeros.",
             "def advantages(rewards, group_size):\n    ...\n\nanswer = advantages", homework=True),
    Exercise("04.2", "Scale the reward, predict the update",
             "Multiply every reward of a group by 10 (say, a reward of 0/10 instead of 0/1). By what factor do the "
             "group-relative advantages change? Predict, then check with `grpo_advantages`.",
             Number(_scaled_advantage_factor, rel=1e-3), "the mean and the standard deviation of the group both "
             "scale with the rewards; only ε does not.", "answer = None  # a number"),
    Exercise("04.3", "How much signal did the too-hard arm get?",
             "In the committed run (`curve_summary`), what fraction of the too-hard arm's groups carried any "
             "learning signal (1 - `mean_frac_reward_zero_std`)?",
             Number(_hard_signal, abs_=0.002), "find the row whose `run` is `too_hard` in "
             "`load_metrics(\"04_edge_of_competence\")[\"curve_summary\"]`.", "answer = None  # a fraction"),
    Exercise("05.1", "Asked share, measured share",
             "The 1% variant asked for 1% of its pretraining tokens from context B. What share did its corpus "
             "actually hold, in the committed run? Within 2%.",
             Number(_actual_share, rel=0.02), "look at the variant whose `b_share` is 0.01 and its `corpus` "
             "record; whole problems make it differ from the asked share.", "answer = None  # a fraction"),
    Exercise("05.2", "Which exposure transferred?",
             "In the committed run, which exposure (`b_share`) gives the highest mean pass@32 on context B at ops "
             "3 and above after RL? Answer with the share as written: " + ", ".join(repr(s) for s in SHARES) + ".",
             Choice(SHARES, _best_share), "average the `after` rows with context B and op >= 3 per variant.",
             "answer = None  # e.g. \"0.0\"", homework=True),
    Exercise("06.1", "Price an RL run in tokens",
             "Write `rl_cost(prompts, rollouts, tokens, reference_model)`: the supervised tokens that cost as much "
             "as this GRPO run (the chapter's T_RL), with or without a reference model.",
             Function(lambda: [(1, 1, 1, True), (1, 1, 1, False), (64, 8, 512, True), (64, 8, 512, False),
                               (100 * 1024, 6, 2048, True)], _rl_cost, rel=1e-9),
             "T_RL = (8 + 2γ)/6 · N · r · L, with γ = 1 when a reference model runs its forward pass and 0 otherwise.",
             "def rl_cost(prompts, rollouts, tokens, reference_model):\n    ...\n\nanswer = rl_cost"),
    Exercise("06.2", "Which arm won the edge?",
             "In the committed run, which arm has the highest process-verified pass@1 on the edge range? One of "
             + ", ".join(repr(a) for a in ARMS) + ".",
             Choice(ARMS, _best_edge_arm), "each arm's `by_range` holds a row with `range` edge.",
             "answer = None  # an arm's name"),
    Exercise("07.1", "Change the reward, predict the score",
             "A solution has the right answer and one dependency mismatch, on a gold graph of 5 nodes. What does "
             "the mixed reward with α = 0.2 (0.2 outcome + 0.8 process) give it? Predict before computing.",
             Number(_mixed_one_mistake), "outcome is 1 (the answer is right); process is 1 - penalty / |gold|.",
             "answer = None  # a number"),
    Exercise("07.2", "Implement the process score",
             "Write `process_score(n_gold, n_missing, n_dependency, n_value, n_extra, answer_correct)` as the kit "
             "defines it (see `penalty` and `process_score` above).",
             Function(_verdict_cases, _process_score),
             "a wrong answer scores 0; otherwise 1 - penalty / n_gold, floored at 0, where extra nodes count at most "
             "n_gold.", "def process_score(n_gold, n_missing, n_dependency, n_value, n_extra, answer_correct):\n"
             "    ...\n\nanswer = process_score", homework=True),
    Exercise("07.3", "Which reward cut dependency mistakes?",
             "In the committed run (`errors`), which model has the lowest dependency-mismatch rate on the edge "
             "range? One of " + ", ".join(repr(m) for m in MODELS) + ".",
             Choice(MODELS, _fewest_dependency_errors), "filter `errors` to `range == \"edge\"` and compare "
             "`dependency mismatch`.", "answer = None  # a model's name"),
]
