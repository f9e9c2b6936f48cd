"""No measured number is typed into a notebook's prose: each must be in the chapter's committed results.

For every chapter notebook with committed results in ``data/results/<NN>_*/``, each
number in its Markdown cells must appear in that folder's committed files
(``metrics.json``, ``paper_vs_run.md``, ``README.md`` and probe outputs, subfolders
included) or in the notebook's short allow-list below (numbers that are not this
run's measurements). Prose that quotes a measurement renders it from the metrics
(:func:`cascadekit.course.notebook.render`), in a code cell, so it never shows up here.

Tolerant on form, strict on value: ``0.25``, ``.25`` and ``25%`` are the same number;
a number matches a committed value that rounds to it at the precision shown
(``0.26`` matches 0.2630); signs are ignored (prose says "fell by 0.06" of a
-0.06). Small integers (below 10) count things and must match exactly, or any
metric would round to 0 or 1. Per-step training logs are skipped: prose never
quotes one step, and thousands of values would match any number. Not checked:
LaTeX, code (fenced, indented, inline), section numbers in headings, numbers glued
to letters (``pass@16``, ``32M``, ``A.5``, ``1e-4``), exercise cells (tasks, not measurements).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "data" / "results"
SERIES = {"curves", "loss_log", "rl_curves"}  # per-step training logs
RESULT_FILES = ("*.json", "*.md", "*.txt")

COMMON = {"95%"}  # the intervals' confidence level
ALLOWED: dict[str, set[str]] = {
    "03": {"768"},  # the paper's hidden size, quoted beside the kit's
    "04": {
        "11", "14", "15", "20", "17", "7",  # the paper's op ranges (11-14 edge, 15-20 hard, 7-10 easy, 17-20)
        "10",  # the paper's and the kit's top pretraining op
        "0.5",  # the competence bands' pass@1 threshold (a definition)
    },
    "05": {
        "20",  # the paper's op range (2-20)
        "50",  # the paper's RL mixture: 50% A, 50% B
        "0.1", "1", "10", "0",  # the four exposures asked (0%, 0.1%, 1%, 10%): settings
        "62",  # tokens per op-2 B problem (component_lengths, printed by the notebook's own cell)
    },
    "06": {
        "20", "50", "80",  # the paper's RL shares and its 20% in-distribution + 80% edge mid-training mix
        "6", "2", "4", "8",  # FLOPs per token: 6P, 2 forward, 4 backward, 8 + 2 gamma
        "100", "1,024", "2048",  # the paper's full RL: 100 updates of 1,024 prompts, L = 2048
        "1024",  # the paper's prompt and response caps (1024 + 1024)
        "2.10",  # the paper's full-RL cost in B token-equivalents (printed by the cell below it)
    },
    "07": {
        "11", "14", "15", "20",  # the paper's op ranges (edge 11-14, hard 15-20, op 2-14)
        "0.1", "0.3",  # the paper's pass@128 moves (-0.1 to +0.3) on op 2-14
        "4.6", "5.2",  # the paper's pass@1 gains on op 2-14
        "0.2", "0.8",  # the mixed reward's weights
        "1",  # "outcome 1" in the hacking probe: the reward's value for a right answer
    },
    "08": {
        "0.2", "0.1", "0.95",  # the toy targets after SFT stage 2 (think score, no_think score, mode following)
        "0.4",  # the hidden quality function's weight for a correct answer (0.2 each for style: a definition)
        "2.5%",  # each tail of a 95% interval
    },
    "15": {
        "92.0", "30", "91.0", "25",  # the follow-up paper's AIME25: MOPD 92.0 in 30 steps, GRPO 91.0 in 25
        "71.5", "85.5", "52", "160",  # its ArenaHard v2 hard prompts 71.5 -> 85.5 in 52 steps; RLHF about 160
        "0.02",  # within this of its teacher a domain counts as recovered (a definition)
    },
}

_CODE = re.compile(r"```.*?```|\$\$.*?\$\$|<!--.*?-->", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`|\$[^$\n]*\$|^(?: {4}|\t).*$|\]\([^)]*\)", re.M)
_HEADING_NUMBER = re.compile(r"^(#+\s*)\d+\s*·", re.M)
_GLUED = re.compile(r"\d+(?:\.\d+)?e-?\d+", re.I)
_PROSE_NUMBER = re.compile(r"(?<![\w.@/])[-+−]?(\d{1,3}(?:,\d{3})+|\d*\.\d+|\d+)(%?)(?![\w])")
_ANY_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?", re.I)


def prose_numbers(markdown: str) -> list[str]:
    """The numbers a reader sees in a Markdown cell, as written (sign dropped, ``%`` kept)."""
    text = _GLUED.sub(" ", _HEADING_NUMBER.sub(r"\1", _INLINE_CODE.sub(" ", _CODE.sub(" ", markdown))))
    return [number + percent for number, percent in _PROSE_NUMBER.findall(text)]


def _json_values(node: Any) -> Iterator[float]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in SERIES:
                yield from _json_values(value)
    elif isinstance(node, list):
        for value in node:
            yield from _json_values(value)
    elif isinstance(node, bool) or node is None:
        return
    elif isinstance(node, (int, float)):
        yield float(node)
    else:
        yield from _text_values(str(node))


def _text_values(text: str) -> Iterator[float]:
    for number in _ANY_NUMBER.findall(text):
        yield float(number.replace(",", ""))


def committed_values(folder: Path) -> set[float]:
    """Every number in a chapter's committed result files, subfolders included."""
    values: set[float] = set()
    for pattern in RESULT_FILES:
        for path in folder.rglob(pattern):
            text = path.read_text()
            values.update(_json_values(json.loads(text)) if path.suffix == ".json" else _text_values(text))
    return values


