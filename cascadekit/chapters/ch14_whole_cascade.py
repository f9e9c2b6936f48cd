"""Chapter 14: the whole cascade, its stage table and forgetting matrix, joint RL, and RLHF's place in the order.

Regenerate the toy results (``data/results/14_whole_cascade``) with::

    cascadekit experiment 14 --scale toy --train-seed 0,1,2 --jobs 2

Three arms, every step a cached stage (:mod:`cascadekit.chapters.cascade`, the stage table as data):

* **cascade** — SFT → RLHF → IF-RL → Math RL → Code RL → SWE RL, each stage the
  one its own chapter built (shipped at toy, so this arm trains nothing);
* **RLHF last** — the same stage functions in the order IF-RL → Math RL → Code
  RL → SWE RL → RLHF, to test the paper's "RLHF first makes later reasoning RL
  more efficient";
* **joint** — one GRPO run from SFT over all five RL domains mixed, with as
  many prompts of each domain as the cascade trained on and each domain's own
  reward.

After every stage of every arm the stage table runs (a cached ``stage-table``
stage, so a reader's rerun reads it). The chapter reports the stage table, the
forgetting matrix (each domain's change in each stage), each stage's lift of
its own domain, the cascade against joint RL (scores and the cost of mixed
verifiers in one batch) and the two orders.

``cascadekit cascade`` runs one more arm as a lever (:func:`cascadekit.chapters.cascade_arms.lever`): another
order, another setting or joint RL over some domains, with the stage table after
each stage and, with ``--against``, its last stage against the committed arms.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from cascadekit.chapters import ChapterConfig
from cascadekit.chapters.cascade import (ORDER, TARGETS, CascadeStage, DomainReward, joint_rl, judge,
                                         largest_reward_model, run_cascade)
from cascadekit.claims import bootstrap_interval, holm_rows, seed_row
from cascadekit.domains import chat_records, domains, draw_tasks
from cascadekit.evaluation.stage_claims import (CEILING, change_row, compact, forgetting_matrix, kept_domains_row,
                                                paired_change, picked)
from cascadekit.evaluation.stage_table import PAPER as PAPER_FINAL
from cascadekit.evaluation.replicates import combine_runs, replicates, seed_notes
from cascadekit.evaluation.stage_table import cached_stage_table, stage_markdown
from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Choice, Function, Number
from cascadekit.profiles import Profile
from cascadekit.results import load_metrics, markdown_table, write_sample_spread
from cascadekit.stages import StageOutput
from cascadekit.training.chat_base import chat_base
from cascadekit.training.sft import sft_stages
from cascadekit.training.swe_rl import swe_tasks

FOLDER = "14_whole_cascade"
CASCADE, RLHF_LAST, JOINT = "cascade", "RLHF last", "joint"
#: The order ablation: RLHF moved from first to last.
RLHF_LAST_ORDER = (*ORDER[1:], ORDER[0])
DOMAINS = ("general", "instructions", "math", "code", "tools", "swe")
REASONING = ("math", "code", "swe")
KEPT_SAMPLES = 120
#: The paper's 8B unified model after SFT, after RLHF and at the end of the cascade, from the summary in
#: shared/seeds (None: not in the summary).
PAPER_STAGES = {
    "general": {"SFT": 70.0, "RLHF": 90.1, "final": 87.9},
    "instructions": {"SFT": None, "RLHF": None, "final": 90.2},
    "math": {"SFT": 72.8, "RLHF": 75.0, "final": 80.1},
    "code": {"SFT": 56.7, "RLHF": 67.2, "final": 71.1},
    "tools": {"SFT": None, "RLHF": None, "final": 64.4},
    "swe": {"SFT": None, "RLHF": None, "final": 37.2},
}


def stage_record(stage: CascadeStage, profile: Profile) -> dict[str, Any]:
    """What the results keep of one cascade stage: keys, prompts, build time and each run's curves."""
    return {"name": stage.name, "key": stage.checkpoint.key, "prompts": stage.prompts(profile),
            "build_s": round(stage.train_s, 1),
            "runs": [{"key": r.key, "steps": r.metrics["steps"], "train_s": r.metrics["train_s"],
                      "curves": [{k: c[k] for k in ("step", "reward", "completion_length") if k in c}
                                 for c in r.metrics["curves"]],
                      **{k: r.metrics[k] for k in ("phases", "streaming_rewards") if k in r.metrics}}
                     for r in stage.runs]}


def joint_record(joint: StageOutput) -> dict[str, Any]:
    """What the results keep of the joint run: curves (one reward column per domain), step phases, reward time."""
    m = joint.metrics
    return {"key": joint.key, "steps": m["steps"], "train_s": m["train_s"], "prompts": m["prompts"],
            "curves": m["curves"], "phases": m.get("phases", []), "reward_s": m.get("reward_s", {})}


