"""Finding 1 (chapter 04): RL bands, the before/after tables, verdicts from intervals, a smoke run end to end."""
from __future__ import annotations

import json

import pytest

from cascadekit.training import pipeline
from cascadekit.chapters import resolve
from cascadekit.cli import main
from cascadekit.bands import RANGES, Bands
from cascadekit.chapters import interplay as common
from cascadekit.chapters import ch04_edge_of_competence as eoc
from cascadekit.profiles import load_profile
from cascadekit.results import load_metrics
from cascadekit.world import split_of

SMOKE = ["rl.samples=4", "rl.prompts_per_step=2", "evaluation.problems_per_op=1", "evaluation.samples=2"]
FOLDER = "04_edge_of_competence"


def test_band_problems_are_rl_split_of_the_band_in_equal_numbers():
    profile = load_profile("toy")
    bands = Bands.of_world(profile.world)
    for name in RANGES:
        problems = common.band_problems(profile, bands, name, n=12)
        assert len(problems) == 12 and len({p.key for p in problems}) == 12
        assert {p.op for p in problems} <= set(bands.ops(name))
        assert all(split_of(p) == "rl" for p in problems)
        assert {p.context for p in problems} == set(profile.world.contexts)


def _evaluation(solved: dict[str, tuple[int, int]], n: int = 4, problems: int = 20) -> dict:
    """A summary whose band has ``problems`` problems, the first ``a`` of them solved in ``b`` of ``n`` samples."""
    per_problem, by_range = [], []
    for band, (a, b) in solved.items():
        start = len(per_problem)
        per_problem += [{"problem": start + i, "op": 2, "range": band, "context": "A", "n": n,
                         "correct": b if i < a else 0, "n_dependency": 0, "n_missing": 0} for i in range(problems)]
        by_range.append({"range": band, "pass@1": a * b / n / problems, f"pass@{n}": a / problems if b else 0.0})
    return {"samples_per_problem": n, "by_range": by_range, "per_problem": per_problem}


def test_pass_rows_and_deltas_against_the_base():
    rows = common.pass_rows({"base": _evaluation({"edge": (2, 2)}), "edge": _evaluation({"edge": (4, 2)})})
    assert rows[1] == {"model": "edge", "range": "edge", "pass@1": 0.1, "pass@n": 0.2}
    (delta,) = common.deltas(rows)
    assert delta["model"] == "edge" and delta["d_pass@1"] == pytest.approx(0.05) and delta["d_pass@n"] == 0.1


def test_verdicts_come_from_paired_intervals_not_signs():
    base = _evaluation({g: (4, 2) for g in RANGES})
    after = {"too_easy": _evaluation({"in_distribution": (12, 2), "edge": (4, 2), "hard": (4, 2)}),
             "edge": _evaluation({"in_distribution": (4, 2), "edge": (16, 4), "hard": (5, 2)}),
             "too_hard": _evaluation({g: (4, 2) for g in RANGES})}
    curves = [{"step": 1, "reward": 0.0, "frac_reward_zero_std": 1.0}] * 4
    result = {"base": {"evaluation": base}, "runs": {name: {"evaluation": ev, "curves": curves, "train_s": 1.0}
                                                     for name, ev in after.items()}}
    verdicts = {r["claim"].split(" (")[0]: r["verdict"] for r in eoc.claims(result)}
    assert verdicts == {
        "edge RL: pass@4 on edge": "reproduced",  # 12 more problems solved of 20
        "edge RL: pass@4 on hard": "cannot tell",  # one more problem: a positive sign, not a finding
        "too-easy RL: pass@1 in-distribution": "reproduced",
        "too-easy RL: pass@4 in-distribution": "contradicted",  # it rose by 0.4, not flat
        "too-hard RL: pass@4 on hard": "reproduced",  # exactly unchanged, within the tolerance
        "too-hard RL: share of groups with any reward signal": "reproduced",
    }
    assert all("95% interval" in r for r in eoc.claims(result))


def test_smoke_experiment_writes_results_and_reuses_its_stages(tmp_path, monkeypatch):
    out = tmp_path / "results"
    assert main(["experiment", "04", "--scale", "smoke", "--out", str(out), "--work", str(tmp_path / "w"),
                 *[a for s in SMOKE for a in ("--set", s)]]) == 0
    metrics = load_metrics(FOLDER, root=out)
    assert set(metrics["runs"]) == set(eoc.RL_RANGES)
    assert all(run["prompts"] == 4 and run["steps"] == 2 for run in metrics["runs"].values())
    assert {(r["model"], r["range"]) for r in metrics["table"]} == {
        (m, g) for m in ("base", *eoc.RL_RANGES) for g in RANGES}
    assert metrics["produced_by"]["command"].startswith("cascadekit experiment 04 --scale smoke")
    assert len(metrics["paper_vs_run"]) == 6 and all(r["verdict"] for r in metrics["paper_vs_run"])
    folder = out / FOLDER
    assert (folder / "passk.png").stat().st_size and (folder / "curves.png").stat().st_size
    assert "paper vs this run" in (folder / "paper_vs_run.md").read_text()
    monkeypatch.setattr(pipeline, "train_grpo", lambda *a, **k: pytest.fail("a cached GRPO stage trained again"))
    assert main(["experiment", "04", "--scale", "smoke", "--out", str(out), *[a for s in SMOKE for a in ("--set", s)]]) == 0
    assert json.loads((folder / "metrics.json").read_text())["table"] == metrics["table"]


@pytest.mark.slow
def test_toy_reproduction_completes_and_writes_metrics(tmp_path):
    """The committed toy run's settings, end to end (tens of minutes on 2 cores; builds the toy base if absent)."""
    config = resolve("04", "toy")
    result = eoc.run(config, tmp_path / "runs")
    assert set(result["runs"]) == set(eoc.RL_RANGES) and result["table"]
    committed = load_metrics(FOLDER)
    if committed and committed["settings"].get("chapter_settings") == dict(config.settings):
        assert result["table"] == committed["table"]  # same seeds and settings: the same numbers


def test_base_caveat_only_when_the_base_solves_nothing():
    zero = [{"model": "base", "range": g, "pass@1": 0.0, "pass@n": 0.0} for g in ("edge", "hard")]
    assert "no edge of competence" in common.base_caveat(zero)
    assert common.base_caveat([*zero, {"model": "base", "range": "in_distribution", "pass@1": 0.0, "pass@n": 0.1}]) == ""


def test_edge_caveat_when_the_edge_range_is_beyond_the_base():
    def table(edge: float, ind: float):
        return [{"model": "base", "range": "in_distribution", "pass@1": ind / 2, "pass@n": ind},
                {"model": "base", "range": "edge", "pass@1": 0.0, "pass@n": edge}]

    assert "beyond this base's competence" in common.edge_caveat(table(edge=0.0, ind=0.7))
    assert common.edge_caveat(table(edge=0.1, ind=0.7)) == ""  # an edge with signal: the design holds
    assert common.edge_caveat(table(edge=0.0, ind=0.0)) == ""  # nothing solved anywhere: base_caveat's case
