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
half of it was too little (:data:`CHAPTER_OVERRIDES`).

Run the toy reproduction (writes ``data/results/05_context_transfer/``)::

    python -m cascadekit.experiments.context_transfer --scale toy --threads 1
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from transformers import PreTrainedTokenizerBase

from cascadekit.artifacts import cache_root, get_or_build
from cascadekit.atomic import atomic_open
from cascadekit.experiments.common import (add_out_argument, eval_problems, evaluate_rows, load_model, rl_problems,
                                        run_rl)
from cascadekit.profiles import (Profile, add_scale_arguments, apply_overrides, load_profile, parse_overrides,
                                 set_threads)
from cascadekit.results import default_root, markdown_table
from cascadekit.world import Mixture, MixtureComponent, Problem, sample_mixture

CHAPTER = "05_context_transfer"
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

#: Per-scale settings of this chapter, applied over the profile (a user's overrides win).
#: Toy: the profile's pretraining budget (16M tokens, chapter 03's base) for each of the four
#: variants, about 55 minutes each on one of 2 cores. Half that budget (8M) was tried first and
#: showed no transfer for any exposure: the sources themselves were too weak beyond op 2 to give
#: B a composition to borrow (kept in ``data/results/05_context_transfer/8M-tokens``). RL: 32
#: steps of 8 prompts x 8 rollouts at twice the profile's learning rate, as in chapters 04 and
#: 07; evaluation: 16 problems per op x 32 samples (pass@32 stands for the paper's pass@128).
CHAPTER_OVERRIDES: dict[str, dict[str, Any]] = {
    "toy": {"evaluation.problems_per_op": 16, "evaluation.samples": 32,
            "rl.samples": 256, "rl.prompts_per_step": 8, "rl.lr": 1e-4},
}

PAPER = {
    0.0: "fails on long B problems (pass@128 near 0 beyond op 2)",
    0.001: "fails on long B problems",
    0.01: "substantial pass@128 up to op 20 after RL",
    0.1: "substantial pass@128 up to op 20 after RL",
}


