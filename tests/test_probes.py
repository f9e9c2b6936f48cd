"""``cascadekit probe NAME``: chapter 04's probes at smoke scale, through the command line."""
from __future__ import annotations

import json

import pytest

from cascadekit.cli import main
from cascadekit.chapters.probes import PROBES

SMOKE = ["rl.samples=4", "rl.prompts_per_step=2", "evaluation.problems_per_op=1", "evaluation.samples=2",
         "evaluation.max_new_tokens=16"]
HEADER = {"probe", "produced_by", "scale", "seed", "overrides"}
ARM = {"bands", "base_stage", "edge_stage", "prompts", "steps"}
KEYS = {
    "edge-heldout": HEADER | ARM | {"samples", "held_out_problems", "train_reward_last_quarter", "rows"},
    "edge-samples": HEADER | ARM | {"op", "problems", "samples", "correct", "answer_correct", "failure_reasons",
                                    "examples"},
    "edge-unseen": HEADER | ARM | {"samples", "seed_offset", "problems", "rows"},
    "hard-pass128": HEADER | {"samples", "rows"},
}


def test_every_probe_has_its_keys_listed():
    assert set(PROBES) == set(KEYS)


@pytest.mark.parametrize("name", list(KEYS))
def test_probe_runs_at_smoke_scale_and_writes_json_and_table(name, tmp_path, capsys):
    out = tmp_path / name
    argv = ["probe", name, "--scale", "smoke", "--threads", "1", "--out", str(out),
            *[a for s in SMOKE for a in ("--set", s)]]
    assert main(argv) == 0
    result = json.loads((out / "result.json").read_text())
    assert set(result) == KEYS[name]
    assert result["probe"] == name and result["scale"] == "smoke"
    assert result["produced_by"]["command"].startswith(f"cascadekit probe {name} --scale smoke")
    table = (out / "output.txt").read_text()
    assert table.strip() and table.strip() in capsys.readouterr().out
    if name == "edge-heldout":
        assert [(r["model"], r["split"], r["temperature"]) for r in result["rows"]] == [
            ("base", "eval", 0.7), ("base", "eval", 1.0), ("base", "rl", 1.0),
            ("edge RL", "eval", 0.7), ("edge RL", "eval", 1.0), ("edge RL", "rl", 1.0), ("edge RL", "rl", 1.0)]
        assert result["prompts"] == 4 and result["steps"] == 2
        assert all({"op", "problems", "pass@1", "pass@2", "answer_pass@1"} <= set(r) for row in result["rows"]
                   for r in row["by_op"])
    if name == "edge-unseen":
        ops = range(result["bands"]["edge"][0], result["bands"]["edge"][1] + 1)
        assert result["problems"] == 48 * len(ops) and result["samples"] == 8
        assert [row["model"] for row in result["rows"]] == ["base", "edge RL"]
        assert all(r["problems"] == 48 and "pass@8" in r for row in result["rows"] for r in row["by_op"])
    if name == "hard-pass128":
        assert {r["tokens"] for r in result["rows"]} == {20000, 40000}
        assert all(r["samples"] == 128 * r["problems"] and "pass@128" in r for r in result["rows"])
    if name == "edge-samples":
        assert result["samples"] == 4 and result["op"] == result["bands"]["edge"][0]


def test_unknown_probe_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["probe", "nope", "--scale", "smoke", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown probe 'nope'" in err and "edge-heldout" in err
    assert not (tmp_path / "x").exists()


def test_bad_override_is_one_line_and_exit_2(capsys):
    assert main(["probe", "edge-heldout", "--scale", "smoke", "--set", "rl.lr=nan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rl.lr" in err
