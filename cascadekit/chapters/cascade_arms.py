"""One more arm of chapter 14, and claims over its training seeds: what ``cascadekit cascade`` runs and writes.

:func:`lever` runs the cascade in any order (or joint RL) from the cached stages,
with a stage table after every stage (and the harder suite), optionally against
the committed arms; it keeps each stage's per-sample results in ``samples.json``.
Over several training seeds' folders :func:`write_lever_claims` writes the claims
(each stage's own-domain lift, the kept domains, last minus SFT: chapter 14's
:func:`~cascadekit.chapters.ch14_whole_cascade.own_domain_rows`), :func:`write_versus`
two arms seed by seed, and :func:`write_fresh_prompts` each primary claim re-asked
on another evaluation seed's prompts.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from cascadekit.artifacts import shown
from cascadekit.atomic import atomic_write_json, atomic_write_text
from cascadekit.chapters import resolve
from cascadekit.chapters.cascade import (ORDER, TARGETS, CascadeStage, cascade_stage, check_order, joint_rl,
                                         parse_joint, run_cascade, sft_checkpoint)
from cascadekit.chapters.ch14_whole_cascade import (DOMAINS, against_arms, check_against, harder_suite,
                                                    own_domain_rows, primary_suite, think_of)
from cascadekit.claims import holm_rows
from cascadekit.evaluation.beside import StageTables
from cascadekit.evaluation.stage_claims import change_row, compact, forgetting_matrix
from cascadekit.evaluation.stage_table import PAPER as PAPER_FINAL
from cascadekit.evaluation.stage_table import cached_stage_table, stage_markdown, suite_records
from cascadekit.profiles import Profile
from cascadekit.results import markdown_table, provenance

#: The stage a joint run evaluates after SFT (:func:`lever`).
JOINT_STAGE = "joint RL"
#: What the paper says of each comparison :func:`versus_rows` makes: against joint RL, or two orders of the stages.
VERSUS_PAPER = {"joint": "domain-wise cascade instead of mixed-domain RL",
                "order": "the paper's order, general to specialised (RLHF first)"}


def lever(scale: str, seed: int, overrides: Mapping[str, Any], order: str | None, joint: str | None,
          against: str | None, harder: bool, out: Path, work: Path, command: str, beside: bool = False) -> None:
    """One more arm of chapter 14 at ``scale``: the cascade in ``order`` (default the paper's), or joint RL.

    Every stage is cached (shipped at toy), so the run resumes from the last
    stage it finds and trains the rest. ``stage_table.md`` and ``rows.json`` in
    ``out`` are rewritten after every stage's tables, so an interrupted run keeps what it
    evaluated. ``harder`` adds the harder suite (:func:`harder_suite`) after
    every stage; ``against`` (a chapter 14 ``metrics.json``) compares the last
    stage with its arms (:func:`against_arms`, in ``against.md``). ``joint``
    (``"swe=192,instructions=512"``, :func:`cascadekit.chapters.cascade.parse_joint`)
    trains joint RL over those domains instead of a chain: SFT, then "joint RL".
    ``beside`` builds the stage tables in a second process while the next stage trains
    (:mod:`cascadekit.evaluation.beside`). Every argument is checked before anything
    trains; a bad one is a ValueError.
    """
    stages_order = ORDER if order is None else check_order([n.strip() for n in order.split(",") if n.strip()])
    joint_prompts = None if joint is None else parse_joint(joint)  # before anything trains; '' is an error
    profile = resolve("14", scale, overrides, seed).profile
    try:
        arms = None if against is None else json.loads(Path(against).read_text())
    except RecursionError:
        raise ValueError(f"{against}: not JSON (nested too deeply)") from None
    suites = {"per_sample": suite_records(profile), **({"harder": harder_suite(profile)} if harder else {})}
    if arms is not None:
        check_against(arms, suites)  # its shape, and that it asked the same prompts, before anything trains
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict]] = {suite: [] for suite in suites}
    stages: list[dict] = []
    last: dict[str, list[dict]] = {}
    kept: dict[str, dict[str, list[dict]]] = {suite: {} for suite in suites}
    made = provenance(command)

    def record(name: str, tables: Mapping[str, Mapping[str, Any]]) -> None:
        for suite, table in tables.items():
            rows[suite].extend(table["rows"])
            last[suite] = table["samples"]
        for suite, samples in compact_suites(tables).items():
            kept[suite][name] = samples
        atomic_write_json(out / LEVER_SAMPLES, kept, indent=None)  # one line: about a third of the indented size
        atomic_write_json(out / "rows.json", {"provenance": made, "stages": stages, "rows": rows["per_sample"],
                                              **({"harder_rows": rows["harder"]} if harder else {})})
        atomic_write_text(out / "stage_table.md", stage_markdown(rows["per_sample"]) + "\n")
        if harder:
            atomic_write_text(out / "harder_table.md", stage_markdown(rows["harder"]) + "\n")
        print(f"{name}: evaluated", flush=True)

    with StageTables(profile, suites, beside) as tables:
        def evaluated(stage: CascadeStage) -> None:
            stages.append({"stage": stage.name, "key": stage.checkpoint.key,
                           "checkpoint": shown(stage.checkpoint.checkpoint), "prompts": stage.prompts(profile),
                           "build_s": round(stage.train_s, 1)})
            tables.submit(stage.checkpoint, stage.name)
            for name, done in tables.ready():
                record(name, done)

        if joint_prompts:
            sft = sft_checkpoint(profile)
            evaluated(CascadeStage("SFT", (), sft))
            trained = joint_rl(profile, joint_prompts, work / "joint")
            evaluated(CascadeStage(JOINT_STAGE, (trained,), trained))
        else:
            run_cascade(profile, work, stages_order, evaluated)
        for name, done in tables.ready(wait=True):
            record(name, done)
    print((out / "stage_table.md").read_text())
    if arms is not None:
        compared = against_arms(arms, last)
        atomic_write_json(out / "rows.json", {**json.loads((out / "rows.json").read_text()), "against": compared})
        table = markdown_table(compared)
        atomic_write_text(out / "against.md", f"Last stage ({stages[-1]['stage']}) against {against}, "
                                              f"made by `{made['command']}` (commit {made['git_commit']})\n\n{table}\n")
        print(table)


#: How far from the profile's evaluation seed the fresh prompts that re-ask each primary claim are drawn.
FRESH_EVAL_OFFSET = 1


def fresh_prompt_rows(profiles: Sequence[Profile], work_dir: Path,
                      offset: int = FRESH_EVAL_OFFSET) -> list[dict[str, Any]]:
    """Each RL stage's primary claim asked again on fresh prompts: the same checkpoints, another evaluation seed.

    ``profiles`` are one per training seed (the interval is over them, then the
    prompts). The stages are the cascade's (:func:`cascadekit.chapters.cascade.cascade_stage`,
    shipped at toy or cached); an evaluation seed moves only the suites, never a
    training key, so a gap to the committed claim is the prompts' sampling alone. Only
    each stage's own domain is asked, on its :func:`primary_suite`.
    """
    fresh = [dataclasses.replace(p, eval_seed=p.seeds.eval + offset) for p in profiles]
    names = ["SFT", *ORDER]
    stages = [{name: cascade_stage(name, p, work_dir).checkpoint for name in names} for p in fresh]
    harder, rows = harder_suite(fresh[0]), []
    for before, after in zip(names, names[1:]):
        domain, mode = TARGETS[after]
        suite = primary_suite(domain)
        records = [r for r in harder if r["domain"] == domain] if suite == "harder" else \
            suite_records(fresh[0], [domain])
        tables = [[cached_stage_table(seed[n], p, n, records)["samples"] for seed, p in zip(stages, fresh)]
                  for n in (before, after)]
        rows.append(change_row(f"{after} lifts its own domain ({domain}, {mode or 'both modes'}; fresh {suite} "
                               f"prompts, evaluation seed +{offset})",
                               f"each stage lifts its own benchmark ({PAPER_FINAL[domain]['benchmark']})",
                               tables[0], tables[1], "up", names=[domain], think=think_of(mode), primary=True))
    return holm_rows(rows)


#: Each stage's per-sample results of a lever run, per suite (:func:`compact`): what claims over seeds read.
LEVER_SAMPLES = "samples.json"


def compact_suites(tables: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """One stage's tables (suite -> table) cut to the fields a paired claim reads."""
    return {suite: compact({"stage": table})["stage"] for suite, table in tables.items()}


