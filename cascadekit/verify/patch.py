"""Patches: read a SEARCH/REPLACE patch or a unified diff from model text, apply it strictly, judge it.

The SWE stage asks the model for a fix of files in an in-memory repository
(``{path: text}``). Two patch formats are read:

* SEARCH/REPLACE blocks, the edit format of Aider and of the agentless setups
  the paper's SWE data follows (a file line, then the lines to find and their
  replacement)::

      calc.py
      <<<<<<< SEARCH
          sharks = tigers + eagles + 4
      =======
          sharks = tigers + eagles + 3
      >>>>>>> REPLACE

  Each block edits an existing file; its SEARCH lines must occur exactly once
  there (whole lines, no fuzz), and blocks apply in order.
* unified diffs (a fenced ``diff``/``patch`` block, else text from ``--- ``/``diff --git``),
  with ``@@ -a,b +c,d @@`` hunks whose line counts must add up, applied strictly:
  every context and removed line must match the file exactly; a hunk may sit at
  another line than its header says (an "offset", as GNU patch allows) only
  where its lines match exactly and at one place; no fuzz.

Two rewards come from a patch:

* execution (:func:`verify_patch`): apply it and run hidden tests (calls with
  expected values) on the patched files in the sandbox, comparing outside it;
* execution-free (:func:`patch_similarity`): the paper's SWE RL reward, after
  SWE-RL, a sequence similarity between the generated and the gold patch
  (``difflib.SequenceMatcher(..., autojunk=False).ratio()``), on patch text
  normalised to SEARCH/REPLACE blocks; 0 when no patch can be read.

Departure from the paper: its SWE reward is execution-free only; executing the
tests is the stricter judge the kit can afford at toy scale, and both are here so
a chapter can compare them.
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
    "MAX_PATCH_CHARS", "PatchError", "Hunk", "FilePatch", "Edit", "PatchVerdict", "extract_diff", "parse_diff",
    "parse_search_replace", "parse_patch", "apply_patch", "make_diff", "normalize_patch",
    "patch_similarity", "verify_patch",
]


class PatchError(ValueError):
    """A patch that is missing, malformed or does not apply; the message is the reason."""


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
class Edit:
    """One SEARCH/REPLACE block: in ``path``, the one occurrence of ``search`` becomes ``replace``.

    Both are whole lines, each ending in a newline; ``search`` is never empty.
    """

    path: str
    search: str
    replace: str


@dataclasses.dataclass(frozen=True)
class PatchVerdict:
    applied: bool
    passed: int
    total: int
    all_passed: bool
    pass_fraction: float
    reason: str


# The info string is read apart from the pattern, which stays linear in hostile text
# (see cascadekit.verify.code._FENCE).
_FENCE = re.compile(r"```([^`\n]*)\n(.*?)```", re.DOTALL)
_DIFF_LANG = re.compile(r"[ \t]*(diff|patch|udiff)?")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_SEARCH, _DIVIDER, _REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
#: Longest normalised patch :func:`patch_similarity` compares (the comparison is quadratic in the worst case).
MAX_SIMILARITY_CHARS = 20_000
#: Longest answer (after the think block) read as a patch: above one paper-scale completion (about 135 kB),
#: so the verifier's own work per rollout stays bounded; a longer one is rejected with this reason.
MAX_PATCH_CHARS = 200_000


def _short(text: str, limit: int = 80) -> str:
    """``repr(text)``, cut to ``limit`` characters: a reason quotes model text, never all of it."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _answer(text: str) -> str:
    """The part of a model turn that can hold the patch: after the think block, before ``<|im_end|>``."""
    return answer_part(text).split("<|im_end|>", 1)[0]


def extract_diff(text: str) -> str | None:
    """The unified diff in a model answer, or None."""
    if not isinstance(text, str):
        return None
    answer = _answer(text)
    fenced = [body for info, body in _FENCE.findall(answer)
              if _DIFF_LANG.match(info).group(1) or body.lstrip().startswith(("---", "diff "))]
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


