"""The patch applier against ``git apply`` itself: the same accept/reject and the same bytes.

The corpus is this repository's own history (every commit's ``.py`` diff, applied to
the files before it, to the files after it and to the files at HEAD, so offsets and
rejections are exercised too) plus one case per class where the kit once differed.
Each case runs ``git apply`` in a scratch repository and compares; nothing of git's
answers is pasted here.

Run as a script to print the agreement counts that ``cascadekit/verify/patch.py`` quotes::

    python tests/test_patch_git_parity.py
"""
from __future__ import annotations

import difflib
import functools
import os
import random
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from cascadekit.verify.patch import PatchError, apply_patch, parse_diff, patch_similarity
from cascadekit.verify.released import verify_gold_patch

REPO = Path(__file__).resolve().parents[1]
#: Commits of the history corpus (each gives three cases); the test wants at least this many.
CORPUS_COMMITS = 300
_GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}


class GitApply:
    """``git apply`` in a scratch repository of its own: files in, files (or None for a rejection) out."""

    def __init__(self, root: Path) -> None:
        self.work, self.patch = root / "work", root / "patch.diff"
        self.work.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=self.work, env=_GIT_ENV, check=True)

    def __call__(self, files: dict[str, str], diff: str) -> dict[str, str] | None:
        for entry in self.work.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        for path, text in files.items():
            (self.work / path).parent.mkdir(parents=True, exist_ok=True)
            (self.work / path).write_bytes(text.encode("utf-8", "surrogateescape"))
        self.patch.write_bytes(diff.encode("utf-8", "surrogateescape"))
        done = subprocess.run(["git", "apply", str(self.patch)], cwd=self.work, env=_GIT_ENV, capture_output=True)
        if done.returncode:
            return None
        return {str(p.relative_to(self.work)): p.read_bytes().decode("utf-8", "surrogateescape")
                for p in self.work.rglob("*") if p.is_file() and ".git" not in p.relative_to(self.work).parts}


def kit_apply(files: dict[str, str], diff: str) -> dict[str, str] | None:
    try:
        return apply_patch(files, parse_diff(diff))
    except PatchError:
        return None


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, env=_GIT_ENV, capture_output=True, check=True,
                          text=True, encoding="utf-8", errors="surrogateescape").stdout


def _blobs(specs: list[str]) -> list[str | None]:
    """``git cat-file --batch`` for each ``rev:path`` (None where it is missing), in one process."""
    done = subprocess.run(["git", "cat-file", "--batch"], cwd=REPO, env=_GIT_ENV, capture_output=True, check=True,
                          input="".join(f"{spec}\n" for spec in specs).encode())
    out, at, blobs = done.stdout, 0, []
    for _ in specs:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        if header[-1] == b"missing":
            blobs.append(None)
            at = end + 1
            continue
        size = int(header[2])
        blobs.append(out[end + 1:end + 1 + size].decode("utf-8", "surrogateescape"))
        at = end + 1 + size + 1
    return blobs


@functools.cache
def history_corpus(commits: int) -> list[tuple[str, dict[str, str], str]]:
    """(name, files, diff) per case: each commit's ``.py`` diff on the files before, after, and at HEAD."""
    log = ("log", "--no-merges", "--no-color", "--no-ext-diff", "-M", "--format=%x00%H", "-n", str(commits))
    statuses = [c.split("\n", 1) for c in _git(*log, "--name-status", "--", "*.py").split("\0")[1:]]
    diffs = [c.split("\n", 1)[1].lstrip("\n") for c in _git(*log, "-p", "--", "*.py").split("\0")[1:]]
    cases, specs, plans = [], [], []
    for (commit, status), diff in zip(statuses, diffs):
        names = status.strip().splitlines()
        old_paths = [f.split("\t")[1] for f in names if f[:1] != "A"]
        new_paths = [f.split("\t")[-1] for f in names if f[:1] != "D"]
        plan = []
        for label, rev, paths in (("before", f"{commit}^", old_paths), ("after", commit, new_paths),
                                  ("head", "HEAD", old_paths)):
            plan.append((label, paths, len(specs)))
            specs += [f"{rev}:{p}" for p in paths]
        plans.append((commit, diff, plan))
    blobs = _blobs(specs)
    for commit, diff, plan in plans:
        for label, paths, at in plan:
            files = {p: b for p, b in zip(paths, blobs[at:at + len(paths)]) if b is not None}
            cases.append((f"{commit[:9]}-{label}", files, diff))
    return cases


