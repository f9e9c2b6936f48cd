"""A course run's summary.md sets the README's measured-time column, never typed by hand."""
from __future__ import annotations

from pathlib import Path

import pytest

from cascadekit.cli import main
from cascadekit.course.times import (MAX_CHAPTER_S, column_title, default_timings_dir, format_duration, parse_summary,
                                     update_chapter_table)

README = """# kit

## Chapters

| # | chapter | what it shows |
|---|---|---|
| 01 | The DAG world | problems |
| 02 | Judging | pass@k |
| 03 | Pretraining | a base |

The times are measured.

## Next
"""

SUMMARY = """# Course run at scale `toy` (code 0.1.0+abc)

| chapter | status | wall time (s) |
|---|---|---|
| 01_dag_world | ok | 6.5 |
| 02_judging_a_solution | skipped | 130.0 |
| 03_pretraining | failed | 2.0 |
| 11_math_rl | ok | 7300.0 |
"""


def test_parse_summary_keeps_finished_chapters() -> None:
    times = parse_summary(SUMMARY)
    assert times.scale == "toy" and times.code_version == "0.1.0+abc"
    assert times.seconds == {"01": 6.5, "02": 130.0, "11": 7300.0}


@pytest.mark.parametrize("text", ["", "# something else\n| 01_x | ok | 1 |", "# Course run at scale `toy` (code x)\n"])
def test_parse_summary_refuses_what_is_not_a_summary(text: str) -> None:
    with pytest.raises(ValueError):
        parse_summary(text)


def test_durations_read_at_a_glance() -> None:
    assert [format_duration(s) for s in (6.5, 130, 7300)] == ["6 s", "2.2 min", "2.0 h"]


def test_the_column_is_added_then_replaced_and_other_scales_kept() -> None:
    once = update_chapter_table(README, parse_summary(SUMMARY))
    table = [line for line in once.splitlines() if line.startswith("|")]
    assert column_title("toy") in table[0]
    assert table[2].endswith("| 6 s |") and table[3].endswith("| 2.2 min |") and table[4].endswith("| not run |")
    assert table[-1].startswith("| all | the whole course |") and "2.3 min" in table[-1]  # 11 is not listed
    assert once.endswith("The times are measured.\n\n## Next\n")
    smoke = SUMMARY.replace("`toy`", "`smoke`").replace("6.5", "1.0")
    both = update_chapter_table(once, parse_summary(smoke))
    rows = [line for line in both.splitlines() if line.startswith("|")]
    assert column_title("toy") in rows[0] and column_title("smoke") in rows[0]
    assert rows[2].endswith("| 6 s | 1 s |") and "2.3 min" in rows[-1] and len(rows) == len(table)
    assert update_chapter_table(both, parse_summary(smoke)) == both  # idempotent


def test_cli_rewrites_the_readme_and_keeps_the_summary_only_where_told(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--readme OTHER`` writes OTHER alone (issue 30); ``--timings DIR`` adds the copy; the repository's files stay."""
    import cascadekit.course.times as course_times

    committed = tmp_path / "committed-timings"
    monkeypatch.setattr(course_times, "TIMINGS_DIR", committed)  # where the repository's copy would go
    readme, summary = tmp_path / "README.md", tmp_path / "summary.md"
    readme.write_text(README)
    summary.write_text(SUMMARY)
    assert main(["times", str(summary), "--readme", str(readme)]) == 0
    assert column_title("toy") in readme.read_text()
    assert not committed.exists()
    assert main(["times", str(summary), "--readme", str(readme), "--timings", str(tmp_path / "kept")]) == 0
    assert (tmp_path / "kept" / "toy.md").read_text() == SUMMARY and not committed.exists()
    assert default_timings_dir(course_times.README) == committed and default_timings_dir(readme) is None
    summary.write_text("no summary here")
    assert main(["times", str(summary), "--readme", str(readme)]) == 2


@pytest.mark.parametrize("wall", ["100000000000000000000000000000.0", "1e29", "nan", "inf", "-3", "1.2.3", "999999.0"])
def test_an_absurd_wall_time_is_refused_with_a_reason(wall: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    readme, summary = tmp_path / "README.md", tmp_path / "summary.md"
    readme.write_text(README)
    summary.write_text(SUMMARY.replace("| 6.5 |", f"| {wall} |"))
    with pytest.raises(ValueError, match="chapter 01: wall time .* not a measured run"):
        parse_summary(summary.read_text())
    assert main(["times", str(summary), "--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cascadekit times: error: chapter 01" in err
    assert readme.read_text() == README  # nothing written
    assert parse_summary(SUMMARY.replace("| 6.5 |", f"| {MAX_CHAPTER_S:.0f} |")).seconds["01"] == MAX_CHAPTER_S
