"""Released data loaders on hand-written fixtures that copy the released schemas (no downloads)."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cascadekit.engine import runtime
from cascadekit.chat import render
from cascadekit.training.released_data import MissingField, released_sets, stream_records, to_record

FIXTURES = Path(__file__).parent / "fixtures" / "released"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a test reached for the network: {args[:2]}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv(runtime.DOWNLOAD_ENV, raising=False)


def records(name: str, domain: str | None = None, **kwargs) -> list[dict]:
    return list(stream_records(name, domain, FIXTURES / name, **kwargs))


def user(record: dict) -> str:
    return [m for m in record["messages"] if m["role"] == "user"][-1]["content"]


def test_every_released_set_has_a_fixture():
    assert sorted(p.name for p in FIXTURES.iterdir()) == sorted(n for n in released_sets() if n != "interplay-context")


def test_sft_rows_keep_their_turns_and_get_their_mode():
    think, no_think = records("cascade-sft-stage1", "math")
    assert think["think"] and user(think).endswith("/think") and not no_think["think"]
    assert user(no_think) == "What is 7 times 6? /no_think"
    assert think["domain"] == "math" and think["source"].startswith("nvidia/Nemotron-Cascade-SFT-Stage-1:")
    # the kit's template renders the released reasoning inside the think block
    assert "<think>\n12 + 30 = 42.\n</think>" in render(think["messages"])


def test_sft_tool_rows_carry_their_tools():
    (record,) = records("cascade-sft-stage2", "tools")
    assert not record["think"] and json.loads(record["tools"])[0]["function"]["name"] == "add"
    assert [m["role"] for m in record["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert "<tool_call>" in render(record["messages"], json.loads(record["tools"]))


def test_sft_swe_rows_use_the_thinking_column():
    (record,) = records("cascade-sft-swe")
    assert record["domain"] == "swe" and record["think"] and user(record).endswith("/think")


def test_rl_rows_become_prompts_with_gold():
    math = records("cascade-rl-math")
    assert [r["gold"]["answer"] for r in math] == ["2", "\\frac{5}{6}"] and all(r["think"] for r in math)
    assert [m["role"] for m in math[0]["messages"]] == ["user"]
    ifrl = records("cascade-rl-if")
    assert not ifrl[0]["think"] and user(ifrl[0]).endswith("/no_think")  # the unified model's IF-RL mode
    assert ifrl[1]["gold"] == {"instruction_id_list": ["detectable_format:number_bullet_lists"],
                               "kwargs": [{"num_bullets": 3}]}
    (swe,) = records("cascade-rl-swe")  # relevant_file_contents: a list of {file_path, content}, shown in the prompt
    assert swe["gold"]["patch"].startswith("--- a/utils.py")
    assert swe["gold"]["context"] == {"utils.py": "def last(xs):\n    return xs[len(xs)]\n"}
    assert user(swe) == ("last() raises IndexError on a non-empty list.\n\nutils.py\n```\ndef last(xs):\n"
                         "    return xs[len(xs)]\n``` /think")
    code = records("cascade-rl-code")  # tests as {input, output} rows, or APPS/TACO's input_output JSON
    assert [r["gold"]["tests"] for r in code] == [[["1 2\n", "3\n"], ["10 -4\n", "6\n"]],
                                                  [["abc\n", "cba\n"], ["x\n", "x\n"]]]
    assert all(r["domain"] == "code" and r["think"] for r in code)
    assert [user(r) for r in records("cascade-rl-rlhf", limit=1)] == ["Explain why the sky is blue to a ten-year-old. /think"]


def test_interplay_rows_become_math_records():
    (record,) = records("interplay-composition")
    assert record["gold"]["answer"] == "5" and record["gold"]["op"] == 2 and record["gold"]["template"] == "zoo"
    answer = record["messages"][-1]
    assert answer["content"] == "\\boxed{5}" and answer["reasoning_content"].endswith("= 5.")
    assert user(record).startswith("The number of adult owls") and user(record).endswith("Maple Zoo? /think")


def test_a_conversation_prompt_uses_its_last_user_turn():
    spec = released_sets()["cascade-rl-rlhf"]
    record = to_record(spec, {"prompt": [{"role": "user", "content": "Hi."}]}, "general", think=False)
    assert user(record) == "Hi. /no_think"


@pytest.mark.parametrize("name, row, needle", [
    ("cascade-rl-math", {"question_text": "1+1?"}, "no field for 'prompt'; tried ['problem', 'question', 'prompt'], "
                                                   "the row has ['question_text']"),
    ("cascade-rl-math", {"problem": "1+1?"}, "no field for 'answer'"),
    ("cascade-rl-if", {"prompt": "Be brief.", "kwargs": [{}]}, "no field for 'instruction_id_list'"),
    ("cascade-sft-stage1", {"category": "math"}, "no field for 'messages'"),
    ("cascade-sft-stage1", {"messages": [{"role": "user"}]}, "messages[0] needs 'role' and string 'content'"),
    ("cascade-sft-stage1", {"messages": [{"role": "assistant", "content": "4"}]}, "no user turn"),
    ("interplay-composition", {"problem": "p", "question": "q", "solution": "no answer", "op": 2}, "no 'Answer:' line"),
    ("cascade-rl-rlhf", {"prompt": "  "}, "field 'prompt' must be non-empty text"),
    ("cascade-rl-code", {"question": "q", "tests": []}, "field 'tests' must be a non-empty list"),
    ("cascade-rl-code", {"question": "q", "tests": [{"input": "1"}]}, "tests[0] needs string 'input' and 'output'"),
    ("cascade-rl-code", {"question": "q", "tests": "{oops"}, "field 'tests' is not JSON"),
    ("cascade-rl-swe", {"problem_statement": "p", "patch": "d", "relevant_file_contents": [{"path": "a.py"}]},
     "relevant_file_contents[0] needs string 'file_path' and 'content'"),
    ("cascade-rl-swe", {"problem_statement": "p", "patch": "d", "relevant_file_contents": "a.py"},
     "field 'context' must be a list of {file_path, content}"),
])
def test_a_missing_field_is_one_clear_error(name, row, needle):
    with pytest.raises(MissingField) as info:
        to_record(released_sets()[name], row, next(iter(released_sets()[name].files)), where="row 7")
    assert needle in str(info.value) and f"{name} (row 7)" in str(info.value)


def test_a_bad_row_in_a_file_names_the_file_and_row(tmp_path):
    (tmp_path / "math.json").write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n"
                                        + json.dumps({"problem": "2+2?", "solution": "4"}) + "\n")
    stream = stream_records("cascade-rl-math", source=tmp_path)
    assert next(stream)["gold"] == {"answer": "2"}
    with pytest.raises(MissingField, match=r"cascade-rl-math \(.* row 1\): no field for 'answer'"):
        next(stream)


def test_names_domains_and_the_hub_are_checked(tmp_path):
    with pytest.raises(ValueError, match="unknown released set 'cascade-rl-chess'"):
        next(stream_records("cascade-rl-chess", source=tmp_path))
    with pytest.raises(ValueError, match="several domains"):
        next(stream_records("cascade-sft-stage2", source=tmp_path))
    with pytest.raises(ValueError, match="no 'swe' data"):
        next(stream_records("cascade-sft-stage1", "swe", source=tmp_path))
    with pytest.raises(FileNotFoundError, match="no data files"):
        next(stream_records("cascade-rl-math", source=tmp_path))
    with pytest.raises(runtime.DownloadNotAllowed, match="nvidia/Nemotron-Cascade-RL-Math.*CASCADEKIT_ALLOW_DOWNLOAD"):
        next(stream_records("cascade-rl-math"))
