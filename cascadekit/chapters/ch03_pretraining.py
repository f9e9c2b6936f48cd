"""Chapter 03: pretrain the profile's base (a cached stage) and measure its pass@k ladder.

Regenerate the committed toy results (``data/results/03_pretraining``) with::

    cascadekit experiment 03 --scale toy --threads 2

The base is the stage every Part I chapter starts from; on a machine that has
built it once (about 40 minutes on 2 cores at toy scale) this only evaluates.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

from cascadekit import plots
from cascadekit.artifacts import shipped_root
from cascadekit.atomic import atomic_write_jsonl_gz
from cascadekit.chapters import ChapterConfig
from cascadekit.claims import bootstrap_interval
from cascadekit.bands import RANGES
from cascadekit.passk import pass_at_k
from cascadekit.evaluation.report import evaluate_ladder
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Number
from cascadekit.exercises.committed import committed_metrics
from cascadekit.engine.models import count_parameters
from cascadekit.training.pipeline import pretrained
from cascadekit.engine.runtime import load_model
from cascadekit.engine.tokenizer import load_tokenizer
from cascadekit.training.pretrain import read_loss_log

#: What the paper reports for its base (pass@128; ops 2-10 / 11-14 / 15-20), qualitatively.
PAPER = {"in_distribution": "high, near saturation at pass@128", "edge": "partial", "hard": "near zero"}


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """The cached base (built on first use) and its ladder: per-sample records and the op/band/error tables."""
    profile = config.profile
    started = time.perf_counter()
    base = pretrained(profile, rebuild=config.rebuild_base)
    train_s = time.perf_counter() - started
    model, tokenizer = load_model(base.checkpoint), load_tokenizer(base.checkpoint)
    started = time.perf_counter()
    results = evaluate_ladder(model, tokenizer, profile)
    provenance = shipped_root() / "pretrain" / base.key / "provenance.json"  # a shipped base says how long it took
    build_s = json.loads(provenance.read_text())["wall_s"] if provenance.is_file() else round(train_s, 1)
    return {
        **results, "profile": profile.to_dict(), "pretrain_tokens": profile.pretrain.tokens,
        "checkpoint": base.key, "vocab_size": len(tokenizer), "parameters": count_parameters(model),
        "parameters_without_embeddings": count_parameters(model, embeddings=False),
        "loss_log": [list(row) for row in read_loss_log(base.checkpoint)],
        "train_wall_s": round(train_s, 1), "base_build_wall_s": build_s,
        "eval_wall_s": round(time.perf_counter() - started, 1),
    }


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Process-verified pass@1 and pass@n per band, each with a 95% bootstrap interval over problems.

    It reads the per-sample ``records`` of a fresh run (the committed metrics keep them in
    ``samples.jsonl.gz`` and the rows under ``paper_vs_run``).
    """
    n = metrics["samples_per_problem"]
    counts: dict[tuple[str, int], list[int]] = {}
    for r in metrics["records"]:
        tally = counts.setdefault((r["range"], r["problem"]), [0, 0])
        tally[0] += 1
        tally[1] += int(r["correct"])
    rows = []
    for band in RANGES:
        problems = [v for (b, _), v in counts.items() if b == band]
        for k in (1, n):
            if problems:
                estimate, low, high = bootstrap_interval([pass_at_k(m, c, k) for m, c in problems])
                value, interval = round(estimate, 3), f"[{low:.3f}, {high:.3f}]"
            else:
                value, interval = "no problems", ""
            rows.append({"quantity": f"process-verified pass@{k}, {band.replace('_', '-')}",
                         "paper": PAPER[band] if k == n else "", "this run": value, "95% interval": interval,
                         "problems": len(problems)})
    return rows


RESULTS_TITLE = "Chapter 03: the pretraining ladder"


def notes(metrics: Mapping[str, Any]) -> str:
    """The model's and the corpus's size beside the paper's, and where the intervals come from."""
    return (f"{metrics['parameters']:,} parameters, {metrics['pretrain_tokens']:,} pretraining tokens; the paper's "
            f"base is 100M parameters on 10B tokens, scored at pass@128 where this run has "
            f"pass@{metrics['samples_per_problem']}. Intervals: bootstrap over the band's evaluation problems.")


def figures(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The pretraining loss, the pass@k ladder per op, and pass@k curves per op."""
    return {"loss_curve": plots.loss_curve(metrics["loss_log"]),
            "ladder": plots.ladder(metrics["ladder"], metrics["samples_per_problem"]),
            "passk_curves": plots.passk_curves(metrics["passk_by_op"])}


def committed(metrics: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics without the per-sample records (written to ``samples.jsonl.gz`` beside them), with the claims."""
    atomic_write_jsonl_gz(folder / "samples.jsonl.gz", metrics["records"])
    return {**{k: v for k, v in metrics.items() if k != "records"}, "paper_vs_run": claims(metrics)}


# ---------------------------------------------------------------------------
# Exercises
# ---------------------------------------------------------------------------


def _luckiest_op() -> int:
    ladder = committed_metrics("03_pretraining")["ladder"]
    return max(ladder, key=lambda r: r["answer_pass@1"] - r["process_pass@1"])["op"]


def _tokens_per_second() -> float:
    metrics = committed_metrics("03_pretraining")
    return metrics["pretrain_tokens"] / metrics["base_build_wall_s"]


EXERCISES = [
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
]
