"""Chapter 04's probes: follow-up measurements behind ``cascadekit probe NAME``.

Each probe is a function of a :class:`~cascadekit.chapters.ChapterConfig` (chapter
04's, from ``cascadekit.chapters.resolve("04", scale, overrides, seed)``) that
returns its results as plain data (JSON values); :data:`PROBES` names them and
pairs each with the text table it prints. The committed toy outputs and what
they showed are in ``data/results/04_edge_of_competence/probe/README.md``.

- ``edge-heldout``: does edge RL's training gain carry over to held-out problems?
  The base and the edge-RL model on the held-out ``eval`` problems of the edge
  ops at temperature 0.7 and 1.0, and on the first and last 24 of the arm's own
  ``rl`` training prompts at temperature 1.0 (per op: process-verified and
  answer-only pass@1), plus the arm's training reward over its last quarter.
- ``edge-samples``: what the edge-RL model's right answers by a wrong process look
  like: 4 samples per held-out problem at the lowest edge op, the failure reasons
  of the process-incorrect samples, and up to 4 such samples beside the gold.
- ``edge-unseen``: the base against the edge-RL model on 48 unseen ``rl``-split
  problems per edge op (seed offset 1: problems the arm never drew), 8 samples
  each (per op: pass@1 and pass@8).
- ``hard-pass128``: is the hard range really out of reach at the paper's k? 128
  samples per held-out problem at the profile's own edge ops (``world.ops_edge``:
  toy 6-7, inside the measured hard band) from the profile's base and from a base
  pretrained on twice its tokens (toy: 16M and chapter 03's 32M).

The edge-RL model is chapter 04's edge arm: GRPO from the profile's base on
``rl.samples`` prompts of the measured edge band with ``strict_reward``
(:func:`cascadekit.training.pipeline.grpo`, a cached stage), so a probe after
``cascadekit experiment 04`` at the same settings reuses the chapter's run and
only evaluates. The bands are measured on the base as the chapter does
(:func:`cascadekit.chapters.interplay.base_bands`), which costs one evaluation of
the ladder per probe.
"""
from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cascadekit.chapters import ChapterConfig
from cascadekit.bands import Bands
from cascadekit.evaluation.report import eval_problems, passk_table
from cascadekit.chapters.interplay import band_problems, base_bands, passk_rows, rl_problems
from cascadekit.stages import StageOutput
from cascadekit.evaluation.report import evaluate_checkpoint
from cascadekit.training.pipeline import grpo, pretrained
from cascadekit.profiles import SEED_ROLES, Profile, apply_overrides, seed_inputs
from cascadekit.rewards import strict_reward

#: ``edge-heldout``: sampling temperatures of the held-out evaluation, and how many of the arm's prompts to re-evaluate.
HELDOUT_TEMPERATURES = (0.7, 1.0)
TRAINING_SLICE = 24
#: ``edge-samples``: samples per problem and examples shown.
SAMPLES_PER_PROBLEM, EXAMPLES = 4, 4
#: ``edge-unseen``: problems per op, samples per problem, and the seed offset of problems the arm never drew.
UNSEEN_PER_OP, UNSEEN_SAMPLES, UNSEEN_SEED_OFFSET = 48, 8, 1
#: ``hard-pass128``: samples per problem, the k reported, and the bases' pretraining tokens (x the profile's).
HARD_SAMPLES, HARD_KS, HARD_TOKEN_FACTORS = 128, (1, 16, 128), (1, 2)


@dataclass(frozen=True)
class EdgeArm:
    """The base, its measured bands, the edge arm's prompts and the trained edge-RL model."""

    profile: Profile
    base: StageOutput
    bands: Bands
    prompts: list
    trained: StageOutput


def edge_arm(config: ChapterConfig, work_dir: Path | None = None) -> EdgeArm:
    """Chapter 04's edge arm: measure the bands on the base, then GRPO on the edge band (cached)."""
    profile = config.profile
    base = pretrained(profile)
    bands, _ = base_bands(profile, base, config.range_source)
    prompts = band_problems(profile, bands, "edge")
    with tempfile.TemporaryDirectory(prefix="probe-grpo-") as scratch:  # TRL's files; the model goes to the cache
        trained = grpo(base, prompts, strict_reward, profile, Path(work_dir or scratch))
    return EdgeArm(profile, base, bands, prompts, trained)


def _header(config: ChapterConfig, arm: EdgeArm | None = None) -> dict[str, Any]:
    head = {"scale": config.scale, "seed": config.profile.seed, **seed_inputs(config.profile, *SEED_ROLES),
            "overrides": dict(config.overrides)}
    if arm:
        head |= {"bands": arm.bands.to_dict(), "base_stage": arm.base.key, "edge_stage": arm.trained.key,
                 "prompts": len(arm.prompts), "steps": arm.trained.metrics["steps"]}
    return head


