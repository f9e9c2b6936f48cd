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
* unified and git diffs (fenced ``diff``/``patch`` blocks, else the text from the
  first ``--- ``/``diff --git`` line), read and applied as ``git apply`` (no
  options) does, the harness SWE-bench applies patches with: ``-p1`` names; git's
  extended headers (renames, copies, new and deleted files without hunks, mode
  changes); files split on ``\n`` only; a hunk's counts decide where it ends;
  every context and removed line must match byte for byte (no fuzz, no whitespace
  leniency); a hunk that starts at line 0 or 1 must sit at the file's start, one
  with no context after its last change at the file's end; any other hunk is
  searched for outwards from its header's line (one after, one before, two
  after...) and lands at the first exact match, never on lines an earlier hunk
  wrote; all files apply or none.

  Parity, measured by ``tests/test_patch_git_parity.py`` (which runs ``git apply``
  itself; ``python tests/test_patch_git_parity.py`` prints the counts): on this
  repository's history, 300 commits' ``.py`` diffs each applied to the files
  before, after and at HEAD, 900/900 accept/reject agree with ``git apply`` and the
  bytes are equal on all 308 the kit accepts (history up to 2aa9d75); on the 45
  class cases (pure renames, copies, empty new files, form feed, U+2028 and lone CR
  inside a line, CRLF, hunks anchored at the start or end and applied twice, a
  line past a hunk's counts, offsets, overlaps, missing final newlines, ...) 45/45
  agree, bytes equal on 29/29; on 299 small diffs over a three-line alphabet, their
  headers moved and applied to a drifted file (hunks that match at several places),
  299/299 agree, bytes equal on 115/115. The applier before this one agreed on
  892/900, 25/45 and 199/299.

  Where the kit departs from ``git apply``, on purpose: it spends at most
  :data:`WORK_PER_LINE` line comparisons per line of the patch and of the files
  it reads, so its work is linear in the patch (git's outward search costs hunks x
  file lines on hostile input), and a patch needing more is rejected; paths in
  C-style quotes and binary patches are rejected; a diff whose last line lacks its
  newline is read (git calls it corrupt: a model's answer often ends its last
  line with the end of its turn).

Two rewards come from a patch:

* execution (:func:`verify_patch`): apply it and run hidden tests (calls with
  expected values) on the patched files in the sandbox, comparing outside it;
* execution-free (:func:`patch_similarity`): the paper's SWE RL reward, after
  SWE-RL, a sequence similarity between the generated and the gold patch
  (``difflib.SequenceMatcher(..., autojunk=False).ratio()``), on patch text
  normalised to SEARCH/REPLACE blocks; 0 when no patch can be read. With the
  repository's files known, ``files=`` also asks applicability (0 unless the
  patch applies); the paper's reward is the default. On the history corpus
  (``python tests/test_patch_git_parity.py``) applicability changes the reward of
  0/300 gold patches, 0/300 with line numbers off by 5, 237/300 with one context
  line misremembered (mean 0.815 -> 0.027: the text is 0.998 alike, git refuses
  it) and 189/300 answers that are another commit's patch (mean 0.086 -> 0.004).

Chat markers (``<think>``, ``</think>``, ``<|im_end|>``) are structure only where
the chat format puts them (:func:`cascadekit.verify.boxed.answer_part`): a diff
or a SEARCH/REPLACE block may hold them in its lines. A gold patch is read bare
(``chat=False``): every line is the patch's own, so a real diff scores 1.0
against itself (all 300 diffs of the history corpus do; 65 scored 0 before).

