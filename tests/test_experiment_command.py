"""``cascadekit experiment NN``: one command for every chapter, with its results written where they belong."""
from __future__ import annotations

import json
import subprocess

import pytest

from cascadekit.cli import main
from cascadekit.results import RESULTS_DIR, ResultsRefused, ResultsWriter, uncommitted_changes


def test_chapter_03_pretrains_the_base_and_writes_its_ladder(tmp_path):
    out = tmp_path / "results"
    assert main(["experiment", "03", "--scale", "smoke", "--out", str(out), "--set", "evaluation.max_new_tokens=8"]) == 0
    folder = out / "03_pretraining"
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["produced_by"]["command"] == (
        "cascadekit experiment 03 --scale smoke --out $OUT --set evaluation.max_new_tokens=8")  # no machine path
    assert metrics["pretrain_tokens"] == 20000 and metrics["loss_log"] and "records" not in metrics
    assert {r["op"] for r in metrics["ladder"]} == {2, 3, 4, 5}
    assert all((folder / name).stat().st_size for name in ("ladder.png", "loss_curve.png", "samples.jsonl.gz"))
    assert all(r["95% interval"] for r in metrics["paper_vs_run"] if r["problems"])


def test_only_toy_runs_write_the_committed_results():
    with pytest.raises(ResultsRefused, match="only toy-scale runs"):
        ResultsWriter("04_edge_of_competence", "smoke", "test", out=RESULTS_DIR)
    assert ResultsWriter("04_edge_of_competence", "smoke", "test").root.as_posix() == "runs/results-smoke"


def test_committed_results_need_a_clean_tree_unless_a_draft(monkeypatch):
    from cascadekit import results

    monkeypatch.setattr(results, "uncommitted_changes", lambda: ["cascadekit/stages.py"])
    with pytest.raises(ResultsRefused, match="clean tree.*cascadekit/stages.py"):
        ResultsWriter("04_edge_of_competence", "toy", "test")
    assert ResultsWriter("04_edge_of_competence", "toy", "test", draft=True).root == RESULTS_DIR
    monkeypatch.setattr(results, "uncommitted_changes", lambda: [])
    assert ResultsWriter("04_edge_of_competence", "toy", "test").root == RESULTS_DIR


def test_changes_under_the_results_folder_do_not_make_a_tree_dirty(tmp_path, monkeypatch):
    from cascadekit import results

    repo = tmp_path / "repo"
    (repo / "data" / "results").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "data" / "results" / "m.json").write_text("{}")
    monkeypatch.setattr(results, "REPO_DIR", repo)
    assert uncommitted_changes() == []
    (repo / "code.py").write_text("x = 1")
    assert uncommitted_changes() == ["code.py"]


@pytest.mark.parametrize("argv, message", [
    (["experiment", "99"], "unknown chapter '99'"),
    (["experiment", "04", "--scale", "huge"], "invalid choice"),
    (["experiment", "04", "--set", "rl.lr=nan"], "rl.lr"),
    (["experiment", "04", "--scale", "smoke", "--out", str(RESULTS_DIR)], "only toy-scale runs"),
])
def test_bad_experiment_arguments_are_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
