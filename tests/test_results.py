from __future__ import annotations

import json
from pathlib import Path

from cascadekit.results import RESULTS_DIR, default_root, load_metrics, markdown_table, save_metrics, save_paper_vs_run


def test_metrics_round_trip_with_provenance(tmp_path: Path) -> None:
    save_metrics("99_demo", {"pass@1": 0.5}, "python -m demo", root=tmp_path)
    metrics = load_metrics("99_demo", root=tmp_path)
    assert metrics["pass@1"] == 0.5 and metrics["produced_by"]["command"] == "python -m demo"
    assert load_metrics("98_missing", root=tmp_path) is None
    (tmp_path / "97_bad").mkdir()
    (tmp_path / "97_bad" / "metrics.json").write_text("{not json")
    assert load_metrics("97_bad", root=tmp_path) is None


def test_paper_vs_run_table(tmp_path: Path) -> None:
    rows = [{"claim": "a|b", "paper": 0.25, "this run": 0.1234}]
    assert markdown_table(rows).splitlines()[2] == "| a\\|b | 0.250 | 0.123 |"
    text = save_paper_vs_run("99_demo", "Demo", rows, "cmd", notes="It did not reproduce.", root=tmp_path).read_text()
    assert text.startswith("## Demo") and "It did not reproduce." in text and "`cmd`" in text


def test_only_the_toy_scale_writes_the_committed_results() -> None:
    assert default_root("toy") == RESULTS_DIR
    for scale in ("smoke", "paper", "full"):
        assert default_root(scale) == Path("runs") / f"results-{scale}"


def test_writers_leave_only_their_files(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cascadekit.results import save_chapter_results

    figure = plt.figure()
    save_chapter_results("99_demo", {"x": 1}, {"curve": figure}, "Demo", [{"a": 1}], "cmd", root=tmp_path)
    folder = tmp_path / "99_demo"
    assert sorted(p.name for p in folder.iterdir()) == ["curve.png", "metrics.json", "paper_vs_run.md"]
    assert (folder / "curve.png").read_bytes().startswith(b"\x89PNG")
    assert oct((folder / "metrics.json").stat().st_mode & 0o777) == "0o644"


def test_a_rewrite_keeps_the_runs_provenance_only_when_asked(tmp_path: Path) -> None:
    from cascadekit.results import ResultsWriter, write_result

    run = {"command": "cascadekit experiment 99", "code_version": "0.1.0+abc", "git_commit": "abc", "date": "then"}
    committed = {"produced_by": run, "x": 1}
    ResultsWriter("99_demo", "smoke", "cascadekit rewrite", tmp_path).save(committed, {}, "Demo", [{"a": 1}])
    assert load_metrics("99_demo", root=tmp_path)["produced_by"]["command"] == "cascadekit rewrite"  # default: this call
    assert "`cascadekit rewrite`" in (tmp_path / "99_demo" / "paper_vs_run.md").read_text()
    ResultsWriter("99_demo", "smoke", "cascadekit rewrite", tmp_path, keep_provenance=True).save(
        committed, {}, "Demo", [{"a": 1}])
    assert load_metrics("99_demo", root=tmp_path) == committed
    assert "`cascadekit experiment 99` (code 0.1.0+abc, commit abc, then)" in (
        tmp_path / "99_demo" / "paper_vs_run.md").read_text()
    written = write_result(tmp_path / "result.json", {"probe": "p"}, "cascadekit probe p")
    assert list(json.loads(written.read_text())) == ["produced_by", "probe"]


def test_a_run_names_the_commit_it_started_from(tmp_path: Path, monkeypatch) -> None:
    """The provenance is read when the writer is made: commits made while a long run trains do not rename it."""
    from cascadekit import results

    monkeypatch.setattr(results, "git_commit", lambda: "started")
    writer = results.ResultsWriter("99_x", "smoke", "cascadekit experiment 99", out=tmp_path)
    monkeypatch.setattr(results, "git_commit", lambda: "committed-later")
    writer.save({"value": 1}, {}, "Title", [{"claim": "c"}])
    saved = json.loads((tmp_path / "99_x" / "metrics.json").read_text())
    assert saved["produced_by"]["git_commit"] == "started"
    assert "commit started" in (tmp_path / "99_x" / "paper_vs_run.md").read_text()


def test_a_recorded_command_names_no_machine_folder() -> None:
    from cascadekit.results import portable_command, provenance

    command = "cascadekit experiment 10 --scale toy --work /tmp/work10c --out=/work/out --set a=/x"
    assert portable_command(command) == "cascadekit experiment 10 --scale toy --work $WORK --out $OUT --set a=/x"
    assert provenance("cascadekit run --out runs/toy")["command"] == "cascadekit run --out runs/toy"  # relative kept


def test_a_cache_path_is_shown_relative_to_the_cache(tmp_path: Path, monkeypatch) -> None:
    from cascadekit.artifacts import shown

    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    assert shown(tmp_path / "sft" / "c894671bdf53") == "$CACHE/sft/c894671bdf53"
    assert shown("data/checkpoints/sft/x") == "data/checkpoints/sft/x"
