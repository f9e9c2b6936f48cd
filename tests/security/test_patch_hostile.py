"""Hostile patches cost the verifier linear time: hunks are located through an index, and a patch has a size cap.

The work is counted (not timed) in ``tests/test_patch_linear.py``; where hunks land is
``git apply``'s rule, checked against git itself in ``tests/test_patch_git_parity.py``.
"""
from __future__ import annotations

import time

from cascadekit.verify.code import FunctionTests
from cascadekit.verify.patch import MAX_PATCH_CHARS, apply_patch, parse_patch, verify_patch

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
    assert time.perf_counter() - start < 60  # a hang guard only, not a speed claim
    assert not verdict.applied and "hunk 1 of big.py does not apply" in verdict.reason


def test_a_patch_over_the_cap_is_rejected_with_the_reason() -> None:
    text = "```diff\n--- a/big.py\n+++ b/big.py\n@@ -1 +1 @@\n-x\n+y\n```\n" + "#" * MAX_PATCH_CHARS
    verdict = verify_patch(text, {"big.py": "x\n"}, TESTS)
    assert not verdict.applied and "patch too long" in verdict.reason and f"{MAX_PATCH_CHARS:,}" in verdict.reason


def test_a_patch_just_under_the_cap_still_applies() -> None:
    diff = "```diff\n--- a/big.py\n+++ b/big.py\n@@ -1 +1 @@\n-x\n+y\n```\n"
    text = diff + "#" * (MAX_PATCH_CHARS - len(diff) - 1)
    assert apply_patch({"big.py": "x\n"}, parse_patch(text)) == {"big.py": "y\n"}
