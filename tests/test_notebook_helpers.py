"""The notebook helpers that put committed numbers into prose."""
from __future__ import annotations

import pytest

from cascadekit.course.notebook import lookup, quote, render

METRICS = {
    "runs": {"edge": {"prompts": 384, "evaluation": {"by_range": [
        {"range": "edge", "problems": 96, "pass@1": 0.2630208333},
        {"range": "hard", "problems": 160, "pass@1": 0.0},
    ]}}},
    "variants": [
        {"b_share": 0.001, "after": [{"op": 3, "context": "A", "pass@32": 0.9}, {"op": 3, "context": "B", "pass@32": 0.0}]},
        {"b_share": 0.01, "after": [{"op": 3, "context": "A", "pass@32": 0.8}, {"op": 3, "context": "B", "pass@32": 0.4375}]},
    ],
}


def test_lookup_walks_keys_indices_and_selectors() -> None:
    assert lookup(METRICS, "runs.edge.prompts") == 384
    assert lookup(METRICS, "runs.edge.evaluation.by_range[1].problems") == 160
    assert lookup(METRICS, "runs.edge.evaluation.by_range[range=edge].pass@1") == pytest.approx(0.263, abs=1e-3)
    assert lookup(METRICS, "variants[b_share=0.01].after[op=3,context=B].pass@32") == 0.4375


@pytest.mark.parametrize("path", ["runs.too_hard", "variants[5]", "variants[b_share=0.5]", "variants[0].after[op=3]"])
def test_lookup_names_the_missing_or_ambiguous_step(path: str) -> None:
    with pytest.raises(KeyError, match="no "):
        lookup(METRICS, path)


def test_quote_formats_one_value() -> None:
    assert quote(METRICS, "runs.edge.prompts") == "384"
    assert quote(METRICS, "runs.edge.evaluation.by_range[range=edge].pass@1", "{:.2f}") == "0.26"


def test_render_fills_fields_and_keeps_literal_braces() -> None:
    shown = render("edge pass@1 {runs.edge.evaluation.by_range[range=edge].pass@1:.2f} on {runs.edge.prompts:,} "
                   "prompts, {verdict}; $\\frac{{a}}{{b}}$", {**METRICS, "verdict": "cannot tell"})
    assert shown.data == "edge pass@1 0.26 on 384 prompts, cannot tell; $\\frac{a}{b}$"
    assert shown._repr_markdown_() == shown.data


def test_render_fails_loudly_on_a_missing_number() -> None:
    with pytest.raises(KeyError, match="runs.edge.steps"):
        render("{runs.edge.steps}", METRICS)


def test_a_toy_chapter_reads_its_committed_run_unless_asked_to_retrain(tmp_path, monkeypatch, capsys):
    from cascadekit import results
    from cascadekit.chapters import resolve
    from cascadekit.course.notebook import committed_or_run

    folder = tmp_path / "10_if_rl"
    folder.mkdir()
    (folder / "metrics.json").write_text('{"produced_by": {"command": "cascadekit experiment 10", '
                                         '"git_commit": "abc"}, "claims": 1}')
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    ran = []

    def run(config, out_dir):
        ran.append((config.scale, dict(config.overrides)))
        return {"fresh": True}

    assert committed_or_run(run, resolve("10", "toy"), tmp_path) == {
        "produced_by": {"command": "cascadekit experiment 10", "git_commit": "abc"}, "claims": 1}
    assert "retrain = True" in capsys.readouterr().out and not ran
    assert committed_or_run(run, resolve("10", "toy"), tmp_path, retrain=True) == {"fresh": True}
    assert committed_or_run(run, resolve("10", "toy", {"rl.lr": 0.001}), tmp_path) == {"fresh": True}
    assert committed_or_run(run, resolve("10", "toy", seed=3), tmp_path) == {"fresh": True}
    assert committed_or_run(run, resolve("10", "smoke"), tmp_path) == {"fresh": True}
    (folder / "metrics.json").write_text("{not json")
    assert committed_or_run(run, resolve("10", "toy"), tmp_path) == {"fresh": True}
    assert [scale for scale, _ in ran] == ["toy", "toy", "toy", "smoke", "toy"]


@pytest.mark.parametrize("overrides, field", [({"model.hidden": "big"}, "model.hidden='big': expected an integer"),
                                              ('{"model.hidden": "big"}', "model.hidden='big': expected an integer"),
                                              (["model.hidden"], "overrides: expected a mapping"),
                                              ("model.hidden=64", "overrides 'model.hidden=64': not JSON")])
def test_a_bad_overrides_parameter_is_one_line_naming_the_field(overrides: object, field: str, tmp_path) -> None:
    """Issue 37: the same message as the command line's ``--set``, and no traceback in the notebook."""
    from cascadekit.course.notebook import ChapterSettingsError, start_chapter
    from cascadekit.profiles import ProfileError, parse_overrides

    with pytest.raises(ChapterSettingsError) as caught:
        start_chapter("smoke", 0, tmp_path / "out", overrides)
    assert str(caught.value).startswith(field)
    assert caught.value._render_traceback_() == [f"ChapterSettingsError: {caught.value}"]
    if "expected an integer" in field:
        with pytest.raises(ProfileError) as cli:
            parse_overrides(["model.hidden=big"])
        assert str(caught.value) == str(cli.value)


