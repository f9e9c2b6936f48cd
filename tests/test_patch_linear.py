"""The patch applier's work is linear in the patch (issue 56 item 5), counted in line comparisons, not timed.

The applier spends its comparisons through ``cascadekit.verify.patch._Work``; these
tests count them on patches three times as large and ask for about three times
the work; the old search (one pass over the file per hunk) grew with the square.
"""
from __future__ import annotations

import pytest

import cascadekit.verify.patch as patch
from cascadekit.verify.patch import WORK_PER_LINE, PatchError, apply_patch, parse_diff


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> list[patch._Work]:
    """Every work counter the applier makes, in order."""
    made: list[patch._Work] = []

    class Counted(patch._Work):
        def __init__(self, lines: int) -> None:
            super().__init__(lines)
            made.append(self)

    monkeypatch.setattr(patch, "_Work", Counted)
    return made


def new_file_then_hunks(scale: int, found: bool) -> str:
    """A new file of 4,000 x ``scale`` lines, then 1,000 x ``scale`` one-line hunks whose headers say line 1.

    Each hunk's lines sit elsewhere (``found``) or nowhere, so every hunk is searched for.
    """
    lines = 4000 * scale
    create = f"--- /dev/null\n+++ b/big.py\n@@ -0,0 +1,{lines} @@\n" + "".join(f"+v{i} = {i}\n" for i in range(lines))
    hunks = "".join(f"@@ -2,3 +2,3 @@\n v{i - 1} = {i - 1}\n-v{i} = {i if found else -i}\n+v{i} = 0\n"
                    f" v{i + 1} = {i + 1}\n" for i in range(2, lines - 1, 4))
    return create + "--- a/big.py\n+++ b/big.py\n" + hunks


@pytest.mark.parametrize("found", [True, False])
def test_misplaced_hunks_cost_work_linear_in_the_patch(work: list[patch._Work], found: bool) -> None:
    spent = []
    for scale in (1, 3):
        try:
            result = apply_patch({}, parse_diff(new_file_then_hunks(scale, found)))
            assert found and result["big.py"].count(" = 0\n") == 1000 * scale + 1
        except PatchError as error:
            assert not found and "hunk 1 of big.py does not apply" in str(error)
        spent.append(work[-1].spent)
    assert spent[1] <= 3.5 * spent[0], spent  # the one-pass-per-hunk search spent 9x


def crowded(scale: int) -> str:
    """The hardest case for any nearest-first search: 1,000 x ``scale`` hunks, all of one line, all headed at line 1.

    Each hunk matches everywhere but where earlier hunks already wrote, so a search
    from line 1 outwards passes every earlier hunk's lines: quadratic for ``git apply``.
    """
    lines = 4000 * scale
    create = f"--- /dev/null\n+++ b/big.py\n@@ -0,0 +1,{lines} @@\n" + "+x\n" * lines
    return create + "--- a/big.py\n+++ b/big.py\n" + "@@ -2,3 +2,3 @@\n x\n-x\n+y\n x\n" * (1000 * scale)


def test_work_never_exceeds_its_linear_budget(work: list[patch._Work]) -> None:
    spent = []
    for scale in (1, 3):
        diff = crowded(scale)
        with pytest.raises(PatchError, match="line comparisons"):
            apply_patch({}, parse_diff(diff))
        assert work[-1].budget <= WORK_PER_LINE * (diff.count("\n") + 100) and work[-1].spent <= work[-1].budget + 3
        spent.append(work[-1].spent)
    assert spent[1] <= 3.5 * spent[0], spent
