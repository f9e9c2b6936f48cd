"""Part II's stage graph as data (:mod:`cascadekit.chapters.cascade`): the shipped keys, each checkpoint resolved
once per process, the order of a cascade, and the stage names written in one place."""
from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

import pytest

from cascadekit import artifacts
from cascadekit.chapters import cascade, resolve
from cascadekit.stages import StageOutput

ROOT = Path(__file__).resolve().parents[1]
#: The cascade's toy keys, the second world's first training seed (chapters 08-13 built and shipped them), in the
#: table's order.
SHIPPED = {"SFT": "c1b9df82d3c5", "RLHF": "c3dbe1a66cf3", "IF-RL": "3a1540e9ee8e", "Math RL": "8fac51d21012",
           "Code RL": "0be23bddb27c", "SWE RL": "674c9bbf8be5"}


@pytest.fixture
def fresh(monkeypatch):
    """An empty memo: this test's resolutions are its own."""
    monkeypatch.setattr(cascade, "_RESOLVED", {})


def test_every_stage_resolves_to_its_shipped_toy_key_without_training_each_once(fresh, monkeypatch):
    """Chapter 14's toy profile (the second world, its first training seed) reaches every shipped
    stage; nothing is built, and every artifact on the way is resolved exactly once, however often it is asked."""
    locked, resolved = artifacts._get_or_build_locked, Counter()

    def shipped_only(stage, key, builder, target, folder, use_shipped=True, needs=()):
        resolved[(stage, key)] += 1

        def never(tmp):
            raise AssertionError(f"{stage}/{key} is not shipped and would be built")
        return locked(stage, key, never, target, folder, use_shipped, needs)

    monkeypatch.setattr(artifacts, "_get_or_build_locked", shipped_only)
    profile = resolve("14", "toy").profile  # the chapter's own: the second world, its first training seed
    hash(profile)  # the memo's key: a frozen profile is hashable
    keys = {name: cascade.checkpoint(name, profile).key for name in cascade.STAGES}
    assert keys == SHIPPED
    for name in cascade.STAGES:
        found = cascade.checkpoint(name, profile)
        assert artifacts.shipped_folder(found.checkpoint.parent.name, found.key), name
    assert cascade.largest_reward_model(profile).key == "dd6df4219de3" and cascade.judge(profile).key == "d36df8b14a73"
    assert resolved and set(resolved.values()) == {1}, resolved.most_common(3)
    asked = sum(resolved.values())
    stages = cascade.run_cascade(profile, Path("unused"))
    assert [s.checkpoint.key for s in stages] == list(SHIPPED.values()) and sum(resolved.values()) == asked
    assert cascade.unified_math_rl(profile, Path("unused")).key == SHIPPED["Math RL"]
    assert cascade.swe_rl_start(profile, Path("unused")).key == SHIPPED["Code RL"]


def _fake_table(monkeypatch, built: list[tuple[str, str]]) -> None:
    """Every builder replaced by one that records (stage, start key) and returns a checkpoint named after both."""
    def fake(name):
        def build(start, profile, work_dir):
            built.append((name, start.key))
            out = StageOutput(work_dir, f"{name}<-{start.key}", {"steps": 1, "train_s": 1.0})
            return (out,), out, 0.0
        return build

    monkeypatch.setattr(cascade, "STAGES", {n: dataclasses.replace(s, build=fake(n)) for n, s in cascade.STAGES.items()})
    monkeypatch.setattr(cascade, "chat_base", lambda profile: StageOutput(Path("base"), "base"))


def test_the_memo_builds_each_stage_once_per_profile_and_cache(fresh, monkeypatch, tmp_path):
    built: list[tuple[str, str]] = []
    _fake_table(monkeypatch, built)
    smoke, other = resolve("14", "smoke").profile, resolve("14", "smoke", seed=1).profile
    last = cascade.checkpoint("Code RL", smoke, tmp_path)
    assert [name for name, _ in built] == ["SFT", "RLHF", "IF-RL", "Math RL", "Code RL"]
    assert last.key == "Code RL<-Math RL<-IF-RL<-RLHF<-SFT<-base" and last.checkpoint == tmp_path / "code-rl"
    assert cascade.checkpoint("IF-RL", smoke).key == "IF-RL<-RLHF<-SFT<-base"
    assert cascade.sft_checkpoint(smoke).key == "SFT<-base" and len(built) == 5  # all remembered
    cascade.checkpoint("RLHF", other)
    assert len(built) == 7  # another profile resolves again
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "elsewhere"))
    cascade.checkpoint("SFT", smoke)
    assert len(built) == 8  # and so does another cache


def test_an_order_names_each_rl_stage_once_and_leaves_the_table_where_it_departs(fresh, monkeypatch, tmp_path):
    assert cascade.check_order(list(reversed(cascade.ORDER))) == tuple(reversed(cascade.ORDER))
    for bad, needle in ((["RLHF", "DPO"], "unknown cascade stage 'DPO'"), (["SFT"], "unknown cascade stage 'SFT'"),
                        (["RLHF", "Math RL", "RLHF"], "each stage once")):
        with pytest.raises(ValueError, match=needle):
            cascade.check_order(bad)
    built: list[tuple[str, str]] = []
    _fake_table(monkeypatch, built)
    smoke = resolve("14", "smoke").profile
    stages = cascade.run_cascade(smoke, tmp_path, ["RLHF", "Math RL", "IF-RL"])
    assert [s.name for s in stages] == ["SFT", "RLHF", "Math RL", "IF-RL"]
    assert [s.checkpoint.key for s in stages[1:]] == [
        "RLHF<-SFT<-base", "Math RL<-RLHF<-SFT<-base", "IF-RL<-Math RL<-RLHF<-SFT<-base"]
    assert cascade.checkpoint("IF-RL", smoke).key == "IF-RL<-RLHF<-SFT<-base"  # the table's, not the ablation's
    assert stages[1] is cascade.cascade_stage("RLHF", smoke)  # in the table's order: the remembered stage


def test_the_table_chains_its_stages_in_order():
    assert cascade.TABLE[0].after is None
    assert [spec.after for spec in cascade.TABLE[1:]] == [spec.name for spec in cascade.TABLE[:-1]]
    assert cascade.ORDER == tuple(spec.name for spec in cascade.TABLE[1:])
    assert [spec.slug for spec in cascade.TABLE] == ["sft", "rlhf", "if-rl", "math-rl", "code-rl", "swe-rl"]


def test_the_stage_names_are_written_once():
    """No module but the wing spells three or more stage names in a row (a tuple, a list, a dict, a default)."""
    spellings = sorted({s for spec in cascade.TABLE for s in (spec.name, spec.slug)}, key=len, reverse=True)
    name = "(?:" + "|".join(map(re.escape, spellings)) + ")"
    row = re.compile(rf"{name}(?:[\"']?\s*(?::\s*[^,]+)?,\s*[\"']?{name}){{2,}}")
    wing = ROOT / "cascadekit" / "chapters" / "cascade.py"
    spelt = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in sorted((ROOT / "cascadekit").rglob("*.py"))
             if path != wing for n, line in enumerate(path.read_text().splitlines(), 1) if row.search(line)]
    assert not spelt, "\n".join(spelt)
    assert row.search('ORDER = ("RLHF", "IF-RL", "Math RL", "Code RL", "SWE RL")')
    assert row.search('STAGES = {"sft": "08", "rlhf": "09", "if-rl": "10", "math-rl": None}')
    assert row.search('default="RLHF,IF-RL,Math RL,Code RL,SWE RL"')
