"""Patches: parse a unified diff from model text, apply it strictly, run hidden tests.

The SWE stage asks the model for a fix as a unified diff. This module judges one
against an in-memory repository (``{path: text}``):

1. find the diff (a fenced ``diff``/``patch`` block, else text from ``--- ``/``diff --git``),
2. parse it (file headers, ``@@ -a,b +c,d @@`` hunks whose line counts must add up),
3. apply it strictly: every context and removed line must match the file exactly;
   a hunk may sit at another line than its header says (an "offset", as GNU patch
   allows) only where its lines match exactly and at one place; no fuzz,
4. run hidden tests (calls with expected values) on the patched files in the
   sandbox, comparing outside it, and report how many pass.

Departure from the paper: its SWE RL reward is execution-free, a lexical/semantic
similarity between the generated and the gold patch (:func:`diff_similarity` is
the lexical half). Executing tests is the stricter judge the kit can afford at toy
scale; both are here so a chapter can compare them.
"""

from __future__ import annotations

import dataclasses
import difflib
import posixpath
import re
from typing import Sequence

from cascadekit.sandbox import Limits
from cascadekit.verify.code import FunctionTests, run_hidden_tests
from cascadekit.verify.boxed import answer_part

__all__ = [
    "PatchError", "Hunk", "FilePatch", "PatchVerdict", "extract_diff", "parse_diff",
    "apply_patch", "make_diff", "diff_similarity", "verify_patch",
]


class PatchError(ValueError):
    """A diff that is malformed or does not apply; the message is the reason."""


