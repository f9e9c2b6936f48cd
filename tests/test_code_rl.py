"""Chapter 12: Code RL's prompts and eval set, the streamed (asynchronous) rewards, and the chapter's claims."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from cascadekit.domains import domains
from cascadekit.chapters.ch12_code_rl import (START, arm_name, arm_table, cascade_temperature, claims, code_eval_records,
                                            entropy_growth, signal_share)
from cascadekit.profiles import load_profile
from cascadekit.rewards import reading_markup, verifier_reward
from cascadekit.training.async_rewards import StreamingRewards, _FinishedRows
from cascadekit.chapters.cascade import code_rl_records

OVERRIDES = {"sft.stage1_tasks": 2, "sft.stage2_tasks": 1, "code_rl.prompts": 6}
PROFILE = load_profile("smoke", OVERRIDES)
HANGS = "<think>\n</think>\n\n```python\ndef {name}(*args):\n    while True:\n        pass\n```"


@pytest.fixture(scope="module")
def tokenizer():
    from cascadekit.engine.runtime import load_tokenizer
    from cascadekit.chapters.cascade import sft_checkpoint
    return load_tokenizer(sft_checkpoint(PROFILE).checkpoint)


def test_code_rl_prompts_are_think_code_prompts_over_the_ops_and_apart_from_the_eval_set() -> None:
    records = code_rl_records(PROFILE)
    assert len(records) == 6 and {r["domain"] for r in records} == {"code"} and all(r["think"] for r in records)
    evals = code_eval_records(PROFILE)
    ops = range(PROFILE.code_rl.ops[0], PROFILE.code_rl.ops[1] + 1)
    assert [r["op"] for r in evals] == [op for op in ops for _ in range(2 * PROFILE.sft.eval_tasks)]
    assert [r["think"] for r in evals[:2]] == [True, False]
    asked = {r["messages"][0]["content"] for r in records}
    assert not asked & {r["messages"][0]["content"] for r in evals}


def test_the_cascade_arm_is_the_temperature_nearest_the_profiles() -> None:
    assert cascade_temperature(load_profile("toy")) == 1.0
    assert cascade_temperature(load_profile("smoke", {"code_rl.temperatures": [0.6, 1.4], "rl.temperature": 1.3})) == 1.4


def _batch(tokenizer, n_pass: int = 2):
    """Code completions in a fixed order: right, wrong, right, ..., then one that hangs; with their ids and columns."""
    tasks = code_rl_records(PROFILE)[: 2 * n_pass]
    texts, golds = [], []
    for i, record in enumerate(tasks):
        gold = record["gold"]
        answer = record["messages"][-1]
        right = f"<think>\n{answer['reasoning_content']}\n</think>\n\n{answer['content']}"
        texts.append(right if i % 2 == 0 else right.replace("    return ", "    return 1 + ", 1))
        golds.append(gold)
    texts.append(HANGS.format(name=golds[0]["function"]))
    golds.append(golds[0])
    ids = [tokenizer(t + "<|im_end|>", add_special_tokens=False)["input_ids"] for t in texts]
    return texts, ids, {"domain": ["code"] * len(texts), "gold": golds}


def test_streamed_rewards_equal_the_verifiers_in_order_and_a_hanging_program_scores_0(tokenizer) -> None:
    texts, ids, columns = _batch(tokenizer)
    head = {k: v[:-1] for k, v in columns.items()}  # the hanging program costs the sandbox's CPU limit: run it once
    blocking = reading_markup(verifier_reward, tokenizer)(["p"] * 4, texts[:-1], completion_ids=ids[:-1], **head)
    with ThreadPoolExecutor(1) as side:  # the judge's reason, alongside (each hanging run takes seconds)
        judged = side.submit(domains()["code"].judge, columns["gold"][-1], texts[-1])
        with StreamingRewards(verifier_reward, tokenizer, workers=2) as rewards:
            assert rewards.__name__ == "verifier_reward"
            got = rewards(["p"] * len(texts), texts, completion_ids=ids, **columns)
    assert got == [*blocking, 0.0] and blocking == [1.0, 0.0, 1.0, 0.0]
    assert judged.result().score == 0.0 and "time" in judged.result().reason
    assert rewards.stats["completions"] == 5 and rewards.stats["reverified"] == 0


def test_rollouts_are_sent_the_step_they_end_and_a_changed_text_is_verified_again(tokenizer) -> None:
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    sent = []
    watch = _FinishedRows(2, [end], lambda row, ids: sent.append((row, ids)))
    prompt = torch.tensor([[7, 8], [7, 8], [7, 8]])
    steps = [[5, 5, 6], [end, 9, 6], [0, end, 6]]  # row 0 ends at step 2, row 1 at step 3, row 2 never
    ids = prompt
    for k, column in enumerate(steps, start=1):
        ids = torch.cat([ids, torch.tensor(column)[:, None]], dim=1)
        assert not watch(ids, None).any()  # it never stops a row
        assert [r for r, _ in sent] == [0, 1][: max(0, k - 1)]
    assert sent == [(0, [5, end]), (1, [5, 9, end])] and watch.unsent(3) == [2]
    texts, ids, columns = _batch(tokenizer, n_pass=1)
    texts, ids, columns = texts[:2], ids[:2], {k: v[:2] for k, v in columns.items()}
    rewards = StreamingRewards(verifier_reward, tokenizer, workers=1)
    rewards.begin([{"prompt": "p", **{k: v[i] for k, v in columns.items()}} for i in range(len(texts))])
    rewards.submit(0, texts[1])  # sent as the wrong program: the reward must see the text it is handed
    got = rewards(["p"] * len(texts), texts, completion_ids=ids, **columns)
    rewards.close()
    assert got[0] == 1.0 and rewards.stats["reverified"] == 1


def test_workers_shut_down_and_a_bad_worker_count_is_refused(tokenizer) -> None:
    rewards = StreamingRewards(verifier_reward, tokenizer, workers=2)
    texts, ids, columns = _batch(tokenizer, n_pass=1)
    assert not rewards.running  # no threads before the first verification
    rewards(["p"] * 2, texts[:2], completion_ids=ids[:2], **{k: v[:2] for k, v in columns.items()})
    assert rewards.running and any(t.name.startswith("reward") for t in threading.enumerate())
    rewards.on_train_end(None, None, None)
    assert not rewards.running and not any(t.name.startswith("reward") for t in threading.enumerate())
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="workers"):
            StreamingRewards(verifier_reward, tokenizer, workers=bad)
    with pytest.raises(ValueError, match="completion_ids"):
        rewards(["p"], ["x"], domain=["code"], gold=[columns["gold"][0]])


@pytest.mark.parametrize("rollouts", ["generate", "kit"])
def test_streaming_inside_grpo_gives_the_blocking_runs_rewards(tokenizer, tmp_path, rollouts) -> None:
    """TRL's ``generate`` and the kit's decode loop (``engine.rollouts: kit``, the toy world's rollouts) alike: each
    row goes to the pool the step it ends, and the rewards are the blocking run's."""
    from cascadekit.chat import stop_token_ids
    from cascadekit.training.pipeline import chat_rl_dataset
    from cascadekit.engine.runtime import load_model
    from cascadekit.chapters.cascade import sft_checkpoint
    from cascadekit.training.grpo import train_grpo
    profile = load_profile("smoke", {**OVERRIDES, "engine.rollouts": rollouts})
    curves, stats = {}, {}
    for stream in (False, True):
        model = load_model(sft_checkpoint(PROFILE).checkpoint)
        model.generation_config.eos_token_id = stop_token_ids(tokenizer)
        rewards = StreamingRewards(verifier_reward, tokenizer, workers=2, stream=stream)
        result = train_grpo(model, tokenizer, chat_rl_dataset(code_rl_records(PROFILE)[:4]), rewards, profile,
                            str(tmp_path / str(stream)), max_steps=2, hooks=[rewards.attach], shuffle_dataset=False,
                            disable_tqdm=True)
        curves[stream], stats[stream] = list(result.curves["reward"]), rewards.summary()
        assert not rewards.running and "generate" not in vars(model)  # workers stopped, generate given back
    assert curves[True] == curves[False]
    assert stats[True]["reverified"] == 0 and stats[True]["completions"] == stats[False]["completions"] == 16
    assert stats[True]["sent_while_generating"] > 0 and stats[False]["sent_while_generating"] == 0
    assert stats[True]["sent_after_generation"] == stats[False]["sent_after_generation"] == 0


def test_under_vllm_each_finished_batch_is_verified_on_the_pool_before_trl_scores_it(tokenizer, tmp_path) -> None:
    """Issue 34 case 4: Code RL with vLLM on (the small and full defaults) streams its rewards, batch by batch.

    No vLLM here: the trainer says ``use_vllm`` while the rewards attach (all they read), then generates with
    transformers, whose ``_generate`` returns the batch in the same layout TRL's vLLM path does.
    """
    from cascadekit.chat import stop_token_ids
    from cascadekit.training.pipeline import chat_rl_dataset
    from cascadekit.engine.runtime import load_model
    from cascadekit.chapters.cascade import sft_checkpoint
    from cascadekit.training.grpo import train_grpo

    model = load_model(sft_checkpoint(PROFILE).checkpoint)
    model.generation_config.eos_token_id = stop_token_ids(tokenizer)
    rewards = StreamingRewards(verifier_reward, tokenizer, workers=2)

    def attach_as_under_vllm(trainer) -> None:
        trainer.args.use_vllm = True
        try:
            rewards.attach(trainer)
        finally:
            trainer.args.use_vllm = False

    train_grpo(model, tokenizer, chat_rl_dataset(code_rl_records(PROFILE)[:4]), rewards, PROFILE, str(tmp_path),
               max_steps=2, hooks=[attach_as_under_vllm], shuffle_dataset=False, disable_tqdm=True)
    stats = rewards.summary()
    assert stats["sent_after_generation"] == stats["completions"] == 16  # every rollout, before scoring began
    assert stats["sent_while_generating"] == 0 and stats["reverified"] == 0  # the texts TRL scored were those sent
    assert "generate" not in vars(model) and not rewards.running  # the model's generate was never wrapped


def _metrics(rise: float) -> dict:
    """Chapter metrics for two arms: the hot arm's entropy rises by ``rise`` a step and it solves op 3."""
    def samples(score):
        return [{"domain": d, "think": t, "score": score if d == "code" else 0.5, "tokens": 10, "repetition": 0.0,
                 "op": op} for op in (2, 3) for d in ("code", "math", "instructions") for t in (True, False)
                for _ in range(4)]
    curve = [{"step": s, "entropy": 1.0, "frac_reward_zero_std": 1.0} for s in range(8)]
    hot = [{"step": s, "entropy": 1.0 + rise * s, "frac_reward_zero_std": 0.5} for s in range(8)]
    per = {START: samples(0.0), arm_name(0.6): samples(0.0), arm_name(1.0): samples(1.0)}
    return {"per_sample": per, "code_per_sample": per, "cascade_arm": arm_name(1.0),
            "runs": {arm_name(0.6): {"temperature": 0.6, "curves": curve},
                     arm_name(1.0): {"temperature": 1.0, "curves": hot}}}


def test_claims_follow_their_intervals() -> None:
    assert [r["verdict"] for r in claims(_metrics(0.1))] == ["reproduced"] * 8
    flat = claims(_metrics(0.0))
    assert flat[5]["verdict"] == "cannot tell" and entropy_growth(_metrics(0.0)["runs"][arm_name(1.0)]["curves"])[0] == 0
    assert signal_share([{"frac_reward_zero_std": 0.25}]) == [0.75]
    table = arm_table(_metrics(0.1))
    assert [r["arm"] for r in table] == [arm_name(0.6), arm_name(1.0)] and "op 3 think score" in table[0]


def test_claims_of_several_training_seeds_show_each_seeds_estimate() -> None:
    from cascadekit.chapters.ch12_code_rl import combine, seed_rows
    combined = combine({0: _metrics(0.1), 1: _metrics(0.0)})
    rows = claims(combined)
    assert rows[0]["family"] == "primary" and "(seeds: 1.000, 1.000)" in rows[0]["95% interval"]
    assert rows[5]["this run"] == pytest.approx((0.1 * 6 - 0.0) / 2)  # entropy: last 2 steps minus first 2, per seed
    assert "(seeds: 0.600, 0.000)" in rows[5]["95% interval"]
    assert [r["train seed"] for r in seed_rows(combined)] == [0, 1]
    other = _metrics(0.1)
    other["cascade_arm"] = arm_name(0.6)
    with pytest.raises(ValueError, match="another cascade_arm"):
        combine({0: _metrics(0.1), 1: other})
