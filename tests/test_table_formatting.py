"""Tables say what their numbers are (issue 58): no negative zero, one op reads "op 4", a tokens row names its unit.

The library rules (:mod:`cascadekit.formatting`, :func:`cascadekit.claims.claim_row`,
:func:`cascadekit.evaluation.stage_claims.change_row`, :func:`cascadekit.results.markdown_table`)
and the committed Part II tables they render (chapters 09-11), scanned as text.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascadekit.claims import claim_row, claims_view, holm_rows, seed_row
from cascadekit.evaluation.stage_claims import change_row
from cascadekit.formatting import fixed, op_span
from cascadekit.results import RESULTS_DIR, markdown_table

#: A number that is a negative zero as written: -0, -0.0, -0.000 (not -0.004).
NEGATIVE_ZERO = re.compile(r"(?<![\w.])-0(?:\.0+)?(?![\d.])")
#: A band of one op written as a range: "ops 4-4".
ONE_OP_RANGE = re.compile(r"\bops (\d+)-\1\b")


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), st.integers(min_value=0, max_value=6))
def test_fixed_never_writes_a_negative_zero_and_keeps_the_value(value: float, digits: int) -> None:
    text = fixed(value, digits)
    assert not NEGATIVE_ZERO.fullmatch(text), text
    assert float(text) == float(f"{value:.{digits}f}")


def test_fixed_examples() -> None:
    assert [fixed(v) for v in (-0.0004, -0.0, 0.0, -0.0006, 1.5)] == ["0.000", "0.000", "0.000", "-0.001", "1.500"]
    assert fixed(-0.04, 1) == "0.0" and fixed(-0.06, 1) == "-0.1"


def test_op_span_names_one_op_as_an_op() -> None:
    assert (op_span(4, 4), op_span(4, 5)) == ("op 4", "ops 4-5")


def test_markdown_table_writes_no_negative_zero() -> None:
    table = markdown_table([{"change": -0.0002, "other": -0.0, "real": -0.25}])
    assert not NEGATIVE_ZERO.search(table) and "-0.250" in table


def test_claim_row_cells_write_no_negative_zero() -> None:
    row = claim_row("c", "p", -0.0002, -0.003, -0.0001, "down", seeds=[-0.0001, -0.0004, -0.0001])
    assert row["verdict"] == "reproduced"  # from the unrounded interval, whatever the cell rounds to
    assert not NEGATIVE_ZERO.search(row["95% interval"]) and str(row["this run"]) == "0.0"


def test_a_row_in_a_unit_says_its_unit_and_the_paper_direction() -> None:
    down = claim_row("answers get shorter: mean tokens", "shorter", -3.0, -5.0, -1.0, "down", digits=1, unit="tokens")
    up = claim_row("answers get longer", "longer", 3.0, 1.0, 5.0, "up", unit="tokens")
    assert down["claim"].startswith("answers get shorter: mean tokens") and "tokens" in down["claim"][32:]
    assert "below 0" in down["claim"] and "above 0" in up["claim"]
    assert "below 0" not in claim_row("c", "p", 0.1, 0.0, 0.2, "up")["claim"]
    assert seed_row("c", "p", [np.array([-1.0, -2.0])], "down", unit="tokens")["claim"] == down["claim"].replace(
        "answers get shorter: mean tokens", "c")


def test_a_tokens_change_names_its_unit_and_a_score_change_does_not() -> None:
    before = [[{"domain": "math", "think": True, "score": 0.0, "tokens": 10}] * 4]
    after = [[{"domain": "math", "think": True, "score": 1.0, "tokens": 6}] * 4]
    tokens = change_row("shorter", "p", before, after, "down", "tokens")
    score = change_row("better", "p", before, after, "up")
    assert "(in tokens" in tokens["claim"] and score["claim"] == "better"


PART2 = ("09_rlhf", "10_if_rl", "11_math_rl")


def _claims_table(folder: str) -> list[str]:
    lines = (RESULTS_DIR / folder / "paper_vs_run.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start + 2:end]


@pytest.mark.parametrize("folder", PART2)
def test_committed_tables_write_no_negative_zero_and_no_one_op_range(folder: str) -> None:
    text = (RESULTS_DIR / folder / "paper_vs_run.md").read_text()
    assert not NEGATIVE_ZERO.search(text), NEGATIVE_ZERO.search(text)
    assert not ONE_OP_RANGE.search(text), ONE_OP_RANGE.search(text)


@pytest.mark.parametrize("folder", PART2)
def test_every_committed_tokens_row_names_its_unit(folder: str) -> None:
    rows = [line.split(" | ")[0] for line in _claims_table(folder) if "tokens" in line.split(" | ")[0]]
    assert rows, f"{folder} has no tokens row"
    assert all("(in tokens" in claim and ("below 0" in claim or "above 0" in claim) for claim in rows), rows


def test_the_notebook_view_of_claims_has_five_columns_at_the_interval_precision() -> None:
    rows = holm_rows([claim_row("a", "p", 0.25, 0.1, 0.4, "up", p_value=0.01, primary=True),
                      claim_row("tokens", "p", -0.1, -27.0, 28.9, "down", digits=1, unit="tokens"),
                      claim_row("b", "p", -0.0002, -0.003, 0.002, "up", p_value=0.5)])
    view = claims_view(rows)
    assert [list(r) for r in view] == [["claim", "paper", "this run [95% interval]", "verdict", "after Holm"]] * 3
    assert view[0]["this run [95% interval]"] == "0.250 [0.100, 0.400]"
    assert view[0]["after Holm"] == "reproduced (adj. p 0.010), primary family"
    assert view[1]["this run [95% interval]"] == "-0.1 [-27.0, 28.9]" and "not corrected" in view[1]["after Holm"]
    assert view[2]["this run [95% interval]"] == "0.000 [-0.003, 0.002]"
    assert "after Holm" not in claims_view([claim_row("c", "p", 0.1, 0.0, 0.2, "up")])[0]
