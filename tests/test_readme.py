"""The README's quickstart is exactly two commands, and CI runs the second one verbatim."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the Quickstart section needs a bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quickstart_is_two_commands() -> None:
    main_job, tests = quickstart_commands()
    assert "cascadekit run" in main_job and "pytest" in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert quickstart_commands()[1] in ci


def test_the_set_up_page_shows_the_whole_quickstart() -> None:
    """Issue 37: the book's set-up page has both commands whole (split with backslashes so none is cut off)."""
    page = (ROOT / "book" / "setup.md").read_text()
    block = re.search(r"```bash\n(.*?)```", page, re.S).group(1)
    commands = [re.sub(r"\s*\\\n\s*", " ", command) for command in re.split(r"(?<!\\)\n", block.strip())]
    assert commands == quickstart_commands()
    assert all(len(line) <= 80 for line in block.splitlines())


def test_the_readme_builds_the_book_of_the_toy_run_and_opens_jupyterlab() -> None:
    readme = (ROOT / "README.md").read_text()
    book = readme.split("## The book", 1)[1].split("\n## ", 1)[0]
    assert "cascadekit run --scale toy --out runs/toy" in book and "cascadekit book --executed runs/toy" in book
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert "jupyter lab notebooks/" in quickstart.split("```", 2)[2]  # below the two commands


def test_license_and_citations() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    cite = (ROOT / "README.md").read_text().split("## Cite", 1)[1]
    for arxiv in ("2512.07783", "2512.13607"):  # Interplay (Part I), Nemotron-Cascade (Part II)
        assert f"eprint        = {{{arxiv}}}" in cite and f"https://arxiv.org/abs/{arxiv}" in cite


def test_the_readme_time_columns_are_the_guides() -> None:
    """One time table: the README's chapter table holds exactly the guide's time columns, from committed data."""
    from cascadekit.course.times import read_columns
    from cascadekit.course.guide import time_columns

    readme = read_columns((ROOT / "README.md").read_text())
    columns, totals = time_columns()
    for title, cells in columns.items():
        assert {n: readme[title][n] for n in cells} == cells, title
        assert readme[title]["all"] == totals.get(title, ""), title
    assert [t for t in readme if "time" in t or "measured" in t or "retrain" in t] == [
        t for t in columns if "time" in t or "measured" in t or "retrain" in t]


def test_a_newcomer_meets_where_to_start_before_the_implementation_detail() -> None:
    """Issue 58: ~3,000 words of worlds, knobs and speed ratios came before the chapter list."""
    readme = (ROOT / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", readme, re.M)
    assert headings.index("Start here") < headings.index("Chapters") < headings.index("Part II's worlds")
    start = readme.split("## Start here", 1)[1].split("\n## ", 1)[0]
    assert "01_dag_world.ipynb" in start and "08_unified_thinking_model.ipynb" in start and "cascadekit chat" in start
    before_chapters = readme.split("## Chapters", 1)[0]
    assert len(before_chapters.split()) < 1500, len(before_chapters.split())
