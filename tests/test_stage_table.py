"""The stage table: rollouts with tool turns, mode following without pre-filled think blocks,
repetition, intervals, and the tables a chapter writes."""
from __future__ import annotations

import pytest

from cascadekit.training.chat_base import build_chat_tokenizer
from cascadekit.domains import domains
from cascadekit.evaluation.stage_table import (PAPER, aggregate, evaluate, follows_mode, stage_markdown, paper_vs_run,
                                               repetition_rate, rollout, score_interval, suite_records)
from cascadekit.engine.models import build_model
from cascadekit.chapters import resolve
from cascadekit.profiles import apply_overrides, load_profile

PROFILE = load_profile("smoke", {"sft.eval_tasks": 1, "sft.max_new_tokens": 8})


def test_mode_following_needs_the_model_to_write_the_block() -> None:
    assert follows_mode("<think>\nsteps\n</think>\n\nanswer", True)
    assert not follows_mode("<think>\n\n</think>\n\nanswer", True)
    assert follows_mode("<think>\n\n</think>\n\nanswer", False)
    assert not follows_mode("answer", False) and not follows_mode("answer", True)
    assert not follows_mode("<think>\nsteps\n</think>\n\nanswer", False)
    assert not follows_mode("<think>\nsteps never closed", True)


def test_repetition_rate() -> None:
    assert repetition_rate("") == 0.0 and repetition_rate("one two") == 0.0
    assert repetition_rate("a b c d e f") == 0.0
    assert repetition_rate("a b c a b c a b c") == pytest.approx(4 / 7)


def test_score_interval() -> None:
    low, high = score_interval([1, 0, 1, 1])
    assert 0 < low < 0.75 < high <= 1
    low, high = score_interval([0.5, 0.7, 0.9])
    assert 0.5 <= low <= high <= 0.9


def _sample(domain: str, think: bool, score: float, tokens: int) -> dict:
    return {"domain": domain, "think": think, "score": score, "tokens": tokens, "loose": None,
            "follows_mode": True, "repetition": 0.0}


def test_aggregate_reports_intervals_and_the_length_ratio() -> None:
    samples = [_sample("math", True, 1, 30), _sample("math", True, 0, 50), _sample("math", False, 1, 10)]
    think, no_think = aggregate(samples, "s")
    assert think.mode == "think" and think.score == 0.5 and think.score_low < 0.5 < think.score_high
    assert think.length_ratio == pytest.approx(4.0) and no_think.length_ratio is None
    assert "4.0x" in stage_markdown([think, no_think]) and "AIME" in paper_vs_run([think, no_think], "s")



def test_rollout_answers_tool_calls_and_continues(monkeypatch) -> None:
    from cascadekit.evaluation import stage_table

    record = next(r for r in suite_records(PROFILE, ["tools"]) if r["think"])
    replies = iter(['<think>\nplan\n</think>\n\n<tool_call>\n{"name": "calculator", "arguments": '
                    '{"expression": "2 + 3"}}\n</tool_call>', "<think>\n\n</think>\n\n\\boxed{5}"])
    prompts_seen = []

    def fake_generate(model, tokenizer, prompts, max_new_tokens, batch_size):
        prompts_seen.extend(prompts)
        return [(next(replies), 7) for _ in prompts]

    monkeypatch.setattr(stage_table, "generate", fake_generate)
    (answer,) = rollout(None, None, [record], 8, 4)
    assert len(answer.turns) == 2 and answer.results == [["5"]] and answer.tokens == 14
    assert "<tool_response>\n5\n</tool_response>" in prompts_seen[1] and "<tool_response>" in answer.text
    assert not prompts_seen[0].endswith("<think>\n\n</think>\n\n")


