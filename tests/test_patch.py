"""Patch verifier: SEARCH/REPLACE and diff parsing, the strict appliers, gold diffs, hidden tests in the
sandbox, and the execution-free similarity reward."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.verify.code import FunctionTests
from cascadekit.verify.released import verify_gold_patch
from cascadekit.verify.patch import (
    MAX_SIMILARITY_CHARS, Edit, PatchError, apply_patch, extract_diff, make_diff, normalize_patch, parse_diff,
    parse_patch, parse_search_replace, patch_similarity, verify_patch,
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


def test_offset_takes_the_nearest_exact_match_as_git_does():
    diff = make_diff(BUGGY, FIXED).replace("@@ -1,", "@@ -3,")  # wrong line number
    assert apply_patch(BUGGY, parse_diff(diff)) == FIXED
    twice = {"calc.py": BUGGY["calc.py"] * 2}
    hunk = "--- a/calc.py\n+++ b/calc.py\n@@ -{0},2 +{0},2 @@\n-    return a - b\n+    return a + b\n \n"
    first, second = BUGGY["calc.py"].replace("a - b", "a + b"), BUGGY["calc.py"]
    assert apply_patch(twice, parse_diff(hunk.format(3)))["calc.py"] == first + second
    assert apply_patch(twice, parse_diff(hunk.format(8)))["calc.py"] == second + first
    with pytest.raises(PatchError, match="where the hunk must sit"):  # no context after it: only at the end
        apply_patch(twice, parse_diff(hunk.format(2).replace(" \n", "").replace(",2 +", ",1 +").replace(",2 @@", ",1 @@")))


def test_fuzzy_mismatch_is_rejected_with_a_reason():
    diff = make_diff(BUGGY, FIXED).replace(" def add(a, b):", " def add(a, c):")
    with pytest.raises(PatchError, match="hunk 1 of calc.py does not apply"):
        apply_patch(BUGGY, parse_diff(diff))


@pytest.mark.parametrize("diff, reason", [
    ("--- a/calc.py\n@@ -1 +1 @@\n-x\n+y\n", "without file headers"),
    ("--- a/calc.py\n+++ b/calc.py\n", "no file headers"),  # git reads a plain section only with a hunk
    ("--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n-x\n+y\n", "ends early|line counts"),
    ("--- a/calc.py\n+++ b/calc.py\n@@ bad @@\n", "no file headers"),
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
    assert verify_patch("I would change add.", BUGGY, TESTS).reason == "no patch found"
    missing = verify_patch(fenced(make_diff({"nope.py": "a\n"}, {"nope.py": "b\n"})), BUGGY, TESTS)
    assert not missing.applied and missing.reason == "file not found: nope.py"


def test_patch_cannot_replace_the_harness():
    sneaky = make_diff({}, {"main.py": "print('all tests pass')\n"})
    verdict = verify_patch(fenced(sneaky), BUGGY, TESTS)
    assert not verdict.all_passed and "harness" in verdict.reason


SR_FIX = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE"


def test_search_replace_parses_in_every_house_style():
    want = [Edit("calc.py", "    return a - b\n", "    return a + b\n")]
    body = SR_FIX.split("\n", 1)[1]
    for text in (SR_FIX, f"<think>\nadd subtracts\n</think>\n\n{SR_FIX}<|im_end|>",
                 f"Fix:\ncalc.py\n```python\n{body}\n```",  # Aider: file line, then a fence
                 f"```python\n### calc.py\n{body}\n```",  # Agentless: the file line inside the fence
                 f"./calc.py\n{body}"):
        assert parse_patch(text) == want, text
    two = SR_FIX + "\n" + SR_FIX.replace("a - b", "a * b").replace("a + b", "a ** b")
    assert [e.search for e in parse_search_replace(two)] == ["    return a - b\n", "    return a * b\n"]


@pytest.mark.parametrize("text, reason", [
    ("<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE", "names no file"),
    ("calc.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE", "'>>>>>>> REPLACE' where its '=======' line belongs"),
    ("calc.py\n<<<<<<< SEARCH\nx\n=======\ny", "ends without its '>>>>>>> REPLACE' line"),
    ("calc.py\n<<<<<<< SEARCH\n=======\ny\n>>>>>>> REPLACE", "empty SEARCH part"),
])
def test_malformed_search_replace(text, reason):
    with pytest.raises(PatchError, match=reason):
        parse_patch(text)


def test_search_text_must_occur_exactly_once_as_whole_lines():
    assert apply_patch(BUGGY, parse_patch(SR_FIX)) == FIXED
    missing = SR_FIX.replace("a - b\n===", "a - c\n===")
    with pytest.raises(PatchError, match="block 1: its SEARCH lines are not in calc.py"):
        apply_patch(BUGGY, parse_patch(missing))
    partial = SR_FIX.replace("    return a - b", "return a - b")  # not a whole line of the file
    with pytest.raises(PatchError, match="not in calc.py"):
        apply_patch(BUGGY, parse_patch(partial))
    with pytest.raises(PatchError, match="block 1: its SEARCH lines occur more than once in calc.py"):
        apply_patch({"calc.py": BUGGY["calc.py"] * 2}, parse_patch(SR_FIX))
    with pytest.raises(PatchError, match="block 1: file not found: 'nope.py'"):
        apply_patch(BUGGY, parse_patch(SR_FIX.replace("calc.py", "nope.py")))
    # blocks apply in order, each to the file as the blocks before it left it
    chained = SR_FIX + "\n" + SR_FIX.replace("a - b", "a + b").replace("a + b\n>>>", "b + a\n>>>")
    assert apply_patch(BUGGY, parse_patch(chained))["calc.py"].startswith("def add(a, b):\n    return b + a\n")
    unended = {"calc.py": "x = 1\ny = 2"}
    edit = [Edit("calc.py", "y = 2\n", "y = 3\n")]
    assert apply_patch(unended, edit) == {"calc.py": "x = 1\ny = 3"}


def test_verify_patch_judges_search_replace():
    gold = verify_patch(f"<think>\nThe bug is in add.\n</think>\n\n{SR_FIX}", BUGGY, TESTS)
    assert gold.applied and gold.all_passed and gold.reason == "all 2 tests passed"
    wrong = verify_patch(SR_FIX.replace("a + b", "a * b"), BUGGY, TESTS)
    assert wrong.applied and not wrong.all_passed and wrong.reason.startswith("tests fail: wrong answer on test 0")
    missing = verify_patch(SR_FIX.replace("a - b\n===", "a - c\n==="), BUGGY, TESTS)
    assert not missing.applied and missing.reason == "block 1: its SEARCH lines are not in calc.py"
    harness = verify_patch("main.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE", BUGGY, TESTS)
    assert not harness.applied and "file not found" in harness.reason  # blocks never create files


def test_patch_similarity():
    assert patch_similarity(SR_FIX, SR_FIX) == 1.0
    assert patch_similarity(f"<think>\nhm\n</think>\n\n{SR_FIX}  \n", SR_FIX) == 1.0  # normalised
    assert patch_similarity(make_diff(BUGGY, FIXED, context=0), SR_FIX) == 1.0  # a diff hunk is the same edit
    near = patch_similarity(SR_FIX.replace("a + b", "a * b"), SR_FIX)
    far = patch_similarity(SR_FIX.replace("a + b", "max(a, b) if a else b"), SR_FIX)
    assert 1.0 > near > far > 0.0
    for junk in ("", "no patch", SR_FIX.split(">>>")[0], None, 7, "<think>\n" + SR_FIX):
        assert patch_similarity(junk, SR_FIX) == 0.0  # type: ignore[arg-type]
    assert patch_similarity(SR_FIX, "not a patch") == 0.0
    huge = SR_FIX.replace("a + b", "a + b\n" * MAX_SIMILARITY_CHARS)
    assert patch_similarity(huge, SR_FIX) == 0.0


def test_normalize_patch_renders_both_formats_alike():
    text = normalize_patch(parse_patch(SR_FIX + "   "))
    assert text == SR_FIX
    assert normalize_patch(parse_patch(make_diff(BUGGY, FIXED, context=0))) == SR_FIX


files = st.dictionaries(st.sampled_from(["a.py", "b/c.py", "d.txt"]),
                        st.lists(st.sampled_from(["x = 1", "y = 2", "", "def f():", "    pass", "a\rb", "\x0c",
                                                  "s = '\u2028'", "z = 3\r"]),
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


markers = st.lists(st.sampled_from(["calc.py", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "```python",
                                    "    return a - b", "    return a + b", "", "x"]), max_size=14)


@settings(max_examples=150, deadline=None)
@given(markers)
def test_search_replace_garbage_raises_only_patch_error(lines):
    text = "\n".join(lines)
    try:
        apply_patch(BUGGY, parse_patch(text))
    except PatchError:
        pass
    assert 0.0 <= patch_similarity(text, SR_FIX) <= 1.0


MARKED = ("--- a/calc.py\n+++ b/calc.py\n@@ -1,3 +1,4 @@\n def add(a, b):\n-    return a - b\n"
          "+    END = '<|im_end|>'  # </think> <think>\n+    return a + b\n \n")


def test_chat_markers_inside_a_diff_are_its_lines():
    fixed = "def add(a, b):\n    END = '<|im_end|>'  # </think> <think>\n    return a + b\n\n\ndef mul(a, b):\n"
    for turn in (MARKED, fenced(MARKED), fenced(MARKED) + "<|im_end|>", f"<think>\nhm\n</think>\n{MARKED}<|im_end|>"):
        assert apply_patch(BUGGY, parse_patch(turn))["calc.py"].startswith(fixed), turn
        assert patch_similarity(turn, MARKED) == 1.0
    two = MARKED + "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-calc\n+calc, fixed\n"
    assert apply_patch(BUGGY, parse_patch(fenced(two)))["README.md"] == "calc, fixed\n"  # both files, not the last


def test_a_gold_patch_is_read_bare():
    example = "Apply it with:\n```diff\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n```\n"
    docs = make_diff({"README.md": "calc\n"}, {"README.md": "calc\n" + example})
    assert apply_patch(BUGGY, parse_patch(docs, chat=False))["README.md"] == "calc\n" + example
    assert apply_patch(BUGGY, parse_patch(fenced(docs)))["README.md"] == "calc\n" + example  # fences at line starts
    assert patch_similarity(docs, docs) == patch_similarity(MARKED, MARKED) == 1.0


def test_equal_patches_score_one_at_any_length():
    long = make_diff({"big.py": "x\n" * MAX_SIMILARITY_CHARS}, {"big.py": "y\n" * MAX_SIMILARITY_CHARS})
    assert patch_similarity(long, long) == 1.0
    assert patch_similarity(long.replace("+y", "+z", 1), long) == 0.0  # unequal and over the cap


def test_applicability_is_an_option_of_the_similarity():
    wrong_place = MARKED.replace(" def add(a, b):", " def add(a, c):")
    assert 0.9 < patch_similarity(wrong_place, MARKED) < 1.0  # the paper's reward: text only
    assert patch_similarity(wrong_place, MARKED, files=BUGGY) == 0.0  # does not apply to the files
    assert patch_similarity(MARKED, MARKED, files=BUGGY) == 1.0


def test_verify_gold_patch_can_ask_applicability():
    wrong_place = MARKED.replace(" def add(a, b):", " def add(a, c):")
    assert verify_gold_patch(wrong_place, MARKED).score > 0.9  # the paper's reward, the default
    refused = verify_gold_patch(wrong_place, MARKED, files=BUGGY)
    assert refused.score == 0.0 and refused.reason.startswith("the patch does not apply: hunk 1 of calc.py")
    assert verify_gold_patch(MARKED, MARKED, files=BUGGY).score == 1.0
    assert verify_gold_patch(MARKED, MARKED, files={"calc.py": None}).score == 0.0  # type: ignore[dict-item]


diff_lines = st.lists(st.sampled_from([
    "diff --git a/calc.py b/calc.py", "diff --git a/calc.py b/x.py", "diff --git a/ b/", "diff --git ", "--- a/calc.py",
    "+++ b/calc.py", "--- /dev/null", "+++ /dev/null", '--- "a/q.py"', "new file mode 100644", "deleted file mode 100644",
    "rename from calc.py", "rename to x.py", "copy from calc.py", "copy to calc.py", "old mode 1", "index 1..2",
    "@@ -1,2 +1,2 @@", "@@ -0,0 +1 @@", "@@ -3 +3,0 @@", "@@ -9,1 +2,1 @@", " def add(a, b):", "-    return a - b",
    "+    return a + b", " ", "", "\\ No newline at end of file", "GIT binary patch", "prose",
]), max_size=16)


@settings(max_examples=300, deadline=None)
@given(diff_lines, st.booleans())
def test_diff_fragments_raise_only_patch_error(lines, newline):
    text = "\n".join(lines) + ("\n" if newline else "")
    try:
        apply_patch(BUGGY, parse_diff(text))
    except PatchError:
        pass
    assert 0.0 <= patch_similarity(text, text) <= 1.0
