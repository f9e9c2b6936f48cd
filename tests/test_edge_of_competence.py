"""Finding 1 (chapter 04): RL data ranges, the before/after tables, and a smoke run end to end."""
from __future__ import annotations

import json

import pytest

from cascadekit.experiments import edge_of_competence as eoc
from cascadekit.profiles import load_profile
from cascadekit.results import load_metrics
from cascadekit.world import split_of

SMOKE = {"rl.samples": 4, "rl.prompts_per_step": 2, "evaluation.problems_per_op": 1, "evaluation.samples": 2}


def test_range_problems_are_rl_split_of_the_range_in_equal_numbers():
    profile = load_profile("toy")
    sets = {name: eoc.range_problems(profile, name, n=12) for name in ("in_distribution", "edge", "hard")}
    for name, problems in sets.items():
        assert len(problems) == 12 and len({p.key for p in problems}) == 12
        assert {p.op for p in problems} <= set(profile.world.ops(name))
        assert all(split_of(p) == "rl" for p in problems)
        assert {p.context for p in problems} == set(profile.world.contexts)


def _evaluation(by_range: dict[str, tuple[float, float]], n: int = 4) -> dict:
    return {"samples_per_problem": n,
            "by_range": [{"range": g, "pass@1": a, f"pass@{n}": b} for g, (a, b) in by_range.items()]}


def test_pass_rows_and_deltas_against_the_base():
    rows = eoc.pass_rows({"base": _evaluation({"edge": (0.1, 0.5)}), "edge": _evaluation({"edge": (0.2, 0.75)})})
    assert rows[1] == {"model": "edge", "range": "edge", "pass@1": 0.2, "pass@n": 0.75}
    (delta,) = eoc.deltas(rows)
    assert delta["model"] == "edge" and delta["d_pass@1"] == pytest.approx(0.1) and delta["d_pass@n"] == 0.25


def test_paper_vs_run_reads_directions_from_the_deltas():
    ranges = ("in_distribution", "edge", "hard")
    base = _evaluation({g: (0.1, 0.3) for g in ranges})
    after = {"too_easy": _evaluation({"in_distribution": (0.3, 0.3), "edge": (0.1, 0.3), "hard": (0.1, 0.3)}),
             "edge": _evaluation({"in_distribution": (0.1, 0.3), "edge": (0.2, 0.6), "hard": (0.1, 0.2)}),
             "too_hard": _evaluation({g: (0.1, 0.3) for g in ranges})}
    table = eoc.pass_rows({"base": base, **after})
    curves = [{"step": 1, "reward": 0.0, "frac_reward_zero_std": 1.0}]
    result = {"base": {"evaluation": base}, "deltas": eoc.deltas(table),
              "runs": {name: {"curves": curves, "train_s": 1.0} for name in after}}
    verdicts = {r["claim"]: r["direction as paper"] for r in eoc.paper_vs_run(result)}
    assert verdicts == {
        "edge RL: pass@4 on edge": "yes", "edge RL: pass@4 on hard": "no",
        "too-easy RL: pass@1 in-distribution": "yes", "too-easy RL: pass@4 in-distribution": "yes",
        "too-hard RL: pass@4 on hard": "yes", "too-hard RL: mean frac_reward_zero_std": "yes",
    }


def test_smoke_run_writes_metrics_figures_and_table(tmp_path):
    profile = load_profile("smoke", SMOKE)
    result = eoc.run_edge_of_competence(profile, tmp_path / "runs")
    assert set(result["runs"]) == set(eoc.RL_RANGES)
    assert all(run["prompts"] == 4 and run["steps"] == 2 for run in result["runs"].values())
    assert {(r["model"], r["range"]) for r in result["table"]} == {
        (m, g) for m in ("base", *eoc.RL_RANGES) for g in ("in_distribution", "edge", "hard")}
    assert all("frac_reward_zero_std" in c for run in result["runs"].values() for c in run["curves"])
    eoc.write_results(result, "pytest", root=tmp_path)
    metrics = load_metrics(eoc.CHAPTER, root=tmp_path)
    assert metrics["produced_by"]["command"] == "pytest" and len(metrics["paper_vs_run"]) == 6
    folder = tmp_path / eoc.CHAPTER
    assert (folder / "passk.png").stat().st_size and (folder / "curves.png").stat().st_size
    assert "paper vs this run" in (folder / "paper_vs_run.md").read_text()


@pytest.mark.slow
def test_toy_reproduction_completes_and_writes_metrics(tmp_path):
    """The committed toy run's settings, end to end (tens of minutes on 2 cores; builds the toy base if absent)."""
    committed = load_metrics(eoc.CHAPTER)
    overrides = committed["settings"].get("overrides", {}) if committed else {}
    profile = eoc.chapter_profile(load_profile("toy"), overrides)
    result = eoc.run_edge_of_competence(profile, tmp_path / "runs")
    eoc.write_results(result, "pytest -m slow", root=tmp_path)
    metrics = json.loads((tmp_path / eoc.CHAPTER / "metrics.json").read_text())
    assert set(metrics["runs"]) == set(eoc.RL_RANGES) and metrics["table"]


def test_chapter_profile_applies_the_scale_settings_then_the_callers():
    toy = eoc.chapter_profile(load_profile("toy"), {"rl.lr": 3e-4})
    assert toy.rl.samples == eoc.CHAPTER_OVERRIDES["toy"]["rl.samples"] and toy.rl.lr == 3e-4
    assert eoc.chapter_profile(load_profile("paper")) == load_profile("paper")


def test_base_caveat_only_when_the_base_solves_nothing():
    zero = [{"model": "base", "range": g, "pass@1": 0.0, "pass@n": 0.0} for g in ("edge", "hard")]
    assert "no edge of competence" in eoc.base_caveat(zero)
    assert eoc.base_caveat([*zero, {"model": "base", "range": "in_distribution", "pass@1": 0.0, "pass@n": 0.1}]) == ""


def test_edge_caveat_when_the_edge_range_is_beyond_the_base():
    def table(edge: float, ind: float):
        return [{"model": "base", "range": "in_distribution", "pass@1": ind / 2, "pass@n": ind},
                {"model": "base", "range": "edge", "pass@1": 0.0, "pass@n": edge}]

    assert "beyond this base's competence" in eoc.edge_caveat(table(edge=0.0, ind=0.7))
    assert eoc.edge_caveat(table(edge=0.1, ind=0.7)) == ""  # an edge with signal: the design holds
    assert eoc.edge_caveat(table(edge=0.0, ind=0.0)) == ""  # nothing solved anywhere: base_caveat's case
