"""Every committed claim is unchanged: each ``paper_vs_run.md`` under ``data/results`` regenerates from its
committed ``metrics.json`` through ``cascadekit.chapters.write`` (the chapter's own claims, figures and notes), with no training.

For every chapter of ``cascadekit/chapters.yaml`` and every folder under ``data/results/<chapter>/`` (or under
``data/results/first_world/<chapter>/`` or ``data/results/second_world/<chapter>/``, the Part II worlds' evidence) that holds a ``paper_vs_run.md`` and a
``metrics.json`` (the chapter's own, its sub-arms, a result combined over training seeds), the test

1. loads the committed ``metrics.json`` and puts back what ``write`` strips before saving it (the per-sample
   lists that go to ``samples.jsonl[.gz]`` only, see :data:`REHYDRATE`), and the run's typed profile
   the committed profile's lists re-typed as the tuples ``Profile.to_dict()`` holds (chapter 12's notes print
   ``code_rl.ops`` as ``(3, 4)``; JSON turned it into ``[3, 4]``);
2. calls the chapter module's ``write`` with a :class:`cascadekit.results.ResultsWriter` into ``tmp_path``
   (figures are not rendered: ``save_figure`` is stubbed, they are not compared);
3. asserts the regenerated file equals the committed one line for line, except the last line, the
   provenance (``*Produced by ...*``), which names this call; that committed line must instead equal the line
   made from the committed metrics' ``produced_by``.

A folder that does not regenerate is either a sub-arm written by an older ``write`` (:data:`SKIPPED`, with
why) or a real finding, marked ``xfail(strict=True)`` in :data:`KNOWN_DIFFERENT` with the reason.

The restructure only has to keep :func:`entry_points` working.
"""
from __future__ import annotations

import difflib
import gzip
import json
from pathlib import Path
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402


def entry_points() -> dict[str, Any]:
    """Everything this test calls in the library (the one place to change when modules move)."""
    from cascadekit import chapters, results
    from cascadekit.chapters import resolve, specs

    return {
        "specs": specs,  # chapter id -> spec with .folder and .experiment
        "resolve": resolve,  # (chapter, scale) -> config with .profile
        "write": chapters.write,  # (chapter id, metrics, writer): every file of a finished run
        "ResultsWriter": results.ResultsWriter,  # (chapter folder, scale, command, out=root)
        "RESULTS_DIR": results.RESULTS_DIR,
        "figure_saver": (results, "save_figure"),  # stubbed: figures are not compared
    }


def _gz_lines(folder: Path) -> list[dict[str, Any]]:
    with gzip.open(folder / "samples.jsonl.gz", "rt") as fh:
        return [json.loads(line) for line in fh]


def _records(metrics: dict[str, Any], folder: Path) -> None:  # 03: every record went to samples.jsonl.gz
    metrics["records"] = _gz_lines(folder)


def _variant_samples(metrics: dict[str, Any], folder: Path) -> None:  # 05: every sample, tagged with its b_share
    rows = _gz_lines(folder)
    for v in metrics["variants"]:
        v["samples"] = [{k: x for k, x in r.items() if k != "b_share"} for r in rows if r["b_share"] == v["b_share"]]


def _empty(key: str, kind: type = dict, over: Callable[[dict[str, Any]], Any] | None = None):
    """Restore a key that only feeds the thinned ``samples.jsonl`` spread (never a claim): empty."""
    def restore(metrics: dict[str, Any], folder: Path) -> None:
        metrics[key] = {name: [] for name in over(metrics)} if over else kind()
    return restore


#: chapter id -> how to put back what ``write`` strips from ``metrics.json``.
REHYDRATE: dict[str, Callable[[dict[str, Any], Path], None]] = {
    "03": _records,
    "05": _variant_samples,
    "08": _empty("samples", list),
    "09": _empty("samples"),
    "10": _empty("samples"),
    "11": _empty("math_completions", over=lambda m: m["math"]),
    "12": _empty("samples"),
    "13": _empty("by_context_completions", over=lambda m: m["by_context"]),
    "14": _empty("completions", over=lambda m: m["per_sample"]["cascade"]),
}

