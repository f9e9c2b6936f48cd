"""``cascadekit bench math-verify``: the bounded path and the direct calls on the same pairs, one ratio line."""
from __future__ import annotations

import pytest

from cascadekit.bench.math_verify import direct, pairs
from cascadekit.cli import main


def test_the_pairs_are_half_equal_by_math_verify():
    batch = pairs(28)
    assert len(set(batch)) == 28 and sum(direct(batch)) == 14


def test_the_bench_prints_the_ratio_and_that_every_path_agrees(capsys):
    assert main(["bench", "math-verify", "-n", "6", "--repeats", "1", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "bounded/direct verdicts per second: " in out and "× (batched, 1 worker; target ≥ 0.8×)" in out
    assert out.rstrip().endswith("same verdicts on every path: True")
    assert "equal ones accepted, 0 unequal ones accepted (never more than 0)" in out


def test_bad_arguments_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "math-verify", "--workers", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("-n, --repeats and --workers must be at least 1")
