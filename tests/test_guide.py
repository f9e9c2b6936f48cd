"""The teacher's guide is generated from data: the chapters' syllabus entries, the exercises and the measured times."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cascadekit.course.times import column_title, format_duration
from cascadekit.course.exercises import exercises
from cascadekit.chapters import ChapterSpec, specs
from cascadekit.course.guide import RESULTS_DIR, recorded_seconds, syllabus_page


def test_every_syllabus_chapter_has_exercises_and_every_exercise_a_week() -> None:
    chapters = specs()
    assert sorted({e.chapter for e in exercises()}) == sorted(chapters)
    assert all(len(exercises(number)) >= 2 for number in chapters)


def test_the_page_lists_goals_exercises_and_times() -> None:
    page = syllabus_page()
    for number, spec in specs().items():
        assert spec.goals[0] in page
        assert all(e.id in page for e in exercises(number))
    assert "**04.1**" in page and "**11.3**" in page  # homework is marked
    shipped = recorded_seconds(specs()["06"], "shipped")
    assert f"| 06 |" in page and format_duration(shipped) in page


def test_a_key_holding_a_dot_is_read_as_a_list_of_keys(tmp_path: Path) -> None:
    (tmp_path / "12_x").mkdir()
    (tmp_path / "12_x" / "metrics.json").write_text(json.dumps({"timings": {"arm T=0.6_s": 2.5, "start_s": 1.0}}))
    spec = ChapterSpec("12", "12_x", "x", shipped=(("timings", "arm T=0.6_s"), "timings.start_s"))
    assert recorded_seconds(spec, "shipped", tmp_path) == 3.5
    assert recorded_seconds(spec, "retrain", tmp_path) == 0.0


def _copy_results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    for metrics in RESULTS_DIR.glob("*/metrics.json"):
        (root / metrics.parent.name).mkdir(parents=True)
        shutil.copy(metrics, root / metrics.parent.name / "metrics.json")
    (root / "timings").mkdir()
    return root


def test_times_follow_the_committed_metrics_and_course_runs(tmp_path: Path) -> None:
    root = _copy_results(tmp_path)
    path = root / "06_fixed_budget" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["wall_s"] = 4321.0
    path.write_text(json.dumps(metrics))
    page = syllabus_page(results_dir=root)
    assert "| 06 | 72.0 min |" in page and "No toy course run has been recorded yet" in page
    (root / "timings" / "toy.md").write_text(
        "# Course run at scale `toy` (code x)\n\n| chapter | status | wall time (s) |\n|---|---|---|\n"
        "| 06_fixed_budget | ok | 7300.0 |\n")
    page = syllabus_page(results_dir=root)
    assert column_title("toy") in page and "| 06 | 2.0 h | 72.0 min |" in page and "| 01 | not run |" in page
    assert "No toy course run" not in page


def test_cli_times_on_the_repository_readme_sets_every_column_from_the_kept_summaries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cascadekit times SUMMARY`` (the repository's README): the kept summary and the metrics make every column."""
    import cascadekit.course.times as course_times
    import cascadekit.course.guide as guide
    from cascadekit.cli import main

    root = _copy_results(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# kit\n\n## Chapters\n\n| # | chapter |\n|---|---|\n| 01 | world |\n| 06 | budget |\n")
    summary = tmp_path / "summary.md"
    summary.write_text("# Course run at scale `toy` (code x)\n\n| chapter | status | wall time (s) |\n|---|---|---|\n"
                       "| 06_fixed_budget | ok | 7300.0 |\n")
    monkeypatch.setattr(course_times, "README", readme)
    monkeypatch.setattr(course_times, "TIMINGS_DIR", root / "timings")
    monkeypatch.setattr(guide, "RESULTS_DIR", root)
    assert main(["times", str(summary)]) == 0
    table = readme.read_text()
    assert (root / "timings" / "toy.md").exists()
    assert "| 06 | budget | 2.0 h | " in table and guide.RETRAIN_TITLE in table and guide.THREADS_TITLE in table
