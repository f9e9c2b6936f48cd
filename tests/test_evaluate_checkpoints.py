"""evaluate-checkpoints: two local checkpoints (one with a released model's own tokenizer) into one stage table."""
from __future__ import annotations

import json

import pytest

from cascadekit.training.chat_base import build_chat_tokenizer
from cascadekit.cli import main
from cascadekit.evaluation.checkpoints import evaluate_checkpoints, parse_checkpoints
from cascadekit.evaluation.stage_table import suite_records
from cascadekit.engine.models import build_model
from cascadekit.profiles import load_profile
from cascadekit.engine.runtime import save_checkpoint

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
    written = json.loads((tmp_path / "rows.json").read_text())  # the one results envelope
    assert written["rows"] == rows and written["produced_by"]["command"] == "cascadekit evaluate-checkpoints"
    assert [c["stage"] for c in written["checkpoints"]] == ["SFT", "RLHF"]


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


# --- hostile or broken checkpoints: one line, exit 2, nothing run ---------------------------

class _Payload:
    """Unpickled, this would run a shell command that leaves ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def _hostile(kind, good, folder, marker):
    """A checkpoint folder (a copy of ``good``) broken or armed the way ``kind`` says."""
    import shutil

    import torch

    if kind == "empty":
        folder.mkdir()
        return folder
    shutil.copytree(good, folder)
    weights = folder / "model.safetensors"
    if kind == "pickle":
        weights.unlink()
        torch.save({"weight": _Payload(marker)}, folder / "pytorch_model.bin")
    elif kind == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif kind == "remote code":
        config = json.loads((folder / "config.json").read_text())
        config.update(model_type="evilmodel",  # a type only the folder's own code could load
                      auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"})
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return folder


@pytest.fixture
def open_stdin(monkeypatch):
    """stdin an open pipe that never sends anything: a "[y/N]" prompt would wait on it."""
    import os
    import sys

    read, write = os.pipe()
    stdin = os.fdopen(read)
    monkeypatch.setattr(sys, "stdin", stdin)
    yield
    stdin.close()
    os.close(write)


@pytest.mark.parametrize("kind, needle", [
    ("hub", "SFT: checkpoint 'nosuchorg/nosuchmodel' is not a local folder and not in the Hugging Face cache"),
    ("empty", "is not a checkpoint folder (it has no config.json or adapter_config.json)"),
    ("pickle", "its weights are a pickle that is not plain tensors (refused: loading it could run code)"),
    ("truncated", "cannot be loaded: "),
    ("remote code", "config asks to run code shipped with the checkpoint (auto_map)"),
])
def test_a_bad_checkpoint_is_one_line_and_exit_2(kind, needle, checkpoints, tmp_path, monkeypatch, open_stdin,
                                                capsys):
    monkeypatch.delenv("CASCADEKIT_ALLOW_DOWNLOAD", raising=False)
    marker = tmp_path / "ran"
    source = "nosuchorg/nosuchmodel" if kind == "hub" else _hostile(kind, checkpoints[0], tmp_path / "ck", marker)
    out = tmp_path / "out"
    assert main(["evaluate-checkpoints", f"SFT={source}", "--scale", "smoke", "--set", "sft.max_new_tokens=2",
                 "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("cascadekit evaluate-checkpoints: error: ") and needle in captured.err, captured.err
    assert captured.err.count("\n") == 1 and "[y/N]" not in captured.out + captured.err
    assert not marker.exists() and not out.exists()  # nothing ran, nothing written


def test_the_loader_itself_never_runs_or_asks_for_a_checkpoints_code(checkpoints, tmp_path, open_stdin, capsys):
    from cascadekit.engine.runtime import CheckpointUnloadable, load_model

    marker = tmp_path / "ran"
    folder = _hostile("remote code", checkpoints[0], tmp_path / "ck", marker)
    with pytest.raises(CheckpointUnloadable, match="cannot be loaded: .*custom code") as caught:
        load_model(folder)
    assert "\n" not in str(caught.value) and not marker.exists()
    assert "[y/N]" not in "".join(capsys.readouterr())


def test_sources_are_checked_before_any_model_loads(checkpoints, tmp_path):
    from cascadekit.evaluation.checkpoints import check_sources

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")  # a LoRA checkpoint: its base is named inside
    assert check_sources([("SFT", str(checkpoints[0])), ("RLHF", str(adapter))]) == [checkpoints[0], adapter]
    for config, needle in [("[1, 2]", "is a JSON list, not an object"), ("{", "is not JSON"),
                           (" " * (2 << 20), "is larger than 1,048,576 bytes")]:
        (adapter / "adapter_config.json").write_text(config)
        with pytest.raises(ValueError, match=f"^RLHF: .*{needle}"):
            check_sources([("SFT", str(checkpoints[0])), ("RLHF", str(adapter))])
