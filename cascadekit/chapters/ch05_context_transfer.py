"""Finding 2: transfer to a new context needs that context's primitives in pretraining.

The paper (section 4) pretrains on context A (animals-zoo) over the whole op
range plus context B (teachers-school) **at op 2 only**, with B at 0%, 0.1%, 1%
or 10% of the pretraining tokens, then runs the *same* RL for every variant:
50% A and 50% B problems over the whole op range. Only the B-exposed variants
(1% and 10%) reach substantial pass@128 on long B problems; 0% and 0.1% do not.

Why op-2 problems are enough to matter: they hold B's atomic primitives, the
names (``algebra teachers in Riverside``) and how a B statement reads. The
composition (long dependency chains) is learned on A; RL can only recombine
what pretraining put in. A model that never read B has untrained embeddings
for B's words and cannot even copy a B name into a solution step.

Toy mapping: the source contexts (:data:`SOURCES`: A and C, where the paper
has A alone) cover the profile's in-distribution ops (2-5 at toy scale, the
paper's 2-20), B only op 2; RL and evaluation cover the same ops. Exposure is
counted in **tokens**, as in the paper: ``b`` is B's share of the packed
pretraining tokens, so the toy 16M-token corpus at 0.1% holds about 16,000 B tokens
(some 260 op-2 B problems). Each variant gets the base's full pretraining budget;
half of it was too little (the chapter's settings in ``cascadekit/chapters/chapters.yaml``).

Run the toy reproduction (writes ``data/results/05_context_transfer/``)::

    cascadekit experiment 05 --scale toy --threads 1
"""
from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
from transformers import PreTrainedTokenizerBase

from cascadekit.artifacts import cache_root
from cascadekit.atomic import atomic_write_json, atomic_write_jsonl_gz
from cascadekit.chapters import ChapterConfig
from cascadekit.evaluation.report import eval_problems
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Choice, Number
from cascadekit.exercises.committed import committed_metrics
from cascadekit.chapters.interplay import RL_REWARD, change_row, passk_rows, per_problem, rl_problems
from cascadekit.engine.models import build_model
from cascadekit.stages import CHECKPOINT, Stage, StageOutput, run_stage
from cascadekit.evaluation.report import evaluate_checkpoint
from cascadekit.training.pipeline import grpo
from cascadekit.profiles import Profile, seed_inputs
from cascadekit.results import markdown_table
from cascadekit.training.pretrain import LOSS_LOG, cached_tokenizer, pack, read_loss_log, train_lm
from cascadekit.world import Mixture, MixtureComponent, Problem, sample_mixture

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

TARGET = "B"  #: the long-tail context whose exposure varies
#: The contexts pretrained over the whole op range. Where the kit departs from the paper (A
#: alone): at toy scale a corpus of A alone did not teach the model to copy names from the
#: question within 8M tokens (loss 0.77, process-verified pass@8 = 0 on A at every op, against
#: 0.43 and a working ladder for chapter 03's three-context base at the same point). With few
#: names, guessing one costs little, so copying is learned late; a second source context
#: doubles the names. B stays the only context held back.
SOURCES = ("A", "C")
B_OP = 2  #: the only op at which B appears in pretraining
B_SHARES = (0.0, 0.001, 0.01, 0.1)  #: the paper's exposures, as shares of pretraining tokens
RUN_ORDER = (0.0, 0.1, 0.01, 0.001)  #: the sharpest contrast first, so a cut-short run still says something
RL_SHARE_B = 0.5  #: the RL mixture: half the sources, half B, over the whole op range

PAPER = {
    0.0: "fails on long B problems (pass@128 near 0 beyond op 2)",
    0.001: "fails on long B problems",
    0.01: "substantial pass@128 up to op 20 after RL",
    0.1: "substantial pass@128 up to op 20 after RL",
}


# ---------------------------------------------------------------------------
# The pretraining corpus: B's exposure in tokens
# ---------------------------------------------------------------------------


def mean_tokens(problems: Sequence[Problem], tokenizer: PreTrainedTokenizerBase) -> float:
    """Mean packed length of a problem's training text: its tokens plus the EOS that separates documents."""
    ids = tokenizer([p.training_text for p in problems])["input_ids"]
    return sum(len(x) + 1 for x in ids) / len(ids)