def _class_cases() -> list[tuple[str, dict[str, str], str]]:
    """One case per class where the kit once differed from git (issue 55 item 2), and their neighbours."""
    body = "".join(f"line {i}\n" for i in range(1, 13))
    head = "--- a/f.py\n+++ b/f.py\n"
    at_end = head + "@@ -11,2 +11,3 @@\n line 11\n line 12\n+line 13\n"
    at_start = head + "@@ -1,2 +1,3 @@\n+line 0\n line 1\n line 2\n"
    return [
        ("pure rename", {"a.py": "x = 1\n"},
         "diff --git a/a.py b/b.py\nsimilarity index 100%\nrename from a.py\nrename to b.py\n"),
        ("rename onto a file", {"a.py": "x = 1\n", "b.py": "y\n"},
         "diff --git a/a.py b/b.py\nsimilarity index 100%\nrename from a.py\nrename to b.py\n"),
        ("rename with a hunk", {"a.py": "x = 1\ny = 2\n"},
         "diff --git a/a.py b/b.py\nsimilarity index 50%\nrename from a.py\nrename to b.py\n"
         "--- a/a.py\n+++ b/b.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"),
        ("copy", {"a.py": "x = 1\n"},
         "diff --git a/a.py b/c.py\nsimilarity index 100%\ncopy from a.py\ncopy to c.py\n"),
        ("empty new file", {}, "diff --git a/e.py b/e.py\nnew file mode 100644\nindex 0000000..e69de29\n"),
        ("empty new file that exists", {"e.py": ""},
         "diff --git a/e.py b/e.py\nnew file mode 100644\nindex 0000000..e69de29\n"),
        ("empty file deleted", {"e.py": ""}, "diff --git a/e.py b/e.py\ndeleted file mode 100644\n"),
        ("non-empty file deleted without hunks", {"e.py": "x\n"}, "diff --git a/e.py b/e.py\ndeleted file mode 100644\n"),
        ("new file with lines, git header", {},
         "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1,2 @@\n+x\n+y\n"),
        ("deleted file with lines, git header", {"d.py": "x\ny\n"},
         "diff --git a/d.py b/d.py\ndeleted file mode 100644\n--- a/d.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n"),
        ("copy with a hunk", {"a.py": "x = 1\ny = 2\n"},
         "diff --git a/a.py b/c.py\nsimilarity index 50%\ncopy from a.py\ncopy to c.py\n"
         "--- a/a.py\n+++ b/c.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"),
        ("counts left out, timestamps after names", {"f.py": "a\nb\n"},
         "--- a/f.py\t2024-01-01 00:00:00\n+++ b/f.py\t2024-01-02 00:00:00\n@@ -1 +1 @@\n-a\n+A\n"),
        ("git header that changes nothing", {"m.py": "x\n"}, "diff --git a/m.py b/m.py\nindex 123..456 100644\n"),
        ("mode change only", {"m.py": "x\n"}, "diff --git a/m.py b/m.py\nold mode 100644\nnew mode 100755\n"),
        ("form feed in a line", {"f.py": "a\n\x0cb\nc\n"}, head + "@@ -1,3 +1,3 @@\n a\n-\x0cb\n+b\n c\n"),
        ("U+2028 in a line", {"f.py": "a\nb\u2028c\nd\n"}, head + "@@ -1,3 +1,3 @@\n a\n-b\u2028c\n+bc\n d\n"),
        ("lone CR in a line", {"f.py": "a\nb\rc\nd\n"}, head + "@@ -1,3 +1,3 @@\n a\n-b\rc\n+bc\n d\n"),
        ("CRLF file", {"f.py": "a\r\nb\r\nc\r\n"}, head + "@@ -1,3 +1,3 @@\n a\r\n-b\r\n+B\r\n c\r\n"),
        ("hunk at the end", {"f.py": body}, at_end),
        ("hunk at the end, applied twice", {"f.py": body + "line 13\n"}, at_end),
        ("hunk at the end, file grown", {"f.py": body + "more\n"}, at_end),
        ("hunk at the start", {"f.py": body}, at_start),
        ("hunk at the start, applied twice", {"f.py": "line 0\n" + body}, at_start),
        ("last line outside the counts", {"f.py": body},
         head + "@@ -3,2 +3,2 @@\n line 3\n-line 4\n+LINE 4\n line 5\n"),
        ("last line outside the counts at the end", {"f.py": body},
         head + "@@ -11,1 +11,1 @@\n line 11\n+line 11.5\n line 12\n"),
        ("a line past the counts, hunk at the end", {"f.py": body},
         head + "@@ -11,2 +11,2 @@\n line 11\n-line 12\n+LINE 12\n+line 13\n"),
        ("offset, nearest of two", {"f.py": "x\ny\n" * 4},
         head + "@@ -5,3 +5,3 @@\n x\n-y\n+Y\n x\n"),
        ("offset, equally near on both sides", {"f.py": "x\ny\nx\nq\nx\ny\nx\n"},
         head + "@@ -3,3 +3,3 @@\n x\n-y\n+Y\n x\n"),
        ("offset, before an earlier hunk", {"f.py": body},
         head + "@@ -8,3 +8,3 @@\n line 8\n-line 9\n+LINE 9\n line 10\n@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE 3\n line 4\n"),
        ("crowded hunks, all headed at line 2", {"f.py": "x\n" * 12},
         head + "@@ -2,3 +2,3 @@\n x\n-x\n+y\n x\n" * 3),
        ("hunks overlapping", {"f.py": body},
         head + "@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE 3\n line 4\n@@ -3,3 +3,3 @@\n line 3\n-line 4\n+LINE 4\n line 5\n"),
        ("no newline at the end, both sides", {"f.py": "a\nb"},
         head + "@@ -1,2 +1,2 @@\n-a\n+A\n b\n\\ No newline at end of file\n"),
        ("no newline claimed, file has one", {"f.py": "a\nb\nc\n"},
         head + "@@ -1,2 +1,2 @@\n-a\n+A\n b\n\\ No newline at end of file\n"),
        ("newline added at the end", {"f.py": "a\nb"},
         head + "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"),
        ("hunk that changes nothing", {"f.py": body}, head + "@@ -1,2 +1,2 @@\n line 1\n line 2\n"),
        ("hunk without file headers", {"f.py": body}, "@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n"),
        ("plain diff without prefixes", {"f.py": body},
         "--- f.py\n+++ f.py\n@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n"),
        ("plain diff, other names", {"f.py": body, "g.py": body},
         "--- x/f.py\n+++ y/g.py\n@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n"),
        ("new file over an existing one", {"f.py": body}, "--- /dev/null\n+++ b/f.py\n@@ -0,0 +1 @@\n+x\n"),
        ("new file into an empty one", {}, "--- /dev/null\n+++ b/n.py\n@@ -0,0 +1,2 @@\n+x\n+y\n"),
        ("file deleted, lines left", {"f.py": "a\nb\n"}, "--- a/f.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"),
        ("two sections on one file", {"f.py": body},
         head + "@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n" + head + "@@ -11,2 +11,2 @@\n line 11\n-line 12\n+LINE 12\n"),
        ("second file fails: nothing applies", {"f.py": body, "g.py": "g\n"},
         head + "@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n--- a/g.py\n+++ b/g.py\n@@ -1 +1 @@\n-nope\n+g\n"),
        ("chat markers in lines", {"f.py": "a\nb\nc\n"},
         head + "@@ -1,3 +1,3 @@\n a\n-b\n+s = '</think><|im_end|><think>'\n c\n"),
        ("prose between files", {"f.py": body, "g.py": "g\n"},
         "Here is the fix.\n\n" + head + "@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\nAnd another:\n"
         "--- a/g.py\n+++ b/g.py\n@@ -1 +1 @@\n-g\n+G\n"),
    ]