@dataclasses.dataclass(frozen=True)
class Hunk:
    old_start: int
    old_len: int
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", line text with its line ending)

    def old(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    def new(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]


@dataclasses.dataclass(frozen=True)
class FilePatch:
    old_path: str | None  # None: a new file
    new_path: str | None  # None: a deleted file
    hunks: tuple[Hunk, ...]


@dataclasses.dataclass(frozen=True)
class PatchVerdict:
    applied: bool
    passed: int
    total: int
    all_passed: bool
    pass_fraction: float
    reason: str


_FENCE = re.compile(r"```[ \t]*(diff|patch|udiff)?[^\n]*\n(.*?)```", re.DOTALL)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def extract_diff(text: str) -> str | None:
    """The diff in a model answer, or None."""
    if not isinstance(text, str):
        return None
    answer = answer_part(text).split("<|im_end|>", 1)[0]
    fenced = [body for lang, body in _FENCE.findall(answer) if lang or body.lstrip().startswith(("---", "diff "))]
    if fenced:
        return "".join(fenced)
    match = re.search(r"^(--- |diff --git )", answer, re.MULTILINE)
    return answer[match.start():] if match else None


def _path(header: str) -> str | None:
    path = header.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith(("a/", "b/")):
        path = path[2:]
    norm = posixpath.normpath(path)
    if not path or norm.startswith(("/", "..")) or norm == ".":
        raise PatchError(f"malformed diff: unsafe path {path!r}")
    return norm


def _parse_hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    m = _HUNK.match(lines[i])
    if not m:
        raise PatchError(f"malformed diff: bad hunk header {lines[i]!r}")
    old_start = int(m.group(1))
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    body: list[tuple[str, str]] = []
    seen_old = seen_new = 0
    i += 1
    while seen_old < old_len or seen_new < new_len or (i < len(lines) and lines[i].startswith("\\")):
        if i >= len(lines):
            raise PatchError(f"malformed diff: hunk at line {old_start} ends early")
        line = lines[i]
        i += 1
        if line.startswith("\\"):  # "\ No newline at end of file" for the line before
            if body:
                body[-1] = (body[-1][0], body[-1][1].rstrip("\n"))
            continue
        tag, text = (line[:1] or " "), line[1:]
        if tag not in " -+":
            raise PatchError(f"malformed diff: unexpected line {line!r} in hunk at line {old_start}")
        seen_old += tag != "+"
        seen_new += tag != "-"
        body.append((tag, text + "\n"))
    if seen_old != old_len or seen_new != new_len:
        raise PatchError(f"malformed diff: hunk at line {old_start} does not match its line counts")
    return Hunk(old_start, old_len, tuple(body)), i


def parse_diff(diff: str) -> list[FilePatch]:
    """Parse a unified diff; raises :class:`PatchError` with the reason."""
    lines = diff.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line, not an empty context line
    patches, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1  # "diff --git", "index ..." and prose between files
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchError("malformed diff: '---' header without '+++'")
        old, new = _path(lines[i][4:]), _path(lines[i + 1][4:])
        if old is None and new is None:
            raise PatchError("malformed diff: /dev/null on both sides")
        i += 2
        hunks = []
        while i < len(lines) and lines[i].startswith("@@"):
            hunk, i = _parse_hunk(lines, i)
            hunks.append(hunk)
        if not hunks:
            raise PatchError(f"malformed diff: no hunks for {new or old}")
        patches.append(FilePatch(old, new, tuple(hunks)))
    if not patches:
        raise PatchError("malformed diff: no file headers")
    return patches


def _locate(lines: list[str], block: list[str], want: int, start: int) -> int:
    """Where ``block`` sits: at ``want`` if it matches there, else at its one exact match."""
    size = len(block)
    if want >= start and lines[want:want + size] == block:
        return want
    spots = [j for j in range(start, len(lines) - size + 1) if lines[j:j + size] == block]
    if len(spots) == 1:
        return spots[0]
    raise PatchError("context or removed lines do not match the file" if not spots
                     else f"context matches at {len(spots)} places")


def _apply_file(source: str, patch: FilePatch, name: str) -> str:
    lines = source.splitlines(keepends=True)
    out, pos = [], 0
    for k, hunk in enumerate(patch.hunks, 1):
        want = hunk.old_start if hunk.old_len == 0 else hunk.old_start - 1
        try:
            at = _locate(lines, hunk.old(), want, pos)
        except PatchError as e:
            raise PatchError(f"hunk {k} of {name} does not apply: {e}") from None
        out += lines[pos:at] + hunk.new()
        pos = at + hunk.old_len
    return "".join(out + lines[pos:])


def apply_patch(files: dict[str, str], patches: list[FilePatch]) -> dict[str, str]:
    """A new ``{path: text}`` with the patches applied; raises :class:`PatchError`."""
    result = dict(files)
    for patch in patches:
        name = patch.new_path or patch.old_path
        if patch.old_path is None:
            if name in result:
                raise PatchError(f"new file {name} already exists")
            source = ""
        elif patch.old_path not in result:
            raise PatchError(f"file not found: {patch.old_path}")
        else:
            source = result.pop(patch.old_path)
        patched = _apply_file(source, patch, name)
        if patch.new_path is not None:
            result[patch.new_path] = patched
        elif patched:
            raise PatchError(f"deleting {name} leaves lines behind")
    return result


def make_diff(old: dict[str, str], new: dict[str, str], context: int = 3) -> str:
    """A unified diff from ``old`` to ``new`` (for gold patches); parses back with :func:`parse_diff`.

    Like any unified diff it cannot express creating or deleting an empty file.
    """
    chunks = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        diff = difflib.unified_diff(
            (a or "").splitlines(keepends=True), (b or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if a is not None else "/dev/null",
            tofile=f"b/{path}" if b is not None else "/dev/null", n=context)
        for line in diff:
            chunks.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(chunks)


def diff_similarity(predicted: str, gold: str) -> float:
    """Lexical similarity of two diffs' changed lines, in [0, 1] (the paper's execution-free idea)."""
    def changed(diff: str) -> list[str]:
        return [ln.strip() for ln in diff.splitlines()
                if ln[:1] in "+-" and not ln.startswith(("+++", "---")) and ln[1:].strip()]
    a, b = changed(predicted or ""), changed(gold or "")
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def verify_patch(text: str, files: dict[str, str], tests: FunctionTests | Sequence[FunctionTests],
                 limits: Limits = Limits()) -> PatchVerdict:
    """Apply the model's diff to ``files`` and run the hidden ``tests`` on the result; never raises.

    The tests are calls with expected values (:class:`~cascadekit.verify.code.FunctionTests`
    naming a module of the repository), run by the code verifier's harness: nothing
    in the patched tree can import, shadow or rewrite them, and the comparison
    happens outside the sandbox.
    """
    def verdict(applied: bool, passed: int, total: int, reason: str) -> PatchVerdict:
        return PatchVerdict(applied, passed, total, total > 0 and passed == total,
                            passed / total if total else 0.0, reason)

    diff = extract_diff(text)
    if diff is None:
        return verdict(False, 0, 0, "no diff found")
    try:
        patched = apply_patch(files, parse_diff(diff))
    except PatchError as e:
        return verdict(False, 0, 0, str(e))
    except Exception as e:  # a verifier never raises on model text
        return verdict(False, 0, 0, f"malformed diff: {type(e).__name__}")
    if "main.py" in patched:
        return verdict(False, 0, 0, "patch adds main.py, the name the test harness runs as")
    suite = [tests] if isinstance(tests, FunctionTests) else list(tests)
    passed, total, reason = run_hidden_tests(suite, patched, limits)
    if passed < total and not reason.startswith(("could not load", "error on", "wrong answer")):
        reason = f"tests did not finish: {reason}"
    elif passed < total:
        reason = f"tests fail: {reason}"
    return verdict(True, passed, total, reason)
