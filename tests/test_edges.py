"""The edge table: bands, the four scores of a cell, prompt pairing, checkpoint lookup, and a run on a tiny model."""
from __future__ import annotations

import json

import pytest

from cascadekit.cli import main
from cascadekit.engine.models import build_model
from cascadekit.evaluation.edges import (
    band, cells, edge_records, edges, edges_markdown, paired, prompt_id, resolve_checkpoint, write_edges,
)
from cascadekit.passk import pass_at_k
from cascadekit.profiles import load_profile
from cascadekit.training.chat_base import build_chat_tokenizer

PROFILE = load_profile("smoke", {"sft.max_new_tokens": 8, "evaluation.batch_size": 8})


def test_bands() -> None:
    assert band(0.61, 0.9) == "too easy" and band(0.6, 0.9) == "edge"
    assert band(0.0, 0.04) == "too hard" and band(0.0, 0.05) == "edge"
    assert band(0.9, 0.0) == "too easy"  # greedy decides first


def test_edge_records_cover_every_domain_mode_and_op() -> None:
    records = edge_records(PROFILE, ["math", "tools"], ["think", "no_think"], [2, 3], 2)
    assert len(records) == 2 * 2 * 2 * 2
    assert {(r["domain"], r["think"], r["op"]) for r in records} == {
        (d, t, op) for d in ("math", "tools") for t in (True, False) for op in (2, 3)}
    no_think = edge_records(PROFILE, ["math"], ["no_think"], [2], 3)
    assert [r["think"] for r in no_think] == [False] * 3
    with pytest.raises(ValueError, match="unknown domain or mode 'maths'"):
        edge_records(PROFILE, ["maths"], ["think"], [2], 1)
    with pytest.raises(ValueError, match="unknown domain or mode 'thinking'"):
        edge_records(PROFILE, ["math"], ["thinking"], [2], 1)


def test_a_cell_reports_greedy_pass1_passk_and_best_of_k() -> None:
    records = edge_records(PROFILE, ["general"], ["think"], [2], 3)
    greedy = [1.0, 0.0, 0.5]
    samples = [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.8, 0.4, 1.0, 1.0]]
    (cell,) = cells(records, greedy, samples, 4)
    assert cell["n"] == 3 and cell["greedy"] == pytest.approx(0.5)
    assert cell["pass@1"] == pytest.approx((0.25 + 0 + 0.8) / 3)
    assert cell["pass@4"] == pytest.approx((1 + 0 + 1) / 3)  # n = k: any full-marks sample
    assert cell["best-of-4"] == pytest.approx((1 + 0 + 1) / 3)
    assert cell["band"] == "edge"
    assert [p["greedy"] for p in cell["prompts"]] == greedy and len({p["id"] for p in cell["prompts"]}) == 3


def test_pass_at_k_counts_only_full_marks() -> None:
    records = edge_records(PROFILE, ["general"], ["think"], [2], 2)
    (cell,) = cells(records, [0.0, 0.0], [[0.9, 0.9], [0.99, 0.0]], 2)
    assert cell["pass@2"] == 0.0 and cell["band"] == "too hard" and cell["best-of-2"] == pytest.approx(0.945)
    assert pass_at_k(8, 1, 8) == 1.0  # the estimator the cell uses, at n = k


def test_two_checkpoints_pair_up_prompt_by_prompt() -> None:
    records = edge_records(PROFILE, ["math"], ["think"], [2], 3)
    before = cells(records, [0.0, 1.0, 0.0], [[0.0]] * 3, 1)
    after = cells(records[:2], [1.0, 1.0], [[0.0]] * 2, 1)
    (pair,) = paired(before, after)
    assert pair["n"] == 2 and pair["difference"] == pytest.approx(0.5)
    other = edge_records(PROFILE, ["math"], ["think"], [3], 1)
    assert prompt_id(other[0]) not in {p["id"] for p in before[0]["prompts"]}


def test_resolve_checkpoint(tmp_path) -> None:
    shipped = resolve_checkpoint("sft/c1b9df82d3c5")
    assert shipped.name == "c1b9df82d3c5" and (shipped / "config.json").is_file()
    with pytest.raises(ValueError, match="no such cache entry"):
        resolve_checkpoint("sft/000000000000")
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        resolve_checkpoint(str(tmp_path))


def test_edges_of_a_tiny_model_are_written_and_cached(tmp_path, monkeypatch) -> None:
    from cascadekit.evaluation import edges as edges_module

    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    tokenizer = build_chat_tokenizer(PROFILE)
    folder = tmp_path / "model"
    build_model(PROFILE.model, tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    result = edges(str(folder), PROFILE, [2], ["math", "tools"], ["think"], n=2, k=3)
    assert [(c["domain"], c["op"], c["n"]) for c in result["cells"]] == [("math", 2, 2), ("tools", 2, 2)]
    for cell in result["cells"]:
        assert 0 <= cell["pass@1"] <= cell["best-of-3"] <= 1 and 0 <= cell["pass@3"] <= 1
    calls = []
    monkeypatch.setattr(edges_module, "rollout", lambda *a, **k: calls.append(a) or [])
    assert edges(str(folder), PROFILE, [2], ["math", "tools"], ["think"], n=2, k=3) == result  # read back
    assert calls == []
    path = write_edges(result, tmp_path / "out", "cascadekit edges test")
    assert json.loads(path.read_text())["produced_by"]["command"] == "cascadekit edges test"
    text = (tmp_path / "out" / "edges.md").read_text()
    assert text.startswith(edges_markdown(result)) and "| math | think | 2 | 2 |" in text
    assert "*Produced by `cascadekit edges test`" in text


def test_the_command_refuses_bad_input_in_one_line(capsys) -> None:
    assert main(["edges", "sft/000000000000", "--ops", "2"]) == 2
    assert main(["edges", "sft/c1b9df82d3c5", "--ops", "2", "--domains", "chess"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no such cache entry" in err[0] and "unknown domain or mode 'chess'" in err[1]