def component_lengths(profile: Profile, tokenizer: PreTrainedTokenizerBase, probes: int = 200) -> dict[str, float]:
    """Mean packed tokens of a source problem (in-distribution ops) and of an op-2 B problem, from ``probes`` each.

    Keyed ``"source"`` (the source contexts in equal shares) and :data:`TARGET`.
    """
    world = profile.world
    parts = {"source": [(c, world.ops_in_distribution) for c in SOURCES], TARGET: [(TARGET, (B_OP, B_OP))]}
    return {
        name: mean_tokens(sample_mixture(Mixture(tuple(MixtureComponent(c, ops, 1 / len(comps)) for c, ops in comps)),
                                         probes, profile.seeds.data + 7, "pretrain", world.rendering), tokenizer)
        for name, comps in parts.items()
    }


def exposure_mixture(a_ops: tuple[int, int], b_share: float, lengths: Mapping[str, float]) -> Mixture:
    """The pretraining mixture with B (op 2 only) at ``b_share`` of the **tokens**, the sources over ``a_ops``.

    Mixture shares count problems. An op-2 B problem is shorter than the
    average source problem, so B's share of problems must be larger than its share
    of tokens: ``q_B = (b / len_B) / (b / len_B + (1 - b) / len_source)``.
    The sources split the rest equally.
    """
    q_b = 0.0
    if b_share > 0:
        weight_b, weight_a = b_share / lengths[TARGET], (1 - b_share) / lengths["source"]
        q_b = weight_b / (weight_a + weight_b)
    sources = tuple(MixtureComponent(c, a_ops, (1 - q_b) / len(SOURCES)) for c in SOURCES)
    return Mixture(sources + ((MixtureComponent(TARGET, (B_OP, B_OP), q_b),) if q_b else ()))


def pretraining_corpus(profile: Profile, tokenizer: PreTrainedTokenizerBase, b_share: float,
                       tokens: int | None = None) -> list[Problem]:
    """Distinct ``pretrain``-split problems filling ``tokens`` (default ``pretrain.tokens``) once, B at ``b_share``."""
    lengths = component_lengths(profile, tokenizer)
    mixture = exposure_mixture(profile.world.ops_in_distribution, b_share, lengths)
    mean = sum(c.share * lengths[TARGET if c.context == TARGET else "source"] for c in mixture.components)
    return sample_mixture(mixture, round((tokens or profile.pretrain.tokens) / mean), seed=profile.seeds.data,
                          split="pretrain", style=profile.world.rendering)


@dataclass(frozen=True)
class CorpusStats:
    """What a pretraining corpus actually holds: the exposure as measured, not as asked."""

    b_share: float  # asked, in tokens
    tokens: int  # packed tokens of all problems (EOS included)
    b_tokens: int
    problems: int
    b_problems: int
    b_ops: tuple[int, ...]
    a_ops: tuple[int, ...]

    @property
    def actual_b_share(self) -> float:
        return self.b_tokens / self.tokens if self.tokens else 0.0


def corpus_stats(problems: Sequence[Problem], tokenizer: PreTrainedTokenizerBase, b_share: float) -> CorpusStats:
    """Count tokens and problems per context in a corpus (B's real share of the tokens)."""
    lengths = [len(ids) + 1 for ids in tokenizer([p.training_text for p in problems])["input_ids"]]
    b = [(p, n) for p, n in zip(problems, lengths) if p.context == TARGET]
    return CorpusStats(
        b_share=b_share, tokens=sum(lengths), b_tokens=sum(n for _, n in b), problems=len(problems),
        b_problems=len(b), b_ops=tuple(sorted({p.op for p, _ in b})),
        a_ops=tuple(sorted({p.op for p in problems if p.context in SOURCES})),
    )


# ---------------------------------------------------------------------------
# Pretraining one variant (cached by its mixture)
# ---------------------------------------------------------------------------


