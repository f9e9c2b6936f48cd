"""A chapter's results README leads with what the run found, copied from its ``paper_vs_run.md`` (issue 58).

The READMEs read as change logs (chapter 04's was about a refactor). Each now opens with the
findings, every number copied by :mod:`cascadekit.evaluation.readme_lead` from the committed table
(never typed), and keeps what it said before under ``## History``.
"""
from __future__ import annotations

import re

import pytest

from cascadekit.evaluation.readme_lead import HISTORY, LEAD, chapter_folders, claims_table, lead, with_lead

FOLDERS = chapter_folders()
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def test_every_chapter_readme_is_covered() -> None:
    assert {f.name[:2] for f in FOLDERS} >= {"04", "09", "10", "11", "13"}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_the_readme_leads_with_the_findings_and_keeps_its_history_below(folder) -> None:
    readme = (folder / "README.md").read_text()
    headings = [line for line in readme.splitlines() if line.startswith("## ")]
    assert headings[:2] == [LEAD, HISTORY], f"{folder.name}: sections {headings[:3]}"
    assert readme == with_lead(readme, lead(folder)), (
        f"{folder.name}/README.md: its lead is stale; run cascadekit readme-leads")


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_every_number_of_the_lead_is_in_the_committed_table(folder) -> None:
    readme = (folder / "README.md").read_text()
    section = readme[readme.index(LEAD):readme.index(HISTORY)]
    committed = (folder / "paper_vs_run.md").read_text()
    stray = {n for n in _NUMBER.findall(section) if n.lstrip("-") not in committed}
    assert not stray, f"{folder.name}: numbers in the lead that paper_vs_run.md does not hold: {sorted(stray)}"


def test_the_lead_groups_claims_by_verdict_and_keeps_a_level_table_as_rows(tmp_path) -> None:
    (tmp_path / "paper_vs_run.md").write_text(
        "## Chapter\n\n| claim | paper | this run | 95% interval | verdict | p | family | Holm |\n|---|---|---|---|---|---|---|---|\n"
        "| rises | up | 0.100 | [0.050, 0.150] | reproduced | 0.010 | primary | cannot tell (adj. p 0.060) |\n"
        "| falls | down | 0.000 | [-0.010, 0.010] | cannot tell | n/a | n/a | n/a |\n\nnotes\n\n"
        "*Produced by `cmd` (code 1, commit abc, 2026-01-01 00:00 UTC).*\n")
    text = lead(tmp_path)
    assert "* **Reproduced** (1 of 2):\n  * rises (paper: up): 0.100 [0.050, 0.150]; after Holm: cannot tell" in text
    assert "* **Cannot tell** (1 of 2):\n  * falls (paper: down): 0.000 [-0.010, 0.010]\n" in text
    assert "Contradicted" not in text and "`cmd`" in text
    old = "# Title\n\nHow it was made.\n\n## A refactor\n\nNo number changed.\n"
    new = with_lead(old, text)
    assert new.startswith("# Title\n\n" + LEAD) and new.endswith(HISTORY + "\n\nHow it was made.\n\n### A refactor\n\nNo number changed.\n")
    assert with_lead(new, text) == new
    (tmp_path / "paper_vs_run.md").write_text("| domain | mode | score |\n|---|---|---|\n| math | think | 0.5 |\n")
    assert claims_table((tmp_path / "paper_vs_run.md").read_text()) == [{"domain": "math", "mode": "think", "score": "0.5"}]
