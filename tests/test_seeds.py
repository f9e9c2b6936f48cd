"""Seeds that mean one thing each (issue 32): ``data_seed``, ``eval_seed`` and ``train_seed`` beside ``seed``.

A training seed keeps every prompt set and suite the stages draw and moves exactly the stages that train
after the bases; a data seed moves the prompts and tasks, never the suites; an evaluation seed moves the
suites, never a prompt pool or a training stage. The keys are read from the smoke walk of
``test_shipped_keys`` (every build faked) against the pinned smoke keys of ``fixtures/stage_keys.json``.
``--train-seed 1,2 --jobs 2`` runs two real children side by side at the smoke scale.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from cascadekit import chapters
from cascadekit.bands import Bands
from cascadekit.chapters import cascade, interplay
from cascadekit.chapters.ch11_math_rl import math_suite
from cascadekit.chapters.ch12_code_rl import code_eval_records
from cascadekit.chapters.ch13_swe_rl import context_suite
from cascadekit.chapters.ch14_whole_cascade import harder_suite
from cascadekit.course.replicates import child_argv
from cascadekit.evaluation.edges import edge_records
from cascadekit.evaluation.report import training_answers
from cascadekit.evaluation.stage_table import suite_records
from cascadekit.profiles import Profile, ProfileError, load_profile, seed_inputs
from cascadekit.training import sft, swe_rl
from cascadekit.training.reward_model import preference_records
from test_shipped_keys import FIXTURE, guarded, walk

ROOT = Path(__file__).resolve().parents[1]
#: The kinds every training seed shares: the tokenizers and the pretrained bases.
BASES = {"tokenizer", "pretrain", "pretrain-transfer", "chat-tokenizer", "chat-base"}
#: The kinds an evaluation seed may move: the evaluations themselves.
EVALUATIONS = {"stage-table", "samples"}


def profile(**seeds: int) -> Profile:
    """Chapter 14's smoke profile (the RL settings chapters 09-14 share) with ``seeds`` set."""
    return chapters.resolve("14", "smoke", seeds).profile


def _texts(records: list[Any]) -> list[str]:
    return [json.dumps(r, sort_keys=True, default=str) for r in records]