def _occurrences(lines: Sequence[str], block: Sequence[str], start: int) -> list[int]:
    """Every ``j >= start`` where ``lines[j:j + len(block)] == block``, in O(len(lines) + len(block)) time.

    Knuth-Morris-Pratt over whole lines: a hostile hunk that almost matches
    everywhere (N/2 copies of a line in a file of N) costs one pass, where trying
    every offset costs N^2/4 line comparisons.
    """
    size = len(block)
    if size == 0:
        return list(range(start, len(lines) + 1))
    fallback = [0] * size  # fallback[i]: longest proper prefix of block[:i + 1] that is also its suffix
    k = 0
    for i in range(1, size):
        while k and block[i] != block[k]:
            k = fallback[k - 1]
        k += block[i] == block[k]
        fallback[i] = k
    spots, k = [], 0
    for j in range(start, len(lines)):
        while k and lines[j] != block[k]:
            k = fallback[k - 1]
        k += lines[j] == block[k]
        if k == size:
            spots.append(j - size + 1)
            k = fallback[k - 1]
    return spots


def _locate(lines: list[str], block: list[str], want: int, start: int) -> int:
    """Where ``block`` sits: at ``want`` if it matches there, else at its one exact match."""
    if want >= start and lines[want:want + len(block)] == block:
        return want
    spots = _occurrences(lines, block, start)
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


def _block_path(lines: list[str], at: int) -> str:
    """The file named before the SEARCH marker on line ``at`` (above an opening fence, if any); "" if none.

    Takes ``calc.py``, Agentless's ``### calc.py`` and ``./calc.py`` alike.
    """
    j = at - 1
    if j >= 0 and lines[j].lstrip().startswith("```"):
        j -= 1
    line = lines[j].strip() if j >= 0 else ""
    if line in (_SEARCH, _DIVIDER, _REPLACE) or line.startswith("```"):
        return ""
    name = line.lstrip("#").strip().strip("`*").strip()
    return posixpath.normpath(name) if name else ""


def parse_search_replace(text: str) -> list[Edit]:
    """The SEARCH/REPLACE blocks of ``text`` (an answer without its think block), in order.

    Raises :class:`PatchError` for a block without a file line, without its
    ``=======`` or ``>>>>>>> REPLACE`` line, or with an empty SEARCH part, and
    when there is no block at all.
    """
    lines = text.split("\n")
    edits: list[Edit] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != _SEARCH:
            i += 1
            continue
        k = len(edits) + 1
        path = _block_path(lines, i)
        if not path:
            raise PatchError(f"block {k} names no file on the line before {_SEARCH!r}")
        parts: tuple[list[str], list[str]] = ([], [])
        part = 0
        while True:
            i += 1
            expected = (_DIVIDER, _REPLACE)[part]
            if i >= len(lines):
                raise PatchError(f"block {k} ends without its {expected!r} line")
            marker = lines[i].strip()
            if marker == expected and part == 0:
                part = 1
            elif marker == expected:
                break
            elif marker in (_SEARCH, _DIVIDER, _REPLACE):
                raise PatchError(f"block {k} has {marker!r} where its {expected!r} line belongs")
            else:
                parts[part].append(lines[i] + "\n")
        i += 1
        search, replace = "".join(parts[0]), "".join(parts[1])
        if not search.strip():
            raise PatchError(f"block {k} has an empty SEARCH part")
        edits.append(Edit(path, search, replace))
    if not edits:
        raise PatchError(f"no {_SEARCH!r} block")
    return edits


def parse_patch(text: str) -> list[FilePatch] | list[Edit]:
    """The patch in a model answer (after its think block); raises :class:`PatchError`.

    SEARCH/REPLACE blocks when the answer has a ``<<<<<<< SEARCH`` line, else a
    unified diff; ``"no patch found"`` when it has neither, ``"patch too long"`` over
    :data:`MAX_PATCH_CHARS`.
    """
    if not isinstance(text, str):
        raise PatchError("no patch found: not a string")
    answer = _answer(text)
    if len(answer) > MAX_PATCH_CHARS:
        raise PatchError(f"patch too long: {len(answer):,} characters, over the {MAX_PATCH_CHARS:,} one patch may have")
    if any(line.strip() == _SEARCH for line in answer.split("\n")):
        return parse_search_replace(answer)
    diff = extract_diff(text)
    if diff is None:
        raise PatchError("no patch found")
    return parse_diff(diff)


