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
    description = text.split("Commands:", 1)[1].split(".", 1)[0]
    assert [v.strip() for v in description.split(",")] == verbs
    for verb in verbs:
        assert re.search(rf"^\s+{re.escape(verb)}\s", text, re.M), f"{verb} has no help line"
    assert "``" not in text and ":func:" not in text and ":mod:" not in text  # no reST markup
