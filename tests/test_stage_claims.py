"""Changes over seeds, the forgetting matrix and "keeps the other domains", on small synthetic stage tables."""
from __future__ import annotations

import numpy as np
import pytest

from cascadekit.evaluation.stage_claims import (forgetting_matrix, kept_domains_row, paired_change, seed_change)


def table(scores: dict[tuple[str, bool], list[float]]) -> list[dict]:
    """A stage table's samples: for each (domain, think), one sample per listed score, in order."""
    return [{"domain": d, "think": t, "score": s, "tokens": 10, "repetition": 0.0}
            for (d, t), values in scores.items() for s in values]


def cells(n: int = 40, **means: tuple[float, float]) -> dict[tuple[str, bool], list[float]]:
    """0/1 scores whose mean is the given one, per domain and mode: ``math=(think, no_think)``."""
    out = {}
    for domain, (think, no_think) in means.items():
        for mode, mean in ((True, think), (False, no_think)):
            solved = round(mean * n)
            out[(domain, mode)] = [1.0] * solved + [0.0] * (n - solved)
    return out


def test_seed_change_with_one_seed_is_the_paired_change() -> None:
    before = table(cells(math=(0.5, 0.4), code=(0.6, 0.6)))
    after = table(cells(math=(0.7, 0.4), code=(0.6, 0.5)))
    change = seed_change([before], [after], names=["math"])
    assert change[:3] == paired_change(before, after, names=["math"])
    assert change.seeds == (pytest.approx(0.1),) and 0 < change.p_value <= 1


def test_seed_change_shows_each_seed_and_refuses_mismatched_tables() -> None:
    before = table(cells(math=(0.5, 0.5)))
    afters = [table(cells(math=(m, 0.5))) for m in (0.5, 0.6, 0.7)]
    change = seed_change([before] * 3, afters, names=["math"], think=True)
    assert change.seeds == pytest.approx((0.0, 0.1, 0.2)) and change.estimate == pytest.approx(0.1)
    with pytest.raises(ValueError):
        seed_change([before], afters, names=["math"])
    with pytest.raises(ValueError):
        seed_change([before], [table(cells(n=10, math=(0.5, 0.5)))])


def test_forgetting_matrix_marks_the_ceiling_cells() -> None:
    before = table(cells(math=(0.5, 0.3), code=(1.0, 0.95)))
    after = table(cells(math=(0.5, 0.3), code=(0.8, 0.95)))
    matrix = {(c["domain"], c["mode"]): c for c in forgetting_matrix([before], [after], ["math", "code"])}
    assert list(matrix) == [("math", "think"), ("math", "no_think"), ("code", "think"), ("code", "no_think")]
    assert [c["at_ceiling"] for c in matrix.values()] == [False, False, True, True]
    code = matrix[("code", "think")]
    assert code["before"] == 1.0 and code["change"] == pytest.approx(-0.2) and code["low"] <= -0.2 <= code["high"]
    assert matrix[("math", "think")]["change"] == 0.0


def test_kept_domains_is_judged_below_the_ceiling() -> None:
    """A drop on the cells with room, diluted by ceiling cells that stay put: pooled it cannot tell, below it can."""
    rng = np.random.default_rng(0)
    start = cells(n=64, math=(0.5, 0.5), code=(1.0, 1.0), tools=(1.0, 1.0), swe=(1.0, 1.0))
    end = dict(start)
    for key in [("math", True), ("math", False)]:
        drop = rng.choice(32, size=10, replace=False)  # 10 of the 32 solved prompts lost
        end[key] = [0.0 if i in drop else s for i, s in enumerate(start[key])]
    before, after = table(start), table(end)
    row = kept_domains_row("X keeps the other domains", "little forgetting", [before], [after],
                           ["math", "code", "tools", "swe"])
    assert row["verdict"] == "contradicted" and row["this run"] == pytest.approx(-10 / 64, abs=1e-3)
    assert "left out: code think, code no_think, tools think, tools no_think, swe think, swe no_think" in row["claim"]
    pooled = paired_change(before, after, names=["math", "code", "tools", "swe"])
    assert pooled[0] == pytest.approx(-20 / 512) and pooled[1] < -0.05 < pooled[2]  # cannot tell, pooled


def test_kept_domains_when_every_cell_is_at_the_ceiling() -> None:
    before = table(cells(code=(1.0, 1.0)))
    row = kept_domains_row("X keeps the other domains", "little forgetting", [before], [before], ["code"])
    assert row["verdict"] == "cannot tell" and row["95% interval"] == "n/a"
    assert "left out: code think, code no_think" in row["claim"]