def lever_runs(folders: Sequence[Path]) -> list[dict[str, dict[str, list[dict[str, Any]]]]]:
    """Each seed's ``samples.json`` (suite -> stage -> samples), checked to name the same stages and suites."""
    runs = []
    for folder in folders:
        try:
            runs.append(json.loads((Path(folder) / LEVER_SAMPLES).read_text()))
        except (OSError, ValueError, RecursionError) as err:
            raise ValueError(f"{folder}: no readable {LEVER_SAMPLES} ({err})") from None
    shape = [(suite, list(stages)) for suite, stages in runs[0].items()] if runs else None
    if not runs or any([(suite, list(stages)) for suite, stages in run.items()] != shape for run in runs):
        raise ValueError(f"the seeds' runs ({', '.join(map(str, folders))}) did not evaluate the same stages and suites")
    return runs


def lever_claims(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """A lever's claims over its training seeds (one ``cascadekit cascade`` output folder per seed).

    Each RL stage: its own domain's lift, RLHF's length and repetition on general, and
    "keeps the other domains" (:func:`own_domain_rows`); then the last stage minus SFT
    on every suite. Intervals are over seeds, then prompts; Holm per family.
    """
    runs = lever_runs(folders)
    suites = list(runs[0])
    tables = {suite: [run[suite] for run in runs] for suite in suites}
    names = list(runs[0]["per_sample"])
    rows = own_domain_rows(tables, lambda suite, _: suite, rlhf_style=True)
    for suite in suites:
        rows.append(change_row(f"the last stage ({names[-1]}) minus SFT ({suite}, every domain, both modes)",
                               "every benchmark above the SFT model", [t[names[0]] for t in tables[suite]],
                               [t[names[-1]] for t in tables[suite]], "up"))
    return holm_rows(rows)


def lever_forgetting(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """Every stage's change per domain and mode (the stage table's suite), over the seeds, with its interval."""
    tables = [run["per_sample"] for run in lever_runs(folders)]
    names = list(tables[0])
    rows = []
    for before, after in zip(names, names[1:]):
        for cell in forgetting_matrix([t[before] for t in tables], [t[after] for t in tables], DOMAINS):
            rows.append({"stage": after, "domain": cell["domain"], "mode": cell["mode"], "before": cell["before"],
                         "change [95% CI]": f"{cell['change']:+.3f} [{cell['low']:+.3f}, {cell['high']:+.3f}]",
                         "seeds": " / ".join(f"{x:+.3f}" for x in cell["seeds"]),
                         "at ceiling": "yes" if cell["at_ceiling"] else ""})
    return rows


def versus_rows(ours: Sequence[Path], theirs: Sequence[Path]) -> list[dict[str, Any]]:
    """Our last stage minus theirs, seed by seed (one output folder each, the same seeds and suites), per suite.

    How two arms that each ran on every seed (the cascade and joint RL, or two orders)
    are decided over seeds: each seed's two final models answered the same prompts, so
    each row pairs them prompt by prompt and resamples seeds, then prompts.
    """
    a, b = lever_runs(ours), lever_runs(theirs)
    if len(a) != len(b) or list(a[0]) != list(b[0]):
        raise ValueError("the two arms need the same number of seeds and the same suites")
    rows = []
    for suite in a[0]:
        stages_a, stages_b = list(a[0][suite]), list(b[0][suite])
        mine, other = [run[suite][stages_a[-1]] for run in a], [run[suite][stages_b[-1]] for run in b]
        names = list(dict.fromkeys(s["domain"] for s in mine[0]))
        label = f"{arm_label(stages_a)} minus {arm_label(stages_b)}"
        paper = (VERSUS_PAPER["joint"] if JOINT_STAGE in (stages_a[-1], stages_b[-1]) else VERSUS_PAPER["order"])
        rows.append(change_row(f"{label} ({suite}, every domain, both modes)", paper, other, mine, "up"))
        rows += [change_row(f"{label} ({suite}, {name}, both modes)", paper, other, mine, "up", names=[name])
                 for name in names]
    return holm_rows(rows)


def arm_label(stages: Sequence[str]) -> str:
    """An arm by its stages after SFT: ``RLHF > IF-RL > ... > SWE RL``, or ``joint RL``."""
    return " > ".join(stages[1:]) or stages[0]


def write_versus(out: Path, ours: Sequence[Path], theirs: Sequence[Path], command: str) -> Path:
    """``versus.md`` in ``out``: :func:`versus_rows`."""
    made = provenance(command)
    text = ("# Each seed's last stage here against the same seed's last stage of the other arm (--versus)\n\n"
            f"Made by `{made['command']}` (commit {made['git_commit']}, {made['date']}). Intervals: seeds, then "
            f"prompts.\n\n{markdown_table(versus_rows(ours, theirs))}\n")
    atomic_write_text(out / "versus.md", text)
    return out / "versus.md"


def write_fresh_prompts(out: Path, profiles: Sequence[Profile], work: Path, command: str) -> Path:
    """``fresh_prompts.md`` in ``out``: :func:`fresh_prompt_rows` over the profiles' training seeds."""
    made = provenance(command)
    seeds = ", ".join(str(p.seeds.train) for p in profiles)
    text = (f"# Each RL stage's primary claim on fresh prompts (training seeds {seeds})\n\n"
            f"Made by `{made['command']}` (commit {made['git_commit']}, {made['date']}): the cascade's own "
            f"checkpoints, {profiles[0].sft.eval_tasks} prompts per mode drawn with evaluation seed "
            f"{profiles[0].seeds.eval + FRESH_EVAL_OFFSET}. Intervals: seeds, then prompts; Holm over the five.\n\n"
            f"{markdown_table(fresh_prompt_rows(profiles, work))}\n")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "fresh_prompts.md", text)
    return out / "fresh_prompts.md"


def write_lever_claims(out: Path, folders: Sequence[Path], command: str) -> Path:
    """``claims.md`` in ``out``: :func:`lever_claims` and :func:`lever_forgetting` over the seeds' folders."""
    made = provenance(command)
    text = (f"# Claims over training seeds ({', '.join(Path(f).name for f in folders)})\n\n"
            f"Made by `{made['command']}` (commit {made['git_commit']}, {made['date']}). Intervals: seeds, then "
            "prompts; per-seed estimates beside them; Holm within each family.\n\n"
            f"{markdown_table(lever_claims(folders))}\n\n## Each stage's change per domain and mode\n\n"
            f"{markdown_table(lever_forgetting(folders))}\n")
    atomic_write_text(out / "claims.md", text)
    return out / "claims.md"
