"""Chapter 13's pieces: the SWE context size, the execution-free and execution rewards, the judge's data and
checks, watched rewards in the GRPO stage key, and the chapter's statistics."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from cascadekit.artifacts import write_manifest
from cascadekit.training import pipeline
from cascadekit.domains import chat_record, domains, draw_tasks, gold_answer
from cascadekit.domains import swe
from cascadekit.chapters.ch13_swe_rl import correlation, hacking_rate, prompt_bootstrap, seeds_prompt_bootstrap
from cascadekit.stages import StageOutput
from cascadekit.profiles import ProfileError, load_profile, profile_names
from cascadekit.training.swe_judge import auc, constructed, executed, held_out_check
from cascadekit.training.swe_rl import (
    applied_lexical_reward, arm_rewards, execution_free_reward, execution_reward, lexical_reward, stage_records,
    swe_domain, swe_rl_settings, swe_tasks,
)

GARBAGE = ["", "no patch here", "calc.py\n<<<<<<< SEARCH\n", "<<<<<<< SEARCH\n=======\n>>>>>>> REPLACE",
           "x" * 50_000, "calc.py\n<<<<<<< SEARCH\n    nothing = 1\n=======\n    nothing = 2\n>>>>>>> REPLACE"]


def test_context_zero_draws_the_records_it_always_drew():
    for seed in range(5):
        default = [t.prompt for t in draw_tasks(domains()["swe"], 4, seed, "rl", [2, 3])]
        assert default == [t.prompt for t in draw_tasks(swe_domain(0), 4, seed, "rl", [2, 3])]


@pytest.mark.parametrize("context", [1, 3])
def test_a_longer_file_holds_other_functions_and_its_gold_patch_still_fixes_it(context):
    tasks = draw_tasks(swe_domain(context), 3, 0, "eval", [2, 3])
    for task in tasks:
        source = task.gold["source"]
        assert source.count("def ") == context + 1
        search = task.gold["patch"].split("\n")[2]
        assert source.count(f"\n{search}\n") + source.startswith(search + "\n") == 1
        assert swe.judge(task.gold, gold_answer(chat_record(task, True))).score == 1.0


def test_stage_prompts_spread_over_contexts_up_to_the_stage_limit():
    profile = load_profile("smoke", {"swe_rl.prompts": 6})
    records = stage_records(profile, 2)
    assert len(records) == 6 and all(r["think"] for r in records)
    assert sorted(r["gold"]["source"].count("def ") - 1 for r in records) == [0, 0, 1, 1, 2, 2]


def test_rewards_score_gold_one_and_garbage_zero_without_raising():
    task = swe_tasks(load_profile("smoke"), 1, "rl", 0, [1])[0]
    answers = [gold_answer(chat_record(task, True))] + GARBAGE + [None, 17, [{"role": "assistant"}]]
    golds = [json.dumps(task.gold)] * len(answers)
    lexical = lexical_reward([None] * len(answers), answers, gold=golds)
    truth = execution_reward(2)([None] * len(answers), answers, gold=golds)
    assert lexical[0] == 1.0 and truth[0] == 1.0
    assert truth[1:] == [0.0] * (len(answers) - 1)
    assert all(0.0 <= x < 1.0 for x in lexical[1:])


def test_execution_free_reward_weighs_lexical_and_semantic():
    task = swe_tasks(load_profile("smoke"), 1, "rl", 0, [0])[0]
    gold = [json.dumps(task.gold)]

    def semantic(prompts, completions, **kwargs):
        return [0.25] * len(completions)

    semantic.__name__ = "swe_judge_test"
    reward = execution_free_reward(semantic, 0.5)
    assert reward([None], [gold_answer(chat_record(task, False))], gold=gold) == [pytest.approx(0.625)]
    assert reward([None], ["garbage"], gold=gold) == [pytest.approx(0.125)]
    assert reward.__name__ == "swe_execution_free_0.5_swe_judge_test"
    with pytest.raises(ValueError, match="lexical_weight"):
        execution_free_reward(semantic, 1.5)
    with pytest.raises(ValueError, match="'gold' dataset column"):
        lexical_reward([None], ["x"])


def test_asking_applicability_zeroes_a_patch_that_does_not_apply_and_keeps_the_rest():
    """Issue 55 item 6: the option where the file's contents are known; the paper's reward stays the default."""
    task = swe_tasks(load_profile("smoke"), 1, "rl", 0, [1])[0]
    gold_text = gold_answer(chat_record(task, True))
    search = task.gold["patch"].split("\n")[2]
    misplaced = gold_text.replace(search, search + "  # not in calc.py", 1)  # close to the gold, applies nowhere
    answers, golds = [gold_text, misplaced, "garbage"], [json.dumps(task.gold)] * 3
    plain = lexical_reward([None] * 3, answers, gold=golds)
    applied = applied_lexical_reward([None] * 3, answers, gold=golds)
    assert plain[0] == applied[0] == 1.0 and plain[1] > 0.9 and applied[1] == 0.0 and applied[2] == plain[2] == 0.0

    def semantic(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    semantic.__name__ = "swe_judge_test"
    assert execution_free_reward(semantic, 0.5).__name__ == "swe_execution_free_0.5_swe_judge_test"  # keys kept
    assert execution_free_reward(semantic, 0.5, applicable=True).__name__ == (
        "swe_execution_free_0.5_applied_swe_judge_test")
    free, _ = arm_rewards(load_profile("smoke", {"swe_rl.applicable": True}), semantic)["execution-free"]
    assert free([None] * 3, answers, gold=golds) == [0.5, 0.0, 0.0]


def test_judge_candidates_are_labelled_by_execution():
    task = swe_tasks(load_profile("smoke"), 1, "rl", 3, [1])[0]
    candidates = constructed(task, True, random.Random(0))
    labels = dict(zip([s for s, _ in candidates], executed([task.gold] * len(candidates),
                                                           [a for _, a in candidates], 2)))
    assert labels["gold"] == 1.0 and labels["unchanged"] == 0.0 and labels.get("corrupted", 0.0) == 0.0
    assert candidates[0][1] == gold_answer(chat_record(task, True))


def test_judge_checks():
    assert auc([0.9, 0.8, 0.1], [1, 1, 0]) == 1.0 and auc([0.1, 0.9], [1, 0]) == 0.0
    assert np.isnan(auc([0.5, 0.5], [1, 1]))
    check = held_out_check([0.9, 0.2, 0.6], [{"label": 1, "source": "gold"}, {"label": 0, "source": "policy"},
                                             {"label": 0, "source": "policy"}])
    assert check["accuracy"] == pytest.approx(2 / 3) and check["low"] < 2 / 3 < check["high"]
    assert check["by_source"]["policy"] == {"n": 2, "passing": 0, "mean_p_yes": pytest.approx(0.4)}


def test_every_profile_has_swe_rl_and_bad_values_are_refused():
    for name in profile_names():
        profile = load_profile(name)
        assert profile.swe_rl.contexts == tuple(sorted(set(profile.swe_rl.contexts)))
        assert swe_rl_settings(profile).lr == profile.swe_rl.lr
        assert swe_rl_settings(profile).max_completion_length == profile.swe_rl.length
    for key, value in [("swe_rl.contexts", [2, 1]), ("swe_rl.contexts", []), ("swe_rl.lexical_weight", 1.5),
                       ("swe_rl.judge_layers", 0), ("swe_rl.ops", [3, 2]), ("swe_rl.workers", 0)]:
        with pytest.raises(ProfileError, match=key.split(".")[1]):
            load_profile("toy", {key: value})


def test_watched_rewards_enter_the_stage_key_only_when_present(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(pipeline, "run_stage", lambda stage: seen.append(stage) or None)
    profile = load_profile("smoke")
    records = stage_records(profile, 0)
    (tmp_path / "start").mkdir()
    (tmp_path / "start" / "model.safetensors").write_text("w")
    write_manifest(tmp_path / "start", "sft", "start")  # a start entry: its content goes into the key
    start = StageOutput(tmp_path / "start", "start")
    pipeline.chat_grpo(start, records, profile, tmp_path, reward=lexical_reward)
    pipeline.chat_grpo(start, records, profile, tmp_path, reward=lexical_reward, watched=[execution_reward(2)])
    assert "watched" not in seen[0].inputs and seen[1].inputs["watched"] == ["swe_execution"]
    assert seen[0].key != seen[1].key


def _rollouts(pairs):
    return [{"prompt": i // 2, "execution": truth, "execution-free": reward, "lexical": reward}
            for i, (reward, truth) in enumerate(pairs)]


def test_correlation_and_hacking_rate():
    tracks = _rollouts([(0.9, 1.0), (0.1, 0.0), (0.85, 1.0), (0.2, 0.0)])
    hacked = _rollouts([(0.9, 0.0), (0.95, 0.0), (0.85, 1.0), (0.2, 0.0)])
    assert correlation(tracks, "lexical") > 0.9
    assert hacking_rate(tracks) == 0.0 and hacking_rate(hacked) == pytest.approx(2 / 3)
    assert np.isnan(hacking_rate(_rollouts([(0.1, 0.0), (0.2, 1.0)])))
    assert np.isnan(correlation(_rollouts([(0.5, 1.0), (0.5, 0.0)]), "lexical"))


def test_prompt_bootstrap_resamples_prompts_and_holds_its_estimate():
    rng = np.random.default_rng(0)
    run = _rollouts([(x, float(x > 0.5)) for x in rng.random(40)])
    estimate, low, high = prompt_bootstrap(lambda r: correlation(r, "lexical"), run, resamples=200)
    assert low <= estimate <= high and low > 0.5
    flat = _rollouts([(0.5, 0.0)] * 8)
    assert all(np.isnan(v) for v in prompt_bootstrap(lambda r: correlation(r, "lexical"), flat, resamples=10))


def test_the_prompt_bootstrap_over_seeds_averages_the_seeds_and_reads_as_one_run_for_one():
    rng = np.random.default_rng(0)
    strong = _rollouts([(x, float(x > 0.5)) for x in rng.random(40)])
    weak = _rollouts([(x, float(x > 0.5) if i % 2 else 1.0 - float(x > 0.5)) for i, x in enumerate(rng.random(40))])
    statistic = lambda r: correlation(r, "lexical")  # noqa: E731
    one = seeds_prompt_bootstrap(statistic, [[strong]], resamples=200)
    assert one[:3] == prompt_bootstrap(statistic, strong, resamples=200) and len(one[3]) == 1
    estimate, low, high, seeds = seeds_prompt_bootstrap(statistic, [[strong], [weak]], resamples=200)
    assert estimate == pytest.approx(np.mean(seeds)) and seeds[0] > 0.5 > seeds[1] and low <= estimate <= high
    assert high - low > one[2] - one[1]  # the seeds' disagreement widens the interval
    flat = _rollouts([(0.5, 0.0)] * 8)
    assert all(np.isnan(v) for v in seeds_prompt_bootstrap(statistic, [[strong], [flat]], resamples=10)[:3])