_OLDER = "written by an older write() (code {code}), whose table had another shape: {what}"
#: Sub-arm folders kept as evidence from older code: they do not regenerate with today's ``write``.
SKIPPED: dict[str, str] = {
    "04_edge_of_competence/base-32M": _OLDER.format(
        code="0.1.0+7bdea10a37b0, acd66c9c321f-dirty", what="columns 'direction as paper', no intervals"),
    "07_process_rewards/base-32M": _OLDER.format(
        code="0.1.0+7bdea10a37b0, acd66c9c321f-dirty", what="columns 'direction as paper', no intervals"),
    "05_context_transfer/8M-tokens": _OLDER.format(
        code="0.1.0+076bac9caac3, 414b13cbcea9", what="no claim table, only the per-exposure table"),
    "05_context_transfer/a-only-8M": _OLDER.format(
        code="0.1.0+c5b1e421d338, d67fb8871b60", what="an 'Incomplete' note instead of the per-exposure table"),
    "first_world/08_unified_thinking_model/six-separate-domains": _OLDER.format(
        code="0.1.0+88cd803f3e84, a21c29825bce", what="stage rows without score intervals (no score_low)"),
    "06_fixed_budget/peak-lr": _OLDER.format(
        code="0.1.0+076bac9caac3, 8956557218d9", what="no claim table (its metrics lack per-problem counts)"),
}
#: Folders that should regenerate and do not on the current code (real findings): folder -> reason.
KNOWN_DIFFERENT: dict[str, str] = {}


#: Folders of Part II worlds' evidence beside the chapters' own: the first world's runs, the second's levers.
EVIDENCE = ("first_world", "second_world")


def _folders() -> list[tuple[str, str]]:
    ep = entry_points()
    root = ep["RESULTS_DIR"]
    found = []
    for chapter, spec in ep["specs"]().items():
        for place in (root / spec.folder, *(root / world / spec.folder for world in EVIDENCE)):
            for md in sorted(place.rglob("paper_vs_run.md")):
                if (md.parent / "metrics.json").is_file():
                    found.append((chapter, md.parent.relative_to(root).as_posix()))
    return found


FOLDERS = _folders()


def _param(chapter: str, rel: str):
    marks = []
    if rel in SKIPPED:
        marks.append(pytest.mark.skip(reason=SKIPPED[rel]))
    elif rel in KNOWN_DIFFERENT:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENT[rel]))
    return pytest.param(chapter, rel, marks=marks, id=rel)


def test_every_results_folder_is_covered():
    """Every chapter with committed results is here, and every skip names a folder that exists."""
    ep = entry_points()
    rels = {rel for _, rel in FOLDERS}
    with_results = {s.folder for s in ep["specs"]().values() if (ep["RESULTS_DIR"] / s.folder / "metrics.json").is_file()}
    assert with_results <= rels, f"chapters with metrics.json but no paper_vs_run.md: {sorted(with_results - rels)}"
    assert not (set(SKIPPED) | set(KNOWN_DIFFERENT)) - rels, "a skip or xfail names a folder that is gone"


def _provenance_line(made: dict[str, str]) -> str:
    return (f"*Produced by `{made['command']}` (code {made['code_version']}, commit {made['git_commit']}, "
            f"{made['date']}).*")


def _retupled(committed: dict[str, Any], typed: dict[str, Any]) -> None:
    """Turn back into tuples the lists of ``committed`` that the profile holds as tuples (same path in ``typed``)."""
    for key, value in committed.items():
        if isinstance(value, list) and isinstance(typed.get(key), tuple):
            committed[key] = tuple(value)
        elif isinstance(value, dict) and isinstance(typed.get(key), dict):
            _retupled(value, typed[key])


def _typed_profile(chapter: str, metrics: dict[str, Any]) -> None:
    """The committed profile typed as ``run`` returned it: ``Profile.to_dict`` gives tuples, JSON gave lists."""
    if isinstance(metrics.get("profile"), dict):
        _retupled(metrics["profile"], entry_points()["resolve"](chapter, "toy").profile.to_dict())


@pytest.mark.parametrize("chapter,rel", [_param(c, r) for c, r in FOLDERS])
def test_paper_vs_run_regenerates(chapter: str, rel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ep = entry_points()
    folder = ep["RESULTS_DIR"] / rel
    committed = (folder / "paper_vs_run.md").read_text().splitlines()
    metrics = json.loads((folder / "metrics.json").read_text())
    assert committed[-1] == _provenance_line(metrics["produced_by"]), (
        f"{rel}: the committed table's provenance line is not its metrics' produced_by")
    REHYDRATE.get(chapter, lambda m, f: None)(metrics, folder)
    _typed_profile(chapter, metrics)
    module, name = ep["figure_saver"]
    monkeypatch.setattr(module, name, lambda *args, **kwargs: None)

    ep["write"](chapter, metrics, ep["ResultsWriter"](rel, "toy", "test", out=tmp_path))

    regenerated = (tmp_path / rel / "paper_vs_run.md").read_text().splitlines()
    assert regenerated[-1].startswith("*Produced by `test` ")
    if regenerated[:-1] != committed[:-1]:
        diff = "\n".join(difflib.unified_diff(committed[:-1], regenerated[:-1], "committed", "regenerated",
                                              lineterm="", n=1))
        pytest.fail(f"{rel}/paper_vs_run.md does not regenerate from its metrics.json:\n{diff}")
