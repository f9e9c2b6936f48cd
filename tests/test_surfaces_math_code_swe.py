"""The math, code and swe surfaces of the DAG world: gold answers pass in both modes, corrupted
ones fail, hostile completions and malformed gold never raise, gold records validate, the swe bug
is real, and the tasks are short, regular and distinct."""
from __future__ import annotations

import json
import random
import re
from types import ModuleType

import pytest

from cascadekit.domains import Task, code, math, swe
from cascadekit.domains.dag import draw_dag
from cascadekit.verify.patch import PatchError, apply_patch, parse_patch, patch_similarity

SURFACES = {"math": math, "code": code, "swe": swe}
OPS = range(2, 5)
SIZE_AT_OP_4 = {"math": 700, "code": 700, "swe": 1200}


def draw(module: ModuleType, seed: int, ops=OPS) -> Task:
    rng = random.Random(seed)
    while (task := module.make_task(rng, ops)) is None:
        pass
    return task


def forms(task: Task) -> list[str]:
    """The gold answers as completions: both modes, bare and after a think block."""
    return [task.answer, task.no_think_answer,
            f"<think>\n{task.thinking}\n</think>\n\n{task.answer}",
            f"<think>\n\n</think>\n\n{task.no_think_answer}<|im_end|>"]


def run(source: str, function: str, args: list[int]) -> int:
    """Our own generated function's value (the test's, never model text)."""
    namespace: dict = {}
    exec(source, namespace)
    return namespace[function](*args)


@pytest.mark.parametrize("name", SURFACES)
def test_gold_answers_score_one_in_both_modes(name: str) -> None:
    module = SURFACES[name]
    for seed in range(2):
        task = draw(module, seed)
        assert task.domain == name and "/think" not in task.prompt and "/no_think" not in task.prompt
        for completion in forms(task):
            verdict = module.judge(task.gold, completion)
            assert verdict.score == 1.0, (completion, verdict.reason)


def test_math_surface_is_the_part_one_problem() -> None:
    task = math.make_task(random.Random(4), [3])
    dag = draw_dag(random.Random(4), [3])
    assert task.prompt == f"{dag.problem.problem_text} {dag.problem.question}"
    assert task.thinking == " ".join(dag.steps())
    assert task.answer == task.no_think_answer == f"\\boxed{{{dag.answer}}}"
    assert task.gold == {"answer": dag.answer, "op": 3}


def test_code_surface_drops_the_leaf_values_and_keeps_the_sentences() -> None:
    for seed in range(30):
        task = draw(code, seed)
        assert re.fullmatch(r"Write count_\w+\((\w+(, \w+)*)?\)\.( .+)?", task.prompt)
        assert not re.search(r"equals \d+\.", task.prompt)
        assert task.answer == task.no_think_answer and task.answer.startswith("```python\ndef count_")
        assert all(re.fullmatch(r"\w+ = .+", step) for step in task.thinking.rstrip(".").split(". "))
        assert len(task.gold["cases"]) == 4
        for args, want in task.gold["cases"]:
            assert all(1 <= a <= 20 for a in args)
            assert run(task.answer.strip("`").removeprefix("python\n"), task.gold["function"], args) == want


def test_corrupted_answers_score_zero() -> None:
    task = draw(math, 0)
    wrong = f"\\boxed{{{task.gold['answer'] + 1}}}"
    assert math.judge(task.gold, wrong).score == 0.0
    assert math.judge(task.gold, f"<think>\n{task.answer}\n</think>\n\nno idea").score == 0.0  # box only drafted

    task = draw(code, 0)
    line = next(ln for ln in task.answer.splitlines() if " = " in ln)
    lhs, rhs = line.split(" = ", 1)
    broken = task.answer.replace(line, f"{lhs} = {swe.wrong_expressions(rhs)[0]}")
    verdict = code.judge(task.gold, broken)
    assert verdict.score == 0.0 and verdict.details["pass_fraction"] < 1.0

    task = draw(swe, 0)
    search = task.answer.split("\n")[2]
    noop = task.answer.replace(task.answer.split("\n")[4], search)  # "fix" that keeps the bug
    verdict = swe.judge(task.gold, noop)
    assert verdict.score == 0.0 and verdict.details["applied"] is True
    assert verdict.reason.startswith("tests fail: wrong answer on test 0")
    assert verdict.details["similarity"] < 1.0