def variant_key(profile: Profile, b_share: float) -> str:
    """Cache key of a pretrained variant: every setting that shapes it, and the exposure.

    A variant is a pretrained base: the data seed shapes it, the training seed never does.
    """
    base = profile.hash("world", "tokenizer", "model", "pretrain", "seed")
    recipe = json.dumps({"base": base, "sources": list(SOURCES), "target": TARGET, "b_op": B_OP, "b_share": b_share,
                         **seed_inputs(profile, "data")})
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def pretrain_variant(profile: Profile, tokenizer: PreTrainedTokenizerBase, b_share: float, dest: Path,
                     run_dir: Path) -> None:
    """Pretrain a fresh model on the exposure corpus; save model, tokenizer, loss log, corpus stats and wall time."""
    started = time.perf_counter()
    problems = pretraining_corpus(profile, tokenizer, b_share)
    stats = corpus_stats(problems, tokenizer, b_share)
    blocks = pack(tokenizer([p.training_text for p in problems])["input_ids"], profile.pretrain.seq_len,
                  tokenizer.eos_token_id)
    model = build_model(profile.model, tokenizer, seed=profile.seed)
    log = train_lm(model, blocks, profile, run_dir)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    atomic_write_json(dest / LOSS_LOG, log, indent=None)
    atomic_write_json(dest / "corpus.json", {**stats.__dict__, "actual_b_share": stats.actual_b_share,
                                             "build_wall_s": round(time.perf_counter() - started, 1)}, indent=None)


def cached_variant(profile: Profile, b_share: float) -> Path:
    """The folder of the pretrained variant with B at ``b_share``, built on first use."""
    tokenizer = cached_tokenizer(profile)
    key = variant_key(profile, b_share)
    run_dir = cache_root() / "runs" / f"pretrain-transfer-{key}"

    def build(folder: Path) -> dict[str, Any]:
        pretrain_variant(profile, tokenizer, b_share, folder, run_dir)  # its corpus stats are a file of the checkpoint
        return {}

    inputs = {"recipe": "pretrain-transfer", "b_share": b_share, "sources": list(SOURCES), "target": TARGET}
    stage = Stage("pretrain-transfer", inputs, build, fixed_key=key, recipe=RECIPE, holds=CHECKPOINT)
    return run_stage(stage).checkpoint


# ---------------------------------------------------------------------------
# The same RL for every variant, and B's pass@k per op before and after
# ---------------------------------------------------------------------------


def rl_mixture_problems(profile: Profile) -> list[Problem]:
    """The RL prompts (identical for every variant): ``rl.samples`` problems, half sources and half B, all ops."""
    ops = profile.world.ops_in_distribution
    sources = [(c, ops, (1 - RL_SHARE_B) / len(SOURCES)) for c in SOURCES]
    return rl_problems(profile, [*sources, (TARGET, ops, RL_SHARE_B)], profile.rl.samples)


def transfer_eval_problems(profile: Profile) -> list[Problem]:
    """Held-out problems of each source context and of B at every in-distribution op."""
    ops = profile.world.ops("in_distribution")
    return [p for context in (*SOURCES, TARGET) for p in eval_problems(profile, ops, (context,))]


def run_variant(profile: Profile, b_share: float, work_dir: Path) -> dict[str, Any]:
    """Pretrain (cached), evaluate B, RL (a cached stage), evaluate the sources and B; one variant's metrics.

    ``pretrain_wall_s`` is the time to get the checkpoint: the build when it ran
    here, about 0 when it came from the cache (the build's own time is then in
    ``corpus["build_wall_s"]`` for builds that recorded it).

    The sources are only evaluated after RL (to show the composition that B could borrow);
    before RL only B is evaluated, which is what the finding is about.
    """
    started = time.perf_counter()
    variant = StageOutput(cached_variant(profile, b_share), variant_key(profile, b_share))
    pretrain_s = time.perf_counter() - started
    problems = transfer_eval_problems(profile)
    n = profile.evaluation.samples
    started = time.perf_counter()
    before = passk_rows(evaluate_checkpoint(variant, [p for p in problems if p.context == TARGET], profile), n)
    trained = grpo(variant, rl_mixture_problems(profile), RL_REWARD, profile, work_dir / f"rl-{b_share:g}")
    records = evaluate_checkpoint(trained, problems, profile)
    return {
        "b_share": b_share,
        "corpus": json.loads((variant.checkpoint / "corpus.json").read_text()),
        "loss_log": read_loss_log(variant.checkpoint),
        "before": before,
        "after": passk_rows(records, n),
        "rl_curves": trained.metrics["curves"],
        "rl_steps": trained.metrics["steps"],
        "rl_stage": trained.key,
        "samples": records,
        "pretrain_wall_s": round(pretrain_s, 1),
        "rl_wall_s": trained.metrics["train_s"],
        "rl_and_eval_wall_s": round(time.perf_counter() - started, 1),
    }


