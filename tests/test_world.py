"""The DAG world: exact op counts, valid values, rendering, determinism, splits, mixtures, JSONL."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.world import (
    CONTEXTS,
    SPLITS,
    GoldNode,
    Mixture,
    MixtureComponent,
    Problem,
    generate_problem,
    generate_problems,
    read_jsonl,
    sample_mixture,
    split_of,
    write_jsonl,
)
from cascadekit.world import corpus
from cascadekit.world.graph import MAX_VALUE, Graph, Node, sample_graph
from cascadekit.world.render import SHARED_GRAPH_STYLES, STYLES, render_problem

OPS = range(2, 21)


@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_every_op_is_exact_with_valid_values(context):
    for op in OPS:
        for seed in range(25):
            p = generate_problem(op=op, context=context, seed=seed, style="compact")
            assert p.op == op
            assert all(0 <= node.value <= MAX_VALUE for node in p.nodes)
            assert p.answer == p.nodes[-1].value


@given(op=st.integers(2, 30), seed=st.integers(0, 2**63), context=st.sampled_from(["A", "B", "C"]),
       style=st.sampled_from(STYLES))
@settings(max_examples=150, deadline=None)
def test_any_seed_gives_an_exact_round_tripping_problem(op, seed, context, style):
    p = generate_problem(op, context, seed, style)
    assert p.op == op and p.seed == seed and Problem.from_dict(p.to_dict()) == p
    assert all(0 <= node.value <= MAX_VALUE for node in p.nodes)


def test_graph_edges_count_constants_and_reach_the_question():
    for op in (2, 7, 20, 30):
        for seed in range(50):
            graph = sample_graph(op, random.Random(seed))
            assert sum(len(n.parents) + (n.const is not None) for n in graph.nodes) == op
            used = {p for node in graph.nodes for p in node.parents}
            assert used == set(range(len(graph.nodes) - 1)), "every node feeds the question"
            assert all(p < i for i, node in enumerate(graph.nodes) for p in node.parents)


def test_gold_nodes_are_topological_with_unique_names():
    for seed in range(100):
        p = generate_problem(op=12, context="B", seed=seed)
        names = [n.name for n in p.nodes]
        assert len(set(names)) == len(names)
        seen: set[str] = set()
        for node in p.nodes:
            assert set(node.parents) <= seen
            seen.add(node.name)


def test_totals_sum_exactly_their_category():
    """An abstract quantity sums every mentioned instance of its category and place, and nothing else."""
    ctx = CONTEXTS["A"]
    for seed in range(200):
        p = generate_problem(op=10, context="A", seed=seed)
        values = {n.name: n.value for n in p.nodes}
        for node in p.nodes:
            if not node.name.startswith("total number of"):
                continue
            category, place = node.name.removeprefix("total number of ").split(" in ")
            members = {f"number of {item.full} in {place}".lower()
                       for c in ctx.categories if c.name.full == category for item in c.items}
            mentioned = {n.name for n in p.nodes} & members
            assert set(node.parents) == mentioned
            assert node.value == sum(values[m] for m in mentioned)


def test_rendering_formats():
    p = generate_problem(op=6, context="C", seed=3, style="full")
    assert p.training_text == (f"<question> {p.problem_text} {p.question} </question> <solution> "
                               f"{p.solution_text} </solution> <answer> {p.answer} </answer>")
    assert p.rl_prompt.endswith("<solution>") and p.training_text.startswith(p.rl_prompt)
    assert p.question.startswith("How many ") and p.question.endswith("?")
    assert p.solution_text.startswith("Define ") and p.solution_text.endswith(f"Answer: {p.answer}.")
    assert p.solution_text.count("Define ") == len(p.nodes)


def test_same_seed_same_graph_in_every_context_and_style():
    shapes = {(ctx, style): [(len(n.parents), n.value) for n in generate_problem(9, ctx, 5, style).nodes]
              for ctx in CONTEXTS for style in SHARED_GRAPH_STYLES}
    assert len({tuple(s) for s in shapes.values()}) == 1


def test_compact_is_shorter():
    for op in (2, 10, 20):
        full = generate_problem(op, "A", seed=1, style="full").training_text
        compact = generate_problem(op, "A", seed=1, style="compact").training_text
        assert len(compact.split()) < 0.75 * len(full.split())


def test_minimal_names_one_unnamed_place_and_is_shortest():
    for op in (2, 10, 20):
        problems = {style: generate_problem(op, "A", seed=1, style=style) for style in STYLES}
        assert len(problems["minimal"].training_text.split()) < len(problems["compact"].training_text.split())
        places = [p.compact for p in CONTEXTS["A"].places]
        assert not any(f" in {place}" in problems["minimal"].training_text for place in places)
        assert all(" in " not in node.name for node in problems["minimal"].nodes)


def test_minimal_names_places_when_a_huge_graph_needs_two():
    graph = Graph(tuple([Node("leaf", (), 1)] * 12 + [Node("total", (2 * i, 2 * i + 1), 2) for i in range(6)]))
    problem = render_problem(graph, "A", "minimal", random.Random(0))
    assert all(" in " in node.name for node in problem.nodes), "one place holds 5 totals at most"


def test_context_aliases_and_determinism():
    a = generate_problem(op=4, context="teachers-school", seed=11)
    b = generate_problem(op=4, context="B", seed=11)
    assert a == b and a.context == "B"
    assert generate_problem(4, "B", seed=12) != a


@pytest.mark.parametrize("kwargs", [
    dict(op=1), dict(op=31), dict(op=2.5), dict(context="Z"), dict(style="tiny"),
])
def test_bad_input_raises_value_error(kwargs):
    args = dict(op=3, context="A", seed=0, style="full") | kwargs
    with pytest.raises(ValueError):
        generate_problem(**args)


def test_generate_problems_deterministic_deduplicated_balanced():
    first = generate_problems(ops=range(2, 6), contexts=("A", "C"), n=80, seed=7, split="rl", style="compact")
    again = generate_problems(ops=range(2, 6), contexts=("A", "C"), n=80, seed=7, split="rl", style="compact")
    assert first == again
    assert len({p.key for p in first}) == 80
    counts = {(op, c): sum(p.op == op and p.context == c for p in first) for op in range(2, 6) for c in "AC"}
    assert set(counts.values()) == {10}
    assert all(split_of(p) == "rl" for p in first)
    assert generate_problems(n=0) == []


def test_splits_are_disjoint():
    keys = {}
    for split in SPLITS:
        problems = generate_problems(ops=(2, 3), contexts=("A",), n=300, seed=0, split=split, style="compact")
        keys[split] = {p.graph_key for p in problems}
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not keys[a] & keys[b], (a, b)


def test_unmeetable_count_fails_fast(monkeypatch):
    """A space that runs out of new problems gives a clear error, not a hang."""
    only = generate_problem(2, "A", seed=0, style="compact")
    monkeypatch.setattr(corpus, "generate_problem", lambda *args, **kwargs: only)
    with pytest.raises(ValueError, match="n=5"):
        generate_problems(ops=(2,), n=5, split=split_of(only), style="compact")


def test_bad_corpus_arguments():
    with pytest.raises(ValueError, match="split"):
        generate_problems(n=1, split="test")
    with pytest.raises(ValueError, match="context"):
        generate_problems(contexts=("D",), n=1)
    with pytest.raises(ValueError, match="op"):
        generate_problems(ops=(1, 2), n=1)


def test_mixture_shares_and_determinism():
    mixture = Mixture((MixtureComponent("A", (2, 5), 0.9), MixtureComponent("B", (2, 2), 0.1)))
    assert mixture.counts(1000) == [900, 100]
    rare = Mixture((MixtureComponent("A", (2, 20), 0.999), MixtureComponent("B", range(2, 3), 0.001)))
    assert rare.components[1].ops == (2, 2) and rare.counts(1000) == [999, 1]
    drawn = sample_mixture(mixture, 60, seed=3, split="midtrain", style="compact")
    assert drawn == sample_mixture(mixture, 60, seed=3, split="midtrain", style="compact")
    b = [p for p in drawn if p.context == "B"]
    assert len(b) == 6 and all(p.op == 2 for p in b)
    assert all(2 <= p.op <= 5 for p in drawn if p.context == "A")
    assert len({p.key for p in drawn}) == 60
    with pytest.raises(ValueError):
        Mixture((MixtureComponent("A", (2, 5), 0.5),))
    with pytest.raises(ValueError):
        MixtureComponent("A", (5, 2), 1.0)


def test_jsonl_round_trip(tmp_path):
    problems = generate_problems(ops=range(2, 8), contexts=("A", "B", "C"), n=30, seed=1)
    path = write_jsonl(problems, tmp_path / "sub" / "p.jsonl")
    assert read_jsonl(path) == problems
    assert Problem.from_dict(problems[0].to_dict()) == problems[0]
    assert isinstance(problems[0].nodes[0], GoldNode)


def test_problem_records_fit_a_datasets_table():
    from datasets import Dataset

    problems = generate_problems(ops=range(2, 6), contexts=("A", "B"), n=40, seed=0, style="compact")
    table = Dataset.from_list([p.to_dict() for p in problems])
    assert Problem.from_dict(table[0]) == problems[0]


# --- bounds checked before work, strict records, atomic JSONL (security issue) ------------

@pytest.mark.parametrize("kwargs, needle", [
    ({"ops": range(2, 10**9)}, "op must be an integer from 2 to 30, got 999999999"),
    ({"ops": range(1, 5)}, "got 1"),
    ({"ops": [3, 2.0]}, "got 2.0"),
    ({"n": 10**12}, "n must be an integer from 0 to 100,000,000"),
    ({"n": -1}, "n must be an integer"),
    ({"n": 5.0}, "got 5.0"),
    ({"n": True}, "got True"),
    ({"seed": 2**70}, "seed must be an integer"),
    ({"seed": "0"}, "seed must be an integer"),
])
def test_corpus_bounds_are_checked_before_anything_is_built(kwargs, needle):
    from cascadekit.world import iter_problems

    with pytest.raises(ValueError) as info:
        iter_problems(**{"ops": [2, 3], "n": 3, **kwargs})  # raises on the call, not the first next()
    assert needle in str(info.value)


def test_iter_problems_streams_the_same_problems():
    from cascadekit.world import iter_problems

    stream = iter_problems(ops=[2, 3], contexts=["A", "B"], n=6, seed=4, split="rl", style="compact")
    assert [p.key for p in stream] == [p.key for p in generate_problems([2, 3], ["A", "B"], 6, 4, "rl", "compact")]


@pytest.mark.parametrize("change, needle", [
    ({"op": "3"}, "field 'op' must be an integer"),
    ({"answer": 1.5}, "field 'answer' must be an integer"),
    ({"answer": True}, "field 'answer' must be an integer"),
    ({"nodes": 5}, "'nodes' must be a list of objects"),
    ({"nodes": [5]}, "'nodes' must be a list of objects"),
    ({"nodes": [{"name": "a", "parents": "bc", "value": 1}]}, "field 'parents' must be a list of strings"),
    ({"question": None}, "field 'question' must be a string"),
    ({"op": float("inf")}, "field 'op' must be an integer"),
])
def test_problem_records_are_checked_not_coerced(change, needle):
    record = {**generate_problem(3, "A", 0).to_dict(), **change}
    with pytest.raises(ValueError, match=needle):
        Problem.from_dict(record)
    good = generate_problem(3, "A", 0).to_dict()
    assert Problem.from_dict(good) == generate_problem(3, "A", 0)
    with pytest.raises(ValueError, match="missing field 'context'"):
        Problem.from_dict({k: v for k, v in good.items() if k != "context"})
    with pytest.raises(ValueError, match="JSON object"):
        Problem.from_dict([good])


def test_write_jsonl_keeps_the_old_file_when_the_stream_fails(tmp_path):
    path = tmp_path / "problems.jsonl"
    write_jsonl(generate_problems([2], n=2), path)
    before = path.read_bytes()

    def broken():
        yield from generate_problems([3], n=5)
        raise RuntimeError("generator died midway")

    with pytest.raises(RuntimeError, match="midway"):
        write_jsonl(broken(), path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["problems.jsonl"]
