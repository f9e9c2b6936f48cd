"""The stage runner: stages are cached by exactly their inputs, and a finished stage is never rebuilt."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cascadekit.artifacts import write_manifest
from cascadekit import stages
from cascadekit.evaluation.report import evaluate_checkpoint
from cascadekit.training import pipeline
from cascadekit.bands import Bands
from cascadekit.profiles import load_profile
from cascadekit.rewards import strict_reward
from cascadekit.world import generate_problems

SMOKE = load_profile("smoke", {"rl.samples": 4, "rl.prompts_per_step": 2, "evaluation.problems_per_op": 1,
                               "evaluation.samples": 2})


def test_a_stage_builds_once_per_key(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    built = []

    def build(folder):
        built.append(folder)
        (folder / "weights.txt").write_text("w")
        return {"loss": 0.5}

    first = stages.run_stage(stages.Stage("demo", {"lr": 0.1}, build, recipe=1))
    again = stages.run_stage(stages.Stage("demo", {"lr": 0.1}, build, recipe=1))
    other = stages.run_stage(stages.Stage("demo", {"lr": 0.2}, build, recipe=1))
    assert len(built) == 2 and first == again and first.key != other.key
    assert first.metrics == {"loss": 0.5} and (first.checkpoint / "weights.txt").read_text() == "w"
    recorded = json.loads((first.checkpoint / stages.STAGE_FILE).read_text())
    assert recorded == {"kind": "demo", "inputs": {"lr": 0.1}, "recipe": 1, "metrics": {"loss": 0.5}}


def test_a_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))

    def broken(folder):
        (folder / "half.bin").write_bytes(b"x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        stages.run_stage(stages.Stage("demo", {"x": 1}, broken, recipe=1))
    assert not list((tmp_path / "demo").glob("[!.]*"))


def test_problems_digest_follows_the_prompts():
    a = generate_problems(ops=[2], contexts=("A",), n=3, seed=0, split="rl", style="minimal")
    b = generate_problems(ops=[2], contexts=("A",), n=3, seed=1, split="rl", style="minimal")
    assert pipeline.problems_digest(a) == pipeline.problems_digest(list(a)) != pipeline.problems_digest(b)


def test_grpo_stage_is_cached_and_its_key_follows_its_inputs(tmp_path, monkeypatch):
    base = pipeline.pretrained(SMOKE)
    prompts = generate_problems(ops=[2, 3], contexts=("A",), n=4, seed=0, split="rl", style=SMOKE.world.rendering)
    trained = pipeline.grpo(base, prompts, strict_reward, SMOKE, tmp_path)
    assert trained.metrics["steps"] == 2 and len(trained.metrics["curves"]) == 2
    monkeypatch.setattr(pipeline, "train_grpo", lambda *a, **k: pytest.fail("a cached stage trained again"))
    assert pipeline.grpo(base, prompts, strict_reward, SMOKE, tmp_path) == trained
    monkeypatch.undo()
    faster = load_profile("smoke", {"rl.samples": 4, "rl.prompts_per_step": 2, "rl.lr": 0.002})
    assert pipeline.grpo(base, prompts, strict_reward, faster, tmp_path).key != trained.key


def test_a_stages_own_rl_settings_train_it_and_key_it_as_the_profile_section_would(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(pipeline, "run_stage", lambda stage: seen.append(stage) or None)
    (tmp_path / "model.safetensors").write_text("w")
    write_manifest(tmp_path, "pretrain", "start")  # a start entry: its content goes into the key
    start = stages.StageOutput(tmp_path, "start")
    prompts = generate_problems(ops=[2, 3], contexts=("A",), n=4, seed=0, split="rl", style=SMOKE.world.rendering)
    rl = dataclasses.replace(SMOKE.rl, lr=0.002, prompts_per_step=4)
    pipeline.grpo(start, prompts, strict_reward, SMOKE, Path("w"), rl=rl)
    pipeline.grpo(start, prompts, strict_reward, dataclasses.replace(SMOKE, rl=rl), Path("w"))
    pipeline.grpo(start, prompts, strict_reward, SMOKE, Path("w"))
    assert seen[0].inputs == seen[1].inputs and seen[0].inputs["rl"] == dataclasses.asdict(rl)
    assert seen[0].inputs["steps"] == 1 and seen[2].inputs["rl"] == SMOKE.to_dict()["rl"] != seen[0].inputs["rl"]


def test_evaluation_labels_samples_with_the_bands_it_is_given():
    base = pipeline.pretrained(SMOKE)
    problems = generate_problems(ops=[2, 4], contexts=("A",), n=2, seed=0, split="eval", style=SMOKE.world.rendering)
    bands = Bands((2, 2), (3, 4), (5, 5))
    records = evaluate_checkpoint(base, problems, SMOKE, bands)
    assert {(r["op"], r["range"]) for r in records} == {(2, "in_distribution"), (4, "edge")}
    assert len(records) == len(problems) * SMOKE.evaluation.samples


def test_chat_grpo_rewards_with_the_domains_verifiers(tmp_path, monkeypatch):
    from cascadekit.training.chat_base import chat_base
    from cascadekit.domains import chat_records, domains, draw_tasks
    from cascadekit.rewards import verifier_reward

    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    profile = load_profile("smoke", {"rl.samples": 4, "rl.prompts_per_step": 2, "rl.max_completion_length": 16,
                                     "sft.base_tokens": 4000})
    records = [r for name in ("math", "code") for t in draw_tasks(domains()[name], 1, 0, "rl", [2]) for r in
               chat_records(t)]
    dataset = pipeline.chat_rl_dataset(records)
    assert dataset[0]["prompt"].endswith("<|im_start|>assistant\n") and set(dataset["domain"]) == {"math", "code"}
    gold = [json.loads(g) for g in dataset["gold"]]
    assert dataset["reasoning"][0] == records[0]["messages"][-1]["reasoning_content"] != ""  # /think: the gold steps
    assert dataset["reasoning"][1] == ""  # /no_think
    assert verifier_reward(dataset["prompt"], ["\\boxed{%d}" % gold[0]["answer"], "junk"], domain=dataset["domain"][:2],
                           gold=dataset["gold"][:2]) == [1.0, 0.0]
    trained = pipeline.chat_grpo(chat_base(profile), records, profile, tmp_path / "work")
    assert trained.metrics["steps"] == 2 and trained.metrics["prompts"] == len(records)
    tools = chat_records(draw_tasks(domains()["tools"], 1, 0, "rl", [2])[0])
    with pytest.raises(ValueError, match="multi-turn"):
        pipeline.chat_rl_dataset(tools)
    with pytest.raises(ValueError, match="'domain'"):
        pipeline.chat_rl_dataset([{**records[0], "domain": "poetry"}])