CLASSES = _class_cases()


def drifted_cases(n: int, seed: int = 0) -> list[tuple[str, dict[str, str], str]]:
    """``n`` small diffs over a three-line alphabet (context 0 to 3), their headers moved, applied to a drifted file.

    Lines repeat, so hunks match at several places: where git's outward search lands
    them, what its anchors at the start and end refuse, what overlaps it forbids.
    """
    rng = random.Random(seed)
    cases = []
    for k in range(n):
        old = [rng.choice("abc") + "\n" for _ in range(rng.randint(0, 14))]
        new = [line for line in old if rng.random() > 0.2]
        for _ in range(rng.randint(1, 3)):
            new.insert(rng.randint(0, len(new)), rng.choice("abcd") + "\n")
        diff = "".join(difflib.unified_diff(old, new, "a/f.py", "b/f.py", n=rng.randint(0, 3)))
        diff = re.sub(r"^@@ -(\d+)", lambda m: f"@@ -{max(int(m[1]) + rng.randint(-3, 3), 0)}", diff, flags=re.M)
        drifted = list(old)
        for _ in range(rng.randint(0, 3)):
            drifted.insert(rng.randint(0, len(drifted)), rng.choice("abc") + "\n")
        if diff:
            cases.append((f"drifted-{k}", {"f.py": "".join(drifted)}, diff))
    return cases


