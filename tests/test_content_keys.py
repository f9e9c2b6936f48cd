"""Stage keys hash their upstream's content and their builder's recipe; shipped entries under older keys are aliased.

Other weights under an upstream stage's key must change every key below it (issue 32: with keys of keys, a
cached stage table reported tools 0.984 for a model scoring 0.000), a recipe bump must change its module's keys,
and ``data/checkpoints/aliases.json`` must find a shipped entry under its old folder and refuse a damaged one.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascadekit import artifacts
from cascadekit.artifacts import CorruptArtifact, get_or_build, write_aliases
from cascadekit.chapters import resolve
from cascadekit.chapters.cascade import if_rl_stage
from cascadekit.evaluation import stage_table
from cascadekit.rewards import verifier_reward
from cascadekit.stages import (
    Stage, StageOutput, content_id, legacy_key, rekey_cached, run_stage, stage_key,
)
from cascadekit.training import pipeline, sft


class Captured(Exception):
    """Raised by a stand-in ``run_stage`` to hand back the stage it was asked to run."""

    def __init__(self, stage: Stage):
        self.stage = stage


def _capture(stage: Stage) -> StageOutput:
    raise Captured(stage)


def _key_of(ask) -> str:
    """The key of the stage ``ask()`` would run, without running it."""
    with pytest.raises(Captured) as caught:
        ask()
    return caught.value.stage.key


def _entry(kind: str, key: str, files: dict[str, str]) -> StageOutput:
    """A finished cache entry ``kind/key`` holding ``files``."""
    def build(folder: Path) -> None:
        for name, text in files.items():
            (folder / name).write_text(text)
    return StageOutput(get_or_build(kind, key, build), key)


def _fake_run_stage(stage: Stage) -> StageOutput:
    """A stage "trained": its checkpoint is its key, so a new key is new content (as a retrain's would be)."""
    return _entry(stage.kind, stage.key, {"model.safetensors": stage.key, "stage.json": "{}"})


def _downstream_keys(weights: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The keys of SFT stage 2, IF-RL and SFT 2's stage table when SFT stage 1's key holds ``weights``."""
    profile = resolve("14", "smoke").profile
    first = _entry("sft", "stage-one-key", {"model.safetensors": weights, "stage.json": "{}"})
    monkeypatch.setattr(sft, "run_stage", _capture)
    second_key = _key_of(lambda: sft.sft_stage(first, profile, 2))
    monkeypatch.setattr(sft, "run_stage", _fake_run_stage)
    second = sft.sft_stage(first, profile, 2)
    monkeypatch.setattr(pipeline, "run_stage", _capture)
    monkeypatch.setattr(stage_table, "run_stage", _capture)
    return {"sft 2": second_key,
            "if-rl": _key_of(lambda: if_rl_stage(second, profile, False, verifier_reward, Path("unused"))),
            "stage table": _key_of(lambda: stage_table.cached_stage_table(second, profile, "SFT"))}


def test_other_weights_under_an_upstream_key_change_every_key_below_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "one"))
    before = _downstream_keys("weights A", monkeypatch)
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "retrained"))  # the same key, other weights
    after = _downstream_keys("weights B", monkeypatch)
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "again"))
    assert _downstream_keys("weights A", monkeypatch) == before  # the same content, the same keys
    assert all(before[name] != after[name] for name in before), (before, after)


def test_content_ignores_records_and_names_every_checkpoint_byte(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    files = {"model.safetensors": "w", "config.json": "{}"}
    one = content_id(_entry("sft", "a", {**files, "stage.json": '{"metrics": 1}', "loss_log.json": "[1]"}))
    assert content_id(_entry("sft", "b", {**files, "stage.json": '{"metrics": 2}', "provenance.json": "{}"})) == one
    assert content_id(_entry("sft", "c", {**files, "config.json": "{ }"})) != one
    assert content_id(_entry("sft", "d", {"config.json": "{}", "weights.safetensors": "w"})) != one  # names count
    with pytest.raises(ValueError, match="holds only records"):
        content_id(_entry("dynamic-filter", "e", {"stage.json": "{}"}))
    with pytest.raises(ValueError, match="not a built cache entry"):
        content_id(StageOutput(tmp_path / "never-built", "f"))


def test_the_recipe_enters_the_key_and_a_fixed_key_keeps_its_own(tmp_path, monkeypatch):
    assert stage_key("sft", {"lr": 1}, 1) != stage_key("sft", {"lr": 1}, 2)
    fixed = Stage("pretrain", {"lr": 1}, lambda folder: {}, "c3f961507249", recipe=1)
    assert fixed.key == "c3f961507249" == Stage("pretrain", {"lr": 1}, lambda folder: {}, "c3f961507249",
                                                 recipe=2).key
    for bad in (0, True, "1", None):
        with pytest.raises(ValueError, match="recipe is a positive int"):
            stage_key("sft", {}, bad)
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    start = _entry("chat-base", "base", {"model.safetensors": "w"})
    profile = resolve("08", "smoke").profile
    monkeypatch.setattr(sft, "run_stage", _capture)
    now = _key_of(lambda: sft.sft_stage(start, profile, 1))
    monkeypatch.setattr(sft, "RECIPE", sft.RECIPE + 1)
    assert _key_of(lambda: sft.sft_stage(start, profile, 1)) != now


def _shipped_under_old_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``sft/old`` shipped in a repository of the test's own, aliased as ``sft/new``; its folder."""
    monkeypatch.setattr(artifacts, "shipped_root", lambda: tmp_path / "shipped")
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "builder"))
    _entry("sft", "old", {"model.safetensors": "shipped weights", "stage.json": "{}"})
    folder = artifacts.ship("sft", "old", {"what": "a test entry"})
    write_aliases({("sft", "new"): "old"})
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "reader"))
    return folder


