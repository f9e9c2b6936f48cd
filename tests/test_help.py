"""``cascadekit --help`` lists every verb in plain text (issue 37)."""
from __future__ import annotations

import re

import pytest

from cascadekit.cli import build_parser, main


def test_help_lists_every_verb_in_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    verbs = list(build_parser()._subparsers._group_actions[0].choices)  # the verbs as argparse holds them
    assert {"cascade", "times", "ship", "book", "env"} <= set(verbs)
    description = " ".join(text.split("Commands:", 1)[1].split(".", 1)[0].split())
    assert [v.strip() for v in description.split(",")] == verbs
    for verb in verbs:
        assert re.search(rf"^\s+{re.escape(verb)}\s", text, re.M), f"{verb} has no help line"
    assert "``" not in text and ":func:" not in text and ":mod:" not in text  # no reST markup


def test_help_groups_the_verbs_learn_run_inspect_maintain(capsys: pytest.CaptureFixture[str]) -> None:
    """17 verbs in a developer's order was what a newcomer met first (issue 58): each verb under one heading."""
    from cascadekit.cli import COMMANDS, GROUPS

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    headings = [line.split(" (")[0] for line in text.splitlines() if re.match(r"^[a-z]+ \(.*\):$", line)]
    assert headings == list(GROUPS) == ["learn", "run", "inspect", "maintain"]
    sections = dict(zip(headings, re.split(r"^[a-z]+ \(.*\):$", text, flags=re.M)[1:]))
    for verb, command in COMMANDS.items():
        assert [h for h in headings if re.search(rf"^  {re.escape(verb)} ", sections[h], re.M)] == [command.group]
    assert {"run", "chat"} <= {v for v, c in COMMANDS.items() if c.group == "learn"}
