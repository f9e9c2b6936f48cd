"""Finding 4 (chapter 07): the hacking probe, the structural-error table, and a smoke run end to end."""
from __future__ import annotations

import pytest

from cascadekit.chapters import resolve
from cascadekit.cli import main
from cascadekit.chapters import ch07_process_rewards as pr
from cascadekit.results import RESULTS_DIR, load_metrics
from cascadekit.verify.mutations import answer_only
from cascadekit.world import generate_problems

FOLDER = "07_process_rewards"
SMOKE = {"rl.samples": 4, "rl.prompts_per_step": 2, "evaluation.problems_per_op": 1, "evaluation.samples": 2}


def gold_completion(problem):
    return problem.training_text.removeprefix(problem.rl_prompt)


def test_hacking_probe_pays_an_answer_only_completion_under_outcome_only():
    problems = generate_problems(ops=range(3, 8), contexts=("A", "B"), n=10, seed=0, split="eval", style="compact")
    gold, hack = pr.hacking_probe(problems, {"gold": gold_completion, "answer only": answer_only})
    assert gold == {"completion": "gold", "outcome": 1.0, "mixed": 1.0, "strict": 1.0}
    assert hack["outcome"] == 1.0 and hack["mixed"] < 1.0 and hack["strict"] < 1.0


def test_error_rows_pick_the_structural_errors():
    errors = [{"range": "hard", "samples": 8, "process_accuracy": 0.25, "n_missing": 0.5, "n_dependency": 0.75,
               "n_value": 0.1, "answer_mismatch": 0.9}]
    (row,) = pr.error_rows({"base": {"errors_by_range": errors}})
    assert row == {"model": "base", "range": "hard", "dependency mismatch": 0.75, "missing node": 0.5,
                   "process_accuracy": 0.25}


def test_smoke_command_line_writes_under_runs_and_leaves_the_committed_results(tmp_path, monkeypatch):
    committed = RESULTS_DIR / FOLDER / "metrics.json"
    before = committed.read_bytes()
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "07", "--scale", "smoke", *[a for k, v in SMOKE.items() for a in ("--set", f"{k}={v}")]]) == 0
    assert committed.read_bytes() == before
    metrics = load_metrics(FOLDER, root=tmp_path / "runs" / "results-smoke")
    assert {name: run["reward"] for name, run in metrics["runs"].items()} == {
        "outcome": "outcome_reward", "mixed": "mixed_reward_0.2", "strict": "strict_reward"}
    assert all(run["range"] == "edge" for run in metrics["runs"].values())
    assert {r["model"] for r in metrics["errors"]} == {"base", "outcome", "mixed", "strict"}
    assert metrics["produced_by"]["command"].startswith("cascadekit experiment 07 --scale smoke")
    assert metrics["paper_vs_run"] and {r["verdict"] for r in metrics["paper_vs_run"]} <= {
        "reproduced", "contradicted", "cannot tell"}
    folder = tmp_path / "runs" / "results-smoke" / FOLDER
    assert all((folder / f"{name}.png").stat().st_size for name in ("passk", "errors", "curves"))


def test_smoke_run_may_not_write_the_committed_results():
    assert main(["experiment", "07", "--scale", "smoke", "--out", str(RESULTS_DIR)]) == 2


@pytest.mark.slow
def test_toy_reproduction_completes_and_writes_metrics(tmp_path):
    """The committed toy run's settings, end to end (tens of minutes on 2 cores; builds the toy base if absent)."""
    result = pr.run(resolve("07", "toy"), tmp_path / "runs")
    assert set(result["runs"]) == {"outcome", "mixed", "strict"} and result["errors"]


def test_mixed_caveat_spots_a_process_term_that_never_paid():
    outcome = [{"reward": 0.25}, {"reward": 0.5}]
    scaled = {"runs": {"outcome": {"curves": outcome}, "mixed": {"curves": [{"reward": 0.05}, {"reward": 0.1}]}}}
    assert "trained alike" in pr.mixed_caveat(scaled)
    credited = {"runs": {"outcome": {"curves": outcome}, "mixed": {"curves": [{"reward": 0.05}, {"reward": 0.3}]}}}
    assert pr.mixed_caveat(credited) == ""
