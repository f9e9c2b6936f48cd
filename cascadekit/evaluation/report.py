"""Judging sampled solutions and turning verdicts into tidy pass@k tables.

Every sample is judged by the process verifier (``correct``: the answer is
right *and* every step is a correct, properly grounded computation); the
answer-only score (``answer_correct``) is kept beside it, together with a
chance baseline: answers drawn from the training answer distribution. At this
scale answers are small numbers, so guessing already scores well on answers
alone; only the process-verified score says the model can reason.

Records and tables are lists of plain dicts (``pandas.DataFrame(rows)`` if you
like), one row per sample, per (op, k) or per (range, k).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

import numpy as np

from cascadekit.bands import PRETRAIN_MIXTURE, RANGES, Bands
from cascadekit.passk import pass_at_k
from cascadekit.evaluation.sampler import cached_sample_completions
from cascadekit.engine.generation import backend
from cascadekit.engine.runtime import choose_device, load_model
from cascadekit.engine.tokenizer import load_tokenizer
from cascadekit.profiles import Profile, WorldConfig
from cascadekit.stages import StageOutput
from cascadekit.verify.process import judge
from cascadekit.world import Problem, generate_problems

ERRORS = ("n_missing", "n_dependency", "n_value", "answer_mismatch")


def op_range(op: int, bands: Bands | WorldConfig) -> str:
    """``in_distribution``, ``edge``, ``hard`` or ``outside`` for an op count (a profile's world or measured bands)."""
    return next((name for name in RANGES if op in bands.ops(name)), "outside")


def eval_problems(profile: Profile, ops: Iterable[int], contexts: Sequence[str]) -> list:
    """``evaluation.problems_per_op`` held-out ``eval`` problems per op, cycling through ``contexts``.

    Call it once per context to get that many problems per (op, context); over the
    profile's whole band ladder it is the evaluation ladder of chapters 03-07.
    """
    return [
        p
        for op in ops
        for p in generate_problems(ops=[op], contexts=tuple(contexts), n=profile.evaluation.problems_per_op,
                                   seed=profile.seeds.eval, split="eval", style=profile.world.rendering)
    ]


def judge_samples(problems: Sequence, completions: Sequence[Sequence[str]], bands: Bands | WorldConfig) -> list[dict]:
    """One record per sample: op, range, problem index, the text, the verdict's scores, error counts and reason."""
    records = []
    for index, (problem, samples) in enumerate(zip(problems, completions)):
        for s, text in enumerate(samples):
            verdict = judge(text, problem)
            records.append({
                "op": problem.op, "range": op_range(problem.op, bands), "context": problem.context,
                "problem": index, "sample": s,
                "correct": bool(verdict.correct), "answer_correct": bool(verdict.answer_correct),
                "process_accuracy": float(verdict.process_accuracy),
                **{e: int(getattr(verdict, e)) for e in ERRORS},
                "reason": verdict.reason, "text": text,
            })
    return records


def evaluate(model, tokenizer, problems: Sequence, profile: Profile, bands: Bands | None = None) -> list[dict]:
    """Sample ``evaluation.samples`` completions per problem and judge each one (ranges from ``bands``).

    ``model`` is a loaded model or a checkpoint folder; vLLM samples when ``engine.vllm``
    asks and can (:func:`cascadekit.engine.generation.backend`), else transformers.
    """
    prompts = [p.rl_prompt for p in problems]
    completions = cached_sample_completions(model, tokenizer, prompts, profile.evaluation, seed=profile.seeds.eval,
                                            placement=choose_device(profile), backend=backend(profile),
                                            engine=profile.engine)
    return judge_samples(problems, completions, bands or profile.world)


def _order(group):
    """Sort ops numerically and ranges from in-distribution to hard."""
    return (*RANGES, "outside").index(group) if isinstance(group, str) else group


def _counts(records: Iterable[dict], metric: str, by: str) -> dict:
    """``{group: [(n, c) per problem]}`` for a boolean ``metric``."""
    per_problem: dict = defaultdict(lambda: [0, 0])
    group_of = {}
    for r in records:
        key = r["problem"]
        per_problem[key][0] += 1
        per_problem[key][1] += int(r[metric])
        group_of[key] = r[by]
    groups: dict = defaultdict(list)
    for key, (n, c) in per_problem.items():
        groups[group_of[key]].append((n, c))
    return groups


def passk_table(records: Sequence[dict], ks: Iterable[int], metric: str = "correct", by: str = "op") -> list[dict]:
    """Tidy rows ``{by, k, metric, pass@k, problems}``: the unbiased pass@k averaged over problems."""
    rows = []
    for group, nc in sorted(_counts(records, metric, by).items(), key=lambda kv: _order(kv[0])):
        n, c = (np.array(v) for v in zip(*nc))
        for k in ks:
            rows.append({by: group, "k": k, "metric": metric, "pass@k": float(np.mean(pass_at_k(n, c, k))),
                         "problems": len(nc)})
    return rows


def chance_table(problems: Sequence, train_answers: Sequence, ks: Iterable[int], world: WorldConfig) -> list[dict]:
    """Pass@k of guessing: each of k answers drawn from the training answer distribution.

    Computed exactly: if the true answer has training frequency p, k
    independent guesses hit it with probability ``1 - (1 - p)**k``.
    """
    freq = Counter(train_answers)
    total = sum(freq.values())
    by_op: dict[int, list[float]] = defaultdict(list)
    for p in problems:
        by_op[p.op].append(freq.get(p.answer, 0) / total)
    return [
        {"op": op, "range": op_range(op, world), "k": k, "metric": "chance",
         "pass@k": float(np.mean([1 - (1 - q) ** k for q in ps])), "problems": len(ps)}
        for op, ps in sorted(by_op.items()) for k in ks
    ]


def error_taxonomy(records: Sequence[dict], by: str = "op") -> list[dict]:
    """Per group: the share of samples showing each error kind, and the mean process accuracy."""
    groups: dict = defaultdict(list)
    for r in records:
        groups[r[by]].append(r)
    return [
        {by: g, "samples": len(rs), "process_accuracy": float(np.mean([r["process_accuracy"] for r in rs])),
         **{e: float(np.mean([r[e] > 0 for r in rs])) for e in ERRORS}}
        for g, rs in sorted(groups.items())
    ]


def ladder_table(records: Sequence[dict], chance: Sequence[dict], n: int, world: WorldConfig) -> list[dict]:
    """One row per op: pass@1 and pass@n under process verification, answer-only, and chance."""
    rows = []
    wide = defaultdict(dict)
    for metric, label in (("correct", "process"), ("answer_correct", "answer")):
        for r in passk_table(records, (1, n), metric):
            wide[r["op"]][f"{label}_pass@{r['k']}"] = r["pass@k"]
    for r in chance:
        if r["k"] in (1, n):
            wide[r["op"]][f"chance_pass@{r['k']}"] = r["pass@k"]
    for op in sorted(wide):
        rows.append({"op": op, "range": op_range(op, world), **wide[op]})
    return rows


def training_answers(profile: Profile, n: int = 2000) -> list:
    """Answers of ``n`` pretraining problems: the distribution a guesser would copy."""
    world = profile.world
    ops = [op for name in PRETRAIN_MIXTURE for op in world.ops(name)]
    problems = generate_problems(ops=ops, contexts=tuple(world.contexts), n=n, seed=profile.seeds.data,
                                 split="pretrain", style=world.rendering)
    return [p.answer for p in problems]


def examples(records: Sequence[dict], problems: Sequence) -> list[dict]:
    """Per op, the first process-correct and the first incorrect sample, beside the gold solution."""
    picked = {}
    for r in records:
        picked.setdefault((r["op"], r["correct"]), r)
    return [
        {"op": op, "correct": correct, "reason": r["reason"], "text": r["text"],
         "gold": problems[r["problem"]].training_text.split("<solution>", 1)[1]}
        for (op, correct), r in sorted(picked.items())
    ]


def evaluate_ladder(model, tokenizer, profile: Profile) -> dict:
    """Evaluate every op of the profile: per-sample records and the op/range/error tables."""
    problems = eval_problems(profile, Bands.of_world(profile.world).ladder(), profile.world.contexts)
    records = evaluate(model, tokenizer, problems, profile)
    n = profile.evaluation.samples
    ks = list(range(1, n + 1))
    chance = chance_table(problems, training_answers(profile), ks, profile.world)
    return {
        "samples_per_problem": n,
        "ladder": ladder_table(records, chance, n, profile.world),
        "passk_by_op": passk_table(records, ks) + passk_table(records, ks, "answer_correct") + chance,
        "passk_by_range": passk_table(records, ks, by="range") + passk_table(records, ks, "answer_correct", by="range"),
        "errors_by_op": error_taxonomy(records),
        "examples": examples(records, problems),
        "records": records,
    }


def format_ladder(rows: Sequence[dict], n: int) -> str:
    """The ladder as a fixed-width text table."""
    cols = ["process_pass@1", f"process_pass@{n}", "answer_pass@1", f"answer_pass@{n}", "chance_pass@1", f"chance_pass@{n}"]
    lines = ["op  range            " + " ".join(f"{c:>17}" for c in cols)]
    for r in rows:
        lines.append(f"{r['op']:<3} {r['range']:<16} " + " ".join(f"{r.get(c, float('nan')):>17.3f}" for c in cols))
    return "\n".join(lines)


def evaluate_checkpoint(stage: StageOutput, problems: Sequence[Problem], profile: Profile,
                        bands: Bands | None = None) -> list[dict[str, Any]]:
    """Sample and judge ``problems`` with the stage's model: per-sample records, each labelled with its band.

    vLLM loads the checkpoint folder itself; transformers gets the model loaded on the profile's device.
    """
    model = stage.checkpoint if backend(profile) == "vllm" else load_model(stage.checkpoint, choose_device(profile))
    return evaluate(model, load_tokenizer(stage.checkpoint), problems, profile, bands)