def matches(number: str, values: set[float]) -> bool:
    """Whether ``number`` as written is some committed value at the precision shown."""
    digits = number.rstrip("%").replace(",", "")
    x = abs(float(digits))
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    half = 0.5 * 10 ** -decimals + 1e-9
    exact_only = decimals == 0 and x < 10
    scales = (100.0, 1.0) if number.endswith("%") else (1.0,)
    return any(abs(abs(v) * s - x) <= (1e-9 if exact_only and s == 1.0 else half)
               for v in values for s in scales)


def chapters() -> list[tuple[Path, Path]]:
    pairs = []
    for notebook in sorted((REPO / "notebooks").glob("0[3-8]_*.ipynb")):
        folders = sorted(RESULTS.glob(f"{notebook.name[:2]}_*"))
        if folders and (folders[0] / "metrics.json").exists():
            pairs.append((notebook, folders[0]))
    return pairs


def test_every_chapter_03_to_08_with_results_is_checked() -> None:
    assert [n.name[:2] for n, _ in chapters()] == ["03", "04", "05", "06", "07", "08"]


@pytest.mark.parametrize("notebook, folder", chapters(), ids=lambda p: p.name)
def test_markdown_numbers_are_committed_measurements(notebook: Path, folder: Path) -> None:
    values = committed_values(folder)
    allowed = ALLOWED[notebook.name[:2]] | COMMON
    # exercise cells (cascadekit.exercises) state tasks: their numbers are the task's own parameters,
    # and their answers are checked against the committed metrics by cascadekit.course.exercises.check
    cells = [c.source for c in nbformat.read(notebook, as_version=4).cells
             if c.cell_type == "markdown" and "exercise" not in c.metadata.get("tags", [])]
    stray = sorted({n for cell in cells for n in prose_numbers(cell) if n not in allowed and not matches(n, values)})
    assert not stray, (f"{notebook.name}: numbers in Markdown that {folder.relative_to(REPO)} does not hold; "
                       f"render them from the metrics (cascadekit.course.notebook.render) or allow-list them: {stray}")


@pytest.mark.parametrize("markdown, expected", [
    ("pass@1 rose from 0.16 to **0.26** (+0.10), 58% of groups", ["0.16", "0.26", "0.10", "58%"]),
    ("ops 3-5, op 2. lr `1e-4`, 1e-4, $A_i = 0$, pass@16, 32M tokens, A.5", ["3", "5", "2"]),
    ("# 04 · Title\n## 1 · Settings\n\n    code 51\n1,310,720 of .25", ["1,310,720", ".25"]),
])
def test_prose_numbers(markdown: str, expected: list[str]) -> None:
    assert prose_numbers(markdown) == expected


@pytest.mark.parametrize("number, found", [
    ("0.26", True), (".26", True), ("26%", True), ("-0.26", True), ("0.263", True),
    ("0.27", False), ("0.2631", False), ("26", False),
    ("1,310,720", True), ("867.7", True), ("868", True),
    ("3", False), ("4", True),
])
def test_matching_is_tolerant_on_form_and_strict_on_value(number: str, found: bool) -> None:
    assert matches(number, {0.26302, 1310720.0, 867.7, 4.0, 0.0}) is found
