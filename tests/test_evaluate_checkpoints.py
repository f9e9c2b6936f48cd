"""evaluate-checkpoints: two local checkpoints (one with a released model's own tokenizer) into one stage table."""
from __future__ import annotations

import json

import pytest

from cascadekit.base_model import build_chat_tokenizer
from cascadekit.cli import main
from cascadekit.evaluation.checkpoints import evaluate_checkpoints, parse_checkpoints
from cascadekit.evaluation.stage_table import suite_records
from cascadekit.models import build_model
from cascadekit.profiles import load_profile
from cascadekit.runtime import save_checkpoint

PROFILE = load_profile("smoke", {"sft.max_new_tokens": 4})


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    tokenizer = build_chat_tokenizer(PROFILE)
    folders = []
    for seed in (0, 1):
        folder = tmp_path_factory.mktemp("ck") / f"stage-{seed}"
        save_checkpoint(build_model(PROFILE.model, tokenizer, seed=seed), tokenizer, folder)
        folders.append(folder)
    return folders


def test_two_checkpoints_make_one_table(checkpoints, tmp_path):
    records = suite_records(PROFILE, ["math", "code"])
    rows = evaluate_checkpoints([("SFT", str(checkpoints[0])), ("RLHF", str(checkpoints[1]))], PROFILE, tmp_path,
                                records)
    assert [(r["stage"], r["domain"], r["mode"]) for r in rows][:2] == [("SFT", "math", "think"), ("SFT", "math", "no_think")]
    assert {r["stage"] for r in rows} == {"SFT", "RLHF"} and len(rows) == 8
    table = (tmp_path / "stage_table.md").read_text()
    assert "generation: transformers (greedy)" in table and "| RLHF | math (AIME 2025) |" in table
    assert "paper final (cascade)" in table
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * len(records) and samples[0]["source"] == str(checkpoints[0])


def test_the_command_line(checkpoints, tmp_path, capsys):
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in suite_records(PROFILE, ["math"])[:2]))
    assert main(["evaluate-checkpoints", f"SFT={checkpoints[0]}", "--scale", "smoke", "--set", "sft.max_new_tokens=4",
                 "--records", str(records), "--out", str(tmp_path / "out")]) == 0
    assert "| SFT | math (AIME 2025) |" in capsys.readouterr().out
    records.write_text('{"domain": "math"}\n')
    assert main(["evaluate-checkpoints", f"SFT={checkpoints[0]}", "--records", str(records),
                 "--out", str(tmp_path / "bad")]) == 2
    assert "records.jsonl:1: task record field 'think'" in capsys.readouterr().err


@pytest.mark.parametrize("pairs, needle", [
    (["SFT"], "not of the form STAGE=FOLDER_OR_HUB_NAME"),
    (["SFT=a", "SFT=b"], "stage 'SFT' is named twice"),
    ([], "name at least one checkpoint"),
])
def test_bad_checkpoint_lists(pairs, needle):
    with pytest.raises(ValueError, match=needle):
        parse_checkpoints(pairs)


def test_a_missing_checkpoint_is_one_error(tmp_path, capsys):
    assert main(["evaluate-checkpoints", f"SFT={tmp_path / 'nowhere'}", "--scale", "smoke",
                 "--out", str(tmp_path / "o")]) == 2
    assert "no checkpoint folder at" in capsys.readouterr().err