def _by_op(records: Sequence[dict], n: int) -> list[dict[str, Any]]:
    """Per op: problems, process-verified pass@1 and pass@n, answer-only pass@1."""
    return passk_rows(records, n, by=("op",))


# ---------------------------------------------------------------------------
# edge-heldout
# ---------------------------------------------------------------------------


def edge_heldout(config: ChapterConfig, work_dir: Path | None = None) -> dict[str, Any]:
    """Base and edge-RL model on held-out edge problems (two temperatures) and on the arm's own prompts."""
    arm = edge_arm(config, work_dir)
    profile, n = arm.profile, arm.profile.evaluation.samples
    held_out = eval_problems(profile, arm.bands.ops("edge"), profile.world.contexts)
    first, last = arm.prompts[:TRAINING_SLICE], arm.prompts[-TRAINING_SLICE:]

    def row(model: str, stage: StageOutput, split: str, temperature: float, problems: list,
            part: str = "") -> dict[str, Any]:
        at = apply_overrides(profile, {"evaluation.temperature": temperature})
        records = evaluate_checkpoint(stage, problems, at, arm.bands)
        return {"model": model, "split": split, "part": part, "temperature": temperature, "by_op": _by_op(records, n)}

    rows = [row("base", arm.base, "eval", t, held_out) for t in HELDOUT_TEMPERATURES]
    rows.append(row("base", arm.base, "rl", 1.0, first, f"first {len(first)}"))
    rows += [row("edge RL", arm.trained, "eval", t, held_out) for t in HELDOUT_TEMPERATURES]
    rows.append(row("edge RL", arm.trained, "rl", 1.0, first, f"first {len(first)}"))
    rows.append(row("edge RL", arm.trained, "rl", 1.0, last, f"last {len(last)}"))
    rewards = [c["reward"] for c in arm.trained.metrics["curves"]]
    quarter = max(1, len(rewards) // 4)
    return {**_header(config, arm), "samples": n, "held_out_problems": len(held_out),
            "train_reward_last_quarter": sum(rewards[-quarter:]) / quarter, "rows": rows}


def format_edge_heldout(result: Mapping[str, Any]) -> str:
    """``label temperature [(op, pass@1, answer pass@1), ...]`` per row, the training reward after the base's rows."""
    lines = []
    for row in result["rows"]:
        if row["model"] != "base" and not any(line.startswith("train reward") for line in lines):
            lines.append(f"train reward last quarter {result['train_reward_last_quarter']}")
        split = f"{row['split']}-split" + (f"({row['part']})" if row["part"] else "")
        ops = [(r["op"], round(r["pass@1"], 3), round(r["answer_pass@1"], 3)) for r in row["by_op"]]
        lines.append(f"{'base' if row['model'] == 'base' else 'edge-RL'} {split} {row['temperature']} {ops}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# edge-samples
# ---------------------------------------------------------------------------


def edge_samples(config: ChapterConfig, work_dir: Path | None = None) -> dict[str, Any]:
    """The edge-RL model's samples at the lowest edge op: failure reasons, and right answers by a wrong process."""
    arm = edge_arm(config, work_dir)
    profile = apply_overrides(arm.profile, {"evaluation.samples": SAMPLES_PER_PROBLEM})
    op = arm.bands.edge[0]
    problems = eval_problems(profile, [op], profile.world.contexts)
    records = evaluate_checkpoint(arm.trained, problems, profile, arm.bands)
    reasons = Counter(r["reason"].split(":")[0] for r in records if not r["correct"])
    examples = [{"reason": r["reason"], "prompt": problems[r["problem"]].rl_prompt, "text": r["text"],
                 "gold": problems[r["problem"]].training_text.split("<solution>", 1)[1][:400]}
                for r in records if r["answer_correct"] and not r["correct"]][:EXAMPLES]
    return {**_header(config, arm), "op": op, "problems": len(problems), "samples": SAMPLES_PER_PROBLEM,
            "correct": sum(r["correct"] for r in records), "answer_correct": sum(r["answer_correct"] for r in records),
            "failure_reasons": dict(reasons.most_common()), "examples": examples}


def format_edge_samples(result: Mapping[str, Any]) -> str:
    """The failure reasons, then each example: reason, prompt, sample and gold solution."""
    lines = [f"edge-RL model, op {result['op']}: {result['problems']} problems x {result['samples']} samples, "
             f"{result['correct']} process-correct, {result['answer_correct']} with the right answer",
             f"failure reasons {result['failure_reasons']}"]
    for example in result["examples"]:
        lines += [f"---- {example['reason']}", example["prompt"], example["text"], f"GOLD: {example['gold']}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# edge-unseen
# ---------------------------------------------------------------------------


def edge_unseen(config: ChapterConfig, work_dir: Path | None = None) -> dict[str, Any]:
    """Base against edge-RL model on unseen ``rl``-split problems of each edge op: pass@1 and pass@8."""
    arm = edge_arm(config, work_dir)
    profile = apply_overrides(arm.profile, {"evaluation.samples": UNSEEN_SAMPLES})
    contexts, ops = profile.world.contexts, list(arm.bands.ops("edge"))
    share = 1 / (len(contexts) * len(ops))
    problems = rl_problems(profile, [(c, (op, op), share) for c in contexts for op in ops],
                           UNSEEN_PER_OP * len(ops), seed_offset=UNSEEN_SEED_OFFSET)
    rows = [{"model": model, "by_op": _by_op(evaluate_checkpoint(stage, problems, profile, arm.bands), UNSEEN_SAMPLES)}
            for model, stage in (("base", arm.base), ("edge RL", arm.trained))]
    return {**_header(config, arm), "samples": UNSEEN_SAMPLES, "seed_offset": UNSEEN_SEED_OFFSET,
            "problems": len(problems), "rows": rows}


def format_edge_unseen(result: Mapping[str, Any]) -> str:
    """``model [(op, problems, pass@1, pass@8), ...]`` per model."""
    n = result["samples"]
    def ops(row: Mapping[str, Any]) -> list[tuple]:
        return [(r["op"], r["problems"], round(r["pass@1"], 3), round(r[f"pass@{n}"], 3)) for r in row["by_op"]]

    return "\n".join(f"{row['model']} {ops(row)}" for row in result["rows"])


# ---------------------------------------------------------------------------
# hard-pass128
# ---------------------------------------------------------------------------


def hard_pass128(config: ChapterConfig, work_dir: Path | None = None) -> dict[str, Any]:
    """pass@1/16/128 at the profile's edge ops from its base and from a base with twice the pretraining tokens."""
    rows = []
    for factor in HARD_TOKEN_FACTORS:
        tokens = config.profile.pretrain.tokens * factor
        profile = apply_overrides(config.profile, {"pretrain.tokens": tokens, "evaluation.samples": HARD_SAMPLES})
        ops = list(profile.world.ops("edge"))
        base = pretrained(profile)
        records = evaluate_checkpoint(base, eval_problems(profile, ops, profile.world.contexts), profile)
        for op in ops:
            at_op = [r for r in records if r["op"] == op]
            scores = {r["k"]: r["pass@k"] for r in passk_table(at_op, HARD_KS, "correct", by="op")}
            rows.append({"tokens": tokens, "base_stage": base.key, "op": op, "samples": len(at_op),
                         "problems": len({r["problem"] for r in at_op}),
                         "correct": sum(r["correct"] for r in at_op),
                         "answer_correct": sum(r["answer_correct"] for r in at_op),
                         **{f"pass@{k}": scores[k] for k in HARD_KS}})
    return {**_header(config), "samples": HARD_SAMPLES, "rows": rows}


def _tokens(tokens: int) -> str:
    return f"{tokens // 1_000_000}M" if tokens % 1_000_000 == 0 else f"{tokens:,}-token"


def format_hard_pass128(result: Mapping[str, Any]) -> str:
    """One line per (base, op): samples, process-correct, right answers, pass@k."""
    return "\n".join(
        f"{_tokens(r['tokens'])} base, op {r['op']}: {r['samples']} samples, {r['correct']} process-correct, "
        f"{r['answer_correct']} with the right answer; " + ", ".join(f"pass@{k} {r[f'pass@{k}']:.4f}" for k in HARD_KS)
        for r in result["rows"])


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """A probe: the function that measures, the text table of its result, one line on what it asks."""

    run: Callable[..., dict[str, Any]]
    format: Callable[[Mapping[str, Any]], str]
    question: str


PROBES: dict[str, Probe] = {
    "edge-heldout": Probe(edge_heldout, format_edge_heldout,
                          "does edge RL's training gain carry over to held-out problems?"),
    "edge-samples": Probe(edge_samples, format_edge_samples,
                          "what do the edge-RL model's right answers by a wrong process look like?"),
    "edge-unseen": Probe(edge_unseen, format_edge_unseen,
                         "does the gain show on many unseen rl-split problems per edge op?"),
    "hard-pass128": Probe(hard_pass128, format_hard_pass128,
                          "is the hard range out of reach even at pass@128, on a 1x and a 2x-token base?"),
}