Departure from the paper: its SWE reward is execution-free only; executing the
tests is the stricter judge the kit can afford at toy scale, and both are here so
a chapter can compare them.
"""

from __future__ import annotations

import bisect
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
    new_start: int = 0

    def old(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    def new(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]

    def anchored(self) -> tuple[bool, bool]:
        """(must sit at the file's start, must end at the file's end), as ``git apply`` reads a hunk.

        A hunk from line 0 or 1 belongs at the start; one with no context line after
        its last change belongs at the end (git's rule without ``--unidiff-zero``).
        """
        return self.old_start <= 1, self.lines[-1][0] != " "


@dataclasses.dataclass(frozen=True)
class FilePatch:
    old_path: str | None  # None: a new file
    new_path: str | None  # None: a deleted file
    hunks: tuple[Hunk, ...]
    copy: bool = False  # git's "copy from": the old file stays


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
# (see cascadekit.verify.code._FENCE). Fences open and close at a line's start: a diff's
# own lines (" ```", "+```diff") never do, so a patch of a Markdown file stays whole.
_FENCE = re.compile(r"^```([^`\n]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
_DIFF_LANG = re.compile(r"[ \t]*(diff|patch|udiff)?")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_SEARCH, _DIVIDER, _REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
#: Line comparisons a patch may spend locating its hunks, per line of the patch and of the files it reads.
WORK_PER_LINE = 16
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
    """The part of a model turn that can hold the patch: after its think block, before its end-of-turn.

    The markers count only where the chat format puts them
    (:func:`cascadekit.verify.boxed.answer_part`): a diff's own lines may hold them.
    """
    return answer_part(text)


def _diff_in(answer: str, fences: bool) -> str | None:
    """The diff in ``answer``: its fenced diff blocks if ``fences`` and it has any, else from its first header."""
    if fences:
        fenced = [body for info, body in _FENCE.findall(answer)
                  if _DIFF_LANG.match(info).group(1) or body.lstrip().startswith(("---", "diff "))]
        if fenced:
            return "".join(fenced)
    match = re.search(r"^(--- |diff --git )", answer, re.MULTILINE)
    return answer[match.start():] if match else None


def extract_diff(text: str, chat: bool = True) -> str | None:
    """The unified diff in a model answer, or None; with ``chat=False`` ``text`` is a bare patch (no markers, no fences)."""
    if not isinstance(text, str):
        return None
    return _diff_in(_answer(text), True) if chat else _diff_in(text, False)


def _is_search_replace(answer: str) -> bool:
    """Whether the answer's first patch line opens a SEARCH/REPLACE block rather than a diff."""
    lines = answer.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == _SEARCH:
            return True
        if line.startswith("diff --git ") or (line.startswith("--- ") and i + 1 < len(lines)
                                               and lines[i + 1].startswith("+++ ")):
            return False
    return False


def _path(name: str) -> str | None:
    """A diff's file name as ``git apply -p1`` reads it: its first directory dropped; None for /dev/null."""
    path = name.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith('"'):
        raise PatchError(f"malformed diff: quoted path {_short(path)} (the kit reads plain names only)")
    path = path.split("/", 1)[1] if "/" in path else path
    norm = posixpath.normpath(path)
    if not path or norm.startswith(("/", "..")) or norm == ".":
        raise PatchError(f"malformed diff: unsafe path {path!r}")
    return norm


def _git_name(header: str) -> str | None:
    """The one name of ``diff --git a/NAME b/NAME`` (both sides alike), else None."""
    half = (len(header) - 1) // 2
    old, new = header[:half], header[half + 1:]
    return _path(old) if header[half:half + 1] == " " and _path(old) == _path(new) else None


def _parse_hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    """The hunk whose header is ``lines[i]``, read as git does: its counts decide where it ends."""
    m = _HUNK.match(lines[i])
    if not m:
        raise PatchError(f"malformed diff: bad hunk header {_short(lines[i])}")
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    body: list[tuple[str, str]] = []
    left_old, left_new = old_len, new_len
    i += 1
    while left_old > 0 or left_new > 0:
        if i >= len(lines):
            raise PatchError(f"malformed diff: hunk at line {old_start} ends early")
        line = lines[i]
        i += 1
        if line.startswith("\\"):  # "\ No newline at end of file" for the line before
            if body:
                body[-1] = (body[-1][0], body[-1][1].removesuffix("\n"))
            continue
        tag, text = (line[:1] or " "), line[1:]
        if tag not in " -+" or (tag != "+" and left_old == 0) or (tag != "-" and left_new == 0):
            raise PatchError(f"malformed diff: hunk at line {old_start} does not match its line counts "
                             f"at {_short(line)}")
        left_old -= tag != "+"
        left_new -= tag != "-"
        body.append((tag, text + "\n"))
    if i < len(lines) and lines[i].startswith("\\") and body:
        body[-1] = (body[-1][0], body[-1][1].removesuffix("\n"))
        i += 1
    if all(tag == " " for tag, _ in body):
        raise PatchError(f"malformed diff: hunk at line {old_start} changes nothing")
    return Hunk(old_start, old_len, tuple(body), new_start), i


_GIT_SKIPPED = ("similarity index ", "dissimilarity index ", "index ")


def _git_header(lines: list[str], i: int) -> tuple[str | None, str | None, bool, int]:
    """(old path, new path, copy, next line) of the ``diff --git`` section at ``lines[i]``.

    Reads git's extended header lines (new/deleted file mode, rename/copy from/to,
    modes and index), then the ``---``/``+++`` names if present.
    """
    old = new = _git_name(lines[i][len("diff --git "):])
    created = deleted = copy = moded = False
    i += 1
    while i < len(lines):
        line = lines[i]
        if line.startswith("new file mode "):
            created = True
        elif line.startswith("deleted file mode "):
            deleted = True
        elif line.startswith(("old mode ", "new mode ")):
            moded = True
        elif line.startswith(("rename from ", "copy from ")):
            old, copy = _path("a/" + line.split(" from ", 1)[1]), line.startswith("copy")
        elif line.startswith(("rename to ", "copy to ")):
            new = _path("b/" + line.split(" to ", 1)[1])
        elif line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchError(f"binary patch for {new or old} (the kit patches text files only)")
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _path(line[4:]), _path(lines[i + 1][4:])
            return old, new, copy, i + 2
        elif not line.startswith(_GIT_SKIPPED):
            break
        i += 1
    if old is None and new is None:
        raise PatchError("malformed diff: a 'diff --git' header without its file names")
    if not (created or deleted or moded or old != new) and not (i < len(lines) and lines[i].startswith("@@ -")):
        raise PatchError(f"malformed diff: the 'diff --git' section of {new} changes nothing")
    return (None if created else old), (None if deleted else new), copy, i


def _traditional(lines: list[str], i: int) -> bool:
    """Whether ``lines[i]`` opens a ``---``/``+++``/``@@ -`` section (git's test for a plain unified diff)."""
    return (lines[i].startswith("--- ") and i + 2 < len(lines) and lines[i + 1].startswith("+++ ")
            and lines[i + 2].startswith("@@ -"))


def parse_diff(diff: str) -> list[FilePatch]:
    """Parse a unified or git diff as ``git apply`` does; raises :class:`PatchError` with the reason.

    Text between file sections is skipped; a hunk header outside one is an error.
    """
    lines = diff.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line, not an empty context line
    patches, i = [], 0
    while i < len(lines):
        if lines[i].startswith("diff --git "):
            old, new, copy, i = _git_header(lines, i)
        elif _traditional(lines, i):
            old, new, copy, i = _path(lines[i][4:]), _path(lines[i + 1][4:]), False, i + 2
            if old is not None and new is not None:  # a plain diff renames nothing: git patches one name,
                old = new = old if len(old) < len(new) and new.startswith(old) else new  # the shorter if alike
        elif _HUNK.match(lines[i]):
            raise PatchError(f"malformed diff: hunk {_short(lines[i])} without file headers")
        else:
            i += 1  # prose between files
            continue
        if old is None and new is None:
            raise PatchError("malformed diff: /dev/null on both sides")
        hunks = []
        while i < len(lines) and lines[i].startswith("@@ -"):
            hunk, i = _parse_hunk(lines, i)
            hunks.append(hunk)
        patches.append(FilePatch(old, new, tuple(hunks), copy))
    if not patches:
        raise PatchError("malformed diff: no file headers (a 'diff --git' line, or '---' and '+++' lines before a hunk)")
    return patches


def _split_lines(text: str) -> list[str]:
    """``text`` as lines each with its ``\\n``, split on ``\\n`` only (as git and the diff's own lines are)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


class _Work:
    """A patch's budget of line comparisons: linear in the patch and the files it reads, so never quadratic.

    ``git apply`` searches for a misplaced hunk line by line outwards from its
    header's line, which costs (hunks x file lines) on a patch of many hunks that
    match nowhere. The kit finds the same place through an index of the file's
    lines and spends at most :data:`WORK_PER_LINE` comparisons per line of input;
    a patch that needs more is rejected (git would keep searching).
    """

    def __init__(self, lines: int) -> None:
        self.budget = WORK_PER_LINE * (lines + 100)
        self.spent = 0

    def spend(self, n: int) -> None:
        self.spent += n
        if self.spent > self.budget:
            raise PatchError(f"locating its hunks takes over {self.budget:,} line comparisons")


class _Fenwick:
    """Prefix sums over positions 0..n with point updates, each O(log n)."""

    def __init__(self, n: int) -> None:
        self.tree = [0] * (n + 2)

    def add(self, i: int, value: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += value
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum over positions 0..i."""
        i, total = i + 1, 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


_GIT_SPACE = " \t\n\r"


class _Image:
    """A file under one file section's hunks, as ``git apply`` holds it.

    Each hunk replaces lines that no earlier hunk wrote (git's rule without
    ``--allow-overlap``), so every place a later hunk can match is a run of the
    original lines: the original stays as it is, with its edits beside it and an
    index from each line to where it occurs.
    """

    def __init__(self, text: str, work: _Work) -> None:
        self.lines = _split_lines(text)
        self.size = len(self.lines)  # lines of the file as the hunks so far left it
        self.edits: list[tuple[int, int, list[str]]] = []  # (start, end, new lines), in file order
        self.starts: list[int] = []
        self.shift = _Fenwick(len(self.lines))  # at an edit's end: the lines it added minus those it removed
        self.index: dict[str, list[int]] = {}
        for at, line in enumerate(self.lines):
            self.index.setdefault(line.rstrip(_GIT_SPACE), []).append(at)
        work.spend(len(self.lines))

    def _edit_before(self, end: int) -> tuple[int, int] | None:
        """(start, end) of the last edit starting before original line ``end``."""
        k = bisect.bisect_left(self.starts, end) - 1
        return self.edits[k][:2] if k >= 0 else None

    def position(self, at: int) -> int:
        """Where original line ``at`` sits now; inside an edit, where that edit's new lines begin."""
        edit = self._edit_before(at + 1)
        start = edit[0] if edit and edit[0] < edit[1] and edit[1] > at else at
        return start + self.shift.prefix(start)

    def free(self, at: int, count: int) -> bool:
        """Whether original lines ``at`` .. ``at + count - 1`` are all there, together, untouched by any hunk."""
        edit = self._edit_before(at + count)
        return at + count <= len(self.lines) and (edit is None or (edit[1] <= at and edit[0] <= at))

    def matches(self, at: int, old: list[str], at_end: bool, work: _Work) -> bool:
        """Whether ``old`` is there at original line ``at``, compared as git does.

        Bytes must be equal, except that a last old line without its newline may
        stand for a file line that goes on with whitespace (git compares the
        hunk's bytes, and hashes lines without whitespace), unless the hunk must
        end at the end of the file.
        """
        for k, want in enumerate(old):
            work.spend(1)
            line = self.lines[at + k]
            if line != want and not (k == len(old) - 1 and not at_end and not want.endswith("\n")
                                     and line.startswith(want) and not line[len(want):].strip(_GIT_SPACE)):
                return False
        return True

    def original_at(self, position: int) -> int | None:
        """The untouched original line that sits at ``position`` now, if any."""
        lo, hi = 0, len(self.lines)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.position(mid) < position:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self.lines) and self.position(lo) == position and self.free(lo, 1) else None

    def find(self, hunk: Hunk, work: _Work) -> int | None:
        """The original line where ``hunk`` applies, as git's search finds it; None if nowhere.

        git tries the line its header names (in the file as earlier hunks left it),
        then one after, one before, two after..., and takes the first match; a
        hunk anchored at the file's start or end is tried only there.
        """
        old = hunk.old()
        at_start, at_end = hunk.anchored()
        if at_start or at_end:
            position = 0 if at_start else self.size - len(old)
            if not old:
                return len(self.lines) if self.size == position else None
            at = self.original_at(position)
            fits = at is not None and self.free(at, len(old)) and (not at_end or position + len(old) == self.size)
            return at if fits and self.matches(at, old, at_end, work) else None
        work.spend(len(old))
        anchor = min(range(len(old)), key=lambda k: len(self.index.get(old[k].rstrip(_GIT_SPACE), ())))
        spots = self.index.get(old[anchor].rstrip(_GIT_SPACE), [])
        want = max(hunk.new_start - 1, 0)
        keys = [-1] * len(spots)  # cached positions; filled lazily, as the search meets them

        def key(j: int) -> int:
            if keys[j] < 0:
                keys[j] = self.position(spots[j] - anchor) if spots[j] >= anchor else -len(self.lines) - 1
            return keys[j]

        lo, hi = 0, len(spots)
        while lo < hi:
            mid = (lo + hi) // 2
            work.spend(1)
            lo, hi = (mid + 1, hi) if key(mid) < want else (lo, mid)
        before, after = lo - 1, lo
        while before >= 0 or after < len(spots):
            work.spend(1)
            if after < len(spots) and (before < 0 or key(after) - want <= want - key(before)):
                j, after = after, after + 1
            else:
                j, before = before, before - 1
            at = spots[j] - anchor
            if at >= 0 and self.free(at, len(old)) and self.matches(at, old, False, work):
                return at
        return None

    def replace(self, at: int, count: int, new: list[str]) -> None:
        """Original lines ``at`` .. ``at + count - 1`` become ``new`` (lines no later hunk may match)."""
        k = bisect.bisect_right(self.starts, at)
        self.edits.insert(k, (at, at + count, new))
        self.starts.insert(k, at)
        self.shift.add(at + count, len(new) - count)
        self.size += len(new) - count

    def text(self) -> str:
        out, done = [], 0
        for start, end, new in self.edits:
            out += self.lines[done:start] + new
            done = end
        return "".join(out + self.lines[done:])