def run(config: ChapterConfig, work_dir: str | Path, shares: Sequence[float] = RUN_ORDER) -> dict[str, Any]:
    """Every exposure variant in ``shares`` order; the chapter's metrics (per-sample records under ``samples``).

    Each variant's pretraining and RL are cached stages, so a run cut short resumes
    where it stopped: finished variants cost only their evaluation.
    """
    profile, work_dir = config.profile, Path(work_dir)
    variants = sorted((run_variant(profile, share, work_dir) for share in shares), key=lambda v: v["b_share"])
    return {
        "profile": profile.to_dict(),
        "samples_per_problem": profile.evaluation.samples,
        "shares_planned": list(shares),
        "variants": variants,
    }


def summary_rows(metrics: Mapping[str, Any], context: str = TARGET) -> list[dict[str, Any]]:
    """One row per (exposure, op) for ``context``: pass@1 and pass@n before and after RL."""
    n = metrics["samples_per_problem"]
    rows = []
    for v in metrics["variants"]:
        before = {r["op"]: r for r in v["before"] if r["context"] == context}
        for r in (r for r in v["after"] if r["context"] == context):
            b = before[r["op"]]
            rows.append({"b_share": f"{v['b_share']:.1%}", "op": r["op"],
                         "pass@1 before": b["pass@1"], f"pass@{n} before": b[f"pass@{n}"],
                         "pass@1 after": r["pass@1"], f"pass@{n} after": r[f"pass@{n}"]})
    return rows