def test_overrides_as_papermill_passes_them() -> None:
    from cascadekit.chapters import resolve
    from cascadekit.profiles import overrides_mapping

    assert overrides_mapping('{"model.hidden": 64}') == {"model.hidden": 64}
    assert overrides_mapping("") == overrides_mapping(None) == overrides_mapping({}) == {}
    assert resolve("04", "smoke", '{"model.hidden": 64}').profile.model.hidden == 64  # chapters take the JSON text too


def test_known_library_noise_is_dropped_and_the_rest_kept(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from cascadekit.course.notebook import quiet_known_noise

    quiet_known_noise()
    quiet_known_noise()  # idempotent: one filter per logger
    head_swap = ("Qwen3ForSequenceClassification LOAD REPORT from: /root/.cache/x\nKey | Status |\n---+---+-\n"
                 "lm_head.weight | UNEXPECTED | \nscore.weight   | MISSING    | \n\nNotes: ...")
    damaged = head_swap.replace("score.weight  ", "model.norm.weight")
    logger = logging.getLogger("transformers.modeling_utils")
    assert len(logger.filters) == 1
    with caplog.at_level(logging.WARNING):
        logger.warning(head_swap)
        logger.warning(damaged)
        logging.getLogger("trl.trainer.sft_trainer").warning("... the model may not learn to stop. ...")
        logging.getLogger("trl.trainer.sft_trainer").warning("something else")
    assert [r.getMessage() for r in caplog.records] == [damaged, "something else"]


def test_the_trainer_notebook_progress_writes_no_loss_table() -> None:
    """After ``quiet_known_noise`` (before or after transformers is imported) ``on_log`` writes no table row."""
    from cascadekit.course.notebook import quiet_known_noise

    quiet_known_noise()
    from transformers.utils.notebook import NotebookProgressCallback

    callback = NotebookProgressCallback()  # no tracker: the original on_log would fail on this "loss" log
    assert callback.on_log(None, None, None, logs={"loss": 0.0}) is None
    from types import SimpleNamespace

    from transformers.trainer_utils import IntervalStrategy

    callback.on_train_begin(SimpleNamespace(eval_strategy=IntervalStrategy.NO), SimpleNamespace(max_steps=4), None)
    assert callback.training_tracker.inner_table is None  # a bar without the "Step | Training Loss" table


def test_a_recorded_command_shows_no_scratch_folder_of_the_machine_that_ran_it() -> None:
    from cascadekit.course.notebook import without_scratch

    assert (without_scratch("cascadekit experiment 05 --scale toy --threads 2 --work /tmp/work05c (commit x)")
            == "cascadekit experiment 05 --scale toy --threads 2 --work DIR (commit x)")
    assert without_scratch("--work=/root/w --out runs/x") == "--work=DIR --out runs/x"
    assert without_scratch("--work runs/05") == "--work runs/05"  # a relative folder is the reader's own


def test_the_glance_is_the_committed_claims_table_and_its_provenance_without_the_notes() -> None:
    from cascadekit.course.notebook import claims_summary

    text = ("## Chapter 99\n\n| claim | verdict |\n|---|---|\n| a | reproduced |\n\n### Notes\n\n| other | table |\n"
            "|---|---|\n\n*Produced by `cascadekit experiment 99` (code 1, commit abc, 2026-12-01 10:00 UTC).*\n")
    assert claims_summary(text) == ("**The committed toy run at a glance**\n\n| claim | verdict |\n|---|---|\n"
                                    "| a | reproduced |\n\n*Produced by `cascadekit experiment 99` (code 1, commit abc, "
                                    "2026-12-01 10:00 UTC).*\n")
    assert "no claims table" in claims_summary("## Chapter 99\n\nnothing yet\n")


def test_every_chapter_with_a_committed_run_shows_it_at_a_glance(tmp_path) -> None:
    from cascadekit.course.notebook import chapter
    from cascadekit.results import RESULTS_DIR

    for number in ("03", "08", "14"):
        ch = chapter(number, "smoke", 0, tmp_path / number)
        glance, committed = ch.at_a_glance().data, (RESULTS_DIR / ch.config.spec.folder / "paper_vs_run.md").read_text()
        assert glance.splitlines()[-1] == committed.strip().splitlines()[-1]  # the committed run's provenance
        assert next(line for line in committed.splitlines() if line.startswith("|")) in glance  # its claims table


def test_show_source_displays_wherever_it_stands_in_a_cell() -> None:
    """Three chapters called it before a cell's last line, where a returned value shows nothing (issue 58)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = []
    shell.display_pub.publish = lambda data, **kw: shown.append(data)
    try:
        shell.run_cell("from cascadekit.course.notebook import lookup, show_source\nshow_source(lookup)\nx = 1\n")
    finally:
        InteractiveShell.clear_instance()
    assert len(shown) == 1 and "def lookup(" in shown[0]["text/markdown"]


def test_a_chapter_prints_the_profile_it_runs_not_the_plain_scale_profile(tmp_path, capsys) -> None:
    """Part II notebooks printed the plain toy profile (math_rl lengths (36, 48, 64), sft ops (2, 3)) above a
    chapter running its world's (48-80, ops 4-5): the screen contradicted itself (issue 58)."""
    from cascadekit.course.notebook import chapter
    from cascadekit.profiles import load_profile

    ch = chapter("11", "toy", 0, tmp_path / "out")
    printed = capsys.readouterr().out
    assert ch.profile.summary() in printed
    assert ch.profile.math_rl.lengths != load_profile("toy").math_rl.lengths  # the world differs ...
    assert load_profile("toy").summary() not in printed  # ... and the plain profile is not what is shown