def _apply_file(source: str, patch: FilePatch, name: str, work: _Work) -> str:
    image = _Image(source, work)
    for k, hunk in enumerate(patch.hunks, 1):
        at = image.find(hunk, work)
        if at is None:
            raise PatchError(f"hunk {k} of {name} does not apply: context or removed lines do not match the file"
                             + (" where the hunk must sit" if any(hunk.anchored()) else ""))
        image.replace(at, len(hunk.old()), hunk.new())
    return image.text()


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


def parse_patch(text: str, chat: bool = True) -> list[FilePatch] | list[Edit]:
    """The patch in a model answer (after its think block); raises :class:`PatchError`.

    SEARCH/REPLACE blocks when a ``<<<<<<< SEARCH`` line comes before any diff
    header, else a unified diff; ``"no patch found"`` when it has neither, ``"patch
    too long"`` over :data:`MAX_PATCH_CHARS`. With ``chat=False`` the text is a
    patch on its own (a dataset's gold patch): no chat markers, no fences.
    """
    if not isinstance(text, str):
        raise PatchError("no patch found: not a string")
    answer = _answer(text) if chat else text
    if len(answer) > MAX_PATCH_CHARS:
        raise PatchError(f"patch too long: {len(answer):,} characters, over the {MAX_PATCH_CHARS:,} one patch may have")
    if _is_search_replace(answer):
        return parse_search_replace(answer)
    diff = _diff_in(answer, chat)
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


