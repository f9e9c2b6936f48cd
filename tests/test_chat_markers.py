"""Chat markers inside a program are the program's (issue 55 item 1): the code verifier's extraction."""
from __future__ import annotations

import pytest

from cascadekit.verify.code import extract_code

PROGRAM = "END = '<|im_end|>'\nTHINK = ('<think>', '</think>')\n\n\ndef f():\n    return END\n"


@pytest.mark.parametrize("turn", [
    f"<think>\nuse a constant\n</think>\n\n```python\n{PROGRAM}```<|im_end|>",
    f"```python\n{PROGRAM}```\n",  # a completion after a pre-filled empty think block
    f"<think>\n</think>\n\n{PROGRAM}<|im_end|>\n",  # a bare program, the end of the turn after it
])
def test_a_program_holding_chat_markers_is_extracted_whole(turn: str) -> None:
    assert extract_code(turn).strip() == PROGRAM.strip()


def test_a_think_block_left_open_has_no_program() -> None:
    assert extract_code(f"<think>\n```python\n{PROGRAM}```") is None
