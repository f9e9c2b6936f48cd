"""Bad input at the edges: every argument checked before work, one error line, exit status 2.

Each case is one from the security issue: a command that used to be killed at
24 GB, run unbounded, or end in a traceback (RecursionError, AttributeError,
OverflowError), or a value that was silently coerced.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.cli import MAX_LINE_BYTES, main
from cascadekit.world import generate_problem

_MEMORY_LIMIT = 2 << 30  # the old `--ops 2-1000000000` needed about 24 GB


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real command line in a child with a 2 GB address-space limit and a time limit."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT, _MEMORY_LIMIT))

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "cascadekit", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=60, preexec_fn=limit, env=env)


@pytest.mark.parametrize("argv, needle", [
    (["data", "--ops", "2-1000000000", "--out", "x.jsonl"],
     "cascadekit data: error: argument --ops: op range '2-1000000000' out of bounds: need 2 <= lo <= hi <= 30"),
    (["data", "--count", "1000000000000", "--out", "x.jsonl"],
     "cascadekit data: error: argument --count: '1000000000000' is not an integer from 0 to 10,000,000"),
    (["run", "--set", "model.hidden=inf"],
     "cascadekit run: error: model.hidden='inf': expected an integer"),
])
def test_issue_commands_fail_fast_in_bounded_memory(argv: list[str], needle: str, tmp_path: Path) -> None:
    done = _cli(*argv, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(needle) and done.stderr.count("\n") == 1, done.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, needle", [
    (["data", "--ops", "4-2"], "op range '4-2' out of bounds"),
    (["data", "--ops", "0-5"], "op range '0-5' out of bounds"),
    (["data", "--ops", "31"], "op range '31' out of bounds"),
    (["data", "--ops", "2-" + "9" * 5000], "bad op list"),
    (["data", "--count", "-5"], "--count: '-5' is not an integer"),
    (["data", "--count", "1e3"], "--count: '1e3' is not an integer"),
    (["data", "--seed", "0.5"], "--seed: '0.5' is not an integer"),
    (["data", "--contexts", "A,Q"], "unknown context 'Q'"),
    (["data", "--split", "train"], "invalid choice: 'train'"),
    (["data", "--style", "pretty"], "invalid choice: 'pretty'"),
    (["run", "--set", "model.hidden=1.5"], "model.hidden=1.5: expected an integer"),
    (["run", "--set", 'world.contexts="AB"'], "world.contexts='AB': expected a list of strings"),
    (["run", "--set", "rl.use_lora=1"], "rl.use_lora=1: expected true or false"),
    (["run", "--set", "rl.lr=NaN"], "rl.lr=nan: expected a finite number"),
    (["run", "--set", "pretrain.batch_size=-4"], "pretrain.batch_size=-4: must be > 0"),
    (["run", "--set", "world.ops_edge=[7, 6]"], "world.ops_edge=[7, 6]: must be an op range"),
    (["run", "--set", "world.ops_hard=[8, 99]"], "world.ops_hard=[8, 99]: must be an op range"),
    (["run", "--set", "device=gpu"], "device='gpu': must be one of cpu, cuda"),
    (["run", "--set", "dtype=fp8"], "dtype='fp8': must be one of float32, bfloat16"),
    (["run", "--set", "world.rendering=fancy"], "world.rendering='fancy': must be one of"),
    (["run", "--set", "model.architecture=llama"], "model.architecture='llama': must be one of"),
    (["run", "--only", "7,77"], "unknown chapter(s) ['77']"),
    (["run", "--scale", "huge"], "unknown scale profile 'huge'"),
])
def test_every_bad_argument_is_one_line_and_exit_2(argv: list[str], needle: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    if argv[0] == "data":
        argv = [*argv, "--out", "x.jsonl"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"cascadekit {argv[0]}: error: ") and needle in captured.err, captured.err
    assert captured.err.count("\n") == 1 and captured.out == "" and not list(tmp_path.iterdir())


# --- verify: bounded lines, bounded numbers, every malformed line a clear error ------------

def _gold() -> dict:
    return generate_problem(3, "A", seed=0).to_dict()


@pytest.mark.parametrize("line, needle", [
    (b"[" * 200_000, "in.jsonl:2: not JSON (nested too deeply)"),
    (b'{"gold": {"op": ' + b"9" * 5000 + b'}, "output": "x"}', "in.jsonl:2: not JSON (Exceeds the limit"),
    (b'{"gold": 1, "output": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}', "in.jsonl:2: line longer than 1,048,576 bytes"),
    (b'{"gold": {}, "output": "\xff\xfe"}', "in.jsonl:2: not UTF-8 text"),
    (b'{"gold": {}, "output": ' + b"[" * 50 + b"]" * 50 + b"}", "in.jsonl:2: 'output' must be a string"),
    (b'{"output": "x"}', "in.jsonl:2: each line needs 'gold'"),
    (b'{"gold": {"op": Infinity}, "output": "x"}', "in.jsonl:2: record 2: malformed gold problem"),
    (b"\x00\x00\x00", "in.jsonl:2: not JSON"),
])
def test_verify_turns_every_malformed_line_into_a_clear_error(line: bytes, needle: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps({"gold": _gold(), "output": "Answer: 1"}).encode()
    source = tmp_path / "in.jsonl"
    source.write_bytes(good + b"\n" + line + b"\n")
    out = tmp_path / "verdicts.jsonl"
    out.write_text("previous verdicts\n")
    assert main(["verify", str(source), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cascadekit verify: error: ") and needle in err and err.count("\n") == 1, err[:300]
    assert out.read_text() == "previous verdicts\n"  # a failed verify leaves the old output whole


def test_verify_judges_hostile_outputs_instead_of_crashing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = ["[" * 200_000, "Answer: " + "9" * 5000, "\x00" * 100, "\ud800 Define \udfff as x; so x = 1",
               "Define x as a; so a = " + "(" * 100_000, "Define x as a; so a = 1. " * 30_000]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"gold": _gold(), "output": o}) + "\n" for o in outputs))
    out = tmp_path / "verdicts.jsonl"
    assert main(["verify", str(source), "--out", str(out)]) == 0
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(verdicts) == len(outputs)
    assert all(not v["correct"] and v["reason"].startswith("missing: ") for v in verdicts)
    assert f"process-verified correct: 0/{len(outputs)}" in capsys.readouterr().out


# --- the other verifiers never raise on arbitrary model text ------------------------------

_TEXT = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=200),
    st.lists(st.sampled_from(["\\boxed{", "}", "{", "</think>", "<think>", "<tool_call>", "</tool_call>",
                              '{"name": "f", "arguments": {"x": ', "9" * 400, "1e999", "NaN", "[" * 50,
                              "]", ",", "-", "* ", "\n", "Section 1", "```", " ", "\x00", "\ud800", '"']),
             max_size=40).map("".join),
)


@given(text=_TEXT)
@settings(max_examples=150, deadline=None)
def test_boxed_instructions_and_tools_verifiers_never_raise(text: str) -> None:
    from cascadekit.verify.boxed import verify_boxed
    from cascadekit.verify.instructions import CONSTRAINT_TYPES, constraints_from_json, sample_constraints, \
        verify_instructions
    from cascadekit.verify.tools import verify_trajectory

    boxed = verify_boxed(text, 5)
    assert boxed.reason and boxed.correct == (boxed.reason == "correct")
    constraints = sample_constraints(len(text), k=3) + constraints_from_json(json.dumps(
        [{"kind": "bullet_count", "n": 2}, {"kind": "json_format"}, {"kind": "section_count", "n": 2}]))
    verdict = verify_instructions(text, constraints)
    assert verdict.reason and len(verdict.per_constraint) == len(constraints) and CONSTRAINT_TYPES
    tools = verify_trajectory(text, 5, [5])
    assert tools.reason and (not tools.correct or "5" in text)


@pytest.mark.parametrize("text", [
    "\\boxed{" * 500_000, "\\boxed{" + "1" * 100_000 + "}", "a" + " " * 1_000_000 + "b```",
    "\n" * 1_000_000 + "* x", '<tool_call>{"name": "f", "arguments": {"x": ' + "9" * 4000 + "}}</tool_call>",
    '<tool_call>{"name": "f", "arguments": {"x": ' + "[" * 5000 + "]" * 5000 + "}}</tool_call>",
    "<tool_call>" * 200_000, "x" * 10_000_000,
])
def test_verifiers_on_huge_hostile_text_give_verdicts(text: str) -> None:
    from cascadekit.verify.boxed import verify_boxed
    from cascadekit.verify.instructions import BulletCount, JsonFormat, verify_instructions
    from cascadekit.verify.tools import verify_trajectory

    assert not verify_boxed(text, 1).correct
    verdict = verify_instructions(text, [BulletCount(1), JsonFormat()])
    assert not verdict.strict_all or text.startswith("\n")  # one bullet: "* x"
    assert not verify_trajectory(text, 1, [1]).correct
