"""A course run's summary.md sets the README's measured-time column, never typed by hand."""
from __future__ import annotations

from pathlib import Path

import pytest

from cascadekit.cli import main
from cascadekit.course_times import column_title, format_duration, parse_summary, update_chapter_table

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


def test_cli_rewrites_the_readme_and_keeps_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cascadekit.course_times as course_times

    monkeypatch.setattr(course_times, "TIMINGS_DIR", tmp_path / "timings")
    readme, summary = tmp_path / "README.md", tmp_path / "summary.md"
    readme.write_text(README)
    summary.write_text(SUMMARY)
    assert main(["times", str(summary), "--readme", str(readme)]) == 0
    assert column_title("toy") in readme.read_text()
    assert (tmp_path / "timings" / "toy.md").read_text() == SUMMARY
    summary.write_text("no summary here")
    assert main(["times", str(summary), "--readme", str(readme)]) == 2