@pytest.fixture(scope="module")
def git_apply(tmp_path_factory: pytest.TempPathFactory) -> GitApply:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    return GitApply(tmp_path_factory.mktemp("git-apply"))


@pytest.mark.parametrize("name, files, diff", CLASSES, ids=[c[0] for c in CLASSES])
def test_every_class_agrees_with_git_apply(git_apply: GitApply, name: str, files: dict[str, str], diff: str) -> None:
    assert kit_apply(files, diff) == git_apply(files, diff)


def test_the_classes_agree_with_git_apply_as_counts(git_apply: GitApply) -> None:
    total, agree, equal, differ = agreement(CLASSES, git_apply)
    _print_parity("the classes the kit once differed in", CLASSES, total, agree, equal)
    assert not differ


def test_drifted_diffs_agree_with_git_apply(git_apply: GitApply) -> None:
    cases = drifted_cases(300)
    total, agree, equal, differ = agreement(cases, git_apply)
    _print_parity("drifted diffs", cases, total, agree, equal)
    assert not differ, f"{len(differ)} of {total} differ from git apply: {differ[:10]}"


def _print_parity(label: str, cases: list[tuple[str, dict[str, str], str]], total: int, agree: int, equal: int) -> None:
    """The counts ``cascadekit bench parity`` collects (``pytest -s`` shows them)."""
    accepted = sum(kit_apply(files, diff) is not None for _, files, diff in cases)
    print(f"\nparity: patch applier vs git apply, {label}: {agree}/{total} accept/reject agree, "
          f"bytes equal on {equal}/{accepted} the kit accepts")


def agreement(cases: list[tuple[str, dict[str, str], str]], git_apply: GitApply) -> tuple[int, int, int, list[str]]:
    """(cases, accept/reject agreements, byte-equal results where both accept, names of the disagreements)."""
    agree = equal = 0
    differ = []
    for name, files, diff in cases:
        ours, theirs = kit_apply(files, diff), git_apply(files, diff)
        agree += (ours is None) == (theirs is None)
        equal += ours is not None and ours == theirs
        if ours != theirs:
            differ.append(name)
    return len(cases), agree, equal, differ


