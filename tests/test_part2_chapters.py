"""Part II's chapters (08-13) on the chapter protocol: each committed table regenerates from its metrics,
and what ``metrics.json`` keeps leaves the bulky per-sample records to a ``samples.jsonl`` spread."""
from __future__ import annotations

import json

import pytest

from cascadekit import chapters
from cascadekit.results import RESULTS_DIR, ResultsWriter, load_metrics, markdown_table

#: Results folders written by each chapter's current code (08's six-separate-domains is an older run's).
FOLDERS = [("08", ""), ("08", "lora-r16"), ("09", ""), ("10", ""), ("11", ""), ("12", ""), ("13", ""), ("15", "")]


@pytest.mark.parametrize("chapter, sub", FOLDERS, ids=lambda v: v or "top")
def test_the_committed_table_regenerates_from_the_committed_metrics(chapter: str, sub: str) -> None:
    module = chapters.chapter_module(chapter)
    folder = chapters.spec(chapter).folder + (f"/{sub}" if sub else "")
    metrics = load_metrics(folder)
    if metrics is None:
        pytest.skip(f"no committed {folder}")
    title, table = (RESULTS_DIR / folder / "paper_vs_run.md").read_text().split("\n\n")[:2]
    assert title == f"## {module.RESULTS_TITLE}"
    assert markdown_table(module.claims(metrics)) == table


def _full(chapter: str) -> dict:
    """The committed metrics with what a fresh run has and ``committed`` thins: completions and rollout answers."""
    metrics = load_metrics(chapters.spec(chapter).folder)
    metrics.pop("produced_by")
    if chapter == "11":
        metrics["math_completions"] = {name: [f"c{i}" for i in range(len(s))] for name, s in metrics["math"].items()}
    else:
        metrics["by_context_completions"] = {name: [f"c{i}" for i in range(len(s))]
                                             for name, s in metrics["by_context"].items()}
        metrics["rollouts"] = {name: [{**r, "answer": "patch"} for r in run]
                               for name, run in metrics["rollouts"].items()}
    return metrics


@pytest.mark.parametrize("chapter", ["11", "13"])
def test_the_committed_metrics_leave_completions_to_the_samples_spread(chapter: str, tmp_path) -> None:
    if load_metrics(chapters.spec(chapter).folder) is None:
        pytest.skip("no committed run")
    folder = chapters.spec(chapter).folder
    chapters.write(chapter, _full(chapter), ResultsWriter(folder, "toy", "test", out=tmp_path, draft=True))
    written = json.loads((tmp_path / folder / "metrics.json").read_text())
    assert set(written) == set(load_metrics(folder))  # what the committed run keeps, no more
    samples = [json.loads(line) for line in (tmp_path / folder / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["completion"].startswith("c") and "checkpoint" in s for s in samples)
    if chapter == "13":
        assert not any("answer" in r for run in written["rollouts"].values() for r in run)
    title = chapters.chapter_module(chapter).RESULTS_TITLE
    assert (tmp_path / folder / "paper_vs_run.md").read_text().startswith(f"## {title}\n")