def before_rl_s(profile: Profile) -> dict[str, float]:
    """Build seconds of what the RL stages need: the SFT stages, the reward model and the SWE judge."""
    return {"SFT": round(sum(s.metrics["train_s"] for s in sft_stages(chat_base(profile), profile)), 1),
            "reward model": largest_reward_model(profile).metrics["train_s"],
            "SWE judge": judge(profile).metrics["train_s"]}


def harder_suite(profile: Profile) -> list[dict[str, Any]]:
    """The reasoning domains at the difficulty their RL stages train on, each prompt in both modes.

    ``sft.eval_tasks`` held-out prompts each: math at the top op of ``math_rl.ops``,
    code at the top op of ``code_rl.ops``, SWE in files with the most other
    functions SWE RL trains on (``swe_rl.contexts``). The stage table's own suite
    (``sft.ops``) is near its ceiling for code and SWE already after SFT, where a
    stage can only lose; this is where the paper's benchmarks sit, at the edge.
    """
    n, records = profile.sft.eval_tasks, []
    for name, op in (("math", profile.math_rl.ops[1]), ("code", profile.code_rl.ops[1])):
        for task in draw_tasks(domains()[name], n, profile.seeds.eval, "eval", [op]):
            records.extend(chat_records(task))
    for task in swe_tasks(profile, n, "eval", profile.seeds.eval, [max(profile.swe_rl.contexts)]):
        records.extend(chat_records(task))
    return records


def run(config: ChapterConfig, work_dir: str | Path) -> dict[str, Any]:
    """The three arms and a stage table after every stage of each."""
    profile, work_dir = config.profile, Path(work_dir)
    tables: dict[str, dict[str, dict[str, Any]]] = {CASCADE: {}, RLHF_LAST: {}}
    harder: dict[str, dict[str, dict[str, Any]]] = {CASCADE: {}, RLHF_LAST: {}}
    suite = harder_suite(profile)
    timings: dict[str, float] = {}

    def evaluated(arm: str):
        def after(stage: CascadeStage) -> None:
            tables[arm][stage.name] = cached_stage_table(stage.checkpoint, profile, stage.name)
            harder[arm][stage.name] = cached_stage_table(stage.checkpoint, profile, stage.name, suite)
            timings[f"table {arm}: {stage.name}_s"] = tables[arm][stage.name]["wall_s"]
            timings[f"harder {arm}: {stage.name}_s"] = harder[arm][stage.name]["wall_s"]
        return after

    arms: dict[str, list[CascadeStage]] = {}
    for arm, order in ((CASCADE, ORDER), (RLHF_LAST, RLHF_LAST_ORDER)):
        started = time.perf_counter()
        arms[arm] = run_cascade(profile, work_dir / arm.replace(" ", "-"), order, evaluated(arm))
        timings[f"{arm}_s"] = round(time.perf_counter() - started, 1)
    prompts = {TARGETS[s.name][0]: s.prompts(profile) for s in arms[CASCADE][1:]}
    started = time.perf_counter()
    joint = joint_rl(profile, prompts, work_dir / "joint")
    tables[JOINT] = {"SFT": tables[CASCADE]["SFT"], "joint RL": cached_stage_table(joint, profile, "joint RL")}
    harder[JOINT] = {"SFT": harder[CASCADE]["SFT"], "joint RL": cached_stage_table(joint, profile, "joint RL", suite)}
    timings[f"{JOINT}_s"] = round(time.perf_counter() - started, 1)
    return {
        "rows": {arm: [row for t in named.values() for row in t["rows"]] for arm, named in tables.items()},
        "per_sample": {arm: compact(named) for arm, named in tables.items()},
        "harder_rows": {arm: [row for t in named.values() for row in t["rows"]] for arm, named in harder.items()},
        "harder": {arm: compact(named) for arm, named in harder.items()},
        "completions": {name: [s["completion"] for s in t["samples"]] for name, t in tables[CASCADE].items()},
        "stages": {arm: [stage_record(s, profile) for s in stages] for arm, stages in arms.items()},
        "joint": joint_record(joint), "joint_prompts": prompts, "before_rl_s": before_rl_s(profile),
        "timings": timings, "profile": profile.to_dict(), "chapter_settings": dict(config.settings),
        "overrides": dict(config.overrides),
    }


def think_of(mode: str | None) -> bool | None:
    """A target's mode as a stage-table filter: True for think, False for no_think, None for both modes."""
    return None if mode is None else mode == "think"


def stage_names(metrics: Mapping[str, Any], arm: str) -> list[str]:
    """An arm's evaluated stages, in order (SFT first)."""
    return list(metrics["per_sample"][arm])


def forgetting(metrics: Mapping[str, Any], arm: str = CASCADE) -> list[dict[str, Any]]:
    """The forgetting matrix: each domain's paired change (both modes) over each stage, with its interval."""
    per_sample, names = metrics["per_sample"][arm], stage_names(metrics, arm)
    cells = []
    for before, after in zip(names, names[1:]):
        for domain in DOMAINS:
            estimate, low, high = paired_change(per_sample[before], per_sample[after], names=[domain])
            cells.append({"stage": after, "domain": domain, "change": estimate, "low": low, "high": high,
                          "own": TARGETS[after][0] == domain})
    return cells


