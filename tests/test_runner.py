"""The course runner on throwaway notebooks: order, --only, failure traceback, resume."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from cascadekit.course.runner import ChapterFailed, run_course, select


def _notebook(path: Path, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('scale = "smoke"\nseed = 0\nout_dir = "out"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, path)


@pytest.fixture()
def course(tmp_path: Path) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "01_first.ipynb", "print('first', scale)")
    _notebook(folder / "02_second.ipynb", "print('second')")
    return folder


def test_runs_in_order_then_resumes(course: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run_course("smoke", out, notebook_dir=course)
    assert [(r.chapter, r.status) for r in first] == [("01_first", "ok"), ("02_second", "ok")]
    executed = nbformat.read(out / "01_first.ipynb", as_version=4)
    assert "first smoke" in executed.cells[-1].outputs[0]["text"]
    summary = json.loads((out / "summary.json").read_text())
    assert [c["status"] for c in summary["chapters"]] == ["ok", "ok"]
    assert summary["produced_by"]["command"] == "cascadekit run --scale smoke --out $OUT"  # no machine path
    markdown = (out / "summary.md").read_text()
    assert "| 01_first | ok |" in markdown
    total = sum(c["wall_s"] for c in summary["chapters"])  # a total, and a commit a reader can check out (issue 58)
    assert f"| **total** | 2 chapters | {total:.1f} |" in markdown and "git commit " in markdown.splitlines()[0]
    again = run_course("smoke", out, notebook_dir=course)
    assert [r.status for r in again] == ["skipped", "skipped"]


def test_only_selects_chapters(course: Path, tmp_path: Path) -> None:
    results = run_course("smoke", tmp_path / "out", only=["2"], notebook_dir=course)
    assert [r.chapter for r in results] == ["02_second"]
    with pytest.raises(ValueError, match="99"):
        select(sorted(course.glob("*.ipynb")), ["99"])


def test_a_number_names_one_chapter_not_every_chapter_it_starts() -> None:
    """``--only 1`` once ran chapters 01 and 10-15, ``--only 0`` 01-09 (issue 58)."""
    course = [Path(f"{n:02d}_chapter.ipynb") for n in range(1, 16)]
    assert [p.name[:2] for p in select(course, ["1"])] == ["01"]
    assert [p.name[:2] for p in select(course, ["01", "12"])] == ["01", "12"]
    assert [p.name[:2] for p in select(course, ["12_chap"])] == ["12"]
    with pytest.raises(ValueError, match="'0'"):
        select(course, ["0"])


def test_stops_at_first_failure_with_traceback(course: Path, tmp_path: Path) -> None:
    _notebook(course / "01_first.ipynb", "raise ZeroDivisionError('planted failure')")
    with pytest.raises(ChapterFailed, match="planted failure"):
        run_course("smoke", tmp_path / "out", notebook_dir=course)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [c["status"] for c in summary["chapters"]] == ["failed"]


def test_unknown_scale_fails_before_running(course: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown scale profile 'gigantic'"):
        run_course("gigantic", tmp_path / "out", notebook_dir=course)


def test_an_executed_notebook_names_no_path_of_this_machine(course: Path, tmp_path: Path,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 37: the injected ``out_dir`` is relative to the run folder, where the kernel runs, and the
    kernel's transport warning stays out of the terminal."""
    from cascadekit.course.book import machine_paths

    out = tmp_path / "out"
    run_course("smoke", out, only=["01"], notebook_dir=course)
    assert "without encryption" not in capfd.readouterr().err
    executed = nbformat.read(out / "01_first.ipynb", as_version=4)
    injected = next(c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert 'out_dir = "artifacts/01_first"' in injected.source
    assert machine_paths(out) == []
    from cascadekit.codeversion import REPO_DIR

    (out / "planted.ipynb").write_text(f'{{"x": "{REPO_DIR.parent}/somewhere/else"}}')  # beside the checkout
    assert [found.split(": ")[0] for found in machine_paths(out)] == ["planted.ipynb"]  # the check can fail


def test_two_runs_into_one_folder_execute_each_chapter_once(course: Path, tmp_path: Path) -> None:
    """The test suite's workers share one smoke run this way: a chapter is claimed by one run, the other waits."""
    import threading

    marks = tmp_path / "executed.txt"
    for name in ("01_first", "02_second", "03_third"):
        _notebook(course / f"{name}.ipynb", f"open({str(marks)!r}, 'a').write({name!r} + '\\n')")
    out, lines, outcomes = tmp_path / "out", [], []

    def one_run() -> None:
        outcomes.append(run_course("smoke", out, notebook_dir=course, log=lines.append))

    runs = [threading.Thread(target=one_run) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert sorted(marks.read_text().split()) == ["01_first", "02_second", "03_third"]
    summary = json.loads((out / "summary.json").read_text())
    assert [(c["chapter"], c["status"]) for c in summary["chapters"]] == [
        ("01_first", "ok"), ("02_second", "ok"), ("03_third", "ok")]
    assert sorted(r.status for outcome in outcomes for r in outcome) == ["ok"] * 3 + ["skipped"] * 3
    assert sum(line.startswith("executing ") for line in lines) == 3