def _input_lines(files: dict[str, str], patches: Sequence[FilePatch | Edit]) -> int:
    """Lines a patch brings (its hunks) and reads (the files it names): the measure of its work budget."""
    read = {p.old_path for p in patches if isinstance(p, FilePatch) and p.old_path in files}
    return (sum(len(h.lines) + 1 for p in patches if isinstance(p, FilePatch) for h in p.hunks)
            + sum(files[path].count("\n") + 1 for path in read))


def apply_patch(files: dict[str, str], patches: Sequence[FilePatch | Edit]) -> dict[str, str]:
    """A new ``{path: text}`` with the patches applied in order; raises :class:`PatchError`.

    An :class:`Edit` changes an existing file; a :class:`FilePatch` may also create or delete one.
    """
    result = dict(files)
    work = _Work(_input_lines(files, patches))
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
            source = result[patch.old_path] if patch.copy else result.pop(patch.old_path)
        if patch.new_path in result:
            raise PatchError(f"{'copying' if patch.copy else 'renaming'} onto {patch.new_path}, which exists")
        patched = _apply_file(source, patch, name, work) if patch.hunks else source
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
            _split_lines(a or ""), _split_lines(b or ""),
            fromfile=f"a/{path}" if a is not None else "/dev/null",
            tofile=f"b/{path}" if b is not None else "/dev/null", n=context)
        for line in diff:
            chunks.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(chunks)