def _judge_tasks(p: Profile, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The SWE judge's training and held-out tasks, as ``judge_from`` hands them to its stage."""
    with monkeypatch.context() as m:
        m.setattr(swe_rl, "judge_stage", lambda start, train, held_out, profile: [*train, *held_out])
        return swe_rl.judge_from(None, p)


def pools(p: Profile, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Every prompt set and task list a training stage draws (the joint run's as a multiset: its order is the run's)."""
    bands = Bands.of_world(p.world)
    return {
        "Part I edge prompts": [q.rl_prompt for q in interplay.band_problems(p, bands, "edge")],
        "Part I chance answers": [str(a) for a in training_answers(p, 50)],
        "SFT stage 1": _texts(sft.stage_records(p, 1)), "SFT stage 2": _texts(sft.stage_records(p, 2)),
        "preference pairs": _texts(preference_records(p, "rl", p.reward_model.tasks, p.seeds.data)),
        "RLHF": _texts(cascade.rlhf_records(p, "half-half")), "IF-RL": _texts(cascade.if_rl_records(p, False)),
        "Math RL": _texts(cascade.math_records(p)), "Code RL": _texts(cascade.code_rl_records(p)),
        **{f"SWE RL context {c}": _texts(swe_rl.stage_records(p, c)) for c in p.swe_rl.contexts},
        "SWE judge": _texts(_judge_tasks(p, monkeypatch)),
        "joint RL": sorted(_texts(cascade.joint_records(p, {"general": 4, "code": 4}))),
    }


def suites(p: Profile) -> dict[str, list[str]]:
    """Every evaluation suite the chapters compare stages on."""
    return {"Part I ladder": [q.rl_prompt for q in interplay.ladder(p)], "stage table": _texts(suite_records(p)),
            "harder": _texts(harder_suite(p)), "math by op": _texts(math_suite(p)),
            "code by op": _texts(code_eval_records(p)), "SWE by context": _texts(context_suite(p)),
            "edges": _texts(edge_records(p, ["math", "code"], ["think"], [2, 3], 2))}


def test_each_seed_follows_seed_unless_set_and_adds_to_a_key_only_when_it_differs():
    base = load_profile("smoke", {"seed": 3})
    assert (base.seeds.data, base.seeds.eval, base.seeds.train) == (3, 3, 3)
    assert seed_inputs(base, "data", "eval", "train") == {}
    assert seed_inputs(load_profile("smoke", {"seed": 3, "train_seed": 3}), "train") == {}
    moved = load_profile("smoke", {"train_seed": 2, "eval_seed": 0})
    assert seed_inputs(moved, "data", "eval", "train") == {"train_seed": 2}
    assert "train_seed=2" in moved.summary()
    with pytest.raises(ProfileError, match="data_seed"):
        load_profile("smoke", {"data_seed": -1})
    with pytest.raises(ValueError, match="unknown seed role"):
        seed_inputs(moved, "training")


def test_a_training_seed_keeps_every_prompt_set_and_suite(monkeypatch):
    base, other = profile(), profile(train_seed=1)
    assert pools(other, monkeypatch) == pools(base, monkeypatch)
    assert suites(other) == suites(base)
    assert (cascade.joint_records(other, {"general": 4, "code": 4})
            != cascade.joint_records(base, {"general": 4, "code": 4})), "the joint run's order is its training seed's"


def test_a_data_seed_moves_every_prompt_set_and_no_suite(monkeypatch):
    base, other = profile(), profile(data_seed=1)
    before, after = pools(base, monkeypatch), pools(other, monkeypatch)
    assert [name for name in before if before[name] == after[name]] == []
    assert suites(other) == suites(base)


def test_an_evaluation_seed_moves_every_suite_and_no_prompt_set(monkeypatch):
    base, other = profile(), profile(eval_seed=1)
    before, after = suites(base), suites(other)
    assert [name for name in before if before[name] == after[name]] == []
    assert pools(other, monkeypatch) == pools(base, monkeypatch)


def _seeded(seeds: dict[str, int]) -> Callable[..., Any]:
    original = chapters.resolve

    def resolve(chapter: str, scale: str, overrides: Any = None, seed: int = 0, rebuild_base: bool = False):
        return original(chapter, scale, {**seeds, **(overrides or {})}, seed, rebuild_base)  # a walk step's own win
    return resolve


def walked_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **seeds: int) -> dict[str, str]:
    """The smoke walk of ``test_shipped_keys`` (every build faked) with ``seeds`` in every chapter's profile."""
    with monkeypatch.context() as m:
        m.setattr(chapters, "resolve", _seeded(seeds))
        m.setattr(cascade, "_RESOLVED", {})
        with guarded(m, tmp_path, fake=True) as rec:
            walk("smoke", rec, tmp_path / "work")
    return rec.names


def _moved(keys: dict[str, str]) -> tuple[set[str], set[str]]:
    """(kinds whose every key moved, kinds of which some key stayed) against the pinned smoke keys."""
    pinned = json.loads(FIXTURE.read_text())["smoke"]
    assert set(keys) == set(pinned), "the walk reached other stages"
    moved = {v.split("/")[0] for n, v in keys.items() if v != pinned[n]}
    kept = {v.split("/")[0] for n, v in keys.items() if v == pinned[n]}
    return moved - kept, kept


def test_a_training_seed_moves_every_trained_stage_and_no_base(monkeypatch, tmp_path):
    moved, kept = _moved(walked_keys(monkeypatch, tmp_path, train_seed=1))
    assert kept == {"tokenizer", "pretrain", "pretrain-transfer", "chat-tokenizer", "chat-base"} <= BASES
    assert {"sft", "policy-samples", "reward-model", "grpo", "dynamic-filter", "swe-judge"} <= moved


def test_an_evaluation_seed_moves_only_evaluations(monkeypatch, tmp_path):
    moved, kept = _moved(walked_keys(monkeypatch, tmp_path, eval_seed=1))
    assert moved == {"stage-table"} <= EVALUATIONS
    assert {"sft", "policy-samples", "reward-model", "grpo", "dynamic-filter", "swe-judge", "chat-base"} <= kept


def test_a_child_gets_its_one_seed_and_one_thread_whatever_was_given():
    argv = ["08", "--scale", "smoke", "--train-seed", "0,1", "--jobs=2", "--threads", "2", "--set", "sft.lr=0.01"]
    assert child_argv("experiment", argv, 1) == ["experiment", "08", "--scale", "smoke", "--set", "sft.lr=0.01",
                                                 "--train-seed", "1", "--threads", "1"]


#: A child that asks the cache for one shared stage, whose build marks a file and takes a second.
BUILD_ONCE = """
import os, sys, time
from pathlib import Path
from cascadekit.artifacts import get_or_build

def builder(folder):
    with open(sys.argv[2], "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    time.sleep(1.0)
    (folder / "weights").write_text("built")

get_or_build("shared-base", "k", builder, root=Path(sys.argv[1]))
"""


def test_the_cache_lock_builds_a_shared_stage_once_for_two_processes(tmp_path):
    marks, env = tmp_path / "builds.txt", {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [subprocess.Popen([sys.executable, "-c", BUILD_ONCE, str(tmp_path / "cache"), str(marks)], env=env)
                for _ in range(2)]
    assert [child.wait(60) for child in children] == [0, 0]
    assert len(marks.read_text().split()) == 1
    assert (tmp_path / "cache" / "shared-base" / "k" / "weights").read_text() == "built"


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cascadekit", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_two_training_seeds_run_side_by_side_and_a_failed_one_is_named(tmp_path):
    """Seeds 1 and 2 of chapter 08 at smoke (the cheapest chapter that trains: its chat base and SFT) as two
    single-thread children at once, then seed 3, whose results folder cannot be made: exit 1, naming seed 3."""
    env = {**os.environ, "CASCADEKIT_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1"}
    out, work = tmp_path / "out", tmp_path / "work"
    chapter = out / "08_unified_thinking_model"
    chapter.mkdir(parents=True)
    (chapter / "train-seed-3").write_text("in the way")
    started = time.perf_counter()
    done = _cli("experiment", "08", "--scale", "smoke", "--train-seed", "1,2,3", "--jobs", "2", "--out", str(out),
                "--work", str(work), env=env)
    sys.stderr.write(f"\nchapter 08 at smoke, train seeds 1,2,3 with --jobs 2: {time.perf_counter() - started:.0f} s\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "train seed(s) 3 failed" in done.stderr and "train-seed-3.log" in done.stderr, done.stderr
    assert "train seed 1: exit 0" in done.stdout and "train seed 2: exit 0" in done.stdout
    bases, sfts = set(), set()
    for seed in (1, 2):
        metrics = json.loads((chapter / f"train-seed-{seed}" / "metrics.json").read_text())
        assert metrics["config"]["train_seed"] == seed and (chapter / f"train-seed-{seed}" / "paper_vs_run.md").is_file()
        assert f"--train-seed {seed} --threads 1" in metrics["produced_by"]["command"]
        assert f"seed=0 train_seed={seed}" in (work / f"train-seed-{seed}.log").read_text()  # its profile, in its log
        bases.add(metrics["base"]["key"])
        sfts.add(metrics["stages"][-1]["key"])
    pinned = json.loads(FIXTURE.read_text())["smoke"]["08 SFT / chat-base"]
    assert {f"chat-base/{key}" for key in bases} == {pinned}, "every training seed starts from the one chat base"
    assert len(sfts) == 2, "each training seed trains its own SFT"
    built = [p for p in (tmp_path / "cache" / "chat-base").iterdir() if not p.name.startswith(".")]
    assert len(built) == 1, built
    from cascadekit import cli  # --combine: the two finished seeds as one result, nothing trained or evaluated
    assert cli.main(["experiment", "08", "--scale", "smoke", "--train-seed", "1,2", "--combine", "--out", str(out)]) == 0
    combined = json.loads((chapter / "metrics.json").read_text())
    assert combined["train_seeds"] == [1, 2] and "(seeds: " in (chapter / "paper_vs_run.md").read_text()
    assert cli.main(["experiment", "08", "--scale", "smoke", "--train-seed", "1,3", "--combine", "--out", str(out)]) == 2
    assert cli.main(["experiment", "08", "--scale", "smoke", "--train-seed", "1", "--combine", "--out", str(out)]) == 2


def test_a_cascade_of_one_training_seed_writes_into_its_own_folders(monkeypatch, tmp_path):
    from cascadekit import cli
    from cascadekit.chapters import cascade_arms

    seen = {}
    monkeypatch.setattr(cascade_arms, "lever", lambda scale, seed, overrides, *rest, beside: seen.update(
        overrides=overrides, out=rest[-3], work=rest[-2], command=rest[-1], beside=beside))
    assert cli.main(["cascade", "--scale", "smoke", "--train-seed", "5", "--out", str(tmp_path / "out"),
                     "--work", str(tmp_path / "work")]) == 0
    assert seen["overrides"] == {"train_seed": 5} and seen["beside"] is False
    assert (seen["out"], seen["work"]) == (tmp_path / "out" / "train-seed-5", tmp_path / "work" / "train-seed-5")
    assert cli.main(["cascade", "--scale", "smoke", "--train-seed", "5", "--jobs", "2", "--out", str(tmp_path / "out"),
                     "--work", str(tmp_path / "work")]) == 0
    assert seen["beside"] is True  # one seed, two processes: its tables beside its training
    assert cli.main(["cascade", "--scale", "smoke", "--train-seed", "5", "--set", "train_seed=6"]) == 2