def _never(folder: Path) -> None:
    raise AssertionError("built although it is shipped")


def test_an_alias_finds_a_shipped_entry_under_its_old_key(tmp_path, monkeypatch):
    shipped = _shipped_under_old_key(tmp_path, monkeypatch)
    found = get_or_build("sft", "new", _never)
    assert found == artifacts.artifact_path("sft", "new") and (found / "model.safetensors").read_text() == (
        "shipped weights")
    artifacts.verify(found, "sft", "new")  # the cache entry is the key asked for; the shipped folder is untouched
    assert json.loads((shipped / artifacts.MANIFEST).read_text())["key"] == "old"
    assert content_id(StageOutput(found, "new")) == content_id(StageOutput(shipped, "old"))


def test_an_alias_to_a_damaged_entry_is_refused_and_the_stage_built(tmp_path, monkeypatch):
    shipped = _shipped_under_old_key(tmp_path, monkeypatch)
    (shipped / "model.safetensors").write_text("tampered weights")
    built = []
    with pytest.warns(UserWarning, match="ignoring a damaged shipped checkpoint"):
        found = get_or_build("sft", "new", lambda folder: built.append((folder / "w").write_text("built")))
    assert built and (found / "w").read_text() == "built"
    with pytest.raises(CorruptArtifact, match="does not match its sha256"):
        write_aliases({("sft", "new"): "old"})  # the writer refuses to name it, too


def test_a_malformed_alias_file_is_warned_about_and_left_out_never_raised(tmp_path, monkeypatch):
    """Every cache miss of every stage reads the aliases: one bad line must not stop them all (issue 56)."""
    monkeypatch.setattr(artifacts, "shipped_root", lambda: tmp_path)
    for text, needle in (("[1]", "not an object"), ("{", "not readable JSON"), ("[" * 100_000 + "]" * 100_000,
                         "not readable JSON"), ('{"sft/new": "grpo/old"}', "another stage's entry"),
                         ('{"sft": "sft/old"}', "not 'stage/key'"), ('{"sft/new": "sft/.old"}', "starts with a dot")):
        (tmp_path / artifacts.ALIASES).write_text(text)
        with pytest.warns(UserWarning, match=needle) as caught:
            assert artifacts.read_aliases() == {}
        assert str(tmp_path / artifacts.ALIASES) in str(caught[0].message)
    (tmp_path / artifacts.ALIASES).write_text('{"sft/bad": "grpo/old", "sft/good": "sft/old"}')
    with pytest.warns(UserWarning, match="another stage's entry"):
        assert artifacts.read_aliases() == {("sft", "good"): "old"}
    with pytest.raises(ValueError, match="needs no alias"):
        write_aliases({("sft", "same"): "same"})


def test_an_entry_built_under_its_old_key_moves_to_its_content_key_without_rebuilding(tmp_path, monkeypatch):
    """What ``cascadekit rekey-base`` does for a base trained before keys hashed content."""
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    upstream = _entry("chat-tokenizer", "tok", {"tokenizer.json": "{}"})
    built = []
    stage = Stage("chat-base", {"tokenizer": content_id(upstream), "lr": 1},
                  lambda folder: built.append((folder / "model.safetensors").write_text("w")) or {}, recipe=1)
    old = legacy_key(stage, {content_id(upstream): "tok"})
    assert old == legacy_key(Stage("chat-base", {"tokenizer": "tok", "lr": 1}, stage.build, recipe=1), {})
    get_or_build("chat-base", old, lambda folder: [(folder / "model.safetensors").write_text("trained an hour"),
                                                   (folder / "stage.json").write_text('{"metrics": {}}')])
    assert rekey_cached(stage, {content_id(upstream): "tok"}) == (old, stage.key, True)
    assert (run_stage(stage).checkpoint / "model.safetensors").read_text() == "trained an hour" and not built
    assert rekey_cached(stage, {content_id(upstream): "tok"}) == (old, stage.key, False)  # nothing left to move
