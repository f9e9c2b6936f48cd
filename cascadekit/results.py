"""Committed results: metrics, figures and "paper vs this run" tables per chapter.

Toy-scale runs write under ``data/results/<chapter>/`` so a reader without the
time to train can still follow a chapter; the book's results page gathers every
``paper_vs_run.md``. Each file records the command and the code version that
produced it, so a number can always be traced back and regenerated.

This module is the kit's one writer of results: every JSON result a command
writes (a chapter's ``metrics.json``, a probe's ``result.json``, the checkpoint
table's ``rows.json``, a course run's ``summary.json``) goes through
:func:`write_result`, which puts its :func:`provenance` under ``produced_by``.
Rewriting a chapter's files from its committed metrics keeps the run's
provenance when asked (``keep_provenance``), so the regenerated
``paper_vs_run.md`` names the command that made the numbers, not the rewrite.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from cascadekit.atomic import atomic_open, atomic_write_text
from cascadekit.codeversion import REPO_DIR, code_version, git_commit
from cascadekit.formatting import fixed

RESULTS_DIR = REPO_DIR / "data" / "results"


def default_root(scale: str) -> Path:
    """Where an experiment's command line writes its results unless told otherwise.

    Only the toy scale writes the committed ``data/results``: a quick smoke run
    (or a paper-scale run on a GPU) must never overwrite the toy results the
    notebooks and the book read. Other scales write ``runs/results-<scale>``.
    """
    return RESULTS_DIR if scale == "toy" else Path("runs") / f"results-{scale}"


class ResultsRefused(ValueError):
    """A run that must not write where it was asked to (checked before the run starts)."""


def uncommitted_changes() -> list[str]:
    """Files changed or untracked outside ``data/results`` (what a committed result must not depend on)."""
    try:
        lines = subprocess.run(["git", "-C", str(REPO_DIR), "status", "--porcelain", "--untracked-files=all"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return ["(git status failed: cannot tell whether the tree is clean)"]
    paths = [line[3:].split(" -> ")[-1].strip('"') for line in lines if line.strip()]
    return [p for p in paths if not p.startswith("data/results/")]


class ResultsWriter:
    """Writes one chapter's results: checked once, before any work, then used at the end.

    Committed results (``data/results``) come only from the toy scale and a clean
    tree (changes under ``data/results`` itself are fine: that is what the run
    rewrites), so every committed number names a commit that reproduces it. A
    ``draft`` may write from a dirty tree; its provenance says ``-dirty``. The
    provenance's code version and commit are read when the writer is made, before
    the work: a run that takes an hour names the code it ran, not whatever was
    committed while it ran.
    """

    def __init__(self, chapter: str, scale: str, command: str, out: Path | None = None, draft: bool = False,
                 keep_provenance: bool = False):
        self.chapter, self.command, self.keep_provenance = chapter, command, keep_provenance
        self.root = Path(out) if out else default_root(scale)
        committed = self.root.resolve() == RESULTS_DIR.resolve()
        if committed and scale != "toy":
            raise ResultsRefused(f"only toy-scale runs write the committed {RESULTS_DIR}; pass --out for a {scale} run")
        if committed and not draft and (changes := uncommitted_changes()):
            shown = ", ".join(changes[:5]) + (f" and {len(changes) - 5} more" if len(changes) > 5 else "")
            raise ResultsRefused(f"committed results need a clean tree, but these files have uncommitted changes: "
                                 f"{shown}. Commit them first, or pass --draft (or --out elsewhere).")
        self.started = provenance(command)

    @property
    def folder(self) -> Path:
        return results_dir(self.chapter, self.root)

    def save(self, metrics: dict[str, Any], figures: Mapping[str, Figure], title: str,
             rows: Sequence[dict[str, Any]], notes: str = "") -> None:
        """``metrics.json``, each figure as PNG (then closed) and ``paper_vs_run.md``, each written atomically.

        A writer made with ``keep_provenance`` (a rewrite from committed metrics)
        keeps the metrics' own ``produced_by`` where they carry one.
        """
        if not (self.keep_provenance and metrics.get("produced_by")):
            metrics = {**metrics, "produced_by": {**self.started, "date": provenance(self.command)["date"]}}
        save_chapter_results(self.chapter, metrics, figures, title, rows, self.command, notes, self.root,
                             keep_provenance=True)


def results_dir(chapter: str, root: Path | None = None) -> Path:
    folder = (root or RESULTS_DIR) / chapter
    folder.mkdir(parents=True, exist_ok=True)
    return folder


#: An absolute scratch folder given to ``--out`` or ``--work``: a machine's path, recorded as ``$OUT`` / ``$WORK``.
_SCRATCH = re.compile(r"(--(out|work))[ =](/[^\s`\"]+)")


def portable_command(command: str) -> str:
    """``command`` with absolute ``--out``/``--work`` folders as ``$OUT``/``$WORK``: readers see no machine path,
    and the folders (scratch space and where results went) change nothing the command computes."""
    return _SCRATCH.sub(lambda m: f"{m[1]} ${m[2].upper()}", command)


def provenance(command: str) -> dict[str, str]:
    """Who made a result: the command (:func:`portable_command`), the code version, the commit and the time (UTC)."""
    return {
        "command": portable_command(command),
        "code_version": code_version(),
        "git_commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def stamped(payload: Mapping[str, Any], command: str, keep_provenance: bool = False) -> dict[str, Any]:
    """``payload`` with its provenance first, under ``produced_by``: this call's (``command``), or with
    ``keep_provenance`` the payload's own when it carries one."""
    made = payload.get("produced_by") if keep_provenance else None
    return {"produced_by": made or provenance(command), **{k: v for k, v in payload.items() if k != "produced_by"}}