def forgetting_rows(metrics: Mapping[str, Any], arm: str = CASCADE) -> list[dict[str, Any]]:
    """The forgetting matrix as a table: one row per stage, each domain's change with its interval."""
    rows: dict[str, dict[str, Any]] = {}
    for c in forgetting(metrics, arm):
        mark = " (own)" if c["own"] else ""
        rows.setdefault(c["stage"], {"stage": c["stage"]})[c["domain"]] = (
            f"{c['change']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]{mark}")
    return list(rows.values())


def forgetting_by_mode(metrics: Mapping[str, Any], arm: str = CASCADE) -> list[dict[str, Any]]:
    """The forgetting matrix per domain and mode, one row per stage and domain, the ceiling cells marked.

    These are the cells "keeps the other domains" is judged on: a cell marked
    "ceiling" scored at least :data:`cascadekit.evaluation.stage_claims.CEILING`
    before the stage and is left out of that claim.
    """
    per_sample, names, rows = metrics["per_sample"][arm], stage_names(metrics, arm), []
    for before, after in zip(names, names[1:]):
        by_domain: dict[str, dict[str, Any]] = {}
        for c in forgetting_matrix([per_sample[before]], [per_sample[after]], DOMAINS):
            own = " (own)" if TARGETS[after][0] == c["domain"] else ""
            mark = " ceiling" if c["at_ceiling"] else ""
            row = by_domain.setdefault(c["domain"], {"stage": after, "domain": c["domain"] + own})
            row[c["mode"]] = f"{c['change']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] from {c['before']:.2f}{mark}"
        rows += by_domain.values()
    return rows


def stage_scores(metrics: Mapping[str, Any], arm: str = CASCADE) -> list[dict[str, Any]]:
    """The stage table as one row per stage: each (domain, mode)'s score."""
    rows = []
    for name in stage_names(metrics, arm):
        row: dict[str, Any] = {"stage": name}
        for r in metrics["rows"][arm]:
            if r["stage"] == name:
                row[f"{r['domain']} {r['mode']}"] = r["score"]
        rows.append(row)
    return rows