def test_the_repository_history_agrees_with_git_apply(git_apply: GitApply) -> None:
    if int(_git("rev-list", "--count", "HEAD").strip() or 0) < CORPUS_COMMITS:
        pytest.skip("a shallow clone: the history corpus needs the repository's commits")
    cases = history_corpus(CORPUS_COMMITS)
    total, agree, equal, differ = agreement(cases, git_apply)
    _print_parity(f"this repository's last {CORPUS_COMMITS} commits", cases, total, agree, equal)
    assert total >= 3 * CORPUS_COMMITS and not differ, f"{len(differ)} differ from git apply: {differ[:10]}"
    rejected = sum(kit_apply(files, diff) is None for _, files, diff in cases)
    assert CORPUS_COMMITS < rejected < total - CORPUS_COMMITS  # both verdicts well represented (git's, as they agree)


def test_every_history_diff_scores_one_against_itself() -> None:
    """The execution-free reward of a gold patch against itself, chat markers in its lines or not (issue 55 item 1)."""
    diffs = [diff for name, _, diff in history_corpus(CORPUS_COMMITS) if name.endswith("-before")]
    marked = [diff for diff in diffs if any(m in diff for m in ("<think>", "</think>", "<|im_end|>"))]
    assert len(diffs) >= CORPUS_COMMITS and marked
    low = [diff[:60] for diff in diffs if patch_similarity(diff, diff) != 1.0 or verify_gold_patch(diff, diff).score != 1.0]
    assert not low, f"{len(low)} of {len(diffs)} ({len(marked)} with chat markers) score below 1: {low[:3]}"


def _variants(cases: list[tuple[str, dict[str, str], str]]) -> dict[str, list[tuple[dict[str, str], str, str]]]:
    """(files, answer, gold) per kind of answer, for :func:`applicability_effect`: each commit's own diff and three
    near misses a model makes (a context line misremembered, line numbers off by 5, the next commit's patch)."""
    before = [(files, diff) for name, files, diff in cases if name.endswith("-before")]
    shifted = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)", re.MULTILINE)
    kinds: dict[str, list[tuple[dict[str, str], str, str]]] = {k: [] for k in ("gold", "context", "lines", "other")}
    for k, (files, gold) in enumerate(before):
        kinds["gold"].append((files, gold, gold))
        kinds["context"].append((files, re.sub(r"^ (.+)$", r" \1  # x", gold, count=1, flags=re.MULTILINE), gold))
        kinds["lines"].append((files, shifted.sub(lambda m: f"@@ -{int(m[1]) + 5}{m[2] or ''} +{int(m[3]) + 5}", gold), gold))
        kinds["other"].append((files, before[k - 1][1], gold))
    return kinds


def applicability_effect(cases: list[tuple[str, dict[str, str], str]]) -> None:
    """Print how often asking applicability changes the execution-free reward, per kind of answer."""
    for kind, rows in _variants(cases).items():
        plain = [patch_similarity(answer, gold) for _, answer, gold in rows]
        applied = [patch_similarity(answer, gold, files=files) for files, answer, gold in rows]
        changed = [p for p, a in zip(plain, applied) if p != a]
        print(f"applicability, {kind}: changes the reward on {len(changed)}/{len(rows)} answers "
              f"(mean reward {sum(plain) / len(rows):.3f} -> {sum(applied) / len(rows):.3f}; "
              f"mean similarity of the changed {sum(changed) / max(len(changed), 1):.3f})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        runner = GitApply(Path(scratch))
        for label, cases in (("history", history_corpus(CORPUS_COMMITS)), ("classes", CLASSES),
                             ("drifted", drifted_cases(300))):
            total, agree, equal, differ = agreement(cases, runner)
            accepted = sum(kit_apply(f, d) is not None for _, f, d in cases)
            print(f"{label}: {agree}/{total} accept/reject agree with git apply, bytes equal on {equal}/{accepted} "
                  f"the kit accepts; differ: {differ[:10]}")
        applicability_effect(history_corpus(CORPUS_COMMITS))