def chapter_profile(profile: Profile, overrides: Mapping[str, Any] | None = None) -> Profile:
    """``profile`` with this chapter's per-scale settings, then the caller's ``overrides``, applied."""
    return apply_overrides(apply_overrides(profile, CHAPTER_OVERRIDES.get(profile.name, {})), overrides or {})


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
                                         probes, profile.seed + 7, "pretrain", world.rendering), tokenizer)
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
    return sample_mixture(mixture, round((tokens or profile.pretrain.tokens) / mean), seed=profile.seed,
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
    """Cache key of a pretrained variant: every setting that shapes it, and the exposure."""
    base = profile.hash("world", "tokenizer", "model", "pretrain", "seed")
    recipe = json.dumps({"base": base, "sources": list(SOURCES), "target": TARGET, "b_op": B_OP, "b_share": b_share})
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def pretrain_variant(profile: Profile, tokenizer: PreTrainedTokenizerBase, b_share: float, dest: Path,
                     run_dir: Path) -> None:
    """Pretrain a fresh model on the exposure corpus; save model, tokenizer, loss log, corpus stats and wall time."""
    from cascadekit.models import build_model
    from cascadekit.training.pretrain import LOSS_LOG, pack, train_lm

    started = time.perf_counter()
    problems = pretraining_corpus(profile, tokenizer, b_share)
    stats = corpus_stats(problems, tokenizer, b_share)
    blocks = pack(tokenizer([p.training_text for p in problems])["input_ids"], profile.pretrain.seq_len,
                  tokenizer.eos_token_id)
    model = build_model(profile.model, tokenizer, seed=profile.seed)
    log = train_lm(model, blocks, profile, run_dir)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    (dest / LOSS_LOG).write_text(json.dumps(log))
    (dest / "corpus.json").write_text(json.dumps({**stats.__dict__, "actual_b_share": stats.actual_b_share,
                                                  "build_wall_s": round(time.perf_counter() - started, 1)}))


def cached_variant(profile: Profile, b_share: float) -> Path:
    """The folder of the pretrained variant with B at ``b_share``, built on first use."""
    from cascadekit.training.pretrain import cached_tokenizer

    tokenizer = cached_tokenizer(profile)
    key = variant_key(profile, b_share)
    run_dir = cache_root() / "runs" / f"pretrain-transfer-{key}"
    return get_or_build("pretrain-transfer", key, lambda d: pretrain_variant(profile, tokenizer, b_share, d, run_dir))


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
    """Pretrain (cached), evaluate B, RL, evaluate the sources and B; one variant's metrics and wall times.

    ``pretrain_wall_s`` is the time to get the checkpoint: the build when it ran
    here, about 0 when it came from the cache (the build's own time is then in
    ``corpus["build_wall_s"]`` for builds that recorded it).

    The sources are only evaluated after RL (to show the composition that B could borrow);
    before RL only B is evaluated, which is what the finding is about.
    """
    from cascadekit.training.pretrain import read_loss_log
    from cascadekit.tokenizer import load_tokenizer

    started = time.perf_counter()
    checkpoint = cached_variant(profile, b_share)
    pretrain_s = time.perf_counter() - started
    tokenizer = load_tokenizer(checkpoint)
    model = load_model(checkpoint)
    problems = transfer_eval_problems(profile)

    started = time.perf_counter()
    _, before = evaluate_rows(model, tokenizer, [p for p in problems if p.context == TARGET], profile)
    rl = run_rl(model, tokenizer, rl_mixture_problems(profile), profile, work_dir / f"rl-{b_share:g}")
    records, after = evaluate_rows(rl.model, tokenizer, problems, profile)
    return {
        "b_share": b_share,
        "corpus": json.loads((checkpoint / "corpus.json").read_text()),
        "loss_log": read_loss_log(checkpoint),
        "before": before,
        "after": after,
        "rl_curves": rl.curves.to_dict(orient="records"),
        "rl_steps": int(rl.config.max_steps),
        "samples": records,
        "pretrain_wall_s": round(pretrain_s, 1),
        "rl_wall_s": round(rl.train_seconds, 1),
        "rl_and_eval_wall_s": round(time.perf_counter() - started, 1),
    }


def run(profile: Profile, work_dir: str | Path, shares: Sequence[float] = RUN_ORDER,
        after_each: Callable[[dict[str, Any]], None] | None = None,
        done: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Every exposure variant in ``shares`` order; the chapter's metrics (per-sample records under ``samples``).

    ``after_each`` gets the metrics so far after every variant (the command line
    writes results each time, so a long run cut short keeps what it finished);
    variants in ``done`` (from :func:`finished_variants`) are kept, not rerun.
    """
    work_dir = Path(work_dir)
    started = time.perf_counter()
    metrics: dict[str, Any] = {
        "profile": profile.to_dict(),
        "chapter_overrides": CHAPTER_OVERRIDES.get(profile.name, {}),
        "samples_per_problem": profile.evaluation.samples,
        "shares_planned": list(shares),
        "variants": list(done),
    }
    for share in shares:
        if any(v["b_share"] == share for v in metrics["variants"]):
            continue
        metrics["variants"].append(run_variant(profile, share, work_dir))
        metrics["variants"].sort(key=lambda v: v["b_share"])
        metrics["wall_s"] = round(time.perf_counter() - started, 1)
        if after_each:
            after_each(metrics)
    return metrics


def finished_variants(profile: Profile, root: Path | None = None) -> list[dict[str, Any]]:
    """The variants already written under ``root`` (``data/results``) by a run with the same profile (to resume)."""
    import gzip

    from cascadekit.results import RESULTS_DIR, load_metrics

    metrics = load_metrics(CHAPTER, root)
    if not metrics or metrics.get("profile") != json.loads(json.dumps(profile.to_dict())):
        return []
    with gzip.open((root or RESULTS_DIR) / CHAPTER / "samples.jsonl.gz", "rt") as fh:
        samples = [json.loads(line) for line in fh]
    return [{**v, "samples": [{k: x for k, x in r.items() if k != "b_share"} for r in samples
                              if r["b_share"] == v["b_share"]]} for v in metrics["variants"]]


# ---------------------------------------------------------------------------
# Tables and figures
# ---------------------------------------------------------------------------


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
    import matplotlib.pyplot as plt

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
    import matplotlib.pyplot as plt

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


def verdict(metrics: Mapping[str, Any]) -> str:
    """Did the direction reproduce? B's mean pass@n above op 2 after RL, exposed (>= 1%) against not (<= 0.1%).

    Stated from the numbers alone, so a notebook reading committed results
    says what they show, including "cannot tell" and "incomplete".
    """
    n = metrics["samples_per_problem"]

    def long_b(v: Mapping[str, Any]) -> float:
        rows = [r[f"pass@{n}"] for r in v["after"] if r["context"] == TARGET and r["op"] > B_OP]
        return sum(rows) / len(rows) if rows else 0.0

    groups = {name: [long_b(v) for v in metrics["variants"] if test(v["b_share"])]
              for name, test in (("exposed", lambda b: b >= 0.01), ("unexposed", lambda b: b <= 0.001))}
    if not all(groups.values()):
        ran = ", ".join(f"{v['b_share']:.1%}" for v in metrics["variants"])
        return f"Incomplete: only the exposures {ran} were run; the finding needs both >= 1% and <= 0.1%."
    exposed, unexposed = max(groups["exposed"]), max(groups["unexposed"])
    if exposed == unexposed == 0:
        return (f"Cannot tell: no variant solved a B problem above op {B_OP} after RL (pass@{n} = 0), "
                "so this budget shows no transfer for any exposure.")
    if min(groups["exposed"]) > max(groups["unexposed"]):
        return (f"Reproduced: after RL, B's mean pass@{n} above op {B_OP} is {min(groups['exposed']):.2f}-"
                f"{max(groups['exposed']):.2f} with >= 1% exposure against at most {unexposed:.2f} with <= 0.1%.")
    return (f"Not reproduced: B's mean pass@{n} above op {B_OP} after RL does not separate the exposures "
            f"(>= 1%: {groups['exposed']}, <= 0.1%: {groups['unexposed']}).")


# ---------------------------------------------------------------------------
# Command line: the committed toy run
# ---------------------------------------------------------------------------


def write_results(metrics: dict[str, Any], command: str, notes: str = "", root: Path | None = None) -> None:
    """Metrics (per-sample records gzipped beside them), figures and the paper-vs-run table."""
    import gzip

    from cascadekit.results import results_dir, save_chapter_results

    folder = results_dir(CHAPTER, root)
    with atomic_open(folder / "samples.jsonl.gz", "wb") as raw, gzip.open(raw, "wt") as fh:
        for v in metrics["variants"]:
            fh.writelines(json.dumps({"b_share": v["b_share"], **r}) + "\n" for r in v["samples"])
    slim = {**metrics, "variants": [{k: x for k, x in v.items() if k != "samples"} for v in metrics["variants"]]}
    figures = {"transfer_b": plot_transfer(slim), **{f"transfer_{c.lower()}": plot_transfer(slim, c) for c in SOURCES},
               "rl_reward": plot_rl_reward(slim)}
    save_chapter_results(CHAPTER, slim, figures, "Finding 2: context B exposure in pretraining, after identical RL",
                         paper_vs_run_rows(slim), command, f"{verdict(slim)}\n\n{notes}", root)


def main(argv: Sequence[str] | None = None) -> None:
    """Run every exposure variant at a scale and write the chapter's results."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    add_scale_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("runs/05_context_transfer"))
    parser.add_argument("--notes", default="", help="text under the paper-vs-run table")
    add_out_argument(parser)
    parser.add_argument("--resume", action="store_true", help="keep the variants already in the results folder")
    parser.add_argument("--shares", type=float, nargs="+", default=list(RUN_ORDER), help="exposures to run, in order")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    profile = chapter_profile(load_profile(args.scale, {"seed": args.seed}), parse_overrides(args.overrides))
    print(profile.summary(), file=sys.stderr, flush=True)
    command = " ".join(["python -m cascadekit.experiments.context_transfer", *(sys.argv[1:] if argv is None else argv)])
    root = args.out or default_root(args.scale)
    done = finished_variants(profile, root) if args.resume else []
    metrics = run(profile, args.work, args.shares, after_each=lambda m: write_results(m, command, args.notes, root),
                  done=done)
    print(markdown_table(summary_rows(metrics)))


if __name__ == "__main__":
    main()