def paper_vs_stages(metrics: Mapping[str, Any]) -> str:
    """The paper's intermediate checkpoints beside this run's stages (percent; think / no_think)."""
    names = stage_names(metrics, CASCADE)
    rows = {(r["stage"], r["domain"], r["mode"]): r for r in metrics["rows"][CASCADE]}
    head = ["domain", "paper benchmark", "paper SFT", "paper RLHF", "paper final", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for domain, paper in PAPER_STAGES.items():
        cells = ["n/a" if paper[k] is None else f"{paper[k]:.1f}" for k in ("SFT", "RLHF", "final")]
        ours = [" / ".join(f"{100 * rows[(n, domain, m)]['score']:.0f}" for m in ("think", "no_think")) for n in names]
        lines.append(f"| {domain} | {PAPER_FINAL[domain]['benchmark']} | " + " | ".join(cells + ours) + " |")
    return "\n".join(lines)


def _per_prompt(samples: Sequence[Mapping[str, Any]], names: Sequence[str] | None, think: bool | None) -> np.ndarray:
    return np.array([float(s["score"]) for s in picked(samples, names, think)])


#: Where a claim reads its per-sample results: the stage table's suite (``per_sample``), or the harder one.
SUITES = ("per_sample", "harder")


def harder_label(metrics: Mapping[str, Any], names: Sequence[str] = REASONING) -> str:
    """What the harder suite asks of ``names``, from the run's profile."""
    p = metrics["profile"]
    parts = {"math": f"math op {p['math_rl']['ops'][1]}", "code": f"code op {p['code_rl']['ops'][1]}",
             "swe": f"SWE context {max(p['swe_rl']['contexts'])}"}
    return "harder suite: " + ", ".join(parts[name] for name in names)


def order_gains(metrics: Mapping[str, Any], stage: str, domain: str, think: bool | None,
                suite: str = "per_sample") -> tuple[np.ndarray, np.ndarray]:
    """A stage's per-prompt gain on its domain (after minus before it): in the cascade, then in the RLHF-last order."""
    gains = []
    for arm in (CASCADE, RLHF_LAST):
        names, per_sample = stage_names(metrics, arm), metrics[suite][arm]
        before = names[names.index(stage) - 1]
        gains.append(_per_prompt(per_sample[stage], [domain], think) - _per_prompt(per_sample[before], [domain], think))
    return gains[0], gains[1]


def gain_difference(metrics: Mapping[str, Any], stage: str, domain: str, think: bool | None,
                    suite: str = "per_sample") -> tuple[float, ...]:
    """(estimate, low, high): a stage's paired gain on its domain in the cascade minus in the RLHF-last order.

    Each order's gain is per prompt (:func:`order_gains`); the two gains pair up
    prompt by prompt, so the interval is a paired bootstrap of their difference.
    """
    return bootstrap_interval(*order_gains(metrics, stage, domain, think, suite))


def final(metrics: Mapping[str, Any], arm: str, suite: str = "per_sample") -> list[Mapping[str, Any]]:
    """An arm's per-sample results after its last stage, on ``suite`` (``per_sample`` or ``harder``)."""
    return metrics[suite][arm][stage_names(metrics, arm)[-1]]


def _mean(samples: Sequence[Mapping[str, Any]], domain: str, think: bool) -> float:
    return round(float(np.mean([float(s["score"]) for s in picked(samples, [domain], think)])), 3)


def against_arms(metrics: Mapping[str, Any], samples: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Another cascade's last stage against each of chapter 14's arms, per suite, domain and mode.

    ``samples`` maps a suite (``per_sample``, ``harder``) to that run's
    per-sample results after its last stage; each cell is the paired change
    (this run minus the arm's final model) over the same prompts. This is how a
    lever (another order, another length, another start) is measured against
    the committed arms without rerunning them. A ValueError if ``metrics`` is not
    chapter 14's or asked other prompts (another scale or seed).
    """
    rows = []
    for suite, ours in samples.items():
        try:
            arms = {arm: final(metrics, arm, suite) for arm in metrics[suite]}
        except (KeyError, TypeError, IndexError, AttributeError):
            raise ValueError(f"not chapter 14's metrics: no final stage of every arm on suite {suite!r}") from None
        if not arms:
            raise ValueError(f"not chapter 14's metrics: no arm on suite {suite!r}")
        for arm, theirs in arms.items():
            for domain in REASONING if suite == "harder" else DOMAINS:
                for think in (True, False):
                    try:
                        estimate, low, high = paired_change(theirs, ours, names=[domain], think=think)
                    except (KeyError, TypeError) as err:
                        raise ValueError(f"not chapter 14's metrics: a sample of arm {arm!r} lacks {err}") from None
                    except ValueError as err:
                        raise ValueError(f"{arm} on suite {suite!r}: {err} (another scale or seed?)") from None
                    mode = "think" if think else "no_think"
                    rows.append({"suite": suite, "against": arm, "domain": domain, "mode": mode,
                                 "this run": _mean(ours, domain, think), "arm": _mean(theirs, domain, think),
                                 "this run minus arm": round(estimate, 3), "95% interval": f"[{low:.3f}, {high:.3f}]",
                                 "reading": "higher" if low > 0 else "lower" if high < 0 else "cannot tell"})
    return rows


def check_against(metrics: Any, suites: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """A ValueError now, before anything trains, wherever :func:`against_arms` would fail after the last stage.

    ``suites`` maps each suite the run will evaluate to the records it will ask.
    :func:`against_arms` runs on placeholder results of exactly those prompts
    (each record's domain and mode, score 0), so a file of the wrong shape, or
    one that asked other prompts (another scale or seed), is refused up front
    instead of after the whole cascade trained.
    """
    against_arms(metrics, {suite: [{"domain": r["domain"], "think": r["think"], "score": 0.0} for r in records]
                           for suite, records in suites.items()})


def lever_rows(folder: Path, domain: str = "swe", suite: str = "harder") -> list[dict[str, Any]]:
    """The committed levers (``levers/*/rows.json``, from ``cascadekit cascade --against``) on one domain.

    One row per lever and mode: the lever's score, then its paired change against
    each committed arm with the 95% interval, and "higher" or "lower" where the
    interval excludes no change.
    """
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("levers/*/rows.json")):
        by_mode: dict[str, dict[str, Any]] = {}
        for r in json.loads(path.read_text()).get("against", []):
            if r["suite"] != suite or r["domain"] != domain:
                continue
            row = by_mode.setdefault(r["mode"], {"lever": path.parent.name, "mode": r["mode"],
                                                 "this run": r["this run"]})
            reading = "" if r["reading"] == "cannot tell" else f" {r['reading']}"
            row[f"minus {r['against']}"] = f"{r['this run minus arm']:+.3f} {r['95% interval']}{reading}"
        rows += by_mode.values()
    return rows


def _where(metrics: Mapping[str, Any], suite: str, names: Sequence[str] = REASONING,
           elsewhere: str = "stage-table suite") -> str:
    return harder_label(metrics, names) if suite == "harder" else elsewhere


def primary_suite(domain: str) -> str:
    """Where a stage's primary claim is read: the harder suite for the reasoning domains, the stage table's otherwise.

    Fixed by the suites' design, not by their results: the stage table's code and
    SWE cells start at or near their ceiling, and the harder suite was built to sit
    at the reasoning domains' edge.
    """
    return "harder" if domain in REASONING else "per_sample"


def own_domain_rows(tables: Mapping[str, Sequence[Mapping[str, Sequence[Mapping[str, Any]]]]],
                    where: Callable[[str, str], str], rlhf_style: bool = False) -> list[dict[str, Any]]:
    """Each RL stage's lift of its own domain (reasoning stages on every suite there is) and what it did to the
    others, over training seeds: ``tables[suite][i]`` is seed i's stage -> samples on ``suite``.

    One primary claim per stage (:func:`primary_suite`, else the stage table's).
    ``rlhf_style`` adds RLHF's cut of general's length and repetition. "Keeps the
    other domains" is flat over the other domains' cells below the ceiling
    (:func:`cascadekit.evaluation.stage_claims.kept_domains_row`). ``where(suite,
    domain)`` names the suite in a claim.
    """
    names, seeds = list(tables["per_sample"][0]), tables["per_sample"]
    own_rows, style_rows, kept_rows = [], [], []
    for before, after in zip(names, names[1:]):
        if after not in TARGETS:
            continue
        domain, mode = TARGETS[after]
        own = [suite for suite in SUITES if suite in tables and (suite == "per_sample" or domain in REASONING)]
        primary = primary_suite(domain) if primary_suite(domain) in own else "per_sample"
        for suite in own:
            own_rows.append(change_row(f"{after} lifts its own domain ({domain}, {mode or 'both modes'}; "
                                       f"{where(suite, domain)})",
                                       f"each stage lifts its own benchmark ({PAPER_FINAL[domain]['benchmark']})",
                                       [t[before] for t in tables[suite]], [t[after] for t in tables[suite]], "up",
                                       names=[domain], think=think_of(mode), primary=suite == primary))
        if rlhf_style and after == "RLHF":
            style_rows += [change_row(f"RLHF cuts general's {field} (both modes)", "RLHF cuts verbosity and repetition",
                                      [t[before] for t in seeds], [t[after] for t in seeds], "down", field,
                                      names=["general"]) for field in ("tokens", "repetition")]
        kept_rows.append(kept_domains_row(f"{after} keeps the other domains", "sequential RL forgets little",
                                          [t[before] for t in seeds], [t[after] for t in seeds],
                                          [d for d in DOMAINS if d != domain]))
    return own_rows + style_rows + kept_rows


def arm_tables(metrics: Mapping[str, Any], arm: str = CASCADE) -> dict[str, list[Mapping[str, Any]]]:
    """Per suite, each training seed's stage -> samples of ``arm`` (one seed for a one-seed run)."""
    return {suite: [m[suite][arm] for m in replicates(metrics)] for suite in SUITES}


def stage_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each RL stage of the cascade: its own domain's lift and the other domains kept (:func:`own_domain_rows`)."""
    return own_domain_rows(arm_tables(metrics), lambda suite, domain: _where(metrics, suite, [domain]))


def arm_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The whole cascade against SFT and against joint RL, on both suites."""
    runs, rows = replicates(metrics), []
    for suite in SUITES:
        where = _where(metrics, suite, elsewhere="every domain")
        cascade = [final(m, CASCADE, suite) for m in runs]
        rows.append(change_row(f"the whole cascade lifts the model: final minus SFT ({where}, both modes)",
                               "every benchmark above the SFT model", [m[suite][CASCADE]["SFT"] for m in runs],
                               cascade, "up"))
        rows.append(change_row(f"cascade beats joint RL at equal prompts: final scores ({where}, both modes)",
                               "domain-wise cascade instead of mixed-domain RL", [final(m, JOINT, suite) for m in runs],
                               cascade, "up"))
    return rows


def order_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """RLHF first (the cascade) against RLHF last: Math RL's gain, its answers' length, the final reasoning scores."""
    runs = replicates(metrics)
    rows = [seed_row(f"RLHF first makes Math RL more efficient: Math RL's gain (math, think; "
                     f"{_where(metrics, suite, ['math'])}), RLHF first minus RLHF last",
                     "RLHF first helps later reasoning RL",
                     [np.subtract(*order_gains(m, "Math RL", "math", True, suite)) for m in runs], "up")
            for suite in SUITES]
    rows.append(change_row("RLHF first leaves shorter reasoning: mean tokens after Math RL (math, think), "
                           "RLHF first minus RLHF last", "RLHF cuts verbosity, so reasoning RL is more efficient",
                           [m["per_sample"][RLHF_LAST]["Math RL"] for m in runs],
                           [m["per_sample"][CASCADE]["Math RL"] for m in runs], "down", "tokens", names=["math"],
                           think=True))
    rows += [change_row(f"RLHF first ends higher on reasoning: final (math, code, SWE; think; "
                        f"{_where(metrics, suite)}), RLHF first minus RLHF last",
                        "the paper's order, general to specialised",
                        [final(m, RLHF_LAST, suite) for m in runs], [final(m, CASCADE, suite) for m in runs], "up",
                        names=list(REASONING), think=True) for suite in SUITES]
    return rows


#: What each training seed's run keeps in a combined result (:func:`combine`): what the claims read.
REPLICATE_FIELDS = ("per_sample", "harder")


def combine(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One result of several training seeds' runs (:func:`cascadekit.evaluation.replicates.combine_runs`): each
    seed's three arms from its own SFT, every seed with the same arms and stages (a ValueError names one that is not)."""
    shapes = {seed: {suite: {arm: list(stages) for arm, stages in m[suite].items()} for suite in SUITES}
              for seed, m in per_seed.items()}
    first = shapes[min(shapes)] if shapes else None
    for seed, shape in sorted(shapes.items()):
        if shape != first:
            raise ValueError(f"training seed {seed}'s run has other arms or stages than the first seed's")
    return combine_runs(per_seed, REPLICATE_FIELDS)


def claims(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chapter's paper-vs-run rows, each with a 95% interval, a verdict from it and a Holm column.

    A reasoning stage's own-domain lift is read on both suites: the stage
    table's, near its ceiling for code and SWE, and the harder one. The five
    primary claims (one per RL stage) are corrected together, every other row in
    the second family.
    """
    return holm_rows(stage_rows(metrics) + arm_rows(metrics) + order_rows(metrics))


def harder_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The harder suite's score after every stage of every arm (think / no_think per reasoning domain)."""
    rows = []
    for arm in (CASCADE, RLHF_LAST, JOINT):
        for name in stage_names(metrics, arm):
            if arm != CASCADE and name == "SFT":
                continue
            row: dict[str, Any] = {"arm": arm, "stage": name}
            for domain in REASONING:
                cells = [r for r in metrics["harder_rows"][arm] if r["stage"] == name and r["domain"] == domain]
                row[domain] = " / ".join(f"{r['score']:.2f}" for r in sorted(cells, key=lambda r: r["mode"] != "think"))
            rows.append(row)
    return rows


def _phase_shares(parts: Sequence[Mapping[str, Any]]) -> tuple[float, float] | None:
    """(generating, scoring) shares of a run's training time, from its phases or its streamed-reward summary."""
    phases = [p for r in parts for p in r.get("phases", [])[1:]]  # the first step warms up
    if phases:
        total = sum(p["step_s"] for p in phases)
        return sum(p["generate_s"] for p in phases) / total, sum(p["score_s"] for p in phases) / total
    streamed = [r for r in parts if "streaming_rewards" in r]
    if streamed:
        total = sum(r["train_s"] for r in streamed)
        return (sum(r["streaming_rewards"]["generate_s"] for r in streamed) / total,
                sum(r["streaming_rewards"]["score_s"] for r in streamed) / total)
    return None


def cost_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Seconds per GRPO step of each cascade stage and of joint RL, and, where recorded, where a step's time goes.

    The phase split is recorded for GRPO stages built since the kit kept it, and
    for streamed-reward stages (Code RL) by their summary; the shipped RLHF, IF-RL,
    Math RL and SWE RL stages predate it.
    """
    runs = [(s["name"], s["prompts"], s["runs"]) for s in metrics["stages"][CASCADE][1:]]
    runs.append(("joint RL", metrics["joint"]["prompts"], [metrics["joint"]]))
    rows = []
    for name, prompts, parts in runs:
        steps = sum(r["steps"] for r in parts)
        shares = _phase_shares(parts)
        rows.append({"run": name, "prompts": prompts, "steps": steps,
                     "s per step": sum(r["train_s"] for r in parts) / max(steps, 1),
                     "generating": f"{shares[0]:.0%}" if shares else "not recorded",
                     "waiting for rewards": f"{shares[1]:.0%}" if shares else "not recorded"})
    return rows


def reward_time_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Joint RL: seconds each domain's reward spent scoring, and its share of all scoring."""
    spent = metrics["joint"]["reward_s"]
    total = sum(spent.values()) or 1.0
    return [{"domain reward": name, "seconds": s, "share": s / total} for name, s in spent.items()]


def joint_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Final score per domain and mode: cascade, RLHF last, joint, and cascade minus joint with its interval."""
    rows = []
    for domain in DOMAINS:
        for think in (True, False):
            row: dict[str, Any] = {"domain": domain, "mode": "think" if think else "no_think"}
            for arm in (CASCADE, RLHF_LAST, JOINT):
                row[arm] = float(np.mean(_per_prompt(final(metrics, arm), [domain], think)))
            estimate, low, high = paired_change(final(metrics, JOINT), final(metrics, CASCADE), names=[domain],
                                                think=think)
            row["cascade - joint [95% CI]"] = f"{estimate:+.3f} [{low:+.3f}, {high:+.3f}]"
            rows.append(row)
    return rows


def plot_stage_table(metrics: Mapping[str, Any], arm: str = CASCADE) -> Figure:
    """Heatmap: every (domain, mode)'s score after every stage."""
    rows = stage_scores(metrics, arm)
    columns = [f"{d} {m}" for d in DOMAINS for m in ("think", "no_think")]
    values = np.array([[row.get(c, np.nan) for c in columns] for row in rows])
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 1.8))
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 else "black")
    ax.set_xticks(range(len(columns)), columns, rotation=35, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [r["stage"] for r in rows])
    ax.set_title(f"Stage table ({arm}): score after each stage")
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    return fig


def plot_forgetting(metrics: Mapping[str, Any], arm: str = CASCADE) -> Figure:
    """Heatmap: each domain's change over each stage (both modes); * where the interval excludes no change."""
    cells = forgetting(metrics, arm)
    stages = list(dict.fromkeys(c["stage"] for c in cells))
    values = np.array([[next(c["change"] for c in cells if c["stage"] == s and c["domain"] == d) for d in DOMAINS]
                       for s in stages])
    bound = max(0.1, float(np.nanmax(np.abs(values))))
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(stages) + 1.8))
    image = ax.imshow(values, cmap="RdBu", vmin=-bound, vmax=bound, aspect="auto")
    for c in cells:
        i, j = stages.index(c["stage"]), DOMAINS.index(c["domain"])
        mark = "*" if c["low"] > 0 or c["high"] < 0 else ""
        ax.text(j, i, f"{c['change']:+.2f}{mark}", ha="center", va="center", fontsize=8,
                fontweight="bold" if c["own"] else "normal")
    ax.set_xticks(range(len(DOMAINS)), DOMAINS)
    ax.set_yticks(range(len(stages)), stages)
    ax.set_title(f"Forgetting matrix ({arm}): change over each stage (bold: its own domain)")
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    return fig


def _smoothed(values: Sequence[float], window: int = 5) -> np.ndarray:
    x = np.array(values, dtype=float)
    return np.array([np.nanmean(x[max(0, i - window + 1):i + 1]) if np.isfinite(x[max(0, i - window + 1):i + 1]).any()
                     else np.nan for i in range(len(x))])


def plot_joint_curves(metrics: Mapping[str, Any]) -> Figure:
    """Per domain: the reward on its prompts against the share of its prompts trained, cascade stage vs joint RL."""
    joint = metrics["joint"]["curves"]
    stages = {TARGETS[s["name"]][0]: s for s in metrics["stages"][CASCADE][1:]}
    fig, axes = plt.subplots(1, len(stages), figsize=(3.2 * len(stages), 3.2), squeeze=False)
    for ax, (domain, stage) in zip(axes[0], stages.items()):
        cascade = [c["reward"] for r in stage["runs"] for c in r["curves"]]
        ax.plot(np.linspace(0, 1, len(cascade)), _smoothed(cascade), label=f"cascade: {stage['name']}")
        column = next((k for k in joint[0] if k.startswith(f"reward/{domain}:")), None) if joint else None
        if column:  # the same share of the domain's prompts per window as the cascade's 5 steps
            window = max(5, round(5 * len(joint) / max(len(cascade), 1)))
            ax.plot(np.linspace(0, 1, len(joint)), _smoothed([c.get(column, np.nan) for c in joint], window),
                    label="joint RL")
        ax.set(title=domain, xlabel="share of the domain's prompts trained")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("batch mean reward (running mean)")
    fig.tight_layout()
    return fig


RESULTS_TITLE = "Chapter 14: the whole cascade"


def committed(metrics: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The metrics without the cascade's completions; a spread of its per-sample results in ``samples.jsonl``.

    A combined result (:func:`combine`) has no completions of its own: each seed's folder keeps its spread.
    """
    if "completions" not in metrics:
        return dict(metrics)
    names = stage_names(metrics, CASCADE)
    write_sample_spread(folder, [{"stage": name, **s, "completion": c}
                                 for name in names
                                 for s, c in zip(metrics["per_sample"][CASCADE][name],
                                                 metrics["completions"][name])], KEPT_SAMPLES)
    return {k: v for k, v in metrics.items() if k != "completions"}


def figures(metrics: Mapping[str, Any]) -> dict[str, Figure]:
    """The stage table, the forgetting matrix of both orders and joint RL's curves beside the cascade's."""
    return {"stage_table": plot_stage_table(metrics), "forgetting": plot_forgetting(metrics),
            "joint_curves": plot_joint_curves(metrics), "forgetting_rlhf_last": plot_forgetting(metrics, RLHF_LAST)}


def seed_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training seed: the mean score (every domain and mode) of SFT and of each arm's final model, per suite."""
    rows = []
    for seed, m in zip(metrics.get("train_seeds", ["the one run"]), replicates(metrics)):
        row: dict[str, Any] = {"train seed": seed}
        for suite in SUITES:
            where = "harder" if suite == "harder" else "stage table"
            row[f"SFT ({where})"] = round(float(np.mean([float(x["score"]) for x in m[suite][CASCADE]["SFT"]])), 3)
            for arm in m[suite]:
                row[f"{arm} ({where})"] = round(float(np.mean([float(x["score"]) for x in final(m, arm, suite)])), 3)
        rows.append(row)
    return rows


def notes(metrics: Mapping[str, Any]) -> str:
    """The paper's checkpoints beside the stages, the stage tables, the forgetting matrix, the costs and timings;
    over several training seeds each seed's final scores first (the tables are then the first seed's)."""
    build = [{"what": k, "seconds": v} for k, v in metrics["before_rl_s"].items()]
    build += [{"what": s["name"], "seconds": s["build_s"]} for s in metrics["stages"][CASCADE][1:]]
    build.append({"what": "total", "seconds": sum(b["seconds"] for b in build)})
    seeds = seed_notes(metrics, seed_rows, "Each training seed: mean score of SFT and of each arm's final model "
                                           "(every table below is the first seed's run)")
    return (f"{seeds.table}### The paper's intermediate checkpoints and this run's stages (percent; think / no_think)\n\n"
            f"{paper_vs_stages(metrics)}\n\n"
            f"### Stage table of the cascade\n\n{stage_markdown(metrics['rows'][CASCADE])}\n\n"
            f"### Forgetting matrix (change over each stage, both modes)\n\n"
            f"{markdown_table(forgetting_rows(metrics))}\n\n"
            f"### Forgetting per domain and mode (change [95% interval] from the score before; \"ceiling\": at least "
            f"{CEILING:g} before, left out of \"keeps the other domains\")\n\n"
            f"{markdown_table(forgetting_by_mode(metrics))}\n\n"
            f"### Final scores: cascade, RLHF last, joint RL\n\n{markdown_table(joint_rows(metrics))}\n\n"
            f"### The {harder_label(metrics)} (think / no_think)\n\n{markdown_table(harder_rows(metrics))}\n\n"
            f"### The cost of one mixed batch\n\n{markdown_table(cost_rows(metrics))}\n\n"
            f"{markdown_table(reward_time_rows(metrics))}\n\n"
            f"### Building the cascade from the shipped base (each stage's own measured time)\n\n"
            f"{markdown_table(build)}\n\n"
            f"### Stage table of the RLHF-last order\n\n{stage_markdown(metrics['rows'][RLHF_LAST])}\n\n"
            f"Timings (s): {json.dumps(metrics['timings'])}")


# ---------------------------------------------------------------------------
# Exercises
# ---------------------------------------------------------------------------


def _committed_run() -> dict[str, Any]:
    """The committed toy run's metrics; FileNotFoundError (reported by ``check``) when absent."""
    metrics = load_metrics(FOLDER)
    if metrics is None:
        raise FileNotFoundError(f"data/results/{FOLDER}/metrics.json")
    return metrics


def _batches() -> list[Case]:
    """(domain, the batch's domains, that domain's scores of its own rollouts in order)."""
    return [("math", ["math", "code", "math"], [1.0, 0.0]), ("code", ["math", "code", "math"], [0.5]),
            ("swe", ["math", "code"], []), ("general", [], []), ("general", ["general"] * 4, [0.1, 0.2, 0.3, 0.4]),
            ("tools", ["swe", "tools", "tools", "swe", "tools"], [-1.0, 0.0, 2.5])]


def _routed(domain: str, batch: Sequence[str], scores: Sequence[float]) -> list[float | None]:
    def own(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        assert len(completions) == len(scores)
        return list(scores)

    own.__name__ = "own"
    return DomainReward(domain, own)([""] * len(batch), [""] * len(batch), domain=list(batch))


def _most_disruptive_stage() -> str:
    cells = [c for c in forgetting(_committed_run()) if not c["own"]]
    return max(ORDER, key=lambda s: abs(sum(c["change"] for c in cells if c["stage"] == s)))


def _cascade_minus_joint() -> float:
    metrics = _committed_run()
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
             "absolute value of the sum of its off-diagonal changes? One of " + ", ".join(map(repr, ORDER))
             + ". Is that change inside the ±0.05 the forgetting claims allow?",
             Choice(ORDER, _most_disruptive_stage), "keep the cells whose `own` is False, sum `change` per "
             "`stage`, compare absolute values.", "answer = None  # a stage name"),
    Exercise("14.3", "Cascade or joint?",
             "In the committed run, by how much does the cascade's final model beat joint RL over the whole suite "
             "(every domain, both modes; the paired change, cascade minus joint)? Within 0.005. Which domains "
             "carry the difference, and what did joint RL's mixed batches cost per step?",
             Number(_cascade_minus_joint, abs_=0.005), "`paired_change(final(m, JOINT), final(m, CASCADE))` "
             "(`cascadekit.evaluation.stage_claims`, `cascadekit.chapters.ch14_whole_cascade`); its first value is "
             "the estimate.", "answer = None  # a change in score", homework=True),
]