def write_result(path: str | Path, payload: Mapping[str, Any], command: str, keep_provenance: bool = False) -> Path:
    """Write one JSON result (atomically) with its provenance under ``produced_by`` (:func:`stamped`)."""
    atomic_write_text(path, json.dumps(stamped(payload, command, keep_provenance), indent=2, default=str))
    return Path(path)


def save_metrics(chapter: str, metrics: dict[str, Any], command: str, root: Path | None = None,
                 keep_provenance: bool = False) -> Path:
    """Write ``metrics.json`` (atomically) with the provenance under the key ``produced_by``.

    The provenance is this call's unless ``keep_provenance`` and the metrics carry their own.
    """
    return write_result(results_dir(chapter, root) / "metrics.json", metrics, command, keep_provenance)


def load_metrics(chapter: str, root: Path | None = None) -> dict[str, Any] | None:
    """The committed metrics of a chapter, or None when there are none (or they are unreadable)."""
    path = (root or RESULTS_DIR) / chapter / "metrics.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def save_figure(chapter: str, name: str, figure: Figure, root: Path | None = None) -> Path:
    """``<name>.png``, written atomically."""
    path = results_dir(chapter, root) / f"{name}.png"
    with atomic_open(path, "wb") as fh:
        figure.savefig(fh, format="png", dpi=110, bbox_inches="tight")
    return path


def markdown_table(rows: Sequence[dict[str, Any]], digits: int = 3) -> str:
    """A Markdown table from dicts sharing keys (floats rounded)."""
    if not rows:
        return ""
    columns = list(rows[0])

    def cell(value: Any) -> str:  # a float never as a negative zero (``-0.000`` read as a drop)
        return fixed(value, digits) if isinstance(value, float) else str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def save_paper_vs_run(chapter: str, title: str, rows: Sequence[dict[str, Any]], command: str,
                      notes: str = "", root: Path | None = None, produced_by: Mapping[str, str] | None = None) -> Path:
    """Write the chapter's "paper vs this run" table as Markdown, with its provenance.

    ``produced_by`` (a metrics file's) keeps the run's provenance when the table is
    rewritten from committed metrics; by default the provenance is this call's.
    """
    made = produced_by or provenance(command)
    text = "\n\n".join(part for part in [
        f"## {title}",
        markdown_table(rows),
        notes.strip(),
        f"*Produced by `{made['command']}` (code {made['code_version']}, commit {made['git_commit']}, {made['date']}).*",
    ] if part) + "\n"
    path = results_dir(chapter, root) / "paper_vs_run.md"
    atomic_write_text(path, text)
    return path


def save_chapter_results(chapter: str, metrics: dict[str, Any], figures: Mapping[str, Figure], title: str,
                         rows: Sequence[dict[str, Any]], command: str, notes: str = "",
                         root: Path | None = None, keep_provenance: bool = False) -> None:
    """Everything an experiment commits: ``metrics.json``, each figure as PNG (then closed), the table.

    With ``keep_provenance``, metrics that carry a ``produced_by`` (read back from a
    committed ``metrics.json``) keep it in both files; otherwise both name this call.
    """
    record = stamped(metrics, command, keep_provenance)  # one provenance for both files
    save_metrics(chapter, record, command, root, keep_provenance=True)
    for name, figure in figures.items():
        save_figure(chapter, name, figure, root)
        plt.close(figure)
    save_paper_vs_run(chapter, title, rows, command, notes, root, produced_by=record["produced_by"])


def write_sample_spread(folder: Path, samples: Sequence[dict[str, Any]], kept: int) -> None:
    """``samples.jsonl``: an even spread of about ``kept`` per-sample records, for a reader to inspect."""
    with atomic_open(folder / "samples.jsonl") as fh:
        for s in samples[:: max(1, len(samples) // kept)]:
            fh.write(json.dumps(s) + "\n")
