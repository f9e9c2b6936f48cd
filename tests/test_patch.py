"""Patch verifier: diff parsing, the strict applier, gold diffs, and hidden tests in the sandbox."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.verify.code import FunctionTests
from cascadekit.verify.patch import (
    PatchError, apply_patch, diff_similarity, extract_diff, make_diff, parse_diff, verify_patch,
)

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "README.md": "calc\n",
}
FIXED = {**BUGGY, "calc.py": BUGGY["calc.py"].replace("a - b", "a + b")}
TESTS = [FunctionTests("add", [([2, 3], 5)], module="calc"), FunctionTests("mul", [([2, 3], 6)], module="calc")]


def fenced(diff: str) -> str:
    return f"<think>\nThe bug is in add.\n</think>\n\nFix:\n```diff\n{diff}```\n"


def test_make_diff_round_trips():
    diff = make_diff(BUGGY, FIXED)
    assert diff.startswith("--- a/calc.py\n+++ b/calc.py\n@@ -1,")
    assert apply_patch(BUGGY, parse_diff(diff)) == FIXED


def test_new_deleted_and_no_newline_files():
    old = {"a.py": "x = 1", "gone.py": "y = 2\n"}
    new = {"a.py": "x = 2", "added/b.py": "z = 3\n"}
    diff = make_diff(old, new)
    assert "\\ No newline at end of file" in diff
    assert apply_patch(old, parse_diff(diff)) == new


def test_offset_allowed_only_for_an_exact_unique_match():
    diff = make_diff(BUGGY, FIXED).replace("@@ -1,", "@@ -3,")  # wrong line number
    assert apply_patch(BUGGY, parse_diff(diff)) == FIXED
    twice = {"calc.py": BUGGY["calc.py"] * 2}
    lone = "--- a/calc.py\n+++ b/calc.py\n@@ -1,1 +1,1 @@\n-    return a - b\n+    return a + b\n"
    with pytest.raises(PatchError, match="matches at 2 places"):
        apply_patch(twice, parse_diff(lone.replace("@@ -1,1 +1,1", "@@ -9,1 +9,1")))


def test_fuzzy_mismatch_is_rejected_with_a_reason():
    diff = make_diff(BUGGY, FIXED).replace(" def add(a, b):", " def add(a, c):")
    with pytest.raises(PatchError, match="hunk 1 of calc.py does not apply"):
        apply_patch(BUGGY, parse_diff(diff))


@pytest.mark.parametrize("diff, reason", [
    ("--- a/calc.py\n@@ -1 +1 @@\n-x\n+y\n", "without '\\+\\+\\+'"),
    ("--- a/calc.py\n+++ b/calc.py\n", "no hunks"),
    ("--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n-x\n+y\n", "ends early|line counts"),
    ("--- a/calc.py\n+++ b/calc.py\n@@ bad @@\n", "no hunks|bad hunk"),
    ("--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n", "unsafe path"),
    ("just prose", "no file headers"),
])
def test_malformed_diffs(diff, reason):
    with pytest.raises(PatchError, match=reason):
        parse_diff(diff)


def test_extract_diff():
    diff = make_diff(BUGGY, FIXED)
    assert extract_diff(fenced(diff)) == diff
    assert extract_diff("Here:\n" + diff) == diff
    assert extract_diff("<think>\n" + diff + "</think>\nno diff here") is None
    assert extract_diff("nothing") is None


def test_verify_patch_passes_gold_and_reports_failures():
    gold = verify_patch(fenced(make_diff(BUGGY, FIXED)), BUGGY, TESTS)
    assert gold.applied and gold.all_passed and gold.passed == gold.total == 2
    assert gold.reason == "all 2 tests passed"
    broke = {**BUGGY, "calc.py": BUGGY["calc.py"].replace("a * b", "a ** b")}
    bad = verify_patch(fenced(make_diff(BUGGY, broke)), BUGGY, TESTS)
    assert bad.applied and bad.passed == 0 and bad.pass_fraction == 0.0
    assert bad.reason == "tests fail: wrong answer on test 0: add(2, 3) returned -1, expected 5"
    syntax = {**BUGGY, "calc.py": "def add(a, b)\n"}
    assert "could not load 'add' from calc: SyntaxError" in verify_patch(
        fenced(make_diff(BUGGY, syntax)), BUGGY, TESTS).reason
    assert verify_patch("I would change add.", BUGGY, TESTS).reason == "no diff found"
    missing = verify_patch(fenced(make_diff({"nope.py": "a\n"}, {"nope.py": "b\n"})), BUGGY, TESTS)
    assert not missing.applied and missing.reason == "file not found: nope.py"


def test_patch_cannot_replace_the_harness():
    sneaky = make_diff({}, {"main.py": "print('all tests pass')\n"})
    verdict = verify_patch(fenced(sneaky), BUGGY, TESTS)
    assert not verdict.all_passed and "harness" in verdict.reason


def test_diff_similarity():
    gold = make_diff(BUGGY, FIXED)
    assert diff_similarity(gold, gold) == 1.0
    other = make_diff(BUGGY, {**BUGGY, "README.md": "calculator\n"})
    assert diff_similarity(other, gold) < 0.5


files = st.dictionaries(st.sampled_from(["a.py", "b/c.py", "d.txt"]),
                        st.lists(st.sampled_from(["x = 1", "y = 2", "", "def f():", "    pass"]),
                                 min_size=1, max_size=12).map(lambda ls: "\n".join(ls) + ("\n" if ls else "")),
                        max_size=3)


@settings(max_examples=80, deadline=None)
@given(old=files, new=files)
def test_make_then_apply_is_identity(old, new):
    diff = make_diff(old, new)
    if diff:
        patched = apply_patch(old, parse_diff(diff))
        assert patched == new


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_parsing_garbage_raises_only_patch_error(text):
    try:
        apply_patch(BUGGY, parse_diff(text))
    except PatchError:
        pass
