"""The lead of a chapter's results README: what the committed run found, copied from its ``paper_vs_run.md``.

A chapter's ``data/results/<chapter>/README.md`` grew as a change log (how each run was made, what an
older one said, a refactor that changed no number); a reader opening the folder wants the findings
first. :func:`lead` writes them from the folder's ``paper_vs_run.md``, the table the chapter's own
code wrote from its ``metrics.json``, so no number in the lead is typed: each claim with its interval
and verdict, grouped by verdict (or, for a table of levels without verdicts, each row as it stands).
:func:`with_lead` puts that section first and keeps everything the README said before under
``## History``. Run ``cascadekit readme-leads`` after a chapter's results change;
``tests/test_readme_leads.py`` fails while a lead is missing or stale.
"""
from __future__ import annotations

from pathlib import Path

from cascadekit.atomic import atomic_write_text
from cascadekit.results import RESULTS_DIR

LEAD = "## What the run found"
HISTORY = "## History"
#: Columns that name a row rather than measure it (the first table of chapters 03 and 08 has no claim column).
LABELS = ("claim", "quantity", "domain", "mode")
VERDICTS = ("reproduced", "contradicted", "cannot tell")


def claims_table(paper_vs_run: str) -> list[dict[str, str]]:
    """The first Markdown table of a ``paper_vs_run.md``, one dict of cells per row."""
    lines = paper_vs_run.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))

    def cells(line: str) -> list[str]:
        return [cell.strip().replace("\\|", "|") for cell in line.strip().strip("|").split(" | ")]

    header = cells(lines[start])
    return [dict(zip(header, cells(line))) for line in lines[start + 2:end]]


def _claim_line(row: dict[str, str]) -> str:
    holm = row.get("Holm", "n/a")
    after = "" if holm == "n/a" or holm.startswith(row["verdict"]) else f"; after Holm: {holm}"
    return f"  * {row['claim']} (paper: {row['paper']}): {row['this run']} {row['95% interval']}{after}"


def _row_line(row: dict[str, str]) -> str:
    label = ", ".join(row[c] for c in LABELS if c in row)
    return "* " + (f"{label}: " if label else "") + "; ".join(f"{c} {v}" for c, v in row.items() if c not in LABELS and v)


def lead(folder: Path) -> str:
    """The ``## What the run found`` section for a results folder, from its ``paper_vs_run.md``."""
    text = (folder / "paper_vs_run.md").read_text()
    rows = claims_table(text)
    made = text.strip().splitlines()[-1].strip("*").removeprefix("Produced by ").rstrip(".")
    parts = [LEAD, "",
             f"Copied by `cascadekit readme-leads` from this folder's `paper_vs_run.md`, written "
             f"by {made}: no number here is typed, and the notes and every other table are there."]
    if rows and "verdict" in rows[0]:
        parts += ["", "Each claim of the paper beside this run's figure, its 95% interval, and the verdict read "
                  "from the interval:", ""]
        for verdict in VERDICTS:
            group = [r for r in rows if r["verdict"] == verdict]
            if group:
                parts.append(f"* **{verdict.capitalize()}** ({len(group)} of {len(rows)}):")
                parts += [_claim_line(r) for r in group]
    else:
        parts += [""] + [_row_line(r) for r in rows]
    return "\n".join(parts) + "\n"


def with_lead(readme: str, section: str) -> str:
    """``readme`` with ``section`` first under its title and what it said before under ``## History``.

    A README that already has both keeps its history as it is and gets the new lead; one without
    them gets its old body, headings one level down, as its history.
    """
    title, _, body = readme.partition("\n")
    if LEAD in body and HISTORY in body:
        history = body[body.index(HISTORY) + len(HISTORY):]
    else:
        history = "\n".join("#" + line if line.startswith("## ") else line for line in body.splitlines())
    return f"{title}\n\n{section}\n{HISTORY}\n\n{history.strip()}\n"


def chapter_folders(root: Path = RESULTS_DIR) -> list[Path]:
    """Every chapter results folder with a README and a ``paper_vs_run.md``."""
    return [f for f in sorted(root.glob("[0-9][0-9]_*")) if (f / "README.md").is_file()
            and (f / "paper_vs_run.md").is_file()]


def rewrite_leads(check: bool = False) -> list[str]:
    """Rewrite each chapter README's lead in place (``check``: only find them); the folders whose lead was stale."""
    stale = []
    for folder in chapter_folders():
        path = folder / "README.md"
        old = path.read_text()
        new = with_lead(old, lead(folder))
        if new != old:
            stale.append(folder.name)
            if not check:
                atomic_write_text(path, new)
    return stale