def plot_transfer(metrics: Mapping[str, Any], context: str = TARGET):
    """pass@n per op of ``context`` after RL (solid) and before (dashed), one colour per exposure."""
    n = metrics["samples_per_problem"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for i, v in enumerate(metrics["variants"]):
        label = f"B at {v['b_share']:.1%}"
        for ax, k in zip(axes, (1, n)):
            for stage, style in (("after", "-o"), ("before", ":x")):
                rows = sorted((r for r in v[stage] if r["context"] == context), key=lambda r: r["op"])
                if not rows:
                    continue
                ax.plot([r["op"] for r in rows], [r[f"pass@{k}"] for r in rows], style, color=f"C{i}",
                        label=f"{label} ({stage} RL)" if k == 1 else None, alpha=1 if stage == "after" else 0.6)
    for ax, k in zip(axes, (1, n)):
        ax.set(xlabel="operations", ylabel=f"process-verified pass@{k}", title=f"context {context}: pass@{k}",
               ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
    fig.legend(loc="lower center", ncol=4, fontsize=7, bbox_to_anchor=(0.5, -0.12))
    return fig


def plot_rl_reward(metrics: Mapping[str, Any]):
    """The RL reward per step of each variant (the same prompts for all)."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, v in enumerate(metrics["variants"]):
        curves = v["rl_curves"]
        ax.plot([c["step"] for c in curves], [c["reward"] for c in curves], color=f"C{i}",
                label=f"B at {v['b_share']:.1%}")
    ax.set(xlabel="RL step", ylabel="mean reward (0.2 outcome + 0.8 process)", title="RL on 50% A + 50% B")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def paper_vs_run_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per exposure: the paper's outcome beside B's pass@n at op 2 and at the top op, before and after RL."""
    n = metrics["samples_per_problem"]
    rows = []
    for v in metrics["variants"]:
        after = {r["op"]: r for r in v["after"] if r["context"] == TARGET}
        before = {r["op"]: r for r in v["before"] if r["context"] == TARGET}
        top = max(after)
        rows.append({
            "B exposure (tokens)": f"{v['b_share']:.1%} (actual {v['corpus']['actual_b_share']:.2%})",
            "paper (after RL)": PAPER.get(v["b_share"], ""),
            f"op {B_OP} pass@{n} before/after": f"{before[B_OP][f'pass@{n}']:.2f} / {after[B_OP][f'pass@{n}']:.2f}",
            f"op {top} pass@{n} before/after": f"{before[top][f'pass@{n}']:.2f} / {after[top][f'pass@{n}']:.2f}",
            f"ops {B_OP + 1}-{top} mean pass@{n} after": sum(after[o][f"pass@{n}"] for o in after if o > B_OP)
            / max(1, len([o for o in after if o > B_OP])),
        })
    return rows


def long_b(variant: Mapping[str, Any]) -> dict[str, Any]:
    """A variant's per-problem counts on B above op 2 after RL (the transfer the finding is about)."""
    return {"per_problem": per_problem([{**r, "range": "long B"} for r in variant["samples"]
                                        if r["context"] == TARGET and r["op"] > B_OP])}


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The paper's split, exposed against unexposed, on B above op 2 after RL, each with a paired interval.

    Every variant is scored on the same problems, so each row is a paired
    bootstrap over those problems. Only variants that were run can be compared, and only from
    their per-sample records (a fresh run's; the committed metrics keep the rows under ``paper_vs_run``).
    """
    n = metrics["samples_per_problem"]
    by_share = {v["b_share"]: long_b(v) for v in metrics["variants"] if v.get("samples")}
    rows = []
    for after, before, direction, paper in ((0.001, 0.0, "flat", "both fail"),
                                            (0.01, 0.001, "up", "1% transfers, 0.1% does not"),
                                            (0.1, 0.001, "up", "10% transfers, 0.1% does not")):
        if after in by_share and before in by_share:
            rows.append(change_row(f"B pass@{n} above op {B_OP} after RL: {after:.1%} minus {before:.1%} exposure",
                                   paper, by_share[before], by_share[after], "long B", n, direction))
    return rows


# ---------------------------------------------------------------------------
# The chapter's results
# ---------------------------------------------------------------------------


RESULTS_TITLE = "Finding 2: context B exposure in pretraining, after identical RL"


def notes(metrics: Mapping[str, Any]) -> str:
    """Every exposure's outcome beside the paper's."""
    return "### Every exposure against the paper\n\n" + markdown_table(paper_vs_run_rows(metrics))


def figures(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """B's pass@k per op before and after RL, the same for each source context, and the RL reward."""
    return {"transfer_b": plot_transfer(metrics),
            **{f"transfer_{c.lower()}": plot_transfer(metrics, c) for c in SOURCES},
            "rl_reward": plot_rl_reward(metrics)}


def committed(metrics: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics with the claims, the per-sample records gzipped beside them (``samples.jsonl.gz``)."""
    atomic_write_jsonl_gz(folder / "samples.jsonl.gz",
                          ({"b_share": v["b_share"], **r} for v in metrics["variants"] for r in v["samples"]))
    return {**metrics, "paper_vs_run": claims(metrics),
            "variants": [{k: x for k, x in v.items() if k != "samples"} for v in metrics["variants"]]}


# ---------------------------------------------------------------------------
# Exercises
# ---------------------------------------------------------------------------


def _actual_share() -> float:
    variants = committed_metrics("05_context_transfer")["variants"]
    return next(v for v in variants if v["b_share"] == 0.01)["corpus"]["actual_b_share"]


SHARE_OPTIONS = tuple(str(share) for share in B_SHARES)  #: the exposures as an answer writes them ("0.01")


def _best_share() -> str:
    def transfer(variant: dict) -> float:
        rows = [r for r in variant["after"] if r["context"] == "B" and r["op"] >= 3]
        return statistics.mean(r["pass@32"] for r in rows)
    best = max(committed_metrics("05_context_transfer")["variants"], key=transfer)
    return next(s for s in SHARE_OPTIONS if float(s) == best["b_share"])


EXERCISES = [
    Exercise("05.1", "Asked share, measured share",
             "The 1% variant asked for 1% of its pretraining tokens from context B. What share did its corpus "
             "actually hold, in the committed run? Within 2%.",
             Number(_actual_share, rel=0.02), "look at the variant whose `b_share` is 0.01 and its `corpus` "
             "record; whole problems make it differ from the asked share.", "answer = None  # a fraction"),
    Exercise("05.2", "Which exposure transferred?",
             "In the committed run, which exposure (`b_share`) gives the highest mean pass@32 on context B at ops "
             "3 and above after RL? Answer with the share as written: "
             + ", ".join(repr(s) for s in SHARE_OPTIONS) + ".",
             Choice(SHARE_OPTIONS, _best_share), "average the `after` rows with context B and op >= 3 per variant.",
             "answer = None  # e.g. \"0.0\"", homework=True),
]