GARBAGE = ["", " ", "\x00\xff\ufffd" * 50, "x" * 1_000_000, "`" * 200_000, "<think>\nnever closed",
           "</think>", "\\boxed{" * 50_000, "```python\n" + "(" * 10_000 + "\n```",
           "<<<<<<< SEARCH\n" * 20_000, "calc.py\n<<<<<<< SEARCH\n=======\n>>>>>>> REPLACE",
           "--- a/calc.py\n+++ b/calc.py\n@@ -99999999999999999999 +1 @@\n-x\n+y\n",
           None, 42, ["\\boxed{1}"], {"answer": 1}, b"\\boxed{1}"]


@pytest.mark.parametrize("name", SURFACES)
def test_hostile_completions_never_raise(name: str) -> None:
    module = SURFACES[name]
    task = draw(module, 1)
    for completion in GARBAGE:
        verdict = module.judge(task.gold, completion)  # type: ignore[arg-type]
        assert verdict.score == 0.0 and isinstance(verdict.reason, str) and len(verdict.reason) < 400


BAD_GOLDS = [None, 3, "x", [], [["a", 1]], {}, {"answer": "7"}, {"answer": True, "op": 2}, {"function": 5},
             {"function": "f", "cases": "x"}, {"function": "f", "cases": [[1, 2]]},
             {"file": "../etc.py", "source": "", "patch": "", "tests": {}},
             {"file": "calc.py", "source": 7, "patch": "", "tests": {}}]


@pytest.mark.parametrize("name", SURFACES)
def test_malformed_gold_never_raises_and_scores_zero(name: str) -> None:
    module = SURFACES[name]
    task = draw(module, 2)
    for gold in BAD_GOLDS:
        for completion in (task.answer, ""):
            verdict = module.judge(gold, completion)  # type: ignore[arg-type]
            assert verdict.score == 0.0 and verdict.reason.startswith(f"{name} gold:")


@pytest.mark.parametrize("name, gold, message", [
    ("math", None, "math gold: must be a dict of fields, got None"),
    ("math", {"op": 2}, "math gold: field 'answer' is missing"),
    ("math", {"answer": "12", "op": 2}, "math gold: field 'answer' must be an integer, got '12'"),
    ("math", {"answer": 12, "op": 2.5}, "math gold: field 'op'"),
    ("code", {"function": "count x", "cases": [[[1], 2]]}, "code gold: field 'function' must be a Python function"),
    ("code", {"function": "f", "cases": "x"},
     "code gold: field 'cases' must be a non-empty list of [arguments, expected] pairs, got 'x'"),
    ("code", {"function": "f", "cases": [[1, 2]]}, "code gold: field 'cases'"),
    ("code", {"function": "f", "cases": []}, "code gold: field 'cases'"),
    ("swe", {"source": "", "patch": "", "tests": {}}, "swe gold: field 'file' is missing"),
    ("swe", {"file": "calc", "source": "", "patch": "", "tests": {}}, "swe gold: field 'file'"),
    ("swe", {"file": "calc.py", "source": None, "patch": "", "tests": {}}, "swe gold: field 'source'"),
    ("swe", {"file": "calc.py", "source": "", "patch": 3, "tests": {}}, "swe gold: field 'patch'"),
    ("swe", {"file": "calc.py", "source": "", "patch": "", "tests": {"module": "calc"}}, "swe gold: field 'tests'"),
])
def test_check_gold_names_the_domain_and_field(name: str, gold, message: str) -> None:
    with pytest.raises(ValueError) as err:
        SURFACES[name].check_gold(gold)
    assert str(err.value).startswith(message)


