import pytest

from cascadekit.evaluation.report import (
    chance_table,
    error_taxonomy,
    evaluate_ladder,
    examples,
    format_ladder,
    judge_samples,
    ladder_table,
    op_range,
    passk_table,
)
from cascadekit.engine.models import build_model
from cascadekit.profiles import load_profile
from cascadekit.engine.tokenizer import train_tokenizer
from cascadekit.world import generate_problems

SMOKE = load_profile("smoke", {"evaluation.max_new_tokens": 8})
WORLD = SMOKE.world


def _records(spec):
    """spec: {op: [[correct flags of problem 0], [..problem 1]]}."""
    rows, index = [], 0
    for op, problems in spec.items():
        for flags in problems:
            for s, ok in enumerate(flags):
                rows.append({"op": op, "range": op_range(op, WORLD), "problem": index, "sample": s,
                             "correct": ok, "answer_correct": True, "process_accuracy": float(ok),
                             "n_missing": int(not ok), "n_dependency": 0, "n_value": 0, "answer_mismatch": 0})
            index += 1
    return rows


def test_op_ranges():
    assert [op_range(op, WORLD) for op in (2, 3, 4, 5, 9)] == ["in_distribution", "in_distribution", "edge", "hard", "outside"]


def test_passk_averages_the_unbiased_estimate_over_problems():
    records = _records({2: [[1, 0, 0, 0], [0, 0, 0, 0]], 4: [[1, 1, 1, 1]]})
    table = {(r["op"], r["k"]): r["pass@k"] for r in passk_table(records, (1, 2, 4))}
    assert table[(2, 1)] == pytest.approx(0.125)
    assert table[(2, 2)] == pytest.approx(0.25)  # problem 0: 1 - C(3,2)/C(4,2) = 0.5
    assert table[(2, 4)] == pytest.approx(0.5)
    assert table[(4, 1)] == 1.0
    by_range = passk_table(records, (1,), by="range")
    assert [r["range"] for r in by_range] == ["in_distribution", "edge"]


def test_chance_is_the_probability_of_guessing_from_the_training_answers():
    problems = generate_problems(ops=[2], contexts=("A",), n=2, seed=0, split="eval", style="compact")
    answers = [problems[0].answer] * 1 + [10**9] * 3  # answer 0 has frequency 1/4, answer 1 maybe 0
    rows = chance_table(problems, answers, (1, 2), WORLD)
    p1 = 0.25 if problems[1].answer != problems[0].answer else 0.5
    expected_k1 = (0.25 + (p1 if p1 == 0.5 else 0.0)) / 2
    assert rows[0]["pass@k"] == pytest.approx(expected_k1)
    assert rows[1]["k"] == 2 and rows[1]["pass@k"] >= rows[0]["pass@k"]


def test_gold_solutions_pass_and_garbage_fails():
    problems = generate_problems(ops=[2, 3], contexts=("A",), n=2, seed=0, split="eval", style="compact")
    gold = [p.training_text.split("<solution>", 1)[1] for p in problems]
    records = judge_samples(problems, [[g, "nonsense"] for g in gold], WORLD)
    assert [r["correct"] for r in records] == [True, False, True, False]
    assert records[1]["n_missing"] > 0 and records[1]["answer_mismatch"] == 1
    assert records[0]["reason"] == "correct" and records[1]["text"] == "nonsense"
    picked = examples(records, problems)
    assert [(e["op"], e["correct"]) for e in picked] == [(2, False), (2, True), (3, False), (3, True)]
    assert picked[1]["text"] == picked[1]["gold"] == gold[0]


def test_ladder_and_errors_tables():
    records = _records({2: [[1, 0]], 5: [[0, 0]]})
    chance = [{"op": 2, "k": 1, "pass@k": 0.1}, {"op": 2, "k": 2, "pass@k": 0.2},
              {"op": 5, "k": 1, "pass@k": 0.0}, {"op": 5, "k": 2, "pass@k": 0.0}]
    rows = ladder_table(records, chance, 2, WORLD)
    assert rows[0] == {"op": 2, "range": "in_distribution", "process_pass@1": 0.5, "process_pass@2": 1.0,
                       "answer_pass@1": 1.0, "answer_pass@2": 1.0, "chance_pass@1": 0.1, "chance_pass@2": 0.2}
    assert "op" in format_ladder(rows, 2).splitlines()[0]
    errors = error_taxonomy(records)
    assert errors[1]["op"] == 5 and errors[1]["n_missing"] == 1.0 and errors[0]["n_missing"] == 0.5


def test_smoke_ladder_end_to_end(tmp_path):
    problems = generate_problems(ops=[2], contexts=("A",), n=5, seed=0, style="compact")
    tokenizer = train_tokenizer([p.training_text for p in problems], 300)
    model = build_model(SMOKE.model, tokenizer)
    results = evaluate_ladder(model, tokenizer, SMOKE)
    n_ops = WORLD.ops_hard[1] - WORLD.ops_in_distribution[0] + 1
    assert len(results["records"]) == n_ops * SMOKE.evaluation.problems_per_op * SMOKE.evaluation.samples
    assert [r["op"] for r in results["ladder"]] == list(range(2, 2 + n_ops))
    assert {r["range"] for r in results["records"]} == {"in_distribution", "edge", "hard"}
