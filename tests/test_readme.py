"""The README's quickstart is exactly two commands, and CI runs the second one verbatim."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the Quickstart section needs a bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quickstart_is_two_commands() -> None:
    main_job, tests = quickstart_commands()
    assert "cascadekit run" in main_job and "pytest" in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert quickstart_commands()[1] in ci
