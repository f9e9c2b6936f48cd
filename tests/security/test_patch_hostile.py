"""Hostile patches cost the verifier linear time: hunks are located in one pass and a patch has a size cap.

Run as a script for the benchmark (the old every-offset search against the one-pass
search, interleaved in one run)::

    python tests/security/test_patch_hostile.py
"""
from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.verify.code import FunctionTests
from cascadekit.verify.patch import MAX_PATCH_CHARS, PatchError, _occurrences, apply_patch, parse_patch, verify_patch

TESTS = [FunctionTests("f", [([], 1)], module="big")]


def almost_matching(n: int) -> str:
    """A diff that creates an ``n``-line file, then a hunk of ``n // 2`` lines that matches nowhere but almost everywhere."""
    create = f"--- /dev/null\n+++ b/big.py\n@@ -0,0 +1,{n} @@\n" + "+x\n" * n
    half = n // 2
    edit = f"--- a/big.py\n+++ b/big.py\n@@ -1,{half} +1,{half} @@\n" + " x\n" * (half - 1) + "-y\n+z\n"
    return f"```diff\n{create}{edit}```\n"


def test_an_almost_matching_hunk_in_a_30000_line_file_gets_a_verdict() -> None:
    start = time.perf_counter()
    verdict = verify_patch(almost_matching(30_000), {}, TESTS)
    assert time.perf_counter() - start < 5.0  # a hang guard only, not a speed claim
    assert not verdict.applied and "hunk 1 of big.py does not apply" in verdict.reason


def test_a_patch_over_the_cap_is_rejected_with_the_reason() -> None:
    text = "```diff\n--- a/big.py\n+++ b/big.py\n@@ -1 +1 @@\n-x\n+y\n```\n" + "#" * MAX_PATCH_CHARS
    verdict = verify_patch(text, {"big.py": "x\n"}, TESTS)
    assert not verdict.applied and "patch too long" in verdict.reason and f"{MAX_PATCH_CHARS:,}" in verdict.reason


def test_a_patch_just_under_the_cap_still_applies() -> None:
    diff = "```diff\n--- a/big.py\n+++ b/big.py\n@@ -1 +1 @@\n-x\n+y\n```\n"
    text = diff + "#" * (MAX_PATCH_CHARS - len(diff) - 1)
    assert apply_patch({"big.py": "x\n"}, parse_patch(text)) == {"big.py": "y\n"}


def every_offset(lines: list[str], block: list[str], start: int) -> list[int]:
    """The old search: compare the block at every offset (quadratic on almost-matching input)."""
    return [j for j in range(start, len(lines) - len(block) + 1) if lines[j:j + len(block)] == block]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from("ab"), max_size=30), st.lists(st.sampled_from("ab"), max_size=5),
       st.integers(0, 31))
def test_one_pass_search_finds_exactly_the_offsets_of_the_old_search(lines, block, start) -> None:
    assert _occurrences(lines, block, start) == every_offset(lines, block, start)


def test_an_ambiguous_hunk_still_says_how_many_places() -> None:
    text = "--- a/f.py\n+++ b/f.py\n@@ -9,2 +9,2 @@\n x\n-x\n+y\n"
    try:
        apply_patch({"f.py": "x\n" * 6}, parse_patch(text))
    except PatchError as error:
        assert "matches at 5 places" in str(error)
    else:
        raise AssertionError("an ambiguous hunk applied")


def benchmark() -> None:
    """Seconds of ``verify_patch`` on the almost-matching diff at N = 2,000 / 10,000 / 30,000, old search and new."""
    import cascadekit.verify.patch as patch

    for n in (2_000, 10_000, 30_000):
        text, times = almost_matching(n), {}
        for name, search in (("before", every_offset), ("after", _occurrences)):
            patch._occurrences = search
            start = time.perf_counter()
            verdict = verify_patch(text, {}, TESTS)
            times[name] = time.perf_counter() - start
            assert "does not apply" in verdict.reason
        print(f"N={n:>6,} ({len(text):,} chars): before {times['before']:7.3f} s, after {times['after']:6.3f} s "
              f"({times['before'] / times['after']:5.1f}x)")
    patch._occurrences = _occurrences


if __name__ == "__main__":
    benchmark()