def _apply_edit(source: str, edit: Edit, k: int) -> str:
    """``source`` with the SEARCH lines of block ``k`` replaced; they must occur exactly once, as whole lines."""
    ended = source.endswith("\n")
    padded = "\n" + source + ("" if ended else "\n")
    needle = "\n" + edit.search
    at = padded.find(needle)
    if at < 0:
        raise PatchError(f"block {k}: its SEARCH lines are not in {edit.path}")
    if padded.find(needle, at + 1) >= 0:
        raise PatchError(f"block {k}: its SEARCH lines occur more than once in {edit.path}")
    patched = padded[1:at + 1] + edit.replace + padded[at + len(needle):]
    return patched if ended or not patched.endswith("\n") else patched[:-1]


def apply_patch(files: dict[str, str], patches: Sequence[FilePatch | Edit]) -> dict[str, str]:
    """A new ``{path: text}`` with the patches applied in order; raises :class:`PatchError`.

    An :class:`Edit` changes an existing file; a :class:`FilePatch` may also create or delete one.
    """
    result = dict(files)
    for k, patch in enumerate(patches, 1):
        if isinstance(patch, Edit):
            if patch.path not in result:
                raise PatchError(f"block {k}: file not found: {_short(patch.path)}")
            result[patch.path] = _apply_edit(result[patch.path], patch, k)
            continue
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


def normalize_patch(patch: Sequence[FilePatch | Edit]) -> str:
    """A patch as canonical SEARCH/REPLACE text: one block per edit or diff hunk, trailing spaces dropped.

    A diff hunk becomes the block from its old lines to its new ones, so the two
    formats compare on one footing.
    """
    edits: list[Edit] = []
    for item in patch:
        if isinstance(item, Edit):
            edits.append(item)
        else:
            edits += [Edit(item.new_path or item.old_path or "", "".join(h.old()), "".join(h.new()))
                      for h in item.hunks]
    blocks = ["\n".join([edit.path, _SEARCH, *edit.search.splitlines(), _DIVIDER, *edit.replace.splitlines(),
                         _REPLACE]) for edit in edits]
    return "\n".join(line.rstrip() for line in "\n".join(blocks).split("\n"))


def patch_similarity(completion: str, gold_patch: str) -> float:
    """The execution-free reward: how close the answer's patch is to ``gold_patch``, in [0, 1]; never raises.

    ``difflib.SequenceMatcher(None, predicted, gold, autojunk=False).ratio()`` on
    the two :func:`normalize_patch` texts, as SWE-RL scores a patch. 0 when
    either has no readable patch, or when one is over :data:`MAX_SIMILARITY_CHARS`.
    """
    try:
        predicted = normalize_patch(parse_patch(completion))
        gold = normalize_patch(parse_patch(gold_patch))
    except Exception:  # PatchError, or whatever else hostile text provokes: no readable patch
        return 0.0
    if max(len(predicted), len(gold)) > MAX_SIMILARITY_CHARS:
        return 0.0
    return difflib.SequenceMatcher(None, predicted, gold, autojunk=False).ratio()


def verify_patch(text: str, files: dict[str, str], tests: FunctionTests | Sequence[FunctionTests],
                 limits: Limits = Limits()) -> PatchVerdict:
    """Apply the model's patch to ``files`` and run the hidden ``tests`` on the result; never raises.

    The patch is SEARCH/REPLACE blocks or a unified diff (:func:`parse_patch`).

    The tests are calls with expected values (:class:`~cascadekit.verify.code.FunctionTests`
    naming a module of the repository), run by the code verifier's harness: nothing
    in the patched tree can import, shadow or rewrite them, and the comparison
    happens outside the sandbox.
    """
    def verdict(applied: bool, passed: int, total: int, reason: str) -> PatchVerdict:
        return PatchVerdict(applied, passed, total, total > 0 and passed == total,
                            passed / total if total else 0.0, reason)

    try:
        patched = apply_patch(files, parse_patch(text))
    except PatchError as e:
        return verdict(False, 0, 0, str(e))
    except Exception as e:  # a verifier never raises on model text
        return verdict(False, 0, 0, f"malformed patch: {type(e).__name__}")
    if "main.py" in patched:
        return verdict(False, 0, 0, "patch adds main.py, the name the test harness runs as")
    suite = [tests] if isinstance(tests, FunctionTests) else list(tests)
    passed, total, reason = run_hidden_tests(suite, patched, limits)
    if passed < total and not reason.startswith(("could not load", "error on", "wrong answer")):
        reason = f"tests did not finish: {reason}"
    elif passed < total:
        reason = f"tests fail: {reason}"
    return verdict(True, passed, total, reason)