def _file_operation(item: FilePatch) -> Edit:
    """A hunkless file section (an empty new file, a pure rename, copy or deletion) as a block naming it."""
    if item.old_path is None:
        what = "new file"
    elif item.new_path is None:
        what = "deleted file"
    else:
        what = f"{'copy' if item.copy else 'rename'} from {item.old_path}" if item.old_path != item.new_path else ""
    return Edit(item.new_path or item.old_path or "", f"{what}\n", "")


def normalize_patch(patch: Sequence[FilePatch | Edit]) -> str:
    """A patch as canonical SEARCH/REPLACE text: one block per edit or diff hunk, trailing spaces dropped.

    A diff hunk becomes the block from its old lines to its new ones, so the two
    formats compare on one footing; a file section without hunks becomes a block
    naming what it does to the file.
    """
    edits: list[Edit] = []
    for item in patch:
        if isinstance(item, Edit):
            edits.append(item)
        elif item.hunks:
            edits += [Edit(item.new_path or item.old_path or "", "".join(h.old()), "".join(h.new()))
                      for h in item.hunks]
        else:
            edits.append(_file_operation(item))
    blocks = ["\n".join([edit.path, _SEARCH, *edit.search.splitlines(), _DIVIDER, *edit.replace.splitlines(),
                         _REPLACE]) for edit in edits]
    return "\n".join(line.rstrip() for line in "\n".join(blocks).split("\n"))


def patch_similarity(completion: str, gold_patch: str, files: dict[str, str] | None = None) -> float:
    """The execution-free reward: how close the answer's patch is to ``gold_patch``, in [0, 1]; never raises.

    ``difflib.SequenceMatcher(None, predicted, gold, autojunk=False).ratio()`` on
    the two :func:`normalize_patch` texts, as SWE-RL scores a patch. 0 when
    either has no readable patch, or when they differ and one is over
    :data:`MAX_SIMILARITY_CHARS`. The completion is a model turn (its think block and end-of-turn are not the
    patch); ``gold_patch`` is a bare patch, every line of it the patch's own.

    With ``files`` (the repository's contents, where a row has them) the reward
    also asks applicability: 0 unless the answer's patch applies to ``files``
    (:func:`apply_patch`, as ``git apply``). Without, it is the paper's reward.
    """
    try:
        parsed = parse_patch(completion)
        predicted = normalize_patch(parsed)
        gold = normalize_patch(parse_patch(gold_patch, chat=False))
        if files is not None:
            apply_patch(files, parsed)
    except Exception:  # PatchError, or whatever else hostile text provokes: no readable (or applicable) patch
        return 0.0
    if predicted == gold:  # the ratio of equal texts, at any length
        return 1.0
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