def test_check_gold_accepts_drawn_gold_and_checks_the_swe_patch() -> None:
    for name, module in SURFACES.items():
        for seed in range(5):
            gold = json.loads(json.dumps(draw(module, seed).gold))  # as read back from a file
            assert module.check_gold(gold) is None
    gold = draw(swe, 3).gold
    with pytest.raises(ValueError, match="swe gold: field 'patch' does not apply to 'source': block 1"):
        swe.check_gold({**gold, "source": "def f():\n    return 1\n"})
    with pytest.raises(ValueError, match="swe gold: field 'tests' must test module 'calc'"):
        swe.check_gold({**gold, "tests": {**gold["tests"], "module": "other"}})


def test_swe_bug_breaks_the_visible_test_and_the_gold_patch_fixes_it() -> None:
    for seed in range(60):
        task = draw(swe, seed)
        gold = task.gold
        function, (args, want) = gold["tests"]["function"], gold["tests"]["cases"][0]
        call = f"{function}({', '.join(map(str, args))})"
        got = run(gold["source"], function, args)
        assert got != want
        assert f"Test failed: {call} returned {got}, expected {want}." in task.prompt
        assert f"```python\n{gold['source']}```" in task.prompt
        fixed = apply_patch({gold["file"]: gold["source"]}, parse_patch(task.answer))[gold["file"]]
        assert len(fixed.splitlines()) == len(gold["source"].splitlines())
        assert sum(a != b for a, b in zip(fixed.splitlines(), gold["source"].splitlines())) == 1
        assert all(run(fixed, function, a) == w for a, w in gold["tests"]["cases"])
        assert task.answer == task.no_think_answer == gold["patch"]
        assert task.thinking.startswith("The wrong line is ") and task.thinking.count(". ") == 1


def test_swe_similarity_and_patch_failures() -> None:
    task = draw(swe, 4)
    gold = task.gold
    assert swe.judge(gold, task.answer).details == {"similarity": 1.0, "applied": True, "pass_fraction": 1.0}
    lines = task.answer.split("\n")
    other = swe.wrong_expressions(lines[4].split(" = ", 1)[1])[0]
    wrong = "\n".join(lines[:4] + [lines[4].split(" = ")[0] + " = " + other] + lines[5:])
    assert 0.5 < patch_similarity(wrong, gold["patch"]) < 1.0
    assert patch_similarity("I fixed it.", gold["patch"]) == 0.0

    missing = task.answer.replace(lines[2], lines[2] + " + 0")
    verdict = swe.judge(gold, missing)
    assert verdict.score == 0.0 and not verdict.details["applied"]
    assert verdict.reason == "block 1: its SEARCH lines are not in calc.py"
    with pytest.raises(PatchError, match="occur more than once in calc.py"):
        apply_patch({"calc.py": gold["source"] * 2}, parse_patch(task.answer))
    nothing = swe.judge(gold, "The bug is on line 2.")
    assert nothing.reason == "no patch found" and nothing.details["similarity"] == 0.0


@pytest.mark.parametrize("name", SURFACES)
def test_draws_are_distinct_deterministic_and_short(name: str) -> None:
    module = SURFACES[name]
    rng = random.Random(f"distinct/{name}")
    tasks = [t for t in (module.make_task(rng, OPS) for _ in range(300)) if t is not None]
    assert len(tasks) > 280 and len({t.prompt for t in tasks}) == len(tasks)
    assert draw(module, 7) == draw(module, 7)
    rng = random.Random(f"size/{name}")
    at_four = [t for t in (module.make_task(rng, [4]) for _ in range(100)) if t is not None]
    assert max(len(t.prompt) + len(t.thinking) + len(t.answer) for t in at_four) < SIZE_AT_OP_4[name]
    assert name != "math" or all(t.gold["op"] == 4 for t in at_four)