def test_evaluation_table_on_a_tiny_model() -> None:
    tokenizer = build_chat_tokenizer(PROFILE)
    model = build_model(PROFILE.model, tokenizer, seed=0)
    records = suite_records(PROFILE)
    rows, samples = evaluate(model, tokenizer, records, PROFILE, "untrained")
    assert len(rows) == 2 * len(domains()) and len(samples) == len(records)
    for row in rows:
        assert 0 <= row.score_low <= row.score <= row.score_high <= 1
        assert 0 <= row.mode_following <= 1 and 0 <= row.repetition <= 1
    assert all(PAPER[name]["benchmark"] in stage_markdown(rows) for name in domains())


def test_evaluation_refuses_a_malformed_record() -> None:
    records = suite_records(PROFILE, ["math"])
    records[0] = {**records[0], "gold": "not a dict"}
    with pytest.raises(ValueError, match="gold"):
        evaluate(None, None, records, PROFILE, "bad")


def test_a_checkpoint_is_evaluated_once_by_its_content(tmp_path, monkeypatch) -> None:
    """Two folders with the same weights share one evaluation; other weights are evaluated again."""
    from cascadekit.evaluation import stage_table as table_module

    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    tokenizer = build_chat_tokenizer(PROFILE)
    folders = {}
    for name, seed in (("one", 0), ("copy", 0), ("other", 1)):
        folders[name] = tmp_path / name
        build_model(PROFILE.model, tokenizer, seed=seed).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
        (folders[name] / "stage.json").write_text(f'{{"built by": "{name}"}}')
    records = suite_records(PROFILE, ["math"])[:2]
    calls = []
    real = table_module.evaluate_checkpoint
    monkeypatch.setattr(table_module, "evaluate_checkpoint", lambda *a: calls.append(a[0]) or real(*a))
    first = table_module.stage_table(folders["one"], PROFILE, "SFT", records)
    copy = table_module.stage_table(folders["copy"], PROFILE, "RL", records)
    assert calls == [folders["one"]] and [s["completion"] for s in copy["samples"]] == [s["completion"] for s in first["samples"]]
    assert {r["stage"] for r in copy["rows"]} == {"RL"}  # read back, relabelled
    before = len(calls)
    table_module.stage_table(folders["other"], PROFILE, "SFT", records)
    table_module.stage_table(folders["one"], PROFILE, "SFT", records[:1])  # another suite
    assert len(calls) == before + 2


def test_the_kit_decoder_answers_every_turn_as_generate_does(monkeypatch) -> None:
    """Under ``engine.evaluation_decoder: kit`` the toy SFT's greedy stage-table samples and rows are ``generate``'s.

    Four records per domain, both modes, tool turns included; the kit's table says so in its key.
    """
    from cascadekit.chapters.cascade import sft_checkpoint
    from cascadekit.evaluation import stage_table as table_module
    from cascadekit.evaluation.stage_table import _suite_inputs, evaluate_checkpoint

    kit = resolve("08", "toy").profile  # Part II's toy world (its shipped SFT) decodes with the kit's loop
    generate = apply_overrides(kit, {"engine.evaluation_decoder": "generate"})
    checkpoint = sft_checkpoint(generate).checkpoint
    records = [r for name in domains() for r in suite_records(generate, [name])[:4]]
    expected = evaluate_checkpoint(checkpoint, generate, "SFT", records)
    monkeypatch.setattr(table_module, "_generate_rows", lambda *a: pytest.fail("model.generate decoded"))
    table = evaluate_checkpoint(checkpoint, kit, "SFT", records)
    keep = ("completion", "tokens", "score", "follows_mode")
    assert [{k: s[k] for k in keep} for s in table["samples"]] == [{k: s[k] for k in keep} for s in expected["samples"]]
    assert table["rows"] == expected["rows"]
    assert any("<tool_response>" in s["completion"] for s in expected["samples"])  # a second turn was decoded
    assert len({s["tokens"] for s in expected["samples"]}) > 10
    assert _suite_inputs(kit, records) == {**_suite_inputs(generate, records), "generation": "kit"}
